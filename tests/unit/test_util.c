/* util: ids, time, JSON truncation and parsing, the log; core/error: the envelope. */
#define _GNU_SOURCE
#include "support.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

static void test_uuid7_is_versioned_and_ordered(void **state) {
  char a[TG_UUID_LEN + 1], b[TG_UUID_LEN + 1];
  assert_int_equal(tg_uuid7(a), 0);
  assert_int_equal(strlen(a), 36);
  assert_int_equal(a[14], '7');
  assert_true(strchr("89ab", a[19]) != NULL);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) assert_int_equal(a[i], '-');
    else assert_true(strchr("0123456789abcdef", a[i]) != NULL);
  }
  /* The first 48 bits are the time in milliseconds. */
  char ms_hex[13];
  memcpy(ms_hex, a, 8);
  memcpy(ms_hex + 8, a + 9, 4);
  ms_hex[12] = '\0';
  long long ms = strtoll(ms_hex, NULL, 16);
  assert_true(ms <= tg_now_ms() && ms > tg_now_ms() - 5000);
  for (int i = 0; i < 5000; i++) { /* many per millisecond: still strictly increasing */
    assert_int_equal(tg_uuid7(b), 0);
    assert_true(strcmp(a, b) < 0);
    memcpy(a, b, sizeof a);
  }
}

static void test_hex(void **state) {
  char out[9];
  tg_hex((const unsigned char[]){0x00, 0x9f, 0xa0, 0xff}, 4, out);
  assert_string_equal(out, "009fa0ff");
}

static void test_tokens_are_random_and_hashed(void **state) {
  char t1[TG_TOKEN_LEN + 1], t2[TG_TOKEN_LEN + 1], h[65];
  assert_int_equal(tg_token_new(t1), 0);
  assert_int_equal(tg_token_new(t2), 0);
  assert_int_equal(strlen(t1), TG_TOKEN_LEN);
  assert_memory_equal(t1, "tg_", 3);
  assert_string_not_equal(t1, t2);
  tg_sha256_hex("abc", 3, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_iso8601(void **state) {
  char out[TG_ISO_LEN + 1];
  tg_iso8601(1764504896789LL, out);
  assert_string_equal(out, "2025-11-30T12:14:56.789Z");
  tg_iso8601(951782400007LL, out); /* a leap day, single digits everywhere */
  assert_string_equal(out, "2000-02-29T00:00:00.007Z");
  tg_iso8601(-1, out);
  assert_string_equal(out, "1970-01-01T00:00:00.000Z");
  tg_iso8601(INT64_MAX, out);
  assert_string_equal(out, "9999-12-31T23:59:59.999Z");
}

static void test_truncate_keeps_small_values(void **state) {
  json_t *v = json_pack("{s:s}", "a", "b");
  json_t *t = tg_json_truncate(v, 1024);
  assert_ptr_equal(t, v);
  json_decref(t);
  json_decref(v);
}

static void test_truncate_is_valid_bounded_and_marked(void **state) {
  /* Quotes and multi-byte characters: escaping grows the preview, cuts must not split. */
  char big[6000];
  size_t n = 0;
  while (n + 3 < sizeof big - 1) {
    memcpy(big + n, n % 2 ? "\"" : "\xc3\xa9", n % 2 ? 1 : 2);
    n += n % 2 ? 1 : 2;
  }
  big[n] = '\0';
  json_t *v = json_pack("{s:s}", "body", big);
  assert_non_null(v);
  for (size_t max = 64; max <= 1024; max *= 2) {
    json_t *t = tg_json_truncate(v, max);
    assert_non_null(t);
    assert_true(json_is_true(json_object_get(t, "truncated")));
    assert_true(json_integer_value(json_object_get(t, "bytes")) > (json_int_t)max);
    char *text = json_dumps(t, JSON_COMPACT);
    assert_true(strlen(text) <= max);
    json_t *back = json_loads(text, 0, NULL); /* valid JSON, valid UTF-8 */
    assert_non_null(back);
    json_decref(back);
    free(text);
    json_decref(t);
  }
  json_decref(v);
}

static void test_utf8_prefix_ends_on_a_character(void **state) {
  const char *s = "ab\xc3\xa9\xe2\x82\xac"; /* a b é € : 2 + 2 + 3 bytes */
  assert_int_equal(tg_utf8_prefix(s, 100), 7);
  assert_int_equal(tg_utf8_prefix(s, 7), 7);
  assert_int_equal(tg_utf8_prefix(s, 6), 4); /* inside the euro sign */
  assert_int_equal(tg_utf8_prefix(s, 5), 4);
  assert_int_equal(tg_utf8_prefix(s, 4), 4);
  assert_int_equal(tg_utf8_prefix(s, 3), 2); /* inside the é */
  assert_int_equal(tg_utf8_prefix(s, 0), 0);
}

static void test_utf8_mend_and_valid_agree_with_jansson(void **state) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
      {"ab\xc3", "ab"},             /* an é cut short by the end */
      {"x\xe2\x82", "x"},           /* a euro sign cut short */
      {"\xf0\x9f\x98", ""},         /* an emoji cut short */
      {"a\xc3(b", "a?(b"},          /* a lead with no continuation, mid-text */
      {"\x80x", "?x"},              /* a lone continuation byte */
      {"\xc0\xaf", "??"},           /* an overlong '/' */
      {"\xed\xa0\x80", "???"},      /* a surrogate */
      {"\xf4\x90\x80\x80", "????"}, /* past U+10FFFF */
      {"\xff\xfe", "??"},
      {"", ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[32];
    snprintf(text, sizeof text, "%s", cases[i].in);
    assert_int_equal(tg_utf8_valid(text, strlen(text)), strcmp(cases[i].in, cases[i].out) == 0);
    json_t *raw = json_string(text); /* jansson takes what is valid, and only that */
    assert_int_equal(raw != NULL, tg_utf8_valid(text, strlen(text)));
    json_decref(raw);
    tg_utf8_mend(text);
    assert_true(tg_utf8_valid(text, strlen(text)));
    assert_string_equal(text, cases[i].out);
    json_t *taken = json_string(text);
    assert_non_null(taken);
    json_decref(taken);
  }
  /* A character is read within the bytes given: one they end within is none. */
  assert_int_equal(tg_utf8_char("\xc3\xa9", 2), 2);
  assert_int_equal(tg_utf8_char("\xc3\xa9", 1), 0);
  assert_int_equal(tg_utf8_char("\0x", 2), 1); /* a NUL byte is a character */
  assert_int_equal(tg_utf8_char("x", 0), 0);
  assert_false(tg_utf8_valid("a\xc3\xa9", 2));
  assert_true(tg_utf8_valid("a\0b", 3));
  /* What "%.*s" with TG_UTF8_CUT writes ends on a character. */
  char cut[16];
  snprintf(cut, sizeof cut, "[%.*s]", TG_UTF8_CUT("\xc3\xa9\xc3\xa9", 3));
  assert_string_equal(cut, "[\xc3\xa9]");
}

static void test_parse_bounds_and_reports(void **state) {
  char *why = NULL;
  assert_null(tg_json_parse("{\"a\":", 100, &why));
  assert_non_null(strstr(why, "line 1"));
  free(why);
  why = NULL;
  assert_null(tg_json_parse("[1,2,3]", 3, &why));
  assert_non_null(strstr(why, "over the limit"));
  free(why);
  why = NULL;
  assert_null(tg_json_parse("{\"a\":1,\"a\":2}", 100, &why));
  free(why);
  json_t *ok = tg_json_parse("[1]", 100, &why);
  assert_non_null(ok);
  json_decref(ok);
}

static void test_error_envelope(void **state) {
  static const char *const wire[] = {"permission_denied", "not_found", "validation_failed",
                                     "budget_exceeded", "rate_limited", "precondition_failed",
                                     "provider_error", "internal_error"};
  for (int code = 1; code <= 8; code++) {
    assert_string_equal(tg_errcode_name((tg_errcode)code), wire[code - 1]);
    assert_int_equal(tg_errcode_parse(wire[code - 1]), code);
  }
  assert_null(tg_errcode_name(TG_ERR_NONE));
  assert_null(tg_errcode_name((tg_errcode)9));
  json_t *e = tg_error_envelope(TG_ERR_NOT_FOUND, NULL, json_pack("{s:i}", "x", 1));
  json_t *inner = json_object_get(e, "error");
  assert_string_equal(json_string_value(json_object_get(inner, "code")), "not_found");
  assert_string_equal(json_string_value(json_object_get(inner, "message")),
                      tg_errcode_message(TG_ERR_NOT_FOUND));
  assert_int_equal(json_integer_value(json_object_get(json_object_get(inner, "details"), "x")), 1);
  assert_int_equal(json_object_size(e), 1);
  json_decref(e);
}

/* Every status a log may show has words of its own; one it does not know says so. */
static void test_status_text(void **state) {
  const char *seen[16];
  for (int status = TG_OK; status >= TG_E_LOCKED; status--) {
    seen[-status] = tg_status_text(status);
    assert_string_not_equal(seen[-status], "unknown status");
    for (int other = TG_OK; other > status; other--) assert_string_not_equal(seen[-other], seen[-status]);
  }
  assert_string_equal(tg_status_text(TG_E_BUSY), "the database stayed locked");
  assert_string_equal(tg_status_text(TG_E_LOCKED - 1), "unknown status");
}

/* A kind of line a client can cause is let through once a minute. */
static void test_log_once_a_minute(void **state) {
  _Atomic int64_t last = 0;
  assert_true(tg_log_may(&last));
  int64_t logged = atomic_load(&last);
  assert_true(logged > 0);
  assert_false(tg_log_may(&last));
  assert_int_equal(atomic_load(&last), logged); /* held back: the minute still runs */
  atomic_store(&last, logged - TG_LOG_ONCE_MS);
  assert_true(tg_log_may(&last));
}

static void *log_a_line(void *arg) {
  tg_log(TG_LOG_WARN, "%s", (const char *)arg);
  return NULL;
}

/* What stderr holds, read until it has nothing more (from, non-blocking): a new string. */
static char *drain(int from) {
  char *got = malloc(1 << 17);
  size_t n = 0;
  for (ssize_t r; n < (1 << 17) - 1 && (r = read(from, got + n, (1 << 17) - 1 - n)) > 0;)
    n += (size_t)r;
  got[n] = 0;
  return got;
}

/* A stderr no one reads (a full pipe) never holds up a line: it is dropped, and counted once
 * stderr takes lines again. A line past PIPE_BUF is cut, and says so. */
static void test_log_never_waits_for_stderr(void **state) {
  (void)state;
  int saved = dup(STDERR_FILENO), p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
  assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0); /* to fill it here */
  static const char fill[4096];
  while (write(p[1], fill, sizeof fill) > 0) continue;
  assert_int_equal(fcntl(p[1], F_SETFL, 0), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, log_a_line, "lost"), 0);
  struct timespec guard;
  clock_gettime(CLOCK_REALTIME, &guard);
  guard.tv_sec += 30; /* a hang guard, not a timing check */
  int ended = pthread_timedjoin_np(t, NULL, &guard);
  free(drain(p[0]));
  if (ended != 0) pthread_join(t, NULL); /* it went out once drained: a failure all the same */
  tg_log(TG_LOG_INFO, "after");
  char *after = drain(p[0]);
  char *long_text = malloc(2 * PIPE_BUF);
  memset(long_text, 'x', 2 * PIPE_BUF - 1);
  long_text[2 * PIPE_BUF - 1] = 0;
  tg_log(TG_LOG_INFO, "%s", long_text);
  free(long_text);
  char *cut = drain(p[0]);
  /* Cut at a character's start: the head ("<time> info: ", 31 bytes) puts the byte at the
   * cut inside a two-byte character. */
  char *accents = malloc(2 * PIPE_BUF + 1);
  for (int i = 0; i < PIPE_BUF; i++) memcpy(accents + 2 * i, "\xc3\xa9", 2);
  accents[2 * PIPE_BUF] = 0;
  tg_log(TG_LOG_INFO, "%s", accents);
  free(accents);
  char *cut_accents = drain(p[0]);
  dup2(saved, STDERR_FILENO); /* before any assertion, which reports there */
  close(saved);
  close(p[0]);
  close(p[1]);
  assert_int_equal(ended, 0);
  assert_non_null(strstr(after, "warn: 1 log line was dropped: stderr took none\n"));
  assert_non_null(strstr(after, "info: after\n"));
  assert_null(strstr(after, "lost"));
  assert_int_equal(strlen(cut), PIPE_BUF);
  assert_string_equal(cut + PIPE_BUF - 5, "x...\n");
  size_t n = strlen(cut_accents);
  assert_true(n <= PIPE_BUF && n > PIPE_BUF - 8);
  assert_string_equal(cut_accents + n - 6, "\xc3\xa9...\n");
  free(after);
  free(cut);
  free(cut_accents);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uuid7_is_versioned_and_ordered),
      cmocka_unit_test(test_hex),
      cmocka_unit_test(test_tokens_are_random_and_hashed),
      cmocka_unit_test(test_iso8601),
      cmocka_unit_test(test_truncate_keeps_small_values),
      cmocka_unit_test(test_truncate_is_valid_bounded_and_marked),
      cmocka_unit_test(test_utf8_prefix_ends_on_a_character),
      cmocka_unit_test(test_utf8_mend_and_valid_agree_with_jansson),
      cmocka_unit_test(test_parse_bounds_and_reports),
      cmocka_unit_test(test_error_envelope),
      cmocka_unit_test(test_status_text),
      cmocka_unit_test(test_log_once_a_minute),
      cmocka_unit_test(test_log_never_waits_for_stderr),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The rate limit on a caller's tool calls (core/rate_limit.c), on a clock the test moves: a
 * burst of the limit goes, the next call waits as long as the refill takes, callers do not
 * share, refusals get a telemetry row a second that counts those before it, and the callers
 * counted stay bounded. */
#include "support.h"

#include <stdio.h>
#include <string.h>

#include "core/rate_limit.h"
#include "util/status.h"

#define MS 1000000ull

static uint64_t now_ns;
static uint64_t test_clock(void) { return now_ns; }

static tg_rate_limit *limit_of(unsigned calls, unsigned seconds) {
  tg_rate_limit *limit = tg_rate_limit_new(calls, seconds);
  assert_non_null(limit);
  tg_rate_limit_set_clock(limit, test_clock);
  now_ns = 1000 * MS;
  return limit;
}

static tg_rate_verdict take(tg_rate_limit *limit, const char *who) {
  tg_rate_verdict v;
  assert_int_equal(tg_rate_limit_take(limit, who, &v), TG_OK);
  return v;
}

static void test_parse(void **state) {
  (void)state;
  unsigned calls = 9, seconds = 9;
  assert_int_equal(tg_rate_limit_parse("600/60", &calls, &seconds), TG_OK);
  assert_int_equal(calls, 600);
  assert_int_equal(seconds, 60);
  assert_int_equal(tg_rate_limit_parse("1000000000/86400", &calls, &seconds), TG_OK);
  assert_int_equal(calls, TG_RATE_LIMIT_MAX_CALLS);
  assert_int_equal(tg_rate_limit_parse("off", &calls, &seconds), TG_OK);
  assert_int_equal(calls, 0);
  const char *bad[] = {"", "off ", "60", "/60", "60/", "0/60", "60/0", "-1/60", "60/-1",
                       "1000000001/1", "1/86401", "99999999999/1", "6 0/60", "60/60s", "60//60",
                       "+6/60", "0x10/60", "60/1/1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (tg_rate_limit_parse(bad[i], &calls, &seconds) != TG_E_INVAL) fail_msg("took '%s'", bad[i]);
  }
  /* The default is one it takes. */
  assert_int_equal(tg_rate_limit_parse(TG_RATE_LIMIT_DEFAULT, &calls, &seconds), TG_OK);
}

static void test_a_burst_goes_then_the_refill_paces(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(3, 6); /* one call every 2 s, three at once */
  for (int i = 0; i < 3; i++) assert_true(take(limit, "a").allowed);
  tg_rate_verdict v = take(limit, "a");
  assert_false(v.allowed);
  assert_int_equal(v.calls, 3);
  assert_int_equal(v.seconds, 6);
  assert_int_equal(v.retry_after_ms, 2000);
  now_ns += 1500 * MS;
  v = take(limit, "a");
  assert_false(v.allowed);
  assert_int_equal(v.retry_after_ms, 500);
  now_ns += 500 * MS;
  assert_true(take(limit, "a").allowed);
  assert_false(take(limit, "a").allowed);
  /* Left alone for the whole window, the bucket is full again: three, not more. */
  now_ns += 60000 * MS;
  for (int i = 0; i < 3; i++) assert_true(take(limit, "a").allowed);
  assert_false(take(limit, "a").allowed);
  tg_rate_limit_free(limit);
}

static void test_one_call_a_window(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(1, 60);
  assert_true(take(limit, "a").allowed);
  tg_rate_verdict v = take(limit, "a");
  assert_false(v.allowed);
  assert_int_equal(v.retry_after_ms, 60000);
  now_ns += 60000 * MS;
  assert_true(take(limit, "a").allowed);
  tg_rate_limit_free(limit);
}

/* An interval that does not divide the window is rounded up: the sustained rate never
 * passes the limit, and a burst is the limit exactly. */
static void test_the_rate_never_passes_the_limit(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(3, 1); /* a call every 333.33 ms */
  for (int i = 0; i < 3; i++) assert_true(take(limit, "a").allowed);
  tg_rate_verdict v = take(limit, "a");
  assert_false(v.allowed);
  assert_int_equal(v.retry_after_ms, 334);
  now_ns += 333 * MS;
  assert_false(take(limit, "a").allowed);
  now_ns += 1 * MS;
  assert_true(take(limit, "a").allowed);
  tg_rate_limit_free(limit);
  /* 999,999 calls a second: an interval of 1,000.001 ns. Rounded down, a burst would let
   * 1,000,000 go. */
  limit = limit_of(999999, 1);
  unsigned went = 0;
  while (take(limit, "b").allowed) went++;
  assert_int_equal(went, 999999);
  tg_rate_limit_free(limit);
  limit = limit_of(2, 3); /* 1.5 s a call */
  assert_true(take(limit, "c").allowed);
  assert_true(take(limit, "c").allowed);
  assert_int_equal(take(limit, "c").retry_after_ms, 1500);
  tg_rate_limit_free(limit);
}

static void test_callers_do_not_share(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(2, 60);
  assert_true(take(limit, "a").allowed);
  assert_true(take(limit, "a").allowed);
  assert_false(take(limit, "a").allowed);
  assert_true(take(limit, "b").allowed);
  assert_true(take(limit, "b").allowed);
  assert_false(take(limit, "b").allowed);
  assert_int_equal(tg_rate_limit_callers(limit), 2);
  tg_rate_limit_free(limit);
}

/* Callers caller-FIRST up to the last TG_RATE_LIMIT_CALLERS holds, each making a call 1 ms
 * after the one before. */
static void fill_callers(tg_rate_limit *limit, unsigned first) {
  char who[32];
  for (unsigned i = first; i < TG_RATE_LIMIT_CALLERS; i++) {
    now_ns += 1 * MS;
    snprintf(who, sizeof who, "caller-%u", i);
    assert_true(take(limit, who).allowed);
  }
}

/* The first refusal gets a row; those in the next second get none, and the next row, a
 * second on, counts them with itself. */
static void test_refusals_get_a_row_a_second(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(1, 3600);
  assert_true(take(limit, "a").allowed);
  assert_int_equal(take(limit, "a").refusals, 1);
  for (int i = 0; i < 5; i++) {
    now_ns += 100 * MS;
    tg_rate_verdict v = take(limit, "a");
    assert_false(v.allowed);
    assert_int_equal(v.refusals, 0);
  }
  now_ns += TG_RATE_LIMIT_ROW_MS * MS;
  assert_int_equal(take(limit, "a").refusals, 6);
  assert_int_equal(take(limit, "a").refusals, 0);
  /* Another caller's refusals are its own. */
  assert_true(take(limit, "b").allowed);
  assert_int_equal(take(limit, "b").refusals, 1);
  tg_rate_limit_free(limit);
}

/* Past TG_RATE_LIMIT_CALLERS callers, one that holds nothing (its bucket full again, no
 * refusal owed a row) is forgotten first; with none such, the one whose bucket is fullest
 * (here, of a call each, the one that called least recently). */
static void test_callers_counted_are_bounded(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(1, 10);
  now_ns -= 1 * MS; /* caller-I calls at 1,000 + I ms */
  fill_callers(limit, 0);
  now_ns += 1 * MS;
  assert_int_equal(tg_rate_limit_callers(limit), TG_RATE_LIMIT_CALLERS);
  /* Every bucket is still refilling: the fullest, caller-0's, is forgotten. */
  assert_true(take(limit, "newcomer").allowed);
  assert_int_equal(tg_rate_limit_callers(limit), TG_RATE_LIMIT_CALLERS);
  assert_true(take(limit, "caller-0").allowed); /* counted afresh; caller-1 forgotten */
  assert_false(take(limit, "caller-2").allowed);
  assert_false(take(limit, "newcomer").allowed);
  /* At 11,002.5 ms caller-2's bucket (its call at 1,002 ms) is full again: it holds nothing
   * and goes, though caller-3 (its call at 1,003 ms) called less recently. */
  now_ns = 11002 * MS + MS / 2;
  assert_true(take(limit, "another").allowed);
  assert_int_equal(tg_rate_limit_callers(limit), TG_RATE_LIMIT_CALLERS);
  tg_rate_verdict v = take(limit, "caller-3");
  assert_false(v.allowed);
  assert_int_equal(v.retry_after_ms, 1);
  assert_false(take(limit, "newcomer").allowed);
  tg_rate_limit_free(limit);
}

/* With no caller holding nothing, the fullest bucket of those owing no row goes, not the
 * fullest of all, whose refusal still owes its row. */
static void test_a_caller_owing_a_row_is_kept(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(1, 3600);
  assert_true(take(limit, "owing").allowed);
  assert_int_equal(take(limit, "owing").refusals, 1);
  assert_int_equal(take(limit, "owing").refusals, 0); /* owes its row */
  fill_callers(limit, 1);
  now_ns += 1 * MS;
  assert_true(take(limit, "newcomer").allowed);
  assert_int_equal(tg_rate_limit_callers(limit), TG_RATE_LIMIT_CALLERS);
  assert_false(take(limit, "owing").allowed);
  assert_true(take(limit, "caller-1").allowed); /* forgotten, so counted afresh */
  tg_rate_limit_free(limit);
}

/* Forgotten, a caller would get a full bucket: of those owing no row, the one whose bucket
 * is fullest goes, not a caller that spent its own, though it called least recently. */
static void test_the_fullest_bucket_is_forgotten(void **state) {
  (void)state;
  tg_rate_limit *limit = limit_of(2, 3600);
  assert_true(take(limit, "spent").allowed);
  assert_true(take(limit, "spent").allowed);
  assert_int_equal(take(limit, "spent").refusals, 1); /* its row written: it owes none */
  fill_callers(limit, 1);                             /* a call each, half a bucket left */
  now_ns += 1 * MS;
  assert_true(take(limit, "newcomer").allowed);
  assert_false(take(limit, "spent").allowed);
  tg_rate_limit_free(limit);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_a_burst_goes_then_the_refill_paces),
      cmocka_unit_test(test_one_call_a_window),
      cmocka_unit_test(test_the_rate_never_passes_the_limit),
      cmocka_unit_test(test_callers_do_not_share),
      cmocka_unit_test(test_refusals_get_a_row_a_second),
      cmocka_unit_test(test_callers_counted_are_bounded),
      cmocka_unit_test(test_a_caller_owing_a_row_is_kept),
      cmocka_unit_test(test_the_fullest_bucket_is_forgotten),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

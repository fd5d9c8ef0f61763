/* What an Accept header takes (RFC 9110 §12.5.1) and what counts as a JSON Content-Type: a
 * table of headers, each with the quality it gives a type and whether it names it. */
#include "support.h"

#include <stdio.h>
#include <string.h>

#include "http/media.h"

#define SSE "text/event-stream"
#define JSON "application/json"

static void test_accept(void **state) {
  static const struct {
    const char *accept, *type;
    int quality;
    bool named;
  } cases[] = {
      {NULL, SSE, 1000, false}, /* no Accept takes everything */
      {"", SSE, 0, false},      /* an empty one, nothing */
      {JSON ", " SSE, SSE, 1000, true},
      {JSON ", " SSE, JSON, 1000, true},
      {JSON, SSE, 0, false},
      {"TEXT/Event-Stream", SSE, 1000, true},
      {" \t" SSE " \t", SSE, 1000, true},
      {"text/*", SSE, 1000, false},
      {"*/*", SSE, 1000, false},
      {"text/event-streams", SSE, 0, false},
      {"text/event", SSE, 0, false},
      {"application/*", SSE, 0, false},
      {"*/event-stream", SSE, 0, false},
      /* Qualities. */
      {SSE ";q=0.5", SSE, 500, true},
      {SSE ";Q=0.25", SSE, 250, true},
      {SSE "; q = 0.125 ", SSE, 125, true},
      {SSE ";q=0", SSE, 0, false},
      {SSE ";q=0.", SSE, 0, false},
      {SSE ";q=0.000", SSE, 0, false},
      {SSE ";q=1", SSE, 1000, true},
      {SSE ";q=1.000", SSE, 1000, true},
      {SSE ";q=1.5", SSE, 0, false},     /* no qvalue: the range counts for nothing */
      {SSE ";q=0.0001, */*", SSE, 1000, false},
      {SSE ";q=abc", SSE, 0, false},
      {SSE ";q=", SSE, 0, false},
      {SSE ";q=abc, */*", SSE, 1000, false},
      {SSE ";level=1;q=0.5", SSE, 500, true},
      /* The most specific range decides, whatever the others say. */
      {"*/*;q=0, " SSE, SSE, 1000, true},
      {SSE ";q=0, */*", SSE, 0, false},
      {"text/*;q=0.5, */*;q=0.1", SSE, 500, false},
      {"*/*;q=0.1, text/*;q=0", SSE, 0, false},
      /* Among equals, the highest quality. */
      {SSE ";q=0, " SSE, SSE, 1000, true},
      {SSE ", " SSE ";q=0", SSE, 1000, true},
      {SSE ";q=0.2, " SSE ";q=0.7", SSE, 700, true},
      /* Quoted strings hold commas and semicolons. */
      {SSE ";foo=\"a,b\";q=0", SSE, 0, false},
      {SSE ";foo=\"a;q=0;b\"", SSE, 1000, true},
      {SSE ";foo=\"a\\\";q=0\"", SSE, 1000, true}, /* an escaped quote stays quoted */
      {JSON ";foo=\"x, " SSE "\"", SSE, 0, false},
      /* Empty elements. */
      {",, " SSE " ,", SSE, 1000, true},
      {";q=0", SSE, 0, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tg_accept got = tg_http_accepts(cases[i].accept, cases[i].type);
    if (got.quality != cases[i].quality || got.named != cases[i].named)
      fail_msg("case %zu, Accept '%s' for %s: quality %d%s, expected %d%s", i,
               cases[i].accept ? cases[i].accept : "(none)", cases[i].type, got.quality,
               got.named ? " named" : "", cases[i].quality, cases[i].named ? " named" : "");
  }
}

static void test_json_content_type(void **state) {
  static const char *const json[] = {JSON,
                                     "Application/JSON",
                                     " " JSON " ",
                                     JSON "; charset=utf-8",
                                     JSON ";charset=\"utf-8\"",
                                     JSON "; foo=bar; Charset=UTF-8 ",
                                     JSON "; charset=utf8",
                                     JSON "; charset=US-ASCII"};
  static const char *const other[] = {"",
                                      "text/plain",
                                      "application/jsonl",
                                      "application/json-seq",
                                      "application/*",
                                      "*/*",
                                      "json",
                                      "application/ json",
                                      JSON "; charset=latin1",
                                      JSON "; charset=\"utf-16\"",
                                      JSON "; charset="};
  for (size_t i = 0; i < sizeof json / sizeof json[0]; i++)
    if (!tg_http_is_json(json[i])) fail_msg("'%s' is JSON", json[i]);
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (tg_http_is_json(other[i])) fail_msg("'%s' is no JSON", other[i]);
  assert_false(tg_http_is_json(NULL));
}

/* A field's value is read without the spaces and tabs around it, and only those. */
static void test_field_value(void **state) {
  static const struct {
    const char *value, *kept;
  } cases[] = {{"", ""},        {" \t ", ""},         {"abc", "abc"},         {" \tabc\t ", "abc"},
               {"a b", "a b"}, {"\t a\tb \t", "a\tb"}, {"\rabc\n", "\rabc\n"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len;
    const char *at = tg_http_field_value(cases[i].value, &len);
    if (len != strlen(cases[i].kept) || strncmp(at, cases[i].kept, len) != 0)
      fail_msg("case %zu: '%.*s', expected '%s'", i, (int)len, at, cases[i].kept);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accept),
      cmocka_unit_test(test_json_content_type),
      cmocka_unit_test(test_field_value),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

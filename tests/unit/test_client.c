/* What a client can answer: each kind of request against the capabilities it declared, and
 * what a request needs when it cannot. */
#define _GNU_SOURCE
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "util/cleanup.h"
#include "util/status.h"

/* Whether a client declaring caps (JSON text) can answer method with params (JSON text). */
static bool can(const char *caps, const char *method, const char *params) {
  _cleanup_json_ json_t *c = json_loads(caps, 0, NULL), *p = json_loads(params, 0, NULL);
  assert_non_null(c);
  assert_non_null(p);
  return tg_client_can(c, method, p);
}

static void test_declared_kinds(void **state) {
  assert_true(can("{\"sampling\":{}}", "sampling/createMessage", "{}"));
  assert_false(can("{\"roots\":{}}", "sampling/createMessage", "{}"));
  assert_true(can("{\"roots\":{\"listChanged\":true}}", "roots/list", "{}"));
  assert_false(can("{\"sampling\":true}", "sampling/createMessage", "{}")); /* not an object */
  assert_false(can("{\"sampling\":{}}", "ping", "{}"));                     /* no such kind */
  assert_false(can("{}", "sampling/createMessage", "{}"));
}

/* Where ClientCapabilities has an object, anything else is malformed; what it does not
 * define is left alone. */
static void test_malformed_capabilities(void **state) {
  static const char *const malformed[] = {
      "{\"sampling\":true}", "{\"elicitation\":\"form\"}", "{\"roots\":[]}",
      "{\"experimental\":null}", "{\"extensions\":[]}",
      "{\"extensions\":{\"io.modelcontextprotocol/tasks\":true}}",
      "{\"elicitation\":{\"url\":false}}", "{\"elicitation\":{\"form\":null}}",
      "{\"sampling\":{\"tools\":1}}", "{\"experimental\":{\"x\":\"y\"}}"};
  static const char *const wellformed[] = {
      "{}", "{\"sampling\":{},\"elicitation\":{\"url\":{}},\"roots\":{\"listChanged\":true}}",
      "{\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}", "{\"someday\":7}",
      "{\"sampling\":{\"context\":{},\"tools\":{}},\"experimental\":{\"x\":{}}}"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    _cleanup_json_ json_t *caps = json_loads(malformed[i], 0, NULL);
    assert_true(tg_client_capabilities_malformed(caps));
  }
  for (size_t i = 0; i < sizeof wellformed / sizeof wellformed[0]; i++) {
    _cleanup_json_ json_t *caps = json_loads(wellformed[i], 0, NULL);
    assert_false(tg_client_capabilities_malformed(caps));
  }
}

/* An empty elicitation object is form mode alone; url mode must be named. */
static void test_elicitation_modes(void **state) {
  const char *form = "{\"message\":\"m\"}", *url = "{\"mode\":\"url\",\"url\":\"https://x\"}";
  assert_true(can("{\"elicitation\":{}}", "elicitation/create", form));
  assert_false(can("{\"elicitation\":{}}", "elicitation/create", url));
  assert_true(can("{\"elicitation\":{\"url\":{}}}", "elicitation/create", url));
  assert_false(can("{\"elicitation\":{\"url\":{}}}", "elicitation/create", form));
  assert_true(can("{\"elicitation\":{\"form\":{},\"url\":{}}}", "elicitation/create", form));
  assert_true(can("{\"elicitation\":{\"form\":{},\"url\":{}}}", "elicitation/create", url));
  assert_true(can("{\"elicitation\":{\"form\":{}}}", "elicitation/create",
                  "{\"mode\":\"form\",\"message\":\"m\"}"));
  /* A mode is declared by an object: anything else declares none. */
  assert_false(can("{\"elicitation\":{\"url\":false}}", "elicitation/create", url));
  assert_false(can("{\"elicitation\":{\"form\":true}}", "elicitation/create", form));
}

static void expect_requirement(const char *method, const char *params, const char *want) {
  _cleanup_json_ json_t *p = json_loads(params, 0, NULL), *w = json_loads(want, 0, NULL);
  _cleanup_json_ json_t *got = NULL;
  assert_int_equal(tg_client_requirement(method, p, &got), 0);
  assert_true(json_equal(got, w));
}

static void test_requirements(void **state) {
  expect_requirement("sampling/createMessage", "{}", "{\"sampling\":{}}");
  expect_requirement("elicitation/create", "{}", "{\"elicitation\":{\"form\":{}}}");
  expect_requirement("elicitation/create", "{\"mode\":\"url\"}", "{\"elicitation\":{\"url\":{}}}");
  json_t *none = NULL;
  assert_int_equal(tg_client_requirement("tools/list", NULL, &none), TG_E_INVAL);
  assert_null(none);
  /* What two requests need, merged, is enough for both: a client that declares it can
   * answer each. */
  _cleanup_json_ json_t *url = json_pack("{s:s}", "mode", "url"), *form = json_object();
  _cleanup_json_ json_t *both = NULL, *more = NULL;
  assert_int_equal(tg_client_requirement("elicitation/create", form, &both), 0);
  assert_int_equal(tg_client_requirement("elicitation/create", url, &more), 0);
  assert_int_equal(json_object_update_recursive(both, more), 0);
  assert_true(tg_client_can(both, "elicitation/create", form));
  assert_true(tg_client_can(both, "elicitation/create", url));
}

/* Whether text answers a request of method with params (JSON text; NULL: none). */
static bool reads_asked(const char *method, const char *params, const char *text) {
  _cleanup_json_ json_t *answer = json_loads(text, 0, NULL);
  _cleanup_json_ json_t *asked = params ? json_loads(params, 0, NULL) : NULL;
  assert_non_null(answer);
  assert_true(!params || asked);
  return tg_client_answer_reads(method, asked, answer);
}

static bool reads(const char *method, const char *text) { return reads_asked(method, NULL, text); }

static void test_answers(void **state) {
  static const char elicit[] = "elicitation/create", sample[] = "sampling/createMessage",
                    roots[] = "roots/list";
  assert_true(reads(elicit, "{\"action\":\"accept\",\"content\":{\"a\":\"x\",\"b\":2,\"c\":true,\"d\":[\"y\"]}}"));
  assert_true(reads(elicit, "{\"action\":\"decline\"}"));
  assert_true(reads(elicit, "{\"action\":\"cancel\"}"));
  /* Content comes only with accept. */
  assert_false(reads(elicit, "{\"action\":\"decline\",\"content\":{\"a\":\"x\"}}"));
  assert_false(reads(elicit, "{\"action\":\"cancel\",\"content\":[\"x\"]}"));
  assert_true(reads(elicit, "{\"action\":\"cancel\",\"content\":{}}"));
  assert_true(reads(elicit, "{\"action\":\"decline\",\"content\":null}"));
  assert_false(reads(elicit, "{\"action\":\"maybe\"}"));
  assert_false(reads(elicit, "{\"action\":\"accept\",\"content\":[]}"));
  assert_false(reads(elicit, "{\"action\":\"accept\",\"content\":{\"a\":{}}}"));
  assert_false(reads(elicit, "{\"action\":\"accept\",\"content\":{\"a\":[1]}}"));
  assert_true(reads(roots, "{\"roots\":[{\"uri\":\"file:///a\",\"name\":\"a\"}]}"));
  assert_true(reads(roots, "{\"roots\":[]}"));
  assert_false(reads(roots, "{\"roots\":{}}"));
  assert_false(reads(roots, "{\"roots\":[{\"name\":\"a\"}]}"));
  assert_false(reads(roots, "{\"roots\":[{\"uri\":\"http://x\"}]}"));
  assert_false(reads(roots, "{\"roots\":[{\"uri\":\"file://\"}]}"));
  assert_false(reads(roots, "{\"roots\":[{\"uri\":\"file:///a\",\"name\":5}]}"));
  assert_true(reads(sample, "{\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":\"t\"},\"model\":\"m\"}"));
  /* The content is one block or an array of them; a tool's use or result only when the
   * request offered tools. */
  static const char tools[] = "{\"messages\":[],\"maxTokens\":9,\"tools\":[]}";
  static const char blocks[] =
      "{\"role\":\"assistant\",\"content\":[{\"type\":\"image\",\"data\":\"AA==\",\"mimeType\":"
      "\"image/png\"},{\"type\":\"tool_use\",\"id\":\"u\",\"name\":\"n\",\"input\":{}},{\"type\":"
      "\"tool_result\",\"toolUseId\":\"u\"}],\"model\":\"m\",\"stopReason\":\"toolUse\"}";
  assert_true(reads_asked(sample, tools, blocks));
  assert_false(reads(sample, blocks));
  assert_true(reads_asked(sample, tools, "{\"role\":\"user\",\"content\":[],\"model\":\"m\"}"));
  assert_true(reads(sample, "{\"role\":\"user\",\"content\":[],\"model\":\"m\"}"));
  assert_true(reads(sample, "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
                            "\"t\"},{\"type\":\"audio\",\"data\":\"AA==\",\"mimeType\":\"a/b\"}],"
                            "\"model\":\"m\"}"));
  assert_false(reads(sample, "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
                             "\"t\"},{\"type\":\"tool_result\",\"toolUseId\":\"u\"}],\"model\":\"m\"}"));
  assert_false(reads(sample, "{\"role\":\"assistant\",\"content\":{\"type\":\"tool_use\",\"id\":"
                             "\"u\",\"name\":\"n\",\"input\":{}},\"model\":\"m\"}"));
  assert_true(reads(sample, "{\"role\":\"assistant\",\"content\":{\"type\":\"audio\",\"data\":"
                            "\"AA==\",\"mimeType\":\"audio/wav\"},\"model\":\"m\"}"));
  /* Each block has its kind's members. */
  static const char *const misfits[] = {
      "{}", "{\"type\":\"text\"}", "{\"type\":\"nonsense\"}", "{\"type\":\"image\",\"data\":\"AA==\"}",
      "[{\"type\":\"text\",\"text\":\"t\"},{\"type\":\"tool_use\",\"id\":\"u\",\"name\":\"n\"}]",
      "{\"type\":\"tool_result\",\"toolUseId\":\"u\",\"content\":{}}"};
  for (size_t i = 0; i < sizeof misfits / sizeof misfits[0]; i++) {
    char *text = NULL;
    assert_true(asprintf(&text, "{\"role\":\"assistant\",\"content\":%s,\"model\":\"m\"}", misfits[i]) > 0);
    if (reads_asked(sample, tools, text)) fail_msg("taken: %s", text);
    free(text);
  }
  assert_false(reads(sample, "{\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":\"t\"},"
                             "\"model\":\"m\",\"stopReason\":5}"));
  assert_false(reads(sample, "{\"role\":\"assistant\",\"content\":{}}"));
  assert_false(reads(sample, "{\"role\":\"system\",\"content\":{},\"model\":\"m\"}"));
  assert_false(reads(sample, "{\"role\":\"user\",\"content\":\"t\",\"model\":\"m\"}"));
  /* The answer to one kind of request is no answer to another. */
  assert_false(reads(sample, "{\"action\":\"accept\"}"));
  assert_false(reads(elicit, "{\"roots\":[]}"));
  assert_false(reads("tools/list", "{\"tools\":[]}"));
  /* Accepted content holds what the form asked for. */
  static const char form[] = "{\"message\":\"m\",\"requestedSchema\":{\"type\":\"object\","
                             "\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"required\":[\"ok\"]}}";
  assert_true(reads_asked(elicit, form, "{\"action\":\"accept\",\"content\":{\"ok\":true}}"));
  assert_false(reads_asked(elicit, form, "{\"action\":\"accept\",\"content\":{\"ok\":\"yes\"}}"));
  assert_false(reads_asked(elicit, form, "{\"action\":\"accept\",\"content\":{\"other\":1}}"));
  assert_false(reads_asked(elicit, form, "{\"action\":\"accept\"}"));
  assert_true(reads_asked(elicit, form, "{\"action\":\"decline\"}"));
}

/* Whether text, answering nothing asked, reads as an answer a client declaring caps (JSON
 * text) can give. */
static bool reads_unasked(const char *caps, const char *text) {
  _cleanup_json_ json_t *declared = json_loads(caps, 0, NULL), *answer = json_loads(text, 0, NULL);
  assert_true(declared && answer);
  return tg_client_unasked_answer_reads(declared, answer);
}

/* An answer sent before it was asked reads as one of the kind its shape tells, from a client
 * that declared it can give that kind; what asking kept of a request (its terms) checks its
 * answer as the request itself does. */
static void test_unasked_answers_and_terms(void **state) {
  static const char accepted[] = "{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}}",
                    sampled[] = "{\"role\":\"assistant\",\"content\":{\"type\":\"text\","
                                "\"text\":\"t\"},\"model\":\"m\"}",
                    listed[] = "{\"roots\":[{\"uri\":\"file:///a\"}]}";
  assert_true(reads_unasked("{\"elicitation\":{}}", accepted));
  assert_true(reads_unasked("{\"elicitation\":{\"url\":{}}}", "{\"action\":\"accept\"}"));
  assert_true(reads_unasked("{\"sampling\":{}}", sampled));
  assert_true(reads_unasked("{\"roots\":{}}", listed));
  assert_false(reads_unasked("{\"sampling\":{}}", accepted)); /* undeclared */
  assert_false(reads_unasked("{\"elicitation\":{}}", sampled));
  assert_false(reads_unasked("{}", listed));
  assert_false(reads_unasked("{\"sampling\":{}}", "{}"));
  assert_false(reads_unasked("{\"elicitation\":{}}", "{\"action\":\"accept\",\"content\":{\"a\":{}}}"));
  assert_false(reads_unasked("{\"roots\":{}}", "{\"roots\":[{\"uri\":\"http://x\"}]}"));
  static const char form[] = "{\"message\":\"m\",\"requestedSchema\":{\"type\":\"object\","
                             "\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"required\":[\"ok\"]}}";
  _cleanup_json_ json_t *params = json_loads(form, 0, NULL);
  _cleanup_json_ json_t *terms = tg_client_answer_terms("elicitation/create", params);
  assert_null(json_object_get(json_object_get(terms, "params"), "message"));
  _cleanup_json_ json_t *yes = json_loads("{\"action\":\"accept\",\"content\":{\"ok\":true}}", 0, NULL),
                        *no = json_loads("{\"action\":\"accept\",\"content\":{\"ok\":1}}", 0, NULL);
  const char *method = json_string_value(json_object_get(terms, "method"));
  assert_true(tg_client_answer_reads(method, json_object_get(terms, "params"), yes));
  assert_false(tg_client_answer_reads(method, json_object_get(terms, "params"), no));
  _cleanup_json_ json_t *offered = json_pack("{s:[],s:i,s:[]}", "messages", "maxTokens", 9, "tools");
  _cleanup_json_ json_t *sampling = tg_client_answer_terms("sampling/createMessage", offered);
  assert_true(json_is_true(json_object_get(json_object_get(sampling, "params"), "tools")));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unasked_answers_and_terms),
      cmocka_unit_test(test_declared_kinds),
      cmocka_unit_test(test_malformed_capabilities),
      cmocka_unit_test(test_elicitation_modes),
      cmocka_unit_test(test_requirements),
      cmocka_unit_test(test_answers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

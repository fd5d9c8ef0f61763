#define _GNU_SOURCE
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schema.h"
#include "core/schema_internal.h" /* where a compiled schema's nodes are */
#include "util/status.h"

/* The schema JSON is released right away: the compiled form must keep what it needs. */
static tg_schema *compile_opts(const char *text, const tg_schema_options *opts) {
  json_t *j = tg_test_json(text);
  tg_schema *s = NULL;
  char *err = NULL;
  int rc = tg_schema_compile(j, opts, &s, &err);
  json_decref(j);
  if (rc < 0) fail_msg("compiling %s failed (%d): %s", text, rc, err ? err : "?");
  assert_non_null(s);
  return s;
}

static tg_schema *compile_with(const char *text, json_t *documents) {
  return compile_opts(text, &(tg_schema_options){.documents = documents});
}

static tg_schema *compile(const char *text) { return compile_with(text, NULL); }

/* Compiles a schema that must be rejected; returns the message. */
static char *compile_error(const char *text, int expect_rc) {
  json_t *j = tg_test_json(text);
  tg_schema *s = NULL;
  char *err = NULL;
  int rc = tg_schema_compile(j, NULL, &s, &err);
  json_decref(j);
  assert_int_equal(rc, expect_rc);
  assert_null(s);
  assert_non_null(err);
  return err;
}

static bool valid(const tg_schema *s, const char *instance) {
  json_t *i = tg_test_json(instance);
  bool ok = tg_schema_validate(s, i, NULL, 0);
  json_decref(i);
  return ok;
}

/* Validates with error collection and checks it agrees with the verdict-only run. */
static json_t *errors_of(const tg_schema *s, const char *instance, size_t max) {
  json_t *i = tg_test_json(instance), *errors = json_array();
  bool ok = tg_schema_validate(s, i, errors, max);
  assert_int_equal(ok, tg_schema_validate(s, i, NULL, 0));
  assert_int_equal(ok, json_array_size(errors) == 0);
  json_decref(i);
  return errors;
}

static void assert_error(const json_t *e, const char *instance_path, const char *schema_path,
                         const char *keyword) {
  assert_string_equal(json_string_value(json_object_get(e, "instancePath")), instance_path);
  assert_string_equal(json_string_value(json_object_get(e, "schemaPath")), schema_path);
  assert_string_equal(json_string_value(json_object_get(e, "keyword")), keyword);
  assert_non_null(json_string_value(json_object_get(e, "message")));
}

static void test_nested_error_location(void **state) {
  (void)state;
  tg_schema *s = compile("{\"properties\": {\"a\": {\"type\": \"array\", "
                         "\"items\": {\"type\": \"string\"}}}}");
  json_t *errors = errors_of(s, "{\"a\": [\"x\", 5]}", 10);
  assert_int_equal(json_array_size(errors), 1);
  const json_t *e = json_array_get(errors, 0);
  assert_error(e, "/a/1", "/properties/a/items/type", "type");
  assert_string_equal(json_string_value(json_object_get(e, "message")),
                      "expected string, got integer");
  json_decref(errors);
  tg_schema_free(s);
}

static void test_error_location_through_ref(void **state) {
  (void)state;
  tg_schema *s = compile("{\"$defs\": {\"s~/\": {\"type\": \"string\", \"minLength\": 2}}, "
                         "\"properties\": {\"b/c\": {\"$ref\": \"#/$defs/s~0~1\"}}}");
  json_t *errors = errors_of(s, "{\"b/c\": \"x\"}", 10);
  assert_int_equal(json_array_size(errors), 1);
  assert_error(json_array_get(errors, 0), "/b~1c", "/properties/b~1c/$ref/minLength",
               "minLength");
  json_decref(errors);
  tg_schema_free(s);
}

static void test_max_errors(void **state) {
  (void)state;
  tg_schema *s = compile("{\"properties\": {\"a\": {\"type\": \"string\"}, \"b\": {\"type\": "
                         "\"string\"}, \"c\": {\"type\": \"string\"}}, \"required\": [\"d\"]}");
  const char *bad = "{\"a\": 1, \"b\": 2, \"c\": 3}";
  json_t *errors = errors_of(s, bad, 100);
  assert_int_equal(json_array_size(errors), 4);
  json_decref(errors);
  errors = errors_of(s, bad, 2);
  assert_int_equal(json_array_size(errors), 2);
  json_decref(errors);
  /* Room for none: still invalid, nothing appended. */
  json_t *i = tg_test_json(bad);
  errors = json_array();
  assert_false(tg_schema_validate(s, i, errors, 0));
  assert_int_equal(json_array_size(errors), 0);
  /* Errors already in the array are kept. */
  json_array_append_new(errors, json_string("earlier"));
  assert_false(tg_schema_validate(s, i, errors, 1));
  assert_int_equal(json_array_size(errors), 2);
  json_decref(errors);
  json_decref(i);
  tg_schema_free(s);
}

static void test_unresolvable_ref(void **state) {
  (void)state;
  char *err = compile_error("{\"properties\": {\"x\": {\"$ref\": \"other.json#/a\"}}}",
                            TG_E_NOTFOUND);
  assert_non_null(strstr(err, "#/properties/x/$ref"));
  assert_non_null(strstr(err, "other.json"));
  free(err);
  err = compile_error("{\"$ref\": \"#/$defs/missing\", \"$defs\": {}}", TG_E_NOTFOUND);
  assert_non_null(strstr(err, "#/$ref"));
  free(err);
  err = compile_error("{\"items\": {\"$ref\": \"#nowhere\"}}", TG_E_NOTFOUND);
  assert_non_null(strstr(err, "#/items/$ref"));
  free(err);
}

static void test_invalid_regex(void **state) {
  (void)state;
  char *err = compile_error("{\"properties\": {\"x\": {\"pattern\": \"a(\"}}}", TG_E_INVAL);
  assert_non_null(strstr(err, "#/properties/x/pattern"));
  assert_non_null(strstr(err, "regular expression"));
  free(err);
  err = compile_error("{\"patternProperties\": {\"[z-a]\": true}}", TG_E_INVAL);
  assert_non_null(strstr(err, "#/patternProperties/[z-a]"));
  free(err);
}

static void test_invalid_schema_values(void **state) {
  (void)state;
  char *err = compile_error("{\"properties\": {\"a\": {\"type\": \"text\"}}}", TG_E_INVAL);
  assert_non_null(strstr(err, "#/properties/a/type"));
  free(err);
  err = compile_error("{\"allOf\": [{}, 3]}", TG_E_INVAL);
  assert_non_null(strstr(err, "#/allOf/1"));
  free(err);
  free(compile_error("{\"multipleOf\": 0}", TG_E_INVAL));
  free(compile_error("{\"minLength\": -1}", TG_E_INVAL));
  free(compile_error("{\"$id\": \"http://x/y#frag\"}", TG_E_INVAL));
  free(compile_error("42", TG_E_INVAL));
}

static void test_length_counts_code_points(void **state) {
  (void)state;
  tg_schema *s = compile("{\"maxLength\": 2, \"minLength\": 2}");
  assert_true(valid(s, "\"\\u00e9\\ud83d\\ude00\"")); /* 2 code points in 6 bytes */
  assert_true(valid(s, "\"ab\""));
  assert_false(valid(s, "\"\\u00e9\\u00e9\\u00e9\""));
  assert_false(valid(s, "\"\\ud83d\\ude00\""));
  json_t *errors = errors_of(s, "\"\\u00e9\\u00e9\\u00e9\"", 5);
  assert_error(json_array_get(errors, 0), "", "/maxLength", "maxLength");
  json_decref(errors);
  tg_schema_free(s);
}

static void test_integer_type(void **state) {
  (void)state;
  tg_schema *s = compile("{\"type\": \"integer\"}");
  assert_true(valid(s, "1"));
  assert_true(valid(s, "1.0"));
  assert_true(valid(s, "-1e300"));
  assert_false(valid(s, "1.5"));
  assert_false(valid(s, "\"1\""));
  tg_schema_free(s);
  s = compile("{\"const\": 1, \"enum\": [1.0, 2]}");
  assert_true(valid(s, "1.0"));
  assert_false(valid(s, "true"));
  tg_schema_free(s);
}

static void test_numbers(void **state) {
  (void)state;
  tg_schema *s = compile("{\"multipleOf\": 0.0001}");
  assert_true(valid(s, "0.0075"));
  assert_false(valid(s, "0.00751"));
  tg_schema_free(s);
  s = compile("{\"exclusiveMaximum\": 9007199254740993}");
  assert_true(valid(s, "9007199254740992"));
  assert_false(valid(s, "9007199254740993"));
  tg_schema_free(s);
}

static void test_additional_properties_false(void **state) {
  (void)state;
  tg_schema *s = compile("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
                         "\"string\"}}, \"additionalProperties\": false}");
  assert_true(valid(s, "{\"name\": \"x\"}"));
  json_t *errors = errors_of(s, "{\"name\": \"x\", \"extra\": 1}", 10);
  assert_int_equal(json_array_size(errors), 1);
  const json_t *e = json_array_get(errors, 0);
  assert_error(e, "/extra", "/additionalProperties", "additionalProperties");
  assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "\"extra\""));
  json_decref(errors);
  tg_schema_free(s);
}

static void test_unevaluated_properties(void **state) {
  (void)state;
  tg_schema *s = compile("{\"allOf\": [{\"properties\": {\"a\": true}}], "
                         "\"anyOf\": [{\"properties\": {\"b\": true}}, {\"required\": [\"c\"]}], "
                         "\"unevaluatedProperties\": false}");
  assert_true(valid(s, "{\"a\": 1, \"b\": 2}"));
  json_t *errors = errors_of(s, "{\"a\": 1, \"b\": 2, \"d\": 3}", 10);
  assert_int_equal(json_array_size(errors), 1);
  assert_error(json_array_get(errors, 0), "/d", "/unevaluatedProperties", "unevaluatedProperties");
  json_decref(errors);
  tg_schema_free(s);
}

static void test_messages_are_bounded(void **state) {
  (void)state;
  tg_schema *s = compile("{\"additionalProperties\": false, \"required\": [\"need\"]}");
  size_t n = 100000;
  char *key = malloc(n + 1);
  memset(key, 'k', n);
  key[5] = '\n';
  key[n] = 0;
  json_t *i = json_object();
  json_object_set_new(i, key, json_true());
  json_t *errors = json_array();
  assert_false(tg_schema_validate(s, i, errors, 10));
  assert_int_equal(json_array_size(errors), 2);
  for (size_t k = 0; k < 2; k++) {
    const char *msg = json_string_value(json_object_get(json_array_get(errors, k), "message"));
    assert_true(strlen(msg) < 200);
    assert_null(strchr(msg, '\n'));
  }
  json_decref(errors);
  json_decref(i);
  free(key);
  tg_schema_free(s);
}

static void test_ref_loops_fail_gracefully(void **state) {
  (void)state;
  const char *loops[] = {
      "{\"$ref\": \"#\"}",
      ("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}, "
       "\"$ref\": \"#/$defs/a\"}"),
      "{\"not\": {\"$ref\": \"#\"}}",
  };
  for (size_t k = 0; k < sizeof(loops) / sizeof(*loops); k++) {
    tg_schema *s = compile(loops[k]);
    json_t *errors = errors_of(s, "{}", 10);
    assert_int_equal(json_array_size(errors), 1);
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(errors, 0), "message")),
                           "too deeply"));
    json_decref(errors);
    tg_schema_free(s);
  }
  /* Recursion that follows the instance is fine until the instance is absurdly deep. */
  tg_schema *s = compile("{\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}");
  assert_true(valid(s, "[[[[]]], []]"));
  json_t *deep = json_array(), *inner = deep;
  for (int k = 0; k < 1000; k++) {
    json_t *next = json_array();
    json_array_append_new(inner, next);
    inner = next;
  }
  assert_false(tg_schema_validate(s, deep, NULL, 0));
  json_decref(deep);
  tg_schema_free(s);
}

static void test_regex_is_ecma_262(void **state) {
  (void)state;
  tg_schema *s = compile("{\"pattern\": \"^\\\\d\\\\s\\\\w+$\"}");
  assert_true(valid(s, "\"1 ab_9\""));
  assert_true(valid(s, "\"1\\u00a0x\""));  /* ECMA \s includes the no-break space */
  assert_false(valid(s, "\"\\u0663 x\"")); /* ECMA \d is ASCII only */
  assert_false(valid(s, "\"1 x\\n\""));    /* $ matches only at the very end */
  assert_true(valid(s, "42"));
  tg_schema_free(s);
  s = compile("{\"pattern\": \"b\", \"propertyNames\": {\"pattern\": \"^\\\\p{Letter}+$\"}}");
  assert_true(valid(s, "\"abc\"")); /* patterns are not anchored */
  assert_true(valid(s, "{\"\\u00e9t\\u00e9\": 1}"));
  assert_false(valid(s, "{\"x1\": 1}"));
  tg_schema_free(s);
}

static void test_evaluation_is_bounded(void **state) {
  (void)state;
  /* 40 levels of two-way anyOf over a failing leaf: 2^40 paths without a budget. */
  char text[8192];
  size_t o = (size_t)snprintf(text, sizeof(text), "{\"$ref\": \"#/$defs/d0\", \"$defs\": {");
  for (int k = 0; k < 40; k++)
    o += (size_t)snprintf(text + o, sizeof(text) - o,
                          "\"d%d\": {\"anyOf\": [{\"$ref\": \"#/$defs/d%d\"}, {\"$ref\": "
                          "\"#/$defs/d%d\"}]}, ",
                          k, k + 1, k + 1);
  snprintf(text + o, sizeof(text) - o, "\"d40\": false}}");
  tg_schema *s = compile(text);
  json_t *errors = errors_of(s, "null", 4);
  assert_int_equal(json_array_size(errors), 1);
  assert_non_null(strstr(json_string_value(json_object_get(json_array_get(errors, 0), "message")),
                         "too many steps"));
  json_decref(errors);
  tg_schema_free(s);
}

static void test_documents_and_dynamic_refs(void **state) {
  (void)state;
  json_t *docs = tg_test_json("{\"https://example.com/tree\": {\"$id\": \"https://example.com/tree\", "
                       "\"$dynamicAnchor\": \"node\", \"type\": \"object\", \"properties\": "
                       "{\"kids\": {\"type\": \"array\", \"items\": {\"$dynamicRef\": "
                       "\"#node\"}}}}}");
  tg_schema *s = compile_with("{\"$id\": \"https://example.com/strict\", \"$dynamicAnchor\": "
                              "\"node\", \"$ref\": \"tree\", \"unevaluatedProperties\": false}",
                              docs);
  json_decref(docs);
  assert_true(valid(s, "{\"kids\": [{\"kids\": []}]}"));
  json_t *errors = errors_of(s, "{\"kids\": [{\"kidz\": []}]}", 10);
  assert_int_equal(json_array_size(errors), 1);
  assert_error(json_array_get(errors, 0), "/kids/0/kidz",
               "/$ref/properties/kids/items/$dynamicRef/unevaluatedProperties",
               "unevaluatedProperties");
  json_decref(errors);
  tg_schema_free(s);
}

/* Schemas compiled into one store keep their nodes there, none in blocks of their own: freeing
 * one leaves the others whole (the sanitizer build would see a read of freed nodes), a failed
 * compile leaves the store usable, and the store goes last. */
static void test_schemas_share_a_store(void **state) {
  (void)state;
  tg_schema_store *store = tg_schema_store_new();
  assert_non_null(store);
  const tg_schema_options in_store = {.store = store};
  tg_schema *named = compile_opts("{\"type\": \"object\", \"required\": [\"name\"], "
                                  "\"properties\": {\"name\": {\"pattern\": \"^a+$\"}}}",
                                  &in_store);
  tg_schema *counts =
      compile_opts("{\"$defs\": {\"n\": {\"type\": \"integer\", \"minimum\": 1}}, "
                   "\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}",
                   &in_store);
  json_t *bad = tg_test_json("{\"pattern\": \"(\"}");
  tg_schema *none = NULL;
  char *err = NULL;
  assert_int_equal(tg_schema_compile(bad, &in_store, &none, &err), TG_E_INVAL);
  assert_null(none);
  free(err);
  json_decref(bad);
  tg_schema *flag = compile_opts("{\"const\": true}", &in_store);
  tg_schema *alone = compile("{\"const\": true}");
  assert_non_null(alone->own.head);
  assert_null(named->own.head);
  assert_null(counts->own.head);
  assert_null(flag->own.head);
  tg_schema_free(alone);
  tg_schema_free(named);
  assert_true(valid(counts, "[1, 2]"));
  assert_false(valid(counts, "[1, 0]"));
  assert_true(valid(flag, "true"));
  assert_false(valid(flag, "false"));
  tg_schema_free(counts);
  tg_schema_free(flag);
  tg_schema_store_free(store);
}

static void test_official_suite(void **state) {
  (void)state;
  const char *source = getenv("TG_SOURCE_DIR");
  if (!source || !*source) fail_msg("TG_SOURCE_DIR is not set (ctest sets it)");
  char *suite = NULL, *exclusions = NULL;
  assert_true(asprintf(&suite, "%s/json-schema-test-suite/draft2020-12", tg_test_testdata()) > 0);
  assert_true(asprintf(&exclusions, "%s/tests/schema-suite-exclusions.txt", source) > 0);
  tg_schema_suite_options opts = {.exclusions_path = exclusions};
  tg_schema_suite_result res = {0};
  assert_int_equal(tg_schema_suite_run(suite, &opts, stdout, &res), 0);
  assert_int_equal(res.failed, 0);
  assert_true(res.passed > 1000);
  free(suite);
  free(exclusions);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nested_error_location),
      cmocka_unit_test(test_error_location_through_ref),
      cmocka_unit_test(test_max_errors),
      cmocka_unit_test(test_unresolvable_ref),
      cmocka_unit_test(test_invalid_regex),
      cmocka_unit_test(test_invalid_schema_values),
      cmocka_unit_test(test_length_counts_code_points),
      cmocka_unit_test(test_integer_type),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_additional_properties_false),
      cmocka_unit_test(test_unevaluated_properties),
      cmocka_unit_test(test_messages_are_bounded),
      cmocka_unit_test(test_ref_loops_fail_gracefully),
      cmocka_unit_test(test_regex_is_ecma_262),
      cmocka_unit_test(test_evaluation_is_bounded),
      cmocka_unit_test(test_documents_and_dynamic_refs),
      cmocka_unit_test(test_schemas_share_a_store),
      cmocka_unit_test(test_official_suite),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The registry: joining specs with handlers, name uniqueness, lookups, start-up refusals. */
#include "support.h"

#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "tools/providers.h"
#include "util/status.h"

static int noop(tg_call_ctx *cx, json_t *args, json_t **ret) {
  *ret = json_object();
  return TG_OK;
}

#define TOOL(name, extra)                                                                    \
  "{\"name\":\"" name "\",\"description\":\"d\",\"surfaces\":[\"agent\"],\"effect\":\"read\","  \
  "\"risk\":\"low\",\"permissions\":[],\"inputSchema\":{\"type\":\"object\"},"                \
  "\"outputSchema\":{\"type\":\"object\"}" extra "}"

/* Builds a registry from one inline provider; returns the status and the message. */
static int build(const char *spec, const tg_handler_entry *handlers, size_t n, char **why) {
  tg_provider p = {.name = "p", .spec_json = spec, .handlers = handlers, .n_handlers = n};
  const tg_provider *list[] = {&p};
  tg_registry *reg = NULL;
  *why = NULL;
  int r = tg_registry_new(list, 1, &reg, why);
  tg_registry_free(reg);
  return r;
}

static void expect_refused(const char *spec, const tg_handler_entry *handlers, size_t n,
                           const char *needle) {
  char *why = NULL;
  assert_true(build(spec, handlers, n, &why) < 0);
  assert_non_null(why);
  if (!strstr(why, needle)) fail_msg("message '%s' does not mention '%s'", why, needle);
  free(why);
}

/* A subschema written as a bare true or false, where a client's portability check (the MCP
 * Inspector's) wants an object: only additionalProperties and unevaluatedProperties may be
 * false. Fails naming the tool and the keyword. */
static void assert_portable(const json_t *schema, const char *tool) {
  static const char *const maps[] = {"properties", "patternProperties", "$defs",
                                     "dependentSchemas"};
  static const char *const lists[] = {"allOf", "anyOf", "oneOf", "prefixItems"};
  static const char *const ones[] = {
      "items", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems"};
  const char *key;
  json_t *value, *sub;
  size_t i;
  json_object_foreach((json_t *)schema, key, value) {
    bool map = false, list = false, one = false;
    for (i = 0; i < sizeof maps / sizeof *maps; i++) map |= strcmp(key, maps[i]) == 0;
    for (i = 0; i < sizeof lists / sizeof *lists; i++) list |= strcmp(key, lists[i]) == 0;
    for (i = 0; i < sizeof ones / sizeof *ones; i++) one |= strcmp(key, ones[i]) == 0;
    const char *name;
    if (map) {
      json_object_foreach(value, name, sub) {
        if (json_is_boolean(sub)) fail_msg("%s: a bare boolean schema under %s", tool, key);
        assert_portable(sub, tool);
      }
    } else if (list) {
      json_array_foreach(value, i, sub) {
        if (json_is_boolean(sub)) fail_msg("%s: a bare boolean schema in %s", tool, key);
        assert_portable(sub, tool);
      }
    } else if (one) {
      if (json_is_boolean(value)) fail_msg("%s: a bare boolean schema as %s", tool, key);
      assert_portable(value, tool);
    }
  }
}

static void test_builtin_registry_loads_and_finds_every_name(void **state) {
  tg_registry *reg = NULL;
  char *why = NULL;
  assert_int_equal(tg_registry_new(tg_builtin_providers, tg_builtin_providers_count, &reg, &why), 0);
  assert_true(tg_registry_count(reg) > 0);
  for (size_t i = 0; i < tg_registry_count(reg); i++) {
    const tg_tool *t = tg_registry_at(reg, i);
    assert_ptr_equal(tg_registry_find(reg, t->name), t);
    assert_ptr_equal(tg_registry_find(reg, t->model_name), t);
    if (t->alias) assert_ptr_equal(tg_registry_find(reg, t->alias), t);
    assert_null(strchr(t->model_name, '.'));
    assert_non_null(t->handler);
    assert_non_null(t->input);
    assert_portable(t->input_schema, t->name);
    if (t->output_schema) assert_portable(t->output_schema, t->name);
  }
  assert_null(tg_registry_find(reg, "agent.tool"));
  assert_null(tg_registry_find(reg, ""));
  const tg_tool *list = tg_registry_find(reg, "agent_tool_list");
  assert_non_null(list);
  assert_string_equal(list->name, "agent.tool.list");
  /* Unknown arguments are refused by default. */
  assert_true(json_is_false(json_object_get(list->input_schema, "additionalProperties")));
  tg_registry_free(reg);
}

static void test_bad_providers_are_refused_by_name(void **state) {
  tg_handler_entry one[] = {{"a.b.c", noop}};
  tg_handler_entry two[] = {{"a.b.c", noop}, {"a.b.d", noop}};
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ) "]}", NULL, 0,
                 "a.b.c is declared but has no handler");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ) "]}", two, 2,
                 "handler a.b.d has no declaration");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ) "," TOOL("a.b.c", ) "]}",
                 one, 1, "already used");
  /* a.b_c's model-facing name a_b_c collides with the alias of a.b.d. */
  tg_handler_entry clash[] = {{"a.b.c", noop}, {"a.b.d", noop}};
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ) "," TOOL("a.b.d", ",\"alias\":\"a_b_c\"") "]}",
                 clash, 2, "\"a_b_c\" is already used");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("Bad Name", ) "]}", one, 1, "/tools/0/name");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b", ) "]}", one, 1, "/tools/0/name");
  expect_refused("{\"provider\":\"q\",\"tools\":[]}", NULL, 0, "names provider \"q\"");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ",\"effect\":\"delete\"") "]}", one, 1,
                 "duplicate");
  expect_refused("{\"provider\":\"p\",\"tools\":[{\"name\":\"a.b.c\"}]}", one, 1, "/tools/0");
  expect_refused("not json", one, 1, "line 1");
  expect_refused(
      "{\"provider\":\"p\",\"tools\":[{\"name\":\"a.b.c\",\"description\":\"d\",\"surfaces\":[\"agent\"],"
      "\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],\"inputSchema\":{\"type\":\"object\","
      "\"properties\":{\"x\":{\"$ref\":\"#/nowhere\"}}},\"outputSchema\":{}}]}",
      one, 1, "a.b.c: inputSchema does not compile");
  /* A call that may become a task waits: only an interactive handler may. */
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ",\"taskSupport\":\"optional\"") "]}",
                 one, 1, "/tools/0");
  expect_refused("{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ",\"taskSupport\":\"always\",\"flags\":[\"interactive\"]") "]}",
                 one, 1, "/tools/0/taskSupport");
}

static void test_task_support_is_read(void **state) {
  const tg_handler_entry one[] = {{"a.b.c", noop}, {"a.b.d", noop}};
  tg_provider p = {.name = "p",
                   .spec_json = "{\"provider\":\"p\",\"tools\":[" TOOL("a.b.c", ",\"taskSupport\":\"required\",\"flags\":[\"interactive\"]") "," TOOL("a.b.d", ) "]}",
                   .handlers = one,
                   .n_handlers = 2};
  const tg_provider *list[] = {&p};
  tg_registry *reg = NULL;
  char *why = NULL;
  assert_int_equal(tg_registry_new(list, 1, &reg, &why), 0);
  assert_int_equal(tg_registry_find(reg, "a.b.c")->task_support, TG_TASK_REQUIRED);
  assert_int_equal(tg_registry_find(reg, "a.b.d")->task_support, TG_TASK_FORBIDDEN);
  tg_registry_free(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builtin_registry_loads_and_finds_every_name),
      cmocka_unit_test(test_bad_providers_are_refused_by_name),
      cmocka_unit_test(test_task_support_is_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

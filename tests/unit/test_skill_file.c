/* domain/skill_file: the front matter and body of a skill file, every bound, every refusal. */
#define _GNU_SOURCE
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain/skill_file.h"
#include "util/cleanup.h"
#include "util/status.h"

static json_t *parse_ok(const char *text) {
  json_t *skill = NULL;
  char *why = NULL;
  int r = tg_skill_file_parse(text, strlen(text), &skill, &why);
  if (r != 0) fail_msg("parse failed (%d): %s\n%s", r, why ? why : "?", text);
  assert_null(why);
  return skill;
}

/* The refusal's message, which must contain want. */
static void parse_fails(const char *text, size_t len, const char *want) {
  json_t *skill = NULL;
  _cleanup_free_ char *why = NULL;
  assert_int_equal(tg_skill_file_parse(text, len, &skill, &why), TG_E_INVAL);
  assert_null(skill);
  assert_non_null(why);
  if (!strstr(why, want)) fail_msg("expected '%s' in '%s'", want, why);
}

static void fails(const char *text, const char *want) { parse_fails(text, strlen(text), want); }

static const char *get(json_t *skill, const char *key) {
  return json_string_value(json_object_get(skill, key));
}

static void test_a_full_file(void **state) {
  _cleanup_json_ json_t *skill = parse_ok(
      "---\n"
      "name: Release notes\n"
      "slug: release-notes\n"
      "description: Write release notes from the week's activity.\n"
      "license: MIT\n"
      "allowed-tools: [work.activity.list, kb.document.get]\n"
      "examples:\n"
      "  - input: Notes for this week\n"
      "    output: \"## Week 21\"\n"
      "---\n"
      "\n"
      "# Steps\n"
      "Read the activity.\n");
  assert_string_equal(get(skill, "slug"), "release-notes");
  assert_string_equal(get(skill, "name"), "Release notes");
  assert_string_equal(get(skill, "description"), "Write release notes from the week's activity.");
  assert_string_equal(get(skill, "body"), "# Steps\nRead the activity.\n");
  _cleanup_json_ json_t *want_tools = json_pack("[ss]", "work.activity.list", "kb.document.get");
  assert_true(json_equal(json_object_get(skill, "allowedTools"), want_tools));
  _cleanup_json_ json_t *want_examples =
      json_pack("[{s:s,s:s}]", "input", "Notes for this week", "output", "## Week 21");
  assert_true(json_equal(json_object_get(skill, "examples"), want_examples));
  assert_null(json_object_get(skill, "license")); /* unknown keys are ignored */
}

static void test_minimal_file_and_defaults(void **state) {
  _cleanup_json_ json_t *skill =
      parse_ok("---\nname: \"Release Notes (v2)!\"\ndescription: d\n---\nbody");
  assert_string_equal(get(skill, "slug"), "release-notes-v2");
  assert_int_equal(json_array_size(json_object_get(skill, "allowedTools")), 0);
  assert_null(json_object_get(skill, "examples"));
  assert_string_equal(get(skill, "body"), "body");
}

static void test_tool_list_spellings(void **state) {
  _cleanup_json_ json_t *a =
      parse_ok("---\nname: n\ndescription: d\nallowed-tools: \"a.b.c, getActivity  x_y_z,a.b.c\"\n---\nb");
  _cleanup_json_ json_t *want = json_pack("[sss]", "a.b.c", "getActivity", "x_y_z");
  assert_true(json_equal(json_object_get(a, "allowedTools"), want));
  _cleanup_json_ json_t *b = parse_ok("---\nname: n\ndescription: d\nallowedTools:\n  - a.b.c\n"
                                      "  - getActivity\n  - x_y_z\n---\nb");
  assert_true(json_equal(json_object_get(b, "allowedTools"), want));
  _cleanup_json_ json_t *c = parse_ok("---\nname: n\ndescription: d\nallowed_tools: []\n---\nb");
  assert_int_equal(json_array_size(json_object_get(c, "allowedTools")), 0);
  fails("---\nname: n\ndescription: d\nallowed-tools: [a, b]\nallowedTools: [c]\n---\nb",
        "line 5: allowedTools is given twice");
  fails("---\nname: n\ndescription: d\nallowed-tools: {a: b}\n---\nb", "list of tool names");
  fails("---\nname: n\ndescription: d\nallowed-tools: [\"a b\"]\n---\nb", "blank or a comma");
  fails("---\nname: n\ndescription: d\nallowed-tools: [[a]]\n---\nb", "a tool name must be text");
}

static void test_line_endings_bom_and_dots(void **state) {
  _cleanup_json_ json_t *a = parse_ok("\xEF\xBB\xBF---\r\nname: n\r\ndescription: d\r\n---\r\nbody\r\n");
  assert_string_equal(get(a, "name"), "n");
  assert_string_equal(get(a, "body"), "body\r\n");
  _cleanup_json_ json_t *b = parse_ok("---  \nname: n\ndescription: d\n...\n  \n\nbody");
  assert_string_equal(get(b, "body"), "body");
}

static void test_frame_refusals(void **state) {
  fails("name: n\n", "starts with a front matter");
  fails("", "starts with a front matter");
  fails("----\nname: n\n---\nb", "starts with a front matter");
  fails("---\nname: n\ndescription: d\n", "not closed");
  fails("---\nname: n\ndescription: d\n---\n", "body is empty");
  fails("---\nname: n\ndescription: d\n---\n \n\t\r\n", "body is empty");
  static const char nul[] = "---\nname: n\0\ndescription: d\n---\nb";
  parse_fails(nul, sizeof nul - 1, "NUL byte");
  fails("---\nname: n\ndescription: d\n---\nbody \x9c\x8f", "not UTF-8");
  fails("---\nname: \xc0\xaf\ndescription: d\n---\nbody", "not UTF-8"); /* overlong '/' */
  fails("---\nname: \xed\xa0\x80\ndescription: d\n---\nbody", "not UTF-8"); /* a surrogate */
  fails("---\nname: n\ndescription: d\n---\nbody \xe2\x82", "not UTF-8"); /* cut short */
  fails("---\n---\nbody", "must be YAML keys");
  fails("---\n- a\n- b\n---\nbody", "must be YAML keys");
  fails("---\nname: [unclosed\ndescription: d\n---\nb", "front matter, line ");
  fails("---\n[a]: b\nname: n\n---\nb", "line 2: a key must be text");
  fails("---\nname: *nowhere\n---\nb", "front matter, line 2");
}

static void test_required_fields_and_slugs(void **state) {
  fails("---\ndescription: d\n---\nb", "no name");
  fails("---\nname: n\n---\nb", "no description");
  fails("---\nname: \"\"\ndescription: d\n---\nb", "line 2: name is empty");
  fails("---\nname: [a]\ndescription: d\n---\nb", "name must be text");
  fails("---\nname: \"\\0\"\ndescription: d\n---\nb", "NUL character");
  fails("---\nname: n\nslug: Bad_Slug\ndescription: d\n---\nb", "line 3: slug must be lower-case");
  fails("---\nname: n\nslug: -x\ndescription: d\n---\nb", "slug must be lower-case");
  fails("---\nname: \"\xE6\x97\xA5\xE6\x9C\xAC\"\ndescription: d\n---\nb", "add a slug");
  char slug[200];
  memset(slug, 'a', TG_SKILL_SLUG_MAX);
  slug[TG_SKILL_SLUG_MAX] = '\0';
  char text[400];
  snprintf(text, sizeof text, "---\nname: n\nslug: %s\ndescription: d\n---\nb", slug);
  json_decref(parse_ok(text));
  snprintf(text, sizeof text, "---\nname: n\nslug: %sa\ndescription: d\n---\nb", slug);
  fails(text, "slug is longer than 63 characters");
  /* A long name makes a slug cut to its bound, never ending in a dash. */
  snprintf(text, sizeof text, "---\nname: %.62s b\ndescription: d\n---\nb", slug);
  _cleanup_json_ json_t *cut = parse_ok(text);
  assert_int_equal(strlen(get(cut, "slug")), 62);
}

/* Bounds count characters, not bytes: 100 two-byte letters are a valid name. */
static void test_text_bounds(void **state) {
  char name[512] = "", text[2048];
  for (int i = 0; i < TG_SKILL_NAME_MAX; i++) strcat(name, "\xC3\xA9");
  snprintf(text, sizeof text, "---\nname: %s\nslug: s\ndescription: d\n---\nb", name);
  json_decref(parse_ok(text));
  snprintf(text, sizeof text, "---\nname: %se\nslug: s\ndescription: d\n---\nb", name);
  fails(text, "name is longer than 100 characters");

  _cleanup_free_ char *desc = malloc(TG_SKILL_DESCRIPTION_MAX + 2), *big = NULL;
  memset(desc, 'd', TG_SKILL_DESCRIPTION_MAX);
  desc[TG_SKILL_DESCRIPTION_MAX] = '\0';
  assert_true(asprintf(&big, "---\nname: n\ndescription: %s\n---\nb", desc) > 0);
  json_decref(parse_ok(big));
  free(big);
  assert_true(asprintf(&big, "---\nname: n\ndescription: %sd\n---\nb", desc) > 0);
  fails(big, "description is longer than 1024 characters");
}

static char *with_items(const char *key, const char *item, int n) {
  size_t cap = 64 + (size_t)n * (strlen(item) + 8);
  char *text = malloc(cap);
  size_t len = (size_t)snprintf(text, cap, "---\nname: n\ndescription: d\n%s:\n", key);
  for (int i = 0; i < n; i++) len += (size_t)snprintf(text + len, cap - len, "  - %s%d\n", item, i);
  snprintf(text + len, cap - len, "---\nbody");
  return text;
}

static void test_list_bounds(void **state) {
  _cleanup_free_ char *tools = with_items("allowed-tools", "tool.number.", TG_SKILL_TOOLS_MAX);
  _cleanup_json_ json_t *skill = parse_ok(tools);
  assert_int_equal(json_array_size(json_object_get(skill, "allowedTools")), TG_SKILL_TOOLS_MAX);
  _cleanup_free_ char *too_many = with_items("allowed-tools", "tool.number.", TG_SKILL_TOOLS_MAX + 1);
  fails(too_many, "more than 64 allowed tools");

  char long_tool[TG_SKILL_TOOL_NAME_MAX + 2], text[400];
  memset(long_tool, 't', sizeof long_tool - 1);
  long_tool[sizeof long_tool - 1] = '\0';
  snprintf(text, sizeof text, "---\nname: n\ndescription: d\nallowed-tools: [%s]\n---\nb", long_tool);
  fails(text, "a tool name is longer than 128 characters");
  snprintf(text, sizeof text, "---\nname: n\ndescription: d\nallowed-tools: %s\n---\nb", long_tool);
  fails(text, "a tool name is longer than 128 characters");

  fails("---\nname: n\ndescription: d\nexamples:\n---\nb", "examples must be a list");
  _cleanup_free_ char *ok = with_items("examples", "input: i\n    output: o", TG_SKILL_EXAMPLES_MAX);
  _cleanup_json_ json_t *with_examples = parse_ok(ok);
  assert_int_equal(json_array_size(json_object_get(with_examples, "examples")), TG_SKILL_EXAMPLES_MAX);
  _cleanup_free_ char *over = with_items("examples", "input: i\n    output: o", TG_SKILL_EXAMPLES_MAX + 1);
  fails(over, "more than 20 examples");
}

static void test_example_refusals(void **state) {
  fails("---\nname: n\ndescription: d\nexamples: [a]\n---\nb", "line 4: an example must have input and output");
  fails("---\nname: n\ndescription: d\nexamples: [{input: i}]\n---\nb", "must have input and output");
  fails("---\nname: n\ndescription: d\nexamples: [{input: [i], output: o}]\n---\nb",
        "an example's input must be text");
  fails("---\nname: n\ndescription: d\nexamples: [{input: i, output: \"\"}]\n---\nb",
        "an example's output is empty");
  _cleanup_free_ char *long_output = malloc(TG_SKILL_EXAMPLE_MAX + 2), *text = NULL;
  memset(long_output, 'o', TG_SKILL_EXAMPLE_MAX + 1);
  long_output[TG_SKILL_EXAMPLE_MAX + 1] = '\0';
  assert_true(asprintf(&text, "---\nname: n\ndescription: d\nexamples: [{input: i, output: %s}]\n---\nb",
                       long_output) > 0);
  fails(text, "an example's output is longer than 10000 characters");
}

/* Aliases are references, not copies: a "billion laughs" under a key the format ignores costs
 * nothing, and the front matter itself is bounded. */
static void test_aliases_and_size(void **state) {
  _cleanup_json_ json_t *skill = parse_ok(
      "---\nname: n\ndescription: d\n"
      "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
      "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
      "allowed-tools: *a\n---\nb");
  assert_int_equal(json_array_size(json_object_get(skill, "allowedTools")), 1);

  size_t n = TG_SKILL_FRONT_MATTER_MAX + 100;
  _cleanup_free_ char *big = malloc(n + 64);
  size_t len = (size_t)sprintf(big, "---\nname: n\ndescription: d\n");
  while (len < n) len += (size_t)sprintf(big + len, "# padding padding padding\n");
  strcpy(big + len, "---\nb");
  fails(big, "front matter is longer than 65536 bytes");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_full_file),
      cmocka_unit_test(test_minimal_file_and_defaults),
      cmocka_unit_test(test_tool_list_spellings),
      cmocka_unit_test(test_line_endings_bom_and_dots),
      cmocka_unit_test(test_frame_refusals),
      cmocka_unit_test(test_required_fields_and_slugs),
      cmocka_unit_test(test_text_bounds),
      cmocka_unit_test(test_list_bounds),
      cmocka_unit_test(test_example_refusals),
      cmocka_unit_test(test_aliases_and_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Path validation of commitToRepo: a table of hostile paths, each refused, and ordinary ones
 * accepted. Symbolic links inside the tree are refused by the tree check (test_git_tools). */
#include "support.h"

#include <string.h>

#include "domain/repo_path.h"

static void test_hostile_paths_are_refused(void **state) {
  static const char *const hostile[] = {
      "", "../etc/passwd", "a/../../b", "..", ".", "a/./b", "/etc/passwd", "a//b", "a/", "/",
      ".git/config", "a/.git/hooks/pre-commit", ".GIT/config", "a/.Git", "git~1/config",
      ".gitmodules", "a\\b", "..\\..\\x", "a\tb", "a\nb", "a\x7f", "c:/x", "a/b.", "a/b ",
      "-rf", "docs/-x",
      "a\342\210\225b",          /* U+2215 DIVISION SLASH */
      "\xef\xbc\x8e\xef\xbc\x8e/x", /* U+FF0E FULLWIDTH FULL STOP twice */
      "\xe2\x80\xa4\xe2\x80\xa4/x", /* U+2024 ONE DOT LEADER */
      ".g\xc4\xb1t/config",         /* dotless i */
      "caf\xc3\xa9.md", "a\xe2\x80\x8b.md",
  };
  for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++)
    if (!tg_repo_path_check(hostile[i], strlen(hostile[i])))
      fail_msg("accepted hostile path #%zu '%s'", i, hostile[i]);
  /* An embedded NUL: the length says there is more after it. */
  assert_non_null(tg_repo_path_check("a\0b", 3));
  char long_path[TG_REPO_PATH_MAX + 2];
  memset(long_path, 'a', sizeof long_path - 1);
  long_path[sizeof long_path - 1] = '\0';
  assert_non_null(tg_repo_path_check(long_path, strlen(long_path)));
  char long_component[TG_REPO_COMPONENT_MAX + 2];
  memset(long_component, 'b', sizeof long_component - 1);
  long_component[sizeof long_component - 1] = '\0';
  assert_non_null(tg_repo_path_check(long_component, strlen(long_component)));
}

static void test_ordinary_paths_pass(void **state) {
  static const char *const ok[] = {"README.md", "docs/guide.md", "items/2026/a-b_c.json",
                                   ".works/works.yml", "a/.gitignore", "x/..y/z", "v1.2/notes"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    const char *why = tg_repo_path_check(ok[i], strlen(ok[i]));
    if (why) fail_msg("refused '%s': %s", ok[i], why);
  }
}

static void test_scope_tree_and_reserved(void **state) {
  assert_true(tg_repo_path_under("a/b/c", ""));
  assert_true(tg_repo_path_under(".works/ideas/X/notes.md", ".works/ideas/X"));
  assert_false(tg_repo_path_under(".works/ideas/XY/notes.md", ".works/ideas/X"));
  assert_false(tg_repo_path_under(".works/ideas/X", ".works/ideas/X"));
  assert_true(tg_repo_path_reserved(".works/agents/bot/SOUL.md"));
  assert_true(tg_repo_path_reserved(".Works/Agents/bot/SOUL.md"));
  assert_true(tg_repo_path_reserved(".works/ideas/X/agents/bot/agent.yml"));
  assert_false(tg_repo_path_reserved(".works/ideas/X/notes.md"));
  assert_false(tg_repo_path_reserved(".works/ideas/X/agents.md"));
  assert_false(tg_repo_path_reserved(".works/notes.md"));
  assert_false(tg_repo_path_reserved("docs/agents/about.md"));
  /* A file in place of a folder on the way would block the agent files under it. */
  const char *on_the_way[] = {".works", ".works/agents", ".works/ideas", ".works/ideas/X",
                              ".works/ideas/X/agents", ".Works/AGENTS"};
  for (size_t i = 0; i < sizeof on_the_way / sizeof *on_the_way; i++)
    if (!tg_repo_path_reserved(on_the_way[i])) fail_msg("'%s' is not reserved", on_the_way[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hostile_paths_are_refused),
      cmocka_unit_test(test_ordinary_paths_pass),
      cmocka_unit_test(test_scope_tree_and_reserved),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

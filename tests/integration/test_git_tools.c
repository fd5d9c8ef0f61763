/* The git-backed tools end to end on real repositories in a temporary folder, checked with
 * the git program: commitToRepo, editAgentFile, openPullRequest and the operator's review,
 * createSubAgent and the agent lifecycle, and the atomicity of DESIGN.md §7. */
#define _GNU_SOURCE
#include "support.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "git/git.h"
#include "db/db.h"
#include "util/cleanup.h"
#include "util/status.h"

typedef struct world {
  fixture *f;
  char worker[TG_UUID_LEN + 1];  /* work:site, every repo and agent grant */
  char other[TG_UUID_LEN + 1];   /* work:other, same grants */
  char tenant[TG_UUID_LEN + 1];  /* tenant scope, same grants */
  char planner[TG_UUID_LEN + 1]; /* mission:m1 */
  char thinker[TG_UUID_LEN + 1]; /* idea:i1 of m1 */
} world;

#define GRANTS "\"grants\":[\"canCommitToRepo\",\"canOpenPullRequests\",\"canEditAgentFiles\",\"canCreateAgents\"]"

static void owner_call(fixture *f, const char *tool, const char *args) {
  tg_call_result res;
  if (fixture_call(f, f->owner, TG_SURFACE_API, tool, args, NULL, &res) != 0)
    fail_msg("%s %s: %s", tool, args, json_dumps(res.value, 0));
  tg_call_result_done(&res);
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(NULL);
  owner_call(w->f, "work.mission.create", "{\"slug\":\"m1\",\"title\":\"M1\"}");
  owner_call(w->f, "work.idea.create", "{\"missionSlug\":\"m1\",\"title\":\"i1\"}");
  owner_call(w->f, "work.work.create", "{\"slug\":\"site\",\"missionSlug\":\"m1\"}");
  owner_call(w->f, "work.work.create", "{\"slug\":\"other\",\"missionSlug\":\"m1\"}");
  fixture_agent(w->f, "{\"slug\":\"worker\",\"scope\":\"work:site\"," GRANTS "}", w->worker);
  fixture_agent(w->f, "{\"slug\":\"other\",\"scope\":\"work:other\"," GRANTS "}", w->other);
  fixture_agent(w->f, "{\"slug\":\"boss\"," GRANTS "}", w->tenant);
  fixture_agent(w->f, "{\"slug\":\"planner\",\"scope\":\"mission:m1\"," GRANTS "}", w->planner);
  fixture_agent(w->f, "{\"slug\":\"thinker\",\"scope\":\"idea:i1\"," GRANTS "}", w->thinker);
  *state = w;
  return 0;
}

_Static_assert(offsetof(world, f) == 0, "fixture_world_free finds the fixture first");
static int teardown(void **state) { return fixture_world_free(state); }

/* Runs a shell command; returns its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char *cmd = NULL;
  va_list ap;
  va_start(ap, fmt);
  assert_true(vasprintf(&cmd, fmt, ap) > 0);
  va_end(ap);
  int r = system(cmd);
  free(cmd);
  return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static char *repo_dir(world *w, const char *rel) {
  char *dir = NULL;
  assert_true(asprintf(&dir, "%s/repos/acme/%s.git", w->f->dir, rel) > 0);
  return dir;
}

/* Calls and expects code ("" for success); returns the result (free with json_decref). */
static json_t *expect(world *w, const char *who, const char *tool, const char *args,
                      const char *run, const char *code) {
  tg_call_result res;
  fixture_call(w->f, who, TG_SURFACE_AGENT, tool, args, run, &res);
  if (strcmp(fixture_code(&res), code) != 0)
    fail_msg("%s %.300s: expected '%s', got %s", tool, args, code, json_dumps(res.value, 0));
  json_t *value = json_incref(res.value);
  tg_call_result_done(&res);
  return value;
}

static json_t *expect_api(world *w, const char *tool, const char *args, const char *code) {
  tg_call_result res;
  fixture_call(w->f, w->f->owner, TG_SURFACE_API, tool, args, NULL, &res);
  if (strcmp(fixture_code(&res), code) != 0)
    fail_msg("%s %s: expected '%s', got %s", tool, args, code, json_dumps(res.value, 0));
  json_t *value = json_incref(res.value);
  tg_call_result_done(&res);
  return value;
}

static const char *reason_of(json_t *value) {
  return json_string_value(
      json_object_get(json_object_get(json_object_get(value, "error"), "details"), "reason"));
}

/* Calls and expects code, for reason. */
static void expect_refused(world *w, const char *who, const char *tool, const char *args,
                           const char *code, const char *reason) {
  json_t *v = expect(w, who, tool, args, NULL, code);
  assert_string_equal(reason_of(v), reason);
  json_decref(v);
}

static long count(world *w, const char *sql) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, sql, NULL, &row), 0);
  long n = (long)json_integer_value(json_object_get(row, "n"));
  json_decref(row);
  return n;
}

/* The sha of main in the repository at dir. */
static char *tip_of(const char *dir) {
  char *sha = tg_test_shell_output("git -C %s rev-parse main", dir);
  assert_true(strlen(sha) >= 40);
  sha[40] = '\0';
  return sha;
}

/* The worker's openPullRequest on a new branch, with hook as tg_git_test_before_move: it
 * must fail concurrent_write. */
static void pr_fails_concurrent_write(world *w,
                                      void (*hook)(const char *repo_path, const char *branch),
                                      const char *branch) {
  char args[256];
  snprintf(args, sizeof args,
           "{\"branchName\":\"%s\",\"title\":\"t\",\"body\":\"b\","
           "\"files\":[{\"path\":\"%s.md\",\"content\":\"p\",\"mode\":\"add\"}]}",
           branch, branch);
  tg_git_test_before_move = hook;
  json_t *v = expect(w, w->worker, "openPullRequest", args, NULL, "precondition_failed");
  tg_git_test_before_move = NULL;
  assert_string_equal(reason_of(v), "concurrent_write");
  json_decref(v);
}

/* The worker's call of tool that commits, as a process killed right after the commit would
 * leave it (its branch not moved); returns its answer, which must be ok. */
static json_t *crash_after_commit(world *w, const char *tool, const char *args) {
  tg_call_test_die_after_commit = true;
  json_t *v = expect(w, w->worker, tool, args, NULL, "");
  tg_call_test_die_after_commit = false;
  return v;
}

/* A commit message as long as its schema lets it be, in two-byte characters (4096 of them,
 * 8192 bytes), is kept whole. */
static void test_a_long_commit_message_is_kept_whole(void **state) {
  world *w = *state;
  char message[2 * 4096 + 1] = "";
  for (int i = 0; i < 4096; i++) memcpy(message + 2 * i, "\xc3\xa9", 3);
  _cleanup_free_ char *args = NULL;
  assert_true(
      asprintf(&args,
               "{\"files\":[{\"path\":\"docs/long.md\",\"content\":\"x\",\"mode\":\"add\"}],"
               "\"commitMessage\":\"%s\"}",
               message) > 0);
  json_decref(expect(w, w->worker, "commitToRepo", args, NULL, ""));
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *shown = tg_test_shell_output("git -C %s log -1 --format=%%B main", dir);
  _cleanup_free_ char *want = NULL;
  assert_true(asprintf(&want, "%s\n\nToolgate-Tool: repo.commit.create", message) > 0);
  assert_non_null(strstr(shown, want));
}

static void test_commit_to_repo(void **state) {
  world *w = *state;
  json_t *v = expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"docs/a.md\",\"content\":\"alpha\\n\",\"mode\":\"add\"},"
                     "{\"path\":\"items/b.json\",\"content\":\"{}\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"Add docs\"}",
                     NULL, "");
  const char *sha = json_string_value(json_object_get(v, "sha"));
  assert_string_equal(json_string_value(json_object_get(v, "branch")), "main");
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);
  _cleanup_free_ char *head = tg_test_shell_output("git -C %s rev-parse main", dir);
  assert_int_equal(strncmp(head, sha, 40), 0);
  _cleanup_free_ char *shown =
      tg_test_shell_output("git -C %s show --name-status --format=%%an%%n%%B main", dir);
  assert_non_null(strstr(shown, "worker\nAdd docs"));
  assert_non_null(strstr(shown, "A\tdocs/a.md"));
  assert_non_null(strstr(shown, "A\titems/b.json"));
  assert_non_null(strstr(shown, "Toolgate-Tool: repo.commit.create"));
  _cleanup_free_ char *n = tg_test_shell_output("git -C %s rev-list --count main", dir);
  assert_int_equal(atoi(n), 2); /* the repository's first commit and this one */
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'"), 1);
  json_decref(v);

  /* modify and delete in one commit */
  v = expect(w, w->worker, "commitToRepo",
             "{\"files\":[{\"path\":\"docs/a.md\",\"content\":\"beta\\n\",\"mode\":\"modify\"},"
             "{\"path\":\"items/b.json\",\"mode\":\"delete\"}],\"commitMessage\":\"Edit\"}",
             NULL, "");
  json_decref(v);
  _cleanup_free_ char *a = tg_test_shell_output("git -C %s show main:docs/a.md", dir);
  assert_string_equal(a, "beta\n");
  assert_int_not_equal(sh("git -C %s cat-file -e main:items/b.json 2>/dev/null", dir), 0);
  /* a commit changing nothing is refused, as git refuses it: no commit, no activity row */
  _cleanup_free_ char *refs = tg_test_shell_output("git -C %s for-each-ref", dir);
  long commits = count(
      w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'");
  expect_refused(
      w, w->worker, "commitToRepo",
      "{\"files\":[{\"path\":\"docs/a.md\",\"content\":\"beta\\n\",\"mode\":\"modify\"}],"
      "\"commitMessage\":\"Same\"}",
      "precondition_failed", "no_change");
  _cleanup_free_ char *refs_after = tg_test_shell_output("git -C %s for-each-ref", dir);
  assert_string_equal(refs, refs_after);
  assert_int_equal(
      count(w,
            "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'"),
      commits);

  /* add of an existing path, modify and delete of missing ones, changes that overlap */
  static const struct { const char *files, *reason;
  } bad[] = {
      {"[{\"path\":\"docs/a.md\",\"content\":\"x\",\"mode\":\"add\"}]", "exists"},
      {"[{\"path\":\"docs/zz.md\",\"mode\":\"delete\"}]", "missing"},
      {"[{\"path\":\"docs/a.md\",\"content\":\"x\",\"mode\":\"delete\"}]",
       NULL}, /* content dropped */
      {"[{\"path\":\"nope/zz.md\",\"content\":\"x\",\"mode\":\"modify\"}]", "missing"},
      {"[{\"path\":\"docs\",\"content\":\"x\",\"mode\":\"modify\"}]", "not_a_file"},
      {"[{\"path\":\"docs/a.md/x\",\"content\":\"x\",\"mode\":\"add\"}]", "under_a_file"},
      {"[{\"path\":\"n/a\",\"content\":\"x\",\"mode\":\"add\"},{\"path\":\"n/"
       "a\",\"content\":\"y\",\"mode\":\"add\"}]",
       "duplicate"},
      {"[{\"path\":\"../x\",\"content\":\"x\",\"mode\":\"add\"}]", "bad_path"},
      {"[{\"path\":\"/etc/x\",\"content\":\"x\",\"mode\":\"add\"}]", "bad_path"},
      {"[{\"path\":\".git/config\",\"content\":\"x\",\"mode\":\"add\"}]", "bad_path"},
      {"[{\"path\":\"a\\u0001b\",\"content\":\"x\",\"mode\":\"add\"}]", "bad_path"},
      {"[{\"path\":\"\\u2025/x\",\"content\":\"x\",\"mode\":\"add\"}]", "bad_path"},
      {"[{\"path\":\"ok.md\",\"content\":\"x\\nuse gh"
       "p_0123456789abcdefghijABCDEFGHIJ012345\",\"mode\":\"add\"}]",
       "secret"},
  };
  _cleanup_free_ char *before = tg_test_shell_output("git -C %s for-each-ref", dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[512];
    snprintf(args, sizeof args, "{\"files\":%s,\"commitMessage\":\"bad\"}", bad[i].files);
    v = expect(w, w->worker, "commitToRepo", args, NULL, "validation_failed");
    if (bad[i].reason && strcmp(reason_of(v), bad[i].reason) != 0)
      fail_msg("case %zu: reason %s, expected %s", i, reason_of(v), bad[i].reason);
    json_decref(v);
  }
  /* a NUL inside a path (no surface parses one, but the handler must not cut it short) */
  json_t *nul = json_pack("{s:[{s:s%,s:s,s:s}],s:s}", "files", "path", "a\0b", (size_t)3, "content",
                          "x", "mode", "add", "commitMessage", "nul");
  tg_call_request req = {.principal_id = w->worker, .surface = TG_SURFACE_AGENT,
                         .tool = "commitToRepo", .args = nul};
  tg_call_result res;
  assert_int_equal(tg_call(&w->f->env, &req, &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "validation_failed");
  tg_call_result_done(&res);
  json_decref(nul);
  /* the secret scan covers the commit message and a pull request's title and body too */
  v = expect(w, w->worker, "commitToRepo",
             "{\"files\":[{\"path\":\"x\",\"content\":\"x\",\"mode\":\"add\"}],"
             "\"commitMessage\":\"key AKIA" "IOSFODNN7EXAMPLE\"}",
             NULL, "validation_failed");
  json_t *details = json_object_get(json_object_get(v, "error"), "details");
  assert_string_equal(json_string_value(json_object_get(details, "field")), "commitMessage");
  json_decref(v);
  v = expect(w, w->worker, "openPullRequest",
             "{\"branchName\":\"leak\",\"title\":\"t\",\"body\":\"x\\n\\ngh" "p_0123456789abcdefghijABCDEFGHIJ012345\","
             "\"files\":[{\"path\":\"y\",\"content\":\"y\",\"mode\":\"add\"}]}",
             NULL, "validation_failed");
  details = json_object_get(json_object_get(v, "error"), "details");
  assert_string_equal(json_string_value(json_object_get(details, "field")), "body");
  assert_int_equal(json_integer_value(json_object_get(details, "line")), 3);
  json_decref(v);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM pull_requests"), 0);
  _cleanup_free_ char *after = tg_test_shell_output("git -C %s for-each-ref", dir);
  assert_string_equal(before, after);

  /* no commit message, a bad branch name, a missing branch */
  json_decref(expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"x\",\"content\":\"x\",\"mode\":\"add\"}]}", NULL,
                     "validation_failed"));
  json_decref(expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"x\",\"content\":\"x\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"m\",\"branch\":\"a..b\"}",
                     NULL, "validation_failed"));
  json_decref(expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"x\",\"content\":\"x\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"m\",\"branch\":\"nope\"}",
                     NULL, "not_found"));
  /* file count bound */
  json_t *args = json_pack("{s:[],s:s}", "files", "commitMessage", "many");
  for (int i = 0; i < 101; i++)
    json_array_append_new(json_object_get(args, "files"),
                          json_pack("{s:s,s:s,s:s}", "path", "x", "content", "x", "mode", "add"));
  char *text = json_dumps(args, 0);
  json_decref(expect(w, w->worker, "commitToRepo", text, NULL, "validation_failed"));
  free(text);
  json_decref(args);
  /* total size bound: 9 files of 1 MiB */
  args = json_pack("{s:[],s:s}", "files", "commitMessage", "big");
  char *mib = malloc(1048577);
  memset(mib, 'z', 1048576);
  mib[1048576] = '\0';
  for (int i = 0; i < 9; i++) {
    char path[16];
    snprintf(path, sizeof path, "big/%d", i);
    json_array_append_new(json_object_get(args, "files"),
                          json_pack("{s:s,s:s,s:s}", "path", path, "content", mib, "mode", "add"));
  }
  free(mib);
  text = json_dumps(args, 0);
  v = expect(w, w->worker, "commitToRepo", text, NULL, "validation_failed");
  assert_string_equal(reason_of(v), "too_large");
  json_decref(v);
  free(text);
  json_decref(args);
}

static void test_commit_scope_rules(void **state) {
  world *w = *state;
  const char *file = "\"files\":[{\"path\":\"s.md\",\"content\":\"s\",\"mode\":\"add\"}],\"commitMessage\":\"m\"";
  char args[512];
  /* another work's repository, and the mission repository, are outside a work agent's scope */
  snprintf(args, sizeof args, "{%s,\"targetId\":\"other\"}", file);
  json_t *v = expect(w, w->worker, "commitToRepo", args, NULL, "permission_denied");
  assert_string_equal(reason_of(v), "out_of_scope");
  json_decref(v);
  snprintf(args, sizeof args, "{%s,\"targetRepo\":\"mission\",\"targetId\":\"m1\"}", file);
  json_decref(expect(w, w->worker, "commitToRepo", args, NULL, "permission_denied"));
  /* agent files are reserved to editAgentFile */
  expect_refused(
      w, w->worker, "commitToRepo",
      "{\"files\":[{\"path\":\".works/agents/worker/SOUL.md\",\"content\":\"x\",\"mode\":\"add\"}],"
      "\"commitMessage\":\"m\"}",
      "permission_denied", "agent_files");
  /* and so are the folders on the way to them: a file in their place would block them all */
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *before = tg_test_shell_output("git -C %s rev-parse main", dir);
  const char *on_the_way[] = {".works/agents", ".works"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(args, sizeof args,
             "{\"files\":[{\"path\":\"%s\",\"content\":\"x\",\"mode\":\"add\"}],\"commitMessage\":\"m\"}",
             on_the_way[i]);
    v = expect(w, w->worker, "commitToRepo", args, NULL, "permission_denied");
    assert_string_equal(reason_of(v), "agent_files");
    json_decref(v);
  }
  _cleanup_free_ char *after = tg_test_shell_output("git -C %s rev-parse main", dir);
  assert_string_equal(before, after);
  /* a tenant agent names its target; a mission agent reaches the works of its mission */
  snprintf(args, sizeof args, "{%s}", file);
  v = expect(w, w->tenant, "commitToRepo", args, NULL, "validation_failed");
  assert_string_equal(reason_of(v), "target_needed");
  json_decref(v);
  snprintf(args, sizeof args, "{%s,\"targetRepo\":\"website\",\"targetId\":\"other\"}", file);
  json_decref(expect(w, w->tenant, "commitToRepo", args, NULL, ""));
  json_decref(expect(w, w->planner, "commitToRepo",
                     "{\"files\":[{\"path\":\"p.md\",\"content\":\"p\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"m\",\"targetRepo\":\"data\",\"targetId\":\"site\"}",
                     NULL, ""));
  /* an idea agent writes in its idea's folder of the mission repository, nowhere else */
  v = expect(w, w->thinker, "commitToRepo", args, NULL, "permission_denied");
  json_decref(v);
  snprintf(args, sizeof args, "{%s}", file);
  v = expect(w, w->thinker, "commitToRepo", args, NULL, "permission_denied");
  assert_string_equal(reason_of(v), "outside_scope_tree");
  json_decref(v);
  _cleanup_json_ json_t *idea = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT id FROM ideas WHERE slug = 'i1'", NULL, &idea), 0);
  snprintf(args, sizeof args,
           "{\"files\":[{\"path\":\".works/ideas/%s/notes.md\",\"content\":\"n\",\"mode\":\"add\"}],"
           "\"commitMessage\":\"m\"}",
           json_string_value(json_object_get(idea, "id")));
  json_decref(expect(w, w->thinker, "commitToRepo", args, NULL, ""));

  /* a symbolic link in the tree (pushed by someone with the git program) is never written
   * through, nor replaced by a file */
  char *clone = NULL;
  assert_true(asprintf(&clone, "%s/clone-link", w->f->dir) > 0);
  assert_int_equal(sh("git clone -q %s %s && cd %s && ln -s /etc evil && ln -s docs/a.md alias.md"
                      " && git add evil alias.md && git -c user.name=t -c user.email=t@t commit -qm link"
                      " && git push -q origin HEAD:main 2>/dev/null",
                      dir, clone, clone),
                   0);
  free(clone);
  static const char *const via_link[] = {
      "{\"files\":[{\"path\":\"evil/passwd\",\"content\":\"x\",\"mode\":\"add\"}],\"commitMessage\":\"m\"}",
      "{\"files\":[{\"path\":\"alias.md\",\"content\":\"x\",\"mode\":\"modify\"}],\"commitMessage\":\"m\"}",
      "{\"files\":[{\"path\":\"evil\",\"content\":\"x\",\"mode\":\"add\"}],\"commitMessage\":\"m\"}",
  };
  for (size_t i = 0; i < 3; i++) {
    v = expect(w, w->worker, "commitToRepo", via_link[i], NULL, "validation_failed");
    assert_string_equal(reason_of(v), "symlink");
    json_decref(v);
  }
  /* deleting a link is fine */
  json_decref(expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"evil\",\"mode\":\"delete\"}],\"commitMessage\":\"m\"}",
                     NULL, ""));
}

static void test_edit_agent_file(void **state) {
  world *w = *state;
  /* a work agent's files live in its work's data repository */
  json_t *v = expect(w, w->worker, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"# Worker\\n\"}",
                     NULL, "");
  char hash1[65];
  snprintf(hash1, sizeof hash1, "%s", json_string_value(json_object_get(v, "newHash")));
  json_decref(v);
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *soul =
      tg_test_shell_output("git -C %s show main:.works/agents/worker/SOUL.md", dir);
  assert_string_equal(soul, "# Worker\n");
  _cleanup_free_ char *subject = tg_test_shell_output("git -C %s log -1 --format=%%s main", dir);
  assert_string_equal(subject, "chore(agent/worker): self-edit\n");
  _cleanup_json_ json_t *agent = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT content_hash FROM agents WHERE slug = 'worker'", NULL, &agent), 0);
  assert_string_equal(json_string_value(json_object_get(agent, "content_hash")), hash1);
  /* the same text again changes nothing: refused, and no commit made */
  _cleanup_free_ char *tip = tip_of(dir);
  v = expect(w, w->worker, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"# Worker\\n\"}", NULL,
             "precondition_failed");
  assert_string_equal(reason_of(v), "no_change");
  json_decref(v);
  _cleanup_free_ char *same_tip = tip_of(dir);
  assert_string_equal(tip, same_tip);

  /* expectedHash: a stale one is refused with the current hash */
  char args[400];
  snprintf(args, sizeof args, "{\"name\":\"AGENTS.md\",\"body\":\"a\",\"expectedHash\":\"%064d\"}", 0);
  v = expect(w, w->worker, "editAgentFile", args, NULL, "precondition_failed");
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(v, "error"), "details"), "currentHash")),
                      hash1);
  json_decref(v);
  snprintf(args, sizeof args,
           "{\"name\":\"AGENTS.md\",\"body\":\"a\",\"expectedHash\":\"%s\",\"commitMessage\":\"docs: agents\"}",
           hash1);
  json_decref(expect(w, w->worker, "editAgentFile", args, NULL, ""));
  _cleanup_free_ char *subject2 = tg_test_shell_output("git -C %s log -1 --format=%%s main", dir);
  assert_string_equal(subject2, "docs: agents\n");

  /* the secret scan names the rule and the line, never the secret */
  v = expect(w, w->worker, "editAgentFile",
             "{\"name\":\"TOOLS.md\",\"body\":\"# Tools\\nuse gh" "p_0123456789abcdefghijABCDEFGHIJ012345\\n\"}",
             NULL, "validation_failed");
  char *dump = json_dumps(v, 0);
  assert_null(strstr(dump, "0123456789abcdefghij"));
  free(dump);
  json_t *details = json_object_get(json_object_get(v, "error"), "details");
  assert_string_equal(json_string_value(json_object_get(details, "rule")), "github_pat_classic");
  assert_int_equal(json_integer_value(json_object_get(details, "line")), 2);
  json_decref(v);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE message LIKE '%0123456789abcdefghij%'"), 0);

  /* agent.yml must be YAML; a body over 64 KB (of bytes) is refused */
  v = expect(w, w->worker, "editAgentFile", "{\"name\":\"agent.yml\",\"body\":\"a: [1, 2\\nb: c\"}",
             NULL, "validation_failed");
  assert_string_equal(reason_of(v), "yaml");
  json_decref(v);
  json_decref(expect(w, w->worker, "editAgentFile", "{\"name\":\"agent.yml\",\"body\":\"a: [1, 2]\\n\"}", NULL, ""));
  json_decref(expect(w, w->worker, "editAgentFile", "{\"name\":\"notes.md\",\"body\":\"x\"}", NULL, "validation_failed"));
  json_t *big = json_pack("{s:s,s:s%}", "name", "SOUL.md", "body", "", (size_t)0);
  char *two_byte = malloc(2 * 40000 + 1);
  for (int i = 0; i < 40000; i++) memcpy(two_byte + 2 * i, "\xc3\xa9", 2);
  two_byte[80000] = '\0';
  json_object_set_new(big, "body", json_string(two_byte));
  free(two_byte);
  char *text = json_dumps(big, 0);
  v = expect(w, w->worker, "editAgentFile", text, NULL, "validation_failed");
  assert_string_equal(reason_of(v), "too_large");
  json_decref(v);
  free(text);
  json_decref(big);

  /* one edit per run: a failed attempt does not count, the second success is refused */
  char run[TG_UUID_LEN + 1];
  fixture_run_start(w->f, "worker", run);
  json_decref(expect(w, w->worker, "editAgentFile", "{\"name\":\"agent.yml\",\"body\":\"[\"}", run, "validation_failed"));
  json_decref(expect(w, w->worker, "editAgentFile", "{\"name\":\"HEARTBEAT.md\",\"body\":\"h\"}", run, ""));
  /* the handler knows the run its call belongs to */
  char in_run[200];
  snprintf(in_run, sizeof in_run,
           "SELECT COUNT(*) AS n FROM activity_log WHERE details ->> '$.runId' = '%s'", run);
  assert_int_equal(count(w, in_run), 1);
  v = expect(w, w->worker, "editAgentFile", "{\"name\":\"TOOLS.md\",\"body\":\"t\"}", run, "precondition_failed");
  assert_string_equal(reason_of(v), "per_run_cap");
  json_decref(v);

  /* a tenant agent's files live in the database */
  v = expect(w, w->tenant, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"boss\",\"expectedHash\":\"\"}", NULL, "");
  json_decref(v);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_files f JOIN agents a ON a.id = f.agent_id"
                            " WHERE a.slug = 'boss' AND f.body = 'boss'"), 1);
  /* there too, the same text again is refused, and nothing written */
  long edited =
      count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_FILE_EDITED'");
  v = expect(w, w->tenant, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"boss\"}", NULL,
             "precondition_failed");
  assert_string_equal(reason_of(v), "no_change");
  json_decref(v);
  assert_int_equal(
      count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_FILE_EDITED'"),
      edited);
  /* a mission agent's files live in the mission repository */
  json_decref(expect(w, w->planner, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"plan\"}", NULL, ""));
  _cleanup_free_ char *mdir = repo_dir(w, "missions/m1/mission");
  _cleanup_free_ char *plan =
      tg_test_shell_output("git -C %s show main:.works/agents/planner/SOUL.md", mdir);
  assert_string_equal(plan, "plan");
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_FILE_EDITED'"), 6);
}

static void test_pull_requests(void **state) {
  world *w = *state;
  json_t *v = expect(w, w->worker, "openPullRequest",
                     "{\"files\":[{\"path\":\"pr/one.md\",\"content\":\"one\\n\",\"mode\":\"add\"}],"
                     "\"branchName\":\"feat/one\",\"title\":\"One\",\"body\":\"first\"}",
                     NULL, "");
  assert_int_equal(json_integer_value(json_object_get(v, "prNumber")), 1);
  assert_string_equal(json_string_value(json_object_get(v, "prUrl")),
                      "http://toolgate.test/repos/acme/works/site/data/pulls/1");
  json_decref(v);
  v = expect(w, w->worker, "openPullRequest",
             "{\"files\":[{\"path\":\"pr/two.md\",\"content\":\"two\\n\",\"mode\":\"add\"}],"
             "\"branchName\":\"feat/two\",\"title\":\"Two\",\"body\":\"\"}",
             NULL, "");
  assert_int_equal(json_integer_value(json_object_get(v, "prNumber")), 2);
  json_decref(v);
  /* two pull requests that change one file differently */
  json_decref(expect(w, w->worker, "openPullRequest",
                     "{\"files\":[{\"path\":\"docs/a.md\",\"content\":\"three\\n\",\"mode\":\"modify\"}],"
                     "\"branchName\":\"c1\",\"title\":\"C1\",\"body\":\"\"}", NULL, ""));
  json_decref(expect(w, w->worker, "openPullRequest",
                     "{\"files\":[{\"path\":\"docs/a.md\",\"content\":\"four\\n\",\"mode\":\"modify\"}],"
                     "\"branchName\":\"c2\",\"title\":\"C2\",\"body\":\"\"}", NULL, ""));
  v = expect(w, w->worker, "openPullRequest",
             "{\"files\":[{\"path\":\"x.md\",\"content\":\"x\",\"mode\":\"add\"}],"
             "\"branchName\":\"feat/one\",\"title\":\"Again\",\"body\":\"\"}",
             NULL, "precondition_failed");
  assert_string_equal(reason_of(v), "branch_exists");
  json_decref(v);
  /* git keeps a branch as a file: feat/one/sub cannot stand beside feat/one, nor feat beside
   * feat/one. Refused before anything is written: no pull request, no branch, one row. */
  long prs = count(w, "SELECT COUNT(*) AS n FROM pull_requests");
  long rows = count(w, "SELECT COUNT(*) AS n FROM agent_run_logs");
  static const struct {
    const char *file, *branch, *reason, *clashes_with;
  } refused[] = {
      {"\"path\":\"x.md\",\"content\":\"x\",\"mode\":\"add\"", "feat/one/sub", "branch_clash",
       "feat/one"},
      {"\"path\":\"x.md\",\"content\":\"x\",\"mode\":\"add\"", "feat", "branch_clash", NULL},
      /* a pull request changing nothing is refused as a commit changing nothing is */
      {"\"path\":\"docs/a.md\",\"content\":\"beta\\n\",\"mode\":\"modify\"", "same", "no_change",
       NULL},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char args[300];
    snprintf(args, sizeof args,
             "{\"files\":[{%s}],\"branchName\":\"%s\",\"title\":\"T\",\"body\":\"\"}",
             refused[i].file, refused[i].branch);
    v = expect(w, w->worker, "openPullRequest", args, NULL, "precondition_failed");
    assert_string_equal(reason_of(v), refused[i].reason);
    const char *with = json_string_value(
        json_object_get(json_object_get(json_object_get(v, "error"), "details"), "clashesWith"));
    if (refused[i].clashes_with) assert_string_equal(with, refused[i].clashes_with);
    json_decref(v);
  }
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM pull_requests"), prs);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_run_logs"), rows + 3);
  assert_int_equal(count(w,
                         "SELECT COUNT(*) AS n FROM agent_run_logs WHERE message LIKE"
                         " 'precondition_failed: Branch feat% cannot be made%'"),
                   2);
  json_decref(expect(w, w->worker, "openPullRequest",
                     "{\"files\":[{\"path\":\"x.md\",\"content\":\"x\",\"mode\":\"add\"}],"
                     "\"branchName\":\"-bad\",\"title\":\"Bad\",\"body\":\"\"}",
                     NULL, "validation_failed"));
  /* numbers count per repository */
  v = expect(w, w->other, "openPullRequest",
             "{\"files\":[{\"path\":\"o.md\",\"content\":\"o\",\"mode\":\"add\"}],"
             "\"branchName\":\"o\",\"title\":\"O\",\"body\":\"\"}",
             NULL, "");
  assert_int_equal(json_integer_value(json_object_get(v, "prNumber")), 1);
  json_decref(v);

  v = expect_api(w, "repo.pr.list", "{\"repo\":\"work:site/data\",\"state\":\"open\"}", "");
  assert_int_equal(json_array_size(json_object_get(v, "pullRequests")), 4);
  json_decref(v);
  v = expect_api(w, "repo.pr.show", "{\"repo\":\"work:site/data\",\"number\":1}", "");
  assert_non_null(strstr(json_string_value(json_object_get(v, "diff")), "+++ b/pr/one.md"));
  assert_int_equal(json_integer_value(json_object_get(v, "filesChanged")), 1);
  json_decref(v);
  json_decref(expect_api(w, "repo.pr.show", "{\"repo\":\"work:site/data\",\"number\":99}", "not_found"));

  /* the first merges by fast-forward, the second needs a merge commit */
  v = expect_api(w, "repo.pr.merge", "{\"repo\":\"work:site/data\",\"number\":1}", "");
  assert_true(json_is_true(json_object_get(v, "fastForward")));
  json_decref(v);
  v = expect_api(w, "repo.pr.merge", "{\"repo\":\"work:site/data\",\"number\":2}", "");
  assert_false(json_is_true(json_object_get(v, "fastForward")));
  json_decref(v);
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *parents = tg_test_shell_output("git -C %s log -1 --format=%%p main", dir);
  assert_non_null(strchr(parents, ' ')); /* two parents */
  assert_int_equal(sh("git -C %s cat-file -e main:pr/one.md && git -C %s cat-file -e main:pr/two.md", dir, dir), 0);
  /* the third merges, the fourth then conflicts and changes nothing */
  json_decref(expect_api(w, "repo.pr.merge", "{\"repo\":\"work:site/data\",\"number\":3}", ""));
  _cleanup_free_ char *before = tg_test_shell_output("git -C %s for-each-ref", dir);
  v = expect_api(w, "repo.pr.merge", "{\"repo\":\"work:site/data\",\"number\":4}", "precondition_failed");
  assert_string_equal(reason_of(v), "conflict");
  json_decref(v);
  _cleanup_free_ char *after = tg_test_shell_output("git -C %s for-each-ref", dir);
  assert_string_equal(before, after);
  json_decref(expect_api(w, "repo.pr.close", "{\"repo\":\"work:site/data\",\"number\":4}", ""));
  v = expect_api(w, "repo.pr.merge", "{\"repo\":\"work:site/data\",\"number\":4}", "precondition_failed");
  assert_string_equal(reason_of(v), "not_open");
  json_decref(v);
  json_decref(expect_api(w, "repo.pr.close", "{\"repo\":\"work:site/data\",\"number\":1}", "precondition_failed"));
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_OPENED_PR'"), 5);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'PR_MERGED'"), 3);
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);

  v = expect_api(w, "repo.repository.list", "{}", "");
  assert_true(json_array_size(json_object_get(v, "repos")) >= 3);
  json_decref(v);
}

static void test_create_sub_agent(void **state) {
  world *w = *state;
  json_t *v = expect(w, w->worker, "createSubAgent",
                     "{\"name\":\"Site Helper\",\"capabilities\":\"helps\",\"scope\":\"work\","
                     "\"heartbeatCadence\":\"0 9 * * MON-FRI\",\"permissions\":{\"canSpend\":false}}",
                     NULL, "");
  assert_string_equal(json_string_value(json_object_get(v, "slug")), "site-helper");
  json_decref(v);
  _cleanup_json_ json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT a.status, a.heartbeat_cadence, a.content_hash, c.slug AS creator,"
                                   " (SELECT COUNT(*) FROM grants g WHERE g.principal_id = a.principal_id) AS grants"
                                   " FROM agents a JOIN agents c ON c.id = a.created_by_agent_id"
                                   " WHERE a.slug = 'site-helper'",
                                   NULL, &row),
                   0);
  assert_string_equal(json_string_value(json_object_get(row, "status")), "draft");
  assert_string_equal(json_string_value(json_object_get(row, "creator")), "worker");
  assert_int_equal(json_integer_value(json_object_get(row, "grants")), 0);
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *files =
      tg_test_shell_output("git -C %s ls-tree --name-only main .works/agents/site-helper/", dir);
  assert_string_equal(files, ".works/agents/site-helper/AGENTS.md\n.works/agents/site-helper/HEARTBEAT.md\n"
                             ".works/agents/site-helper/SOUL.md\n.works/agents/site-helper/TOOLS.md\n"
                             ".works/agents/site-helper/agent.yml\n");
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_CREATED'"
                            " AND details LIKE '%\"createdByAgentId\"%'"),
                   1);
  /* a draft does not act */
  char helper[TG_UUID_LEN + 1];
  assert_int_equal(tg_principal_lookup(w->f->db, w->f->tenant_id, TG_PRINCIPAL_AGENT, "site-helper", helper), 0);
  json_decref(expect(w, helper, "agent.tool.list", "{}", NULL, "permission_denied"));

  v = expect(w, w->worker, "createSubAgent",
             "{\"name\":\"Greedy\",\"capabilities\":\"x\",\"scope\":\"work\",\"permissions\":{\"canCommitToRepo\":true}}",
             NULL, "permission_denied");
  assert_string_equal(reason_of(v), "child_permissions");
  json_decref(v);
  static const char *const wider[] = {
      "{\"name\":\"W1\",\"capabilities\":\"x\",\"scope\":\"mission\"}",
      "{\"name\":\"W2\",\"capabilities\":\"x\",\"scope\":\"tenant\"}",
      "{\"name\":\"W3\",\"capabilities\":\"x\",\"scope\":\"work\",\"targetId\":\"other\"}",
      "{\"name\":\"W4\",\"capabilities\":\"x\",\"scope\":\"idea\",\"targetId\":\"i1\"}",
  };
  for (size_t i = 0; i < 4; i++) {
    v = expect(w, w->worker, "createSubAgent", wider[i], NULL, "permission_denied");
    assert_string_equal(reason_of(v), "scope_cascade");
    json_decref(v);
  }
  json_decref(expect(w, w->worker, "createSubAgent",
                     "{\"name\":\"Site Helper\",\"capabilities\":\"x\",\"scope\":\"work\"}", NULL,
                     "precondition_failed"));
  json_decref(expect(w, w->worker, "createSubAgent",
                     "{\"name\":\"Bad Cron\",\"capabilities\":\"x\",\"scope\":\"work\",\"heartbeatCadence\":\"61 * * * *\"}",
                     NULL, "validation_failed"));
  json_decref(expect(w, w->worker, "createSubAgent",
                     "{\"name\":\"Leaky\",\"capabilities\":\"key gl" "pat-abcdefghij0123456789\",\"scope\":\"work\"}",
                     NULL, "validation_failed"));
  json_decref(expect(w, w->worker, "createSubAgent", "{\"name\":\"!!!\",\"capabilities\":\"x\",\"scope\":\"work\"}",
                     NULL, "validation_failed"));
  json_decref(expect(w, w->worker, "createSubAgent", "{\"name\":\"Nowhere\",\"capabilities\":\"x\",\"scope\":\"work\",\"targetId\":\"nope\"}",
                     NULL, "not_found"));
  /* a mission agent creates in its mission, its ideas and works; a tenant agent anywhere */
  json_decref(expect(w, w->planner, "createSubAgent", "{\"name\":\"Idea Kid\",\"capabilities\":\"x\",\"scope\":\"idea\",\"targetId\":\"i1\"}", NULL, ""));
  json_decref(expect(w, w->planner, "createSubAgent", "{\"name\":\"Mission Kid\",\"capabilities\":\"x\",\"scope\":\"mission\"}", NULL, ""));
  json_decref(expect(w, w->tenant, "createSubAgent", "{\"name\":\"Tenant Kid\",\"capabilities\":\"x\",\"scope\":\"tenant\"}", NULL, ""));
  /* A tenant's sub-agent names no target: one given is refused, not dropped. */
  json_decref(expect(w, w->tenant, "createSubAgent",
                     "{\"name\":\"Odd Kid\",\"capabilities\":\"x\",\"scope\":\"tenant\","
                     "\"targetId\":\"site\"}",
                     NULL, "validation_failed"));
  json_decref(expect(w, w->tenant, "createSubAgent", "{\"name\":\"Far Kid\",\"capabilities\":\"x\",\"scope\":\"work\",\"targetId\":\"other\"}", NULL, ""));
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_files f JOIN agents a ON a.id = f.agent_id WHERE a.slug = 'tenant-kid'"), 5);
  /* An agent holds a bounded number of sub-agents not archived; archiving one makes room. */
  long refused_at = -1;
  for (int i = 0; i < 100 && refused_at < 0; i++) {
    char args[160];
    snprintf(args, sizeof args, "{\"name\":\"Kid %d\",\"capabilities\":\"x\",\"scope\":\"tenant\"}",
             i);
    tg_call_result res;
    fixture_call(w->f, w->tenant, TG_SURFACE_AGENT, "createSubAgent", args, NULL, &res);
    if (strcmp(fixture_code(&res), "precondition_failed") == 0) {
      json_t *d = json_object_get(json_object_get(res.value, "error"), "details");
      assert_string_equal(json_string_value(json_object_get(d, "reason")), "too_many_subagents");
      refused_at = (long)json_integer_value(json_object_get(d, "max"));
    } else {
      assert_string_equal(fixture_code(&res), "");
    }
    tg_call_result_done(&res);
  }
  assert_true(refused_at > 0);
  assert_int_equal(
      count(w,
            "SELECT COUNT(*) AS n FROM agents a JOIN agents c ON c.id = a.created_by_agent_id"
            " WHERE c.slug = 'boss' AND a.status <> 'archived'"),
      refused_at);
  json_decref(expect_api(w, "admin.agent.archive", "{\"agentSlug\":\"kid-0\"}", ""));
  json_decref(expect(w, w->tenant, "createSubAgent",
                     "{\"name\":\"Kid again\",\"capabilities\":\"x\",\"scope\":\"tenant\"}", NULL,
                     ""));
  _cleanup_json_ json_t *idea = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT id FROM ideas WHERE slug = 'i1'", NULL, &idea), 0);
  _cleanup_free_ char *mdir = repo_dir(w, "missions/m1/mission");
  assert_int_equal(sh("git -C %s cat-file -e main:.works/ideas/%s/agents/idea-kid/agent.yml", mdir,
                      json_string_value(json_object_get(idea, "id"))),
                   0);

  /* lifecycle */
  v = expect_api(w, "admin.agent.start", "{\"agentSlug\":\"site-helper\"}", "");
  assert_string_equal(json_string_value(json_object_get(v, "status")), "active");
  json_decref(v);
  json_decref(expect_api(w, "admin.agent.start", "{\"agentSlug\":\"site-helper\"}", "precondition_failed"));
  json_decref(expect_api(w, "admin.agent.pause", "{\"agentSlug\":\"site-helper\"}", ""));
  json_decref(expect_api(w, "admin.agent.unarchive", "{\"agentSlug\":\"site-helper\"}", "precondition_failed"));
  json_decref(expect_api(w, "admin.agent.archive", "{\"agentSlug\":\"site-helper\"}", ""));
  v = expect_api(w, "admin.agent.unarchive", "{\"agentSlug\":\"site-helper\"}", "");
  assert_string_equal(json_string_value(json_object_get(v, "status")), "paused");
  json_decref(v);
  json_decref(expect_api(w, "admin.agent.start", "{\"agentSlug\":\"site-helper\"}", ""));
  json_decref(expect_api(w, "admin.agent.pause", "{\"agentSlug\":\"ghost\"}", "not_found"));
}

/* The repository of dir and the database agree: every branch of pattern (of for-each-ref)
 * is at the latest move the database holds for it (abandoned moves aside), and every
 * recorded commit exists. */
static void assert_agree_on(world *w, const char *dir, const char *pattern) {
  _cleanup_free_ char *refs = tg_test_shell_output(
      "git -C %s for-each-ref --format='%%(refname:short) %%(objectname)' %s", dir, pattern);
  char *save = NULL;
  for (char *line = strtok_r(refs, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char branch[128], sha[41], sql[768];
    assert_int_equal(sscanf(line, "%127s %40s", branch, sha), 2);
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) AS n FROM repo_ref_moves m JOIN repos r ON r.id = m.repo_id"
             " WHERE r.path LIKE '%%works/site/data.git' AND m.branch = '%s' AND m.new_sha = '%s'"
             " AND m.abandoned_at IS NULL AND m.seq = (SELECT MAX(seq) FROM repo_ref_moves o"
             " WHERE o.repo_id = m.repo_id AND o.branch = m.branch AND o.abandoned_at IS NULL)",
             branch, sha);
    if (count(w, sql) != 1) fail_msg("branch %s of %s is at %s, not its latest recorded move", branch, dir, sha);
  }
  json_t *rows = NULL;
  assert_int_equal(tg_db_query(w->f->db,
                               "SELECT m.new_sha FROM repo_ref_moves m JOIN repos r ON r.id = m.repo_id"
                               " WHERE r.path LIKE '%works/site/data.git'",
                               NULL, &rows),
                   0);
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row)
    assert_int_equal(sh("git -C %s cat-file -e %s", dir, json_string_value(json_object_get(row, "new_sha"))), 0);
  json_decref(rows);
}

/* assert_agree_on every branch. */
static void assert_agree(world *w, const char *dir) { assert_agree_on(w, dir, "refs/heads"); }

static void test_failure_between_steps(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  int successes = 0;
  /* Step 2 fails: fail the n-th statement of the call, for every n until the call gets
   * through. Objects are written, the record rolls back, the branch never moved. */
  for (int n = 1; n < 400 && successes == 0; n++) {
    char args[256];
    snprintf(args, sizeof args,
             "{\"files\":[{\"path\":\"atom/%d.md\",\"content\":\"%d\",\"mode\":\"add\"}],\"commitMessage\":\"atom\"}",
             n, n);
    _cleanup_free_ char *before = tip_of(dir);
    tg_db_fail_after(w->f->db, n);
    tg_call_result res;
    int r = fixture_call(w->f, w->worker, TG_SURFACE_AGENT, "commitToRepo", args, NULL, &res);
    tg_db_fail_after(w->f->db, 0);
    if (r == 0) successes++;
    else assert_string_equal(fixture_code(&res), "internal_error");
    tg_call_result_done(&res);
    _cleanup_free_ char *after = tip_of(dir);
    assert_int_equal(strcmp(before, after) != 0, r == 0);
    assert_agree(w, dir);
  }
  assert_int_equal(successes, 1);
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);
  _cleanup_free_ char *tree = tg_test_shell_output("git -C %s ls-tree --name-only main atom/", dir);
  assert_non_null(strstr(tree, "atom/"));
  assert_null(strchr(strchr(tree, '\n') + 1, '/')); /* exactly one atom file reached main */

  /* The process dies between step 2 and step 3: the move is recorded, the branch has not
   * moved. The next use of the repository finishes the move. */
  _cleanup_free_ char *before = tip_of(dir);
  json_decref(crash_after_commit(w, "commitToRepo",
                                 "{\"files\":[{\"path\":\"late.md\",\"content\":\"l\",\"mode\":\"add\"}],\"commitMessage\":\"late\"}"));
  _cleanup_free_ char *stalled = tip_of(dir);
  assert_string_equal(stalled, before);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
  _cleanup_free_ char *finished = tip_of(dir);
  assert_string_not_equal(finished, before);
  assert_agree(w, dir);
  _cleanup_free_ char *late = tg_test_shell_output("git -C %s show main:late.md", dir);
  assert_string_equal(late, "l");
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);
}

static const char *race_branch, *race_target;
/* A writer outside toolgate: sets race_branch to race_target just before toolgate moves it. */
static void move_branch_away(const char *repo_path, const char *branch) {
  if (strcmp(branch, race_branch) != 0) return;
  assert_int_equal(sh("git -C %s update-ref refs/heads/%s %s", repo_path, branch, race_target), 0);
}

static void test_concurrent_writer(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *parent = tg_test_shell_output("git -C %s rev-parse main~1", dir);
  parent[40] = '\0';
  race_branch = "main";
  race_target = parent;
  long moves = count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves");
  long refusals = count(w, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE message LIKE 'precondition_failed%'");
  long rows = count(w, "SELECT COUNT(*) AS n FROM agent_run_logs");
  tg_git_test_before_move = move_branch_away;
  json_t *v = expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"race.md\",\"content\":\"r\",\"mode\":\"add\"}],\"commitMessage\":\"race\"}",
                     NULL, "precondition_failed");
  tg_git_test_before_move = NULL;
  assert_string_equal(reason_of(v), "concurrent_write");
  const char *lost = json_string_value(json_object_get(
      json_object_get(json_object_get(v, "error"), "details"), "sha"));
  assert_non_null(lost);
  /* Recorded, then marked abandoned; the call's failure is in its telemetry and its run. */
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves"), moves + 1);
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE new_sha = '%s' AND abandoned_at IS NOT NULL", lost);
  assert_int_equal(count(w, sql), 1);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE message LIKE 'precondition_failed%'"),
                   refusals + 1);
  /* One row for the call: its failure took the place of the row its commit wrote. */
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agent_run_logs"), rows + 1);
  /* Its activity row, which told of a commit that never reached the branch, is taken back. */
  snprintf(sql, sizeof sql,
           "SELECT COUNT(*) AS n FROM activity_log WHERE json_extract(details, '$.sha') = '%s'", lost);
  assert_int_equal(count(w, sql), 0);
  json_decref(v);
  _cleanup_free_ char *head = tip_of(dir);
  assert_string_equal(head, parent); /* the other writer's value stands */
  /* A later use of the repository does not take the branch back from the other writer. */
  json_decref(expect_api(w, "repo.repository.list", "{}", ""));
  _cleanup_free_ char *still = tip_of(dir);
  assert_string_equal(still, parent);
  json_decref(expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"after.md\",\"content\":\"a\",\"mode\":\"add\"}],\"commitMessage\":\"after\"}",
                     NULL, ""));
  _cleanup_free_ char *next = tg_test_shell_output("git -C %s rev-parse main~1", dir);
  assert_int_equal(strncmp(next, parent, 40), 0); /* built on the other writer's value */

  /* A pull request whose branch another writer created first is closed, not left open. */
  race_branch = "race-pr";
  pr_fails_concurrent_write(w, move_branch_away, "race-pr");
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM pull_requests WHERE head_branch = 'race-pr'"
                            " AND state = 'closed'"), 1);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM pull_requests WHERE head_branch = 'race-pr'"
                            " AND state = 'open'"), 0);
  _cleanup_free_ char *pr_tip = tg_test_shell_output("git -C %s rev-parse race-pr", dir);
  assert_int_equal(strncmp(pr_tip, parent, 40), 0);

  /* An agent file edit whose move was given up counts no success in its run: its retry there
   * is not held to the one edit a run. */
  char run[TG_UUID_LEN + 1];
  fixture_run_start(w->f, "worker", run);
  race_branch = "main";
  tg_git_test_before_move = move_branch_away;
  v = expect(w, w->worker, "editAgentFile", "{\"name\":\"TOOLS.md\",\"body\":\"raced\"}", run,
             "precondition_failed");
  tg_git_test_before_move = NULL;
  assert_string_equal(reason_of(v), "concurrent_write");
  json_decref(v);
  json_decref(
      expect(w, w->worker, "editAgentFile", "{\"name\":\"TOOLS.md\",\"body\":\"raced\"}", run, ""));
  v = expect(w, w->worker, "editAgentFile", "{\"name\":\"TOOLS.md\",\"body\":\"again\"}", run,
             "precondition_failed");
  assert_string_equal(reason_of(v), "per_run_cap");
  json_decref(v);
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);
}

/* tg_db_test_queued: the first call to queue waits, before it leads, until every call has
 * queued, so that they share one transaction. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int queued, want;
} gathering = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gather_queued(void) {
  pthread_mutex_lock(&gathering.lock);
  int me = ++gathering.queued;
  pthread_cond_broadcast(&gathering.cond);
  while (me == 1 && gathering.queued < gathering.want)
    pthread_cond_wait(&gathering.cond, &gathering.lock);
  pthread_mutex_unlock(&gathering.lock);
}

typedef struct committer {
  world *w;
  const char *tool; /* NULL: commitToRepo */
  char args[200];
  int status;
  char code[32];
} committer;

/* One call of the worker's (commitToRepo unless named) on a database connection of its own. */
static void *commit_alone(void *arg) {
  committer *c = arg;
  tg_env env = c->w->f->env;
  env.db = tg_test_db_open(c->w->f->dir);
  json_t *args = json_loads(c->args, 0, NULL);
  tg_call_request req = {.principal_id = c->w->worker,
                         .surface = TG_SURFACE_AGENT,
                         .tool = c->tool ? c->tool : "commitToRepo",
                         .args = args};
  tg_call_result res;
  c->status = tg_call(&env, &req, &res);
  snprintf(c->code, sizeof c->code, "%s", fixture_code(&res));
  tg_call_result_done(&res);
  json_decref(args);
  tg_db_close(env.db);
  return NULL;
}

/* Commits of one process to one branch, their writes in one shared transaction: each builds
 * on the one before (none is told another writer moved the branch), and all reach it. */
static void test_calls_of_one_transaction_build_on_each_other(void **state) {
  world *w = *state;
  enum { N = 6 };
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* the repository exists */
  _cleanup_free_ char *before = tip_of(dir);
  long told = count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'");
  committer c[N];
  pthread_t threads[N];
  gathering.queued = 0;
  gathering.want = N;
  tg_db_test_queued = gather_queued;
  for (int i = 0; i < N; i++) {
    c[i] = (committer){.w = w};
    snprintf(c[i].args, sizeof c[i].args,
             "{\"files\":[{\"path\":\"batch/%d.md\",\"content\":\"%d\",\"mode\":\"add\"}],"
             "\"commitMessage\":\"batch %d\"}",
             i, i, i);
    assert_int_equal(pthread_create(&threads[i], NULL, commit_alone, &c[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(threads[i], NULL);
  tg_db_test_queued = NULL;
  for (int i = 0; i < N; i++)
    if (c[i].status != 0) fail_msg("commit %d: %s", i, c[i].code);
  _cleanup_free_ char *n = tg_test_shell_output("git -C %s rev-list --count %s..main", dir, before);
  assert_int_equal(atoi(n), N);
  _cleanup_free_ char *tree =
      tg_test_shell_output("git -C %s ls-tree --name-only main batch/ | wc -l", dir);
  assert_int_equal(atoi(tree), N);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE applied_at IS NULL"
                            " AND abandoned_at IS NULL"),
                   0);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'"),
                   told + N);
  assert_agree_on(w, dir, "refs/heads/main"); /* other tests raced other branches */
  assert_int_equal(sh("git -C %s fsck --strict --no-progress >/dev/null 2>&1", dir), 0);
}

/* Pull requests of one shared transaction on branches that cannot both be (f2 and f2/sub): the
 * second sees the first's branch, recorded and not made yet, and is refused before it writes,
 * instead of failing at its move with its pull request opened and closed. */
static void test_clashing_branches_of_one_transaction(void **state) {
  world *w = *state;
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* the repository exists */
  static const char *const names[] = {"f2", "f2/sub"};
  committer c[2];
  pthread_t threads[2];
  gathering.queued = 0;
  gathering.want = 2;
  tg_db_test_queued = gather_queued;
  for (int i = 0; i < 2; i++) {
    c[i] = (committer){.w = w, .tool = "openPullRequest"};
    snprintf(c[i].args, sizeof c[i].args,
             "{\"files\":[{\"path\":\"clash/%d.md\",\"content\":\"%d\",\"mode\":\"add\"}],"
             "\"branchName\":\"%s\",\"title\":\"T\",\"body\":\"\"}",
             i, i, names[i]);
    assert_int_equal(pthread_create(&threads[i], NULL, commit_alone, &c[i]), 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  tg_db_test_queued = NULL;
  int made = c[0].status == 0 ? 0 : 1;
  assert_int_equal(c[made].status, 0);
  assert_string_equal(c[1 - made].code, "precondition_failed");
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM pull_requests WHERE head_branch LIKE 'f2%'"),
                   1);
  assert_int_equal(count(w,
                         "SELECT COUNT(*) AS n FROM pull_requests WHERE head_branch LIKE 'f2%'"
                         " AND state = 'open'"),
                   1);
}

/* A branch whose lock file another git writer holds (here: one left as it crashed): the call
 * fails as retryable, and its commit is never published, not even once the lock is gone. */
static void test_locked_branch_fails_and_stays_unpublished(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(expect_api(w, "repo.repository.list", "{}", ""));
  _cleanup_free_ char *before = tip_of(dir);
  long abandoned = count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE abandoned_at IS NOT NULL");
  long told = count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'");
  assert_int_equal(sh("touch %s/refs/heads/main.lock", dir), 0);
  json_t *v = expect(w, w->worker, "commitToRepo",
                     "{\"files\":[{\"path\":\"locked.md\",\"content\":\"l\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"locked\"}",
                     NULL, "precondition_failed");
  assert_string_equal(reason_of(v), "branch_locked");
  json_decref(v);
  assert_int_equal(sh("rm %s/refs/heads/main.lock", dir), 0);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* finishes what is recorded */
  _cleanup_free_ char *after = tip_of(dir);
  assert_string_equal(before, after);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE abandoned_at IS NOT NULL"),
                   abandoned + 1);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_COMMITTED_TO_REPO'"),
                   told);
  assert_agree_on(w, dir, "refs/heads/main"); /* other tests raced other branches */
}

static world *hooked;        /* what before_second_move works on */
static char hooked_dir[512]; /* its repository */
static char given_up[41];    /* the commit whose move it gives up */
static int moves_seen;

/* The worker's commitToRepo adding path, with hook as tg_git_test_before_move (working on w
 * and dir): expects precondition_failed, and returns the answer. */
static json_t *commit_hooked(world *w, const char *dir,
                             void (*hook)(const char *repo_path, const char *branch),
                             const char *path) {
  hooked = w;
  snprintf(hooked_dir, sizeof hooked_dir, "%s", dir);
  moves_seen = 0;
  tg_git_test_before_move = hook;
  char args[200];
  snprintf(args, sizeof args,
           "{\"files\":[{\"path\":\"%s\",\"content\":\"x\",\"mode\":\"add\"}],"
           "\"commitMessage\":\"%s\"}", path, path);
  json_t *v = expect(w, w->worker, "commitToRepo", args, NULL, "precondition_failed");
  tg_git_test_before_move = NULL;
  return v;
}

/* tg_git_test_before_move: lets the first move meet the lock; before the second, removes the
 * lock and gives up the move of given_up, as that commit's own call would. */
static void before_second_move(const char *repo_path, const char *branch) {
  (void)repo_path;
  if (strcmp(branch, "main") != 0 || ++moves_seen != 2) return;
  assert_int_equal(sh("rm %s/refs/heads/main.lock", hooked_dir), 0);
  tg_db *other = tg_test_db_open(hooked->f->dir);
  assert_int_equal(tg_db_exec(other, "UPDATE repo_ref_moves SET abandoned_at = 'now' WHERE new_sha = $1",
                              json_pack("[s]", given_up), NULL),
                   0);
  tg_db_close(other);
}

/* A call that built on another call's commit, still to be published as it took the
 * repository, is told when that one was given up: no other writer moved the branch. */
static void test_built_on_a_commit_given_up(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(expect_api(w, "repo.repository.list", "{}", ""));
  _cleanup_free_ char *before = tip_of(dir);
  /* Its transaction committed, its move still to make (its step has not run yet). */
  json_t *first = crash_after_commit(w, "commitToRepo",
                                     "{\"files\":[{\"path\":\"base.md\",\"content\":\"b\",\"mode\":\"add\"}],"
                                     "\"commitMessage\":\"base\"}");
  snprintf(given_up, sizeof given_up, "%s", json_string_value(json_object_get(first, "sha")));
  json_decref(first);
  /* The branch locked as the next call takes the repository: it builds on the first. */
  assert_int_equal(sh("touch %s/refs/heads/main.lock", dir), 0);
  json_t *v = commit_hooked(w, dir, before_second_move, "on-base.md");
  assert_int_equal(moves_seen, 2);
  assert_string_equal(reason_of(v), "base_abandoned");
  json_decref(v);
  _cleanup_free_ char *after = tip_of(dir);
  assert_string_equal(before, after);
  assert_agree_on(w, dir, "refs/heads/main");
}

/* An agent's edit while another of its edits is still to be published is refused: should that
 * one be given up, this one's undo would restore the hash of files that never were. */
static void test_edit_while_another_is_in_flight(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(crash_after_commit(w, "editAgentFile", "{\"name\":\"HEARTBEAT.md\",\"body\":\"one\"}"));
  /* Locked, the branch keeps that edit unpublished as the next takes the repository. */
  assert_int_equal(sh("touch %s/refs/heads/main.lock", dir), 0);
  json_t *v = expect(w, w->worker, "editAgentFile", "{\"name\":\"HEARTBEAT.md\",\"body\":\"two\"}",
                     NULL, "precondition_failed");
  assert_string_equal(reason_of(v), "edit_in_flight");
  json_decref(v);
  assert_int_equal(sh("rm %s/refs/heads/main.lock", dir), 0);
  /* Unlocked, the next takes the repository as the first edit's call would: it is published. */
  json_decref(expect(w, w->worker, "editAgentFile", "{\"name\":\"HEARTBEAT.md\",\"body\":\"three\"}",
                     NULL, ""));
  _cleanup_free_ char *body =
      tg_test_shell_output("git -C %s show main:.works/agents/worker/HEARTBEAT.md", dir);
  assert_string_equal(body, "three");
  _cleanup_free_ char *first =
      tg_test_shell_output("git -C %s show main~1:.works/agents/worker/HEARTBEAT.md", dir);
  assert_string_equal(first, "one");
  assert_agree_on(w, dir, "refs/heads/main");
}

static void test_repository_list_bounds(void **state) {
  world *w = *state;
  /* A listing takes every repository (settling each): more than a handful is no failure. */
  for (int i = 1; i <= 6; i++) {
    char args[256];
    snprintf(args, sizeof args, "{\"slug\":\"listed-%d\",\"missionSlug\":\"m1\"}", i);
    owner_call(w->f, "work.work.create", args);
    snprintf(args, sizeof args,
             "{\"files\":[{\"path\":\"l.md\",\"content\":\"l\",\"mode\":\"add\"}],"
             "\"commitMessage\":\"l\",\"targetRepo\":\"data\",\"targetId\":\"listed-%d\"}", i);
    json_decref(expect(w, w->tenant, "commitToRepo", args, NULL, ""));
  }
  json_t *v = expect_api(w, "repo.repository.list", "{\"limit\":500}", "");
  assert_true(json_array_size(json_object_get(v, "repos")) >= 6);
  json_decref(v);
  v = expect_api(w, "repo.repository.list", "{\"limit\":1}", "");
  assert_int_equal(json_array_size(json_object_get(v, "repos")), 1);
  assert_true(json_is_true(json_object_get(v, "truncated")));
  json_decref(v);
  json_decref(expect_api(w, "repo.repository.list", "{\"limit\":0}", "validation_failed"));
  json_decref(expect_api(w, "repo.repository.list", "{\"limit\":501}", "validation_failed"));

  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  assert_int_equal(sh("for i in $(seq 120); do git -C %s update-ref refs/heads/many-$i main || exit 1; done", dir), 0);
  v = expect_api(w, "repo.repository.list", "{\"limit\":500}", "");
  assert_false(json_is_true(json_object_get(v, "truncated")));
  size_t i;
  json_t *repo, *site = NULL;
  json_array_foreach(json_object_get(v, "repos"), i, repo) {
    if (strcmp(json_string_value(json_object_get(repo, "repo")), "work:site/data") == 0) site = repo;
    else assert_null(json_object_get(repo, "branchesTruncated"));
  }
  assert_non_null(site);
  assert_int_equal(json_array_size(json_object_get(site, "branches")), 100);
  assert_true(json_is_true(json_object_get(site, "branchesTruncated")));
  json_decref(v);
}

/* What a writer outside toolgate does to a branch after toolgate's moves applied stands:
 * a deleted pull-request branch is not created again, a reset branch is not moved back, by
 * the next use of the repository; no move is left pending. */
static void test_changes_outside_stand(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(expect(w, w->worker, "openPullRequest",
                     "{\"files\":[{\"path\":\"gone.md\",\"content\":\"g\\n\",\"mode\":\"add\"}],"
                     "\"branchName\":\"outside/gone\",\"title\":\"Gone\",\"body\":\"\"}",
                     NULL, ""));
  assert_int_equal(sh("git -C %s update-ref -d refs/heads/outside/gone", dir), 0);
  _cleanup_free_ char *reset = tg_test_shell_output("git -C %s rev-parse main~1", dir);
  reset[40] = '\0';
  assert_int_equal(sh("git -C %s update-ref refs/heads/main %s", dir, reset), 0);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
  assert_int_not_equal(sh("git -C %s rev-parse -q --verify refs/heads/outside/gone >/dev/null", dir), 0);
  _cleanup_free_ char *main_now = tip_of(dir);
  assert_string_equal(main_now, reset);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves"
                            " WHERE applied_at IS NULL AND abandoned_at IS NULL"), 0);
}

/* A move left pending by a process that died, whose commit another writer then put on the
 * branch and built on: the branch holds it, so the next use marks it applied (not abandoned)
 * and leaves the branch where that writer put it. */
static void test_pending_move_already_built_on(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *before = tip_of(dir);
  json_decref(crash_after_commit(w, "commitToRepo",
                                 "{\"files\":[{\"path\":\"kept.md\",\"content\":\"k\",\"mode\":\"add\"}],"
                                 "\"commitMessage\":\"kept\"}"));
  _cleanup_json_ json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT id, new_sha FROM repo_ref_moves"
                                   " WHERE applied_at IS NULL AND abandoned_at IS NULL",
                                   NULL, &row),
                   0);
  assert_non_null(row);
  const char *made = json_string_value(json_object_get(row, "new_sha"));
  _cleanup_free_ char *stalled = tip_of(dir);
  assert_string_equal(stalled, before);
  assert_int_equal(sh("git -C %s update-ref refs/heads/main $(git -C %s commit-tree %s^{tree} -p %s"
                      " -m outside)", dir, dir, made, made), 0);
  _cleanup_free_ char *outside = tip_of(dir);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
  _cleanup_free_ char *now = tip_of(dir);
  assert_string_equal(now, outside);
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE id = '%s' AND applied_at IS NOT NULL"
           " AND abandoned_at IS NULL", json_string_value(json_object_get(row, "id")));
  assert_int_equal(count(w, sql), 1);
}

/* A move left pending by a process that died, whose branch another writer then moved
 * elsewhere: the next use gives it up and takes back what its call wrote, as the call itself
 * would have: editAgentFile's new hash is undone and its activity row deleted. */
static void test_pending_move_given_up_takes_back(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  const char *hash_sql = "SELECT content_hash FROM agents WHERE slug = 'worker'";
  const char *edits_sql = "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_FILE_EDITED'";
  _cleanup_json_ json_t *hash_before = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, hash_sql, NULL, &hash_before), 0);
  long edits = count(w, edits_sql);
  _cleanup_json_ json_t *v =
      crash_after_commit(w, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"# Lost\\n\"}");
  _cleanup_json_ json_t *hash_dead = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, hash_sql, NULL, &hash_dead), 0);
  assert_string_equal(json_string_value(json_object_get(hash_dead, "content_hash")),
                      json_string_value(json_object_get(v, "newHash")));
  assert_int_equal(count(w, edits_sql), edits + 1);
  assert_int_equal(sh("git -C %s update-ref refs/heads/main $(git -C %s commit-tree main^{tree} -p main"
                      " -m outside)", dir, dir), 0);
  _cleanup_free_ char *outside = tip_of(dir);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
  _cleanup_free_ char *now = tip_of(dir);
  assert_string_equal(now, outside);
  _cleanup_json_ json_t *hash_after = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, hash_sql, NULL, &hash_after), 0);
  assert_true(json_equal(hash_after, hash_before));
  assert_int_equal(count(w, edits_sql), edits);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves"
                            " WHERE applied_at IS NULL AND abandoned_at IS NULL"), 0);
}

/* What a given-up move takes back that the database no longer takes (a statement of an older
 * schema) or that does not read is passed over: the repository stays usable, and the move is
 * given up all the same. */
static void test_take_back_that_fails_is_passed_over(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  static const char *const broken[] = {
      "{\"undo\":\"UPDATE no_such_table SET x = 1\",\"params\":[],\"activity\":[]}",
      "not JSON"};
  for (size_t i = 0; i < 2; i++) {
    char args[200];
    snprintf(args, sizeof args,
             "{\"files\":[{\"path\":\"broken%zu.md\",\"content\":\"b\",\"mode\":\"add\"}],"
             "\"commitMessage\":\"broken\"}", i);
    json_decref(crash_after_commit(w, "commitToRepo", args));
    assert_int_equal(tg_db_exec(w->f->db,
                                "UPDATE repo_ref_moves SET take_back = $1"
                                " WHERE applied_at IS NULL AND abandoned_at IS NULL",
                                json_pack("[s]", broken[i]), NULL),
                     0);
    assert_int_equal(sh("git -C %s update-ref refs/heads/main $(git -C %s commit-tree main^{tree}"
                        " -p main -m outside)", dir, dir), 0);
    json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
    assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM repo_ref_moves"
                              " WHERE applied_at IS NULL AND abandoned_at IS NULL"), 0);
  }
}

/* Moves main of dir to a commit of its own, as a program outside toolgate would. */
static void move_main_outside(const char *dir) {
  assert_int_equal(sh("git -C %s update-ref refs/heads/main $(git -C %s commit-tree main^{tree} -p main"
                      " -m outside)", dir, dir), 0);
}

/* What a call reads of what taking the repository may take back, it reads after: an edit's
 * current hash, once an edit a crash left pending is given up, is the one taken back to. */
static void test_edit_reads_the_hash_taken_back(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_t *v = expect(w, w->worker, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"v1\\n\"}",
                     NULL, "");
  char kept[65];
  snprintf(kept, sizeof kept, "%s", json_string_value(json_object_get(v, "newHash")));
  json_decref(v);
  json_decref(crash_after_commit(w, "editAgentFile", "{\"name\":\"SOUL.md\",\"body\":\"v2\\n\"}"));
  move_main_outside(dir);
  char args[200];
  snprintf(args, sizeof args, "{\"name\":\"AGENTS.md\",\"body\":\"x\\n\",\"expectedHash\":\"%s\"}",
           kept);
  json_decref(expect(w, w->worker, "editAgentFile", args, NULL, ""));
  char sql[300];
  snprintf(sql, sizeof sql,
           "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'AGENT_FILE_EDITED'"
           " AND json_extract(details, '$.prevHash') = '%s' AND json_extract(details, '$.name') = 'AGENTS.md'",
           kept);
  assert_int_equal(count(w, sql), 1);
}

/* A pull request whose opening a crash left pending, given up as the merge takes the
 * repository (another program made its branch), is not open: the merge is refused, moves
 * nothing, and what it found given up stays so (the pull request closed), though the
 * refusal rolls back its transaction. */
static void test_merge_reads_the_state_taken_back(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_t *v = crash_after_commit(w, "openPullRequest",
                                 "{\"files\":[{\"path\":\"feat.md\",\"content\":\"f\",\"mode\":\"add\"}],"
                                 "\"branchName\":\"taken-back\",\"title\":\"Taken back\",\"body\":\"\"}");
  json_int_t number = json_integer_value(json_object_get(v, "prNumber"));
  json_decref(v);
  assert_int_equal(sh("git -C %s update-ref refs/heads/taken-back $(git -C %s commit-tree main^{tree}"
                      " -p main -m outside) ''", dir, dir), 0);
  _cleanup_free_ char *before = tip_of(dir);
  char args[100];
  snprintf(args, sizeof args, "{\"repo\":\"work:site/data\",\"number\":%lld}", (long long)number);
  v = expect_api(w, "repo.pr.merge", args, "precondition_failed");
  assert_string_equal(reason_of(v), "not_open");
  json_decref(v);
  _cleanup_free_ char *after = tip_of(dir);
  assert_string_equal(before, after);
  snprintf(args, sizeof args,
           "SELECT COUNT(*) AS n FROM pull_requests WHERE number = %lld AND state = 'closed'",
           (long long)number);
  assert_int_equal(count(w, args), 1);
}

/* An agent whose creation a crash left pending, given up as its own call takes the
 * repository (archived), does not act: the call is refused, nothing published, and the
 * agent stays archived. */
static void test_agent_given_up_does_not_act(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(crash_after_commit(w, "createSubAgent",
                                 "{\"name\":\"Given Up\",\"capabilities\":\"x\",\"scope\":\"work\","
                                 "\"heartbeatCadence\":\"manual\"}"));
  json_decref(expect_api(w, "admin.agent.start", "{\"agentSlug\":\"given-up\"}", ""));
  json_decref(expect_api(w, "admin.grant.add",
                         "{\"agentSlug\":\"given-up\",\"permission\":\"canCommitToRepo\"}", ""));
  char kid[TG_UUID_LEN + 1];
  assert_int_equal(tg_principal_lookup(w->f->db, w->f->tenant_id, TG_PRINCIPAL_AGENT, "given-up", kid), 0);
  move_main_outside(dir);
  _cleanup_free_ char *before = tip_of(dir);
  json_t *v = expect(w, kid, "commitToRepo",
                     "{\"files\":[{\"path\":\"kid.md\",\"content\":\"k\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"kid\"}",
                     NULL, "permission_denied");
  assert_string_equal(reason_of(v), "agent_not_active");
  json_decref(v);
  _cleanup_free_ char *after = tip_of(dir);
  assert_string_equal(before, after);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM agents WHERE slug = 'given-up'"
                            " AND status = 'archived'"), 1);
}

/* tg_git_test_before_move: another use of the repository gives up the call's move (it saw
 * the branch elsewhere) before the branch comes back to the value the call expects. */
static void give_up_before_move(const char *repo_path, const char *branch) {
  (void)repo_path;
  (void)branch;
  tg_db *other = tg_test_db_open(hooked->f->dir);
  assert_int_equal(tg_db_exec(other, "UPDATE repo_ref_moves SET abandoned_at = 'now'"
                                     " WHERE applied_at IS NULL AND abandoned_at IS NULL",
                              NULL, NULL),
                   0);
  tg_db_close(other);
}

/* A move given up by another use before this call's compare-and-swap succeeded (the branch
 * went away and came back) stays given up: the call fails, and its branch is moved back. */
static void test_move_given_up_first_is_moved_back(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  _cleanup_free_ char *before = tip_of(dir);
  json_t *v = commit_hooked(w, dir, give_up_before_move, "aba.md");
  assert_string_equal(reason_of(v), "concurrent_write");
  json_decref(v);
  _cleanup_free_ char *after = tip_of(dir);
  assert_string_equal(before, after);
}

/* So is a branch the call created: it is deleted. */
static void test_branch_given_up_first_is_deleted(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  hooked = w;
  pr_fails_concurrent_write(w, give_up_before_move, "aba-pr");
  assert_int_not_equal(
      sh("git --git-dir=%s rev-parse -q --verify refs/heads/aba-pr >/dev/null", dir), 0);
}

static int move_main_at; /* which change of main move_main_before_change comes before */

/* tg_git_test_before_move: another writer builds on main before its change number
 * move_main_at (counted in moves_seen). */
static void move_main_before_change(const char *repo_path, const char *branch) {
  (void)repo_path;
  if (strcmp(branch, "main") == 0 && ++moves_seen == move_main_at)
    move_main_outside(hooked_dir);
}

/* A new repository's first commit is moved onto its branch before the call's transaction;
 * a call that then fails takes it back: no branch points at a commit no row records. Unless
 * another writer built on it meanwhile: then the branch stays. */
static void test_failed_first_use_leaves_no_branch(void **state) {
  world *w = *state;
  owner_call(w->f, "work.work.create", "{\"slug\":\"fresh\",\"missionSlug\":\"m1\"}");
  char agent[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"fresher\",\"scope\":\"work:fresh\"," GRANTS "}", agent);
  _cleanup_free_ char *dir = repo_dir(w, "works/fresh/data");
  static const struct { const char *tool, *args, *code; } failing[] = {
      {"commitToRepo",
       "{\"files\":[{\"path\":\"a.md\",\"content\":\"a\",\"mode\":\"add\"}],"
       "\"commitMessage\":\"m\",\"branch\":\"nope\"}",
       "not_found"},
      {"editAgentFile",
       "{\"name\":\"SOUL.md\",\"body\":\"hi\",\"expectedHash\":"
       "\"0000000000000000000000000000000000000000000000000000000000000000\"}",
       "precondition_failed"},
  };
  for (size_t i = 0; i < 2; i++) {
    json_decref(expect(w, agent, failing[i].tool, failing[i].args, NULL, failing[i].code));
    _cleanup_free_ char *refs = tg_test_shell_output("git --git-dir=%s for-each-ref", dir);
    if (*refs) fail_msg("%s failed but left %s", failing[i].tool, refs);
    assert_int_equal(
        count(w, "SELECT COUNT(*) AS n FROM repos WHERE path LIKE '%/fresh/data.git'"), 0);
  }
  json_decref(expect(w, agent, "commitToRepo",
                     "{\"files\":[{\"path\":\"a.md\",\"content\":\"a\",\"mode\":\"add\"}],"
                     "\"commitMessage\":\"m\"}",
                     NULL, ""));
  _cleanup_free_ char *commits =
      tg_test_shell_output("git --git-dir=%s rev-list --count main", dir);
  assert_string_equal(commits, "2\n");

  owner_call(w->f, "work.work.create", "{\"slug\":\"fresh2\",\"missionSlug\":\"m1\"}");
  fixture_agent(w->f, "{\"slug\":\"fresher2\",\"scope\":\"work:fresh2\"," GRANTS "}", agent);
  _cleanup_free_ char *dir2 = repo_dir(w, "works/fresh2/data");
  snprintf(hooked_dir, sizeof hooked_dir, "%s", dir2);
  moves_seen = 0;
  move_main_at = 2; /* the take-back of the failed call's first commit */
  tg_git_test_before_move = move_main_before_change;
  json_decref(expect(w, agent, failing[0].tool, failing[0].args, NULL, failing[0].code));
  tg_git_test_before_move = NULL;
  assert_int_equal(moves_seen, 2);
  _cleanup_free_ char *history =
      tg_test_shell_output("git --git-dir=%s log --format=%%s main", dir2);
  assert_string_equal(history, "outside\nInitialize work:fresh2/data\n");
}


/* A branch another git writer keeps locked holds back its own recorded moves only: those of
 * the repository's other branches are finished by the next use. */
static void test_locked_branch_holds_back_only_its_moves(void **state) {
  world *w = *state;
  _cleanup_free_ char *dir = repo_dir(w, "works/site/data");
  json_decref(crash_after_commit(w, "openPullRequest",
                                 "{\"files\":[{\"path\":\"held.md\",\"content\":\"h\",\"mode\":\"add\"}],"
                                 "\"branchName\":\"held-back\",\"title\":\"Held\",\"body\":\"\"}"));
  assert_int_equal(sh("touch %s/refs/heads/held-back.lock", dir), 0);
  json_decref(crash_after_commit(w, "commitToRepo",
                                 "{\"files\":[{\"path\":\"free.md\",\"content\":\"f\",\"mode\":\"add\"}],"
                                 "\"commitMessage\":\"free\"}"));
  move_main_outside(dir);
  json_decref(expect_api(w, "repo.repository.list", "{}", "")); /* uses the repository */
  static const char pending_on[] = "SELECT COUNT(*) AS n FROM repo_ref_moves WHERE branch = '%s'"
                                   " AND applied_at IS NULL AND abandoned_at IS NULL";
  char sql[200];
  snprintf(sql, sizeof sql, pending_on, "main");
  assert_int_equal(count(w, sql), 0);
  snprintf(sql, sizeof sql, pending_on, "held-back");
  assert_int_equal(count(w, sql), 1);
  /* Nor does it hold back a call on another branch, which another program moved as it ran:
   * told so at once, not that a branch stayed locked. */
  move_main_at = 1;
  json_t *v = commit_hooked(w, dir, move_main_before_change, "raced.md");
  assert_string_equal(reason_of(v), "concurrent_write");
  json_decref(v);
  assert_int_equal(sh("rm %s/refs/heads/held-back.lock", dir), 0);
  json_decref(expect_api(w, "repo.repository.list", "{}", ""));
  assert_int_equal(count(w, sql), 0);
}

int main(void) {
  if (system("git --version >/dev/null 2>&1") != 0) {
    puts("the git program is needed to check the repositories");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_commit_to_repo),
      cmocka_unit_test(test_commit_scope_rules),
      cmocka_unit_test(test_a_long_commit_message_is_kept_whole),
      cmocka_unit_test(test_edit_agent_file),
      cmocka_unit_test(test_pull_requests),
      cmocka_unit_test(test_create_sub_agent),
      cmocka_unit_test(test_failure_between_steps),
      cmocka_unit_test(test_concurrent_writer),
      cmocka_unit_test(test_calls_of_one_transaction_build_on_each_other),
      cmocka_unit_test(test_clashing_branches_of_one_transaction),
      cmocka_unit_test(test_locked_branch_fails_and_stays_unpublished),
      cmocka_unit_test(test_built_on_a_commit_given_up),
      cmocka_unit_test(test_edit_while_another_is_in_flight),
      cmocka_unit_test(test_repository_list_bounds),
      cmocka_unit_test(test_changes_outside_stand),
      cmocka_unit_test(test_pending_move_already_built_on),
      cmocka_unit_test(test_pending_move_given_up_takes_back),
      cmocka_unit_test(test_take_back_that_fails_is_passed_over),
      cmocka_unit_test(test_edit_reads_the_hash_taken_back),
      cmocka_unit_test(test_merge_reads_the_state_taken_back),
      cmocka_unit_test(test_move_given_up_first_is_moved_back),
      cmocka_unit_test(test_branch_given_up_first_is_deleted),
      cmocka_unit_test(test_agent_given_up_does_not_act),
      cmocka_unit_test(test_locked_branch_holds_back_only_its_moves),
      cmocka_unit_test(test_failed_first_use_leaves_no_branch),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

/* The gate test every provider inherits: for each registered tool that requires a
 * permission, a caller holding every other grant but that one is refused with
 * permission_denied naming it, and no table but agent_run_logs changes, and no ref of any
 * repository under the data folder moves. Tools that write to repositories get arguments
 * that would commit, so the gate alone stands between the call and a commit. */
#define _GNU_SOURCE
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "util/cleanup.h"
#include "util/status.h"

/* Every permission any tool declares, so the caller lacks only the one under test. */
static json_t *all_permissions(const tg_registry *reg) {
  json_t *set = json_object();
  for (size_t i = 0; i < tg_registry_count(reg); i++) {
    const tg_tool *t = tg_registry_at(reg, i);
    for (size_t k = 0; k < t->n_permissions; k++) json_object_set_new(set, t->permissions[k], json_true());
  }
  return set;
}

static void grant(fixture *f, const char *slug, const char *permission, bool add) {
  char args[256];
  snprintf(args, sizeof args, "{\"agentSlug\":\"%s\",\"permission\":\"%s\"}", slug, permission);
  tg_call_result res;
  assert_int_equal(fixture_call(f, f->owner, TG_SURFACE_API, add ? "admin.grant.add" : "admin.grant.revoke",
                                args, NULL, &res),
                   0);
  tg_call_result_done(&res);
}

/* admin.token.revoke's: a live token's id, filled in once the token exists. */
static char revoke_args[128];

/* Arguments that would write to a repository, or revoke a live token, if the gate let the
 * call through. */
static const struct { const char *tool, *args; } writing_args[] = {
    {"admin.token.revoke", revoke_args},
    {"repo.commit.create",
     "{\"files\":[{\"path\":\"g.md\",\"content\":\"g\",\"mode\":\"add\"}],"
     "\"commitMessage\":\"gate\",\"targetRepo\":\"data\",\"targetId\":\"gw\"}"},
    {"repo.pr.open",
     "{\"files\":[{\"path\":\"g.md\",\"content\":\"g\",\"mode\":\"add\"}],\"branchName\":\"gate\","
     "\"title\":\"gate\",\"body\":\"\",\"targetRepo\":\"data\",\"targetId\":\"gw\"}"},
    {"agent.file.edit", "{\"name\":\"SOUL.md\",\"body\":\"gate\"}"},
    {"agent.subagent.create",
     "{\"name\":\"gate kid\",\"capabilities\":\"x\",\"scope\":\"work\",\"targetId\":\"gw\"}"},
    {"repo.pr.merge", "{\"repo\":\"work:gw/data\",\"number\":1}"},
};

static const char *args_for(const tg_tool *t) {
  for (size_t i = 0; i < sizeof writing_args / sizeof writing_args[0]; i++)
    if (strcmp(writing_args[i].tool, t->name) == 0) return writing_args[i].args;
  return "{}";
}

/* Every ref of every repository under dir, as text. */
static char *refs_snapshot(const char *dir) {
  return tg_test_shell_output(
      "find %s/repos -name '*.git' -type d -prune 2>/dev/null | sort | while read d;"
      " do echo \"$d\"; git -C \"$d\" for-each-ref; done", dir);
}

/* A member user, who holds no grant of its own (bootstrap writes: toolgate has no user tool
 * yet); its principal id in id. */
static void member_user(fixture *f, char id[TG_UUID_LEN + 1]) {
  snprintf(id, TG_UUID_LEN + 1, "00000000-0000-7000-8000-00000000a11d");
  assert_int_equal(tg_db_exec(f->db,
                              "INSERT INTO principals (id, tenant_id, kind, created_at)"
                              " VALUES ($1, $2, 'user', 'now')",
                              json_pack("[ss]", id, f->tenant_id), NULL),
                   0);
  assert_int_equal(tg_db_exec(f->db,
                              "INSERT INTO users (id, tenant_id, principal_id, username, role,"
                              " created_at) VALUES ('00000000-0000-7000-8000-00000000a11c', $1, $2,"
                              " 'member', 'member', 'now')",
                              json_pack("[ss]", f->tenant_id, id), NULL),
                   0);
}

static tg_surface first_surface(const tg_tool *t) {
  for (unsigned bit = TG_SURFACE_AGENT; bit <= TG_SURFACE_API; bit <<= 1)
    if (t->surfaces & bit) return (tg_surface)bit;
  return TG_SURFACE_AGENT;
}

static void test_every_gated_tool_refuses_without_its_grant(void **state) {
  fixture *f = fixture_new(NULL);
  char agent[TG_UUID_LEN + 1], member[TG_UUID_LEN + 1];
  fixture_agent(f, "{\"slug\":\"probe\"}", agent);
  member_user(f, member); /* the caller of tools no agent may call: its role lacks their grants */
  _cleanup_json_ json_t *perms = all_permissions(f->registry);
  const char *perm;
  json_t *v;
  json_object_foreach(perms, perm, v) grant(f, "probe", perm, true);
  /* A work whose data repository exists, with an open pull request to merge. */
  static const struct { const char *tool, *args; } world[] = {
      {"work.mission.create", "{\"slug\":\"gm\",\"title\":\"gm\"}"},
      {"work.work.create", "{\"slug\":\"gw\",\"missionSlug\":\"gm\"}"},
  };
  for (size_t i = 0; i < 2; i++) {
    tg_call_result res;
    assert_int_equal(fixture_call(f, f->owner, TG_SURFACE_API, world[i].tool, world[i].args, NULL, &res), 0);
    tg_call_result_done(&res);
  }
  tg_call_result opened;
  assert_int_equal(fixture_call(f, agent, TG_SURFACE_AGENT, "repo.pr.open",
                                "{\"files\":[{\"path\":\"o.md\",\"content\":\"o\",\"mode\":\"add\"}],"
                                "\"branchName\":\"open\",\"title\":\"o\",\"body\":\"\",\"targetRepo\":\"data\","
                                "\"targetId\":\"gw\"}",
                                NULL, &opened),
                   0);
  tg_call_result_done(&opened);
  tg_call_result made;
  assert_int_equal(fixture_call(f, f->owner, TG_SURFACE_API, "admin.token.create",
                                "{\"agentSlug\":\"probe\"}", NULL, &made),
                   0);
  snprintf(revoke_args, sizeof revoke_args, "{\"tokenId\":\"%s\"}",
           json_string_value(json_object_get(made.value, "tokenId")));
  tg_call_result_done(&made);
  _cleanup_free_ char *refs = refs_snapshot(f->dir);
  assert_non_null(strstr(refs, "refs/heads/open"));

  int checked = 0;
  for (size_t i = 0; i < tg_registry_count(f->registry); i++) {
    const tg_tool *t = tg_registry_at(f->registry, i);
    if (t->risk == TG_RISK_HIGH) {
      char args[256];
      snprintf(args, sizeof args, "{\"tool\":\"%s\",\"mode\":\"enabled\"}", t->name);
      tg_call_result res;
      assert_int_equal(fixture_call(f, f->owner, TG_SURFACE_API, "admin.policy.set", args, NULL, &res), 0);
      tg_call_result_done(&res);
    }
    for (size_t k = 0; k < t->n_permissions; k++) {
      grant(f, "probe", t->permissions[k], false);
      _cleanup_free_ char *before = fixture_snapshot(f, "agent_run_logs");
      _cleanup_free_ char *refs_before = refs_snapshot(f->dir);
      long logs = fixture_count(f, "agent_run_logs");
      tg_call_result res;
      const char *caller = t->flags & TG_TOOL_PEOPLE_ONLY ? member : agent;
      assert_int_equal(fixture_call(f, caller, first_surface(t), t->name, args_for(t), NULL, &res),
                       TG_E_TOOL);
      json_t *error = json_object_get(res.value, "error");
      if (strcmp(json_string_value(json_object_get(error, "code")), "permission_denied") != 0)
        fail_msg("%s without %s answered %s", t->name, t->permissions[k],
                 json_string_value(json_object_get(error, "code")));
      assert_string_equal(
          json_string_value(json_object_get(json_object_get(error, "details"), "missingPermission")),
          t->permissions[k]);
      tg_call_result_done(&res);
      _cleanup_free_ char *after = fixture_snapshot(f, "agent_run_logs");
      if (strcmp(before, after) != 0) fail_msg("%s refused but wrote outside agent_run_logs", t->name);
      _cleanup_free_ char *refs_after = refs_snapshot(f->dir);
      if (strcmp(refs_before, refs_after) != 0) fail_msg("%s refused but moved a ref", t->name);
      assert_int_equal(fixture_count(f, "agent_run_logs"), logs + 1);
      grant(f, "probe", t->permissions[k], true);
      checked++;
    }
  }
  printf("gate test: %d (tool, permission) pairs refused without writing\n", checked);
  assert_true(checked > 0);
  fixture_free(f);
}

static bool offered(json_t *tools, const char *name) {
  size_t i;
  json_t *tool;
  json_array_foreach(tools, i, tool)
    if (strcmp(json_string_value(json_object_get(tool, "canonicalName")), name) == 0) return true;
  return false;
}

/* A tool only a person may call is no agent's: an agent granted every permission is not
 * offered it and is refused it, with nothing written; the owner is offered it. Every tool that
 * changes who may do what is such a tool. */
static void test_people_only_tools_refuse_agents(void **state) {
  fixture *f = fixture_new(NULL);
  char agent[TG_UUID_LEN + 1];
  fixture_agent(f, "{\"slug\":\"probe\"}", agent);
  _cleanup_json_ json_t *perms = all_permissions(f->registry);
  const char *perm;
  json_t *v;
  json_object_foreach(perms, perm, v) grant(f, "probe", perm, true);
  int checked = 0;
  for (size_t i = 0; i < tg_registry_count(f->registry); i++) {
    const tg_tool *t = tg_registry_at(f->registry, i);
    if (!(t->flags & TG_TOOL_PEOPLE_ONLY)) continue;
    tg_surface surface = first_surface(t);
    _cleanup_json_ json_t *for_owner = fixture_offered(f, f->owner, surface);
    _cleanup_json_ json_t *for_agent = fixture_offered(f, agent, surface);
    assert_true(offered(for_owner, t->name));
    assert_false(offered(for_agent, t->name));
    _cleanup_free_ char *before = fixture_snapshot(f, "agent_run_logs");
    tg_call_result res;
    assert_int_equal(fixture_call(f, agent, surface, t->name, args_for(t), NULL, &res), TG_E_TOOL);
    assert_string_equal(fixture_code(&res), "permission_denied");
    json_t *details = json_object_get(json_object_get(res.value, "error"), "details");
    assert_string_equal(json_string_value(json_object_get(details, "reason")), "people_only");
    tg_call_result_done(&res);
    _cleanup_free_ char *after = fixture_snapshot(f, "agent_run_logs");
    assert_string_equal(before, after);
    checked++;
  }
  assert_true(checked > 0);
  /* Among them, every tool that changes who may do what: an agent granted one could grant
   * itself more, lift a hold, start its own sub-agents or act under another's token. */
  static const char *const authority[] = {
      "admin.agent.create",  "admin.grant.add",       "admin.grant.revoke",
      "admin.token.create",  "admin.token.revoke",    "admin.policy.set",
      "admin.workspace.set", "admin.agent.start",     "admin.agent.pause",
      "admin.agent.archive", "admin.agent.unarchive", "agent.approval.resolve"};
  for (size_t i = 0; i < sizeof authority / sizeof authority[0]; i++) {
    const tg_tool *t = tg_registry_find(f->registry, authority[i]);
    assert_non_null(t);
    if (!(t->flags & TG_TOOL_PEOPLE_ONLY)) fail_msg("%s is not people_only", authority[i]);
  }
  fixture_free(f);
}

/* A tool that acts on its calling agent's own is no user's: the owner, whose role holds
 * every grant, is not offered it and is refused it, with nothing written; an agent with the
 * grant is offered it. */
static void test_agents_only_tools_refuse_users(void **state) {
  fixture *f = fixture_new(NULL);
  char agent[TG_UUID_LEN + 1];
  fixture_agent(f, "{\"slug\":\"editor\",\"grants\":[\"canEditAgentFiles\"]}", agent);
  int checked = 0;
  for (size_t i = 0; i < tg_registry_count(f->registry); i++) {
    const tg_tool *t = tg_registry_at(f->registry, i);
    if (!(t->flags & TG_TOOL_AGENTS_ONLY)) continue;
    tg_surface surface = first_surface(t);
    _cleanup_json_ json_t *for_owner = fixture_offered(f, f->owner, surface);
    _cleanup_json_ json_t *for_agent = fixture_offered(f, agent, surface);
    assert_false(offered(for_owner, t->name));
    assert_true(offered(for_agent, t->name));
    _cleanup_free_ char *before = fixture_snapshot(f, "agent_run_logs");
    _cleanup_free_ char *refs_before = refs_snapshot(f->dir);
    tg_call_result res;
    assert_int_equal(fixture_call(f, f->owner, surface, t->name, args_for(t), NULL, &res), TG_E_TOOL);
    assert_string_equal(fixture_code(&res), "permission_denied");
    json_t *details = json_object_get(json_object_get(res.value, "error"), "details");
    assert_string_equal(json_string_value(json_object_get(details, "reason")), "agents_only");
    tg_call_result_done(&res);
    _cleanup_free_ char *after = fixture_snapshot(f, "agent_run_logs");
    assert_string_equal(before, after);
    _cleanup_free_ char *refs_after = refs_snapshot(f->dir);
    assert_string_equal(refs_before, refs_after);
    checked++;
  }
  assert_true(checked > 0);
  fixture_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_gated_tool_refuses_without_its_grant),
      cmocka_unit_test(test_agents_only_tools_refuse_users),
      cmocka_unit_test(test_people_only_tools_refuse_agents),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The authorization epoch and the principal a connection keeps while it stands: every
 * change to what a principal is loaded from moves the epoch, and a kept principal never
 * outlives such a change, whoever made it. */
#include "fixture.h"
#include "support.h"

#include <stddef.h>
#include <string.h>

#include "core/principal.h"
#include "util/status.h"

typedef struct world {
  fixture *f;
  char agent[TG_UUID_LEN + 1];
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(NULL);
  fixture_agent(w->f, "{\"slug\":\"bot\",\"grants\":[\"canAssignTasks\"]}", w->agent);
  *state = w;
  return 0;
}

_Static_assert(offsetof(world, f) == 0, "fixture_world_free finds the fixture first");
static int teardown(void **state) { return fixture_world_free(state); }

static int64_t epoch(fixture *f) {
  int64_t n = -1;
  assert_int_equal(tg_auth_epoch(f->db, &n), 0);
  return n;
}

static void exec_sql(fixture *f, const char *sql, json_t *params) {
  assert_int_equal(tg_db_exec(f->db, sql, params, NULL), 0);
}

/* Each column a principal or its tool list is read from moves the epoch; others do not. */
static void test_epoch_moves_with_what_decides_permissions(void **state) {
  world *w = *state;
  fixture *f = w->f;
  static const char *const moving[] = {
      "UPDATE tenants SET naming_profile = 'catalog' WHERE id = $1",
      "UPDATE agents SET status = 'paused' WHERE tenant_id = $1",
      "UPDATE agents SET slug = 'bot2' WHERE tenant_id = $1",
      "UPDATE agents SET scope_type = 'tenant', scope_id = NULL WHERE tenant_id = $1",
      "UPDATE users SET role = 'admin' WHERE tenant_id = $1",
      "INSERT INTO tool_policies (tenant_id, tool_name, mode, updated_at)"
      " VALUES ($1, 'agent.tool.list', 'disabled', 'now')",
      "UPDATE tool_policies SET mode = 'approval' WHERE tenant_id = $1",
      "DELETE FROM tool_policies WHERE tenant_id = $1",
      "INSERT INTO grants (principal_id, permission, created_at)"
      " SELECT principal_id, 'kb.read', 'now' FROM agents WHERE tenant_id = $1",
      "DELETE FROM grants WHERE permission = 'kb.read' AND $1 IS NOT NULL",
  };
  for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++) {
    int64_t before = epoch(f);
    exec_sql(f, moving[i], json_pack("[s]", f->tenant_id));
    if (epoch(f) <= before) fail_msg("the epoch did not move with: %s", moving[i]);
  }
  static const char *const still[] = {
      "UPDATE tenants SET name = 'Acme two' WHERE id = $1",
      "UPDATE agents SET name = 'Bot two', updated_at = 'later' WHERE tenant_id = $1",
  };
  for (size_t i = 0; i < sizeof still / sizeof still[0]; i++) {
    int64_t before = epoch(f);
    exec_sql(f, still[i], json_pack("[s]", f->tenant_id));
    if (epoch(f) != before) fail_msg("the epoch moved with: %s", still[i]);
  }
}

/* A connection keeps the principal it loaded, until another connection revokes a grant. */
static void test_kept_principal_follows_a_change_elsewhere(void **state) {
  world *w = *state;
  tg_principal *first = NULL, *again = NULL;
  assert_int_equal(tg_principal_load(w->f->db, w->agent, &first), 0);
  assert_int_equal(tg_principal_load(w->f->db, w->agent, &again), 0);
  assert_ptr_equal(first, again); /* nothing changed: the kept one */
  assert_true(tg_principal_can(again, "tasks.assign"));
  tg_principal_free(again);

  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  assert_int_equal(tg_principal_load(w->f->db, w->agent, &again), 0);
  assert_ptr_not_equal(first, again);
  assert_false(tg_principal_can(again, "tasks.assign"));
  /* The first is still whole for whoever holds it. */
  assert_true(tg_principal_can(first, "tasks.assign"));
  tg_principal_free(first);
  tg_principal_free(again);

  /* And the gate sees it at once: the call is refused and writes no run. */
  long runs = fixture_count(w->f, "agent_runs");
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->agent, TG_SURFACE_AGENT, "work.task.create",
                                "{\"title\":\"t\"}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "permission_denied");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
}

/* What a transaction has not committed is never kept: after a rollback, the grant it
 * added is gone from the next load, even once a committed change has brought the epoch
 * back to the value the transaction saw. */
static void test_uncommitted_grant_is_not_kept(void **state) {
  world *w = *state;
  fixture *f = w->f;
  tg_principal *p = NULL;
  int64_t before = epoch(f);
  assert_int_equal(tg_db_begin(f->db), 0);
  exec_sql(f, "INSERT INTO grants (principal_id, permission, created_at) VALUES ($1, 'kb.read', 'now')",
           json_pack("[s]", w->agent));
  assert_int_equal(tg_principal_load(f->db, w->agent, &p), 0);
  assert_true(tg_principal_can(p, "kb.read"));
  tg_principal_free(p);
  int64_t seen = epoch(f);
  assert_int_equal(tg_db_rollback(f->db), 0);
  assert_int_equal(epoch(f), before);
  exec_sql(f, "UPDATE agents SET status = 'paused' WHERE principal_id = $1", json_pack("[s]", w->agent));
  assert_int_equal(epoch(f), seen);
  assert_int_equal(tg_principal_load(f->db, w->agent, &p), 0);
  assert_false(tg_principal_can(p, "kb.read"));
  tg_principal_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_epoch_moves_with_what_decides_permissions, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kept_principal_follows_a_change_elsewhere, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_uncommitted_grant_is_not_kept, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

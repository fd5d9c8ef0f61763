/* tg_call end to end on a real SQLite file: every gate, the transaction, telemetry. */
#include "support.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/approval.h"
#include "core/principal.h"
#include "fixture.h"
#include "util/cleanup.h"
#include "util/status.h"

/* A provider of tools made to exercise the call path. */
static int item_write(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *fail = json_string_value(json_object_get(args, "fail"));
  int r = tg_db_exec(cx->db,
                     "INSERT INTO missions (id, tenant_id, slug, title, created_at)"
                     " VALUES ($1, $2, $3, 'written by a tool', 'now')",
                     json_pack("[sss]", json_string_value(json_object_get(args, "note")),
                               cx->principal->tenant_id,
                               json_string_value(json_object_get(args, "note"))),
                     NULL);
  if (r < 0) return r;
  r = tg_activity(cx, "ITEM_WRITTEN", NULL, "an item", json_pack("{s:s}", "k", "v"));
  if (r < 0) return r;
  if (fail && strcmp(fail, "tool") == 0)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, json_pack("{s:s}", "why", "asked"),
                   "Failing as asked.");
  if (fail && strcmp(fail, "echo") == 0) { /* a message that names an argument */
    const char *note = json_string_value(json_object_get(args, "note"));
    size_t len = strlen(note);
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "No item ending %s.",
                   note + (len > 60 ? len - 60 : 0));
  }
  if (fail && strcmp(fail, "internal") == 0) return TG_E_DB;
  if (fail && strcmp(fail, "db") == 0) {
    tg_db_fail_after(cx->db, 1);
    return tg_db_exec(cx->db, "SELECT 1", NULL, NULL);
  }
  *ret = fail && strcmp(fail, "output") == 0 ? json_pack("{s:s}", "ok", "not a boolean")
                                             : json_pack("{s:b}", "ok", 1);
  return TG_OK;
}

static int echo(tg_call_ctx *cx, json_t *args, json_t **ret) {
  *ret = json_pack("{s:O}", "text", json_object_get(args, "text"));
  return TG_OK;
}

static const char kit_spec[] =
    "{\"provider\":\"kit\",\"tools\":["
    "{\"name\":\"test.item.write\",\"alias\":\"writeItem\",\"description\":\"Writes a mission row.\","
    "\"surfaces\":[\"agent\",\"api\"],\"effect\":\"write\",\"risk\":\"low\","
    "\"permissions\":[\"tasks.assign\"],"
    "\"inputSchema\":{\"type\":\"object\",\"required\":[\"note\"],\"properties\":{"
    "\"note\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5000},"
    "\"fail\":{\"enum\":[\"tool\",\"echo\",\"internal\",\"output\",\"db\"]}}},"
    "\"outputSchema\":{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{\"ok\":{\"type\":\"boolean\"}}}},"
    "{\"name\":\"test.item.once\",\"description\":\"Writes a mission row, once a run.\","
    "\"surfaces\":[\"agent\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],\"maxPerRun\":1,"
    "\"inputSchema\":{\"type\":\"object\",\"required\":[\"note\"],\"properties\":{"
    "\"note\":{\"type\":\"string\",\"minLength\":1}}},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.danger.run\",\"description\":\"High risk.\",\"surfaces\":[\"agent\"],"
    "\"effect\":\"write\",\"risk\":\"high\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.read.echo\",\"alias\":\"echoText\",\"description\":\"Echoes.\","
    "\"surfaces\":[\"agent\",\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\",\"required\":[\"text\"],\"properties\":{"
    "\"text\":{\"type\":\"string\",\"minLength\":1}}},"
    "\"outputSchema\":{\"type\":\"object\",\"required\":[\"text\"]}},"
    "{\"name\":\"test.ask.interactive\",\"description\":\"Asks the client.\",\"surfaces\":[\"mcp\"],"
    "\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],\"flags\":[\"interactive\"],"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"write\":{\"type\":\"boolean\"}}},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.ask.plain\",\"description\":\"Tries to ask the client.\",\"surfaces\":[\"mcp\"],"
    "\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}}]}";

/* Asks the client; args.write: try to write to the database too. */
static int ask(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  if (!ch || !ch->ask)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:b}", "closeStream", ch && ch->close_stream),
                   "This call cannot ask the client.");
  if (json_is_true(json_object_get(args, "write"))) {
    int r = tg_db_exec(cx->db,
                       "INSERT INTO missions (id, tenant_id, slug, title, created_at)"
                       " VALUES ('m-ask', $1, 'ask', 'written while asking', 'now')",
                       json_pack("[s]", cx->principal->tenant_id), NULL);
    if (r < 0) return r;
  }
  json_t *answer = NULL;
  int r = ch->ask(ch->self, "elicitation/create", json_object(), &answer);
  if (r < 0) return r;
  int recorded = tg_activity(cx, "ASKED", NULL, "asked the client", NULL);
  *ret = json_pack("{s:o}", "answer", answer);
  return recorded < 0 ? recorded : TG_OK;
}

static int danger(tg_call_ctx *cx, json_t *args, json_t **ret) {
  *ret = json_object();
  return TG_OK;
}

static const tg_handler_entry kit_handlers[] = {
    {"test.item.write", item_write}, {"test.item.once", item_write},
    {"test.danger.run", danger},     {"test.read.echo", echo},
    {"test.ask.interactive", ask},   {"test.ask.plain", ask}};
static const tg_provider kit = {.name = "kit", .spec_json = kit_spec, .handlers = kit_handlers,
                                .n_handlers = 6};

typedef struct world {
  fixture *f;
  char writer[TG_UUID_LEN + 1]; /* active, tenant scope, tasks.assign */
  char reader[TG_UUID_LEN + 1]; /* active, no grants */
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(&kit);
  fixture_agent(w->f, "{\"slug\":\"writer\",\"grants\":[\"canAssignTasks\"]}", w->writer);
  fixture_agent(w->f, "{\"slug\":\"reader\"}", w->reader);
  *state = w;
  return 0;
}

_Static_assert(offsetof(world, f) == 0, "fixture_world_free finds the fixture first");
static int teardown(void **state) { return fixture_world_free(state); }

static json_t *last_log(fixture *f) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(f->db,
                                   "SELECT * FROM agent_run_logs ORDER BY created_at DESC, id DESC LIMIT 1",
                                   NULL, &row),
                   0);
  assert_non_null(row);
  json_t *meta = json_loads(json_string_value(json_object_get(row, "metadata")), 0, NULL);
  assert_non_null(meta);
  json_object_set_new(row, "metadata", meta);
  return row;
}

static void test_success_writes_everything_once(void **state) {
  world *w = *state;
  long logs = fixture_count(w->f, "agent_run_logs"), runs = fixture_count(w->f, "agent_runs");
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write",
                                "{\"note\":\"m1\"}", NULL, &res),
                   0);
  assert_true(json_is_true(json_object_get(res.value, "ok")));
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), 1);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  _cleanup_json_ json_t *log = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(log, "step")), "tool:test.item.write");
  assert_string_equal(json_string_value(json_object_get(log, "level")), "INFO");
  json_t *meta = json_object_get(log, "metadata");
  assert_true(json_is_number(json_object_get(meta, "durationMs")));
  assert_int_equal(json_integer_value(json_object_get(meta, "costCents")), 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(meta, "args"), "note")), "m1");
  _cleanup_json_ json_t *act = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT * FROM activity_log WHERE action_type = 'ITEM_WRITTEN'",
                                   NULL, &act),
                   0);
  assert_non_null(act);
  assert_string_equal(json_string_value(json_object_get(act, "actor_type")), "agent");
  _cleanup_json_ json_t *run = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT status FROM agent_runs WHERE id = $1",
                                   json_pack("[O]", json_object_get(log, "run_id")), &run),
                   0);
  assert_string_equal(json_string_value(json_object_get(run, "status")), "completed");
}

static void test_lookup_by_every_name(void **state) {
  world *w = *state;
  const char *names[] = {"test.read.echo", "test_read_echo", "echoText"};
  for (size_t i = 0; i < 3; i++) {
    tg_call_result res;
    assert_int_equal(fixture_call(w->f, w->reader, TG_SURFACE_AGENT, names[i], "{\"text\":\"hi\"}",
                                  NULL, &res),
                     0);
    assert_string_equal(json_string_value(json_object_get(res.value, "text")), "hi");
    tg_call_result_done(&res);
  }
}

/* A refusal: the envelope, one WARN telemetry row, and nothing else written. */
static void expect_refusal(world *w, const char *principal, tg_surface surface, const char *tool,
                           const char *args, const char *run_id, const char *code,
                           tg_call_result *res) {
  _cleanup_free_ char *before = fixture_snapshot(w->f, "agent_run_logs");
  long logs = fixture_count(w->f, "agent_run_logs");
  assert_int_equal(fixture_call(w->f, principal, surface, tool, args, run_id, res), TG_E_TOOL);
  assert_string_equal(fixture_code(res), code);
  assert_non_null(json_string_value(json_object_get(json_object_get(res->value, "error"), "message")));
  _cleanup_free_ char *after = fixture_snapshot(w->f, "agent_run_logs");
  assert_string_equal(before, after);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  _cleanup_json_ json_t *log = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(log, "level")), "WARN");
  assert_string_equal(json_string_value(json_object_get(json_object_get(log, "metadata"), "code")), code);
}

static json_t *details(tg_call_result *res) {
  return json_object_get(json_object_get(res->value, "error"), "details");
}

static void test_unknown_tool_is_not_found(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "no.such.tool", "{}", NULL, "not_found", &res);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(log, "step")), "tool:no.such.tool");
  json_t *meta = json_object_get(log, "metadata");
  assert_string_equal(json_string_value(json_object_get(meta, "calledAs")), "no.such.tool");
  assert_string_equal(json_string_value(json_object_get(meta, "surface")), "agent");
  assert_true(json_is_object(json_object_get(meta, "args")));
  assert_true(json_is_real(json_object_get(meta, "durationMs")));
}

/* A name longer than telemetry keeps is cut on a whole character: its 128th byte here is
 * the first of a two-byte "é", so 127 bytes remain, and the row is still written. */
static void test_long_unknown_name_is_cut_on_a_character(void **state) {
  world *w = *state;
  char name[200], kept[128];
  memset(kept, 'a', 127);
  kept[127] = '\0';
  snprintf(name, sizeof name, "%s\xc3\xa9\"quoted\"", kept);
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, name, "{}", NULL, "not_found", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "tool")), kept);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(json_object_get(log, "metadata"), "calledAs")),
                      kept);
  char step[140];
  snprintf(step, sizeof step, "tool:%s", kept);
  assert_string_equal(json_string_value(json_object_get(log, "step")), step);

  /* A name that is not UTF-8 at all still leaves a readable row. */
  expect_refusal(w, w->writer, TG_SURFACE_API, "bad\xff", "{}", NULL, "not_found", &res);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *bad = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(bad, "step")), "tool:?");
}

static void test_missing_permission_is_denied(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"x\"}", NULL,
                 "permission_denied", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "missingPermission")),
                      "tasks.assign");
  assert_string_equal(json_string_value(json_object_get(details(&res), "flag")), "canAssignTasks");
  tg_call_result_done(&res);
}

static void test_grants_are_read_live(void **state) {
  world *w = *state;
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.revoke",
                                "{\"agentSlug\":\"writer\",\"permission\":\"tasks.assign\"}", NULL, &res),
                   0);
  tg_call_result_done(&res);
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "test.item.write", "{\"note\":\"x\"}", NULL,
                 "permission_denied", &res);
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.add",
                                "{\"agentSlug\":\"writer\",\"permission\":\"canAssignTasks\"}", NULL, &res),
                   0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write",
                                "{\"note\":\"live\"}", NULL, &res),
                   0);
  tg_call_result_done(&res);
}

static void test_wrong_surface_is_denied(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_MCP, "test.item.write", "{\"note\":\"x\"}", NULL,
                 "permission_denied", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "surface");
  tg_call_result_done(&res);
}

static void test_inactive_agent_is_denied(void **state) {
  world *w = *state;
  char draft[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"drafty\",\"status\":\"draft\",\"grants\":[\"tasks.assign\"]}", draft);
  tg_call_result res;
  expect_refusal(w, draft, TG_SURFACE_AGENT, "test.read.echo", "{\"text\":\"x\"}", NULL,
                 "permission_denied", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "agent_not_active");
  tg_call_result_done(&res);
}

static void set_policy(world *w, const char *tool, const char *mode) {
  char args[200];
  snprintf(args, sizeof args, "{\"tool\":\"%s\",\"mode\":\"%s\"}", tool, mode);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.policy.set", args, NULL, &res), 0);
  tg_call_result_done(&res);
}

static void test_policy_gates(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "test.danger.run", "{}", NULL, "permission_denied", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "high_risk_default_deny");
  tg_call_result_done(&res);
  set_policy(w, "test.danger.run", "enabled");
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.danger.run", "{}", NULL, &res), 0);
  tg_call_result_done(&res);

  set_policy(w, "echoText", "disabled");
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "test.read.echo", "{\"text\":\"x\"}", NULL,
                 "permission_denied", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "disabled_by_policy");
  tg_call_result_done(&res);
  set_policy(w, "test.read.echo", "default");
  assert_int_equal(fixture_call(w->f, w->reader, TG_SURFACE_AGENT, "test.read.echo", "{\"text\":\"x\"}",
                                NULL, &res),
                   0);
  tg_call_result_done(&res);

  /* The policy tool cannot shut itself off: no policy could be changed after. No tool only
   * people call, and not over MCP, is held for approval: the hold is on agents' calls and on
   * people's over MCP, so it would hold nothing. */
  const char *refused[][3] = {{"admin.policy.set", "disabled", "self_lockout"},
                              {"admin.policy.set", "approval", "people_only"},
                              {"admin.grant.add", "approval", "people_only"}};
  for (size_t i = 0; i < 3; i++) {
    char args[100];
    snprintf(args, sizeof args, "{\"tool\":\"%s\",\"mode\":\"%s\"}", refused[i][0], refused[i][1]);
    expect_refusal(w, w->f->owner, TG_SURFACE_API, "admin.policy.set", args, NULL, "validation_failed", &res);
    assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), refused[i][2]);
    tg_call_result_done(&res);
  }
  assert_int_equal(
      fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM tool_policies WHERE tool_name = $1",
                          json_pack("[s]", "admin.grant.add")),
      0);
  set_policy(w, "admin.policy.set", "enabled");
  set_policy(w, "admin.policy.set", "default");
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM tool_policies WHERE tool_name = $1",
                                       json_pack("[s]", "admin.policy.set")),
                   0);
}

static bool listed(json_t *tools, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) return true;
  }
  return false;
}

/* A held call: refused with the request it opened (or found), and nothing else written but
 * the request and the refusal's telemetry row. Returns the request's id (malloc'd). */
static char *held_call(world *w, const char *principal, const char *args, bool opens) {
  static const char *const unmoved[] = {"missions", "activity_log", "agent_runs"};
  long counts[3];
  for (size_t i = 0; i < 3; i++) counts[i] = fixture_count(w->f, unmoved[i]);
  long logs = fixture_count(w->f, "agent_run_logs");
  long requests = fixture_count(w->f, "approval_requests");
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, principal, TG_SURFACE_AGENT, "test.item.write", args, NULL,
                                &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "precondition_failed");
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")),
                      "approval_required");
  char *id = strdup(json_string_value(json_object_get(details(&res), "approvalId")));
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "approval_requests"), requests + (opens ? 1 : 0));
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  for (size_t i = 0; i < 3; i++) assert_int_equal(fixture_count(w->f, unmoved[i]), counts[i]);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM approval_requests WHERE id = $1"
                                       " AND status = 'pending' AND principal_id = $2",
                                       json_pack("[ss]", id, principal)),
                   1);
  return id;
}

static json_t *resolve(world *w, const char *decider, const char *id, const char *decision,
                       const char *code) {
  char args[200];
  snprintf(args, sizeof args, "{\"approvalId\":\"%s\",\"decision\":\"%s\"}", id, decision);
  tg_call_result res;
  int r = fixture_call(w->f, decider, TG_SURFACE_API, "agent.approval.resolve", args, NULL, &res);
  assert_int_equal(r, *code ? TG_E_TOOL : 0);
  assert_string_equal(fixture_code(&res), code);
  json_t *value = json_incref(res.value);
  tg_call_result_done(&res);
  return value;
}

/* The reason of a refusal's envelope. */
static const char *reason_of(json_t *refusal) {
  return json_string_value(
      json_object_get(json_object_get(json_object_get(refusal, "error"), "details"), "reason"));
}

static const char *request_status(world *w, const char *id) {
  static char status[16];
  _cleanup_json_ json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT status FROM approval_requests WHERE id = $1",
                                   json_pack("[s]", id), &row),
                   0);
  snprintf(status, sizeof status, "%s", json_string_value(json_object_get(row, "status")));
  return status;
}

/* The policy's "approval" mode: a call runs on an approval of that very call (caller, tool,
 * arguments), decided by someone else, and uses it once. */
static void test_approval_holds_the_very_call(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"other\",\"grants\":[\"canAssignTasks\"]}", other);
  set_policy(w, "test.item.write", "approval");
  /* Still offered: it can run once approved. */
  _cleanup_json_ json_t *offered = fixture_offered(w->f, w->writer, TG_SURFACE_AGENT);
  assert_true(listed(offered, "test_item_write"));
  const char *args = "{\"note\":\"held\"}";
  _cleanup_free_ char *id = held_call(w, w->writer, args, true);
  /* Asked again: the same request. Another caller's same call: a request of its own. */
  _cleanup_free_ char *again = held_call(w, w->writer, args, false);
  assert_string_equal(id, again);
  _cleanup_free_ char *others = held_call(w, other, args, true);
  assert_string_not_equal(id, others);

  /* The same arguments in another order are the same call. */
  _cleanup_free_ char *ordered = held_call(w, w->writer, "{\"note\":\"held\",\"fail\":\"output\"}", true);
  _cleanup_free_ char *reordered = held_call(w, w->writer, "{\"fail\":\"output\",\"note\":\"held\"}", false);
  assert_string_equal(ordered, reordered);

  /* No one decides without approvals.resolve; no agent whatever its grants; no one of another
   * workspace. Nothing moves. */
  json_decref(resolve(w, w->writer, id, "approve", "permission_denied"));
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.add",
                                "{\"agentSlug\":\"other\",\"permission\":\"approvals.resolve\"}",
                                NULL, &res),
                   0);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *by_agent = resolve(w, other, id, "approve", "permission_denied");
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(by_agent, "error"), "details"), "reason")),
                      "people_only");
  /* A person's own call, not over MCP, is that person's decision: it runs, and asks no one. */
  long requests = fixture_count(w->f, "approval_requests");
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "test.item.write",
                                "{\"note\":\"owner's\"}", NULL, &res),
                   0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "approval_requests"), requests);
  char tenant2[TG_UUID_LEN + 1], owner2[TG_UUID_LEN + 1];
  assert_int_equal(tg_tenant_create(w->f->db, "elsewhere", "owner2", tenant2, owner2), 0);
  json_decref(resolve(w, owner2, id, "approve", "not_found"));
  assert_string_equal(request_status(w, id), "pending");
  json_decref(resolve(w, w->f->owner, "no-such-request", "approve", "not_found"));

  /* An agent reading requests sees its own only. */
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.add",
                                "{\"agentSlug\":\"other\",\"permission\":\"approvals.read\"}",
                                NULL, &res),
                   0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, other, TG_SURFACE_API, "admin.approval.list",
                                "{\"status\":\"all\"}", NULL, &res),
                   0);
  json_t *seen = json_object_get(res.value, "approvals");
  assert_int_equal(json_array_size(seen), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(seen, 0), "caller")),
                      "other");
  tg_call_result_done(&res);

  /* A request past its time gives way to a new one, and can no longer be decided. */
  assert_int_equal(tg_db_exec(w->f->db,
                              "UPDATE approval_requests SET expires_at = '2000-01-01T00:00:00.000Z'"
                              " WHERE id = $1",
                              json_pack("[s]", others), NULL),
                   0);
  _cleanup_json_ json_t *late = resolve(w, w->f->owner, others, "approve", "precondition_failed");
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(late, "error"), "details"), "status")),
                      "expired");
  _cleanup_free_ char *renewed = held_call(w, other, args, true);
  assert_string_not_equal(renewed, others);
  assert_string_equal(request_status(w, others), "expired");
  /* So does an approval not used in its time. */
  json_decref(resolve(w, w->f->owner, renewed, "approve", ""));
  assert_int_equal(tg_db_exec(w->f->db,
                              "UPDATE approval_requests SET expires_at = '2000-01-01T00:00:00.000Z'"
                              " WHERE id = $1",
                              json_pack("[s]", renewed), NULL),
                   0);
  _cleanup_free_ char *after_lapse = held_call(w, other, args, true);
  assert_string_equal(request_status(w, renewed), "expired");
  (void)after_lapse;

  /* Approved by the owner: the other caller's request and other arguments stay held. */
  _cleanup_json_ json_t *approved = resolve(w, w->f->owner, id, "approve", "");
  assert_string_equal(json_string_value(json_object_get(approved, "status")), "approved");
  json_decref(resolve(w, w->f->owner, id, "deny", "precondition_failed"));
  free(held_call(w, other, args, false));
  free(held_call(w, w->writer, "{\"note\":\"held\",\"fail\":\"output\"}", false));

  /* A run that fails keeps the approval; the one that succeeds uses it, once. */
  json_decref(resolve(w, w->f->owner, ordered, "approve", ""));
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write",
                                "{\"note\":\"held\",\"fail\":\"output\"}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "internal_error");
  tg_call_result_done(&res);
  assert_string_equal(request_status(w, ordered), "approved");
  _cleanup_json_ json_t *failed = last_log(w->f);
  assert_null(json_object_get(json_object_get(failed, "metadata"), "approvalId"));
  long missions = fixture_count(w->f, "missions");
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL,
                                &res),
                   0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions + 1);
  assert_string_equal(request_status(w, id), "used");
  _cleanup_json_ json_t *ran = last_log(w->f); /* the call names the approval it ran on */
  assert_string_equal(json_string_value(json_object_get(json_object_get(ran, "metadata"),
                                                        "approvalId")),
                      id);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM approval_requests WHERE id = $1"
                                       " AND used_at IS NOT NULL",
                                       json_pack("[s]", id)),
                   1);
  _cleanup_free_ char *next = held_call(w, w->writer, args, true);
  assert_string_not_equal(id, next);

  /* Denied: the same call is refused as denied, and asks for nothing new. */
  json_decref(resolve(w, w->f->owner, next, "deny", ""));
  _cleanup_free_ char *before = fixture_snapshot(w->f, "agent_run_logs");
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL,
                                &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "permission_denied");
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")),
                      "approval_denied");
  tg_call_result_done(&res);
  _cleanup_free_ char *after = fixture_snapshot(w->f, "agent_run_logs");
  assert_string_equal(before, after);
  set_policy(w, "test.item.write", "default");
}

/* A request, approved or waiting, belongs to the hold it was asked under: once the tool is no
 * longer held, it goes, and a hold set again is not passed on it. */
static void test_a_policy_change_withdraws_live_approvals(void **state) {
  world *w = *state;
  set_policy(w, "test.item.write", "approval");
  const char *args = "{\"note\":\"toggled\"}";
  _cleanup_free_ char *approved = held_call(w, w->writer, args, true);
  json_decref(resolve(w, w->f->owner, approved, "approve", ""));
  _cleanup_free_ char *waiting = held_call(w, w->writer, "{\"note\":\"waiting\"}", true);
  set_policy(w, "test.item.write", "default");
  assert_string_equal(request_status(w, approved), "expired");
  assert_string_equal(request_status(w, waiting), "expired");
  _cleanup_json_ json_t *changed = NULL;
  assert_int_equal(
      tg_db_query_row(w->f->db,
                      "SELECT details FROM activity_log WHERE action_type ="
                      " 'TOOL_POLICY_CHANGED' ORDER BY created_at DESC, id DESC LIMIT 1",
                      NULL, &changed),
      0);
  _cleanup_json_ json_t *said =
      json_loads(json_string_value(json_object_get(changed, "details")), 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(said, "approvalsWithdrawn")), 2);
  /* Held again: the same call asks anew, and the old decision is no longer to be had. */
  set_policy(w, "test.item.write", "approval");
  _cleanup_free_ char *anew = held_call(w, w->writer, args, true);
  assert_string_not_equal(anew, approved);
  json_decref(resolve(w, w->f->owner, waiting, "approve", "precondition_failed"));
  set_policy(w, "test.item.write", "default");
}

/* The ids of the requests of status the owner lists (newest first), as "id,id,". */
static void listed_requests(world *w, const char *status, char *out, size_t size) {
  char args[64];
  snprintf(args, sizeof args, "{\"status\":\"%s\",\"limit\":100}", status);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.approval.list", args,
                                NULL, &res),
                   0);
  *out = '\0';
  size_t i, used = 0;
  json_t *row;
  json_array_foreach(json_object_get(res.value, "approvals"), i, row) {
    const char *shown = json_string_value(json_object_get(row, "status"));
    if (strcmp(status, "all") != 0) assert_string_equal(shown, status);
    used += (size_t)snprintf(out + used, size - used, "%s,",
                             json_string_value(json_object_get(row, "id")));
    assert_true(used < size);
  }
  tg_call_result_done(&res);
}

/* Asked for a status, the list finds the requests that have it now: one past its time, though
 * its row still says pending, approved or denied, is expired, and only expired; one used is
 * used whatever its time. */
static void test_approval_list_by_status(void **state) {
  world *w = *state;
  set_policy(w, "test.item.write", "approval");
  enum { PENDING, LAPSED, APPROVED, APPROVAL_LAPSED, DENIAL_LAPSED, USED, EXPIRED, N };
  char *ids[N];
  for (int i = 0; i < N; i++) {
    char args[32];
    snprintf(args, sizeof args, "{\"note\":\"n%d\"}", i);
    ids[i] = held_call(w, w->writer, args, true);
  }
  json_decref(resolve(w, w->f->owner, ids[APPROVED], "approve", ""));
  json_decref(resolve(w, w->f->owner, ids[APPROVAL_LAPSED], "approve", ""));
  json_decref(resolve(w, w->f->owner, ids[DENIAL_LAPSED], "deny", ""));
  static const char past[] = "'2000-01-01T00:00:00.000Z'";
  char sql[300];
  snprintf(sql, sizeof sql,
           "UPDATE approval_requests SET expires_at = %s, status = CASE WHEN id = $4 THEN"
           " 'used' WHEN id = $5 THEN 'expired' ELSE status END WHERE id IN ($1, $2, $3, $4, $5)",
           past);
  assert_int_equal(tg_db_exec(w->f->db, sql,
                              json_pack("[sssss]", ids[LAPSED], ids[APPROVAL_LAPSED],
                                        ids[DENIAL_LAPSED], ids[USED], ids[EXPIRED]),
                              NULL),
                   0);
  char got[1024], want[1024];
  listed_requests(w, "pending", got, sizeof got);
  snprintf(want, sizeof want, "%s,", ids[PENDING]);
  assert_string_equal(got, want);
  listed_requests(w, "approved", got, sizeof got);
  snprintf(want, sizeof want, "%s,", ids[APPROVED]);
  assert_string_equal(got, want);
  listed_requests(w, "denied", got, sizeof got);
  assert_string_equal(got, "");
  listed_requests(w, "used", got, sizeof got);
  snprintf(want, sizeof want, "%s,", ids[USED]);
  assert_string_equal(got, want);
  listed_requests(w, "expired", got, sizeof got);
  snprintf(want, sizeof want, "%s,%s,%s,%s,", ids[EXPIRED], ids[DENIAL_LAPSED],
           ids[APPROVAL_LAPSED], ids[LAPSED]);
  assert_string_equal(got, want);
  listed_requests(w, "all", got, sizeof got);
  int used = 0;
  for (int i = N - 1; i >= 0; i--)
    used += snprintf(want + used, sizeof want - (size_t)used, "%s,", ids[i]);
  assert_string_equal(got, want);
  for (int i = 0; i < N; i++) free(ids[i]);
  set_policy(w, "test.item.write", "default");
}

/* A caller cannot fill the table with requests: past the bound it is told so, and none opens. */
static void test_approval_requests_are_bounded(void **state) {
  world *w = *state;
  char asker[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"asker\",\"grants\":[\"canAssignTasks\"]}", asker);
  set_policy(w, "test.item.write", "approval");
  for (int i = 0; i < TG_APPROVAL_PENDING_MAX; i++) {
    char args[40];
    snprintf(args, sizeof args, "{\"note\":\"n%d\"}", i);
    free(held_call(w, asker, args, true));
  }
  long requests = fixture_count(w->f, "approval_requests");
  long logs = fixture_count(w->f, "agent_run_logs");
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, asker, TG_SURFACE_AGENT, "test.item.write",
                                "{\"note\":\"one more\"}", NULL, &res),
                   TG_E_TOOL);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  assert_string_equal(fixture_code(&res), "precondition_failed");
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")),
                      "too_many_waiting");
  assert_null(json_object_get(details(&res), "approvalId"));
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "approval_requests"), requests);
  set_policy(w, "test.item.write", "default");
}

/* A call an approver could not be shown whole (its arguments past what a request keeps, or
 * holding what looks like a secret, anywhere in them) is refused, and put to no one. */
static void test_unreviewable_calls_are_not_put_to_approvers(void **state) {
  world *w = *state;
  set_policy(w, "test.read.echo", "approval");
  size_t big = TG_APPROVAL_ARGS_MAX + 10;
  char *args = malloc(big + 100);
  assert_non_null(args);
  char *text = malloc(big + 1);
  memset(text, 'x', big);
  text[big] = '\0';
  static const char secret[] = " ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
  for (int i = 0; i < 2; i++) {
    if (i == 0) snprintf(args, big + 100, "{\"text\":\"%s\"}", text);
    else snprintf(args, big + 100, "{\"text\":\"%.*s%s\"}", 20000, text, secret);
    long requests = fixture_count(w->f, "approval_requests");
    long logs = fixture_count(w->f, "agent_run_logs");
    tg_call_result res;
    assert_int_equal(fixture_call(w->f, w->reader, TG_SURFACE_AGENT, "test.read.echo", args, NULL,
                                  &res),
                     TG_E_TOOL);
    assert_string_equal(fixture_code(&res), "precondition_failed");
    json_t *d = details(&res);
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "not_reviewable");
    assert_string_equal(json_string_value(json_object_get(d, "why")), i ? "secret" : "too_large");
    assert_null(json_object_get(d, "approvalId"));
    tg_call_result_done(&res);
    assert_int_equal(fixture_count(w->f, "approval_requests"), requests);
    assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  }
  free(text);
  free(args);
  set_policy(w, "test.read.echo", "default");
}

static void test_invalid_arguments_name_every_violation(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "test.item.write",
                 "{\"note\":\"\",\"fail\":\"sometimes\",\"extra\":1}", NULL, "validation_failed", &res);
  json_t *violations = json_object_get(details(&res), "violations");
  assert_true(json_array_size(violations) >= 3);
  const char *want[][2] = {{"/note", "minLength"}, {"/fail", "enum"}, {"/extra", "additionalProperties"}};
  for (size_t k = 0; k < 3; k++) {
    bool seen = false;
    size_t i;
    json_t *v;
    json_array_foreach(violations, i, v) {
      if (strcmp(json_string_value(json_object_get(v, "instancePath")), want[k][0]) == 0 &&
          strcmp(json_string_value(json_object_get(v, "keyword")), want[k][1]) == 0)
        seen = true;
    }
    if (!seen) fail_msg("no violation %s at '%s'", want[k][1], want[k][0]);
  }
  tg_call_result_done(&res);
}

/* A refusal whose message quotes an argument cut to a byte count that falls within a
 * character ("/" and 40 two-byte "é" outrun the 80 bytes kept of an argument's path) still
 * answers its envelope and writes its row, the cut made on a whole character. */
static void test_a_message_cut_within_a_character_is_answered(void **state) {
  world *w = *state;
  char key[121] = "", args[200];
  for (int i = 0; i < 60; i++) strcat(key, "\xc3\xa9");
  snprintf(args, sizeof args, "{\"note\":\"n\",\"%s\":1}", key);
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL, "validation_failed",
                 &res);
  const char *message =
      json_string_value(json_object_get(json_object_get(res.value, "error"), "message"));
  char want[200];
  snprintf(want, sizeof want, "Invalid arguments: /%.78s: ", key); /* 39 whole "é" */
  assert_non_null(strstr(message, want));
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  const char *line = json_string_value(json_object_get(log, "message"));
  assert_non_null(strstr(line, want));
}

/* A run id that is no UUID's text, such as bytes of no character that a header or a command
 * line may give, is refused as such, and not echoed. */
static void test_a_run_id_of_foreign_bytes_is_refused(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "echoText", "{\"text\":\"a\"}", "\xff\xfe-1",
                 "validation_failed", &res);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "bad_run_id");
  tg_call_result_done(&res);
}

/* A handler failure rolls back its writes and its activity; the telemetry row stays. */
static void test_failures_roll_back(void **state) {
  world *w = *state;
  const char *cases[][2] = {{"tool", "precondition_failed"},
                            {"internal", "internal_error"},
                            {"output", "internal_error"},
                            {"db", "internal_error"}};
  for (size_t i = 0; i < 4; i++) {
    char args[100];
    snprintf(args, sizeof args, "{\"note\":\"f%zu\",\"fail\":\"%s\"}", i, cases[i][0]);
    long missions = fixture_count(w->f, "missions"), activity = fixture_count(w->f, "activity_log");
    long logs = fixture_count(w->f, "agent_run_logs");
    tg_call_result res;
    assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL, &res),
                     TG_E_TOOL);
    assert_string_equal(fixture_code(&res), cases[i][1]);
    tg_call_result_done(&res);
    assert_int_equal(fixture_count(w->f, "missions"), missions);
    assert_int_equal(fixture_count(w->f, "activity_log"), activity);
    assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
    _cleanup_json_ json_t *log = last_log(w->f);
    _cleanup_json_ json_t *run = NULL;
    assert_int_equal(tg_db_query_row(w->f->db, "SELECT status FROM agent_runs WHERE id = $1",
                                     json_pack("[O]", json_object_get(log, "run_id")), &run),
                     0);
    assert_non_null(run);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "failed");
  }
}

static void test_dry_run_writes_nothing(void **state) {
  world *w = *state;
  _cleanup_free_ char *before = fixture_snapshot(w->f, NULL);
  _cleanup_json_ json_t *args = json_pack("{s:s}", "note", "dry");
  tg_call_request req = {.principal_id = w->writer, .surface = TG_SURFACE_AGENT,
                         .tool = "test.item.write", .args = args, .dry_run = true};
  tg_call_result res;
  assert_int_equal(tg_call(&w->f->env, &req, &res), 0);
  assert_true(json_is_true(json_object_get(res.value, "allowed")));
  assert_int_equal(json_array_size(json_object_get(res.value, "gates")), 11);
  tg_call_result_done(&res);
  req.principal_id = w->reader;
  assert_int_equal(tg_call(&w->f->env, &req, &res), TG_E_TOOL);
  assert_false(json_is_true(json_object_get(res.value, "allowed")));
  json_t *gates = json_object_get(res.value, "gates");
  json_t *last = json_array_get(gates, json_array_size(gates) - 1);
  assert_string_equal(json_string_value(json_object_get(last, "gate")), "permissions");
  assert_false(json_is_true(json_object_get(last, "ok")));
  tg_call_result_done(&res);
  _cleanup_free_ char *after = fixture_snapshot(w->f, NULL);
  assert_string_equal(before, after);
}

static void test_calls_attach_to_runs(void **state) {
  world *w = *state;
  tg_call_result res;
  char run[TG_UUID_LEN + 1];
  fixture_run_start(w->f, "writer", run);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "echoText", "{\"text\":\"a\"}", run, &res), 0);
    tg_call_result_done(&res);
  }
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "test.item.write", "{}", run, "validation_failed", &res);
  tg_call_result_done(&res);
  /* A call of no tool is the run's too. */
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "no.such.tool", "{}", run, "not_found", &res);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *n = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE run_id = $1",
                                   json_pack("[s]", run), &n),
                   0);
  assert_int_equal(json_integer_value(json_object_get(n, "n")), 4);
  /* Another agent's run, and an ended run, are refused; a call of no tool naming another
   * agent's run is in none. */
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "echoText", "{\"text\":\"a\"}", run, "not_found", &res);
  tg_call_result_done(&res);
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "no.such.tool", "{}", run, "not_found", &res);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *foreign = last_log(w->f);
  assert_true(json_is_null(json_object_get(foreign, "run_id")));
  json_decref(n);
  n = NULL;
  assert_int_equal(
      tg_db_query_row(w->f->db, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE run_id = $1",
                      json_pack("[s]", run), &n),
      0);
  assert_int_equal(json_integer_value(json_object_get(n, "n")), 4);
  char end_args[100];
  snprintf(end_args, sizeof end_args, "{\"runId\":\"%s\"}", run);
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.run.end", end_args, NULL, &res), 0);
  tg_call_result_done(&res);
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "echoText", "{\"text\":\"a\"}", run,
                 "precondition_failed", &res);
  tg_call_result_done(&res);
}

/* The writer writes an item with args; returns the arguments its telemetry row logged. */
static json_t *logged_write(world *w, const char *args) {
  tg_call_result res;
  assert_int_equal(
      fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL, &res), 0);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  return json_incref(json_object_get(json_object_get(log, "metadata"), "args"));
}

static void test_telemetry_truncates_arguments(void **state) {
  world *w = *state;
  char args[5200];
  memset(args, 0, sizeof args);
  strcpy(args, "{\"note\":\"");
  memset(args + strlen(args), 'x', 4900);
  strcat(args, "\"}");
  _cleanup_json_ json_t *logged = logged_write(w, args);
  assert_true(json_is_true(json_object_get(logged, "truncated")));
  _cleanup_free_ char *text = json_dumps(logged, JSON_COMPACT);
  assert_true(strlen(text) <= TG_ARGS_LOG_MAX);
}

/* A secret in the arguments does not outlive its call in the telemetry row: the arguments
 * are withheld, as the tool would read them (after a newline, a tab or a quote), also when
 * the secret straddles where the row would cut them; so is a refusal's message then, and one
 * that names a secret past what was scanned. */
static void test_telemetry_withholds_secrets(void **state) {
  world *w = *state;
  static const char token[] = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
  char pad[TG_ARGS_LOG_MAX];
  memset(pad, 'x', sizeof pad);
  static const struct { const char *before, *secret, *rule; } cases[] = {
      {" ", token, "github_pat_classic"},
      {"# creds\\n", token, "github_pat_classic"},
      {"key:\\t", "AKIAABCDEFGHIJKLMNOP", "aws_access_key"},
      {" API_KEY=\\\"", "Zq8vL2mN4pR7sT9wX1yB3cD5\\\"", "high_entropy_assignment"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int i = 0; i < 3; i++) {
      char args[TG_ARGS_LOG_MAX + 200];
      int padding = i == 1 ? TG_ARGS_LOG_MAX - 20 : 0; /* the secret across the cut */
      snprintf(args, sizeof args, "{\"note\":\"%.*s%s%s\"}", padding, pad, cases[c].before,
               cases[c].secret);
      tg_call_result res;
      if (i < 2)
        assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args,
                                      NULL, &res),
                         0);
      else
        expect_refusal(w, w->reader, TG_SURFACE_AGENT, "writeItem", args, NULL,
                       "permission_denied", &res);
      tg_call_result_done(&res);
      _cleanup_json_ json_t *log = last_log(w->f);
      json_t *logged = json_object_get(json_object_get(log, "metadata"), "args");
      const char *withheld = json_string_value(json_object_get(logged, "withheld"));
      if (!withheld || strcmp(withheld, "secret") != 0)
        fail_msg("case %zu.%d logged %s", c, i, json_dumps(logged, 0));
      assert_string_equal(json_string_value(json_object_get(logged, "rule")), cases[c].rule);
      assert_int_equal(json_integer_value(json_object_get(logged, "bytes")), strlen(args));
      assert_string_equal(json_string_value(json_object_get(log, "message")),
                          i < 2 ? "ok" : "permission_denied");
    }
  /* Past the margin, a secret is cut away unread; a message that names it is left out. */
  char args[3 * TG_ARGS_LOG_MAX];
  snprintf(args, sizeof args, "{\"note\":\"%.*s%.*s%.*s %s\",\"fail\":\"echo\"}",
           TG_ARGS_LOG_MAX, pad, TG_ARGS_LOG_MAX, pad, TG_ARGS_LOG_MAX / 2, pad, token);
  tg_call_result res;
  assert_int_equal(
      fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write", args, NULL, &res),
      TG_E_TOOL);
  _cleanup_free_ char *told = json_dumps(res.value, 0);
  assert_non_null(strstr(told, "ghp_")); /* the caller is told */
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  json_t *logged = json_object_get(json_object_get(log, "metadata"), "args");
  assert_true(json_is_true(json_object_get(logged, "truncated")));
  assert_string_equal(json_string_value(json_object_get(log, "message")), "precondition_failed");
  _cleanup_free_ char *row = json_dumps(log, 0);
  assert_null(strstr(row, "ghp_"));
}

static void test_budget_stops_writes_not_reads(void **state) {
  world *w = *state;
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO missions (id, tenant_id, slug, title, current_spend_cents,"
                              " cap_cents, created_at) VALUES ('m-spent', $1, 'spent', 'Spent', 500, 500, 'now')",
                              json_pack("[s]", w->f->tenant_id), NULL),
                   0);
  char agent[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"miner\",\"scope\":\"mission:spent\",\"grants\":[\"tasks.assign\"]}", agent);
  tg_call_result res;
  expect_refusal(w, agent, TG_SURFACE_AGENT, "test.item.write", "{\"note\":\"b\"}", NULL,
                 "budget_exceeded", &res);
  assert_int_equal(json_integer_value(json_object_get(details(&res), "capCents")), 500);
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, agent, TG_SURFACE_AGENT, "echoText", "{\"text\":\"a\"}", NULL, &res), 0);
  tg_call_result_done(&res);
}

static void test_tool_list_follows_the_gates(void **state) {
  world *w = *state;
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "agent.tool.list", "{}", NULL, &res), 0);
  json_t *tools = json_object_get(res.value, "tools");
  assert_true(listed(tools, "test_item_write"));
  assert_true(listed(tools, "agent_tool_list"));
  assert_false(listed(tools, "test_danger_run"));   /* high risk, not enabled */
  assert_false(listed(tools, "admin_agent_create")); /* api surface only */
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->reader, TG_SURFACE_AGENT, "agent.tool.list", "{}", NULL, &res), 0);
  assert_false(listed(json_object_get(res.value, "tools"), "test_item_write"));
  assert_true(listed(json_object_get(res.value, "tools"), "test_read_echo"));
  tg_call_result_done(&res);
  /* The catalog naming profile offers exactly the seed's names (agent.tool.list, which has
   * none, among the others: the operator asks for the agent's list). */
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE tenants SET naming_profile = 'catalog'", NULL, NULL), 0);
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.agent.tools",
                                "{\"agentSlug\":\"writer\"}", NULL, &res),
                   0);
  tools = json_object_get(res.value, "tools");
  assert_true(listed(tools, "writeItem"));
  assert_true(listed(tools, "echoText"));
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) { /* only aliases: no canonical or model-facing name */
    const tg_tool *tool = tg_registry_find(w->f->registry, json_string_value(json_object_get(t, "name")));
    assert_non_null(tool);
    assert_non_null(tool->alias);
    assert_string_equal(tool->alias, json_string_value(json_object_get(t, "name")));
  }
  assert_false(listed(tools, "test_danger_run"));
  assert_false(listed(tools, "test_item_once")); /* no seed name: not offered */
  tg_call_result_done(&res);
  /* Nor run, by any of its names: what is offered and what runs agree. */
  static const char *const unoffered[] = {"test.item.once", "test_item_once", "agent.tool.list"};
  for (size_t k = 0; k < 3; k++) {
    expect_refusal(w, w->writer, TG_SURFACE_AGENT, unoffered[k], k < 2 ? "{\"note\":\"x\"}" : "{}", NULL,
                   "permission_denied", &res);
    assert_string_equal(json_string_value(json_object_get(details(&res), "reason")),
                        "not_in_naming_profile");
    tg_call_result_done(&res);
  }
  /* The profile names what agents are offered: users (the operator) keep every tool. */
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "agent.tool.list", "{}", NULL, &res), 0);
  assert_true(listed(json_object_get(res.value, "tools"), "admin_agent_create"));
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.agent.list", "{}", NULL, &res), 0);
  tg_call_result_done(&res);
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE tenants SET naming_profile = 'canonical'", NULL, NULL), 0);
}

static char *usable_key(world *w, const char *principal_id) {
  tg_principal *p = NULL;
  assert_int_equal(tg_principal_load(w->f->db, principal_id, &p), 0);
  char *key = NULL;
  assert_int_equal(tg_tools_usable_key(&w->f->env, p, TG_SURFACE_AGENT, &key), 0);
  tg_principal_free(p);
  return key;
}

/* The key of a tool list moves with the list, and only then: not with a change of grants or
 * policy that leaves the list as it was. */
static void test_tool_list_key_follows_the_list(void **state) {
  world *w = *state;
  static const struct {
    const char *sql;
    bool moves;
  } changes[] = {
      {"UPDATE tenants SET naming_profile = 'catalog'", true}, /* the names */
      {"INSERT INTO grants (principal_id, permission, created_at)"
       " SELECT principal_id, 'tasks.assign', 'now' FROM agents WHERE slug = 'reader'",
       true}, /* writeItem */
      {"INSERT INTO grants (principal_id, permission, created_at)"
       " SELECT principal_id, 'runs.read', 'now' FROM agents WHERE slug = 'reader'",
       false}, /* no tool of the agent surface needs it */
      {"INSERT INTO tool_policies (tenant_id, tool_name, mode, updated_at)"
       " SELECT id, 'test.danger.run', 'enabled', 'now' FROM tenants",
       false}, /* it has no seed name: still not offered under the catalog profile */
      {"UPDATE tenants SET naming_profile = 'canonical'", true}, /* the names; and it is offered */
      {"UPDATE agents SET status = 'paused' WHERE slug = 'reader'", true},
  };
  char *before = usable_key(w, w->reader);
  for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
    assert_int_equal(tg_db_exec(w->f->db, changes[i].sql, NULL, NULL), 0);
    char *after = usable_key(w, w->reader);
    if ((strcmp(after, before) != 0) != changes[i].moves)
      fail_msg("change %zu: the key %s", i, changes[i].moves ? "stayed" : "moved");
    free(before);
    before = after;
  }
  free(before);
}

static void test_unknown_grant_is_refused(void **state) {
  world *w = *state;
  tg_call_result res;
  _cleanup_free_ char *before = fixture_snapshot(w->f, "agent_run_logs");
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.add",
                                "{\"agentSlug\":\"reader\",\"permission\":\"task.asign\"}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "validation_failed");
  tg_call_result_done(&res);
  _cleanup_free_ char *after = fixture_snapshot(w->f, "agent_run_logs");
  assert_string_equal(before, after);
}

/* Grants permission to principal by plain SQL: no principal is loaded on the connection. */
static void grant_behind(world *w, const char *principal, const char *permission) {
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO grants (principal_id, permission, created_at)"
                              " VALUES ($1, $2, 'now')",
                              json_pack("[ss]", principal, permission), NULL), 0);
}

/* writeItem by principal, which succeeds. */
static void write_item(world *w, const char *principal, const char *note) {
  char args[100];
  snprintf(args, sizeof args, "{\"note\":\"%s\"}", note);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, principal, TG_SURFACE_AGENT, "writeItem", args, NULL, &res), 0);
  tg_call_result_done(&res);
}

/* Fails unless every table is as the snapshot before says. */
static void expect_unchanged(world *w, const char *before) {
  _cleanup_free_ char *now = fixture_snapshot(w->f, NULL);
  assert_string_equal(before, now);
}

static uint64_t rate_clock_ns;
static uint64_t rate_clock(void) { return rate_clock_ns; }

/* A caller past its server's rate is refused before anything is read for the call, and
 * nothing but the refusal's row is written: one row a second, counting the refusals it
 * stands for, and the count of the rest written apart. Calls refused for other reasons count
 * too; another caller's do not. */
static void test_rate_limit_refuses_past_the_limit(void **state) {
  world *w = *state;
  tg_rate_limit *limit = tg_rate_limit_new(2, 3600);
  assert_non_null(limit);
  rate_clock_ns = 42;
  tg_rate_limit_set_clock(limit, rate_clock);
  w->f->env.rate_limit = limit;
  write_item(w, w->writer, "r1");
  write_item(w, w->writer, "r2");
  tg_call_result res;
  expect_refusal(w, w->writer, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"r3\"}", NULL,
                 "rate_limited", &res);
  assert_int_equal(json_integer_value(json_object_get(details(&res), "retryAfterMs")), 1800000);
  assert_int_equal(json_integer_value(json_object_get(details(&res), "limit")), 2);
  assert_int_equal(json_integer_value(json_object_get(details(&res), "perSeconds")), 3600);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *log = last_log(w->f);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(log, "metadata"), "refusals")),
                   1);
  assert_true(json_is_null(json_object_get(log, "run_id")));
  assert_int_equal(fixture_count(w->f, "missions"), 2);

  /* The same second: refused again, and not a row written. */
  _cleanup_free_ char *before = fixture_snapshot(w->f, NULL);
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "no.such.tool", "{}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "rate_limited");
  tg_call_result_done(&res);
  expect_unchanged(w, before);

  /* Its count is written once its second is over, or as the server stops; a write that
   * fails leaves it for a second later. */
  assert_int_equal(tg_call_write_rate_refusals(limit, w->f->db, false), TG_OK);
  expect_unchanged(w, before);
  rate_clock_ns += TG_RATE_LIMIT_ROW_MS * 1000000ull;
  tg_db_fail_after(w->f->db, 1);
  assert_true(tg_call_write_rate_refusals(limit, w->f->db, false) < 0);
  expect_unchanged(w, before);
  assert_int_equal(tg_call_write_rate_refusals(limit, w->f->db, false), TG_OK);
  expect_unchanged(w, before);
  rate_clock_ns += TG_RATE_LIMIT_ROW_MS * 1000000ull;
  assert_int_equal(tg_call_write_rate_refusals(limit, w->f->db, false), TG_OK);
  _cleanup_json_ json_t *tally = last_log(w->f);
  assert_string_equal(json_string_value(json_object_get(tally, "step")), "tool:?");
  assert_string_equal(json_string_value(json_object_get(tally, "level")), "WARN");
  json_t *counted = json_object_get(tally, "metadata");
  assert_string_equal(json_string_value(json_object_get(counted, "code")), "rate_limited");
  assert_int_equal(json_integer_value(json_object_get(counted, "refusals")), 1);
  long logs = fixture_count(w->f, "agent_run_logs");
  assert_int_equal(tg_call_write_rate_refusals(limit, w->f->db, true), TG_OK);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);

  /* A refusal whose row cannot be written is still refused for its rate, and counted in the
   * next row. */
  rate_clock_ns += TG_RATE_LIMIT_ROW_MS * 1000000ull;
  tg_db_fail_after(w->f->db, 1);
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"r4\"}",
                                NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "rate_limited");
  tg_call_result_done(&res);
  tg_db_fail_after(w->f->db, 0);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);
  rate_clock_ns += TG_RATE_LIMIT_ROW_MS * 1000000ull;
  assert_int_equal(tg_call_write_rate_refusals(limit, w->f->db, false), TG_OK);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  _cleanup_json_ json_t *kept = last_log(w->f);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(kept, "metadata"), "refusals")),
                   1);

  /* The reader's calls are counted apart: refused writeItem twice for want of its grant, it
   * is refused its third call for its rate. */
  for (int i = 0; i < 2; i++) {
    expect_refusal(w, w->reader, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"x\"}", NULL,
                   "permission_denied", &res);
    tg_call_result_done(&res);
  }
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "echoText", "{\"text\":\"hi\"}", NULL,
                 "rate_limited", &res);
  tg_call_result_done(&res);
  w->f->env.rate_limit = NULL;
  tg_rate_limit_free(limit);
}

/* A connection's kept principal is used without reading whether it stands: the call's write
 * finds it does not, and the call is decided again. */
static void test_kept_principal_is_checked_where_the_call_writes(void **state) {
  world *w = *state;
  write_item(w, w->writer, "kept");
  /* A change to another principal moves the epoch too: decided again, the call goes on. */
  grant_behind(w, w->reader, "kb.read");
  write_item(w, w->writer, "moved");
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM activity_log"
                                       " WHERE action_type = 'ITEM_WRITTEN' AND actor_id ="
                                       " (SELECT id FROM agents WHERE principal_id = $1)",
                                       json_pack("[s]", w->writer)),
                   2);
  /* Revoked behind the connection's back: no principal is loaded on it meanwhile. */
  assert_int_equal(tg_db_exec(w->f->db, "DELETE FROM grants WHERE principal_id = $1",
                              json_pack("[s]", w->writer), NULL), 0);
  long missions = fixture_count(w->f, "missions"), runs = fixture_count(w->f, "agent_runs");
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"stale\"}",
                                NULL, &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "permission_denied");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs"
                                       " WHERE principal_id = $1 AND level = 'WARN'",
                                       json_pack("[s]", w->writer)),
                   1);
}

/* A refusal is answered on current grants only, never on a kept principal's. */
static void test_refusal_is_decided_on_current_grants(void **state) {
  world *w = *state;
  tg_call_result res;
  expect_refusal(w, w->reader, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"no\"}", NULL,
                 "permission_denied", &res);
  tg_call_result_done(&res);
  grant_behind(w, w->reader, "tasks.assign");
  write_item(w, w->reader, "granted");
  assert_int_equal(
      fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM missions WHERE slug = 'granted'", NULL),
      1);
}

/* A caller kept by the connection and gone since is answered as unknown, with nothing
 * written. */
static void test_kept_caller_gone_is_unknown(void **state) {
  world *w = *state;
  char ghost[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"ghost\"}", ghost);
  tg_principal *p = NULL;
  assert_int_equal(tg_principal_load(w->f->db, ghost, &p), 0); /* now the kept one */
  tg_principal_free(p);
  static const char *const gone[] = {"DELETE FROM agents WHERE principal_id = $1",
                                     "DELETE FROM principals WHERE id = $1"};
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(tg_db_exec(w->f->db, gone[i], json_pack("[s]", ghost), NULL), 0);
  _cleanup_free_ char *before = fixture_snapshot(w->f, NULL);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, ghost, TG_SURFACE_AGENT, "echoText", "{\"text\":\"boo\"}",
                                NULL, &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "permission_denied");
  assert_string_equal(json_string_value(json_object_get(json_object_get(res.value, "error"), "message")),
                      "Unknown caller.");
  tg_call_result_done(&res);
  _cleanup_free_ char *after = fixture_snapshot(w->f, NULL);
  assert_string_equal(before, after);
}

/* A principal whose agent (or user) is gone, its principal row left, stands for no one: its
 * token is no token, and a call in its name is an unknown caller's, writing nothing. */
static void test_caller_whose_subject_is_gone_is_unknown(void **state) {
  world *w = *state;
  char orphan[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"orphan\"}", orphan);
  tg_call_result made;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.token.create",
                                "{\"agentSlug\":\"orphan\"}", NULL, &made),
                   0);
  _cleanup_free_ char *token = strdup(json_string_value(json_object_get(made.value, "token")));
  tg_call_result_done(&made);
  char id[TG_UUID_LEN + 1];
  assert_int_equal(tg_principal_by_token(w->f->db, token, id), 0);
  assert_int_equal(tg_db_exec(w->f->db, "DELETE FROM agents WHERE principal_id = $1",
                              json_pack("[s]", orphan), NULL),
                   0);
  assert_int_equal(tg_principal_by_token(w->f->db, token, id), TG_E_NOTFOUND);
  tg_principal *p = NULL;
  assert_int_equal(tg_principal_load(w->f->db, orphan, &p), TG_E_NOTFOUND);
  _cleanup_free_ char *before = fixture_snapshot(w->f, NULL);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, orphan, TG_SURFACE_AGENT, "echoText", "{\"text\":\"boo\"}",
                                NULL, &res), TG_E_TOOL);
  assert_string_equal(json_string_value(json_object_get(json_object_get(res.value, "error"), "message")),
                      "Unknown caller.");
  tg_call_result_done(&res);
  _cleanup_free_ char *after = fixture_snapshot(w->f, NULL);
  assert_string_equal(before, after);
}

/* A run's cap counts its successes in the run's own row: a capped tool succeeds once a run,
 * its next call there is refused and writes nothing, and another run may call it again. */
static void test_run_cap_counts_successes(void **state) {
  world *w = *state;
  tg_call_result res;
  char runs[2][TG_UUID_LEN + 1];
  for (size_t i = 0; i < 2; i++) fixture_run_start(w->f, "writer", runs[i]);
  long missions = fixture_count(w->f, "missions");
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.once",
                                "{\"note\":\"first\"}", runs[0], &res), 0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions + 1);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT n FROM agent_run_successes"
                                       " WHERE run_id = $1 AND step = 'tool:test.item.once'",
                                       json_pack("[s]", runs[0])),
                   1);
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.once",
                                "{\"note\":\"second\"}", runs[0], &res), TG_E_TOOL);
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "per_run_cap");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions + 1);
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.once",
                                "{\"note\":\"other run\"}", runs[1], &res), 0);
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions + 2);
}

/* What another call writes between a call's gates and its write: tg_db_test_queued runs it
 * once, as the call queues its write. */
static struct {
  fixture *f;
  const char *sql;
  json_t *params;
} race;

static void race_in(void) {
  if (!race.sql) return;
  const char *sql = race.sql;
  race.sql = NULL;
  assert_int_equal(tg_db_exec(race.f->db, sql, json_incref(race.params), NULL), 0);
}

/* The gates that read rows other calls write hold in the call's own write transaction: a run
 * that reached its cap or ended after the gates passed refuses the call, which writes nothing. */
static void test_run_gates_hold_at_the_write(void **state) {
  world *w = *state;
  tg_call_result res;
  struct {
    const char *sql, *reason;
  } moves[] = {
      /* the count a call of the same run, done meanwhile, leaves */
      {"INSERT INTO agent_run_successes (run_id, step, n) VALUES ($1, 'tool:test.item.once', 1)",
       "per_run_cap"},
      {"UPDATE agent_runs SET status = 'completed', ended_at = 'now' WHERE id = $1", NULL},
  };
  tg_db_test_queued = race_in;
  for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
    char run[TG_UUID_LEN + 1];
    fixture_run_start(w->f, "writer", run);
    long missions = fixture_count(w->f, "missions");
    race.f = w->f;
    race.sql = moves[i].sql;
    race.params = json_pack("[s]", run);
    int r = fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.once", "{\"note\":\"race\"}",
                         run, &res);
    json_decref(race.params);
    assert_null(race.sql); /* the move was made */
    assert_int_equal(r, TG_E_TOOL);
    assert_string_equal(fixture_code(&res), "precondition_failed");
    json_t *reason = json_object_get(details(&res), "reason");
    if (moves[i].reason) assert_string_equal(json_string_value(reason), moves[i].reason);
    else assert_string_equal(json_string_value(json_object_get(details(&res), "status")), "completed");
    tg_call_result_done(&res);
    assert_int_equal(fixture_count(w->f, "missions"), missions);
    assert_int_equal(fixture_count_where(w->f,
                                         "SELECT COUNT(*) AS n FROM agent_run_logs"
                                         " WHERE run_id = $1 AND level = 'INFO'",
                                         json_pack("[s]", run)),
                     0);
    /* The refusal's own row names the run unless the run is what refused. */
    assert_int_equal(fixture_count_where(w->f,
                                         "SELECT COUNT(*) AS n FROM agent_run_logs"
                                         " WHERE run_id = $1 AND level = 'WARN'",
                                         json_pack("[s]", run)),
                     i == 0);
  }
  tg_db_test_queued = NULL;
}

/* A database another writer keeps locked fails the call as internal_error that says so, for
 * the client to retry, and writes nothing. */
static void test_locked_database_is_told(void **state) {
  world *w = *state;
  long missions = fixture_count(w->f, "missions");
  tg_db *other = tg_test_db_open(w->f->dir);
  assert_int_equal(tg_db_begin(other), 0);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "test.item.write",
                                "{\"note\":\"x\"}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "internal_error");
  assert_string_equal(json_string_value(json_object_get(details(&res), "reason")), "database_busy");
  tg_call_result_done(&res);
  assert_int_equal(tg_db_rollback(other), 0);
  tg_db_close(other);
  assert_int_equal(fixture_count(w->f, "missions"), missions);
}

/* The client of the interactive tests: while it "thinks", another connection of the same
 * process writes, which waits for the write lock if the asking call holds it. */
typedef struct asked_client {
  fixture *f;
  const char *other_sql; /* what the other connection writes; NULL: a change that moves nothing */
  int asks, other_write;
  long answer_after_ms; /* how long its user takes to answer */
} asked_client;

static int answer_after_a_write(void *self, const char *method, json_t *params, json_t **ret) {
  asked_client *c = self;
  json_decref(params);
  c->asks++;
  nanosleep(&(struct timespec){c->answer_after_ms / 1000, c->answer_after_ms % 1000 * 1000000L},
            NULL);
  tg_db *other = tg_test_db_open(c->f->dir);
  c->other_write = tg_db_begin(other);
  if (c->other_write == 0)
    c->other_write = tg_db_exec(other,
                                c->other_sql ? c->other_sql
                                             : "UPDATE tenants SET name = name WHERE id = $1",
                                json_pack("[s]", c->f->tenant_id), NULL);
  if (c->other_write == 0) c->other_write = tg_db_commit(other);
  tg_db_close(other);
  *ret = json_pack("{s:s}", "action", "accept");
  return strcmp(method, "elicitation/create") == 0 ? 0 : TG_E_INVAL;
}

static int close_stream(void *self) { return 0; }

static int ask_call(world *w, asked_client *c, const char *tool, const char *args,
                    tg_call_result *res) {
  tg_client_channel ch = {.self = c, .ask = answer_after_a_write, .close_stream = close_stream};
  json_t *parsed = json_loads(args, 0, NULL);
  tg_call_request req = {.principal_id = w->reader, .surface = TG_SURFACE_MCP, .tool = tool,
                         .args = parsed, .client = &ch};
  int r = tg_call(&w->f->env, &req, res);
  json_decref(parsed);
  return r;
}

/* An interactive handler asks before the call's transaction: other writers go on meanwhile,
 * and its activity rows are written after. A handler that is not interactive cannot ask
 * (nor end its stream). */
static void test_interactive_calls_ask_outside_the_transaction(void **state) {
  world *w = *state;
  asked_client c = {.f = w->f};
  tg_call_result res;
  long activity = fixture_count(w->f, "activity_log");
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{}", &res), 0);
  assert_int_equal(c.asks, 1);
  assert_int_equal(c.other_write, 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(res.value, "answer"), "action")),
                      "accept");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "activity_log"), activity + 1);


  /* It reads only: a write fails the call and leaves nothing. */
  long missions = fixture_count(w->f, "missions");
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{\"write\":true}", &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "internal_error");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "missions"), missions);
  assert_int_equal(fixture_count(w->f, "activity_log"), activity + 1);
  /* The connection is writable again for the next call. */
  assert_int_equal(fixture_call(w->f, w->writer, TG_SURFACE_AGENT, "writeItem", "{\"note\":\"after-ask\"}",
                                NULL, &res), 0);
  tg_call_result_done(&res);

  c.asks = 0;
  assert_int_equal(ask_call(w, &c, "test.ask.plain", "{}", &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "precondition_failed");
  /* Nor can it end its stream early: only an interactive call is streamed as it runs. */
  json_t *details = json_object_get(json_object_get(res.value, "error"), "details");
  assert_true(json_is_false(json_object_get(details, "closeStream")));
  tg_call_result_done(&res);
  assert_int_equal(c.asks, 0);

  /* Its run started when the call did, not when its user had answered. */
  c.answer_after_ms = 1500;
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{}", &res), 0);
  tg_call_result_done(&res);
  _cleanup_json_ json_t *run = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT (julianday(ended_at) - julianday(started_at)) * 86400000"
                                   " AS ms FROM agent_runs ORDER BY id DESC LIMIT 1",
                                   NULL, &run),
                   0);
  assert_true(json_real_value(json_object_get(run, "ms")) >= 1400); /* julianday rounds */
}

/* The tool is disabled while the client answers: the call is decided again when it writes,
 * refused, and its activity row is not written. */
static void test_interactive_call_refused_after_it_asked(void **state) {
  world *w = *state;
  asked_client c = {.f = w->f,
                    .other_sql = "INSERT INTO tool_policies (tenant_id, tool_name, mode, updated_at)"
                                 " VALUES ($1, 'test.ask.interactive', 'disabled', 'now')"};
  long activity = fixture_count(w->f, "activity_log");
  tg_call_result res;
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{}", &res), TG_E_TOOL);
  assert_int_equal(c.asks, 1);
  assert_int_equal(c.other_write, 0);
  assert_string_equal(fixture_code(&res), "permission_denied");
  tg_call_result_done(&res);
  assert_int_equal(fixture_count(w->f, "activity_log"), activity);
}

/* An interactive tool asks its client before its write: it is decided on current
 * permissions, never on a kept principal. */
static void test_interactive_call_decided_on_current_permissions(void **state) {
  world *w = *state;
  asked_client c = {.f = w->f};
  tg_call_result res;
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{}", &res), 0);
  tg_call_result_done(&res);
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO tool_policies (tenant_id, tool_name, mode, updated_at)"
                              " VALUES ($1, 'test.ask.interactive', 'disabled', 'now')",
                              json_pack("[s]", w->f->tenant_id), NULL), 0);
  c.asks = 0;
  long runs = fixture_count(w->f, "agent_runs");
  assert_int_equal(ask_call(w, &c, "test.ask.interactive", "{\"write\":true}", &res), TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "permission_denied");
  tg_call_result_done(&res);
  assert_int_equal(c.asks, 0);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
}

/* Over MCP a person's call of a held tool waits as an agent's does, since the client may be
 * acting on the person's token: the person decides it outside MCP (over MCP the client could
 * decide it; no approval is decided there), and the very call then runs, once. */
static void test_a_persons_call_over_mcp_waits_for_that_person(void **state) {
  world *w = *state;
  set_policy(w, "test.read.echo", "approval");
  static const char args[] = "{\"text\":\"mine\"}";
  tg_call_result res;
  assert_int_equal(
      fixture_call(w->f, w->f->owner, TG_SURFACE_MCP, "test.read.echo", args, NULL, &res),
      TG_E_TOOL);
  assert_string_equal(reason_of(res.value), "approval_required");
  _cleanup_free_ char *id = strdup(json_string_value(json_object_get(details(&res), "approvalId")));
  tg_call_result_done(&res);
  char decision[200];
  snprintf(decision, sizeof decision, "{\"approvalId\":\"%s\",\"decision\":\"approve\"}", id);
  expect_refusal(w, w->f->owner, TG_SURFACE_MCP, "agent.approval.resolve", decision, NULL,
                 "permission_denied", &res);
  assert_string_equal(reason_of(res.value), "surface");
  tg_call_result_done(&res);
  assert_string_equal(request_status(w, id), "pending");
  json_decref(resolve(w, w->f->owner, id, "approve", ""));
  assert_int_equal(
      fixture_call(w->f, w->f->owner, TG_SURFACE_MCP, "test.read.echo", args, NULL, &res), 0);
  tg_call_result_done(&res);
  assert_string_equal(request_status(w, id), "used");
  assert_int_equal(
      fixture_call(w->f, w->f->owner, TG_SURFACE_MCP, "test.read.echo", args, NULL, &res),
      TG_E_TOOL);
  assert_string_equal(reason_of(res.value), "approval_required");
  tg_call_result_done(&res);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_success_writes_everything_once),
      T(test_lookup_by_every_name),
      T(test_unknown_tool_is_not_found),
      T(test_long_unknown_name_is_cut_on_a_character),
      T(test_missing_permission_is_denied),
      T(test_grants_are_read_live),
      T(test_wrong_surface_is_denied),
      T(test_inactive_agent_is_denied),
      T(test_policy_gates),
      T(test_approval_holds_the_very_call),
      T(test_a_persons_call_over_mcp_waits_for_that_person),
      T(test_a_policy_change_withdraws_live_approvals),
      T(test_approval_requests_are_bounded),
      T(test_approval_list_by_status),
      T(test_unreviewable_calls_are_not_put_to_approvers),
      T(test_invalid_arguments_name_every_violation),
      T(test_a_message_cut_within_a_character_is_answered),
      T(test_a_run_id_of_foreign_bytes_is_refused),
      T(test_failures_roll_back),
      T(test_dry_run_writes_nothing),
      T(test_calls_attach_to_runs),
      T(test_telemetry_truncates_arguments),
      T(test_telemetry_withholds_secrets),
      T(test_budget_stops_writes_not_reads),
      T(test_tool_list_follows_the_gates),
      T(test_tool_list_key_follows_the_list),
      T(test_unknown_grant_is_refused),
      T(test_interactive_calls_ask_outside_the_transaction),
      T(test_interactive_call_refused_after_it_asked),
      T(test_kept_principal_is_checked_where_the_call_writes),
      T(test_interactive_call_decided_on_current_permissions),
      T(test_kept_caller_gone_is_unknown),
      T(test_caller_whose_subject_is_gone_is_unknown),
      T(test_refusal_is_decided_on_current_grants),
      T(test_run_cap_counts_successes),
      T(test_run_gates_hold_at_the_write),
      T(test_locked_database_is_told),
      T(test_rate_limit_refuses_past_the_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

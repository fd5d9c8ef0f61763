/* The task tools of the work provider end to end on a real SQLite file: every bound of
 * their schemas, every error code seed 000 names for them, every side-effect row, scope
 * isolation between missions and between workspaces, dispatch jobs and their dedupe keys,
 * the state machine through the tool, approvals, and the operator tools around them. */
#define _GNU_SOURCE
#include "support.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain/task_state.h"
#include "fixture.h"
#include "util/cleanup.h"
#include "util/status.h"

typedef struct world {
  fixture *f;
  char boss[TG_UUID_LEN + 1];    /* tenant scope, canAssignTasks */
  char m1lead[TG_UUID_LEN + 1];  /* mission m1, canAssignTasks */
  char i1agent[TG_UUID_LEN + 1]; /* idea "idea-one" of m1, canAssignTasks */
  char w1dev[TG_UUID_LEN + 1];   /* work w1 (m1, idea-one), canAssignTasks */
  char w2dev[TG_UUID_LEN + 1];   /* work w2 (m1, no idea), canAssignTasks */
  char m2lead[TG_UUID_LEN + 1];  /* mission m2, canAssignTasks */
  char w3dev[TG_UUID_LEN + 1];   /* work w3 (m2), no grants */
  char idle[TG_UUID_LEN + 1];    /* tenant scope, no grants */
  char alice[TG_UUID_LEN + 1];   /* a member user */
  char other_tenant[TG_UUID_LEN + 1], other_owner[TG_UUID_LEN + 1];
  char stranger[TG_UUID_LEN + 1]; /* tenant scope agent of the other workspace, canAssignTasks */
} world;

typedef struct tslug {
  char s[24];
} tslug;

static bool is_user(world *w, const char *who) {
  return strcmp(who, w->f->owner) == 0 || strcmp(who, w->other_owner) == 0 ||
         strcmp(who, w->alice) == 0;
}

static int vcall(world *w, const char *who, const char *tool, tg_call_result *res, const char *fmt,
                 va_list ap) {
  char *args = NULL;
  if (vasprintf(&args, fmt, ap) < 0) fail();
  int r = fixture_call(w->f, who, is_user(w, who) ? TG_SURFACE_API : TG_SURFACE_AGENT, tool, args,
                       NULL, res);
  free(args);
  return r;
}

static json_t *vok(world *w, const char *who, const char *tool, const char *fmt, va_list ap) {
  tg_call_result res;
  if (vcall(w, who, tool, &res, fmt, ap) != 0) {
    char *text = json_dumps(res.value, 0);
    fail_msg("%s failed: %s", tool, text);
  }
  json_t *value = json_incref(res.value);
  tg_call_result_done(&res);
  return value;
}

/* Calls tool as who (agents on the agent surface, users on api) and returns its result. */
__attribute__((format(printf, 4, 5))) static json_t *ok(world *w, const char *who, const char *tool,
                                                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *value = vok(w, who, tool, fmt, ap);
  va_end(ap);
  return value;
}

/* Every row a work tool may write, as text: a refused or failed call must leave it as is. */
static char *domain_snapshot(fixture *f) {
  static const char *const tables[] = {"tasks",    "task_assignees", "task_blocks", "task_chat_messages",
                                       "jobs",     "activity_log",   "task_counters", "missions",
                                       "ideas",    "works",          "agents",      "grants"};
  json_t *all = json_object();
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    char *sql = NULL;
    assert_true(asprintf(&sql, "SELECT * FROM %s ORDER BY 1, 2", tables[i]) > 0);
    json_t *rows = NULL;
    assert_int_equal(tg_db_query(f->db, sql, NULL, &rows), 0);
    json_object_set_new(all, tables[i], rows);
    free(sql);
  }
  char *text = json_dumps(all, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(all);
  return text;
}

/* Calls tool expecting the error code; checks nothing was written; returns the details. */
__attribute__((format(printf, 5, 6))) static json_t *fails(world *w, const char *who,
                                                           const char *tool, const char *code,
                                                           const char *fmt, ...) {
  _cleanup_free_ char *before = domain_snapshot(w->f);
  tg_call_result res;
  va_list ap;
  va_start(ap, fmt);
  int r = vcall(w, who, tool, &res, fmt, ap);
  va_end(ap);
  const char *got = fixture_code(&res);
  if (r != TG_E_TOOL || strcmp(got, code) != 0) {
    char *text = json_dumps(res.value, 0);
    fail_msg("%s: expected %s, got %s", tool, code, text);
  }
  json_t *error = json_object_get(res.value, "error");
  assert_non_null(json_string_value(json_object_get(error, "message")));
  json_t *details = json_incref(json_object_get(error, "details"));
  tg_call_result_done(&res);
  _cleanup_free_ char *after = domain_snapshot(w->f);
  if (strcmp(before, after) != 0) fail_msg("%s answered %s but wrote", tool, code);
  return details;
}

static void fails_quietly(world *w, const char *who, const char *tool, const char *code,
                          const char *args) {
  json_decref(fails(w, who, tool, code, "%s", args));
}

__attribute__((format(printf, 3, 4))) static tslug task(world *w, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *result = vok(w, who, "createTask", fmt, ap);
  va_end(ap);
  tslug slug;
  snprintf(slug.s, sizeof slug.s, "%s", json_string_value(json_object_get(result, "slug")));
  json_decref(result);
  return slug;
}

static void move(world *w, const char *who, const char *slug, const char *to) {
  json_t *result = ok(w, who, "transitionTask", "{\"taskSlug\":\"%s\",\"to\":\"%s\"}", slug, to);
  assert_string_equal(json_string_value(json_object_get(result, "status")), to);
  json_decref(result);
}

static void assign(world *w, const char *slug, const char *who_key, const char *name, const char *role) {
  json_decref(ok(w, w->f->owner, "work.task.assign",
                 "{\"taskSlug\":\"%s\",\"%s\":\"%s\",\"role\":\"%s\"}", slug, who_key, name, role));
}

static json_t *row(world *w, const char *sql, json_t *params) {
  json_t *r = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, sql, params, &r), 0);
  assert_non_null(r);
  return r;
}

static long count(world *w, const char *sql, json_t *params) {
  json_t *r = row(w, sql, params);
  long n = (long)json_integer_value(json_object_get(r, "n"));
  json_decref(r);
  return n;
}

static json_t *task_row(world *w, const char *slug) {
  return row(w, "SELECT * FROM tasks WHERE tenant_id = $1 AND slug = $2",
             json_pack("[ss]", w->f->tenant_id, slug));
}

static const char *id_of(world *w, const char *table, const char *slug, char out[TG_UUID_LEN + 1]) {
  char *sql = NULL;
  assert_true(asprintf(&sql, "SELECT id FROM %s WHERE slug = $1", table) > 0);
  json_t *r = row(w, sql, json_pack("[s]", slug));
  snprintf(out, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(r, "id")));
  json_decref(r);
  free(sql);
  return out;
}

static void agent(world *w, const char *args, char principal[TG_UUID_LEN + 1]) {
  fixture_agent(w->f, args, principal);
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(NULL);
  *state = w;
  json_decref(ok(w, w->f->owner, "work.mission.create", "{\"slug\":\"m1\",\"title\":\"Mission one\"}"));
  json_decref(ok(w, w->f->owner, "work.mission.create", "{\"slug\":\"m2\",\"title\":\"Mission two\"}"));
  json_t *idea = ok(w, w->f->owner, "work.idea.create", "{\"missionSlug\":\"m1\",\"title\":\"Idea one\"}");
  assert_string_equal(json_string_value(json_object_get(idea, "slug")), "idea-one");
  json_decref(idea);
  json_decref(ok(w, w->f->owner, "work.work.create",
                 "{\"slug\":\"w1\",\"missionSlug\":\"m1\",\"ideaSlug\":\"idea-one\"}"));
  json_decref(ok(w, w->f->owner, "work.work.create", "{\"slug\":\"w2\",\"missionSlug\":\"m1\"}"));
  json_decref(ok(w, w->f->owner, "work.work.create", "{\"slug\":\"w3\",\"missionSlug\":\"m2\"}"));
  agent(w, "{\"slug\":\"boss\",\"grants\":[\"canAssignTasks\"]}", w->boss);
  agent(w, "{\"slug\":\"m1-lead\",\"scope\":\"mission:m1\",\"grants\":[\"canAssignTasks\"]}", w->m1lead);
  agent(w, "{\"slug\":\"i1-agent\",\"scope\":\"idea:idea-one\",\"grants\":[\"canAssignTasks\"]}", w->i1agent);
  agent(w, "{\"slug\":\"w1-dev\",\"scope\":\"work:w1\",\"grants\":[\"canAssignTasks\"]}", w->w1dev);
  agent(w, "{\"slug\":\"w2-dev\",\"scope\":\"work:w2\",\"grants\":[\"canAssignTasks\"]}", w->w2dev);
  agent(w, "{\"slug\":\"m2-lead\",\"scope\":\"mission:m2\",\"grants\":[\"canAssignTasks\"]}", w->m2lead);
  agent(w, "{\"slug\":\"w3-dev\",\"scope\":\"work:w3\"}", w->w3dev);
  agent(w, "{\"slug\":\"idle\"}", w->idle);

  /* A member user: bootstrap writes, as toolgate has no user tool yet. */
  char user_id[] = "00000000-0000-7000-8000-00000000a11c";
  snprintf(w->alice, sizeof w->alice, "00000000-0000-7000-8000-00000000a11d");
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO principals (id, tenant_id, kind, created_at)"
                              " VALUES ($1, $2, 'user', 'now')",
                              json_pack("[ss]", w->alice, w->f->tenant_id), NULL),
                   0);
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO users (id, tenant_id, principal_id, username, role, created_at)"
                              " VALUES ($1, $2, $3, 'alice', 'member', 'now')",
                              json_pack("[sss]", user_id, w->f->tenant_id, w->alice), NULL),
                   0);

  assert_int_equal(tg_tenant_create(w->f->db, "other", "owner2", w->other_tenant, w->other_owner), 0);
  json_decref(ok(w, w->other_owner, "admin.agent.create",
                 "{\"slug\":\"stranger\",\"grants\":[\"canAssignTasks\"]}"));
  assert_int_equal(tg_principal_lookup(w->f->db, w->other_tenant, TG_PRINCIPAL_AGENT, "stranger",
                                       w->stranger),
                   0);
  return 0;
}

_Static_assert(offsetof(world, f) == 0, "fixture_world_free finds the fixture first");
static int teardown(void **state) { return fixture_world_free(state); }

static char *repeat(char c, size_t n) {
  char *s = malloc(n + 1);
  assert_non_null(s);
  memset(s, c, n);
  s[n] = '\0';
  return s;
}

/* A JSON array of n strings "<prefix><i>". */
static char *string_array(const char *prefix, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) {
    char item[64];
    snprintf(item, sizeof item, "%s%zu", prefix, i);
    json_array_append_new(a, json_string(item));
  }
  char *text = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  return text;
}

static const char *first_keyword(json_t *details) {
  return json_string_value(
      json_object_get(json_array_get(json_object_get(details, "violations"), 0), "keyword"));
}

static void expect_invalid(world *w, const char *tool, const char *keyword, const char *args) {
  json_t *d = fails(w, w->boss, tool, "validation_failed", "%s", args);
  if (strcmp(first_keyword(d), keyword) != 0)
    fail_msg("%s %s: keyword %s, expected %s", tool, args, first_keyword(d), keyword);
  json_decref(d);
}

static void test_create_bounds(void **state) {
  world *w = *state;
  _cleanup_free_ char *t200 = repeat('t', 200), *t201 = repeat('t', 201);
  _cleanup_free_ char *d50000 = repeat('d', 50000), *d50001 = repeat('d', 50001);
  _cleanup_free_ char *l50 = repeat('l', 50), *l51 = repeat('l', 51);
  _cleanup_free_ char *labels20 = string_array("label", 20), *labels21 = string_array("label", 21);
  _cleanup_free_ char *agents21 = string_array("agent", 21), *users21 = string_array("user", 21);
  _cleanup_free_ char *blockers51 = string_array("T-", 51);
  task(w, w->boss, "{\"title\":\"t\"}");
  task(w, w->boss, "{\"title\":\"%s\"}", t200);
  expect_invalid(w, "createTask", "minLength", "{\"title\":\"\"}");
  char *args = NULL;
  assert_true(asprintf(&args, "{\"title\":\"%s\"}", t201) > 0);
  expect_invalid(w, "createTask", "maxLength", args);
  free(args);
  task(w, w->boss, "{\"title\":\"x\",\"description\":\"\"}");
  task(w, w->boss, "{\"title\":\"x\",\"description\":\"%s\"}", d50000);
  assert_true(asprintf(&args, "{\"title\":\"x\",\"description\":\"%s\"}", d50001) > 0);
  expect_invalid(w, "createTask", "maxLength", args);
  free(args);
  task(w, w->boss, "{\"title\":\"x\",\"labels\":%s}", labels20);
  assert_true(asprintf(&args, "{\"title\":\"x\",\"labels\":%s}", labels21) > 0);
  expect_invalid(w, "createTask", "maxItems", args);
  free(args);
  task(w, w->boss, "{\"title\":\"x\",\"labels\":[\"%s\"]}", l50);
  assert_true(asprintf(&args, "{\"title\":\"x\",\"labels\":[\"%s\"]}", l51) > 0);
  expect_invalid(w, "createTask", "maxLength", args);
  free(args);
  expect_invalid(w, "createTask", "minLength", "{\"title\":\"x\",\"labels\":[\"\"]}");
  expect_invalid(w, "createTask", "uniqueItems", "{\"title\":\"x\",\"labels\":[\"a\",\"a\"]}");
  assert_true(asprintf(&args, "{\"title\":\"x\",\"assigneeAgentSlugs\":%s}", agents21) > 0);
  expect_invalid(w, "createTask", "maxItems", args);
  free(args);
  assert_true(asprintf(&args, "{\"title\":\"x\",\"assigneeUserIds\":%s}", users21) > 0);
  expect_invalid(w, "createTask", "maxItems", args);
  free(args);
  assert_true(asprintf(&args, "{\"title\":\"x\",\"blockedBySlugs\":%s}", blockers51) > 0);
  expect_invalid(w, "createTask", "maxItems", args);
  free(args);
  expect_invalid(w, "createTask", "pattern", "{\"title\":\"x\",\"blockedBySlugs\":[\"T1\"]}");
  expect_invalid(w, "createTask", "pattern", "{\"title\":\"x\",\"parentTaskSlug\":\"x\"}");
  expect_invalid(w, "createTask", "enum", "{\"title\":\"x\",\"priority\":\"p5\"}");
  expect_invalid(w, "createTask", "enum", "{\"title\":\"x\",\"status\":\"in_progress\"}");
  expect_invalid(w, "createTask", "additionalProperties", "{\"title\":\"x\",\"scope\":{\"teamId\":\"a\"}}");
  expect_invalid(w, "createTask", "additionalProperties", "{\"title\":\"x\",\"force\":true}");
  expect_invalid(w, "createTask", "required", "{\"description\":\"no title\"}");
  expect_invalid(w, "createTask", "type", "{\"title\":\"x\",\"autoStart\":\"yes\"}");
}

static void test_create_writes_every_row(void **state) {
  world *w = *state;
  tslug blocker = task(w, w->boss, "{\"title\":\"blocker\"}");
  long tasks = fixture_count(w->f, "tasks"), people = fixture_count(w->f, "task_assignees"),
       blocks = fixture_count(w->f, "task_blocks"), acts = fixture_count(w->f, "activity_log"),
       jobs = fixture_count(w->f, "jobs");
  json_t *result = ok(w, w->boss, "createTask",
                      "{\"title\":\"Write the docs\",\"description\":\"**md**\",\"priority\":\"p1\","
                      "\"labels\":[\"docs\",\"urgent\"],\"assigneeAgentSlugs\":[\"w1-dev\",\"m1-lead\"],"
                      "\"assigneeUserIds\":[\"alice\"],\"blockedBySlugs\":[\"%s\"],"
                      "\"scope\":{\"workId\":\"w1\"}}",
                      blocker.s);
  assert_string_equal(json_string_value(json_object_get(result, "status")), "backlog");
  const char *slug = json_string_value(json_object_get(result, "slug"));
  assert_memory_equal(slug, "T-", 2);
  assert_int_equal(fixture_count(w->f, "tasks"), tasks + 1);
  assert_int_equal(fixture_count(w->f, "task_assignees"), people + 3);
  assert_int_equal(fixture_count(w->f, "task_blocks"), blocks + 1);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  assert_int_equal(fixture_count(w->f, "jobs"), jobs); /* backlog: nothing starts */

  _cleanup_json_ json_t *t = task_row(w, slug);
  assert_string_equal(json_string_value(json_object_get(t, "id")),
                      json_string_value(json_object_get(result, "id")));
  assert_string_equal(json_string_value(json_object_get(t, "priority")), "p1");
  assert_string_equal(json_string_value(json_object_get(t, "labels")), "[\"docs\",\"urgent\"]");
  assert_string_equal(json_string_value(json_object_get(t, "description")), "**md**");
  assert_string_equal(json_string_value(json_object_get(t, "created_by_type")), "agent");
  char id[TG_UUID_LEN + 1];
  assert_string_equal(json_string_value(json_object_get(t, "work_id")), id_of(w, "works", "w1", id));
  assert_string_equal(json_string_value(json_object_get(t, "idea_id")), id_of(w, "ideas", "idea-one", id));
  assert_string_equal(json_string_value(json_object_get(t, "mission_id")), id_of(w, "missions", "m1", id));
  assert_string_equal(json_string_value(json_object_get(t, "created_by_id")), id_of(w, "agents", "boss", id));
  _cleanup_json_ json_t *act = row(w,
                                   "SELECT * FROM activity_log WHERE action_type = 'TASK_CREATED'"
                                   " ORDER BY created_at DESC, id DESC LIMIT 1",
                                   NULL);
  assert_string_equal(json_string_value(json_object_get(act, "work_id")), id_of(w, "works", "w1", id));
  assert_string_equal(json_string_value(json_object_get(act, "mission_id")), id_of(w, "missions", "m1", id));
  _cleanup_json_ json_t *details = json_loads(json_string_value(json_object_get(act, "details")), 0, NULL);
  assert_string_equal(json_string_value(json_object_get(details, "taskSlug")), slug);
  assert_int_equal(json_array_size(json_object_get(details, "blockedBy")), 1);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM task_assignees WHERE task_id = $1 AND role = 'assignee'",
                         json_pack("[O]", json_object_get(t, "id"))),
                   3);
  json_decref(result);

  /* Defaults: p3, no labels, backlog, the caller's own scope. */
  tslug plain = task(w, w->w2dev, "{\"title\":\"plain\"}");
  _cleanup_json_ json_t *p = task_row(w, plain.s);
  assert_string_equal(json_string_value(json_object_get(p, "priority")), "p3");
  assert_string_equal(json_string_value(json_object_get(p, "labels")), "[]");
  assert_string_equal(json_string_value(json_object_get(p, "status")), "backlog");
  assert_string_equal(json_string_value(json_object_get(p, "work_id")), id_of(w, "works", "w2", id));
  assert_string_equal(json_string_value(json_object_get(p, "mission_id")), id_of(w, "missions", "m1", id));
  assert_true(json_is_null(json_object_get(p, "idea_id")));
}

static void test_slugs_count_per_workspace(void **state) {
  world *w = *state;
  tslug a = task(w, w->boss, "{\"title\":\"a\"}"), b = task(w, w->boss, "{\"title\":\"b\"}");
  assert_string_equal(a.s, "T-1");
  assert_string_equal(b.s, "T-2");
  tslug c = task(w, w->stranger, "{\"title\":\"c\"}");
  assert_string_equal(c.s, "T-1");
  tslug d = task(w, w->boss, "{\"title\":\"d\"}");
  assert_string_equal(d.s, "T-3");
}

static void test_scope_default_and_reach(void **state) {
  world *w = *state;
  char id[TG_UUID_LEN + 1];
  tslug mine = task(w, w->w1dev, "{\"title\":\"mine\"}");
  _cleanup_json_ json_t *t = task_row(w, mine.s);
  assert_string_equal(json_string_value(json_object_get(t, "work_id")), id_of(w, "works", "w1", id));
  assert_string_equal(json_string_value(json_object_get(t, "idea_id")), id_of(w, "ideas", "idea-one", id));

  json_t *d = fails(w, w->w1dev, "createTask", "permission_denied",
                    "{\"title\":\"x\",\"scope\":{\"workId\":\"w2\"}}");
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "scope_out_of_reach");
  json_decref(d);
  fails_quietly(w, w->w1dev, "createTask", "permission_denied", "{\"title\":\"x\",\"scope\":{\"missionId\":\"m1\"}}");
  fails_quietly(w, w->m1lead, "createTask", "permission_denied", "{\"title\":\"x\",\"scope\":{\"missionId\":\"m2\"}}");
  fails_quietly(w, w->m1lead, "createTask", "permission_denied", "{\"title\":\"x\",\"scope\":{}}");
  fails_quietly(w, w->i1agent, "createTask", "permission_denied", "{\"title\":\"x\",\"scope\":{\"workId\":\"w2\"}}");
  task(w, w->i1agent, "{\"title\":\"x\",\"scope\":{\"workId\":\"w1\"}}");
  task(w, w->m1lead, "{\"title\":\"x\",\"scope\":{\"workId\":\"w2\"}}");
  task(w, w->m1lead, "{\"title\":\"x\",\"scope\":{\"ideaId\":\"%s\"}}", id_of(w, "ideas", "idea-one", id));
  task(w, w->m1lead, "{\"title\":\"x\",\"scope\":{\"workId\":\"w1\",\"ideaId\":\"idea-one\",\"missionId\":\"m1\"}}");
  task(w, w->boss, "{\"title\":\"x\",\"scope\":{\"missionId\":\"%s\"}}", id_of(w, "missions", "m2", id));
  d = fails(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"scope\":{\"workId\":\"nope\"}}");
  assert_string_equal(json_string_value(json_object_get(json_object_get(d, "scope"), "workId")), "nope");
  json_decref(d);
  d = fails(w, w->boss, "createTask", "validation_failed",
            "{\"title\":\"x\",\"scope\":{\"workId\":\"w3\",\"missionId\":\"m1\"}}");
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "inconsistent_scope");
  json_decref(d);
  fails_quietly(w, w->boss, "createTask", "validation_failed",
                "{\"title\":\"x\",\"scope\":{\"workId\":\"w2\",\"ideaId\":\"idea-one\"}}");
  /* Scopes of another workspace do not exist here. */
  fails_quietly(w, w->stranger, "createTask", "not_found", "{\"title\":\"x\",\"scope\":{\"missionId\":\"m1\"}}");
}

static void expect_out_of_scope(world *w, const char *who, const char *assignee) {
  json_t *d = fails(w, who, "createTask", "permission_denied",
                    "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"%s\"]}", assignee);
  assert_string_equal(json_string_value(json_object_get(d, "outOfScope")), assignee);
  json_decref(d);
}

static void test_cross_scope_assignees(void **state) {
  world *w = *state;
  /* Tenant: anyone of the workspace. */
  task(w, w->boss, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"w3-dev\",\"m1-lead\",\"idle\",\"boss\"]}");
  task(w, w->f->owner, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"w3-dev\",\"i1-agent\"]}");
  /* Mission: its mission, ideas and works; never another mission, nor the tenant. */
  task(w, w->m1lead, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"m1-lead\",\"i1-agent\",\"w1-dev\",\"w2-dev\"]}");
  expect_out_of_scope(w, w->m1lead, "m2-lead");
  expect_out_of_scope(w, w->m1lead, "w3-dev");
  expect_out_of_scope(w, w->m1lead, "boss");
  /* Idea: itself, its mission, its works. */
  task(w, w->i1agent, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"i1-agent\",\"m1-lead\",\"w1-dev\"]}");
  expect_out_of_scope(w, w->i1agent, "w2-dev");
  expect_out_of_scope(w, w->i1agent, "m2-lead");
  /* Work: its work only. */
  task(w, w->w1dev, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  expect_out_of_scope(w, w->w1dev, "w2-dev");
  expect_out_of_scope(w, w->w1dev, "m1-lead");
  expect_out_of_scope(w, w->w1dev, "i1-agent");
  /* One agent out of scope refuses the whole task. */
  json_t *d = fails(w, w->w1dev, "createTask", "permission_denied",
                    "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"w1-dev\",\"w2-dev\"]}");
  assert_string_equal(json_string_value(json_object_get(d, "outOfScope")), "w2-dev");
  json_decref(d);
  /* Unknown, or of another workspace: not_found. */
  d = fails(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"ghost\"]}");
  assert_string_equal(json_string_value(json_object_get(d, "agentSlug")), "ghost");
  json_decref(d);
  fails_quietly(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"stranger\"]}");
  fails_quietly(w, w->stranger, "createTask", "not_found", "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"boss\"]}");
  /* Users by id or username, of this workspace only. */
  _cleanup_json_ json_t *alice = row(w, "SELECT id FROM users WHERE username = 'alice'", NULL);
  task(w, w->w1dev, "{\"title\":\"x\",\"assigneeUserIds\":[\"%s\",\"owner\"]}",
       json_string_value(json_object_get(alice, "id")));
  d = fails(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"assigneeUserIds\":[\"bob\"]}");
  assert_string_equal(json_string_value(json_object_get(d, "userId")), "bob");
  json_decref(d);
  fails_quietly(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"assigneeUserIds\":[\"owner2\"]}");
  /* The operator's assign tool applies the same table to the caller. */
  tslug t = task(w, w->boss, "{\"title\":\"x\",\"scope\":{\"workId\":\"w1\"}}");
  json_decref(ok(w, w->f->owner, "work.task.assign", "{\"taskSlug\":\"%s\",\"agentSlug\":\"w3-dev\"}", t.s));
}

static void test_parent_and_blockers(void **state) {
  world *w = *state;
  tslug parent = task(w, w->m1lead, "{\"title\":\"parent\",\"scope\":{\"workId\":\"w1\"}}");
  tslug child = task(w, w->m1lead, "{\"title\":\"child\",\"parentTaskSlug\":\"%s\"}", parent.s);
  _cleanup_json_ json_t *p = task_row(w, parent.s), *c = task_row(w, child.s);
  assert_string_equal(json_string_value(json_object_get(c, "parent_task_id")),
                      json_string_value(json_object_get(p, "id")));
  /* A child takes its parent's scope, and cannot leave it. */
  assert_string_equal(json_string_value(json_object_get(c, "work_id")),
                      json_string_value(json_object_get(p, "work_id")));
  json_t *d = fails(w, w->m1lead, "createTask", "validation_failed",
                    "{\"title\":\"x\",\"parentTaskSlug\":\"%s\",\"scope\":{\"workId\":\"w2\"}}", parent.s);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "outside_parent_scope");
  json_decref(d);
  d = fails(w, w->m1lead, "createTask", "not_found", "{\"title\":\"x\",\"parentTaskSlug\":\"T-999\"}");
  assert_string_equal(json_string_value(json_object_get(d, "taskSlug")), "T-999");
  json_decref(d);
  /* Tasks out of reach are not found, as parents and as blockers. */
  fails_quietly(w, w->w2dev, "createTask", "not_found",
                "{\"title\":\"x\",\"parentTaskSlug\":\"T-1\"}");
  char *args = NULL;
  assert_true(asprintf(&args, "{\"title\":\"x\",\"blockedBySlugs\":[\"%s\"]}", parent.s) > 0);
  fails_quietly(w, w->m2lead, "createTask", "not_found", args);
  fails_quietly(w, w->w2dev, "createTask", "not_found", args);
  free(args);
  fails_quietly(w, w->boss, "createTask", "not_found", "{\"title\":\"x\",\"blockedBySlugs\":[\"T-1\",\"T-999\"]}");

  /* Sub-tasks nest 64 deep. */
  tslug chain = task(w, w->boss, "{\"title\":\"depth 1\"}");
  for (int depth = 2; depth <= 64; depth++)
    chain = task(w, w->boss, "{\"title\":\"depth %d\",\"parentTaskSlug\":\"%s\"}", depth, chain.s);
  d = fails(w, w->boss, "createTask", "validation_failed",
            "{\"title\":\"depth 65\",\"parentTaskSlug\":\"%s\"}", chain.s);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "too_deep");
  assert_int_equal(json_integer_value(json_object_get(d, "maxDepth")), 64);
  json_decref(d);
}

/* The details of the newest activity row of action (a new object). */
static json_t *last_activity(world *w, const char *action) {
  _cleanup_json_ json_t *newest = row(w,
                                      "SELECT details FROM activity_log WHERE action_type = $1"
                                      " ORDER BY created_at DESC, id DESC LIMIT 1",
                                      json_pack("[s]", action));
  return json_loads(json_string_value(json_object_get(newest, "details")), 0, NULL);
}

static long jobs_of(world *w, const char *kind) {
  return count(w, "SELECT COUNT(*) AS n FROM jobs WHERE kind = $1", json_pack("[s]", kind));
}

static void test_auto_start_dispatch(void **state) {
  world *w = *state;
  /* backlog, or no agent assignee, or autoStart false: nothing is dispatched. */
  task(w, w->boss, "{\"title\":\"x\",\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  task(w, w->boss, "{\"title\":\"x\",\"status\":\"todo\",\"assigneeUserIds\":[\"alice\"]}");
  task(w, w->boss, "{\"title\":\"x\",\"status\":\"todo\",\"autoStart\":false,\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  assert_int_equal(fixture_count(w->f, "jobs"), 0);

  /* todo with agent assignees: one job per agent, in the same transaction. */
  json_t *created = ok(w, w->boss, "createTask",
                       "{\"title\":\"go\",\"status\":\"todo\",\"assigneeAgentSlugs\":[\"w1-dev\",\"w2-dev\"],"
                       "\"assigneeUserIds\":[\"owner\"]}");
  assert_string_equal(json_string_value(json_object_get(created, "status")), "todo");
  const char *slug = json_string_value(json_object_get(created, "slug"));
  const char *task_id = json_string_value(json_object_get(created, "id"));
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
  char id[TG_UUID_LEN + 1], key[200];
  snprintf(key, sizeof key, "agent-task-execute:%s:%s:1", task_id, id_of(w, "agents", "w1-dev", id));
  _cleanup_json_ json_t *job = row(w, "SELECT * FROM jobs WHERE dedupe_key = $1", json_pack("[s]", key));
  assert_string_equal(json_string_value(json_object_get(job, "status")), "queued");
  assert_string_equal(json_string_value(json_object_get(job, "tenant_id")), w->f->tenant_id);
  _cleanup_json_ json_t *payload = json_loads(json_string_value(json_object_get(job, "payload")), 0, NULL);
  assert_string_equal(json_string_value(json_object_get(payload, "taskSlug")), slug);
  assert_string_equal(json_string_value(json_object_get(payload, "agentSlug")), "w1-dev");
  assert_int_equal(json_integer_value(json_object_get(payload, "start")), 1);

  /* The move to in_progress is the same start: deduplicated, not doubled. */
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
  /* A re-start after a block is a new start. */
  move(w, w->boss, slug, "blocked");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 4);
  snprintf(key, sizeof key, "agent-task-execute:%s:%s:2", task_id, id_of(w, "agents", "w2-dev", id));
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM jobs WHERE dedupe_key = $1", json_pack("[s]", key)), 1);
  /* Review and re-open start again too. */
  move(w, w->boss, slug, "in_review");
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 6);
  move(w, w->boss, slug, "done");
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 8);
  _cleanup_json_ json_t *t = task_row(w, slug);
  assert_int_equal(json_integer_value(json_object_get(t, "start_count")), 4);
  assert_false(json_is_null(json_object_get(t, "started_at")));
  assert_false(json_is_null(json_object_get(t, "completed_at")));
  json_decref(created);

  /* A backlog task asked to auto-start starts when it reaches todo, once. */
  tslug later = task(w, w->boss, "{\"title\":\"later\",\"autoStart\":true,\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 8);
  move(w, w->boss, later.s, "todo");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 9);
  move(w, w->boss, later.s, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 9);

  /* A task without auto-start starts its agents when it enters in_progress. */
  tslug manual = task(w, w->boss, "{\"title\":\"manual\",\"status\":\"todo\",\"autoStart\":false,"
                                  "\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  move(w, w->boss, manual.s, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 10);
  /* An agent added to a running task joins its current start. */
  assign(w, manual.s, "agentSlug", "w2-dev", "assignee");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 11);
  assign(w, manual.s, "agentSlug", "m1-lead", "reviewer");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 11);
}

/* An auto-start task with a blocker open starts no agent, which could not move it to
 * in_progress: its last blocker to close starts them. */
static void test_auto_start_waits_for_blockers(void **state) {
  world *w = *state;
  tslug first = task(w, w->boss, "{\"title\":\"first\"}");
  tslug second = task(w, w->boss, "{\"title\":\"second\"}");
  tslug now = task(w, w->boss,
                   "{\"title\":\"now\",\"status\":\"todo\",\"blockedBySlugs\":[\"%s\"],"
                   "\"assigneeAgentSlugs\":[\"w1-dev\"]}",
                   first.s);
  tslug later = task(w, w->boss,
                     "{\"title\":\"later\",\"autoStart\":true,"
                     "\"blockedBySlugs\":[\"%s\",\"%s\"],\"assigneeAgentSlugs\":[\"w2-dev\"]}",
                     first.s, second.s);
  move(w, w->boss, later.s, "todo");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 0);
  /* The first closing releases the task it alone blocked, not the one still blocked. */
  move(w, w->boss, first.s, "cancelled");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 1);
  _cleanup_json_ json_t *job =
      row(w, "SELECT payload FROM jobs WHERE kind = 'agent-task-execute'", NULL);
  _cleanup_json_ json_t *payload =
      json_loads(json_string_value(json_object_get(job, "payload")), 0, NULL);
  assert_string_equal(json_string_value(json_object_get(payload, "taskSlug")), now.s);
  assert_string_equal(json_string_value(json_object_get(payload, "trigger")), "auto_start");
  assert_int_equal(json_integer_value(json_object_get(payload, "start")), 1);
  move(w, w->boss, second.s, "cancelled");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
  /* Moving to in_progress joins the start made then. */
  move(w, w->boss, now.s, "in_progress");
  move(w, w->boss, later.s, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
}

/* An agent paused or archived gives up the runs queued for it while it was active: none may
 * wake it later, and started again it joins the task's next start only. */
static void test_a_stopped_agent_gives_up_its_queued_runs(void **state) {
  world *w = *state;
  tslug t = task(w, w->boss,
                 "{\"title\":\"queued\",\"status\":\"todo\","
                 "\"assigneeAgentSlugs\":[\"w1-dev\",\"w2-dev\"]}");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);
  json_decref(ok(w, w->f->owner, "admin.agent.pause", "{\"agentSlug\":\"w1-dev\"}"));
  assert_int_equal(jobs_of(w, "agent-task-execute"), 1); /* w2-dev's stays */
  char id[TG_UUID_LEN + 1];
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM jobs WHERE agent_id = $1",
                         json_pack("[s]", id_of(w, "agents", "w1-dev", id))),
                   0);
  _cleanup_json_ json_t *said = last_activity(w, "AGENT_PAUSED");
  assert_int_equal(json_integer_value(json_object_get(said, "jobsWithdrawn")), 1);
  /* Started again, it does not resume by itself... */
  json_decref(ok(w, w->f->owner, "admin.agent.start", "{\"agentSlug\":\"w1-dev\"}"));
  assert_int_equal(jobs_of(w, "agent-task-execute"), 1);
  /* ...and joins the task's next start. */
  move(w, w->boss, t.s, "in_progress");
  assert_int_equal(
      count(w, "SELECT COUNT(*) AS n FROM jobs WHERE agent_id = $1", json_pack("[s]", id)), 1);
  /* Archived, the same. */
  json_decref(ok(w, w->f->owner, "admin.agent.archive", "{\"agentSlug\":\"w1-dev\"}"));
  assert_int_equal(
      count(w, "SELECT COUNT(*) AS n FROM jobs WHERE agent_id = $1", json_pack("[s]", id)), 0);
}

static void set_agent_status(world *w, const char *slug, const char *status) {
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE agents SET status = $1 WHERE tenant_id = $2 AND slug = $3",
                              json_pack("[sss]", status, w->f->tenant_id, slug), NULL),
                   0);
}

static json_t *comment(world *w, const char *who, const char *slug, const char *rest);

/* Draft, paused and archived agents can be assigned, but nothing starts them or asks them to
 * reply: they run only once a person starts them. */
static void test_inactive_assignees_wait(void **state) {
  world *w = *state;
  set_agent_status(w, "w3-dev", "draft");
  set_agent_status(w, "idle", "paused");
  set_agent_status(w, "m1-lead", "archived");
  json_t *created = ok(w, w->boss, "createTask",
                       "{\"title\":\"go\",\"status\":\"todo\","
                       "\"assigneeAgentSlugs\":[\"w1-dev\",\"w3-dev\",\"idle\",\"m1-lead\"]}");
  const char *slug = json_string_value(json_object_get(created, "slug"));
  const char *task_id = json_string_value(json_object_get(created, "id"));
  assert_int_equal(jobs_of(w, "agent-task-execute"), 1);
  char id[TG_UUID_LEN + 1], key[200];
  snprintf(key, sizeof key, "agent-task-execute:%s:%s:1", task_id, id_of(w, "agents", "w1-dev", id));
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM jobs WHERE dedupe_key = $1", json_pack("[s]", key)), 1);
  move(w, w->boss, slug, "in_progress");
  move(w, w->boss, slug, "blocked");
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 2);

  json_decref(comment(w, w->w1dev, slug,
                      ",\"mentions\":[{\"type\":\"agent\",\"slug\":\"w3-dev\"},"
                      "{\"type\":\"agent\",\"slug\":\"idle\"},{\"type\":\"agent\",\"slug\":\"m1-lead\"}]"));
  assert_int_equal(jobs_of(w, "agent-chat-reply"), 0);

  /* Once a person starts it, the agent takes part like any other. */
  set_agent_status(w, "w3-dev", "active");
  json_decref(comment(w, w->w1dev, slug, ",\"mentions\":[{\"type\":\"agent\",\"slug\":\"w3-dev\"}]"));
  assert_int_equal(jobs_of(w, "agent-chat-reply"), 1);
  move(w, w->boss, slug, "blocked");
  move(w, w->boss, slug, "in_progress");
  assert_int_equal(jobs_of(w, "agent-task-execute"), 4);
  snprintf(key, sizeof key, "agent-task-execute:%s:%s:3", task_id, id_of(w, "agents", "w3-dev", id));
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM jobs WHERE dedupe_key = $1", json_pack("[s]", key)), 1);
  json_decref(created);
}

static json_t *comment(world *w, const char *who, const char *slug, const char *rest) {
  return ok(w, who, "commentOnTask", "{\"taskSlug\":\"%s\",\"body\":\"hello\"%s}", slug, rest);
}

static void test_comment(void **state) {
  world *w = *state;
  tslug t = task(w, w->boss, "{\"title\":\"talk\",\"scope\":{\"workId\":\"w1\"},"
                             "\"assigneeAgentSlugs\":[\"w1-dev\",\"w2-dev\"]}");
  long msgs = fixture_count(w->f, "task_chat_messages"), acts = fixture_count(w->f, "activity_log");
  json_t *r = comment(w, w->w1dev, t.s, "");
  assert_non_null(json_string_value(json_object_get(r, "messageId")));
  _cleanup_json_ json_t *msg = row(w, "SELECT * FROM task_chat_messages WHERE id = $1",
                                   json_pack("[O]", json_object_get(r, "messageId")));
  char id[TG_UUID_LEN + 1];
  assert_string_equal(json_string_value(json_object_get(msg, "author_id")), id_of(w, "agents", "w1-dev", id));
  assert_string_equal(json_string_value(json_object_get(msg, "body")), "hello");
  json_decref(r);
  assert_int_equal(fixture_count(w->f, "task_chat_messages"), msgs + 1);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_COMMENTED'", NULL), 1);

  /* Bounds. */
  _cleanup_free_ char *b10000 = repeat('b', 10000), *b10001 = repeat('b', 10001);
  json_decref(ok(w, w->w1dev, "commentOnTask", "{\"taskSlug\":\"%s\",\"body\":\"b\"}", t.s));
  json_decref(ok(w, w->w1dev, "commentOnTask", "{\"taskSlug\":\"%s\",\"body\":\"%s\"}", t.s, b10000));
  json_t *d = fails(w, w->w1dev, "commentOnTask", "validation_failed", "{\"taskSlug\":\"%s\",\"body\":\"\"}", t.s);
  assert_string_equal(first_keyword(d), "minLength");
  json_decref(d);
  d = fails(w, w->w1dev, "commentOnTask", "validation_failed", "{\"taskSlug\":\"%s\",\"body\":\"%s\"}", t.s, b10001);
  assert_string_equal(first_keyword(d), "maxLength");
  json_decref(d);
  json_t *many = json_array();
  for (int i = 0; i < 21; i++) json_array_append_new(many, json_pack("{s:s,s:s}", "type", "user", "slug", "owner"));
  char *twenty_one = json_dumps(many, JSON_COMPACT);
  json_array_remove(many, 0);
  char *twenty = json_dumps(many, JSON_COMPACT);
  json_decref(many);
  json_decref(ok(w, w->w1dev, "commentOnTask", "{\"taskSlug\":\"%s\",\"body\":\"b\",\"mentions\":%s}", t.s, twenty));
  d = fails(w, w->w1dev, "commentOnTask", "validation_failed",
            "{\"taskSlug\":\"%s\",\"body\":\"b\",\"mentions\":%s}", t.s, twenty_one);
  assert_string_equal(first_keyword(d), "maxItems");
  json_decref(d);
  free(twenty);
  free(twenty_one);
  d = fails(w, w->w1dev, "commentOnTask", "validation_failed",
            "{\"taskSlug\":\"%s\",\"body\":\"b\",\"mentions\":[{\"type\":\"team\",\"slug\":\"x\"}]}", t.s);
  json_decref(d);

  /* Not on the task but reaching it: permission_denied. Not reaching it: not_found. */
  d = fails(w, w->idle, "commentOnTask", "permission_denied", "{\"taskSlug\":\"%s\",\"body\":\"x\"}", t.s);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "not_on_task");
  json_decref(d);
  char args[200];
  snprintf(args, sizeof args, "{\"taskSlug\":\"%s\",\"body\":\"x\"}", t.s);
  fails_quietly(w, w->f->owner, "commentOnTask", "permission_denied", args);
  fails_quietly(w, w->m1lead, "commentOnTask", "permission_denied", args);
  fails_quietly(w, w->w3dev, "commentOnTask", "not_found", args);
  fails_quietly(w, w->m2lead, "commentOnTask", "not_found", args);
  fails_quietly(w, w->stranger, "commentOnTask", "not_found", args);
  fails_quietly(w, w->w1dev, "commentOnTask", "not_found", "{\"taskSlug\":\"T-999\",\"body\":\"x\"}");
  /* Any role will do, and being on a task reaches it even from another scope. */
  assign(w, t.s, "agentSlug", "m1-lead", "reviewer");
  json_decref(comment(w, w->m1lead, t.s, ""));
  assign(w, t.s, "agentSlug", "w3-dev", "approver");
  json_decref(comment(w, w->w3dev, t.s, ""));
  assign(w, t.s, "username", "owner", "approver");
  json_decref(comment(w, w->f->owner, t.s, ""));

  /* A mention of an agent assignee asks it to reply, once per message. */
  long replies = jobs_of(w, "agent-chat-reply");
  r = comment(w, w->w1dev, t.s,
              ",\"mentions\":[{\"type\":\"agent\",\"slug\":\"w2-dev\"},{\"type\":\"agent\",\"slug\":\"w2-dev\"},"
              "{\"type\":\"agent\",\"slug\":\"m1-lead\"},{\"type\":\"agent\",\"slug\":\"w1-dev\"},"
              "{\"type\":\"user\",\"slug\":\"alice\"}]");
  assert_int_equal(jobs_of(w, "agent-chat-reply"), replies + 1);
  char key[200];
  snprintf(key, sizeof key, "agent-chat-reply:%s:%s", json_string_value(json_object_get(r, "messageId")),
           id_of(w, "agents", "w2-dev", id));
  _cleanup_json_ json_t *job = row(w, "SELECT * FROM jobs WHERE dedupe_key = $1", json_pack("[s]", key));
  _cleanup_json_ json_t *payload = json_loads(json_string_value(json_object_get(job, "payload")), 0, NULL);
  assert_string_equal(json_string_value(json_object_get(payload, "messageId")),
                      json_string_value(json_object_get(r, "messageId")));
  _cleanup_json_ json_t *stored = row(w, "SELECT mentions FROM task_chat_messages WHERE id = $1",
                                      json_pack("[O]", json_object_get(r, "messageId")));
  _cleanup_json_ json_t *mentions = json_loads(json_string_value(json_object_get(stored, "mentions")), 0, NULL);
  assert_int_equal(json_array_size(mentions), 4); /* the repeated mention once */
  json_decref(r);
  /* Another message is another reply. */
  json_decref(comment(w, w->f->owner, t.s, ",\"mentions\":[{\"type\":\"agent\",\"slug\":\"w2-dev\"}]"));
  assert_int_equal(jobs_of(w, "agent-chat-reply"), replies + 2);
  /* Unknown mentions are not_found, so the model can correct them. */
  d = fails(w, w->w1dev, "commentOnTask", "not_found",
            "{\"taskSlug\":\"%s\",\"body\":\"b\",\"mentions\":[{\"type\":\"agent\",\"slug\":\"ghost\"}]}", t.s);
  assert_string_equal(json_string_value(json_object_get(d, "agentSlug")), "ghost");
  json_decref(d);
  fails_quietly(w, w->w1dev, "commentOnTask", "not_found",
                "{\"taskSlug\":\"T-1\",\"body\":\"b\",\"mentions\":[{\"type\":\"agent\",\"slug\":\"stranger\"}]}");
}

/* A new task of boss in status s, reached along legal moves. */
static tslug task_in(world *w, tg_task_status s) {
  static const char *const path[][4] = {
      [TG_TASK_BACKLOG] = {NULL},
      [TG_TASK_TODO] = {NULL},
      [TG_TASK_IN_PROGRESS] = {"in_progress", NULL},
      [TG_TASK_IN_REVIEW] = {"in_progress", "in_review", NULL},
      [TG_TASK_BLOCKED] = {"blocked", NULL},
      [TG_TASK_DONE] = {"in_progress", "done", NULL},
      [TG_TASK_CANCELLED] = {"cancelled", NULL},
  };
  tslug t = task(w, w->boss, "{\"title\":\"walk\",\"status\":\"%s\"}",
                 s == TG_TASK_BACKLOG || s == TG_TASK_CANCELLED ? "backlog" : "todo");
  for (size_t i = 0; path[s][i]; i++) move(w, w->boss, t.s, path[s][i]);
  return t;
}

static void test_transition_table_through_the_tool(void **state) {
  world *w = *state;
  int legal = 0;
  for (unsigned from = 0; from < TG_TASK_STATUS_COUNT; from++) {
    for (unsigned to = 0; to < TG_TASK_STATUS_COUNT; to++) {
      tslug t = task_in(w, (tg_task_status)from);
      const char *to_name = tg_task_status_name((tg_task_status)to);
      if (tg_task_can_transition((tg_task_status)from, (tg_task_status)to)) {
        long acts = count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_UPDATED'", NULL);
        json_t *r = ok(w, w->boss, "transitionTask",
                       "{\"taskSlug\":\"%s\",\"to\":\"%s\",\"reason\":\"walking the table\"}", t.s, to_name);
        assert_string_equal(json_string_value(json_object_get(r, "status")), to_name);
        json_decref(r);
        _cleanup_json_ json_t *row_after = task_row(w, t.s);
        assert_string_equal(json_string_value(json_object_get(row_after, "status")), to_name);
        assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_UPDATED'", NULL),
                         acts + 1);
        legal++;
        continue;
      }
      json_t *d = fails(w, w->boss, "transitionTask", "validation_failed",
                        "{\"taskSlug\":\"%s\",\"to\":\"%s\"}", t.s, to_name);
      assert_string_equal(json_string_value(json_object_get(d, "from")), tg_task_status_name((tg_task_status)from));
      assert_string_equal(json_string_value(json_object_get(d, "to")), to_name);
      json_t *allowed = json_object_get(d, "allowed");
      unsigned set = 0;
      size_t i;
      json_t *name;
      json_array_foreach(allowed, i, name) {
        tg_task_status s;
        assert_true(tg_task_status_parse(json_string_value(name), &s));
        set |= 1u << s;
      }
      assert_int_equal(set, tg_task_targets((tg_task_status)from));
      json_decref(d);
    }
  }
  assert_int_equal(legal, 17);
  /* Each legal move's reason is kept in its activity row. */
  assert_int_equal(count(w,
                         "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_UPDATED'"
                         " AND details LIKE '%\"reason\":\"walking the table\"%'",
                         NULL),
                   17);
  _cleanup_free_ char *r1000 = repeat('r', 1000), *r1001 = repeat('r', 1001);
  tslug t = task_in(w, TG_TASK_BACKLOG);
  json_decref(ok(w, w->boss, "transitionTask", "{\"taskSlug\":\"%s\",\"to\":\"todo\",\"reason\":\"%s\"}", t.s, r1000));
  json_t *d = fails(w, w->boss, "transitionTask", "validation_failed",
                    "{\"taskSlug\":\"%s\",\"to\":\"in_progress\",\"reason\":\"%s\"}", t.s, r1001);
  assert_string_equal(first_keyword(d), "maxLength");
  json_decref(d);
  fails_quietly(w, w->boss, "transitionTask", "validation_failed", "{\"taskSlug\":\"T-1\",\"to\":\"finished\"}");
  fails_quietly(w, w->boss, "transitionTask", "validation_failed", "{\"taskSlug\":\"T-1\",\"to\":\"done\",\"force\":true}");
  /* Without canAssignTasks: refused at the gate. */
  fails_quietly(w, w->idle, "transitionTask", "permission_denied", "{\"taskSlug\":\"T-1\",\"to\":\"todo\"}");
}

static void test_approvals_before_done(void **state) {
  world *w = *state;
  tslug t = task(w, w->boss, "{\"title\":\"ship\",\"status\":\"todo\",\"scope\":{\"workId\":\"w1\"}}");
  assign(w, t.s, "username", "alice", "approver");
  assign(w, t.s, "username", "owner", "approver");
  assign(w, t.s, "agentSlug", "w1-dev", "approver");
  assign(w, t.s, "username", "alice", "reviewer"); /* reviewers do not gate */
  move(w, w->boss, t.s, "in_progress");
  json_t *d = fails(w, w->boss, "transitionTask", "precondition_failed", "{\"taskSlug\":\"%s\",\"to\":\"done\"}", t.s);
  json_t *pending = json_object_get(d, "pendingApprovers");
  assert_int_equal(json_array_size(pending), 3);
  assert_string_equal(json_string_value(json_object_get(json_array_get(pending, 0), "name")), "w1-dev");
  assert_string_equal(json_string_value(json_object_get(json_array_get(pending, 1), "name")), "alice");
  assert_string_equal(json_string_value(json_object_get(json_array_get(pending, 2), "name")), "owner");
  json_decref(d);

  long acts = count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_APPROVED'", NULL);
  json_t *r = ok(w, w->f->owner, "work.task.approve", "{\"taskSlug\":\"%s\",\"username\":\"owner\"}", t.s);
  assert_true(json_is_true(json_object_get(r, "changed")));
  assert_int_equal(json_array_size(json_object_get(r, "pendingApprovers")), 2);
  json_decref(r);
  r = ok(w, w->f->owner, "work.task.approve", "{\"taskSlug\":\"%s\",\"username\":\"owner\"}", t.s);
  assert_false(json_is_true(json_object_get(r, "changed")));
  json_decref(r);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'TASK_APPROVED'", NULL),
                   acts + 1);
  d = fails(w, w->boss, "transitionTask", "precondition_failed", "{\"taskSlug\":\"%s\",\"to\":\"done\"}", t.s);
  assert_int_equal(json_array_size(json_object_get(d, "pendingApprovers")), 2);
  json_decref(d);
  /* In review, the same gate. */
  move(w, w->boss, t.s, "in_review");
  fails_quietly(w, w->boss, "transitionTask", "precondition_failed", "{\"taskSlug\":\"T-1\",\"to\":\"done\"}");

  /* Only approvers approve; unknown people are not found; members may not record approvals. */
  d = fails(w, w->f->owner, "work.task.approve", "precondition_failed",
            "{\"taskSlug\":\"%s\",\"agentSlug\":\"m1-lead\"}", t.s);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "not_an_approver");
  json_decref(d);
  fails_quietly(w, w->f->owner, "work.task.approve", "not_found", "{\"taskSlug\":\"T-1\",\"username\":\"bob\"}");
  fails_quietly(w, w->f->owner, "work.task.approve", "not_found", "{\"taskSlug\":\"T-99\",\"username\":\"owner\"}");
  fails_quietly(w, w->f->owner, "work.task.approve", "validation_failed",
                "{\"taskSlug\":\"T-1\",\"username\":\"owner\",\"agentSlug\":\"w1-dev\"}");
  d = fails(w, w->alice, "work.task.approve", "permission_denied", "{\"taskSlug\":\"%s\",\"username\":\"alice\"}", t.s);
  assert_string_equal(json_string_value(json_object_get(d, "missingPermission")), "tasks.approve");
  json_decref(d);

  json_decref(ok(w, w->f->owner, "work.task.approve", "{\"taskSlug\":\"%s\",\"username\":\"alice\"}", t.s));
  /* An agent allowed to approve (on the api surface) gives its own approval only: not a
   * person's, nor another agent's. Refused, with nothing written. */
  json_decref(ok(w, w->f->owner, "admin.grant.add",
                 "{\"agentSlug\":\"w1-dev\",\"permission\":\"tasks.approve\"}"));
  static const char *const others[] = {"\"username\":\"alice\"", "\"agentSlug\":\"m1-lead\""};
  for (size_t i = 0; i < 2; i++) {
    _cleanup_free_ char *before = domain_snapshot(w->f);
    char args[160];
    snprintf(args, sizeof args, "{\"taskSlug\":\"%s\",%s}", t.s, others[i]);
    tg_call_result res;
    assert_int_equal(
        fixture_call(w->f, w->w1dev, TG_SURFACE_API, "work.task.approve", args, NULL, &res),
        TG_E_TOOL);
    assert_string_equal(fixture_code(&res), "permission_denied");
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(res.value, "error"), "details"), "reason")),
        "not_the_approver");
    tg_call_result_done(&res);
    _cleanup_free_ char *after = domain_snapshot(w->f);
    assert_string_equal(before, after);
  }
  char own[160];
  snprintf(own, sizeof own, "{\"taskSlug\":\"%s\",\"agentSlug\":\"w1-dev\"}", t.s);
  tg_call_result res;
  assert_int_equal(
      fixture_call(w->f, w->w1dev, TG_SURFACE_API, "work.task.approve", own, NULL, &res), 0);
  tg_call_result_done(&res);
  move(w, w->boss, t.s, "done");
  /* Re-opened, it is work to approve again: its next done waits for every approver anew. */
  move(w, w->boss, t.s, "in_progress");
  _cleanup_json_ json_t *reopened = last_activity(w, "TASK_UPDATED");
  assert_int_equal(json_integer_value(json_object_get(reopened, "approvalsWithdrawn")), 3);
  d = fails(w, w->boss, "transitionTask", "precondition_failed",
            "{\"taskSlug\":\"%s\",\"to\":\"done\"}", t.s);
  assert_int_equal(json_array_size(json_object_get(d, "pendingApprovers")), 3);
  json_decref(d);
  /* A task without approvers needs none. */
  tslug free_task = task_in(w, TG_TASK_IN_PROGRESS);
  move(w, w->boss, free_task.s, "done");
}

static void test_blockers_gate_and_release(void **state) {
  world *w = *state;
  tslug b1 = task(w, w->boss, "{\"title\":\"first\",\"status\":\"todo\"}");
  tslug b2 = task(w, w->boss, "{\"title\":\"second\",\"status\":\"todo\"}");
  tslug t = task(w, w->boss, "{\"title\":\"waits\",\"status\":\"todo\",\"blockedBySlugs\":[\"%s\",\"%s\"]}",
                 b1.s, b2.s);
  json_t *d = fails(w, w->boss, "transitionTask", "precondition_failed",
                    "{\"taskSlug\":\"%s\",\"to\":\"in_progress\"}", t.s);
  json_t *open = json_object_get(d, "openBlockers");
  assert_int_equal(json_array_size(open), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(open, 0), "slug")), b1.s);
  json_decref(d);
  move(w, w->boss, t.s, "blocked");
  move(w, w->boss, b1.s, "cancelled");
  _cleanup_json_ json_t *still = task_row(w, t.s);
  assert_string_equal(json_string_value(json_object_get(still, "status")), "blocked");
  assert_string_equal(json_string_value(json_object_get(still, "previous_status")), "todo");
  move(w, w->boss, b2.s, "in_progress");
  move(w, w->boss, b2.s, "done"); /* the last open blocker: back to todo */
  _cleanup_json_ json_t *released = task_row(w, t.s);
  assert_string_equal(json_string_value(json_object_get(released, "status")), "todo");
  assert_true(json_is_null(json_object_get(released, "previous_status")));
  _cleanup_json_ json_t *details = last_activity(w, "TASK_UPDATED");
  assert_string_equal(json_string_value(json_object_get(details, "unblockedBy")), b2.s);
  assert_string_equal(json_string_value(json_object_get(details, "taskSlug")), t.s);
  move(w, w->boss, t.s, "in_progress");

  /* Back to in_progress, with a new start, when that is where it was blocked. */
  tslug b3 = task(w, w->boss, "{\"title\":\"third\",\"status\":\"todo\"}");
  tslug u = task(w, w->boss, "{\"title\":\"runs\",\"status\":\"todo\",\"blockedBySlugs\":[\"%s\"],"
                             "\"assigneeAgentSlugs\":[\"w1-dev\"]}",
                 b3.s);
  long jobs = jobs_of(w, "agent-task-execute");
  move(w, w->boss, b3.s, "in_progress");
  move(w, w->boss, b3.s, "done");
  move(w, w->boss, u.s, "in_progress");
  move(w, w->boss, u.s, "blocked");
  move(w, w->boss, b3.s, "in_progress"); /* re-opened: open again */
  move(w, w->boss, b3.s, "cancelled");
  _cleanup_json_ json_t *back = task_row(w, u.s);
  assert_string_equal(json_string_value(json_object_get(back, "status")), "in_progress");
  assert_int_equal(json_integer_value(json_object_get(back, "start_count")), 2);
  /* Its auto-start, made as b3 first closed, was the first start; the return the second. */
  assert_int_equal(jobs_of(w, "agent-task-execute"), jobs + 2);
  /* done is gated by blockers too. */
  tslug b4 = task(w, w->boss, "{\"title\":\"fourth\"}");
  tslug x = task(w, w->boss, "{\"title\":\"x\",\"status\":\"todo\",\"blockedBySlugs\":[\"%s\"]}", b4.s);
  move(w, w->boss, b4.s, "todo");
  move(w, w->boss, b4.s, "in_progress");
  move(w, w->boss, b4.s, "done");
  move(w, w->boss, x.s, "in_progress");
  move(w, w->boss, b4.s, "in_progress"); /* re-opened */
  d = fails(w, w->boss, "transitionTask", "precondition_failed", "{\"taskSlug\":\"%s\",\"to\":\"done\"}", x.s);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(d, "openBlockers"), 0), "slug")),
                      b4.s);
  json_decref(d);
  move(w, w->boss, x.s, "cancelled"); /* cancelling is never gated */
}

static void test_mission_isolation(void **state) {
  world *w = *state;
  tslug t1 = task(w, w->m1lead, "{\"title\":\"m1 work\"}");
  tslug t2 = task(w, w->m2lead, "{\"title\":\"m2 work\"}");
  char args[200];
  snprintf(args, sizeof args, "{\"taskSlug\":\"%s\",\"to\":\"todo\"}", t1.s);
  json_t *d = fails(w, w->m2lead, "transitionTask", "not_found", "%s", args);
  assert_string_equal(json_string_value(json_object_get(d, "taskSlug")), t1.s);
  json_decref(d);
  fails_quietly(w, w->w3dev, "transitionTask", "permission_denied", args); /* no grant: the gate first */
  fails_quietly(w, w->w1dev, "transitionTask", "not_found", args);          /* the mission is wider */
  move(w, w->m1lead, t1.s, "todo");
  move(w, w->boss, t2.s, "todo");
  fails_quietly(w, w->m1lead, "transitionTask", "validation_failed", "{\"taskSlug\":\"T-1\",\"to\":\"todo\"}");
  fails_quietly(w, w->i1agent, "transitionTask", "not_found", "{\"taskSlug\":\"T-1\",\"to\":\"cancelled\"}");

  /* Lists show each caller what it reaches. */
  json_decref(ok(w, w->f->owner, "admin.grant.add", "{\"agentSlug\":\"m2-lead\",\"permission\":\"tasks.read\"}"));
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->m2lead, TG_SURFACE_API, "work.task.list", "{}", NULL, &res), 0);
  json_t *tasks = json_object_get(res.value, "tasks");
  assert_int_equal(json_array_size(tasks), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(tasks, 0), "slug")), t2.s);
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->m2lead, TG_SURFACE_API, "work.task.show",
                                "{\"taskSlug\":\"T-1\"}", NULL, &res),
                   TG_E_TOOL);
  assert_string_equal(fixture_code(&res), "not_found");
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->m2lead, TG_SURFACE_API, "work.mission.list", "{}", NULL, &res),
                   TG_E_TOOL); /* missions.read not granted */
  tg_call_result_done(&res);
  json_decref(ok(w, w->f->owner, "admin.grant.add", "{\"agentSlug\":\"m2-lead\",\"permission\":\"missions.read\"}"));
  assert_int_equal(fixture_call(w->f, w->m2lead, TG_SURFACE_API, "work.mission.list", "{}", NULL, &res), 0);
  json_t *missions = json_object_get(res.value, "missions");
  assert_int_equal(json_array_size(missions), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(missions, 0), "slug")), "m2");
  tg_call_result_done(&res);
  json_t *all = ok(w, w->f->owner, "work.task.list", "{}");
  assert_int_equal(json_array_size(json_object_get(all, "tasks")), 2);
  json_decref(all);
  /* Below a mission: an idea agent sees its idea and its works, a work agent its work. */
  json_decref(ok(w, w->f->owner, "admin.grant.add", "{\"agentSlug\":\"i1-agent\",\"permission\":\"missions.read\"}"));
  json_decref(ok(w, w->f->owner, "admin.grant.add", "{\"agentSlug\":\"w1-dev\",\"permission\":\"missions.read\"}"));
  json_decref(ok(w, w->f->owner, "admin.grant.add", "{\"agentSlug\":\"w1-dev\",\"permission\":\"tasks.read\"}"));
  assert_int_equal(fixture_call(w->f, w->i1agent, TG_SURFACE_API, "work.mission.list", "{}", NULL, &res), 0);
  json_t *m1 = json_array_get(json_object_get(res.value, "missions"), 0);
  assert_int_equal(json_array_size(json_object_get(res.value, "missions")), 1);
  assert_int_equal(json_integer_value(json_object_get(m1, "ideaCount")), 1);
  assert_int_equal(json_integer_value(json_object_get(m1, "workCount")), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(m1, "works"), 0), "slug")), "w1");
  tg_call_result_done(&res);
  assert_int_equal(fixture_call(w->f, w->w1dev, TG_SURFACE_API, "work.mission.list", "{}", NULL, &res), 0);
  m1 = json_array_get(json_object_get(res.value, "missions"), 0);
  assert_int_equal(json_array_size(json_object_get(m1, "ideas")), 0);
  assert_int_equal(json_integer_value(json_object_get(m1, "workCount")), 1);
  tg_call_result_done(&res);
  /* Being on a task shows it even outside one's scope. */
  assert_int_equal(fixture_call(w->f, w->w1dev, TG_SURFACE_API, "work.task.list", "{}", NULL, &res), 0);
  assert_int_equal(json_array_size(json_object_get(res.value, "tasks")), 0);
  tg_call_result_done(&res);
  assign(w, t2.s, "agentSlug", "w1-dev", "reviewer");
  assert_int_equal(fixture_call(w->f, w->w1dev, TG_SURFACE_API, "work.task.list", "{}", NULL, &res), 0);
  assert_int_equal(json_array_size(json_object_get(res.value, "tasks")), 1);
  tg_call_result_done(&res);
}

/* A task holds at most 100 participants (each person in each role counts once). */
static void test_participants_are_bounded(void **state) {
  world *w = *state;
  tslug t = task(w, w->boss, "{\"title\":\"crowded\"}");
  static const char *const roles[] = {"assignee", "reviewer", "approver"};
  int added = 0;
  for (int i = 0; added < 100; i++) {
    char slug[32], args[64], principal[TG_UUID_LEN + 1];
    snprintf(slug, sizeof slug, "crowd-%d", i);
    snprintf(args, sizeof args, "{\"slug\":\"%s\"}", slug);
    fixture_agent(w->f, args, principal);
    for (int k = 0; k < 3 && added < 100; k++, added++)
      json_decref(ok(w, w->f->owner, "work.task.assign",
                     "{\"taskSlug\":\"%s\",\"agentSlug\":\"%s\",\"role\":\"%s\"}", t.s, slug,
                     roles[k]));
  }
  json_t *d = fails(w, w->f->owner, "work.task.assign", "precondition_failed",
                    "{\"taskSlug\":\"%s\",\"agentSlug\":\"boss\",\"role\":\"reviewer\"}", t.s);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "too_many_participants");
  json_decref(d);
}

static void test_workspace_isolation(void **state) {
  world *w = *state;
  tslug mine = task(w, w->boss, "{\"title\":\"ours\"}");
  tslug second = task(w, w->boss, "{\"title\":\"ours too\"}");
  tslug theirs = task(w, w->stranger, "{\"title\":\"theirs\"}");
  assert_string_equal(mine.s, theirs.s); /* T-1 in each workspace */
  /* T-1 means each workspace's own task. */
  move(w, w->stranger, theirs.s, "todo");
  _cleanup_json_ json_t *ours = task_row(w, mine.s);
  assert_string_equal(json_string_value(json_object_get(ours, "status")), "backlog");
  json_t *d = fails(w, w->stranger, "transitionTask", "not_found", "{\"taskSlug\":\"%s\",\"to\":\"todo\"}", second.s);
  json_decref(d);
  fails_quietly(w, w->stranger, "commentOnTask", "not_found", "{\"taskSlug\":\"T-2\",\"body\":\"hi\"}");
  fails_quietly(w, w->stranger, "createTask", "not_found", "{\"title\":\"x\",\"blockedBySlugs\":[\"T-2\"]}");
  fails_quietly(w, w->stranger, "createTask", "not_found", "{\"title\":\"x\",\"parentTaskSlug\":\"T-2\"}");
  fails_quietly(w, w->other_owner, "work.task.show", "not_found", "{\"taskSlug\":\"T-2\"}");
  fails_quietly(w, w->other_owner, "work.task.assign", "not_found", "{\"taskSlug\":\"T-1\",\"agentSlug\":\"boss\"}");
  fails_quietly(w, w->f->owner, "work.task.assign", "not_found", "{\"taskSlug\":\"T-1\",\"agentSlug\":\"stranger\"}");
  json_t *list = ok(w, w->other_owner, "work.task.list", "{}");
  assert_int_equal(json_array_size(json_object_get(list, "tasks")), 1);
  json_decref(list);
  list = ok(w, w->other_owner, "work.mission.list", "{}");
  assert_int_equal(json_array_size(json_object_get(list, "missions")), 0);
  json_decref(list);
}

static void test_operator_tools(void **state) {
  world *w = *state;
  json_t *d = fails(w, w->f->owner, "work.mission.create", "precondition_failed", "{\"slug\":\"m1\",\"title\":\"again\"}");
  assert_string_equal(json_string_value(json_object_get(d, "slug")), "m1");
  json_decref(d);
  fails_quietly(w, w->f->owner, "work.mission.create", "validation_failed", "{\"slug\":\"Bad Slug\",\"title\":\"x\"}");
  fails_quietly(w, w->f->owner, "work.mission.create", "validation_failed", "{\"slug\":\"m9\",\"title\":\"x\",\"capCents\":-1}");
  json_t *m = ok(w, w->f->owner, "work.mission.create",
                 "{\"slug\":\"m3\",\"title\":\"Three\",\"description\":\"d\",\"capCents\":500}");
  assert_non_null(json_string_value(json_object_get(m, "missionId")));
  json_decref(m);
  assert_int_equal(count(w, "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'MISSION_CREATED'", NULL), 3);
  /* Idea slugs come from titles and never collide. */
  json_t *i = ok(w, w->f->owner, "work.idea.create", "{\"missionSlug\":\"m3\",\"title\":\"Idea  One!\"}");
  assert_string_equal(json_string_value(json_object_get(i, "slug")), "idea-one-2");
  json_decref(i);
  i = ok(w, w->f->owner, "work.idea.create", "{\"missionSlug\":\"m3\",\"title\":\"Idea one\"}");
  assert_string_equal(json_string_value(json_object_get(i, "slug")), "idea-one-3");
  json_decref(i);
  i = ok(w, w->f->owner, "work.idea.create", "{\"missionSlug\":\"m3\",\"title\":\"¿¡!\"}");
  assert_string_equal(json_string_value(json_object_get(i, "slug")), "idea");
  json_decref(i);
  fails_quietly(w, w->f->owner, "work.idea.create", "not_found", "{\"missionSlug\":\"nope\",\"title\":\"x\"}");
  fails_quietly(w, w->f->owner, "work.idea.create", "validation_failed", "{\"missionSlug\":\"m3\",\"title\":\"\"}");
  /* Works: unique slugs, their idea in their mission. */
  fails_quietly(w, w->f->owner, "work.work.create", "precondition_failed", "{\"slug\":\"w1\",\"missionSlug\":\"m1\"}");
  d = fails(w, w->f->owner, "work.work.create", "validation_failed",
            "{\"slug\":\"w9\",\"missionSlug\":\"m2\",\"ideaSlug\":\"idea-one\"}");
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "idea_of_another_mission");
  json_decref(d);
  fails_quietly(w, w->f->owner, "work.work.create", "not_found", "{\"slug\":\"w9\",\"missionSlug\":\"m9\"}");
  fails_quietly(w, w->f->owner, "work.work.create", "not_found", "{\"slug\":\"w9\",\"missionSlug\":\"m1\",\"ideaSlug\":\"zz\"}");
  json_t *wk = ok(w, w->f->owner, "work.work.create", "{\"slug\":\"w9\",\"missionSlug\":\"m3\",\"title\":\"Nine\"}");
  json_decref(wk);
  /* Members create nothing here (missions.manage). */
  fails_quietly(w, w->alice, "work.mission.create", "permission_denied", "{\"slug\":\"m8\",\"title\":\"x\"}");

  json_t *list = ok(w, w->f->owner, "work.mission.list", "{}");
  json_t *missions = json_object_get(list, "missions");
  assert_int_equal(json_array_size(missions), 3);
  json_t *m1 = json_array_get(missions, 0), *m3 = json_array_get(missions, 2);
  assert_string_equal(json_string_value(json_object_get(m1, "slug")), "m1");
  assert_int_equal(json_integer_value(json_object_get(m1, "ideaCount")), 1);
  assert_int_equal(json_integer_value(json_object_get(m1, "workCount")), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(m1, "works"), 0), "idea")),
                      "idea-one");
  assert_int_equal(json_integer_value(json_object_get(m3, "capCents")), 500);
  assert_int_equal(json_integer_value(json_object_get(m3, "ideaCount")), 3);
  json_decref(list);
  list = ok(w, w->f->owner, "work.mission.list", "{\"limit\":1}");
  assert_true(json_is_true(json_object_get(list, "truncated")));
  assert_int_equal(json_array_size(json_object_get(list, "missions")), 1);
  json_decref(list);

  /* Task list: filters, newest first, bounded. */
  tslug a = task(w, w->boss, "{\"title\":\"a\",\"scope\":{\"workId\":\"w1\"},\"assigneeAgentSlugs\":[\"w1-dev\"]}");
  tslug b = task(w, w->boss, "{\"title\":\"b\",\"status\":\"todo\",\"scope\":{\"missionId\":\"m2\"}}");
  list = ok(w, w->f->owner, "work.task.list", "{}");
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(list, "tasks"), 0), "slug")), b.s);
  assert_false(json_is_true(json_object_get(list, "truncated")));
  json_decref(list);
  list = ok(w, w->f->owner, "work.task.list", "{\"limit\":1}");
  assert_true(json_is_true(json_object_get(list, "truncated")));
  json_decref(list);
  list = ok(w, w->f->owner, "work.task.list", "{\"status\":\"todo\"}");
  assert_int_equal(json_array_size(json_object_get(list, "tasks")), 1);
  json_decref(list);
  list = ok(w, w->f->owner, "work.task.list", "{\"missionSlug\":\"m1\",\"workSlug\":\"w1\",\"assigneeAgentSlug\":\"w1-dev\"}");
  assert_int_equal(json_array_size(json_object_get(list, "tasks")), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(list, "tasks"), 0), "work")), "w1");
  json_decref(list);
  list = ok(w, w->f->owner, "work.task.list", "{\"missionSlug\":\"m2\"}");
  assert_int_equal(json_array_size(json_object_get(list, "tasks")), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(list, "tasks"), 0), "slug")), b.s);
  json_decref(list);
  list = ok(w, w->f->owner, "work.task.list", "{\"assigneeAgentSlug\":\"w2-dev\"}");
  assert_int_equal(json_array_size(json_object_get(list, "tasks")), 0); /* exists, on no task */
  json_decref(list);
  /* A filter naming nothing in the workspace (a typo, another workspace's agent) is not_found,
   * not an empty list. */
  d = fails(w, w->f->owner, "work.task.list", "not_found", "{\"missionSlug\":\"nope\"}");
  assert_string_equal(json_string_value(json_object_get(d, "missionSlug")), "nope");
  json_decref(d);
  d = fails(w, w->f->owner, "work.task.list", "not_found", "{\"missionSlug\":\"m1\",\"workSlug\":\"nope\"}");
  assert_string_equal(json_string_value(json_object_get(d, "workSlug")), "nope");
  json_decref(d);
  d = fails(w, w->f->owner, "work.task.list", "not_found", "{\"assigneeAgentSlug\":\"nobody\"}");
  assert_string_equal(json_string_value(json_object_get(d, "agentSlug")), "nobody");
  json_decref(d);
  fails_quietly(w, w->f->owner, "work.task.list", "not_found", "{\"assigneeAgentSlug\":\"stranger\"}");
  list = ok(w, w->f->owner, "work.mission.list", "{\"missionSlug\":\"m3\"}");
  assert_int_equal(json_array_size(json_object_get(list, "missions")), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(list, "missions"), 0), "slug")), "m3");
  json_decref(list);
  d = fails(w, w->f->owner, "work.mission.list", "not_found", "{\"missionSlug\":\"nope\"}");
  assert_string_equal(json_string_value(json_object_get(d, "missionSlug")), "nope");
  json_decref(d);
  fails_quietly(w, w->f->owner, "work.task.list", "validation_failed", "{\"limit\":101}");
  fails_quietly(w, w->f->owner, "work.task.list", "validation_failed", "{\"limit\":0}");

  /* Task show: everything about one task. */
  tslug c = task(w, w->boss, "{\"title\":\"c\",\"description\":\"the body\",\"blockedBySlugs\":[\"%s\"],"
                             "\"assigneeAgentSlugs\":[\"w1-dev\"],\"labels\":[\"x\"]}",
                 a.s);
  assign(w, c.s, "username", "owner", "approver");
  json_decref(ok(w, w->f->owner, "work.task.approve", "{\"taskSlug\":\"%s\",\"username\":\"owner\"}", c.s));
  json_decref(comment(w, w->w1dev, c.s, ",\"mentions\":[{\"type\":\"user\",\"slug\":\"owner\"}]"));
  json_t *show = ok(w, w->f->owner, "work.task.show", "{\"taskSlug\":\"%s\"}", c.s);
  json_t *t = json_object_get(show, "task");
  assert_string_equal(json_string_value(json_object_get(t, "description")), "the body");
  assert_string_equal(json_string_value(json_array_get(json_object_get(t, "labels"), 0)), "x");
  assert_string_equal(json_string_value(json_object_get(json_object_get(t, "createdBy"), "name")), "boss");
  json_t *people = json_object_get(show, "assignees");
  assert_int_equal(json_array_size(people), 2);
  json_t *approver = json_array_get(people, 1);
  assert_string_equal(json_string_value(json_object_get(approver, "role")), "approver");
  assert_true(json_is_string(json_object_get(approver, "approvedAt")));
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(show, "blockedBy"), 0), "slug")), a.s);
  json_t *chat = json_object_get(show, "chat");
  assert_int_equal(json_array_size(chat), 1);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(chat, 0), "author"), "name")),
                      "w1-dev");
  json_decref(show);
  show = ok(w, w->f->owner, "work.task.show", "{\"taskSlug\":\"%s\"}", a.s);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(show, "blocks"), 0), "slug")), c.s);
  json_decref(show);
  fails_quietly(w, w->f->owner, "work.task.show", "not_found", "{\"taskSlug\":\"T-404\"}");
}

/* The aliases of this provider's tools among the names an agent is offered. */
static json_t *work_aliases_offered(world *w, const char *who) {
  json_t *list = fixture_offered(w->f, who, TG_SURFACE_AGENT);
  json_t *names = json_array();
  size_t i;
  json_t *tool;
  json_array_foreach(list, i, tool) {
    const tg_tool *t = tg_registry_find(w->f->registry, json_string_value(json_object_get(tool, "canonicalName")));
    if (t && strcmp(t->provider->name, "work") == 0) json_array_append(names, json_object_get(tool, "name"));
  }
  json_decref(list);
  return names;
}

static void test_catalog_naming_profile(void **state) {
  world *w = *state;
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE tenants SET naming_profile = 'catalog' WHERE id = $1",
                              json_pack("[s]", w->f->tenant_id), NULL),
                   0);
  _cleanup_json_ json_t *granted = work_aliases_offered(w, w->boss);
  _cleanup_json_ json_t *want = json_pack("[sss]", "createTask", "commentOnTask", "transitionTask");
  if (!json_equal(granted, want)) fail_msg("offered %s", json_dumps(granted, 0));
  _cleanup_json_ json_t *plain = work_aliases_offered(w, w->idle);
  _cleanup_json_ json_t *want_plain = json_pack("[s]", "commentOnTask");
  if (!json_equal(plain, want_plain)) fail_msg("offered %s", json_dumps(plain, 0));
  /* The seed's names are what this workspace calls them by. */
  tslug t = task(w, w->boss, "{\"title\":\"named\"}");
  json_decref(ok(w, w->boss, "transitionTask", "{\"taskSlug\":\"%s\",\"to\":\"todo\"}", t.s));
  json_decref(ok(w, w->boss, "work_task_transition", "{\"taskSlug\":\"%s\",\"to\":\"cancelled\"}", t.s));
}

/* Every statement of a task call can fail; each failure leaves every row as it was. */
static void fail_at_every_step(world *w, const char *who, const char *tool, const char *args) {
  _cleanup_free_ char *before = domain_snapshot(w->f);
  for (int n = 1;; n++) {
    assert_true(n < 200);
    tg_db_fail_after(w->f->db, n);
    tg_call_result res;
    int r = fixture_call(w->f, who, is_user(w, who) ? TG_SURFACE_API : TG_SURFACE_AGENT, tool, args,
                         NULL, &res);
    tg_db_fail_after(w->f->db, 0);
    if (r == TG_OK) {
      tg_call_result_done(&res);
      assert_true(n > 5);
      return;
    }
    assert_string_equal(fixture_code(&res), "internal_error");
    tg_call_result_done(&res);
    _cleanup_free_ char *after = domain_snapshot(w->f);
    if (strcmp(before, after) != 0) fail_msg("%s failing at statement %d wrote", tool, n);
  }
}

static void test_failures_roll_back(void **state) {
  world *w = *state;
  tslug blocker = task(w, w->boss, "{\"title\":\"blocker\",\"status\":\"todo\"}");
  char args[400];
  snprintf(args, sizeof args,
           "{\"title\":\"atomic\",\"status\":\"todo\",\"assigneeAgentSlugs\":[\"w1-dev\",\"w2-dev\"],"
           "\"assigneeUserIds\":[\"alice\"],\"blockedBySlugs\":[\"%s\"]}",
           blocker.s);
  fail_at_every_step(w, w->boss, "createTask", args);
  move(w, w->boss, "T-2", "blocked");
  move(w, w->boss, blocker.s, "in_progress");
  fail_at_every_step(w, w->boss, "transitionTask", "{\"taskSlug\":\"T-1\",\"to\":\"done\"}");
  _cleanup_json_ json_t *released = task_row(w, "T-2");
  assert_string_equal(json_string_value(json_object_get(released, "status")), "todo");
  fail_at_every_step(w, w->w1dev, "commentOnTask",
                     "{\"taskSlug\":\"T-2\",\"body\":\"b\",\"mentions\":[{\"type\":\"agent\",\"slug\":\"w2-dev\"}]}");
  assert_int_equal(jobs_of(w, "agent-chat-reply"), 1);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_create_bounds),
      T(test_create_writes_every_row),
      T(test_slugs_count_per_workspace),
      T(test_scope_default_and_reach),
      T(test_cross_scope_assignees),
      T(test_parent_and_blockers),
      T(test_auto_start_dispatch),
      T(test_auto_start_waits_for_blockers),
      T(test_a_stopped_agent_gives_up_its_queued_runs),
      T(test_comment),
      T(test_inactive_assignees_wait),
      T(test_transition_table_through_the_tool),
      T(test_approvals_before_done),
      T(test_blockers_gate_and_release),
      T(test_mission_isolation),
      T(test_participants_are_bounded),
      T(test_workspace_isolation),
      T(test_operator_tools),
      T(test_catalog_naming_profile),
      T(test_failures_roll_back),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Provider "work": tasks (create, comment, transition, assign, approve, list, show) and the
 * missions, ideas and works they live in. Task rules: research/ever-works-semantics.md §1
 * (the state machine is domain/task_state), scope rules §2 (the cross-scope assignee table
 * of §2.4 as designed). Dispatches are rows of the jobs table written in the call's
 * transaction, deduplicated by their key. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/call.h"
#include "core/scope.h"
#include "domain/task_state.h"
#include "tools/lookup.h"
#include "tools/providers.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

#define PARENT_DEPTH_MAX 64 /* a task and its ancestors, as the platform bounds it */
#define CHAT_SHOW_MAX 200   /* chat messages work.task.show returns, the latest */
#define BLOCKS_SHOW_MAX 200 /* dependents work.task.show returns */
#define NESTED_MAX 100      /* ideas and works per mission in work.mission.list */
#define IDEA_SLUG_BASE_MAX 50
/* Bytes of a title quoted in an activity summary (tg_activity drops a character the cut
 * halves). */
#define SUMMARY_TITLE_MAX 80
#define PARTICIPANTS_MAX 100 /* assignees, reviewers and approvers of one task */

static const char *row_str(json_t *row, const char *key) {
  return json_string_value(json_object_get(row, key));
}

static const char *actor_type(const tg_principal *p) {
  return p->kind == TG_PRINCIPAL_AGENT ? "agent" : "user";
}

static void set_id(char out[TG_UUID_LEN + 1], const char *id) {
  snprintf(out, TG_UUID_LEN + 1, "%s", id ? id : "");
}

/* The scope a task row lives in. */
static void ref_of_task(json_t *task, tg_scope_ref *ref) {
  set_id(ref->mission_id, row_str(task, "mission_id"));
  set_id(ref->idea_id, row_str(task, "idea_id"));
  set_id(ref->work_id, row_str(task, "work_id"));
}

/* {missionId, ideaId, workId} with the parts that are set: an activity row's scope. */
static json_t *scope_json(const tg_scope_ref *ref) {
  json_t *scope = json_object();
  if (scope && *ref->mission_id) json_object_set_new(scope, "missionId", json_string(ref->mission_id));
  if (scope && *ref->idea_id) json_object_set_new(scope, "ideaId", json_string(ref->idea_id));
  if (scope && *ref->work_id) json_object_set_new(scope, "workId", json_string(ref->work_id));
  return scope;
}

static int activity(tg_call_ctx *cx, const char *type, const tg_scope_ref *ref,
                    const char *summary, json_t *details) {
  _cleanup_json_ json_t *scope = scope_json(ref);
  if (!scope) {
    json_decref(details);
    return TG_E_NOMEM;
  }
  return tg_activity(cx, type, scope, summary, details);
}

/* Whether every part of outer that is set is also inner's: inner lies inside outer. */
static bool scope_within(const tg_scope_ref *inner, const tg_scope_ref *outer) {
  return (!*outer->mission_id || strcmp(inner->mission_id, outer->mission_id) == 0) &&
         (!*outer->idea_id || strcmp(inner->idea_id, outer->idea_id) == 0) &&
         (!*outer->work_id || strcmp(inner->work_id, outer->work_id) == 0);
}

/* The one scope id that tg_scope_reaches compares for p, as SQL parameters (NULL: no
 * condition), so that lists filter rows exactly as a single lookup would. */
static void reach_params(const tg_principal *p, const char **mission, const char **idea,
                         const char **work) {
  *mission = *idea = *work = NULL;
  if (!p->scope_id) return;
  if (strcmp(p->scope_type, "mission") == 0) *mission = p->scope_id;
  else if (strcmp(p->scope_type, "idea") == 0) *idea = p->scope_id;
  else *work = p->scope_id;
}

/* The task with slug in the caller's tenant, if the caller reaches it: by scope, or by being
 * on it. Anything else is not_found, so a task's existence is not revealed. The row carries
 * "roles", how many roles the caller holds on the task. */
static int find_task(tg_call_ctx *cx, const char *slug, json_t **ret) {
  const tg_principal *p = cx->principal;
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(
      cx->db,
      "SELECT t.*, (SELECT COUNT(*) FROM task_assignees a WHERE a.task_id = t.id"
      " AND a.actor_type = $3 AND a.actor_id = $4) AS roles"
      " FROM tasks t WHERE t.tenant_id = $1 AND t.slug = $2",
      json_pack("[ssss]", p->tenant_id, slug, actor_type(p), p->subject_id), &row);
  if (r < 0) return r;
  if (row) {
    tg_scope_ref ref;
    ref_of_task(row, &ref);
    if (tg_scope_reaches(p, &ref) || json_integer_value(json_object_get(row, "roles")) > 0) {
      *ret = TAKE_PTR(row);
      return TG_OK;
    }
  }
  return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "taskSlug", slug),
                 "No task %s that you can reach.", slug);
}

/* A user by id or username; key names the argument in the failure's details. */
static int find_user(tg_call_ctx *cx, const char *key, const char *ref, json_t **ret) {
  int r = tg_db_query_row(cx->db,
                          "SELECT id, username FROM users WHERE tenant_id = $1"
                          " AND (id = $2 OR username = $2) ORDER BY CASE WHEN id = $2 THEN 0 ELSE 1 END"
                          " LIMIT 1",
                          json_pack("[ss]", cx->principal->tenant_id, ref), ret);
  if (r < 0) return r;
  if (!*ret)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", key, ref),
                   "No user %s in this workspace.", ref);
  return TG_OK;
}

/* The length of the noun a key starts with: "mission" of missionSlug, for messages. */
static int noun_len(const char *key) { return (int)strcspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"); }

static int find_by_slug(tg_call_ctx *cx, const char *table, const char *key, const char *slug,
                        json_t **ret) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE tenant_id = $1 AND slug = $2", table);
  int r = tg_db_query_row(cx->db, sql, json_pack("[ss]", cx->principal->tenant_id, slug), ret);
  if (r < 0) return r;
  if (!*ret)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", key, slug), "No %.*s %s in this workspace.",
                   noun_len(key), key, slug);
  return TG_OK;
}

/* The scope argument {workId, missionId, ideaId}: the narrowest part named decides, with its
 * parents filled; a broader part named as well must be one of those parents. */
static int scope_from_args(tg_call_ctx *cx, json_t *scope, tg_scope_ref *ref) {
  *ref = (tg_scope_ref){0};
  static const struct { const char *key, *kind; } parts[] = {
      {"missionId", "mission"}, {"ideaId", "idea"}, {"workId", "work"}};
  tg_scope_ref named = {0};
  char *slots[] = {named.mission_id, named.idea_id, named.work_id};
  char *targets[] = {ref->mission_id, ref->idea_id, ref->work_id};
  int narrowest = -1;
  for (int i = 0; i < 3; i++) {
    const char *value = tg_json_str(scope, parts[i].key);
    if (!value) continue;
    int r = tg_lookup_scope_id(cx, parts[i].kind, value,
                               json_pack("{s:{s:s}}", "scope", parts[i].key, value), slots[i]);
    if (r < 0) return r;
    narrowest = i;
  }
  if (narrowest < 0) return TG_OK;
  set_id(targets[narrowest], slots[narrowest]);
  int r = tg_scope_resolve(cx->db, cx->principal->tenant_id, ref);
  if (r < 0) return r;
  if (!scope_within(ref, &named))
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:O}", "reason", "inconsistent_scope", "scope", scope),
                   "The parts of the scope do not nest: a work must belong to the idea and the "
                   "mission named, an idea to the mission named.");
  return TG_OK;
}

/* Where an agent lives, with the parents of its scope filled. */
static int agent_scope(tg_call_ctx *cx, json_t *agent, tg_scope_ref *ref) {
  *ref = (tg_scope_ref){0};
  const char *type = row_str(agent, "scope_type"), *id = row_str(agent, "scope_id");
  if (strcmp(type, "mission") == 0) set_id(ref->mission_id, id);
  else if (strcmp(type, "idea") == 0) set_id(ref->idea_id, id);
  else if (strcmp(type, "work") == 0) set_id(ref->work_id, id);
  return tg_scope_resolve(cx->db, cx->principal->tenant_id, ref);
}

/* The cross-scope assignee table (§2.4, as designed): a tenant caller assigns anyone; a
 * mission agent the agents of its mission, its ideas and its works; an idea agent those of
 * the idea, of its mission and of the idea's works; a work agent those of its work. */
static bool may_assign(const tg_principal *p, const tg_scope_ref *actor, const char *target_type,
                       const tg_scope_ref *target) {
  if (!p->scope_id) return true;
  if (strcmp(p->scope_type, "mission") == 0)
    return strcmp(target->mission_id, actor->mission_id) == 0;
  if (strcmp(p->scope_type, "idea") == 0)
    return (strcmp(target_type, "mission") == 0 && strcmp(target->mission_id, actor->mission_id) == 0) ||
           (strcmp(target_type, "idea") == 0 && strcmp(target->idea_id, actor->idea_id) == 0) ||
           (strcmp(target_type, "work") == 0 && strcmp(target->idea_id, actor->idea_id) == 0);
  return strcmp(target_type, "work") == 0 && strcmp(target->work_id, actor->work_id) == 0;
}

/* Refuses with permission_denied when the caller may not put agent on a task. */
static int check_assignable(tg_call_ctx *cx, json_t *agent) {
  tg_scope_ref actor, target;
  int r = tg_scope_of(cx->db, cx->principal, &actor);
  if (r == TG_OK) r = agent_scope(cx, agent, &target);
  if (r < 0) return r;
  if (may_assign(cx->principal, &actor, row_str(agent, "scope_type"), &target)) return TG_OK;
  return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                 json_pack("{s:s,s:s,s:s}", "reason", "assignee_out_of_scope", "outOfScope",
                           row_str(agent, "slug"), "assigneeScope", row_str(agent, "scope_type")),
                 "Agent %s is outside the scopes you may assign to.", row_str(agent, "slug"));
}

static int add_participant(tg_call_ctx *cx, const char *task_id, const char *type,
                           const char *actor_id, const char *role, int64_t *changes) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  return tg_db_exec(cx->db,
                    "INSERT INTO task_assignees (task_id, actor_type, actor_id, role, created_at)"
                    " VALUES ($1, $2, $3, $4, $5)"
                    " ON CONFLICT (task_id, actor_type, actor_id, role) DO NOTHING",
                    json_pack("[sssss]", task_id, type, actor_id, role, now), changes);
}

/* A dispatch waking agent_id, written once per dedupe key however often its cause repeats.
 * payload is stolen. */
static int queue_job(tg_call_ctx *cx, const char *kind, const char *agent_id,
                     const char *dedupe_key, json_t *payload) {
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) {
    json_decref(payload);
    return TG_E_IO;
  }
  tg_now_iso(now);
  return tg_db_exec(cx->db,
                    "INSERT INTO jobs (id, tenant_id, kind, agent_id, payload, dedupe_key,"
                    " created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                    " ON CONFLICT (dedupe_key) DO NOTHING",
                    json_pack("[ssssoss]", id, cx->principal->tenant_id, kind, agent_id, payload,
                              dedupe_key, now),
                    NULL);
}

/* One agent-task-execute job per active agent assignee for the start-th start of the task.
 * The key ends in the start number, so an early start (auto-start) and the move to
 * in_progress that follows it are one run, while a re-start after a block, a review or a
 * re-open is a new one. A draft, paused or archived assignee gets none: nothing after the
 * dispatch looks at an agent's status again, and such an agent starts only when a person
 * starts it (seed 000: sub-agents never auto-activate; paused and archived agents do not
 * resume by themselves). Once active, it joins the task's next start. */
static int dispatch_start(tg_call_ctx *cx, const char *task_id, const char *task_slug,
                          json_int_t start, const char *trigger) {
  _cleanup_json_ json_t *agents = NULL;
  int r = tg_db_query(cx->db,
                      "SELECT g.id, g.slug FROM task_assignees a JOIN agents g ON g.id = a.actor_id"
                      " WHERE a.task_id = $1 AND a.actor_type = 'agent' AND a.role = 'assignee'"
                      " AND g.status = 'active' ORDER BY g.slug",
                      json_pack("[s]", task_id), &agents);
  size_t i;
  json_t *agent;
  json_array_foreach(agents, i, agent) {
    if (r < 0) break;
    char key[160];
    snprintf(key, sizeof key, "agent-task-execute:%s:%s:%lld", task_id, row_str(agent, "id"),
             (long long)start);
    r = queue_job(cx, "agent-task-execute", row_str(agent, "id"), key,
                  json_pack("{s:s,s:s,s:O,s:O,s:I,s:s}", "taskId", task_id, "taskSlug", task_slug,
                            "agentId", json_object_get(agent, "id"), "agentSlug",
                            json_object_get(agent, "slug"), "start", start, "trigger", trigger));
  }
  return r;
}

static int open_blockers(tg_call_ctx *cx, const char *task_id, json_t **ret);

/* An auto-start task's agents are started as it becomes todo, unless a blocker is still open:
 * they could not move it to in_progress. The last blocker to close starts them then
 * (unblock_dependents). */
static int auto_start(tg_call_ctx *cx, const char *task_id, const char *task_slug,
                      json_int_t start) {
  _cleanup_json_ json_t *open = NULL;
  int r = open_blockers(cx, task_id, &open);
  if (r < 0 || json_array_size(open) > 0) return r;
  return dispatch_start(cx, task_id, task_slug, start, "auto_start");
}

/* The approvers of a task who have not approved yet, as [{type, name}]. */
static int pending_approvers(tg_call_ctx *cx, const char *task_id, json_t **ret) {
  return tg_db_query(cx->db,
                     "SELECT a.actor_type AS type, COALESCE(g.slug, u.username) AS name"
                     " FROM task_assignees a"
                     " LEFT JOIN agents g ON a.actor_type = 'agent' AND g.id = a.actor_id"
                     " LEFT JOIN users u ON a.actor_type = 'user' AND u.id = a.actor_id"
                     " WHERE a.task_id = $1 AND a.role = 'approver' AND a.approved_at IS NULL"
                     " ORDER BY a.actor_type, name",
                     json_pack("[s]", task_id), ret);
}

/* The blockers of a task still open, as [{slug, status}]. */
static int open_blockers(tg_call_ctx *cx, const char *task_id, json_t **ret) {
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(cx->db,
                      "SELECT o.slug, o.status FROM task_blocks b"
                      " JOIN tasks o ON o.id = b.blocked_by_task_id WHERE b.task_id = $1"
                      " ORDER BY o.created_at, o.id",
                      json_pack("[s]", task_id), &rows);
  if (r < 0) return r;
  json_t *open = json_array();
  if (!open) return TG_E_NOMEM;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    tg_task_status status;
    if (tg_task_status_parse(row_str(row, "status"), &status) && tg_task_status_open(status))
      json_array_append(open, row);
  }
  *ret = open;
  return TG_OK;
}

static json_t *status_names(unsigned set) {
  json_t *names = json_array();
  for (unsigned s = 0; names && s < TG_TASK_STATUS_COUNT; s++)
    if (set & (1u << s)) json_array_append_new(names, json_string(tg_task_status_name((tg_task_status)s)));
  return names;
}

static int illegal_move(tg_call_ctx *cx, const char *slug, tg_task_status from, tg_task_status to) {
  return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                 json_pack("{s:s,s:s,s:s,s:o}", "taskSlug", slug, "from", tg_task_status_name(from),
                           "to", tg_task_status_name(to), "allowed",
                           status_names(tg_task_targets(from))),
                 "Task %s cannot move from %s to %s.", slug, tg_task_status_name(from),
                 tg_task_status_name(to));
}

/* Moves task (a row of tasks) from → to once its gates passed: the row with its timestamps,
 * the runs the move starts, the TASK_UPDATED row. unblocked_by names the blocker whose
 * closing caused the move, or is NULL for a requested move. */
static int apply_move(tg_call_ctx *cx, json_t *task, tg_task_status from, tg_task_status to,
                      const char *reason, const char *unblocked_by) {
  const char *id = row_str(task, "id"), *slug = row_str(task, "slug");
  const char *from_name = tg_task_status_name(from), *to_name = tg_task_status_name(to);
  json_int_t starts = json_integer_value(json_object_get(task, "start_count"));
  bool start = tg_task_edge(from, to) & TG_EDGE_DISPATCH;
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int64_t changes = 0;
  int r = tg_db_exec(
      cx->db,
      "UPDATE tasks SET status = $1, previous_status = $2, updated_at = $3,"
      " started_at = CASE WHEN $1 = 'in_progress' THEN COALESCE(started_at, $3) ELSE started_at END,"
      " completed_at = CASE WHEN $1 = 'done' THEN $3 ELSE completed_at END,"
      " start_count = start_count + $4 WHERE id = $5 AND status = $6",
      json_pack("[ss?siss]", to_name, to == TG_TASK_BLOCKED ? from_name : NULL, now, start ? 1 : 0,
                id, from_name),
      &changes);
  if (r < 0) return r;
  /* Another writer moved the task since it was read: the move is no longer the one asked. */
  if (changes == 0) return illegal_move(cx, slug, from, to);
  /* A task re-opened is work to approve again: the approvals given to it closed are taken
   * back, so its next done waits for them anew. */
  int64_t withdrawn = 0;
  if (!tg_task_status_open(from) && tg_task_status_open(to))
    r = tg_db_exec(cx->db,
                   "UPDATE task_assignees SET approved_at = NULL WHERE task_id = $1"
                   " AND role = 'approver' AND approved_at IS NOT NULL",
                   json_pack("[s]", id), &withdrawn);
  if (r < 0) return r;
  if (start) r = dispatch_start(cx, id, slug, starts + 1, "start");
  /* An auto-start task starts its agents as soon as it is todo: the job of its next start,
   * which the move to in_progress later joins instead of doubling. */
  else if (to == TG_TASK_TODO && json_integer_value(json_object_get(task, "auto_start")))
    r = auto_start(cx, id, slug, starts + 1);
  if (r < 0) return r;
  tg_scope_ref ref;
  ref_of_task(task, &ref);
  char summary[160];
  snprintf(summary, sizeof summary, "Task %s moved from %s to %s%s%s", slug, from_name, to_name,
           unblocked_by ? ": unblocked by " : "", unblocked_by ? unblocked_by : "");
  json_t *details =
      json_pack("{s:s,s:s,s:s,s:s,s:s?,s:s?}", "taskId", id, "taskSlug", slug, "from", from_name,
                "to", to_name, "reason", reason, "unblockedBy", unblocked_by);
  if (details && withdrawn)
    json_object_set_new(details, "approvalsWithdrawn", json_integer((json_int_t)withdrawn));
  return activity(cx, "TASK_UPDATED", &ref, summary, details);
}

/* A task closing (done, cancelled) releases the tasks it was the last open blocker of: a
 * blocked one goes back to the status it had when blocked, or to todo when the machine does
 * not lead there from blocked; an auto-start one in todo gets its agents started. */
static int unblock_dependents(tg_call_ctx *cx, json_t *blocker) {
  _cleanup_json_ json_t *dependents = NULL;
  int r = tg_db_query(cx->db,
                      "SELECT t.* FROM tasks t JOIN task_blocks b ON b.task_id = t.id"
                      " WHERE b.blocked_by_task_id = $1"
                      " AND (t.status = 'blocked' OR (t.status = 'todo' AND t.auto_start = 1))"
                      " ORDER BY t.created_at, t.id",
                      json_pack("[s]", row_str(blocker, "id")), &dependents);
  size_t i;
  json_t *task;
  json_array_foreach(dependents, i, task) {
    if (r < 0) break;
    _cleanup_json_ json_t *open = NULL;
    r = open_blockers(cx, row_str(task, "id"), &open);
    if (r < 0 || json_array_size(open) > 0) continue;
    if (strcmp(row_str(task, "status"), "todo") == 0) {
      r = dispatch_start(cx, row_str(task, "id"), row_str(task, "slug"),
                         json_integer_value(json_object_get(task, "start_count")) + 1,
                         "auto_start");
      continue;
    }
    tg_task_status back;
    if (!tg_task_status_parse(row_str(task, "previous_status"), &back) ||
        !tg_task_can_transition(TG_TASK_BLOCKED, back))
      back = TG_TASK_TODO;
    r = apply_move(cx, task, TG_TASK_BLOCKED, back, NULL, row_str(blocker, "slug"));
  }
  return r;
}

/* T-<n> with n drawn from the workspace's counter. */
static int next_task_slug(tg_call_ctx *cx, char out[32]) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "INSERT INTO task_counters (tenant_id, last_number) VALUES ($1, 1)"
                          " ON CONFLICT (tenant_id) DO UPDATE"
                          " SET last_number = task_counters.last_number + 1 RETURNING last_number",
                          json_pack("[s]", cx->principal->tenant_id), &row);
  if (r < 0) return r;
  if (!row) return TG_E_DB;
  snprintf(out, 32, "T-%lld", (long long)json_integer_value(json_object_get(row, "last_number")));
  return TG_OK;
}

static const char *nonempty(const char *s) { return *s ? s : NULL; }

/* How many tasks the chain from task up through its parents holds, task included. */
static int chain_depth(tg_call_ctx *cx, const char *task_id, json_int_t *ret) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "WITH RECURSIVE chain (id, parent_task_id, depth) AS ("
                          " SELECT id, parent_task_id, 1 FROM tasks WHERE id = $1"
                          " UNION ALL SELECT t.id, t.parent_task_id, c.depth + 1 FROM tasks t"
                          " JOIN chain c ON t.id = c.parent_task_id WHERE c.depth <= $2)"
                          " SELECT MAX(depth) AS depth FROM chain",
                          json_pack("[si]", task_id, PARENT_DEPTH_MAX), &row);
  if (r < 0) return r;
  *ret = json_integer_value(json_object_get(row, "depth"));
  return TG_OK;
}

/* The parent a new task goes under: reachable, with the new task inside its scope, and not
 * too deep. */
static int check_parent(tg_call_ctx *cx, json_t *parent, const tg_scope_ref *ref) {
  const char *slug = row_str(parent, "slug");
  tg_scope_ref outer;
  ref_of_task(parent, &outer);
  if (!scope_within(ref, &outer))
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s}", "reason", "outside_parent_scope", "parentTaskSlug", slug),
                   "A sub-task must lie inside the scope of its parent %s.", slug);
  json_int_t depth = 0;
  int r = chain_depth(cx, row_str(parent, "id"), &depth);
  if (r < 0) return r;
  if (depth + 1 > PARENT_DEPTH_MAX)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s,s:i}", "reason", "too_deep", "parentTaskSlug", slug,
                             "maxDepth", PARENT_DEPTH_MAX),
                   "Sub-tasks nest at most %d deep.", PARENT_DEPTH_MAX);
  return TG_OK;
}

static int task_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_principal *p = cx->principal;
  const char *parent_slug = tg_json_str(args, "parentTaskSlug");
  _cleanup_json_ json_t *parent = NULL;
  int r = parent_slug ? find_task(cx, parent_slug, &parent) : TG_OK;
  if (r < 0) return r;

  tg_scope_ref ref = {0};
  json_t *scope_arg = json_object_get(args, "scope");
  if (scope_arg) r = scope_from_args(cx, scope_arg, &ref);
  else if (parent) ref_of_task(parent, &ref);
  else r = tg_scope_of(cx->db, p, &ref);
  if (r < 0) return r;
  if (!tg_scope_reaches(p, &ref))
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:o}", "reason", "scope_out_of_reach", "scope", scope_json(&ref)),
                   "You cannot create tasks in that scope: it is outside your own.");
  if (parent && (r = check_parent(cx, parent, &ref)) < 0) return r;

  _cleanup_json_ json_t *blockers = json_array(), *agents = json_array(), *users = json_array();
  if (!blockers || !agents || !users) return TG_E_NOMEM;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(args, "blockedBySlugs"), i, v) {
    json_t *row = NULL;
    if ((r = find_task(cx, json_string_value(v), &row)) < 0) return r;
    json_array_append_new(blockers, row);
  }
  json_array_foreach(json_object_get(args, "assigneeAgentSlugs"), i, v) {
    json_t *row = NULL;
    if ((r = tg_lookup_agent(cx, json_string_value(v), &row)) < 0) return r;
    json_array_append_new(agents, row);
    if ((r = check_assignable(cx, row)) < 0) return r;
  }
  json_array_foreach(json_object_get(args, "assigneeUserIds"), i, v) {
    json_t *row = NULL;
    if ((r = find_user(cx, "userId", json_string_value(v), &row)) < 0) return r;
    json_array_append_new(users, row);
  }

  const char *status = tg_json_str(args, "status") ? tg_json_str(args, "status") : "backlog";
  bool todo = strcmp(status, "todo") == 0;
  json_t *auto_arg = json_object_get(args, "autoStart");
  bool starts_now = auto_arg ? json_is_true(auto_arg) : todo;
  const char *priority = tg_json_str(args, "priority") ? tg_json_str(args, "priority") : "p3";
  json_t *labels = json_object_get(args, "labels");
  char id[TG_UUID_LEN + 1], slug[32], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  if ((r = next_task_slug(cx, slug)) < 0) return r;
  tg_now_iso(now);
  r = tg_db_exec(
      cx->db,
      "INSERT INTO tasks (id, tenant_id, slug, title, description, priority, labels, status,"
      " parent_task_id, mission_id, idea_id, work_id, created_by_type, created_by_id, auto_start,"
      " created_at, updated_at)"
      " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)",
      json_pack("[ssssssosOs?s?s?ssbs]", id, p->tenant_id, slug, tg_json_str(args, "title"),
                tg_json_str(args, "description") ? tg_json_str(args, "description") : "", priority,
                labels ? json_incref(labels) : json_array(), status,
                parent ? json_object_get(parent, "id") : json_null(), nonempty(ref.mission_id),
                nonempty(ref.idea_id), nonempty(ref.work_id), actor_type(p), p->subject_id,
                starts_now, now),
      NULL);
  json_array_foreach(agents, i, v) {
    if (r == TG_OK) r = add_participant(cx, id, "agent", row_str(v, "id"), "assignee", NULL);
  }
  json_array_foreach(users, i, v) {
    if (r == TG_OK) r = add_participant(cx, id, "user", row_str(v, "id"), "assignee", NULL);
  }
  json_array_foreach(blockers, i, v) {
    if (r == TG_OK)
      r = tg_db_exec(cx->db,
                     "INSERT INTO task_blocks (task_id, blocked_by_task_id, created_at)"
                     " VALUES ($1, $2, $3)",
                     json_pack("[sOs]", id, json_object_get(v, "id"), now), NULL);
  }
  if (r == TG_OK && todo && starts_now) r = auto_start(cx, id, slug, 1);
  if (r < 0) return r;

  json_t *agent_slugs = json_array(), *blocker_slugs = json_array();
  json_array_foreach(agents, i, v) json_array_append(agent_slugs, json_object_get(v, "slug"));
  json_array_foreach(blockers, i, v) json_array_append(blocker_slugs, json_object_get(v, "slug"));
  char summary[160];
  snprintf(summary, sizeof summary, "Task %s created: %.*s", slug, SUMMARY_TITLE_MAX,
           tg_json_str(args, "title"));
  r = activity(cx, "TASK_CREATED", &ref, summary,
               json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:O?,s:o,s:s?,s:b}", "taskId", id, "taskSlug",
                         slug, "title", tg_json_str(args, "title"), "status", status, "priority",
                         priority, "assigneeAgents", agent_slugs, "assigneeUsers",
                         json_object_get(args, "assigneeUserIds"), "blockedBy", blocker_slugs,
                         "parentTaskSlug", parent_slug, "autoStart", starts_now));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:s}", "slug", slug, "id", id, "status", status);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* A mention, resolved: {type, slug, id}. */
static int resolve_mention(tg_call_ctx *cx, json_t *mention, json_t **ret) {
  const char *type = tg_json_str(mention, "type"), *slug = tg_json_str(mention, "slug");
  _cleanup_json_ json_t *row = NULL;
  bool agent = strcmp(type, "agent") == 0;
  int r = agent ? tg_lookup_agent(cx, slug, &row) : find_user(cx, "mention", slug, &row);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:O,s:O}", "type", type, "slug",
                   json_object_get(row, agent ? "slug" : "username"), "id",
                   json_object_get(row, "id"));
  return *ret ? TG_OK : TG_E_NOMEM;
}

static bool has_mention(json_t *list, json_t *mention) {
  size_t i;
  json_t *m;
  json_array_foreach(list, i, m) {
    if (strcmp(row_str(m, "type"), row_str(mention, "type")) == 0 &&
        strcmp(row_str(m, "id"), row_str(mention, "id")) == 0)
      return true;
  }
  return false;
}

/* An agent mentioned in a comment is asked to reply when it is an active assignee of the
 * task (as for dispatch_start); the author mentioning itself is not, so an agent cannot wake
 * itself in a loop. */
static int ping_mentioned(tg_call_ctx *cx, json_t *task, const char *message_id, json_t *mention) {
  const tg_principal *p = cx->principal;
  const char *agent_id = row_str(mention, "id");
  if (strcmp(row_str(mention, "type"), "agent") != 0 ||
      (p->kind == TG_PRINCIPAL_AGENT && strcmp(agent_id, p->subject_id) == 0))
    return TG_OK;
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT a.role FROM task_assignees a JOIN agents g ON g.id = a.actor_id"
                          " WHERE a.task_id = $1 AND a.actor_type = 'agent' AND a.actor_id = $2"
                          " AND a.role = 'assignee' AND g.status = 'active'",
                          json_pack("[Os]", json_object_get(task, "id"), agent_id), &row);
  if (r < 0 || !row) return r;
  char key[160];
  snprintf(key, sizeof key, "agent-chat-reply:%s:%s", message_id, agent_id);
  return queue_job(cx, "agent-chat-reply", agent_id, key,
                   json_pack("{s:O,s:O,s:s,s:s,s:O}", "taskId", json_object_get(task, "id"),
                             "taskSlug", json_object_get(task, "slug"), "messageId", message_id,
                             "agentId", agent_id, "agentSlug", json_object_get(mention, "slug")));
}

static int task_comment(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_principal *p = cx->principal;
  const char *slug = tg_json_str(args, "taskSlug");
  _cleanup_json_ json_t *task = NULL;
  int r = find_task(cx, slug, &task);
  if (r < 0) return r;
  if (json_integer_value(json_object_get(task, "roles")) == 0)
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:s}", "reason", "not_on_task", "taskSlug", slug),
                   "Only the assignees, reviewers and approvers of %s may comment on it.", slug);
  _cleanup_json_ json_t *mentions = json_array();
  if (!mentions) return TG_E_NOMEM;
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(args, "mentions"), i, m) {
    json_t *resolved = NULL;
    if ((r = resolve_mention(cx, m, &resolved)) < 0) return r;
    if (has_mention(mentions, resolved)) json_decref(resolved);
    else json_array_append_new(mentions, resolved);
  }
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO task_chat_messages (id, task_id, author_type, author_id, body,"
                 " mentions, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                 json_pack("[sOsssOs]", id, json_object_get(task, "id"), actor_type(p),
                           p->subject_id, tg_json_str(args, "body"), mentions, now),
                 NULL);
  json_array_foreach(mentions, i, m) {
    if (r == TG_OK) r = ping_mentioned(cx, task, id, m);
  }
  if (r < 0) return r;
  tg_scope_ref ref;
  ref_of_task(task, &ref);
  char summary[160];
  snprintf(summary, sizeof summary, "Comment on task %s by %s", slug, p->name);
  r = activity(cx, "TASK_COMMENTED", &ref, summary,
               json_pack("{s:O,s:s,s:s,s:O}", "taskId", json_object_get(task, "id"), "taskSlug",
                         slug, "messageId", id, "mentions", mentions));
  if (r < 0) return r;
  *ret = json_pack("{s:s}", "messageId", id);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int task_transition(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "taskSlug");
  _cleanup_json_ json_t *task = NULL;
  int r = find_task(cx, slug, &task);
  if (r < 0) return r;
  tg_task_status from, to;
  /* The table's CHECK and the input schema admit only the seven statuses. */
  if (!tg_task_status_parse(row_str(task, "status"), &from) ||
      !tg_task_status_parse(tg_json_str(args, "to"), &to))
    return TG_E_INVAL;
  unsigned edge = tg_task_edge(from, to);
  if (!edge) return illegal_move(cx, slug, from, to);
  const char *id = row_str(task, "id");
  if (edge & TG_EDGE_BLOCKERS) {
    _cleanup_json_ json_t *open = NULL;
    if ((r = open_blockers(cx, id, &open)) < 0) return r;
    if (json_array_size(open) > 0)
      return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                     json_pack("{s:s,s:s,s:O}", "taskSlug", slug, "to", tg_task_status_name(to),
                               "openBlockers", open),
                     "Task %s is blocked by %zu open task(s); close them first.", slug,
                     json_array_size(open));
  }
  if (edge & TG_EDGE_APPROVERS) {
    _cleanup_json_ json_t *pending = NULL;
    if ((r = pending_approvers(cx, id, &pending)) < 0) return r;
    if (json_array_size(pending) > 0)
      return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                     json_pack("{s:s,s:O}", "taskSlug", slug, "pendingApprovers", pending),
                     "Task %s needs the approval of %zu more approver(s) before it is done.", slug,
                     json_array_size(pending));
  }
  r = apply_move(cx, task, from, to, tg_json_str(args, "reason"), NULL);
  if (r == TG_OK && !tg_task_status_open(to)) r = unblock_dependents(cx, task);
  if (r < 0) return r;
  *ret = json_pack("{s:s}", "status", tg_task_status_name(to));
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The participant an operator names: an agent by slug, or a user by username. */
static int find_participant(tg_call_ctx *cx, json_t *args, const char **type, json_t **ret) {
  const char *agent = tg_json_str(args, "agentSlug");
  *type = agent ? "agent" : "user";
  return agent ? tg_lookup_agent(cx, agent, ret) : find_user(cx, "username", tg_json_str(args, "username"), ret);
}

static const char *participant_name(json_t *row) {
  return row_str(row, "slug") ? row_str(row, "slug") : row_str(row, "username");
}

static int task_assign(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "taskSlug");
  const char *role = tg_json_str(args, "role") ? tg_json_str(args, "role") : "assignee";
  _cleanup_json_ json_t *task = NULL, *who = NULL;
  const char *type;
  int r = find_task(cx, slug, &task);
  if (r == TG_OK) r = find_participant(cx, args, &type, &who);
  if (r == TG_OK && strcmp(type, "agent") == 0) r = check_assignable(cx, who);
  if (r < 0) return r;
  _cleanup_json_ json_t *count = NULL;
  r = tg_db_query_row(cx->db, "SELECT COUNT(*) AS n FROM task_assignees WHERE task_id = $1",
                      json_pack("[O]", json_object_get(task, "id")), &count);
  if (r < 0) return r;
  if (json_integer_value(json_object_get(count, "n")) >= PARTICIPANTS_MAX)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s,s:i}", "reason", "too_many_participants", "taskSlug", slug,
                             "max", PARTICIPANTS_MAX),
                   "Task %s already has %d people on it.", slug, PARTICIPANTS_MAX);
  int64_t changes = 0;
  r = add_participant(cx, row_str(task, "id"), type, row_str(who, "id"), role, &changes);
  /* An active agent joining a running task as assignee joins its current start. */
  if (r == TG_OK && changes && strcmp(type, "agent") == 0 && strcmp(role, "assignee") == 0 &&
      strcmp(row_str(task, "status"), "in_progress") == 0)
    r = dispatch_start(cx, row_str(task, "id"), slug,
                       json_integer_value(json_object_get(task, "start_count")), "assigned");
  if (r < 0) return r;
  if (changes) {
    tg_scope_ref ref;
    ref_of_task(task, &ref);
    char summary[160];
    snprintf(summary, sizeof summary, "%s %s added to task %s as %s",
             strcmp(type, "agent") == 0 ? "Agent" : "User", participant_name(who), slug, role);
    r = activity(cx, "TASK_ASSIGNEE_ADDED", &ref, summary,
                 json_pack("{s:O,s:s,s:s,s:s,s:s}", "taskId", json_object_get(task, "id"),
                           "taskSlug", slug, "actorType", type, "name", participant_name(who),
                           "role", role));
    if (r < 0) return r;
  }
  *ret = json_pack("{s:s,s:s,s:b}", "taskSlug", slug, "role", role, "changed", changes > 0);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int task_approve(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "taskSlug");
  _cleanup_json_ json_t *task = NULL, *who = NULL, *row = NULL;
  const char *type;
  int r = find_task(cx, slug, &task);
  if (r == TG_OK) r = find_participant(cx, args, &type, &who);
  if (r < 0) return r;
  const char *task_id = row_str(task, "id"), *name = participant_name(who);
  /* A person may record the approval another approver gave; an agent gives only its own,
   * and may not speak for a person or for another agent. */
  if (cx->principal->kind == TG_PRINCIPAL_AGENT &&
      (strcmp(type, "agent") != 0 || strcmp(row_str(who, "id"), cx->principal->subject_id) != 0))
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:s,s:s,s:s}", "reason", "not_the_approver", "taskSlug", slug,
                             "approverType", type, "approver", name),
                   "An agent records only its own approval, not that of %s.", name);
  r = tg_db_query_row(cx->db,
                      "SELECT approved_at FROM task_assignees WHERE task_id = $1 AND actor_type = $2"
                      " AND actor_id = $3 AND role = 'approver'",
                      json_pack("[ssO]", task_id, type, json_object_get(who, "id")), &row);
  if (r < 0) return r;
  if (!row)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s,s:s,s:s}", "reason", "not_an_approver", "taskSlug", slug,
                             "approverType", type, "approver", name),
                   "%s is not an approver of task %s.", name, slug);
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  bool changed = json_is_null(json_object_get(row, "approved_at"));
  const char *approved_at = changed ? now : row_str(row, "approved_at");
  if (changed) {
    r = tg_db_exec(cx->db,
                   "UPDATE task_assignees SET approved_at = $1 WHERE task_id = $2"
                   " AND actor_type = $3 AND actor_id = $4 AND role = 'approver'",
                   json_pack("[sssO]", now, task_id, type, json_object_get(who, "id")), NULL);
    if (r < 0) return r;
    tg_scope_ref ref;
    ref_of_task(task, &ref);
    char summary[160];
    snprintf(summary, sizeof summary, "Task %s approved by %s", slug, name);
    r = activity(cx, "TASK_APPROVED", &ref, summary,
                 json_pack("{s:s,s:s,s:s,s:s}", "taskId", task_id, "taskSlug", slug,
                           "approverType", type, "approver", name));
    if (r < 0) return r;
  }
  json_t *pending = NULL;
  if ((r = pending_approvers(cx, task_id, &pending)) < 0) return r;
  *ret = json_pack("{s:s,s:s,s:b,s:o}", "taskSlug", slug, "approvedAt", approved_at, "changed",
                   changed, "pendingApprovers", pending);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The columns of a task as work.task.list and work.task.show give them. */
#define TASK_VIEW_SQL                                                                          \
  "SELECT t.id, t.slug, t.title, t.status, t.priority, t.labels, t.previous_status,"           \
  " t.auto_start, t.start_count, t.started_at, t.completed_at, t.created_at, t.updated_at,"    \
  " t.created_by_type, COALESCE(cg.slug, cu.username) AS created_by,"                         \
  " m.slug AS mission, i.slug AS idea, w.slug AS work, pt.slug AS parent"                      \
  " FROM tasks t LEFT JOIN missions m ON m.id = t.mission_id"                                  \
  " LEFT JOIN ideas i ON i.id = t.idea_id LEFT JOIN works w ON w.id = t.work_id"               \
  " LEFT JOIN tasks pt ON pt.id = t.parent_task_id"                                            \
  " LEFT JOIN agents cg ON t.created_by_type = 'agent' AND cg.id = t.created_by_id"           \
  " LEFT JOIN users cu ON t.created_by_type = 'user' AND cu.id = t.created_by_id"

static json_t *parsed(json_t *row, const char *key) {
  json_t *value = json_loads(row_str(row, key) ? row_str(row, key) : "null", JSON_DECODE_ANY, NULL);
  return value ? value : json_null();
}

static json_t *task_view(json_t *row) {
  json_t *g = row; /* short for the many fields below */
  return json_pack(
      "{s:O,s:O,s:O,s:O,s:O,s:o,s:O,s:O,s:O,s:O,s:O,s:{s:O,s:O},s:b,s:O,s:O,s:O,s:O,s:O}", "id",
      json_object_get(g, "id"), "slug", json_object_get(g, "slug"), "title",
      json_object_get(g, "title"), "status", json_object_get(g, "status"), "priority",
      json_object_get(g, "priority"), "labels", parsed(g, "labels"), "previousStatus",
      json_object_get(g, "previous_status"), "mission", json_object_get(g, "mission"), "idea",
      json_object_get(g, "idea"), "work", json_object_get(g, "work"), "parentTaskSlug",
      json_object_get(g, "parent"), "createdBy", "type", json_object_get(g, "created_by_type"),
      "name", json_object_get(g, "created_by"), "autoStart",
      json_integer_value(json_object_get(g, "auto_start")) != 0, "startCount",
      json_object_get(g, "start_count"), "startedAt", json_object_get(g, "started_at"),
      "completedAt", json_object_get(g, "completed_at"), "createdAt",
      json_object_get(g, "created_at"), "updatedAt", json_object_get(g, "updated_at"));
}

/* Appends the view of every row of rows to a new array. */
static json_t *views(json_t *rows, json_t *(*view)(json_t *)) {
  json_t *out = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    json_t *v = out ? view(row) : NULL;
    if (!v || json_array_append_new(out, v) < 0) {
      json_decref(out);
      return NULL;
    }
  }
  return out;
}

/* The id of the mission or work (kind) that args' key names, "" when it names none: a list
 * filter naming nothing in the workspace is not_found, not an empty list that hides a typo. */
static int filter_id(tg_call_ctx *cx, json_t *args, const char *key, const char *kind,
                     char out[TG_UUID_LEN + 1]) {
  *out = '\0';
  const char *value = tg_json_str(args, key);
  return value ? tg_lookup_scope_id(cx, kind, value, json_pack("{s:s}", key, value), out) : TG_OK;
}

/* Keeps the first limit rows; true when there were more. */
static int task_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_principal *p = cx->principal;
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 50;
  const char *mission, *idea, *work;
  reach_params(p, &mission, &idea, &work);
  char mission_id[TG_UUID_LEN + 1], work_id[TG_UUID_LEN + 1];
  _cleanup_json_ json_t *assignee = NULL, *rows = NULL;
  const char *assignee_slug = tg_json_str(args, "assigneeAgentSlug");
  int r = filter_id(cx, args, "missionSlug", "mission", mission_id);
  if (r == TG_OK) r = filter_id(cx, args, "workSlug", "work", work_id);
  if (r == TG_OK && assignee_slug) r = tg_lookup_agent(cx, assignee_slug, &assignee);
  if (r < 0) return r;
  r = tg_db_query(
      cx->db,
      TASK_VIEW_SQL
      " WHERE t.tenant_id = $1 AND ($2 IS NULL OR t.status = $2)"
      " AND ($3 IS NULL OR t.mission_id = $3) AND ($4 IS NULL OR t.work_id = $4)"
      " AND ($5 IS NULL OR EXISTS (SELECT 1 FROM task_assignees a"
      " WHERE a.task_id = t.id AND a.actor_type = 'agent' AND a.actor_id = $5))"
      " AND ((($6 IS NULL OR t.mission_id = $6) AND ($7 IS NULL OR t.idea_id = $7)"
      " AND ($8 IS NULL OR t.work_id = $8)) OR EXISTS (SELECT 1 FROM task_assignees a"
      " WHERE a.task_id = t.id AND a.actor_type = $9 AND a.actor_id = $10))"
      " ORDER BY t.created_at DESC, t.id DESC LIMIT $11",
      json_pack("[ss?s?s?s?s?s?s?ssI]", p->tenant_id, tg_json_str(args, "status"),
                nonempty(mission_id), nonempty(work_id), tg_json_str(assignee, "id"), mission,
                idea, work, actor_type(p), p->subject_id, limit + 1),
      &rows);
  if (r < 0) return r;
  bool truncated = tg_json_cut(rows, limit);
  json_t *tasks = views(rows, task_view);
  if (!tasks) return TG_E_NOMEM;
  *ret = json_pack("{s:o,s:b}", "tasks", tasks, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static json_t *chat_view(json_t *row) {
  return json_pack("{s:O,s:{s:O,s:O},s:O,s:o,s:O}", "id", json_object_get(row, "id"), "author",
                   "type", json_object_get(row, "author_type"), "name",
                   json_object_get(row, "author"), "body", json_object_get(row, "body"),
                   "mentions", parsed(row, "mentions"), "createdAt",
                   json_object_get(row, "created_at"));
}

static json_t *assignee_view(json_t *row) {
  json_t *v = json_pack("{s:O,s:O,s:O}", "type", json_object_get(row, "actor_type"), "name",
                        json_object_get(row, "name"), "role", json_object_get(row, "role"));
  if (v && strcmp(row_str(row, "role"), "approver") == 0)
    json_object_set(v, "approvedAt", json_object_get(row, "approved_at"));
  return v;
}

static int task_show(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *task = NULL, *view_row = NULL, *assignees = NULL, *blocked_by = NULL,
                        *blocks = NULL, *chat = NULL;
  int r = find_task(cx, tg_json_str(args, "taskSlug"), &task);
  if (r < 0) return r;
  json_t *id = json_object_get(task, "id");
  r = tg_db_query_row(cx->db, TASK_VIEW_SQL " WHERE t.id = $1", json_pack("[O]", id), &view_row);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT a.actor_type, a.role, a.approved_at, COALESCE(g.slug, u.username) AS name"
                    " FROM task_assignees a"
                    " LEFT JOIN agents g ON a.actor_type = 'agent' AND g.id = a.actor_id"
                    " LEFT JOIN users u ON a.actor_type = 'user' AND u.id = a.actor_id"
                    " WHERE a.task_id = $1 ORDER BY CASE a.role WHEN 'assignee' THEN 0"
                    " WHEN 'reviewer' THEN 1 ELSE 2 END, a.actor_type, name",
                    json_pack("[O]", id), &assignees);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT o.slug, o.status FROM task_blocks b JOIN tasks o"
                    " ON o.id = b.blocked_by_task_id WHERE b.task_id = $1 ORDER BY o.created_at, o.id",
                    json_pack("[O]", id), &blocked_by);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT o.slug, o.status FROM task_blocks b JOIN tasks o ON o.id = b.task_id"
                    " WHERE b.blocked_by_task_id = $1 ORDER BY o.created_at, o.id LIMIT $2",
                    json_pack("[Oi]", id, BLOCKS_SHOW_MAX + 1), &blocks);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT c.id, c.author_type, COALESCE(g.slug, u.username) AS author, c.body,"
                    " c.mentions, c.created_at FROM task_chat_messages c"
                    " LEFT JOIN agents g ON c.author_type = 'agent' AND g.id = c.author_id"
                    " LEFT JOIN users u ON c.author_type = 'user' AND u.id = c.author_id"
                    " WHERE c.task_id = $1 ORDER BY c.created_at DESC, c.id DESC LIMIT $2",
                    json_pack("[Oi]", id, CHAT_SHOW_MAX + 1), &chat);
  if (r < 0) return r;
  bool blocks_more = tg_json_cut(blocks, BLOCKS_SHOW_MAX), chat_more = tg_json_cut(chat, CHAT_SHOW_MAX);
  json_t *chat_views = json_array(); /* oldest first, like a conversation reads */
  for (size_t i = json_array_size(chat); chat_views && i-- > 0;)
    json_array_append_new(chat_views, chat_view(json_array_get(chat, i)));
  json_t *view = task_view(view_row);
  if (view)
    json_object_set(view, "description", json_object_get(task, "description"));
  *ret = json_pack("{s:o,s:o,s:O,s:O,s:b,s:o,s:b}", "task", view, "assignees",
                   views(assignees, assignee_view), "blockedBy", blocked_by, "blocks", blocks,
                   "blocksTruncated", blocks_more, "chat", chat_views, "chatTruncated", chat_more);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int slug_taken(tg_call_ctx *cx, const char *table, const char *slug) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT id FROM %s WHERE tenant_id = $1 AND slug = $2", table);
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db, sql, json_pack("[ss]", cx->principal->tenant_id, slug), &row);
  if (r < 0) return r;
  if (row)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, json_pack("{s:s}", "slug", slug),
                   "The slug %s is already taken.", slug);
  return TG_OK;
}

static int mission_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "slug");
  int r = slug_taken(cx, "missions", slug);
  if (r < 0) return r;
  json_t *cap = json_object_get(args, "capCents");
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO missions (id, tenant_id, slug, title, description, cap_cents, created_at)"
                 " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                 json_pack("[sssssOs]", id, cx->principal->tenant_id, slug, tg_json_str(args, "title"),
                           tg_json_str(args, "description") ? tg_json_str(args, "description") : "",
                           cap ? cap : json_null(), now),
                 NULL);
  if (r < 0) return r;
  tg_scope_ref ref = {0};
  set_id(ref.mission_id, id);
  char summary[160];
  snprintf(summary, sizeof summary, "Mission %s created", slug);
  r = activity(cx, "MISSION_CREATED", &ref, summary,
               json_pack("{s:s,s:s,s:s,s:O}", "missionId", id, "slug", slug, "title",
                         tg_json_str(args, "title"), "capCents", cap ? cap : json_null()));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "missionId", id, "slug", slug);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The ideas and works of mission the caller reaches, the first NESTED_MAX of each, with
 * their counts. Below tenant scope: an idea agent sees its idea and its works, a work agent
 * its work. */
static int mission_contents(tg_call_ctx *cx, json_t *mission, json_t *entry) {
  const char *m, *idea, *work;
  reach_params(cx->principal, &m, &idea, &work);
  json_t *id = json_object_get(mission, "id");
  _cleanup_json_ json_t *ideas = NULL, *works = NULL;
  int r = work ? TG_OK /* a work agent sees no idea */
               : tg_db_query(cx->db,
                             "SELECT slug, title, status, COUNT(*) OVER () AS total FROM ideas"
                             " WHERE mission_id = $1 AND ($2 IS NULL OR id = $2)"
                             " ORDER BY created_at, id LIMIT $3",
                             json_pack("[Os?i]", id, idea, NESTED_MAX), &ideas);
  if (r == TG_OK && !ideas && !(ideas = json_array())) r = TG_E_NOMEM;
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT w.slug, w.title, i.slug AS idea, COUNT(*) OVER () AS total FROM works w"
                    " LEFT JOIN ideas i ON i.id = w.idea_id WHERE w.mission_id = $1"
                    " AND ($2 IS NULL OR w.idea_id = $2) AND ($3 IS NULL OR w.id = $3)"
                    " ORDER BY w.created_at, w.id LIMIT $4",
                    json_pack("[Os?s?i]", id, idea, work, NESTED_MAX), &works);
  if (r < 0) return r;
  json_t *totals[2] = {json_integer(0), json_integer(0)};
  json_t *lists[2] = {ideas, works};
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *row;
    json_array_foreach(lists[k], i, row) {
      json_decref(totals[k]);
      totals[k] = json_incref(json_object_get(row, "total"));
      json_object_del(row, "total");
    }
  }
  json_object_set_new(entry, "ideaCount", totals[0]);
  json_object_set_new(entry, "workCount", totals[1]);
  json_object_set(entry, "ideas", ideas);
  json_object_set(entry, "works", works);
  return TG_OK;
}

static int mission_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 50;
  tg_scope_ref own;
  char only[TG_UUID_LEN + 1];
  int r = tg_scope_of(cx->db, cx->principal, &own);
  if (r == TG_OK) r = filter_id(cx, args, "missionSlug", "mission", only);
  if (r < 0) return r;
  _cleanup_json_ json_t *rows = NULL;
  r = tg_db_query(cx->db,
                  "SELECT id, slug, title, description, status, cap_cents, current_spend_cents,"
                  " created_at FROM missions WHERE tenant_id = $1 AND ($2 IS NULL OR id = $2)"
                  " AND ($3 IS NULL OR id = $3) ORDER BY created_at, id LIMIT $4",
                  json_pack("[ss?s?I]", cx->principal->tenant_id, nonempty(only),
                            nonempty(own.mission_id), limit + 1),
                  &rows);
  if (r < 0) return r;
  bool truncated = tg_json_cut(rows, limit);
  json_t *missions = json_array();
  *ret = json_pack("{s:o,s:b}", "missions", missions, "truncated", truncated);
  if (!*ret) return TG_E_NOMEM;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    json_t *entry = json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "id", json_object_get(row, "id"),
                              "slug", json_object_get(row, "slug"), "title",
                              json_object_get(row, "title"), "description",
                              json_object_get(row, "description"), "status",
                              json_object_get(row, "status"), "capCents",
                              json_object_get(row, "cap_cents"), "currentSpendCents",
                              json_object_get(row, "current_spend_cents"), "createdAt",
                              json_object_get(row, "created_at"));
    if (!entry || json_array_append_new(missions, entry) < 0) r = TG_E_NOMEM;
    if (r == TG_OK) r = mission_contents(cx, row, entry);
    if (r < 0) {
      json_decref(TAKE_PTR(*ret));
      return r;
    }
  }
  return TG_OK;
}

/* A slug made of title: lower-case letters and digits, other runs turned into one dash. */
static void slugify(const char *title, char out[IDEA_SLUG_BASE_MAX + 1]) {
  size_t n = 0;
  bool dash = false;
  for (const unsigned char *s = (const unsigned char *)title; *s && n < IDEA_SLUG_BASE_MAX; s++) {
    unsigned char c = *s >= 'A' && *s <= 'Z' ? (unsigned char)(*s - 'A' + 'a') : *s;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      if (dash && n > 0 && n < IDEA_SLUG_BASE_MAX - 1) out[n++] = '-';
      out[n++] = (char)c;
      dash = false;
    } else {
      dash = true;
    }
  }
  out[n] = '\0';
  if (n == 0) snprintf(out, IDEA_SLUG_BASE_MAX + 1, "idea");
}

/* base, or base-2, base-3, ...: the first free idea slug. */
static int free_idea_slug(tg_call_ctx *cx, const char *base, char *out, size_t size) {
  char pattern[IDEA_SLUG_BASE_MAX + 3];
  snprintf(pattern, sizeof pattern, "%s-%%", base);
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(cx->db, "SELECT slug FROM ideas WHERE tenant_id = $1 AND (slug = $2 OR slug LIKE $3)",
                      json_pack("[sss]", cx->principal->tenant_id, base, pattern), &rows);
  if (r < 0) return r;
  for (size_t k = 1; k <= json_array_size(rows) + 1; k++) {
    if (k == 1) snprintf(out, size, "%s", base);
    else snprintf(out, size, "%s-%zu", base, k);
    bool taken = false;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) taken = taken || strcmp(row_str(row, "slug"), out) == 0;
    if (!taken) return TG_OK;
  }
  return TG_E_DB; /* n rows cannot take n + 1 distinct slugs */
}

static int idea_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *mission = NULL;
  int r = find_by_slug(cx, "missions", "missionSlug", tg_json_str(args, "missionSlug"), &mission);
  if (r < 0) return r;
  char base[IDEA_SLUG_BASE_MAX + 1], slug[IDEA_SLUG_BASE_MAX + 24];
  slugify(tg_json_str(args, "title"), base);
  if ((r = free_idea_slug(cx, base, slug, sizeof slug)) < 0) return r;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO ideas (id, tenant_id, mission_id, slug, title, created_at)"
                 " VALUES ($1, $2, $3, $4, $5, $6)",
                 json_pack("[ssOsss]", id, cx->principal->tenant_id, json_object_get(mission, "id"),
                           slug, tg_json_str(args, "title"), now),
                 NULL);
  if (r < 0) return r;
  tg_scope_ref ref = {0};
  set_id(ref.mission_id, row_str(mission, "id"));
  set_id(ref.idea_id, id);
  char summary[160];
  snprintf(summary, sizeof summary, "Idea %s created in mission %s", slug, row_str(mission, "slug"));
  r = activity(cx, "IDEA_CREATED", &ref, summary,
               json_pack("{s:s,s:s,s:s}", "ideaId", id, "slug", slug, "title", tg_json_str(args, "title")));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "ideaId", id, "slug", slug);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int work_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "slug"), *idea_slug = tg_json_str(args, "ideaSlug");
  _cleanup_json_ json_t *mission = NULL, *idea = NULL;
  int r = slug_taken(cx, "works", slug);
  if (r == TG_OK) r = find_by_slug(cx, "missions", "missionSlug", tg_json_str(args, "missionSlug"), &mission);
  if (r == TG_OK && idea_slug) r = find_by_slug(cx, "ideas", "ideaSlug", idea_slug, &idea);
  if (r < 0) return r;
  if (idea && strcmp(row_str(idea, "mission_id"), row_str(mission, "id")) != 0)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s,s:s}", "reason", "idea_of_another_mission", "ideaSlug",
                             idea_slug, "missionSlug", row_str(mission, "slug")),
                   "Idea %s belongs to another mission than %s.", idea_slug, row_str(mission, "slug"));
  const char *title = tg_json_str(args, "title") ? tg_json_str(args, "title") : slug;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO works (id, tenant_id, mission_id, idea_id, slug, title, created_at)"
                 " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                 json_pack("[ssOOsss]", id, cx->principal->tenant_id, json_object_get(mission, "id"),
                           idea ? json_object_get(idea, "id") : json_null(), slug, title, now),
                 NULL);
  if (r < 0) return r;
  tg_scope_ref ref = {0};
  set_id(ref.mission_id, row_str(mission, "id"));
  set_id(ref.idea_id, idea ? row_str(idea, "id") : NULL);
  set_id(ref.work_id, id);
  char summary[160];
  snprintf(summary, sizeof summary, "Work %s created in mission %s", slug, row_str(mission, "slug"));
  r = activity(cx, "WORK_CREATED", &ref, summary,
               json_pack("{s:s,s:s,s:s}", "workId", id, "slug", slug, "title", title));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "workId", id, "slug", slug);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const tg_handler_entry handlers[] = {
    {"work.task.create", task_create},     {"work.task.comment", task_comment},
    {"work.task.transition", task_transition}, {"work.task.assign", task_assign},
    {"work.task.approve", task_approve},   {"work.task.list", task_list},
    {"work.task.show", task_show},         {"work.mission.create", mission_create},
    {"work.mission.list", mission_list},   {"work.idea.create", idea_create},
    {"work.work.create", work_create},
};

const tg_provider tg_provider_work = {
    .name = "work",
    .spec_file = "work.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};

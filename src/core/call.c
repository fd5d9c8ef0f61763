#define _GNU_SOURCE
#include "core/call.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/approval.h"
#include "core/gates.h"
#include "core/run.h"
#include "domain/secret_scan.h"
#include "util/clock.h"
#include "util/cleanup.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

#define CALLED_AS_MAX 128 /* bytes of an unknown tool name kept in telemetry */

/* Everything one call accumulates on its way through. */
typedef struct call_state {
  const tg_env *env;
  const tg_call_request *req;
  tg_principal *principal;
  const tg_tool *tool;
  json_t *args;
  uint64_t started_ns;
  char run_id[TG_UUID_LEN + 1]; /* the run the telemetry row belongs to, "" for none */
  bool run_written;             /* the call's own run is committed */
  /* The telemetry row last written, and whether it is committed: a failure after the commit
   * (a git move given up) replaces it, so that the call keeps one row. */
  char telemetry_id[TG_UUID_LEN + 1];
  bool telemetry_committed;
  /* What the telemetry row says whatever the outcome (prepare_telemetry): made on the
   * caller's thread, so that the shared transaction, which runs one job at a time, adds only
   * the outcome. */
  char *step;        /* "tool:NAME" */
  char *args_text;   /* the arguments, truncated, as JSON */
  bool withheld;     /* they held a secret (or could not be scanned for one) */
  char *called_text; /* the name the caller used, truncated, as a JSON string */
  tg_refusal *approval;   /* the approval gate's refusal, when its record opens a request */
  char *approval_text;    /* what the request shows its approver (tg_approval_subject) */
  char approval_digest[65]; /* the call's approval digest once made, else "" */
  char approval_used[TG_UUID_LEN + 1]; /* the approval the call ran on, else "" */
  unsigned refusals; /* refused for its rate: the refusals its telemetry row stands for */
} call_state;

static void call_state_done(call_state *st) {
  tg_principal_free(st->principal);
  free(st->step);
  free(st->args_text);
  free(st->called_text);
  free(st->approval_text);
}

int tg_fail(tg_call_ctx *cx, tg_errcode code, json_t *details, const char *fmt, ...) {
  char *message = NULL;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&message, fmt, ap) < 0) message = NULL;
  va_end(ap);
  if (message) tg_utf8_mend(message); /* it may quote foreign bytes, or halve a character */
  json_decref(cx->error);
  cx->error = tg_error_envelope(code, message, details);
  cx->code = code;
  free(message);
  return TG_E_TOOL;
}

int tg_activity(tg_call_ctx *cx, const char *action_type, json_t *scope, const char *summary,
                json_t *details) {
  /* Its id is known from here, so that a git move published after the commit can name the
   * rows to take back should the move be given up (tg_activity_ids). */
  char id[TG_UUID_LEN + 1];
  if (tg_uuid7(id) < 0) {
    json_decref(details);
    return TG_E_IO;
  }
  /* A summary cut to its buffer may end within a character. */
  _cleanup_free_ char *text = strdup(summary);
  if (text) tg_utf8_mend(text);
  json_t *row = text ? json_pack("{s:s,s:s,s:s,s:o*,s:O*}", "id", id, "actionType", action_type,
                                 "summary", text, "details", details, "scope", scope)
                     : NULL;
  if (!text) json_decref(details);
  if (!row || json_array_append_new(cx->activity, row) < 0) return TG_E_NOMEM;
  return TG_OK;
}

json_t *tg_activity_ids(const tg_call_ctx *cx) {
  json_t *ids = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(cx->activity, i, row) {
    if (!ids || json_array_append(ids, json_object_get(row, "id")) < 0) {
      json_decref(ids);
      return NULL;
    }
  }
  return ids;
}

/* The scope ids an activity row carries when the handler named none: the caller's own. */
static void default_scope(const tg_principal *p, const char **mission, const char **idea,
                          const char **work) {
  *mission = *idea = *work = NULL;
  if (!p->scope_id) return;
  if (strcmp(p->scope_type, "mission") == 0) *mission = p->scope_id;
  if (strcmp(p->scope_type, "idea") == 0) *idea = p->scope_id;
  if (strcmp(p->scope_type, "work") == 0) *work = p->scope_id;
}

static int write_activity(tg_call_ctx *cx) {
  const tg_principal *p = cx->principal;
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  size_t i;
  json_t *row;
  json_array_foreach(cx->activity, i, row) {
    const char *mission, *idea, *work;
    json_t *scope = json_object_get(row, "scope");
    if (scope) {
      mission = json_string_value(json_object_get(scope, "missionId"));
      idea = json_string_value(json_object_get(scope, "ideaId"));
      work = json_string_value(json_object_get(scope, "workId"));
    } else {
      default_scope(p, &mission, &idea, &work);
    }
    const char *id = json_string_value(json_object_get(row, "id"));
    int r = tg_db_exec(
        cx->db,
        "INSERT INTO activity_log (id, tenant_id, mission_id, idea_id, work_id, actor_type,"
        " actor_id, action_type, summary, details, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        json_pack("[sss?s?s?ssssOs]", id, p->tenant_id, mission, idea, work,
                  p->kind == TG_PRINCIPAL_AGENT ? "agent" : "user", p->subject_id,
                  json_string_value(json_object_get(row, "actionType")),
                  json_string_value(json_object_get(row, "summary")),
                  json_object_get(row, "details") ? json_object_get(row, "details") : json_null(),
                  now),
        NULL);
    if (r < 0) return r;
  }
  return TG_OK;
}

/* The run of an agent's call that names none. It commits with the call's outcome, so it is
 * written once, already ended with its final status, started when the call did (a call
 * that waited on its client's answers may end minutes later); the call's duration is in its
 * telemetry row. */
static int open_own_run(call_state *st, tg_db *db, const char *status) {
  if (st->principal->kind != TG_PRINCIPAL_AGENT) return TG_OK;
  if (st->req->run_id) {
    snprintf(st->run_id, sizeof st->run_id, "%s", st->req->run_id);
    return TG_OK;
  }
  if (!*st->run_id && tg_uuid7(st->run_id) < 0) return TG_E_IO;
  int64_t now_ms = tg_now_ms();
  char started[TG_ISO_LEN + 1], now[TG_ISO_LEN + 1];
  tg_iso8601(now_ms - (int64_t)((tg_monotonic_ns() - st->started_ns) / 1000000), started);
  tg_iso8601(now_ms, now);
  return tg_run_insert(db, st->run_id, st->principal->tenant_id, st->principal->subject_id,
                       status, "call", started, now, NULL);
}

static const char *level_of(tg_errcode code) {
  if (code == TG_ERR_NONE) return "INFO";
  if (code == TG_ERR_INTERNAL_ERROR || code == TG_ERR_PROVIDER_ERROR) return "ERROR";
  return "WARN";
}

/* The arguments as the secret scan reads them (scan_view), as much as cap bytes: for a
 * telemetry row, as much of them as it keeps and a margin for a secret that the cut would
 * halve. */
#define ARGS_SCAN_BYTES (2 * TG_ARGS_LOG_MAX)
typedef struct view {
  char *text;
  size_t len, cap;
} view;

static void view_put(view *v, const char *text, size_t len) {
  size_t n = len < v->cap - v->len ? len : v->cap - v->len;
  memcpy(v->text + v->len, text, n);
  v->len += n;
}

/* A member as KEY=VALUE, each string on a line of its own, decoded (a token after a newline
 * or a quote starts a word there, as it does in the text the tool received). */
static void scan_view(json_t *value, view *v) {
  const char *key;
  json_t *member;
  size_t i;
  if (json_is_string(value)) {
    view_put(v, json_string_value(value), json_string_length(value));
    view_put(v, "\n", 1);
  } else if (json_is_object(value)) {
    json_object_foreach(value, key, member) {
      if (v->len == v->cap) return;
      view_put(v, key, strlen(key));
      view_put(v, "=", 1);
      if (!json_is_string(member)) view_put(v, "\n", 1);
      scan_view(member, v);
    }
  } else if (json_is_array(value)) {
    json_array_foreach(value, i, member) {
      if (v->len == v->cap) return;
      scan_view(member, v);
    }
  }
}

/* Whether text, or as much of it as bytes, holds a secret; one that cannot be scanned (past
 * the scan's bound on backtracking, or no rules) counts as one. hit names the rule. */
static bool holds_secret(const char *text, size_t bytes, tg_secret_hit *hit) {
  *hit = (tg_secret_hit){0};
  return tg_secret_scan(text, bytes, hit) != 0;
}

/* Arguments that hold a secret (the body of an edit refused for it, say) are withheld from
 * the telemetry row, lest the secret outlive its call there. */
static json_t *logged_args(json_t *args, bool *withheld) {
  char scanned[ARGS_SCAN_BYTES];
  view v = {.text = scanned, .cap = sizeof scanned};
  scan_view(args, &v);
  tg_secret_hit hit;
  *withheld = holds_secret(v.text, v.len, &hit);
  if (!*withheld) return tg_json_truncate(args, TG_ARGS_LOG_MAX);
  _cleanup_free_ char *text = tg_json_text(args);
  if (!text) return NULL;
  json_int_t bytes = (json_int_t)strlen(text);
  return hit.rule
             ? json_pack("{s:s,s:s,s:I}", "withheld", "secret", "rule", hit.rule, "bytes", bytes)
             : json_pack("{s:s,s:I}", "withheld", "unscanned", "bytes", bytes);
}

/* The parts of the telemetry row that do not depend on the outcome; once per call. */
static int prepare_telemetry(call_state *st) {
  if (st->step) return TG_OK;
  const char *name = st->req->tool;
  size_t called_len = tg_utf8_prefix(name, CALLED_AS_MAX);
  _cleanup_json_ json_t *called = json_stringn(name, called_len);
  if (!called) { /* not UTF-8: the row must stay readable */
    name = "?";
    called_len = 1;
    called = json_string(name);
  }
  _cleanup_json_ json_t *args = logged_args(st->args, &st->withheld);
  if (!called || !args) return TG_E_NOMEM;
  if (st->tool ? asprintf(&st->step, "tool:%s", st->tool->name) < 0
               : asprintf(&st->step, "tool:%.*s", (int)called_len, name) < 0) {
    st->step = NULL;
    return TG_E_NOMEM;
  }
  st->called_text = json_dumps(called, JSON_ENCODE_ANY);
  st->args_text = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
  return st->called_text && st->args_text ? TG_OK : TG_E_NOMEM;
}

/* The agent_run_logs row of seed 000 §5. Its metadata is the prepared JSON texts joined
 * with the outcome's numbers and names, which need no escaping. */
static int write_telemetry(call_state *st, tg_db *db, tg_errcode code, const char *message,
                           int64_t cost_cents) {
  int r = prepare_telemetry(st);
  if (r < 0) return r;
  const tg_principal *p = st->principal;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  double ms = (double)(tg_monotonic_ns() - st->started_ns) / 1e6;
  _cleanup_free_ char *line = NULL;
  bool told = code && message;
  if (asprintf(&line, "%s%s%.*s", code ? tg_errcode_name(code) : "ok", told ? ": " : "",
               TG_UTF8_CUT(told ? message : "", 200)) < 0)
    return TG_E_NOMEM;
  _cleanup_free_ char *meta = NULL;
  const char *task = st->req->task_id;
  const char *approval = *st->approval_used ? st->approval_used : NULL;
  char refusals[32] = "";
  if (st->refusals) snprintf(refusals, sizeof refusals, ",\"refusals\":%u", st->refusals);
  if (asprintf(&meta,
               "{\"args\":%s,\"durationMs\":%.3f,\"costCents\":%lld,\"surface\":\"%s\","
               "\"calledAs\":%s%s%s%s%s%s%s%s%s%s%s}",
               st->args_text, ms, (long long)cost_cents, tg_surface_name(st->req->surface),
               st->called_text, code ? ",\"code\":\"" : "", code ? tg_errcode_name(code) : "",
               code ? "\"" : "", task ? ",\"taskId\":\"" : "", task ? task : "",
               task ? "\"" : "", approval ? ",\"approvalId\":\"" : "", approval ? approval : "",
               approval ? "\"" : "", refusals) < 0)
    return TG_E_NOMEM;
  if (st->telemetry_committed)
    return tg_db_exec(db,
                      "UPDATE agent_run_logs SET level = $2, message = $3, metadata = $4"
                      " WHERE id = $1",
                      json_pack("[ssss]", st->telemetry_id, level_of(code), line, meta), NULL);
  memcpy(st->telemetry_id, id, sizeof id);
  r = tg_db_exec(db,
                 "INSERT INTO agent_run_logs (id, tenant_id, run_id, principal_id, step,"
                 " level, message, metadata, created_at)"
                 " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                 json_pack("[sss?ssssss]", id, p->tenant_id, *st->run_id ? st->run_id : NULL,
                           p->id, st->step, level_of(code), line, meta, now),
                 NULL);
  /* The count the run's cap reads (gate_run_cap), kept only for the tools that have one. */
  if (r == TG_OK && code == TG_ERR_NONE && *st->run_id && st->tool && st->tool->max_per_run)
    r = tg_run_count_success(db, st->run_id, st->tool->name, 1);
  return r;
}

/* A telemetry row of principal_id's that no call of its writes (tg_call_log_end,
 * tg_call_write_rate_refusals), in the caller's transaction: in run_id when that is a
 * running run of principal_id's agent, else in none; nothing for a principal gone. */
static int log_row(tg_db *db, const char *principal_id, const char *run_id, const char *step,
                   const char *level, const char *message, const char *meta) {
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  return tg_db_exec(db,
                    "INSERT INTO agent_run_logs (id, tenant_id, run_id, principal_id, step,"
                    " level, message, metadata, created_at)"
                    " SELECT $1, p.tenant_id, (SELECT r.id FROM agent_runs r JOIN agents a"
                    "  ON a.id = r.agent_id WHERE r.id = $2 AND a.principal_id = p.id"
                    "  AND r.status = 'running'), p.id, $3, $4, $5, $6, $7 FROM principals p"
                    " WHERE p.id = $8",
                    json_pack("[ss?ssssss]", id, run_id, step, level, message, meta, now,
                              principal_id),
                    NULL);
}

int tg_call_log_end(tg_db *db, const char *principal_id, const char *tool, const char *run_id,
                    const char *task_id, const char *level, const char *why) {
  _cleanup_free_ char *step = NULL, *meta = NULL;
  _cleanup_json_ json_t *meta_json = json_pack("{s:s,s:b,s:s*}", "surface",
                                               tg_surface_name(TG_SURFACE_MCP), "end", 1,
                                               "taskId", task_id);
  if (asprintf(&step, "tool:%s", tool ? tool : "?") < 0) step = NULL;
  if (!step || !meta_json || !(meta = json_dumps(meta_json, JSON_COMPACT))) return TG_E_NOMEM;
  return log_row(db, principal_id, run_id, step, level, why, meta);
}

/* The row of tg_call_write_rate_refusals for one caller, in the caller's transaction. */
static int log_refusals(tg_db *db, const char *principal_id, unsigned refusals) {
  _cleanup_free_ char *message = NULL, *meta = NULL;
  if (asprintf(&message, "rate_limited: %u call%s refused for the caller's rate, counted in no "
               "row before", refusals, refusals == 1 ? "" : "s") < 0)
    message = NULL;
  if (asprintf(&meta, "{\"code\":\"rate_limited\",\"refusals\":%u}", refusals) < 0) meta = NULL;
  if (!message || !meta) return TG_E_NOMEM;
  return log_row(db, principal_id, NULL, "tool:?", "WARN", message, meta);
}

int tg_call_write_rate_refusals(tg_rate_limit *limit, tg_db *db, bool all) {
  tg_rate_tally *todo;
  size_t n;
  int taken = tg_rate_limit_take_unwritten(limit, all, &todo, &n);
  if (taken < 0) tg_log(TG_LOG_WARN, "calls refused for their rate: no memory to count some");
  int r = TG_OK;
  if (n) {
    r = all ? tg_db_begin(db) : tg_db_try_begin(db);
    for (size_t i = 0; r == TG_OK && i < n; i++)
      r = log_refusals(db, todo[i].principal_id, todo[i].refusals);
    r = r == TG_OK ? tg_db_commit(db) : r;
  }
  if (r < 0) {
    tg_db_rollback(db);
    /* Another writer holding the lock is no fault: the next look tries again. */
    if (r != TG_E_BUSY || all)
      tg_log(TG_LOG_WARN, "calls refused for their rate: the count of %zu caller(s) was not "
             "written%s: %s", n, all ? " before the server stopped" : ", tried again later",
             tg_db_errmsg(db));
    for (size_t i = 0; i < n; i++)
      tg_rate_limit_give_back(limit, todo[i].principal_id, todo[i].refusals);
  }
  tg_rate_tallies_free(todo, n);
  return r < 0 ? r : taken;
}

/* The digest of this call's approval, made once; NULL without memory. */
static const char *approval_digest(call_state *st) {
  if (!*st->approval_digest &&
      tg_approval_subject(st->tool, st->args, NULL, st->approval_digest) < 0)
    return NULL;
  return st->approval_digest;
}

/* Changes the approval gate's refusal st->approval (answered after) to say why it asks for
 * nothing. details is stolen. */
static void approval_refused(call_state *st, json_t *details, const char *message) {
  tg_refusal *refusal = st->approval;
  snprintf(refusal->message, sizeof refusal->message, "%s", message);
  if (details) json_object_update(refusal->details, details);
  json_decref(details);
  st->approval = NULL;
}

/* Whether the held call can be shown to an approver whole: its arguments fit what a request
 * keeps, and hold nothing that looks like a secret (a request keeps them whole, so they are
 * scanned whole). Else the refusal says so, and no request opens. */
static bool approval_reviewable(call_state *st) {
  char *text = NULL;
  if (tg_approval_subject(st->tool, st->args, &text, st->approval_digest) < 0) {
    approval_refused(st, NULL, "The call could not be put to an approver (out of memory).");
    return false;
  }
  st->approval_text = text;
  size_t len = strlen(text);
  _cleanup_free_ char *scanned = len < TG_APPROVAL_ARGS_MAX ? malloc(len + 1) : NULL;
  view v = {.text = scanned, .cap = len + 1};
  tg_secret_hit hit = {0};
  if (scanned) scan_view(st->args, &v);
  if (scanned && !holds_secret(v.text, v.len, &hit)) return true;
  const char *why = len >= TG_APPROVAL_ARGS_MAX ? "too_large" : scanned ? "secret" : "no_memory";
  approval_refused(st,
                   json_pack("{s:s,s:s,s:s*,s:i}", "reason", "not_reviewable", "why", why, "rule",
                             hit.rule, "maxBytes", TG_APPROVAL_ARGS_MAX),
                   "This call is held for approval, but an approver cannot be shown its arguments"
                   " (past 64 KiB, or holding what looks like a secret): it cannot be approved.");
  return false;
}

/* In the transaction of a held call's refusal: opens its request (in a savepoint of its own,
 * so that a failure loses only the request, never the refusal's telemetry row). */
static int open_approval(call_state *st, tg_db *db, char id[TG_UUID_LEN + 1]) {
  int r = tg_db_exec(db, "SAVEPOINT approval", NULL, NULL);
  if (r < 0) return r;
  int opened = tg_approval_open(db, st->principal, st->tool->name, st->approval_digest,
                                st->approval_text, *st->run_id ? st->run_id : NULL, id);
  if (opened < 0) {
    *id = '\0';
    r = tg_db_exec(db, "ROLLBACK TO approval", NULL, NULL);
  }
  if (r == TG_OK) r = tg_db_exec(db, "RELEASE approval", NULL, NULL);
  if (opened == TG_E_TOO_LARGE) {
    char message[160];
    snprintf(message, sizeof message,
             "%d calls of this caller already wait for an approval: no more is asked for until"
             " some are decided.", TG_APPROVAL_PENDING_MAX);
    approval_refused(st, json_pack("{s:s,s:i}", "reason", "too_many_waiting", "max",
                                   TG_APPROVAL_PENDING_MAX), message);
  } else if (opened < 0) {
    tg_log(TG_LOG_ERROR, "call to %s: its approval request was not opened: %s", st->tool->name,
           tg_status_text(opened));
  }
  return r;
}

/* Refusals and failures keep their telemetry row in a transaction of their own, after any
 * rollback: the rollback must not erase the evidence. A refused call is no run of its own (it
 * never started); a call that ran and failed records its run as failed, or as cancelled when
 * its handler learnt that its client (or a stopping server) cancelled it, so that an operator
 * tells the two apart. */
static int record_failure(call_state *st, tg_errcode code, const char *message, bool ran) {
  tg_db *db = st->env->db;
  if (!ran && !st->req->run_id) *st->run_id = '\0'; /* no run of its own was written */
  const tg_client_channel *ch = st->req->client;
  bool cancelled = ch && ch->cancel_heard && ch->cancel_heard(ch->self);
  /* Scanned before the write lock is taken, which every writer waits for. A message may name
   * an argument (a branch, a slug): it is kept only where no secret was seen. */
  tg_secret_hit hit;
  if (prepare_telemetry(st) < 0 || st->withheld ||
      (message && holds_secret(message, strlen(message), &hit)))
    message = NULL;
  char approval_id[TG_UUID_LEN + 1] = "";
  bool opens = st->approval && approval_reviewable(st);
  int r = tg_db_begin(db);
  if (r == TG_OK && opens) r = open_approval(st, db, approval_id);
  if (r == TG_OK && ran && !st->run_written)
    r = open_own_run(st, db, cancelled ? "cancelled" : "failed");
  else if (r == TG_OK && ran) /* committed, then an after-commit step failed */
    r = tg_db_exec(db, "UPDATE agent_runs SET status = 'failed' WHERE id = $1",
                   json_pack("[s]", st->run_id), NULL);
  /* Its row becomes the failure's: the success counted with it for the run's cap goes too. */
  if (r == TG_OK && st->telemetry_committed && *st->run_id && st->tool && st->tool->max_per_run)
    r = tg_run_count_success(db, st->run_id, st->tool->name, -1);
  if (r == TG_OK) r = write_telemetry(st, db, code, message, 0);
  if (r == TG_OK) r = tg_db_commit(db);
  if (r == TG_OK && *approval_id && st->approval)
    json_object_set_new(st->approval->details, "approvalId", json_string(approval_id));
  if (r < 0) {
    tg_db_rollback(db);
    tg_log(TG_LOG_ERROR, "telemetry of a failed call to %s was not written: %s",
           st->tool ? st->tool->name : "an unknown tool", tg_db_errmsg(db));
  }
  return r;
}

static int answer(tg_call_result *ret, tg_errcode code, const char *message, json_t *details) {
  ret->code = code;
  ret->value = tg_error_envelope(code, message, details);
  return TG_E_TOOL;
}

/* A caller that could not be loaded (status): none by that id, or the database failed. */
static int unread_caller(tg_call_result *ret, int status) {
  return status == TG_E_NOTFOUND ? answer(ret, TG_ERR_PERMISSION_DENIED, "Unknown caller.", NULL)
                                 : answer(ret, TG_ERR_INTERNAL_ERROR, NULL, NULL);
}

/* Answers a refusal by a gate and writes its telemetry. details is stolen. */
static int reject(call_state *st, tg_call_result *ret, tg_errcode code, const char *message,
                  json_t *details) {
  if (!st->req->dry_run) record_failure(st, code, message, false);
  return answer(ret, code, message, details);
}

/* Refuses the call of a tool the catalog does not hold. Its row goes in the run the call
 * names when the run gate let it in (gates, as decide set it), as any other refusal's does. */
static int unknown_tool(call_state *st, tg_call_result *ret, int gates) {
  const char *name = st->req->tool;
  if (gates == 0 && st->req->run_id) snprintf(st->run_id, sizeof st->run_id, "%s", st->req->run_id);
  return reject(st, ret, TG_ERR_NOT_FOUND, "No tool by that name.",
                json_pack("{s:s%}", "tool", name, tg_utf8_prefix(name, CALLED_AS_MAX)));
}

/* Answers internal_error for a failure (status) that is no tool's error envelope; the log
 * says which, and what the database said when it was the database. */
static int internal(call_state *st, tg_call_result *ret, const char *what, int status,
                    bool ran) {
  bool db = status == TG_E_DB || status == TG_E_BUSY || status == TG_E_CONSTRAINT;
  tg_log(TG_LOG_ERROR, "call to %s: %s: %s%s%s", st->tool ? st->tool->name : st->req->tool,
         what, tg_status_text(status), db ? ": " : "", db ? tg_db_errmsg(st->env->db) : "");
  /* A database another writer kept locked is worth a retry: the client is told so. */
  bool busy = status == TG_E_BUSY;
  const char *message = busy ? "The database stayed locked by another writer; retry."
                             : tg_errcode_message(TG_ERR_INTERNAL_ERROR);
  if (!st->req->dry_run) record_failure(st, TG_ERR_INTERNAL_ERROR, message, ran);
  return answer(ret, TG_ERR_INTERNAL_ERROR, message,
                busy ? json_pack("{s:s}", "reason", "database_busy") : NULL);
}

bool tg_call_test_die_after_commit;

static int add_step(tg_call_ctx *cx, tg_after_fn fn, void *arg, void (*free_arg)(void *),
                    bool on_failure) {
  if (cx->n_after == cx->after_room) {
    /* A step a repository the call takes (a listing takes every one): no fixed number. */
    size_t room = cx->after_room ? 2 * cx->after_room : 4;
    struct tg_call_after_step *grown = realloc(cx->after, room * sizeof *grown);
    if (!grown) {
      if (free_arg) free_arg(arg);
      return TG_E_NOMEM;
    }
    cx->after = grown;
    cx->after_room = room;
  }
  cx->after[cx->n_after++] = (struct tg_call_after_step){fn, arg, free_arg, on_failure};
  return TG_OK;
}

int tg_call_after(tg_call_ctx *cx, tg_after_fn fn, void *arg, void (*free_arg)(void *)) {
  return add_step(cx, fn, arg, free_arg, false);
}

int tg_call_on_failure(tg_call_ctx *cx, tg_after_fn fn, void *arg, void (*free_arg)(void *)) {
  return add_step(cx, fn, arg, free_arg, true);
}

/* Runs the steps for how the call's transaction ended (committed: the after-commit ones,
 * the first failure stopping the rest; else the on-failure ones), and frees them all. */
static int finish_after(tg_call_ctx *cx, bool committed) {
  int r = TG_OK;
  for (size_t i = 0; i < cx->n_after; i++) {
    struct tg_call_after_step *step = &cx->after[i];
    bool runs = step->on_failure != committed && !tg_call_test_die_after_commit;
    if (runs && committed && r == TG_OK) r = step->fn(cx, step->arg);
    if (runs && !committed && step->fn(cx, step->arg) < 0)
      tg_log(TG_LOG_WARN, "call to %s: a step after its rollback failed", cx->tool->name);
    if (step->free_arg) step->free_arg(step->arg);
  }
  free(cx->after);
  cx->after = NULL;
  cx->n_after = cx->after_room = 0;
  return r;
}

/* The handler's failure as the call's answer, with its telemetry row. */
static int handler_failed(call_state *st, tg_call_ctx *cx, tg_call_result *ret) {
  json_t *error = json_object_get(cx->error, "error");
  record_failure(st, cx->code, json_string_value(json_object_get(error, "message")), true);
  ret->code = cx->code;
  ret->value = cx->error;
  return TG_E_TOOL;
}

/* The handler, and the checks of its result: the surface's, and against the output schema. */
static int run_handler(call_state *st, tg_call_ctx *cx, json_t **result) {
  int r = st->tool->handler(cx, st->args, result);
  if (r == TG_OK && cx->client && cx->client->check_result)
    r = cx->client->check_result(cx->client->self, cx, *result);
  if (r == TG_OK && !tg_schema_validate(st->tool->output, *result, NULL, 0)) {
    tg_log(TG_LOG_ERROR, "tool %s returned a result that does not match its outputSchema",
           st->tool->name);
    r = TG_E_INVAL;
  }
  return r;
}

/* An interactive handler runs before the transaction on a read-only connection: it may wait
 * for the client, and must not hold the write lock meanwhile. What it does is its activity
 * rows, written in the transaction that follows. */
static int run_interactive(call_state *st, tg_call_ctx *cx, json_t **result) {
  int r = tg_db_read_only(cx->db, true);
  if (r == TG_OK) r = run_handler(st, cx, result);
  int back = tg_db_read_only(cx->db, false);
  return r == TG_OK ? back : r;
}

/* What a call writes: its run, the handler (unless it ran before), the activity rows it
 * queued and the telemetry row, as one job of a shared transaction (tg_db_batch). It may run
 * on another thread, on the connection it is given; the call's own connection is back in
 * cx->db when it returns, for the after-commit steps and a failure's record. */
typedef struct write_job {
  call_state *st;
  tg_call_ctx *cx;
  json_t **result;
  bool ran;           /* the handler ran */
  bool refused;       /* a gate refused in the transaction (refusal): nothing written */
  bool caller_gone;   /* decided again in the transaction, the caller is no more */
  tg_refusal refusal;
  /* The principal a decision in the transaction replaced: it may be its connection's kept
   * one, so the call's own thread releases it. */
  tg_principal *replaced;
} write_job;

/* Whether the call's gates hold in its write transaction. If the caller's permissions moved
 * since they ran (the authorization epoch), the call is decided again here, on what the
 * transaction reads; otherwise the gates that read rows other calls write run again
 * (tg_gates_recheck). A refusal sets job->refused and answers TG_E_TOOL. */
static int still_allowed(write_job *job, tg_db *db) {
  call_state *st = job->st;
  int64_t epoch;
  int r = tg_auth_epoch(db, &epoch);
  if (r < 0) return r;
  tg_gate_input in = {.env = st->env, .db = db, .principal = st->principal, .tool = st->tool,
                      .surface = st->req->surface, .args = st->args, .run_id = st->req->run_id,
                      .approval_digest = *st->approval_digest ? st->approval_digest : NULL};
  if (epoch == st->principal->epoch) {
    r = tg_gates_recheck(&in, &job->refusal);
  } else {
    tg_principal *fresh = NULL;
    r = tg_principal_load(db, st->req->principal_id, &fresh);
    if (r == TG_E_NOTFOUND) job->caller_gone = true;
    if (r < 0) return r == TG_E_NOTFOUND ? TG_E_TOOL : r;
    job->replaced = st->principal;
    in.principal = st->principal = fresh;
    r = tg_gates_run(&in, &job->refusal, NULL);
  }
  if (r != 1) return r;
  job->refused = true;
  return TG_E_TOOL;
}

int tg_call_recheck(tg_call_ctx *cx) {
  tg_principal *fresh = NULL;
  int r = tg_principal_load(cx->db, cx->principal->id, &fresh);
  if (r == TG_E_NOTFOUND)
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED, NULL, "Unknown caller.");
  if (r < 0) return r;
  tg_gate_input in = {.env = cx->env, .principal = fresh, .tool = cx->tool,
                      .surface = cx->surface, .listing = true};
  tg_refusal refusal = {0};
  r = tg_gates_run(&in, &refusal, NULL);
  tg_principal_free(fresh);
  if (r == 1)
    r = tg_fail(cx, refusal.code, TAKE_PTR(refusal.details), "%s", refusal.message);
  tg_refusal_done(&refusal);
  return r;
}

/* A call cancelled (by its client, a stopping server or a revoked token) by the time its
 * write is queued for commit fails here, so that what a handler that never looked wrote is
 * rolled back: no one is left to be told it happened. The shared commit may come a little
 * later (tg_db_batch): a cancellation then finds the work done, and only its answer held. */
static int unless_cancelled(tg_call_ctx *cx) {
  const tg_client_channel *ch = cx->client;
  if (!ch || !ch->cancelled || !ch->cancelled(ch->self)) return TG_OK;
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL,
                 "The call was cancelled before what it did was written");
}

/* The approval the gate found (and found again in this transaction) is used by the call that
 * ends: undone with it when it fails, left for the next round when the handler asks its
 * client for input (a call may take several rounds, each its own tg_call). */
static int use_approval(call_state *st, tg_db *db, json_t *result) {
  if (!tg_approval_needed(st->principal, st->tool, st->req->surface) ||
      tg_client_asks_input(st->tool, result))
    return TG_OK;
  const char *digest = approval_digest(st);
  return digest ? tg_approval_use(db, st->principal->id, st->tool->name, digest, st->approval_used)
                : TG_E_NOMEM;
}

static int write_call(void *arg, tg_db *db) {
  write_job *job = arg;
  int r = still_allowed(job, db);
  if (r < 0) return r;
  call_state *st = job->st;
  tg_call_ctx *cx = job->cx;
  cx->db = db;
  cx->principal = st->principal; /* the one decided on last (still_allowed) */
  r = open_own_run(st, db, "completed");
  if (r == TG_OK && !job->ran) {
    job->ran = true;
    r = run_handler(st, cx, job->result);
  }
  if (r == TG_OK) r = use_approval(st, db, *job->result);
  if (r == TG_OK) r = unless_cancelled(cx);
  if (r == TG_OK) r = write_activity(cx);
  if (r == TG_OK) r = write_telemetry(st, db, TG_ERR_NONE, NULL, cx->cost_cents);
  cx->db = st->env->db;
  return r;
}

/* Loads the caller into st and runs its gates, from one snapshot ended before anything is
 * written. kept: start from the principal this connection keeps, without reading whether it
 * still stands (the write checks that, still_allowed); a refusal is answered only on current
 * permissions, so it is then decided again on a fresh principal. Answers the load's status
 * (TG_E_NOTFOUND: no such caller); *gates is tg_gates_run's answer, or, for no tool,
 * tg_gates_check_run's. */
static int decide(call_state *st, bool kept, tg_refusal *refusal, json_t *trace, int *gates) {
  tg_db *db = st->env->db;
  const char *id = st->req->principal_id;
  *gates = 0;
  bool snapshot = tg_db_snapshot(db);
  int r = kept ? tg_principal_load_kept(db, id, &st->principal)
               : tg_principal_load(db, id, &st->principal);
  bool first_in_write = st->req->run_held && !st->req->dry_run && st->tool &&
                        !(st->tool->flags & TG_TOOL_INTERACTIVE);
  tg_gate_input in = {.env = st->env, .db = db, .principal = st->principal, .tool = st->tool,
                      .surface = st->req->surface, .args = st->args, .run_id = st->req->run_id,
                      .run_read_later = first_in_write};
  if (r == TG_OK && st->tool) *gates = tg_gates_run(&in, refusal, trace);
  else if (r == TG_OK)
    *gates = tg_gates_check_run(&in, refusal); /* see unknown_tool */
  /* A refusal is decided on what the gates read, the held run too: else another gate's
   * refusal could be recorded in a run that ended, or ask for an approval there. */
  bool again = *gates == 1 && in.run_read_later;
  in.run_read_later = false;
  if (r == TG_OK && kept && *gates == 1) {
    tg_principal *fresh = NULL;
    r = tg_principal_load(db, id, &fresh);
    if (r == TG_OK && fresh != st->principal) {
      tg_principal_free(st->principal);
      in.principal = st->principal = fresh;
      again = true;
    } else {
      tg_principal_free(fresh);
    }
  }
  if (r == TG_OK && again) {
    tg_refusal_done(refusal);
    *gates = tg_gates_run(&in, refusal, trace);
  }
  tg_db_snapshot_end(db, snapshot);
  return r;
}

/* Answers a gate's refusal. The run gate runs first, so any other refusal names a running
 * run of this agent. */
static int refused(call_state *st, tg_call_result *ret, tg_refusal *refusal) {
  const char *run = st->req->run_id && strcmp(refusal->gate, "run") != 0 ? st->req->run_id : "";
  snprintf(st->run_id, sizeof st->run_id, "%s", run);
  if (strcmp(refusal->gate, "approval") == 0 && refusal->code == TG_ERR_PRECONDITION_FAILED &&
      !json_object_get(refusal->details, "approvalId"))
    st->approval = refusal;
  /* record_failure may change the refusal (open_approval) before it is answered. */
  if (!st->req->dry_run) record_failure(st, refusal->code, refusal->message, false);
  return answer(ret, refusal->code, refusal->message, TAKE_PTR(refusal->details));
}

/* The handler, its activity rows, the run and the telemetry row: one transaction; then the
 * handler's after-commit steps. */
static int execute(call_state *st, tg_call_result *ret) {
  tg_db *db = st->env->db;
  bool interactive = st->tool->flags & TG_TOOL_INTERACTIVE;
  const tg_client_channel *client = st->req->client;
  tg_client_channel no_wait;
  if (client && !interactive) {
    no_wait = *client;
    no_wait.ask = NULL;
    no_wait.close_stream = NULL;
    no_wait.detach = NULL;
    client = &no_wait;
  }
  tg_call_ctx cx = {.env = st->env, .db = db, .tool = st->tool, .principal = st->principal,
                    .surface = st->req->surface, .client = client, .activity = json_array()};
  _cleanup_json_ json_t *activity = cx.activity;
  if (!activity) return internal(st, ret, "no activity record", TG_E_NOMEM, false);
  /* The run's id is known before its row is written: an interactive handler runs first. */
  if (st->req->run_id)
    snprintf(st->run_id, sizeof st->run_id, "%s", st->req->run_id);
  else if (st->principal->kind == TG_PRINCIPAL_AGENT && tg_uuid7(st->run_id) < 0)
    return internal(st, ret, "no run id", TG_E_NOMEM, false);
  cx.run_id = *st->run_id ? st->run_id : NULL;
  if (prepare_telemetry(st) < 0) return internal(st, ret, "no telemetry row", TG_E_NOMEM, false);

  /* Made before the write lock is taken, which the approval gate runs under again. */
  if (tg_approval_needed(st->principal, st->tool, st->req->surface) && !approval_digest(st))
    return internal(st, ret, "no approval digest", TG_E_NOMEM, false);
  json_t *result = NULL;
  int r = interactive ? run_interactive(st, &cx, &result) : TG_OK;
  write_job job = {.st = st, .cx = &cx, .result = &result, .ran = interactive};
  if (r == TG_OK) r = tg_db_batch(db, write_call, &job);
  if (r != TG_OK) *st->approval_used = '\0'; /* its use rolled back with the call */
  tg_principal_free(job.replaced);
  if (job.refused || job.caller_gone) {
    finish_after(&cx, false);
    json_decref(result);
    r = job.refused ? refused(st, ret, &job.refusal) : unread_caller(ret, TG_E_NOTFOUND);
    tg_refusal_done(&job.refusal);
    return r;
  }
  tg_refusal_done(&job.refusal);
  if (r == TG_OK) {
    st->run_written = *st->run_id && !st->req->run_id;
    st->telemetry_committed = true;
    r = finish_after(&cx, true);
    if (r == TG_OK) {
      ret->code = TG_ERR_NONE;
      ret->value = result;
      return TG_OK;
    }
    json_decref(result);
    if (r == TG_E_TOOL && cx.error) return handler_failed(st, &cx, ret);
    json_decref(cx.error);
    return internal(st, ret, "an after-commit step failed", r, true);
  }
  finish_after(&cx, false);
  json_decref(result);
  if (r == TG_E_TOOL && cx.error) return handler_failed(st, &cx, ret);
  json_decref(cx.error);
  return internal(st, ret,
                  job.ran ? "handler or commit failed" : "the call could not be decided or written",
                  r, job.ran);
}

/* A call past its caller's rate (rate), refused before the gates read anything for it. Its
 * telemetry row, when it gets one, is written for the caller loaded afresh, and names no
 * run, which was not looked at; the refusals it would have counted go back to the count when
 * it cannot be written. */
static int rate_limited(call_state *st, tg_call_result *ret, const tg_rate_verdict *rate) {
  char message[160];
  snprintf(message, sizeof message,
           "Too many calls: a caller may make %u at once, then %u every %u s; the next may go "
           "in %lld ms.", rate->calls, rate->calls, rate->seconds, (long long)rate->retry_after_ms);
  json_t *details = json_pack("{s:I,s:I,s:I}", "retryAfterMs", (json_int_t)rate->retry_after_ms,
                              "limit", (json_int_t)rate->calls, "perSeconds",
                              (json_int_t)rate->seconds);
  if (rate->refusals) {
    int r = tg_principal_load(st->env->db, st->req->principal_id, &st->principal);
    st->refusals = rate->refusals;
    if (r == TG_OK) r = record_failure(st, TG_ERR_RATE_LIMITED, message, false);
    if (r == TG_E_NOTFOUND) /* no caller to count them for */
      tg_log(TG_LOG_WARN, "calls refused for their rate: %u refusal(s) of a caller gone were "
             "not written", rate->refusals);
    else if (r < 0)
      tg_rate_limit_give_back(st->env->rate_limit, st->req->principal_id, rate->refusals);
  }
  return answer(ret, TG_ERR_RATE_LIMITED, message, details);
}

int tg_call_take_rate(const tg_env *env, const tg_call_request *req, tg_call_result *ret) {
  *ret = (tg_call_result){0};
  if (!env->rate_limit || req->dry_run || req->rate_counted) return TG_OK;
  tg_rate_verdict rate;
  int r = tg_rate_limit_take(env->rate_limit, req->principal_id, &rate);
  if (r < 0) {
    tg_log(TG_LOG_ERROR, "call to %.128s: its rate could not be counted: %s", req->tool,
           tg_status_text(r));
    return answer(ret, TG_ERR_INTERNAL_ERROR, NULL, NULL);
  }
  if (rate.allowed) return TG_OK;
  _cleanup_json_ json_t *empty = req->args ? NULL : json_object();
  call_state st = {.env = env, .req = req, .args = req->args ? req->args : empty,
                   .started_ns = tg_monotonic_ns(),
                   .tool = tg_registry_find(env->registry, req->tool)};
  if (st.args) {
    r = rate_limited(&st, ret, &rate);
  } else {
    tg_rate_limit_give_back(env->rate_limit, req->principal_id, rate.refusals);
    r = answer(ret, TG_ERR_INTERNAL_ERROR, NULL, NULL);
  }
  call_state_done(&st);
  return r;
}

static int dry_run_answer(call_state *st, tg_call_result *ret, int gates, tg_refusal *refusal,
                          json_t *trace) {
  json_t *value = json_pack("{s:b,s:s,s:O}", "allowed", gates == 0, "tool", st->tool->name,
                            "gates", trace);
  if (value && gates == 1)
    json_object_set_new(value, "error",
                        tg_error_envelope(refusal->code, refusal->message,
                                          json_incref(refusal->details)));
  ret->gates = json_incref(trace);
  ret->value = value;
  ret->code = gates == 0 ? TG_ERR_NONE : refusal->code;
  return gates == 0 ? TG_OK : TG_E_TOOL;
}

int tg_call(const tg_env *env, const tg_call_request *req, tg_call_result *ret) {
  int r = tg_call_take_rate(env, req, ret);
  if (r != TG_OK) return r;
  _cleanup_json_ json_t *empty = req->args ? NULL : json_object();
  call_state st = {.env = env, .req = req, .args = req->args ? req->args : empty,
                   .started_ns = tg_monotonic_ns()};
  if (!st.args) return answer(ret, TG_ERR_INTERNAL_ERROR, NULL, NULL);

  st.tool = tg_registry_find(env->registry, req->tool);
  tg_refusal refusal = {0};
  _cleanup_json_ json_t *trace = req->dry_run ? json_array() : NULL;
  int gates;
  /* The kept principal only for a call whose write checks it before anything happens: not a
   * dry run (it writes nothing), not an interactive tool (it asks its client before the
   * write), not an unknown tool (refused at once). */
  bool kept = !req->dry_run && st.tool && !(st.tool->flags & TG_TOOL_INTERACTIVE);
  if ((r = decide(&st, kept, &refusal, trace, &gates)) < 0)
    r = unread_caller(ret, r);
  else if (!st.tool)
    r = unknown_tool(&st, ret, gates);
  else if (req->dry_run && gates >= 0)
    r = dry_run_answer(&st, ret, gates, &refusal, trace);
  else if (gates < 0)
    r = internal(&st, ret, "a gate could not decide", gates, false);
  else if (gates == 1)
    r = refused(&st, ret, &refusal);
  else
    r = execute(&st, ret);
  tg_refusal_done(&refusal);
  call_state_done(&st);
  return r;
}

void tg_call_result_done(tg_call_result *ret) {
  json_decref(ret->value);
  json_decref(ret->gates);
  *ret = (tg_call_result){0};
}

const char *tg_tool_display_name(const tg_tool *tool, const tg_principal *principal) {
  if (principal && principal->kind == TG_PRINCIPAL_AGENT &&
      strcmp(principal->naming_profile, "catalog") == 0)
    return tool->alias;
  return tool->model_name;
}

int tg_tools_usable_each(const tg_env *env, const tg_principal *principal, tg_surface surface,
                         int (*each)(const tg_tool *tool, const char *name, void *arg), void *arg) {
  for (size_t i = 0; i < tg_registry_count(env->registry); i++) {
    const tg_tool *t = tg_registry_at(env->registry, i);
    tg_refusal refusal = {0};
    tg_gate_input in = {.env = env, .principal = principal, .tool = t, .surface = surface,
                        .listing = true};
    int r = tg_gates_run(&in, &refusal, NULL);
    tg_refusal_done(&refusal);
    if (r == 1) continue;
    /* The naming gate passed: the tool has a name under the principal's profile. */
    if (r != 0 || (r = each(t, tg_tool_display_name(t, principal), arg)) != 0) return r;
  }
  return TG_OK;
}

static int append_usable(const tg_tool *t, const char *name, void *list) {
  json_t *entry = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O,s:O}", "name", name, "canonicalName",
                            t->name, "description", t->description, "effect",
                            tg_effect_name(t->effect), "risk", tg_risk_name(t->risk),
                            "inputSchema", t->input_schema, "outputSchema", t->output_schema);
  return entry && json_array_append_new(list, entry) == 0 ? TG_OK : TG_E_NOMEM;
}

static int name_usable(const tg_tool *t, const char *name, void *names) {
  return json_object_set_new(names, t->name, json_string(name)) == 0 ? TG_OK : TG_E_NOMEM;
}

int tg_tools_usable_key(const tg_env *env, const tg_principal *principal, tg_surface surface,
                        char **ret) {
  _cleanup_json_ json_t *names = json_object();
  int r = names ? tg_tools_usable_each(env, principal, surface, name_usable, names) : TG_E_NOMEM;
  if (r < 0) return r;
  *ret = json_dumps(names, JSON_COMPACT | JSON_SORT_KEYS);
  return *ret ? TG_OK : TG_E_NOMEM;
}

int tg_tools_usable(const tg_env *env, const tg_principal *principal, tg_surface surface,
                    json_t **ret) {
  json_t *list = json_array();
  if (!list) return TG_E_NOMEM;
  int r = tg_tools_usable_each(env, principal, surface, append_usable, list);
  if (r < 0) {
    json_decref(list);
    return r;
  }
  *ret = list;
  return TG_OK;
}

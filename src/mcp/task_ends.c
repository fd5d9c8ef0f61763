/* MCP tasks: how a task ended, kept in the database (mcp_tasks) for its time to live. */
#include <string.h>

#include "mcp/tasks_internal.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

/* How k ends, to be kept (release shown); with the store's lock. */
static ending ending_locked(const task *k) {
  ending e = {.shown = mcp_task_json_locked(k, k->ends_as, true), .at = k->ends_at};
  memcpy(e.id, k->id, sizeof e.id);
  memcpy(e.principal, k->principal, sizeof e.principal);
  if (k->ended_waiting) {
    e.tool = k->tool->name;
    e.run_id = k->run_id;
    e.level = k->stopped || k->unanswered ? "WARN" : "INFO";
    e.why = k->stopped      ? "cancelled: " STOPPED_MESSAGE
            : k->unanswered ? "cancelled: " UNANSWERED_MESSAGE
            : k->revoked    ? "cancelled: " REVOKED_MESSAGE
                            : "cancelled: its client cancelled it as it waited for input";
  }
  return e;
}

/* Deletes the running row of task id: it ended, or this server no longer holds it. */
int mcp_tasks_forget_running(tg_db *db, const char *id) {
  return tg_db_exec(db, "DELETE FROM mcp_running_tasks WHERE id = $1", json_pack("[s]", id), NULL);
}

/* Writes the ending arg (its row in mcp_tasks, the running row deleted, the audit row of an
 * end no call wrote): the job of tg_db_batch. */
int mcp_tasks_keep_ending(void *arg, tg_db *db) {
  const ending *e = arg;
  char at[TG_ISO_LEN + 1], expired[TG_ISO_LEN + 1];
  tg_iso8601(e->at, at);
  tg_iso8601(e->at - TG_MCP_TASK_TTL_MS, expired);
  /* Rows past their time to live go as new ones come (no task starts while its principal
   * has TG_MCP_MAX_KEPT_TASKS within it: see make_room_locked). */
  int r = tg_db_exec(db, "DELETE FROM mcp_tasks WHERE ended_at < $1", json_pack("[s]", expired),
                     NULL);
  /* A row written again as its commit was told failed late may be there already: it holds
   * the same, and its audit row was written with it. */
  int64_t kept_now = 0;
  if (r == 0)
    r = tg_db_exec(db,
                   "INSERT INTO mcp_tasks (id, principal_id, task, ended_at)"
                   " VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                   json_pack("[s,s,O,s]", e->id, e->principal, e->shown, at), &kept_now);
  if (r == 0) r = mcp_tasks_forget_running(db, e->id);
  if (r == 0 && kept_now && e->why)
    r = tg_call_log_end(db, e->principal, e->tool, e->run_id, e->id, e->level, e->why);
  return r;
}

/* Writes e on db and releases it: 0, or the failure (logged). */
static int keep(tg_db *db, ending *e) {
  int r = e->shown ? tg_db_batch(db, mcp_tasks_keep_ending, e) : TG_E_NOMEM;
  if (r < 0)
    tg_log(TG_LOG_WARN, "mcp: how task %s ended could not be kept: %s", e->id,
           e->shown ? tg_db_errmsg(db) : "out of memory");
  json_decref(e->shown);
  return r;
}

/* Whether k's end is decided and waits to be written, by none yet. */
bool mcp_task_end_unwritten(const task *k) {
  return mcp_task_terminal(k->ends_as) && !mcp_task_terminal(k->status) && !k->writing;
}

/* Writes on db how the n (at most TG_MCP_MAX_TASKS) tasks ks end (each
 * mcp_task_end_unwritten), then shows those written ended: no client sees an end the
 * database does not keep, so none changes after, whatever becomes of this server. One not
 * written shows working (it asks nothing more), and is written again as its principal reads
 * it or starts a task, and at stop. With the store's lock, released meanwhile (no task of ks
 * may go: none ended). Returns whether the database was found locked past its busy timeout. */
bool mcp_tasks_keep_ends_locked(tg_mcp_tasks *t, tg_db *db, task *const *ks, size_t n) {
  ending ends[TG_MCP_MAX_TASKS];
  bool written[TG_MCP_MAX_TASKS];
  for (size_t i = 0; i < n; i++) {
    ks[i]->writing = true;
    /* Stamped as it is written, again if need be: no client saw it, and its hour starts now
     * (a write that failed for a while would otherwise be born expired). */
    ks[i]->ends_at = tg_now_ms();
    ends[i] = ending_locked(ks[i]);
  }
  pthread_mutex_unlock(&t->lock);
  /* Each is tried for itself, but a database locked past its busy timeout would hold each
   * of the others as long: after that, they wait for the next try. */
  bool busy = false;
  for (size_t i = 0; i < n; i++) {
    int r = busy ? TG_E_BUSY : keep(db, &ends[i]);
    if (busy) json_decref(ends[i].shown);
    written[i] = r == 0;
    busy = r == TG_E_BUSY;
  }
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < n; i++) {
    task *k = ks[i];
    k->writing = false;
    if (written[i]) mcp_task_touch_locked(k, k->ends_as);
    else if (k->status == INPUT_REQUIRED) mcp_task_touch_locked(k, WORKING);
  }
  return busy;
}

/* The task a row holds (a new reference), or NULL when it is unreadable. */
json_t *mcp_task_of_row(const json_t *row) {
  /* The text holds what the JSON held, \u0000 included. */
  return json_loads(tg_json_str(row, "task"), JSON_ALLOW_NUL, NULL);
}

/* How principal's task id ended, as kept on db (a new DetailedTask in *ret, unless ret is
 * NULL); TG_E_NOTFOUND when it holds no such task there, or its time to live is over. */
int mcp_tasks_kept(tg_db *db, const char *principal, const char *id, json_t **ret) {
  json_t *row = NULL;
  char since[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms() - TG_MCP_TASK_TTL_MS, since);
  int r = tg_db_query_row(
      db, "SELECT task FROM mcp_tasks WHERE id = $1 AND principal_id = $2 AND ended_at >= $3",
      json_pack("[s,s,s]", id, principal, since), &row);
  if (r < 0) return r;
  if (!row) return TG_E_NOTFOUND;
  if (ret && !(*ret = mcp_task_of_row(row))) r = TG_E_DB;
  json_decref(row);
  return r;
}

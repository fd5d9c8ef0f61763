#include "core/run.h"

#include "core/principal.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/process_tag.h"
#include "util/status.h"

int tg_run_insert(tg_db *db, const char *id, const char *tenant_id, const char *agent_id,
                  const char *status, const char *trigger, const char *started_at,
                  const char *ended_at, const char *holder) {
  return tg_db_exec(db,
                    "INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at,"
                    " ended_at, holder) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    json_pack("[sssssss?s?]", id, tenant_id, agent_id, status, trigger,
                              started_at, ended_at, holder),
                    NULL);
}

typedef struct session_run {
  const tg_principal *agent;
  const char *id, *holder;
} session_run;

static int insert_session_run(void *arg, tg_db *db) {
  const session_run *run = arg;
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  return tg_run_insert(db, run->id, run->agent->tenant_id, run->agent->subject_id, "running",
                       "mcp", now, NULL, run->holder);
}

int tg_run_open_session(tg_db *db, const char *principal_id, const char *holder,
                        char run_id[TG_UUID_LEN + 1], bool *later, const char **why) {
  *run_id = '\0';
  tg_principal *p = NULL;
  int r = tg_principal_load(db, principal_id, &p);
  bool agent = r == TG_OK && p->kind == TG_PRINCIPAL_AGENT;
  *later = agent && !tg_principal_acts(p);
  if (agent && !*later) {
    r = tg_uuid7(run_id) < 0 ? TG_E_IO
                             : tg_db_batch(db, insert_session_run,
                                           &(session_run){.agent = p, .id = run_id,
                                                          .holder = holder});
    if (r < 0) *run_id = '\0';
  }
  tg_principal_free(p);
  if (r < 0)
    *why = r == TG_E_IO         ? "the system gives no randomness"
           : r == TG_E_NOTFOUND ? "its principal is gone"
                                : tg_db_errmsg(db);
  return r;
}

int tg_run_end(tg_db *db, const char *id, const char *status) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int64_t changes = 0;
  int r = tg_db_exec(db,
                     "UPDATE agent_runs SET status = $1, ended_at = $2 WHERE id = $3"
                     " AND status = 'running'",
                     json_pack("[sss]", status, now, id), &changes);
  return r < 0 ? r : changes == 1 ? TG_OK : TG_E_NOTFOUND;
}

int tg_run_successes(tg_db *db, const char *id, const char *tool, int64_t *ret_n) {
  *ret_n = 0;
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(db,
                          "SELECT n FROM agent_run_successes"
                          " WHERE run_id = $1 AND step = 'tool:' || $2",
                          json_pack("[ss]", id, tool), &row);
  if (r < 0) return r;
  *ret_n = json_integer_value(json_object_get(row, "n"));
  return TG_OK;
}

int tg_run_count_success(tg_db *db, const char *id, const char *tool, int delta) {
  return tg_db_exec(db,
                    "INSERT INTO agent_run_successes (run_id, step, n)"
                    " VALUES ($1, 'tool:' || $2, $3)"
                    " ON CONFLICT (run_id, step) DO UPDATE SET n = agent_run_successes.n + $3",
                    json_pack("[ssi]", id, tool, delta), NULL);
}

int tg_run_end_orphans(tg_db *db, int *ret_ended) {
  *ret_ended = 0;
  json_t *held = NULL;
  int r = tg_db_query(db,
                      "SELECT id, holder FROM agent_runs"
                      " WHERE status = 'running' AND holder IS NOT NULL",
                      NULL, &held);
  size_t i;
  json_t *run;
  json_array_foreach(held, i, run) {
    if (r < 0) break;
    if (!tg_process_tag_gone(json_string_value(json_object_get(run, "holder")))) continue;
    r = tg_run_end(db, json_string_value(json_object_get(run, "id")), "failed");
    if (r == TG_OK) ++*ret_ended;
    else if (r == TG_E_NOTFOUND) r = TG_OK; /* another server ended it first */
  }
  json_decref(held);
  return r < 0 ? r : TG_OK;
}

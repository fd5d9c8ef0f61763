#include "core/run.h"

#include "util/clock.h"
#include "util/status.h"

int tg_run_insert(tg_db *db, const char *id, const char *tenant_id, const char *agent_id,
                  const char *status, const char *trigger, const char *started_at,
                  const char *ended_at) {
  return tg_db_exec(db,
                    "INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at,"
                    " ended_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    json_pack("[sssssss?]", id, tenant_id, agent_id, status, trigger, started_at,
                              ended_at),
                    NULL);
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

/* An agent's runs: the rows its calls are logged under (seed 000 §5). A call names one, or is
 * a run of its own (call.c); an operator starts and ends one (admin.run.start|end); an agent's
 * stdio server is one for its client's session (toolgate mcp). */
#pragma once
#include "db/db.h"
#include "util/ids.h"

/* Inserts run id of agent_id (agents.id) in tenant_id, started at started_at: running (ended_at
 * NULL), or ended then with status. holder is the tag (util/process_tag.h) of the process that
 * holds it open and ends it, or NULL. */
int tg_run_insert(tg_db *db, const char *id, const char *tenant_id, const char *agent_id,
                  const char *status, const char *trigger, const char *started_at,
                  const char *ended_at, const char *holder);

/* Ends the running run id now with status (completed, failed, cancelled). TG_E_NOTFOUND when
 * it is not running. */
int tg_run_end(tg_db *db, const char *id, const char *status);

/* Ends as failed, in every workspace, each running run whose holder is gone
 * (tg_process_tag_gone); their number in *ret_ended. In a transaction (tg_db_batch). */
int tg_run_end_orphans(tg_db *db, int *ret_ended);

/* An agent's runs: the rows its calls are logged under (seed 000 §5). A call names one, or is
 * a run of its own (call.c); an operator starts and ends one (admin.run.start|end); an agent's
 * stdio server is one for its client's session (toolgate mcp). */
#pragma once
#include "db/db.h"
#include "util/ids.h"

/* Inserts run id of agent_id (agents.id) in tenant_id, started at started_at: running (ended_at
 * NULL), or ended then with status. */
int tg_run_insert(tg_db *db, const char *id, const char *tenant_id, const char *agent_id,
                  const char *status, const char *trigger, const char *started_at,
                  const char *ended_at);

/* Ends the running run id now with status (completed, failed, cancelled). TG_E_NOTFOUND when
 * it is not running. */
int tg_run_end(tg_db *db, const char *id, const char *status);

/* An agent's runs: the rows its calls are logged under (seed 000 §5). A call names one, or is
 * a run of its own (call.c); an operator starts and ends one (admin.run.start|end); an agent's
 * MCP session is one: its stdio server's (toolgate mcp), or a 2025-11-25 session over HTTP. */
#pragma once
#include "db/db.h"
#include "util/ids.h"

/* Inserts run id of agent_id (agents.id) in tenant_id, started at started_at: running (ended_at
 * NULL), or ended then with status. holder is the tag (util/process_tag.h) of the process that
 * holds it open and ends it, or NULL. */
int tg_run_insert(tg_db *db, const char *id, const char *tenant_id, const char *agent_id,
                  const char *status, const char *trigger, const char *started_at,
                  const char *ended_at, const char *holder);

/* Opens the run of an MCP session of principal_id, running and held by holder (NULL: none),
 * in a transaction of its own; its id into run_id, or "" when the principal is no active
 * agent: a user's calls belong to no run, and an agent that is not active is offered no
 * tools. *later tells an agent that is not active yet (draft, paused) from a user: its
 * session asks again at its next call, so that it opens its run once the agent is started.
 * The session's calls name it, so that per-run caps bind for the session. On failure, *why
 * says why (valid until db is used again). */
int tg_run_open_session(tg_db *db, const char *principal_id, const char *holder,
                        char run_id[TG_UUID_LEN + 1], bool *later, const char **why);

/* Ends the running run id now with status (completed, failed, cancelled). TG_E_NOTFOUND when
 * it is not running. */
int tg_run_end(tg_db *db, const char *id, const char *status);

/* Ends as failed, in every workspace, each running run whose holder (a server) is gone
 * (tg_process_tag_gone); their number in *ret_ended. In a transaction (tg_db_batch). */
int tg_run_end_orphans(tg_db *db, int *ret_ended);

/* How many calls of tool succeeded in run id, as counted for tools that cap their successes
 * per run (maxPerRun): into *ret_n (0 when none did, or for a run that is not there). */
int tg_run_successes(tg_db *db, const char *id, const char *tool, int64_t *ret_n);

/* Counts a success of tool in run id (delta 1), or takes one counted back (delta -1: the
 * call failed after its commit), in the caller's transaction. */
int tg_run_count_success(tg_db *db, const char *id, const char *tool, int delta);

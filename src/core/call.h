/* tg_call: the one path every tool call takes, from every surface (DESIGN.md §1, §4).
 * In order: the caller's rate (on a server) → resolve the name → the run it belongs to →
 * surface → the caller's status → authorize against live grants → workspace policy and risk →
 * per-run cap → budget → arguments against the compiled schema →
 * one transaction (handler, a last look for a cancellation, activity rows, telemetry row) →
 * result. Every refusal and failure is an error envelope and one telemetry row, except that
 * the refusals for a caller's rate get a row a second (core/rate_limit.h). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/client.h"
#include "core/error.h"
#include "core/principal.h"
#include "core/rate_limit.h"
#include "core/registry.h"
#include "db/db.h"

#define TG_ARGS_LOG_MAX 1024  /* bytes of arguments kept in a telemetry row */
#define TG_MAX_VIOLATIONS 20  /* validation failures reported in one envelope */

/* What a call runs against: the registry (shared, immutable), this thread's database
 * connection, and where the server keeps its files. */
typedef struct tg_env {
  const tg_registry *registry;
  tg_db *db;
  const char *data_dir;   /* the database and the repositories live here */
  const char *public_url; /* how people reach this server, for links (e.g. pull requests) */
  tg_rate_limit *rate_limit; /* the server's limit on each caller's calls; NULL: none (the
                              * CLI's own calls) */
} tg_env;

typedef struct tg_call_request {
  const char *principal_id; /* resolved by the surface (token, --agent, session) */
  tg_surface surface;
  const char *tool;   /* canonical, model-facing or alias name */
  json_t *args;       /* borrowed; NULL means {} */
  const char *run_id; /* agents: attach to this running run; NULL: the call is its own run */
  /* run_id is the caller's session's run, which its server opened for it: whether it still
   * runs is read in the call's write transaction (and to decide a refusal), not before,
   * unless the handler runs before that transaction (it asks its client) or for a dry run. */
  bool run_held;
  bool dry_run;       /* run every gate, not the handler; write nothing */
  const tg_client_channel *client; /* the way back to the client, or NULL */
  const char *task_id; /* the MCP task this call is a round of, recorded in its audit row
                        * (hex digits), or NULL */
  bool rate_counted;   /* the surface counted it against its caller's rate already */
} tg_call_request;

typedef struct tg_call_result {
  tg_errcode code; /* TG_ERR_NONE on success */
  json_t *value;   /* the result, or the error envelope; owned by the caller */
  json_t *gates;   /* dry runs: [{"gate","ok","detail"?}] in the order they ran */
} tg_call_result;

/* Always fills *ret (release it with tg_call_result_done). Returns 0 when the tool ran and
 * succeeded (or, on a dry run, would be allowed), TG_E_TOOL when ret->value is an error
 * envelope. */
int tg_call(const tg_env *env, const tg_call_request *req, tg_call_result *ret);
void tg_call_result_done(tg_call_result *ret);

/* What tg_call does first: counts the call against its caller's rate (env->rate_limit; not a
 * dry run, nor one whose rate_counted says it was). TG_OK when it may go (ret empty); else
 * TG_E_TOOL with ret filled as tg_call fills it (rate_limited; its telemetry row written when
 * one is due). For a surface that may refuse a call before tg_call, so that such a call
 * counts too: it then calls tg_call with rate_counted. */
int tg_call_take_rate(const tg_env *env, const tg_call_request *req, tg_call_result *ret);

typedef int (*tg_after_fn)(tg_call_ctx *cx, void *arg);

/* The context a handler receives. */
struct tg_call_ctx {
  const tg_env *env;
  tg_db *db; /* inside the call's transaction */
  const tg_tool *tool;
  const tg_principal *principal;
  tg_surface surface;
  const char *run_id; /* the run this call is logged under, NULL for users */
  const tg_client_channel *client; /* NULL when the surface has no way back */
  tg_errcode code;    /* set by tg_fail */
  json_t *error;      /* envelope set by tg_fail */
  json_t *activity;   /* rows queued by tg_activity, written before commit */
  int64_t cost_cents;
  struct tg_call_after_step {
    tg_after_fn fn;
    void *arg;
    void (*free_arg)(void *);
    bool on_failure; /* tg_call_on_failure's */
  } *after; /* registered by tg_call_after and tg_call_on_failure */
  size_t n_after, after_room;
};

/* Registers fn(cx, arg) to run once the call's transaction has committed, outside any
 * transaction (never when it rolls back), in the order registered; free_arg(arg) runs in
 * every case. A step that fails (tg_fail, or a TG_E_* status) turns the call's answer into
 * that failure; the call's telemetry gets a row for it, and the step undoes or marks what the
 * committed transaction recorded. TG_E_NOMEM (arg freed) when there is no room for it. */
int tg_call_after(tg_call_ctx *cx, tg_after_fn fn, void *arg, void (*free_arg)(void *));
/* Registers fn(cx, arg) to run when the call's transaction rolls back instead (the handler,
 * a gate at the write or the commit failed), once it has, outside any transaction, on
 * cx->env->db: to make lasting what the handler found done regardless of its call (a
 * failure there is logged, not answered). free_arg and TG_E_NOMEM as tg_call_after. */
int tg_call_on_failure(tg_call_ctx *cx, tg_after_fn fn, void *arg, void (*free_arg)(void *));

/* Decides again, on cx->db (in the call's transaction), whether the caller may call the tool,
 * after the handler changed what its standing is read from (taking a repository may archive
 * an agent whose creation was given up): the gates that decide what a principal is offered,
 * on the principal loaded afresh. TG_OK, or the refusal as the call's failure (TG_E_TOOL). */
int tg_call_recheck(tg_call_ctx *cx);

/* Tests: drop the after-commit steps, as a process killed right after the commit would. */
extern bool tg_call_test_die_after_commit;

/* Records a tool-level failure; returns TG_E_TOOL for the handler to return. details is
 * stolen and may be NULL. The message must be safe to show to a model. */
int tg_fail(tg_call_ctx *cx, tg_errcode code, json_t *details, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Queues an activity_log row written in the call's transaction. scope (borrowed, may be NULL:
 * the caller's own scope) may hold missionId, ideaId, workId. details is stolen. */
int tg_activity(tg_call_ctx *cx, const char *action_type, json_t *scope, const char *summary,
                json_t *details);
/* The ids of the activity rows queued so far, a new array (NULL: out of memory): what an
 * after-commit step whose work may not be done after all would take back. */
json_t *tg_activity_ids(const tg_call_ctx *cx);

/* Writes on db (in the caller's transaction) the telemetry row of an MCP request or task
 * whose end no call of it was running to tell of: a task cancelled or unanswered while it
 * waited for its client's input, cut by the server's stop, or failed as its server died; a
 * 2025 request whose client failed an input request between its rounds. tool may be NULL
 * (not known); run_id, the run the request named (NULL: none), is kept only when it names a
 * running run of principal's, as the run gate lets a call attach to (the client gave it);
 * task_id may be NULL (no task); level is "INFO", "WARN" or "ERROR"; why says how it ended. */
int tg_call_log_end(tg_db *db, const char *principal_id, const char *tool, const char *run_id,
                    const char *task_id, const char *level, const char *why);

/* Writes the telemetry rows counting the calls refused for their callers' rate that no row
 * counted yet (tg_rate_limit_take_unwritten: of callers whose last such row is a second old,
 * or of all when all), one a caller (step "tool:?", level WARN, code rate_limited,
 * metadata.refusals; none for a caller gone), in one transaction on db, waiting for another
 * writer only when all (a server's last write, once nothing can call any more). What is not
 * written goes back to the count, for the next write; a failure is logged unless another
 * writer held the lock. A server calls it every few seconds, and once as it stops. */
int tg_call_write_rate_refusals(tg_rate_limit *limit, tg_db *db, bool all);

/* The tools principal may call on surface, as the tool list offered to it (seed 000 §4):
 * each passes the same surface, status, permission and policy gates as tg_call. Returns a
 * new array of {name, canonicalName, description, effect, risk, inputSchema, outputSchema}
 * where name follows the tenant's naming profile. */
int tg_tools_usable(const tg_env *env, const tg_principal *principal, tg_surface surface,
                    json_t **ret);
/* The same tools, in the same (registry) order, each given to each with the name principal
 * sees. Returns 0, or the first nonzero status each returned, or a TG_E_* status. */
int tg_tools_usable_each(const tg_env *env, const tg_principal *principal, tg_surface surface,
                         int (*each)(const tg_tool *tool, const char *name, void *arg), void *arg);
/* The tools tg_tools_usable offers principal on surface, by canonical and shown name, as one
 * canonical text (malloc'd): equal texts, equal lists (what else a listing shows comes from
 * the registry). A way to tell whether a change of grants or policy changed the list. */
int tg_tools_usable_key(const tg_env *env, const tg_principal *principal, tg_surface surface,
                        char **ret);
/* The name a principal's tenant shows it for tool: to an agent, its alias under the
 * "catalog" profile (NULL for a tool without one, which such an agent is neither offered nor
 * let call: the naming gate), else the model-facing name. */
const char *tg_tool_display_name(const tg_tool *tool, const tg_principal *principal);

/* Changes of the lists a principal is offered, and who hears of them: a legacy (2025-11-25)
 * connection or session gets notifications/{tools,prompts}/list_changed, a 2026-07-28
 * subscriptions/listen stream the ones it asked for, and the changes of the tasks it names,
 * tagged with its subscription id.
 * A tool list follows grants, workspace policy, naming profile and the agent's status, all
 * of which another process may change (the CLI writes the same database): so what decides
 * it is read again and compared by fingerprint whenever the transport checks. Thread-safe.
 * Knows nothing of transports. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "core/call.h"
#include "mcp/tasks.h"

#define TG_MCP_MAX_SUBSCRIPTIONS 16 /* subscriptions/listen streams open on one watch */
#define TG_MCP_META_SUBSCRIPTION "io.modelcontextprotocol/subscriptionId" /* in _meta */

typedef struct tg_mcp_watch tg_mcp_watch;

/* send(self, msg) delivers a notification (msg stolen) where the client listens: stdout, a
 * session's GET stream, a listen request's stream. A watch holding task subscriptions is
 * sent to while the task store tells its observers: free it, and send, without holding a
 * lock that a task's change may wait for. */
int tg_mcp_watch_new(int (*send)(void *self, json_t *msg), void *self, tg_mcp_watch **ret);
void tg_mcp_watch_free(tg_mcp_watch *w);

/* w's server offers prompts (the conformance fixtures), to principals that act: their
 * list changes as the principal comes to act or stops. */
void tg_mcp_watch_prompts(tg_mcp_watch *w);
/* A legacy client finished initializing: every later change is announced to it. */
void tg_mcp_watch_legacy(tg_mcp_watch *w);
/* subscriptions/listen with request id and filter: sends the acknowledgement naming the
 * honoured subset of filter (toolsListChanged, promptsListChanged; with tasks, the store of
 * the server, the taskIds that name principal_id's tasks, read on db as well: see
 * tg_mcp_tasks_observer_new), then announces those changes: notifications/tasks with a
 * task's DetailedTask as it stands, then at each change of it.
 * Returns 0, TG_E_TOO_LARGE when TG_MCP_MAX_SUBSCRIPTIONS are open, TG_E_NOTFOUND once the
 * watch ended (tg_mcp_watch_end), TG_E_NOMEM, or the failure of send. */
int tg_mcp_watch_subscribe(tg_mcp_watch *w, json_t *id, json_t *filter, tg_mcp_tasks *tasks,
                           tg_db *db, const char *principal_id);
/* Ends subscription id (its listen request was cancelled); false when there is none. */
bool tg_mcp_watch_unsubscribe(tg_mcp_watch *w, json_t *id);
/* Whether subscription id is open: its listen request is still in flight. */
bool tg_mcp_watch_holds(tg_mcp_watch *w, json_t *id);
/* Whether w listens and no check has seen the lists yet: the next sets what later ones
 * compare with. */
bool tg_mcp_watch_unchecked(tg_mcp_watch *w);
/* The server ends every subscription of w (it is stopping), and w takes no more: each
 * listen request gets its result, {"resultType":"complete"} with meta (what every result's
 * _meta carries: tg_mcp_result_meta) and the subscription id in _meta. Returns 0,
 * TG_E_NOMEM or the first failure of send. */
int tg_mcp_watch_end(tg_mcp_watch *w, json_t *meta);

/* Reads again what decides principal_id's lists and announces what changed since the previous
 * check; the first check after someone starts listening only takes the baseline. Does
 * nothing while nobody listens. A change whose announcement failed is announced again at
 * each check until it goes out, to every listener of w, so one that had it may hear it twice
 * (list_changed only says to list again). Returns 0, or the first failure (database, or a
 * send that failed for a change not announced before). */
int tg_mcp_watch_check(tg_mcp_watch *w, const tg_env *env, const char *principal_id);

/* The lists whose changes text (len bytes) announces, as a set for tg_mcp_watch_owe. */
unsigned tg_mcp_watch_lists_in(const char *text, size_t len);
/* The changes of lists (from tg_mcp_watch_lists_in of output for a 2025 client that never
 * reached it: the stream it was on was let go unread) are announced again at the next
 * check. */
void tg_mcp_watch_owe(tg_mcp_watch *w, unsigned lists);

/* Records that a list of principal_id changed outside the database (the conformance
 * trigger tools): every watch of this process checked for principal_id announces it at its
 * next check. False when method is not the list_changed notification of a list watched
 * here. */
bool tg_mcp_watch_touch(const char *method, const char *principal_id);

/* A workspace on a real SQLite file in a temporary folder, with the built-in providers and
 * a test provider, shared by the integration tests. */
#pragma once
#include <jansson.h>

#include "core/call.h"

typedef struct fixture {
  char *dir;
  tg_db *db;
  tg_registry *registry;
  tg_env env;
  char tenant_id[TG_UUID_LEN + 1];
  char owner[TG_UUID_LEN + 1]; /* the owner user's principal */
} fixture;

/* extra: one more provider to register after the built-in ones, or NULL. */
fixture *fixture_new(const tg_provider *extra);
void fixture_free(fixture *f);
/* The cmocka teardown of a test's world: a struct allocated with calloc whose first member is
 * its fixture *. Frees both. */
int fixture_world_free(void **state);

/* Calls tool as principal; args is JSON text. Returns tg_call's status; *ret filled. */
int fixture_call(fixture *f, const char *principal, tg_surface surface, const char *tool,
                 const char *args, const char *run_id, tg_call_result *ret);
/* The tools principal is offered on surface (tg_tools_usable's array), as its own calls of
 * agent.tool.list list them where it may call that. */
json_t *fixture_offered(fixture *f, const char *principal, tg_surface surface);
/* Revokes permission from agent_slug as the owner, on a database connection of its own, as
 * the CLI of another process would. */
void fixture_revoke_elsewhere(fixture *f, const char *agent_slug, const char *permission);
/* Creates an agent through admin.agent.create as the owner (args JSON text, "slug" needed)
 * and returns its principal id (static buffer per call site: copy it). */
void fixture_agent(fixture *f, const char *args, char principal[TG_UUID_LEN + 1]);
/* Starts a run of the agent slug through admin.run.start as the owner; its id in run. */
void fixture_run_start(fixture *f, const char *slug, char run[TG_UUID_LEN + 1]);

/* Rows of table, and a text snapshot of every table but the excluded one (NULL: none). */
long fixture_count(fixture *f, const char *table);
/* The n of a query "SELECT COUNT(*) AS n ..." with params (stolen, as tg_db_query_row). */
long fixture_count_where(fixture *f, const char *sql, json_t *params);
char *fixture_snapshot(fixture *f, const char *except_table);
/* The wire code of an error envelope, or "" for a result. */
const char *fixture_code(const tg_call_result *res);

/* How long a test waits on the server before it takes it for hung: a guard, not a timing
 * check. */
#define FIXTURE_HANG_GUARD_S 30

/* A socket connected to 127.0.0.1:port whose reads give up after FIXTURE_HANG_GUARD_S. */
int fixture_connect(unsigned port);

/* Moves the clock of the tasks' expiry past their time to live (the world's teardown moves
 * it back) and waits until the server drops the one ended task it holds, though no task
 * starts: as a quiet server would, within FIXTURE_HANG_GUARD_S. */
void fixture_await_expired_task_dropped(void);

/* Connects fd, a TCP socket the caller set up (unless it is connected), to 127.0.0.1:port
 * and sends a request for /mcp on it: method, headers (whole lines, each ending in CRLF; ""
 * for none) and body (NULL: none). */
void fixture_http_send(int fd, unsigned port, const char *method, const char *headers,
                       const char *body);

/* What is logged (stderr) between fixture_log_begin and fixture_log_end, which returns it
 * (malloc'd) and also writes it to stderr again, for whoever reads the test's output. */
typedef struct fixture_log {
  int fd, saved;
} fixture_log;
fixture_log fixture_log_begin(fixture *f);
char *fixture_log_end(fixture_log log);
/* How many times what occurs in text. */
size_t fixture_occurrences(const char *text, const char *what);

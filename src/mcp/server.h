/* The MCP server, transport-neutral: one decoded JSON-RPC message plus the state of the
 * connection or session in, the reply out. Serves both protocol revisions (research file
 * mcp-2026-07-28.md §1.5): a request whose params._meta claims a protocol version is served
 * statelessly as 2026-07-28; anything else follows the 2025-11-25 lifecycle.
 * Every tools/call goes through tg_call. */
#pragma once
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/call.h"
#include "core/registry.h"
#include "mcp/inflight.h"
#include "mcp/jsonrpc.h"
#include "mcp/tasks.h"
#include "mcp/watch.h"

#define TG_MCP_MODERN_VERSION "2026-07-28"
#define TG_MCP_LEGACY_VERSION "2025-11-25"
#define TG_MCP_SERVER_VERSION "0.1.0"
#define TG_MCP_PAGE_SIZE 100 /* entries of one page of a list (tools, prompts, resources) */
/* How long a tool waits for the client to answer its request (sampling, elicitation): the
 * call's transaction stays open meanwhile. */
#define TG_MCP_ASK_TIMEOUT_MS (60LL * 1000)
/* Bytes of a batch's answer, which is built whole: a reply past them is replaced by an error
 * naming its request. */
#define TG_MCP_BATCH_ANSWER_MAX (16u * 1024u * 1024u)

typedef enum tg_mcp_era { TG_MCP_ERA_NONE, TG_MCP_ERA_LEGACY, TG_MCP_ERA_MODERN } tg_mcp_era;

/* A stdio connection or an HTTP session. */
typedef struct tg_mcp_session {
  tg_mcp_era era;    /* stdio: what the connection is pinned to; HTTP sessions: legacy */
  char version[16];  /* legacy: the negotiated revision */
  bool initialized;  /* legacy: notifications/initialized arrived */
  int log_level;     /* legacy: index of the level set by logging/setLevel, -1: none */
  /* When logging/setLevel last set log_level (monotonic ns; 0: never): of the requests of an
   * HTTP session that each set it on a copy, the one that set it last is what stands. */
  uint64_t level_set_ns;
  json_t *client_capabilities; /* legacy: from initialize */
} tg_mcp_session;

void tg_mcp_session_init(tg_mcp_session *s);
void tg_mcp_session_done(tg_mcp_session *s);

/* The HTTP routing headers of a request (trimmed, NULL when absent). Stdio has none. */
typedef struct tg_mcp_headers {
  const char *protocol_version;
  const char *method;
  const char *name;
  json_t *params; /* Mcp-Param-{Name} values by tg_mcp_param_key (borrowed, may be NULL) */
} tg_mcp_headers;

/* Bytes of the Name of an Mcp-Param-{Name} header, at most. */
#define TG_MCP_PARAM_NAME_MAX 127
/* Into key, the key a header's Name and a schema's x-mcp-header meet by: the Name in lower
 * case (header names are case-insensitive). False for a Name longer than the most. */
bool tg_mcp_param_key(const char *name, char key[TG_MCP_PARAM_NAME_MAX + 1]);

/* How a transport lets a request talk to the client before its reply. */
typedef struct tg_mcp_io {
  void *self;
  /* Sends a message related to the request (a notification); msg is stolen. */
  int (*send)(void *self, json_t *msg);
  /* Sends a request to the client and waits for the response message (new reference).
   * NULL when the transport cannot (then sampling and elicitation are refused). */
  int (*ask)(void *self, json_t *request, json_t **ret_response);
  /* Ends the request's response stream before its reply, which the client fetches when it
   * resumes the stream (SSE polling). NULL when the transport cannot. */
  int (*close_stream)(void *self);
  /* Whether the client's notifications/initialized came, as its session stands now, for a
   * request working on a copy of the session's state taken before (NULL: the request's
   * session says). */
  bool (*initialized)(void *self);
} tg_mcp_io;

typedef struct tg_mcp_server {
  bool fixtures;    /* serve the conformance resources and prompts */
  const char *name; /* serverInfo */
  const char *version;
  bool list_changes; /* the transport delivers list changes (tg_mcp_request.watch and
                      * tg_mcp_watch_check): listChanged is advertised */
  /* Each tool's tools/list entry after its name, encoded once by tg_mcp_server_prepare
   * (indexed by tool id): a list answer copies them instead of encoding every schema. */
  char **entries;
  size_t n_entries;
  tg_mcp_tasks *tasks; /* the calls become tasks here (tg_mcp_server_prepare) */
  int64_t ask_timeout_ms; /* how long a tool waits for its client; 0: TG_MCP_ASK_TIMEOUT_MS */
  size_t batch_answer_max; /* bytes of a batch's answer; 0: TG_MCP_BATCH_ANSWER_MAX */
  /* The workspace's key sealing 2026-07-28 requestStates (tg_mcp_server_prepare), the
   * same for every server on it: 64 hex digits. */
  char state_key[65];
  /* The run a stdio server's calls attach to (toolgate mcp --run): its requests'
   * tg_mcp_request.run_id. */
  const char *run_id;
  /* Without run_id, a stdio server's own run: an agent's server opens it at its first call
   * that its caller's rate lets through (once the agent is active), held by run_holder
   * (NULL: none), into this buffer of TG_UUID_LEN + 1 bytes ("" until then), whose owner
   * ends it. NULL: it opens none. */
  char *own_run;
  const char *run_holder;
} tg_mcp_server;

static inline int64_t tg_mcp_ask_timeout_ms(const tg_mcp_server *srv) {
  return srv->ask_timeout_ms > 0 ? srv->ask_timeout_ms : TG_MCP_ASK_TIMEOUT_MS;
}

/* Encodes the tools/list entries of env's registry's tools into srv, which tools/list
 * needs, reads the workspace's state key (made if it has none; through env's connection, or
 * one of its own without), and opens its tasks, which run against env (its database
 * connection aside); undone by tg_mcp_server_done (which cancels the running tasks and waits
 * for them), which may also follow a failure. srv holds nothing prepared before (see
 * tg_mcp_server_copy). Returns 0, TG_E_DB or TG_E_NOMEM. */
int tg_mcp_server_prepare(tg_mcp_server *srv, const tg_env *env);
void tg_mcp_server_done(tg_mcp_server *srv);

/* srv's settings, without what it prepared (which stays its own): a transport's copy to
 * prepare and serve with, which its tg_mcp_server_done may undo from the start. */
tg_mcp_server tg_mcp_server_copy(const tg_mcp_server *srv);

typedef struct tg_mcp_request {
  const tg_env *env;        /* this thread's registry and connection */
  const char *principal_id; /* who calls */
  /* Of the token the request came with (NULL or "": none), for what outlives the request
   * (a task) to end with the token. */
  const char *token_hash;
  tg_mcp_session *session;  /* never NULL; a scratch one for stateless HTTP requests */
  const tg_mcp_headers *headers; /* NULL on stdio */
  /* The agent's running run the request's calls attach to, a task's rounds too, so that its
   * per-run caps bind (stdio --run, HTTP's Toolgate-Run header); NULL: each call its own. */
  const char *run_id;
  /* The run of the request's session (a stdio server's own, HTTP's 2025-11-25 one), opened
   * at its first call once that counts against its caller's rate: its id, held by the
   * session's server, or NULL (each call its own). NULL: run_id is all there is. */
  const char *(*session_run)(void *arg, tg_db *db);
  void *session_run_arg;
  const tg_mcp_io *io;
  /* The connection's or session's requests in flight, which notifications/cancelled
   * reaches; NULL: requests cannot be cancelled. */
  tg_mcp_inflight *inflight;
  /* Once true, the transport waits for no answer any more (a server stopping, past the time
   * it gives running calls): this request counts as cancelled. NULL: never. */
  const atomic_bool *abandoned;
  /* Whether the client went away, which cancels the request (a stateless HTTP call whose
   * connection closed: nobody can cancel it otherwise); NULL: never. */
  bool (*gone)(void *arg);
  void *gone_arg;
  /* Where list changes of this connection or session go, and subscriptions/listen opens
   * its stream; NULL: subscriptions/listen is not served. */
  tg_mcp_watch *watch;
} tg_mcp_request;

typedef struct tg_mcp_reply {
  char *text;      /* the response, encoded on one line (malloc'd); NULL for notifications,
                    * responses, cancelled requests and an open subscription */
  bool error;      /* the response is a JSON-RPC error */
  int http_status; /* what an HTTP transport answers: 200, 202, 400, 404 */
  bool subscribed; /* subscriptions/listen was acknowledged through the watch: its stream
                    * stays open until the client cancels it or goes away */
} tg_mcp_reply;

/* Whether params._meta carries a modern protocol-version claim. */
bool tg_mcp_has_claim(const tg_rpc_msg *msg);
/* What every 2026-07-28 result's _meta carries: the server's identity (serverInfo). */
json_t *tg_mcp_result_meta(const tg_mcp_server *srv);
/* Whether version is a legacy revision this server negotiates. */
bool tg_mcp_legacy_supported(const char *version);
/* Why a message that carries no 2026-07-28 claim or is no request (a notification, a
 * response, a batch), sent with the version header header_version (NULL: none), is refused
 * for the versions it names, with its JSON-RPC code in *code and the error's data in *data
 * (a new reference, or NULL); NULL when it is not (the dispatch checks a claiming request's,
 * in the order 2026-07-28 sets). A batch: its header, then each notification in it that
 * claims a version, as it would be alone. */
const char *tg_mcp_version_refusal(const tg_rpc_msg *msg, const char *header_version, int *code,
                                   json_t **data);
/* The requestId a notifications/cancelled names (borrowed), or NULL for any other message. */
json_t *tg_mcp_cancel_target(const tg_rpc_msg *msg);

/* Serves msg (a batch as tg_mcp_handle_batch does). A transport with headers has refused
 * first what tg_mcp_version_refusal refuses (a request that claims 2026-07-28 aside, whose
 * version is checked here). Returns 0 with *reply filled (the caller frees reply->text), or
 * TG_E_NOMEM. */
int tg_mcp_handle(const tg_mcp_server *srv, const tg_mcp_request *req, const tg_rpc_msg *msg,
                  tg_mcp_reply *reply);

/* Whether tg_mcp_handle would refuse msg, a request sent with headers, before serving it:
 * for its envelope, headers or method, or, of a 2026-07-28 subscriptions/listen, its
 * filter. 1 with the refusal in *reply (the caller frees reply->text), 0 when it would not,
 * or TG_E_NOMEM. For a transport that holds something bounded for a request before it is
 * served (a listen stream): a bad request is told what is wrong with it, not that the
 * bound is reached. */
int tg_mcp_refusal(const tg_mcp_server *srv, const tg_mcp_request *req, const tg_rpc_msg *msg,
                   tg_mcp_reply *reply);

/* Enters the requests of msg (itself, or those in a batch) in t, the table of requests in
 * flight (0, or TG_E_NOMEM with none entered), and takes them out again. */
int tg_mcp_enter_requests(tg_mcp_inflight *t, const tg_rpc_msg *msg);
void tg_mcp_leave_requests(tg_mcp_inflight *t, const tg_rpc_msg *msg);
/* Whether id is that of a request of msg (itself, or one in a batch). */
bool tg_mcp_names_request(const tg_rpc_msg *msg, json_t *id);
/* Whether a request of msg (itself, or one in a batch) has the id of one in t, served or
 * cancelled and not ended yet, of an open subscription of w (NULL: none), or of another
 * request of the batch: a transport refuses msg then (TG_MCP_INFLIGHT_REUSED_ID), before
 * entering it. */
bool tg_mcp_reuses_id_in_flight(tg_mcp_inflight *t, tg_mcp_watch *w, const tg_rpc_msg *msg);
/* Whether msg is a request or a batch holding one. */
bool tg_mcp_holds_request(const tg_rpc_msg *msg);

/* Whether session s takes JSON-RPC batches: one that negotiated 2025-03-26 does. */
bool tg_mcp_takes_batches(const tg_mcp_session *s);
/* The refusal of batch on a session that takes none (NULL without memory). */
json_t *tg_mcp_unbatched_refusal(const tg_rpc_msg *batch);

/* Told of each request of a batch as it starts being served (its id) and as it ends (NULL). */
typedef void tg_mcp_serving_fn(void *arg, json_t *id);

/* Serves batch (a TG_RPC_BATCH message) as JSON-RPC asks: its messages one by one, in order,
 * each as tg_mcp_handle serves it, and one answer, the array of their replies and of the
 * errors of the elements that are no message (reply->text NULL when there are none), within
 * the server's bound on a batch's answer (a reply past it is replaced by an error). Its
 * responses are skipped: the transport delivers them. On a session that does not take
 * batches each request in it is refused (HTTP status 400). serving may be NULL. Returns 0,
 * or TG_E_NOMEM. */
int tg_mcp_handle_batch(const tg_mcp_server *srv, const tg_mcp_request *req,
                        const tg_rpc_msg *batch, tg_mcp_serving_fn *serving, void *arg,
                        tg_mcp_reply *reply);

/* The MCP CallToolResult of a tg_call outcome (status TG_OK or TG_E_TOOL, value its
 * result or error envelope); NULL when out of memory. */
json_t *tg_mcp_tool_result(const tg_tool *tool, int status, json_t *value);
/* Whether a handler's result asks the client for input (resultType "input_required"). */
bool tg_mcp_is_input_required(json_t *result);
/* Whether what an InputRequiredResult asks may reach the client of a request, which can
 * carry it (carried: as the result on 2026-07-28, or as requests of their own on a 2025
 * transport that can ask) or not, with client capabilities caps: 0 when it may; 1 with the
 * JSON-RPC error that answers the request instead in *code, *message (static) and *data
 * (new, or NULL): -32021 naming the capabilities the input needs and caps lacks, -32603 when
 * it cannot be carried or for no input or input of a kind this server does not know; or
 * TG_E_NOMEM. */
int tg_mcp_input_refusal(bool carried, json_t *caps, json_t *result, int *code,
                         const char **message, json_t **data);

/* The MCP tool annotations of tool, derived from its effect, risk and flags. */
json_t *tg_mcp_annotations(const tg_tool *tool);

/* Private to the files of src/http: the server's state (server, its sessions, streams, listeners,
 * requests and workers) and what each file of the HTTP transport offers the others. */

#pragma once

#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/token_use.h"
#include "http/server.h"
#include "mcp/ask.h"
#include "mcp/inflight.h"
#include "mcp/jsonrpc.h"
#include "mcp/watch.h"
#include "util/ids.h"
#include "util/process_tag.h"

#define SESSION_ID_BYTES 16
#define MAX_ASKS 16      /* server-to-client requests open per session */
#define HANGUP_CHECK_MS 1000 /* how soon a client closing a stream is noticed */
/* A body this large or larger has what malloc keeps trimmed once its text is let go (read_post)
 * and once it is done (on_completed). */
#define HTTP_TRIM_AFTER_BYTES (1u * 1024u * 1024u)
#define SPARE_DBS 16         /* database connections kept from closed client connections */
/* How long a stopping server lets listen streams deliver their end, and the calls cancelled
 * past its grace end so. */
#define DRAIN_MS 1000
#define POLLING_VERSION "2025-11-25" /* the first revision whose clients resume call streams */

/* Whether clients of a session of this revision resume its calls' streams (Last-Event-ID). */
static inline bool http_resumes_streams(const char *version) {
  return strcmp(version, POLLING_VERSION) >= 0;
}

typedef struct stream stream;

typedef struct worker worker;

typedef struct listener listener;

typedef struct server server;

/* The run of an active agent's session (tg_run_open_session), ended once the session is
 * released, after its last call: queued then for a thread with a database connection
 * (http_end_session_runs). */
typedef struct session_run {
  char id[TG_UUID_LEN + 1];
  const char *status; /* how it ends */
  struct session_run *next;
} session_run;

typedef struct session {
  server *srv;
  char id[2 * SESSION_ID_BYTES + 1];
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that opened it; "" without auth */
  int refs;
  int checking; /* of refs, those a list check or the look for revoked tokens holds: they
                 * keep it, they do not use it */
  bool dead;    /* out of the table: ended, reaped, or the server stopped */
  bool ended;   /* ended by its client (http_session_end_locked): its requests do not run */
  bool revoked; /* ended as its token was revoked (end_revoked) */
  /* NULL: its calls are runs of their own (an agent's, until its first call opens it; one
   * whose initialize named a run) or of none (a user's) */
  session_run *run;
  bool run_later;     /* it opens its run at its next call: see http_session_run */
  unsigned run_tries; /* its late openings tried (under the server's lock) */
  pthread_mutex_t run_opening; /* held while it opens its run late: one request at a time */
  int64_t last_used; /* monotonic (ms) */
  uint64_t use_order; /* of the server's session uses: the least recently used, though several
                       * fall in one millisecond */
  tg_mcp_session state; /* guarded by the server's lock */
  tg_mcp_inflight *inflight; /* its requests, which notifications/cancelled reaches */
  tg_mcp_watch *watch;       /* its list changes, sent on its GET stream */
  tg_mcp_question asks[MAX_ASKS];
  tg_mcp_questions questions; /* asks, under the server's lock */
  /* One of its questions was answered, it ended, or one of its requests was cancelled: its
   * questions (only theirs) look again. */
  pthread_cond_t answered;
  /* SSE streams, numbered per session so that an event id "STREAM-EVENT" names its stream. */
  unsigned next_stream;
  stream *kept[TG_HTTP_KEPT_STREAMS]; /* POST streams a client may resume, each with a reference */
  stream *standalone; /* the GET stream, with a reference; NULL until the client opens one */
  struct session *next;
  struct session *next_in_bucket; /* of the index by id (server.by_id) */
} session;

/* What the streams of one principal hold, counted for the share of each caller, and how many
 * of its requests are answered at once. */
typedef struct held_share {
  char principal[TG_UUID_LEN + 1];
  atomic_size_t held; /* all their output */
  atomic_size_t kept; /* of which delivered, kept for resumption */
  atomic_size_t taking; /* their request bodies held (see TG_HTTP_MAX_TAKING_BYTES) */
  unsigned refs; /* one a stream, a JSON answer or a request; under the server's shares_lock */
  /* Under shares_lock (see TG_HTTP_MAX_REQUESTS_PER_PRINCIPAL): its requests answered, and
   * its calls on the pool (waiting in line or running, whether or not a connection still
   * waits for them: a session's call outlives its client's leaving). */
  unsigned requests, pool_calls;
  struct held_share *next;
} held_share;

/* A kind of libmicrohttpd line (its format string), when it was last logged (monotonic ms),
 * how many were not since, and the last of those. */
#define MHD_LINE_KINDS 16 /* the last takes every kind past the others */
#define MHD_LINE_MAX 512
typedef struct mhd_line {
  const char *fmt;
  int64_t logged_ms;
  unsigned held_back;
  char last_held[MHD_LINE_MAX];
} mhd_line;

/* One open connection: its database connection, and by when its client must have sent its
 * request whole or taken its answer whole (monotonic ms; 0 while its request is answered, or
 * answered by a stream that may still grow). */
typedef struct peer {
  server *srv;
  tg_db *db;
  int fd;
  /* The caller's share counting the request it answers (see http_request_begin), until its
   * answer is queued (small) or its request completed, or until its answer takes it over (a
   * stream's reader, a large JSON answer: see http_queue_stream, http_queue_reply); NULL: none
   * counted. */
  held_share *answering;
  _Atomic int64_t due_by;
  bool cut; /* shut down by the sweeper */
  struct peer *prev, *next;
} peer;

struct server {
  const tg_http_config *cfg;
  tg_mcp_server mcp; /* cfg->server, advertising the list changes this transport delivers */
  bool loopback;
  /* On loopback, the address it listens on as numbers ("127.0.0.2", "[::1]"): a name of this
   * machine besides the usual ones (loopback_host); "" elsewhere. */
  char own_host[INET6_ADDRSTRLEN + 3];
  char *public_url; /* cfg->public_url, or this server's own address */
  pthread_mutex_t lock;
  uint64_t session_uses; /* counts the uses of sessions (session.use_order) */
  session *sessions;
  size_t n_sessions;
  /* The same sessions by the hash of their id, so that a request finds its own without a
   * look at each of up to TG_HTTP_MAX_SESSIONS under this lock. */
  session *by_id[TG_HTTP_SESSION_BUCKETS];
  session_run *runs_to_end; /* of the sessions released */
  /* This process, which holds the runs of its sessions: a server that finds it gone ends
   * them (tg_run_end_orphans); "" when /proc cannot tell. */
  char holder[TG_PROCESS_TAG_LEN];
  listener *listeners; /* the open subscriptions/listen streams */
  size_t n_listeners;
  /* The stateless calls of a token (tools/call), waiting in line or running, on the pool or
   * on their connection's thread, for end_revoked to cancel. */
  worker *token_calls;
  size_t n_token_calls;
  bool closing;        /* tg_http_stop began: no listen stream opens any more */
  _Atomic bool quiescing;       /* tg_http_stop began: every new request gets a 503 */
  _Atomic bool past_grace;      /* and its grace is over: every request counts as cancelled */
  _Atomic unsigned answering_now; /* requests begun and not completed, for the stop to wait */
  _Atomic int64_t last_request_ms; /* when a request last began or completed (monotonic) */
  /* Output in the buffers of its streams and of JSON answers not sent yet. What is not
   * delivered yet is bounded by held_max, so that clients that never read what their calls
   * say cannot exhaust memory, and a caller's by half of it, so that one caller cannot leave
   * the others without room: past it, output is refused. What was delivered and is kept for
   * resumption (kept) is bounded by half as much again (a quarter a caller): past it,
   * delivered output is no longer kept, so that it never takes the room of output still to
   * deliver. A stream that delivered nothing for replay_keep_ms keeps nothing. */
  atomic_size_t held, kept;
  size_t held_max;
  atomic_size_t taking; /* request bodies held, for all callers */
  size_t taking_max;
  int64_t replay_keep_ms; /* past it, a stream that delivered nothing keeps nothing */
  int64_t keepalive_ms;   /* a stream quiet so long sends a comment line */
  pthread_mutex_t shares_lock; /* apart from lock: streams are released under it */
  held_share *shares;
  /* When a line a client can cause was last logged (monotonic ms; see tg_log_may): a bad token,
   * a body closed past its bound, every connection slot in use, slow senders cut off, a
   * session ended to make room, a batched response no request waits for, a stream still to
   * deliver let go, a reply past the bounds on output, a body past the bounds on bodies
   * held, a call refused a place in line, a session's run the database would not start or
   * end. */
  _Atomic int64_t refused_logged_ms, overlong_logged_ms, full_logged_ms, slow_logged_ms,
      ended_logged_ms, stray_logged_ms, let_go_logged_ms, past_bounds_logged_ms, busy_logged_ms,
      line_full_logged_ms, run_opens_logged_ms, run_ends_logged_ms;
  _Atomic unsigned slow_cut; /* slow clients cut off since the last line about them */
  /* libmicrohttpd's lines, limited as the others but kind by kind (see http_mhd_log). */
  pthread_mutex_t mhd_lines_lock;
  mhd_line mhd_lines[MHD_LINE_KINDS];
  /* The open connections, for the sweeper to close those too slow to send a request or to take
   * an answer. */
  pthread_mutex_t peers_lock;
  peer *peers;
  unsigned n_peers;
  /* Database connections of closed client connections, for the next ones: opening one reads
   * the whole schema again, which took about a third of a new connection's cost. Closed once
   * the server rests (see rest_when_quiet). */
  tg_db *spare_dbs[SPARE_DBS];
  unsigned n_spare_dbs, spare_dbs_closed;
  /* The worker pool: a fixed set of threads, each with its own database connection for its
   * whole life, taking tool calls from a queue of at most max_queued_calls (see start_call,
   * post.c). */
  pthread_t *pool;
  unsigned n_pool;
  /* Whose call each pool thread runs ("" when none); a principal runs at most busy_max at
   * once, so that calls waiting on one client never hold every thread. */
  char (*busy)[TG_UUID_LEN + 1];
  unsigned n_busy, busy_max;
  worker *queue_head, *queue_tail;
  unsigned line_promised; /* places in the line kept for calls on their way to it */
  pthread_cond_t queued;
  bool stopping;      /* the pool drains the queue and ends; so does the sweeper */
  /* The thread that checks every watch for list changes, every TG_HTTP_CHECK_MS (and lets go
   * of stale kept output): of its own, so that pool threads held by calls waiting on their
   * clients cannot hold it up. */
  pthread_t sweeper;
  bool sweeper_started;
  pthread_cond_t sweep_stop; /* broadcast when stopping is set */
  tg_token_uses *token_uses; /* the tokens' last uses, written by the sweeper */
};

struct stream {
  server *srv;
  held_share *share; /* its principal's */
  pthread_mutex_t lock;
  pthread_cond_t ready;
  /* SSE text, whole events, in buf[head, len); buf[0, head) was dropped, and goes when it is
   * as much as what stays, so that dropping costs little per byte. buf[head, sent) goes out
   * no more to the connection reading it; a stream of a session keeps up to
   * REPLAY_MAX_BYTES of it for Last-Event-ID, a sessionless one none. buf[head, seen) went
   * out at least once: it counts as kept, also while a resumption sends it again (sent then
   * goes back), so that resuming never turns output into undelivered output without the
   * bounds that refuse it. */
  char *buf;
  size_t head, len, sent, seen;
  /* Where the events of buf end, in order: ends[ends_head] ends event number first. */
  size_t *ends;
  size_t ends_head, n_ends, ends_cap;
  int64_t delivered_at; /* monotonic (ms): when output last went out */
  int64_t read_until;   /* monotonic (ms): when a connection last stopped reading it */
  unsigned no;         /* number in its session; 0: sessionless, its events carry no id */
  unsigned first;      /* number of the first event in buf */
  unsigned next_event; /* number of the last event appended */
  char *final;         /* the answer, encoded, while the response is not a stream */
  json_t *final_id;    /* the id it answers */
  int final_status;
  bool done;           /* nothing more will be appended */
  bool streaming;      /* the response is an SSE stream */
  bool reading;        /* a connection reads it */
  unsigned reader;     /* which one: a resumption takes the stream over from a stale one */
  int reader_fd;       /* the socket of the connection that took it on GET (standalone_locked) */
  bool closed;         /* a sessionless stream lost its client: nothing more is kept */
  bool polling;        /* the call asked that its answer end now; the client resumes it */
  /* The call asked that the answer a connection reads end now: it ends at cut_at, after the
   * events appended until then, with the reconnection delay. */
  bool cutting;
  size_t cut_at;
  bool cut_primed; /* the answer cut is the priming event alone, which gives the delay */
  bool reader_primed; /* the connection reading st reads it from its priming event */
  bool primed;        /* st began with its priming event (kept when delivered and dropped) */
  bool quiet_start;   /* its answer began with nothing to send: a comment line goes out first */
  /* A sessionless stream's, run once when its client goes away. */
  void (*on_close)(void *arg);
  void *close_arg;
  tg_mcp_inflight *inflight; /* a 2026-07-28 call's, which closing the stream cancels */
  json_t *call_id;
  bool revoked; /* the call was cancelled as its token was revoked (end_revoked) */
  int refs;
};

struct listener {
  server *srv;
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that opened it; "" without auth */
  tg_mcp_watch *watch;
  stream *st;
  int refs; /* guarded by the server's lock: the registry's, the open answer's, checks' */
  listener *next;
};

typedef struct request {
  bool answered; /* refused from its headers: its body, if any, is dropped unread */
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that named it; "" without auth */
  int64_t checked_ms; /* monotonic: when the token was checked */
  char *body;         /* NULL once decoded (read_post) */
  size_t len;
  size_t dropped; /* of a body past the bound: the bytes that came, none of them kept */
  tg_rpc_id_scan *past; /* of such a body, what its refusal may name */
  /* Its caller's share (a reference) once its body comes, and the status refusing a body
   * dropped as it passed the bounds on bodies held at once (0: none did). */
  held_share *taker;
  unsigned busy_status;
  size_t decoded; /* counted with its body: what its message holds decoded beyond its bytes */
  bool let_go;    /* its body and message no longer counted (http_body_let_go) */
  bool takes_events;   /* Accept takes text/event-stream */
  bool prefers_events; /* Accept names it, no lower than JSON: a call's answer may stream */
  /* A header about the message given more than once on a POST: the refusal waits for the
   * body, whose request id it names; -32020 when 2026-07-28 validates it. NULL: none. */
  const char *repeated_header;
  bool repeated_by_2026;
  /* A POST refused for its Accept or Content-Type: the same (NULL: none), with its status. */
  const char *refused_media;
  unsigned refused_media_status;
} request;

struct worker {
  server *srv;
  worker *next; /* in the pool's queue */
  /* Its caller's share, counting the call among its calls on the pool (see start_call,
   * post.c); NULL without authentication. */
  held_share *caller;
  stream *st;
  session *sess; /* NULL for stateless requests */
  tg_mcp_inflight *inflight; /* the session's, or the stream's of a stateless call */
  int fd; /* the socket of the connection waiting for a stateless call's first output */
  /* Of a stateless call made with a token: the token's hash, and its place among the
   * server's token_calls (listed: in it). */
  char token_hash[TG_TOKEN_HASH_LEN + 1];
  bool listed;
  worker *prev_call, *next_call;
  tg_mcp_session scratch;
  bool opened;      /* this request is the initialize that opened sess */
  char principal[TG_UUID_LEN + 1];
  tg_mcp_headers headers;
  char *header_copies[4]; /* MCP-Protocol-Version, Mcp-Method, Mcp-Name, Toolgate-Run */
  json_t *params; /* Mcp-Param-* headers */
  tg_rpc_msg msg;
};

/* The Mcp-Param-{Name} headers of a request, keyed by lower-case Name. */
typedef struct param_headers {
  json_t *params;
  bool too_many; /* more than MAX_PARAM_HEADERS names */
  bool too_long; /* a Name past MAX_PARAM_NAME: cut, two could pass for one repeated */
  bool failed;   /* out of memory */
} param_headers;

/* Headers a request may carry once: only a list may repeat (RFC 9110 §5.3), and two Host
 * lines are a 400 (RFC 9112 §3.2). Read as their first line, a repeated one could let a
 * proxy and this server act on different values. Transfer-Encoding is a list, but the only
 * one taken is "chunked" alone (see http_admit): on two lines, it is refused too. */
#define HTTP_N_SINGLETONS 12
extern const char *const http_singletons[HTTP_N_SINGLETONS];
/* Those from this index on are about the message a POST carries, not about how it is framed,
 * sent or authenticated: a fault of one waits for the body, whose request id it names. */
#define HTTP_FIRST_ABOUT_THE_MESSAGE 6

/* What http_see_header saw of a request's headers: how often each singleton came, and
 * whether any is malformed. */
typedef struct headers_seen {
  unsigned seen[HTTP_N_SINGLETONS];
  bool bad_name; /* a header whose name is not a token, as "Content-Length :" */
  bool bad_value; /* a header whose value holds a control character but a tab */
  bool framing_runs_on; /* a name that begins as a framing header's, as a folded line's does */
} headers_seen;

/* What a request's Authorization header came to. */
typedef enum caller {
  CALLER_KNOWN,
  CALLER_NO_TOKEN,
  CALLER_EMPTY_TOKEN, /* "Bearer" alone: often a client's token variable left unset */
  CALLER_BAD_TOKEN,
  CALLER_OTHER_WORKSPACE, /* a good token of a workspace other than the one served (--tenant) */
  CALLER_UNCHECKED
} caller;

/* A session a batch of it is delivered to. */
typedef struct batch_target {
  server *srv;
  session *sess;
} batch_target;

/* ---- server.c ---- */

tg_env http_server_env(const server *s, tg_db *db);

/* ---- admit.c ---- */

enum MHD_Result http_admit(server *s, struct MHD_Connection *conn, const char *target,
                           const char *method, const char *version, request *rq);

/* ---- auth.c ---- */

caller http_authenticate(server *s, struct MHD_Connection *conn, tg_db *db,
                         char out[TG_UUID_LEN + 1], char hash[TG_TOKEN_HASH_LEN + 1]);
enum MHD_Result http_refuse_caller(server *s, struct MHD_Connection *conn, caller who);

/* ---- body.c ---- */

enum MHD_Result http_body_take(server *s, struct MHD_Connection *conn, request *rq,
                               const char *data, size_t *size);
json_t *http_media_refusal(json_t *err, const char *why);
enum MHD_Result http_refuse_busy(server *s, struct MHD_Connection *conn, const request *rq,
                                 const tg_rpc_id_scan *scan);
bool http_take_decoded(server *s, request *rq);
void http_scan_body(const request *rq, tg_rpc_id_scan *scan);
void http_body_let_go(server *s, request *rq);
enum MHD_Result http_refuse_too_large(server *s, struct MHD_Connection *conn,
                                      const request *rq, const tg_rpc_id_scan *scan);

/* ---- mhd_log.c ---- */

void http_close_on_purpose(void);
__attribute__((format(printf, 2, 0))) void http_mhd_log(void *cls, const char *fmt, va_list ap);
void http_tell_held_back_mhd_lines(server *s, bool force);

/* ---- post.c ---- */

enum MHD_Result http_handle_post(server *s, struct MHD_Connection *conn, tg_db *db,
                                 request *rq);

/* ---- session_routes.c ---- */

enum MHD_Result http_handle_delete(server *s, struct MHD_Connection *conn, tg_db *db,
                                   const request *rq);
enum MHD_Result http_handle_get(server *s, struct MHD_Connection *conn, tg_db *db,
                                const request *rq);

/* ---- address.c ---- */

bool http_host_ok(const server *s, const char *host);
bool http_origin_ok(const server *s, const char *origin);
int http_parse_listen(const char *listen, struct sockaddr_storage *addr, bool *loopback);
int http_listen_on(const char *listen_arg, struct sockaddr_storage *addr);
unsigned http_port_of(const struct sockaddr_storage *addr);
bool http_same_file(int a, int b);
void http_numeric_host(const struct sockaddr_storage *addr, char out[INET6_ADDRSTRLEN + 3]);
int http_own_url(const server *s, const struct sockaddr_storage *addr, char **url);

/* ---- connection.c ---- */

bool http_connection_gone(void *arg);
bool http_client_gone(int fd);
int http_connection_fd(struct MHD_Connection *conn);
peer *http_peer_of(struct MHD_Connection *conn);
tg_db *http_peer_db(peer *p);
unsigned http_idle_timeout_s(const server *s);
int64_t http_slow_limit_ms(const server *s, size_t bytes);
void http_set_due_by(struct MHD_Connection *conn, int64_t due_by);

/* ---- headers.c ---- */

bool http_header_value(struct MHD_Connection *conn, const char *name, char **ret);
/* The Mcp-Session-Id a request names (*ret malloc'd; NULL when it names none, as an empty
 * value does); false when out of memory. */
bool http_session_id(struct MHD_Connection *conn, char **ret);
enum MHD_Result http_collect_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value);
enum MHD_Result http_see_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value);
bool http_validated_by_2026(const char *name, const char *revision);

/* ---- respond.c ---- */

enum MHD_Result http_respond_with(struct MHD_Connection *conn, unsigned status,
                                  struct MHD_Response *res, const char *type,
                                  const char *session_id, const char *allow);
enum MHD_Result http_respond(struct MHD_Connection *conn, unsigned status, const char *type,
                             const char *body, const char *session_id, const char *allow);
enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, const char *type,
                           const char *body, const char *session_id);
enum MHD_Result http_session_not_found(struct MHD_Connection *conn);
enum MHD_Result http_queue_unanswered(struct MHD_Connection *conn, bool holds_request,
                                      const char *session_id);
enum MHD_Result http_queue_reply(server *s, struct MHD_Connection *conn, const char *principal,
                                 unsigned status, char *text, json_t *id,
                                 const tg_rpc_msg *batch, const char *session_id);
enum MHD_Result http_queue_json(struct MHD_Connection *conn, unsigned status, json_t *msg,
                                const char *session_id);
enum MHD_Result http_queue_rpc_error(struct MHD_Connection *conn, unsigned status, int code,
                                     const char *message);
enum MHD_Result http_queue_refusal_with(struct MHD_Connection *conn, unsigned status,
                                        const tg_rpc_msg *msg, int code, const char *message,
                                        json_t *data);
enum MHD_Result http_queue_refusal_as(struct MHD_Connection *conn, unsigned status,
                                      const tg_rpc_msg *msg, int code, const char *message);
enum MHD_Result http_queue_refusal(struct MHD_Connection *conn, unsigned status,
                                   const tg_rpc_msg *msg, const char *message);

/* ---- session.c ---- */

void http_session_release_locked(server *s, session *x);
void http_session_unlink_locked(server *s, session *x);
void http_session_end_locked(server *s, session *x);
void http_drop_idle_locked(server *s);
session *http_session_new(server *s, const char *principal, const char *token_hash);
bool http_session_admit(server *s, session *x);
const char *http_session_run(server *s, tg_db *db, session *x);
void http_end_session_runs(server *s, tg_db *db);
session *http_session_find(server *s, const char *id, const char *principal,
                           const char *token_hash);
void http_session_put(server *s, session *x);
/* Whether x (NULL: no session) was ended for its client: deleted, its token revoked, or its
 * run refused. (A server that stops lets its sessions' requests run.) */
bool http_session_ended(server *s, session *x);

/* ---- stream.c ---- */

held_share *http_share_get(server *s, const char *principal);
void http_share_put(server *s, held_share *h);
held_share *http_request_begin(server *s, const char *principal, bool pool_call, bool *full);
unsigned http_pool_calls_of(server *s, held_share *h);
void http_request_done(server *s, held_share *h, bool pool_call);
bool http_taking_past(server *s, held_share *h, size_t n, unsigned *status);
void http_taking_count(server *s, held_share *h, size_t n, bool less);
void http_request_done_once(server *s, held_share **counted);
void http_held_count_in(server *s, held_share *share, size_t n, bool less, bool kept);
bool http_past_bounds(server *s, held_share *share, size_t unread, size_t n);
char *http_too_large(server *s, json_t *id, const tg_rpc_msg *batch, size_t n);
void http_set_sent_locked(stream *st, size_t sent);
stream *http_stream_new(server *s, unsigned no, const char *principal);
void http_stream_ref(stream *st);
void http_stream_release(stream *st);
void http_stream_end(stream *st);
void http_append_reply_locked(stream *st, char *text, json_t *id);
int http_stream_text(stream *st, char *text);
int http_stream_event(stream *st, json_t *msg);
void http_stream_finish(stream *st, char *text, json_t *id, int status);
size_t http_event_offset_locked(const stream *st, unsigned n);
size_t http_event_start_locked(const stream *st, size_t at);
void http_drop_delivered_locked(stream *st, size_t keep);
void http_compact_locked(stream *st);
int http_prime_locked(stream *st);
/* Primes st (http_prime_locked) unless anything went on it yet: a call's first event, for a
 * stream that was not primed as it began (a call that runs on its connection's thread). */
int http_prime_first(stream *st);
void http_stream_poll(stream *st);
void http_stream_detach(stream *st, unsigned reader_id);
enum MHD_Result http_queue_sse(struct MHD_Connection *conn, struct MHD_Response *res,
                               const char *session_id);
enum MHD_Result http_queue_stream(struct MHD_Connection *conn, stream *st, unsigned id);

/* ---- listener.c ---- */

void http_listener_put(listener *l);
void http_listener_end(listener *l, json_t *meta);
void http_listener_closed(void *arg);
listener *http_listener_open(server *s, const char *principal, const char *token_hash,
                             unsigned *status, const char **why);
enum MHD_Result http_listener_serve(struct MHD_Connection *conn, listener *l);
void http_listeners_end(server *s);

/* ---- worker.c ---- */

int http_worker_send(void *self, json_t *msg);
void http_cancel_call(void *arg);
bool http_revoked_call(server *s, session *x, stream *st);
bool http_cancellable_alone(stream *st, json_t *id);
void http_request_run(const worker *w, tg_mcp_request *req);
void http_answer_unreadable(server *s, struct MHD_Connection *conn, const request *rq,
                            const tg_rpc_id_scan *scan, const json_t *refusal);
int http_deliver_batched_answer(void *arg, tg_rpc_msg *element);
bool http_state_load(server *s, session *x, tg_mcp_session *out);
void http_state_store(server *s, session *x, tg_mcp_session *in, bool opened);
void http_list_token_call_locked(server *s, worker *w);
void http_worker_free(worker *w);
unsigned http_queued_locked(server *s);
void http_drop_cancelled_in_line(server *s);
tg_db *http_thread_db(server *s, tg_db **db);
void *http_pool_main(void *arg);

/* ---- sweeper.c ---- */

void http_check_lists(server *s, tg_db *db, const char *principal, session *only);
void *http_sweeper_main(void *arg);

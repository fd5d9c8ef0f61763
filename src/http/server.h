/* Streamable HTTP for MCP on libmicrohttpd: POST/GET/DELETE /mcp and GET /healthz, Bearer
 * token authentication, Origin and Host checks, legacy sessions with their GET stream and
 * Last-Event-ID resumption, SSE for tool calls, cancellation (notifications/cancelled on a
 * session, a closed stream on 2026-07-28) and list changes (a session's GET stream,
 * 2026-07-28 subscriptions/listen streams). One thread per connection (bounded), each with
 * its own database connection, serves what it reads; calls that may wait on their clients
 * (interactive tools, answered as SSE) run on a fixed pool of worker threads, each with its
 * own database connection for its whole life, and a sweeper thread checks list changes and
 * revoked tokens while no request comes. */
#pragma once
#include <stdbool.h>

#include "core/registry.h"
#include "mcp/server.h"

#define TG_HTTP_MAX_CONNECTIONS 256
#define TG_HTTP_MAX_CONNECTIONS_PER_ADDRESS 64 /* a remote address's share (not on loopback) */
/* Requests of one token's holder answered at once (streams included), so that one holder
 * cannot take every connection slot from the others; without authentication, every client
 * is the one holder, and there is no such share. */
#define TG_HTTP_MAX_REQUESTS_PER_PRINCIPAL 64
/* Calls waiting in line for a pool thread: a session's call stays in line after its client
 * left (to resume its stream later), so the connection slots alone do not bound the line. */
#define TG_HTTP_MAX_QUEUED_CALLS 256
#define TG_HTTP_MAX_SESSIONS 1024
#define TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL 64   /* a principal's share of them */
/* The buckets of the index of sessions by id, a power of 2: a session's is the low bits of
 * tg_hash_text of its id. */
#define TG_HTTP_SESSION_BUCKETS 256
/* A session's POST streams kept for its client to resume: past it, the oldest whose call
 * ended and whose output all went out gives its place (else the oldest of all). */
#define TG_HTTP_KEPT_STREAMS 16
#define TG_HTTP_SESSION_IDLE_MS (30LL * 60 * 1000)
#define TG_HTTP_KEEPALIVE_MS (15LL * 1000)     /* comment lines on a quiet SSE stream */
/* A connection that sends and receives nothing this long is closed (a quiet SSE stream is
 * kept alive by its comment lines; a call running is not idle): connections that never
 * send a request cannot hold the connection slots for long. */
#define TG_HTTP_IDLE_TIMEOUT_S 30
#define TG_HTTP_CHECK_MS (2LL * 1000)          /* list checks while no message arrives */
/* Without a request begun or completed this long, the server closes the database connections
 * that closed client connections left for the next ones, and gives the memory freed back to
 * the system: a burst of clients does not keep its high mark. */
#define TG_HTTP_REST_AFTER_MS (10LL * 1000)
#define TG_HTTP_MAX_LISTENS 64                 /* subscriptions/listen streams open at once */
#define TG_HTTP_MAX_LISTENS_PER_PRINCIPAL 8
#define TG_HTTP_MAX_STREAM_BYTES (16u * 1024u * 1024u) /* unread SSE output kept for one client */
#define TG_HTTP_MAX_HELD_BYTES (256u * 1024u * 1024u)  /* output not delivered yet (SSE and JSON
                                                        * answers), for all clients; one caller's
                                                        * half at most; delivered SSE output is
                                                        * kept for resumption up to half as much
                                                        * again */
/* Request bodies taken in and held at once (read, and kept until their request is answered),
 * for all clients; one caller's half at most. A body past it is read and dropped, and refused
 * (503; 429 past the caller's half). */
#define TG_HTTP_MAX_TAKING_BYTES (256u * 1024u * 1024u)
/* How long a stopping server gives the requests it is answering (a call that may commit) to
 * be answered; past it, the calls still running are cancelled. */
#define TG_HTTP_STOP_GRACE_MS (10LL * 1000)
/* Delivered SSE output is kept for resumption until its stream delivered nothing this long. */
#define TG_HTTP_REPLAY_KEEP_MS (5LL * 60 * 1000)

/* Tests: called by the sweep looking for revoked tokens, once it holds the sessions it looks
 * at and before it looks. */
extern void (*_Atomic tg_http_test_looking)(void); /* atomic: set by a test thread */
/* Tests: called with the id of the session a POST names, once it found it live. */
extern void (*_Atomic tg_http_test_session_found)(const char *id);

typedef struct tg_http_config {
  const char *listen; /* HOST:PORT or [V6]:PORT; port 0 picks a free one */
  bool no_auth;       /* loopback only */
  const char *no_auth_principal;
  const char *no_auth_who; /* the same, named for the log ("agent demo") */
  const char *tenant_id;   /* with authentication: the only workspace whose tokens it takes
                            * (NULL: every workspace's, each acting in its own) */
  unsigned threads;   /* worker threads running the calls that wait on their clients
                       * (interactive tools); further ones wait in a queue */
  const char *data_dir;
  const char *public_url; /* how people reach this server, for links; NULL or "": its own
                           * address (http://HOST:PORT of the socket it listens on) */
  const tg_registry *registry;
  tg_rate_limit *rate_limit; /* on each caller's tool calls; NULL: none */
  tg_mcp_server server;
  size_t max_held_bytes; /* output held for all clients; 0: TG_HTTP_MAX_HELD_BYTES */
  size_t max_taking_bytes; /* request bodies held for all clients; 0: TG_HTTP_MAX_TAKING_BYTES */
  long long replay_keep_ms; /* 0: TG_HTTP_REPLAY_KEEP_MS */
  long long keepalive_ms;   /* 0: TG_HTTP_KEEPALIVE_MS */
  long long session_idle_ms; /* 0: TG_HTTP_SESSION_IDLE_MS */
  unsigned idle_timeout_s; /* 0: TG_HTTP_IDLE_TIMEOUT_S */
  long long rest_after_ms; /* 0: TG_HTTP_REST_AFTER_MS */
  unsigned max_requests_per_principal; /* 0: TG_HTTP_MAX_REQUESTS_PER_PRINCIPAL */
  unsigned max_queued_calls; /* 0: TG_HTTP_MAX_QUEUED_CALLS */
  long long stop_grace_ms; /* 0: TG_HTTP_STOP_GRACE_MS */
} tg_http_config;

/* Whether cfg's listen is an address to serve on, and on loopback with no_auth: TG_E_INVAL
 * (logged with the reason) when not, so that a command can refuse it before it starts;
 * TG_E_IO (logged) when its host name could not be resolved. */
int tg_http_check_listen(const tg_http_config *cfg);

/* Serves until SIGINT or SIGTERM. Logs "listening on HOST:PORT" on stderr once ready.
 * Returns 0 after a clean stop, negative TG_E_* when it cannot start. */
int tg_http_serve(const tg_http_config *cfg);

/* The same server without the signal handling, for tests and fuzzers: starts listening
 * (cfg must outlive it), reports the bound port. */
typedef struct tg_http tg_http;
int tg_http_start(const tg_http_config *cfg, tg_http **ret, unsigned *ret_port);
/* Serves an already connected socket (one end of a socketpair, say) as a loopback client. */
int tg_http_add_connection(tg_http *h, int fd);
/* For tests: the requests being answered now (begun, not completed), and the calls waiting
 * for a pool thread. */
void tg_http_load(tg_http *h, unsigned *answering, unsigned *queued);
/* For tests: the database connections closed client connections left for the next ones
 * (kept), and how many such the server closed as it rested (see TG_HTTP_REST_AFTER_MS). */
void tg_http_spare_dbs(tg_http *h, unsigned *kept, unsigned *closed);
/* Stops listening, ends every session, gives the requests being answered and the calls on
 * the pool their grace (stop_grace_ms), then cancels those left; frees h. */
void tg_http_stop(tg_http *h);

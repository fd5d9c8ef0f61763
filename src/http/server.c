#define _GNU_SOURCE
#include "http/server.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/principal.h"
#include "core/registry.h"
#include "core/run.h"
#include "core/token_use.h"
#include "http/media.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"
#include "util/process_tag.h"
#include "util/status.h"

#define SESSION_ID_BYTES 16
#define REPLAY_MAX_BYTES (256u * 1024u)        /* delivered SSE output kept for Last-Event-ID */
/* A JSON answer this small goes out uncounted, whatever the bounds on output: one a
 * connection at most (1 MB in all), the error in its place would be about as large, and
 * most answers (initialize's, ping's, most calls') are this small. */
#define SMALL_ANSWER_BYTES 4096
#define RETRY_MS 500     /* the reconnection delay a primed stream asks of the client */
#define MAX_ASKS 16      /* server-to-client requests open per session */
#define HANGUP_CHECK_MS 1000 /* how soon a client closing a stream is noticed */
#define SPARE_DBS 16         /* database connections kept from closed client connections */
/* A request must arrive whole within this many idle timeouts of its connection's start or
 * previous answer, and a JSON answer (or what is left of a stream that ended) be taken whole
 * within as many more as it holds TAKING_BYTES_PER_TIMEOUT (70 KB a second with the default
 * timeout): a client that sends or reads a byte now and then is never idle, and would hold
 * its connection slot for as long as it likes. An answer the socket's buffers take whole is
 * done with at once. */
#define SLOW_TIMEOUTS 2
#define TAKING_BYTES_PER_TIMEOUT (2u * 1024u * 1024u)
#define DRAIN_MS 1000        /* how long a stopping server lets listen streams deliver their end */
#define POLLING_VERSION "2025-11-25" /* the first revision whose clients resume call streams */
/* A request whose body took longer than this to arrive has its token checked again once it
 * has: one revoked meanwhile is refused, as running calls are cancelled (end_revoked). */
#define TOKEN_RECHECK_MS 1000
/* A body this large or larger has what malloc keeps trimmed once it is done (on_completed). */
#define TRIM_AFTER_BYTES (1u * 1024u * 1024u)

typedef struct stream stream;
typedef struct worker worker;
typedef struct listener listener;
typedef struct server server;

/* ---- legacy sessions ---- */

typedef struct ask_slot {
  json_t *id; /* the request id we sent; NULL: free */
  json_t *response;
} ask_slot;

/* The run of an active agent's session (tg_run_open_session), ended once the session is
 * released, after its last call: queued then for a thread with a database connection
 * (end_session_runs). */
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
  bool dead;
  bool revoked; /* ended as its token was revoked (end_revoked) */
  session_run *run; /* NULL: its calls are runs of their own (an agent's) or of none (a user's) */
  int64_t last_used; /* monotonic (ms) */
  uint64_t use_order; /* of the server's session uses: the least recently used, though several
                       * fall in one millisecond */
  tg_mcp_session state; /* guarded by the server's lock */
  tg_mcp_inflight *inflight; /* its requests, which notifications/cancelled reaches */
  tg_mcp_watch *watch;       /* its list changes, sent on its GET stream */
  ask_slot asks[MAX_ASKS];
  /* SSE streams, numbered per session so that an event id "STREAM-EVENT" names its stream. */
  unsigned next_stream;
  stream *kept[TG_HTTP_KEPT_STREAMS]; /* POST streams a client may resume, each with a reference */
  stream *standalone; /* the GET stream, with a reference; NULL until the client opens one */
  struct session *next;
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
  /* The caller's share counting the request it answers (see request_begin), until its
   * answer is queued (small) or its request completed, or until its answer takes it over (a
   * stream's reader, a large JSON answer: see queue_stream, queue_reply); NULL: none
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
  pthread_cond_t answered; /* an ask slot received its response, or a request was cancelled */
  unsigned long cancellations; /* so that a tool waiting for its client misses none */
  uint64_t session_uses; /* counts the uses of sessions (session.use_order) */
  session *sessions;
  size_t n_sessions;
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
  /* libmicrohttpd's lines, limited as the others but kind by kind (see mhd_log). */
  pthread_mutex_t mhd_lines_lock;
  mhd_line mhd_lines[MHD_LINE_KINDS];
  /* The open connections, for the sweeper to close those too slow to send a request or to take
   * an answer. */
  pthread_mutex_t peers_lock;
  peer *peers;
  unsigned n_peers;
  /* Database connections of closed client connections, for the next ones: opening one reads
   * the whole schema again, which took about a third of a new connection's cost. */
  tg_db *spare_dbs[SPARE_DBS];
  unsigned n_spare_dbs;
  /* The worker pool: a fixed set of threads, each with its own database connection for its
   * whole life, taking tool calls from a queue of at most max_queued_calls (see start_call). */
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

/* What a call on one of this server's threads runs against. */
static tg_env server_env(const server *s, tg_db *db) {
  return (tg_env){.registry = s->cfg->registry, .db = db, .data_dir = s->cfg->data_dir,
                  .public_url = s->public_url};
}


/* Whether a libmicrohttpd line of format fmt may be logged now (once a minute for each kind),
 * with *held_back the count of its kind not logged since the last; if not, it is held back. */
static bool mhd_line_may_log(server *s, const char *fmt, const char *line, unsigned *held_back) {
  pthread_mutex_lock(&s->mhd_lines_lock);
  size_t i = 0;
  while (i < MHD_LINE_KINDS - 1 && s->mhd_lines[i].fmt && s->mhd_lines[i].fmt != fmt) i++;
  mhd_line *kind = &s->mhd_lines[i];
  if (!kind->fmt) kind->fmt = fmt;
  int64_t now = tg_monotonic_ms();
  bool may = !kind->logged_ms || now - kind->logged_ms >= TG_LOG_ONCE_MS;
  if (may) {
    kind->logged_ms = now;
    *held_back = kind->held_back;
    kind->held_back = 0;
  } else {
    kind->held_back++;
    snprintf(kind->last_held, sizeof kind->last_held, "%s", line);
  }
  pthread_mutex_unlock(&s->mhd_lines_lock);
  return may;
}

/* Tells how many libmicrohttpd lines of each kind were held back, once the kind's minute is
 * past (or at once: force, as the server stops), so that the size of a flood is told even
 * when no line of its kind comes after it. */
static void tell_held_back_mhd_lines(server *s, bool force) {
  int64_t now = tg_monotonic_ms();
  for (size_t i = 0; i < MHD_LINE_KINDS; i++) {
    char last[sizeof s->mhd_lines[i].last_held];
    pthread_mutex_lock(&s->mhd_lines_lock);
    mhd_line *kind = &s->mhd_lines[i];
    unsigned held_back = kind->held_back;
    bool tell = held_back && (force || now - kind->logged_ms >= TG_LOG_ONCE_MS);
    if (tell) {
      memcpy(last, kind->last_held, sizeof last);
      kind->logged_ms = now;
      kind->held_back = 0;
    }
    pthread_mutex_unlock(&s->mhd_lines_lock);
    if (tell)
      tg_log(TG_LOG_WARN, "http: %u more lines of this kind held back (libmicrohttpd; the "
             "last: %s)", held_back, last);
  }
}

static bool loopback_host(const char *host, size_t len) {
  static const char *const names[] = {"localhost", "127.0.0.1", "[::1]", "::1"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == len && strncasecmp(host, names[i], len) == 0) return true;
  return false;
}

/* What follows a host name: nothing, or ":" and a port (1 to 5 digits, at most 65535).
 * Anything else (a path, "@", a second name) makes the whole a name this check does not
 * know. */
static bool port_ok(const char *rest) {
  if (!*rest) return true;
  if (*rest++ != ':') return false;
  size_t digits = strspn(rest, "0123456789");
  return digits >= 1 && digits <= 5 && !rest[digits] && strtoul(rest, NULL, 10) <= 65535;
}

/* Host "name[:port]" (a Host header, or what follows an Origin's scheme) names this machine:
 * one of its usual loopback names, or the address s listens on. */
static bool host_ok(const server *s, const char *host) {
  if (!host) return true;
  const char *end = host[0] == '[' ? strchr(host, ']') : strchr(host, ':');
  size_t len = !end ? strlen(host) : (size_t)(end - host) + (host[0] == '[');
  bool own = s->own_host[0] && len == strlen(s->own_host) &&
             strncasecmp(host, s->own_host, len) == 0;
  return (loopback_host(host, len) || own) && port_ok(host + len);
}

/* Origin "scheme://name[:port]" names this machine. */
static bool origin_ok(const server *s, const char *origin) {
  if (!origin) return true;
  const char *p = strstr(origin, "://");
  if (!p) return false;
  size_t scheme = (size_t)(p - origin);
  if (!(scheme == 4 && strncmp(origin, "http", 4) == 0) &&
      !(scheme == 5 && strncmp(origin, "https", 5) == 0))
    return false;
  return host_ok(s, p + 3);
}

static void stream_release(stream *st);
static bool listening_locked(session *x);
static bool idle_locked(session *x, int64_t now, int64_t idle_ms);
static void stream_end(stream *st);
static int stream_text(stream *st, char *text);

static void session_release_locked(server *s, session *x) {
  if (--x->refs > 0) return;
  if (x->run) {
    x->run->status = x->revoked ? "cancelled" : "completed";
    x->run->next = s->runs_to_end;
    s->runs_to_end = x->run;
  }
  for (size_t i = 0; i < MAX_ASKS; i++) {
    json_decref(x->asks[i].id);
    json_decref(x->asks[i].response);
  }
  for (size_t i = 0; i < TG_HTTP_KEPT_STREAMS; i++)
    if (x->kept[i]) stream_release(x->kept[i]);
  if (x->standalone) stream_release(x->standalone);
  tg_mcp_session_done(&x->state);
  /* Nobody else holds the session, so nobody uses these; freeing them takes no lock. */
  tg_mcp_watch_free(x->watch);
  tg_mcp_inflight_free(x->inflight);
  free(x);
}

/* The session's list changes go to its GET stream; without one they are dropped. */
static int session_send(void *self, json_t *msg) {
  session *x = self;
  char *text = tg_rpc_encode(msg); /* before the server's lock, which every request takes */
  json_decref(msg);
  if (!text) return TG_E_NOMEM;
  pthread_mutex_lock(&x->srv->lock);
  int r = TG_OK;
  if (x->standalone) r = stream_text(x->standalone, text);
  else free(text);
  pthread_mutex_unlock(&x->srv->lock);
  return r;
}

static void drop_cancelled_in_line(server *s);

/* A request was cancelled (a session's, or a stateless call whose client left or whose token
 * was revoked): a tool waiting for its client looks again, and a call waiting in line for a
 * pool thread leaves the line at once. */
static void cancellation_heard(void *arg) {
  server *s = arg;
  pthread_mutex_lock(&s->lock);
  s->cancellations++;
  pthread_cond_broadcast(&s->answered);
  pthread_mutex_unlock(&s->lock);
  drop_cancelled_in_line(s);
}

static void session_unlink_locked(server *s, session *x) {
  for (session **p = &s->sessions; *p; p = &(*p)->next) {
    if (*p != x) continue;
    *p = x->next;
    s->n_sessions--;
    x->dead = true;
    pthread_cond_broadcast(&s->answered);
    /* The GET stream ends with its session; the client's reconnection then gets a 404. */
    if (x->standalone) stream_end(x->standalone);
    session_release_locked(s, x);
    return;
  }
}

/* Ends x for its client (DELETE, or its token revoked): its requests, running or waiting for
 * a thread, are cancelled, since nobody waits for their answers any more (the caller, once
 * it let go of the lock, takes those waiting off the line: drop_cancelled_in_line). (A
 * server that stops lets them run: its clients did not go away.) */
static void session_end_locked(server *s, session *x) {
  tg_mcp_inflight_cancel_all(x->inflight);
  s->cancellations++;
  session_unlink_locked(s, x);
}

/* A session neither in use nor listening (its refs but the table's are looks of the sweeper). */
static bool unused_locked(session *x) {
  return x->refs - x->checking == 1 && !listening_locked(x);
}

/* Drops the sessions unused for TG_HTTP_SESSION_IDLE_MS: the sweeper's look (a server that
 * only 2026-07-28 clients use opens none), and before a new session makes room. */
static void drop_idle_locked(server *s) {
  int64_t now = tg_monotonic_ms();
  int64_t idle_ms = s->cfg->session_idle_ms ? s->cfg->session_idle_ms : TG_HTTP_SESSION_IDLE_MS;
  for (session *x = s->sessions, *next; x; x = next) {
    next = x->next;
    if (idle_locked(x, now, idle_ms)) session_unlink_locked(s, x);
  }
}

/* Makes room for a session of principal: drops idle sessions, then, when principal holds its
 * share or the table is full, the least recently used session not in use (principal's own
 * when it is principal's share that is full). False when every candidate is in use. */
static bool reap_locked(server *s, const char *principal) {
  drop_idle_locked(s);
  session *oldest = NULL, *oldest_mine = NULL;
  size_t mine = 0;
  for (session *x = s->sessions; x; x = x->next) {
    if (!unused_locked(x)) {
      mine += strcmp(x->principal, principal) == 0;
      continue;
    }
    bool own = strcmp(x->principal, principal) == 0;
    mine += own;
    if (!oldest || x->use_order < oldest->use_order) oldest = x;
    if (own && (!oldest_mine || x->use_order < oldest_mine->use_order)) oldest_mine = x;
  }
  session *victim = mine >= TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL ? oldest_mine
                    : s->n_sessions >= TG_HTTP_MAX_SESSIONS    ? oldest
                                                               : NULL;
  if (victim && tg_log_may(&s->ended_logged_ms))
    tg_log(TG_LOG_INFO, "http: ended the least recently used session to make room (at most %d "
           "sessions, %d a caller; logged once a minute at most)", TG_HTTP_MAX_SESSIONS,
           TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL);
  if (victim) session_unlink_locked(s, victim);
  return victim || (mine < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL && s->n_sessions < TG_HTTP_MAX_SESSIONS);
}

/* A new session of principal, held by the caller alone and not in the table yet (see
 * session_admit); NULL when out of memory. */
static session *session_new(server *s, const char *principal, const char *token_hash) {
  session *x = calloc(1, sizeof *x);
  unsigned char raw[SESSION_ID_BYTES];
  if (!x || !tg_random_bytes(raw, sizeof raw) ||
      tg_mcp_inflight_new(cancellation_heard, s, &x->inflight) < 0 ||
      tg_mcp_watch_new(session_send, x, &x->watch) < 0) {
    if (x) tg_mcp_inflight_free(x->inflight);
    free(x);
    return NULL;
  }
  x->srv = s;
  tg_hex(raw, sizeof raw, x->id);
  snprintf(x->principal, sizeof x->principal, "%s", principal);
  snprintf(x->token_hash, sizeof x->token_hash, "%s", token_hash);
  tg_mcp_session_init(&x->state);
  x->refs = 1;
  return x;
}

/* Puts x, whose initialize succeeded, in the table (which takes a reference of its own),
 * making room for it; false when no room can be made. Only then: a failed initialize must
 * not push out another session. */
static bool session_admit(server *s, session *x) {
  pthread_mutex_lock(&s->lock);
  x->last_used = tg_monotonic_ms();
  x->use_order = ++s->session_uses;
  bool room = reap_locked(s, x->principal);
  if (room) {
    x->next = s->sessions;
    s->sessions = x;
    s->n_sessions++;
    x->refs++;
  }
  pthread_mutex_unlock(&s->lock);
  return room;
}

/* An active agent's session is a run, opened once its initialize succeeded and it has its
 * place (none for a session ended meanwhile: its token revoked, the server stopping); false
 * (logged, the session ended) when it cannot be. */
static bool session_run_open(server *s, tg_db *db, session *x) {
  pthread_mutex_lock(&s->lock);
  bool dead = x->dead;
  pthread_mutex_unlock(&s->lock);
  if (dead) return true;
  session_run *run = calloc(1, sizeof *run);
  const char *why = "out of memory";
  bool opened = run && tg_run_open_session(db, x->principal, *s->holder ? s->holder : NULL,
                                           run->id, &why) == TG_OK;
  if (!opened && tg_log_may(&s->run_opens_logged_ms))
    tg_log(TG_LOG_ERROR, "http: a session's run could not start, so neither did the session: "
           "%s (logged once a minute at most)", why);
  pthread_mutex_lock(&s->lock);
  if (opened && *run->id) {
    x->run = run;
    run = NULL;
  }
  if (!opened && !x->dead) session_end_locked(s, x);
  pthread_mutex_unlock(&s->lock);
  free(run);
  return opened;
}

/* Ends every run of the list; one an operator ended first stays as it is. */
static int end_runs(void *arg, tg_db *db) {
  for (session_run *run = arg; run; run = run->next) {
    int r = tg_run_end(db, run->id, run->status);
    if (r < 0 && r != TG_E_NOTFOUND) return r;
  }
  return TG_OK;
}

/* Ends the runs of the sessions released, in one transaction, so that a database another
 * process keeps busy holds its caller (the sweep, a DELETE) once at most. When that fails
 * otherwise, each is ended alone, so that one the database refuses holds back no other.
 * Those not ended (logged) are tried again at the next sweep. */
static void end_session_runs(server *s, tg_db *db) {
  pthread_mutex_lock(&s->lock);
  session_run *todo = s->runs_to_end, *again = NULL;
  s->runs_to_end = NULL;
  pthread_mutex_unlock(&s->lock);
  if (!todo) return;
  int r = tg_db_batch(db, end_runs, todo);
  for (session_run *run = todo, *next; run; run = next) {
    next = run->next;
    run->next = NULL;
    if (r == TG_OK || (r != TG_E_BUSY && tg_db_batch(db, end_runs, run) == TG_OK)) {
      free(run);
      continue;
    }
    run->next = again;
    again = run;
  }
  if (!again) return;
  if (tg_log_may(&s->run_ends_logged_ms))
    tg_log(TG_LOG_WARN, "http: the runs of sessions ended are still running: %s (logged once "
           "a minute at most)", tg_db_errmsg(db));
  pthread_mutex_lock(&s->lock);
  session_run **tail = &again;
  while (*tail) tail = &(*tail)->next;
  *tail = s->runs_to_end;
  s->runs_to_end = again;
  pthread_mutex_unlock(&s->lock);
}

/* The live session with id, with a reference; NULL unless principal opened it with the token
 * of token_hash (not merely another of its tokens), so that what a token opened ends with it,
 * every stream of its sessions included. */
static session *session_find(server *s, const char *id, const char *principal,
                             const char *token_hash) {
  pthread_mutex_lock(&s->lock);
  session *x = s->sessions;
  while (x && strcmp(x->id, id) != 0) x = x->next;
  if (x && (strcmp(x->principal, principal) != 0 || strcmp(x->token_hash, token_hash) != 0))
    x = NULL;
  if (x) {
    x->refs++;
    x->last_used = tg_monotonic_ms();
    x->use_order = ++s->session_uses;
  }
  pthread_mutex_unlock(&s->lock);
  return x;
}

static void session_put(server *s, session *x) {
  if (!x) return;
  pthread_mutex_lock(&s->lock);
  session_release_locked(s, x);
  pthread_mutex_unlock(&s->lock);
}

/* ---- SSE streams fed by a worker ----
 * A tool call runs on a worker thread. Its connection waits for the first thing it says:
 * a final answer alone goes out as one JSON response with its own HTTP status (so a
 * -32021 is a 400); a notification or a request to the client first turns the answer into
 * an SSE stream that carries everything that follows. A client closing a sessionless stream
 * (2026-07-28) cancels its call; a session's streams outlive their connection. */

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
  /* A sessionless stream's, run once when its client goes away. */
  void (*on_close)(void *arg);
  void *close_arg;
  tg_mcp_inflight *inflight; /* a 2026-07-28 call's, which closing the stream cancels */
  json_t *call_id;
  bool revoked; /* the call was cancelled as its token was revoked (end_revoked) */
  int refs;
};

/* Whether a client reads x's GET stream: it then uses x, if only to listen. */
static bool listening_locked(session *x) {
  if (!x->standalone) return false;
  pthread_mutex_lock(&x->standalone->lock);
  bool reading = x->standalone->reading;
  pthread_mutex_unlock(&x->standalone->lock);
  return reading;
}

/* Whether x, unused, was last used over idle_ms ago: by a request, or by a connection that
 * read one of its streams (a client reconnecting as its GET stream ended is not idle). */
static bool idle_locked(session *x, int64_t now, int64_t idle_ms) {
  if (!unused_locked(x)) return false;
  int64_t last = x->last_used;
  for (size_t i = 0; i <= TG_HTTP_KEPT_STREAMS; i++) {
    stream *st = i < TG_HTTP_KEPT_STREAMS ? x->kept[i] : x->standalone;
    if (!st) continue;
    pthread_mutex_lock(&st->lock);
    bool reading = st->reading;
    if (st->read_until > last) last = st->read_until;
    pthread_mutex_unlock(&st->lock);
    if (reading) return false;
  }
  return now - last > idle_ms;
}

/* principal's share, with a reference for the caller; NULL without memory. */
static held_share *share_get(server *s, const char *principal) {
  pthread_mutex_lock(&s->shares_lock);
  held_share *h = s->shares;
  while (h && strcmp(h->principal, principal) != 0) h = h->next;
  if (!h && (h = calloc(1, sizeof *h))) {
    snprintf(h->principal, sizeof h->principal, "%s", principal);
    h->next = s->shares;
    s->shares = h;
  }
  if (h) h->refs++;
  pthread_mutex_unlock(&s->shares_lock);
  return h;
}

static void share_put(server *s, held_share *h) {
  pthread_mutex_lock(&s->shares_lock);
  if (--h->refs == 0) {
    held_share **at = &s->shares;
    while (*at != h) at = &(*at)->next;
    *at = h->next;
    free(h);
  }
  pthread_mutex_unlock(&s->shares_lock);
}

/* principal's share for a request it makes (pool_call false) or a call it has run on the
 * pool (true), counted until request_done; NULL when principal has its most of them
 * already (*full), or without memory. */
static held_share *request_begin(server *s, const char *principal, bool pool_call, bool *full) {
  held_share *h = share_get(s, principal);
  unsigned most = s->cfg->max_requests_per_principal ? s->cfg->max_requests_per_principal
                                                     : TG_HTTP_MAX_REQUESTS_PER_PRINCIPAL;
  pthread_mutex_lock(&s->shares_lock);
  unsigned *n = h ? pool_call ? &h->pool_calls : &h->requests : NULL;
  *full = n && *n >= most;
  if (n && !*full) ++*n;
  pthread_mutex_unlock(&s->shares_lock);
  if (*full) share_put(s, h);
  return *full ? NULL : h;
}

/* How many calls of the caller holding h wait or run on the pool. */
static unsigned pool_calls_of(server *s, held_share *h) {
  pthread_mutex_lock(&s->shares_lock);
  unsigned n = h->pool_calls;
  pthread_mutex_unlock(&s->shares_lock);
  return n;
}

static void request_done(server *s, held_share *h, bool pool_call) {
  pthread_mutex_lock(&s->shares_lock);
  --*(pool_call ? &h->pool_calls : &h->requests);
  pthread_mutex_unlock(&s->shares_lock);
  share_put(s, h);
}

/* Whether n bytes more of a request body its caller (share h) sends pass the bounds on
 * bodies held at once: *status then says whose (429: the caller's half, 503: the server's).
 * Looked at, then counted (taking_count), as past_bounds does. */
static bool taking_past(server *s, held_share *h, size_t n, unsigned *status) {
  if (atomic_load(&h->taking) + n > s->taking_max / 2) *status = MHD_HTTP_TOO_MANY_REQUESTS;
  else if (atomic_load(&s->taking) + n > s->taking_max) *status = MHD_HTTP_SERVICE_UNAVAILABLE;
  else return false;
  return true;
}

/* n bytes more (or, with less, fewer) of request bodies held for the caller of share h. */
static void taking_count(server *s, held_share *h, size_t n, bool less) {
  if (less) {
    atomic_fetch_sub(&h->taking, n);
    atomic_fetch_sub(&s->taking, n);
  } else {
    atomic_fetch_add(&h->taking, n);
    atomic_fetch_add(&s->taking, n);
  }
}

/* The request *counted counts (NULL: none) is done, once: *counted becomes NULL. */
static void request_done_once(server *s, held_share **counted) {
  if (!*counted) return;
  request_done(s, *counted, false);
  *counted = NULL;
}

/* n bytes more (or, with less, fewer) held for a caller (share), counted for the server s
 * and the caller: in all (kept false) or of the delivered ones kept (kept true). A byte
 * leaves kept before it leaves held, and joins held before kept, so that kept never passes
 * held. */
static void held_count_in(server *s, held_share *share, size_t n, bool less, bool kept) {
  atomic_size_t *in_all = kept ? &s->kept : &s->held;
  atomic_size_t *own = kept ? &share->kept : &share->held;
  if (less) {
    atomic_fetch_sub(in_all, n);
    atomic_fetch_sub(own, n);
  } else {
    atomic_fetch_add(in_all, n);
    atomic_fetch_add(own, n);
  }
}

/* The same for the output of stream st. */
static void held_count(stream *st, size_t n, bool less, bool kept) {
  held_count_in(st->srv, st->share, n, less, kept);
}

/* What of held is not delivered yet. */
static size_t undelivered(atomic_size_t *held, atomic_size_t *kept) {
  size_t k = atomic_load(kept), h = atomic_load(held);
  return h > k ? h - k : 0;
}

/* Whether n bytes more of a caller's output (share), past unread bytes of the same answer,
 * pass the bounds on output not delivered yet. The bounds are looked at, then counted:
 * outputs at the same instant may pass them by their own sizes. */
static bool past_bounds(server *s, held_share *share, size_t unread, size_t n) {
  return unread + n > TG_HTTP_MAX_STREAM_BYTES ||
         undelivered(&s->held, &s->kept) + n > s->held_max ||
         undelivered(&share->held, &share->kept) + n > s->held_max / 2;
}

/* The error that takes the place of a reply of n bytes past the bounds, to request id or to
 * batch (when not NULL: then one error naming each of its requests); encoded, NULL without
 * memory. */
static char *too_large(server *s, json_t *id, const tg_rpc_msg *batch, size_t n) {
  if (tg_log_may(&s->past_bounds_logged_ms))
    tg_log(TG_LOG_WARN, "http: a reply of %zu bytes, past the bounds on output not delivered "
           "yet, was replaced by an error (logged once a minute at most)", n);
  static const char why[] = "The request was served, but its result is too large to send";
  _cleanup_json_ json_t *error = batch
                                     ? tg_rpc_refuse_batch(batch, TG_RPC_INTERNAL_ERROR, why, NULL)
                                     : tg_rpc_error(id, TG_RPC_INTERNAL_ERROR, why, NULL);
  return error ? tg_rpc_encode(error) : NULL;
}

/* buf[head, sent) went out: bytes delivered for the first time are counted as kept. */
static void set_sent_locked(stream *st, size_t sent) {
  if (sent > st->sent) st->delivered_at = tg_monotonic_ms();
  if (sent > st->seen) {
    held_count(st, sent - st->seen, false, true);
    st->seen = sent;
  }
  st->sent = sent;
}

/* A new stream of principal's; NULL without memory. */
static stream *stream_new(server *s, unsigned no, const char *principal) {
  stream *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  if (!(st->share = share_get(s, principal))) {
    free(st);
    return NULL;
  }
  st->srv = s;
  pthread_mutex_init(&st->lock, NULL);
  pthread_cond_init(&st->ready, NULL);
  st->no = no;
  st->first = 1;
  st->refs = 1;
  st->reader_fd = -1;
  return st;
}

static void stream_ref(stream *st) {
  pthread_mutex_lock(&st->lock);
  st->refs++;
  pthread_mutex_unlock(&st->lock);
}

static void stream_release(stream *st) {
  pthread_mutex_lock(&st->lock);
  bool last = --st->refs == 0;
  pthread_mutex_unlock(&st->lock);
  if (!last) return;
  pthread_mutex_destroy(&st->lock);
  pthread_cond_destroy(&st->ready);
  free(st->final);
  json_decref(st->final_id);
  tg_mcp_inflight_free(st->inflight);
  json_decref(st->call_id);
  held_count(st, st->seen - st->head, true, true);
  held_count(st, st->len - st->head, true, false);
  share_put(st->srv, st->share);
  free(st->buf);
  free(st->ends);
  free(st);
}

/* Nothing more will be appended: a reader ends once it has the rest. */
static void stream_end(stream *st) {
  pthread_mutex_lock(&st->lock);
  st->done = true;
  pthread_cond_broadcast(&st->ready);
  pthread_mutex_unlock(&st->lock);
}

/* Appends text (n bytes, one whole event); called with the lock held. */
static int append_locked(stream *st, const char *text, size_t n, bool bounded) {
  if (bounded && past_bounds(st->srv, st->share, st->len - st->seen, n)) return TG_E_TOO_LARGE;
  if (st->n_ends == st->ends_cap) {
    size_t cap = st->ends_cap ? 2 * st->ends_cap : 8;
    size_t *more = realloc(st->ends, cap * sizeof *more);
    if (!more) return TG_E_NOMEM;
    st->ends = more;
    st->ends_cap = cap;
  }
  char *grown = realloc(st->buf, st->len + n);
  if (!grown) return TG_E_NOMEM;
  memcpy(grown + st->len, text, n);
  st->buf = grown;
  st->len += n;
  st->ends[st->n_ends++] = st->len;
  held_count(st, n, false, false);
  pthread_cond_broadcast(&st->ready);
  return TG_OK;
}

/* Appends one SSE event carrying an encoded message (text, stolen); called with the lock
 * held. A stream of a session keeps its events while no client reads it: a disconnect is not
 * a cancellation, and the client may resume with Last-Event-ID. */
static int append_event_locked(stream *st, char *text, bool bounded) {
  if (!text) return TG_E_NOMEM;
  if (st->closed) {
    free(text);
    return TG_OK;
  }
  char *event = NULL;
  int n = st->no ? asprintf(&event, "id: %u-%u\nevent: message\ndata: %s\n\n", st->no,
                            st->next_event + 1, text)
                 : asprintf(&event, "event: message\ndata: %s\n\n", text);
  free(text);
  if (n < 0) return TG_E_NOMEM;
  int r = append_locked(st, event, (size_t)n, bounded);
  free(event);
  /* Numbered once in buf: Last-Event-ID finds events by counting them. */
  if (r == TG_OK) st->next_event++;
  return r;
}

/* The reply to request id that ends the stream (text, encoded, stolen): when it does not
 * fit, an error naming the same request takes its place (small, so over the bound), so that
 * the client is never left without an answer. */
static void append_reply_locked(stream *st, char *text, json_t *id) {
  size_t n = text ? strlen(text) : 0;
  if (append_event_locked(st, text, true) == TG_E_TOO_LARGE)
    append_event_locked(st, too_large(st->srv, id, NULL, n), false);
}

/* One encoded event (text, stolen) on st. */
static int stream_text(stream *st, char *text) {
  pthread_mutex_lock(&st->lock);
  int r = append_event_locked(st, text, true);
  pthread_mutex_unlock(&st->lock);
  return r;
}

/* A notification or request related to the call; msg is stolen. */
static int stream_event(stream *st, json_t *msg) {
  char *text = tg_rpc_encode(msg);
  json_decref(msg);
  return stream_text(st, text);
}

/* The worker's answer to request id (text, encoded, stolen; NULL when it had none to give:
 * the request was cancelled). With status 0 (cancelled), text goes only onto an answer begun
 * (an event stream): one not begun gets none. */
static void stream_finish(stream *st, char *text, json_t *id, int status) {
  pthread_mutex_lock(&st->lock);
  if (st->streaming) {
    if (text) append_reply_locked(st, text, id);
  } else if (status == 0) {
    free(text);
  } else {
    st->final = text;
    /* Copies, as the stream outlives the request's message on another thread (see
     * deliver_answer); without memory, an error in place of the answer names no id. */
    st->final_id = json_deep_copy(id);
    st->final_status = status;
  }
  st->done = true;
  pthread_cond_broadcast(&st->ready);
  pthread_mutex_unlock(&st->lock);
}

/* Offset in buf of event number n (first <= n <= next_event + 1). */
static size_t event_offset_locked(const stream *st, unsigned n) {
  size_t k = n - st->first, held = st->n_ends - st->ends_head;
  return k == 0 ? st->head : k > held ? st->len : st->ends[st->ends_head + k - 1];
}

/* Whether delivered output may be kept: what the server and st's caller keep is within
 * their bounds (see struct server). */
static bool room_to_keep(const stream *st) {
  return atomic_load(&st->srv->kept) <= st->srv->held_max / 2 &&
         atomic_load(&st->share->kept) <= st->srv->held_max / 4;
}

/* How many of the n offsets at e (ascending) are below bound. */
static size_t below(const size_t *e, size_t n, size_t bound) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (e[mid] < bound) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Offset in buf of the start of the event that holds offset at (head <= at <= len). */
static size_t event_start_locked(const stream *st, size_t at) {
  size_t whole = below(st->ends + st->ends_head, st->n_ends - st->ends_head, at + 1);
  return whole ? st->ends[st->ends_head + whole - 1] : st->head;
}

/* Moves what stays of buf (and of ends) to their starts, once what was dropped is as much as
 * what stays, and gives back the room it no longer needs: a stream's buffers are never more
 * than twice what it counts. */
static void reclaim_locked(stream *st) {
  if (st->head < st->len - st->head) return;
  size_t gone = st->head, n = st->n_ends - st->ends_head;
  memmove(st->buf, st->buf + gone, st->len - gone);
  memmove(st->ends, st->ends + st->ends_head, n * sizeof *st->ends);
  for (size_t i = 0; i < n; i++) st->ends[i] -= gone;
  st->ends_head = 0;
  st->n_ends = n;
  st->len -= gone;
  st->sent -= gone;
  st->seen -= gone; /* gone <= sent <= seen */
  st->cut_at = st->cut_at > gone ? st->cut_at - gone : 0; /* only events sent were dropped */
  st->head = 0;
  if (st->len == 0) {
    free(st->buf);
    st->buf = NULL;
  } else {
    char *smaller = realloc(st->buf, st->len);
    if (smaller) st->buf = smaller; /* when it fails, the larger room stays in use */
  }
  if (n == 0) {
    free(st->ends);
    st->ends = NULL;
    st->ends_cap = 0;
  } else {
    size_t *fewer = realloc(st->ends, n * sizeof *fewer);
    if (fewer) {
      st->ends = fewer;
      st->ends_cap = n;
    }
  }
}

/* Drops the delivered events of st but the last of them that fit in keep bytes. */
static void drop_delivered_locked(stream *st, size_t keep) {
  if (st->sent <= st->head + keep) return;
  const size_t *e = st->ends + st->ends_head;
  size_t sent_events = below(e, st->n_ends - st->ends_head, st->sent + 1);
  /* The first event ending where what follows it up to sent fits in keep, or all sent. */
  size_t dropped = below(e, sent_events, st->sent - keep) + 1;
  if (dropped > sent_events) dropped = sent_events;
  if (dropped == 0) return;
  size_t cut = e[dropped - 1];
  held_count(st, cut - st->head, true, true);
  held_count(st, cut - st->head, true, false);
  st->head = cut;
  st->ends_head += dropped;
  st->first += (unsigned)dropped;
  reclaim_locked(st);
}

/* After a delivery, drops the events a resumption may no longer ask for: all of them when
 * there is no room to keep them. */
static void compact_locked(stream *st) {
  drop_delivered_locked(st, st->no && room_to_keep(st) ? REPLAY_MAX_BYTES : 0);
}

/* Starts st with a priming event (an id, the reconnection delay and no data), so that a
 * client cut off before any message can still resume it. Called before any event. */
static int prime_locked(stream *st) {
  char priming[64];
  int n = snprintf(priming, sizeof priming, "id: %u-0\nretry: %d\ndata: \n\n", st->no, RETRY_MS);
  st->first = 0;
  st->reader_primed = true; /* a resumption starts after it */
  /* Unbounded: a few bytes a stream, and without them a client could not resume. */
  return append_locked(st, priming, (size_t)n, false);
}

/* The reconnection delay in a block of its own, which dispatches no event, written into out
 * (size bytes, at least 32). It goes out where an answer ends for polling after events,
 * never into a stream: Last-Event-ID counts the events of a stream. */
static int retry_block(char *out, size_t size) {
  return snprintf(out, size, "retry: %d\n\n", RETRY_MS);
}

/* The call asked to end its answer now: the connection reading it ends once it has sent
 * the events so far, or, before one reads it, the answer will be what there is so far.
 * What follows is kept for Last-Event-ID. */
static void stream_poll(stream *st) {
  pthread_mutex_lock(&st->lock);
  if (st->reading) {
    /* No event since the priming this connection reads (a stream read before any event was
     * primed), or since the previous cut's priming. */
    st->cut_primed = (!st->next_event && st->reader_primed) ||
                     (st->cutting && st->cut_primed && st->cut_at == st->len);
    st->cutting = true;
    st->cut_at = st->len;
  } else {
    st->polling = true;
  }
  pthread_cond_broadcast(&st->ready);
  pthread_mutex_unlock(&st->lock);
}

/* The connection reader_id stops reading st. A sessionless stream then keeps nothing more,
 * and its close hook runs, once, outside the stream's lock. */
static void stream_detach(stream *st, unsigned reader_id) {
  void (*hook)(void *) = NULL;
  void *arg = NULL;
  pthread_mutex_lock(&st->lock);
  if (reader_id == st->reader) {
    st->reading = false;
    st->read_until = tg_monotonic_ms();
    pthread_cond_broadcast(&st->ready);
    if (!st->no) {
      st->closed = true;
      hook = st->on_close;
      arg = st->close_arg;
      st->on_close = NULL;
    }
  }
  pthread_mutex_unlock(&st->lock);
  if (hook) hook(arg);
}

/* The close hook of a stateless call's stream: closing it is the call's cancellation. */
static void cancel_call(void *arg) {
  stream *st = arg;
  tg_mcp_inflight_cancel(st->inflight, st->call_id);
}

/* Whether a call was cancelled as its token was revoked, as its session (x) or its stream
 * (st, a stateless call's) says. */
static bool revoked_call(server *s, session *x, stream *st) {
  pthread_mutex_t *lock = x ? &s->lock : &st->lock;
  pthread_mutex_lock(lock);
  bool revoked = x ? x->revoked : st->revoked;
  pthread_mutex_unlock(lock);
  return revoked;
}

/* Makes st, a stateless call's stream, carry the cancellation of the call with id (see
 * cancel_call), from now on. false without memory (st's release frees what was made). */
static bool cancellable_alone(stream *st, json_t *id) {
  if (tg_mcp_inflight_new(cancellation_heard, st->srv, &st->inflight) < 0 ||
      tg_mcp_inflight_begin(st->inflight, id) < 0)
    return false;
  st->call_id = json_deep_copy(id); /* see stream_finish */
  return st->call_id != NULL;
}

/* Whether the client closed the connection on socket fd (its own thread reads nothing
 * from it while an answer is being waited for). */
static bool client_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* client_gone for a request's tg_mcp_request (arg: its socket's descriptor). */
static bool connection_gone(void *arg) { return client_gone(*(const int *)arg); }

static int connection_fd(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info ? info->connect_fd : -1;
}

static peer *peer_of(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return info ? info->socket_context : NULL;
}

static unsigned idle_timeout_s(const server *s) {
  return s->cfg->idle_timeout_s ? s->cfg->idle_timeout_s : (unsigned)TG_HTTP_IDLE_TIMEOUT_S;
}

/* How long a client has to send a request whole, or to take an answer of bytes whole (ms). */
static int64_t slow_limit_ms(const server *s, size_t bytes) {
  int64_t timeout_ms = 1000LL * idle_timeout_s(s);
  return timeout_ms * SLOW_TIMEOUTS + timeout_ms * (int64_t)bytes / TAKING_BYTES_PER_TIMEOUT;
}

/* Gives conn's client until due_by (monotonic ms; 0: no end) to send or take what it must. */
static void set_due_by(struct MHD_Connection *conn, int64_t due_by) {
  peer *p = peer_of(conn);
  if (p) atomic_store(&p->due_by, due_by);
}

/* One connection's hold on a stream. */
typedef struct reader {
  stream *st;
  unsigned id;
  int fd;
  peer *peer; /* its connection's, which outlives the response */
  bool due;   /* the stream ended: its client was given until when to take the rest */
  /* Its request's count among its caller's (see request_begin), until reader_answered;
   * NULL: none. */
  held_share *answering;
} reader;

/* The request rd answers stops counting among its caller's requests: its answer ended, or
 * all of it that will come was handed over, which its client may have, and answer with its
 * next request, before libmicrohttpd completes this one. Its client still has to take the
 * rest in time (see due). */
static void reader_answered(reader *rd) { request_done_once(rd->st->srv, &rd->answering); }

/* The end of rd's answer. */
static ssize_t stream_ended(reader *rd) {
  reader_answered(rd);
  return MHD_CONTENT_READER_END_OF_STREAM;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
  reader *rd = cls;
  stream *st = rd->st;
  long long quiet_ms = 0;
  pthread_mutex_lock(&st->lock);
  while (st->sent == st->len && !st->done && !st->cutting && rd->id == st->reader) {
    if (!tg_timed_wait(&st->ready, &st->lock, HANGUP_CHECK_MS)) continue;
    if (client_gone(rd->fd)) {
      pthread_mutex_unlock(&st->lock);
      return stream_ended(rd);
    }
    if ((quiet_ms += HANGUP_CHECK_MS) >= TG_HTTP_KEEPALIVE_MS) {
      /* A comment line keeps proxies and clients from timing the stream out. */
      static const char keepalive[] = ": keep-alive\n\n";
      pthread_mutex_unlock(&st->lock);
      size_t n = sizeof keepalive - 1 < max ? sizeof keepalive - 1 : max;
      memcpy(out, keepalive, n);
      return (ssize_t)n;
    }
  }
  bool current = rd->id == st->reader;
  /* An answer cut for polling ends after the events before the cut. */
  size_t end = !current ? st->sent : st->cutting ? st->cut_at : st->len;
  size_t n = end > st->sent ? end - st->sent : 0;
  if (n == 0 && current && st->cutting) {
    st->cutting = false;
    st->reading = false;
    st->reader++; /* this connection ends: the rest waits for the client's resumption */
    pthread_cond_broadcast(&st->ready);
    bool primed_only = st->cut_primed;
    st->cut_primed = false;
    pthread_mutex_unlock(&st->lock);
    if (primed_only) return stream_ended(rd);
    char retry[32];
    int k = retry_block(retry, sizeof retry);
    if ((size_t)k > max) return stream_ended(rd); /* no room: the client's own delay */
    memcpy(out, retry, (size_t)k);
    return k;
  }
  if (n == 0) {
    pthread_mutex_unlock(&st->lock);
    return stream_ended(rd);
  }
  /* Once nothing more comes, what is left must be taken as a JSON answer would be. */
  if (st->done && current && !rd->due && rd->peer) {
    atomic_store(&rd->peer->due_by, tg_monotonic_ms() + slow_limit_ms(st->srv, n));
    rd->due = true;
  }
  if (n > max) n = max;
  memcpy(out, st->buf + st->sent, n);
  set_sent_locked(st, st->sent + n);
  bool all_handed = st->done && current && !st->cutting && st->sent == end;
  compact_locked(st);
  pthread_mutex_unlock(&st->lock);
  if (all_handed) reader_answered(rd);
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  reader *rd = cls;
  reader_answered(rd);
  stream_detach(rd->st, rd->id);
  stream_release(rd->st);
  free(rd);
}

/* Queues res (destroyed here) as a 200 SSE answer. */
static enum MHD_Result queue_sse(struct MHD_Connection *conn, struct MHD_Response *res,
                                 const char *session_id) {
  MHD_add_response_header(res, "Content-Type", "text/event-stream");
  MHD_add_response_header(res, "Cache-Control", "no-cache");
  MHD_add_response_header(res, "X-Accel-Buffering", "no");
  if (session_id) MHD_add_response_header(res, "Mcp-Session-Id", session_id);
  enum MHD_Result r = MHD_queue_response(conn, MHD_HTTP_OK, res);
  MHD_destroy_response(res);
  return r;
}

/* Answers with st, just attached (reading set, as reader id, in the same hold of its lock:
 * a poll or a resumption in between must not be missed), as an SSE stream; takes over one
 * reference. */
static enum MHD_Result queue_stream(struct MHD_Connection *conn, stream *st,
                                    const char *session_id, unsigned id) {
  reader *rd = malloc(sizeof *rd);
  if (!rd) {
    stream_detach(st, id);
    stream_release(st);
    return MHD_NO;
  }
  *rd = (reader){.st = st, .id = id, .fd = connection_fd(conn), .peer = peer_of(conn)};
  if (rd->peer) { /* the request's count goes with its answer */
    rd->answering = rd->peer->answering;
    rd->peer->answering = NULL;
  }
  struct MHD_Response *res =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, rd, stream_free);
  if (!res) {
    stream_free(rd);
    return MHD_NO;
  }
  return queue_sse(conn, res, session_id);
}

/* ---- 2026-07-28 subscriptions/listen streams ----
 * A listen request's answer stays open as its subscription: a watch of its own sends the
 * acknowledgement and then the list changes on it. It ends when the client closes it, or
 * with the server, which first sends the listen result. */

struct listener {
  server *srv;
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that opened it; "" without auth */
  tg_mcp_watch *watch;
  stream *st;
  int refs; /* guarded by the server's lock: the registry's, the open answer's, checks' */
  listener *next;
};

static int listener_send(void *self, json_t *msg) { return stream_event(self, msg); }

static void listener_put(listener *l) {
  server *s = l->srv;
  pthread_mutex_lock(&s->lock);
  bool last = --l->refs == 0;
  pthread_mutex_unlock(&s->lock);
  if (!last) return;
  tg_mcp_watch_free(l->watch);
  stream_release(l->st);
  free(l);
}

/* Takes l out of the registry, once, with the registry's reference. */
static void listener_unlink(listener *l) {
  server *s = l->srv;
  bool found = false;
  pthread_mutex_lock(&s->lock);
  for (listener **p = &s->listeners; *p; p = &(*p)->next) {
    if (*p != l) continue;
    *p = l->next;
    s->n_listeners--;
    found = true;
    break;
  }
  pthread_mutex_unlock(&s->lock);
  if (found) listener_put(l);
}

/* The client closed the listen stream: the subscription ends with it. */
static void listener_closed(void *arg) {
  listener_unlink(arg);
  listener_put(arg); /* the answer's reference */
}

/* Registers a listen stream of principal, within the bounds, with a reference for the caller
 * (listener_serve passes it to the answer); NULL with *status and *why when it cannot. */
static listener *listener_open(server *s, const char *principal, const char *token_hash,
                               unsigned *status, const char **why) {
  listener *l = calloc(1, sizeof *l);
  stream *st = stream_new(s, 0, principal);
  *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  *why = "Out of memory";
  if (l && st && tg_mcp_watch_new(listener_send, st, &l->watch) == 0) {
    l->srv = s;
    l->st = st;
    l->refs = 2; /* the registry's and the caller's */
    snprintf(l->principal, sizeof l->principal, "%s", principal);
    snprintf(l->token_hash, sizeof l->token_hash, "%s", token_hash);
    pthread_mutex_lock(&s->lock);
    size_t mine = 0;
    for (listener *o = s->listeners; o; o = o->next) mine += strcmp(o->principal, principal) == 0;
    *status = s->closing ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_TOO_MANY_REQUESTS;
    *why = s->closing                                  ? "The server is stopping"
           : s->n_listeners >= TG_HTTP_MAX_LISTENS     ? "Too many open subscriptions/listen streams"
           : mine >= TG_HTTP_MAX_LISTENS_PER_PRINCIPAL ? "Too many open subscriptions/listen streams of this caller"
                                                       : NULL;
    if (!*why) {
      l->next = s->listeners;
      s->listeners = l;
      s->n_listeners++;
    }
    pthread_mutex_unlock(&s->lock);
    if (!*why) return l;
  }
  if (l) tg_mcp_watch_free(l->watch);
  if (st) stream_release(st);
  free(l);
  return NULL;
}

/* The listen request was acknowledged: its answer stays open as the subscription, holding
 * the caller's reference. */
static enum MHD_Result listener_serve(struct MHD_Connection *conn, listener *l) {
  stream *st = l->st;
  pthread_mutex_lock(&st->lock);
  st->streaming = true;
  st->reading = true;
  st->on_close = listener_closed;
  st->close_arg = l;
  st->refs++;
  unsigned id = st->reader;
  pthread_mutex_unlock(&st->lock);
  return queue_stream(conn, st, NULL, id);
}

/* The server stops: every listen stream gets its result and ends, and its connection has a
 * moment to deliver that before the daemon closes it. */
static void listeners_end(server *s) {
  _cleanup_json_ json_t *meta = tg_mcp_result_meta(&s->mcp);
  stream *ended[TG_HTTP_MAX_LISTENS];
  size_t n = 0;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    s->closing = true; /* from now on, the registry only shrinks */
    listener *l = s->listeners;
    if (l) l->refs++;
    pthread_mutex_unlock(&s->lock);
    if (!l) break;
    tg_mcp_watch_end(l->watch, meta);
    stream_end(l->st);
    stream_ref(l->st);
    ended[n++] = l->st;
    listener_unlink(l);
    listener_put(l);
  }
  int64_t deadline = tg_monotonic_ms() + DRAIN_MS;
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&ended[i]->lock);
    for (int64_t left; ended[i]->reading && (left = deadline - tg_monotonic_ms()) > 0;)
      tg_timed_wait(&ended[i]->ready, &ended[i]->lock, left);
    pthread_mutex_unlock(&ended[i]->lock);
    stream_release(ended[i]);
  }
}

/* ---- list checks ---- */

typedef struct watched {
  tg_mcp_watch *watch;
  const char *principal;
  session *x;  /* held, or */
  listener *l; /* held */
} watched;

/* Announces the list changes of one watch, on the calling thread's database connection. A
 * failure is logged, and the next check tries again. */
static void check_watch(server *s, tg_db *db, tg_mcp_watch *watch, const char *principal) {
  tg_env env = server_env(s, db);
  int r = tg_mcp_watch_check(watch, &env, principal);
  if (r < 0) tg_log(TG_LOG_WARN, "http: a tool list could not be checked for changes (%d)", r);
}

/* Checks the watches of every session and listen stream (principal NULL: the periodic
 * sweep), or those a message of principal on session x (NULL: none) can have changed at
 * once: x's and principal's listen streams, at most TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; what
 * it changed for others, the sweep announces. So no request pays for everyone's. */
static void check_lists(server *s, tg_db *db, const char *principal, session *only) {
  /* Before the server's lock, which the watch's sending takes under the watch's lock. */
  bool first = only && tg_mcp_watch_unchecked(only->watch);
  pthread_mutex_lock(&s->lock);
  size_t n = 0, cap = (principal ? 1 : s->n_sessions) + s->n_listeners;
  watched *all = cap ? malloc(cap * sizeof *all) : NULL;
  for (session *x = principal ? only : s->sessions; all && x; x = principal ? NULL : x->next) {
    /* A session hears of list changes on its GET stream only: without one, its baseline
     * stays, and the first check once a stream is open announces what changed meanwhile.
     * The baseline is set by its own message that made it listen (notifications/initialized),
     * so that a change before its first stream is announced too. */
    if (!x->standalone && !first) continue;
    x->refs++;
    x->checking++;
    all[n++] = (watched){.watch = x->watch, .principal = x->principal, .x = x};
  }
  for (listener *l = s->listeners; all && l; l = l->next) {
    if (principal && strcmp(l->principal, principal) != 0) continue;
    l->refs++;
    all[n++] = (watched){.watch = l->watch, .principal = l->principal, .l = l};
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) {
    check_watch(s, db, all[i].watch, all[i].principal);
    if (!all[i].x) {
      listener_put(all[i].l);
      continue;
    }
    pthread_mutex_lock(&s->lock);
    all[i].x->checking--;
    session_release_locked(s, all[i].x);
    pthread_mutex_unlock(&s->lock);
  }
  free(all);
}

/* ---- one request ---- */

typedef struct request {
  bool answered; /* refused from its headers: its body, if any, is dropped unread */
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that named it; "" without auth */
  int64_t checked_ms; /* monotonic: when the token was checked */
  char *body;
  size_t len;
  size_t dropped; /* of a body past the bound: the bytes that came, none of them kept */
  tg_rpc_id_scan *past; /* of such a body, what its refusal may name */
  /* Its caller's share (a reference) once its body comes, and the status refusing a body
   * dropped as it passed the bounds on bodies held at once (0: none did). */
  held_share *taker;
  unsigned busy_status;
  bool takes_events;   /* Accept takes text/event-stream */
  bool prefers_events; /* Accept names it, no lower than JSON: a call's answer may stream */
  /* A header 2026-07-28 validates given more than once on a POST: the refusal (-32020)
   * waits for the body, whose request id it names. NULL: none. */
  const char *repeated_mcp_header;
  /* A POST refused for its Accept or Content-Type: the same (NULL: none), with its status. */
  const char *refused_media;
  unsigned refused_media_status;
} request;

struct worker {
  server *srv;
  worker *next; /* in the pool's queue */
  /* Its caller's share, counting the call among its calls on the pool (see start_call); NULL
   * without authentication. */
  held_share *caller;
  stream *st;
  session *sess; /* NULL for stateless requests */
  tg_mcp_inflight *inflight; /* the session's, or the stream's of a stateless call */
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

static int worker_send(void *self, json_t *msg) { return stream_event(((worker *)self)->st, msg); }

/* The run a request's calls belong to: the one its Toolgate-Run header names, else its
 * session's (*held); NULL: each call is one of its own. */
static const char *request_run(const worker *w, bool *held) {
  *held = !w->header_copies[3] && w->sess && w->sess->run;
  return w->header_copies[3] ? w->header_copies[3] : *held ? w->sess->run->id : NULL;
}

/* A call asks for its stream to be closed before its result (SEP-1699 polling): the client
 * resumes it with Last-Event-ID. Only a session's streams can be resumed, by clients of the
 * revisions that expect it; elsewhere the result goes out as usual. */
static int worker_close_stream(void *self) {
  worker *w = self;
  if (w->sess && strcmp(w->scratch.version, POLLING_VERSION) >= 0) stream_poll(w->st);
  return TG_OK;
}

/* Sends a request on the call's stream and waits for the client to POST the response. */
static int worker_ask(void *self, json_t *ask, json_t **ret) {
  worker *w = self;
  server *s = w->srv;
  json_t *id = json_incref(json_object_get(ask, "id"));
  pthread_mutex_lock(&s->lock);
  ask_slot *slot = NULL;
  for (size_t i = 0; i < MAX_ASKS && !slot; i++)
    if (!w->sess->asks[i].id) slot = &w->sess->asks[i];
  if (slot) slot->id = id;
  pthread_mutex_unlock(&s->lock);
  if (!slot) {
    json_decref(id);
    json_decref(ask);
    return TG_E_TOO_LARGE;
  }
  _cleanup_json_ json_t *asked = json_incref(ask); /* to withdraw it if the call stops waiting */
  int r = stream_event(w->st, ask);
  bool sent = r == 0, timed_out = false;
  int64_t deadline = tg_monotonic_ms() + tg_mcp_ask_timeout_ms(&s->mcp);
  pthread_mutex_lock(&s->lock);
  while (r == 0 && !slot->response && !w->sess->dead) {
    /* A cancellation is looked for outside the server's lock; the count tells whether one
     * came meanwhile, so that the wait below cannot miss it. */
    unsigned long seen = s->cancellations;
    pthread_mutex_unlock(&s->lock);
    bool cancelled = tg_mcp_inflight_cancelled(w->inflight, w->msg.id);
    pthread_mutex_lock(&s->lock);
    int64_t left = deadline - tg_monotonic_ms();
    if (cancelled) {
      r = TG_E_IO;
    } else if (seen == s->cancellations && !slot->response && !w->sess->dead &&
               (left <= 0 || tg_timed_wait(&s->answered, &s->lock, left))) {
      r = TG_E_IO;
      timed_out = true;
    }
  }
  if (r == 0 && !slot->response) r = TG_E_IO;
  bool withdraw = sent && r != 0 && !w->sess->dead;
  if (r == 0) *ret = slot->response;
  else json_decref(slot->response);
  slot->response = NULL;
  json_decref(slot->id);
  slot->id = NULL;
  pthread_mutex_unlock(&s->lock);
  /* The call fails anyway: a withdrawal that cannot go out changes nothing. */
  if (withdraw) stream_event(w->st, tg_mcp_withdrawal(asked, timed_out));
  return r;
}

/* Hands a posted JSON-RPC response to the tool waiting for it; one answered already takes no
 * second. 1 when one took it, 0 when none waits for it, TG_E_NOMEM. */
static int deliver_answer(server *s, session *x, const tg_rpc_msg *msg) {
  size_t at = MAX_ASKS, matched = 0;
  /* A copy of its own: jansson's counts order no free after another thread's reads. Made
   * before the lock, which every session's requests take. */
  json_t *response = json_deep_copy(msg->root);
  if (!response) return TG_E_NOMEM;
  pthread_mutex_lock(&s->lock);
  /* An error naming no request (its client could not read one) answers the question
   * waiting when only one does, as over stdio. */
  for (size_t i = 0; i < MAX_ASKS; i++)
    if (x->asks[i].id && !x->asks[i].response &&
        (msg->id ? json_equal(x->asks[i].id, msg->id) : msg->error != NULL)) {
      at = i;
      matched++;
    }
  bool found = matched == 1;
  if (found) {
    json_decref(x->asks[at].response);
    x->asks[at].response = response;
    response = NULL;
  }
  pthread_cond_broadcast(&s->answered);
  pthread_mutex_unlock(&s->lock);
  json_decref(response);
  return found;
}

/* A posted body that could not be decoded or was too large (refused with refusal; scan: its
 * text scanned) that meant to answer a question of the session it names: that question gets
 * an error for it, so that its call fails at once instead of waiting out its time. */
static void answer_unreadable(server *s, struct MHD_Connection *conn, const request *rq,
                              const tg_rpc_id_scan *scan, const json_t *refusal) {
  _cleanup_json_ json_t *id = tg_rpc_response_id(scan);
  const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Mcp-Session-Id");
  session *x = id && sid ? session_find(s, sid, rq->principal, rq->token_hash) : NULL;
  if (!x) return;
  _cleanup_json_ json_t *answer = tg_mcp_unreadable_answer(id, refusal);
  tg_rpc_msg msg;
  json_t *ignored = NULL;
  if (answer && tg_rpc_decode_element(answer, &msg, &ignored) == 0) {
    deliver_answer(s, x, &msg);
    tg_rpc_msg_done(&msg);
  }
  json_decref(ignored);
  session_put(s, x);
}

/* A session a batch of it is delivered to. */
typedef struct batch_target {
  server *srv;
  session *sess;
} batch_target;

/* Takes a response out of a batch (tg_rpc_batch_take) to the tool waiting for it. One that no
 * tool waits for is dropped: a batch has no answer of its own to refuse it with. */
static int deliver_batched_answer(void *arg, tg_rpc_msg *element) {
  batch_target *t = arg;
  if (element->kind != TG_RPC_RESPONSE) return 0;
  int r = deliver_answer(t->srv, t->sess, element);
  if (r < 0) return r;
  if (r == 0 && tg_log_may(&t->srv->stray_logged_ms))
    tg_log(TG_LOG_WARN, "http: a batched response to no request waiting for one; dropped "
                        "(logged once a minute at most)");
  return 1;
}

/* A request works on a copy of its session's state (false without memory). Requests of one
 * session may run at once, so only what a request changed is written back: the whole state
 * after the initialize that opened the session, else the log level (the one set last) and the
 * initialized flag. */
static bool state_load(server *s, session *x, tg_mcp_session *out) {
  pthread_mutex_lock(&s->lock);
  *out = x->state;
  /* A copy of its own, as requests of the session free theirs on their threads (see
   * deliver_answer). */
  out->client_capabilities = json_deep_copy(x->state.client_capabilities);
  pthread_mutex_unlock(&s->lock);
  return out->client_capabilities || !x->state.client_capabilities;
}

static void state_store(server *s, session *x, tg_mcp_session *in, bool opened) {
  pthread_mutex_lock(&s->lock);
  if (opened) {
    json_decref(x->state.client_capabilities);
    x->state = *in;
    in->client_capabilities = NULL;
  } else {
    if (in->level_set_ns > x->state.level_set_ns) {
      x->state.log_level = in->log_level;
      x->state.level_set_ns = in->level_set_ns;
    }
    if (in->initialized) x->state.initialized = true;
  }
  pthread_mutex_unlock(&s->lock);
}

/* Lists w, a stateless call of a token, for end_revoked (worker_free takes it off). */
static void list_token_call_locked(server *s, worker *w) {
  if (w->sess || !w->token_hash[0]) return;
  w->listed = true;
  w->next_call = s->token_calls;
  if (s->token_calls) s->token_calls->prev_call = w;
  s->token_calls = w;
  s->n_token_calls++;
}

static void worker_free(worker *w) {
  server *s = w->srv;
  if (w->listed) {
    pthread_mutex_lock(&s->lock);
    if (w->prev_call) w->prev_call->next_call = w->next_call;
    else s->token_calls = w->next_call;
    if (w->next_call) w->next_call->prev_call = w->prev_call;
    s->n_token_calls--;
    pthread_mutex_unlock(&s->lock);
  }
  tg_rpc_msg_done(&w->msg);
  json_decref(w->params);
  for (size_t i = 0; i < 4; i++) free(w->header_copies[i]);
  tg_mcp_session_done(&w->scratch);
  session_put(w->srv, w->sess);
  if (w->st) stream_release(w->st);
  if (w->caller) request_done(w->srv, w->caller, true);
  free(w);
}

/* Ends the answer of w's call, cancelled: with no message, but for a call cancelled as its
 * token was revoked whose answer has begun (an event stream), which ends with an error
 * saying so: its client would wait otherwise for an answer that cannot come. (One not begun
 * is refused as the revoked token is, 401.) */
static void finish_cancelled(server *s, worker *w) {
  char *text = NULL;
  if (revoked_call(s, w->sess, w->st)) {
    json_t *error = tg_rpc_error(w->msg.id, TG_RPC_INVALID_REQUEST,
                                 "The token this call was made with was revoked: the call was "
                                 "cancelled",
                                 NULL);
    text = error ? tg_rpc_encode(error) : NULL;
    json_decref(error);
  }
  stream_finish(w->st, text, w->msg.id, 0);
}

/* Serves one queued call on a pool thread's connection (NULL when it could not be opened). */
static void run_call(worker *w, tg_db *db) {
  server *s = w->srv;
  char *final = NULL;
  int status = 500;
  bool handled = false;
  if (db) {
    tg_env env = server_env(s, db);
    tg_mcp_io io = {.self = w, .send = worker_send, .ask = w->sess ? worker_ask : NULL,
                    .close_stream = worker_close_stream};
    tg_mcp_request req = {.env = &env, .principal_id = w->principal,
                          .token_hash = w->token_hash, .session = &w->scratch,
                          .headers = &w->headers, .io = &io,
                          .inflight = w->inflight,
                          .abandoned = &s->past_grace,
                          .watch = w->sess ? w->sess->watch : NULL};
    req.run_id = request_run(w, &req.run_held);
    tg_mcp_reply reply;
    handled = tg_mcp_handle(&s->mcp, &req, &w->msg, &reply) == 0;
    if (handled) {
      final = reply.text;
      status = reply.http_status;
      if (w->sess) state_store(s, w->sess, &w->scratch, w->opened);
    }
  }
  /* Ends the exchange even without a message (a cancelled call gets none), so the client is
   * never left waiting. */
  if (tg_mcp_inflight_end(w->inflight, w->msg.id)) {
    free(final);
    finish_cancelled(s, w);
  } else {
    if (!handled) {
      _cleanup_json_ json_t *error =
          tg_rpc_error(w->msg.id, TG_RPC_INTERNAL_ERROR, "Internal error", NULL);
      final = error ? tg_rpc_encode(error) : NULL;
    }
    stream_finish(w->st, final, w->msg.id, status);
  }
  if (db) check_lists(s, db, w->principal, w->sess);
  worker_free(w);
}

/* How many calls wait in line for a pool thread. */
static unsigned queued_locked(server *s) {
  unsigned n = 0;
  for (worker *w = s->queue_head; w; w = w->next) n++;
  return n;
}

/* Takes the calls cancelled while they wait in line for a pool thread off the line, and ends
 * them without an answer: at once, not once a thread comes free. */
static void drop_cancelled_in_line(server *s) {
  worker *dropped = NULL;
  pthread_mutex_lock(&s->lock);
  for (worker **at = &s->queue_head, *prev = NULL; *at;) {
    worker *w = *at;
    if (!tg_mcp_inflight_cancelled(w->inflight, w->msg.id)) {
      prev = w;
      at = &w->next;
      continue;
    }
    *at = w->next;
    if (s->queue_tail == w) s->queue_tail = prev;
    w->next = dropped;
    dropped = w;
  }
  pthread_mutex_unlock(&s->lock);
  while (dropped) {
    worker *w = dropped;
    dropped = w->next;
    tg_mcp_inflight_end(w->inflight, w->msg.id);
    finish_cancelled(s, w);
    worker_free(w);
  }
}

/* A pool or sweeper thread's connection, opened at its first use; NULL (logged) when it
 * cannot be, and tried again at the next. */
static tg_db *thread_db(server *s, tg_db **db) {
  char *why = NULL;
  if (!*db && tg_db_open(s->cfg->data_dir, db, &why) < 0) {
    tg_log(TG_LOG_ERROR, "http: cannot open the database: %s", why ? why : "out of memory");
    free(why);
    *db = NULL;
  }
  return *db;
}

/* The queued call to run next, taken off the queue into the free busy slot *slot: the first
 * of those whose principal runs the fewest calls, fewer than busy_max (stopping: the first
 * of all), so that a caller with fewer threads goes ahead of one holding more; NULL when
 * none may run. */
static worker *take_locked(server *s, unsigned *slot) {
  worker *prev = NULL, *best = NULL, *best_prev = NULL;
  unsigned fewest = 0;
  for (worker *w = s->queue_head; w; prev = w, w = w->next) {
    unsigned running = 0;
    for (unsigned i = 0; i < s->n_busy; i++) {
      running += strcmp(s->busy[i], w->principal) == 0;
      if (!s->busy[i][0]) *slot = i; /* this thread's at least is free */
    }
    if (s->stopping) running = 0;
    else if (running >= s->busy_max) continue;
    if (best && running >= fewest) continue;
    best = w;
    best_prev = prev;
    fewest = running;
    if (!running) break; /* none goes ahead of it */
  }
  if (!best) return NULL;
  if (best_prev) best_prev->next = best->next;
  else s->queue_head = best->next;
  if (s->queue_tail == best) s->queue_tail = best_prev;
  memcpy(s->busy[*slot], best->principal, sizeof s->busy[0]);
  return best;
}

/* A pool thread: serves queued calls until the pool stops and the queue is empty. */
static void *pool_main(void *arg) {
  server *s = arg;
  tg_db *db = NULL;
  for (;;) {
    unsigned slot = 0;
    pthread_mutex_lock(&s->lock);
    worker *w;
    while (!(w = take_locked(s, &slot)) && !(s->stopping && !s->queue_head))
      pthread_cond_wait(&s->queued, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (!w) break; /* stopping, and the queue is drained */
    run_call(w, thread_db(s, &db));
    pthread_mutex_lock(&s->lock);
    s->busy[slot][0] = '\0';
    pthread_cond_broadcast(&s->queued); /* a call held back for its principal may run */
    pthread_mutex_unlock(&s->lock);
  }
  tg_db_close(db);
  return NULL;
}

/* Drops the delivered output of st when st delivered nothing for replay_keep_ms. */
static void forget_stale(stream *st, int64_t now) {
  pthread_mutex_lock(&st->lock);
  if (now - st->delivered_at > st->srv->replay_keep_ms) drop_delivered_locked(st, 0);
  pthread_mutex_unlock(&st->lock);
}

/* What idle sessions keep for resumption goes after a while, so that it does not take for
 * long the room that other callers' output would be kept in. Called with the server's lock
 * held. */
static void forget_stale_output_locked(server *s) {
  int64_t now = tg_monotonic_ms();
  for (session *x = s->sessions; x; x = x->next) {
    for (size_t i = 0; i < TG_HTTP_KEPT_STREAMS; i++)
      if (x->kept[i]) forget_stale(x->kept[i], now);
    if (x->standalone) forget_stale(x->standalone, now);
  }
}

void (*_Atomic tg_http_test_looking)(void);

/* A session, listen stream or stateless call's stream held by end_revoked, and the hash of
 * the token that opened it. */
typedef struct opened {
  session *x;
  listener *l;
  stream *call;
  bool tasks; /* the tasks the token started */
  char hash[TG_TOKEN_HASH_LEN + 1];
} opened;

static int by_hash(const void *a, const void *b) {
  return strcmp(((const opened *)a)->hash, ((const opened *)b)->hash);
}

/* What a token opened ends once it is revoked: its sessions (and with them every stream and
 * call of theirs), its subscriptions/listen streams (with their result, as when the server
 * stops) and its stateless calls (cancelled, as when their client leaves). Each request is
 * checked as it comes; these live on past that, so the sweeper looks. */
static void end_revoked(server *s, tg_db *db) {
  _cleanup_json_ json_t *task_tokens = tg_mcp_tasks_token_hashes(s->mcp.tasks);
  pthread_mutex_lock(&s->lock);
  size_t cap = s->n_sessions + s->n_listeners + s->n_token_calls + json_object_size(task_tokens),
         n = 0;
  opened *all = cap ? malloc(cap * sizeof *all) : NULL;
  const char *hash;
  json_t *unused;
  json_object_foreach(all ? task_tokens : NULL, hash, unused) {
    all[n] = (opened){.tasks = true};
    snprintf(all[n++].hash, sizeof all->hash, "%s", hash);
  }
  for (session *x = s->sessions; all && x; x = x->next) {
    if (!x->token_hash[0]) continue;
    x->refs++;
    x->checking++; /* the look keeps it, it does not use it: else no session could make room */
    all[n] = (opened){.x = x};
    memcpy(all[n++].hash, x->token_hash, sizeof x->token_hash);
  }
  for (listener *l = s->listeners; all && l; l = l->next) {
    if (!l->token_hash[0]) continue;
    l->refs++;
    all[n] = (opened){.l = l};
    memcpy(all[n++].hash, l->token_hash, sizeof l->token_hash);
  }
  for (worker *w = s->token_calls; all && w; w = w->next_call) {
    stream_ref(w->st);
    all[n] = (opened){.call = w->st};
    memcpy(all[n++].hash, w->token_hash, sizeof w->token_hash);
  }
  pthread_mutex_unlock(&s->lock);
  void (*looking)(void) = tg_http_test_looking;
  if (looking) looking();
  /* Each token looked up once: the sessions and streams of one token side by side. */
  if (n) qsort(all, n, sizeof *all, by_hash);
  bool revoked = false;
  for (size_t i = 0; i < n; i++) {
    char id[TG_UUID_LEN + 1];
    if (i == 0 || strcmp(all[i].hash, all[i - 1].hash) != 0)
      revoked = tg_principal_by_token_hash(db, all[i].hash, NULL, id) == TG_E_NOTFOUND;
    if (all[i].tasks) {
      if (revoked) tg_mcp_tasks_end_token(s->mcp.tasks, all[i].hash);
      continue;
    }
    if (all[i].call) {
      if (revoked) {
        pthread_mutex_lock(&all[i].call->lock);
        all[i].call->revoked = true;
        pthread_mutex_unlock(&all[i].call->lock);
        cancel_call(all[i].call);
      }
      stream_release(all[i].call);
      continue;
    }
    if (all[i].l) {
      if (revoked) {
        json_t *meta = tg_mcp_result_meta(&s->mcp);
        tg_mcp_watch_end(all[i].l->watch, meta);
        json_decref(meta);
        stream_end(all[i].l->st);
        listener_unlink(all[i].l);
      }
      listener_put(all[i].l);
      continue;
    }
    pthread_mutex_lock(&s->lock);
    all[i].x->checking--;
    if (revoked && !all[i].x->dead) {
      all[i].x->revoked = true;
      session_end_locked(s, all[i].x);
    }
    session_release_locked(s, all[i].x);
    pthread_mutex_unlock(&s->lock);
    if (revoked) drop_cancelled_in_line(s);
  }
  free(all);
}

/* Shuts down the connections past their due time (see peer); their threads see it and close
 * them. A connection idle between requests is closed by the idle timeout before that. */
static void cut_slow_clients(server *s) {
  int64_t now = tg_monotonic_ms();
  unsigned cut = 0;
  pthread_mutex_lock(&s->peers_lock);
  for (peer *p = s->peers; p; p = p->next) {
    int64_t due_by = atomic_load(&p->due_by);
    if (p->cut || !due_by || now <= due_by) continue;
    shutdown(p->fd, SHUT_RDWR);
    p->cut = true;
    cut++;
  }
  pthread_mutex_unlock(&s->peers_lock);
  if ((cut += atomic_exchange(&s->slow_cut, 0)) == 0) return;
  if (tg_log_may(&s->slow_logged_ms))
    tg_log(TG_LOG_WARN, "http: closed %u connection(s) still sending a request %lld s after they "
           "opened or were last answered, or taking an answer for that long and %u s more "
           "every 2 MB of it (logged once a minute at most)", cut,
           (long long)(slow_limit_ms(s, 0) / 1000), idle_timeout_s(s));
  else
    atomic_fetch_add(&s->slow_cut, cut); /* told in the next line */
}

/* Each sweep is timed from the end of the last: one longer than the period does not pile up. */
static void *sweeper_main(void *arg) {
  server *s = arg;
  tg_db *db = NULL;
  pthread_mutex_lock(&s->lock);
  int64_t next = tg_monotonic_ms() + TG_HTTP_CHECK_MS;
  while (!s->stopping) {
    int64_t now = tg_monotonic_ms();
    if (now < next) {
      tg_timed_wait(&s->sweep_stop, &s->lock, next - now);
      continue;
    }
    pthread_mutex_unlock(&s->lock);
    if (thread_db(s, &db)) {
      end_revoked(s, db);
      check_lists(s, db, NULL, NULL);
    }
    cut_slow_clients(s);
    tell_held_back_mhd_lines(s, false);
    if (db) tg_token_uses_write(s->token_uses, db, false); /* may wait for a writer: last */
    pthread_mutex_lock(&s->lock);
    forget_stale_output_locked(s);
    drop_idle_locked(s);
    pthread_mutex_unlock(&s->lock);
    /* The runs of the sessions this sweep ended, or that a DELETE left to it (may wait for
     * a writer). */
    if (db) end_session_runs(s, db);
    pthread_mutex_lock(&s->lock);
    next = tg_monotonic_ms() + TG_HTTP_CHECK_MS;
  }
  pthread_mutex_unlock(&s->lock);
  if (thread_db(s, &db)) tg_token_uses_write(s->token_uses, db, true); /* the last minute's */
  tg_db_close(db);
  return NULL;
}

/* ---- responses ---- */

static enum MHD_Result respond_with(struct MHD_Connection *conn, unsigned status,
                                    struct MHD_Response *res, const char *type,
                                    const char *session_id, const char *allow);

/* A small answer of n bytes was queued: its request stops counting among its caller's
 * requests now, as libmicrohttpd's completion of it may come after the client has it and
 * sent its next. What bounds it then is the time its client has to take it, as for a large
 * one (see queue_reply): else a client taking none of its answers, on connection after
 * connection, could hold them past its count. */
static void small_answer_queued(struct MHD_Connection *conn, size_t n) {
  peer *p = peer_of(conn);
  if (!p) return;
  atomic_store(&p->due_by, tg_monotonic_ms() + slow_limit_ms(p->srv, n));
  request_done_once(p->srv, &p->answering);
}

/* A response; allow: the Allow header of a 405 (the methods of its route). */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type,
                               const char *body, const char *session_id, const char *allow) {
  size_t n = body ? strlen(body) : 0;
  struct MHD_Response *res =
      MHD_create_response_from_buffer(n, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
  enum MHD_Result r = res ? respond_with(conn, status, res, type, session_id, allow) : MHD_NO;
  if (r == MHD_YES && n <= SMALL_ANSWER_BYTES) small_answer_queued(conn, n);
  return r;
}

/* Queues res (destroyed here) with its headers; type, session_id and allow may be NULL. */
static enum MHD_Result respond_with(struct MHD_Connection *conn, unsigned status,
                                    struct MHD_Response *res, const char *type,
                                    const char *session_id, const char *allow) {
  if (type) MHD_add_response_header(res, "Content-Type", type);
  if (session_id) MHD_add_response_header(res, "Mcp-Session-Id", session_id);
  if (allow) MHD_add_response_header(res, "Allow", allow);
  /* A body refused for its coding or type is told which codings are taken (RFC 9110 §12.5.3):
   * none but the body as it is. */
  if (status == MHD_HTTP_UNSUPPORTED_MEDIA_TYPE)
    MHD_add_response_header(res, "Accept-Encoding", "identity");
  enum MHD_Result r = MHD_queue_response(conn, status, res);
  MHD_destroy_response(res);
  return r;
}

/* A response on /mcp. */
static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status, const char *type,
                             const char *body, const char *session_id) {
  return respond(conn, status, type, body, session_id,
                 status == MHD_HTTP_METHOD_NOT_ALLOWED ? "GET, POST, DELETE" : NULL);
}

/* The answer to a POST that gets no message: 202 when it holds notifications and responses
 * only. A request gets no answer once cancelled, but a POST holding one must be answered
 * with JSON or an event stream: one that ends with no event. */
static enum MHD_Result queue_unanswered(struct MHD_Connection *conn, bool holds_request,
                                        const char *session_id) {
  if (!holds_request) return queue(conn, MHD_HTTP_ACCEPTED, NULL, NULL, session_id);
  struct MHD_Response *res = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  enum MHD_Result r = res ? queue_sse(conn, res, session_id) : MHD_NO;
  if (r == MHD_YES) small_answer_queued(conn, 0);
  return r;
}

/* Answers with one encoded message (text, stolen). */
static enum MHD_Result queue_text(struct MHD_Connection *conn, unsigned status, char *text,
                                  const char *session_id) {
  if (!text) return queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
  enum MHD_Result r = queue(conn, status, "application/json", text, session_id);
  free(text);
  return r;
}

/* A JSON answer's text, counted as output of its caller not delivered yet until
 * libmicrohttpd lets go of it, as a stream's would be. */
typedef struct json_answer {
  server *srv;
  held_share *share;
  size_t n;
  char *text;
  /* Its request's count among its caller's, until the last of it is handed over (as a
   * stream's: see reader_answered); NULL: none. */
  held_share *answering;
} json_answer;

static ssize_t json_answer_read(void *cls, uint64_t pos, char *out, size_t max) {
  json_answer *a = cls;
  if (pos >= a->n) {
    request_done_once(a->srv, &a->answering);
    return MHD_CONTENT_READER_END_OF_STREAM;
  }
  size_t k = a->n - (size_t)pos < max ? a->n - (size_t)pos : max;
  memcpy(out, a->text + pos, k);
  if (pos + k == a->n) request_done_once(a->srv, &a->answering);
  return (ssize_t)k;
}

static void json_answer_free(void *cls) {
  json_answer *a = cls;
  request_done_once(a->srv, &a->answering);
  held_count_in(a->srv, a->share, a->n, true, false);
  share_put(a->srv, a->share);
  free(a->text);
  free(a);
}

/* Answers principal's request id, or batch when not NULL, with its reply (text, encoded,
 * stolen) as JSON, within the bounds on output not delivered yet unless it is small; past
 * them, an error naming the same request (each of the batch's) takes its place, as on a
 * stream. */
static enum MHD_Result queue_reply(server *s, struct MHD_Connection *conn, const char *principal,
                                   unsigned status, char *text, json_t *id,
                                   const tg_rpc_msg *batch, const char *session_id) {
  size_t n = text ? strlen(text) : 0;
  if (n <= SMALL_ANSWER_BYTES) return queue_text(conn, status, text, session_id);
  json_answer *a = calloc(1, sizeof *a);
  if (a && !(a->share = share_get(s, principal))) {
    free(a);
    a = NULL;
  }
  if (!a) {
    free(text);
    return queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
  }
  a->srv = s;
  a->n = n;
  if (past_bounds(s, a->share, 0, a->n)) {
    char *error = too_large(s, id, batch, a->n);
    free(text);
    share_put(s, a->share);
    free(a);
    return queue_text(conn, status, error, session_id);
  }
  a->text = text;
  held_count_in(s, a->share, a->n, false, false);
  set_due_by(conn, tg_monotonic_ms() + slow_limit_ms(s, a->n));
  peer *p = peer_of(conn);
  if (p) { /* the request's count goes with its answer */
    a->answering = p->answering;
    p->answering = NULL;
  }
  struct MHD_Response *res =
      MHD_create_response_from_callback(a->n, 64 * 1024, json_answer_read, a, json_answer_free);
  if (!res) {
    json_answer_free(a);
    return MHD_NO;
  }
  return respond_with(conn, status, res, "application/json", session_id, NULL);
}

static enum MHD_Result queue_json(struct MHD_Connection *conn, unsigned status, json_t *msg,
                                  const char *session_id) {
  char *text = msg ? tg_rpc_encode(msg) : NULL;
  json_decref(msg);
  return queue_text(conn, status, text, session_id);
}

static enum MHD_Result queue_rpc_error(struct MHD_Connection *conn, unsigned status, int code,
                                       const char *message) {
  return queue_json(conn, status, tg_rpc_error(NULL, code, message, NULL), NULL);
}

/* The -32600 error refusing msg: with its id when it is a request, so that it answers that
 * request; a client's response or notification has no answer of its own to name (no id).
 * Each request of a batch gets its own. */
/* data (stolen, may be NULL) is the error's. */
static enum MHD_Result queue_refusal_with(struct MHD_Connection *conn, unsigned status,
                                          const tg_rpc_msg *msg, int code, const char *message,
                                          json_t *data) {
  json_t *id = msg->kind == TG_RPC_REQUEST ? msg->id : NULL;
  return queue_json(conn, status,
                    msg->kind == TG_RPC_BATCH ? tg_rpc_refuse_batch(msg, code, message, data)
                                              : tg_rpc_error(id, code, message, data),
                    NULL);
}

static enum MHD_Result queue_refusal_as(struct MHD_Connection *conn, unsigned status,
                                        const tg_rpc_msg *msg, int code, const char *message) {
  return queue_refusal_with(conn, status, msg, code, message, NULL);
}

static enum MHD_Result queue_refusal(struct MHD_Connection *conn, unsigned status,
                                     const tg_rpc_msg *msg, const char *message) {
  return queue_refusal_as(conn, status, msg, TG_RPC_INVALID_REQUEST, message);
}

/* The lines of one header, each trimmed, joined into one list as RFC 9110 §5.3 reads a
 * repeated list header (Accept); headers that may not repeat never get here twice (see
 * singletons). */
typedef struct joined {
  const char *name;
  char *text; /* NULL while there is none */
  size_t len;
  bool failed; /* out of memory */
} joined;

static enum MHD_Result join_lines(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  joined *j = cls;
  if (strcasecmp(key, j->name) != 0 || !value) return MHD_YES;
  while (*value == ' ' || *value == '\t') value++; /* optional whitespace (RFC 9110 §5.5) */
  size_t n = strlen(value);
  while (n && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
  char *grown = realloc(j->text, j->len + n + 3);
  if (!grown) {
    j->failed = true;
    return MHD_NO;
  }
  if (j->text) {
    memcpy(grown + j->len, ", ", 2);
    j->len += 2;
  }
  memcpy(grown + j->len, value, n);
  j->len += n;
  grown[j->len] = '\0';
  j->text = grown;
  return MHD_YES;
}

/* Header name's lines joined (*ret malloc'd, NULL when the request has none); false when out
 * of memory. */
static bool header_value(struct MHD_Connection *conn, const char *name, char **ret) {
  joined j = {.name = name};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, join_lines, &j);
  if (j.failed) free(j.text);
  *ret = j.failed ? NULL : j.text;
  return !j.failed;
}

#define MAX_PARAM_HEADERS 64
#define MAX_PARAM_NAME 127 /* bytes of a Name */

/* The Mcp-Param-{Name} headers of a request, keyed by lower-case Name. */
typedef struct param_headers {
  json_t *params;
  bool too_many; /* more than MAX_PARAM_HEADERS names */
  bool too_long; /* a Name past MAX_PARAM_NAME: cut, two could pass for one repeated */
  bool failed;   /* out of memory */
} param_headers;

/* Collects one Mcp-Param header; a repeated one is the list of its lines, as a repeated
 * list header is (RFC 9110 §5.3), so it mirrors no argument. Its bytes are kept as sent: the
 * dispatch refuses what a client must encode. */
static enum MHD_Result collect_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
  param_headers *ph = cls;
  if (strncasecmp(key, "Mcp-Param-", 10) != 0 || !value) return MHD_YES;
  char name[MAX_PARAM_NAME + 1];
  if (strlen(key + 10) > MAX_PARAM_NAME) {
    ph->too_long = true;
    return MHD_NO;
  }
  size_t i = 0;
  for (const char *p = key + 10; *p; p++) name[i++] = (char)tolower((unsigned char)*p);
  name[i] = 0;
  while (*value == ' ' || *value == '\t') value++;
  size_t len = strlen(value);
  while (len && (value[len - 1] == ' ' || value[len - 1] == '\t')) len--;
  json_t *seen = json_object_get(ph->params, name);
  if (!seen && json_object_size(ph->params) >= MAX_PARAM_HEADERS) {
    ph->too_many = true;
    return MHD_NO;
  }
  size_t before = seen ? json_string_length(seen) + 2 : 0;
  _cleanup_free_ char *text = malloc(before + len + 1);
  if (text && seen) {
    memcpy(text, json_string_value(seen), before - 2);
    memcpy(text + before - 2, ", ", 2);
  }
  if (text) memcpy(text + before, value, len);
  json_t *v = text ? json_stringn_nocheck(text, before + len) : NULL;
  if (!v || json_object_set_new(ph->params, name, v) < 0) {
    ph->failed = true;
    return MHD_NO;
  }
  return MHD_YES;
}

/* Headers a request may carry once: only a list may repeat (RFC 9110 §5.3), and two Host
 * lines are a 400 (RFC 9112 §3.2). Read as their first line, a repeated one could let a
 * proxy and this server act on different values. Transfer-Encoding is a list, but the only
 * one taken is "chunked" alone (see admit): on two lines, it is refused too. */
static const char *const singletons[] = {
    "Host",           "Authorization",     "Origin",         "Content-Type",
    "Content-Length", "Transfer-Encoding", "Mcp-Session-Id", "Last-Event-ID",
    "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Toolgate-Run"};
#define N_SINGLETONS (sizeof singletons / sizeof singletons[0])

typedef struct singleton_count {
  unsigned seen[N_SINGLETONS];
} singleton_count;

static enum MHD_Result count_singleton(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value) {
  singleton_count *c = cls;
  for (size_t i = 0; i < N_SINGLETONS; i++)
    if (strcasecmp(key, singletons[i]) == 0) c->seen[i]++;
  return MHD_YES;
}

/* Whether 2026-07-28 validates header name on a request naming revision: its fault is then
 * that revision's (-32020), not HTTP's. The routing headers are its own. */
static bool validated_by_2026(const char *name, const char *revision) {
  return strcasecmp(name, "Mcp-Method") == 0 || strcasecmp(name, "Mcp-Name") == 0 ||
         (strcasecmp(name, "MCP-Protocol-Version") == 0 && revision &&
          strcmp(revision, TG_MCP_MODERN_VERSION) == 0);
}

/* What a request's Authorization header came to. */
typedef enum caller {
  CALLER_KNOWN,
  CALLER_NO_TOKEN,
  CALLER_EMPTY_TOKEN, /* "Bearer" alone: often a client's token variable left unset */
  CALLER_BAD_TOKEN,
  CALLER_UNCHECKED
} caller;

/* The principal the request's Bearer token names (out), and the token's hash ("" with
 * --no-auth); CALLER_UNCHECKED when the database could not say. */
static caller authenticate(server *s, struct MHD_Connection *conn, tg_db *db,
                           char out[TG_UUID_LEN + 1], char hash[TG_TOKEN_HASH_LEN + 1]) {
  hash[0] = '\0';
  if (s->cfg->no_auth) {
    snprintf(out, TG_UUID_LEN + 1, "%s", s->cfg->no_auth_principal);
    return CALLER_KNOWN;
  }
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  if (!auth || strncasecmp(auth, "Bearer", 6) != 0 || (auth[6] && auth[6] != ' '))
    return CALLER_NO_TOKEN;
  if (strlen(auth) > 512) return CALLER_BAD_TOKEN;
  const char *token = auth + 6;
  while (*token == ' ' || *token == '\t') token++;
  /* A field value ends before its trailing whitespace (RFC 9110 §5.5). */
  size_t len = strlen(token);
  while (len && (token[len - 1] == ' ' || token[len - 1] == '\t')) len--;
  if (!len) return CALLER_EMPTY_TOKEN;
  int r = db && tg_sha256_hex(token, len, hash) == 0
              ? tg_principal_by_token_hash(db, hash, s->cfg->tenant_id, out)
              : TG_E_DB;
  if (r == TG_OK) tg_token_used(s->token_uses, hash);
  return r == TG_OK ? CALLER_KNOWN : r == TG_E_NOTFOUND ? CALLER_BAD_TOKEN : CALLER_UNCHECKED;
}

/* The refusal of a request without a valid token: 401, or 503 when the database could not
 * check it. Only a token that was sent is called invalid (RFC 6750 §3.1): an empty one is
 * taken as none, so that a client's authorization flow starts as for none. Both are logged,
 * since clients often show a refusal as something else (an OAuth error, "failed to
 * connect"). */
static enum MHD_Result refuse_caller(server *s, struct MHD_Connection *conn, caller who) {
  if (who != CALLER_NO_TOKEN && tg_log_may(&s->refused_logged_ms))
    tg_log(TG_LOG_WARN, "http: refused a request whose Bearer token %s (logged once a minute "
           "at most)", who == CALLER_UNCHECKED    ? "the database could not check (503)"
                       : who == CALLER_EMPTY_TOKEN ? "is empty (401): is the client's token set?"
                                                   : "is unknown or revoked (401)");
  /* The token may be good: the client must not drop it. */
  if (who == CALLER_UNCHECKED)
    return queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                           "The token could not be checked; retry");
  _cleanup_json_ json_t *error = tg_rpc_error(
      NULL, TG_RPC_INVALID_REQUEST,
      who == CALLER_EMPTY_TOKEN
          ? "The Bearer token is empty; send one (toolgate token create makes one)"
          : "A valid Bearer token is required (toolgate token create makes one)",
      NULL);
  _cleanup_free_ char *text = error ? tg_rpc_encode(error) : NULL;
  struct MHD_Response *res =
      text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY) : NULL;
  if (!res) return MHD_NO;
  MHD_add_response_header(res, "WWW-Authenticate",
                          who == CALLER_BAD_TOKEN
                              ? "Bearer realm=\"toolgate\", error=\"invalid_token\""
                              : "Bearer realm=\"toolgate\"");
  return respond_with(conn, MHD_HTTP_UNAUTHORIZED, res, "application/json", NULL, NULL);
}

/* Whether st's call ended and all its output went out: its client can only want it again. */
static bool spent(stream *st) {
  pthread_mutex_lock(&st->lock);
  bool all_out = st->done && st->seen >= st->len;
  pthread_mutex_unlock(&st->lock);
  return all_out;
}

/* Keeps st for x's client to resume, in a free place, else in that of the oldest (its
 * number is the lowest) spent stream, else in that of the oldest: a stream still to deliver
 * is let go only past TG_HTTP_KEPT_STREAMS of them (logged). */
static void keep_stream_locked(server *s, session *x, stream *st) {
  stream **slot = NULL, **oldest = NULL;
  for (size_t i = 0; i < TG_HTTP_KEPT_STREAMS && !(slot && !*slot); i++) {
    stream **at = &x->kept[i];
    if (!*at || (spent(*at) && (!slot || (*at)->no < (*slot)->no))) slot = at;
    if (*at && (!oldest || (*at)->no < (*oldest)->no)) oldest = at;
  }
  if (!slot) {
    slot = oldest;
    if (tg_log_may(&s->let_go_logged_ms))
      tg_log(TG_LOG_WARN, "http: a session's stream still to deliver was let go for a newer one "
             "(%d kept a session; logged once a minute at most)", TG_HTTP_KEPT_STREAMS);
  }
  if (*slot) stream_release(*slot);
  stream_ref(st);
  *slot = st;
}

/* Gives back a place start_call kept in the line for a call that did not join it. */
static enum MHD_Result forgo_place(server *s, enum MHD_Result r) {
  pthread_mutex_lock(&s->lock);
  s->line_promised--;
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* Runs w on a worker thread and answers from what it says. *started tells whether the
 * worker took w (it then frees it); when it did not, the caller still owns w. */
static enum MHD_Result start_call(server *s, struct MHD_Connection *conn, worker *w,
                                  const char *session_id, bool *started) {
  *started = false;
  /* A caller's calls on the pool are bounded apart from its requests answered, which a
   * session's call outlives: its client may leave to resume it later. The client can still
   * cancel them, end their session or resume them at this bound. */
  bool full = false;
  if (!s->cfg->no_auth && !(w->caller = request_begin(s, w->principal, true, &full)))
    return full ? queue_refusal_as(conn, MHD_HTTP_TOO_MANY_REQUESTS, &w->msg,
                                   TG_RPC_INTERNAL_ERROR,
                                   "Too many calls of this caller wait or run on the pool; "
                                   "cancel one or wait")
                : MHD_NO;
  /* The call's place in the line is kept from here until it joins it (or gives up), so that
   * calls on their way at once cannot pass the bound together. A caller with no other call
   * on the pool may join a full line (by one call each, so callers that fill it cannot lock
   * the others out). */
  unsigned most = s->cfg->max_queued_calls ? s->cfg->max_queued_calls : TG_HTTP_MAX_QUEUED_CALLS;
  bool first = w->caller && pool_calls_of(s, w->caller) == 1;
  pthread_mutex_lock(&s->lock);
  bool line_full = !first && queued_locked(s) + s->line_promised >= most;
  if (!line_full) s->line_promised++;
  pthread_mutex_unlock(&s->lock);
  if (line_full) {
    if (tg_log_may(&s->line_full_logged_ms))
      tg_log(TG_LOG_WARN, "http: %u calls wait for a pool thread; refusing more (logged once a "
             "minute at most; --threads gives more threads)", most);
    return queue_refusal_as(conn, MHD_HTTP_SERVICE_UNAVAILABLE, &w->msg, TG_RPC_INTERNAL_ERROR,
                            "Too many calls wait for a thread; retry later");
  }
  session *x = w->sess;
  stream *st = stream_new(s, 0, w->principal);
  /* Cancellable from now on: a cancellation while the call waits for a thread is kept. */
  bool held = st && (x ? tg_mcp_inflight_begin(x->inflight, w->msg.id) == 0
                       : cancellable_alone(st, w->msg.id));
  if (!held) {
    if (st) stream_release(st);
    return forgo_place(s, MHD_NO);
  }
  tg_mcp_inflight *inflight = x ? x->inflight : st->inflight;
  st->refs = 2; /* the worker's and this connection's */
  if (!x) {
    st->on_close = cancel_call;
    st->close_arg = st;
  }
  w->st = st;
  w->inflight = inflight;
  int fd = connection_fd(conn);
  bool resumes = x && strcmp(w->scratch.version, POLLING_VERSION) >= 0;
  size_t primed_len = 0;
  /* w belongs to the pool once queued: what this thread needs of it is taken first. */
  pthread_mutex_lock(&s->lock);
  if (x) {
    st->no = ++x->next_stream;
    x->refs++;
  }
  /* A client that resumes call streams gets its stream at once, primed, before the call can
   * send anything: it can resume it from the start, and hears from the server while the call
   * waits in line. (Without the few bytes, it is answered as any other.) */
  if (resumes) {
    pthread_mutex_lock(&st->lock);
    if (prime_locked(st) == 0) primed_len = st->len;
    pthread_mutex_unlock(&st->lock);
  }
  list_token_call_locked(s, w);
  w->next = NULL;
  if (s->queue_tail) s->queue_tail->next = w;
  else s->queue_head = w;
  s->queue_tail = w;
  s->line_promised--;
  pthread_cond_signal(&s->queued);
  /* A cancellation that looked at the line before w joined it missed w: w leaves it now. */
  bool cancelled = x && tg_mcp_inflight_cancelled(inflight, w->msg.id);
  pthread_mutex_unlock(&s->lock);
  if (cancelled) drop_cancelled_in_line(s);
  *started = true;
  pthread_mutex_lock(&st->lock);
  bool gone = false;
  /* No connection reads st yet, so nothing was dropped: len == 0 means nothing appended. */
  while (!st->done && st->len == 0 && !st->polling) {
    if (!tg_timed_wait(&st->ready, &st->lock, HANGUP_CHECK_MS) || x || gone || !client_gone(fd))
      continue;
    /* A stateless client that went away cancelled its call, which ends soon after. */
    gone = true;
    unsigned id = st->reader;
    pthread_mutex_unlock(&st->lock);
    stream_detach(st, id);
    pthread_mutex_lock(&st->lock);
  }
  if (st->len == 0 && !st->polling) {
    char *final = st->final;
    int status = st->final_status;
    st->final = NULL;
    pthread_mutex_unlock(&st->lock);
    bool revoked = !final && revoked_call(s, x, st);
    /* Without a message, the request was cancelled (status 0: by its token's revocation, told
     * as the revoked token is), or its error could not be built. */
    enum MHD_Result r = final     ? queue_reply(s, conn, st->share->principal, (unsigned)status,
                                                final, st->final_id, NULL, session_id)
                        : revoked ? refuse_caller(s, conn, CALLER_BAD_TOKEN)
                        : status == 0 ? queue_unanswered(conn, true, session_id) /* a call */
                                      : queue(conn, (unsigned)status, NULL, NULL, session_id);
    stream_release(st);
    session_put(s, x);
    return r;
  }
  /* A call that asked to end its answer (polling) gets what there is so far, read from st
   * as any answer is (or the priming event, when there is nothing), and the reconnection
   * delay; its result then waits for the client's GET with Last-Event-ID. */
  if (st->polling && st->len == primed_len) {
    if (!primed_len && prime_locked(st) < 0) {
      pthread_mutex_unlock(&st->lock);
      stream_release(st);
      session_put(s, x);
      return MHD_NO;
    }
    st->cut_primed = true;
  }
  st->cutting = st->polling;
  st->cut_at = st->len;
  st->streaming = st->reading = true;
  unsigned reader_id = st->reader;
  if (st->final) {
    append_reply_locked(st, st->final, st->final_id);
    st->final = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  if (x) {
    pthread_mutex_lock(&s->lock);
    keep_stream_locked(s, x, st);
    session_release_locked(s, x);
    pthread_mutex_unlock(&s->lock);
  }
  return queue_stream(conn, st, session_id, reader_id);
}

/* Whether msg, a tools/call, names a tool that may wait on the client (an unknown name
 * does not: it is answered at once), or is a session's prompts/get (a prompt may ask its
 * client, as the conformance fixtures' does). */
static bool waits_on_client(server *s, const tg_rpc_msg *msg) {
  if (strcmp(msg->method, "prompts/get") == 0) return s->mcp.fixtures;
  const char *name = json_string_value(json_object_get(msg->params, "name"));
  const tg_tool *tool = name ? tg_registry_find(s->cfg->registry, name) : NULL;
  return tool && tool->flags & TG_TOOL_INTERACTIVE;
}

/* Answers with the events st gathered, then the reply to request id (encoded, stolen), as
 * one SSE response read from st, so that what the client has not read yet stays within the
 * bounds on output; a session keeps the stream for a client cut off to resume. */
static enum MHD_Result queue_events(server *s, struct MHD_Connection *conn, session *x,
                                    stream *st, char *reply, json_t *id, const char *session_id) {
  pthread_mutex_lock(&st->lock);
  append_reply_locked(st, reply, id);
  st->done = st->streaming = st->reading = true;
  unsigned reader_id = st->reader;
  st->refs++; /* the answer's, besides the caller's */
  pthread_mutex_unlock(&st->lock);
  if (x) {
    pthread_mutex_lock(&s->lock);
    keep_stream_locked(s, x, st);
    pthread_mutex_unlock(&s->lock);
  }
  return queue_stream(conn, st, session_id, reader_id);
}

/* The error err (released: one, or a batch's, each naming a request) refusing a body that
 * does not decode, as the refusal for its media type, why, naming the same requests. NULL
 * without memory. */
static json_t *media_refusal(json_t *err, const char *why) {
  json_t *refusal = json_is_array(err)
                        ? json_array()
                        : tg_rpc_error(json_object_get(err, "id"), TG_RPC_INVALID_REQUEST, why, NULL);
  size_t i;
  json_t *each;
  json_array_foreach(err, i, each) {
    if (refusal && json_array_append_new(refusal, tg_rpc_error(json_object_get(each, "id"),
                                                               TG_RPC_INVALID_REQUEST, why, NULL)) < 0) {
      json_decref(refusal);
      refusal = NULL;
    }
  }
  json_decref(err);
  return refusal;
}

static enum MHD_Result handle_post(server *s, struct MHD_Connection *conn, tg_db *db,
                                   const char *principal, request *rq) {
  _cleanup_free_ char *sid = NULL;
  if (!header_value(conn, "Mcp-Session-Id", &sid)) return MHD_NO;
  worker *w = calloc(1, sizeof *w);
  if (!w) return MHD_NO;
  w->srv = s;
  snprintf(w->principal, sizeof w->principal, "%s", principal);
  snprintf(w->token_hash, sizeof w->token_hash, "%s", rq->token_hash);
  tg_mcp_session_init(&w->scratch);
  json_t *err = NULL;
  int dr = tg_rpc_decode(rq->body ? rq->body : "", rq->len, &w->msg, &err);
  if (dr != 0 && err && !rq->refused_media) {
    tg_rpc_id_scan scan;
    tg_rpc_id_scan_init(&scan);
    tg_rpc_id_scan_feed(&scan, rq->body ? rq->body : "", rq->len);
    answer_unreadable(s, conn, rq, &scan, err);
  }
  if (dr != 0 && rq->refused_media && err) err = media_refusal(err, rq->refused_media);
  if (dr != 0) {
    free(w);
    return err ? queue_json(conn, rq->refused_media ? rq->refused_media_status : MHD_HTTP_BAD_REQUEST,
                            err, NULL)
               : MHD_NO;
  }
  enum MHD_Result result;
  if (rq->refused_media) {
    result = queue_refusal(conn, rq->refused_media_status, &w->msg, rq->refused_media);
    goto done;
  }
  if (rq->repeated_mcp_header) {
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", rq->repeated_mcp_header);
    /* -32020 is 2026-07-28's: a 2025 message gets JSON-RPC's own. */
    int code = tg_mcp_has_claim(&w->msg) ? TG_RPC_HEADER_MISMATCH : TG_RPC_INVALID_REQUEST;
    result = queue_refusal_as(conn, MHD_HTTP_BAD_REQUEST, &w->msg, code, why);
    goto done;
  }
  w->params = json_object();
  if (!w->params || !header_value(conn, "MCP-Protocol-Version", &w->header_copies[0]) ||
      !header_value(conn, "Mcp-Method", &w->header_copies[1]) ||
      !header_value(conn, "Mcp-Name", &w->header_copies[2]) ||
      !header_value(conn, "Toolgate-Run", &w->header_copies[3])) {
    result = MHD_NO;
    goto done;
  }
  param_headers ph = {.params = w->params};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_param, &ph);
  if (ph.failed) {
    result = MHD_NO;
    goto done;
  }
  if (ph.too_many) {
    result = queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                           "Too many Mcp-Param headers (at most 64 names)");
    goto done;
  }
  if (ph.too_long) {
    result = queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                           "An Mcp-Param header's name is too long (at most 127 bytes after "
                           "Mcp-Param-)");
    goto done;
  }
  w->headers = (tg_mcp_headers){w->header_copies[0], w->header_copies[1], w->header_copies[2],
                                w->params};
  /* A modern version header without a modern _meta is still modern traffic: the dispatch
   * answers it with the missing envelope keys, statelessly. */
  bool modern = tg_mcp_has_claim(&w->msg) ||
                (w->headers.protocol_version &&
                 strcmp(w->headers.protocol_version, TG_MCP_MODERN_VERSION) == 0);
  /* The dispatch checks a 2026-07-28 request's version (claim and header, in that
   * revision's order); any other message's header binds no less, and so does a
   * notification's claim. Before a session is looked for: a client naming a version not
   * spoken here is told so, not to send initialize. A session's message may name another
   * legacy revision than the one negotiated, as the reference server allows: the official
   * suite sends 2025-03-26 on the 2025-11-25 sessions it opens. */
  int version_code;
  json_t *version_data;
  const char *version_refusal =
      w->msg.kind == TG_RPC_REQUEST && tg_mcp_has_claim(&w->msg)
          ? NULL
          : tg_mcp_version_refusal(&w->msg, w->headers.protocol_version, &version_code,
                                   &version_data);
  if (version_refusal) {
    result = queue_refusal_with(conn, MHD_HTTP_BAD_REQUEST, &w->msg, version_code,
                                version_refusal, version_data);
    goto done;
  }
  bool opens = !modern && w->msg.kind == TG_RPC_REQUEST && strcmp(w->msg.method, "initialize") == 0;
  const char *new_sid = NULL;
  /* 2026-07-28 is stateless: a session id it carries is ignored, and none is minted. */
  if (!modern && !opens) {
    if (!sid) {
      result = queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                             "Mcp-Session-Id is required; send initialize first");
      goto done;
    }
    if (!(w->sess = session_find(s, sid, rq->principal, rq->token_hash))) {
      result = queue_refusal(conn, MHD_HTTP_NOT_FOUND, &w->msg, "Session not found");
      goto done;
    }
    if (!state_load(s, w->sess, &w->scratch)) {
      result = queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
      goto done;
    }
    if (tg_mcp_reuses_id_in_flight(w->sess->inflight, NULL, &w->msg)) {
      result = queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg, TG_MCP_INFLIGHT_REUSED_ID);
      goto done;
    }
  } else if (opens && sid && (w->sess = session_find(s, sid, rq->principal, rq->token_hash))) {
    /* A second session would leave the first to its idle timeout; a stale id is no bar. */
    result = queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                           "This session is initialized already: end it with DELETE, or "
                           "initialize without Mcp-Session-Id");
    goto done;
  } else if (opens) {
    if (!(w->sess = session_new(s, principal, rq->token_hash))) {
      result = MHD_NO;
      goto done;
    }
    w->opened = true;
    new_sid = w->sess->id;
  }
  if (w->msg.kind == TG_RPC_BATCH && w->sess && tg_mcp_takes_batches(&w->scratch) &&
      tg_rpc_batch_take(&w->msg, deliver_batched_answer, &(batch_target){s, w->sess}) < 0) {
    result = MHD_NO;
    goto done;
  }
  if (w->msg.kind == TG_RPC_RESPONSE) {
    int delivered = w->sess ? deliver_answer(s, w->sess, &w->msg) : 0;
    result = delivered > 0    ? queue(conn, MHD_HTTP_ACCEPTED, NULL, NULL, NULL)
             : delivered == 0 ? queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                                "No request is waiting for this response")
                              : queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
    goto done;
  }
  /* Tool calls (and a session's prompts) may talk back before their result when the client
   * can read SSE. One that may wait on the client streams from a worker thread, so that this
   * connection delivers its events as they come; any other runs here, and its events
   * (progress, log messages) go ahead of its result in one response. */
  bool sse_call = w->msg.kind == TG_RPC_REQUEST && rq->prefers_events &&
                  (strcmp(w->msg.method, "tools/call") == 0 ||
                   (w->sess && strcmp(w->msg.method, "prompts/get") == 0));
  if (sse_call && waits_on_client(s, &w->msg)) {
    /* The session id is copied: the worker may release its session before we answer. */
    char sid_copy[sizeof w->sess->id] = "";
    if (new_sid) snprintf(sid_copy, sizeof sid_copy, "%s", new_sid);
    bool started = false;
    result = start_call(s, conn, w, new_sid ? sid_copy : NULL, &started);
    if (started) return result;
    goto done;
  }
  /* A 2026-07-28 subscriptions/listen request gets a watch of its own, sending on its
   * answer, which stays open as the subscription. */
  listener *l = NULL;
  if (modern && w->msg.kind == TG_RPC_REQUEST && strcmp(w->msg.method, "subscriptions/listen") == 0) {
    unsigned status = 0;
    const char *why = NULL;
    if (!(l = listener_open(s, principal, rq->token_hash, &status, &why))) {
      result = queue_refusal(conn, status, &w->msg, why);
      goto done;
    }
  }
  tg_env env = server_env(s, db);
  /* A stateless call of a token is listed for end_revoked, which cancels it through its
   * stream, one made for that when its answer is JSON. */
  bool listed = !w->sess && w->token_hash[0] && w->msg.kind == TG_RPC_REQUEST &&
                strcmp(w->msg.method, "tools/call") == 0;
  if ((sse_call || listed) && !(w->st = stream_new(s, 0, principal))) {
    result = MHD_NO;
    goto done;
  }
  if (listed) {
    if (!cancellable_alone(w->st, w->msg.id)) {
      result = MHD_NO;
      goto done;
    }
    pthread_mutex_lock(&s->lock);
    list_token_call_locked(s, w);
    pthread_mutex_unlock(&s->lock);
  }
  if (w->st && w->sess) {
    pthread_mutex_lock(&s->lock);
    w->st->no = ++w->sess->next_stream;
    pthread_mutex_unlock(&s->lock);
  }
  tg_mcp_io io = {.self = w, .send = worker_send};
  int fd = connection_fd(conn);
  tg_mcp_request req = {.env = &env, .principal_id = principal, .token_hash = w->token_hash,
                        .session = &w->scratch, .headers = &w->headers,
                        .io = sse_call ? &io : NULL,
                        .inflight = w->sess ? w->sess->inflight : w->st ? w->st->inflight : NULL,
                        .abandoned = &s->past_grace,
                        /* Without a session, a client cancels by going away. */
                        .gone = w->sess ? NULL : connection_gone, .gone_arg = &fd,
                        .watch = l ? l->watch : w->sess ? w->sess->watch : NULL};
  req.run_id = request_run(w, &req.run_held);
  tg_mcp_reply reply;
  int hr = tg_mcp_handle(&s->mcp, &req, &w->msg, &reply);
  if (listed) tg_mcp_inflight_end(w->st->inflight, w->msg.id); /* what cancellable_alone began */
  if (l && (hr < 0 || !reply.subscribed)) {
    listener_closed(l); /* no subscription: as if its stream had closed */
    l = NULL;
  }
  /* An initialize that failed, even in-band (200 with a JSON-RPC error), opens no session. */
  if (opens && (hr < 0 || reply.http_status != 200 || reply.error)) {
    new_sid = NULL;
  } else if (opens && !session_admit(s, w->sess)) {
    free(reply.text);
    result = queue_refusal(conn, MHD_HTTP_TOO_MANY_REQUESTS, &w->msg,
                           "Too many sessions in use; end one (DELETE) and retry");
    goto done;
  } else if (opens && !session_run_open(s, db, w->sess)) {
    free(reply.text);
    result = queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg, TG_RPC_INTERNAL_ERROR,
                              "The session's run could not start");
    goto done;
  }
  if (hr < 0) {
    result = queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg, TG_RPC_INTERNAL_ERROR,
                              "Out of memory");
    goto done;
  }
  if (w->sess) state_store(s, w->sess, &w->scratch, w->opened);
  /* What this message changed, and the baseline of a listen stream just acknowledged. */
  check_lists(s, db, principal, w->sess);
  /* A call cancelled as its token was revoked is told so, as the revoked token is. */
  bool revoked = !reply.text && (w->sess || listed) && revoked_call(s, w->sess, w->st);
  result = l                               ? listener_serve(conn, l)
           : revoked                       ? refuse_caller(s, conn, CALLER_BAD_TOKEN)
           : reply.text && w->st && w->st->len
               ? queue_events(s, conn, w->sess, w->st, reply.text, w->msg.id, new_sid)
           : reply.text ? queue_reply(s, conn, principal, (unsigned)reply.http_status, reply.text,
                                      w->msg.id, w->msg.kind == TG_RPC_BATCH ? &w->msg : NULL,
                                      new_sid)
                           : queue_unanswered(conn, tg_mcp_holds_request(&w->msg), new_sid);
done:
  worker_free(w);
  return result;
}

static enum MHD_Result handle_delete(server *s, struct MHD_Connection *conn, tg_db *db,
                                     const request *rq) {
  _cleanup_free_ char *sid = NULL;
  if (!header_value(conn, "Mcp-Session-Id", &sid)) return MHD_NO;
  if (!sid)
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "Mcp-Session-Id is required");
  session *x = session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST, "Session not found");
  pthread_mutex_lock(&s->lock);
  if (!x->dead) session_end_locked(s, x);
  session_release_locked(s, x);
  pthread_mutex_unlock(&s->lock);
  drop_cancelled_in_line(s);
  /* Its run ends now, unless calls of it still run or the sweep looks at it: then the sweep
   * ends it, at the end of the next at the latest. */
  if (db) end_session_runs(s, db);
  return queue(conn, MHD_HTTP_OK, NULL, NULL, NULL);
}

/* Resumes the stream that Last-Event-ID "STREAM-EVENT" names from the event after it, as
 * *reader_id; NULL with *status and *why set when it cannot. Called with the server's lock
 * held. */
static stream *resume_locked(session *x, const char *last, int fd, unsigned *status,
                             const char **why, unsigned *reader_id) {
  char *end = NULL;
  errno = 0;
  unsigned long no = strtoul(last, &end, 10), n = 0;
  bool ok = isdigit((unsigned char)last[0]) && *end == '-' && isdigit((unsigned char)end[1]);
  if (ok) {
    const char *num = end + 1;
    n = strtoul(num, &end, 10);
    ok = !*end && errno == 0 && no <= UINT_MAX && n < UINT_MAX;
  }
  stream *st = NULL;
  if (ok && x->standalone && x->standalone->no == no) st = x->standalone;
  for (size_t i = 0; ok && !st && i < TG_HTTP_KEPT_STREAMS; i++)
    if (x->kept[i] && x->kept[i]->no == no) st = x->kept[i];
  *status = MHD_HTTP_BAD_REQUEST;
  if (!ok) {
    *why = "Last-Event-ID is no event id of this server (STREAM-EVENT, two numbers)";
    return NULL;
  }
  if (!st) {
    *why = "Last-Event-ID names no stream of this session";
    return NULL;
  }
  pthread_mutex_lock(&st->lock);
  if (n > st->next_event) {
    *why = "Last-Event-ID names no event of this stream";
  } else if (n + 1 < st->first) {
    *why = "The events after Last-Event-ID are no longer kept";
  } else {
    /* A client resuming may be quicker than the server noticing the old connection
     * dropped: the new connection takes the stream over, the old one ends. */
    set_sent_locked(st, event_offset_locked(st, (unsigned)n + 1));
    compact_locked(st); /* what the client says it has may pass what went out */
    st->reading = true;
    /* A cut meant for the connection it replaces; and this one starts after the priming. */
    st->cutting = st->cut_primed = st->reader_primed = false;
    *reader_id = ++st->reader;
    st->reader_fd = fd;
    pthread_cond_broadcast(&st->ready);
    st->refs++;
    *why = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  return *why ? NULL : st;
}

/* Opens the session's standalone GET stream, which replaces one no client reads any more.
 * For clients that resume streams (2025-11-25 on) it starts with a priming event (an id and
 * no data), so that one cut off before any message can still resume it. Called with the
 * server's lock held. */
static stream *standalone_locked(session *x, int fd, unsigned *status, const char **why,
                                 unsigned *reader_id, unsigned *unread) {
  stream *old = x->standalone;
  *unread = 0;
  if (old) {
    pthread_mutex_lock(&old->lock);
    /* A client that left is not waited for: its reader sees it within HANGUP_CHECK_MS, and
     * its client's next GET would be refused meanwhile. */
    bool busy = old->reading && !client_gone(old->reader_fd);
    /* The list changes old never delivered whole, for the watch to announce again (an event
     * that went out in part was not dispatched). */
    size_t from = event_start_locked(old, old->seen > old->head ? old->seen : old->head);
    if (!busy && from < old->len) *unread = tg_mcp_watch_lists_in(old->buf + from, old->len - from);
    pthread_mutex_unlock(&old->lock);
    /* 405 is how a server says it offers no stream on GET, which clients take quietly:
     * some open another as a stream they resumed ends (409 set off their retries). */
    if (busy) {
      *status = MHD_HTTP_METHOD_NOT_ALLOWED;
      *why = "A GET stream is already open for this session: no other is offered";
      return NULL;
    }
  }
  *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  *why = "Out of memory";
  stream *st = stream_new(x->srv, x->next_stream + 1, x->principal);
  /* An older client may take the empty event for a message that does not parse. */
  bool resumes = strcmp(x->state.version, POLLING_VERSION) >= 0;
  if (!st || (resumes && prime_locked(st) < 0)) {
    if (st) stream_release(st);
    return NULL;
  }
  x->next_stream++;
  st->streaming = true;
  st->reading = true;
  *reader_id = st->reader; /* nobody else knows st yet */
  st->reader_fd = fd;
  st->refs = 2; /* the session's and the response's */
  if (old) {
    stream_end(old);
    stream_release(old);
  }
  x->standalone = st;
  return st;
}

/* GET /mcp: a legacy session's standalone stream, or the resumption of one of its streams. */
static enum MHD_Result handle_get(server *s, struct MHD_Connection *conn, tg_db *db,
                                  const request *rq) {
  const char *principal = rq->principal;
  _cleanup_free_ char *sid = NULL, *last = NULL;
  if (!header_value(conn, "Mcp-Session-Id", &sid) || !header_value(conn, "Last-Event-ID", &last))
    return MHD_NO;
  /* Without a session there is no stream to offer (2026-07-28 is POST only): what is left of
   * this route is POST. */
  if (!sid) return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "POST");
  if (!rq->takes_events)
    return queue_rpc_error(conn, MHD_HTTP_NOT_ACCEPTABLE, TG_RPC_INVALID_REQUEST,
                           "Accept must include text/event-stream");
  session *x = session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST, "Session not found");
  unsigned status = 0;
  const char *why = NULL;
  unsigned unread = 0;
  pthread_mutex_lock(&s->lock);
  unsigned reader_id = 0;
  int fd = connection_fd(conn);
  stream *st = x->dead ? NULL
               : last  ? resume_locked(x, last, fd, &status, &why, &reader_id)
                       : standalone_locked(x, fd, &status, &why, &reader_id, &unread);
  if (x->dead) {
    status = MHD_HTTP_NOT_FOUND;
    why = "Session not found";
  }
  pthread_mutex_unlock(&s->lock);
  /* Outside the server's lock, which the watch's sending takes. */
  if (unread && st) tg_mcp_watch_owe(x->watch, unread);
  /* Lists are checked only for sessions with a stream to hear of changes: a new one
   * announces what changed since the session initialized or its last stream was checked. */
  if (st && !last && db) check_lists(s, db, principal, x);
  session_put(s, x);
  if (st) return queue_stream(conn, st, NULL, reader_id);
  if (status != MHD_HTTP_METHOD_NOT_ALLOWED)
    return queue_rpc_error(conn, status, TG_RPC_INVALID_REQUEST, why);
  /* No other stream is offered on GET while one is open: POST and DELETE are left. */
  _cleanup_json_ json_t *error = tg_rpc_error(NULL, TG_RPC_INVALID_REQUEST, why, NULL);
  _cleanup_free_ char *text = error ? tg_rpc_encode(error) : NULL;
  return text ? respond(conn, status, "application/json", text, NULL, "POST, DELETE") : MHD_NO;
}

/* Set by a connection's thread that returns MHD_NO to close it on purpose, having logged why:
 * libmicrohttpd then reports an "internal error" on the same thread. */
static _Thread_local bool closing_on_purpose;

/* A request that came after the server began to stop: 503, and the connection closes. */
static enum MHD_Result refuse_while_stopping(struct MHD_Connection *conn) {
  _cleanup_json_ json_t *error =
      tg_rpc_error(NULL, TG_RPC_INTERNAL_ERROR, "The server is stopping", NULL);
  char *text = error ? tg_rpc_encode(error) : NULL;
  struct MHD_Response *res = text ? MHD_create_response_from_buffer(
                                        strlen(text), text, MHD_RESPMEM_MUST_FREE)
                                  : NULL;
  if (!res) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(res, "Connection", "close");
  return respond_with(conn, MHD_HTTP_SERVICE_UNAVAILABLE, res, "application/json", NULL, NULL);
}

/* A body past the bound (scan: what it names; NULL: unread) is refused with 413, or, read,
 * with the refusal of its Accept or Content-Type first (rq's), as a body within the bound
 * would be. */
static enum MHD_Result refuse_too_large(server *s, struct MHD_Connection *conn,
                                       const request *rq, const tg_rpc_id_scan *scan) {
  json_t *err = tg_rpc_too_large(scan);
  if (err && rq && !rq->refused_media) answer_unreadable(s, conn, rq, scan, err);
  if (rq && rq->refused_media)
    return queue_json(conn, rq->refused_media_status, media_refusal(err, rq->refused_media), NULL);
  return queue_json(conn, MHD_HTTP_CONTENT_TOO_LARGE, err, NULL);
}

/* A body dropped as it passed the bounds on bodies held at once (rq->busy_status says
 * whose) is refused, naming its request when its text did. */
static enum MHD_Result refuse_busy(server *s, struct MHD_Connection *conn, const request *rq) {
  bool own = rq->busy_status == MHD_HTTP_TOO_MANY_REQUESTS;
  if (tg_log_may(&s->busy_logged_ms))
    tg_log(TG_LOG_WARN, "http: refused a request body past the bound on %s (%zu bytes; "
           "logged once a minute at most)", own ? "one caller's bodies held at once"
                                                : "the bodies held at once",
           own ? s->taking_max / 2 : s->taking_max);
  json_t *data = json_pack("{s:s,s:I}", "limit", own ? "callerBodyBytes" : "bodyBytes", "max",
                           (json_int_t)(own ? s->taking_max / 2 : s->taking_max));
  json_t *err = tg_rpc_scan_refusal(
      rq->past, own ? TG_RPC_INVALID_REQUEST : TG_RPC_INTERNAL_ERROR,
      own ? "Too many bytes of this caller's requests are held at once; wait for answers"
          : "Too many bytes of requests are held at once; retry",
      data);
  return queue_json(conn, rq->busy_status, err, NULL);
}

/* libmicrohttpd reports what an operator should see (a thread it could not start, the
 * connection limit reached, a socket error), and also what a client does: it went away in
 * the middle of an answer, which is how SSE streams normally end, or of its request (debug
 * lines), or it sent a malformed request. A client can flood the log with the last, so each
 * kind of line is logged once a minute at most, with the count of those held back: a flood
 * of one kind never hides another. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt,
                                                          va_list ap) {
  server *s = cls;
  char line[MHD_LINE_MAX];
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  bool client_gone = strstr(line, "no longer available") || strstr(line, "Connection reset") ||
                     strstr(line, "closed by remote peer") || strstr(line, "closed by remote side");
  /* A connection closed on purpose (said already) is no "internal error". */
  bool told = closing_on_purpose;
  closing_on_purpose = false;
  if (client_gone || told) {
    tg_log(TG_LOG_DEBUG, "http: %s", line);
  } else {
    unsigned more = 0;
    if (mhd_line_may_log(s, fmt, line, &more))
      tg_log(TG_LOG_WARN, "http: %s (libmicrohttpd; %u more such lines held back since the "
                          "last; logged once a minute at most)", line, more);
  }
}

/* The path of a request target ("/mcp") in *path. One in absolute form
 * ("http://host:port/mcp"), which a server must take (RFC 9112 §3.2.2), names its host, which
 * then stands for Host's: *authority (a new string; NULL for a target in origin form).
 * TG_E_INVAL for an absolute target with no host or with user information (RFC 9110
 * §4.2.4). */
static int target_path(const char *url, const char **path, char **authority) {
  *authority = NULL;
  *path = url;
  if (strncasecmp(url, "http://", 7) != 0) return TG_OK;
  const char *start = url + 7, *end = start + strcspn(start, "/");
  if (end == start || *start == ':' || memchr(start, '@', (size_t)(end - start)))
    return TG_E_INVAL;
  if (!(*authority = strndup(start, (size_t)(end - start)))) return TG_E_NOMEM;
  *path = *end ? end : "/";
  return TG_OK;
}

/* Whether the body comes in a content coding (gzip, say): none is taken, "identity" (or an
 * empty value) being no coding, in any of the header's lines. */
static enum MHD_Result count_coding(void *arg, enum MHD_ValueKind kind, const char *name,
                                    const char *value) {
  (void)kind;
  if (strcasecmp(name, "Content-Encoding") == 0 && value && *value &&
      strcasecmp(value, "identity") != 0)
    ++*(unsigned *)arg;
  return MHD_YES;
}

static bool encoded(struct MHD_Connection *conn) {
  unsigned codings = 0;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_coding, &codings);
  return codings > 0;
}

/* What a request's headers decide, before any of its body is read: the route, the origin and
 * the caller. Queues the refusal (rq->answered) or fills rq->principal. */
static enum MHD_Result admit(server *s, struct MHD_Connection *conn, const char *target,
                             const char *method, const char *version, request *rq) {
  rq->answered = true;
  /* RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 (and would pass the Host check
   * against DNS rebinding below). */
  if (strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
      !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "Host is required");
  _cleanup_free_ char *authority = NULL;
  const char *url = NULL;
  int targeted = target_path(target, &url, &authority);
  if (targeted == TG_E_NOMEM) return MHD_NO;
  if (targeted < 0)
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "The request target names no host, or names a user");
  if (strcmp(url, "/healthz") == 0) /* libmicrohttpd sends no body to a HEAD */
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0
               ? respond(conn, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}", NULL, NULL)
               : respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "GET, HEAD");
  if (strcmp(url, "/mcp") != 0)
    return queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST,
                           "Not found: MCP is served at /mcp");
  singleton_count once = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_singleton, &once);
  /* A header 2026-07-28 validates fails as that revision's (-32020): on a POST, once its
   * body names the request's id, after every other check. The others fail as HTTP's, at
   * once. */
  const char *revision = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
  bool post = strcmp(method, "POST") == 0;
  for (size_t i = 0; i < N_SINGLETONS; i++) {
    if (once.seen[i] < 2) continue;
    bool mcp = validated_by_2026(singletons[i], revision);
    if (mcp && post) {
      if (!rq->repeated_mcp_header) rq->repeated_mcp_header = singletons[i];
      continue;
    }
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", singletons[i]);
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST,
                           mcp ? TG_RPC_HEADER_MISMATCH : TG_RPC_INVALID_REQUEST, why);
  }
  /* A body framed two ways may be read one way here and another by a proxy in front (RFC
   * 9112 §6.1). One said to go past twice the bound is refused before it is read: an answer
   * queued before the body is read closes the connection after it, and a client still
   * sending may lose the answer to the reset. One within it is read and dropped (see
   * on_request), so that its 413 arrives whole. */
  const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
  const char *coding = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
  if (length && coding)
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "Content-Length and Transfer-Encoding are given together");
  if (coding && strcasecmp(coding, "chunked") != 0)
    return queue_rpc_error(conn, MHD_HTTP_NOT_IMPLEMENTED, TG_RPC_INVALID_REQUEST,
                           "Transfer-Encoding other than chunked is not supported");
  if (length && strtoull(length, NULL, 10) > 2ull * TG_RPC_MAX_BODY)
    return refuse_too_large(s, conn, NULL, NULL);
  /* A DELETE's body means nothing (RFC 9110 §9.3.5); refused, it holds nothing, so a DELETE
   * need not count among its caller's requests (below). */
  if (strcmp(method, "DELETE") == 0 && (coding || (length && strtoull(length, NULL, 10) > 0)))
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "A DELETE takes no body");
  /* DNS rebinding: a page elsewhere must not reach a server on this machine. */
  _cleanup_free_ char *origin = NULL, *host = NULL;
  if (!header_value(conn, "Origin", &origin) || !header_value(conn, "Host", &host)) return MHD_NO;
  if (!origin_ok(s, origin) || (s->loopback && !host_ok(s, authority ? authority : host)))
    return queue_rpc_error(conn, MHD_HTTP_FORBIDDEN, TG_RPC_INVALID_REQUEST, "Forbidden origin or host");
  peer *p = peer_of(conn);
  caller who = authenticate(s, conn, p ? p->db : NULL, rq->principal,
                            rq->token_hash);
  if (who != CALLER_KNOWN) return refuse_caller(s, conn, who);
  rq->checked_ms = tg_monotonic_ms();
  bool full = false;
  /* A known caller has a peer: its token was checked on the peer's database. A DELETE is
   * not counted: holding nothing (it has no body), it frees what the caller holds, so a
   * caller at its bound can always end a session. */
  if (!s->cfg->no_auth && strcmp(method, "DELETE") != 0 &&
      !(p->answering = request_begin(s, rq->principal, false, &full)))
    return full ? queue_rpc_error(conn, MHD_HTTP_TOO_MANY_REQUESTS, TG_RPC_INVALID_REQUEST,
                                  "Too many requests of this caller are answered at once; "
                                  "end one (a stream) or wait")
                : MHD_NO;
  char *accept = NULL;
  if (!header_value(conn, "Accept", &accept)) return MHD_NO;
  tg_accept json = tg_http_accepts(accept, "application/json");
  tg_accept events = tg_http_accepts(accept, "text/event-stream");
  free(accept);
  rq->takes_events = events.quality > 0;
  rq->prefers_events = events.named && events.quality >= json.quality;
  /* A POST's answer may be JSON or an event stream, at the server's choice: a client must
   * take both. Its refusal waits for its body, whose request id it names. */
  if (strcmp(method, "POST") == 0 && (json.quality == 0 || events.quality == 0)) {
    rq->refused_media = "Accept must take application/json and text/event-stream";
    rq->refused_media_status = MHD_HTTP_NOT_ACCEPTABLE;
  } else if (strcmp(method, "POST") == 0 &&
             !tg_http_is_json(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type"))) {
    rq->refused_media = "Content-Type must be application/json";
    rq->refused_media_status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
  } else if (strcmp(method, "POST") == 0 && encoded(conn)) {
    rq->refused_media = "Content-Encoding is not supported: send the body as it is";
    rq->refused_media_status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE; /* RFC 9110 §15.5.16 */
  }
  rq->answered = false;
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
  server *s = cls;
  request *rq = *con_cls;
  if (!rq) {
    if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
    *con_cls = rq;
    atomic_fetch_add(&s->answering_now, 1);
    if (atomic_load(&s->quiescing)) {
      rq->answered = true;
      return refuse_while_stopping(conn);
    }
    return admit(s, conn, url, method, version, rq);
  }
  if (rq->answered) {
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size) {
    /* A body past the bound, or past the bounds on bodies held at once, is dropped as it
     * comes, scanned for the id its refusal names, and refused once it ends (libmicrohttpd
     * answers only then); one that goes on as long again past the bound (chunked: its
     * length unsaid) has its connection closed instead. */
    if (!rq->taker && !(rq->taker = share_get(s, rq->principal))) return MHD_NO;
    if (rq->past || rq->len + *upload_size > TG_RPC_MAX_BODY ||
        taking_past(s, rq->taker, *upload_size, &rq->busy_status)) {
      if (!rq->past) {
        if (!(rq->past = malloc(sizeof *rq->past))) return MHD_NO;
        tg_rpc_id_scan_init(rq->past);
        tg_rpc_id_scan_feed(rq->past, rq->body, rq->len);
        rq->dropped = rq->len;
        taking_count(s, rq->taker, rq->len, true);
        free(rq->body);
        rq->body = NULL;
        rq->len = 0;
      }
      tg_rpc_id_scan_feed(rq->past, upload_data, *upload_size);
      rq->dropped += *upload_size;
      *upload_size = 0;
      if (rq->dropped <= 2ull * TG_RPC_MAX_BODY) return MHD_YES;
      if (tg_log_may(&s->overlong_logged_ms))
        tg_log(TG_LOG_WARN, "http: closed a connection whose body went on past twice the bound "
                            "on a message's size (%u bytes; logged once a minute at most)",
               TG_RPC_MAX_BODY);
      closing_on_purpose = true;
      return MHD_NO;
    }
    char *grown = realloc(rq->body, rq->len + *upload_size + 1);
    if (!grown) return MHD_NO;
    memcpy(grown + rq->len, upload_data, *upload_size);
    rq->body = grown;
    rq->len += *upload_size;
    taking_count(s, rq->taker, *upload_size, false);
    rq->body[rq->len] = 0;
    *upload_size = 0;
    return MHD_YES;
  }
  /* The request is whole: it is answered now. */
  peer *p = peer_of(conn);
  if (p) atomic_store(&p->due_by, 0);
  tg_db *db = p ? p->db : NULL;
  if (tg_monotonic_ms() - rq->checked_ms > TOKEN_RECHECK_MS) {
    char principal[TG_UUID_LEN + 1];
    caller who = authenticate(s, conn, db, principal, rq->token_hash);
    if (who != CALLER_KNOWN) return refuse_caller(s, conn, who);
  }
  if (rq->past && rq->busy_status) return refuse_busy(s, conn, rq);
  if (rq->past) return refuse_too_large(s, conn, rq, rq->past);
  if (strcmp(method, "POST") == 0) {
    if (!db) return queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR, "No database");
    return handle_post(s, conn, db, rq->principal, rq);
  }
  /* A session's GET and DELETE name its revision, if they name one (2025-11-25: an
   * unsupported one is refused). One naming 2026-07-28 is that revision's traffic, which is
   * POST only, as a POST naming it is served statelessly, its session id ignored. */
  _cleanup_free_ char *revision = NULL;
  if (!header_value(conn, "MCP-Protocol-Version", &revision)) return MHD_NO;
  if (revision && strcmp(revision, TG_MCP_MODERN_VERSION) == 0)
    return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "POST");
  if (revision && !tg_mcp_legacy_supported(revision))
    return queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                           "Unsupported MCP-Protocol-Version");
  if (strcmp(method, "DELETE") == 0) return handle_delete(s, conn, db, rq);
  if (strcmp(method, "GET") == 0) return handle_get(s, conn, db, rq);
  return queue(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
  server *s = cls;
  set_due_by(conn, tg_monotonic_ms() + slow_limit_ms(s, 0)); /* for the next request */
  request *rq = *con_cls;
  if (!rq) return;
  peer *p = peer_of(conn);
  if (p) request_done_once(s, &p->answering);
  /* The message a large body was read as took many small blocks, which malloc keeps once
   * freed: a burst of them would hold hundreds of megabytes for good. */
  bool large = rq->len + rq->dropped >= TRIM_AFTER_BYTES;
  if (rq->taker) {
    taking_count(s, rq->taker, rq->len, true);
    share_put(s, rq->taker);
  }
  free(rq->body);
  free(rq->past);
  free(rq);
  *con_cls = NULL;
  atomic_fetch_sub(&s->answering_now, 1);
  if (large) malloc_trim(0);
}

/* Each connection has its own thread and its own database connection, and is known to the
 * sweeper (cut_slow_clients) until it closes, before its socket does. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  server *s = cls;
  peer *p = *socket_context;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    char *why = NULL;
    if (!(p = calloc(1, sizeof *p))) return; /* no context: its requests get a 503 */
    p->srv = s;
    pthread_mutex_lock(&s->peers_lock);
    if (s->n_spare_dbs) p->db = s->spare_dbs[--s->n_spare_dbs];
    pthread_mutex_unlock(&s->peers_lock);
    if (!p->db && tg_db_open(s->cfg->data_dir, &p->db, &why) < 0) {
      tg_log(TG_LOG_ERROR, "http: cannot open the database: %s", why ? why : "out of memory");
      free(why);
      p->db = NULL;
    }
    p->fd = connection_fd(conn);
    atomic_store(&p->due_by, tg_monotonic_ms() + slow_limit_ms(s, 0));
    pthread_mutex_lock(&s->peers_lock);
    if ((p->next = s->peers)) p->next->prev = p;
    s->peers = p;
    bool full = ++s->n_peers == TG_HTTP_MAX_CONNECTIONS;
    pthread_mutex_unlock(&s->peers_lock);
    if (full && tg_log_may(&s->full_logged_ms))
      tg_log(TG_LOG_WARN, "http: all %d connections are in use: new ones wait until one closes "
             "(logged once a minute at most)", TG_HTTP_MAX_CONNECTIONS);
    *socket_context = p;
  } else if (p) {
    pthread_mutex_lock(&s->peers_lock);
    if (p->prev) p->prev->next = p->next;
    else s->peers = p->next;
    if (p->next) p->next->prev = p->prev;
    s->n_peers--;
    if (p->db && tg_db_at_rest(p->db) && s->n_spare_dbs < SPARE_DBS) {
      s->spare_dbs[s->n_spare_dbs++] = p->db;
      p->db = NULL;
    }
    pthread_mutex_unlock(&s->peers_lock);
    tg_db_close(p->db);
    free(p);
    *socket_context = NULL;
  }
}

/* listen as HOST:PORT (HOST in brackets for IPv6; PORT 0 lets the system pick): its address
 * and whether it is a loopback one. TG_E_INVAL, logged with the reason, when it is not one. */
static int parse_listen(const char *listen, struct sockaddr_storage *addr, bool *loopback) {
  const char *colon = strrchr(listen, ':');
  if (!colon || colon == listen || strlen(listen) > 300) {
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: give HOST:PORT", listen);
    return TG_E_INVAL;
  }
  /* getaddrinfo would take 99999 as 99999 mod 65536: the port is read here. */
  char *end = NULL;
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (!isdigit((unsigned char)colon[1]) || *end || errno || port > 65535) {
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: the port must be a number from 0 to "
           "65535", listen);
    return TG_E_INVAL;
  }
  char host[301];
  size_t hlen = (size_t)(colon - listen);
  if (listen[0] == '[' && listen[hlen - 1] == ']') snprintf(host, sizeof host, "%.*s", (int)hlen - 2, listen + 1);
  else snprintf(host, sizeof host, "%.*s", (int)hlen, listen);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_PASSIVE}, *res = NULL;
  int e = getaddrinfo(host, colon + 1, &hints, &res);
  if (e != 0 || !res) {
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: %s", listen,
           e ? gai_strerror(e) : "no address");
    return TG_E_INVAL;
  }
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  if (res->ai_family == AF_INET)
    *loopback = (ntohl(((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  else
    *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr);
  freeaddrinfo(res);
  return TG_OK;
}

struct tg_http {
  server s;
  struct MHD_Daemon *daemon;
  int listen_fd; /* the listening socket until the daemon has its copy, and once a stopping
                  * daemon gave that back (MHD_quiesce_daemon); else -1 */
};

/* A socket bound to addr and listening; when addr's port is 0, the system picks it and addr
 * says which. -1 (logged) when there is none. */
static int listen_on(const char *listen_arg, struct sockaddr_storage *addr) {
  socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in);
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int on = 1;
  /* [::] means IPv6 alone, as libmicrohttpd's own sockets do: 0.0.0.0 is a listener apart. */
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0 ||
      (addr->ss_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) < 0) ||
      bind(fd, (struct sockaddr *)addr, len) < 0 || listen(fd, SOMAXCONN) < 0 ||
      getsockname(fd, (struct sockaddr *)addr, &len) < 0) {
    int why = errno;
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s%s", listen_arg, strerror(why),
           why == EADDRINUSE ? " (another server has it: give another with --listen HOST:PORT)"
                             : "");
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static unsigned port_of(const struct sockaddr_storage *addr) {
  return ntohs(addr->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)addr)->sin6_port
                                           : ((const struct sockaddr_in *)addr)->sin_port);
}

/* Whether descriptors a and b are open on one file: b was not closed (and its number taken
 * again by another) since it was made a copy of a. */
static bool same_file(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

static bool wildcard(const struct sockaddr_storage *addr) {
  return addr->ss_family == AF_INET6
             ? IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr)
             : ((const struct sockaddr_in *)addr)->sin_addr.s_addr == htonl(INADDR_ANY);
}

/* The address addr as numbers, an IPv6 one in brackets, into out. */
static void numeric_host(const struct sockaddr_storage *addr, char out[INET6_ADDRSTRLEN + 3]) {
  char text[INET6_ADDRSTRLEN] = "";
  bool v6 = addr->ss_family == AF_INET6;
  inet_ntop(addr->ss_family,
            v6 ? (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr
               : (const void *)&((const struct sockaddr_in *)addr)->sin_addr,
            text, sizeof text);
  snprintf(out, INET6_ADDRSTRLEN + 3, v6 ? "[%s]" : "%s", text);
}

/* How people reach this server, for links: cfg's public_url, else http://HOST:PORT with the
 * host of --listen (this machine's name for a wildcard address; its address as numbers for a
 * loopback one named otherwise than usual, the only other name its Host check takes) and the
 * port it listens on, both from addr, the address it listens on. */
static char *own_url(const server *s, const struct sockaddr_storage *addr) {
  const tg_http_config *cfg = s->cfg;
  if (cfg->public_url && *cfg->public_url) return strdup(cfg->public_url);
  size_t hlen = (size_t)(strrchr(cfg->listen, ':') - cfg->listen);
  char host[256];
  if (wildcard(addr)) {
    if (gethostname(host, sizeof host) < 0) return NULL;
    host[sizeof host - 1] = '\0';
  } else if (s->loopback && !loopback_host(cfg->listen, hlen)) {
    snprintf(host, sizeof host, "%s", s->own_host);
  } else {
    snprintf(host, sizeof host, "%.*s", (int)hlen, cfg->listen);
  }
  char *url = NULL;
  return asprintf(&url, "http://%s:%u", host, port_of(addr)) < 0 ? NULL : url;
}

/* Leaves a request's path as sent, so that it is compared byte for byte ("/mcp",
 * "/healthz"): no percent-encoding is another name for them, and an encoded NUL cannot end
 * one early ("/mcp%00/x"). No query argument is read. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *text) {
  (void)cls;
  (void)conn;
  return strlen(text);
}

int tg_http_start(const tg_http_config *cfg, tg_http **ret, unsigned *ret_port) {
  struct sockaddr_storage addr = {0};
  bool loopback = false;
  if (parse_listen(cfg->listen, &addr, &loopback) < 0) return TG_E_INVAL;
  if (cfg->no_auth && !loopback) {
    tg_log(TG_LOG_ERROR, "serve: --no-auth is only allowed on a loopback address");
    return TG_E_INVAL;
  }
  int fd = listen_on(cfg->listen, &addr);
  if (fd < 0) return TG_E_IO;
  tg_http *h = calloc(1, sizeof *h);
  if (!h) {
    close(fd);
    return TG_E_NOMEM;
  }
  h->listen_fd = fd;
  h->s.cfg = cfg;
  h->s.mcp = cfg->server;
  h->s.mcp.list_changes = true;
  h->s.loopback = loopback;
  if (loopback) numeric_host(&addr, h->s.own_host);
  h->s.held_max = cfg->max_held_bytes ? cfg->max_held_bytes : TG_HTTP_MAX_HELD_BYTES;
  h->s.taking_max = cfg->max_taking_bytes ? cfg->max_taking_bytes : TG_HTTP_MAX_TAKING_BYTES;
  h->s.replay_keep_ms = cfg->replay_keep_ms ? cfg->replay_keep_ms : TG_HTTP_REPLAY_KEEP_MS;
  if (tg_process_tag(h->s.holder) < 0) {
    *h->s.holder = '\0';
    tg_log(TG_LOG_WARN, "serve: /proc does not tell who this process is: if it is killed, the "
           "runs of agents' sessions stay running until an operator ends them (toolgate runs "
           "end)");
  }
  pthread_mutex_init(&h->s.lock, NULL);
  pthread_mutex_init(&h->s.shares_lock, NULL);
  pthread_mutex_init(&h->s.peers_lock, NULL);
  pthread_mutex_init(&h->s.mhd_lines_lock, NULL);
  pthread_cond_init(&h->s.answered, NULL);
  pthread_cond_init(&h->s.queued, NULL);
  pthread_cond_init(&h->s.sweep_stop, NULL);
  if (!(h->s.public_url = own_url(&h->s, &addr)) || !(h->s.token_uses = tg_token_uses_new())) {
    tg_http_stop(h);
    return TG_E_NOMEM;
  }
  tg_env base = server_env(&h->s, NULL);
  int prepared = tg_mcp_server_prepare(&h->s.mcp, &base); /* logs what it cannot read */
  if (prepared < 0) {
    tg_http_stop(h);
    return prepared;
  }
  unsigned threads = cfg->threads ? cfg->threads : 1;
  h->s.n_busy = threads;
  h->s.busy_max = threads > 1 ? threads - 1 : 1;
  if (!(h->s.pool = calloc(threads, sizeof *h->s.pool)) ||
      !(h->s.busy = calloc(threads, sizeof *h->s.busy))) {
    tg_http_stop(h);
    return TG_E_NOMEM;
  }
  while (h->s.n_pool < threads &&
         pthread_create(&h->s.pool[h->s.n_pool], NULL, pool_main, &h->s) == 0)
    h->s.n_pool++;
  if (h->s.n_pool > 0)
    h->s.sweeper_started = pthread_create(&h->s.sweeper, NULL, sweeper_main, &h->s) == 0;
  if (!h->s.sweeper_started) {
    tg_log(TG_LOG_ERROR, "serve: cannot start worker threads: %s", strerror(errno));
    tg_http_stop(h);
    return TG_E_IO;
  }
  /* ITC: a stopping server stops listening first (MHD_quiesce_daemon). */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                   MHD_USE_ERROR_LOG | (addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  /* libmicrohttpd closes the socket it is given when it stops, and when it fails to start,
   * on some paths only: it gets a copy, so that ours is closed once, here. */
  int given = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (given < 0) {
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s", cfg->listen, strerror(errno));
    tg_http_stop(h);
    return TG_E_IO;
  }
  h->daemon = MHD_start_daemon(
      /* The logger first: messages about the options that follow go through it too. */
      flags, 0, NULL, NULL, on_request, &h->s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, &h->s,
      MHD_OPTION_LISTEN_SOCKET, given, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)TG_HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      /* On loopback every client has the same address: a share would only lower the limit. */
      h->s.loopback ? 0u : (unsigned)TG_HTTP_MAX_CONNECTIONS_PER_ADDRESS,
      MHD_OPTION_CONNECTION_TIMEOUT,
      idle_timeout_s(&h->s),
      MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, &h->s, MHD_OPTION_NOTIFY_CONNECTION,
      on_connection, &h->s, MHD_OPTION_END);
  int why = errno;
  if (!h->daemon && same_file(fd, given)) close(given); /* still open: not closed by it */
  close(fd);
  h->listen_fd = -1;
  if (!h->daemon) {
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s", cfg->listen, strerror(why));
    tg_http_stop(h);
    return TG_E_IO;
  }
  *ret_port = port_of(&addr);
  *ret = h;
  return TG_OK;
}

int tg_http_add_connection(tg_http *h, int fd) {
  struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  return MHD_add_connection(h->daemon, fd, (struct sockaddr *)&from, sizeof from) == MHD_YES
             ? TG_OK
             : TG_E_IO;
}

void tg_http_load(tg_http *h, unsigned *answering, unsigned *queued) {
  *answering = atomic_load(&h->s.answering_now);
  pthread_mutex_lock(&h->s.lock);
  *queued = queued_locked(&h->s);
  pthread_mutex_unlock(&h->s.lock);
}

/* The requests being answered, and the calls on the pool (queued, or running on after their
 * connection ended: a session's call whose client left its stream to resume it later). */
static unsigned work_left(server *s) {
  unsigned n = atomic_load(&s->answering_now);
  pthread_mutex_lock(&s->lock);
  n += queued_locked(s);
  for (unsigned i = 0; i < s->n_busy; i++) n += s->busy[i][0] != '\0';
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* Waits up to ms for the work left to end (new requests are refused); how much has not. */
static unsigned await_work(server *s, int64_t ms) {
  int64_t deadline = tg_monotonic_ms() + ms;
  unsigned left;
  while ((left = work_left(s)) > 0 && tg_monotonic_ms() < deadline) usleep(20 * 1000);
  return left;
}

/* The work left, and the tasks at work, have the grace to end; past it, every request
 * counts as cancelled: a call still running that learns it fails before it commits, one not
 * begun is answered that the server is stopping; they have a moment to end so. The tasks are
 * cancelled as the MCP server is done. */
static void end_work(server *s) {
  long long grace = s->cfg->stop_grace_ms ? s->cfg->stop_grace_ms : TG_HTTP_STOP_GRACE_MS;
  int64_t deadline = tg_monotonic_ms() + grace;
  tg_mcp_tasks_stopping(s->mcp.tasks);
  unsigned left = await_work(s, grace);
  if (!tg_mcp_tasks_await(s->mcp.tasks, deadline) && !left) return;
  atomic_store(&s->past_grace, true);
  tg_log(TG_LOG_WARN, "serve: requests, calls or tasks still going %lld ms after the stop "
         "began are cancelled", grace);
  if (await_work(s, DRAIN_MS))
    tg_log(TG_LOG_WARN, "serve: some had not ended a moment later: their connections are closed");
}

/* The runs of the sessions the stop ended, once nothing of them runs. One the database does
 * not end (logged) is left running, to the next server's start: it ends it as failed. */
static void end_runs_left(server *s) {
  tg_db *db = NULL;
  if (s->runs_to_end && thread_db(s, &db)) end_session_runs(s, db);
  tg_db_close(db);
  for (session_run *run = s->runs_to_end, *next; run; run = next) {
    next = run->next;
    tg_log(TG_LOG_WARN, "http: the run %s of a session stays running until the next server "
           "starts", run->id);
    free(run);
  }
}

void tg_http_stop(tg_http *h) {
  if (!h) return;
  server *s = &h->s;
  /* No new connection or request; then ending the listen streams and the sessions releases
   * the tools waiting on their clients and ends the open streams, and the requests being
   * answered (a call that may have committed) have a while to be answered. */
  atomic_store(&s->quiescing, true);
  if (h->daemon) h->listen_fd = MHD_quiesce_daemon(h->daemon);
  /* Kept open until the daemon stopped (its threads may still use it), but refusing: a
   * client trying to connect learns at once that this server is gone. */
  if (h->listen_fd >= 0) shutdown(h->listen_fd, SHUT_RDWR);
  listeners_end(s);
  pthread_mutex_lock(&s->lock);
  while (s->sessions) session_unlink_locked(s, s->sessions);
  pthread_mutex_unlock(&s->lock);
  if (h->daemon) {
    end_work(s);
    MHD_stop_daemon(h->daemon);
  }
  /* Then the sessions opened meanwhile; then the pool drains its queue and ends. */
  pthread_mutex_lock(&s->lock);
  while (s->sessions) session_unlink_locked(s, s->sessions);
  s->stopping = true;
  pthread_cond_broadcast(&s->queued);
  pthread_cond_broadcast(&s->sweep_stop);
  pthread_mutex_unlock(&s->lock);
  for (unsigned i = 0; i < s->n_pool; i++) pthread_join(s->pool[i], NULL);
  if (s->sweeper_started) pthread_join(s->sweeper, NULL);
  end_runs_left(s);
  tell_held_back_mhd_lines(s, true);
  while (s->n_spare_dbs) tg_db_close(s->spare_dbs[--s->n_spare_dbs]);
  free(s->pool);
  free(s->busy);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->shares_lock);
  pthread_mutex_destroy(&s->peers_lock);
  pthread_mutex_destroy(&s->mhd_lines_lock);
  pthread_cond_destroy(&s->answered);
  pthread_cond_destroy(&s->queued);
  pthread_cond_destroy(&s->sweep_stop);
  tg_mcp_server_done(&s->mcp);
  free(s->public_url);
  tg_token_uses_free(s->token_uses);
  if (h->listen_fd >= 0) close(h->listen_fd);
  free(h);
}

int tg_http_serve(const tg_http_config *cfg) {
  /* Threads inherit this mask, so only sigwait below sees the stop signals. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  tg_http *h = NULL;
  unsigned port = 0;
  int r = tg_http_start(cfg, &h, &port);
  if (r < 0) return r;
  if (cfg->no_auth)
    tg_log(TG_LOG_WARN, "serve: AUTHENTICATION IS OFF: every request acts as %s (principal %s)",
           cfg->no_auth_who, cfg->no_auth_principal);
  tg_log(TG_LOG_INFO, "serve: listening on %.*s:%u", (int)(strrchr(cfg->listen, ':') - cfg->listen),
         cfg->listen, port);
  int sig = 0;
  sigwait(&stop, &sig);
  tg_log(TG_LOG_INFO, "serve: stopping on signal %d", sig);
  tg_http_stop(h);
  return TG_OK;
}

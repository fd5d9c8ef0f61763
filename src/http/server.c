#define _GNU_SOURCE
#include "http/server.h"
#include "http/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"
#include "util/stop_signals.h"

/* A request whose body took longer than this to arrive has its token checked again once it
 * has: one revoked meanwhile is refused, as running calls are cancelled (end_revoked). */
#define TOKEN_RECHECK_MS 1000

/* What a call on one of this server's threads runs against. */
tg_env http_server_env(const server *s, tg_db *db) {
  return (tg_env){.registry = s->cfg->registry, .db = db, .data_dir = s->cfg->data_dir,
                  .public_url = s->public_url, .rate_limit = s->cfg->rate_limit};
}

/* A request that came after the server began to stop: 503, and the connection closes. */
static enum MHD_Result refuse_while_stopping(struct MHD_Connection *conn) {
  return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                              "The server is stopping");
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
    atomic_store(&s->last_request_ms, tg_monotonic_ms());
    if (atomic_load(&s->quiescing)) {
      rq->answered = true;
      return refuse_while_stopping(conn);
    }
    return http_admit(s, conn, url, method, version, rq);
  }
  if (rq->answered) {
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size) return http_body_take(s, conn, rq, upload_data, upload_size);
  /* The request is whole: it is answered now. */
  peer *p = http_peer_of(conn);
  if (p) atomic_store(&p->due_by, 0);
  tg_db *db = http_peer_db(p);
  if (tg_monotonic_ms() - rq->checked_ms > TOKEN_RECHECK_MS) {
    char principal[TG_UUID_LEN + 1];
    caller who = http_authenticate(s, conn, db, principal, rq->token_hash);
    if (who != CALLER_KNOWN) return http_refuse_caller(s, conn, who);
  }
  if (rq->past && rq->busy_status) return http_refuse_busy(s, conn, rq, rq->past);
  if (rq->past) return http_refuse_too_large(s, conn, rq, rq->past);
  if (strcmp(method, "POST") == 0) {
    if (!db)
      return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                                  "No database");
    return http_handle_post(s, conn, db, rq);
  }
  /* A session's GET and DELETE name its revision, if they name one (2025-11-25: an
   * unsupported one is refused). One naming 2026-07-28 is that revision's traffic, which is
   * POST only, as a POST naming it is served statelessly, its session id ignored. */
  _cleanup_free_ char *revision = NULL;
  if (!http_header_value(conn, "MCP-Protocol-Version", &revision)) return MHD_NO;
  if (revision && strcmp(revision, TG_MCP_MODERN_VERSION) == 0)
    return http_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "POST");
  if (revision && !tg_mcp_legacy_supported(revision))
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Unsupported MCP-Protocol-Version");
  if (strcmp(method, "DELETE") == 0) return http_handle_delete(s, conn, db, rq);
  if (strcmp(method, "GET") == 0) return http_handle_get(s, conn, db, rq);
  return http_queue(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
  server *s = cls;
  http_set_due_by(conn, tg_monotonic_ms() + http_slow_limit_ms(s, 0)); /* for the next request */
  request *rq = *con_cls;
  if (!rq) return;
  peer *p = http_peer_of(conn);
  if (p) http_request_done_once(s, &p->answering);
  /* The message a large body was read as took many small blocks, which malloc keeps once
   * freed: a burst of them would hold hundreds of megabytes for good. */
  bool large = rq->len + rq->dropped >= HTTP_TRIM_AFTER_BYTES;
  if (rq->taker) {
    http_body_let_go(s, rq);
    http_share_put(s, rq->taker);
  }
  free(rq->body);
  free(rq->past);
  free(rq);
  *con_cls = NULL;
  atomic_fetch_sub(&s->answering_now, 1);
  atomic_store(&s->last_request_ms, tg_monotonic_ms());
  if (large) malloc_trim(0);
}

/* Each connection has its own thread and its own database connection (http_peer_db), and is
 * known to the sweeper (cut_slow_clients) until it closes, before its socket does. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  server *s = cls;
  peer *p = *socket_context;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    if (!(p = calloc(1, sizeof *p))) return; /* no context: its requests get a 503 */
    p->srv = s;
    p->fd = http_connection_fd(conn);
    atomic_store(&p->due_by, tg_monotonic_ms() + http_slow_limit_ms(s, 0));
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

struct tg_http {
  server s;
  struct MHD_Daemon *daemon;
  int listen_fd; /* the listening socket until the daemon has its copy, and once a stopping
                  * daemon gave that back (MHD_quiesce_daemon); else -1 */
};

/* Leaves a request's path as sent, so that it is compared byte for byte ("/mcp",
 * "/healthz"): no percent-encoding is another name for them, and an encoded NUL cannot end
 * one early ("/mcp%00/x"). No query argument is read. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *text) {
  (void)cls;
  (void)conn;
  return strlen(text);
}

/* cfg's listen address, and whether it is on loopback (tg_http_check_listen). */
static int listen_address(const tg_http_config *cfg, struct sockaddr_storage *addr,
                          bool *loopback) {
  int r = http_parse_listen(cfg->listen, addr, loopback);
  if (r < 0) return r;
  if (cfg->no_auth && !*loopback) {
    tg_log(TG_LOG_ERROR, "serve: --no-auth is only allowed on a loopback address");
    return TG_E_INVAL;
  }
  return TG_OK;
}

int tg_http_check_listen(const tg_http_config *cfg) {
  struct sockaddr_storage addr;
  bool loopback;
  return listen_address(cfg, &addr, &loopback);
}

/* Starts s's pool of threads (threads of them) and its sweeper: TG_OK, or the failure
 * (logged). What started is stopped by tg_http_stop. */
static int start_workers(server *s, unsigned threads) {
  s->n_busy = threads;
  s->busy_max = threads > 1 ? threads - 1 : 1;
  if (!(s->pool = calloc(threads, sizeof *s->pool)) ||
      !(s->busy = calloc(threads, sizeof *s->busy)))
    return TG_E_NOMEM;
  while (s->n_pool < threads && pthread_create(&s->pool[s->n_pool], NULL, http_pool_main, s) == 0)
    s->n_pool++;
  if (s->n_pool > 0)
    s->sweeper_started = pthread_create(&s->sweeper, NULL, http_sweeper_main, s) == 0;
  if (!s->sweeper_started) {
    tg_log(TG_LOG_ERROR, "serve: cannot start worker threads: %s", strerror(errno));
    return TG_E_IO;
  }
  return TG_OK;
}

/* Starts h's daemon, listening on fd (bound to addr), which stays ours: TG_OK, or TG_E_IO
 * (logged). */
static int start_daemon(tg_http *h, const struct sockaddr_storage *addr, int fd) {
  const char *listen = h->s.cfg->listen;
  /* ITC: a stopping server stops listening first (MHD_quiesce_daemon). */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                   MHD_USE_ERROR_LOG | (addr->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  /* libmicrohttpd closes the socket it is given when it stops, and when it fails to start,
   * on some paths only: it gets a copy, so that ours is closed once, by our caller. */
  int given = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (given < 0) {
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s", listen, strerror(errno));
    return TG_E_IO;
  }
  h->daemon = MHD_start_daemon(
      /* The logger first: messages about the options that follow go through it too. */
      flags, 0, NULL, NULL, on_request, &h->s, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, &h->s,
      MHD_OPTION_LISTEN_SOCKET, given, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)TG_HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      /* On loopback every client has the same address: a share would only lower the limit. */
      h->s.loopback ? 0u : (unsigned)TG_HTTP_MAX_CONNECTIONS_PER_ADDRESS,
      MHD_OPTION_CONNECTION_TIMEOUT, http_idle_timeout_s(&h->s), MHD_OPTION_UNESCAPE_CALLBACK,
      keep_escaped, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &h->s,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, &h->s, MHD_OPTION_END);
  int why = errno;
  if (h->daemon) return TG_OK;
  if (http_same_file(fd, given)) close(given); /* still open: not closed by it */
  tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s", listen, strerror(why));
  return TG_E_IO;
}

int tg_http_start(const tg_http_config *cfg, tg_http **ret, unsigned *ret_port) {
  struct sockaddr_storage addr = {0};
  bool loopback = false;
  int r = listen_address(cfg, &addr, &loopback);
  if (r < 0) return r;
  int fd = http_listen_on(cfg->listen, &addr);
  if (fd < 0) return TG_E_IO;
  tg_http *h = calloc(1, sizeof *h);
  if (!h) {
    close(fd);
    return TG_E_NOMEM;
  }
  h->listen_fd = fd;
  h->s.cfg = cfg;
  h->s.mcp = tg_mcp_server_copy(&cfg->server);
  h->s.mcp.list_changes = true;
  h->s.loopback = loopback;
  if (loopback) http_numeric_host(&addr, h->s.own_host);
  h->s.held_max = cfg->max_held_bytes ? cfg->max_held_bytes : TG_HTTP_MAX_HELD_BYTES;
  h->s.taking_max = cfg->max_taking_bytes ? cfg->max_taking_bytes : TG_HTTP_MAX_TAKING_BYTES;
  h->s.replay_keep_ms = cfg->replay_keep_ms ? cfg->replay_keep_ms : TG_HTTP_REPLAY_KEEP_MS;
  h->s.keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : TG_HTTP_KEEPALIVE_MS;
  tg_process_tag_of_holder(h->s.holder, "serve");
  pthread_mutex_init(&h->s.lock, NULL);
  pthread_mutex_init(&h->s.shares_lock, NULL);
  pthread_mutex_init(&h->s.peers_lock, NULL);
  pthread_mutex_init(&h->s.mhd_lines_lock, NULL);
  pthread_cond_init(&h->s.queued, NULL);
  pthread_cond_init(&h->s.sweep_stop, NULL);
  r = http_own_url(&h->s, &addr, &h->s.public_url);
  if (r == TG_OK && !(h->s.token_uses = tg_token_uses_new())) r = TG_E_NOMEM;
  tg_env base = http_server_env(&h->s, NULL);
  if (r == TG_OK) r = tg_mcp_server_prepare(&h->s.mcp, &base); /* logs what it cannot read */
  if (r == TG_OK) r = start_workers(&h->s, cfg->threads ? cfg->threads : 1);
  if (r == TG_OK) r = start_daemon(h, &addr, fd);
  close(fd);
  h->listen_fd = -1;
  if (r < 0) {
    tg_http_stop(h);
    return r;
  }
  *ret_port = http_port_of(&addr);
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
  *queued = http_queued_locked(&h->s);
  pthread_mutex_unlock(&h->s.lock);
}

void tg_http_spare_dbs(tg_http *h, unsigned *kept, unsigned *closed) {
  pthread_mutex_lock(&h->s.peers_lock);
  *kept = h->s.n_spare_dbs;
  *closed = h->s.spare_dbs_closed;
  pthread_mutex_unlock(&h->s.peers_lock);
}

/* The requests being answered, and the calls on the pool (queued, or running on after their
 * connection ended: a session's call whose client left its stream to resume it later). */
static unsigned work_left(server *s) {
  unsigned n = atomic_load(&s->answering_now);
  pthread_mutex_lock(&s->lock);
  n += http_queued_locked(s);
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

/* What is left to write once nothing can call any more: the count of the last calls refused
 * for their rate, and the runs of the sessions the stop ended. A run the database does not
 * end (logged) is left running, to the next server's start: it ends it as failed. */
static void write_what_is_left(server *s) {
  tg_db *db = NULL;
  if ((s->runs_to_end || s->cfg->rate_limit) && http_thread_db(s, &db)) {
    if (s->cfg->rate_limit) tg_call_write_rate_refusals(s->cfg->rate_limit, db, true);
    if (s->runs_to_end) http_end_session_runs(s, db);
  }
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
  http_listeners_end(s);
  pthread_mutex_lock(&s->lock);
  while (s->sessions) http_session_unlink_locked(s, s->sessions);
  pthread_mutex_unlock(&s->lock);
  if (h->daemon) {
    end_work(s);
    MHD_stop_daemon(h->daemon);
  }
  /* Then the sessions opened meanwhile; then the pool drains its queue and ends. */
  pthread_mutex_lock(&s->lock);
  while (s->sessions) http_session_unlink_locked(s, s->sessions);
  s->stopping = true;
  pthread_cond_broadcast(&s->queued);
  pthread_cond_broadcast(&s->sweep_stop);
  pthread_mutex_unlock(&s->lock);
  for (unsigned i = 0; i < s->n_pool; i++) pthread_join(s->pool[i], NULL);
  if (s->sweeper_started) pthread_join(s->sweeper, NULL);
  write_what_is_left(s);
  http_tell_held_back_mhd_lines(s, true);
  while (s->n_spare_dbs) tg_db_close(s->spare_dbs[--s->n_spare_dbs]);
  free(s->pool);
  free(s->busy);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->shares_lock);
  pthread_mutex_destroy(&s->peers_lock);
  pthread_mutex_destroy(&s->mhd_lines_lock);
  pthread_cond_destroy(&s->queued);
  pthread_cond_destroy(&s->sweep_stop);
  tg_mcp_server_done(&s->mcp);
  free(s->public_url);
  tg_token_uses_free(s->token_uses);
  if (h->listen_fd >= 0) close(h->listen_fd);
  free(h);
}

int tg_http_serve(const tg_http_config *cfg) {
  /* Threads inherit this mask, so only sigwait below sees the stop signals. SIGHUP too: the
   * terminal it was started from closing stops it with the grace of a stop, not at once. */
  sigset_t stop;
  tg_stop_signals(&stop);
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
  tg_rate_limit_tell(cfg->rate_limit, "serve");
  int sig = 0;
  sigwait(&stop, &sig);
  tg_log(TG_LOG_INFO, "serve: stopping on signal %d", sig);
  tg_http_stop(h);
  return TG_OK;
}

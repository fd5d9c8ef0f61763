/* One request's worker: its context for the MCP server (sending, asking the client,
 * cancellation) and the pool of threads that runs tool calls. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/status.h"

/* The close hook of a stateless call's stream: closing it is the call's cancellation. */
void http_cancel_call(void *arg) {
  stream *st = arg;
  tg_mcp_inflight_cancel(st->inflight, st->call_id);
}

/* Whether a call was cancelled as its token was revoked, as its session (x) or its stream
 * (st, a stateless call's) says; false with neither. */
bool http_revoked_call(server *s, session *x, stream *st) {
  if (!x && !st) return false;
  pthread_mutex_t *lock = x ? &s->lock : &st->lock;
  pthread_mutex_lock(lock);
  bool revoked = x ? x->revoked : st->revoked;
  pthread_mutex_unlock(lock);
  return revoked;
}

/* A stateless call was cancelled (its client left, or its token was revoked): waiting in line
 * for a pool thread, it leaves the line at once. (It asks its client nothing: only a session's
 * calls do.) */
static void stateless_cancellation_heard(void *arg) { http_drop_cancelled_in_line(arg); }

/* Makes st, a stateless call's stream, carry the cancellation of the call with id (see
 * http_cancel_call), from now on. false without memory (st's release frees what was made). */
bool http_cancellable_alone(stream *st, json_t *id) {
  if (tg_mcp_inflight_new(stateless_cancellation_heard, st->srv, &st->inflight) < 0 ||
      tg_mcp_inflight_begin(st->inflight, id) < 0)
    return false;
  st->call_id = json_deep_copy(id); /* see http_stream_finish */
  return st->call_id != NULL;
}

int http_worker_send(void *self, json_t *msg) {
  worker *w = self;
  /* On a session of a revision whose clients resume streams, every call stream begins with
   * its priming event: those on the pool as they begin, the others at their first event. */
  if (w->sess && http_resumes_streams(w->scratch.version) && http_prime_first(w->st) < 0) {
    json_decref(msg);
    return TG_E_NOMEM;
  }
  return http_stream_event(w->st, msg);
}

static const char *run_of_session(void *x, tg_db *db) {
  return http_session_run(((session *)x)->srv, db, x);
}

/* Where req's calls go: the run its Toolgate-Run header names, else its session's, opened at
 * the session's first call; without either, each call is a run of its own. */
void http_request_run(const worker *w, tg_mcp_request *req) {
  if (w->header_copies[3]) {
    req->run_id = w->header_copies[3];
  } else if (w->sess) {
    req->session_run = run_of_session;
    req->session_run_arg = w->sess;
  }
}

/* A call asks for its stream to be closed before its result (SEP-1699 polling): the client
 * resumes it with Last-Event-ID. Only a session's streams can be resumed, by clients of the
 * revisions that expect it; elsewhere the result goes out as usual. */
static int worker_close_stream(void *self) {
  worker *w = self;
  if (w->sess && http_resumes_streams(w->scratch.version)) http_stream_poll(w->st);
  return TG_OK;
}

/* The session's state as it stands, not the copy the call took as it came (the client's
 * notifications/initialized may have come since). */
static bool worker_initialized(void *self) {
  worker *w = self;
  pthread_mutex_lock(&w->srv->lock);
  bool initialized = w->sess->state.initialized;
  pthread_mutex_unlock(&w->srv->lock);
  return initialized;
}

/* Whether the call's session ended: its client can answer no more. */
static bool session_dead_locked(void *self) {
  worker *w = self;
  return w->sess->dead;
}

static int send_on_stream(void *self, json_t *msg) {
  worker *w = self;
  return http_stream_event(w->st, msg);
}

/* Sends a request on the call's stream and waits for the client to POST the response, as
 * tg_mcp_ask does. */
static int worker_ask(void *self, json_t *ask, json_t **ret) {
  worker *w = self;
  tg_mcp_asker asker = {.self = w, .send = send_on_stream, .gone_locked = session_dead_locked,
                        .inflight = w->inflight, .call_id = w->msg.id,
                        .timeout_ms = tg_mcp_ask_timeout_ms(&w->srv->mcp)};
  return tg_mcp_ask(&w->sess->questions, &asker, ask, ret);
}

/* A posted body that could not be decoded or was too large (refused with refusal; scan: its
 * text scanned) that meant to answer a question of the session it names: that question gets
 * an error for it, so that its call fails at once instead of waiting out its time. Not one
 * sent as 2026-07-28 traffic, whose session id is ignored, as a readable answer's is, nor
 * one refused for its headers (its media, a repeated header), as a readable answer is. */
void http_answer_unreadable(server *s, struct MHD_Connection *conn, const request *rq,
                            const tg_rpc_id_scan *scan, const json_t *refusal) {
  if (rq->refused_media || rq->repeated_header) return;
  _cleanup_json_ json_t *id = tg_rpc_response_id(scan);
  _cleanup_free_ char *sid = NULL, *revision = NULL;
  if (!id || !http_session_id(conn, &sid) ||
      !http_header_value(conn, "MCP-Protocol-Version", &revision) ||
      (revision && strcmp(revision, TG_MCP_MODERN_VERSION) == 0))
    return;
  session *x = sid ? http_session_find(s, sid, rq->principal, rq->token_hash) : NULL;
  if (!x) return;
  tg_mcp_answer_unreadable(&x->questions, id, refusal);
  http_session_put(s, x);
}

/* Takes a response out of a batch (tg_rpc_batch_take) to the tool waiting for it. One that no
 * tool waits for is dropped: a batch has no answer of its own to refuse it with. */
int http_deliver_batched_answer(void *arg, tg_rpc_msg *element) {
  batch_target *t = arg;
  if (element->kind != TG_RPC_RESPONSE) return 0;
  int r = tg_mcp_answer(&t->sess->questions, element);
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
bool http_state_load(server *s, session *x, tg_mcp_session *out) {
  pthread_mutex_lock(&s->lock);
  *out = x->state;
  /* A copy of its own, as requests of the session free theirs on their threads (see
   * tg_mcp_answer). */
  out->client_capabilities = json_deep_copy(x->state.client_capabilities);
  pthread_mutex_unlock(&s->lock);
  return out->client_capabilities || !x->state.client_capabilities;
}

void http_state_store(server *s, session *x, tg_mcp_session *in, bool opened) {
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

/* Lists w, a stateless call of a token, for end_revoked (http_worker_free takes it off). */
void http_list_token_call_locked(server *s, worker *w) {
  if (w->sess || !w->token_hash[0]) return;
  w->listed = true;
  w->next_call = s->token_calls;
  if (s->token_calls) s->token_calls->prev_call = w;
  s->token_calls = w;
  s->n_token_calls++;
}

void http_worker_free(worker *w) {
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
  http_session_put(w->srv, w->sess);
  if (w->st) http_stream_release(w->st);
  if (w->caller) http_request_done(w->srv, w->caller, true);
  free(w);
}

/* Ends the answer of w's call, cancelled: with no message, but for a call cancelled as its
 * token was revoked whose answer has begun (an event stream), which ends with an error
 * saying so: its client would wait otherwise for an answer that cannot come. (One not begun
 * is refused as the revoked token is, 401.) */
static void finish_cancelled(server *s, worker *w) {
  char *text = NULL;
  if (http_revoked_call(s, w->sess, w->st)) {
    text = tg_rpc_error_text(w->msg.id, TG_RPC_INVALID_REQUEST,
                             "The token this call was made with was revoked: the call was "
                             "cancelled",
                             NULL);
  }
  http_stream_finish(w->st, text, w->msg.id, 0);
}

/* Whether the client of w, a stateless call, went away, which cancels it. Its connection's
 * close says so, but that connection looks at its socket only once a second while it waits
 * for the call's first output: until then (its socket is its own, held open by that wait),
 * the socket is looked at here too. A call that became a task within that second is then
 * known cancelled at once, and the task stops: its client never learnt its id. */
static bool stateless_client_gone(void *arg) {
  const worker *w = arg;
  pthread_mutex_lock(&w->st->lock);
  bool gone = w->st->closed || (w->st->len == 0 && !w->st->done && http_client_gone(w->fd));
  pthread_mutex_unlock(&w->st->lock);
  return gone;
}

/* Serves one queued call on a pool thread's connection (NULL when it could not be opened). */
static void run_call(worker *w, tg_db *db) {
  server *s = w->srv;
  char *final = NULL;
  int status = 500;
  bool handled = false;
  if (db) {
    tg_env env = http_server_env(s, db);
    tg_mcp_io io = {.self = w, .send = http_worker_send, .ask = w->sess ? worker_ask : NULL,
                    .close_stream = worker_close_stream,
                    .initialized = w->sess ? worker_initialized : NULL};
    tg_mcp_request req = {.env = &env, .principal_id = w->principal,
                          .token_hash = w->token_hash, .session = &w->scratch,
                          .headers = &w->headers, .io = &io,
                          .inflight = w->inflight,
                          .abandoned = &s->past_grace,
                          .gone = w->sess ? NULL : stateless_client_gone, .gone_arg = w,
                          .watch = w->sess ? w->sess->watch : NULL};
    http_request_run(w, &req);
    tg_mcp_reply reply;
    handled = tg_mcp_handle(&s->mcp, &req, &w->msg, &reply) == 0;
    if (handled) {
      final = reply.text;
      status = reply.http_status;
      if (w->sess) http_state_store(s, w->sess, &w->scratch, w->opened);
    }
  }
  /* Ends the exchange even without a message (a cancelled call gets none), so the client is
   * never left waiting. A request handled with no reply was cancelled too: the dispatch
   * found it so (its client gone, or its cancellation heard) and took its entry. */
  if (tg_mcp_inflight_end(w->inflight, w->msg.id) || (handled && !final)) {
    free(final);
    finish_cancelled(s, w);
  } else {
    if (!handled)
      final = tg_rpc_error_text(w->msg.id, TG_RPC_INTERNAL_ERROR, "Internal error", NULL);
    http_stream_finish(w->st, final, w->msg.id, status);
  }
  if (db) http_check_lists(s, db, w->principal, w->sess);
  http_worker_free(w);
}

/* How many calls wait in line for a pool thread. */
unsigned http_queued_locked(server *s) {
  unsigned n = 0;
  for (worker *w = s->queue_head; w; w = w->next) n++;
  return n;
}

/* Takes the calls cancelled while they wait in line for a pool thread off the line, and ends
 * them without an answer: at once, not once a thread comes free. */
void http_drop_cancelled_in_line(server *s) {
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
    http_worker_free(w);
  }
}

/* A pool, sweeper or client connection's thread's database connection, opened at its first
 * use; NULL (logged) when it cannot be, and tried again at the next. */
tg_db *http_thread_db(server *s, tg_db **db) {
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
void *http_pool_main(void *arg) {
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
    run_call(w, http_thread_db(s, &db));
    pthread_mutex_lock(&s->lock);
    s->busy[slot][0] = '\0';
    pthread_cond_broadcast(&s->queued); /* a call held back for its principal may run */
    pthread_mutex_unlock(&s->lock);
  }
  tg_db_close(db);
  return NULL;
}

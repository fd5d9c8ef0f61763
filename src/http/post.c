/* POST /mcp: a message (or a batch) of either revision, read, checked against its headers
 * and its session, and served on this connection's thread or, when it may wait on its
 * client, on the pool's. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"

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
  if (*slot) http_stream_release(*slot);
  http_stream_ref(st);
  *slot = st;
}

/* Gives back a place start_call kept in the line for a call that did not join it. */
static enum MHD_Result forgo_place(server *s, enum MHD_Result r) {
  pthread_mutex_lock(&s->lock);
  s->line_promised--;
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* The answer to a request that ended with no message as it was cancelled: by its token's
 * revocation, told as the revoked token is, or by its session's end, as one naming the ended
 * session is (it may have come after the end, and not run). False, *r untouched, when
 * neither cancelled it. */
static bool refuse_cancelled(server *s, struct MHD_Connection *conn, session *x, stream *st,
                             enum MHD_Result *r) {
  if (http_revoked_call(s, x, st)) *r = http_refuse_caller(s, conn, CALLER_BAD_TOKEN);
  else if (http_session_ended(s, x)) *r = http_session_not_found(conn);
  else return false;
  return true;
}

/* Answers a call on the pool (st its stream, read by this connection of socket fd; x its
 * session, whose reference the connection holds) once its stream has something: the whole
 * reply when it ended before sending anything else, else the stream (primed_len: the bytes of
 * its priming event). A call quiet as long as a stream may be (waiting in line for a thread,
 * or running without a word) is answered by its stream all the same, whose comment lines keep
 * its client from timing out. A client that left before is answered nothing. */
static enum MHD_Result answer_pool_call(server *s, struct MHD_Connection *conn, session *x,
                                        stream *st, int fd, size_t primed_len) {
  pthread_mutex_lock(&st->lock);
  bool gone = false;
  long long quiet_ms = 0;
  /* No connection reads st yet, so nothing was dropped: len == 0 means nothing appended. */
  while (!st->done && st->len == 0 && !st->polling && (gone || quiet_ms < s->keepalive_ms)) {
    if (!tg_timed_wait(&st->ready, &st->lock, HANGUP_CHECK_MS) || gone) continue;
    quiet_ms += HANGUP_CHECK_MS;
    if (!http_client_gone(fd)) continue;
    gone = true;
    unsigned id = st->reader;
    pthread_mutex_unlock(&st->lock);
    http_stream_detach(st, id);
    if (x) {
      /* A session's call runs on (a client that leaves cancels nothing), but its stream,
       * unprimed, is none its client can resume: the connection is let go now, not held
       * until the call first sends. */
      http_stream_release(st);
      http_session_put(s, x);
      http_close_on_purpose();
      return MHD_NO;
    }
    /* A stateless client that went away cancelled its call, which ends soon after. */
    pthread_mutex_lock(&st->lock);
  }
  bool quiet = !st->done && st->len == 0 && !st->polling;
  if (st->len == 0 && !st->polling && !quiet) {
    char *final = st->final;
    int status = st->final_status;
    st->final = NULL;
    pthread_mutex_unlock(&st->lock);
    /* Without a message, the request was cancelled (status 0), or its error could not be
     * built (which a revoked token's refusal overrides, as it would have cancelled it). */
    enum MHD_Result r = MHD_NO;
    if (final)
      r = http_queue_reply(s, conn, st->share->principal, (unsigned)status, final, st->final_id,
                           NULL, NULL);
    else if (status != 0 && !http_revoked_call(s, x, st))
      r = http_queue(conn, (unsigned)status, NULL, NULL, NULL);
    else if (!refuse_cancelled(s, conn, x, st, &r))
      r = http_queue_unanswered(conn, true, NULL); /* a call */
    http_stream_release(st);
    http_session_put(s, x);
    return r;
  }
  /* A call that asked to end its answer (polling) gets what there is so far, read from st
   * as any answer is (or the priming event, when there is nothing), and the reconnection
   * delay; its result then waits for the client's GET with Last-Event-ID. */
  if (st->polling && st->len == primed_len) {
    if (!primed_len && http_prime_locked(st) < 0) {
      pthread_mutex_unlock(&st->lock);
      http_stream_release(st);
      http_session_put(s, x);
      return MHD_NO;
    }
    st->cut_primed = true;
  }
  st->cutting = st->polling;
  st->cut_at = st->len;
  st->streaming = st->reading = true;
  st->quiet_start = quiet;
  unsigned reader_id = st->reader;
  if (st->final) {
    http_append_reply_locked(st, st->final, st->final_id);
    st->final = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  if (x) {
    pthread_mutex_lock(&s->lock);
    keep_stream_locked(s, x, st);
    http_session_release_locked(s, x);
    pthread_mutex_unlock(&s->lock);
  }
  return http_queue_stream(conn, st, reader_id);
}


/* Runs w on a worker thread and answers from what it says. *started tells whether the
 * worker took w (it then frees it); when it did not, the caller still owns w. */
static enum MHD_Result start_call(server *s, struct MHD_Connection *conn, worker *w,
                                  bool *started) {
  *started = false;
  /* A caller's calls on the pool are bounded apart from its requests answered, which a
   * session's call outlives: its client may leave to resume it later. The client can still
   * cancel them, end their session or resume them at this bound. */
  bool full = false;
  if (!s->cfg->no_auth && !(w->caller = http_request_begin(s, w->principal, true, &full)))
    return full ? http_queue_refusal_as(conn, MHD_HTTP_TOO_MANY_REQUESTS, &w->msg,
                                        TG_RPC_INTERNAL_ERROR,
                                        "Too many calls of this caller wait or run on the pool; "
                                        "cancel one or wait")
                : MHD_NO;
  /* The call's place in the line is kept from here until it joins it (or gives up), so that
   * calls on their way at once cannot pass the bound together. A caller with no other call
   * on the pool may join a full line (by one call each, so callers that fill it cannot lock
   * the others out). */
  unsigned most = s->cfg->max_queued_calls ? s->cfg->max_queued_calls : TG_HTTP_MAX_QUEUED_CALLS;
  bool first = w->caller && http_pool_calls_of(s, w->caller) == 1;
  pthread_mutex_lock(&s->lock);
  bool line_full = !first && http_queued_locked(s) + s->line_promised >= most;
  if (!line_full) s->line_promised++;
  pthread_mutex_unlock(&s->lock);
  if (line_full) {
    if (tg_log_may(&s->line_full_logged_ms))
      tg_log(TG_LOG_WARN, "http: %u calls wait for a pool thread; refusing more (logged once a "
             "minute at most; --threads gives more threads)", most);
    return http_queue_refusal_as(conn, MHD_HTTP_SERVICE_UNAVAILABLE, &w->msg, TG_RPC_INTERNAL_ERROR,
                                 "Too many calls wait for a thread; retry later");
  }
  session *x = w->sess;
  stream *st = http_stream_new(s, 0, w->principal);
  /* Cancellable from now on: a cancellation while the call waits for a thread is kept. */
  bool held = st && (x ? tg_mcp_inflight_begin(x->inflight, w->msg.id) == 0
                       : http_cancellable_alone(st, w->msg.id));
  /* Once the request is held, a session that ended meanwhile cancelled it (or its end came
   * first, and it begins cancelled): it is not queued, nor its stream primed. */
  bool found_ended = held && http_session_ended(s, x);
  if (found_ended) tg_mcp_inflight_end(x->inflight, w->msg.id);
  if (!held || found_ended) {
    if (st) http_stream_release(st);
    enum MHD_Result r = MHD_NO;
    if (found_ended) refuse_cancelled(s, conn, x, NULL, &r);
    return forgo_place(s, r);
  }
  tg_mcp_inflight *inflight = x ? x->inflight : st->inflight;
  st->refs = 2; /* the worker's and this connection's */
  if (!x) {
    st->on_close = http_cancel_call;
    st->close_arg = st;
  }
  w->st = st;
  w->inflight = inflight;
  int fd = w->fd = http_connection_fd(conn);
  bool resumes = x && http_resumes_streams(w->scratch.version);
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
    if (http_prime_locked(st) == 0) primed_len = st->len;
    pthread_mutex_unlock(&st->lock);
  }
  http_list_token_call_locked(s, w);
  w->next = NULL;
  if (s->queue_tail) s->queue_tail->next = w;
  else s->queue_head = w;
  s->queue_tail = w;
  s->line_promised--;
  pthread_cond_signal(&s->queued);
  /* A cancellation that looked at the line before w joined it missed w: w leaves it now. */
  bool cancelled = x && tg_mcp_inflight_cancelled(inflight, w->msg.id);
  pthread_mutex_unlock(&s->lock);
  if (cancelled) http_drop_cancelled_in_line(s);
  *started = true;
  return answer_pool_call(s, conn, x, st, fd, primed_len);
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
                                    stream *st, char *reply, json_t *id) {
  pthread_mutex_lock(&st->lock);
  http_append_reply_locked(st, reply, id);
  st->done = st->streaming = st->reading = true;
  unsigned reader_id = st->reader;
  st->refs++; /* the answer's, besides the caller's */
  pthread_mutex_unlock(&st->lock);
  if (x) {
    pthread_mutex_lock(&s->lock);
    keep_stream_locked(s, x, st);
    pthread_mutex_unlock(&s->lock);
  }
  return http_queue_stream(conn, st, reader_id);
}


/* A POST's message, decoded into a new worker of its caller's; NULL when it is refused
 * (*result: the refusal queued), as a body that does not decode or would pass the bounds
 * decoded. */
static worker *read_post(server *s, struct MHD_Connection *conn, request *rq,
                         enum MHD_Result *result) {
  tg_rpc_id_scan scan;
  if (!http_take_decoded(s, rq)) {
    http_scan_body(rq, &scan);
    *result = http_refuse_busy(s, conn, rq, &scan);
    return NULL;
  }
  *result = MHD_NO;
  worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->srv = s;
  snprintf(w->principal, sizeof w->principal, "%s", rq->principal);
  snprintf(w->token_hash, sizeof w->token_hash, "%s", rq->token_hash);
  tg_mcp_session_init(&w->scratch);
  json_t *err = NULL;
  if (tg_rpc_decode(rq->body ? rq->body : "", rq->len, &w->msg, &err) == 0) {
    /* The message holds all the text says, and the body is counted as that from here on
     * (http_take_decoded): a call waiting in line keeps one of the two. */
    free(rq->body);
    rq->body = NULL;
    if (rq->len >= HTTP_TRIM_AFTER_BYTES) malloc_trim(0); /* else malloc keeps it resident */
    return w;
  }
  free(w);
  if (err) {
    http_scan_body(rq, &scan);
    http_answer_unreadable(s, conn, rq, &scan, err);
  }
  if (err && rq->refused_media) err = http_media_refusal(err, rq->refused_media);
  if (err)
    *result = http_queue_json(conn, rq->refused_media ? rq->refused_media_status
                                                      : MHD_HTTP_BAD_REQUEST, err, NULL);
  return NULL;
}

/* Reads the MCP headers of w's message into w->headers, and refuses the message for them
 * (media, a repeated header, Mcp-Param-*, the revision): true, *result the refusal queued.
 * *modern: the message is 2026-07-28's. */
static bool refuse_headers(struct MHD_Connection *conn, const request *rq, worker *w,
                           bool *modern, enum MHD_Result *result) {
  *result = MHD_NO;
  if (rq->refused_media) {
    *result = http_queue_refusal(conn, rq->refused_media_status, &w->msg, rq->refused_media);
    return true;
  }
  /* A fault of a header 2026-07-28 validates: -32020 is that revision's, a 2025 message
   * gets JSON-RPC's own. */
  int header_fault = tg_mcp_has_claim(&w->msg) ? TG_RPC_HEADER_MISMATCH : TG_RPC_INVALID_REQUEST;
  if (rq->repeated_header) {
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", rq->repeated_header);
    *result = http_queue_refusal_as(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                    rq->repeated_by_2026 ? header_fault : TG_RPC_INVALID_REQUEST,
                                    why);
    return true;
  }
  w->params = json_object();
  if (!w->params || !http_header_value(conn, "MCP-Protocol-Version", &w->header_copies[0]) ||
      !http_header_value(conn, "Mcp-Method", &w->header_copies[1]) ||
      !http_header_value(conn, "Mcp-Name", &w->header_copies[2]) ||
      !http_header_value(conn, "Toolgate-Run", &w->header_copies[3]))
    return true;
  param_headers ph = {.params = w->params};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, http_collect_param, &ph);
  if (ph.failed) return true;
  if (ph.too_many || ph.too_long) {
    *result = http_queue_refusal_as(conn, MHD_HTTP_BAD_REQUEST, &w->msg, header_fault,
                                    ph.too_many ? "Too many Mcp-Param headers (at most 64 names)"
                                                : "An Mcp-Param header's name is too long (at "
                                                  "most 127 bytes after Mcp-Param-)");
    return true;
  }
  w->headers = (tg_mcp_headers){w->header_copies[0], w->header_copies[1], w->header_copies[2],
                                w->params};
  /* A modern version header without a modern _meta is still modern traffic: the dispatch
   * answers it with the missing envelope keys, statelessly. */
  *modern = tg_mcp_has_claim(&w->msg) ||
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
  if (!version_refusal) return false;
  *result = http_queue_refusal_with(conn, MHD_HTTP_BAD_REQUEST, &w->msg, version_code,
                                    version_refusal, version_data);
  return true;
}

/* Whether msg names initialize otherwise than as a request alone: as a notification, or in
 * a batch, where 2025-03-26 forbids it. */
static bool initializes_not_alone(const tg_rpc_msg *msg) {
  if (msg->kind == TG_RPC_NOTIFICATION) return strcmp(msg->method, "initialize") == 0;
  size_t i;
  json_t *member;
  if (msg->kind == TG_RPC_BATCH)
    json_array_foreach(msg->root, i, member) {
      const char *method = json_string_value(json_object_get(member, "method"));
      if (method && strcmp(method, "initialize") == 0) return true;
    }
  return false;
}

/* Finds the legacy session w's message names (w->sess, its state in w->scratch), or opens
 * one for an initialize (w->opened); a 2026-07-28 message has none, and a session id it
 * carries is ignored. False, *result the refusal queued, when the message cannot be served
 * in the session it names (or fails to name). */
static bool find_session(server *s, struct MHD_Connection *conn, const request *rq, worker *w,
                         bool modern, enum MHD_Result *result) {
  *result = MHD_NO;
  if (modern) return true;
  _cleanup_free_ char *sid = NULL;
  if (!http_session_id(conn, &sid)) return false;
  bool initialize = w->msg.kind == TG_RPC_REQUEST && strcmp(w->msg.method, "initialize") == 0;
  if (initialize && !sid) {
    if (!(w->sess = http_session_new(s, w->principal, rq->token_hash))) return false;
    w->opened = true;
    return true;
  }
  if (!sid) {
    *result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                 initializes_not_alone(&w->msg)
                                     ? "initialize opens a session only as a request of its "
                                       "own, not as a notification nor in a batch"
                                     : "Mcp-Session-Id is required; send initialize first");
    return false;
  }
  /* A dead session answers 404 to any request naming it, initialize too: the client then
   * initializes without it. */
  if (!(w->sess = http_session_find(s, sid, rq->principal, rq->token_hash))) {
    *result = http_queue_refusal(conn, MHD_HTTP_NOT_FOUND, &w->msg, "Session not found");
    return false;
  }
  /* A second session would leave the first to its idle timeout. */
  if (initialize) {
    *result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                 "This session is initialized already: end it with DELETE, "
                                 "or initialize without Mcp-Session-Id");
    return false;
  }
  void (*found)(const char *) = tg_http_test_session_found;
  if (found) found(sid);
  if (!http_state_load(s, w->sess, &w->scratch)) {
    *result = http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
    return false;
  }
  if (tg_mcp_reuses_id_in_flight(w->sess->inflight, NULL, &w->msg)) {
    *result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg, TG_MCP_INFLIGHT_REUSED_ID);
    return false;
  }
  return true;
}

/* Opens w's session, the one its initialize made, for good: admitted among the sessions. Its
 * run opens at its first call (http_session_run), unless the initialize named one
 * (Toolgate-Run): a session that calls nothing leaves no run. False, *result the refusal
 * queued, when it cannot be. */
static bool open_session(server *s, struct MHD_Connection *conn, worker *w,
                         enum MHD_Result *result) {
  w->sess->run_later = !w->header_copies[3]; /* no other request knows it yet */
  if (!http_session_admit(s, w->sess)) {
    *result = http_queue_refusal(conn, MHD_HTTP_TOO_MANY_REQUESTS, &w->msg,
                                 "Too many sessions in use; end one (DELETE) and retry");
    return false;
  }
  return true;
}

/* Whether the dispatch would refuse w's message (its envelope, headers, version, method),
 * answered then with that refusal and its status (*result): for a request about to hold
 * something bounded (a watch, a place in the pool's line), so that it is told what is wrong
 * with it at once, not after waiting its turn. */
static bool refused_ahead(server *s, struct MHD_Connection *conn, tg_db *db, worker *w,
                          enum MHD_Result *result) {
  tg_env env = http_server_env(s, db);
  tg_mcp_request checked = {
      .env = &env, .principal_id = w->principal, .session = &w->scratch, .headers = &w->headers};
  tg_mcp_reply refusal;
  int r = tg_mcp_refusal(&s->mcp, &checked, &w->msg, &refusal);
  if (r < 0)
    *result = http_queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg,
                                    TG_RPC_INTERNAL_ERROR, "Out of memory");
  else if (r > 0)
    *result = http_queue_reply(s, conn, w->principal, (unsigned)refusal.http_status, refusal.text,
                               w->msg.id, NULL, NULL);
  return r != 0;
}

/* Serves w's message on this connection's thread, and answers it: its events (progress,
 * log messages) go ahead of its result in one response; a subscriptions/listen request's
 * answer stays open as its subscription. */
static enum MHD_Result serve_here(server *s, struct MHD_Connection *conn, tg_db *db,
                                  worker *w, bool modern, bool sse_call) {
  const char *principal = w->principal;
  tg_env env = http_server_env(s, db);
  /* A 2026-07-28 subscriptions/listen request gets a watch of its own, sending on its
   * answer, which stays open as the subscription; one the dispatch would refuse is refused
   * first, as the number of watches is bounded. */
  listener *l = NULL;
  if (modern && w->msg.kind == TG_RPC_REQUEST &&
      strcmp(w->msg.method, "subscriptions/listen") == 0) {
    enum MHD_Result refused;
    if (refused_ahead(s, conn, db, w, &refused)) return refused;
    unsigned status = 0;
    const char *why = NULL;
    if (!(l = http_listener_open(s, principal, w->token_hash, &status, &why)))
      return http_queue_refusal(conn, status, &w->msg, why);
  }
  /* A stateless call of a token is listed for end_revoked, which cancels it through its
   * stream, one made for that when its answer is JSON. */
  bool listed = !w->sess && w->token_hash[0] && w->msg.kind == TG_RPC_REQUEST &&
                strcmp(w->msg.method, "tools/call") == 0;
  if ((sse_call || listed) && !(w->st = http_stream_new(s, 0, principal))) return MHD_NO;
  if (listed) {
    if (!http_cancellable_alone(w->st, w->msg.id)) return MHD_NO;
    pthread_mutex_lock(&s->lock);
    http_list_token_call_locked(s, w);
    pthread_mutex_unlock(&s->lock);
  }
  if (w->st && w->sess) {
    pthread_mutex_lock(&s->lock);
    w->st->no = ++w->sess->next_stream;
    pthread_mutex_unlock(&s->lock);
  }
  tg_mcp_io io = {.self = w, .send = http_worker_send};
  int fd = http_connection_fd(conn);
  tg_mcp_request req = {.env = &env, .principal_id = principal, .token_hash = w->token_hash,
                        .session = &w->scratch, .headers = &w->headers,
                        .io = sse_call ? &io : NULL,
                        .inflight = w->sess ? w->sess->inflight : w->st ? w->st->inflight : NULL,
                        .abandoned = &s->past_grace,
                        /* Without a session, a client cancels by going away. */
                        .gone = w->sess ? NULL : http_connection_gone, .gone_arg = &fd,
                        .watch = l ? l->watch : w->sess ? w->sess->watch : NULL};
  http_request_run(w, &req);
  tg_mcp_reply reply;
  int hr = tg_mcp_handle(&s->mcp, &req, &w->msg, &reply);
  if (listed)
    tg_mcp_inflight_end(w->st->inflight, w->msg.id); /* what http_cancellable_alone began */
  if (l && (hr < 0 || !reply.subscribed)) {
    http_listener_closed(l); /* no subscription: as if its stream had closed */
    l = NULL;
  }
  /* An initialize that failed, even in-band (200 with a JSON-RPC error), opens no session. */
  bool opens = w->opened && hr >= 0 && reply.http_status == 200 && !reply.error;
  enum MHD_Result result;
  if (opens && !open_session(s, conn, w, &result)) {
    free(reply.text);
    return result;
  }
  const char *new_sid = opens ? w->sess->id : NULL;
  if (hr < 0)
    return http_queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg,
                                 TG_RPC_INTERNAL_ERROR, "Out of memory");
  if (w->sess) http_state_store(s, w->sess, &w->scratch, w->opened);
  /* What this message changed, and the baseline of a listen stream just acknowledged. */
  http_check_lists(s, db, principal, w->sess);
  if (l) return http_listener_serve(conn, l);
  if (!reply.text && refuse_cancelled(s, conn, w->sess, w->st, &result)) return result;
  if (reply.text && w->st && w->st->len)
    return queue_events(s, conn, w->sess, w->st, reply.text, w->msg.id);
  if (reply.text)
    return http_queue_reply(s, conn, principal, (unsigned)reply.http_status, reply.text,
                            w->msg.id, w->msg.kind == TG_RPC_BATCH ? &w->msg : NULL, new_sid);
  return http_queue_unanswered(conn, tg_mcp_holds_request(&w->msg), new_sid);
}

/* POST /mcp: one message (or a batch) of either revision. */
enum MHD_Result http_handle_post(server *s, struct MHD_Connection *conn, tg_db *db,
                                 request *rq) {
  enum MHD_Result result;
  worker *w = read_post(s, conn, rq, &result);
  if (!w) return result;
  bool modern = false;
  if (refuse_headers(conn, rq, w, &modern, &result) ||
      !find_session(s, conn, rq, w, modern, &result))
    goto done;
  if (w->msg.kind == TG_RPC_BATCH && w->sess && tg_mcp_takes_batches(&w->scratch) &&
      tg_rpc_batch_take(&w->msg, http_deliver_batched_answer, &(batch_target){s, w->sess}) < 0) {
    result = MHD_NO;
    goto done;
  }
  if (w->msg.kind == TG_RPC_RESPONSE) {
    int delivered = w->sess ? tg_mcp_answer(&w->sess->questions, &w->msg) : 0;
    result =
        delivered > 0    ? http_queue(conn, MHD_HTTP_ACCEPTED, NULL, NULL, NULL)
        : delivered == 0 ? http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                                "No request is waiting for this response")
                         : http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
    goto done;
  }
  /* Tool calls (and a session's prompts) may talk back before their result when the client
   * can read SSE. One that may wait on the client streams from a worker thread, so that this
   * connection delivers its events as they come; any other runs here. */
  bool sse_call = w->msg.kind == TG_RPC_REQUEST && rq->prefers_events &&
                  (strcmp(w->msg.method, "tools/call") == 0 ||
                   (w->sess && strcmp(w->msg.method, "prompts/get") == 0));
  if (sse_call && waits_on_client(s, &w->msg)) {
    if (refused_ahead(s, conn, db, w, &result)) goto done;
    bool started = false;
    result = start_call(s, conn, w, &started);
    if (started) return result;
    goto done;
  }
  result = serve_here(s, conn, db, w, modern, sse_call);
done:
  http_worker_free(w);
  http_body_let_go(s, rq); /* its message gone with w, whatever its answer holds open */
  return result;
}

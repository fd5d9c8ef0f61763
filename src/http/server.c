#define _GNU_SOURCE
#include "http/server.h"
#include "http/internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/media.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* A request whose body took longer than this to arrive has its token checked again once it
 * has: one revoked meanwhile is refused, as running calls are cancelled (end_revoked). */
#define TOKEN_RECHECK_MS 1000
/* A body this large or larger has what malloc keeps trimmed once it is done (on_completed). */
#define TRIM_AFTER_BYTES (1u * 1024u * 1024u)

/* What a call on one of this server's threads runs against. */
tg_env http_server_env(const server *s, tg_db *db) {
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
void http_tell_held_back_mhd_lines(server *s, bool force) {
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
  size_t len;
  const char *token = tg_http_field_value(auth + 6, &len);
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
    return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
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
  return http_respond_with(conn, MHD_HTTP_UNAUTHORIZED, res, "application/json", NULL, NULL);
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
  if (*slot) http_stream_release(*slot);
  http_stream_ref(st);
  *slot = st;
}

/* The answer to a GET or DELETE naming a session that is gone, or not the caller's, and to a
 * request its session's end left unanswered (it names none: the request was cancelled). */
static enum MHD_Result session_not_found(struct MHD_Connection *conn) {
  return http_queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST,
                              "Session not found");
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
    /* Told as the other answers of an ended session are (handle_post): a revoked token's
     * as the revoked token is. */
    enum MHD_Result r = !found_ended                   ? MHD_NO
                        : http_revoked_call(s, x, NULL) ? refuse_caller(s, conn, CALLER_BAD_TOKEN)
                                                        : session_not_found(conn);
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
  int fd = http_connection_fd(conn);
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
  pthread_mutex_lock(&st->lock);
  bool gone = false;
  /* No connection reads st yet, so nothing was dropped: len == 0 means nothing appended. */
  while (!st->done && st->len == 0 && !st->polling) {
    if (!tg_timed_wait(&st->ready, &st->lock, HANGUP_CHECK_MS) || x || gone ||
        !http_client_gone(fd))
      continue;
    /* A stateless client that went away cancelled its call, which ends soon after. */
    gone = true;
    unsigned id = st->reader;
    pthread_mutex_unlock(&st->lock);
    http_stream_detach(st, id);
    pthread_mutex_lock(&st->lock);
  }
  if (st->len == 0 && !st->polling) {
    char *final = st->final;
    int status = st->final_status;
    st->final = NULL;
    pthread_mutex_unlock(&st->lock);
    bool revoked = !final && http_revoked_call(s, x, st);
    bool ended = !final && !revoked && status == 0 && http_session_ended(s, x);
    /* Without a message, the request was cancelled (status 0: by its token's revocation, told
     * as the revoked token is, or by its session's end, told as one naming the ended session
     * is), or its error could not be built. */
    enum MHD_Result r =
        final         ? http_queue_reply(s, conn, st->share->principal, (unsigned)status, final,
                                         st->final_id, NULL, session_id)
        : revoked     ? refuse_caller(s, conn, CALLER_BAD_TOKEN)
        : ended       ? session_not_found(conn)
        : status == 0 ? http_queue_unanswered(conn, true, session_id) /* a call */
                      : http_queue(conn, (unsigned)status, NULL, NULL, session_id);
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
  return http_queue_stream(conn, st, session_id, reader_id);
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
  return http_queue_stream(conn, st, session_id, reader_id);
}

/* The error err (released: one, or a batch's, each naming a request) refusing a body that
 * does not decode, as the refusal for its media type, why, naming the same requests. NULL
 * without memory. */
static json_t *media_refusal(json_t *err, const char *why) {
  json_t *refusal = json_is_array(err) ? json_array()
                                       : tg_rpc_error(json_object_get(err, "id"),
                                                      TG_RPC_INVALID_REQUEST, why, NULL);
  size_t i;
  json_t *each;
  json_array_foreach(err, i, each) {
    if (refusal &&
        json_array_append_new(refusal, tg_rpc_error(json_object_get(each, "id"),
                                                    TG_RPC_INVALID_REQUEST, why, NULL)) < 0) {
      json_decref(refusal);
      refusal = NULL;
    }
  }
  json_decref(err);
  return refusal;
}

/* A body dropped as it passed the bounds on bodies held at once (rq->busy_status says
 * whose), or one that would pass them decoded, is refused, naming its request when its text
 * did (scan). */
static enum MHD_Result refuse_busy(server *s, struct MHD_Connection *conn, const request *rq,
                                   const tg_rpc_id_scan *scan) {
  bool own = rq->busy_status == MHD_HTTP_TOO_MANY_REQUESTS;
  if (tg_log_may(&s->busy_logged_ms))
    tg_log(TG_LOG_WARN, "http: refused a request body past the bound on %s (%zu bytes; "
           "logged once a minute at most)", own ? "one caller's bodies held at once"
                                                : "the bodies held at once",
           own ? s->taking_max / 2 : s->taking_max);
  json_t *data = json_pack("{s:s,s:I}", "limit", own ? "callerBodyBytes" : "bodyBytes", "max",
                           (json_int_t)(own ? s->taking_max / 2 : s->taking_max));
  int code = own ? TG_RPC_INVALID_REQUEST : TG_RPC_INTERNAL_ERROR;
  const char *message = own ? "Too many bytes of this caller's requests are held at once; "
                              "wait for answers"
                            : "Too many bytes of requests are held at once; retry";
  return http_queue_json(conn, rq->busy_status, tg_rpc_scan_refusal(scan, code, message, data),
                         NULL);
}

/* A message's values take more than its text's bytes once decoded (the two bytes of "{}"
 * become a table): the excess is counted with its body against the bounds on bodies held at
 * once, before it is decoded and until it is answered. False (rq->busy_status set) when it
 * would pass them. */
static bool take_decoded(server *s, request *rq) {
  size_t held = tg_rpc_reckon(rq->body ? rq->body : "", rq->len);
  size_t more = held > rq->len ? held - rq->len : 0;
  if (!rq->taker || !more) return true;
  if (http_taking_past(s, rq->taker, more, &rq->busy_status)) return false;
  http_taking_count(s, rq->taker, more, false);
  rq->decoded = more;
  return true;
}

/* The ids rq's body names, as an error refusing it may name them. */
static void scan_body(const request *rq, tg_rpc_id_scan *scan) {
  tg_rpc_id_scan_init(scan);
  tg_rpc_id_scan_feed(scan, rq->body ? rq->body : "", rq->len);
}

static enum MHD_Result handle_post(server *s, struct MHD_Connection *conn, tg_db *db,
                                   const char *principal, request *rq) {
  tg_rpc_id_scan scan;
  if (!take_decoded(s, rq)) {
    scan_body(rq, &scan);
    return refuse_busy(s, conn, rq, &scan);
  }
  _cleanup_free_ char *sid = NULL;
  if (!http_header_value(conn, "Mcp-Session-Id", &sid)) return MHD_NO;
  worker *w = calloc(1, sizeof *w);
  if (!w) return MHD_NO;
  w->srv = s;
  snprintf(w->principal, sizeof w->principal, "%s", principal);
  snprintf(w->token_hash, sizeof w->token_hash, "%s", rq->token_hash);
  tg_mcp_session_init(&w->scratch);
  json_t *err = NULL;
  int dr = tg_rpc_decode(rq->body ? rq->body : "", rq->len, &w->msg, &err);
  if (dr != 0 && err && !rq->refused_media) {
    scan_body(rq, &scan);
    http_answer_unreadable(s, conn, rq, &scan, err);
  }
  if (dr != 0 && rq->refused_media && err) err = media_refusal(err, rq->refused_media);
  if (dr != 0) {
    free(w);
    if (!err) return MHD_NO;
    return http_queue_json(conn, rq->refused_media ? rq->refused_media_status
                                                   : MHD_HTTP_BAD_REQUEST, err, NULL);
  }
  enum MHD_Result result;
  if (rq->refused_media) {
    result = http_queue_refusal(conn, rq->refused_media_status, &w->msg, rq->refused_media);
    goto done;
  }
  if (rq->repeated_mcp_header) {
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", rq->repeated_mcp_header);
    /* -32020 is 2026-07-28's: a 2025 message gets JSON-RPC's own. */
    int code = tg_mcp_has_claim(&w->msg) ? TG_RPC_HEADER_MISMATCH : TG_RPC_INVALID_REQUEST;
    result = http_queue_refusal_as(conn, MHD_HTTP_BAD_REQUEST, &w->msg, code, why);
    goto done;
  }
  w->params = json_object();
  if (!w->params || !http_header_value(conn, "MCP-Protocol-Version", &w->header_copies[0]) ||
      !http_header_value(conn, "Mcp-Method", &w->header_copies[1]) ||
      !http_header_value(conn, "Mcp-Name", &w->header_copies[2]) ||
      !http_header_value(conn, "Toolgate-Run", &w->header_copies[3])) {
    result = MHD_NO;
    goto done;
  }
  param_headers ph = {.params = w->params};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, http_collect_param, &ph);
  if (ph.failed) {
    result = MHD_NO;
    goto done;
  }
  if (ph.too_many) {
    result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                "Too many Mcp-Param headers (at most 64 names)");
    goto done;
  }
  if (ph.too_long) {
    result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
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
    result = http_queue_refusal_with(conn, MHD_HTTP_BAD_REQUEST, &w->msg, version_code,
                                     version_refusal, version_data);
    goto done;
  }
  bool opens = !modern && w->msg.kind == TG_RPC_REQUEST && strcmp(w->msg.method, "initialize") == 0;
  const char *new_sid = NULL;
  /* 2026-07-28 is stateless: a session id it carries is ignored, and none is minted. */
  if (!modern && !opens) {
    if (!sid) {
      result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                  "Mcp-Session-Id is required; send initialize first");
      goto done;
    }
    if (!(w->sess = http_session_find(s, sid, rq->principal, rq->token_hash))) {
      result = http_queue_refusal(conn, MHD_HTTP_NOT_FOUND, &w->msg, "Session not found");
      goto done;
    }
    void (*found)(const char *) = tg_http_test_session_found;
    if (found) found(sid);
    if (!http_state_load(s, w->sess, &w->scratch)) {
      result = http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
      goto done;
    }
    if (tg_mcp_reuses_id_in_flight(w->sess->inflight, NULL, &w->msg)) {
      result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg, TG_MCP_INFLIGHT_REUSED_ID);
      goto done;
    }
  } else if (opens && sid && (w->sess = http_session_find(s, sid, rq->principal, rq->token_hash))) {
    /* A second session would leave the first to its idle timeout; a stale id is no bar. */
    result = http_queue_refusal(conn, MHD_HTTP_BAD_REQUEST, &w->msg,
                                "This session is initialized already: end it with DELETE, or "
                                "initialize without Mcp-Session-Id");
    goto done;
  } else if (opens) {
    if (!(w->sess = http_session_new(s, principal, rq->token_hash))) {
      result = MHD_NO;
      goto done;
    }
    w->opened = true;
    new_sid = w->sess->id;
  }
  if (w->msg.kind == TG_RPC_BATCH && w->sess && tg_mcp_takes_batches(&w->scratch) &&
      tg_rpc_batch_take(&w->msg, http_deliver_batched_answer, &(batch_target){s, w->sess}) < 0) {
    result = MHD_NO;
    goto done;
  }
  if (w->msg.kind == TG_RPC_RESPONSE) {
    int delivered = w->sess ? http_deliver_answer(s, w->sess, &w->msg) : 0;
    result =
        delivered > 0    ? http_queue(conn, MHD_HTTP_ACCEPTED, NULL, NULL, NULL)
        : delivered == 0 ? http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                                "No request is waiting for this response")
                         : http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
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
  if (modern && w->msg.kind == TG_RPC_REQUEST &&
      strcmp(w->msg.method, "subscriptions/listen") == 0) {
    unsigned status = 0;
    const char *why = NULL;
    if (!(l = http_listener_open(s, principal, rq->token_hash, &status, &why))) {
      result = http_queue_refusal(conn, status, &w->msg, why);
      goto done;
    }
  }
  tg_env env = http_server_env(s, db);
  /* A stateless call of a token is listed for end_revoked, which cancels it through its
   * stream, one made for that when its answer is JSON. */
  bool listed = !w->sess && w->token_hash[0] && w->msg.kind == TG_RPC_REQUEST &&
                strcmp(w->msg.method, "tools/call") == 0;
  if ((sse_call || listed) && !(w->st = http_stream_new(s, 0, principal))) {
    result = MHD_NO;
    goto done;
  }
  if (listed) {
    if (!http_cancellable_alone(w->st, w->msg.id)) {
      result = MHD_NO;
      goto done;
    }
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
  req.run_id = http_request_run(w, db, &req.run_held);
  tg_mcp_reply reply;
  int hr = tg_mcp_handle(&s->mcp, &req, &w->msg, &reply);
  if (listed)
    tg_mcp_inflight_end(w->st->inflight, w->msg.id); /* what http_cancellable_alone began */
  if (l && (hr < 0 || !reply.subscribed)) {
    http_listener_closed(l); /* no subscription: as if its stream had closed */
    l = NULL;
  }
  /* An initialize that failed, even in-band (200 with a JSON-RPC error), opens no session. */
  if (opens && (hr < 0 || reply.http_status != 200 || reply.error)) {
    new_sid = NULL;
  } else if (opens && !http_session_admit(s, w->sess)) {
    free(reply.text);
    result = http_queue_refusal(conn, MHD_HTTP_TOO_MANY_REQUESTS, &w->msg,
                                "Too many sessions in use; end one (DELETE) and retry");
    goto done;
  } else if (opens && !w->header_copies[3] && !http_session_run_open(s, db, w->sess)) {
    /* (A session whose initialize names a run, Toolgate-Run, opens none of its own.) */
    free(reply.text);
    result = http_queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg,
                                   TG_RPC_INTERNAL_ERROR, "The session's run could not start");
    goto done;
  }
  if (hr < 0) {
    result = http_queue_refusal_as(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, &w->msg,
                                   TG_RPC_INTERNAL_ERROR, "Out of memory");
    goto done;
  }
  if (w->sess) http_state_store(s, w->sess, &w->scratch, w->opened);
  /* What this message changed, and the baseline of a listen stream just acknowledged. */
  http_check_lists(s, db, principal, w->sess);
  /* A call cancelled as its token was revoked is told so, as the revoked token is; a message
   * its session's end left unanswered (it may have come after, and not run), as one naming
   * the ended session is. */
  bool revoked = !reply.text && (w->sess || listed) && http_revoked_call(s, w->sess, w->st);
  bool ended = !reply.text && !revoked && http_session_ended(s, w->sess);
  result = l         ? http_listener_serve(conn, l)
           : revoked ? refuse_caller(s, conn, CALLER_BAD_TOKEN)
           : ended   ? session_not_found(conn)
           : reply.text && w->st && w->st->len
               ? queue_events(s, conn, w->sess, w->st, reply.text, w->msg.id, new_sid)
           : reply.text
               ? http_queue_reply(s, conn, principal, (unsigned)reply.http_status, reply.text,
                                  w->msg.id, w->msg.kind == TG_RPC_BATCH ? &w->msg : NULL, new_sid)
               : http_queue_unanswered(conn, tg_mcp_holds_request(&w->msg), new_sid);
done:
  http_worker_free(w);
  return result;
}

static enum MHD_Result handle_delete(server *s, struct MHD_Connection *conn, tg_db *db,
                                     const request *rq) {
  _cleanup_free_ char *sid = NULL;
  if (!http_header_value(conn, "Mcp-Session-Id", &sid)) return MHD_NO;
  if (!sid)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Mcp-Session-Id is required");
  session *x = http_session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return session_not_found(conn);
  pthread_mutex_lock(&s->lock);
  if (!x->dead) http_session_end_locked(s, x);
  http_session_release_locked(s, x);
  pthread_mutex_unlock(&s->lock);
  http_drop_cancelled_in_line(s);
  /* Its run ends now, unless calls of it still run or the sweep looks at it: then the sweep
   * ends it, at the end of the next at the latest. */
  if (db) http_end_session_runs(s, db);
  return http_queue(conn, MHD_HTTP_OK, NULL, NULL, NULL);
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
    http_set_sent_locked(st, http_event_offset_locked(st, (unsigned)n + 1));
    http_compact_locked(st); /* what the client says it has may pass what went out */
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
    bool busy = old->reading && !http_client_gone(old->reader_fd);
    /* The list changes old never delivered whole, for the watch to announce again (an event
     * that went out in part was not dispatched). */
    size_t from = http_event_start_locked(old, old->seen > old->head ? old->seen : old->head);
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
  stream *st = http_stream_new(x->srv, x->next_stream + 1, x->principal);
  /* An older client may take the empty event for a message that does not parse. */
  bool resumes = strcmp(x->state.version, POLLING_VERSION) >= 0;
  if (!st || (resumes && http_prime_locked(st) < 0)) {
    if (st) http_stream_release(st);
    return NULL;
  }
  x->next_stream++;
  st->streaming = true;
  st->reading = true;
  *reader_id = st->reader; /* nobody else knows st yet */
  st->reader_fd = fd;
  st->refs = 2; /* the session's and the response's */
  if (old) {
    http_stream_end(old);
    http_stream_release(old);
  }
  x->standalone = st;
  return st;
}

/* GET /mcp: a legacy session's standalone stream, or the resumption of one of its streams. */
static enum MHD_Result handle_get(server *s, struct MHD_Connection *conn, tg_db *db,
                                  const request *rq) {
  const char *principal = rq->principal;
  _cleanup_free_ char *sid = NULL, *last = NULL;
  if (!http_header_value(conn, "Mcp-Session-Id", &sid) ||
      !http_header_value(conn, "Last-Event-ID", &last))
    return MHD_NO;
  /* Without a session there is no stream to offer (2026-07-28 is POST only): what is left of
   * this route is POST. */
  if (!sid) return http_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "POST");
  if (!rq->takes_events)
    return http_queue_rpc_error(conn, MHD_HTTP_NOT_ACCEPTABLE, TG_RPC_INVALID_REQUEST,
                                "Accept must include text/event-stream");
  session *x = http_session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return session_not_found(conn);
  unsigned status = 0;
  const char *why = NULL;
  unsigned unread = 0;
  pthread_mutex_lock(&s->lock);
  unsigned reader_id = 0;
  int fd = http_connection_fd(conn);
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
  if (st && !last && db) http_check_lists(s, db, principal, x);
  http_session_put(s, x);
  if (st) return http_queue_stream(conn, st, NULL, reader_id);
  if (status != MHD_HTTP_METHOD_NOT_ALLOWED)
    return http_queue_rpc_error(conn, status, TG_RPC_INVALID_REQUEST, why);
  /* No other stream is offered on GET while one is open: POST and DELETE are left. */
  _cleanup_json_ json_t *error = tg_rpc_error(NULL, TG_RPC_INVALID_REQUEST, why, NULL);
  _cleanup_free_ char *text = error ? tg_rpc_encode(error) : NULL;
  return text ? http_respond(conn, status, "application/json", text, NULL, "POST, DELETE") : MHD_NO;
}

/* Set by a connection's thread that returns MHD_NO to close it on purpose, having logged why:
 * libmicrohttpd then reports an "internal error" on the same thread. */
static _Thread_local bool closing_on_purpose;

/* A request that came after the server began to stop: 503, and the connection closes. */
static enum MHD_Result refuse_while_stopping(struct MHD_Connection *conn) {
  return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                              "The server is stopping");
}

/* A body past the bound (scan: what it names; NULL: unread) is refused with 413, or, read,
 * with the refusal of its Accept or Content-Type first (rq's), as a body within the bound
 * would be. */
static enum MHD_Result refuse_too_large(server *s, struct MHD_Connection *conn,
                                       const request *rq, const tg_rpc_id_scan *scan) {
  json_t *err = tg_rpc_too_large(scan);
  if (err && rq && !rq->refused_media) http_answer_unreadable(s, conn, rq, scan, err);
  if (rq && rq->refused_media)
    return http_queue_json(conn, rq->refused_media_status, media_refusal(err, rq->refused_media),
                           NULL);
  return http_queue_json(conn, MHD_HTTP_CONTENT_TOO_LARGE, err, NULL);
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
                     strstr(line, "closed by remote peer") ||
                     strstr(line, "closed by remote side");
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
  headers_seen once = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, http_see_header, &once);
  /* "Content-Length : 5" is no length to libmicrohttpd, which would read the body as the next
   * request, whatever the route: it is refused (RFC 9112 §5.1), and what follows left unread
   * (as after any error: http_respond_with). */
  if (once.bad_name)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's name is not a token");
  if (once.bad_value)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's value holds a control character");
  if (once.framing_runs_on)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's name runs on from Content-Length or "
                                "Transfer-Encoding (a folded line?)");
  /* RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 (and would pass the Host check
   * against DNS rebinding below). */
  if (strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
      !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Host is required");
  _cleanup_free_ char *authority = NULL;
  const char *url = NULL;
  int targeted = target_path(target, &url, &authority);
  if (targeted == TG_E_NOMEM) return MHD_NO;
  if (targeted < 0)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "The request target names no host, or names a user");
  if (strcmp(url, "/healthz") == 0) /* libmicrohttpd sends no body to a HEAD */
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0
               ? http_respond(conn, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}", NULL,
                              NULL)
               : http_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "GET, HEAD");
  if (strcmp(url, "/mcp") != 0)
    return http_queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST,
                                "Not found: MCP is served at /mcp");
  /* A header 2026-07-28 validates fails as that revision's (-32020): on a POST, once its
   * body names the request's id, after every other check. The others fail as HTTP's, at
   * once. */
  const char *revision = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
  bool post = strcmp(method, "POST") == 0;
  for (size_t i = 0; i < HTTP_N_SINGLETONS; i++) {
    if (once.seen[i] < 2) continue;
    bool mcp = http_validated_by_2026(http_singletons[i], revision);
    if (mcp && post) {
      if (!rq->repeated_mcp_header) rq->repeated_mcp_header = http_singletons[i];
      continue;
    }
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", http_singletons[i]);
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST,
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
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Content-Length and Transfer-Encoding are given together");
  /* RFC 9112 §6.1: an HTTP/1.0 message's Transfer-Encoding is faulty framing. */
  if (coding && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Transfer-Encoding is not HTTP/1.0's");
  if (coding && strcasecmp(coding, "chunked") != 0)
    return http_queue_rpc_error(conn, MHD_HTTP_NOT_IMPLEMENTED, TG_RPC_INVALID_REQUEST,
                                "Transfer-Encoding other than chunked is not supported");
  if (length && strtoull(length, NULL, 10) > 2ull * TG_RPC_MAX_BODY)
    return refuse_too_large(s, conn, NULL, NULL);
  /* A DELETE's body means nothing (RFC 9110 §9.3.5); refused, it holds nothing, so a DELETE
   * need not count among its caller's requests (below). */
  if (strcmp(method, "DELETE") == 0 && (coding || (length && strtoull(length, NULL, 10) > 0)))
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A DELETE takes no body");
  /* DNS rebinding: a page elsewhere must not reach a server on this machine. */
  _cleanup_free_ char *origin = NULL, *host = NULL;
  if (!http_header_value(conn, "Origin", &origin) || !http_header_value(conn, "Host", &host))
    return MHD_NO;
  if (!http_origin_ok(s, origin) || (s->loopback && !http_host_ok(s, authority ? authority : host)))
    return http_queue_rpc_error(conn, MHD_HTTP_FORBIDDEN, TG_RPC_INVALID_REQUEST,
                                "Forbidden origin or host");
  peer *p = http_peer_of(conn);
  caller who = authenticate(s, conn, http_peer_db(p), rq->principal, rq->token_hash);
  if (who != CALLER_KNOWN) return refuse_caller(s, conn, who);
  rq->checked_ms = tg_monotonic_ms();
  bool full = false;
  /* A known caller has a peer: its token was checked on the peer's database. A DELETE is
   * not counted: holding nothing (it has no body), it frees what the caller holds, so a
   * caller at its bound can always end a session. */
  if (!s->cfg->no_auth && strcmp(method, "DELETE") != 0 &&
      !(p->answering = http_request_begin(s, rq->principal, false, &full)))
    return full ? http_queue_rpc_error(conn, MHD_HTTP_TOO_MANY_REQUESTS, TG_RPC_INVALID_REQUEST,
                                       "Too many requests of this caller are answered at once; "
                                       "end one (a stream) or wait")
                : MHD_NO;
  char *accept = NULL;
  if (!http_header_value(conn, "Accept", &accept)) return MHD_NO;
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
    atomic_store(&s->last_request_ms, tg_monotonic_ms());
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
    if (!rq->taker && !(rq->taker = http_share_get(s, rq->principal))) return MHD_NO;
    if (rq->past || rq->len + *upload_size > TG_RPC_MAX_BODY ||
        http_taking_past(s, rq->taker, *upload_size, &rq->busy_status)) {
      if (!rq->past) {
        if (!(rq->past = malloc(sizeof *rq->past))) return MHD_NO;
        tg_rpc_id_scan_init(rq->past);
        tg_rpc_id_scan_feed(rq->past, rq->body, rq->len);
        rq->dropped = rq->len;
        http_taking_count(s, rq->taker, rq->len, true);
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
    http_taking_count(s, rq->taker, *upload_size, false);
    rq->body[rq->len] = 0;
    *upload_size = 0;
    return MHD_YES;
  }
  /* The request is whole: it is answered now. */
  peer *p = http_peer_of(conn);
  if (p) atomic_store(&p->due_by, 0);
  tg_db *db = http_peer_db(p);
  if (tg_monotonic_ms() - rq->checked_ms > TOKEN_RECHECK_MS) {
    char principal[TG_UUID_LEN + 1];
    caller who = authenticate(s, conn, db, principal, rq->token_hash);
    if (who != CALLER_KNOWN) return refuse_caller(s, conn, who);
  }
  if (rq->past && rq->busy_status) return refuse_busy(s, conn, rq, rq->past);
  if (rq->past) return refuse_too_large(s, conn, rq, rq->past);
  if (strcmp(method, "POST") == 0) {
    if (!db)
      return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                                  "No database");
    return handle_post(s, conn, db, rq->principal, rq);
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
  if (strcmp(method, "DELETE") == 0) return handle_delete(s, conn, db, rq);
  if (strcmp(method, "GET") == 0) return handle_get(s, conn, db, rq);
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
  bool large = rq->len + rq->dropped >= TRIM_AFTER_BYTES;
  if (rq->taker) {
    http_taking_count(s, rq->taker, rq->len + rq->decoded, true);
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

int tg_http_start(const tg_http_config *cfg, tg_http **ret, unsigned *ret_port) {
  struct sockaddr_storage addr = {0};
  bool loopback = false;
  if (http_parse_listen(cfg->listen, &addr, &loopback) < 0) return TG_E_INVAL;
  if (cfg->no_auth && !loopback) {
    tg_log(TG_LOG_ERROR, "serve: --no-auth is only allowed on a loopback address");
    return TG_E_INVAL;
  }
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
  int own = http_own_url(&h->s, &addr, &h->s.public_url);
  if (own == TG_OK && !(h->s.token_uses = tg_token_uses_new())) own = TG_E_NOMEM;
  if (own < 0) {
    tg_http_stop(h);
    return own;
  }
  tg_env base = http_server_env(&h->s, NULL);
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
         pthread_create(&h->s.pool[h->s.n_pool], NULL, http_pool_main, &h->s) == 0)
    h->s.n_pool++;
  if (h->s.n_pool > 0)
    h->s.sweeper_started = pthread_create(&h->s.sweeper, NULL, http_sweeper_main, &h->s) == 0;
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
      http_idle_timeout_s(&h->s),
      MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, &h->s, MHD_OPTION_NOTIFY_CONNECTION,
      on_connection, &h->s, MHD_OPTION_END);
  int why = errno;
  if (!h->daemon && http_same_file(fd, given)) close(given); /* still open: not closed by it */
  close(fd);
  h->listen_fd = -1;
  if (!h->daemon) {
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s", cfg->listen, strerror(why));
    tg_http_stop(h);
    return TG_E_IO;
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

/* The runs of the sessions the stop ended, once nothing of them runs. One the database does
 * not end (logged) is left running, to the next server's start: it ends it as failed. */
static void end_runs_left(server *s) {
  tg_db *db = NULL;
  if (s->runs_to_end && http_thread_db(s, &db)) http_end_session_runs(s, db);
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
  end_runs_left(s);
  http_tell_held_back_mhd_lines(s, true);
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

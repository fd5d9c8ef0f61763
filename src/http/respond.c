/* Queuing responses: plain, JSON and JSON-RPC errors, each counted against the bounds on
 * output held but the smallest (SMALL_ANSWER_BYTES). */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

/* A JSON answer this small goes out uncounted, whatever the bounds on output: one a
 * connection at most (1 MB in all), the error in its place would be about as large, and
 * most answers (initialize's, ping's, most calls') are this small. */
#define SMALL_ANSWER_BYTES 4096

/* A small answer of n bytes was queued: its request stops counting among its caller's
 * requests now, as libmicrohttpd's completion of it may come after the client has it and
 * sent its next. What bounds it then is the time its client has to take it, as for a large
 * one (see http_queue_reply): else a client taking none of its answers, on connection after
 * connection, could hold them past its count. */
static void small_answer_queued(struct MHD_Connection *conn, size_t n) {
  peer *p = http_peer_of(conn);
  if (!p) return;
  atomic_store(&p->due_by, tg_monotonic_ms() + http_slow_limit_ms(p->srv, n));
  http_request_done_once(p->srv, &p->answering);
}

/* A response; allow: the Allow header of a 405 (the methods of its route). */
enum MHD_Result http_respond(struct MHD_Connection *conn, unsigned status, const char *type,
                             const char *body, const char *session_id, const char *allow) {
  size_t n = body ? strlen(body) : 0;
  struct MHD_Response *res =
      MHD_create_response_from_buffer(n, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
  enum MHD_Result r = res ? http_respond_with(conn, status, res, type, session_id, allow) : MHD_NO;
  if (r == MHD_YES && n <= SMALL_ANSWER_BYTES) small_answer_queued(conn, n);
  return r;
}

/* Queues res (destroyed here) with its headers; type, session_id and allow may be NULL. */
enum MHD_Result http_respond_with(struct MHD_Connection *conn, unsigned status,
                                  struct MHD_Response *res, const char *type,
                                  const char *session_id, const char *allow) {
  if (type) MHD_add_response_header(res, "Content-Type", type);
  if (session_id) MHD_add_response_header(res, "Mcp-Session-Id", session_id);
  if (allow) MHD_add_response_header(res, "Allow", allow);
  /* A body refused for its coding or type is told which codings are taken (RFC 9110 §12.5.3):
   * none but the body as it is. */
  if (status == MHD_HTTP_UNSUPPORTED_MEDIA_TYPE)
    MHD_add_response_header(res, "Accept-Encoding", "identity");
  /* Nothing more is read from a connection after an error. Debian 12's libmicrohttpd frames
   * some requests otherwise than a proxy in front may: it ends the headers at a line with no
   * name (": x"), so that a POST's body may go unseen; the POST then fails, and its body must
   * not be read after it as a request of its own. (A folded framing header is refused: see
   * admit.) */
  if (status >= 400) MHD_add_response_header(res, "Connection", "close");
  enum MHD_Result r = MHD_queue_response(conn, status, res);
  MHD_destroy_response(res);
  return r;
}

/* A response on /mcp. */
enum MHD_Result http_queue(struct MHD_Connection *conn, unsigned status, const char *type,
                           const char *body, const char *session_id) {
  return http_respond(conn, status, type, body, session_id,
                      status == MHD_HTTP_METHOD_NOT_ALLOWED ? "GET, POST, DELETE" : NULL);
}

/* The answer to a GET or DELETE naming a session that is gone, or not the caller's, and to a
 * request its session's end left unanswered (it names none: the request was cancelled). */
enum MHD_Result http_session_not_found(struct MHD_Connection *conn) {
  return http_queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST,
                              "Session not found");
}

/* The answer to a POST that gets no message: 202 when it holds notifications and responses
 * only. A request gets no answer once cancelled, but a POST holding one must be answered
 * with JSON or an event stream: one that ends with no event. */
enum MHD_Result http_queue_unanswered(struct MHD_Connection *conn, bool holds_request,
                                      const char *session_id) {
  if (!holds_request) return http_queue(conn, MHD_HTTP_ACCEPTED, NULL, NULL, session_id);
  struct MHD_Response *res = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  enum MHD_Result r = res ? http_queue_sse(conn, res, session_id) : MHD_NO;
  if (r == MHD_YES) small_answer_queued(conn, 0);
  return r;
}

/* Answers with one encoded message (text, stolen). */
static enum MHD_Result queue_text(struct MHD_Connection *conn, unsigned status, char *text,
                                  const char *session_id) {
  if (!text) return http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
  enum MHD_Result r = http_queue(conn, status, "application/json", text, session_id);
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
    http_request_done_once(a->srv, &a->answering);
    return MHD_CONTENT_READER_END_OF_STREAM;
  }
  size_t k = a->n - (size_t)pos < max ? a->n - (size_t)pos : max;
  memcpy(out, a->text + pos, k);
  if (pos + k == a->n) http_request_done_once(a->srv, &a->answering);
  return (ssize_t)k;
}

static void json_answer_free(void *cls) {
  json_answer *a = cls;
  http_request_done_once(a->srv, &a->answering);
  http_held_count_in(a->srv, a->share, a->n, true, false);
  http_share_put(a->srv, a->share);
  free(a->text);
  free(a);
}

/* Answers principal's request id, or batch when not NULL, with its reply (text, encoded,
 * stolen) as JSON, within the bounds on output not delivered yet unless it is small; past
 * them, an error naming the same request (each of the batch's) takes its place, as on a
 * stream. */
enum MHD_Result http_queue_reply(server *s, struct MHD_Connection *conn, const char *principal,
                                 unsigned status, char *text, json_t *id,
                                 const tg_rpc_msg *batch, const char *session_id) {
  size_t n = text ? strlen(text) : 0;
  if (n <= SMALL_ANSWER_BYTES) return queue_text(conn, status, text, session_id);
  json_answer *a = calloc(1, sizeof *a);
  if (a && !(a->share = http_share_get(s, principal))) {
    free(a);
    a = NULL;
  }
  if (!a) {
    free(text);
    return http_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, NULL);
  }
  a->srv = s;
  a->n = n;
  if (http_past_bounds(s, a->share, 0, a->n)) {
    char *error = http_too_large(s, id, batch, a->n);
    free(text);
    http_share_put(s, a->share);
    free(a);
    return queue_text(conn, status, error, session_id);
  }
  a->text = text;
  http_held_count_in(s, a->share, a->n, false, false);
  http_set_due_by(conn, tg_monotonic_ms() + http_slow_limit_ms(s, a->n));
  peer *p = http_peer_of(conn);
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
  return http_respond_with(conn, status, res, "application/json", session_id, NULL);
}

enum MHD_Result http_queue_json(struct MHD_Connection *conn, unsigned status, json_t *msg,
                                const char *session_id) {
  char *text = msg ? tg_rpc_encode(msg) : NULL;
  json_decref(msg);
  return queue_text(conn, status, text, session_id);
}

enum MHD_Result http_queue_rpc_error(struct MHD_Connection *conn, unsigned status, int code,
                                     const char *message) {
  return http_queue_json(conn, status, tg_rpc_error(NULL, code, message, NULL), NULL);
}

/* The error (code, message, data: stolen, may be NULL) refusing msg (tg_rpc_refusal), with
 * status. */
enum MHD_Result http_queue_refusal_with(struct MHD_Connection *conn, unsigned status,
                                        const tg_rpc_msg *msg, int code, const char *message,
                                        json_t *data) {
  return http_queue_json(conn, status, tg_rpc_refusal(msg, code, message, data), NULL);
}

enum MHD_Result http_queue_refusal_as(struct MHD_Connection *conn, unsigned status,
                                      const tg_rpc_msg *msg, int code, const char *message) {
  return http_queue_refusal_with(conn, status, msg, code, message, NULL);
}

enum MHD_Result http_queue_refusal(struct MHD_Connection *conn, unsigned status,
                                   const tg_rpc_msg *msg, const char *message) {
  return http_queue_refusal_as(conn, status, msg, TG_RPC_INVALID_REQUEST, message);
}

/* A POST's body: gathered within the bounds on a message and on the bodies held at once, and
 * refused past them, naming the requests its text names. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Takes the next *size bytes of rq's body (data), sent on conn, and sets *size to 0. A body
 * past the bound, or past the bounds on bodies held at once, is dropped as it comes, scanned
 * for the id its refusal names, and refused once it ends (libmicrohttpd answers only then);
 * one that goes on as long again past the bound (chunked: its length unsaid) has its
 * connection closed instead (MHD_NO, as without memory), and the question it names, if any,
 * fails as for any answer too large to read. */
enum MHD_Result http_body_take(server *s, struct MHD_Connection *conn, request *rq,
                               const char *data, size_t *size) {
  if (!rq->taker && !(rq->taker = http_share_get(s, rq->principal))) return MHD_NO;
  if (rq->past || rq->len + *size > TG_RPC_MAX_BODY ||
      http_taking_past(s, rq->taker, *size, &rq->busy_status)) {
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
    tg_rpc_id_scan_feed(rq->past, data, *size);
    rq->dropped += *size;
    *size = 0;
    if (rq->dropped <= 2ull * TG_RPC_MAX_BODY) return MHD_YES;
    json_t *err = tg_rpc_too_large(rq->past);
    if (err) http_answer_unreadable(s, conn, rq, rq->past, err);
    json_decref(err);
    if (tg_log_may(&s->overlong_logged_ms))
      tg_log(TG_LOG_WARN, "http: closed a connection whose body went on past twice the bound "
                          "on a message's size (%u bytes; logged once a minute at most)",
             TG_RPC_MAX_BODY);
    http_close_on_purpose();
    return MHD_NO;
  }
  char *grown = realloc(rq->body, rq->len + *size + 1);
  if (!grown) return MHD_NO;
  memcpy(grown + rq->len, data, *size);
  rq->body = grown;
  rq->len += *size;
  http_taking_count(s, rq->taker, *size, false);
  rq->body[rq->len] = 0;
  *size = 0;
  return MHD_YES;
}

/* The error err (released: one, or a batch's, each naming a request) refusing a body that
 * does not decode, as the refusal for its media type, why, naming the same requests. NULL
 * without memory. */
json_t *http_media_refusal(json_t *err, const char *why) {
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
 * did (scan); with the refusal of its Accept or Content-Type first (rq's), as a body within
 * the bounds would be. */
enum MHD_Result http_refuse_busy(server *s, struct MHD_Connection *conn, const request *rq,
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
  json_t *refusal = tg_rpc_scan_refusal(scan, code, message, data);
  if (rq->refused_media)
    return http_queue_json(conn, rq->refused_media_status,
                           http_media_refusal(refusal, rq->refused_media), NULL);
  return http_queue_json(conn, rq->busy_status, refusal, NULL);
}

/* A message's values take more than its text's bytes once decoded (the two bytes of "{}"
 * become a table): the excess is counted with its body against the bounds on bodies held at
 * once, before it is decoded and until it is answered (the text is let go once decoded).
 * False (rq->busy_status set) when it would pass them. */
bool http_take_decoded(server *s, request *rq) {
  size_t held = tg_rpc_reckon(rq->body ? rq->body : "", rq->len);
  size_t more = held > rq->len ? held - rq->len : 0;
  if (!rq->taker || !more) return true;
  if (http_taking_past(s, rq->taker, more, &rq->busy_status)) return false;
  http_taking_count(s, rq->taker, more, false);
  rq->decoded = more;
  return true;
}

/* Gives back, once, what rq's body (and its message) counted against the bounds on bodies
 * held, when neither is held any more: at its end, or before, as its answer may stay open
 * long after (a listen stream's). */
void http_body_let_go(server *s, request *rq) {
  if (!rq->taker || rq->let_go) return;
  http_taking_count(s, rq->taker, rq->len + rq->decoded, true);
  rq->let_go = true;
}

/* The ids rq's body names, as an error refusing it may name them. */
void http_scan_body(const request *rq, tg_rpc_id_scan *scan) {
  tg_rpc_id_scan_init(scan);
  tg_rpc_id_scan_feed(scan, rq->body ? rq->body : "", rq->len);
}

/* A body past the bound (scan: what it names; NULL: unread) is refused with 413, or, read,
 * with the refusal of its Accept or Content-Type first (rq's), as a body within the bound
 * would be. */
enum MHD_Result http_refuse_too_large(server *s, struct MHD_Connection *conn,
                                      const request *rq, const tg_rpc_id_scan *scan) {
  json_t *err = tg_rpc_too_large(scan);
  if (err && rq) http_answer_unreadable(s, conn, rq, scan, err);
  if (rq && rq->refused_media)
    return http_queue_json(conn, rq->refused_media_status,
                           http_media_refusal(err, rq->refused_media), NULL);
  return http_queue_json(conn, MHD_HTTP_CONTENT_TOO_LARGE, err, NULL);
}

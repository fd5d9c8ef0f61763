/* GET and DELETE /mcp, a legacy session's own routes: its standalone stream, the resumption
 * of its streams, and its end. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

/* DELETE /mcp: ends a legacy session. */
enum MHD_Result http_handle_delete(server *s, struct MHD_Connection *conn, tg_db *db,
                                   const request *rq) {
  _cleanup_free_ char *sid = NULL;
  if (!http_session_id(conn, &sid)) return MHD_NO;
  if (!sid)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Mcp-Session-Id is required");
  session *x = http_session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return http_session_not_found(conn);
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
  bool resumes = http_resumes_streams(x->state.version);
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
enum MHD_Result http_handle_get(server *s, struct MHD_Connection *conn, tg_db *db,
                                const request *rq) {
  const char *principal = rq->principal;
  _cleanup_free_ char *sid = NULL, *last = NULL;
  if (!http_session_id(conn, &sid) ||
      !http_header_value(conn, "Last-Event-ID", &last))
    return MHD_NO;
  /* Without a session there is no stream to offer (2026-07-28 is POST only): what is left of
   * this route is POST. */
  if (!sid) return http_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "POST");
  if (!rq->takes_events)
    return http_queue_rpc_error(conn, MHD_HTTP_NOT_ACCEPTABLE, TG_RPC_INVALID_REQUEST,
                                "Accept must include text/event-stream");
  session *x = http_session_find(s, sid, rq->principal, rq->token_hash);
  if (!x) return http_session_not_found(conn);
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
  if (st) return http_queue_stream(conn, st, reader_id);
  if (status != MHD_HTTP_METHOD_NOT_ALLOWED)
    return http_queue_rpc_error(conn, status, TG_RPC_INVALID_REQUEST, why);
  /* No other stream is offered on GET while one is open: POST and DELETE are left. */
  _cleanup_free_ char *text = tg_rpc_error_text(NULL, TG_RPC_INVALID_REQUEST, why, NULL);
  return text ? http_respond(conn, status, "application/json", text, NULL, "POST, DELETE") : MHD_NO;
}

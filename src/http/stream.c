/* The output of calls: what each caller's answers hold (shares), and the SSE streams a
 * worker feeds and connections read, with their replay for Last-Event-ID.
 *
 * A call that may wait on its client runs on a worker thread (any other call that may
 * stream, on its connection's thread, feeds a stream the same way). Its connection waits for
 * the first thing it says: a final answer alone goes out as one JSON response with its own
 * HTTP status (so a -32021 is a 400); a notification or a request to the client first turns
 * the answer into an SSE stream that carries everything that follows. A client closing a
 * sessionless stream (2026-07-28) cancels its call; a session's streams outlive their
 * connection. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define REPLAY_MAX_BYTES (256u * 1024u)        /* delivered SSE output kept for Last-Event-ID */
#define RETRY_MS 500     /* the reconnection delay a primed stream asks of the client */

/* principal's share, with a reference for the caller; NULL without memory. */
held_share *http_share_get(server *s, const char *principal) {
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

void http_share_put(server *s, held_share *h) {
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
 * pool (true), counted until http_request_done; NULL when principal has its most of them
 * already (*full), or without memory. */
held_share *http_request_begin(server *s, const char *principal, bool pool_call, bool *full) {
  held_share *h = http_share_get(s, principal);
  unsigned most = s->cfg->max_requests_per_principal ? s->cfg->max_requests_per_principal
                                                     : TG_HTTP_MAX_REQUESTS_PER_PRINCIPAL;
  pthread_mutex_lock(&s->shares_lock);
  unsigned *n = h ? pool_call ? &h->pool_calls : &h->requests : NULL;
  *full = n && *n >= most;
  if (n && !*full) ++*n;
  pthread_mutex_unlock(&s->shares_lock);
  if (*full) http_share_put(s, h);
  return *full ? NULL : h;
}

/* How many calls of the caller holding h wait or run on the pool. */
unsigned http_pool_calls_of(server *s, held_share *h) {
  pthread_mutex_lock(&s->shares_lock);
  unsigned n = h->pool_calls;
  pthread_mutex_unlock(&s->shares_lock);
  return n;
}

void http_request_done(server *s, held_share *h, bool pool_call) {
  pthread_mutex_lock(&s->shares_lock);
  --*(pool_call ? &h->pool_calls : &h->requests);
  pthread_mutex_unlock(&s->shares_lock);
  http_share_put(s, h);
}

/* Whether n bytes more of a request body its caller (share h) sends pass the bounds on
 * bodies held at once: *status then says whose (429: the caller's half, 503: the server's).
 * Looked at, then counted (http_taking_count), as http_past_bounds does. */
bool http_taking_past(server *s, held_share *h, size_t n, unsigned *status) {
  if (atomic_load(&h->taking) + n > s->taking_max / 2) *status = MHD_HTTP_TOO_MANY_REQUESTS;
  else if (atomic_load(&s->taking) + n > s->taking_max) *status = MHD_HTTP_SERVICE_UNAVAILABLE;
  else return false;
  return true;
}

/* n bytes more (or, with less, fewer) of request bodies held for the caller of share h. */
void http_taking_count(server *s, held_share *h, size_t n, bool less) {
  if (less) {
    atomic_fetch_sub(&h->taking, n);
    atomic_fetch_sub(&s->taking, n);
  } else {
    atomic_fetch_add(&h->taking, n);
    atomic_fetch_add(&s->taking, n);
  }
}

/* The request *counted counts (NULL: none) is done, once: *counted becomes NULL. */
void http_request_done_once(server *s, held_share **counted) {
  if (!*counted) return;
  http_request_done(s, *counted, false);
  *counted = NULL;
}

/* n bytes more (or, with less, fewer) held for a caller (share), counted for the server s
 * and the caller: in all (kept false) or of the delivered ones kept (kept true). A byte
 * leaves kept before it leaves held, and joins held before kept, so that kept never passes
 * held. */
void http_held_count_in(server *s, held_share *share, size_t n, bool less, bool kept) {
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
  http_held_count_in(st->srv, st->share, n, less, kept);
}

/* What of held is not delivered yet. */
static size_t undelivered(atomic_size_t *held, atomic_size_t *kept) {
  size_t k = atomic_load(kept), h = atomic_load(held);
  return h > k ? h - k : 0;
}

/* Whether n bytes more of a caller's output (share), past unread bytes of the same answer,
 * pass the bounds on output not delivered yet. The bounds are looked at, then counted:
 * outputs at the same instant may pass them by their own sizes. */
bool http_past_bounds(server *s, held_share *share, size_t unread, size_t n) {
  return unread + n > TG_HTTP_MAX_STREAM_BYTES ||
         undelivered(&s->held, &s->kept) + n > s->held_max ||
         undelivered(&share->held, &share->kept) + n > s->held_max / 2;
}

/* The error that takes the place of a reply of n bytes past the bounds, to request id or to
 * batch (when not NULL: then one error naming each of its requests); encoded, NULL without
 * memory. */
char *http_too_large(server *s, json_t *id, const tg_rpc_msg *batch, size_t n) {
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
void http_set_sent_locked(stream *st, size_t sent) {
  if (sent > st->sent) st->delivered_at = tg_monotonic_ms();
  if (sent > st->seen) {
    held_count(st, sent - st->seen, false, true);
    st->seen = sent;
  }
  st->sent = sent;
}

/* A new stream of principal's; NULL without memory. */
stream *http_stream_new(server *s, unsigned no, const char *principal) {
  stream *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  if (!(st->share = http_share_get(s, principal))) {
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

void http_stream_ref(stream *st) {
  pthread_mutex_lock(&st->lock);
  st->refs++;
  pthread_mutex_unlock(&st->lock);
}

void http_stream_release(stream *st) {
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
  http_share_put(st->srv, st->share);
  free(st->buf);
  free(st->ends);
  free(st);
}

/* Nothing more will be appended: a reader ends once it has the rest. */
void http_stream_end(stream *st) {
  pthread_mutex_lock(&st->lock);
  st->done = true;
  pthread_cond_broadcast(&st->ready);
  pthread_mutex_unlock(&st->lock);
}

/* Appends text (n bytes, one whole event); called with the lock held. */
static int append_locked(stream *st, const char *text, size_t n, bool bounded) {
  if (bounded && http_past_bounds(st->srv, st->share, st->len - st->seen, n)) return TG_E_TOO_LARGE;
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
void http_append_reply_locked(stream *st, char *text, json_t *id) {
  size_t n = text ? strlen(text) : 0;
  if (append_event_locked(st, text, true) == TG_E_TOO_LARGE)
    append_event_locked(st, http_too_large(st->srv, id, NULL, n), false);
}

/* One encoded event (text, stolen) on st. */
int http_stream_text(stream *st, char *text) {
  pthread_mutex_lock(&st->lock);
  int r = append_event_locked(st, text, true);
  pthread_mutex_unlock(&st->lock);
  return r;
}

/* A notification or request related to the call; msg is stolen. */
int http_stream_event(stream *st, json_t *msg) {
  char *text = tg_rpc_encode(msg);
  json_decref(msg);
  return http_stream_text(st, text);
}

/* The worker's answer to request id (text, encoded, stolen; NULL when it had none to give:
 * the request was cancelled). With status 0 (cancelled), text goes only onto an answer begun
 * (an event stream): one not begun gets none. */
void http_stream_finish(stream *st, char *text, json_t *id, int status) {
  pthread_mutex_lock(&st->lock);
  if (st->streaming) {
    if (text) http_append_reply_locked(st, text, id);
  } else if (status == 0) {
    free(text);
  } else {
    st->final = text;
    /* Copies, as the stream outlives the request's message on another thread (see
     * tg_mcp_answer); without memory, an error in place of the answer names no id. */
    st->final_id = json_deep_copy(id);
    st->final_status = status;
  }
  st->done = true;
  pthread_cond_broadcast(&st->ready);
  pthread_mutex_unlock(&st->lock);
}

/* Offset in buf of event number n (first <= n <= next_event + 1). */
size_t http_event_offset_locked(const stream *st, unsigned n) {
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
size_t http_event_start_locked(const stream *st, size_t at) {
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
void http_drop_delivered_locked(stream *st, size_t keep) {
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
void http_compact_locked(stream *st) {
  http_drop_delivered_locked(st, st->no && room_to_keep(st) ? REPLAY_MAX_BYTES : 0);
}

/* Starts st with a priming event (an id, the reconnection delay and no data), so that a
 * client cut off before any message can still resume it. Called before any event. */
int http_prime_locked(stream *st) {
  char priming[64];
  int n = snprintf(priming, sizeof priming, "id: %u-0\nretry: %d\ndata: \n\n", st->no, RETRY_MS);
  st->first = 0;
  st->reader_primed = st->primed = true; /* a resumption starts after it */
  /* Unbounded: a few bytes a stream, and without them a client could not resume. */
  return append_locked(st, priming, (size_t)n, false);
}

int http_prime_first(stream *st) {
  pthread_mutex_lock(&st->lock);
  int r = st->primed || st->next_event || st->len ? 0 : http_prime_locked(st);
  pthread_mutex_unlock(&st->lock);
  return r;
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
void http_stream_poll(stream *st) {
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
void http_stream_detach(stream *st, unsigned reader_id) {
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

/* One connection's hold on a stream. */
typedef struct reader {
  stream *st;
  unsigned id;
  int fd;
  peer *peer; /* its connection's, which outlives the response */
  bool due;   /* the stream ended: its client was given until when to take the rest */
  /* Its request's count among its caller's (see http_request_begin), until reader_answered;
   * NULL: none. */
  held_share *answering;
} reader;

/* The request rd answers stops counting among its caller's requests: its answer ended, or
 * all of it that will come was handed over, which its client may have, and answer with its
 * next request, before libmicrohttpd completes this one. Its client still has to take the
 * rest in time (see due). */
static void reader_answered(reader *rd) { http_request_done_once(rd->st->srv, &rd->answering); }

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
  bool comment_now = st->quiet_start; /* an answer begun quiet opens with one */
  st->quiet_start = false;
  while (st->sent == st->len && !st->done && !st->cutting && rd->id == st->reader) {
    if (!comment_now) {
      if (!tg_timed_wait(&st->ready, &st->lock, HANGUP_CHECK_MS)) continue;
      if (http_client_gone(rd->fd)) {
        pthread_mutex_unlock(&st->lock);
        return stream_ended(rd);
      }
      if ((quiet_ms += HANGUP_CHECK_MS) < st->srv->keepalive_ms) continue;
    }
    /* A comment line keeps proxies and clients from timing the stream out. */
    static const char keepalive[] = ": keep-alive\n\n";
    pthread_mutex_unlock(&st->lock);
    size_t n = sizeof keepalive - 1 < max ? sizeof keepalive - 1 : max;
    memcpy(out, keepalive, n);
    return (ssize_t)n;
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
    atomic_store(&rd->peer->due_by, tg_monotonic_ms() + http_slow_limit_ms(st->srv, n));
    rd->due = true;
  }
  if (n > max) n = max;
  memcpy(out, st->buf + st->sent, n);
  http_set_sent_locked(st, st->sent + n);
  bool all_handed = st->done && current && !st->cutting && st->sent == end;
  http_compact_locked(st);
  pthread_mutex_unlock(&st->lock);
  if (all_handed) reader_answered(rd);
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  reader *rd = cls;
  reader_answered(rd);
  http_stream_detach(rd->st, rd->id);
  http_stream_release(rd->st);
  free(rd);
}

/* Queues res (destroyed here) as a 200 SSE answer. */
enum MHD_Result http_queue_sse(struct MHD_Connection *conn, struct MHD_Response *res,
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
enum MHD_Result http_queue_stream(struct MHD_Connection *conn, stream *st, unsigned id) {
  reader *rd = malloc(sizeof *rd);
  if (!rd) {
    http_stream_detach(st, id);
    http_stream_release(st);
    return MHD_NO;
  }
  *rd = (reader){.st = st, .id = id, .fd = http_connection_fd(conn), .peer = http_peer_of(conn)};
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
  return http_queue_sse(conn, res, NULL);
}

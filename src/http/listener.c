/* 2026-07-28 subscriptions/listen streams. A listen request's answer stays open as its
 * subscription: a watch of its own sends the acknowledgement and then the list changes on
 * it. It ends when the client closes it, or with the server, which first sends the listen
 * result. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"

static int listener_send(void *self, json_t *msg) { return http_stream_event(self, msg); }

void http_listener_put(listener *l) {
  server *s = l->srv;
  pthread_mutex_lock(&s->lock);
  bool last = --l->refs == 0;
  pthread_mutex_unlock(&s->lock);
  if (!last) return;
  tg_mcp_watch_free(l->watch);
  http_stream_release(l->st);
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
  if (found) http_listener_put(l);
}

/* The server ends l's subscription: its result (with meta, borrowed) ends its stream, and l
 * leaves the registry. */
void http_listener_end(listener *l, json_t *meta) {
  tg_mcp_watch_end(l->watch, meta);
  http_stream_end(l->st);
  listener_unlink(l);
}

/* The client closed the listen stream: the subscription ends with it. */
void http_listener_closed(void *arg) {
  listener_unlink(arg);
  http_listener_put(arg); /* the answer's reference */
}

/* Whether l's client closed its stream, which l's reader notices within HANGUP_CHECK_MS. */
static bool listener_left(listener *l) {
  pthread_mutex_lock(&l->st->lock);
  bool left = l->st->reading && http_client_gone(l->st->reader_fd);
  pthread_mutex_unlock(&l->st->lock);
  return left;
}

/* Takes out of the registry, with s->lock held, the listeners whose clients closed their
 * streams, so that a client listening again at once is not refused for them meanwhile (the
 * registry stays within its bounds: the server's end counts on it). Their registry
 * references go to gone[], at most TG_HTTP_MAX_LISTENS; returns how many. */
static size_t unlink_left_locked(server *s, listener *gone[TG_HTTP_MAX_LISTENS]) {
  size_t n = 0;
  for (listener **p = &s->listeners; *p && n < TG_HTTP_MAX_LISTENS;) {
    listener *o = *p;
    if (!listener_left(o)) {
      p = &o->next;
      continue;
    }
    *p = o->next;
    s->n_listeners--;
    gone[n++] = o;
  }
  return n;
}

/* Registers a listen stream of principal, within the bounds, with a reference for the caller
 * (http_listener_serve passes it to the answer); NULL with *status and *why when it cannot. */
listener *http_listener_open(server *s, const char *principal, const char *token_hash,
                             unsigned *status, const char **why) {
  listener *l = calloc(1, sizeof *l);
  stream *st = http_stream_new(s, 0, principal);
  *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  *why = "Out of memory";
  if (l && st && tg_mcp_watch_new(listener_send, st, &l->watch) == 0) {
    if (s->mcp.fixtures) tg_mcp_watch_prompts(l->watch);
    l->srv = s;
    l->st = st;
    l->refs = 2; /* the registry's and the caller's */
    snprintf(l->principal, sizeof l->principal, "%s", principal);
    snprintf(l->token_hash, sizeof l->token_hash, "%s", token_hash);
    listener *gone[TG_HTTP_MAX_LISTENS];
    pthread_mutex_lock(&s->lock);
    size_t n_gone = unlink_left_locked(s, gone), mine = 0;
    for (listener *o = s->listeners; o; o = o->next) mine += strcmp(o->principal, principal) == 0;
    *status = s->closing ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_TOO_MANY_REQUESTS;
    *why = s->closing                              ? "The server is stopping"
           : s->n_listeners >= TG_HTTP_MAX_LISTENS ? "Too many open subscriptions/listen streams"
           : mine >= TG_HTTP_MAX_LISTENS_PER_PRINCIPAL
               ? "Too many open subscriptions/listen streams of this caller"
               : NULL;
    if (!*why) {
      l->next = s->listeners;
      s->listeners = l;
      s->n_listeners++;
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n_gone; i++) http_listener_put(gone[i]);
    if (!*why) return l;
  }
  if (l) tg_mcp_watch_free(l->watch);
  if (st) http_stream_release(st);
  free(l);
  return NULL;
}

/* The listen request was acknowledged: its answer stays open as the subscription, holding
 * the caller's reference. */
enum MHD_Result http_listener_serve(struct MHD_Connection *conn, listener *l) {
  stream *st = l->st;
  pthread_mutex_lock(&st->lock);
  st->streaming = true;
  st->reading = true;
  st->reader_fd = http_connection_fd(conn);
  st->on_close = http_listener_closed;
  st->close_arg = l;
  st->refs++;
  unsigned id = st->reader;
  pthread_mutex_unlock(&st->lock);
  return http_queue_stream(conn, st, id);
}

/* The server stops: every listen stream gets its result and ends, and its connection has a
 * moment to deliver that before the daemon closes it. */
void http_listeners_end(server *s) {
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
    http_stream_ref(l->st);
    ended[n++] = l->st;
    http_listener_end(l, meta);
    http_listener_put(l);
  }
  int64_t deadline = tg_monotonic_ms() + DRAIN_MS;
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&ended[i]->lock);
    for (int64_t left; ended[i]->reading && (left = deadline - tg_monotonic_ms()) > 0;)
      tg_timed_wait(&ended[i]->ready, &ended[i]->lock, left);
    pthread_mutex_unlock(&ended[i]->lock);
    http_stream_release(ended[i]);
  }
}

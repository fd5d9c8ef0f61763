/* Legacy (2025-11-25) sessions: their table, admission and reaping, and the run of an
 * active agent's session. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/run.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/status.h"

void http_session_release_locked(server *s, session *x) {
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
    if (x->kept[i]) http_stream_release(x->kept[i]);
  if (x->standalone) http_stream_release(x->standalone);
  tg_mcp_session_done(&x->state);
  /* Nobody else holds the session, so nobody uses these; freeing them takes no lock. */
  tg_mcp_watch_free(x->watch);
  tg_mcp_inflight_free(x->inflight);
  pthread_mutex_destroy(&x->run_opening);
  pthread_cond_destroy(&x->answered);
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
  if (x->standalone) r = http_stream_text(x->standalone, text);
  else free(text);
  pthread_mutex_unlock(&x->srv->lock);
  return r;
}

/* A request of session x was cancelled: a tool of x waiting for its client looks again, and
 * a call waiting in line for a pool thread leaves the line at once. */
static void session_cancellation_heard(void *arg) {
  session *x = arg;
  pthread_mutex_lock(&x->srv->lock);
  pthread_cond_broadcast(&x->answered);
  pthread_mutex_unlock(&x->srv->lock);
  http_drop_cancelled_in_line(x->srv);
}

/* Where id's sessions are in the index by id. Hashed, not read as the hex it should be, since
 * a client may name any id. */
static session **bucket_of(server *s, const char *id) {
  return &s->by_id[tg_hash_text(id) & (TG_HTTP_SESSION_BUCKETS - 1)];
}

void http_session_unlink_locked(server *s, session *x) {
  for (session **p = &s->sessions; *p; p = &(*p)->next) {
    if (*p != x) continue;
    *p = x->next;
    session **in_bucket = bucket_of(s, x->id);
    while (*in_bucket != x) in_bucket = &(*in_bucket)->next_in_bucket;
    *in_bucket = x->next_in_bucket;
    s->n_sessions--;
    x->dead = true;
    pthread_cond_broadcast(&x->answered);
    /* The GET stream ends with its session; the client's reconnection then gets a 404. */
    if (x->standalone) http_stream_end(x->standalone);
    http_session_release_locked(s, x);
    return;
  }
}

/* Ends x for its client (DELETE, or its token revoked): its requests, running or waiting for
 * a thread, are cancelled, since nobody waits for their answers any more (the caller, once
 * it let go of the lock, takes those waiting off the line: http_drop_cancelled_in_line). (A
 * server that stops lets them run: its clients did not go away.) */
void http_session_end_locked(server *s, session *x) {
  tg_mcp_inflight_cancel_all(x->inflight);
  x->ended = true;
  http_session_unlink_locked(s, x);
}

/* Whether a client reads one of x's streams (its GET stream, or one it resumed): it then
 * uses x, if only to listen. Otherwise, *last (when given) becomes the later of itself and
 * the time a connection last stopped reading one (a client reconnecting as its GET stream
 * ended is not idle). */
static bool read_now_locked(session *x, int64_t *last) {
  for (size_t i = 0; i <= TG_HTTP_KEPT_STREAMS; i++) {
    stream *st = i < TG_HTTP_KEPT_STREAMS ? x->kept[i] : x->standalone;
    if (!st) continue;
    pthread_mutex_lock(&st->lock);
    bool reading = st->reading;
    if (last && st->read_until > *last) *last = st->read_until;
    pthread_mutex_unlock(&st->lock);
    if (reading) return true;
  }
  return false;
}

/* Whether a request holds x (its refs but the table's are looks of the sweeper). */
static bool held_locked(const session *x) { return x->refs - x->checking > 1; }

/* A session neither held nor read. */
static bool unused_locked(session *x) { return !held_locked(x) && !read_now_locked(x, NULL); }

/* Whether x, unused, was last used over idle_ms ago: by a request, or by a connection that
 * read one of its streams. */
static bool idle_locked(session *x, int64_t now, int64_t idle_ms) {
  int64_t last = x->last_used;
  return !held_locked(x) && !read_now_locked(x, &last) && now - last > idle_ms;
}

/* Drops the sessions unused for TG_HTTP_SESSION_IDLE_MS: the sweeper's look (a server that
 * only 2026-07-28 clients use opens none), and before a new session makes room. */
void http_drop_idle_locked(server *s) {
  int64_t now = tg_monotonic_ms();
  int64_t idle_ms = s->cfg->session_idle_ms ? s->cfg->session_idle_ms : TG_HTTP_SESSION_IDLE_MS;
  for (session *x = s->sessions, *next; x; x = next) {
    next = x->next;
    if (idle_locked(x, now, idle_ms)) http_session_unlink_locked(s, x);
  }
}

/* Makes room for a session of principal: drops idle sessions, then, when principal holds its
 * share or the table is full, the least recently used session not in use (principal's own
 * when it is principal's share that is full). False when every candidate is in use. */
static bool reap_locked(server *s, const char *principal) {
  http_drop_idle_locked(s);
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
  if (victim) http_session_unlink_locked(s, victim);
  return victim ||
         (mine < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL && s->n_sessions < TG_HTTP_MAX_SESSIONS);
}

/* A new session of principal, held by the caller alone and not in the table yet (see
 * http_session_admit); NULL when out of memory. */
session *http_session_new(server *s, const char *principal, const char *token_hash) {
  session *x = calloc(1, sizeof *x);
  unsigned char raw[SESSION_ID_BYTES];
  if (!x || !tg_random_bytes(raw, sizeof raw) ||
      tg_mcp_inflight_new(session_cancellation_heard, x, &x->inflight) < 0 ||
      tg_mcp_watch_new(session_send, x, &x->watch) < 0) {
    if (x) tg_mcp_inflight_free(x->inflight);
    free(x);
    return NULL;
  }
  x->srv = s;
  pthread_cond_init(&x->answered, NULL);
  x->questions = (tg_mcp_questions){.lock = &s->lock, .changed = &x->answered, .at = x->asks,
                                    .n = MAX_ASKS};
  if (s->mcp.fixtures) tg_mcp_watch_prompts(x->watch);
  pthread_mutex_init(&x->run_opening, NULL);
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
bool http_session_admit(server *s, session *x) {
  pthread_mutex_lock(&s->lock);
  x->last_used = tg_monotonic_ms();
  x->use_order = ++s->session_uses;
  bool room = reap_locked(s, x->principal);
  if (room) {
    x->next = s->sessions;
    s->sessions = x;
    session **bucket = bucket_of(s, x->id);
    x->next_in_bucket = *bucket;
    *bucket = x;
    s->n_sessions++;
    x->refs++;
  }
  pthread_mutex_unlock(&s->lock);
  return room;
}

/* Ends every run of the list; one an operator ended first stays as it is. */
static int end_runs(void *arg, tg_db *db) {
  for (session_run *run = arg; run; run = run->next) {
    int r = tg_run_end(db, run->id, run->status);
    if (r < 0 && r != TG_E_NOTFOUND) return r;
  }
  return TG_OK;
}

/* Opens x's run (tg_run_open_session) unless x ended meanwhile: false, with *why, when it
 * cannot be. One that opens as x ends is ended at once (queued for the sweep when the
 * database refuses it), so that no run of an ended session is left running. */
static bool open_run(server *s, tg_db *db, session *x, const char **why) {
  pthread_mutex_lock(&s->lock);
  bool dead = x->dead;
  pthread_mutex_unlock(&s->lock);
  if (dead) return true;
  session_run *run = calloc(1, sizeof *run);
  bool later = false;
  *why = "out of memory";
  bool opened = run && tg_run_open_session(db, x->principal, *s->holder ? s->holder : NULL,
                                           run->id, &later, why) == TG_OK;
  bool orphan = false; /* opened as x ended */
  pthread_mutex_lock(&s->lock);
  if (opened) x->run_later = later;
  if (opened && *run->id && !x->dead) {
    x->run = run;
    run = NULL;
  } else if (opened && *run->id) {
    run->status = x->revoked ? "cancelled" : "completed";
    orphan = true;
  }
  pthread_mutex_unlock(&s->lock);
  if (orphan && tg_db_batch(db, end_runs, run) < 0) {
    pthread_mutex_lock(&s->lock);
    run->next = s->runs_to_end;
    s->runs_to_end = run;
    pthread_mutex_unlock(&s->lock);
    run = NULL;
  }
  free(run);
  return opened;
}

/* The id of x's run, for a call (tg_mcp_request.session_run), or NULL when it has none. An
 * agent's session opens it through db at its first call, or, opened while its agent was not
 * active (draft, paused), at its first call once the agent is: one call of the session at a
 * time, and one try for the calls that waited on it, so that it opens one, and a database
 * that refuses it holds each of them once at most. One that cannot start is logged, its calls
 * served as runs of their own (where a tool capped per run refuses them), and the next tries
 * again. */
const char *http_session_run(server *s, tg_db *db, session *x) {
  pthread_mutex_lock(&s->lock);
  session_run *run = x->run;
  bool later = x->run_later;
  unsigned tries = x->run_tries;
  pthread_mutex_unlock(&s->lock);
  if (run || !later) return run ? run->id : NULL;
  pthread_mutex_lock(&x->run_opening);
  pthread_mutex_lock(&s->lock);
  bool due = !x->run && x->run_later && x->run_tries == tries; /* none tried meanwhile */
  if (due) x->run_tries++;
  pthread_mutex_unlock(&s->lock);
  const char *why;
  if (due && !open_run(s, db, x, &why) && tg_log_may(&s->run_opens_logged_ms))
    tg_log(TG_LOG_ERROR, "http: a session's run could not start, so its call was served as a "
           "run of its own: %s (logged once a minute at most)", why);
  pthread_mutex_unlock(&x->run_opening);
  pthread_mutex_lock(&s->lock);
  run = x->run;
  pthread_mutex_unlock(&s->lock);
  return run ? run->id : NULL;
}

/* Ends the runs of the sessions released, in one transaction, so that a database another
 * process keeps busy holds its caller (the sweep, a DELETE) once at most. When that fails
 * otherwise, each is ended alone, so that one the database refuses holds back no other.
 * Those not ended (logged) are tried again at the next sweep. */
void http_end_session_runs(server *s, tg_db *db) {
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
session *http_session_find(server *s, const char *id, const char *principal,
                           const char *token_hash) {
  pthread_mutex_lock(&s->lock);
  session *x = *bucket_of(s, id);
  while (x && strcmp(x->id, id) != 0) x = x->next_in_bucket;
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

bool http_session_ended(server *s, session *x) {
  if (!x) return false;
  pthread_mutex_lock(&s->lock);
  bool ended = x->ended;
  pthread_mutex_unlock(&s->lock);
  return ended;
}

/* Tests: see server.h. */
void (*_Atomic tg_http_test_session_found)(const char *id);

void http_session_put(server *s, session *x) {
  if (!x) return;
  pthread_mutex_lock(&s->lock);
  http_session_release_locked(s, x);
  pthread_mutex_unlock(&s->lock);
}

/* The sweeper thread: list changes, revoked tokens, idle sessions, stale output, slow clients,
 * expired tasks and the rest of a quiet server, every TG_HTTP_CHECK_MS. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

typedef struct watched {
  tg_mcp_watch *watch;
  const char *principal;
  session *x;  /* held, or */
  listener *l; /* held */
} watched;

/* Announces the list changes of one watch, on the calling thread's database connection. A
 * failure is logged, and the next check tries again. */
static void check_watch(server *s, tg_db *db, tg_mcp_watch *watch, const char *principal) {
  tg_env env = http_server_env(s, db);
  int r = tg_mcp_watch_check(watch, &env, principal);
  if (r < 0) tg_log(TG_LOG_WARN, "http: a tool list could not be checked for changes (%d)", r);
}

/* Checks the watches of every session and listen stream (principal NULL: the periodic
 * sweep), or those a message of principal on session x (NULL: none) can have changed at
 * once: x's and principal's listen streams, at most TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; what
 * it changed for others, the sweep announces. So no request pays for everyone's. */
void http_check_lists(server *s, tg_db *db, const char *principal, session *only) {
  /* Before the server's lock, which the watch's sending takes under the watch's lock. */
  bool first = only && tg_mcp_watch_unchecked(only->watch);
  pthread_mutex_lock(&s->lock);
  size_t n = 0, cap = (principal ? 1 : s->n_sessions) + s->n_listeners;
  watched *all = cap ? malloc(cap * sizeof *all) : NULL;
  for (session *x = principal ? only : s->sessions; all && x; x = principal ? NULL : x->next) {
    /* A session hears of list changes on its GET stream only: without one, its baseline
     * stays, and the first check once a stream is open announces what changed meanwhile.
     * The baseline is set by its own message that made it listen (notifications/initialized),
     * so that a change before its first stream is announced too. */
    if (!x->standalone && !first) continue;
    x->refs++;
    x->checking++;
    all[n++] = (watched){.watch = x->watch, .principal = x->principal, .x = x};
  }
  for (listener *l = s->listeners; all && l; l = l->next) {
    if (principal && strcmp(l->principal, principal) != 0) continue;
    l->refs++;
    all[n++] = (watched){.watch = l->watch, .principal = l->principal, .l = l};
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) {
    check_watch(s, db, all[i].watch, all[i].principal);
    if (!all[i].x) {
      http_listener_put(all[i].l);
      continue;
    }
    pthread_mutex_lock(&s->lock);
    all[i].x->checking--;
    http_session_release_locked(s, all[i].x);
    pthread_mutex_unlock(&s->lock);
  }
  free(all);
}

/* Drops the delivered output of st when st delivered nothing for replay_keep_ms. */
static void forget_stale(stream *st, int64_t now) {
  pthread_mutex_lock(&st->lock);
  if (now - st->delivered_at > st->srv->replay_keep_ms) http_drop_delivered_locked(st, 0);
  pthread_mutex_unlock(&st->lock);
}

/* What idle sessions keep for resumption goes after a while, so that it does not take for
 * long the room that other callers' output would be kept in. Called with the server's lock
 * held. */
static void forget_stale_output_locked(server *s) {
  int64_t now = tg_monotonic_ms();
  for (session *x = s->sessions; x; x = x->next) {
    for (size_t i = 0; i < TG_HTTP_KEPT_STREAMS; i++)
      if (x->kept[i]) forget_stale(x->kept[i], now);
    if (x->standalone) forget_stale(x->standalone, now);
  }
}

void (*_Atomic tg_http_test_looking)(void);

/* A session, listen stream or stateless call's stream held by end_revoked, and the hash of
 * the token that opened it. */
typedef struct opened {
  session *x;
  listener *l;
  stream *call;
  bool tasks; /* the tasks the token started */
  char hash[TG_TOKEN_HASH_LEN + 1];
} opened;

static int by_hash(const void *a, const void *b) {
  return strcmp(((const opened *)a)->hash, ((const opened *)b)->hash);
}

/* What a token opened ends once it is revoked: its sessions (and with them every stream and
 * call of theirs), its subscriptions/listen streams (with their result, as when the server
 * stops) and its stateless calls (cancelled, as when their client leaves). Each request is
 * checked as it comes; these live on past that, so the sweeper looks. */
static void end_revoked(server *s, tg_db *db) {
  _cleanup_json_ json_t *task_tokens = tg_mcp_tasks_token_hashes(s->mcp.tasks);
  pthread_mutex_lock(&s->lock);
  size_t cap = s->n_sessions + s->n_listeners + s->n_token_calls + json_object_size(task_tokens),
         n = 0;
  opened *all = cap ? malloc(cap * sizeof *all) : NULL;
  const char *hash;
  json_t *unused;
  json_object_foreach(all ? task_tokens : NULL, hash, unused) {
    all[n] = (opened){.tasks = true};
    snprintf(all[n++].hash, sizeof all->hash, "%s", hash);
  }
  for (session *x = s->sessions; all && x; x = x->next) {
    if (!x->token_hash[0]) continue;
    x->refs++;
    x->checking++; /* the look keeps it, it does not use it: else no session could make room */
    all[n] = (opened){.x = x};
    memcpy(all[n++].hash, x->token_hash, sizeof x->token_hash);
  }
  for (listener *l = s->listeners; all && l; l = l->next) {
    if (!l->token_hash[0]) continue;
    l->refs++;
    all[n] = (opened){.l = l};
    memcpy(all[n++].hash, l->token_hash, sizeof l->token_hash);
  }
  for (worker *w = s->token_calls; all && w; w = w->next_call) {
    http_stream_ref(w->st);
    all[n] = (opened){.call = w->st};
    memcpy(all[n++].hash, w->token_hash, sizeof w->token_hash);
  }
  pthread_mutex_unlock(&s->lock);
  void (*looking)(void) = tg_http_test_looking;
  if (looking) looking();
  /* Each token looked up once: the sessions and streams of one token side by side. */
  if (n) qsort(all, n, sizeof *all, by_hash);
  bool revoked = false;
  for (size_t i = 0; i < n; i++) {
    char id[TG_UUID_LEN + 1];
    if (i == 0 || strcmp(all[i].hash, all[i - 1].hash) != 0)
      revoked = tg_principal_by_token_hash(db, all[i].hash, NULL, id) == TG_E_NOTFOUND;
    if (all[i].tasks) {
      if (revoked) tg_mcp_tasks_end_token(s->mcp.tasks, all[i].hash);
      continue;
    }
    if (all[i].call) {
      if (revoked) {
        pthread_mutex_lock(&all[i].call->lock);
        all[i].call->revoked = true;
        pthread_mutex_unlock(&all[i].call->lock);
        http_cancel_call(all[i].call);
      }
      http_stream_release(all[i].call);
      continue;
    }
    if (all[i].l) {
      if (revoked) {
        json_t *meta = tg_mcp_result_meta(&s->mcp);
        http_listener_end(all[i].l, meta);
        json_decref(meta);
      }
      http_listener_put(all[i].l);
      continue;
    }
    pthread_mutex_lock(&s->lock);
    all[i].x->checking--;
    if (revoked && !all[i].x->dead) {
      all[i].x->revoked = true;
      http_session_end_locked(s, all[i].x);
    }
    http_session_release_locked(s, all[i].x);
    pthread_mutex_unlock(&s->lock);
    if (revoked) http_drop_cancelled_in_line(s);
  }
  free(all);
}

/* Shuts down the connections past their due time (see peer); their threads see it and close
 * them. A connection idle between requests is closed by the idle timeout before that. */
static void cut_slow_clients(server *s) {
  int64_t now = tg_monotonic_ms();
  unsigned cut = 0;
  pthread_mutex_lock(&s->peers_lock);
  for (peer *p = s->peers; p; p = p->next) {
    int64_t due_by = atomic_load(&p->due_by);
    if (p->cut || !due_by || now <= due_by) continue;
    shutdown(p->fd, SHUT_RDWR);
    p->cut = true;
    cut++;
  }
  pthread_mutex_unlock(&s->peers_lock);
  if ((cut += atomic_exchange(&s->slow_cut, 0)) == 0) return;
  if (tg_log_may(&s->slow_logged_ms))
    tg_log(TG_LOG_WARN, "http: closed %u connection(s) still sending a request %lld s after they "
           "opened or were last answered, or taking an answer for that long and %u s more "
           "every 2 MB of it (logged once a minute at most)", cut,
           (long long)(http_slow_limit_ms(s, 0) / 1000), http_idle_timeout_s(s));
  else
    atomic_fetch_add(&s->slow_cut, cut); /* told in the next line */
}

/* Once no request began or completed for rest_after_ms, closes the spare database connections
 * and gives the memory freed back to the system (malloc keeps what the threads of closed
 * connections freed): once a quiet spell, and again when connections closed since left
 * theirs. rested: the last request's time at the last rest. */
static void rest_when_quiet(server *s, int64_t *rested) {
  int64_t last = atomic_load(&s->last_request_ms);
  long long after = s->cfg->rest_after_ms ? s->cfg->rest_after_ms : TG_HTTP_REST_AFTER_MS;
  if (tg_monotonic_ms() - last < after) return;
  tg_db *spare[SPARE_DBS];
  pthread_mutex_lock(&s->peers_lock);
  unsigned n = s->n_spare_dbs;
  memcpy(spare, s->spare_dbs, n * sizeof *spare);
  s->n_spare_dbs = 0;
  s->spare_dbs_closed += n;
  pthread_mutex_unlock(&s->peers_lock);
  for (unsigned i = 0; i < n; i++) tg_db_close(spare[i]);
  if (n == 0 && last == *rested) return;
  *rested = last;
  malloc_trim(0);
}

/* Each sweep is timed from the end of the last: one longer than the period does not pile up. */
void *http_sweeper_main(void *arg) {
  server *s = arg;
  tg_db *db = NULL;
  int64_t rested = 0;
  pthread_mutex_lock(&s->lock);
  int64_t next = tg_monotonic_ms() + TG_HTTP_CHECK_MS;
  while (!s->stopping) {
    int64_t now = tg_monotonic_ms();
    if (now < next) {
      tg_timed_wait(&s->sweep_stop, &s->lock, next - now);
      continue;
    }
    pthread_mutex_unlock(&s->lock);
    if (http_thread_db(s, &db)) {
      end_revoked(s, db);
      http_check_lists(s, db, NULL, NULL);
    }
    cut_slow_clients(s);
    tg_mcp_tasks_drop_expired(s->mcp.tasks);
    rest_when_quiet(s, &rested);
    http_tell_held_back_mhd_lines(s, false);
    if (db && s->cfg->rate_limit) tg_call_write_rate_refusals(s->cfg->rate_limit, db, false);
    if (db) tg_token_uses_write(s->token_uses, db, false); /* may wait for a writer: last */
    pthread_mutex_lock(&s->lock);
    forget_stale_output_locked(s);
    http_drop_idle_locked(s);
    pthread_mutex_unlock(&s->lock);
    /* The runs of the sessions this sweep ended, or that a DELETE left to it (may wait for
     * a writer). */
    if (db) http_end_session_runs(s, db);
    pthread_mutex_lock(&s->lock);
    next = tg_monotonic_ms() + TG_HTTP_CHECK_MS;
  }
  pthread_mutex_unlock(&s->lock);
  if (http_thread_db(s, &db)) tg_token_uses_write(s->token_uses, db, true); /* the last minute's */
  tg_db_close(db);
  return NULL;
}

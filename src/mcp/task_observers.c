/* MCP tasks: who hears of a principal's tasks as they change. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/tasks_internal.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/status.h"

/* Tells o of those of its tasks that changed since it last heard; with t->observing held
 * (which guards o's seen). What could not be delivered is told at the next publish. */
static void publish_to(tg_mcp_task_observer *o) {
  tg_mcp_tasks *t = o->store;
  struct {
    json_t *task;
    size_t at;    /* in o->watched */
    uint64_t seq; /* the change told */
    bool ended;
  } news[TG_MCP_MAX_TASKS];
  size_t n = 0;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < o->n; i++) {
    task *k = mcp_tasks_find_locked(t, o->principal, o->watched[i].id);
    if (!k || k->seq == o->watched[i].seen) continue;
    json_t *j = mcp_task_json_locked(k, k->status, true);
    if (j) news[n++] = (__typeof__(news[0])){j, i, k->seq, mcp_task_terminal(k->status)};
    else tg_log(TG_LOG_WARN, "mcp: out of memory telling of a task's change");
  }
  pthread_mutex_unlock(&t->lock);
  /* Outside the store's lock: delivering may wait on the client's stream. */
  bool ended = false;
  for (size_t i = 0; i < n; i++) {
    if (o->deliver(o->self, o, news[i].task) < 0) {
      news[i].ended = false;
      continue;
    }
    o->watched[news[i].at].seen = news[i].seq;
    ended |= news[i].ended;
  }
  if (!ended) return;
  /* The client learnt how those ended, as from tasks/get. */
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < n; i++) {
    const char *id = o->watched[news[i].at].id;
    task *k = news[i].ended ? mcp_tasks_find_locked(t, o->principal, id) : NULL;
    if (!k || k->seq != news[i].seq) continue;
    k->read = true;
    if (!o->watched[news[i].at].told_end) k->unseen_by--;
    o->watched[news[i].at].told_end = true;
  }
  pthread_mutex_unlock(&t->lock);
}

/* Tells the observers of principal (empty: of all) what changed. */
void mcp_tasks_publish(tg_mcp_tasks *t, const char *principal) {
  pthread_mutex_lock(&t->observing);
  for (tg_mcp_task_observer *o = t->observers; o; o = o->next)
    if (!*principal || strcmp(o->principal, principal) == 0) publish_to(o);
  pthread_mutex_unlock(&t->observing);
}

/* Whether names (an array of strings) holds id. */
static bool names(const json_t *list, const char *id) {
  size_t i;
  json_t *each;
  json_array_foreach(list, i, each) if (strcmp(json_string_value(each), id) == 0) return true;
  return false;
}

int tg_mcp_tasks_observer_new(tg_mcp_tasks *t, tg_db *db, const char *principal_id,
                              json_t *ids, tg_mcp_task_deliver deliver, void *self,
                              tg_mcp_task_observer **ret, json_t **honoured) {
  tg_mcp_task_observer *o = calloc(1, sizeof *o);
  json_t *named = json_array();
  if (!o || !named) {
    free(o);
    json_decref(named);
    return TG_E_NOMEM;
  }
  *o = (tg_mcp_task_observer){.store = t, .deliver = deliver, .self = self};
  snprintf(o->principal, sizeof o->principal, "%s", principal_id);
  int r = 0;
  size_t i;
  json_t *value;
  pthread_mutex_lock(&t->lock);
  json_array_foreach(ids, i, value) {
    const char *id = json_string_value(value);
    task *k = id && !names(named, id) ? mcp_tasks_find_locked(t, principal_id, id) : NULL;
    if (!k) continue;
    if (o->n == TG_MCP_MAX_TASKS) break; /* cannot be: a principal holds no more */
    if (json_array_append_new(named, json_string(id)) < 0) {
      r = TG_E_NOMEM;
      break;
    }
    k->unseen_by++;
    snprintf(o->watched[o->n++].id, sizeof o->watched[0].id, "%s", id);
  }
  pthread_mutex_unlock(&t->lock);
  /* The others, outside the store's lock (the database is read, and may be written: see
   * mcp_tasks_not_here): those that ended. One the database cannot tell of is left out, as
   * unknown. */
  json_array_foreach(r == 0 ? ids : NULL, i, value) {
    const char *id = json_string_value(value);
    if (!id || names(named, id) || o->n + o->n_ended == TG_MCP_MAX_TASKS) continue;
    json_t *shown = NULL;
    int got = db ? mcp_tasks_not_here(t, db, principal_id, id, &shown) : TG_E_NOTFOUND;
    if (got == 0 && json_array_append_new(named, json_string(id)) == 0) {
      o->ended[o->n_ended++] = shown;
      continue;
    }
    json_decref(shown);
    if (got == 0) {
      r = TG_E_NOMEM;
      break;
    }
    if (got < 0 && got != TG_E_NOTFOUND)
      tg_log(TG_LOG_WARN, "mcp: a listen names task %s, which the database could not tell of", id);
  }
  if (r < 0) {
    tg_mcp_tasks_observer_free(o);
    json_decref(named);
    return r;
  }
  *ret = o;
  *honoured = named;
  return 0;
}

void tg_mcp_tasks_observe(tg_mcp_task_observer *o) {
  tg_mcp_tasks *t = o->store;
  pthread_mutex_lock(&t->observing);
  if (o->n) { /* else it would never hear a thing */
    o->next = t->observers;
    t->observers = o;
    o->observed = true;
    publish_to(o);
  }
  for (size_t i = 0; i < o->n_ended; i++)
    if (o->deliver(o->self, o, TAKE_PTR(o->ended[i])) < 0)
      tg_log(TG_LOG_WARN, "mcp: how a task ended could not be told to its listener");
  pthread_mutex_unlock(&t->observing);
}

void tg_mcp_tasks_observer_free(tg_mcp_task_observer *o) {
  if (!o) return;
  tg_mcp_tasks *t = o->store;
  pthread_mutex_lock(&t->observing);
  for (tg_mcp_task_observer **p = &t->observers; o->observed && *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  pthread_mutex_unlock(&t->observing);
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < o->n; i++) {
    const char *id = o->watched[i].id;
    task *k = o->watched[i].told_end ? NULL : mcp_tasks_find_locked(t, o->principal, id);
    if (k) k->unseen_by--;
  }
  pthread_mutex_unlock(&t->lock);
  for (size_t i = 0; i < o->n_ended; i++) json_decref(o->ended[i]);
  free(o);
}

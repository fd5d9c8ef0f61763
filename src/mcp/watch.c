#define _GNU_SOURCE
#include "mcp/watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/principal.h"
#include "mcp/jsonrpc.h"
#include "util/ids.h"
#include "util/status.h"

#define FP_LEN 32 /* SHA-256 */

/* The lists watched: their notification and their subscriptions/listen filter field. */
enum { LIST_TOOLS, LIST_PROMPTS, N_LISTS };
static const struct {
  const char *method;
  const char *filter;
} lists[N_LISTS] = {
    [LIST_TOOLS] = {"notifications/tools/list_changed", "toolsListChanged"},
    [LIST_PROMPTS] = {"notifications/prompts/list_changed", "promptsListChanged"},
};

/* Changes made outside the database (the conformance fixtures' triggers), per list, as the
 * touch clock's value at the latest, for each of the TOUCHERS principals that made one last,
 * so that they reach that principal's watches alone. A principal whose record was let go
 * for another's reads none, which its watches take for one more change. */
#define TOUCHERS 64
static pthread_mutex_t touches_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long touch_clock;
static struct toucher {
  char principal[TG_UUID_LEN + 1];
  unsigned long at[N_LISTS];
  unsigned long last; /* the clock at its latest change */
} touchers[TOUCHERS];

typedef struct subscription {
  json_t *id;
  bool wants[N_LISTS];
  tg_mcp_task_observer *tasks; /* NULL: it names no task */
} subscription;

struct tg_mcp_watch {
  /* One change of the subscriptions at a time, each with its tasks' observer: a task's
   * news reaches a subscription only after its acknowledgement, and none once it ended.
   * Taken before the store's observer lock, which is taken before lock. */
  pthread_mutex_t subscribing;
  /* One check at a time: two computed at once could store the older fingerprint last and
   * announce one change twice. Taken before lock. */
  pthread_mutex_t checking;
  pthread_mutex_t lock;
  int (*send)(void *self, json_t *msg);
  void *self;
  bool legacy;
  subscription subs[TG_MCP_MAX_SUBSCRIPTIONS];
  size_t n_subs;
  bool ended; /* the server ended its subscriptions: it takes no more */
  /* What the previous check saw; none until someone listens. */
  bool have_baseline;
  unsigned char tools_fp[FP_LEN];
  int64_t tools_epoch; /* the authorization epoch tools_fp was computed at */
  bool prompts;        /* its server offers prompts, to principals that act */
  bool acts;           /* whether the principal acted at the previous check */
  unsigned long touches_seen[N_LISTS];
  /* A change of the list that could not be announced to everyone (a stream full, no
   * memory): each check announces it again until it goes out. */
  bool owed[N_LISTS];
};

int tg_mcp_watch_new(int (*send)(void *self, json_t *msg), void *self, tg_mcp_watch **ret) {
  tg_mcp_watch *w = calloc(1, sizeof *w);
  if (!w) return TG_E_NOMEM;
  pthread_mutex_init(&w->checking, NULL);
  pthread_mutex_init(&w->subscribing, NULL);
  pthread_mutex_init(&w->lock, NULL);
  w->send = send;
  w->self = self;
  *ret = w;
  return TG_OK;
}

void tg_mcp_watch_free(tg_mcp_watch *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_subs; i++) {
    tg_mcp_tasks_observer_free(w->subs[i].tasks);
    json_decref(w->subs[i].id);
  }
  pthread_mutex_destroy(&w->lock);
  pthread_mutex_destroy(&w->subscribing);
  pthread_mutex_destroy(&w->checking);
  free(w);
}

static bool listening_locked(const tg_mcp_watch *w) { return w->legacy || w->n_subs; }

/* The first listener starts from what the next check sees, not from an older baseline, nor
 * hears of a change owed to listeners gone. */
static void start_listening_locked(tg_mcp_watch *w) {
  if (listening_locked(w)) return;
  w->have_baseline = false;
  memset(w->owed, 0, sizeof w->owed);
}

void tg_mcp_watch_prompts(tg_mcp_watch *w) {
  pthread_mutex_lock(&w->lock);
  w->prompts = true;
  pthread_mutex_unlock(&w->lock);
}

void tg_mcp_watch_legacy(tg_mcp_watch *w) {
  pthread_mutex_lock(&w->lock);
  start_listening_locked(w);
  w->legacy = true;
  pthread_mutex_unlock(&w->lock);
}

static json_t *tagged(const char *method, json_t *params, json_t *id) {
  json_t *meta = json_pack("{s:O}", TG_MCP_META_SUBSCRIPTION, id);
  if (!params || !meta) json_decref(meta); /* set_new takes it, even when it fails */
  if (!params || !meta || json_object_set_new(params, "_meta", meta) < 0) {
    json_decref(params);
    return NULL;
  }
  return tg_rpc_notification(method, params);
}

/* A task that subscription o names changed: notifications/tasks with its DetailedTask. */
static int deliver_task(void *self, tg_mcp_task_observer *o, json_t *task) {
  tg_mcp_watch *w = self;
  int r = TG_E_NOTFOUND;
  pthread_mutex_lock(&w->lock);
  size_t i = 0;
  while (i < w->n_subs && w->subs[i].tasks != o) i++;
  if (i < w->n_subs) {
    json_t *msg = tagged("notifications/tasks", task, w->subs[i].id);
    r = msg ? w->send(w->self, msg) : TG_E_NOMEM;
  } else {
    json_decref(task); /* the subscription is ending: nobody is told */
  }
  pthread_mutex_unlock(&w->lock);
  return r;
}

/* The acknowledgement's notifications: what of filter is honoured. A subscription naming
 * tasks gets its observer in sub->tasks. */
static int honour(tg_mcp_watch *w, json_t *filter, tg_mcp_tasks *tasks, tg_db *db,
                  const char *principal_id, subscription *sub, json_t **ret) {
  json_t *honoured = json_object();
  if (!honoured) return TG_E_NOMEM;
  int r = TG_OK;
  for (size_t i = 0; r == TG_OK && i < N_LISTS; i++) {
    sub->wants[i] = json_is_true(json_object_get(filter, lists[i].filter));
    if (sub->wants[i] && json_object_set_new(honoured, lists[i].filter, json_true()) < 0)
      r = TG_E_NOMEM;
  }
  json_t *ids = json_object_get(filter, "taskIds"), *named = NULL;
  if (r == TG_OK && tasks && ids)
    r = tg_mcp_tasks_observer_new(tasks, db, principal_id, ids, deliver_task, w, &sub->tasks,
                                  &named);
  if (r == TG_OK && named && json_object_set_new(honoured, "taskIds", named) < 0) r = TG_E_NOMEM;
  if (r < 0) {
    json_decref(honoured);
    tg_mcp_tasks_observer_free(sub->tasks);
    sub->tasks = NULL;
    return r;
  }
  *ret = honoured;
  return TG_OK;
}

int tg_mcp_watch_subscribe(tg_mcp_watch *w, json_t *id, json_t *filter, tg_mcp_tasks *tasks,
                           tg_db *db, const char *principal_id) {
  subscription sub = {.id = id};
  json_t *honoured = NULL;
  pthread_mutex_lock(&w->subscribing);
  int r = honour(w, filter, tasks, db, principal_id, &sub, &honoured);
  json_t *ack = r == TG_OK ? tagged("notifications/subscriptions/acknowledged",
                                    json_pack("{s:o}", "notifications", honoured), id)
                           : NULL;
  /* The subscription's own id: the request's is freed on its thread, and jansson's counts
   * order no free after another thread's reads. */
  json_t *own_id = r == TG_OK ? json_deep_copy(id) : NULL;
  if (r == TG_OK && (!ack || !own_id)) r = TG_E_NOMEM;
  if (r == TG_OK) {
    pthread_mutex_lock(&w->lock);
    r = w->ended                                ? TG_E_NOTFOUND
        : w->n_subs == TG_MCP_MAX_SUBSCRIPTIONS ? TG_E_TOO_LARGE
                                                : TG_OK;
    if (r == TG_OK) {
      /* Under the lock: the acknowledgement goes out before any notification it announces. */
      r = w->send(w->self, ack);
      ack = NULL;
    }
    if (r == TG_OK) {
      start_listening_locked(w);
      sub.id = own_id;
      own_id = NULL;
      w->subs[w->n_subs++] = sub;
    }
    pthread_mutex_unlock(&w->lock);
  }
  if (r == TG_OK && sub.tasks) tg_mcp_tasks_observe(sub.tasks);
  else if (r < 0) tg_mcp_tasks_observer_free(sub.tasks);
  pthread_mutex_unlock(&w->subscribing);
  json_decref(ack);
  json_decref(own_id);
  return r;
}

bool tg_mcp_watch_unsubscribe(tg_mcp_watch *w, json_t *id) {
  tg_mcp_task_observer *ended[TG_MCP_MAX_SUBSCRIPTIONS];
  size_t n = 0;
  pthread_mutex_lock(&w->subscribing);
  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < w->n_subs;) {
    if (!json_equal(w->subs[i].id, id)) {
      i++;
      continue;
    }
    ended[n++] = w->subs[i].tasks;
    json_decref(w->subs[i].id);
    memmove(w->subs + i, w->subs + i + 1, (--w->n_subs - i) * sizeof *w->subs);
  }
  pthread_mutex_unlock(&w->lock);
  /* Outside the lock, which a delivery to them may be waiting for. */
  for (size_t i = 0; i < n; i++) tg_mcp_tasks_observer_free(ended[i]);
  pthread_mutex_unlock(&w->subscribing);
  return n > 0;
}

bool tg_mcp_watch_holds(tg_mcp_watch *w, json_t *id) {
  pthread_mutex_lock(&w->lock);
  bool held = false;
  for (size_t i = 0; i < w->n_subs && !held; i++) held = json_equal(w->subs[i].id, id);
  pthread_mutex_unlock(&w->lock);
  return held;
}

bool tg_mcp_watch_unchecked(tg_mcp_watch *w) {
  pthread_mutex_lock(&w->lock);
  bool unchecked = listening_locked(w) && !w->have_baseline;
  pthread_mutex_unlock(&w->lock);
  return unchecked;
}

int tg_mcp_watch_end(tg_mcp_watch *w, json_t *meta) {
  int r = TG_OK;
  tg_mcp_task_observer *ended[TG_MCP_MAX_SUBSCRIPTIONS];
  size_t n = 0;
  pthread_mutex_lock(&w->subscribing);
  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < w->n_subs; i++) {
    json_t *id = w->subs[i].id;
    json_t *own = json_copy(meta);
    if (own && json_object_set(own, TG_MCP_META_SUBSCRIPTION, id) < 0) {
      json_decref(own);
      own = NULL;
    }
    json_t *msg = own ? tg_rpc_result(id, json_pack("{s:s,s:o}", "resultType", "complete",
                                                    "_meta", own))
                      : NULL;
    int sr = msg ? w->send(w->self, msg) : TG_E_NOMEM;
    if (r == TG_OK) r = sr;
    json_decref(id);
    ended[n++] = w->subs[i].tasks;
  }
  w->n_subs = 0;
  w->ended = true;
  pthread_mutex_unlock(&w->lock);
  for (size_t i = 0; i < n; i++) tg_mcp_tasks_observer_free(ended[i]);
  pthread_mutex_unlock(&w->subscribing);
  return r;
}

/* SHA-256 of the tool list principal_id is offered on MCP (tg_tools_usable_key), and
 * whether the principal acts (*acts: prompts are offered to those alone), built again only
 * when the authorization epoch moved (see check_serialized): a change of grants or policy
 * that leaves the list as it was is no change of it. */
static int tools_fingerprint(const tg_env *env, const char *principal_id,
                             unsigned char fp[FP_LEN], bool *acts) {
  tg_principal *p = NULL;
  int r = tg_principal_load(env->db, principal_id, &p);
  if (r < 0) return r;
  *acts = tg_principal_acts(p);
  char *text = NULL;
  r = tg_tools_usable_key(env, p, TG_SURFACE_MCP, &text);
  tg_principal_free(p);
  if (r < 0) return r;
  r = tg_sha256(text, strlen(text), fp);
  free(text);
  return r;
}

/* Tells every listener that wants it that list changed; called with the lock held. */
static int announce_locked(tg_mcp_watch *w, size_t list) {
  int r = TG_OK;
  if (w->legacy) {
    json_t *msg = tg_rpc_notification(lists[list].method, NULL);
    r = msg ? w->send(w->self, msg) : TG_E_NOMEM;
  }
  for (size_t i = 0; r == TG_OK && i < w->n_subs; i++) {
    if (!w->subs[i].wants[list]) continue;
    json_t *msg = tagged(lists[list].method, json_object(), w->subs[i].id);
    r = msg ? w->send(w->self, msg) : TG_E_NOMEM;
  }
  return r;
}

/* The changes principal_id made outside the database (see touchers), list by list. */
static void touches_of(const char *principal_id, unsigned long at[N_LISTS]) {
  memset(at, 0, N_LISTS * sizeof *at);
  pthread_mutex_lock(&touches_lock);
  for (size_t i = 0; i < TOUCHERS; i++)
    if (strcmp(touchers[i].principal, principal_id) == 0)
      memcpy(at, touchers[i].at, N_LISTS * sizeof *at);
  pthread_mutex_unlock(&touches_lock);
}

/* tg_mcp_watch_check with w->checking held. */
static int check_serialized(tg_mcp_watch *w, const tg_env *env, const char *principal_id) {
  unsigned char fp[FP_LEN];
  pthread_mutex_lock(&w->lock);
  bool listening = listening_locked(w), known = w->have_baseline, acts = w->acts;
  int64_t known_epoch = w->tools_epoch;
  memcpy(fp, w->tools_fp, FP_LEN);
  pthread_mutex_unlock(&w->lock);
  if (!listening) return TG_OK;
  /* The database work runs outside the lock: a listen request may arrive meanwhile. While
   * the authorization epoch stands, what the fingerprint is made of has not changed; it is
   * read first, so a change in between is caught by the next check. */
  int64_t epoch = 0;
  int r = tg_auth_epoch(env->db, &epoch);
  if (r == TG_OK && !(known && epoch == known_epoch))
    r = tools_fingerprint(env, principal_id, fp, &acts);
  if (r < 0) return r;
  unsigned long seen[N_LISTS];
  touches_of(principal_id, seen);
  pthread_mutex_lock(&w->lock);
  bool changed[N_LISTS] = {false};
  if (w->have_baseline) {
    for (size_t i = 0; i < N_LISTS; i++) changed[i] = seen[i] != w->touches_seen[i] || w->owed[i];
    changed[LIST_TOOLS] |= memcmp(fp, w->tools_fp, FP_LEN) != 0;
    changed[LIST_PROMPTS] |= w->prompts && acts != w->acts;
  }
  w->have_baseline = true;
  memcpy(w->tools_fp, fp, FP_LEN);
  w->tools_epoch = epoch;
  w->acts = acts;
  memcpy(w->touches_seen, seen, sizeof seen);
  for (size_t i = 0; i < N_LISTS; i++) {
    if (!changed[i]) continue;
    int announced = announce_locked(w, i);
    /* Only a new debt is reported: the caller logs it, and a client that reads nothing
     * would have it logged at every check. */
    if (announced < 0 && !w->owed[i] && r == TG_OK) r = announced;
    w->owed[i] = announced < 0;
  }
  pthread_mutex_unlock(&w->lock);
  return r;
}

int tg_mcp_watch_check(tg_mcp_watch *w, const tg_env *env, const char *principal_id) {
  pthread_mutex_lock(&w->checking);
  int r = check_serialized(w, env, principal_id);
  pthread_mutex_unlock(&w->checking);
  return r;
}

unsigned tg_mcp_watch_lists_in(const char *text, size_t len) {
  unsigned found = 0;
  for (size_t i = 0; i < N_LISTS; i++)
    if (memmem(text, len, lists[i].method, strlen(lists[i].method))) found |= 1u << i;
  return found;
}

void tg_mcp_watch_owe(tg_mcp_watch *w, unsigned lists_owed) {
  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < N_LISTS; i++)
    if (lists_owed & 1u << i) w->owed[i] = true;
  pthread_mutex_unlock(&w->lock);
}

bool tg_mcp_watch_touch(const char *method, const char *principal_id) {
  size_t list = 0;
  while (list < N_LISTS && strcmp(method, lists[list].method) != 0) list++;
  if (list == N_LISTS) return false;
  pthread_mutex_lock(&touches_lock);
  /* The principal's record, else the one changed least recently (a free one first). */
  struct toucher *t = NULL, *oldest = &touchers[0];
  for (size_t i = 0; i < TOUCHERS && !t; i++) {
    if (strcmp(touchers[i].principal, principal_id) == 0) t = &touchers[i];
    else if (touchers[i].last < oldest->last) oldest = &touchers[i];
  }
  if (!t) {
    t = oldest;
    memset(t, 0, sizeof *t);
    snprintf(t->principal, sizeof t->principal, "%s", principal_id);
  }
  t->at[list] = t->last = ++touch_clock;
  pthread_mutex_unlock(&touches_lock);
  return true;
}

#include "mcp/inflight.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

typedef struct entry {
  json_t *id;
  bool cancelled;
} entry;

struct tg_mcp_inflight {
  pthread_mutex_t lock;
  entry *entries;
  size_t n, cap;
  void (*wake)(void *arg);
  void *arg;
  bool closed; /* every request begun from now on starts cancelled (cancel_all) */
};

int tg_mcp_inflight_new(void (*wake)(void *arg), void *arg, tg_mcp_inflight **ret) {
  tg_mcp_inflight *t = calloc(1, sizeof *t);
  if (!t) return TG_E_NOMEM;
  pthread_mutex_init(&t->lock, NULL);
  t->wake = wake;
  t->arg = arg;
  *ret = t;
  return TG_OK;
}

void tg_mcp_inflight_free(tg_mcp_inflight *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) json_decref(t->entries[i].id);
  pthread_mutex_destroy(&t->lock);
  free(t->entries);
  free(t);
}

static size_t find_locked(const tg_mcp_inflight *t, json_t *id);

int tg_mcp_inflight_begin(tg_mcp_inflight *t, json_t *id) {
  int r = TG_OK;
  pthread_mutex_lock(&t->lock);
  size_t same = find_locked(t, id);
  bool cancelled = t->closed || (same < t->n && t->entries[same].cancelled);
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 4;
    entry *grown = realloc(t->entries, cap * sizeof *grown);
    if (grown) {
      t->entries = grown;
      t->cap = cap;
    } else {
      r = TG_E_NOMEM;
    }
  }
  if (r == TG_OK) t->entries[t->n++] = (entry){.id = json_incref(id), .cancelled = cancelled};
  pthread_mutex_unlock(&t->lock);
  return r;
}

/* Index of the latest entry of id, or n; called with the lock held. (Transports refuse a
 * request reusing the id of one still served, TG_MCP_INFLIGHT_REUSED_ID; two sent at once
 * may still both pass, and are then both served.) */
static size_t find_locked(const tg_mcp_inflight *t, json_t *id) {
  for (size_t i = t->n; i-- > 0;)
    if (json_equal(t->entries[i].id, id)) return i;
  return t->n;
}

bool tg_mcp_inflight_end(tg_mcp_inflight *t, json_t *id) {
  pthread_mutex_lock(&t->lock);
  size_t i = find_locked(t, id);
  bool cancelled = false;
  if (i < t->n) {
    cancelled = t->entries[i].cancelled;
    json_decref(t->entries[i].id);
    memmove(t->entries + i, t->entries + i + 1, (--t->n - i) * sizeof *t->entries);
  }
  pthread_mutex_unlock(&t->lock);
  return cancelled;
}

bool tg_mcp_inflight_cancel(tg_mcp_inflight *t, json_t *id) {
  pthread_mutex_lock(&t->lock);
  bool found = false;
  for (size_t i = 0; i < t->n; i++) {
    if (!json_equal(t->entries[i].id, id)) continue;
    t->entries[i].cancelled = true;
    found = true;
  }
  pthread_mutex_unlock(&t->lock);
  if (found && t->wake) t->wake(t->arg);
  return found;
}

void tg_mcp_inflight_cancel_all(tg_mcp_inflight *t) {
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->n; i++) t->entries[i].cancelled = true;
  t->closed = true;
  pthread_mutex_unlock(&t->lock);
}

bool tg_mcp_inflight_holds(tg_mcp_inflight *t, json_t *id) {
  pthread_mutex_lock(&t->lock);
  bool held = find_locked(t, id) < t->n;
  pthread_mutex_unlock(&t->lock);
  return held;
}

bool tg_mcp_inflight_cancelled(tg_mcp_inflight *t, json_t *id) {
  pthread_mutex_lock(&t->lock);
  size_t i = find_locked(t, id);
  bool cancelled = i < t->n && t->entries[i].cancelled;
  pthread_mutex_unlock(&t->lock);
  return cancelled;
}

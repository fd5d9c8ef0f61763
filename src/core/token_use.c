#include "core/token_use.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* An open-addressing table keyed by the token's hash, twice as large as it may hold. */
#define SLOTS (2 * TG_TOKEN_USES_MAX)

typedef struct use {
  bool taken;
  char hash[TG_TOKEN_HASH_LEN + 1];
  int64_t used_ms;    /* wall clock: the last use */
  int64_t written_ms; /* the use last written (0: none) */
  int64_t tried;      /* monotonic: when it was last written, or tried to be (0: never) */
} use;

struct tg_token_uses {
  pthread_mutex_t lock;
  size_t n;
  _Atomic int64_t full_logged_ms;
  use slots[SLOTS];
};

_Atomic int64_t tg_token_uses_test_later_ms;

static int64_t mono_now(void) { return tg_monotonic_ms() + tg_token_uses_test_later_ms; }

tg_token_uses *tg_token_uses_new(void) {
  tg_token_uses *u = calloc(1, sizeof *u);
  if (u) pthread_mutex_init(&u->lock, NULL);
  return u;
}

void tg_token_uses_free(tg_token_uses *u) {
  if (!u) return;
  pthread_mutex_destroy(&u->lock);
  free(u);
}

/* The slot holding hash, or the free one where it goes. A SHA-256 in hex is evenly spread:
 * its first digits place it. */
static use *slot_of(tg_token_uses *u, const char *hash) {
  char head[9];
  memcpy(head, hash, 8);
  head[8] = '\0';
  size_t i = (size_t)strtoul(head, NULL, 16) % SLOTS;
  while (u->slots[i].taken && strcmp(u->slots[i].hash, hash) != 0) i = (i + 1) % SLOTS;
  return &u->slots[i];
}

/* Not written, and not tried within the minute (all: whenever tried, as its server stops):
 * a write that failed is tried again a minute later, not at every request. */
static bool due(const use *e, int64_t mono, bool all) {
  return e->used_ms != e->written_ms &&
         (all || !e->tried || mono - e->tried >= TG_TOKEN_USE_WRITE_MS);
}

bool tg_token_used(tg_token_uses *u, const char hash[TG_TOKEN_HASH_LEN + 1]) {
  int64_t now = tg_now_ms(), mono = mono_now();
  pthread_mutex_lock(&u->lock);
  use *e = slot_of(u, hash);
  if (!e->taken && u->n < TG_TOKEN_USES_MAX) {
    *e = (use){.taken = true};
    memcpy(e->hash, hash, sizeof e->hash);
    u->n++;
  }
  bool recorded = e->taken, is_due = false;
  if (recorded) {
    e->used_ms = now;
    is_due = due(e, mono, false);
  }
  pthread_mutex_unlock(&u->lock);
  if (!recorded && tg_log_may(&u->full_logged_ms))
    tg_log(TG_LOG_WARN, "auth: more than %d tokens used within %d s: the uses of the tokens past "
           "them are not recorded meanwhile (logged once a minute at most)",
           TG_TOKEN_USES_MAX, TG_TOKEN_USE_WRITE_MS / 1000);
  return is_due;
}

/* Drops the uses written a minute ago or more (any_age: written at all) and not made since
 * (a next use is due at once, as a new one), placing the others again. Under lock. */
static void forget_written_locked(tg_token_uses *u, int64_t mono, bool any_age) {
  if (!u->n) return;
  use *kept = malloc(u->n * sizeof *kept);
  if (!kept) return; /* they stay: the table is only fuller */
  size_t n = 0;
  for (size_t i = 0; i < SLOTS; i++) {
    use *e = &u->slots[i];
    if (!e->taken) continue;
    if (e->used_ms != e->written_ms || (!any_age && mono - e->tried < TG_TOKEN_USE_WRITE_MS))
      kept[n++] = *e;
    e->taken = false;
  }
  for (size_t i = 0; i < n; i++) *slot_of(u, kept[i].hash) = kept[i];
  u->n = n;
  free(kept);
}

/* A later use than the one written stands: several servers, and a CLI call, write uses of
 * one token, each from its own memory. */
static int write_use(tg_db *db, const char *hash, int64_t used_ms) {
  char at[TG_ISO_LEN + 1];
  tg_iso8601(used_ms, at);
  return tg_db_exec(db,
                    "UPDATE api_tokens SET last_used_at = $1 WHERE token_hash = $2"
                    " AND (last_used_at IS NULL OR last_used_at < $1)",
                    json_pack("[ss]", at, hash), NULL);
}

int tg_token_use_write(tg_db *db, const char *token) {
  char hash[TG_TOKEN_HASH_LEN + 1];
  return tg_sha256_hex(token, strlen(token), hash) < 0 ? TG_E_IO
                                                         : write_use(db, hash, tg_now_ms());
}

int tg_token_uses_write(tg_token_uses *u, tg_db *db, bool all) {
  int64_t mono = mono_now();
  pthread_mutex_lock(&u->lock);
  forget_written_locked(u, mono, false);
  /* Still full, the table holds tokens in steady use, each used again within its minute: all
   * are written now and forgotten, so that the tokens past them are recorded too (a write a
   * sweep while that lasts). */
  bool flush = all || u->n >= TG_TOKEN_USES_MAX;
  use *todo = u->n ? malloc(u->n * sizeof *todo) : NULL;
  size_t n = 0;
  bool lost = u->n && !todo;
  for (size_t i = 0; todo && i < SLOTS; i++) {
    use *e = &u->slots[i];
    if (!e->taken || !due(e, mono, flush)) continue;
    todo[n++] = *e; /* with the try before this one */
    e->tried = mono;
  }
  pthread_mutex_unlock(&u->lock);
  if (!n) {
    free(todo);
    return lost ? TG_E_NOMEM : TG_OK;
  }
  /* Never waiting for another writer, but as the server stops (its last chance). */
  int r = all ? tg_db_begin(db) : tg_db_try_begin(db);
  /* Another writer (a call, another process) holds the lock: no fault, and a minute would
   * leave the use unseen for long; the next write tries again. */
  bool locked = r == TG_E_BUSY && !all;
  for (size_t i = 0; r == TG_OK && i < n; i++) r = write_use(db, todo[i].hash, todo[i].used_ms);
  r = r == TG_OK ? tg_db_commit(db) : r;
  if (r < 0 && !locked)
    tg_log(TG_LOG_WARN, "auth: could not record when %zu token(s) were last used%s: %s", n,
           all ? " before the server stopped" : ", tried again in a minute", tg_db_errmsg(db));
  if (r < 0) tg_db_rollback(db);
  pthread_mutex_lock(&u->lock);
  for (size_t i = 0; i < n; i++) {
    use *e = slot_of(u, todo[i].hash);
    if (!e->taken) continue;
    if (r == TG_OK) e->written_ms = todo[i].used_ms;
    else if (locked) e->tried = todo[i].tried;
  }
  if (r == TG_OK && flush) forget_written_locked(u, mono, true);
  pthread_mutex_unlock(&u->lock);
  free(todo);
  return r;
}

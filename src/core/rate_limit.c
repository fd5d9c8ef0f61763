/* The rate limit on tool calls: a hash of callers, each with its bucket's time stamp. */
#include "core/rate_limit.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "db/db.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define CHAINS 1024 /* a power of two */
#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull

typedef struct caller {
  uint64_t full_ns;  /* when its bucket is full again (GCRA's theoretical arrival time) */
  uint64_t last_ns;  /* its last call */
  uint64_t row_ns;   /* its last refusal that got a telemetry row */
  bool rowed;        /* whether row_ns is set */
  unsigned unrecorded; /* refusals since that row that got none */
  struct caller *next;
  char principal[];
} caller;

struct tg_rate_limit {
  unsigned calls, seconds;
  uint64_t interval_ns; /* between two calls at the sustained rate */
  uint64_t burst_ns;    /* how far past now a bucket's full time may be for a call to go */
  uint64_t (*clock_ns)(void);
  pthread_mutex_t lock;
  unsigned count;
  caller *chains[CHAINS];
};

static unsigned parse_number(const char *text, const char *end, unsigned max) {
  unsigned long n = 0;
  if (text == end || end - text > 10) return 0;
  for (const char *p = text; p < end; p++) {
    if (*p < '0' || *p > '9') return 0;
    n = n * 10 + (unsigned)(*p - '0');
  }
  return n <= max ? (unsigned)n : 0;
}

int tg_rate_limit_parse(const char *text, unsigned *calls, unsigned *seconds) {
  if (strcmp(text, "off") == 0) {
    *calls = *seconds = 0;
    return TG_OK;
  }
  const char *slash = strchr(text, '/');
  if (!slash) return TG_E_INVAL;
  *calls = parse_number(text, slash, TG_RATE_LIMIT_MAX_CALLS);
  *seconds = parse_number(slash + 1, slash + strlen(slash), TG_RATE_LIMIT_MAX_SECONDS);
  return *calls && *seconds ? TG_OK : TG_E_INVAL;
}

tg_rate_limit *tg_rate_limit_new(unsigned calls, unsigned seconds) {
  tg_rate_limit *limit = calloc(1, sizeof *limit);
  if (!limit) return NULL;
  limit->calls = calls;
  limit->seconds = seconds;
  uint64_t window_ns = seconds * NS_PER_S;
  limit->interval_ns = window_ns / calls;
  limit->burst_ns = window_ns - limit->interval_ns;
  limit->clock_ns = tg_monotonic_ns;
  pthread_mutex_init(&limit->lock, NULL);
  return limit;
}

void tg_rate_limit_free(tg_rate_limit *limit) {
  if (!limit) return;
  for (size_t i = 0; i < CHAINS; i++)
    for (caller *c = limit->chains[i], *next; c; c = next) {
      next = c->next;
      free(c);
    }
  pthread_mutex_destroy(&limit->lock);
  free(limit);
}

static caller **chain_of(tg_rate_limit *limit, const char *principal_id) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)principal_id; *p; p++)
    h = (h ^ *p) * 16777619u;
  return &limit->chains[h & (CHAINS - 1)];
}

/* Makes room for one more caller: forgets one whose bucket is full again and that owes no
 * refusal its row, else the one that called least recently. */
static void forget_one(tg_rate_limit *limit, uint64_t now) {
  caller **oldest = NULL;
  for (size_t i = 0; i < CHAINS; i++)
    for (caller **at = &limit->chains[i]; *at; at = &(*at)->next) {
      if ((*at)->full_ns <= now && !(*at)->unrecorded) {
        oldest = at;
        goto found;
      }
      if (!oldest || (*at)->last_ns < (*oldest)->last_ns) oldest = at;
    }
found:;
  caller *gone = *oldest;
  *oldest = gone->next;
  free(gone);
  limit->count--;
}

static caller *caller_of(tg_rate_limit *limit, const char *principal_id, uint64_t now) {
  caller **chain = chain_of(limit, principal_id);
  for (caller *c = *chain; c; c = c->next)
    if (strcmp(c->principal, principal_id) == 0) return c;
  size_t len = strlen(principal_id);
  caller *c = calloc(1, sizeof *c + len + 1);
  if (!c) return NULL;
  memcpy(c->principal, principal_id, len + 1);
  if (limit->count == TG_RATE_LIMIT_CALLERS) forget_one(limit, now);
  c->next = *chain;
  *chain = c;
  limit->count++;
  return c;
}

/* A refused call gets a telemetry row unless one was written for this caller less than
 * TG_RATE_LIMIT_ROW_MS ago: a flood of refusals writes a row a second. */
static unsigned refusals_to_record(caller *c, uint64_t now) {
  if (c->rowed && now - c->row_ns < TG_RATE_LIMIT_ROW_MS * NS_PER_MS) {
    if (c->unrecorded < UINT_MAX) c->unrecorded++;
    return 0;
  }
  unsigned refusals = c->unrecorded < UINT_MAX ? c->unrecorded + 1 : UINT_MAX;
  c->unrecorded = 0;
  c->rowed = true;
  c->row_ns = now;
  return refusals;
}

int tg_rate_limit_take(tg_rate_limit *limit, const char *principal_id, tg_rate_verdict *out) {
  *out = (tg_rate_verdict){.allowed = true, .calls = limit->calls, .seconds = limit->seconds};
  uint64_t now = limit->clock_ns();
  pthread_mutex_lock(&limit->lock);
  caller *c = caller_of(limit, principal_id, now);
  if (!c) {
    pthread_mutex_unlock(&limit->lock);
    return TG_E_NOMEM;
  }
  c->last_ns = now;
  uint64_t full = c->full_ns > now ? c->full_ns : now;
  if (full - now <= limit->burst_ns) {
    c->full_ns = full + limit->interval_ns;
  } else {
    out->allowed = false;
    uint64_t wait_ns = full - limit->burst_ns - now;
    out->retry_after_ms = (int64_t)((wait_ns + NS_PER_MS - 1) / NS_PER_MS);
    out->refusals = refusals_to_record(c, now);
  }
  pthread_mutex_unlock(&limit->lock);
  return TG_OK;
}

/* A caller's refusals taken to be written. */
typedef struct tally {
  char *principal;
  unsigned refusals;
} tally;

static bool owes_row(const caller *c, uint64_t now, bool all) {
  return c->unrecorded && (all || now - c->row_ns >= TG_RATE_LIMIT_ROW_MS * NS_PER_MS);
}

/* Takes the refusals to write now from their callers, into a new array (*n of them). */
static tally *take_tallies(tg_rate_limit *limit, bool all, size_t *n, bool *lost) {
  uint64_t now = limit->clock_ns();
  *n = 0;
  *lost = false;
  pthread_mutex_lock(&limit->lock);
  tally *todo = limit->count ? calloc(limit->count, sizeof *todo) : NULL;
  *lost = limit->count && !todo;
  for (size_t i = 0; todo && i < CHAINS; i++)
    for (caller *c = limit->chains[i]; c; c = c->next) {
      if (!owes_row(c, now, all)) continue;
      if (!(todo[*n].principal = strdup(c->principal))) {
        *lost = true;
        continue;
      }
      todo[(*n)++].refusals = c->unrecorded;
      c->unrecorded = 0;
      c->row_ns = now;
    }
  pthread_mutex_unlock(&limit->lock);
  return todo;
}

/* Gives refusals that could not be written back to their callers, still counted if known. */
static void give_back(tg_rate_limit *limit, const tally *todo, size_t n) {
  pthread_mutex_lock(&limit->lock);
  for (size_t i = 0; i < n; i++)
    for (caller *c = *chain_of(limit, todo[i].principal); c; c = c->next)
      if (strcmp(c->principal, todo[i].principal) == 0) {
        unsigned room = UINT_MAX - c->unrecorded;
        c->unrecorded += todo[i].refusals < room ? todo[i].refusals : room;
        break;
      }
  pthread_mutex_unlock(&limit->lock);
}

int tg_rate_limit_write_refusals(tg_rate_limit *limit, tg_db *db, bool all) {
  size_t n;
  bool lost;
  tally *todo = take_tallies(limit, all, &n, &lost);
  int r = TG_OK;
  if (n) {
    r = all ? tg_db_begin(db) : tg_db_try_begin(db);
    for (size_t i = 0; r == TG_OK && i < n; i++)
      r = tg_call_log_refusals(db, todo[i].principal, todo[i].refusals);
    r = r == TG_OK ? tg_db_commit(db) : r;
    if (r < 0) {
      tg_db_rollback(db);
      /* Another writer holding the lock is no fault: the next look tries again. */
      if (r != TG_E_BUSY || all)
        tg_log(TG_LOG_WARN, "calls refused for their rate: the count of %zu caller(s) was not "
               "written%s: %s", n,
               all ? " before the server stopped" : ", tried again in a second", tg_db_errmsg(db));
      give_back(limit, todo, n);
    }
  }
  for (size_t i = 0; i < n; i++) free(todo[i].principal);
  free(todo);
  if (lost) tg_log(TG_LOG_WARN, "calls refused for their rate: no memory to write their count");
  return r < 0 ? r : lost ? TG_E_NOMEM : TG_OK;
}

void tg_rate_limit_set_clock(tg_rate_limit *limit, uint64_t (*clock_ns)(void)) {
  limit->clock_ns = clock_ns;
}

unsigned tg_rate_limit_callers(tg_rate_limit *limit) {
  pthread_mutex_lock(&limit->lock);
  unsigned n = limit->count;
  pthread_mutex_unlock(&limit->lock);
  return n;
}

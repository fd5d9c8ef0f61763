/* The rate limit on tool calls: a hash of callers, each with its bucket's time stamp. */
#include "core/rate_limit.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/status.h"

#define CHAINS 1024 /* a power of two */
#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull

typedef struct caller {
  uint64_t full_ns;  /* when its bucket is full again (GCRA's theoretical arrival time) */
  uint64_t row_due_ns; /* when its refusals may next be taken to a row (a refusal's own, or
                        * one of their count) */
  unsigned unrecorded; /* refusals taken to none yet */
  struct caller *next;
  char principal[];
} caller;

struct tg_rate_limit {
  unsigned calls, seconds;
  uint64_t interval_ns; /* between two calls at the sustained rate, rounded up */
  uint64_t burst_ns;    /* how far past now a bucket's full time may be for a call to go */
  uint64_t (*clock_ns)(void);
  pthread_mutex_t lock; /* held for memory work alone: never across the database */
  unsigned count;
  caller *chains[CHAINS];
};

static unsigned parse_number(const char *text, const char *end, unsigned max) {
  uint64_t n = 0;
  if (text == end || end - text > 10) return 0;
  for (const char *p = text; p < end; p++) {
    if (*p < '0' || *p > '9') return 0;
    n = n * 10 + (uint64_t)(*p - '0');
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
  /* Rounded up, the sustained rate never passes calls/seconds; a burst is calls exactly. */
  uint64_t window_ns = seconds * NS_PER_S;
  limit->interval_ns = (window_ns + calls - 1) / calls;
  limit->burst_ns = (calls - 1) * limit->interval_ns;
  limit->clock_ns = tg_monotonic_ns;
  pthread_mutex_init(&limit->lock, NULL);
  return limit;
}

void tg_rate_limit_tell(const tg_rate_limit *limit, const char *command) {
  if (!limit)
    tg_log(TG_LOG_WARN, "%s: --rate-limit off: a caller's tool calls are not limited", command);
  else
    tg_log(TG_LOG_INFO, "%s: each caller has a bucket of %u tool call%s, refilled in %u s", command,
           limit->calls, limit->calls == 1 ? "" : "s", limit->seconds);
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
  return &limit->chains[tg_hash_text(principal_id) & (CHAINS - 1)];
}

static caller *known_caller(tg_rate_limit *limit, const char *principal_id) {
  for (caller *c = *chain_of(limit, principal_id); c; c = c->next)
    if (strcmp(c->principal, principal_id) == 0) return c;
  return NULL;
}

/* Makes room for one more caller: forgets one that holds nothing (its bucket full again, no
 * refusal owing a row), else of those owing no row the one whose bucket is fullest (forgotten,
 * it gets a full one: the least credit so given), else the fullest of all, whose count of
 * refusals is then lost, and logged. */
static void forget_one(tg_rate_limit *limit, uint64_t now) {
  caller **clear = NULL, **any = NULL;
  for (size_t i = 0; i < CHAINS; i++)
    for (caller **at = &limit->chains[i]; *at; at = &(*at)->next) {
      caller *c = *at;
      if (!c->unrecorded && c->full_ns <= now) {
        clear = at;
        goto found;
      }
      if (!c->unrecorded && (!clear || c->full_ns < (*clear)->full_ns)) clear = at;
      if (!any || c->full_ns < (*any)->full_ns) any = at;
    }
found:;
  caller **at = clear ? clear : any, *gone = *at;
  if (gone->unrecorded)
    tg_log(TG_LOG_WARN, "calls refused for their rate: %u refusal(s) of a caller forgotten to "
           "make room (every one of the %d callers counted owes a row) were not written",
           gone->unrecorded, TG_RATE_LIMIT_CALLERS);
  *at = gone->next;
  free(gone);
  limit->count--;
}

static caller *caller_of(tg_rate_limit *limit, const char *principal_id, uint64_t now) {
  caller *c = known_caller(limit, principal_id);
  if (c) return c;
  size_t len = strlen(principal_id);
  if (!(c = calloc(1, sizeof *c + len + 1))) return NULL;
  memcpy(c->principal, principal_id, len + 1);
  if (limit->count == TG_RATE_LIMIT_CALLERS) forget_one(limit, now);
  caller **chain = chain_of(limit, principal_id);
  c->next = *chain;
  *chain = c;
  limit->count++;
  return c;
}

static void add_refusals(caller *c, unsigned n) {
  unsigned room = UINT_MAX - c->unrecorded;
  c->unrecorded += n < room ? n : room;
}

/* c's refusals not taken to a row yet, taken now: at most once every TG_RATE_LIMIT_ROW_MS. */
static unsigned take_refusals(caller *c, uint64_t now) {
  unsigned refusals = c->unrecorded;
  c->unrecorded = 0;
  c->row_due_ns = now + TG_RATE_LIMIT_ROW_MS * NS_PER_MS;
  return refusals;
}

/* A refused call gets a telemetry row when due: a flood of refusals writes a row a second. */
static unsigned refusals_to_record(caller *c, uint64_t now) {
  add_refusals(c, 1);
  return now >= c->row_due_ns ? take_refusals(c, now) : 0;
}

int tg_rate_limit_take(tg_rate_limit *limit, const char *principal_id, tg_rate_verdict *out) {
  *out = (tg_rate_verdict){.allowed = true, .calls = limit->calls, .seconds = limit->seconds};
  pthread_mutex_lock(&limit->lock);
  /* Read under the lock: one caller's times never go back. */
  uint64_t now = limit->clock_ns();
  caller *c = caller_of(limit, principal_id, now);
  if (!c) {
    pthread_mutex_unlock(&limit->lock);
    return TG_E_NOMEM;
  }
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

void tg_rate_limit_give_back(tg_rate_limit *limit, const char *principal_id, unsigned refusals) {
  pthread_mutex_lock(&limit->lock);
  caller *c = known_caller(limit, principal_id);
  if (c) add_refusals(c, refusals);
  pthread_mutex_unlock(&limit->lock);
  if (!c)
    tg_log(TG_LOG_WARN, "calls refused for their rate: %u refusal(s) of a caller forgotten "
           "meanwhile were not written", refusals);
}

int tg_rate_limit_take_unwritten(tg_rate_limit *limit, bool all, tg_rate_tally **ret,
                                 size_t *n) {
  *ret = NULL;
  *n = 0;
  pthread_mutex_lock(&limit->lock);
  uint64_t now = limit->clock_ns();
  tg_rate_tally *todo = limit->count ? calloc(limit->count, sizeof *todo) : NULL;
  bool short_of_memory = limit->count && !todo;
  for (size_t i = 0; todo && i < CHAINS; i++)
    for (caller *c = limit->chains[i]; c; c = c->next) {
      if (!c->unrecorded || !(all || now >= c->row_due_ns)) continue;
      if (!(todo[*n].principal_id = strdup(c->principal))) {
        short_of_memory = true;
        continue;
      }
      todo[(*n)++].refusals = take_refusals(c, now);
    }
  pthread_mutex_unlock(&limit->lock);
  *ret = todo;
  return short_of_memory ? TG_E_NOMEM : TG_OK;
}

void tg_rate_tallies_free(tg_rate_tally *tallies, size_t n) {
  for (size_t i = 0; i < n; i++) free(tallies[i].principal_id);
  free(tallies);
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

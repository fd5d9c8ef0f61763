/* The rate limit on a server's tool calls (DESIGN.md §4, the policy step; MCP's tools page:
 * servers must rate limit tool invocations). Each caller has a bucket of `calls` calls that
 * refills at calls/seconds a second (kept as the generic cell rate algorithm's one time
 * stamp): a burst of `calls` goes at once, then calls go at the refill's pace. Every call
 * counts, whatever then refuses it, so that a caller cannot flood the audit with refused
 * calls; one refused for its rate takes nothing from the bucket. Counted in the server's
 * memory: each server process counts the calls made to it. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TG_RATE_LIMIT_DEFAULT "600/60"
#define TG_RATE_LIMIT_MAX_CALLS 1000000000u
#define TG_RATE_LIMIT_MAX_SECONDS 86400u
/* Callers counted at once. Past it one that holds nothing (its bucket full again, no refusal
 * owing a row) is forgotten, else the one with the fullest bucket of those owing no row, else
 * the one with the fullest bucket (its count of refusals lost, and logged). */
#define TG_RATE_LIMIT_CALLERS 4096
/* A caller's calls refused for its rate get a telemetry row at most this often; each row
 * counts the refusals since the one before it (tg_call_write_rate_refusals writes those that
 * no later refusal came to write). */
#define TG_RATE_LIMIT_ROW_MS 1000

typedef struct tg_rate_limit tg_rate_limit;

typedef struct tg_rate_verdict {
  bool allowed;
  unsigned calls, seconds; /* the limit */
  int64_t retry_after_ms;  /* refused: when the caller's next call may go */
  /* Refused: 0 when this refusal gets no telemetry row (one was written less than
   * TG_RATE_LIMIT_ROW_MS ago); else the row stands for this many refusals, this one and
   * those before it that got none. */
  unsigned refusals;
} tg_rate_verdict;

/* Reads "CALLS/SECONDS", two integers from 1 to the maxima above, or "off" (*calls = 0).
 * TG_E_INVAL for anything else. */
int tg_rate_limit_parse(const char *text, unsigned *calls, unsigned *seconds);

/* A limit of calls in seconds (as tg_rate_limit_parse reads them, calls > 0); NULL when out
 * of memory. Thread-safe. */
tg_rate_limit *tg_rate_limit_new(unsigned calls, unsigned seconds);
void tg_rate_limit_free(tg_rate_limit *limit);
/* Logs what limit lets each caller do (NULL: no limit, a warning), for command ("serve"), once
 * its server serves. */
void tg_rate_limit_tell(const tg_rate_limit *limit, const char *command);
static inline void tg_rate_limit_freep(tg_rate_limit **limit) { tg_rate_limit_free(*limit); }
#define _cleanup_rate_limit_ __attribute__((cleanup(tg_rate_limit_freep)))

/* Counts a call of principal_id and says in *out whether it may go. TG_E_NOMEM when a caller
 * not counted yet has no room (the call must not go). */
int tg_rate_limit_take(tg_rate_limit *limit, const char *principal_id, tg_rate_verdict *out);

/* The refusals of one caller that no telemetry row counts yet. */
typedef struct tg_rate_tally {
  char *principal_id;
  unsigned refusals;
} tg_rate_tally;

/* Takes the refusals no telemetry row counts yet (see tg_rate_verdict.refusals): of each
 * caller whose last row is TG_RATE_LIMIT_ROW_MS old, or of every caller when all; into a new
 * array *ret of *n (free it with tg_rate_tallies_free), each caller's count then being 0
 * (tg_rate_limit_give_back returns what is not written). TG_E_NOMEM when some could not be
 * taken: they stay for the next take. */
int tg_rate_limit_take_unwritten(tg_rate_limit *limit, bool all, tg_rate_tally **ret,
                                 size_t *n);
void tg_rate_tallies_free(tg_rate_tally *tallies, size_t n);

/* Gives back to principal_id's count refusals whose row (tg_rate_verdict.refusals) could not
 * be written, for the next write. Logged when the caller was forgotten meanwhile. */
void tg_rate_limit_give_back(tg_rate_limit *limit, const char *principal_id, unsigned refusals);

/* Tests: the clock the limit reads (monotonic nanoseconds; tg_monotonic_ns by default), and
 * how many callers it counts. */
void tg_rate_limit_set_clock(tg_rate_limit *limit, uint64_t (*clock_ns)(void));
unsigned tg_rate_limit_callers(tg_rate_limit *limit);

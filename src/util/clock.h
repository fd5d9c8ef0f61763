/* Wall-clock time as the database stores it: ISO-8601 UTC with milliseconds. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define TG_ISO_LEN 24 /* "2026-11-30T12:34:56.789Z" */

int64_t tg_now_ms(void);          /* milliseconds since the Unix epoch */
uint64_t tg_monotonic_ns(void);   /* for durations only */
int64_t tg_monotonic_ms(void);
/* The monotonic clock's time ms from now, for the waits that take a deadline on it. */
struct timespec tg_monotonic_after(long long ms);
/* Waits on cond (with lock held) for at most ms; true when the time ran out. */
bool tg_timed_wait(pthread_cond_t *cond, pthread_mutex_t *lock, long long ms);
/* Formats ms since the epoch into out[TG_ISO_LEN + 1]; times before the epoch or after year
 * 9999 format as the nearest of the two. */
void tg_iso8601(int64_t ms, char out[TG_ISO_LEN + 1]);
/* The current time, formatted the same way. */
void tg_now_iso(char out[TG_ISO_LEN + 1]);

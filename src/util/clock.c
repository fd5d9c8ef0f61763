#define _GNU_SOURCE
#include "util/clock.h"

#include <errno.h>
#include <time.h>

int64_t tg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t tg_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t tg_monotonic_ms(void) { return (int64_t)(tg_monotonic_ns() / 1000000); }

struct timespec tg_monotonic_after(long long ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += ms % 1000 * 1000000;
  if (until.tv_nsec >= 1000000000) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000;
  }
  return until;
}

/* On the monotonic clock: a step of the wall clock (NTP, a restored snapshot) neither
 * stretches nor cuts a wait. */
bool tg_timed_wait(pthread_cond_t *cond, pthread_mutex_t *lock, long long ms) {
  struct timespec until = tg_monotonic_after(ms);
  return pthread_cond_clockwait(cond, lock, CLOCK_MONOTONIC, &until) == ETIMEDOUT;
}

#define MAX_ISO_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */

/* Writes value as width decimal digits (value < 10^width) and returns the end. */
static char *digits(char *out, unsigned value, int width) {
  for (int i = width - 1; i >= 0; i--, value /= 10) out[i] = (char)('0' + value % 10);
  return out + width;
}

/* Every tool call stamps its rows: digits written directly instead of strftime and
 * snprintf, a tenth of the work. Years outside 0..9999 do not fit the format: they clamp. */
void tg_iso8601(int64_t ms, char out[TG_ISO_LEN + 1]) {
  if (ms < 0) ms = 0;
  if (ms > MAX_ISO_MS) ms = MAX_ISO_MS;
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char *p = digits(out, (unsigned)tm.tm_year + 1900, 4);
  *p++ = '-';
  p = digits(p, (unsigned)tm.tm_mon + 1, 2);
  *p++ = '-';
  p = digits(p, (unsigned)tm.tm_mday, 2);
  *p++ = 'T';
  p = digits(p, (unsigned)tm.tm_hour, 2);
  *p++ = ':';
  p = digits(p, (unsigned)tm.tm_min, 2);
  *p++ = ':';
  p = digits(p, (unsigned)tm.tm_sec, 2);
  *p++ = '.';
  p = digits(p, (unsigned)(ms % 1000), 3);
  *p++ = 'Z';
  *p = '\0';
}

void tg_now_iso(char out[TG_ISO_LEN + 1]) { tg_iso8601(tg_now_ms(), out); }

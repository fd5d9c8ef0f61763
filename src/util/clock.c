#include "util/clock.h"

#include <stdio.h>
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

void tg_iso8601(int64_t ms, char out[TG_ISO_LEN + 1]) {
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t n = strftime(out, TG_ISO_LEN + 1, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, TG_ISO_LEN + 1 - n, ".%03uZ", (unsigned)(ms % 1000));
}

void tg_now_iso(char out[TG_ISO_LEN + 1]) { tg_iso8601(tg_now_ms(), out); }

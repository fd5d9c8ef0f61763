#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

#include "util/clock.h"

static const tg_log_level min_level = TG_LOG_INFO;

void tg_log(tg_log_level level, const char *fmt, ...) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  if (level < min_level) return;
  char when[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms(), when);
  va_list ap;
  va_start(ap, fmt);
  flockfile(stderr);
  fprintf(stderr, "%s %s: ", when, names[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  funlockfile(stderr);
  va_end(ap);
}

bool tg_log_may(_Atomic int64_t *last) {
  int64_t now = tg_monotonic_ms(), was = atomic_load(last);
  return (was == 0 || now - was >= TG_LOG_ONCE_MS) && atomic_compare_exchange_strong(last, &was, now);
}

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

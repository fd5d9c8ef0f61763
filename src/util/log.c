#include "util/log.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"

static const tg_log_level min_level = TG_LOG_INFO;

static pthread_mutex_t writing = PTHREAD_MUTEX_INITIALIZER;
static unsigned long dropped; /* lines stderr could not take since the last that went out */

/* Writes line (len bytes, at most PIPE_BUF: a pipe with room takes it whole) when stderr can
 * take it now: a server whose log no one reads (a pipe left full) must not stop. A write to
 * a closed one fails (EPIPE): the servers quiet SIGPIPE (src/cli/cmd_mcp.c). */
static bool put(const char *line, size_t len) {
  struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
  if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) return false;
  while (len) {
    ssize_t n = write(STDERR_FILENO, line, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    line += n;
    len -= (size_t)n;
  }
  return true;
}

void tg_log(tg_log_level level, const char *fmt, ...) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  static const char cut[] = "...\n";
  if (level < min_level) return;
  char when[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms(), when);
  char line[PIPE_BUF];
  int head = snprintf(line, sizeof line, "%s %s: ", when, names[level]);
  va_list ap;
  va_start(ap, fmt);
  int body = vsnprintf(line + head, sizeof line - (size_t)head, fmt, ap);
  va_end(ap);
  size_t len = (size_t)head + (body > 0 ? (size_t)body : 0);
  if (len < sizeof line) {
    line[len++] = '\n'; /* over its NUL */
  } else { /* cut, at a character's start, and said so */
    len = sizeof line - (sizeof cut - 1);
    while (len > (size_t)head && ((unsigned char)line[len] & 0xC0) == 0x80) len--;
    memcpy(line + len, cut, sizeof cut - 1);
    len += sizeof cut - 1;
  }
  pthread_mutex_lock(&writing);
  if (dropped) {
    char note[128];
    int n = snprintf(note, sizeof note, "%s warn: %lu log line%s dropped: stderr took none\n",
                     when, dropped, dropped == 1 ? " was" : "s were");
    if (put(note, (size_t)n)) dropped = 0;
  }
  if (dropped || !put(line, len)) dropped++;
  pthread_mutex_unlock(&writing);
}

bool tg_log_may(_Atomic int64_t *last) {
  int64_t now = tg_monotonic_ms(), was = atomic_load(last);
  return (was == 0 || now - was >= TG_LOG_ONCE_MS) && atomic_compare_exchange_strong(last, &was, now);
}

/* libmicrohttpd's log lines, told apart from what a client can flood it with and limited
 * kind by kind. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/log.h"

/* Set by a connection's thread that returns MHD_NO to close it on purpose, having logged why:
 * libmicrohttpd then reports an "internal error" on the same thread. */
static _Thread_local bool closing_on_purpose;

void http_close_on_purpose(void) { closing_on_purpose = true; }

/* Whether a libmicrohttpd line of format fmt may be logged now (once a minute for each kind),
 * with *held_back the count of its kind not logged since the last; if not, it is held back. */
static bool mhd_line_may_log(server *s, const char *fmt, const char *line, unsigned *held_back) {
  pthread_mutex_lock(&s->mhd_lines_lock);
  size_t i = 0;
  while (i < MHD_LINE_KINDS - 1 && s->mhd_lines[i].fmt && s->mhd_lines[i].fmt != fmt) i++;
  mhd_line *kind = &s->mhd_lines[i];
  if (!kind->fmt) kind->fmt = fmt;
  int64_t now = tg_monotonic_ms();
  bool may = !kind->logged_ms || now - kind->logged_ms >= TG_LOG_ONCE_MS;
  if (may) {
    kind->logged_ms = now;
    *held_back = kind->held_back;
    kind->held_back = 0;
  } else {
    kind->held_back++;
    snprintf(kind->last_held, sizeof kind->last_held, "%s", line);
  }
  pthread_mutex_unlock(&s->mhd_lines_lock);
  return may;
}

/* Tells how many libmicrohttpd lines of each kind were held back, once the kind's minute is
 * past (or at once: force, as the server stops), so that the size of a flood is told even
 * when no line of its kind comes after it. */
void http_tell_held_back_mhd_lines(server *s, bool force) {
  int64_t now = tg_monotonic_ms();
  for (size_t i = 0; i < MHD_LINE_KINDS; i++) {
    char last[sizeof s->mhd_lines[i].last_held];
    pthread_mutex_lock(&s->mhd_lines_lock);
    mhd_line *kind = &s->mhd_lines[i];
    unsigned held_back = kind->held_back;
    bool tell = held_back && (force || now - kind->logged_ms >= TG_LOG_ONCE_MS);
    if (tell) {
      memcpy(last, kind->last_held, sizeof last);
      kind->logged_ms = now;
      kind->held_back = 0;
    }
    pthread_mutex_unlock(&s->mhd_lines_lock);
    if (tell)
      tg_log(TG_LOG_WARN, "http: %u more lines of this kind held back (libmicrohttpd; the "
             "last: %s)", held_back, last);
  }
}

/* libmicrohttpd reports what an operator should see (a thread it could not start, the
 * connection limit reached, a socket error), and also what a client does: it went away in
 * the middle of an answer, which is how SSE streams normally end, or of its request (debug
 * lines), or it sent a malformed request. A client can flood the log with the last, so each
 * kind of line is logged once a minute at most, with the count of those held back: a flood
 * of one kind never hides another. */
void http_mhd_log(void *cls, const char *fmt, va_list ap) {
  server *s = cls;
  char line[MHD_LINE_MAX];
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  bool client_gone = strstr(line, "no longer available") || strstr(line, "Connection reset") ||
                     strstr(line, "closed by remote peer") ||
                     strstr(line, "closed by remote side");
  /* A connection closed on purpose (said already) is no "internal error". */
  bool told = closing_on_purpose;
  closing_on_purpose = false;
  if (client_gone || told) {
    tg_log(TG_LOG_DEBUG, "http: %s", line);
  } else {
    unsigned more = 0;
    if (mhd_line_may_log(s, fmt, line, &more))
      tg_log(TG_LOG_WARN, "http: %s (libmicrohttpd; %u more such lines held back since the "
                          "last; logged once a minute at most)", line, more);
  }
}

/* Operator-facing log lines on stderr: "2026-11-30T12:00:00.000Z warn: message". */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { TG_LOG_DEBUG, TG_LOG_INFO, TG_LOG_WARN, TG_LOG_ERROR } tg_log_level;

/* Never waits for stderr when it is a pipe or a socket (a terminal with any room takes a
 * write and blocks until all of it fits): a line it cannot take now (a pipe no one reads is
 * full) is dropped and counted, and the count goes out ahead of the next line it takes. A
 * line is cut at PIPE_BUF bytes (at a UTF-8 character's start), ending with "...", so that
 * it goes out whole or not at all. */
void tg_log(tg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A kind of line a client can cause at will is logged once a minute at most, so that it
 * cannot flood the log (nor, over stdio, fill a stderr its client does not read, so that the
 * lines that matter would be dropped). */
#define TG_LOG_ONCE_MS 60000
/* Whether a line of the kind last logged at *last (monotonic ms, 0: never) may be logged
 * now; if so, *last becomes now. Thread-safe. */
bool tg_log_may(_Atomic int64_t *last);

/* Operator-facing log lines on stderr: "2026-11-30T12:00:00.000Z warn: message". */
#pragma once

typedef enum { TG_LOG_DEBUG, TG_LOG_INFO, TG_LOG_WARN, TG_LOG_ERROR } tg_log_level;

void tg_log(tg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

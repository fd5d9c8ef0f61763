/* Wall-clock time as the database stores it: ISO-8601 UTC with milliseconds. */
#pragma once
#include <stdint.h>

#define TG_ISO_LEN 24 /* "2026-11-30T12:34:56.789Z" */

int64_t tg_now_ms(void);          /* milliseconds since the Unix epoch */
uint64_t tg_monotonic_ns(void);   /* for durations only */
/* Formats ms since the epoch into out[TG_ISO_LEN + 1]; times before the epoch or after year
 * 9999 format as the nearest of the two. */
void tg_iso8601(int64_t ms, char out[TG_ISO_LEN + 1]);
/* The current time, formatted the same way. */
void tg_now_iso(char out[TG_ISO_LEN + 1]);

/* Heartbeat cadence (research/ever-works-semantics.md §5.3): "manual" (or none) or a 5-field
 * cron expression, minute hour day-of-month month day-of-week, matched in UTC. Pure: no I/O
 * besides the clock value the caller passes. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define TG_CADENCE_MAX 64           /* bytes of a cadence */
#define TG_CRON_HORIZON_DAYS 400    /* a cadence must fire within this many days */

typedef struct tg_cron {
  uint64_t minutes; /* bit n: minute n */
  uint32_t hours, days; /* days: bit 1..31 */
  uint16_t months;      /* bit 1..12 */
  uint8_t weekdays;     /* bit 0..6, Sunday = 0 (7 folds into 0) */
  bool days_star, weekdays_star; /* the field was a literal "*" (for the either-day rule) */
} tg_cron;

/* Whether text means manual: NULL, empty or exactly "manual". */
bool tg_cadence_manual(const char *text);

/* Parses a 5-field cron. Fields: comma lists of "*", "N" or "N-M" (N <= M), each optionally
 * "/S" (S >= 1; "N/S" runs from N to the field's maximum); months JAN..DEC and weekdays
 * SUN..SAT in any case. Returns 0, or TG_E_INVAL with *why (static text) set. */
int tg_cron_parse(const char *text, tg_cron *ret, const char **why);

/* The first matching minute strictly after after_ms, within TG_CRON_HORIZON_DAYS.
 * When both day fields are restricted, a day matches when either does. TG_E_NOTFOUND when
 * none. */
int tg_cron_next(const tg_cron *cron, int64_t after_ms, int64_t *ret_ms);

/* NULL when text is a valid cadence at now_ms (manual, or a cron that fires within the
 * horizon), else why not. */
const char *tg_cadence_check(const char *text, int64_t now_ms);

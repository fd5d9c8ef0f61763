#define _GNU_SOURCE
#include "domain/cron.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util/status.h"

typedef struct field {
  int min, max;
  const char *const *names; /* aliases for min.., or NULL */
} field;

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", NULL};
static const char *const weekday_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL};

static const field fields[5] = {
    {0, 59, NULL}, {0, 23, NULL}, {1, 31, NULL}, {1, 12, month_names}, {0, 7, weekday_names}};

/* A number or an alias at *p, advancing it. -1 when there is none. */
static int value(const char **p, const field *f) {
  if (isdigit((unsigned char)**p)) {
    int v = 0;
    while (isdigit((unsigned char)**p) && v < 1000) v = v * 10 + (*(*p)++ - '0');
    return v;
  }
  for (int i = 0; f->names && f->names[i]; i++)
    if (strncasecmp(*p, f->names[i], 3) == 0) {
      *p += 3;
      return f->min + i;
    }
  return -1;
}

/* Parses one field of length len into the bit set *bits. */
static const char *parse_field(const char *s, size_t len, const field *f, uint64_t *bits) {
  char buf[TG_CADENCE_MAX + 1];
  if (len > TG_CADENCE_MAX) return "field too long";
  memcpy(buf, s, len);
  buf[len] = '\0';
  *bits = 0;
  char *save = NULL;
  for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
    const char *p = part;
    int lo, hi, step = 1;
    bool star = *p == '*';
    if (star) {
      p++;
      lo = f->min;
      hi = f->max;
    } else {
      if ((lo = value(&p, f)) < 0) return "not a number or name";
      hi = lo;
      if (*p == '-') {
        p++;
        if ((hi = value(&p, f)) < 0) return "range without an end";
        if (hi < lo) return "range runs backwards";
      }
    }
    if (*p == '/') {
      p++;
      if (!isdigit((unsigned char)*p) || (step = value(&p, f)) < 1) return "step must be 1 or more";
      if (!star && hi == lo) hi = f->max;
    }
    if (*p) return "unexpected character";
    if (lo < f->min || hi > f->max) return "value out of range";
    for (int v = lo; v <= hi; v += step) *bits |= 1ull << v;
  }
  if (!*bits) return "field has no values";
  return NULL;
}

bool tg_cadence_manual(const char *text) { return !text || !*text || strcmp(text, "manual") == 0; }

int tg_cron_parse(const char *text, tg_cron *ret, const char **why) {
  *ret = (tg_cron){0};
  *why = NULL;
  if (strlen(text) > TG_CADENCE_MAX) *why = "cadence too long";
  uint64_t bits[5];
  const char *p = text;
  int n = 0;
  for (; !*why && n < 5; n++) {
    while (*p == ' ' || *p == '\t') p++;
    const char *start = p;
    while (*p && *p != ' ' && *p != '\t') p++;
    if (p == start) {
      *why = "a cron has 5 fields: minute hour day-of-month month day-of-week";
      break;
    }
    const char *e = parse_field(start, (size_t)(p - start), &fields[n], &bits[n]);
    if (e) *why = e;
    if (n == 2) ret->days_star = p - start == 1 && *start == '*';
    if (n == 4) ret->weekdays_star = p - start == 1 && *start == '*';
  }
  while (!*why && (*p == ' ' || *p == '\t')) p++;
  if (!*why && *p) *why = "a cron has 5 fields: minute hour day-of-month month day-of-week";
  if (*why) return TG_E_INVAL;
  ret->minutes = bits[0];
  ret->hours = (uint32_t)bits[1];
  ret->days = (uint32_t)bits[2];
  ret->months = (uint16_t)bits[3];
  ret->weekdays = (uint8_t)((bits[4] | (bits[4] >> 7)) & 0x7F); /* 7 is Sunday too */
  return TG_OK;
}

static bool day_matches(const tg_cron *c, const struct tm *tm) {
  bool dom = c->days & (1u << tm->tm_mday), dow = c->weekdays & (1u << tm->tm_wday);
  if (!c->days_star && !c->weekdays_star) return dom || dow;
  return dom && dow;
}

int tg_cron_next(const tg_cron *c, int64_t after_ms, int64_t *ret_ms) {
  time_t t = (time_t)(after_ms / 60000 + 1) * 60;
  time_t end = t + (time_t)TG_CRON_HORIZON_DAYS * 86400;
  while (t < end) {
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return TG_E_INVAL;
    if (!(c->months & (1u << (tm.tm_mon + 1))) || !day_matches(c, &tm)) {
      t += 86400 - (tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec);
    } else if (!(c->hours & (1u << tm.tm_hour))) {
      t += 3600 - (tm.tm_min * 60 + tm.tm_sec);
    } else if (!(c->minutes & (1ull << tm.tm_min))) {
      t += 60 - tm.tm_sec;
    } else {
      *ret_ms = (int64_t)t * 1000;
      return TG_OK;
    }
  }
  return TG_E_NOTFOUND;
}

const char *tg_cadence_check(const char *text, int64_t now_ms) {
  if (tg_cadence_manual(text)) return NULL;
  tg_cron c;
  const char *why;
  if (tg_cron_parse(text, &c, &why) < 0) return why;
  int64_t next;
  if (tg_cron_next(&c, now_ms, &next) < 0) return "the cadence never fires within 400 days";
  return NULL;
}

#include "http/media.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool space(char c) { return c == ' ' || c == '\t'; }

/* [*p, *end) without the spaces around it. */
static void trim(const char **p, const char **end) {
  while (*p < *end && space(**p)) (*p)++;
  while (*end > *p && space((*end)[-1])) (*end)--;
}

const char *tg_http_field_value(const char *value, size_t *len) {
  const char *end = value + strlen(value);
  trim(&value, &end);
  *len = (size_t)(end - value);
  return value;
}

/* The first sep in [p, end) outside a quoted string (RFC 9110 §5.6.4), or end. */
static const char *next_sep(const char *p, const char *end, char sep) {
  for (bool quoted = false; p < end; p++) {
    if (quoted && *p == '\\' && p + 1 < end) p++;
    else if (*p == '"') quoted = !quoted;
    else if (!quoted && *p == sep) return p;
  }
  return end;
}

static bool same(const char *p, const char *end, const char *word) {
  size_t n = strlen(word);
  return (size_t)(end - p) == n && strncasecmp(p, word, n) == 0;
}

/* A qvalue (RFC 9110 §12.4.2) in thousandths, or -1 when it is none. */
static int qvalue(const char *p, const char *end) {
  if (p == end || (*p != '0' && *p != '1')) return -1;
  int q = (*p - '0') * 1000, scale = 100;
  if (++p < end && *p++ != '.') return -1;
  for (int digits = 0; p < end; p++, digits++, scale /= 10) {
    if (digits == 3 || *p < '0' || *p > '9') return -1;
    q += (*p - '0') * scale;
  }
  return q > 1000 ? -1 : q;
}

/* The value of the first parameter called name among [p, end) (";a=1;b=2"), without the
 * spaces around it, in [*value, *value_end); false when there is none. */
static bool param(const char *p, const char *end, const char *name, const char **value,
                  const char **value_end) {
  while (p < end) {
    const char *start = p + 1, *param_end = next_sep(start, end, ';');
    const char *eq = memchr(start, '=', (size_t)(param_end - start));
    p = param_end;
    if (!eq) continue;
    const char *name_end = eq;
    *value = eq + 1;
    *value_end = param_end;
    trim(&start, &name_end);
    trim(value, value_end);
    if (same(start, name_end, name)) return true;
  }
  return false;
}

/* The quality the parameters [p, end) of a range give it: 1000 without q, -1 when its q is
 * not a qvalue. */
static int range_quality(const char *p, const char *end) {
  const char *value, *value_end;
  return param(p, end, "q", &value, &value_end) ? qvalue(value, value_end) : 1000;
}

tg_accept tg_http_accepts(const char *accept, const char *type) {
  if (!accept) return (tg_accept){.quality = 1000};
  char type_wildcard[64]; /* "text/" and a star, for "text/event-stream" */
  snprintf(type_wildcard, sizeof type_wildcard, "%.*s*", (int)strcspn(type, "/") + 1, type);
  /* The most specific range that matches decides: 3 the type named, 2 its wildcard, 1 any. */
  int best = 0, quality = 0;
  const char *end = accept + strlen(accept);
  for (const char *p = accept; p < end;) {
    const char *element_end = next_sep(p, end, ',');
    const char *params = next_sep(p, element_end, ';');
    const char *range = p, *range_end = params;
    trim(&range, &range_end);
    int rank = same(range, range_end, type)            ? 3
               : same(range, range_end, type_wildcard) ? 2
               : same(range, range_end, "*/*")         ? 1
                                                       : 0;
    int q = rank ? range_quality(params, element_end) : -1;
    if (q >= 0 && (rank > best || (rank == best && q > quality))) {
      best = rank;
      quality = q;
    }
    p = element_end + (element_end < end);
  }
  return (tg_accept){.quality = quality, .named = best == 3 && quality > 0};
}

bool tg_http_is_json(const char *content_type) {
  if (!content_type) return false;
  const char *end = content_type + strlen(content_type);
  const char *p = content_type, *type_end = next_sep(p, end, ';'), *params = type_end;
  trim(&p, &type_end);
  if (!same(p, type_end, "application/json")) return false;
  /* JSON is UTF-8 (RFC 8259 §8.1): a body said to be in another charset would be misread
   * (US-ASCII, a part of UTF-8, aside: older clients name it). */
  const char *charset, *charset_end;
  if (!param(params, end, "charset", &charset, &charset_end)) return true;
  if (charset_end - charset >= 2 && *charset == '"' && charset_end[-1] == '"') {
    charset++;
    charset_end--;
  }
  return same(charset, charset_end, "utf-8") || same(charset, charset_end, "utf8") ||
         same(charset, charset_end, "us-ascii");
}

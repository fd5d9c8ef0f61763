#include "http/media.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* Length of [p, end) without its trailing spaces. */
static size_t trimmed(const char *p, const char *end) {
  while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
  return (size_t)(end - p);
}

static bool same(const char *p, size_t n, const char *word) {
  return strlen(word) == n && strncasecmp(p, word, n) == 0;
}

/* Whether a range's parameters [p, end) hold q=0 (q=0.0, q=0.000 and so on). */
static bool weight_zero(const char *p, const char *end) {
  while (p < end) {
    p = skip_space(p + (*p == ';'));
    const char *next = p;
    while (next < end && *next != ';') next++;
    if (next - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
      const char *v = p + 2;
      size_t n = trimmed(v, next);
      if (n == 0 || v[0] != '0') return false;
      for (size_t i = 1; i < n; i++)
        if (!(i == 1 ? v[i] == '.' : v[i] == '0')) return false;
      return true;
    }
    p = next;
  }
  return false;
}

tg_accept tg_http_accepts(const char *accept, const char *type) {
  if (!accept) return TG_ACCEPT_WILDCARD;
  char type_wildcard[64]; /* "text/" and a star, for "text/event-stream" */
  snprintf(type_wildcard, sizeof type_wildcard, "%.*s*", (int)strcspn(type, "/") + 1, type);
  /* The most specific range that matches decides (RFC 9110 §12.5.1): 3 named, 2 the type's
   * wildcard, 1 any type. */
  int best = 0;
  bool best_zero = false;
  for (const char *p = accept; *p;) {
    p = skip_space(p);
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *params = p;
    while (params < end && *params != ';') params++;
    size_t n = trimmed(p, params);
    int rank = same(p, n, type) ? 3 : same(p, n, type_wildcard) ? 2 : same(p, n, "*/*") ? 1 : 0;
    if (rank > best) {
      best = rank;
      best_zero = weight_zero(params, end);
    }
    p = *end ? end + 1 : end;
  }
  if (best == 0 || best_zero) return TG_ACCEPT_NO;
  return best == 3 ? TG_ACCEPT_NAMED : TG_ACCEPT_WILDCARD;
}

bool tg_http_is_json(const char *content_type) {
  if (!content_type) return false;
  const char *p = skip_space(content_type);
  const char *end = strchr(p, ';');
  if (!end) end = p + strlen(p);
  return same(p, trimmed(p, end), "application/json");
}

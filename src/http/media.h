/* Reading request header values: a field's value without the whitespace around it, what an
 * Accept header takes (RFC 9110 §12.5.1) and whether a Content-Type is JSON. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* Where value, a header field's value, begins without its optional whitespace (RFC 9110
 * §5.5), and in *len how long it is without the whitespace that ends it. */
const char *tg_http_field_value(const char *value, size_t *len);

/* How an Accept header takes one media type. */
typedef struct tg_accept {
  int quality; /* 0 (refused) to 1000, from the most specific range that matches */
  bool named;  /* that range names the type itself, not a wildcard */
} tg_accept;

/* How accept (the header's value, its lines joined with commas; NULL when absent, which takes
 * everything) takes type ("text/event-stream"). Among equally specific ranges the highest
 * quality counts; a range whose quality cannot be read counts for nothing. */
tg_accept tg_http_accepts(const char *accept, const char *type);

/* Whether a Content-Type value (NULL when absent) is application/json, in UTF-8 (or US-ASCII)
 * when it names a charset. */
bool tg_http_is_json(const char *content_type);

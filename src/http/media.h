/* Media types in request headers: what an Accept header takes (RFC 9110 §12.5.1) and whether
 * a Content-Type is JSON. */
#pragma once
#include <stdbool.h>

/* How an Accept header takes one media type. */
typedef enum tg_accept {
  TG_ACCEPT_NO,       /* refused: not listed, or its most specific range has q=0 */
  TG_ACCEPT_WILDCARD, /* through a wildcard range (any subtype, or any type), or no Accept at all */
  TG_ACCEPT_NAMED,    /* listed by name */
} tg_accept;

/* How accept (the header's value, NULL when absent) takes type ("text/event-stream"). */
tg_accept tg_http_accepts(const char *accept, const char *type);

/* Whether a Content-Type value (NULL when absent) is application/json, parameters aside. */
bool tg_http_is_json(const char *content_type);

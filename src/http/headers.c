/* Reading a request's headers: joined lists, Mcp-Param-* parameters, headers that may
 * come once, malformed names and values, and those 2026-07-28 validates. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdlib.h>
#include <string.h>

#include "http/media.h"
#include "util/cleanup.h"

#define MAX_PARAM_HEADERS 64

/* The lines of one header, each trimmed, joined into one list as RFC 9110 §5.3 reads a
 * repeated list header (Accept); headers that may not repeat never get here twice (see
 * singletons). */
typedef struct joined {
  const char *name;
  char *text; /* NULL while there is none */
  size_t len;
  bool failed; /* out of memory */
} joined;

static enum MHD_Result join_lines(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  joined *j = cls;
  if (strcasecmp(key, j->name) != 0 || !value) return MHD_YES;
  size_t n;
  value = tg_http_field_value(value, &n);
  char *grown = realloc(j->text, j->len + n + 3);
  if (!grown) {
    j->failed = true;
    return MHD_NO;
  }
  if (j->text) {
    memcpy(grown + j->len, ", ", 2);
    j->len += 2;
  }
  memcpy(grown + j->len, value, n);
  j->len += n;
  grown[j->len] = '\0';
  j->text = grown;
  return MHD_YES;
}

/* Header name's lines joined (*ret malloc'd, NULL when the request has none); false when out
 * of memory. */
bool http_header_value(struct MHD_Connection *conn, const char *name, char **ret) {
  joined j = {.name = name};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, join_lines, &j);
  if (j.failed) free(j.text);
  *ret = j.failed ? NULL : j.text;
  return !j.failed;
}

bool http_session_id(struct MHD_Connection *conn, char **ret) {
  if (!http_header_value(conn, "Mcp-Session-Id", ret)) return false;
  if (*ret && !**ret) { /* what a client sends before it has an id names no session */
    free(*ret);
    *ret = NULL;
  }
  return true;
}

/* Collects one Mcp-Param header; a repeated one is the list of its lines, as a repeated
 * list header is (RFC 9110 §5.3), so it mirrors no argument. Its bytes are kept as sent: the
 * dispatch refuses what a client must encode. */
enum MHD_Result http_collect_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  param_headers *ph = cls;
  if (strncasecmp(key, "Mcp-Param-", 10) != 0 || !value) return MHD_YES;
  char name[TG_MCP_PARAM_NAME_MAX + 1];
  if (!tg_mcp_param_key(key + 10, name)) {
    ph->too_long = true;
    return MHD_NO;
  }
  size_t len;
  value = tg_http_field_value(value, &len);
  json_t *seen = json_object_get(ph->params, name);
  if (!seen && json_object_size(ph->params) >= MAX_PARAM_HEADERS) {
    ph->too_many = true;
    return MHD_NO;
  }
  size_t before = seen ? json_string_length(seen) + 2 : 0;
  _cleanup_free_ char *text = malloc(before + len + 1);
  if (text && seen) {
    memcpy(text, json_string_value(seen), before - 2);
    memcpy(text + before - 2, ", ", 2);
  }
  if (text) memcpy(text + before, value, len);
  json_t *v = text ? json_stringn_nocheck(text, before + len) : NULL;
  if (!v || json_object_set_new(ph->params, name, v) < 0) {
    ph->failed = true;
    return MHD_NO;
  }
  return MHD_YES;
}

/* Framing, origin and authentication first, then what is about the message (from
 * HTTP_FIRST_ABOUT_THE_MESSAGE). */
const char *const http_singletons[] = {
    "Host",           "Authorization",     "Origin",         "Content-Type",
    "Content-Length", "Transfer-Encoding", "Mcp-Session-Id", "Last-Event-ID",
    "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Toolgate-Run"};

/* Whether name is a token (RFC 9110 §5.1, §5.6.2): libmicrohttpd keeps a name it splits at
 * the colon as it came, spaces and all. */
static bool is_token(const char *name) {
  if (!*name) return false;
  for (const char *p = name; *p; p++) {
    bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
    if (!alnum && !strchr("!#$%&'*+-.^_`|~", *p)) return false;
  }
  return true;
}

/* Whether a header's value holds a control character but a tab (RFC 9110 §5.5): a bare CR,
 * which libmicrohttpd keeps, could be read as a line's end by whatever reads it next. */
static bool has_control(const char *value) {
  for (const unsigned char *p = (const unsigned char *)value; *p; p++)
    if ((*p < 0x20 && *p != '\t') || *p == 0x7f) return true;
  return false;
}

/* Whether name runs on from a header that frames the body: libmicrohttpd joins a folded line
 * to the header's name, so that "Content-Length:" followed by the line " 5" comes as a header
 * "Content-Length5" and frames no body, on any method. */
static bool runs_on_from_framing(const char *name) {
  static const char *const framing[] = {"Content-Length", "Transfer-Encoding"};
  for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++) {
    size_t n = strlen(framing[i]);
    if (strncasecmp(name, framing[i], n) == 0 && name[n]) return true;
  }
  return false;
}

enum MHD_Result http_see_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  headers_seen *c = cls;
  if (!is_token(key)) c->bad_name = true;
  if (runs_on_from_framing(key)) c->framing_runs_on = true;
  if (value && has_control(value)) c->bad_value = true;
  for (size_t i = 0; i < HTTP_N_SINGLETONS; i++)
    if (strcasecmp(key, http_singletons[i]) == 0) c->seen[i]++;
  return MHD_YES;
}

/* Whether 2026-07-28 validates header name on a request naming revision: its fault is then
 * that revision's (-32020), not HTTP's. The routing headers are its own. */
bool http_validated_by_2026(const char *name, const char *revision) {
  return strcasecmp(name, "Mcp-Method") == 0 || strcasecmp(name, "Mcp-Name") == 0 ||
         (strcasecmp(name, "MCP-Protocol-Version") == 0 && revision &&
          strcmp(revision, TG_MCP_MODERN_VERSION) == 0);
}

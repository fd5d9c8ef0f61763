/* The routing headers of 2026-07-28 over HTTP (Mcp-Method, Mcp-Name, Mcp-Param-*), checked
 * against the body they route. */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

static int b64_digit(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

/* Strict base64 (RFC 4648 alphabet, padded, no stray characters); NULL when malformed or
 * when the text holds a NUL byte. */
static char *b64_decode(const char *s, size_t n) {
  if (n % 4) return NULL;
  char *out = malloc(n / 4 * 3 + 1);
  if (!out) return NULL;
  size_t len = 0;
  for (size_t i = 0; i < n; i += 4) {
    bool last = i + 4 == n;
    int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=' && s[i + 3] == '=') : 0;
    int v[4] = {0};
    for (int k = 0; k < 4 - pad; k++)
      if ((v[k] = b64_digit(s[i + k])) < 0) goto bad;
    unsigned bits =
        (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
    out[len++] = (char)(bits >> 16);
    if (pad < 2) out[len++] = (char)(bits >> 8 & 0xff);
    if (pad < 1) out[len++] = (char)(bits & 0xff);
  }
  if (memchr(out, 0, len)) goto bad;
  out[len] = 0;
  return out;
bad:
  free(out);
  return NULL;
}

/* A header value as the client meant it: the =?base64?...?= sentinel decoded, anything
 * else literal. *ret is malloc'd; false when the sentinel is malformed, when a literal holds
 * what a client must encode (a control character or a byte past ASCII), or out of memory. */
bool mcp_header_value(const char *raw, char **ret) {
  *ret = NULL;
  size_t n = strlen(raw);
  if (n >= 11 && strncmp(raw, "=?base64?", 9) == 0 && strcmp(raw + n - 2, "?=") == 0) {
    *ret = b64_decode(raw + 9, n - 11);
    return *ret != NULL;
  }
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)raw[i] < 0x20 || (unsigned char)raw[i] > 0x7e) return false;
  *ret = strdup(raw);
  return *ret != NULL;
}

/* Whether a mirrored header value equals the argument it mirrors. */
static bool param_matches(const char *value, json_t *arg) {
  char *end = NULL;
  if (json_is_string(arg)) return strcmp(value, json_string_value(arg)) == 0;
  if (json_is_boolean(arg)) return strcmp(value, json_is_true(arg) ? "true" : "false") == 0;
  if (json_is_integer(arg)) {
    long long v = strtoll(value, &end, 10);
    return *value && !*end && v == json_integer_value(arg);
  }
  return false;
}

/* Every argument the tool's schema marks x-mcp-header must arrive mirrored in its
 * Mcp-Param-{Name} header, and a header must mirror an argument. */
bool mcp_params_match(const tg_registry *reg, const tg_rpc_msg *msg, json_t *headers) {
  const char *tool_name = json_string_value(json_object_get(msg->params, "name"));
  const tg_tool *tool = tool_name ? tg_registry_find(reg, tool_name) : NULL;
  if (!tool) return true; /* tools/call answers a missing or unknown tool */
  json_t *args = json_object_get(msg->params, "arguments");
  const char *prop;
  json_t *schema;
  json_object_foreach(json_object_get(tool->input_schema, "properties"), prop, schema) {
    const char *name = json_string_value(json_object_get(schema, "x-mcp-header"));
    if (!name) continue;
    char lower[128];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof lower; i++) lower[i] = (char)tolower((unsigned char)name[i]);
    lower[i] = 0;
    const char *raw = json_string_value(json_object_get(headers, lower));
    json_t *arg = json_object_get(args, prop);
    bool has_arg = arg && !json_is_null(arg);
    if (!raw && !has_arg) continue;
    _cleanup_free_ char *value = NULL;
    if (!raw || !has_arg || !mcp_header_value(raw, &value) || !param_matches(value, arg))
      return false;
  }
  return true;
}

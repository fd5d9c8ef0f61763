/* The routing headers of 2026-07-28 over HTTP (Mcp-Method, Mcp-Name, Mcp-Param-*), checked
 * against the body they route. */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include <ctype.h>
#include <gnutls/gnutls.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/json.h"

/* Strict base64 (RFC 4648: its alphabet, padded, unused bits zero); NULL when malformed or
 * when it decodes to a NUL byte. GnuTLS decodes strictly but skips white space, which a
 * header value can hold, so the alphabet is checked first. */
static char *b64_decode(const char *s, size_t n) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
  _cleanup_free_ char *text = strndup(s, n);
  if (!text || strspn(text, alphabet) != n) return NULL;
  gnutls_datum_t in = {(unsigned char *)text, (unsigned)n}, out = {0};
  if (gnutls_base64_decode2(&in, &out) < 0) return NULL;
  char *ret = !out.size                         ? strdup("")
              : memchr(out.data, 0, out.size) ? NULL
                                              : strndup((char *)out.data, out.size);
  gnutls_free(out.data);
  return ret;
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

bool tg_mcp_param_key(const char *name, char key[TG_MCP_PARAM_NAME_MAX + 1]) {
  size_t len = strlen(name);
  if (len > TG_MCP_PARAM_NAME_MAX) return false;
  for (size_t i = 0; i <= len; i++) key[i] = (char)tolower((unsigned char)name[i]);
  return true;
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
    /* A Name past the most comes in no header: the argument cannot be mirrored. */
    char key[TG_MCP_PARAM_NAME_MAX + 1];
    const char *raw = tg_mcp_param_key(name, key) ? tg_json_str(headers, key) : NULL;
    json_t *arg = json_object_get(args, prop);
    bool has_arg = arg && !json_is_null(arg);
    if (!raw && !has_arg) continue;
    _cleanup_free_ char *value = NULL;
    if (!raw || !has_arg || !mcp_header_value(raw, &value) || !param_matches(value, arg))
      return false;
  }
  return true;
}

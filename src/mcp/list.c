/* tools/list: the catalog a principal may call, computed from the declarations the call
 * path checks, encoded once per tool and paginated. */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

/* The offset an opaque cursor (the decimal offset) names in a list of count entries: 0, or
 * a JSON-RPC error. */
static int read_cursor(cx *c, json_t *params, size_t count, size_t *offset) {
  *offset = 0;
  json_t *cursor = params ? json_object_get(params, "cursor") : NULL;
  if (!cursor) return 0;
  /* Only a cursor as page_result writes it: decimal digits, no sign, space or leading 0. */
  const char *text = json_string_value(cursor);
  size_t digits = text ? strspn(text, "0123456789") : 0;
  bool canonical = digits && !text[digits] && digits < 20 && (text[0] != '0' || digits == 1);
  unsigned long long v = canonical ? strtoull(text, NULL, 10) : 0;
  if (!canonical || v > count)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Invalid cursor", NULL);
  *offset = (size_t)v;
  return 0;
}

/* A page's result: nextCursor when entries remain after end, else nothing yet. */
static json_t *page_result(size_t end, size_t count) {
  json_t *result = json_object();
  char next[32];
  snprintf(next, sizeof next, "%zu", end);
  if (result && end < count && json_object_set_new(result, "nextCursor", json_string(next)) < 0) {
    json_decref(result);
    return NULL;
  }
  return result;
}

/* Pages array by an opaque cursor. */
int mcp_paginate(cx *c, json_t *params, json_t *all, const char *key, json_t **ret) {
  size_t offset, count = json_array_size(all);
  int r = read_cursor(c, params, count, &offset);
  if (r) return r;
  size_t end = offset + TG_MCP_PAGE_SIZE;
  json_t *page = json_array();
  json_t *result = page_result(end, count);
  if (!page || !result) goto nomem;
  for (size_t i = offset; i < count && i < end; i++)
    if (json_array_append(page, json_array_get(all, i)) < 0) goto nomem;
  if (json_object_set_new(result, key, page) < 0) {
    page = NULL;
    goto nomem;
  }
  *ret = result;
  return 0;
nomem:
  json_decref(page);
  json_decref(result);
  return TG_E_NOMEM;
}

int mcp_load_principal(cx *c, tg_principal **ret) {
  int r = tg_principal_load(c->req->env->db, c->req->principal_id, ret);
  if (r == TG_E_NOMEM) return r;
  if (r < 0) return mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR, "The caller could not be loaded", NULL);
  return 0;
}

/* The outputSchema a listing shows: the tool's own, or the error envelope that a failed
 * call's structuredContent holds. Clients check structuredContent against it even when
 * isError is set (the TypeScript SDK's callTool does), so a schema without the envelope would
 * turn each refusal into an error of the client's, the envelope's message lost. The tool's
 * schema stays whole, a schema resource of its own (an $id unless it has one), so that its
 * references ("#", "#/properties/a", "#/$defs/b") resolve within it as before. A new schema;
 * NULL without memory. */
static json_t *listed_output_schema(const tg_tool *tool, json_t *envelope) {
  json_t *own = json_copy(tool->output_schema); /* shallow: its subschemas are shared */
  if (own && !json_object_get(own, "$id")) {
    char *id = NULL;
    bool have_id = asprintf(&id, "urn:toolgate:output:%s", tool->name) >= 0;
    if (!have_id || json_object_set_new(own, "$id", json_string(id)) < 0) {
      json_decref(own);
      own = NULL;
    }
    if (have_id) free(id);
  }
  return json_pack("{s:s,s:[o,O]}", "type", "object", "anyOf", own, envelope);
}

/* A tool's tools/list entry without its name, which depends on the caller. */
json_t *mcp_tool(const tg_tool *tool, json_t *envelope) {
  json_t *t = json_pack("{s:s,s:O,s:o}", "description", tool->description, "inputSchema",
                        tool->input_schema, "annotations", tg_mcp_annotations(tool));
  static const char *const task_support[] = {NULL, "optional", "required"};
  bool ok = t && (mcp_content_passthrough(tool) ||
                  json_object_set_new(t, "outputSchema",
                                      listed_output_schema(tool, envelope)) == 0);
  if (ok && tool->task_support)
    ok = json_object_set_new(t, "execution", json_pack("{s:s}", "taskSupport",
                                                       task_support[tool->task_support])) == 0;
  if (!ok) {
    json_decref(t);
    return NULL;
  }
  return t;
}

/* A tool a caller may use, with the name it sees (borrowed from the registry). */
typedef struct usable_tool {
  const tg_tool *tool;
  const char *name;
} usable_tool;

typedef struct usable {
  usable_tool *at;
  size_t n;
  bool legacy; /* a 2025 request: no tasks, so no tool that runs only as one */
} usable;

static int collect_usable(const tg_tool *tool, const char *name, void *arg) {
  usable *u = arg;
  if (u->legacy && tool->task_support == TG_TASK_REQUIRED) return 0;
  u->at[u->n++] = (usable_tool){tool, name};
  return 0;
}

/* Writes the tools/list entries of u's tools [from, to) as one JSON array. */
static int encode_tools(const tg_mcp_server *srv, const usable *u, size_t from, size_t to,
                        char **text, size_t *len) {
  *text = NULL;
  size_t n = to > from ? to - from : 0;
  char **quoted = calloc(n ? n : 1, sizeof *quoted);
  if (!quoted) return TG_E_NOMEM;
  /* Sized first and written once: a list is tens of KB, and a growing buffer would zero and
   * copy it at every doubling. */
  int r = 0;
  size_t size = 2; /* the brackets */
  for (size_t i = 0; i < n && r == 0; i++) {
    unsigned id = u->at[from + i].tool->id;
    const char *entry = id < srv->n_entries ? srv->entries[id] : NULL;
    json_t *name = json_string(u->at[from + i].name);
    quoted[i] = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
    json_decref(name);
    if (!entry) r = TG_E_NOTFOUND; /* the server was not prepared */
    else if (!quoted[i]) r = TG_E_NOMEM;
    /* entry is {"description":...}: the name goes in front of its members */
    else size += (i > 0) + strlen("{\"name\":,") + strlen(quoted[i]) + strlen(entry + 1);
  }
  char *at = r == 0 ? (*text = malloc(size + 1)) : NULL;
  if (r == 0 && !at) r = TG_E_NOMEM;
  if (at) {
    *at++ = '[';
    for (size_t i = 0; i < n; i++) {
      if (i > 0) *at++ = ',';
      at = stpcpy(stpcpy(stpcpy(at, "{\"name\":"), quoted[i]), ",");
      at = stpcpy(at, srv->entries[u->at[from + i].tool->id] + 1);
    }
    strcpy(at, "]");
    *len = size;
  }
  for (size_t i = 0; i < n; i++) free(quoted[i]);
  free(quoted);
  return r;
}

/* The page goes out as text: the entries were encoded once (tg_mcp_server_prepare). */
int mcp_tools_list(cx *c, json_t *params, json_t **ret) {
  tg_principal *p = NULL;
  int r = mcp_load_principal(c, &p);
  if (r) return r;
  size_t max = tg_registry_count(c->req->env->registry);
  usable u = {.at = calloc(max ? max : 1, sizeof *u.at), .legacy = !c->modern};
  if (!u.at) r = TG_E_NOMEM;
  else r = tg_tools_usable_each(c->req->env, p, TG_SURFACE_MCP, collect_usable, &u);
  size_t offset = 0, end = 0;
  if (r == 0) r = read_cursor(c, params, u.n, &offset);
  if (r == 0) {
    end = offset + TG_MCP_PAGE_SIZE < u.n ? offset + TG_MCP_PAGE_SIZE : u.n;
    r = encode_tools(c->srv, &u, offset, end, &c->raw, &c->raw_len);
  }
  tg_principal_free(p);
  free(u.at);
  if (r) return r;
  c->raw_key = "tools";
  *ret = page_result(end, u.n);
  return *ret ? 0 : TG_E_NOMEM;
}

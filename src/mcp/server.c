#define _GNU_SOURCE
#include "mcp/server.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/principal.h"
#include "core/registry.h"
#include "mcp/tasks.h"
#include "tools/conformance.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_LOG "io.modelcontextprotocol/logLevel"
#define META_SERVER "io.modelcontextprotocol/serverInfo"

static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                              "2024-11-05"};
static const char *const log_levels[] = {"debug",    "info",  "notice", "warning",
                                         "error",    "critical", "alert", "emergency"};
#define N_LOG_LEVELS (sizeof log_levels / sizeof log_levels[0])

enum { ERA_LEGACY = 1, ERA_MODERN = 2, ERA_BOTH = 3 };

/* One request being served. */
typedef struct cx {
  const tg_mcp_server *srv;
  const tg_mcp_request *req;
  const tg_rpc_msg *msg;
  bool modern;
  json_t *caps;          /* borrowed client capabilities of this request */
  const char *log_level; /* lowest level to send, NULL: none */
  /* A JSON-RPC error a method answered with. */
  const char *err_message;
  json_t *err_data;
  bool subscribed; /* subscriptions/listen: answered later, if ever */
  /* A member of the result a method encoded itself (tg_rpc_encode_result_with), or NULL. */
  const char *raw_key;
  char *raw; /* malloc'd */
  size_t raw_len;
} cx;

/* Method results: 0, a JSON-RPC error code (set with rpc_fail), or TG_E_NOMEM. */
typedef int (*method_fn)(cx *c, json_t *params, json_t **ret);

static int rpc_fail(cx *c, int code, const char *message, json_t *data) {
  c->err_message = message;
  json_decref(c->err_data);
  c->err_data = data;
  return code;
}

/* An error's data naming what the request named ({key: value}): a value past
 * ECHO_MAX bytes is cut (on a character's start) and marked, so that a refusal never sends
 * a megabyte name back. */
#define ECHO_MAX 256
static json_t *named(const char *key, const char *value) {
  size_t len = strlen(value), kept = tg_utf8_prefix(value, ECHO_MAX);
  json_t *data = json_pack("{s:s%}", key, value, kept);
  if (data && kept < len && json_object_set_new(data, "truncated", json_true()) < 0) {
    json_decref(data);
    return NULL;
  }
  return data;
}

void tg_mcp_session_init(tg_mcp_session *s) {
  memset(s, 0, sizeof *s);
  s->log_level = -1;
}

void tg_mcp_session_done(tg_mcp_session *s) {
  json_decref(s->client_capabilities);
  tg_mcp_session_init(s);
}

bool tg_mcp_legacy_supported(const char *version) {
  for (size_t i = 0; version && i < sizeof legacy_versions / sizeof legacy_versions[0]; i++)
    if (strcmp(version, legacy_versions[i]) == 0) return true;
  return false;
}

static json_t *meta_of(const tg_rpc_msg *msg) {
  return msg->params ? json_object_get(msg->params, "_meta") : NULL;
}

bool tg_mcp_has_claim(const tg_rpc_msg *msg) {
  json_t *meta = meta_of(msg);
  return json_is_object(meta) && json_object_get(meta, META_VERSION) != NULL;
}

static int level_index(const char *name) {
  for (size_t i = 0; name && i < N_LOG_LEVELS; i++)
    if (strcmp(name, log_levels[i]) == 0) return (int)i;
  return -1;
}

/* ---- annotations ---- */

json_t *tg_mcp_annotations(const tg_tool *tool) {
  bool read_only = tool->effect == TG_EFFECT_READ;
  /* A read never destroys; a write is destructive when its spec says so: it may delete,
   * replace or end for good what exists (MCP: not only additive updates). Idempotence is the
   * spec's word for reads too: a read may record each call (a skill's load does). */
  bool destructive = !read_only && (tool->flags & TG_TOOL_DESTRUCTIVE);
  bool idempotent = tool->flags & TG_TOOL_IDEMPOTENT;
  bool open_world = tool->flags & TG_TOOL_OPEN_WORLD;
  return json_pack("{s:b,s:b,s:b,s:b}", "readOnlyHint", read_only, "destructiveHint",
                   destructive, "idempotentHint", idempotent, "openWorldHint", open_world);
}

/* A tool declaring mcp_content answers in MCP content blocks itself ({"content": [...]}),
 * passed through as is. Every other tool's result is JSON data, served as structuredContent
 * with its text as one text block. */
static bool content_passthrough(const tg_tool *tool) {
  return tool && (tool->flags & TG_TOOL_MCP_CONTENT);
}

/* ---- lists ---- */

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
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Invalid cursor", NULL);
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
static int paginate(cx *c, json_t *params, json_t *all, const char *key, json_t **ret) {
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

static int load_principal(cx *c, tg_principal **ret) {
  int r = tg_principal_load(c->req->env->db, c->req->principal_id, ret);
  if (r == TG_E_NOMEM) return r;
  if (r < 0) return rpc_fail(c, TG_RPC_INTERNAL_ERROR, "The caller could not be loaded", NULL);
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
    bool named = asprintf(&id, "urn:toolgate:output:%s", tool->name) >= 0;
    if (!named || json_object_set_new(own, "$id", json_string(id)) < 0) {
      json_decref(own);
      own = NULL;
    }
    if (named) free(id);
  }
  return json_pack("{s:s,s:[o,O]}", "type", "object", "anyOf", own, envelope);
}

/* A tool's tools/list entry without its name, which depends on the caller. */
static json_t *mcp_tool(const tg_tool *tool, json_t *envelope) {
  json_t *t = json_pack("{s:s,s:O,s:o}", "description", tool->description, "inputSchema",
                        tool->input_schema, "annotations", tg_mcp_annotations(tool));
  static const char *const task_support[] = {NULL, "optional", "required"};
  bool ok = t && (content_passthrough(tool) ||
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

/* The secret of the workspace's key named name into key (0), or TG_E_NOTFOUND. */
static int read_key(tg_db *db, const char *name, char key[65]) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(db, "SELECT secret FROM server_keys WHERE name = $1",
                          json_pack("[s]", name), &row);
  const char *secret = json_string_value(json_object_get(row, "secret"));
  if (r == 0 && !row) return TG_E_NOTFOUND;
  if (r == 0 && (!secret || strlen(secret) != 64)) r = TG_E_DB;
  if (r == 0) memcpy(key, secret, 65);
  return r;
}

/* Reads the workspace's key named name into key, made by the first server that needs it (a
 * write only then: a server starts while another writes). Logs why it cannot. */
static int workspace_key(const tg_env *env, const char *name, char key[65]) {
  tg_db *own = NULL, *db = env->db;
  if (!db && tg_db_open(env->data_dir, &own, NULL) < 0) {
    tg_log(TG_LOG_ERROR, "mcp: cannot open the database to read the workspace's keys");
    return TG_E_DB;
  }
  if (own) db = own;
  int r = read_key(db, name, key);
  if (r == TG_E_NOTFOUND) {
    unsigned char raw[32];
    char fresh[65];
    r = tg_random_bytes(raw, sizeof raw) ? 0 : TG_E_IO;
    tg_hex(raw, sizeof raw, fresh);
    if (r == 0) /* another server may make it first: then its key is the one */
      r = tg_db_exec(db, "INSERT INTO server_keys (name, secret) VALUES ($1, $2) "
                         "ON CONFLICT (name) DO NOTHING",
                     json_pack("[ss]", name, fresh), NULL);
    if (r == 0) r = read_key(db, name, key);
  }
  if (r < 0)
    tg_log(TG_LOG_ERROR, "mcp: cannot read the workspace's key %s: %s%s%s", name,
           tg_status_text(r), r == TG_E_IO ? "" : ": ", r == TG_E_IO ? "" : tg_db_errmsg(db));
  tg_db_close(own);
  return r;
}

int tg_mcp_server_prepare(tg_mcp_server *srv, const tg_env *env) {
  const tg_registry *reg = env->registry;
  size_t n = tg_registry_count(reg);
  /* What srv may hold from a copy of another server is not its own. */
  srv->n_entries = 0;
  srv->tasks = NULL;
  srv->entries = NULL;
  int r = workspace_key(env, "mcp.request_state", srv->state_key);
  if (r < 0) return r;
  srv->entries = calloc(n ? n : 1, sizeof *srv->entries);
  if (!srv->entries || tg_mcp_tasks_new(env, &srv->tasks) < 0) {
    tg_mcp_server_done(srv);
    return TG_E_NOMEM;
  }
  srv->n_entries = n;
  _cleanup_json_ json_t *envelope = tg_error_envelope_schema();
  for (size_t i = 0; i < n; i++) {
    const tg_tool *tool = tg_registry_at(reg, i);
    _cleanup_json_ json_t *entry = envelope ? mcp_tool(tool, envelope) : NULL;
    char *text = entry ? json_dumps(entry, JSON_COMPACT) : NULL;
    if (!text || tool->id >= n) {
      free(text);
      tg_mcp_server_done(srv);
      return TG_E_NOMEM;
    }
    srv->entries[tool->id] = text;
  }
  return 0;
}

void tg_mcp_server_done(tg_mcp_server *srv) {
  tg_mcp_tasks_free(srv->tasks);
  srv->tasks = NULL;
  for (size_t i = 0; i < srv->n_entries; i++) free(srv->entries[i]);
  free(srv->entries);
  srv->entries = NULL;
  srv->n_entries = 0;
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
static int m_tools_list(cx *c, json_t *params, json_t **ret) {
  tg_principal *p = NULL;
  int r = load_principal(c, &p);
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

/* ---- 2026-07-28 multi round-trip requests ----
 * A handler's requestState comes back from the client, so the server seals it: an HMAC
 * under the workspace's key binds it to the principal, the method, target and arguments,
 * and an expiry. Altered, foreign or stale state is refused before any handler sees it;
 * any server of the workspace opens it, as the client's next request may reach another. */

#define STATE_TTL_MS (10LL * 60 * 1000)
#define STATE_MAX 65536 /* bytes of what a state holds (state_body) */
#define SEALED_MAX (STATE_MAX + 128) /* and of the sealed state a client may send back */

/* What a sealed state is bound to besides its principal and expiry: the method, its target
 * and its arguments (NULL: none), so that a state handed out for one call cannot be replayed
 * on the same tool with other arguments. */
typedef struct state_subject {
  const char *method, *name;
  json_t *args;
} state_subject;

/* Hex HMAC-SHA256 of the binding of a state of c's caller into out; false when it cannot be
 * computed. The arguments go in canonical form (keys sorted). */
static bool state_mac(const cx *c, const state_subject *subject, long long expiry,
                      const char *payload, char out[65]) {
  _cleanup_free_ char *args =
      subject->args ? json_dumps(subject->args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                    : strdup("{}");
  _cleanup_free_ char *msg = NULL;
  /* The form of what the state holds comes first: a server that reads another form refuses
   * the state instead of misreading it. */
  int n = args ? asprintf(&msg, "toolgate-state-2\n%s\n%s:%s\n%s\n%lld\n%s", c->req->principal_id,
                          subject->method, subject->name, args, expiry, payload)
               : -1;
  if (n < 0) return false;
  unsigned char mac[32];
  if (tg_hmac_sha256(c->srv->state_key, 64, msg, (size_t)n, mac) < 0) return false;
  tg_hex(mac, sizeof mac, out);
  return true;
}

/* "expiry.mac.payload" */
static json_t *state_seal(const cx *c, const state_subject *subject, const char *payload) {
  long long expiry = (long long)tg_now_ms() + STATE_TTL_MS;
  char mac[65];
  if (!state_mac(c, subject, expiry, payload, mac)) return NULL;
  _cleanup_free_ char *sealed = NULL;
  if (asprintf(&sealed, "%lld.%s.%s", expiry, mac, payload) < 0) return NULL;
  return json_string(sealed);
}

/* The payload of a sealed state (pointing into sealed), or NULL when it does not verify. */
static const char *state_open(const cx *c, const state_subject *subject, const char *sealed) {
  if (strlen(sealed) > SEALED_MAX) return NULL;
  /* The expiry as state_seal writes it, digits alone: a state has one form. */
  size_t digits = strspn(sealed, "0123456789");
  if (!digits || digits > 18 || sealed[0] == '0') return NULL;
  char *end = NULL;
  long long expiry = strtoll(sealed, &end, 10);
  if (*end != '.' || strlen(end + 1) < 65 || end[65] != '.') return NULL;
  if (expiry < (long long)tg_now_ms()) return NULL;
  char mac[65];
  if (!state_mac(c, subject, expiry, end + 66, mac)) return NULL;
  return tg_same_secret(mac, end + 1, 64) ? end + 66 : NULL;
}

/* What the state of an InputRequiredResult holds for the client to send back (compact JSON,
 * new; NULL without memory): the handler's own state, if any, and what each input request
 * asked, cut down to what its answer is checked against, so that a later request's answers
 * are checked with no memory of this one: {"asked":{key:{"method","params"}},"state"?}. */
static char *state_body(json_t *result) {
  json_t *asked = json_object();
  const char *key;
  json_t *request;
  json_object_foreach(asked ? json_object_get(result, "inputRequests") : NULL, key, request) {
    json_t *terms =
        tg_client_answer_terms(tg_json_str(request, "method"), json_object_get(request, "params"));
    if (!terms || json_object_set_new(asked, key, terms) < 0) {
      json_decref(asked);
      return NULL;
    }
  }
  json_t *state = json_object_get(result, "requestState");
  _cleanup_json_ json_t *body =
      asked ? json_pack("{s:o,s:O*}", "asked", asked, "state", json_is_string(state) ? state : NULL)
            : NULL;
  return body ? json_dumps(body, JSON_COMPACT) : NULL;
}

/* Whether the state of an InputRequiredResult fits in what a client may send back: 1, 0, or
 * TG_E_NOMEM. */
static int state_fits(json_t *result) {
  _cleanup_free_ char *body = state_body(result);
  return body ? strlen(body) <= STATE_MAX : TG_E_NOMEM;
}

/* The inputResponses of a request (an object; NULL when absent), or a JSON-RPC error code.
 * What each must be is for its reader to check (a task checks those it asked for itself). */
static int read_responses(cx *c, json_t *params, json_t **responses) {
  *responses = json_object_get(params, "inputResponses");
  if (*responses && !json_is_object(*responses))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "inputResponses must be an object", NULL);
  return 0;
}

/* The inputResponses of a request that came without a requestState, which would say what
 * was asked (a client may answer before it was asked): each must read as the answer to a
 * request the client can answer (tg_client_unasked_answer_reads), and the handler judges
 * which it asked. *round as read_round's. */
static int read_unasked(cx *c, json_t *given, json_t **round) {
  const char *key;
  json_t *v;
  json_object_foreach(given, key, v) {
    if (!tg_client_unasked_answer_reads(c->caps, v))
      return rpc_fail(c, TG_RPC_INVALID_PARAMS,
                      "An input response answers no request this client can answer",
                      named("key", key));
  }
  *round = json_pack("{s:O*}", "answers", given);
  return *round ? 0 : TG_E_NOMEM;
}

/* Reads the retry fields of a 2026-07-28 request: its requestState, verified, and the
 * inputResponses to what that state says was asked, each checked against its request; answers
 * to anything else are ignored (without a state: read_unasked). *round (new) holds the
 * "answers" so checked and the handler's "state", if any. Returns 0 or a JSON-RPC error
 * code. */
static int read_round(cx *c, json_t *params, const state_subject *subject, json_t **round) {
  json_t *sealed = json_object_get(params, "requestState"), *given;
  *round = NULL;
  /* 2025 revisions have neither field: there the server asks the client itself. */
  if (!c->modern) return 0;
  int r = read_responses(c, params, &given);
  if (r || !sealed) return r ? r : read_unasked(c, given, round);
  const char *text = json_string_value(sealed);
  const char *body = text ? state_open(c, subject, text) : NULL;
  _cleanup_json_ json_t *opened = body ? json_loads(body, 0, NULL) : NULL;
  json_t *asked = json_object_get(opened, "asked");
  if (!json_is_object(asked))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Invalid or expired requestState", NULL);
  json_t *answers = json_object();
  if (!answers || json_object_set_new(opened, "answers", answers) < 0) return TG_E_NOMEM;
  const char *key;
  json_t *request;
  json_object_foreach(asked, key, request) {
    json_t *answer = json_object_get(given, key);
    if (!answer) continue;
    if (!tg_client_answer_reads(tg_json_str(request, "method"), json_object_get(request, "params"),
                                answer))
      return rpc_fail(c, TG_RPC_INVALID_PARAMS, "An input response does not answer its request",
                      named("key", key));
    if (json_object_set(answers, key, answer) < 0) return TG_E_NOMEM;
  }
  *round = json_incref(opened);
  return 0;
}

int tg_mcp_input_refusal(bool carried, json_t *caps, json_t *result, int *code,
                         const char **message, json_t **data) {
  json_t *requests = json_object_get(result, "inputRequests");
  *data = NULL;
  *code = TG_RPC_INTERNAL_ERROR;
  if (!carried) {
    *message = "This request needs input its client can give only on protocol 2026-07-28, "
               "or through a 2025 connection that can ask it (the tool may not wait on its "
               "client, or the request cannot stream)";
    return 1;
  }
  *message = "The tool asked for no input, or for an unknown kind of input";
  if (!json_object_size(requests)) return 1;
  json_t *missing = json_object();
  if (!missing) return TG_E_NOMEM;
  const char *key;
  json_t *req;
  json_object_foreach(requests, key, req) {
    const char *method = json_string_value(json_object_get(req, "method"));
    json_t *params = json_object_get(req, "params");
    _cleanup_json_ json_t *need = NULL;
    int r = tg_client_requirement(method, params, &need);
    if (r == 0 && !tg_client_can(caps, method, params) &&
        json_object_update_recursive(missing, need) < 0)
      r = TG_E_NOMEM;
    if (r < 0) {
      json_decref(missing);
      return r == TG_E_INVAL ? 1 : r;
    }
  }
  if (!json_object_size(missing)) {
    json_decref(missing);
    return 0;
  }
  *code = TG_RPC_MISSING_CAPABILITY;
  *message = "Missing required client capability";
  *data = json_pack("{s:o}", "requiredCapabilities", missing);
  return *data ? 1 : TG_E_NOMEM;
}

/* Whether what an InputRequiredResult asks goes to this 2025 request's client as requests of
 * their own (see next_round): its transport can ask, and the tool (NULL: a prompt) is one
 * that may wait on its client. */
static bool asks_inputs(const cx *c, const tg_tool *tool) {
  return !c->modern && c->req->io && c->req->io->ask &&
         (!tool || tool->flags & TG_TOOL_INTERACTIVE);
}

/* Seals the state of an InputRequiredResult a handler returned (checked already: see
 * channel_check_result) for the client to send back. */
static int seal_input_required(cx *c, const state_subject *subject, json_t *result) {
  _cleanup_free_ char *body = state_body(result);
  json_t *sealed = body ? state_seal(c, subject, body) : NULL;
  return sealed && json_object_set_new(result, "requestState", sealed) == 0 ? 0 : TG_E_NOMEM;
}

/* Whether this request's client can be given the InputRequiredResult of tool (NULL: a
 * prompt's), as tg_mcp_input_refusal says; on 2026-07-28 its state must also fit in what the
 * client may send back. */
static int input_refusal(cx *c, const tg_tool *tool, json_t *result, int *code,
                         const char **message, json_t **data) {
  int r = tg_mcp_input_refusal(c->modern || asks_inputs(c, tool), c->caps, result, code, message,
                               data);
  if (r != 0 || !c->modern) return r;
  if ((r = state_fits(result)) != 0) return r < 0 ? r : 0;
  *code = TG_RPC_INTERNAL_ERROR;
  *message = "The input asked for, with the request's state, is too large to be sent back";
  *data = json_pack("{s:i}", "max", STATE_MAX);
  return *data ? 1 : TG_E_NOMEM;
}

/* Serves an InputRequiredResult nothing was written for (a prompt's): refused as
 * input_refusal says, else with its state sealed. Returns 0 (result ready), a JSON-RPC error
 * code, or TG_E_NOMEM. */
static int finish_input_required(cx *c, const state_subject *subject, json_t *result) {
  int code;
  const char *message;
  json_t *data;
  int r = input_refusal(c, NULL, result, &code, &message, &data);
  if (r == 1) return rpc_fail(c, code, message, data);
  return r < 0 ? r : seal_input_required(c, subject, result);
}

bool tg_mcp_is_input_required(json_t *result) {
  const char *type = json_string_value(json_object_get(result, "resultType"));
  return type && strcmp(type, "input_required") == 0;
}


/* ---- tools/call ---- */

typedef struct call_channel {
  cx *c;
  /* channel_cancelled said so: the handler (or the channel's own ask) learnt of it. Atomic:
   * a task's starter asks too, on its own thread. */
  atomic_bool heard_cancel;
  /* The JSON-RPC error answering the request instead of the result (check_result). */
  int refused_code;
  const char *refused_message;
  json_t *refused_data;
} call_channel;

/* An InputRequiredResult this request cannot carry fails the call before it commits; the
 * request is answered with the JSON-RPC error that says why. */
static int channel_check_result(void *self, tg_call_ctx *call, json_t *result) {
  call_channel *ch = self;
  if (!tg_client_asks_input(call->tool, result)) return TG_OK;
  int code;
  const char *message;
  json_t *data;
  int r = input_refusal(ch->c, call->tool, result, &code, &message, &data);
  if (r != 1) return r;
  ch->refused_code = code;
  ch->refused_message = message;
  ch->refused_data = data;
  return tg_fail(call, TG_ERR_PRECONDITION_FAILED, json_incref(data), "%s", message);
}

static int channel_notify(void *self, const char *method, json_t *params) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  if (tg_mcp_watch_touch(method)) {
    json_decref(params);
    return TG_OK;
  }
  json_t *msg = tg_rpc_notification(method, params);
  if (!msg) return TG_E_NOMEM;
  if (!io || !io->send) {
    json_decref(msg);
    return TG_OK;
  }
  return io->send(io->self, msg);
}

static int channel_close_stream(void *self) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  return io->close_stream(io->self);
}

/* Whether the call was cancelled, or its transport gave up on every answer. */
static bool channel_cancelled(void *self) {
  call_channel *ch = self;
  const tg_mcp_request *req = ch->c->req;
  bool cancelled = (req->abandoned && atomic_load(req->abandoned)) ||
                   (req->inflight && tg_mcp_inflight_cancelled(req->inflight, ch->c->msg->id)) ||
                   (req->gone && req->gone(req->gone_arg));
  if (cancelled) atomic_store(&ch->heard_cancel, true);
  return cancelled;
}

static bool channel_cancel_heard(void *self) {
  return atomic_load(&((call_channel *)self)->heard_cancel);
}

static int channel_ask(void *self, const char *method, json_t *params, json_t **ret) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  if (channel_cancelled(ch)) {
    json_decref(params);
    return TG_E_IO;
  }
  /* Never a request the client did not declare it can answer. */
  if (!tg_client_can(ch->c->caps, method, params)) {
    json_decref(params);
    return TG_E_INVAL;
  }
  /* Drawn, not counted: a count would tell each client how many questions the others were
   * asked. 48 bits stay exact in any client's numbers. */
  unsigned char drawn[6];
  if (!tg_random_bytes(drawn, sizeof drawn)) {
    json_decref(params);
    return TG_E_IO;
  }
  json_int_t id = 0;
  for (size_t i = 0; i < sizeof drawn; i++) id = id << 8 | drawn[i];
  _cleanup_json_ json_t *asked = json_incref(params); /* what the answer must fit */
  json_t *request = tg_rpc_request(id, method, params);
  if (!request) return TG_E_NOMEM;
  json_t *response = NULL;
  int r = io->ask(io->self, request, &response);
  /* An answer that raced the cancellation is dropped: the call must fail all the same. */
  if (r == 0 && channel_cancelled(ch)) {
    json_decref(response);
    r = TG_E_IO;
  }
  if (r < 0) return r;
  json_t *result = json_object_get(response, "result");
  json_t *error = json_object_get(response, "error");
  /* A result that is not what was asked for (of another shape, or not what an elicitation's
   * requestedSchema asks) is the client's error: no handler sees it. */
  if (result && !tg_client_answer_reads(method, asked, result)) {
    *ret = json_pack("{s:i,s:s,s:{s:O}}", "code", TG_RPC_INVALID_PARAMS, "message",
                     "The client's result does not answer the request", "data", "result", result);
    json_decref(response);
    return *ret ? TG_E_TOOL : TG_E_NOMEM;
  }
  *ret = json_incref(result ? result : error);
  json_decref(response);
  if (!*ret) return TG_E_INVAL;
  return result ? TG_OK : TG_E_TOOL;
}

/* A 2025 request refused between its rounds (status, from next_round: a JSON-RPC code, with
 * the message rpc_fail kept) ends with no round running to tell of it: its own audit row
 * says so. Returns status. */
static int audit_unrun_end(cx *c, const tg_tool *tool, int status) {
  if (status == TG_E_NOMEM) return status;
  tg_db *db = c->req->env->db;
  _cleanup_free_ char *why = NULL;
  if (asprintf(&why, "failed: %s", c->err_message) < 0) why = NULL;
  int r = why ? tg_db_begin(db) : TG_E_NOMEM;
  if (r == TG_OK) r = tg_call_log_end(db, c->req->principal_id, tool->name, NULL, "WARN", why);
  if (r == TG_OK) r = tg_db_commit(db);
  if (r < 0) {
    tg_db_rollback(db);
    tg_log(TG_LOG_WARN, "mcp: the audit of a request refused between its rounds was not written");
  }
  return status;
}

/* Rounds a 2025 request may go through its client's answers (see next_round). */
#define LEGACY_INPUT_ROUNDS 16

/* Of a request's asking its client (channel_ask), the JSON-RPC error answering it when it
 * failed (status; error, the client's error object, stolen) for the input under key. */
static int ask_failed(cx *c, int status, const char *key, json_t *error) {
  if (status == TG_E_TOOL)
    return rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                    "The client answered an input request with an error, or with a result that "
                    "does not answer it",
                    json_pack("{s:s,s:o}", "key", key, "error", error));
  json_decref(error);
  if (status == TG_E_TOO_LARGE)
    return rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                    "An input request cannot go out now: too many wait for this client's "
                    "answers, or too much output waits for it to read; retry later",
                    json_pack("{s:s}", "key", key));
  if (status == TG_E_NOMEM) return status;
  return rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                  "The client did not answer an input request: it went away, did not answer "
                  "in time, or the request was cancelled or the server is stopping",
                  json_pack("{s:s}", "key", key));
}

/* The params of input request method as a 2025-11-25 client reads them (a new reference):
 * there, a URL-mode elicitation names itself (elicitationId, required), which 2026-07-28
 * dropped; NULL without memory or randomness. */
static json_t *legacy_params(const char *method, json_t *params) {
  const char *mode = json_string_value(json_object_get(params, "mode"));
  if (!method || strcmp(method, "elicitation/create") != 0 || !mode || strcmp(mode, "url") != 0 ||
      json_object_get(params, "elicitationId"))
    return json_incref(params);
  char id[TG_UUID_LEN + 1];
  json_t *named = tg_uuid7(id) == 0 ? json_copy(params) : NULL;
  if (named && json_object_set_new(named, "elicitationId", json_string(id)) < 0) {
    json_decref(named);
    return NULL;
  }
  return named;
}

/* 2025 revisions have no InputRequiredResult: what one (result) asks goes to the client as
 * requests of their own, as the reference SDK does on 2025 sessions, and the next round runs
 * with their answers (*answers, new, keyed as result keys them, each checked against what it
 * answers) and result's requestState; rounds counts those asked before. Returns 0, a JSON-RPC
 * error code (rpc_fail) or TG_E_NOMEM. */
static int next_round(cx *c, call_channel *ch, json_t *result, unsigned rounds,
                      json_t **answers) {
  *answers = NULL;
  int code;
  const char *message;
  json_t *data;
  int r = tg_mcp_input_refusal(true, c->caps, result, &code, &message, &data);
  if (r == 1) return rpc_fail(c, code, message, data);
  if (r < 0) return r;
  if (rounds >= LEGACY_INPUT_ROUNDS)
    return rpc_fail(c, TG_RPC_INTERNAL_ERROR, "The request asked its client for input too often",
                    json_pack("{s:i}", "max", LEGACY_INPUT_ROUNDS));
  json_t *got = json_object();
  if (!got) return TG_E_NOMEM;
  const char *key;
  json_t *request;
  json_object_foreach(json_object_get(result, "inputRequests"), key, request) {
    const char *method = json_string_value(json_object_get(request, "method"));
    json_t *params = json_object_get(request, "params");
    json_t *answer = NULL, *asked = legacy_params(method, params);
    r = asked ? channel_ask(ch, method, asked, &answer) : TG_E_NOMEM;
    if (r == TG_OK) {
      r = json_object_set_new(got, key, answer) < 0 ? TG_E_NOMEM : 0;
    } else {
      r = ask_failed(c, r, key, answer);
    }
    if (r != 0) {
      json_decref(got);
      return r;
    }
  }
  *answers = got;
  return 0;
}

static json_t *text_block(const char *text) {
  return json_pack("[{s:s,s:s}]", "type", "text", "text", text);
}

json_t *tg_mcp_tool_result(const tg_tool *tool, int status, json_t *value) {
  if (status == TG_OK && content_passthrough(tool)) return json_incref(value);
  /* The text is the structured content serialized, a refusal's envelope too: a client that
   * hands its model only the text keeps what details say (allowed moves, scopes, pointers). */
  _cleanup_free_ char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) return NULL;
  return status == TG_OK
             ? json_pack("{s:o,s:O}", "content", text_block(text), "structuredContent", value)
             : json_pack("{s:o,s:O,s:b}", "content", text_block(text), "structuredContent", value,
                         "isError", 1);
}

/* Whether this request's client takes tasks (it declares the extension, an object as every
 * capability is; 2026-07-28 only). */
static bool takes_tasks(const cx *c) {
  return c->modern && c->srv->tasks &&
         json_is_object(
             json_object_get(json_object_get(c->caps, "extensions"), TG_MCP_TASKS_EXTENSION));
}

static int tasks_required(cx *c) {
  /* 2025-11-25 answers a call of a task-only tool made as a plain request so; tasks are not
   * served on that revision here. */
  if (!c->modern)
    return rpc_fail(c, TG_RPC_METHOD_NOT_FOUND, "This tool runs only as a task (protocol 2026-07-28)",
                    json_pack("{s:s}", "protocolVersion", TG_MCP_MODERN_VERSION));
  return rpc_fail(c, TG_RPC_MISSING_CAPABILITY, "Missing required client capability",
                  json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions",
                            TG_MCP_TASKS_EXTENSION));
}

/* Runs a call that may become a task on a thread of its own: the task, or the call's own
 * outcome in *status and *res when it ended without detaching. Returns 1 when no task may
 * start now and the tool can do without one: the caller runs it as a plain call. */
static int start_task(cx *c, call_channel *ch, const tg_tool *tool, json_t *args,
                      json_t *progress_token, json_t *responses, const char *state,
                      json_t **task, int *status, tg_call_result *res) {
  tg_mcp_task_call call = {.principal_id = c->req->principal_id,
                           .token_hash = c->req->token_hash, .run_id = c->req->run_id,
                           .tool = tool, .args = args,
                           .capabilities = c->caps, .input_responses = responses,
                           .request_state = state, .cancelled = channel_cancelled,
                           .check_result = channel_check_result, .notify = channel_notify,
                           .progress_token = progress_token, .log_level = c->log_level, .arg = ch,
                           .db = c->req->env->db};
  tg_mcp_task_start started;
  int r = tg_mcp_tasks_start(c->srv->tasks, &call, &started);
  if (r == TG_E_TOO_LARGE && tool->task_support == TG_TASK_OPTIONAL) return 1;
  if (r == TG_E_TOO_LARGE)
    return rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                    strcmp(started.limit, "held") == 0
                        ? "Too many tasks held: read how ended ones ended, or let them expire"
                    : strcmp(started.limit, "kept") == 0
                        ? "Too many ended tasks kept: wait for the oldest to pass their time to live"
                        : "Too many tasks running: wait for some to end",
                    json_pack("{s:s,s:i}", "limit", started.limit, "max", started.max));
  if (r < 0) return r;
  *task = started.task;
  *status = started.status;
  *res = started.res;
  return 0;
}

static int m_tools_call(cx *c, json_t *params, json_t **ret) {
  const char *name = json_string_value(json_object_get(params, "name"));
  json_t *args = json_object_get(params, "arguments");
  if (!name) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.name must be a string", NULL);
  if (args && !json_is_object(args) && !json_is_null(args))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.arguments must be an object", NULL);
  if (json_is_null(args)) args = NULL;
  json_t *meta = json_object_get(params, "_meta");
  json_t *progress_token = json_object_get(meta, "progressToken");
  const state_subject subject = {"tools/call", name, args};
  _cleanup_json_ json_t *round = NULL;
  int rr = read_round(c, params, &subject, &round);
  if (rr) return rr;
  json_t *responses = json_object_get(round, "answers");
  const char *state = tg_json_str(round, "state");
  const tg_tool *tool = tg_registry_find(c->req->env->registry, name);
  /* The server alone decides whether a call becomes a task; a legacy "task" param is
   * ignored. */
  bool may_detach = tool && tool->task_support != TG_TASK_FORBIDDEN && takes_tasks(c);
  if (tool && tool->task_support == TG_TASK_REQUIRED && !may_detach) return tasks_required(c);
  call_channel ch = {.c = c};
  tg_call_result res;
  int r;
  json_t *task = NULL;
  rr = may_detach ? start_task(c, &ch, tool, args, progress_token, responses, state, &task, &r,
                               &res)
                   : 1;
  if (rr < 0) return rr;
  if (task) {
    *ret = task;
    return 0;
  }
  if (rr == 1) {
    tg_client_channel channel = {
        .self = &ch,
        .progress_token = progress_token,
        .log_level = c->log_level,
        .capabilities = c->caps,
        .input_responses = responses,
        .request_state = state,
        .notify = channel_notify,
        /* 2026-07-28 forbids server-to-client requests; legacy needs a transport that can. */
        .ask = !c->modern && c->req->io && c->req->io->ask ? channel_ask : NULL,
        .close_stream = c->req->io && c->req->io->close_stream ? channel_close_stream : NULL,
        .cancelled =
            c->req->inflight || c->req->abandoned || c->req->gone ? channel_cancelled : NULL,
        .cancel_heard = channel_cancel_heard,
        .check_result = channel_check_result,
    };
    tg_call_request call = {.principal_id = c->req->principal_id, .surface = TG_SURFACE_MCP,
                            .tool = name, .args = args, .client = &channel,
                            .run_id = c->req->run_id, .run_held = c->req->run_held};
    r = tg_call(c->req->env, &call, &res);
    /* Each round a call of its own, audited as any. */
    _cleanup_json_ json_t *answers = NULL;
    _cleanup_free_ char *held_state = NULL;
    for (unsigned rounds = 0;
         r == TG_OK && asks_inputs(c, tool) && tg_client_asks_input(tool, res.value); rounds++) {
      json_decref(answers);
      free(held_state);
      const char *kept = json_string_value(json_object_get(res.value, "requestState"));
      held_state = kept ? strdup(kept) : NULL;
      rr = kept && !held_state ? TG_E_NOMEM : next_round(c, &ch, res.value, rounds, &answers);
      tg_call_result_done(&res);
      if (rr) return audit_unrun_end(c, tool, rr);
      channel.input_responses = answers;
      channel.request_state = held_state;
      channel.progress_token = NULL; /* a round's progress starts anew: a token's must rise */
      r = tg_call(c->req->env, &call, &res);
    }
  }
  if (ch.refused_code) {
    tg_call_result_done(&res);
    return rpc_fail(c, ch.refused_code, ch.refused_message, ch.refused_data);
  }
  if (r == TG_E_TOOL && !tool) {
    tg_call_result_done(&res);
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown tool", named("name", name));
  }
  if (!res.value) {
    tg_call_result_done(&res);
    return TG_E_NOMEM;
  }
  *ret = tg_mcp_tool_result(tool, r == TG_OK ? TG_OK : TG_E_TOOL, res.value);
  tg_call_result_done(&res);
  if (!*ret) return TG_E_NOMEM;
  if (r == TG_OK && tg_mcp_is_input_required(*ret) && seal_input_required(c, &subject, *ret) < 0) {
    json_decref(*ret);
    *ret = NULL;
    return TG_E_NOMEM;
  }
  return 0;
}

/* ---- resources, prompts, completion ---- */

/* Whether o is an object of strings, as prompt arguments are. */
static bool string_values(json_t *o) {
  const char *key;
  json_t *value;
  if (!json_is_object(o)) return false;
  json_object_foreach(o, key, value) if (!json_is_string(value)) return false;
  return true;
}

/* The resources, prompts and completions are the conformance fixtures': their methods are
 * served only with them (see find_method), and only to whom tools are: an agent that is not
 * active is offered none (lists are empty), and asking for one is refused. */
static int fixtures_offered(cx *c, bool *offered) {
  tg_principal *p = NULL;
  int r = load_principal(c, &p);
  if (r) return r;
  *offered = tg_principal_acts(p);
  tg_principal_free(p);
  return 0;
}

/* 0 when the caller is offered the fixtures, else its JSON-RPC error (code: a not found's). */
static int fixtures_refused(cx *c, int code) {
  bool offered;
  int r = fixtures_offered(c, &offered);
  if (r || offered) return r;
  return rpc_fail(c, code, "This agent is not active: it is offered no resources or prompts",
                  json_pack("{s:s}", "reason", "agent_not_active"));
}

static int fixture_list(cx *c, json_t *params, json_t *(*source)(void), const char *key,
                        json_t **ret) {
  bool offered;
  int r = fixtures_offered(c, &offered);
  if (r) return r;
  json_t *all = offered ? source() : json_array();
  if (!all) return TG_E_NOMEM;
  r = paginate(c, params, all, key, ret);
  json_decref(all);
  return r;
}

static int m_resources_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_resources, "resources", ret);
}

static int m_templates_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_resource_templates, "resourceTemplates", ret);
}

static int m_prompts_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_prompts, "prompts", ret);
}

/* The contents of the resource params.uri names, or the JSON-RPC error of a bad or unknown
 * one. */
static int resource_of(cx *c, json_t *params, json_t **contents) {
  const char *uri = json_string_value(json_object_get(params, "uri"));
  if (!uri) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.uri must be a string", NULL);
  /* 2026-07-28 moved "not found" to -32602; 2025-11-25 clients expect -32002. */
  int not_found = c->modern ? TG_RPC_INVALID_PARAMS : TG_RPC_RESOURCE_NOT_FOUND;
  int r = fixtures_refused(c, not_found);
  if (r) return r;
  r = tg_conformance_resource_read(uri, contents);
  if (r == TG_E_NOTFOUND) return rpc_fail(c, not_found, "Resource not found", named("uri", uri));
  return r;
}

static int m_resources_read(cx *c, json_t *params, json_t **ret) {
  json_t *contents = NULL;
  int r = resource_of(c, params, &contents);
  if (r != 0) return r;
  *ret = json_pack("{s:o}", "contents", contents);
  return *ret ? 0 : TG_E_NOMEM;
}

/* The fixture resources never change, so a subscription has nothing to announce; one to a
 * resource that does not exist is refused, as a read of it is. */
static int m_resources_subscribe(cx *c, json_t *params, json_t **ret) {
  json_t *contents = NULL;
  int r = resource_of(c, params, &contents);
  json_decref(contents);
  if (r != 0) return r;
  *ret = json_object();
  return *ret ? 0 : TG_E_NOMEM;
}

/* Ending a subscription there is none of leaves none: nothing to refuse. */
static int m_resources_unsubscribe(cx *c, json_t *params, json_t **ret) {
  if (!json_is_string(json_object_get(params, "uri")))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.uri must be a string", NULL);
  *ret = json_object();
  return *ret ? 0 : TG_E_NOMEM;
}

static int m_prompts_get(cx *c, json_t *params, json_t **ret) {
  const char *name = json_string_value(json_object_get(params, "name"));
  json_t *args = json_object_get(params, "arguments");
  if (!name) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.name must be a string", NULL);
  if (json_is_null(args)) args = NULL; /* as tools/call takes it */
  if (args && !string_values(args))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.arguments must be an object of strings",
                    NULL);
  const state_subject subject = {"prompts/get", name, args};
  _cleanup_json_ json_t *round = NULL;
  int r = fixtures_refused(c, TG_RPC_INVALID_PARAMS);
  if (r == 0) r = read_round(c, params, &subject, &round);
  if (r) return r;
  json_t *responses = json_object_get(round, "answers");
  json_t *result = NULL;
  const char *why = NULL;
  r = tg_conformance_prompt_get(name, args, responses, &result, &why);
  call_channel ch = {.c = c};
  _cleanup_json_ json_t *answers = NULL;
  for (unsigned rounds = 0; r == 0 && asks_inputs(c, NULL) && tg_mcp_is_input_required(result);
       rounds++) {
    json_decref(answers);
    r = next_round(c, &ch, result, rounds, &answers);
    json_decref(result);
    result = NULL;
    if (r) return r;
    r = tg_conformance_prompt_get(name, args, answers, &result, &why);
  }
  if (r == TG_E_NOTFOUND)
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown prompt", named("name", name));
  if (r == TG_E_INVAL) return rpc_fail(c, TG_RPC_INVALID_PARAMS, why, NULL);
  if (r < 0) return r;
  if (tg_mcp_is_input_required(result) && (r = finish_input_required(c, &subject, result)) != 0) {
    json_decref(result);
    return r;
  }
  *ret = result;
  return 0;
}

static int m_complete(cx *c, json_t *params, json_t **ret) {
  json_t *ref = json_object_get(params, "ref");
  json_t *arg = json_object_get(params, "argument");
  const char *type = json_string_value(json_object_get(ref, "type"));
  const char *arg_name = json_string_value(json_object_get(arg, "name"));
  const char *value = json_string_value(json_object_get(arg, "value"));
  json_t *context = json_object_get(params, "context");
  json_t *known = json_object_get(context, "arguments");
  if (!type || !arg_name || !value)
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "ref.type, argument.name and argument.value are required", NULL);
  if (context && (!json_is_object(context) || (known && !string_values(known))))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS,
                    "params.context must be an object, its arguments an object of strings", NULL);
  json_t *values = NULL;
  int r = fixtures_refused(c, TG_RPC_INVALID_PARAMS);
  if (r) return r;
  r = tg_conformance_complete(ref, arg_name, value, &values);
  const char *by = json_object_get(ref, "name") ? "name" : "uri";
  const char *named_as = json_string_value(json_object_get(ref, by));
  if (r == TG_E_NOTFOUND)
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "ref names no prompt or resource template",
                    named(by, named_as ? named_as : ""));
  if (r == TG_E_INVAL)
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "ref takes no argument of that name",
                    named("argument", arg_name));
  if (r < 0) return r;
  *ret = json_pack("{s:{s:o,s:I,s:b}}", "completion", "values", values, "total",
                   (json_int_t)json_array_size(values), "hasMore", 0);
  return *ret ? 0 : TG_E_NOMEM;
}

/* ---- lifecycle ---- */

#define INSTRUCTIONS                                                                    \
  "toolgate: a permission-gated tool catalog. Every call is authorized and audited; a " \
  "refused call answers isError with an error envelope."

static json_t *capabilities(const tg_mcp_server *srv, bool modern) {
  /* Logging is deprecated in 2026-07-28, but a server sending log messages (there, to a
   * request naming its level) must still declare it. Resources, prompts and completions are
   * declared only where there are some: the conformance fixtures are all there are. */
  json_t *caps = srv->fixtures ? json_pack("{s:{},s:{},s:{},s:{},s:{}}", "tools", "resources",
                                           "prompts", "completions", "logging")
                               : json_pack("{s:{},s:{}}", "tools", "logging");
  bool ok = caps != NULL;
  /* Resource subscriptions exist on the legacy wire only: 2026-07-28 removed them. */
  if (ok && !modern && srv->fixtures)
    ok = json_object_set_new(json_object_get(caps, "resources"), "subscribe", json_true()) == 0;
  if (ok && modern && srv->tasks)
    ok = json_object_set_new(caps, "extensions",
                             json_pack("{s:{}}", TG_MCP_TASKS_EXTENSION)) == 0;
  /* Advertised only where the transport delivers the notifications. */
  if (ok && srv->list_changes)
    ok = json_object_set_new(json_object_get(caps, "tools"), "listChanged", json_true()) == 0 &&
         (!srv->fixtures ||
          json_object_set_new(json_object_get(caps, "prompts"), "listChanged", json_true()) == 0);
  if (!ok) {
    json_decref(caps);
    return NULL;
  }
  return caps;
}

static json_t *server_info(const tg_mcp_server *srv) {
  return json_pack("{s:s,s:s}", "name", srv->name, "version", srv->version);
}

json_t *tg_mcp_result_meta(const tg_mcp_server *srv) {
  return json_pack("{s:o}", META_SERVER, server_info(srv));
}

static int m_initialize(cx *c, json_t *params, json_t **ret) {
  tg_mcp_session *s = c->req->session;
  const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
  if (!asked) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.protocolVersion must be a string", NULL);
  /* A session negotiates once: another revision or other capabilities midway would change
   * what the client was promised. */
  if (s->version[0])
    return rpc_fail(c, TG_RPC_INVALID_REQUEST, "This session is initialized already",
                    json_pack("{s:s}", "protocolVersion", s->version));
  /* An unknown or modern version gets our latest legacy one: 2026-07-28 is never
   * negotiated through initialize. */
  const char *version = tg_mcp_legacy_supported(asked) ? asked : TG_MCP_LEGACY_VERSION;
  json_t *caps = json_object_get(params, "capabilities");
  json_t *info = json_object_get(params, "clientInfo");
  if ((caps && !json_is_object(caps)) || (info && !json_is_object(info)))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS,
                    "params.capabilities and params.clientInfo must be objects", NULL);
  /* Kept for the session's life: only what is read of them. */
  json_t *kept = tg_client_capabilities_read(caps);
  if (!kept) return TG_E_NOMEM;
  json_decref(s->client_capabilities);
  s->client_capabilities = kept;
  s->era = TG_MCP_ERA_LEGACY;
  snprintf(s->version, sizeof s->version, "%s", version);
  *ret = json_pack("{s:s,s:o,s:o,s:s}", "protocolVersion", version, "capabilities",
                   capabilities(c->srv, false), "serverInfo", server_info(c->srv), "instructions",
                   INSTRUCTIONS);
  return *ret ? 0 : TG_E_NOMEM;
}

static int m_discover(cx *c, json_t *params, json_t **ret) {
  *ret = json_pack("{s:[s],s:o,s:s}", "supportedVersions", TG_MCP_MODERN_VERSION,
                   "capabilities", capabilities(c->srv, true), "instructions", INSTRUCTIONS);
  return *ret ? 0 : TG_E_NOMEM;
}

static int m_empty(cx *c, json_t *params, json_t **ret) {
  *ret = json_object();
  return *ret ? 0 : TG_E_NOMEM;
}

/* Whether ids is a list of task ids, no longer than the tasks a principal may hold. */
static bool task_ids(json_t *ids) {
  size_t i;
  json_t *id;
  if (!json_is_array(ids) || json_array_size(ids) > TG_MCP_MAX_TASKS) return false;
  json_array_foreach(ids, i, id) if (!json_is_string(id)) return false;
  return true;
}

/* 2026-07-28: the request stays open as the subscription, acknowledged and fed through the
 * watch; it is answered only when the server ends it, and never once cancelled. */
static int m_listen(cx *c, json_t *params, json_t **ret) {
  if (!c->req->watch)
    return rpc_fail(c, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    named("method", c->msg->method));
  json_t *filter = json_object_get(params, "notifications");
  if (!json_is_object(filter))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.notifications must be an object", NULL);
  /* Task notifications are the extension's. */
  json_t *ids = json_object_get(filter, "taskIds");
  if (ids && !takes_tasks(c)) return tasks_required(c);
  if (ids && !task_ids(ids))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS,
                    "params.notifications.taskIds must be an array of at most data.max task ids",
                    json_pack("{s:i}", "max", TG_MCP_MAX_TASKS));
  /* Without the fixtures there is no prompt list to announce changes of. */
  _cleanup_json_ json_t *served = json_copy(filter);
  if (!served) return TG_E_NOMEM;
  if (!c->srv->fixtures) json_object_del(served, "promptsListChanged");
  int r = tg_mcp_watch_subscribe(c->req->watch, c->msg->id, served, ids ? c->srv->tasks : NULL,
                                 c->req->env->db, c->req->principal_id);
  if (r == TG_E_TOO_LARGE)
    return rpc_fail(c, TG_RPC_INVALID_REQUEST, "Too many open subscriptions",
                    json_pack("{s:i}", "max", TG_MCP_MAX_SUBSCRIPTIONS));
  if (r == TG_E_NOTFOUND) {
    /* The server is stopping: the subscription ends as it would have a moment later. */
    *ret = json_pack("{s:{s:O}}", "_meta", TG_MCP_META_SUBSCRIPTION, c->msg->id);
    return *ret ? 0 : TG_E_NOMEM;
  }
  if (r < 0) return r;
  c->subscribed = true;
  return 0;
}

static int m_set_level(cx *c, json_t *params, json_t **ret) {
  int level = level_index(json_string_value(json_object_get(params, "level")));
  if (level < 0) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown log level", NULL);
  c->req->session->log_level = level;
  c->req->session->level_set_ns = tg_monotonic_ns();
  return m_empty(c, params, ret);
}

/* ---- tasks (2026-07-28, io.modelcontextprotocol/tasks) ---- */

/* The task a tasks/get, tasks/update or tasks/cancel names, once the client declared the
 * extension. */
static int task_id(cx *c, json_t *params, const char **id) {
  if (!takes_tasks(c)) return tasks_required(c);
  *id = json_string_value(json_object_get(params, "taskId"));
  if (!*id) return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.taskId must be a string", NULL);
  return 0;
}

static int unknown_task(cx *c, const char *id) {
  return rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown task", named("taskId", id));
}

static int task_elsewhere(cx *c, const char *id) {
  return rpc_fail(c, TG_RPC_INVALID_PARAMS,
                  "Another toolgate server runs this task: send this to the server that started it",
                  named("taskId", id));
}

static int m_tasks_get(cx *c, json_t *params, json_t **ret) {
  const char *id;
  int r = task_id(c, params, &id);
  if (r == 0) r = tg_mcp_tasks_get(c->srv->tasks, c->req->env->db, c->req->principal_id, id, ret);
  return r == TG_E_NOTFOUND ? unknown_task(c, id) : r;
}

static int m_tasks_update(cx *c, json_t *params, json_t **ret) {
  const char *id;
  int r = task_id(c, params, &id);
  if (r) return r;
  json_t *responses;
  if (!json_object_get(params, "inputResponses"))
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.inputResponses is required", NULL);
  if ((r = read_responses(c, params, &responses)) != 0) return r;
  const char *wrong = NULL;
  r = tg_mcp_tasks_update(c->srv->tasks, c->req->env->db, c->req->principal_id, id, responses,
                          &wrong);
  if (r == TG_E_INVAL)
    return rpc_fail(c, TG_RPC_INVALID_PARAMS, "An input response does not answer its request",
                    named("key", wrong));
  if (r == TG_E_NOTFOUND) return unknown_task(c, id);
  if (r == TG_MCP_TASK_ELSEWHERE) return task_elsewhere(c, id);
  return r ? r : m_empty(c, params, ret);
}

static int m_tasks_cancel(cx *c, json_t *params, json_t **ret) {
  const char *id;
  int r = task_id(c, params, &id);
  if (r == 0) r = tg_mcp_tasks_cancel(c->srv->tasks, c->req->env->db, c->req->principal_id, id);
  if (r == TG_E_NOTFOUND) return unknown_task(c, id);
  if (r == TG_MCP_TASK_ELSEWHERE) return task_elsewhere(c, id);
  return r ? r : m_empty(c, params, ret);
}

typedef struct method {
  const char *name;
  method_fn fn;
  unsigned eras;
  bool cacheable; /* 2026-07-28 results carry ttlMs and cacheScope */
  bool fixtures;  /* served only with the conformance fixtures (see fixture_list) */
} method;

static const method methods[] = {
    {"initialize", m_initialize, ERA_LEGACY, false, false},
    {"server/discover", m_discover, ERA_MODERN, true, false},
    {"ping", m_empty, ERA_LEGACY, false, false},
    {"tools/list", m_tools_list, ERA_BOTH, true, false},
    {"tools/call", m_tools_call, ERA_BOTH, false, false},
    {"resources/list", m_resources_list, ERA_BOTH, true, true},
    {"resources/templates/list", m_templates_list, ERA_BOTH, true, true},
    {"resources/read", m_resources_read, ERA_BOTH, true, true},
    {"resources/subscribe", m_resources_subscribe, ERA_LEGACY, false, true},
    {"resources/unsubscribe", m_resources_unsubscribe, ERA_LEGACY, false, true},
    {"prompts/list", m_prompts_list, ERA_BOTH, true, true},
    {"prompts/get", m_prompts_get, ERA_BOTH, false, true},
    {"completion/complete", m_complete, ERA_BOTH, false, true},
    {"logging/setLevel", m_set_level, ERA_LEGACY, false, false},
    {"subscriptions/listen", m_listen, ERA_MODERN, false, false},
    {"tasks/get", m_tasks_get, ERA_MODERN, false, false},
    {"tasks/update", m_tasks_update, ERA_MODERN, false, false},
    {"tasks/cancel", m_tasks_cancel, ERA_MODERN, false, false},
};

static const method *find_method(const tg_mcp_server *srv, const char *name, unsigned era) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(methods[i].name, name) == 0 && (methods[i].eras & era) &&
        (srv->fixtures || !methods[i].fixtures))
      return &methods[i];
  return NULL;
}

/* ---- routing headers (2026-07-28 over HTTP) ---- */

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
    unsigned bits = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
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
static bool header_value(const char *raw, char **ret) {
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
static bool params_match(const tg_registry *reg, const tg_rpc_msg *msg, json_t *headers) {
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
    if (!raw || !has_arg || !header_value(raw, &value) || !param_matches(value, arg)) return false;
  }
  return true;
}

/* ---- the dispatch ladder ---- */

static int reply_error(const tg_rpc_msg *msg, int code, const char *message, json_t *data,
                       int http_status, tg_mcp_reply *reply) {
  reply->http_status = http_status;
  reply->error = true;
  _cleanup_json_ json_t *error = tg_rpc_error(msg->id, code, message, data);
  reply->text = error ? tg_rpc_encode(error) : NULL;
  return reply->text ? 0 : TG_E_NOMEM;
}

static int http_status_of(int code) {
  switch (code) {
  case TG_RPC_METHOD_NOT_FOUND: return 404;
  case TG_RPC_MISSING_CAPABILITY:
  case TG_RPC_HEADER_MISMATCH:
  case TG_RPC_UNSUPPORTED_VERSION:
  case TG_RPC_PARSE_ERROR:
  case TG_RPC_INVALID_REQUEST: return 400;
  default: return 200; /* handler errors travel in-band */
  }
}

/* Adds what 2026-07-28 requires on results: resultType, serverInfo, caching hints. */
static int decorate_modern(const tg_mcp_server *srv, const method *m, json_t *result) {
  if (!json_object_get(result, "resultType") &&
      json_object_set_new(result, "resultType", json_string("complete")) < 0)
    return TG_E_NOMEM;
  json_t *meta = json_object_get(result, "_meta");
  if (!meta) {
    if (json_object_set_new(result, "_meta", meta = json_object()) < 0) return TG_E_NOMEM;
  }
  _cleanup_json_ json_t *stamp = tg_mcp_result_meta(srv);
  if (!stamp || json_object_update(meta, stamp) < 0) return TG_E_NOMEM;
  /* Lists are computed per principal, so nothing may be shared across callers. */
  if (m->cacheable && (json_object_set_new(result, "ttlMs", json_integer(0)) < 0 ||
                       json_object_set_new(result, "cacheScope", json_string("private")) < 0))
    return TG_E_NOMEM;
  return 0;
}

static bool header_differs(const char *header, const char *body) {
  return header && (!body || strcmp(header, body) != 0);
}

const char *tg_mcp_version_refusal(const tg_rpc_msg *msg, const char *header_version, int *code,
                                   json_t **data) {
  *data = NULL;
  if (!tg_mcp_has_claim(msg)) {
    *code = TG_RPC_INVALID_REQUEST;
    bool spoken = !header_version || tg_mcp_legacy_supported(header_version) ||
                  strcmp(header_version, TG_MCP_MODERN_VERSION) == 0;
    return spoken ? NULL : "Unsupported MCP-Protocol-Version";
  }
  const char *claimed = json_string_value(json_object_get(meta_of(msg), META_VERSION));
  *code = TG_RPC_INVALID_PARAMS; /* as a request's envelope */
  if (!claimed) return "Invalid request _meta: its protocol version must be a string";
  *code = TG_RPC_HEADER_MISMATCH;
  if (header_differs(header_version, claimed))
    return "MCP-Protocol-Version does not match _meta";
  *code = TG_RPC_UNSUPPORTED_VERSION;
  if (strcmp(claimed, TG_MCP_MODERN_VERSION) == 0) return NULL;
  *data = json_pack("{s:[s],s:s}", "supported", TG_MCP_MODERN_VERSION, "requested", claimed);
  return "Unsupported protocol version";
}

/* Mcp-Name carries params.name (tools/call, prompts/get), params.uri (resources/read) or
 * params.taskId (tasks/get, tasks/update, tasks/cancel). */
static bool name_matches(const tg_rpc_msg *msg, const char *header) {
  const char *field = strcmp(msg->method, "resources/read") == 0 ? "uri"
                      : strcmp(msg->method, "tools/call") == 0 ||
                              strcmp(msg->method, "prompts/get") == 0
                          ? "name"
                      : strcmp(msg->method, "tasks/get") == 0 ||
                              strcmp(msg->method, "tasks/update") == 0 ||
                              strcmp(msg->method, "tasks/cancel") == 0
                          ? "taskId"
                          : NULL;
  if (!field) return true;
  const char *body = json_string_value(json_object_get(msg->params, field));
  _cleanup_free_ char *value = NULL;
  if (!header) return body == NULL;
  return body && header_value(header, &value) && strcmp(value, body) == 0;
}

/* The 2026-07-28 envelope and header checks, in the order the reference SDK applies them.
 * Returns 0 to serve, or an error reply already filled (returns 1), or TG_E_NOMEM. */
static int check_modern(cx *c, tg_mcp_reply *reply) {
  const tg_rpc_msg *msg = c->msg;
  const tg_mcp_headers *h = c->req->headers;
  json_t *meta = meta_of(msg);
  json_t *version = json_object_get(meta, META_VERSION);
  json_t *caps = json_object_get(meta, META_CAPS);
  json_t *level = json_object_get(meta, META_LOG);
  int r;
  if (!json_is_string(version) || !json_is_object(caps))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "Invalid request _meta",
                    json_pack("{s:[s,s]}", "required", META_VERSION, META_CAPS), 400, reply);
  else if (tg_client_capabilities_malformed(caps))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "Invalid request _meta: a client capability that must be an object is not",
                    json_pack("{s:s}", "invalid", META_CAPS), 400, reply);
  else if (h && header_differs(h->protocol_version, json_string_value(version)))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH, "MCP-Protocol-Version does not match _meta",
                    NULL, 400, reply);
  else if (h && header_differs(h->method, msg->method))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH, "Mcp-Method does not match the method", NULL,
                    400, reply);
  else if (strcmp(json_string_value(version), TG_MCP_MODERN_VERSION) != 0)
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION, "Unsupported protocol version",
                    json_pack("{s:[s],s:O}", "supported", TG_MCP_MODERN_VERSION, "requested",
                              version),
                    400, reply);
  else
    goto headers;
  return r < 0 ? r : 1;
headers:
  /* A valid claim pins a stdio connection, whatever then becomes of the request (an unknown
   * method too), except the discover probe: a client may probe and then fall back to
   * initialize. */
  if (!h && strcmp(msg->method, "server/discover") != 0)
    c->req->session->era = TG_MCP_ERA_MODERN;
  if (h && (!h->protocol_version || !h->method))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH, "MCP-Protocol-Version and Mcp-Method are required",
                    NULL, 400, reply);
  else if (h && !name_matches(msg, h->name))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH,
                    h->name ? "Mcp-Name does not match the request"
                            : "Mcp-Name is required: the request's name, uri or taskId",
                    NULL, 400, reply);
  else if (h && strcmp(msg->method, "tools/call") == 0 &&
           !params_match(c->req->env->registry, msg, h->params))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH,
                    "An Mcp-Param header does not match its argument", NULL, 400, reply);
  else if (!find_method(c->srv, msg->method, ERA_MODERN))
    r = reply_error(msg, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    named("method", msg->method), 404, reply);
  else if (level && level_index(json_string_value(level)) < 0)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "Unknown log level", NULL, 400, reply);
  else {
    c->caps = caps;
    c->log_level = json_string_value(level);
    return 0;
  }
  return r < 0 ? r : 1;
}

static int check_legacy(cx *c, tg_mcp_reply *reply) {
  const tg_rpc_msg *msg = c->msg;
  const tg_mcp_headers *h = c->req->headers;
  tg_mcp_session *s = c->req->session;
  int r;
  bool modern_header =
      h && h->protocol_version && strcmp(h->protocol_version, TG_MCP_MODERN_VERSION) == 0;
  if (modern_header && strcmp(msg->method, "initialize") == 0)
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH,
                    "initialize opens a 2025-11-25 session; MCP-Protocol-Version names another",
                    NULL, 400, reply);
  else if (modern_header)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "A 2026-07-28 request names its protocol version in params._meta",
                    json_pack("{s:[s,s]}", "required", META_VERSION, META_CAPS), 400, reply);
  else if (h && h->protocol_version && !tg_mcp_legacy_supported(h->protocol_version))
    r = reply_error(msg, TG_RPC_INVALID_REQUEST, "Unsupported MCP-Protocol-Version", NULL, 400,
                    reply);
  else if (strcmp(msg->method, "server/discover") == 0)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "server/discover needs params._meta",
                    json_pack("{s:[s,s]}", "required", META_VERSION, META_CAPS), 400, reply);
  else if (!find_method(c->srv, msg->method, ERA_LEGACY))
    r = reply_error(msg, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    named("method", msg->method), 200, reply);
  else {
    c->caps = s->client_capabilities;
    c->log_level = s->log_level >= 0 ? log_levels[s->log_level] : NULL;
    return 0;
  }
  return r < 0 ? r : 1;
}

/* stdio: the first request of an era pins the connection to it, but server/discover (a
 * probe, after which a client may fall back to initialize); one of the other era, the probe
 * included, is refused after, before it is served either way. */
static int check_pinned(cx *c, tg_mcp_reply *reply) {
  const tg_rpc_msg *msg = c->msg;
  const tg_mcp_session *s = c->req->session;
  int r;
  /* The discover probe too: what it would say supported, this connection does not take. */
  if (c->modern && s->era == TG_MCP_ERA_LEGACY)
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION,
                    "This connection speaks the 2025 protocol, chosen by a request without "
                    "params._meta before",
                    json_pack("{s:[s],s:s}", "supported", s->version[0] ? s->version : TG_MCP_LEGACY_VERSION,
                              "requested", TG_MCP_MODERN_VERSION),
                    400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN && strcmp(msg->method, "initialize") == 0 &&
           !json_is_string(json_object_get(msg->params, "protocolVersion")))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "params.protocolVersion must be a string", NULL,
                    400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN && strcmp(msg->method, "initialize") == 0)
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION,
                    "This connection speaks 2026-07-28, which has no initialize: send each "
                    "request with params._meta",
                    json_pack("{s:[s],s:O}", "supported", TG_MCP_MODERN_VERSION, "requested",
                              json_object_get(msg->params, "protocolVersion")),
                    400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "This connection speaks 2026-07-28: a request names its protocol version in "
                    "params._meta",
                    json_pack("{s:[s,s]}", "required", META_VERSION, META_CAPS), 400, reply);
  else
    return 0;
  return r < 0 ? r : 1;
}

json_t *tg_mcp_cancel_target(const tg_rpc_msg *msg) {
  if (msg->kind != TG_RPC_NOTIFICATION || strcmp(msg->method, "notifications/cancelled") != 0)
    return NULL;
  json_t *id = json_object_get(msg->params, "requestId");
  return json_is_string(id) || json_is_integer(id) ? id : NULL;
}

json_t *tg_mcp_withdrawal(const json_t *ask, bool timed_out) {
  return tg_rpc_notification(
      "notifications/cancelled",
      json_pack("{s:O,s:s}", "requestId", json_object_get(ask, "id"), "reason",
                timed_out ? "No answer came in time" : "The call no longer waits for it"));
}

json_t *tg_mcp_unreadable_answer(json_t *id, const json_t *refusal) {
  return tg_rpc_error(id, TG_RPC_INVALID_REQUEST, "The client's answer could not be read",
                      json_pack("{s:O*}", "refusal", json_object_get(refusal, "error")));
}

static void notification(const tg_mcp_request *req, const tg_rpc_msg *msg) {
  json_t *cancelled = tg_mcp_cancel_target(msg);
  /* Of a session that initialized: not of a stdio connection that speaks 2026-07-28 or has
   * not chosen yet (it would turn on the 2025 list changes). */
  if (strcmp(msg->method, "notifications/initialized") == 0 && req->session->version[0]) {
    req->session->initialized = true;
    if (req->watch) tg_mcp_watch_legacy(req->watch);
  } else if (cancelled) {
    /* A request not in flight (unknown, answered) is ignored; a listen request's
     * subscription ends. */
    if (req->inflight) tg_mcp_inflight_cancel(req->inflight, cancelled);
    if (req->watch) tg_mcp_watch_unsubscribe(req->watch, cancelled);
  }
  /* progress and roots/list_changed need no action: this server asks for no roots.
   * Unknown notifications are ignored. */
}

/* The reply to a request method m served with status r and result (borrowed). */
static int reply_of(cx *c, const method *m, int r, json_t *result, tg_mcp_reply *reply) {
  const tg_rpc_msg *msg = c->msg;
  if (c->req->inflight && tg_mcp_inflight_end(c->req->inflight, msg->id)) {
    /* Cancelled: the client expects no answer. A listen request cancelled as it subscribed
     * ends its subscription here (the cancellation found none yet). */
    if (c->subscribed && c->req->watch) tg_mcp_watch_unsubscribe(c->req->watch, msg->id);
    json_decref(c->err_data);
    return 0;
  }
  if (r == TG_E_NOMEM) {
    json_decref(c->err_data);
    return r;
  }
  if (r == 0 && c->subscribed) {
    reply->http_status = 200;
    reply->subscribed = true;
    return 0;
  }
  if (r < 0 && r > -32000) {
    /* An internal TG_E_* status, not a JSON-RPC code. */
    r = rpc_fail(c, TG_RPC_INTERNAL_ERROR, "Internal error", NULL);
  }
  if (r < 0) {
    int status = c->modern ? http_status_of(r) : (r == TG_RPC_MISSING_CAPABILITY ? 400 : 200);
    return reply_error(msg, r, c->err_message, c->err_data, status, reply);
  }
  if (c->modern && decorate_modern(c->srv, m, result) < 0) return TG_E_NOMEM;
  reply->http_status = 200;
  if (c->raw) {
    reply->text = tg_rpc_encode_result_with(msg->id, result, c->raw_key, c->raw, c->raw_len);
  } else {
    _cleanup_json_ json_t *message = tg_rpc_result(msg->id, json_incref(result));
    reply->text = message ? tg_rpc_encode(message) : NULL;
  }
  return reply->text ? 0 : TG_E_NOMEM;
}

/* A request's progress token is a string or a number (MCP's ProgressToken), whatever its
 * method, though only tools/call sends progress. */
static bool progress_token_valid(const json_t *params) {
  json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
  return !token || json_is_string(token) || json_is_number(token);
}

int tg_mcp_handle(const tg_mcp_server *srv, const tg_mcp_request *req, const tg_rpc_msg *msg,
                  tg_mcp_reply *reply) {
  if (msg->kind == TG_RPC_BATCH) return tg_mcp_handle_batch(srv, req, msg, NULL, NULL, reply);
  memset(reply, 0, sizeof *reply);
  reply->http_status = 202;
  if (msg->kind == TG_RPC_RESPONSE) return 0;
  if (msg->kind == TG_RPC_NOTIFICATION) {
    notification(req, msg);
    return 0;
  }
  cx c = {.srv = srv, .req = req, .msg = msg, .modern = tg_mcp_has_claim(msg)};
  /* A stdio connection's era first: a request of the other era is told which this speaks,
   * not that its method is unknown there. */
  int r = req->headers ? 0 : check_pinned(&c, reply);
  if (r == 0) r = c.modern ? check_modern(&c, reply) : check_legacy(&c, reply);
  if (r != 0) return r < 0 ? r : 0;
  const method *m = find_method(srv, msg->method, c.modern ? ERA_MODERN : ERA_LEGACY);
  /* A ping pins nothing either: over stdio it may be answered ahead of its turn, where it
   * could not (see stdio.c). */
  if (!c.modern && req->session->era == TG_MCP_ERA_NONE && strcmp(m->name, "initialize") != 0 &&
      strcmp(m->name, "ping") != 0 && !req->headers)
    req->session->era = TG_MCP_ERA_LEGACY;
  json_t *result = NULL;
  if (req->inflight && tg_mcp_inflight_begin(req->inflight, msg->id) < 0) return TG_E_NOMEM;
  /* Cancelled while it waited for a thread (the transport held its entry): not served. */
  if (req->inflight && tg_mcp_inflight_cancelled(req->inflight, msg->id)) {
    tg_mcp_inflight_end(req->inflight, msg->id);
    return 0;
  }
  /* Not begun before its transport gave up on every answer: said so, as a client may retry. */
  if (req->abandoned && atomic_load(req->abandoned))
    r = rpc_fail(&c, TG_RPC_INTERNAL_ERROR, "The server is stopping", NULL);
  else if (!progress_token_valid(msg->params))
    r = rpc_fail(&c, TG_RPC_INVALID_PARAMS, "_meta.progressToken must be a string or a number",
                 NULL);
  else
    r = m->fn(&c, msg->params, &result);
  r = reply_of(&c, m, r, result, reply);
  json_decref(result);
  free(c.raw);
  return r;
}

/* The id of the next request msg is, itself or in a batch, or NULL past the last: *i (0 at
 * first) walks the batch. A request decodes without allocating, so the walk is the same
 * each time. */
static json_t *next_request_id(const tg_rpc_msg *msg, size_t *i) {
  if (msg->kind == TG_RPC_REQUEST) return (*i)++ == 0 ? msg->id : NULL;
  while (msg->kind == TG_RPC_BATCH && *i < json_array_size(msg->root)) {
    json_t *value = json_array_get(msg->root, (*i)++);
    tg_rpc_msg m;
    json_t *error = NULL;
    bool request = tg_rpc_decode_element(value, &m, &error) == 0 && m.kind == TG_RPC_REQUEST;
    tg_rpc_msg_done(&m);
    json_decref(error);
    if (request) return json_object_get(value, "id");
  }
  return NULL;
}

int tg_mcp_enter_requests(tg_mcp_inflight *t, const tg_rpc_msg *msg) {
  size_t i = 0, entered = 0;
  for (json_t *id; (id = next_request_id(msg, &i)); entered++) {
    if (tg_mcp_inflight_begin(t, id) == 0) continue;
    size_t j = 0;
    for (json_t *undo; entered-- > 0 && (undo = next_request_id(msg, &j));)
      tg_mcp_inflight_end(t, undo);
    return TG_E_NOMEM;
  }
  return 0;
}

void tg_mcp_leave_requests(tg_mcp_inflight *t, const tg_rpc_msg *msg) {
  size_t i = 0;
  for (json_t *id; (id = next_request_id(msg, &i));) tg_mcp_inflight_end(t, id);
}

bool tg_mcp_reuses_id_in_flight(tg_mcp_inflight *t, tg_mcp_watch *w, const tg_rpc_msg *msg) {
  size_t i = 0;
  for (json_t *id; t && (id = next_request_id(msg, &i));) {
    /* A listen leaves t once subscribed, and is in flight until its subscription ends. */
    if (tg_mcp_inflight_holds(t, id) || (w && tg_mcp_watch_holds(w, id))) return true;
    /* The requests of a batch are all in flight from the start. */
    size_t j = 0;
    for (json_t *before; (before = next_request_id(msg, &j)) && j < i;)
      if (json_equal(before, id)) return true;
  }
  return false;
}

bool tg_mcp_names_request(const tg_rpc_msg *msg, json_t *id) {
  size_t i = 0;
  for (json_t *each; (each = next_request_id(msg, &i));)
    if (json_equal(each, id)) return true;
  return false;
}

bool tg_mcp_holds_request(const tg_rpc_msg *msg) {
  size_t i = 0;
  return next_request_id(msg, &i) != NULL;
}

bool tg_mcp_takes_batches(const tg_mcp_session *s) {
  /* JSON-RPC batches came with 2025-03-26, and 2025-06-18 took them out. A 2026-07-28
   * request on the same stdio connection changes nothing to the revision it negotiated. */
  return strcmp(s->version, "2025-03-26") == 0;
}

/* The reply text (encoded, stolen) to request id of a batch, as it goes into the batch's
 * answer, which holds *used bytes of at most max: a reply past the bound is replaced by an
 * error naming its request. NULL when out of memory. */
static char *within_bound(char *text, json_t *id, size_t *used, size_t max) {
  size_t n = strlen(text) + 1; /* and its comma or bracket */
  if (*used + n <= max) {
    *used += n;
    return text;
  }
  free(text);
  _cleanup_json_ json_t *error =
      tg_rpc_error(id, TG_RPC_INTERNAL_ERROR,
                   "The request was served, but its result is too large to send in this batch",
                   json_pack("{s:I}", "maxBytes", (json_int_t)max));
  char *instead = error ? tg_rpc_encode(error) : NULL;
  if (instead) *used += strlen(instead) + 1; /* small: it passes the bound by little */
  return instead;
}

/* Whether a request of batch claims 2026-07-28, which stands alone. */
static bool batch_claims_modern(const tg_rpc_msg *batch) {
  bool claims = false;
  size_t i;
  json_t *value;
  json_array_foreach(batch->root, i, value) {
    tg_rpc_msg m;
    json_t *error = NULL;
    claims = tg_rpc_decode_element(value, &m, &error) == 0 && m.kind == TG_RPC_REQUEST &&
             tg_mcp_has_claim(&m);
    tg_rpc_msg_done(&m);
    json_decref(error);
    if (claims) break;
  }
  return claims;
}

/* The reply to element, a message of a batch that reads as one (decoded, borrowed), in
 * reply->text: NULL for a response (its transport delivered it), a notification or a request
 * cancelled. initialize stands alone: a session that takes batches has had it already (a
 * second one is refused as such). */
static int handle_element(const tg_mcp_server *srv, const tg_mcp_request *req,
                          const tg_rpc_msg *element, tg_mcp_serving_fn *serving, void *arg,
                          tg_mcp_reply *reply) {
  memset(reply, 0, sizeof *reply);
  if (element->kind == TG_RPC_RESPONSE) return 0;
  bool request = element->kind == TG_RPC_REQUEST;
  if (request && serving) serving(arg, element->id);
  int r = tg_mcp_handle(srv, req, element, reply);
  if (request && serving) serving(arg, NULL);
  return r;
}

int tg_mcp_handle_batch(const tg_mcp_server *srv, const tg_mcp_request *req,
                        const tg_rpc_msg *batch, tg_mcp_serving_fn *serving, void *arg,
                        tg_mcp_reply *reply) {
  memset(reply, 0, sizeof *reply);
  /* The headers are the whole POST's: one that a single request would be refused for
   * refuses the batch, before any of it runs; so does a request of it that claims
   * 2026-07-28, lest the others run without it. */
  const char *version = req->headers ? req->headers->protocol_version : NULL;
  const char *why = NULL;
  if (!tg_mcp_takes_batches(req->session))
    why = "Batches are served on 2025-03-26 sessions only";
  else if (version && !tg_mcp_legacy_supported(version))
    why = "Unsupported MCP-Protocol-Version";
  else if (batch_claims_modern(batch))
    why = "A 2026-07-28 request cannot be part of a batch";
  if (why) {
    _cleanup_json_ json_t *refusal = tg_rpc_refuse_batch(batch, TG_RPC_INVALID_REQUEST, why, NULL);
    reply->text = refusal ? tg_rpc_encode(refusal) : NULL;
    reply->error = true;
    reply->http_status = 400;
    return reply->text ? 0 : TG_E_NOMEM;
  }
  /* All in flight from the start, so that a cancellation reaches those that wait their turn. */
  if (req->inflight && tg_mcp_enter_requests(req->inflight, batch) < 0) return TG_E_NOMEM;
  char *answers = NULL;
  size_t size = 0, n = 0, used = 1; /* the closing bracket */
  size_t max = srv->batch_answer_max ? srv->batch_answer_max : TG_MCP_BATCH_ANSWER_MAX;
  FILE *out = open_memstream(&answers, &size);
  if (!out) {
    if (req->inflight) tg_mcp_leave_requests(req->inflight, batch);
    return TG_E_NOMEM;
  }
  int r = 0;
  size_t i;
  json_t *value;
  json_array_foreach(batch->root, i, value) {
    tg_rpc_msg element;
    json_t *error = NULL;
    tg_mcp_reply one = {0};
    r = tg_rpc_decode_element(value, &element, &error);
    if (r == 0) {
      r = handle_element(srv, req, &element, serving, arg, &one);
      if (r == 0 && one.text && !(one.text = within_bound(one.text, element.id, &used, max)))
        r = TG_E_NOMEM;
      tg_rpc_msg_done(&element);
    } else if (error) {
      one.text = tg_rpc_encode(error);
      json_decref(error);
      r = one.text ? 0 : TG_E_NOMEM;
    }
    if (r == 0 && one.text && (fputs(n++ ? "," : "[", out) < 0 || fputs(one.text, out) < 0))
      r = TG_E_NOMEM;
    free(one.text);
    if (r < 0) break;
  }
  if (req->inflight) tg_mcp_leave_requests(req->inflight, batch);
  if (r == 0 && n && fputc(']', out) == EOF) r = TG_E_NOMEM;
  if (fclose(out) != 0 && r == 0) r = TG_E_NOMEM;
  if (r < 0 || n == 0) {
    free(answers);
    reply->http_status = 202;
    return r < 0 ? TG_E_NOMEM : 0;
  }
  reply->text = answers;
  reply->http_status = 200;
  return 0;
}

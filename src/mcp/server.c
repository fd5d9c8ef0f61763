#define _GNU_SOURCE
#include "mcp/server.h"
#include "mcp/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_LOG "io.modelcontextprotocol/logLevel"
#define META_INFO "io.modelcontextprotocol/clientInfo"
#define META_SERVER "io.modelcontextprotocol/serverInfo"

enum { ERA_LEGACY = 1, ERA_MODERN = 2, ERA_BOTH = 3 };

static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                              "2024-11-05"};
static const char *const log_levels[] = {"debug",    "info",  "notice", "warning",
                                         "error",    "critical", "alert", "emergency"};
#define N_LOG_LEVELS (sizeof log_levels / sizeof log_levels[0])

int mcp_rpc_fail(cx *c, int code, const char *message, json_t *data) {
  c->err_message = message;
  json_decref(c->err_data);
  c->err_data = data;
  return code;
}

/* An error's data naming what the request named ({key: value}): a value past
 * ECHO_MAX bytes is cut (on a character's start) and marked, so that a refusal never sends
 * a megabyte name back. */
#define ECHO_MAX 256

json_t *mcp_named(const char *key, const char *value) {
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
   * replace or end for good what exists (MCP: not only additive updates), and so is a write
   * of high risk, which a client had best confirm as one (a proposal changes nothing yet).
   * Idempotence is the spec's word for reads too: a read may record each call (a skill's load
   * does). */
  bool high_risk_write = tool->effect == TG_EFFECT_WRITE && tool->risk == TG_RISK_HIGH;
  bool destructive = !read_only && ((tool->flags & TG_TOOL_DESTRUCTIVE) || high_risk_write);
  bool idempotent = tool->flags & TG_TOOL_IDEMPOTENT;
  bool open_world = tool->flags & TG_TOOL_OPEN_WORLD;
  return json_pack("{s:b,s:b,s:b,s:b}", "readOnlyHint", read_only, "destructiveHint",
                   destructive, "idempotentHint", idempotent, "openWorldHint", open_world);
}

/* A tool declaring mcp_content answers in MCP content blocks itself ({"content": [...]}),
 * passed through as is. Every other tool's result is JSON data, served as structuredContent
 * with its text as one text block. */
bool mcp_content_passthrough(const tg_tool *tool) {
  return tool && (tool->flags & TG_TOOL_MCP_CONTENT);
}

/* ---- preparing a server: its tools' entries, its workspace key ---- */

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

tg_mcp_server tg_mcp_server_copy(const tg_mcp_server *srv) {
  tg_mcp_server copy = *srv;
  copy.entries = NULL;
  copy.n_entries = 0;
  copy.tasks = NULL;
  return copy;
}

void tg_mcp_server_done(tg_mcp_server *srv) {
  tg_mcp_tasks_free(srv->tasks);
  srv->tasks = NULL;
  for (size_t i = 0; i < srv->n_entries; i++) free(srv->entries[i]);
  free(srv->entries);
  srv->entries = NULL;
  srv->n_entries = 0;
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

/* Whether a client's Implementation (initialize's clientInfo, a 2026-07-28 request's _meta
 * clientInfo), when given, is malformed: MCP's Implementation is an object naming the client
 * and its version. Nothing reads it, but what comes in the wrong shape is refused. */
static bool client_info_malformed(const json_t *info) {
  return info && (!json_is_object(info) || !json_is_string(json_object_get(info, "name")) ||
                  !json_is_string(json_object_get(info, "version")));
}

static int m_initialize(cx *c, json_t *params, json_t **ret) {
  tg_mcp_session *s = c->req->session;
  const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
  if (!asked)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.protocolVersion must be a string", NULL);
  /* A session negotiates once: another revision or other capabilities midway would change
   * what the client was promised. */
  if (s->version[0])
    return mcp_rpc_fail(c, TG_RPC_INVALID_REQUEST, "This session is initialized already",
                        json_pack("{s:s}", "protocolVersion", s->version));
  /* An unknown or modern version gets our latest legacy one: 2026-07-28 is never
   * negotiated through initialize. */
  const char *version = tg_mcp_legacy_supported(asked) ? asked : TG_MCP_LEGACY_VERSION;
  json_t *caps = json_object_get(params, "capabilities");
  json_t *info = json_object_get(params, "clientInfo");
  /* Required, as a 2026-07-28 request's clientCapabilities is: a client that declares none
   * says so with {}. (clientInfo may be left out, as 2026-07-28 has servers take it.) */
  if (!json_is_object(caps))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.capabilities must be an object", NULL);
  /* One read given as no object would read as not declared at all. (The rest, never read,
   * is taken as it comes, as clients of older SDKs may send it.) */
  if (tg_client_read_capabilities_malformed(caps))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS,
                        "params.capabilities: roots, sampling and elicitation must be objects",
                        NULL);
  if (client_info_malformed(info))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS,
                        "params.clientInfo must be an object with a string name and version",
                        NULL);
  /* Kept for the session's life: only what is read of them. The session changes only once
   * nothing can fail any more, so that an initialize failing for memory may be sent again. */
  json_t *kept = tg_client_capabilities_read(caps);
  /* Elicitation came with 2025-06-18: a client of an older revision that declares it may
   * not read the request (the revisions compare as their dates). */
  if (kept && strcmp(version, "2025-06-18") < 0) json_object_del(kept, "elicitation");
  *ret = json_pack("{s:s,s:o,s:o,s:s}", "protocolVersion", version, "capabilities",
                   capabilities(c->srv, false), "serverInfo", server_info(c->srv), "instructions",
                   INSTRUCTIONS);
  if (!kept || !*ret) {
    json_decref(kept);
    return TG_E_NOMEM; /* the dispatch drops *ret */
  }
  json_decref(s->client_capabilities);
  s->client_capabilities = kept;
  s->era = TG_MCP_ERA_LEGACY;
  snprintf(s->version, sizeof s->version, "%s", version);
  return 0;
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

/* Why a subscriptions/listen request's filter (params.notifications) is refused: its
 * JSON-RPC code (mcp_rpc_fail), or 0 when it is not. */
static int listen_filter_refusal(cx *c, json_t *params) {
  json_t *filter = json_object_get(params, "notifications");
  if (!json_is_object(filter))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.notifications must be an object", NULL);
  /* Task notifications are the extension's. */
  json_t *ids = json_object_get(filter, "taskIds");
  if (ids && !mcp_takes_tasks(c)) return mcp_tasks_required(c);
  if (ids && !task_ids(ids))
    return mcp_rpc_fail(
        c, TG_RPC_INVALID_PARAMS,
        "params.notifications.taskIds must be an array of at most data.max task ids",
        json_pack("{s:i}", "max", TG_MCP_MAX_TASKS));
  return 0;
}

/* 2026-07-28: the request stays open as the subscription, acknowledged and fed through the
 * watch; it is answered only when the server ends it, and never once cancelled. */
static int m_listen(cx *c, json_t *params, json_t **ret) {
  if (!c->req->watch)
    return mcp_rpc_fail(c, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                        mcp_named("method", c->msg->method));
  int refused = listen_filter_refusal(c, params);
  if (refused) return refused;
  json_t *filter = json_object_get(params, "notifications");
  json_t *ids = json_object_get(filter, "taskIds");
  /* Without the fixtures there is no prompt list to announce changes of. */
  _cleanup_json_ json_t *served = json_copy(filter);
  if (!served) return TG_E_NOMEM;
  if (!c->srv->fixtures) json_object_del(served, "promptsListChanged");
  int r = tg_mcp_watch_subscribe(c->req->watch, c->msg->id, served, ids ? c->srv->tasks : NULL,
                                 c->req->env->db, c->req->principal_id);
  if (r == TG_E_TOO_LARGE)
    return mcp_rpc_fail(c, TG_RPC_INVALID_REQUEST, "Too many open subscriptions",
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
  if (level < 0) return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown log level", NULL);
  c->req->session->log_level = level;
  c->req->session->level_set_ns = tg_monotonic_ns();
  return m_empty(c, params, ret);
}

/* ---- tasks (2026-07-28, io.modelcontextprotocol/tasks) ---- */

/* The task a tasks/get, tasks/update or tasks/cancel names, once the client declared the
 * extension. */
static int task_id(cx *c, json_t *params, const char **id) {
  if (!mcp_takes_tasks(c)) return mcp_tasks_required(c);
  *id = json_string_value(json_object_get(params, "taskId"));
  if (!*id) return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.taskId must be a string", NULL);
  return 0;
}

static int unknown_task(cx *c, const char *id) {
  return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown task", mcp_named("taskId", id));
}

static int task_elsewhere(cx *c, const char *id) {
  return mcp_rpc_fail(
      c, TG_RPC_INVALID_PARAMS,
      "Another toolgate server runs this task: send this to the server that started it",
      mcp_named("taskId", id));
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
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.inputResponses is required", NULL);
  if ((r = mcp_read_responses(c, params, &responses)) != 0) return r;
  const char *wrong = NULL;
  r = tg_mcp_tasks_update(c->srv->tasks, c->req->env->db, c->req->principal_id, id, responses,
                          &wrong);
  if (r == TG_E_INVAL)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "An input response does not answer its request",
                        mcp_named("key", wrong));
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
    {"tools/list", mcp_tools_list, ERA_BOTH, true, false},
    {"tools/call", mcp_tools_call, ERA_BOTH, false, false},
    {"resources/list", mcp_resources_list, ERA_BOTH, true, true},
    {"resources/templates/list", mcp_templates_list, ERA_BOTH, true, true},
    {"resources/read", mcp_resources_read, ERA_BOTH, true, true},
    {"resources/subscribe", mcp_resources_subscribe, ERA_LEGACY, false, true},
    {"resources/unsubscribe", mcp_resources_unsubscribe, ERA_LEGACY, false, true},
    {"prompts/list", mcp_prompts_list, ERA_BOTH, true, true},
    {"prompts/get", mcp_prompts_get, ERA_BOTH, false, true},
    {"completion/complete", mcp_complete, ERA_BOTH, false, true},
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

/* ---- the dispatch ladder ---- */

static int reply_error(const tg_rpc_msg *msg, int code, const char *message, json_t *data,
                       int http_status, tg_mcp_reply *reply) {
  reply->http_status = http_status;
  reply->error = true;
  reply->text = tg_rpc_error_text(msg->id, code, message, data);
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

/* The data of a refusal of a request without the 2026-07-28 envelope it needs: its keys. */
static json_t *required_meta(void) {
  return json_pack("{s:[s,s]}", "required", META_VERSION, META_CAPS);
}

/* The data of a refused version: the one version this side speaks, and the one asked for
 * (a JSON value, as the request gave it). */
static json_t *versions_data(const char *supported, json_t *requested) {
  return json_pack("{s:[s],s:O}", "supported", supported, "requested", requested);
}

static bool header_differs(const char *header, const char *body) {
  return header && (!body || strcmp(header, body) != 0);
}

/* Whether an element of batch decodes as a message of kind that claims a version and that
 * check (NULL: none) answers true for. */
static bool any_claiming(const tg_rpc_msg *batch, tg_rpc_kind kind,
                         bool (*check)(const tg_rpc_msg *m, void *arg), void *arg) {
  bool found = false;
  size_t i;
  json_t *value;
  json_array_foreach(batch->root, i, value) {
    tg_rpc_msg m;
    json_t *error = NULL;
    found = tg_rpc_decode_element(value, &m, &error) == 0 && m.kind == kind &&
            tg_mcp_has_claim(&m) && (!check || check(&m, arg));
    tg_rpc_msg_done(&m);
    json_decref(error);
    if (found) break;
  }
  return found;
}

/* A version refusal's parts, for a check of any_claiming. */
typedef struct version_refusal {
  const char *header_version, *message;
  int *code;
  json_t **data;
} version_refusal;

static bool refused_alone(const tg_rpc_msg *m, void *arg) {
  version_refusal *v = arg;
  v->message = tg_mcp_version_refusal(m, v->header_version, v->code, v->data);
  return v->message != NULL;
}

const char *tg_mcp_version_refusal(const tg_rpc_msg *msg, const char *header_version, int *code,
                                   json_t **data) {
  *data = NULL;
  if (!tg_mcp_has_claim(msg)) {
    *code = TG_RPC_INVALID_REQUEST;
    bool spoken = !header_version || tg_mcp_legacy_supported(header_version) ||
                  strcmp(header_version, TG_MCP_MODERN_VERSION) == 0;
    if (!spoken) return "Unsupported MCP-Protocol-Version";
    /* A batch's notifications are checked as each would be alone (its requests claiming
     * 2026-07-28 refuse it as they stand alone). */
    version_refusal v = {header_version, NULL, code, data};
    return msg->kind == TG_RPC_BATCH && any_claiming(msg, TG_RPC_NOTIFICATION, refused_alone, &v)
               ? v.message
               : NULL;
  }
  json_t *version = json_object_get(meta_of(msg), META_VERSION);
  const char *claimed = json_string_value(version);
  *code = TG_RPC_INVALID_PARAMS; /* as a request's envelope */
  if (!claimed) return "Invalid request _meta: its protocol version must be a string";
  *code = TG_RPC_HEADER_MISMATCH;
  if (header_differs(header_version, claimed))
    return "MCP-Protocol-Version does not match _meta";
  *code = TG_RPC_UNSUPPORTED_VERSION;
  if (strcmp(claimed, TG_MCP_MODERN_VERSION) == 0) return NULL;
  *data = versions_data(TG_MCP_MODERN_VERSION, version);
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
  return body && mcp_header_value(header, &value) && strcmp(value, body) == 0;
}

/* Why a request's _meta is refused, or NULL: when it has one, it is an object (MCP's
 * RequestParams), whose progress token is a string or a number (ProgressToken), whatever the
 * method, though only tools/call sends progress. A 2026-07-28 request's is refused with its
 * envelope (a 400), a 2025 one's as its method would fail (in a 200). */
static const char *meta_refusal(const json_t *params) {
  json_t *meta = json_object_get(params, "_meta");
  json_t *token = json_object_get(meta, "progressToken");
  if (meta && !json_is_object(meta)) return "params._meta must be an object";
  if (token && !json_is_string(token) && !json_is_number(token))
    return "_meta.progressToken must be a string or a number";
  /* An integer past 64 bits is read as a double: its progress would name another token. */
  if (json_is_real(token) && fabs(json_real_value(token)) >= 0x1p63)
    return "_meta.progressToken is a number past 64-bit integers, which could not be named "
           "back as sent";
  return NULL;
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
  json_t *info = json_object_get(meta, META_INFO);
  const char *refused;
  int r;
  if (!json_is_string(version) || !json_is_object(caps))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "Invalid request _meta", required_meta(), 400,
                    reply);
  else if (tg_client_capabilities_malformed(caps))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "Invalid request _meta: a client capability that must be an object is not",
                    json_pack("{s:s}", "invalid", META_CAPS), 400, reply);
  else if (client_info_malformed(info))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "Invalid request _meta: clientInfo must be an object with a string name "
                    "and version",
                    json_pack("{s:s}", "invalid", META_INFO), 400, reply);
  /* The envelope's, as its other members: refused before it is served, with a 400. */
  else if ((refused = meta_refusal(msg->params)))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, refused, NULL, 400, reply);
  else if (h && header_differs(h->protocol_version, json_string_value(version)))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH, "MCP-Protocol-Version does not match _meta",
                    NULL, 400, reply);
  else if (h && header_differs(h->method, msg->method))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH, "Mcp-Method does not match the method", NULL,
                    400, reply);
  else if (strcmp(json_string_value(version), TG_MCP_MODERN_VERSION) != 0)
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION, "Unsupported protocol version",
                    versions_data(TG_MCP_MODERN_VERSION, version), 400, reply);
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
           !mcp_params_match(c->req->env->registry, msg, h->params))
    r = reply_error(msg, TG_RPC_HEADER_MISMATCH,
                    "An Mcp-Param header does not match its argument", NULL, 400, reply);
  else if (!find_method(c->srv, msg->method, ERA_MODERN))
    r = reply_error(msg, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    mcp_named("method", msg->method), 404, reply);
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
                    required_meta(), 400, reply);
  else if (strcmp(msg->method, "server/discover") == 0)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "server/discover needs params._meta",
                    required_meta(), 400, reply);
  else if (!find_method(c->srv, msg->method, ERA_LEGACY))
    r = reply_error(msg, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    mcp_named("method", msg->method), 200, reply);
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
  json_t *claimed = json_object_get(meta_of(msg), META_VERSION);
  const char *legacy = s->version[0] ? s->version : TG_MCP_LEGACY_VERSION;
  /* A claim of the very version the connection speaks is no version it lacks (which -32022
   * would list as supported): the request is one of that version, whose requests make no
   * claim, for a method it may not even have. */
  bool own_claim = c->modern && s->era == TG_MCP_ERA_LEGACY && json_is_string(claimed) &&
                   strcmp(json_string_value(claimed), legacy) == 0;
  int r;
  if (own_claim && find_method(c->srv, msg->method, ERA_LEGACY))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "This connection speaks the 2025 protocol, whose requests name no protocol "
                    "version in params._meta: send it without",
                    NULL, 400, reply);
  else if (own_claim)
    r = reply_error(msg, TG_RPC_METHOD_NOT_FOUND, "Method not found",
                    mcp_named("method", msg->method), 200, reply);
  /* The discover probe too: what it would say supported, this connection does not take. A
   * claim whose version is no string is malformed, which check_modern says. */
  else if (c->modern && s->era == TG_MCP_ERA_LEGACY && json_is_string(claimed))
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION,
                    "This connection speaks the 2025 protocol, chosen by a request without "
                    "params._meta before",
                    versions_data(legacy, claimed), 400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN && strcmp(msg->method, "initialize") == 0 &&
           !json_is_string(json_object_get(msg->params, "protocolVersion")))
    r = reply_error(msg, TG_RPC_INVALID_PARAMS, "params.protocolVersion must be a string", NULL,
                    400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN && strcmp(msg->method, "initialize") == 0)
    r = reply_error(msg, TG_RPC_UNSUPPORTED_VERSION,
                    "This connection speaks 2026-07-28, which has no initialize: send each "
                    "request with params._meta",
                    versions_data(TG_MCP_MODERN_VERSION,
                                  json_object_get(msg->params, "protocolVersion")),
                    400, reply);
  else if (!c->modern && s->era == TG_MCP_ERA_MODERN)
    r = reply_error(msg, TG_RPC_INVALID_PARAMS,
                    "This connection speaks 2026-07-28: a request names its protocol version in "
                    "params._meta",
                    required_meta(), 400, reply);
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

/* The task that result (borrowed; of a request cancelled) created, if any, stops: its client,
 * told nothing, could never read or cancel it. */
static void stop_untold_task(cx *c, json_t *result) {
  const char *type = tg_json_str(result, "resultType");
  const char *id = tg_json_str(result, "taskId");
  if (c->srv->tasks && type && strcmp(type, "task") == 0 && id)
    tg_mcp_tasks_cancel(c->srv->tasks, c->req->env->db, c->req->principal_id, id);
}

/* The reply to a request method m served with status r and result (borrowed). */
static int reply_of(cx *c, const method *m, int r, json_t *result, tg_mcp_reply *reply) {
  const tg_rpc_msg *msg = c->msg;
  /* A client without a session cancels by going away, also when it only half-closes: a look
   * at its connection. */
  if ((c->req->inflight && tg_mcp_inflight_end(c->req->inflight, msg->id)) ||
      (c->req->gone && c->req->gone(c->req->gone_arg))) {
    /* Cancelled: the client expects no answer. A listen request cancelled as it subscribed
     * ends its subscription here (the cancellation found none yet). */
    if (c->subscribed && c->req->watch) tg_mcp_watch_unsubscribe(c->req->watch, msg->id);
    if (r == 0) stop_untold_task(c, result);
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
    r = mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR, "Internal error", NULL);
  }
  if (r < 0) {
    /* 2025 revisions answer a request's JSON-RPC error in a 200, whatever its code. */
    int status = c->modern ? http_status_of(r) : 200;
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

static cx request_cx(const tg_mcp_server *srv, const tg_mcp_request *req, const tg_rpc_msg *msg) {
  return (cx){.srv = srv, .req = req, .msg = msg, .modern = tg_mcp_has_claim(msg),
              .run_id = req->run_id};
}

/* What a request is refused for before it is served: its connection's era (stdio), then its
 * own era's envelope, headers and method. 0 to serve, 1 with reply filled, or TG_E_NOMEM. */
static int check_request(cx *c, tg_mcp_reply *reply) {
  /* A stdio connection's era first: a request of the other era is told which this speaks,
   * not that its method is unknown there. */
  int r = c->req->headers ? 0 : check_pinned(c, reply);
  if (r == 0) r = c->modern ? check_modern(c, reply) : check_legacy(c, reply);
  return r;
}

int tg_mcp_refusal(const tg_mcp_server *srv, const tg_mcp_request *req, const tg_rpc_msg *msg,
                   tg_mcp_reply *reply) {
  memset(reply, 0, sizeof *reply);
  cx c = request_cx(srv, req, msg);
  int r = check_request(&c, reply);
  if (r != 0 || !c.modern || strcmp(msg->method, "subscriptions/listen") != 0) return r;
  if (!(r = listen_filter_refusal(&c, msg->params))) return 0;
  r = reply_error(msg, r, c.err_message, c.err_data, http_status_of(r), reply);
  return r < 0 ? r : 1;
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
  cx c = request_cx(srv, req, msg);
  int r = check_request(&c, reply);
  /* Refused before it is served: pinning its connection's era all the same, but unanswered
   * when it was cancelled while it waited for a thread (the transport held its entry), as the
   * client expects no answer. */
  if (r == 1 && req->inflight && tg_mcp_inflight_cancelled(req->inflight, msg->id)) {
    free(reply->text);
    memset(reply, 0, sizeof *reply);
    reply->http_status = 202;
  }
  if (r != 0) return r < 0 ? r : 0;
  const method *m = find_method(srv, msg->method, c.modern ? ERA_MODERN : ERA_LEGACY);
  const char *refused = c.modern ? NULL : meta_refusal(msg->params); /* else check_modern's */
  /* A ping pins nothing either: over stdio it may be answered ahead of its turn, where it
   * could not (see stdio.c); nor does a request refused for its _meta, as a 2026-07-28 one
   * refused for its envelope does not. */
  if (!c.modern && !refused && req->session->era == TG_MCP_ERA_NONE &&
      strcmp(m->name, "initialize") != 0 && strcmp(m->name, "ping") != 0 && !req->headers)
    req->session->era = TG_MCP_ERA_LEGACY;
  json_t *result = NULL;
  if (req->inflight && tg_mcp_inflight_begin(req->inflight, msg->id) < 0) return TG_E_NOMEM;
  /* Cancelled while it waited for a thread: not served. */
  if (req->inflight && tg_mcp_inflight_cancelled(req->inflight, msg->id)) {
    tg_mcp_inflight_end(req->inflight, msg->id);
    return 0;
  }
  /* Not begun before its transport gave up on every answer: said so, as a client may retry. */
  if (req->abandoned && atomic_load(req->abandoned))
    r = mcp_rpc_fail(&c, TG_RPC_INTERNAL_ERROR, "The server is stopping", NULL);
  else if (refused)
    r = mcp_rpc_fail(&c, TG_RPC_INVALID_PARAMS, refused, NULL);
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

json_t *tg_mcp_unbatched_refusal(const tg_rpc_msg *batch) {
  return tg_rpc_refuse_batch(batch, TG_RPC_INVALID_REQUEST,
                             "Batches are served on 2025-03-26 sessions only", NULL);
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
  char *instead = tg_rpc_error_text(
      id, TG_RPC_INTERNAL_ERROR,
      "The request was served, but its result is too large to send in this batch",
      json_pack("{s:I}", "maxBytes", (json_int_t)max));
  if (instead) *used += strlen(instead) + 1; /* small: it passes the bound by little */
  return instead;
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
  /* A request of it that claims 2026-07-28 refuses the batch, before any of it runs, lest
   * the others run without it. */
  bool unbatched = !tg_mcp_takes_batches(req->session);
  if (unbatched || any_claiming(batch, TG_RPC_REQUEST, NULL, NULL)) {
    _cleanup_json_ json_t *refusal =
        unbatched ? tg_mcp_unbatched_refusal(batch)
                  : tg_rpc_refuse_batch(batch, TG_RPC_INVALID_REQUEST,
                                        "A 2026-07-28 request cannot be part of a batch", NULL);
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

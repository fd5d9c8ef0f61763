/* Provider "admin": the tool list, and the operator's actions on agents, grants, tokens,
 * tool policy and runs. Operators reach these through tg_call like agents reach theirs. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/approval.h"
#include "core/call.h"
#include "core/run.h"
#include "tools/agent_rows.h"
#include "tools/lookup.h"
#include "tools/providers.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

#define RUN_LOGS_MAX 1000

/* A grant names a permission some tool declares, or a seed-000 flag standing for one; a
 * typo must not be stored as a grant that silently does nothing. */
static const char *known_permission(const tg_registry *reg, const char *name) {
  for (size_t i = 0; i < tg_agent_flags_count; i++)
    if (strcmp(tg_agent_flags[i].flag, name) == 0 || strcmp(tg_agent_flags[i].permission, name) == 0)
      return tg_agent_flags[i].permission;
  for (size_t i = 0; i < tg_registry_count(reg); i++) {
    const tg_tool *t = tg_registry_at(reg, i);
    for (size_t k = 0; k < t->n_permissions; k++)
      if (strcmp(t->permissions[k], name) == 0) return t->permissions[k];
  }
  return NULL;
}

static int unknown_permission(tg_call_ctx *cx, const char *name) {
  return tg_fail(cx, TG_ERR_VALIDATION_FAILED, json_pack("{s:s}", "permission", name),
                 "Unknown permission %.*s: grant a permission a tool declares or a seed-000 flag.",
                 TG_UTF8_CUT(name, 64));
}

static int tool_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *tools = NULL;
  int r = tg_tools_usable(cx->env, cx->principal, cx->surface, &tools);
  if (r < 0) return r;
  *ret = json_pack("{s:o}", "tools", tools);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int agent_tools(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *agent = NULL;
  int r = tg_lookup_agent(cx, tg_json_str(args, "agentSlug"), &agent);
  if (r < 0) return r;
  tg_principal *p = NULL;
  r = tg_principal_load(cx->db, tg_json_str(agent, "principal_id"), &p);
  if (r < 0) return r;
  const char *surface = tg_json_str(args, "surface");
  json_t *tools = NULL;
  r = tg_tools_usable(cx->env, p, surface ? tg_surface_parse(surface) : TG_SURFACE_AGENT, &tools);
  tg_principal_free(p);
  if (r < 0) return r;
  *ret = json_pack("{s:o}", "tools", tools);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* "tenant" or "mission:SLUG" / "idea:SLUG" / "work:SLUG" → type and id. */
static int resolve_scope(tg_call_ctx *cx, const char *scope, const char **type,
                         json_t **scope_row) {
  *type = "tenant";
  *scope_row = NULL;
  if (!scope || strcmp(scope, "tenant") == 0) return TG_OK;
  const char *colon = strchr(scope, ':');
  static const struct { const char *type, *sql; } tables[] = {
      {"mission", "SELECT id FROM missions WHERE tenant_id = $1 AND slug = $2"},
      {"idea", "SELECT id FROM ideas WHERE tenant_id = $1 AND slug = $2"},
      {"work", "SELECT id FROM works WHERE tenant_id = $1 AND slug = $2"},
  };
  for (size_t i = 0; i < 3; i++) {
    if (strncmp(scope, tables[i].type, (size_t)(colon - scope)) != 0) continue;
    *type = tables[i].type;
    int r = tg_db_query_row(cx->db, tables[i].sql,
                            json_pack("[ss]", cx->principal->tenant_id, colon + 1), scope_row);
    if (r < 0) return r;
    if (!*scope_row)
      return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "scope", scope),
                     "No %s %s in this workspace.", tables[i].type, colon + 1);
    return TG_OK;
  }
  return TG_E_INVAL; /* the input schema admits no other form */
}

static int insert_grant(tg_call_ctx *cx, const char *principal_id, const char *permission,
                        int64_t *changes) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  return tg_db_exec(cx->db,
                    "INSERT INTO grants (principal_id, permission, created_at) VALUES ($1, $2, $3)"
                    " ON CONFLICT (principal_id, permission) DO NOTHING",
                    json_pack("[sss]", principal_id, permission, now), changes);
}

static int agent_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "slug");
  const char *name = tg_json_str(args, "name") ? tg_json_str(args, "name") : slug;
  const char *status = tg_json_str(args, "status") ? tg_json_str(args, "status") : "active";
  json_t *grants = json_object_get(args, "grants");
  size_t i;
  json_t *g;
  json_array_foreach(grants, i, g) {
    if (!known_permission(cx->env->registry, json_string_value(g)))
      return unknown_permission(cx, json_string_value(g));
  }
  const char *scope_type;
  _cleanup_json_ json_t *scope_row = NULL;
  int r = resolve_scope(cx, tg_json_str(args, "scope"), &scope_type, &scope_row);
  if (r < 0) return r;
  char agent_id[TG_UUID_LEN + 1], principal_id[TG_UUID_LEN + 1];
  tg_new_agent agent = {.slug = slug, .name = name, .status = status, .scope_type = scope_type,
                        .scope_id = tg_json_str(scope_row, "id")};
  r = tg_agent_insert(cx, &agent, agent_id, principal_id);
  json_array_foreach(grants, i, g) {
    if (r == TG_OK)
      r = insert_grant(cx, principal_id, known_permission(cx->env->registry, json_string_value(g)),
                       NULL);
  }
  if (r < 0) return r;
  char summary[160];
  snprintf(summary, sizeof summary, "Agent %s created", slug);
  r = tg_activity(cx, "AGENT_CREATED", NULL, summary,
                  json_pack("{s:s,s:s,s:o}", "agentId", agent_id, "status", status, "grants",
                            grants ? json_incref(grants) : json_array()));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:s}", "agentId", agent_id, "slug", slug, "status", status);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int agent_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 100;
  _cleanup_json_ json_t *rows = NULL, *grant_rows = NULL;
  int r = tg_db_query(
      cx->db,
      "SELECT a.id, a.principal_id, a.slug, a.name, a.status, a.scope_type,"
      " COALESCE(m.slug, i.slug, w.slug) AS scope_slug FROM agents a"
      " LEFT JOIN missions m ON a.scope_type = 'mission' AND m.id = a.scope_id"
      " LEFT JOIN ideas i ON a.scope_type = 'idea' AND i.id = a.scope_id"
      " LEFT JOIN works w ON a.scope_type = 'work' AND w.id = a.scope_id"
      " WHERE a.tenant_id = $1 ORDER BY a.slug LIMIT $2",
      json_pack("[sI]", cx->principal->tenant_id, limit + 1), &rows);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT g.principal_id, g.permission FROM grants g"
                    " WHERE g.principal_id IN (SELECT principal_id FROM agents WHERE tenant_id = $1"
                    " ORDER BY slug LIMIT $2) ORDER BY g.permission",
                    json_pack("[sI]", cx->principal->tenant_id, limit), &grant_rows);
  if (r < 0) return r;
  bool truncated = tg_json_cut(rows, limit);
  _cleanup_json_ json_t *agents = json_array();
  if (!agents) return TG_E_NOMEM;
  size_t i, k;
  json_t *row, *g;
  json_array_foreach(rows, i, row) {
    const char *pid = json_string_value(json_object_get(row, "principal_id"));
    json_t *grants = json_array(), *flags = json_object();
    json_array_foreach(grant_rows, k, g) {
      if (strcmp(json_string_value(json_object_get(g, "principal_id")), pid) == 0)
        json_array_append(grants, json_object_get(g, "permission"));
    }
    for (k = 0; k < tg_agent_flags_count; k++) {
      bool held = false;
      size_t n;
      json_array_foreach(grants, n, g) {
        if (strcmp(json_string_value(g), tg_agent_flags[k].permission) == 0) held = true;
      }
      json_object_set_new(flags, tg_agent_flags[k].flag, json_boolean(held));
    }
    const char *type = json_string_value(json_object_get(row, "scope_type"));
    const char *scope_slug = json_string_value(json_object_get(row, "scope_slug"));
    char scope[128];
    snprintf(scope, sizeof scope, "%s%s%s", type, scope_slug ? ":" : "", scope_slug ? scope_slug : "");
    json_t *entry = json_pack("{s:O,s:O,s:O,s:s,s:O,s:o,s:o}", "id", json_object_get(row, "id"),
                              "slug", json_object_get(row, "slug"), "name",
                              json_object_get(row, "name"), "scope", scope, "status",
                              json_object_get(row, "status"), "grants", grants, "permissions",
                              flags);
    if (json_array_append_new(agents, entry) < 0) return TG_E_NOMEM;
  }
  *ret = json_pack("{s:O,s:b}", "agents", agents, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int grant_change(tg_call_ctx *cx, json_t *args, json_t **ret, bool add) {
  const char *slug = tg_json_str(args, "agentSlug");
  const char *permission = known_permission(cx->env->registry, tg_json_str(args, "permission"));
  if (!permission) return unknown_permission(cx, tg_json_str(args, "permission"));
  _cleanup_json_ json_t *agent = NULL;
  int r = tg_lookup_agent(cx, slug, &agent);
  if (r < 0) return r;
  const char *principal_id = json_string_value(json_object_get(agent, "principal_id"));
  int64_t changes = 0;
  r = add ? insert_grant(cx, principal_id, permission, &changes)
          : tg_db_exec(cx->db, "DELETE FROM grants WHERE principal_id = $1 AND permission = $2",
                       json_pack("[ss]", principal_id, permission), &changes);
  if (r < 0) return r;
  if (changes) {
    char summary[160];
    snprintf(summary, sizeof summary, "%s %s %s %s", add ? "Granted" : "Revoked", permission,
             add ? "to" : "from", slug);
    r = tg_activity(cx, add ? "GRANT_ADDED" : "GRANT_REVOKED", NULL, summary,
                    json_pack("{s:O,s:s}", "agentId", json_object_get(agent, "id"), "permission",
                              permission));
    if (r < 0) return r;
  }
  *ret = json_pack("{s:s,s:s,s:b}", "agentSlug", slug, "permission", permission, "changed",
                   changes > 0);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int grant_add(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return grant_change(cx, args, ret, true);
}

static int grant_revoke(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return grant_change(cx, args, ret, false);
}

/* The principal args name by "username" or "agentSlug" in the caller's tenant, as a new row
 * {principal_id}, or a not_found failure (TG_E_TOOL); NULL (TG_OK) when they name neither. */
static int principal_named(tg_call_ctx *cx, json_t *args, json_t **ret) {
  *ret = NULL;
  const char *username = tg_json_str(args, "username"), *slug = tg_json_str(args, "agentSlug");
  if (slug) return tg_lookup_agent(cx, slug, ret);
  if (!username) return TG_OK;
  int r = tg_db_query_row(cx->db,
                          "SELECT principal_id FROM users WHERE tenant_id = $1 AND username = $2",
                          json_pack("[ss]", cx->principal->tenant_id, username), ret);
  if (r < 0 || *ret) return r;
  return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "username", username),
                 "No user %s in this workspace.", username);
}

static int token_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *holder = NULL;
  int r = principal_named(cx, args, &holder);
  if (r < 0) return r;
  const char *principal_id = json_string_value(json_object_get(holder, "principal_id"));
  char token[TG_TOKEN_LEN + 1], hash[65], id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_token_new(token) < 0 || tg_uuid7(id) < 0 || tg_sha256_hex(token, strlen(token), hash) < 0)
    return TG_E_IO;
  tg_now_iso(now);
  char prefix[12];
  snprintf(prefix, sizeof prefix, "%.11s", token);
  r = tg_db_exec(cx->db,
                 "INSERT INTO api_tokens (id, principal_id, token_hash, prefix, created_at)"
                 " VALUES ($1, $2, $3, $4, $5)",
                 json_pack("[sssss]", id, principal_id, hash, prefix, now), NULL);
  if (r < 0) return r;
  r = tg_activity(cx, "TOKEN_CREATED", NULL, "API token created",
                  json_pack("{s:s,s:s,s:s}", "tokenId", id, "principalId", principal_id, "prefix",
                            prefix));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:s}", "tokenId", id, "token", token, "principalId", principal_id);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Tokens newest first, each with its holder as user:NAME or agent:SLUG. */
static int token_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 100;
  _cleanup_json_ json_t *holder = NULL, *rows = NULL;
  int r = principal_named(cx, args, &holder);
  if (r < 0) return r;
  const char *only = holder ? json_string_value(json_object_get(holder, "principal_id")) : NULL;
  r = tg_db_query(
      cx->db,
      "SELECT t.id AS \"tokenId\", t.prefix, t.principal_id AS \"principalId\","
      " CASE WHEN u.username IS NOT NULL THEN 'user:' || u.username ELSE 'agent:' || a.slug END"
      " AS holder, t.created_at AS \"createdAt\", t.last_used_at AS \"lastUsedAt\","
      " t.revoked_at AS \"revokedAt\""
      " FROM api_tokens t JOIN principals p ON p.id = t.principal_id"
      " LEFT JOIN users u ON u.principal_id = t.principal_id"
      " LEFT JOIN agents a ON a.principal_id = t.principal_id"
      " WHERE p.tenant_id = $1 AND ($2 IS NULL OR t.principal_id = $2)"
      " AND ($3 OR t.revoked_at IS NULL) ORDER BY t.created_at DESC, t.id DESC LIMIT $4",
      json_pack("[ss?bI]", cx->principal->tenant_id, only,
                json_is_true(json_object_get(args, "includeRevoked")), limit + 1),
      &rows);
  if (r < 0) return r;
  bool truncated = tg_json_cut(rows, limit);
  *ret = json_pack("{s:O,s:b}", "tokens", rows, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int token_revoke(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *id = tg_json_str(args, "tokenId");
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT t.principal_id, t.prefix, t.revoked_at FROM api_tokens t"
                          " JOIN principals p ON p.id = t.principal_id"
                          " WHERE t.id = $1 AND p.tenant_id = $2",
                          json_pack("[ss]", id, cx->principal->tenant_id), &row);
  if (r < 0) return r;
  if (!row)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "tokenId", id),
                   "No token %.*s in this workspace.", TG_UTF8_CUT(id, 64));
  const char *revoked_at = json_string_value(json_object_get(row, "revoked_at"));
  if (revoked_at) {
    *ret = json_pack("{s:s,s:s,s:b}", "tokenId", id, "revokedAt", revoked_at, "changed", false);
    return *ret ? TG_OK : TG_E_NOMEM;
  }
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  r = tg_db_exec(cx->db, "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2",
                 json_pack("[ss]", now, id), NULL);
  if (r == TG_OK)
    r = tg_activity(cx, "TOKEN_REVOKED", NULL, "API token revoked",
                    json_pack("{s:s,s:O,s:O}", "tokenId", id, "principalId",
                              json_object_get(row, "principal_id"), "prefix",
                              json_object_get(row, "prefix")));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:b}", "tokenId", id, "revokedAt", now, "changed", true);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int policy_set(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_tool *tool = tg_registry_find(cx->env->registry, tg_json_str(args, "tool"));
  if (!tool)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "tool", tg_json_str(args, "tool")),
                   "No tool %.*s.", TG_UTF8_CUT(tg_json_str(args, "tool"), 128));
  const char *mode = tg_json_str(args, "mode");
  /* This tool disabled could never be set back: no operator could change any policy again. */
  if (tool == cx->tool && strcmp(mode, "disabled") == 0)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s,s:s}", "reason", "self_lockout", "tool", tool->name, "mode",
                             mode),
                   "%s cannot be set to %s: no policy could be changed after.", tool->name, mode);
  /* The hold is on agents' calls and on people's over MCP (tg_approval_needed): on a tool
   * only people call, and not over MCP, it would hold nothing, and say it did. */
  if ((tool->flags & TG_TOOL_PEOPLE_ONLY) && !(tool->surfaces & TG_SURFACE_MCP) &&
      strcmp(mode, "approval") == 0)
    return tg_fail(
        cx, TG_ERR_VALIDATION_FAILED,
        json_pack("{s:s,s:s,s:s}", "reason", "people_only", "tool", tool->name, "mode", mode),
        "%s cannot be held for approval: only people call it, and not over MCP, where alone a "
        "person's call is held.",
        tool->name);
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int r = strcmp(mode, "default") == 0
              ? tg_db_exec(cx->db, "DELETE FROM tool_policies WHERE tenant_id = $1 AND tool_name = $2",
                           json_pack("[ss]", cx->principal->tenant_id, tool->name), NULL)
              : tg_db_exec(cx->db,
                           "INSERT INTO tool_policies (tenant_id, tool_name, mode, updated_at)"
                           " VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, tool_name)"
                           " DO UPDATE SET mode = excluded.mode, updated_at = excluded.updated_at",
                           json_pack("[ssss]", cx->principal->tenant_id, tool->name, mode, now),
                           NULL);
  /* Requests waiting for a decision, and decisions letting a call through, belong to the hold
   * they were asked under: a tool no longer held lets them go, so that a hold set again later
   * is not passed on an old approval. */
  int64_t withdrawn = 0;
  if (r == TG_OK && strcmp(mode, "approval") != 0)
    r = tg_db_exec(cx->db,
                   "UPDATE approval_requests SET status = 'expired' WHERE tenant_id = $1"
                   " AND tool_name = $2 AND status IN ('pending', 'approved')",
                   json_pack("[ss]", cx->principal->tenant_id, tool->name), &withdrawn);
  if (r < 0) return r;
  char summary[200];
  snprintf(summary, sizeof summary, "Tool policy of %s set to %s", tool->name, mode);
  json_t *details = json_pack("{s:s,s:s}", "tool", tool->name, "mode", mode);
  if (details && withdrawn)
    json_object_set_new(details, "approvalsWithdrawn", json_integer((json_int_t)withdrawn));
  r = tg_activity(cx, "TOOL_POLICY_CHANGED", NULL, summary, details);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "tool", tool->name, "mode", mode);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int policy_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(cx->db, "SELECT tool_name, mode FROM tool_policies WHERE tenant_id = $1",
                      json_pack("[s]", cx->principal->tenant_id), &rows);
  if (r < 0) return r;
  _cleanup_json_ json_t *tools = json_array();
  if (!tools) return TG_E_NOMEM;
  for (size_t i = 0; i < tg_registry_count(cx->env->registry); i++) {
    const tg_tool *t = tg_registry_at(cx->env->registry, i);
    const char *mode = t->risk == TG_RISK_HIGH ? "disabled" : "enabled", *source = "default";
    size_t k;
    json_t *row;
    json_array_foreach(rows, k, row) {
      if (strcmp(json_string_value(json_object_get(row, "tool_name")), t->name) == 0) {
        mode = json_string_value(json_object_get(row, "mode"));
        source = "policy";
      }
    }
    if (json_array_append_new(tools, json_pack("{s:s,s:s,s:s,s:s}", "tool", t->name, "risk",
                                               tg_risk_name(t->risk), "mode", mode, "source",
                                               source)) < 0)
      return TG_E_NOMEM;
  }
  *ret = json_pack("{s:O}", "tools", tools);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int workspace_set(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *profile = tg_json_str(args, "namingProfile");
  int r = tg_db_exec(cx->db, "UPDATE tenants SET naming_profile = $1 WHERE id = $2",
                     json_pack("[ss]", profile, cx->principal->tenant_id), NULL);
  if (r < 0) return r;
  char summary[100];
  snprintf(summary, sizeof summary, "Naming profile set to %s", profile);
  r = tg_activity(cx, "WORKSPACE_UPDATED", NULL, summary,
                  json_pack("{s:s}", "namingProfile", profile));
  if (r < 0) return r;
  *ret = json_pack("{s:s}", "namingProfile", profile);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int run_start(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *agent = NULL;
  int r = tg_lookup_agent(cx, tg_json_str(args, "agentSlug"), &agent);
  if (r < 0) return r;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_run_insert(cx->db, id, cx->principal->tenant_id, tg_json_str(agent, "id"), "running",
                    "manual", now, NULL, NULL);
  if (r < 0) return r;
  *ret = json_pack("{s:s}", "runId", id);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int run_end(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *id = tg_json_str(args, "runId");
  const char *status = tg_json_str(args, "status") ? tg_json_str(args, "status") : "completed";
  _cleanup_json_ json_t *run = NULL;
  int r = tg_db_query_row(cx->db, "SELECT status FROM agent_runs WHERE id = $1 AND tenant_id = $2",
                          json_pack("[ss]", id, cx->principal->tenant_id), &run);
  if (r < 0) return r;
  if (!run)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "runId", id), "No run %.*s.",
                   TG_UTF8_CUT(id, 64));
  if (strcmp(json_string_value(json_object_get(run, "status")), "running") != 0)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:O}", "runId", id, "status", json_object_get(run, "status")),
                   "Run %.*s has already ended.", TG_UTF8_CUT(id, 64));
  r = tg_run_end(cx->db, id, status); /* running, as read in this transaction */
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "runId", id, "status", status);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int run_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 20;
  const char *slug = tg_json_str(args, "agentSlug");
  _cleanup_json_ json_t *agent = NULL;
  json_t *runs = NULL;
  /* An agent that does not exist is not_found, not an empty list that hides a typo. */
  int r = slug ? tg_lookup_agent(cx, slug, &agent) : TG_OK;
  if (r < 0) return r;
  r = tg_db_query(
      cx->db,
      "SELECT r.id, a.slug AS agent, r.status, r.trigger, r.started_at AS \"startedAt\","
      " r.ended_at AS \"endedAt\","
      " (SELECT COUNT(*) FROM agent_run_logs l WHERE l.run_id = r.id) AS calls"
      " FROM agent_runs r JOIN agents a ON a.id = r.agent_id"
      " WHERE r.tenant_id = $1 AND ($2 IS NULL OR r.agent_id = $2)"
      " ORDER BY r.started_at DESC, r.id DESC LIMIT $3",
      json_pack("[ss?I]", cx->principal->tenant_id, tg_json_str(agent, "id"), limit + 1), &runs);
  if (r < 0) return r;
  bool truncated = tg_json_cut(runs, limit);
  *ret = json_pack("{s:o,s:b}", "runs", runs, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Telemetry rows keep their metadata as JSON text: shown as the object it is. */
static void metadata_as_json(json_t *logs) {
  size_t i;
  json_t *row;
  json_array_foreach(logs, i, row) {
    json_t *meta = json_loads(json_string_value(json_object_get(row, "metadata")), 0, NULL);
    if (meta) json_object_set_new(row, "metadata", meta);
  }
}

static int run_show(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *id = tg_json_str(args, "runId");
  _cleanup_json_ json_t *run = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT r.id, a.slug AS agent, r.status, r.trigger,"
                          " r.started_at AS \"startedAt\", r.ended_at AS \"endedAt\""
                          " FROM agent_runs r JOIN agents a ON a.id = r.agent_id"
                          " WHERE r.id = $1 AND r.tenant_id = $2",
                          json_pack("[ss]", id, cx->principal->tenant_id), &run);
  if (r < 0) return r;
  if (!run)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "runId", id), "No run %.*s.",
                   TG_UTF8_CUT(id, 64));
  json_t *logs = NULL;
  r = tg_db_query(cx->db,
                  "SELECT id, step, level, message, metadata, created_at AS \"createdAt\""
                  " FROM agent_run_logs WHERE run_id = $1 ORDER BY created_at, id LIMIT $2",
                  json_pack("[si]", id, RUN_LOGS_MAX + 1), &logs);
  if (r < 0) return r;
  bool truncated = tg_json_cut(logs, RUN_LOGS_MAX);
  metadata_as_json(logs);
  *ret = json_pack("{s:O,s:o,s:b}", "run", run, "logs", logs, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int user_calls(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 20;
  _cleanup_json_ json_t *user = NULL;
  json_t *calls = NULL;
  int r = principal_named(cx, args, &user);
  if (r < 0) return r;
  r = tg_db_query(
      cx->db,
      "SELECT id, step, level, message, metadata, created_at AS \"createdAt\""
      " FROM agent_run_logs WHERE principal_id = $1 AND run_id IS NULL AND tenant_id = $2"
      " ORDER BY created_at DESC, id DESC LIMIT $3",
      json_pack("[OsI]", json_object_get(user, "principal_id"), cx->principal->tenant_id,
                limit + 1),
      &calls);
  if (r < 0) return r;
  bool truncated = tg_json_cut(calls, limit);
  metadata_as_json(calls);
  *ret = json_pack("{s:o,s:b}", "calls", calls, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Approves or denies a pending approval request. A person decides (the tool is people_only:
 * two agents granted approvals.resolve could let each other through), and not over MCP (the
 * tool is on the api surface alone), where the client may be an agent acting on the person's
 * token. */
static int approval_resolve(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *id = tg_json_str(args, "approvalId");
  const char *decision = tg_json_str(args, "decision");
  bool approve = strcmp(decision, "approve") == 0;
  _cleanup_json_ json_t *request = NULL, *decided = NULL;
  int r = tg_approval_get(cx->db, cx->principal->tenant_id, id, &request);
  if (r < 0) return r;
  if (!request)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "approvalId", id),
                   "No approval request %.*s.", TG_UTF8_CUT(id, 64));
  const char *status = tg_json_str(request, "status");
  if (strcmp(status, "pending") == 0 && !json_integer_value(json_object_get(request, "live")))
    status = "expired";
  /* Its time may pass between the read and the decision: expired then too. */
  r = strcmp(status, "pending") == 0
          ? tg_approval_decide(cx->db, id, cx->principal->id, approve, tg_json_str(args, "note"))
          : TG_E_NOTFOUND;
  if (r == TG_E_NOTFOUND)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s}", "approvalId", id, "status",
                             strcmp(status, "pending") == 0 ? "expired" : status),
                   "Approval request %s is %s, not pending.", id,
                   strcmp(status, "pending") == 0 ? "expired" : status);
  if (r == TG_OK) r = tg_approval_get(cx->db, cx->principal->tenant_id, id, &decided);
  if (r < 0) return r;
  const char *tool = tg_json_str(request, "tool_name");
  char summary[200];
  snprintf(summary, sizeof summary, "Call to %.*s %s", TG_UTF8_CUT(tool, 128),
           approve ? "approved" : "denied");
  r = tg_activity(cx, "APPROVAL_RESOLVED", NULL, summary,
                  json_pack("{s:s,s:s,s:s}", "approvalId", id, "tool", tool, "decision",
                            decision));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:O,s:s,s:O}", "approvalId", id, "status",
                   json_object_get(decided, "status"), "tool", tool, "expiresAt",
                   json_object_get(decided, "expires_at"));
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Which rows of approval_requests (q) have each status asked for, $1 being now: a request past
 * its time, though its row still says pending, approved or denied, is expired. Each names
 * the status ($3), as every parameter must be named. */
static const char *approval_status_clause(const char *status) {
  if (strcmp(status, "all") == 0) return "$3 = 'all'";
  if (strcmp(status, "used") == 0) return "q.status = $3";
  if (strcmp(status, "expired") == 0)
    return "(q.status = $3 OR (q.status IN ('pending', 'approved', 'denied')"
           " AND q.expires_at <= $1))";
  return "q.status = $3 AND q.expires_at > $1";
}

/* Approval requests with their caller's name, newest first (or the one named); arguments
 * shown as the object they are. A request past its time shows as expired. An agent (granted
 * approvals.read) sees only its own: it decides none, and others' arguments are not its. */
static int approval_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 20;
  const char *id = tg_json_str(args, "approvalId");
  const char *status = tg_json_str(args, "status") ? tg_json_str(args, "status")
                       : id                        ? "all"
                                                   : "pending";
  char now[TG_ISO_LEN + 1], sql[2048];
  tg_now_iso(now);
  snprintf(
      sql, sizeof sql,
      "SELECT q.id, COALESCE(a.slug, u.username) AS caller, p.kind AS \"callerKind\","
      " q.tool_name AS tool, q.args, q.run_id AS \"runId\","
      " CASE WHEN q.status IN ('pending', 'approved', 'denied') AND q.expires_at <= $1"
      " THEN 'expired' ELSE q.status END AS status, q.created_at AS \"createdAt\","
      " q.expires_at AS \"expiresAt\", (SELECT COALESCE(da.slug, du.username) FROM principals d"
      " LEFT JOIN agents da ON da.principal_id = d.id LEFT JOIN users du ON du.principal_id = d.id"
      " WHERE d.id = q.decided_by) AS \"decidedBy\", q.decided_at AS \"decidedAt\", q.note,"
      " q.used_at AS \"usedAt\""
      " FROM approval_requests q JOIN principals p ON p.id = q.principal_id"
      " LEFT JOIN agents a ON a.principal_id = p.id LEFT JOIN users u ON u.principal_id = p.id"
      " WHERE q.tenant_id = $2 AND %s AND ($5 IS NULL OR q.id = $5)"
      " AND ($6 IS NULL OR q.principal_id = $6) ORDER BY q.created_at DESC, q.id DESC LIMIT $4",
      approval_status_clause(status));
  json_t *rows = NULL;
  int r = tg_db_query(
      cx->db, sql,
      json_pack("[sssIs?s?]", now, cx->principal->tenant_id, status, limit + 1, id,
                cx->principal->kind == TG_PRINCIPAL_AGENT ? cx->principal->id : NULL),
      &rows);
  if (r < 0) return r;
  if (id && !json_array_size(rows)) {
    json_decref(rows);
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s,s:s}", "approvalId", id, "status", status),
                   "No approval request %.*s%s%s.", TG_UTF8_CUT(id, 64),
                   strcmp(status, "all") ? " that is " : "", strcmp(status, "all") ? status : "");
  }
  bool truncated = tg_json_cut(rows, limit);
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    json_t *shown = json_loads(tg_json_str(row, "args"), 0, NULL);
    if (shown) json_object_set_new(row, "args", shown);
  }
  *ret = json_pack("{s:o,s:b}", "approvals", rows, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const tg_handler_entry handlers[] = {
    {"agent.tool.list", tool_list},     {"admin.agent.tools", agent_tools},
    {"admin.agent.create", agent_create},
    {"admin.agent.list", agent_list},   {"admin.grant.add", grant_add},
    {"admin.grant.revoke", grant_revoke}, {"admin.token.create", token_create},
    {"admin.token.list", token_list},   {"admin.token.revoke", token_revoke},
    {"admin.policy.set", policy_set},   {"admin.policy.list", policy_list},
    {"admin.workspace.set", workspace_set}, {"admin.run.start", run_start},     {"admin.run.end", run_end},
    {"admin.run.list", run_list},       {"admin.run.show", run_show},
    {"admin.user.calls", user_calls},   {"agent.approval.resolve", approval_resolve},
    {"admin.approval.list", approval_list},
};

const tg_provider tg_provider_admin = {
    .name = "admin",
    .spec_file = "admin.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};

#include "core/principal.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/status.h"

const tg_permission_flag tg_agent_flags[] = {
    {"canAssignTasks", "tasks.assign"},         {"canEditAgentFiles", "agent.files.edit"},
    {"canCommitToRepo", "repo.commit"},         {"canOpenPullRequests", "repo.pull_request"},
    {"canCreateAgents", "agents.create"},       {"canCallExternalTools", "external.call"},
};
const size_t tg_agent_flags_count = sizeof tg_agent_flags / sizeof tg_agent_flags[0];

json_t *tg_agent_flags_all(void) {
  json_t *flags = json_array();
  for (size_t i = 0; flags && i < tg_agent_flags_count; i++)
    if (json_array_append_new(flags, json_string(tg_agent_flags[i].flag)) < 0) {
      json_decref(flags);
      flags = NULL;
    }
  return flags;
}

/* What a user's role grants. Owners and admins hold every permission. */
static const char *const member_permissions[] = {
    "agents.read", "runs.read", "runs.manage", "policy.read", "tasks.assign", "tasks.read",
    "missions.read", "kb.read", "skills.read", "approvals.read", NULL};
static const char *const viewer_permissions[] = {
    "agents.read", "runs.read", "policy.read", "tasks.read", "missions.read", "kb.read",
    "skills.read", "approvals.read", NULL};

static bool role_grants(const char *role, const char *permission) {
  if (!role) return false;
  if (strcmp(role, "owner") == 0 || strcmp(role, "admin") == 0) return true;
  const char *const *list = strcmp(role, "member") == 0   ? member_permissions
                            : strcmp(role, "viewer") == 0 ? viewer_permissions
                                                          : NULL;
  for (; list && *list; list++)
    if (strcmp(*list, permission) == 0) return true;
  return false;
}

bool tg_principal_can(const tg_principal *p, const char *permission) {
  return json_object_get(p->grants, permission) != NULL || role_grants(p->role, permission);
}

bool tg_principal_acts(const tg_principal *p) {
  return p->kind != TG_PRINCIPAL_AGENT || strcmp(p->status, "active") == 0;
}

static void copy_id(char out[TG_UUID_LEN + 1], json_t *row, const char *key) {
  const char *v = json_string_value(json_object_get(row, key));
  snprintf(out, TG_UUID_LEN + 1, "%s", v ? v : "");
}

static int load_rows(tg_db *db, const char *principal_id, tg_principal **ret) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(
      db,
      "SELECT p.id, p.tenant_id, p.kind, t.naming_profile,"
      " u.id AS user_id, u.username, u.role,"
      " a.id AS agent_id, a.slug, a.status, a.scope_type, a.scope_id"
      " FROM principals p JOIN tenants t ON t.id = p.tenant_id"
      " LEFT JOIN users u ON u.principal_id = p.id"
      " LEFT JOIN agents a ON a.principal_id = p.id WHERE p.id = $1",
      json_pack("[s]", principal_id), &row);
  if (r < 0) return r;
  /* A principal whose user or agent is gone stands for no one. */
  bool agent = row && strcmp(json_string_value(json_object_get(row, "kind")), "agent") == 0;
  if (!row || !json_is_string(json_object_get(row, agent ? "agent_id" : "user_id")))
    return TG_E_NOTFOUND;
  _cleanup_json_ json_t *grant_rows = NULL, *policy_rows = NULL;
  r = tg_db_query(db, "SELECT permission FROM grants WHERE principal_id = $1",
                  json_pack("[s]", principal_id), &grant_rows);
  if (r == TG_OK)
    r = tg_db_query(db, "SELECT tool_name, mode FROM tool_policies WHERE tenant_id = $1",
                    json_pack("[O]", json_object_get(row, "tenant_id")), &policy_rows);
  if (r < 0) return r;

  tg_principal *p = calloc(1, sizeof *p);
  json_t *grants = json_object(), *policies = json_object();
  bool ok = p && grants && policies;
  size_t i;
  json_t *g;
  json_array_foreach(grant_rows, i, g) {
    if (ok) ok = json_object_set_new(grants, json_string_value(json_object_get(g, "permission")),
                                     json_true()) == 0;
  }
  json_array_foreach(policy_rows, i, g) {
    if (ok) ok = json_object_set(policies, json_string_value(json_object_get(g, "tool_name")),
                                 json_object_get(g, "mode")) == 0;
  }
  if (!ok) {
    free(p);
    json_decref(grants);
    json_decref(policies);
    return TG_E_NOMEM;
  }
  p->grants = grants;
  p->policies = policies;
  p->refs = 1;
  copy_id(p->id, row, "id");
  copy_id(p->tenant_id, row, "tenant_id");
  p->kind = agent ? TG_PRINCIPAL_AGENT : TG_PRINCIPAL_USER;
  copy_id(p->subject_id, row, agent ? "agent_id" : "user_id");
  p->row = TAKE_PTR(row);
  p->name = json_string_value(json_object_get(p->row, agent ? "slug" : "username"));
  p->role = json_string_value(json_object_get(p->row, "role"));
  p->status = json_string_value(json_object_get(p->row, "status"));
  p->scope_type = agent ? json_string_value(json_object_get(p->row, "scope_type")) : "tenant";
  p->scope_id = json_string_value(json_object_get(p->row, "scope_id"));
  p->naming_profile = json_string_value(json_object_get(p->row, "naming_profile"));
  *ret = p;
  return TG_OK;
}

int tg_auth_epoch(tg_db *db, int64_t *ret) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(db, "SELECT n FROM auth_epoch WHERE id = 1", NULL, &row);
  if (r < 0) return r;
  if (!json_is_integer(json_object_get(row, "n"))) return TG_E_NOTFOUND;
  *ret = json_integer_value(json_object_get(row, "n"));
  return TG_OK;
}

/* A connection keeps the last principal it loaded outside a write transaction: while the
 * epoch it was loaded under stands, what it was loaded from has not changed. */
static void unkeep(void *p) { tg_principal_free(p); }

/* trust_kept: answer with the kept principal, if it is principal_id's, without reading the
 * epoch (tg_principal_load_kept). */
static int load(tg_db *db, const char *principal_id, bool trust_kept, tg_principal **ret) {
  tg_principal *kept = tg_db_kept(db);
  if (kept && strcmp(kept->id, principal_id) != 0) kept = NULL;
  if (trust_kept && kept) {
    kept->refs++;
    *ret = kept;
    return TG_OK;
  }
  /* The epoch is read first, so rows changed in between are newer than it claims, never
   * older. Inside a write transaction it may be uncommitted, and a rollback would give its
   * value back to other rows: only committed state is kept. */
  int64_t epoch;
  int r = tg_auth_epoch(db, &epoch);
  if (r < 0) return r;
  bool cacheable = !tg_db_writing(db);
  if (cacheable && kept && kept->epoch == epoch) {
    kept->refs++;
    *ret = kept;
    return TG_OK;
  }
  r = load_rows(db, principal_id, ret);
  if (r < 0) return r;
  (*ret)->epoch = epoch;
  if (!cacheable) return TG_OK;
  (*ret)->refs++;
  tg_db_keep(db, *ret, unkeep);
  return TG_OK;
}

int tg_principal_load(tg_db *db, const char *principal_id, tg_principal **ret) {
  return load(db, principal_id, false, ret);
}

int tg_principal_load_kept(tg_db *db, const char *principal_id, tg_principal **ret) {
  return load(db, principal_id, true, ret);
}

void tg_principal_free(tg_principal *p) {
  if (!p || --p->refs > 0) return;
  json_decref(p->row);
  json_decref(p->grants);
  json_decref(p->policies);
  free(p);
}

static int first_id(tg_db *db, const char *sql, json_t *params, char out[TG_UUID_LEN + 1]) {
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(db, sql, params, &rows);
  if (r < 0) return r;
  if (json_array_size(rows) == 0) return TG_E_NOTFOUND;
  if (json_array_size(rows) > 1) return TG_E_INVAL;
  copy_id(out, json_array_get(rows, 0), "id");
  return TG_OK;
}

int tg_tenant_lookup(tg_db *db, const char *slug, char out[TG_UUID_LEN + 1]) {
  if (slug) return first_id(db, "SELECT id FROM tenants WHERE slug = $1", json_pack("[s]", slug), out);
  return first_id(db, "SELECT id FROM tenants LIMIT 2", NULL, out);
}

int tg_principal_lookup(tg_db *db, const char *tenant_id, tg_principal_kind kind,
                        const char *name, char out[TG_UUID_LEN + 1]) {
  const char *sql = kind == TG_PRINCIPAL_AGENT
                        ? "SELECT principal_id AS id FROM agents WHERE tenant_id = $1 AND slug = $2"
                        : "SELECT principal_id AS id FROM users WHERE tenant_id = $1 AND username = $2";
  return first_id(db, sql, json_pack("[ss]", tenant_id, name), out);
}

int tg_principal_by_token(tg_db *db, const char *token, char out[TG_UUID_LEN + 1]) {
  char hash[TG_TOKEN_HASH_LEN + 1];
  if (tg_sha256_hex(token, strlen(token), hash) < 0) return TG_E_IO;
  return tg_principal_by_token_hash(db, hash, NULL, out);
}

int tg_principal_by_token_hash(tg_db *db, const char *hash, const char *tenant_id,
                               char out[TG_UUID_LEN + 1]) {
  return first_id(db,
                  "SELECT t.principal_id AS id FROM api_tokens t"
                  " JOIN principals p ON p.id = t.principal_id"
                  " WHERE t.token_hash = $1 AND t.revoked_at IS NULL"
                  " AND ($2 IS NULL OR p.tenant_id = $2)"
                  /* the holder still exists: a token of no one is no token */
                  " AND (EXISTS (SELECT 1 FROM users u WHERE u.principal_id = p.id)"
                  " OR EXISTS (SELECT 1 FROM agents a WHERE a.principal_id = p.id))",
                  json_pack("[ss?]", hash, tenant_id), out);
}

int tg_principal_owner(tg_db *db, const char *tenant_id, char out[TG_UUID_LEN + 1]) {
  return first_id(db,
                  "SELECT principal_id AS id FROM users WHERE tenant_id = $1 AND role = 'owner'"
                  " ORDER BY created_at, id LIMIT 1",
                  json_pack("[s]", tenant_id), out);
}

int tg_tenant_create(tg_db *db, const char *slug, const char *owner_username,
                     char tenant_id[TG_UUID_LEN + 1], char owner_principal[TG_UUID_LEN + 1]) {
  char user_id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(tenant_id) < 0 || tg_uuid7(owner_principal) < 0 || tg_uuid7(user_id) < 0)
    return TG_E_IO;
  tg_now_iso(now);
  int r = tg_db_begin(db);
  if (r == TG_OK)
    r = tg_db_exec(db, "INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, $2, $2, $3)",
                   json_pack("[sss]", tenant_id, slug, now), NULL);
  if (r == TG_OK)
    r = tg_db_exec(db,
                   "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ($1, $2, 'user', $3)",
                   json_pack("[sss]", owner_principal, tenant_id, now), NULL);
  if (r == TG_OK)
    r = tg_db_exec(db,
                   "INSERT INTO users (id, tenant_id, principal_id, username, role, created_at)"
                   " VALUES ($1, $2, $3, $4, 'owner', $5)",
                   json_pack("[sssss]", user_id, tenant_id, owner_principal, owner_username, now),
                   NULL);
  if (r == TG_OK) r = tg_db_commit(db);
  if (r < 0) tg_db_rollback(db);
  return r;
}

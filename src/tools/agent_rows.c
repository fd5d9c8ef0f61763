#include "tools/agent_rows.h"

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/status.h"

int tg_agent_insert(tg_call_ctx *cx, const tg_new_agent *a, char agent_id[TG_UUID_LEN + 1],
                    char principal_id[TG_UUID_LEN + 1]) {
  const char *tenant_id = cx->principal->tenant_id;
  _cleanup_json_ json_t *existing = NULL;
  int r = tg_db_query_row(cx->db, "SELECT id FROM agents WHERE tenant_id = $1 AND slug = $2",
                          json_pack("[ss]", tenant_id, a->slug), &existing);
  if (r < 0) return r;
  if (existing)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s}", "reason", "slug_taken", "slug", a->slug),
                   "An agent %s already exists in this workspace.", a->slug);
  char now[TG_ISO_LEN + 1];
  if (tg_uuid7(agent_id) < 0 || tg_uuid7(principal_id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ($1, $2, 'agent', $3)",
                 json_pack("[sss]", principal_id, tenant_id, now), NULL);
  if (r < 0) return r;
  return tg_db_exec(
      cx->db,
      "INSERT INTO agents (id, tenant_id, principal_id, slug, name, scope_type, scope_id, status,"
      " content_hash, created_by_agent_id, title, capabilities, ai_provider_id, model_id,"
      " heartbeat_cadence, created_at, updated_at)"
      " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)",
      json_pack("[sssssss?ss?s?s?s?s?s?s?s]", agent_id, tenant_id, principal_id, a->slug, a->name,
                a->scope_type, a->scope_id, a->status, a->content_hash, a->created_by_agent_id,
                a->title, a->capabilities, a->ai_provider_id, a->model_id, a->heartbeat_cadence,
                now),
      NULL);
}

#include "tools/lookup.h"

#include "util/status.h"

int tg_lookup_agent(tg_call_ctx *cx, const char *slug, json_t **ret) {
  int r = tg_db_query_row(cx->db,
                          "SELECT id, principal_id, slug, status, scope_type, scope_id FROM agents"
                          " WHERE tenant_id = $1 AND slug = $2",
                          json_pack("[ss]", cx->principal->tenant_id, slug), ret);
  if (r < 0) return r;
  if (!*ret)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "agentSlug", slug),
                   "No agent %s in this workspace.", slug);
  return TG_OK;
}

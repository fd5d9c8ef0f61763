#include "tools/lookup.h"

#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/json.h"
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

int tg_lookup_scope_id(tg_call_ctx *cx, const char *kind, const char *id_or_slug,
                       json_t *details, char out[TG_UUID_LEN + 1]) {
  _cleanup_json_ json_t *owned = details;
  static const struct { const char *kind, *sql; } tables[] = {
      {"mission", "SELECT id FROM missions WHERE tenant_id = $1 AND (id = $2 OR slug = $2)"},
      {"idea", "SELECT id FROM ideas WHERE tenant_id = $1 AND (id = $2 OR slug = $2)"},
      {"work", "SELECT id FROM works WHERE tenant_id = $1 AND (id = $2 OR slug = $2)"},
  };
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    if (strcmp(kind, tables[i].kind) != 0) continue;
    _cleanup_json_ json_t *row = NULL;
    int r = tg_db_query_row(cx->db, tables[i].sql,
                            json_pack("[ss]", cx->principal->tenant_id, id_or_slug), &row);
    if (r < 0) return r;
    if (!row)
      return tg_fail(cx, TG_ERR_NOT_FOUND, TAKE_PTR(owned), "No %s %.*s in this workspace.", kind,
                     TG_UTF8_CUT(id_or_slug, 64));
    snprintf(out, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(row, "id")));
    return TG_OK;
  }
  return TG_E_INVAL;
}

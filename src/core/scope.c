#include "core/scope.h"

#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/status.h"

static void set_id(char out[TG_UUID_LEN + 1], json_t *value) {
  const char *v = json_string_value(value);
  snprintf(out, TG_UUID_LEN + 1, "%s", v ? v : "");
}

int tg_scope_resolve(tg_db *db, const char *tenant_id, tg_scope_ref *ref) {
  _cleanup_json_ json_t *row = NULL;
  int r;
  if (*ref->work_id) {
    r = tg_db_query_row(db, "SELECT mission_id, idea_id FROM works WHERE id = $1 AND tenant_id = $2",
                        json_pack("[ss]", ref->work_id, tenant_id), &row);
    if (r < 0) return r;
    if (!row) return TG_E_NOTFOUND;
    set_id(ref->mission_id, json_object_get(row, "mission_id"));
    set_id(ref->idea_id, json_object_get(row, "idea_id"));
    return TG_OK;
  }
  if (*ref->idea_id) {
    r = tg_db_query_row(db, "SELECT mission_id FROM ideas WHERE id = $1 AND tenant_id = $2",
                        json_pack("[ss]", ref->idea_id, tenant_id), &row);
    if (r < 0) return r;
    if (!row) return TG_E_NOTFOUND;
    set_id(ref->mission_id, json_object_get(row, "mission_id"));
    return TG_OK;
  }
  if (*ref->mission_id) {
    r = tg_db_query_row(db, "SELECT id FROM missions WHERE id = $1 AND tenant_id = $2",
                        json_pack("[ss]", ref->mission_id, tenant_id), &row);
    if (r < 0) return r;
    if (!row) return TG_E_NOTFOUND;
  }
  return TG_OK;
}

int tg_scope_of(tg_db *db, const tg_principal *p, tg_scope_ref *ret) {
  *ret = (tg_scope_ref){0};
  if (!p->scope_id) return TG_OK;
  char *slot = strcmp(p->scope_type, "mission") == 0 ? ret->mission_id
               : strcmp(p->scope_type, "idea") == 0  ? ret->idea_id
                                                     : ret->work_id;
  snprintf(slot, TG_UUID_LEN + 1, "%s", p->scope_id);
  return tg_scope_resolve(db, p->tenant_id, ret);
}

bool tg_scope_reaches(const tg_principal *p, const tg_scope_ref *ref) {
  if (!p->scope_id) return true;
  if (strcmp(p->scope_type, "mission") == 0) return strcmp(ref->mission_id, p->scope_id) == 0;
  if (strcmp(p->scope_type, "idea") == 0) return strcmp(ref->idea_id, p->scope_id) == 0;
  return strcmp(ref->work_id, p->scope_id) == 0;
}

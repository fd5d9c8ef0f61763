/* The scope tree tenant → mission → idea → work, and what a caller reaches in it
 * (DESIGN.md §5). Reads outside the caller's reach answer not_found (existence is not
 * revealed); writes outside it answer permission_denied. */
#pragma once
#include <stdbool.h>

#include "core/principal.h"
#include "db/db.h"

/* Where a row lives. Resolution fills the parents: a work's idea and mission, an idea's
 * mission. Empty strings mean "not set". */
typedef struct tg_scope_ref {
  char mission_id[TG_UUID_LEN + 1];
  char idea_id[TG_UUID_LEN + 1];
  char work_id[TG_UUID_LEN + 1];
} tg_scope_ref;

/* Fills the parents of ref from the database (within tenant_id). TG_E_NOTFOUND when a named
 * mission, idea or work does not exist in that tenant. */
int tg_scope_resolve(tg_db *db, const char *tenant_id, tg_scope_ref *ref);

/* The caller's own scope, resolved (a tenant-scope caller gets an empty ref). */
int tg_scope_of(tg_db *db, const tg_principal *p, tg_scope_ref *ret);

/* Whether p reaches a row at ref (resolved): a tenant caller (and every user) reaches the
 * whole tenant; a mission agent its mission with its ideas and works; an idea agent its idea
 * and the works of that idea; a work agent its work. */
bool tg_scope_reaches(const tg_principal *p, const tg_scope_ref *ref);

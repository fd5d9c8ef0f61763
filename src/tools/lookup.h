/* Lookups several providers' handlers share. */
#pragma once
#include <jansson.h>

#include "core/call.h"
#include "util/ids.h"

/* The agent with slug in the caller's tenant as a new row {id, principal_id, slug, status,
 * scope_type, scope_id}, or a not_found failure (TG_E_TOOL). */
int tg_lookup_agent(tg_call_ctx *cx, const char *slug, json_t **ret);

/* The id of the mission, idea or work (kind) named by id or slug in the caller's tenant, or
 * a not_found failure (TG_E_TOOL) carrying details (stolen, in every case). */
int tg_lookup_scope_id(tg_call_ctx *cx, const char *kind, const char *id_or_slug,
                       json_t *details, char out[TG_UUID_LEN + 1]);

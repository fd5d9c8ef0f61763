/* Lookups several providers' handlers share. */
#pragma once
#include <jansson.h>

#include "core/call.h"

/* The agent with slug in the caller's tenant as a new row {id, principal_id, slug, status,
 * scope_type, scope_id}, or a not_found failure (TG_E_TOOL). */
int tg_lookup_agent(tg_call_ctx *cx, const char *slug, json_t **ret);

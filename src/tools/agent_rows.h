/* Creating an agent: the principal it acts as and its agents row, written the same way by
 * the operator's admin.agent.create and an agent's createSubAgent. */
#pragma once
#include "core/call.h"
#include "util/ids.h"

/* What the new agent is; NULL fields are stored as NULL. */
typedef struct tg_new_agent {
  const char *slug, *name, *status;
  const char *scope_type, *scope_id;
  const char *content_hash, *created_by_agent_id;
  const char *title, *capabilities, *ai_provider_id, *model_id, *heartbeat_cadence;
} tg_new_agent;

/* Inserts the agent into the caller's tenant, created now. A slug already in use is a
 * precondition_failed failure (reason slug_taken). */
int tg_agent_insert(tg_call_ctx *cx, const tg_new_agent *a, char agent_id[TG_UUID_LEN + 1],
                    char principal_id[TG_UUID_LEN + 1]);

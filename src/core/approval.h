/* Approvals of calls the workspace tool policy holds (mode "approval", seed 001): a request
 * bound to its caller, its tool and a digest of its exact arguments, decided by someone
 * else, used once by the caller's next call with the same arguments. The gate reads them
 * (gates.c), a refused call opens one (call.c), agent.approval.resolve decides one. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "core/principal.h"
#include "core/tool.h"
#include "db/db.h"

#define TG_APPROVAL_PENDING_MS (24 * 3600 * 1000LL) /* a request waits this long for a decision */
#define TG_APPROVAL_DECIDED_MS (3600 * 1000LL)      /* an approval is good, a denial stands, this long */
#define TG_APPROVAL_PENDING_MAX 50                  /* requests one caller may have waiting */
#define TG_APPROVAL_ARGS_MAX (64 * 1024) /* bytes of arguments an approver can be shown */

/* Whether p's workspace holds tool for approval, for a call of p's on surface: an agent's on
 * any, a person's on MCP. */
bool tg_approval_needed(const tg_principal *p, const tg_tool *tool, tg_surface surface);

/* The arguments' canonical JSON (sorted keys; malloc'd, in *text unless text is NULL), what
 * an approver is shown, and the hex SHA-256 of the tool's name and that text. */
int tg_approval_subject(const tg_tool *tool, json_t *args, char **text, char digest[65]);

/* The live request (pending, approved or denied, and not past its time) of principal_id's
 * call to tool with these arguments: {id, status, expires_at, note} in *row, or NULL. */
int tg_approval_find(tg_db *db, const char *principal_id, const char *tool, const char *digest,
                     json_t **row);

/* In the transaction that records a refused call: opens a pending request for it (args_text:
 * its tg_approval_subject text) and puts its id in id, or the id of the live request for the
 * same call. TG_E_TOO_LARGE when the caller already has TG_APPROVAL_PENDING_MAX waiting. */
int tg_approval_open(tg_db *db, const tg_principal *p, const char *tool, const char *digest,
                     const char *args_text, const char *run_id, char id[TG_UUID_LEN + 1]);

/* In the transaction of the call it allows (where the approval gate found it): marks the
 * approval of this call used, and puts its id in id. */
int tg_approval_use(tg_db *db, const char *principal_id, const char *tool, const char *digest,
                    char id[TG_UUID_LEN + 1]);

/* The request id of tenant_id, with whether it is past its time ("live": 0 or 1), in *row;
 * NULL when there is none. */
int tg_approval_get(tg_db *db, const char *tenant_id, const char *id, json_t **row);

/* Approves or denies the pending request id as decider, with an optional note, for
 * TG_APPROVAL_DECIDED_MS from now. TG_E_NOTFOUND when it is no longer pending (or its time
 * has just passed). */
int tg_approval_decide(tg_db *db, const char *id, const char *decider, bool approve,
                       const char *note);

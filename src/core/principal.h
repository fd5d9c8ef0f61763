/* Who is calling: a user or an agent of a tenant, with the permissions it holds right now.
 * A connection keeps the last principal it loaded, with the authorization epoch (auth_epoch,
 * moved by every change to what a principal is loaded from) it was loaded under; it serves
 * again while that epoch stands, so a revoked grant takes effect at once. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "db/db.h"
#include "util/ids.h"

typedef enum tg_principal_kind { TG_PRINCIPAL_USER, TG_PRINCIPAL_AGENT } tg_principal_kind;

typedef struct tg_principal {
  char id[TG_UUID_LEN + 1];
  char tenant_id[TG_UUID_LEN + 1];
  char subject_id[TG_UUID_LEN + 1]; /* users.id or agents.id */
  tg_principal_kind kind;
  json_t *row; /* the joined principal/user/agent/tenant row; fields below point into it */
  const char *name;           /* username or agent slug */
  const char *role;           /* users: owner, admin, member, viewer; agents: NULL */
  const char *status;         /* agents: draft, active, paused, archived; users: NULL */
  const char *scope_type;     /* agents: tenant, mission, idea, work; users: "tenant" */
  const char *scope_id;       /* agents below tenant scope: the mission, idea or work id */
  const char *naming_profile; /* the tenant's: canonical or catalog */
  json_t *grants;             /* object: permission → true, explicit grants only */
  json_t *policies;           /* the tenant's tool policy: {canonical tool name: mode} */
  int64_t epoch;              /* the authorization epoch it was loaded under */
  int refs;                   /* the caller's and the connection's cache: read only, shared */
} tg_principal;

/* Loads the principal with id, its live grants and its tenant's tool policy (one epoch covers
 * them all). TG_E_NOTFOUND when there is none. The result is shared with db's cache: never
 * change it; release it with tg_principal_free on the thread that uses db. */
int tg_principal_load(tg_db *db, const char *principal_id, tg_principal **ret);
/* The same, but the principal db keeps, when it is principal_id's, is returned without reading
 * the epoch: it may be out of date. A caller acting on it compares its epoch with
 * tg_auth_epoch in the transaction that acts, and decides any refusal on tg_principal_load's
 * answer (tg_call does both). */
int tg_principal_load_kept(tg_db *db, const char *principal_id, tg_principal **ret);
void tg_principal_free(tg_principal *p);

/* The authorization epoch (migration 0007): it moves, in the same transaction, with every
 * change to the tenants, principals, users, agents, grants and tool_policies columns that
 * decide a principal's permissions and tool list. */
int tg_auth_epoch(tg_db *db, int64_t *ret);

/* Whether p holds permission, by an explicit grant or (users) by its role. */
bool tg_principal_can(const tg_principal *p, const char *permission);
/* Whether p acts at all: a user does, an agent only while active (drafts wait for a person
 * to start them; paused and archived agents must not resume by themselves). */
bool tg_principal_acts(const tg_principal *p);

/* The tenant with slug, or the only tenant when slug is NULL. TG_E_NOTFOUND when there is
 * none; TG_E_INVAL when slug is NULL and there are several. Writes its id into out. */
int tg_tenant_lookup(tg_db *db, const char *slug, char out[TG_UUID_LEN + 1]);
/* The principal of the agent with slug, or of the user with username, in tenant_id. */
int tg_principal_lookup(tg_db *db, const char *tenant_id, tg_principal_kind kind,
                        const char *name, char out[TG_UUID_LEN + 1]);
/* The principal holding API token (not revoked). TG_E_NOTFOUND otherwise. */
int tg_principal_by_token(tg_db *db, const char *token, char out[TG_UUID_LEN + 1]);
/* The same by the token's SHA-256 (hex), which is all the database keeps (what a server
 * holds on to, to find out later whether the token it was opened with still stands), and
 * only in tenant_id unless it is NULL. */
#define TG_TOKEN_HASH_LEN 64
int tg_principal_by_token_hash(tg_db *db, const char *hash, const char *tenant_id,
                               char out[TG_UUID_LEN + 1]);

/* The seed-000 agent permission flags and the grants they stand for (DESIGN.md §5). */
typedef struct tg_permission_flag {
  const char *flag;       /* canAssignTasks */
  const char *permission; /* tasks.assign */
} tg_permission_flag;
extern const tg_permission_flag tg_agent_flags[];
extern const size_t tg_agent_flags_count;
/* Every flag's name, as grants holding them all: a new array, NULL without memory. */
json_t *tg_agent_flags_all(void);

/* The principal of the tenant's first owner. TG_E_NOTFOUND when it has none. */
int tg_principal_owner(tg_db *db, const char *tenant_id, char out[TG_UUID_LEN + 1]);

/* Bootstrap, the one write outside tg_call: a new tenant with slug and its owner user.
 * TG_E_CONSTRAINT when the slug is taken. */
int tg_tenant_create(tg_db *db, const char *slug, const char *owner_username,
                     char tenant_id[TG_UUID_LEN + 1], char owner_principal[TG_UUID_LEN + 1]);

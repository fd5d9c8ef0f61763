#define _GNU_SOURCE
#include "core/approval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

/* Stored times compare as text: they are all ISO-8601 UTC of one width. */
static void iso_from_now(int64_t ms, char out[TG_ISO_LEN + 1]) {
  tg_iso8601(tg_now_ms() + ms, out);
}

bool tg_approval_needed(const tg_principal *p, const tg_tool *tool, tg_surface surface) {
  /* The hold puts a person between an agent and the tool (seed 001: "requires user
   * approval"). A person's own call elsewhere is that person's decision (no one else could
   * make it in a workspace of one person); over MCP the caller may be the client acting on
   * the person's token, so it waits for the person, outside MCP (approval_resolve). */
  if (p->kind != TG_PRINCIPAL_AGENT && surface != TG_SURFACE_MCP) return false;
  const char *mode = json_string_value(json_object_get(p->policies, tool->name));
  return mode && strcmp(mode, "approval") == 0;
}

int tg_approval_subject(const tg_tool *tool, json_t *args, char **text, char digest[65]) {
  /* Sorted keys: the same arguments sent in another order are the same call. */
  _cleanup_free_ char *canonical =
      json_dumps(args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  _cleanup_free_ char *subject = NULL;
  if (!canonical || asprintf(&subject, "%s\n%s", tool->name, canonical) < 0) return TG_E_NOMEM;
  int r = tg_sha256_hex(subject, strlen(subject), digest);
  if (r == TG_OK && text) *text = TAKE_PTR(canonical);
  return r;
}

int tg_approval_find(tg_db *db, const char *principal_id, const char *tool, const char *digest,
                     json_t **row) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  return tg_db_query_row(db,
                         "SELECT id, status, expires_at, note FROM approval_requests"
                         " WHERE principal_id = $1 AND tool_name = $2 AND args_digest = $3"
                         " AND status IN ('pending', 'approved', 'denied') AND expires_at > $4",
                         json_pack("[ssss]", principal_id, tool, digest, now), row);
}

int tg_approval_open(tg_db *db, const tg_principal *p, const char *tool, const char *digest,
                     const char *args_text, const char *run_id, char id[TG_UUID_LEN + 1]) {
  char now[TG_ISO_LEN + 1], expires[TG_ISO_LEN + 1];
  tg_now_iso(now);
  iso_from_now(TG_APPROVAL_PENDING_MS, expires);
  /* A request past its time gives way to a new one (one live request per call). */
  int r = tg_db_exec(db,
                     "UPDATE approval_requests SET status = 'expired' WHERE principal_id = $1"
                     " AND status IN ('pending', 'approved', 'denied') AND expires_at <= $2",
                     json_pack("[ss]", p->id, now), NULL);
  _cleanup_json_ json_t *live = NULL;
  if (r == TG_OK)
    r = tg_db_query_row(db,
                        "SELECT (SELECT id FROM approval_requests WHERE principal_id = $1"
                        " AND tool_name = $2 AND args_digest = $3"
                        " AND status IN ('pending', 'approved', 'denied')) AS id,"
                        " (SELECT COUNT(*) FROM approval_requests WHERE principal_id = $1"
                        " AND status = 'pending'"
                        " AND status IN ('pending', 'approved', 'denied')) AS waiting",
                        json_pack("[sss]", p->id, tool, digest), &live);
  if (r < 0) return r;
  /* Asked again while it waits, or decided since the snapshot the gate read: that request.
   * (The status terms repeated let SQLite use the index of live requests.) */
  if (tg_json_str(live, "id")) {
    snprintf(id, TG_UUID_LEN + 1, "%s", tg_json_str(live, "id"));
    return TG_OK;
  }
  if (json_integer_value(json_object_get(live, "waiting")) >= TG_APPROVAL_PENDING_MAX)
    return TG_E_TOO_LARGE;
  if (tg_uuid7(id) < 0) return TG_E_IO;
  return tg_db_exec(db,
                    "INSERT INTO approval_requests (id, tenant_id, principal_id, tool_name,"
                    " args_digest, args, run_id, status, created_at, expires_at)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9)",
                    json_pack("[ssssss?s?ss]", id, p->tenant_id, p->id, tool, digest, args_text,
                              run_id, now, expires),
                    NULL);
}

int tg_approval_use(tg_db *db, const char *principal_id, const char *tool, const char *digest,
                    char id[TG_UUID_LEN + 1]) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  _cleanup_json_ json_t *used = NULL;
  /* No look at its time: the gate found it good in this transaction, a moment ago. */
  int r = tg_db_query_row(db,
                          "UPDATE approval_requests SET status = 'used', used_at = $1"
                          " WHERE principal_id = $2 AND tool_name = $3 AND args_digest = $4"
                          " AND status = 'approved' AND status IN ('pending', 'approved', 'denied')"
                          " RETURNING id",
                          json_pack("[ssss]", now, principal_id, tool, digest), &used);
  if (r < 0) return r;
  if (!used) return TG_E_NOTFOUND;
  snprintf(id, TG_UUID_LEN + 1, "%s", tg_json_str(used, "id"));
  return TG_OK;
}

int tg_approval_get(tg_db *db, const char *tenant_id, const char *id, json_t **row) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  return tg_db_query_row(db,
                         "SELECT id, principal_id, tool_name, status, expires_at,"
                         " expires_at > $1 AS live FROM approval_requests"
                         " WHERE id = $2 AND tenant_id = $3",
                         json_pack("[sss]", now, id, tenant_id), row);
}

int tg_approval_decide(tg_db *db, const char *id, const char *decider, bool approve,
                       const char *note) {
  char now[TG_ISO_LEN + 1], expires[TG_ISO_LEN + 1];
  tg_now_iso(now);
  iso_from_now(TG_APPROVAL_DECIDED_MS, expires);
  int64_t changes = 0;
  int r = tg_db_exec(db,
                     "UPDATE approval_requests SET status = $1, decided_by = $2, decided_at = $3,"
                     " expires_at = $4, note = $5 WHERE id = $6 AND status = 'pending'"
                     " AND expires_at > $3",
                     json_pack("[sssss?s]", approve ? "approved" : "denied", decider, now,
                               expires, note, id),
                     &changes);
  return r < 0 ? r : changes == 1 ? TG_OK : TG_E_NOTFOUND;
}

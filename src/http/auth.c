/* Who a request comes from: its Bearer token checked against the database, and the refusal
 * of one without a valid token. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/media.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/status.h"

/* The principal the request's Bearer token names (out), and the token's hash ("" with
 * --no-auth); CALLER_UNCHECKED when the database could not say. */
caller http_authenticate(server *s, struct MHD_Connection *conn, tg_db *db,
                         char out[TG_UUID_LEN + 1], char hash[TG_TOKEN_HASH_LEN + 1]) {
  hash[0] = '\0';
  if (s->cfg->no_auth) {
    snprintf(out, TG_UUID_LEN + 1, "%s", s->cfg->no_auth_principal);
    return CALLER_KNOWN;
  }
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  if (!auth || strncasecmp(auth, "Bearer", 6) != 0 || (auth[6] && auth[6] != ' '))
    return CALLER_NO_TOKEN;
  if (strlen(auth) > 512) return CALLER_BAD_TOKEN;
  size_t len;
  const char *token = tg_http_field_value(auth + 6, &len);
  if (!len) return CALLER_EMPTY_TOKEN;
  int r = db && tg_sha256_hex(token, len, hash) == 0
              ? tg_principal_by_token_hash(db, hash, s->cfg->tenant_id, out)
              : TG_E_DB;
  if (r == TG_OK) tg_token_used(s->token_uses, hash);
  /* Refused all the same, but logged as what it is: "unknown or revoked" would send its
   * operator after the wrong cause. */
  char elsewhere[TG_UUID_LEN + 1];
  if (r == TG_E_NOTFOUND && s->cfg->tenant_id &&
      tg_principal_by_token_hash(db, hash, NULL, elsewhere) == TG_OK)
    return CALLER_OTHER_WORKSPACE;
  return r == TG_OK ? CALLER_KNOWN : r == TG_E_NOTFOUND ? CALLER_BAD_TOKEN : CALLER_UNCHECKED;
}

/* The refusal of a request without a valid token: 401, or 503 when the database could not
 * check it. Only a token that was sent is called invalid (RFC 6750 §3.1): an empty one is
 * taken as none, so that a client's authorization flow starts as for none. Both are logged,
 * since clients often show a refusal as something else (an OAuth error, "failed to
 * connect"). */
enum MHD_Result http_refuse_caller(server *s, struct MHD_Connection *conn, caller who) {
  if (who != CALLER_NO_TOKEN && tg_log_may(&s->refused_logged_ms))
    tg_log(TG_LOG_WARN,
           "http: refused a request whose Bearer token %s (logged once a minute "
           "at most)",
           who == CALLER_UNCHECKED     ? "the database could not check (503)"
           : who == CALLER_EMPTY_TOKEN ? "is empty (401): is the client's token set?"
           : who == CALLER_OTHER_WORKSPACE
               ? "belongs to another workspace than the one this server serves "
                 "(--tenant) (401)"
               : "is unknown or revoked (401)");
  /* The token may be good: the client must not drop it. */
  if (who == CALLER_UNCHECKED)
    return http_queue_rpc_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, TG_RPC_INTERNAL_ERROR,
                                "The token could not be checked; retry");
  _cleanup_free_ char *text = tg_rpc_error_text(
      NULL, TG_RPC_INVALID_REQUEST,
      who == CALLER_EMPTY_TOKEN
          ? "The Bearer token is empty; send one (toolgate token create makes one)"
          : "A valid Bearer token is required (toolgate token create makes one)",
      NULL);
  struct MHD_Response *res =
      text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY) : NULL;
  if (!res) return MHD_NO;
  MHD_add_response_header(res, "WWW-Authenticate",
                          who == CALLER_BAD_TOKEN || who == CALLER_OTHER_WORKSPACE
                              ? "Bearer realm=\"toolgate\", error=\"invalid_token\""
                              : "Bearer realm=\"toolgate\"");
  return http_respond_with(conn, MHD_HTTP_UNAUTHORIZED, res, "application/json", NULL, NULL);
}

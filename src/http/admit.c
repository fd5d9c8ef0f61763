/* What a request's headers decide before any of its body is read: its framing, its route,
 * its origin, its caller and the media it sends and takes. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/media.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/status.h"

/* The path of a request target ("/mcp") in *path. One in absolute form
 * ("http://host:port/mcp"), which a server must take (RFC 9112 §3.2.2), names its host, which
 * then stands for Host's: *authority (a new string; NULL for a target in origin form).
 * TG_E_INVAL for an absolute target with no host or with user information (RFC 9110
 * §4.2.4). */
static int target_path(const char *url, const char **path, char **authority) {
  *authority = NULL;
  *path = url;
  if (strncasecmp(url, "http://", 7) != 0) return TG_OK;
  const char *start = url + 7, *end = start + strcspn(start, "/");
  if (end == start || *start == ':' || memchr(start, '@', (size_t)(end - start)))
    return TG_E_INVAL;
  if (!(*authority = strndup(start, (size_t)(end - start)))) return TG_E_NOMEM;
  *path = *end ? end : "/";
  return TG_OK;
}

/* Whether the body comes in a content coding (gzip, say): none is taken, "identity" (or an
 * empty value) being no coding, in any of the header's lines. */
static enum MHD_Result count_coding(void *arg, enum MHD_ValueKind kind, const char *name,
                                    const char *value) {
  (void)kind;
  if (strcasecmp(name, "Content-Encoding") == 0 && value && *value &&
      strcasecmp(value, "identity") != 0)
    ++*(unsigned *)arg;
  return MHD_YES;
}

static bool encoded(struct MHD_Connection *conn) {
  unsigned codings = 0;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_coding, &codings);
  return codings > 0;
}

/* Why a Transfer-Encoding list cannot frame a body (NULL for "chunked", the one list that
 * libmicrohttpd reads as chunked), with the status: 501 when another coding comes before a
 * last chunked, none of which is decoded here; else 400, as the body's length cannot be read
 * (RFC 9112 §6.3: chunked not last, or twice; or, to libmicrohttpd, empty elements around it). */
static const char *coding_refusal(const char *list, unsigned *status) {
  if (strcasecmp(list, "chunked") == 0) return NULL;
  unsigned chunked = 0, others = 0;
  bool chunked_last = false;
  for (const char *p = list; *p;) {
    const char *end = p + strcspn(p, ","), *last = end;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    while (last > p && (last[-1] == ' ' || last[-1] == '\t')) last--;
    if (last > p) {
      chunked_last = last - p == 7 && strncasecmp(p, "chunked", 7) == 0;
      chunked += chunked_last;
      others += !chunked_last;
    }
    p = *end ? end + 1 : end;
  }
  bool decodable = chunked_last && chunked == 1 && others;
  *status = decodable ? MHD_HTTP_NOT_IMPLEMENTED : MHD_HTTP_BAD_REQUEST;
  return decodable ? "Transfer-Encoding other than chunked is not supported"
                   : "Transfer-Encoding must be chunked alone";
}

/* Why a body's framing (its Content-Length and Transfer-Encoding headers, or NULL) cannot be
 * read (*status: 400, or 501 for a coding not supported), or NULL when it can. */
static const char *framing_refusal(const char *length, const char *coding, const char *version,
                                   unsigned *status) {
  *status = MHD_HTTP_BAD_REQUEST;
  if (length && coding) return "Content-Length and Transfer-Encoding are given together";
  /* RFC 9112 §6.1: an HTTP/1.0 message's Transfer-Encoding is faulty framing. */
  if (coding && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
    return "Transfer-Encoding is not HTTP/1.0's";
  return coding ? coding_refusal(coding, status) : NULL;
}

/* Reads what a request's Accept, Content-Type and Content-Encoding say into rq: what answers
 * it takes, and the refusal of a POST whose body or answer this server cannot have (sent once
 * its body names the request's id). False when out of memory. */
static bool read_media(struct MHD_Connection *conn, const char *method, request *rq) {
  char *accept = NULL;
  if (!http_header_value(conn, "Accept", &accept)) return false;
  tg_accept json = tg_http_accepts(accept, "application/json");
  tg_accept events = tg_http_accepts(accept, "text/event-stream");
  free(accept);
  rq->takes_events = events.quality > 0;
  rq->prefers_events = events.named && events.quality >= json.quality;
  if (strcmp(method, "POST") != 0) return true;
  /* A POST's answer may be JSON or an event stream, at the server's choice: a client must
   * take both. */
  if (json.quality == 0 || events.quality == 0) {
    rq->refused_media = "Accept must take application/json and text/event-stream";
    rq->refused_media_status = MHD_HTTP_NOT_ACCEPTABLE;
  } else if (!tg_http_is_json(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                          "Content-Type"))) {
    rq->refused_media = "Content-Type must be application/json, in UTF-8 if it names a charset";
    rq->refused_media_status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
  } else if (encoded(conn)) {
    rq->refused_media = "Content-Encoding is not supported: send the body as it is";
    rq->refused_media_status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE; /* RFC 9110 §15.5.16 */
  }
  return true;
}

/* What a request's headers decide, before any of its body is read: the route, the origin and
 * the caller. Queues the refusal (rq->answered) or fills rq->principal. */
enum MHD_Result http_admit(server *s, struct MHD_Connection *conn, const char *target,
                           const char *method, const char *version, request *rq) {
  rq->answered = true;
  headers_seen once = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, http_see_header, &once);
  /* "Content-Length : 5" is no length to libmicrohttpd, which would read the body as the next
   * request, whatever the route: it is refused (RFC 9112 §5.1), and what follows left unread
   * (as after any error: http_respond_with). */
  if (once.bad_name)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's name is not a token");
  if (once.bad_value)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's value holds a control character");
  if (once.framing_runs_on)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A header's name runs on from Content-Length or "
                                "Transfer-Encoding (a folded line?)");
  /* RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 (and would pass the Host check
   * against DNS rebinding below). */
  if (strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
      !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "Host is required");
  _cleanup_free_ char *authority = NULL;
  const char *url = NULL;
  int targeted = target_path(target, &url, &authority);
  if (targeted == TG_E_NOMEM) return MHD_NO;
  if (targeted < 0)
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "The request target names no host, or names a user");
  if (strcmp(url, "/healthz") == 0) /* libmicrohttpd sends no body to a HEAD */
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0
               ? http_respond(conn, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}", NULL,
                              NULL)
               : http_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL, "GET, HEAD");
  /* A repeated header about the message fails on a POST once its body names the request's
   * id, as 2026-07-28's (-32020) when that revision validates it. The others fail as HTTP's,
   * at once. */
  const char *revision = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "MCP-Protocol-Version");
  bool post = strcmp(method, "POST") == 0;
  for (size_t i = 0; i < HTTP_N_SINGLETONS; i++) {
    if (once.seen[i] < 2) continue;
    bool mcp = http_validated_by_2026(http_singletons[i], revision);
    if (post && i >= HTTP_FIRST_ABOUT_THE_MESSAGE) {
      if (!rq->repeated_header) {
        rq->repeated_header = http_singletons[i];
        rq->repeated_by_2026 = mcp;
      }
      continue;
    }
    char why[96];
    snprintf(why, sizeof why, "The %s header is given more than once", http_singletons[i]);
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST,
                                mcp ? TG_RPC_HEADER_MISMATCH : TG_RPC_INVALID_REQUEST, why);
  }
  /* A body framed two ways may be read one way here and another by a proxy in front (RFC
   * 9112 §6.1). One said to go past twice the bound is refused before it is read: an answer
   * queued before the body is read closes the connection after it, and a client still
   * sending may lose the answer to the reset. One within it is read and dropped (see
   * http_body_take), so that its 413 arrives whole. */
  const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
  const char *coding = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
  unsigned framing_status;
  const char *framing_fault = framing_refusal(length, coding, version, &framing_status);
  if (framing_fault)
    return http_queue_rpc_error(conn, framing_status, TG_RPC_INVALID_REQUEST, framing_fault);
  if (length && strtoull(length, NULL, 10) > 2ull * TG_RPC_MAX_BODY)
    return http_refuse_too_large(s, conn, NULL, NULL);
  /* A DELETE's body means nothing (RFC 9110 §9.3.5); refused, it holds nothing, so a DELETE
   * need not count among its caller's requests (below). */
  if (strcmp(method, "DELETE") == 0 && (coding || (length && strtoull(length, NULL, 10) > 0)))
    return http_queue_rpc_error(conn, MHD_HTTP_BAD_REQUEST, TG_RPC_INVALID_REQUEST,
                                "A DELETE takes no body");
  /* DNS rebinding: a page elsewhere must not reach a server on this machine (the checks
   * above concern the framing and the headers of any request, whatever its path). */
  _cleanup_free_ char *origin = NULL, *host = NULL;
  if (!http_header_value(conn, "Origin", &origin) || !http_header_value(conn, "Host", &host))
    return MHD_NO;
  if (!http_origin_ok(s, origin) || (s->loopback && !http_host_ok(s, authority ? authority : host)))
    return http_queue_rpc_error(conn, MHD_HTTP_FORBIDDEN, TG_RPC_INVALID_REQUEST,
                                "Forbidden origin or host");
  /* Only after that check: a page elsewhere learns nothing of this server, not even where it
   * serves. */
  if (strcmp(url, "/mcp") != 0)
    return http_queue_rpc_error(conn, MHD_HTTP_NOT_FOUND, TG_RPC_INVALID_REQUEST,
                                "Not found: MCP is served at /mcp");
  peer *p = http_peer_of(conn);
  caller who = http_authenticate(s, conn, http_peer_db(p), rq->principal, rq->token_hash);
  if (who != CALLER_KNOWN) return http_refuse_caller(s, conn, who);
  rq->checked_ms = tg_monotonic_ms();
  bool full = false;
  /* A known caller has a peer: its token was checked on the peer's database. A DELETE is
   * not counted: holding nothing (it has no body), it frees what the caller holds, so a
   * caller at its bound can always end a session. */
  if (!s->cfg->no_auth && strcmp(method, "DELETE") != 0 &&
      !(p->answering = http_request_begin(s, rq->principal, false, &full)))
    return full ? http_queue_rpc_error(conn, MHD_HTTP_TOO_MANY_REQUESTS, TG_RPC_INVALID_REQUEST,
                                       "Too many requests of this caller are answered at once; "
                                       "end one (a stream) or wait")
                : MHD_NO;
  if (!read_media(conn, method, rq)) return MHD_NO;
  rq->answered = false;
  return MHD_YES;
}

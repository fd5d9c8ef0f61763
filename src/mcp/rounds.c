/* 2026-07-28 multi round-trip requests. A handler's requestState comes back from the client,
 * so the server seals it: an HMAC under the workspace's key binds it to the principal, the
 * method, target and arguments, and an expiry. Altered, foreign or stale state is refused
 * before any handler sees it; any server of the workspace opens it, as the client's next
 * request may reach another. */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/status.h"

#define STATE_TTL_MS (10LL * 60 * 1000)

#define STATE_MAX 65536 /* bytes of what a state holds (state_body) */

#define SEALED_MAX (STATE_MAX + 128) /* and of the sealed state a client may send back */

/* Hex HMAC-SHA256 of the binding of a state of c's caller into out; false when it cannot be
 * computed. The arguments go in canonical form (keys sorted). */
static bool state_mac(const cx *c, const state_subject *subject, long long expiry,
                      const char *payload, char out[65]) {
  _cleanup_free_ char *args =
      subject->args ? json_dumps(subject->args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                    : strdup("{}");
  _cleanup_free_ char *msg = NULL;
  /* The form of what the state holds comes first: a server that reads another form refuses
   * the state instead of misreading it. */
  int n = args ? asprintf(&msg, "toolgate-state-2\n%s\n%s:%s\n%s\n%lld\n%s", c->req->principal_id,
                          subject->method, subject->name, args, expiry, payload)
               : -1;
  if (n < 0) return false;
  unsigned char mac[32];
  if (tg_hmac_sha256(c->srv->state_key, 64, msg, (size_t)n, mac) < 0) return false;
  tg_hex(mac, sizeof mac, out);
  return true;
}

/* "expiry.mac.payload" */
static json_t *state_seal(const cx *c, const state_subject *subject, const char *payload) {
  long long expiry = (long long)tg_now_ms() + STATE_TTL_MS;
  char mac[65];
  if (!state_mac(c, subject, expiry, payload, mac)) return NULL;
  _cleanup_free_ char *sealed = NULL;
  if (asprintf(&sealed, "%lld.%s.%s", expiry, mac, payload) < 0) return NULL;
  return json_string(sealed);
}

/* The payload of a sealed state (pointing into sealed), or NULL when it does not verify. */
static const char *state_open(const cx *c, const state_subject *subject, const char *sealed) {
  if (strlen(sealed) > SEALED_MAX) return NULL;
  /* The expiry as state_seal writes it, digits alone: a state has one form. */
  size_t digits = strspn(sealed, "0123456789");
  if (!digits || digits > 18 || sealed[0] == '0') return NULL;
  char *end = NULL;
  long long expiry = strtoll(sealed, &end, 10);
  if (*end != '.' || strlen(end + 1) < 65 || end[65] != '.') return NULL;
  if (expiry < (long long)tg_now_ms()) return NULL;
  char mac[65];
  if (!state_mac(c, subject, expiry, end + 66, mac)) return NULL;
  return tg_same_secret(mac, end + 1, 64) ? end + 66 : NULL;
}

/* What the state of an InputRequiredResult holds for the client to send back (compact JSON,
 * new; NULL without memory): the handler's own state, if any, and what each input request
 * asked, cut down to what its answer is checked against, so that a later request's answers
 * are checked with no memory of this one: {"asked":{key:{"method","params"}},"state"?}. */
static char *state_body(json_t *result) {
  json_t *asked = json_object();
  const char *key;
  json_t *request;
  json_object_foreach(asked ? json_object_get(result, "inputRequests") : NULL, key, request) {
    json_t *terms =
        tg_client_answer_terms(tg_json_str(request, "method"), json_object_get(request, "params"));
    if (!terms || json_object_set_new(asked, key, terms) < 0) {
      json_decref(asked);
      return NULL;
    }
  }
  json_t *state = json_object_get(result, "requestState");
  _cleanup_json_ json_t *body =
      asked ? json_pack("{s:o,s:O*}", "asked", asked, "state", json_is_string(state) ? state : NULL)
            : NULL;
  return body ? json_dumps(body, JSON_COMPACT) : NULL;
}

/* Whether the state of an InputRequiredResult fits in what a client may send back: 1, 0, or
 * TG_E_NOMEM. */
static int state_fits(json_t *result) {
  _cleanup_free_ char *body = state_body(result);
  return body ? strlen(body) <= STATE_MAX : TG_E_NOMEM;
}

/* The inputResponses of a request (an object; NULL when absent), or a JSON-RPC error code.
 * What each must be is for its reader to check (a task checks those it asked for itself). */
int mcp_read_responses(cx *c, json_t *params, json_t **responses) {
  *responses = json_object_get(params, "inputResponses");
  if (*responses && !json_is_object(*responses))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "inputResponses must be an object", NULL);
  return 0;
}

/* The inputResponses of a request that came without a requestState, which would say what
 * was asked (a client may answer before it was asked): each must read as the answer to a
 * request the client can answer (tg_client_unasked_answer_reads), and the handler judges
 * which it asked. *round as mcp_read_round's. */
static int read_unasked(cx *c, json_t *given, json_t **round) {
  const char *key;
  json_t *v;
  json_object_foreach(given, key, v) {
    if (!tg_client_unasked_answer_reads(c->caps, v))
      return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS,
                          "An input response answers no request this client can answer",
                          mcp_named("key", key));
  }
  *round = json_pack("{s:O*}", "answers", given);
  return *round ? 0 : TG_E_NOMEM;
}

/* Reads the retry fields of a 2026-07-28 request: its requestState, verified, and the
 * inputResponses to what that state says was asked, each checked against its request; answers
 * to anything else are ignored (without a state: read_unasked). *round (new) holds the
 * "answers" so checked and the handler's "state", if any. Returns 0 or a JSON-RPC error
 * code. */
int mcp_read_round(cx *c, json_t *params, const state_subject *subject, json_t **round) {
  json_t *sealed = json_object_get(params, "requestState"), *given;
  *round = NULL;
  /* 2025 revisions have neither field: there the server asks the client itself. */
  if (!c->modern) return 0;
  int r = mcp_read_responses(c, params, &given);
  if (r || !sealed) return r ? r : read_unasked(c, given, round);
  const char *text = json_string_value(sealed);
  const char *body = text ? state_open(c, subject, text) : NULL;
  _cleanup_json_ json_t *opened = body ? json_loads(body, 0, NULL) : NULL;
  json_t *asked = json_object_get(opened, "asked");
  if (!json_is_object(asked))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Invalid or expired requestState", NULL);
  json_t *answers = json_object();
  if (!answers || json_object_set_new(opened, "answers", answers) < 0) return TG_E_NOMEM;
  const char *key;
  json_t *request;
  json_object_foreach(asked, key, request) {
    json_t *answer = json_object_get(given, key);
    if (!answer) continue;
    if (!tg_client_answer_reads(tg_json_str(request, "method"), json_object_get(request, "params"),
                                answer))
      return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "An input response does not answer its request",
                          mcp_named("key", key));
    if (json_object_set(answers, key, answer) < 0) return TG_E_NOMEM;
  }
  *round = json_incref(opened);
  return 0;
}

int tg_mcp_input_refusal(bool carried, json_t *caps, json_t *result, int *code,
                         const char **message, json_t **data) {
  json_t *requests = json_object_get(result, "inputRequests");
  *data = NULL;
  *code = TG_RPC_INTERNAL_ERROR;
  if (!carried) {
    *message = "This request needs input its client can give only on protocol 2026-07-28, "
               "or through a 2025 connection that can ask it (the tool may not wait on its "
               "client, or the request cannot stream)";
    return 1;
  }
  *message = "The tool asked for no input, or for an unknown kind of input";
  if (!json_object_size(requests)) return 1;
  json_t *missing = json_object();
  if (!missing) return TG_E_NOMEM;
  const char *key;
  json_t *req;
  json_object_foreach(requests, key, req) {
    const char *method = json_string_value(json_object_get(req, "method"));
    json_t *params = json_object_get(req, "params");
    _cleanup_json_ json_t *need = NULL;
    int r = tg_client_requirement(method, params, &need);
    if (r == 0 && !tg_client_can(caps, method, params) &&
        json_object_update_recursive(missing, need) < 0)
      r = TG_E_NOMEM;
    if (r < 0) {
      json_decref(missing);
      return r == TG_E_INVAL ? 1 : r;
    }
  }
  if (!json_object_size(missing)) {
    json_decref(missing);
    return 0;
  }
  *code = TG_RPC_MISSING_CAPABILITY;
  *message = "Missing required client capability";
  *data = json_pack("{s:o}", "requiredCapabilities", missing);
  return *data ? 1 : TG_E_NOMEM;
}

/* Whether what an InputRequiredResult asks goes to this 2025 request's client as requests of
 * their own (see mcp_next_round): its transport can ask, and the tool (NULL: a prompt) is one
 * that may wait on its client. */
bool mcp_asks_inputs(const cx *c, const tg_tool *tool) {
  return !c->modern && c->req->io && c->req->io->ask &&
         (!tool || tool->flags & TG_TOOL_INTERACTIVE);
}

/* Seals the state of an InputRequiredResult a handler returned (checked already: see
 * channel_check_result) for the client to send back. */
int mcp_seal_input_required(cx *c, const state_subject *subject, json_t *result) {
  _cleanup_free_ char *body = state_body(result);
  json_t *sealed = body ? state_seal(c, subject, body) : NULL;
  return sealed && json_object_set_new(result, "requestState", sealed) == 0 ? 0 : TG_E_NOMEM;
}

/* Whether this request's client can be given the InputRequiredResult of tool (NULL: a
 * prompt's), as tg_mcp_input_refusal says; on 2026-07-28 its state must also fit in what the
 * client may send back. */
int mcp_input_refusal(cx *c, const tg_tool *tool, json_t *result, int *code,
                      const char **message, json_t **data) {
  int r = tg_mcp_input_refusal(c->modern || mcp_asks_inputs(c, tool), c->caps, result, code,
                               message, data);
  if (r != 0 || !c->modern) return r;
  if ((r = state_fits(result)) != 0) return r < 0 ? r : 0;
  *code = TG_RPC_INTERNAL_ERROR;
  *message = "The input asked for, with the request's state, is too large to be sent back";
  *data = json_pack("{s:i}", "max", STATE_MAX);
  return *data ? 1 : TG_E_NOMEM;
}

/* Serves an InputRequiredResult nothing was written for (a prompt's): refused as
 * mcp_input_refusal says, else with its state sealed. Returns 0 (result ready), a JSON-RPC error
 * code, or TG_E_NOMEM. */
int mcp_finish_input_required(cx *c, const state_subject *subject, json_t *result) {
  int code;
  const char *message;
  json_t *data;
  int r = mcp_input_refusal(c, NULL, result, &code, &message, &data);
  if (r == 1) return mcp_rpc_fail(c, code, message, data);
  return r < 0 ? r : mcp_seal_input_required(c, subject, result);
}

bool tg_mcp_is_input_required(json_t *result) {
  const char *type = json_string_value(json_object_get(result, "resultType"));
  return type && strcmp(type, "input_required") == 0;
}

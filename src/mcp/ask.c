#include "mcp/ask.h"

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* The notifications/cancelled that withdraws ask, a question no call waits for any more
 * (timed_out: its time ran out). NULL when out of memory. */
static json_t *withdrawal(const json_t *ask, bool timed_out) {
  return tg_rpc_notification(
      "notifications/cancelled",
      json_pack("{s:O,s:s}", "requestId", json_object_get(ask, "id"), "reason",
                timed_out ? "No answer came in time" : "The call no longer waits for it"));
}

/* Whether the call can wait no more: its client can answer no more, or it was cancelled. */
static bool stopped_locked(const tg_mcp_asker *asker) {
  /* Looked for under the lock, which the cancellation's wake takes to broadcast changed:
   * one that comes after this look finds the wait that follows. */
  return asker->gone_locked(asker->self) ||
         tg_mcp_inflight_cancelled(asker->inflight, asker->call_id);
}

int tg_mcp_ask(tg_mcp_questions *asks, const tg_mcp_asker *asker, json_t *request,
               json_t **ret) {
  pthread_mutex_lock(asks->lock);
  /* No question goes to a client known to be gone, or for a call no longer waiting. */
  bool stopped = stopped_locked(asker);
  tg_mcp_question *slot = NULL;
  for (size_t i = 0; i < asks->n && !slot && !stopped; i++)
    if (!asks->at[i].id) slot = &asks->at[i];
  if (slot) slot->id = json_incref(json_object_get(request, "id"));
  pthread_mutex_unlock(asks->lock);
  if (!slot) {
    json_decref(request);
    return stopped ? TG_E_IO : TG_E_TOO_LARGE;
  }
  _cleanup_json_ json_t *asked = json_incref(request); /* to withdraw it */
  int r = asker->send(asker->self, request);
  bool sent = r == 0, timed_out = false;
  int64_t deadline = tg_monotonic_ms() + asker->timeout_ms;
  pthread_mutex_lock(asks->lock);
  for (int64_t left; r == 0 && !slot->response;) {
    if (stopped_locked(asker)) {
      r = TG_E_IO;
    } else if ((left = deadline - tg_monotonic_ms()) <= 0) {
      r = TG_E_IO;
      timed_out = true;
    } else {
      tg_timed_wait(asks->changed, asks->lock, left);
    }
  }
  if (r == 0) *ret = slot->response;
  else json_decref(slot->response);
  slot->response = NULL;
  json_decref(slot->id);
  slot->id = NULL;
  pthread_mutex_unlock(asks->lock);
  if (timed_out)
    tg_log(TG_LOG_WARN, "mcp: the client did not answer within %lld ms",
           (long long)asker->timeout_ms);
  /* Withdrawn as well when the client went (its session ended, its token revoked, the
   * server stopping): what carried the question may still carry this. The call fails
   * anyway: a withdrawal that cannot go out changes nothing. */
  if (sent && r != 0) asker->send(asker->self, withdrawal(asked, timed_out));
  return r;
}

int tg_mcp_answer(tg_mcp_questions *asks, const tg_rpc_msg *msg) {
  /* A copy of its own for the thread waiting: jansson's counts order no free after another
   * thread's reads. Made before the lock, which the transport's other work takes. */
  json_t *response = json_deep_copy(msg->root);
  if (!response) return TG_E_NOMEM;
  pthread_mutex_lock(asks->lock);
  tg_mcp_question *answered = NULL;
  size_t matched = 0;
  for (size_t i = 0; i < asks->n; i++) {
    tg_mcp_question *q = &asks->at[i];
    if (q->id && !q->response && (msg->id ? json_equal(q->id, msg->id) : msg->error != NULL)) {
      answered = q;
      matched++;
    }
  }
  bool taken = matched == 1;
  if (taken) answered->response = TAKE_PTR(response);
  pthread_cond_broadcast(asks->changed);
  pthread_mutex_unlock(asks->lock);
  json_decref(response);
  return taken;
}

int tg_mcp_answer_unreadable(tg_mcp_questions *asks, json_t *id, const json_t *refusal) {
  _cleanup_json_ json_t *answer =
      tg_rpc_error(id, TG_RPC_INVALID_REQUEST, "The client's answer could not be read",
                   json_pack("{s:O*}", "refusal", json_object_get(refusal, "error")));
  tg_rpc_msg msg;
  json_t *ignored = NULL;
  int r = answer && tg_rpc_decode_element(answer, &msg, &ignored) == 0 ? TG_OK : TG_E_NOMEM;
  json_decref(ignored);
  if (r < 0) return r;
  r = tg_mcp_answer(asks, &msg);
  tg_rpc_msg_done(&msg);
  return r;
}

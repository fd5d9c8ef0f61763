/* Questions a call puts to its client (elicitation, sampling) and the answers that come back,
 * for either transport: the transport sends and receives; asking, waiting, matching an
 * answer to its question and withdrawing a question no one waits for any more are here. */
#pragma once
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp/inflight.h"
#include "mcp/jsonrpc.h"

/* A question: the id of the server's request (NULL: the place is free), and the client's
 * response once it came. */
typedef struct tg_mcp_question {
  json_t *id;
  json_t *response;
} tg_mcp_question;

/* A transport's questions (n places), guarded by its lock; changed is broadcast under lock
 * when an answer comes, when the client can answer no more, and when a call is cancelled. */
typedef struct tg_mcp_questions {
  pthread_mutex_t *lock;
  pthread_cond_t *changed;
  tg_mcp_question *at;
  size_t n;
} tg_mcp_questions;

/* One call asking: how the question goes out, and when to stop waiting. */
typedef struct tg_mcp_asker {
  void *self;
  int (*send)(void *self, json_t *msg);  /* msg is stolen */
  bool (*gone_locked)(void *self);        /* the client can answer no more (under the lock) */
  tg_mcp_inflight *inflight;              /* where the call's cancellation shows */
  json_t *call_id;
  int64_t timeout_ms;
} tg_mcp_asker;

/* Sends request (stolen) in a free place of asks and waits for the response (*ret, a new
 * reference). TG_E_TOO_LARGE when every place waits already; TG_E_IO when the client can
 * answer no more or the call was cancelled (before: nothing is sent), or when it could not be
 * sent or timeout_ms passed: a request sent is then withdrawn (notifications/cancelled), so
 * that the client stops showing it. */
int tg_mcp_ask(tg_mcp_questions *asks, const tg_mcp_asker *asker, json_t *request,
               json_t **ret);

/* Hands msg, a response from the client, to the question it answers: the one whose id it
 * names or, for an error naming no request (its client could not read one), the question
 * waiting when only one does. A question answered already takes no second. 1 when one took
 * it, 0 when none waits for it, TG_E_NOMEM. */
int tg_mcp_answer(tg_mcp_questions *asks, const tg_rpc_msg *msg);

/* A message from the client that could not be decoded (refused with refusal) but names id,
 * that of a question: the question gets an error for it, so that its call fails at once
 * instead of waiting out its time. Returns as tg_mcp_answer. */
int tg_mcp_answer_unreadable(tg_mcp_questions *asks, json_t *id, const json_t *refusal);

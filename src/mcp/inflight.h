/* The requests of one connection or session that have not been answered yet, so that the
 * client's notifications/cancelled can reach them. Thread-safe: a request may be served on
 * one thread while its cancellation arrives on another. Knows nothing of transports. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

typedef struct tg_mcp_inflight tg_mcp_inflight;

/* wake(arg), when not NULL, runs after each cancellation, outside the table's lock: a
 * transport waiting for the client's answer on a condition of its own looks again. */
int tg_mcp_inflight_new(void (*wake)(void *arg), void *arg, tg_mcp_inflight **ret);
void tg_mcp_inflight_free(tg_mcp_inflight *t);

/* A request starts being served (0, or TG_E_NOMEM) and stops; _end tells whether it was
 * cancelled meanwhile, in which case it must not be answered. Begun again while an entry of
 * it stands (a transport holds one while the request waits for a thread), it starts
 * cancelled if that one was. */
int tg_mcp_inflight_begin(tg_mcp_inflight *t, json_t *id);
bool tg_mcp_inflight_end(tg_mcp_inflight *t, json_t *id);

/* Marks the request id cancelled; false when no such request is being served (unknown or
 * already answered: the cancellation is then ignored). */
bool tg_mcp_inflight_cancel(tg_mcp_inflight *t, json_t *id);
/* Marks every request in t cancelled (their client is gone), and every one begun after, which
 * a transport may have read before and registers only now; wakes no one: for a caller that
 * holds what the wake function would take, and wakes the waiters itself. */
void tg_mcp_inflight_cancel_all(tg_mcp_inflight *t);
bool tg_mcp_inflight_cancelled(tg_mcp_inflight *t, json_t *id);
/* Whether a request of id is being served (cancelled or not). */
bool tg_mcp_inflight_holds(tg_mcp_inflight *t, json_t *id);

/* Why a transport refuses a request whose id names one not ended yet (its client reused the
 * id, which JSON-RPC forbids within a session): a cancellation naming the id could not tell
 * the two apart, nor could the table, which would take a cancelled one's end for both. */
#define TG_MCP_INFLIGHT_REUSED_ID                                                          \
  "The id names a request still being served or cancelled, or another of the batch: give the " \
  "new request an id of its own"


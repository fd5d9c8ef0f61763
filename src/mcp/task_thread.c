/* MCP tasks: the task's thread, which runs its rounds through tg_call, and what its handler
 * sees of the task through the call's client channel. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/jsonrpc.h"
#include "mcp/server.h"
#include "mcp/tasks_internal.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

/* A running task's row: the task as shown (the arg of the jobs below). */
typedef struct task_row {
  const task *k;
  json_t *shown;
} task_row;

/* The row of k, as it began, before its client learns its id (the job of tg_db_batch). */
static int keep_beginning(void *arg, tg_db *db) {
  const task_row *b = arg;
  return tg_db_exec(db,
                    "INSERT INTO mcp_running_tasks (id, principal_id, task, runner, tool, run_id)"
                    " VALUES ($1, $2, $3, $4, $5, $6)",
                    json_pack("[s,s,O,s,s,s?]", b->k->id, b->k->principal, b->shown,
                              b->k->store->runner, b->k->tool->name, b->k->run_id),
                    NULL);
}

/* The row of a task as it now stands (its status changed while it runs): another server
 * shows it so. */
static int keep_standing(void *arg, tg_db *db) {
  const task_row *s = arg;
  return tg_db_exec(db, "UPDATE mcp_running_tasks SET task = $2 WHERE id = $1",
                    json_pack("[s,O]", s->k->id, s->shown), NULL);
}

/* Writes k's row as shown (k as it stands, made under the store's lock; stolen), on k's own
 * thread, so that its rows are written in the order its status changed. A failure leaves the
 * row as it was, which another server then shows; it is logged. */
static void show_standing(task *k, tg_db *db, json_t *shown) {
  task_row s = {k, shown};
  if (!shown || tg_db_batch(db, keep_standing, &s) < 0)
    tg_log(TG_LOG_WARN, "mcp: how task %s stands could not be written for other servers: %s",
           k->id, shown ? tg_db_errmsg(db) : "out of memory");
  json_decref(shown);
}

/* ---- what the handler sees (tg_client_channel.self is the task) ---- */

/* A progress message becomes the task's statusMessage. */
static void tell_status(task *k, const char *message) {
  char *copy = message ? strndup(message, tg_utf8_prefix(message, TG_MCP_TASK_STATUS_MAX)) : NULL;
  if (!copy) return;
  pthread_mutex_lock(&k->store->lock);
  free(k->status_message);
  k->status_message = copy;
  mcp_task_stamp_locked(k);
  mcp_tasks_unlock_publishing(k->store);
}

static int task_notify(void *self, const char *method, json_t *params) {
  task *k = self;
  /* Before its handler detached, the call is its request's: what it tells goes there. */
  if (!k->visible && k->start_notify) return k->start_notify(k->start_arg, method, params);
  /* A task has no request stream: the client learns of it through the task itself, and
   * of a list change through the watches checked for its principal. */
  if (!tg_mcp_watch_touch(method, k->principal) && strcmp(method, "notifications/progress") == 0)
    tell_status(self, tg_json_str(params, "message"));
  json_decref(params);
  return TG_OK;
}

/* Whether k was asked to stop, which its handler then knows (see settle_locked). */
static bool cancel_heard_locked(task *k) {
  k->heard_cancel |= k->cancel;
  return k->cancel;
}

static int task_detach(void *self) {
  task *k = self;
  tg_mcp_tasks *t = k->store;
  pthread_mutex_lock(&t->lock);
  if (k->cancel || k->visible) {
    int r = cancel_heard_locked(k) ? TG_E_IO : TG_OK;
    pthread_mutex_unlock(&t->lock);
    return r;
  }
  /* Its row first: the client may poll another server, or this one may crash (see
   * task_runners.c). A cancel that comes meanwhile reaches the task once it is one. */
  int r = t->runner_fd >= 0 ? TG_OK : mcp_tasks_take_runner_lock(t);
  task_row b = {.k = k, .shown = r == TG_OK ? mcp_task_json_locked(k, k->status, true) : NULL};
  pthread_mutex_unlock(&t->lock);
  if (r == TG_OK && !b.shown) r = TG_E_NOMEM;
  if (r == TG_OK && (r = tg_db_batch(k->thread_db, keep_beginning, &b)) < 0)
    tg_log(TG_LOG_WARN, "mcp: a call could not become a task: %s", tg_db_errmsg(k->thread_db));
  json_decref(b.shown);
  if (r < 0) return r;
  pthread_mutex_lock(&t->lock);
  k->visible = true;
  mcp_task_touch_locked(k, WORKING);
  mcp_tasks_unlock_publishing(t);
  return TG_OK;
}

/* A round's result the client cannot be given fails the round before it commits: as the
 * request that started the call answers it while no client knows the task; once one does,
 * the task fails with the JSON-RPC error (see settle_locked). Only this thread sets
 * k->visible and k->refusal. */
static int task_check_result(void *self, tg_call_ctx *cx, json_t *result) {
  task *k = self;
  if (!k->visible) return k->start_check ? k->start_check(k->start_arg, cx, result) : TG_OK;
  if (!tg_mcp_is_input_required(result)) return TG_OK;
  int code;
  const char *message;
  json_t *data;
  int r = tg_mcp_input_refusal(true, k->caps, result, &code, &message, &data);
  if (r != 1) return r;
  json_decref(k->refusal);
  k->refusal = tg_rpc_error_object(code, message, json_incref(data));
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, data, "%s", message);
}

static bool task_cancelled(void *self) {
  task *k = self;
  pthread_mutex_lock(&k->store->lock);
  bool cancelled = cancel_heard_locked(k);
  pthread_mutex_unlock(&k->store->lock);
  return cancelled;
}

static bool task_cancel_heard(void *self) {
  task *k = self;
  pthread_mutex_lock(&k->store->lock);
  bool heard = k->heard_cancel;
  pthread_mutex_unlock(&k->store->lock);
  return heard;
}

/* ---- the task's thread ---- */

/* Decides how k ends (s terminal): clients see it once it is written (see
 * mcp_tasks_keep_ends_locked). */
static void end_as_locked(task *k, task_status s) { k->ends_as = s; }

static void fail_locked(task *k, json_t *error) {
  k->error = error ? error : tg_rpc_error_object(TG_RPC_INTERNAL_ERROR, "Internal error", NULL);
  end_as_locked(k, FAILED);
}

/* Parks the task on the InputRequiredResult its handler returned (the client can give what
 * it asks: see task_check_result): its requests go to the client under keys unique over the
 * task's life. false when the task failed instead. */
static bool park_locked(task *k, json_t *result) {
  json_t *requests = json_object_get(result, "inputRequests");
  const char *state = json_string_value(json_object_get(result, "requestState"));
  json_t *pending = json_object(), *answers = json_object(), *keys = json_object();
  char *state_copy = state ? strdup(state) : NULL;
  bool ok = pending && answers && keys && (!state || state_copy);
  k->round++;
  const char *key;
  json_t *request;
  json_object_foreach(requests, key, request) {
    char *minted = NULL;
    ok = ok && asprintf(&minted, "r%u.%s", k->round, key) >= 0 &&
         json_object_set(pending, minted, request) == 0 &&
         json_object_set_new(keys, minted, json_string(key)) == 0;
    free(minted);
  }
  if (!ok) {
    json_decref(pending);
    json_decref(answers);
    json_decref(keys);
    free(state_copy);
    fail_locked(k, NULL);
    return false;
  }
  /* The round in the keys keeps them unique over the task's life: an earlier round's are
   * never pending again. */
  json_decref(k->pending);
  json_decref(k->answers);
  json_decref(k->keys);
  free(k->state);
  k->pending = pending;
  k->answers = answers;
  k->keys = keys;
  k->state = state_copy;
  mcp_task_touch_locked(k, INPUT_REQUIRED);
  return true;
}

/* Records where a round of a detached task ended (result: its CallToolResult, stolen; NULL
 * when it has none): true when it waits for input, else its end is decided. */
static bool settle_locked(task *k, int status, tg_call_result *res, json_t *result) {
  json_t *refusal = k->refusal;
  k->refusal = NULL;
  bool asks = status == TG_OK && result && tg_mcp_is_input_required(result);
  /* Asked to stop, it ends cancelled, unless what the round returned stands: a result (one
   * the gate queued for commit before the cancel came: after, it fails the call), or a
   * failure of a handler that never learnt of the cancel (one that did gave up). */
  bool gave_up = k->cancel && (!result || asks || (status != TG_OK && k->heard_cancel));
  bool parked = false;
  if (gave_up) {
    k->ended_waiting = asks; /* the round's row says ok: the end has a row of its own */
    end_as_locked(k, CANCELLED);
  } else if (refusal) {
    fail_locked(k, refusal);
    refusal = NULL;
  } else if (!result) {
    fail_locked(k, NULL);
  } else if (status == TG_E_TOOL && res->code == TG_ERR_INTERNAL_ERROR) {
    /* The tool failed unexpectedly: a protocol-level failure, not a tool's answer. */
    fail_locked(k, tg_rpc_error_object(TG_RPC_INTERNAL_ERROR, "Internal error",
                                       json_incref(json_object_get(res->value, "error"))));
  } else if (asks) {
    parked = park_locked(k, result);
  } else {
    k->result = json_incref(result);
    end_as_locked(k, COMPLETED);
  }
  json_decref(result);
  json_decref(refusal);
  return parked;
}

/* Waits for the answers to a parked task; true when they all came, else it ends cancelled. */
static bool await_input_locked(task *k) {
  int64_t deadline = tg_monotonic_ms() + TG_MCP_TASK_INPUT_WAIT_MS;
  if (k->store->no_input && !k->cancel) k->cancel = k->stopped = true; /* none can come */
  for (int64_t left; json_object_size(k->pending) && !k->cancel;) {
    if ((left = deadline - tg_monotonic_ms()) <= 0) break;
    tg_timed_wait(&k->store->changed, &k->store->lock, left);
  }
  if (json_object_size(k->pending) || k->cancel) {
    k->unanswered = !k->cancel;
    k->ended_waiting = true;
    end_as_locked(k, CANCELLED);
    return false;
  }
  if (k->status != WORKING) mcp_task_touch_locked(k, WORKING);
  return true;
}

/* k's end was decided while the store's lock was held, which this releases: its thread
 * writes it on db (see mcp_tasks_keep_ends_locked), and is then done with the task. */
static void end_locked(task *k, tg_db *db) {
  mcp_tasks_keep_ends_locked(k->store, db, &k, 1);
  k->running = false;
  k->thread_db = NULL;
  mcp_tasks_unlock_publishing(k->store);
}

void (*_Atomic tg_mcp_tasks_test_ended)(void);

static void *task_main(void *arg) {
  task *k = arg;
  tg_mcp_tasks *t = k->store;
  /* The thread owns the connection from here; the task may go before the thread ends. */
  tg_env env = t->base;
  env.db = k->thread_db = k->db;
  k->db = NULL;
  for (;;) {
    /* The first round, until its handler detaches, with its request's progress token and
     * log level (see task_notify). */
    bool first = !k->visible;
    tg_client_channel channel = {
        .self = k,
        .capabilities = k->caps,
        .progress_token = first && k->start_progress_token ? k->start_progress_token
                                                           : t->progress_token,
        .log_level = first ? k->start_log_level : NULL,
        .input_responses = k->answers,
        .request_state = k->state,
        .notify = task_notify,
        .detach = task_detach,
        .cancelled = task_cancelled,
        .cancel_heard = task_cancel_heard,
        .check_result = task_check_result,
    };
    /* The request that started the task counted against its caller's rate (mcp_tools_call);
     * its rounds are answers to it. */
    tg_call_request call = {.principal_id = k->principal, .surface = TG_SURFACE_MCP,
                            .tool = k->tool->name, .args = k->args, .client = &channel,
                            .task_id = k->id, .run_id = k->run_id, .rate_counted = true};
    tg_call_result res;
    int r = tg_call(&env, &call, &res);
    /* Only this thread makes the task visible (the handler detaches on it). */
    bool ran = k->visible && (r == TG_OK || r == TG_E_TOOL) && res.value;
    json_t *result = ran ? tg_mcp_tool_result(k->tool, r, res.value) : NULL;
    pthread_mutex_lock(&t->lock);
    if (!k->visible) {
      /* Never a task: the starter answers with the outcome and frees the task. */
      k->ended = true;
      k->outcome = r;
      k->res = res;
      k->thread_db = NULL;
      pthread_cond_broadcast(&t->changed);
      pthread_mutex_unlock(&t->lock);
      break;
    }
    bool parked = settle_locked(k, r, &res, result);
    tg_call_result_done(&res);
    if (parked) {
      json_t *asking = mcp_task_json_locked(k, k->status, true);
      mcp_tasks_unlock_publishing(t); /* observers hear where the round ended before it waits */
      show_standing(k, env.db, asking);
      pthread_mutex_lock(&t->lock);
    }
    if (!parked || !await_input_locked(k)) {
      end_locked(k, env.db);
      break;
    }
    json_t *resumed = mcp_task_json_locked(k, k->status, true);
    mcp_tasks_unlock_publishing(t);
    show_standing(k, env.db, resumed);
  }
  tg_db_close(env.db);
  pthread_mutex_lock(&t->lock);
  t->running--;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  void (*ended)(void) = tg_mcp_tasks_test_ended;
  if (ended) ended();
  return NULL;
}

/* Gives the task its database connection and its thread. */
int mcp_task_launch(tg_mcp_tasks *t, task *k) {
  _cleanup_free_ char *why = NULL;
  int r = tg_db_open(t->data_dir, &k->db, &why);
  if (r < 0) {
    tg_log(TG_LOG_WARN, "mcp: a task could not open the database: %s", why ? why : "out of memory");
    return r;
  }
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&thread, &attr, task_main, k) != 0) r = TG_E_NOMEM;
  pthread_attr_destroy(&attr);
  return r;
}

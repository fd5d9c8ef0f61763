#define _GNU_SOURCE
#include "mcp/tasks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/principal.h"
#include "mcp/jsonrpc.h"
#include "mcp/server.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

/* How often a starter waiting for its call looks whether its own request was cancelled. */
#define START_CHECK_MS 50
#define TASK_ID_LEN 32 /* hex digits: 128 random bits */
/* In the data directory: a lock file for each server that runs tasks (see "runners"). */
#define RUNNERS_DIR "task-runners"
#define RUNNER_GONE_MESSAGE "The server running the task stopped before it ended"
#define STOPPED_MESSAGE "The server stopped before the task ended"
#define UNANSWERED_MESSAGE "No answer to its input requests came in time"
#define REVOKED_MESSAGE "The token that started the task was revoked"
#define UNBORN_AFTER_S 60 /* a lock file not renamed into place by then was left by a crash */

typedef enum task_status { WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED } task_status;
static const char *const status_names[] = {"working", "input_required", "completed", "failed",
                                           "cancelled"};

typedef struct task {
  struct task *next;
  tg_mcp_tasks *store;
  char id[TASK_ID_LEN + 1]; /* the id is all a client needs to reach the task */
  char principal[TG_UUID_LEN + 1];
  char token_hash[TG_TOKEN_HASH_LEN + 1]; /* of the token that started it; "": none */
  char *run_id; /* the running run its rounds attach to; NULL: each its own */
  const tg_tool *tool;
  json_t *args, *caps; /* what its rounds run with, dropped once it ended */
  tg_db *db; /* the thread's, opened by the starter */
  tg_db *thread_db; /* the same, for its handler's detach, while the thread runs it */
  bool starting; /* its starter waits for it */
  bool visible;  /* the handler detached: the client knows the id */
  bool running;  /* its thread still uses it */
  bool cancel;
  bool heard_cancel; /* its handler learnt of cancel: a failure is then its giving up */
  bool stopped;  /* cancelled by the server's stop, not by its client */
  bool revoked;  /* cancelled as the token that started it was revoked */
  bool unanswered; /* cancelled as its input did not come in time */
  bool ended_waiting; /* ended as it waited for (or asked for) input: no call of it ran to
                       * audit its end */
  /* Observers that watch it and were not told its end yet: it stays in memory for them,
   * which find what they watch there only. */
  unsigned unseen_by;
  bool read;     /* the client read how it ended, or need not: it cancelled it */
  bool writing;  /* a thread writes its end to the database now */
  /* status is what clients see: terminal only once the database keeps how it ended, so
   * that it never changes after. ends_as is that end once decided (terminal; WORKING
   * before), and ends_at (wall clock, ms) its lastUpdatedAt, stamped as it is written. */
  task_status status, ends_as;
  char *status_message; /* the handler's last progress message in this status */
  int64_t created, updated, ends_at; /* wall clock (ms), for the client */
  int64_t touched;          /* monotonic (ms): when it expires */
  uint64_t seq;             /* the order of the last changes, for eviction */
  /* Input: the requests not answered yet (request key → request), each request key's key
   * in the handler's InputRequiredResult, and the answers and requestState the next round
   * runs with (the first round's come from the request that started the call). */
  unsigned round;
  json_t *pending, *keys, *answers;
  char *state;
  json_t *result; /* it ends COMPLETED: the CallToolResult */
  json_t *error;  /* it ends FAILED: the JSON-RPC error object */
  /* The JSON-RPC error object failing the round that returned input the client cannot give
   * (task_check_result), for settle_locked; and the check of the request that starts the
   * call, while no client knows the task (tg_mcp_task_call). */
  json_t *refusal;
  int (*start_check)(void *arg, tg_call_ctx *cx, json_t *result);
  int (*start_notify)(void *arg, const char *method, json_t *params);
  json_t *start_progress_token; /* copies: the first round's channel outlives the request */
  char *start_log_level;
  void *start_arg;
  /* The call ended before the handler detached: its outcome, which the starter takes. */
  bool ended;
  int outcome;
  tg_call_result res;
} task;

struct tg_mcp_task_observer {
  tg_mcp_task_observer *next;
  tg_mcp_tasks *store;
  char principal[TG_UUID_LEN + 1];
  tg_mcp_task_deliver deliver;
  void *self;
  bool observed;
  size_t n;
  struct {
    char id[TASK_ID_LEN + 1];
    uint64_t seen; /* the task's seq when it was last delivered */
    bool told_end; /* its end was delivered (see task.unseen_by) */
  } watched[TG_MCP_MAX_TASKS]; /* a principal holds no more */
  /* Named tasks this server does not hold, ended as the database keeps them: told once. */
  size_t n_ended;
  json_t *ended[TG_MCP_MAX_TASKS];
};

struct tg_mcp_tasks {
  tg_env base; /* the tasks' environment but for the database connection */
  char *data_dir, *public_url;
  json_t *progress_token; /* what a task's handler is given: its progress stays here */
  pthread_mutex_t lock;
  pthread_cond_t changed; /* a task changed: broadcast */
  task *list;
  unsigned running; /* threads */
  uint64_t seq;
  /* A task changed since observers last heard: whose (empty: several principals'). */
  bool unpublished;
  char news_of[TG_UUID_LEN + 1];
  bool stopping;
  bool no_input; /* the server stops: no input can come to a task any more */
  /* Once it ran a task: its name as a runner and its lock file (-1 before), and whether it
   * wrote as failed the tasks of runners that were gone. */
  char runner[TASK_ID_LEN + 1];
  int runner_fd;
  bool swept;
  /* Taken before lock, held while observers are told: so they hear of each task's changes
   * in order. */
  pthread_mutex_t observing;
  tg_mcp_task_observer *observers;
};

int tg_mcp_tasks_new(const tg_env *base, tg_mcp_tasks **ret) {
  tg_mcp_tasks *t = calloc(1, sizeof *t);
  if (!t || !(t->data_dir = strdup(base->data_dir)) ||
      (base->public_url && !(t->public_url = strdup(base->public_url))) ||
      !(t->progress_token = json_string("task"))) {
    if (t) {
      free(t->data_dir);
      free(t->public_url);
    }
    free(t);
    return TG_E_NOMEM;
  }
  t->base = (tg_env){.registry = base->registry, .data_dir = t->data_dir,
                     .public_url = t->public_url};
  t->runner_fd = -1;
  pthread_mutex_init(&t->lock, NULL);
  pthread_mutex_init(&t->observing, NULL);
  pthread_cond_init(&t->changed, NULL);
  *ret = t;
  return 0;
}

/* What a task ran with, once it ended: only its outcome is kept. */
static void drop_inputs(task *k) {
  json_decref(k->args);
  json_decref(k->caps);
  json_decref(k->pending);
  json_decref(k->keys);
  json_decref(k->answers);
  free(k->state);
  k->args = k->caps = k->pending = k->keys = k->answers = NULL;
  k->state = NULL;
}

static void task_free(task *k) {
  drop_inputs(k);
  json_decref(k->result);
  json_decref(k->error);
  json_decref(k->refusal);
  json_decref(k->start_progress_token);
  free(k->start_log_level);
  free(k->run_id);
  free(k->status_message);
  tg_call_result_done(&k->res);
  if (k->db) tg_db_close(k->db);
  free(k);
}

static void unlink_locked(tg_mcp_tasks *t, task *k) {
  for (task **p = &t->list; *p; p = &(*p)->next)
    if (*p == k) {
      *p = k->next;
      return;
    }
}

static bool terminal(task_status s) { return s == COMPLETED || s == FAILED || s == CANCELLED; }

static void leave_runners(tg_mcp_tasks *t);

void tg_mcp_tasks_cancel_left(tg_mcp_tasks *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  t->stopping = true;
  for (task *k = t->list; k; k = k->next) {
    /* Its end says the stop cut it, unless its client cancelled it or its end is decided;
     * one tg_mcp_tasks_stopping cancelled keeps saying so, and a second call changes nothing. */
    k->stopped = k->stopped || (!k->cancel && !terminal(k->ends_as));
    k->cancel = true;
  }
  pthread_cond_broadcast(&t->changed);
  while (t->running) pthread_cond_wait(&t->changed, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

void tg_mcp_tasks_free(tg_mcp_tasks *t) {
  if (!t) return;
  tg_mcp_tasks_cancel_left(t);
  leave_runners(t);
  while (t->list) {
    task *k = t->list;
    t->list = k->next;
    task_free(k);
  }
  pthread_cond_destroy(&t->changed);
  pthread_mutex_destroy(&t->observing);
  pthread_mutex_destroy(&t->lock);
  json_decref(t->progress_token);
  free(t->data_dir);
  free(t->public_url);
  free(t);
}

/* Its thread runs a round of it, or writes its end: not waiting for input. */
static bool at_work(const task *k) { return k->running && !json_object_size(k->pending); }

void tg_mcp_tasks_stopping(tg_mcp_tasks *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  t->no_input = true;
  for (task *k = t->list; k; k = k->next)
    if (k->running && json_object_size(k->pending) && !k->cancel && !terminal(k->ends_as))
      k->cancel = k->stopped = true;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

unsigned tg_mcp_tasks_await(tg_mcp_tasks *t, int64_t deadline) {
  unsigned n = 0;
  if (!t) return n;
  pthread_mutex_lock(&t->lock);
  for (int64_t left;;) {
    n = 0;
    for (task *k = t->list; k; k = k->next) n += at_work(k);
    if (!n || (left = deadline - tg_monotonic_ms()) <= 0) break;
    tg_timed_wait(&t->changed, &t->lock, left); /* a task parks or its thread ends: broadcast */
  }
  pthread_mutex_unlock(&t->lock);
  return n;
}

/* Records that k changed: for its lastUpdatedAt, its expiry, eviction and its observers. */
static void stamp_locked(task *k) {
  tg_mcp_tasks *t = k->store;
  k->updated = tg_now_ms();
  k->touched = tg_monotonic_ms();
  k->seq = ++t->seq;
  if (!t->unpublished) snprintf(t->news_of, sizeof t->news_of, "%s", k->principal);
  else if (strcmp(t->news_of, k->principal) != 0) t->news_of[0] = '\0';
  t->unpublished = true;
}

static void touch_locked(task *k, task_status s) {
  if (k->status != s) {
    free(k->status_message); /* it told of the status before */
    k->status_message = NULL;
  }
  k->status = s;
  stamp_locked(k);
  if (terminal(s)) drop_inputs(k);
  pthread_cond_broadcast(&k->store->changed);
}

static void publish(tg_mcp_tasks *t, const char *principal);

/* Unlocks the store; then observers hear of what changed while it was held. */
static void unlock_publishing(tg_mcp_tasks *t) {
  bool news = t->unpublished;
  char of[sizeof t->news_of];
  memcpy(of, t->news_of, sizeof of);
  t->unpublished = false;
  pthread_mutex_unlock(&t->lock);
  if (news) publish(t, of);
}

/* k's DetailedTask (detailed) or CreateTaskResult in status s: k->status (as it stands), or
 * k->ends_as (as it ends, to be written first). An end shows the same each time: ended, a
 * task is never restamped. */
static json_t *task_json_locked(const task *k, task_status s, bool detailed) {
  bool ended = terminal(s);
  char created[TG_ISO_LEN + 1], updated[TG_ISO_LEN + 1];
  tg_iso8601(k->created, created);
  tg_iso8601(ended ? k->ends_at : k->updated, updated);
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "taskId", k->id, "status",
                        status_names[s], "createdAt", created, "lastUpdatedAt", updated,
                        "ttlMs", (json_int_t)TG_MCP_TASK_TTL_MS, "pollIntervalMs",
                        (json_int_t)TG_MCP_TASK_POLL_MS);
  if (!j) return NULL;
  int r = 0;
  if (!detailed) r = json_object_set_new(j, "resultType", json_string("task"));
  /* pending changes as answers come (a copy: the answer is encoded after the lock); a
   * result and an error never change once set. */
  else if (s == INPUT_REQUIRED)
    r = json_object_set_new(j, "inputRequests", json_deep_copy(k->pending));
  else if (s == COMPLETED) r = json_object_set(j, "result", k->result);
  else if (s == FAILED) r = json_object_set(j, "error", k->error);
  /* Ended, the progress told of the status before is over; the message says why it failed,
   * or why the server cancelled it (the tasks text: a failed task SHOULD say). */
  const char *message = !ended          ? k->status_message
                        : s == FAILED   ? json_string_value(json_object_get(k->error, "message"))
                        : s != CANCELLED ? NULL
                        : k->stopped    ? STOPPED_MESSAGE
                        : k->unanswered ? UNANSWERED_MESSAGE
                        : k->revoked    ? REVOKED_MESSAGE
                                        : NULL;
  if (r == 0 && message) r = json_object_set_new(j, "statusMessage", json_string(message));
  if (r < 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* A running task's row: the task as shown (the arg of the jobs below). */
typedef struct task_row {
  const task *k;
  json_t *shown;
} task_row;

/* The row of k, as it began, before its client learns its id (the job of tg_db_batch). */
static int keep_beginning(void *arg, tg_db *db) {
  const task_row *b = arg;
  return tg_db_exec(db,
                    "INSERT INTO mcp_running_tasks (id, principal_id, task, runner) "
                    "VALUES ($1, $2, $3, $4)",
                    json_pack("[s,s,O,s]", b->k->id, b->k->principal, b->shown,
                              b->k->store->runner),
                    NULL);
}

static int take_runner_lock(tg_mcp_tasks *t);

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
  stamp_locked(k);
  unlock_publishing(k->store);
}

static int task_notify(void *self, const char *method, json_t *params) {
  task *k = self;
  /* Before its handler detached, the call is its request's: what it tells goes there. */
  if (!k->visible && k->start_notify) return k->start_notify(k->start_arg, method, params);
  /* A task has no request stream: the client learns of it through the task itself, and
   * of a list change, which is the server's news, as all do. */
  if (!tg_mcp_watch_touch(method) && strcmp(method, "notifications/progress") == 0)
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
   * "runners"). A cancel that comes meanwhile reaches the task once it is one. */
  int r = t->runner_fd >= 0 ? TG_OK : take_runner_lock(t);
  task_row b = {.k = k, .shown = r == TG_OK ? task_json_locked(k, k->status, true) : NULL};
  pthread_mutex_unlock(&t->lock);
  if (r == TG_OK && !b.shown) r = TG_E_NOMEM;
  if (r == TG_OK && (r = tg_db_batch(k->thread_db, keep_beginning, &b)) < 0)
    tg_log(TG_LOG_WARN, "mcp: a call could not become a task: %s", tg_db_errmsg(k->thread_db));
  json_decref(b.shown);
  if (r < 0) return r;
  pthread_mutex_lock(&t->lock);
  k->visible = true;
  touch_locked(k, WORKING);
  unlock_publishing(t);
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

/* Decides how k ends (s terminal): clients see it once it is written (see keep_ends_locked). */
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
  touch_locked(k, INPUT_REQUIRED);
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
  if (k->status != WORKING) touch_locked(k, WORKING);
  return true;
}

/* ---- how a task ended, kept in the database ---- */

typedef struct ending {
  char id[TASK_ID_LEN + 1];
  char principal[TG_UUID_LEN + 1];
  json_t *shown; /* its DetailedTask; NULL when it could not be made */
  int64_t at;
  /* The audit of an end no call of the task wrote (tg_call_log_end), with its tool
   * (NULL: not known) and level; why is NULL for an end a call's own row tells of. */
  const char *tool, *level, *why;
} ending;

/* How k ends, to be kept (release shown); with the store's lock. */
static ending ending_locked(const task *k) {
  ending e = {.shown = task_json_locked(k, k->ends_as, true), .at = k->ends_at};
  memcpy(e.id, k->id, sizeof e.id);
  memcpy(e.principal, k->principal, sizeof e.principal);
  if (k->ended_waiting) {
    e.tool = k->tool->name;
    e.level = k->stopped || k->unanswered ? "WARN" : "INFO";
    e.why = k->stopped      ? "cancelled: " STOPPED_MESSAGE
            : k->unanswered ? "cancelled: " UNANSWERED_MESSAGE
            : k->revoked    ? "cancelled: " REVOKED_MESSAGE
                            : "cancelled: its client cancelled it as it waited for input";
  }
  return e;
}

/* Deletes the running row of task id: it ended, or this server no longer holds it. */
static int forget_running(tg_db *db, const char *id) {
  return tg_db_exec(db, "DELETE FROM mcp_running_tasks WHERE id = $1", json_pack("[s]", id), NULL);
}

static int keep_ending(void *arg, tg_db *db) {
  const ending *e = arg;
  char at[TG_ISO_LEN + 1], expired[TG_ISO_LEN + 1];
  tg_iso8601(e->at, at);
  tg_iso8601(e->at - TG_MCP_TASK_TTL_MS, expired);
  /* Rows past their time to live go as new ones come (no task starts while its principal
   * has TG_MCP_MAX_KEPT_TASKS within it: see make_room_locked). */
  int r = tg_db_exec(db, "DELETE FROM mcp_tasks WHERE ended_at < $1", json_pack("[s]", expired),
                     NULL);
  /* A row written again as its commit was told failed late may be there already: it holds
   * the same, and its audit row was written with it. */
  int64_t kept_now = 0;
  if (r == 0)
    r = tg_db_exec(db,
                   "INSERT INTO mcp_tasks (id, principal_id, task, ended_at) VALUES ($1, $2, $3, $4) "
                   "ON CONFLICT (id) DO NOTHING",
                   json_pack("[s,s,O,s]", e->id, e->principal, e->shown, at), &kept_now);
  if (r == 0) r = forget_running(db, e->id);
  if (r == 0 && kept_now && e->why)
    r = tg_call_log_end(db, e->principal, e->tool, e->id, e->level, e->why);
  return r;
}

/* Writes e on db and releases it: 0, or the failure (logged). */
static int keep(tg_db *db, ending *e) {
  int r = e->shown ? tg_db_batch(db, keep_ending, e) : TG_E_NOMEM;
  if (r < 0)
    tg_log(TG_LOG_WARN, "mcp: how task %s ended could not be kept: %s", e->id,
           e->shown ? tg_db_errmsg(db) : "out of memory");
  json_decref(e->shown);
  return r;
}

/* Whether k's end is decided and waits to be written, by none yet. */
static bool end_unwritten(const task *k) {
  return terminal(k->ends_as) && !terminal(k->status) && !k->writing;
}

/* Writes on db how the n (at most TG_MCP_MAX_TASKS) tasks ks end (each end_unwritten), then
 * shows those written ended: no client sees an end the database does not keep, so none
 * changes after, whatever becomes of this server. One not written shows working (it asks
 * nothing more), and is written again as its principal reads it or starts a task, and at
 * stop. With the store's lock, released meanwhile (no task of ks may go: none ended). Returns
 * whether the database was found locked past its busy timeout. */
static bool keep_ends_locked(tg_mcp_tasks *t, tg_db *db, task *const *ks, size_t n) {
  ending ends[TG_MCP_MAX_TASKS];
  bool written[TG_MCP_MAX_TASKS];
  for (size_t i = 0; i < n; i++) {
    ks[i]->writing = true;
    /* Stamped as it is written, again if need be: no client saw it, and its hour starts now
     * (a write that failed for a while would otherwise be born expired). */
    ks[i]->ends_at = tg_now_ms();
    ends[i] = ending_locked(ks[i]);
  }
  pthread_mutex_unlock(&t->lock);
  /* Each is tried for itself, but a database locked past its busy timeout would hold each
   * of the others as long: after that, they wait for the next try. */
  bool busy = false;
  for (size_t i = 0; i < n; i++) {
    int r = busy ? TG_E_BUSY : keep(db, &ends[i]);
    if (busy) json_decref(ends[i].shown);
    written[i] = r == 0;
    busy = r == TG_E_BUSY;
  }
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < n; i++) {
    task *k = ks[i];
    k->writing = false;
    if (written[i]) touch_locked(k, k->ends_as);
    else if (k->status == INPUT_REQUIRED) touch_locked(k, WORKING);
  }
  return busy;
}

/* The task a row holds (a new reference), or NULL when it is unreadable. */
static json_t *row_task(const json_t *row) {
  /* The text holds what the JSON held, \u0000 included. */
  return json_loads(tg_json_str(row, "task"), JSON_ALLOW_NUL, NULL);
}

/* How principal's task id ended, as kept on db (a new DetailedTask in *ret, unless ret is
 * NULL); TG_E_NOTFOUND when it holds no such task there, or its time to live is over. */
static int kept(tg_db *db, const char *principal, const char *id, json_t **ret) {
  json_t *row = NULL;
  char since[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms() - TG_MCP_TASK_TTL_MS, since);
  int r = tg_db_query_row(
      db, "SELECT task FROM mcp_tasks WHERE id = $1 AND principal_id = $2 AND ended_at >= $3",
      json_pack("[s,s,s]", id, principal, since), &row);
  if (r < 0) return r;
  if (!row) return TG_E_NOTFOUND;
  if (ret && !(*ret = row_task(row))) r = TG_E_DB;
  json_decref(row);
  return r;
}

/* ---- runners: the server that runs a task ----
 * A server that runs tasks holds an exclusive lock on RUNNERS_DIR/<runner>.lock in the data
 * directory for as long as it lives: the kernel lets go of it when the process ends, however
 * it ends. Each task it runs has a row in mcp_running_tasks naming it, written before the
 * client learns the task's id and deleted with the write of how the task ended. A row whose
 * runner's lock is free belongs to a server that crashed or was killed: the task is written
 * as failed, so that its client reads that instead of losing it. */

/* The path of runner's file with suffix (runner "": the folder's), or NULL. */
static char *runner_file(const char *data_dir, const char *runner, const char *suffix) {
  char *path;
  return asprintf(&path, "%s/" RUNNERS_DIR "/%s%s", data_dir, runner, suffix) < 0 ? NULL : path;
}

/* Removes runner's lock file: it is gone, or this server as it stops. */
static void remove_runner_file(const char *data_dir, const char *runner) {
  _cleanup_free_ char *path = runner_file(data_dir, runner, ".lock");
  if (path) unlink(path);
}

/* Makes this server a runner: its file is locked before it takes its name, so that no other
 * server ever finds it free while this one lives. With the store's lock. */
static int take_runner_lock(tg_mcp_tasks *t) {
  unsigned char bits[16];
  char runner[TASK_ID_LEN + 1];
  if (!tg_random_bytes(bits, sizeof bits)) {
    tg_log(TG_LOG_ERROR, "mcp: cannot run tasks: no random bits: %s", strerror(errno));
    return TG_E_IO;
  }
  tg_hex(bits, sizeof bits, runner);
  _cleanup_free_ char *dir = runner_file(t->data_dir, "", "");
  _cleanup_free_ char *fresh = runner_file(t->data_dir, runner, ".new");
  _cleanup_free_ char *path = runner_file(t->data_dir, runner, ".lock");
  if (!dir || !fresh || !path) return TG_E_NOMEM;
  int fd = -1;
  if ((mkdir(dir, 0700) == 0 || errno == EEXIST) &&
      (fd = open(fresh, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) >= 0 &&
      flock(fd, LOCK_EX | LOCK_NB) == 0 && rename(fresh, path) == 0) {
    t->runner_fd = fd;
    memcpy(t->runner, runner, sizeof runner);
    return 0;
  }
  tg_log(TG_LOG_ERROR, "mcp: cannot run tasks: no lock file in %s: %s", dir, strerror(errno));
  if (fd >= 0) {
    unlink(fresh);
    close(fd);
  }
  return TG_E_IO;
}

typedef enum runner_state { RUNNER_ALIVE, RUNNER_GONE, RUNNER_UNKNOWN } runner_state;

/* Whether runner is this server's name (it has none before its first task). */
static bool is_own(tg_mcp_tasks *t, const char *runner) {
  pthread_mutex_lock(&t->lock);
  bool own = strcmp(runner, t->runner) == 0;
  pthread_mutex_unlock(&t->lock);
  return own;
}

/* Whether runner still lives: its lock is held (by this process too: a lock taken through
 * another open file conflicts). Logs why when it cannot be told. */
static runner_state runner_state_of(const tg_mcp_tasks *t, const char *runner) {
  _cleanup_free_ char *path = runner_file(t->data_dir, runner, ".lock");
  if (!path) return RUNNER_UNKNOWN;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  runner_state s = fd < 0 ? (errno == ENOENT ? RUNNER_GONE : RUNNER_UNKNOWN)
                   : flock(fd, LOCK_SH | LOCK_NB) == 0 ? RUNNER_GONE
                   : errno == EWOULDBLOCK              ? RUNNER_ALIVE
                                                       : RUNNER_UNKNOWN;
  if (s == RUNNER_UNKNOWN)
    tg_log(TG_LOG_WARN, "mcp: cannot tell whether a server running tasks lives: %s: %s", path,
           strerror(errno));
  if (fd >= 0) close(fd);
  return s;
}

/* Writes how each running task of the runner arg ended: failed, as its server is gone. */
static int bury_runner(void *arg, tg_db *db) {
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(db, "SELECT id, principal_id, task FROM mcp_running_tasks WHERE runner = $1",
                      json_pack("[s]", (const char *)arg), &rows);
  size_t i;
  json_t *row;
  json_array_foreach(r < 0 ? NULL : rows, i, row) {
    ending e = {.at = tg_now_ms(), .level = "ERROR", .why = "failed: " RUNNER_GONE_MESSAGE};
    char at[TG_ISO_LEN + 1];
    tg_iso8601(e.at, at);
    snprintf(e.id, sizeof e.id, "%s", tg_json_str(row, "id"));
    snprintf(e.principal, sizeof e.principal, "%s", tg_json_str(row, "principal_id"));
    json_t *shown = row_task(row);
    if (!json_is_object(shown)) { /* unreadable: what is known of it */
      json_decref(shown);
      shown = json_pack("{s:s,s:s,s:I,s:I}", "taskId", e.id, "createdAt", at, "ttlMs",
                        (json_int_t)TG_MCP_TASK_TTL_MS, "pollIntervalMs",
                        (json_int_t)TG_MCP_TASK_POLL_MS);
    }
    json_t *end = json_pack("{s:s,s:s,s:s,s:o}", "status", "failed", "lastUpdatedAt", at,
                            "statusMessage", RUNNER_GONE_MESSAGE, "error",
                            tg_rpc_error_object(TG_RPC_INTERNAL_ERROR, RUNNER_GONE_MESSAGE, NULL));
    e.shown = shown;
    if (shown) json_object_del(shown, "inputRequests"); /* it asks no more */
    r = shown && end && json_object_update(shown, end) == 0 ? keep_ending(&e, db) : TG_E_NOMEM;
    json_decref(end);
    json_decref(shown);
    if (r < 0) break;
  }
  return r;
}

/* When runner (as a row or a file name has it) is gone: writes its tasks as failed and
 * removes its file. 1 when it did, 0 when the runner lives (this server included), TG_E_IO
 * when whether it lives cannot be told, or the failure of db. */
static int bury_if_gone(tg_mcp_tasks *t, tg_db *db, const char *runner) {
  if (!runner || strlen(runner) != TASK_ID_LEN || strspn(runner, "0123456789abcdef") != TASK_ID_LEN)
    return 0; /* not a runner's: never a path */
  runner_state state = is_own(t, runner) ? RUNNER_ALIVE : runner_state_of(t, runner);
  if (state == RUNNER_UNKNOWN) return TG_E_IO;
  if (state == RUNNER_ALIVE) return 0;
  int r = tg_db_batch(db, bury_runner, (void *)runner);
  if (r < 0) {
    tg_log(TG_LOG_WARN, "mcp: the tasks of a server that is gone could not be ended: %s",
           tg_db_errmsg(db));
    return r;
  }
  remove_runner_file(t->data_dir, runner);
  return 1;
}

/* Removes the file name (in the folder dir) of a server killed before it renamed its file
 * into place: one unlocked and older than a server takes to rename it (a server that has
 * just made its file but not yet locked it must keep it). */
static void remove_unborn(int dir, const char *name) {
  struct stat st;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
      tg_now_ms() / 1000 - st.st_mtime < UNBORN_AFTER_S)
    return;
  int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dir, name, 0);
  close(fd);
}

/* Writes as failed the tasks of every runner that is gone, and removes their files. False
 * when the database failed at it (logged): worth trying again. */
static bool bury_gone_runners(tg_mcp_tasks *t, tg_db *db) {
  _cleanup_json_ json_t *rows = NULL;
  bool done = tg_db_query(db, "SELECT DISTINCT runner FROM mcp_running_tasks", NULL, &rows) == 0;
  if (!done) tg_log(TG_LOG_WARN, "mcp: cannot read which servers run tasks: %s", tg_db_errmsg(db));
  size_t i;
  json_t *row;
  /* A runner whether alive cannot be told (TG_E_IO, logged) would fail every try alike. */
  json_array_foreach(rows, i, row) {
    int r = bury_if_gone(t, db, tg_json_str(row, "runner"));
    if (r < 0 && r != TG_E_IO) done = false;
  }
  /* Runners gone without a task left, and servers killed as they became runners. */
  _cleanup_free_ char *dir = runner_file(t->data_dir, "", "");
  DIR *d = dir ? opendir(dir) : NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    char runner[TASK_ID_LEN + 1];
    const char *suffix = strlen(e->d_name) > TASK_ID_LEN ? e->d_name + TASK_ID_LEN : "";
    if (strcmp(suffix, ".new") == 0) {
      remove_unborn(dirfd(d), e->d_name);
    } else if (strcmp(suffix, ".lock") == 0) {
      memcpy(runner, e->d_name, TASK_ID_LEN);
      runner[TASK_ID_LEN] = '\0';
      bury_if_gone(t, db, runner); /* its rows, if any, were tried above */
    }
  }
  if (d) closedir(d);
  return done;
}

/* At this server's first task, the tasks of runners that are gone are written as failed
 * (db NULL: not now); if the database failed at it, at its next task again. */
static void sweep_once(tg_mcp_tasks *t, tg_db *db) {
  pthread_mutex_lock(&t->lock);
  bool sweep = db && !t->swept;
  t->swept |= sweep;
  pthread_mutex_unlock(&t->lock);
  if (!sweep || bury_gone_runners(t, db)) return;
  pthread_mutex_lock(&t->lock);
  t->swept = false;
  pthread_mutex_unlock(&t->lock);
}

/* Deletes the rows of this server that name no task it holds (a row whose write was told
 * failed, yet made), keeping those of the tasks it holds (arg: the store). */
static int forget_unheld(void *arg, tg_db *db) {
  tg_mcp_tasks *t = arg;
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(db, "SELECT id FROM mcp_running_tasks WHERE runner = $1",
                      json_pack("[s]", t->runner), &rows);
  size_t i;
  json_t *row;
  json_array_foreach(r < 0 ? NULL : rows, i, row) {
    const char *id = tg_json_str(row, "id");
    bool held = false;
    for (task *k = t->list; k && !held; k = k->next) held = strcmp(k->id, id) == 0;
    if (!held && (r = forget_running(db, id)) < 0) break;
  }
  return r;
}

/* At stop, once every task's thread ended (each decided its end): the ends not written yet
 * are written again, and the rows that name no task held deleted; a row that remains (the
 * database still fails) is written as failed by the next server to look, as no client saw
 * its task ended. A database locked past its busy timeout is waited for once: the stop
 * then leaves the rest to the next server. Then the lock goes. No other thread uses the
 * store by now (its tasks' threads ended, its observers were freed), so the list is read
 * between writes, and by forget_unheld, without the lock. */
static void leave_runners(tg_mcp_tasks *t) {
  if (t->runner_fd < 0) return;
  tg_db *db = NULL;
  _cleanup_free_ char *why = NULL;
  if (tg_db_open(t->data_dir, &db, &why) == 0) {
    bool busy = false;
    pthread_mutex_lock(&t->lock);
    for (task *k = t->list; k && !busy;) {
      task *ks[TG_MCP_MAX_TASKS];
      size_t n = 0;
      for (; k && n < TG_MCP_MAX_TASKS; k = k->next)
        if (end_unwritten(k)) ks[n++] = k;
      if (n) busy = keep_ends_locked(t, db, ks, n);
    }
    pthread_mutex_unlock(&t->lock);
    if (busy)
      tg_log(TG_LOG_WARN, "mcp: the database stayed locked at stop; the next server to look "
             "writes the tasks left running as failed");
    else if (tg_db_batch(db, forget_unheld, t) < 0)
      tg_log(TG_LOG_WARN, "mcp: the rows of tasks no longer held could not be deleted: %s",
             tg_db_errmsg(db));
    tg_db_close(db);
  } else {
    tg_log(TG_LOG_WARN, "mcp: the ends of tasks could not be written at stop: %s",
           why ? why : "out of memory");
  }
  remove_runner_file(t->data_dir, t->runner);
  close(t->runner_fd);
}

/* principal's task id, which this server does not hold, as the database has it: 0 when it
 * ended (a new DetailedTask in *ret unless ret is NULL), also when its runner is gone (it is
 * then written as failed); TG_MCP_TASK_ELSEWHERE when another server runs it (*ret: the task
 * as it began or last changed status); TG_E_NOTFOUND when there is none, or its time to live is over; or the
 * failure of db. */
static int not_here(tg_mcp_tasks *t, tg_db *db, const char *principal, const char *id,
                    json_t **ret) {
  if (strlen(id) != TASK_ID_LEN) return TG_E_NOTFOUND; /* no task's: not looked for */
  /* The running row first: how the task ended is written in the transaction that deletes
   * it, so a task missing from one is in the other. */
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(
      db, "SELECT task, runner FROM mcp_running_tasks WHERE id = $1 AND principal_id = $2",
      json_pack("[s,s]", id, principal), &row);
  if (r < 0) return r;
  if (!row) return kept(db, principal, id, ret);
  const char *runner = tg_json_str(row, "runner");
  /* A row of this server that names no task it holds (see forget_unheld). */
  if (is_own(t, runner)) return TG_E_NOTFOUND;
  r = bury_if_gone(t, db, runner);
  if (r == 1) return kept(db, principal, id, ret);
  if (r < 0) return r;
  if (ret && !(*ret = row_task(row))) return TG_E_DB;
  return TG_MCP_TASK_ELSEWHERE;
}

/* k's end was decided while the store's lock was held, which this releases: its thread
 * writes it on db (see keep_ends_locked), and is then done with the task. */
static void end_locked(task *k, tg_db *db) {
  keep_ends_locked(k->store, db, &k, 1);
  k->running = false;
  k->thread_db = NULL;
  unlock_publishing(k->store);
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
    tg_call_request call = {.principal_id = k->principal, .surface = TG_SURFACE_MCP,
                            .tool = k->tool->name, .args = k->args, .client = &channel,
                            .task_id = k->id, .run_id = k->run_id};
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
      json_t *asking = task_json_locked(k, k->status, true);
      unlock_publishing(t); /* observers hear where the round ended before it waits */
      show_standing(k, env.db, asking);
      pthread_mutex_lock(&t->lock);
    }
    if (!parked || !await_input_locked(k)) {
      end_locked(k, env.db);
      break;
    }
    json_t *resumed = task_json_locked(k, k->status, true);
    unlock_publishing(t);
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

/* ---- the store ---- */

/* Whether a task may go: its thread and its starter are done with it, and it ended (so the
 * database keeps how). Past its time to live it goes; read, it may give its place to a new
 * one. */
static bool may_go(const task *k) {
  return !k->running && !k->starting && terminal(k->status);
}

_Atomic int64_t tg_mcp_tasks_test_later_ms;

/* The clock by which tasks expire (monotonic, ms). */
static int64_t expiry_clock(void) { return tg_monotonic_ms() + tg_mcp_tasks_test_later_ms; }

static bool expired(const task *k, int64_t now) {
  return may_go(k) && now - k->touched > TG_MCP_TASK_TTL_MS;
}

/* principal's visible task id, or NULL. */
static task *find_locked(tg_mcp_tasks *t, const char *principal, const char *id) {
  int64_t now = expiry_clock();
  for (task *k = t->list; k; k = k->next)
    if (k->visible && !expired(k, now) && strcmp(k->id, id) == 0 &&
        strcmp(k->principal, principal) == 0)
      return k;
  return NULL;
}

/* Writes again on db the ends of principal's tasks that could not be written as they ended,
 * so that its client may read them and, read, they may make room: every one (it holds at
 * most TG_MCP_MAX_TASKS), each tried for itself. Another principal's wait for its own reads
 * and starts, so that what the database refuses of one never holds back another. With the
 * store's lock, released meanwhile. */
static void keep_ends_of_locked(tg_mcp_tasks *t, tg_db *db, const char *principal) {
  task *ks[TG_MCP_MAX_TASKS];
  size_t n = 0;
  for (task *k = t->list; k && n < TG_MCP_MAX_TASKS; k = k->next)
    if (end_unwritten(k) && strcmp(k->principal, principal) == 0) ks[n++] = k;
  if (n) keep_ends_locked(t, db, ks, n);
}

/* How many ended tasks of principal the database keeps within their time to live (from any
 * server): 0, or the failure of db. */
static int count_kept(tg_db *db, const char *principal, long *n) {
  char since[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms() - TG_MCP_TASK_TTL_MS, since);
  json_t *row = NULL;
  int r = tg_db_query_row(db,
                          "SELECT COUNT(*) AS n FROM mcp_tasks WHERE principal_id = $1 AND "
                          "ended_at >= $2",
                          json_pack("[s,s]", principal, since), &row);
  *n = (long)json_integer_value(json_object_get(row, "n"));
  json_decref(row);
  return r;
}

/* Drops expired tasks; then, when principal holds TG_MCP_MAX_TASKS, the ended one that
 * ended the longest ago, a read one first: memory is only where a task lives while it runs,
 * since the database keeps how each ended for its time to live (whose end was read on
 * another server, this one cannot tell). kept: its ended tasks the database keeps
 * (count_kept), which its running ones will join: each must stay readable for its time to
 * live, as its client was told; that bound, across servers, is what holds a principal back.
 * Returns 0, or TG_E_TOO_LARGE with the limit that stops one more task in ret. */
static int make_room_locked(tg_mcp_tasks *t, const char *principal, long kept,
                            tg_mcp_task_start *ret) {
  int64_t now = expiry_clock();
  unsigned held = 0, running = 0;
  task *oldest = NULL;
  for (task **p = &t->list; *p;) {
    task *k = *p;
    if (expired(k, now)) {
      *p = k->next;
      task_free(k);
      continue;
    }
    if (strcmp(k->principal, principal) == 0) {
      held++;
      running += k->running && !terminal(k->ends_as); /* not one writing how it ended */
      if (may_go(k) && !k->unseen_by &&
          (!oldest || k->read > oldest->read || (k->read == oldest->read && k->seq < oldest->seq)))
        oldest = k;
    }
    p = &k->next;
  }
  if (t->running >= TG_MCP_MAX_RUNNING_TASKS) {
    ret->limit = "running";
    ret->max = TG_MCP_MAX_RUNNING_TASKS;
  } else if (running >= TG_MCP_MAX_RUNNING_TASKS_EACH) {
    ret->limit = "runningEach";
    ret->max = TG_MCP_MAX_RUNNING_TASKS_EACH;
  } else if (held >= TG_MCP_MAX_TASKS && !oldest) {
    ret->limit = "held";
    ret->max = TG_MCP_MAX_TASKS;
  } else if (kept + running >= TG_MCP_MAX_KEPT_TASKS) {
    ret->limit = "kept";
    ret->max = TG_MCP_MAX_KEPT_TASKS;
  }
  if (ret->limit) return TG_E_TOO_LARGE;
  if (held < TG_MCP_MAX_TASKS) return 0;
  unlink_locked(t, oldest);
  task_free(oldest);
  return 0;
}

static int new_task(tg_mcp_tasks *t, const tg_mcp_task_call *call, task **ret) {
  task *k = calloc(1, sizeof *k);
  if (!k) return TG_E_NOMEM;
  unsigned char bits[16];
  k->store = t;
  k->tool = call->tool;
  k->running = k->starting = true;
  k->created = k->updated = tg_now_ms();
  k->touched = tg_monotonic_ms();
  snprintf(k->principal, sizeof k->principal, "%s", call->principal_id);
  snprintf(k->token_hash, sizeof k->token_hash, "%s", call->token_hash ? call->token_hash : "");
  k->args = call->args ? json_deep_copy(call->args) : NULL;
  k->caps = call->capabilities ? json_deep_copy(call->capabilities) : json_object();
  k->answers = call->input_responses ? json_deep_copy(call->input_responses) : NULL;
  k->state = call->request_state ? strdup(call->request_state) : NULL;
  k->start_check = call->check_result;
  k->start_notify = call->notify;
  k->start_arg = call->arg;
  k->start_progress_token = call->progress_token ? json_deep_copy(call->progress_token) : NULL;
  k->start_log_level = call->log_level ? strdup(call->log_level) : NULL;
  k->run_id = call->run_id ? strdup(call->run_id) : NULL;
  int r = (call->args && !k->args) || !k->caps || (call->input_responses && !k->answers) ||
                  (call->request_state && !k->state) ||
                  (call->progress_token && !k->start_progress_token) ||
                  (call->log_level && !k->start_log_level) || (call->run_id && !k->run_id)
              ? TG_E_NOMEM
          : !tg_random_bytes(bits, sizeof bits) ? TG_E_IO
                                                : 0;
  if (r < 0) {
    task_free(k);
    return r;
  }
  tg_hex(bits, sizeof bits, k->id);
  *ret = k;
  return 0;
}

/* Gives the task its database connection and its thread. */
static int launch(tg_mcp_tasks *t, task *k) {
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

int tg_mcp_tasks_start(tg_mcp_tasks *t, const tg_mcp_task_call *call, tg_mcp_task_start *ret) {
  memset(ret, 0, sizeof *ret);
  task *k = NULL;
  sweep_once(t, call->db);
  long kept = 0;
  int r = call->db ? count_kept(call->db, call->principal_id, &kept) : 0;
  if (r == 0) r = new_task(t, call, &k);
  if (r < 0) return r;
  /* The task takes its place before its connection opens, outside the lock. */
  pthread_mutex_lock(&t->lock);
  if (call->db && !t->stopping) keep_ends_of_locked(t, call->db, k->principal);
  r = t->stopping ? TG_E_IO : make_room_locked(t, k->principal, kept, ret);
  if (r == 0) {
    k->next = t->list;
    t->list = k;
    t->running++;
  }
  unlock_publishing(t); /* the ends written meanwhile */
  if (r < 0) {
    task_free(k);
    return r;
  }
  r = launch(t, k);
  pthread_mutex_lock(&t->lock);
  if (r < 0) {
    unlink_locked(t, k);
    t->running--;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->lock);
    task_free(k);
    return r;
  }
  while (!k->visible && !k->ended) {
    if (!k->cancel && call->cancelled && call->cancelled(call->arg)) {
      k->cancel = true;
      pthread_cond_broadcast(&t->changed);
    }
    tg_timed_wait(&t->changed, &t->lock, START_CHECK_MS);
  }
  k->starting = false;
  if (k->ended) {
    unlink_locked(t, k);
    pthread_mutex_unlock(&t->lock);
    ret->status = k->outcome;
    ret->res = k->res;
    memset(&k->res, 0, sizeof k->res);
    task_free(k);
    return 0;
  }
  ret->task = task_json_locked(k, k->status, false);
  /* Cancelled as it detached, or no answer to tell of it: no client will learn of the task,
   * which stops and may go. */
  if (!ret->task || (call->cancelled && call->cancelled(call->arg))) {
    k->cancel = k->read = true;
    pthread_cond_broadcast(&t->changed);
  }
  pthread_mutex_unlock(&t->lock);
  return ret->task ? 0 : TG_E_NOMEM;
}

int tg_mcp_tasks_get(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                     json_t **ret) {
  pthread_mutex_lock(&t->lock);
  task *k = find_locked(t, principal_id, id);
  /* An end not written yet is written now, so that it may be read. */
  if (k && end_unwritten(k)) keep_ends_locked(t, db, &k, 1);
  *ret = k ? task_json_locked(k, k->status, true) : NULL;
  if (*ret && terminal(k->status)) k->read = true;
  unlock_publishing(t);
  if (!k) {
    int r = not_here(t, db, principal_id, id, ret);
    return r == TG_MCP_TASK_ELSEWHERE ? 0 : r;
  }
  return *ret ? 0 : TG_E_NOMEM;
}

int tg_mcp_tasks_update(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                        json_t *responses, const char **wrong) {
  pthread_mutex_lock(&t->lock);
  task *k = find_locked(t, principal_id, id);
  int r = k ? 0 : TG_E_NOTFOUND;
  /* Cancelled, or its end decided, it takes no more answers. */
  bool asking = k && k->status == INPUT_REQUIRED && !terminal(k->ends_as) && !k->cancel;
  bool answered = false;
  const char *key;
  json_t *answer;
  /* All or none: a response that is no answer to its request refuses the others too. */
  json_object_foreach(asking ? responses : NULL, key, answer) {
    json_t *request = json_object_get(k->pending, key);
    if (request && !tg_client_answer_reads(tg_json_str(request, "method"),
                                           json_object_get(request, "params"), answer)) {
      *wrong = key;
      asking = false;
      r = TG_E_INVAL;
      break;
    }
  }
  json_object_foreach(asking ? responses : NULL, key, answer) {
    const char *own = json_string_value(json_object_get(k->keys, key));
    if (!json_object_get(k->pending, key) || !own) continue;
    if (json_object_set_new(k->answers, own, json_deep_copy(answer)) < 0) {
      r = TG_E_NOMEM;
      break;
    }
    json_object_del(k->pending, key);
    answered = true;
  }
  /* Every answer in: the task goes on (its thread wakes to run the next round). */
  if (asking && !json_object_size(k->pending)) touch_locked(k, WORKING);
  else if (answered) stamp_locked(k); /* fewer requests pending */
  unlock_publishing(t);
  return k ? r : not_here(t, db, principal_id, id, NULL); /* ended: nothing to answer */
}

int tg_mcp_tasks_cancel(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id) {
  pthread_mutex_lock(&t->lock);
  task *k = find_locked(t, principal_id, id);
  /* An end decided stands. Waiting for input, the task ends cancelled as soon as its thread
   * wrote so; running, once its handler gives up. Either way its place may go once it
   * ended, read or not: a client may drop a task as it cancels it (the tasks text), and
   * 2026-07-28 has no tasks/list to find it again. */
  if (k && !terminal(k->ends_as)) {
    k->cancel = k->read = true;
    pthread_cond_broadcast(&t->changed);
  }
  unlock_publishing(t);
  return k ? 0 : not_here(t, db, principal_id, id, NULL); /* ended: nothing to stop */
}

json_t *tg_mcp_tasks_token_hashes(tg_mcp_tasks *t) {
  json_t *hashes = json_object();
  pthread_mutex_lock(&t->lock);
  for (task *k = t->list; hashes && k; k = k->next)
    if (k->token_hash[0] && !terminal(k->ends_as) &&
        json_object_set_new(hashes, k->token_hash, json_true()) < 0) {
      json_decref(hashes);
      hashes = NULL;
    }
  pthread_mutex_unlock(&t->lock);
  return hashes;
}

void tg_mcp_tasks_end_token(tg_mcp_tasks *t, const char *hash) {
  pthread_mutex_lock(&t->lock);
  for (task *k = t->list; k; k = k->next)
    if (strcmp(k->token_hash, hash) == 0 && !terminal(k->ends_as) && !k->cancel)
      k->cancel = k->revoked = true;
  pthread_cond_broadcast(&t->changed);
  unlock_publishing(t);
}

/* ---- observers ---- */

/* Tells o of those of its tasks that changed since it last heard; with t->observing held
 * (which guards o's seen). What could not be delivered is told at the next publish. */
static void publish_to(tg_mcp_task_observer *o) {
  tg_mcp_tasks *t = o->store;
  struct {
    json_t *task;
    size_t at;    /* in o->watched */
    uint64_t seq; /* the change told */
    bool ended;
  } news[TG_MCP_MAX_TASKS];
  size_t n = 0;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < o->n; i++) {
    task *k = find_locked(t, o->principal, o->watched[i].id);
    if (!k || k->seq == o->watched[i].seen) continue;
    json_t *j = task_json_locked(k, k->status, true);
    if (j) news[n++] = (__typeof__(news[0])){j, i, k->seq, terminal(k->status)};
    else tg_log(TG_LOG_WARN, "mcp: out of memory telling of a task's change");
  }
  pthread_mutex_unlock(&t->lock);
  /* Outside the store's lock: delivering may wait on the client's stream. */
  bool ended = false;
  for (size_t i = 0; i < n; i++) {
    if (o->deliver(o->self, o, news[i].task) < 0) {
      news[i].ended = false;
      continue;
    }
    o->watched[news[i].at].seen = news[i].seq;
    ended |= news[i].ended;
  }
  if (!ended) return;
  /* The client learnt how those ended, as from tasks/get. */
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < n; i++) {
    task *k = news[i].ended ? find_locked(t, o->principal, o->watched[news[i].at].id) : NULL;
    if (!k || k->seq != news[i].seq) continue;
    k->read = true;
    if (!o->watched[news[i].at].told_end) k->unseen_by--;
    o->watched[news[i].at].told_end = true;
  }
  pthread_mutex_unlock(&t->lock);
}

/* Tells the observers of principal (empty: of all) what changed. */
static void publish(tg_mcp_tasks *t, const char *principal) {
  pthread_mutex_lock(&t->observing);
  for (tg_mcp_task_observer *o = t->observers; o; o = o->next)
    if (!*principal || strcmp(o->principal, principal) == 0) publish_to(o);
  pthread_mutex_unlock(&t->observing);
}

/* Whether names (an array of strings) holds id. */
static bool names(const json_t *list, const char *id) {
  size_t i;
  json_t *each;
  json_array_foreach(list, i, each) if (strcmp(json_string_value(each), id) == 0) return true;
  return false;
}

int tg_mcp_tasks_observer_new(tg_mcp_tasks *t, tg_db *db, const char *principal_id,
                              json_t *ids, tg_mcp_task_deliver deliver, void *self,
                              tg_mcp_task_observer **ret, json_t **honoured) {
  tg_mcp_task_observer *o = calloc(1, sizeof *o);
  json_t *named = json_array();
  if (!o || !named) {
    free(o);
    json_decref(named);
    return TG_E_NOMEM;
  }
  *o = (tg_mcp_task_observer){.store = t, .deliver = deliver, .self = self};
  snprintf(o->principal, sizeof o->principal, "%s", principal_id);
  int r = 0;
  size_t i;
  json_t *value;
  pthread_mutex_lock(&t->lock);
  json_array_foreach(ids, i, value) {
    const char *id = json_string_value(value);
    task *k = id && !names(named, id) ? find_locked(t, principal_id, id) : NULL;
    if (!k) continue;
    if (o->n == TG_MCP_MAX_TASKS) break; /* cannot be: a principal holds no more */
    if (json_array_append_new(named, json_string(id)) < 0) {
      r = TG_E_NOMEM;
      break;
    }
    k->unseen_by++;
    snprintf(o->watched[o->n++].id, sizeof o->watched[0].id, "%s", id);
  }
  pthread_mutex_unlock(&t->lock);
  /* The others, outside the store's lock (the database is read, and may be written: see
   * not_here): those that ended. One the database cannot tell of is left out, as unknown. */
  json_array_foreach(r == 0 ? ids : NULL, i, value) {
    const char *id = json_string_value(value);
    if (!id || names(named, id) || o->n + o->n_ended == TG_MCP_MAX_TASKS) continue;
    json_t *shown = NULL;
    int got = db ? not_here(t, db, principal_id, id, &shown) : TG_E_NOTFOUND;
    if (got == 0 && json_array_append_new(named, json_string(id)) == 0) {
      o->ended[o->n_ended++] = shown;
      continue;
    }
    json_decref(shown);
    if (got == 0) {
      r = TG_E_NOMEM;
      break;
    }
    if (got < 0 && got != TG_E_NOTFOUND)
      tg_log(TG_LOG_WARN, "mcp: a listen names task %s, which the database could not tell of", id);
  }
  if (r < 0) {
    tg_mcp_tasks_observer_free(o);
    json_decref(named);
    return r;
  }
  *ret = o;
  *honoured = named;
  return 0;
}

void tg_mcp_tasks_observe(tg_mcp_task_observer *o) {
  tg_mcp_tasks *t = o->store;
  pthread_mutex_lock(&t->observing);
  if (o->n) { /* else it would never hear a thing */
    o->next = t->observers;
    t->observers = o;
    o->observed = true;
    publish_to(o);
  }
  for (size_t i = 0; i < o->n_ended; i++)
    if (o->deliver(o->self, o, TAKE_PTR(o->ended[i])) < 0)
      tg_log(TG_LOG_WARN, "mcp: how a task ended could not be told to its listener");
  pthread_mutex_unlock(&t->observing);
}

void tg_mcp_tasks_observer_free(tg_mcp_task_observer *o) {
  if (!o) return;
  tg_mcp_tasks *t = o->store;
  pthread_mutex_lock(&t->observing);
  for (tg_mcp_task_observer **p = &t->observers; o->observed && *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  pthread_mutex_unlock(&t->observing);
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < o->n; i++) {
    task *k = o->watched[i].told_end ? NULL : find_locked(t, o->principal, o->watched[i].id);
    if (k) k->unseen_by--;
  }
  pthread_mutex_unlock(&t->lock);
  for (size_t i = 0; i < o->n_ended; i++) json_decref(o->ended[i]);
  free(o);
}

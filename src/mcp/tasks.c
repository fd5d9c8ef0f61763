/* MCP tasks: the store (see mcp/tasks.h). A task's record, and starting, reading, answering
 * and cancelling tasks; the task's thread is in task_thread.c, how a task ended kept in the
 * database in task_ends.c, the servers that run tasks in task_runners.c, observers in
 * task_observers.c. */
#include "mcp/tasks.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "mcp/tasks_internal.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

/* How often a starter waiting for its call looks whether its own request was cancelled. */
#define START_CHECK_MS 50

static const char *const status_names[] = {"working", "input_required", "completed", "failed",
                                           "cancelled"};

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
  json_decref(k->start_progress_token);
  free(k->state);
  free(k->start_log_level);
  k->args = k->caps = k->pending = k->keys = k->answers = k->start_progress_token = NULL;
  k->state = k->start_log_level = NULL;
}

static void task_free(task *k) {
  drop_inputs(k);
  json_decref(k->result);
  json_decref(k->error);
  json_decref(k->refusal);
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

void tg_mcp_tasks_cancel_left(tg_mcp_tasks *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  t->stopping = true;
  for (task *k = t->list; k; k = k->next) {
    /* Its end says the stop cut it, unless its client cancelled it or its end is decided;
     * one tg_mcp_tasks_stopping cancelled keeps saying so, and a second call changes nothing. */
    k->stopped = k->stopped || (!k->cancel && !mcp_task_terminal(k->ends_as));
    k->cancel = true;
  }
  pthread_cond_broadcast(&t->changed);
  while (t->running) pthread_cond_wait(&t->changed, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

void tg_mcp_tasks_free(tg_mcp_tasks *t) {
  if (!t) return;
  tg_mcp_tasks_cancel_left(t);
  mcp_tasks_leave_runners(t);
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

/* Tells k's thread to end it cancelled; its place may go once it ended, as a client that
 * cancelled it need not read it. */
static void cancel_locked(tg_mcp_tasks *t, task *k) {
  k->cancel = k->read = true;
  pthread_cond_broadcast(&t->changed);
}

/* Its thread runs a round of it, or writes its end: not waiting for input. */
static bool at_work(const task *k) { return k->running && !json_object_size(k->pending); }

void tg_mcp_tasks_stopping(tg_mcp_tasks *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  t->no_input = true;
  for (task *k = t->list; k; k = k->next)
    if (k->running && json_object_size(k->pending) && !k->cancel && !mcp_task_terminal(k->ends_as))
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
void mcp_task_stamp_locked(task *k) {
  tg_mcp_tasks *t = k->store;
  k->updated = tg_now_ms();
  k->touched = tg_monotonic_ms();
  k->seq = ++t->seq;
  if (!t->unpublished) snprintf(t->news_of, sizeof t->news_of, "%s", k->principal);
  else if (strcmp(t->news_of, k->principal) != 0) t->news_of[0] = '\0';
  t->unpublished = true;
}

/* k's status is now s (stamped; its inputs dropped once it ended). */
void mcp_task_touch_locked(task *k, task_status s) {
  if (k->status != s) {
    free(k->status_message); /* it told of the status before */
    k->status_message = NULL;
  }
  k->status = s;
  mcp_task_stamp_locked(k);
  if (mcp_task_terminal(s)) drop_inputs(k);
  pthread_cond_broadcast(&k->store->changed);
}

/* Unlocks the store; then observers hear of what changed while it was held. */
void mcp_tasks_unlock_publishing(tg_mcp_tasks *t) {
  bool news = t->unpublished;
  char of[sizeof t->news_of];
  memcpy(of, t->news_of, sizeof of);
  t->unpublished = false;
  pthread_mutex_unlock(&t->lock);
  if (news) mcp_tasks_publish(t, of);
}

/* k's DetailedTask (detailed) or CreateTaskResult in status s: k->status (as it stands), or
 * k->ends_as (as it ends, to be written first). An end shows the same each time: ended, a
 * task is never restamped. */
json_t *mcp_task_json_locked(const task *k, task_status s, bool detailed) {
  bool ended = mcp_task_terminal(s);
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

/* ---- the store ---- */

/* Whether a task may go: its thread and its starter are done with it, and it ended (so the
 * database keeps how). Past its time to live it goes; read, it may give its place to a new
 * one. */
static bool may_go(const task *k) {
  return !k->running && !k->starting && mcp_task_terminal(k->status);
}

_Atomic int64_t tg_mcp_tasks_test_later_ms;

/* The clock by which tasks expire (monotonic, ms). */
static int64_t expiry_clock(void) { return tg_monotonic_ms() + tg_mcp_tasks_test_later_ms; }

static bool expired(const task *k, int64_t now) {
  return may_go(k) && now - k->touched > TG_MCP_TASK_TTL_MS;
}

void (*_Atomic tg_mcp_tasks_test_dropped)(unsigned n);

static void drop_expired_locked(tg_mcp_tasks *t) {
  int64_t now = expiry_clock();
  unsigned n = 0;
  for (task **p = &t->list; *p;) {
    task *k = *p;
    if (!expired(k, now)) {
      p = &k->next;
      continue;
    }
    *p = k->next;
    task_free(k);
    n++;
  }
  void (*dropped)(unsigned) = tg_mcp_tasks_test_dropped;
  if (n && dropped) dropped(n);
}

void tg_mcp_tasks_drop_expired(tg_mcp_tasks *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  drop_expired_locked(t);
  pthread_mutex_unlock(&t->lock);
}

/* principal's visible task id, or NULL. */
task *mcp_tasks_find_locked(tg_mcp_tasks *t, const char *principal, const char *id) {
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
    if (mcp_task_end_unwritten(k) && strcmp(k->principal, principal) == 0) ks[n++] = k;
  if (n) mcp_tasks_keep_ends_locked(t, db, ks, n);
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
  drop_expired_locked(t);
  unsigned held = 0, running = 0;
  task *oldest = NULL;
  for (task *k = t->list; k; k = k->next)
    if (strcmp(k->principal, principal) == 0) {
      held++;
      running += k->running && !mcp_task_terminal(k->ends_as); /* not one writing how it ended */
      if (may_go(k) && !k->unseen_by &&
          (!oldest || k->read > oldest->read || (k->read == oldest->read && k->seq < oldest->seq)))
        oldest = k;
    }
  if (t->running >= TG_MCP_MAX_RUNNING_TASKS &&
      (running > 0 || t->running >= TG_MCP_MAX_RUNNING_TASKS_ALL)) {
    ret->limit = "running";
    ret->max = running > 0 ? TG_MCP_MAX_RUNNING_TASKS : TG_MCP_MAX_RUNNING_TASKS_ALL;
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
  k->caps = tg_client_capabilities_read(call->capabilities); /* what is read of them alone */
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

int tg_mcp_tasks_start(tg_mcp_tasks *t, const tg_mcp_task_call *call, tg_mcp_task_start *ret) {
  memset(ret, 0, sizeof *ret);
  task *k = NULL;
  mcp_tasks_sweep_once(t, call->db);
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
  mcp_tasks_unlock_publishing(t); /* the ends written meanwhile */
  if (r < 0) {
    task_free(k);
    return r;
  }
  r = mcp_task_launch(t, k);
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
  ret->task = mcp_task_json_locked(k, k->status, false);
  /* Cancelled as it detached, or no answer to tell of it: no client will learn of the task,
   * which stops and may go. A cancellation from now on is its answer's to see
   * (stop_untold_task in server.c). */
  if (!ret->task || (call->cancelled && call->cancelled(call->arg))) cancel_locked(t, k);
  pthread_mutex_unlock(&t->lock);
  if (ret->task && tg_mcp_tasks_test_started) tg_mcp_tasks_test_started();
  return ret->task ? 0 : TG_E_NOMEM;
}

void (*tg_mcp_tasks_test_started)(void);

int tg_mcp_tasks_get(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                     json_t **ret) {
  pthread_mutex_lock(&t->lock);
  task *k = mcp_tasks_find_locked(t, principal_id, id);
  /* An end not written yet is written now, so that it may be read. */
  if (k && mcp_task_end_unwritten(k)) mcp_tasks_keep_ends_locked(t, db, &k, 1);
  *ret = k ? mcp_task_json_locked(k, k->status, true) : NULL;
  if (*ret && mcp_task_terminal(k->status)) k->read = true;
  mcp_tasks_unlock_publishing(t);
  if (!k) {
    int r = mcp_tasks_not_here(t, db, principal_id, id, ret);
    return r == TG_MCP_TASK_ELSEWHERE ? 0 : r;
  }
  return *ret ? 0 : TG_E_NOMEM;
}

int tg_mcp_tasks_update(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                        json_t *responses, const char **wrong) {
  pthread_mutex_lock(&t->lock);
  task *k = mcp_tasks_find_locked(t, principal_id, id);
  int r = k ? 0 : TG_E_NOTFOUND;
  /* Cancelled, or its end decided, it takes no more answers. */
  bool asking = k && k->status == INPUT_REQUIRED && !mcp_task_terminal(k->ends_as) && !k->cancel;
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
  if (asking && !json_object_size(k->pending)) mcp_task_touch_locked(k, WORKING);
  else if (answered) mcp_task_stamp_locked(k); /* fewer requests pending */
  mcp_tasks_unlock_publishing(t);
  return k ? r : mcp_tasks_not_here(t, db, principal_id, id, NULL); /* ended: nothing to answer */
}

int tg_mcp_tasks_cancel(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id) {
  pthread_mutex_lock(&t->lock);
  task *k = mcp_tasks_find_locked(t, principal_id, id);
  /* An end decided stands. Waiting for input, the task ends cancelled as soon as its thread
   * wrote so; running, once its handler gives up. Either way its place may go once it
   * ended, read or not: a client may drop a task as it cancels it (the tasks text), and
   * 2026-07-28 has no tasks/list to find it again. */
  if (k && !mcp_task_terminal(k->ends_as)) cancel_locked(t, k);
  mcp_tasks_unlock_publishing(t);
  return k ? 0 : mcp_tasks_not_here(t, db, principal_id, id, NULL); /* ended: nothing to stop */
}

json_t *tg_mcp_tasks_token_hashes(tg_mcp_tasks *t) {
  json_t *hashes = json_object();
  pthread_mutex_lock(&t->lock);
  for (task *k = t->list; hashes && k; k = k->next)
    if (k->token_hash[0] && !mcp_task_terminal(k->ends_as) &&
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
    if (strcmp(k->token_hash, hash) == 0 && !mcp_task_terminal(k->ends_as) && !k->cancel)
      k->cancel = k->revoked = true;
  pthread_cond_broadcast(&t->changed);
  mcp_tasks_unlock_publishing(t);
}

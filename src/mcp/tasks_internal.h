/* Private to the files of src/mcp that keep MCP tasks: tasks.c (the store: a task's record,
 * starting, reading, answering and cancelling tasks), task_thread.c (the task's thread and what
 * its handler sees), task_ends.c (how a task ended, kept in the database), task_runners.c (the
 * servers that run tasks, and tasks another server runs or ran) and task_observers.c (who
 * hears of tasks as they change). Functions named *_locked are called with the store's lock;
 * each is described where it is defined. */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/principal.h"
#include "mcp/tasks.h"
#include "util/ids.h"

#define TASK_ID_LEN 32 /* hex digits: 128 random bits */
#define STOPPED_MESSAGE "The server stopped before the task ended"
#define UNANSWERED_MESSAGE "No answer to its input requests came in time"
#define REVOKED_MESSAGE "The token that started the task was revoked"

typedef enum task_status { WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED } task_status;

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

static inline bool mcp_task_terminal(task_status s) {
  return s == COMPLETED || s == FAILED || s == CANCELLED;
}

/* ---- tasks.c ---- */
void mcp_task_stamp_locked(task *k);
void mcp_task_touch_locked(task *k, task_status s);
void mcp_tasks_unlock_publishing(tg_mcp_tasks *t);
json_t *mcp_task_json_locked(const task *k, task_status s, bool detailed);
task *mcp_tasks_find_locked(tg_mcp_tasks *t, const char *principal, const char *id);

/* ---- task_thread.c ---- */
int mcp_task_launch(tg_mcp_tasks *t, task *k);

/* ---- task_ends.c ---- */
typedef struct ending {
  char id[TASK_ID_LEN + 1];
  char principal[TG_UUID_LEN + 1];
  json_t *shown; /* its DetailedTask; NULL when it could not be made */
  int64_t at;
  /* The audit of an end no call of the task wrote (tg_call_log_end), with its tool
   * (NULL: not known), the run its rounds attached to (NULL: none or not known) and level;
   * why is NULL for an end a call's own row tells of. */
  const char *tool, *run_id, *level, *why;
} ending;
int mcp_tasks_keep_ending(void *arg, tg_db *db);
bool mcp_task_end_unwritten(const task *k);
bool mcp_tasks_keep_ends_locked(tg_mcp_tasks *t, tg_db *db, task *const *ks, size_t n);
int mcp_tasks_forget_running(tg_db *db, const char *id);
json_t *mcp_task_of_row(const json_t *row);
int mcp_tasks_kept(tg_db *db, const char *principal, const char *id, json_t **ret);

/* ---- task_runners.c ---- */
int mcp_tasks_take_runner_lock(tg_mcp_tasks *t);
void mcp_tasks_sweep_once(tg_mcp_tasks *t, tg_db *db);
void mcp_tasks_leave_runners(tg_mcp_tasks *t);
int mcp_tasks_not_here(tg_mcp_tasks *t, tg_db *db, const char *principal, const char *id,
                       json_t **ret);

/* ---- task_observers.c ---- */
void mcp_tasks_publish(tg_mcp_tasks *t, const char *principal);

/* MCP tasks (the io.modelcontextprotocol/tasks extension of 2026-07-28): a tool call that
 * goes on after its request was answered, which the client polls (tasks/get), feeds with
 * input (tasks/update) and may cancel (tasks/cancel). Each runs tg_call on a thread of its
 * own with a database connection of its own, so every round of it passes the gate and is
 * audited like any call. Tasks live in this process's memory, each visible only to the
 * principal that started it; how one ended is also written to the database (mcp_tasks), so
 * that it stays readable until TG_MCP_TASK_TTL_MS after it ended, whatever becomes of the
 * process. That write comes first: no client sees a task ended (tasks/get, observers)
 * before the database keeps how, so a terminal status never changes, not even to failed
 * as the next server shows a task whose server was killed. An end the database refuses is
 * logged and the task goes on showing working here, in memory (it never expires; other
 * servers show it as of its last change of status); the write is made again, stamped anew,
 * as its principal reads it or starts a task (each of its own then, none of another's), and
 * as the server stops. A handler's progress message is
 * its task's statusMessage until the status changes. Knows nothing of transports. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/call.h"
#include "core/registry.h"

#define TG_MCP_TASKS_EXTENSION "io.modelcontextprotocol/tasks"
#define TG_MCP_TASK_TTL_MS (60LL * 60 * 1000) /* an ended task stays readable this long */
#define TG_MCP_TASK_INPUT_WAIT_MS (10LL * 60 * 1000) /* a task waits this long for input,
                                                       * then ends cancelled */
#define TG_MCP_TASK_POLL_MS 500          /* how often a client should poll */
#define TG_MCP_MAX_TASKS 64              /* tasks one principal holds, ended or not */
#define TG_MCP_MAX_RUNNING_TASKS_EACH 8  /* tasks one principal runs (or that wait for it) */
#define TG_MCP_MAX_RUNNING_TASKS 32      /* threads running tasks in one server, shared */
/* Past the shared bound, a principal running none may still start one, up to this many in
 * all: principals that fill the shared bound cannot lock the others out. */
#define TG_MCP_MAX_RUNNING_TASKS_ALL (2 * TG_MCP_MAX_RUNNING_TASKS)
#define TG_MCP_TASK_STATUS_MAX 1024      /* bytes of a statusMessage kept */
#define TG_MCP_MAX_KEPT_TASKS 256        /* ended tasks of one principal the database keeps
                                          * for their time to live: no more start then */

typedef struct tg_mcp_tasks tg_mcp_tasks;

/* base: what the tasks run against: its registry, its public_url and its data_dir (not
 * NULL), where each task opens a database connection of its own. */
int tg_mcp_tasks_new(const tg_env *base, tg_mcp_tasks **ret);
/* Cancels the tasks still running and waits for their threads to end. Every observer of
 * t must be freed before. */
void tg_mcp_tasks_free(tg_mcp_tasks *t);
/* The server stops: no input can come to its tasks any more. Those waiting for it end
 * cancelled now, and so does any that asks for it from now on, instead of waiting through
 * the grace the tasks at work are given. */
void tg_mcp_tasks_stopping(tg_mcp_tasks *t);
/* For a stopping server: waits until no task is at work (its round running; one waiting for
 * input is not) or the monotonic clock reaches deadline (ms). Returns how many still are. */
unsigned tg_mcp_tasks_await(tg_mcp_tasks *t, int64_t deadline);
/* For a stopping server whose grace is over: cancels the tasks still running and waits for
 * their threads to end, their observers told of each end (tg_mcp_tasks_free does it too). */
void tg_mcp_tasks_cancel_left(tg_mcp_tasks *t);

typedef struct tg_mcp_task_call {
  const char *principal_id;
  const char *token_hash; /* of the token the call came with; NULL or "": none */
  const char *run_id;     /* the running run the task's rounds attach to; NULL: each its own */
  const tg_tool *tool;
  json_t *args;            /* borrowed, NULL: {} */
  json_t *capabilities;    /* the client's (borrowed): what the task may ask it for */
  json_t *input_responses; /* the first round's (borrowed), NULL */
  const char *request_state; /* the first round's, verified; NULL */
  /* Whether the request that starts the call was cancelled: asked while it waits; and, while
   * no client knows the task, its check of a result (tg_client_channel.check_result), and
   * where the call's notifications go (tg_client_channel.notify), with the request's
   * progress token and log level (borrowed, NULL: none), as for a call that is no task. */
  bool (*cancelled)(void *arg);
  int (*check_result)(void *arg, tg_call_ctx *cx, json_t *result);
  int (*notify)(void *arg, const char *method, json_t *params);
  json_t *progress_token;
  const char *log_level;
  void *arg;
  /* The starter's connection, NULL: where the ends of the principal's tasks that could not
   * be written as they ended are written again, and where, at the server's first task, the
   * tasks of servers that are gone are written as failed. */
  tg_db *db;
} tg_mcp_task_call;

typedef struct tg_mcp_task_start {
  json_t *task;       /* the handler detached: the CreateTaskResult; else NULL and */
  int status;         /* the call ended first: what tg_call returned, */
  tg_call_result res; /* and its result (release with tg_call_result_done) */
  /* TG_E_TOO_LARGE: the limit reached ("running", "runningEach", "held", "kept") and its
   * value */
  const char *limit;
  int max;
} tg_mcp_task_start;

/* Runs call on a thread of its own until its handler detaches or the call ends, whichever
 * comes first. Returns 0; TG_E_TOO_LARGE (with ret->limit) when the server runs
 * TG_MCP_MAX_RUNNING_TASKS and the principal runs one already (or the server runs
 * TG_MCP_MAX_RUNNING_TASKS_ALL), the principal TG_MCP_MAX_RUNNING_TASKS_EACH, or it holds
 * TG_MCP_MAX_TASKS none of which may make room (an ended task makes room once the database
 * keeps how it ended: a read one first, then the longest ended), or the database keeps
 * TG_MCP_MAX_KEPT_TASKS of its ended tasks; or another TG_E_* status. */
int tg_mcp_tasks_start(tg_mcp_tasks *t, const tg_mcp_task_call *call, tg_mcp_task_start *ret);

/* The DetailedTask of principal's task id (a new object): from memory (an end not written yet
 * is written on db first), or, for a task that ended and is no longer there (let go, or run
 * by a server since stopped), as db keeps it;
 * one that another server runs, as it began or last changed status (working,
 * input_required); one whose server is gone (crashed, killed),
 * failed. TG_E_NOTFOUND when principal has no such task; another TG_E_* when db fails. */
int tg_mcp_tasks_get(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                     json_t **ret);
/* What tasks/update and tasks/cancel of a task that another server runs return: only that
 * server can reach it. */
#define TG_MCP_TASK_ELSEWHERE 1
/* Answers the task's pending input requests (responses: borrowed, request key → response);
 * keys not pending are ignored. Once none is pending the task goes on. 0 (also for a task
 * db keeps: it ended), TG_E_INVAL when a response does not read as the result of the request
 * it answers (*wrong: its key; none is taken then), TG_MCP_TASK_ELSEWHERE, TG_E_NOTFOUND, or
 * the failure of db. */
int tg_mcp_tasks_update(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id,
                        json_t *responses, const char **wrong);
/* Tests: called by tg_mcp_tasks_start as it returns a task to its starter (NULL: nothing
 * is called). */
extern void (*tg_mcp_tasks_test_started)(void);
/* Tests: called each time a task's thread has ended (NULL: nothing is called). */
extern void (*_Atomic tg_mcp_tasks_test_ended)(void); /* atomic: set while tasks run */
/* Tests: called with how many expired tasks went from memory, when some did. */
extern void (*_Atomic tg_mcp_tasks_test_dropped)(unsigned n); /* atomic: set while serving */
/* Tests: how far ahead of the clock tasks expire from memory by (0: not at all). */
extern _Atomic int64_t tg_mcp_tasks_test_later_ms;

/* Who hears of a principal's tasks as they change (subscriptions/listen with taskIds).
 * deliver sends task (stolen) to the client and returns 0, or a failure: the task is then
 * told again at its principal's next change. It runs while the store tells observers one at
 * a time, so it must not call back into the store, nor wait for anything that may. */
typedef struct tg_mcp_task_observer tg_mcp_task_observer;
typedef int (*tg_mcp_task_deliver)(void *self, tg_mcp_task_observer *o, json_t *task);

/* An observer of those of ids (an array of strings, borrowed) that name principal_id's
 * tasks this server holds, or that ended as db keeps them (those another server runs are not
 * named: they are read with tasks/get), which it lists in *honoured (a new array); it hears
 * nothing until observed (one db cannot tell of is left out, logged). Returns 0 or
 * TG_E_NOMEM. */
int tg_mcp_tasks_observer_new(tg_mcp_tasks *t, tg_db *db, const char *principal_id,
                              json_t *ids, tg_mcp_task_deliver deliver, void *self,
                              tg_mcp_task_observer **ret, json_t **honoured);
/* From now on deliver(self, o, task) gets the DetailedTask of each of o's tasks: first as
 * it stands, then as it stands after it changed, on the thread that changed it (changes in
 * quick succession may be told as one); one that had ended as the observer was made, once
 * (a delivery of it that fails is logged, not made again).
 * A terminal status delivered counts as read, as from tasks/get. An observer of no task is
 * told nothing. */
void tg_mcp_tasks_observe(tg_mcp_task_observer *o);
/* Frees o, observed or not: once this returns no delivery to it runs. NULL: nothing. */
void tg_mcp_tasks_observer_free(tg_mcp_task_observer *o);

/* Asks the task to stop: one waiting for input ends cancelled (its end counts as read), a
 * running one when its handler gives up: fails once it learnt of it (cx->client->cancelled),
 * or returns a result all the same, which the gate then fails before it is queued for
 * commit. What stands: a result queued for commit before the cancel came, a failure of a
 * handler that never learnt of it, and an end already decided. 0 (also for a task db keeps: it
 * ended), TG_MCP_TASK_ELSEWHERE, TG_E_NOTFOUND, or the failure of db. */
int tg_mcp_tasks_cancel(tg_mcp_tasks *t, tg_db *db, const char *principal_id, const char *id);

/* The hashes of the tokens that started t's tasks not ended yet, as the keys of a new object
 * (tasks started without a token are left out), for a transport to look whether they were
 * revoked; NULL when out of memory. */
json_t *tg_mcp_tasks_token_hashes(tg_mcp_tasks *t);
/* The token of hash was revoked: the tasks it started that have not ended are asked to stop,
 * as by tg_mcp_tasks_cancel, their principal's other tokens still reading how they ended. */
void tg_mcp_tasks_end_token(tg_mcp_tasks *t, const char *hash);
/* Frees the tasks past their time to live (their ends are the database's to tell): a
 * transport calls it now and then, so that a quiet server does not hold them until the next
 * task starts. */
void tg_mcp_tasks_drop_expired(tg_mcp_tasks *t);

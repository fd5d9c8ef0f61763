/* MCP tasks: the servers that run them, and the tasks another server runs or ran. */
#define _GNU_SOURCE
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

#include "mcp/jsonrpc.h"
#include "mcp/tasks_internal.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

/* In the data directory: a lock file for each server that runs tasks (see below). */
#define RUNNERS_DIR "task-runners"
#define RUNNER_GONE_MESSAGE "The server running the task stopped before it ended"
#define UNBORN_AFTER_S 60 /* a lock file not renamed into place by then was left by a crash */

/* A server that runs tasks holds an exclusive lock on RUNNERS_DIR/<runner>.lock in the data
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
int mcp_tasks_take_runner_lock(tg_mcp_tasks *t) {
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
  int r = tg_db_query(db,
                      "SELECT id, principal_id, task, tool, run_id FROM mcp_running_tasks"
                      " WHERE runner = $1",
                      json_pack("[s]", (const char *)arg), &rows);
  size_t i;
  json_t *row;
  json_array_foreach(r < 0 ? NULL : rows, i, row) {
    ending e = {.at = tg_now_ms(), .tool = tg_json_str(row, "tool"),
                .run_id = tg_json_str(row, "run_id"), .level = "ERROR",
                .why = "failed: " RUNNER_GONE_MESSAGE};
    char at[TG_ISO_LEN + 1];
    tg_iso8601(e.at, at);
    snprintf(e.id, sizeof e.id, "%s", tg_json_str(row, "id"));
    snprintf(e.principal, sizeof e.principal, "%s", tg_json_str(row, "principal_id"));
    json_t *shown = mcp_task_of_row(row);
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
    r = shown && end && json_object_update(shown, end) == 0 ? mcp_tasks_keep_ending(&e, db)
                                                            : TG_E_NOMEM;
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
void mcp_tasks_sweep_once(tg_mcp_tasks *t, tg_db *db) {
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
    if (!held && (r = mcp_tasks_forget_running(db, id)) < 0) break;
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
void mcp_tasks_leave_runners(tg_mcp_tasks *t) {
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
        if (mcp_task_end_unwritten(k)) ks[n++] = k;
      if (n) busy = mcp_tasks_keep_ends_locked(t, db, ks, n);
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
 * as it began or last changed status); TG_E_NOTFOUND when there is none, or its time to live
 * is over; or the failure of db. */
int mcp_tasks_not_here(tg_mcp_tasks *t, tg_db *db, const char *principal, const char *id,
                       json_t **ret) {
  if (strlen(id) != TASK_ID_LEN) return TG_E_NOTFOUND; /* no task's: not looked for */
  /* The running row first: how the task ended is written in the transaction that deletes
   * it, so a task missing from one is in the other. */
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(
      db, "SELECT task, runner FROM mcp_running_tasks WHERE id = $1 AND principal_id = $2",
      json_pack("[s,s]", id, principal), &row);
  if (r < 0) return r;
  if (!row) return mcp_tasks_kept(db, principal, id, ret);
  const char *runner = tg_json_str(row, "runner");
  /* A row of this server that names no task it holds (see forget_unheld). */
  if (is_own(t, runner)) return TG_E_NOTFOUND;
  r = bury_if_gone(t, db, runner);
  if (r == 1) return mcp_tasks_kept(db, principal, id, ret);
  if (r < 0) return r;
  if (ret && !(*ret = mcp_task_of_row(row))) return TG_E_DB;
  return TG_MCP_TASK_ELSEWHERE;
}

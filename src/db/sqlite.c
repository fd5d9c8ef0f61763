/* The SQLite backend of the storage port (db.h); the only file that includes <sqlite3.h>. */
#define _GNU_SOURCE
#include "db/db.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/embed.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

enum {
  STMT_CACHE_SIZE = 64, /* the statements of a tool call, and then some */
  BUSY_TIMEOUT_MS = 5000,
  MAX_ROWS = 100000, /* a query that returns more is a bug, not a workload */
  /* Pages of log per checkpoint (16 MB; SQLite's default is 1000): each costs two fsyncs, and
   * a restart holds every writer, so fewer of them shorten the tail of call latency (p99 at
   * 64 connections 20 -> 14 ms against 1000) for a log of at most 64 MB. */
  CHECKPOINT_PAGES = 4000,
  RESTART_PAGES = 4 * CHECKPOINT_PAGES, /* a log this long is restarted, waiting for readers */
  TRUNCATE_BUSY_MS = 100, /* see truncate_log */
};

_Atomic long long tg_db_shrink_idle_ms = 10000;

/* What the connections of this process to one database file share.
 * Writers queue on a mutex, woken when the lock is free, instead of polling SQLite's lock
 * with sleeps of up to 100 ms (its busy handler); other processes still meet SQLite's lock
 * and the busy timeout.
 * Checkpoints run on a thread of their own, started at the first commit: SQLite's own
 * auto-checkpoint runs inside the commit that crosses CHECKPOINT_PAGES, so that call (and
 * every writer queued behind it) waits for two fsyncs; and while readers keep it from
 * finishing (always, under load) it sorts the whole log again at every commit as the log
 * grows. Here one checkpoint is asked for per CHECKPOINT_PAGES new pages, and a log that
 * still reaches RESTART_PAGES is restarted. A restarted log keeps its size on disk, and one
 * never checkpointed stays until the last connection closes, so once commits stop, the log
 * is truncated (tg_db_shrink_idle_ms). */
typedef struct shared_file {
  struct shared_file *next;
  dev_t dev;
  ino_t ino;
  char *path;
  int refs; /* guarded by files_lock */
  pthread_mutex_t write;
  pthread_mutex_t lock; /* guards what follows */
  pthread_cond_t wake;
  pthread_t checkpointer;
  bool running, stop;
  int checkpoint_at; /* log pages at which the next checkpoint is asked for */
  int due;           /* log pages of the checkpoint asked for; 0: none */
  unsigned long commits; /* seen by the log's hook: the checkpoint thread's sign of idleness */
  unsigned long truncated_at; /* commits when the log was last truncated */
  /* tg_db_batch: the jobs waiting for a transaction, and whether a thread leads one. */
  pthread_mutex_t jobs_lock;
  struct batch_job *jobs, *jobs_tail;
  bool leading;
  /* The connection batches write through, used by whichever thread leads: its page cache
   * stays warm from one transaction to the next, where a connection that finds another's
   * commit in the log reads its pages again. Opened by the first batch. */
  struct tg_db *writer;
} shared_file;

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_file *files;

/* The same few statements run on every tool call: keep them prepared. */
typedef struct cached_stmt {
  char *sql; /* NULL: free slot */
  sqlite3_stmt *stmt;
  uint64_t used; /* tick of the last use; the smallest is evicted */
} cached_stmt;

struct tg_db {
  sqlite3 *conn;
  shared_file *file;
  bool writing; /* holds file->write */
  cached_stmt cache[STMT_CACHE_SIZE];
  uint64_t tick;
  int fail_after;     /* countdown of tg_db_fail_after, 0 when disarmed */
  char *errbuf;       /* malloc'd message of the last failure */
  const char *errmsg; /* errbuf, or a static text when there is none */
  void *kept;         /* tg_db_keep's value, freed with kept_free */
  void (*kept_free)(void *);
  bool file_writer;   /* a shared_file's writer: holds no reference to it */
  bool read_only;     /* tg_db_read_only is on */
};

__attribute__((format(printf, 3, 4))) static int set_err(tg_db *db, int rc, const char *fmt, ...) {
  free(db->errbuf);
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&db->errbuf, fmt, ap);
  va_end(ap);
  if (n < 0) db->errbuf = NULL; /* its content is undefined after a failure */
  db->errmsg = db->errbuf ? db->errbuf : "out of memory";
  return rc;
}

static int nomem(tg_db *db) { return set_err(db, TG_E_NOMEM, "out of memory"); }

static int status_of(int sqlite_rc) {
  switch (sqlite_rc & 0xff) { /* primary code of an extended one */
  case SQLITE_CONSTRAINT:
    return TG_E_CONSTRAINT;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return TG_E_BUSY;
  case SQLITE_NOMEM:
    return TG_E_NOMEM;
  default:
    return TG_E_DB;
  }
}

static int sqlite_err(tg_db *db, int sqlite_rc) {
  return set_err(db, status_of(sqlite_rc), "%s", sqlite3_errmsg(db->conn));
}

/* Consumes one armed tg_db_fail_after step; true when this statement is the one to fail. */
static bool injected(tg_db *db) { return db->fail_after > 0 && --db->fail_after == 0; }

static int injected_failure(tg_db *db) { return set_err(db, TG_E_DB, "injected failure"); }

/* Returns the cached statement for sql, preparing it (and evicting the least recently used
 * one) on a miss. Cached statements are always reset, so evicting one is safe. */
static int prepare(tg_db *db, const char *sql, sqlite3_stmt **ret) {
  cached_stmt *victim = db->cache;
  for (cached_stmt *c = db->cache; c < db->cache + STMT_CACHE_SIZE; c++) {
    if (c->sql && strcmp(c->sql, sql) == 0) {
      c->used = ++db->tick;
      *ret = c->stmt;
      return 0;
    }
    if (c->used < victim->used) victim = c; /* free slots have used == 0 */
  }

  _cleanup_free_ char *copy = strdup(sql);
  if (!copy) return nomem(db);
  sqlite3_stmt *stmt = NULL;
  const char *tail = NULL;
  int rc = sqlite3_prepare_v3(db->conn, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, &tail);
  if (rc != SQLITE_OK) return sqlite_err(db, rc);
  if (!stmt) return set_err(db, TG_E_INVAL, "empty SQL statement");
  if (*tail) {
    /* Only whitespace and comments may follow: a second statement would be ignored. */
    sqlite3_stmt *extra = NULL;
    rc = sqlite3_prepare_v2(db->conn, tail, -1, &extra, NULL);
    sqlite3_finalize(extra);
    if (rc != SQLITE_OK || extra) {
      sqlite3_finalize(stmt);
      if (status_of(rc) == TG_E_NOMEM) return nomem(db);
      return set_err(db, TG_E_INVAL, "one SQL statement per call; this follows: %s", tail);
    }
  }

  if (victim->sql) {
    sqlite3_finalize(victim->stmt);
    free(victim->sql);
  }
  victim->sql = TAKE_PTR(copy);
  victim->stmt = stmt;
  victim->used = ++db->tick;
  *ret = stmt;
  return 0;
}

/* "$N" with N from 1 and no leading zero → N; anything else → 0. */
static size_t param_number(const char *name) {
  if (!name || name[0] != '$' || name[1] < '1' || name[1] > '9') return 0;
  size_t n = 0;
  for (const char *p = name + 1; *p; p++) {
    if (*p < '0' || *p > '9' || n > 99999) return 0;
    n = n * 10 + (size_t)(*p - '0');
  }
  return n;
}

static int bind_value(tg_db *db, sqlite3_stmt *stmt, int i, json_t *v) {
  int rc = SQLITE_MISUSE;
  switch (json_typeof(v)) {
  case JSON_STRING: /* static: bindings are cleared before the call returns */
    rc = sqlite3_bind_text64(stmt, i, json_string_value(v), json_string_length(v), SQLITE_STATIC,
                             SQLITE_UTF8);
    break;
  case JSON_INTEGER:
    rc = sqlite3_bind_int64(stmt, i, json_integer_value(v));
    break;
  case JSON_REAL:
    rc = sqlite3_bind_double(stmt, i, json_real_value(v));
    break;
  case JSON_TRUE:
  case JSON_FALSE:
    rc = sqlite3_bind_int(stmt, i, json_is_true(v));
    break;
  case JSON_NULL:
    rc = sqlite3_bind_null(stmt, i);
    break;
  case JSON_OBJECT:
  case JSON_ARRAY: {
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text) return nomem(db);
    /* SQLite calls free on text even when binding fails. */
    rc = sqlite3_bind_text64(stmt, i, text, strlen(text), free, SQLITE_UTF8);
    break;
  }
  }
  return rc == SQLITE_OK ? 0 : sqlite_err(db, rc);
}

/* SQLite reads "$1" as a named parameter and numbers parameters by first appearance, so
 * "$2 ... $1" gets indexes 1 and 2: bind by name. Every value must be used, as PostgreSQL
 * cannot type a parameter the statement never mentions. */
static int bind_params(tg_db *db, sqlite3_stmt *stmt, json_t *params) {
  if (params && !json_is_array(params))
    return set_err(db, TG_E_INVAL, "parameters must be a JSON array");
  size_t given = json_array_size(params);
  int count = sqlite3_bind_parameter_count(stmt);
  for (int i = 1; i <= count; i++) {
    const char *name = sqlite3_bind_parameter_name(stmt, i);
    size_t n = param_number(name);
    if (!n)
      return set_err(db, TG_E_INVAL, "SQL parameter %s is not of the form $N (N from 1)",
                     name ? name : "?");
    if (n > given && !params) /* callers pass json_pack(...): NULL when it failed */
      return set_err(db, TG_E_NOMEM, "the parameters of the statement could not be built");
    if (n > given)
      return set_err(db, TG_E_INVAL, "SQL parameter %s has no value (%zu given)", name, given);
    int r = bind_value(db, stmt, i, json_array_get(params, n - 1));
    if (r < 0) return r;
  }
  if ((size_t)count != given) /* the names are distinct and all within 1..given */
    return set_err(db, TG_E_INVAL, "%zu parameters given but the statement uses %d", given, count);
  return 0;
}

static int column_value(tg_db *db, sqlite3_stmt *stmt, int i, const char *name, json_t **ret) {
  json_t *v = NULL;
  switch (sqlite3_column_type(stmt, i)) {
  case SQLITE_INTEGER:
    v = json_integer(sqlite3_column_int64(stmt, i));
    break;
  case SQLITE_FLOAT: {
    double d = sqlite3_column_double(stmt, i);
    if (!isfinite(d)) /* SQLite stores infinities; JSON has none */
      return set_err(db, TG_E_DB, "column %s holds a non-finite number", name);
    v = json_real(d);
    break;
  }
  case SQLITE_NULL:
    v = json_null();
    break;
  default: { /* TEXT or BLOB */
    const unsigned char *p = sqlite3_column_text(stmt, i);
    size_t len = (size_t)sqlite3_column_bytes(stmt, i);
    if (!p) {
      if (sqlite3_errcode(db->conn) == SQLITE_NOMEM) return nomem(db);
      p = (const unsigned char *)"", len = 0; /* an empty BLOB */
    }
    /* Checked first, to tell a bad value from a failed allocation. */
    if (!tg_utf8_valid((const char *)p, len))
      return set_err(db, TG_E_DB, "column %s holds text that is not valid UTF-8", name);
    v = json_stringn_nocheck((const char *)p, len);
    break;
  }
  }
  if (!v) return nomem(db);
  *ret = v;
  return 0;
}

static int row_object(tg_db *db, sqlite3_stmt *stmt, json_t **ret) {
  _cleanup_json_ json_t *row = json_object();
  if (!row) return nomem(db);
  int n = sqlite3_column_count(stmt);
  for (int i = 0; i < n; i++) {
    const char *name = sqlite3_column_name(stmt, i);
    if (!name) return nomem(db);
    if (!tg_utf8_valid(name, strlen(name)))
      return set_err(db, TG_E_INVAL, "a column name is not valid UTF-8");
    /* Silently keeping one of two same-named columns (a join's "id") would hide a bug. */
    if (json_object_get(row, name))
      return set_err(db, TG_E_INVAL, "column name %s appears twice; alias one", name);
    json_t *v = NULL;
    int r = column_value(db, stmt, i, name, &v);
    if (r < 0) return r;
    if (json_object_set_new_nocheck(row, name, v) < 0) return nomem(db);
  }
  *ret = TAKE_PTR(row);
  return 0;
}

/* Binds params and steps the statement to its end (or its first row when first_only),
 * appending rows to rows when not NULL. Leaves the statement reset and unbound. */
static int run(tg_db *db, const char *sql, json_t *params, json_t *rows, bool first_only) {
  sqlite3_stmt *stmt = NULL;
  int r = prepare(db, sql, &stmt);
  if (r < 0) return r;
  r = bind_params(db, stmt, params);
  while (r == 0) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      r = sqlite_err(db, rc);
      break;
    }
    if (!rows) continue; /* exec: a RETURNING clause only takes effect when stepped */
    if (json_array_size(rows) == MAX_ROWS) {
      r = set_err(db, TG_E_TOO_LARGE, "the query returns more than %d rows", MAX_ROWS);
      break;
    }
    json_t *row = NULL;
    r = row_object(db, stmt, &row);
    if (r == 0 && json_array_append_new(rows, row) < 0) r = nomem(db);
    if (first_only) break;
  }
  sqlite3_reset(stmt); /* repeats a step error already reported */
  sqlite3_clear_bindings(stmt);
  return r;
}

static int query(tg_db *db, const char *sql, json_t *params, bool first_only, json_t **ret_rows) {
  *ret_rows = NULL;
  if (injected(db)) return injected_failure(db);
  _cleanup_json_ json_t *rows = json_array();
  if (!rows) return nomem(db);
  int r = run(db, sql, params, rows, first_only);
  if (r < 0) return r;
  *ret_rows = TAKE_PTR(rows);
  return 0;
}

static int exec_stmt(tg_db *db, const char *sql, json_t *params, int64_t *ret_changes) {
  if (ret_changes) *ret_changes = 0;
  if (injected(db)) return injected_failure(db);
  int64_t before = sqlite3_total_changes64(db->conn);
  int r = run(db, sql, params, NULL, false);
  /* sqlite3_changes64 keeps the count of the last INSERT/UPDATE/DELETE, even after DDL. */
  if (r == 0 && ret_changes && sqlite3_total_changes64(db->conn) != before)
    *ret_changes = sqlite3_changes64(db->conn);
  return r;
}

/* The public three steal params, also on failure. */
int tg_db_exec(tg_db *db, const char *sql, json_t *params, int64_t *ret_changes) {
  int r = exec_stmt(db, sql, params, ret_changes);
  json_decref(params);
  return r;
}

int tg_db_query(tg_db *db, const char *sql, json_t *params, json_t **ret_rows) {
  int r = query(db, sql, params, false, ret_rows);
  json_decref(params);
  return r;
}

int tg_db_query_row(tg_db *db, const char *sql, json_t *params, json_t **ret_row) {
  *ret_row = NULL;
  _cleanup_json_ json_t *rows = NULL;
  int r = query(db, sql, params, true, &rows);
  json_decref(params);
  if (r < 0) return r;
  *ret_row = json_incref(json_array_get(rows, 0));
  return 0;
}

/* Lets the next writer of this process in once the transaction is over. */
static void write_done(tg_db *db) {
  if (!db->writing || !sqlite3_get_autocommit(db->conn)) return;
  db->writing = false;
  pthread_mutex_unlock(&db->file->write);
}

/* tg_db_begin, or with wait false tg_db_try_begin. */
static int begin(tg_db *db, bool wait) {
  if (!sqlite3_get_autocommit(db->conn))
    return set_err(db, TG_E_DB, "cannot start a transaction within a transaction");
  struct timespec until = tg_monotonic_after(BUSY_TIMEOUT_MS);
  /* EDEADLK: this thread's other connection writes; SQLite would answer busy as well. */
  int rc = wait ? pthread_mutex_clocklock(&db->file->write, CLOCK_MONOTONIC, &until)
                : pthread_mutex_trylock(&db->file->write);
  if (rc != 0) return set_err(db, TG_E_BUSY, "database is locked");
  db->writing = true;
  if (!wait) sqlite3_busy_timeout(db->conn, 0); /* another process's lock: busy at once */
  int r = run(db, "BEGIN IMMEDIATE", NULL, NULL, false);
  if (!wait) sqlite3_busy_timeout(db->conn, BUSY_TIMEOUT_MS);
  write_done(db);
  return r;
}

int tg_db_begin(tg_db *db) { return begin(db, true); }

int tg_db_try_begin(tg_db *db) { return begin(db, false); }

int tg_db_commit(tg_db *db) {
  int r = run(db, "COMMIT", NULL, NULL, false);
  write_done(db);
  return r;
}

int tg_db_rollback(tg_db *db) {
  int r = sqlite3_get_autocommit(db->conn) ? 0 : run(db, "ROLLBACK", NULL, NULL, false);
  write_done(db);
  return r;
}

/* ---- group commit ----
 * Calls of every thread write through one lock, each a short transaction: a commit per
 * call, and a hand-off of the lock between threads per call, which leaves the processors
 * idle while the next writer wakes up. tg_db_batch queues a job instead; the first thread
 * to find no transaction under way leads one for every job queued meanwhile, each in a
 * savepoint of its own, and commits them together. */

typedef struct batch_job {
  tg_db_job_fn fn;
  void *arg;
  int status;
  char why[200]; /* the failure's message, from the connection that ran the job */
  bool done;
  /* Posted once the job is done, or to hand its owner the lead: each waiter is woken for
   * itself, not all of them on every commit. */
  sem_t wake;
  struct batch_job *next;
} batch_job;

enum { BATCH_MAX = 64 }; /* jobs in one transaction */

static int configure(tg_db *db);

/* The file's writer, opened at its first use; NULL (logged) when it cannot be, and the
 * batch fails: a caller's own connection never writes a batch, so that while a job runs, its
 * caller's connection sees committed rows only (see tg_db_batch). Only the thread leading a
 * batch calls it. */
static tg_db *file_writer(shared_file *f) {
  if (f->writer) return f->writer;
  tg_db *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->errmsg = "";
  w->file = f;
  w->file_writer = true;
  int rc = sqlite3_open_v2(f->path, &w->conn,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE, NULL);
  if (rc != SQLITE_OK || configure(w) < 0) {
    tg_log(TG_LOG_ERROR, "db: %s: cannot open the connection writes go through: %s", f->path,
           w->conn ? sqlite3_errmsg(w->conn) : "out of memory");
    tg_db_close(w);
    return NULL;
  }
  return f->writer = w;
}

/* Runs jobs (a list of at most BATCH_MAX) in one transaction on db (NULL: there is no
 * writer, they fail) and sets their status. */
static void run_batch(tg_db *db, batch_job *jobs) {
  if (!db) {
    for (batch_job *j = jobs; j; j = j->next) {
      j->status = TG_E_DB;
      snprintf(j->why, sizeof j->why, "no connection to write through");
    }
    return;
  }
  int r = tg_db_begin(db);
  for (batch_job *j = jobs; j; j = j->next) {
    if (r < 0) {
      j->status = r;
      continue;
    }
    j->status = run(db, "SAVEPOINT job", NULL, NULL, false);
    if (j->status == TG_OK) j->status = j->fn(j->arg, db);
    if (j->status < 0) snprintf(j->why, sizeof j->why, "%s", db->errmsg);
    if (sqlite3_get_autocommit(db->conn)) {
      /* SQLite ended the whole transaction on an error (a full disk, an I/O error): what
       * the jobs before wrote is gone with it. The rest get a transaction of their own. */
      for (batch_job *lost = jobs; lost != j->next; lost = lost->next) {
        if (lost->status < 0) continue;
        lost->status = TG_E_DB;
        snprintf(lost->why, sizeof lost->why, "the transaction was rolled back: %s", db->errmsg);
      }
      write_done(db);
      r = tg_db_begin(db);
      continue;
    }
    if (j->status < 0) {
      int undone = run(db, "ROLLBACK TO job", NULL, NULL, false);
      if (undone < 0) r = undone; /* nothing can be trusted to commit */
    }
    if (r == TG_OK) r = run(db, "RELEASE job", NULL, NULL, false);
  }
  if (r == TG_OK) r = tg_db_commit(db);
  if (r < 0) {
    for (batch_job *j = jobs; j; j = j->next)
      if (j->status >= 0) j->status = r;
    tg_db_rollback(db);
  }
  for (batch_job *j = jobs; j; j = j->next)
    if (j->status < 0 && !*j->why) snprintf(j->why, sizeof j->why, "%s", db->errmsg);
}

void (*tg_db_test_queued)(void);

/* Set while this thread runs a batch: a job that queued another would wait for itself. */
static _Thread_local bool running_jobs;

int tg_db_batch(tg_db *db, tg_db_job_fn fn, void *arg) {
  if (running_jobs)
    return set_err(db, TG_E_INVAL, "a job of a shared transaction cannot queue another");
  shared_file *f = db->file;
  batch_job job = {.fn = fn, .arg = arg};
  sem_init(&job.wake, 0, 0);
  pthread_mutex_lock(&f->jobs_lock);
  if (f->jobs_tail) f->jobs_tail->next = &job;
  else f->jobs = &job;
  f->jobs_tail = &job;
  bool lead = !f->leading;
  f->leading = true;
  pthread_mutex_unlock(&f->jobs_lock);
  if (tg_db_test_queued) tg_db_test_queued();
  if (!lead) {
    while (sem_wait(&job.wake) < 0) continue; /* EINTR */
    lead = !job.done; /* handed the lead, with this job first in the queue */
  }
  while (!job.done) {
    /* Lead: take what is queued (this job among it), run it, wake the others it held. */
    pthread_mutex_lock(&f->jobs_lock);
    batch_job *batch = f->jobs, *last = batch;
    for (int n = 1; n < BATCH_MAX && last->next; n++) last = last->next;
    f->jobs = last->next;
    if (!f->jobs) f->jobs_tail = NULL;
    last->next = NULL;
    pthread_mutex_unlock(&f->jobs_lock);
    /* The writer counts down the leader's failure hook (tg_db_fail_after), as the leader's
     * own connection would. */
    tg_db *w = file_writer(f);
    if (w) w->fail_after = db->fail_after;
    running_jobs = true;
    run_batch(w, batch);
    running_jobs = false;
    if (w) {
      db->fail_after = w->fail_after;
      w->fail_after = 0;
    }
    for (batch_job *j = batch, *next; j; j = next) {
      next = j->next; /* j's owner may return (and free it) once woken */
      j->done = true;
      if (j != &job) sem_post(&j->wake);
    }
  }
  if (lead) {
    /* Hand the lead to the owner of the next job queued, or give it up. */
    pthread_mutex_lock(&f->jobs_lock);
    batch_job *next = f->jobs;
    if (!next) f->leading = false;
    pthread_mutex_unlock(&f->jobs_lock);
    if (next) sem_post(&next->wake);
  }
  sem_destroy(&job.wake);
  if (job.status < 0 && job.why[0]) set_err(db, job.status, "%s", job.why);
  return job.status;
}

int tg_db_read_only(tg_db *db, bool on) {
  int r = run(db, on ? "PRAGMA query_only = ON" : "PRAGMA query_only = OFF", NULL, NULL, false);
  if (r == 0) db->read_only = on;
  return r;
}

/* Transaction statements run from the statement cache too: sqlite3_exec would parse them
 * again at every call. */
bool tg_db_snapshot(tg_db *db) {
  return sqlite3_get_autocommit(db->conn) && run(db, "BEGIN DEFERRED", NULL, NULL, false) == 0;
}

void tg_db_snapshot_end(tg_db *db, bool began) {
  if (began && run(db, "COMMIT", NULL, NULL, false) < 0) run(db, "ROLLBACK", NULL, NULL, false);
}

bool tg_db_writing(tg_db *db) { return sqlite3_txn_state(db->conn, NULL) == SQLITE_TXN_WRITE; }

bool tg_db_at_rest(tg_db *db) {
  return sqlite3_get_autocommit(db->conn) && !db->writing && !db->read_only;
}

void *tg_db_kept(tg_db *db) { return db->kept; }

void tg_db_keep(tg_db *db, void *value, void (*free_fn)(void *)) {
  if (db->kept_free) db->kept_free(db->kept);
  db->kept = value;
  db->kept_free = free_fn;
}

const char *tg_db_errmsg(tg_db *db) { return db->errmsg; }

void tg_db_fail_after(tg_db *db, int n) { db->fail_after = n > 0 ? n : 0; }

static shared_file *new_shared_file(const char *path, const struct stat *st) {
  shared_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return NULL;
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  /* Relocking by the owner fails (EDEADLK) rather than hangs: see tg_db_begin. */
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(&f->write, &attr);
  pthread_mutexattr_destroy(&attr);
  pthread_mutex_init(&f->lock, NULL);
  pthread_cond_init(&f->wake, NULL);
  pthread_mutex_init(&f->jobs_lock, NULL);
  f->dev = st->st_dev;
  f->ino = st->st_ino;
  f->checkpoint_at = CHECKPOINT_PAGES;
  return f;
}

/* The shared state of the file db opened, found by device and inode. */
static int share_file(tg_db *db, const char *path) {
  struct stat st;
  if (stat(path, &st) < 0) return set_err(db, TG_E_DB, "%s: %s", path, strerror(errno));
  pthread_mutex_lock(&files_lock);
  shared_file *f = files;
  while (f && !(f->dev == st.st_dev && f->ino == st.st_ino)) f = f->next;
  if (!f && (f = new_shared_file(path, &st))) {
    f->next = files;
    files = f;
  }
  if (f) f->refs++;
  pthread_mutex_unlock(&files_lock);
  db->file = f;
  return f ? 0 : nomem(db);
}

static void unshare_file(shared_file *f) {
  if (!f) return;
  pthread_mutex_lock(&files_lock);
  bool last = --f->refs == 0;
  if (last) {
    shared_file **p = &files;
    while (*p != f) p = &(*p)->next;
    *p = f->next;
  }
  pthread_mutex_unlock(&files_lock);
  if (!last) return;
  pthread_mutex_lock(&f->lock);
  f->stop = true;
  pthread_cond_signal(&f->wake);
  pthread_mutex_unlock(&f->lock);
  if (f->running) pthread_join(f->checkpointer, NULL);
  tg_db_close(f->writer);
  pthread_mutex_destroy(&f->write);
  pthread_mutex_destroy(&f->lock);
  pthread_cond_destroy(&f->wake);
  pthread_mutex_destroy(&f->jobs_lock);
  free(f->path);
  free(f);
}

static void checkpoint(shared_file *f, sqlite3 *conn, int pages) {
  /* Copies the log into the database file and syncs it while writers go on. */
  sqlite3_wal_checkpoint_v2(conn, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  if (pages < RESTART_PAGES) return;
  /* Restarting takes SQLite's write lock: this process's writers wait on the mutex, for
   * what was logged since the pass above and for the readers still in the old log. */
  pthread_mutex_lock(&f->write);
  sqlite3_wal_checkpoint_v2(conn, NULL, SQLITE_CHECKPOINT_RESTART, NULL, NULL);
  pthread_mutex_unlock(&f->write);
}

/* Empties the log once every page in it is in the database file, so that a burst of writes
 * does not leave its high mark on disk. It holds this process's writers meanwhile, so it
 * waits for readers and other processes only briefly: false when they kept it from
 * finishing, to be tried again after the next idle spell. */
static bool truncate_log(shared_file *f, sqlite3 *conn) {
  pthread_mutex_lock(&f->write);
  sqlite3_busy_timeout(conn, TRUNCATE_BUSY_MS);
  int rc = sqlite3_wal_checkpoint_v2(conn, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  sqlite3_busy_timeout(conn, BUSY_TIMEOUT_MS);
  pthread_mutex_unlock(&f->write);
  return rc == SQLITE_OK;
}

/* The checkpoint thread: its own connection, one checkpoint per request, until the last
 * connection of the process to the file closes. A checkpoint that cannot finish (readers)
 * is simply asked for again later. After commits, the log is truncated when no commit came
 * for tg_db_shrink_idle_ms (tried again after each such spell until it is). */
static void *checkpointer_main(void *arg) {
  shared_file *f = arg;
  sqlite3 *conn = NULL;
  /* A connection knows the file is in WAL mode once it has read it: until then its
   * checkpoints do nothing. */
  if (sqlite3_open_v2(f->path, &conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) ==
      SQLITE_OK) {
    sqlite3_busy_timeout(conn, BUSY_TIMEOUT_MS);
    sqlite3_exec(conn, "PRAGMA schema_version", NULL, NULL, NULL);
  }
  pthread_mutex_lock(&f->lock);
  for (;;) {
    while (!f->due && !f->stop) {
      unsigned long seen = f->commits;
      if (!conn || seen == f->truncated_at) {
        pthread_cond_wait(&f->wake, &f->lock);
      } else if (tg_timed_wait(&f->wake, &f->lock, tg_db_shrink_idle_ms) &&
                 f->commits == seen && !f->due && !f->stop) {
        pthread_mutex_unlock(&f->lock);
        bool truncated = truncate_log(f, conn);
        pthread_mutex_lock(&f->lock);
        if (truncated) f->truncated_at = seen;
      }
    }
    if (f->stop) break;
    int pages = f->due;
    f->due = 0;
    pthread_mutex_unlock(&f->lock);
    if (conn) checkpoint(f, conn, pages);
    pthread_mutex_lock(&f->lock);
  }
  pthread_mutex_unlock(&f->lock);
  sqlite3_close(conn);
  return NULL;
}

/* Starts f's checkpoint thread with every signal blocked: it may start before the process
 * blocks the signals a thread of its own waits for (toolgate mcp commits its run first), and
 * a signal the kernel gave it would take its default action, ending the process. */
static bool start_checkpointer(shared_file *f) {
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &was);
  bool started = pthread_create(&f->checkpointer, NULL, checkpointer_main, f) == 0;
  pthread_sigmask(SIG_SETMASK, &was, NULL);
  return started;
}

/* Runs after each commit, with the log's size in pages: starts the checkpoint thread, wakes
 * it at the first commit since the log was truncated and asks it for a checkpoint (see
 * shared_file); without a thread, the committing connection checkpoints itself. */
static int wal_hook(void *arg, sqlite3 *conn, const char *schema, int pages) {
  shared_file *f = arg;
  bool here = false;
  pthread_mutex_lock(&f->lock);
  if (!f->running) f->running = start_checkpointer(f);
  if (++f->commits == f->truncated_at + 1) pthread_cond_signal(&f->wake);
  if (pages < f->checkpoint_at - CHECKPOINT_PAGES) /* the log restarted */
    f->checkpoint_at = CHECKPOINT_PAGES;
  if (pages >= f->checkpoint_at) {
    f->checkpoint_at = pages + CHECKPOINT_PAGES;
    f->due = pages;
    here = !f->running;
    pthread_cond_signal(&f->wake);
  }
  pthread_mutex_unlock(&f->lock);
  if (here) sqlite3_wal_checkpoint_v2(conn, schema, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  return SQLITE_OK;
}

static int configure(tg_db *db) {
  sqlite3_wal_hook(db->conn, wal_hook, db->file);
  int rc = sqlite3_busy_timeout(db->conn, BUSY_TIMEOUT_MS);
  if (rc != SQLITE_OK) return sqlite_err(db, rc);
  /* journal_mode answers with the mode in force, which stays "delete" where WAL is
   * impossible (no shared memory); foreign_keys is silently ignored when compiled out. */
  _cleanup_json_ json_t *mode = NULL;
  int r = tg_db_query_row(db, "PRAGMA journal_mode = WAL", NULL, &mode);
  if (r < 0) return r;
  const char *got = json_string_value(json_object_get(mode, "journal_mode"));
  if (!got || strcasecmp(got, "wal") != 0)
    return set_err(db, TG_E_DB, "cannot use WAL mode (journal_mode is %s)", got ? got : "?");
  r = tg_db_exec(db, "PRAGMA synchronous = NORMAL", NULL, NULL);
  if (r == 0) r = tg_db_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL);
  if (r < 0) return r;
  _cleanup_json_ json_t *fk = NULL;
  r = tg_db_query_row(db, "PRAGMA foreign_keys", NULL, &fk);
  if (r < 0) return r;
  if (json_integer_value(json_object_get(fk, "foreign_keys")) != 1)
    return set_err(db, TG_E_DB, "this SQLite does not enforce foreign keys");
  return 0;
}

/* SQLite counts the memory it holds under one process-wide mutex at every allocation (this
 * build has no lookaside, so every row, cursor and statement allocates): with a connection
 * per thread that mutex was contended on every call. Nothing here reads the counts. Must run
 * before SQLite initializes; if something initialized it first, this is only slower. */
static void sqlite_setup(void) { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

int tg_db_open(const char *dir, tg_db **ret, char **reterr) {
  static pthread_once_t setup = PTHREAD_ONCE_INIT;
  pthread_once(&setup, sqlite_setup);
  *ret = NULL;
  if (reterr) *reterr = NULL;
  tg_db *db = calloc(1, sizeof *db);
  if (!db) return TG_E_NOMEM; /* and no room for a message either */
  db->errmsg = "";

  _cleanup_free_ char *path = NULL;
  int r = 0;
  if (asprintf(&path, "%s/toolgate.db", dir) < 0) {
    path = NULL;
    r = nomem(db);
  }
  if (r == 0) {
    /* NOMUTEX: a connection belongs to one thread at a time. EXRESCODE: extended codes. */
    int rc = sqlite3_open_v2(path, &db->conn,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                                 SQLITE_OPEN_EXRESCODE,
                             NULL);
    if (!db->conn)
      r = nomem(db);
    else if (rc != SQLITE_OK)
      r = set_err(db, status_of(rc), "%s: %s", path, sqlite3_errmsg(db->conn));
    else if ((r = share_file(db, path)) == 0)
      r = configure(db);
  }
  if (r < 0) {
    if (reterr) *reterr = strdup(db->errmsg);
    tg_db_close(db);
    return r;
  }
  *ret = db;
  return 0;
}

void tg_db_close(tg_db *db) {
  if (!db) return;
  for (cached_stmt *c = db->cache; c < db->cache + STMT_CACHE_SIZE; c++) {
    sqlite3_finalize(c->stmt);
    free(c->sql);
  }
  if (db->kept_free) db->kept_free(db->kept);
  sqlite3_close_v2(db->conn); /* rolls back an open transaction */
  if (db->writing) pthread_mutex_unlock(&db->file->write);
  if (!db->file_writer) unshare_file(db->file);
  free(db->errbuf);
  free(db);
}

int tg_db_schema_version(tg_db *db, int *ret_version) {
  *ret_version = 0;
  _cleanup_json_ json_t *table = NULL;
  int r = tg_db_query_row(
      db,
      "SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
      NULL, &table);
  if (r < 0 || !table) return r;
  _cleanup_json_ json_t *row = NULL;
  r = tg_db_query_row(db, "SELECT COALESCE(MAX(version), 0) AS version FROM schema_migrations",
                      NULL, &row);
  if (r < 0) return r;
  *ret_version = (int)json_integer_value(json_object_get(row, "version"));
  return 0;
}

/* The embedded migrations must be 0001_x.sql, 0002_y.sql, ... in this order, without gaps
 * or duplicates: the number is the version recorded in schema_migrations. */
static int check_migrations(tg_db *db, int *ret_latest) {
  int n = 0;
  for (const tg_embedded_file *m = tg_embedded_migrations; m->name; m++) {
    const char *s = m->name;
    size_t len = strlen(s);
    bool ok = len > 9 && s[4] == '_' && strcmp(s + len - 4, ".sql") == 0;
    int number = 0;
    for (int i = 0; ok && i < 4; i++) {
      ok = s[i] >= '0' && s[i] <= '9';
      number = number * 10 + (s[i] - '0');
    }
    if (!ok) return set_err(db, TG_E_INVAL, "migration %s is not named NNNN_name.sql", s);
    if (number != ++n)
      return set_err(db, TG_E_INVAL, "migration %s: expected number %04d (no gaps, no duplicates)",
                     s, n);
    if (strlen(m->data) != m->size) /* sqlite3_exec would stop there silently */
      return set_err(db, TG_E_INVAL, "migration %s contains a NUL byte", s);
  }
  *ret_latest = n;
  return 0;
}

/* Runs migration m (number version) inside the caller's transaction and records it. */
static int apply(tg_db *db, const tg_embedded_file *m, int version) {
  if (injected(db)) return injected_failure(db);
  char *msg = NULL;
  int rc = sqlite3_exec(db->conn, m->data, NULL, NULL, &msg);
  if (rc != SQLITE_OK) {
    int r = set_err(db, status_of(rc), "migration %s: %s", m->name, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return r;
  }
  if (sqlite3_get_autocommit(db->conn))
    return set_err(db, TG_E_INVAL, "migration %s ends the transaction it runs in", m->name);
  char stamp[TG_ISO_LEN + 1];
  tg_now_iso(stamp);
  json_t *params = json_pack("[iss]", version, m->name, stamp);
  if (!params) return nomem(db); /* rather than the TG_E_INVAL of a NULL params */
  return tg_db_exec(db,
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    params, NULL);
}

int tg_db_migrate(tg_db *db, int *ret_applied) {
  if (ret_applied) *ret_applied = 0;
  int latest = 0, current = 0;
  int r = check_migrations(db, &latest);
  /* Read first, without the write lock, which another process may hold long: a database
   * that is up to date (the usual case) needs no write at all. */
  if (r == 0) r = tg_db_schema_version(db, &current);
  if (r == 0 && current == latest) return 0;
  if (r == 0)
    r = tg_db_exec(db,
                   "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                   "name TEXT NOT NULL, applied_at TEXT NOT NULL)",
                   NULL, NULL);
  for (int applied = 0; r == 0; applied++) {
    if (ret_applied) *ret_applied = applied;
    /* The version is read under the write lock, so two processes starting at once apply
     * each migration once. */
    r = tg_db_begin(db);
    if (r < 0) break;
    int version = 0;
    r = tg_db_schema_version(db, &version);
    if (r == 0 && version > latest)
      r = set_err(db, TG_E_INVAL,
                  "the database is at schema version %d, newer than this build (%d)", version,
                  latest);
    if (r == 0 && version == latest) return tg_db_rollback(db);
    if (r == 0) r = apply(db, &tg_embedded_migrations[version], version + 1);
    if (r == 0) r = tg_db_commit(db);
    if (r < 0 && !sqlite3_get_autocommit(db->conn))
      sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL); /* keeps errmsg */
    write_done(db);
  }
  return r;
}

/* Group commit (tg_db_batch): jobs of many threads share a transaction, and each keeps what
 * it wrote exactly when it is told it succeeded. */
#include "support.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "util/status.h"

enum { QUEUED = 7, THREADS = 4, JOBS = 100 };

typedef enum { JOB_OK, JOB_FAILS, JOB_ENDS_TRANSACTION } job_kind;

typedef struct job {
  char id[32];
  job_kind kind;
  pthread_t owner;
  bool ran_elsewhere;
  int status;
  struct gate *gate; /* the first job's: it holds its transaction until the others queued */
} job;

/* The first job has started (so it leads), and how many jobs are queued (tg_db_test_queued),
 * the first one's included. */
typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool started;
  int queued;
} gate;

static char *dir;
static gate the_gate = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void count_queued(void) {
  pthread_mutex_lock(&the_gate.lock);
  the_gate.queued++;
  pthread_cond_broadcast(&the_gate.cond);
  pthread_mutex_unlock(&the_gate.lock);
}

/* Writes one tenant row named after the job; then fails, or ends the transaction (as SQLite
 * does on some errors), as the job says. */
static int run_job(void *arg, tg_db *db) {
  job *j = arg;
  j->ran_elsewhere = !pthread_equal(j->owner, pthread_self());
  if (j->gate) {
    pthread_mutex_lock(&j->gate->lock);
    j->gate->started = true;
    pthread_cond_broadcast(&j->gate->cond);
    while (j->gate->queued < 1 + QUEUED) pthread_cond_wait(&j->gate->cond, &j->gate->lock);
    pthread_mutex_unlock(&j->gate->lock);
  }
  int r = tg_db_exec(db, "INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, $1, 'n', 'now')",
                     json_pack("[s]", j->id), NULL);
  if (r < 0) return r;
  if (j->kind == JOB_FAILS) return TG_E_INVAL;
  if (j->kind == JOB_ENDS_TRANSACTION) return tg_db_exec(db, "ROLLBACK", NULL, NULL);
  return TG_OK;
}

static bool row_present(tg_db *db, const char *id) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(db, "SELECT id FROM tenants WHERE id = $1", json_pack("[s]", id), &row), 0);
  bool present = row != NULL;
  json_decref(row);
  return present;
}

typedef struct queued {
  job *j;
  gate *g;
} queued;

/* Waits until the first job leads its transaction, then queues one job behind it. */
static void *queue_one(void *arg) {
  queued *q = arg;
  tg_db *db = tg_test_db_open(dir);
  q->j->owner = pthread_self();
  pthread_mutex_lock(&q->g->lock);
  while (!q->g->started) pthread_cond_wait(&q->g->cond, &q->g->lock);
  pthread_mutex_unlock(&q->g->lock);
  q->j->status = tg_db_batch(db, run_job, q->j);
  tg_db_close(db);
  return NULL;
}

/* Seven jobs queue while a first one holds the transaction: they run together in the next
 * one, led by one of them, on its thread. The one that fails loses its row and only its row; the one whose transaction
 * SQLite ends takes down the rows of the jobs before it in that transaction, which are told
 * so; every job's row is there exactly when it succeeded. */
static void test_queued_jobs_share_a_transaction(void **state) {
  (void)state;
  gate *g = &the_gate;
  job first = {.id = "first", .owner = pthread_self(), .gate = g};
  job others[QUEUED];
  queued q[QUEUED];
  pthread_t threads[QUEUED];
  for (int i = 0; i < QUEUED; i++) {
    others[i] = (job){.kind = i == 2 ? JOB_FAILS : i == 4 ? JOB_ENDS_TRANSACTION : JOB_OK};
    snprintf(others[i].id, sizeof others[i].id, "queued-%d", i);
    q[i] = (queued){&others[i], g};
    assert_int_equal(pthread_create(&threads[i], NULL, queue_one, &q[i]), 0);
  }
  tg_db *db = tg_test_db_open(dir);
  tg_db_test_queued = count_queued;
  first.status = tg_db_batch(db, run_job, &first);
  for (int i = 0; i < QUEUED; i++) pthread_join(threads[i], NULL);
  tg_db_test_queued = NULL;

  assert_int_equal(first.status, TG_OK);
  assert_true(row_present(db, "first"));
  int elsewhere = 0;
  for (int i = 0; i < QUEUED; i++) {
    job *j = &others[i];
    if (row_present(db, j->id) != (j->status == TG_OK))
      fail_msg("job %s: status %d but its row is %s", j->id, j->status,
               j->status == TG_OK ? "missing" : "there");
    elsewhere += j->ran_elsewhere;
  }
  assert_int_equal(others[2].status, TG_E_INVAL);
  assert_int_equal(others[4].status, TG_E_DB);
  assert_int_equal(elsewhere, QUEUED - 1); /* all but the leader's own */
  tg_db_close(db);
}

typedef struct worker_arg {
  int no;
  job jobs[JOBS];
} worker_arg;

static void *many_jobs(void *arg) {
  worker_arg *w = arg;
  tg_db *db = tg_test_db_open(dir);
  for (int i = 0; i < JOBS; i++) {
    job *j = &w->jobs[i];
    snprintf(j->id, sizeof j->id, "w%d-%d", w->no, i);
    j->kind = i % 7 == 3 ? JOB_FAILS : i % 23 == 11 ? JOB_ENDS_TRANSACTION : JOB_OK;
    j->owner = pthread_self();
    j->status = tg_db_batch(db, run_job, j);
  }
  tg_db_close(db);
  return NULL;
}

/* Threads keep queueing jobs, some failing or ending their transaction: whatever the
 * batches were, a row is there exactly when its job was told it succeeded, and a job that
 * fails never is. */
static void test_statuses_match_rows_under_load(void **state) {
  (void)state;
  worker_arg *w = calloc(THREADS, sizeof *w);
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t].no = t;
    assert_int_equal(pthread_create(&threads[t], NULL, many_jobs, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  tg_db *db = tg_test_db_open(dir);
  int ok = 0;
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < JOBS; i++) {
      job *j = &w[t].jobs[i];
      if (j->kind != JOB_OK) assert_int_not_equal(j->status, TG_OK);
      if (row_present(db, j->id) != (j->status == TG_OK))
        fail_msg("job %s: status %d, row disagrees", j->id, j->status);
      ok += j->status == TG_OK;
    }
  assert_true(ok > THREADS * JOBS / 2);
  tg_db_close(db);
  free(w);
}

static int setup(void **state) {
  (void)state;
  dir = tg_test_tmpdir();
  tg_db *db = tg_test_db_open(dir);
  assert_int_equal(tg_db_migrate(db, NULL), 0);
  tg_db_close(db);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tg_test_rmtree(dir);
  free(dir);
  return 0;
}

static int queue_again(void *arg, tg_db *db) {
  int *inner = arg;
  *inner = tg_db_batch(db, run_job, &(job){.id = "inner"});
  return TG_OK;
}

/* A job that queues another (a handler calling back into a call) is refused instead of
 * waiting for itself forever; its own transaction goes on. */
static void test_a_job_cannot_queue_a_job(void **state) {
  (void)state;
  tg_db *db = tg_test_db_open(dir);
  int inner = 0;
  assert_int_equal(tg_db_batch(db, queue_again, &inner), TG_OK);
  assert_int_equal(inner, TG_E_INVAL);
  assert_false(row_present(db, "inner"));
  tg_db_close(db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_queued_jobs_share_a_transaction, setup, teardown),
      cmocka_unit_test_setup_teardown(test_statuses_match_rows_under_load, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_job_cannot_queue_a_job, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

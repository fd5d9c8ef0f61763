/* The storage port: one connection, transactions, parameterized statements whose rows come
 * back as JSON objects, and the numbered migrations embedded in the binary.
 * SQL is written once for both backends: parameters are $1, $2, ... (PostgreSQL style),
 * ids are UUIDv7 text, timestamps ISO-8601 UTC text, booleans 0/1 integers, JSON as text.
 * A connection belongs to one thread at a time. Only src/db/ includes a database header. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct tg_db tg_db;

/* Opens (creating when missing) the SQLite database "toolgate.db" in folder dir, which must
 * exist. Sets WAL, foreign keys, a busy timeout. Does not migrate.
 * Returns 0 and *ret, or negative TG_E_* with *reterr a malloc'd message. */
int tg_db_open(const char *dir, tg_db **ret, char **reterr);
void tg_db_close(tg_db *db);

/* Applies every embedded migration (src/db/migrations/NNNN_name.sql) newer than the recorded
 * version, each in its own transaction, recording it in schema_migrations.
 * *ret_applied (may be NULL) receives how many were applied. */
int tg_db_migrate(tg_db *db, int *ret_applied);
/* Highest applied migration number, 0 on a fresh database. */
int tg_db_schema_version(tg_db *db, int *ret_version);

/* Write transactions take the write lock at BEGIN (SQLite: BEGIN IMMEDIATE), so a writer
 * never fails half-way on a lock upgrade. Not nestable. */
int tg_db_begin(tg_db *db);
/* The same, but answering TG_E_BUSY at once when another writer holds the lock, for a write
 * that must not hold up its thread and can be made later. */
int tg_db_try_begin(tg_db *db);
int tg_db_commit(tg_db *db);
int tg_db_rollback(tg_db *db); /* harmless when no transaction is open */
/* A write transaction shared with other threads' (group commit): fn runs, in a savepoint of
 * its own, inside a transaction that commits the jobs of every thread queued meanwhile on
 * the same database file; when fn fails (< 0), what it wrote is undone and the others'
 * stays. Returns fn's status once the transaction committed, or the failure that kept it
 * from committing (then nothing fn wrote remains). fn may run on another thread, on the
 * connection the file's batches write through: it must write only through the db it is given,
 * must neither begin nor end a transaction, and cannot queue a job itself (refused,
 * TG_E_INVAL). It may read through the caller's db, idle meanwhile, which sees only rows
 * committed before (never the batch's). db must not be in a transaction. */
typedef int (*tg_db_job_fn)(void *arg, tg_db *db);
int tg_db_batch(tg_db *db, tg_db_job_fn fn, void *arg);
/* Tests: called by tg_db_batch once its job is queued, before it runs or waits. */
extern void (*tg_db_test_queued)(void);
/* How long no commit must come, after the log grew past a checkpoint, before it is truncated
 * on disk (10 s; a test shortens it). */
extern _Atomic long long tg_db_shrink_idle_ms;

/* While on, every statement that would write fails (TG_E_DB): for code that must only read. */
int tg_db_read_only(tg_db *db, bool on);
/* Reads that follow, until tg_db_snapshot_end, see one snapshot: SQLite takes one read lock
 * on the log for them all instead of one per statement (each a chance to find the log's
 * index changing under a commit, and to retry and sleep). Returns whether it began one (not
 * inside a transaction). Nothing may be written meanwhile; end it before tg_db_begin. */
bool tg_db_snapshot(tg_db *db);
void tg_db_snapshot_end(tg_db *db, bool began);
/* Whether a write transaction is open on db (what it reads may not be committed). */
bool tg_db_writing(tg_db *db);
/* Whether db is as a new connection would be: no transaction open (not even a snapshot),
 * not read-only. Only such a connection may serve another user. */
bool tg_db_at_rest(tg_db *db);

/* One value its user keeps with a connection, valid for this database only (a cache):
 * tg_db_keep replaces it (freeing the previous one with its free_fn), tg_db_close frees it. */
void *tg_db_kept(tg_db *db);
void tg_db_keep(tg_db *db, void *value, void (*free_fn)(void *));

/* For tg_db_exec, tg_db_query and tg_db_query_row: params is NULL or a JSON array, STOLEN (so call sites can pass json_pack(...) inline; the
 * reference is released even on failure). A NULL params with $N in the SQL fails with
 * TG_E_INVAL, which is also what an out-of-memory json_pack leads to. string → text, integer → int64, real → double,
 * true/false → 1/0, null → NULL, object/array → its compact JSON text.
 * Returns 0, TG_E_CONSTRAINT on a constraint violation, TG_E_BUSY, or TG_E_DB. */
int tg_db_exec(tg_db *db, const char *sql, json_t *params, int64_t *ret_changes);
/* *ret_rows: a new array of objects keyed by column name (INTEGER → integer, REAL → real,
 * TEXT/BLOB → string, NULL → null). */
int tg_db_query(tg_db *db, const char *sql, json_t *params, json_t **ret_rows);
/* First row as a new object, or *ret_row = NULL (and 0) when there is none. */
int tg_db_query_row(tg_db *db, const char *sql, json_t *params, json_t **ret_row);

/* The message of the last failure on this connection (valid until the next call). */
const char *tg_db_errmsg(tg_db *db);

/* Test hook: make the n-th next statement (exec or query; 1 = the very next) fail with
 * TG_E_DB, to prove that failures roll back cleanly. 0 disarms. */
void tg_db_fail_after(tg_db *db, int n);

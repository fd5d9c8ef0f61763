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
int tg_db_commit(tg_db *db);
int tg_db_rollback(tg_db *db); /* harmless when no transaction is open */
/* While on, every statement that would write fails (TG_E_DB): for code that must only read. */
int tg_db_read_only(tg_db *db, bool on);

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

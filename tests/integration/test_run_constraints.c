/* Migration 0006: the CHECK constraints of agent_runs.status and agent_run_logs.level, which
 * every tool call meets, are plain comparisons (no ephemeral table per INSERT), accept
 * exactly what they accepted before, and a database at version 5 keeps its rows. SQLite is
 * opened directly only to build that version-5 database, which the port cannot stop at. */
#include "support.h"

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "util/embed.h"
#include "util/status.h"

#define OLD_STATUS "status IN ('running', 'completed', 'failed', 'cancelled')"
#define OLD_LEVEL "level IN ('INFO', 'WARN', 'ERROR')"

/* The statements of src/core/call.c that run on tool calls, with parameters for EXPLAIN. */
static const struct {
  const char *sql;
  const char *params;
} hot[] = {
    {"INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at,"
     " ended_at) VALUES ($1, $2, $3, $4, 'call', $5, $5)",
     "[\"r\", \"t\", \"a\", \"completed\", \"now\"]"},
    {"INSERT INTO agent_run_logs (id, tenant_id, run_id, principal_id, step,"
     " level, message, metadata, created_at)"
     " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
     "[\"l\", \"t\", \"r\", \"p\", \"tool:x\", \"INFO\", \"ok\", \"{}\", \"now\"]"},
    {"UPDATE agent_runs SET status = 'failed' WHERE id = $1", "[\"r\"]"},
    {"INSERT INTO activity_log (id, tenant_id, mission_id, idea_id, work_id, actor_type,"
     " actor_id, action_type, summary, details, created_at)"
     " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
     "[\"v\", \"t\", null, null, null, \"agent\", \"a\", \"X\", \"s\", null, \"now\"]"},
};

/* Rows a database at version 5 holds before it is migrated: every status and level. */
static const char *const v5_rows[] = {
    "INSERT INTO tenants (id, slug, name, created_at) VALUES ('t1', 'acme', 'acme', 'now')",
    "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ('pu', 't1', 'user', 'now')",
    "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ('pa', 't1', 'agent', 'now')",
    "INSERT INTO agents (id, tenant_id, principal_id, slug, name, scope_type, status, created_at,"
    " updated_at) VALUES ('a1', 't1', 'pa', 'scout', 'Scout', 'tenant', 'active', 'now', 'now')",
    "INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at) VALUES"
    " ('r1', 't1', 'a1', 'running', 'manual', '2026-01-01'),"
    " ('r2', 't1', 'a1', 'completed', 'call', '2026-01-02'),"
    " ('r3', 't1', 'a1', 'failed', 'call', '2026-01-03'),"
    " ('r4', 't1', 'a1', 'cancelled', 'manual', '2026-01-04')",
    "DELETE FROM agent_runs WHERE id = 'r2'", /* a gap in the rowids, which must stay */
    "INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at, ended_at)"
    " VALUES ('r2', 't1', 'a1', 'completed', 'call', '2026-01-02', '2026-01-02')",
    "INSERT INTO agent_run_logs (id, tenant_id, run_id, principal_id, step, level, message,"
    " metadata, created_at) VALUES"
    " ('l1', 't1', 'r1', 'pa', 'tool:x', 'INFO', 'ok', '{}', 'now'),"
    " ('l2', 't1', 'r2', 'pa', 'tool:y', 'WARN', 'NOT_FOUND', '{\"code\":1}', 'now'),"
    " ('l3', 't1', NULL, 'pu', 'tool:z', 'ERROR', 'INTERNAL_ERROR', '{}', 'now')",
    "INSERT INTO repos (id, tenant_id, scope_type, scope_id, name, path, default_branch,"
    " created_at) VALUES ('g1', 't1', 'mission', 'm1', 'mission', 'repos/m1', 'main', 'now')",
    "INSERT INTO repo_ref_moves (id, repo_id, branch, new_sha, principal_id, run_id, tool,"
    " created_at, seq) VALUES ('mv1', 'g1', 'main', 'abc', 'pa', 'r3', 'x', 'now', 1)",
};

/* What must not change: the rows (with their rowids) of the tables the migration touches or
 * that refer to them, their columns, defaults, keys and indexes, and every other schema
 * entry of version 5 (temp table v5_schema; later migrations add their own). */
static const char *const kept[] = {
    "SELECT rowid AS rid, * FROM agent_runs ORDER BY rowid",
    "SELECT rowid AS rid, * FROM agent_run_logs ORDER BY rowid",
    "SELECT rowid AS rid, * FROM repo_ref_moves ORDER BY rowid",
    "SELECT * FROM pragma_table_xinfo('agent_runs')",
    "SELECT * FROM pragma_table_xinfo('agent_run_logs')",
    "SELECT * FROM pragma_foreign_key_list('agent_runs')",
    "SELECT * FROM pragma_foreign_key_list('agent_run_logs')",
    "SELECT * FROM pragma_index_list('agent_runs')",
    "SELECT * FROM pragma_index_list('agent_run_logs')",
    "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema WHERE name IN"
    " (SELECT name FROM v5_schema) AND name NOT IN ('agent_runs', 'agent_run_logs') ORDER BY name",
    "SELECT name, rootpage FROM sqlite_schema WHERE name IN ('agent_runs', 'agent_run_logs')"
    " ORDER BY name",
};
enum { N_KEPT = sizeof kept / sizeof *kept };

typedef tg_test_db fixture;

static json_t *rows_of(tg_db *db, const char *sql, const char *params) {
  json_t *rows = NULL;
  int r = tg_db_query(db, sql, params ? tg_test_json(params) : NULL, &rows);
  if (r != 0) fail_msg("%s: %d %s", sql, r, tg_db_errmsg(db));
  return rows;
}

static void exec_ok(tg_db *db, const char *sql) {
  int r = tg_db_exec(db, sql, NULL, NULL);
  if (r != 0) fail_msg("%s: %d %s", sql, r, tg_db_errmsg(db));
}

/* Whether SQLite builds an ephemeral table when it runs hot[i]. */
static bool ephemeral(tg_db *db, size_t i) {
  char sql[1024];
  snprintf(sql, sizeof sql, "EXPLAIN %s", hot[i].sql);
  json_t *rows = rows_of(db, sql, hot[i].params);
  bool found = false;
  size_t k;
  json_t *op;
  json_array_foreach(rows, k, op) {
    if (strcmp(json_string_value(json_object_get(op, "opcode")), "OpenEphemeral") == 0)
      found = true;
  }
  json_decref(rows);
  return found;
}

static void assert_clean(tg_db *db) {
  json_t *rows = rows_of(db, "PRAGMA integrity_check", NULL);
  json_t *want = tg_test_json("[{\"integrity_check\": \"ok\"}]");
  assert_true(json_equal(rows, want));
  json_decref(want);
  json_decref(rows);
  rows = rows_of(db, "PRAGMA foreign_key_check", NULL);
  assert_int_equal(json_array_size(rows), 0);
  json_decref(rows);
}

/* A database that tg_db_migrate left at version 5, as an older build did. */
static void create_v5(const char *dir) {
  assert_true(tg_test_migrations() >= 6);
  assert_memory_equal(tg_embedded_migrations[5].name, "0006_", 5);
  char path[4096];
  snprintf(path, sizeof path, "%s/toolgate.db", dir);
  sqlite3 *conn = NULL;
  assert_int_equal(sqlite3_open(path, &conn), SQLITE_OK);
  char *err = NULL;
  int rc = sqlite3_exec(conn,
                        "PRAGMA foreign_keys = ON;"
                        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                        " name TEXT NOT NULL, applied_at TEXT NOT NULL)",
                        NULL, NULL, &err);
  for (int v = 1; rc == SQLITE_OK && v <= 5; v++) {
    const tg_embedded_file *m = &tg_embedded_migrations[v - 1];
    char *record = sqlite3_mprintf(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, %Q, 'now')", v,
        m->name);
    assert_non_null(record);
    rc = sqlite3_exec(conn, "BEGIN", NULL, NULL, &err);
    if (rc == SQLITE_OK) rc = sqlite3_exec(conn, m->data, NULL, NULL, &err);
    if (rc == SQLITE_OK) rc = sqlite3_exec(conn, record, NULL, NULL, &err);
    if (rc == SQLITE_OK) rc = sqlite3_exec(conn, "COMMIT", NULL, NULL, &err);
    sqlite3_free(record);
  }
  if (rc != SQLITE_OK) fail_msg("building version 5: %s", err ? err : sqlite3_errstr(rc));
  sqlite3_close(conn);
}

/* A database at version 5 with rows in the tables that change. */
static int setup_v5(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->dir = tg_test_tmpdir();
  create_v5(f->dir);
  f->db = tg_test_db_open(f->dir);
  int version = -1;
  assert_int_equal(tg_db_schema_version(f->db, &version), 0);
  assert_int_equal(version, 5);
  for (size_t i = 0; i < sizeof v5_rows / sizeof *v5_rows; i++)
    exec_ok(f->db, v5_rows[i]);
  exec_ok(f->db, "CREATE TEMP TABLE v5_schema AS SELECT name FROM sqlite_schema");
  *state = f;
  return 0;
}

static int teardown(void **state) { return tg_test_db_free(*state); }

static void snapshot(tg_db *db, json_t *out[N_KEPT]) {
  for (size_t i = 0; i < N_KEPT; i++)
    out[i] = rows_of(db, kept[i], NULL);
}

static void assert_snapshot_equal(json_t *before[N_KEPT], json_t *after[N_KEPT]) {
  for (size_t i = 0; i < N_KEPT; i++) {
    if (!json_equal(before[i], after[i])) {
      char *a = json_dumps(before[i], JSON_COMPACT), *b = json_dumps(after[i], JSON_COMPACT);
      fail_msg("%s changed:\n  before %s\n  after  %s", kept[i], a, b);
    }
  }
}

static const char *table_sql(tg_db *db, const char *table, json_t **holder) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = '%s'",
           table);
  *holder = rows_of(db, sql, NULL);
  return json_string_value(json_object_get(json_array_get(*holder, 0), "sql"));
}

/* Migrates a database at version 5 to version 6 and no further, so that what the later
 * migrations do (schema changes of their own) cannot hide what migration 6 misses: failing
 * the n-th statement of a run, with n growing, stops it at version 5 (test_failure_rolls_back
 * checks those stops) until migration 6 commits and the failure, if any, comes after. */
static void migrate_to_6(tg_db *db) {
  int version = 5;
  for (int n = 1; version == 5; n++) {
    assert_true(n < 100);
    tg_db_fail_after(db, n);
    int r = tg_db_migrate(db, NULL);
    tg_db_fail_after(db, 0);
    assert_int_equal(tg_db_schema_version(db, &version), 0);
    if (r != 0) assert_string_equal(tg_db_errmsg(db), "injected failure");
  }
  assert_int_equal(version, 6);
}

/* From version 5: rows, rowids, columns, keys, indexes and the rest of the schema stay; the
 * two constraints change; another connection, open across the migration, sees the change. */
static void test_migrate_from_v5(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < 2; i++)
    assert_true(ephemeral(f->db, i)); /* what the migration is for */
  /* Another connection, its schema loaded. It explains only after the migration: EXPLAIN
   * opens no transaction, so a statement explained before would never notice the change. */
  tg_db *other = tg_test_db_open(f->dir);
  const char *read = "SELECT COUNT(*) AS n FROM agent_runs";
  assert_int_equal(tg_test_integer(other, read), 4);
  json_t *before[N_KEPT], *after[N_KEPT];
  snapshot(f->db, before);
  json_int_t cookie = tg_test_integer(f->db, "PRAGMA schema_version");

  migrate_to_6(f->db);

  snapshot(f->db, after);
  assert_snapshot_equal(before, after);
  assert_true(tg_test_integer(f->db, "PRAGMA schema_version") > cookie);
  json_t *h1, *h2;
  const char *runs = table_sql(f->db, "agent_runs", &h1);
  const char *logs = table_sql(f->db, "agent_run_logs", &h2);
  assert_null(strstr(runs, " IN ("));
  assert_null(strstr(logs, " IN ("));
  assert_non_null(strstr(runs, "CHECK (status = 'running' OR status = 'completed' OR status ="
                               " 'failed' OR status = 'cancelled')"));
  assert_non_null(strstr(logs, "CHECK (level = 'INFO' OR level = 'WARN' OR level = 'ERROR')"));
  json_decref(h1);
  json_decref(h2);
  /* Its next statement finds schema_version moved, and reloads the schema. */
  assert_int_equal(tg_test_integer(other, read), 4);
  for (size_t i = 0; i < sizeof hot / sizeof *hot; i++) {
    assert_false(ephemeral(f->db, i));
    assert_false(ephemeral(other, i));
  }
  assert_clean(f->db);
  assert_int_equal(tg_test_integer(f->db, "PRAGMA writable_schema"), 0);
  for (size_t i = 0; i < N_KEPT; i++) {
    json_decref(before[i]);
    json_decref(after[i]);
  }
  tg_db_close(other);

  /* The later migrations keep it so. */
  assert_int_equal(tg_db_migrate(f->db, NULL), 0);
  for (size_t i = 0; i < sizeof hot / sizeof *hot; i++)
    assert_false(ephemeral(f->db, i));
  assert_clean(f->db);
}

/* Each failure during the migration run leaves version 5 as it was, on disk and in the
 * connection's schema; the next run completes it. The last such failure is the one of the
 * statement that records the migration, after its SQL ran in the same transaction. */
static void test_failure_rolls_back(void **state) {
  fixture *f = *state;
  json_t *before[N_KEPT], *again[N_KEPT];
  snapshot(f->db, before);
  json_int_t cookie = tg_test_integer(f->db, "PRAGMA schema_version");
  int failures = 0;
  for (int n = 1;; n++) {
    assert_true(n < 100);
    tg_db_fail_after(f->db, n);
    int r = tg_db_migrate(f->db, NULL);
    tg_db_fail_after(f->db, 0);
    int version = -1;
    assert_int_equal(tg_db_schema_version(f->db, &version), 0);
    if (version > 5) break; /* migration 6 committed; a later step may have failed */
    assert_int_equal(r, TG_E_DB);
    assert_string_equal(tg_db_errmsg(f->db), "injected failure");
    failures++;
    assert_int_equal(tg_test_integer(f->db, "PRAGMA schema_version"), cookie);
    json_t *h;
    assert_non_null(strstr(table_sql(f->db, "agent_runs", &h), OLD_STATUS));
    json_decref(h);
    assert_true(ephemeral(f->db, 0));
    assert_true(ephemeral(f->db, 1));
    snapshot(f->db, again);
    assert_snapshot_equal(before, again);
    for (size_t i = 0; i < N_KEPT; i++)
      json_decref(again[i]);
  }
  assert_true(failures > 1);
  assert_int_equal(tg_db_migrate(f->db, NULL), 0);
  assert_false(ephemeral(f->db, 0));
  assert_false(ephemeral(f->db, 1));
  assert_clean(f->db);
  for (size_t i = 0; i < N_KEPT; i++)
    json_decref(before[i]);
}

/* Values of every storage class and near misses, as SQL expressions. */
static const char *const candidates[] = {
    "'running'", "'completed'", "'failed'", "'cancelled'", "'INFO'", "'WARN'", "'ERROR'",
    "'Running'", "'RUNNING'", "'running '", "' running'", "'canceled'", "'info'", "'Warn'",
    "'DEBUG'", "''", "'1'", "NULL", "0", "1", "-1", "1.5", "X''", "X'72756E6E696E67'",
    "X'494E464F'", "CAST('failed' AS BLOB)", "'running' || char(0)", "char(0)", "zeroblob(1)",
};

static int try_exec(tg_db *db, const char *fmt, const char *value) {
  char sql[512];
  snprintf(sql, sizeof sql, fmt, value);
  int r = tg_db_exec(db, sql, NULL, NULL);
  if (r != 0 && r != TG_E_CONSTRAINT) fail_msg("%s: %d %s", sql, r, tg_db_errmsg(db));
  return r;
}

/* After the migration the constraints refuse exactly the values the original ones refused,
 * on INSERT and on UPDATE: tables with the original definitions answer the same. */
static void test_same_values_refused(void **state) {
  fixture *f = *state;
  tg_db *db = f->db;
  assert_int_equal(tg_db_migrate(db, NULL), 0);
  assert_int_equal(tg_db_begin(db), 0);
  exec_ok(db, "CREATE TEMP TABLE old_runs (id INTEGER PRIMARY KEY,"
              " status TEXT NOT NULL CHECK (" OLD_STATUS "))");
  exec_ok(db, "CREATE TEMP TABLE old_logs (id INTEGER PRIMARY KEY,"
              " level TEXT NOT NULL CHECK (" OLD_LEVEL "))");
  exec_ok(db, "INSERT INTO old_runs (id, status) VALUES (1, 'running')");
  int accepted_runs = 0, accepted_logs = 0;
  for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
    const char *v = candidates[i];
    char id[32];
    snprintf(id, sizeof id, "'n%zu'", i);
    char run[256], log[256];
    snprintf(run, sizeof run,
             "INSERT INTO agent_runs (id, tenant_id, agent_id, status, trigger, started_at)"
             " VALUES (%s, 't1', 'a1', %%s, 'call', 'now')",
             id);
    snprintf(log, sizeof log,
             "INSERT INTO agent_run_logs (id, tenant_id, run_id, principal_id, step, level,"
             " message, metadata, created_at) VALUES (%s, 't1', 'r1', 'pa', 's', %%s, 'm', '{}',"
             " 'now')",
             id);
    int want = try_exec(db, "INSERT INTO old_runs (status) VALUES (%s)", v);
    if (try_exec(db, run, v) != want) fail_msg("agent_runs and the original differ on %s", v);
    if (want == 0) accepted_runs++;
    want = try_exec(db, "UPDATE old_runs SET status = %s WHERE id = 1", v);
    if (try_exec(db, "UPDATE agent_runs SET status = %s WHERE id = 'r1'", v) != want)
      fail_msg("agent_runs and the original differ on %s (UPDATE)", v);
    want = try_exec(db, "INSERT INTO old_logs (level) VALUES (%s)", v);
    if (try_exec(db, log, v) != want) fail_msg("agent_run_logs and the original differ on %s", v);
    if (want == 0) accepted_logs++;
  }
  assert_int_equal(accepted_runs, 4);
  assert_int_equal(accepted_logs, 3);
  assert_int_equal(tg_db_rollback(db), 0);
}

/* A new database gets the same constraints, on the connection that migrated it too. */
static void test_new_database(void **state) {
  (void)state;
  char *dir = tg_test_tmpdir();
  tg_db *db = tg_test_db_open(dir);
  assert_int_equal(tg_db_migrate(db, NULL), 0);
  for (size_t i = 0; i < sizeof hot / sizeof *hot; i++)
    assert_false(ephemeral(db, i));
  assert_clean(db);
  tg_db_close(db);
  tg_test_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_migrate_from_v5, setup_v5, teardown),
      cmocka_unit_test_setup_teardown(test_failure_rolls_back, setup_v5, teardown),
      cmocka_unit_test_setup_teardown(test_same_values_refused, setup_v5, teardown),
      cmocka_unit_test(test_new_database),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

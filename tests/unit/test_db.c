/* The SQLite backend of the storage port: open, migrations, parameters, rows, errors,
 * transactions, the failure hook, locking between connections. */
#include "support.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db/db.h"
#include "util/clock.h"
#include "util/embed.h"
#include "util/status.h"

typedef tg_test_db fixture;

/* A new database, not migrated. */
static int setup_fresh(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->dir = tg_test_tmpdir();
  f->db = tg_test_db_open(f->dir);
  *state = f;
  return 0;
}

/* A new database, migrated. */
static int setup(void **state) {
  setup_fresh(state);
  fixture *f = *state;
  assert_int_equal(tg_db_migrate(f->db, NULL), 0);
  return 0;
}

static int teardown(void **state) { return tg_test_db_free(*state); }

/* Runs sql with params given as JSON text (NULL: none), expecting rc. */
static void exec_expect(tg_db *db, int rc, const char *sql, const char *params) {
  int r = tg_db_exec(db, sql, params ? tg_test_json(params) : NULL, NULL);
  if (r != rc) fail_msg("%s: got %d (%s), expected %d", sql, r, tg_db_errmsg(db), rc);
}

static void assert_json_equal(json_t *got, const char *want) {
  json_t *w = tg_test_json(want);
  if (!json_equal(got, w)) {
    char *text = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
    fail_msg("got %s, expected %s", text ? text : "NULL", want);
  }
  json_decref(w);
}

static void query_expect(tg_db *db, const char *sql, const char *params, const char *want) {
  json_t *rows = NULL;
  int r = tg_db_query(db, sql, params ? tg_test_json(params) : NULL, &rows);
  if (r != 0) fail_msg("%s: %d %s", sql, r, tg_db_errmsg(db));
  assert_json_equal(rows, want);
  json_decref(rows);
}

static void assert_errmsg_has(tg_db *db, const char *part) {
  if (!strstr(tg_db_errmsg(db), part))
    fail_msg("errmsg \"%s\" lacks \"%s\"", tg_db_errmsg(db), part);
}

static void add_tenant(tg_db *db, const char *id) {
  int r = tg_db_exec(db, "INSERT INTO tenants (id, slug, name, created_at) VALUES ($1, $2, $2, $3)",
                     json_pack("[sss]", id, id, "2026-01-01T00:00:00.000Z"), NULL);
  if (r != 0) fail_msg("add tenant: %d %s", r, tg_db_errmsg(db));
}

static void test_open_creates_database(void **state) {
  fixture *f = *state;
  tg_db *db = f->db;
  char path[4096];
  snprintf(path, sizeof path, "%s/toolgate.db", f->dir);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);

  int version = -1;
  assert_int_equal(tg_db_schema_version(db, &version), 0);
  assert_int_equal(version, 0); /* fresh, not migrated */

  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(db, "PRAGMA journal_mode", NULL, &row), 0);
  assert_json_equal(row, "{\"journal_mode\": \"wal\"}");
  json_decref(row);
  assert_int_equal(tg_test_integer(db, "PRAGMA foreign_keys"), 1);
  assert_int_equal(tg_test_integer(db, "PRAGMA synchronous"), 1); /* NORMAL */
  assert_int_equal(tg_test_integer(db, "PRAGMA busy_timeout"), 5000);
}

static void test_open_missing_dir(void **state) {
  fixture *f = *state;
  char missing[4096];
  snprintf(missing, sizeof missing, "%s/nope", f->dir);
  tg_db *db = (tg_db *)&db; /* must be reset */
  char *err = NULL;
  assert_int_equal(tg_db_open(missing, &db, &err), TG_E_DB);
  assert_null(db);
  assert_non_null(err);
  assert_non_null(strstr(err, "toolgate.db"));
  free(err);
}

static void test_migrate_creates_tables(void **state) {
  fixture *f = *state;
  tg_db *db = f->db;
  int applied = -1;
  assert_int_equal(tg_db_migrate(db, &applied), 0);
  assert_true(tg_test_migrations() >= 1);
  assert_int_equal(applied, tg_test_migrations());

  static const char *tables[] = {"tenants",      "principals",       "users",      "grants",
                                 "api_tokens",   "missions",         "ideas",      "works",
                                 "agents",       "tool_policies",    "agent_runs", "agent_run_logs",
                                 "activity_log", "schema_migrations"};
  for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
    json_t *row = NULL;
    assert_int_equal(
        tg_db_query_row(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name = $1",
                        json_pack("[s]", tables[i]), &row),
        0);
    if (!row) fail_msg("table %s is missing", tables[i]);
    json_decref(row);
  }
  query_expect(db,
               "SELECT name FROM sqlite_master WHERE type = 'index' AND name IN"
               " ('activity_log_tenant', 'agent_run_logs_run', 'agent_runs_agent') ORDER BY name",
               NULL,
               "[{\"name\": \"activity_log_tenant\"}, {\"name\": \"agent_run_logs_run\"},"
               " {\"name\": \"agent_runs_agent\"}]");

  json_t *row = NULL;
  assert_int_equal(
      tg_db_query_row(db,
                      "SELECT version, name, applied_at FROM schema_migrations WHERE version = 1",
                      NULL, &row),
      0);
  assert_non_null(row);
  assert_string_equal(json_string_value(json_object_get(row, "name")), "0001_foundation.sql");
  const char *at = json_string_value(json_object_get(row, "applied_at"));
  int y, mo, d, h, mi, s, ms, end = 0;
  assert_int_equal(
      sscanf(at, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &y, &mo, &d, &h, &mi, &s, &ms, &end), 7);
  assert_int_equal(strlen(at), 24);
  assert_int_equal(end, 24);
  assert_true(y >= 2024 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59);
  json_decref(row);
}

static void test_migrate_idempotent(void **state) {
  fixture *f = *state;
  int applied = -1, version = -1;
  assert_int_equal(tg_db_migrate(f->db, &applied), 0);
  assert_int_equal(applied, 0);
  assert_int_equal(tg_db_schema_version(f->db, &version), 0);
  assert_int_equal(version, tg_test_migrations());

  tg_db_close(f->db);
  f->db = tg_test_db_open(f->dir);
  applied = -1;
  assert_int_equal(tg_db_migrate(f->db, &applied), 0);
  assert_int_equal(applied, 0);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM schema_migrations"), tg_test_migrations());
  /* Up to date, it writes nothing: another connection holding the write lock is no bar. */
  tg_db *writer = tg_test_db_open(f->dir);
  assert_int_equal(tg_db_begin(writer), 0);
  assert_int_equal(tg_db_exec(writer, "UPDATE tenants SET name = name", NULL, NULL), 0);
  assert_int_equal(tg_db_migrate(f->db, &applied), 0);
  assert_int_equal(applied, 0);
  assert_int_equal(tg_db_rollback(writer), 0);
  tg_db_close(writer);
}

static void test_params(void **state) {
  fixture *f = *state;
  exec_expect(f->db, 0, "CREATE TABLE t (id INTEGER PRIMARY KEY, a, b)", NULL);
  int64_t changes = -1;
  assert_int_equal(tg_db_exec(f->db, "INSERT INTO t (id, a, b) VALUES (1, $2, $1)",
                              tg_test_json("[\"second\", \"first\"]"), &changes),
                   0);
  assert_int_equal(changes, 1);
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (2, $1, $2)", "[null, 9007199254740993]");
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (3, $1, $2)",
              "[2.5, -9223372036854775808]");
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (4, $1, $2)", "[true, false]");
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (5, $1, $2)",
              "[{\"k\": [1, \"x\"], \"n\": null}, [1, 2.5]]");
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (6, $1, $1 || $1)", "[\"ab\"]");
  exec_expect(f->db, 0, "INSERT INTO t (id, a, b) VALUES (7, $1, $2)",
              "[\"\", \"h\\u00e9\\u0000z\"]");
  query_expect(f->db, "SELECT a, b FROM t ORDER BY id", NULL,
               "[{\"a\": \"first\", \"b\": \"second\"},"
               " {\"a\": null, \"b\": 9007199254740993},"
               " {\"a\": 2.5, \"b\": -9223372036854775808},"
               " {\"a\": 1, \"b\": 0},"
               " {\"a\": \"{\\\"k\\\":[1,\\\"x\\\"],\\\"n\\\":null}\", \"b\": \"[1,2.5]\"},"
               " {\"a\": \"ab\", \"b\": \"abab\"},"
               " {\"a\": \"\", \"b\": \"h\\u00e9\\u0000z\"}]");
  /* Types of the result follow the storage class, not the declared column type. */
  query_expect(f->db, "SELECT typeof(a) AS ta, typeof(b) AS tb FROM t WHERE id = $1", "[3]",
               "[{\"ta\": \"real\", \"tb\": \"integer\"}]");
  query_expect(f->db, "SELECT 1 AS one, 1.0 AS real, 'x' AS text, x'6869' AS blob, NULL AS none",
               NULL,
               "[{\"one\": 1, \"real\": 1.0, \"text\": \"x\", \"blob\": \"hi\", \"none\": null}]");
  /* Ten and more parameters: $10 is not $1 followed by 0. */
  query_expect(f->db, "SELECT $10 AS ten, $1 AS one, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 AS rest",
               "[1, 1, 1, 1, 1, 1, 1, 1, 1, 10]", "[{\"ten\": 10, \"one\": 1, \"rest\": 8}]");
}

static void test_param_errors(void **state) {
  fixture *f = *state;
  exec_expect(f->db, TG_E_INVAL, "SELECT $1, $2", "[1]");
  assert_errmsg_has(f->db, "$2");
  exec_expect(f->db, TG_E_INVAL, "SELECT $1", "[]");
  assert_errmsg_has(f->db, "has no value");
  exec_expect(f->db, TG_E_INVAL, "SELECT $1", "[1, 2]"); /* $2 unused */
  assert_errmsg_has(f->db, "2 parameters given");
  exec_expect(f->db, TG_E_INVAL, "SELECT 1", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT ?", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT ?1", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT :a", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT $a", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT $0", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT $01", "[1]");
  exec_expect(f->db, TG_E_INVAL, "SELECT $1::text", "[1]");
  assert_errmsg_has(f->db, "$1::text");
  exec_expect(f->db, TG_E_INVAL, "SELECT $1", "{\"a\": 1}");
  exec_expect(f->db, TG_E_INVAL, "SELECT 1; SELECT 2", NULL);
  exec_expect(f->db, TG_E_INVAL, "", NULL);
  exec_expect(f->db, TG_E_INVAL, "  -- nothing", NULL);
  exec_expect(f->db, 0, "SELECT 1; -- a comment\n ;", NULL);
  exec_expect(f->db, TG_E_DB, "SELEC 1", NULL);
  assert_errmsg_has(f->db, "syntax error");
  exec_expect(f->db, TG_E_DB, "SELECT * FROM no_such_table", NULL);
  assert_errmsg_has(f->db, "no_such_table");
  /* params are stolen on every path. */
  json_t *p = tg_test_json("[1]");
  json_incref(p);
  assert_int_equal(tg_db_exec(f->db, "SELECT $1, $2", json_incref(p), NULL), TG_E_INVAL);
  assert_int_equal(tg_db_exec(f->db, "SELECT $1", json_incref(p), NULL), 0);
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(f->db, "SELEC", json_incref(p), &row), TG_E_DB);
  assert_int_equal(tg_db_query(f->db, "SELECT $1 AS a", json_incref(p), &row), 0);
  json_decref(row);
  tg_db_fail_after(f->db, 1);
  assert_int_equal(tg_db_query(f->db, "SELECT $1", json_incref(p), &row), TG_E_DB);
  assert_int_equal(p->refcount, 2);
  json_decref(p);
  json_decref(p);
  /* A NULL params where the SQL has parameters is a json_pack that failed: said so. */
  exec_expect(f->db, TG_E_NOMEM, "SELECT $1", NULL);
  assert_errmsg_has(f->db, "could not be built");
  /* The statement still works after a failed binding. */
  query_expect(f->db, "SELECT $1 AS v", "[7]", "[{\"v\": 7}]");
}

static void test_rows(void **state) {
  fixture *f = *state;
  exec_expect(f->db, 0, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", NULL);
  query_expect(f->db, "SELECT * FROM t", NULL, "[]");
  json_t *row = (json_t *)&row;
  assert_int_equal(tg_db_query_row(f->db, "SELECT * FROM t", NULL, &row), 0);
  assert_null(row);
  int64_t changes = -1;
  assert_int_equal(
      tg_db_exec(f->db, "INSERT INTO t (v) VALUES ('a'), ('b'), ('c')", NULL, &changes), 0);
  assert_int_equal(changes, 3);
  assert_int_equal(tg_db_exec(f->db, "UPDATE t SET v = v || v WHERE id > 1", NULL, &changes), 0);
  assert_int_equal(changes, 2);
  /* A statement that changes no rows reports 0, not the count of the last one that did. */
  assert_int_equal(tg_db_exec(f->db, "CREATE TABLE u (x)", NULL, &changes), 0);
  assert_int_equal(changes, 0);
  assert_int_equal(tg_db_exec(f->db, "UPDATE t SET v = 'z' WHERE id > 100", NULL, &changes), 0);
  assert_int_equal(changes, 0);

  query_expect(
      f->db, "SELECT id, v FROM t ORDER BY id DESC", NULL,
      "[{\"id\": 3, \"v\": \"cc\"}, {\"id\": 2, \"v\": \"bb\"}, {\"id\": 1, \"v\": \"a\"}]");
  assert_int_equal(tg_db_query_row(f->db, "SELECT v FROM t ORDER BY id", NULL, &row), 0);
  assert_json_equal(row, "{\"v\": \"a\"}");
  json_decref(row);
  /* exec steps RETURNING to its end, so the write happens. */
  exec_expect(f->db, 0, "DELETE FROM t WHERE id = 3 RETURNING id", NULL);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM t"), 2);

  json_t *rows = (json_t *)&rows;
  assert_int_equal(tg_db_query(f->db, "SELECT 1 AS a, 2 AS a", NULL, &rows), TG_E_INVAL);
  assert_null(rows);
  assert_errmsg_has(f->db, "twice");
  assert_int_equal(tg_db_query(f->db, "SELECT CAST(x'ff41' AS TEXT) AS bad", NULL, &rows), TG_E_DB);
  assert_errmsg_has(f->db, "UTF-8");
  assert_int_equal(tg_db_query(f->db, "SELECT 1e999 AS inf", NULL, &rows), TG_E_DB);
  assert_errmsg_has(f->db, "non-finite");
  query_expect(f->db, "SELECT x'' AS empty", NULL, "[{\"empty\": \"\"}]");
}

static void test_row_bound(void **state) {
  fixture *f = *state;
  static const char *sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE "
                           "i < $1) SELECT i FROM n";
  json_t *rows = NULL;
  assert_int_equal(tg_db_query(f->db, sql, json_pack("[i]", 100000), &rows), 0);
  assert_int_equal(json_array_size(rows), 100000);
  json_decref(rows);
  assert_int_equal(tg_db_query(f->db, sql, json_pack("[i]", 100001), &rows), TG_E_TOO_LARGE);
  assert_null(rows);
  /* query_row stops at the first row. */
  assert_int_equal(tg_db_query_row(f->db, sql, json_pack("[i]", 100001), &rows), 0);
  assert_json_equal(rows, "{\"i\": 1}");
  json_decref(rows);
}

static void test_constraints(void **state) {
  fixture *f = *state;
  add_tenant(f->db, "t1");
  exec_expect(f->db, TG_E_CONSTRAINT,
              "INSERT INTO tenants (id, slug, name, created_at) VALUES ('t1', 'other', 'n', 'x')",
              NULL);
  assert_errmsg_has(f->db, "UNIQUE");
  exec_expect(f->db, TG_E_CONSTRAINT,
              "INSERT INTO tenants (id, slug, name, created_at) VALUES ('t2', 't1', 'n', 'x')",
              NULL);
  exec_expect(f->db, TG_E_CONSTRAINT,
              "INSERT INTO tenants (id, slug, name, naming_profile, created_at) "
              "VALUES ('t3', 's3', 'n', 'bogus', 'x')",
              NULL);
  assert_errmsg_has(f->db, "CHECK");
  exec_expect(f->db, TG_E_CONSTRAINT,
              "INSERT INTO tenants (id, slug, name, created_at) VALUES ('t4', 's4', $1, 'x')",
              "[null]");
  assert_errmsg_has(f->db, "NOT NULL");
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM tenants"), 1);
}

static void test_foreign_keys(void **state) {
  fixture *f = *state;
  exec_expect(f->db, TG_E_CONSTRAINT,
              "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ($1, $2, $3, $4)",
              "[\"p1\", \"nobody\", \"user\", \"x\"]");
  assert_errmsg_has(f->db, "FOREIGN KEY");
  add_tenant(f->db, "t1");
  exec_expect(f->db, 0,
              "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ($1, $2, $3, $4)",
              "[\"p1\", \"t1\", \"user\", \"x\"]");
  exec_expect(f->db, TG_E_CONSTRAINT, "DELETE FROM tenants WHERE id = 't1'", NULL);
}

static void test_rollback_discards(void **state) {
  fixture *f = *state;
  assert_int_equal(tg_db_rollback(f->db), 0); /* none open: harmless */
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t1");
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM tenants"), 1);
  assert_int_equal(tg_db_begin(f->db), TG_E_DB); /* not nestable */
  assert_int_equal(tg_db_rollback(f->db), 0);
  assert_int_equal(tg_db_rollback(f->db), 0);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM tenants"), 0);
  assert_int_equal(tg_db_commit(f->db), TG_E_DB); /* none open */

  /* A failed statement leaves the transaction open for the caller to roll back. */
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t2");
  exec_expect(
      f->db, TG_E_CONSTRAINT,
      "INSERT INTO principals (id, tenant_id, kind, created_at) VALUES ('p', 'x', 'user', 'x')",
      NULL);
  assert_int_equal(tg_db_rollback(f->db), 0);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM tenants"), 0);
}

static void test_commit_persists(void **state) {
  fixture *f = *state;
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t1");
  add_tenant(f->db, "t2");
  assert_int_equal(tg_db_commit(f->db), 0);
  /* Closing with a transaction open discards it. */
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t3");
  tg_db_close(f->db);
  f->db = tg_test_db_open(f->dir);
  query_expect(f->db, "SELECT id FROM tenants ORDER BY id", NULL,
               "[{\"id\": \"t1\"}, {\"id\": \"t2\"}]");
}

static void test_fail_after(void **state) {
  fixture *f = *state;
  tg_db_fail_after(f->db, 2);
  add_tenant(f->db, "t1");
  exec_expect(f->db, TG_E_DB, "SELECT 1", NULL);
  assert_string_equal(tg_db_errmsg(f->db), "injected failure");
  exec_expect(f->db, 0, "SELECT 1", NULL); /* fires once */

  tg_db_fail_after(f->db, 1);
  json_t *rows = (json_t *)&rows;
  assert_int_equal(tg_db_query(f->db, "SELECT 1 AS x", NULL, &rows), TG_E_DB);
  assert_null(rows);
  tg_db_fail_after(f->db, 1);
  assert_int_equal(tg_db_query_row(f->db, "SELECT 1 AS x", NULL, &rows), TG_E_DB);
  assert_null(rows);
  tg_db_fail_after(f->db, 1);
  tg_db_fail_after(f->db, 0); /* disarmed */
  exec_expect(f->db, 0, "SELECT 1", NULL);

  /* begin/commit/rollback are not counted, so a failing step of a transaction can be
   * rolled back. */
  tg_db_fail_after(f->db, 2);
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t2");
  exec_expect(f->db, TG_E_DB, "SELECT 1", NULL);
  assert_int_equal(tg_db_rollback(f->db), 0);
  query_expect(f->db, "SELECT id FROM tenants", NULL, "[{\"id\": \"t1\"}]");
}

/* Every statement of a migration run can fail; each failure must leave the database as it
 * was before the failing migration, so that the next run completes it. */
static void test_migrate_failure_rolls_back(void **state) {
  fixture *f = *state;
  tg_db *db = f->db;
  int n = 1, applied = -1;
  for (;; n++) {
    int before = -1;
    assert_int_equal(tg_db_schema_version(db, &before), 0);
    tg_db_fail_after(db, n);
    int r = tg_db_migrate(db, &applied);
    tg_db_fail_after(db, 0);
    if (r == 0) break;
    assert_int_equal(r, TG_E_DB);
    assert_string_equal(tg_db_errmsg(db), "injected failure");
    int version = -1;
    assert_int_equal(tg_db_schema_version(db, &version), 0);
    assert_int_equal(applied, version - before);
    if (version == 0)
      assert_int_equal(tg_test_integer(db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'tenants'"), 0);
    assert_true(n < 100);
  }
  assert_true(n > 3); /* it did fail along the way */
  int version = -1;
  assert_int_equal(tg_db_schema_version(db, &version), 0);
  assert_int_equal(version, tg_test_migrations());
  assert_int_equal(tg_test_integer(db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'tenants'"), 1);
}

/* A connection is at rest (fit to serve another user) only with no transaction, not even a
 * read snapshot, and not read-only. */
static void test_at_rest(void **state) {
  fixture *f = *state;
  assert_true(tg_db_at_rest(f->db));
  bool began = tg_db_snapshot(f->db);
  assert_true(began);
  assert_false(tg_db_at_rest(f->db));
  tg_db_snapshot_end(f->db, began);
  assert_true(tg_db_at_rest(f->db));
  assert_int_equal(tg_db_begin(f->db), 0);
  assert_false(tg_db_at_rest(f->db));
  assert_int_equal(tg_db_rollback(f->db), 0);
  assert_true(tg_db_at_rest(f->db));
  assert_int_equal(tg_db_read_only(f->db, true), 0);
  assert_false(tg_db_at_rest(f->db));
  assert_int_equal(tg_db_read_only(f->db, false), 0);
  assert_true(tg_db_at_rest(f->db));
}

static void test_busy(void **state) {
  fixture *f = *state;
  tg_db *other = tg_test_db_open(f->dir);
  /* Shortens the wait of this connection only; the 5 s default is checked in
   * test_open_creates_database. */
  exec_expect(other, 0, "PRAGMA busy_timeout = 50", NULL);
  assert_int_equal(tg_db_begin(f->db), 0);
  add_tenant(f->db, "t1");
  assert_int_equal(tg_db_begin(other), TG_E_BUSY);
  exec_expect(other, TG_E_BUSY, "DELETE FROM tenants", NULL);
  /* WAL: readers are not blocked and see the last commit. */
  assert_int_equal(tg_test_integer(other, "SELECT COUNT(*) FROM tenants"), 0);
  assert_int_equal(tg_db_commit(f->db), 0);
  assert_int_equal(tg_db_begin(other), 0);
  assert_int_equal(tg_test_integer(other, "SELECT COUNT(*) FROM tenants"), 1);
  exec_expect(f->db, 0, "PRAGMA busy_timeout = 50", NULL);
  assert_int_equal(tg_db_begin(f->db), TG_E_BUSY);
  assert_int_equal(tg_db_rollback(other), 0);
  tg_db_close(other);
}

/* tg_db_try_begin answers busy instead of waiting, whether this process's other connection
 * writes or another process holds SQLite's lock (here a plain SQLite connection), and
 * leaves the connection's busy timeout as it was. */
static void test_try_begin(void **state) {
  fixture *f = *state;
  tg_db *other = tg_test_db_open(f->dir);
  assert_int_equal(tg_db_begin(other), 0);
  assert_int_equal(tg_db_try_begin(f->db), TG_E_BUSY);
  assert_int_equal(tg_db_rollback(other), 0);
  tg_db_close(other);
  char path[4096];
  snprintf(path, sizeof path, "%s/toolgate.db", f->dir);
  sqlite3 *elsewhere = NULL;
  assert_int_equal(sqlite3_open(path, &elsewhere), SQLITE_OK);
  assert_int_equal(sqlite3_exec(elsewhere, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  assert_int_equal(tg_db_try_begin(f->db), TG_E_BUSY);
  assert_int_equal(tg_test_integer(f->db, "PRAGMA busy_timeout"), 5000);
  assert_int_equal(sqlite3_exec(elsewhere, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(elsewhere);
  assert_int_equal(tg_db_try_begin(f->db), 0);
  assert_int_equal(tg_db_rollback(f->db), 0);
}

/* The log's size on disk, in bytes (0 when it is empty or not there). */
static long long log_size(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/toolgate.db-wal", dir);
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

/* Waits until the log is truncated, which the checkpoint thread does once it sees no commit
 * for tg_db_shrink_idle_ms (the test set it short: the wait is a hang guard, not a timing
 * check), then gives tg_db_shrink_idle_ms back its value idle_ms. */
static void await_log_truncated(fixture *f, long long idle_ms) {
  int64_t give_up = tg_monotonic_ms() + 60000;
  while (log_size(f->dir) > 0 && tg_monotonic_ms() < give_up) usleep(10000);
  tg_db_shrink_idle_ms = idle_ms;
  assert_int_equal(log_size(f->dir), 0);
}

/* A burst that grows the log past a checkpoint leaves it on disk only until commits stop:
 * then it is truncated, and what was written stays. */
static void test_log_truncated_after_a_burst(void **state) {
  fixture *f = *state;
  long long idle_ms = tg_db_shrink_idle_ms;
  tg_db_shrink_idle_ms = 50;
  exec_expect(f->db, 0, "CREATE TABLE scratch (b BLOB)", NULL);
  /* 24 MB: more than a checkpoint's 16 MB of log pages. The largest size seen, since a pause
   * of 50 ms in the burst may already let the log go once it was checkpointed. */
  long long largest = 0;
  for (int i = 0; i < 24; i++) {
    exec_expect(f->db, 0, "INSERT INTO scratch VALUES (randomblob(1000000))", NULL);
    long long size = log_size(f->dir);
    if (size > largest) largest = size;
  }
  assert_true(largest > 16 * 1000 * 1000);
  await_log_truncated(f, idle_ms);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM scratch"), 24);
  exec_expect(f->db, 0, "INSERT INTO scratch VALUES (1)", NULL);
  assert_true(log_size(f->dir) > 0);
}

/* A log never checkpointed (one commit, far from a checkpoint's 16 MB) is truncated too once
 * commits stop, not kept until the last connection closes; what was written stays. A reader
 * in an older snapshot keeps it meanwhile (the truncation waits for readers briefly and is
 * tried again), so that the log is seen before it goes. */
static void test_small_log_truncated_once_commits_stop(void **state) {
  fixture *f = *state;
  long long idle_ms = tg_db_shrink_idle_ms;
  tg_db_shrink_idle_ms = 50;
  exec_expect(f->db, 0, "CREATE TABLE scratch (b BLOB)", NULL);
  tg_db *reader = tg_test_db_open(f->dir);
  bool began = tg_db_snapshot(reader);
  assert_true(began);
  assert_int_equal(tg_test_integer(reader, "SELECT COUNT(*) FROM scratch"), 0);
  exec_expect(f->db, 0, "INSERT INTO scratch VALUES (randomblob(100000))", NULL);
  assert_true(log_size(f->dir) > 100000);
  tg_db_snapshot_end(reader, began);
  tg_db_close(reader);
  await_log_truncated(f, idle_ms);
  assert_int_equal(tg_test_integer(f->db, "SELECT COUNT(*) FROM scratch"), 1);
}

/* More distinct statements than the cache holds, and a schema change under a cached one. */
static void test_statement_cache(void **state) {
  fixture *f = *state;
  char sql[64], want[64];
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 200; i++) {
      snprintf(sql, sizeof sql, "SELECT %d AS v", i);
      snprintf(want, sizeof want, "[{\"v\": %d}]", i);
      query_expect(f->db, sql, NULL, want);
    }
  exec_expect(f->db, 0, "CREATE TABLE t (a)", NULL);
  exec_expect(f->db, 0, "INSERT INTO t VALUES (1)", NULL);
  query_expect(f->db, "SELECT * FROM t", NULL, "[{\"a\": 1}]");
  exec_expect(f->db, 0, "ALTER TABLE t ADD COLUMN b DEFAULT 2", NULL);
  query_expect(f->db, "SELECT * FROM t", NULL, "[{\"a\": 1, \"b\": 2}]");
}

/* jansson allocations fail one after the other: each call reports TG_E_NOMEM, leaks
 * nothing (ASan), and leaves the connection usable. */
static int allocs_left;
static void *failing_malloc(size_t size) { return allocs_left-- > 0 ? malloc(size) : NULL; }

static void test_json_nomem(void **state) {
  fixture *f = *state;
  exec_expect(f->db, 0, "CREATE TABLE t (id INTEGER PRIMARY KEY, doc TEXT, x REAL)", NULL);
  exec_expect(f->db, 0, "INSERT INTO t (doc, x) VALUES ('a', 1.5), ('b', 2.5), ('c', NULL)", NULL);
  json_t *doc = tg_test_json("[{\"k\": [1, 2, {\"z\": \"y\"}]}]");
  json_t *ids = tg_test_json("[0]");
  int failures = 0;
  for (int n = 0;; n++) {
    json_t *rows = NULL;
    allocs_left = n;
    json_set_alloc_funcs(failing_malloc, free);
    int r = tg_db_exec(f->db, "UPDATE t SET doc = $1 WHERE id = 1", json_incref(doc), NULL);
    if (r == 0)
      r = tg_db_query(f->db, "SELECT * FROM t WHERE id > $1 ORDER BY id", json_incref(ids), &rows);
    json_set_alloc_funcs(malloc, free);
    if (r == 0) {
      assert_json_equal(
          rows,
          "[{\"id\": 1, \"doc\": \"{\\\"k\\\":[1,2,{\\\"z\\\":\\\"y\\\"}]}\", \"x\": 1.5},"
          " {\"id\": 2, \"doc\": \"b\", \"x\": 2.5}, {\"id\": 3, \"doc\": \"c\", \"x\": null}]");
      json_decref(rows);
      break;
    }
    assert_int_equal(r, TG_E_NOMEM);
    assert_null(rows);
    failures++;
  }
  assert_true(failures > 10);
  json_decref(doc);
  json_decref(ids);
}

/* The same for a whole migration run. */
static void test_json_nomem_migrate(void **state) {
  fixture *f = *state;
  int failures = 0;
  for (;;) {
    allocs_left = failures;
    json_set_alloc_funcs(failing_malloc, free);
    int r = tg_db_migrate(f->db, NULL);
    json_set_alloc_funcs(malloc, free);
    if (r == 0) break;
    assert_int_equal(r, TG_E_NOMEM);
    assert_true(++failures < 1000);
  }
  assert_true(failures > 3);
  int version = -1;
  assert_int_equal(tg_db_schema_version(f->db, &version), 0);
  assert_int_equal(version, tg_test_migrations());
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_open_creates_database, setup_fresh, teardown),
      cmocka_unit_test_setup_teardown(test_open_missing_dir, setup_fresh, teardown),
      cmocka_unit_test_setup_teardown(test_migrate_creates_tables, setup_fresh, teardown),
      T(test_migrate_idempotent),
      T(test_params),
      T(test_param_errors),
      T(test_rows),
      T(test_row_bound),
      T(test_constraints),
      T(test_foreign_keys),
      T(test_rollback_discards),
      T(test_commit_persists),
      T(test_fail_after),
      cmocka_unit_test_setup_teardown(test_migrate_failure_rolls_back, setup_fresh, teardown),
      T(test_at_rest),
      T(test_busy),
      T(test_try_begin),
      T(test_statement_cache),
      T(test_log_truncated_after_a_burst),
      T(test_small_log_truncated_once_commits_stop),
      T(test_json_nomem),
      cmocka_unit_test_setup_teardown(test_json_nomem_migrate, setup_fresh, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

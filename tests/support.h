/* Helpers shared by the cmocka programs. cmocka needs these includes in this order. */
#pragma once
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* A new empty folder under $TMPDIR (or /tmp), removed with everything in it by
 * tg_test_rmtree. Returns a malloc'd path; fails the test when it cannot. */
char *tg_test_tmpdir(void);
void tg_test_rmtree(const char *path);

/* A connection to the database in dir (created when missing, not migrated), or fails the
 * test with the reason. */
typedef struct tg_db tg_db;
tg_db *tg_test_db_open(const char *dir);

/* A database in a temporary folder of its own, for the storage port's tests. */
typedef struct tg_test_db {
  char *dir;
  tg_db *db;
} tg_test_db;
/* Closes the database, removes its folder and frees t; returns 0, as a cmocka teardown. */
int tg_test_db_free(tg_test_db *t);

/* JSON text parsed (any value, NUL allowed in strings), or fails the test. */
typedef struct json_t json_t;
json_t *tg_test_json(const char *text);
/* The one integer a query of one column and one row answers, or fails the test. */
long long tg_test_integer(tg_db *db, const char *sql);
/* How many migrations the binary carries. */
int tg_test_migrations(void);

/* A shell command's whole stdout (malloc'd), whatever its exit status; fails the test when it
 * cannot be run. */
char *tg_test_shell_output(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Folder of the shared test data ($TG_TESTDATA), or fails the test. */
const char *tg_test_testdata(void);

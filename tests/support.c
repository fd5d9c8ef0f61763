#define _GNU_SOURCE
#include "support.h"

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/db.h"
#include "util/embed.h"

char *tg_test_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char *path = NULL;
  if (asprintf(&path, "%s/toolgate-test-XXXXXX", base && *base ? base : "/tmp") < 0) fail();
  if (!mkdtemp(path)) fail_msg("mkdtemp %s failed", path);
  return path;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

void tg_test_rmtree(const char *path) {
  if (path) nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *tg_test_shell_output(const char *fmt, ...) {
  char *cmd = NULL, *text = NULL;
  size_t size = 0;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&cmd, fmt, ap) < 0) fail();
  va_end(ap);
  FILE *p = popen(cmd, "r");
  if (!p) fail_msg("cannot run %s", cmd);
  FILE *mem = open_memstream(&text, &size);
  if (!mem) fail();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) fwrite(buf, 1, n, mem);
  fclose(mem);
  pclose(p);
  free(cmd);
  return text;
}

const char *tg_test_testdata(void) {
  const char *dir = getenv("TG_TESTDATA");
  if (!dir || !*dir) fail_msg("TG_TESTDATA is not set (ctest sets it)");
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    fail_msg("the shared test data is not at %s: make test reads it from ../shared/testdata "
             "next to the checkout, or from DIR with make test TESTDATA=DIR", dir);
  return dir;
}

tg_db *tg_test_db_open(const char *dir) {
  tg_db *db = NULL;
  char *err = NULL;
  int r = tg_db_open(dir, &db, &err);
  if (r != 0) fail_msg("tg_db_open %s: %d %s", dir, r, err ? err : "");
  return db;
}

int tg_test_db_free(tg_test_db *t) {
  tg_db_close(t->db);
  tg_test_rmtree(t->dir);
  free(t->dir);
  free(t);
  return 0;
}

json_t *tg_test_json(const char *text) {
  json_error_t error;
  json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
  if (!v) fail_msg("bad test JSON %s: %s", text, error.text);
  return v;
}

long long tg_test_integer(tg_db *db, const char *sql) {
  json_t *row = NULL;
  int r = tg_db_query_row(db, sql, NULL, &row);
  if (r != 0) fail_msg("%s: %d %s", sql, r, tg_db_errmsg(db));
  if (!row || json_object_size(row) != 1) fail_msg("%s: not one row of one column", sql);
  json_t *v = json_object_iter_value(json_object_iter(row));
  if (!json_is_integer(v)) fail_msg("%s: not an integer", sql);
  long long n = json_integer_value(v);
  json_decref(row);
  return n;
}

int tg_test_migrations(void) {
  int n = 0;
  while (tg_embedded_migrations[n].name) n++;
  return n;
}

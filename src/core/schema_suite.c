/* Runner of the official JSON-Schema-Test-Suite (draft2020-12 layout). The remotes and the
 * 2020-12 meta-schemas are read from disk and handed to the compiler as documents under the
 * URIs the suite expects, so nothing is fetched. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/schema.h"
#include "util/cleanup.h"
#include "util/status.h"

#define REMOTES_BASE "http://localhost:1234/"
#define METASCHEMA_BASE "https://json-schema.org/draft/2020-12/"
#define MAX_TREE_DEPTH 16

struct exclusion {
  char *file, *case_desc, *test_desc;
  int line;
  bool used;
};

struct exclusions {
  struct exclusion *v;
  size_t n;
};

static void say(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(FILE *out, const char *fmt, ...) {
  if (!out) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* Adds every *.json file below dir to docs under prefix + its relative path. hint ends the
 * line saying dir cannot be opened. */
static int load_tree(const char *dir, const char *rel, const char *prefix, bool drop_ext,
                     json_t *docs, FILE *out, unsigned depth, const char *hint) {
  if (depth > MAX_TREE_DEPTH) {
    say(out, "%s: folders nested too deeply\n", dir);
    return TG_E_TOO_LARGE;
  }
  DIR *d = opendir(dir);
  if (!d) {
    say(out, "cannot open %s: %s%s\n", dir, strerror(errno), hint);
    return TG_E_IO;
  }
  int rc = TG_OK;
  struct dirent *e;
  while (rc >= 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    _cleanup_free_ char *path = NULL, *sub = NULL;
    if (asprintf(&path, "%s/%s", dir, e->d_name) < 0 ||
        asprintf(&sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) < 0) {
      rc = TG_E_NOMEM;
      break;
    }
    struct stat st;
    if (stat(path, &st) < 0) continue;
    if (S_ISDIR(st.st_mode)) {
      rc = load_tree(path, sub, prefix, drop_ext, docs, out, depth + 1, "");
      continue;
    }
    if (!S_ISREG(st.st_mode) || !has_suffix(e->d_name, ".json")) continue;
    json_error_t err;
    json_t *doc = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!doc) {
      say(out, "%s:%d: %s\n", path, err.line, err.text);
      rc = TG_E_INVAL;
      break;
    }
    _cleanup_free_ char *uri = NULL;
    if (drop_ext) sub[strlen(sub) - strlen(".json")] = 0;
    if (asprintf(&uri, "%s%s", prefix, sub) < 0 || json_object_set_new(docs, uri, doc) < 0)
      rc = TG_E_NOMEM;
  }
  closedir(d);
  return rc;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
    s[--n] = 0;
  return s;
}

static void free_exclusions(struct exclusions *x) {
  for (size_t i = 0; i < x->n; i++) {
    free(x->v[i].file);
    free(x->v[i].case_desc);
    free(x->v[i].test_desc);
  }
  free(x->v);
  *x = (struct exclusions){0};
}

static int read_exclusions(const char *path, struct exclusions *x, FILE *out) {
  FILE *f = fopen(path, "r");
  if (!f) {
    say(out, "cannot open %s: %s\n", path, strerror(errno));
    return TG_E_IO;
  }
  char *line = NULL;
  size_t cap = 0;
  int rc = TG_OK, lineno = 0;
  while (rc >= 0 && getline(&line, &cap, f) >= 0) {
    lineno++;
    char *s = trim(line);
    if (!*s || *s == '#') continue;
    char *fields[4] = {0};
    for (int i = 0; i < 3 && s; i++) {
      fields[i] = s;
      s = strchr(s, '|');
      if (s) *s++ = 0;
    }
    fields[3] = s;
    for (int i = 0; i < 4; i++) fields[i] = fields[i] ? trim(fields[i]) : NULL;
    if (!fields[3] || !*fields[0] || !*fields[1] || !*fields[2] || !*fields[3]) {
      say(out, "%s:%d: expected \"file.json | case description | test description | reason\"\n",
          path, lineno);
      rc = TG_E_INVAL;
      break;
    }
    struct exclusion *v = realloc(x->v, (x->n + 1) * sizeof(*v));
    if (!v) {
      rc = TG_E_NOMEM;
      break;
    }
    x->v = v;
    struct exclusion *e = &x->v[x->n++];
    *e = (struct exclusion){.file = strdup(fields[0]), .case_desc = strdup(fields[1]),
                            .test_desc = strdup(fields[2]), .line = lineno};
    if (!e->file || !e->case_desc || !e->test_desc) rc = TG_E_NOMEM;
  }
  free(line);
  fclose(f);
  return rc;
}

static bool excluded(struct exclusions *x, const char *file, const char *case_desc,
                     const char *test_desc) {
  for (size_t i = 0; i < x->n; i++) {
    struct exclusion *e = &x->v[i];
    if (!strcmp(e->file, file) && !strcmp(e->case_desc, case_desc) &&
        !strcmp(e->test_desc, test_desc)) {
      e->used = true;
      return true;
    }
  }
  return false;
}

struct run {
  const tg_schema_suite_options *opts;
  FILE *out;
  json_t *docs;
  struct exclusions excl;
  tg_schema_suite_result res;
};

/* Runs one test; besides the verdict, checks that errors are reported exactly when invalid. */
static void run_test(struct run *r, const char *file, const char *case_desc, const tg_schema *s,
                     const char *compile_err, json_t *test) {
  const char *desc = json_string_value(json_object_get(test, "description"));
  bool expect = json_is_true(json_object_get(test, "valid"));
  if (!desc) desc = "(no description)";
  if (excluded(&r->excl, file, case_desc, desc)) {
    r->res.excluded++;
    if (r->opts->verbose) say(r->out, "SKIP %s: %s / %s\n", file, case_desc, desc);
    return;
  }
  bool pass = false, consistent = true;
  if (s) {
    json_t *data = json_object_get(test, "data");
    json_t *errors = json_array();
    bool verdict = tg_schema_validate(s, data, NULL, 0);
    bool reported = errors && tg_schema_validate(s, data, errors, 8);
    consistent = !errors || (reported == verdict && verdict == !json_array_size(errors));
    pass = verdict == expect && consistent;
    json_decref(errors);
  }
  if (pass) {
    r->res.passed++;
    if (r->opts->verbose) say(r->out, "PASS %s: %s / %s\n", file, case_desc, desc);
    return;
  }
  r->res.failed++;
  say(r->out, "FAIL %s: %s / %s (expected %s)\n", file, case_desc, desc,
      expect ? "valid" : "invalid");
  if (compile_err) say(r->out, "  schema did not compile: %s\n", compile_err);
  if (!consistent) say(r->out, "  errors reported do not agree with the verdict\n");
}

static int run_file(struct run *r, const char *dir, const char *file) {
  _cleanup_free_ char *path = NULL;
  if (asprintf(&path, "%s/%s", dir, file) < 0) return TG_E_NOMEM;
  json_error_t err;
  _cleanup_json_ json_t *cases = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
  if (!cases) {
    say(r->out, "%s:%d: %s\n", path, err.line, err.text);
    return TG_E_INVAL;
  }
  if (!json_is_array(cases)) {
    say(r->out, "%s: expected an array of test cases\n", path);
    return TG_E_INVAL;
  }
  size_t i;
  json_t *tc;
  json_array_foreach (cases, i, tc) {
    const char *case_desc = json_string_value(json_object_get(tc, "description"));
    json_t *schema = json_object_get(tc, "schema"), *tests = json_object_get(tc, "tests");
    if (!case_desc || !schema || !json_is_array(tests)) {
      say(r->out, "%s: case %zu lacks a description, schema or tests\n", path, i);
      return TG_E_INVAL;
    }
    tg_schema *s = NULL;
    char *compile_err = NULL;
    tg_schema_options copts = {.documents = r->docs};
    int rc = tg_schema_compile(schema, &copts, &s, &compile_err);
    if (rc == TG_E_NOMEM) {
      free(compile_err);
      return rc;
    }
    size_t k;
    json_t *test;
    json_array_foreach (tests, k, test)
      run_test(r, file, case_desc, s, rc < 0 ? (compile_err ? compile_err : "error") : NULL, test);
    tg_schema_free(s);
    free(compile_err);
  }
  return TG_OK;
}

static int json_file_filter(const struct dirent *e) {
  return e->d_name[0] != '.' && has_suffix(e->d_name, ".json");
}

static int run_suite(struct run *r, const char *suite_dir) {
  const tg_schema_suite_options *o = r->opts;
  /* The suite's own folder first: when it is missing, that is what the message names. */
  struct dirent **files;
  int n = scandir(suite_dir, &files, json_file_filter, alphasort);
  if (n < 0) {
    say(r->out, "cannot read %s: %s\n", suite_dir, strerror(errno));
    return TG_E_IO;
  }
  if (n == 0) { /* a run of no test passes nothing: the folder is not the suite's */
    free(files);
    say(r->out, "no test files (*.json) in %s\n", suite_dir);
    return TG_E_NOTFOUND;
  }
  _cleanup_free_ char *remotes = NULL, *metas = NULL;
  int rc = 0;
  if ((!o->remotes_dir && asprintf(&remotes, "%s/../remotes", suite_dir) < 0) ||
      (!o->metaschema_dir &&
       asprintf(&metas, "%s/../../json-schema-2020-12-metaschema", suite_dir) < 0))
    rc = TG_E_NOMEM;
  /* A copied suite folder has neither beside it: the message says how to name them. */
  if (rc >= 0)
    rc = load_tree(o->remotes_dir ? o->remotes_dir : remotes, "", REMOTES_BASE, false, r->docs,
                   r->out, 0,
                   remotes ? " (name the suite's remotes folder with --remotes DIR)" : "");
  if (rc >= 0)
    rc = load_tree(o->metaschema_dir ? o->metaschema_dir : metas, "", METASCHEMA_BASE, true,
                   r->docs, r->out, 0,
                   metas ? " (name the 2020-12 meta-schemas' folder with --metaschemas DIR)" : "");
  if (rc >= 0 && o->exclusions_path) rc = read_exclusions(o->exclusions_path, &r->excl, r->out);
  for (int i = 0; i < n; i++) {
    if (rc >= 0) rc = run_file(r, suite_dir, files[i]->d_name);
    free(files[i]);
  }
  free(files);
  if (rc < 0) return rc;
  for (size_t i = 0; i < r->excl.n; i++)
    if (!r->excl.v[i].used)
      say(r->out, "note: exclusion on line %d matched no test\n", r->excl.v[i].line);
  say(r->out, "%d passed, %d failed", r->res.passed, r->res.failed);
  if (r->res.excluded) say(r->out, ", %d skipped", r->res.excluded);
  say(r->out, "\n");
  return TG_OK;
}

int tg_schema_suite_run(const char *suite_dir, const tg_schema_suite_options *opts, FILE *out,
                        tg_schema_suite_result *ret) {
  static const tg_schema_suite_options defaults = {0};
  struct run r = {.opts = opts ? opts : &defaults, .out = out, .docs = json_object()};
  if (!suite_dir) return TG_E_INVAL;
  if (!r.docs) return TG_E_NOMEM;
  int rc = run_suite(&r, suite_dir);
  json_decref(r.docs);
  free_exclusions(&r.excl);
  if (ret) *ret = r.res;
  return rc;
}

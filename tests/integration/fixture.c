#define _GNU_SOURCE
#include "fixture.h"

#include "support.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mcp/tasks.h"
#include "tools/providers.h"
#include "util/cleanup.h"

fixture *fixture_new(const tg_provider *extra) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->dir = tg_test_tmpdir();
  char *why = NULL;
  assert_int_equal(tg_db_open(f->dir, &f->db, &why), 0);
  assert_int_equal(tg_db_migrate(f->db, NULL), 0);
  const tg_provider *providers[8];
  size_t n = 0;
  for (; n < tg_builtin_providers_count; n++) providers[n] = tg_builtin_providers[n];
  if (extra) providers[n++] = extra;
  int r = tg_registry_new(providers, n, &f->registry, &why);
  if (r < 0) fail_msg("registry: %s", why);
  f->env = (tg_env){.registry = f->registry, .db = f->db, .data_dir = f->dir,
                    .public_url = "http://toolgate.test"};
  assert_int_equal(tg_tenant_create(f->db, "acme", "owner", f->tenant_id, f->owner), 0);
  return f;
}

void fixture_free(fixture *f) {
  tg_registry_free(f->registry);
  tg_db_close(f->db);
  tg_test_rmtree(f->dir);
  free(f->dir);
  free(f);
}

int fixture_world_free(void **state) {
  fixture **world = *state; /* a pointer to a struct is one to its first member */
  fixture_free(*world);
  free(world);
  return 0;
}

int fixture_call(fixture *f, const char *principal, tg_surface surface, const char *tool,
                 const char *args, const char *run_id, tg_call_result *ret) {
  json_error_t err;
  _cleanup_json_ json_t *parsed = json_loads(args ? args : "{}", JSON_DECODE_ANY, &err);
  if (!parsed) fail_msg("bad test args %s: %s", args, err.text);
  tg_call_request req = {.principal_id = principal, .surface = surface, .tool = tool,
                         .args = parsed, .run_id = run_id};
  return tg_call(&f->env, &req, ret);
}

void fixture_agent(fixture *f, const char *args, char principal[TG_UUID_LEN + 1]) {
  tg_call_result res;
  int r = fixture_call(f, f->owner, TG_SURFACE_API, "admin.agent.create", args, NULL, &res);
  if (r != 0) {
    char *text = json_dumps(res.value, 0);
    fail_msg("agent create failed: %s", text);
  }
  const char *slug = json_string_value(json_object_get(res.value, "slug"));
  assert_int_equal(tg_principal_lookup(f->db, f->tenant_id, TG_PRINCIPAL_AGENT, slug, principal), 0);
  tg_call_result_done(&res);
}

void fixture_run_start(fixture *f, const char *slug, char run[TG_UUID_LEN + 1]) {
  json_t *args = json_pack("{s:s}", "agentSlug", slug);
  char *text = json_dumps(args, JSON_COMPACT);
  tg_call_result res;
  assert_int_equal(fixture_call(f, f->owner, TG_SURFACE_API, "admin.run.start", text, NULL, &res),
                   0);
  snprintf(run, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(res.value, "runId")));
  tg_call_result_done(&res);
  free(text);
  json_decref(args);
}

void fixture_revoke_elsewhere(fixture *f, const char *agent_slug, const char *permission) {
  tg_db *db = tg_test_db_open(f->dir);
  tg_env env = f->env;
  env.db = db;
  json_t *args = json_pack("{s:s,s:s}", "agentSlug", agent_slug, "permission", permission);
  tg_call_request call = {.principal_id = f->owner, .surface = TG_SURFACE_API,
                          .tool = "admin.grant.revoke", .args = args};
  tg_call_result res;
  assert_int_equal(tg_call(&env, &call, &res), 0);
  tg_call_result_done(&res);
  json_decref(args);
  tg_db_close(db);
}

json_t *fixture_offered(fixture *f, const char *principal, tg_surface surface) {
  tg_principal *p = NULL;
  assert_int_equal(tg_principal_load(f->db, principal, &p), 0);
  json_t *tools = NULL;
  assert_int_equal(tg_tools_usable(&f->env, p, surface, &tools), 0);
  tg_principal_free(p);
  return tools;
}

long fixture_count(fixture *f, const char *table) {
  char *sql = NULL;
  assert_true(asprintf(&sql, "SELECT COUNT(*) AS n FROM %s", table) > 0);
  long n = fixture_count_where(f, sql, NULL);
  free(sql);
  return n;
}

long fixture_count_where(fixture *f, const char *sql, json_t *params) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(f->db, sql, params, &row), 0);
  long n = (long)json_integer_value(json_object_get(row, "n"));
  json_decref(row);
  return n;
}

char *fixture_snapshot(fixture *f, const char *except_table) {
  json_t *tables = NULL;
  assert_int_equal(tg_db_query(f->db,
                               "SELECT name FROM sqlite_master WHERE type = 'table'"
                               " AND name NOT LIKE 'sqlite_%' ORDER BY name",
                               NULL, &tables),
                   0);
  json_t *all = json_object();
  size_t i;
  json_t *t;
  json_array_foreach(tables, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (except_table && strcmp(name, except_table) == 0) continue;
    char *sql = NULL;
    assert_true(asprintf(&sql, "SELECT * FROM %s ORDER BY 1", name) > 0);
    json_t *rows = NULL;
    assert_int_equal(tg_db_query(f->db, sql, NULL, &rows), 0);
    json_object_set_new(all, name, rows);
    free(sql);
  }
  char *text = json_dumps(all, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(all);
  json_decref(tables);
  return text;
}

const char *fixture_code(const tg_call_result *res) {
  const char *code = json_string_value(json_object_get(json_object_get(res->value, "error"), "code"));
  return code ? code : "";
}

int fixture_connect(unsigned port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct timeval guard = {.tv_sec = FIXTURE_HANG_GUARD_S};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  return fd;
}

static atomic_uint expired_dropped;
static void count_expired_dropped(unsigned n) { atomic_fetch_add(&expired_dropped, n); }

void fixture_await_expired_task_dropped(void) {
  atomic_store(&expired_dropped, 0);
  tg_mcp_tasks_test_dropped = count_expired_dropped;
  tg_mcp_tasks_test_later_ms = TG_MCP_TASK_TTL_MS + 1;
  for (int i = 0; !atomic_load(&expired_dropped) && i < FIXTURE_HANG_GUARD_S * 100; i++)
    usleep(10 * 1000);
  tg_mcp_tasks_test_dropped = NULL;
  assert_int_equal(atomic_load(&expired_dropped), 1);
}

void fixture_http_send(int fd, unsigned port, const char *method, const char *headers,
                       const char *body) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct sockaddr_storage peer;
  socklen_t len = sizeof peer;
  if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  char *req = NULL;
  int n = asprintf(&req,
                   "%s /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%sContent-Length: %zu\r\n\r\n%s",
                   method, port, headers, body ? strlen(body) : 0, body ? body : "");
  assert_true(n > 0);
  assert_int_equal(write(fd, req, (size_t)n), n);
  free(req);
}

fixture_log fixture_log_begin(fixture *f) {
  char path[4096];
  snprintf(path, sizeof path, "%s/log-XXXXXX", f->dir);
  fixture_log log = {.fd = mkstemp(path)};
  assert_true(log.fd >= 0);
  unlink(path);
  fflush(stderr);
  log.saved = dup(STDERR_FILENO);
  assert_int_equal(dup2(log.fd, STDERR_FILENO), STDERR_FILENO);
  return log;
}

char *fixture_log_end(fixture_log log) {
  fflush(stderr);
  assert_int_equal(dup2(log.saved, STDERR_FILENO), STDERR_FILENO);
  close(log.saved);
  off_t size = lseek(log.fd, 0, SEEK_END);
  char *text = calloc(1, (size_t)size + 1);
  assert_int_equal(pread(log.fd, text, (size_t)size, 0), size);
  close(log.fd);
  fputs(text, stderr);
  return text;
}

size_t fixture_occurrences(const char *text, const char *what) {
  size_t n = 0;
  for (const char *at = text; (at = strstr(at, what)); at += strlen(what)) n++;
  return n;
}

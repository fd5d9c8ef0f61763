/* Fuzzes the HTTP request path: each input is raw bytes from a client, written into one
 * end of a socketpair whose other end the real server (libmicrohttpd, routing, Origin and
 * Host checks, sessions, the MCP dispatch, tool calls on worker threads) serves from a
 * workspace in a temporary folder. Crashes, leaks and sanitizer reports are the findings;
 * a connection the server never closes is one too. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/principal.h"
#include "core/registry.h"
#include "db/db.h"
#include "http/server.h"
#include "tools/providers.h"

#define MAX_INPUT 65536
#define CLOSE_WAIT_MS 30000 /* a healthy server answers or closes far sooner */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/tg-fuzz-http-XXXXXX";
static tg_db *db;
static tg_registry *registry;
static tg_http *http;
static tg_http_config cfg;
static char owner[TG_UUID_LEN + 1];

static void cleanup(void) {
  tg_http_stop(http);
  tg_registry_free(registry);
  tg_db_close(db);
  const char *files[] = {"toolgate.db", "toolgate.db-wal", "toolgate.db-shm"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char *why = NULL;
  char tenant[TG_UUID_LEN + 1];
  unsigned port = 0;
  if (!mkdtemp(dir) || tg_db_open(dir, &db, &why) < 0 || tg_db_migrate(db, NULL) < 0 ||
      tg_tenant_create(db, "fuzz", "owner", tenant, owner) < 0 ||
      tg_registry_new(tg_builtin_providers, tg_builtin_providers_count, &registry, &why) < 0) {
    fprintf(stderr, "fuzz_http: setup failed: %s\n", why ? why : "?");
    abort();
  }
  cfg = (tg_http_config){.listen = "127.0.0.1:0", .no_auth = true, .no_auth_principal = owner,
                         .threads = 4, .data_dir = dir, .registry = registry,
                         .server = {.name = "toolgate", .version = "fuzz"}};
  if (tg_http_start(&cfg, &http, &port) < 0) abort();
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) < 0) abort();
  if (tg_http_add_connection(http, fds[0]) < 0) {
    close(fds[1]);
    return 0;
  }
  for (size_t off = 0; off < size;) {
    ssize_t n = write(fds[1], data + off, size - off);
    if (n <= 0) break;
    off += (size_t)n;
  }
  shutdown(fds[1], SHUT_WR);
  char buf[4096];
  struct pollfd p = {.fd = fds[1], .events = POLLIN};
  for (;;) {
    int ready = poll(&p, 1, CLOSE_WAIT_MS);
    if (ready == 0) abort(); /* the server kept a finished client waiting */
    if (ready < 0 || read(fds[1], buf, sizeof buf) <= 0) break;
  }
  close(fds[1]);
  return 0;
}

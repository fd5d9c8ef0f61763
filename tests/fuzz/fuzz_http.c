/* Fuzzes the HTTP request path: each input is raw bytes from a client, written into one
 * end of a socketpair whose other end the real server (libmicrohttpd, routing, Origin and
 * Host checks, sessions, the MCP dispatch, tool calls on worker threads, the conformance
 * fixtures and tasks) serves from a workspace in a temporary folder. An input naming the
 * placeholder TOKEN_MARK goes to a second server that authenticates, with the placeholder
 * replaced by an agent's live token (so that a seed can hold one and mutations break it);
 * any other goes to one serving the workspace owner without authentication. Crashes, leaks
 * and sanitizer reports are the findings; a connection the server never closes is one too. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/call.h"
#include "http/server.h"
#include "workspace.h"

#define MAX_INPUT 65536
#define CLOSE_WAIT_MS 30000 /* a healthy server answers or closes far sooner */
#define TOKEN_MARK "@TOKEN@"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_workspace ws;
static tg_http *open_http, *auth_http;
static tg_http_config open_cfg, auth_cfg;
static char token[128];

static void cleanup(void) {
  tg_http_stop(open_http);
  tg_http_stop(auth_http);
  tg_rate_limit_free(auth_cfg.rate_limit);
  fuzz_workspace_close(&ws);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_workspace_open(&ws, "fuzz_http");
  json_decref(fuzz_owner_call(&ws, "admin.agent.create",
                              "{\"slug\":\"bot\",\"grants\":[\"canAssignTasks\"]}"));
  json_t *made = fuzz_owner_call(&ws, "admin.token.create", "{\"agentSlug\":\"bot\"}");
  const char *made_token = json_string_value(json_object_get(made, "token"));
  if (!made_token || strlen(made_token) >= sizeof token) abort();
  strcpy(token, made_token);
  json_decref(made);
  tg_mcp_server server = {.fixtures = true, .name = "toolgate", .version = "fuzz"};
  open_cfg = (tg_http_config){.listen = "127.0.0.1:0", .no_auth = true,
                              .no_auth_principal = ws.owner, .threads = 4, .data_dir = ws.dir,
                              .registry = ws.registry, .server = server};
  /* The authenticating server limits its caller's rate, low enough that calls are both
   * served and refused for it; the other limits none. */
  auth_cfg = (tg_http_config){.listen = "127.0.0.1:0", .threads = 4, .data_dir = ws.dir,
                              .registry = ws.registry, .server = server,
                              .rate_limit = tg_rate_limit_new(64, 1)};
  if (!auth_cfg.rate_limit) abort();
  unsigned port = 0;
  if (tg_http_start(&open_cfg, &open_http, &port) < 0 ||
      tg_http_start(&auth_cfg, &auth_http, &port) < 0)
    abort();
  atexit(cleanup);
  return 0;
}

/* data with each TOKEN_MARK replaced by the live token, in *out (malloc'd); its length. */
static size_t with_token(const uint8_t *data, size_t size, uint8_t **out) {
  size_t mark = strlen(TOKEN_MARK), tok = strlen(token), len = 0;
  uint8_t *buf = malloc(size / mark * tok + size + 1);
  if (!buf) abort();
  for (size_t i = 0; i < size;) {
    if (size - i >= mark && memcmp(data + i, TOKEN_MARK, mark) == 0) {
      memcpy(buf + len, token, tok);
      len += tok;
      i += mark;
    } else {
      buf[len++] = data[i++];
    }
  }
  *out = buf;
  return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  uint8_t *sent = NULL;
  bool authed = memmem(data, size, TOKEN_MARK, strlen(TOKEN_MARK)) != NULL;
  if (authed) size = with_token(data, size, &sent);
  data = authed ? sent : data;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) < 0) abort();
  if (tg_http_add_connection(authed ? auth_http : open_http, fds[0]) < 0) {
    close(fds[1]);
    free(sent);
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
  free(sent);
  return 0;
}

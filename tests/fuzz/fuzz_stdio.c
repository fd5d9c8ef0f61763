/* Fuzzes MCP over stdio: each input is what a client writes on the server's standard input,
 * fed through a pipe to the real serving loop of one connection (framing, the reader thread,
 * the queue, dispatch, tool calls, tasks and the conformance fixtures) as the workspace
 * owner, followed by end of input, after which serving must return. Everything the server
 * writes must be a line holding a JSON-RPC message or batch: its output is the protocol. Crashes, leaks,
 * sanitizer reports and output that is not JSON are the findings; a serve that never returns
 * is one too (libFuzzer's -timeout). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp/stdio.h"
#include "util/json.h"
#include "util/status.h"
#include "workspace.h"

#define MAX_INPUT 65536 /* a pipe's default capacity: written whole before serving begins */
#define MAX_OUTPUT (64u * 1024u * 1024u)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_workspace ws;

static void cleanup(void) { fuzz_workspace_close(&ws); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_workspace_open(&ws, "fuzz_stdio");
  atexit(cleanup);
  return 0;
}

/* What the server wrote, drained from its pipe on a thread so that it never blocks. */
typedef struct output {
  int fd;
  char *text;
  size_t len;
} output;

static void *drain(void *arg) {
  output *o = arg;
  size_t room = 0;
  for (;;) {
    if (o->len + 4096 > room) {
      room = room ? 2 * room : 65536;
      if (room > MAX_OUTPUT) abort(); /* a bounded input made unbounded output */
      if (!(o->text = realloc(o->text, room + 1))) abort();
    }
    ssize_t n = read(o->fd, o->text + o->len, room - o->len);
    if (n <= 0) break;
    o->len += (size_t)n;
  }
  return NULL;
}

/* Whether msg is a JSON-RPC 2.0 message: an object saying so. */
static bool message(const json_t *msg) {
  const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
  return json_is_object(msg) && version && strcmp(version, "2.0") == 0;
}

/* Whether msg is a message, or a batch of them (an array of at least one). */
static bool message_or_batch(const json_t *msg) {
  if (message(msg)) return true;
  if (!json_is_array(msg) || json_array_size(msg) == 0) return false;
  size_t i;
  const json_t *element;
  json_array_foreach(msg, i, element) if (!message(element)) return false;
  return true;
}

/* Aborts unless every line of o is a message or a batch. */
static void check_lines(const output *o) {
  if (!o->text) return;
  for (const char *line = o->text; line < o->text + o->len;) {
    const char *end = memchr(line, '\n', (size_t)(o->text + o->len - line));
    if (!end) abort(); /* a message cut short */
    json_error_t err;
    json_t *msg = json_loadb(line, (size_t)(end - line), 0, &err);
    if (!message_or_batch(msg)) {
      fprintf(stderr, "fuzz_stdio: not a message: %.*s\n", (int)(end - line), line);
      abort();
    }
    json_decref(msg);
    line = end + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) abort();
  for (size_t off = 0; off < size;) {
    ssize_t n = write(in[1], data + off, size - off);
    if (n <= 0) abort();
    off += (size_t)n;
  }
  close(in[1]);
  output o = {.fd = out[0]};
  pthread_t drainer;
  if (pthread_create(&drainer, NULL, drain, &o) != 0) abort();
  FILE *from = fdopen(in[0], "r"), *to = fdopen(out[1], "w");
  if (!from || !to) abort();
  tg_env env = {.registry = ws.registry, .db = ws.db, .data_dir = ws.dir};
  tg_mcp_server srv = {.fixtures = true, .name = "toolgate", .version = "fuzz"};
  int r = tg_mcp_stdio_serve(&srv, &env, ws.owner, NULL, from, to, -1);
  fclose(from);
  fclose(to);
  pthread_join(drainer, NULL);
  close(out[0]);
  if (r < 0 && r != TG_E_NOMEM) abort(); /* its output never failed: nothing else explains it */
  check_lines(&o);
  free(o.text);
  return 0;
}

/* Fuzzes MCP over stdio: each input is what a client writes on the server's standard input,
 * fed through a pipe to the real serving loop of one connection (framing, the reader thread,
 * the queue, dispatch, tool calls and their rate limit, tasks and the conformance fixtures),
 * followed by end of input, after which serving must return. An input of even length is
 * served as the workspace owner; one of odd length as an active agent, whose server opens its
 * run at its first call that its rate lets through (ended once serving returned).
 * Everything the server writes must be a line holding a JSON-RPC message or batch: its output
 * is the protocol.
 * Crashes, leaks, sanitizer reports and output that is not JSON are the findings; a serve
 * that never returns is one too (libFuzzer's -timeout).
 *
 * The server's own requests (elicitation, sampling) carry ids drawn at random, which no input
 * can know: a line that begins with ANSWER_MARK is an answer to the next of them, the rest of
 * the line spliced after its id ("@{...}" goes out as {"id":ID,...}; anything else as it is).
 * Such a line is written once the server asked something not answered yet, or answered the
 * request written before it (it asked nothing), or stopped, or the input's time to wait is
 * spent; the lines go out one at a time. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/run.h"
#include "mcp/stdio.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/status.h"
#include "workspace.h"

#define MAX_INPUT 65536 /* bytes of an input */
#define MAX_OUTPUT (64u * 1024u * 1024u)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_workspace ws;
static char agent[TG_UUID_LEN + 1]; /* an active agent's principal, holding every flag */
/* Kept across inputs, and low enough that calls are both served and refused for their rate. */
static tg_rate_limit *rate_limit;

static void cleanup(void) {
  fuzz_workspace_close(&ws);
  tg_rate_limit_free(rate_limit);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  signal(SIGPIPE, SIG_IGN); /* a server that stopped reading: the input's writes fail */
  fuzz_workspace_open(&ws, "fuzz_stdio");
  json_t *made_args = json_pack("{s:s,s:o}", "slug", "fuzz", "grants", tg_agent_flags_all());
  char *args = made_args ? json_dumps(made_args, 0) : NULL;
  json_decref(made_args);
  if (!args) abort();
  json_decref(fuzz_owner_call(&ws, "admin.agent.create", args));
  free(args);
  /* A token's holder names the agent's principal. */
  json_t *made = fuzz_owner_call(&ws, "admin.token.create", "{\"agentSlug\":\"fuzz\"}");
  const char *principal = json_string_value(json_object_get(made, "principalId"));
  if (!principal || strlen(principal) != TG_UUID_LEN) abort();
  memcpy(agent, principal, sizeof agent);
  json_decref(made);
  if (!(rate_limit = tg_rate_limit_new(50, 1))) abort();
  atexit(cleanup);
  return 0;
}

#define ANSWER_MARK '@'
#define ASK_WAIT_MS 1000 /* an input's waits for the server to ask or answer, in all */
#define MAX_ASKED 64      /* questions of the server remembered, not answered yet */

/* What the server wrote, drained from its pipe on a thread so that it never blocks, and what
 * it asked and answered so far, for the lines that answer it. */
typedef struct output {
  int fd;
  char *text;
  size_t len, parsed; /* bytes of text read as lines so far */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  char *asked[MAX_ASKED]; /* ids of the server's requests not answered yet (JSON text) */
  size_t n_asked;
  json_t *answered; /* ids (JSON text) of the client's requests the server answered: keys */
  bool ended;       /* the server closed its output */
} output;

/* Notes what one line of output asked or answered; with o's lock. */
static void note_line_locked(output *o, const char *line, size_t len) {
  json_t *msg = json_loadb(line, len, 0, NULL);
  json_t *id = json_object_get(msg, "id");
  char *key = id ? json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  if (key && json_object_get(msg, "method")) {
    if (o->n_asked < MAX_ASKED) o->asked[o->n_asked++] = TAKE_PTR(key);
  } else if (key) {
    json_object_set_new(o->answered, key, json_true());
  }
  free(key);
  json_decref(msg);
}

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
    pthread_mutex_lock(&o->lock);
    o->len += (size_t)n;
    for (char *nl; (nl = memchr(o->text + o->parsed, '\n', o->len - o->parsed));) {
      note_line_locked(o, o->text + o->parsed, (size_t)(nl - (o->text + o->parsed)));
      o->parsed = (size_t)(nl + 1 - o->text);
    }
    pthread_cond_broadcast(&o->changed);
    pthread_mutex_unlock(&o->lock);
  }
  pthread_mutex_lock(&o->lock);
  o->ended = true;
  pthread_cond_broadcast(&o->changed);
  pthread_mutex_unlock(&o->lock);
  return NULL;
}

/* The id of the next question of the server not answered (the caller frees it), once there
 * is one; NULL when the server answered the request last written (last: its id as JSON text,
 * NULL when it wrote none) or stopped first, or the monotonic clock reached deadline. */
static char *next_question(output *o, const char *last, int64_t deadline) {
  char *id = NULL;
  pthread_mutex_lock(&o->lock);
  while (!o->n_asked && !o->ended && last && !json_object_get(o->answered, last) &&
         !tg_timed_wait(&o->changed, &o->lock, deadline - tg_monotonic_ms()))
    ;
  if (o->n_asked) {
    id = o->asked[0];
    memmove(o->asked, o->asked + 1, --o->n_asked * sizeof o->asked[0]);
  }
  pthread_mutex_unlock(&o->lock);
  return id;
}

static void write_all(int fd, const char *bytes, size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t n = write(fd, bytes + off, len - off);
    if (n <= 0) return; /* the server stopped reading */
    off += (size_t)n;
  }
}

/* Writes the input's lines to fd one at a time, answering the server's questions. */
static void feed(int fd, const uint8_t *data, size_t size, output *o) {
  char *last = NULL; /* the id of the last request written, as JSON text */
  int64_t deadline = tg_monotonic_ms() + ASK_WAIT_MS;
  for (size_t off = 0; off < size;) {
    const uint8_t *nl = memchr(data + off, '\n', size - off);
    size_t len = nl ? (size_t)(nl - (data + off)) + 1 : size - off;
    const char *line = (const char *)data + off;
    off += len;
    char *id = len && line[0] == ANSWER_MARK ? next_question(o, last, deadline) : NULL;
    if (id && len > 1 && line[1] == '{') {
      write_all(fd, "{\"id\":", 6);
      write_all(fd, id, strlen(id));
      write_all(fd, ",", 1);
      write_all(fd, line + 2, len - 2);
    } else {
      write_all(fd, line + (id != NULL), len - (id != NULL));
    }
    free(id);
    json_t *msg = json_loadb(line, len, 0, NULL);
    json_t *request_id = json_object_get(msg, "method") ? json_object_get(msg, "id") : NULL;
    if (request_id) {
      free(last);
      last = json_dumps(request_id, JSON_COMPACT | JSON_ENCODE_ANY);
    }
    json_decref(msg);
  }
  free(last);
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

/* One connection served, on a thread of its own while the input is written, as principal;
 * as an agent, with its own run ("" until opened). */
typedef struct serving {
  FILE *from, *to;
  const char *principal;
  char *run;
  int result;
} serving;

static void *serve(void *arg) {
  serving *sv = arg;
  tg_env env = {.registry = ws.registry, .db = ws.db, .data_dir = ws.dir,
                .rate_limit = rate_limit};
  tg_mcp_server srv = {.fixtures = true, .name = "toolgate", .version = "fuzz", .own_run = sv->run};
  sv->result = tg_mcp_stdio_serve(&srv, &env, sv->principal, NULL, sv->from, sv->to, -1);
  fclose(sv->from);
  fclose(sv->to); /* the drainer then reads the end of the output */
  return NULL;
}

static int end_run(void *arg, tg_db *db) { return tg_run_end(db, arg, "completed"); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) abort();
  output o = {.fd = out[0], .answered = json_object()};
  if (!o.answered) abort();
  pthread_mutex_init(&o.lock, NULL);
  pthread_cond_init(&o.changed, NULL);
  pthread_t drainer, server;
  if (pthread_create(&drainer, NULL, drain, &o) != 0) abort();
  char run[TG_UUID_LEN + 1] = "";
  bool as_agent = size % 2;
  serving sv = {.from = fdopen(in[0], "r"), .to = fdopen(out[1], "w"),
                .principal = as_agent ? agent : ws.owner, .run = as_agent ? run : NULL};
  if (!sv.from || !sv.to) abort();
  if (pthread_create(&server, NULL, serve, &sv) != 0) abort();
  feed(in[1], data, size, &o);
  close(in[1]);
  pthread_join(server, NULL);
  pthread_join(drainer, NULL);
  close(out[0]);
  if (sv.result < 0 && sv.result != TG_E_NOMEM) abort(); /* its output never failed */
  if (*run && tg_db_batch(ws.db, end_run, run) < 0) abort();
  check_lines(&o);
  free(o.text);
  for (size_t i = 0; i < o.n_asked; i++) free(o.asked[i]);
  json_decref(o.answered);
  pthread_cond_destroy(&o.changed);
  pthread_mutex_destroy(&o.lock);
  return 0;
}

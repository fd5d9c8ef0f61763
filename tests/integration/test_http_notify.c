/* Cancellation and list changes over Streamable HTTP, end to end: the real server on a
 * loopback port, driven with libcurl, each exchange read on a thread of its own so that a
 * stream can stay open while other requests are made. */
#define _GNU_SOURCE
#include "support.h"
#include "util/clock.h"
#include "util/hash.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REPLACED_MALLOC 1
#include <sanitizer/allocator_interface.h>
#endif
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REPLACED_MALLOC 1
#include <sanitizer/allocator_interface.h>
#endif
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/rate_limit.h"
#include "fixture.h"
#include "http/server.h"
#include "tools/conformance.h"
#include "tools/providers.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/process_tag.h"
#include "util/status.h"

#define HANG_GUARD_S FIXTURE_HANG_GUARD_S
#define MODERN_META                                                      \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{}}"
#define MODERN_HEADERS(method) "MCP-Protocol-Version: 2026-07-28\nMcp-Method: " method
#define LISTEN(id)                                                                       \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"subscriptions/listen\",\"params\":{" \
  "\"notifications\":{\"toolsListChanged\":true}," MODERN_META "}}"
/* A stateless call of slow_compute from a client that takes tasks. */
#define TASK_CALL(id, args)                                                                  \
  "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":"          \
  "\"slow_compute\",\"arguments\":" args ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":" \
  "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"           \
  "\"io.modelcontextprotocol/tasks\":{}}}}}}"
#define POOL_THREADS 4
/* The error that takes the place of a reply past the bounds on output. */
#define REFUSED "The request was served, but its result is too large to send"
#define PING "{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}"
/* notifications/cancelled of request id (JSON text). */
#define CANCEL(id) \
  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":" id "}}"
/* A 2025-11-25 tools/call of tool; id and args are JSON text. */
#define CALL_WITH(id, tool, args)                                                          \
  "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" tool \
  "\",\"arguments\":" args "}}"
#define CALL(id, tool) CALL_WITH(#id, tool, "{}")
/* The headers and body of a 2026-07-28 tools/call of tool; id and args are JSON text. */
#define STATELESS_ROUTE(tool) MODERN_HEADERS("tools/call") "\nMcp-Name: " tool
#define STATELESS_CALL(id, tool, args)                                                      \
  "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" tool \
  "\",\"arguments\":" args "," MODERN_META "}}"

/* ---- a tool that waits until its call is cancelled ---- */

static pthread_mutex_t kit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kit_changed = PTHREAD_COND_INITIALIZER;
static bool kit_started, kit_cancelled, kit_go;
static bool kit_hold; /* set: test_wait_cancel, once cancelled, ends only as it is cleared */
static int kit_running; /* calls of the tool waiting now */
static int kit_starts;  /* calls of the tool that began waiting */
static int kit_acts;    /* calls of the tools that write a row (act_once) that began */
static char kit_last[64]; /* the name of the caller whose call began waiting last */

static void kit_set(bool *flag) {
  pthread_mutex_lock(&kit_lock);
  *flag = true;
  pthread_cond_broadcast(&kit_changed);
  pthread_mutex_unlock(&kit_lock);
}

/* Waits until *flag is set, or (flag NULL) until n calls of the tool wait at once; false
 * when that never came. Tools wait with it too: only the test's thread may fail the test. */
static bool kit_reached(bool *flag, int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += HANG_GUARD_S;
  pthread_mutex_lock(&kit_lock);
  int r = 0;
  while (!(flag ? *flag : kit_running >= n) && r == 0)
    r = pthread_cond_timedwait(&kit_changed, &kit_lock, &until);
  bool ok = flag ? *flag : kit_running >= n;
  pthread_mutex_unlock(&kit_lock);
  return ok;
}

static void kit_wait_for(bool *flag, int n) {
  if (!kit_reached(flag, n)) fail_msg("the tool never got that far");
}

static void kit_wait(bool *flag) { kit_wait_for(flag, 0); }

static void kit_count(int delta) {
  pthread_mutex_lock(&kit_lock);
  kit_running += delta;
  pthread_cond_broadcast(&kit_changed);
  pthread_mutex_unlock(&kit_lock);
}

/* With "note", says something first. */
static int wait_cancel(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  if (!ch || !ch->cancelled) return TG_E_INVAL;
  if (json_is_true(json_object_get(args, "note")) &&
      ch->notify(ch->self, "notifications/message",
                 json_pack("{s:s,s:s}", "level", "info", "data", "waiting")) < 0)
    return TG_E_IO;
  kit_set(&kit_started);
  pthread_mutex_lock(&kit_lock);
  kit_starts++;
  snprintf(kit_last, sizeof kit_last, "%s", cx->principal->name);
  pthread_mutex_unlock(&kit_lock);
  kit_count(1);
  for (long waited_ms = 0; !ch->cancelled(ch->self); waited_ms += 10) {
    if (waited_ms > HANG_GUARD_S * 1000L) {
      kit_count(-1);
      return TG_E_IO;
    }
    usleep(10 * 1000);
  }
  kit_count(-1);
  kit_set(&kit_cancelled);
  pthread_mutex_lock(&kit_lock);
  for (long waited_ms = 0; kit_hold && waited_ms <= HANG_GUARD_S * 1000L; waited_ms += 10) {
    pthread_mutex_unlock(&kit_lock);
    usleep(10 * 1000);
    pthread_mutex_lock(&kit_lock);
  }
  pthread_mutex_unlock(&kit_lock);
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "The client cancelled the call");
}

/* {"text": size bytes}; NULL without memory. */
static json_t *text_of(size_t size) {
  char *text = malloc(size + 1);
  if (!text) return NULL;
  memset(text, 'x', size);
  text[size] = 0;
  json_t *answer = json_pack("{s:s}", "text", text);
  free(text);
  return answer;
}

/* Says something (with "note", a text of that size; with "silent", nothing), then ends its
 * answer for the client to resume (polling); with "wait", only once the test says the client
 * has read what it said; with "twice", ends it again once the test says so; with "bytes",
 * answers a text of that size. */
static int note_then_close(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  json_int_t note = json_integer_value(json_object_get(args, "note"));
  int r = json_is_true(json_object_get(args, "silent"))
              ? 0
              : ch->notify(ch->self, "notifications/message",
                           json_pack("{s:s,s:o}", "level", "info", "data",
                                     note > 0 ? text_of((size_t)note)
                                              : json_string("before the close")));
  if (r == 0 && json_is_true(json_object_get(args, "wait")) && !kit_reached(&kit_go, 0))
    r = TG_E_IO;
  if (r == 0) r = ch->close_stream ? ch->close_stream(ch->self) : TG_E_INVAL;
  if (r == 0 && json_is_true(json_object_get(args, "twice")))
    r = kit_reached(&kit_go, 0) ? ch->close_stream(ch->self) : TG_E_IO;
  json_int_t bytes = json_integer_value(json_object_get(args, "bytes"));
  if (r == 0) *ret = bytes > 0 ? text_of((size_t)bytes) : json_object();
  return r == 0 && !*ret ? TG_E_NOMEM : r;
}

/* Says something (with "note", a text of that size), then answers with a text of "bytes"
 * bytes, by default more than a stream keeps unread for its client. */
static int note_then_overflow(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  json_int_t note = json_integer_value(json_object_get(args, "note"));
  int r = ch->notify(ch->self, "notifications/message",
                     json_pack("{s:s,s:o}", "level", "info", "data",
                               note > 0 ? text_of((size_t)note) : json_string("before the answer")));
  json_int_t bytes = json_integer_value(json_object_get(args, "bytes"));
  if (r == 0) *ret = text_of(bytes > 0 ? (size_t)bytes : TG_HTTP_MAX_STREAM_BYTES + 1);
  return r == 0 && !*ret ? TG_E_NOMEM : r;
}

/* Says it started, then answers once the test says so. */
static int wait_go(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  (void)args;
  kit_set(&kit_started);
  if (!kit_reached(&kit_go, 0)) return TG_E_IO;
  *ret = json_pack("{s:b}", "went", 1);
  return *ret ? 0 : TG_E_NOMEM;
}

/* Answers a value that reads as an InputRequiredResult: its structured content, since its
 * result is not an MCP result as it is. */
static int says_input_required(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  (void)args;
  *ret = json_pack("{s:s}", "resultType", "input_required");
  return *ret ? 0 : TG_E_NOMEM;
}

/* Writes one activity row; counts the calls that began (kit_acts). */
static int act_once(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)args;
  pthread_mutex_lock(&kit_lock);
  kit_acts++;
  pthread_mutex_unlock(&kit_lock);
  int r = tg_activity(cx, "TEST_ONCE", NULL, "once a run", NULL);
  if (r == 0 && !(*ret = json_object())) r = TG_E_NOMEM;
  return r;
}

static const char kit_spec[] =
    "{\"provider\":\"kit\",\"tools\":["
    "{\"name\":\"test.wait.cancel\",\"description\":\"Waits until its call is cancelled.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"note\":{\"type\":\"boolean\"}}},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.wait.here\",\"description\":\"Waits until its call is cancelled, on "
    "the thread that read its request.\",\"surfaces\":[\"mcp\"],\"effect\":\"read\","
    "\"risk\":\"low\",\"permissions\":[],\"inputSchema\":{\"type\":\"object\"},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.note.close\",\"description\":\"Sends a message, then ends its answer.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"wait\":{\"type\":\"boolean\"},"
    "\"silent\":{\"type\":\"boolean\"},\"twice\":{\"type\":\"boolean\"},"
    "\"bytes\":{\"type\":\"integer\"},\"note\":{\"type\":\"integer\"}}},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.note.overflow\",\"description\":\"Sends a message, then a large answer.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"bytes\":{\"type\":\"integer\"},"
    "\"note\":{\"type\":\"integer\"}}},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.wait.go\",\"description\":\"Answers once the test says so.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.says.input_required\",\"description\":\"Answers a look-alike.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.act.once\",\"description\":\"Writes a row, once a run.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],"
    "\"maxPerRun\":1,\"inputSchema\":{\"type\":\"object\"},"
    "\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.act.pooled\",\"description\":\"Writes a row, on a pool thread.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],\"inputSchema\":{\"type\":\"object\"},"
    "\"outputSchema\":{\"type\":\"object\"}}]}";
static const tg_handler_entry kit_handlers[] = {{"test.wait.cancel", wait_cancel},
                                                {"test.wait.here", wait_cancel},
                                                {"test.note.close", note_then_close},
                                                {"test.note.overflow", note_then_overflow},
                                                {"test.wait.go", wait_go},
                                                {"test.says.input_required", says_input_required},
                                                {"test.act.once", act_once},
                                                {"test.act.pooled", act_once}};
static const tg_provider kit = {.name = "kit", .spec_json = kit_spec, .handlers = kit_handlers,
                                .n_handlers = sizeof kit_handlers / sizeof *kit_handlers};

/* ---- the server ---- */

typedef struct world {
  fixture *f;
  tg_registry *registry; /* built-in, conformance and kit providers */
  char agent[TG_UUID_LEN + 1]; /* "bot", holding tasks.assign */
  char tokens[4][128];         /* Bearer tokens of "bot", "bot2", "bot3", and "bot" again */
  const char *token;           /* whom requests act as: "bot" unless a test says otherwise */
  tg_http_config cfg;
  tg_http *h;
  char url[64];
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(NULL);
  fixture_agent(w->f, "{\"slug\":\"bot\",\"grants\":[\"canAssignTasks\"]}", w->agent);
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  fixture_agent(w->f, "{\"slug\":\"bot3\"}", other);
  static const char *const slugs[] = {"bot", "bot2", "bot3", "bot"};
  for (int i = 0; i < 4; i++) {
    char args[64];
    snprintf(args, sizeof args, "{\"agentSlug\":\"%s\"}", slugs[i]);
    tg_call_result res;
    assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.token.create", args,
                                  NULL, &res),
                     0);
    snprintf(w->tokens[i], sizeof w->tokens[i], "%s",
             json_string_value(json_object_get(res.value, "token")));
    assert_true(w->tokens[i][0]);
    tg_call_result_done(&res);
  }
  w->token = w->tokens[0];
  const tg_provider *providers[16];
  size_t n = 0;
  for (; n < tg_builtin_providers_count; n++) providers[n] = tg_builtin_providers[n];
  providers[n++] = &tg_provider_conformance;
  providers[n++] = &kit;
  char *why = NULL;
  if (tg_registry_new(providers, n, &w->registry, &why) < 0) fail_msg("registry: %s", why);
  w->cfg = (tg_http_config){.listen = "127.0.0.1:0", .threads = POOL_THREADS, .data_dir = w->f->dir,
                            .registry = w->registry,
                            .server = {.fixtures = true, .name = "toolgate", .version = "test"}};
  unsigned port = 0;
  assert_int_equal(tg_http_start(&w->cfg, &w->h, &port), 0);
  snprintf(w->url, sizeof w->url, "http://127.0.0.1:%u/mcp", port);
  kit_started = kit_cancelled = kit_go = kit_hold = false;
  kit_running = kit_starts = kit_acts = 0;
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  tg_http_test_session_found = NULL; /* a failed test's hook that never came */
  tg_mcp_tasks_test_later_ms = 0;     /* a failed test's clock of the tasks' expiry */
  pthread_mutex_lock(&kit_lock); /* tools still waiting on the test (one failed) end now */
  kit_hold = false;
  pthread_mutex_unlock(&kit_lock);
  kit_set(&kit_go);
  tg_http_stop(w->h);
  tg_registry_free(w->registry);
  fixture_free(w->f);
  free(w);
  return 0;
}

/* ---- exchanges: one request and what comes back, read on a thread ---- */

typedef struct exchange {
  CURL *curl;
  struct curl_slist *headers;
  char *body;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t grew;
  char *got; /* the response body so far, NUL-terminated */
  size_t len;
  long status;
  char sid[64];  /* Mcp-Session-Id of the response */
  char type[64]; /* its Content-Type */
  char challenge[96]; /* its WWW-Authenticate */
  bool ended, abort;
} exchange;

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
  exchange *ex = arg;
  pthread_mutex_lock(&ex->lock);
  ex->got = realloc(ex->got, ex->len + size * n + 1);
  memcpy(ex->got + ex->len, data, size * n);
  ex->len += size * n;
  ex->got[ex->len] = 0;
  pthread_cond_broadcast(&ex->grew);
  pthread_mutex_unlock(&ex->lock);
  return size * n;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg) {
  exchange *ex = arg;
  pthread_mutex_lock(&ex->lock);
  if (strncmp(data, "HTTP/", 5) == 0) sscanf(data, "HTTP/%*s %ld", &ex->status);
  if (strncasecmp(data, "Mcp-Session-Id: ", 16) == 0) sscanf(data + 16, "%63[0-9a-f]", ex->sid);
  if (strncasecmp(data, "Content-Type: ", 14) == 0) sscanf(data + 14, "%63[^\r\n]", ex->type);
  if (strncasecmp(data, "WWW-Authenticate: ", 18) == 0)
    sscanf(data + 18, "%95[^\r\n]", ex->challenge);
  pthread_cond_broadcast(&ex->grew);
  pthread_mutex_unlock(&ex->lock);
  return size * n;
}

/* Aborts the transfer, closing the connection, once the test asks. */
static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  exchange *ex = arg;
  pthread_mutex_lock(&ex->lock);
  bool abort = ex->abort;
  pthread_mutex_unlock(&ex->lock);
  return abort;
}

static void *perform(void *arg) {
  exchange *ex = arg;
  curl_easy_perform(ex->curl);
  pthread_mutex_lock(&ex->lock);
  ex->ended = true;
  pthread_cond_broadcast(&ex->grew);
  pthread_mutex_unlock(&ex->lock);
  return NULL;
}

/* Starts method on the server with the session sid (or none), extra headers ("Name: value"
 * lines; an Accept among them replaces the usual one) and body (NULL: none). */
static exchange *start(world *w, const char *method, const char *sid, const char *extra,
                       const char *body) {
  exchange *ex = calloc(1, sizeof *ex);
  pthread_mutex_init(&ex->lock, NULL);
  pthread_cond_init(&ex->grew, NULL);
  ex->got = calloc(1, 1);
  ex->curl = curl_easy_init();
  if (!extra || strncmp(extra, "Accept:", 7) != 0)
    ex->headers = curl_slist_append(NULL, "Accept: application/json, text/event-stream");
  ex->headers = curl_slist_append(ex->headers, "Content-Type: application/json");
  char line[256];
  snprintf(line, sizeof line, "Authorization: Bearer %s", w->token);
  ex->headers = curl_slist_append(ex->headers, line);
  if (sid) {
    snprintf(line, sizeof line, "Mcp-Session-Id: %s", sid);
    ex->headers = curl_slist_append(ex->headers, line);
  }
  for (const char *p = extra; p && *p;) {
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)n, p);
    ex->headers = curl_slist_append(ex->headers, line);
    p += n + (p[n] == '\n');
  }
  curl_easy_setopt(ex->curl, CURLOPT_URL, w->url);
  curl_easy_setopt(ex->curl, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(ex->curl, CURLOPT_HTTPHEADER, ex->headers);
  if (body) {
    ex->body = strdup(body);
    curl_easy_setopt(ex->curl, CURLOPT_POSTFIELDS, ex->body);
  }
  curl_easy_setopt(ex->curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(ex->curl, CURLOPT_WRITEDATA, ex);
  curl_easy_setopt(ex->curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(ex->curl, CURLOPT_HEADERDATA, ex);
  curl_easy_setopt(ex->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(ex->curl, CURLOPT_XFERINFODATA, ex);
  curl_easy_setopt(ex->curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(ex->curl, CURLOPT_NOSIGNAL, 1L);
  pthread_create(&ex->thread, NULL, perform, ex);
  return ex;
}

/* Waits until the body holds text, or the exchange ended: whether text arrived (NULL: whether
 * it ended). Fails on a hang. */
static bool wait_for(exchange *ex, const char *text) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += HANG_GUARD_S;
  pthread_mutex_lock(&ex->lock);
  int r = 0;
  while (r == 0 && !ex->ended && !(text && strstr(ex->got, text)))
    r = pthread_cond_timedwait(&ex->grew, &ex->lock, &until);
  bool ok = text ? strstr(ex->got, text) != NULL : ex->ended;
  pthread_mutex_unlock(&ex->lock);
  if (r != 0) fail_msg("the server hung; got (HTTP %ld): %s", ex->status, ex->got);
  return ok;
}

static void await(exchange *ex, const char *text) {
  if (!wait_for(ex, text))
    fail_msg("expected %s; got (HTTP %ld): %s", text ? text : "the end", ex->status, ex->got);
}

/* Closes the exchange, aborting it when it is still running. */
static void finish(exchange *ex) {
  pthread_mutex_lock(&ex->lock);
  ex->abort = true;
  pthread_mutex_unlock(&ex->lock);
  pthread_join(ex->thread, NULL);
  curl_easy_cleanup(ex->curl);
  curl_slist_free_all(ex->headers);
  pthread_mutex_destroy(&ex->lock);
  pthread_cond_destroy(&ex->grew);
  free(ex->body);
  free(ex->got);
  free(ex);
}

/* A whole request: its status is checked, its body returned (malloc'd). */
static char *request(world *w, const char *method, const char *sid, const char *extra,
                     const char *body, long status) {
  exchange *ex = start(w, method, sid, extra, body);
  await(ex, NULL);
  if (ex->status != status) fail_msg("expected HTTP %ld, got %ld: %s", status, ex->status, ex->got);
  char *got = strdup(ex->got);
  finish(ex);
  return got;
}

/* Starts the server again with w->cfg; returns its port. */
static unsigned restart(world *w) {
  tg_http_stop(w->h);
  unsigned port = 0;
  assert_int_equal(tg_http_start(&w->cfg, &w->h, &port), 0);
  snprintf(w->url, sizeof w->url, "http://127.0.0.1:%u/mcp", port);
  return port;
}

/* initialize at version (with client capabilities caps, and the headers extra) and
 * notifications/initialized. */
static void open_session_with(world *w, const char *version, const char *caps, const char *extra,
                              char sid[64]) {
  char body[256], agreed[64];
  snprintf(body, sizeof body,
           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
           "\"protocolVersion\":\"%s\",\"capabilities\":%s}}",
           version, caps);
  exchange *ex = start(w, "POST", NULL, extra, body);
  await(ex, NULL);
  if (ex->status != 200) fail_msg("initialize got %ld: %s", ex->status, ex->got);
  snprintf(agreed, sizeof agreed, "\"protocolVersion\":\"%s\"", version);
  assert_non_null(strstr(ex->got, agreed));
  assert_int_equal(strlen(ex->sid), 32);
  snprintf(sid, 64, "%s", ex->sid);
  finish(ex);
  free(request(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
               202));
}

static void open_session_at(world *w, const char *version, const char *caps, char sid[64]) {
  open_session_with(w, version, caps, NULL, sid);
}

static void open_session(world *w, const char *caps, char sid[64]) {
  open_session_at(w, "2025-11-25", caps, sid);
}

/* ---- 2025-11-25 sessions ---- */

/* Opens a session (its id into sid) and its GET stream, primed; finish the exchange. */
static exchange *open_listening_session(world *w, char sid[64]) {
  open_session(w, "{}", sid);
  exchange *get = start(w, "GET", sid, NULL, NULL);
  await(get, "data: \n\n");
  return get;
}

static void test_session_hears_of_list_changes_on_its_get_stream(void **state) {
  world *w = *state;
  char sid[64];
  exchange *get = open_listening_session(w, sid);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  /* Any message of the session makes the server look. */
  free(request(w, "POST", sid, NULL, PING, 200));
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  finish(get);
}

/* A change between the session's start and its first GET stream is announced as that opens:
 * the client may have listed its tools before the change. */
static void test_a_change_before_the_first_get_stream_is_announced(void **state) {
  world *w = *state;
  char sid[64], unchanged[64];
  open_session(w, "{}", unchanged);
  open_session(w, "{}", sid);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  exchange *get = start(w, "GET", sid, NULL, NULL);
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  finish(get);
  /* A session opened after the change has nothing to hear of. */
  open_session(w, "{}", sid);
  get = start(w, "GET", sid, NULL, NULL);
  await(get, "data: \n\n");
  free(request(w, "POST", sid, NULL, PING, 200));
  /* The session that was there before hears of it on its stream; the one after, by then, of
   * nothing: a message of it makes the server look, and its answer comes after. */
  exchange *before = start(w, "GET", unchanged, NULL, NULL);
  await(before, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  finish(before);
  pthread_mutex_lock(&get->lock);
  assert_null(strstr(get->got, "list_changed"));
  pthread_mutex_unlock(&get->lock);
  finish(get);
}

/* A 2026-07-28 call of test_wait_cancel, which holds a pool thread until it is cancelled. */
static exchange *start_waiting_call(world *w) {
  return start(w, "POST", NULL, STATELESS_ROUTE("test_wait_cancel"),
               STATELESS_CALL("3", "test_wait_cancel", "{}"));
}

/* Waits until the server has at least least (0: no) calls waiting for a pool thread (queued),
 * or requests being answered. */
/* Waits until the requests being answered (or the calls queued: queued) are least to most. */
static void await_load_within(world *w, bool queued, unsigned least, unsigned most) {
  for (int i = 0;; i++) {
    unsigned answering = 0, waiting = 0;
    tg_http_load(w->h, &answering, &waiting);
    unsigned n = queued ? waiting : answering;
    if (n >= least && n <= most) return;
    if (i == HANG_GUARD_S * 100)
      fail_msg("the server never got there (%u answering, %u queued)", answering, waiting);
    usleep(10 * 1000);
  }
}

/* Waits until at least least (0: no) requests are being answered, or calls queued. */
static void await_load(world *w, bool queued, unsigned least) {
  await_load_within(w, queued, least, least ? UINT_MAX : 0);
}

/* A client that left its GET stream gets another at once, not 405 until the server's next
 * look at the old one. */
static void test_a_get_stream_left_is_replaced_at_once(void **state) {
  world *w = *state;
  char sid[64];
  for (int i = 0; i < 5; i++) {
    exchange *get = i ? start(w, "GET", sid, NULL, NULL) : open_listening_session(w, sid);
    await(get, "data: \n\n");
    finish(get);
  }
}

/* A change announced while nobody read the GET stream (its client left, and did not resume)
 * is announced again on the session's next GET stream. */
static void test_a_change_announced_to_a_stream_left_unread_is_announced_again(void **state) {
  world *w = *state;
  char sid[64];
  exchange *get = open_listening_session(w, sid);
  finish(get);
  await_load(w, false, 0); /* the server saw the stream's client leave */
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  free(request(w, "POST", sid, NULL, PING, 200)); /* announced to the stream left unread */
  get = start(w, "GET", sid, NULL, NULL);
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  finish(get);
}

/* Calls waiting on their clients hold every pool thread (one principal may hold all but one,
 * another takes that one): a grant revoked by another process is still announced, by the
 * periodic check, which has a thread of its own (the session sends nothing that would make
 * the server look). */
static void test_list_check_goes_on_while_the_pool_is_busy(void **state) {
  world *w = *state;
  char sid[64];
  exchange *get = open_listening_session(w, sid);
  exchange *calls[POOL_THREADS];
  for (int i = 0; i < POOL_THREADS; i++) {
    w->token = w->tokens[i == POOL_THREADS - 1];
    calls[i] = start_waiting_call(w);
  }
  w->token = w->tokens[0];
  kit_wait_for(NULL, POOL_THREADS);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  for (int i = 0; i < POOL_THREADS; i++) finish(calls[i]);
  finish(get);
}

/* The line for pool threads is bounded: a call past it is refused (503, -32603), and nothing
 * of it runs; but for a caller's first call on the pool. */
static void test_the_line_for_pool_threads_is_bounded(void **state) {
  world *w = *state;
  w->cfg.max_queued_calls = 1;
  restart(w);
  exchange *calls[POOL_THREADS];
  for (int i = 0; i < POOL_THREADS - 1; i++) { /* one at a time: a call not yet taken from */
    calls[i] = start_waiting_call(w);             /* the line would fill it */
    kit_wait_for(NULL, i + 1);
  }
  calls[POOL_THREADS - 1] = start_waiting_call(w);
  await_load(w, true, 1); /* in line, since a caller holds all threads but one */
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_wait_cancel"),
                      STATELESS_CALL("4", "test_wait_cancel", "{}"), 503);
  assert_non_null(strstr(got, "Too many calls wait for a thread"));
  assert_non_null(strstr(got, "\"id\":4"));
  free(got);
  pthread_mutex_lock(&kit_lock);
  assert_int_equal(kit_starts, POOL_THREADS - 1); /* the call in line waits; the refused never ran */
  pthread_mutex_unlock(&kit_lock);
  /* Another caller, with no call on the pool, joins the full line all the same: callers that
   * fill it do not lock the others out (its call then runs on the thread left free). */
  w->token = w->tokens[1];
  got = request(w, "POST", NULL, STATELESS_ROUTE("test_note_close"),
                STATELESS_CALL("5", "test_note_close", "{}"), 200);
  assert_non_null(strstr(got, "\"result\""));
  free(got);
  w->token = w->tokens[0];
  for (int i = 0; i < POOL_THREADS; i++) finish(calls[i]);
}

/* A session's call whose client left its stream (to resume it later) still counts among its
 * caller's calls on the pool, until it ends: else calls left so could pile up without bound.
 * The caller's other requests (a ping, a cancellation, the session's end) are counted apart,
 * so that it can still reach the calls it holds. */
static void test_a_call_whose_client_left_counts_until_it_ends(void **state) {
  world *w = *state;
  /* A bound of two, both taken by calls left running. */
  w->cfg.max_requests_per_principal = 2;
  restart(w);
  char sid[64];
  open_session(w, "{}", sid);
#define WAITING_CALL(id) CALL_WITH(id, "test_note_close", "{\"silent\":true,\"wait\":true}")
  static const char *const left[] = {WAITING_CALL("7"), WAITING_CALL("8")};
  for (int i = 0; i < 2; i++) {
    exchange *call = start(w, "POST", sid, NULL, left[i]);
    await(call, "retry: 500\ndata: \n\n");
    finish(call); /* the client leaves; the call runs on */
    await_load(w, false, 0); /* the server saw it leave */
  }
  char *got = request(w, "POST", sid, NULL, WAITING_CALL("9"), 429);
  assert_non_null(strstr(got, "Too many calls of this caller"));
  free(got);
  free(request(w, "POST", sid, NULL, PING, 200));
  kit_set(&kit_go);
  for (int i = 0;; i++) { /* once the call ended, its place is free */
    exchange *again = start(w, "POST", sid, NULL, WAITING_CALL("10"));
    await(again, NULL);
    long status = again->status;
    finish(again);
    if (status == 200) break;
    assert_int_equal(status, 429);
    if (i == HANG_GUARD_S * 100) fail_msg("the call never gave its place back");
    usleep(10 * 1000);
  }
#undef WAITING_CALL
}

/* A stateless call that runs on the thread that read its request (it never waits on its
 * client) is cancelled when its client goes away, JSON or SSE alike: nothing else could
 * cancel it, and it would hold its connection's slot until it ended. */
static void test_a_stateless_call_run_in_place_ends_with_its_client(void **state) {
  world *w = *state;
  static const char *const accepts[] = {"Accept: application/json, text/event-stream;q=0.1",
                                        NULL};
  for (size_t i = 0; i < sizeof accepts / sizeof accepts[0]; i++) {
    char extra[256];
    snprintf(extra, sizeof extra, "%s%s" STATELESS_ROUTE("test_wait_here"),
             accepts[i] ? accepts[i] : "", accepts[i] ? "\n" : "");
    kit_started = kit_cancelled = false;
    exchange *call = start(w, "POST", NULL, extra, STATELESS_CALL("3", "test_wait_here", "{}"));
    kit_wait(&kit_started);
    finish(call); /* the client goes away */
    kit_wait(&kit_cancelled);
  }
}

/* Calls of one principal waiting on their clients hold at most all pool threads but one:
 * another principal's call still runs, while the first one's last call waits its turn. */
static void test_a_principal_leaves_a_pool_thread_to_others(void **state) {
  world *w = *state;
  exchange *calls[POOL_THREADS];
  for (int i = 0; i < POOL_THREADS; i++) calls[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS - 1);
  w->token = w->tokens[1];
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_note_close"),
                      STATELESS_CALL("4", "test_note_close", "{}"), 200);
  assert_non_null(strstr(got, "before the close"));
  assert_non_null(strstr(got, "\"result\""));
  free(got);
  w->token = w->tokens[0];
  for (int i = 0; i < POOL_THREADS; i++) finish(calls[i]);
}

/* The calls running (on all the pool's threads but one) still hold their threads, and no other
 * began. */
static void still_running_alone(exchange *running[POOL_THREADS - 1]) {
  for (int i = 0; i < POOL_THREADS - 1; i++) {
    pthread_mutex_lock(&running[i]->lock);
    assert_false(running[i]->ended);
    pthread_mutex_unlock(&running[i]->lock);
  }
  pthread_mutex_lock(&kit_lock);
  assert_int_equal(kit_starts, POOL_THREADS - 1);
  pthread_mutex_unlock(&kit_lock);
}

/* A session's call waiting for a pool thread has its stream primed at once; cancelled (or
 * its session deleted: by_delete), it is ended at once, without an answer, not once a thread
 * comes free; it never runs. The calls holding the threads run in another session. */
/* Starts calls in a session of their own (running), on all the pool's threads a caller may
 * hold, and waits until they run. */
static void hold_the_pool(world *w, exchange *running[POOL_THREADS - 1]) {
  char held[64];
  open_session(w, "{}", held);
  static const char *const calls[] = {CALL_WITH("10", "test_wait_cancel", "{}"),
                                      CALL_WITH("11", "test_wait_cancel", "{}"),
                                      CALL_WITH("12", "test_wait_cancel", "{}")};
  _Static_assert(sizeof calls / sizeof calls[0] == POOL_THREADS - 1, "a call a thread it may hold");
  for (int i = 0; i < POOL_THREADS - 1; i++) running[i] = start(w, "POST", held, NULL, calls[i]);
  kit_wait_for(NULL, POOL_THREADS - 1);
}

static void call_in_line_ends_at_once(world *w, bool by_delete) {
  char sid[64];
  open_session(w, "{}", sid);
  exchange *running[POOL_THREADS - 1];
  hold_the_pool(w, running);
  exchange *queued = start(w, "POST", sid, NULL, CALL_WITH("\"in-line\"", "test_wait_cancel", "{}"));
  await_load(w, true, 1);
  await(queued, "retry: 500\ndata: \n\n"); /* primed while in line: it could resume */
  if (by_delete) free(request(w, "DELETE", sid, NULL, NULL, 200));
  else free(request(w, "POST", sid, NULL, CANCEL("\"in-line\""), 202));
  await(queued, NULL);
  assert_int_equal(queued->status, 200);
  assert_null(strstr(queued->got, "\"id\":\"in-line\""));
  still_running_alone(running);
  finish(queued);
  for (int i = 0; i < POOL_THREADS - 1; i++) finish(running[i]);
}

static void test_a_session_call_cancelled_in_line_is_answered_at_once(void **state) {
  call_in_line_ends_at_once(*state, false);
}

static void test_a_session_call_in_line_ends_at_once_with_its_session(void **state) {
  call_in_line_ends_at_once(*state, true);
}

/* A call of a session of a revision before 2025-11-25, waiting for a pool thread, lets its
 * connection go as its client leaves, at once, not once a thread comes free: its stream is not
 * primed (such clients resume none), so nothing would notice the client gone, and the
 * connection would hold its place and its caller's count of requests till then. The call
 * stays in line: a client that leaves cancels no session call. */
static void test_an_old_session_call_in_line_lets_its_connection_go(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-06-18", "{}", sid);
  exchange *running[POOL_THREADS - 1];
  hold_the_pool(w, running);
  exchange *queued =
      start(w, "POST", sid, NULL, CALL_WITH("\"in-line\"", "test_wait_cancel", "{}"));
  await_load(w, true, 1);
  await_load(w, false, POOL_THREADS);
  finish(queued);
  await_load_within(w, false, POOL_THREADS - 1, POOL_THREADS - 1);
  await_load(w, true, 1); /* still in line */
  still_running_alone(running);
  for (int i = 0; i < POOL_THREADS - 1; i++) finish(running[i]);
}

/* A stateless call waiting for a pool thread leaves the line as its client leaves, at once,
 * not once a thread comes free (till then it would hold its caller's counts and its
 * connection); it never runs. */
static void test_a_stateless_call_in_line_leaves_it_with_its_client(void **state) {
  world *w = *state;
  exchange *running[POOL_THREADS - 1];
  for (int i = 0; i < POOL_THREADS - 1; i++) running[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS - 1);
  exchange *queued = start_waiting_call(w); /* its caller holds all the threads it may */
  await_load(w, true, 1);
  finish(queued);
  await_load(w, true, 0);
  still_running_alone(running);
  for (int i = 0; i < POOL_THREADS - 1; i++) finish(running[i]);
}

/* A call quiet as long as a stream may be, here waiting in line for a thread, is answered by
 * its event stream all the same, whose comment lines keep its client from timing out; its
 * result comes on it once it runs. */
static void test_a_quiet_call_hears_keep_alives(void **state) {
  world *w = *state;
  w->cfg.keepalive_ms = 200;
  restart(w);
  exchange *running[POOL_THREADS - 1];
  for (int i = 0; i < POOL_THREADS - 1; i++) running[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS - 1);
  exchange *queued = start(w, "POST", NULL, STATELESS_ROUTE("test_note_close"),
                           STATELESS_CALL("5", "test_note_close", "{}"));
  await_load(w, true, 1); /* its caller holds all the threads it may */
  await(queued, ": keep-alive\n\n");
  assert_int_equal(queued->status, 200);
  await_load(w, true, 1); /* still in line */
  finish(running[0]);     /* cancelled: its thread comes free */
  await(queued, "\"result\"");
  assert_non_null(strstr(queued->got, "data: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\""));
  await(queued, NULL);
  finish(queued);
  for (int i = 1; i < POOL_THREADS - 1; i++) finish(running[i]);
  w->cfg.keepalive_ms = 0;
  restart(w);
}

/* A call the dispatch refuses (here, for an Mcp-Name that is not its tool's) is answered at
 * once with its status, not after waiting its turn for a thread: it never joins the line. */
static void test_a_refused_call_does_not_wait_in_line(void **state) {
  world *w = *state;
  exchange *running[POOL_THREADS - 1];
  for (int i = 0; i < POOL_THREADS - 1; i++) running[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS - 1);
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_note_close"),
                      STATELESS_CALL("6", "test_wait_cancel", "{}"), 400);
  assert_non_null(strstr(got, "-32020"));
  free(got);
  await_load(w, true, 0);
  still_running_alone(running);
  for (int i = 0; i < POOL_THREADS - 1; i++) finish(running[i]);
}

/* A free pool thread takes the queued call of the caller running the fewest: with one caller
 * on all threads but one and another on the last, the second's next call goes ahead of the
 * first's, queued before it. */
static void test_the_pool_serves_the_caller_running_fewest_first(void **state) {
  world *w = *state;
  exchange *first[POOL_THREADS], *second[2];
  for (int i = 0; i < POOL_THREADS; i++) first[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS - 1);
  await_load(w, true, 1); /* its last waits in line */
  w->token = w->tokens[1];
  for (int i = 0; i < 2; i++) second[i] = start_waiting_call(w);
  kit_wait_for(NULL, POOL_THREADS);
  await_load(w, true, 2);
  pthread_mutex_lock(&kit_lock);
  int starts = kit_starts;
  pthread_mutex_unlock(&kit_lock);
  finish(first[0]); /* cancelled: its thread comes free */
  for (int i = 0;; i++) {
    pthread_mutex_lock(&kit_lock);
    bool started = kit_starts > starts;
    char last[sizeof kit_last];
    memcpy(last, kit_last, sizeof last);
    pthread_mutex_unlock(&kit_lock);
    if (started) {
      assert_string_equal(last, "bot2");
      break;
    }
    if (i == HANG_GUARD_S * 100) fail_msg("no queued call ever ran");
    usleep(10 * 1000);
  }
  w->token = w->tokens[0];
  for (int i = 1; i < POOL_THREADS; i++) finish(first[i]);
  for (int i = 0; i < 2; i++) finish(second[i]);
}

/* A principal holds a bounded share of the session table: its oldest idle session makes room
 * for its next one, and no other principal's. An initialize that fails opens nothing. */
static void test_sessions_are_bounded_per_principal(void **state) {
  world *w = *state;
  char first[64], oldest[64], sid[64];
  open_session(w, "{}", first);
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) {
    open_session(w, "{}", sid);
    if (i == 0) memcpy(oldest, sid, sizeof oldest);
  }
  free(request(w, "POST", sid, NULL, PING, 200));
  free(request(w, "POST", first, NULL, PING, 404));
  exchange *ex = start(w, "POST", NULL, NULL,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}");
  await(ex, NULL);
  assert_int_equal(ex->status, 200);
  assert_non_null(strstr(ex->got, "\"code\":-32602"));
  assert_string_equal(ex->sid, "");
  finish(ex);
  /* It made no room either: the oldest idle session, next to go, is still there. */
  free(request(w, "POST", oldest, NULL, PING, 200));
}

/* Each session is found by its id among many, and one ended is no longer found while the older
 * sessions of its bucket (behind it in the index) still are. Ids are random, so the test opens
 * a caller's share of sessions until two share a bucket (about 8 pairs do, on average), then
 * ends each session that shares its bucket with an older one. */
static void test_every_session_is_found_by_its_id(void **state) {
  world *w = *state;
  char sids[TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL][64];
  bool ended[TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL] = {0}, any_ended = false;
  for (int round = 0; !any_ended; round++) {
    assert_true(round < 10); /* a round shares no bucket about one time in 5,500 */
    unsigned bucket[TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL];
    for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) {
      open_session(w, "{}", sids[i]); /* the previous round's sessions make room */
      bucket[i] = (unsigned)(tg_hash_text(sids[i]) & (TG_HTTP_SESSION_BUCKETS - 1));
      ended[i] = false;
      for (int older = 0; older < i; older++) ended[i] |= bucket[older] == bucket[i];
      any_ended |= ended[i];
    }
  }
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++)
    if (ended[i]) free(request(w, "DELETE", sids[i], NULL, NULL, 200));
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++)
    free(request(w, "POST", sids[i], NULL, PING, ended[i] ? 404 : 200));
}

/* The sweep looking for revoked tokens, held once it holds the sessions, until the test lets
 * it go. */
static void hold_the_look(void) {
  kit_set(&kit_started);
  kit_reached(&kit_go, 0);
}

/* While the sweep looks for revoked tokens it holds every session, without using one: an
 * initialize past the caller's share still ends the least recently used. */
static void test_sessions_make_room_while_the_sweep_looks(void **state) {
  world *w = *state;
  char first[64], sid[64];
  open_session(w, "{}", first);
  for (int i = 1; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) open_session(w, "{}", sid);
  tg_http_test_looking = hold_the_look;
  kit_wait(&kit_started);
  tg_http_test_looking = NULL; /* the next sweep looks unheld */
  open_session(w, "{}", sid);
  kit_set(&kit_go);
  free(request(w, "POST", first, NULL, PING, 404));
  free(request(w, "POST", sid, NULL, PING, 200));
}

/* With every session of a caller in use (its GET stream read), a new one finds no room:
 * 429, naming the initialize it refuses. */
static void test_no_room_for_a_session_is_told_its_initialize(void **state) {
  world *w = *state;
  w->cfg.max_requests_per_principal = 2 * TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; /* streams count */
  restart(w);
  exchange *gets[TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL];
  char sid[64];
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++)
    gets[i] = open_listening_session(w, sid);
  char *got = request(w, "POST", NULL, NULL,
                      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{"
                      "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}",
                      429);
  assert_non_null(strstr(got, "Too many sessions in use"));
  assert_non_null(strstr(got, "\"id\":7"));
  free(got);
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) finish(gets[i]);
}

/* A session whose GET stream a client reads is in use, though it sends nothing: the
 * principal's next session past its share makes room with another, and its stream goes on. */
static void test_a_listening_session_is_kept(void **state) {
  world *w = *state;
  char listening[64], sid[64];
  open_session(w, "{}", listening);
  exchange *get = start(w, "GET", listening, NULL, NULL);
  await(get, "data: \n\n");
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) open_session(w, "{}", sid);
  free(request(w, "POST", listening, NULL, PING, 200));
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  free(request(w, "POST", listening, NULL, PING, 200));
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  finish(get);
}

/* A token the database cannot check is no bad token: 503, which a client retries, not 401,
 * on which it may drop the token. */
static void test_a_token_unchecked_is_not_called_bad(void **state) {
  world *w = *state;
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE api_tokens RENAME TO api_tokens_away", NULL,
                              NULL),
                   0);
  char *got = request(w, "POST", NULL, NULL, PING, 503);
  assert_non_null(strstr(got, "The token could not be checked"));
  free(got);
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE api_tokens_away RENAME TO api_tokens", NULL,
                              NULL),
                   0);
  char sid[64];
  open_session(w, "{}", sid);
}

/* A JSON-RPC response posted without a session (2026-07-28 has none) answers nobody. The
 * refusal names no request: id 5 is the client's own request the response answers. */
static void test_a_response_without_a_session_is_refused(void **state) {
  world *w = *state;
  char *got = request(w, "POST", NULL, "MCP-Protocol-Version: 2026-07-28",
                      "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}", 400);
  assert_non_null(strstr(got, "\"error\""));
  assert_null(strstr(got, "\"id\"")); /* MCP's error naming no request has no id */
  free(got);
  char sid[64];
  open_session(w, "{}", sid); /* the server is still there */
}

/* initialize on a live session is refused (a second session would leave the first to its
 * idle timeout), and on a dead one too, with its 404. In a batch or as a notification it opens
 * none. */
static void test_initialize_on_a_live_session_is_refused(void **state) {
  world *w = *state;
  static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                             "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}";
  char sid[64];
  open_session(w, "{}", sid);
  char *got = request(w, "POST", sid, NULL, init, 400);
  assert_non_null(strstr(got, "initialized already"));
  free(got);
  free(request(w, "POST", sid, NULL, PING, 200)); /* the session stands */
  /* One naming a dead session gets 404, as any request naming it does (the client then
   * initializes without it), and opens none. */
  got = request(w, "POST", "0123456789abcdef0123456789abcdef", NULL, init, 404);
  assert_non_null(strstr(got, "Session not found"));
  free(got);
  /* Nor does one in a batch, or sent as a notification, open one: the refusal says why. */
  static const char *const not_alone[] = {
      "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
      "\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}}}]",
      "{\"jsonrpc\":\"2.0\",\"method\":\"initialize\",\"params\":{"
      "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}"};
  for (size_t i = 0; i < 2; i++) {
    got = request(w, "POST", NULL, NULL, not_alone[i], 400);
    assert_non_null(strstr(got, "only as a request of its own"));
    free(got);
  }
  /* An empty Mcp-Session-Id ("Name;" to curl) names no session: an initialize sent with one
   * opens a session, any other request is told to initialize. */
  free(request(w, "POST", NULL, "Mcp-Session-Id;", init, 200));
  got = request(w, "POST", NULL, "Mcp-Session-Id;", PING, 400);
  assert_non_null(strstr(got, "send initialize first"));
  free(got);
  free(request(w, "GET", NULL, "Mcp-Session-Id;", NULL, 405)); /* no session, no stream */
  got = request(w, "DELETE", NULL, "Mcp-Session-Id;", NULL, 400);
  assert_non_null(strstr(got, "Mcp-Session-Id is required"));
  free(got);
}

/* Starts "call-1" of test_sampling on session sid and waits for the question it asks. */
static exchange *asking_call(world *w, const char *sid) {
  exchange *call =
      start(w, "POST", sid, NULL, CALL_WITH("\"call-1\"", "test_sampling", "{\"prompt\":\"hi\"}"));
  await(call, "\"method\":\"sampling/createMessage\"");
  return call;
}

/* Nothing is asked of a client before its notifications/initialized: the call fails with
 * the tool's refusal, and its stream carries no question. Once it came, the call asks. */
static void test_no_question_before_the_client_said_initialized(void **state) {
  world *w = *state;
  exchange *ex = start(w, "POST", NULL, NULL,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"sampling\":{}}}}");
  await(ex, NULL);
  assert_int_equal(ex->status, 200);
  char sid[64];
  snprintf(sid, sizeof sid, "%s", ex->sid);
  finish(ex);
  char *got = request(w, "POST", sid, NULL,
                      CALL_WITH("\"call-1\"", "test_sampling", "{\"prompt\":\"hi\"}"), 200);
  assert_non_null(strstr(got, "precondition_failed"));
  assert_null(strstr(got, "\"method\":\"sampling/createMessage\""));
  free(got);
  free(request(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
               202));
  exchange *call = asking_call(w, sid);
  free(request(w, "POST", sid, NULL, CANCEL("\"call-1\""), 202));
  await(call, NULL);
  finish(call);
}

static void test_cancellation_ends_a_wait_for_sampling_without_an_answer(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  exchange *call = asking_call(w, sid);
  free(request(w, "POST", sid, NULL, CANCEL("\"call-1\""), 202));
  /* The call stops waiting, withdraws its question, and its stream ends with no answer. */
  await(call, NULL);
  assert_null(strstr(call->got, "\"id\":\"call-1\""));
  assert_non_null(strstr(call->got, "The call no longer waits for it"));
  finish(call);
  free(request(w, "POST", sid, NULL, PING, 200));
}

/* Opens a session (its id in sid) and starts its call 7 of test_wait_cancel, which waits
 * until it is cancelled; returns once it runs. */
static exchange *session_call_waiting(world *w, char sid[64]) {
  open_session(w, "{}", sid);
  exchange *call = start(w, "POST", sid, NULL, CALL(7, "test_wait_cancel"));
  kit_wait(&kit_started);
  return call;
}

/* Lets a call of test_wait_cancel held once cancelled (kit_hold) end, and waits for it. */
static void let_held_call_end(exchange *call) {
  pthread_mutex_lock(&kit_lock);
  kit_hold = false;
  pthread_mutex_unlock(&kit_lock);
  await(call, NULL);
  finish(call);
}

/* A request whose id names one of its session still served, or cancelled and still ending,
 * is refused, not taken for that one and left unanswered; once that one ended, the id is
 * free. */
static void test_a_session_request_reusing_an_id_being_cancelled(void **state) {
  world *w = *state;
  char sid[64];
  kit_hold = true;
  exchange *call = session_call_waiting(w, sid);
  char *running = request(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", 400);
  assert_non_null(strstr(running, "still being served or cancelled"));
  free(running);
  free(request(w, "POST", sid, NULL, CANCEL("7"), 202));
  kit_wait(&kit_cancelled);
  char *got = request(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", 400);
  assert_non_null(strstr(got, "still being served or cancelled"));
  assert_non_null(strstr(got, "\"id\":7"));
  free(got);
  let_held_call_end(call);
  for (int i = 0;; i++) { /* the call's entry goes as its worker ends, after its stream */
    exchange *ping = start(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}");
    await(ping, NULL);
    bool served = ping->status == 200 && strstr(ping->got, "\"result\"");
    finish(ping);
    if (served) break;
    if (i == HANG_GUARD_S * 100) fail_msg("the id never came free");
    usleep(10 * 1000);
  }
}

/* Ending a session (DELETE) cancels its requests: a call running is told, and its POST ends
 * with no answer. */
static void test_ending_a_session_cancels_its_calls(void **state) {
  world *w = *state;
  char sid[64];
  exchange *call = session_call_waiting(w, sid);
  free(request(w, "DELETE", sid, NULL, NULL, 200));
  kit_wait(&kit_cancelled);
  await(call, NULL);
  assert_null(strstr(call->got, "\"id\":7"));
  finish(call);
}

/* The server of a test that ends a session as a POST finds it (end_found_session: by a
 * DELETE, whose status it notes, or by revoking the token that opened it). */
static world *ending_world;
static bool ending_by_revocation;
static _Atomic long ending_status; /* written on the server's thread, asserted on the test's */

static atomic_int sweeps_seen;
static void count_sweep(void) { atomic_fetch_add(&sweeps_seen, 1); }

static int try_revoke_token(world *w, const char *token);
static void revoke_token(world *w, const char *token);
static void revoke_tokens_of(world *w, const char *principal);

/* On the server's thread: it notes what went wrong in ending_status (not 200), for the test's
 * thread to fail the test. */
static void end_found_session(const char *sid) {
  tg_http_test_session_found = NULL;
  if (!ending_by_revocation) {
    exchange *end = start(ending_world, "DELETE", sid, NULL, NULL);
    atomic_store(&ending_status, wait_for(end, NULL) ? end->status : -1);
    finish(end);
    return;
  }
  if (try_revoke_token(ending_world, ending_world->token) < 0) {
    atomic_store(&ending_status, -2);
    return;
  }
  /* The first sweep to look from now on sees the token revoked and ends the session; once a
   * second looks, the first is done. */
  atomic_store(&sweeps_seen, 0);
  tg_http_test_looking = count_sweep;
  for (int i = 0; atomic_load(&sweeps_seen) < 2 && i < HANG_GUARD_S * 100; i++) usleep(10 * 1000);
  tg_http_test_looking = NULL;
  atomic_store(&ending_status, atomic_load(&sweeps_seen) >= 2 ? 200 : -1);
}

/* A message whose session was ended (DELETE, or its token revoked) after the POST found it
 * and before its request was registered, so that the end's cancellation missed it, is not
 * served: it is answered as one naming the ended session is (401 for the revoked token, as
 * a request bearing it now is), and its tool never runs, on the connection's thread and on
 * the pool alike. Nothing is written. */
static void test_a_call_its_session_ended_first_does_not_run(void **state) {
  world *w = *state;
  ending_world = w;
  long acts = fixture_count(w->f, "activity_log"), logs = fixture_count(w->f, "agent_run_logs");
  static const char *const calls[] = {CALL(7, "test_act_once"), CALL(8, "test_act_pooled")};
  for (size_t i = 0; i < 4; i++) {
    char sid[64];
    ending_by_revocation = i >= 2; /* one token of the two "bot" has, then the other */
    w->token = w->tokens[i == 3 ? 3 : 0];
    open_session(w, "{}", sid);
    atomic_store(&ending_status, 0);
    tg_http_test_session_found = end_found_session;
    char *got = request(w, "POST", sid, NULL, calls[i % 2], ending_by_revocation ? 401 : 404);
    assert_int_equal(atomic_load(&ending_status), 200);
    assert_non_null(
        strstr(got, ending_by_revocation ? "A valid Bearer token" : "Session not found"));
    free(got);
  }
  assert_int_equal(kit_acts, 0);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);
}

/* The server of a test that begins to stop as a POST finds its session (stop_found_session),
 * and the GET stream of that session, which ends as the stop lets the session go. */
static pthread_t found_stopper;
static exchange *found_get;

static void *stop_server(void *h);

static void stop_found_session(const char *sid) {
  (void)sid;
  tg_http_test_session_found = NULL;
  tg_http *h = ending_world->h;
  ending_world->h = NULL; /* the stopper's now */
  if (pthread_create(&found_stopper, NULL, stop_server, h) == 0) wait_for(found_get, NULL);
}

/* A stopping server lets its sessions' requests run, as their clients did not go away: one
 * that found its session as the stop let the session go too. A call bound for the pool runs
 * and commits; a notification is taken (202). */
static void test_a_request_found_as_the_server_stops_is_served(void **state) {
  world *w = *state;
  ending_world = w;
  long acts = fixture_count(w->f, "activity_log");
  static const char *const messages[] = {CALL(7, "test_act_pooled"), CANCEL("9")};
  for (size_t i = 0; i < 2; i++) {
    char sid[64];
    found_get = open_listening_session(w, sid);
    tg_http_test_session_found = stop_found_session;
    char *got = request(w, "POST", sid, NULL, messages[i], i == 0 ? 200 : 202);
    if (i == 0) assert_non_null(strstr(got, "\"result\""));
    free(got);
    pthread_join(found_stopper, NULL);
    await(found_get, NULL);
    finish(found_get);
    restart(w);
  }
  assert_int_equal(kit_acts, 1);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
}

/* A POST holding a request is answered with JSON or an event stream, even when the request
 * was cancelled: an event stream with no event (the priming alone, on 2025-11-25), and 202
 * only for notifications alone. */
static void test_a_cancelled_request_gets_an_empty_event_stream(void **state) {
  world *w = *state;
  char sid[64];
  exchange *call = session_call_waiting(w, sid);
  free(request(w, "POST", sid, NULL, CANCEL("7"), 202));
  await(call, NULL);
  kit_wait(&kit_cancelled);
  assert_int_equal(call->status, 200);
  assert_string_equal(call->type, "text/event-stream");
  int used = 0;
  assert_int_equal(sscanf(call->got, "id: %*u-0\nretry: 500\ndata: \n\n%n", &used), 0);
  assert_int_equal((size_t)used, strlen(call->got));
  finish(call);
  /* A batch whose one request is cancelled ahead of it; the cancellation alone. */
  open_session_at(w, "2025-03-26", "{}", sid);
  exchange *batch = start(w, "POST", sid, NULL,
                          "[" CANCEL("6") ",{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}]");
  await(batch, NULL);
  assert_int_equal(batch->status, 200);
  assert_string_equal(batch->type, "text/event-stream");
  assert_string_equal(batch->got, "");
  finish(batch);
  free(request(w, "POST", sid, NULL, "[" CANCEL("6") "]", 202));
}

/* The id of the server's request to the client (method) in an SSE body. */
static json_int_t asked_id(const char *got, const char *method) {
  char needle[128];
  snprintf(needle, sizeof needle, "\"method\":\"%s\"", method);
  const char *at = strstr(got, needle);
  assert_non_null(at);
  while (at > got && at[-1] != '\n') at--;
  assert_int_equal(strncmp(at, "data: ", 6), 0);
  json_t *ask = json_loadb(at + 6, strcspn(at + 6, "\n"), 0, NULL);
  assert_non_null(ask);
  json_int_t id = json_integer_value(json_object_get(ask, "id"));
  json_decref(ask);
  return id;
}

/* A chunked body: head, then padding up to total bytes. */
typedef struct chunked_body {
  const char *head;
  size_t sent, total;
} chunked_body;

static size_t read_chunked(char *buf, size_t size, size_t n, void *arg) {
  chunked_body *b = arg;
  size_t head = strlen(b->head), give = size * n;
  if (b->sent < head) {
    give = give < head - b->sent ? give : head - b->sent;
    memcpy(buf, b->head + b->sent, give);
  } else {
    give = give < b->total - b->sent ? give : b->total - b->sent;
    memset(buf, 'x', give);
  }
  b->sent += give;
  return give;
}

/* POSTs on session sid, in chunks, head and then padding up to total bytes; how curl ended. */
static CURLcode post_chunked(world *w, const char *sid, const char *head, size_t total) {
  CURL *curl = curl_easy_init();
  char auth[256], session_line[128];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", w->token);
  snprintf(session_line, sizeof session_line, "Mcp-Session-Id: %s", sid);
  struct curl_slist *headers = curl_slist_append(NULL, "Transfer-Encoding: chunked");
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json, text/event-stream");
  headers = curl_slist_append(headers, auth);
  headers = curl_slist_append(headers, session_line);
  chunked_body body = {.head = head, .total = total};
  curl_easy_setopt(curl, CURLOPT_URL, w->url);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_chunked);
  curl_easy_setopt(curl, CURLOPT_READDATA, &body);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  CURLcode r = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return r;
}

/* Opens a session and a call that asks it for sampling; posts, as the answer, what format
 * makes of the question's id (its one %lld, if any), which the POST's status must be; and
 * waits for the call's answer. The call's exchange, to finish. */
static exchange *asking_call_answered(world *w, const char *format, long status) {
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  exchange *call = asking_call(w, sid);
  char *answer = NULL;
  assert_true(asprintf(&answer, format, (long long)asked_id(call->got, "sampling/createMessage")) > 0);
  free(request(w, "POST", sid, NULL, answer, status));
  free(answer);
  await(call, "\"id\":\"call-1\"");
  assert_non_null(strstr(call->got, "\"isError\":true"));
  return call;
}

/* A client answering the server's request with a result that is no object fails the call
 * as the client's error, which the call's result shows. */
static void test_a_client_result_not_an_object_is_its_error(void **state) {
  exchange *call =
      asking_call_answered(*state, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":\"x\"}", 202);
  assert_non_null(strstr(call->got, "provider_error"));
  assert_non_null(strstr(call->got, "The client's result does not answer the request"));
  assert_non_null(strstr(call->got, "\"result\":\"x\"")); /* what the client sent */
  finish(call);
}

/* An error naming no request (its client could not read the question) answers the question
 * waiting when only one waits: the call fails with it, rather than waiting for its time. */
static void test_an_error_naming_no_request_answers_the_one_question(void **state) {
  exchange *call = asking_call_answered(
      *state, "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}", 202);
  assert_non_null(strstr(call->got, "-32700"));
  finish(call);
}

/* A posted answer to a question of the session that cannot be decoded (a key given twice)
 * but names the question is refused (400) and fails the call at once, as an error would,
 * rather than leaving it to wait out its time; so does one too large to be read. */
static void test_an_unreadable_answer_fails_its_question(void **state) {
  exchange *call = asking_call_answered(
      *state, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{},\"result\":{}}", 400);
  assert_non_null(strstr(call->got, "The client's answer could not be read"));
  finish(call);
  /* So does one past the size bound (413), read only to find its id. */
  size_t pad = TG_RPC_MAX_BODY;
  char *format = malloc(pad + 64);
  int n = sprintf(format, "{\"jsonrpc\":\"2.0\",\"id\":%%lld,\"result\":{\"pad\":\"");
  memset(format + n, 'x', pad);
  strcpy(format + n + pad, "\"}}");
  call = asking_call_answered(*state, format, 413);
  free(format);
  assert_non_null(strstr(call->got, "The client's answer could not be read"));
  finish(call);
  /* And one sent in chunks that goes on past twice the bound, whose connection is closed
   * before it ends: the question it names fails then, not a minute later. */
  world *w = *state;
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  call = asking_call(w, sid);
  char head[96];
  snprintf(head, sizeof head, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"pad\":\"",
           (long long)asked_id(call->got, "sampling/createMessage"));
  assert_int_not_equal(post_chunked(w, sid, head, 3ull * TG_RPC_MAX_BODY), CURLE_OK);
  await(call, "\"id\":\"call-1\"");
  assert_non_null(strstr(call->got, "The client's answer could not be read"));
  finish(call);
}

/* An answer that cannot be read, sent as 2026-07-28 traffic, answers no question of the
 * session it names, as a readable one would not: that traffic has no session. Nor does one
 * refused for a header it repeats, as a readable one is. */
static void test_an_unreadable_answer_of_2026_answers_no_question(void **state) {
  world *w = *state;
  static const char *const headers[] = {"MCP-Protocol-Version: 2026-07-28",
                                        "Toolgate-Run: a\nToolgate-Run: b"};
  for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
    char sid[64];
    open_session(w, "{\"sampling\":{}}", sid);
    exchange *call = asking_call(w, sid);
    long long id = (long long)asked_id(call->got, "sampling/createMessage");
    char *answer = NULL;
    assert_true(asprintf(&answer, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{", id) > 0);
    free(request(w, "POST", sid, headers[i], answer, 400));
    free(answer);
    assert_true(asprintf(&answer,
                         "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"role\":\"assistant\","
                         "\"content\":{\"type\":\"text\",\"text\":\"hello\"},\"model\":\"m\"}}",
                         id) > 0);
    free(request(w, "POST", sid, NULL, answer, 202)); /* the question still waited */
    free(answer);
    await(call, "\"id\":\"call-1\"");
    if (strstr(call->got, "could not be read") || strstr(call->got, "\"isError\":true"))
      fail_msg("with %s, the unreadable answer failed the question: %s", headers[i], call->got);
    finish(call);
  }
}

/* On a session, what an InputRequiredResult asks goes to the client on the request's stream,
 * as a request of the server's; the answer brings the next round: for a tool, and for a
 * prompt (as the conformance fixtures' asks). */
static void test_a_session_is_asked_what_an_input_required_result_asks(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{\"elicitation\":{}}", sid);
  static const char *const requests[] = {
      CALL(3, "test_input_required_result_elicitation"),
      "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"prompts/get\",\"params\":{\"name\":"
      "\"test_input_required_result_prompt\"}}",
  };
  static const char *const fields[] = {"name", "context"};
  static const char *const said[] = {"Hello, ada!", "Use this context: ada"};
  for (size_t i = 0; i < 2; i++) {
    exchange *call = start(w, "POST", sid, NULL, requests[i]);
    await(call, "\"method\":\"elicitation/create\"");
    char answer[192];
    snprintf(answer, sizeof answer,
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"action\":\"accept\",\"content\":{"
             "\"%s\":\"ada\"}}}",
             (long long)asked_id(call->got, "elicitation/create"), fields[i]);
    free(request(w, "POST", sid, NULL, answer, 202));
    await(call, "\"id\":3,");
    assert_non_null(strstr(call->got, said[i]));
    finish(call);
  }
}

#define SET_LEVEL(id, level)                                                                \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"logging/setLevel\",\"params\":{\"level\":\"" \
  level "\"}}"

/* Requests of one session run at once, each on a copy of its state: the logging/setLevel
 * sent last stands, though a request that set another level before it ends after it. */
static void test_the_level_set_last_stands(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-03-26", "{}", sid);
  free(request(w, "POST", sid, NULL, SET_LEVEL(2, "info"), 200));
  exchange *batch =
      start(w, "POST", sid, NULL, "[" SET_LEVEL(3, "error") "," CALL(4, "test_wait_go") "]");
  kit_wait(&kit_started); /* the batch set error and waits */
  free(request(w, "POST", sid, NULL, SET_LEVEL(5, "debug"), 200));
  kit_set(&kit_go);
  await(batch, "\"went\"");
  assert_int_equal(batch->status, 200);
  finish(batch);
  /* At debug the tool's info lines go out; at error they would not. */
  char *got = request(w, "POST", sid, NULL, CALL(6, "test_tool_with_logging"), 200);
  assert_non_null(strstr(got, "Tool execution started"));
  free(got);
}

/* The workspace's owner ends run with status (admin.run.end). */
static void run_ended(world *w, const char *run, const char *status) {
  char args[128];
  snprintf(args, sizeof args, "{\"runId\":\"%s\",\"status\":\"%s\"}", run, status);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.run.end", args, NULL,
                                &res),
                   0);
  tg_call_result_done(&res);
}

static long calls_in_run(world *w, const char *run) {
  return fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM agent_run_logs WHERE run_id = $1",
                             json_pack("[s]", run));
}

/* The run of the session agent slug opened last (its newest of trigger mcp), which is
 * running and held by this process. */
static void session_run(world *w, const char *slug, char run[TG_UUID_LEN + 1]) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT r.id, r.status, r.holder FROM agent_runs r JOIN agents a"
                                   " ON a.id = r.agent_id WHERE a.slug = $1 AND r.trigger = 'mcp'"
                                   " ORDER BY r.id DESC LIMIT 1",
                                   json_pack("[s]", slug), &row),
                   0);
  assert_string_equal(json_string_value(json_object_get(row, "status")), "running");
  char holder[TG_PROCESS_TAG_LEN];
  assert_int_equal(tg_process_tag(holder), 0);
  assert_string_equal(json_string_value(json_object_get(row, "holder")), holder);
  snprintf(run, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(row, "id")));
  json_decref(row);
}

static const char *run_status(world *w, const char *run, json_t **row) {
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT status, ended_at FROM agent_runs WHERE id = $1",
                                   json_pack("[s]", run), row),
                   0);
  return json_string_value(json_object_get(*row, "status"));
}

/* Waits until run ended (a sweep may end it, within seconds), and checks how: its status,
 * and an end time (*ended_at, when given: its text, malloc'd). */
static void assert_run_ended(world *w, const char *run, const char *status, char **ended_at) {
  json_t *row = NULL;
  for (int i = 0; i < HANG_GUARD_S * 10 && strcmp(run_status(w, run, &row), "running") == 0;
       i++) {
    json_decref(row);
    usleep(100 * 1000);
  }
  assert_string_equal(json_string_value(json_object_get(row, "status")), status);
  assert_true(json_is_string(json_object_get(row, "ended_at")));
  if (ended_at) *ended_at = strdup(json_string_value(json_object_get(row, "ended_at")));
  json_decref(row);
}

/* An agent's 2025-11-25 session is one run (trigger mcp) held by this process, opened at its
 * first call: its calls are the run's, while a 2026-07-28 call is still one of its own. The
 * run ends with the session, completed when its client ends it. A session that calls no
 * tool opens no run, however often its client opens one. */
static void test_a_session_is_one_run(void **state) {
  world *w = *state;
  long runs = fixture_count(w->f, "agent_runs");
  char sid[64], run[TG_UUID_LEN + 1];
  for (int i = 0; i < 3; i++) {
    open_session(w, "{}", sid);
    free(request(w, "POST", sid, NULL, PING, 200));
    free(request(w, "POST", sid, NULL,
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", 200));
    free(request(w, "DELETE", sid, NULL, NULL, 200));
  }
  open_session(w, "{}", sid);
  free(request(w, "POST", sid, NULL, PING, 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  free(request(w, "POST", sid, NULL, CALL(2, "test_simple_text"), 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  session_run(w, "bot", run);
  free(request(w, "POST", sid, NULL, CALL(3, "test_simple_text"), 200));
  assert_int_equal(calls_in_run(w, run), 2);
  free(request(w, "POST", NULL, STATELESS_ROUTE("test_simple_text"),
               STATELESS_CALL("4", "test_simple_text", "{}"), 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 2);
  assert_int_equal(calls_in_run(w, run), 2);
  free(request(w, "DELETE", sid, NULL, NULL, 200));
  assert_run_ended(w, run, "completed", NULL);
  /* A batch (2025-03-26) holding a call opens it too. */
  open_session_at(w, "2025-03-26", "{}", sid);
  free(request(w, "POST", sid, NULL, "[" PING "]", 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 2);
  free(request(w, "POST", sid, NULL, "[" PING "," CALL(4, "test_simple_text") "]", 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 3);
  session_run(w, "bot", run);
  assert_int_equal(calls_in_run(w, run), 1);
  /* A call refused once counted (a task-only tool, which 2025-11-25 does not run) opens it,
   * and its audit row is the run's. */
  open_session(w, "{}", sid);
  char *got = request(w, "POST", sid, NULL, CALL(5, "failing_job"), 200);
  assert_non_null(strstr(got, "This tool runs only as a task"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 4);
  session_run(w, "bot", run);
  assert_int_equal(calls_in_run(w, run), 1);
}

/* A session opens its run at its first call its caller's rate lets through, not before: a
 * call refused before it counts (a notification, no tool named) or for its rate opens none. */
static void test_a_session_opens_its_run_at_its_first_counted_call(void **state) {
  world *w = *state;
  tg_rate_limit *limit = tg_rate_limit_new(1, 3600);
  assert_non_null(limit);
  w->cfg.rate_limit = limit;
  restart(w);
  long runs = fixture_count(w->f, "agent_runs");
  char sid[64], next[64];
  open_session(w, "{}", sid);
  free(request(w, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\"}", 202));
  char *got = request(w, "POST", sid, NULL,
                      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{}}",
                      200);
  assert_non_null(strstr(got, "params.name must be a string"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  free(request(w, "POST", sid, NULL, CALL(3, "test_simple_text"), 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  open_session(w, "{}", next);
  long acts = fixture_count(w->f, "activity_log");
  got = request(w, "POST", next, NULL, CALL(2, "test_act_once"), 200);
  assert_non_null(strstr(got, "rate_limited"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  w->cfg.rate_limit = NULL;
  restart(w);
  tg_rate_limit_free(limit);
}

/* A session ended (DELETE) while a call of it runs keeps its run running until that call
 * ended, cancelled, in it; then the sweep ends the run. */
static void test_a_session_run_outlives_its_session_until_its_last_call(void **state) {
  world *w = *state;
  char sid[64], run[TG_UUID_LEN + 1];
  kit_hold = true;
  exchange *call = session_call_waiting(w, sid);
  session_run(w, "bot", run);
  free(request(w, "DELETE", sid, NULL, NULL, 200));
  kit_wait(&kit_cancelled);
  json_t *row = NULL;
  assert_string_equal(run_status(w, run, &row), "running"); /* the call holds it */
  json_decref(row);
  let_held_call_end(call);
  assert_run_ended(w, run, "completed", NULL);
  assert_int_equal(calls_in_run(w, run), 1);
}

/* A run the database refuses to end stays running, tried again at each sweep, and holds
 * back the end of no other session's run. */
static void test_a_run_not_ended_holds_back_no_other(void **state) {
  world *w = *state;
  char stuck[64], stuck_run[TG_UUID_LEN + 1], other[64], other_run[TG_UUID_LEN + 1];
  char sql[256];
  open_session(w, "{}", stuck);
  free(request(w, "POST", stuck, NULL, CALL(2, "test_simple_text"), 200));
  session_run(w, "bot", stuck_run);
  open_session(w, "{}", other);
  free(request(w, "POST", other, NULL, CALL(2, "test_simple_text"), 200));
  session_run(w, "bot", other_run);
  snprintf(sql, sizeof sql,
           "CREATE TRIGGER keep_running BEFORE UPDATE ON agent_runs WHEN OLD.id = '%s'"
           " BEGIN SELECT RAISE(ABORT, 'kept running'); END",
           stuck_run);
  assert_int_equal(tg_db_exec(w->f->db, sql, NULL, NULL), 0);
  free(request(w, "DELETE", stuck, NULL, NULL, 200));
  free(request(w, "DELETE", other, NULL, NULL, 200));
  assert_run_ended(w, other_run, "completed", NULL);
  json_t *row = NULL;
  assert_string_equal(run_status(w, stuck_run, &row), "running");
  json_decref(row);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER keep_running", NULL, NULL), 0);
  assert_run_ended(w, stuck_run, "completed", NULL);
}

/* A session whose run cannot start serves its call in no run (a run of its own, trigger
 * call), where a tool capped per run refuses it; its next call tries again. */
static void test_a_session_whose_run_cannot_start_serves_its_calls_in_none(void **state) {
  world *w = *state;
  assert_int_equal(tg_db_exec(w->f->db,
                              "CREATE TRIGGER no_session_runs BEFORE INSERT ON agent_runs"
                              " WHEN NEW.trigger = 'mcp' BEGIN SELECT RAISE(ABORT, 'refused');"
                              " END",
                              NULL, NULL),
                   0);
  static const char own_runs[] = "SELECT COUNT(*) AS n FROM agent_runs WHERE trigger = 'call'"
                                 " AND status = 'completed'";
  long runs = fixture_count(w->f, "agent_runs"), acts = fixture_count(w->f, "activity_log");
  long own = fixture_count_where(w->f, own_runs, NULL);
  char sid[64], run[TG_UUID_LEN + 1];
  open_session(w, "{}", sid);
  char *got = request(w, "POST", sid, NULL, CALL(2, "test_simple_text"), 200);
  assert_null(strstr(got, "\"isError\":true"));
  free(got);
  got = request(w, "POST", sid, NULL, CALL(3, "test_act_once"), 200);
  assert_non_null(strstr(got, "run_required"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  assert_int_equal(fixture_count_where(w->f, own_runs, NULL), own + 1);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER no_session_runs", NULL, NULL), 0);
  free(request(w, "POST", sid, NULL, CALL(4, "test_simple_text"), 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 2);
  session_run(w, "bot", run);
  assert_int_equal(calls_in_run(w, run), 1);
}

/* A per-run cap binds for a session: a tool allowed once a run succeeds once in it, and its
 * second call is refused, writing nothing but its telemetry row (the tool writes activity
 * rows; a run is a row too); the next session may call it again. */
static void test_a_session_run_caps_its_calls(void **state) {
  world *w = *state;
  char sid[64], next[64];
  open_session(w, "{}", sid);
  long acts = fixture_count(w->f, "activity_log");
  char *got = request(w, "POST", sid, NULL, CALL(2, "test_act_once"), 200);
  assert_null(strstr(got, "\"isError\":true"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  long logs = fixture_count(w->f, "agent_run_logs"), runs = fixture_count(w->f, "agent_runs");
  got = request(w, "POST", sid, NULL, CALL(3, "test_act_once"), 200);
  assert_non_null(strstr(got, "\"isError\":true"));
  assert_non_null(strstr(got, "per_run_cap"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  open_session(w, "{}", next);
  got = request(w, "POST", next, NULL, CALL(4, "test_act_once"), 200);
  assert_null(strstr(got, "\"isError\":true"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 2);
}

/* A session opened while its agent was not active opens no run then. Once the agent is
 * started, the session's next requests (here, four at once) open one run: a per-run cap binds
 * in it, and it ends with the session. */
static void test_a_session_opened_before_its_agent_acts_opens_its_run_once_it_does(
    void **state) {
  world *w = *state;
  assert_int_equal(
      tg_db_exec(w->f->db, "UPDATE agents SET status = 'paused' WHERE slug = 'bot'", NULL, NULL),
      0);
  long runs = fixture_count(w->f, "agent_runs"), acts = fixture_count(w->f, "activity_log");
  char sid[64], run[TG_UUID_LEN + 1];
  open_session(w, "{}", sid);
  char *got = request(w, "POST", sid, NULL, CALL(2, "test_act_once"), 200);
  assert_non_null(strstr(got, "agent_not_active"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  assert_int_equal(
      tg_db_exec(w->f->db, "UPDATE agents SET status = 'active' WHERE slug = 'bot'", NULL, NULL),
      0);
  exchange *calls[4];
  for (int i = 0; i < 4; i++) {
    char body[160];
    snprintf(body, sizeof body, CALL_WITH("%d", "test_act_once", "{}"), 3 + i);
    calls[i] = start(w, "POST", sid, NULL, body);
  }
  int served = 0, capped = 0;
  for (int i = 0; i < 4; i++) {
    await(calls[i], NULL);
    assert_int_equal(calls[i]->status, 200);
    served += strstr(calls[i]->got, "\"isError\":true") == NULL;
    capped += strstr(calls[i]->got, "per_run_cap") != NULL;
    finish(calls[i]);
  }
  assert_int_equal(served, 1);
  assert_int_equal(capped, 3);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  session_run(w, "bot", run);
  assert_int_equal(calls_in_run(w, run), 4);
  free(request(w, "DELETE", sid, NULL, NULL, 200));
  assert_run_ended(w, run, "completed", NULL);
}

/* An agent's stateless call names no run, and would be a run of its own, which a per-run cap
 * could never count: a tool capped per run refuses it, writing nothing but its telemetry row.
 * Named in a run, the call succeeds once there, and the cap binds. */
static void test_a_call_in_no_run_may_not_call_a_capped_tool(void **state) {
  world *w = *state;
  long acts = fixture_count(w->f, "activity_log"), runs = fixture_count(w->f, "agent_runs");
  long logs = fixture_count(w->f, "agent_run_logs");
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_act_once"),
                      STATELESS_CALL("1", "test_act_once", "{}"), 200);
  assert_non_null(strstr(got, "\"isError\":true"));
  assert_non_null(strstr(got, "run_required"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  char run[TG_UUID_LEN + 1], headers[256];
  fixture_run_start(w->f, "bot", run);
  snprintf(headers, sizeof headers, STATELESS_ROUTE("test_act_once") "\nToolgate-Run: %s", run);
  got = request(w, "POST", NULL, headers, STATELESS_CALL("2", "test_act_once", "{}"), 200);
  assert_null(strstr(got, "\"isError\":true"));
  free(got);
  got = request(w, "POST", NULL, headers, STATELESS_CALL("3", "test_act_once", "{}"), 200);
  assert_non_null(strstr(got, "per_run_cap"));
  free(got);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts + 1);
  assert_int_equal(calls_in_run(w, run), 2);
}

/* A session's run ends when the session does, after its last call: idle (completed), the
 * server stopping (completed), its token revoked (cancelled). A run an operator ended first
 * stays as they ended it, and the session's calls are refused. */
static void test_a_session_run_ends_with_its_session(void **state) {
  world *w = *state;
  w->cfg.session_idle_ms = 4000;
  restart(w);
  char idle[64], idle_run[TG_UUID_LEN + 1];
  open_session(w, "{}", idle);
  free(request(w, "POST", idle, NULL, CALL(1, "test_simple_text"), 200));
  session_run(w, "bot", idle_run);
  /* Dropped, and its run ended, at a sweep past its idle time. */
  assert_run_ended(w, idle_run, "completed", NULL);
  free(request(w, "POST", idle, NULL, PING, 404));
  w->cfg.session_idle_ms = 0;
  restart(w);

  char ended[64], ended_run[TG_UUID_LEN + 1];
  open_session(w, "{}", ended);
  free(request(w, "POST", ended, NULL, CALL(1, "test_simple_text"), 200));
  session_run(w, "bot", ended_run);
  run_ended(w, ended_run, "failed");
  char *ended_at = NULL, *still = NULL;
  assert_run_ended(w, ended_run, "failed", &ended_at);
  char *got = request(w, "POST", ended, NULL, CALL(2, "test_simple_text"), 200);
  assert_non_null(strstr(got, "not running"));
  free(got);
  /* Refused for its run, not its arguments: a refusal is no row of a run that ended. */
  got = request(w, "POST", ended, NULL, CALL_WITH("3", "greet", "{}"), 200);
  assert_non_null(strstr(got, "not running"));
  free(got);
  assert_int_equal(calls_in_run(w, ended_run), 1); /* its first call alone */
  free(request(w, "DELETE", ended, NULL, NULL, 200));
  assert_run_ended(w, ended_run, "failed", &still); /* as the operator's end left it */
  assert_string_equal(still, ended_at);
  free(ended_at);
  free(still);

  char stopped[64], stopped_run[TG_UUID_LEN + 1];
  open_session(w, "{}", stopped);
  free(request(w, "POST", stopped, NULL, CALL(1, "test_simple_text"), 200));
  session_run(w, "bot", stopped_run);
  restart(w); /* it ends them before it returns */
  json_t *row = NULL;
  assert_string_equal(run_status(w, stopped_run, &row), "completed");
  json_decref(row);

  char revoked[64], revoked_run[TG_UUID_LEN + 1];
  open_session(w, "{}", revoked);
  free(request(w, "POST", revoked, NULL, CALL(1, "test_simple_text"), 200));
  session_run(w, "bot", revoked_run);
  revoke_tokens_of(w, w->agent);
  assert_run_ended(w, revoked_run, "cancelled", NULL);
}

/* A request naming a run (Toolgate-Run) puts its call in it, as 'call --run' does, on both
 * revisions; a run of another agent, or one that ended, refuses the call and takes no row. */
static void test_a_request_names_its_run(void **state) {
  world *w = *state;
  char run[TG_UUID_LEN + 1], foreign[TG_UUID_LEN + 1], headers[256];
  fixture_run_start(w->f, "bot", run);
  fixture_run_start(w->f, "bot2", foreign);
  char sid[64];
  open_session(w, "{}", sid); /* its calls naming the run open none of its own */
  long runs = fixture_count(w->f, "agent_runs");
  snprintf(headers, sizeof headers, STATELESS_ROUTE("test_simple_text") "\nToolgate-Run: %s", run);
  free(request(w, "POST", NULL, headers, STATELESS_CALL("1", "test_simple_text", "{}"), 200));
  char session_header[64];
  snprintf(session_header, sizeof session_header, "Toolgate-Run: %s", run);
  free(request(w, "POST", sid, session_header, CALL(2, "test_simple_text"), 200));
  assert_int_equal(calls_in_run(w, run), 2);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs); /* no run of their own */
  /* A session whose initialize names the run opens none of its own: its calls without the
   * header are each a run of their own. */
  static const char session_runs[] = "SELECT COUNT(*) AS n FROM agent_runs WHERE trigger = 'mcp'";
  long opened = fixture_count_where(w->f, session_runs, NULL);
  char named[64];
  open_session_with(w, "2025-11-25", "{}", session_header, named);
  free(request(w, "POST", named, session_header, CALL(5, "test_simple_text"), 200));
  assert_int_equal(calls_in_run(w, run), 3);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  free(request(w, "POST", named, NULL, CALL(6, "test_simple_text"), 200));
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 1);
  assert_int_equal(fixture_count_where(w->f, session_runs, NULL), opened);
  /* Refused calls of a tool that writes: neither its row nor a run of their own. */
  long acts = fixture_count(w->f, "activity_log");
  runs = fixture_count(w->f, "agent_runs");
  snprintf(session_header, sizeof session_header, "Toolgate-Run: %s", foreign);
  char *got = request(w, "POST", sid, session_header, CALL(3, "test_act_once"), 200);
  assert_non_null(strstr(got, "No run"));
  free(got);
  assert_int_equal(calls_in_run(w, foreign), 0);
  run_ended(w, run, "completed");
  snprintf(headers, sizeof headers, STATELESS_ROUTE("test_act_once") "\nToolgate-Run: %s", run);
  got = request(w, "POST", NULL, headers, STATELESS_CALL("4", "test_act_once", "{}"), 200);
  assert_non_null(strstr(got, "not running"));
  free(got);
  assert_int_equal(calls_in_run(w, run), 3);
  assert_int_equal(fixture_count(w->f, "activity_log"), acts);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
}

/* A notification, a response or a batch naming a version the server does not speak is
 * refused (400), as a request is; and a batch whose requests share an id is refused whole,
 * running none of them. */
static void test_what_a_session_may_not_send(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-03-26", "{}", sid);
  static const char *const bodies[] = {
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}",
      "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}",
      "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}]",
  };
  for (size_t i = 0; i < 3; i++) {
    char *got = request(w, "POST", sid, "MCP-Protocol-Version: 1999-01-01", bodies[i], 400);
    assert_non_null(strstr(got, "Unsupported MCP-Protocol-Version"));
    free(got);
  }
  free(request(w, "POST", sid, "MCP-Protocol-Version: 2025-03-26", bodies[0], 202));
  /* Without a session, a request is told its version is not spoken, not to initialize. */
  char *unspoken = request(w, "POST", NULL, "MCP-Protocol-Version: 1999-01-01",
                           "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}", 400);
  assert_non_null(strstr(unspoken, "\"id\":9,\"error\":{\"code\":-32600,"
                                   "\"message\":\"Unsupported MCP-Protocol-Version\""));
  free(unspoken);
  /* A notification claiming a version not spoken is told which are, as a request is. */
  unspoken = request(w, "POST", NULL, NULL,
                     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
                     "\"requestId\":1,\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"v999\","
                     "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                     400);
  assert_non_null(strstr(unspoken, "\"code\":-32022"));
  assert_non_null(strstr(unspoken, "\"data\":{\"supported\":[\"2026-07-28\"],\"requested\":\"v999\"}"));
  free(unspoken);
  long runs = fixture_count(w->f, "agent_runs");
  char *got = request(w, "POST", sid, NULL,
                      "[" CALL(2, "test_simple_text") "," PING "," CALL(2, "test_simple_text") "]",
                      400);
  assert_non_null(strstr(got, "another of the batch"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
}

/* A 2026-07-28 notification's version header binds as a request's: one that differs from
 * its _meta claim is refused (-32020), and so is a claim of a version the server does not
 * speak (-32022) or one that is no string (-32602); one that agrees is taken (202), as is a
 * claim without the header. The same in a batch of a 2025-03-26 session: a batch is refused
 * for a notification it holds that would be refused alone. */
static void test_a_modern_notification_names_a_version_it_speaks(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-03-26", "{}", sid);
  static const struct {
    const char *header, *claim, *refusal;
  } cases[] = {
      {"MCP-Protocol-Version: 1999-01-01", "\"2026-07-28\"", "\"code\":-32020"},
      {"MCP-Protocol-Version: 2025-11-25", "\"2026-07-28\"", "\"code\":-32020"},
      {"MCP-Protocol-Version: 1999-01-01", "\"1999-01-01\"", "\"code\":-32022"},
      {NULL, "\"1999-01-01\"", "\"code\":-32022"},
      {NULL, "20260728", "\"code\":-32602"}, /* a malformed envelope, as a request's */
      {"MCP-Protocol-Version: 2026-07-28", "\"2026-07-28\"", NULL},
      {NULL, "\"2026-07-28\"", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{"
             "\"progressToken\":1,\"progress\":1,\"_meta\":{\"io.modelcontextprotocol/"
             "protocolVersion\":%s,\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
             cases[i].claim);
    char *got = request(w, "POST", NULL, cases[i].header, body, cases[i].refusal ? 400 : 202);
    if (cases[i].refusal) assert_non_null(strstr(got, cases[i].refusal));
    free(got);
    /* In a batch, with the session's version header, or none. */
    const char *header = cases[i].header ? "MCP-Protocol-Version: 2025-03-26" : NULL;
    const char *refusal = cases[i].header ? "\"code\":-32020" : cases[i].refusal;
    char batch[512];
    snprintf(batch, sizeof batch, "[" PING ",%s]", body);
    got = request(w, "POST", sid, header, batch, refusal ? 400 : 200);
    assert_non_null(strstr(got, refusal ? refusal : "\"result\""));
    free(got);
  }
}

/* Only the revisions whose clients resume streams get a GET stream primed (an empty event
 * with an id to resume from): an older client may take the empty event for a message that
 * does not parse. Its stream begins with the first event. */
static void test_an_older_session_gets_its_get_stream_unprimed(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-06-18", "{}", sid);
  exchange *get = start(w, "GET", sid, NULL, NULL);
  /* Its headers come once the lists it hears of are taken as they stand. */
  pthread_mutex_lock(&get->lock);
  while (!get->type[0] && !get->ended) pthread_cond_wait(&get->grew, &get->lock);
  pthread_mutex_unlock(&get->lock);
  assert_string_equal(get->type, "text/event-stream");
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  free(request(w, "POST", sid, NULL, PING, 200));
  await(get, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
  pthread_mutex_lock(&get->lock);
  assert_int_equal(strncmp(get->got, "id: ", 4), 0);
  assert_null(strstr(get->got, "data: \n\n"));
  pthread_mutex_unlock(&get->lock);
  finish(get);
}

/* A session's call that runs on its connection's thread begins its event stream with the
 * priming event too, at its first event, as the calls on the pool do as they begin; one that
 * sends no event is answered in JSON. An older revision's client gets no priming. */
static void test_a_call_on_its_connection_primes_its_stream(void **state) {
  world *w = *state;
  static const char progress[] =
      "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{"
      "\"name\":\"test_tool_with_progress\",\"_meta\":{\"progressToken\":1}}}";
  char sid[64];
  open_session(w, "{}", sid);
  char *got = request(w, "POST", sid, NULL, progress, 200);
  unsigned no = 0;
  int used = 0;
  assert_int_equal(sscanf(got, "id: %u-0\nretry: 500\ndata: \n\nid: %*u-1\n%n", &no, &used), 1);
  assert_true(used > 0);
  assert_non_null(strstr(got + used, "notifications/progress"));
  free(got);
  got = request(w, "POST", sid, NULL, CALL(8, "test_simple_text"), 200);
  assert_int_equal(got[0], '{');
  free(got);
  open_session_at(w, "2025-06-18", "{}", sid);
  got = request(w, "POST", sid, NULL, progress, 200);
  assert_int_equal(strncmp(got, "id: ", 4), 0);
  assert_null(strstr(got, "data: \n\n"));
  assert_non_null(strstr(got, "notifications/progress"));
  free(got);
}

/* A 2025-03-26 session takes JSON-RPC batches: one JSON answer holds the replies, and a
 * response in a batch reaches the call waiting for it. Without a session, or on a later
 * revision, each request in a batch is refused and nothing in it runs. */
static void test_batches_on_a_2025_03_26_session(void **state) {
  world *w = *state;
  char sid[64];
  open_session_at(w, "2025-03-26", "{\"sampling\":{}}", sid);
  exchange *call = asking_call(w, sid);
  char batch[512];
  snprintf(batch, sizeof batch,
           "[{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"role\":\"assistant\",\"content\":{"
           "\"type\":\"text\",\"text\":\"hello\"},\"model\":\"m\"}}," PING "]",
           (long long)asked_id(call->got, "sampling/createMessage"));
  char *got = request(w, "POST", sid, NULL, batch, 200);
  assert_string_equal(got, "[{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}]");
  free(got);
  await(call, "\"id\":\"call-1\"");
  assert_non_null(strstr(call->got, "hello"));
  finish(call);
  long calls = fixture_count(w->f, "agent_run_logs");
  got = request(w, "POST", sid, NULL, "[" CALL(2, "test_simple_text") "," PING "]", 200);
  assert_non_null(strstr(got, "[{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":"));
  assert_non_null(strstr(got, "},{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}]"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), calls + 1);
  /* Its answer is JSON, which cannot carry the server's requests: a tool cannot ask. */
  got = request(w, "POST", sid, NULL, "[" CALL_WITH("5", "test_sampling", "{\"prompt\":\"hi\"}") "]",
                200);
  assert_non_null(strstr(got, "\"isError\":true"));
  assert_non_null(strstr(got, "no way to send sampling/createMessage"));
  free(got);
  /* Notifications alone get no answer. */
  free(request(w, "POST", sid, NULL, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}]",
               202));
  /* Neither do responses no request waits for, which the log tells of once a minute. */
  fixture_log log = fixture_log_begin(w->f);
  for (int i = 0; i < 2; i++)
    free(request(w, "POST", sid, NULL,
                 "[{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}},{\"jsonrpc\":\"2.0\",\"id\":8,"
                 "\"result\":{}}]",
                 202));
  char *logged = fixture_log_end(log);
  assert_int_equal(fixture_occurrences(logged, "a batched response to no request"), 1);
  free(logged);
  calls = fixture_count(w->f, "agent_run_logs");
  /* A header a single request would be refused for refuses the whole batch. */
  got = request(w, "POST", sid, "MCP-Protocol-Version: 1999-01-01",
                "[" CALL(6, "test_simple_text") "]", 400);
  assert_non_null(strstr(got, "[{\"jsonrpc\":\"2.0\",\"id\":6,\"error\":{\"code\":-32600"));
  assert_non_null(strstr(got, "Unsupported MCP-Protocol-Version"));
  free(got);

  char later[64];
  open_session(w, "{}", later);
  got = request(w, "POST", later, NULL, "[" CALL(3, "test_simple_text") "]", 400);
  assert_non_null(strstr(got, "[{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32600"));
  assert_non_null(strstr(got, "2025-03-26"));
  free(got);
  got = request(w, "POST", NULL, NULL, "[" CALL(4, "test_simple_text") "]", 400);
  assert_non_null(strstr(got, "[{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32600"));
  free(got);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), calls); /* neither ran */
}

/* Resumes stream no of session sid after its event, reads it until it ends, having seen
 * answer; the caller finishes the exchange. */
static exchange *resume(world *w, const char *sid, unsigned no, unsigned event, const char *answer) {
  char last[64];
  snprintf(last, sizeof last, "Last-Event-ID: %u-%u", no, event);
  exchange *resumed = start(w, "GET", sid, last, NULL);
  await(resumed, answer);
  await(resumed, NULL);
  return resumed;
}

/* A call of test_reconnection (id 7) on session sid, which ends its answer before any event:
 * the answer is the priming event alone (an id, the reconnection delay and no data). Returns
 * the stream's number. */
static unsigned primed_only(world *w, const char *sid) {
  char *primed = request(w, "POST", sid, NULL, CALL(7, "test_reconnection"), 200);
  unsigned no = 0;
  int used = 0;
  assert_int_equal(sscanf(primed, "id: %u-0\nretry: %*u\ndata: \n\n%n", &no, &used), 1);
  assert_int_equal((size_t)used, strlen(primed));
  free(primed);
  return no;
}

static void test_a_call_closing_its_stream_is_resumed_with_last_event_id(void **state) {
  world *w = *state;
  char sid[64];
  /* The client's standalone stream stays open meanwhile. */
  exchange *get = open_listening_session(w, sid);
  unsigned no = primed_only(w, sid);
  finish(resume(w, sid, no, 0, "\"id\":7,\"result\""));
  finish(get);
}

/* A stream still to deliver outlives newer streams whose output all went out: a session
 * keeps TG_HTTP_KEPT_STREAMS, and the spent ones give their places first. */
static void test_a_stream_still_to_deliver_outlives_newer_spent_ones(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  unsigned no = primed_only(w, sid);
  for (int i = 0; i < TG_HTTP_KEPT_STREAMS + 2; i++) {
    char *got = request(w, "POST", sid, NULL,
                        "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{"
                        "\"name\":\"test_tool_with_progress\",\"_meta\":{\"progressToken\":1}}}",
                        200);
    assert_non_null(strstr(got, "event: message")); /* an SSE answer, kept */
    free(got);
  }
  finish(resume(w, sid, no, 0, "\"id\":7,\"result\""));
}

/* An answer ended after events still tells the client when to come back, without an event
 * Last-Event-ID would count. */
/* Checks a polled answer of test_note_close (freed): its priming, the message as event 1 of
 * its stream, then the reconnection delay alone; then resumes the stream for the result. */
static void check_polled_answer(world *w, const char *sid, char *polled) {
  unsigned no = 0;
  int used = 0;
  assert_int_equal(sscanf(polled, "id: %u-0\nretry: 500\ndata: \n\nid: %*u-1\nevent: message\n"
                                  "data: %*[^\n]\n\n%n", &no, &used), 1);
  assert_non_null(strstr(polled, "before the close"));
  assert_string_equal(polled + used, "retry: 500\n\n");
  free(polled);
  exchange *resumed = resume(w, sid, no, 1, "\"id\":8,\"result\"");
  assert_null(strstr(resumed->got, "before the close")); /* not sent again */
  finish(resumed);
}

/* Whether the call ends its answer before or after the connection starts reading it. */
static void test_a_call_closing_its_stream_after_an_event_says_when_to_resume(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  check_polled_answer(w, sid, request(w, "POST", sid, NULL, CALL(8, "test_note_close"), 200));
}

/* The connection already sent the event when the call ends its answer. */
static void test_a_call_closing_a_stream_being_read_says_when_to_resume(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  exchange *call = start(w, "POST", sid, NULL, CALL_WITH("8", "test_note_close", "{\"wait\":true}"));
  await(call, "before the close\"}}\n\n");
  kit_set(&kit_go);
  await(call, NULL);
  check_polled_answer(w, sid, strdup(call->got));
  finish(call);
}

/* A stream resumed before any event, and ended again before one, still says when to come
 * back: the resuming connection was never sent the priming event, which says it. */
static void test_a_stream_ended_again_before_an_event_says_when_to_resume(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  exchange *call = start(w, "POST", sid, NULL,
                         CALL_WITH("8", "test_note_close", "{\"silent\":true,\"twice\":true}"));
  await(call, NULL);
  unsigned no = 0;
  int used = 0;
  assert_int_equal(sscanf(call->got, "id: %u-0\nretry: 500\ndata: \n\n%n", &no, &used), 1);
  assert_int_equal(call->got[used], '\0'); /* the priming alone, which gives the delay */
  finish(call);
  char last[64];
  snprintf(last, sizeof last, "Last-Event-ID: %u-0", no);
  exchange *resumed = start(w, "GET", sid, last, NULL);
  for (int i = 0;; i++) { /* reading the stream: its answer began */
    pthread_mutex_lock(&resumed->lock);
    long status = resumed->status;
    pthread_mutex_unlock(&resumed->lock);
    if (status) {
      assert_int_equal(status, 200);
      break;
    }
    if (i == HANG_GUARD_S * 100) fail_msg("the resumption never began");
    usleep(10 * 1000);
  }
  kit_set(&kit_go);
  await(resumed, NULL);
  assert_string_equal(resumed->got, "retry: 500\n\n");
  finish(resumed);
  finish(resume(w, sid, no, 0, "\"id\":8,\"result\""));
}

/* A reply too large for the stream is replaced by an error that takes the next number:
 * Last-Event-ID finds events by counting them. The log tells of such replies once a minute
 * (a client can ask for them at will). */
static void test_a_reply_too_large_for_its_stream_becomes_the_next_event(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  fixture_log log = fixture_log_begin(w->f);
  free(request(w, "POST", sid, NULL, CALL(8, "test_note_overflow"), 200));
  char *got = request(w, "POST", sid, NULL, CALL(9, "test_note_overflow"), 200);
  char *logged = fixture_log_end(log);
  assert_int_equal(fixture_occurrences(logged, "past the bounds on output"), 1);
  free(logged);
  unsigned no = 0, second = 0;
  int used = 0;
  /* Its priming event, the message, then the error in place of the reply. */
  assert_int_equal(sscanf(got, "id: %u-0\nretry: 500\ndata: \n\nid: %*u-1\nevent: message\n"
                               "data: %*[^\n]\n\n%n", &no, &used), 1);
  assert_true(used > 0);
  assert_non_null(strstr(got, "before the answer"));
  assert_int_equal(sscanf(got + used, "id: %*u-%u\n", &second), 1);
  assert_int_equal(second, 2);
  assert_non_null(strstr(got + used, REFUSED));
  free(got);
  /* Resuming after the first event brings the error again, under the same number. */
  exchange *resumed = resume(w, sid, no, 1, REFUSED);
  char expected[32];
  snprintf(expected, sizeof expected, "id: %u-2\n", no);
  assert_non_null(strstr(resumed->got, expected));
  finish(resumed);
}

/* A batch's answer past the bounds on output is replaced by an error naming each of its
 * requests, as a single request's is by one naming it. */
static void test_a_batch_answer_past_the_bounds_names_its_requests(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 256 * 1024; /* 128 KB a caller */
  restart(w);
  char sid[64];
  open_session_at(w, "2025-03-26", "{}", sid);
  char *got = request(w, "POST", sid, NULL,
                      "[" CALL_WITH("5", "test_note_overflow", "{\"bytes\":200000}") "," PING "]", 200);
  assert_string_equal(got, "[{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32603,\"message\":"
                           "\"" REFUSED "\"}},{\"jsonrpc\":\"2.0\",\"id\":99,"
                           "\"error\":{\"code\":-32603,\"message\":\"" REFUSED "\"}}]");
  free(got);
}

/* A server named for one workspace takes only its tokens. */
static void test_a_server_of_one_workspace_takes_only_its_tokens(void **state) {
  world *w = *state;
  w->cfg.tenant_id = "01000000-0000-7000-8000-000000000000";
  restart(w);
  free(request(w, "POST", NULL, NULL, PING, 401));
  w->cfg.tenant_id = w->f->tenant_id;
  restart(w);
  char sid[64];
  open_session(w, "{}", sid);
}

/* "Bearer" with no token (a client's token variable left unset) is called empty, not
 * unknown (it is challenged as no token is); an unknown one's refusal says how a token is
 * made; whitespace around a token is no part of it. */
static void test_bearer_tokens_empty_unknown_or_padded(void **state) {
  world *w = *state;
  const char *token = w->token;
  w->token = "";
  exchange *ex = start(w, "POST", NULL, NULL, PING);
  await(ex, NULL);
  assert_int_equal(ex->status, 401);
  assert_string_equal(ex->challenge, "Bearer realm=\"toolgate\""); /* as with no token */
  assert_non_null(strstr(ex->got, "The Bearer token is empty"));
  finish(ex);
  w->token = "tg_nosuchtoken";
  ex = start(w, "POST", NULL, NULL, PING);
  await(ex, NULL);
  assert_int_equal(ex->status, 401);
  assert_string_equal(ex->challenge, "Bearer realm=\"toolgate\", error=\"invalid_token\"");
  assert_non_null(strstr(ex->got, "toolgate token create"));
  finish(ex);
  /* Whitespace around the token is not part of it (RFC 9110 §5.5). */
  char *padded = NULL;
  assert_true(asprintf(&padded, " %s \t ", token) > 0);
  w->token = padded;
  char sid[64];
  open_session(w, "{}", sid);
  free(padded);
  w->token = token;
}

/* A client that never answers: the call stops waiting after the server's ask timeout, and its
 * stream ends with its failure. */
static void test_a_call_gives_up_on_a_silent_client(void **state) {
  world *w = *state;
  w->cfg.server.ask_timeout_ms = 200;
  restart(w);
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  exchange *call = asking_call(w, sid);
  await(call, NULL);
  /* The question is withdrawn, then the call fails: the client's failure, no internal one. */
  const char *withdrawn = strstr(call->got, "\"method\":\"notifications/cancelled\"");
  assert_non_null(withdrawn);
  assert_non_null(strstr(withdrawn, "No answer came in time"));
  const char *answer = strstr(withdrawn, "\"id\":\"call-1\"");
  assert_non_null(answer);
  assert_non_null(strstr(answer, "\"isError\":true"));
  assert_non_null(strstr(answer, "\"code\":\"provider_error\""));
  assert_non_null(strstr(answer, "The client did not answer sampling/createMessage"));
  finish(call);
  free(request(w, "POST", sid, NULL, PING, 200));
}

/* A session has at most 16 questions to its client waiting for answers: a call asking one
 * more fails as the client's being busy (rate_limited, to retry), not as an internal error. */
static void test_a_question_past_those_waiting_is_to_retry(void **state) {
  world *w = *state;
  w->cfg.threads = 18; /* one caller may hold all the threads but one */
  restart(w);
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  exchange *asking[16];
  for (int i = 0; i < 16; i++) {
    char body[256];
    snprintf(body, sizeof body, CALL_WITH("\"q-%d\"", "test_sampling", "{\"prompt\":\"hi\"}"), i);
    asking[i] = start(w, "POST", sid, NULL, body);
    await(asking[i], "\"method\":\"sampling/createMessage\"");
  }
  char *got = request(w, "POST", sid, NULL,
                      CALL_WITH("\"q-16\"", "test_sampling", "{\"prompt\":\"hi\"}"), 200);
  assert_non_null(strstr(got, "\"code\":\"rate_limited\""));
  assert_null(strstr(got, "sampling/createMessage"));
  free(got);
  for (int i = 0; i < 16; i++) finish(asking[i]);
}

/* One token's holder has at most so many requests answered at once (its streams count):
 * past it, a request is refused with 429, and another holder is served. */
static void test_one_caller_has_a_share_of_the_requests_answered(void **state) {
  world *w = *state;
  w->cfg.max_requests_per_principal = 2;
  restart(w);
  char sids[2][64];
  exchange *gets[2];
  for (int i = 0; i < 2; i++) {
    open_session(w, "{}", sids[i]);
    gets[i] = start(w, "GET", sids[i], NULL, NULL);
    await(gets[i], "data: \n\n");
  }
  char *got = request(w, "POST", sids[0], NULL, PING, 429);
  assert_non_null(strstr(got, "Too many requests of this caller"));
  free(got);
  w->token = w->tokens[1]; /* another holder */
  char other[64];
  open_session(w, "{}", other);
  w->token = w->tokens[0];
  /* A DELETE counts among no caller's requests: the caller can always end a session, whose
   * stream then ends and gives its place back. */
  char *refused = request(w, "DELETE", sids[1], NULL, "{}", 400); /* but takes no body */
  assert_non_null(strstr(refused, "A DELETE takes no body"));
  free(refused);
  free(request(w, "DELETE", sids[1], NULL, NULL, 200));
  await(gets[1], NULL);
  finish(gets[1]);
  for (int tries = 0;; tries++) {
    exchange *ex = start(w, "POST", sids[0], NULL, PING);
    await(ex, NULL);
    long status = ex->status;
    finish(ex);
    if (status == 200) break;
    if (tries > HANG_GUARD_S * 10) fail_msg("the ended stream's place was never given back");
    usleep(100 * 1000);
  }
  finish(gets[0]);
}

/* Reads one answer with a Content-Length whole from fd into answer (size bytes at most, its
 * head included, NUL-terminated); the connection stays open. */
static void read_answer(int fd, char *answer, size_t size) {
  size_t len = 0, whole = 0;
  answer[0] = 0;
  while (!whole || len < whole) {
    ssize_t n = recv(fd, answer + len, size - 1 - len, 0);
    assert_true(n > 0);
    answer[len += (size_t)n] = 0;
    const char *end = strstr(answer, "\r\n\r\n"), *length = strstr(answer, "Content-Length: ");
    if (end && length) whole = (size_t)(end + 4 - answer) + strtoul(length + 16, NULL, 10);
  }
}

#define ANSWER_MAX 8192

#define USUAL_ACCEPT "application/json, text/event-stream"

/* The header lines of a 2026-07-28 request of method (routed to name, when given) that
 * w->token's holder sends, with accept as its Accept header (malloc'd). */
static char *accepting_lines(world *w, const char *method, const char *name,
                             const char *accept) {
  char *lines = NULL;
  assert_true(asprintf(&lines,
                       "Authorization: Bearer %s\r\nAccept: %s\r\n"
                       "Content-Type: application/json\r\n"
                       "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: %s\r\n%s%s%s",
                       w->token, accept, method, name ? "Mcp-Name: " : "", name ? name : "",
                       name ? "\r\n" : "") > 0);
  return lines;
}

/* The same, accepting both answers, as clients do. */
static char *modern_lines(world *w, const char *method, const char *name) {
  return accepting_lines(w, method, name, USUAL_ACCEPT);
}

/* A 2026-07-28 server/discover on fd, connected to the server at port: its answer, whole,
 * into answer. */
static void discover_on(world *w, int fd, unsigned port, char answer[ANSWER_MAX]) {
  char *lines = modern_lines(w, "server/discover", NULL);
  fixture_http_send(fd, port, "POST", lines,
                    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\","
                    "\"params\":{" MODERN_META "}}");
  free(lines);
  read_answer(fd, answer, ANSWER_MAX);
}

/* The same, answered 200. */
static void discovered_on(world *w, int fd, unsigned port) {
  char answer[ANSWER_MAX];
  discover_on(w, fd, port, answer);
  if (strncmp(answer, "HTTP/1.1 200", 12) != 0) fail_msg("server/discover got: %s", answer);
}

/* A small answer stops counting among its caller's requests once it is handed over, not when
 * libmicrohttpd completes its request, which may come after the client has it: a caller at
 * its bound that sends its next request on another connection the moment it has an answer
 * is served. */
static void test_a_caller_at_its_bound_is_served_its_next_request_at_once(void **state) {
  world *w = *state;
  w->cfg.max_requests_per_principal = 1;
  unsigned port = restart(w);
  int fds[2] = {fixture_connect(port), fixture_connect(port)};
  for (int i = 0; i < 2000; i++) discovered_on(w, fds[i % 2], port);
  close(fds[0]);
  close(fds[1]);
}

/* Reads from fd into answer (size bytes at most, *len of them there already, NUL-terminated)
 * until it holds text. */
static void read_until(int fd, char *answer, size_t size, size_t *len, const char *text) {
  while (!strstr(answer, text)) {
    ssize_t n = recv(fd, answer + *len, size - 1 - *len, 0);
    if (n <= 0) fail_msg("the answer ended before %s: %s", text, answer);
    answer[*len += (size_t)n] = 0;
  }
}

/* The same after a streamed answer: its request stops counting once the last of it is handed
 * over, not when its stream ends after that. */
static void test_a_caller_at_its_bound_is_served_its_next_request_after_a_stream(void **state) {
  world *w = *state;
  w->cfg.max_requests_per_principal = 1;
  unsigned port = restart(w);
  int streamed = fixture_connect(port), other = fixture_connect(port);
  char *lines = modern_lines(w, "tools/call", "test_tool_with_progress");
  for (int i = 0; i < 500; i++) {
    char answer[ANSWER_MAX] = "";
    size_t len = 0;
    fixture_http_send(streamed, port, "POST", lines,
                      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                      "\"name\":\"test_tool_with_progress\",\"arguments\":{},\"_meta\":{"
                      "\"progressToken\":\"p\",\"io.modelcontextprotocol/protocolVersion\":"
                      "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}");
    read_until(streamed, answer, sizeof answer, &len, "executed successfully");
    discovered_on(w, other, port);
    read_until(streamed, answer, sizeof answer, &len, "\r\n0\r\n\r\n");
    if (!strstr(answer, "Content-Type: text/event-stream")) fail_msg("not streamed: %s", answer);
  }
  free(lines);
  close(streamed);
  close(other);
}

/* The same after a JSON answer over 4 KB (a tools/list): its request stops counting once the
 * last of it is handed over, not when libmicrohttpd completes it after that. */
static void test_a_caller_at_its_bound_is_served_its_next_request_after_a_large_answer(
    void **state) {
  world *w = *state;
  w->cfg.max_requests_per_principal = 1;
  unsigned port = restart(w);
  int listed = fixture_connect(port), other = fixture_connect(port);
  char *lines = modern_lines(w, "tools/list", NULL);
  size_t size = 1024 * 1024;
  char *answer = malloc(size);
  for (int i = 0; i < 1500; i++) {
    fixture_http_send(listed, port, "POST", lines,
                      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{"
                      MODERN_META "}}");
    read_answer(listed, answer, size);
    const char *length = strstr(answer, "Content-Length: ");
    if (strncmp(answer, "HTTP/1.1 200", 12) != 0 || !length || atoi(length + 16) <= 4096)
      fail_msg("no large JSON answer: %.300s", answer);
    discovered_on(w, other, port);
  }
  free(answer);
  free(lines);
  close(listed);
  close(other);
}

/* Sends a request's head on fd, connected, then a byte every 250 ms (less than the tests' idle
 * timeouts apart) until the server closes the connection; closes fd. */
static void trickle_until_closed(int fd) {
  static const char head[] = "POST /mcp HTTP/1.1\r\nX-Slow: ";
  assert_int_equal(send(fd, head, sizeof head - 1, MSG_NOSIGNAL), (ssize_t)sizeof head - 1);
  bool closed = false;
  for (int ticks = 0; !closed && ticks < HANG_GUARD_S * 4; ticks++) {
    closed = send(fd, "a", 1, MSG_NOSIGNAL) != 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char byte;
    if (!closed && poll(&p, 1, 250) == 1) closed = recv(fd, &byte, 1, 0) <= 0;
  }
  close(fd);
  if (!closed) fail_msg("a client sending a byte every 250 ms held its connection");
}

/* A client that sends its request a byte now and then is never idle: its connection is
 * closed once it has been sending for twice the idle timeout (counted from its previous
 * answer), and the server serves others. */
static void test_a_slow_sender_is_cut_off(void **state) {
  world *w = *state;
  w->cfg.idle_timeout_s = 1;
  unsigned port = restart(w);
  int fd = fixture_connect(port);
  discovered_on(w, fd, port); /* a whole request first: the next one is timed from its answer */
  trickle_until_closed(fd);
  free(request(w, "POST", NULL, MODERN_HEADERS("server/discover"),
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META
               "}}",
               200));
}

/* A connection that never sends a request is closed once idle, and its slot is free again;
 * a call running longer than that is not idle. */
static void test_idle_connections_are_closed(void **state) {
  world *w = *state;
  w->cfg.idle_timeout_s = 1;
  unsigned port = restart(w);
  int fd = fixture_connect(port);
  char byte;
  assert_int_equal(read(fd, &byte, 1), 0); /* closed by the server, not by the guard */
  close(fd);
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("slow_compute"),
                      STATELESS_CALL("1", "slow_compute", "{\"seconds\":3}"), 200);
  assert_non_null(strstr(got, "Computed (unlabelled) in 3s"));
  free(got);
}

/* Pings session sid every 200 ms for ms (of the clock's time, however long a ping takes). */
static void keep_using(world *w, const char *sid, int ms) {
  for (int64_t until = tg_monotonic_ms() + ms; tg_monotonic_ms() < until;) {
    usleep(200 * 1000);
    free(request(w, "POST", sid, NULL, PING, 200));
  }
}

/* A session unused for the idle time (8 s here; the server looks every 2 s) ends though no
 * other session comes to make room; one in use stays, and so does one whose GET stream, read
 * for longer than that, its client just left (to reconnect). The waits leave seconds to spare
 * on a slow machine: the test checks what the server decides, not how fast. */
static void test_idle_sessions_end_on_their_own(void **state) {
  world *w = *state;
  w->cfg.session_idle_ms = 8000;
  restart(w);
  char idle[64], used[64], listening[64];
  open_session(w, "{}", idle);
  open_session(w, "{}", used);
  exchange *get = open_listening_session(w, listening);
  keep_using(w, used, 9000);
  finish(get);
  /* The server sees the client gone within a second and looks every two: one look at least
   * in these 4 s, still 4 s short of the idle time. */
  keep_using(w, used, 4000);
  get = start(w, "GET", listening, NULL, NULL);
  await(get, "data: \n\n");
  finish(get);
  free(request(w, "POST", idle, NULL, PING, 404));
  free(request(w, "POST", used, NULL, PING, 200));
}

/* The number of the stream an answer of a session's POST came on (its first event's). */
static unsigned stream_no(const char *got) {
  unsigned no = 0;
  assert_int_equal(sscanf(got, "id: %u-", &no), 1);
  return no;
}

/* Whether session sid still keeps stream no's events from the first on. */
static bool still_kept(world *w, const char *sid, unsigned no) {
  char last[64];
  snprintf(last, sizeof last, "Last-Event-ID: %u-0", no);
  exchange *ex = start(w, "GET", sid, last, NULL);
  await(ex, NULL);
  bool kept = ex->status == 200 && strstr(ex->got, "before the answer");
  if (!kept && !strstr(ex->got, "The events after Last-Event-ID are no longer kept"))
    fail_msg("resuming stream %u: HTTP %ld: %s", no, ex->status, ex->got);
  finish(ex);
  return kept;
}

/* A call of test_note_overflow by caller with an answer text of bytes (it goes out twice);
 * returns what came back. */
static char *overflow_call(world *w, int caller, const char *sid, int bytes) {
  char args[64], body[256];
  snprintf(args, sizeof args, "{\"bytes\":%d}", bytes);
  snprintf(body, sizeof body, CALL_WITH("5", "test_note_overflow", "%s"), args);
  w->token = w->tokens[caller];
  char *got = request(w, "POST", sid, NULL, body, 200);
  assert_non_null(strstr(got, "before the answer"));
  w->token = w->tokens[0];
  return got;
}

/* What the streams of a server have not delivered yet is bounded (one caller's at half the
 * bound): a reply past it becomes an error. What they keep for resumption once delivered is
 * bounded apart (at half as much, one caller's at a quarter) and never takes the room of new
 * output: past it, delivered output is not kept. */
static void test_output_held_is_bounded_and_kept_output_gives_way(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 300 * 1024; /* undelivered: 150 KB a caller; kept: 150 KB, 75 a caller */
  restart(w);
  char sids[3][64];
  for (int i = 0; i < 3; i++) {
    w->token = w->tokens[i];
    open_session(w, "{}", sids[i]);
  }
  w->token = w->tokens[0];
  /* A little over 100 KB a reply: more than bot keeps, so each goes out and is not kept, and
   * none is refused, though two would not fit in bot's half together. */
  unsigned big[4];
  for (int i = 0; i < 4; i++) {
    char *got = overflow_call(w, 0, sids[0], 51200);
    assert_null(strstr(got, REFUSED));
    big[i] = stream_no(got);
    free(got);
  }
  for (int i = 0; i < 4; i++) assert_false(still_kept(w, sids[0], big[i]));
  /* A little over 50 KB each (the text twice, with its JSON and SSE framing): kept while bot,
   * bot2 and what all keep are within their bounds; the third caller's takes what all keep
   * past 150 KB. */
  unsigned mid[3];
  for (int i = 0; i < 3; i++) {
    char *got = overflow_call(w, i, sids[i], 25600);
    mid[i] = stream_no(got);
    free(got);
  }
  for (int i = 0; i < 3; i++) {
    w->token = w->tokens[i];
    assert_int_equal(still_kept(w, sids[i], mid[i]), i < 2);
  }
  w->token = w->tokens[0];
  /* What bot keeps does not count against its next reply: 50 KB kept and 100 KB to send. */
  char *got = overflow_call(w, 0, sids[0], 51200);
  assert_null(strstr(got, REFUSED));
  free(got);
  /* A reply past a caller's half of the bound on undelivered output. */
  got = overflow_call(w, 2, sids[2], 81920);
  assert_non_null(strstr(got, REFUSED));
  free(got);
}

/* A client resuming after an event it never got (the reply that followed a polled answer)
 * has the stream let go of what it delivered past the bound on kept output, as a read does. */
static void test_resumption_past_what_went_out_keeps_within_the_bound(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 300 * 1024; /* kept: 75 KB a caller */
  restart(w);
  char sid[64];
  open_session(w, "{}", sid);
  char *polled = request(w, "POST", sid, NULL,
                         CALL_WITH("8", "test_note_close", "{\"bytes\":51200}"), 200);
  unsigned no = stream_no(polled);
  free(polled);
  char last[64];
  snprintf(last, sizeof last, "Last-Event-ID: %u-2", no); /* the reply, once there */
  for (int i = 0;; i++) {
    exchange *ex = start(w, "GET", sid, last, NULL);
    await(ex, NULL);
    long status = ex->status;
    finish(ex);
    if (status == 200) break;
    if (i == HANG_GUARD_S * 100) fail_msg("the reply to a polled answer never came");
    usleep(10000);
  }
  snprintf(last, sizeof last, "Last-Event-ID: %u-1", no);
  char *got = request(w, "GET", sid, last, NULL, 400);
  assert_non_null(strstr(got, "The events after Last-Event-ID are no longer kept"));
  free(got);
}

/* Sends method with headers (whole lines, each ending in CRLF, Accept among them) and body as
 * the caller w->token names, on a connection whose client reads until it has seen marker and
 * then nothing more: what the server sends next fills the small buffers of the socket and
 * waits there. Returns the socket. */
static int stalled_request(world *w, const char *method, const char *headers, const char *body,
                           const char *marker) {
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  /* Small segments too: the server sizes its send buffer after them. */
  int small = 4096, segment = 536;
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &segment, sizeof segment), 0);
  char *lines = NULL;
  assert_true(asprintf(&lines, "Authorization: Bearer %s\r\n%s", w->token, headers) > 0);
  fixture_http_send(fd, port, method, lines, body);
  free(lines);
  /* The latest bytes read, one at a time, so as to read no further than the marker. */
  char seen[512] = "";
  size_t len = 0, want = strlen(marker);
  for (size_t total = 0; len < want || memcmp(seen + len - want, marker, want) != 0; total++) {
    if (len == sizeof seen - 1) {
      memmove(seen, seen + len - want, want);
      len = want;
    }
    assert_int_equal(read(fd, seen + len, 1), 1);
    seen[++len] = 0;
    if (total == 11 && strncmp(seen, "HTTP/1.1 200", 12) != 0) fail_msg("%s: answered %s", method, seen);
  }
  return fd;
}

/* Resumes stream no of session sid from its first event, stalled after the answer's head. */
static int stalled_resumption(world *w, const char *sid, unsigned no) {
  char headers[256];
  snprintf(headers, sizeof headers,
           "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: %u-0\r\n", sid, no);
  return stalled_request(w, "GET", headers, "", "\r\n\r\n");
}

/* A resumption that sends again what went out before (the client lost it on the way) does not
 * turn it into undelivered output: it stays counted as kept, and the caller's next reply has
 * the whole of its half of the bound on undelivered output. */
static void test_sending_kept_output_again_leaves_the_room_for_new_output(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 2 * 1024 * 1024; /* undelivered: 1 MB a caller; kept: 512 KB */
  restart(w);
  char sid[64];
  open_session(w, "{}", sid);
  /* Two answers of about 246 KB each (the text twice, with its framing), both kept. */
  unsigned kept[2];
  for (int i = 0; i < 2; i++) {
    char *got = overflow_call(w, 0, sid, 122880);
    kept[i] = stream_no(got);
    free(got);
    assert_true(still_kept(w, sid, kept[i]));
  }
  /* Both sent again to clients that read none of it: at most what the sockets take went out
   * again, the rest waits. */
  int fds[2];
  for (int i = 0; i < 2; i++) fds[i] = stalled_resumption(w, sid, kept[i]);
  /* About 1000 KB: within bot's half only while what waits to go out again is not counted
   * as undelivered. */
  char *got = overflow_call(w, 0, sid, 512000);
  assert_null(strstr(got, REFUSED));
  free(got);
  for (int i = 0; i < 2; i++) close(fds[i]);
}

/* A session whose client reads a stream it resumed is in use, though it sends nothing, as one
 * whose GET stream is read is: the principal's next session past its share makes room with
 * another. */
static void test_a_session_read_through_a_resumed_stream_is_kept(void **state) {
  world *w = *state;
  char resumed[64], sid[64];
  open_session(w, "{}", resumed);
  char *got = overflow_call(w, 0, resumed, 122880);
  int fd = stalled_resumption(w, resumed, stream_no(got));
  free(got);
  for (int i = 0; i < TG_HTTP_MAX_SESSIONS_PER_PRINCIPAL; i++) open_session(w, "{}", sid);
  close(fd);
  free(request(w, "POST", resumed, NULL, PING, 200));
}

/* The headers of a stateless tools/call of test_note_overflow, and its body with a text of
 * bytes (which the answer carries twice). */
#define STATELESS_OVERFLOW                                                   \
  "Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n" \
  "Mcp-Method: tools/call\r\nMcp-Name: test_note_overflow\r\n"
#define STATELESS_OVERFLOW_BODY(bytes) \
  STATELESS_CALL("1", "test_note_overflow", "{\"bytes\":" bytes "}")
/* Events are taken only through a wildcard: the call is answered in JSON. */
#define JSON_ONLY "Accept: application/json, */*;q=0.1\r\n" STATELESS_OVERFLOW
#define TEXT_SEEN "xxxxxxxxxxxxxxxx"

/* What all callers have not been delivered is bounded too, apart from each caller's half:
 * three callers whose clients read nothing leave no room for a reply within a caller's own
 * half, until their clients go away. Their output is an SSE answer gathered before it went
 * out, the events of an SSE answer ended for polling (as a rule: the call ends its answer as
 * the connection wakes up to its event, and may be the second to get the stream), and a
 * JSON answer. */
static void test_output_undelivered_in_all_is_bounded(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 6 * 1024 * 1024; /* 3 MB a caller */
  restart(w);
  /* About 1.8 MB each (a text of 900 KB twice, or 1.8 MB once), stalled as soon as it starts. */
  static const char big[] = STATELESS_OVERFLOW_BODY("943718");
  char headers[256], sid[64];
  int fds[3];
  fds[0] = stalled_request(w, "POST", "Accept: application/json, text/event-stream\r\n"
                           STATELESS_OVERFLOW, big, TEXT_SEEN);
  w->token = w->tokens[1];
  open_session(w, "{}", sid);
  snprintf(headers, sizeof headers,
           "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
           "Mcp-Session-Id: %s\r\n", sid);
  fds[1] = stalled_request(w, "POST", headers,
                           CALL_WITH("8", "test_note_close", "{\"note\":1887436}"), TEXT_SEEN);
  w->token = w->tokens[2];
  fds[2] = stalled_request(w, "POST", JSON_ONLY, big, TEXT_SEEN);
  open_session(w, "{}", sid);
  /* About 1.2 MB: within bot3's half, past what all may hold, as SSE or as JSON. */
  char *got = overflow_call(w, 2, sid, 600000);
  assert_non_null(strstr(got, REFUSED));
  free(got);
  w->token = w->tokens[2];
  close(stalled_request(w, "POST", JSON_ONLY, STATELESS_OVERFLOW_BODY("600000"), REFUSED));
  /* The stateless callers' clients gone, their output goes (bot2's session keeps its own for
   * a resumption), and a reply of 1.4 MB fits: within bot3's half only once its stalled
   * JSON answer went. */
  for (int i = 0; i < 3; i++) close(fds[i]);
  for (int i = 0;; i++) {
    got = overflow_call(w, 2, sid, 700000);
    bool refused = strstr(got, REFUSED);
    free(got);
    if (!refused) break;
    if (i == HANG_GUARD_S * 10) fail_msg("the output of callers gone was never let go");
    usleep(100000);
  }
}

/* A caller's JSON answers its clients have not read count against its half of the bound on
 * undelivered output, and only against its own: the same answer then goes to another caller. */
static void test_undelivered_json_answers_count_for_their_caller(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 4 * 1024 * 1024; /* 2 MB a caller */
  restart(w);
  /* About 1.8 MB, stalled; then 1.2 MB more for the same caller is past its half. */
  int fd = stalled_request(w, "POST", JSON_ONLY, STATELESS_OVERFLOW_BODY("943718"), TEXT_SEEN);
  static const char more[] = STATELESS_OVERFLOW_BODY("600000");
  close(stalled_request(w, "POST", JSON_ONLY, more, REFUSED));
  w->token = w->tokens[1];
  close(stalled_request(w, "POST", JSON_ONLY, more, TEXT_SEEN));
  close(fd);
}

/* Asks for an answer of 6.3 MB (more than the socket's buffers take; with an idle timeout of
 * 2 s, due within 4 s and 6 s more) with headers, as the only request its caller may have
 * answered at once, and reads it at about 80 KB a second (it would take over a minute; the
 * server is never idle, even when a request of the test's holds up the reading): the
 * server must cut the connection off before the client has it all, which gives back its
 * caller's place. The log must say so, once. */
static void slow_reader_gives_back_its_place(world *w, const char *headers) {
  fixture_log log = fixture_log_begin(w->f);
  int fd = stalled_request(w, "POST", headers, STATELESS_OVERFLOW_BODY("3145728"), TEXT_SEEN);
  int64_t started = tg_monotonic_ms(), asked = 0;
  size_t taken = 0;
  bool ended = false;
  for (long status = 0; status != 200;) {
    char chunk[2048];
    ssize_t n = ended ? 0 : recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) taken += (size_t)n;
    ended = ended || n == 0;
    if (tg_monotonic_ms() - asked >= 500) {
      exchange *ex = start(w, "POST", NULL, MODERN_HEADERS("server/discover"),
                           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\","
                           "\"params\":{" MODERN_META "}}");
      await(ex, NULL);
      if (!asked) assert_int_equal(ex->status, 429); /* the slow reader holds the place */
      status = ex->status;
      finish(ex);
      asked = tg_monotonic_ms();
    }
    if (asked - started > HANG_GUARD_S * 1000) fail_msg("a slow reader kept its caller's place");
    usleep(20 * 1000);
  }
  close(fd);
  if (taken >= 2 * 3145728) fail_msg("the slow reader took the whole answer");
  char *text = fixture_log_end(log);
  assert_int_equal(fixture_occurrences(text, "http: closed 1 connection(s)"), 1);
  free(text);
}

/* A client taking a JSON answer slower than the server allows (reading a little now and then,
 * so never idle) has its connection shut down before it has the whole answer. The log says
 * so once a minute at most: a slow sender cut off just after is not logged. */
static void test_a_slow_reader_is_cut_off(void **state) {
  world *w = *state;
  w->cfg.idle_timeout_s = 2;
  w->cfg.max_requests_per_principal = 1;
  unsigned port = restart(w);
  slow_reader_gives_back_its_place(w, JSON_ONLY);
  fixture_log log = fixture_log_begin(w->f);
  trickle_until_closed(fixture_connect(port));
  char *text = fixture_log_end(log);
  assert_null(strstr(text, "http: closed "));
  free(text);
}

/* The same for the rest of an SSE answer whose call ended. */
static void test_a_slow_reader_of_an_ended_stream_is_cut_off(void **state) {
  world *w = *state;
  w->cfg.idle_timeout_s = 2;
  w->cfg.max_requests_per_principal = 1;
  restart(w);
  slow_reader_gives_back_its_place(w, "Accept: application/json, text/event-stream\r\n" STATELESS_OVERFLOW);
}

static void *stop_server(void *h) {
  tg_http_stop(h);
  return NULL;
}

/* A stopping server answers the requests it is answering (a call that may have committed),
 * before it closes their connections; a new request on an open connection gets a 503, and a
 * new connection is refused. */
static void test_a_stopping_server_answers_its_calls(void **state) {
  world *w = *state;
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  int fd = fixture_connect(port);
  char answer[ANSWER_MAX];
  discover_on(w, fd, port, answer);
  assert_int_equal(strncmp(answer, "HTTP/1.1 200", 12), 0);
  exchange *call = start(w, "POST", NULL, STATELESS_ROUTE("test_wait_go"),
                         STATELESS_CALL("7", "test_wait_go", "{}"));
  kit_wait(&kit_started);
  pthread_t stopper;
  assert_int_equal(pthread_create(&stopper, NULL, stop_server, w->h), 0);
  w->h = NULL;
  /* Answered as before until the stop begins. */
  for (int i = 0; strncmp(answer, "HTTP/1.1 503", 12) != 0; i++) {
    if (i == HANG_GUARD_S * 100) fail_msg("a stopping server went on taking requests");
    assert_int_equal(strncmp(answer, "HTTP/1.1 200", 12), 0);
    usleep(10 * 1000);
    discover_on(w, fd, port, answer);
  }
  assert_non_null(strstr(answer, "The server is stopping"));
  close(fd);
  fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), -1);
  assert_int_equal(errno, ECONNREFUSED);
  close(fd);
  kit_set(&kit_go);
  await(call, NULL);
  assert_int_equal(call->status, 200);
  assert_non_null(strstr(call->got, "\"went\":true"));
  finish(call);
  pthread_join(stopper, NULL);
}

/* Only a tool whose result is the MCP result as it is asks for input: another's value that
 * reads as an InputRequiredResult is its structured content, served as any. */
static void test_a_value_like_an_input_request_is_content(void **state) {
  world *w = *state;
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_says_input_required"),
                      STATELESS_CALL("7", "test_says_input_required", "{}"), 200);
  assert_non_null(strstr(got, "\"structuredContent\":{\"resultType\":\"input_required\"}"));
  assert_null(strstr(got, "\"error\""));
  free(got);
}

/* Past the stop's grace, a call still running is cancelled, here one answered in JSON on its
 * own connection's thread: it fails before it commits, and the stop ends. */
static void test_a_stop_cancels_the_calls_past_its_grace(void **state) {
  world *w = *state;
  w->cfg.stop_grace_ms = 500;
  unsigned port = restart(w);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval guard = {.tv_sec = HANG_GUARD_S};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  char *lines = NULL;
  assert_true(asprintf(&lines, "Authorization: Bearer %s\r\nAccept: application/json, */*;q=0.1\r\n"
                               "Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n"
                               "Mcp-Method: tools/call\r\nMcp-Name: test_wait_cancel\r\n",
                       w->token) > 0);
  fixture_http_send(fd, port, "POST", lines, STATELESS_CALL("7", "test_wait_cancel", "{}"));
  free(lines);
  kit_wait(&kit_started);
  tg_http_stop(w->h);
  w->h = NULL;
  assert_true(kit_cancelled);
  close(fd);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs WHERE step ="
                                       " 'tool:test.wait.cancel' AND level = 'INFO'",
                                       NULL),
                   0);
}

/* The audit rows of test.wait.cancel calls that succeeded. */
static long waits_audited_ok(world *w) {
  return fixture_count_where(w->f,
                             "SELECT COUNT(*) AS n FROM agent_run_logs WHERE step ="
                             " 'tool:test.wait.cancel' AND level = 'INFO'",
                             NULL);
}

/* A session's call whose client left its stream after its first event (to resume it later)
 * runs on with no connection: past the stop's grace it is cancelled all the same, and the
 * stop ends. */
static void test_a_stop_cancels_a_call_its_client_left(void **state) {
  world *w = *state;
  w->cfg.stop_grace_ms = 500;
  restart(w);
  char sid[64];
  open_session(w, "{}", sid);
  free(request(w, "POST", sid, NULL,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\","
               "\"params\":{\"level\":\"info\"}}",
               200));
  exchange *call = start(w, "POST", sid, NULL, CALL_WITH("5", "test_wait_cancel", "{\"note\":true}"));
  await(call, "\"data\":\"waiting\"");
  finish(call); /* the client leaves the stream; the call goes on */
  await_load(w, false, 0); /* no request left to answer: the call alone */
  tg_http_stop(w->h);
  w->h = NULL;
  assert_true(kit_cancelled);
  assert_int_equal(waits_audited_ok(w), 0);
}

/* Past the stop's grace, a call that waited for a pool thread is not run: its request is
 * answered that the server is stopping. */
static void test_a_stop_answers_a_queued_call(void **state) {
  world *w = *state;
  w->cfg.stop_grace_ms = 500;
  w->cfg.threads = 2; /* one caller may hold all the threads but one: its second call waits */
  restart(w);
  static const char headers[] = STATELESS_ROUTE("test_wait_cancel");
  static const char body[] = STATELESS_CALL("7", "test_wait_cancel", "{}");
  exchange *running = start(w, "POST", NULL, headers, body);
  kit_wait(&kit_started);
  exchange *queued = start(w, "POST", NULL, headers, body);
  await_load(w, true, 1);
  tg_http_stop(w->h);
  w->h = NULL;
  await(queued, NULL);
  assert_int_equal(queued->status, 200); /* not the 503 of a request come after the stop */
  assert_non_null(strstr(queued->got, "The server is stopping"));
  finish(queued);
  await(running, NULL);
  finish(running);
  assert_int_equal(waits_audited_ok(w), 0);
}

/* The ended tasks the database keeps in status (as tasks/get shows them). */
static long tasks_ended(world *w, const char *status) {
  return fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_tasks WHERE "
                                   "json_extract(task, '$.status') = $1",
                             json_pack("[s]", status));
}

/* A task at work has the stop's grace to end, as a request has: it completes. One still at
 * work past the grace is cancelled, and says the stop cut it. */
static void test_a_stop_gives_tasks_at_work_its_grace(void **state) {
  world *w = *state; /* the server's own grace, 10 s: a 1 s task ends well within it */
  static const char headers[] = STATELESS_ROUTE("slow_compute");
  char *got = request(w, "POST", NULL, headers, TASK_CALL("1", "{\"seconds\":1}"), 200);
  assert_non_null(strstr(got, "\"resultType\":\"task\""));
  free(got);
  got = request(w, "POST", NULL, headers, TASK_CALL("2", "{\"seconds\":600}"), 200);
  assert_non_null(strstr(got, "\"resultType\":\"task\""));
  free(got);
  tg_http_stop(w->h);
  w->h = NULL;
  assert_int_equal(tasks_ended(w, "completed"), 1);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_tasks WHERE "
                                             "json_extract(task, '$.statusMessage') = $1",
                                       json_pack("[s]", "The server stopped before the task ended")),
                   1);
}

/* A stateless call of a task tool on the pool whose client left before its answer (here,
 * before it was even served: a half-close) leaves no task running: the call is cancelled,
 * or the task it became stops, since its client never learnt the task's id. Else nothing
 * could read or cancel it, and it would hold one of its principal's places for tasks as
 * long as it ran. */
static void test_a_task_call_whose_client_left_leaves_no_task(void **state) {
  world *w = *state;
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  int fd = fixture_connect(port);
  char *lines = modern_lines(w, "tools/call", "slow_compute");
  fixture_http_send(fd, port, "POST", lines, TASK_CALL("8", "{\"seconds\":600}"));
  free(lines);
  assert_int_equal(shutdown(fd, SHUT_WR), 0);
  /* Served, and cancelled: a call its client left gets no message, but an event stream that
   * ends without one, as any request cancelled (a request is never answered 202). */
  char answer[ANSWER_MAX];
  read_answer(fd, answer, sizeof answer);
  if (strncmp(answer, "HTTP/1.1 200 ", 13) != 0 || !strcasestr(answer, "text/event-stream") ||
      strstr(answer, "data:"))
    fail_msg("expected an event stream with no event, got: %s", answer);
  for (int i = 0; fixture_count(w->f, "mcp_running_tasks") != 0; i++) {
    if (i == HANG_GUARD_S * 100) fail_msg("a task its client was never told of still runs");
    usleep(10 * 1000);
  }
  close(fd);
}

/* The DetailedTask of task id (a new reference), read with the token w acts as. */
static json_t *task_read(world *w, const char *id) {
  char body[512], headers[256];
  snprintf(body, sizeof body,
           "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{\"taskId\":"
           "\"%s\",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
           "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"
           "\"io.modelcontextprotocol/tasks\":{}}}}}}",
           id);
  snprintf(headers, sizeof headers, MODERN_HEADERS("tasks/get") "\nMcp-Name: %s", id);
  char *got = request(w, "POST", NULL, headers, body, 200);
  json_t *answer = json_loads(got, 0, NULL);
  free(got);
  json_t *task = json_incref(json_object_get(answer, "result"));
  json_decref(answer);
  assert_non_null(tg_json_str(task, "status"));
  return task;
}

/* Starts slow_compute as a task (body: a TASK_CALL) with the token w acts as: its id in id. */
static void start_slow_task(world *w, const char *body, char id[64]) {
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("slow_compute"), body, 200);
  json_t *answer = json_loads(got, 0, NULL);
  free(got);
  const char *task_id = tg_json_str(json_object_get(answer, "result"), "taskId");
  assert_non_null(task_id);
  snprintf(id, 64, "%s", task_id);
  json_decref(answer);
}

/* The DetailedTask of task id (a new reference), once it no longer works. */
static json_t *task_read_ended(world *w, const char *id) {
  for (int waited = 0; waited < HANG_GUARD_S * 10; waited++) {
    json_t *task = task_read(w, id);
    if (strcmp(tg_json_str(task, "status"), "working") != 0) return task;
    json_decref(task);
    usleep(100 * 1000);
  }
  fail_msg("task %s still works", id);
  return NULL;
}

/* A listen stream that names a task hears of it over HTTP as over stdio: notifications/tasks
 * with the task's status, to its end (the official suite's check of this is pending). */
static void test_a_listen_stream_hears_how_its_task_ended(void **state) {
  world *w = *state;
  char id[64];
  start_slow_task(w, TASK_CALL("1", "{\"seconds\":1}"), id);
  char listen_body[640];
  snprintf(listen_body, sizeof listen_body,
           "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"subscriptions/listen\",\"params\":{"
           "\"notifications\":{\"taskIds\":[\"%s\"]},\"_meta\":{"
           "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
           "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"
           "\"io.modelcontextprotocol/tasks\":{}}}}}}",
           id);
  exchange *listen = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), listen_body);
  await(listen, "notifications/subscriptions/acknowledged");
  await(listen, "\"status\":\"completed\"");
  const char *told = strstr(listen->got, "\"method\":\"notifications/tasks\"");
  assert_non_null(told);
  assert_true(told < strstr(listen->got, "\"status\":\"completed\""));
  finish(listen);
}

/* An ended task leaves memory once its time to live is over, though no other task starts
 * to make room: the sweeper drops it (the database tells how it ended). */
static void test_the_sweeper_drops_expired_tasks(void **state) {
  world *w = *state;
  char id[64];
  start_slow_task(w, TASK_CALL("1", "{\"seconds\":1}"), id);
  json_t *task = task_read_ended(w, id);
  assert_string_equal(tg_json_str(task, "status"), "completed");
  json_decref(task);
  fixture_await_expired_task_dropped();
}

/* A revoked token ends the tasks it started (cancelled, as tasks/cancel would, which the
 * agent's other tokens still read); those another token of the agent started run on. */
static void test_a_revoked_token_ends_its_tasks(void **state) {
  world *w = *state;
  char ids[2][64];
  for (int i = 0; i < 2; i++) {
    w->token = w->tokens[i ? 3 : 0];
    start_slow_task(w, TASK_CALL("1", "{\"seconds\":600}"), ids[i]);
  }
  revoke_token(w, w->tokens[0]);
  w->token = w->tokens[3];
  json_t *task = task_read_ended(w, ids[0]);
  assert_string_equal(tg_json_str(task, "status"), "cancelled");
  assert_string_equal(tg_json_str(task, "statusMessage"),
                      "The token that started the task was revoked");
  json_decref(task);
  task = task_read(w, ids[1]);
  assert_string_equal(tg_json_str(task, "status"), "working");
  json_decref(task);
}

/* A session on a server started again with replay_keep_ms of keep, and the number of a
 * stream of its that delivered a call's answer. */
static unsigned kept_answer(world *w, long long keep, char sid[64]) {
  w->cfg.replay_keep_ms = keep;
  restart(w);
  open_session(w, "{}", sid);
  char *got = overflow_call(w, 0, sid, 100);
  unsigned no = stream_no(got);
  free(got);
  return no;
}

/* Delivered output is kept for resumption only so long after its stream last delivered any
 * (in this test 5 s, and the server looks every 2 s): then it goes, whatever the bounds. */
static void test_kept_output_goes_after_a_while(void **state) {
  world *w = *state;
  char sid[64];
  /* Within its time, the server's looks leave it. */
  unsigned no = kept_answer(w, 60000, sid);
  sleep(3);
  assert_true(still_kept(w, sid, no));
  no = kept_answer(w, 5000, sid);
  assert_true(still_kept(w, sid, no)); /* at once */
  /* Each look sends it again; 8 s later the server has looked at least once since the
   * stream's 5 s went by. */
  for (int i = 0;; i++) {
    sleep(8);
    if (!still_kept(w, sid, no)) break;
    if (i == HANG_GUARD_S) fail_msg("delivered output was kept past its time");
  }
}

/* Bytes this process (the server runs in it) has allocated: from the sanitizer's allocator
 * when one replaces malloc (mallinfo2 then says 0), from glibc's otherwise. */
static size_t in_use(void) {
#ifdef REPLACED_MALLOC
  return __sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

/* A stream gives back the room of the events it dropped: a session keeping the stream of an
 * 8 MB event that went out, then a short result, holds room for about the result alone. */
static void test_dropped_output_gives_its_room_back(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  size_t before = in_use();
  free(request(w, "POST", sid, NULL,
               CALL_WITH("5", "test_note_overflow", "{\"note\":8388608,\"bytes\":16}"), 200));
  /* The server's thread may let go of what it sent a little after the client read it all:
   * waited for, within a hang guard. */
  size_t after = in_use();
  for (int i = 0; after > before + 4 * 1024 * 1024; i++, after = in_use()) {
    if (i == HANG_GUARD_S * 100)
      fail_msg("%zu bytes more allocated than before the call", after - before);
    usleep(10000);
  }
}

/* A stateless call of test_simple_text, on a connection of its own that closes after it. */
static void simple_call_alone(world *w) {
  char *got = request(w, "POST", NULL, STATELESS_ROUTE("test_simple_text"),
                      STATELESS_CALL("4", "test_simple_text", "{}"), 200);
  assert_non_null(strstr(got, "\"result\""));
  assert_null(strstr(got, "\"isError\":true"));
  free(got);
}

/* Waits until the server keeps at least kept spare database connections and has closed at
 * least closed as it rested. */
static void await_spare_dbs(world *w, unsigned kept, unsigned closed) {
  for (int i = 0;; i++) {
    unsigned k = 0, c = 0;
    tg_http_spare_dbs(w->h, &k, &c);
    if (k >= kept && c >= closed) return;
    if (i == HANG_GUARD_S * 100)
      fail_msg("%u spare database connections kept, %u closed resting", k, c);
    usleep(10 * 1000);
  }
}

/* The database connection of a closed client connection is kept for the next one while
 * requests come, and closed once none came for rest_after_ms; the next connection opens its
 * own again and is served as the first was. */
static void test_a_quiet_server_closes_its_spare_databases(void **state) {
  world *w = *state;
  w->cfg.rest_after_ms = 3600LL * 1000;
  restart(w);
  simple_call_alone(w);
  await_spare_dbs(w, 1, 0);
  unsigned kept = 0, closed = 0;
  tg_http_spare_dbs(w->h, &kept, &closed);
  assert_int_equal(closed, 0);

  w->cfg.rest_after_ms = 100;
  restart(w);
  simple_call_alone(w);
  await_spare_dbs(w, 0, 1);
  simple_call_alone(w);
  await_spare_dbs(w, 0, 2);
}

/* A stream's priming event goes out whatever the bounds: it is a few bytes, and a client
 * could not resume the stream without it. So do small JSON answers, one a connection. */
static void test_priming_passes_the_bounds(void **state) {
  world *w = *state;
  w->cfg.max_held_bytes = 40; /* 20 bytes a caller, less than one priming event */
  restart(w);
  char sid[64];
  exchange *get = open_listening_session(w, sid); /* its initialize answered in full */
  /* Not kept once sent (there is no room), and still the answer alone. */
  primed_only(w, sid);
  /* A small JSON answer goes out too. */
  char *pong = request(w, "POST", sid, NULL, PING, 200);
  assert_non_null(strstr(pong, "\"result\":{}"));
  free(pong);
  finish(get);
}

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* The descriptors this process holds on the test's database (its file, WAL and index). */
static int database_fds(world *w) {
  char db_path[PATH_MAX];
  snprintf(db_path, sizeof db_path, "%s/toolgate.db", w->f->dir);
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) {
    char link[300], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(link, target, sizeof target - 1);
    n += len > 0 && strncmp(target, db_path, strlen(db_path)) == 0;
  }
  closedir(d);
  return n;
}

static atomic_bool swept;
static void note_sweep(void) { atomic_store(&swept, true); }

static size_t discard(char *data, size_t size, size_t n, void *arg) {
  (void)data;
  (void)arg;
  return size * n;
}

/* A client connection opens the database at its first request that needs it, on its own
 * thread, not as libmicrohttpd's accepting thread takes the connection (where a busy database
 * would hold up every new client): a probe of /healthz opens none. */
static void test_healthz_opens_no_database(void **state) {
  world *w = *state;
  restart(w); /* no spare database connection left by an earlier client */
  atomic_store(&swept, false);
  tg_http_test_looking = note_sweep; /* the sweeper has its connection once it looks */
  for (int i = 0; !atomic_load(&swept); i++) {
    if (i == HANG_GUARD_S * 100) fail_msg("the sweeper never looked");
    usleep(10 * 1000);
  }
  tg_http_test_looking = NULL;
  int before = database_fds(w);
  char url[80];
  snprintf(url, sizeof url, "%.*shealthz", (int)(strrchr(w->url, '/') - w->url + 1), w->url);
  CURL *probe = curl_easy_init();
  curl_easy_setopt(probe, CURLOPT_URL, url);
  curl_easy_setopt(probe, CURLOPT_WRITEFUNCTION, discard);
  assert_int_equal(curl_easy_perform(probe), CURLE_OK);
  long status = 0;
  curl_easy_getinfo(probe, CURLINFO_RESPONSE_CODE, &status);
  assert_int_equal(status, 200);
  assert_int_equal(database_fds(w), before);
  curl_easy_cleanup(probe);
  /* An MCP request does open one. */
  free(request(w, "POST", NULL, MODERN_HEADERS("server/discover"),
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{"
               MODERN_META "}}", 200));
  assert_true(database_fds(w) > before);
}

/* [::] is IPv6 alone, so 0.0.0.0 on the same port is a server apart; a busy port is refused
 * and leaves no descriptor open; a listen address that is none is refused. */
static void test_listen_addresses(void **state) {
  world *w = *state;
  tg_http_config v6 = w->cfg, v4 = w->cfg;
  v6.listen = "[::]:0";
  tg_http *h6 = NULL, *h4 = NULL, *busy = NULL;
  unsigned port = 0, port4 = 0;
  assert_int_equal(tg_http_start(&v6, &h6, &port), 0);
  char listen[32];
  snprintf(listen, sizeof listen, "0.0.0.0:%u", port);
  v4.listen = listen;
  assert_int_equal(tg_http_start(&v4, &h4, &port4), 0);
  assert_int_equal(port4, port);
  int before = open_fds();
  assert_int_equal(tg_http_start(&v4, &busy, &port4), TG_E_IO);
  assert_int_equal(open_fds(), before);
  tg_http_stop(h4);
  tg_http_stop(h6);
  /* No port past 65535 wraps around to another. */
  static const char *const bad[] = {"127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:-1",
                                    "127.0.0.1:", "127.0.0.1:80x", "127.0.0.1:+80", "7878"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    v4.listen = bad[i];
    assert_int_equal(tg_http_start(&v4, &busy, &port4), TG_E_INVAL);
  }
}

/* ---- 2026-07-28 ---- */

static void test_listen_stream_gets_ack_then_changes(void **state) {
  world *w = *state;
  exchange *listen = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(1));
  await(listen, "notifications/subscriptions/acknowledged");
  free(request(w, "POST", NULL, STATELESS_ROUTE("test_trigger_tool_change"),
               STATELESS_CALL("2", "test_trigger_tool_change", "{}"), 200));
  await(listen, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":"
                "{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":1}}}");
  assert_true(strstr(listen->got, "acknowledged") < strstr(listen->got, "list_changed"));
  finish(listen);
}

/* Revokes one token, as another process would: in the database alone. Negative when the
 * database would not; it fails no test, since the server's threads call it too
 * (end_found_session). */
static int try_revoke_token(world *w, const char *token) {
  char hash[TG_TOKEN_HASH_LEN + 1];
  int r = tg_sha256_hex(token, strlen(token), hash);
  if (r == 0)
    r = tg_db_exec(w->f->db, "UPDATE api_tokens SET revoked_at = 'now' WHERE token_hash = $1",
                   json_pack("[s]", hash), NULL);
  return r;
}

/* As try_revoke_token, on the test's thread: the test fails when the database would not. */
static void revoke_token(world *w, const char *token) {
  assert_int_equal(try_revoke_token(w, token), 0);
}

/* Revokes every token of principal, as revoke_token does. */
static void revoke_tokens_of(world *w, const char *principal) {
  assert_int_equal(tg_db_exec(w->f->db,
                              "UPDATE api_tokens SET revoked_at = 'now' WHERE principal_id = $1",
                              json_pack("[s]", principal), NULL),
                   0);
}

/* A revoked token ends what it opened, though no request comes: a session's GET stream and
 * calls, a listen stream, which gets its result first, and its stateless calls, on the pool
 * or on the thread that read them, cancelled (a call's client is answered 401, as its answer
 * had not begun). Another caller's session stands. */
static void test_a_revoked_token_ends_its_streams(void **state) {
  world *w = *state;
  char sid[64], other_sid[64];
  exchange *get = open_listening_session(w, sid);
  exchange *listen = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(1));
  await(listen, "notifications/subscriptions/acknowledged");
  exchange *call = start_waiting_call(w);
  /* JSON preferred: the call runs on the thread that read it, though it may wait on its
   * client. */
  exchange *here = start(w, "POST", NULL,
                         "Accept: application/json, text/event-stream;q=0.1\n"
                         STATELESS_ROUTE("test_wait_cancel"),
                         STATELESS_CALL("4", "test_wait_cancel", "{}"));
  exchange *in_session = start(w, "POST", sid,
                              "Accept: application/json, text/event-stream;q=0.1",
                              CALL_WITH("5", "test_wait_cancel", "{}"));
  kit_wait_for(NULL, 3);
  w->token = w->tokens[1];
  exchange *other = open_listening_session(w, other_sid);
  revoke_tokens_of(w, w->agent);
  await(get, NULL);
  await(listen, NULL);
  assert_non_null(strstr(listen->got, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":"
                                      "\"complete\""));
  exchange *calls[] = {call, here, in_session};
  for (size_t i = 0; i < 3; i++) { /* told of the token, as a request bearing it now is */
    await(calls[i], NULL);
    assert_int_equal(calls[i]->status, 401);
    assert_null(strstr(calls[i]->got, "result"));
    finish(calls[i]);
  }
  free(request(w, "POST", other_sid, NULL, PING, 200));
  pthread_mutex_lock(&other->lock);
  bool ended = other->ended;
  pthread_mutex_unlock(&other->lock);
  assert_false(ended);
  finish(other);
  finish(listen);
  finish(get);
}

/* A call whose answer had begun (an event stream, primed on a 2025-11-25 session) when its
 * token was revoked ends with an error naming it and saying so: its client would wait
 * otherwise for an answer that cannot come. */
static void test_a_revoked_call_whose_answer_began_is_told(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  exchange *call = start(w, "POST", sid, NULL, CALL_WITH("\"c6\"", "test_wait_cancel", "{}"));
  await(call, "data: \n\n");
  kit_wait(&kit_started);
  revoke_tokens_of(w, w->agent);
  await(call, NULL);
  assert_int_equal(call->status, 200);
  assert_non_null(strstr(call->got, "{\"jsonrpc\":\"2.0\",\"id\":\"c6\",\"error\":{\"code\":-32600,"));
  assert_non_null(strstr(call->got, "was revoked"));
  finish(call);
}

/* A call waiting for its client's answer when its token is revoked withdraws its question
 * before its stream tells of the token, so that the client stops showing it. */
static void test_a_revoked_call_withdraws_its_question(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{\"sampling\":{}}", sid);
  exchange *call = asking_call(w, sid);
  revoke_tokens_of(w, w->agent);
  await(call, NULL);
  const char *withdrawn = strstr(call->got, "\"method\":\"notifications/cancelled\"");
  assert_non_null(withdrawn);
  assert_non_null(strstr(withdrawn, "The call no longer waits for it"));
  assert_non_null(strstr(withdrawn, "was revoked"));
  finish(call);
}

/* A session is the token's that opened it: another token of the same agent cannot use it
 * (404, as for an unknown session), so that revoking a token ends every stream on its
 * sessions. */
static void test_a_session_belongs_to_its_token(void **state) {
  world *w = *state;
  char sid[64];
  open_session(w, "{}", sid);
  w->token = w->tokens[3];
  char *refused = request(w, "POST", sid, NULL, PING, 404);
  assert_non_null(strstr(refused, "Session not found"));
  free(refused);
  free(request(w, "GET", sid, NULL, NULL, 404));
  free(request(w, "DELETE", sid, NULL, NULL, 404));
  w->token = w->tokens[0];
  free(request(w, "POST", sid, NULL, PING, 200));
}

/* A request's token is checked again once its body is whole when that took long: a token
 * revoked between its headers and the end of its body is refused, and nothing runs. */
static void test_a_token_revoked_while_its_body_comes_is_refused(void **state) {
  world *w = *state;
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  static const char body[] = STATELESS_CALL("7", "test_wait_cancel", "{}");
  int fd = fixture_connect(port);
  char *lines = modern_lines(w, "tools/call", "test_wait_cancel"), head[1024];
  int n = snprintf(head, sizeof head,
                   "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%sContent-Length: %zu\r\n\r\n%.10s",
                   port, lines, strlen(body), body);
  free(lines);
  assert_int_equal(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
  await_load(w, false, 1);
  usleep(300 * 1000); /* its headers are read and its token checked, well before the revoke */
  long audited = fixture_count(w->f, "agent_run_logs");
  revoke_tokens_of(w, w->agent);
  usleep(1500 * 1000); /* past the time after which a token is checked again */
  assert_int_equal(send(fd, body + 10, strlen(body) - 10, MSG_NOSIGNAL),
                   (ssize_t)(strlen(body) - 10));
  char answer[4096];
  read_answer(fd, answer, sizeof answer);
  close(fd);
  if (strncmp(answer, "HTTP/1.1 401", 12) != 0) fail_msg("expected 401, got: %s", answer);
  assert_false(kit_started);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), audited);
}

/* A connection to port on which w->token's holder sends a call of tool, with
 * request id id and pad bytes in its _meta, a string, or with tables an array of empty
 * objects ("{}," each): whole, or all but its last 100 bytes; with accept, not NULL, as its
 * Accept header. */
static int padded_call(world *w, unsigned port, const char *tool, const char *id, size_t pad,
                       bool tables, bool whole, const char *accept) {
  char *body = NULL,
       *lines = accepting_lines(w, "tools/call", tool, accept ? accept : USUAL_ACCEPT);
  char *padding = malloc(pad + 4);
  size_t len = 1;
  if (tables) {
    padding[0] = '[';
    for (; len + 3 < pad; len += 3) memcpy(padding + len, "{},", 3);
    memcpy(padding + len, "{}]", 4);
  } else {
    padding[0] = '"';
    memset(padding + len, 'x', pad);
    memcpy(padding + len + pad, "\"", 2);
  }
  assert_true(asprintf(&body,
                       "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"%s\",\"arguments\":{},\"_meta\":{"
                       "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                       "\"io.modelcontextprotocol/clientCapabilities\":{},\"pad\":%s}}}",
                       id, tool, padding) > 0);
  free(padding);
  int fd = fixture_connect(port);
  char head[1024];
  int n = snprintf(head, sizeof head, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n%s"
                   "Content-Length: %zu\r\n\r\n", port, lines, strlen(body));
  free(lines);
  size_t sent = strlen(body) - (whole ? 0 : 100);
  assert_int_equal(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
  assert_int_equal(send(fd, body, sent, MSG_NOSIGNAL), (ssize_t)sent);
  free(body);
  return fd;
}

/* Sends padded_call's call, which must be refused with status (429 or 503) past the bound
 * limit names, naming its request. */
static void expect_bodies_refused(world *w, unsigned port, const char *id, size_t pad,
                                  bool tables, const char *status, const char *limit) {
  char answer[ANSWER_MAX], named[64];
  int fd = padded_call(w, port, "test_simple_text", id, pad, tables, true, NULL);
  read_answer(fd, answer, sizeof answer);
  close(fd);
  if (strncmp(answer, "HTTP/1.1 ", 9) != 0 || strncmp(answer + 9, status, 3) != 0)
    fail_msg("expected %s, got: %s", status, answer);
  snprintf(named, sizeof named, "\"id\":\"%s\"", id);
  assert_non_null(strstr(answer, named));
  snprintf(named, sizeof named, "\"limit\":\"%s\"", limit);
  assert_non_null(strstr(answer, named));
}

/* Request bodies held at once are bounded: for all callers (503) and for one (429, past
 * half the bound). A body past them is read and dropped, refused naming its request, and
 * nothing runs; once the bodies held are answered, the same request is served. */
static void test_request_bodies_held_at_once_are_bounded(void **state) {
  world *w = *state;
  w->cfg.max_taking_bytes = 64 * 1024;
  unsigned port = restart(w);
  /* Two callers each hold 28 KB of a body not whole yet: 56 KB of the 64. */
  int held[2];
  for (int i = 0; i < 2; i++) {
    w->token = w->tokens[i];
    held[i] = padded_call(w, port, "test_simple_text", "held", 28 * 1024, false, false, NULL);
  }
  usleep(300 * 1000); /* both bodies read so far, well before the next */
  long audited = fixture_count(w->f, "agent_run_logs");
  w->token = w->tokens[2]; /* 12 KB more of a third caller's: past the server's bound */
  expect_bodies_refused(w, port, "past-all", 12 * 1024, false, "503", "bodyBytes");
  w->token = w->tokens[0]; /* 8 KB more of the first's: past its half (32 KB) */
  expect_bodies_refused(w, port, "past-own", 8 * 1024, false, "429", "callerBodyBytes");
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), audited);
  close(held[0]);
  close(held[1]);
  /* Their bodies gone with their connections, the third caller's is served. */
  w->token = w->tokens[2];
  char answer[ANSWER_MAX];
  for (int tries = 0;; tries++) {
    int fd = padded_call(w, port, "test_simple_text", "served", 12 * 1024, false, true, NULL);
    read_answer(fd, answer, sizeof answer);
    close(fd);
    if (strncmp(answer, "HTTP/1.1 200", 12) == 0) break;
    if (tries > HANG_GUARD_S * 10) fail_msg("the bodies held were never let go: %s", answer);
    usleep(100 * 1000);
  }
  assert_null(strstr(answer, "isError"));
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), audited + 1);
}

/* A body is counted as it is held decoded: 3 KB of empty objects take a table each, past
 * one caller's half of the bound (32 KB of 64), so the call is refused naming its request,
 * and nothing runs; as many bytes of a string are served. */
static void test_request_bodies_count_as_decoded(void **state) {
  world *w = *state;
  w->cfg.max_taking_bytes = 64 * 1024;
  unsigned port = restart(w);
  long audited = fixture_count(w->f, "agent_run_logs");
  expect_bodies_refused(w, port, "tables", 3 * 1024, true, "429", "callerBodyBytes");
  /* One whose Accept would be refused too is refused for it first, as it would be within
   * the bounds (the request is wrong whatever the server holds). */
  char answer[ANSWER_MAX];
  int fd = padded_call(w, port, "test_simple_text", "tables-json", 3 * 1024, true, true,
                       "application/json");
  read_answer(fd, answer, sizeof answer);
  close(fd);
  if (strncmp(answer, "HTTP/1.1 406", 12) != 0) fail_msg("expected 406, got: %s", answer);
  assert_non_null(strstr(answer, "\"id\":\"tables-json\""));
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), audited);
  fd = padded_call(w, port, "test_simple_text", "string", 3 * 1024, false, true, NULL);
  read_answer(fd, answer, sizeof answer);
  close(fd);
  if (strncmp(answer, "HTTP/1.1 200", 12) != 0) fail_msg("expected 200, got: %s", answer);
  assert_null(strstr(answer, "isError"));
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), audited + 1);
}

/* A listen request's body stops counting against the bounds on bodies held once it is
 * served: its stream may stay open for hours, holding neither its text nor its message. With
 * 64 KB for all (32 KB a caller), a caller listening with 28 KB still calls with 28 KB more. */
static void test_an_open_listen_stream_holds_no_body(void **state) {
  world *w = *state;
  w->cfg.max_taking_bytes = 64 * 1024;
  unsigned port = restart(w);
  char *pad = malloc(28 * 1024 + 1), *body = NULL;
  memset(pad, 'x', 28 * 1024);
  pad[28 * 1024] = 0;
  assert_true(asprintf(&body,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscriptions/listen\","
                       "\"params\":{\"notifications\":{\"toolsListChanged\":true},\"_meta\":{"
                       "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                       "\"io.modelcontextprotocol/clientCapabilities\":{},\"pad\":\"%s\"}}}",
                       pad) > 0);
  free(pad);
  int fd = fixture_connect(port);
  char *lines = modern_lines(w, "subscriptions/listen", NULL), answer[4096] = "";
  fixture_http_send(fd, port, "POST", lines, body);
  free(lines);
  free(body);
  size_t len = 0;
  read_until(fd, answer, sizeof answer, &len, "acknowledged");
  char got[ANSWER_MAX];
  int call = padded_call(w, port, "test_simple_text", "beside", 28 * 1024, false, true, NULL);
  read_answer(call, got, sizeof got);
  close(call);
  if (strncmp(got, "HTTP/1.1 200", 12) != 0) fail_msg("expected 200, got: %s", got);
  close(fd);
}

/* A body's text is let go once it is decoded: calls waiting in line for a pool thread hold
 * their messages, not their text beside them (which would hold twice the bytes counted). */
static void test_a_call_in_line_holds_its_message_not_its_text(void **state) {
  world *w = *state;
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  exchange *calls[POOL_THREADS];
  for (int i = 0; i < POOL_THREADS; i++) {
    w->token = w->tokens[i == POOL_THREADS - 1];
    calls[i] = start_waiting_call(w);
  }
  kit_wait_for(NULL, POOL_THREADS);
  enum { IN_LINE = 8, PAD = 1024 * 1024 };
  w->token = w->tokens[2];
  size_t before = in_use();
  int fds[IN_LINE];
  for (int i = 0; i < IN_LINE; i++)
    fds[i] = padded_call(w, port, "test_wait_cancel", "padded", PAD, false, true, NULL);
  await_load(w, true, IN_LINE);
  long long held = (long long)in_use() - (long long)before;
  if (held > IN_LINE * PAD * 7 / 4) /* the text beside them would make it twice */
    fail_msg("%d calls of %d bytes in line hold %lld bytes", IN_LINE, PAD, held);
  for (int i = 0; i < IN_LINE; i++) close(fds[i]);
  w->token = w->tokens[0];
  for (int i = 0; i < POOL_THREADS; i++) finish(calls[i]);
}

/* A listen stream of w->token's holder on a connection of its own to port, acknowledged. */
static int acknowledged_listen(world *w, unsigned port) {
  int fd = fixture_connect(port);
  char *lines = modern_lines(w, "subscriptions/listen", NULL), answer[4096] = "";
  fixture_http_send(fd, port, "POST", lines, LISTEN(1));
  free(lines);
  size_t len = 0;
  read_until(fd, answer, sizeof answer, &len, "acknowledged");
  return fd;
}

static void test_listen_streams_are_bounded_and_freed_when_closed(void **state) {
  world *w = *state;
  exchange *open[TG_HTTP_MAX_LISTENS_PER_PRINCIPAL];
  for (size_t i = 0; i < TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; i++) {
    open[i] = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(1));
    await(open[i], "acknowledged");
  }
  char *refused = request(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(1), 429);
  assert_non_null(strstr(refused, "Too many open subscriptions/listen streams"));
  free(refused);
  /* At the bound, a request that would be refused anyway is told why, not that it is
   * reached: a header that does not match, a filter that is none. */
  refused = request(w, "POST", NULL, MODERN_HEADERS("tools/list"), LISTEN(1), 400);
  assert_non_null(strstr(refused, "\"code\":-32020"));
  free(refused);
  refused = request(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"),
                    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"subscriptions/listen\","
                    "\"params\":{\"notifications\":5," MODERN_META "}}",
                    200);
  assert_non_null(strstr(refused, "params.notifications must be an object"));
  free(refused);
  /* One without _meta, its version in the header alone, as the dispatch tells it. */
  refused = request(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"),
                    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"subscriptions/listen\","
                    "\"params\":{\"notifications\":{}}}",
                    400);
  assert_non_null(strstr(refused, "A 2026-07-28 request names its protocol version in"));
  free(refused);
  /* Closing one frees its place at once: a client listening again straight after is taken. */
  finish(open[0]);
  open[0] = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(1));
  await(open[0], "acknowledged");
  for (size_t i = 0; i < TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; i++) finish(open[i]);
  /* So are callers that do so again and again, faster than the server's readers notice (each
   * within its bound of requests answered at once, which the streams left count against until
   * then): the streams they left are let go, not kept past the server's bound of 64, which its
   * end holds to. */
  unsigned port = 0;
  assert_int_equal(sscanf(w->url, "http://127.0.0.1:%u/", &port), 1);
  enum { CALLERS = 3, ROUNDS = 6 };
  int fds[CALLERS][TG_HTTP_MAX_LISTENS_PER_PRINCIPAL];
  for (int round = 0; round < ROUNDS; round++) {
    for (int c = 0; c < CALLERS; c++) {
      w->token = w->tokens[c];
      for (size_t i = 0; i < TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; i++) {
        if (round) close(fds[c][i]);
        fds[c][i] = acknowledged_listen(w, port);
      }
    }
  }
  w->token = w->tokens[0];
  tg_http_stop(w->h);
  w->h = NULL;
  for (int c = 0; c < CALLERS; c++)
    for (size_t i = 0; i < TG_HTTP_MAX_LISTENS_PER_PRINCIPAL; i++) close(fds[c][i]);
}

static void test_closing_a_call_stream_cancels_the_call(void **state) {
  world *w = *state;
  exchange *call = start(w, "POST", NULL, STATELESS_ROUTE("test_wait_cancel"),
                         STATELESS_CALL("3", "test_wait_cancel", "{}"));
  kit_wait(&kit_started);
  finish(call);
  kit_wait(&kit_cancelled);
}

static void test_stopping_ends_listen_streams_with_their_result(void **state) {
  world *w = *state;
  exchange *listen = start(w, "POST", NULL, MODERN_HEADERS("subscriptions/listen"), LISTEN(5));
  await(listen, "acknowledged");
  tg_http_stop(w->h);
  w->h = NULL;
  await(listen, NULL);
  assert_non_null(strstr(listen->got,
                         "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"resultType\":\"complete\","
                         "\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"toolgate\","
                         "\"version\":\"test\"},\"io.modelcontextprotocol/subscriptionId\":5}}}"));
  finish(listen);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      T(test_session_hears_of_list_changes_on_its_get_stream),
      T(test_a_change_before_the_first_get_stream_is_announced),
      T(test_a_get_stream_left_is_replaced_at_once),
      T(test_a_change_announced_to_a_stream_left_unread_is_announced_again),
      T(test_a_session_is_asked_what_an_input_required_result_asks),
      T(test_batches_on_a_2025_03_26_session),
      T(test_what_a_session_may_not_send),
      T(test_the_level_set_last_stands),
      T(test_a_request_names_its_run),
      T(test_a_session_is_one_run),
      T(test_a_session_opens_its_run_at_its_first_counted_call),
      T(test_a_session_run_caps_its_calls),
      T(test_a_session_opened_before_its_agent_acts_opens_its_run_once_it_does),
      T(test_a_call_in_no_run_may_not_call_a_capped_tool),
      T(test_a_session_whose_run_cannot_start_serves_its_calls_in_none),
      T(test_a_run_not_ended_holds_back_no_other),
      T(test_a_session_run_outlives_its_session_until_its_last_call),
      T(test_a_session_run_ends_with_its_session),
      T(test_a_modern_notification_names_a_version_it_speaks),
      T(test_an_older_session_gets_its_get_stream_unprimed),
      T(test_a_call_on_its_connection_primes_its_stream),
      T(test_no_question_before_the_client_said_initialized),
      T(test_a_client_result_not_an_object_is_its_error),
      T(test_an_error_naming_no_request_answers_the_one_question),
      T(test_an_unreadable_answer_fails_its_question),
      T(test_an_unreadable_answer_of_2026_answers_no_question),
      T(test_ending_a_session_cancels_its_calls),
      T(test_a_call_its_session_ended_first_does_not_run),
      T(test_a_request_found_as_the_server_stops_is_served),
      T(test_a_cancelled_request_gets_an_empty_event_stream),
      T(test_bearer_tokens_empty_unknown_or_padded),
      T(test_a_session_belongs_to_its_token),
      T(test_a_token_revoked_while_its_body_comes_is_refused),
      T(test_a_batch_answer_past_the_bounds_names_its_requests),
      T(test_list_check_goes_on_while_the_pool_is_busy),
      T(test_a_principal_leaves_a_pool_thread_to_others),
      T(test_the_line_for_pool_threads_is_bounded),
      T(test_a_call_whose_client_left_counts_until_it_ends),
      T(test_a_stateless_call_run_in_place_ends_with_its_client),
      T(test_the_pool_serves_the_caller_running_fewest_first),
      T(test_a_session_call_cancelled_in_line_is_answered_at_once),
      T(test_an_old_session_call_in_line_lets_its_connection_go),
      T(test_a_stateless_call_in_line_leaves_it_with_its_client),
      T(test_a_quiet_call_hears_keep_alives),
      T(test_a_refused_call_does_not_wait_in_line),
      T(test_a_session_call_in_line_ends_at_once_with_its_session),
      T(test_sessions_are_bounded_per_principal),
      T(test_every_session_is_found_by_its_id),
      T(test_sessions_make_room_while_the_sweep_looks),
      T(test_a_listening_session_is_kept),
      T(test_no_room_for_a_session_is_told_its_initialize),
      T(test_a_response_without_a_session_is_refused),
      T(test_a_server_of_one_workspace_takes_only_its_tokens),
      T(test_a_token_unchecked_is_not_called_bad),
      T(test_initialize_on_a_live_session_is_refused),
      T(test_cancellation_ends_a_wait_for_sampling_without_an_answer),
      T(test_a_call_closing_its_stream_is_resumed_with_last_event_id),
      T(test_a_stream_still_to_deliver_outlives_newer_spent_ones),
      T(test_a_call_closing_its_stream_after_an_event_says_when_to_resume),
      T(test_a_call_closing_a_stream_being_read_says_when_to_resume),
      T(test_a_stream_ended_again_before_an_event_says_when_to_resume),
      T(test_a_reply_too_large_for_its_stream_becomes_the_next_event),
      T(test_output_held_is_bounded_and_kept_output_gives_way),
      T(test_resumption_past_what_went_out_keeps_within_the_bound),
      T(test_sending_kept_output_again_leaves_the_room_for_new_output),
      T(test_a_session_read_through_a_resumed_stream_is_kept),
      T(test_output_undelivered_in_all_is_bounded),
      T(test_undelivered_json_answers_count_for_their_caller),
      T(test_kept_output_goes_after_a_while),
      T(test_dropped_output_gives_its_room_back),
      T(test_a_quiet_server_closes_its_spare_databases),
      T(test_priming_passes_the_bounds),
      T(test_listen_addresses),
      T(test_healthz_opens_no_database),
      T(test_idle_connections_are_closed),
      T(test_idle_sessions_end_on_their_own),
      T(test_a_slow_sender_is_cut_off),
      T(test_a_stopping_server_answers_its_calls),
      T(test_a_stop_cancels_the_calls_past_its_grace),
      T(test_a_stop_cancels_a_call_its_client_left),
      T(test_a_stop_answers_a_queued_call),
      T(test_a_session_request_reusing_an_id_being_cancelled),
      T(test_a_stop_gives_tasks_at_work_its_grace),
      T(test_a_revoked_token_ends_its_tasks),
      T(test_a_task_call_whose_client_left_leaves_no_task),
      T(test_a_listen_stream_hears_how_its_task_ended),
      T(test_the_sweeper_drops_expired_tasks),
      T(test_request_bodies_held_at_once_are_bounded),
      T(test_request_bodies_count_as_decoded),
      T(test_a_call_in_line_holds_its_message_not_its_text),
      T(test_an_open_listen_stream_holds_no_body),
      T(test_a_value_like_an_input_request_is_content),
      T(test_a_question_past_those_waiting_is_to_retry),
      T(test_a_slow_reader_is_cut_off),
      T(test_a_slow_reader_of_an_ended_stream_is_cut_off),
      T(test_one_caller_has_a_share_of_the_requests_answered),
      T(test_a_caller_at_its_bound_is_served_its_next_request_at_once),
      T(test_a_caller_at_its_bound_is_served_its_next_request_after_a_stream),
      T(test_a_caller_at_its_bound_is_served_its_next_request_after_a_large_answer),
      T(test_a_call_gives_up_on_a_silent_client),
      T(test_listen_stream_gets_ack_then_changes),
      T(test_a_revoked_token_ends_its_streams),
      T(test_a_revoked_call_whose_answer_began_is_told),
      T(test_a_revoked_call_withdraws_its_question),
      T(test_listen_streams_are_bounded_and_freed_when_closed),
      T(test_closing_a_call_stream_cancels_the_call),
      T(test_stopping_ends_listen_streams_with_their_result),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return failed;
}

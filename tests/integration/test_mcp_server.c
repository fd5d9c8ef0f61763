/* The MCP dispatch on a real workspace: both eras, the 2026-07-28 error ladder, tool results
 * through tg_call, annotations, pagination, talking back to the client during a call; and
 * over Streamable HTTP, the legacy GET stream and resumption with Last-Event-ID. */
#define _GNU_SOURCE
#include "support.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/principal.h"
#include "core/registry.h"
#include "fixture.h"
#include "http/server.h"
#include "mcp/server.h"
#include "tools/conformance.h"
#include "util/status.h"

#define MODERN_META                                                      \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{}}"

typedef struct world {
  fixture *f;
  char agent[TG_UUID_LEN + 1];
  tg_mcp_server srv;
  tg_mcp_session session;
  json_t *sent;   /* messages the server sent during requests */
  json_t *answer; /* what the fake client answers to a server request */
} world;

static int capture_send(void *self, json_t *msg) {
  world *w = self;
  return json_array_append_new(w->sent, msg) < 0 ? TG_E_NOMEM : TG_OK;
}

static int capture_ask(void *self, json_t *request, json_t **ret) {
  world *w = self;
  json_array_append_new(w->sent, request);
  *ret = json_pack("{s:s,s:O,s:O}", "jsonrpc", "2.0", "id", json_object_get(request, "id"),
                   "result", w->answer);
  return TG_OK;
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(&tg_provider_conformance);
  fixture_agent(w->f, "{\"slug\":\"bot\"}", w->agent);
  w->srv = (tg_mcp_server){.fixtures = true, .name = "toolgate", .version = "test"};
  assert_int_equal(tg_mcp_server_prepare(&w->srv, w->f->env.registry), 0);
  tg_mcp_session_init(&w->session);
  w->sent = json_array();
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  tg_mcp_session_done(&w->session);
  tg_mcp_server_done(&w->srv);
  json_decref(w->sent);
  json_decref(w->answer);
  fixture_free(w->f);
  free(w);
  return 0;
}

/* Sends text (one message) with optional HTTP headers; returns the reply message (or NULL
 * for none) and the HTTP status. */
static json_t *send_msg(world *w, const char *text, const tg_mcp_headers *headers, int *status) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  tg_mcp_io io = {.self = w, .send = capture_send, .ask = capture_ask};
  tg_mcp_request req = {.env = &w->f->env, .principal_id = w->agent, .session = &w->session,
                        .headers = headers, .io = &io};
  tg_mcp_reply reply;
  assert_int_equal(tg_mcp_handle(&w->srv, &req, &msg, &reply), 0);
  if (status) *status = reply.http_status;
  tg_rpc_msg_done(&msg);
  json_t *message = reply.text ? tg_test_json(reply.text) : NULL;
  assert_int_equal(reply.error, message && json_object_get(message, "error"));
  free(reply.text);
  return message;
}

static int error_code(json_t *reply) {
  return (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

static json_t *result_of(json_t *reply) {
  json_t *r = json_object_get(reply, "result");
  if (!r) fail_msg("expected a result, got %s", json_dumps(reply, JSON_COMPACT));
  return r;
}

static void test_initialize_negotiates_legacy(void **state) {
  world *w = *state;
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2026-07-28\",\"capabilities\":{}}}",
                       NULL, NULL);
  /* 2026-07-28 is never negotiated through initialize. */
  assert_string_equal(json_string_value(json_object_get(result_of(r), "protocolVersion")), "2025-11-25");
  assert_non_null(json_object_get(json_object_get(result_of(r), "capabilities"), "logging"));
  assert_null(json_object_get(result_of(r), "resultType"));
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{"
               "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}",
               NULL, NULL);
  assert_string_equal(json_string_value(json_object_get(result_of(r), "protocolVersion")), "2025-06-18");
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}", NULL, NULL);
  assert_int_equal(json_object_size(result_of(r)), 0);
  json_decref(r);
  assert_null(send_msg(w, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", NULL, NULL));
  assert_true(w->session.initialized);
}

static json_t *find_tool(json_t *tools, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) return t;
  return NULL;
}

static void test_tools_list_per_principal(void **state) {
  world *w = *state;
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", NULL, NULL);
  json_t *tools = json_object_get(result_of(r), "tools");
  json_t *list = find_tool(tools, "agent_tool_list");
  assert_non_null(list);
  json_t *ann = json_object_get(list, "annotations");
  assert_true(json_is_true(json_object_get(ann, "readOnlyHint")));
  assert_true(json_is_false(json_object_get(ann, "destructiveHint")));
  assert_non_null(json_object_get(list, "outputSchema"));
  /* api-only tools are not offered on MCP. */
  assert_null(find_tool(tools, "admin_agent_list"));
  /* Content fixtures answer in content blocks and declare no outputSchema. */
  json_t *simple = find_tool(tools, "test_simple_text");
  assert_non_null(simple);
  assert_null(json_object_get(simple, "outputSchema"));
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"cursor\":\"zz\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
}

/* The list, its entries encoded once at start, says of each tool what the registry holds,
 * for exactly the tools the gates let this caller use, in their order; cursors page it. */
static void test_tools_list_matches_the_registry(void **state) {
  world *w = *state;
  tg_principal *p = NULL;
  assert_int_equal(tg_principal_load(w->f->env.db, w->agent, &p), 0);
  json_t *usable = NULL;
  assert_int_equal(tg_tools_usable(&w->f->env, p, TG_SURFACE_MCP, &usable), 0);
  tg_principal_free(p);
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", NULL, NULL);
  json_t *tools = json_object_get(result_of(r), "tools");
  size_t n = json_array_size(usable);
  assert_true(n > 1);
  assert_int_equal(json_array_size(tools), n);
  assert_null(json_object_get(result_of(r), "nextCursor")); /* under one page */
  for (size_t i = 0; i < n; i++) {
    json_t *entry = json_array_get(tools, i), *u = json_array_get(usable, i);
    const tg_tool *tool =
        tg_registry_find(w->f->env.registry, json_string_value(json_object_get(u, "canonicalName")));
    assert_non_null(tool);
    assert_true(json_equal(json_object_get(entry, "name"), json_object_get(u, "name")));
    assert_string_equal(json_string_value(json_object_get(entry, "description")), tool->description);
    assert_true(json_equal(json_object_get(entry, "inputSchema"), tool->input_schema));
    json_t *annotations = tg_mcp_annotations(tool);
    assert_true(json_equal(json_object_get(entry, "annotations"), annotations));
    json_decref(annotations);
    json_t *out = json_object_get(entry, "outputSchema");
    assert_true(tool->flags & TG_TOOL_MCP_CONTENT ? out == NULL : json_equal(out, tool->output_schema));
  }
  json_decref(r);
  /* The last entry alone; nothing past the end; a cursor beyond it is refused. */
  char text[160];
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"}}", n - 1);
  r = send_msg(w, text, NULL, NULL);
  tools = json_object_get(result_of(r), "tools");
  assert_int_equal(json_array_size(tools), 1);
  assert_true(json_equal(json_object_get(json_array_get(tools, 0), "name"),
                         json_object_get(json_array_get(usable, n - 1), "name")));
  json_decref(r);
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"}}", n);
  r = send_msg(w, text, NULL, NULL);
  assert_int_equal(json_array_size(json_object_get(result_of(r), "tools")), 0);
  json_decref(r);
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"}}", n + 1);
  r = send_msg(w, text, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  /* A server whose entries were not prepared says so instead of listing nothing. */
  size_t prepared = w->srv.n_entries;
  w->srv.n_entries = 0;
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}", NULL, NULL);
  w->srv.n_entries = prepared;
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_decref(r);
  json_decref(usable);
}

static void test_tools_call_through_the_gate(void **state) {
  world *w = *state;
  long logs = fixture_count(w->f, "agent_run_logs");
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"agent_tool_list\",\"arguments\":{}}}",
                       NULL, NULL);
  json_t *res = result_of(r);
  assert_null(json_object_get(res, "isError"));
  assert_true(json_is_array(json_object_get(json_object_get(res, "structuredContent"), "tools")));
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "type")), "text");
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
               "\"name\":\"admin.agent.list\"}}",
               NULL, NULL);
  res = result_of(r);
  assert_true(json_is_true(json_object_get(res, "isError")));
  json_t *env = json_object_get(json_object_get(res, "structuredContent"), "error");
  assert_string_equal(json_string_value(json_object_get(env, "code")), "permission_denied");
  json_decref(r);
  /* Both calls, the refused one too, are audited by tg_call. */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 2);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"no_such_tool\"}}",
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"test_error_handling\"}}",
               NULL, NULL);
  assert_true(json_is_true(json_object_get(result_of(r), "isError")));
  json_decref(r);
}

static void test_modern_ladder(void **state) {
  world *w = *state;
  int status = 0;
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{"
                       "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
                       NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_int_equal(status, 400);
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"v999.0.0\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
               NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  assert_int_equal(status, 400);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(r, "error"), "data"), "requested")), "v999.0.0");
  json_decref(r);
  tg_mcp_headers mismatch = {.protocol_version = "2026-07-28", .method = "server/discover"};
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"v999.0.0\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
               &mismatch, &status);
  assert_int_equal(error_code(r), TG_RPC_HEADER_MISMATCH);
  json_decref(r);
  tg_mcp_headers ping_h = {.protocol_version = "2026-07-28", .method = "ping"};
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{" MODERN_META "}}",
               &ping_h, &status);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  assert_int_equal(status, 404);
  assert_int_equal(json_integer_value(json_object_get(r, "id")), 4);
  json_decref(r);
  tg_mcp_headers call_h = {.protocol_version = "2026-07-28", .method = "tools/call", .name = "other"};
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_simple_text\"," MODERN_META "}}",
               &call_h, &status);
  assert_int_equal(error_code(r), TG_RPC_HEADER_MISMATCH);
  json_decref(r);
  tg_mcp_headers list_h = {.protocol_version = "2026-07-28", .method = "tools/list"};
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}",
               &list_h, &status);
  assert_int_equal(status, 200);
  json_t *res = result_of(r);
  assert_string_equal(json_string_value(json_object_get(res, "resultType")), "complete");
  assert_int_equal(json_integer_value(json_object_get(res, "ttlMs")), 0);
  assert_string_equal(json_string_value(json_object_get(res, "cacheScope")), "private");
  assert_non_null(json_object_get(json_object_get(res, "_meta"), "io.modelcontextprotocol/serverInfo"));
  json_decref(r);
  /* A legacy request with a modern version header is not served as legacy. */
  tg_mcp_headers modern_h = {.protocol_version = "2026-07-28"};
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}", &modern_h, &status);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_int_equal(status, 400);
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"resources/read\",\"params\":{\"uri\":"
               "\"test://nope\"," MODERN_META "}}",
               NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(r, "error"), "data"), "uri")), "test://nope");
  json_decref(r);
}

static void test_stdio_pinning(void **state) {
  world *w = *state;
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}", NULL, NULL);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_NONE); /* discover never pins */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", NULL, NULL);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_MODERN);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{"
               "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}",
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  json_decref(r);
}

static void test_progress_and_logging(void **state) {
  world *w = *state;
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
                       "\"test_tool_with_progress\",\"_meta\":{\"progressToken\":1}}}",
                       NULL, NULL);
  assert_non_null(json_object_get(result_of(r), "content"));
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 3);
  json_t *last = json_object_get(json_array_get(w->sent, 2), "params");
  assert_int_equal(json_integer_value(json_object_get(last, "progress")), 100);
  assert_int_equal(json_integer_value(json_object_get(last, "progressToken")), 1);
  json_array_clear(w->sent);
  /* No log level set: no log messages. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"test_tool_with_logging\"}}", NULL, NULL);
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 0);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"debug\"}}", NULL, NULL);
  assert_int_equal(json_object_size(result_of(r)), 0);
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"test_tool_with_logging\"}}", NULL, NULL);
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 3);
}

static void test_elicitation_asks_the_client(void **state) {
  world *w = *state;
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"elicitation\":{}}}}",
                       NULL, NULL);
  json_decref(r);
  w->answer = json_pack("{s:s,s:{s:s}}", "action", "accept", "content", "username", "ada");
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_elicitation\",\"arguments\":{\"message\":\"who?\"}}}",
               NULL, NULL);
  json_t *text = json_object_get(json_array_get(json_object_get(result_of(r), "content"), 0), "text");
  assert_non_null(strstr(json_string_value(text), "ada"));
  assert_string_equal(json_string_value(json_object_get(json_array_get(w->sent, 0), "method")), "elicitation/create");
  json_decref(r);
  /* Sampling was not declared: the tool fails cleanly instead of asking. */
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_sampling\",\"arguments\":{\"prompt\":\"hi\"}}}",
               NULL, NULL);
  assert_true(json_is_true(json_object_get(result_of(r), "isError")));
  assert_int_equal(json_array_size(w->sent), 1);
  json_decref(r);
}

/* ---- Streamable HTTP ---- */

#define HANG_GUARD_S 30 /* a read that waits this long means the server hung: not a timing check */

/* Connects to the server and sends one request; returns the socket. */
static int http_send(unsigned port, const char *method, const char *sid, const char *extra,
                     const char *body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct timeval guard = {.tv_sec = HANG_GUARD_S};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  char *req = NULL;
  int n = asprintf(&req,
                   "%s /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                   "Accept: application/json, text/event-stream\r\n%s%s%s%s"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                   method, sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "",
                   extra ? extra : "", body ? strlen(body) : 0, body ? body : "");
  assert_true(n > 0);
  assert_int_equal(write(fd, req, (size_t)n), n);
  free(req);
  return fd;
}

/* Reads until text appears (NULL: until the server closes); fails on a hang. */
static char *http_read(int fd, const char *until) {
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  buf[0] = 0;
  while (!until || !strstr(buf, until)) {
    if (cap - len < 2048) buf = realloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0) fail_msg("the server hung; read so far: %s", buf);
    if (n == 0) break;
    buf[len += (size_t)n] = 0;
  }
  if (until && !strstr(buf, until)) fail_msg("expected '%s' in: %s", until, buf);
  return buf;
}

static char *http_exchange(unsigned port, const char *method, const char *sid, const char *extra,
                           const char *body) {
  int fd = http_send(port, method, sid, extra, body);
  char *res = http_read(fd, NULL);
  close(fd);
  return res;
}

static void assert_status(const char *res, const char *status) {
  if (strncmp(res, "HTTP/1.1 ", 9) != 0 || strncmp(res + 9, status, 3) != 0)
    fail_msg("expected HTTP %s, got: %s", status, res);
}

static void test_http_get_stream_and_resumption(void **state) {
  world *w = *state;
  tg_http_config cfg = {.listen = "127.0.0.1:0", .no_auth = true, .no_auth_principal = w->agent,
                        .threads = 2, .data_dir = w->f->dir, .registry = w->f->registry,
                        .server = w->srv};
  tg_http *h = NULL;
  unsigned port = 0;
  assert_int_equal(tg_http_start(&cfg, &h, &port), 0);
  char *res = http_exchange(port, "POST", NULL, NULL,
                            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                            "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}");
  assert_status(res, "200");
  char sid[64] = "";
  const char *at = strcasestr(res, "Mcp-Session-Id: ");
  assert_non_null(at);
  assert_int_equal(sscanf(at + 16, "%63[0-9a-f]", sid), 1);
  free(res);
  res = http_exchange(port, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
  assert_status(res, "202");
  free(res);
  /* No session, no GET stream (2026-07-28 is POST only); a GET must accept SSE. */
  res = http_exchange(port, "GET", NULL, NULL, NULL);
  assert_status(res, "405");
  free(res);

  /* A call streams its progress; the client goes away after the first event. A disconnect
   * is not a cancellation: the rest is kept, and GET with Last-Event-ID replays it. */
  int fd = http_send(port, "POST", sid, NULL,
                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
                     "\"test_tool_with_progress\",\"_meta\":{\"progressToken\":\"p\"}}}");
  res = http_read(fd, "id: 1-1\n");
  assert_non_null(strstr(res, "text/event-stream"));
  free(res);
  close(fd);
  res = http_exchange(port, "GET", sid, "Last-Event-ID: 1-1\r\n", NULL);
  assert_status(res, "200");
  assert_null(strstr(res, "\"progress\":0,"));
  assert_non_null(strstr(res, "id: 1-2\n"));
  assert_non_null(strstr(res, "\"progress\":50"));
  assert_non_null(strstr(res, "\"progress\":100"));
  assert_non_null(strstr(res, "id: 1-4\n"));
  assert_non_null(strstr(res, "\"id\":3,\"result\""));
  free(res);
  /* Only this session's streams and events can be named. */
  res = http_exchange(port, "GET", sid, "Last-Event-ID: 9-1\r\n", NULL);
  assert_status(res, "400");
  free(res);
  res = http_exchange(port, "GET", sid, "Last-Event-ID: 1-99\r\n", NULL);
  assert_status(res, "400");
  free(res);

  /* The standalone stream opens with a priming event; there is one per session. */
  int get = http_send(port, "GET", sid, NULL, NULL);
  res = http_read(get, "data: \n\n");
  assert_status(res, "200");
  assert_non_null(strstr(res, "id: 2-0\nretry: "));
  free(res);
  res = http_exchange(port, "GET", sid, NULL, NULL);
  assert_status(res, "409");
  free(res);
  /* Ending the session ends its stream; the session then answers 404 everywhere. */
  res = http_exchange(port, "DELETE", sid, NULL, NULL);
  assert_status(res, "200");
  free(res);
  free(http_read(get, NULL)); /* the stream ends instead of hanging */
  close(get);
  res = http_exchange(port, "GET", sid, NULL, NULL);
  assert_status(res, "404");
  free(res);
  res = http_exchange(port, "GET", sid, "Last-Event-ID: 1-1\r\n", NULL);
  assert_status(res, "404");
  free(res);
  res = http_exchange(port, "POST", sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
  assert_status(res, "404");
  free(res);
  tg_http_stop(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_initialize_negotiates_legacy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tools_list_per_principal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tools_list_matches_the_registry, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tools_call_through_the_gate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_modern_ladder, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stdio_pinning, setup, teardown),
      cmocka_unit_test_setup_teardown(test_progress_and_logging, setup, teardown),
      cmocka_unit_test_setup_teardown(test_elicitation_asks_the_client, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_get_stream_and_resumption, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

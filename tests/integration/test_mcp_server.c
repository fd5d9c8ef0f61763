/* The MCP dispatch on a real workspace: both eras, the 2026-07-28 error ladder, tool results
 * through tg_call, annotations, pagination, talking back to the client during a call. */
#include "support.h"

#include <stdlib.h>
#include <string.h>

#include "fixture.h"
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
  tg_mcp_session_init(&w->session);
  w->sent = json_array();
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  tg_mcp_session_done(&w->session);
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
  return reply.message;
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_initialize_negotiates_legacy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tools_list_per_principal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tools_call_through_the_gate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_modern_ladder, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stdio_pinning, setup, teardown),
      cmocka_unit_test_setup_teardown(test_progress_and_logging, setup, teardown),
      cmocka_unit_test_setup_teardown(test_elicitation_asks_the_client, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The MCP dispatch on a real workspace: both eras, the 2026-07-28 error ladder, tool results
 * through tg_call, annotations, pagination, talking back to the client during a call; and
 * over Streamable HTTP, the legacy GET stream and resumption with Last-Event-ID. */
#define _GNU_SOURCE
#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/principal.h"
#include "core/schema.h"
#include "core/registry.h"
#include "fixture.h"
#include "http/server.h"
#include "mcp/server.h"
#include "mcp/watch.h"
#include "tools/conformance.h"
#include "util/clock.h"
#include "util/status.h"

#define MODERN_META                                                      \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{}}"
/* A 2025-era initialize: id is a number; version and caps, its protocolVersion and
 * capabilities (JSON text). */
#define INITIALIZE(id, version, caps)                                                       \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" \
  version "\",\"capabilities\":" caps "}}"
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"

/* What a subscriptions/listen stream receives, from whichever thread tells it. */
typedef struct feed {
  pthread_mutex_t lock;
  pthread_cond_t more;
  json_t *got;
  bool refuses_tasks; /* its client cannot take a task's notification now */
} feed;

typedef struct world {
  fixture *f;
  char agent[TG_UUID_LEN + 1];
  tg_mcp_server srv;
  tg_mcp_session session;
  json_t *sent;   /* messages the server sent during requests */
  json_t *answer; /* what the fake client answers to a server request */
  json_t *answer_error; /* or, when set, the error it answers with */
  const char *run_id;   /* the run requests attach to, as a transport gives it; NULL: none */
  /* What the transport says of the client's notifications/initialized as the session stands
   * now (its request works on a copy taken before, as an HTTP session's does). */
  bool initialized_since;
  tg_mcp_watch *watch; /* what requests listen on (one of listens'); NULL: nothing */
  struct {
    feed feed;
    tg_mcp_watch *watch;
  } listens[2]; /* listen streams, each on a watch of its own */
  tg_http_config http; /* what an HTTP server of the test serves with (see http_start) */
} world;

static int capture_send(void *self, json_t *msg) {
  world *w = self;
  return json_array_append_new(w->sent, msg) < 0 ? TG_E_NOMEM : TG_OK;
}

static int capture_ask(void *self, json_t *request, json_t **ret) {
  world *w = self;
  json_array_append_new(w->sent, request);
  *ret = json_pack("{s:s,s:O,s:O}", "jsonrpc", "2.0", "id", json_object_get(request, "id"),
                   w->answer_error ? "error" : "result",
                   w->answer_error ? w->answer_error : w->answer);
  return TG_OK;
}

static bool capture_initialized(void *self) { return ((world *)self)->initialized_since; }

/* A server for w's workspace, as a new process would start it. */
static void start_server(world *w) {
  w->srv = (tg_mcp_server){.fixtures = true, .name = "toolgate", .version = "test"};
  assert_int_equal(tg_mcp_server_prepare(&w->srv, &w->f->env), 0);
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(&tg_provider_conformance);
  fixture_agent(w->f, "{\"slug\":\"bot\"}", w->agent);
  start_server(w);
  tg_mcp_session_init(&w->session);
  w->sent = json_array();
  for (size_t i = 0; i < 2; i++) {
    feed *f = &w->listens[i].feed;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->more, NULL);
    f->got = json_array();
  }
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  /* Before the server: a watch may hold observers of its tasks. */
  for (size_t i = 0; i < 2; i++) {
    feed *f = &w->listens[i].feed;
    tg_mcp_watch_free(w->listens[i].watch);
    json_decref(f->got);
    pthread_cond_destroy(&f->more);
    pthread_mutex_destroy(&f->lock);
  }
  tg_mcp_session_done(&w->session);
  tg_mcp_server_done(&w->srv);
  json_decref(w->sent);
  json_decref(w->answer);
  json_decref(w->answer_error);
  fixture_free(w->f);
  free(w);
  return 0;
}

/* Sends text (one message) with optional HTTP headers; returns the reply message (or NULL
 * for none) and the HTTP status. */
static json_t *send_as(world *w, const char *principal, const char *text,
                       const tg_mcp_headers *headers, int *status) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  tg_mcp_io io = {.self = w, .send = capture_send, .ask = capture_ask,
                  .initialized = capture_initialized};
  tg_mcp_request req = {.env = &w->f->env, .principal_id = principal, .session = &w->session,
                        .headers = headers, .io = &io, .watch = w->watch,
                        .run_id = w->run_id};
  tg_mcp_reply reply;
  assert_int_equal(tg_mcp_handle(&w->srv, &req, &msg, &reply), 0);
  if (status) *status = reply.http_status;
  tg_rpc_msg_done(&msg);
  json_t *message = reply.text ? tg_test_json(reply.text) : NULL;
  assert_int_equal(reply.error, message && json_object_get(message, "error"));
  free(reply.text);
  return message;
}

static json_t *send_msg(world *w, const char *text, const tg_mcp_headers *headers, int *status) {
  return send_as(w, w->agent, text, headers, status);
}

/* A 2025 client's handshake: initialize (its text), then notifications/initialized, before
 * which no request of the server's may go to it. */
static void handshake(world *w, const char *initialize) {
  json_decref(send_msg(w, initialize, NULL, NULL));
  assert_null(send_msg(w, INITIALIZED, NULL, NULL));
}

static int error_code(json_t *reply) {
  return (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

static json_t *error_data(json_t *reply) {
  return json_object_get(json_object_get(reply, "error"), "data");
}

static const char *str(json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

/* The error message of reply, which must be an error. */
static const char *error_message(json_t *reply) {
  const char *m = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
  assert_non_null(m);
  return m;
}

static json_t *result_of(json_t *reply) {
  json_t *r = json_object_get(reply, "result");
  if (!r) fail_msg("expected a result, got %s", json_dumps(reply, JSON_COMPACT));
  return r;
}

static void test_initialize_negotiates_legacy(void **state) {
  world *w = *state;
  json_t *r = send_msg(w,
                       INITIALIZE(1, "2026-07-28", "{}"),
                       NULL, NULL);
  /* 2026-07-28 is never negotiated through initialize. */
  assert_string_equal(json_string_value(json_object_get(result_of(r), "protocolVersion")), "2025-11-25");
  assert_non_null(json_object_get(json_object_get(result_of(r), "capabilities"), "logging"));
  assert_null(json_object_get(result_of(r), "resultType"));
  json_decref(r);
  /* Once: a second initialize changes nothing. */
  static const char older[] = INITIALIZE(2, "2025-06-18", "{}");
  r = send_msg(w, older, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_REQUEST);
  json_decref(r);
  assert_string_equal(w->session.version, "2025-11-25");
  tg_mcp_session_done(&w->session); /* a new connection */
  r = send_msg(w, older, NULL, NULL);
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
  /* A write that deletes, replaces or ends for good what exists is destructive (a task
   * moved to cancelled stays there); one that only adds is not. Idempotence is the spec's
   * word, for reads too (a skill's load records each one). */
  static const struct {
    const char *tool;
    bool read, destructive, idempotent;
  } hinted[] = {{"repo.commit.create", false, true, false}, {"agent.file.edit", false, true, false},
                {"kb.document.put", false, true, true},     {"work.task.transition", false, true, false},
                {"work.task.create", false, false, false},  {"work.task.comment", false, false, false},
                {"agent.skill.load", true, false, false},   {"agent.skill.list", true, false, true},
                {"agent.approval.resolve", false, true, false},
                {"repo.pr.open", false, false, false},      {"repo.pr.close", false, true, false},
                {"repo.pr.merge", false, true, false},      {"admin.run.end", false, true, false}};
  for (size_t i = 0; i < sizeof hinted / sizeof hinted[0]; i++) {
    json_t *hints = tg_mcp_annotations(tg_registry_find(w->f->env.registry, hinted[i].tool));
    if (json_is_true(json_object_get(hints, "readOnlyHint")) != hinted[i].read ||
        json_is_true(json_object_get(hints, "destructiveHint")) != hinted[i].destructive ||
        json_is_true(json_object_get(hints, "idempotentHint")) != hinted[i].idempotent)
      fail_msg("%s: %s", hinted[i].tool, json_dumps(hints, 0));
    json_decref(hints);
  }
  /* A write of high risk is destructive, flagged or not; a read or a proposal is not. */
  for (tg_effect effect = TG_EFFECT_READ; effect <= TG_EFFECT_PROPOSE; effect++) {
    const tg_tool risky = {.effect = effect, .risk = TG_RISK_HIGH};
    json_t *hints = tg_mcp_annotations(&risky);
    assert_int_equal(json_is_true(json_object_get(hints, "destructiveHint")),
                     effect == TG_EFFECT_WRITE);
    json_decref(hints);
  }
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

/* listed, a tools/list entry's outputSchema, is tool's own schema or the error envelope: it
 * compiles, its first branch is the tool's schema whole, named by an $id of its own unless it
 * had one, and the envelope of a failed call is valid against it. */
static void assert_output_schema_listed(json_t *listed, const tg_tool *tool) {
  assert_string_equal(json_string_value(json_object_get(listed, "type")), "object");
  assert_int_equal(json_object_size(listed), 2);
  json_t *anyOf = json_object_get(listed, "anyOf");
  assert_int_equal(json_array_size(anyOf), 2);
  json_t *own = json_copy(json_array_get(anyOf, 0));
  if (!json_object_get(tool->output_schema, "$id")) {
    char id[200];
    snprintf(id, sizeof id, "urn:toolgate:output:%s", tool->name);
    assert_string_equal(json_string_value(json_object_get(own, "$id")), id);
    json_object_del(own, "$id");
  }
  assert_true(json_equal(own, tool->output_schema));
  json_decref(own);
  json_t *envelope_schema = tg_error_envelope_schema();
  assert_true(json_equal(json_array_get(anyOf, 1), envelope_schema));
  json_decref(envelope_schema);
  tg_schema *compiled = NULL;
  char *why = NULL;
  assert_int_equal(tg_schema_compile(listed, NULL, &compiled, &why), 0);
  json_t *envelope = tg_error_envelope(TG_ERR_NOT_FOUND, "No such work", json_pack("{s:s}", "id", "w1"));
  assert_true(tg_schema_validate(compiled, envelope, NULL, 0));
  json_decref(envelope);
  tg_schema_free(compiled);
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
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", NULL, NULL);
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
    if (tool->flags & TG_TOOL_MCP_CONTENT) assert_null(out);
    else assert_output_schema_listed(out, tool);
  }
  json_decref(r);
  /* The last entry alone; nothing past the end; a cursor beyond it is refused. */
  char text[320];
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"," MODERN_META "}}", n - 1);
  r = send_msg(w, text, NULL, NULL);
  tools = json_object_get(result_of(r), "tools");
  assert_int_equal(json_array_size(tools), 1);
  assert_true(json_equal(json_object_get(json_array_get(tools, 0), "name"),
                         json_object_get(json_array_get(usable, n - 1), "name")));
  json_decref(r);
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"," MODERN_META "}}", n);
  r = send_msg(w, text, NULL, NULL);
  assert_int_equal(json_array_size(json_object_get(result_of(r), "tools")), 0);
  json_decref(r);
  snprintf(text, sizeof text,
           "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%zu\"," MODERN_META "}}", n + 1);
  r = send_msg(w, text, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  /* A server whose entries were not prepared says so instead of listing nothing. */
  size_t prepared = w->srv.n_entries;
  w->srv.n_entries = 0;
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", NULL, NULL);
  w->srv.n_entries = prepared;
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_decref(r);
  json_decref(usable);
}

/* 2025 has no tasks here: a tool that runs only as one is not listed on it, and a call of it
 * is refused; the others are listed as on 2026-07-28. */
static void test_task_only_tools_are_not_listed_on_2025(void **state) {
  world *w = *state;
  json_t *modern = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\","
                               "\"params\":{" MODERN_META "}}", NULL, NULL);
  tg_mcp_session_done(&w->session); /* a 2025 connection */
  json_t *legacy = send_msg(w, INITIALIZE(2, "2025-11-25", "{}"), NULL, NULL);
  json_decref(legacy);
  legacy = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}", NULL, NULL);
  json_t *all = json_object_get(result_of(modern), "tools");
  json_t *listed = json_object_get(result_of(legacy), "tools");
  size_t i, only_tasks = 0, at = 0;
  json_t *tool;
  json_array_foreach(all, i, tool) {
    const char *support = json_string_value(
        json_object_get(json_object_get(tool, "execution"), "taskSupport"));
    if (support && strcmp(support, "required") == 0) {
      only_tasks++;
      continue;
    }
    assert_true(json_equal(json_array_get(listed, at++), tool));
  }
  assert_true(only_tasks > 0);
  assert_int_equal(json_array_size(listed), at);
  json_decref(modern);
  json_decref(legacy);
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
                          "{\"name\":\"test_tool_with_task\",\"arguments\":{}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  json_decref(r);
}

/* A tool whose output schema refers to itself ("#"), to its root's members and to its $defs:
 * listed, each reference still resolves within the tool's schema, so its results are valid
 * and a value it refuses, an envelope nested in it included, is not; the envelope is valid
 * at the root. */
static int self_echo(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  *ret = json_incref(args);
  return TG_OK;
}

static const char self_spec[] =
    "{\"provider\":\"self\",\"tools\":[{\"name\":\"test.tree.echo\",\"description\":\"Echoes.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},"
    "\"outputSchema\":{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
    "\"$defs\":{\"count\":{\"type\":\"integer\"}},\"type\":\"object\",\"additionalProperties\":false,"
    "\"properties\":{\"n\":{\"$ref\":\"#/$defs/count\"},\"m\":{\"$ref\":\"#/properties/n\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}}]}";

/* A registry of provider's tools alone. */
static tg_registry *registry_of(const tg_provider *provider) {
  const tg_provider *providers[] = {provider};
  tg_registry *reg = NULL;
  char *why = NULL;
  assert_int_equal(tg_registry_new(providers, 1, &reg, &why), 0);
  return reg;
}

static void test_listed_output_schema_keeps_its_references(void **state) {
  world *w = *state;
  static const tg_handler_entry handlers[] = {{"test.tree.echo", self_echo}};
  static const tg_provider self = {.name = "self", .spec_json = self_spec, .handlers = handlers,
                                   .n_handlers = 1};
  tg_registry *reg = registry_of(&self);
  char *why = NULL;
  tg_env env = w->f->env;
  env.registry = reg;
  tg_mcp_server srv = {.name = "toolgate", .version = "test"};
  assert_int_equal(tg_mcp_server_prepare(&srv, &env), 0);
  const tg_tool *tool = tg_registry_find(reg, "test.tree.echo");
  json_t *entry = tg_test_json(srv.entries[tool->id]);
  json_t *listed = json_object_get(entry, "outputSchema");
  assert_output_schema_listed(listed, tool);
  tg_schema *compiled = NULL;
  assert_int_equal(tg_schema_compile(listed, NULL, &compiled, &why), 0);
  static const struct {
    const char *value;
    bool valid;
  } cases[] = {
      {"{\"n\":3,\"m\":4,\"children\":[{\"n\":5,\"children\":[]}]}", true},
      {"{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}", true},
      {"{\"n\":\"three\"}", false},
      {"{\"m\":\"four\"}", false},
      {"{\"children\":[{\"m\":\"four\"}]}", false},
      {"{\"children\":[{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}]}", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *value = tg_test_json(cases[i].value);
    assert_int_equal(tg_schema_validate(compiled, value, NULL, 0), cases[i].valid);
    json_decref(value);
  }
  tg_schema_free(compiled);
  json_decref(entry);
  tg_mcp_server_done(&srv);
  tg_registry_free(reg);
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
  /* Its text is the envelope serialized, details and all. */
  json_t *text = json_loads(json_string_value(json_object_get(
                                json_array_get(json_object_get(res, "content"), 0), "text")),
                            0, NULL);
  assert_true(json_equal(text, json_object_get(res, "structuredContent")));
  assert_non_null(json_object_get(json_object_get(json_object_get(text, "error"), "details"), "reason"));
  json_decref(text);
  json_decref(r);
  /* Both calls, the refused one too, are audited by tg_call. */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 2);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"no_such_tool\"}}",
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_t *data = error_data(r);
  assert_string_equal(json_string_value(json_object_get(data, "name")), "no_such_tool");
  assert_null(json_object_get(data, "truncated"));
  json_decref(r);
  /* A long unknown name comes back cut, on a character's start: "é" is 2 bytes. */
  char long_call[8192];
  int n = snprintf(long_call, sizeof long_call,
                   "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"x");
  for (int i = 0; i < 2000; i++) n += snprintf(long_call + n, sizeof long_call - (size_t)n, "é");
  snprintf(long_call + n, sizeof long_call - (size_t)n, "\"}}");
  r = send_msg(w, long_call, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  data = error_data(r);
  assert_int_equal(strlen(json_string_value(json_object_get(data, "name"))), 255);
  assert_true(json_is_true(json_object_get(data, "truncated")));
  json_decref(r);
  /* So does an unknown method. */
  n = snprintf(long_call, sizeof long_call, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"");
  for (int i = 0; i < 4000; i++) long_call[n++] = 'm';
  snprintf(long_call + n, sizeof long_call - (size_t)n, "\"}");
  r = send_msg(w, long_call, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  data = error_data(r);
  assert_int_equal(strlen(json_string_value(json_object_get(data, "method"))), 256);
  assert_true(json_is_true(json_object_get(data, "truncated")));
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
  /* A malformed envelope: no clientCapabilities, or capabilities in the wrong shape (not
   * capabilities left undeclared, which a tool needing them would answer with -32021), or a
   * clientInfo that is no Implementation object, or a progress token neither a string nor a
   * number. */
#define CAPS ",\"io.modelcontextprotocol/clientCapabilities\":{}"
#define INFO ",\"io.modelcontextprotocol/clientInfo\":"
  static const char *const malformed[] = {
      "", ",\"io.modelcontextprotocol/clientCapabilities\":{\"sampling\":true}",
      CAPS INFO "\"garbage\"", CAPS INFO "{\"name\":5,\"version\":\"1\"}",
      CAPS INFO "{\"name\":\"c\"}", CAPS ",\"progressToken\":[1]"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    char text[320];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
             "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"%s}}}",
             malformed[i]);
    json_t *r = send_msg(w, text, NULL, &status);
    assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    assert_int_equal(status, 400);
    json_decref(r);
  }
  /* A whole Implementation and a numeric progress token are served. */
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{"
                       "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"" CAPS
                       INFO "{\"name\":\"c\",\"version\":\"1\"},\"progressToken\":7}}}",
                       NULL, &status);
  assert_non_null(result_of(r));
  assert_int_equal(status, 200);
  json_decref(r);
#undef CAPS
#undef INFO
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"v999.0.0\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
               NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  assert_int_equal(status, 400);
  assert_string_equal(json_string_value(json_object_get(error_data(r), "requested")), "v999.0.0");
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
  /* Nor is the legacy handshake: its version header contradicts it (-32020), and no session
   * opens. */
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
               "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}",
               &modern_h, &status);
  assert_int_equal(error_code(r), TG_RPC_HEADER_MISMATCH);
  assert_int_equal(status, 400);
  assert_string_equal(w->session.version, "");
  json_decref(r);
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"resources/read\",\"params\":{\"uri\":"
               "\"test://nope\"," MODERN_META "}}",
               NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_string_equal(json_string_value(json_object_get(error_data(r), "uri")), "test://nope");
  json_decref(r);
}

/* A subscription names a resource that exists, as a read does (-32002 on 2025-11-25);
 * ending one there is none of is no error. */
static void test_subscriptions_name_resources_that_exist(void **state) {
  world *w = *state;
  static const char *const asked[][2] = {
      {"subscribe", "test://watched-resource"}, {"subscribe", "test://nope"},
      {"unsubscribe", "test://nope"}, {"unsubscribe", "test://watched-resource"}};
  static const int codes[] = {0, TG_RPC_RESOURCE_NOT_FOUND, 0, 0};
  char text[200];
  for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/%s\",\"params\":{\"uri\":\"%s\"}}",
             asked[i][0], asked[i][1]);
    json_t *r = send_msg(w, text, NULL, NULL);
    if (codes[i]) assert_int_equal(error_code(r), codes[i]);
    else assert_int_equal(json_object_size(result_of(r)), 0);
    json_decref(r);
  }
}

/* An agent that is not active is offered no fixture, as it is offered no tool: its lists are
 * empty and asking for one is refused; once active, it has them all. */
static void test_inactive_agent_is_offered_no_fixtures(void **state) {
  world *w = *state;
  char idle[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"idle\",\"status\":\"draft\"}", idle);
  static const char *const lists[][2] = {{"tools/list", "tools"},
                                         {"resources/list", "resources"},
                                         {"resources/templates/list", "resourceTemplates"},
                                         {"prompts/list", "prompts"}};
  static const char *const asks[] = {
      "\"method\":\"resources/read\",\"params\":{\"uri\":\"test://static-text\"",
      "\"method\":\"prompts/get\",\"params\":{\"name\":\"test_simple_prompt\"",
      ("\"method\":\"completion/complete\",\"params\":{\"ref\":{\"type\":\"ref/prompt\","
       "\"name\":\"test_prompt_with_arguments\"},\"argument\":{\"name\":\"arg1\",\"value\":\"\"}")};
  for (int active = 0; active < 2; active++) {
    char text[400];
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
      snprintf(text, sizeof text,
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":{" MODERN_META "}}",
               lists[i][0]);
      json_t *r = send_as(w, idle, text, NULL, NULL);
      size_t n = json_array_size(json_object_get(result_of(r), lists[i][1]));
      if (active) assert_true(n > 0);
      else assert_int_equal(n, 0);
      json_decref(r);
    }
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
      snprintf(text, sizeof text, "{\"jsonrpc\":\"2.0\",\"id\":1,%s," MODERN_META "}}", asks[i]);
      json_t *r = send_as(w, idle, text, NULL, NULL);
      if (active) {
        result_of(r);
      } else {
        assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
        json_t *data = error_data(r);
        assert_string_equal(json_string_value(json_object_get(data, "reason")), "agent_not_active");
        if (i == 0) assert_string_equal(str(data, "uri"), "test://static-text");
      }
      json_decref(r);
    }
    /* Ending a subscription, which only a 2025 session may, is refused as subscribing is. */
    tg_mcp_session_done(&w->session); /* a new connection */
    json_decref(send_as(w, idle, INITIALIZE(2, "2025-11-25", "{}"), NULL, NULL));
    json_t *r = send_as(w, idle,
                        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/unsubscribe\","
                        "\"params\":{\"uri\":\"test://static-text\"}}",
                        NULL, NULL);
    if (active) {
      assert_int_equal(json_object_size(result_of(r)), 0);
    } else {
      assert_int_equal(error_code(r), TG_RPC_RESOURCE_NOT_FOUND);
      assert_string_equal(str(error_data(r), "reason"), "agent_not_active");
      assert_string_equal(str(error_data(r), "uri"), "test://static-text");
    }
    json_decref(r);
    tg_mcp_session_done(&w->session);
    assert_int_equal(tg_db_exec(w->f->db, "UPDATE agents SET status = 'active' WHERE slug = 'idle'",
                                NULL, NULL),
                     0);
  }
}

/* A cursor is taken only as the server writes it: decimal, no sign, space or leading zero. */
static void test_cursors_only_as_written(void **state) {
  world *w = *state;
  static const char *const bad[] = {"+0", " 0", "0 ", "-0", "01", "00", "zz", ""};
  char text[160];
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%s\"}}",
             bad[i]);
    json_t *r = send_msg(w, text, NULL, NULL);
    if (error_code(r) != TG_RPC_INVALID_PARAMS) fail_msg("the cursor '%s' was read", bad[i]);
    json_decref(r);
  }
  json_t *r = send_msg(
      w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"cursor\":\"0\"}}",
      NULL, NULL);
  assert_true(json_array_size(json_object_get(result_of(r), "tools")) > 0);
  json_decref(r);
}

/* A header value a client must encode (a byte past ASCII, a control character) is refused
 * when sent as is (-32020), and taken once encoded; a plain one is taken as is. An encoded
 * one is decoded strictly: padded, in the alphabet, its unused bits zero. */
static void test_header_values_a_client_must_encode(void **state) {
  world *w = *state;
  static const struct { const char *region, *header; bool taken; } cases[] = {
      {"caf\\u00e9", "caf\xc3\xa9", false},
      {"a\\tb", "a\tb", false},
      {"caf\\u00e9", "=?base64?Y2Fmw6k=?=", true},
      {"caf\\u00e9", "=?base64?Y2Fmw6l=?=", false},
      {"caf\\u00e9", "=?base64?Y2Fmw6k?=", false},
      {"caf\\u00e9", "=?base64?Y2Fm w6k=?=", false},
      {"caf\\u00e9", "=?base64?Y2Fmw6k==?=", false},
      {"", "=?base64?" "?=", true}, /* split: "??=" is a trigraph */
      {"us west", "us west", true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char text[300];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"test_x_mcp_header\",\"arguments\":{\"region\":\"%s\"}," MODERN_META "}}",
             cases[i].region);
    json_t *params = json_pack("{s:s}", "region", cases[i].header);
    tg_mcp_headers h = {.protocol_version = "2026-07-28", .method = "tools/call",
                        .name = "test_x_mcp_header", .params = params};
    int status = 0;
    json_t *r = send_msg(w, text, &h, &status);
    if (cases[i].taken ? error_code(r) != 0 : error_code(r) != TG_RPC_HEADER_MISMATCH)
      fail_msg("Mcp-Param-Region '%s': %s", cases[i].header, json_dumps(r, JSON_COMPACT));
    json_decref(r);
    json_decref(params);
  }
}

/* A header's Name and a schema's x-mcp-header meet in lower case, up to 127 bytes; a longer
 * Name has no key (HTTP refuses the header), so no shorter one stands in for it. */
static void test_param_keys(void **state) {
  (void)state;
  char key[TG_MCP_PARAM_NAME_MAX + 1], name[TG_MCP_PARAM_NAME_MAX + 2];
  assert_true(tg_mcp_param_key("Region", key));
  assert_string_equal(key, "region");
  memset(name, 'A', TG_MCP_PARAM_NAME_MAX);
  name[TG_MCP_PARAM_NAME_MAX] = '\0';
  assert_true(tg_mcp_param_key(name, key));
  assert_int_equal(strspn(key, "a"), TG_MCP_PARAM_NAME_MAX);
  name[TG_MCP_PARAM_NAME_MAX] = 'A';
  name[TG_MCP_PARAM_NAME_MAX + 1] = '\0';
  assert_false(tg_mcp_param_key(name, key));
}

/* The audit rows of calls of tool at level (INFO: those that succeeded). */
static long calls_audited(world *w, const char *tool, const char *level) {
  char step[128];
  snprintf(step, sizeof step, "tool:%s", tool);
  return fixture_count_where(w->f,
                             "SELECT COUNT(*) AS n FROM agent_run_logs WHERE step = $1"
                             " AND level = $2",
                             json_pack("[ss]", step, level));
}

/* Those of the conformance tool test.input_required.result_elicitation. */
static long elicitation_calls_audited(world *w, const char *level) {
  return calls_audited(w, "test.input_required.result_elicitation", level);
}

/* The rows of tool's requests refused between rounds, with a message like why. */
static long ends_audited(world *w, const char *tool, const char *why) {
  char step[128];
  snprintf(step, sizeof step, "tool:%s", tool);
  return fixture_count_where(w->f,
                             "SELECT COUNT(*) AS n FROM agent_run_logs WHERE level = 'WARN'"
                             " AND json_extract(metadata, '$.end') AND step = $1"
                             " AND message LIKE $2",
                             json_pack("[ss]", step, why));
}

/* Those of the elicitation tool's requests refused as the client's answer failed. */
static long elicitation_ends_audited(world *w) {
  return ends_audited(w, "test.input_required.result_elicitation",
                      "failed: The client answered%");
}

/* Starts a run of w's agent (its id in run), which w's requests attach to from now on. */
static void attach_to_a_new_run(world *w, char run[TG_UUID_LEN + 1]) {
  fixture_run_start(w->f, "bot", run);
  w->run_id = run;
}

/* A request of a run refused between its rounds is audited in that run, as its rounds are:
 * the run's log tells all the request did. */
static void test_a_refusal_between_rounds_is_audited_in_its_run(void **state) {
  world *w = *state;
  char run[TG_UUID_LEN + 1];
  attach_to_a_new_run(w, run);
  handshake(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{}}"));
  /* An answer that does not fit what the first round asked fails the request before the
   * second. */
  w->answer = json_pack("{s:s,s:{s:i}}", "action", "accept", "content", "name", 5);
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"test_input_required_result_elicitation\"}}",
                       NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_decref(r);
  assert_int_equal(elicitation_ends_audited(w), 1);
  static const char in_run[] = "SELECT COUNT(*) AS n FROM agent_run_logs WHERE run_id = $1"
                               " AND step = 'tool:test.input_required.result_elicitation'"
                               " AND level = $2";
  assert_int_equal(fixture_count_where(w->f, in_run, json_pack("[ss]", run, "INFO")), 1);
  assert_int_equal(fixture_count_where(w->f, in_run, json_pack("[ss]", run, "WARN")), 1);
}

/* Elicitation in the mode the client declared: an empty object is form mode alone, so a
 * client declaring url mode alone gets -32021 naming form mode. The call refused so failed
 * before it committed, and its audit says so. */
static void test_elicitation_in_the_mode_declared(void **state) {
  world *w = *state;
  static const char call[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_input_required_result_elicitation\",\"arguments\":{},\"_meta\":{"
      "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
      "\"io.modelcontextprotocol/clientCapabilities\":%s}}}";
  char text[400];
  snprintf(text, sizeof text, call, "{\"elicitation\":{\"url\":{}}}");
  int status = 0;
  json_t *r = send_msg(w, text, NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_MISSING_CAPABILITY);
  assert_int_equal(status, 400);
  json_t *need = json_object_get(error_data(r),
                                 "requiredCapabilities");
  json_t *form = json_pack("{s:{s:{}}}", "elicitation", "form");
  assert_true(json_equal(need, form));
  json_decref(form);
  json_decref(r);
  assert_int_equal(elicitation_calls_audited(w, "INFO"), 0);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs WHERE message"
                                       " LIKE '%Missing required client capability%'",
                                       NULL),
                   1);
  snprintf(text, sizeof text, call, "{\"elicitation\":{}}");
  r = send_msg(w, text, NULL, NULL);
  assert_string_equal(json_string_value(json_object_get(result_of(r), "resultType")),
                      "input_required");
  json_decref(r);
  assert_int_equal(elicitation_calls_audited(w, "INFO"), 1);
}

static void test_stdio_pinning(void **state) {
  world *w = *state;
  /* A ping pins nothing: over stdio it may be answered ahead of its turn. */
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}", NULL, NULL);
  assert_int_equal(json_object_size(result_of(r)), 0);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_NONE);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}", NULL, NULL);
  /* Log messages go to requests naming a level: logging is declared; subscriptions are not. */
  json_t *caps = json_object_get(result_of(r), "capabilities");
  assert_non_null(json_object_get(caps, "logging"));
  assert_null(json_object_get(json_object_get(caps, "resources"), "subscribe"));
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_NONE); /* discover never pins */
  /* Nor does a request refused for its _meta, whatever era it would have been of. */
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"_meta\":5}}",
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_NONE);
  /* A claim of a version not spoken pins nothing: the client may fall back to initialize. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                  "\"io.modelcontextprotocol/protocolVersion\":\"v999\","
                  "\"io.modelcontextprotocol/clientCapabilities\":{}}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_NONE);
  /* A valid claim pins, even for a method not found. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"foo/bar\",\"params\":{" MODERN_META "}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_MODERN);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", NULL, NULL);
  assert_non_null(json_object_get(result_of(r), "tools"));
  json_decref(r);
  r = send_msg(w,
               INITIALIZE(3, "2025-11-25", "{}"),
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  json_t *data = error_data(r);
  assert_string_equal(json_string_value(json_array_get(json_object_get(data, "supported"), 0)),
                      "2026-07-28");
  assert_string_equal(json_string_value(json_object_get(data, "requested")), "2025-11-25");
  json_decref(r);
  /* One naming no version is malformed, as it would be anywhere (-32022 must echo one). */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  /* A 2025 request is no 2026-07-28 one: it misses its _meta, and a method 2026-07-28
   * removed is not served. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  /* Nor does the 2025 handshake's notification turn the 2025 list changes on. */
  json_decref(send_msg(w, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", NULL, NULL));
  assert_false(w->session.initialized);
}

/* A stdio connection that began in 2025 stays there: a 2026-07-28 request is refused, the
 * discover probe too, so that what it says supported is what the connection takes. */
static void test_stdio_pinned_to_2025(void **state) {
  world *w = *state;
  json_t *r = send_msg(w,
                       INITIALIZE(1, "2025-06-18", "{}"),
                       NULL, NULL);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_LEGACY);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  json_t *supported = json_object_get(error_data(r), "supported");
  assert_string_equal(json_string_value(json_array_get(supported, 0)), "2025-06-18");
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  supported = json_object_get(error_data(r), "supported");
  assert_string_equal(json_string_value(json_array_get(supported, 0)), "2025-06-18");
  json_decref(r);
  /* What it refuses is the version the request claimed, as sent; a claim without one is
   * malformed. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"2099-01-01\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_UNSUPPORTED_VERSION);
  json_t *data = error_data(r);
  assert_string_equal(json_string_value(json_object_get(data, "requested")), "2099-01-01");
  json_decref(r);
  /* A claim of the connection's own version is refused as malformed: refused as unsupported,
   * it would list as supported the version it refused. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"2025-06-18\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_non_null(strstr(error_message(r), "send it without"));
  json_decref(r);
  /* On a method 2025 lacks, the discover probe included, it is the method that is wrong. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"server/discover\",\"params\":{"
               "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2025-06-18\","
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":7,"
               "\"io.modelcontextprotocol/clientCapabilities\":{}}}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  assert_int_equal(w->session.era, TG_MCP_ERA_LEGACY);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/list\"}", NULL, NULL);
  assert_non_null(json_object_get(result_of(r), "tools"));
  json_decref(r);
}

/* completion/complete offers values for an argument of a prompt or resource template the
 * server has; any other reference is invalid params. */
static void test_completion(void **state) {
  world *w = *state;
  /* A ref, the argument named and the context given (or none); then how many values it
   * offers, or -1: refused. */
  static const struct {
    const char *ref, *argument, *context;
    int offered;
  } cases[] = {
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg1", NULL, 3},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg2", NULL, 0},
      {"{\"type\":\"ref/resource\",\"uri\":\"test://template/{id}/data\"}", "id", NULL, 0},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg3", NULL, -1},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_simple_prompt\"}", "arg1", NULL, -1},
      {"{\"type\":\"ref/resource\",\"uri\":\"test://template/{id}/data\"}", "arg1", NULL, -1},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg1",
       "{\"arguments\":{\"arg2\":\"x\"}}", 3},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg1",
       "{\"arguments\":{\"arg2\":5}}", -1},
      {"{\"type\":\"ref/prompt\",\"name\":\"test_prompt_with_arguments\"}", "arg1",
       "\"arg2\"", -1},
      {"{\"type\":\"ref/prompt\",\"name\":\"no_such_prompt\"}", "arg1", NULL, -1},
      {"{\"type\":\"ref/resource\",\"uri\":\"test://nothing/{id}\"}", "id", NULL, -1},
      {"{\"type\":\"ref/tool\",\"name\":\"test_simple_text\"}", "arg1", NULL, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"completion/complete\",\"params\":{"
             "\"ref\":%s,\"argument\":{\"value\":\"test\",\"name\":\"%s\"},%s%s%s" MODERN_META "}}",
             cases[i].ref, cases[i].argument, cases[i].context ? "\"context\":" : "",
             cases[i].context ? cases[i].context : "", cases[i].context ? "," : "");
    json_t *r = send_msg(w, text, NULL, NULL);
    if (cases[i].offered >= 0) {
      json_t *values = json_object_get(json_object_get(result_of(r), "completion"), "values");
      assert_int_equal(json_array_size(values), cases[i].offered);
      if (cases[i].offered) assert_string_equal(json_string_value(json_array_get(values, 1)), "testing");
    } else {
      assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    }
    json_decref(r);
  }
  /* A ref of no known type is named by its type. */
  json_t *r = send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"completion/complete\","
                       "\"params\":{\"ref\":{\"type\":\"ref/bogus\"},"
                       "\"argument\":{\"value\":\"t\",\"name\":\"a\"}," MODERN_META "}}",
                       NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_t *data = error_data(r);
  assert_string_equal(json_string_value(json_object_get(data, "type")), "ref/bogus");
  assert_null(json_object_get(data, "uri"));
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
  /* The greatest 64-bit integer is named back as sent. */
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_tool_with_progress\",\"_meta\":{\"progressToken\":9223372036854775807}}}",
               NULL, NULL);
  assert_non_null(json_object_get(result_of(r), "content"));
  json_decref(r);
  last = json_object_get(json_array_get(w->sent, 2), "params");
  assert_true(json_integer_value(json_object_get(last, "progressToken")) == INT64_MAX);
  json_array_clear(w->sent);
  /* A token is a string or a number: any other is refused before the call, which sends
   * nothing and writes no row. */
  long logs = fixture_count(w->f, "agent_run_logs");
  static const struct {
    const char *method, *token;
  } refused[] = {{"tools/call", "null"}, {"tools/call", "{\"x\":[1]}"}, {"tools/call", "true"},
                 {"tools/call", "[1]"},
                 /* Past 64 bits: read as a double, it could not be named back as sent. */
                 {"tools/call", "18446744073709551617"}, {"tools/call", "-1e19"},
                 /* So on any method, though only tools/call sends progress. */
                 {"tools/list", "{\"x\":1}"}, {"ping", "{\"x\":1}"}, {"prompts/list", "{}"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char text[200];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"%s\",\"params\":{\"name\":"
             "\"test_tool_with_progress\",\"_meta\":{\"progressToken\":%s}}}",
             refused[i].method, refused[i].token);
    r = send_msg(w, text, NULL, NULL);
    assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    json_decref(r);
  }
  /* So is a _meta that is no object. */
  static const char *const metas[] = {"\"x\"", "[1]", "null", "1"};
  for (size_t i = 0; i < sizeof metas / sizeof metas[0]; i++) {
    char text[200];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"test_tool_with_progress\",\"_meta\":%s}}",
             metas[i]);
    r = send_msg(w, text, NULL, NULL);
    assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
                        "params._meta must be an object");
    json_decref(r);
  }
  assert_int_equal(json_array_size(w->sent), 0);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);
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

/* Elicitation came with 2025-06-18: a session of an older revision is not asked, whatever
 * its client declares (sampling, older, is kept). */
static void test_an_older_session_is_not_asked_to_elicit(void **state) {
  world *w = *state;
  handshake(w, INITIALIZE(1, "2025-03-26", "{\"elicitation\":{},\"sampling\":{}}"));
  assert_null(json_object_get(w->session.client_capabilities, "elicitation"));
  assert_non_null(json_object_get(w->session.client_capabilities, "sampling"));
  json_t *r =
      send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_elicitation\",\"arguments\":{\"message\":\"who?\"}}}",
               NULL, NULL);
  assert_int_equal(json_array_size(w->sent), 0);
  /* Refused as any input the client did not declare, naming what it would need. */
  json_t *error = json_object_get(json_object_get(result_of(r), "structuredContent"), "error");
  assert_string_equal(json_string_value(json_object_get(error, "code")), "precondition_failed");
  assert_non_null(json_object_get(
      json_object_get(json_object_get(error, "details"), "requiredCapabilities"), "elicitation"));
  json_decref(r);
}

static void test_elicitation_asks_the_client(void **state) {
  world *w = *state;
  json_decref(send_msg(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{}}"), NULL, NULL));
  w->answer = json_pack("{s:s,s:{s:s,s:s}}", "action", "accept", "content", "username", "ada",
                        "email", "ada@example.com");
  /* Nothing is asked of a client before its notifications/initialized: the tool fails. */
  static const char ask[] =
      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_elicitation\",\"arguments\":{\"message\":\"who?\"}}}";
  json_t *r = send_msg(w, ask, NULL, NULL);
  assert_true(json_is_true(json_object_get(result_of(r), "isError")));
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
                          result_of(r), "structuredContent"), "error"), "code")),
                      "precondition_failed");
  assert_int_equal(json_array_size(w->sent), 0);
  json_decref(r);
  /* The session as it stands now has it, where the request's copy does not: it is asked. */
  w->initialized_since = true;
  r = send_msg(w, ask, NULL, NULL);
  assert_null(json_object_get(result_of(r), "isError"));
  assert_int_equal(json_array_size(w->sent), 1);
  json_decref(r);
  json_array_clear(w->sent);
  w->initialized_since = false;
  assert_null(send_msg(w, INITIALIZED, NULL, NULL));
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_elicitation\",\"arguments\":{\"message\":\"who?\"}}}",
               NULL, NULL);
  json_t *text = json_object_get(json_array_get(json_object_get(result_of(r), "content"), 0), "text");
  assert_non_null(strstr(json_string_value(text), "ada"));
  assert_string_equal(json_string_value(json_object_get(json_array_get(w->sent, 0), "method")), "elicitation/create");
  json_decref(r);
  /* An answer that is no ElicitResult, or not what its requestedSchema asks, never reaches
   * the tool: the call fails with the client's answer in its envelope. */
  static const char *const misfits[] = {"{\"action\":\"bogus\"}",
                                        "{\"action\":\"accept\",\"content\":{\"username\":5}}"};
  for (size_t i = 0; i < sizeof misfits / sizeof misfits[0]; i++) {
    json_decref(w->answer);
    w->answer = json_loads(misfits[i], 0, NULL);
    r = send_msg(w,
                 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"test_elicitation\",\"arguments\":{\"message\":\"who?\"}}}",
                 NULL, NULL);
    assert_true(json_is_true(json_object_get(result_of(r), "isError")));
    json_t *details = json_object_get(
        json_object_get(json_object_get(result_of(r), "structuredContent"), "error"), "details");
    json_t *client_error = json_object_get(details, "clientError");
    assert_string_equal(json_string_value(json_object_get(client_error, "message")),
                        "The client's result does not answer the request");
    assert_true(json_equal(json_object_get(json_object_get(client_error, "data"), "result"),
                           w->answer));
    json_decref(r);
  }
  json_array_clear(w->sent);
  /* Sampling was not declared: the tool fails cleanly instead of asking. */
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
               "\"test_sampling\",\"arguments\":{\"prompt\":\"hi\"}}}",
               NULL, NULL);
  assert_true(json_is_true(json_object_get(result_of(r), "isError")));
  assert_int_equal(json_array_size(w->sent), 0);
  json_decref(r);
}

/* What a tool answered over 2025 (its first text), the methods the client was asked, in
 * order, and the audit rows of rounds of test.input_required.result_multi_round. */
static const char *first_text(json_t *reply) {
  return json_string_value(
      json_object_get(json_array_get(json_object_get(result_of(reply), "content"), 0), "text"));
}

/* 2025 has no InputRequiredResult: what one asks goes to the client as requests of their
 * own, and the next round runs with the answers (and the request state), each round a call
 * audited as any. */
static void test_input_requests_asked_on_2025(void **state) {
  world *w = *state;
  json_decref(send_msg(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{},\"roots\":{}}"),
                       NULL, NULL));
  w->answer = json_pack("{s:s,s:{s:s,s:s}}", "action", "accept", "content", "name", "ada",
                        "color", "green");
  static const char call[] = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                             "\"name\":\"test_input_required_result_elicitation\"}}";
  /* Before the client's notifications/initialized, what the round asks cannot go to it. */
  json_t *r = send_msg(w, call, NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_array_size(w->sent), 0);
  json_decref(r);
  assert_null(send_msg(w, INITIALIZED, NULL, NULL));
  long rounds = elicitation_calls_audited(w, "INFO");
  r = send_msg(w, call, NULL, NULL);
  assert_string_equal(first_text(r), "Hello, ada!");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(w->sent, 0), "method")),
                      "elicitation/create");
  assert_int_equal(elicitation_calls_audited(w, "INFO"), rounds + 2);
  /* Two rounds, the second asked with the state the first returned. */
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_input_required_result_multi_round\"}}", NULL, NULL);
  assert_string_equal(first_text(r), "ada likes green");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 3);
  /* Their ids are drawn, not counted: a count would tell each client how many questions the
   * others were asked. */
  json_int_t before = json_integer_value(json_object_get(json_array_get(w->sent, 1), "id"));
  json_int_t after = json_integer_value(json_object_get(json_array_get(w->sent, 2), "id"));
  assert_true(after - before != 1 && after != before);
  /* A declined question ends the asking; so does the prompt's. */
  json_decref(w->answer);
  w->answer = json_pack("{s:s}", "action", "decline");
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_input_required_result_elicitation\"}}", NULL, NULL);
  assert_string_equal(first_text(r), "No name was given");
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"prompts/get\",\"params\":{"
                  "\"name\":\"test_input_required_result_prompt\"}}", NULL, NULL);
  json_t *said = json_object_get(
      json_object_get(json_array_get(json_object_get(result_of(r), "messages"), 0), "content"),
      "text");
  assert_string_equal(json_string_value(said), "Use this context: none given");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 5);
  /* An answer that does not fit what was asked, or an error, fails the request, naming the
   * input; and the round that asked stays audited, the one after never ran: the request's
   * end has a row of its own. */
  json_decref(w->answer);
  w->answer = json_pack("{s:s,s:{s:i}}", "action", "accept", "content", "name", 5);
  rounds = elicitation_calls_audited(w, "INFO");
  long ends = elicitation_ends_audited(w);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_input_required_result_elicitation\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_t *data = error_data(r);
  assert_string_equal(json_string_value(json_object_get(data, "key")), "user_name");
  json_decref(r);
  assert_int_equal(elicitation_calls_audited(w, "INFO"), rounds + 1);
  w->answer_error = json_pack("{s:i,s:s}", "code", -32601, "message", "Method not found");
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_input_required_result_elicitation\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  data = error_data(r);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(data, "error"), "code")),
                   -32601);
  json_decref(r);
  assert_int_equal(elicitation_ends_audited(w), ends + 2);
  /* What the client did not declare it can answer is not asked: -32021 naming it, in a 200
   * as every error of a 2025 request (the 400 is 2026-07-28's). */
  size_t asked = json_array_size(w->sent);
  int status = 0;
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_input_required_result_sampling\"}}", NULL, &status);
  assert_int_equal(error_code(r), TG_RPC_MISSING_CAPABILITY);
  assert_int_equal(status, 200);
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), asked);
}

/* ---- Streamable HTTP ---- */

#define HANG_GUARD_S FIXTURE_HANG_GUARD_S

/* ---- tasks (io.modelcontextprotocol/tasks) ---- */

#define TASKS_CAPS "{\"elicitation\":{},\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}"

/* A 2026-07-28 request as principal, from a client with capabilities caps (JSON text);
 * members: more params members, or "". Returns the reply message. */
static json_t *request_as(world *w, const char *principal, const char *caps, const char *method,
                          const char *members, int *status) {
  static int next_id;
  char *text = NULL;
  assert_true(asprintf(&text,
                       "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\",\"params\":{%s%s\"_meta\":{"
                       "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                       "\"io.modelcontextprotocol/clientCapabilities\":%s}}}",
                       ++next_id, method, members, *members ? "," : "", caps) > 0);
  json_t *r = send_as(w, principal, text, NULL, status);
  free(text);
  return r;
}

/* The same from a client of principal taking tasks; the reply must be a result (a new
 * reference). */
static json_t *task_call_as(world *w, const char *principal, const char *method,
                            const char *members) {
  json_t *r = request_as(w, principal, TASKS_CAPS, method, members, NULL);
  json_t *res = json_incref(result_of(r));
  json_decref(r);
  return res;
}

static json_t *task_call(world *w, const char *method, const char *members) {
  return task_call_as(w, w->agent, method, members);
}

/* Members of a request retrying a round of a call (call: its name and arguments): the
 * requestState the round's result gave, JSON-quoted, and answers (JSON text of the
 * inputResponses); malloc'd. */
static char *retry_members(const char *call, json_t *result, const char *answers) {
  char *state = json_dumps(json_object_get(result, "requestState"), JSON_ENCODE_ANY);
  char *members = NULL;
  assert_non_null(state);
  assert_true(asprintf(&members, "%s,\"requestState\":%s,\"inputResponses\":%s", call, state,
                       answers) > 0);
  free(state);
  return members;
}

/* Starts a tool call as principal that becomes a task; returns its id (malloc'd). */
static char *start_task_as(world *w, const char *principal, const char *tool, const char *args) {
  char *members = NULL;
  assert_true(asprintf(&members, "\"name\":\"%s\",\"arguments\":%s", tool, args) > 0);
  json_t *res = task_call_as(w, principal, "tools/call", members);
  free(members);
  assert_string_equal(str(res, "resultType"), "task");
  /* Where it stands as the client learns of it (it may have moved on already), without
   * what tasks/get tells. */
  assert_non_null(str(res, "status"));
  assert_null(json_object_get(res, "inputRequests"));
  assert_null(json_object_get(res, "result"));
  assert_null(json_object_get(res, "error"));
  char *id = strdup(str(res, "taskId"));
  json_decref(res);
  return id;
}

static char *start_task(world *w, const char *tool, const char *args) {
  return start_task_as(w, w->agent, tool, args);
}

/* tasks/get, tasks/update (responses: JSON text) or tasks/cancel of id as principal;
 * returns the reply message. */
static json_t *task_action_as(world *w, const char *principal, const char *method, const char *id,
                              const char *responses) {
  char *members = NULL;
  assert_true(asprintf(&members, "\"taskId\":\"%s\"%s%s", id, responses ? ",\"inputResponses\":" : "",
                       responses ? responses : "") > 0);
  json_t *r = request_as(w, principal, TASKS_CAPS, method, members, NULL);
  free(members);
  return r;
}

/* tasks/get of id as principal: the result (a new reference). */
static json_t *get_task_as(world *w, const char *principal, const char *id) {
  json_t *r = task_action_as(w, principal, "tasks/get", id, NULL);
  json_t *res = json_incref(result_of(r));
  json_decref(r);
  return res;
}

static json_t *get_task(world *w, const char *id) { return get_task_as(w, w->agent, id); }

/* Polls principal's task id until its status is status (a hang guard of 30 s, not a timing
 * check); returns the last tasks/get result. */
static json_t *await_task_as(world *w, const char *principal, const char *id, const char *status) {
  for (int i = 0; i < 3000; i++) {
    json_t *res = get_task_as(w, principal, id);
    const char *now = str(res, "status");
    if (now && strcmp(now, status) == 0) return res;
    json_decref(res);
    usleep(10000);
  }
  fail_msg("task %s never became %s", id, status);
  return NULL;
}

static json_t *await_task(world *w, const char *id, const char *status) {
  return await_task_as(w, w->agent, id, status);
}

/* An acknowledgement: an empty result but for resultType and _meta. */
static void assert_ack(json_t *reply) {
  json_t *res = result_of(reply);
  assert_string_equal(str(res, "resultType"), "complete");
  assert_int_equal(json_object_size(res), 2);
  json_decref(reply);
}

/* principal's tasks/get, tasks/update (responses: JSON text) or tasks/cancel of id is refused
 * with -32602: an unknown task, someone else's (refused alike), or answers of the wrong shape. */
static void assert_task_action_refused(world *w, const char *principal, const char *method,
                                const char *id, const char *responses) {
  json_t *r = task_action_as(w, principal, method, id, responses);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
}

/* A confirm_delete task of filename parked on its input request; returns its id (malloc'd)
 * and, unless parked is NULL, the task as parked (a new reference). */
static char *park_confirm(world *w, const char *filename, json_t **parked) {
  char args[128];
  snprintf(args, sizeof args, "{\"filename\":\"%s\"}", filename);
  char *id = start_task(w, "confirm_delete", args);
  json_t *task = await_task(w, id, "input_required");
  if (parked) *parked = task;
  else json_decref(task);
  return id;
}

/* The audit rows of task id's end that no call of it wrote, at level, saying what begins
 * with why. */
static long end_rows(world *w, const char *id, const char *level, const char *why) {
  return fixture_count_where(w->f,
                             "SELECT COUNT(*) AS n FROM agent_run_logs"
                             " WHERE json_extract(metadata, '$.taskId') = $1"
                             " AND json_extract(metadata, '$.end') AND level = $2"
                             " AND substr(message, 1, length($3)) = $3",
                             json_pack("[sss]", id, level, why));
}

/* The audit rows of task id's end that no call of it wrote, of tool, in run. */
static long end_rows_in_run(world *w, const char *id, const char *tool, const char *run) {
  return fixture_count_where(w->f,
                             "SELECT COUNT(*) AS n FROM agent_run_logs"
                             " WHERE json_extract(metadata, '$.taskId') = $1"
                             " AND json_extract(metadata, '$.end') AND step = 'tool:' || $2"
                             " AND run_id = $3",
                             json_pack("[sss]", id, tool, run));
}

/* Cancels task id and waits until it is cancelled. */
static void cancel_task(world *w, const char *id) {
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  json_decref(await_task(w, id, "cancelled"));
}

static int feed_send(void *self, json_t *msg) {
  feed *f = self;
  pthread_mutex_lock(&f->lock);
  if (f->refuses_tasks && strcmp(str(msg, "method"), "notifications/tasks") == 0) {
    pthread_mutex_unlock(&f->lock);
    json_decref(msg);
    return TG_E_IO;
  }
  int r = json_array_append_new(f->got, msg);
  pthread_cond_broadcast(&f->more);
  pthread_mutex_unlock(&f->lock);
  return r < 0 ? TG_E_NOMEM : TG_OK;
}

static size_t feed_count(feed *f) {
  pthread_mutex_lock(&f->lock);
  size_t n = json_array_size(f->got);
  pthread_mutex_unlock(&f->lock);
  return n;
}

/* The params of the index-th message f receives (borrowed), which must be a method
 * notification of subscription sub (a hang guard of 30 s, not a timing check). */
static json_t *feed_at(feed *f, size_t index, const char *method, int sub) {
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_S * 1000;
  pthread_mutex_lock(&f->lock);
  for (int64_t left; json_array_size(f->got) <= index && (left = deadline - tg_monotonic_ms()) > 0;)
    tg_timed_wait(&f->more, &f->lock, left);
  json_t *msg = json_array_get(f->got, index);
  pthread_mutex_unlock(&f->lock);
  if (!msg) fail_msg("message %zu never came", index);
  assert_string_equal(str(msg, "method"), method);
  json_t *params = json_object_get(msg, "params");
  json_t *meta = json_object_get(params, "_meta");
  json_t *sub_id = json_object_get(meta, "io.modelcontextprotocol/subscriptionId");
  assert_int_equal(json_integer_value(sub_id), sub);
  return params;
}

/* The index-th notifications/tasks of subscription sub on f: its status must be status. */
static json_t *told(feed *f, size_t index, int sub, const char *status) {
  json_t *task = feed_at(f, index, "notifications/tasks", sub);
  assert_string_equal(str(task, "status"), status);
  return task;
}

/* Opens subscriptions/listen number id as principal on listen stream slot, with filter
 * (JSON text); returns its feed, and the acknowledged filter in *acked (borrowed). */
static feed *listen_as(world *w, const char *principal, size_t slot, int id, const char *filter,
                       json_t **acked) {
  feed *f = &w->listens[slot].feed;
  assert_null(w->listens[slot].watch);
  assert_int_equal(tg_mcp_watch_new(feed_send, f, &w->listens[slot].watch), 0);
  char *text = NULL;
  assert_true(asprintf(&text,
                       "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"subscriptions/listen\","
                       "\"params\":{\"notifications\":%s,\"_meta\":{"
                       "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                       "\"io.modelcontextprotocol/clientCapabilities\":" TASKS_CAPS "}}}",
                       id, filter) > 0);
  w->watch = w->listens[slot].watch;
  assert_null(send_as(w, principal, text, NULL, NULL)); /* answered only when it ends */
  free(text);
  *acked = json_object_get(feed_at(f, 0, "notifications/subscriptions/acknowledged", id),
                           "notifications");
  return f;
}

/* A listen filter naming id (and again, and a task nobody holds); malloc'd. */
static char *filter_of(const char *id) {
  char *filter = NULL;
  assert_true(asprintf(&filter, "{\"taskIds\":[\"%s\",\"%s\",\"0123\"]}", id, id) > 0);
  return filter;
}

/* inputResponses accepting every request of a DetailedTask with content (JSON text). */
static char *accept_all(json_t *task, const char *content) {
  char *text = strdup("{"), *more = NULL;
  const char *key;
  json_t *request;
  json_object_foreach(json_object_get(task, "inputRequests"), key, request) {
    assert_true(asprintf(&more, "%s%s\"%s\":{\"action\":\"accept\",\"content\":%s}", text,
                         text[1] ? "," : "", key, content) > 0);
    free(text);
    text = more;
  }
  assert_true(asprintf(&more, "%s}", text) > 0);
  free(text);
  return more;
}

/* Resources, prompts and completions are declared, and served, only where there are some:
 * the conformance fixtures are all there are. */
static void test_only_what_is_served_is_declared(void **state) {
  world *w = *state;
  static const char *const fixtures_only[] = {"prompts", "resources", "completions"};
  for (int with = 1; with >= 0; with--) {
    w->srv.fixtures = with;
    tg_mcp_session_done(&w->session); /* a new connection */
    json_t *d = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\","
                            "\"params\":{" MODERN_META "}}", NULL, NULL);
    json_t *r = send_msg(w, INITIALIZE(1, "2025-11-25", "{}"), NULL, NULL);
    json_t *caps = json_object_get(result_of(r), "capabilities");
    json_t *modern_caps = json_object_get(result_of(d), "capabilities");
    assert_non_null(json_object_get(caps, "tools"));
    assert_non_null(json_object_get(modern_caps, "tools"));
    for (size_t i = 0; i < 3; i++) {
      assert_int_equal(json_object_get(caps, fixtures_only[i]) != NULL, with);
      assert_int_equal(json_object_get(modern_caps, fixtures_only[i]) != NULL, with);
    }
    json_decref(r);
    json_decref(d);
    r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"prompts/list\"}", NULL, NULL);
    if (with) assert_non_null(json_object_get(result_of(r), "prompts"));
    else assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
    json_decref(r);
    tg_mcp_session_done(&w->session); /* a 2026-07-28 connection */
    int status = 0;
    r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"resources/read\",\"params\":{"
                    "\"uri\":\"test://static-text\"," MODERN_META "}}", NULL, &status);
    if (with) assert_non_null(json_object_get(result_of(r), "contents"));
    else assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
    assert_int_equal(status, with ? 200 : 404);
    json_decref(r);
    /* A listen asking for prompt list changes is not told it has them. */
    feed *f = &w->listens[with].feed;
    assert_int_equal(tg_mcp_watch_new(feed_send, f, &w->listens[with].watch), 0);
    w->watch = w->listens[with].watch;
    assert_null(send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"subscriptions/listen\","
                            "\"params\":{\"notifications\":{\"toolsListChanged\":true,"
                            "\"promptsListChanged\":true}," MODERN_META "}}", NULL, NULL));
    json_t *acked = json_object_get(
        feed_at(f, 0, "notifications/subscriptions/acknowledged", 5), "notifications");
    assert_true(json_is_true(json_object_get(acked, "toolsListChanged")));
    assert_int_equal(json_is_true(json_object_get(acked, "promptsListChanged")), with);
  }
}

/* initialize takes its capabilities as an object (required: {} declares none), those it reads
 * (roots, sampling, elicitation) as objects, and its clientInfo, when given, as an
 * Implementation (a name and a version), or refuses to open the session; the session keeps of the
 * capabilities only what is read of them; discover gives the same instructions. */
static void test_initialize_checks_its_params(void **state) {
  world *w = *state;
  static const char *const bad[] = {
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
      "\"2025-11-25\",\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}",
      INITIALIZE(1, "2025-11-25", "null"),
      INITIALIZE(1, "2025-11-25", "\"x\""),
      INITIALIZE(1, "2025-11-25", "{\"elicitation\":true}"),
      INITIALIZE(1, "2025-11-25", "{\"sampling\":[]}"),
      INITIALIZE(1, "2025-11-25", "{\"roots\":\"x\"}"),
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
      "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":5}}",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
      "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":1}}}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json_t *r = send_msg(w, bad[i], NULL, NULL);
    assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    json_decref(r);
    assert_string_equal(w->session.version, "");
  }
  json_t *r = send_msg(w, INITIALIZE(1, "2025-11-25",
                                     "{\"experimental\":{\"x\":[1,2,3]},\"elicitation\":{\"url\":{"
                                     "\"a\":1},\"x\":5},\"sampling\":{\"tools\":{}},\"roots\":{"
                                     "\"listChanged\":true},\"x\":{}}"),
                       NULL, NULL);
  assert_non_null(result_of(r));
  json_decref(r);
  json_t *kept = json_loads("{\"elicitation\":{\"url\":{}},\"sampling\":{},\"roots\":{}}", 0, NULL);
  assert_true(json_equal(w->session.client_capabilities, kept));
  json_decref(kept);
  tg_mcp_session_done(&w->session);
  tg_mcp_session_init(&w->session);
  json_t *d = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\","
                          "\"params\":{" MODERN_META "}}", NULL, NULL);
  r = send_msg(w, INITIALIZE(3, "2025-11-25", "{}"), NULL, NULL);
  const char *said = json_string_value(json_object_get(result_of(r), "instructions"));
  assert_non_null(said);
  assert_string_equal(json_string_value(json_object_get(result_of(d), "instructions")), said);
  json_decref(r);
  json_decref(d);
}

/* prompts/get takes arguments as strings, and null as none (as tools/call does). */
static void test_prompt_arguments_are_strings(void **state) {
  world *w = *state;
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/get\",\"params\":{"
                          "\"name\":\"test_prompt_with_arguments\",\"arguments\":{\"arg1\":\"a\","
                          "\"arg2\":{\"b\":1}}," MODERN_META "}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"prompts/get\",\"params\":{"
                  "\"name\":\"test_simple_prompt\",\"arguments\":null," MODERN_META "}}", NULL, NULL);
  assert_non_null(json_object_get(result_of(r), "messages"));
  json_decref(r);
}

/* The fixture prompt embedding a resource takes its URI only as one: MCP's schema asks an
 * embedded resource's uri to be a URI. */
static void test_an_embedded_resource_has_a_uri(void **state) {
  world *w = *state;
  static const struct {
    const char *uri;
    bool taken;
  } cases[] = {{"test://static-text", true}, {"file:///a%20b", true}, {"x", false},
               {"test://a b", false}, {"1x:y", false}, {"", false},
               {"test://\u00e9", false}, {"test://a%2", false}, {"test://a%zz", false}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = NULL;
    assert_true(asprintf(&text,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/get\",\"params\":{"
                         "\"name\":\"test_prompt_with_embedded_resource\",\"arguments\":{"
                         "\"resourceUri\":\"%s\"}," MODERN_META "}}",
                         cases[i].uri) > 0);
    json_t *r = send_msg(w, text, NULL, NULL);
    free(text);
    if (cases[i].taken) assert_non_null(json_object_get(result_of(r), "messages"));
    else assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    json_decref(r);
  }
}

/* A template's resource is read only at a URI: its id is what the template's {id} expands to
 * (unreserved characters and percent-encoded octets), which the answer's uri repeats. */
static void test_a_template_resource_has_a_uri(void **state) {
  world *w = *state;
  static const struct {
    const char *id;
    bool found;
  } cases[] = {{"123", true},        {"a-b.c_d~e", true}, {"%C3%A9", true}, {"\\\"<>", false},
               {"a b", false},       {"\\u00e9", false}, {"%zz", false},   {"a%2", false},
               {"a/b", false},       {"a?b", false},      {"", false}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = NULL;
    assert_true(asprintf(&text,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":{"
                         "\"uri\":\"test://template/%s/data\"," MODERN_META "}}",
                         cases[i].id) > 0);
    json_t *r = send_msg(w, text, NULL, NULL);
    free(text);
    if (cases[i].found) {
      json_t *content = json_array_get(json_object_get(result_of(r), "contents"), 0);
      char uri[128];
      snprintf(uri, sizeof uri, "test://template/%s/data", cases[i].id);
      assert_string_equal(str(content, "uri"), uri);
    } else if (error_code(r) != TG_RPC_INVALID_PARAMS) {
      fail_msg("the id '%s' was read", cases[i].id);
    }
    json_decref(r);
  }
}

static void test_tasks_advertised_and_listed(void **state) {
  world *w = *state;
  json_t *res = task_call(w, "server/discover", "");
  json_t *ext = json_object_get(json_object_get(res, "capabilities"), "extensions");
  assert_non_null(json_object_get(ext, "io.modelcontextprotocol/tasks"));
  json_decref(res);
  res = task_call(w, "tools/list", "");
  json_t *tools = json_object_get(res, "tools");
  json_t *exec = json_object_get(find_tool(tools, "test_task_slow_compute"), "execution");
  assert_string_equal(str(exec, "taskSupport"), "optional");
  exec = json_object_get(find_tool(tools, "test_tool_with_task"), "execution");
  assert_string_equal(str(exec, "taskSupport"), "required");
  assert_non_null(find_tool(tools, "test_task_greet"));
  assert_null(json_object_get(find_tool(tools, "test_task_greet"), "execution"));
  json_decref(res);
  /* Without _meta, on this connection (which speaks 2026-07-28 now), it is told what it
   * lacks, not that tasks are unknown; a legacy session knows no tasks. */
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"x\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  tg_mcp_session_done(&w->session); /* a new connection */
  json_decref(send_msg(w, INITIALIZE(2, "2025-11-25", "{}"), NULL, NULL));
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"x\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  json_decref(r);
}

static void test_task_runs_and_is_audited(void **state) {
  world *w = *state;
  long logs = fixture_count(w->f, "agent_run_logs");
  json_t *res = task_call(w, "tools/call", "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":1,\"label\":\"sum\"}");
  assert_string_equal(str(res, "resultType"), "task");
  const char *id = str(res, "taskId");
  assert_int_equal(strlen(id), 32);
  assert_int_equal(json_integer_value(json_object_get(res, "ttlMs")), TG_MCP_TASK_TTL_MS);
  assert_int_equal(json_integer_value(json_object_get(res, "pollIntervalMs")), TG_MCP_TASK_POLL_MS);
  assert_non_null(str(res, "createdAt"));
  assert_null(json_object_get(res, "result"));
  /* Readable as soon as the client holds its id. */
  json_t *now = get_task(w, id);
  assert_string_equal(str(now, "resultType"), "complete");
  assert_string_equal(str(now, "taskId"), id);
  json_decref(now);
  json_t *done = await_task(w, id, "completed");
  json_t *content = json_object_get(json_object_get(done, "result"), "content");
  assert_string_equal(str(json_array_get(content, 0), "text"), "Computed sum in 1s");
  json_decref(done);
  /* Ended, it stays as it ended: a cancellation is acknowledged and changes nothing. */
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  done = get_task(w, id);
  assert_string_equal(str(done, "status"), "completed");
  json_decref(done);
  json_decref(res);
  /* One call, audited by tg_call like any other. */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  /* With no wait it is no task: the result comes at once. */
  res = task_call(w, "tools/call", "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":0}");
  assert_string_equal(str(res, "resultType"), "complete");
  assert_null(json_object_get(res, "taskId"));
  json_decref(res);
  /* A legacy task param never turns a call into a task. */
  res = task_call(w, "tools/call", "\"name\":\"greet\",\"arguments\":{\"name\":\"Ada\"},\"task\":{\"ttl\":1000}");
  assert_string_equal(str(json_array_get(json_object_get(res, "content"), 0), "text"), "Hello, Ada!");
  json_decref(res);
}

static void test_task_input_rounds(void **state) {
  world *w = *state;
  long logs = fixture_count(w->f, "agent_run_logs");
  json_t *parked;
  char *id = park_confirm(w, "a.txt", &parked);
  json_t *asked = json_object_get(parked, "inputRequests");
  assert_int_equal(json_object_size(asked), 1);
  const char *key = json_object_iter_key(json_object_iter(asked));
  assert_string_equal(str(json_object_iter_value(json_object_iter(asked)), "method"), "elicitation/create");
  char *answer = NULL;
  assert_true(asprintf(&answer, "{\"%s\":{\"action\":\"accept\",\"content\":{\"confirm\":true}}}", key) > 0);
  /* Keys not asked for are ignored, whatever they hold; an answer that is none to its
   * request is refused, and nothing of the update is taken. */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, "{\"nope\":{\"x\":1}}"));
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, "{\"nope\":null}"));
  char *wrong = NULL;
  assert_true(asprintf(&wrong, "{\"nope\":{\"x\":1},\"%s\":{\"action\":\"maybe\"}}", key) > 0);
  json_t *refused = task_action_as(w, w->agent, "tasks/update", id, wrong);
  free(wrong);
  assert_int_equal(error_code(refused), TG_RPC_INVALID_PARAMS);
  assert_string_equal(str(json_object_get(json_object_get(refused, "error"), "data"), "key"), key);
  json_decref(refused);
  /* Accepted, its content must hold what the form asked (a boolean confirm). */
  assert_true(asprintf(&wrong, "{\"%s\":{\"action\":\"accept\",\"content\":{\"confirm\":\"yes\"}}}", key) > 0);
  refused = task_action_as(w, w->agent, "tasks/update", id, wrong);
  free(wrong);
  assert_int_equal(error_code(refused), TG_RPC_INVALID_PARAMS);
  assert_string_equal(str(json_object_get(json_object_get(refused, "error"), "data"), "key"), key);
  json_decref(refused);
  json_t *still = get_task(w, id);
  assert_string_equal(str(still, "status"), "input_required");
  json_decref(still);
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, answer));
  json_t *done = await_task(w, id, "completed");
  assert_string_equal(str(json_array_get(json_object_get(json_object_get(done, "result"), "content"), 0), "text"),
                      "Deleted a.txt");
  /* Each round is a call of its own through the gate, whose audit row names the task. */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 2);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs"
                                       " WHERE json_extract(metadata, '$.taskId') = $1",
                                       json_pack("[s]", id)),
                   2);
  json_decref(done);
  json_decref(parked);
  free(answer);
  free(id);

  /* Two questions at once, answered one at a time. */
  id = start_task(w, "multi_input", "{}");
  parked = await_task(w, id, "input_required");
  asked = json_object_get(parked, "inputRequests");
  assert_int_equal(json_object_size(asked), 2);
  void *it = json_object_iter(asked);
  char *first = strdup(json_object_iter_key(it));
  char *second = strdup(json_object_iter_key(json_object_iter_next(asked, it)));
  json_decref(parked);
  assert_true(asprintf(&answer, "{\"%s\":{\"action\":\"accept\",\"content\":{\"name\":\"x\",\"confirm\":true}}}", first) > 0);
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, answer));
  free(answer);
  still = get_task(w, id);
  assert_string_equal(str(still, "status"), "input_required");
  assert_null(json_object_get(json_object_get(still, "inputRequests"), first));
  assert_non_null(json_object_get(json_object_get(still, "inputRequests"), second));
  json_decref(still);
  assert_true(asprintf(&answer, "{\"%s\":{\"action\":\"accept\",\"content\":{\"name\":\"x\",\"confirm\":true}}}", second) > 0);
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, answer));
  json_decref(await_task(w, id, "completed"));
  /* A second round: its request comes under a key of its own, its state back to the tool. */
  free(id);
  id = start_task(w, "multi_input", "{\"rounds\":2}");
  json_decref(await_task(w, id, "input_required"));
  assert_ack(task_action_as(w, w->agent, "tasks/update", id,
                            "{\"r1.name\":{\"action\":\"accept\",\"content\":{\"name\":\"x\"}},"
                            "\"r1.confirm\":{\"action\":\"accept\",\"content\":{\"confirm\":true}}}"));
  parked = await_task(w, id, "input_required");
  assert_non_null(json_object_get(json_object_get(parked, "inputRequests"), "r2.more"));
  assert_int_equal(json_object_size(json_object_get(parked, "inputRequests")), 1);
  json_decref(parked);
  /* The first round's keys are spent. */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id,
                            "{\"r1.name\":{\"action\":\"accept\",\"content\":{\"name\":\"y\"}}}"));
  still = get_task(w, id);
  assert_string_equal(str(still, "status"), "input_required");
  json_decref(still);
  assert_ack(task_action_as(w, w->agent, "tasks/update", id,
                            "{\"r2.more\":{\"action\":\"accept\",\"content\":{\"more\":\"no\"}}}"));
  done = await_task(w, id, "completed");
  assert_string_equal(str(json_array_get(json_object_get(json_object_get(done, "result"), "content"), 0), "text"),
                      "Received the answers of two rounds");
  json_decref(done);
  /* Nothing is asked any more: whatever comes is ignored, but for responses that are no
   * object. */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, "{\"k\":1}"));
  assert_task_action_refused(w, w->agent, "tasks/update", id, "[]");
  free(answer);
  free(first);
  free(second);
  free(id);
}

static void test_task_cancel(void **state) {
  world *w = *state;
  char *id = start_task(w, "slow_compute", "{\"seconds\":600}");
  cancel_task(w, id);
  /* Ended: cancelling again is acknowledged the same and changes nothing. */
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  json_t *res = get_task(w, id);
  assert_string_equal(str(res, "status"), "cancelled");
  assert_null(json_object_get(res, "result"));
  json_decref(res);
  /* Its call's own row tells of its end: no other. */
  assert_int_equal(end_rows(w, id, "INFO", ""), 0);
  free(id);
  /* One waiting for input ends as soon as its thread has written so, audited as such: no
   * call of it ran to tell. */
  id = park_confirm(w, "b.txt", NULL);
  cancel_task(w, id);
  assert_int_equal(end_rows(w, id, "INFO", "cancelled: its client cancelled it"), 1);
  free(id);
  /* One left running ends with the server (teardown): it is cancelled, and waited for. */
  free(start_task(w, "slow_compute", "{\"seconds\":60}"));
}

/* The end of a task of a run that no call of it told of is audited in that run. Its running
 * row names the run and the tool, for the server that ends it if this one is gone. */
static void test_a_task_end_is_audited_in_its_run(void **state) {
  world *w = *state;
  char run[TG_UUID_LEN + 1];
  attach_to_a_new_run(w, run);
  char *id = park_confirm(w, "c.txt", NULL);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM mcp_running_tasks WHERE id = $1"
                                       " AND run_id = $2 AND tool = 'test.task.confirm_delete'",
                                       json_pack("[ss]", id, run)),
                   1);
  cancel_task(w, id);
  assert_int_equal(end_rows(w, id, "INFO", "cancelled: its client cancelled it"), 1);
  assert_int_equal(end_rows_in_run(w, id, "test.task.confirm_delete", run), 1);
  free(id);
}

static void test_task_failures(void **state) {
  world *w = *state;
  char *id = start_task(w, "failing_job", "{}");
  json_t *res = await_task(w, id, "completed");
  /* A tool's error is the task's result... */
  assert_true(json_is_true(json_object_get(json_object_get(res, "result"), "isError")));
  json_decref(res);
  free(id);
  /* ...an unexpected failure is the task's error. */
  id = start_task(w, "protocol_error_job", "{}");
  res = await_task(w, id, "failed");
  json_t *error = json_object_get(res, "error");
  assert_int_equal(json_integer_value(json_object_get(error, "code")), TG_RPC_INTERNAL_ERROR);
  assert_null(json_object_get(res, "result"));
  /* Its statusMessage says why (the tasks text: a failed task SHOULD). */
  assert_string_equal(str(res, "statusMessage"), str(error, "message"));
  json_decref(res);
  free(id);
  assert_task_action_refused(w, w->agent, "tasks/get", "0123456789abcdef0123456789abcdef", NULL);
}

/* A task whose round asks for input its client cannot give fails with -32021; the round
 * failed before it committed, and its audit says so. */
static void test_a_task_asking_what_its_client_cannot_give_fails(void **state) {
  world *w = *state;
  json_t *r = request_as(w, w->agent, "{\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}",
                         "tools/call", "\"name\":\"confirm_delete\",\"arguments\":{\"filename\":\"x\"}",
                         NULL);
  char *id = strdup(str(result_of(r), "taskId"));
  json_decref(r);
  json_t *res = await_task(w, id, "failed");
  json_t *error = json_object_get(res, "error");
  assert_int_equal(json_integer_value(json_object_get(error, "code")), TG_RPC_MISSING_CAPABILITY);
  assert_non_null(json_object_get(json_object_get(json_object_get(error, "data"),
                                                  "requiredCapabilities"), "elicitation"));
  json_decref(res);
  free(id);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs WHERE step ="
                                       " 'tool:test.task.confirm_delete' AND level = 'INFO'",
                                       NULL),
                   0);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs WHERE step ="
                                       " 'tool:test.task.confirm_delete' AND message LIKE"
                                       " '%Missing required client capability%'",
                                       NULL),
                   1);
}

/* A task-only tool called by a client without tasks is refused, and audited so. */
static void test_tasks_need_the_extension(void **state) {
  world *w = *state;
  int status = 0;
  json_t *r = request_as(w, w->agent, "{}", "tools/call", "\"name\":\"failing_job\",\"arguments\":{}", &status);
  assert_int_equal(error_code(r), TG_RPC_MISSING_CAPABILITY);
  assert_int_equal(status, 400);
  assert_int_equal(ends_audited(w, "test.task.failing_job",
                                "failed: Missing required client capability"),
                   1);
  json_t *data = error_data(r);
  assert_non_null(json_object_get(json_object_get(json_object_get(data, "requiredCapabilities"), "extensions"),
                                  "io.modelcontextprotocol/tasks"));
  json_decref(r);
  r = request_as(w, w->agent, "{}", "tasks/get", "\"taskId\":\"x\"", &status);
  assert_int_equal(error_code(r), TG_RPC_MISSING_CAPABILITY);
  json_decref(r);
  /* A capability is an object: anything else is a malformed envelope. */
  r = request_as(w, w->agent, "{\"extensions\":{\"io.modelcontextprotocol/tasks\":null}}",
                 "tasks/get", "\"taskId\":\"x\"", &status);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_int_equal(status, 400);
  json_decref(r);
  /* An optional task runs as a plain call for a client without tasks. */
  r = request_as(w, w->agent, "{}", "tools/call", "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":1}", &status);
  assert_string_equal(str(result_of(r), "resultType"), "complete");
  assert_string_equal(str(json_array_get(json_object_get(result_of(r), "content"), 0), "text"), "Computed (unlabelled) in 1s");
  json_decref(r);
  /* Routing: Mcp-Name carries the task id. */
  tg_mcp_headers h = {.protocol_version = "2026-07-28", .method = "tasks/get", .name = "other"};
  r = send_msg(w,
               "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"x\",\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
               "\"io.modelcontextprotocol/clientCapabilities\":" TASKS_CAPS "}}}",
               &h, &status);
  assert_int_equal(error_code(r), TG_RPC_HEADER_MISMATCH);
  assert_int_equal(status, 400);
  json_decref(r);
  /* 2025-11-25 has no -32021: a task-only tool called there is not found (on a connection
   * of its own: this one speaks 2026-07-28). */
  tg_mcp_session_done(&w->session);
  tg_mcp_session_init(&w->session);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{\"name\":\"failing_job\"}}",
               NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_METHOD_NOT_FOUND);
  json_decref(r);
}

/* The gate on tasks: another principal holding the id reaches nothing and changes nothing. */
static void test_task_of_another_principal(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  json_t *parked;
  char *id = park_confirm(w, "c.txt", &parked);
  const char *key = json_object_iter_key(json_object_iter(json_object_get(parked, "inputRequests")));
  char *yes = NULL, *no = NULL;
  assert_true(asprintf(&yes, "{\"%s\":{\"action\":\"accept\",\"content\":{\"confirm\":true}}}", key) > 0);
  assert_true(asprintf(&no, "{\"%s\":{\"action\":\"accept\",\"content\":{\"confirm\":false}}}", key) > 0);
  char *before = fixture_snapshot(w->f, NULL);
  assert_task_action_refused(w, other, "tasks/get", id, NULL);
  assert_task_action_refused(w, other, "tasks/update", id, yes);
  assert_task_action_refused(w, other, "tasks/cancel", id, NULL);
  char *after = fixture_snapshot(w->f, NULL);
  assert_string_equal(before, after);
  /* Had the other's answer or cancellation been taken, the owner's "no" would not decide. */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, no));
  json_t *done = await_task(w, id, "completed");
  assert_string_equal(str(json_array_get(json_object_get(json_object_get(done, "result"), "content"), 0), "text"),
                      "Kept c.txt");
  json_decref(done);
  json_decref(parked);
  free(before);
  free(after);
  free(yes);
  free(no);
  free(id);
}

static void test_input_then_task(void **state) {
  world *w = *state;
  static const char call[] = "\"name\":\"test_tool_with_task\",\"arguments\":{}";
  json_t *res = task_call(w, "tools/call", call);
  /* The first round asks in the request itself: no task yet. */
  assert_string_equal(str(res, "resultType"), "input_required");
  assert_null(json_object_get(res, "taskId"));
  assert_non_null(json_object_get(json_object_get(res, "inputRequests"), "user_name"));
  char *members = retry_members(
      call, res, "{\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Alice\"}}}");
  json_decref(res);
  res = task_call(w, "tools/call", members);
  free(members);
  assert_string_equal(str(res, "resultType"), "task");
  assert_null(json_object_get(res, "requestState"));
  json_t *done = await_task(w, str(res, "taskId"), "completed");
  const char *text = str(json_array_get(json_object_get(json_object_get(done, "result"), "content"), 0), "text");
  assert_non_null(strstr(text, "Alice"));
  json_decref(done);
  json_decref(res);
}

/* Starts confirm_delete as principal and waits until it asks for input; returns its id. */
static char *park_task_as(world *w, const char *principal) {
  json_t *r = request_as(w, principal, TASKS_CAPS, "tools/call",
                         "\"name\":\"confirm_delete\",\"arguments\":{\"filename\":\"d.txt\"}", NULL);
  const char *task = str(result_of(r), "taskId");
  if (!task) fail_msg("no task: %s", json_dumps(r, JSON_COMPACT));
  char *id = strdup(task);
  json_decref(r);
  json_decref(await_task_as(w, principal, id, "input_required"));
  return id;
}

/* Asserts that principal may not start failing_job (which needs a task), for limit, and
 * that the refusal is audited. */
static void assert_refused(world *w, const char *principal, const char *limit, int max) {
  long ends = ends_audited(w, "test.task.failing_job", "failed: Too many %");
  json_t *r = request_as(w, principal, TASKS_CAPS, "tools/call", "\"name\":\"failing_job\",\"arguments\":{}", NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_t *data = error_data(r);
  assert_string_equal(str(data, "limit"), limit);
  assert_int_equal(json_integer_value(json_object_get(data, "max")), max);
  json_decref(r);
  assert_int_equal(ends_audited(w, "test.task.failing_job", "failed: Too many %"), ends + 1);
}

/* Asserts that a tool that may do without a task runs as a plain call for principal. */
static void assert_plain_call(world *w, const char *principal) {
  json_t *r = request_as(w, principal, TASKS_CAPS, "tools/call",
                         "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":1,\"label\":\"plain\"}", NULL);
  assert_string_equal(str(result_of(r), "resultType"), "complete");
  assert_string_equal(str(json_array_get(json_object_get(result_of(r), "content"), 0), "text"), "Computed plain in 1s");
  json_decref(r);
}

/* Tasks hold threads: a principal runs a few, a server a few more, and past them one more for
 * each principal running none, so that those filling the shared bound lock no one out. */
static void test_task_running_limits(void **state) {
  world *w = *state;
  enum { PRINCIPALS = TG_MCP_MAX_RUNNING_TASKS / TG_MCP_MAX_RUNNING_TASKS_EACH };
  enum { LATE = TG_MCP_MAX_RUNNING_TASKS_ALL - TG_MCP_MAX_RUNNING_TASKS };
  char who[PRINCIPALS][TG_UUID_LEN + 1], late[LATE + 1][TG_UUID_LEN + 1];
  char *ids[PRINCIPALS][TG_MCP_MAX_RUNNING_TASKS_EACH], *late_ids[LATE];
  for (int p = 0; p < PRINCIPALS + LATE + 1; p++) {
    char args[64];
    snprintf(args, sizeof args, "{\"slug\":\"runner%d\"}", p);
    fixture_agent(w->f, args, p < PRINCIPALS ? who[p] : late[p - PRINCIPALS]);
  }
  for (int p = 0; p < PRINCIPALS; p++) {
    for (int i = 0; i < TG_MCP_MAX_RUNNING_TASKS_EACH; i++) ids[p][i] = park_task_as(w, who[p]);
    /* One principal's share is spent; the others' are not. */
    if (p + 1 < PRINCIPALS) assert_refused(w, who[p], "runningEach", TG_MCP_MAX_RUNNING_TASKS_EACH);
  }
  /* The shared bound is spent: a principal running one already is refused... */
  late_ids[0] = park_task_as(w, late[0]);
  assert_refused(w, late[0], "running", TG_MCP_MAX_RUNNING_TASKS);
  /* ...but a tool that can do without a task still runs, as a plain call. */
  assert_plain_call(w, late[0]);
  /* Each principal running none starts one, until the server runs the most it ever does. */
  for (int p = 1; p < LATE; p++) late_ids[p] = park_task_as(w, late[p]);
  assert_refused(w, late[LATE], "running", TG_MCP_MAX_RUNNING_TASKS_ALL);
  for (int p = 0; p < PRINCIPALS; p++)
    for (int i = 0; i < TG_MCP_MAX_RUNNING_TASKS_EACH; i++) {
      assert_ack(task_action_as(w, who[p], "tasks/cancel", ids[p][i], NULL));
      free(ids[p][i]);
    }
  for (int p = 0; p < LATE; p++) {
    assert_ack(task_action_as(w, late[p], "tasks/cancel", late_ids[p], NULL));
    free(late_ids[p]);
  }
}

/* Counts the task threads that ended (tg_mcp_tasks_test_ended). */
static pthread_mutex_t ended_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ended_cond = PTHREAD_COND_INITIALIZER;
static int ended;

static void count_ended(void) {
  pthread_mutex_lock(&ended_lock);
  ended++;
  pthread_cond_broadcast(&ended_cond);
  pthread_mutex_unlock(&ended_lock);
}

/* Counts the task threads that end from now on; returns how many did so far. */
static int count_ends(void) {
  tg_mcp_tasks_test_ended = count_ended;
  pthread_mutex_lock(&ended_lock);
  int n = ended;
  pthread_mutex_unlock(&ended_lock);
  return n;
}

/* Waits until n task threads ended in all (a hang guard of 30 s, not a timing check). */
static void await_ended(int n) {
  int64_t deadline = tg_monotonic_ms() + 30000;
  pthread_mutex_lock(&ended_lock);
  for (int64_t left; ended < n && (left = deadline - tg_monotonic_ms()) > 0;)
    tg_timed_wait(&ended_cond, &ended_lock, left);
  int got = ended;
  pthread_mutex_unlock(&ended_lock);
  if (got < n) fail_msg("only %d task threads ended, not %d", got, n);
}

/* A listen naming a task the database cannot tell of (here, its table is gone) leaves it out,
 * and is served all the same. */
static void test_listen_leaves_out_what_the_database_cannot_tell(void **state) {
  world *w = *state;
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE mcp_running_tasks RENAME TO hidden", NULL, NULL), 0);
  json_t *acked;
  listen_as(w, w->agent, 0, 14,
            "{\"taskIds\":[\"0123456789abcdef0123456789abcdef\"],\"toolsListChanged\":true}", &acked);
  assert_int_equal(json_array_size(json_object_get(acked, "taskIds")), 0);
  assert_true(json_is_true(json_object_get(acked, "toolsListChanged")));
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE hidden RENAME TO mcp_running_tasks", NULL, NULL), 0);
}

/* A principal whose TG_MCP_MAX_KEPT_TASKS ended tasks the database keeps within their time
 * to live starts no more, so that none goes before the hour its client was told; the rows
 * past it do not count. */
static void test_task_kept_limit(void **state) {
  world *w = *state;
  char now[TG_ISO_LEN + 1], old[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms(), now);
  tg_iso8601(tg_now_ms() - TG_MCP_TASK_TTL_MS - 60000, old);
  for (int i = 0; i < TG_MCP_MAX_KEPT_TASKS; i++) {
    char id[40];
    snprintf(id, sizeof id, "kept%04d", i);
    assert_int_equal(tg_db_exec(w->f->db, "INSERT INTO mcp_tasks (id, principal_id, task, ended_at) "
                                          "VALUES ($1, $2, '{}', $3)",
                                json_pack("[s,s,s]", id, w->agent, i == 0 ? old : now), NULL),
                     0);
  }
  /* One of them past its hour: room for one more. */
  free(start_task(w, "failing_job", "{}"));
  assert_refused(w, w->agent, "kept", TG_MCP_MAX_KEPT_TASKS);
  assert_plain_call(w, w->agent);
}

/* A principal holds TG_MCP_MAX_TASKS in memory; an ended one makes room, read or not (its
 * end may have been read on another server): the database keeps how each ended. */
static void test_task_holding_limits(void **state) {
  world *w = *state;
  char *ids[TG_MCP_MAX_TASKS];
  int base = count_ends();
  /* Tasks that end on their own, none of them read here. */
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    ids[i] = start_task(w, "protocol_error_job", "{}");
    await_ended(base + i + 1);
  }
  /* Read, the fifth and the second go from memory first (the second is read as a listen
   * stream is told how it ended); then unread ones make room too. */
  json_decref(get_task(w, ids[4]));
  char *filter = filter_of(ids[1]);
  json_t *acked;
  told(listen_as(w, w->agent, 0, 12, filter, &acked), 1, 12, "failed");
  free(filter);
  char *more[2] = {start_task(w, "failing_job", "{}"), start_task(w, "failing_job", "{}")};
  char *unread_gone = start_task(w, "protocol_error_job", "{}");
  json_decref(await_task(w, unread_gone, "failed"));
  free(unread_gone);
  /* Gone from memory or not, each still reads as it ended. */
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    json_t *kept = get_task(w, ids[i]);
    assert_string_equal(str(kept, "status"), "failed");
    json_decref(kept);
  }
  for (int i = 0; i < 2; i++) {
    json_decref(await_task(w, more[i], "completed"));
    free(more[i]);
  }
  await_ended(base + TG_MCP_MAX_TASKS + 3);
  tg_mcp_tasks_test_ended = NULL;
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) free(ids[i]);
}

/* An ended task a listen stream watches, and could not be told of yet, stays in memory, where
 * the stream finds what it watches: others make room in its place, and the stream is told
 * once it can take it. */
static void test_a_listen_keeps_what_it_was_not_told(void **state) {
  world *w = *state;
  int base = count_ends();
  char *watched = start_task(w, "protocol_error_job", "{}");
  await_ended(base + 1);
  feed *f = &w->listens[0].feed;
  f->refuses_tasks = true;
  char *filter = filter_of(watched);
  json_t *acked;
  listen_as(w, w->agent, 0, 12, filter, &acked);
  free(filter);
  for (int i = 1; i < TG_MCP_MAX_TASKS + 2; i++) { /* past the bound: some leave memory */
    free(start_task(w, "protocol_error_job", "{}"));
    await_ended(base + i + 1);
  }
  f->refuses_tasks = false;
  free(start_task(w, "protocol_error_job", "{}")); /* a change: the stream is told again */
  told(f, 1, 12, "failed");
  await_ended(base + TG_MCP_MAX_TASKS + 3);
  tg_mcp_tasks_test_ended = NULL;
  free(watched);
}

/* A task its client cancelled makes room once it ended, read or not: the client may drop it
 * as it cancels (the tasks text), and 2026-07-28 has no tasks/list to find it again. */
static void test_cancelled_tasks_make_room(void **state) {
  world *w = *state;
  int base = count_ends();
  for (int round = 0; round < TG_MCP_MAX_TASKS / TG_MCP_MAX_RUNNING_TASKS_EACH; round++) {
    char *ids[TG_MCP_MAX_RUNNING_TASKS_EACH];
    for (int i = 0; i < TG_MCP_MAX_RUNNING_TASKS_EACH; i++)
      ids[i] = start_task(w, "slow_compute", "{\"seconds\":600}");
    for (int i = 0; i < TG_MCP_MAX_RUNNING_TASKS_EACH; i++) {
      assert_ack(task_action_as(w, w->agent, "tasks/cancel", ids[i], NULL));
      free(ids[i]);
    }
    await_ended(base + (round + 1) * TG_MCP_MAX_RUNNING_TASKS_EACH);
  }
  char *more = start_task(w, "failing_job", "{}");
  json_decref(await_task(w, more, "completed"));
  free(more);
  await_ended(base + TG_MCP_MAX_TASKS + 1);
  tg_mcp_tasks_test_ended = NULL;
}

/* From now on the database refuses new rows in table, as a full disk would (the trigger
 * refuse_<table> until dropped). */
static void refuse_rows(world *w, const char *table) {
  char *sql = NULL;
  assert_true(asprintf(&sql,
                       "CREATE TRIGGER refuse_%s BEFORE INSERT ON %s "
                       "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END",
                       table, table) > 0);
  assert_int_equal(tg_db_exec(w->f->db, sql, NULL, NULL), 0);
  free(sql);
}

/* A task is shown ended only once the database keeps how: when that write fails it shows
 * working, read or not (a read tries the write again), and holds its place; once the database
 * takes writes again the next task its principal starts writes them, and, kept there, they
 * make room for it. */
static void test_task_unkept_stays(void **state) {
  world *w = *state;
  refuse_rows(w, "mcp_tasks");
  char *ids[TG_MCP_MAX_TASKS];
  int base = count_ends();
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    ids[i] = start_task(w, "protocol_error_job", "{}");
    await_ended(base + i + 1); /* its thread tried to write how it ended */
    json_t *got = get_task(w, ids[i]);
    assert_string_equal(str(got, "status"), "working");
    json_decref(got);
  }
  tg_mcp_tasks_test_ended = NULL;
  assert_refused(w, w->agent, "held", TG_MCP_MAX_TASKS);
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), 0);
  /* The database takes them again: the next start writes them, and starts. */
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  char *next = park_task_as(w, w->agent);
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), TG_MCP_MAX_TASKS);
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    json_t *got = get_task(w, ids[i]);
    assert_string_equal(str(got, "status"), "failed");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(got, "error"), "code")),
                     TG_RPC_INTERNAL_ERROR);
    json_decref(got);
    free(ids[i]);
  }
  cancel_task(w, next);
  free(next);
}

/* Whether the database keeps task id. */
static bool kept_row(world *w, const char *id) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT id FROM mcp_tasks WHERE id = $1",
                                   json_pack("[s]", id), &row),
                   0);
  json_decref(row);
  return row != NULL;
}

/* How a task ended outlives the server that ran it: another reads it from the database, for
 * its principal only and for its time to live; the database keeps a bounded number. */
static void test_task_outlives_its_server(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  int base = count_ends();
  char *id = start_task(w, "slow_compute", "{\"seconds\":1,\"label\":\"kept\"}");
  await_ended(base + 1); /* its thread wrote how it ended */
  tg_mcp_tasks_test_ended = NULL;
  assert_true(kept_row(w, id));
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), 1);
  /* A server that stops cancels what still runs, and says why. */
  char *cut = start_task(w, "slow_compute", "{\"seconds\":600}");
  tg_mcp_server_done(&w->srv);
  start_server(w);
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "resultType"), "complete");
  assert_string_equal(str(got, "status"), "completed");
  json_t *content = json_object_get(json_object_get(got, "result"), "content");
  assert_string_equal(str(json_array_get(content, 0), "text"), "Computed kept in 1s");
  json_decref(got);
  /* Ended: acknowledged, and nothing changes. */
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, "{\"r1.x\":{\"action\":\"decline\"}}"));
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "completed");
  json_decref(got);
  /* A listener naming it, which this server no longer holds, is told how it ended, once. */
  char *filter = filter_of(id);
  json_t *acked;
  feed *f = listen_as(w, w->agent, 0, 13, filter, &acked);
  assert_int_equal(json_array_size(json_object_get(acked, "taskIds")), 1);
  assert_string_equal(str(told(f, 1, 13, "completed"), "taskId"), id);
  free(filter);
  got = get_task(w, cut);
  assert_string_equal(str(got, "status"), "cancelled");
  assert_string_equal(str(got, "statusMessage"), "The server stopped before the task ended");
  json_decref(got);
  /* Nobody else's. */
  const char *actions[] = {"tasks/get", "tasks/cancel"};
  for (size_t i = 0; i < 2; i++) {
    assert_task_action_refused(w, other, actions[i], id, NULL);
  }
  /* Past their time to live (every row made an hour older) tasks are unknown, and the next
   * task to end clears them out. */
  char long_ago[TG_ISO_LEN + 1];
  tg_iso8601(tg_now_ms() - TG_MCP_TASK_TTL_MS - 1, long_ago);
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE mcp_tasks SET ended_at = $1",
                              json_pack("[s]", long_ago), NULL),
                   0);
  assert_task_action_refused(w, w->agent, "tasks/get", id, NULL);
  /* A principal's rows are bounded (test_task_kept_limit) by refusing new tasks, not by
   * dropping old ones before their time: with one short of the bound, a task still starts,
   * and every row within its time to live stays. */
  assert_int_equal(
      tg_db_exec(w->f->db,
                 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2) "
                 "INSERT INTO mcp_tasks (id, principal_id, task, ended_at) "
                 "SELECT printf('%032d', i), $1, '{}', "
                 "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour', (i + 60) || ' seconds') FROM n",
                 json_pack("[s,i]", w->agent, TG_MCP_MAX_KEPT_TASKS - 1),
                 NULL),
      0);
  char *next = start_task(w, "protocol_error_job", "{}");
  for (int i = 0; !kept_row(w, next); i++) {
    if (i == HANG_GUARD_S * 100) fail_msg("task %s was never kept", next);
    usleep(10000);
  }
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), TG_MCP_MAX_KEPT_TASKS);
  assert_false(kept_row(w, id)); /* past its time to live, as cut's */
  assert_false(kept_row(w, cut));
  assert_true(kept_row(w, "00000000000000000000000000000001")); /* the oldest */
  free(next);
  free(cut);
  free(id);
}

/* How many servers hold a lock file in the data directory (they run tasks, or did). */
static int runner_files(world *w) {
  char *dir = NULL;
  assert_true(asprintf(&dir, "%s/task-runners", w->f->env.data_dir) > 0);
  DIR *d = opendir(dir);
  free(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".lock") != NULL;
  if (d) closedir(d);
  return n;
}

#define ELICITS "{\"elicitation\":{}}"
#define ANSWERS                                                                          \
  "{\"name\":{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}},"                    \
  "\"confirm\":{\"action\":\"accept\",\"content\":{\"confirm\":true}},"                    \
  "\"more\":{\"action\":\"accept\",\"content\":{\"more\":\"no\"}}}"

/* A request refused before its first round names, as its run, one its agent's calls cannot
 * attach to (another agent's; none; one ended): audited still, in no run, as a call refused
 * by the run gate is; and never in the other agent's run. */
static void test_a_refusal_naming_no_run_of_its_agent_is_audited_in_none(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1], theirs[TG_UUID_LEN + 1], finished[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  fixture_run_start(w->f, "bot2", theirs);
  fixture_run_start(w->f, "bot", finished);
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE agent_runs SET status = 'completed' WHERE id = $1",
                              json_pack("[s]", finished), NULL),
                   0);
  static const char tool[] = "test.input_required.result_elicitation",
                    refused[] = "failed: Invalid or expired requestState";
  const char *const runs[] = {theirs, "0190a000-0000-7000-8000-000000000000", finished};
  for (size_t i = 0; i < 3; i++) {
    w->run_id = runs[i];
    long refusals = ends_audited(w, tool, refused);
    json_t *r = request_as(w, w->agent, ELICITS, "tools/call",
                           "\"name\":\"test_input_required_result_elicitation\","
                           "\"requestState\":\"forged\",\"inputResponses\":" ANSWERS,
                           NULL);
    assert_string_equal(error_message(r), "Invalid or expired requestState");
    json_decref(r);
    assert_int_equal(ends_audited(w, tool, refused), refusals + 1);
  }
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs"
                                       " WHERE json_extract(metadata, '$.end')"
                                       " AND run_id IS NOT NULL",
                                       NULL),
                   0);
}

/* The rounds of multi_input asking twice, for a client without tasks, up to the second: its
 * sealed requestState, JSON-quoted (malloc'd). */
static char *multi_input_state(world *w) {
  static const char call[] = "\"name\":\"multi_input\",\"arguments\":{\"rounds\":2}";
  json_t *r = request_as(w, w->agent, ELICITS, "tools/call", call, NULL);
  char *members = retry_members(call, result_of(r), ANSWERS);
  json_decref(r);
  r = request_as(w, w->agent, ELICITS, "tools/call", members, NULL);
  free(members);
  assert_string_equal(str(result_of(r), "resultType"), "input_required");
  assert_non_null(json_object_get(json_object_get(result_of(r), "inputRequests"), "more"));
  char *sealed = json_dumps(json_object_get(result_of(r), "requestState"), JSON_ENCODE_ANY);
  json_decref(r);
  return sealed;
}

/* Its next round, with arguments args and the state sealed: whether it was served (else it
 * was refused for its state, and audited so). */
static bool multi_input_goes_on(world *w, const char *args, const char *sealed) {
  static const char tool[] = "test.task.multi_input",
                    refused[] = "failed: Invalid or expired requestState";
  long refusals = ends_audited(w, tool, refused);
  char *members = NULL;
  assert_true(asprintf(&members,
                       "\"name\":\"multi_input\",\"arguments\":%s,\"requestState\":%s,"
                       "\"inputResponses\":" ANSWERS,
                       args, sealed) > 0);
  json_t *again = request_as(w, w->agent, ELICITS, "tools/call", members, NULL);
  free(members);
  bool served = !json_object_get(again, "error");
  if (served) {
    const char *text = str(json_array_get(json_object_get(result_of(again), "content"), 0), "text");
    assert_string_equal(text, "Received the answers of two rounds");
  } else {
    assert_int_equal(error_code(again), TG_RPC_INVALID_PARAMS);
    assert_string_equal(error_message(again), "Invalid or expired requestState");
  }
  json_decref(again);
  assert_int_equal(ends_audited(w, tool, refused), refusals + !served);
  return served;
}
/* A call held for approval that takes rounds of input runs on one approval: the rounds that
 * ask leave it, the one that ends uses it. */
static void test_an_approval_lasts_a_call_of_many_rounds(void **state) {
  world *w = *state;
  static const char call[] = "\"name\":\"multi_input\",\"arguments\":{\"rounds\":1}";
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.policy.set",
                                "{\"tool\":\"test.task.multi_input\",\"mode\":\"approval\"}",
                                NULL, &res),
                   0);
  tg_call_result_done(&res);
  json_t *r = request_as(w, w->agent, ELICITS, "tools/call", call, NULL);
  json_t *refusal = json_object_get(result_of(r), "structuredContent");
  char *id = strdup(json_string_value(
      json_object_get(json_object_get(json_object_get(refusal, "error"), "details"), "approvalId")));
  json_decref(r);
  /* Decided by a person, outside MCP: over MCP neither the agent nor the person's token may. */
  static const char status_of[] = "SELECT COUNT(*) AS n FROM approval_requests WHERE id = $1"
                                  " AND status = $2";
  char *resolve = NULL, *decision = NULL;
  assert_true(asprintf(&decision, "{\"approvalId\":\"%s\",\"decision\":\"approve\"}", id) > 0);
  assert_true(asprintf(&resolve, "\"name\":\"agent_approval_resolve\",\"arguments\":%s", decision) >
              0);
  const char *const callers[] = {w->agent, w->f->owner};
  for (size_t i = 0; i < 2; i++) {
    r = request_as(w, callers[i], "{}", "tools/call", resolve, NULL);
    json_t *refused = json_object_get(result_of(r), "structuredContent");
    assert_string_equal(
        str(json_object_get(json_object_get(refused, "error"), "details"), "reason"), "surface");
    json_decref(r);
  }
  assert_int_equal(fixture_count_where(w->f, status_of, json_pack("[ss]", id, "pending")), 1);
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "agent.approval.resolve",
                                decision, NULL, &res),
                   0);
  assert_string_equal(str(res.value, "status"), "approved");
  tg_call_result_done(&res);
  free(resolve);
  free(decision);
  r = request_as(w, w->agent, ELICITS, "tools/call", call, NULL);
  assert_string_equal(str(result_of(r), "resultType"), "input_required");
  assert_int_equal(fixture_count_where(w->f, status_of, json_pack("[ss]", id, "approved")), 1);
  char *members = retry_members(call, result_of(r), ANSWERS);
  json_decref(r);
  r = request_as(w, w->agent, ELICITS, "tools/call", members, NULL);
  free(members);
  const char *text = str(json_array_get(json_object_get(result_of(r), "content"), 0), "text");
  assert_string_equal(text, "Received both answers");
  json_decref(r);
  assert_int_equal(fixture_count_where(w->f, status_of, json_pack("[ss]", id, "used")), 1);
  free(id);
}

#undef ANSWERS
#undef ELICITS

/* A requestState is sealed to its call: sent back with other arguments, it is refused before
 * any handler runs, and audited so; with the same ones, it carries the round on. */
static void test_request_state_is_bound_to_the_arguments(void **state) {
  world *w = *state;
  char *sealed = multi_input_state(w);
  assert_false(multi_input_goes_on(w, "{\"rounds\":1}", sealed));
  assert_false(multi_input_goes_on(w, "{}", sealed));
  /* Its expiry written otherwise (a leading 0): not the state as sealed. */
  char *padded = NULL;
  assert_true(asprintf(&padded, "\"0%s", sealed + 1) > 0);
  assert_false(multi_input_goes_on(w, "{\"rounds\":2}", padded));
  free(padded);
  assert_true(multi_input_goes_on(w, "{\"rounds\":2}", sealed));
  free(sealed);
}

/* sealed (JSON-quoted, as multi_input_state gives it) sealed again under the workspace's key
 * with form (the name of its form, "" for none) in front of what it binds, as state_mac
 * binds it: JSON-quoted (malloc'd). */
static char *resealed(world *w, const char *sealed, const char *form) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db, "SELECT secret FROM server_keys", NULL, &row), 0);
  const char *key = str(row, "secret");
  json_t *text = json_loads(sealed, JSON_DECODE_ANY, NULL);
  const char *state = json_string_value(text), *body = strchr(strchr(state, '.') + 1, '.') + 1;
  long long expiry = strtoll(state, NULL, 10);
  char *msg = NULL, mac[65];
  int n = asprintf(&msg, "%s%s\n%s:%s\n%s\n%lld\n%s", form, w->agent, "tools/call",
                   "multi_input", "{\"rounds\":2}", expiry, body);
  assert_true(n > 0);
  unsigned char raw[32];
  assert_int_equal(tg_hmac_sha256(key, strlen(key), msg, (size_t)n, raw), 0);
  tg_hex(raw, sizeof raw, mac);
  char *again = NULL, *quoted = NULL;
  assert_true(asprintf(&again, "%lld.%s.%s", expiry, mac, body) > 0);
  json_t *as_json = json_string(again);
  quoted = json_dumps(as_json, JSON_ENCODE_ANY);
  json_decref(as_json);
  free(again);
  free(msg);
  json_decref(text);
  json_decref(row);
  return quoted;
}

/* A state is sealed with the name of its form: one sealed without it (as before it held what
 * was asked) is refused, not misread. */
static void test_a_state_of_another_form_is_refused(void **state) {
  world *w = *state;
  char *sealed = multi_input_state(w);
  char *same = resealed(w, sealed, "toolgate-state-2\n"), *formless = resealed(w, sealed, "");
  assert_string_equal(same, sealed); /* sealed as the server seals it */
  assert_false(multi_input_goes_on(w, "{\"rounds\":2}", formless));
  assert_true(multi_input_goes_on(w, "{\"rounds\":2}", same));
  free(formless);
  free(same);
  free(sealed);
}

/* No resource asks its client for input, so no requestState is one the server sealed for a
 * read: refused as on any method that may ask (one sealed for a tool call too). Without one,
 * the read is served. */
static void test_a_read_takes_no_state(void **state) {
  world *w = *state;
  char *sealed = multi_input_state(w);
  const char *states[] = {"\"garbage\"", sealed};
  for (size_t i = 0; i < 2; i++) {
    char *members = NULL;
    assert_true(asprintf(&members, "\"uri\":\"test://static-text\",\"requestState\":%s",
                         states[i]) > 0);
    json_t *r = request_as(w, w->agent, "{}", "resources/read", members, NULL);
    free(members);
    assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
    assert_string_equal(error_message(r), "Invalid or expired requestState");
    json_decref(r);
  }
  json_t *r = request_as(w, w->agent, "{}", "resources/read", "\"uri\":\"test://static-text\"",
                         NULL);
  assert_non_null(json_object_get(result_of(r), "contents"));
  json_decref(r);
  free(sealed);
}

/* A requestState is sealed under the workspace's key, not one of its server's process: the
 * next server of the workspace (after a restart, or another beside it, which starts while a
 * writer holds the database: it only reads the key) carries the round on, and none does once
 * that key changed. */
static void test_request_state_outlives_its_server(void **state) {
  world *w = *state;
  char *sealed = multi_input_state(w);
  tg_db *writer = NULL;
  assert_int_equal(tg_db_open(w->f->dir, &writer, NULL), 0);
  assert_int_equal(tg_db_begin(writer), 0);
  tg_mcp_server_done(&w->srv);
  start_server(w);
  tg_db_rollback(writer);
  tg_db_close(writer);
  assert_true(multi_input_goes_on(w, "{\"rounds\":2}", sealed));
  assert_int_equal(tg_db_exec(w->f->db, "UPDATE server_keys SET secret = $1",
                              json_pack("[s]", "0123456789abcdef0123456789abcdef"
                                               "0123456789abcdef0123456789abcdef"),
                              NULL),
                   0);
  tg_mcp_server_done(&w->srv);
  start_server(w);
  assert_false(multi_input_goes_on(w, "{\"rounds\":2}", sealed));
  free(sealed);
}

/* A stateless retry's answers are checked against what its round asked, which the sealed
 * state carries: an answer that does not answer its request is refused before any handler
 * runs, and audited so; answers to what was not asked are ignored, whatever they hold.
 * Answers that come without a state (given before they were asked) must each read as an
 * answer the client can give; the handler judges what they answer. On 2025 revisions the
 * fields are ignored: the server asks the client itself. */
static void test_stateless_answers_are_checked_against_what_was_asked(void **state) {
  world *w = *state;
  static const char call[] = "\"name\":\"test_input_required_result_elicitation\"";
  json_t *first = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call", call, NULL);
  assert_string_equal(str(result_of(first), "resultType"), "input_required");
  long served = elicitation_calls_audited(w, "INFO"), refused = elicitation_calls_audited(w, "WARN");
  static const char *const misfits[] = {
      "{\"user_name\":12345}",
      "{\"user_name\":{\"action\":\"maybe\"}}",
      "{\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":5}}}",
      "{\"user_name\":{\"action\":\"accept\",\"content\":{}}}",
  };
  for (size_t i = 0; i < sizeof misfits / sizeof misfits[0]; i++) {
    char *members = retry_members(call, result_of(first), misfits[i]);
    json_t *r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call", members, NULL);
    free(members);
    if (error_code(r) != TG_RPC_INVALID_PARAMS)
      fail_msg("%s: %s", misfits[i], json_dumps(r, JSON_COMPACT));
    assert_string_equal(error_message(r), "An input response does not answer its request");
    assert_string_equal(str(error_data(r), "key"),
                        "user_name");
    json_decref(r);
  }
  assert_int_equal(elicitation_calls_audited(w, "INFO"), served);
  assert_int_equal(elicitation_calls_audited(w, "WARN"), refused + 4);
  assert_int_equal(ends_audited(w, "test.input_required.result_elicitation",
                                "failed: An input response does not answer its request"),
                   4);
  char *members = retry_members(
      call, result_of(first),
      "{\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}},\"other\":5}");
  json_t *r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call", members, NULL);
  free(members);
  assert_string_equal(str(json_array_get(json_object_get(result_of(r), "content"), 0), "text"),
                      "Hello, Ada!");
  json_decref(r);
  r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call",
                 "\"name\":\"test_input_required_result_elicitation\",\"inputResponses\":{"
                 "\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}}}",
                 NULL);
  assert_string_equal(str(json_array_get(json_object_get(result_of(r), "content"), 0), "text"),
                      "Hello, Ada!");
  json_decref(r);
  r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call",
                 "\"name\":\"test_input_required_result_elicitation\",\"inputResponses\":{"
                 "\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}},"
                 "\"other\":5}",
                 NULL);
  assert_string_equal(error_message(r), "An input response answers no request this client can answer");
  json_decref(r);
  r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call",
                 "\"name\":\"test_input_required_result_elicitation\",\"inputResponses\":{"
                 "\"user_name\":{\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":"
                 "\"t\"},\"model\":\"m\"}}",
                 NULL);
  assert_string_equal(error_message(r), "An input response answers no request this client can answer");
  json_decref(r);
  assert_int_equal(elicitation_calls_audited(w, "INFO"), served + 2);
  json_decref(first);
}

/* The conformance tool asking three things takes them in parts, round by round (its state
 * carries what came); the multi-round one keeps a long name whole to a character. */
static void test_fixture_rounds_answered_in_parts(void **state) {
  world *w = *state;
  static const char caps[] = "{\"elicitation\":{},\"sampling\":{},\"roots\":{}}";
  static const char multiple[] = "\"name\":\"test_input_required_result_multiple_inputs\"";
  static const char name[] = "\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}}",
                    greeting[] = "\"greeting\":{\"role\":\"assistant\",\"content\":{\"type\":"
                                 "\"text\",\"text\":\"Hi\"},\"model\":\"m\"}",
                    listed[] = "\"client_roots\":{\"roots\":[]}";
  json_t *r = request_as(w, w->agent, caps, "tools/call", multiple, NULL);
  assert_int_equal(json_object_size(json_object_get(result_of(r), "inputRequests")), 3);
  char answers[512];
  snprintf(answers, sizeof answers, "{%s,%s}", name, greeting);
  char *members = retry_members(multiple, result_of(r), answers);
  json_decref(r);
  r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  json_t *asked = json_object_get(result_of(r), "inputRequests");
  assert_int_equal(json_object_size(asked), 1);
  assert_non_null(json_object_get(asked, "client_roots"));
  snprintf(answers, sizeof answers, "{%s}", listed);
  members = retry_members(multiple, result_of(r), answers);
  json_decref(r);
  r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  assert_string_equal(first_text(r), "Received the name, the greeting and the roots");
  json_decref(r);
  /* 1 + 2 x 40 bytes, cut to 64 at most: 1 + 2 x 31, not half a character. */
  static const char rounds[] = "\"name\":\"test_input_required_result_multi_round\"";
  char long_name[256] = "a", expected[256] = "a";
  for (int i = 0; i < 40; i++) strcat(long_name, "\\u00e9");
  for (int i = 0; i < 31; i++) strcat(expected, "\xc3\xa9");
  r = request_as(w, w->agent, caps, "tools/call", rounds, NULL);
  snprintf(answers, sizeof answers,
           "{\"step1\":{\"action\":\"accept\",\"content\":{\"name\":\"%s\"}}}", long_name);
  members = retry_members(rounds, result_of(r), answers);
  json_decref(r);
  r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  assert_non_null(json_object_get(json_object_get(result_of(r), "inputRequests"), "step2"));
  members = retry_members(rounds, result_of(r),
                          "{\"step2\":{\"action\":\"accept\",\"content\":{\"color\":\"blue\"}}}");
  json_decref(r);
  r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  strcat(expected, " likes blue");
  assert_string_equal(first_text(r), expected);
  json_decref(r);
}

/* A sampled message's content may be an array of blocks (as 2025-11-25 has it), of the kinds
 * the request allows: a tool's use only when it offered the model tools. */
static void test_a_sampled_message_may_come_in_blocks(void **state) {
  world *w = *state;
  static const char caps[] = "{\"sampling\":{}}";
  static const char call[] = "\"name\":\"test_input_required_result_sampling\"";
  json_t *first = request_as(w, w->agent, caps, "tools/call", call, NULL);
  assert_string_equal(str(result_of(first), "resultType"), "input_required");
  char *members = retry_members(
      call, result_of(first),
      "{\"capital_question\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
      "\"text\":\"Paris\"},{\"type\":\"text\",\"text\":\"(a guess)\"}],\"model\":\"m\"}}");
  json_t *r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  assert_string_equal(first_text(r), "The model answered: Paris");
  json_decref(r);
  members = retry_members(
      call, result_of(first),
      "{\"capital_question\":{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
      "\"id\":\"u\",\"name\":\"n\",\"input\":{}}],\"model\":\"m\"}}");
  r = request_as(w, w->agent, caps, "tools/call", members, NULL);
  free(members);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_string_equal(str(error_data(r), "key"), "capital_question");
  json_decref(r);
  json_decref(first);
}

/* On 2025 revisions inputResponses and requestState are no fields: the server asks the client
 * itself, and the answer given in the request never reaches the tool. */
static void test_answers_sent_on_2025_are_no_answers(void **state) {
  world *w = *state;
  handshake(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{}}"));
  w->answer = json_pack("{s:s,s:{s:s}}", "action", "accept", "content", "name", "Ada");
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"test_input_required_result_elicitation\",\"inputResponses\":{"
                          "\"user_name\":{\"action\":\"accept\",\"content\":{\"name\":\"Mallory\"}}}}}",
                       NULL, NULL);
  assert_string_equal(str(json_array_get(json_object_get(result_of(r), "content"), 0), "text"),
                      "Hello, Ada!");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 1);
}

/* A task has its row before its client learns its id: another server on the same workspace
 * shows it as it began while the server that runs it lives, and refuses to answer or cancel
 * it (only that server can); once that server stopped, it shows how the task ended. */
static void test_task_run_by_another_server(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  char *id = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  assert_int_equal(runner_files(w), 1);
  tg_mcp_server runner = w->srv;
  start_server(w);
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "resultType"), "complete");
  assert_string_equal(str(got, "taskId"), id);
  assert_string_equal(str(got, "status"), "working");
  json_decref(got);
  json_t *r = task_action_as(w, w->agent, "tasks/update", id, "{\"r1.x\":{\"action\":\"decline\"}}");
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  assert_non_null(strstr(error_message(r), "Another toolgate server runs this task"));
  json_decref(r);
  r = task_action_as(w, w->agent, "tasks/cancel", id, NULL);
  assert_non_null(strstr(error_message(r), "Another toolgate server runs this task"));
  json_decref(r);
  assert_task_action_refused(w, other, "tasks/get", id, NULL);
  /* The second server's first task, which writes as failed the tasks of servers that are
   * gone, leaves the first's alone. */
  char *second = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 2);
  assert_int_equal(runner_files(w), 2);
  int base = count_ends();
  cancel_task(w, second);
  free(second);
  await_ended(base + 1); /* its thread wrote how it ended */
  tg_mcp_tasks_test_ended = NULL;
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "working");
  json_decref(got);
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), 1); /* the second's, cancelled */
  /* Its server stops: it cancels the task, writes so in place of the row, and lets go of
   * its file. */
  tg_mcp_server_done(&runner);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 0);
  assert_int_equal(runner_files(w), 1); /* the second server's */
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "cancelled");
  assert_string_equal(str(got, "statusMessage"), "The server stopped before the task ended");
  json_decref(got);
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  free(id);
}

/* The status of task id in its running row, or NULL (a new reference). */
static json_t *row_status(world *w, const char *id) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT task ->> '$.status' AS status FROM mcp_running_tasks"
                                   " WHERE id = $1",
                                   json_pack("[s]", id), &row),
                   0);
  return row;
}

/* Waits until task id's running row says status (a hang guard, not a timing check). */
static void await_row_status(world *w, const char *id, const char *status) {
  for (int i = 0; i < HANG_GUARD_S * 100; i++) {
    json_t *row = row_status(w, id);
    bool there = row && strcmp(str(row, "status"), status) == 0;
    json_decref(row);
    if (there) return;
    usleep(10000);
  }
  fail_msg("task %s's row never said %s", id, status);
}

/* Another server shows a task of this one as of its last change of status: waiting for
 * input, with what it asks; working once answered (seen while how it ended cannot be
 * written); then how it ended. */
static void test_task_parked_seen_elsewhere(void **state) {
  world *w = *state;
  json_t *parked;
  char *id = park_confirm(w, "c.txt", &parked);
  await_row_status(w, id, "input_required");
  tg_mcp_server runner = w->srv;
  start_server(w);
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "status"), "input_required");
  assert_true(json_equal(json_object_get(got, "inputRequests"), json_object_get(parked, "inputRequests")));
  json_decref(got);
  const char *key = json_object_iter_key(json_object_iter(json_object_get(parked, "inputRequests")));
  char *answer = NULL;
  assert_true(asprintf(&answer, "{\"%s\":{\"action\":\"accept\",\"content\":{\"confirm\":true}}}", key) > 0);
  refuse_rows(w, "mcp_tasks");
  int base = count_ends();
  tg_mcp_server other = w->srv;
  w->srv = runner; /* only the runner takes the answer */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, answer));
  await_ended(base + 1);
  tg_mcp_tasks_test_ended = NULL;
  w->srv = other;
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "working");
  assert_null(json_object_get(got, "inputRequests"));
  json_decref(got);
  /* The runner's stop writes how it ended. */
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  tg_mcp_server_done(&runner);
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "completed");
  json_decref(got);
  free(answer);
  json_decref(parked);
  free(id);
}

/* A running task's row, as a server that crashed leaves it (runner: its name). */
static void leave_running(world *w, const char *id, const char *principal, const char *runner) {
  assert_int_equal(
      tg_db_exec(w->f->db,
                 "INSERT INTO mcp_running_tasks (id, principal_id, task, runner) VALUES ($1, $2, "
                 "json_object('taskId', $1, 'status', 'working', 'createdAt', "
                 "'2026-01-02T03:04:05.006Z', 'lastUpdatedAt', '2026-01-02T03:04:05.006Z', "
                 "'ttlMs', 3600000, 'pollIntervalMs', 500), $3)",
                 json_pack("[s,s,s]", id, principal, runner), NULL),
      0);
}

/* A lock file nobody holds (suffix ".lock", or ".new" before it is renamed into place), as
 * a server that crashed leaves it; returns its path. */
static char *leave_runner_file(world *w, const char *runner, const char *suffix) {
  char *path = NULL;
  assert_true(asprintf(&path, "%s/task-runners", w->f->env.data_dir) > 0);
  assert_true(mkdir(path, 0700) == 0 || errno == EEXIST);
  free(path);
  assert_true(asprintf(&path, "%s/task-runners/%s%s", w->f->env.data_dir, runner, suffix) > 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  return path;
}

static void assert_failed_as_gone(json_t *got, const char *id) {
  assert_string_equal(str(got, "taskId"), id);
  assert_string_equal(str(got, "status"), "failed");
  assert_string_equal(str(got, "createdAt"), "2026-01-02T03:04:05.006Z");
  assert_string_not_equal(str(got, "lastUpdatedAt"), "2026-01-02T03:04:05.006Z");
  assert_string_equal(str(got, "statusMessage"),
                      "The server running the task stopped before it ended");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(got, "error"), "code")),
                   TG_RPC_INTERNAL_ERROR);
  assert_null(json_object_get(got, "inputRequests"));
}

/* A task whose server is gone (its lock file missing, or free) is not lost: it is written as
 * failed when its client asks, or at the next server's first task, and the gone server's
 * file is removed. */
static void test_task_of_a_gone_server(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  const char *no_file = "0123456789abcdef0123456789abcdef";
  const char *unlocked = "fedcba9876543210fedcba9876543210";
  const char *id_a = "a0000000000000000000000000000000", *id_b = "b0000000000000000000000000000000",
             *id_c = "c0000000000000000000000000000000";
  leave_running(w, id_a, w->agent, no_file);
  /* It names its tool and its run, which its audit row names too. */
  char run[TG_UUID_LEN + 1];
  fixture_run_start(w->f, "bot", run);
  assert_int_equal(tg_db_exec(w->f->db,
                              "UPDATE mcp_running_tasks SET tool = 'test.task.slow_compute',"
                              " run_id = $2 WHERE id = $1",
                              json_pack("[ss]", id_a, run), NULL),
                   0);
  leave_running(w, id_b, other, unlocked);
  leave_running(w, id_c, w->agent, unlocked);
  /* One that waited for input when its server went. */
  assert_int_equal(tg_db_exec(w->f->db,
                              "UPDATE mcp_running_tasks SET task = json_set(task, '$.status',"
                              " 'input_required', '$.inputRequests', json('{\"r1.x\":{}}'))"
                              " WHERE id = $1",
                              json_pack("[s]", id_c), NULL),
                   0);
  /* Those whose rows cannot be read are not left behind. */
  const char *id_d = "d0000000000000000000000000000000", *id_e = "e0000000000000000000000000000000";
  assert_int_equal(tg_db_exec(w->f->db,
                              "INSERT INTO mcp_running_tasks (id, principal_id, task, runner) "
                              "VALUES ($1, $3, 'not JSON', $4), ($2, $3, '[]', $4)",
                              json_pack("[s,s,s,s]", id_d, id_e, w->agent, unlocked), NULL),
                   0);
  char *unlocked_path = leave_runner_file(w, unlocked, ".lock");
  char *idle_path = leave_runner_file(w, "99999999999999999999999999999999", ".lock"); /* idle */
  /* One killed as it became a runner, and one becoming a runner now. */
  char *unborn_path = leave_runner_file(w, "88888888888888888888888888888888", ".new");
  struct timespec long_ago[2] = {{.tv_sec = time(NULL) - 120}, {.tv_sec = time(NULL) - 120}};
  assert_int_equal(utimensat(AT_FDCWD, unborn_path, long_ago, 0), 0);
  char *being_born_path = leave_runner_file(w, "77777777777777777777777777777777", ".new");
  /* Asked for, a task is written as failed, and audited so... */
  json_t *got = get_task(w, id_a);
  assert_failed_as_gone(got, id_a);
  json_decref(got);
  assert_int_equal(end_rows(w, id_a, "ERROR", "failed: The server running the task stopped"), 1);
  assert_int_equal(end_rows_in_run(w, id_a, "test.task.slow_compute", run), 1);
  assert_true(kept_row(w, id_a));
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 4);
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id_a, NULL)); /* it ended */
  /* ...for its principal only... */
  assert_task_action_refused(w, w->agent, "tasks/get", id_b, NULL);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 4);
  /* ...and the others at the next server's first task, which removes the gone servers'
   * files. */
  char *mine = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  assert_true(kept_row(w, id_b) && kept_row(w, id_c));
  got = get_task_as(w, other, id_b);
  assert_failed_as_gone(got, id_b);
  json_decref(got);
  got = get_task(w, id_c);
  assert_failed_as_gone(got, id_c);
  json_decref(got);
  const char *unreadable[] = {id_d, id_e};
  for (size_t i = 0; i < 2; i++) {
    got = get_task(w, unreadable[i]);
    assert_string_equal(str(got, "status"), "failed");
    assert_string_equal(str(got, "taskId"), unreadable[i]);
    json_decref(got);
  }
  assert_int_equal(access(unlocked_path, F_OK), -1);
  assert_int_equal(access(idle_path, F_OK), -1);
  assert_int_equal(access(unborn_path, F_OK), -1);
  assert_int_equal(access(being_born_path, F_OK), 0);
  assert_int_equal(runner_files(w), 1); /* this server's */
  cancel_task(w, mine);
  free(mine);
  free(unlocked_path);
  free(idle_path);
  free(unborn_path);
  free(being_born_path);
}

/* Rows of runner in mcp_running_tasks. */
static long rows_of_runner(world *w, const char *runner) {
  return fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_running_tasks WHERE runner = $1",
                             json_pack("[s]", runner));
}

/* A first-task sweep the database refused is made again at the next task. */
static void test_failed_sweep_is_tried_again(void **state) {
  world *w = *state;
  const char *gone = "fedcba9876543210fedcba9876543210"; /* no file: gone */
  const char *id = "a0000000000000000000000000000000";
  leave_running(w, id, w->agent, gone);
  refuse_rows(w, "mcp_tasks");
  char *first = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(rows_of_runner(w, gone), 1);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  char *second = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(rows_of_runner(w, gone), 0);
  assert_true(kept_row(w, id));
  cancel_task(w, first);
  cancel_task(w, second);
  free(first);
  free(second);
}

/* A task of slow_compute labelled label, which completes while the database refuses to
 * write how (as a full disk would, until the trigger refuse_mcp_tasks is dropped); returns
 * its id (malloc'd). */
static char *end_unkept(world *w, const char *label) {
  refuse_rows(w, "mcp_tasks");
  int base = count_ends();
  char args[96];
  snprintf(args, sizeof args, "{\"seconds\":1,\"label\":\"%s\"}", label);
  char *id = start_task(w, "slow_compute", args);
  await_ended(base + 1); /* its thread tried to write how it ended */
  tg_mcp_tasks_test_ended = NULL;
  return id;
}

/* A server that stops writes again how its tasks ended where the write failed as they
 * ended: its client reads the true end, not that the server was gone. */
static void test_task_unkept_written_at_stop(void **state) {
  world *w = *state;
  char *id = end_unkept(w, "late");
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), 0);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  tg_mcp_server_done(&w->srv);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 0);
  assert_int_equal(runner_files(w), 0);
  start_server(w);
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "status"), "completed");
  json_t *content = json_object_get(json_object_get(got, "result"), "content");
  assert_string_equal(str(json_array_get(content, 0), "text"), "Computed late in 1s");
  json_decref(got);
  free(id);
}

/* Ends n tasks (their ids in ids) whose ends the database refused, and takes writes again. */
static void end_unkept_tasks(world *w, size_t n, char **ids) {
  refuse_rows(w, "mcp_tasks");
  int base = count_ends();
  for (size_t i = 0; i < n; i++) {
    char args[64];
    snprintf(args, sizeof args, "{\"seconds\":1,\"label\":\"n%zu\"}", i);
    ids[i] = start_task(w, "slow_compute", args);
  }
  await_ended(base + (int)n);
  tg_mcp_tasks_test_ended = NULL;
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
}

/* What the server logs (stderr) while the fixture's connection holds the database's write
 * lock and step runs, malloc'd. */
static char *log_while_locked(world *w, void (*step)(world *)) {
  assert_int_equal(tg_db_exec(w->f->db, "BEGIN IMMEDIATE", NULL, NULL), 0);
  fixture_log log = fixture_log_begin(w->f);
  step(w);
  char *text = fixture_log_end(log);
  assert_int_equal(tg_db_exec(w->f->db, "ROLLBACK", NULL, NULL), 0);
  return text;
}

static void server_done(world *w) { tg_mcp_server_done(&w->srv); }

/* A database another process holds locked is waited for once at stop, not once for each end
 * to write: the rest is left to the next server, which writes those tasks failed. */
static void test_task_stop_waits_once_for_a_locked_database(void **state) {
  world *w = *state;
  char *ids[3];
  end_unkept_tasks(w, 3, ids);
  char *log = log_while_locked(w, server_done);
  assert_int_equal(fixture_occurrences(log, "could not be kept"), 1);
  assert_non_null(strstr(log, "stayed locked at stop"));
  assert_null(strstr(log, "no longer held")); /* not waited for a second time */
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 3);
  start_server(w);
  for (size_t i = 0; i < 3; i++) {
    json_t *got = get_task(w, ids[i]);
    assert_string_equal(str(got, "status"), "failed");
    json_decref(got);
    free(ids[i]);
  }
  free(log);
}

static void start_one_more(world *w) {
  json_t *r = request_as(w, w->agent, TASKS_CAPS, "tools/call",
                         "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":1}", NULL);
  /* Its own row could not be written either. */
  assert_true(json_is_true(json_object_get(result_of(r), "isError")));
  json_decref(r);
}

/* So is it at a start, which first writes its principal's unwritten ends. */
static void test_task_start_waits_once_for_a_locked_database(void **state) {
  world *w = *state;
  char *ids[3];
  end_unkept_tasks(w, 3, ids);
  char *log = log_while_locked(w, start_one_more);
  assert_int_equal(fixture_occurrences(log, "could not be kept"), 1);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 3);
  /* Unlocked, the next start writes them. */
  char *next = start_task(w, "slow_compute", "{\"seconds\":600}");
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  cancel_task(w, next);
  free(next);
  for (size_t i = 0; i < 3; i++) free(ids[i]);
  free(log);
}

/* Rows of task id in mcp_running_tasks. */
static long running_rows(world *w, const char *id) {
  return fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_running_tasks WHERE id = $1",
                             json_pack("[s]", id));
}

/* A task whose end could not be written as it ended is written at the next task its
 * principal starts (another's start leaves it to it): its running row goes then, not only
 * with the server or as it is read. One the database still refuses holds back no other. */
static void test_task_unkept_written_at_next_start(void **state) {
  world *w = *state;
  char *id = end_unkept(w, "late");
  int base = count_ends();
  char *refused = start_task(w, "slow_compute", "{\"seconds\":1,\"label\":\"refused\"}");
  await_ended(base + 1); /* newer than the first: tried first */
  tg_mcp_tasks_test_ended = NULL;
  assert_int_equal(running_rows(w, id), 1);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  assert_int_equal(tg_db_exec(w->f->db,
                              "CREATE TRIGGER refuse_one BEFORE INSERT ON mcp_tasks "
                              "WHEN NEW.task LIKE '%Computed refused%' "
                              "BEGIN SELECT RAISE(ABORT, 'refused'); END",
                              NULL, NULL),
                   0);
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  char *theirs = park_task_as(w, other);
  assert_int_equal(running_rows(w, id), 1);
  char *next = park_task_as(w, w->agent);
  assert_int_equal(running_rows(w, id), 0);
  assert_true(kept_row(w, id));
  assert_int_equal(running_rows(w, refused), 1);
  assert_false(kept_row(w, refused));
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "status"), "completed");
  json_decref(got);
  got = get_task(w, refused); /* the read tries the write again, refused again */
  assert_string_equal(str(got, "status"), "working");
  json_decref(got);
  cancel_task(w, next);
  assert_ack(task_action_as(w, other, "tasks/cancel", theirs, NULL));
  json_decref(await_task_as(w, other, theirs, "cancelled"));
  free(theirs);
  free(next);
  free(refused);
  free(id);
}

/* At stop a server deletes its rows that name no task it holds, and keeps those of the tasks
 * whose ends it still cannot write: the next server writes them as failed, not unknown. */
static void test_task_rows_at_stop(void **state) {
  world *w = *state;
  char *unkept = end_unkept(w, "unkept");
  /* A row of this server that names no task it holds. */
  assert_int_equal(
      tg_db_exec(w->f->db,
                 "INSERT INTO mcp_running_tasks (id, principal_id, task, runner) "
                 "SELECT 'f0000000000000000000000000000000', principal_id, task, runner "
                 "FROM mcp_running_tasks",
                 NULL, NULL),
      0);
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 2);
  tg_mcp_server_done(&w->srv); /* the database still refuses the end */
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 1);
  assert_int_equal(runner_files(w), 0);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  start_server(w);
  json_t *got = get_task(w, unkept);
  assert_string_equal(str(got, "status"), "failed");
  assert_string_equal(str(got, "statusMessage"),
                      "The server running the task stopped before it ended");
  json_decref(got);
  assert_task_action_refused(w, w->agent, "tasks/get", "f0000000000000000000000000000000", NULL);
  free(unkept);
}

/* No client sees a task ended before the database keeps how, so a terminal status never
 * changes after (a server killed then leaves the task to be written as failed): while the
 * write is refused the task shows working, to tasks/get and to what listens, one cancelled as
 * it waits for input too, and a cancellation changes nothing of an end decided; once the
 * database takes the write again, a read writes it. */
static void test_task_end_shown_once_kept(void **state) {
  world *w = *state;
  refuse_rows(w, "mcp_tasks");
  int base = count_ends();
  char *done = start_task(w, "slow_compute", "{\"seconds\":1,\"label\":\"late\"}");
  char *filter = filter_of(done);
  json_t *acked;
  feed *f = listen_as(w, w->agent, 0, 11, filter, &acked);
  char *parked = park_confirm(w, "e.txt", NULL);
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", parked, NULL));
  await_ended(base + 2); /* both threads tried to write how their tasks ended */
  tg_mcp_tasks_test_ended = NULL;
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", done, NULL));
  const char *ids[] = {done, parked};
  for (size_t i = 0; i < 2; i++) {
    json_t *got = get_task(w, ids[i]);
    assert_string_equal(str(got, "status"), "working");
    assert_null(json_object_get(got, "inputRequests"));
    json_decref(got);
    assert_int_equal(running_rows(w, ids[i]), 1);
  }
  size_t heard = feed_count(f);
  for (size_t i = 1; i < heard; i++) told(f, i, 11, "working");
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  json_t *got = get_task(w, done);
  assert_string_equal(str(got, "status"), "completed");
  json_decref(got);
  assert_true(kept_row(w, done));
  assert_int_equal(running_rows(w, done), 0);
  told(f, heard, 11, "completed");
  got = get_task(w, parked);
  assert_string_equal(str(got, "status"), "cancelled");
  assert_null(json_object_get(got, "statusMessage"));
  json_decref(got);
  free(parked);
  free(filter);
  free(done);
}

/* The teardown of a test that moves the clock of the tasks' expiry: back, however it ended. */
static int teardown_clock(void **state) {
  tg_mcp_tasks_test_later_ms = 0;
  return teardown(state);
}

/* A task whose end could not be written never outlives its time to live in memory, as its
 * running row (which other servers show working) would outlive it: it stays until written,
 * then goes as any ended task. */
static void test_task_unkept_never_expires(void **state) {
  world *w = *state;
  int base = count_ends();
  char *gone = start_task(w, "protocol_error_job", "{}");
  await_ended(base + 1);
  char *id = end_unkept(w, "late");
  /* gone is in memory alone now: its expiry shows. */
  assert_int_equal(tg_db_exec(w->f->db, "DELETE FROM mcp_tasks WHERE id = $1",
                              json_pack("[s]", gone), NULL),
                   0);
  json_decref(get_task(w, gone));
  tg_mcp_tasks_test_later_ms = TG_MCP_TASK_TTL_MS + 1;
  char other[TG_UUID_LEN + 1]; /* a start lets expired tasks go */
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  char *theirs = park_task_as(w, other);
  assert_task_action_refused(w, w->agent, "tasks/get", gone, NULL);
  json_t *got = get_task(w, id);
  assert_string_equal(str(got, "status"), "working");
  json_decref(got);
  json_t *row = row_status(w, id);
  assert_string_equal(str(row, "status"), "working");
  json_decref(row);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  got = get_task(w, id);
  assert_string_equal(str(got, "status"), "completed");
  json_decref(got);
  assert_int_equal(running_rows(w, id), 0);
  assert_ack(task_action_as(w, other, "tasks/cancel", theirs, NULL));
  json_decref(await_task_as(w, other, theirs, "cancelled"));
  free(theirs);
  free(id);
  free(gone);
}

/* The ends a start writes again are its principal's, every one: however many of another's
 * wait (newer ones), it is not refused for tasks held once the database takes writes. */
static void test_task_unkept_own_first(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  refuse_rows(w, "mcp_tasks");
  int base = count_ends();
  /* The agent's, each cancelled as it waits for input: it knows how they end. */
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    char *id = park_task_as(w, w->agent);
    assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
    await_ended(base + i + 1);
    free(id);
  }
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) {
    free(start_task_as(w, other, "protocol_error_job", "{}"));
    await_ended(base + TG_MCP_MAX_TASKS + i + 1);
  }
  tg_mcp_tasks_test_ended = NULL;
  assert_refused(w, w->agent, "held", TG_MCP_MAX_TASKS);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER refuse_mcp_tasks", NULL, NULL), 0);
  char *next = park_task_as(w, w->agent);
  cancel_task(w, next);
  free(next);
}

/* What test.late.failure does: it becomes a task, waits until let go (with "stoppable",
 * or until it is cancelled), then fails; with "heed", once it learnt it was cancelled
 * (giving up), else as it would have anyway. */
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t late_go = PTHREAD_COND_INITIALIZER;
static bool late_released;

static int late_failure(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)ret;
  const tg_client_channel *ch = cx->client;
  if (ch->detach(ch->self) != TG_OK) return TG_E_IO;
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_S * 1000;
  pthread_mutex_lock(&late_lock);
  bool stoppable = json_is_true(json_object_get(args, "stoppable"));
  /* A cancellation is looked for every 10 ms: nothing signals late_go for it. */
  for (int64_t left; !late_released && !(stoppable && ch->cancelled(ch->self)) &&
                     (left = deadline - tg_monotonic_ms()) > 0;)
    tg_timed_wait(&late_go, &late_lock, stoppable && left > 10 ? 10 : left);
  pthread_mutex_unlock(&late_lock);
  if (json_is_true(json_object_get(args, "heed")) && ch->cancelled(ch->self))
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "Gave up");
  return tg_fail(cx, TG_ERR_PROVIDER_ERROR, NULL, "Failed on its own");
}

static const char late_spec[] =
    "{\"provider\":\"late\",\"tools\":[{\"name\":\"test.late.failure\",\"description\":\"Fails "
    "when let go.\",\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],\"taskSupport\":\"required\",\"inputSchema\":{\"type\":\"object\","
    "\"properties\":{\"heed\":{\"type\":\"boolean\"},\"stoppable\":{\"type\":\"boolean\"}}},\"outputSchema\":{\"type\":\"object\"}}]}";

/* Serves provider's tools alone, until serve_usual_tools with the registry returned. */
static tg_registry *serve_only(world *w, const tg_provider *provider) {
  tg_registry *reg = registry_of(provider);
  tg_mcp_server_done(&w->srv);
  w->f->env.registry = reg;
  start_server(w);
  return reg;
}

/* Serves test.late.failure alone (see serve_only), its calls held until release_late. */
static tg_registry *serve_late_tools(world *w) {
  static const tg_handler_entry handlers[] = {{"test.late.failure", late_failure}};
  static const tg_provider late = {.name = "late", .spec_json = late_spec, .handlers = handlers,
                                   .n_handlers = 1};
  late_released = false;
  return serve_only(w, &late);
}

static void serve_usual_tools(world *w, tg_registry *late) {
  tg_mcp_server_done(&w->srv);
  w->f->env.registry = w->f->registry;
  start_server(w);
  tg_registry_free(late);
}

static void release_late(void) {
  pthread_mutex_lock(&late_lock);
  late_released = true;
  pthread_cond_broadcast(&late_go);
  pthread_mutex_unlock(&late_lock);
}

/* Which tools have their input asked on 2025: not one that may not wait on its client (not
 * interactive: its request is refused, and its round fails, audited so); nor one whose value
 * is no MCP result (not mcp_content: a value like an InputRequiredResult is its content);
 * and one asking for ever only 16 rounds, each audited. */
static int asks_anyway(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  (void)args;
  *ret = json_pack("{s:s,s:{s:{s:s,s:{s:s,s:{s:s}}}}}", "resultType", "input_required",
                   "inputRequests", "q", "method", "elicitation/create", "params", "message",
                   "who?", "requestedSchema", "type", "object");
  return *ret ? TG_OK : TG_E_NOMEM;
}

#define ASKING_TOOL(name, flags)                                                           \
  "{\"name\":\"" name "\",\"description\":\"Asks.\",\"surfaces\":[\"mcp\"],\"effect\":\"read\"," \
  "\"risk\":\"low\",\"permissions\":[],\"flags\":" flags ",\"inputSchema\":{\"type\":\"object\"},"  \
  "\"outputSchema\":{\"type\":\"object\"}}"
static const char asking_spec[] =
    "{\"provider\":\"asking\",\"tools\":[" ASKING_TOOL("test.ask.anyway", "[\"mcp_content\"]") ","
    ASKING_TOOL("test.ask.forever", "[\"mcp_content\",\"interactive\"]") ","
    ASKING_TOOL("test.ask.value", "[\"interactive\"]") "]}";

static void test_which_tools_have_their_input_asked_on_2025(void **state) {
  world *w = *state;
  static const tg_handler_entry handlers[] = {{"test.ask.anyway", asks_anyway},
                                              {"test.ask.forever", asks_anyway},
                                              {"test.ask.value", asks_anyway}};
  static const tg_provider asking = {.name = "asking", .spec_json = asking_spec,
                                     .handlers = handlers, .n_handlers = 3};
  tg_registry *reg = serve_only(w, &asking);
  handshake(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{}}"));
  w->answer = json_pack("{s:s,s:{}}", "action", "accept", "content");
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"test_ask_anyway\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 0);
  assert_int_equal(calls_audited(w, "test.ask.anyway", "WARN"), 1);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_ask_value\"}}", NULL, NULL);
  json_t *value = json_object_get(result_of(r), "structuredContent");
  assert_string_equal(json_string_value(json_object_get(value, "resultType")), "input_required");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 0);
  r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"test_ask_forever\"}}", NULL, NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_t *data = error_data(r);
  assert_int_equal(json_integer_value(json_object_get(data, "max")), 16);
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 16);
  assert_int_equal(calls_audited(w, "test.ask.forever", "INFO"), 17);
  serve_usual_tools(w, reg);
}

/* Asks for a visit to a URL (2026-07-28's URL-mode elicitation), then answers the action. */
static int asks_a_visit(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)args;
  json_t *answer = json_object_get(cx->client->input_responses, "visit");
  *ret = answer ? json_pack("{s:O}", "action", json_object_get(answer, "action"))
                : json_pack("{s:s,s:{s:{s:s,s:{s:s,s:s,s:s}}}}", "resultType", "input_required",
                            "inputRequests", "visit", "method", "elicitation/create", "params",
                            "mode", "url", "message", "Sign in", "url", "https://example.com/in");
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* On 2025-11-25, a URL-mode elicitation names itself (elicitationId, which 2026-07-28
 * dropped): the request asked of a 2025 client carries one. */
static void test_a_url_elicitation_asked_on_2025_names_itself(void **state) {
  world *w = *state;
  static const tg_handler_entry handlers[] = {{"test.ask.visit", asks_a_visit}};
  static const tg_provider visiting = {
      .name = "visiting",
      .spec_json = "{\"provider\":\"visiting\",\"tools\":[" ASKING_TOOL(
          "test.ask.visit", "[\"mcp_content\",\"interactive\"]") "]}",
      .handlers = handlers,
      .n_handlers = 1};
  tg_registry *reg = serve_only(w, &visiting);
  handshake(w, INITIALIZE(1, "2025-11-25", "{\"elicitation\":{\"url\":{}}}"));
  w->answer = json_pack("{s:s}", "action", "accept");
  json_t *r = send_msg(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"test_ask_visit\"}}", NULL, NULL);
  assert_string_equal(json_string_value(json_object_get(result_of(r), "action")), "accept");
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 1);
  json_t *asked = json_object_get(json_array_get(w->sent, 0), "params");
  assert_string_equal(json_string_value(json_object_get(asked, "mode")), "url");
  assert_string_equal(json_string_value(json_object_get(asked, "url")), "https://example.com/in");
  assert_int_equal(json_string_length(json_object_get(asked, "elicitationId")), TG_UUID_LEN);
  serve_usual_tools(w, reg);
}

/* Asks with a state larger than a client may send back. */
static int asks_with_a_large_state(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  (void)args;
  char *large = malloc(70000);
  if (!large) return TG_E_NOMEM;
  memset(large, 's', 69999);
  large[69999] = '\0';
  *ret = json_pack("{s:s,s:{s:{s:s,s:{s:s}}},s:s}", "resultType", "input_required",
                   "inputRequests", "q", "method", "elicitation/create", "params", "message",
                   "who?", "requestState", large);
  free(large);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* On 2026-07-28 the state the client is to send back must fit what the server takes back:
 * one that would not fails the call before it commits, as no later round could go on. */
static void test_a_state_too_large_to_come_back_fails_the_call(void **state) {
  world *w = *state;
  static const tg_handler_entry handlers[] = {{"test.ask.large", asks_with_a_large_state}};
  static const tg_provider large = {
      .name = "large",
      .spec_json = "{\"provider\":\"large\",\"tools\":[" ASKING_TOOL(
          "test.ask.large", "[\"mcp_content\"]") "]}",
      .handlers = handlers,
      .n_handlers = 1};
  tg_registry *reg = serve_only(w, &large);
  json_t *r = request_as(w, w->agent, "{\"elicitation\":{}}", "tools/call",
                         "\"name\":\"test_ask_large\"", NULL);
  assert_int_equal(error_code(r), TG_RPC_INTERNAL_ERROR);
  json_t *data = error_data(r);
  assert_int_equal(json_integer_value(json_object_get(data, "max")), 65536);
  json_decref(r);
  assert_int_equal(calls_audited(w, "test.ask.large", "INFO"), 0);
  assert_int_equal(calls_audited(w, "test.ask.large", "WARN"), 1);
  serve_usual_tools(w, reg);
}

/* A task cancelled while its handler runs ends cancelled when the handler gives up, once it
 * learnt of it; a failure of a handler that never learnt of it stands, as its result. */
static void test_task_failure_after_cancel(void **state) {
  world *w = *state;
  tg_registry *reg = serve_late_tools(w);
  char *heeds = start_task(w, "test_late_failure", "{\"heed\":true}");
  char *unheeding = start_task(w, "test_late_failure", "{}");
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", heeds, NULL));
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", unheeding, NULL));
  release_late();
  json_t *got = await_task(w, heeds, "cancelled");
  assert_null(json_object_get(got, "result"));
  json_decref(got);
  got = await_task(w, unheeding, "completed");
  json_t *result = json_object_get(got, "result");
  assert_true(json_is_true(json_object_get(result, "isError")));
  json_t *error = json_object_get(json_object_get(result, "structuredContent"), "error");
  assert_string_equal(str(error, "message"), "Failed on its own");
  json_decref(got);
  /* Their runs say the same: cancelled, for the one that learnt of it; failed, for the one
   * that failed on its own. */
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM agent_runs WHERE"
                                             " status = 'cancelled'", NULL),
                   1);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM agent_runs WHERE"
                                             " status = 'failed'", NULL),
                   1);
  serve_usual_tools(w, reg);
  free(unheeding);
  free(heeds);
}

/* Tells its progress and a log line, then ends without a task, or detaches (detach), tells
 * more and ends as its task. */
static int early_report(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  if (ch->progress_token)
    ch->notify(ch->self, "notifications/progress",
               json_pack("{s:O,s:i,s:s}", "progressToken", ch->progress_token, "progress", 1,
                         "message", "before"));
  if (ch->log_level)
    ch->notify(ch->self, "notifications/message",
               json_pack("{s:s,s:s}", "level", "info", "data", "told before"));
  if (json_is_true(json_object_get(args, "detach"))) {
    int r = ch->detach(ch->self);
    if (r) return r;
    ch->notify(ch->self, "notifications/progress",
               json_pack("{s:O,s:i,s:s}", "progressToken", ch->progress_token, "progress", 2,
                         "message", "after"));
  }
  *ret = json_pack("{s:b}", "done", 1);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const char early_spec[] =
    "{\"provider\":\"early\",\"tools\":[{\"name\":\"test.early.report\",\"description\":"
    "\"Reports, then ends.\",\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\","
    "\"permissions\":[],\"flags\":[\"interactive\"],\"taskSupport\":\"optional\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"detach\":{\"type\":\"boolean\"}}},"
    "\"outputSchema\":{\"type\":\"object\"}}]}";

/* A call that may become a task tells its request what it tells before its handler
 * detaches (progress under the request's token, log lines at its level), as a call that is
 * no task would; once a task, its progress is the task's status message, and its request
 * hears nothing more. */
static void test_task_tells_its_request_until_it_detaches(void **state) {
  world *w = *state;
  static const tg_handler_entry handlers[] = {{"test.early.report", early_report}};
  static const tg_provider early = {.name = "early", .spec_json = early_spec,
                                    .handlers = handlers, .n_handlers = 1};
  tg_registry *reg = serve_only(w, &early);
#define EARLY_CALL(args)                                                                   \
  "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"             \
  "\"test_early_report\",\"arguments\":" args ",\"_meta\":{\"progressToken\":\"pt\","        \
  "\"io.modelcontextprotocol/logLevel\":\"debug\","                                         \
  "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","                             \
  "\"io.modelcontextprotocol/clientCapabilities\":" TASKS_CAPS "}}}"
  static const char *const calls[] = {EARLY_CALL("{}"), EARLY_CALL("{\"detach\":true}")};
#undef EARLY_CALL
  for (size_t i = 0; i < 2; i++) {
    json_array_clear(w->sent);
    json_t *reply = send_as(w, w->agent, calls[i], NULL, NULL);
    json_t *res = json_incref(result_of(reply));
    json_decref(reply);
    assert_int_equal(json_array_size(w->sent), 2);
    json_t *progress = json_object_get(json_array_get(w->sent, 0), "params");
    assert_string_equal(str(progress, "progressToken"), "pt");
    assert_string_equal(str(progress, "message"), "before");
    assert_string_equal(str(json_array_get(w->sent, 1), "method"), "notifications/message");
    if (i == 0) {
      assert_true(json_is_true(json_object_get(json_object_get(res, "structuredContent"),
                                               "done")));
    } else {
      assert_string_equal(str(res, "resultType"), "task");
      json_t *got = await_task(w, str(res, "taskId"), "completed");
      json_decref(got);
      assert_int_equal(json_array_size(w->sent), 2);
    }
    json_decref(res);
  }
  serve_usual_tools(w, reg);
}

static void *stop_server(void *arg) {
  world *w = arg;
  tg_mcp_server_done(&w->srv);
  return NULL;
}

/* The stop cancels the tasks still running and says so in their ends, but not in the end of
 * one its client cancelled, still running as the stop began. */
static void test_task_stop_tells_only_its_cancels(void **state) {
  world *w = *state;
  tg_registry *reg = serve_late_tools(w);
  int before = count_ends();
  char *asked = start_task(w, "test_late_failure", "{\"heed\":true}");
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", asked, NULL));
  char *cut = start_task(w, "test_late_failure", "{\"heed\":true,\"stoppable\":true}");
  pthread_t stopping;
  assert_int_equal(pthread_create(&stopping, NULL, stop_server, w), 0);
  /* cut ends only once the stop cancelled it: the stop began while asked still ran. */
  await_ended(before + 1);
  release_late();
  assert_int_equal(pthread_join(stopping, NULL), 0);
  tg_mcp_tasks_test_ended = NULL;
  start_server(w);
  json_t *got = get_task(w, asked);
  assert_string_equal(str(got, "status"), "cancelled");
  assert_null(json_object_get(got, "statusMessage"));
  json_decref(got);
  got = get_task(w, cut);
  assert_string_equal(str(got, "status"), "cancelled");
  assert_string_equal(str(got, "statusMessage"), "The server stopped before the task ended");
  json_decref(got);
  serve_usual_tools(w, reg);
  free(cut);
  free(asked);
}

/* A stopping server's grace waits for the tasks at work, not for one waiting for input
 * (none can come any more): that one ends cancelled at once, saying the server stopped. */
static void test_stop_cancels_a_task_waiting_for_input_at_once(void **state) {
  world *w = *state;
  char *parked = park_task_as(w, w->agent);
  char *working = start_task(w, "slow_compute", "{\"seconds\":600}");
  tg_mcp_tasks_stopping(w->srv.tasks);
  assert_int_equal(tg_mcp_tasks_await(w->srv.tasks, tg_monotonic_ms() + 200), 1);
  json_t *got = await_task(w, parked, "cancelled");
  assert_string_equal(str(got, "statusMessage"), "The server stopped before the task ended");
  json_decref(got);
  assert_int_equal(end_rows(w, parked, "WARN", "cancelled: The server stopped"), 1);
  got = get_task(w, working);
  assert_string_equal(str(got, "status"), "working");
  json_decref(got);
  free(working);
  free(parked);
}

/* slow_compute for seconds, from a client taking tasks: the call's result, which must not be
 * a task (a new reference). */
static json_t *call_not_task(world *w, int seconds) {
  char members[96];
  snprintf(members, sizeof members, "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":%d}",
           seconds);
  json_t *res = task_call(w, "tools/call", members);
  assert_string_equal(str(res, "resultType"), "complete");
  return res;
}

/* The call failed as a plain one, with the envelope of an internal error. */
static void assert_internal_error(json_t *res) {
  assert_true(json_is_true(json_object_get(res, "isError")));
  json_t *error = json_object_get(json_object_get(res, "structuredContent"), "error");
  assert_string_equal(str(error, "code"), "internal_error");
  json_decref(res);
}

/* A call whose task cannot be recorded (its row refused, or no lock file for the server)
 * does not become one: it fails as a plain call, and no task is written. A call that never
 * becomes a task runs as usual. */
static void test_task_unrecorded_is_no_task(void **state) {
  world *w = *state;
  char *dir = NULL;
  assert_true(asprintf(&dir, "%s/task-runners", w->f->env.data_dir) > 0);
  FILE *in_the_way = fopen(dir, "w");
  assert_non_null(in_the_way);
  fclose(in_the_way);
  json_t *res = call_not_task(w, 0);
  assert_false(json_is_true(json_object_get(res, "isError")));
  json_decref(res);
  assert_internal_error(call_not_task(w, 1));
  assert_int_equal(unlink(dir), 0);
  free(dir);
  refuse_rows(w, "mcp_running_tasks");
  assert_internal_error(call_not_task(w, 1));
  assert_int_equal(fixture_count(w->f, "mcp_running_tasks"), 0);
  assert_int_equal(fixture_count(w->f, "mcp_tasks"), 0);
}

/* subscriptions/listen with taskIds: a principal hears of its own tasks as they stand and
 * then as they change, to the end; of another's, nothing. */
static void test_task_notifications(void **state) {
  world *w = *state;
  char other[TG_UUID_LEN + 1];
  fixture_agent(w->f, "{\"slug\":\"bot2\"}", other);
  char *id = park_confirm(w, "n.txt", NULL);
  char *filter = filter_of(id);
  json_t *acked;
  feed *theirs = listen_as(w, other, 0, 7, filter, &acked);
  assert_int_equal(json_array_size(json_object_get(acked, "taskIds")), 0);
  feed *mine = listen_as(w, w->agent, 1, 8, filter, &acked);
  json_t *ids = json_object_get(acked, "taskIds");
  assert_int_equal(json_array_size(ids), 1); /* once, and only the task there is */
  assert_string_equal(json_string_value(json_array_get(ids, 0)), id);
  json_t *now = told(mine, 1, 8, "input_required");
  assert_string_equal(str(now, "taskId"), id);
  char *yes = accept_all(now, "{\"confirm\":true}");
  /* The change is told by the thread that makes it, before tasks/update returns. */
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, yes));
  assert_true(feed_count(mine) > 2);
  size_t i = 2;
  for (;; i++) {
    now = feed_at(mine, i, "notifications/tasks", 8);
    if (strcmp(str(now, "status"), "completed") == 0) break;
    assert_string_equal(str(now, "status"), "working");
  }
  assert_string_equal(str(now, "taskId"), id);
  json_t *content = json_object_get(json_object_get(now, "result"), "content");
  assert_string_equal(str(json_array_get(content, 0), "text"), "Deleted n.txt");
  /* Nothing after the end. */
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  assert_int_equal(feed_count(mine), i + 1);
  assert_int_equal(feed_count(theirs), 1);
  free(yes);
  free(filter);
  free(id);
}

/* Each round's input requests, each answer taken and a cancellation are told at once. */
static void test_task_notifications_follow_rounds(void **state) {
  world *w = *state;
  char *id = start_task(w, "multi_input", "{\"rounds\":2}");
  json_decref(await_task(w, id, "input_required"));
  char *filter = filter_of(id);
  json_t *acked;
  feed *f = listen_as(w, w->agent, 0, 10, filter, &acked);
  json_t *now = told(f, 1, 10, "input_required");
  assert_int_equal(json_object_size(json_object_get(now, "inputRequests")), 2);
  /* One answer of two: still waiting, for one request. */
  const char *first = json_object_iter_key(json_object_iter(json_object_get(now, "inputRequests")));
  char *one = NULL;
  assert_true(asprintf(&one, "{\"%s\":{\"action\":\"accept\",\"content\":%s}}", first,
                       "{\"name\":\"Ada\",\"confirm\":true}") > 0);
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, one));
  now = told(f, 2, 10, "input_required");
  assert_int_equal(json_object_size(json_object_get(now, "inputRequests")), 1);
  assert_null(json_object_get(json_object_get(now, "inputRequests"), first));
  /* The other: the task goes on to its second round, which asks again. */
  char *rest = accept_all(now, "{\"name\":\"Ada\",\"confirm\":true}");
  assert_ack(task_action_as(w, w->agent, "tasks/update", id, rest));
  size_t i = 3;
  for (;; i++) {
    now = feed_at(f, i, "notifications/tasks", 10);
    if (strcmp(str(now, "status"), "input_required") == 0) break;
    assert_string_equal(str(now, "status"), "working");
  }
  assert_int_equal(json_object_size(json_object_get(now, "inputRequests")), 1);
  /* Cancelled while it waits: told once written. */
  assert_ack(task_action_as(w, w->agent, "tasks/cancel", id, NULL));
  told(f, i + 1, 10, "cancelled");
  free(rest);
  free(one);
  free(filter);
  free(id);
}

/* A task tells how far it got in its statusMessage, until its status changes; a listen
 * stream that ended hears nothing more. */
static void test_task_status_message(void **state) {
  world *w = *state;
  int base = count_ends();
  char *id = start_task(w, "slow_compute", "{\"seconds\":60,\"label\":\"sum\"}");
  char *filter = filter_of(id);
  json_t *acked;
  feed *f = listen_as(w, w->agent, 0, 9, filter, &acked);
  /* Each progress message is told as it comes. */
  json_t *now = NULL;
  size_t i = 1;
  while (!str(now, "statusMessage")) now = told(f, i++, 9, "working");
  char *first = strdup(str(now, "statusMessage"));
  assert_true(strncmp(first, "Computing sum: ", 15) == 0);
  while (strcmp(str(now, "statusMessage"), first) == 0) now = told(f, i++, 9, "working");
  assert_true(strncmp(str(now, "statusMessage"), "Computing sum: ", 15) == 0);
  json_t *got = get_task(w, id);
  assert_true(strncmp(str(got, "statusMessage"), "Computing sum: ", 15) == 0);
  json_decref(got);
  /* The listen request cancelled, its subscription ends. */
  json_decref(send_msg(w,
                       "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                       "\"params\":{\"requestId\":9}}",
                       NULL, NULL));
  size_t heard = feed_count(f);
  cancel_task(w, id);
  await_ended(base + 1); /* the thread told whoever observed its end */
  assert_int_equal(feed_count(f), heard);
  got = get_task(w, id);
  assert_null(json_object_get(got, "statusMessage"));
  json_decref(got);
  tg_mcp_tasks_test_ended = NULL;
  free(first);
  free(filter);
  free(id);
}

/* taskIds are the extension's, and a bounded list of ids. */
static void test_task_notifications_refused(void **state) {
  world *w = *state;
  feed *f = &w->listens[0].feed;
  assert_int_equal(tg_mcp_watch_new(feed_send, f, &w->listens[0].watch), 0);
  w->watch = w->listens[0].watch;
  int status = 0;
  json_t *r = request_as(w, w->agent, "{}", "subscriptions/listen",
                         "\"notifications\":{\"taskIds\":[]}", &status);
  assert_int_equal(error_code(r), TG_RPC_MISSING_CAPABILITY);
  assert_int_equal(status, 400);
  json_decref(r);
  r = request_as(w, w->agent, TASKS_CAPS, "subscriptions/listen",
                 "\"notifications\":{\"taskIds\":\"x\"}", NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_decref(r);
  char many[TG_MCP_MAX_TASKS * 4 + 64] = "\"notifications\":{\"taskIds\":[\"a\"";
  for (int i = 0; i < TG_MCP_MAX_TASKS; i++) strcat(many, ",\"a\"");
  strcat(many, "]}");
  r = request_as(w, w->agent, TASKS_CAPS, "subscriptions/listen", many, NULL);
  assert_int_equal(error_code(r), TG_RPC_INVALID_PARAMS);
  json_t *data = error_data(r);
  assert_int_equal(json_integer_value(json_object_get(data, "max")), TG_MCP_MAX_TASKS);
  json_decref(r);
  assert_int_equal(feed_count(f), 0); /* no subscription began */
}

/* A listen request reaching a watch the server already ended is answered at once. */
static void test_listen_after_the_end(void **state) {
  world *w = *state;
  feed *f = &w->listens[0].feed;
  assert_int_equal(tg_mcp_watch_new(feed_send, f, &w->listens[0].watch), 0);
  w->watch = w->listens[0].watch;
  json_t *meta = tg_mcp_result_meta(&w->srv);
  assert_int_equal(tg_mcp_watch_end(w->watch, meta), 0);
  json_decref(meta);
  json_t *r = request_as(w, w->agent, TASKS_CAPS, "subscriptions/listen",
                         "\"notifications\":{\"toolsListChanged\":true}", NULL);
  json_t *res = result_of(r);
  assert_string_equal(str(res, "resultType"), "complete");
  json_t *sub = json_object_get(json_object_get(res, "_meta"), TG_MCP_META_SUBSCRIPTION);
  assert_true(json_equal(sub, json_object_get(r, "id")));
  json_decref(r);
  assert_int_equal(feed_count(f), 0); /* no acknowledgement: no subscription */
}

/* Sends a request with these headers alone (and Connection: close). */
static int http_send_as_is(unsigned port, const char *method, const char *headers,
                           const char *body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct timeval guard = {.tv_sec = HANG_GUARD_S};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  char *lines = NULL;
  assert_true(asprintf(&lines, "Connection: close\r\n%s", headers) > 0);
  fixture_http_send(fd, port, method, lines, body);
  free(lines);
  return fd;
}

static int http_send(unsigned port, const char *method, const char *sid, const char *extra,
                     const char *body) {
  char *headers = NULL;
  assert_true(asprintf(&headers,
                       "Accept: application/json, text/event-stream\r\n"
                       "%s%s%s%sContent-Type: application/json\r\n",
                       sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "",
                       extra ? extra : "") > 0);
  int fd = http_send_as_is(port, method, headers, body);
  free(headers);
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

/* The same with these headers alone (see http_send_as_is). */
static char *http_exchange_as_is(unsigned port, const char *method, const char *headers,
                                 const char *body) {
  int fd = http_send_as_is(port, method, headers, body);
  char *res = http_read(fd, NULL);
  close(fd);
  return res;
}

static void assert_status(const char *res, const char *status) {
  if (strncmp(res, "HTTP/1.1 ", 9) != 0 || strncmp(res + 9, status, 3) != 0)
    fail_msg("expected HTTP %s, got: %s", status, res);
}

/* Serves w's server over HTTP on a free loopback port, without authentication, as w's agent
 * (the server reads w->http while it runs). */
static tg_http *http_start(world *w, unsigned *port) {
  w->http = (tg_http_config){.listen = "127.0.0.1:0", .no_auth = true,
                             .no_auth_principal = w->agent, .threads = 2, .data_dir = w->f->dir,
                             .registry = w->f->registry, .server = w->srv};
  tg_http *h = NULL;
  assert_int_equal(tg_http_start(&w->http, &h, port), 0);
  return h;
}

/* Opens a 2025-11-25 session over HTTP (its initialize only): its id in sid. */
static void http_open_session(unsigned port, char sid[64]) {
  char *res = http_exchange(port, "POST", NULL, NULL,
                            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                            "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}");
  assert_status(res, "200");
  const char *at = strcasestr(res, "Mcp-Session-Id: ");
  assert_non_null(at);
  assert_int_equal(sscanf(at + 16, "%63[0-9a-f]", sid), 1);
  free(res);
}

static void test_http_get_stream_and_resumption(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  char sid[64] = "";
  http_open_session(port, sid);
  /* Whitespace around a header's value is no part of it (RFC 9110 §5.5). */
  char padded[80];
  snprintf(padded, sizeof padded, " \t%s \t", sid);
  char *res = http_exchange(port, "POST", padded, NULL, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
  assert_status(res, "202");
  free(res);
  /* No session, no GET stream (2026-07-28 is POST only): what is left is POST; a GET must
   * accept SSE. */
  res = http_exchange(port, "GET", NULL, NULL, NULL);
  assert_status(res, "405");
  assert_non_null(strcasestr(res, "Allow: POST\r\n"));
  free(res);
  char get_json[128];
  snprintf(get_json, sizeof get_json, "Accept: application/json\r\nMcp-Session-Id: %s\r\n", sid);
  res = http_exchange_as_is(port, "GET", get_json, NULL);
  assert_status(res, "406");
  assert_non_null(strstr(res, "Accept must include text/event-stream"));
  free(res);
  /* Nor for a GET or DELETE naming 2026-07-28, whatever session it names: that revision's
   * traffic, POST only (a POST naming it is served statelessly). The session stands. */
  for (int i = 0; i < 2; i++) {
    res = http_exchange(port, i ? "DELETE" : "GET", sid, "MCP-Protocol-Version: 2026-07-28\r\n", NULL);
    assert_status(res, "405");
    assert_non_null(strcasestr(res, "Allow: POST\r\n"));
    free(res);
  }

  /* A call streams its progress; the client goes away after the first event. A disconnect
   * is not a cancellation: the rest is kept, and GET with Last-Event-ID replays it. */
  int fd = http_send(port, "POST", sid, NULL,
                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
                     "\"test_tool_with_progress\",\"_meta\":{\"progressToken\":\"p\"}}}");
  res = http_read(fd, "id: 1-1\n");
  assert_non_null(strstr(res, "text/event-stream"));
  free(res);
  close(fd);
  res = http_exchange(port, "GET", padded, "Last-Event-ID: 1-1 \t\r\n", NULL);
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
  assert_non_null(strstr(res, "names no stream of this session"));
  free(res);
  res = http_exchange(port, "GET", sid, "Last-Event-ID: 1-99\r\n", NULL);
  assert_status(res, "400");
  assert_non_null(strstr(res, "names no event of this stream"));
  free(res);
  /* One that is no id of this server is called so, even naming a stream that exists, or
   * written with a sign (each number is digits only). */
  static const char *const not_ids[] = {"Last-Event-ID: 1-99999999999999999999\r\n",
                                        "Last-Event-ID: +1-1\r\n", "Last-Event-ID: 1-+1\r\n"};
  for (size_t i = 0; i < sizeof not_ids / sizeof not_ids[0]; i++) {
    res = http_exchange(port, "GET", sid, not_ids[i], NULL);
    assert_status(res, "400");
    assert_non_null(strstr(res, "is no event id of this server"));
    free(res);
  }

  /* The standalone stream opens with a priming event; there is one per session. */
  int get = http_send(port, "GET", sid, NULL, NULL);
  res = http_read(get, "data: \n\n");
  assert_status(res, "200");
  assert_non_null(strstr(res, "id: 2-0\nretry: "));
  free(res);
  res = http_exchange(port, "GET", sid, NULL, NULL);
  assert_status(res, "405"); /* no other stream offered: as clients read a 405 on GET */
  assert_non_null(strstr(res, "A GET stream is already open"));
  assert_non_null(strstr(res, "Allow: POST, DELETE\r\n"));
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

#define HTTP_MODERN "MCP-Protocol-Version: 2026-07-28\r\n"
#define TASKS_META                                                         \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":" TASKS_CAPS "}"

/* A POST must take both kinds of answer and send JSON: what does not is refused before it
 * runs (no audit row), whatever else it gets right. */
static void test_http_post_media_types(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  static const char call[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_tool_with_progress\",\"arguments\":{},\"_meta\":{\"progressToken\":\"p\","
      "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
      "\"io.modelcontextprotocol/clientCapabilities\":{}}}}";
#define CALL_HEADERS \
  HTTP_MODERN "Mcp-Method: tools/call\r\nMcp-Name: test_tool_with_progress\r\n"
#define JSON_BODY "Content-Type: application/json\r\n"
  static const struct {
    const char *headers, *status, *says;
  } cases[] = {
      {"Accept: application/json\r\n" JSON_BODY, "406", "Accept must take"},
      {"Accept: text/event-stream\r\n" JSON_BODY, "406", "Accept must take"},
      {"Accept: application/json, text/event-stream;q=0\r\n" JSON_BODY, "406", "Accept must take"},
      {"Accept: application/json\r\n", "406", "Accept must take"}, /* before its Content-Type */
      {"Accept: application/json, text/event-stream\r\nContent-Type: text/plain\r\n", "415",
       "Content-Type must be application/json"},
      {"Accept: application/json, text/event-stream\r\n", "415", "Content-Type must be"},
      {"Accept: application/json, text/event-stream\r\nContent-Type: application/json; "
       "charset=latin1\r\n",
       "415", "in UTF-8 if it names a charset"},
      {"Accept: application/json, text/event-stream\r\nContent-Encoding: gzip\r\n" JSON_BODY, "415",
       "Content-Encoding is not supported"},
      {"Accept: application/json, text/event-stream\r\nContent-Encoding: identity\r\n"
       "Content-Encoding: br\r\n" JSON_BODY,
       "415", "Content-Encoding is not supported"},
      /* Taken: no Accept takes anything, and a wildcard; both answer in JSON. Events named
       * by their type, as much wanted as JSON, make the call's answer a stream, and so do
       * they on lines of their own (one list, RFC 9110 §5.3). */
      {JSON_BODY, "200", "Content-Type: application/json"},
      {"Content-Encoding: identity\r\n" JSON_BODY, "200", "Content-Type: application/json"},
      {"Accept: */*\r\n" JSON_BODY, "200", "Content-Type: application/json"},
      {"Accept: application/json, text/event-stream\r\n"
       "Content-Type: Application/JSON; charset=utf-8\r\n",
       "200", "Content-Type: text/event-stream"},
      {"Accept: application/json\r\nAccept: text/event-stream\r\n" JSON_BODY, "200",
       "Content-Type: text/event-stream"},
      {"Accept: text/event-stream;q=0.1, application/json\r\n" JSON_BODY, "200",
       "Content-Type: application/json"},
      {"Accept: application/json;q=0.5, text/event-stream\r\n" JSON_BODY, "200",
       "Content-Type: text/event-stream"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    long runs = fixture_count(w->f, "agent_runs");
    char *headers = NULL;
    assert_true(asprintf(&headers, CALL_HEADERS "%s", cases[i].headers) > 0);
    char *res = http_exchange_as_is(port, "POST", headers, call);
    if (strlen(res) < 12 || strncmp(res + 9, cases[i].status, 3) != 0 ||
        !strstr(res, cases[i].says))
      fail_msg("case %zu: expected %s with '%s', got: %s", i, cases[i].status, cases[i].says, res);
    /* A refusal names the request its body holds. */
    if (cases[i].status[0] == '4' && !strstr(res, "\"id\":1,"))
      fail_msg("case %zu: the refusal names no request: %s", i, res);
    if (strcmp(cases[i].status, "415") == 0 && !strstr(res, "Accept-Encoding: identity\r\n"))
      fail_msg("case %zu: a 415 says no codings it takes: %s", i, res);
    assert_int_equal(fixture_count(w->f, "agent_runs"), runs + (cases[i].status[0] == '2'));
    free(res);
    free(headers);
  }
  /* A body that holds no message is refused for its type all the same, naming none. */
  char *res = http_exchange_as_is(
      port, "POST",
      CALL_HEADERS "Accept: application/json, text/event-stream\r\nContent-Type: text/plain\r\n",
      "hello");
  assert_int_equal(strncmp(res + 9, "415", 3), 0);
  assert_non_null(strstr(res, "Content-Type must be application/json"));
  assert_null(strstr(res, "\"id\""));
  free(res);
  /* A batch past a bound on its nesting: each of its requests is named. */
  char deep[160] = "";
  for (int i = 0; i < 70; i++) strcat(deep, "[");
  for (int i = 0; i < 70; i++) strcat(deep, "]");
  char *batch = NULL;
  assert_true(asprintf(&batch, "[{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"a\":%s}},"
                               "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}]",
                       deep) > 0);
  res = http_exchange_as_is(
      port, "POST",
      CALL_HEADERS "Accept: application/json, text/event-stream\r\nContent-Type: text/plain\r\n",
      batch);
  free(batch);
  assert_int_equal(strncmp(res + 9, "415", 3), 0);
  assert_non_null(strstr(res, "\"id\":5,"));
  assert_non_null(strstr(res, "\"id\":6,"));
  free(res);
#undef CALL_HEADERS
#undef JSON_BODY
  tg_http_stop(h);
}

/* A header that may not repeat is refused when it does (RFC 9110 §5.3, RFC 9112 §3.2), so a
 * proxy that read one line and the server the other can never disagree unseen; a repeated
 * Mcp-Param header is the list of its lines, which mirrors no argument. Nothing runs. */
static void test_http_repeated_headers(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  static const char call[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_x_mcp_header\",\"arguments\":{\"region\":\"eu\"}," MODERN_META "}}";
#define ROUTED                                                                      \
  "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n" \
  HTTP_MODERN "Mcp-Method: tools/call\r\nMcp-Name: test_x_mcp_header\r\n"
  /* The routing headers are MCP's: their faults are -32020 (2026-07-28). */
  static const struct {
    const char *headers, *says, *code;
    bool names_it; /* a header about the message: refused once the body names the request */
  } refused[] = {
      {ROUTED "Mcp-Name: test_simple_text\r\n", "The Mcp-Name header is given more than once",
       "-32020", true},
      {ROUTED "Mcp-Method: tools/call\r\n", "The Mcp-Method header is given", "-32020", true},
      {ROUTED HTTP_MODERN, "The MCP-Protocol-Version header is given", "-32020", true},
      /* On a request of 2025-11-25, which has no -32020. */
      {"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
       "MCP-Protocol-Version: 2025-11-25\r\nMCP-Protocol-Version: 2025-11-25\r\n",
       "The MCP-Protocol-Version header is given", "-32600", true},
      {ROUTED "Host: 127.0.0.1\r\n", "The Host header is given", "-32600", false},
      {ROUTED "Origin: http://localhost\r\nOrigin: http://evil.example\r\n", "The Origin header",
       "-32600", false},
      {ROUTED "Authorization: Bearer a\r\nAuthorization: Bearer b\r\n", "The Authorization header",
       "-32600", false},
      {ROUTED "Content-Type: text/plain\r\n", "The Content-Type header", "-32600", false},
      {ROUTED "Mcp-Session-Id: a\r\nmcp-session-id: b\r\n", "The Mcp-Session-Id header", "-32600",
       true},
      {ROUTED "Last-Event-ID: 1-1\r\nLast-Event-ID: 1-2\r\n", "The Last-Event-ID header", "-32600",
       true},
      {ROUTED "Toolgate-Run: a\r\nToolgate-Run: b\r\n", "The Toolgate-Run header", "-32600", true},
      {ROUTED "Mcp-Param-Region: us\r\nMcp-Param-Region: eu\r\n", "Mcp-Param", "-32020", true},
      {ROUTED "Mcp-Param-Region: eu\r\nMcp-Param-Region: \xff\r\n", "Mcp-Param", "-32020", true},
      /* A body framed twice: the request carries its own Content-Length as well. */
      {ROUTED "Content-Length: 0\r\n", "The Content-Length header is given", "-32600", false},
      {ROUTED "Transfer-Encoding: chunked\r\n", "Content-Length and Transfer-Encoding", "-32600",
       false},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    long runs = fixture_count(w->f, "agent_runs");
    char *res = http_exchange_as_is(port, "POST", refused[i].headers, call);
    char code[32];
    snprintf(code, sizeof code, "\"code\":%s", refused[i].code);
    /* A fault of a header about the message names the request (its body read); one of how
     * it is framed, sent or authenticated cannot (refused before the body). */
    bool names_it = strstr(res, "\"id\":1") != NULL;
    if (strlen(res) < 12 || strncmp(res + 9, "400", 3) != 0 || !strstr(res, refused[i].says) ||
        !strstr(res, code) || names_it != refused[i].names_it)
      fail_msg("case %zu: expected 400 with '%s' (%s), got: %s", i, refused[i].says,
               refused[i].code, res);
    assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
    free(res);
  }
  /* Past 64 names, refused; each header once, served. */
  char many[4096] = ROUTED "Mcp-Param-Region: eu\r\n";
  for (int i = 0; i < 64; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "Mcp-Param-X%d: x\r\n", i);
  char *res = http_exchange_as_is(port, "POST", many, call);
  assert_status(res, "400");
  assert_non_null(strstr(res, "Too many Mcp-Param headers"));
  assert_non_null(strstr(res, "\"code\":-32020")); /* a fault of Mcp-Param headers */
  free(res);
  /* A name past 127 bytes is refused, not cut (two cut alike would pass for one repeated). */
  char long_name[512] = ROUTED "Mcp-Param-";
  memset(long_name + strlen(long_name), 'a', 128);
  strcat(long_name, ": x\r\n");
  res = http_exchange_as_is(port, "POST", long_name, call);
  assert_status(res, "400");
  assert_non_null(strstr(res, "name is too long"));
  assert_non_null(strstr(res, "\"code\":-32020"));
  free(res);
  res = http_exchange_as_is(port, "POST", ROUTED "Mcp-Param-Region: eu\r\n", call);
  assert_status(res, "200");
  assert_non_null(strstr(res, "eu"));
  free(res);
  /* A 2025 request (no _meta claim) repeating one is told in JSON-RPC's own code. */
  res = http_exchange_as_is(port, "POST",
                            "Accept: application/json, text/event-stream\r\nContent-Type: "
                            "application/json\r\nMcp-Method: ping\r\nMcp-Method: ping\r\n",
                            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
  assert_status(res, "400");
  assert_non_null(strstr(res, "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32600,"));
  assert_non_null(strstr(res, "The Mcp-Method header is given more than once"));
  free(res);
  /* An HTTP/1.1 request must name its Host (RFC 9112 §3.2). */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  static const char hostless[] = "POST /mcp HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
  assert_int_equal(write(fd, hostless, sizeof hostless - 1), (ssize_t)(sizeof hostless - 1));
  res = http_read(fd, NULL);
  close(fd);
  assert_status(res, "400");
  assert_non_null(strstr(res, "Host is required"));
  free(res);
#undef ROUTED
  tg_http_stop(h);
}

/* Sends a modern tools/call of test_simple_text to path on the server at addr:port, naming
 * this Host (and Origin, when given); the answer. */
static char *http_call_at(in_addr_t addr, unsigned port, const char *path, const char *host,
                          const char *origin) {
  static const char body[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_simple_text\",\"arguments\":{}," MODERN_META "}}";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(addr)};
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  char *req = NULL;
  int n = asprintf(&req,
                   "POST %s HTTP/1.1\r\nHost: %s\r\n%s%s%sConnection: close\r\n"
                   "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                   HTTP_MODERN "Mcp-Method: tools/call\r\nMcp-Name: test_simple_text\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   path, host, origin ? "Origin: " : "", origin ? origin : "",
                   origin ? "\r\n" : "", strlen(body), body);
  assert_true(n > 0);
  assert_int_equal(write(fd, req, (size_t)n), n);
  free(req);
  char *res = http_read(fd, NULL);
  close(fd);
  return res;
}

static char *http_call_from(unsigned port, const char *host, const char *origin) {
  return http_call_at(INADDR_LOOPBACK, port, "/mcp", host, origin);
}

/* Against DNS rebinding, a request's Host and Origin must name this machine: a loopback name and
 * at most a port. A name followed by anything else ("@", a path, a port that is no number) is
 * refused with 403, however it begins, and nothing runs. */
static void test_http_origin_and_host_name_this_machine(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  static const struct {
    const char *host, *origin, *status;
  } cases[] = {
      {"localhost", NULL, "200"},
      {"127.0.0.1:7878", "http://localhost", "200"},
      {"[::1]:1", "http://localhost:6274", "200"},
      {"LOCALHOST", "https://[::1]:65535", "200"},
      {"localhost", "http://127.0.0.1", "200"},
      {"localhost:7878 \t", "http://localhost:6274 \t", "200"}, /* whitespace is no part */
      {"localhost:80@evil.example", NULL, "403"},
      {"evil.example", NULL, "403"},
      {"localhost.evil.example", NULL, "403"},
      {"localhost:x", NULL, "403"},
      {"localhost:65536", NULL, "403"},
      {"localhost:", NULL, "403"},
      {"[::1]evil", NULL, "403"},
      {"localhost", "http://evil.example", "403"},
      {"localhost", "http://localhost:80@evil.example", "403"},
      {"localhost", "http://localhost@evil.example", "403"},
      {"localhost", "http://localhost.evil.example", "403"},
      {"localhost", "http://localhost/", "403"},
      {"localhost", "http://localhost:123456", "403"},
      {"localhost", "http://localhost:", "403"},
      {"localhost", "null", "403"},
      {"localhost", "ftp://localhost", "403"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    long runs = fixture_count(w->f, "agent_runs");
    char *res = http_call_from(port, cases[i].host, cases[i].origin);
    if (strncmp(res, "HTTP/1.1 ", 9) != 0 || strncmp(res + 9, cases[i].status, 3) != 0)
      fail_msg("case %zu (Host %s, Origin %s): expected %s, got: %s", i, cases[i].host,
               cases[i].origin ? cases[i].origin : "none", cases[i].status, res);
    assert_int_equal(fixture_count(w->f, "agent_runs"), runs + (cases[i].status[0] == '2'));
    free(res);
  }
  tg_http_stop(h);
}

/* A server on another loopback address takes that address as a name of this machine too (the
 * one its links give); a server elsewhere does not. */
static void test_http_a_loopback_address_names_its_server(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  char *res = http_call_from(port, "127.0.0.2", NULL);
  assert_status(res, "403");
  free(res);
  tg_http_stop(h);
  w->http.listen = "127.0.0.2:0";
  assert_int_equal(tg_http_start(&w->http, &h, &port), 0);
  char host[32], origin[48];
  snprintf(host, sizeof host, "127.0.0.2:%u", port);
  snprintf(origin, sizeof origin, "http://127.0.0.2:%u", port);
  static const in_addr_t second = 0x7f000002;
  res = http_call_at(second, port, "/mcp", host, origin);
  assert_status(res, "200");
  free(res);
  res = http_call_at(second, port, "/mcp", "localhost", NULL);
  assert_status(res, "200");
  free(res);
  res = http_call_at(second, port, "/mcp", "127.0.0.3", NULL);
  assert_status(res, "403");
  free(res);
  res = http_call_at(second, port, "/mcp", host, "http://127.0.0.3");
  assert_status(res, "403");
  free(res);
  tg_http_stop(h);
}

/* A request's path is taken as sent: no percent-encoding is another name for /mcp or /healthz
 * (an encoded NUL would end the name early), and nothing runs. /healthz answers any Host, and
 * HEAD too, without a body. */
static void test_http_paths_are_taken_as_sent(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  long runs = fixture_count(w->f, "agent_runs");
  static const char *const paths[] = {"/mcp%00/else", "/m%63p", "/mcp/", "/healthz%00.html"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    char *res = http_call_at(INADDR_LOOPBACK, port, paths[i], "localhost", NULL);
    if (strncmp(res, "HTTP/1.1 404", 12) != 0) fail_msg("%s: %s", paths[i], res);
    free(res);
    /* A page elsewhere learns not even that: the check against DNS rebinding comes first. */
    res = http_call_at(INADDR_LOOPBACK, port, paths[i], "localhost", "http://evil.example");
    if (strncmp(res, "HTTP/1.1 403", 12) != 0) fail_msg("%s: %s", paths[i], res);
    free(res);
    res = http_call_at(INADDR_LOOPBACK, port, paths[i], "evil.example", NULL);
    if (strncmp(res, "HTTP/1.1 403", 12) != 0) fail_msg("%s: %s", paths[i], res);
    free(res);
  }
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs);
  /* A balancer's probe names the address it reached: /healthz answers any Host. A body
   * framed two ways is refused on any path: what follows it must never be read as a request. */
  static const struct { const char *request, *status, *body; } probes[] = {
      {"HEAD /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", "200", ""},
      {"GET /healthz HTTP/1.1\r\nHost: 10.1.2.3:7878\r\nConnection: close\r\n\r\n", "200",
       "{\"status\":\"ok\"}"},
      {"POST /elsewhere HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n"
       "Transfer-Encoding: chunked\r\n\r\n",
       "400",
       "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"Content-Length and "
       "Transfer-Encoding are given together\"}}"},
  };
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    int fd = fixture_connect(port); /* the refused one's connection must close: no read hangs */
    size_t n = strlen(probes[i].request);
    assert_int_equal(write(fd, probes[i].request, n), (ssize_t)n);
    char *res = http_read(fd, NULL);
    close(fd);
    assert_status(res, probes[i].status);
    assert_string_equal(strstr(res, "\r\n\r\n") + 4, probes[i].body);
    free(res);
  }
  tg_http_stop(h);
}

/* A target in absolute form is taken (RFC 9112 §3.2.2), and its host stands for Host's,
 * in the check against DNS rebinding too; one naming a user or no host is a 400. Only the
 * calls let through run. */
static void test_http_absolute_targets(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  long runs = fixture_count(w->f, "agent_runs");
  char own[64];
  snprintf(own, sizeof own, "http://localhost:%u/mcp", port);
  static const struct {
    const char *target, *host, *status;
  } cases[] = {
      {NULL, "localhost", "200"},
      {"HTTP://127.0.0.1/mcp", "elsewhere.example", "200"},
      {"http://elsewhere.example/mcp", "localhost", "403"},
      {"http://someone@localhost/mcp", "localhost", "400"},
      {"http:///mcp", "localhost", "400"},
      {"http://:1/mcp", "localhost", "400"},
      {"http://localhost/mcp/", "localhost", "404"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *target = cases[i].target ? cases[i].target : own;
    char *res = http_call_at(INADDR_LOOPBACK, port, target, cases[i].host, NULL);
    if (strncmp(res + 9, cases[i].status, 3) != 0)
      fail_msg("%s (Host %s): expected %s, got %s", target, cases[i].host, cases[i].status, res);
    free(res);
  }
  assert_int_equal(fixture_count(w->f, "agent_runs"), runs + 2);
  tg_http_stop(h);
}

/* libmicrohttpd's lines about malformed requests, which anyone can send, are logged once a
 * minute at most; the count of those held back is told when the minute is past, or when the
 * server stops. */
static void test_http_malformed_requests_are_logged_once(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  fixture_log log = fixture_log_begin(w->f);
  for (int i = 0; i < 10; i++) {
    char *res = http_exchange_as_is(port, "GET", i < 5 ? "No colon here\r\n" : "Content-Length: x\r\n",
                                    NULL);
    assert_status(res, "400");
    free(res);
  }
  tg_http_stop(h);
  char *text = fixture_log_end(log);
  /* Two kinds, each once: a request refused (each of the ten), and a Content-Length that is no
   * number (the last five); then the counts of those held back, told as the server stopped. */
  assert_int_equal(fixture_occurrences(text, "(libmicrohttpd; 0 more such lines"), 2);
  assert_int_equal(fixture_occurrences(text, ": 9 more lines of this kind held back"), 1);
  assert_int_equal(fixture_occurrences(text, ": 4 more lines of this kind held back"), 1);
  assert_int_equal(fixture_occurrences(text, "warn: http:"), 4);
  free(text);
}

/* Writes n bytes of text on fd; false once the server closed the connection. */
static bool http_write(int fd, const char *text, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t k = send(fd, text + done, n - done, MSG_NOSIGNAL);
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

/* The whole text of a 2026-07-28 POST calling tool with arguments (JSON text), malloc'd. */
static char *modern_call_text(unsigned port, const char *tool, const char *arguments) {
  char *body = NULL, *text = NULL;
  assert_true(asprintf(&body,
                       "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
                       "{\"name\":\"%s\",\"arguments\":%s," MODERN_META "}}",
                       tool, arguments) > 0);
  assert_true(asprintf(&text,
                       "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAccept: application/json, "
                       "text/event-stream\r\nContent-Type: application/json\r\n" HTTP_MODERN
                       "Mcp-Method: tools/call\r\nMcp-Name: %s\r\nContent-Length: %zu\r\n\r\n%s",
                       port, tool, strlen(body), body) > 0);
  free(body);
  return text;
}

/* A POST of server/discover with this Content-Type and these headers, its body (if any) sent
 * apart: the socket. */
static int http_post_head(unsigned port, const char *type, const char *headers) {
  int fd = fixture_connect(port);
  char head[512];
  int n = snprintf(head, sizeof head,
                   "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAccept: application/json, "
                   "text/event-stream\r\nContent-Type: %s\r\n" HTTP_MODERN
                   "Mcp-Method: server/discover\r\n%s\r\n",
                   port, type, headers);
  assert_true(http_write(fd, head, (size_t)n));
  return fd;
}

/* Sends chunks of 64 KB of a chunked body, up to bytes; false once the server closed. */
static bool http_send_chunks(int fd, size_t bytes) {
  static char chunk[10 + 65536 + 2];
  int head = snprintf(chunk, sizeof chunk, "10000\r\n");
  memset(chunk + head, ' ', 65536);
  memcpy(chunk + head + 65536, "\r\n", 2);
  for (size_t sent = 0; sent < bytes; sent += 65536)
    if (!http_write(fd, chunk, (size_t)head + 65536 + 2)) return false;
  return true;
}

/* A body past the bound on a message is refused: before it is read when its length is said
 * to go past twice the bound, else once it ends; a chunked one that goes on past twice the
 * bound has its connection closed without being read to its end. A coding other than chunked
 * is not read at all, nor a list that does not end with chunked or names it twice. */
static void test_http_body_past_the_bound(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  /* Refused from the headers alone, without waiting for the body, and the connection closed
   * after (RFC 9112 §6.1), so that nothing behind the body is read as a request. */
  char past[64];
  snprintf(past, sizeof past, "Content-Length: %u\r\n", 2 * TG_RPC_MAX_BODY + 1);
  const struct {
    const char *headers, *status, *says;
  } refused[] = {
      {"Transfer-Encoding: gzip, chunked\r\n", "501", "Transfer-Encoding other than chunked"},
      /* Chunked twice, or not last: the body's length cannot be read (RFC 9112 §6.3); nor
       * can libmicrohttpd read it with an empty element. */
      {"Transfer-Encoding: chunked, chunked\r\n", "400", "must be chunked alone"},
      {"Transfer-Encoding: chunked, gzip\r\n", "400", "must be chunked alone"},
      {"Transfer-Encoding: gzip\r\n", "400", "must be chunked alone"},
      {"Transfer-Encoding: chunked,\r\n", "400", "must be chunked alone"},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "400", "given together"},
      {past, "413", "Message too large"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    int fd = http_post_head(port, "application/json", refused[i].headers);
    char *res = http_read(fd, NULL);
    assert_status(res, refused[i].status);
    assert_non_null(strstr(res, refused[i].says));
    assert_non_null(strstr(res, "Connection: close\r\n"));
    free(res);
    close(fd);
  }
  /* Past the bound but within twice it: read, then refused (chunked, or its length said). */
  int fd = http_post_head(port, "application/json", "Transfer-Encoding: chunked\r\n");
  assert_true(http_send_chunks(fd, TG_RPC_MAX_BODY + 1));
  assert_true(http_write(fd, "0\r\n\r\n", 5));
  char *res = http_read(fd, "Message too large");
  assert_status(res, "413");
  free(res);
  close(fd);
  snprintf(past, sizeof past, "Content-Length: %u\r\n", 2 * TG_RPC_MAX_BODY); /* the most */
  char *body = malloc(2 * TG_RPC_MAX_BODY);
  memset(body, ' ', 2 * TG_RPC_MAX_BODY);
  static const char head[] =
      "{\"jsonrpc\":\"2.0\",\"method\":\"server/discover\",\"params\":{\"pad\":\"";
  static const char tail[] = "\"},\"id\":12}";
  memcpy(body, head, sizeof head - 1);
  memcpy(body + 2 * TG_RPC_MAX_BODY - (sizeof tail - 1), tail, sizeof tail - 1);
  /* Of a type that is no JSON, it is refused for its type, as one within the bound is. */
  static const struct {
    const char *type, *status, *says;
  } typed[] = {{"application/json", "413", "\"limit\":\"size\""},
               {"text/plain", "415", "Content-Type must be application/json"}};
  for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
    fd = http_post_head(port, typed[i].type, past);
    assert_true(http_write(fd, body, 2 * TG_RPC_MAX_BODY));
    res = http_read(fd, typed[i].says);
    assert_status(res, typed[i].status);
    assert_non_null(strstr(res, "\"id\":12")); /* scanned for in what was dropped */
    free(res);
    close(fd);
  }
  free(body);
  fd = http_post_head(port, "application/json", "Transfer-Encoding: chunked\r\n");
  /* The server closes the connection once past twice the bound, without an answer. */
  assert_false(http_send_chunks(fd, 64u * 1024 * 1024));
  close(fd);
  res = http_exchange_as_is(port, "POST",
                            "Accept: application/json, text/event-stream\r\nContent-Type: "
                            "application/json\r\n" HTTP_MODERN "Mcp-Method: server/discover\r\n",
                            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\","
                            "\"params\":{" MODERN_META "}}");
  assert_status(res, "200");
  free(res);
  tg_http_stop(h);
}

/* A request whose body the HTTP library frames otherwise than a proxy in front may, with a
 * complete request as its body: the answer is an error, the connection closes after it, and
 * the request hidden in the body never runs (request smuggling). A header whose name is not a
 * token ("Content-Length :") is refused as such; libmicrohttpd joins a folded line to the
 * header's name ("Content-Length5"), which is refused too, on any method; it ends the headers
 * at a line with no name, so that a POST has no body to it, which fails it; an HTTP/1.0
 * request's Transfer-Encoding is faulty framing. */
static void test_http_misframed_requests_run_nothing(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  char *hidden = modern_call_text(port, "test_simple_text", "{}");
  size_t n = strlen(hidden);
  long before = calls_audited(w, "test.simple.text", "INFO");
  static const struct {
    const char *length, *says; /* the line naming the body's length (%zu: its bytes) */
  } misframed[] = {
      {"Content-Length : %zu\r\n", "A header's name is not a token"},
      {"Content-Length\t: %zu\r\n", "A header's name is not a token"},
      {"Content-Length:\r\n %zu\r\n", "runs on from Content-Length"},
      {": x\r\nContent-Length: %zu\r\n", "Parse error"},
  };
  for (size_t i = 0; i < sizeof misframed / sizeof misframed[0]; i++) {
    char length[64];
    snprintf(length, sizeof length, misframed[i].length, n);
    int fd = http_post_head(port, "application/json", length);
    assert_true(http_write(fd, hidden, n));
    char *res = http_read(fd, NULL); /* to the end: the server closes the connection */
    assert_status(res, "400");
    assert_non_null(strstr(res, misframed[i].says));
    assert_non_null(strstr(res, "Connection: close\r\n"));
    assert_null(strstr(res + 1, "HTTP/1.1 ")); /* one answer, not two */
    free(res);
    close(fd);
  }
  /* A DELETE needs no body: one of a live session that it does not see would not fail it. */
  char sid[64] = "", *deleting = NULL;
  http_open_session(port, sid);
  assert_true(asprintf(&deleting,
                       "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nMcp-Session-Id: %s\r\n"
                       "Content-Length:\r\n %zu\r\n\r\n%s",
                       port, sid, n, hidden) > 0);
  int fd = fixture_connect(port);
  assert_true(http_write(fd, deleting, strlen(deleting)));
  char *res = http_read(fd, NULL);
  assert_status(res, "400");
  assert_non_null(strstr(res, "runs on from Content-Length"));
  assert_null(strstr(res, "simple text response")); /* the hidden call's answer */
  free(res);
  close(fd);
  free(deleting);
  char *chunked = NULL;
  assert_true(asprintf(&chunked,
                       "POST /mcp HTTP/1.0\r\nHost: 127.0.0.1:%u\r\nConnection: keep-alive\r\n"
                       "Content-Type: application/json\r\nAccept: application/json, "
                       "text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n"
                       "0\r\n\r\n%s",
                       port, n, hidden, hidden) > 0);
  fd = fixture_connect(port);
  assert_true(http_write(fd, chunked, strlen(chunked)));
  res = http_read(fd, NULL);
  assert_non_null(strstr(res, "400 Bad Request"));
  assert_non_null(strstr(res, "Transfer-Encoding is not HTTP/1.0's"));
  assert_null(strstr(res, "simple text response")); /* the hidden call's answer */
  free(res);
  close(fd);
  free(chunked);
  assert_int_equal(calls_audited(w, "test.simple.text", "INFO"), before);
  /* A name of bytes past ASCII is no token either (it was once taken for a failure to
   * allocate, and the connection closed without an answer); a bare CR in a value, which the
   * library keeps, is refused too (RFC 9110 §5.5). */
  static const struct {
    const char *header, *says;
  } bad[] = {{"Mcp-Param-\xd5\xd5: x\r\n", "A header's name is not a token"},
             {"X-Note: a\rb\r\n", "A header's value holds a control character"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char headers[128];
    snprintf(headers, sizeof headers, "%sContent-Length: 2\r\n", bad[i].header);
    fd = http_post_head(port, "application/json", headers);
    assert_true(http_write(fd, "{}", 2));
    res = http_read(fd, NULL);
    assert_status(res, "400");
    assert_non_null(strstr(res, bad[i].says));
    free(res);
    close(fd);
  }
  /* Sent on its own, the hidden call runs and is counted: the checks above could tell. */
  fd = fixture_connect(port);
  assert_true(http_write(fd, hidden, n));
  res = http_read(fd, "This is a simple text response");
  assert_status(res, "200");
  free(res);
  close(fd);
  assert_int_equal(calls_audited(w, "test.simple.text", "INFO"), before + 1);
  free(hidden);
  tg_http_stop(h);
}

/* On 2026-07-28 HTTP a client cancels by going away, also by only half-closing its
 * connection after its request: it is told nothing (an event stream that ends without an
 * event), and what the call did is not written. */
static void test_http_half_close_cancels(void **state) {
  world *w = *state;
  fixture_agent(w->f, "{\"slug\":\"writer\",\"grants\":[\"canAssignTasks\"]}", w->agent);
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  char *call = modern_call_text(port, "work_task_create", "{\"title\":\"half-closed\"}");
  long tasks = fixture_count(w->f, "tasks");
  int fd = fixture_connect(port);
  /* Held back (MSG_MORE) until the shutdown sends it with the end of the stream: the server
   * reads the request and its end together, whatever the timing. */
  assert_int_equal(send(fd, call, strlen(call), MSG_MORE), (ssize_t)strlen(call));
  assert_int_equal(shutdown(fd, SHUT_WR), 0);
  char *res = http_read(fd, NULL);
  assert_status(res, "200");
  assert_non_null(strstr(res, "Content-Type: text/event-stream\r\n"));
  assert_null(strstr(res, "\"jsonrpc\"")); /* no result, no error */
  free(res);
  close(fd);
  assert_int_equal(fixture_count(w->f, "tasks"), tasks);
  /* Read to its end, the same call writes its task: the count could tell. */
  fd = fixture_connect(port);
  assert_true(http_write(fd, call, strlen(call)));
  res = http_read(fd, "\"result\"");
  assert_status(res, "200");
  free(res);
  close(fd);
  assert_int_equal(fixture_count(w->f, "tasks"), tasks + 1);
  free(call);
  tg_http_stop(h);
}

/* Over Streamable HTTP: a listen stream names a task, hears it as it goes and as it ends,
 * and gets its result when the server stops. */
static void test_http_task_notifications(void **state) {
  world *w = *state;
  unsigned port = 0;
  tg_http *h = http_start(w, &port);
  char *res = http_exchange(
      port, "POST", NULL, HTTP_MODERN "Mcp-Method: tools/call\r\nMcp-Name: slow_compute\r\n",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"slow_compute\",\"arguments\":{\"seconds\":600,\"label\":\"web\"}," TASKS_META "}}");
  assert_status(res, "200");
  char id[33] = "", *at = strstr(res, "\"taskId\":\"");
  assert_true(at && sscanf(at + 10, "%32[0-9a-f]", id) == 1);
  free(res);
  char *body = NULL, *headers = NULL;
  assert_true(asprintf(&body,
                       "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"subscriptions/listen\","
                       "\"params\":{\"notifications\":{\"taskIds\":[\"%s\"]}," TASKS_META "}}",
                       id) > 0);
  int listen =
      http_send(port, "POST", NULL, HTTP_MODERN "Mcp-Method: subscriptions/listen\r\n", body);
  free(body);
  res = http_read(listen, "\"statusMessage\":\"Computing web: ");
  assert_status(res, "200");
  assert_non_null(strstr(res, "notifications/subscriptions/acknowledged"));
  assert_non_null(strstr(res, id));
  free(res);
  assert_true(asprintf(&body,
                       "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/cancel\",\"params\":{"
                       "\"taskId\":\"%s\"," TASKS_META "}}",
                       id) > 0);
  assert_true(
      asprintf(&headers, HTTP_MODERN "Mcp-Method: tasks/cancel\r\nMcp-Name: %s\r\n", id) > 0);
  res = http_exchange(port, "POST", NULL, headers, body);
  assert_status(res, "200");
  free(res);
  free(http_read(listen, "\"status\":\"cancelled\""));
  /* The server stops: the subscription ends with its result. */
  tg_http_stop(h);
  res = http_read(listen, NULL);
  assert_non_null(strstr(res, "\"id\":2,\"result\":{\"resultType\":\"complete\""));
  free(res);
  close(listen);
  free(headers);
  free(body);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_initialize_negotiates_legacy),
      T(test_tools_list_per_principal),
      T(test_tools_list_matches_the_registry),
      T(test_task_only_tools_are_not_listed_on_2025),
      T(test_listed_output_schema_keeps_its_references),
      T(test_tools_call_through_the_gate),
      T(test_modern_ladder),
      T(test_subscriptions_name_resources_that_exist),
      T(test_inactive_agent_is_offered_no_fixtures),
      T(test_an_approval_lasts_a_call_of_many_rounds),
      T(test_cursors_only_as_written),
      T(test_header_values_a_client_must_encode),
      T(test_a_refusal_between_rounds_is_audited_in_its_run),
      T(test_a_refusal_naming_no_run_of_its_agent_is_audited_in_none),
      T(test_elicitation_in_the_mode_declared),
      T(test_stdio_pinning),
      T(test_stdio_pinned_to_2025),
      T(test_only_what_is_served_is_declared),
      T(test_initialize_checks_its_params),
      T(test_prompt_arguments_are_strings),
      T(test_an_embedded_resource_has_a_uri),
      T(test_a_template_resource_has_a_uri),
      T(test_param_keys),
      T(test_completion),
      T(test_progress_and_logging),
      T(test_an_older_session_is_not_asked_to_elicit),
      T(test_elicitation_asks_the_client),
      T(test_input_requests_asked_on_2025),
      T(test_which_tools_have_their_input_asked_on_2025),
      T(test_a_url_elicitation_asked_on_2025_names_itself),
      T(test_a_state_too_large_to_come_back_fails_the_call),
      T(test_http_get_stream_and_resumption),
      T(test_tasks_advertised_and_listed),
      T(test_task_runs_and_is_audited),
      T(test_task_input_rounds),
      T(test_task_cancel),
      T(test_a_task_end_is_audited_in_its_run),
      T(test_task_failures),
      T(test_tasks_need_the_extension),
      T(test_a_task_asking_what_its_client_cannot_give_fails),
      T(test_task_of_another_principal),
      T(test_input_then_task),
      T(test_request_state_is_bound_to_the_arguments),
      T(test_request_state_outlives_its_server),
      T(test_a_state_of_another_form_is_refused),
      T(test_a_read_takes_no_state),
      T(test_stateless_answers_are_checked_against_what_was_asked),
      T(test_answers_sent_on_2025_are_no_answers),
      T(test_fixture_rounds_answered_in_parts),
      T(test_a_sampled_message_may_come_in_blocks),
      T(test_task_running_limits),
      T(test_task_kept_limit),
      T(test_listen_leaves_out_what_the_database_cannot_tell),
      T(test_task_holding_limits),
      T(test_a_listen_keeps_what_it_was_not_told),
      T(test_cancelled_tasks_make_room),
      T(test_task_unkept_stays),
      T(test_task_outlives_its_server),
      T(test_task_run_by_another_server),
      T(test_task_parked_seen_elsewhere),
      T(test_failed_sweep_is_tried_again),
      T(test_task_of_a_gone_server),
      T(test_task_unrecorded_is_no_task),
      T(test_task_unkept_written_at_stop),
      T(test_task_unkept_written_at_next_start),
      T(test_task_stop_waits_once_for_a_locked_database),
      T(test_task_start_waits_once_for_a_locked_database),
      T(test_task_rows_at_stop),
      T(test_task_end_shown_once_kept),
      cmocka_unit_test_setup_teardown(test_task_unkept_never_expires, setup, teardown_clock),
      T(test_task_unkept_own_first),
      T(test_task_stop_tells_only_its_cancels),
      T(test_stop_cancels_a_task_waiting_for_input_at_once),
      T(test_task_failure_after_cancel),
      T(test_task_tells_its_request_until_it_detaches),
      T(test_task_notifications),
      T(test_task_notifications_follow_rounds),
      T(test_task_status_message),
      T(test_task_notifications_refused),
      T(test_http_post_media_types),
      T(test_http_repeated_headers),
      T(test_http_origin_and_host_name_this_machine),
      T(test_http_a_loopback_address_names_its_server),
      T(test_http_absolute_targets),
      T(test_http_paths_are_taken_as_sent),
      T(test_http_malformed_requests_are_logged_once),
      T(test_http_body_past_the_bound),
      T(test_http_misframed_requests_run_nothing),
      T(test_http_half_close_cancels),
      T(test_http_task_notifications),
      T(test_listen_after_the_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

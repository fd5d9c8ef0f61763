#define _GNU_SOURCE
#include "tools/conformance.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/call.h"
#include "util/cleanup.h"
#include "util/json.h"
#include "util/status.h"

/* The suite only checks that these decode as base64 of the right media type. */
#define PNG_1X1                                                                         \
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ" \
  "RU5ErkJggg=="
#define WAV_TINY "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="



static int content_result(json_t *content, json_t **ret) {
  *ret = json_pack("{s:o}", "content", content);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static json_t *text(const char *s) { return json_pack("{s:s,s:s}", "type", "text", "text", s); }

static int h_simple_text(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(json_pack("[o]", text("This is a simple text response for testing.")), ret);
}

static int h_image(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(
      json_pack("[{s:s,s:s,s:s}]", "type", "image", "data", PNG_1X1, "mimeType", "image/png"),
      ret);
}

static int h_audio(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(
      json_pack("[{s:s,s:s,s:s}]", "type", "audio", "data", WAV_TINY, "mimeType", "audio/wav"),
      ret);
}

static int h_embedded(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(json_pack("[{s:s,s:{s:s,s:s,s:s}}]", "type", "resource", "resource",
                                  "uri", "test://embedded-resource", "mimeType", "text/plain",
                                  "text", "This is an embedded resource content."),
                        ret);
}

static int h_mixed(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(
      json_pack("[o,{s:s,s:s,s:s},{s:s,s:{s:s,s:s,s:s}}]", text("Multiple content types test:"),
                "type", "image", "data", PNG_1X1, "mimeType", "image/png", "type", "resource",
                "resource", "uri", "test://mixed-content-resource", "mimeType",
                "application/json", "text", "{\"test\":\"data\",\"value\":123}"),
      ret);
}

static int level_rank(const char *level) {
  static const char *const levels[] = {"debug", "info",     "notice", "warning",
                                       "error", "critical", "alert",  "emergency"};
  for (size_t i = 0; level && i < sizeof levels / sizeof levels[0]; i++)
    if (strcmp(level, levels[i]) == 0) return (int)i;
  return -1;
}

static int h_logging(tg_call_ctx *cx, json_t *args, json_t **ret) {
  static const char *const steps[] = {"Tool execution started", "Tool processing data",
                                      "Tool execution completed"};
  const tg_client_channel *ch = cx->client;
  /* Log messages go out only at or above the level the client asked for. */
  if (ch && ch->log_level && level_rank(ch->log_level) <= level_rank("info")) {
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      int r = ch->notify(ch->self, "notifications/message",
                         json_pack("{s:s,s:s,s:s}", "level", "info", "logger", "conformance",
                                   "data", steps[i]));
      if (r < 0) return r;
    }
  }
  return content_result(json_pack("[o]", text("Tool with logging executed successfully")), ret);
}

/* Tells the client how far the call got, when it asked to hear. */
static int report(tg_call_ctx *cx, json_int_t done, json_int_t total, const char *message) {
  const tg_client_channel *ch = cx->client;
  if (!ch || !ch->progress_token) return TG_OK;
  return ch->notify(ch->self, "notifications/progress",
                    json_pack("{s:O,s:I,s:I,s:s}", "progressToken", ch->progress_token,
                              "progress", done, "total", total, "message", message));
}

static int h_progress(tg_call_ctx *cx, json_t *args, json_t **ret) {
  for (int step = 0; step <= 100; step += 50) {
    int r = report(cx, step, 100, "working");
    if (r < 0) return r;
  }
  return content_result(json_pack("[o]", text("Tool with progress executed successfully")), ret);
}

static int h_error(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL,
                 "This tool intentionally returns an error for testing");
}

static int call_cancelled(tg_call_ctx *cx) {
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL,
                 "The call was cancelled (by its client, or by the server stopping)");
}

/* Sends method to the client when the connection can and the client declared it can
 * answer. */
static int ask_client(tg_call_ctx *cx, const char *method, json_t *params, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  if (!params) return TG_E_NOMEM;
  if (!ch || !ch->ask) {
    json_decref(params);
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL,
                   "This request has no way to send %s to the client", method);
  }
  if (!tg_client_can(ch->capabilities, method, params)) {
    json_t *need = NULL;
    tg_client_requirement(method, params, &need); /* without it, the details name none */
    json_decref(params);
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, json_pack("{s:o*}", "requiredCapabilities", need),
                   "The client cannot answer %s on this connection", method);
  }
  int r = ch->ask(ch->self, method, params, ret);
  if (r == TG_E_INVAL)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL,
                   "The client may not be asked %s yet: its session is not initialized", method);
  if (r == TG_E_TOOL)
    return tg_fail(cx, TG_ERR_PROVIDER_ERROR, json_pack("{s:o}", "clientError", *ret),
                   "The client refused %s, or its answer does not fit it", method);
  if (r < 0 && ch->cancelled && ch->cancelled(ch->self)) return call_cancelled(cx);
  if (r == TG_E_IO)
    return tg_fail(cx, TG_ERR_PROVIDER_ERROR, NULL,
                   "The client did not answer %s: it went away, did not answer in time, or the "
                   "server is stopping", method);
  if (r == TG_E_TOO_LARGE)
    return tg_fail(cx, TG_ERR_RATE_LIMITED, NULL,
                   "The question cannot go out now: too many wait for this client's answers, "
                   "or too much output waits for it to read; retry later");
  return r;
}

static int answer_with(const char *prefix, json_t *answer, json_t **ret) {
  _cleanup_free_ char *dump = json_dumps(answer, JSON_COMPACT);
  _cleanup_free_ char *line = NULL;
  json_decref(answer);
  if (!dump || asprintf(&line, "%s%s", prefix, dump) < 0) return TG_E_NOMEM;
  return content_result(json_pack("[o]", text(line)), ret);
}

static int h_sampling(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *answer = NULL;
  int r = ask_client(cx, "sampling/createMessage",
                     json_pack("{s:[{s:s,s:{s:s,s:O}}],s:i}", "messages", "role", "user",
                               "content", "type", "text", "text",
                               json_object_get(args, "prompt"), "maxTokens", 100),
                     &answer);
  return r ? r : answer_with("LLM response: ", answer, ret);
}

static int h_elicitation(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *answer = NULL;
  int r = ask_client(cx, "elicitation/create",
      json_pack("{s:O,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:s,s:s}},s:[s,s]}}", "message",
                json_object_get(args, "message"), "requestedSchema", "type", "object",
                "properties", "username", "type", "string", "description", "Your username",
                "email", "type", "string", "format", "email", "description", "Your email",
                "required", "username", "email"),
      &answer);
  return r ? r : answer_with("User response: ", answer, ret);
}

static int h_sep1034(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *answer = NULL;
  int r = ask_client(cx, "elicitation/create",
      json_pack("{s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:i},s:{s:s,s:f},s:{s:s,s:[s,s,s],s:s},"
                "s:{s:s,s:b}}}}",
                "message", "Please review and update the form fields with defaults",
                "requestedSchema", "type", "object", "properties", "name", "type", "string",
                "default", "John Doe", "age", "type", "integer", "default", 30, "score", "type",
                "number", "default", 95.5, "status", "type", "string", "enum", "active",
                "inactive", "pending", "default", "active", "verified", "type", "boolean",
                "default", 1),
      &answer);
  return r ? r : answer_with("Elicitation completed: ", answer, ret);
}

static const char sep1330_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"untitledSingle\":{\"type\":\"string\",\"enum\":[\"option1\",\"option2\",\"option3\"]},"
    "\"titledSingle\":{\"type\":\"string\",\"oneOf\":[{\"const\":\"value1\",\"title\":\"First "
    "Option\"},{\"const\":\"value2\",\"title\":\"Second Option\"},{\"const\":\"value3\","
    "\"title\":\"Third Option\"}]},"
    "\"legacyEnum\":{\"type\":\"string\",\"enum\":[\"opt1\",\"opt2\",\"opt3\"],\"enumNames\":["
    "\"Option One\",\"Option Two\",\"Option Three\"]},"
    "\"untitledMulti\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"option1\","
    "\"option2\",\"option3\"]}},"
    "\"titledMulti\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"const\":\"value1\",\"title\":"
    "\"First Choice\"},{\"const\":\"value2\",\"title\":\"Second Choice\"},{\"const\":\"value3\","
    "\"title\":\"Third Choice\"}]}}}}";

static int h_sep1330(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *schema = json_loads(sep1330_schema, 0, NULL);
  if (!schema) return TG_E_NOMEM;
  json_t *answer = NULL;
  int r = ask_client(cx, "elicitation/create",
                     json_pack("{s:s,s:o}", "message", "Pick from the enums", "requestedSchema",
                               schema),
                     &answer);
  return r ? r : answer_with("Elicitation completed: ", answer, ret);
}

static int h_json_schema(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return content_result(json_pack("[o]", text("Received the arguments")), ret);
}

/* ---- 2026-07-28 multi round-trip requests ---- */

static json_t *elicit(const char *message, const char *property, const char *type) {
  return json_pack("{s:s,s:{s:s,s:{s:s,s:{s:{s:s}},s:[s]}}}", "method", "elicitation/create",
                   "params", "message", message, "requestedSchema", "type", "object",
                   "properties", property, "type", type, "required", property);
}

static json_t *sample(const char *question, int max_tokens) {
  return json_pack("{s:s,s:{s:[{s:s,s:{s:s,s:s}}],s:i}}", "method", "sampling/createMessage",
                   "params", "messages", "role", "user", "content", "type", "text", "text",
                   question, "maxTokens", max_tokens);
}

static json_t *roots(void) { return json_pack("{s:s,s:{}}", "method", "roots/list", "params"); }

/* An InputRequiredResult; requests is stolen, state may be NULL. */
static int input_required(json_t *requests, const char *state, json_t **ret) {
  if (!requests) return TG_E_NOMEM;
  *ret = json_pack("{s:s,s:o}", "resultType", "input_required", "inputRequests", requests);
  if (*ret && state && json_object_set_new(*ret, "requestState", json_string(state)) < 0) {
    json_decref(*ret);
    *ret = NULL;
  }
  return *ret ? TG_OK : TG_E_NOMEM;
}

static json_t *answer(tg_call_ctx *cx, const char *key) {
  return cx->client ? json_object_get(cx->client->input_responses, key) : NULL;
}

static const char *state(tg_call_ctx *cx) { return cx->client ? cx->client->request_state : NULL; }

static int text_result(const char *line, json_t **ret) {
  return content_result(json_pack("[o]", text(line)), ret);
}

/* The string field of an elicitation answer's content. */
static const char *elicited(tg_call_ctx *cx, const char *key, const char *field) {
  return json_string_value(json_object_get(json_object_get(answer(cx, key), "content"), field));
}

/* Whether an elicitation's answer declined or cancelled it: asking again would never end. */
static bool refused(json_t *answer) {
  const char *action = json_string_value(json_object_get(answer, "action"));
  return answer && (!action || strcmp(action, "accept") != 0);
}

static int h_ir_elicitation(tg_call_ctx *cx, json_t *args, json_t **ret) {
  if (refused(answer(cx, "user_name"))) return text_result("No name was given", ret);
  const char *name = elicited(cx, "user_name", "name");
  if (!name) return input_required(json_pack("{s:o}", "user_name", elicit("What is your name?", "name", "string")), NULL, ret);
  _cleanup_free_ char *line = NULL;
  return asprintf(&line, "Hello, %s!", name) < 0 ? TG_E_NOMEM : text_result(line, ret);
}

/* The text of a sampled message: its one block's, or its first text block's. */
static const char *sampled_text(json_t *message) {
  json_t *content = json_object_get(message, "content");
  size_t i;
  json_t *block;
  json_array_foreach(content, i, block) {
    const char *text = json_string_value(json_object_get(block, "text"));
    if (text) return text;
  }
  return json_string_value(json_object_get(content, "text"));
}

static int h_ir_sampling(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *a = answer(cx, "capital_question");
  if (!a) return input_required(json_pack("{s:o}", "capital_question", sample("What is the capital of France?", 100)), NULL, ret);
  const char *reply = sampled_text(a);
  _cleanup_free_ char *line = NULL;
  return asprintf(&line, "The model answered: %s", reply ? reply : "(no text)") < 0 ? TG_E_NOMEM
                                                                                    : text_result(line, ret);
}

static int h_ir_roots(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *list = json_object_get(answer(cx, "client_roots"), "roots");
  if (!json_is_array(list)) return input_required(json_pack("{s:o}", "client_roots", roots()), NULL, ret);
  _cleanup_free_ char *line = NULL;
  return asprintf(&line, "The client has %zu roots", json_array_size(list)) < 0 ? TG_E_NOMEM
                                                                              : text_result(line, ret);
}

static int h_ir_request_state(tg_call_ctx *cx, json_t *args, json_t **ret) {
  if (!answer(cx, "confirm") || !state(cx) || strcmp(state(cx), "awaiting-confirmation") != 0)
    return input_required(json_pack("{s:{s:s,s:{s:s,s:{s:s,s:{s:{s:s}},s:[s]}}}}", "confirm",
                                    "method", "elicitation/create", "params", "message",
                                    "Please confirm", "requestedSchema", "type", "object",
                                    "properties", "ok", "type", "boolean", "required", "ok"),
                          "awaiting-confirmation", ret);
  return text_result("state-ok: the confirmation arrived with its request state", ret);
}

/* Asks three things at once. A client may answer them in parts, round by round: the state
 * carries the answers given so far (JSON), so that each round asks only for what is missing. */
static int h_ir_multiple(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)args;
  _cleanup_json_ json_t *got = state(cx) ? json_loads(state(cx), 0, NULL) : json_object();
  json_t *asked = json_pack("{s:o,s:o,s:o}", "user_name",
                            elicit("What is your name?", "name", "string"), "greeting",
                            sample("Generate a greeting", 50), "client_roots", roots());
  if (!json_is_object(got) || !asked) {
    json_decref(asked);
    return TG_E_NOMEM; /* the state is the server's, sealed: it reads */
  }
  const char *key;
  json_t *request, *next;
  json_object_foreach_safe(asked, next, key, request) {
    json_t *a = answer(cx, key);
    if (a && json_object_set(got, key, a) < 0) {
      json_decref(asked);
      return TG_E_NOMEM;
    }
    if (json_object_get(got, key)) json_object_del(asked, key);
  }
  if (!json_object_size(asked)) {
    json_decref(asked);
    return text_result("Received the name, the greeting and the roots", ret);
  }
  _cleanup_free_ char *kept = json_dumps(got, JSON_COMPACT);
  if (!kept) {
    json_decref(asked);
    return TG_E_NOMEM;
  }
  return input_required(asked, kept, ret);
}

static int h_ir_multi_round(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *st = state(cx);
  if (refused(answer(cx, "step1")) || refused(answer(cx, "step2")))
    return text_result("The questions were not all answered", ret);
  const char *name = elicited(cx, "step1", "name");
  const char *color = elicited(cx, "step2", "color");
  if (st && strncmp(st, "round-2:", 8) == 0 && color) {
    _cleanup_free_ char *line = NULL;
    return asprintf(&line, "%s likes %s", st + 8, color) < 0 ? TG_E_NOMEM : text_result(line, ret);
  }
  if (st && strcmp(st, "round-1") == 0 && name) {
    _cleanup_free_ char *next = NULL;
    if (asprintf(&next, "round-2:%.*s", TG_UTF8_CUT(name, 64)) < 0) return TG_E_NOMEM;
    return input_required(json_pack("{s:o}", "step2", elicit("Step 2: What is your favorite color?", "color", "string")), next, ret);
  }
  return input_required(json_pack("{s:o}", "step1", elicit("Step 1: What is your name?", "name", "string")), "round-1", ret);
}

static int h_ir_tampered(tg_call_ctx *cx, json_t *args, json_t **ret) {
  /* The surface rejects altered state before this runs; an intact one completes. */
  if (state(cx) && strcmp(state(cx), "untampered") == 0 && answer(cx, "confirm"))
    return text_result("The request state came back intact", ret);
  return input_required(json_pack("{s:o}", "confirm", elicit("Please confirm", "ok", "boolean")), "untampered", ret);
}

/* An InputRequiredResult asking request (stolen) under key, when a client declaring caps can
 * answer it: 1 with *ret, 0 when it cannot, or TG_E_NOMEM. */
static int ask_if_able(json_t *caps, const char *key, json_t *request, json_t **ret) {
  if (!request) return TG_E_NOMEM;
  if (!tg_client_can(caps, json_string_value(json_object_get(request, "method")),
                     json_object_get(request, "params"))) {
    json_decref(request);
    return 0;
  }
  int r = input_required(json_pack("{s:o}", key, request), NULL, ret);
  return r < 0 ? r : 1;
}

static int h_ir_capabilities(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *caps = cx->client ? cx->client->capabilities : NULL;
  if (answer(cx, "user_name") || answer(cx, "question") || answer(cx, "client_roots"))
    return text_result("Received an answer the client was able to give", ret);
  /* Only what this request's client declared it can answer, the first way it can. */
  int r = ask_if_able(caps, "user_name", elicit("What is your name?", "name", "string"), ret);
  if (r == 0) r = ask_if_able(caps, "question", sample("Say hello", 50), ret);
  if (r == 0) r = ask_if_able(caps, "client_roots", roots(), ret);
  if (r != 0) return r < 0 ? r : TG_OK;
  return text_result("The client declared no way to answer questions", ret);
}

/* Needs sampling: asked directly on a legacy session, as an input request on 2026-07-28
 * (which the surface refuses with -32021 when the client did not declare sampling). */
static int h_missing_capability(tg_call_ctx *cx, json_t *args, json_t **ret) {
  if (cx->client && cx->client->ask) {
    json_t *reply = NULL;
    int r = ask_client(cx, "sampling/createMessage",
                       json_pack("{s:[{s:s,s:{s:s,s:s}}],s:i}", "messages", "role", "user",
                                 "content", "type", "text", "text", "Say hello", "maxTokens", 50),
                       &reply);
    return r ? r : answer_with("LLM response: ", reply, ret);
  }
  json_t *a = answer(cx, "needs_sampling");
  if (a) return text_result("Sampling answered", ret);
  return input_required(json_pack("{s:o}", "needs_sampling", sample("Say hello", 50)), NULL, ret);
}

static int h_x_mcp_header(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *region = json_string_value(json_object_get(args, "region"));
  _cleanup_free_ char *line = NULL;
  return asprintf(&line, "Region: %s", region ? region : "(none)") < 0 ? TG_E_NOMEM : text_result(line, ret);
}

static int h_streaming_elicitation(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return text_result("Answered on the response stream without asking the client", ret);
}

/* Where the transport can (a 2025-11-25 session over HTTP), the call's stream closes before
 * the result, which then waits for the client's GET with Last-Event-ID. */
static int h_reconnection(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  int r = ch && ch->close_stream ? ch->close_stream(ch->self) : TG_OK;
  return r < 0 ? r : text_result("Reconnection test completed: the result came after the stream closed", ret);
}

/* The list does not change: the surface is told it did, and tells whoever listens. */
static int trigger(tg_call_ctx *cx, const char *method, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  int r = ch ? ch->notify(ch->self, method, NULL) : TG_OK;
  return r < 0 ? r : text_result("Change announced", ret);
}

static int h_trigger_tool_change(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return trigger(cx, "notifications/tools/list_changed", ret);
}

static int h_trigger_prompt_change(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return trigger(cx, "notifications/prompts/list_changed", ret);
}

/* ---- tasks (io.modelcontextprotocol/tasks) ---- */


/* Becomes a task where the call can; elsewhere it goes on as a plain call. */
static int detach(tg_call_ctx *cx) {
  const tg_client_channel *ch = cx->client;
  if (!ch || !ch->detach || ch->detach(ch->self) == TG_OK) return TG_OK;
  if (ch->cancelled && ch->cancelled(ch->self)) return call_cancelled(cx);
  return tg_fail(cx, TG_ERR_INTERNAL_ERROR, NULL, "The call could not become a task");
}

/* Waits ms, failing as soon as the client cancels (a failure writes nothing). */
static int pause_ms(tg_call_ctx *cx, long long ms) {
  const tg_client_channel *ch = cx->client;
  for (long long left = ms;; left -= 50) {
    if (ch && ch->cancelled && ch->cancelled(ch->self)) return call_cancelled(cx);
    if (left <= 0) return TG_OK;
    struct timespec step = {0, (left < 50 ? left : 50) * 1000000L};
    nanosleep(&step, NULL);
  }
}

static int h_greet(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_free_ char *line = NULL;
  return asprintf(&line, "Hello, %s!", json_string_value(json_object_get(args, "name"))) < 0
             ? TG_E_NOMEM
             : text_result(line, ret);
}

static int h_slow_compute(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t seconds = json_integer_value(json_object_get(args, "seconds"));
  const char *label = json_string_value(json_object_get(args, "label"));
  if (!label) label = "(unlabelled)";
  /* No wait, no task: the result comes at once. */
  int r = seconds > 0 ? detach(cx) : TG_OK;
  for (json_int_t done = 0; r == TG_OK && done < seconds; done++) {
    _cleanup_free_ char *where = NULL;
    r = asprintf(&where, "Computing %s: %lld of %lld s", label, (long long)done,
                 (long long)seconds) < 0
            ? TG_E_NOMEM
            : report(cx, done, seconds, where);
    if (r == TG_OK) r = pause_ms(cx, 1000);
  }
  _cleanup_free_ char *line = NULL;
  if (r == TG_OK && asprintf(&line, "Computed %s in %llds", label, (long long)seconds) < 0)
    r = TG_E_NOMEM;
  return r ? r : text_result(line, ret);
}

static int h_failing_job(tg_call_ctx *cx, json_t *args, json_t **ret) {
  int r = detach(cx);
  if (r == TG_OK) r = pause_ms(cx, 1000);
  return r ? r : tg_fail(cx, TG_ERR_PROVIDER_ERROR, NULL, "The job failed, as this one always does");
}

/* Fails unexpectedly, not with a tool's answer: its task ends failed, with a JSON-RPC error. */
static int h_protocol_error_job(tg_call_ctx *cx, json_t *args, json_t **ret) {
  int r = detach(cx);
  return r ? r : TG_E_IO;
}

static int h_confirm_delete(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *file = json_string_value(json_object_get(args, "filename"));
  int r = detach(cx);
  if (r) return r;
  json_t *a = answer(cx, "confirm");
  _cleanup_free_ char *line = NULL;
  if (!a) {
    if (asprintf(&line, "Delete %s?", file) < 0) return TG_E_NOMEM;
    return input_required(json_pack("{s:o}", "confirm", elicit(line, "confirm", "boolean")), NULL, ret);
  }
  const char *action = json_string_value(json_object_get(a, "action"));
  bool yes = action && strcmp(action, "accept") == 0 &&
             json_is_true(json_object_get(json_object_get(a, "content"), "confirm"));
  return asprintf(&line, "%s %s", yes ? "Deleted" : "Kept", file) < 0 ? TG_E_NOMEM
                                                                     : text_result(line, ret);
}

/* Asks two things at once, so that a client may answer them one at a time; with rounds 2,
 * then one more thing, in a round of its own (its requestState says which round). */
static int h_multi_input(tg_call_ctx *cx, json_t *args, json_t **ret) {
  int r = detach(cx);
  if (r) return r;
  bool second = state(cx) && strcmp(state(cx), "second-round") == 0;
  if (second && answer(cx, "more")) return text_result("Received the answers of two rounds", ret);
  if (!second && (!answer(cx, "name") || !answer(cx, "confirm")))
    return input_required(json_pack("{s:o,s:o}", "name", elicit("What is your name?", "name", "string"),
                                    "confirm", elicit("Shall we go on?", "confirm", "boolean")),
                          NULL, ret);
  if (second || json_integer_value(json_object_get(args, "rounds")) > 1)
    return input_required(json_pack("{s:o}", "more", elicit("Anything else?", "more", "string")),
                          "second-round", ret);
  return text_result("Received both answers", ret);
}

/* Gathers the name in a multi round-trip request first, then goes on as a task. */
static int h_tool_with_task(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *name = elicited(cx, "user_name", "name");
  if (!name) return input_required(json_pack("{s:o}", "user_name", elicit("What is your name?", "name", "string")), NULL, ret);
  int r = detach(cx);
  _cleanup_free_ char *line = NULL;
  if (r == TG_OK && asprintf(&line, "Hello, %s! (from a task)", name) < 0) r = TG_E_NOMEM;
  return r ? r : text_result(line, ret);
}

static const tg_handler_entry handlers[] = {
    {"test.simple.text", h_simple_text},
    {"test.image.content", h_image},
    {"test.audio.content", h_audio},
    {"test.embedded.resource", h_embedded},
    {"test.multiple.content_types", h_mixed},
    {"test.tool.with_logging", h_logging},
    {"test.tool.with_progress", h_progress},
    {"test.error.handling", h_error},
    {"test.sampling.tool", h_sampling},
    {"test.elicitation.tool", h_elicitation},
    {"test.elicitation.sep1034_defaults", h_sep1034},
    {"test.elicitation.sep1330_enums", h_sep1330},
    {"test.reconnection.tool", h_reconnection},
    {"json.schema_2020_12.tool", h_json_schema},
    {"test.missing.capability", h_missing_capability},
    {"test.streaming.elicitation", h_streaming_elicitation},
    {"test.logging.tool", h_logging},
    {"test.input_required.result_elicitation", h_ir_elicitation},
    {"test.input_required.result_sampling", h_ir_sampling},
    {"test.input_required.result_list_roots", h_ir_roots},
    {"test.input_required.result_request_state", h_ir_request_state},
    {"test.input_required.result_multiple_inputs", h_ir_multiple},
    {"test.input_required.result_multi_round", h_ir_multi_round},
    {"test.input_required.result_tampered_state", h_ir_tampered},
    {"test.input_required.result_capabilities", h_ir_capabilities},
    {"test.x_mcp.header", h_x_mcp_header},
    {"test.trigger.tool_change", h_trigger_tool_change},
    {"test.trigger.prompt_change", h_trigger_prompt_change},
    {"test.task.greet", h_greet},
    {"test.task.slow_compute", h_slow_compute},
    {"test.task.failing_job", h_failing_job},
    {"test.task.protocol_error_job", h_protocol_error_job},
    {"test.task.confirm_delete", h_confirm_delete},
    {"test.task.multi_input", h_multi_input},
    {"test.tool.with_task", h_tool_with_task},
};

const tg_provider tg_provider_conformance = {
    .name = "conformance",
    .spec_file = "conformance.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};

/* ---- resources, templates, prompts ---- */

json_t *tg_conformance_resources(void) {
  return json_pack("[{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s}]", "uri",
                   "test://static-text", "name", "static-text", "description",
                   "A static text resource", "mimeType", "text/plain", "uri",
                   "test://static-binary", "name", "static-binary", "description",
                   "A static PNG image", "mimeType", "image/png", "uri",
                   "test://watched-resource", "name", "watched-resource", "description",
                   "A resource clients may subscribe to", "mimeType", "text/plain");
}

json_t *tg_conformance_resource_templates(void) {
  return json_pack("[{s:s,s:s,s:s,s:s}]", "uriTemplate", "test://template/{id}/data", "name",
                   "template", "description", "Data for an id", "mimeType", "application/json");
}

json_t *tg_conformance_prompts(void) {
  return json_pack(
      "[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:b},{s:s,s:s,s:b}]},{s:s,s:s,s:[{s:s,s:s,s:b}]},"
      "{s:s,s:s},{s:s,s:s}]",
      "name", "test_simple_prompt", "description", "A simple prompt without arguments",
      "name", "test_prompt_with_arguments", "description", "A prompt with two arguments",
      "arguments", "name", "arg1", "description", "First argument", "required", 1, "name",
      "arg2", "description", "Second argument", "required", 1, "name",
      "test_prompt_with_embedded_resource", "description", "A prompt embedding a resource",
      "arguments", "name", "resourceUri", "description", "The resource to embed", "required", 1,
      "name", "test_prompt_with_image", "description", "A prompt with an image", "name",
      "test_input_required_result_prompt", "description",
      "A prompt that asks the user for context first (SEP-2322)");
}

/* Whether p starts a percent-encoded octet: a '%' and two hex digits. */
static bool pct_encoded(const char *p) {
  return p[0] == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2]);
}

/* An absolute URI as RFC 3986 writes one: a scheme, a colon, then only ASCII a URI may hold (no
 * space, control, quote, angle bracket and the like, a '%' only before two hex digits), as MCP's
 * schema asks of a resource's uri. */
static bool absolute_uri(const char *uri) {
  if (!isalpha((unsigned char)uri[0])) return false;
  size_t scheme = strspn(uri, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
  if (uri[scheme] != ':') return false;
  for (const char *p = uri; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch <= ' ' || ch >= 0x7f || strchr("\"<>\\^`{|}", ch) || (ch == '%' && !pct_encoded(p)))
      return false;
  }
  return true;
}

/* Whether id[0..len) is what the template's {id} expands to (RFC 6570's simple expansion):
 * unreserved characters and percent-encoded octets. */
static bool template_id(const char *id, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (id[i] == '%' && i + 2 < len && pct_encoded(id + i)) i += 2;
    else if (!isalnum((unsigned char)id[i]) && !strchr("-._~", id[i])) return false;
  }
  return true;
}

#define TEMPLATE_PREFIX "test://template/"
#define TEMPLATE_SUFFIX "/data"
#define TEMPLATE_ID_MAX 64

int tg_conformance_resource_read(const char *uri, json_t **ret) {
  if (strcmp(uri, "test://static-text") == 0)
    *ret = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "text/plain", "text",
                     "This is the content of the static text resource.");
  else if (strcmp(uri, "test://static-binary") == 0)
    *ret = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "image/png", "blob", PNG_1X1);
  else if (strcmp(uri, "test://watched-resource") == 0)
    *ret = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "text/plain", "text",
                     "Watched resource content");
  else {
    size_t len = strlen(uri), pre = strlen(TEMPLATE_PREFIX), suf = strlen(TEMPLATE_SUFFIX);
    if (len <= pre + suf || len - pre - suf > TEMPLATE_ID_MAX ||
        strncmp(uri, TEMPLATE_PREFIX, pre) != 0 || strcmp(uri + len - suf, TEMPLATE_SUFFIX) != 0 ||
        !template_id(uri + pre, len - pre - suf))
      return TG_E_NOTFOUND;
    char id[TEMPLATE_ID_MAX + 1];
    snprintf(id, sizeof id, "%.*s", (int)(len - pre - suf), uri + pre);
    _cleanup_free_ char *body = NULL;
    json_t *data = json_pack("{s:s,s:b,s:s+}", "id", id, "templateTest", 1, "data",
                             "Data for ID: ", id);
    body = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!body) return TG_E_NOMEM;
    *ret = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "application/json", "text", body);
  }
  return *ret ? TG_OK : TG_E_NOMEM;
}

static json_t *user_text(const char *s) {
  return json_pack("{s:s,s:o}", "role", "user", "content", text(s));
}

static int prompt_messages(const char *name, json_t *args, json_t *responses, json_t **ret,
                           const char **why);

int tg_conformance_prompt_get(const char *name, json_t *args, json_t *responses,
                              json_t **ret_result, const char **why) {
  json_t *messages = NULL;
  int r = prompt_messages(name, args, responses, &messages, why);
  if (r < 0) return r;
  if (json_is_object(messages)) { /* already an InputRequiredResult */
    *ret_result = messages;
    return TG_OK;
  }
  *ret_result = json_pack("{s:o}", "messages", messages);
  return *ret_result ? TG_OK : TG_E_NOMEM;
}

static int prompt_messages(const char *name, json_t *args, json_t *responses, json_t **ret,
                           const char **why) {
  const char *arg1 = json_string_value(json_object_get(args, "arg1"));
  const char *arg2 = json_string_value(json_object_get(args, "arg2"));
  const char *uri = json_string_value(json_object_get(args, "resourceUri"));
  if (strcmp(name, "test_simple_prompt") == 0) {
    *ret = json_pack("[o]", user_text("This is a simple prompt for testing."));
  } else if (strcmp(name, "test_prompt_with_arguments") == 0) {
    if (!arg1 || !arg2) {
      *why = "arg1 and arg2 are required strings";
      return TG_E_INVAL;
    }
    _cleanup_free_ char *line = NULL;
    if (asprintf(&line, "Prompt with arguments: arg1='%s', arg2='%s'", arg1, arg2) < 0)
      return TG_E_NOMEM;
    *ret = json_pack("[o]", user_text(line));
  } else if (strcmp(name, "test_prompt_with_embedded_resource") == 0) {
    if (!uri || !absolute_uri(uri)) {
      *why = "resourceUri is a required string, an absolute URI";
      return TG_E_INVAL;
    }
    *ret = json_pack("[{s:s,s:{s:s,s:{s:s,s:s,s:s}}},o]", "role", "user", "content", "type",
                     "resource", "resource", "uri", uri, "mimeType", "text/plain", "text",
                     "Embedded resource content for testing.",
                     user_text("Please process the embedded resource above."));
  } else if (strcmp(name, "test_input_required_result_prompt") == 0) {
    json_t *given = json_object_get(responses, "user_context");
    const char *context = json_string_value(
        json_object_get(json_object_get(given, "content"), "context"));
    if (refused(given)) context = "none given";
    if (!context)
      return input_required(json_pack("{s:o}", "user_context",
                                      elicit("What context should the prompt use?", "context", "string")),
                            NULL, ret);
    _cleanup_free_ char *line = NULL;
    if (asprintf(&line, "Use this context: %s", context) < 0) return TG_E_NOMEM;
    *ret = json_pack("[o]", user_text(line));
  } else if (strcmp(name, "test_prompt_with_image") == 0) {
    *ret = json_pack("[{s:s,s:{s:s,s:s,s:s}},o]", "role", "user", "content", "type", "image",
                     "data", PNG_1X1, "mimeType", "image/png",
                     user_text("Please analyze the image above."));
  } else {
    return TG_E_NOTFOUND;
  }
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The entry of list (released) whose key is value (a new reference), or NULL. */
static json_t *entry_of(json_t *list, const char *key, const char *value) {
  json_t *found = NULL;
  size_t i;
  json_t *entry;
  json_array_foreach(list, i, entry) {
    const char *v = json_string_value(json_object_get(entry, key));
    if (!found && value && v && strcmp(v, value) == 0) found = json_incref(entry);
  }
  json_decref(list);
  return found;
}

/* Whether a prompt takes an argument named name, or a template has a variable so named. */
static bool takes_argument(json_t *entry, bool prompt, const char *name) {
  if (!prompt) {
    const char *uri = json_string_value(json_object_get(entry, "uriTemplate"));
    _cleanup_free_ char *variable = NULL;
    return asprintf(&variable, "{%s}", name) >= 0 && strstr(uri, variable);
  }
  size_t i;
  json_t *arg;
  json_array_foreach(json_object_get(entry, "arguments"), i, arg) {
    const char *v = json_string_value(json_object_get(arg, "name"));
    if (v && strcmp(v, name) == 0) return true;
  }
  return false;
}

int tg_conformance_complete(json_t *ref, const char *argument, const char *value, json_t **ret) {
  static const char *const words[] = {"test", "testing", "testValue1", "other"};
  const char *type = json_string_value(json_object_get(ref, "type"));
  const char *name = json_string_value(json_object_get(ref, "name"));
  bool prompt = type && strcmp(type, "ref/prompt") == 0;
  _cleanup_json_ json_t *entry =
      prompt ? entry_of(tg_conformance_prompts(), "name", name)
      : type && strcmp(type, "ref/resource") == 0
          ? entry_of(tg_conformance_resource_templates(), "uriTemplate",
                     json_string_value(json_object_get(ref, "uri")))
          : NULL;
  if (!entry) return TG_E_NOTFOUND;
  if (!takes_argument(entry, prompt, argument)) return TG_E_INVAL;
  json_t *values = json_array();
  bool offers = prompt && strcmp(name, "test_prompt_with_arguments") == 0 &&
                strcmp(argument, "arg1") == 0;
  for (size_t i = 0; values && offers && i < sizeof words / sizeof words[0]; i++) {
    if (strncmp(words[i], value, strlen(value)) != 0) continue;
    if (json_array_append_new(values, json_string(words[i])) < 0) {
      json_decref(values);
      values = NULL;
    }
  }
  *ret = values;
  return values ? TG_OK : TG_E_NOMEM;
}

/* tools/call: through tg_call, with the call's channel to the client (notifications,
 * requests, cancellation), the rounds of input requests and tasks. */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

/* An InputRequiredResult this request cannot carry fails the call before it commits; the
 * request is answered with the JSON-RPC error that says why. */
static int channel_check_result(void *self, tg_call_ctx *call, json_t *result) {
  call_channel *ch = self;
  if (!tg_client_asks_input(call->tool, result)) return TG_OK;
  int code;
  const char *message;
  json_t *data;
  int r = mcp_input_refusal(ch->c, call->tool, result, &code, &message, &data);
  if (r != 1) return r;
  ch->refused_code = code;
  ch->refused_message = message;
  ch->refused_data = data;
  return tg_fail(call, TG_ERR_PRECONDITION_FAILED, json_incref(data), "%s", message);
}

static int channel_notify(void *self, const char *method, json_t *params) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  if (tg_mcp_watch_touch(method, ch->c->req->principal_id)) {
    json_decref(params);
    return TG_OK;
  }
  json_t *msg = tg_rpc_notification(method, params);
  if (!msg) return TG_E_NOMEM;
  if (!io || !io->send) {
    json_decref(msg);
    return TG_OK;
  }
  return io->send(io->self, msg);
}

static int channel_close_stream(void *self) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  return io->close_stream(io->self);
}

/* Whether the call was cancelled, or its transport gave up on every answer. */
static bool channel_cancelled(void *self) {
  call_channel *ch = self;
  const tg_mcp_request *req = ch->c->req;
  bool cancelled = (req->abandoned && atomic_load(req->abandoned)) ||
                   (req->inflight && tg_mcp_inflight_cancelled(req->inflight, ch->c->msg->id)) ||
                   (req->gone && req->gone(req->gone_arg));
  if (cancelled) atomic_store(&ch->heard_cancel, true);
  return cancelled;
}

static bool channel_cancel_heard(void *self) {
  return atomic_load(&((call_channel *)self)->heard_cancel);
}

static int channel_ask(void *self, const char *method, json_t *params, json_t **ret) {
  call_channel *ch = self;
  const tg_mcp_io *io = ch->c->req->io;
  if (channel_cancelled(ch)) {
    json_decref(params);
    return TG_E_IO;
  }
  /* Never a request the client did not declare it can answer, nor one to a 2025 session
   * before its notifications/initialized (only pings and logging may go before). */
  const tg_mcp_session *session = ch->c->req->session;
  bool handshaking = session->version[0] && !session->initialized &&
                     !(io->initialized && io->initialized(io->self));
  if (handshaking || !tg_client_can(ch->c->caps, method, params)) {
    json_decref(params);
    return TG_E_INVAL;
  }
  /* Drawn, not counted: a count would tell each client how many questions the others were
   * asked. 48 bits stay exact in any client's numbers. */
  unsigned char drawn[6];
  if (!tg_random_bytes(drawn, sizeof drawn)) {
    json_decref(params);
    return TG_E_IO;
  }
  json_int_t id = 0;
  for (size_t i = 0; i < sizeof drawn; i++) id = id << 8 | drawn[i];
  _cleanup_json_ json_t *asked = json_incref(params); /* what the answer must fit */
  json_t *request = tg_rpc_request(id, method, params);
  if (!request) return TG_E_NOMEM;
  json_t *response = NULL;
  int r = io->ask(io->self, request, &response);
  /* An answer that raced the cancellation is dropped: the call must fail all the same. */
  if (r == 0 && channel_cancelled(ch)) {
    json_decref(response);
    r = TG_E_IO;
  }
  if (r < 0) return r;
  json_t *result = json_object_get(response, "result");
  json_t *error = json_object_get(response, "error");
  /* A result that is not what was asked for (of another shape, or not what an elicitation's
   * requestedSchema asks) is the client's error: no handler sees it. */
  if (result && !tg_client_answer_reads(method, asked, result)) {
    *ret = json_pack("{s:i,s:s,s:{s:O}}", "code", TG_RPC_INVALID_PARAMS, "message",
                     "The client's result does not answer the request", "data", "result", result);
    json_decref(response);
    return *ret ? TG_E_TOOL : TG_E_NOMEM;
  }
  *ret = json_incref(result ? result : error);
  json_decref(response);
  if (!*ret) return TG_E_INVAL;
  return result ? TG_OK : TG_E_TOOL;
}

/* A request refused between its rounds (status, from mcp_next_round or mcp_read_round: a
 * JSON-RPC code, with the message mcp_rpc_fail kept) ends with no round running to tell of
 * it: its own audit row says so. Returns status. */
static int audit_unrun_end(cx *c, const tg_tool *tool, int status) {
  if (status == TG_E_NOMEM) return status;
  tg_db *db = c->req->env->db;
  _cleanup_free_ char *why = NULL;
  if (asprintf(&why, "failed: %s", c->err_message) < 0) why = NULL;
  int r = why ? tg_db_begin(db) : TG_E_NOMEM;
  if (r == TG_OK) r = tg_call_log_end(db, c->req->principal_id, tool->name, c->run_id, NULL,
                                        "WARN", why);
  if (r == TG_OK) r = tg_db_commit(db);
  if (r < 0) {
    tg_db_rollback(db);
    tg_log(TG_LOG_WARN, "mcp: the audit of a request refused between its rounds was not written");
  }
  return status;
}

/* Rounds a 2025 request may go through its client's answers (see mcp_next_round). */
#define LEGACY_INPUT_ROUNDS 16

/* Of a request's asking its client (channel_ask), the JSON-RPC error answering it when it
 * failed (status; error, the client's error object, stolen) for the input under key. */
static int ask_failed(cx *c, int status, const char *key, json_t *error) {
  if (status == TG_E_TOOL)
    return mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                        "The client answered an input request with an error, or with a result that "
                        "does not answer it",
                        json_pack("{s:s,s:o}", "key", key, "error", error));
  json_decref(error);
  if (status == TG_E_TOO_LARGE)
    return mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                        "An input request cannot go out now: too many wait for this client's "
                        "answers, or too much output waits for it to read; retry later",
                        json_pack("{s:s}", "key", key));
  if (status == TG_E_NOMEM) return status;
  /* The client declared it can answer (mcp_next_round checked): it did not say initialized. */
  if (status == TG_E_INVAL)
    return mcp_rpc_fail(c, TG_RPC_INVALID_REQUEST,
                        "An input request cannot go to the client before its "
                        "notifications/initialized",
                        json_pack("{s:s}", "key", key));
  return mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                      "The client did not answer an input request: it went away, did not answer "
                      "in time, or the request was cancelled or the server is stopping",
                      json_pack("{s:s}", "key", key));
}

/* The params of input request method as a 2025-11-25 client reads them (a new reference):
 * there, a URL-mode elicitation names itself (elicitationId, required), which 2026-07-28
 * dropped; NULL without memory or randomness. */
static json_t *legacy_params(const char *method, json_t *params) {
  const char *mode = json_string_value(json_object_get(params, "mode"));
  if (!method || strcmp(method, "elicitation/create") != 0 || !mode || strcmp(mode, "url") != 0 ||
      json_object_get(params, "elicitationId"))
    return json_incref(params);
  char id[TG_UUID_LEN + 1];
  json_t *copy = tg_uuid7(id) == 0 ? json_copy(params) : NULL;
  if (copy && json_object_set_new(copy, "elicitationId", json_string(id)) < 0) {
    json_decref(copy);
    return NULL;
  }
  return copy;
}

/* 2025 revisions have no InputRequiredResult: what one (result) asks goes to the client as
 * requests of their own, as the reference SDK does on 2025 sessions, and the next round runs
 * with their answers (*answers, new, keyed as result keys them, each checked against what it
 * answers) and result's requestState; rounds counts those asked before. Returns 0, a JSON-RPC
 * error code (mcp_rpc_fail) or TG_E_NOMEM. */
int mcp_next_round(cx *c, call_channel *ch, json_t *result, unsigned rounds,
                   json_t **answers) {
  *answers = NULL;
  int code;
  const char *message;
  json_t *data;
  int r = tg_mcp_input_refusal(true, c->caps, result, &code, &message, &data);
  if (r == 1) return mcp_rpc_fail(c, code, message, data);
  if (r < 0) return r;
  if (rounds >= LEGACY_INPUT_ROUNDS)
    return mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                        "The request asked its client for input too often",
                        json_pack("{s:i}", "max", LEGACY_INPUT_ROUNDS));
  json_t *got = json_object();
  if (!got) return TG_E_NOMEM;
  const char *key;
  json_t *request;
  json_object_foreach(json_object_get(result, "inputRequests"), key, request) {
    const char *method = json_string_value(json_object_get(request, "method"));
    json_t *params = json_object_get(request, "params");
    json_t *answer = NULL, *asked = legacy_params(method, params);
    r = asked ? channel_ask(ch, method, asked, &answer) : TG_E_NOMEM;
    if (r == TG_OK) {
      r = json_object_set_new(got, key, answer) < 0 ? TG_E_NOMEM : 0;
    } else {
      r = ask_failed(c, r, key, answer);
    }
    if (r != 0) {
      json_decref(got);
      return r;
    }
  }
  *answers = got;
  return 0;
}

static json_t *text_block(const char *text) {
  return json_pack("[{s:s,s:s}]", "type", "text", "text", text);
}

json_t *tg_mcp_tool_result(const tg_tool *tool, int status, json_t *value) {
  if (status == TG_OK && mcp_content_passthrough(tool)) return json_incref(value);
  /* The text is the structured content serialized, a refusal's envelope too: a client that
   * hands its model only the text keeps what details say (allowed moves, scopes, pointers). */
  _cleanup_free_ char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) return NULL;
  return status == TG_OK
             ? json_pack("{s:o,s:O}", "content", text_block(text), "structuredContent", value)
             : json_pack("{s:o,s:O,s:b}", "content", text_block(text), "structuredContent", value,
                         "isError", 1);
}

/* Whether this request's client takes tasks (it declares the extension, an object as every
 * capability is; 2026-07-28 only). */
bool mcp_takes_tasks(const cx *c) {
  return c->modern && c->srv->tasks &&
         json_is_object(
             json_object_get(json_object_get(c->caps, "extensions"), TG_MCP_TASKS_EXTENSION));
}

int mcp_tasks_required(cx *c) {
  /* 2025-11-25 answers a call of a task-only tool made as a plain request so; tasks are not
   * served on that revision here. */
  if (!c->modern)
    return mcp_rpc_fail(c, TG_RPC_METHOD_NOT_FOUND,
                        "This tool runs only as a task (protocol 2026-07-28)",
                        json_pack("{s:s}", "protocolVersion", TG_MCP_MODERN_VERSION));
  return mcp_rpc_fail(c, TG_RPC_MISSING_CAPABILITY, "Missing required client capability",
                      json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions",
                                TG_MCP_TASKS_EXTENSION));
}

/* Runs a call that may become a task on a thread of its own: the task, or the call's own
 * outcome in *status and *res when it ended without detaching. Returns 1 when no task may
 * start now and the tool can do without one: the caller runs it as a plain call. */
static int start_task(cx *c, call_channel *ch, const tg_tool *tool, json_t *args,
                      json_t *progress_token, json_t *responses, const char *state,
                      json_t **task, int *status, tg_call_result *res) {
  tg_mcp_task_call call = {.principal_id = c->req->principal_id,
                           .token_hash = c->req->token_hash, .run_id = c->run_id,
                           .tool = tool, .args = args,
                           .capabilities = c->caps, .input_responses = responses,
                           .request_state = state, .cancelled = channel_cancelled,
                           .check_result = channel_check_result, .notify = channel_notify,
                           .progress_token = progress_token, .log_level = c->log_level, .arg = ch,
                           .db = c->req->env->db};
  tg_mcp_task_start started;
  int r = tg_mcp_tasks_start(c->srv->tasks, &call, &started);
  if (r == TG_E_TOO_LARGE && tool->task_support == TG_TASK_OPTIONAL) return 1;
  /* Refused before its first round, as a tool that needs a task is without tasks. */
  if (r == TG_E_TOO_LARGE)
    return audit_unrun_end(
        c, tool,
        mcp_rpc_fail(c, TG_RPC_INTERNAL_ERROR,
                     strcmp(started.limit, "held") == 0
                         ? "Too many tasks held: read how ended ones ended, or let them expire"
                     : strcmp(started.limit, "kept") == 0
                         ? "Too many ended tasks kept: wait for the oldest to pass their time "
                           "to live"
                         : "Too many tasks running: wait for some to end",
                     json_pack("{s:s,s:i}", "limit", started.limit, "max", started.max)));
  if (r < 0) return r;
  *task = started.task;
  *status = started.status;
  *res = started.res;
  return 0;
}

/* A call served in this request, not as a task: through tg_call, once and then again for each
 * round of input its client answers (on 2025 revisions; each round a call of its own, audited as
 * any). 0 with *status and *res its last round's, or the error of a round that failed between
 * two (with *res done). */
static int run_in_place(cx *c, call_channel *ch, const tg_tool *tool, const char *name,
                        json_t *args, json_t *progress_token, json_t *responses,
                        const char *state, int *status, tg_call_result *res) {
  tg_client_channel channel = {
      .self = ch,
      .progress_token = progress_token,
      .log_level = c->log_level,
      .capabilities = c->caps,
      .input_responses = responses,
      .request_state = state,
      .notify = channel_notify,
      /* 2026-07-28 forbids server-to-client requests; legacy needs a transport that can. */
      .ask = !c->modern && c->req->io && c->req->io->ask ? channel_ask : NULL,
      .close_stream = c->req->io && c->req->io->close_stream ? channel_close_stream : NULL,
      .cancelled = c->req->inflight || c->req->abandoned || c->req->gone ? channel_cancelled : NULL,
      .cancel_heard = channel_cancel_heard,
      .check_result = channel_check_result,
  };
  tg_call_request call = {.principal_id = c->req->principal_id, .surface = TG_SURFACE_MCP,
                          .tool = name, .args = args, .client = &channel,
                          .run_id = c->run_id, .run_held = c->run_held, .rate_counted = true};
  *status = tg_call(c->req->env, &call, res);
  _cleanup_json_ json_t *answers = NULL;
  _cleanup_free_ char *held_state = NULL;
  for (unsigned rounds = 0;
       *status == TG_OK && mcp_asks_inputs(c, tool) && tg_client_asks_input(tool, res->value);
       rounds++) {
    json_decref(answers);
    free(held_state);
    const char *kept = json_string_value(json_object_get(res->value, "requestState"));
    held_state = kept ? strdup(kept) : NULL;
    int rr = kept && !held_state ? TG_E_NOMEM : mcp_next_round(c, ch, res->value, rounds, &answers);
    tg_call_result_done(res);
    if (rr) return audit_unrun_end(c, tool, rr);
    channel.input_responses = answers;
    channel.request_state = held_state;
    channel.progress_token = NULL; /* a round's progress starts anew: a token's must rise */
    *status = tg_call(c->req->env, &call, res);
  }
  return 0;
}

int mcp_tools_call(cx *c, json_t *params, json_t **ret) {
  const char *name = json_string_value(json_object_get(params, "name"));
  json_t *args = json_object_get(params, "arguments");
  if (!name) return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.name must be a string", NULL);
  if (args && !json_is_object(args) && !json_is_null(args))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.arguments must be an object", NULL);
  if (json_is_null(args)) args = NULL;
  json_t *meta = json_object_get(params, "_meta");
  json_t *progress_token = json_object_get(meta, "progressToken");
  const state_subject subject = {"tools/call", name, args};
  const tg_tool *tool = tg_registry_find(c->req->env->registry, name);
  /* Counted before anything here may refuse it (its request state, a task-only tool), so
   * that every call counts against its caller's rate; once: its rounds, a task's too, are
   * answers to it. Past the rate, told so, a call of an unknown tool too. */
  tg_call_request counted = {.principal_id = c->req->principal_id, .surface = TG_SURFACE_MCP,
                             .tool = name, .args = args};
  tg_call_result limited;
  if (tg_call_take_rate(c->req->env, &counted, &limited) != TG_OK) {
    *ret = limited.value ? tg_mcp_tool_result(tool, TG_E_TOOL, limited.value) : NULL;
    tg_call_result_done(&limited);
    return *ret ? 0 : TG_E_NOMEM;
  }
  /* Only now: a session that makes no call its caller's rate allows opens no run. */
  if (c->req->session_run) {
    c->run_id = c->req->session_run(c->req->session_run_arg, c->req->env->db);
    c->run_held = c->run_id != NULL;
  }
  _cleanup_json_ json_t *round = NULL;
  int rr = mcp_read_round(c, params, &subject, &round);
  /* A 2026-07-28 retry refused for what it came back with (a forged or foreign state,
   * answers to nothing asked) is refused between rounds too. */
  if (rr) return tool ? audit_unrun_end(c, tool, rr) : rr;
  json_t *responses = json_object_get(round, "answers");
  const char *state = tg_json_str(round, "state");
  /* The server alone decides whether a call becomes a task; a legacy "task" param is
   * ignored. */
  bool may_detach = tool && tool->task_support != TG_TASK_FORBIDDEN && mcp_takes_tasks(c);
  /* Refused before its first round, as it would be between two. */
  if (tool && tool->task_support == TG_TASK_REQUIRED && !may_detach)
    return audit_unrun_end(c, tool, mcp_tasks_required(c));
  call_channel ch = {.c = c};
  tg_call_result res;
  int r = TG_OK; /* start_task sets it when it ran the call, else tg_call does */
  json_t *task = NULL;
  rr = may_detach ? start_task(c, &ch, tool, args, progress_token, responses, state, &task, &r,
                               &res)
                   : 1;
  if (rr < 0) return rr;
  if (task) {
    *ret = task;
    return 0;
  }
  if (rr == 1 && (rr = run_in_place(c, &ch, tool, name, args, progress_token, responses, state,
                                    &r, &res)) != 0)
    return rr;
  if (ch.refused_code) {
    tg_call_result_done(&res);
    return mcp_rpc_fail(c, ch.refused_code, ch.refused_message, ch.refused_data);
  }
  if (r == TG_E_TOOL && !tool) {
    tg_call_result_done(&res);
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown tool", mcp_named("name", name));
  }
  if (!res.value) {
    tg_call_result_done(&res);
    return TG_E_NOMEM;
  }
  *ret = tg_mcp_tool_result(tool, r == TG_OK ? TG_OK : TG_E_TOOL, res.value);
  tg_call_result_done(&res);
  if (!*ret) return TG_E_NOMEM;
  if (r == TG_OK && tg_mcp_is_input_required(*ret) &&
      mcp_seal_input_required(c, &subject, *ret) < 0) {
    json_decref(*ret);
    *ret = NULL;
    return TG_E_NOMEM;
  }
  return 0;
}

/* Private to the files of src/mcp that serve requests (server.c and the methods it routes
 * to): one request's context and what each of those files offers the others. */

#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "mcp/server.h"

/* One request being served. */
typedef struct cx {
  const tg_mcp_server *srv;
  const tg_mcp_request *req;
  const tg_rpc_msg *msg;
  bool modern;
  /* The run a call attaches to: the request's (run_id), or its session's once the call
   * opened it (session_run), which its server holds (run_held, tg_call_request). */
  const char *run_id;
  bool run_held;
  json_t *caps;          /* borrowed client capabilities of this request */
  const char *log_level; /* lowest level to send, NULL: none */
  /* A JSON-RPC error a method answered with. */
  const char *err_message;
  json_t *err_data;
  bool subscribed; /* subscriptions/listen: answered later, if ever */
  /* A member of the result a method encoded itself (tg_rpc_encode_result_with), or NULL. */
  const char *raw_key;
  char *raw; /* malloc'd */
  size_t raw_len;
} cx;

/* Method results: 0, a JSON-RPC error code (set with mcp_rpc_fail), TG_E_NOMEM, or another
 * TG_E_* status, answered as -32603. */
typedef int (*method_fn)(cx *c, json_t *params, json_t **ret);

/* What a sealed state is bound to besides its principal and expiry: the method, its target
 * and its arguments (NULL: none), so that a state handed out for one call cannot be replayed
 * on the same tool with other arguments. */
typedef struct state_subject {
  const char *method, *name;
  json_t *args;
} state_subject;

typedef struct call_channel {
  cx *c;
  /* channel_cancelled said so: the handler (or the channel's own ask) learnt of it. Atomic:
   * a task's starter asks too, on its own thread. */
  atomic_bool heard_cancel;
  /* The JSON-RPC error answering the request instead of the result (check_result). */
  int refused_code;
  const char *refused_message;
  json_t *refused_data;
} call_channel;

/* ---- server.c ---- */

int mcp_rpc_fail(cx *c, int code, const char *message, json_t *data);
json_t *mcp_named(const char *key, const char *value);
bool mcp_content_passthrough(const tg_tool *tool);

/* ---- list.c ---- */

int mcp_paginate(cx *c, json_t *params, json_t *all, const char *key, json_t **ret);
int mcp_load_principal(cx *c, tg_principal **ret);
json_t *mcp_tool(const tg_tool *tool, json_t *envelope);
int mcp_tools_list(cx *c, json_t *params, json_t **ret);

/* ---- rounds.c ---- */

int mcp_read_responses(cx *c, json_t *params, json_t **responses);
int mcp_read_round(cx *c, json_t *params, const state_subject *subject, json_t **round);
bool mcp_asks_inputs(const cx *c, const tg_tool *tool);
int mcp_seal_input_required(cx *c, const state_subject *subject, json_t *result);
int mcp_input_refusal(cx *c, const tg_tool *tool, json_t *result, int *code,
                      const char **message, json_t **data);
int mcp_finish_input_required(cx *c, const state_subject *subject, json_t *result);

/* ---- call.c ---- */

int mcp_next_round(cx *c, call_channel *ch, json_t *result, unsigned rounds,
                   json_t **answers);
bool mcp_takes_tasks(const cx *c);
int mcp_tasks_required(cx *c);
int mcp_tools_call(cx *c, json_t *params, json_t **ret);

/* ---- resources.c ---- */

int mcp_resources_list(cx *c, json_t *params, json_t **ret);
int mcp_templates_list(cx *c, json_t *params, json_t **ret);
int mcp_prompts_list(cx *c, json_t *params, json_t **ret);
int mcp_resources_read(cx *c, json_t *params, json_t **ret);
int mcp_resources_subscribe(cx *c, json_t *params, json_t **ret);
int mcp_resources_unsubscribe(cx *c, json_t *params, json_t **ret);
int mcp_prompts_get(cx *c, json_t *params, json_t **ret);
int mcp_complete(cx *c, json_t *params, json_t **ret);

/* ---- headers.c ---- */

bool mcp_header_value(const char *raw, char **ret);
bool mcp_params_match(const tg_registry *reg, const tg_rpc_msg *msg, json_t *headers);

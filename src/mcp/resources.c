/* Resources, prompts and completion: the conformance fixtures' (served only with them). */

#define _GNU_SOURCE
#include "mcp/internal.h"

#include "tools/conformance.h"
#include "util/cleanup.h"
#include "util/json.h"
#include "util/status.h"

/* Whether o is an object of strings, as prompt arguments are. */
static bool string_values(json_t *o) {
  const char *key;
  json_t *value;
  if (!json_is_object(o)) return false;
  json_object_foreach(o, key, value) if (!json_is_string(value)) return false;
  return true;
}

/* The resources, prompts and completions are the conformance fixtures': their methods are
 * served only with them (see find_method), and only to whom tools are: an agent that is not
 * active is offered none (lists are empty), and asking for one is refused. */
static int fixtures_offered(cx *c, bool *offered) {
  tg_principal *p = NULL;
  int r = mcp_load_principal(c, &p);
  if (r) return r;
  *offered = tg_principal_acts(p);
  tg_principal_free(p);
  return 0;
}

/* 0 when the caller is offered the fixtures, else its JSON-RPC error (code: a not found's),
 * naming the resource asked for when one is (uri, or NULL). */
static int fixtures_refused(cx *c, int code, const char *uri) {
  bool offered;
  int r = fixtures_offered(c, &offered);
  if (r || offered) return r;
  json_t *data = uri ? mcp_named("uri", uri) : json_object();
  if (!data || json_object_set_new(data, "reason", json_string("agent_not_active")) < 0) {
    json_decref(data);
    return TG_E_NOMEM;
  }
  return mcp_rpc_fail(c, code, "This agent is not active: it is offered no resources or prompts",
                      data);
}

static int fixture_list(cx *c, json_t *params, json_t *(*source)(void), const char *key,
                        json_t **ret) {
  bool offered;
  int r = fixtures_offered(c, &offered);
  if (r) return r;
  json_t *all = offered ? source() : json_array();
  if (!all) return TG_E_NOMEM;
  r = mcp_paginate(c, params, all, key, ret);
  json_decref(all);
  return r;
}

/* The code of "no such resource": 2026-07-28 moved it to -32602; 2025-11-25 clients expect
 * -32002. */
static int resource_not_found(cx *c) {
  return c->modern ? TG_RPC_INVALID_PARAMS : TG_RPC_RESOURCE_NOT_FOUND;
}

int mcp_resources_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_resources, "resources", ret);
}

int mcp_templates_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_resource_templates, "resourceTemplates", ret);
}

int mcp_prompts_list(cx *c, json_t *params, json_t **ret) {
  return fixture_list(c, params, tg_conformance_prompts, "prompts", ret);
}

/* params.uri, when the caller is offered resources, or NULL after the JSON-RPC error of a
 * uri that is no string or of a caller offered none (*r: 0, or the error). */
static const char *uri_asked(cx *c, json_t *params, int *r) {
  const char *uri = json_string_value(json_object_get(params, "uri"));
  if (!uri) *r = mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.uri must be a string", NULL);
  else *r = fixtures_refused(c, resource_not_found(c), uri);
  return *r ? NULL : uri;
}

/* The contents of the resource params.uri names, or the JSON-RPC error of a bad or unknown
 * one. */
static int resource_of(cx *c, json_t *params, json_t **contents) {
  int r;
  const char *uri = uri_asked(c, params, &r);
  if (!uri) return r;
  r = tg_conformance_resource_read(uri, contents);
  if (r == TG_E_NOTFOUND)
    return mcp_rpc_fail(c, resource_not_found(c), "Resource not found", mcp_named("uri", uri));
  return r;
}

int mcp_resources_read(cx *c, json_t *params, json_t **ret) {
  json_t *contents = NULL;
  int r = resource_of(c, params, &contents);
  /* No resource asks its client for input, so none has a state: a retry's fields are read as
   * on any method that may ask (a state that does not open is refused), and answer nothing. */
  const state_subject subject = {"resources/read", tg_json_str(params, "uri"), NULL};
  _cleanup_json_ json_t *round = NULL;
  if (r == 0) r = mcp_read_round(c, params, &subject, &round);
  if (r != 0) {
    json_decref(contents);
    return r;
  }
  *ret = json_pack("{s:o}", "contents", contents);
  return *ret ? 0 : TG_E_NOMEM;
}

/* The fixture resources never change, so a subscription has nothing to announce; one to a
 * resource that does not exist is refused, as a read of it is. */
int mcp_resources_subscribe(cx *c, json_t *params, json_t **ret) {
  json_t *contents = NULL;
  int r = resource_of(c, params, &contents);
  json_decref(contents);
  if (r != 0) return r;
  *ret = json_object();
  return *ret ? 0 : TG_E_NOMEM;
}

/* Ending a subscription there is none of leaves none: nothing to refuse but to a caller offered
 * no resources, as subscribing is. */
int mcp_resources_unsubscribe(cx *c, json_t *params, json_t **ret) {
  int r;
  if (!uri_asked(c, params, &r)) return r;
  *ret = json_object();
  return *ret ? 0 : TG_E_NOMEM;
}

int mcp_prompts_get(cx *c, json_t *params, json_t **ret) {
  const char *name = json_string_value(json_object_get(params, "name"));
  json_t *args = json_object_get(params, "arguments");
  if (!name) return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.name must be a string", NULL);
  if (json_is_null(args)) args = NULL; /* as tools/call takes it */
  if (args && !string_values(args))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "params.arguments must be an object of strings",
                        NULL);
  const state_subject subject = {"prompts/get", name, args};
  _cleanup_json_ json_t *round = NULL;
  int r = fixtures_refused(c, TG_RPC_INVALID_PARAMS, NULL);
  if (r == 0) r = mcp_read_round(c, params, &subject, &round);
  if (r) return r;
  json_t *responses = json_object_get(round, "answers");
  json_t *result = NULL;
  const char *why = NULL;
  r = tg_conformance_prompt_get(name, args, responses, &result, &why);
  call_channel ch = {.c = c};
  _cleanup_json_ json_t *answers = NULL;
  for (unsigned rounds = 0; r == 0 && mcp_asks_inputs(c, NULL) && tg_mcp_is_input_required(result);
       rounds++) {
    json_decref(answers);
    r = mcp_next_round(c, &ch, result, rounds, &answers);
    json_decref(result);
    result = NULL;
    if (r) return r;
    r = tg_conformance_prompt_get(name, args, answers, &result, &why);
  }
  if (r == TG_E_NOTFOUND)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "Unknown prompt", mcp_named("name", name));
  if (r == TG_E_INVAL) return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, why, NULL);
  if (r < 0) return r;
  if (tg_mcp_is_input_required(result) &&
      (r = mcp_finish_input_required(c, &subject, result)) != 0) {
    json_decref(result);
    return r;
  }
  *ret = result;
  return 0;
}

int mcp_complete(cx *c, json_t *params, json_t **ret) {
  json_t *ref = json_object_get(params, "ref");
  json_t *arg = json_object_get(params, "argument");
  const char *type = json_string_value(json_object_get(ref, "type"));
  const char *arg_name = json_string_value(json_object_get(arg, "name"));
  const char *value = json_string_value(json_object_get(arg, "value"));
  json_t *context = json_object_get(params, "context");
  json_t *known = json_object_get(context, "arguments");
  if (!type || !arg_name || !value)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS,
                        "ref.type, argument.name and argument.value are required", NULL);
  if (context && (!json_is_object(context) || (known && !string_values(known))))
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS,
                        "params.context must be an object, its arguments an object of strings",
                        NULL);
  json_t *values = NULL;
  int r = fixtures_refused(c, TG_RPC_INVALID_PARAMS, NULL);
  if (r) return r;
  r = tg_conformance_complete(ref, arg_name, value, &values);
  /* The refusal names what the ref names, else its type. */
  const char *by = json_object_get(ref, "name")  ? "name"
                   : json_object_get(ref, "uri") ? "uri"
                                                 : "type";
  const char *named_as = json_string_value(json_object_get(ref, by));
  if (r == TG_E_NOTFOUND)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "ref names no prompt or resource template",
                        mcp_named(by, named_as ? named_as : ""));
  if (r == TG_E_INVAL)
    return mcp_rpc_fail(c, TG_RPC_INVALID_PARAMS, "ref takes no argument of that name",
                        mcp_named("argument", arg_name));
  if (r < 0) return r;
  *ret = json_pack("{s:{s:o,s:I,s:b}}", "completion", "values", values, "total",
                   (json_int_t)json_array_size(values), "hasMore", 0);
  return *ret ? 0 : TG_E_NOMEM;
}

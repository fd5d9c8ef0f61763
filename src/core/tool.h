/* A tool: declarative data (from its provider's JSON spec, embedded in the binary) joined
 * at start-up with a handler from the provider's C table (DESIGN.md §3). */
#pragma once
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/schema.h"

typedef enum tg_surface {
  TG_SURFACE_AGENT = 1u << 0,
  TG_SURFACE_MCP = 1u << 1,
  TG_SURFACE_API = 1u << 2,
} tg_surface;

typedef enum tg_effect { TG_EFFECT_READ, TG_EFFECT_WRITE, TG_EFFECT_PROPOSE } tg_effect;
typedef enum tg_risk { TG_RISK_LOW, TG_RISK_MEDIUM, TG_RISK_HIGH } tg_risk;

/* Behaviour a spec may declare beyond its effect; hints for clients such as MCP. */
typedef enum tg_tool_flag {
  TG_TOOL_IDEMPOTENT = 1u << 0,
  TG_TOOL_DESTRUCTIVE = 1u << 1,
  TG_TOOL_OPEN_WORLD = 1u << 2,
  TG_TOOL_MCP_CONTENT = 1u << 3, /* the result is MCP content blocks, served as they are */
  /* The handler may wait on the client: ask it (sampling, elicitation), end its response
   * stream for the client to resume later, or wait for a cancellation. It then runs before
   * the call's write transaction, reading only: a wait for a person must not hold the
   * database's write lock; a transport streams such a call as it runs. Any other handler
   * finds no ask and no close_stream in cx->client, and a transport may run it on the
   * request's own thread and send its notifications with its result. */
  TG_TOOL_INTERACTIVE = 1u << 4,
  /* What the tool acts on is the calling agent's own (its files): no user may call it, so
   * none is offered it. */
  TG_TOOL_AGENTS_ONLY = 1u << 5,
  /* Only a person may call it (deciding an approval): no agent, whatever its grants, so none
   * is offered it. */
  TG_TOOL_PEOPLE_ONLY = 1u << 6,
} tg_tool_flag;

/* Whether a call may become an MCP task (the client polls for its result): never, when the
 * client can take one, or always (a client that cannot is refused). Declared by the spec's
 * taskSupport, which needs the interactive flag: the handler chooses the moment, through
 * cx->client->detach. */
typedef enum tg_task_support {
  TG_TASK_FORBIDDEN,
  TG_TASK_OPTIONAL,
  TG_TASK_REQUIRED,
} tg_task_support;

typedef struct tg_call_ctx tg_call_ctx;

/* A handler runs inside the call's transaction. It returns 0 with a new reference in
 * *ret_result, or the value of tg_fail() (TG_E_TOOL) for a tool-level failure, or another
 * negative TG_E_* for an unexpected one (answered as internal_error). It never checks
 * permissions, never commits, never knows the surface's wire format. */
typedef int (*tg_handler_fn)(tg_call_ctx *cx, json_t *args, json_t **ret_result);

typedef struct tg_handler_entry {
  const char *name; /* canonical tool name */
  tg_handler_fn fn;
} tg_handler_entry;

typedef struct tg_provider {
  const char *name;      /* must equal the spec's "provider" */
  const char *spec_file; /* embedded spec, e.g. "admin.json" */
  const char *spec_json; /* or the spec itself (tests), used when spec_file is NULL */
  const tg_handler_entry *handlers;
  size_t n_handlers;
} tg_provider;

typedef struct tg_tool {
  unsigned id;       /* dense, the order of registration */
  char *name;        /* canonical: domain.subject.action */
  char *model_name;  /* dots replaced by underscores */
  const char *alias; /* seed 000 name, or NULL */
  const char *description;
  unsigned surfaces; /* tg_surface bits */
  tg_effect effect;
  tg_risk risk;
  unsigned flags;    /* tg_tool_flag bits */
  tg_task_support task_support;
  unsigned max_per_run; /* successful calls one run may make; 0: no cap */
  const char **permissions; /* all required */
  size_t n_permissions;
  json_t *spec;          /* the declaration; the strings above point into it */
  json_t *input_schema;  /* with additionalProperties defaulted to false */
  json_t *output_schema;
  tg_schema *input, *output; /* compiled once */
  tg_handler_fn handler;
  const tg_provider *provider;
} tg_tool;

const char *tg_surface_name(tg_surface surface);
/* 0 when name is not a surface. */
tg_surface tg_surface_parse(const char *name);
const char *tg_effect_name(tg_effect effect);
const char *tg_risk_name(tg_risk risk);

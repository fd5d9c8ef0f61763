/* The error envelope every tool call may answer (seed 000 §2):
 *   {"error": {"code": "permission_denied", "message": "...", "details": {...}}}
 * One list gives the enum, the wire code and a default message. Numbers are never reused. */
#pragma once
#include <jansson.h>

#define TG_ERROR_CODES(X)                                                                 \
  X(1, PERMISSION_DENIED, "permission_denied", "The caller may not do this.")              \
  X(2, NOT_FOUND, "not_found", "No such tool or object.")                                  \
  X(3, VALIDATION_FAILED, "validation_failed", "The arguments are not valid.")             \
  X(4, BUDGET_EXCEEDED, "budget_exceeded", "The budget of this scope is spent.")           \
  X(5, RATE_LIMITED, "rate_limited", "Too many calls; retry later.")                       \
  X(6, PRECONDITION_FAILED, "precondition_failed", "A precondition of this call failed.")  \
  X(7, PROVIDER_ERROR, "provider_error", "An external provider failed.")                   \
  X(8, INTERNAL_ERROR, "internal_error", "The tool failed unexpectedly.")

typedef enum tg_errcode {
  TG_ERR_NONE = 0,
#define TG_ERRCODE_ENUM(num, id, wire, msg) TG_ERR_##id = num,
  TG_ERROR_CODES(TG_ERRCODE_ENUM)
#undef TG_ERRCODE_ENUM
} tg_errcode;

/* The wire code ("permission_denied"), or NULL for TG_ERR_NONE and unknown values. */
const char *tg_errcode_name(tg_errcode code);
/* The default message of a code, safe to show to a model. */
const char *tg_errcode_message(tg_errcode code);
/* The code of a wire name, or TG_ERR_NONE. */
tg_errcode tg_errcode_parse(const char *name);

/* A new envelope. message NULL means the default message; details (stolen) may be NULL. */
json_t *tg_error_envelope(tg_errcode code, const char *message, json_t *details);
/* A new JSON Schema (2020-12) of every envelope tg_error_envelope makes; NULL without memory. */
json_t *tg_error_envelope_schema(void);

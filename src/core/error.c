#include "core/error.h"

#include <string.h>

static const struct {
  const char *wire, *message;
} codes[] = {
#define TG_ERRCODE_ROW(num, id, wire, msg) [num] = {wire, msg},
    TG_ERROR_CODES(TG_ERRCODE_ROW)
#undef TG_ERRCODE_ROW
};

const char *tg_errcode_name(tg_errcode code) {
  if (code <= 0 || (size_t)code >= sizeof codes / sizeof codes[0]) return NULL;
  return codes[code].wire;
}

const char *tg_errcode_message(tg_errcode code) {
  if (code <= 0 || (size_t)code >= sizeof codes / sizeof codes[0]) return "Unknown error.";
  return codes[code].message;
}

tg_errcode tg_errcode_parse(const char *name) {
  for (size_t i = 1; i < sizeof codes / sizeof codes[0]; i++)
    if (codes[i].wire && strcmp(codes[i].wire, name) == 0) return (tg_errcode)i;
  return TG_ERR_NONE;
}

json_t *tg_error_envelope(tg_errcode code, const char *message, json_t *details) {
  json_t *error = json_pack("{s:s,s:s}", "code", tg_errcode_name(code) ? tg_errcode_name(code)
                                                                         : "internal_error",
                            "message", message ? message : tg_errcode_message(code));
  if (error && details && json_object_set_new(error, "details", details) < 0) {
    json_decref(error);
    return NULL;
  }
  if (!error) {
    json_decref(details);
    return NULL;
  }
  return json_pack("{s:o}", "error", error);
}

json_t *tg_error_envelope_schema(void) {
  json_t *wires = json_array();
  for (size_t i = 1; wires && i < sizeof codes / sizeof codes[0]; i++)
    if (codes[i].wire && json_array_append_new(wires, json_string(codes[i].wire)) < 0) {
      json_decref(wires);
      wires = NULL;
    }
  if (!wires) return NULL;
  json_t *error = json_pack("{s:s,s:[s,s],s:{s:{s:o},s:{s:s},s:{s:s}}}", "type", "object",
                            "required", "code", "message", "properties", "code", "enum", wires,
                            "message", "type", "string", "details", "type", "object");
  return json_pack("{s:s,s:[s],s:b,s:{s:o}}", "type", "object", "required", "error",
                   "additionalProperties", 0, "properties", "error", error);
}

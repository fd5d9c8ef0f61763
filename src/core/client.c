/* What a client declared it can answer, decided in one place for every surface and handler. */
#include "core/client.h"

#include <string.h>

#include "util/status.h"

/* The capability a request to the client needs, or NULL for a method no client declares. */
static const char *capability_of(const char *method) {
  if (!method) return NULL;
  if (strcmp(method, "elicitation/create") == 0) return "elicitation";
  if (strcmp(method, "sampling/createMessage") == 0) return "sampling";
  if (strcmp(method, "roots/list") == 0) return "roots";
  return NULL;
}

/* An elicitation's mode: url, or form (also when it names none). */
static bool url_mode(const json_t *params) {
  const char *mode = json_string_value(json_object_get(params, "mode"));
  return mode && strcmp(mode, "url") == 0;
}

bool tg_client_can(const json_t *capabilities, const char *method, const json_t *params) {
  const char *cap = capability_of(method);
  json_t *declared = cap ? json_object_get(capabilities, cap) : NULL;
  if (!json_is_object(declared)) return false;
  if (strcmp(cap, "elicitation") != 0) return true;
  /* An empty object declares form mode alone. */
  return url_mode(params) ? json_object_get(declared, "url") != NULL
                          : json_object_get(declared, "form") || json_object_size(declared) == 0;
}

int tg_client_requirement(const char *method, const json_t *params, json_t **ret) {
  const char *cap = capability_of(method);
  *ret = NULL;
  if (!cap) return TG_E_INVAL;
  /* Each mode named, so that requirements merged (form and url) still ask for both. */
  *ret = strcmp(cap, "elicitation") == 0
             ? json_pack("{s:{s:{}}}", cap, url_mode(params) ? "url" : "form")
             : json_pack("{s:{}}", cap);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* What a client declared it can answer, decided in one place for every surface and handler. */
#include "core/client.h"

#include <stdlib.h>
#include <string.h>

#include "core/schema.h"
#include "core/tool.h"
#include "util/status.h"

bool tg_client_asks_input(const tg_tool *tool, json_t *result) {
  const char *type = json_string_value(json_object_get(result, "resultType"));
  return tool && (tool->flags & TG_TOOL_MCP_CONTENT) && type && strcmp(type, "input_required") == 0;
}

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
  return url_mode(params) ? json_is_object(json_object_get(declared, "url"))
                          : json_is_object(json_object_get(declared, "form")) ||
                                json_object_size(declared) == 0;
}

/* The capabilities a server reads of its client's (elicitation first). */
static const char *const read_caps[] = {"elicitation", "sampling", "roots"};
#define N_READ_CAPS (sizeof read_caps / sizeof read_caps[0])

json_t *tg_client_capabilities_read(const json_t *declared) {
  json_t *kept = json_object();
  for (size_t i = 0; kept && i < N_READ_CAPS; i++) {
    json_t *cap = json_object_get(declared, read_caps[i]);
    if (!json_is_object(cap)) continue;
    json_t *own = json_object();
    /* Of an elicitation, the modes it names (none: form alone). */
    for (int url = 0; own && i == 0 && url <= 1; url++)
      if (json_object_get(cap, url ? "url" : "form") &&
          json_object_set_new(own, url ? "url" : "form", json_object()) < 0) {
        json_decref(own);
        own = NULL;
      }
    if (!own || json_object_set_new(kept, read_caps[i], own) < 0) {
      json_decref(kept);
      kept = NULL;
    }
  }
  return kept;
}

/* Whether the members of object named in names (n of them), where given, are objects. */
static bool objects_where_given(const json_t *object, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const json_t *member = json_object_get(object, names[i]);
    if (member && !json_is_object(member)) return false;
  }
  return true;
}

/* Whether every member of map (none, if it is no object) is an object. */
static bool all_objects(const json_t *map) {
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)map, key, value) if (!json_is_object(value)) return false;
  return true;
}

bool tg_client_read_capabilities_malformed(const json_t *declared) {
  return !objects_where_given(declared, read_caps, N_READ_CAPS);
}

bool tg_client_capabilities_malformed(const json_t *declared) {
  static const char *const top[] = {"experimental", "roots", "sampling", "elicitation",
                                    "extensions"};
  static const char *const sampling[] = {"context", "tools"};
  static const char *const elicitation[] = {"form", "url"};
  return !objects_where_given(declared, top, sizeof top / sizeof top[0]) ||
         !objects_where_given(json_object_get(declared, "sampling"), sampling, 2) ||
         !objects_where_given(json_object_get(declared, "elicitation"), elicitation, 2) ||
         !all_objects(json_object_get(declared, "experimental")) ||
         !all_objects(json_object_get(declared, "extensions"));
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

static bool is_one_of(const char *s, const char *a, const char *b, const char *c) {
  return s && (strcmp(s, a) == 0 || strcmp(s, b) == 0 || (c && strcmp(s, c) == 0));
}

/* An elicitation's content: each field a string, a number, a boolean or strings. */
static bool elicited_content(const json_t *content) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)content, key, value) {
    if (json_is_string(value) || json_is_number(value) || json_is_boolean(value)) continue;
    if (!json_is_array(value)) return false;
    size_t i;
    json_t *item;
    json_array_foreach(value, i, item) if (!json_is_string(item)) return false;
  }
  return true;
}

/* Whether accepted content (NULL: none) holds what a form elicitation's requestedSchema asks
 * (none, as in url mode: anything). A schema that does not compile is the handler's to
 * judge. */
static bool fits_requested(const json_t *params, json_t *content) {
  json_t *schema = json_object_get(params, "requestedSchema");
  tg_schema *compiled = NULL;
  char *why = NULL;
  if (!schema || tg_schema_compile(schema, NULL, &compiled, &why) < 0) {
    free(why);
    return true;
  }
  json_t *given = content ? json_incref(content) : json_object();
  bool fits = given && tg_schema_validate(compiled, given, NULL, 0);
  json_decref(given);
  tg_schema_free(compiled);
  return fits;
}

/* A block of a sampled message's content (SamplingMessageContentBlock): its kind's members;
 * a tool's use or result only when the request offered the model tools. */
static bool sampled_block(const json_t *block, bool tools) {
  const char *type = json_string_value(json_object_get(block, "type"));
  if (!type) return false;
  if (strcmp(type, "text") == 0) return json_is_string(json_object_get(block, "text"));
  if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0)
    return json_is_string(json_object_get(block, "data")) &&
           json_is_string(json_object_get(block, "mimeType"));
  if (!tools) return false;
  if (strcmp(type, "tool_use") == 0)
    return json_is_string(json_object_get(block, "id")) &&
           json_is_string(json_object_get(block, "name")) &&
           json_is_object(json_object_get(block, "input"));
  json_t *content = json_object_get(block, "content");
  return strcmp(type, "tool_result") == 0 && json_is_string(json_object_get(block, "toolUseId")) &&
         (!content || json_is_array(content));
}

/* A sampled message's content: one block or an array of them (as 2025-11-25 has it). */
static bool sampled_content(const json_t *params, const json_t *content) {
  bool tools = json_object_get(params, "tools") != NULL;
  if (json_is_object(content)) return sampled_block(content, tools);
  size_t i;
  json_t *block;
  json_array_foreach(content, i, block) if (!sampled_block(block, tools)) return false;
  return json_is_array(content);
}

/* A root: a file:// URI naming something, and a name if any. */
static bool listed_root(const json_t *root) {
  const char *uri = json_string_value(json_object_get(root, "uri"));
  json_t *name = json_object_get(root, "name");
  return uri && strncmp(uri, "file://", 7) == 0 && uri[7] && (!name || json_is_string(name));
}

bool tg_client_answer_reads(const char *method, const json_t *params, const json_t *answer) {
  const char *cap = capability_of(method);
  json_t *content = json_object_get(answer, "content");
  if (!cap || !json_is_object(answer)) return false;
  if (strcmp(cap, "elicitation") == 0) { /* an ElicitResult */
    const char *action = json_string_value(json_object_get(answer, "action"));
    /* Content comes only with accept: what a user declined never reaches the tool (an empty
     * one, which a lenient client may send, says nothing). */
    if (is_one_of(action, "decline", "cancel", NULL))
      return !content || json_is_null(content) ||
             (json_is_object(content) && !json_object_size(content));
    return action && strcmp(action, "accept") == 0 &&
           (!content || (json_is_object(content) && elicited_content(content))) &&
           fits_requested(params, content);
  }
  if (strcmp(cap, "roots") == 0) { /* a ListRootsResult */
    json_t *roots = json_object_get(answer, "roots");
    size_t i;
    json_t *root;
    json_array_foreach(roots, i, root) if (!listed_root(root)) return false;
    return json_is_array(roots);
  }
  /* a CreateMessageResult */
  json_t *stop = json_object_get(answer, "stopReason");
  return is_one_of(json_string_value(json_object_get(answer, "role")), "user", "assistant", NULL) &&
         json_is_string(json_object_get(answer, "model")) && (!stop || json_is_string(stop)) &&
         sampled_content(params, content);
}

json_t *tg_client_answer_terms(const char *method, const json_t *params) {
  json_t *schema = json_object_get(params, "requestedSchema");
  json_t *kept = json_object();
  bool ok = kept && (!schema || json_object_set(kept, "requestedSchema", schema) == 0) &&
            (!json_object_get(params, "tools") ||
             json_object_set_new(kept, "tools", json_true()) == 0);
  if (!ok) {
    json_decref(kept);
    return NULL;
  }
  return json_pack("{s:s,s:o}", "method", method, "params", kept);
}

bool tg_client_unasked_answer_reads(const json_t *capabilities, const json_t *answer) {
  const char *method = json_object_get(answer, "action")  ? "elicitation/create"
                       : json_object_get(answer, "roots") ? "roots/list"
                                                          : "sampling/createMessage";
  return json_is_object(json_object_get(capabilities, capability_of(method))) &&
         tg_client_answer_reads(method, NULL, answer);
}

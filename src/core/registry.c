#define _GNU_SOURCE
#include "core/registry.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/embed.h"
#include "util/hash.h"
#include "util/status.h"

struct tg_registry {
  tg_tool *tools;
  size_t n_tools;
  /* Open addressing, power-of-two capacity, three names per tool. */
  const tg_tool **slots;
  const char **keys;
  size_t capacity;
  tg_schema_store *schemas; /* the nodes of every tool's compiled schemas */
};

static int failf(char **reterr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(char **reterr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(reterr, fmt, ap) < 0) *reterr = NULL;
  va_end(ap);
  return TG_E_INVAL;
}

static size_t slot_of(const tg_registry *reg, const char *name) {
  size_t mask = reg->capacity - 1;
  size_t i = tg_hash_text(name) & mask;
  while (reg->keys[i] && strcmp(reg->keys[i], name) != 0) i = (i + 1) & mask;
  return i;
}

/* Names are unique across canonical, model-facing and alias names of all tools. */
static int index_name(tg_registry *reg, const char *name, const tg_tool *tool, char **reterr) {
  size_t i = slot_of(reg, name);
  if (reg->keys[i] && reg->slots[i] != tool)
    return failf(reterr, "tool %s: name \"%s\" is already used by tool %s", tool->name, name,
                 reg->slots[i]->name);
  reg->keys[i] = name;
  reg->slots[i] = tool;
  return TG_OK;
}

static unsigned parse_flags(json_t *list, const char *const *names, size_t n_names) {
  unsigned bits = 0;
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    for (size_t k = 0; k < n_names; k++)
      if (strcmp(json_string_value(v), names[k]) == 0) bits |= 1u << k;
  }
  return bits;
}

static size_t enum_index(const char *value, const char *const *names, size_t n_names) {
  for (size_t k = 0; k < n_names; k++)
    if (strcmp(value, names[k]) == 0) return k;
  return 0;
}

/* Unknown argument names are refused unless the spec says otherwise (DESIGN.md §3). The
 * declaration's own schema is closed, not a copy: the registry owns the declaration, and
 * nothing reads its schema but through the tool. */
static json_t *default_closed(json_t *schema) {
  if (!json_object_get(schema, "additionalProperties") &&
      !json_object_get(schema, "unevaluatedProperties") &&
      json_object_set_new(schema, "additionalProperties", json_false()) < 0)
    return NULL;
  return json_incref(schema);
}

static int compile_schema(tg_registry *reg, const tg_tool *tool, const char *which,
                          json_t *schema, tg_schema **ret, char **reterr) {
  _cleanup_free_ char *why = NULL;
  int r = tg_schema_compile(schema, &(tg_schema_options){.store = reg->schemas}, ret, &why);
  if (r < 0) return failf(reterr, "tool %s: %s does not compile: %s", tool->name, which,
                          why ? why : "out of memory");
  return TG_OK;
}

static int build_tool(tg_registry *reg, tg_tool *tool, json_t *decl, const tg_provider *provider,
                      char **reterr) {
  static const char *const surfaces[] = {"agent", "mcp", "api"};
  static const char *const effects[] = {"read", "write", "propose"};
  static const char *const risks[] = {"low", "medium", "high"};
  static const char *const flags[] = {"idempotent", "destructive", "open_world", "mcp_content",
                                      "interactive", "agents_only", "people_only"};
  static const char *const task_support[] = {"optional", "required"};

  tool->spec = json_incref(decl);
  tool->name = strdup(json_string_value(json_object_get(decl, "name")));
  tool->model_name = tool->name ? strdup(tool->name) : NULL;
  if (!tool->model_name) return TG_E_NOMEM;
  for (char *p = tool->model_name; *p; p++)
    if (*p == '.') *p = '_';
  tool->alias = json_string_value(json_object_get(decl, "alias"));
  tool->description = json_string_value(json_object_get(decl, "description"));
  tool->surfaces = parse_flags(json_object_get(decl, "surfaces"), surfaces, 3);
  tool->effect = (tg_effect)enum_index(json_string_value(json_object_get(decl, "effect")), effects, 3);
  tool->risk = (tg_risk)enum_index(json_string_value(json_object_get(decl, "risk")), risks, 3);
  tool->flags = parse_flags(json_object_get(decl, "flags"), flags, sizeof flags / sizeof flags[0]);
  tool->max_per_run = (unsigned)json_integer_value(json_object_get(decl, "maxPerRun"));
  json_t *tasks = json_object_get(decl, "taskSupport");
  tool->task_support = tasks ? (tg_task_support)(1 + enum_index(json_string_value(tasks), task_support, 2))
                             : TG_TASK_FORBIDDEN;

  json_t *perms = json_object_get(decl, "permissions");
  tool->n_permissions = json_array_size(perms);
  tool->permissions = calloc(tool->n_permissions + 1, sizeof *tool->permissions);
  if (!tool->permissions) return TG_E_NOMEM;
  for (size_t i = 0; i < tool->n_permissions; i++)
    tool->permissions[i] = json_string_value(json_array_get(perms, i));

  tool->input_schema = default_closed(json_object_get(decl, "inputSchema"));
  tool->output_schema = json_incref(json_object_get(decl, "outputSchema"));
  if (!tool->input_schema) return TG_E_NOMEM;
  int r = compile_schema(reg, tool, "inputSchema", tool->input_schema, &tool->input, reterr);
  if (r < 0) return r;
  r = compile_schema(reg, tool, "outputSchema", tool->output_schema, &tool->output, reterr);
  if (r < 0) return r;

  for (size_t i = 0; i < provider->n_handlers; i++)
    if (strcmp(provider->handlers[i].name, tool->name) == 0) tool->handler = provider->handlers[i].fn;
  if (!tool->handler)
    return failf(reterr, "provider %s: tool %s is declared but has no handler", provider->name,
                 tool->name);
  tool->provider = provider;
  return TG_OK;
}

/* Parses and checks one provider's spec against the spec schema. */
static int load_spec(const tg_provider *provider, const tg_schema *spec_schema, json_t **ret,
                     char **reterr) {
  const char *text = provider->spec_json;
  if (provider->spec_file) {
    const tg_embedded_file *file = tg_embed_find(tg_embedded_specs, provider->spec_file);
    if (!file)
      return failf(reterr, "provider %s: spec %s is not embedded", provider->name,
                   provider->spec_file);
    text = file->data;
  }
  const char *spec_name = provider->spec_file ? provider->spec_file : "its inline spec";
  json_error_t jerr;
  _cleanup_json_ json_t *spec = json_loads(text ? text : "", JSON_REJECT_DUPLICATES, &jerr);
  if (!spec)
    return failf(reterr, "provider %s: %s line %d: %s", provider->name, spec_name, jerr.line,
                 jerr.text);
  _cleanup_json_ json_t *errors = json_array();
  if (!errors) return TG_E_NOMEM;
  if (!tg_schema_validate(spec_schema, spec, errors, 1)) {
    json_t *e = json_array_get(errors, 0);
    return failf(reterr, "provider %s: %s at %s: %s", provider->name, spec_name,
                 json_string_value(json_object_get(e, "instancePath")),
                 json_string_value(json_object_get(e, "message")));
  }
  if (strcmp(json_string_value(json_object_get(spec, "provider")), provider->name) != 0)
    return failf(reterr, "provider %s: %s names provider \"%s\"", provider->name, spec_name,
                 json_string_value(json_object_get(spec, "provider")));
  *ret = TAKE_PTR(spec);
  return TG_OK;
}

static int compile_spec_schema(tg_schema **ret, char **reterr) {
  const tg_embedded_file *file = tg_embed_find(tg_embedded_specs, "tool-spec.schema.json");
  if (!file) return failf(reterr, "tool-spec.schema.json is not embedded");
  _cleanup_json_ json_t *schema = json_loadb(file->data, file->size, 0, NULL);
  if (!schema) return failf(reterr, "tool-spec.schema.json is not valid JSON");
  _cleanup_free_ char *why = NULL;
  if (tg_schema_compile(schema, NULL, ret, &why) < 0)
    return failf(reterr, "tool-spec.schema.json: %s", why ? why : "out of memory");
  return TG_OK;
}

/* Every handler must have a declaration: a handler nobody declared would be unreachable. */
static int check_handlers_declared(const tg_provider *provider, json_t *tools, char **reterr) {
  for (size_t h = 0; h < provider->n_handlers; h++) {
    bool declared = false;
    size_t i;
    json_t *decl;
    json_array_foreach(tools, i, decl) {
      if (strcmp(json_string_value(json_object_get(decl, "name")), provider->handlers[h].name) == 0)
        declared = true;
    }
    if (!declared)
      return failf(reterr, "provider %s: handler %s has no declaration", provider->name,
                   provider->handlers[h].name);
  }
  return TG_OK;
}

static int load_providers(tg_registry *reg, const tg_provider *const *providers,
                          size_t n_providers, json_t *specs, char **reterr) {
  tg_schema *spec_schema = NULL;
  int r = compile_spec_schema(&spec_schema, reterr);
  for (size_t p = 0; r == TG_OK && p < n_providers; p++) {
    json_t *spec = NULL;
    r = load_spec(providers[p], spec_schema, &spec, reterr);
    if (r == TG_OK) r = json_array_append_new(specs, spec) < 0 ? TG_E_NOMEM : TG_OK;
    if (r == TG_OK) {
      r = check_handlers_declared(providers[p], json_object_get(spec, "tools"), reterr);
      reg->n_tools += json_array_size(json_object_get(spec, "tools"));
    }
  }
  tg_schema_free(spec_schema);
  return r;
}

int tg_registry_new(const tg_provider *const *providers, size_t n_providers,
                    tg_registry **ret, char **reterr) {
  *reterr = NULL;
  tg_registry *reg = calloc(1, sizeof *reg);
  _cleanup_json_ json_t *specs = json_array();
  if (!reg || !specs) {
    free(reg);
    return TG_E_NOMEM;
  }
  int r = load_providers(reg, providers, n_providers, specs, reterr);
  if (r == TG_OK) {
    reg->capacity = 16;
    while (reg->capacity < reg->n_tools * 6) reg->capacity *= 2;
    reg->tools = calloc(reg->n_tools ? reg->n_tools : 1, sizeof *reg->tools);
    reg->slots = calloc(reg->capacity, sizeof *reg->slots);
    reg->keys = calloc(reg->capacity, sizeof *reg->keys);
    reg->schemas = tg_schema_store_new();
    if (!reg->tools || !reg->slots || !reg->keys || !reg->schemas) r = TG_E_NOMEM;
  }
  size_t n = 0;
  for (size_t p = 0; r == TG_OK && p < n_providers; p++) {
    size_t i;
    json_t *decl;
    json_array_foreach(json_object_get(json_array_get(specs, p), "tools"), i, decl) {
      tg_tool *tool = &reg->tools[n];
      tool->id = (unsigned)n++;
      r = build_tool(reg, tool, decl, providers[p], reterr);
      if (r == TG_OK) r = index_name(reg, tool->name, tool, reterr);
      if (r == TG_OK) r = index_name(reg, tool->model_name, tool, reterr);
      if (r == TG_OK && tool->alias) r = index_name(reg, tool->alias, tool, reterr);
      if (r < 0) break;
    }
  }
  if (r < 0) {
    reg->n_tools = n;
    tg_registry_free(reg);
    return r;
  }
  *ret = reg;
  return TG_OK;
}

void tg_registry_free(tg_registry *reg) {
  if (!reg) return;
  for (size_t i = 0; reg->tools && i < reg->n_tools; i++) {
    tg_tool *t = &reg->tools[i];
    free(t->name);
    free(t->model_name);
    free(t->permissions);
    json_decref(t->input_schema);
    json_decref(t->output_schema);
    json_decref(t->spec);
    tg_schema_free(t->input);
    tg_schema_free(t->output);
  }
  tg_schema_store_free(reg->schemas); /* after the schemas whose nodes it holds */
  free(reg->tools);
  free(reg->slots);
  free(reg->keys);
  free(reg);
}

const tg_tool *tg_registry_find(const tg_registry *reg, const char *name) {
  return name ? reg->slots[slot_of(reg, name)] : NULL;
}

size_t tg_registry_count(const tg_registry *reg) { return reg->n_tools; }

const tg_tool *tg_registry_at(const tg_registry *reg, size_t index) {
  return index < reg->n_tools ? &reg->tools[index] : NULL;
}

#define _GNU_SOURCE
#include "domain/skill_file.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "util/cleanup.h"
#include "util/json.h"
#include "util/status.h"

/* Lines of the file before the YAML starts: the opening "---". Marks count from 0. */
#define FRONT_MATTER_LINE0 2

typedef struct parse {
  yaml_document_t *doc;
  char **reterr;
} parse;

static int fail(char **reterr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(char **reterr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(reterr, fmt, ap) < 0) *reterr = NULL;
  va_end(ap);
  return *reterr ? TG_E_INVAL : TG_E_NOMEM;
}

static size_t line_of(const yaml_node_t *node) {
  return node->start_mark.line + FRONT_MATTER_LINE0;
}

static size_t utf8_chars(const char *s, size_t n) {
  size_t chars = 0;
  for (size_t i = 0; i < n; i++) chars += ((unsigned char)s[i] & 0xC0) != 0x80;
  return chars;
}

/* Whether the line at p is marker (then blanks, an optional CR, a newline or the end); *next
 * receives the start of the following line. */
static bool delimiter(const char *p, const char *end, const char *marker, const char **next) {
  size_t n = strlen(marker);
  if ((size_t)(end - p) < n || memcmp(p, marker, n) != 0) return false;
  p += n;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  if (p < end && *p == '\r') p++;
  if (p < end && *p != '\n') return false;
  *next = p < end ? p + 1 : end;
  return true;
}

static const char *next_line(const char *p, const char *end) {
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  return nl ? nl + 1 : end;
}

/* A scalar as a JSON string of 1..max characters. */
static int text_value(parse *ps, const yaml_node_t *node, const char *what, size_t max,
                      json_t **ret) {
  if (node->type != YAML_SCALAR_NODE)
    return fail(ps->reterr, "front matter, line %zu: %s must be text", line_of(node), what);
  const char *s = (const char *)node->data.scalar.value;
  size_t n = node->data.scalar.length, chars = utf8_chars(s, n);
  if (memchr(s, '\0', n))
    return fail(ps->reterr, "front matter, line %zu: %s contains a NUL character", line_of(node),
                what);
  if (chars == 0)
    return fail(ps->reterr, "front matter, line %zu: %s is empty", line_of(node), what);
  if (chars > max)
    return fail(ps->reterr, "front matter, line %zu: %s is longer than %zu characters",
                line_of(node), what, max);
  *ret = json_stringn(s, n);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static bool valid_slug(const char *s, size_t n) {
  if (n == 0 || n > TG_SKILL_SLUG_MAX || s[0] == '-') return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
      return false;
  return true;
}

/* "Release Notes (v2)" → "release-notes-v2"; "" when the name has no ASCII letter or digit. */
static json_t *slug_of(const char *name) {
  char slug[TG_SKILL_SLUG_MAX + 1];
  size_t n = 0;
  for (const char *p = name; *p && n < TG_SKILL_SLUG_MAX; p++) {
    char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) slug[n++] = c;
    else if (n > 0 && slug[n - 1] != '-') slug[n++] = '-';
  }
  while (n > 0 && slug[n - 1] == '-') n--;
  return json_stringn(slug, n);
}

static int add_tool(parse *ps, json_t *tools, const char *name, size_t n, size_t line) {
  if (n > TG_SKILL_TOOL_NAME_MAX)
    return fail(ps->reterr, "front matter, line %zu: a tool name is longer than %d characters",
                line, TG_SKILL_TOOL_NAME_MAX);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    if (json_string_length(t) == n && memcmp(json_string_value(t), name, n) == 0) return TG_OK;
  }
  if (json_array_size(tools) >= TG_SKILL_TOOLS_MAX)
    return fail(ps->reterr, "front matter, line %zu: more than %d allowed tools", line,
                TG_SKILL_TOOLS_MAX);
  return json_array_append_new(tools, json_stringn(name, n)) == 0 ? TG_OK : TG_E_NOMEM;
}

/* allowed-tools: a sequence of names, or one string of names separated by commas or blanks
 * (the spelling of other runtimes' skill files). */
static int tools_value(parse *ps, const yaml_node_t *node, json_t **ret) {
  _cleanup_json_ json_t *tools = json_array();
  if (!tools) return TG_E_NOMEM;
  static const char separators[] = ", \t\r\n";
  if (node->type == YAML_SCALAR_NODE) {
    const char *s = (const char *)node->data.scalar.value, *end = s + node->data.scalar.length;
    while (s < end) {
      size_t skip = strspn(s, separators), n = 0;
      s += skip;
      while (s + n < end && !strchr(separators, s[n])) n++;
      if (n == 0) continue;
      int r = add_tool(ps, tools, s, n, line_of(node));
      if (r < 0) return r;
      s += n;
    }
  } else if (node->type == YAML_SEQUENCE_NODE) {
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         it < node->data.sequence.items.top; it++) {
      _cleanup_json_ json_t *name = NULL;
      const yaml_node_t *item = yaml_document_get_node(ps->doc, *it);
      int r = text_value(ps, item, "a tool name", TG_SKILL_TOOL_NAME_MAX, &name);
      if (r < 0) return r;
      if (strcspn(json_string_value(name), separators) != json_string_length(name))
        return fail(ps->reterr, "front matter, line %zu: a tool name contains a blank or a comma",
                    line_of(item));
      r = add_tool(ps, tools, json_string_value(name), json_string_length(name), line_of(item));
      if (r < 0) return r;
    }
  } else {
    return fail(ps->reterr, "front matter, line %zu: allowed-tools must be a list of tool names",
                line_of(node));
  }
  *ret = TAKE_PTR(tools);
  return TG_OK;
}

/* The value of key in a mapping node, or NULL. */
static const yaml_node_t *member(parse *ps, const yaml_node_t *map, const char *key) {
  for (yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
       pair++) {
    const yaml_node_t *k = yaml_document_get_node(ps->doc, pair->key);
    if (k->type == YAML_SCALAR_NODE && strlen(key) == k->data.scalar.length &&
        memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
      return yaml_document_get_node(ps->doc, pair->value);
  }
  return NULL;
}

static int examples_value(parse *ps, const yaml_node_t *node, json_t **ret) {
  if (node->type != YAML_SEQUENCE_NODE)
    return fail(ps->reterr, "front matter, line %zu: examples must be a list of {input, output}",
                line_of(node));
  _cleanup_json_ json_t *examples = json_array();
  if (!examples) return TG_E_NOMEM;
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
       it++) {
    const yaml_node_t *item = yaml_document_get_node(ps->doc, *it);
    if (json_array_size(examples) >= TG_SKILL_EXAMPLES_MAX)
      return fail(ps->reterr, "front matter, line %zu: more than %d examples", line_of(item),
                  TG_SKILL_EXAMPLES_MAX);
    if (item->type != YAML_MAPPING_NODE)
      return fail(ps->reterr, "front matter, line %zu: an example must have input and output",
                  line_of(item));
    const yaml_node_t *in = member(ps, item, "input"), *out = member(ps, item, "output");
    if (!in || !out)
      return fail(ps->reterr, "front matter, line %zu: an example must have input and output",
                  line_of(item));
    json_t *input = NULL, *output = NULL;
    int r = text_value(ps, in, "an example's input", TG_SKILL_EXAMPLE_MAX, &input);
    if (r == TG_OK) r = text_value(ps, out, "an example's output", TG_SKILL_EXAMPLE_MAX, &output);
    if (r == TG_OK && json_array_append_new(examples, json_pack("{s:o,s:o}", "input", input,
                                                                "output", output)) != 0)
      return TG_E_NOMEM;
    if (r < 0) {
      json_decref(input);
      return r;
    }
  }
  *ret = TAKE_PTR(examples);
  return TG_OK;
}

/* The field of the skill a front-matter key sets, or NULL for a key the format ignores. */
static const char *field_of(const yaml_node_t *key) {
  static const struct { const char *key, *field; } fields[] = {
      {"name", "name"},
      {"slug", "slug"},
      {"description", "description"},
      {"allowed-tools", "allowedTools"},
      {"allowedTools", "allowedTools"},
      {"allowed_tools", "allowedTools"},
      {"examples", "examples"},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (strlen(fields[i].key) == key->data.scalar.length &&
        memcmp(fields[i].key, key->data.scalar.value, key->data.scalar.length) == 0)
      return fields[i].field;
  return NULL;
}

static int field_value(parse *ps, const char *field, const yaml_node_t *node, json_t **ret) {
  if (strcmp(field, "name") == 0) return text_value(ps, node, "name", TG_SKILL_NAME_MAX, ret);
  if (strcmp(field, "description") == 0)
    return text_value(ps, node, "description", TG_SKILL_DESCRIPTION_MAX, ret);
  if (strcmp(field, "allowedTools") == 0) return tools_value(ps, node, ret);
  if (strcmp(field, "examples") == 0) return examples_value(ps, node, ret);
  int r = text_value(ps, node, "slug", TG_SKILL_SLUG_MAX, ret);
  if (r == TG_OK && !valid_slug(json_string_value(*ret), json_string_length(*ret))) {
    json_decref(*ret);
    *ret = NULL;
    return fail(ps->reterr,
                "front matter, line %zu: slug must be lower-case letters, digits and dashes, "
                "starting with a letter or digit",
                line_of(node));
  }
  return r;
}

static int read_front_matter(parse *ps, json_t *skill) {
  const yaml_node_t *root = yaml_document_get_root_node(ps->doc);
  if (!root || root->type != YAML_MAPPING_NODE)
    return fail(ps->reterr, "the front matter must be YAML keys and values (name: ..., "
                            "description: ...)");
  for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
       pair < root->data.mapping.pairs.top; pair++) {
    const yaml_node_t *key = yaml_document_get_node(ps->doc, pair->key);
    if (key->type != YAML_SCALAR_NODE)
      return fail(ps->reterr, "front matter, line %zu: a key must be text", line_of(key));
    const char *field = field_of(key);
    if (!field) continue;
    if (json_object_get(skill, field))
      return fail(ps->reterr, "front matter, line %zu: %s is given twice", line_of(key), field);
    json_t *value = NULL;
    int r = field_value(ps, field, yaml_document_get_node(ps->doc, pair->value), &value);
    if (r < 0) return r;
    if (json_object_set_new(skill, field, value) != 0) return TG_E_NOMEM;
  }
  if (!json_object_get(skill, "name")) return fail(ps->reterr, "the front matter has no name");
  if (!json_object_get(skill, "description"))
    return fail(ps->reterr, "the front matter has no description");
  return TG_OK;
}

static int parse_yaml(const char *yaml, size_t len, json_t *skill, char **reterr) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return TG_E_NOMEM;
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
  yaml_document_t doc;
  int r;
  if (!yaml_parser_load(&parser, &doc)) { /* the loader has released doc */
    r = parser.error == YAML_MEMORY_ERROR
            ? TG_E_NOMEM
            : fail(reterr, "front matter, line %zu: %s",
                   parser.problem_mark.line + FRONT_MATTER_LINE0,
                   parser.problem ? parser.problem : "not valid YAML");
  } else {
    parse ps = {.doc = &doc, .reterr = reterr};
    r = read_front_matter(&ps, skill);
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&parser);
  return r;
}

int tg_skill_file_parse(const char *text, size_t len, json_t **ret, char **reterr) {
  *ret = NULL;
  *reterr = NULL;
  if (memchr(text, '\0', len)) return fail(reterr, "the file contains a NUL byte");
  if (!tg_utf8_valid(text, len)) return fail(reterr, "the file is not UTF-8");
  const char *p = text, *end = text + len, *front, *next;
  if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a BOM some editors write */
  if (!delimiter(p, end, "---", &front))
    return fail(reterr, "a skill file starts with a front matter: a line ---, YAML keys "
                        "(name, description, ...), a line ---, then the body");
  const char *front_end = NULL, *body = NULL;
  for (const char *line = front; line < end; line = next) {
    if (delimiter(line, end, "---", &next) || delimiter(line, end, "...", &next)) {
      front_end = line;
      body = next;
      break;
    }
    next = next_line(line, end);
  }
  if (!front_end) return fail(reterr, "the front matter is not closed by a line ---");
  if (front_end - front > TG_SKILL_FRONT_MATTER_MAX)
    return fail(reterr, "the front matter is longer than %d bytes", TG_SKILL_FRONT_MATTER_MAX);

  /* Blank lines between the front matter and the instructions are layout, not content. */
  while (body < end) {
    next = next_line(body, end);
    const char *q = body;
    while (q < next && strchr(" \t\r\n", *q)) q++;
    if (q < next) break;
    body = next;
  }
  if (body == end)
    return fail(reterr, "the body is empty: write the skill's instructions after the front matter");

  _cleanup_json_ json_t *skill = json_object();
  if (!skill) return TG_E_NOMEM;
  int r = parse_yaml(front, (size_t)(front_end - front), skill, reterr);
  if (r < 0) return r;
  if (!json_object_get(skill, "slug")) {
    json_t *slug = slug_of(json_string_value(json_object_get(skill, "name")));
    if (!slug) return TG_E_NOMEM;
    json_object_set_new(skill, "slug", slug);
    if (json_string_length(slug) == 0)
      return fail(reterr, "no slug can be made from the name: add a slug: line");
  }
  if (!json_object_get(skill, "allowedTools") &&
      json_object_set_new(skill, "allowedTools", json_array()) != 0)
    return TG_E_NOMEM;
  if (json_object_set_new(skill, "body", json_stringn(body, (size_t)(end - body))) != 0)
    return TG_E_NOMEM;
  *ret = TAKE_PTR(skill);
  return TG_OK;
}

/* Private to src/core/schema_*.c: the compiled form of a JSON Schema and helpers shared
 * between the compiler, the validator and the suite runner. */
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/schema.h"
#include "util/hash.h"

/* Nested evaluations per validation; stops $ref loops that make no progress and bounds the
 * C stack whatever the instance or schema. */
#define SCHEMA_MAX_EVAL_DEPTH 256
/* Subschema evaluations per validation; bounds the time a schema with nested alternatives
 * can take, whatever the instance. */
#define SCHEMA_MAX_EVAL_STEPS 10000000
/* Nesting of subschemas inside one document. */
#define SCHEMA_MAX_NESTING 256
/* Subschemas per compiled schema, all documents together. */
#define SCHEMA_MAX_NODES 100000
/* Nesting followed by deep equality and hashing of instance values. */
#define SCHEMA_MAX_VALUE_DEPTH 4096

enum {
  SCHEMA_T_NULL = 1 << 0,
  SCHEMA_T_BOOLEAN = 1 << 1,
  SCHEMA_T_OBJECT = 1 << 2,
  SCHEMA_T_ARRAY = 1 << 3,
  SCHEMA_T_NUMBER = 1 << 4,
  SCHEMA_T_STRING = 1 << 5,
  SCHEMA_T_INTEGER = 1 << 6,
};

/* Keywords whose presence is not visible from a non-NULL pointer. */
enum {
  SCHEMA_KW_TYPE = 1u << 0,
  SCHEMA_KW_CONST = 1u << 1,
  SCHEMA_KW_ENUM = 1u << 2,
  SCHEMA_KW_MULTIPLE_OF = 1u << 3,
  SCHEMA_KW_MAXIMUM = 1u << 4,
  SCHEMA_KW_EXCL_MAXIMUM = 1u << 5,
  SCHEMA_KW_MINIMUM = 1u << 6,
  SCHEMA_KW_EXCL_MINIMUM = 1u << 7,
  SCHEMA_KW_MAX_LENGTH = 1u << 8,
  SCHEMA_KW_MIN_LENGTH = 1u << 9,
  SCHEMA_KW_MAX_ITEMS = 1u << 10,
  SCHEMA_KW_MIN_ITEMS = 1u << 11,
  SCHEMA_KW_UNIQUE_ITEMS = 1u << 12,
  SCHEMA_KW_MAX_CONTAINS = 1u << 13,
  SCHEMA_KW_MIN_CONTAINS = 1u << 14,
  SCHEMA_KW_MAX_PROPS = 1u << 15,
  SCHEMA_KW_MIN_PROPS = 1u << 16,
};

/* A JSON number kept exactly as jansson holds it. */
struct schema_num {
  bool is_int;
  long long i;
  double d;
};

/* A positive number as mant * 10^exp, from its shortest round-trip decimal form. */
struct schema_decimal {
  uint64_t mant;
  int exp;
};

struct schema_pattern {
  pcre2_code *code;
  const char *src; /* as written in the schema, for messages */
  struct schema_pattern *next;
};

struct schema_node;

struct schema_prop {
  const char *name;
  size_t len;
  uint32_t hash;
  const struct schema_node *node;
};

struct schema_patprop {
  struct schema_pattern *re;
  const struct schema_node *node;
};

struct schema_str {
  const char *s;
  size_t len;
};

struct schema_depreq {
  struct schema_str name;
  struct schema_str *names;
  size_t n;
};

struct schema_depschema {
  struct schema_str name;
  const struct schema_node *node;
};

struct schema_dynanchor {
  unsigned id;
  const struct schema_node *node;
};

/* A schema resource (a subschema with its own base URI). At validation time it is the unit
 * of the dynamic scope that $dynamicRef searches. */
struct schema_resource {
  const struct schema_dynanchor *dyn;
  size_t ndyn;
};

struct schema_node {
  const struct schema_resource *res;
  bool is_bool, bool_value;
  bool dyn_bookended; /* $dynamicRef target carries the matching $dynamicAnchor */
  uint8_t types;
  uint32_t kw;    /* SCHEMA_KW_* present */
  unsigned dyn_id; /* anchor name of a bookended $dynamicRef */

  const json_t *const_value;
  const json_t *enum_values;
  struct schema_num maximum, excl_maximum, minimum, excl_minimum, multiple_of;
  struct schema_decimal multiple_dec;
  size_t max_length, min_length, max_items, min_items, max_contains, min_contains;
  size_t max_props, min_props;
  struct schema_pattern *pattern;
  struct schema_str *required;
  size_t nrequired;
  struct schema_depreq *dep_required;
  size_t ndep_required;

  const struct schema_node *ref, *dynref;
  const struct schema_node **all_of, **any_of, **one_of;
  size_t nall_of, nany_of, none_of;
  const struct schema_node *not_, *if_, *then_, *else_;
  struct schema_depschema *dep_schemas;
  size_t ndep_schemas;

  struct schema_prop *props;
  size_t nprops;
  uint32_t *prop_index; /* open addressing over props when there are many; slot = index + 1 */
  uint32_t prop_mask;
  struct schema_patprop *patprops;
  size_t npatprops;
  const struct schema_node *additional, *property_names;

  const struct schema_node **prefix_items;
  size_t nprefix_items;
  const struct schema_node *items, *contains;
  const struct schema_node *uneval_items, *uneval_props;
};

/* Bump allocator: a compiled schema is freed in one go. */
struct schema_arena {
  struct schema_arena_block *head;
};

void *schema_arena_alloc(struct schema_arena *a, size_t size); /* zeroed, or NULL */
char *schema_arena_strndup(struct schema_arena *a, const char *s, size_t len);
void schema_arena_free(struct schema_arena *a);

struct tg_schema {
  struct schema_arena own;    /* its nodes, unless a store holds them */
  struct schema_arena *arena; /* where its nodes are: &own or a store's */
  const struct schema_node *root;
  struct schema_pattern *patterns;
  pcre2_match_context *match_ctx;
  json_t **docs; /* references kept on every document nodes borrow from */
  size_t ndocs;
};

/* Hash map from byte strings to pointers; keys are copied into the given arena. */
struct schema_map_slot {
  uint64_t hash;
  const char *key;
  size_t klen;
  void *value;
};
struct schema_map {
  struct schema_map_slot *slots;
  size_t cap, len;
  struct schema_arena *keys;
};

void *schema_map_get(const struct schema_map *m, const void *key, size_t klen);
/* Adds key unless present; returns 0 or TG_E_NOMEM. */
int schema_map_put(struct schema_map *m, const void *key, size_t klen, void *value);
void schema_map_free(struct schema_map *m);
/* A property's hash in its schema's index (built and probed with it alone). */
static inline uint32_t schema_prop_hash(const char *name, size_t len) {
  return (uint32_t)tg_hash_bytes(name, len);
}

/* RFC 3986 reference resolution of ref against the absolute URI base; the result has dot
 * segments removed and a lowercase scheme and host. malloc'd, NULL when out of memory. */
char *schema_uri_resolve(const char *base, const char *ref);
/* Decodes %XX escapes in place (invalid escapes are kept); returns the new length. */
size_t schema_percent_decode(char *s, size_t len);

bool schema_num_from_json(const json_t *j, struct schema_num *out);
double schema_num_double(const struct schema_num *n);
int schema_num_cmp(const struct schema_num *a, const struct schema_num *b);
bool schema_decimal_from_num(const struct schema_num *n, struct schema_decimal *out);
/* Formats n the shortest way that reads back the same. */
void schema_num_format(const struct schema_num *n, char *buf, size_t size);

/* JSON equality of the JSON Schema data model: numbers compare by value (1 == 1.0). */
bool schema_json_equal(const json_t *a, const json_t *b);
/* A hash consistent with schema_json_equal. */
uint64_t schema_json_hash(const json_t *v);

/* Growable string; a failed allocation sets oom and later additions do nothing. */
struct schema_buf {
  char *p;
  size_t len, cap;
  bool oom;
};
void schema_buf_add(struct schema_buf *b, const char *s, size_t n);
/* Appends "/" and s escaped as a JSON pointer reference token (RFC 6901). */
void schema_buf_add_token(struct schema_buf *b, const char *s, size_t n);
void schema_buf_add_index(struct schema_buf *b, size_t i);
/* Returns the NUL-terminated string and hands it over, or NULL after a failure. */
char *schema_buf_take(struct schema_buf *b);

/* Translates an ECMA-262 regular expression into PCRE2 syntax; malloc'd or NULL. */
char *schema_regex_translate(const char *src, size_t len, size_t *outlen);

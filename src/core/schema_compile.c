/* Compiles a JSON Schema 2020-12 document into the node graph of schema_internal.h.
 *
 * Two passes. Loading a document walks it once, giving every subschema a node and
 * registering the base URI of every $id, $anchor and $dynamicAnchor. Compiling then fills
 * each node from its keywords; a $ref resolves to an existing node, loading the referenced
 * document from the options on first use. Nothing recurses along references, so cyclic
 * schemas compile in one sweep over the node list. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schema_internal.h"
#include "util/status.h"

/* Base URI of a root schema without an absolute $id. */
#define DEFAULT_BASE "urn:toolgate:schema"
#define DIALECT_2020_12 "https://json-schema.org/draft/2020-12/schema"
#define VOCAB_PREFIX "https://json-schema.org/draft/2020-12/vocab/"

enum {
  VOC_CORE = 1 << 0,
  VOC_APPLICATOR = 1 << 1,
  VOC_UNEVALUATED = 1 << 2,
  VOC_VALIDATION = 1 << 3,
  VOC_METADATA = 1 << 4,
  VOC_FORMAT_ANNOTATION = 1 << 5,
  VOC_CONTENT = 1 << 6,
  VOC_ALL = (1 << 7) - 1,
};

struct cdoc {
  const char *uri;
  bool main;
};

struct dynlink {
  struct dynlink *next;
  unsigned id;
  struct cnode *node;
};

struct cres {
  const char *uri;
  unsigned vocab;
  struct schema_resource *rt;
  struct dynlink *dyn;
  size_t ndyn;
  struct cres *next;
};

/* Compile-time view of a node: where it is and what identifies it. */
struct cnode {
  struct schema_node *node;
  json_t *json;
  struct cdoc *doc;
  struct cres *res;
  const struct cnode *parent; /* for locations in messages */
  const char *kw, *key;       /* position under parent: /kw, /kw/key or /kw/idx */
  size_t keylen, idx;
  const char *loc; /* location of a node reached only through a JSON pointer */
  const char *dyn_anchor;
};

struct compiler {
  tg_schema *s;
  struct schema_arena tmp;
  json_t *documents;
  struct schema_map by_uri;  /* absolute URI, or URI#anchor -> cnode */
  struct schema_map by_json; /* (json_t *, cdoc *) -> cnode */
  struct schema_map anchor_ids;
  unsigned nanchor_ids;
  struct cnode **nodes;
  size_t nnodes, capnodes;
  struct cres *resources;
  pcre2_compile_context *ccx;
  char *err;
};

struct json_key {
  const json_t *json;
  const struct cdoc *doc;
};

static void location_of(struct schema_buf *b, const struct cnode *cn) {
  if (!cn) return;
  if (cn->loc) {
    schema_buf_add(b, cn->loc, strlen(cn->loc));
    return;
  }
  if (!cn->parent) {
    if (!cn->doc->main) schema_buf_add(b, cn->doc->uri, strlen(cn->doc->uri));
    schema_buf_add(b, "#", 1);
    return;
  }
  location_of(b, cn->parent);
  schema_buf_add_token(b, cn->kw, strlen(cn->kw));
  if (cn->key)
    schema_buf_add_token(b, cn->key, cn->keylen);
  else if (cn->idx != SIZE_MAX)
    schema_buf_add_index(b, cn->idx);
}

/* Records the first error as "<location>: <message>" and returns rc. */
static int __attribute__((format(printf, 5, 6)))
fail(struct compiler *c, int rc, const struct cnode *at, const char *kw, const char *fmt, ...) {
  if (c->err) return rc;
  struct schema_buf b = {0};
  location_of(&b, at);
  if (kw) schema_buf_add_token(&b, kw, strlen(kw));
  char *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  if (n >= 0) {
    schema_buf_add(&b, ": ", 2);
    schema_buf_add(&b, msg, (size_t)n);
    free(msg);
  }
  c->err = schema_buf_take(&b);
  return rc;
}

static int nomem(struct compiler *c) {
  return fail(c, TG_E_NOMEM, NULL, NULL, "out of memory");
}

static int anchor_id(struct compiler *c, const char *name, unsigned *id) {
  void *v = schema_map_get(&c->anchor_ids, name, strlen(name));
  if (v) {
    *id = (unsigned)((uintptr_t)v - 1);
    return TG_OK;
  }
  *id = c->nanchor_ids++;
  if (schema_map_put(&c->anchor_ids, name, strlen(name), (void *)(uintptr_t)(*id + 1)) < 0)
    return nomem(c);
  return TG_OK;
}

static struct cres *new_resource(struct compiler *c, const char *uri, size_t len, unsigned vocab) {
  struct cres *r = schema_arena_alloc(&c->tmp, sizeof(*r));
  if (!r) return NULL;
  r->uri = schema_arena_strndup(&c->tmp, uri, len);
  r->rt = schema_arena_alloc(c->s->arena, sizeof(*r->rt));
  if (!r->uri || !r->rt) return NULL;
  r->vocab = vocab;
  r->next = c->resources;
  c->resources = r;
  return r;
}

/* Which vocabularies a dialect enables, from its meta-schema's $vocabulary. A meta-schema we
 * were not given is treated as 2020-12, so schemas declaring an older draft still compile. */
static int dialect_vocab(struct compiler *c, const struct cnode *at, const char *base,
                         const char *dialect, unsigned *vocab) {
  *vocab = VOC_ALL;
  char *uri = schema_uri_resolve(base, dialect);
  if (!uri) return nomem(c);
  size_t len = strcspn(uri, "#");
  uri[len] = 0;
  if (!strcmp(uri, DIALECT_2020_12)) {
    free(uri);
    return TG_OK;
  }
  const struct cnode *meta = schema_map_get(&c->by_uri, uri, len);
  const json_t *doc = meta ? meta->json : c->documents ? json_object_get(c->documents, uri) : NULL;
  free(uri);
  const json_t *vocabs = json_object_get(doc, "$vocabulary");
  if (!json_is_object(vocabs)) return TG_OK;
  static const char *const names[] = {"core", "applicator", "unevaluated", "validation",
                                      "meta-data", "format-annotation", "content"};
  *vocab = VOC_CORE;
  const char *key;
  const json_t *required;
  json_object_foreach ((json_t *)vocabs, key, required) {
    bool known = false;
    if (!strncmp(key, VOCAB_PREFIX, strlen(VOCAB_PREFIX)))
      for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        if (!strcmp(key + strlen(VOCAB_PREFIX), names[i])) {
          *vocab |= 1u << i;
          known = true;
        }
    if (!known && json_is_true(required))
      return fail(c, TG_E_INVAL, at, "$schema", "meta-schema requires unsupported vocabulary %s",
                  key);
  }
  return TG_OK;
}

static const char *const single_kws[] = {
    "additionalProperties", "propertyNames", "items", "contains", "not", "if", "then", "else",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema"};
static const char *const map_kws[] = {"properties", "patternProperties", "$defs",
                                      "dependentSchemas"};
static const char *const array_kws[] = {"allOf", "anyOf", "oneOf", "prefixItems"};

struct walk_pos {
  const struct cnode *parent;
  const char *kw, *key;
  size_t keylen, idx;
  const char *loc;
  bool doc_root;
};

static int walk(struct compiler *c, struct cdoc *doc, json_t *j, struct cres *res,
                const struct walk_pos *pos, unsigned depth, struct cnode **out);

static int walk_child(struct compiler *c, struct cnode *parent, json_t *j, const char *kw,
                      const char *key, size_t keylen, size_t idx, unsigned depth) {
  struct walk_pos pos = {.parent = parent, .kw = kw, .key = key, .keylen = keylen, .idx = idx};
  struct cnode *ignored;
  return walk(c, parent->doc, j, parent->res, &pos, depth + 1, &ignored);
}

static int register_anchor(struct compiler *c, struct cnode *cn, const char *name, bool dynamic) {
  size_t ulen = strlen(cn->res->uri), nlen = strlen(name);
  char *key = malloc(ulen + nlen + 2);
  if (!key) return nomem(c);
  memcpy(key, cn->res->uri, ulen);
  key[ulen] = '#';
  memcpy(key + ulen + 1, name, nlen + 1);
  int rc = schema_map_put(&c->by_uri, key, ulen + nlen + 1, cn);
  free(key);
  if (rc < 0) return nomem(c);
  if (!dynamic) return TG_OK;
  struct dynlink *l = schema_arena_alloc(&c->tmp, sizeof(*l));
  if (!l) return nomem(c);
  rc = anchor_id(c, name, &l->id);
  if (rc < 0) return rc;
  l->node = cn;
  l->next = cn->res->dyn;
  cn->res->dyn = l;
  cn->res->ndyn++;
  cn->dyn_anchor = name;
  return TG_OK;
}

/* Gives j and every subschema below it a node. Values that are not schemas are skipped here
 * and reported by compile_node when a keyword in force needs them. */
static int walk(struct compiler *c, struct cdoc *doc, json_t *j, struct cres *res,
                const struct walk_pos *pos, unsigned depth, struct cnode **out) {
  *out = NULL;
  if (!json_is_object(j) && !json_is_boolean(j)) return TG_OK;
  struct json_key jk = {j, doc};
  struct cnode *seen = schema_map_get(&c->by_json, &jk, sizeof(jk));
  if (seen) {
    *out = seen;
    return TG_OK;
  }
  struct cnode tmp_loc = {.parent = pos->parent, .kw = pos->kw, .key = pos->key,
                          .keylen = pos->keylen, .idx = pos->idx, .loc = pos->loc, .doc = doc};
  if (depth > SCHEMA_MAX_NESTING)
    return fail(c, TG_E_TOO_LARGE, &tmp_loc, NULL, "schema nested deeper than %d levels",
                SCHEMA_MAX_NESTING);
  if (c->nnodes >= SCHEMA_MAX_NODES)
    return fail(c, TG_E_TOO_LARGE, &tmp_loc, NULL, "schema has more than %d subschemas",
                SCHEMA_MAX_NODES);
  if (c->nnodes == c->capnodes) {
    size_t cap = c->capnodes ? c->capnodes * 2 : 64;
    struct cnode **nodes = realloc(c->nodes, cap * sizeof(*nodes));
    if (!nodes) return nomem(c);
    c->nodes = nodes;
    c->capnodes = cap;
  }
  struct cnode *cn = schema_arena_alloc(&c->tmp, sizeof(*cn));
  struct schema_node *node = schema_arena_alloc(c->s->arena, sizeof(*node));
  if (!cn || !node) return nomem(c);
  *cn = tmp_loc;
  cn->node = node;
  cn->json = j;
  if (schema_map_put(&c->by_json, &jk, sizeof(jk), cn) < 0) return nomem(c);
  c->nodes[c->nnodes++] = cn;
  *out = cn;

  if (json_is_boolean(j)) {
    node->is_bool = true;
    node->bool_value = json_is_true(j);
    cn->res = res;
    node->res = res->rt;
    return TG_OK;
  }

  int rc;
  bool resource_root = pos->doc_root;
  const json_t *dialect = json_object_get(j, "$schema");
  const json_t *id = json_object_get(j, "$id");
  if (json_is_string(id)) {
    char *uri = schema_uri_resolve(res->uri, json_string_value(id));
    if (!uri) return nomem(c);
    char *hash = strchr(uri, '#');
    if (hash && hash[1]) {
      free(uri);
      return fail(c, TG_E_INVAL, cn, "$id", "$id must not have a fragment");
    }
    if (hash) *hash = 0;
    if (strcmp(uri, res->uri)) {
      res = new_resource(c, uri, strlen(uri), res->vocab);
      if (!res) {
        free(uri);
        return nomem(c);
      }
      resource_root = true;
    }
    rc = schema_map_put(&c->by_uri, uri, strlen(uri), cn);
    free(uri);
    if (rc < 0) return nomem(c);
  }
  if (json_is_string(dialect) && resource_root) {
    rc = dialect_vocab(c, cn, res->uri, json_string_value(dialect), &res->vocab);
    if (rc < 0) return rc;
  }
  cn->res = res;
  node->res = res->rt;

  const json_t *anchor = json_object_get(j, "$anchor");
  if (json_is_string(anchor) && (rc = register_anchor(c, cn, json_string_value(anchor), false)) < 0)
    return rc;
  anchor = json_object_get(j, "$dynamicAnchor");
  if (json_is_string(anchor) && (rc = register_anchor(c, cn, json_string_value(anchor), true)) < 0)
    return rc;

  for (size_t k = 0; k < sizeof(single_kws) / sizeof(*single_kws); k++) {
    json_t *v = json_object_get(j, single_kws[k]);
    if (v && (rc = walk_child(c, cn, v, single_kws[k], NULL, 0, SIZE_MAX, depth)) < 0) return rc;
  }
  for (size_t k = 0; k < sizeof(map_kws) / sizeof(*map_kws); k++) {
    json_t *m = json_object_get(j, map_kws[k]);
    if (!json_is_object(m)) continue;
    for (void *it = json_object_iter(m); it; it = json_object_iter_next(m, it)) {
      rc = walk_child(c, cn, json_object_iter_value(it), map_kws[k], json_object_iter_key(it),
                      json_object_iter_key_len(it), SIZE_MAX, depth);
      if (rc < 0) return rc;
    }
  }
  for (size_t k = 0; k < sizeof(array_kws) / sizeof(*array_kws); k++) {
    json_t *a = json_object_get(j, array_kws[k]);
    for (size_t i = 0; i < json_array_size(a); i++)
      if ((rc = walk_child(c, cn, json_array_get(a, i), array_kws[k], NULL, 0, i, depth)) < 0)
        return rc;
  }
  return TG_OK;
}

static int load_document(struct compiler *c, const char *uri, json_t *root, bool main,
                         struct cnode **out) {
  json_t **docs = realloc(c->s->docs, (c->s->ndocs + 1) * sizeof(*docs));
  if (!docs) return nomem(c);
  c->s->docs = docs;
  docs[c->s->ndocs++] = json_incref(root);
  struct cdoc *doc = schema_arena_alloc(&c->tmp, sizeof(*doc));
  if (!doc || !(doc->uri = schema_arena_strndup(&c->tmp, uri, strlen(uri)))) return nomem(c);
  doc->main = main;
  struct cres *res = new_resource(c, uri, strlen(uri), VOC_ALL);
  if (!res) return nomem(c);
  int rc = walk(c, doc, root, res, &(struct walk_pos){.doc_root = true}, 0, out);
  if (rc < 0) return rc;
  if (!*out) {
    struct cnode at = {.doc = doc};
    return fail(c, TG_E_INVAL, &at, NULL, "a schema must be an object or a boolean");
  }
  if (schema_map_put(&c->by_uri, uri, strlen(uri), *out) < 0) return nomem(c);
  return TG_OK;
}

/* Follows a JSON pointer (already percent-decoded) from a resource's root. */
static int follow_pointer(struct compiler *c, const struct cnode *from, const struct cnode *start,
                          const char *kw, const char *ptr, struct cnode **out) {
  json_t *j = start->json;
  const struct cnode *known = start;
  const char *p = ptr;
  char *tok = malloc(strlen(ptr) + 1);
  if (!tok) return nomem(c);
  while (*p == '/' && j) {
    p++;
    size_t n = 0;
    for (; *p && *p != '/'; p++) {
      if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
        tok[n++] = p[1] == '0' ? '~' : '/';
        p++;
      } else {
        tok[n++] = *p;
      }
    }
    tok[n] = 0;
    if (json_is_object(j)) {
      j = json_object_getn(j, tok, n);
    } else if (json_is_array(j)) {
      char *end;
      unsigned long long i = strtoull(tok, &end, 10);
      bool canonical =
          n && *end == 0 && tok[0] != '-' && tok[0] != '+' && (n == 1 || tok[0] != '0');
      j = canonical && i < json_array_size(j) ? json_array_get(j, (size_t)i) : NULL;
    } else {
      j = NULL;
    }
    struct json_key jk = {j, start->doc};
    const struct cnode *cn = j ? schema_map_get(&c->by_json, &jk, sizeof(jk)) : NULL;
    if (cn) known = cn;
  }
  free(tok);
  if (!j) return fail(c, TG_E_NOTFOUND, from, kw, "JSON pointer %s points to nothing", ptr);
  struct json_key jk = {j, start->doc};
  *out = schema_map_get(&c->by_json, &jk, sizeof(jk));
  if (*out) return TG_OK;
  /* A schema inside something that is not a known keyword: walk it now, in the resource of
   * the closest enclosing subschema. */
  struct schema_buf b = {0};
  location_of(&b, start);
  schema_buf_add(&b, ptr, strlen(ptr));
  char *loc = schema_buf_take(&b);
  struct walk_pos pos = {.loc = loc ? schema_arena_strndup(&c->tmp, loc, strlen(loc)) : NULL};
  free(loc);
  if (!pos.loc) return nomem(c);
  int rc = walk(c, start->doc, j, known->res, &pos, 0, out);
  if (rc < 0) return rc;
  if (!*out)
    return fail(c, TG_E_INVAL, from, kw, "JSON pointer %s points to something not a schema",
                ptr);
  return TG_OK;
}

/* Resolves a $ref or $dynamicRef; *anchor gets the plain-name fragment if there is one. */
static int resolve_ref(struct compiler *c, struct cnode *cn, const char *kw, const char *ref,
                       struct cnode **target, char **anchor) {
  *anchor = NULL;
  char *uri = schema_uri_resolve(cn->res->uri, ref);
  if (!uri) return nomem(c);
  char *frag = strchr(uri, '#');
  if (frag) *frag++ = 0;
  struct cnode *t = schema_map_get(&c->by_uri, uri, strlen(uri));
  json_t *doc = !t && c->documents ? json_object_get(c->documents, uri) : NULL;
  int rc = TG_OK;
  if (doc) rc = load_document(c, uri, doc, false, &t);
  if (rc >= 0 && !t)
    rc = fail(c, TG_E_NOTFOUND, cn, kw, "cannot resolve reference \"%s\" (%s)", ref, uri);
  if (rc < 0 || !frag || !*frag) {
    *target = t;
    free(uri);
    return rc;
  }
  size_t flen = schema_percent_decode(frag, strlen(frag));
  frag[flen] = 0;
  if (frag[0] == '/') {
    rc = follow_pointer(c, cn, t, kw, frag, target);
    free(uri);
    return rc;
  }
  size_t ulen = strlen(t->res->uri);
  char *key = malloc(ulen + flen + 2);
  if (!key) {
    free(uri);
    return nomem(c);
  }
  memcpy(key, t->res->uri, ulen);
  key[ulen] = '#';
  memcpy(key + ulen + 1, frag, flen + 1);
  *target = schema_map_get(&c->by_uri, key, ulen + flen + 1);
  free(key);
  if (!*target)
    rc = fail(c, TG_E_NOTFOUND, cn, kw, "cannot resolve reference \"%s\": no anchor \"%s\"", ref,
              frag);
  else if (!(*anchor = strdup(frag)))
    rc = nomem(c);
  free(uri);
  return rc;
}

enum kwid {
  K_REF, K_DYNREF, K_TYPE, K_CONST, K_ENUM, K_MULTIPLE_OF, K_MAXIMUM, K_EXCL_MAXIMUM,
  K_MINIMUM, K_EXCL_MINIMUM, K_MAX_LENGTH, K_MIN_LENGTH, K_PATTERN, K_MAX_ITEMS, K_MIN_ITEMS,
  K_UNIQUE_ITEMS, K_MAX_CONTAINS, K_MIN_CONTAINS, K_MAX_PROPS, K_MIN_PROPS, K_REQUIRED,
  K_DEP_REQUIRED, K_ALL_OF, K_ANY_OF, K_ONE_OF, K_NOT, K_IF, K_THEN, K_ELSE, K_DEP_SCHEMAS,
  K_PROPERTIES, K_PATTERN_PROPS, K_ADDITIONAL, K_PROPERTY_NAMES, K_PREFIX_ITEMS, K_ITEMS,
  K_CONTAINS, K_UNEVAL_ITEMS, K_UNEVAL_PROPS,
};

static const struct {
  const char *name;
  enum kwid id;
  unsigned vocab;
} keywords[] = {
    {"$ref", K_REF, VOC_CORE},
    {"$dynamicRef", K_DYNREF, VOC_CORE},
    {"type", K_TYPE, VOC_VALIDATION},
    {"const", K_CONST, VOC_VALIDATION},
    {"enum", K_ENUM, VOC_VALIDATION},
    {"multipleOf", K_MULTIPLE_OF, VOC_VALIDATION},
    {"maximum", K_MAXIMUM, VOC_VALIDATION},
    {"exclusiveMaximum", K_EXCL_MAXIMUM, VOC_VALIDATION},
    {"minimum", K_MINIMUM, VOC_VALIDATION},
    {"exclusiveMinimum", K_EXCL_MINIMUM, VOC_VALIDATION},
    {"maxLength", K_MAX_LENGTH, VOC_VALIDATION},
    {"minLength", K_MIN_LENGTH, VOC_VALIDATION},
    {"pattern", K_PATTERN, VOC_VALIDATION},
    {"maxItems", K_MAX_ITEMS, VOC_VALIDATION},
    {"minItems", K_MIN_ITEMS, VOC_VALIDATION},
    {"uniqueItems", K_UNIQUE_ITEMS, VOC_VALIDATION},
    {"maxContains", K_MAX_CONTAINS, VOC_VALIDATION},
    {"minContains", K_MIN_CONTAINS, VOC_VALIDATION},
    {"maxProperties", K_MAX_PROPS, VOC_VALIDATION},
    {"minProperties", K_MIN_PROPS, VOC_VALIDATION},
    {"required", K_REQUIRED, VOC_VALIDATION},
    {"dependentRequired", K_DEP_REQUIRED, VOC_VALIDATION},
    {"allOf", K_ALL_OF, VOC_APPLICATOR},
    {"anyOf", K_ANY_OF, VOC_APPLICATOR},
    {"oneOf", K_ONE_OF, VOC_APPLICATOR},
    {"not", K_NOT, VOC_APPLICATOR},
    {"if", K_IF, VOC_APPLICATOR},
    {"then", K_THEN, VOC_APPLICATOR},
    {"else", K_ELSE, VOC_APPLICATOR},
    {"dependentSchemas", K_DEP_SCHEMAS, VOC_APPLICATOR},
    {"properties", K_PROPERTIES, VOC_APPLICATOR},
    {"patternProperties", K_PATTERN_PROPS, VOC_APPLICATOR},
    {"additionalProperties", K_ADDITIONAL, VOC_APPLICATOR},
    {"propertyNames", K_PROPERTY_NAMES, VOC_APPLICATOR},
    {"prefixItems", K_PREFIX_ITEMS, VOC_APPLICATOR},
    {"items", K_ITEMS, VOC_APPLICATOR},
    {"contains", K_CONTAINS, VOC_APPLICATOR},
    {"unevaluatedItems", K_UNEVAL_ITEMS, VOC_UNEVALUATED},
    {"unevaluatedProperties", K_UNEVAL_PROPS, VOC_UNEVALUATED},
};

static int subschema(struct compiler *c, const struct cnode *cn, const char *kw, const char *key,
                     json_t *v, const struct schema_node **out) {
  struct json_key jk = {v, cn->doc};
  const struct cnode *child = schema_map_get(&c->by_json, &jk, sizeof(jk));
  if (!child) {
    struct cnode at = {.parent = cn, .kw = kw, .key = key, .keylen = key ? strlen(key) : 0,
                       .idx = SIZE_MAX, .doc = cn->doc};
    return fail(c, TG_E_INVAL, &at, NULL, "must be a schema (an object or a boolean)");
  }
  *out = child->node;
  return TG_OK;
}

static int schema_list(struct compiler *c, const struct cnode *cn, const char *kw, json_t *v,
                       const struct schema_node ***out, size_t *n) {
  if (!json_is_array(v) || !json_array_size(v))
    return fail(c, TG_E_INVAL, cn, kw, "must be a non-empty array of schemas");
  *n = json_array_size(v);
  *out = schema_arena_alloc(c->s->arena, *n * sizeof(**out));
  if (!*out) return nomem(c);
  for (size_t i = 0; i < *n; i++) {
    struct json_key jk = {json_array_get(v, i), cn->doc};
    const struct cnode *child = schema_map_get(&c->by_json, &jk, sizeof(jk));
    if (!child) {
      struct cnode at = {.parent = cn, .kw = kw, .idx = i, .doc = cn->doc};
      return fail(c, TG_E_INVAL, &at, NULL, "must be a schema (an object or a boolean)");
    }
    (*out)[i] = child->node;
  }
  return TG_OK;
}

static int get_size(struct compiler *c, const struct cnode *cn, const char *kw, const json_t *v,
                    size_t *out) {
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    *out = (size_t)json_integer_value(v);
    return TG_OK;
  }
  double d = json_is_real(v) ? json_real_value(v) : -1;
  if (d < 0 || d != trunc(d))
    return fail(c, TG_E_INVAL, cn, kw, "must be a non-negative integer");
  *out = d >= 18446744073709551615.0 ? SIZE_MAX : (size_t)d;
  return TG_OK;
}

static int get_number(struct compiler *c, const struct cnode *cn, const char *kw, const json_t *v,
                      struct schema_num *out) {
  if (!schema_num_from_json(v, out)) return fail(c, TG_E_INVAL, cn, kw, "must be a number");
  return TG_OK;
}

static int get_strings(struct compiler *c, const struct cnode *cn, const char *kw,
                       const json_t *v, struct schema_str **out, size_t *n) {
  if (!json_is_array(v)) return fail(c, TG_E_INVAL, cn, kw, "must be an array of strings");
  *n = json_array_size(v);
  *out = schema_arena_alloc(c->s->arena, *n * sizeof(**out) + 1);
  if (!*out) return nomem(c);
  for (size_t i = 0; i < *n; i++) {
    const json_t *s = json_array_get(v, i);
    if (!json_is_string(s)) return fail(c, TG_E_INVAL, cn, kw, "must be an array of strings");
    (*out)[i] = (struct schema_str){json_string_value(s), json_string_length(s)};
  }
  return TG_OK;
}

static int compile_regex(struct compiler *c, const struct cnode *cn, const char *kw,
                         const char *key, const char *src, size_t len,
                         struct schema_pattern **out) {
  struct cnode at = {.parent = cn, .kw = kw, .key = key, .keylen = key ? len : 0,
                     .idx = SIZE_MAX, .doc = cn->doc};
  size_t tlen;
  char *translated = schema_regex_translate(src, len, &tlen);
  if (!translated) return nomem(c);
  int errcode;
  PCRE2_SIZE erroff;
  pcre2_code *code = pcre2_compile(
      (PCRE2_SPTR)translated, tlen,
      PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS, &errcode,
      &erroff, c->ccx);
  free(translated);
  if (!code) {
    if (errcode == PCRE2_ERROR_NOMEMORY) return nomem(c);
    PCRE2_UCHAR msg[160];
    if (pcre2_get_error_message(errcode, msg, sizeof(msg)) < 0) strcpy((char *)msg, "error");
    return fail(c, TG_E_INVAL, &at, NULL, "invalid regular expression: %s", (char *)msg);
  }
  /* Without JIT the interpreter runs the same pattern, only slower. */
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  struct schema_pattern *p = schema_arena_alloc(c->s->arena, sizeof(*p));
  if (!p) {
    pcre2_code_free(code);
    return nomem(c);
  }
  p->code = code;
  p->src = src;
  p->next = c->s->patterns;
  c->s->patterns = p;
  *out = p;
  return TG_OK;
}

static int compile_type(struct compiler *c, const struct cnode *cn, const json_t *v) {
  static const char *const names[] = {"null", "boolean", "object", "array",
                                      "number", "string", "integer"};
  size_t n = json_is_array(v) ? json_array_size(v) : 1;
  if (!n) return fail(c, TG_E_INVAL, cn, "type", "must not be an empty array");
  for (size_t i = 0; i < n; i++) {
    const json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
    size_t k = 0;
    while (json_is_string(t) && k < 7 && strcmp(json_string_value(t), names[k])) k++;
    if (!json_is_string(t) || k == 7)
      return fail(c, TG_E_INVAL, cn, "type", "must name JSON types (null, boolean, object, "
                                              "array, number, string, integer)");
    cn->node->types |= (uint8_t)(1u << k);
  }
  cn->node->kw |= SCHEMA_KW_TYPE;
  return TG_OK;
}

static int compile_properties(struct compiler *c, const struct cnode *cn, json_t *v) {
  struct schema_node *node = cn->node;
  if (!json_is_object(v)) return fail(c, TG_E_INVAL, cn, "properties", "must be an object");
  node->nprops = json_object_size(v);
  node->props = schema_arena_alloc(c->s->arena, node->nprops * sizeof(*node->props) + 1);
  if (!node->props) return nomem(c);
  size_t i = 0;
  for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it), i++) {
    struct schema_prop *p = &node->props[i];
    p->name = json_object_iter_key(it);
    p->len = json_object_iter_key_len(it);
    p->hash = schema_prop_hash(p->name, p->len);
    int rc = subschema(c, cn, "properties", p->name, json_object_iter_value(it), &p->node);
    if (rc < 0) return rc;
  }
  /* Few properties are found fastest by a scan; many get a hash index. */
  if (node->nprops <= 8) return TG_OK;
  size_t cap = 16;
  while (cap < node->nprops * 2) cap *= 2;
  node->prop_index = schema_arena_alloc(c->s->arena, cap * sizeof(*node->prop_index));
  if (!node->prop_index) return nomem(c);
  node->prop_mask = (uint32_t)(cap - 1);
  for (size_t k = 0; k < node->nprops; k++) {
    uint32_t slot = node->props[k].hash & node->prop_mask;
    while (node->prop_index[slot]) slot = (slot + 1) & node->prop_mask;
    node->prop_index[slot] = (uint32_t)k + 1;
  }
  return TG_OK;
}

static int compile_keyword(struct compiler *c, struct cnode *cn, const char *kw, enum kwid id,
                           json_t *v) {
  struct schema_node *node = cn->node;
  int rc = TG_OK;
  switch (id) {
    case K_REF:
    case K_DYNREF: {
      if (!json_is_string(v)) return fail(c, TG_E_INVAL, cn, kw, "must be a string");
      struct cnode *target;
      char *anchor;
      rc = resolve_ref(c, cn, kw, json_string_value(v), &target, &anchor);
      if (rc < 0) return rc;
      if (id == K_REF) {
        node->ref = target->node;
      } else {
        node->dynref = target->node;
        /* Only a target that itself carries the $dynamicAnchor starts a dynamic search. */
        if (anchor && target->dyn_anchor && !strcmp(anchor, target->dyn_anchor)) {
          node->dyn_bookended = true;
          rc = anchor_id(c, anchor, &node->dyn_id);
        }
      }
      free(anchor);
      return rc;
    }
    case K_TYPE:
      return compile_type(c, cn, v);
    case K_CONST:
      node->const_value = v;
      node->kw |= SCHEMA_KW_CONST;
      return TG_OK;
    case K_ENUM:
      if (!json_is_array(v)) return fail(c, TG_E_INVAL, cn, kw, "must be an array");
      node->enum_values = v;
      node->kw |= SCHEMA_KW_ENUM;
      return TG_OK;
    case K_MULTIPLE_OF:
      if ((rc = get_number(c, cn, kw, v, &node->multiple_of)) < 0) return rc;
      if (schema_num_double(&node->multiple_of) <= 0 ||
          !schema_decimal_from_num(&node->multiple_of, &node->multiple_dec))
        return fail(c, TG_E_INVAL, cn, kw, "must be greater than 0");
      node->kw |= SCHEMA_KW_MULTIPLE_OF;
      return TG_OK;
    case K_MAXIMUM:
      node->kw |= SCHEMA_KW_MAXIMUM;
      return get_number(c, cn, kw, v, &node->maximum);
    case K_EXCL_MAXIMUM:
      node->kw |= SCHEMA_KW_EXCL_MAXIMUM;
      return get_number(c, cn, kw, v, &node->excl_maximum);
    case K_MINIMUM:
      node->kw |= SCHEMA_KW_MINIMUM;
      return get_number(c, cn, kw, v, &node->minimum);
    case K_EXCL_MINIMUM:
      node->kw |= SCHEMA_KW_EXCL_MINIMUM;
      return get_number(c, cn, kw, v, &node->excl_minimum);
    case K_MAX_LENGTH:
      node->kw |= SCHEMA_KW_MAX_LENGTH;
      return get_size(c, cn, kw, v, &node->max_length);
    case K_MIN_LENGTH:
      node->kw |= SCHEMA_KW_MIN_LENGTH;
      return get_size(c, cn, kw, v, &node->min_length);
    case K_MAX_ITEMS:
      node->kw |= SCHEMA_KW_MAX_ITEMS;
      return get_size(c, cn, kw, v, &node->max_items);
    case K_MIN_ITEMS:
      node->kw |= SCHEMA_KW_MIN_ITEMS;
      return get_size(c, cn, kw, v, &node->min_items);
    case K_MAX_CONTAINS:
      node->kw |= SCHEMA_KW_MAX_CONTAINS;
      return get_size(c, cn, kw, v, &node->max_contains);
    case K_MIN_CONTAINS:
      node->kw |= SCHEMA_KW_MIN_CONTAINS;
      return get_size(c, cn, kw, v, &node->min_contains);
    case K_MAX_PROPS:
      node->kw |= SCHEMA_KW_MAX_PROPS;
      return get_size(c, cn, kw, v, &node->max_props);
    case K_MIN_PROPS:
      node->kw |= SCHEMA_KW_MIN_PROPS;
      return get_size(c, cn, kw, v, &node->min_props);
    case K_UNIQUE_ITEMS:
      if (!json_is_boolean(v)) return fail(c, TG_E_INVAL, cn, kw, "must be a boolean");
      if (json_is_true(v)) node->kw |= SCHEMA_KW_UNIQUE_ITEMS;
      return TG_OK;
    case K_PATTERN:
      if (!json_is_string(v)) return fail(c, TG_E_INVAL, cn, kw, "must be a string");
      return compile_regex(c, cn, kw, NULL, json_string_value(v), json_string_length(v),
                           &node->pattern);
    case K_REQUIRED:
      return get_strings(c, cn, kw, v, &node->required, &node->nrequired);
    case K_DEP_REQUIRED: {
      if (!json_is_object(v)) return fail(c, TG_E_INVAL, cn, kw, "must be an object");
      node->ndep_required = json_object_size(v);
      node->dep_required = schema_arena_alloc(c->s->arena, node->ndep_required *
                                                               sizeof(*node->dep_required) + 1);
      if (!node->dep_required) return nomem(c);
      size_t i = 0;
      for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it), i++) {
        struct schema_depreq *d = &node->dep_required[i];
        d->name = (struct schema_str){json_object_iter_key(it), json_object_iter_key_len(it)};
        if ((rc = get_strings(c, cn, kw, json_object_iter_value(it), &d->names, &d->n)) < 0)
          return rc;
      }
      return TG_OK;
    }
    case K_ALL_OF:
      return schema_list(c, cn, kw, v, &node->all_of, &node->nall_of);
    case K_ANY_OF:
      return schema_list(c, cn, kw, v, &node->any_of, &node->nany_of);
    case K_ONE_OF:
      return schema_list(c, cn, kw, v, &node->one_of, &node->none_of);
    case K_PREFIX_ITEMS:
      return schema_list(c, cn, kw, v, &node->prefix_items, &node->nprefix_items);
    case K_NOT:
      return subschema(c, cn, kw, NULL, v, &node->not_);
    case K_IF:
      return subschema(c, cn, kw, NULL, v, &node->if_);
    case K_THEN:
      return subschema(c, cn, kw, NULL, v, &node->then_);
    case K_ELSE:
      return subschema(c, cn, kw, NULL, v, &node->else_);
    case K_ADDITIONAL:
      return subschema(c, cn, kw, NULL, v, &node->additional);
    case K_PROPERTY_NAMES:
      return subschema(c, cn, kw, NULL, v, &node->property_names);
    case K_ITEMS:
      return subschema(c, cn, kw, NULL, v, &node->items);
    case K_CONTAINS:
      return subschema(c, cn, kw, NULL, v, &node->contains);
    case K_UNEVAL_ITEMS:
      return subschema(c, cn, kw, NULL, v, &node->uneval_items);
    case K_UNEVAL_PROPS:
      return subschema(c, cn, kw, NULL, v, &node->uneval_props);
    case K_PROPERTIES:
      return compile_properties(c, cn, v);
    case K_DEP_SCHEMAS: {
      if (!json_is_object(v)) return fail(c, TG_E_INVAL, cn, kw, "must be an object");
      node->ndep_schemas = json_object_size(v);
      node->dep_schemas = schema_arena_alloc(c->s->arena, node->ndep_schemas *
                                                              sizeof(*node->dep_schemas) + 1);
      if (!node->dep_schemas) return nomem(c);
      size_t i = 0;
      for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it), i++) {
        struct schema_depschema *d = &node->dep_schemas[i];
        d->name = (struct schema_str){json_object_iter_key(it), json_object_iter_key_len(it)};
        if ((rc = subschema(c, cn, kw, d->name.s, json_object_iter_value(it), &d->node)) < 0)
          return rc;
      }
      return TG_OK;
    }
    case K_PATTERN_PROPS: {
      if (!json_is_object(v)) return fail(c, TG_E_INVAL, cn, kw, "must be an object");
      node->npatprops = json_object_size(v);
      node->patprops =
          schema_arena_alloc(c->s->arena, node->npatprops * sizeof(*node->patprops) + 1);
      if (!node->patprops) return nomem(c);
      size_t i = 0;
      for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it), i++) {
        struct schema_patprop *p = &node->patprops[i];
        const char *key = json_object_iter_key(it);
        if ((rc = compile_regex(c, cn, kw, key, key, json_object_iter_key_len(it), &p->re)) < 0 ||
            (rc = subschema(c, cn, kw, key, json_object_iter_value(it), &p->node)) < 0)
          return rc;
      }
      return TG_OK;
    }
  }
  return TG_OK;
}

static int compile_node(struct compiler *c, struct cnode *cn) {
  if (cn->node->is_bool) return TG_OK;
  for (void *it = json_object_iter(cn->json); it; it = json_object_iter_next(cn->json, it)) {
    const char *key = json_object_iter_key(it);
    for (size_t k = 0; k < sizeof(keywords) / sizeof(*keywords); k++) {
      if (strcmp(key, keywords[k].name)) continue;
      if (cn->res->vocab & keywords[k].vocab) {
        int rc = compile_keyword(c, cn, keywords[k].name, keywords[k].id,
                                 json_object_iter_value(it));
        if (rc < 0) return rc;
      }
      break;
    }
  }
  return TG_OK;
}

/* Copies each resource's $dynamicAnchors into the compiled form. */
static int finish_resources(struct compiler *c) {
  for (struct cres *r = c->resources; r; r = r->next) {
    if (!r->ndyn) continue;
    struct schema_dynanchor *dyn = schema_arena_alloc(c->s->arena, r->ndyn * sizeof(*dyn));
    if (!dyn) return nomem(c);
    size_t i = 0;
    for (const struct dynlink *l = r->dyn; l; l = l->next, i++)
      dyn[i] = (struct schema_dynanchor){l->id, l->node->node};
    r->rt->dyn = dyn;
    r->rt->ndyn = r->ndyn;
  }
  return TG_OK;
}

static int compile_all(struct compiler *c, json_t *schema) {
  c->ccx = pcre2_compile_context_create(NULL);
  c->s->match_ctx = pcre2_match_context_create(NULL);
  if (!c->ccx || !c->s->match_ctx) return nomem(c);
  /* Bounds on what one pattern may cost, at compile time and on every match. */
  pcre2_set_compile_extra_options(c->ccx, PCRE2_EXTRA_ALT_BSUX);
  pcre2_set_max_pattern_length(c->ccx, 65536);
  pcre2_set_match_limit(c->s->match_ctx, 1000000);
  pcre2_set_depth_limit(c->s->match_ctx, 10000);
  pcre2_set_heap_limit(c->s->match_ctx, 16384);

  struct cnode *root;
  int rc = load_document(c, DEFAULT_BASE, schema, true, &root);
  if (rc < 0) return rc;
  c->s->root = root->node;
  /* Compiling may load more documents, which appends to the node list. */
  for (size_t i = 0; i < c->nnodes; i++)
    if ((rc = compile_node(c, c->nodes[i])) < 0) return rc;
  return finish_resources(c);
}

struct tg_schema_store {
  struct schema_arena nodes;
};

int tg_schema_compile(json_t *schema, const tg_schema_options *opts, tg_schema **ret,
                      char **reterr) {
  *ret = NULL;
  if (reterr) *reterr = NULL;
  json_t *documents = opts ? opts->documents : NULL;
  if (!schema || (documents && !json_is_object(documents))) {
    if (reterr) *reterr = strdup(schema ? "documents must be a JSON object" : "no schema given");
    return TG_E_INVAL;
  }
  tg_schema *s = calloc(1, sizeof(*s));
  if (!s) return TG_E_NOMEM;
  s->arena = opts && opts->store ? &opts->store->nodes : &s->own;
  struct compiler c = {.s = s, .documents = documents};
  c.by_uri.keys = c.by_json.keys = c.anchor_ids.keys = &c.tmp;
  int rc = compile_all(&c, schema);
  schema_map_free(&c.by_uri);
  schema_map_free(&c.by_json);
  schema_map_free(&c.anchor_ids);
  free(c.nodes);
  pcre2_compile_context_free(c.ccx);
  schema_arena_free(&c.tmp);
  if (rc < 0) {
    tg_schema_free(s);
    if (reterr)
      *reterr = c.err;
    else
      free(c.err);
    return rc;
  }
  *ret = s;
  return TG_OK;
}

void tg_schema_free(tg_schema *schema) {
  if (!schema) return;
  for (struct schema_pattern *p = schema->patterns; p; p = p->next) pcre2_code_free(p->code);
  pcre2_match_context_free(schema->match_ctx);
  for (size_t i = 0; i < schema->ndocs; i++) json_decref(schema->docs[i]);
  free(schema->docs);
  schema_arena_free(&schema->own);
  free(schema);
}

tg_schema_store *tg_schema_store_new(void) { return calloc(1, sizeof(tg_schema_store)); }

void tg_schema_store_free(tg_schema_store *store) {
  if (!store) return;
  schema_arena_free(&store->nodes);
  free(store);
}

/* Validation of an instance against a compiled schema.
 *
 * Error locations: "instancePath" points into the instance; "schemaPath" is the keyword
 * location, the path by which evaluation reached the failing keyword from the root schema,
 * with "$ref" and "$dynamicRef" as path steps (e.g. /properties/a/$ref/type). It is not the
 * absolute location of the keyword in the document a reference led to.
 *
 * Annotations: unevaluatedProperties and unevaluatedItems need to know which members the
 * other keywords evaluated. A node that has either keyword gives its in-place subschemas a
 * bit set over the instance's members (object keys in iteration order, or array indices);
 * callers that need no annotations pass NULL and pay nothing. Annotations of a failed
 * subschema are dropped: anyOf, oneOf and if collect into scratch sets and merge on success,
 * and a failed node makes its parent fail, so what it left in a shared set does not matter.
 *
 * Subschemas whose failure is not itself an error (anyOf and oneOf branches, not, if,
 * contains, propertyNames) are evaluated quietly: they report nothing and stop at their first
 * failure. Running out of memory, of evaluation depth or of regex matching budget aborts the
 * whole validation with a failure, so that no quiet subschema can turn it into a success. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schema_internal.h"
#include "util/json.h"

/* A step of a JSON pointer: /kw (schema paths), then /key or /idx. */
struct seg {
  const struct seg *up;
  const char *kw;
  const char *key;
  size_t len, idx;
};

#define NO_INDEX SIZE_MAX

struct bits {
  uint64_t *w;
  size_t n;
  uint64_t small[2];
};

struct vctx {
  const tg_schema *s;
  json_t *out;  /* the caller's error array, NULL when it wants none */
  json_t *errs; /* where errors go now: out, or NULL while quiet */
  size_t max, nerr;
  size_t steps;
  unsigned depth, nscope;
  bool aborted;
  pcre2_match_data *md;
  const struct schema_resource *scope[SCHEMA_MAX_EVAL_DEPTH + 1];
};

static bool eval(struct vctx *c, const struct schema_node *n, json_t *inst, const struct seg *ip,
                 const struct seg *sp, struct bits *ev);

static void add_path(struct schema_buf *b, const struct seg *s) {
  if (!s) return;
  add_path(b, s->up);
  if (s->kw) schema_buf_add_token(b, s->kw, strlen(s->kw));
  if (s->key)
    schema_buf_add_token(b, s->key, s->len);
  else if (s->idx != NO_INDEX)
    schema_buf_add_index(b, s->idx);
}

static json_t *path_string(const struct seg *s, const char *kw) {
  struct schema_buf b = {0};
  add_path(&b, s);
  if (kw) schema_buf_add_token(&b, kw, strlen(kw));
  size_t len = b.len;
  char *p = schema_buf_take(&b);
  if (!p) return NULL;
  json_t *j = json_stringn(p, len); /* keys may hold NUL bytes */
  free(p);
  return j;
}

static bool append_error(struct vctx *c, const struct seg *ip, const struct seg *sp,
                         const char *kw, const char *path_kw, const char *msg) {
  json_t *e = json_object();
  if (!e) return false;
  /* json_object_set_new takes the value even when it fails. */
  if (json_object_set_new(e, "instancePath", path_string(ip, NULL)) ||
      json_object_set_new(e, "schemaPath", path_string(sp, path_kw)) ||
      json_object_set_new(e, "keyword", json_string(kw)) ||
      json_object_set_new(e, "message", json_string(msg) ?: json_string("value is invalid"))) {
    json_decref(e);
    return false;
  }
  if (json_array_append_new(c->out, e)) return false;
  c->nerr++;
  return true;
}

/* Ends the validation with a failure that quiet evaluation cannot hide. With kw NULL the
 * failure is located at sp itself, and blamed on the keyword that led there. */
static void abort_eval(struct vctx *c, const struct seg *ip, const struct seg *sp, const char *kw,
                       const char *msg) {
  if (c->aborted) return;
  c->aborted = true;
  const char *blamed = kw ? kw : sp && sp->kw ? sp->kw : "";
  if (c->out && c->nerr < c->max) append_error(c, ip, sp, blamed, kw, msg);
}

/* Reports a failure of keyword kw; its location is sp + "/" + path_kw, or sp alone when
 * path_kw is NULL (a false subschema, whose failure belongs to the keyword applying it). */
static void vreport(struct vctx *c, const struct seg *ip, const struct seg *sp, const char *kw,
                    const char *path_kw, const char *fmt, va_list ap) {
  if (!c->errs || c->nerr >= c->max || c->aborted) return;
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  if (!append_error(c, ip, sp, kw, path_kw, msg)) abort_eval(c, ip, sp, kw, "out of memory");
}

static void __attribute__((format(printf, 5, 6)))
report(struct vctx *c, const struct seg *ip, const struct seg *sp, const char *kw,
       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(c, ip, sp, kw, kw, fmt, ap);
  va_end(ap);
}

static void __attribute__((format(printf, 5, 6)))
report_here(struct vctx *c, const struct seg *ip, const struct seg *sp, const char *kw,
            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(c, ip, sp, kw, NULL, fmt, ap);
  va_end(ap);
}

static bool stop(const struct vctx *c) {
  return c->aborted || !c->errs || c->nerr >= c->max;
}

/* Records a failed check; returns early unless errors are being collected. */
#define CHECK(expr)                  \
  do {                               \
    if (!(expr)) {                   \
      ok = false;                    \
      if (stop(c)) return false;     \
    }                                \
  } while (0)

/* Quotes s for a message: at most a few dozen bytes, cut on a character boundary, with
 * control characters and broken UTF-8 replaced. */
static const char *quote(char *buf, size_t size, const char *s, size_t len) {
  size_t o = 0, limit = size - 6;
  buf[o++] = '"';
  for (size_t i = 0; i < len;) {
    unsigned char ch = (unsigned char)s[i];
    size_t n = tg_utf8_char(s + i, len - i);
    bool valid = n != 0;
    if (!valid) n = 1;
    if (o + n > limit) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (!valid || ch < 0x20 || ch == 0x7f)
      buf[o++] = '?';
    else {
      memcpy(buf + o, s + i, n);
      o += n;
    }
    i += n;
  }
  buf[o++] = '"';
  buf[o] = 0;
  return buf;
}

static bool bits_init(struct vctx *c, struct bits *b, size_t n, const struct seg *ip,
                      const struct seg *sp) {
  size_t words = (n + 63) / 64;
  b->n = n;
  b->small[0] = b->small[1] = 0;
  if (words <= 2) {
    b->w = b->small;
    return true;
  }
  b->w = calloc(words, sizeof(*b->w));
  if (!b->w) abort_eval(c, ip, sp, NULL, "out of memory");
  return b->w != NULL;
}

static void bits_free(struct bits *b) {
  if (b->w != b->small) free(b->w);
}

static void bits_set(struct bits *b, size_t i) { b->w[i / 64] |= 1ull << (i % 64); }
static bool bits_test(const struct bits *b, size_t i) { return b->w[i / 64] >> (i % 64) & 1; }

static void bits_or(struct bits *dst, const struct bits *src) {
  for (size_t i = 0; i < (dst->n + 63) / 64; i++) dst->w[i] |= src->w[i];
}

static void bits_set_all(struct bits *b) {
  for (size_t i = 0; i < b->n; i++) bits_set(b, i);
}

static bool type_matches(uint8_t types, const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      return types & SCHEMA_T_OBJECT;
    case JSON_ARRAY:
      return types & SCHEMA_T_ARRAY;
    case JSON_STRING:
      return types & SCHEMA_T_STRING;
    case JSON_INTEGER:
      return types & (SCHEMA_T_NUMBER | SCHEMA_T_INTEGER);
    case JSON_REAL:
      if (types & SCHEMA_T_NUMBER) return true;
      return (types & SCHEMA_T_INTEGER) && json_real_value(v) == trunc(json_real_value(v));
    case JSON_TRUE:
    case JSON_FALSE:
      return types & SCHEMA_T_BOOLEAN;
    case JSON_NULL:
      return types & SCHEMA_T_NULL;
  }
  return false;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      return "object";
    case JSON_ARRAY:
      return "array";
    case JSON_STRING:
      return "string";
    case JSON_INTEGER:
      return "integer";
    case JSON_REAL:
      return "number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "boolean";
    case JSON_NULL:
      return "null";
  }
  return "value";
}

static void report_type(struct vctx *c, const struct schema_node *n, const json_t *inst,
                        const struct seg *ip, const struct seg *sp) {
  static const char *const names[] = {"null", "boolean", "object", "array",
                                      "number", "string", "integer"};
  char expected[128] = "";
  size_t o = 0;
  for (int k = 0; k < 7; k++)
    if (n->types & (1u << k))
      o += (size_t)snprintf(expected + o, sizeof(expected) - o, "%s%s", o ? " or " : "", names[k]);
  report(c, ip, sp, "type", "expected %s, got %s", expected, type_name(inst));
}

static void report_false(struct vctx *c, const struct seg *ip, const struct seg *sp) {
  const char *kw = sp && sp->kw ? sp->kw : "false";
  char q[80];
  /* The keywords applying subschemas to object members all end in "properties" or
   * "Properties", those applying them to array items in "items" or "Items". */
  if (ip && ip->key && strstr(kw, "roperties"))
    report_here(c, ip, sp, kw, "property %s is not allowed", quote(q, sizeof(q), ip->key, ip->len));
  else if (ip && !ip->key && strstr(kw, "tems"))
    report_here(c, ip, sp, kw, "item %zu is not allowed", ip->idx);
  else
    report_here(c, ip, sp, kw, "no value is allowed here");
}

static int regex_match(struct vctx *c, const struct schema_pattern *p, const char *s, size_t len,
                       const struct seg *ip, const struct seg *sp, const char *kw) {
  if (!c->md && !(c->md = pcre2_match_data_create(1, NULL))) {
    abort_eval(c, ip, sp, kw, "out of memory");
    return -1;
  }
  int rc = pcre2_match(p->code, (PCRE2_SPTR)s, len, 0, 0, c->md, c->s->match_ctx);
  if (rc >= 0) return 1;
  /* A string that is not UTF-8 can only come from a caller bypassing jansson's checks. */
  if (rc == PCRE2_ERROR_NOMATCH || (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21))
    return 0;
  abort_eval(c, ip, sp, kw,
             rc == PCRE2_ERROR_NOMEMORY ? "out of memory"
                                        : "regular expression too costly to evaluate");
  return -1;
}

static bool is_multiple(const struct schema_num *x, const struct schema_node *n) {
  if (x->is_int && n->multiple_of.is_int) return x->i % n->multiple_of.i == 0;
  /* Exact decimal arithmetic on the shortest decimal forms, so 0.0075 is a multiple of
   * 0.0001 although the binary doubles are not. */
  struct schema_decimal xd;
  if (!schema_decimal_from_num(x, &xd)) return false;
  if (!xd.mant) return true;
  unsigned __int128 m = n->multiple_dec.mant;
  int e = xd.exp - n->multiple_dec.exp;
  if (e >= 0) {
    unsigned __int128 r = xd.mant % m, b = 10 % m;
    for (; e; e >>= 1) {
      if (e & 1) r = r * b % m;
      b = b * b % m;
    }
    return r == 0;
  }
  if (-e >= 20) return false; /* the divisor exceeds any 64-bit mantissa */
  for (; e < 0; e++) m *= 10;
  return xd.mant % m == 0;
}

static bool check_number(struct vctx *c, const struct schema_node *n, const json_t *inst,
                         const struct seg *ip, const struct seg *sp) {
  struct schema_num x;
  schema_num_from_json(inst, &x);
  char lim[40];
  bool ok = true;
  if ((n->kw & SCHEMA_KW_MAXIMUM) && schema_num_cmp(&x, &n->maximum) > 0) {
    schema_num_format(&n->maximum, lim, sizeof(lim));
    report(c, ip, sp, "maximum", "must be <= %s", lim);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_EXCL_MAXIMUM) && schema_num_cmp(&x, &n->excl_maximum) >= 0) {
    schema_num_format(&n->excl_maximum, lim, sizeof(lim));
    report(c, ip, sp, "exclusiveMaximum", "must be < %s", lim);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_MINIMUM) && schema_num_cmp(&x, &n->minimum) < 0) {
    schema_num_format(&n->minimum, lim, sizeof(lim));
    report(c, ip, sp, "minimum", "must be >= %s", lim);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_EXCL_MINIMUM) && schema_num_cmp(&x, &n->excl_minimum) <= 0) {
    schema_num_format(&n->excl_minimum, lim, sizeof(lim));
    report(c, ip, sp, "exclusiveMinimum", "must be > %s", lim);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_MULTIPLE_OF) && !is_multiple(&x, n)) {
    schema_num_format(&n->multiple_of, lim, sizeof(lim));
    report(c, ip, sp, "multipleOf", "must be a multiple of %s", lim);
    ok = false;
  }
  return ok;
}

static size_t utf8_length(const char *s, size_t n) {
  size_t cp = 0;
  for (size_t i = 0; i < n; i++) cp += ((unsigned char)s[i] & 0xc0) != 0x80;
  return cp;
}

static bool check_string(struct vctx *c, const struct schema_node *n, const json_t *inst,
                         const struct seg *ip, const struct seg *sp) {
  const char *s = json_string_value(inst);
  size_t bytes = json_string_length(inst);
  bool ok = true;
  /* A string has at most as many characters as bytes: count only when that is not enough. */
  if ((n->kw & SCHEMA_KW_MAX_LENGTH) && bytes > n->max_length) {
    size_t len = utf8_length(s, bytes);
    if (len > n->max_length) {
      report(c, ip, sp, "maxLength", "must be at most %zu characters long (is %zu)",
             n->max_length, len);
      CHECK(false);
    }
  }
  if (n->kw & SCHEMA_KW_MIN_LENGTH) {
    size_t len = bytes < n->min_length ? bytes : utf8_length(s, bytes);
    if (len < n->min_length) {
      report(c, ip, sp, "minLength", "must be at least %zu characters long (is %zu)",
             n->min_length, utf8_length(s, bytes));
      CHECK(false);
    }
  }
  if (n->pattern) {
    int m = regex_match(c, n->pattern, s, bytes, ip, sp, "pattern");
    if (m < 0) return false;
    if (!m) {
      char q[80];
      report(c, ip, sp, "pattern", "does not match the pattern %s",
             quote(q, sizeof(q), n->pattern->src, strlen(n->pattern->src)));
      ok = false;
    }
  }
  return ok;
}

struct hashed_item {
  uint64_t hash;
  size_t index;
};

static int cmp_hashed(const void *a, const void *b) {
  const struct hashed_item *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

/* Finds two equal items; sorting by hash keeps large arrays away from quadratic time. */
static bool find_duplicate(struct vctx *c, const json_t *a, size_t *first, size_t *second,
                           const struct seg *ip, const struct seg *sp) {
  size_t n = json_array_size(a);
  if (n <= 16) {
    for (size_t i = 0; i < n; i++)
      for (size_t j = i + 1; j < n; j++)
        if (schema_json_equal(json_array_get(a, i), json_array_get(a, j))) {
          *first = i, *second = j;
          return true;
        }
    return false;
  }
  struct hashed_item *h = malloc(n * sizeof(*h));
  if (!h) {
    abort_eval(c, ip, sp, "uniqueItems", "out of memory");
    return false;
  }
  for (size_t i = 0; i < n; i++)
    h[i] = (struct hashed_item){schema_json_hash(json_array_get(a, i)), i};
  qsort(h, n, sizeof(*h), cmp_hashed);
  bool found = false;
  for (size_t i = 0; i < n && !found; i++)
    for (size_t j = i + 1; j < n && h[j].hash == h[i].hash && !found; j++)
      if (schema_json_equal(json_array_get(a, h[i].index), json_array_get(a, h[j].index))) {
        *first = h[i].index, *second = h[j].index;
        found = true;
      }
  free(h);
  return found;
}

static bool check_array(struct vctx *c, const struct schema_node *n, const json_t *inst,
                        const struct seg *ip, const struct seg *sp) {
  size_t size = json_array_size(inst);
  bool ok = true;
  if ((n->kw & SCHEMA_KW_MAX_ITEMS) && size > n->max_items) {
    report(c, ip, sp, "maxItems", "must have at most %zu items (has %zu)", n->max_items, size);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_MIN_ITEMS) && size < n->min_items) {
    report(c, ip, sp, "minItems", "must have at least %zu items (has %zu)", n->min_items, size);
    CHECK(false);
  }
  size_t i = 0, j = 0;
  if ((n->kw & SCHEMA_KW_UNIQUE_ITEMS) && find_duplicate(c, inst, &i, &j, ip, sp)) {
    report(c, ip, sp, "uniqueItems", "items %zu and %zu are equal", i, j);
    ok = false;
  }
  return ok && !c->aborted;
}

static bool check_object(struct vctx *c, const struct schema_node *n, const json_t *inst,
                         const struct seg *ip, const struct seg *sp) {
  size_t size = json_object_size(inst);
  bool ok = true;
  char q[80], q2[80];
  if ((n->kw & SCHEMA_KW_MAX_PROPS) && size > n->max_props) {
    report(c, ip, sp, "maxProperties", "must have at most %zu properties (has %zu)",
           n->max_props, size);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_MIN_PROPS) && size < n->min_props) {
    report(c, ip, sp, "minProperties", "must have at least %zu properties (has %zu)",
           n->min_props, size);
    CHECK(false);
  }
  for (size_t i = 0; i < n->nrequired; i++) {
    const struct schema_str *r = &n->required[i];
    if (json_object_getn(inst, r->s, r->len)) continue;
    report(c, ip, sp, "required", "missing required property %s",
           quote(q, sizeof(q), r->s, r->len));
    CHECK(false);
  }
  for (size_t i = 0; i < n->ndep_required; i++) {
    const struct schema_depreq *d = &n->dep_required[i];
    if (!json_object_getn(inst, d->name.s, d->name.len)) continue;
    for (size_t k = 0; k < d->n; k++) {
      if (json_object_getn(inst, d->names[k].s, d->names[k].len)) continue;
      report(c, ip, sp, "dependentRequired", "property %s is required when %s is present",
             quote(q, sizeof(q), d->names[k].s, d->names[k].len),
             quote(q2, sizeof(q2), d->name.s, d->name.len));
      CHECK(false);
    }
  }
  return ok;
}

static const struct schema_prop *find_prop(const struct schema_node *n, const char *key,
                                           size_t len) {
  if (!n->prop_index) {
    for (size_t i = 0; i < n->nprops; i++) {
      const struct schema_prop *p = &n->props[i];
      if (p->len == len && !memcmp(p->name, key, len)) return p;
    }
    return NULL;
  }
  uint32_t h = schema_prop_hash(key, len);
  for (uint32_t slot = h & n->prop_mask, k; (k = n->prop_index[slot]);
       slot = (slot + 1) & n->prop_mask) {
    const struct schema_prop *p = &n->props[k - 1];
    if (p->hash == h && p->len == len && !memcmp(p->name, key, len)) return p;
  }
  return NULL;
}

/* properties, patternProperties and additionalProperties: one pass over the members. */
static bool apply_properties(struct vctx *c, const struct schema_node *n, json_t *inst,
                             const struct seg *ip, const struct seg *sp, struct bits *ev) {
  bool ok = true;
  size_t i = 0;
  for (void *it = json_object_iter(inst); it; it = json_object_iter_next(inst, it), i++) {
    const char *key = json_object_iter_key(it);
    size_t len = json_object_iter_key_len(it);
    json_t *value = json_object_iter_value(it);
    struct seg child = {.up = ip, .key = key, .len = len};
    bool matched = false;
    const struct schema_prop *p = n->nprops ? find_prop(n, key, len) : NULL;
    if (p) {
      matched = true;
      struct seg at = {.up = sp, .kw = "properties", .key = p->name, .len = p->len};
      CHECK(eval(c, p->node, value, &child, &at, NULL));
    }
    for (size_t k = 0; k < n->npatprops; k++) {
      const struct schema_patprop *pp = &n->patprops[k];
      struct seg at = {.up = sp, .kw = "patternProperties", .key = pp->re->src,
                       .len = strlen(pp->re->src)};
      int m = regex_match(c, pp->re, key, len, &child, &at, "patternProperties");
      if (m < 0) return false;
      if (!m) continue;
      matched = true;
      CHECK(eval(c, pp->node, value, &child, &at, NULL));
    }
    if (!matched && n->additional) {
      matched = true;
      struct seg at = {.up = sp, .kw = "additionalProperties", .idx = NO_INDEX};
      CHECK(eval(c, n->additional, value, &child, &at, NULL));
    }
    if (matched && ev) bits_set(ev, i);
  }
  return ok;
}

static bool apply_property_names(struct vctx *c, const struct schema_node *n, json_t *inst,
                                 const struct seg *ip, const struct seg *sp) {
  bool ok = true;
  struct seg at = {.up = sp, .kw = "propertyNames", .idx = NO_INDEX};
  for (void *it = json_object_iter(inst); it; it = json_object_iter_next(inst, it)) {
    const char *key = json_object_iter_key(it);
    size_t len = json_object_iter_key_len(it);
    json_t *name = json_stringn_nocheck(key, len);
    if (!name) {
      abort_eval(c, ip, &at, "propertyNames", "out of memory");
      return false;
    }
    json_t *saved = c->errs;
    c->errs = NULL;
    bool valid = eval(c, n->property_names, name, ip, &at, NULL);
    c->errs = saved;
    json_decref(name);
    char q[80];
    if (!valid) report(c, ip, sp, "propertyNames", "property name %s is not allowed",
                       quote(q, sizeof(q), key, len));
    CHECK(valid);
  }
  return ok;
}

static bool apply_contains(struct vctx *c, const struct schema_node *n, json_t *inst,
                           const struct seg *ip, const struct seg *sp, struct bits *ev) {
  size_t size = json_array_size(inst), matches = 0;
  bool has_min = n->kw & SCHEMA_KW_MIN_CONTAINS, has_max = n->kw & SCHEMA_KW_MAX_CONTAINS;
  size_t min = has_min ? n->min_contains : 1;
  struct seg at = {.up = sp, .kw = "contains", .idx = NO_INDEX};
  json_t *saved = c->errs;
  c->errs = NULL;
  for (size_t i = 0; i < size && !c->aborted; i++) {
    struct seg child = {.up = ip, .idx = i};
    if (eval(c, n->contains, json_array_get(inst, i), &child, &at, NULL)) {
      matches++;
      if (ev) bits_set(ev, i);
    }
    if (!ev && !has_max && matches >= min) break;
  }
  c->errs = saved;
  if (c->aborted) return false;
  if (matches < min) {
    if (has_min)
      report(c, ip, sp, "minContains", "must contain at least %zu matching items (has %zu)", min,
             matches);
    else
      report(c, ip, sp, "contains", "must contain an item matching the \"contains\" schema");
    return false;
  }
  if (has_max && matches > n->max_contains) {
    report(c, ip, sp, "maxContains", "must contain at most %zu matching items (has %zu)",
           n->max_contains, matches);
    return false;
  }
  return true;
}

static bool apply_items(struct vctx *c, const struct schema_node *n, json_t *inst,
                        const struct seg *ip, const struct seg *sp, struct bits *ev) {
  bool ok = true;
  size_t size = json_array_size(inst);
  size_t prefix = n->nprefix_items < size ? n->nprefix_items : size;
  for (size_t i = 0; i < prefix; i++) {
    struct seg child = {.up = ip, .idx = i};
    struct seg at = {.up = sp, .kw = "prefixItems", .idx = i};
    CHECK(eval(c, n->prefix_items[i], json_array_get(inst, i), &child, &at, NULL));
    if (ev) bits_set(ev, i);
  }
  if (n->items) {
    struct seg at = {.up = sp, .kw = "items", .idx = NO_INDEX};
    for (size_t i = prefix; i < size; i++) {
      struct seg child = {.up = ip, .idx = i};
      CHECK(eval(c, n->items, json_array_get(inst, i), &child, &at, NULL));
      if (ev) bits_set(ev, i);
    }
  }
  if (n->contains) CHECK(apply_contains(c, n, inst, ip, sp, ev));
  return ok;
}

static bool apply_unevaluated(struct vctx *c, const struct schema_node *n, json_t *inst,
                              const struct seg *ip, const struct seg *sp, const struct bits *ev) {
  bool ok = true;
  if (json_is_object(inst)) {
    struct seg at = {.up = sp, .kw = "unevaluatedProperties", .idx = NO_INDEX};
    size_t i = 0;
    for (void *it = json_object_iter(inst); it; it = json_object_iter_next(inst, it), i++) {
      if (bits_test(ev, i)) continue;
      struct seg child = {.up = ip, .key = json_object_iter_key(it),
                          .len = json_object_iter_key_len(it)};
      CHECK(eval(c, n->uneval_props, json_object_iter_value(it), &child, &at, NULL));
    }
    return ok;
  }
  struct seg at = {.up = sp, .kw = "unevaluatedItems", .idx = NO_INDEX};
  for (size_t i = 0; i < json_array_size(inst); i++) {
    if (bits_test(ev, i)) continue;
    struct seg child = {.up = ip, .idx = i};
    CHECK(eval(c, n->uneval_items, json_array_get(inst, i), &child, &at, NULL));
  }
  return ok;
}

/* The schema a $dynamicRef evaluates: the outermost resource of the dynamic scope that has the
 * anchor, when the statically resolved target has it too. */
static const struct schema_node *dynamic_target(const struct vctx *c, const struct schema_node *n) {
  if (!n->dyn_bookended) return n->dynref;
  for (unsigned i = 0; i < c->nscope; i++) {
    const struct schema_resource *r = c->scope[i];
    for (size_t k = 0; k < r->ndyn; k++)
      if (r->dyn[k].id == n->dyn_id) return r->dyn[k].node;
  }
  return n->dynref;
}

static size_t member_count(const json_t *inst) {
  return json_is_object(inst) ? json_object_size(inst) : json_array_size(inst);
}

/* Evaluates branch quietly, merging its annotations into ev when it passes. */
static bool try_branch(struct vctx *c, const struct schema_node *branch, json_t *inst,
                       const struct seg *ip, const struct seg *at, struct bits *ev) {
  json_t *saved = c->errs;
  c->errs = NULL;
  bool valid;
  if (ev) {
    struct bits tmp;
    if (!bits_init(c, &tmp, ev->n, ip, at)) {
      c->errs = saved;
      return false;
    }
    valid = eval(c, branch, inst, ip, at, &tmp);
    if (valid) bits_or(ev, &tmp);
    bits_free(&tmp);
  } else {
    valid = eval(c, branch, inst, ip, at, NULL);
  }
  c->errs = saved;
  return valid;
}

static bool apply_in_place(struct vctx *c, const struct schema_node *n, json_t *inst,
                           const struct seg *ip, const struct seg *sp, struct bits *ev) {
  bool ok = true;
  if (n->ref) {
    struct seg at = {.up = sp, .kw = "$ref", .idx = NO_INDEX};
    CHECK(eval(c, n->ref, inst, ip, &at, ev));
  }
  if (n->dynref) {
    struct seg at = {.up = sp, .kw = "$dynamicRef", .idx = NO_INDEX};
    CHECK(eval(c, dynamic_target(c, n), inst, ip, &at, ev));
  }
  for (size_t i = 0; i < n->nall_of; i++) {
    struct seg at = {.up = sp, .kw = "allOf", .idx = i};
    CHECK(eval(c, n->all_of[i], inst, ip, &at, ev));
  }
  if (n->nany_of) {
    bool any = false;
    for (size_t i = 0; i < n->nany_of && !c->aborted && !(any && !ev); i++) {
      struct seg at = {.up = sp, .kw = "anyOf", .idx = i};
      any |= try_branch(c, n->any_of[i], inst, ip, &at, ev);
    }
    if (!any) report(c, ip, sp, "anyOf", "does not match any of the %zu alternatives", n->nany_of);
    CHECK(any && !c->aborted);
  }
  if (n->none_of) {
    size_t matches = 0, first = 0, second = 0;
    for (size_t i = 0; i < n->none_of && matches < 2 && !c->aborted; i++) {
      struct seg at = {.up = sp, .kw = "oneOf", .idx = i};
      if (!try_branch(c, n->one_of[i], inst, ip, &at, ev)) continue;
      if (matches++)
        second = i;
      else
        first = i;
    }
    if (!matches)
      report(c, ip, sp, "oneOf", "does not match any of the %zu alternatives", n->none_of);
    else if (matches > 1)
      report(c, ip, sp, "oneOf", "matches more than one alternative (%zu and %zu)", first,
             second);
    CHECK(matches == 1 && !c->aborted);
  }
  if (n->not_) {
    struct seg at = {.up = sp, .kw = "not", .idx = NO_INDEX};
    bool matched = try_branch(c, n->not_, inst, ip, &at, NULL);
    if (matched) report(c, ip, sp, "not", "must not match the \"not\" schema");
    CHECK(!matched && !c->aborted);
  }
  if (n->if_) {
    struct seg at = {.up = sp, .kw = "if", .idx = NO_INDEX};
    bool cond = try_branch(c, n->if_, inst, ip, &at, ev);
    if (c->aborted) return false;
    const struct schema_node *branch = cond ? n->then_ : n->else_;
    struct seg bat = {.up = sp, .kw = cond ? "then" : "else", .idx = NO_INDEX};
    if (branch) CHECK(eval(c, branch, inst, ip, &bat, ev));
  }
  if (n->ndep_schemas && json_is_object(inst)) {
    for (size_t i = 0; i < n->ndep_schemas; i++) {
      const struct schema_depschema *d = &n->dep_schemas[i];
      if (!json_object_getn(inst, d->name.s, d->name.len)) continue;
      struct seg at = {.up = sp, .kw = "dependentSchemas", .key = d->name.s, .len = d->name.len};
      CHECK(eval(c, d->node, inst, ip, &at, ev));
    }
  }
  return ok;
}

static bool eval_keywords(struct vctx *c, const struct schema_node *n, json_t *inst,
                          const struct seg *ip, const struct seg *sp, struct bits *ev) {
  bool ok = true;
  if ((n->kw & SCHEMA_KW_TYPE) && !type_matches(n->types, inst)) {
    report_type(c, n, inst, ip, sp);
    CHECK(false);
  }
  if ((n->kw & SCHEMA_KW_CONST) && !schema_json_equal(inst, n->const_value)) {
    report(c, ip, sp, "const", "must be equal to the constant value");
    CHECK(false);
  }
  if (n->kw & SCHEMA_KW_ENUM) {
    size_t count = json_array_size(n->enum_values), i = 0;
    while (i < count && !schema_json_equal(inst, json_array_get(n->enum_values, i))) i++;
    if (i == count) {
      report(c, ip, sp, "enum", "must be one of the %zu allowed values", count);
      CHECK(false);
    }
  }
  switch (json_typeof(inst)) {
    case JSON_STRING:
      CHECK(check_string(c, n, inst, ip, sp));
      break;
    case JSON_INTEGER:
    case JSON_REAL:
      CHECK(check_number(c, n, inst, ip, sp));
      break;
    case JSON_ARRAY:
      CHECK(check_array(c, n, inst, ip, sp));
      break;
    case JSON_OBJECT:
      CHECK(check_object(c, n, inst, ip, sp));
      break;
    default:
      break;
  }
  CHECK(apply_in_place(c, n, inst, ip, sp, ev));
  if (json_is_object(inst)) {
    if (n->nprops || n->npatprops || n->additional)
      CHECK(apply_properties(c, n, inst, ip, sp, ev));
    if (n->property_names) CHECK(apply_property_names(c, n, inst, ip, sp));
  } else if (json_is_array(inst) && (n->nprefix_items || n->items || n->contains)) {
    CHECK(apply_items(c, n, inst, ip, sp, ev));
  }
  return ok;
}

static bool eval(struct vctx *c, const struct schema_node *n, json_t *inst, const struct seg *ip,
                 const struct seg *sp, struct bits *ev) {
  if (n->is_bool) {
    if (!n->bool_value) report_false(c, ip, sp);
    return n->bool_value;
  }
  if (c->aborted) return false;
  if (c->depth >= SCHEMA_MAX_EVAL_DEPTH) {
    abort_eval(c, ip, sp, NULL,
               "evaluation nested too deeply (a $ref cycle that never advances in the instance?)");
    return false;
  }
  if (++c->steps > SCHEMA_MAX_EVAL_STEPS) {
    abort_eval(c, ip, sp, NULL, "validation took too many steps");
    return false;
  }
  c->depth++;
  bool pushed = !c->nscope || c->scope[c->nscope - 1] != n->res;
  if (pushed) c->scope[c->nscope++] = n->res;

  const struct schema_node *uneval = json_is_object(inst)  ? n->uneval_props
                                     : json_is_array(inst) ? n->uneval_items
                                                           : NULL;
  bool ok;
  if (!uneval) {
    ok = eval_keywords(c, n, inst, ip, sp, ev);
  } else {
    struct bits mine;
    ok = bits_init(c, &mine, member_count(inst), ip, sp);
    if (ok) {
      ok = eval_keywords(c, n, inst, ip, sp, &mine);
      if (ok || !stop(c)) ok = apply_unevaluated(c, n, inst, ip, sp, &mine) && ok;
      /* Having passed, unevaluated* has evaluated every member the others left. */
      if (ok && ev) bits_set_all(ev);
      bits_free(&mine);
    }
  }

  if (pushed) c->nscope--;
  c->depth--;
  return ok && !c->aborted;
}

bool tg_schema_validate(const tg_schema *schema, json_t *instance, json_t *errors,
                        size_t max_errors) {
  if (!schema || !instance) return false;
  /* Field by field: zeroing the scope stack would cost more than a small validation. */
  struct vctx c;
  c.s = schema;
  c.out = json_is_array(errors) ? errors : NULL;
  c.errs = max_errors ? c.out : NULL;
  c.max = max_errors;
  c.nerr = c.steps = 0;
  c.depth = c.nscope = 0;
  c.aborted = false;
  c.md = NULL;
  bool ok = eval(&c, schema->root, instance, NULL, NULL, NULL);
  pcre2_match_data_free(c.md);
  return ok && !c.aborted;
}

/* Building blocks of the schema compiler and validator: arena, hash map, URI resolution,
 * exact number handling, JSON equality and the ECMA-262 to PCRE2 regex translation. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schema_internal.h"
#include "util/ids.h"
#include "util/status.h"

struct schema_arena_block {
  struct schema_arena_block *next;
  size_t used, cap;
  max_align_t data[];
};

/* Blocks start small and double: most schemas (hundreds of them compiled at start-up) need
 * well under a kilobyte, and a zeroed 16 KB block each showed in the idle resident size. */
#define ARENA_FIRST 1024
#define ARENA_MAX 16384

void *schema_arena_alloc(struct schema_arena *a, size_t size) {
  size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  struct schema_arena_block *b = a->head;
  if (!b || b->cap - b->used < size) {
    size_t grow = b ? (b->cap < ARENA_MAX / 2 ? b->cap * 2 : ARENA_MAX) : ARENA_FIRST;
    size_t cap = size > grow ? size : grow;
    if (cap > SIZE_MAX - sizeof(*b)) return NULL;
    b = calloc(1, sizeof(*b) + cap);
    if (!b) return NULL;
    b->cap = cap;
    /* A large one-off allocation goes behind the current block so its free space stays in use. */
    if (a->head && size > grow) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  void *p = (char *)b->data + b->used;
  b->used += size;
  return p;
}

char *schema_arena_strndup(struct schema_arena *a, const char *s, size_t len) {
  if (len == SIZE_MAX) return NULL;
  char *p = schema_arena_alloc(a, len + 1);
  if (p) memcpy(p, s, len);
  return p;
}

void schema_arena_free(struct schema_arena *a) {
  struct schema_arena_block *b = a->head;
  while (b) {
    struct schema_arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void *schema_map_get(const struct schema_map *m, const void *key, size_t klen) {
  if (!m->cap) return NULL;
  uint64_t h = tg_hash_bytes(key, klen);
  for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    const struct schema_map_slot *s = &m->slots[i];
    if (!s->key) return NULL;
    if (s->hash == h && s->klen == klen && !memcmp(s->key, key, klen)) return s->value;
  }
}

static int map_grow(struct schema_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 16;
  struct schema_map_slot *slots = calloc(cap, sizeof(*slots));
  if (!slots) return TG_E_NOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    const struct schema_map_slot *s = &m->slots[i];
    if (!s->key) continue;
    size_t j = s->hash & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return TG_OK;
}

int schema_map_put(struct schema_map *m, const void *key, size_t klen, void *value) {
  if ((m->len + 1) * 10 > m->cap * 7 && map_grow(m) < 0) return TG_E_NOMEM;
  uint64_t h = tg_hash_bytes(key, klen);
  size_t i = h & (m->cap - 1);
  for (; m->slots[i].key; i = (i + 1) & (m->cap - 1)) {
    const struct schema_map_slot *s = &m->slots[i];
    if (s->hash == h && s->klen == klen && !memcmp(s->key, key, klen)) return TG_OK;
  }
  char *copy = schema_arena_strndup(m->keys, key, klen);
  if (!copy) return TG_E_NOMEM;
  m->slots[i] = (struct schema_map_slot){.hash = h, .key = copy, .klen = klen, .value = value};
  m->len++;
  return TG_OK;
}

void schema_map_free(struct schema_map *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = 0;
}

/* RFC 3986 components; a NULL pointer means the component is absent. */
struct uri_parts {
  const char *scheme, *auth, *path, *query, *frag;
  size_t scheme_len, auth_len, path_len, query_len, frag_len;
};

static void uri_split(const char *s, struct uri_parts *u) {
  memset(u, 0, sizeof(*u));
  const char *p = s;
  if (isalpha((unsigned char)*p)) {
    const char *q = p + 1;
    while (isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.') q++;
    if (*q == ':') {
      u->scheme = p;
      u->scheme_len = (size_t)(q - p);
      p = q + 1;
    }
  }
  if (p[0] == '/' && p[1] == '/') {
    p += 2;
    u->auth = p;
    while (*p && *p != '/' && *p != '?' && *p != '#') p++;
    u->auth_len = (size_t)(p - u->auth);
  }
  u->path = p;
  while (*p && *p != '?' && *p != '#') p++;
  u->path_len = (size_t)(p - u->path);
  if (*p == '?') {
    u->query = ++p;
    while (*p && *p != '#') p++;
    u->query_len = (size_t)(p - u->query);
  }
  if (*p == '#') {
    u->frag = ++p;
    u->frag_len = strlen(p);
  }
}

static void drop_last_segment(const char *out, size_t *o) {
  while (*o > 0 && out[*o - 1] != '/') (*o)--;
  if (*o > 0) (*o)--;
}

/* RFC 3986 section 5.2.4; in is scratch space and gets modified. */
static size_t remove_dot_segments(char *in, size_t n, char *out) {
  size_t i = 0, o = 0;
  while (i < n) {
    const char *p = in + i;
    size_t r = n - i;
    if (r >= 3 && !memcmp(p, "../", 3)) {
      i += 3;
    } else if (r >= 2 && !memcmp(p, "./", 2)) {
      i += 2;
    } else if (r >= 3 && !memcmp(p, "/./", 3)) {
      i += 2;
    } else if (r == 2 && !memcmp(p, "/.", 2)) {
      i += 1;
      in[i] = '/';
    } else if (r >= 4 && !memcmp(p, "/../", 4)) {
      i += 3;
      drop_last_segment(out, &o);
    } else if (r == 3 && !memcmp(p, "/..", 3)) {
      i += 2;
      in[i] = '/';
      drop_last_segment(out, &o);
    } else if ((r == 1 && p[0] == '.') || (r == 2 && !memcmp(p, "..", 2))) {
      i = n;
    } else {
      size_t j = i + (in[i] == '/');
      while (j < n && in[j] != '/') j++;
      memcpy(out + o, in + i, j - i);
      o += j - i;
      i = j;
    }
  }
  return o;
}

char *schema_uri_resolve(const char *base, const char *ref) {
  struct uri_parts b, r, t;
  uri_split(base, &b);
  uri_split(ref, &r);
  t = r;
  char *merged = NULL;
  if (!r.scheme) {
    t.scheme = b.scheme;
    t.scheme_len = b.scheme_len;
    if (!r.auth) {
      t.auth = b.auth;
      t.auth_len = b.auth_len;
      if (!r.path_len) {
        t.path = b.path;
        t.path_len = b.path_len;
        if (!r.query) {
          t.query = b.query;
          t.query_len = b.query_len;
        }
      } else if (r.path[0] != '/') {
        size_t keep = b.path_len;
        while (keep > 0 && b.path[keep - 1] != '/') keep--;
        bool slash = b.auth && !b.path_len;
        merged = malloc(keep + slash + r.path_len + 1);
        if (!merged) return NULL;
        memcpy(merged, b.path, keep);
        if (slash) merged[keep] = '/';
        memcpy(merged + keep + slash, r.path, r.path_len);
        t.path = merged;
        t.path_len = keep + slash + r.path_len;
      }
    }
  }
  size_t cap = t.scheme_len + t.auth_len + 2 * t.path_len + t.query_len + t.frag_len + 8;
  char *out = malloc(cap);
  char *scratch = malloc(t.path_len + 1);
  if (!out || !scratch) {
    free(out);
    free(scratch);
    free(merged);
    return NULL;
  }
  size_t o = 0;
  if (t.scheme) {
    for (size_t i = 0; i < t.scheme_len; i++) out[o++] = (char)tolower((unsigned char)t.scheme[i]);
    out[o++] = ':';
  }
  if (t.auth) {
    out[o++] = '/';
    out[o++] = '/';
    const char *at = memchr(t.auth, '@', t.auth_len);
    size_t host = at ? (size_t)(at - t.auth) + 1 : 0;
    for (size_t i = 0; i < t.auth_len; i++)
      out[o++] = i < host ? t.auth[i] : (char)tolower((unsigned char)t.auth[i]);
  }
  memcpy(scratch, t.path, t.path_len);
  /* Only hierarchical paths have dot segments; a URN's path is opaque. */
  if (t.auth || (t.path_len && t.path[0] == '/'))
    o += remove_dot_segments(scratch, t.path_len, out + o);
  else {
    memcpy(out + o, t.path, t.path_len);
    o += t.path_len;
  }
  if (t.query) {
    out[o++] = '?';
    memcpy(out + o, t.query, t.query_len);
    o += t.query_len;
  }
  if (t.frag) {
    out[o++] = '#';
    memcpy(out + o, t.frag, t.frag_len);
    o += t.frag_len;
  }
  out[o] = 0;
  free(scratch);
  free(merged);
  return out;
}

size_t schema_percent_decode(char *s, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    int hi, lo;
    if (s[i] == '%' && i + 2 < len && (hi = tg_hex_digit(s[i + 1])) >= 0 &&
        (lo = tg_hex_digit(s[i + 2])) >= 0) {
      s[o++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      s[o++] = s[i];
    }
  }
  if (o < len) s[o] = 0;
  return o;
}

bool schema_num_from_json(const json_t *j, struct schema_num *out) {
  if (json_is_integer(j)) {
    out->is_int = true;
    out->i = json_integer_value(j);
    out->d = (double)out->i;
    return true;
  }
  if (json_is_real(j)) {
    out->is_int = false;
    out->i = 0;
    out->d = json_real_value(j);
    return true;
  }
  return false;
}

double schema_num_double(const struct schema_num *n) { return n->is_int ? (double)n->i : n->d; }

static int cmp_int_double(long long i, double d) {
  if (d >= 9223372036854775808.0) return -1;
  if (d < -9223372036854775808.0) return 1;
  long long t = (long long)d;
  if (i != t) return i < t ? -1 : 1;
  double frac = d - (double)t;
  return frac > 0 ? -1 : frac < 0 ? 1 : 0;
}

int schema_num_cmp(const struct schema_num *a, const struct schema_num *b) {
  if (a->is_int && b->is_int) return (a->i > b->i) - (a->i < b->i);
  if (!a->is_int && !b->is_int) return (a->d > b->d) - (a->d < b->d);
  if (a->is_int) return cmp_int_double(a->i, b->d);
  return -cmp_int_double(b->i, a->d);
}

/* Shortest of 15, 16 or 17 significant digits that reads back as d, in %e form. */
static void shortest_e(double d, char *buf, size_t size) {
  for (int prec = 14; prec <= 16; prec++) {
    snprintf(buf, size, "%.*e", prec, d);
    if (strtod(buf, NULL) == d) return;
  }
}

bool schema_decimal_from_num(const struct schema_num *n, struct schema_decimal *out) {
  if (n->is_int) {
    out->mant = n->i < 0 ? (uint64_t)(-(n->i + 1)) + 1 : (uint64_t)n->i;
    out->exp = 0;
    return true;
  }
  double d = fabs(n->d);
  if (!isfinite(d)) return false;
  if (d == 0) {
    *out = (struct schema_decimal){0, 0};
    return true;
  }
  char buf[64];
  shortest_e(d, buf, sizeof(buf));
  uint64_t mant = 0;
  int digits = 0;
  const char *p = buf;
  for (; *p && *p != 'e'; p++) {
    if (*p == '.') continue;
    mant = mant * 10 + (uint64_t)(*p - '0');
    digits++;
  }
  if (*p != 'e') return false;
  int exp = (int)strtol(p + 1, NULL, 10) - (digits - 1);
  while (mant && mant % 10 == 0) {
    mant /= 10;
    exp++;
  }
  out->mant = mant;
  out->exp = exp;
  return true;
}

void schema_num_format(const struct schema_num *n, char *buf, size_t size) {
  if (n->is_int) {
    snprintf(buf, size, "%lld", n->i);
    return;
  }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, n->d);
    if (strtod(buf, NULL) == n->d) return;
  }
}

static bool json_equal_at(const json_t *a, const json_t *b, unsigned depth) {
  if (a == b) return true;
  if (depth > SCHEMA_MAX_VALUE_DEPTH) return false;
  struct schema_num na, nb;
  if (schema_num_from_json(a, &na) && schema_num_from_json(b, &nb))
    return schema_num_cmp(&na, &nb) == 0;
  if (json_typeof(a) != json_typeof(b)) return false;
  switch (json_typeof(a)) {
    case JSON_STRING:
      return json_string_length(a) == json_string_length(b) &&
             !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    case JSON_ARRAY: {
      size_t n = json_array_size(a);
      if (n != json_array_size(b)) return false;
      for (size_t i = 0; i < n; i++)
        if (!json_equal_at(json_array_get(a, i), json_array_get(b, i), depth + 1)) return false;
      return true;
    }
    case JSON_OBJECT: {
      if (json_object_size(a) != json_object_size(b)) return false;
      json_t *obj = (json_t *)a;
      for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
        const json_t *bv =
            json_object_getn(b, json_object_iter_key(it), json_object_iter_key_len(it));
        if (!bv || !json_equal_at(json_object_iter_value(it), bv, depth + 1)) return false;
      }
      return true;
    }
    default:
      return true;
  }
}

bool schema_json_equal(const json_t *a, const json_t *b) { return json_equal_at(a, b, 0); }

static uint64_t json_hash_at(const json_t *v, unsigned depth) {
  if (depth > SCHEMA_MAX_VALUE_DEPTH) return 0;
  switch (json_typeof(v)) {
    case JSON_NULL:
      return 1;
    case JSON_TRUE:
      return 2;
    case JSON_FALSE:
      return 3;
    case JSON_INTEGER:
      return mix64((uint64_t)json_integer_value(v) ^ 0x5bd1e995ull);
    case JSON_REAL: {
      double d = json_real_value(v);
      /* Integral values hash like the integer they equal. */
      if (d == trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
        return mix64((uint64_t)(long long)d ^ 0x5bd1e995ull);
      uint64_t bits;
      memcpy(&bits, &d, sizeof(bits));
      return mix64(bits);
    }
    case JSON_STRING:
      return mix64(tg_hash_bytes(json_string_value(v), json_string_length(v)) ^ 4);
    case JSON_ARRAY: {
      uint64_t h = 5;
      for (size_t i = 0; i < json_array_size(v); i++)
        h = mix64(h * 31 + json_hash_at(json_array_get(v, i), depth + 1));
      return h;
    }
    case JSON_OBJECT: {
      /* Order independent, as object equality is. */
      uint64_t sum = 6;
      json_t *obj = (json_t *)v;
      for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it))
        sum += mix64(tg_hash_bytes(json_object_iter_key(it), json_object_iter_key_len(it)) ^
                     (json_hash_at(json_object_iter_value(it), depth + 1) * 0x9e3779b97f4a7c15ull));
      return mix64(sum);
    }
  }
  return 0;
}

uint64_t schema_json_hash(const json_t *v) { return json_hash_at(v, 0); }

void schema_buf_add(struct schema_buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->cap - b->len <= n) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len <= n) {
      if (cap > SIZE_MAX / 2) {
        b->oom = true;
        return;
      }
      cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void schema_buf_add_token(struct schema_buf *b, const char *s, size_t n) {
  schema_buf_add(b, "/", 1);
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '~' && s[i] != '/') continue;
    schema_buf_add(b, s + start, i - start);
    schema_buf_add(b, s[i] == '~' ? "~0" : "~1", 2);
    start = i + 1;
  }
  schema_buf_add(b, s + start, n - start);
}

void schema_buf_add_index(struct schema_buf *b, size_t i) {
  char num[24];
  int n = snprintf(num, sizeof(num), "/%zu", i);
  schema_buf_add(b, num, (size_t)n);
}

char *schema_buf_take(struct schema_buf *b) {
  if (!b->p) schema_buf_add(b, "", 0);
  char *p = b->oom ? NULL : b->p;
  if (b->oom) free(b->p);
  *b = (struct schema_buf){0};
  return p;
}

/* ECMA-262 \s: WhiteSpace and LineTerminator code points, which PCRE2's \s (ASCII without
 * PCRE2_UCP) and \p{Xps} (no U+FEFF) both miss in part. Spelled with the escapes that
 * PCRE2_ALT_BSUX keeps: \xHH and \uHHHH, not \x{...}. */
static const char ecma_space[] =
    "\\t\\n\\x0b\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    "\\ufeff";

static size_t emit(char *out, size_t o, const char *s, size_t n) {
  if (out) memcpy(out + o, s, n);
  return o + n;
}

/* ECMA-262 accepts the long General_Category names and a "gc=" prefix; PCRE2 10.42 wants
 * the short names. Script and binary property names are the same in both. */
static const char *const category_names[][2] = {
    {"Letter", "L"}, {"Cased_Letter", "LC"}, {"Uppercase_Letter", "Lu"},
    {"Lowercase_Letter", "Ll"}, {"Titlecase_Letter", "Lt"}, {"Modifier_Letter", "Lm"},
    {"Other_Letter", "Lo"}, {"Mark", "M"}, {"Combining_Mark", "M"}, {"Nonspacing_Mark", "Mn"},
    {"Spacing_Mark", "Mc"}, {"Enclosing_Mark", "Me"}, {"Number", "N"}, {"Decimal_Number", "Nd"},
    {"digit", "Nd"}, {"Letter_Number", "Nl"}, {"Other_Number", "No"}, {"Punctuation", "P"},
    {"punct", "P"}, {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
    {"Open_Punctuation", "Ps"}, {"Close_Punctuation", "Pe"}, {"Initial_Punctuation", "Pi"},
    {"Final_Punctuation", "Pf"}, {"Other_Punctuation", "Po"}, {"Symbol", "S"},
    {"Math_Symbol", "Sm"}, {"Currency_Symbol", "Sc"}, {"Modifier_Symbol", "Sk"},
    {"Other_Symbol", "So"}, {"Separator", "Z"}, {"Space_Separator", "Zs"},
    {"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"}, {"Other", "C"}, {"Control", "Cc"},
    {"cntrl", "Cc"}, {"Format", "Cf"}, {"Surrogate", "Cs"}, {"Private_Use", "Co"},
    {"Unassigned", "Cn"},
};

/* Emits \p{name} or \P{name} in PCRE2 spelling. */
static size_t emit_property(char *out, size_t o, bool negated, const char *name, size_t n) {
  static const char *const prefixes[] = {"General_Category=", "gc="};
  for (size_t i = 0; i < 2; i++) {
    size_t k = strlen(prefixes[i]);
    if (n > k && !memcmp(name, prefixes[i], k)) {
      name += k;
      n -= k;
    }
  }
  if (n == 8 && !memcmp(name, "Assigned", 8)) {
    negated = !negated;
    name = "Cn";
    n = 2;
  }
  for (size_t i = 0; i < sizeof(category_names) / sizeof(*category_names); i++)
    if (strlen(category_names[i][0]) == n && !memcmp(name, category_names[i][0], n)) {
      name = category_names[i][1];
      n = strlen(name);
      break;
    }
  o = emit(out, o, negated ? "\\P{" : "\\p{", 3);
  o = emit(out, o, name, n);
  return emit(out, o, "}", 1);
}

static size_t translate(const char *src, size_t len, char *out) {
  size_t o = 0;
  bool in_class = false;
  for (size_t i = 0; i < len; i++) {
    char c = src[i];
    if (c == '\\' && i + 1 < len) {
      char e = src[++i];
      const char *close = (e == 'p' || e == 'P') && i + 1 < len && src[i + 1] == '{'
                              ? memchr(src + i + 2, '}', len - i - 2)
                              : NULL;
      if (close) {
        o = emit_property(out, o, e == 'P', src + i + 2, (size_t)(close - (src + i + 2)));
        i = (size_t)(close - src);
      } else if (e == 's' || (e == 'S' && !in_class)) {
        if (!in_class) o = emit(out, o, e == 's' ? "[" : "[^", e == 's' ? 1 : 2);
        o = emit(out, o, ecma_space, sizeof(ecma_space) - 1);
        if (!in_class) o = emit(out, o, "]", 1);
      } else {
        o = emit(out, o, src + i - 1, 2);
      }
    } else if (c == '[' && !in_class) {
      in_class = true;
      o = emit(out, o, "[", 1);
      if (i + 1 < len && src[i + 1] == '^') o = emit(out, o, &src[++i], 1);
      /* ECMA closes the class at the first ']', even right after '[' or "[^". */
      if (i + 1 < len && src[i + 1] == ']') {
        o = emit(out, o, "]", 1);
        in_class = false;
        i++;
      }
    } else if (c == '[') {
      /* Literal in ECMA, but PCRE2 would read "[:alpha:]" as a POSIX class. */
      o = emit(out, o, "\\[", 2);
    } else {
      if (c == ']') in_class = false;
      o = emit(out, o, &c, 1);
    }
  }
  return o;
}

char *schema_regex_translate(const char *src, size_t len, size_t *outlen) {
  size_t n = translate(src, len, NULL);
  char *out = malloc(n + 1);
  if (!out) return NULL;
  translate(src, len, out);
  out[n] = 0;
  *outlen = n;
  return out;
}

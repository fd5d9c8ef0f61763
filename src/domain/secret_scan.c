#define PCRE2_CODE_UNIT_WIDTH 8
#include "domain/secret_scan.h"

#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/embed.h"
#include "util/log.h"
#include "util/status.h"

extern const tg_embedded_file tg_embedded_secret_rules[]; /* CMakeLists.txt, group secret_rules */

#define RULES_MAX 64
#define RULE_NAME_MAX 48
#define MATCH_LIMIT 1000000 /* backtracking steps per match: a hostile body cannot stall a call */

typedef struct rule {
  char name[RULE_NAME_MAX];
  double min_entropy; /* 0: no check */
  pcre2_code *code;
  bool jit; /* compiled to machine code too */
} rule;

static rule rules[RULES_MAX];
static size_t n_rules;
static uint32_t most_captures; /* of any rule: the room a scan's match data needs */
static int load_status = TG_OK;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static int parse_line(char *line) {
  char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
  if (!tab2 || n_rules == RULES_MAX || (size_t)(tab1 - line) >= RULE_NAME_MAX) return TG_E_INVAL;
  rule *r = &rules[n_rules];
  memcpy(r->name, line, (size_t)(tab1 - line));
  r->name[tab1 - line] = '\0';
  *tab2 = '\0';
  if (strncmp(tab1 + 1, "entropy:", 8) == 0) r->min_entropy = strtod(tab1 + 9, NULL);
  else if (strcmp(tab1 + 1, "-") != 0) return TG_E_INVAL;
  int err;
  PCRE2_SIZE offset;
  r->code = pcre2_compile((PCRE2_SPTR)(tab2 + 1), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &offset, NULL);
  if (!r->code) {
    tg_log(TG_LOG_ERROR, "secret rule %s does not compile at offset %zu (error %d)", r->name,
           (size_t)offset, err);
    return TG_E_INVAL;
  }
  /* Compiled to machine code where PCRE2 can (the interpreter otherwise): every call's
   * arguments pass the scan on their way to the telemetry row. */
  r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
  uint32_t captures = 0;
  pcre2_pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &captures);
  if (captures > most_captures) most_captures = captures;
  n_rules++;
  return TG_OK;
}

static void load_rules(void) {
  const tg_embedded_file *f = tg_embed_find(tg_embedded_secret_rules, "secret_rules.txt");
  char *copy = f ? strdup(f->data) : NULL;
  if (!copy) {
    load_status = f ? TG_E_NOMEM : TG_E_INVAL;
    return;
  }
  char *save = NULL;
  for (char *line = strtok_r(copy, "\n", &save); line && load_status == TG_OK;
       line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#' || line[0] == '\0') continue;
    load_status = parse_line(line);
  }
  free(copy);
}

static int ensure_loaded(void) {
  pthread_once(&loaded, load_rules);
  return load_status;
}

size_t tg_secret_rule_count(void) { return ensure_loaded() == TG_OK ? n_rules : 0; }

const char *tg_secret_rule_name(size_t i) { return i < tg_secret_rule_count() ? rules[i].name : NULL; }

static double entropy(const char *s, size_t len) {
  size_t counts[256] = {0};
  for (size_t i = 0; i < len; i++) counts[(unsigned char)s[i]]++;
  double bits = 0;
  for (size_t c = 0; c < 256; c++) {
    if (!counts[c]) continue;
    double p = (double)counts[c] / (double)len;
    bits -= p * log2(p);
  }
  return bits;
}

/* What one scan matches with, made once for all its rules. */
typedef struct matcher {
  pcre2_match_data *md;
  pcre2_match_context *mc;
} matcher;

static void matcher_done(matcher *m) {
  pcre2_match_data_free(m->md);
  pcre2_match_context_free(m->mc);
}

static int matcher_init(matcher *m) {
  m->md = pcre2_match_data_create(most_captures + 1, NULL);
  m->mc = pcre2_match_context_create(NULL);
  if (!m->md || !m->mc) {
    matcher_done(m);
    return TG_E_NOMEM;
  }
  pcre2_set_match_limit(m->mc, MATCH_LIMIT);
  return TG_OK;
}

/* *at: the offset of rule r's first acceptable match in text, or -1. */
static int first_match(const rule *r, const matcher *m, const char *text, size_t len, long *at) {
  *at = -1;
  size_t start = 0;
  while (start <= len) {
    /* The machine code's own entry skips the interpreter's checks of its arguments. */
    int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)text, len, start, 0, m->md, m->mc)
                    : pcre2_match(r->code, (PCRE2_SPTR)text, len, start, 0, m->md, m->mc);
    /* The machine code's stack is small: what it cannot hold, the interpreter matches. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(r->code, (PCRE2_SPTR)text, len, start, PCRE2_NO_JIT, m->md, m->mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? TG_E_NOMEM : TG_E_TOO_LARGE;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    if (r->min_entropy <= 0 ||
        (rc > 1 && ov[2] != PCRE2_UNSET &&
         entropy(text + ov[2], ov[3] - ov[2]) >= r->min_entropy)) {
      *at = (long)ov[0];
      break;
    }
    start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
  }
  return TG_OK;
}

/* Appends the UTF-8 sequence of code point cp to out. */
static size_t put_utf8(char *out, unsigned cp, const char *src, size_t n) {
  if (cp >= 0xFF01 && cp <= 0xFF5E) {
    out[0] = (char)(cp - 0xFEE0); /* full-width ASCII → ASCII */
    return 1;
  }
  memcpy(out, src, n);
  return n;
}

/* The working copy the rules see; it is never longer than text. */
static char *working_copy(const char *text, size_t len, size_t *ret_len) {
  char *out = malloc(len + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)text[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > len) n = 1;
    unsigned cp = c;
    if (n == 2) cp = ((c & 0x1Fu) << 6) | (text[i + 1] & 0x3Fu);
    if (n == 3) cp = ((c & 0x0Fu) << 12) | ((text[i + 1] & 0x3Fu) << 6) | (text[i + 2] & 0x3Fu);
    bool invisible = cp == 0x200B || cp == 0x200C || cp == 0x200D || cp == 0x00AD ||
                     cp == 0xFEFF || cp == 0x2060;
    if (!invisible || n == 1) o += put_utf8(out + o, n == 1 ? c : cp, text + i, n);
    i += n;
  }
  out[o] = '\0';
  *ret_len = o;
  return out;
}

int tg_secret_rule_matches(size_t i, const char *text, size_t len, bool *yes) {
  *yes = false;
  if (i >= tg_secret_rule_count()) return TG_E_INVAL;
  matcher m = {0};
  size_t wlen;
  char *work = matcher_init(&m) == TG_OK ? working_copy(text, len, &wlen) : NULL;
  long at = -1;
  int r = work ? first_match(&rules[i], &m, work, wlen, &at) : TG_E_NOMEM;
  free(work);
  matcher_done(&m);
  *yes = r == TG_OK && at >= 0;
  return r;
}

int tg_secret_scan(const char *text, size_t len, tg_secret_hit *hit) {
  int r = ensure_loaded();
  if (r < 0) return r;
  matcher m = {0};
  size_t wlen;
  char *work = matcher_init(&m) == TG_OK ? working_copy(text, len, &wlen) : NULL;
  long at = -1;
  r = work ? TG_OK : TG_E_NOMEM;
  for (size_t i = 0; r == TG_OK && i < n_rules; i++) {
    r = first_match(&rules[i], &m, work, wlen, &at);
    if (r < 0 || at < 0) continue;
    hit->rule = rules[i].name;
    hit->line = 1;
    for (long k = 0; k < at; k++)
      if (work[k] == '\n') hit->line++;
    r = 1;
  }
  free(work);
  matcher_done(&m);
  return r;
}

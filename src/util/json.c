#define _GNU_SOURCE
#include "util/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tg_json_text(const json_t *value) {
  return json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
}

size_t tg_utf8_prefix(const char *text, size_t max) {
  size_t n = strnlen(text, max);
  /* Cut at max (text[max] exists: at worst it is the terminator), back up over the
   * continuation bytes of the character the cut would split. */
  if (n == max)
    while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) n--;
  return n;
}

/* How many bytes a character starting with lead takes (1 to 4), or 0 for a byte no
 * character starts with (a continuation byte, an overlong form's lead, or past U+10FFFF). */
static size_t utf8_width(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xc2) return 0;
  if (lead < 0xe0) return 2;
  if (lead < 0xf0) return 3;
  return lead < 0xf5 ? 4 : 0;
}

/* The length of the valid character at s, of at most n bytes (tg_utf8_char), or 0;
 * *short_cut set when the n bytes end within a character they begin. */
static size_t utf8_char(const unsigned char *s, size_t n, bool *short_cut) {
  size_t width = utf8_width(s[0]), i = 1;
  *short_cut = false;
  if (width <= 1) return width;
  uint32_t code = s[0] & (0x7f >> width);
  for (; i < width && i < n && (s[i] & 0xc0) == 0x80; i++) code = code << 6 | (s[i] & 0x3f);
  if (i < width) {
    *short_cut = i == n;
    return 0;
  }
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  bool valid = code >= least[width] && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff);
  return valid ? width : 0;
}

size_t tg_utf8_char(const char *s, size_t n) {
  bool short_cut;
  return n ? utf8_char((const unsigned char *)s, n, &short_cut) : 0;
}

void tg_utf8_mend(char *text) {
  unsigned char *s = (unsigned char *)text;
  for (size_t left = strlen(text); left;) {
    bool short_cut;
    size_t n = utf8_char(s, left, &short_cut);
    if (short_cut) {
      *s = '\0';
      return;
    }
    if (!n) {
      *s = '?';
      n = 1;
    }
    s += n;
    left -= n;
  }
}

bool tg_utf8_valid(const char *s, size_t n) {
  for (size_t i = 0, width; i < n; i += width)
    if (!(width = tg_utf8_char(s + i, n - i))) return false;
  return true;
}

json_t *tg_json_truncate(json_t *value, size_t max_bytes) {
  char *text = tg_json_text(value);
  if (!text) return NULL;
  size_t size = strlen(text);
  if (size <= max_bytes) {
    free(text);
    return json_incref(value);
  }
  /* Escaping can grow the preview, so shrink it until the whole object fits. */
  size_t keep = max_bytes;
  json_t *out = NULL;
  for (;;) {
    keep = tg_utf8_prefix(text, keep);
    out = json_pack("{s:b,s:I,s:s%}", "truncated", 1, "bytes", (json_int_t)size, "preview",
                    text, keep);
    if (!out) break;
    size_t out_size = json_dumpb(out, NULL, 0, JSON_COMPACT);
    if (out_size <= max_bytes || keep == 0) break;
    json_decref(out);
    out = NULL;
    size_t over = out_size - max_bytes;
    keep = keep > over ? keep - over : 0;
  }
  free(text);
  return out;
}

json_t *tg_json_parse(const char *text, size_t max_bytes, char **reterr) {
  size_t len = strlen(text);
  if (len > max_bytes) {
    if (asprintf(reterr, "JSON text of %zu bytes is over the limit of %zu", len, max_bytes) < 0)
      *reterr = NULL;
    return NULL;
  }
  json_error_t err;
  json_t *value = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
  if (!value && asprintf(reterr, "invalid JSON at line %d column %d: %s", err.line,
                         err.column, err.text) < 0)
    *reterr = NULL;
  return value;
}

bool tg_json_cut(json_t *rows, json_int_t limit) {
  bool more = (json_int_t)json_array_size(rows) > limit;
  while ((json_int_t)json_array_size(rows) > limit) json_array_remove(rows, json_array_size(rows) - 1);
  return more;
}

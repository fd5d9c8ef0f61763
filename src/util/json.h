/* JSON helpers on top of jansson that several modules need. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A copy of value whose compact JSON text fits in max_bytes. A value that already fits is
 * returned as is (new reference); a larger one becomes
 *   {"truncated": true, "bytes": <original size>, "preview": "<start of its JSON text>"}
 * cut on a UTF-8 boundary. Returns NULL only when out of memory. */
json_t *tg_json_truncate(json_t *value, size_t max_bytes);

/* The string at key of object, or NULL when absent or not a string (borrowed). */
static inline const char *tg_json_str(const json_t *object, const char *key) {
  return json_string_value(json_object_get(object, key));
}

/* For lists fetched with one row more than asked: drops the rows past limit and says
 * whether there were any (the "truncated" of a listing). */
bool tg_json_cut(json_t *rows, json_int_t limit);

/* The length of text's longest prefix of at most max bytes that ends on a whole UTF-8
 * character. */
size_t tg_utf8_prefix(const char *text, size_t max);

/* For printf's "%.*s": text, cut to at most max bytes on a character boundary ("%.64s" may
 * halve a character, and JSON takes no such text). text is read twice. */
#define TG_UTF8_CUT(text, max) (int)tg_utf8_prefix((text), (max)), (text)

/* Makes text UTF-8 as jansson takes it, in place, so that a message built from bytes of any
 * origin (a header, a command line) can go into JSON: a character cut short at its end is
 * dropped, and any other byte that starts no valid character becomes '?'. */
void tg_utf8_mend(char *text);

/* The length of the UTF-8 character at s, within its n bytes, as jansson takes UTF-8 (RFC
 * 3629: no overlong form, no surrogate, nothing past U+10FFFF): 1 to 4 (a NUL byte is one),
 * or 0 when no whole character starts there. */
size_t tg_utf8_char(const char *s, size_t n);

/* Whether the n bytes at s are UTF-8 as jansson takes it (what tg_utf8_mend would leave as
 * it is, for a C string). */
bool tg_utf8_valid(const char *s, size_t n);

/* Compact JSON text of value (malloc'd), or NULL when out of memory. */
char *tg_json_text(const json_t *value);

/* Parses text as any JSON value, refusing input over max_bytes or nested deeper than
 * jansson's limit. Returns a new reference or NULL with a malloc'd message in *reterr. */
json_t *tg_json_parse(const char *text, size_t max_bytes, char **reterr);

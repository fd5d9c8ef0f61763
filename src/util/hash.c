#include "util/hash.h"

#include <string.h>

uint64_t tg_hash_bytes(const void *p, size_t len) {
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a's offset basis and prime */
  for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

uint64_t tg_hash_text(const char *s) { return tg_hash_bytes(s, strlen(s)); }

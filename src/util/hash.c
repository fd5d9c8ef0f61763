#include "util/hash.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

uint64_t tg_hash_bytes(const void *p, size_t len) {
  const unsigned char *s = p;
  uint64_t h = FNV_OFFSET;
  for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * FNV_PRIME;
  return h;
}

uint64_t tg_hash_text(const char *s) {
  uint64_t h = FNV_OFFSET;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) h = (h ^ *c) * FNV_PRIME;
  return h;
}

/* The hash of the tables kept in memory (the registry; the schemas' maps, property indexes and
 * value hashes; the rate limit's callers; the HTTP sessions): FNV-1a, 64 bits, for short keys.
 * A table takes its low bits. */
#pragma once
#include <stddef.h>
#include <stdint.h>

uint64_t tg_hash_bytes(const void *p, size_t len);
uint64_t tg_hash_text(const char *s); /* of a NUL-terminated string, without its NUL */

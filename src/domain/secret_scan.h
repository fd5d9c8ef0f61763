/* The secret scan every agent-written text passes before it is stored (seed 000 §3.4,
 * research/ever-works-semantics.md §3.2): PCRE2 rules kept in one data file
 * (src/domain/secret_rules.txt, embedded in the binary). A hit names the rule and the line,
 * never the text it matched. Pure: no I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef struct tg_secret_hit {
  const char *rule; /* the rule's name, static */
  size_t line;      /* 1-based line of the start of the match */
} tg_secret_hit;

/* Scans text on a working copy without zero-width and soft-hyphen characters and with
 * full-width ASCII folded to ASCII, so those cannot split or disguise a token.
 * Returns 1 with *hit filled, 0 when clean, or a negative TG_E_* (rules that do not compile,
 * a match that exceeds its backtracking limit, out of memory). */
int tg_secret_scan(const char *text, size_t len, tg_secret_hit *hit);

/* The rules, for tests and docs: their number, the name of rule i, and whether rule i alone
 * matches text. */
size_t tg_secret_rule_count(void);
const char *tg_secret_rule_name(size_t i);
int tg_secret_rule_matches(size_t i, const char *text, size_t len, bool *yes);

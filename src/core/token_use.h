/* When each API token was last used (api_tokens.last_used_at, shown by admin.token.list), so
 * that an operator can tell a token in use from one to revoke. Authentication stays a read:
 * uses are kept in memory and each token's is written at most once a minute
 * (TG_TOKEN_USE_WRITE_MS), by whoever serves the token (the HTTP server's sweeper, the stdio
 * server between messages). */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/principal.h"
#include "db/db.h"

#define TG_TOKEN_USE_WRITE_MS 60000
#define TG_TOKEN_USES_MAX 1024 /* tokens remembered at once; past it, written at every write */

typedef struct tg_token_uses tg_token_uses;

tg_token_uses *tg_token_uses_new(void);
void tg_token_uses_free(tg_token_uses *u);
/* The token whose hash is given was used now. Returns whether its use is due to be written
 * (tg_token_uses_write). Thread-safe and cheap: it runs on every request. */
bool tg_token_used(tg_token_uses *u, const char hash[TG_TOKEN_HASH_LEN + 1]);
/* Writes the last use of each token due (all: of each not written yet, as its server
 * stops), in one transaction, without waiting for another writer (but with all). On failure
 * (logged) they are tried again a minute later; while another writer holds the lock, at the
 * next write. */
int tg_token_uses_write(tg_token_uses *u, tg_db *db, bool all);
/* Tests: added to the monotonic clock the minute is measured by. */
extern _Atomic int64_t tg_token_uses_test_later_ms;
/* A process that serves one request with token (the CLI's `call --token`) writes its use at
 * once. */
int tg_token_use_write(tg_db *db, const char *token);

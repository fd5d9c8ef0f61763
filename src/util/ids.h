/* Identifiers and secrets: UUIDv7 ids, random API tokens, SHA-256 digests. */
#pragma once
#include <stddef.h>

#define TG_UUID_LEN 36

/* Writes a UUIDv7 (time-ordered, RFC 9562) as 36 characters plus NUL into out[37].
 * Returns 0, or TG_E_IO when the system gives no randomness. */
int tg_uuid7(char out[TG_UUID_LEN + 1]);

/* A new API token "tg_" + 43 url-safe base64 characters (256 random bits) into out[48]. */
#define TG_TOKEN_LEN 46
int tg_token_new(char out[TG_TOKEN_LEN + 1]);

/* Lower-case hex SHA-256 of data into out[65]. */
void tg_sha256_hex(const void *data, size_t len, char out[65]);

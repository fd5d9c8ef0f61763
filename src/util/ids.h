/* Identifiers and secrets: UUIDv7 ids, random API tokens, SHA-256 digests and MACs.
 * Randomness comes from the kernel (getrandom); digests from GnuTLS, which libmicrohttpd
 * already loads and initializes: OpenSSL's provider set-up alone costs ~2 MiB resident. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define TG_UUID_LEN 36

/* n bytes from the kernel's generator; false when it has none to give. */
bool tg_random_bytes(void *out, size_t n);

/* Lower-case hex of n bytes into out[2n + 1]. */
void tg_hex(const void *bytes, size_t n, char *out);
/* The value of a hex digit (either case), or -1 for any other character. */
int tg_hex_digit(char c);

/* Writes a UUIDv7 (time-ordered, RFC 9562) as 36 characters plus NUL into out[37].
 * Returns 0, or TG_E_IO when the system gives no randomness. */
int tg_uuid7(char out[TG_UUID_LEN + 1]);

/* A new API token "tg_" + 43 url-safe base64 characters (256 random bits) into out[48]. */
#define TG_TOKEN_LEN 46
int tg_token_new(char out[TG_TOKEN_LEN + 1]);

/* SHA-256 of data into out[32]; lower-case hex of it into out[65]. Return 0 or TG_E_IO. */
int tg_sha256(const void *data, size_t len, unsigned char out[32]);
int tg_sha256_hex(const void *data, size_t len, char out[65]);

/* HMAC-SHA256 of data under key into out[32]. Returns 0 or TG_E_IO. */
int tg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                   unsigned char out[32]);

/* Whether a and b hold the same n bytes, in a time that does not depend on where they differ. */
bool tg_same_secret(const void *a, const void *b, size_t n);

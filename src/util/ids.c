#include "util/ids.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "util/status.h"

/* Ids made by this process sort in the order they were made, even within one millisecond:
 * the 12 bits after the version are a counter (RFC 9562 §6.2, method 1). */
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_ms;
static unsigned sequence;

bool tg_random_bytes(void *out, size_t n) {
  /* Above 256 bytes a signal can cut a read short: take the rest in more reads. */
  for (size_t got = 0; got < n;) {
    ssize_t r = getrandom((unsigned char *)out + got, n - got, 0);
    if (r < 0 && errno != EINTR) return false;
    if (r > 0) got += (size_t)r;
  }
  return true;
}

/* An id's random bits come from a buffer of each thread's, refilled from the kernel 512 bytes
 * at a time: a system call per id was two of a tool call's thirty. They are not secrets;
 * tokens and keys read the kernel directly. (The process never forks, which would copy the
 * buffer.) */
static _Thread_local struct {
  unsigned char buf[512];
  size_t left;
} id_random;

static bool id_random_bytes(unsigned char *out, size_t n) {
  if (id_random.left < n) {
    if (!tg_random_bytes(id_random.buf, sizeof id_random.buf)) return false;
    id_random.left = sizeof id_random.buf;
  }
  memcpy(out, id_random.buf + sizeof id_random.buf - id_random.left, n);
  id_random.left -= n;
  return true;
}

int tg_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void tg_hex(const void *bytes, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++) {
    *out++ = digits[b[i] >> 4];
    *out++ = digits[b[i] & 15];
  }
  *out = '\0';
}

int tg_uuid7(char out[TG_UUID_LEN + 1]) {
  unsigned char b[16];
  if (!id_random_bytes(b + 8, 8)) return TG_E_IO;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  pthread_mutex_lock(&clock_lock);
  if (ms <= last_ms) {
    ms = last_ms;
    if (++sequence > 0xfff) {
      ms++;
      sequence = 0;
    }
  } else {
    sequence = 0;
  }
  last_ms = ms;
  unsigned seq = sequence;
  pthread_mutex_unlock(&clock_lock);
  for (int i = 0; i < 6; i++) b[i] = (unsigned char)(ms >> (40 - 8 * i));
  b[6] = (unsigned char)(0x70 | (seq >> 8));
  b[7] = (unsigned char)(seq & 0xff);
  b[8] = (unsigned char)(0x80 | (b[8] & 0x3f));
  /* 8-4-4-4-12 hex digits */
  tg_hex(b, 4, out);
  out[8] = '-';
  tg_hex(b + 4, 2, out + 9);
  out[13] = '-';
  tg_hex(b + 6, 2, out + 14);
  out[18] = '-';
  tg_hex(b + 8, 2, out + 19);
  out[23] = '-';
  tg_hex(b + 10, 6, out + 24);
  return TG_OK;
}

int tg_token_new(char out[TG_TOKEN_LEN + 1]) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  unsigned char raw[43];
  if (!tg_random_bytes(raw, sizeof raw)) return TG_E_IO;
  memcpy(out, "tg_", 3);
  for (size_t i = 0; i < sizeof raw; i++) out[3 + i] = alphabet[raw[i] & 63];
  out[TG_TOKEN_LEN] = '\0';
  return TG_OK;
}

int tg_sha256(const void *data, size_t len, unsigned char out[32]) {
  return gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) == 0 ? TG_OK : TG_E_IO;
}

int tg_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char md[32];
  if (tg_sha256(data, len, md) < 0) return TG_E_IO;
  tg_hex(md, sizeof md, out);
  return TG_OK;
}

int tg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                   unsigned char out[32]) {
  return gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, key_len, data, len, out) == 0 ? TG_OK
                                                                                 : TG_E_IO;
}

bool tg_same_secret(const void *a, const void *b, size_t n) { return gnutls_memcmp(a, b, n) == 0; }

/* SHA-256 (FIPS 180-4): a streaming context, a one-shot helper and
 * lowercase hex.  Pure: no libc beyond memcpy/memset, no global state.
 * The library (base/hmac.c) and the test programs link it. */
#ifndef SDPSHIM_SHA256_H
#define SDPSHIM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_BLOCK_LEN  64
#define SHA256_HEX_LEN    64 /* characters, without the terminating NUL */

typedef struct sha256_ctx {
	uint32_t state[8];
	uint64_t total;                  /* bytes fed so far */
	uint8_t block[SHA256_BLOCK_LEN]; /* partial input block */
	size_t used;                     /* bytes held in block[] */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
/* Writes the digest and wipes the context (call sha256_init to reuse it). */
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_DIGEST_LEN]);

/* One-shot convenience. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);

/* Lowercase hex; out must hold SHA256_HEX_LEN + 1 bytes.  Returns out. */
char *sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char out[SHA256_HEX_LEN + 1]);

#endif

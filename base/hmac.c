/* Owns HMAC-SHA256 (RFC 2104, with SHA-256 from base/sha256.c) and the
 * constant-time compare for tags.  See base/hmac.h. */
#include <string.h>

#include "base/hmac.h"
#include "base/sha256.h"

#define HMAC_IPAD 0x36
#define HMAC_OPAD 0x5c

/* RFC 2104: H(K ^ opad, H(K ^ ipad, msg)), K the key zero-padded to the
 * block length B (64), or the key's own digest, padded, if it is longer
 * than B. */
void hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
		 uint8_t out[HMAC_SHA256_LEN])
{
	uint8_t k[SHA256_BLOCK_LEN] = { 0 };
	uint8_t pad[SHA256_BLOCK_LEN];
	uint8_t inner[SHA256_DIGEST_LEN];
	sha256_ctx c;

	if (key_len > SHA256_BLOCK_LEN)
		sha256(key, key_len, k);
	else if (key_len)
		memcpy(k, key, key_len);

	for (size_t i = 0; i < SHA256_BLOCK_LEN; i++)
		pad[i] = k[i] ^ HMAC_IPAD;
	sha256_init(&c);
	sha256_update(&c, pad, sizeof(pad));
	sha256_update(&c, msg, msg_len);
	sha256_final(&c, inner);

	for (size_t i = 0; i < SHA256_BLOCK_LEN; i++)
		pad[i] = k[i] ^ HMAC_OPAD;
	sha256_init(&c);
	sha256_update(&c, pad, sizeof(pad));
	sha256_update(&c, inner, sizeof(inner));
	sha256_final(&c, out);

	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
	explicit_bzero(inner, sizeof(inner));
}

bool ct_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t diff = 0;

	/* Volatile reads: the compiler may neither stop once diff is all ones
	 * nor turn the loop into a memcmp that returns at the first
	 * difference. */
	for (size_t i = 0; i < n; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

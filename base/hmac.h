/* HMAC-SHA256 (RFC 2104 over base/sha256.c) and a constant-time compare
 * for checking a received tag against the expected one.  Pure: no global
 * state, no libc beyond memcpy/memset/explicit_bzero. */
#ifndef SDPSHIM_HMAC_H
#define SDPSHIM_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HMAC_SHA256_LEN 32

/* out = HMAC-SHA256(key, msg).  A key longer than the 64-byte block is
 * hashed first (RFC 2104, section 2); any length, 0 included, is allowed.
 * out may overlap key or msg: it is written last.  The padded key and the
 * inner digest are wiped before return. */
void hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
		 uint8_t out[HMAC_SHA256_LEN]);

/* True if the n bytes at a and b are equal (n == 0: true).  The time taken
 * depends on n only, never on the contents or where they first differ:
 * every byte is read, with no early exit. */
bool ct_equal(const void *a, const void *b, size_t n);

#endif

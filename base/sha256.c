/* Owns SHA-256 (FIPS 180-4): the block function, the streaming context,
 * the one-shot helper and hex.  Plain portable C, written for clarity
 * rather than speed.  See base/sha256.h. */
#include <string.h>

#include "base/sha256.h"

/* First 32 bits of the fractional parts of the cube roots of the first
 * 64 primes (FIPS 180-4, section 4.2.2). */
static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Initial hash value: square roots of the first 8 primes (section 5.3.3). */
static const uint32_t H0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static inline uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Process one 64-byte block into the state. */
static void compress(uint32_t st[8], const uint8_t *blk)
{
	uint32_t w[64];

	for (int i = 0; i < 16; i++)
		w[i] = load_be32(blk + 4 * i);
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}

	uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
	uint32_t e = st[4], f = st[5], g = st[6], h = st[7];

	for (int i = 0; i < 64; i++) {
		uint32_t S1 = ror(e, 6) ^ ror(e, 11) ^ ror(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = h + S1 + ch + K[i] + w[i];
		uint32_t S0 = ror(a, 2) ^ ror(a, 13) ^ ror(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = S0 + maj;

		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	st[0] += a;
	st[1] += b;
	st[2] += c;
	st[3] += d;
	st[4] += e;
	st[5] += f;
	st[6] += g;
	st[7] += h;
}

void sha256_init(sha256_ctx *c)
{
	memcpy(c->state, H0, sizeof(H0));
	c->total = 0;
	c->used = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	c->total += len;
	if (c->used) { /* top up a partial block first */
		size_t take = SHA256_BLOCK_LEN - c->used;

		if (take > len)
			take = len;
		memcpy(c->block + c->used, p, take);
		c->used += take;
		p += take;
		len -= take;
		if (c->used < SHA256_BLOCK_LEN)
			return;
		compress(c->state, c->block);
		c->used = 0;
	}
	for (; len >= SHA256_BLOCK_LEN; p += SHA256_BLOCK_LEN, len -= SHA256_BLOCK_LEN)
		compress(c->state, p);
	if (len) {
		memcpy(c->block, p, len);
		c->used = len;
	}
}

void sha256_final(sha256_ctx *c, uint8_t out[SHA256_DIGEST_LEN])
{
	uint64_t bits = c->total * 8;

	/* Padding: 0x80, zeros up to 56 mod 64, then the 64-bit big-endian length. */
	c->block[c->used++] = 0x80;
	if (c->used > 56) {
		memset(c->block + c->used, 0, SHA256_BLOCK_LEN - c->used);
		compress(c->state, c->block);
		c->used = 0;
	}
	memset(c->block + c->used, 0, 56 - c->used);
	store_be32(c->block + 56, (uint32_t)(bits >> 32));
	store_be32(c->block + 60, (uint32_t)bits);
	compress(c->state, c->block);
	for (int i = 0; i < 8; i++)
		store_be32(out + 4 * i, c->state[i]);
	/* Not a plain memset, which a compiler may drop as a dead store: the
	 * context may hold key material (base/hmac.c). */
	explicit_bzero(c, sizeof(*c));
}

void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN])
{
	sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, data, len);
	sha256_final(&c, out);
}

char *sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char out[SHA256_HEX_LEN + 1])
{
	static const char hexd[] = "0123456789abcdef";

	for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
		out[2 * i] = hexd[digest[i] >> 4];
		out[2 * i + 1] = hexd[digest[i] & 15];
	}
	out[SHA256_HEX_LEN] = '\0';
	return out;
}

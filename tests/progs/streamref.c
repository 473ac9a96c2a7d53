/* streamref: the reference SHA-256 of a tests/progs/stream byte stream, computed
 * without any socket, so the VM suite can compare what a receiver over RDMA
 * reports against an independent digest (both ends agreeing on garbage cannot
 * pass).  Usage: streamref SEED BYTES   (BYTES may end in k, M or G)
 *
 * The stream's definition (see stream.c): 64-bit word j of the stream is
 * splitmix64 applied once to the state SEED ^ (j * 0x2545f4914f6cdd1d), and the
 * words are laid out little-endian.  Message sizes do not change the bytes.
 * For "-d both", the client sends with SEED ^ 1 and the server with SEED ^ 2. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sha256.h"

static uint64_t word_of(uint64_t seed, uint64_t j)
{
	uint64_t z = (seed ^ (j * 0x2545f4914f6cdd1dULL)) + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (*end) {
	case 'k': case 'K': return v << 10;
	case 'm': case 'M': return v << 20;
	case 'g': case 'G': return v << 30;
	case '\0': return v;
	default:
		fprintf(stderr, "streamref: bad size %s\n", s);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	enum { CHUNK_WORDS = 8192 };
	static uint8_t buf[CHUNK_WORDS * 8];
	uint64_t seed, bytes, done = 0, j = 0;
	sha256_ctx sha;
	uint8_t digest[SHA256_DIGEST_LEN];
	char hex[SHA256_HEX_LEN + 1];

	if (argc != 3) {
		fprintf(stderr, "usage: streamref SEED BYTES\n");
		return 2;
	}
	seed = strtoull(argv[1], NULL, 0);
	bytes = parse_size(argv[2]);
	sha256_init(&sha);
	while (done < bytes) {
		size_t n = 0;
		for (int w = 0; w < CHUNK_WORDS; w++, j++) {
			uint64_t v = word_of(seed, j);
			for (int k = 0; k < 8; k++)
				buf[n++] = (uint8_t)(v >> (8 * k));
		}
		if (n > bytes - done)
			n = (size_t)(bytes - done);
		sha256_update(&sha, buf, n);
		done += n;
	}
	sha256_final(&sha, digest);
	printf("%s\n", sha256_hex(digest, hex));
	return 0;
}

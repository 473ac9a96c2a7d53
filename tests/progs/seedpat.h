/* seedpat.h: the seeded byte streams of tests/progs/manyconn and tests/progs/hol.
 * Byte pos of stream s is byte (pos % 8) of word pos / 8 (least significant
 * first), and every word is a pure function of (s, pos / 8): any range of any
 * stream can be made or checked without the bytes before it, so a program
 * with thousands of connections keeps no copy of what it sent. */
#ifndef SDPSHIM_TESTS_SEEDPAT_H
#define SDPSHIM_TESTS_SEEDPAT_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t seedpat_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint64_t seedpat_word(uint64_t stream, uint64_t word)
{
	return seedpat_mix(seedpat_mix(stream + 0x632be59bd9b4e019ULL) +
			   (word + 1) * 0x9e3779b97f4a7c15ULL);
}

static inline uint8_t seedpat_byte(uint64_t stream, uint64_t pos)
{
	return (uint8_t)(seedpat_word(stream, pos / 8) >> (8 * (pos % 8)));
}

/* Bytes off..off+len of stream into buf. */
static inline void seedpat_fill(uint64_t stream, uint64_t off, uint8_t *buf, size_t len)
{
	size_t i = 0;

	for (; i < len && (off + i) % 8; i++)
		buf[i] = seedpat_byte(stream, off + i);
	for (; len - i >= 8; i += 8) {
		uint64_t w = htole64(seedpat_word(stream, (off + i) / 8));
		memcpy(buf + i, &w, 8);
	}
	for (; i < len; i++)
		buf[i] = seedpat_byte(stream, off + i);
}

/* Index in buf of the first byte that differs from bytes off..off+len of the
 * stream, or -1 when all agree. */
static inline long seedpat_check(uint64_t stream, uint64_t off, const uint8_t *buf, size_t len)
{
	uint8_t want[512];

	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(want) ? len - done : sizeof(want);

		seedpat_fill(stream, off + done, want, n);
		if (memcmp(want, buf + done, n) != 0) {
			for (size_t i = 0; i < n; i++)
				if (want[i] != buf[done + i])
					return (long)(done + i);
		}
		done += n;
	}
	return -1;
}

#endif

/* The byte stream the rogue peer (tests/progs/rogue peer) sends, and what
 * canary.c expects of it: byte o of the stream is a pure function of o, so any
 * range checks on its own.  The canary's fill repeats CANARY_FILL, which this
 * stream never reproduces for CANARY_RUN bytes in a row. */
#ifndef SDPSHIM_TESTS_LIE_PATTERN_H
#define SDPSHIM_TESTS_LIE_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#define CANARY_FILL "CANARY!!"
#define CANARY_RUN  64

static inline uint8_t lie_pattern(uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint8_t)(x >> (8 * (off & 7)));
}

static inline void lie_pattern_fill(uint8_t *buf, size_t len, uint64_t off)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = lie_pattern(off + i);
}

/* Bytes of buf[0..len) that differ from the stream at off. */
static inline size_t lie_pattern_mismatches(const uint8_t *buf, size_t len, uint64_t off)
{
	size_t bad = 0;

	for (size_t i = 0; i < len; i++)
		bad += buf[i] != lie_pattern(off + i);
	return bad;
}

static inline uint8_t canary_byte(size_t pos)
{
	return (uint8_t)CANARY_FILL[pos % (sizeof(CANARY_FILL) - 1)];
}

#endif

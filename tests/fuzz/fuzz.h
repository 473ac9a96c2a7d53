/* Shared by the wire-format harnesses (tests/fuzz/fuzz_*.c): invariant checks
 * that name the broken invariant before they trap, big-endian readers for the
 * harnesses' own models of the format, and UBSan made fatal (the Makefile
 * builds with -fsanitize=undefined, whose reports otherwise only print). */
#ifndef SDPSHIM_TESTS_FUZZ_H
#define SDPSHIM_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

const char *__ubsan_default_options(void)
{
	return "halt_on_error=1:print_stacktrace=1";
}

#define CHECK(cond)                                                                     \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__,    \
				__LINE__, #cond);                                       \
			__builtin_trap();                                               \
		}                                                                       \
	} while (0)

static inline uint16_t be16_at(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t be32_at(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64_at(const uint8_t *p)
{
	return (uint64_t)be32_at(p) << 32 | be32_at(p + 4);
}

/* Every error a decoder returns is a known one, with its own text. */
static inline void check_error_text(enum sdp_wire_error err)
{
	const char *text = sdp_wire_error_text(err);

	CHECK((unsigned)err <= SDP_WIRE_BAD_FIELD);
	CHECK(text != NULL && strcmp(text, "unknown wire error") != 0);
}

/* A parameter the harness reads from the front of its input (reason_count):
 * two bytes, big-endian; 0xffff stands for UINT32_MAX. */
static inline unsigned take_count16(const uint8_t **data, size_t *size)
{
	unsigned v = be16_at(*data);

	*data += 2;
	*size -= 2;
	return v == 0xffff ? UINT32_MAX : v;
}

#endif

/* Shared by the wire-format harnesses (tests/fuzz/fuzz_*.c): invariant checks
 * that name the broken invariant before they trap, big-endian and native-endian
 * readers for the harnesses' own models of the format, and UBSan made fatal (the Makefile
 * builds with -fsanitize=undefined, whose reports otherwise only print). */
#ifndef SDPSHIM_TESTS_FUZZ_H
#define SDPSHIM_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Native-endian readers at any alignment (for host-order formats: the
 * stats segment, netlink). */
static inline uint16_t ne16_at(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint32_t ne32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t ne64_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Every error a decoder returns is a known one, with its own text. */
static inline void check_error_text(enum sdp_wire_error err)
{
	const char *text = sdp_wire_error_text(err);

	CHECK((unsigned)err <= SDP_WIRE_BAD_FIELD);
	CHECK(text != NULL && strcmp(text, "unknown wire error") != 0);
}

/* What a model found wrong with a message that has a preamble (magic,
 * version, flags) and range-checked fields: Hello, HelloAck, SWITCH. */
struct preamble_broken {
	bool shortmsg, magic, version, flags, field;
};

/* The decoder's verdict err is OK exactly when the model finds nothing
 * wrong, and every error it returns names a rule the input breaks. */
static inline void check_preamble_verdict(enum sdp_wire_error err, const struct preamble_broken *b)
{
	bool ok = !b->shortmsg && !b->magic && !b->version && !b->flags && !b->field;

	CHECK((err == SDP_WIRE_OK) == ok);
	CHECK((err == SDP_WIRE_SHORT) == b->shortmsg);
	CHECK(err != SDP_WIRE_BAD_MAGIC || b->magic);
	CHECK(err != SDP_WIRE_BAD_VERSION || b->version);
	CHECK(err != SDP_WIRE_BAD_FLAGS || b->flags);
	CHECK(err != SDP_WIRE_BAD_FIELD || b->field);
	CHECK(err != SDP_WIRE_BAD_LENGTH && err != SDP_WIRE_BAD_MID);
}

/* Only the message's own `own` bytes count: decoding exactly those gives
 * the same verdict, and a copy one byte short (in a buffer of that size,
 * so ASan sees any read past it) is SHORT.  decode: the decoder under test,
 * with its other arguments bound by the harness. */
static inline void check_own_bytes(enum sdp_wire_error (*decode)(const uint8_t *, size_t),
				   const uint8_t *data, size_t size, size_t own,
				   enum sdp_wire_error err)
{
	uint8_t *copy;

	if (size < own)
		return;
	CHECK(decode(data, own) == err);
	copy = malloc(own - 1);
	CHECK(copy != NULL);
	memcpy(copy, data, own - 1);
	CHECK(decode(copy, own - 1) == SDP_WIRE_SHORT);
	free(copy);
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

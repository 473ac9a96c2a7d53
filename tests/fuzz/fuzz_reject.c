/* libFuzzer harness for the reject private data (decoded by the client:
 * core/cm_client.c): sdp_reject_from_wire.  Input: the private data as
 * received, every byte of it.
 *
 * Checked against core/wire.h: the result is 0 ("not an sdpshim reject") for
 * fewer bytes than a reject, for NULL and for another magic, and otherwise
 * the code byte; version and pad are not checked (a server of another
 * version must still be understood), so nothing else may matter; bytes after
 * the reject change nothing; a reject encoded with this code (and with a
 * few others) has the documented bytes and decodes to its code. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

#define REJECT_SIZE sizeof(struct sdp_reject_wire)

_Static_assert(offsetof(struct sdp_reject_wire, version) == 4, "layout");
_Static_assert(offsetof(struct sdp_reject_wire, code) == 5, "layout");
_Static_assert(offsetof(struct sdp_reject_wire, pad) == 6, "layout");
_Static_assert(sizeof(struct sdp_reject_wire) == 8, "layout");

static uint8_t model(const uint8_t *m, size_t n)
{
	if (n < REJECT_SIZE || be32_at(m) != SDP_HELLO_MAGIC)
		return 0;
	return m[5];
}

static void check_encode(uint8_t code)
{
	struct sdp_reject_wire w;
	const uint8_t *p = (const uint8_t *)&w;

	memset(&w, 0xa5, sizeof(w));
	sdp_reject_to_wire(code, &w);
	CHECK(be32_at(p) == SDP_HELLO_MAGIC && p[4] == SDP_WIRE_VERSION && p[5] == code);
	CHECK(p[6] == 0 && p[7] == 0);
	CHECK(sdp_reject_from_wire(&w, sizeof(w)) == code);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t code = sdp_reject_from_wire(data, size);

	CHECK(code == model(data, size));
	CHECK(sdp_reject_from_wire(data, size) == code);
	CHECK(sdp_reject_from_wire(NULL, size) == 0);
	if (size >= REJECT_SIZE) {
		uint8_t *copy = malloc(REJECT_SIZE);

		CHECK(copy != NULL);
		memcpy(copy, data, REJECT_SIZE);
		CHECK(sdp_reject_from_wire(copy, REJECT_SIZE) == code);
		CHECK(sdp_reject_from_wire(copy, REJECT_SIZE - 1) == 0);
		/* Version and pad do not matter. */
		copy[4] ^= 0xff;
		copy[6] ^= 0x5a;
		copy[7] ^= 0xa5;
		CHECK(sdp_reject_from_wire(copy, REJECT_SIZE) == code);
		free(copy);
		check_encode(data[5]);
	}
	check_encode(SDP_REJECT_VERSION);
	check_encode(SDP_REJECT_TUPLE);
	return 0;
}

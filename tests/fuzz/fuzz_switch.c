/* libFuzzer harness for the SWITCH record read from the kernel TCP socket
 * when a stream moves there (core/switch.c): sdp_switch_from_wire.
 *
 * Input: two bytes, big-endian, for reason_count (0xffff = UINT32_MAX; the
 * library passes SDP_REASON_COUNT), then the bytes as read.
 *
 * Checked: the decoder accepts exactly what core/wire.h allows (the model
 * below: Hello magic, version, flags 0, reason < reason_count); an error
 * names a rule the record breaks; an accepted record has reason <
 * reason_count, every field written, equal to the bytes, and re-encodes
 * (sdp_switch_to_wire) to the same 16 bytes, which decode to the same struct;
 * bytes after the record (the resent stream) change nothing; one byte short,
 * or NULL, is SHORT. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/reason.h"
#include "tests/fuzz/fuzz.h"

_Static_assert(offsetof(struct sdp_switch_wire, version) == 4, "layout");
_Static_assert(offsetof(struct sdp_switch_wire, reason) == 5, "layout");
_Static_assert(offsetof(struct sdp_switch_wire, flags) == 6, "layout");
_Static_assert(offsetof(struct sdp_switch_wire, resend_from) == 8, "layout");
_Static_assert(SDP_SWITCH_SIZE == 16, "a 16-byte SWITCH record (README)");
_Static_assert(SDP_REASON_COUNT <= 0xffff, "reason_count fits the input's two bytes");


static struct preamble_broken model(const uint8_t *m, size_t n, unsigned reason_count)
{
	struct preamble_broken b = { 0 };

	if (n < SDP_SWITCH_SIZE) {
		b.shortmsg = true;
		return b;
	}
	b.magic = be32_at(m) != SDP_HELLO_MAGIC;
	b.version = m[4] != SDP_WIRE_VERSION;
	b.flags = be16_at(m + 6) != 0;
	b.field = m[5] >= reason_count;
	return b;
}

/* The harness's reason_count, for decode(). */
static unsigned harness_reason_count;

static enum sdp_wire_error decode(const uint8_t *in, size_t len)
{
	struct sdp_switch out;

	return sdp_switch_from_wire(in, len, harness_reason_count, &out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_switch sw[2], again;
	struct sdp_switch_wire out;
	unsigned reason_count;
	struct preamble_broken b;
	enum sdp_wire_error err;

	if (size < 2)
		return 0;
	reason_count = take_count16(&data, &size);
	harness_reason_count = reason_count;
	b = model(data, size, reason_count);

	memset(&sw[0], 0x00, sizeof(sw[0]));
	memset(&sw[1], 0xff, sizeof(sw[1]));
	err = sdp_switch_from_wire(data, size, reason_count, &sw[0]);
	CHECK(sdp_switch_from_wire(data, size, reason_count, &sw[1]) == err);
	CHECK(sdp_switch_from_wire(NULL, size, reason_count, &again) == SDP_WIRE_SHORT);
	check_error_text(err);

	check_preamble_verdict(err, &b);
	check_own_bytes(decode, data, size, SDP_SWITCH_SIZE, err);
	if (err != SDP_WIRE_OK)
		return 0;

	for (int i = 0; i < 2; i++)
		CHECK(sw[i].reason == data[5] && sw[i].resend_from == be64_at(data + 8));
	CHECK(sw[0].reason < reason_count);

	memset(&out, 0x5a, sizeof(out));
	sdp_switch_to_wire(&sw[0], &out);
	CHECK(memcmp(&out, data, SDP_SWITCH_SIZE) == 0);
	CHECK(sdp_switch_from_wire(&out, sizeof(out), reason_count, &again) == SDP_WIRE_OK);
	CHECK(again.reason == sw[0].reason && again.resend_from == sw[0].resend_from);
	return 0;
}

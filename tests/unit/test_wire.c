/* Unit tests (TAP) for core/wire.c: the SWITCH record that starts a move
 * of the stream to TCP (round trip, and every malformed field refused),
 * and the base header's length and mid checks. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/wire.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define REASONS 20u

static void encode(uint8_t reason, uint64_t resend_from, uint8_t out[SDP_SWITCH_SIZE])
{
	struct sdp_switch sw = { .reason = reason, .resend_from = resend_from };
	struct sdp_switch_wire w;

	sdp_switch_to_wire(&sw, &w);
	memcpy(out, &w, sizeof(w));
}

static int test_switch_round_trip(void)
{
	uint8_t buf[SDP_SWITCH_SIZE];
	struct sdp_switch got = { 0 };
	enum sdp_wire_error err;

	encode(7, 0x0123456789abcdefull, buf);
	err = sdp_switch_from_wire(buf, sizeof(buf), REASONS, &got);
	return check(SDP_SWITCH_SIZE == 16, "record is %zu bytes", SDP_SWITCH_SIZE) &&
	       check(err == SDP_WIRE_OK, "decode: %s", sdp_wire_error_text(err)) &&
	       check(got.reason == 7, "reason %u", got.reason) &&
	       check(got.resend_from == 0x0123456789abcdefull, "offset %llx",
		     (unsigned long long)got.resend_from);
}

static int test_switch_big_endian(void)
{
	uint8_t buf[SDP_SWITCH_SIZE];

	encode(1, 0x0102030405060708ull, buf);
	return check(buf[0] == 'S' && buf[1] == 'D' && buf[2] == 'P' && buf[3] == 'S', "magic") &&
	       check(buf[8] == 1 && buf[15] == 8, "offset bytes %u..%u", buf[8], buf[15]);
}

static int test_switch_short(void)
{
	uint8_t buf[SDP_SWITCH_SIZE];
	struct sdp_switch got;
	int ok = 1;

	encode(1, 42, buf);
	for (size_t len = 0; len < sizeof(buf); len++)
		ok &= check(sdp_switch_from_wire(buf, len, REASONS, &got) == SDP_WIRE_SHORT,
			    "length %zu accepted", len);
	ok &= check(sdp_switch_from_wire(NULL, sizeof(buf), REASONS, &got) == SDP_WIRE_SHORT,
		    "NULL accepted");
	return ok;
}

static int expect(const uint8_t *buf, enum sdp_wire_error want, const char *what)
{
	struct sdp_switch got;
	enum sdp_wire_error err = sdp_switch_from_wire(buf, SDP_SWITCH_SIZE, REASONS, &got);

	return check(err == want, "%s: got '%s', want '%s'", what, sdp_wire_error_text(err),
		     sdp_wire_error_text(want));
}

static int test_switch_bad_fields(void)
{
	uint8_t buf[SDP_SWITCH_SIZE];
	int ok = 1;

	encode(1, 42, buf);
	buf[0] ^= 0xff;
	ok &= expect(buf, SDP_WIRE_BAD_MAGIC, "magic");
	encode(1, 42, buf);
	buf[4] = SDP_WIRE_VERSION + 1;
	ok &= expect(buf, SDP_WIRE_BAD_VERSION, "version");
	encode(1, 42, buf);
	buf[7] = 1;
	ok &= expect(buf, SDP_WIRE_BAD_FLAGS, "flags");
	encode(REASONS, 42, buf);
	ok &= expect(buf, SDP_WIRE_BAD_FIELD, "reason out of range");
	encode(REASONS - 1, 42, buf);
	ok &= expect(buf, SDP_WIRE_OK, "last reason");
	return ok;
}

/* Application bytes that happen to follow an idle socket are not a record. */
static int test_switch_plain_text(void)
{
	const char text[SDP_SWITCH_SIZE] = "GET / HTTP/1.1\r";

	return expect((const uint8_t *)text, SDP_WIRE_BAD_MAGIC, "plain text");
}

static int test_bsdh_length(void)
{
	uint8_t buf[64] = { 0 };
	struct sdp_bsdh h = { .mid = SDP_MID_DATA, .len = 40, .mseq = 1 }, got;
	int ok = 1;

	sdp_bsdh_to_wire(&h, buf);
	ok &= check(sdp_bsdh_from_wire(buf, 40, 4096, &got) == SDP_WIRE_OK, "valid DATA");
	ok &= check(sdp_bsdh_from_wire(buf, 39, 4096, &got) != SDP_WIRE_OK, "len > received");
	ok &= check(sdp_bsdh_from_wire(buf, 40, 32, &got) != SDP_WIRE_OK, "len > buffer");
	h.mid = 0x7f;
	sdp_bsdh_to_wire(&h, buf);
	ok &= check(sdp_bsdh_from_wire(buf, 40, 4096, &got) == SDP_WIRE_BAD_MID, "unknown mid");
	return ok;
}

static const struct tap_case cases[] = {
	{ "SWITCH record: 16 bytes, round trip of reason and offset", test_switch_round_trip },
	{ "SWITCH record: magic SDPS and a big-endian offset", test_switch_big_endian },
	{ "SWITCH record: every shorter length is refused", test_switch_short },
	{ "SWITCH record: bad magic, version, flags, reason refused", test_switch_bad_fields },
	{ "SWITCH record: plain application bytes are refused", test_switch_plain_text },
	{ "base header: length and mid checks", test_bsdh_length },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}

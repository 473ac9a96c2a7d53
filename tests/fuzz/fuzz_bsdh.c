/* libFuzzer harness for the base header of every RDMA message (core/wire.c):
 * sdp_bsdh_from_wire with sdp_mid_fixed_len, the control extension
 * (sdp_ext_from_wire/to_wire) and COMMIT's nonce (sdp_nonce_from_ext/to_ext).
 *
 * Input: one selector byte that picks buf_size, then the message as received
 * (its whole length is `received`).  A selector below 0xf0 takes buf_size
 * from pick_buf_size()'s table (limits and values next to the message
 * length); 0xf0 and above takes the next 4 bytes, big-endian.
 *
 * Checked: the decoder accepts exactly what core/wire.h's rules allow (the
 * model below is written from the header, not from wire.c); an error names a
 * rule the message breaks; an accepted header has len == received <=
 * buf_size, a known mid with its fixed length (DATA: more than the header),
 * known flags, bufs <= SDP_MAX_BUF_COUNT, every field written, and
 * re-encodes to the same 16 bytes; the same message one byte short, or in a
 * buffer one byte smaller, is refused; an extension re-encodes to the same 24
 * bytes; COMMIT's nonce is the extension's c and d bytes, both ways. */
#include <stdbool.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

_Static_assert(SDP_BSDH_SIZE == 16, "base header is 16 bytes on the wire");
_Static_assert(SDP_EXT_SIZE == 24, "control extension is 24 bytes on the wire");

/* Message length a mid requires, from the enum and extension comments of
 * core/wire.h: 0 = DATA (variable), -1 = unknown mid. */
static long model_fixed_len(uint8_t mid)
{
	switch (mid) {
	case SDP_MID_DATA:
		return 0;
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_DISCONN:
	case SDP_MID_KEEPALIVE:
	case SDP_MID_ATTACH:
		return 16;
	case SDP_MID_ABORT:
	case SDP_MID_DETACH:
	case SDP_MID_COMMIT:
	case SDP_MID_SRC_AVAIL:
	case SDP_MID_RDMA_RD_COMPL:
	case SDP_MID_SRC_CANCEL:
	case SDP_MID_SINK_AVAIL:
	case SDP_MID_RDMA_WR_COMPL:
	case SDP_MID_SINK_CANCEL:
	case SDP_MID_SINK_CANCEL_ACK:
	case SDP_MID_SWITCH:
		return 16 + 24;
	}
	return -1;
}

/* Which of the header's rules the message breaks. */
struct broken {
	bool shortmsg, length, mid, flags, field;
};

static struct broken model(const uint8_t *m, size_t n, uint32_t buf_size)
{
	struct broken b = { 0 };
	uint32_t len;
	long fixed;

	if (n < 16) {
		b.shortmsg = true;
		return b;
	}
	len = be32_at(m + 4);
	fixed = model_fixed_len(m[0]);
	b.length = len != n || len > buf_size || (fixed > 0 && len != (uint32_t)fixed) ||
		   (fixed == 0 && len == 16);
	b.mid = fixed < 0;
	b.flags = (m[1] & ~SDP_FLAG_STARVING) != 0;
	b.field = be16_at(m + 2) > 1024;
	return b;
}

static uint32_t pick_buf_size(uint8_t sel, size_t n)
{
	uint32_t len = (uint32_t)n;

	switch (sel % 12) {
	case 0:  return SDP_MIN_BUF_SIZE;
	case 1:  return SDP_MAX_BUF_SIZE;
	case 2:  return 65536;
	case 3:  return len;
	case 4:  return len - 1; /* UINT32_MAX for an empty message */
	case 5:  return len + 1;
	case 6:  return 0;
	case 7:  return 16;
	case 8:  return 40;
	case 9:  return 39;
	case 10: return UINT32_MAX;
	default: return 8192;
	}
}

static void check_ext(const uint8_t *x)
{
	struct sdp_ext e, e2;
	uint8_t out[24], nonce[SDP_NONCE_SIZE];

	sdp_ext_from_wire(x, &e);
	CHECK(e.a == be32_at(x) && e.b == be32_at(x + 4));
	CHECK(e.c == be64_at(x + 8) && e.d == be64_at(x + 16));
	sdp_ext_to_wire(&e, out);
	CHECK(memcmp(out, x, sizeof(out)) == 0);
	/* COMMIT: the client's nonce is the c and d bytes as they travel. */
	sdp_nonce_from_ext(&e, nonce);
	CHECK(memcmp(nonce, x + 8, SDP_NONCE_SIZE) == 0);
	memset(&e2, 0xa5, sizeof(e2));
	sdp_nonce_to_ext(nonce, &e2);
	CHECK(e2.c == e.c && e2.d == e.d);
}

static enum sdp_wire_error decode_exact(const uint8_t *m, size_t n, uint32_t buf_size)
{
	uint8_t *copy = malloc(n ? n : 1);
	struct sdp_bsdh h;
	enum sdp_wire_error err;

	CHECK(copy != NULL);
	memcpy(copy, m, n);
	err = sdp_bsdh_from_wire(copy, n, buf_size, &h);
	free(copy);
	return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_bsdh h[2];
	uint8_t out[16];
	uint32_t buf_size;
	struct broken b;
	enum sdp_wire_error err;
	bool ok;

	if (size < 1)
		return 0;
	if (data[0] >= 0xf0) {
		if (size < 5)
			return 0;
		buf_size = be32_at(data + 1);
		data += 5;
		size -= 5;
	} else {
		buf_size = pick_buf_size(data[0], size - 1);
		data += 1;
		size -= 1;
	}

	if (size >= 1) {
		long fixed = model_fixed_len(data[0]);
		size_t got = sdp_mid_fixed_len(data[0]);

		CHECK(fixed < 0 ? got == (size_t)-1 : got == (size_t)fixed);
	}
	if (size >= 40)
		check_ext(data + 16);

	b = model(data, size, buf_size);
	memset(&h[0], 0x00, sizeof(h[0]));
	memset(&h[1], 0xff, sizeof(h[1]));
	err = sdp_bsdh_from_wire(data, size, buf_size, &h[0]);
	CHECK(sdp_bsdh_from_wire(data, size, buf_size, &h[1]) == err);
	check_error_text(err);

	ok = !b.shortmsg && !b.length && !b.mid && !b.flags && !b.field;
	CHECK((err == SDP_WIRE_OK) == ok);
	CHECK((err == SDP_WIRE_SHORT) == b.shortmsg);
	CHECK(err != SDP_WIRE_BAD_LENGTH || b.length);
	CHECK(err != SDP_WIRE_BAD_MID || b.mid);
	CHECK(err != SDP_WIRE_BAD_FLAGS || b.flags);
	CHECK(err != SDP_WIRE_BAD_FIELD || b.field);
	CHECK(err != SDP_WIRE_BAD_MAGIC && err != SDP_WIRE_BAD_VERSION);
	if (err != SDP_WIRE_OK)
		return 0;

	for (int i = 0; i < 2; i++) {
		CHECK(h[i].mid == data[0] && h[i].flags == data[1]);
		CHECK(h[i].bufs == be16_at(data + 2) && h[i].len == be32_at(data + 4));
		CHECK(h[i].mseq == be32_at(data + 8) && h[i].mseq_ack == be32_at(data + 12));
	}
	CHECK(h[0].len == size && h[0].len <= buf_size && h[0].len >= SDP_BSDH_SIZE);
	CHECK(sdp_mid_fixed_len(h[0].mid) == 0 ? h[0].mid == SDP_MID_DATA && h[0].len > SDP_BSDH_SIZE
						: h[0].len == sdp_mid_fixed_len(h[0].mid));
	CHECK((h[0].flags & ~SDP_FLAG_KNOWN) == 0);
	CHECK(h[0].bufs <= SDP_MAX_BUF_COUNT);

	sdp_bsdh_to_wire(&h[0], out);
	CHECK(memcmp(out, data, sizeof(out)) == 0);

	/* One byte missing, or a buffer one byte too small: refused. */
	CHECK(decode_exact(data, size - 1, buf_size) != SDP_WIRE_OK);
	CHECK(sdp_bsdh_from_wire(data, size, h[0].len - 1, &h[1]) == SDP_WIRE_BAD_LENGTH);
	/* A bigger buffer changes nothing. */
	CHECK(sdp_bsdh_from_wire(data, size, UINT32_MAX, &h[1]) == SDP_WIRE_OK);
	return 0;
}

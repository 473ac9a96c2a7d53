/* libFuzzer harness for the link framing (core/wire.c, docs/links.md): the
 * header every SEND on a link starts with (sdp_lh_from_wire), and the
 * payloads of OPEN (sdp_open_from_wire), OPEN_COMMIT (sdp_open_commit_from_wire)
 * and OPEN_ACK (sdp_open_ack_from_wire), which core/link.c decodes from a peer.
 *
 * Input: one selector byte that picks the receiver's buffer size (a table of
 * limits and values next to the message's length), then the message as
 * received.
 *
 * Checked: the header decoder accepts exactly what core/wire.h allows (the
 * model below is written from the header's comments: len == received <=
 * buf_size, a known kind with the payload size it requires, STREAM with at
 * least a base header, known flags, stream index below
 * SDP_LINK_STREAMS_MAX); an error names a rule the message breaks; an
 * accepted header has every field equal to the bytes and re-encodes to the
 * same 16 bytes.  For OPEN, OPEN_COMMIT and OPEN_ACK payloads the decoders accept
 * exactly non-zero ports (OPEN, OPEN_COMMIT), any rendezvous port and nonce, and
 * buffers within SDP_MIN/MAX_BUF_*, and re-encode to the same bytes; so do the climb's REQ and CHAL
 * (core/climb.c), and its PROVE and ACK accept exactly a cut at most 2^62. */
#include <stdbool.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

_Static_assert(SDP_LH_SIZE == 16, "link header is 16 bytes on the wire");
_Static_assert(sizeof(struct sdp_open_wire) == 44, "OPEN payload");
_Static_assert(sizeof(struct sdp_open_ack_wire) == 24, "OPEN_ACK payload");
_Static_assert(sizeof(struct sdp_open_commit_wire) == 60, "OPEN_COMMIT payload");
_Static_assert(sizeof(struct sdp_climb_req_wire) == 60, "CLIMB_REQ payload");
_Static_assert(sizeof(struct sdp_climb_chal_wire) == 56, "CLIMB_CHAL payload");
_Static_assert(sizeof(struct sdp_climb_prove_wire) == 40, "CLIMB_PROVE payload");
_Static_assert(sizeof(struct sdp_climb_ack_wire) == 8, "CLIMB_ACK payload");

/* Payload a kind requires: -1 unknown, -2 STREAM (at least a base header). */
static long model_payload(uint8_t kind)
{
	switch (kind) {
	case SDP_LINK_STREAM:   return -2;
	case SDP_LINK_CREDIT:   return 0;
	case SDP_LINK_RELEASED: return 0;
	case SDP_LINK_OPEN:     return 44;
	case SDP_LINK_OPEN_ACK: return 24;
	case SDP_LINK_OPEN_NAK: return 8;
	case SDP_LINK_CLIMB_REQ:   return 60;
	case SDP_LINK_CLIMB_CHAL:  return 56;
	case SDP_LINK_CLIMB_PROVE: return 40;
	case SDP_LINK_CLIMB_ACK:   return 8;
	case SDP_LINK_CLIMB_NAK:   return 8;
	case SDP_LINK_OPEN_COMMIT: return 60;
	}
	return -1;
}

struct broken {
	bool shortmsg, length, kind, flags, field;
};

static struct broken model(const uint8_t *m, size_t n, uint32_t buf_size)
{
	struct broken b = { 0 };
	long payload;
	uint32_t len;

	if (n < 16) {
		b.shortmsg = true;
		return b;
	}
	len = be32_at(m + 4);
	payload = model_payload(m[0]);
	b.kind = payload == -1;
	b.length = len != n || len > buf_size ||
		   (payload == -2 && len < 32) || (payload >= 0 && len != 16 + (uint32_t)payload);
	b.flags = (m[1] & ~SDP_LINK_FLAG_STARVING) != 0;
	b.field = be16_at(m + 2) >= SDP_LINK_STREAMS_MAX;
	return b;
}

static uint32_t pick_buf_size(uint8_t sel, size_t n)
{
	uint32_t len = (uint32_t)n;

	switch (sel % 8) {
	case 0:  return SDP_MIN_BUF_SIZE + 16;
	case 1:  return SDP_MAX_BUF_SIZE + 16;
	case 2:  return len;
	case 3:  return len - 1;
	case 4:  return len + 1;
	case 5:  return 16;
	case 6:  return 0;
	default: return 32768 + 16;
	}
}

static bool buffers_ok(uint16_t count, uint32_t size)
{
	return count >= SDP_MIN_BUF_COUNT && count <= SDP_MAX_BUF_COUNT &&
	       size >= SDP_MIN_BUF_SIZE && size <= SDP_MAX_BUF_SIZE;
}

/* An OPEN's 44 bytes at p (alone, or first in an OPEN_COMMIT of `whole`
 * bytes): the decoder's verdict matches the model; true if accepted. */
static bool open_verdict_ok(enum sdp_wire_error err, const uint8_t *p, size_t n, size_t whole)
{
	bool ok;

	if (n < whole) {
		CHECK(err == SDP_WIRE_SHORT);
		return false;
	}
	ok = be16_at(p + 32) != 0 && be16_at(p + 34) != 0 &&
	     buffers_ok(be16_at(p + 36), be32_at(p + 40));
	CHECK((err == SDP_WIRE_OK) == ok);
	CHECK(err == SDP_WIRE_OK || err == SDP_WIRE_BAD_FIELD);
	return ok;
}

static void check_open(const uint8_t *p, size_t n)
{
	struct sdp_open o;
	uint8_t out[44];
	enum sdp_wire_error err = sdp_open_from_wire(p, n, &o);

	if (!open_verdict_ok(err, p, n, 44))
		return;
	CHECK(memcmp(o.tuple.src_addr, p, 16) == 0 && memcmp(o.tuple.dst_addr, p + 16, 16) == 0);
	CHECK(o.tuple.src_port == be16_at(p + 32) && o.tuple.dst_port == be16_at(p + 34));
	CHECK(o.rdv_port == be16_at(p + 38));
	sdp_open_to_wire(&o, out);
	CHECK(memcmp(out, p, sizeof(out)) == 0);
}

/* OPEN_COMMIT: an OPEN's 44 bytes, then the client's nonce. */
static void check_open_commit(const uint8_t *p, size_t n)
{
	struct sdp_open o;
	uint8_t nonce[SDP_NONCE_SIZE], out[60];
	enum sdp_wire_error err = sdp_open_commit_from_wire(p, n, &o, nonce);

	if (!open_verdict_ok(err, p, n, 60))
		return;
	CHECK(memcmp(o.tuple.src_addr, p, 16) == 0 && memcmp(nonce, p + 44, SDP_NONCE_SIZE) == 0);
	sdp_open_commit_to_wire(&o, nonce, out);
	CHECK(memcmp(out, p, sizeof(out)) == 0);
}

static void check_open_ack(const uint8_t *p, size_t n)
{
	struct sdp_open_ack a;
	uint8_t out[24];
	enum sdp_wire_error err = sdp_open_ack_from_wire(p, n, &a);
	bool ok;

	if (n < 24) {
		CHECK(err == SDP_WIRE_SHORT);
		return;
	}
	ok = buffers_ok(be16_at(p + 16), be32_at(p + 20));
	CHECK((err == SDP_WIRE_OK) == ok);
	if (!ok)
		return;
	CHECK(memcmp(a.nonce, p, SDP_NONCE_SIZE) == 0 && a.rdv_port == be16_at(p + 18));
	sdp_open_ack_to_wire(&a, out);
	CHECK(memcmp(out, p, sizeof(out)) == 0);
}

static void check_climb_req(const uint8_t *p, size_t n)
{
	struct sdp_climb_req r;
	uint8_t out[60];
	enum sdp_wire_error err = sdp_climb_req_from_wire(p, n, &r);
	bool ok;

	if (n < 60) {
		CHECK(err == SDP_WIRE_SHORT);
		return;
	}
	ok = be16_at(p + 32) != 0 && be16_at(p + 34) != 0 &&
	     (be16_at(p + 38) & ~SDP_CLIMB_FLAGS_KNOWN) == 0 &&
	     buffers_ok(be16_at(p + 36), be32_at(p + 40));
	CHECK((err == SDP_WIRE_OK) == ok);
	if (!ok)
		return;
	CHECK(memcmp(r.nonce, p + 44, SDP_NONCE_SIZE) == 0 && r.flags == be16_at(p + 38));
	sdp_climb_req_to_wire(&r, out);
	CHECK(memcmp(out, p, sizeof(out)) == 0);
}

static void check_climb_chal(const uint8_t *p, size_t n)
{
	struct sdp_climb_chal ch;
	uint8_t out[56];
	enum sdp_wire_error err = sdp_climb_chal_from_wire(p, n, &ch);
	bool ok;

	if (n < 56) {
		CHECK(err == SDP_WIRE_SHORT);
		return;
	}
	ok = be16_at(p + 50) == 0 && buffers_ok(be16_at(p + 48), be32_at(p + 52));
	CHECK((err == SDP_WIRE_OK) == ok);
	if (!ok)
		return;
	sdp_climb_chal_to_wire(&ch, out);
	CHECK(memcmp(out, p, sizeof(out)) == 0);
}

static void check_climb_cut(const uint8_t *p, size_t n, bool with_mac)
{
	size_t need = with_mac ? 40 : 8, at = with_mac ? 32 : 0;
	uint8_t mac[SDP_CLIMB_MAC_SIZE], out[40];
	uint64_t cut = 0, want;
	enum sdp_wire_error err = sdp_climb_cut_from_wire(p, n, with_mac, mac, &cut);

	if (n < need) {
		CHECK(err == SDP_WIRE_SHORT);
		return;
	}
	want = (uint64_t)be32_at(p + at) << 32 | be32_at(p + at + 4);
	CHECK((err == SDP_WIRE_OK) == (want <= (1ull << 62)));
	if (err != SDP_WIRE_OK)
		return;
	CHECK(cut == want);
	sdp_climb_cut_to_wire(with_mac ? mac : NULL, cut, out);
	CHECK(memcmp(out, p, need) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_lh h;
	uint8_t out[16];
	uint32_t buf_size;
	struct broken b;
	enum sdp_wire_error err;
	bool ok;

	if (size < 1)
		return 0;
	buf_size = pick_buf_size(data[0], size - 1);
	data++;
	size--;
	b = model(data, size, buf_size);
	err = sdp_lh_from_wire(data, size, buf_size, &h);
	check_error_text(err);
	ok = !b.shortmsg && !b.length && !b.kind && !b.flags && !b.field;
	CHECK((err == SDP_WIRE_OK) == ok);
	CHECK((err == SDP_WIRE_SHORT) == b.shortmsg);
	CHECK(err != SDP_WIRE_BAD_LENGTH || b.length);
	CHECK(err != SDP_WIRE_BAD_MID || b.kind);
	CHECK(err != SDP_WIRE_BAD_FLAGS || b.flags);
	CHECK(err != SDP_WIRE_BAD_FIELD || b.field);
	/* The payload decoders see whatever follows a header, valid or not. */
	if (size > 16) {
		check_open(data + 16, size - 16);
		check_open_commit(data + 16, size - 16);
		check_open_ack(data + 16, size - 16);
		check_climb_req(data + 16, size - 16);
		check_climb_chal(data + 16, size - 16);
		check_climb_cut(data + 16, size - 16, true);
		check_climb_cut(data + 16, size - 16, false);
	}
	if (!ok)
		return 0;
	CHECK(h.kind == data[0] && h.flags == data[1] && h.stream == be16_at(data + 2));
	CHECK(h.len == be32_at(data + 4) && h.lseq == be32_at(data + 8) &&
	      h.lack == be32_at(data + 12));
	sdp_lh_to_wire(&h, out);
	CHECK(memcmp(out, data, sizeof(out)) == 0);
	return 0;
}

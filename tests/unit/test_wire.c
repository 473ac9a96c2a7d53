/* Unit tests (TAP) for core/wire.c: the SWITCH record that starts a move
 * of the stream to TCP (round trip, and every malformed field refused),
 * the base header's length and mid checks, the binding handshake's
 * records (bind records, the nonces of HelloAck and COMMIT), and the link
 * framing (header, OPEN, OPEN_ACK, the link Hello). */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/wire.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define REASONS 21u

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

/* ---- the binding handshake's records (docs/trust.md) ---- */

static void bind_encode(uint8_t kind, uint16_t reason, uint8_t fill, uint8_t out[SDP_BIND_SIZE])
{
	struct sdp_bind b = { .kind = kind, .reason = reason };
	struct sdp_bind_wire w;

	memset(b.nonce, fill, sizeof(b.nonce));
	sdp_bind_to_wire(&b, &w);
	memcpy(out, &w, sizeof(w));
}

static int test_bind_round_trip(void)
{
	uint8_t buf[SDP_BIND_SIZE];
	struct sdp_bind got = { 0 };
	enum sdp_wire_error err;

	bind_encode(SDP_BIND_PROOF, 0, 0xa5, buf);
	err = sdp_bind_from_wire(buf, sizeof(buf), SDP_BIND_KIND_BIT(SDP_BIND_PROOF), REASONS, &got);
	return check(SDP_BIND_SIZE == 24, "record is %zu bytes", SDP_BIND_SIZE) &&
	       check(err == SDP_WIRE_OK, "decode: %s", sdp_wire_error_text(err)) &&
	       check(got.kind == SDP_BIND_PROOF && got.nonce[0] == 0xa5 && got.nonce[15] == 0xa5,
		     "kind %u nonce %02x", got.kind, got.nonce[0]) &&
	       check(buf[0] == 'S' && buf[1] == 'D' && buf[2] == 'P' && buf[3] == 'B', "magic SDPB");
}

/* Each reader names the kinds it accepts: a server takes only PROOF, a
 * client only NAK, whatever a peer writes. */
static int test_bind_kinds(void)
{
	uint8_t buf[SDP_BIND_SIZE];
	struct sdp_bind got;
	int ok = 1;

	bind_encode(SDP_BIND_NAK, 3, 0, buf);
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), SDP_BIND_KIND_BIT(SDP_BIND_PROOF), REASONS,
				       &got) == SDP_WIRE_BAD_MID, "NAK taken as PROOF");
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), SDP_BIND_KIND_BIT(SDP_BIND_NAK), REASONS,
				       &got) == SDP_WIRE_OK && got.reason == 3, "NAK refused");
	for (unsigned kind = 0; kind < 256; kind++) {
		buf[5] = (uint8_t)kind;
		if (kind < SDP_BIND_PROOF || kind > SDP_BIND_NAK)
			ok &= check(sdp_bind_from_wire(buf, sizeof(buf), ~0u, REASONS, &got) ==
					    SDP_WIRE_BAD_MID, "kind %u accepted", kind);
	}
	return ok;
}

static int test_bind_bad_fields(void)
{
	uint8_t buf[SDP_BIND_SIZE];
	struct sdp_bind got;
	int ok = 1;

	for (size_t len = 0; len < sizeof(buf); len++) {
		bind_encode(SDP_BIND_PROOF, 0, 1, buf);
		ok &= check(sdp_bind_from_wire(buf, len, ~0u, REASONS, &got) == SDP_WIRE_SHORT,
			    "length %zu accepted", len);
	}
	buf[0] ^= 1;
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), ~0u, REASONS, &got) == SDP_WIRE_BAD_MAGIC,
		    "bad magic");
	bind_encode(SDP_BIND_PROOF, 0, 1, buf);
	buf[4] = SDP_WIRE_VERSION + 1;
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), ~0u, REASONS, &got) == SDP_WIRE_BAD_VERSION,
		    "bad version");
	bind_encode(SDP_BIND_PROOF, 7, 1, buf);
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), ~0u, REASONS, &got) == SDP_WIRE_BAD_FIELD,
		    "PROOF with a reason");
	bind_encode(SDP_BIND_NAK, REASONS, 1, buf);
	ok &= check(sdp_bind_from_wire(buf, sizeof(buf), ~0u, REASONS, &got) == SDP_WIRE_BAD_FIELD,
		    "NAK reason out of range");
	return ok;
}

/* The reader waits for more bytes only while they can still become a
 * record: app bytes are recognised from the first byte on. */
static int test_bind_prefix(void)
{
	uint8_t buf[SDP_BIND_SIZE];
	int ok = 1;

	bind_encode(SDP_BIND_PROOF, 0, 1, buf);
	for (size_t len = 1; len < sizeof(buf); len++)
		ok &= check(sdp_bind_prefix_plausible(buf, len), "prefix of %zu refused", len);
	ok &= check(sdp_bind_prefix_plausible("S", 1), "one byte S");
	ok &= check(!sdp_bind_prefix_plausible("SDPS", 4), "a SWITCH record's magic");
	ok &= check(!sdp_bind_prefix_plausible("*3\r\n", 4), "a redis command");
	ok &= check(!sdp_bind_prefix_plausible("GET ", 4), "an HTTP request");
	ok &= check(!sdp_bind_prefix_plausible("SDPB-not-a-record-app-bytes", 24),
		    "app bytes that begin with the magic");
	uint8_t proof[8] = { 'S', 'D', 'P', 'B', SDP_WIRE_VERSION, SDP_BIND_PROOF, 0, 7 };
	uint8_t nak[8] = { 'S', 'D', 'P', 'B', SDP_WIRE_VERSION, SDP_BIND_NAK, 0, 7 };
	ok &= check(!sdp_bind_prefix_plausible(proof, 8), "a PROOF with a reason");
	ok &= check(sdp_bind_prefix_plausible(nak, 8), "a NAK with a reason");
	return ok;
}

static int test_hello_ack_nonce(void)
{
	struct sdp_hello_ack ack = { .version = SDP_WIRE_VERSION, .buf_count = 32,
				     .buf_size = 32768 }, got;
	struct sdp_hello_ack_wire w;
	int ok;

	for (unsigned i = 0; i < SDP_NONCE_SIZE; i++)
		ack.nonce[i] = (uint8_t)(i * 17 + 3);
	sdp_hello_ack_to_wire(&ack, &w);
	ok = check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK, "decode");
	ok &= check(memcmp(got.nonce, ack.nonce, SDP_NONCE_SIZE) == 0, "nonce round trip");
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w) - SDP_NONCE_SIZE, &got) == SDP_WIRE_SHORT,
		    "a version-1 HelloAck (no nonce) is short");
	return ok;
}

static int test_commit_nonce(void)
{
	uint8_t nonce[SDP_NONCE_SIZE], back[SDP_NONCE_SIZE], buf[SDP_EXT_SIZE];
	struct sdp_ext e = { 0 }, got;

	for (unsigned i = 0; i < SDP_NONCE_SIZE; i++)
		nonce[i] = (uint8_t)(0xf0 - i);
	sdp_nonce_to_ext(nonce, &e);
	sdp_ext_to_wire(&e, buf);
	sdp_ext_from_wire(buf, &got);
	sdp_nonce_from_ext(&got, back);
	return check(memcmp(nonce, back, sizeof(back)) == 0, "nonce through COMMIT's extension") &&
	       check(sdp_mid_fixed_len(SDP_MID_COMMIT) == SDP_BSDH_SIZE + SDP_EXT_SIZE,
		     "COMMIT carries the extension");
}

/* ---------------------------------------------------------------- links */

static size_t link_msg(uint8_t *out, uint8_t kind, uint16_t stream, const void *payload, uint32_t n,
		       uint32_t lseq, uint32_t lack)
{
	struct sdp_lh h = { .kind = kind, .stream = stream, .len = (uint32_t)SDP_LH_SIZE + n,
			    .lseq = lseq, .lack = lack };

	sdp_lh_to_wire(&h, out);
	if (n)
		memcpy(out + SDP_LH_SIZE, payload, n);
	return SDP_LH_SIZE + n;
}

static int test_link_header(void)
{
	uint8_t buf[128], data[SDP_BSDH_SIZE + 5];
	struct sdp_bsdh d = { .mid = SDP_MID_DATA, .len = sizeof(data), .mseq = 1 };
	struct sdp_lh got;
	size_t n;
	int ok;

	sdp_bsdh_to_wire(&d, data);
	memcpy(data + SDP_BSDH_SIZE, "hello", 5);
	n = link_msg(buf, SDP_LINK_STREAM, 4095, data, sizeof(data), 7, 3);
	ok = check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_OK, "STREAM accepted") &&
	     check(got.kind == SDP_LINK_STREAM && got.stream == 4095 && got.lseq == 7 && got.lack == 3 &&
		   got.len == n, "fields round-trip") &&
	     check(buf[2] == 0x0f && buf[3] == 0xff, "stream index big-endian");
	ok &= check(sdp_lh_from_wire(buf, n - 1, 4096, &got) == SDP_WIRE_BAD_LENGTH,
		    "a length that disagrees with the bytes received");
	ok &= check(sdp_lh_from_wire(buf, n, (uint32_t)n - 1, &got) == SDP_WIRE_BAD_LENGTH,
		    "a message larger than our buffer");
	ok &= check(sdp_lh_from_wire(buf, 15, 4096, &got) == SDP_WIRE_SHORT, "15 bytes");
	n = link_msg(buf, SDP_LINK_STREAM, 1, data, SDP_BSDH_SIZE - 1, 1, 0);
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_LENGTH,
		    "a STREAM shorter than a base header");
	n = link_msg(buf, SDP_LINK_STREAM, 4096, data, sizeof(data), 1, 0);
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_FIELD, "index 4096");
	n = link_msg(buf, 13, 0, NULL, 0, 1, 0);
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_MID, "unknown kind");
	n = link_msg(buf, SDP_LINK_CLIMB_ACK, 0, data, 7, 1, 0);
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_LENGTH,
		    "a CLIMB_ACK one byte short");
	n = link_msg(buf, SDP_LINK_CREDIT, 0, "x", 1, 1, 0);
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_LENGTH,
		    "a CREDIT with a payload");
	n = link_msg(buf, SDP_LINK_CREDIT, 0, NULL, 0, 1, 0);
	buf[1] = 0x80;
	ok &= check(sdp_lh_from_wire(buf, n, 4096, &got) == SDP_WIRE_BAD_FLAGS, "unknown flag");
	return ok;
}

static int test_link_open(void)
{
	struct sdp_open o = { .buf_count = 32, .buf_size = 32768, .rdv_port = 40123 }, got;
	struct sdp_open_ack a = { .buf_count = 16, .buf_size = 65536, .rdv_port = 40124 }, agot;
	uint8_t w[sizeof(struct sdp_open_wire)], aw[sizeof(struct sdp_open_ack_wire)];
	int ok;

	o.tuple.src_port = 40000;
	o.tuple.dst_port = 6379;
	o.tuple.src_addr[15] = 2;
	o.tuple.dst_addr[15] = 1;
	memset(a.nonce, 0xab, sizeof(a.nonce));
	sdp_open_to_wire(&o, w);
	sdp_open_ack_to_wire(&a, aw);
	ok = check(sdp_open_from_wire(w, sizeof(w), &got) == SDP_WIRE_OK, "OPEN accepted") &&
	     check(got.tuple.src_port == 40000 && got.tuple.dst_port == 6379 && got.buf_count == 32 &&
		   got.buf_size == 32768 && got.tuple.src_addr[15] == 2, "OPEN round trip") &&
	     check(sdp_open_ack_from_wire(aw, sizeof(aw), &agot) == SDP_WIRE_OK, "OPEN_ACK accepted") &&
	     check(agot.buf_count == 16 && agot.buf_size == 65536 && agot.nonce[7] == 0xab,
		   "OPEN_ACK round trip") &&
	     check(got.rdv_port == 40123 && agot.rdv_port == 40124 && w[38] == 0x9c && w[39] == 0xbb,
		   "rendezvous ports, big-endian where the padding was");
	ok &= check(sdp_open_from_wire(w, sizeof(w) - 1, &got) == SDP_WIRE_SHORT, "short OPEN");
	o.tuple.src_port = 0;
	sdp_open_to_wire(&o, w);
	ok &= check(sdp_open_from_wire(w, sizeof(w), &got) == SDP_WIRE_BAD_FIELD, "source port 0");
	o.tuple.src_port = 1;
	o.buf_count = 2000;
	sdp_open_to_wire(&o, w);
	ok &= check(sdp_open_from_wire(w, sizeof(w), &got) == SDP_WIRE_BAD_FIELD, "2000 buffers");
	a.buf_size = 100;
	sdp_open_ack_to_wire(&a, aw);
	ok &= check(sdp_open_ack_from_wire(aw, sizeof(aw), &agot) == SDP_WIRE_BAD_FIELD,
		    "100-byte buffers");
	return ok;
}

static int test_link_open_commit(void)
{
	struct sdp_open o = { .buf_count = 32, .buf_size = 32768, .rdv_port = 7 }, got;
	uint8_t w[sizeof(struct sdp_open_commit_wire)], nonce[SDP_NONCE_SIZE], ngot[SDP_NONCE_SIZE];
	struct sdp_lh lh = { .kind = SDP_LINK_OPEN_COMMIT, .stream = 3, .lseq = 1 }, lgot;
	uint8_t msg[SDP_LH_SIZE + sizeof(w)];
	int ok;

	o.tuple.src_port = 40000;
	o.tuple.dst_port = 6379;
	for (unsigned i = 0; i < SDP_NONCE_SIZE; i++)
		nonce[i] = (uint8_t)(0xc0 + i);
	sdp_open_commit_to_wire(&o, nonce, w);
	ok = check(sizeof(w) == 60, "60 bytes: an OPEN, then the nonce") &&
	     check(sdp_open_commit_from_wire(w, sizeof(w), &got, ngot) == SDP_WIRE_OK,
		   "OPEN_COMMIT accepted") &&
	     check(got.tuple.src_port == 40000 && got.tuple.dst_port == 6379 && got.buf_count == 32 &&
		   got.rdv_port == 7 && memcmp(ngot, nonce, sizeof(nonce)) == 0 && w[44] == 0xc0,
		   "OPEN_COMMIT round trip, nonce after the OPEN");
	ok &= check(sdp_open_commit_from_wire(w, sizeof(w) - 1, &got, ngot) == SDP_WIRE_SHORT,
		    "short OPEN_COMMIT");
	lh.len = (uint32_t)sizeof(msg);
	sdp_lh_to_wire(&lh, msg);
	memcpy(msg + SDP_LH_SIZE, w, sizeof(w));
	ok &= check(sdp_lh_from_wire(msg, sizeof(msg), 4096, &lgot) == SDP_WIRE_OK,
		    "its link header: 60 bytes of payload");
	lh.len = SDP_LH_SIZE + 44; /* an OPEN's length */
	sdp_lh_to_wire(&lh, msg);
	ok &= check(sdp_lh_from_wire(msg, SDP_LH_SIZE + 44, 4096, &lgot) == SDP_WIRE_BAD_LENGTH,
		    "an OPEN_COMMIT the length of an OPEN");
	o.tuple.dst_port = 0;
	sdp_open_commit_to_wire(&o, nonce, w);
	ok &= check(sdp_open_commit_from_wire(w, sizeof(w), &got, ngot) == SDP_WIRE_BAD_FIELD,
		    "destination port 0");
	return ok;
}

static int test_link_hello(void)
{
	struct sdp_hello h = { .version = SDP_WIRE_VERSION, .flags = SDP_HELLO_FLAG_LINK,
			       .buf_count = 64, .buf_size = 32784 }, got;
	struct sdp_hello_wire w;
	int ok;

	h.tuple.dst_port = 6379;
	sdp_hello_to_wire(&h, &w);
	ok = check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK, "link Hello accepted") &&
	     check(got.flags == SDP_HELLO_FLAG_LINK && got.tuple.src_port == 0, "flags, no source port");
	h.tuple.src_port = 5;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FIELD,
		    "a link Hello naming a source port");
	h.flags = 0;
	h.tuple.src_port = 0;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FIELD,
		    "a channel's Hello without one");
	h.flags = SDP_HELLO_FLAG_SOLICITED;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS,
		    "SOLICITED without LINK");
	h.flags = SDP_HELLO_FLAG_OPEN_COMMITS;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS,
		    "OPEN_COMMITS without LINK");
	h.flags = SDP_HELLO_FLAG_LINK | 8;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS, "unknown flag");
	h.flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED | SDP_HELLO_FLAG_OPEN_COMMITS;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK && got.flags == h.flags,
		    "a link Hello offering committed OPENs");
	h.flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED;
	sdp_hello_to_wire(&h, &w);
	ok &= check(sdp_hello_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK &&
			    got.flags == (SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED),
		    "a link Hello asking for solicited events");
	return ok;
}

static int test_climb_messages(void)
{
	struct sdp_climb_req r = { .tuple = { .src_port = 40000, .dst_port = 6379 },
				   .buf_count = 32, .buf_size = 32768 }, rg;
	struct sdp_climb_chal ch = { .buf_count = 64, .buf_size = 16384 }, cg;
	uint8_t w[sizeof(struct sdp_climb_req_wire)], mac[SDP_CLIMB_MAC_SIZE], mg[SDP_CLIMB_MAC_SIZE];
	uint8_t cw[sizeof(struct sdp_climb_chal_wire)], pw[sizeof(struct sdp_climb_prove_wire)];
	uint64_t cut = 0;
	int ok = 1;

	memset(r.tuple.src_addr, 1, 16);
	memset(r.tuple.dst_addr, 2, 16);
	memset(r.nonce, 3, sizeof(r.nonce));
	sdp_climb_req_to_wire(&r, w);
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w), &rg) == SDP_WIRE_OK &&
			    memcmp(&rg.tuple, &r.tuple, sizeof(r.tuple)) == 0 && rg.buf_count == 32 &&
			    rg.buf_size == 32768 && memcmp(rg.nonce, r.nonce, 16) == 0,
		    "REQ round trip");
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w) - 1, &rg) == SDP_WIRE_SHORT, "REQ short");
	w[38] = 1; /* an unknown flag */
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w), &rg) == SDP_WIRE_BAD_FIELD, "REQ flags");
	w[38] = 0;
	w[39] = SDP_CLIMB_FROM_SERVER;
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w), &rg) == SDP_WIRE_OK &&
			    rg.flags == SDP_CLIMB_FROM_SERVER,
		    "REQ from the server end");
	r.tuple.src_port = 0;
	sdp_climb_req_to_wire(&r, w);
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w), &rg) == SDP_WIRE_BAD_FIELD, "REQ port 0");
	r.tuple.src_port = 1;
	r.buf_count = 2;
	sdp_climb_req_to_wire(&r, w);
	ok &= check(sdp_climb_req_from_wire(w, sizeof(w), &rg) != SDP_WIRE_OK, "REQ 2 buffers");
	memset(ch.nonce, 4, 16);
	memset(ch.mac, 5, sizeof(ch.mac));
	sdp_climb_chal_to_wire(&ch, cw);
	ok &= check(sdp_climb_chal_from_wire(cw, sizeof(cw), &cg) == SDP_WIRE_OK && cg.buf_count == 64 &&
			    cg.buf_size == 16384 && memcmp(cg.mac, ch.mac, sizeof(ch.mac)) == 0,
		    "CHAL round trip");
	ch.buf_size = 1u << 21;
	sdp_climb_chal_to_wire(&ch, cw);
	ok &= check(sdp_climb_chal_from_wire(cw, sizeof(cw), &cg) != SDP_WIRE_OK, "CHAL 2 MiB buffers");
	memset(mac, 6, sizeof(mac));
	sdp_climb_cut_to_wire(mac, 0x0102030405060708ull, pw);
	ok &= check(pw[SDP_CLIMB_MAC_SIZE] == 1 && pw[SDP_CLIMB_MAC_SIZE + 7] == 8, "cut big-endian");
	ok &= check(sdp_climb_cut_from_wire(pw, sizeof(pw), true, mg, &cut) == SDP_WIRE_OK &&
			    cut == 0x0102030405060708ull && memcmp(mg, mac, sizeof(mac)) == 0,
		    "PROVE round trip");
	sdp_climb_cut_to_wire(NULL, UINT64_MAX, pw);
	ok &= check(sdp_climb_cut_from_wire(pw, 8, false, NULL, &cut) == SDP_WIRE_BAD_FIELD,
		    "ACK cut past 2^62");
	ok &= check(sdp_climb_cut_from_wire(pw, 7, false, NULL, &cut) == SDP_WIRE_SHORT, "ACK short");
	return ok;
}

static int test_link_hello_ack(void)
{
	struct sdp_hello_ack a = { .version = SDP_WIRE_VERSION, .buf_count = 64, .buf_size = 32784 },
			     got;
	struct sdp_hello_ack_wire w;
	int ok = 1;

	a.flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED;
	sdp_hello_ack_to_wire(&a, &w);
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK &&
			    got.flags == a.flags,
		    "a link HelloAck asking for solicited events");
	a.flags = SDP_HELLO_FLAG_SOLICITED;
	sdp_hello_ack_to_wire(&a, &w);
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS,
		    "SOLICITED without LINK");
	a.flags = SDP_HELLO_FLAG_OPEN_COMMITS;
	sdp_hello_ack_to_wire(&a, &w);
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS,
		    "OPEN_COMMITS without LINK");
	a.flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_OPEN_COMMITS;
	sdp_hello_ack_to_wire(&a, &w);
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_OK && got.flags == a.flags,
		    "a link HelloAck taking committed OPENs");
	a.flags = 0x80;
	sdp_hello_ack_to_wire(&a, &w);
	ok &= check(sdp_hello_ack_from_wire(&w, sizeof(w), &got) == SDP_WIRE_BAD_FLAGS, "unknown flag");
	return ok;
}

static const struct tap_case cases[] = {
	{ "link header: round trip; length, index, kind, payload and flags checked", test_link_header },
	{ "climb messages: round trips; short, padding, ports, geometry and cut checked",
	  test_climb_messages },
	{ "link OPEN and OPEN_ACK: round trip; ports and geometry checked", test_link_open },
	{ "link OPEN_COMMIT: the OPEN and the client's nonce; length and ports checked",
	  test_link_open_commit },
	{ "link Hello: no source port exactly when LINK is set", test_link_hello },
	{ "link HelloAck: SOLICITED and OPEN_COMMITS only with LINK, no unknown flag",
	  test_link_hello_ack },
	{ "bind record: 24 bytes, magic SDPB, round trip", test_bind_round_trip },
	{ "bind record: only the kinds the reader names are accepted", test_bind_kinds },
	{ "bind record: short, bad magic, version, reasons refused", test_bind_bad_fields },
	{ "bind record: a reader waits only for a plausible prefix", test_bind_prefix },
	{ "HelloAck: the server's nonce round-trips; version 1 is short", test_hello_ack_nonce },
	{ "COMMIT: the client's nonce round-trips through the extension", test_commit_nonce },
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

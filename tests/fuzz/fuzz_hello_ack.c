/* libFuzzer harness for the HelloAck (rdma_cm accept private data, decoded by
 * the client: core/cm_client.c): sdp_hello_ack_from_wire.  Input: the private
 * data as received, every byte of it.
 *
 * Checked: the decoder accepts exactly what core/wire.h allows (the model
 * below: magic, version, flags 0, or LINK with any of SOLICITED and OPEN_COMMITS, buf_count and buf_size within
 * SDP_MIN/MAX_BUF_*); an error names a rule the data breaks; an accepted
 * HelloAck has every field written (the server's nonce included), equal to
 * the bytes, and re-encodes (sdp_hello_ack_to_wire) to the same bytes, which
 * decode to the same struct; bytes after it change nothing; one byte short,
 * or NULL, is SHORT. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

#define ACK_SIZE sizeof(struct sdp_hello_ack_wire)

_Static_assert(offsetof(struct sdp_hello_ack_wire, version) == 4, "layout");
_Static_assert(offsetof(struct sdp_hello_ack_wire, flags) == 5, "layout");
_Static_assert(offsetof(struct sdp_hello_ack_wire, buf_count) == 6, "layout");
_Static_assert(offsetof(struct sdp_hello_ack_wire, buf_size) == 8, "layout");
_Static_assert(offsetof(struct sdp_hello_ack_wire, nonce) == 12, "layout");
_Static_assert(sizeof(struct sdp_hello_ack_wire) == 12 + SDP_NONCE_SIZE, "layout");


static struct preamble_broken model(const uint8_t *m, size_t n)
{
	struct preamble_broken b = { 0 };
	uint16_t count;
	uint32_t bsize;

	if (n < ACK_SIZE) {
		b.shortmsg = true;
		return b;
	}
	count = be16_at(m + 6);
	bsize = be32_at(m + 8);
	b.magic = be32_at(m) != SDP_HELLO_MAGIC;
	b.version = m[4] != SDP_WIRE_VERSION;
	b.flags = (m[5] & ~SDP_HELLO_FLAGS) != 0 ||
		  ((m[5] & SDP_HELLO_LINK_ONLY) && !(m[5] & SDP_HELLO_FLAG_LINK));
	b.field = count < SDP_MIN_BUF_COUNT || count > SDP_MAX_BUF_COUNT ||
		  bsize < SDP_MIN_BUF_SIZE || bsize > SDP_MAX_BUF_SIZE;
	return b;
}

static void check_fields(const struct sdp_hello_ack *h, const uint8_t *m)
{
	CHECK(h->version == m[4] && h->flags == m[5]);
	CHECK(h->buf_count == be16_at(m + 6) && h->buf_size == be32_at(m + 8));
	CHECK(memcmp(h->nonce, m + 12, SDP_NONCE_SIZE) == 0);
}

static bool same_ack(const struct sdp_hello_ack *a, const struct sdp_hello_ack *b)
{
	return a->version == b->version && a->flags == b->flags &&
	       a->buf_count == b->buf_count && a->buf_size == b->buf_size &&
	       memcmp(a->nonce, b->nonce, SDP_NONCE_SIZE) == 0;
}

static enum sdp_wire_error decode(const uint8_t *in, size_t len)
{
	struct sdp_hello_ack out;

	return sdp_hello_ack_from_wire(in, len, &out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_hello_ack h[2], again;
	struct sdp_hello_ack_wire out;
	struct preamble_broken b = model(data, size);
	enum sdp_wire_error err;

	memset(&h[0], 0x00, sizeof(h[0]));
	memset(&h[1], 0xff, sizeof(h[1]));
	err = sdp_hello_ack_from_wire(data, size, &h[0]);
	CHECK(sdp_hello_ack_from_wire(data, size, &h[1]) == err);
	CHECK(sdp_hello_ack_from_wire(NULL, size, &again) == SDP_WIRE_SHORT);
	check_error_text(err);

	check_preamble_verdict(err, &b);
	check_own_bytes(decode, data, size, ACK_SIZE, err);
	if (err != SDP_WIRE_OK)
		return 0;

	check_fields(&h[0], data);
	check_fields(&h[1], data);
	CHECK(h[0].version == SDP_WIRE_VERSION && (h[0].flags & ~SDP_HELLO_FLAGS) == 0 &&
	      (!(h[0].flags & SDP_HELLO_LINK_ONLY) || (h[0].flags & SDP_HELLO_FLAG_LINK)));
	CHECK(h[0].buf_count >= SDP_MIN_BUF_COUNT && h[0].buf_count <= SDP_MAX_BUF_COUNT);
	CHECK(h[0].buf_size >= SDP_MIN_BUF_SIZE && h[0].buf_size <= SDP_MAX_BUF_SIZE);

	memset(&out, 0x5a, sizeof(out));
	sdp_hello_ack_to_wire(&h[0], &out);
	CHECK(memcmp(&out, data, ACK_SIZE) == 0);
	CHECK(sdp_hello_ack_from_wire(&out, sizeof(out), &again) == SDP_WIRE_OK);
	CHECK(same_ack(&again, &h[0]));
	return 0;
}

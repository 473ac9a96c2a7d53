/* libFuzzer harness for the Hello (rdma_cm connect private data, decoded by
 * the server: core/cm_server.c): sdp_hello_from_wire.  Input: the private
 * data as received, every byte of it.
 *
 * Checked: the decoder accepts exactly what core/wire.h allows (the model
 * below: magic, version, flags 0, or LINK with any of SOLICITED and OPEN_COMMITS, a source port exactly when not a
 * link's, a destination port, buf_count and buf_size
 * within SDP_MIN/MAX_BUF_*); an error names a rule the data breaks; an
 * accepted Hello has every field written, equal to the bytes, and re-encodes
 * (sdp_hello_to_wire) to the same bytes, which decode to the same struct;
 * bytes after the Hello change nothing; one byte short, or NULL, is SHORT. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

#define HELLO_SIZE sizeof(struct sdp_hello_wire)

/* The offsets the model reads at: the header's field order, packed. */
_Static_assert(offsetof(struct sdp_hello_wire, version) == 4, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, flags) == 5, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, buf_count) == 6, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, buf_size) == 8, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, src_port) == 12, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, dst_port) == 14, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, src_addr) == 16, "layout");
_Static_assert(offsetof(struct sdp_hello_wire, dst_addr) == 32, "layout");
_Static_assert(sizeof(struct sdp_hello_wire) == 48, "layout");
_Static_assert(sizeof(struct sdp_hello_wire) <= 56, "fits RDMA_PS_TCP's private data");


static struct preamble_broken model(const uint8_t *m, size_t n)
{
	struct preamble_broken b = { 0 };
	uint16_t count;
	uint32_t bsize;

	if (n < HELLO_SIZE) {
		b.shortmsg = true;
		return b;
	}
	count = be16_at(m + 6);
	bsize = be32_at(m + 8);
	b.magic = be32_at(m) != SDP_HELLO_MAGIC;
	b.version = m[4] != SDP_WIRE_VERSION;
	b.flags = (m[5] & ~SDP_HELLO_FLAGS) != 0 ||
		  ((m[5] & SDP_HELLO_LINK_ONLY) && !(m[5] & SDP_HELLO_FLAG_LINK));
	b.field = (be16_at(m + 12) == 0) != ((m[5] & SDP_HELLO_FLAG_LINK) != 0) ||
		  be16_at(m + 14) == 0 ||
		  count < SDP_MIN_BUF_COUNT || count > SDP_MAX_BUF_COUNT ||
		  bsize < SDP_MIN_BUF_SIZE || bsize > SDP_MAX_BUF_SIZE;
	return b;
}

static void check_fields(const struct sdp_hello *h, const uint8_t *m)
{
	CHECK(h->version == m[4] && h->flags == m[5]);
	CHECK(h->buf_count == be16_at(m + 6) && h->buf_size == be32_at(m + 8));
	CHECK(h->tuple.src_port == be16_at(m + 12) && h->tuple.dst_port == be16_at(m + 14));
	CHECK(memcmp(h->tuple.src_addr, m + 16, 16) == 0);
	CHECK(memcmp(h->tuple.dst_addr, m + 32, 16) == 0);
}

static bool same_hello(const struct sdp_hello *a, const struct sdp_hello *b)
{
	return a->version == b->version && a->flags == b->flags &&
	       a->buf_count == b->buf_count && a->buf_size == b->buf_size &&
	       a->tuple.src_port == b->tuple.src_port && a->tuple.dst_port == b->tuple.dst_port &&
	       memcmp(a->tuple.src_addr, b->tuple.src_addr, 16) == 0 &&
	       memcmp(a->tuple.dst_addr, b->tuple.dst_addr, 16) == 0;
}

static enum sdp_wire_error decode(const uint8_t *in, size_t len)
{
	struct sdp_hello out;

	return sdp_hello_from_wire(in, len, &out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_hello h[2], again;
	struct sdp_hello_wire out;
	struct preamble_broken b = model(data, size);
	enum sdp_wire_error err;

	memset(&h[0], 0x00, sizeof(h[0]));
	memset(&h[1], 0xff, sizeof(h[1]));
	err = sdp_hello_from_wire(data, size, &h[0]);
	CHECK(sdp_hello_from_wire(data, size, &h[1]) == err);
	CHECK(sdp_hello_from_wire(NULL, size, &again) == SDP_WIRE_SHORT);
	check_error_text(err);

	check_preamble_verdict(err, &b);
	check_own_bytes(decode, data, size, HELLO_SIZE, err);
	if (err != SDP_WIRE_OK)
		return 0;

	check_fields(&h[0], data);
	check_fields(&h[1], data);
	CHECK(h[0].version == SDP_WIRE_VERSION && (h[0].flags & ~SDP_HELLO_FLAGS) == 0 &&
	      (!(h[0].flags & SDP_HELLO_LINK_ONLY) || (h[0].flags & SDP_HELLO_FLAG_LINK)));
	CHECK(h[0].buf_count >= SDP_MIN_BUF_COUNT && h[0].buf_count <= SDP_MAX_BUF_COUNT);
	CHECK(h[0].buf_size >= SDP_MIN_BUF_SIZE && h[0].buf_size <= SDP_MAX_BUF_SIZE);
	CHECK((h[0].tuple.src_port == 0) == ((h[0].flags & SDP_HELLO_FLAG_LINK) != 0) &&
	      h[0].tuple.dst_port != 0); /* a link's Hello names no source port */

	memset(&out, 0x5a, sizeof(out));
	sdp_hello_to_wire(&h[0], &out);
	CHECK(memcmp(&out, data, HELLO_SIZE) == 0);
	CHECK(sdp_hello_from_wire(&out, sizeof(out), &again) == SDP_WIRE_OK);
	CHECK(same_hello(&again, &h[0]));
	return 0;
}

/* libFuzzer harness for the bind records read from the TCP connection
 * (PROOF, ACK, NAK): sdp_bind_from_wire and sdp_bind_prefix_plausible.
 *
 * Input: one byte, kinds_mask (bit k accepts kind k; bits 0 and 4..7 name no
 * kind), two bytes, big-endian, for reason_count (0xffff = UINT32_MAX; the
 * library passes SDP_REASON_COUNT), then the bytes as read.
 *
 * Checked: the decoder accepts exactly what core/wire.h allows (the model
 * below: bind magic, version, a kind in 1..3 whose bit is in kinds_mask, a
 * NAK's reason < reason_count and 0 for the others); an error names a rule
 * the record breaks; an accepted record has every field written, equal to
 * the bytes, and re-encodes (sdp_bind_to_wire) to the same 24 bytes, which
 * decode to the same struct; bytes after it change nothing; one byte short,
 * or NULL, is SHORT.
 * sdp_bind_prefix_plausible, on each prefix shorter than a record (copied to
 * a buffer of exactly that size): true on every prefix of a record that
 * decodes (a bind record is never taken for app data); false once the prefix
 * differs from the bind magic (app data is never held back for that); once
 * false, false for every longer prefix. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

_Static_assert(offsetof(struct sdp_bind_wire, version) == 4, "layout");
_Static_assert(offsetof(struct sdp_bind_wire, kind) == 5, "layout");
_Static_assert(offsetof(struct sdp_bind_wire, reason) == 6, "layout");
_Static_assert(offsetof(struct sdp_bind_wire, nonce) == 8, "layout");
_Static_assert(SDP_BIND_SIZE == 8 + SDP_NONCE_SIZE, "layout");

#define ALL_KINDS (SDP_BIND_KIND_BIT(SDP_BIND_PROOF) | SDP_BIND_KIND_BIT(SDP_BIND_ACK) | \
		   SDP_BIND_KIND_BIT(SDP_BIND_NAK))

struct broken {
	bool shortmsg, magic, version, kind, field;
};

static struct broken model(const uint8_t *m, size_t n, unsigned kinds_mask, unsigned reason_count)
{
	struct broken b = { 0 };
	uint8_t kind;
	uint16_t reason;

	if (n < SDP_BIND_SIZE) {
		b.shortmsg = true;
		return b;
	}
	kind = m[5];
	reason = be16_at(m + 6);
	b.magic = be32_at(m) != SDP_BIND_MAGIC;
	b.version = m[4] != SDP_WIRE_VERSION;
	b.kind = (kind != SDP_BIND_PROOF && kind != SDP_BIND_ACK && kind != SDP_BIND_NAK) ||
		 !(kinds_mask & (1u << kind));
	if (!b.kind)
		b.field = kind == SDP_BIND_NAK ? reason >= reason_count : reason != 0;
	return b;
}

static void check_prefixes(const uint8_t *m, size_t n)
{
	static const uint8_t magic[4] = { 'S', 'D', 'P', 'B' };
	struct sdp_bind any;
	bool valid = n >= SDP_BIND_SIZE &&
		     sdp_bind_from_wire(m, n, ALL_KINDS, UINT32_MAX, &any) == SDP_WIRE_OK;
	bool was = true;

	for (size_t l = 0; l < SDP_BIND_SIZE && l <= n; l++) {
		uint8_t *copy = malloc(l ? l : 1);
		bool plausible;

		CHECK(copy != NULL);
		memcpy(copy, m, l);
		plausible = sdp_bind_prefix_plausible(copy, l);
		free(copy);
		if (valid)
			CHECK(plausible);
		if (memcmp(m, magic, l < 4 ? l : 4) != 0)
			CHECK(!plausible);
		if (!was)
			CHECK(!plausible);
		was = plausible;
	}
}

static void check_fields(const struct sdp_bind *b, const uint8_t *m)
{
	CHECK(b->kind == m[5] && b->reason == be16_at(m + 6));
	CHECK(memcmp(b->nonce, m + 8, SDP_NONCE_SIZE) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_bind r[2], again;
	struct sdp_bind_wire out;
	unsigned kinds_mask, reason_count;
	struct broken b;
	enum sdp_wire_error err;
	bool ok;

	if (size < 3)
		return 0;
	kinds_mask = data[0];
	data++;
	size--;
	reason_count = take_count16(&data, &size);

	check_prefixes(data, size);

	b = model(data, size, kinds_mask, reason_count);
	memset(&r[0], 0x00, sizeof(r[0]));
	memset(&r[1], 0xff, sizeof(r[1]));
	err = sdp_bind_from_wire(data, size, kinds_mask, reason_count, &r[0]);
	CHECK(sdp_bind_from_wire(data, size, kinds_mask, reason_count, &r[1]) == err);
	CHECK(sdp_bind_from_wire(NULL, size, kinds_mask, reason_count, &again) == SDP_WIRE_SHORT);
	check_error_text(err);

	ok = !b.shortmsg && !b.magic && !b.version && !b.kind && !b.field;
	CHECK((err == SDP_WIRE_OK) == ok);
	CHECK((err == SDP_WIRE_SHORT) == b.shortmsg);
	CHECK(err != SDP_WIRE_BAD_MAGIC || b.magic);
	CHECK(err != SDP_WIRE_BAD_VERSION || b.version);
	CHECK(err != SDP_WIRE_BAD_MID || b.kind);
	CHECK(err != SDP_WIRE_BAD_FIELD || b.field);
	CHECK(err != SDP_WIRE_BAD_LENGTH && err != SDP_WIRE_BAD_FLAGS);
	if (size >= SDP_BIND_SIZE) {
		CHECK(sdp_bind_from_wire(data, SDP_BIND_SIZE, kinds_mask, reason_count, &again) ==
		      err);
		uint8_t *copy = malloc(SDP_BIND_SIZE - 1);

		CHECK(copy != NULL);
		memcpy(copy, data, SDP_BIND_SIZE - 1);
		CHECK(sdp_bind_from_wire(copy, SDP_BIND_SIZE - 1, kinds_mask, reason_count,
					 &again) == SDP_WIRE_SHORT);
		free(copy);
	}
	if (err != SDP_WIRE_OK)
		return 0;

	check_fields(&r[0], data);
	check_fields(&r[1], data);
	CHECK(r[0].kind >= SDP_BIND_PROOF && r[0].kind <= SDP_BIND_NAK);
	CHECK(kinds_mask & SDP_BIND_KIND_BIT(r[0].kind));
	CHECK(r[0].kind == SDP_BIND_NAK ? r[0].reason < reason_count : r[0].reason == 0);

	memset(&out, 0x5a, sizeof(out));
	sdp_bind_to_wire(&r[0], &out);
	CHECK(memcmp(&out, data, SDP_BIND_SIZE) == 0);
	CHECK(sdp_bind_from_wire(&out, sizeof(out), kinds_mask, reason_count, &again) ==
	      SDP_WIRE_OK);
	CHECK(again.kind == r[0].kind && again.reason == r[0].reason &&
	      memcmp(again.nonce, r[0].nonce, SDP_NONCE_SIZE) == 0);
	return 0;
}

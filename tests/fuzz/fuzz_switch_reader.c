/* libFuzzer harness for the reader of the peer's SWITCH record and of the
 * resent bytes it announces (core/switch_reader.c), which core/switch.c
 * drives from the kernel TCP socket when a stream moves there.
 *
 * Input: 8 bytes big-endian rx_have (the stream bytes this end has), 4 bytes
 * big-endian max_back, 1 byte max_drop - 1 (the reader's drop chunk), 1 byte
 * P, then P piece sizes (each 1..64 bytes; used in turn, cyclically; none
 * means 1), then the bytes as they arrive on the socket.
 *
 * Checked against a model written from core/wire.h: the reader consumes the
 * first 16 bytes as the record, whatever the pieces; it is BAD exactly when
 * the record does not decode or its resend offset is after rx_have or more
 * than max_back before it (and then says why and asks for nothing more);
 * otherwise it drops exactly rx_have - resend_from bytes, never asks for
 * more than it still needs or more than max_drop at once, and is DONE after
 * exactly 16 + skip bytes, whatever the piece sizes. */
#include <stdbool.h>
#include <stddef.h>

#include "base/reason.h"
#include "core/switch_reader.h"
#include "tests/fuzz/fuzz.h"

struct expect {
	bool bad;
	uint64_t skip;
};

static struct expect model(const uint8_t *rec, size_t n, uint64_t have, uint64_t back)
{
	struct expect x = { .bad = true };
	uint64_t from;

	if (n < SDP_SWITCH_SIZE)
		return x;
	from = be64_at(rec + 8);
	if (be32_at(rec) != SDP_HELLO_MAGIC || rec[4] != SDP_WIRE_VERSION || be16_at(rec + 6) != 0 ||
	    rec[5] >= SDP_REASON_COUNT || from > have || have - from > back)
		return x;
	x.bad = false;
	x.skip = have - from;
	return x;
}

/* Feeds the stream to the reader in the input's pieces.  Returns the bytes
 * the reader consumed; *state is where it ended. */
static size_t feed(struct switch_reader *r, const uint8_t *sizes, size_t nsizes,
		   const uint8_t *stream, size_t len, uint64_t have, uint64_t back, size_t max_drop,
		   enum switch_read_state *state)
{
	size_t used = 0;

	*state = r->state;
	for (size_t i = 0; used < len && *state != SWR_DONE && *state != SWR_BAD; i++) {
		size_t piece = nsizes ? sizes[i % nsizes] % 64 + 1 : 1, want;
		uint8_t *into;

		want = switch_reader_want(r, max_drop, &into);
		CHECK(want > 0);
		if (piece > want)
			piece = want;
		if (piece > len - used)
			piece = len - used;
		if (into) {
			CHECK(*state == SWR_RECORD && into == r->hdr + r->got);
			memcpy(into, stream + used, piece);
		} else {
			CHECK(*state == SWR_SKIPPING && want <= max_drop && want <= r->skip);
		}
		*state = switch_reader_took(r, piece, have, back, SDP_REASON_COUNT);
		used += piece;
	}
	return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct switch_reader r = { .state = SWR_RECORD };
	enum switch_read_state state;
	const uint8_t *sizes;
	uint64_t have, back;
	size_t max_drop, nsizes, used;
	struct expect want;
	uint8_t *into;

	if (size < 14)
		return 0;
	have = be64_at(data);
	back = be32_at(data + 8);
	max_drop = (size_t)data[12] + 1;
	nsizes = data[13];
	data += 14;
	size -= 14;
	if (nsizes > size)
		nsizes = size;
	sizes = data;
	data += nsizes;
	size -= nsizes;

	want = model(data, size, have, back);
	used = feed(&r, sizes, nsizes, data, size, have, back, max_drop, &state);
	if (size < SDP_SWITCH_SIZE) {
		CHECK(state == SWR_RECORD && used == size && r.got == size);
		return 0;
	}
	if (want.bad) {
		CHECK(state == SWR_BAD && used == SDP_SWITCH_SIZE && r.why != NULL && *r.why != '\0');
		CHECK(switch_reader_want(&r, max_drop, &into) == 0 && into == NULL);
		return 0;
	}
	CHECK(r.rec.resend_from == have - want.skip);
	if (size >= SDP_SWITCH_SIZE + want.skip) {
		CHECK(state == SWR_DONE && used == SDP_SWITCH_SIZE + want.skip && r.skip == 0);
		CHECK(switch_reader_want(&r, max_drop, &into) == 0);
	} else {
		CHECK(state == SWR_SKIPPING && used == size);
		CHECK(r.skip == SDP_SWITCH_SIZE + want.skip - used);
	}
	return 0;
}

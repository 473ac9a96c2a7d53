/* The peer's SWITCH record and the resent bytes it announces, read in any
 * pieces: a small explicit state machine (see core/switch_reader.h). */
#include "core/switch_reader.h"

size_t switch_reader_want(struct switch_reader *r, size_t max_drop, uint8_t **into)
{
	*into = NULL;
	switch (r->state) {
	case SWR_RECORD:
		*into = r->hdr + r->got;
		return sizeof(r->hdr) - r->got;
	case SWR_SKIPPING:
		return r->skip < max_drop ? (size_t)r->skip : max_drop;
	case SWR_DONE:
	case SWR_BAD:
		break;
	}
	return 0;
}

static enum switch_read_state record_whole(struct switch_reader *r, uint64_t rx_have,
					   uint64_t max_back, unsigned reason_count)
{
	enum sdp_wire_error err = sdp_switch_from_wire(r->hdr, sizeof(r->hdr), reason_count, &r->rec);

	if (err != SDP_WIRE_OK) {
		r->why = sdp_wire_error_text(err);
		return SWR_BAD;
	}
	if (r->rec.resend_from > rx_have || rx_have - r->rec.resend_from > max_back) {
		r->why = "resend offset outside the bytes received";
		return SWR_BAD;
	}
	r->skip = rx_have - r->rec.resend_from;
	return r->skip ? SWR_SKIPPING : SWR_DONE;
}

enum switch_read_state switch_reader_took(struct switch_reader *r, size_t n, uint64_t rx_have,
					  uint64_t max_back, unsigned reason_count)
{
	switch (r->state) {
	case SWR_RECORD:
		if (n > sizeof(r->hdr) - r->got)
			n = sizeof(r->hdr) - r->got; /* more than asked: a caller's bug, not the peer's */
		r->got += (uint32_t)n;
		if (r->got == sizeof(r->hdr))
			r->state = record_whole(r, rx_have, max_back, reason_count);
		break;
	case SWR_SKIPPING:
		r->skip -= n < r->skip ? n : r->skip;
		if (r->skip == 0)
			r->state = SWR_DONE;
		break;
	case SWR_DONE:
	case SWR_BAD:
		break;
	}
	return r->state;
}

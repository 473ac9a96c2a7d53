/* The reading side of moving a stream to TCP (core/switch.c): the peer's
 * 16-byte SWITCH record, arriving in pieces of any size, then the resent
 * bytes this end already has, which are dropped.  Pure: no I/O; switch.c
 * reads the socket and tells the reader what arrived.  Fuzzed by
 * tests/fuzz/fuzz_switch_reader.c. */
#ifndef SDPSHIM_SWITCH_READER_H
#define SDPSHIM_SWITCH_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"

enum switch_read_state {
	SWR_RECORD,   /* the record is not whole yet */
	SWR_SKIPPING, /* dropping the resent bytes we have */
	SWR_DONE,     /* what follows is new stream bytes */
	SWR_BAD,      /* the record broke a rule (why names it) */
};

struct switch_reader {
	uint8_t hdr[SDP_SWITCH_SIZE];
	uint32_t got;       /* record bytes so far */
	uint64_t skip;      /* resent bytes still to drop */
	enum switch_read_state state;
	struct sdp_switch rec;
	const char *why;    /* SWR_BAD: the rule */
};

/* Where the next bytes go: *into = the record's next byte and the most to
 * read there, or *into = NULL and the count of bytes to drop (at most
 * max_drop).  0 once DONE or BAD. */
size_t switch_reader_want(struct switch_reader *r, size_t max_drop, uint8_t **into);

/* n (> 0, at most what want said) bytes arrived there.  When the record is
 * whole it is decoded and checked: its resend offset must lie within the
 * bytes this end has (rx_have) and at most max_back before their end (what
 * a peer may legitimately not know we got).  Returns the new state. */
enum switch_read_state switch_reader_took(struct switch_reader *r, size_t n, uint64_t rx_have,
					  uint64_t max_back, unsigned reason_count);

#endif

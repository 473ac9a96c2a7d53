/* What a sharer and its owner exchange over the owner's request socket
 * (preload/fork_handoff.c, preload/fork_claim.c), and the state byte the
 * owner keeps per shared socket in memory its descendants map too. */
#ifndef SDPSHIM_FORK_HANDOFF_WIRE_H
#define SDPSHIM_FORK_HANDOFF_WIRE_H

#include <stdint.h>

/* A shared socket's state byte, written by its owner only. */
enum handoff_state {
	HANDOFF_FREE = 0,
	HANDOFF_ON_RDMA = 1, /* the owner carries the stream on its channel */
	HANDOFF_ON_TCP = 2,  /* the owner moved it: the kernel socket has every byte */
	HANDOFF_LOST = 3,    /* the owner closed or lost it without moving it */
};

#define HANDOFF_MAGIC 0x5344484fu /* "SDHO" */

enum handoff_kind {
	HANDOFF_NOP = 0,    /* wakes the server (an orphan to watch) */
	HANDOFF_CLAIM = 1,  /* move this stream to TCP: a sharer uses it (reply fd) */
	HANDOFF_HOLDER = 2, /* a sharer forked: its child (holder_pid) shares too */
};

/* A request; the reply to a CLAIM is one byte on the fd it carries:
 * 0 = the stream is on kernel TCP now. */
struct handoff_req {
	uint32_t magic;
	uint32_t owner_pid;
	uint32_t kind;
	uint32_t holder_pid;
	uint32_t via_pid; /* HOLDER: the sharer that forked holder_pid */
	uint32_t pad;
	uint64_t sock; /* the owner's struct sdp_sock address, as a name only */
	uint64_t id;   /* the owner's id for it: its state byte's index + 1 */
};

#endif

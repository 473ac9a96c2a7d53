/* What a sharer and its owner exchange over the owner's request socket
 * (preload/fork_handoff.c, preload/fork_claim.c), and the state byte the
 * owner keeps per shared socket in memory its descendants map too. */
#ifndef SDPSHIM_FORK_HANDOFF_WIRE_H
#define SDPSHIM_FORK_HANDOFF_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A shared socket's state byte, written by its owner only. */
enum handoff_state {
	HANDOFF_FREE = 0,
	HANDOFF_ON_RDMA = 1, /* the owner carries the stream on its channel */
	HANDOFF_ON_TCP = 2,  /* the owner moved it: the kernel socket has every byte */
	HANDOFF_LOST = 3,    /* the owner closed or lost it without moving it */
};

#define HANDOFF_MAGIC 0x5344484fu /* "SDHO" */

/* The owner's wait, in a claim, for the fork that made the claimer to
 * return, then for its own close (fork_handoff.c, wait_for_close); the
 * claimer's slack for the reply past the owner's two switch-bounded steps
 * (fork_claim.c) holds both. */
#define HANDOFF_FORK_RETURN_WAIT_MS 1000
#define HANDOFF_OWNER_CLOSE_WAIT_MS 250
#define HANDOFF_REPLY_SLACK_MS 2000
_Static_assert(HANDOFF_FORK_RETURN_WAIT_MS + HANDOFF_OWNER_CLOSE_WAIT_MS < HANDOFF_REPLY_SLACK_MS,
	       "the claimer must outwait the owner's waits");

enum handoff_kind {
	HANDOFF_NOP = 0,    /* wakes the server (an orphan to watch) */
	HANDOFF_CLAIM = 1,  /* move this stream to TCP: a sharer uses it (reply fd) */
	HANDOFF_HOLDER = 2, /* a sharer forked: its child (holder_pid) shares too */
	HANDOFF_CLAIM_TCP = 3, /* a CLAIM whose sharer stays on TCP whatever the
				* owner says (an exec): no ticket, so no wait for one */
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

/* What the owner's server does with a message of `got` bytes (truncated:
 * MSG_TRUNC or MSG_CTRUNC came back) on its request socket.  Any descendant
 * of the owner can write there, so nothing is taken on its word: a message
 * that is not exactly one well-formed request for this owner (self_pid) is
 * HANDOFF_REQ_BAD and answered "no" if it carried a reply fd.
 * Fuzzed by tests/fuzz/fuzz_handoff.c. */
enum handoff_req_verdict {
	HANDOFF_REQ_BAD = -1,
	HANDOFF_REQ_NOP = HANDOFF_NOP,
	HANDOFF_REQ_CLAIM = HANDOFF_CLAIM,
	HANDOFF_REQ_HOLDER = HANDOFF_HOLDER,
	HANDOFF_REQ_CLAIM_TCP = HANDOFF_CLAIM_TCP,
};

/* A pid as the kernel hands them out: positive, within pid_t. */
static inline bool handoff_pid_ok(uint32_t pid)
{
	return pid != 0 && pid <= 0x7fffffffu;
}

static inline enum handoff_req_verdict handoff_req_check(const struct handoff_req *r, size_t got,
							 bool truncated, uint32_t self_pid)
{
	if (got != sizeof(*r) || truncated || r->magic != HANDOFF_MAGIC ||
	    r->owner_pid != self_pid || r->pad != 0)
		return HANDOFF_REQ_BAD;
	switch (r->kind) {
	case HANDOFF_NOP:
		return HANDOFF_REQ_NOP;
	case HANDOFF_CLAIM:
	case HANDOFF_CLAIM_TCP:
		return r->id != 0 && r->sock != 0 ? (enum handoff_req_verdict)r->kind : HANDOFF_REQ_BAD;
	case HANDOFF_HOLDER:
		return handoff_pid_ok(r->holder_pid) && handoff_pid_ok(r->via_pid) &&
				       r->holder_pid != r->via_pid && r->holder_pid != self_pid
			       ? HANDOFF_REQ_HOLDER
			       : HANDOFF_REQ_BAD;
	default:
		return HANDOFF_REQ_BAD;
	}
}

#endif

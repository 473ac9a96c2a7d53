/* The fork handoff (SDPSHIM_FORK=handoff): an RDMA stream stays on RDMA in
 * the process that built it across a fork, and moves to TCP only when a
 * process that inherited the socket uses it, or when its owner closes it
 * or exits while a child still holds it. */
#ifndef SDPSHIM_FORK_HANDOFF_H
#define SDPSHIM_FORK_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/conn.h" /* struct conn_climb_ticket */
#include "preload/sock.h"

enum fork_mode {
	FORK_SWITCH,  /* every stream moves to TCP before the child exists */
	FORK_HANDOFF, /* a stream moves when a sharer uses it (this file) */
	FORK_KEEP,    /* streams stay on RDMA; a child that uses one gets EIO */
};

/* SDPSHIM_FORK, read at each fork (an unknown value warns once: handoff). */
enum fork_mode fork_mode(void);

/* daemon(): its child outlives a parent that leaves by _exit, with no
 * exit handler to move a stream: that fork moves them first. */
void fork_force_switch(bool on);

/* Owner, before fork: every RDMA socket of this process gets the means for
 * its sharers to ask for it (a request socket, a shared state byte); one
 * that cannot moves to TCP now, as under FORK_SWITCH. */
void handoff_atfork_prepare(void);
/* The fork handlers' first and last steps (one fork at a time stamps, the
 * sharer and orphan lists are copied whole, and until the child is
 * recorded every socket counts as shared). */
void handoff_lock_for_fork(void);
void handoff_unlock_after_fork(void);
/* Around real.fork() in our fork(): afterwards, in the parent, the child
 * is recorded as a sharer (pid > 0) and told of to the owners of the
 * streams this process shares; a fork that did not go through it (forkpty)
 * leaves a child that counts as a sharer for good. */
void handoff_fork_begin(void);
void handoff_fork_end(pid_t pid);
/* Child, after fork: the parent's server, sharers and orphans are not ours. */
void handoff_atfork_child(void);

/* Owner: s's stream now runs on kernel TCP (its sharers may use it). */
void handoff_note_on_tcp(struct sdp_sock *s);
/* Owner, at the last close here of s: true if a sharer may still use it,
 * and s is kept (an orphan) until that sharer claims it or is gone, as a
 * kernel socket stays open while any process holds it. */
bool handoff_keep_orphan(struct sdp_sock *s);
/* Tests only (SDPSHIM_DEBUG_*_DELAY_MS): this thread pauses ms (0: not). */
void handoff_debug_pause(unsigned ms);
/* At exit: the owner's request server ends (bounded) before the moves. */
void handoff_stop_server(void);
/* Starts a batch of moves at exit or exec: they share one
 * SDPSHIM_SWITCH_TIMEOUT_MS from now (handoff_at_exit,
 * handoff_orphans_at_exit). */
void handoff_exit_moves_begin(void);
/* Owner, at exit: true if s is shared with a live sharer (and has been
 * moved to TCP for it, or could not be); then it is not closed here. */
bool handoff_at_exit(struct sdp_sock *s);
/* Owner, at exit or exec: orphans with live sharers move to TCP for them. */
void handoff_orphans_at_exit(void);

/* The owner's answer to a CLAIM, on the reply fd the claim carried:
 * status 0, the stream is on kernel TCP; with has_ticket, the claimer
 * holds the socket alone (the owner closed it, no other sharer lives) and
 * may bring the stream back to RDMA with the ticket. */
#define HANDOFF_REPLY_MAGIC 0x53444852u /* "SDHR" */
struct handoff_reply {
	uint32_t magic;
	uint8_t status;
	uint8_t has_ticket;
	uint8_t pad[2];
	struct conn_climb_ticket ticket;
};
/* A reply without a ticket is its head alone. */
#define HANDOFF_REPLY_HEAD offsetof(struct handoff_reply, ticket)

/* Sharer (s inherited on RDMA from its owner): asks the owner to move the
 * stream to TCP and takes the socket over on kernel TCP, or, with the
 * owner's ticket, on a held channel of its own that climbs back to RDMA.
 * False, with a warning, if that cannot be done: the caller fails the call
 * with EIO. */
bool handoff_claim(struct sdp_sock *s);
/* The same; !may_climb: on plain TCP whatever the owner says (an exec is
 * next: a held channel would not survive it). */
bool handoff_claim_as(struct sdp_sock *s, bool may_climb);
/* True if s is an inherited RDMA socket whose owner takes requests. */
bool handoff_claimable(const struct sdp_sock *s);
/* A sharer forked `child`: tells each owner that the child shares too. */
void handoff_report_holder(pid_t child);

#endif

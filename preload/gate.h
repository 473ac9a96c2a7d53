/* Fast-path gates of the hooks that must look closer only while some socket
 * of the process is, or may still become, RDMA-backed.  A gate is a counter:
 * zero ("open") means every call of its hooks goes straight to libc, for
 * every fd.  Each gate also holds one count from process start until
 * initialisation has finished, so an open gate implies that `real` is
 * resolved.  Owners hold a count before the state it stands for becomes
 * visible to other threads and release it after that state is gone, so a
 * hook that finds its gate open cannot miss a socket that needs it.
 * The hooks do not read the counter: each jumps through a route (one load,
 * fused into the jump) that gate_route() points at libc's function or at
 * the hook's slow path whenever the count moves between zero and one.  Those
 * moves, and only those, take the gates' lock (preload/init.c); a closing
 * gate's route leaves libc before its count leaves zero. */
#ifndef SDPSHIM_GATE_H
#define SDPSHIM_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

enum sdp_gate {
	/* Tracked sockets whose mode is FRESH or RDMA (sock_set_mode()): their
	 * epoll registrations are recorded so they can move between the kernel
	 * and a shadow set.  TCP and LISTEN are terminal and need no record. */
	GATE_EPOLL_CTL,
	/* RDMA-backed (or connecting) sockets (readiness_*.c): poll, ppoll,
	 * select and pselect substitute their indicators. */
	GATE_POLL,
	/* Shadow epoll sets (readiness_epoll.c): an epoll_wait may have to
	 * translate their events. */
	GATE_EPOLL_WAIT,
	GATE_COUNT
};

extern _Atomic int sdp_gates[GATE_COUNT] __attribute__((visibility("hidden")));

static inline bool gate_open(enum sdp_gate g)
{
	return atomic_load_explicit(&sdp_gates[g], memory_order_acquire) == 0;
}

void gate_hold(enum sdp_gate g);
void gate_release(enum sdp_gate g);

/* Initialisation has finished: drops its count on every gate. */
void gate_init_done(void);
/* fork: the gates' lock is held across it (taken last, released first). */
void gate_atfork_prepare(void);
void gate_atfork_after(void);

/* Points the routes of g's hooks at libc (open) or at their slow paths
 * (preload/hooks_poll.c).  Called with the gates' lock held. */
void gate_route(enum sdp_gate g, bool open);

#endif

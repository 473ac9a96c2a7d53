/* Reactions of a socket to its channel: attached (path rdma), fallen back
 * or switched (path tcp with the channel's reason, readiness back to the
 * kernel); and moving every channel to TCP before fork and exec. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/config.h"
#include "base/fdtable.h"
#include "base/guard.h" /* unlikely() */
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/progress.h"
#include "ipoib_fallback/path.h"
#include "preload/exit_flush.h"
#include "preload/fork_handoff.h"
#include "preload/readiness.h" /* rdy_sock_to_rdma(), rdy_sock_to_kernel() */
#include "preload/sock_rdma.h"
#include "preload/stream.h"

void sock_adopt_conn(struct sdp_sock *s, struct sdp_conn *c)
{
	s->conn = c;
	s->owner_pid = self_pid();
	sock_set_mode(s, SOCK_MODE_RDMA);
	rdy_sock_to_rdma(s);
	exit_flush_helper_ensure(); /* an _exit flushes it as exit() would */
}

struct sdp_conn *sock_conn_get(struct sdp_sock *s)
{
	struct sdp_conn *c;

	/* An inherited channel is its owner's: this process takes the stream
	 * over on TCP (SDPSHIM_FORK=handoff), or has no channel to use. */
	if (unlikely(s->owner_pid != self_pid()) && sock_is_rdma(s)) {
		/* Taken over on TCP, or adopted (a held channel of ours now). */
		if (!handoff_claimable(s) || !handoff_claim(s) || s->owner_pid != self_pid())
			return NULL;
	}
	pthread_mutex_lock(&s->lock);
	c = sock_is_rdma(s) ? s->conn : NULL;
	if (c)
		conn_get(c);
	pthread_mutex_unlock(&s->lock);
	return c;
}

/* Failures worth remembering: the next connect to that peer skips RDMA. */
static bool reason_is_cacheable(enum sdp_reason reason)
{
	return reason == SDP_REASON_PEER_NO_SDPSHIM || reason == SDP_REASON_PEER_UNREACHABLE ||
	       reason == SDP_REASON_RDMA_TIMEOUT || reason == SDP_REASON_PEER_REJECTED ||
	       reason == SDP_REASON_ACCEPTED_ELSEWHERE || /* a pre-fork server's workers */
	       reason == SDP_REASON_UNPROVEN;           /* a rogue listener on its port */
}

/* A fork moved s's stream to TCP: the child that claims it, if it holds it
 * alone, gets what it needs to climb back (preload/fork_handoff.c). */
static void keep_climb_ticket(struct sdp_sock *s, struct sdp_conn *c)
{
	struct conn_climb_ticket *t = s->climb_ticket ? s->climb_ticket : malloc(sizeof(*t));

	if (t && conn_climb_ticket(c, t)) {
		s->climb_ticket = t;
		return;
	}
	free(t);
	s->climb_ticket = NULL;
}

static void on_fallback(struct sdp_sock *s, struct sdp_conn *c, enum sdp_reason reason)
{
	pthread_mutex_lock(&s->lock);
	if (s->conn != c) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (!conn_is_server(c) && reason_is_cacheable(reason))
		path_remember_failure(conn_peer_addr(c), reason);
	if (reason == SDP_REASON_FORKED && s->handoff_state)
		keep_climb_ticket(s, c);
	s->conn = NULL;
	rdy_sock_to_kernel(s);
	if (s->st->path == SDP_PATH_RDMA)
		sock_set_switched(s, reason); /* the stream moved mid-way */
	else
		sock_set_tcp(s, reason, false);
	handoff_note_on_tcp(s); /* a child that shares it may use it now */
	sock_refresh_local(s);
	pthread_mutex_unlock(&s->lock);
	conn_put(c);
}

void sock_settle_fallback(struct sdp_sock *s, struct sdp_conn *c)
{
	if (conn_get_phase(c) == CONN_FALLBACK)
		on_fallback(s, c, conn_get_fail_reason(c)); /* a no-op once the event came */
}

static void on_state(struct sdp_sock *s, struct sdp_conn *c);

void sock_settle_path(struct sdp_sock *s, struct sdp_conn *c)
{
	sock_settle_fallback(s, c);
	on_state(s, c); /* opened: path=rdma, if the event has not come yet */
}

static void on_state(struct sdp_sock *s, struct sdp_conn *c)
{
	enum conn_phase phase = conn_get_phase(c);

	if (s->conn != c)
		return;
	if (phase == CONN_OPEN) {
		if (s->st->path == SDP_PATH_TCP)
			sock_note_back_on_rdma(s); /* it climbed (core/climb.c) */
		else
			sock_set_rdma(s);
		sock_refresh_local(s);
	} else if (phase == CONN_DRAINING && s->st->path == SDP_PATH_UNDECIDED) {
		sock_note_draining(s, conn_get_fail_reason(c));
	} else if (phase == CONN_HELD && s->st->path != SDP_PATH_TCP) {
		sock_set_rdma(s); /* it opened before it moved, if no event said so yet */
		sock_note_moved(s, conn_get_fail_reason(c));
	} else if (s->st->path == SDP_PATH_UNDECIDED) {
		enum sdp_reason failed = conn_failed_reason(c);

		if (failed != SDP_REASON_NONE)
			sock_note_ended_on_tcp(s, failed);
	}
}

static void on_conn_event(void *owner, struct sdp_conn *c, const struct conn_event_info *info)
{
	struct sdp_sock *s = owner;

	switch (info->ev) {
	case CONN_EV_FALLBACK:
		on_fallback(s, c, info->reason);
		break;
	case CONN_EV_STATE:
		on_state(s, c);
		break;
	case CONN_EV_RDMA_READY:
		break; /* the connecting thread (or the progress thread) continues */
	}
}

static void hold_sock(void *owner)
{
	sock_hold(owner);
}

static void release_sock(void *owner)
{
	sock_release(owner);
}

const struct conn_owner_ops sock_conn_ops = {
	.event = on_conn_event,
	.hold = hold_sock,
	.release = release_sock,
};

struct switch_batch {
	struct sdp_conn **conns;
	struct sdp_sock **socks; /* held: the socket of conns[i] */
	size_t n, cap;
	bool only_inheritable;
};

static void collect_channel(int fd, void *obj, void *ctx)
{
	struct switch_batch *b = ctx;
	struct sdp_sock *s = obj;
	struct sdp_conn *c;

	bool cloexec = b->only_inheritable && (real.fcntl(fd, F_GETFD) & FD_CLOEXEC);

	/* getpid(), not the cached id: a child sharing our memory (a raw
	 * clone(CLONE_VM) or vfork) that execs reads the parent's there. */
	if (s->owner_pid != getpid()) {
		/* Inherited on RDMA (SDPSHIM_FORK=handoff): an exec'd image
		 * gets it on TCP, from its owner. */
		if (b->only_inheritable && !cloexec && handoff_claimable(s))
			handoff_claim_as(s, false);
		return;
	}
	c = sock_stream(s)->channel_get(s); /* NULL on kernel TCP, without a lock */
	if (!c)
		return;
	/* A close-on-exec socket ends here unless a child shares it. */
	if (cloexec && !s->shared_with_child && !atomic_exchange(&s->spawn_dup, false)) {
		conn_put(c);
		return;
	}
	for (size_t i = 0; i < b->n; i++) {
		if (b->conns[i] == c) { /* another fd of the same socket */
			conn_put(c);
			return;
		}
	}
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 16;
		struct sdp_conn **grown = realloc(b->conns, cap * sizeof(*grown));
		struct sdp_sock **grown_socks = grown ? realloc(b->socks, cap * sizeof(*grown_socks)) : NULL;

		if (grown)
			b->conns = grown;
		if (!grown_socks) {
			conn_put(c);
			return;
		}
		b->socks = grown_socks;
		b->cap = cap;
	}
	sock_hold(s);
	b->socks[b->n] = s;
	b->conns[b->n++] = c;
}

/* After conn_switch_begin: waits for the move of s's channel c; once it
 * is on TCP, s (and a child's copy of it) says so.  False if it is not. */
static bool wait_moved(struct sdp_sock *s, struct sdp_conn *c, uint64_t deadline_ms)
{
	if (!conn_switch_wait(c, SDP_REASON_FORKED, deadline_ms))
		return false;
	sock_settle_fallback(s, c);
	return true;
}

bool sock_switch_one_to_tcp(struct sdp_sock *s, uint64_t deadline_ms)
{
	struct sdp_conn *c = sock_conn_get(s);
	bool moved;

	if (!c)
		return true;
	conn_switch_begin(c, SDP_REASON_FORKED);
	moved = wait_moved(s, c, deadline_ms);
	conn_put(c);
	return moved;
}

void sock_take_over_on_tcp(struct sdp_sock *s)
{
	s->conn = NULL; /* the owner's channel: its copy here is left untouched */
	s->handoff_state = NULL;
	s->handoff_fd = -1;
	sock_set_switched(s, SDP_REASON_FORKED);
}

void sock_switch_all_to_tcp(bool only_inheritable)
{
	struct switch_batch b = { .only_inheritable = only_inheritable };
	uint64_t deadline;
	size_t stuck = 0;

	fdt_for_each(FDT_SOCK, collect_channel, &b);
	if (!b.n)
		return;
	for (size_t i = 0; i < b.n; i++)
		conn_switch_begin(b.conns[i], SDP_REASON_FORKED);
	deadline = progress_now_ms() + sdp_tun.switch_timeout_ms;
	for (size_t i = 0; i < b.n; i++) {
		if (!wait_moved(b.socks[i], b.conns[i], deadline))
			stuck++;
		sock_release(b.socks[i]);
		conn_put(b.conns[i]);
	}
	free(b.conns);
	free(b.socks);
	if (stuck)
		sdp_warn("%zu of %zu RDMA sockets could not move to TCP before %s within %u ms; "
			 "the new process cannot use them", stuck, b.n, only_inheritable ? "exec" : "fork",
			 sdp_tun.switch_timeout_ms);
}

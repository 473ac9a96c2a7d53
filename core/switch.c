/* Moving an open channel's byte stream onto its kernel TCP socket: after a
 * carrier failure, when the peer asks for it, and before fork and exec.
 * Each end writes a SWITCH record on TCP and then the stream from its
 * oldest byte the peer may lack (a send slot is kept until the peer
 * consumed it, a zero-copy source until the peer read all of it, a WRITE
 * until its RdmaWrCompl is known to have landed), and reads the peer's
 * record, dropping the resent bytes it already has.  Then the socket is
 * plain TCP: phase FALLBACK, reason failover or forked.  Meanwhile (phase
 * SWITCHING) the stream API runs on switch_carrier: kept bytes first, then
 * the kernel socket. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/credits.h"
#include "core/link.h"
#include "core/switch_reader.h"

/* Past the peer's kept slots (our receive buffers), a peer resends at most
 * one zero-copy WRITE it took back. */
#define MAX_TAKEN_BACK (1ull << 30)
#define SKIP_CHUNK     16384u

void qp_force_error(struct sdp_conn *c)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	if (!c->qp || c->qp_in_error)
		return;
	if (c->link) {
		link_stream_stop(c);
		c->qp_in_error = true;
		return;
	}
	SDP_GUARD_ENTER();
	if (ibv_modify_qp(c->qp, &attr, IBV_QP_STATE) == 0)
		c->qp_in_error = true;
	SDP_GUARD_LEAVE();
}

void switch_debug_maybe_fail(struct sdp_conn *c)
{
	if (sdp_tun.debug_fail_after <= 0 || c->debug_failed || c->phase != CONN_OPEN ||
	    c->tx_stream_off < (uint64_t)sdp_tun.debug_fail_after)
		return;
	c->debug_failed = true;
	sdp_warn("SDPSHIM_DEBUG_FAIL_AFTER: forcing the QP into the error state after %llu bytes",
		 (unsigned long long)c->tx_stream_off);
	if (c->link)
		link_force_fail(c, "SDPSHIM_DEBUG_FAIL_AFTER");
	else
		qp_force_error(c);
}

/* ------------------------------------------------------------ starting */

/* Our record, then the run of kept slots that ends at tx_stream_off: every
 * byte before its start the peer has (consumed, or read by zero-copy). */
static int build_resend(struct sdp_conn *c)
{
	struct sdp_switch rec = { .reason = (uint8_t)c->sw.reason };
	struct sdp_switch_wire w;
	uint32_t first;
	size_t payload;

	if (c->wr_unconfirmed) {
		/* Its completion never came: the peer may not have the WRITE's
		 * bytes, so they are resent (its record's resend_from decides). */
		c->tx_stream_off -= c->wr_compl_bytes;
		c->write_rolled_back = true;
		c->wr_unconfirmed = false;
	}
	rec.resend_from = tx_kept_run(c, c->tx_stream_off, &first, &payload);
	c->drain_buf = malloc(SDP_SWITCH_SIZE + payload);
	if (!c->drain_buf)
		return -ENOMEM;
	sdp_switch_to_wire(&rec, &w);
	memcpy(c->drain_buf, &w, sizeof(w));
	c->drain_len = sizeof(w) + tx_slots_payload(c, first, c->tx_head, c->drain_buf + sizeof(w));
	c->drain_off = 0;
	tx_drop_all(c);
	sdp_debug("switch: resending %zu bytes from stream offset %llu", payload,
		  (unsigned long long)rec.resend_from);
	return 0;
}

/* The peer ended its stream (DisConn) and consumed all of ours: nothing
 * is left to move, and its TCP socket may already be closed.  (Only our
 * own sign of failure is judged by this: a peer that moved is followed.) */
static bool nothing_to_move(const struct sdp_conn *c)
{
	return c->rx_eof && tx_all_consumed(c) && !c->src.active && !c->wr_unconfirmed;
}

static bool app_shut_writing(const struct sdp_conn *c)
{
	return c->close_state != CLOSE_ACTIVE && c->close_state != CLOSE_PEER_FIN;
}

/* Reaps what completed (the peer may know of it: its SEND or READ
 * finished), stops the QP, and reaps again until the queue is quiet. */
static void freeze_carrier(struct sdp_conn *c)
{
	if (!c->carrier_dead)
		cq_poll(c);
	c->carrier_dead = true;
	qp_force_error(c);
	for (int quiet = 0; quiet < 2 && c->cq;)
		quiet = cq_poll(c) == 0 ? quiet + 1 : 0;
}

static void flush_drain(struct sdp_conn *c);
static void read_peer(struct sdp_conn *c);
static void finish_if_done(struct sdp_conn *c);

void switch_maybe_finish(struct sdp_conn *c)
{
	finish_if_done(c);
	conn_wake_waiters(c);
}

/* Starts the move (see close_ev_carrier_failed for when it must happen).
 * by_peer: the peer's SWITCH record is on TCP; it is always followed, even
 * here where nothing is left to move: the peer then reads our record and
 * its resend is dropped, where unread it would make our close a reset. */
bool switch_start(struct sdp_conn *c, enum sdp_reason reason, bool keep_local, bool by_peer)
{
	if (c->phase != CONN_OPEN || c->sw.started || c->tcp_fd < 0 || c->destroy_queued ||
	    c->close_state == CLOSE_ABORTED ||
	    (reason == SDP_REASON_FAILOVER && !by_peer && nothing_to_move(c)))
		return false;
	c->sw.started = true;
	c->sw.reason = reason;
	c->sw.by_peer = by_peer;
	tx_note_awaited_sends(c); /* its sends in flight settle the move */
	freeze_carrier(c);
	if (c->close_state == CLOSE_ABORTED) {
		c->sw.started = false; /* the peer's Abort arrived meanwhile: a reset */
		return false;
	}
	c->sw.rx_have = rx_delivered_offset(c);
	c->sw.local = rx_copy_unread(c, &c->sw.local_len);
	/* Kept bytes count as had; otherwise the peer resends them, and they
	 * stay here only until its record arrives (if it never does, the
	 * peer is gone and they are the last bytes it sent). */
	c->sw.local_provisional = !keep_local;
	if (keep_local)
		c->sw.rx_have += c->sw.local_len;
	climb_note_switch(c, reason);
	rx_drop_unread(c);
	if (build_resend(c) != 0) {
		sdp_warn("out of memory moving a stream to TCP; resetting it");
		close_ev_abort(c, ENOMEM, false);
		return true;
	}
	c->sw.shut_wr = app_shut_writing(c);
	conn_set_phase(c, CONN_SWITCHING);
	if (c->rd_shut)
		real.shutdown(c->tcp_fd, SHUT_RD);
	if (c->st) {
		atomic_fetch_add_explicit(&c->st->switches, 1, memory_order_relaxed);
		atomic_store_explicit(&c->st->moved_ms, stats_now_ms(), memory_order_relaxed);
	}
	if (by_peer)
		sdp_info("the peer moved the stream to TCP; following (%zu bytes to resend)",
			 c->drain_len - SDP_SWITCH_SIZE);
	else if (reason == SDP_REASON_FAILOVER)
		sdp_warn("RDMA carrier failed (%s); moving the stream to TCP (%zu bytes to resend, "
			 "%zu received bytes kept)", c->carrier_why ? c->carrier_why : "QP error",
			 c->drain_len - SDP_SWITCH_SIZE, c->sw.local_len);
	else
		sdp_info("moving the stream to TCP before fork/exec (%zu bytes to resend)",
			 c->drain_len - SDP_SWITCH_SIZE);
	tcp_watch_start(c, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
	flush_drain(c);
	read_peer(c);
	finish_if_done(c);
	conn_wake_waiters(c);
	conn_update_readiness(c, true);
	conn_signal_owner(c, CONN_EV_STATE);
	return true;
}

/* ------------------------------------------------------ the TCP socket */

static void flush_drain(struct sdp_conn *c)
{
	int err;

	if (c->sw.tx_done)
		return;
	err = tcp_drain_send(c);
	if (err == EAGAIN)
		return;
	/* The peer's TCP is gone: the kernel socket reports it to the app. */
	if (err && err != EPIPE && !c->sw.peer_err)
		c->sw.peer_err = err;
	c->sw.tx_done = true;
	free(c->drain_buf);
	c->drain_buf = NULL;
	c->drain_len = c->drain_off = 0;
	if (c->sw.shut_wr)
		real.shutdown(c->tcp_fd, SHUT_WR);
}

/* A record that does not parse, or names bytes we do not have: reset. */
static void switch_reset(struct sdp_conn *c, const char *what)
{
	sdp_warn("the peer's SWITCH record on TCP is invalid (%s); resetting the connection", what);
	c->fail_reason = SDP_REASON_PROTOCOL;
	c->close_state = CLOSE_ABORTED;
	c->hard_error = ECONNRESET;
	c->sw.peer_done = c->sw.tx_done = true;
	free(c->sw.local);
	c->sw.local = NULL;
	c->sw.local_len = c->sw.local_off = 0;
	tcp_send_reset(c);
}

/* The peer's record is whole and valid (core/switch_reader.c checked it). */
static void on_peer_record(struct sdp_conn *c)
{
	const struct sdp_switch *rec = &c->sw.reader.rec;

	if (c->sw.local_provisional) {
		free(c->sw.local); /* the peer resends them */
		c->sw.local = NULL;
		c->sw.local_len = c->sw.local_off = 0;
	}
	if (c->sw.by_peer)
		c->sw.reason = rec->reason == SDP_REASON_FORKED ? SDP_REASON_FORKED : SDP_REASON_FAILOVER;
	if (rec->reason == SDP_REASON_FORKED) {
		/* The peer moved it for a fork or exec (its link may have failed
		 * first, as a consequence): that is why, and only a child there
		 * that holds the socket alone may bring it back (it asks). */
		c->sw.reason = SDP_REASON_FORKED;
		climb_peer_forked(c);
	}
}

/* Reads the peer's record and drops the resent bytes we already have. */
static void read_peer(struct sdp_conn *c)
{
	uint64_t max_back = (uint64_t)c->buf_count * c->buf_size + MAX_TAKEN_BACK;
	uint8_t scratch[SKIP_CHUNK];

	while (!c->sw.peer_done && c->close_state != CLOSE_ABORTED) {
		enum switch_read_state before = c->sw.reader.state, after;
		uint8_t *into;
		size_t want = switch_reader_want(&c->sw.reader, sizeof(scratch), &into);
		ssize_t n;

		if (want == 0) {
			c->sw.peer_done = true;
			break;
		}
		if (!into)
			into = scratch; /* bytes to skip */
		n = real.recv(c->tcp_fd, into, want, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* The peer's TCP ended first: it closed or vanished.  After
			 * its DisConn (rx_eof) a reset reads as EOF, as TCP's FIN
			 * then RST does: it ended its stream, then its socket.  A
			 * reset our watch's peek took meanwhile is that error. */
			int err = n < 0 ? errno : c->tcp_taken_err;

			c->tcp_taken_err = 0; /* the stream's end says it now */
			if (err && !c->rx_eof)
				c->sw.peer_err = err;
			c->sw.peer_done = true;
			break;
		}
		after = switch_reader_took(&c->sw.reader, (size_t)n, c->sw.rx_have, max_back,
					   SDP_REASON_COUNT);
		if (after == SWR_BAD) {
			switch_reset(c, c->sw.reader.why);
			return;
		}
		if (before == SWR_RECORD && after != SWR_RECORD)
			on_peer_record(c);
	}
}

static bool local_left(const struct sdp_conn *c)
{
	return c->sw.local_off < c->sw.local_len;
}

/* Kept bytes the app may read now.  Provisional ones wait for the peer's
 * record: it resends them (and they are dropped here), or its TCP ends
 * first (and they are its last bytes).  One read before the record would
 * come again in its resend, which skips only what rx_have counts. */
static bool local_servable(const struct sdp_conn *c)
{
	return local_left(c) && (!c->sw.local_provisional || c->sw.peer_done);
}

/* Both ends' records are through and nothing is left here: plain TCP. */
static void finish_if_done(struct sdp_conn *c)
{
	if (c->phase != CONN_SWITCHING || c->close_state == CLOSE_ABORTED)
		return;
	if (c->app_closed) {
		if (c->sw.tx_done && !c->zc_threads)
			conn_schedule_destroy(c); /* unread bytes of a closed socket: as TCP, dropped */
		return;
	}
	if (!c->sw.tx_done || !c->sw.peer_done || local_left(c) || c->sw.peer_err || c->zc_threads)
		return;
	if (climb_hold(c)) {
		conn_update_readiness(c, true);
		conn_signal_owner(c, CONN_EV_STATE);
		conn_wake_waiters(c);
		return;
	}
	climb_not_eligible(c); /* from here on the owner does the TCP I/O */
	free(c->sw.local);
	c->sw.local = NULL;
	conn_set_phase(c, CONN_FALLBACK);
	c->fail_reason = c->sw.reason;
	sdp_info("the stream now runs on TCP (%s)", sdp_reason_name(c->sw.reason));
	conn_update_readiness(c, true);
	conn_signal_owner(c, CONN_EV_FALLBACK);
	conn_wake_waiters(c);
	conn_schedule_destroy(c);
}

void switch_on_tcp_ready(struct sdp_conn *c, uint32_t events)
{
	(void)events;
	flush_drain(c);
	read_peer(c);
	finish_if_done(c);
	conn_wake_waiters(c);
	conn_update_readiness(c, true);
}

void switch_on_timer(struct sdp_conn *c)
{
	if (c->app_closed) {
		sdp_info("linger bound reached while moving a closed socket's stream to TCP");
		conn_schedule_destroy(c);
	}
}

/* ------------------------------------------------------- app threads */

static size_t copy_local(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
			 bool peek)
{
	size_t off = c->sw.local_off, copied = 0;

	for (int i = 0; i < iovcnt && off < c->sw.local_len; i++) {
		size_t chunk;

		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		chunk = iov[i].iov_len - skip;
		if (chunk > c->sw.local_len - off)
			chunk = c->sw.local_len - off;
		if (iov[i].iov_base)
			memcpy((uint8_t *)iov[i].iov_base + skip, c->sw.local + off, chunk);
		off += chunk;
		copied += chunk;
		skip = 0;
	}
	if (!peek)
		c->sw.local_off = off;
	return copied;
}

static ssize_t report_error(struct sdp_conn *c, size_t done)
{
	int err = c->hard_error;

	if (done || !err)
		return (ssize_t)done;
	c->hard_error = 0; /* reported once; then the stream reads as ended */
	c->rx_eof = true;
	return -err;
}

/* The peer's TCP error, reported once, to whichever of recv, send or
 * SO_ERROR asks first (the kernel's own error is reported so); then the
 * stream may finish its move. */
static int take_peer_err(struct sdp_conn *c)
{
	int err = c->sw.peer_err;

	c->sw.peer_err = 0;
	finish_if_done(c);
	return err;
}

/* Kept bytes the app may read now, into its buffers after `done`. */
static size_t take_local(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			 int flags)
{
	size_t n = local_servable(c) ? copy_local(c, iov, iovcnt, done, (flags & MSG_PEEK) != 0) : 0;

	if (n && c->st && !(flags & MSG_PEEK))
		atomic_fetch_add_explicit(&c->st->bytes_received, n, memory_order_relaxed);
	if (n && !(flags & MSG_PEEK))
		finish_if_done(c);
	return n;
}

static ssize_t switch_recv_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
				size_t done, size_t total, int flags, bool *again)
{
	*again = false;
	if (c->close_state == CLOSE_ABORTED)
		return report_error(c, done);
	done += take_local(c, iov, iovcnt, done, flags);
	if (done)
		return (ssize_t)done; /* kept bytes and kernel bytes never mix in one call */
	if (c->rd_shut)
		return 0;
	read_peer(c);
	finish_if_done(c);
	done = take_local(c, iov, iovcnt, done, flags); /* the peer ended before its record */
	if (done)
		return (ssize_t)done;
	if (!c->sw.peer_done) {
		*again = true;
		return 0;
	}
	if (c->sw.peer_err)
		return -take_peer_err(c);
	if (c->climb.eligible)
		return climb_tcp_recv(c, iov, iovcnt, done, total, flags, again);
	return CONN_USE_TCP;
}

/* Part of this call went over RDMA before the move: the rest follows on
 * TCP now, behind the resend, so the app sees one whole write. */
static ssize_t send_rest_on_tcp(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
				size_t done, int flags)
{
	struct iovec *rest = malloc(sizeof(*rest) * (size_t)iovcnt);
	struct msghdr msg = { .msg_iov = rest };
	size_t skip = done;
	ssize_t n;

	if (!rest)
		return (ssize_t)done;
	for (int i = 0; i < iovcnt; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		rest[msg.msg_iovlen].iov_base = (uint8_t *)iov[i].iov_base + skip;
		rest[msg.msg_iovlen++].iov_len = iov[i].iov_len - skip;
		skip = 0;
	}
	pthread_mutex_unlock(&c->lock); /* a blocking send must not stall the progress thread */
	n = real.sendmsg(c->tcp_fd, &msg, (flags & MSG_DONTWAIT) | MSG_NOSIGNAL);
	pthread_mutex_lock(&c->lock);
	free(rest);
	if (n > 0) {
		stats_count_tcp(c->st, true, (uint64_t)n);
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static ssize_t switch_send_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
				size_t done, size_t total, bool nonblock, int flags, bool *again)
{
	*again = false;
	if (c->close_state == CLOSE_ABORTED)
		return done ? (ssize_t)done : -(c->hard_error ? c->hard_error : ECONNRESET);
	flush_drain(c);
	if (!c->sw.tx_done) {
		*again = true;
		return (ssize_t)done;
	}
	read_peer(c); /* the peer's TCP may have failed: a send says so first */
	if (c->sw.peer_done && c->sw.peer_err)
		return done ? (ssize_t)done : -take_peer_err(c);
	finish_if_done(c);
	if (c->climb.eligible && done < total)
		return climb_tcp_send(c, iov, iovcnt, done, total, flags, again);
	if (!done)
		return CONN_USE_TCP;
	if (done == total || nonblock)
		return (ssize_t)done;
	return send_rest_on_tcp(c, iov, iovcnt, done, flags);
}

/* shutdown() while switching: the kernel socket's, after our resend. */
static int switch_shutdown(struct sdp_conn *c, int how)
{
	if (how == SHUT_RD || how == SHUT_RDWR) {
		c->rd_shut = true;
		real.shutdown(c->tcp_fd, SHUT_RD);
	}
	if (how != SHUT_WR && how != SHUT_RDWR)
		return 0;
	c->sw.shut_wr = true;
	if (c->sw.tx_done)
		real.shutdown(c->tcp_fd, SHUT_WR);
	conn_update_readiness(c, false);
	return 0;
}

/* POLL* bits while switching: kept bytes, then the kernel socket once the
 * peer's record is through (reads) and ours is out (writes). */
static unsigned switch_poll_mask(struct sdp_conn *c)
{
	unsigned tcp, mask = 0;

	if (c->close_state == CLOSE_ABORTED)
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR | POLLHUP;
	tcp = tcp_poll_now(c, POLLIN | POLLOUT | POLLRDHUP);
	if (local_servable(c))
		mask |= POLLIN | POLLRDNORM;
	if (c->sw.peer_done) {
		if (tcp & POLLIN)
			mask |= POLLIN | POLLRDNORM;
		mask |= tcp & (POLLRDHUP | POLLHUP | POLLERR);
		if (c->sw.peer_err)
			mask |= POLLIN | POLLRDNORM | POLLERR;
	}
	if (c->sw.tx_done && (tcp & POLLOUT))
		mask |= POLLOUT | POLLWRNORM;
	if (c->sw.tx_done)
		mask |= tcp & (POLLHUP | POLLERR);
	return mask;
}

#define MASK_READABLE (POLLIN | POLLHUP | POLLERR | POLLRDHUP)
#define MASK_WRITABLE (POLLOUT | POLLHUP | POLLERR)

static bool switch_readable(struct sdp_conn *c)
{
	return switch_poll_mask(c) & MASK_READABLE;
}

static bool switch_writable(struct sdp_conn *c)
{
	return switch_poll_mask(c) & MASK_WRITABLE;
}

/* Both in one pass: the kernel socket is asked once. */
static void switch_readiness(struct sdp_conn *c, bool *readable, bool *writable)
{
	unsigned mask = switch_poll_mask(c);

	*readable = mask & MASK_READABLE;
	*writable = mask & MASK_WRITABLE;
}

static uint64_t switch_readable_bytes(struct sdp_conn *c)
{
	uint64_t kernel = c->sw.peer_done && !local_left(c) ? tcp_unread_bytes(c) : 0;

	if (!local_servable(c))
		return kernel;
	return (uint64_t)(c->sw.local_len - c->sw.local_off) + kernel;
}

/* The channel's error first; then the peer's TCP error once it is the
 * next thing the stream reports. */
static int switch_take_error(struct sdp_conn *c)
{
	int err = channel_take_error(c);

	if (!err && c->sw.peer_done)
		err = take_peer_err(c);
	return err;
}

const struct conn_carrier switch_carrier = CONN_CARRIER(switch);

/* ------------------------------------------------------- fork and exec */

void conn_switch_begin(struct sdp_conn *c, enum sdp_reason reason)
{
	conn_lock(c);
	if (c->phase == CONN_OPEN && !c->attach_unconfirmed)
		switch_start(c, reason, false, false);
	conn_unlock(c);
}

void conn_mark_fork_shared(struct sdp_conn *c)
{
	conn_lock(c);
	c->fork_shared = true;
	conn_unlock(c);
}

/* Phases that end on their own soon: connect and attach in flight, or the
 * bytes of a fallback still draining into TCP. */
static bool phase_settling(enum conn_phase phase)
{
	switch (phase) {
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING:
	case CONN_AWAIT_ATTACH:
	case CONN_PENDING:
	case CONN_ATTACHING:
	case CONN_DRAINING:
		return true;
	case CONN_OPEN:
	case CONN_SWITCHING:
	case CONN_FALLBACK:
	case CONN_DEAD:
	case CONN_HELD:
	case CONN_CLIMB_HALF:
		return false;
	}
	return false;
}

/* A server's ATTACH not yet confirmed: the client may not know the channel. */
static bool attach_settling(const struct sdp_conn *c)
{
	return c->phase == CONN_OPEN && c->attach_unconfirmed && !c->carrier_dead;
}

/* Drives our resend and the peer's record from this thread (the progress
 * thread does too), sleeping on the TCP socket in between. */
static void drive_switch(struct sdp_conn *c, uint64_t now, uint64_t deadline_ms)
{
	struct pollfd p = { .fd = c->tcp_fd };

	flush_drain(c);
	read_peer(c);
	finish_if_done(c);
	if (c->phase != CONN_SWITCHING || (c->sw.tx_done && c->sw.peer_done))
		return;
	p.events = (short)((c->sw.tx_done ? 0 : POLLOUT) | (c->sw.peer_done ? 0 : POLLIN));
	pthread_mutex_unlock(&c->lock);
	(void)real.poll(&p, 1, deadline_ms - now < 50 ? (int)(deadline_ms - now) : 50);
	pthread_mutex_lock(&c->lock);
}

bool conn_switch_wait(struct sdp_conn *c, enum sdp_reason reason, uint64_t deadline_ms)
{
	bool plain_tcp;

	conn_lock(c);
	for (;;) {
		uint64_t now = progress_now_ms();

		if (now >= deadline_ms)
			break;
		if (phase_settling(c->phase) || attach_settling(c)) {
			conn_cond_wait_slice(c, now, deadline_ms); /* then move it once it opened */
		} else if (c->phase == CONN_OPEN) {
			if (!switch_start(c, reason, false, false))
				break;
		} else if (c->phase == CONN_SWITCHING && !(c->sw.tx_done && c->sw.peer_done)) {
			drive_switch(c, now, deadline_ms);
		} else if (c->phase == CONN_HELD) {
			climb_give_up(c, "fork or exec");
		} else {
			break;
		}
	}
	finish_if_done(c);
	plain_tcp = c->phase == CONN_FALLBACK || c->phase == CONN_DEAD;
	conn_unlock(c);
	return plain_tcp;
}

/* The byte-stream API of a channel with TCP's semantics: blocking and
 * non-blocking send/recv, timeouts, EINTR, MSG_* flags, shutdown, close,
 * SO_ERROR and queue sizes.  Each call dispatches through the carrier of
 * the phase (conn_internal.h); this file holds the open channel's steps
 * (channel_carrier; notify.c holds its readiness).  Waiting spins for
 * SDPSHIM_SPIN_US, then sleeps on the channel's readiness eventfd, so an
 * idle socket costs no CPU. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "core/wait_set.h"
#include "core/zcopy.h"

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

static bool has_qp_phase(enum conn_phase phase)
{
	return phase == CONN_OPEN || phase == CONN_AWAIT_ATTACH || phase == CONN_ATTACHING ||
	       phase == CONN_CLIMB_HALF;
}

uint64_t conn_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* A call's start, the origin of its bound (SO_RCVTIMEO/SO_SNDTIMEO): read
 * when the call first has to wait with a bound, so a call that finds its
 * bytes (or room) at once, or waits with none, reads no clock. */
static uint64_t call_start(uint64_t *start_us, int timeout_ms)
{
	if (timeout_ms < 0)
		return 0; /* conn_wait() reads the start only under a bound */
	if (!*start_us)
		*start_us = conn_now_us();
	return *start_us;
}

static bool ready_for(struct sdp_conn *c, bool for_write)
{
	return for_write ? conn_writable_locked(c) : conn_readable_locked(c);
}

/* Takes in c's completions from the app's thread (c locked; it may be
 * unlocked meanwhile).  A linked stream's are its link's, taken in with no
 * stream locked: the link hands each message to its stream under the
 * stream's lock, this one's included. */
static void app_poll_link(struct sdp_conn *c, void (*take_in)(struct sdp_link *))
{
	struct sdp_link *link = link_hold(c);

	if (!link) {
		cq_poll(c);
		return;
	}
	conn_unlock(c);
	take_in(link);
	conn_lock(c);
	cq_poll_if_due(c); /* what the messages allow: sends, readiness */
}

static void app_poll(struct sdp_conn *c)
{
	app_poll_link(c, link_app_reap_held);
}

void conn_app_poll(struct sdp_conn *c)
{
	conn_lock(c);
	if (has_qp_phase(c->phase))
		app_poll(c);
	conn_unlock(c);
}

/* A non-blocking call that would return EAGAIN on an open channel takes in
 * its link's completions once first, in the app's thread: a message
 * already there is returned now, not after another thread's wake-up (an
 * app that loops on recv(MSG_DONTWAIT) would otherwise wait for the
 * progress thread every time).  Only an open channel: one still binding
 * or attaching is the progress thread's to decide.  True: look again. */
static bool take_in_before_eagain(struct sdp_conn *c, bool *polled)
{
	unsigned seen = c->completions_seen;

	if (*polled || c->phase != CONN_OPEN)
		return false;
	*polled = true;
	app_poll_link(c, link_app_poll_held);
	return c->completions_seen != seen || !c->link;
}

/* Busy-polls the CQ for up to SDPSHIM_SPIN_US; true if ready meanwhile. */
static bool spin_until_ready(struct sdp_conn *c, bool for_write)
{
	uint64_t until;

	if (!sdp_tun.spin_us || !has_qp_phase(c->phase))
		return false;
	until = conn_now_us() + sdp_tun.spin_us;
	while (conn_now_us() < until) {
		app_poll(c);
		if (ready_for(c, for_write))
			return true;
		conn_unlock(c);
		sched_yield();
		conn_lock(c);
	}
	return false;
}

/* The sleeper's kernel wait (a cancellation point): its count drops after
 * it, however it ends.  A linked stream's sleeper also watches the links'
 * completion channels, ahead of the progress thread (core/wait_set.c). */
static int counted_sleep(int ind_fd, uint64_t serial, bool linked, int timeout_ms)
{
	int rc;

	pthread_cleanup_push(conn_sleep_end_cleanup, NULL);
	rc = wait_set_sleep(ind_fd, serial, linked, timeout_ms);
	pthread_cleanup_pop(1);
	return rc;
}

/* The wake-up of a link's completions came to this thread: it takes them
 * in, as the progress thread would have (c locked; unlocked meanwhile). */
static void take_channel_events(struct sdp_conn *c)
{
	conn_unlock(c);
	conn_take_completions_then_sleep(); /* not cancelled halfway: it disables cancellation */
	conn_lock(c);
	if (c->link && has_qp_phase(c->phase))
		cq_poll_if_due(c);
}

/* Called locked; sleeps unlocked.  0 when something changed, -EAGAIN on
 * timeout (as SO_RCVTIMEO/SO_SNDTIMEO do), -EINTR on a signal. */
int conn_wait(struct sdp_conn *c, bool for_write, int timeout_ms, uint64_t start_us)
{
	int ind_fd = for_write ? c->wr_fd : c->rd_fd;
	int remaining = -1, rc;
	bool linked;

	if (spin_until_ready(c, for_write))
		return 0;
	/* The bound first: a caller whose condition is not readiness (a
	 * zero-copy source waiting for its answer) must not loop on "ready". */
	if (timeout_ms >= 0) {
		int64_t left = (int64_t)timeout_ms - (int64_t)((conn_now_us() - start_us) / 1000);
		if (left <= 0)
			return -EAGAIN;
		remaining = (int)left;
	}
	linked = c->link && has_qp_phase(c->phase);
	if (linked) {
		/* A message the progress thread has not taken in yet wakes
		 * nobody if it is taken in here. */
		app_poll(c);
		if (ready_for(c, for_write))
			return 0;
	}
	/* A sleeper on the eventfd: from here on no indicator of c is deferred. */
	conn_sleeper_add_locked(c);
	if (ready_for(c, for_write)) {
		conn_sleeper_drop_locked(c);
		return 0;
	}
	conn_unlock(c);
	conn_sleep_begin_any(); /* no stream locked: it may take completions in */
	conn_prepare_wait(c);
	rc = counted_sleep(ind_fd, c->serial, linked, remaining);
	conn_lock(c);
	conn_sleeper_drop_locked(c);
	if (rc < 0)
		return errno == EINTR ? -EINTR : -errno;
	if (rc & WAIT_SET_CHANNEL)
		take_channel_events(c);
	return rc == 0 ? -EAGAIN : 0;
}

static void count_received(struct sdp_conn *c, size_t n)
{
	if (c->st && n)
		atomic_fetch_add_explicit(&c->st->bytes_received, n, memory_order_relaxed);
}

/* The contiguous piece of iov at byte offset skip: where a READ can land.
 * NULL (room 0) past the end, or in an entry with no base (MSG_TRUNC's
 * discard iovec): no pointer arithmetic on NULL. */
static void *iov_cursor(const struct iovec *iov, int iovcnt, size_t skip, size_t *room)
{
	for (int i = 0; i < iovcnt; i++) {
		if (skip < iov[i].iov_len) {
			*room = iov[i].iov_base ? iov[i].iov_len - skip : 0;
			return iov[i].iov_base ? (uint8_t *)iov[i].iov_base + skip : NULL;
		}
		skip -= iov[i].iov_len;
	}
	*room = 0;
	return NULL;
}

/* Zero-copy receive, for a blocking recv that found nothing buffered:
 * READ a waiting SrcAvail straight into the app's buffer, or offer the
 * buffer as a sink.  Returns bytes placed, 0, or -errno. */
static ssize_t recv_zero_copy(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			      int flags, int timeout_ms, uint64_t start_us)
{
	struct rx_entry *e;
	size_t room;
	void *dst;

	if (flags & (MSG_PEEK | MSG_TRUNC))
		return 0;
	if (c->phase != CONN_OPEN) {
		/* Still binding (a server's recv right after accept): no sink
		 * yet, but the opening wakes this wait, so a peer that sends
		 * only into sinks is not left waiting for one. */
		c->rx_wants_open = c->phase == CONN_AWAIT_ATTACH || c->phase == CONN_ATTACHING;
		return 0;
	}
	c->rx_wants_open = false;
	dst = iov_cursor(iov, iovcnt, done, &room);
	if (!dst)
		return 0;
	e = zc_head_source(c);
	if (e)
		return zc_recv_direct(c, e, dst, room);
	if (done == 0 && zc_sink_eligible(c, room, flags))
		return zc_recv_sink(c, dst, room, timeout_ms, start_us);
	return 0;
}

/* One step of recv: >0 bytes, 0 EOF, -errno, or *again set: wait. */
static ssize_t recv_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			 size_t total, int flags, bool *again)
{
	if (has_qp_phase(c->phase))
		cq_poll_if_due(c); /* it may start a switch: the carrier is read after it */
	return c->carrier->recv_step(c, iov, iovcnt, done, total, flags, again);
}

/* The channel's recv step: the bytes queued in the receive ring. */
static ssize_t channel_recv_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
				 size_t done, size_t total, int flags, bool *again)
{
	bool peek = (flags & MSG_PEEK) != 0;
	size_t n;

	*again = false;
	if (c->phase == CONN_DRAINING || c->phase == CONN_FALLBACK)
		return done ? (ssize_t)done : CONN_USE_TCP;
	n = rx_copy_out(c, iov, iovcnt, done, total - done, peek);
	if (!peek)
		count_received(c, n);
	done += n;
	if (done == total || (done > 0 && (peek || !(flags & MSG_WAITALL))))
		return (ssize_t)done;
	if (c->rx_eof || c->rd_shut)
		return (ssize_t)done;
	if (c->hard_error) {
		int err = c->hard_error;
		if (done)
			return (ssize_t)done;
		c->hard_error = 0; /* reported once; then the stream reads as ended */
		c->rx_eof = true;
		return -err;
	}
	if (c->error) {
		int err = c->error;
		c->error = 0;
		return done ? (ssize_t)done : -err;
	}
	if (c->phase == CONN_DEAD)
		return (ssize_t)done;
	*again = true;
	return (ssize_t)done;
}

static size_t take_queued(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			  size_t total, int flags)
{
	size_t n = rx_copy_out(c, iov, iovcnt, done, total - done, (flags & MSG_PEEK) != 0);

	if (!(flags & MSG_PEEK))
		count_received(c, n);
	return n;
}

ssize_t conn_recv(struct sdp_conn *c, const struct iovec *iov, int iovcnt, int flags,
		  bool nonblock, int timeout_ms)
{
	struct iovec discard = { NULL, iov_total(iov, iovcnt) };
	size_t total = discard.iov_len, done = 0;
	uint64_t start = 0;
	ssize_t rc;
	bool again, polled = false;

	if (flags & MSG_OOB)
		return -EINVAL; /* no urgent data is ever queued */
	if (flags & MSG_TRUNC) {
		iov = &discard;
		iovcnt = 1;
	}
	if (total == 0)
		return 0;
	conn_lock(c);
	c->rx_waiters++;
	for (;;) {
		rc = recv_step(c, iov, iovcnt, done, total, flags, &again);
		if (!again)
			break;
		done = (size_t)rc;
		if (nonblock || (flags & MSG_DONTWAIT)) {
			if (take_in_before_eagain(c, &polled))
				continue;
			zc_stage_kick(c); /* a SrcAvail becomes readable through the staging buffer */
			rc = done ? (ssize_t)done : -EAGAIN;
			break;
		}
		ssize_t z = recv_zero_copy(c, iov, iovcnt, done, flags, timeout_ms,
					   call_start(&start, timeout_ms));
		if (z < 0) {
			/* Bytes that came another way meanwhile are returned first. */
			done += take_queued(c, iov, iovcnt, done, total, flags);
			rc = done ? (ssize_t)done : z;
			break;
		}
		if (z > 0) {
			done += (size_t)z;
			if (done == total || !(flags & MSG_WAITALL)) {
				rc = (ssize_t)done;
				break;
			}
			continue;
		}
		/* Not READ directly (a small buffer, say): stage it, or this
		 * wait wakes at once for the same SrcAvail, again and again. */
		zc_stage_kick(c);
		int w = conn_wait(c, false, timeout_ms, call_start(&start, timeout_ms));
		if (w < 0) {
			rc = done ? (ssize_t)done : w;
			break;
		}
	}
	c->rx_waiters--;
	if (!c->rx_waiters) {
		c->rx_wants_open = false;
		zc_stage_kick(c);
	}
	if (rc > 0 && !(flags & MSG_PEEK))
		conn_settle_readable(c);
	conn_unlock(c);
	return rc;
}

static bool tx_is_shut(const struct sdp_conn *c)
{
	return c->close_state != CLOSE_ACTIVE && c->close_state != CLOSE_PEER_FIN;
}

/* One step of send: bytes queued so far, -errno, or *again to wait. */
static ssize_t send_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			 size_t total, bool nonblock, int flags, bool *again)
{
	if (has_qp_phase(c->phase) && c->tx_slots && !zc_tx_busy(c))
		cq_poll_if_due(c); /* it may start a switch: the carrier is read after it */
	return c->carrier->send_step(c, iov, iovcnt, done, total, nonblock, flags, again);
}

/* The channel's send step: the bytes go into the send slots. */
static ssize_t channel_send_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
				 size_t done, size_t total, bool nonblock, int flags, bool *again)
{
	size_t n;

	*again = false;
	if (c->phase == CONN_FALLBACK)
		return done ? (ssize_t)done : CONN_USE_TCP;
	if (c->hard_error || c->close_state == CLOSE_ABORTED)
		return done ? (ssize_t)done : -(c->hard_error ? c->hard_error : ECONNRESET);
	if (tx_is_shut(c) || c->phase == CONN_DEAD)
		return done ? (ssize_t)done : -EPIPE;
	if (c->error) {
		int err = c->error;
		c->error = 0;
		return done ? (ssize_t)done : -err;
	}
	if (c->carrier_dead)
		return done ? (ssize_t)done : -EPIPE; /* failed, and nothing was left to move */
	if (has_qp_phase(c->phase) && c->tx_slots && !zc_tx_busy(c)) {
		/* Only after the cq_poll: a switch it started has built its resend
		 * already, and bytes appended then would never leave. */
		n = tx_append(c, iov, iovcnt, done, total - done);
		if (n) {
			done += n;
			if (c->st) {
				atomic_fetch_add_explicit(&c->st->bytes_sent, n, memory_order_relaxed);
			}
			tx_kick(c);
		}
	}
	*again = done < total;
	return (ssize_t)done;
}

ssize_t conn_send(struct sdp_conn *c, const struct iovec *iov, int iovcnt, int flags,
		  bool nonblock, int timeout_ms)
{
	size_t total = iov_total(iov, iovcnt), done = 0;
	uint64_t start = 0;
	ssize_t rc;
	bool again, polled = false;

	if (flags & MSG_OOB)
		sdp_debug("MSG_OOB on an RDMA socket is sent as ordinary data");
	if (total == 0)
		return 0;
	bool nb = nonblock || (flags & MSG_DONTWAIT);
	bool try_zc = true;

	conn_lock(c);
	for (;;) {
		size_t room;
		const void *seg = iov_cursor(iov, iovcnt, done, &room);

		if (try_zc && seg && zc_send_eligible(c, room)) {
			int zc_wait_ms = nb ? (int)sdp_tun.zcopy_nb_wait_ms : timeout_ms;
			ssize_t z = zc_send(c, seg, room, nb, zc_wait_ms, call_start(&start, zc_wait_ms));

			if (z < 0) {
				rc = done ? (ssize_t)done : z;
				break;
			}
			if (z > 0 && c->st)
				atomic_fetch_add_explicit(&c->st->bytes_sent, (uint64_t)z,
							  memory_order_relaxed);
			done += (size_t)z;
			if (done == total) {
				rc = (ssize_t)done;
				break;
			}
			if (z > 0 && ((nb && (size_t)z < room) || c->zc_interrupted)) {
				rc = (ssize_t)done; /* partial progress, as TCP would */
				break;
			}
			if (z > 0)
				continue;
			try_zc = false; /* use buffer copy for the rest of this call */
		}
		rc = send_step(c, iov, iovcnt, done, total, nb, flags, &again);
		if (!again)
			break;
		done = (size_t)rc;
		if (nonblock || (flags & MSG_DONTWAIT)) {
			if (take_in_before_eagain(c, &polled))
				continue; /* credits or room may have come back */
			rc = done ? (ssize_t)done : -EAGAIN;
			break;
		}
		int w = conn_wait(c, true, timeout_ms, call_start(&start, timeout_ms));
		if (w < 0) {
			rc = done ? (ssize_t)done : w;
			break;
		}
	}
	if (!conn_writable_locked(c))
		c->wr_blocked = true; /* its next writability is a new edge (notify.c) */
	conn_unlock(c);
	return rc;
}

int conn_shutdown(struct sdp_conn *c, int how)
{
	int rc;

	conn_lock(c);
	rc = c->carrier->shutdown(c, how);
	conn_unlock(c);
	return rc;
}

static int channel_shutdown(struct sdp_conn *c, int how)
{
	if (c->phase == CONN_FALLBACK)
		return CONN_USE_TCP; /* the owner was not told yet */
	if (how == SHUT_RD || how == SHUT_RDWR) {
		c->rd_shut = true;
		conn_update_readiness(c, true);
	}
	if (how == SHUT_WR || how == SHUT_RDWR)
		close_ev_app_shutdown_wr(c);
	return 0;
}

void conn_app_close(struct sdp_conn *c, bool abort)
{
	conn_lock(c);
	c->app_closed = true;
	tx_note_awaited_sends(c); /* the close waits for its last sends */
	if (!c->lingering && !c->destroy_queued) {
		c->lingering = true;
		progress_linger_begin();
	}
	c->owner = NULL;
	c->owner_ops = NULL;
	c->st = NULL; /* the slot belongs to the socket, which is going away */
	switch (c->phase) {
	case CONN_HELD:
		climb_closed(c);
		conn_schedule_destroy(c); /* every byte is in the kernel socket already */
		break;
	case CONN_OPEN:
	case CONN_AWAIT_ATTACH:
	case CONN_ATTACHING:
	case CONN_CLIMB_HALF:
		/* Closing with unread bytes resets the connection, as TCP does. */
		if (c->rx_bytes_ready > 0 || zc_head_source(c))
			abort = true;
		if (abort) {
			close_ev_abort(c, ECONNRESET, true);
			conn_schedule_destroy(c);
			break;
		}
		close_ev_app_shutdown_wr(c); /* queued bytes first, then DisConn */
		conn_arm_timer(c, sdp_tun.linger_ms);
		bind_keep_bound(c); /* while binding: its own bound, if sooner */
		close_check_orphan(c);
		tx_kick(c); /* the final credit update it may have queued */
		break;
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING:
	case CONN_PENDING:
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		break;
	case CONN_SWITCHING:
		if (c->drain_buf || !c->sw.tx_done)
			conn_arm_timer(c, sdp_tun.linger_ms); /* our resend goes out first */
		else
			conn_schedule_destroy(c);
		break;
	case CONN_DRAINING:
		tcp_drain_on_close(c, abort); /* its bytes go on into TCP, within a bound */
		break;
	case CONN_FALLBACK:
	case CONN_DEAD:
		break; /* teardown already queued or running */
	}
	conn_unlock(c);
	conn_put(c);
	/* The arm this thread's last take-in put off is owed to its next
	 * sleep, and a thread that closes may never sleep here again (a
	 * thread per connection exits): the next message, a new stream's OPEN
	 * included, would wait for the lease timer.  Made now. */
	if (link_arms_owed())
		link_arm_owed_all();
}

int conn_take_error(struct sdp_conn *c)
{
	int err;

	conn_lock(c);
	err = c->carrier->take_error(c);
	conn_unlock(c);
	return err;
}

/* SO_ERROR: the channel's pending error once, then its hard error each
 * time.  A stream that fell back and whose owner was not told yet has the
 * kernel socket's (a failed TCP connect's, say): CONN_USE_TCP. */
int channel_take_error(struct sdp_conn *c)
{
	int err = c->error;

	c->error = 0;
	if (!err && c->hard_error)
		err = c->hard_error;
	if (!err && c->phase == CONN_FALLBACK)
		err = tcp_take_error(c);
	return err;
}

uint64_t conn_readable_bytes(struct sdp_conn *c)
{
	uint64_t n;

	conn_lock(c);
	n = c->carrier->readable_bytes(c);
	conn_unlock(c);
	return n;
}

static uint64_t channel_readable_bytes(struct sdp_conn *c)
{
	struct rx_entry *e;
	uint64_t n;

	if (has_qp_phase(c->phase))
		cq_poll(c);
	n = c->rx_bytes_ready;
	e = zc_head_source(c);
	if (e)
		n += e->unread; /* bytes the peer offered but we have not READ yet */
	return n;
}

/* SIOCOUTQ: the bytes the app wrote that the peer has not taken: the
 * channel's queued slots, those still to drain into TCP, and, once the
 * carrier writes TCP (draining, switching, held), the kernel socket's. */
uint64_t conn_unsent_bytes(struct sdp_conn *c)
{
	uint64_t n = 0;

	conn_lock(c);
	/* Off the channel (a fallback whose owner was not told yet included),
	 * the kernel socket holds what the app wrote. */
	if (c->carrier != &channel_carrier || c->phase == CONN_FALLBACK)
		n = tcp_unsent_bytes(c);
	if (c->drain_buf)
		n += c->drain_len - c->drain_off;
	for (uint32_t pos = c->tx_tail; c->tx_slots && pos != c->tx_head; pos++)
		n += c->tx_slots[pos % c->tx_nslots].len - SDP_BSDH_SIZE;
	conn_unlock(c);
	return n;
}

void conn_set_keepalive(struct sdp_conn *c, bool on, unsigned idle_s, unsigned intvl_s,
			unsigned cnt)
{
	conn_lock(c);
	c->keepalive = on;
	c->keepidle_s = idle_s ? idle_s : 7200;
	c->keepintvl_s = intvl_s ? intvl_s : 75;
	c->keepcnt = cnt ? cnt : 9;
	c->keep_probes = 0;
	c->last_rx_ms = progress_now_ms();
	if (on && c->phase == CONN_OPEN && !c->app_closed && !c->disconn_ack_owed)
		conn_arm_timer(c, c->keepidle_s * 1000); /* else the owed ack's tick arms it */
	conn_unlock(c);
}

enum conn_phase conn_get_phase(struct sdp_conn *c)
{
	enum conn_phase phase;

	conn_lock(c);
	phase = c->phase;
	conn_unlock(c);
	return phase;
}

enum sdp_reason conn_get_fail_reason(struct sdp_conn *c)
{
	enum sdp_reason reason;

	conn_lock(c);
	reason = c->fail_reason;
	conn_unlock(c);
	return reason;
}

enum sdp_reason conn_failed_reason(struct sdp_conn *c)
{
	enum sdp_reason reason = SDP_REASON_NONE;

	conn_lock(c);
	if (c->stream_ended || c->phase == CONN_DEAD)
		reason = c->fail_reason;
	conn_unlock(c);
	return reason;
}

bool conn_is_server(const struct sdp_conn *c)
{
	return c->is_server;
}

const struct sockaddr *conn_peer_addr(const struct sdp_conn *c)
{
	return (const struct sockaddr *)&c->peer_addr;
}

const struct conn_carrier channel_carrier = CONN_CARRIER(channel);

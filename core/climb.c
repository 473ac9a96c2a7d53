/* The climb back to RDMA (docs/upgrade.md): a stream that a failover moved
 * to TCP stays its channel's (phase HELD), which does its TCP I/O itself
 * and so knows the stream offset on TCP in each direction.  The client
 * dials a link again with a backoff and proves, with a key only the two
 * ends of the binding know, that the held stream is the one it names; each
 * end then writes on the new stream from its cut and reads TCP up to the
 * peer's (CLIMB_HALF), then the channel alone (OPEN).  Owns struct
 * conn_climb, the held carrier and the list of held streams. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/config.h"
#include "base/hmac.h"
#include "base/policy.h"
#include "base/log.h"
#include "base/real.h"
#include "base/sockaddr.h"
#include "core/conn_internal.h"
#include "core/link.h"

#define CLIMB_FIRST_MS   250u
#define CLIMB_BACKOFF_MAX_MS 1000u
/* The responder's wait for PROVE, in connect bounds.  The initiator bounds
 * its attempt by one, from before its REQ, and commits when it sends PROVE:
 * a responder that gave up first would reset a stream already cut, so it
 * waits for every initiator still inside its bound, with room for a slow
 * delivery (CI saw 24 streams climbing at once over one link miss one). */
#define CLIMB_RESPONDER_BOUNDS 4u
/* A cut further ahead of what we read than any TCP buffers hold is a lie. */
#define CLIMB_MAX_AHEAD  (256ull << 20)

static const char key_label[] = "sdpshim climb v1";

/* ------------------------------------------------------- held streams */

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_conn *held_list;

static void held_register(struct sdp_conn *c)
{
	if (c->climb.registered)
		return;
	conn_get(c);
	pthread_mutex_lock(&held_lock);
	c->climb.held_next = held_list;
	held_list = c;
	c->climb.registered = true;
	pthread_mutex_unlock(&held_lock);
}

/* c locked. */
static void held_unregister(struct sdp_conn *c)
{
	bool found = false;

	if (!c->climb.registered)
		return;
	pthread_mutex_lock(&held_lock);
	for (struct sdp_conn **p = &held_list; *p; p = &(*p)->climb.held_next) {
		if (*p == c) {
			*p = c->climb.held_next;
			found = true;
			break;
		}
	}
	c->climb.registered = false;
	pthread_mutex_unlock(&held_lock);
	if (found)
		conn_put(c); /* never the last: the caller holds c */
}

static bool same_tuple(const struct sdp_tuple *a, const struct sdp_tuple *b)
{
	return memcmp(a->src_addr, b->src_addr, 16) == 0 && memcmp(a->dst_addr, b->dst_addr, 16) == 0 &&
	       a->src_port == b->src_port && a->dst_port == b->dst_port;
}

/* The held stream of that tuple that waits for the asker (its other
 * end), with a reference, or NULL. */
static struct sdp_conn *held_find_responder(const struct sdp_tuple *t, bool asker_is_server)
{
	struct sdp_conn *found = NULL;

	pthread_mutex_lock(&held_lock);
	for (struct sdp_conn *c = held_list; c; c = c->climb.held_next) {
		if (!c->climb.initiator && c->is_server != asker_is_server && same_tuple(&c->tuple, t)) {
			found = c;
			conn_get(c);
			break;
		}
	}
	pthread_mutex_unlock(&held_lock);
	return found;
}

/* ------------------------------------------------------------ the key */

static size_t tuple_bytes(const struct sdp_tuple *t, uint8_t out[36])
{
	memcpy(out, t->src_addr, 16);
	memcpy(out + 16, t->dst_addr, 16);
	out[32] = (uint8_t)(t->src_port >> 8);
	out[33] = (uint8_t)t->src_port;
	out[34] = (uint8_t)(t->dst_port >> 8);
	out[35] = (uint8_t)t->dst_port;
	return 36;
}

/* K = HMAC(Ns || Nc, label || tuple): both nonces of the binding, which
 * only its two ends saw (docs/trust.md). */
static void derive_key(struct sdp_conn *c)
{
	uint8_t secret[2 * SDP_NONCE_SIZE], msg[sizeof(key_label) + 36];
	const uint8_t *ns = c->is_server ? c->nonce_local : c->nonce_peer;
	const uint8_t *nc = c->is_server ? c->nonce_peer : c->nonce_local;
	size_t len = sizeof(key_label) - 1;

	memcpy(secret, ns, SDP_NONCE_SIZE);
	memcpy(secret + SDP_NONCE_SIZE, nc, SDP_NONCE_SIZE);
	memcpy(msg, key_label, len);
	len += tuple_bytes(&c->tuple, msg + len);
	hmac_sha256(secret, sizeof(secret), msg, len, c->climb.key);
	memset(secret, 0, sizeof(secret));
}

/* MAC(K, role || Ni || Nr || tuple [|| cut]): role 'r' in the CHAL, 'i'
 * with the client's cut in the PROVE. */
static void climb_mac(const struct sdp_conn *c, char role, const uint64_t *cut,
		      uint8_t out[SDP_CLIMB_MAC_SIZE])
{
	uint8_t msg[1 + 2 * SDP_NONCE_SIZE + 36 + 8];
	size_t len = 0;

	msg[len++] = (uint8_t)role;
	memcpy(msg + len, c->climb.nonce_i, SDP_NONCE_SIZE);
	len += SDP_NONCE_SIZE;
	memcpy(msg + len, c->climb.nonce_r, SDP_NONCE_SIZE);
	len += SDP_NONCE_SIZE;
	len += tuple_bytes(&c->tuple, msg + len);
	if (cut) {
		for (int i = 7; i >= 0; i--)
			msg[len + (size_t)(7 - i)] = (uint8_t)(*cut >> (8 * i));
		len += 8;
	}
	hmac_sha256(c->climb.key, CLIMB_KEY_SIZE, msg, len, out);
}

/* SDPSHIM_DEBUG_CLIMB_LIE (tests only): this end plays a liar. */
enum { LIE_NONE, LIE_MAC, LIE_CUT, LIE_SILENT, LIE_RELEASE_AT_PROVE, LIE_CHAL_BUF_SIZE };

static void lie_about_mac(uint8_t mac[SDP_CLIMB_MAC_SIZE])
{
	if (sdp_tun.debug_climb_lie == LIE_MAC)
		mac[0] ^= 0x01;
}

static uint64_t lie_about_cut(uint64_t cut)
{
	return sdp_tun.debug_climb_lie == LIE_CUT ? cut + (1ull << 30) : cut;
}

/* A CHAL's buffers as large as the wire allows, past what the link's slots
 * hold: the initiator's messages must still fit its link's slots. */
static uint32_t lie_about_buf_size(uint32_t size)
{
	return sdp_tun.debug_climb_lie == LIE_CHAL_BUF_SIZE ? SDP_MAX_BUF_SIZE : size;
}

/* ------------------------------------------------------- the TCP side */

/* The part of iov past skip, at most max bytes, into out (at most 64). */
static int iov_window(const struct iovec *iov, int iovcnt, size_t skip, size_t max,
		      struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < iovcnt && max && n < 64; i++) {
		size_t len = iov[i].iov_len;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		len -= skip;
		if (len > max)
			len = max;
		out[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
		out[n++].iov_len = len;
		max -= len;
		skip = 0;
	}
	return n;
}

static bool prefix_left(const struct sdp_conn *c)
{
	return c->climb.rx_cut == CLIMB_CUT_UNKNOWN || c->climb.tcp_rx_off < c->climb.rx_cut;
}

static void back_on_rdma(struct sdp_conn *c);

/* CLIMB_HALF with TCP read up to the peer's cut: the stream goes on the
 * channel alone.  Never a stream the climb's failure reset. */
static bool half_done(const struct sdp_conn *c)
{
	return c->phase == CONN_CLIMB_HALF && c->close_state != CLOSE_ABORTED && !prefix_left(c);
}

/* Reads TCP (non-blocking; c locked): at most up to the peer's cut. */
ssize_t climb_tcp_recv(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
		       size_t total, int flags, bool *again)
{
	struct iovec win[64];
	struct msghdr msg = { .msg_iov = win };
	size_t want = total - done;
	ssize_t n;

	*again = false;
	if (c->close_state == CLOSE_ABORTED || c->hard_error) {
		int err = c->hard_error ? c->hard_error : ECONNRESET;

		if (done)
			return (ssize_t)done;
		c->hard_error = 0;
		c->rx_eof = true;
		return -err;
	}
	if (c->rd_shut || c->tcp_fd < 0)
		return (ssize_t)done;
	if (c->phase == CONN_CLIMB_HALF && c->climb.rx_cut != CLIMB_CUT_UNKNOWN &&
	    want > c->climb.rx_cut - c->climb.tcp_rx_off)
		want = (size_t)(c->climb.rx_cut - c->climb.tcp_rx_off);
	if (!want)
		return (ssize_t)done;
	if (flags & MSG_TRUNC) {
		n = real.recv(c->tcp_fd, NULL, want, MSG_TRUNC | MSG_DONTWAIT | (flags & MSG_PEEK));
	} else {
		msg.msg_iovlen = (size_t)iov_window(iov, iovcnt, done, want, win);
		n = real.recvmsg(c->tcp_fd, &msg, MSG_DONTWAIT | (flags & MSG_PEEK));
	}
	if (n > 0) {
		if (!(flags & MSG_PEEK)) {
			c->climb.tcp_rx_off += (uint64_t)n;
			stats_count_tcp(c->st, false, (uint64_t)n);
			if (half_done(c))
				back_on_rdma(c);
		}
		done += (size_t)n;
		*again = done < total && (flags & MSG_WAITALL) && !(flags & MSG_PEEK) &&
			 c->phase != CONN_OPEN;
		return (ssize_t)done;
	}
	if (n == 0)
		return (ssize_t)done; /* the peer's FIN */
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
		*again = !done || (flags & MSG_WAITALL);
		return (ssize_t)done;
	}
	return done ? (ssize_t)done : -errno;
}

/* Writes TCP (non-blocking; c locked), counting the stream offset. */
ssize_t climb_tcp_send(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
		       size_t total, int flags, bool *again)
{
	struct iovec win[64];
	struct msghdr msg = { .msg_iov = win };
	ssize_t n;

	*again = false;
	if (c->close_state == CLOSE_ABORTED || c->hard_error)
		return done ? (ssize_t)done : -(c->hard_error ? c->hard_error : ECONNRESET);
	if (c->tcp_fd < 0)
		return done ? (ssize_t)done : -EPIPE;
	msg.msg_iovlen = (size_t)iov_window(iov, iovcnt, done, total - done, win);
	n = real.sendmsg(c->tcp_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL | (flags & MSG_MORE));
	if (n > 0) {
		c->tx_stream_off += (uint64_t)n;
		stats_count_tcp(c->st, true, (uint64_t)n);
		done += (size_t)n;
		*again = done < total;
		return (ssize_t)done;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		*again = true;
		return (ssize_t)done;
	}
	return done ? (ssize_t)done : -(n < 0 ? errno : EPIPE);
}

/* ------------------------------------------------ the held carrier */

static ssize_t held_recv_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			      size_t total, int flags, bool *again)
{
	if (half_done(c)) {
		back_on_rdma(c);
		return c->carrier->recv_step(c, iov, iovcnt, done, total, flags, again);
	}
	return climb_tcp_recv(c, iov, iovcnt, done, total, flags, again);
}

static ssize_t held_send_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			      size_t total, bool nonblock, int flags, bool *again)
{
	if (c->phase == CONN_CLIMB_HALF)
		return channel_carrier.send_step(c, iov, iovcnt, done, total, nonblock, flags, again);
	return climb_tcp_send(c, iov, iovcnt, done, total, flags, again);
}

#define READ_BITS  (POLLIN | POLLRDNORM | POLLRDHUP)
#define WRITE_BITS (POLLOUT | POLLWRNORM)

static unsigned held_poll_mask(struct sdp_conn *c)
{
	unsigned tcp, mask;

	if (c->close_state == CLOSE_ABORTED)
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR | POLLHUP;
	tcp = tcp_poll_now(c, POLLIN | POLLOUT | POLLRDHUP);
	if (c->phase != CONN_CLIMB_HALF)
		return tcp | ((tcp & POLLIN) ? POLLRDNORM : 0) | ((tcp & POLLOUT) ? POLLWRNORM : 0);
	mask = channel_poll_mask(c) & (WRITE_BITS | POLLERR | POLLHUP);
	if (tcp & (POLLIN | POLLRDHUP | POLLHUP))
		mask |= POLLIN | POLLRDNORM | (tcp & POLLRDHUP);
	return mask;
}

static bool held_readable(struct sdp_conn *c)
{
	return held_poll_mask(c) & (POLLIN | POLLHUP | POLLERR | POLLRDHUP);
}

static bool held_writable(struct sdp_conn *c)
{
	return held_poll_mask(c) & (POLLOUT | POLLHUP | POLLERR);
}

static void held_readiness(struct sdp_conn *c, bool *readable, bool *writable)
{
	unsigned mask = held_poll_mask(c);

	*readable = mask & (POLLIN | POLLHUP | POLLERR | POLLRDHUP);
	*writable = mask & (POLLOUT | POLLHUP | POLLERR);
}

/* A responder whose CHAL is out: the peer may already write on the new
 * channel, so the stream does not leave HELD before that settles, by the
 * peer's PROVE or the attempt's bound (its timer).  c locked; let go while
 * it waits, until deadline_ms. */
static void settle_attempt(struct sdp_conn *c, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = progress_now_ms();

		if (c->phase != CONN_HELD || c->climb.step != CLIMB_CHAL_SENT || now >= deadline_ms)
			return;
		conn_cond_wait_slice(c, now, deadline_ms);
	}
}

/* A shutdown ends the climb: the stream stays on TCP (FALLBACK) and the
 * owner shuts the kernel socket.  One that comes while the peer may
 * already be writing on the new channel (our CHAL is out) lets the attempt
 * settle first: the shutdown then goes where the stream is. */
static int held_shutdown(struct sdp_conn *c, int how)
{
	settle_attempt(c, progress_now_ms() + CLIMB_RESPONDER_BOUNDS * sdp_tun.connect_timeout_ms);
	if (c->phase == CONN_CLIMB_HALF || c->phase == CONN_OPEN)
		return channel_carrier.shutdown(c, how);
	climb_give_up(c, "shutdown");
	return CONN_USE_TCP;
}

static uint64_t held_readable_bytes(struct sdp_conn *c)
{
	uint64_t kernel = tcp_unread_bytes(c);

	if (c->phase == CONN_CLIMB_HALF && c->climb.rx_cut != CLIMB_CUT_UNKNOWN &&
	    kernel > c->climb.rx_cut - c->climb.tcp_rx_off)
		kernel = c->climb.rx_cut - c->climb.tcp_rx_off;
	return kernel;
}

/* The stream reads TCP here, whose error poll() reports (POLLERR): SO_ERROR
 * says it, as on a plain socket, after any of the channel's own. */
static int held_take_error(struct sdp_conn *c)
{
	int err = channel_take_error(c);

	return err ? err : tcp_take_error(c);
}

const struct conn_carrier held_carrier = CONN_CARRIER(held);

/* --------------------------------------------------------- holding */

/* Listed from the switch's start: a client's REQ that comes before our
 * end of the switch is through is told to try again, not refused. */
void climb_note_switch(struct sdp_conn *c, enum sdp_reason reason)
{
	c->climb.eligible = c->policy.climb && reason == SDP_REASON_FAILOVER && !c->fork_shared &&
			    !c->app_closed && c->tuple.src_port && c->tuple.dst_port &&
			    c->owner_ops != NULL;
	c->climb.initiator = !c->is_server;
	c->climb.tcp_rx_off = c->sw.rx_have;
	c->climb.rx_cut = CLIMB_CUT_UNKNOWN;
	if (c->climb.eligible)
		held_register(c);
}

/* The peer moved the stream for a fork: its child that takes the socket
 * over, if it is the only holder, dials our rendezvous port; we wait. */
void climb_peer_forked(struct sdp_conn *c)
{
	c->climb.initiator = false;
	if (!rdv_port())
		climb_not_eligible(c); /* no port of ours was named: nobody can ask */
}

void climb_note_peer_rdv(struct sdp_conn *c, const struct sockaddr *link_peer, uint16_t port)
{
	memset(&c->climb.peer_rdv, 0, sizeof(c->climb.peer_rdv));
	if (!port)
		return;
	if (link_peer->sa_family == AF_INET6)
		memcpy(&c->climb.peer_rdv, link_peer, sizeof(struct sockaddr_in6));
	else if (link_peer->sa_family == AF_INET)
		memcpy(&c->climb.peer_rdv, link_peer, sizeof(struct sockaddr_in));
	sockaddr_set_port(&c->climb.peer_rdv, port);
}

void climb_not_eligible(struct sdp_conn *c)
{
	c->climb.eligible = false;
	held_unregister(c);
}

static void release_on_progress(void *arg)
{
	struct sdp_conn *c = arg;

	conn_release_channel(c);
	conn_lock(c);
	c->climb.released = true;
	if (c->phase == CONN_HELD && c->climb.initiator && c->climb.step == CLIMB_IDLE &&
	    !c->app_closed)
		conn_arm_timer(c, c->climb.backoff_ms);
	conn_unlock(c);
	conn_put(c);
}

/* The channel's RDMA resources go (on the progress thread: the device
 * may be leaving); the stream stays held.  c locked. */
static void release_channel(struct sdp_conn *c)
{
	c->climb.released = false;
	conn_get(c);
	if (progress_defer(release_on_progress, c) != 0) {
		conn_put(c);
		c->climb.refused = true; /* no memory: it stays on TCP */
	}
}

bool climb_hold(struct sdp_conn *c)
{
	if (!c->climb.eligible || c->app_closed || c->sw.shut_wr || c->rd_shut || c->sw.peer_err ||
	    c->close_state != CLOSE_ACTIVE || c->tcp_fd < 0 || c->hard_error)
		return false;
	derive_key(c);
	free(c->sw.local);
	c->sw.local = NULL;
	conn_set_phase(c, CONN_HELD);
	c->fail_reason = c->sw.reason;
	c->climb.step = CLIMB_IDLE;
	c->climb.backoff_ms = CLIMB_FIRST_MS;
	c->climb.attempts = 0;
	held_register(c);
	release_channel(c);
	sdp_info("the stream now runs on TCP (failover); it goes back to RDMA when it can");
	return true;
}

/* The stream moved (its phase, or its fate): readiness, its owner and any
 * thread waiting on it hear of it (c locked). */
static void tell_moved(struct sdp_conn *c, enum conn_event ev)
{
	conn_update_readiness(c, true);
	conn_signal_owner(c, ev);
	conn_wake_waiters(c);
}

/* An attempt in flight ends here with no next step (c locked): its bound's
 * timer goes.  True if one was in flight. */
static bool stop_attempt(struct sdp_conn *c)
{
	if (c->climb.step == CLIMB_IDLE)
		return false;
	progress_timer_cancel(&c->timer);
	c->climb.step = CLIMB_IDLE;
	return true;
}

/* HELD: the stream stays on TCP for good (plain FALLBACK).  An attempt in
 * flight ends with it: the channel's release tells the peer (RELEASED),
 * and a message of the attempt that crosses it is ignored (climb_on_step). */
void climb_give_up(struct sdp_conn *c, const char *why)
{
	if (c->phase != CONN_HELD)
		return;
	sdp_debug("a held stream stays on TCP: %s", why);
	stop_attempt(c);
	held_unregister(c);
	c->climb.eligible = false;
	conn_set_phase(c, CONN_FALLBACK); /* fail_reason: why it moved (failover, forked) */
	tell_moved(c, CONN_EV_FALLBACK);
	conn_schedule_destroy(c);
}

/* ------------------------------------------------------- the channel */

/* A fresh channel state for the next attempt (c locked, resources
 * released): what conn_alloc leaves, but the stream offsets. */
static void reset_channel(struct sdp_conn *c)
{
	c->rx_head = c->rx_tail = c->rx_seq = c->rx_ack = c->rx_ack_sent = c->rx_payload_ack = 0;
	c->rx_bytes_ready = 0;
	c->rx_new_data = c->rx_eof = c->peer_starving = false;
	c->tx_tail = c->tx_posted = c->tx_head = c->tx_seq = c->tx_peer_ack = 0;
	c->ctrl_pending = c->ctrl_next = c->ctrl_outstanding = 0;
	c->tx_nslots = 0;
	c->tx_peer_bufs = 0;
	c->sq_outstanding = 0;
	c->carrier_dead = c->qp_in_error = c->carrier_reaping = false;
	c->carrier_why = NULL;
	c->link_stopped = c->link_fenced = c->link_open_sent = false;
	memset(&c->src, 0, sizeof(c->src));
	memset(&c->rd, 0, sizeof(c->rd));
	memset(&c->sink, 0, sizeof(c->sink));
	memset(&c->psink, 0, sizeof(c->psink));
	memset(c->win, 0, sizeof(c->win));
	c->zc_nb_backoff = 0;
	c->zc_interrupted = c->sink_voided = c->write_active = c->wr_unconfirmed = false;
	c->src_cancel_pending = c->disconn_ack_owed = false;
	c->rd_compl_bytes = c->wr_compl_bytes = 0;
	c->rd_compl_off = c->sink_ack_off = 0;
	c->rx_wants_open = false;
	c->stage_len = c->stage_off = c->stage_fill = 0;
	memset(&c->sw, 0, sizeof(c->sw));
	c->write_rolled_back = false;
	c->attach_unconfirmed = c->attach_posted = c->attach_held = false;
	c->error = 0;
	c->established = false;
	c->rx_stream_off = c->climb.tcp_rx_off;
	c->climb.rx_cut = CLIMB_CUT_UNKNOWN;
}

/* The attempt ended without a new channel: its stream index goes, and
 * the client tries again after the backoff.  c locked. */
static void attempt_over(struct sdp_conn *c, const char *why)
{
	if (c->climb.step != CLIMB_IDLE)
		sdp_debug("climb attempt over: %s", why);
	c->climb.step = CLIMB_IDLE;
	c->climb.attempts++;
	if (c->climb.backoff_ms < CLIMB_BACKOFF_MAX_MS)
		c->climb.backoff_ms *= 2;
	if (c->climb.backoff_ms > CLIMB_BACKOFF_MAX_MS)
		c->climb.backoff_ms = CLIMB_BACKOFF_MAX_MS;
	progress_timer_cancel(&c->timer);
	if (c->climb.refused) {
		climb_give_up(c, why);
		return;
	}
	release_channel(c);
}

static void start_attempt(void *arg)
{
	struct sdp_conn *c = arg;
	enum sdp_reason reason = SDP_REASON_NONE;
	int rc;

	conn_lock(c);
	if (c->phase != CONN_HELD || c->climb.step != CLIMB_IDLE || !c->climb.released ||
	    c->app_closed) {
		conn_unlock(c);
		conn_put(c);
		return;
	}
	if (!bind_make_nonce(c->climb.nonce_i)) {
		conn_unlock(c); /* no attempt, and no timer for another: it stays on TCP */
		conn_put(c);
		return;
	}
	reset_channel(c);
	c->climb.step = CLIMB_DIALING;
	c->climb.released = false;
	conn_arm_timer(c, sdp_tun.connect_timeout_ms);
	conn_unlock(c);
	if (c->climb.via_rdv)
		rc = link_client_open(c, (const struct sockaddr *)&c->climb.peer_rdv,
				      sockaddr_len((const struct sockaddr *)&c->climb.peer_rdv), &reason);
	else
		rc = link_client_open(c, (const struct sockaddr *)&c->peer_addr, c->peer_addr_len,
				      &reason);
	if (rc) {
		conn_lock(c);
		if (c->phase == CONN_HELD && c->climb.step == CLIMB_DIALING)
			attempt_over(c, "no link");
		conn_unlock(c);
	}
	conn_put(c);
}

void climb_on_timer(struct sdp_conn *c)
{
	if (c->app_closed) {
		conn_schedule_destroy(c);
		return;
	}
	if (c->phase == CONN_CLIMB_HALF) {
		if (c->climb.step == CLIMB_CUT_SENT) {
			sdp_warn("the peer never confirmed the stream's move back to RDMA; resetting it");
			climb_half_lost(c, "no ACK");
		}
		return;
	}
	switch (c->climb.step) {
	case CLIMB_IDLE:
		if (!c->climb.initiator || !c->climb.released)
			return;
		conn_get(c);
		if (progress_defer(start_attempt, c) != 0)
			conn_put(c);
		return;
	case CLIMB_DIALING:
	case CLIMB_CHAL_SENT:
		attempt_over(c, "no answer within the connect bound");
		return;
	case CLIMB_CUT_SENT:
	case CLIMB_DONE:
		return;
	}
}

/* The link of an attempt failed (or never came up).  c locked. */
void climb_link_lost(struct sdp_conn *c, const char *why)
{
	if (c->phase == CONN_CLIMB_HALF) {
		climb_half_lost(c, why);
		return;
	}
	if (c->phase == CONN_HELD && c->climb.step != CLIMB_IDLE)
		attempt_over(c, why);
}

/* The new channel failed while TCP still had bytes to read, or before the
 * server's cut was known: which bytes went where is not known to both
 * ends, so the connection is reset (never guessed). */
void climb_half_lost(struct sdp_conn *c, const char *why)
{
	sdp_warn("the channel failed while the stream was moving back to RDMA (%s); resetting "
		 "the connection", why);
	c->climb.step = CLIMB_IDLE; /* the attempt is over: a late ACK is ignored */
	c->fail_reason = SDP_REASON_FAILOVER;
	c->close_state = CLOSE_ABORTED;
	c->hard_error = ECONNRESET;
	c->carrier_dead = true;
	tcp_send_reset(c);
	tell_moved(c, CONN_EV_STATE);
}

static void back_on_rdma(struct sdp_conn *c)
{
	conn_set_phase(c, CONN_OPEN);
	c->climb.step = CLIMB_IDLE; /* no step outlives the climb (the next failover's) */
	tx_kick(c);
	progress_timer_cancel(&c->timer);
	if (c->keepalive)
		conn_arm_timer(c, c->keepidle_s * 1000);
	held_unregister(c);
	c->fail_reason = SDP_REASON_NONE;
	c->last_rx_ms = progress_coarse_ms();
	if (c->st) {
		atomic_fetch_add_explicit(&c->st->switches, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&c->st->climbs, 1, memory_order_relaxed);
		atomic_store_explicit(&c->st->moved_ms, stats_now_ms(), memory_order_relaxed);
	}
	sdp_info("the stream is back on RDMA (%u attempts)", c->climb.attempts + 1);
	tell_moved(c, CONN_EV_STATE);
}

/* Writes from now on go on the new channel (c locked). */
static void cut_sender(struct sdp_conn *c)
{
	conn_set_phase(c, CONN_CLIMB_HALF);
	c->established = true;
	tx_kick(c);
	conn_update_readiness(c, true);
	conn_wake_waiters(c);
}

static bool cut_plausible(const struct sdp_conn *c, uint64_t cut)
{
	return cut >= c->climb.tcp_rx_off && cut - c->climb.tcp_rx_off <= CLIMB_MAX_AHEAD;
}

/* The peer's first byte on the channel is at its cut: the channel's
 * offsets (a SrcAvail's, a sink's) count from there.  Nothing of the peer's
 * can be queued yet, its cut precedes its stream messages on the link. */
static bool take_peer_cut(struct sdp_conn *c, uint64_t cut)
{
	if (c->rx_head != c->rx_tail)
		return false;
	c->climb.rx_cut = cut;
	c->rx_stream_off = cut;
	c->climb.step = CLIMB_DONE;
	return true;
}

/* ------------------------------------------------------- the client */

bool climb_send_req(struct sdp_conn *c)
{
	struct sdp_climb_req r = { .tuple = c->tuple, .buf_count = c->buf_count,
				   .buf_size = c->buf_size,
				   .flags = c->is_server ? SDP_CLIMB_FROM_SERVER : 0 };
	uint8_t payload[sizeof(struct sdp_climb_req_wire)];

	if (c->climb.step != CLIMB_DIALING)
		return false;
	memcpy(r.nonce, c->climb.nonce_i, SDP_NONCE_SIZE);
	sdp_climb_req_to_wire(&r, payload);
	if (link_stream_send_kind(c, SDP_LINK_CLIMB_REQ, payload, sizeof(payload)) != 0) {
		attempt_over(c, "the link went");
		return false;
	}
	return true;
}

static bool on_chal(struct sdp_conn *c, const uint8_t *payload)
{
	struct sdp_climb_chal ch;
	uint8_t mac[SDP_CLIMB_MAC_SIZE], payload_out[sizeof(struct sdp_climb_prove_wire)];
	uint64_t cut;

	if (c->phase != CONN_HELD || c->climb.step != CLIMB_DIALING ||
	    sdp_climb_chal_from_wire(payload, sizeof(struct sdp_climb_chal_wire), &ch) != SDP_WIRE_OK)
		return false;
	memcpy(c->climb.nonce_r, ch.nonce, SDP_NONCE_SIZE);
	climb_mac(c, 'r', NULL, mac);
	if (!ct_equal(mac, ch.mac, sizeof(mac))) {
		sdp_warn("the peer could not prove it holds this stream (climb MAC); it stays on TCP");
		c->climb.refused = true;
		return false; /* the link fails: nothing more from that peer */
	}
	if (conn_setup_tx(c, ch.buf_size, ch.buf_count) != 0) {
		attempt_over(c, "no memory for send slots");
		return true;
	}
	cut = lie_about_cut(c->tx_stream_off);
	climb_mac(c, 'i', &cut, mac);
	lie_about_mac(mac);
	sdp_climb_cut_to_wire(mac, cut, payload_out);
	if (link_stream_send_kind(c, SDP_LINK_CLIMB_PROVE, payload_out, sizeof(payload_out)) != 0) {
		attempt_over(c, "the link went");
		return true;
	}
	c->climb.step = CLIMB_CUT_SENT;
	c->climb.tx_cut = c->tx_stream_off;
	cut_sender(c);
	return true;
}

/* Both cuts are known: TCP is read up to the peer's (CLIMB_HALF), or, with
 * nothing left there, the stream is on RDMA.  c locked. */
static void after_peer_cut(struct sdp_conn *c)
{
	progress_timer_cancel(&c->timer);
	if (!prefix_left(c))
		back_on_rdma(c);
	else
		conn_update_readiness(c, true);
}

static bool on_ack(struct sdp_conn *c, const uint8_t *payload)
{
	uint64_t cut;

	if (c->phase != CONN_CLIMB_HALF || c->climb.step != CLIMB_CUT_SENT ||
	    sdp_climb_cut_from_wire(payload, sizeof(struct sdp_climb_ack_wire), false, NULL, &cut) !=
		    SDP_WIRE_OK)
		return false;
	if (!cut_plausible(c, cut)) {
		sdp_warn("the peer's cut (%llu) is not in this stream's window (%llu read); resetting",
			 (unsigned long long)cut, (unsigned long long)c->climb.tcp_rx_off);
		climb_half_lost(c, "implausible cut");
		return false;
	}
	if (!take_peer_cut(c, cut))
		return false;
	after_peer_cut(c);
	return true;
}

static bool on_nak(struct sdp_conn *c, const uint8_t *payload)
{
	const struct sdp_open_nak_wire *nak = (const void *)payload;

	if (c->phase != CONN_HELD || c->climb.step != CLIMB_DIALING)
		return false;
	if (nak->code == SDP_REJECT_RULE || nak->code == SDP_REJECT_TUPLE) {
		sdp_info("the peer will not move this stream back to RDMA (%s); it stays on TCP",
			 nak->code == SDP_REJECT_RULE ? "refused" : "unknown stream");
		c->climb.refused = true;
	}
	c->link_open_sent = false; /* the server never took the index */
	attempt_over(c, "refused");
	return true;
}

/* ------------------------------------------------------- the server */

static void refuse_and_put(struct sdp_link *link, uint16_t idx, struct sdp_conn *c, uint8_t code)
{
	climb_refuse(link, idx, code);
	if (c)
		conn_put(c);
}

void climb_on_req(struct sdp_link *link, uint16_t idx, const struct sdp_climb_req *r,
		  const struct sdp_policy *listener_policy)
{
	struct sdp_climb_chal ch;
	uint8_t payload[sizeof(struct sdp_climb_chal_wire)];
	struct sdp_conn *c;

	if (!listener_policy->climb) {
		refuse_and_put(link, idx, NULL, SDP_REJECT_RULE);
		return;
	}
	if (sdp_tun.debug_climb_lie == LIE_SILENT)
		return;
	c = held_find_responder(&r->tuple, r->flags & SDP_CLIMB_FROM_SERVER);
	if (!c) {
		refuse_and_put(link, idx, NULL, SDP_REJECT_TUPLE);
		return;
	}
	conn_lock(c);
	if (c->phase != CONN_HELD || c->climb.step != CLIMB_IDLE || !c->climb.released ||
	    c->app_closed) {
		/* Still switching, or busy: the client tries again (a stream that
		 * stays on TCP is no longer listed, and gets TUPLE). */
		conn_unlock(c);
		refuse_and_put(link, idx, c, SDP_REJECT_RESOURCES);
		return;
	}
	if (!bind_make_nonce(c->climb.nonce_r)) {
		conn_unlock(c);
		refuse_and_put(link, idx, c, SDP_REJECT_RESOURCES);
		return;
	}
	reset_channel(c);
	memcpy(c->climb.nonce_i, r->nonce, SDP_NONCE_SIZE);
	if (link_stream_setup(c, link, idx) != 0 || conn_setup_tx(c, r->buf_size, r->buf_count) != 0) {
		/* The NAK tells the client the index was never taken: it goes back
		 * first, so that no RELEASED follows.  Still locked: no close or
		 * give-up between the refusal and the attempt's end (the stream is
		 * still HELD, the step still IDLE). */
		link_stream_unsetup(c);
		climb_refuse(link, idx, SDP_REJECT_RESOURCES);
		attempt_over(c, "no resources");
		conn_unlock(c);
		conn_put(c);
		return;
	}
	c->climb.released = false;
	memcpy(ch.nonce, c->climb.nonce_r, SDP_NONCE_SIZE);
	climb_mac(c, 'r', NULL, ch.mac);
	lie_about_mac(ch.mac);
	ch.buf_count = c->buf_count;
	ch.buf_size = lie_about_buf_size(c->buf_size);
	sdp_climb_chal_to_wire(&ch, payload);
	c->climb.step = CLIMB_CHAL_SENT;
	conn_arm_timer(c, CLIMB_RESPONDER_BOUNDS * sdp_tun.connect_timeout_ms);
	if (link_stream_send_kind(c, SDP_LINK_CLIMB_CHAL, payload, sizeof(payload)) != 0)
		attempt_over(c, "the link went");
	conn_unlock(c);
	conn_put(c);
}

static bool on_prove(struct sdp_conn *c, const uint8_t *payload)
{
	uint8_t mac[SDP_CLIMB_MAC_SIZE], want[SDP_CLIMB_MAC_SIZE];
	uint8_t ack[sizeof(struct sdp_climb_ack_wire)];
	uint64_t cut, ours;

	if (c->phase != CONN_HELD || c->climb.step != CLIMB_CHAL_SENT ||
	    sdp_climb_cut_from_wire(payload, sizeof(struct sdp_climb_prove_wire), true, mac, &cut) !=
		    SDP_WIRE_OK)
		return false;
	climb_mac(c, 'i', &cut, want);
	if (!ct_equal(mac, want, sizeof(mac))) {
		sdp_warn("a climb to RDMA named this stream without its key; refused");
		attempt_over(c, "bad MAC");
		return false;
	}
	if (!cut_plausible(c, cut)) {
		sdp_warn("a climb's cut (%llu) is not in this stream's window (%llu read); refused",
			 (unsigned long long)cut, (unsigned long long)c->climb.tcp_rx_off);
		attempt_over(c, "implausible cut");
		return false;
	}
	if (sdp_tun.debug_climb_lie == LIE_RELEASE_AT_PROVE) {
		attempt_over(c, "told to let it go at PROVE"); /* as a close here would */
		return true;
	}
	if (!take_peer_cut(c, cut)) {
		attempt_over(c, "stream bytes before the cut");
		return false;
	}
	ours = c->tx_stream_off;
	sdp_climb_cut_to_wire(NULL, lie_about_cut(ours), ack);
	if (link_stream_send_kind(c, SDP_LINK_CLIMB_ACK, ack, sizeof(ack)) != 0) {
		attempt_over(c, "the link went");
		return true;
	}
	cut_sender(c);
	after_peer_cut(c);
	return true;
}

/* CLIMB_HALF, no ACK yet: has anything of this end's gone on the new
 * channel since its cut (bytes, a zero-copy source or sink, a DisConn), or
 * did the app shut its reading there (only the channel knows: HELD would
 * have shut the kernel socket)? */
static bool sent_since_cut(const struct sdp_conn *c)
{
	return c->tx_stream_off != c->climb.tx_cut || c->tx_head != c->tx_tail || c->src.active ||
	       c->write_active || c->close_state != CLOSE_ACTIVE || c->app_closed || c->rd_shut;
}

bool climb_on_peer_released(struct sdp_conn *c)
{
	if (c->phase != CONN_CLIMB_HALF || c->climb.step != CLIMB_CUT_SENT || sent_since_cut(c))
		return false;
	if (!c->climb.let_go_said)
		sdp_info("the peer let the stream's move back to RDMA go before answering it; the "
			 "stream stays on TCP (and tries again later)");
	c->climb.let_go_said = true;
	conn_set_phase(c, CONN_HELD);
	c->established = false;
	attempt_over(c, "the peer released it before its ACK");
	tell_moved(c, CONN_EV_STATE);
	return true;
}

/* This end ended the attempt, and a message of it may still cross that (the
 * stream is on the attempt's link until its release, which tells the
 * peer): HELD after its bound, FALLBACK (on TCP for good, whatever step it
 * had reached), CLIMB_HALF once reset.  Nothing such a message carries can
 * move the stream, so a liar gains nothing by sending one; failing the
 * link would reset every stream climbing on it.  c locked. */
static bool attempt_ended_here(const struct sdp_conn *c)
{
	if (c->phase == CONN_FALLBACK)
		return true;
	return (c->phase == CONN_HELD || c->phase == CONN_CLIMB_HALF) &&
	       c->climb.step == CLIMB_IDLE;
}

bool climb_on_step(struct sdp_conn *c, uint8_t kind, const uint8_t *payload)
{
	if (attempt_ended_here(c)) {
		sdp_debug("a climb message (kind %u) after the attempt ended here: ignored", kind);
		return true;
	}
	switch ((enum sdp_link_kind)kind) {
	case SDP_LINK_CLIMB_CHAL:
		return on_chal(c, payload);
	case SDP_LINK_CLIMB_ACK:
		return on_ack(c, payload);
	case SDP_LINK_CLIMB_NAK:
		return on_nak(c, payload);
	case SDP_LINK_CLIMB_PROVE:
		return on_prove(c, payload);
	default:
		return false;
	}
}

void climb_on_tcp_ready(struct sdp_conn *c)
{
	conn_update_readiness(c, true);
	conn_wake_waiters(c);
}

void climb_closed(struct sdp_conn *c)
{
	held_unregister(c);
	/* The attempt ends with the stream: a CHAL that crosses the close gets
	 * no PROVE (the peer would move half its stream for nobody, and reset
	 * it when the RELEASED came), and no REQ goes for a link still rising. */
	if (stop_attempt(c))
		sdp_debug("climb attempt over: the stream is closing");
}

void climb_device_added(void)
{
	struct sdp_conn **list = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&held_lock);
	for (struct sdp_conn *c = held_list; c; c = c->climb.held_next) {
		if (!c->climb.initiator)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct sdp_conn **grown = realloc(list, ncap * sizeof(*list));

			if (!grown)
				break; /* the rest keep their backoff */
			list = grown;
			cap = ncap;
		}
		conn_get(c);
		list[n++] = c;
	}
	pthread_mutex_unlock(&held_lock);
	for (size_t i = 0; i < n; i++) {
		struct sdp_conn *c = list[i];

		conn_lock(c);
		if (c->phase == CONN_HELD && c->climb.step == CLIMB_IDLE && c->climb.released &&
		    !c->app_closed) {
			c->climb.backoff_ms = CLIMB_FIRST_MS;
			conn_arm_timer(c, 0);
		}
		conn_unlock(c);
		conn_put(c);
	}
	free(list);
}

/* ------------------------------------------------ a forked child's */

bool conn_climb_ticket(struct sdp_conn *c, struct conn_climb_ticket *t)
{
	bool ok;

	memset(t, 0, sizeof(*t));
	conn_lock(c);
	ok = c->policy.climb && c->phase == CONN_FALLBACK && c->fail_reason == SDP_REASON_FORKED &&
	     c->tuple.src_port && c->tuple.dst_port && sockaddr_port(&c->climb.peer_rdv) &&
	     c->close_state == CLOSE_ACTIVE && !c->hard_error && !c->sw.peer_err && !c->sw.shut_wr &&
	     !c->rd_shut;
	if (ok) {
		derive_key(c);
		memcpy(t->src_addr, c->tuple.src_addr, 16);
		memcpy(t->dst_addr, c->tuple.dst_addr, 16);
		t->src_port = c->tuple.src_port;
		t->dst_port = c->tuple.dst_port;
		t->is_server = c->is_server;
		memcpy(t->key, c->climb.key, CONN_CLIMB_KEY_SIZE);
		t->tx_off = c->tx_stream_off;
		t->rx_off = c->sw.rx_have;
		t->peer_rdv = c->climb.peer_rdv;
		memset(c->climb.key, 0, sizeof(c->climb.key));
	} else {
		sdp_debug("no climb for a forked child: climb %d phase %s reason %d rendezvous %u "
			  "close %d error %d/%d shut %d/%d fd %d ports %u/%u", c->policy.climb,
			  conn_phase_name(c->phase), (int)c->fail_reason, sockaddr_port(&c->climb.peer_rdv),
			  (int)c->close_state, c->hard_error, c->sw.peer_err, c->sw.shut_wr, c->rd_shut,
			  c->tcp_fd, c->tuple.src_port, c->tuple.dst_port);
	}
	conn_unlock(c);
	return ok;
}

/* The TCP peer's address, from the canonical tuple. */
static void tuple_peer(const struct conn_climb_ticket *t, struct sockaddr_storage *out,
		       socklen_t *len)
{
	static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *addr = t->is_server ? t->src_addr : t->dst_addr;
	uint16_t port = t->is_server ? t->src_port : t->dst_port;

	memset(out, 0, sizeof(*out));
	if (memcmp(addr, v4_mapped, 12) == 0) {
		struct sockaddr_in *in = (struct sockaddr_in *)out;

		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		memcpy(&in->sin_addr, addr + 12, 4);
		*len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		memcpy(&in6->sin6_addr, addr, 16);
		*len = sizeof(*in6);
	}
}

struct sdp_conn *conn_adopt_held(int app_fd, const struct conn_climb_ticket *t, void *owner,
				 const struct conn_owner_ops *ops, struct sdp_conn_stats *st)
{
	struct sdp_policy policy;
	struct sdp_conn *c;

	if (!sockaddr_port(&t->peer_rdv) || progress_start() != 0)
		return NULL;
	policy_default(&policy);
	c = conn_alloc(t->is_server, &policy);
	if (!c)
		return NULL;
	c->tcp_fd = progress_dup_hidden(app_fd);
	if (c->tcp_fd < 0) {
		conn_put(c);
		return NULL;
	}
	memcpy(c->tuple.src_addr, t->src_addr, 16);
	memcpy(c->tuple.dst_addr, t->dst_addr, 16);
	c->tuple.src_port = t->src_port;
	c->tuple.dst_port = t->dst_port;
	tuple_peer(t, &c->peer_addr, &c->peer_addr_len);
	c->owner = owner;
	c->owner_ops = ops;
	c->st = st;
	memcpy(c->climb.key, t->key, CLIMB_KEY_SIZE);
	c->tx_stream_off = t->tx_off;
	c->rx_stream_off = c->climb.tcp_rx_off = t->rx_off;
	c->climb.rx_cut = CLIMB_CUT_UNKNOWN;
	c->climb.peer_rdv = t->peer_rdv;
	c->climb.via_rdv = c->climb.initiator = c->climb.eligible = true;
	c->climb.step = CLIMB_IDLE;
	c->climb.backoff_ms = CLIMB_FIRST_MS;
	c->climb.released = true;
	c->fail_reason = SDP_REASON_FORKED;
	conn_phase_start(c, CONN_HELD);
	held_register(c);
	conn_lock(c);
	tcp_watch_start(c, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
	conn_arm_timer(c, 0);
	conn_unlock(c);
	sdp_info("took over a stream a fork moved to TCP; it goes back to RDMA when it can");
	conn_get(c); /* the caller's; conn_alloc's is the resources', dropped at the teardown */
	return c;
}

bool conn_wait_climb(struct sdp_conn *c, unsigned ms)
{
	uint64_t deadline = progress_now_ms() + ms;
	bool climbed;

	conn_lock(c);
	while (c->phase == CONN_HELD && !c->climb.refused && !c->app_closed && !c->hard_error) {
		uint64_t now = progress_now_ms();

		if (now >= deadline)
			break;
		conn_cond_wait_slice(c, now, deadline);
	}
	climbed = c->phase == CONN_CLIMB_HALF || c->phase == CONN_OPEN;
	conn_unlock(c);
	return climbed;
}

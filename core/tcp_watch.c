/* The library's own dup of the app's TCP socket: the progress thread
 * completes non-blocking connects on it, notices a server that answered
 * on TCP (so the client must fall back) or a peer that moved the stream
 * there, judges how a vanished peer closed, and drains buffered bytes
 * into it when a channel falls back (DRAINING; its carrier: drain.c). */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/link.h"

static void on_tcp_ready(struct progress_source *src, uint32_t events);

void tcp_watch_start(struct sdp_conn *c, uint32_t events)
{
	if (c->tcp_fd < 0)
		return;
	c->tcp_src.on_ready = on_tcp_ready;
	if (c->tcp_watched) {
		progress_rewatch(c->tcp_fd, events, &c->tcp_src);
		return;
	}
	if (progress_watch(c->tcp_fd, events, &c->tcp_src) == 0)
		c->tcp_watched = true;
}

static bool tcp_established(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	/* TCP_INFO, not SO_ERROR: the app must still read SO_ERROR itself. */
	return real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
	       ti.tcpi_state == 1 /* TCP_ESTABLISHED */;
}

static void on_connect_done(struct sdp_conn *c)
{
	if (tcp_established(c->tcp_fd) && c->open_unanswered) {
		/* A committed OPEN's answer is not here yet: the binding begins
		 * with it.  Meanwhile the watch asks for nothing that stays set. */
		c->tcp_connected_early = true;
		tcp_watch_start(c, EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET);
		return;
	}
	if (tcp_established(c->tcp_fd)) {
		bind_client_begin(c);
		conn_signal_owner(c, CONN_EV_STATE);
		return;
	}
	/* The kernel connect failed: the socket already holds the error. */
	conn_fallback(c, SDP_REASON_PEER_UNREACHABLE);
}

int tcp_drain_send(struct sdp_conn *c)
{
	while (c->drain_off < c->drain_len) {
		ssize_t n = real.send(c->tcp_fd, c->drain_buf + c->drain_off,
				      c->drain_len - c->drain_off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return EPIPE;
		c->drain_off += (size_t)n;
	}
	return 0;
}

/* The drain cannot finish: the stream ends with err, which the app's next
 * call gets from it (the kernel socket will not say it again: our send took
 * it).  Bytes not drained are not there to move, so nothing else is safe:
 * the peer is told with a reset (a no-op on a connection already reset),
 * never a FIN after a gap. */
static void drain_abort(struct sdp_conn *c, int err)
{
	tcp_send_reset(c);
	free(c->drain_buf);
	c->drain_buf = NULL;
	c->drain_len = c->drain_off = 0;
	close_ev_abort(c, err, false);
	conn_end_aborted(c);
}

static void on_drain_ready(struct sdp_conn *c)
{
	int err = tcp_drain_send(c);

	if (err == EAGAIN)
		return;
	/* Our send took the kernel's error (the peer reset the connection as
	 * our bytes waited for room).  EPIPE: nothing was left to take; if our
	 * own peek took it, it is kept; else the app's own recv (which goes to
	 * TCP here) took it, and the kernel socket says EPIPE again: the
	 * fallback stands. */
	if (err == EPIPE && c->tcp_taken_err) {
		err = c->tcp_taken_err;
		c->tcp_taken_err = 0; /* reported now, as the stream's */
	}
	if (err && err != EPIPE) {
		sdp_info("the TCP connection failed as the channel's unsent bytes moved to it (%s)",
			 strerror(err));
		drain_abort(c, err);
		return;
	}
	if (close_app_shut_writing(c))
		real.shutdown(c->tcp_fd, SHUT_WR); /* the app shut down writing meanwhile */
	conn_set_phase(c, CONN_FALLBACK);
	conn_update_readiness(c, false);
	conn_signal_owner(c, CONN_EV_FALLBACK);
	conn_schedule_destroy(c);
}

/* What the TCP peer has taken of the drain so far: the bytes that went
 * into the kernel socket less those it still holds unsent.  (Bytes that
 * went into the socket earlier, if any, shift it by a constant.) */
static int64_t drain_taken(const struct sdp_conn *c)
{
	return (int64_t)c->drain_off - (int64_t)tcp_unsent_bytes(c);
}

/* The next linger look, SDPSHIM_LINGER_MS from now.  The channel has one
 * timer, and a firing of an earlier meaning (the binding's bound, say) may
 * already be on its way: tcp_drain_on_timer acts only once this passed. */
static void drain_linger_arm(struct sdp_conn *c)
{
	c->drain_taken_seen = drain_taken(c);
	c->drain_look_ms = progress_deadline_ms(sdp_tun.linger_ms);
	conn_arm_timer_at(c, c->drain_look_ms);
}

void tcp_drain_on_close(struct sdp_conn *c, bool abort)
{
	/* SO_LINGER 0, or unread bytes (which a plain socket's close answers
	 * with a reset): TCP would drop its unsent bytes and reset. */
	if (abort || tcp_unread_bytes(c) > 0) {
		drain_abort(c, ECONNRESET);
		return;
	}
	drain_linger_arm(c);
}

/* The app closed its socket: the drain goes on while the TCP peer takes
 * bytes, and ends with a reset once a look finds it took none since the
 * last (between one and two linger bounds after its last byte): a peer
 * that stopped reading would hold it for ever. */
void tcp_drain_on_timer(struct sdp_conn *c)
{
	if (!c->app_closed)
		return;
	if (progress_now_ms() < c->drain_look_ms) {
		conn_arm_timer_at(c, c->drain_look_ms); /* an earlier meaning's */
		return;
	}
	on_drain_ready(c); /* room the edge did not report, if any */
	if (c->phase != CONN_DRAINING)
		return;
	if (drain_taken(c) > c->drain_taken_seen) {
		drain_linger_arm(c);
		return;
	}
	sdp_info("linger bound reached with %zu unsent bytes that the TCP peer does not take; "
		 "resetting the connection", c->drain_len - c->drain_off);
	drain_abort(c, ETIMEDOUT);
}

ssize_t tcp_peek(struct sdp_conn *c, void *buf, size_t len)
{
	ssize_t n;

	do
		n = real.recv(c->tcp_fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EAGAIN && !c->tcp_taken_err)
		c->tcp_taken_err = errno;
	return n;
}

/* Bytes on the idle TCP socket of an open channel: the peer moved the
 * stream there.  (A FIN alone is the channel's business; so is a reset,
 * whose error tcp_peek keeps for a later move to TCP.) */
static bool peer_wrote(struct sdp_conn *c)
{
	char byte;

	return tcp_peek(c, &byte, 1) == 1;
}

/* An open channel: bytes on its TCP socket are the peer's SWITCH record. */
static void follow_peer_if_it_wrote(struct sdp_conn *c, uint32_t events)
{
	if ((events & EPOLLIN) && peer_wrote(c))
		switch_start(c, SDP_REASON_FAILOVER, !c->fork_shared, true); /* its SWITCH record */
}

static void on_tcp_ready(struct progress_source *src, uint32_t events)
{
	struct sdp_conn *c = (struct sdp_conn *)((char *)src - offsetof(struct sdp_conn, tcp_src));

	/* A linked stream's messages come from its link's queue: what arrived
	 * there (an ATTACH, the DisConn) counts before these TCP bytes, as a
	 * channel of its own reaps its queue first (bind.c, close.c). */
	link_reap(c);
	conn_lock(c);
	switch (c->phase) {
	case CONN_TCP_CONNECTING:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			on_connect_done(c);
		break;
	case CONN_AWAIT_ATTACH:
	case CONN_ATTACHING:
		bind_on_tcp_ready(c);
		if (c->phase == CONN_OPEN)
			follow_peer_if_it_wrote(c, events); /* proven, then moved at once */
		break;
	case CONN_DRAINING:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			on_drain_ready(c);
		conn_update_readiness(c, true); /* reads now come from TCP */
		break;
	case CONN_OPEN:
		follow_peer_if_it_wrote(c, events);
		break;
	case CONN_SWITCHING:
		switch_on_tcp_ready(c, events);
		break;
	case CONN_HELD:
	case CONN_CLIMB_HALF:
		climb_on_tcp_ready(c);
		break;
	case CONN_PENDING:
	case CONN_RESOLVING:
	case CONN_FALLBACK:
	case CONN_DEAD:
		break; /* FIN/RST while the channel is up: the channel decides */
	}
	conn_unlock(c);
}

/* Moves the unposted send bytes to TCP, then the socket is plain TCP. */
void tcp_drain_start(struct sdp_conn *c)
{
	size_t total = tx_slots_payload(c, c->tx_posted, c->tx_head, NULL);

	c->drain_buf = total ? malloc(total) : NULL;
	c->drain_len = c->drain_buf ? tx_slots_payload(c, c->tx_posted, c->tx_head, c->drain_buf) : 0;
	c->drain_off = 0;
	tx_drop_all(c); /* the bytes are the drain's now */
	conn_set_phase(c, CONN_DRAINING);
	conn_signal_owner(c, CONN_EV_STATE); /* its stats say TCP from here */
	if (total && !c->drain_buf) {
		/* The app's bytes cannot follow it to TCP: the stream breaks, as
		 * a reset, never with a gap in it. */
		sdp_error("out of memory moving %zu unsent bytes to TCP; resetting the connection",
			  total);
		drain_abort(c, ECONNRESET);
		return;
	}
	tcp_watch_start(c, EPOLLOUT | EPOLLIN | EPOLLRDHUP | EPOLLET);
	on_drain_ready(c);
	/* Closed as it bound: the bound starts now.  (Bytes the peer sent
	 * since are no reason to reset: the app's writes came before them.) */
	if (c->phase == CONN_DRAINING && c->app_closed)
		drain_linger_arm(c);
}

void tcp_send_reset(struct sdp_conn *c)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };

	if (c->tcp_fd >= 0)
		(void)real.connect(c->tcp_fd, &unspec, sizeof(unspec)); /* sends RST */
}

/* The binding handshake: before a channel carries a byte, the TCP
 * connection it claims proves it is that channel's (docs/trust.md).  This
 * file owns conn->bind on both ends, the urgent signal, the PROOF and NAK
 * records on the TCP socket, and the bound on every wait of the handshake. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/link.h"

/* How long the server waits for a PROOF, the client for its answer: the
 * tunable SDPSHIM_CONNECT_TIMEOUT_MS (a rule's connect_timeout_ms bounds the
 * client's whole attempt, core/cm_client.c). */
static unsigned bind_step_ms(void)
{
	return sdp_tun.connect_timeout_ms;
}

#ifndef GRND_INSECURE
#define GRND_INSECURE 0x0004 /* Linux >= 5.6 */
#endif

/* A nonce must be unknown to whoever is not the channel's peer; it need not
 * wait for the kernel's generator to be seeded at boot (getrandom() would
 * block the connect for seconds then).  Fallbacks: GRND_INSECURE, then
 * /dev/urandom. */
static bool fill_random(uint8_t *buf, size_t len, unsigned flags)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = getrandom(buf + got, len - got, flags);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static bool read_urandom(uint8_t *buf, size_t len)
{
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC); /* open is not interposed */
	bool ok = fd >= 0 && real.read(fd, buf, len) == (ssize_t)len;

	if (fd >= 0)
		real.close(fd);
	return ok;
}

bool bind_make_nonce(uint8_t nonce[SDP_NONCE_SIZE])
{
	if (!sdp_tun.debug_no_random &&
	    (fill_random(nonce, SDP_NONCE_SIZE, GRND_NONBLOCK) ||
	     fill_random(nonce, SDP_NONCE_SIZE, GRND_INSECURE) ||
	     read_urandom(nonce, SDP_NONCE_SIZE)))
		return true;
	/* A nonce anyone could guess would let anyone answer for the channel:
	 * the caller refuses it instead.  An error once, then at info level. */
	static atomic_bool said;
	sdp_log_at(atomic_exchange(&said, true) ? SDP_LOG_INFO : SDP_LOG_ERROR,
		   "no random source for a channel nonce (getrandom, /dev/urandom): %s; "
		   "this connection stays on TCP", sdp_tun.debug_no_random ? "SDPSHIM_DEBUG_NO_RANDOM"
									  : strerror(errno));
	memset(nonce, 0, SDP_NONCE_SIZE);
	return false;
}

/* ------------------------------------------------------------- helpers */

/* Arms the handshake's bound.  The channel has one timer, and a firing of
 * an earlier meaning (a pending channel's check, the connect bound) may
 * already be on its way when the phase changes: bind_on_timer() acts only
 * once this deadline has passed. */
static void bind_arm(struct sdp_conn *c, uint64_t deadline_ms)
{
	c->bind_deadline_ms = deadline_ms;
	conn_arm_timer_at(c, deadline_ms);
}

/* Writes a whole bind record; the socket's send queue is empty here (the
 * app's bytes wait in our slots), so 24 bytes never block.  0 or errno. */
static int tcp_write_record(struct sdp_conn *c, const struct sdp_bind *b)
{
	struct sdp_bind_wire w;
	ssize_t n;

	sdp_bind_to_wire(b, &w);
	do
		n = real.send(c->tcp_fd, &w, sizeof(w), MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(w))
		return 0;
	return n < 0 ? errno : EAGAIN;
}

/* Ends the handshake and the connection with err: the app's next call
 * reports it.  reset_tcp: the TCP peer is told with an RST (our side broke
 * off); not when the TCP connection itself is what failed. */
static void bind_abort(struct sdp_conn *c, int err, bool reset_tcp)
{
	c->fail_reason = SDP_REASON_UNPROVEN;
	c->stream_ended = true;
	close_ev_abort(c, err, false);
	qp_force_error(c);
	if (reset_tcp)
		tcp_send_reset(c);
	conn_end_aborted(c); /* a late ATTACH or ESTABLISHED opens nothing */
}

/* The peer broke the handshake where nobody can tell how the stream is
 * framed any more: reset, as TCP would. */
static void bind_reset(struct sdp_conn *c, int err, const char *why)
{
	sdp_warn("RDMA channel binding failed (%s); resetting the connection", why);
	bind_abort(c, err, true);
}

/* The TCP connection failed under the handshake (the peer reset it: its
 * channel failed before we were bound, or its app aborted).  Our peek took
 * the socket's pending error, so the kernel will not report it again: the
 * app learns it from the stream, as it would have from the kernel. */
static void bind_on_tcp_error(struct sdp_conn *c, int err)
{
	sdp_info("the TCP connection of an RDMA channel failed while binding it (%s)",
		 strerror(err));
	bind_abort(c, err, false);
}

/* A peek that failed with the connection's error (not EAGAIN): handled. */
static bool peek_failed(struct sdp_conn *c, ssize_t n)
{
	if (n >= 0 || errno == EAGAIN)
		return false;
	bind_on_tcp_error(c, errno);
	return true;
}

/* The channel just opened.  The handshake's bound is over: the timer now
 * means what it means on an open channel (the linger bound of a socket the
 * app closed meanwhile, or keepalive); and a recv blocked meanwhile looks
 * again (a large one offers a zero-copy sink before the data comes). */
static void on_opened(struct sdp_conn *c)
{
	conn_wake_readers(c);
	if (c->app_closed)
		conn_arm_timer(c, sdp_tun.linger_ms);
	else if (c->keepalive)
		conn_arm_timer(c, c->keepidle_s * 1000);
	else
		progress_timer_cancel(&c->timer);
}

/* ------------------------------------------------------------- server */

/* Writes the urgent byte; SIGNALLED if it went.  False leaves the state. */
static bool server_try_signal(struct sdp_conn *c)
{
	uint8_t byte = SDP_BIND_SIGNAL;
	ssize_t n;

	do
		n = real.send(c->tcp_fd, &byte, 1, MSG_OOB | MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return false;
	c->bind = BIND_SIGNALLED;
	bind_arm(c, progress_deadline_ms(bind_step_ms()));
	sdp_debug("bind: asked the TCP client (port %u) for its proof", c->tuple.src_port);
	return true;
}

static void server_signal(struct sdp_conn *c)
{
	if (!server_try_signal(c)) {
		sdp_info("cannot send the bind signal (%s); using TCP", strerror(errno));
		bind_fallback(c, SDP_REASON_UNPROVEN);
	}
}

/* On the progress thread: accept() has returned (it never waits on a
 * peer), and the owner's lock is not held here, so the handshake may end
 * at once and tell the owner. */
static void server_start_on_progress(void *arg)
{
	struct sdp_conn *c = arg;

	conn_lock(c);
	if (c->phase == CONN_ATTACHING) {
		/* Whatever happened since accept() (a COMMIT may have made us
		 * signal already), the TCP socket is watched from here on. */
		tcp_watch_start(c, EPOLLIN | EPOLLRDHUP | EPOLLET);
		cq_poll(c); /* a COMMIT that arrived before the SYN is in the queue */
		if (c->phase == CONN_ATTACHING && c->bind == BIND_IDLE && c->committed &&
		    !c->carrier_dead)
			server_signal(c);
		bind_on_tcp_ready(c); /* bytes that came before the watch */
	}
	conn_unlock(c);
	conn_put(c);
}

void bind_server_begin(struct sdp_conn *c)
{
	c->bind = BIND_IDLE;
	bind_arm(c, progress_deadline_ms(bind_step_ms())); /* the bound, even if the deferral fails */
	/* A client that committed before its SYN (the usual order) is asked
	 * for its proof from accept() itself, a hop of the progress thread
	 * sooner, and the TCP watch starts here: what came before it, the
	 * watch reports to the progress thread as it starts.  Only that goes
	 * from here: a failure, which must tell the owner (whose lock the
	 * caller holds), is left to the progress thread's server_signal(). */
	if (c->committed && !c->carrier_dead && !c->peer_gave_up && server_try_signal(c)) {
		tcp_watch_start(c, EPOLLIN | EPOLLRDHUP | EPOLLET);
		return;
	}
	conn_get(c);
	if (progress_defer(server_start_on_progress, c) != 0) {
		sdp_error("cannot queue a channel binding: out of memory (it times out to TCP)");
		conn_put(c);
	}
}

void bind_server_on_commit(struct sdp_conn *c)
{
	if (c->phase == CONN_ATTACHING && c->bind == BIND_IDLE && !c->carrier_dead)
		server_signal(c);
}

/* Proven and established: the channel is the accepted socket's.  The
 * client learns it from the ATTACH (ordered before any data), and until
 * that completes the stream stays where it is (attach_unconfirmed). */
void bind_server_open(struct sdp_conn *c)
{
	conn_set_phase(c, CONN_OPEN);
	on_opened(c);
	queue_attach(c);
	tx_kick(c);
	conn_update_readiness(c, false);
	conn_signal_owner(c, CONN_EV_STATE);
}

static void server_nak(struct sdp_conn *c, enum sdp_reason reason)
{
	struct sdp_bind nak = { .kind = SDP_BIND_NAK, .reason = (uint16_t)reason };

	if (tcp_write_record(c, &nak) != 0) {
		bind_reset(c, ECONNRESET, "cannot write NAK");
		return;
	}
	bind_fallback(c, reason);
}

static void server_on_proof(struct sdp_conn *c, const struct sdp_bind *proof)
{
	if (memcmp(proof->nonce, c->nonce_local, SDP_NONCE_SIZE) != 0) {
		sdp_warn_limited("the TCP client's bind proof does not match the RDMA channel that claimed its "
			 "connection (a forged Hello?); refusing the channel, using TCP");
		server_nak(c, SDP_REASON_UNPROVEN);
		return;
	}
	if (c->carrier_dead || c->peer_gave_up) {
		server_nak(c, SDP_REASON_RDMA_CM_ERROR);
		return;
	}
	c->bind = BIND_PROVEN;
	if (c->established)
		bind_server_open(c);
}

/* After our signal: the client's first in-band bytes are its PROOF, or app
 * bytes from a client that does not run sdpshim (or gave up). */
static void server_read_tcp(struct sdp_conn *c)
{
	uint8_t buf[SDP_BIND_SIZE];
	struct sdp_bind proof;
	ssize_t n = tcp_peek(c, buf, sizeof(buf));

	if ((n < 0 && errno == EAGAIN) || peek_failed(c, n))
		return;
	if (n <= 0 || !sdp_bind_prefix_plausible(buf, (size_t)n) || c->bind == BIND_IDLE) {
		/* EOF, app bytes, or bytes before we asked: a plain
		 * client (the app reads them) or one that gave up. */
		sdp_info("the TCP client of an RDMA channel %s; using TCP",
			 n > 0 ? "wrote app bytes instead of a bind proof" : "closed before binding");
		bind_fallback(c, SDP_REASON_UNPROVEN);
		return;
	}
	if ((size_t)n < sizeof(buf))
		return; /* the rest of the record is on its way */
	if (sdp_bind_from_wire(buf, sizeof(buf), SDP_BIND_KIND_BIT(SDP_BIND_PROOF), SDP_REASON_COUNT,
			       &proof) != SDP_WIRE_OK) {
		bind_reset(c, ECONNRESET, "malformed bind proof");
		return;
	}
	(void)real.recv(c->tcp_fd, buf, sizeof(buf), MSG_DONTWAIT); /* consume it */
	sdp_debug("bind: proof from the TCP client (port %u)", c->tuple.src_port);
	server_on_proof(c, &proof);
}

static void server_on_timer(struct sdp_conn *c)
{
	switch (c->bind) {
	case BIND_IDLE:
		sdp_info("the client never committed the RDMA channel of an accepted connection "
			 "(port %u%s); using TCP", c->tuple.src_port,
			 c->established ? "" : ", never established");
		bind_fallback(c, SDP_REASON_UNPROVEN);
		break;
	case BIND_SIGNALLED:
		if (c->carrier_dead || c->peer_gave_up)
			bind_fallback(c, SDP_REASON_UNPROVEN); /* it gave up before it saw the signal */
		else
			bind_reset(c, ETIMEDOUT, "the client announced a channel but sent no proof");
		break;
	case BIND_PROVEN:
		bind_reset(c, ETIMEDOUT, "the proven channel never came up");
		break;
	}
}

/* ------------------------------------------------------------- client */

void bind_client_begin(struct sdp_conn *c)
{
	const uint32_t events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET;
	uint64_t now = progress_coarse_ms(); /* a tick behind at most: the timer makes up for it */
	/* A blocking connect's thread (no watch yet) looks first and starts
	 * the watch after: the server's signal is usually here already
	 * (accept() writes it), and answered now it wakes no other thread;
	 * whatever came since, the watch reports as it starts.  A watch that
	 * exists (a non-blocking connect's) is replaced at once, as before. */
	bool watch_after = !c->tcp_watched;

	conn_set_phase(c, CONN_AWAIT_ATTACH);
	c->bind = BIND_IDLE;
	if (!watch_after)
		tcp_watch_start(c, events);
	conn_update_readiness(c, false);
	bind_arm(c, c->connect_deadline_ms);
	if (now >= c->connect_deadline_ms)
		bind_on_timer(c);
	else
		bind_on_tcp_ready(c);
	if (watch_after && c->phase == CONN_AWAIT_ATTACH)
		tcp_watch_start(c, events);
}

/* An app that set SO_OOBINLINE reads urgent bytes in-band, at the mark. */
static bool oob_inline(struct sdp_conn *c)
{
	int on = 0;
	socklen_t len = sizeof(on);

	return real.getsockopt(c->tcp_fd, SOL_SOCKET, SO_OOBINLINE, &on, &len) == 0 && on;
}

enum urgent_seen {
	URGENT_NONE,          /* none, or announced and not here yet */
	URGENT_OUR_SIGNAL,    /* the server's bind signal */
	URGENT_OTHER,         /* the TCP server's own urgent data */
	URGENT_TCP_FAILED,    /* the connection failed (handled) */
};

static enum urgent_seen client_peek_signal(struct sdp_conn *c, bool inline_oob)
{
	int at_mark = 0;
	uint8_t byte;
	ssize_t n;

	if (inline_oob) {
		if (real.ioctl(c->tcp_fd, SIOCATMARK, &at_mark) != 0 || !at_mark)
			return URGENT_NONE;
		n = tcp_peek(c, &byte, 1);
		if (peek_failed(c, n))
			return URGENT_TCP_FAILED;
	} else {
		do
			n = real.recv(c->tcp_fd, &byte, 1, MSG_OOB | MSG_PEEK | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
	}
	if (n != 1)
		return URGENT_NONE; /* EINVAL: none; EAGAIN: announced, not here yet */
	return byte == SDP_BIND_SIGNAL ? URGENT_OUR_SIGNAL : URGENT_OTHER;
}

static void client_send_proof(struct sdp_conn *c, bool inline_oob)
{
	struct sdp_bind proof = { .kind = SDP_BIND_PROOF };
	uint8_t byte;

	/* take the signal */
	(void)real.recv(c->tcp_fd, &byte, 1, (inline_oob ? 0 : MSG_OOB) | MSG_DONTWAIT);
	memcpy(proof.nonce, c->nonce_peer, SDP_NONCE_SIZE);
	if (tcp_write_record(c, &proof) != 0) {
		bind_reset(c, ECONNRESET, "cannot write the bind proof");
		return;
	}
	c->bind = BIND_SIGNALLED;
	bind_arm(c, progress_deadline_ms(bind_step_ms()));
	sdp_debug("bind: signal seen, proof sent (port %u)", c->tuple.src_port);
}

/* A server that attached and then moved the stream at once (it forked)
 * wrote its SWITCH record after its ATTACH completed, so the ATTACH is in
 * our completion queue, though its event may not have woken us yet.  The
 * spec does not order our completion entry against the acknowledgement,
 * hence a short grace before bytes on TCP are judged. */
#define ATTACH_GRACE_US 2000

static void reap_before_judging(struct sdp_conn *c)
{
	for (unsigned waited_us = 0;; waited_us += 100) {
		struct sdp_link *link = link_hold(c);

		if (link) {
			/* A linked stream's queue is its link's, taken in with no
			 * stream locked (the link hands each message to its stream
			 * under the stream's lock, this one's included). */
			pthread_mutex_unlock(&c->lock);
			link_reap_held(link);
			pthread_mutex_lock(&c->lock);
		} else {
			cq_poll(c);
		}
		if (c->phase != CONN_AWAIT_ATTACH || c->carrier_dead || waited_us >= ATTACH_GRACE_US)
			return;
		usleep(100);
	}
}

/* After our PROOF the server answers ATTACH over the channel or NAK here;
 * bytes that are neither came from a server that moved on to TCP. */
static void client_read_answer(struct sdp_conn *c)
{
	uint8_t buf[SDP_BIND_SIZE];
	struct sdp_bind nak;
	ssize_t n = tcp_peek(c, buf, sizeof(buf));

	if ((n < 0 && errno == EAGAIN) || peek_failed(c, n))
		return;
	if (n > 0 && !sdp_bind_prefix_plausible(buf, (size_t)n)) {
		reap_before_judging(c); /* its SWITCH record, behind an ATTACH not reaped yet? */
		if (c->phase != CONN_AWAIT_ATTACH)
			return;
	}
	if (n <= 0 || !sdp_bind_prefix_plausible(buf, (size_t)n)) {
		bind_fallback(c, SDP_REASON_ACCEPTED_ELSEWHERE);
		return;
	}
	if ((size_t)n < sizeof(buf))
		return;
	if (sdp_bind_from_wire(buf, sizeof(buf), SDP_BIND_KIND_BIT(SDP_BIND_NAK), SDP_REASON_COUNT,
			       &nak) != SDP_WIRE_OK) {
		bind_reset(c, ECONNRESET, "malformed answer to our bind proof");
		return;
	}
	(void)real.recv(c->tcp_fd, buf, sizeof(buf), MSG_DONTWAIT);
	sdp_info("the server refused the RDMA channel (%s); using TCP",
		 sdp_reason_name((enum sdp_reason)nak.reason));
	bind_fallback(c, nak.reason == SDP_REASON_NONE ? SDP_REASON_UNPROVEN
						       : (enum sdp_reason)nak.reason);
}

static void client_read_tcp(struct sdp_conn *c)
{
	bool inline_oob = oob_inline(c);
	uint8_t byte;
	ssize_t n;

	if (c->bind == BIND_SIGNALLED) {
		client_read_answer(c);
		return;
	}
	switch (client_peek_signal(c, inline_oob)) {
	case URGENT_OUR_SIGNAL:
		client_send_proof(c, inline_oob);
		return;
	case URGENT_OTHER:
		sdp_info("the TCP server sent urgent data, not the bind signal; using TCP");
		bind_fallback(c, SDP_REASON_UNPROVEN);
		return;
	case URGENT_TCP_FAILED:
		return;
	case URGENT_NONE:
		break;
	}
	/* App bytes or a FIN before any signal: the server side chose TCP (a
	 * plain server, or a pre-fork worker that does not own the channel). */
	n = tcp_peek(c, &byte, 1);
	if (!peek_failed(c, n) && n >= 0)
		bind_fallback(c, SDP_REASON_ACCEPTED_ELSEWHERE);
}

/* An ATTACH is only believed after our PROOF went to the TCP server that
 * asked for it: before that it can only come from a channel peer that is
 * not our TCP peer. */
void bind_client_on_attach(struct sdp_conn *c)
{
	if (c->bind != BIND_SIGNALLED) {
		sdp_warn_limited("the RDMA peer sent ATTACH before the TCP connection's server asked for a "
			 "proof (a rogue rdma_cm listener?); not using the channel");
		bind_fallback(c, SDP_REASON_UNPROVEN);
		return;
	}
	c->bind = BIND_PROVEN;
	conn_set_phase(c, CONN_OPEN);
	on_opened(c);
	tcp_watch_start(c, EPOLLIN | EPOLLRDHUP | EPOLLET);
	conn_wake_waiters(c);
	conn_update_readiness(c, false);
	conn_signal_owner(c, CONN_EV_STATE);
}

void bind_client_on_detach(struct sdp_conn *c)
{
	if (c->bind == BIND_IDLE)
		bind_fallback(c, SDP_REASON_ACCEPTED_ELSEWHERE);
	/* After our PROOF the server answers on TCP: wait for it. */
}

static void client_on_timer(struct sdp_conn *c)
{
	if (c->bind == BIND_IDLE) {
		sdp_info("no RDMA channel binding within the connect bound; using TCP");
		c->detach_reason = SDP_REASON_RDMA_TIMEOUT;
		tx_queue_ctrl(c, SDP_MID_DETACH); /* best effort: the server stops waiting */
		tx_kick(c);
		bind_fallback(c, SDP_REASON_RDMA_TIMEOUT);
		return;
	}
	bind_reset(c, ETIMEDOUT, "the server never answered our bind proof");
}

/* ------------------------------------------------------------- both */

/* The handshake runs (not once it ended the stream with an error). */
static bool binding(const struct sdp_conn *c)
{
	if (c->stream_ended)
		return false;
	return (c->phase == CONN_ATTACHING && c->is_server) ||
	       (c->phase == CONN_AWAIT_ATTACH && !c->is_server);
}

void bind_on_tcp_ready(struct sdp_conn *c)
{
	sdp_debug("bind: TCP ready, phase %s, bind %d (port %u)", conn_phase_name(c->phase),
		  (int)c->bind, c->tuple.src_port);
	if (!binding(c) || c->tcp_fd < 0)
		return;
	if (c->is_server) {
		if (c->bind != BIND_PROVEN)
			server_read_tcp(c);
	} else {
		client_read_tcp(c);
	}
}

void bind_on_timer(struct sdp_conn *c)
{
	uint64_t now = progress_now_ms();

	if (!binding(c))
		return;
	if (now < c->bind_deadline_ms) {
		conn_arm_timer_at(c, c->bind_deadline_ms); /* an earlier meaning's */
		return;
	}
	if (c->is_server)
		server_on_timer(c);
	else
		client_on_timer(c);
}

void bind_keep_bound(struct sdp_conn *c)
{
	if (binding(c) && c->bind_deadline_ms &&
	    c->bind_deadline_ms < progress_deadline_ms(sdp_tun.linger_ms))
		conn_arm_timer_at(c, c->bind_deadline_ms);
}

/* The carrier died during the handshake.  Before any signal nothing is
 * owed: TCP.  After it a PROOF may be on its way and must not reach the
 * app: the TCP reader still takes it (and NAKs), the timer bounds that. */
void bind_on_carrier_failed(struct sdp_conn *c)
{
	if (c->bind == BIND_IDLE) {
		bind_fallback(c, SDP_REASON_RDMA_CM_ERROR);
		return;
	}
	if (c->bind == BIND_PROVEN) {
		bind_reset(c, ECONNRESET, "the channel failed as it was being attached");
		return;
	}
	bind_on_tcp_ready(c);
}

/* A message the peer may not send on an unbound channel: it is not used.
 * Before the handshake started on TCP the stream falls back (reason
 * protocol); after, it ends as if the carrier had failed. */
void bind_on_violation(struct sdp_conn *c, const char *what)
{
	sdp_warn_limited("the RDMA peer broke the protocol before the channel was bound (%s); not using the channel",
		 what);
	qp_force_error(c);
	c->carrier_dead = true;
	if (binding(c) && c->bind != BIND_IDLE)
		bind_on_carrier_failed(c);
	else
		bind_fallback(c, SDP_REASON_PROTOCOL);
}

void bind_fallback(struct sdp_conn *c, enum sdp_reason reason)
{
	progress_timer_cancel(&c->timer);
	if (c->is_server && c->phase == CONN_ATTACHING && !c->carrier_dead) {
		c->detach_reason = reason;
		tx_queue_ctrl(c, SDP_MID_DETACH); /* the channel's peer stops waiting */
		tx_kick(c);
	}
	conn_fallback(c, reason);
}

/* The client side of channel setup: the app's socket is bound first, the
 * rdma_cm connection to the same address and port carries a Hello naming
 * the TCP 4-tuple, and only then does the kernel TCP connect happen.
 * Every failure before ATTACH falls back to TCP with a reason. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "core/progress.h"
#include "core/qp.h"
#include "core/verbs_fence.h"

/* IPv4 as IPv4-mapped IPv6, so tuples compare the same either way. */
void sockaddr_to_tuple_addr(const struct sockaddr *sa, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		memcpy(out, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
	}
}

/* The client's socket must own a local port before the Hello names it. */
static int ensure_bound(int fd, int family, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint8_t addr[16];

	if (real.getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -errno;
	sockaddr_to_tuple_addr((struct sockaddr *)&ss, addr, port);
	if (*port != 0)
		return 0;
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)family;
	len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (real.bind(fd, (struct sockaddr *)&ss, len) != 0)
		return -errno;
	len = sizeof(ss);
	if (real.getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -errno;
	sockaddr_to_tuple_addr((struct sockaddr *)&ss, addr, port);
	return 0;
}

static enum sdp_reason reason_for_cm_error(int err)
{
	switch (err) {
	case -ENODEV:
	case -EADDRNOTAVAIL:
	case -ENETUNREACH:
	case -EHOSTUNREACH:
		return SDP_REASON_PEER_UNREACHABLE;
	default:
		return SDP_REASON_RDMA_CM_ERROR;
	}
}

struct sdp_conn *conn_connect_start(const struct conn_connect_params *p, enum sdp_reason *reason,
				    int *err)
{
	struct rdma_event_channel *ch;
	struct sdp_conn *c;
	int rc;

	*err = progress_start();
	if (!*err)
		*err = cm_channel_ensure(&ch);
	if (*err) {
		*reason = SDP_REASON_RDMA_CM_ERROR;
		return NULL;
	}
	c = conn_alloc(false, p->policy);
	if (!c) {
		*reason = SDP_REASON_RESOURCES;
		*err = -ENOMEM;
		return NULL;
	}
	memcpy(&c->peer_addr, p->dst, p->dst_len);
	c->peer_addr_len = p->dst_len;
	c->owner = p->owner;
	c->owner_ops = p->owner_ops;
	c->st = p->st;
	conn_publish_phase(c);
	c->async_connect = p->async;
	c->answer_first = p->answer_first;
	/* Before the first rdma_cm call: the progress thread may run the whole
	 * attempt (a non-blocking connect's kernel connect included) before
	 * this thread continues. */
	c->connect_deadline_ms = progress_deadline_ms(p->policy->connect_timeout_ms); /* binding included */
	sockaddr_to_tuple_addr(p->dst, c->tuple.dst_addr, &c->tuple.dst_port);
	*err = ensure_bound(p->app_fd, p->dst->sa_family, &c->tuple.src_port);
	c->tcp_fd = *err ? -1 : progress_dup_hidden(p->app_fd);
	if (!*err && c->tcp_fd < 0)
		*err = -EMFILE;
	conn_get(c); /* the caller's, before the progress thread can end the attempt */
	if (!*err && sdp_tun.links) {
		conn_arm_timer(c, p->policy->connect_timeout_ms); /* RESOLVING's bound */
		*err = link_client_open(c, p->dst, p->dst_len, reason);
		if (*err) {
			conn_lock(c);
			conn_set_phase(c, CONN_DEAD);
			conn_schedule_destroy(c);
			conn_unlock(c);
			conn_put(c);
			return NULL;
		}
		return c;
	}
	if (!*err) {
		conn_arm_timer(c, p->policy->connect_timeout_ms); /* RESOLVING's bound */
		VERBS_CTL_ENTER();
		rc = rdma_create_id(ch, &c->cm_id, c, RDMA_PS_TCP);
		if (rc == 0)
			rc = rdma_resolve_addr(c->cm_id, NULL, (struct sockaddr *)p->dst,
					       (int)p->policy->connect_timeout_ms);
		*err = rc ? -errno : 0;
		VERBS_CTL_LEAVE();
	}
	if (*err) {
		*reason = reason_for_cm_error(*err);
		conn_lock(c);
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		conn_unlock(c);
		conn_put(c);
		return NULL;
	}
	return c;
}

/* How many times a connect polls its link for its committed OPEN's
 * completion before the SYN goes anyway (each poll takes the link's
 * completions in, then yields). */
#define OPEN_DELIVERY_POLLS 200

enum conn_phase conn_wait_resolved(struct sdp_conn *c)
{
	enum conn_phase phase;

	conn_lock(c);
	while (c->phase == CONN_RESOLVING)
		conn_cond_wait_counted(c, NULL); /* bounded by the connect timer */
	phase = c->phase;
	conn_unlock(c);
	return phase;
}

void conn_wait_answered(struct sdp_conn *c)
{
	conn_lock(c);
	while (c->phase == CONN_TCP_CONNECTING && c->open_unanswered)
		conn_cond_wait_counted(c, NULL); /* bounded by the connect timer */
	conn_unlock(c);
}

bool conn_connect_in_progress(struct sdp_conn *c)
{
	bool busy;

	conn_lock(c);
	busy = c->phase == CONN_RESOLVING || c->phase == CONN_TCP_CONNECTING;
	conn_unlock(c);
	return busy;
}

void conn_tcp_connected(struct sdp_conn *c, int rc)
{
	conn_lock(c);
	if (c->phase == CONN_TCP_CONNECTING) {
		if (rc == 0 && c->open_unanswered) {
			c->tcp_connected_early = true; /* the binding begins with the answer */
		} else if (rc == 0) {
			bind_client_begin(c);
		} else {
			conn_fallback(c, SDP_REASON_PEER_UNREACHABLE);
		}
	}
	conn_unlock(c);
}

static void build_hello(struct sdp_conn *c, struct sdp_hello_wire *out)
{
	struct sdp_hello h = {
		.version = SDP_WIRE_VERSION,
		.buf_count = c->buf_count,
		.buf_size = c->buf_size,
		.tuple = c->tuple,
	};
	uint16_t ignored;

	/* The source address rdma_cm chose is the one the kernel's route picks. */
	sockaddr_to_tuple_addr(rdma_get_local_addr(c->cm_id), h.tuple.src_addr, &ignored);
	c->tuple.src_port = h.tuple.src_port;
	memcpy(c->tuple.src_addr, h.tuple.src_addr, 16);
	sdp_hello_to_wire(&h, out);
}

static void on_route_resolved(struct sdp_conn *c)
{
	struct rdma_conn_param param;
	struct sdp_hello_wire hello;
	enum sdp_reason reason = SDP_REASON_RESOURCES;

	if (conn_setup_qp(c, c->cm_id, 0, 0, &reason) != 0) {
		conn_fallback(c, reason);
		return;
	}
	conn_post_all_recvs(c);
	build_hello(c, &hello);
	cm_conn_param(&param, &hello, sizeof(hello));
	qp_before_connect(c->dev, c->qp, &param);
	cm_apply_ack_timeout(c->cm_id);
	VERBS_CTL_ENTER();
	int rc = rdma_connect(c->cm_id, &param);
	VERBS_CTL_LEAVE();
	if (rc != 0)
		conn_fallback(c, SDP_REASON_RDMA_CM_ERROR);
}

static void kernel_connect_async(struct sdp_conn *c)
{
	int rc;

	c->kernel_connect_issued = true;
	rc = real.connect(c->tcp_fd, (struct sockaddr *)&c->peer_addr, c->peer_addr_len);

	if (rc == 0 || errno == EINPROGRESS) {
		tcp_watch_start(c, EPOLLOUT | EPOLLERR | EPOLLHUP);
		return;
	}
	conn_fallback(c, SDP_REASON_PEER_UNREACHABLE);
}

void conn_wait_open_delivered(struct sdp_conn *c)
{
	struct sdp_link *link;
	uint64_t seq;

	conn_lock(c);
	seq = c->open_send_seq;
	link = seq && c->phase == CONN_TCP_CONNECTING ? link_hold(c) : NULL;
	conn_unlock(c);
	if (!link)
		return;
	/* Under rxe the send completes inside its post; on hardware within
	 * microseconds.  The SYN waits a bounded while, then goes anyway. */
	for (unsigned i = 0; i < OPEN_DELIVERY_POLLS && !link_open_delivered(link, seq); i++)
		sched_yield();
	link_release_held(link);
}

/* A non-blocking connect's kernel connect after a committed OPEN (c
 * locked): a failure shows as EPOLLERR or EPOLLHUP to the watch, and
 * on_connect_done() judges it, never the caller. */
static void kernel_connect_watched(struct sdp_conn *c)
{
	c->kernel_connect_issued = true;
	(void)real.connect(c->tcp_fd, (struct sockaddr *)&c->peer_addr, c->peer_addr_len);
	tcp_watch_start(c, EPOLLOUT | EPOLLERR | EPOLLHUP);
}

static void connect_committed_on_progress(void *arg)
{
	struct sdp_conn *c = arg;

	conn_wait_open_delivered(c);
	conn_lock(c);
	if (c->phase == CONN_TCP_CONNECTING)
		kernel_connect_watched(c);
	conn_unlock(c);
	conn_put(c);
}

void client_stream_open_committed(struct sdp_conn *c)
{
	c->open_unanswered = true; /* the connect's bound (c->timer) stays until the answer */
	conn_set_phase(c, CONN_TCP_CONNECTING);
	conn_wake_waiters(c); /* a blocking connect() goes on to the kernel's */
	if (!c->async_connect)
		return;
	/* Maybe in the app's connect(), which holds its socket's lock, and c is
	 * locked: the kernel connect goes from the progress thread, once the
	 * OPEN was delivered. */
	conn_get(c);
	if (progress_defer(connect_committed_on_progress, c) != 0) {
		conn_put(c);
		kernel_connect_watched(c); /* the OPEN may race the SYN then */
	}
}

bool client_stream_awaits_answer(const struct sdp_conn *c)
{
	return c->phase == CONN_RESOLVING || (c->phase == CONN_TCP_CONNECTING && c->open_unanswered);
}

/* The answer to a committed OPEN: the stream's send side, the server's
 * nonce for the proof, and the binding if the kernel connect is done. */
static void committed_stream_answered(struct sdp_conn *c)
{
	c->open_unanswered = false;
	conn_wake_waiters(c);
	if (!c->tcp_connected_early)
		return; /* conn_tcp_connected() or on_connect_done() begins it */
	bind_client_begin(c);
	if (c->async_connect)
		conn_signal_owner(c, CONN_EV_STATE); /* as on_connect_done() does */
}

/* The server took the channel (HelloAck, or a linked stream's OPEN_ACK):
 * commit to it, then connect the kernel socket.  A committed OPEN did
 * both already. */
void client_stream_opened(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count,
			  const uint8_t nonce[SDP_NONCE_SIZE])
{
	bool early = c->open_unanswered; /* its kernel connect went before the answer */
	int err;

	if (!c->open_committed && !bind_make_nonce(c->nonce_local)) {
		conn_fallback(c, SDP_REASON_RESOURCES);
		return;
	}
	err = conn_setup_tx(c, peer_buf_size, peer_buf_count);
	if (err != 0) {
		/* resources for the budget's no, and for a linked stream's (unpinned) memory */
		conn_fallback(c, c->link ? SDP_REASON_RESOURCES : conn_setup_error_reason(err));
		return;
	}
	c->established = true;
	progress_timer_cancel(&c->timer); /* bind_client_begin() bounds the rest */
	memcpy(c->nonce_peer, nonce, SDP_NONCE_SIZE);
	if (early) {
		committed_stream_answered(c);
		return;
	}
	conn_set_phase(c, CONN_TCP_CONNECTING);
	/* From here on this channel is our choice: say so before the SYN, so
	 * the server never asks a client that gave up for a proof (a
	 * committed OPEN that waited in the link's queue said so already). */
	if (!c->open_committed) {
		tx_queue_ctrl(c, SDP_MID_COMMIT);
		tx_kick(c);
	}
	conn_wake_waiters(c);
	if (c->async_connect)
		kernel_connect_async(c);
	conn_signal_owner(c, CONN_EV_RDMA_READY);
}

static void on_established(struct sdp_conn *c, const struct rdma_cm_event *ev)
{
	struct sdp_hello_ack ack;
	enum sdp_wire_error werr;

	werr = sdp_hello_ack_from_wire(ev->param.conn.private_data,
				       ev->param.conn.private_data_len, &ack);
	if (werr == SDP_WIRE_OK && ack.flags)
		werr = SDP_WIRE_BAD_FLAGS; /* a link's answer to a channel's Hello */
	if (werr != SDP_WIRE_OK) {
		sdp_warn("server HelloAck rejected: %s; using TCP", sdp_wire_error_text(werr));
		conn_fallback(c, SDP_REASON_PROTOCOL);
		return;
	}
	client_stream_opened(c, ack.buf_size, ack.buf_count, ack.nonce);
}

enum sdp_reason cm_reject_reason(uint8_t code)
{
	switch (code) {
	case 0:
		return SDP_REASON_PEER_NO_SDPSHIM; /* no sdpshim listener on that port */
	case SDP_REJECT_VERSION:
	case SDP_REJECT_MALFORMED:
	case SDP_REJECT_TUPLE:
		return SDP_REASON_PROTOCOL;
	case SDP_REJECT_RESOURCES:
		return SDP_REASON_RESOURCES;
	default:
		return SDP_REASON_PEER_REJECTED;
	}
}

enum sdp_reason cm_event_reject_reason(const struct rdma_cm_event *ev)
{
	return cm_reject_reason(sdp_reject_from_wire(ev->param.conn.private_data,
						    ev->param.conn.private_data_len));
}

void client_stream_refused(struct sdp_conn *c, uint8_t code)
{
	sdp_debug("the server refused a stream on its link (code %u)", code);
	conn_fallback(c, code ? cm_reject_reason(code) : SDP_REASON_PROTOCOL);
}

/* An error event while connecting falls back to TCP with its reason.
 * Later (binding, open), the channel may carry the stream: the error is
 * a carrier failure like DISCONNECTED, never a fallback, which would hand
 * the app a TCP socket that may hold the server's SWITCH record. */
static void on_cm_error(struct sdp_conn *c, struct rdma_cm_event *ev, enum sdp_reason reason)
{
	if (c->phase == CONN_RESOLVING || c->phase == CONN_TCP_CONNECTING)
		conn_fallback(c, reason);
	else
		close_ev_carrier_failed(c, ECONNRESET, rdma_event_str(ev->event));
}

void cm_client_event(struct sdp_conn *c, struct rdma_cm_event *ev)
{
	conn_lock(c);
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (c->phase == CONN_RESOLVING &&
		    cm_resolve_route(c->cm_id) != 0)
			conn_fallback(c, SDP_REASON_PEER_UNREACHABLE);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (c->phase == CONN_RESOLVING)
			on_route_resolved(c);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE: /* our own QP (core/qp.h) */
		if (c->phase != CONN_RESOLVING)
			break;
		if (qp_on_connect_response(ev->id, c->qp) != 0)
			conn_fallback(c, SDP_REASON_RDMA_CM_ERROR);
		else
			on_established(c, ev);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c->phase == CONN_RESOLVING)
			on_established(c, ev);
		break;
	case RDMA_CM_EVENT_REJECTED:
		on_cm_error(c, ev, cm_event_reject_reason(ev));
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		on_cm_error(c, ev, SDP_REASON_PEER_UNREACHABLE);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		on_cm_error(c, ev, SDP_REASON_RDMA_CM_ERROR);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		close_ev_carrier_failed(c, ECONNRESET, rdma_event_str(ev->event));
		break;
	default:
		break;
	}
	conn_unlock(c);
}

void conn_end_aborted(struct sdp_conn *c)
{
	c->stream_ended = true;
	tx_drop_all(c); /* bytes that never leave: not in SIOCOUTQ, nor walked at teardown */
	progress_timer_cancel(&c->timer);
	conn_set_phase(c, CONN_DEAD);
	conn_update_readiness(c, true);
	conn_signal_owner(c, CONN_EV_STATE);
	conn_wake_waiters(c); /* a send or connect waiting on it */
	conn_schedule_destroy(c);
}

void conn_fallback(struct sdp_conn *c, enum sdp_reason reason)
{
	enum conn_phase was = c->phase;

	switch (was) {
	case CONN_HELD:
	case CONN_CLIMB_HALF:
		climb_link_lost(c, sdp_reason_name(reason)); /* a climb's link never came up */
		return;
	case CONN_DRAINING:
	case CONN_SWITCHING:
	case CONN_FALLBACK:
	case CONN_DEAD:
		return;
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING:
	case CONN_AWAIT_ATTACH:
	case CONN_PENDING:
	case CONN_ATTACHING:
	case CONN_OPEN:
		break;
	}
	if (c->stream_ended) {
		/* The stream ended with an error as it bound (bind_abort): the
		 * app gets that, never the kernel socket's EOF after it. */
		sdp_debug("an aborted channel does not fall back to TCP (%s)", sdp_reason_name(reason));
		conn_end_aborted(c);
		return;
	}
	c->fail_reason = reason;
	sdp_debug("channel falls back to TCP: %s", sdp_reason_name(reason));
	if (close_app_shut_writing(c) && c->tcp_fd >= 0 && !tx_has_unposted(c))
		real.shutdown(c->tcp_fd, SHUT_WR); /* the app's shutdown now applies to TCP */
	/* A non-blocking connect's SYN is ours to send: still owed in RESOLVING,
	 * and in TCP_CONNECTING after a committed OPEN whose deferred kernel
	 * connect has not run yet (an OPEN_NAK or the bound came first). */
	if ((was == CONN_RESOLVING || was == CONN_TCP_CONNECTING) && c->async_connect &&
	    !c->kernel_connect_issued && c->tcp_fd >= 0) {
		c->kernel_connect_issued = true;
		(void)real.connect(c->tcp_fd, (struct sockaddr *)&c->peer_addr, c->peer_addr_len);
	}
	if ((was == CONN_AWAIT_ATTACH || was == CONN_ATTACHING) && tx_has_unposted(c)) {
		tcp_drain_start(c); /* becomes FALLBACK once the bytes are in TCP */
		conn_wake_waiters(c);
		return;
	}
	conn_set_phase(c, CONN_FALLBACK);
	conn_update_readiness(c, true);
	conn_signal_owner(c, CONN_EV_FALLBACK);
	conn_wake_waiters(c);
	conn_schedule_destroy(c);
}

/* Reactions of a socket to its channel: attached (path rdma), fallen back
 * (path tcp with the channel's reason, readiness back to the kernel). */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ipoib_fallback/path.h"
#include "preload/readiness.h" /* rdy_sock_to_rdma(), rdy_sock_to_kernel() */
#include "preload/real.h"
#include "preload/sock_rdma.h"

void sock_adopt_conn(struct sdp_sock *s, struct sdp_conn *c)
{
	s->conn = c;
	s->owner_pid = getpid();
	conn_set_zcopy_thresh(c, s->zcopy_thresh);
	atomic_store_explicit(&s->mode, SOCK_MODE_RDMA, memory_order_release);
	rdy_sock_to_rdma(s);
}

struct sdp_conn *sock_conn_get(struct sdp_sock *s)
{
	struct sdp_conn *c;

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
	       reason == SDP_REASON_RDMA_TIMEOUT || reason == SDP_REASON_PEER_REJECTED;
}

static void on_fallback(struct sdp_sock *s, struct sdp_conn *c)
{
	enum sdp_reason reason = conn_get_fail_reason(c);

	pthread_mutex_lock(&s->lock);
	if (s->conn != c) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (!conn_is_server(c) && reason_is_cacheable(reason))
		path_remember_failure(conn_peer_addr(c), reason);
	s->conn = NULL;
	rdy_sock_to_kernel(s);
	sock_set_tcp(s, reason, false);
	sock_refresh_local(s);
	pthread_mutex_unlock(&s->lock);
	conn_put(c);
}

static void on_state(struct sdp_sock *s, struct sdp_conn *c)
{
	if (conn_get_phase(c) == CONN_OPEN && s->conn == c) {
		sock_set_rdma(s);
		sock_refresh_local(s);
	}
}

static void on_conn_event(void *owner, struct sdp_conn *c, enum conn_event ev)
{
	struct sdp_sock *s = owner;

	switch (ev) {
	case CONN_EV_FALLBACK:
		on_fallback(s, c);
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

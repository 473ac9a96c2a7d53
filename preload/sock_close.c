/* Closing the transport behind a tracked socket's last fd: an RDMA channel
 * goes to its background linger (or aborts under SO_LINGER 0); a listener
 * drops its rdma_cm listener; kernel TCP needs nothing. */
#include "base/self.h"
#include "core/conn.h"
#include "core/listener.h"
#include "preload/readiness.h"
#include "preload/sock_close.h"
#include "preload/sock_rdma.h"

void sock_close_transport(struct sdp_sock *s, int fd)
{
	struct sdp_conn *c;
	struct sdp_listener *l;

	(void)fd;
	/* A channel that fell back or opened just before the close, whose
	 * event has not reached the socket yet: its path is settled now, not
	 * left undecided.  One inherited from its owner by fork is the
	 * owner's: this process only lets go of its copy of the kernel socket.
	 * So is an inherited listener (a fork-per-connection child closes its
	 * copy): its locks and pending channels are copies of the owner's,
	 * perhaps taken at the fork, and its rdma_cm id is the owner's. */
	pthread_mutex_lock(&s->lock);
	if (s->owner_pid != self_pid()) {
		s->conn = NULL;
		s->lsn = NULL;
	}
	c = s->conn;
	if (c)
		conn_get(c);
	pthread_mutex_unlock(&s->lock);
	if (c) {
		sock_settle_path(s, c);
		conn_put(c);
	}
	pthread_mutex_lock(&s->lock);
	rdy_sock_closed(s);
	c = s->conn;
	l = s->lsn;
	s->conn = NULL;
	s->lsn = NULL;
	/* The last fd is gone: no path can change any more (and a socket
	 * closed FRESH leaves the epoll gate's count here). */
	switch ((enum sock_mode)atomic_load(&s->mode)) {
	case SOCK_MODE_RDMA:
	case SOCK_MODE_FRESH:
		sock_set_mode(s, SOCK_MODE_TCP);
		break;
	case SOCK_MODE_TCP:
	case SOCK_MODE_LISTEN:
		break;
	}
	pthread_mutex_unlock(&s->lock);
	if (c)
		conn_app_close(c, s->linger.l_onoff && s->linger.l_linger == 0);
	if (l)
		listener_close(l);
}

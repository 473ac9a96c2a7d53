/* Decides the path of each tracked socket when it connects, listens or is
 * accepted, and records the reason.  The RDMA attempt binds the socket,
 * brings the channel up, and only then lets the kernel TCP connect go. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn.h"
#include "core/listener.h"
#include "ipoib_fallback/path.h"
#include "preload/connect.h"
#include "preload/sock_rdma.h"

static void note_remote(struct sdp_sock *s, int fd, const struct sockaddr *addr)
{
	sock_note_addresses(s, fd);
	if (!s->st->remote.family) {
		stats_slot_begin(s->st);
		stats_addr_set(&s->st->remote, addr);
		stats_slot_end(s->st);
	}
}

/* Connect on the kernel-TCP path, recording addresses and reason. */
static int connect_tcp(struct sdp_sock *s, int fd, const struct sockaddr *addr, socklen_t len,
		       enum sdp_reason reason, bool negcached)
{
	int rc = real.connect(fd, addr, len);
	int saved = errno;

	note_remote(s, fd, addr);
	sock_set_tcp(s, reason, negcached);
	errno = saved;
	return rc;
}

static int refuse_without_rdma(struct sdp_sock *s, int fd, enum sdp_reason reason, bool negcached)
{
	sdp_warn("fd %d: a rule requires RDMA but %s; connect refused", fd, sdp_reason_text(reason));
	sock_set_tcp(s, reason, negcached);
	errno = ECONNREFUSED;
	return -1;
}

/* Blocking connect after the RDMA phase: the kernel connect, then attach. */
static int finish_blocking(struct sdp_sock *s, struct sdp_conn *c, int fd,
			   const struct sockaddr *addr, socklen_t len)
{
	enum conn_phase phase = conn_wait_resolved(c);
	int rc, saved;

	if (phase != CONN_TCP_CONNECTING) {
		/* The channel fell back.  The owner callback makes the socket TCP,
		 * but it may still be on its way from the progress thread: settle
		 * it here, or an app that closes the socket at once (a refused
		 * connect) leaves a stats line with no path. */
		sock_settle_fallback(s, c);
		conn_put(c);
		if (s->require_rdma) {
			errno = ECONNREFUSED;
			return -1;
		}
		rc = real.connect(fd, addr, len);
		saved = errno;
		if (rc == 0)
			note_remote(s, fd, addr);
		errno = saved;
		return rc;
	}
	conn_wait_open_delivered(c);
	rc = real.connect(fd, addr, len);
	saved = errno;
	conn_tcp_connected(c, rc == 0 ? 0 : -saved);
	if (rc == 0) {
		conn_wait_answered(c); /* a committed OPEN's answer, if it is not here yet */
		sock_settle_fallback(s, c); /* its refusal or timeout, as above */
		note_remote(s, fd, addr);
	}
	conn_put(c);
	errno = saved;
	return rc;
}

static int connect_rdma(struct sdp_sock *s, int fd, const struct sockaddr *addr, socklen_t len,
			const struct path_decision *d)
{
	struct conn_connect_params p = {
		.dst = addr, .dst_len = len, .app_fd = fd, .policy = &d->policy,
		.async = s->nonblock, .answer_first = d->require_rdma, .owner = s,
		.owner_ops = &sock_conn_ops, .st = s->st,
	};
	enum sdp_reason reason = SDP_REASON_RDMA_CM_ERROR;
	struct sdp_conn *c;
	int err = 0;

	pthread_mutex_lock(&s->lock);
	c = conn_connect_start(&p, &reason, &err);
	if (c) {
		if (sdp_tun.debug_adopt_delay_ms) /* tests: the attempt runs ahead of us */
			usleep(sdp_tun.debug_adopt_delay_ms * 1000u);
		conn_get(c); /* the socket's; the caller keeps the one it was given */
		sock_adopt_conn(s, c);
	}
	pthread_mutex_unlock(&s->lock);
	if (!c) {
		sdp_debug("fd %d: RDMA attempt not started: %s", fd, strerror(-err));
		if (s->require_rdma)
			return refuse_without_rdma(s, fd, reason, false);
		return connect_tcp(s, fd, addr, len, reason, false);
	}
	stats_slot_begin(s->st);
	stats_addr_set(&s->st->remote, addr);
	stats_slot_end(s->st);
	/* The progress thread may run the whole attempt, a non-blocking
	 * connect's kernel connect and binding included, before this thread
	 * adopts the channel: its event then found the socket without it
	 * (on_state reads s->conn unlocked).  What it said is settled here,
	 * as accept() does (attach_channel). */
	sock_settle_path(s, c);
	if (!s->nonblock)
		return finish_blocking(s, c, fd, addr, len);
	conn_put(c);
	errno = EINPROGRESS;
	return -1;
}

int sock_connect(struct sdp_sock *s, int fd, const struct sockaddr *addr, socklen_t len)
{
	struct path_decision d;

	if (atomic_load(&s->mode) == SOCK_MODE_RDMA) {
		struct sdp_conn *c = sock_conn_get(s);
		bool busy = c && conn_connect_in_progress(c);

		if (c)
			conn_put(c);
		if (busy) {
			errno = EALREADY; /* an earlier non-blocking connect is in flight */
			return -1;
		}
		return real.connect(fd, addr, len); /* connected: the kernel says EISCONN */
	}
	if (atomic_load(&s->mode) != SOCK_MODE_FRESH || !sockaddr_is_inet(addr, len))
		return real.connect(fd, addr, len);
	sock_set_role(s, STATS_ROLE_CLIENT);
	path_decide_client(addr, &d);
	s->require_rdma = d.require_rdma;
	if (!d.try_rdma && d.require_rdma && d.reason != SDP_REASON_RULE_TCP)
		return refuse_without_rdma(s, fd, d.reason, d.negcached);
	if (!d.try_rdma)
		return connect_tcp(s, fd, addr, len, d.reason, d.negcached);
	return connect_rdma(s, fd, addr, len, &d);
}

int sock_listen(struct sdp_sock *s, int fd, int backlog)
{
	struct sockaddr_storage local;
	socklen_t llen = sizeof(local);
	enum sdp_reason reason;
	struct path_decision d;
	int rc = real.listen(fd, backlog);
	int saved = errno;

	if (rc != 0 || atomic_load(&s->mode) == SOCK_MODE_LISTEN)
		return rc;
	sock_set_role(s, STATS_ROLE_LISTENER);
	sock_note_addresses(s, fd);
	if (real.getsockname(fd, (struct sockaddr *)&local, &llen) != 0) {
		errno = saved;
		return rc;
	}
	path_decide_server((struct sockaddr *)&local, &d);
	reason = d.reason;
	pthread_mutex_lock(&s->lock);
	if (d.try_rdma) {
		s->lsn = listener_create((struct sockaddr *)&local, backlog, &d.policy, &reason);
		if (s->lsn)
			reason = SDP_REASON_NONE;
	}
	stats_slot_begin(s->st);
	s->st->path = s->lsn ? SDP_PATH_RDMA : SDP_PATH_TCP;
	s->st->reason = (uint16_t)reason;
	stats_slot_end(s->st);
	s->require_rdma = d.require_rdma;
	s->owner_pid = self_pid();
	sock_set_mode(s, SOCK_MODE_LISTEN);
	pthread_mutex_unlock(&s->lock);
	errno = saved;
	return rc;
}

/* Why an accepted connection stays on TCP, given its listener. */
static enum sdp_reason accepted_tcp_reason(const struct sdp_sock *ls, const struct sdp_sock *ns)
{
	struct sockaddr_storage peer;
	struct sockaddr_in6 *p6 = (struct sockaddr_in6 *)&peer;
	struct sockaddr_in *p4 = (struct sockaddr_in *)&peer;

	memset(&peer, 0, sizeof(peer));
	peer.ss_family = ns->st->remote.family;
	if (peer.ss_family == AF_INET)
		memcpy(&p4->sin_addr, ns->st->remote.addr, 4);
	else if (peer.ss_family == AF_INET6)
		memcpy(&p6->sin6_addr, ns->st->remote.addr, 16);
	if (peer.ss_family && sockaddr_is_loopback((struct sockaddr *)&peer))
		return SDP_REASON_LOOPBACK;
	if (!ls->lsn)
		return (enum sdp_reason)ls->st->reason;
	if (ls->owner_pid != self_pid())
		return SDP_REASON_ACCEPTED_ELSEWHERE;
	return SDP_REASON_PEER_NO_SDPSHIM;
}

/* Attaches the pending channel of this connection, if its client sent one. */
static bool attach_channel(struct sdp_sock *ls, struct sdp_sock *ns, int nfd,
			   const struct sock_addresses *a)
{
	struct sdp_conn *c;

	if (!ls->lsn || ls->owner_pid != self_pid() || !a->have_local || !a->have_remote)
		return false;
	conn_accept_prepare(ls->lsn, (const struct sockaddr *)&a->local,
			    (const struct sockaddr *)&a->remote);
	pthread_mutex_lock(&ns->lock);
	c = conn_attach_accepted(ls->lsn, nfd, (const struct sockaddr *)&a->local,
				 (const struct sockaddr *)&a->remote, ns, &sock_conn_ops, ns->st);
	if (c)
		sock_adopt_conn(ns, c);
	pthread_mutex_unlock(&ns->lock);
	/* path=rdma once the binding handshake opens the channel: on_state(),
	 * or here if it opened before the socket adopted it. */
	if (c && conn_get_phase(c) == CONN_OPEN)
		sock_set_rdma(ns);
	return c != NULL;
}

int sock_accept(struct sdp_sock *ls, int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sock_addresses a;
	struct sdp_sock *ns;
	int nfd, saved;

	for (;;) {
		nfd = real.accept4(fd, addr, len, flags);
		saved = errno;
		if (nfd < 0)
			return nfd;
		ns = sock_track(nfd, ls->family, (flags & SOCK_NONBLOCK) != 0);
		if (!ns)
			break;
		sock_set_role(ns, STATS_ROLE_SERVER);
		sock_read_addresses(nfd, &a);
		sock_note_read_addresses(ns, &a);
		if (sdp_tun.debug_accept_delay_ms) /* tests: a thread held back here */
			usleep(sdp_tun.debug_accept_delay_ms * 1000u);
		if (attach_channel(ls, ns, nfd, &a))
			break;
		sock_set_tcp(ns, accepted_tcp_reason(ls, ns), false);
		if (!ls->require_rdma)
			break;
		/* Rule "use rdma server": plain-TCP clients are turned away. */
		sdp_info("fd %d: client without RDMA refused (rule requires rdma)", nfd);
		sock_drop_fd(nfd);
		real.close(nfd);
	}
	errno = saved;
	return nfd;
}

/* The sharer's side of the fork handoff (SDPSHIM_FORK=handoff): a process
 * that inherited an RDMA socket asks the socket's owner to move the stream
 * to TCP when it first uses it, then uses the kernel socket, or, with the
 * owner's climb ticket (it holds the socket alone), a channel of its own
 * that climbs back to RDMA; and a sharer that forks tells the owners that
 * its child shares too.  The owner's side: preload/fork_handoff.c. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/fdtable.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/progress.h" /* progress_now_ms() */
#include "preload/exit_flush.h"
#include "preload/fork_handoff.h"
#include "preload/fork_handoff_wire.h"
#include "preload/sock_rdma.h"

bool handoff_claimable(const struct sdp_sock *s)
{
	return s->owner_pid != self_pid() && s->handoff_state && sock_is_rdma(s);
}

static int send_request(int fd, const struct handoff_req *req, int reply_fd, uint64_t deadline_ms)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)req, sizeof(*req) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	memset(ctl.buf, 0, sizeof(ctl.buf));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &reply_fd, sizeof(int));
	while (real.sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || progress_now_ms() >= deadline_ms)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		real.poll(&p, 1, 100); /* the owner's queue is full: it drains as it answers */
	}
	return 0;
}

/* 0: the owner answered that the stream is on TCP (*reply: its answer,
 * a ticket with it or not); -errno otherwise. */
static int wait_reply(int fd, struct handoff_reply *reply)
{
	/* Past the owner's own bound: it may look for the socket that long,
	 * then move it, each within SDPSHIM_SWITCH_TIMEOUT_MS; between the two
	 * it may wait for its fork's return and its close (fork_handoff_wire.h). */
	uint64_t deadline = progress_now_ms() + sdp_tun.switch_timeout_ms * 2 + HANDOFF_REPLY_SLACK_MS;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	for (;;) {
		uint64_t now = progress_now_ms();
		int rc;

		if (now >= deadline)
			return -ETIMEDOUT;
		rc = real.poll(&p, 1, (int)(deadline - now));
		if (rc > 0)
			break;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
	n = real.recv(fd, reply, sizeof(*reply), MSG_DONTWAIT);
	if (n < (ssize_t)HANDOFF_REPLY_HEAD || reply->magic != HANDOFF_REPLY_MAGIC)
		return n < 0 || n == 0 ? -ECONNRESET : -EIO; /* the owner went away, or garbled */
	if (n != sizeof(*reply))
		reply->has_ticket = 0;
	return reply->status == 0 ? 0 : -EIO;
}

/* may_climb: a ticket is wanted (the owner may wait a little for its own
 * close to give one). */
static int ask_owner(const struct sdp_sock *s, struct handoff_reply *reply, bool may_climb)
{
	struct handoff_req req = {
		.magic = HANDOFF_MAGIC, .owner_pid = (uint32_t)s->owner_pid,
		.kind = may_climb ? HANDOFF_CLAIM : HANDOFF_CLAIM_TCP,
		.sock = (uint64_t)(uintptr_t)s, .id = s->handoff_id,
	};
	int pair[2], rc;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
		return -errno;
	rc = send_request(s->handoff_fd, &req, pair[1],
			  progress_now_ms() + sdp_tun.switch_timeout_ms);
	real.close(pair[1]);
	if (rc == 0)
		rc = wait_reply(pair[0], reply);
	real.close(pair[0]);
	return rc;
}

/* The owner's ticket: a held channel of ours carries the socket from here
 * (on TCP, counting offsets) and climbs back to RDMA.  Only a socket no
 * epoll set of this process names (their registrations are the owner's
 * indicators, shared by the fork).  s->lock held. */
static bool adopt_with_ticket(struct sdp_sock *s, const struct conn_climb_ticket *t)
{
	struct sdp_conn *c;

	if (s->regs || s->primary_fd < 0)
		return false;
	c = conn_adopt_held(s->primary_fd, t, s, &sock_conn_ops, s->st);
	if (!c)
		return false;
	s->conn = c;
	s->handoff_state = NULL;
	s->handoff_fd = -1;
	s->owner_pid = self_pid(); /* a fork of ours from here hands it off as its owner */
	exit_flush_helper_ensure(); /* an _exit flushes the stream once it climbed */
	sock_note_moved(s, SDP_REASON_FORKED);
	return true;
}

/* The stream is on kernel TCP: ours on a held channel of our own with the
 * owner's ticket (returned with a reference), else on the kernel socket
 * (NULL).  s->lock held. */
static struct sdp_conn *take_over(struct sdp_sock *s, const struct handoff_reply *reply)
{
	if (reply && reply->has_ticket && adopt_with_ticket(s, &reply->ticket)) {
		conn_get(s->conn);
		return s->conn;
	}
	sock_take_over_on_tcp(s);
	return NULL;
}

/* A fork-per-connection server's connection is short: its first call
 * waits for the climb (bounded), so that it does not live on TCP. */
static void wait_for_climb(const struct sdp_sock *s, struct sdp_conn *c)
{
	if (sdp_tun.climb_wait_ms && !conn_wait_climb(c, sdp_tun.climb_wait_ms))
		sdp_debug("fd %d: not back on RDMA within SDPSHIM_CLIMB_WAIT_MS (%u ms); it goes on "
			  "on TCP meanwhile", s->primary_fd, sdp_tun.climb_wait_ms);
	conn_put(c);
}

bool handoff_claim(struct sdp_sock *s)
{
	return handoff_claim_as(s, true);
}

bool handoff_claim_as(struct sdp_sock *s, bool may_climb)
{
	struct handoff_reply reply = { 0 };
	uint8_t state;
	int rc;

	pthread_mutex_lock(&s->lock);
	if (!handoff_claimable(s)) { /* another thread of ours took it over */
		bool done = !sock_is_rdma(s);

		pthread_mutex_unlock(&s->lock);
		return done;
	}
	/* One that forked while holding it has a child with a copy, which the
	 * owner may not have heard of yet: two holders, no climb. */
	may_climb = may_climb && !s->shared_with_child;
	rc = ask_owner(s, &reply, may_climb);
	state = atomic_load(s->handoff_state);
	if (state == HANDOFF_ON_TCP) { /* the owner's word, whether or not it answered */
		struct sdp_conn *c = take_over(s, rc == 0 && may_climb ? &reply : NULL);

		explicit_bzero(&reply, sizeof(reply));
		pthread_mutex_unlock(&s->lock);
		if (c) {
			/* A climb over before adopt_with_ticket noted the move
			 * had its event overwritten: settle it (as connect does). */
			sock_settle_path(s, c);
			wait_for_climb(s, c);
		}
		return true;
	}
	sdp_warn("fd %d: the RDMA stream inherited from process %d could not move to TCP (%s%s); "
		 "calls on it fail with EIO", s->primary_fd, (int)s->owner_pid,
		 rc ? strerror(-rc) : "the owner could not move it",
		 state == HANDOFF_ON_RDMA && rc ? ", and the owner had not moved it" : "");
	s->handoff_state = NULL; /* asked once */
	s->handoff_fd = -1;
	pthread_mutex_unlock(&s->lock);
	return false;
}

/* ---- a sharer that forks ---- */

struct holder_report {
	pid_t child;
	int fds[16]; /* the owners' request sockets told so far */
	unsigned n;
};

static void report_to_owner(int fd, void *obj, void *ctx)
{
	struct holder_report *r = ctx;
	struct sdp_sock *s = obj;
	struct handoff_req req;

	(void)fd;
	if (!handoff_claimable(s))
		return;
	for (unsigned i = 0; i < r->n; i++)
		if (r->fds[i] == s->handoff_fd)
			return;
	if (r->n < 16)
		r->fds[r->n++] = s->handoff_fd;
	req = (struct handoff_req){ .magic = HANDOFF_MAGIC, .owner_pid = (uint32_t)s->owner_pid,
				    .kind = HANDOFF_HOLDER, .holder_pid = (uint32_t)r->child,
				    .via_pid = (uint32_t)getpid() };
	if (r->n == 1) /* tests: the child's claim comes first */
		handoff_debug_pause(sdp_tun.debug_holder_delay_ms);
	real.send(s->handoff_fd, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void handoff_report_holder(pid_t child)
{
	struct holder_report r = { .child = child };

	fdt_for_each(FDT_SOCK, report_to_owner, &r);
}

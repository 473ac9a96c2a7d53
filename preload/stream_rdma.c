/* The RDMA stream (preload/stream.h): the calls of RDMA-backed sockets as
 * libc-shaped wrappers over the channel's byte-stream API in core/.  A
 * call the channel can no longer carry (the stream moved to kernel TCP
 * before or during it, core's CONN_USE_TCP) goes to the TCP stream, in one
 * place: channel_call().  EPIPE raises SIGPIPE as TCP does. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/self.h"
#include "core/conn.h"
#include "preload/ctl.h" /* socket options and queue sizes of the channel */
#include "preload/fork_handoff.h"
#include "preload/init.h"
#include "preload/sock_rdma.h"
#include "preload/stream.h"

static ssize_t set_errno(ssize_t rc)
{
	if (rc >= 0)
		return rc;
	errno = (int)-rc;
	return -1;
}

/* A channel belongs to the process that built it; a forked child cannot
 * touch its verbs resources.  Under SDPSHIM_FORK=handoff this process asks
 * the owner for the stream and goes on on TCP; under switch, fork moved
 * every stream to TCP first (core/switch.c), and a socket still on RDMA
 * here is one that could not move. */
static bool inherited_channel(struct sdp_sock *s)
{
	static _Atomic int warned;

	if (likely(s->owner_pid == self_pid()))
		return false;
	if (handoff_claimable(s) && handoff_claim(s))
		return false; /* on kernel TCP now: the call goes there */
	if (!sock_is_rdma(s))
		return false;
	if (!warned++)
		sdp_warn("an RDMA-backed socket inherited from process %d was used after fork, but "
			 "its stream could not move to TCP before the fork (or SDPSHIM_FORK=keep): "
			 "the call fails with EIO", (int)s->owner_pid);
	errno = EIO;
	return true;
}

/* ---- the one road to core, and off it ---- */

enum channel_step { STEP_RECV, STEP_SEND, STEP_SHUTDOWN };

/* One call of the stream's own steps, as the channel and the TCP stream
 * both take it. */
struct channel_call {
	enum channel_step step;
	int fd;
	const struct iovec *iov;
	int iovcnt;
	int flags; /* recv and send */
	int how;   /* shutdown */
};

static bool shutdown_how_valid(int how)
{
	return how == SHUT_RD || how == SHUT_WR || how == SHUT_RDWR;
}

/* core's answer: bytes or 0, -errno, or CONN_USE_TCP. */
static ssize_t call_on_channel(struct sdp_sock *s, struct sdp_conn *c,
			       const struct channel_call *k)
{
	switch (k->step) {
	case STEP_RECV:
		return conn_recv(c, k->iov, k->iovcnt, k->flags, s->nonblock, s->rcvtimeo_ms);
	case STEP_SEND:
		return conn_send(c, k->iov, k->iovcnt, k->flags, s->nonblock, s->sndtimeo_ms);
	case STEP_SHUTDOWN:
		return shutdown_how_valid(k->how) ? conn_shutdown(c, k->how) : -EINVAL;
	}
	return -EINVAL;
}

static ssize_t call_on_tcp(struct sdp_sock *s, const struct channel_call *k)
{
	switch (k->step) {
	case STEP_RECV:
		return sock_stream_tcp.recv(k->fd, k->iov, k->iovcnt, k->flags, s);
	case STEP_SEND:
		return sock_stream_tcp.send(k->fd, k->iov, k->iovcnt, k->flags, s);
	case STEP_SHUTDOWN:
		return sock_stream_tcp.shutdown(k->fd, k->how, s);
	}
	errno = EINVAL;
	return -1;
}

/* core's answer in libc's shape: -1 and errno; a send that found the
 * stream closed raises SIGPIPE unless MSG_NOSIGNAL, as TCP does. */
static ssize_t libc_result(const struct channel_call *k, ssize_t rc)
{
	if (k->step == STEP_SEND && rc == -EPIPE && !(k->flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return set_errno(rc);
}

/* The call on the socket's channel; the only place that handles
 * CONN_USE_TCP.  A socket no longer on RDMA (no channel any more), or a
 * channel whose stream moved to kernel TCP during the call, has the TCP
 * stream make the call. */
static ssize_t channel_call(struct sdp_sock *s, const struct channel_call *k)
{
	struct sdp_conn *c = sock_conn_get(s);
	ssize_t rc = CONN_USE_TCP;

	if (c) {
		rc = call_on_channel(s, c, k);
		conn_put(c);
	}
	if (rc == CONN_USE_TCP)
		return call_on_tcp(s, k);
	return libc_result(k, rc);
}

/* A recv or send step; a channel inherited across fork fails it (EIO). */
static ssize_t data_call(struct sdp_sock *s, enum channel_step step, int fd,
			 const struct iovec *iov, int iovcnt, int flags)
{
	struct channel_call k = {
		.step = step, .fd = fd, .iov = iov, .iovcnt = iovcnt, .flags = flags,
	};

	if (inherited_channel(s))
		return -1;
	return channel_call(s, &k);
}

/* ---- receive side ---- */

static ssize_t rdma_recv(int fd, const struct iovec *iov, int iovcnt, int flags,
			 struct sdp_sock *s)
{
	return data_call(s, STEP_RECV, fd, iov, iovcnt, flags);
}

static ssize_t rdma_recv_buf(int fd, void *buf, size_t len, int flags, struct sdp_sock *s)
{
	struct iovec iov = { buf, len };

	return rdma_recv(fd, &iov, 1, flags, s);
}

static ssize_t rdma_read(int fd, void *buf, size_t len, struct sdp_sock *s)
{
	return rdma_recv_buf(fd, buf, len, 0, s);
}

static ssize_t rdma_readv(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s)
{
	return rdma_recv(fd, iov, iovcnt, 0, s);
}

static ssize_t rdma_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			     socklen_t *srclen, struct sdp_sock *s)
{
	if (srclen)
		*srclen = 0; /* a connected stream socket reports no source address */
	(void)src;
	return rdma_recv_buf(fd, buf, len, flags, s);
}

static ssize_t rdma_recvmsg(int fd, struct msghdr *msg, int flags, struct sdp_sock *s)
{
	ssize_t n = rdma_recv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, s);

	if (n >= 0) {
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return n;
}

static int rdma_recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			 struct timespec *timeout, struct sdp_sock *s)
{
	unsigned int i;

	(void)timeout;
	for (i = 0; i < vlen; i++) {
		int f = i == 0 ? flags & ~MSG_WAITFORONE : flags | MSG_DONTWAIT;
		ssize_t n = rdma_recvmsg(fd, &vec[i].msg_hdr, f & ~MSG_WAITFORONE, s);

		if (n < 0)
			return i ? (int)i : -1;
		vec[i].msg_len = (unsigned int)n;
		if (n == 0)
			return (int)i + 1;
	}
	return (int)i;
}

/* ---- send side ---- */

static ssize_t rdma_send(int fd, const struct iovec *iov, int iovcnt, int flags,
			 struct sdp_sock *s)
{
	return data_call(s, STEP_SEND, fd, iov, iovcnt, flags);
}

static ssize_t rdma_send_buf(int fd, const void *buf, size_t len, int flags, struct sdp_sock *s)
{
	struct iovec iov = { (void *)buf, len };

	return rdma_send(fd, &iov, 1, flags, s);
}

static ssize_t rdma_write(int fd, const void *buf, size_t len, struct sdp_sock *s)
{
	return rdma_send_buf(fd, buf, len, 0, s);
}

static ssize_t rdma_writev(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s)
{
	return rdma_send(fd, iov, iovcnt, 0, s);
}

static ssize_t rdma_sendto(int fd, const void *buf, size_t len, int flags,
			   const struct sockaddr *dst, socklen_t dstlen, struct sdp_sock *s)
{
	(void)dst; /* ignored on a connected stream socket, as Linux TCP does */
	(void)dstlen;
	return rdma_send_buf(fd, buf, len, flags, s);
}

static ssize_t rdma_sendmsg(int fd, const struct msghdr *msg, int flags, struct sdp_sock *s)
{
	return rdma_send(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, s);
}

static int rdma_sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			 struct sdp_sock *s)
{
	unsigned int i;

	for (i = 0; i < vlen; i++) {
		ssize_t n = rdma_sendmsg(fd, &vec[i].msg_hdr, flags, s);

		if (n < 0)
			return i ? (int)i : -1;
		vec[i].msg_len = (unsigned int)n;
	}
	return (int)i;
}

#define SENDFILE_CHUNK (256u * 1024u)

/* sendfile to an RDMA-backed socket: pread into a bounce buffer and send.
 * The file offset advances only by what was sent, as the kernel does. */
static ssize_t rdma_sendfile(int out_fd, int in_fd, off_t *offset, size_t count,
			     struct sdp_sock *s)
{
	off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	size_t chunk_max = count < SENDFILE_CHUNK ? count : SENDFILE_CHUNK;
	char *buf;
	ssize_t total = 0;

	if (pos < 0)
		return -1;
	if (count == 0)
		return 0;
	buf = malloc(chunk_max);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	while ((size_t)total < count) {
		size_t want = count - (size_t)total;
		ssize_t got, sent;

		got = pread(in_fd, buf, want < chunk_max ? want : chunk_max, pos);
		if (got <= 0) {
			if (got < 0 && total == 0)
				total = -1;
			break;
		}
		sent = rdma_send_buf(out_fd, buf, (size_t)got, 0, s);
		if (sent <= 0) {
			if (total == 0)
				total = -1;
			break;
		}
		total += sent;
		pos += sent;
		if (sent < got)
			break;
	}
	free(buf);
	if (total > 0) {
		if (offset)
			*offset = pos;
		else
			lseek(in_fd, pos, SEEK_SET);
	}
	return total;
}

static ssize_t rdma_sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count,
			       struct sdp_sock *s)
{
	return rdma_sendfile(out_fd, in_fd, (off_t *)offset, count, s);
}

/* ---- control ---- */

static int rdma_shutdown(int fd, int how, struct sdp_sock *s)
{
	struct channel_call k = { .step = STEP_SHUTDOWN, .fd = fd, .how = how };

	if (inherited_channel(s)) /* not under the owner's live stream */
		return -1;
	return (int)channel_call(s, &k);
}

static int rdma_readable_bytes(int fd, void *arg, struct sdp_sock *s)
{
	return ctl_ioctl_queue(s, fd, FIONREAD, arg);
}

static int rdma_unsent_bytes(int fd, void *arg, struct sdp_sock *s)
{
	return ctl_ioctl_queue(s, fd, TIOCOUTQ, arg);
}

static int rdma_getsockopt(int fd, int level, int name, void *val, socklen_t *len,
			   struct sdp_sock *s)
{
	return ctl_getsockopt(s, fd, level, name, val, len); /* SO_ERROR from the channel */
}

static void rdma_option_set(int fd, int level, int name, const void *val, socklen_t len,
			    struct sdp_sock *s)
{
	ctl_setsockopt(s, fd, level, name, val, len); /* keepalive */
}

static struct sdp_conn *rdma_channel_get(struct sdp_sock *s)
{
	return sock_conn_get(s); /* NULL once the stream is on kernel TCP */
}

const struct sock_stream_ops sock_stream_rdma = SOCK_STREAM_OPS(rdma);

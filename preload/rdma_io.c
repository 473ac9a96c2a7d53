/* The data hooks of RDMA-backed sockets: libc-shaped wrappers over the
 * channel's byte-stream API.  If the socket moved to TCP meanwhile, the
 * call is repeated on the kernel socket; EPIPE raises SIGPIPE as TCP does. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "core/conn.h"
#include "preload/init.h"
#include "preload/rdma_io.h"
#include "preload/sock_rdma.h"

static ssize_t set_errno(ssize_t rc)
{
	if (rc >= 0)
		return rc;
	errno = (int)-rc;
	return -1;
}

static ssize_t kernel_recv(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n = real.recvmsg(fd, &msg, flags);

	if (n > 0 && !(flags & MSG_PEEK))
		sock_count_received(s, n);
	return n;
}

static ssize_t kernel_send(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n = real.sendmsg(fd, &msg, flags);

	sock_count_sent(s, n);
	return n;
}

/* A channel belongs to the process that built it; a forked child cannot
 * touch its verbs resources.  fork moves every stream to TCP first
 * (core/switch.c); a socket still on RDMA here is one that could not move. */
static bool inherited_channel(struct sdp_sock *s)
{
	static _Atomic int warned;

	if (likely(s->owner_pid == getpid()))
		return false;
	if (!warned++)
		sdp_warn("an RDMA-backed socket inherited from process %d was used after fork, but "
			 "its stream could not move to TCP before the fork (or SDPSHIM_FORK=keep): "
			 "the call fails with EIO", (int)s->owner_pid);
	errno = EIO;
	return true;
}

ssize_t rdma_io_recv(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct sdp_conn *c;
	ssize_t rc;

	if (inherited_channel(s))
		return -1;
	c = sock_conn_get(s);
	if (!c)
		return kernel_recv(s, fd, iov, iovcnt, flags);
	rc = conn_recv(c, iov, iovcnt, flags, s->nonblock, s->rcvtimeo_ms);
	conn_put(c);
	if (rc == CONN_USE_TCP)
		return kernel_recv(s, fd, iov, iovcnt, flags);
	return set_errno(rc);
}

ssize_t rdma_io_recv_buf(struct sdp_sock *s, int fd, void *buf, size_t len, int flags,
			 struct sockaddr *src, socklen_t *srclen)
{
	struct iovec iov = { buf, len };

	if (srclen)
		*srclen = 0; /* a connected stream socket reports no source address */
	(void)src;
	return rdma_io_recv(s, fd, &iov, 1, flags);
}

ssize_t rdma_io_recvmsg(struct sdp_sock *s, int fd, struct msghdr *msg, int flags)
{
	ssize_t n = rdma_io_recv(s, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);

	if (n >= 0) {
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return n;
}

int rdma_io_recvmmsg(struct sdp_sock *s, int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		     struct timespec *timeout)
{
	unsigned int i;

	(void)timeout;
	for (i = 0; i < vlen; i++) {
		int f = i == 0 ? flags & ~MSG_WAITFORONE : flags | MSG_DONTWAIT;
		ssize_t n = rdma_io_recvmsg(s, fd, &vec[i].msg_hdr, f & ~MSG_WAITFORONE);

		if (n < 0)
			return i ? (int)i : -1;
		vec[i].msg_len = (unsigned int)n;
		if (n == 0)
			return (int)i + 1;
	}
	return (int)i;
}

static ssize_t finish_send(ssize_t rc, int flags)
{
	if (rc == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return set_errno(rc);
}

ssize_t rdma_io_send(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct sdp_conn *c;
	ssize_t rc;

	if (inherited_channel(s))
		return -1;
	c = sock_conn_get(s);
	if (!c)
		return kernel_send(s, fd, iov, iovcnt, flags);
	rc = conn_send(c, iov, iovcnt, flags, s->nonblock, s->sndtimeo_ms);
	conn_put(c);
	if (rc == CONN_USE_TCP)
		return kernel_send(s, fd, iov, iovcnt, flags);
	return finish_send(rc, flags);
}

ssize_t rdma_io_send_buf(struct sdp_sock *s, int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { (void *)buf, len };

	return rdma_io_send(s, fd, &iov, 1, flags);
}

ssize_t rdma_io_sendto(struct sdp_sock *s, int fd, const void *buf, size_t len, int flags,
		       const struct sockaddr *dst, socklen_t dstlen)
{
	(void)dst; /* ignored on a connected stream socket, as Linux TCP does */
	(void)dstlen;
	return rdma_io_send_buf(s, fd, buf, len, flags);
}

ssize_t rdma_io_sendmsg(struct sdp_sock *s, int fd, const struct msghdr *msg, int flags)
{
	return rdma_io_send(s, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

int rdma_io_sendmmsg(struct sdp_sock *s, int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	unsigned int i;

	for (i = 0; i < vlen; i++) {
		ssize_t n = rdma_io_sendmsg(s, fd, &vec[i].msg_hdr, flags);

		if (n < 0)
			return i ? (int)i : -1;
		vec[i].msg_len = (unsigned int)n;
	}
	return (int)i;
}

#define SENDFILE_CHUNK (256u * 1024u)

/* sendfile to an RDMA-backed socket: pread into a bounce buffer and send.
 * The file offset advances only by what was sent, as the kernel does. */
ssize_t rdma_io_sendfile(struct sdp_sock *s, int out_fd, int in_fd, off_t *offset, size_t count)
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
		sent = rdma_io_send_buf(s, out_fd, buf, (size_t)got, 0);
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

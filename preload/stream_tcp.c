/* The kernel-TCP stream (preload/stream.h): the only place where a tracked
 * socket's bytes go through the kernel TCP socket, and where they are
 * counted (bytes_sent, bytes_received, and tcp_bytes_sent/received beside
 * them; a MSG_PEEK is counted when the bytes are really read).  Each call is
 * libc's own, so a socket on TCP makes the same syscalls as without the
 * shim.  FRESH, LISTEN and TCP sockets use it, and the RDMA stream hands it
 * the calls of a stream that moved to TCP. */
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/guard.h" /* unlikely() */
#include "base/real.h"
#include "preload/stream.h"

static inline void sock_count_sent(struct sdp_sock *s, ssize_t n)
{
	if (n > 0)
		stats_count_tcp(s->st, true, (uint64_t)n);
}

static inline void sock_count_received(struct sdp_sock *s, ssize_t n)
{
	if (n > 0)
		stats_count_tcp(s->st, false, (uint64_t)n);
}

static inline ssize_t counted_in(struct sdp_sock *s, ssize_t n)
{
	sock_count_received(s, n);
	return n;
}

static inline ssize_t counted_out(struct sdp_sock *s, ssize_t n)
{
	sock_count_sent(s, n);
	return n;
}

/* ---- receive side ---- */

static ssize_t tcp_recv(int fd, const struct iovec *iov, int iovcnt, int flags,
			struct sdp_sock *s)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n = real.recvmsg(fd, &msg, flags);

	if (!(flags & MSG_PEEK))
		sock_count_received(s, n);
	return n;
}

static ssize_t tcp_read(int fd, void *buf, size_t len, struct sdp_sock *s)
{
	return counted_in(s, real.read(fd, buf, len));
}

static ssize_t tcp_readv(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s)
{
	return counted_in(s, real.readv(fd, iov, iovcnt));
}

static ssize_t tcp_recv_buf(int fd, void *buf, size_t len, int flags, struct sdp_sock *s)
{
	if (unlikely(flags & MSG_PEEK)) /* counted when they are really read */
		return real.recv(fd, buf, len, flags);
	return counted_in(s, real.recv(fd, buf, len, flags));
}

static ssize_t tcp_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			    socklen_t *srclen, struct sdp_sock *s)
{
	if (unlikely(flags & MSG_PEEK))
		return real.recvfrom(fd, buf, len, flags, src, srclen);
	return counted_in(s, real.recvfrom(fd, buf, len, flags, src, srclen));
}

static ssize_t tcp_recvmsg(int fd, struct msghdr *msg, int flags, struct sdp_sock *s)
{
	if (unlikely(flags & MSG_PEEK))
		return real.recvmsg(fd, msg, flags);
	return counted_in(s, real.recvmsg(fd, msg, flags));
}

static int tcp_recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout, struct sdp_sock *s)
{
	int n = real.recvmmsg(fd, vec, vlen, flags, timeout);

	for (int i = 0; i < n && !(flags & MSG_PEEK); i++)
		sock_count_received(s, vec[i].msg_len);
	return n;
}

/* ---- send side ---- */

static ssize_t tcp_send(int fd, const struct iovec *iov, int iovcnt, int flags,
			struct sdp_sock *s)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };

	return counted_out(s, real.sendmsg(fd, &msg, flags));
}

static ssize_t tcp_write(int fd, const void *buf, size_t len, struct sdp_sock *s)
{
	return counted_out(s, real.write(fd, buf, len));
}

static ssize_t tcp_writev(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s)
{
	return counted_out(s, real.writev(fd, iov, iovcnt));
}

static ssize_t tcp_send_buf(int fd, const void *buf, size_t len, int flags, struct sdp_sock *s)
{
	return counted_out(s, real.send(fd, buf, len, flags));
}

static ssize_t tcp_sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dst, socklen_t dstlen, struct sdp_sock *s)
{
	return counted_out(s, real.sendto(fd, buf, len, flags, dst, dstlen));
}

static ssize_t tcp_sendmsg(int fd, const struct msghdr *msg, int flags, struct sdp_sock *s)
{
	return counted_out(s, real.sendmsg(fd, msg, flags));
}

static int tcp_sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct sdp_sock *s)
{
	int n = real.sendmmsg(fd, vec, vlen, flags);

	for (int i = 0; i < n; i++)
		sock_count_sent(s, vec[i].msg_len);
	return n;
}

static ssize_t tcp_sendfile(int out_fd, int in_fd, off_t *offset, size_t count,
			    struct sdp_sock *s)
{
	return counted_out(s, real.sendfile(out_fd, in_fd, offset, count));
}

static ssize_t tcp_sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count,
			      struct sdp_sock *s)
{
	return counted_out(s, real.sendfile64(out_fd, in_fd, offset, count));
}

/* ---- control: the kernel socket answers ---- */

static int tcp_shutdown(int fd, int how, struct sdp_sock *s)
{
	(void)s;
	return real.shutdown(fd, how);
}

static int tcp_readable_bytes(int fd, void *arg, struct sdp_sock *s)
{
	(void)s;
	return real.ioctl(fd, FIONREAD, arg);
}

static int tcp_unsent_bytes(int fd, void *arg, struct sdp_sock *s)
{
	(void)s;
	return real.ioctl(fd, TIOCOUTQ, arg);
}

static int tcp_getsockopt(int fd, int level, int name, void *val, socklen_t *len,
			  struct sdp_sock *s)
{
	(void)s;
	return real.getsockopt(fd, level, name, val, len);
}

static void tcp_option_set(int fd, int level, int name, const void *val, socklen_t len,
			   struct sdp_sock *s)
{
	/* the kernel has it, and nothing else carries the stream */
}

static struct sdp_conn *tcp_channel_get(struct sdp_sock *s)
{
	(void)s;
	return NULL; /* poll and select wait on the kernel socket */
}

const struct sock_stream_ops sock_stream_tcp = SOCK_STREAM_OPS(tcp);

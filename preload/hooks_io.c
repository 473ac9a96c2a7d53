/* Data hooks: read/write, the recv and send families, sendfile and the
 * _FORTIFY_SOURCE variants.  Untracked fds go straight to libc; tracked
 * sockets on kernel TCP are counted; RDMA-backed sockets use the channel.
 * A socket not on RDMA costs one table load and one atomic read of its mode
 * (and the byte count): no lock, no extra syscall. */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/real.h"
#include "preload/init.h"
#include "preload/rdma_io.h" /* rdma_io_recv(), rdma_io_send(), rdma_io_sendfile() */
#include "preload/sock.h"

#include "base/fortify.h"

/* libc's function, for an fd the table does not hold.  Before
 * initialisation the table is empty, so a process's first calls come here
 * too; they initialise in NAME_first(), out of line, so that the hooks need
 * no stack frame on this path.  (A tracked socket implies that `real` is
 * resolved: init resolves it before it fills the table.) */
#define LIBC(name, ...) \
	(likely(sdp_ready) ? real.name(__VA_ARGS__) : name##_first(__VA_ARGS__))
#define FIRST(ret, name, params, args)                                 \
	static __attribute__((noinline, cold)) ret name##_first params \
	{                                                              \
		sdp_ensure_init();                                     \
		return real.name args;                                 \
	}

FIRST(ssize_t, read, (int fd, void *buf, size_t len), (fd, buf, len))
FIRST(ssize_t, readv, (int fd, const struct iovec *iov, int n), (fd, iov, n))
FIRST(ssize_t, recv, (int fd, void *buf, size_t len, int fl), (fd, buf, len, fl))
FIRST(ssize_t, recvfrom, (int fd, void *buf, size_t len, int fl, struct sockaddr *a, socklen_t *al),
      (fd, buf, len, fl, a, al))
FIRST(ssize_t, recvmsg, (int fd, struct msghdr *m, int fl), (fd, m, fl))
FIRST(int, recvmmsg, (int fd, struct mmsghdr *v, unsigned int n, int fl, struct timespec *t),
      (fd, v, n, fl, t))
FIRST(ssize_t, write, (int fd, const void *buf, size_t len), (fd, buf, len))
FIRST(ssize_t, writev, (int fd, const struct iovec *iov, int n), (fd, iov, n))
FIRST(ssize_t, send, (int fd, const void *buf, size_t len, int fl), (fd, buf, len, fl))
FIRST(ssize_t, sendto, (int fd, const void *buf, size_t len, int fl, const struct sockaddr *a,
			socklen_t al), (fd, buf, len, fl, a, al))
FIRST(ssize_t, sendmsg, (int fd, const struct msghdr *m, int fl), (fd, m, fl))
FIRST(int, sendmmsg, (int fd, struct mmsghdr *v, unsigned int n, int fl), (fd, v, n, fl))
FIRST(ssize_t, sendfile, (int o, int i, off_t *off, size_t n), (o, i, off, n))
FIRST(ssize_t, sendfile64, (int o, int i, off64_t *off, size_t n), (o, i, off, n))

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

SDP_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(read, fd, buf, len);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, 0, NULL, NULL);
	return counted_in(s, real.read(fd, buf, len));
}

SDP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(readv, fd, iov, iovcnt);
	if (sock_is_rdma(s))
		return rdma_io_recv(s, fd, iov, iovcnt, 0);
	return counted_in(s, real.readv(fd, iov, iovcnt));
}

SDP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recv, fd, buf, len, flags);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, flags, NULL, NULL);
	if (unlikely(flags & MSG_PEEK)) /* counted when they are really read */
		return real.recv(fd, buf, len, flags);
	return counted_in(s, real.recv(fd, buf, len, flags));
}

SDP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			    socklen_t *srclen)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recvfrom, fd, buf, len, flags, src, srclen);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, flags, src, srclen);
	if (unlikely(flags & MSG_PEEK)) /* counted when they are really read */
		return real.recvfrom(fd, buf, len, flags, src, srclen);
	return counted_in(s, real.recvfrom(fd, buf, len, flags, src, srclen));
}

SDP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recvmsg, fd, msg, flags);
	if (sock_is_rdma(s))
		return rdma_io_recvmsg(s, fd, msg, flags);
	if (unlikely(flags & MSG_PEEK)) /* counted when they are really read */
		return real.recvmsg(fd, msg, flags);
	return counted_in(s, real.recvmsg(fd, msg, flags));
}

SDP_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout)
{
	struct sdp_sock *s = sock_of(fd);
	int n;

	if (likely(!s))
		return LIBC(recvmmsg, fd, vec, vlen, flags, timeout);
	if (sock_is_rdma(s))
		return rdma_io_recvmmsg(s, fd, vec, vlen, flags, timeout);
	n = real.recvmmsg(fd, vec, vlen, flags, timeout);
	for (int i = 0; i < n && !(flags & MSG_PEEK); i++)
		sock_count_received(s, vec[i].msg_len);
	return n;
}

SDP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return read(fd, buf, len);
}

SDP_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__chk_fail();
	return recv(fd, buf, len, flags);
}

SDP_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				  struct sockaddr *src, socklen_t *srclen)
{
	if (len > buflen)
		__chk_fail();
	return recvfrom(fd, buf, len, flags, src, srclen);
}

/* ---- send side ---- */

SDP_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(write, fd, buf, len);
	if (sock_is_rdma(s))
		return rdma_io_send_buf(s, fd, buf, len, 0);
	return counted_out(s, real.write(fd, buf, len));
}

SDP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(writev, fd, iov, iovcnt);
	if (sock_is_rdma(s))
		return rdma_io_send(s, fd, iov, iovcnt, 0);
	return counted_out(s, real.writev(fd, iov, iovcnt));
}

SDP_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(send, fd, buf, len, flags);
	if (sock_is_rdma(s))
		return rdma_io_send_buf(s, fd, buf, len, flags);
	return counted_out(s, real.send(fd, buf, len, flags));
}

SDP_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dst, socklen_t dstlen)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(sendto, fd, buf, len, flags, dst, dstlen);
	if (sock_is_rdma(s))
		return rdma_io_sendto(s, fd, buf, len, flags, dst, dstlen);
	return counted_out(s, real.sendto(fd, buf, len, flags, dst, dstlen));
}

SDP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(sendmsg, fd, msg, flags);
	if (sock_is_rdma(s))
		return rdma_io_sendmsg(s, fd, msg, flags);
	return counted_out(s, real.sendmsg(fd, msg, flags));
}

SDP_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	struct sdp_sock *s = sock_of(fd);
	int n;

	if (likely(!s))
		return LIBC(sendmmsg, fd, vec, vlen, flags);
	if (sock_is_rdma(s))
		return rdma_io_sendmmsg(s, fd, vec, vlen, flags);
	n = real.sendmmsg(fd, vec, vlen, flags);
	for (int i = 0; i < n; i++)
		sock_count_sent(s, vec[i].msg_len);
	return n;
}

SDP_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct sdp_sock *s = sock_of(out_fd);

	if (likely(!s))
		return LIBC(sendfile, out_fd, in_fd, offset, count);
	if (sock_is_rdma(s))
		return rdma_io_sendfile(s, out_fd, in_fd, offset, count);
	return counted_out(s, real.sendfile(out_fd, in_fd, offset, count));
}

SDP_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	struct sdp_sock *s = sock_of(out_fd);

	if (likely(!s))
		return LIBC(sendfile64, out_fd, in_fd, offset, count);
	if (sock_is_rdma(s))
		return rdma_io_sendfile(s, out_fd, in_fd, (off_t *)offset, count);
	return counted_out(s, real.sendfile64(out_fd, in_fd, offset, count));
}

/* Data hooks: read/write, the recv and send families, sendfile and the
 * _FORTIFY_SOURCE variants.  Untracked fds go straight to libc; tracked
 * sockets on kernel TCP are counted; RDMA-backed sockets use the channel. */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload/init.h"
#include "preload/rdma_io.h" /* rdma_io_recv(), rdma_io_send(), rdma_io_sendfile() */
#include "preload/real.h"
#include "preload/sock.h"

#include "preload/fortify.h"

/* Peeked bytes are counted when they are really read. */
static inline ssize_t counted_in(struct sdp_sock *s, ssize_t n, int flags)
{
	if (!(flags & MSG_PEEK))
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
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.read(fd, buf, len);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, 0, NULL, NULL);
	return counted_in(s, real.read(fd, buf, len), 0);
}

SDP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.readv(fd, iov, iovcnt);
	if (sock_is_rdma(s))
		return rdma_io_recv(s, fd, iov, iovcnt, 0);
	return counted_in(s, real.readv(fd, iov, iovcnt), 0);
}

SDP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.recv(fd, buf, len, flags);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, flags, NULL, NULL);
	return counted_in(s, real.recv(fd, buf, len, flags), flags);
}

SDP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			    socklen_t *srclen)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.recvfrom(fd, buf, len, flags, src, srclen);
	if (sock_is_rdma(s))
		return rdma_io_recv_buf(s, fd, buf, len, flags, src, srclen);
	return counted_in(s, real.recvfrom(fd, buf, len, flags, src, srclen), flags);
}

SDP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.recvmsg(fd, msg, flags);
	if (sock_is_rdma(s))
		return rdma_io_recvmsg(s, fd, msg, flags);
	return counted_in(s, real.recvmsg(fd, msg, flags), flags);
}

SDP_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout)
{
	struct sdp_sock *s;
	int n;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.recvmmsg(fd, vec, vlen, flags, timeout);
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
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.write(fd, buf, len);
	if (sock_is_rdma(s))
		return rdma_io_send_buf(s, fd, buf, len, 0);
	return counted_out(s, real.write(fd, buf, len));
}

SDP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.writev(fd, iov, iovcnt);
	if (sock_is_rdma(s))
		return rdma_io_send(s, fd, iov, iovcnt, 0);
	return counted_out(s, real.writev(fd, iov, iovcnt));
}

SDP_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.send(fd, buf, len, flags);
	if (sock_is_rdma(s))
		return rdma_io_send_buf(s, fd, buf, len, flags);
	return counted_out(s, real.send(fd, buf, len, flags));
}

SDP_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dst, socklen_t dstlen)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.sendto(fd, buf, len, flags, dst, dstlen);
	if (sock_is_rdma(s))
		return rdma_io_sendto(s, fd, buf, len, flags, dst, dstlen);
	return counted_out(s, real.sendto(fd, buf, len, flags, dst, dstlen));
}

SDP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.sendmsg(fd, msg, flags);
	if (sock_is_rdma(s))
		return rdma_io_sendmsg(s, fd, msg, flags);
	return counted_out(s, real.sendmsg(fd, msg, flags));
}

SDP_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	struct sdp_sock *s;
	int n;

	sdp_ensure_init();
	s = sock_of(fd);
	if (likely(!s))
		return real.sendmmsg(fd, vec, vlen, flags);
	if (sock_is_rdma(s))
		return rdma_io_sendmmsg(s, fd, vec, vlen, flags);
	n = real.sendmmsg(fd, vec, vlen, flags);
	for (int i = 0; i < n; i++)
		sock_count_sent(s, vec[i].msg_len);
	return n;
}

SDP_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(out_fd);
	if (likely(!s))
		return real.sendfile(out_fd, in_fd, offset, count);
	if (sock_is_rdma(s))
		return rdma_io_sendfile(s, out_fd, in_fd, offset, count);
	return counted_out(s, real.sendfile(out_fd, in_fd, offset, count));
}

SDP_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(out_fd);
	if (likely(!s))
		return real.sendfile64(out_fd, in_fd, offset, count);
	if (sock_is_rdma(s))
		return rdma_io_sendfile(s, out_fd, in_fd, (off_t *)offset, count);
	return counted_out(s, real.sendfile64(out_fd, in_fd, offset, count));
}

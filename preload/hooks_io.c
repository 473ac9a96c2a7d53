/* Data hooks: read/write, the recv and send families, sendfile and the
 * _FORTIFY_SOURCE variants.  Untracked fds go straight to libc; a tracked
 * socket's call goes to its stream (preload/stream.h), kernel TCP or the
 * RDMA channel, in one dispatch.  A socket not on RDMA costs one table load,
 * one atomic read of its stream and an indirect call (and the byte count):
 * no lock, no extra syscall. */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/real.h"
#include "preload/init.h"
#include "preload/sock.h"
#include "preload/stream.h"

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

/* ---- receive side ---- */

SDP_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(read, fd, buf, len);
	return sock_stream(s)->read(fd, buf, len, s);
}

SDP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(readv, fd, iov, iovcnt);
	return sock_stream(s)->readv(fd, iov, iovcnt, s);
}

SDP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recv, fd, buf, len, flags);
	return sock_stream(s)->recv_buf(fd, buf, len, flags, s);
}

SDP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			    socklen_t *srclen)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recvfrom, fd, buf, len, flags, src, srclen);
	return sock_stream(s)->recvfrom(fd, buf, len, flags, src, srclen, s);
}

SDP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recvmsg, fd, msg, flags);
	return sock_stream(s)->recvmsg(fd, msg, flags, s);
}

SDP_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(recvmmsg, fd, vec, vlen, flags, timeout);
	return sock_stream(s)->recvmmsg(fd, vec, vlen, flags, timeout, s);
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
	return sock_stream(s)->write(fd, buf, len, s);
}

SDP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(writev, fd, iov, iovcnt);
	return sock_stream(s)->writev(fd, iov, iovcnt, s);
}

SDP_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(send, fd, buf, len, flags);
	return sock_stream(s)->send_buf(fd, buf, len, flags, s);
}

SDP_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dst, socklen_t dstlen)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(sendto, fd, buf, len, flags, dst, dstlen);
	return sock_stream(s)->sendto(fd, buf, len, flags, dst, dstlen, s);
}

SDP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(sendmsg, fd, msg, flags);
	return sock_stream(s)->sendmsg(fd, msg, flags, s);
}

SDP_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	struct sdp_sock *s = sock_of(fd);

	if (likely(!s))
		return LIBC(sendmmsg, fd, vec, vlen, flags);
	return sock_stream(s)->sendmmsg(fd, vec, vlen, flags, s);
}

SDP_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct sdp_sock *s = sock_of(out_fd);

	if (likely(!s))
		return LIBC(sendfile, out_fd, in_fd, offset, count);
	return sock_stream(s)->sendfile(out_fd, in_fd, offset, count, s);
}

SDP_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	struct sdp_sock *s = sock_of(out_fd);

	if (likely(!s))
		return LIBC(sendfile64, out_fd, in_fd, offset, count);
	return sock_stream(s)->sendfile64(out_fd, in_fd, offset, count, s);
}

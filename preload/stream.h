/* The transport seam: what a tracked socket's carrier does for the hooks.
 * Each carrier implements every op, with the libc call's shape and result
 * (-1 and errno on error): kernel TCP (preload/stream_tcp.c, the only
 * kernel-TCP data I/O and its byte counting) and the RDMA channel
 * (preload/stream_rdma.c).  A socket holds a pointer to its carrier's ops,
 * which sock_set_mode() swaps with the mode: FRESH, LISTEN and TCP use the
 * TCP stream, RDMA the channel's.  A hook on a socket dispatches once:
 * sock_stream(s)->op(fd, ..., s). */
#ifndef SDPSHIM_STREAM_H
#define SDPSHIM_STREAM_H

#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "preload/sock.h"

struct sdp_conn;

/* Every op takes the libc call's arguments first, in libc's order, and the
 * socket last: a hook hands them on in the registers they came in (only
 * recvfrom and sendto, with six, pass the socket on the stack). */
struct sock_stream_ops {
	/* The carrier's own steps, iovec form with recvmsg/sendmsg flags. */
	ssize_t (*recv)(int fd, const struct iovec *iov, int iovcnt, int flags, struct sdp_sock *s);
	ssize_t (*send)(int fd, const struct iovec *iov, int iovcnt, int flags, struct sdp_sock *s);

	/* The libc-shaped calls of the data hooks. */
	ssize_t (*read)(int fd, void *buf, size_t len, struct sdp_sock *s);
	ssize_t (*readv)(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s);
	ssize_t (*recv_buf)(int fd, void *buf, size_t len, int flags, struct sdp_sock *s);
	ssize_t (*recvfrom)(int fd, void *buf, size_t len, int flags, struct sockaddr *src,
			    socklen_t *srclen, struct sdp_sock *s);
	ssize_t (*recvmsg)(int fd, struct msghdr *msg, int flags, struct sdp_sock *s);
	int (*recvmmsg)(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout, struct sdp_sock *s);
	ssize_t (*write)(int fd, const void *buf, size_t len, struct sdp_sock *s);
	ssize_t (*writev)(int fd, const struct iovec *iov, int iovcnt, struct sdp_sock *s);
	ssize_t (*send_buf)(int fd, const void *buf, size_t len, int flags, struct sdp_sock *s);
	ssize_t (*sendto)(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dst, socklen_t dstlen, struct sdp_sock *s);
	ssize_t (*sendmsg)(int fd, const struct msghdr *msg, int flags, struct sdp_sock *s);
	int (*sendmmsg)(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct sdp_sock *s);
	ssize_t (*sendfile)(int out_fd, int in_fd, off_t *offset, size_t count, struct sdp_sock *s);
	ssize_t (*sendfile64)(int out_fd, int in_fd, off64_t *offset, size_t count,
			      struct sdp_sock *s);

	/* Control: shutdown(2), ioctl FIONREAD (SIOCINQ) and TIOCOUTQ
	 * (SIOCOUTQ) into the int at arg, getsockopt, and an option the kernel
	 * has just accepted (the carrier applies what it honours). */
	int (*shutdown)(int fd, int how, struct sdp_sock *s);
	int (*readable_bytes)(int fd, void *arg, struct sdp_sock *s);
	int (*unsent_bytes)(int fd, void *arg, struct sdp_sock *s);
	int (*getsockopt)(int fd, int level, int name, void *val, socklen_t *len,
			  struct sdp_sock *s);
	void (*option_set)(int fd, int level, int name, const void *val, socklen_t len,
			   struct sdp_sock *s);

	/* The channel whose indicators poll and select wait on, with a
	 * reference, or NULL when the kernel socket itself is waited on. */
	struct sdp_conn *(*channel_get)(struct sdp_sock *s);
};

/* The ops table of a carrier whose functions are named PREFIX_<op>: a
 * carrier that lacks one does not compile. */
#define SOCK_STREAM_OPS(prefix)                                                      \
	{                                                                            \
		.recv = prefix##_recv, .send = prefix##_send,                        \
		.read = prefix##_read, .readv = prefix##_readv,                      \
		.recv_buf = prefix##_recv_buf, .recvfrom = prefix##_recvfrom,        \
		.recvmsg = prefix##_recvmsg, .recvmmsg = prefix##_recvmmsg,          \
		.write = prefix##_write, .writev = prefix##_writev,                  \
		.send_buf = prefix##_send_buf, .sendto = prefix##_sendto,            \
		.sendmsg = prefix##_sendmsg, .sendmmsg = prefix##_sendmmsg,          \
		.sendfile = prefix##_sendfile, .sendfile64 = prefix##_sendfile64,    \
		.shutdown = prefix##_shutdown,                                       \
		.readable_bytes = prefix##_readable_bytes,                           \
		.unsent_bytes = prefix##_unsent_bytes,                               \
		.getsockopt = prefix##_getsockopt, .option_set = prefix##_option_set, \
		.channel_get = prefix##_channel_get,                                 \
	}

extern const struct sock_stream_ops sock_stream_tcp;
extern const struct sock_stream_ops sock_stream_rdma;

/* The socket's current carrier: one atomic read, no lock.  A carrier that
 * is left meanwhile still answers: the RDMA stream hands a call it can no
 * longer carry to the TCP stream. */
static inline const struct sock_stream_ops *sock_stream(const struct sdp_sock *s)
{
	return atomic_load_explicit(&s->stream, memory_order_acquire);
}

#endif

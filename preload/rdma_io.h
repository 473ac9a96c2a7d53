/* The data path of RDMA-backed sockets as the hooks see it: libc-shaped
 * calls (errno set, -1 on error) over the channel in core/. */
#ifndef SDPSHIM_RDMA_IO_H
#define SDPSHIM_RDMA_IO_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "preload/sock.h"

ssize_t rdma_io_recv(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t rdma_io_recv_buf(struct sdp_sock *s, int fd, void *buf, size_t len, int flags,
			 struct sockaddr *src, socklen_t *srclen);
ssize_t rdma_io_recvmsg(struct sdp_sock *s, int fd, struct msghdr *msg, int flags);
int rdma_io_recvmmsg(struct sdp_sock *s, int fd, struct mmsghdr *vec, unsigned int vlen,
		     int flags, struct timespec *timeout);

ssize_t rdma_io_send(struct sdp_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t rdma_io_send_buf(struct sdp_sock *s, int fd, const void *buf, size_t len, int flags);
ssize_t rdma_io_sendto(struct sdp_sock *s, int fd, const void *buf, size_t len, int flags,
		       const struct sockaddr *dst, socklen_t dstlen);
ssize_t rdma_io_sendmsg(struct sdp_sock *s, int fd, const struct msghdr *msg, int flags);
int rdma_io_sendmmsg(struct sdp_sock *s, int fd, struct mmsghdr *vec, unsigned int vlen,
		     int flags);
ssize_t rdma_io_sendfile(struct sdp_sock *s, int out_fd, int in_fd, off_t *offset, size_t count);

#endif

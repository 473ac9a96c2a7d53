/* Socket options and queue ioctls of RDMA-backed sockets. */
#ifndef SDPSHIM_CTL_H
#define SDPSHIM_CTL_H

#include <sys/socket.h>

#include "preload/sock.h"

/* Applies an option the channel honours (keepalive, nodelay, cork). */
void ctl_setsockopt(struct sdp_sock *s, int fd, int level, int name, const void *val, socklen_t len);
/* SO_ERROR and queue sizes come from the channel; the rest from the kernel. */
int ctl_getsockopt(struct sdp_sock *s, int fd, int level, int name, void *val, socklen_t *len);
/* FIONREAD/SIOCINQ and SIOCOUTQ from the channel's queues. */
int ctl_ioctl_queue(struct sdp_sock *s, int fd, unsigned long request, void *arg);

#endif

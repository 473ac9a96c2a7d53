/* What closing the last fd of a tracked socket does to its transport. */
#ifndef SDPSHIM_SOCK_CLOSE_H
#define SDPSHIM_SOCK_CLOSE_H

#include "preload/sock.h"

/* Called once, when the last fd naming s is about to be closed by the
 * kernel (fd is still open).  Kernel TCP needs nothing; an RDMA channel is
 * handed to its linger path; a listener drops its RDMA listener. */
void sock_close_transport(struct sdp_sock *s, int fd);

#endif

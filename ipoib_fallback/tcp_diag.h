/* Asks the kernel (sock_diag) whether a TCP connection has been accepted. */
#ifndef SDPSHIM_TCP_DIAG_H
#define SDPSHIM_TCP_DIAG_H

#include "core/wire.h"

enum tcp_accept_state {
	TCP_NOT_ACCEPTED,   /* still in the listen queue, or not (yet) there */
	TCP_ACCEPTED,       /* some process holds it: the socket has an inode */
	TCP_STATE_UNKNOWN,  /* sock_diag is unavailable: ask no more */
};

/* The state of the server's end of connection t (src = client, dst =
 * server, as in the Hello). */
enum tcp_accept_state tcp_diag_accept_state(const struct sdp_tuple *t);

#endif

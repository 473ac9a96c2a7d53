/* Asks the kernel (sock_diag) whether a TCP connection has been accepted. */
#ifndef SDPSHIM_TCP_DIAG_H
#define SDPSHIM_TCP_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"

enum tcp_accept_state {
	TCP_NOT_ACCEPTED,   /* still in the listen queue, or not (yet) there */
	TCP_ACCEPTED,       /* some process holds it: the socket has an inode */
	TCP_STATE_UNKNOWN,  /* sock_diag is unavailable: ask no more */
};

/* The state of the server's end of connection t (src = client, dst =
 * server, as in the Hello); when TCP_ACCEPTED, *inode (if not NULL) is its
 * socket's inode. */
enum tcp_accept_state tcp_diag_accept_state(const struct sdp_tuple *t, uint32_t *inode);

/* The verdict on one sock_diag reply of len bytes at buf (any alignment) to
 * the lookup tcp_diag_accept_state() sends, whose peer (client) port is
 * peer_port_be (network order), and with TCP_ACCEPTED the socket's inode
 * in *inode (if not NULL; never 0).  Reads only the first message, within
 * its nlmsg_len and len; no I/O (fuzzed: tests/fuzz/fuzz_tcp_diag.c). */
enum tcp_accept_state tcp_diag_parse_reply(const void *buf, size_t len, uint16_t peer_port_be,
					   uint32_t *inode);

/* Does this process hold the socket whose inode this is (an fd of its own
 * names it: /proc/thread-self/fd)?  False when that cannot be read. */
bool tcp_diag_socket_is_ours(uint32_t inode);

#endif

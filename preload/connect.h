/* Path choice at the moments a socket becomes a connection or a listener:
 * connect(), listen() and accept() of tracked sockets. */
#ifndef SDPSHIM_CONNECT_H
#define SDPSHIM_CONNECT_H

#include <sys/socket.h>

#include "preload/sock.h"

int sock_connect(struct sdp_sock *s, int fd, const struct sockaddr *addr, socklen_t len);
int sock_listen(struct sdp_sock *s, int fd, int backlog);
int sock_accept(struct sdp_sock *ls, int fd, struct sockaddr *addr, socklen_t *len, int flags);

#endif

/* Prototypes of glibc's _FORTIFY_SOURCE entry points that we interpose;
 * glibc declares them only inside fortified builds. */
#ifndef SDPSHIM_FORTIFY_H
#define SDPSHIM_FORTIFY_H

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *src, socklen_t *srclen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
		const sigset_t *sigmask, size_t fdslen);
void __chk_fail(void) __attribute__((noreturn));

#endif

/* stream_fortify: stream.c built with -O2 -D_FORTIFY_SOURCE=2 (PROG_CFLAGS_stream_fortify in
 * the Makefile), its reads and polls routed through glibc's __read_chk/__recv_chk/__poll_chk. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* stream.c reads into buffers whose size the compiler cannot see, so glibc
 * would call plain read() and poll().  These wrappers use buffers of known
 * size with a length the compiler cannot bound (it passes through a volatile),
 * which makes the fortified inlines call the _chk entry points: the ones
 * sdpshim must interpose as well. */
static ssize_t fortified_read(int fd, void *buf, size_t len);
static int fortified_poll(struct pollfd *fds, nfds_t nfds, int timeout);

#define read(fd, buf, len) fortified_read(fd, buf, len)
#define poll(fds, nfds, timeout) fortified_poll(fds, nfds, timeout)
#include "stream.c"
#undef read
#undef poll

/* Alternates read() and recv(), so both __read_chk and __recv_chk carry data. */
static __attribute__((noinline)) ssize_t fortified_read(int fd, void *buf, size_t len)
{
	static __thread uint8_t bounce[65536];
	static __thread unsigned calls;
	volatile size_t ask = len < sizeof(bounce) ? len : sizeof(bounce);
	ssize_t n;

	if (calls++ & 1)
		n = recv(fd, bounce, ask, 0);
	else
		n = read(fd, bounce, ask);
	if (n > 0)
		memcpy(buf, bounce, (size_t)n);
	return n;
}

static __attribute__((noinline)) int fortified_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct pollfd copy[8];
	volatile nfds_t count = nfds;
	int rc;

	if (nfds > sizeof(copy) / sizeof(copy[0])) {
		errno = EINVAL;
		return -1;
	}
	memcpy(copy, fds, nfds * sizeof(copy[0]));
	rc = poll(copy, count, timeout);
	memcpy(fds, copy, nfds * sizeof(copy[0]));
	return rc;
}

/* Hooks for socket setup and teardown: socket, bind, listen, accept(4),
 * connect, shutdown, close, the dup family and close_range. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "ipoib_fallback/path.h"
#include "preload/connect.h" /* sock_connect(), sock_accept(), sock_listen() */
#include "preload/init.h"
#include "preload/readiness.h" /* rdy_epoll_forget() */
#include "preload/sock.h"
#include "preload/stream.h"

static bool is_tcp_candidate(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & 0xf) == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
}

SDP_EXPORT int socket(int domain, int type, int protocol)
{
	int fd, saved;

	sdp_ensure_init();
	fd = real.socket(domain, type, protocol);
	if (fd < 0 || sdp_in_lib || !is_tcp_candidate(domain, type, protocol))
		return fd;
	saved = errno;
	sock_track(fd, domain, (type & SOCK_NONBLOCK) != 0);
	errno = saved;
	return fd;
}

SDP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib)
		return real.connect(fd, addr, len);
	return sock_connect(s, fd, addr, len);
}

SDP_EXPORT int listen(int fd, int backlog)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib)
		return real.listen(fd, backlog);
	return sock_listen(s, fd, backlog);
}

SDP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib)
		return real.accept4(fd, addr, len, flags);
	return sock_accept(s, fd, addr, len, flags);
}

SDP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib)
		return real.accept(fd, addr, len);
	return sock_accept(s, fd, addr, len, 0);
}

SDP_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	sdp_ensure_init();
	return real.bind(fd, addr, len);
}

SDP_EXPORT int shutdown(int fd, int how)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib)
		return real.shutdown(fd, how);
	return sock_stream(s)->shutdown(fd, how, s);
}

/* Forgets whatever the table says about fd, just before the kernel closes it. */
static void forget_fd(int fd, enum fdt_kind kind)
{
	int saved = errno;

	if (kind == FDT_SOCK)
		sock_drop_fd(fd);
	else if (kind == FDT_EPOLL)
		rdy_epoll_forget(fd);
	else if (kind == FDT_HIDDEN)
		fdt_clear(fd);
	errno = saved;
}

/* The app must not close or replace an fd the library owns. */
static bool hidden_from_app(int fd)
{
	return fdt_kind_of(fd) == FDT_HIDDEN && !sdp_in_lib;
}

SDP_EXPORT int close(int fd)
{
	enum fdt_kind kind;

	sdp_ensure_init();
	kind = fdt_kind_of(fd);
	if (likely(kind == FDT_NONE))
		return real.close(fd);
	if (hidden_from_app(fd)) {
		errno = EBADF; /* as if it were not open: it is not the app's */
		return -1;
	}
	forget_fd(fd, kind);
	return real.close(fd);
}

/* After a successful dup into new_fd, new_fd names what old_fd names. */
static void track_dup(int old_fd, int new_fd)
{
	struct sdp_sock *s = sock_of(old_fd);
	int saved = errno;

	rdy_epoll_watched(old_fd); /* a set under two numbers: never deferred to */
	rdy_epoll_dup(old_fd, new_fd);
	if (s)
		sock_add_fd(s, new_fd);
	errno = saved;
}

SDP_EXPORT int dup(int old_fd)
{
	int new_fd;

	sdp_ensure_init();
	new_fd = real.dup(old_fd);
	if (new_fd >= 0 && fdt_kind_of(old_fd) != FDT_NONE && !sdp_in_lib)
		track_dup(old_fd, new_fd);
	return new_fd;
}

static int dup_onto(int old_fd, int new_fd, int flags, bool is_dup3)
{
	enum fdt_kind target = fdt_kind_of(new_fd);
	int rc;

	if (hidden_from_app(new_fd)) {
		sdp_warn("dup2 onto fd %d refused: sdpshim uses it internally", new_fd);
		errno = EBUSY;
		return -1;
	}
	if (old_fd == new_fd)
		return is_dup3 ? real.dup3(old_fd, new_fd, flags) : real.dup2(old_fd, new_fd);
	if (target != FDT_NONE && real.fcntl(old_fd, F_GETFD) >= 0)
		forget_fd(new_fd, target); /* dup2 closes new_fd only when old_fd is valid */
	rc = is_dup3 ? real.dup3(old_fd, new_fd, flags) : real.dup2(old_fd, new_fd);
	if (rc >= 0 && fdt_kind_of(old_fd) != FDT_NONE)
		track_dup(old_fd, rc);
	return rc;
}

SDP_EXPORT int dup2(int old_fd, int new_fd)
{
	sdp_ensure_init();
	if (sdp_in_lib)
		return real.dup2(old_fd, new_fd);
	return dup_onto(old_fd, new_fd, 0, false);
}

SDP_EXPORT int dup3(int old_fd, int new_fd, int flags)
{
	sdp_ensure_init();
	if (sdp_in_lib)
		return real.dup3(old_fd, new_fd, flags);
	return dup_onto(old_fd, new_fd, flags, true);
}

/* Closes [first, last] except the library's hidden fds, in sub-ranges. */
SDP_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	unsigned int stop, fd, run_start;

	sdp_ensure_init();
	if (!real.close_range) {
		errno = ENOSYS;
		return -1;
	}
	if (sdp_in_lib || (flags & CLOSE_RANGE_CLOEXEC) || first > last)
		return real.close_range(first, last, flags);
	stop = last;
	if (stop >= fdt_root.max_fds)
		stop = (unsigned int)fdt_root.max_fds - 1;
	run_start = first;
	for (fd = first; fd <= stop && fd >= first; fd++) {
		enum fdt_kind kind = fdt_kind_of((int)fd);

		if (kind == FDT_NONE)
			continue;
		if (kind != FDT_HIDDEN) {
			forget_fd((int)fd, kind);
			continue;
		}
		if (fd > run_start && real.close_range(run_start, fd - 1, flags) < 0)
			return -1;
		run_start = fd + 1;
	}
	if (run_start > last || run_start < first)
		return 0;
	return real.close_range(run_start, last, flags);
}

/* Control hooks: fcntl, ioctl, socket options and names.  They keep the
 * socket's tracked flags (O_NONBLOCK, timeouts, linger) in step with the
 * kernel, which always receives the call too; the socket's stream answers
 * the queue sizes and getsockopt, and hears of the options set. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/real.h"
#include "preload/init.h"
#include "preload/readiness.h"
#include "preload/sock.h"
#include "preload/stream.h"

static int timeval_to_ms(const void *val, socklen_t len)
{
	const struct timeval *tv = val;
	long long ms;

	if (len < sizeof(*tv))
		return -1;
	ms = (long long)tv->tv_sec * 1000 + tv->tv_usec / 1000;
	if (ms == 0 && tv->tv_usec > 0)
		ms = 1;
	return ms <= 0 ? -1 : (ms > 0x7fffffff ? 0x7fffffff : (int)ms);
}

/* Mirrors the options the RDMA path must honour; the kernel already has them. */
static void note_sockopt(struct sdp_sock *s, int level, int name, const void *val, socklen_t len)
{
	if (level != SOL_SOCKET || !val)
		return;
	if (name == SO_RCVTIMEO)
		s->rcvtimeo_ms = timeval_to_ms(val, len);
	else if (name == SO_SNDTIMEO)
		s->sndtimeo_ms = timeval_to_ms(val, len);
	else if (name == SO_LINGER && len >= sizeof(struct linger))
		s->linger = *(const struct linger *)val;
}

SDP_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct sdp_sock *s;
	int rc;

	sdp_ensure_init();
	rc = real.setsockopt(fd, level, name, val, len);
	s = sock_of(fd);
	if (rc == 0 && s && !sdp_in_lib) {
		note_sockopt(s, level, name, val, len);
		sock_stream(s)->option_set(fd, level, name, val, len, s);
	}
	return rc;
}

SDP_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (s && !sdp_in_lib)
		return sock_stream(s)->getsockopt(fd, level, name, val, len, s);
	return real.getsockopt(fd, level, name, val, len);
}

SDP_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	sdp_ensure_init();
	return real.getsockname(fd, addr, len);
}

SDP_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	sdp_ensure_init();
	return real.getpeername(fd, addr, len);
}

/* fcntl commands whose argument is a pointer (the rest take an int). */
static bool fcntl_arg_is_pointer(int cmd)
{
	switch (cmd) {
	case F_GETLK: case F_SETLK: case F_SETLKW:
	case F_OFD_GETLK: case F_OFD_SETLK: case F_OFD_SETLKW:
	case F_GETOWN_EX: case F_SETOWN_EX:
		return true;
	default:
		return false;
	}
}

static int fcntl_common(int (*real_fcntl)(int, int, ...), int fd, int cmd, void *ptr, long arg)
{
	struct sdp_sock *s;
	int rc, saved;

	if (fcntl_arg_is_pointer(cmd))
		return real_fcntl(fd, cmd, ptr);
	rc = real_fcntl(fd, cmd, arg);
	if (rc < 0 || sdp_in_lib)
		return rc;
	saved = errno;
	s = sock_of(fd);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		rdy_epoll_watched(fd); /* a set under two numbers (readiness_epoll.c) */
		rdy_epoll_dup(fd, rc);
	}
	if (s && cmd == F_SETFL)
		s->nonblock = (arg & O_NONBLOCK) != 0;
	else if (s && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		sock_add_fd(s, rc);
	errno = saved;
	return rc;
}

SDP_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *ptr;

	sdp_ensure_init();
	va_start(ap, cmd);
	ptr = va_arg(ap, void *); /* as glibc does: one word, int or pointer */
	va_end(ap);
	return fcntl_common(real.fcntl, fd, cmd, ptr, (long)ptr);
}

SDP_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *ptr;

	sdp_ensure_init();
	va_start(ap, cmd);
	ptr = va_arg(ap, void *);
	va_end(ap);
	return fcntl_common(real.fcntl64 ? real.fcntl64 : real.fcntl, fd, cmd, ptr, (long)ptr);
}

SDP_EXPORT int ioctl(int fd, unsigned long request, ...)
{
	struct sdp_sock *s;
	va_list ap;
	void *arg;
	int rc;

	sdp_ensure_init();
	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	s = sock_of(fd);
	if (likely(!s) || sdp_in_lib)
		return real.ioctl(fd, request, arg);
	if (request == FIONREAD)
		return sock_stream(s)->readable_bytes(fd, arg, s);
	if (request == TIOCOUTQ)
		return sock_stream(s)->unsent_bytes(fd, arg, s);
	rc = real.ioctl(fd, request, arg);
	if (rc == 0 && request == FIONBIO && arg)
		s->nonblock = *(const int *)arg != 0;
	return rc;
}

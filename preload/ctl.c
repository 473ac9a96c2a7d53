/* Socket options and queue ioctls of RDMA-backed sockets: the kernel
 * socket keeps every option; the channel honours keepalive, and answers
 * SO_ERROR and the queue sizes from its own state. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/real.h"
#include "core/conn.h"
#include "preload/ctl.h"
#include "preload/sock_rdma.h"

static int int_opt(int fd, int level, int name)
{
	int v = 0;
	socklen_t len = sizeof(v);

	real.getsockopt(fd, level, name, &v, &len);
	return v;
}

void ctl_setsockopt(struct sdp_sock *s, int fd, int level, int name, const void *val,
		    socklen_t len)
{
	struct sdp_conn *c;

	(void)val;
	(void)len;
	if (!((level == SOL_SOCKET && name == SO_KEEPALIVE) ||
	      (level == IPPROTO_TCP &&
	       (name == TCP_KEEPIDLE || name == TCP_KEEPINTVL || name == TCP_KEEPCNT))))
		return;
	c = sock_conn_get(s);
	if (!c)
		return;
	/* The kernel already validated and stored them: read back its view. */
	conn_set_keepalive(c, int_opt(fd, SOL_SOCKET, SO_KEEPALIVE) != 0,
			   (unsigned)int_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE),
			   (unsigned)int_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL),
			   (unsigned)int_opt(fd, IPPROTO_TCP, TCP_KEEPCNT));
	conn_put(c);
}

int ctl_getsockopt(struct sdp_sock *s, int fd, int level, int name, void *val, socklen_t *len)
{
	struct sdp_conn *c;
	int err;

	if (level != SOL_SOCKET || name != SO_ERROR || !val || !len || *len < sizeof(int))
		return real.getsockopt(fd, level, name, val, len);
	c = sock_conn_get(s);
	if (!c)
		return real.getsockopt(fd, level, name, val, len);
	err = conn_take_error(c);
	conn_put(c);
	if (err == CONN_USE_TCP) /* the stream is on TCP: its kernel socket's */
		return real.getsockopt(fd, level, name, val, len);
	*(int *)val = err;
	*len = sizeof(int);
	return 0;
}

int ctl_ioctl_queue(struct sdp_sock *s, int fd, unsigned long request, void *arg)
{
	struct sdp_conn *c = sock_conn_get(s);
	uint64_t n;

	if (!c)
		return real.ioctl(fd, request, arg);
	n = request == FIONREAD ? conn_readable_bytes(c) : conn_unsent_bytes(c);
	conn_put(c);
	if (!arg) {
		errno = EFAULT;
		return -1;
	}
	*(int *)arg = n > 0x7fffffff ? 0x7fffffff : (int)n;
	return 0;
}

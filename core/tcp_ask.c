/* What a stream's kernel TCP socket says right now, asked without waiting:
 * its poll bits, its unread and unsent bytes, and who holds its pending
 * error.  The carriers that move a stream over TCP (held, switch, drain)
 * answer from these. */
#include <poll.h>
#include <sys/ioctl.h>

#include "base/real.h"
#include "core/conn_internal.h"

unsigned tcp_poll_now(const struct sdp_conn *c, short events)
{
	struct pollfd p = { .fd = c->tcp_fd, .events = events };

	if (c->tcp_fd < 0 || real.poll(&p, 1, 0) < 0)
		return 0;
	return (unsigned)p.revents;
}

uint64_t tcp_unread_bytes(const struct sdp_conn *c)
{
	int kernel = 0;

	if (c->tcp_fd >= 0)
		(void)real.ioctl(c->tcp_fd, FIONREAD, &kernel);
	return kernel > 0 ? (uint64_t)kernel : 0;
}

uint64_t tcp_unsent_bytes(const struct sdp_conn *c)
{
	int kernel = 0;

	if (c->tcp_fd >= 0)
		(void)real.ioctl(c->tcp_fd, TIOCOUTQ, &kernel);
	return kernel > 0 ? (uint64_t)kernel : 0;
}

/* The kernel reports a socket's error once: to our own peek, which kept
 * it (tcp_taken_err), or to whoever asks SO_ERROR first.  So the app gets
 * the kept one here, once, or CONN_USE_TCP: ask the kernel on the app's own
 * fd (the same socket; ours may be closed by a teardown meanwhile). */
int tcp_take_error(struct sdp_conn *c)
{
	int err = c->tcp_taken_err;

	c->tcp_taken_err = 0;
	return err ? err : CONN_USE_TCP;
}

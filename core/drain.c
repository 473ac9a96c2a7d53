/* DRAINING's carrier: the recv and send steps, readiness, shutdown, SO_ERROR and
 * FIONREAD of a stream whose app bytes, written before its channel opened,
 * move into TCP first (core/tcp_watch.c drains them). */
#include <poll.h>
#include <sys/socket.h>

#include "base/real.h"
#include "core/conn_internal.h"

/* DRAINING: the bytes the app wrote before the channel opened go into TCP
 * first (on_drain_ready).  Reads come from TCP already; writes wait for
 * the drain, then go to TCP (FALLBACK, whose readiness wakes everyone).
 * So readiness is the kernel socket's for reads and errors, and writable
 * only once the app shut writing (a send says EPIPE): a poller or a
 * blocking send sleeps until the drain ends (or the peer writes) rather
 * than spin on an indicator that only says "look again", and a poller for
 * reads sees the peer's bytes meanwhile. */
static ssize_t drain_recv_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
			       size_t done, size_t total, int flags, bool *again)
{
	*again = false;
	return done ? (ssize_t)done : CONN_USE_TCP;
}

static ssize_t drain_send_step(struct sdp_conn *c, const struct iovec *iov, int iovcnt,
			       size_t done, size_t total, bool nonblock, int flags, bool *again)
{
	*again = false;
	if (close_app_shut_writing(c))
		return done ? (ssize_t)done : -EPIPE;
	*again = done < total; /* after the drain, on TCP */
	return (ssize_t)done;
}

#define DRAIN_READ_BITS (POLLIN | POLLRDNORM | POLLRDHUP | POLLHUP | POLLERR)

static unsigned drain_poll_mask(struct sdp_conn *c)
{
	unsigned tcp = tcp_poll_now(c, POLLIN | POLLRDHUP);
	unsigned mask = close_app_shut_writing(c) ? POLLOUT | POLLWRNORM : 0; /* a send says EPIPE */

	return mask | (tcp & DRAIN_READ_BITS) | ((tcp & POLLIN) ? POLLRDNORM : 0);
}

static bool drain_readable(struct sdp_conn *c)
{
	return drain_poll_mask(c) & DRAIN_READ_BITS;
}

static bool drain_writable(struct sdp_conn *c)
{
	return close_app_shut_writing(c);
}

static void drain_readiness(struct sdp_conn *c, bool *readable, bool *writable)
{
	*readable = drain_readable(c);
	*writable = drain_writable(c);
}

static int drain_shutdown(struct sdp_conn *c, int how)
{
	if ((how == SHUT_RD || how == SHUT_RDWR) && c->tcp_fd >= 0)
		real.shutdown(c->tcp_fd, SHUT_RD); /* reads are TCP's already */
	if (how == SHUT_WR || how == SHUT_RDWR)
		close_ev_app_shutdown_wr(c); /* TCP's, once the drained bytes are in */
	return 0;
}

static uint64_t drain_readable_bytes(struct sdp_conn *c)
{
	return tcp_unread_bytes(c);
}

/* Reads are TCP's, and so is the error poll() reports. */
static int drain_take_error(struct sdp_conn *c)
{
	int err = channel_take_error(c);

	return err ? err : tcp_take_error(c);
}

const struct conn_carrier drain_carrier = CONN_CARRIER(drain);

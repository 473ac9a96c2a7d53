/* Readiness of a channel: the two level-triggered eventfds that poll,
 * select and epoll wait on, what they stand for on the open channel (the
 * readiness half of channel_carrier), and callbacks to the owning socket. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "base/real.h"
#include "core/conn_internal.h"
#include "core/zcopy.h"

void conn_lock(struct sdp_conn *c)
{
	pthread_mutex_lock(&c->lock);
}

void conn_unlock(struct sdp_conn *c)
{
	uint32_t events = c->owner_events;
	struct conn_event_info info = { .reason = c->fail_reason };
	void *owner = c->owner;
	const struct conn_owner_ops *ops = c->owner_ops;

	c->owner_events = 0;
	if (events && owner && ops) {
		conn_get(c);
		ops->hold(owner);
	}
	pthread_mutex_unlock(&c->lock);
	if (!events || !owner || !ops)
		return;
	for (int ev = CONN_EV_RDMA_READY; ev <= CONN_EV_STATE; ev++) {
		if (!(events & (1u << ev)))
			continue;
		info.ev = (enum conn_event)ev;
		ops->event(owner, c, &info);
	}
	ops->release(owner);
	conn_put(c);
}

void conn_signal_owner(struct sdp_conn *c, enum conn_event ev)
{
	c->owner_events |= 1u << ev;
}

/* Our side sends no more: the app shut writing, or the stream was reset. */
static bool tx_shut(const struct sdp_conn *c)
{
	return close_app_shut_writing(c) || c->close_state == CLOSE_ABORTED;
}

/* States in which pollers must wake and look again (the socket may now
 * be on TCP, or dead). */
static bool phase_wakes_everyone(enum conn_phase phase)
{
	switch (phase) {
	case CONN_DRAINING:
	case CONN_FALLBACK:
	case CONN_DEAD:
		return true;
	case CONN_SWITCHING: /* precise: see switch_carrier's poll mask */
	case CONN_HELD:      /* and the held carrier's */
	case CONN_CLIMB_HALF:
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING:
	case CONN_AWAIT_ATTACH:
	case CONN_PENDING:
	case CONN_ATTACHING:
	case CONN_OPEN:
		return false;
	}
	return true;
}

bool conn_readable_locked(const struct sdp_conn *c)
{
	return c->carrier->readable((struct sdp_conn *)c);
}

bool channel_readable(struct sdp_conn *c)
{
	/* A waiting recv also wakes for a SrcAvail it can READ directly. */
	bool direct_read = c->rx_waiters && !c->rd.active && zc_head_source(c);
	/* And once the channel it found still binding has opened (conn_io.c). */
	bool opened_for_waiter = c->rx_wants_open && c->phase == CONN_OPEN;

	return c->rx_bytes_ready > 0 || c->rx_eof || c->hard_error || c->error || direct_read ||
	       opened_for_waiter ||
	       (c->sink.active && c->sink.answered) || phase_wakes_everyone(c->phase);
}

static bool phase_takes_writes(enum conn_phase phase)
{
	return phase == CONN_AWAIT_ATTACH || phase == CONN_ATTACHING || phase == CONN_OPEN ||
	       phase == CONN_CLIMB_HALF;
}

bool conn_writable_locked(const struct sdp_conn *c)
{
	return c->carrier->writable((struct sdp_conn *)c);
}

bool channel_writable(struct sdp_conn *c)
{
	if (c->hard_error || c->error || phase_wakes_everyone(c->phase) || tx_shut(c))
		return true;
	if (c->src.active)
		return c->src.answered; /* the sender waits for RdmaRdCompl */
	if (c->zc_writer_waits)
		return phase_takes_writes(c->phase) && zc_send_ready(c);
	return phase_takes_writes(c->phase) && c->tx_slots && tx_free_space(c) > 0 &&
	       !c->write_active;
}

static __thread unsigned indicators_set; /* by this thread: conn_indicators_set_by_thread */

unsigned conn_indicators_set_by_thread(void)
{
	return indicators_set;
}

/* The thread's deferral window (conn_defer_open): the set it answers for,
 * and the channels whose indicator it did not write. */
#define DEFER_MAX 64
static __thread const void *defer_set;
static __thread struct deferral {
	struct sdp_conn *conn;
	bool readable; /* which indicator: the readable one, or the writable one */
} deferred[DEFER_MAX];
static __thread unsigned deferred_count, deferred_total;

unsigned conn_indicators_deferred_by_thread(void)
{
	return deferred_total;
}

/* May this thread skip the eventfd write of c's indicator?  Only for the
 * set it answers readiness for, when that set alone watches c and no
 * thread is asleep on c's eventfds (a blocked recv or send, a poll). */
static bool may_defer(const struct sdp_conn *c)
{
	return defer_set && c->watch_set == defer_set && c->kernel_sleepers == 0 &&
	       deferred_count < DEFER_MAX;
}

const char conn_unwatched_tag;
static _Atomic bool forked_with_channels; /* a child may wait on our eventfds */

void conn_forked_with_channels(void)
{
	atomic_store(&forked_with_channels, true);
}

/* Nobody would read the eventfd: no set watches c, no thread sleeps on
 * it, and no other process holds it.  The write is owed, and made when
 * one of these changes (conn_set_watch, conn_sleeper_add_locked). */
static bool unwatched(const struct sdp_conn *c)
{
	return c->watch_set == CONN_UNWATCHED && c->kernel_sleepers == 0 &&
	       !atomic_load_explicit(&forked_with_channels, memory_order_relaxed);
}

static void defer(struct sdp_conn *c, bool rd)
{
	bool *owed = rd ? &c->rd_owed : &c->wr_owed;

	deferred_total++;
	*owed = true;
	conn_get(c);
	deferred[deferred_count++] = (struct deferral){ c, rd };
}

static void indicator_write(int fd, bool *is_set)
{
	uint64_t one = 1;

	indicators_set++;
	(void)!real.write(fd, &one, sizeof(one));
	*is_set = true;
}

/* An owed indicator counts as set: written later by a thread with no
 * window, it would be an edge that no new data made. */
static void indicator_set(struct sdp_conn *c, bool rd, bool force_edge)
{
	bool *is_set = rd ? &c->rd_set : &c->wr_set, *owed = rd ? &c->rd_owed : &c->wr_owed;

	if ((*is_set || *owed) && !force_edge)
		return;
	if (!*is_set && may_defer(c)) {
		defer(c, rd);
		return;
	}
	if (!*is_set && unwatched(c)) {
		*owed = true;
		return;
	}
	*owed = false;
	indicator_write(rd ? c->rd_fd : c->wr_fd, is_set);
}

static void indicator_clear(struct sdp_conn *c, bool rd)
{
	bool *is_set = rd ? &c->rd_set : &c->wr_set;
	uint64_t v;

	*(rd ? &c->rd_owed : &c->wr_owed) = false;
	if (!*is_set)
		return;
	(void)!real.read(rd ? c->rd_fd : c->wr_fd, &v, sizeof(v));
	*is_set = false;
}

void conn_defer_open(const void *set)
{
	defer_set = set;
}

void conn_defer_flush(conn_told_fn told, void *arg)
{
	unsigned n = deferred_count;

	deferred_count = 0;
	for (unsigned i = 0; i < n; i++) {
		told(deferred[i].conn, deferred[i].readable, arg);
		conn_put(deferred[i].conn);
	}
}

void conn_defer_close(conn_told_fn told, void *arg)
{
	conn_defer_flush(told, arg);
	defer_set = NULL;
}

static void readiness(struct sdp_conn *c, bool *readable, bool *writable);

/* c locked: the writes a deferral skipped, for what is still true. */
static void pay_owed(struct sdp_conn *c)
{
	bool readable, writable, rd = c->rd_owed, wr = c->wr_owed;

	if (!rd && !wr)
		return;
	c->rd_owed = c->wr_owed = false;
	readiness(c, &readable, &writable);
	if (rd && readable && !c->rd_set)
		indicator_write(c->rd_fd, &c->rd_set);
	if (wr && writable && !c->wr_set)
		indicator_write(c->wr_fd, &c->wr_set);
}

/* These three are called under the owner's locks (its socket's, its
 * set's): their unlock tells the owner nothing (no owner event is raised
 * here; one left pending is told by the next conn_unlock). */
void conn_pay_deferred(struct sdp_conn *c)
{
	pthread_mutex_lock(&c->lock);
	pay_owed(c);
	pthread_mutex_unlock(&c->lock);
}

void conn_renew_readable(struct sdp_conn *c)
{
	bool readable, writable;

	pthread_mutex_lock(&c->lock);
	pay_owed(c);
	readiness(c, &readable, &writable);
	if (readable)
		indicator_write(c->rd_fd, &c->rd_set);
	pthread_mutex_unlock(&c->lock);
}

void conn_set_watch(struct sdp_conn *c, const void *set, void *cookie)
{
	pthread_mutex_lock(&c->lock);
	if (c->watch_set != set)
		pay_owed(c); /* the new watchers (or none) read the eventfds */
	c->watch_set = set;
	c->watch_cookie = set ? cookie : NULL;
	pthread_mutex_unlock(&c->lock);
}

void *conn_watch_cookie(struct sdp_conn *c, const void *set)
{
	void *cookie;

	pthread_mutex_lock(&c->lock);
	cookie = c->watch_set == set ? c->watch_cookie : NULL;
	pthread_mutex_unlock(&c->lock);
	return cookie;
}

bool conn_defer_pending(void)
{
	return deferred_count > 0;
}

void conn_sleeper_add_locked(struct sdp_conn *c)
{
	c->kernel_sleepers++;
	pay_owed(c); /* the sleeper waits on the eventfds */
}

void conn_sleeper_drop_locked(struct sdp_conn *c)
{
	c->kernel_sleepers--;
}

unsigned conn_sleep_begin(struct sdp_conn *c)
{
	unsigned mask;

	conn_lock(c);
	conn_sleeper_add_locked(c);
	mask = c->carrier->poll_mask(c);
	conn_unlock(c);
	return mask;
}

void conn_sleep_end(struct sdp_conn *c)
{
	conn_lock(c);
	conn_sleeper_drop_locked(c);
	conn_unlock(c);
}

void channel_readiness(struct sdp_conn *c, bool *readable, bool *writable)
{
	*readable = channel_readable(c);
	*writable = channel_writable(c);
}

/* Both directions in one pass: a switching channel asks its kernel socket once. */
static void readiness(struct sdp_conn *c, bool *readable, bool *writable)
{
	c->carrier->readiness(c, readable, writable);
}

void conn_update_readiness(struct sdp_conn *c, bool new_data)
{
	bool readable, writable;

	readiness(c, &readable, &writable);
	if (readable)
		indicator_set(c, true, new_data);
	if (writable) {
		/* A send that left the socket unwritable may have left the
		 * indicator set (stale): the way back to writable must be a new
		 * edge, or an edge-triggered app never hears of it. */
		indicator_set(c, false, c->wr_blocked);
		c->wr_blocked = false;
	}
}

/* After a recv took bytes: an indicator left set over an emptied stream
 * would wake the next wait for nothing (a wake-up, a look, then the clear). */
void conn_settle_readable(struct sdp_conn *c)
{
	bool settles = c->phase == CONN_OPEN || c->phase == CONN_HELD || c->phase == CONN_CLIMB_HALF;

	if ((c->rd_set || c->rd_owed) && settles && !conn_readable_locked(c))
		indicator_clear(c, true);
}

void conn_wake_readers(struct sdp_conn *c)
{
	if (c->rx_waiters)
		indicator_write(c->rd_fd, &c->rd_set); /* for a sleeper: never deferred */
}

void conn_prepare_wait(struct sdp_conn *c)
{
	bool readable, writable;

	conn_lock(c);
	readiness(c, &readable, &writable);
	if (!readable)
		indicator_clear(c, true);
	if (!writable)
		indicator_clear(c, false);
	conn_unlock(c);
}

int conn_readable_eventfd(const struct sdp_conn *c)
{
	return c->rd_fd;
}

int conn_writable_eventfd(const struct sdp_conn *c)
{
	return c->wr_fd;
}

unsigned conn_poll_mask(struct sdp_conn *c)
{
	unsigned mask;

	conn_lock(c);
	mask = c->carrier->poll_mask(c);
	conn_unlock(c);
	return mask;
}

unsigned channel_poll_mask(struct sdp_conn *c)
{
	unsigned mask = 0;

	if (c->rx_bytes_ready > 0 || c->rx_eof || c->hard_error)
		mask |= POLLIN | POLLRDNORM;
	if (c->rx_eof)
		mask |= POLLRDHUP;
	if (c->hard_error || c->error)
		mask |= POLLERR;
	if (c->hard_error || (c->rx_eof && tx_shut(c)))
		mask |= POLLHUP;
	if (channel_writable(c) && !phase_wakes_everyone(c->phase))
		mask |= POLLOUT | POLLWRNORM;
	return mask;
}

/* Who a link's completion wakes.  An app thread asleep in epoll_wait on a
 * set that holds the devices' links' completion channels takes the wake-up
 * and the completions itself (preload/readiness_epoll.c); the progress
 * thread, whose watch is last in each channel's queue and exclusive, takes
 * them only when no such thread sleeps.  A slow sweep bounds to a second
 * what no event announces: a wake-up that an app thread took and never
 * handled (a cancelled thread, a forked child asleep on a set it shares
 * with its parent), and a message of a peer that said it asks for events
 * (SOLICITED) and does not. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn.h"
#include "core/conn_internal.h"
#include "core/cq.h"
#include "core/dev.h"
#include "core/link.h"
#include "core/progress.h"

#define APP_WAKE_SWEEP_MS 1000u
#define APP_WAKE_MAX_DEVS 16

static _Atomic int app_sets; /* app epoll sets holding the channels */
static _Atomic bool sweeping;
static struct progress_timer sweep;

unsigned conn_channels_generation(void)
{
	return dev_generation();
}

int conn_channel_fds(int *fds, int max)
{
	struct sdp_dev *devs[APP_WAKE_MAX_DEVS];
	int n = dev_snapshot(devs, max < APP_WAKE_MAX_DEVS ? max : APP_WAKE_MAX_DEVS);

	for (int i = 0; i < n; i++)
		fds[i] = devs[i]->link_cc->fd;
	return n;
}

/* Channels went into a set (new_set: its first): the progress thread's
 * watch goes last again, and the sweep runs. */
static void channels_watched(bool new_set)
{
	dev_progress_watch_last();
	if (new_set)
		atomic_fetch_add(&app_sets, 1);
	app_wake_sweep_start();
}

bool conn_channels_add(int epfd, uint64_t tag, int max, bool first)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, .data.u64 = tag };
	int fds[APP_WAKE_MAX_DEVS], n = conn_channel_fds(fds, max), added = 0;

	for (int i = 0; i < n; i++)
		added += real.epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev) == 0;
	if (!added)
		return false;
	channels_watched(first);
	return true;
}

int conn_take_completions(void)
{
	struct sdp_dev *devs[APP_WAKE_MAX_DEVS];
	int n = dev_snapshot(devs, APP_WAKE_MAX_DEVS), taken = 0, cancel_state;

	/* An event read is handled, even by a thread being cancelled. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	for (int i = 0; i < n; i++)
		taken += cq_take_link_events(devs[i]);
	pthread_setcancelstate(cancel_state, NULL);
	return taken;
}

/* Set while a thread woken in a blocked call takes completions in: it
 * goes back to sleep in a hooked call, which makes the arm (link.c). */
static __thread bool taker_sleeps_again;
/* Such take-ins so far, and the count at the lease timer's last look: a
 * count that moved means the takers are still at it (no clock is read). */
static _Atomic unsigned woken_takes;
static _Atomic unsigned woken_takes_seen;

int conn_take_completions_then_sleep(void)
{
	int taken;

	/* Counted first: the arm this take-in puts off snapshots the count. */
	atomic_fetch_add_explicit(&woken_takes, 1, memory_order_relaxed);
	taker_sleeps_again = true;
	taken = conn_take_completions();
	taker_sleeps_again = false;
	return taken;
}

bool app_wake_taker_sleeps_again(void)
{
	return taker_sleeps_again;
}

unsigned conn_spin_us(void)
{
	return sdp_tun.spin_us;
}

void conn_poll_links(void)
{
	link_poll_all();
}

static bool sweep_wanted(void)
{
	return atomic_load(&app_sets) > 0 || link_any();
}

static void sweep_fired(void *arg)
{
	(void)arg;
	if (conn_take_completions() > 0)
		sdp_debug("completion sweep: took in events no thread had");
	link_sweep_all();
	if (sweep_wanted())
		progress_timer_arm(&sweep, progress_now_ms() + APP_WAKE_SWEEP_MS);
	else
		atomic_store(&sweeping, false);
}

void app_wake_sweep_start(void)
{
	if (atomic_exchange(&sweeping, true))
		return;
	sweep.fn = sweep_fired;
	progress_timer_arm(&sweep, progress_now_ms() + APP_WAKE_SWEEP_MS);
}


void conn_channels_unwatched(void)
{
	atomic_fetch_sub(&app_sets, 1);
}

/* Busy-poll and the CQ's arm.  While an app thread spins, or loops on
 * non-blocking calls that take a link's CQ in, an event leaves the link's
 * CQ unarmed (link.c): the next completions raise no event, and so wake no
 * other thread.  The arm is owed, and made by whichever comes first: a
 * thread about to sleep on readiness, or this timer, once no thread has
 * polled for a lease (the progress thread then hears of the link's
 * messages again, for an app that went away). */
#define ARM_LEASE_MS 10u
/* While the polling goes on, the timer looks again after twice its last
 * wait, up to this: a spinning app costs the progress thread a wake-up
 * every 80 ms, not every 10; so does one whose threads, woken in blocked
 * calls, take completions in and leave the arm to their next sleep.  An
 * app that stops polling without sleeping in a hooked call has its arm
 * made within ARM_LEASE_MAX_MS + ARM_LEASE_MS. */
#define ARM_LEASE_MAX_MS 80u

static _Atomic int spinners;
static _Atomic uint64_t last_spin_ms; /* progress_coarse_ms() at the last spin's end */
static _Atomic bool arm_timer_set;
static _Atomic unsigned lease_recheck_ms = ARM_LEASE_MS; /* the timer's next wait */
static struct progress_timer arm_timer;
/* Bumped by every thread about to sleep on readiness: a non-blocking
 * poll stamped with an older epoch may be that thread's own. */
static _Atomic unsigned sleep_epoch = 1;
static _Atomic int asleep; /* threads asleep on readiness now */

bool app_wake_spinning(void)
{
	return atomic_load(&spinners) > 0;
}

bool app_wake_spun_lately(void)
{
	uint64_t last = atomic_load(&last_spin_ms);

	return last && progress_coarse_ms() - last < ARM_LEASE_MS;
}

unsigned app_wake_sleep_epoch(void)
{
	return atomic_load(&sleep_epoch);
}

bool app_wake_anyone_asleep(void)
{
	return atomic_load(&asleep) > 0;
}

void conn_spin_begin(void)
{
	atomic_fetch_add(&spinners, 1);
}

void conn_spin_end(void)
{
	atomic_store(&last_spin_ms, progress_coarse_ms());
	atomic_fetch_sub(&spinners, 1);
}

/* Has a thread woken in a blocked call taken completions in since the
 * lease timer was set or last looked? */
static bool woken_takes_moved(void)
{
	unsigned now = atomic_load_explicit(&woken_takes, memory_order_relaxed);

	return atomic_exchange(&woken_takes_seen, now) != now;
}

static void arm_lease_over(void *arg)
{
	bool takers_at_it = woken_takes_moved(); /* the mark moves on every look */

	(void)arg;
	if (atomic_load(&spinners) > 0 || app_wake_spun_lately() || takers_at_it) {
		unsigned wait_ms = atomic_load(&lease_recheck_ms);

		if (wait_ms < ARM_LEASE_MAX_MS)
			atomic_store(&lease_recheck_ms, wait_ms * 2);
		progress_timer_arm(&arm_timer, progress_now_ms() + wait_ms);
		return;
	}
	/* Cleared first: a link still polled puts its arm off again and
	 * sets this timer anew (app_wake_arm_owed). */
	atomic_store(&arm_timer_set, false);
	link_lease_over_all();
}

void app_wake_arm_owed(void)
{
	if (atomic_exchange(&arm_timer_set, true))
		return;
	/* The take-in that put this arm off is not "still at it". */
	atomic_store(&woken_takes_seen, atomic_load(&woken_takes));
	atomic_store(&lease_recheck_ms, ARM_LEASE_MS);
	arm_timer.fn = arm_lease_over;
	progress_timer_arm(&arm_timer, progress_now_ms() + ARM_LEASE_MS);
}

void conn_sleep_begin_any(void)
{
	/* Counted first, then the owed arms: a link that read the count (or
	 * the old epoch) and put its arm off had marked it owed before. */
	atomic_fetch_add(&asleep, 1);
	atomic_fetch_add(&sleep_epoch, 1);
	if (link_arms_owed())
		link_arm_owed_all();
}

void conn_sleep_end_any(void)
{
	atomic_fetch_sub(&asleep, 1);
}

void conn_sleep_end_cleanup(void *arg)
{
	(void)arg;
	conn_sleep_end_any();
}

bool conn_arms_owed(void)
{
	return link_arms_owed();
}

/* c locked: the wait counts as a sleeper.  c's lock is down for the owed
 * arms (a take-in locks c), and whatever happened to c meanwhile (the arm
 * handed it messages, another thread woke its waiters: an OPEN's answer, a
 * phase change) ends the wait at once, for the caller to look again; a
 * wake-up in that gap was once lost, and a blocking connect() slept out
 * its whole bound.  Not a cancellation point: a thread cancelled in it
 * would leave c locked for good, and the progress thread, the next to lock
 * it, with it; the cancel waits for the app's next cancellation point (the
 * waits are bounded). */
void conn_cond_wait_counted(struct sdp_conn *c, const struct timespec *until)
{
	unsigned seen = c->completions_seen, woken = c->wakes;
	int cancel_state;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_unlock(&c->lock); /* the take-in below locks c */
	conn_sleep_begin_any();
	if (sdp_tun.debug_wait_gap_ms) /* tests: another thread runs in the gap */
		usleep(sdp_tun.debug_wait_gap_ms * 1000u);
	pthread_mutex_lock(&c->lock);
	if (c->completions_seen == seen && c->wakes == woken) {
		if (until)
			pthread_cond_timedwait(&c->cond, &c->lock, until);
		else
			pthread_cond_wait(&c->cond, &c->lock);
	}
	conn_sleep_end_any();
	pthread_setcancelstate(cancel_state, NULL);
}

void app_wake_atfork_child(void)
{
	atomic_store(&app_sets, 0); /* the parent's sets; the child's timers are gone too */
	atomic_store(&sweeping, false);
	sweep.armed = false;
	atomic_store(&spinners, 0);
	atomic_store(&asleep, 0); /* the parent's sleepers */
	atomic_store(&arm_timer_set, false);
	atomic_store(&lease_recheck_ms, ARM_LEASE_MS);
	atomic_store(&last_spin_ms, 0); /* the parent's spins */
	arm_timer.armed = false;
}

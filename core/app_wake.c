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

#include "base/config.h"
#include "base/log.h"
#include "core/conn.h"
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

void conn_channels_watched(bool new_set)
{
	dev_progress_watch_last();
	if (new_set)
		atomic_fetch_add(&app_sets, 1);
	app_wake_sweep_start();
}

void conn_channels_unwatched(void)
{
	atomic_fetch_sub(&app_sets, 1);
}

void app_wake_atfork_child(void)
{
	atomic_store(&app_sets, 0); /* the parent's sets; the child's timers are gone too */
	atomic_store(&sweeping, false);
	sweep.armed = false;
}

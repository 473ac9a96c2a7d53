/* A blocked call's own sleep on a linked stream: a per-thread epoll set that
 * holds the devices' links' completion channels (exclusive, ahead of the
 * progress thread's watch) and the one indicator the call waits for.  A
 * message for a thread asleep in recv or send wakes that thread alone; it
 * takes the completions in itself, instead of waiting for the progress
 * thread to take them and write its eventfd. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "base/real.h"
#include "base/self.h"
#include "core/conn.h"
#include "core/progress.h"
#include "core/wait_set.h"

#define WAIT_SET_CHANNELS 16
#define TAG_INDICATOR 1u
#define TAG_CHANNEL   2u

struct wait_set {
	int epfd;
	pid_t pid;           /* the process that made epfd (a forked child's copy is the parent's) */
	unsigned chan_gen;   /* conn_channels_generation() when the channels were added */
	bool counted;        /* counted by conn_channels_add */
	bool slotted;        /* listed in set_slots */
	int ind_fd;          /* the indicator registered now, -1 if none */
	uint64_t ind_serial; /* the stream it belongs to (its eventfd lives as long as the stream) */
};

static __thread struct wait_set ws = { .epfd = -1, .ind_fd = -1 };

/* Every thread's set, for a forked child to close the ones of the threads
 * that did not come with it (their fds are hidden from the app, so it
 * could not).  Lock-free, so a fork can come at any point: a slot holds
 * fd + 1, or 0.  A set that finds no slot works as well; a child keeps its
 * fd until exec. */
#define WAIT_SET_SLOTS 4096
static _Atomic int set_slots[WAIT_SET_SLOTS];

static bool slot_take(int fd)
{
	for (unsigned i = 0; i < WAIT_SET_SLOTS; i++) {
		int empty = 0;

		if (atomic_compare_exchange_strong(&set_slots[i], &empty, fd + 1))
			return true;
	}
	return false;
}

static void slot_release(int fd)
{
	for (unsigned i = 0; i < WAIT_SET_SLOTS; i++) {
		int mine = fd + 1;

		if (atomic_compare_exchange_strong(&set_slots[i], &mine, 0))
			return;
	}
}

static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;

static void ws_forget(struct wait_set *w)
{
	if (w->epfd >= 0) {
		if (w->pid == self_pid()) {
			if (w->slotted)
				slot_release(w->epfd);
			if (w->counted)
				conn_channels_unwatched();
		}
		progress_close_hidden(w->epfd); /* a parent's set: only this copy of the fd goes */
	}
	*w = (struct wait_set){ .epfd = -1, .ind_fd = -1 };
}

static void ws_thread_exit(void *arg)
{
	ws_forget(arg);
}

static void ws_key_create(void)
{
	if (pthread_key_create(&ws_key, ws_thread_exit) != 0)
		ws_key = (pthread_key_t)-1;
}

/* The channels that appeared since the last look go in; the progress
 * thread's watch goes behind them. */
static void ws_sync_channels(struct wait_set *w)
{
	unsigned gen = conn_channels_generation();

	if (w->chan_gen == gen)
		return;
	w->chan_gen = gen;
	if (conn_channels_add(w->epfd, TAG_CHANNEL, WAIT_SET_CHANNELS, !w->counted))
		w->counted = true;
}

static bool ws_ready(struct wait_set *w)
{
	if (w->epfd >= 0 && w->pid != self_pid())
		ws_forget(w);
	if (w->epfd < 0) {
		pthread_once(&ws_once, ws_key_create);
		if (ws_key == (pthread_key_t)-1)
			return false;
		w->epfd = progress_hide_fd(real.epoll_create1(EPOLL_CLOEXEC));
		if (w->epfd < 0)
			return false;
		w->pid = self_pid();
		w->slotted = slot_take(w->epfd);
		pthread_setspecific(ws_key, w);
	}
	ws_sync_channels(w);
	return w->counted;
}

/* An indicator's registration names its stream: a report of another
 * stream's is stale. */
static uint64_t indicator_tag(uint64_t serial)
{
	return serial << 2 | TAG_INDICATOR;
}

static bool is_channel_fd(int fd)
{
	int fds[WAIT_SET_CHANNELS], n = conn_channel_fds(fds, WAIT_SET_CHANNELS);

	for (int i = 0; i < n; i++)
		if (fds[i] == fd)
			return true;
	return false;
}

/* The stream's indicator in place of the last one.  An eventfd lives as
 * long as its stream, and epoll forgets a registration when its file
 * closes: the serial tells a registration still in place from a number
 * that was closed and handed out again. */
static bool ws_set_indicator(struct wait_set *w, int fd, uint64_t serial)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = indicator_tag(serial) };

	if (w->ind_fd == fd && w->ind_serial == serial)
		return true;
	/* ENOENT if it closed; not if its number is a channel's now. */
	if (w->ind_fd >= 0 && !is_channel_fd(w->ind_fd))
		real.epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->ind_fd, NULL);
	w->ind_fd = -1;
	if (real.epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 &&
	    (errno != EEXIST || real.epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) != 0))
		return false;
	w->ind_fd = fd;
	w->ind_serial = serial;
	return true;
}

static int poll_indicator(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int rc = real.poll(&pfd, 1, timeout_ms);

	return rc > 0 ? WAIT_SET_INDICATOR : rc;
}

int wait_set_sleep(int ind_fd, uint64_t serial, bool linked, int timeout_ms)
{
	struct epoll_event evs[4];
	int rc, result = 0;
	bool stale = false;

	if (!linked || !ws_ready(&ws) || !ws_set_indicator(&ws, ind_fd, serial))
		return poll_indicator(ind_fd, timeout_ms);
	rc = real.epoll_wait(ws.epfd, evs, 4, timeout_ms);
	if (rc <= 0)
		return rc;
	for (int i = 0; i < rc; i++) {
		if (evs[i].data.u64 == TAG_CHANNEL)
			result |= WAIT_SET_CHANNEL;
		else if (evs[i].data.u64 == indicator_tag(ws.ind_serial))
			result |= WAIT_SET_INDICATOR;
		else
			stale = true;
	}
	/* An earlier stream's indicator whose file outlived its fd number (a
	 * forked child holds a copy): it cannot be deleted by number, and it
	 * may stay readable.  The set goes; the next sleep makes a new one. */
	if (stale) {
		ws_forget(&ws);
		result |= WAIT_SET_INDICATOR; /* the caller looks again */
	}
	return result;
}

void wait_set_atfork_child(void)
{
	/* Every set is the parent's (the forking thread's too), and the
	 * channels they held are gone with the parent's devices. */
	for (unsigned i = 0; i < WAIT_SET_SLOTS; i++) {
		int fd = atomic_exchange(&set_slots[i], 0) - 1;

		if (fd >= 0)
			progress_close_hidden(fd);
	}
	if (ws.epfd >= 0 && !ws.slotted)
		progress_close_hidden(ws.epfd);
	ws = (struct wait_set){ .epfd = -1, .ind_fd = -1 };
}

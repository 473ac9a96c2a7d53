/* The per-process progress thread: epoll loop, deferred work, timers, and
 * the hidden-fd helpers for descriptors the library owns. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/fdtable.h" /* fdt_set(): hidden fds */
#include "base/guard.h"    /* SDP_GUARD_*: our own libc calls bypass the hooks */
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/thread.h"
#include "base/stats_shm.h" /* progress_wakeups */
#include "core/progress.h"

struct deferred {
	void (*fn)(void *arg);
	void *arg;
	struct deferred *next;
};

static struct {
	pthread_mutex_t lock;
	pid_t pid;              /* process that started the thread */
	pthread_t thread;
	int epfd, wake_fd, timer_fd;
	struct deferred *work_head, *work_tail;
	struct timer_heap timers;
	uint64_t timerfd_at_ms; /* what the timerfd is set to; 0: disarmed */
	struct progress_source wake_src, timer_src;
	pthread_cond_t parked_cond;
	bool stopping, parked;
	_Atomic int lingering;
} prog = { .lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .parked_cond = PTHREAD_COND_INITIALIZER };

static __thread bool on_progress_thread;

bool progress_is_own_thread(void)
{
	return on_progress_thread;
}

uint64_t progress_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The clock of the per-message stamps (last receive, send progress):
 * the last tick's time, read without a system call (the vDSO serves the
 * coarse clocks whatever the clock source); at most a tick behind
 * progress_now_ms, never ahead of it. */
uint64_t progress_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* How far a coarse stamp can lag the precise clock: one tick, in whole ms. */
uint64_t progress_coarse_slack_ms(void)
{
	static _Atomic uint64_t slack_ms;
	uint64_t ms = atomic_load_explicit(&slack_ms, memory_order_relaxed);
	struct timespec res;

	if (ms)
		return ms;
	ms = 10; /* HZ=100, if the resolution cannot be read */
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0)
		ms = (uint64_t)res.tv_sec * 1000 + ((uint64_t)res.tv_nsec + 999999) / 1000000;
	if (!ms)
		ms = 1;
	atomic_store_explicit(&slack_ms, ms, memory_order_relaxed);
	return ms;
}

uint64_t progress_deadline_ms(unsigned ms_from_now)
{
	uint64_t coarse = progress_coarse_ms(); /* at most a tick behind the precise clock */

	if (!ms_from_now)
		return coarse;
	return coarse + progress_coarse_slack_ms() + ms_from_now;
}

static int hidden_fd_floor_now(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 768;
	if (rl.rlim_cur > 65536)
		return 49152;
	return (int)(rl.rlim_cur * 3 / 4);
}

/* The floor is read again every HIDDEN_FLOOR_REREAD hides (an app may
 * raise RLIMIT_NOFILE once it runs), not on each: a connection hides three
 * descriptors, and getrlimit is a system call. */
#define HIDDEN_FLOOR_REREAD 32

static int hidden_fd_floor(void)
{
	static _Atomic unsigned uses;
	static _Atomic int floor_cached;

	if (atomic_fetch_add_explicit(&uses, 1, memory_order_relaxed) % HIDDEN_FLOOR_REREAD == 0 ||
	    !atomic_load_explicit(&floor_cached, memory_order_relaxed))
		atomic_store_explicit(&floor_cached, hidden_fd_floor_now(), memory_order_relaxed);
	return atomic_load_explicit(&floor_cached, memory_order_relaxed);
}

/* Hidden fds being made or closed: between the number's birth and its mark
 * (or its unmark and its close) it is open and unmarked, and a listing of
 * the app's fds would count it (progress_hidden_stable). */
static _Atomic unsigned hidden_begun, hidden_ended;

static void hidden_change_begin(void)
{
	atomic_fetch_add(&hidden_begun, 1);
}

static void hidden_change_end(void)
{
	atomic_fetch_add(&hidden_ended, 1);
}

unsigned progress_hidden_mark(void)
{
	return atomic_load(&hidden_begun);
}

bool progress_hidden_stable(unsigned mark)
{
	return atomic_load(&hidden_ended) == mark && atomic_load(&hidden_begun) == mark;
}

int progress_hide_fd(int fd)
{
	int high;

	if (fd < 0)
		return fd;
	hidden_change_begin();
	high = real.fcntl(fd, F_DUPFD_CLOEXEC, hidden_fd_floor());
	if (high >= 0) {
		real.close(fd);
		fd = high;
	} else {
		real.fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	fdt_set(fd, FDT_HIDDEN, NULL);
	hidden_change_end();
	return fd;
}

/* Marks the hidden duplicates of app sockets in the fd table: a forked
 * child closes its copies (progress_atfork_child). */
static _Alignas(8) int socket_dup_tag;

int progress_dup_hidden(int fd)
{
	int high;

	if (fd < 0)
		return -1;
	hidden_change_begin();
	high = real.fcntl(fd, F_DUPFD_CLOEXEC, hidden_fd_floor());
	if (high < 0)
		high = progress_hide_fd(real.dup(fd)); /* no number above the floor: any */
	if (high >= 0)
		fdt_set(high, FDT_HIDDEN, &socket_dup_tag);
	hidden_change_end();
	return high;
}

static void close_socket_dup(int fd, void *obj, void *ctx)
{
	(void)ctx;
	if (obj == &socket_dup_tag)
		progress_close_hidden(fd);
}

void progress_close_hidden(int fd)
{
	if (fd < 0)
		return;
	hidden_change_begin();
	fdt_clear(fd);
	real.close(fd);
	hidden_change_end();
}

static void wake(void)
{
	uint64_t one = 1;

	if (prog.wake_fd >= 0)
		(void)!real.write(prog.wake_fd, &one, sizeof(one));
}

int progress_watch(int fd, uint32_t events, struct progress_source *src)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return real.epoll_ctl(prog.epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

int progress_rewatch(int fd, uint32_t events, struct progress_source *src)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return real.epoll_ctl(prog.epfd, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -errno;
}

void progress_unwatch(int fd)
{
	if (real.epoll_ctl(prog.epfd, EPOLL_CTL_DEL, fd, NULL) != 0)
		sdp_warn("progress thread: cannot stop watching fd %d: %s", fd, strerror(errno));
}

int progress_defer(void (*fn)(void *arg), void *arg)
{
	struct deferred *d = malloc(sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->fn = fn;
	d->arg = arg;
	d->next = NULL;
	pthread_mutex_lock(&prog.lock);
	if (prog.work_tail)
		prog.work_tail->next = d;
	else
		prog.work_head = d;
	prog.work_tail = d;
	pthread_mutex_unlock(&prog.lock);
	wake();
	return 0;
}

static void run_deferred(void)
{
	struct deferred *d;

	for (;;) {
		pthread_mutex_lock(&prog.lock);
		d = prog.work_head;
		if (d) {
			prog.work_head = d->next;
			if (!prog.work_head)
				prog.work_tail = NULL;
		}
		pthread_mutex_unlock(&prog.lock);
		if (!d)
			return;
		d->fn(d->arg);
		free(d);
	}
}

/* Called with prog.lock held: programs the timerfd for the earliest timer,
 * unless it already is. */
static void rearm_timerfd_locked(void)
{
	struct heap_node *top = timer_heap_top(&prog.timers);
	uint64_t earliest = top ? top->at_ms : 0; /* armed deadlines are never 0 */
	struct itimerspec its;

	if (earliest == prog.timerfd_at_ms)
		return;
	memset(&its, 0, sizeof(its));
	if (earliest) {
		its.it_value.tv_sec = (time_t)(earliest / 1000);
		its.it_value.tv_nsec = (long)(earliest % 1000) * 1000000L;
	}
	/* Remembered only once set: a failed call is tried again next time. */
	prog.timerfd_at_ms = timerfd_settime(prog.timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0 ? earliest : 0;
}

static void unlink_timer_locked(struct progress_timer *t)
{
	timer_heap_remove(&prog.timers, &t->node);
	t->armed = false;
}

void progress_timer_arm(struct progress_timer *t, uint64_t at_ms)
{
	pthread_mutex_lock(&prog.lock);
	if (t->armed)
		unlink_timer_locked(t);
	t->node.at_ms = at_ms ? at_ms : 1;
	if (timer_heap_push(&prog.timers, &t->node) == 0)
		t->armed = true;
	else
		sdp_error("out of memory arming a timer (its wait loses its bound)");
	rearm_timerfd_locked();
	pthread_mutex_unlock(&prog.lock);
}

void progress_timer_cancel(struct progress_timer *t)
{
	pthread_mutex_lock(&prog.lock);
	if (t->armed) {
		unlink_timer_locked(t);
		rearm_timerfd_locked();
	}
	pthread_mutex_unlock(&prog.lock);
}

static void fire_due_timers(void)
{
	uint64_t now = progress_now_ms();

	for (;;) {
		struct heap_node *top;
		struct progress_timer *due = NULL;

		pthread_mutex_lock(&prog.lock);
		top = timer_heap_top(&prog.timers);
		if (top && top->at_ms <= now) {
			due = (struct progress_timer *)((char *)top - offsetof(struct progress_timer, node));
			unlink_timer_locked(due);
		} else {
			prog.timerfd_at_ms = 0; /* it fired: set it again */
			rearm_timerfd_locked();
		}
		pthread_mutex_unlock(&prog.lock);
		if (!due)
			return;
		due->fn(due->arg);
	}
}

static void on_wake(struct progress_source *src, uint32_t events)
{
	uint64_t n;

	(void)src;
	(void)events;
	/* The work runs after the batch (progress_main): run here, a teardown
	 * could free a channel whose events come later in the same batch. */
	(void)!real.read(prog.wake_fd, &n, sizeof(n));
}

static void on_timer(struct progress_source *src, uint32_t events)
{
	uint64_t n;

	(void)src;
	(void)events;
	(void)!real.read(prog.timer_fd, &n, sizeof(n));
	fire_due_timers();
}

/* `sdpshim stat`'s progress_wakeups: each is a wake-up of this thread,
 * and per message, a system call and a context switch at the least. */
static void count_wakeup(void)
{
	struct stats_seg *seg = stats_seg_current();

	if (seg && seg->hdr)
		atomic_fetch_add_explicit(&seg->hdr->progress_wakeups, 1, memory_order_relaxed);
}

/* Called between batches: at exit the thread parks here for good. */
static void park_if_stopping(void)
{
	pthread_mutex_lock(&prog.lock);
	if (prog.stopping) {
		prog.parked = true;
		pthread_cond_broadcast(&prog.parked_cond);
		for (;;)
			pthread_cond_wait(&prog.parked_cond, &prog.lock);
	}
	pthread_mutex_unlock(&prog.lock);
}

static void *progress_main(void *arg)
{
	struct epoll_event evs[64];

	(void)arg;
	on_progress_thread = true;
	SDP_GUARD_ENTER(); /* every libc call made here is the library's own */
	for (;;) {
		park_if_stopping();
		int n = real.epoll_wait(prog.epfd, evs, 64, -1);

		if (n < 0 && errno != EINTR) {
			sdp_error("progress thread: epoll_wait: %s", strerror(errno));
			return NULL;
		}
		if (n > 0)
			count_wakeup();
		for (int i = 0; i < n; i++) {
			struct progress_source *src = evs[i].data.ptr;
			src->on_ready(src, evs[i].events);
		}
		run_deferred();
	}
	return NULL;
}

static int create_fds(void)
{
	prog.epfd = progress_hide_fd(real.epoll_create1(EPOLL_CLOEXEC));
	prog.wake_fd = progress_hide_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	prog.timer_fd = progress_hide_fd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
	if (prog.epfd < 0 || prog.wake_fd < 0 || prog.timer_fd < 0)
		return -errno;
	prog.wake_src.on_ready = on_wake;
	prog.timer_src.on_ready = on_timer;
	if (progress_watch(prog.wake_fd, EPOLLIN, &prog.wake_src) ||
	    progress_watch(prog.timer_fd, EPOLLIN, &prog.timer_src))
		return -errno;
	return 0;
}

int progress_start(void)
{
	int err = 0;

	pthread_mutex_lock(&prog.lock);
	if (prog.pid == self_pid()) { /* no system call on every connect */
		pthread_mutex_unlock(&prog.lock);
		return 0;
	}
	/* After fork the parent's thread is gone; its fds are the parent's too. */
	prog.work_head = prog.work_tail = NULL;
	timer_heap_clear(&prog.timers);
	prog.timerfd_at_ms = 0;
	err = create_fds();
	if (!err) {
		err = -lib_thread_start(&prog.thread, progress_main, NULL, false, 0);
	}
	if (!err)
		prog.pid = self_pid();
	else
		sdp_error("cannot start the progress thread: %s", strerror(-err));
	pthread_mutex_unlock(&prog.lock);
	return err;
}

void progress_linger_begin(void)
{
	atomic_fetch_add(&prog.lingering, 1);
}

void progress_linger_end(void)
{
	atomic_fetch_sub(&prog.lingering, 1);
}

void progress_quiesce_for_exit(unsigned max_wait_ms)
{
	uint64_t until = progress_now_ms() + max_wait_ms;
	struct timespec abs;

	if (prog.pid != getpid() || on_progress_thread)
		return;
	while (atomic_load(&prog.lingering) > 0 && progress_now_ms() < until) {
		struct timespec nap = { 0, 2000000 };
		nanosleep(&nap, NULL);
	}
	clock_gettime(CLOCK_REALTIME, &abs);
	abs.tv_sec += 2;
	pthread_mutex_lock(&prog.lock);
	prog.stopping = true;
	pthread_mutex_unlock(&prog.lock);
	wake();
	pthread_mutex_lock(&prog.lock);
	while (!prog.parked)
		if (pthread_cond_timedwait(&prog.parked_cond, &prog.lock, &abs) != 0)
			break;
	pthread_mutex_unlock(&prog.lock);
}

void progress_atfork_child(void)
{
	/* The parent's channels' duplicates of their TCP sockets: a child that
	 * kept them would hold sockets the parent closes (no FIN while it
	 * lives), even those of connections made after it was forked. */
	fdt_for_each(FDT_HIDDEN, close_socket_dup, NULL);
	pthread_mutex_init(&prog.lock, NULL);
	pthread_cond_init(&prog.parked_cond, NULL);
	prog.stopping = prog.parked = false;
	atomic_store(&prog.lingering, 0);
	if (prog.pid == 0)
		return;
	progress_close_hidden(prog.epfd);
	progress_close_hidden(prog.wake_fd);
	progress_close_hidden(prog.timer_fd);
	prog.epfd = prog.wake_fd = prog.timer_fd = -1;
	prog.pid = 0;
	prog.work_head = prog.work_tail = NULL;
	timer_heap_clear(&prog.timers);
	prog.timerfd_at_ms = 0;
}

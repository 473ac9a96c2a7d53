/* The progress thread: one per process, sleeping in epoll on the rdma_cm
 * event channel, the completion channels, watched TCP fds, a timerfd and a
 * wake-up eventfd.  It makes credits flow and connections advance while the
 * app sleeps or computes, and it alone tears RDMA resources down. */
#ifndef SDPSHIM_PROGRESS_H
#define SDPSHIM_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/timer_heap.h"

struct progress_source {
	/* Called on the progress thread with the epoll events of the fd. */
	void (*on_ready)(struct progress_source *src, uint32_t events);
};

/* Starts the thread for this process (again after fork).  0 or -errno. */
int progress_start(void);

int progress_watch(int fd, uint32_t events, struct progress_source *src);
int progress_rewatch(int fd, uint32_t events, struct progress_source *src);
void progress_unwatch(int fd);

/* Runs fn(arg) on the progress thread soon (FIFO).  0 or -ENOMEM. */
int progress_defer(void (*fn)(void *arg), void *arg);

/* A one-shot timer: fn(arg) on the progress thread at or after at_ms
 * (CLOCK_MONOTONIC ms).  Re-arming replaces the deadline. */
struct progress_timer {
	struct heap_node node; /* its deadline (at_ms) and place in the heap */
	void (*fn)(void *arg);
	void *arg;
	bool armed;
};
void progress_timer_arm(struct progress_timer *t, uint64_t at_ms);
void progress_timer_cancel(struct progress_timer *t);

uint64_t progress_now_ms(void);
/* Is the caller the progress thread? */
bool progress_is_own_thread(void);
uint64_t progress_coarse_ms(void);
uint64_t progress_coarse_slack_ms(void);
/* A timer's deadline ms_from_now, read without a system call (the coarse
 * clock): never before the precise clock's now + ms_from_now, at most a
 * tick after it; with 0, due at once. */
uint64_t progress_deadline_ms(unsigned ms_from_now);

/* At exit: waits until no channel is lingering (bounded by max_wait_ms),
 * then parks the thread outside every handler so library destructors never
 * race with it.  Idempotent. */
void progress_quiesce_for_exit(unsigned max_wait_ms);
/* Channels the app closed that are still flushing, counted for exit. */
void progress_linger_begin(void);
void progress_linger_end(void);

/* In a forked child: forget the parent's thread and fds (they are the
 * parent's); the next progress_start() builds new ones. */
void progress_atfork_child(void);

/* Creates an fd owned by the library: moved to a high number, close-on-exec
 * and marked hidden so the app cannot close or dup2 over it. */
int progress_hide_fd(int fd);
/* A hidden duplicate of a socket the app keeps (one call, not dup then
 * move); a forked child closes its copies. */
int progress_dup_hidden(int fd);
void progress_close_hidden(int fd);
/* A listing of open fds that leaves the hidden ones out is right if no
 * hidden fd was made or closed meanwhile: mark before, stable after. */
unsigned progress_hidden_mark(void);
bool progress_hidden_stable(unsigned mark);

#endif

/* RDMA devices in use by this process: one protection domain and two
 * completion channels per verbs context, created on first use: one for
 * channels of their own (the progress thread's alone), one for links,
 * which app threads asleep in epoll_wait watch too (core/app_wake.c). */
#ifndef SDPSHIM_DEV_H
#define SDPSHIM_DEV_H

#include <stdbool.h>
#include <stddef.h>

#include <infiniband/verbs.h>

#include "core/progress.h"

struct sdp_dev {
	struct ibv_context *ctx;    /* where our PD, CQs and QPs live */
	struct ibv_context *cm_ctx; /* librdmacm's for the device (its ids' verbs) */
	bool own_ctx;               /* ctx is our own: a forked child's (core/qp.h) */
	char name[64];
	/* Taken at creation, so that releasing the context never reads it
	 * (librdmacm may free it once the device is gone). */
	const struct ibv_device *device;
	int ctx_cmd_fd, ctx_async_fd;
	bool ctx_release_due; /* retired; the context's files still to release */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;      /* channels' own CQs */
	struct progress_source cc_src;
	struct ibv_comp_channel *link_cc; /* links' CQs */
	struct progress_source link_cc_src;
	uint32_t max_inline; /* what a QP of this device accepted */
	bool mw_type2;       /* type 2 memory windows: zero-copy can scope exposure */
	_Atomic int conns;   /* channels, links and streams using it; the last one
			      * flushes the MR cache (and retires a removed device) */
	_Atomic bool removed; /* DEVICE_REMOVAL seen: no new user, retire once unused */
	bool retired;         /* its PD is gone and its channels' fds are placeholders (dev_lock) */
	bool inherited_released; /* a forked child's copy: its files here let go (dev_lock) */
	_Atomic int link_cqs; /* CQs on link_cc (cq.c reads one event when 1) */
	struct sdp_dev *next;
};

/* The device record of ctx (an rdma_cm id's verbs), created if needed,
 * with one use counted (dev_conn_gone gives it back).  NULL if the device
 * is being removed, or its record cannot be made. */
struct sdp_dev *dev_get(struct ibv_context *ctx);

/* Registers len bytes (page-aligned allocation) with local access only:
 * the peer never gets a key to channel buffers.  Its pages count against
 * the pinned-memory budget (base/pin_budget.h) until dev_free_registered.
 * NULL on failure with *err = -errno: -ENOBUFS when the budget refuses,
 * -ENOMEM typically when RLIMIT_MEMLOCK does. */
void *dev_alloc_registered(struct sdp_dev *dev, size_t len, struct ibv_mr **mr, int *err);
void dev_free_registered(void *mem, size_t len, struct ibv_mr *mr);

/* One more use of a device the caller already counts a use of. */
void dev_conn_added(struct sdp_dev *dev);
/* A use of dev went away; with none left, cached registrations go, and a
 * removed device is retired. */
void dev_conn_gone(struct sdp_dev *dev);

/* RDMA_CM_EVENT_DEVICE_REMOVAL for an id on ctx (progress thread).  Once
 * the device's last user is gone, its PD and completion channels are
 * released and librdmacm is asked to close its context, so that the
 * kernel's removal (`rdma link delete`) need not wait for this process. */
void dev_removed(struct ibv_context *ctx);

/* A device went from the kernel's list (core/dev_watch.c saw it go):
 * each record whose device is no longer listed is handled as if
 * DEVICE_REMOVAL had come.  Progress thread. */
void dev_check_listed(void);

/* A forked child's ancestors' records of devices no longer listed: its
 * copies of their files are released (core/dev_watch.c's own thread). */
void dev_release_inherited_gone(void);
void dev_watch_inherited_start(void);

/* core/dev_watch.c: the kernel's uevents, watched from the first device
 * record on (once per process), and forgotten in a forked child. */
void dev_watch_start(void);
void dev_watch_atfork_child(void);

/* Up to max live devices of this process; the count.  Records are never
 * freed: a retired one keeps its channel structs, whose fds are then a
 * placeholder that never reads, so a thread that took the record before
 * it retired reads nothing, and never an fd the app got since. */
int dev_snapshot(struct sdp_dev **out, int max);
/* Bumped each time a device record is created or retired. */
unsigned dev_generation(void);
/* Puts the progress thread's watch of every completion channel last in
 * the channels' wait queues (app epoll sets go first: app_wake.c). */
void dev_progress_watch_last(void);

/* Forget device records in a forked child (the contexts are the parent's).
 * parent_cm_fd: the parent's rdma_cm event channel, or -1 if it made no
 * rdma_cm id (then librdmacm opened no device context the child now
 * holds; core/qp.h). */
void dev_atfork_child(int parent_cm_fd);
/* Last in a forked child's fork handling: a child that inherited device
 * files watches for a device's removal (a thread of its own), to let its
 * copies go (they would hold the device until it exits). */
void dev_after_fork_child(void);

#endif

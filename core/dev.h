/* RDMA devices in use by this process: one protection domain and two
 * completion channels per verbs context, created on first use: one for
 * channels of their own (the progress thread's alone), one for links,
 * which app threads asleep in epoll_wait watch too (core/app_wake.c). */
#ifndef SDPSHIM_DEV_H
#define SDPSHIM_DEV_H

#include <stddef.h>

#include <infiniband/verbs.h>

#include "core/progress.h"

struct sdp_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;      /* channels' own CQs */
	struct progress_source cc_src;
	struct ibv_comp_channel *link_cc; /* links' CQs */
	struct progress_source link_cc_src;
	uint32_t max_inline; /* what a QP of this device accepted */
	bool mw_type2;       /* type 2 memory windows: zero-copy can scope exposure */
	_Atomic int conns;   /* channels using it; the last one flushes the MR cache */
	_Atomic int link_cqs; /* CQs on link_cc (cq.c reads one event when 1) */
	struct sdp_dev *next;
};

/* The device record of ctx (an rdma_cm id's verbs), created if needed. */
struct sdp_dev *dev_get(struct ibv_context *ctx);

/* Registers len bytes (page-aligned allocation) with local access only:
 * the peer never gets a key to channel buffers.  Its pages count against
 * the pinned-memory budget (base/pin_budget.h) until dev_free_registered.
 * NULL on failure with *err = -errno: -ENOBUFS when the budget refuses,
 * -ENOMEM typically when RLIMIT_MEMLOCK does. */
void *dev_alloc_registered(struct sdp_dev *dev, size_t len, struct ibv_mr **mr, int *err);
void dev_free_registered(void *mem, size_t len, struct ibv_mr *mr);

void dev_conn_added(struct sdp_dev *dev);
/* A channel on dev went away; with none left, cached registrations go. */
void dev_conn_gone(struct sdp_dev *dev);

/* Up to max devices of this process (records are never freed); the count. */
int dev_snapshot(struct sdp_dev **out, int max);
/* Bumped each time a device record is created. */
unsigned dev_generation(void);
/* Puts the progress thread's watch of every completion channel last in
 * the channels' wait queues (app epoll sets go first: app_wake.c). */
void dev_progress_watch_last(void);

/* Forget device records in a forked child (the contexts are the parent's). */
void dev_atfork_child(void);

#endif

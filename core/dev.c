/* Per-device protection domains and completion channels, and registration
 * of the channel buffers. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/guard.h"
#include "base/log.h"
#include "base/pin_budget.h"
#include "base/real.h"
#include "core/cq.h" /* cq_on_channel_ready() */
#include "core/dev.h"
#include "core/mrcache.h"

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_dev *dev_list;
static _Atomic unsigned dev_gen;

/* A completion channel the progress thread watches (non-blocking, hidden). */
static struct ibv_comp_channel *open_channel(struct ibv_context *ctx, struct progress_source *src,
					     void (*on_ready)(struct progress_source *, uint32_t),
					     uint32_t events)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);

	if (!ch)
		return NULL;
	ch->fd = progress_hide_fd(ch->fd);
	real.fcntl(ch->fd, F_SETFL, real.fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	src->on_ready = on_ready;
	if (progress_watch(ch->fd, events, src) != 0) {
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	return ch;
}

static void close_channel(struct ibv_comp_channel *ch)
{
	if (!ch)
		return;
	progress_unwatch(ch->fd);
	ibv_destroy_comp_channel(ch);
}

static struct sdp_dev *dev_create(struct ibv_context *ctx)
{
	struct sdp_dev *d = calloc(1, sizeof(*d));
	struct ibv_device_attr attr;

	if (!d)
		return NULL;
	d->ctx = ctx;
	d->pd = ibv_alloc_pd(ctx);
	if (d->pd)
		d->cc = open_channel(ctx, &d->cc_src, cq_on_channel_ready, EPOLLIN);
	/* Exclusive: an app thread asleep on the links' channel takes the
	 * wake-up alone; this watch is the backstop (core/app_wake.c). */
	if (d->cc)
		d->link_cc = open_channel(ctx, &d->link_cc_src, cq_on_link_channel_ready,
					  EPOLLIN | EPOLLEXCLUSIVE);
	if (!d->link_cc) {
		sdp_warn("device %s: cannot allocate PD/completion channels: %s",
			 ibv_get_device_name(ctx->device), strerror(errno));
		close_channel(d->cc);
		if (d->pd)
			ibv_dealloc_pd(d->pd);
		free(d);
		return NULL;
	}
	if (ibv_query_device(ctx, &attr) == 0)
		d->mw_type2 = (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
	if (!d->mw_type2)
		sdp_info("device %s has no type 2 memory windows: zero-copy off",
			 ibv_get_device_name(ctx->device));
	sdp_debug("device %s ready", ibv_get_device_name(ctx->device));
	return d;
}

struct sdp_dev *dev_get(struct ibv_context *ctx)
{
	struct sdp_dev *d;

	pthread_mutex_lock(&dev_lock);
	for (d = dev_list; d; d = d->next)
		if (d->ctx == ctx)
			break;
	if (!d) {
		SDP_GUARD_ENTER();
		d = dev_create(ctx);
		SDP_GUARD_LEAVE();
		if (d) {
			d->next = dev_list;
			dev_list = d;
			atomic_fetch_add(&dev_gen, 1);
		}
	}
	pthread_mutex_unlock(&dev_lock);
	return d;
}

/* The pages are taken from the pinned-memory budget first (unused cached
 * zero-copy registrations make room) and given back once deregistered
 * (dev_free_registered). */
void *dev_alloc_registered(struct sdp_dev *dev, size_t len, struct ibv_mr **mr, int *err)
{
	size_t pinned = pin_pages_len(len);
	void *mem;

	if (!mrcache_budget_take(pinned)) {
		*err = -ENOBUFS;
		return NULL;
	}
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		pin_budget_give(pinned);
		*err = -ENOMEM;
		return NULL;
	}
	SDP_GUARD_ENTER();
	*mr = ibv_reg_mr(dev->pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
	SDP_GUARD_LEAVE();
	if (!*mr) {
		*err = errno ? -errno : -ENOMEM;
		munmap(mem, len);
		pin_budget_give(pinned);
		return NULL;
	}
	return mem;
}

void dev_free_registered(void *mem, size_t len, struct ibv_mr *mr)
{
	if (mr) {
		SDP_GUARD_ENTER();
		ibv_dereg_mr(mr);
		SDP_GUARD_LEAVE();
		pin_budget_give(pin_pages_len(len));
	}
	if (mem)
		munmap(mem, len);
}

void dev_conn_added(struct sdp_dev *dev)
{
	atomic_fetch_add(&dev->conns, 1);
}

void dev_conn_gone(struct sdp_dev *dev)
{
	if (atomic_fetch_sub(&dev->conns, 1) == 1)
		mrcache_flush_dev(dev);
}

int dev_snapshot(struct sdp_dev **out, int max)
{
	int n = 0;

	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d && n < max; d = d->next)
		out[n++] = d;
	pthread_mutex_unlock(&dev_lock);
	return n;
}

unsigned dev_generation(void)
{
	return atomic_load(&dev_gen);
}

/* EPOLLEXCLUSIVE wakes the queue's entries in order until one has a
 * sleeper: a watch re-added goes to the tail.  An event between the two
 * calls is not lost: the add polls the channel. */
void dev_progress_watch_last(void)
{
	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d; d = d->next) {
		progress_unwatch(d->link_cc->fd);
		if (progress_watch(d->link_cc->fd, EPOLLIN | EPOLLEXCLUSIVE, &d->link_cc_src) != 0)
			sdp_error("device %s: the progress thread cannot watch its completions: %s",
				  ibv_get_device_name(d->ctx->device), strerror(errno));
	}
	pthread_mutex_unlock(&dev_lock);
}

void dev_atfork_child(void)
{
	pthread_mutex_init(&dev_lock, NULL);
	dev_list = NULL; /* leaked on purpose: the parent's contexts */
}

/* Per-device protection domains and completion channels, and registration
 * of the channel buffers. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

static struct sdp_dev *dev_create(struct ibv_context *ctx)
{
	struct sdp_dev *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->ctx = ctx;
	d->pd = ibv_alloc_pd(ctx);
	d->cc = d->pd ? ibv_create_comp_channel(ctx) : NULL;
	if (!d->cc) {
		sdp_warn("device %s: cannot allocate PD/completion channel: %s",
			 ibv_get_device_name(ctx->device), strerror(errno));
		if (d->pd)
			ibv_dealloc_pd(d->pd);
		free(d);
		return NULL;
	}
	struct ibv_device_attr attr;
	if (ibv_query_device(ctx, &attr) == 0)
		d->mw_type2 = (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
	if (!d->mw_type2)
		sdp_info("device %s has no type 2 memory windows: zero-copy off",
			 ibv_get_device_name(ctx->device));
	d->cc->fd = progress_hide_fd(d->cc->fd);
	real.fcntl(d->cc->fd, F_SETFL, real.fcntl(d->cc->fd, F_GETFL) | O_NONBLOCK);
	d->cc_src.on_ready = cq_on_channel_ready;
	if (progress_watch(d->cc->fd, EPOLLIN, &d->cc_src) != 0) {
		ibv_destroy_comp_channel(d->cc);
		ibv_dealloc_pd(d->pd);
		free(d);
		return NULL;
	}
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

void dev_atfork_child(void)
{
	pthread_mutex_init(&dev_lock, NULL);
	dev_list = NULL; /* leaked on purpose: the parent's contexts */
}

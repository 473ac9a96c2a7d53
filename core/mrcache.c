/* The zero-copy registration cache: lookup by covering range, LRU
 * eviction under count and byte limits and the pinned-memory budget,
 * invalidation from memory hooks. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "base/guard.h"
#include "base/pin_budget.h"
#include "core/dev.h"
#include "core/mrcache.h"

#define MRC_MAX_ENTRIES 64
#define MRC_MAX_BYTES   (512ull << 20)

_Atomic int mrcache_live;
static void (*live_changed)(bool live); /* mrcache_watch() */

static pthread_mutex_t mrc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrc_entry *mrc_list;  /* valid entries, most recent first */
static struct mrc_entry *mrc_stale; /* invalidated, still in use */
static uint64_t mrc_bytes;
static uint64_t mrc_clock;

static void entry_free(struct mrc_entry *e)
{
	size_t pinned = e->end - e->start;

	SDP_GUARD_ENTER();
	ibv_dereg_mr(e->mr);
	free(e); /* inside the guard: our free hook must not re-enter the cache */
	SDP_GUARD_LEAVE();
	pin_budget_give(pinned);
	if (atomic_fetch_sub(&mrcache_live, 1) == 1 && live_changed)
		live_changed(false);
}

/* Unlinks e from the valid list; frees it now or when unused. Locked. */
static void entry_drop_locked(struct mrc_entry **pp)
{
	struct mrc_entry *e = *pp;

	*pp = e->next;
	mrc_bytes -= e->end - e->start;
	if (e->users) {
		e->stale = true;
		e->next = mrc_stale;
		mrc_stale = e;
		return;
	}
	entry_free(e);
}

/* The least recently used entry nobody uses (NULL if none); *count: the
 * valid entries. */
static struct mrc_entry **lru_unused_locked(int *count)
{
	struct mrc_entry **victim = NULL;

	*count = 0;
	for (struct mrc_entry **pp = &mrc_list; *pp; pp = &(*pp)->next) {
		(*count)++;
		if (!(*pp)->users && (!victim || (*pp)->last_use < (*victim)->last_use))
			victim = pp;
	}
	return victim;
}

static void evict_locked(size_t incoming)
{
	for (;;) {
		int count;
		struct mrc_entry **victim = lru_unused_locked(&count);

		if (count < MRC_MAX_ENTRIES && mrc_bytes + incoming <= MRC_MAX_BYTES)
			return;
		if (!victim)
			return; /* everything is in use: go over the limit for now */
		entry_drop_locked(victim);
	}
}

/* Takes len bytes from the pinned-memory budget, evicting unused entries,
 * least recently used first, while they do not fit.  False when they still
 * do not (counted as a refusal): the caller registers nothing, and
 * zero-copy uses buffer copy for that call. */
static bool budget_take_locked(size_t len)
{
	while (!pin_budget_try(len)) {
		int count;
		struct mrc_entry **victim = lru_unused_locked(&count);

		if (!victim)
			return pin_budget_take(len);
		entry_drop_locked(victim); /* unused: deregistered now, its bytes given back */
	}
	return true;
}

static struct mrc_entry *lookup_locked(struct sdp_dev *dev, uintptr_t start, uintptr_t end,
				       bool need_write)
{
	for (struct mrc_entry *e = mrc_list; e; e = e->next)
		if (e->dev == dev && e->start <= start && end <= e->end && (e->writable || !need_write))
			return e;
	return NULL;
}

static struct ibv_mr *register_range(struct sdp_dev *dev, uintptr_t start, size_t len,
				     bool *writable)
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
	struct ibv_mr *mr;

	SDP_GUARD_ENTER();
	mr = ibv_reg_mr(dev->pd, (void *)start, len, access);
	if (!mr && (errno == EFAULT || errno == EACCES)) {
		/* Read-only pages (a const buffer, a read-only file mapping):
		 * still a valid source for the peer's RDMA READ. */
		mr = ibv_reg_mr(dev->pd, (void *)start, len, IBV_ACCESS_MW_BIND);
		*writable = false;
	} else {
		*writable = true;
	}
	SDP_GUARD_LEAVE();
	return mr;
}

bool mrcache_budget_take(size_t len)
{
	bool ok;

	if (pin_budget_try(len))
		return true;
	pthread_mutex_lock(&mrc_lock);
	ok = budget_take_locked(len);
	pthread_mutex_unlock(&mrc_lock);
	return ok;
}

int mrcache_get(struct sdp_dev *dev, const void *addr, size_t len, bool need_write,
		struct mrc_entry **out, bool *hit)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(page - 1);
	uintptr_t end = ((uintptr_t)addr + len + page - 1) & ~(page - 1);
	struct mrc_entry *e;

	pthread_mutex_lock(&mrc_lock);
	e = lookup_locked(dev, start, end, need_write);
	*hit = e != NULL;
	if (!e) {
		evict_locked(end - start);
		if (!budget_take_locked(end - start)) {
			pthread_mutex_unlock(&mrc_lock);
			return -ENOBUFS;
		}
		e = calloc(1, sizeof(*e));
		if (e)
			e->mr = register_range(dev, start, end - start, &e->writable);
		if (!e || !e->mr || (need_write && !e->writable)) {
			int err = e && !e->mr ? -errno : -EFAULT;
			SDP_GUARD_ENTER();
			if (e && e->mr)
				ibv_dereg_mr(e->mr);
			free(e);
			SDP_GUARD_LEAVE();
			pin_budget_give(end - start);
			pthread_mutex_unlock(&mrc_lock);
			return e ? err : -ENOMEM;
		}
		e->start = start;
		e->end = end;
		e->dev = dev;
		e->next = mrc_list;
		mrc_list = e;
		mrc_bytes += end - start;
		if (atomic_fetch_add(&mrcache_live, 1) == 0 && live_changed)
			live_changed(true); /* before the entry is handed out */
	}
	e->users++;
	e->last_use = ++mrc_clock;
	pthread_mutex_unlock(&mrc_lock);
	*out = e;
	return 0;
}

void mrcache_put(struct mrc_entry *e)
{
	pthread_mutex_lock(&mrc_lock);
	if (--e->users == 0 && e->stale) {
		for (struct mrc_entry **pp = &mrc_stale; *pp; pp = &(*pp)->next) {
			if (*pp == e) {
				*pp = e->next;
				break;
			}
		}
		entry_free(e);
	}
	pthread_mutex_unlock(&mrc_lock);
}

void mrcache_invalidate(const void *addr, size_t len)
{
	uintptr_t start = (uintptr_t)addr, end = start + len;

	if (!len || !atomic_load_explicit(&mrcache_live, memory_order_relaxed))
		return;
	pthread_mutex_lock(&mrc_lock);
	for (struct mrc_entry **pp = &mrc_list; *pp;) {
		if ((*pp)->start < end && start < (*pp)->end)
			entry_drop_locked(pp);
		else
			pp = &(*pp)->next;
	}
	pthread_mutex_unlock(&mrc_lock);
}

void mrcache_flush_dev(struct sdp_dev *dev)
{
	pthread_mutex_lock(&mrc_lock);
	for (struct mrc_entry **pp = &mrc_list; *pp;) {
		if ((*pp)->dev == dev && !(*pp)->users)
			entry_drop_locked(pp);
		else
			pp = &(*pp)->next;
	}
	pthread_mutex_unlock(&mrc_lock);
}

void mrcache_atfork_child(void)
{
	/* The parent's registrations are not the child's: forget, never dereg. */
	pthread_mutex_init(&mrc_lock, NULL);
	mrc_list = mrc_stale = NULL;
	mrc_bytes = 0;
	atomic_store(&mrcache_live, 0);
	if (live_changed)
		live_changed(false);
}

void mrcache_watch(void (*changed)(bool live))
{
	live_changed = changed;
}

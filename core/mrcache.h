/* Registration cache for application buffers used by zero-copy: page-
 * aligned memory regions per device, registered with local access (and
 * MW_BIND) only, so caching never exposes memory to the peer.  Entries are
 * invalidated by the memory hooks whenever a range's pages can change
 * (free, realloc, munmap, mremap, madvise, MAP_FIXED); an entry in use is
 * marked stale and deregistered when its last user lets go. */
#ifndef SDPSHIM_MRCACHE_H
#define SDPSHIM_MRCACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_mr;
struct sdp_dev;

struct mrc_entry {
	uintptr_t start, end;  /* registered range, page-aligned */
	struct ibv_mr *mr;
	struct sdp_dev *dev;
	int users;             /* transfers in flight */
	bool stale;            /* invalidated while in use */
	bool writable;         /* registered with LOCAL_WRITE (usable as a target) */
	uint64_t last_use;
	struct mrc_entry *next;
};

/* Nonzero while any entry exists: the memory hooks' fast path. */
extern _Atomic int mrcache_live __attribute__((visibility("hidden")));

/* Sets the function told, with the cache's lock held, when the cache goes
 * from empty to holding an entry (live: before that entry is handed out)
 * and back: the free and realloc hooks follow it instead of testing
 * mrcache_live.  Set once, at initialisation, before any entry can exist. */
void mrcache_watch(void (*changed)(bool live));

/* An entry of dev covering [addr, addr+len), registered on a miss.  need_write:
 * the range will be written locally (an RDMA READ target or a sink).  A miss
 * takes its pages from the pinned-memory budget (base/pin_budget.h),
 * evicting unused entries first; -ENOBUFS if they still do not fit.
 * Returns 0 or -errno; *hit tells whether it came from the cache. */
int mrcache_get(struct sdp_dev *dev, const void *addr, size_t len, bool need_write,
		struct mrc_entry **out, bool *hit);
void mrcache_put(struct mrc_entry *e);
/* Takes len bytes from the pinned-memory budget for a registration outside
 * the cache (a channel's buffers), evicting unused entries, least recently
 * used first, while they do not fit: a connection comes before a cached
 * registration nobody uses.  False (a refusal, counted) if they still do not. */
bool mrcache_budget_take(size_t len);
/* The pages of [addr, addr+len) may change: drop overlapping entries. */
void mrcache_invalidate(const void *addr, size_t len);
/* Deregisters every unused entry of dev (its last channel went away). */
void mrcache_flush_dev(struct sdp_dev *dev);
void mrcache_atfork_child(void);

#endif

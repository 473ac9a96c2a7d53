/* The pending budget: how many channels that no accept() has claimed yet a
 * process holds, in all and per client address.  A channel of its own
 * holds our receive buffers pinned (SDPSHIM_PENDING_MAX,
 * SDPSHIM_PENDING_PER_SOURCE); a stream on a link pins nothing and costs a
 * few KiB of ordinary memory, so it has a larger budget of its own
 * (SDPSHIM_PENDING_STREAMS_MAX, and half of it per address).  Either way
 * what a remote host can make us hold is bounded by our policy. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/log.h"
#include "core/conn_internal.h"

struct source_count {
	uint8_t addr[16];
	unsigned pending;
};

/* At most `max` sources can hold a slot, so a fixed table does. */
struct pending_budget {
	struct source_count *sources;
	unsigned slots, total;
};

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_budget channels, streams;

static struct source_count *source_find(struct pending_budget *b, const uint8_t addr[16],
					bool create)
{
	struct source_count *free_slot = NULL;

	for (unsigned i = 0; i < b->slots; i++) {
		if (b->sources[i].pending && memcmp(b->sources[i].addr, addr, 16) == 0)
			return &b->sources[i];
		if (!b->sources[i].pending && !free_slot)
			free_slot = &b->sources[i];
	}
	if (free_slot && create)
		memcpy(free_slot->addr, addr, 16);
	return create ? free_slot : NULL;
}

static bool table_ready(struct pending_budget *b, unsigned max)
{
	if (b->sources)
		return true;
	b->sources = calloc(max, sizeof(*b->sources));
	b->slots = b->sources ? max : 0;
	return b->sources != NULL;
}

/* The budget a channel counts in, and its limits. */
static struct pending_budget *budget_of(const struct sdp_conn *c, unsigned *max,
					unsigned *per_source)
{
	if (c->budget_stream) {
		*max = sdp_tun.pending_streams_max;
		*per_source = (*max + 1) / 2;
		return &streams;
	}
	*max = sdp_tun.pending_max;
	*per_source = sdp_tun.pending_per_source;
	return &channels;
}

bool pending_budget_take(struct sdp_conn *c)
{
	struct source_count *src;
	struct pending_budget *b;
	unsigned max, per_source;
	bool ok = false;

	pthread_mutex_lock(&budget_lock);
	b = budget_of(c, &max, &per_source);
	if (table_ready(b, max) && b->total < max) {
		src = source_find(b, c->tuple.src_addr, true);
		if (src && src->pending < per_source) {
			src->pending++;
			b->total++;
			c->budget_held = true;
			ok = true;
		}
	}
	pthread_mutex_unlock(&budget_lock);
	return ok;
}

void pending_budget_give(struct sdp_conn *c)
{
	struct source_count *src;
	struct pending_budget *b;
	unsigned max, per_source;

	if (!c->budget_held)
		return;
	pthread_mutex_lock(&budget_lock);
	b = budget_of(c, &max, &per_source);
	src = source_find(b, c->tuple.src_addr, false);
	if (src && src->pending)
		src->pending--;
	if (b->total)
		b->total--;
	c->budget_held = false;
	pthread_mutex_unlock(&budget_lock);
}

/* The pending budget: how many channels that no accept() has claimed yet a
 * process holds, in all and per client address (SDPSHIM_PENDING_MAX,
 * SDPSHIM_PENDING_PER_SOURCE).  Each holds our receive buffers pinned, so
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

/* At most pending_max sources can hold a slot, so a fixed table does. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static struct source_count *sources;
static unsigned source_slots, pending_total;

static struct source_count *source_find(const uint8_t addr[16], bool create)
{
	struct source_count *free_slot = NULL;

	for (unsigned i = 0; i < source_slots; i++) {
		if (sources[i].pending && memcmp(sources[i].addr, addr, 16) == 0)
			return &sources[i];
		if (!sources[i].pending && !free_slot)
			free_slot = &sources[i];
	}
	if (free_slot && create)
		memcpy(free_slot->addr, addr, 16);
	return create ? free_slot : NULL;
}

static bool table_ready(void)
{
	if (sources)
		return true;
	sources = calloc(sdp_tun.pending_max, sizeof(*sources));
	source_slots = sources ? sdp_tun.pending_max : 0;
	return sources != NULL;
}

bool pending_budget_take(struct sdp_conn *c)
{
	struct source_count *src;
	bool ok = false;

	pthread_mutex_lock(&budget_lock);
	if (table_ready() && pending_total < sdp_tun.pending_max) {
		src = source_find(c->tuple.src_addr, true);
		if (src && src->pending < sdp_tun.pending_per_source) {
			src->pending++;
			pending_total++;
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

	if (!c->budget_held)
		return;
	pthread_mutex_lock(&budget_lock);
	src = source_find(c->tuple.src_addr, false);
	if (src && src->pending)
		src->pending--;
	if (pending_total)
		pending_total--;
	c->budget_held = false;
	pthread_mutex_unlock(&budget_lock);
}

/* The phase of a channel (enum conn_phase): its names, the table of the
 * transitions core makes, and conn_set_phase(), the one writer of
 * c->phase and of the carrier that serves it (the open channel, or a
 * switch in progress).  An unexpected transition is logged (and asserted in a build
 * with SDPSHIM_DEBUG, make DEBUG=1); it is still made, as before. */
#include <assert.h>

#include "base/log.h"
#include "base/stats_shm.h"
#include "core/conn_internal.h"

const char *conn_phase_name(enum conn_phase phase)
{
	switch (phase) {
	case CONN_RESOLVING:      return "resolving";
	case CONN_TCP_CONNECTING: return "tcp_connecting";
	case CONN_AWAIT_ATTACH:   return "await_attach";
	case CONN_PENDING:        return "pending";
	case CONN_ATTACHING:      return "attaching";
	case CONN_OPEN:           return "open";
	case CONN_DRAINING:       return "draining";
	case CONN_SWITCHING:      return "switching";
	case CONN_FALLBACK:       return "fallback";
	case CONN_DEAD:           return "dead";
	case CONN_HELD:           return "held";
	case CONN_CLIMB_HALF:     return "climb_half";
	}
	return "unknown";
}

#define TO(phase) (1u << (phase))

/* Bit per phase each phase may move to (the comment above enum conn_phase). */
static const unsigned phase_next[] = {
	[CONN_RESOLVING]      = TO(CONN_TCP_CONNECTING) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_TCP_CONNECTING] = TO(CONN_AWAIT_ATTACH) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_AWAIT_ATTACH]   = TO(CONN_OPEN) | TO(CONN_DRAINING) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_PENDING]        = TO(CONN_ATTACHING) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_ATTACHING]      = TO(CONN_OPEN) | TO(CONN_DRAINING) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_OPEN]           = TO(CONN_SWITCHING) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_DRAINING]       = TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_SWITCHING]      = TO(CONN_FALLBACK) | TO(CONN_HELD) | TO(CONN_DEAD),
	[CONN_FALLBACK]       = 0,
	[CONN_DEAD]           = TO(CONN_DEAD), /* the teardown marks a dead channel again */
	[CONN_HELD]           = TO(CONN_CLIMB_HALF) | TO(CONN_FALLBACK) | TO(CONN_DEAD),
	[CONN_CLIMB_HALF]     = TO(CONN_OPEN) | TO(CONN_HELD) | TO(CONN_DEAD),
};

bool conn_phase_transition_ok(enum conn_phase from, enum conn_phase to)
{
	if ((unsigned)from >= sizeof(phase_next) / sizeof(phase_next[0]) ||
	    (unsigned)to > CONN_CLIMB_HALF)
		return false;
	return (phase_next[from] & TO(to)) != 0;
}

static const struct conn_carrier *carrier_of(enum conn_phase phase)
{
	if (phase == CONN_SWITCHING)
		return &switch_carrier;
	if (phase == CONN_HELD || phase == CONN_CLIMB_HALF)
		return &held_carrier;
	if (phase == CONN_DRAINING)
		return &drain_carrier;
	return &channel_carrier;
}

static uint8_t published_state(enum conn_phase phase)
{
	switch (phase) {
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING: return STATS_CHAN_CONNECTING;
	case CONN_AWAIT_ATTACH:
	case CONN_PENDING:
	case CONN_ATTACHING:      return STATS_CHAN_BINDING;
	case CONN_OPEN:           return STATS_CHAN_OPEN;
	case CONN_DRAINING:
	case CONN_SWITCHING:      return STATS_CHAN_MOVING;
	case CONN_FALLBACK:       return STATS_CHAN_FALLBACK;
	case CONN_DEAD:           return STATS_CHAN_CLOSED;
	case CONN_HELD:           return STATS_CHAN_HELD;
	case CONN_CLIMB_HALF:     return STATS_CHAN_CLIMBING;
	}
	return STATS_CHAN_NONE;
}

void conn_publish_phase(struct sdp_conn *c)
{
	if (c->st)
		__atomic_store_n(&c->st->state, published_state(c->phase), __ATOMIC_RELAXED);
}

void conn_phase_start(struct sdp_conn *c, enum conn_phase phase)
{
	c->phase = phase;
	c->carrier = carrier_of(phase);
	conn_publish_phase(c);
}

void conn_set_phase(struct sdp_conn *c, enum conn_phase to)
{
	if (!conn_phase_transition_ok(c->phase, to)) {
		sdp_warn("channel phase: unexpected transition %s -> %s",
			 conn_phase_name(c->phase), conn_phase_name(to));
#ifdef SDPSHIM_DEBUG
		assert(!"unexpected channel phase transition");
#endif
	}
	c->phase = to;
	c->carrier = carrier_of(to);
	conn_publish_phase(c);
}

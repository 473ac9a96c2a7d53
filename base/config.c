/* SDPSHIM_* tunables: defaults, parsing and range checks. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "base/config.h"
#include "base/log.h"

struct sdp_tunables sdp_tun;

struct tunable_spec {
	const char *env;
	int64_t min, max, def;
	void (*store)(int64_t value);
};

#define STORE_FN(field, type) \
	static void store_##field(int64_t v) { sdp_tun.field = (type)v; }
STORE_FN(connect_timeout_ms, unsigned)
STORE_FN(negcache_ttl_ms, unsigned)
STORE_FN(spin_us, unsigned)
STORE_FN(climb, unsigned)
STORE_FN(climb_wait_ms, unsigned)
STORE_FN(climb_fork, unsigned)
STORE_FN(debug_climb_lie, unsigned)
STORE_FN(debug_holder_delay_ms, unsigned)
STORE_FN(debug_adopt_delay_ms, unsigned)
STORE_FN(debug_wait_gap_ms, unsigned)
STORE_FN(debug_link_jobs_max, unsigned)
STORE_FN(debug_accept_delay_ms, unsigned)
STORE_FN(debug_orphan_delay_ms, unsigned)
STORE_FN(debug_no_random, unsigned)
STORE_FN(buf_size, unsigned)
STORE_FN(buf_count, unsigned)
STORE_FN(zcopy_thresh, int64_t)
STORE_FN(zcopy_nb_wait_ms, unsigned)
STORE_FN(zcopy_answer_ms, unsigned)
STORE_FN(debug_zc_corrupt, unsigned)
STORE_FN(ack_timeout, unsigned)
STORE_FN(debug_fail_after, int64_t)
STORE_FN(debug_attach_delay_ms, unsigned)
STORE_FN(debug_fail_attach, unsigned)
STORE_FN(debug_fail_open, unsigned)
STORE_FN(switch_timeout_ms, unsigned)
STORE_FN(linger_ms, unsigned)
STORE_FN(stall_ms, unsigned)
STORE_FN(pending_ttl_ms, unsigned)
STORE_FN(pending_max, unsigned)
STORE_FN(pending_per_source, unsigned)
STORE_FN(stats_slots, unsigned)
STORE_FN(pending_streams_max, unsigned)
STORE_FN(links, unsigned)
STORE_FN(open_commits, unsigned)
STORE_FN(link_bufs, unsigned)
STORE_FN(link_streams, unsigned)
STORE_FN(link_max, unsigned)
STORE_FN(link_idle_ms, unsigned)
STORE_FN(link_probe_ms, unsigned)
STORE_FN(link_slots, unsigned)
STORE_FN(pin_budget, uint64_t)
STORE_FN(child_device_watch, unsigned)
#undef STORE_FN

static const struct tunable_spec tunable_specs[] = {
	{ "SDPSHIM_CONNECT_TIMEOUT_MS", 1, 600000, 500, store_connect_timeout_ms },
	{ "SDPSHIM_NEGCACHE_TTL_MS", 0, 86400000, 60000, store_negcache_ttl_ms },
	{ "SDPSHIM_SPIN_US", 0, 1000000, 0, store_spin_us },
	{ "SDPSHIM_BUF_SIZE", 4096, 1048576, 32768, store_buf_size },
	{ "SDPSHIM_BUF_COUNT", 4, 1024, 32, store_buf_count },
	{ "SDPSHIM_ZCOPY_THRESH", 0, INT64_C(1) << 40, 262144, store_zcopy_thresh },
	{ "SDPSHIM_ZCOPY_NB_WAIT_MS", 0, 60000, 20, store_zcopy_nb_wait_ms },
	{ "SDPSHIM_ZCOPY_ANSWER_MS", 10, 600000, 5000, store_zcopy_answer_ms },
	{ "SDPSHIM_DEBUG_ZC_CORRUPT", 0, 3, 0, store_debug_zc_corrupt },
	{ "SDPSHIM_ACK_TIMEOUT", 0, 31, 0, store_ack_timeout },
	{ "SDPSHIM_DEBUG_FAIL_AFTER", 0, INT64_C(1) << 50, 0, store_debug_fail_after },
	{ "SDPSHIM_DEBUG_ATTACH_DELAY_MS", 0, 60000, 0, store_debug_attach_delay_ms },
	{ "SDPSHIM_DEBUG_FAIL_ATTACH", 0, 1, 0, store_debug_fail_attach },
	{ "SDPSHIM_DEBUG_FAIL_OPEN", 0, 1000000, 0, store_debug_fail_open },
	{ "SDPSHIM_SWITCH_TIMEOUT_MS", 10, 600000, 10000, store_switch_timeout_ms },
	{ "SDPSHIM_LINGER_MS", 0, 3600000, 30000, store_linger_ms },
	{ "SDPSHIM_STALL_MS", 0, 3600000, 30000, store_stall_ms },
	{ "SDPSHIM_PENDING_TTL_MS", 100, 3600000, 30000, store_pending_ttl_ms },
	{ "SDPSHIM_PENDING_MAX", 1, 65536, 128, store_pending_max },
	{ "SDPSHIM_PENDING_PER_SOURCE", 1, 65536, 64, store_pending_per_source },
	{ "SDPSHIM_STATS_SLOTS", 16, 1 << 20, 65536, store_stats_slots },
	{ "SDPSHIM_PENDING_STREAMS_MAX", 2, 1 << 20, 8192, store_pending_streams_max },
	{ "SDPSHIM_LINKS", 0, 1, 1, store_links },
	{ "SDPSHIM_OPEN_COMMITS", 0, 1, 1, store_open_commits },
	{ "SDPSHIM_LINK_BUFS", 8, 1024, 64, store_link_bufs },
	{ "SDPSHIM_LINK_STREAMS", 1, 4096, 1024, store_link_streams },
	{ "SDPSHIM_LINK_MAX", 1, 4096, 64, store_link_max },
	{ "SDPSHIM_LINK_IDLE_MS", 0, 86400000, 20000, store_link_idle_ms },
	{ "SDPSHIM_LINK_PROBE_MS", 0, 3600000, 10000, store_link_probe_ms },
	{ "SDPSHIM_LINK_SLOTS", 1, 65536, 256, store_link_slots },
	{ "SDPSHIM_CHILD_DEVICE_WATCH", 0, 1, 1, store_child_device_watch },
	{ "SDPSHIM_CLIMB", 0, 1, 1, store_climb },
	{ "SDPSHIM_CLIMB_WAIT_MS", 0, 60000, 1000, store_climb_wait_ms },
	{ "SDPSHIM_CLIMB_FORK", 0, 1, 1, store_climb_fork },
	{ "SDPSHIM_DEBUG_CLIMB_LIE", 0, 5, 0, store_debug_climb_lie },
	{ "SDPSHIM_DEBUG_HOLDER_DELAY_MS", 0, 10000, 0, store_debug_holder_delay_ms },
	{ "SDPSHIM_DEBUG_ADOPT_DELAY_MS", 0, 10000, 0, store_debug_adopt_delay_ms },
	{ "SDPSHIM_DEBUG_WAIT_GAP_MS", 0, 10000, 0, store_debug_wait_gap_ms },
	{ "SDPSHIM_DEBUG_LINK_JOBS_MAX", 0, 1000000, 0, store_debug_link_jobs_max },
	{ "SDPSHIM_DEBUG_ACCEPT_DELAY_MS", 0, 10000, 0, store_debug_accept_delay_ms },
	{ "SDPSHIM_DEBUG_ORPHAN_DELAY_MS", 0, 10000, 0, store_debug_orphan_delay_ms },
	{ "SDPSHIM_DEBUG_NO_RANDOM", 0, 1, 0, store_debug_no_random },
};

/* Sizes in bytes: a K, M or G suffix is accepted. */
static const struct tunable_spec size_tunable_specs[] = {
	/* 0 pins nothing: every connection stays on TCP (reason resources). */
	{ "SDPSHIM_PIN_BUDGET", 0, (int64_t)SDP_PIN_BUDGET_MAX, (int64_t)SDP_PIN_BUDGET_DEFAULT,
	  store_pin_budget },
};

bool tunable_parse_size(const char *text, uint64_t max, uint64_t *out)
{
	unsigned shift = 0;
	uint64_t v;
	char *end;

	if (!text || *text < '0' || *text > '9')
		return false; /* strtoull would take a sign or blanks */
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno)
		return false;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || v > (max >> shift))
		return false;
	*out = v << shift;
	return true;
}

static int load_one(const struct tunable_spec *spec, bool size)
{
	const char *text = getenv(spec->env);
	char *end;
	long long v;

	spec->store(spec->def);
	if (!text || !*text)
		return 0;
	if (size) {
		uint64_t bytes;

		if (!tunable_parse_size(text, (uint64_t)spec->max, &bytes) ||
		    bytes < (uint64_t)spec->min) {
			sdp_warn("%s='%.32s' is not a size in bytes in [%" PRId64 ", %" PRId64
				 "] (a K, M or G suffix may follow the digits); using %" PRId64,
				 spec->env, text, spec->min, spec->max, spec->def);
			return 1;
		}
		spec->store((int64_t)bytes);
		return 0;
	}
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || *end || v < spec->min || v > spec->max) {
		sdp_warn("%s='%.32s' is not an integer in [%" PRId64 ", %" PRId64 "]; using %" PRId64,
			 spec->env, text, spec->min, spec->max, spec->def);
		return 1;
	}
	spec->store(v);
	return 0;
}

int tunables_load_env(void)
{
	int bad = 0;

	for (size_t i = 0; i < sizeof(tunable_specs) / sizeof(tunable_specs[0]); i++)
		bad += load_one(&tunable_specs[i], false);
	for (size_t i = 0; i < sizeof(size_tunable_specs) / sizeof(size_tunable_specs[0]); i++)
		bad += load_one(&size_tunable_specs[i], true);
	return bad;
}

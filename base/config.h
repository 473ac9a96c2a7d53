/* Tunables of the RDMA channel and the path choice, read once from the
 * environment (SDPSHIM_*).  A bad value gets a one-line diagnostic and the
 * default.  Sizes (SDPSHIM_PIN_BUDGET) take a K, M or G suffix (binary). */
#ifndef SDPSHIM_CONFIG_H
#define SDPSHIM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct sdp_tunables {
	unsigned connect_timeout_ms; /* SDPSHIM_CONNECT_TIMEOUT_MS: bound on the RDMA attempt */
	unsigned negcache_ttl_ms;    /* SDPSHIM_NEGCACHE_TTL_MS */
	unsigned spin_us;            /* SDPSHIM_SPIN_US: busy-poll before sleeping */
	unsigned buf_size;           /* SDPSHIM_BUF_SIZE: bytes per receive buffer */
	unsigned buf_count;          /* SDPSHIM_BUF_COUNT: receive buffers per connection */
	int64_t  zcopy_thresh;       /* SDPSHIM_ZCOPY_THRESH: 0 disables zero-copy */
	unsigned zcopy_nb_wait_ms;   /* SDPSHIM_ZCOPY_NB_WAIT_MS: non-blocking zero-copy bound */
	unsigned zcopy_answer_ms;    /* SDPSHIM_ZCOPY_ANSWER_MS: bound on a peer's zero-copy answer */
	unsigned ack_timeout;        /* SDPSHIM_ACK_TIMEOUT: RC ack timeout exponent, 0 = rdma_cm's */
	unsigned debug_zc_corrupt;   /* SDPSHIM_DEBUG_ZC_CORRUPT: tests only, see zc_fill_ext */
	int64_t  debug_fail_after;   /* SDPSHIM_DEBUG_FAIL_AFTER: tests only, fail the QP after N bytes */
	unsigned debug_attach_delay_ms; /* SDPSHIM_DEBUG_ATTACH_DELAY_MS: tests only, hold a server's ATTACH */
	unsigned debug_fail_attach;  /* SDPSHIM_DEBUG_FAIL_ATTACH: tests only, fail the QP as ATTACH is posted */
	unsigned debug_fail_open;    /* SDPSHIM_DEBUG_FAIL_OPEN: tests only, fail the link as this
				      * process's Nth OPEN on a link is posted (core/link.c) */
	unsigned switch_timeout_ms;  /* SDPSHIM_SWITCH_TIMEOUT_MS: bound on a move to TCP before fork/exec */
	unsigned linger_ms;          /* SDPSHIM_LINGER_MS: background flush bound after close */
	unsigned stall_ms;           /* SDPSHIM_STALL_MS: send queue without a completion = failed, 0 = never */
	unsigned pending_ttl_ms;     /* SDPSHIM_PENDING_TTL_MS: unmatched server channels expire */
	unsigned pending_max;        /* SDPSHIM_PENDING_MAX: unclaimed server channels per process */
	unsigned pending_per_source; /* SDPSHIM_PENDING_PER_SOURCE: ... per client address */
	unsigned stats_slots;        /* SDPSHIM_STATS_SLOTS: connections visible to sdpshim stat */
	unsigned pending_streams_max; /* SDPSHIM_PENDING_STREAMS_MAX: ... streams on links */
	unsigned links;              /* SDPSHIM_LINKS: streams share a link per peer (1) or not (0) */
	unsigned open_commits;       /* SDPSHIM_OPEN_COMMITS: a linked stream's OPEN commits (1) */
	unsigned link_bufs;          /* SDPSHIM_LINK_BUFS: receive buffers (and send slots) per link */
	unsigned link_streams;       /* SDPSHIM_LINK_STREAMS: streams per link */
	unsigned link_max;           /* SDPSHIM_LINK_MAX: links (QPs) per process */
	unsigned link_idle_ms;       /* SDPSHIM_LINK_IDLE_MS: an unused client link closes after */
	unsigned link_probe_ms;      /* SDPSHIM_LINK_PROBE_MS: a link silent this long asks the
				      * peer's adapter whether it is there (0: never) */
	unsigned link_slots;         /* SDPSHIM_LINK_SLOTS: link records in the stats segment */
	unsigned debug_climb_lie;    /* SDPSHIM_DEBUG_CLIMB_LIE: tests only, this end lies in the
				      * climb (core/climb.c): 1 its MAC, 2 its cut, 3 a server
				      * that never answers a REQ, 4 a server that lets the
				      * attempt go at the PROVE (as a close there would), 5 a
				      * CHAL that claims 1 MiB buffers */
	unsigned debug_holder_delay_ms; /* SDPSHIM_DEBUG_HOLDER_DELAY_MS: tests only, a sharer's
				      * report of its own child to the owner goes this late
				      * (preload/fork_claim.c) */
	unsigned debug_adopt_delay_ms; /* SDPSHIM_DEBUG_ADOPT_DELAY_MS: tests only, a connect
				      * adopts its channel this late (preload/connect.c) */
	unsigned debug_link_jobs_max; /* SDPSHIM_DEBUG_LINK_JOBS_MAX: tests only, the most sends a
				       * link queues (0: its streams' credits' worth, core/link.c) */
	unsigned debug_wait_gap_ms; /* SDPSHIM_DEBUG_WAIT_GAP_MS: tests only, a counted wait
				      * keeps its stream's lock down this long before it
				      * sleeps (core/app_wake.c) */
	unsigned debug_accept_delay_ms; /* SDPSHIM_DEBUG_ACCEPT_DELAY_MS: tests only, an accept
				      * claims its channel this long after the kernel's
				      * accept returned (preload/connect.c) */
	unsigned debug_orphan_delay_ms; /* SDPSHIM_DEBUG_ORPHAN_DELAY_MS: tests only, an owner's
				      * close of a shared socket pauses this long between its
				      * fd and its orphan (preload/fork_handoff.c) */
	unsigned debug_no_random;    /* SDPSHIM_DEBUG_NO_RANDOM: tests only, every random
				      * source for a nonce fails (core/bind.c) */
	unsigned climb;              /* SDPSHIM_CLIMB: a stream a failover moved to TCP goes back
				      * to RDMA (1), or stays (0); a peer asking is refused */
	unsigned climb_fork;         /* SDPSHIM_CLIMB_FORK: a forked child alone with a stream
				      * climbs back to RDMA (1, the default); this process opens a
				      * rendezvous port for a peer's child (0: neither) */
	unsigned climb_wait_ms;      /* SDPSHIM_CLIMB_WAIT_MS: a forked child that takes over a
				      * stream waits this long for its climb before its first
				      * call goes on (0: it never waits) */
	unsigned child_device_watch; /* SDPSHIM_CHILD_DEVICE_WATCH: a forked child lets its
				      * inherited device files go when the device is removed */
	uint64_t pin_budget;         /* SDPSHIM_PIN_BUDGET: bytes this process may pin, before the
				      * RLIMIT_MEMLOCK cap (base/pin_budget.c) */
};

#define SDP_PIN_BUDGET_DEFAULT (UINT64_C(256) << 20)
#define SDP_PIN_BUDGET_MAX     (UINT64_C(1) << 50)

extern struct sdp_tunables sdp_tun;

/* Loads defaults then SDPSHIM_* overrides.  Returns the number of bad values. */
int tunables_load_env(void);

/* "64M" -> 67108864: decimal digits and an optional K, M or G (k, m, g;
 * powers of 1024).  False for anything else, or past max. */
bool tunable_parse_size(const char *text, uint64_t max, uint64_t *out);

#endif

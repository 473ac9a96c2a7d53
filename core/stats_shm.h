/* Live counters per process and per connection, in a shared-memory segment
 * per process (/dev/shm/sdpshim-<uid>-<pid>.stats) that `sdpshim stat` reads.
 * One serializer turns a connection record into the JSON the stats file and
 * `sdpshim stat --json` print; its field names are a stable interface. */
#ifndef SDPSHIM_STATS_SHM_H
#define SDPSHIM_STATS_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "ipoib_fallback/reason.h"

#define STATS_MAGIC   0x3154415453504453ULL /* "SDPSTAT1" */
#define STATS_VERSION 1
#define STATS_REASON_SLOTS 32

enum stats_role { STATS_ROLE_NONE = 0, STATS_ROLE_CLIENT = 1, STATS_ROLE_SERVER = 2,
		  STATS_ROLE_LISTENER = 3 };

struct stats_addr {
	uint16_t family; /* AF_INET, AF_INET6 or 0 */
	uint16_t port;   /* host order */
	uint8_t  addr[16];
};

/* One connection.  Identity fields change under `seq` (odd while writing);
 * counters are monotonic and updated with relaxed atomics. */
struct sdp_conn_stats {
	_Atomic uint32_t in_use;
	_Atomic uint32_t seq;
	int32_t  fd;
	uint8_t  role;      /* enum stats_role */
	uint8_t  path;      /* enum sdp_path */
	uint16_t reason;    /* enum sdp_reason */
	uint8_t  negcached; /* the decision came from the negative cache */
	uint8_t  state;     /* transport-specific state code */
	uint16_t pad;
	struct stats_addr local, remote;
	uint64_t opened_ms; /* CLOCK_REALTIME */
	_Atomic uint64_t bytes_sent, bytes_received;
	_Atomic uint64_t copy_bytes_sent, copy_bytes_received;
	_Atomic uint64_t zcopy_bytes_sent, zcopy_bytes_received;
	_Atomic uint64_t zcopy_ops, zcopy_cancels;
	_Atomic uint64_t mr_cache_hits, mr_cache_misses;
	_Atomic uint64_t credit_updates_sent, credit_stalls;
	_Atomic uint32_t tx_credits, rx_posted;
	_Atomic uint32_t switches;
	uint32_t pad2;
};

struct sdp_proc_stats {
	uint64_t magic;
	uint32_t version;
	uint32_t slot_count;
	int32_t  pid;
	uint32_t uid;
	uint64_t start_ms;
	char     comm[64];
	_Atomic uint64_t conns_by_path[3];
	_Atomic uint64_t conns_by_reason[STATS_REASON_SLOTS];
	_Atomic uint64_t bytes_sent, bytes_received;
	_Atomic uint64_t negcache_hits;
	_Atomic uint32_t alloc_hint;
	uint32_t pad;
	struct sdp_conn_stats slot[];
};

struct stats_seg {
	struct sdp_proc_stats *hdr;
	size_t map_len;
	char path[256];
	bool owner;
};

/* Directory holding segments: $SDPSHIM_RUN_DIR or /dev/shm. */
const char *stats_dir(void);

/* Writer side (inside the preloaded process).  Returns 0 or -errno. */
int stats_seg_create(struct stats_seg *seg, const char *dir, pid_t pid, uid_t uid,
		     const char *comm, uint32_t slots);
void stats_seg_destroy(struct stats_seg *seg); /* unmaps and unlinks */
void stats_seg_detach(struct stats_seg *seg);  /* unmaps only (forked child) */
/* Unlinks only, keeping the mapping: at exit other threads may still count
 * into (and release) slots, so `sdpshim stat` stops listing the process
 * while the memory stays valid. */
void stats_seg_unlink(struct stats_seg *seg);
struct sdp_conn_stats *stats_slot_alloc(struct stats_seg *seg);
void stats_slot_release(struct stats_seg *seg, struct sdp_conn_stats *slot);
void stats_slot_begin(struct sdp_conn_stats *slot);  /* identity update begins */
void stats_slot_end(struct sdp_conn_stats *slot);    /* ... and ends */
void stats_addr_set(struct stats_addr *out, const struct sockaddr *sa);

/* Reader side (sdpshim stat).  Returns 0 or -errno; -ESRCH for a dead pid. */
int stats_seg_open_ro(struct stats_seg *seg, const char *path);
/* Consistent snapshot of one slot; false if the slot is free. */
bool stats_slot_snapshot(const struct sdp_conn_stats *slot, struct sdp_conn_stats *out);

/* Text helpers shared by every printer. */
void stats_addr_format(const struct stats_addr *a, char *buf, size_t len); /* ip:port, [ip6]:port */
const char *stats_role_name(uint8_t role);
/* One JSON object, no trailing newline; returns length or -1 if it did not fit. */
int stats_conn_json(const struct sdp_conn_stats *s, pid_t pid, const char *comm,
		    uint64_t closed_ms, char *buf, size_t len);

uint64_t stats_now_ms(void);

#endif

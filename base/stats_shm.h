/* Live counters per process and per connection, in a shared-memory segment
 * per process (/dev/shm/sdpshim-<euid>-<pid>.stats) that `sdpshim stat` reads.
 * One serializer turns a connection record into the JSON the stats file and
 * `sdpshim stat --json` print; its field names are a stable interface.
 *
 * The segment lives in a directory every user can write (/dev/shm), so
 * neither side trusts the name or the bytes behind it (issue 13):
 *
 * - The writer (stats_seg_create) creates the file with O_CREAT|O_EXCL|
 *   O_NOFOLLOW, mode 0600, and checks the open file before it maps it
 *   (fstat: owned by us, regular, one link, the size it gave it).  Only its
 *   owner (or root) can then write or truncate it, so no other user can
 *   make the writer's stores fault (SIGBUS) or read what it counts.
 * - When the name is taken (EEXIST): the name carries our own pid, so no
 *   live process but this one can have made it.  A regular file with one
 *   link that we own is therefore stale (a process that died with this pid,
 *   or this process before an exec): it is unlinked and the create retried
 *   once.  Anything else there (another user's file, a symlink, a FIFO, a
 *   file with more links) is never opened: the segment takes a fresh
 *   unpredictable name, sdpshim-<uid>-<pid>-<16 hex digits>.stats
 *   (getrandom), created the same way, and the library warns once (`taken`
 *   says what was there).  If that fails too, the process runs without a
 *   segment after a one-line warning; only `sdpshim stat` misses it.
 * - The writer keeps the geometry (slot count, allocation hint, mapped
 *   length) in struct stats_seg, in private memory.  It writes the shared
 *   header for readers and never reads it back.
 * - The reader (stats_seg_read) never maps a segment.  It lstat()s the name,
 *   opens it O_RDONLY|O_NONBLOCK|O_NOFOLLOW and fstat()s it: a regular file
 *   owned by the uid in its name.  It pread()s the header once into private
 *   memory and each live slot and link record into a local struct, and checks
 *   every field it uses (stats_header_parse, stats_slot_parse,
 *   stats_link_parse).  A file truncated or rewritten under it gives a short
 *   read or a skipped record, never SIGBUS, a wild index or a hang.
 *
 * Layout (version 2): struct sdp_proc_stats, then slot_count connection
 * slots (struct sdp_conn_stats), then link_count link records (struct
 * sdp_link_stats: one per RDMA link, a carrier of several streams). */
#ifndef SDPSHIM_STATS_SHM_H
#define SDPSHIM_STATS_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/reason.h"

#define STATS_MAGIC   0x3154415453504453ULL /* "SDPSTAT1" */
#define STATS_VERSION 6 /* 2: link records, the pinned-memory budget; 3: msgs_received_by_app,
                          * progress_wakeups; 4: climbs, tcp_bytes_sent/received; 5: moved_ms;
                          * 6: a link's probes_sent */
#define STATS_REASON_SLOTS 32
#define STATS_SLOTS_MAX (1u << 20) /* the largest SDPSHIM_STATS_SLOTS (base/config.c) */
#define STATS_LINKS_MAX (1u << 16) /* the largest SDPSHIM_LINK_SLOTS (base/config.c) */

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
	uint8_t  state;     /* enum stats_chan_state: what the RDMA channel is doing */
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
	_Atomic uint32_t switches;  /* path moves, both ways */
	_Atomic uint32_t climbs;    /* of them, moves back to RDMA (core/climb.c) */
	/* Of bytes_sent/received, those the app's calls moved through the
	 * kernel TCP socket (the rest went over RDMA). */
	_Atomic uint64_t tcp_bytes_sent, tcp_bytes_received;
	_Atomic uint64_t moved_ms;  /* CLOCK_REALTIME of the latest path move; 0: none */
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
	uint32_t link_count; /* link records after the slots (was the allocation hint in
			      * version 1, now the writer's own) */
	uint32_t reserved;   /* 0 */
	/* The pinned-memory budget (base/pin_budget.h), as pin_budget_publish
	 * stores it: the budget in effect, the bytes taken now, the refusals. */
	_Atomic uint64_t pin_budget;
	_Atomic uint64_t pinned_bytes;
	_Atomic uint64_t budget_refusals;
	/* Times the progress thread woke (one epoll_wait return): against the
	 * messages taken in, how often the kernel stood on the data path. */
	_Atomic uint64_t progress_wakeups;
	struct sdp_conn_stats slot[];
};

/* What a connection's RDMA channel is doing (sdp_conn_stats.state), as
 * core publishes it from the channel's phase.  Stable codes and names. */
enum stats_chan_state {
	STATS_CHAN_NONE = 0,       /* no channel: kernel TCP from the start */
	STATS_CHAN_CONNECTING = 1, /* rdma_cm or the link's OPEN, then the kernel connect */
	STATS_CHAN_BINDING = 2,    /* proving the channel belongs to the TCP connection */
	STATS_CHAN_OPEN = 3,       /* bytes flow over RDMA */
	STATS_CHAN_MOVING = 4,     /* moving to TCP (drain, SWITCH records) */
	STATS_CHAN_FALLBACK = 5,   /* abandoned: the socket uses TCP */
	STATS_CHAN_CLOSED = 6,     /* torn down */
	STATS_CHAN_HELD = 7,       /* on TCP after a failover, to climb back */
	STATS_CHAN_CLIMBING = 8,   /* climbed: the TCP bytes before the cut are read first */
};

enum stats_link_role { STATS_LINK_CLIENT = 1, STATS_LINK_SERVER = 2 };
enum stats_link_state { STATS_LINK_CONNECTING = 0, STATS_LINK_UP = 1, STATS_LINK_FAILED = 2,
			STATS_LINK_CLOSING = 3 };

/* One link: an RDMA connection to a peer process that carries several
 * streams (issue 15).  As for a connection slot, the identity fields (role,
 * state, addresses, opened_ms) change under `seq` (odd while writing:
 * stats_link_begin/end); the counters and gauges are updated with relaxed
 * atomics at any time. */
struct sdp_link_stats {
	_Atomic uint32_t in_use; /* 0 free, 2 being set up, 1 live */
	_Atomic uint32_t seq;
	uint8_t  role;           /* enum stats_link_role */
	uint8_t  state;          /* enum stats_link_state */
	uint16_t pad;            /* 0 */
	struct stats_addr local, peer;
	uint32_t pad2;           /* 0 */
	uint64_t opened_ms;      /* CLOCK_REALTIME */
	_Atomic uint32_t streams, streams_max;         /* open now; the most it may carry */
	_Atomic uint64_t pinned_bytes;                 /* registered for this link */
	_Atomic uint32_t credits_total, credits_in_use;
	_Atomic uint64_t msgs_sent, msgs_received;
	_Atomic uint64_t bytes_sent, bytes_received;
	_Atomic uint64_t streams_opened;               /* since the link came up */
	_Atomic uint64_t msgs_received_by_app;         /* of msgs_received: taken in by an app thread */
	_Atomic uint64_t probes_sent;                  /* liveness probes: the peer was silent */
};

/* The writer's segment.  hdr is the shared mapping: written, never read back
 * for anything that indexes or sizes (that is slot_count, alloc_hint,
 * link_count, link_hint and map_len, here in private memory). */
struct stats_seg {
	struct sdp_proc_stats *hdr;
	size_t map_len;
	uint32_t slot_count;
	uint32_t alloc_hint;
	uint32_t link_count;
	_Atomic uint32_t link_hint; /* stats_link_alloc takes no caller lock */
	char path[256];
	char taken[96]; /* "" or what held the usual name ("a file of uid 65534") */
	bool owner;
};

/* Directory holding segments: $SDPSHIM_RUN_DIR or /dev/shm. */
const char *stats_dir(void);

/* Writer side (inside the preloaded process): a segment of `slots`
 * connection slots (1..STATS_SLOTS_MAX) and `links` link records
 * (1..STATS_LINKS_MAX).  Returns 0 or -errno; on 0, seg->taken is set when
 * the usual name was taken and seg->path is the fallback name (see above). */
int stats_seg_create(struct stats_seg *seg, const char *dir, pid_t pid, uid_t uid,
		     const char *comm, uint32_t slots, uint32_t links);
void stats_seg_destroy(struct stats_seg *seg); /* unmaps and unlinks */
void stats_seg_detach(struct stats_seg *seg);  /* unmaps only (forked child) */
/* Unlinks only, keeping the mapping: at exit other threads may still count
 * into (and release) slots, so `sdpshim stat` stops listing the process
 * while the memory stays valid. */
void stats_seg_unlink(struct stats_seg *seg);
/* The process's own segment, for writers below the preload that have no
 * slot handed to them (core's links allocate their records here): set by
 * the preload once it created the segment; NULL before that, without one,
 * and in a forked child until it made its own.  The segment stays mapped
 * while it is current. */
void stats_seg_set_current(struct stats_seg *seg);
struct stats_seg *stats_seg_current(void);
struct sdp_conn_stats *stats_slot_alloc(struct stats_seg *seg);
void stats_slot_release(struct stats_seg *seg, struct sdp_conn_stats *slot);
void stats_slot_begin(struct sdp_conn_stats *slot);  /* identity update begins */
void stats_slot_end(struct sdp_conn_stats *slot);    /* ... and ends */
/* A link record, zeroed, seq even, opened_ms now, in_use 1; NULL when all
 * link_count are taken.  Safe from any thread without a lock (each record is
 * claimed by compare-and-swap).  Release it when the link is gone. */
struct sdp_link_stats *stats_link_alloc(struct stats_seg *seg);
void stats_link_release(struct stats_seg *seg, struct sdp_link_stats *link);
void stats_link_begin(struct sdp_link_stats *link);  /* identity update begins */
void stats_link_end(struct sdp_link_stats *link);    /* ... and ends */
void stats_addr_set(struct stats_addr *out, const struct sockaddr *sa);

/* Reader side (sdpshim stat).  A segment's header, copied and checked: comm
 * is NUL-terminated printable ASCII without '"' or '\\'. */
struct stats_proc_info {
	pid_t pid;
	uid_t uid;
	uint32_t slot_count; /* 1..STATS_SLOTS_MAX, and the slots fit the image */
	uint32_t link_count; /* 1..STATS_LINKS_MAX, and the link records fit after them */
	uint64_t start_ms;
	char comm[65];
	uint64_t conns_by_path[3];
	uint64_t conns_by_reason[STATS_REASON_SLOTS];
	uint64_t bytes_sent, bytes_received, negcache_hits;
	uint64_t pin_budget, pinned_bytes, budget_refusals;
	uint64_t progress_wakeups;
};

/* One process as read: its header and private copies of its live slots
 * and live link records. */
struct stats_snapshot {
	struct stats_proc_info info;
	struct sdp_conn_stats *conn;
	size_t count;
	struct sdp_link_stats *link;
	size_t link_count;
};

enum stats_image_error {
	STATS_IMAGE_OK,
	STATS_IMAGE_SHORT,       /* fewer bytes than a header */
	STATS_IMAGE_BAD_MAGIC,
	STATS_IMAGE_BAD_VERSION,
	STATS_IMAGE_BAD_SLOTS,   /* slot_count 0, over STATS_SLOTS_MAX, or past the image */
	STATS_IMAGE_BAD_PID,     /* pid <= 0 */
	STATS_IMAGE_BAD_LINKS,   /* link_count 0, over STATS_LINKS_MAX, or past the image */
};
const char *stats_image_error_text(enum stats_image_error err);

/* The parsers, on bytes already copied into private memory (fuzzed by
 * tests/fuzz/fuzz_stats.c).  stats_header_parse reads the header from the
 * first len bytes of buf, of an image of image_len bytes in all, into *out
 * (written only on OK).  stats_slot_parse copies one slot from the first
 * len bytes of buf into *out and says whether it is a live, consistent slot
 * (in_use 1, seq even) whose role, path, reason and address families are in
 * range; *out is written either way when len suffices.  stats_link_parse
 * does the same for a link record: in_use 1, seq even, role client or
 * server, a known state, known address families, pads 0. */
enum stats_image_error stats_header_parse(const void *buf, size_t len, uint64_t image_len,
					  struct stats_proc_info *out);
bool stats_slot_parse(const void *buf, size_t len, struct sdp_conn_stats *out);
bool stats_link_parse(const void *buf, size_t len, struct sdp_link_stats *out);
/* A whole image in buf: its header, its slot i (false past slot_count),
 * its link record i (false past link_count). */
enum stats_image_error stats_image_parse(const void *buf, size_t len, struct stats_proc_info *out);
bool stats_image_slot(const void *buf, size_t len, const struct stats_proc_info *info, uint32_t i,
		      struct sdp_conn_stats *out);
bool stats_image_link(const void *buf, size_t len, const struct stats_proc_info *info, uint32_t i,
		      struct sdp_link_stats *out);
/* Byte offset of slot i in an image (= the end of the slots, with i slots). */
size_t stats_seg_len(uint32_t slots);
/* Byte offset of link record i in an image of `slots` slots (= the image's
 * length, with i link records). */
size_t stats_link_off(uint32_t slots, uint32_t i);

/* Reads the segment at path, which must be a regular file owned by `owner`
 * whose header names `pid`.  Returns 0 with *snap filled (free it with
 * stats_snapshot_free), -ENOENT if it vanished, -ESRCH if it is valid but its
 * process is dead (the caller may unlink it), or another -errno with a
 * one-phrase reason in why ("not a regular file (a fifo)"). */
int stats_seg_read(const char *path, uid_t owner, pid_t pid, struct stats_snapshot *snap,
		   char *why, size_t why_len);
void stats_snapshot_free(struct stats_snapshot *snap);

/* Text helpers shared by every printer. */
/* A process name as it may go inside a JSON string: at most raw_len bytes of
 * raw (or up to its NUL), each control, non-ASCII, '"' or '\\' byte as '_'. */
void stats_comm_copy(const char *raw, size_t raw_len, char *out, size_t len);
void stats_addr_format(const struct stats_addr *a, char *buf, size_t len); /* ip:port, [ip6]:port */
const char *stats_role_name(uint8_t role);
const char *stats_link_role_name(uint8_t role);   /* "client", "server" */
const char *stats_link_state_name(uint8_t state); /* "connecting", "up", "failed", "closing" */
const char *stats_chan_state_name(uint8_t state); /* "none", "connecting", ..., "climbing" */
/* One JSON object, no trailing newline; returns length or -1 if it did not fit. */
int stats_conn_json(const struct sdp_conn_stats *s, pid_t pid, const char *comm,
		    uint64_t closed_ms, char *buf, size_t len);
/* One link as a JSON object, the same way. */
int stats_link_json(const struct sdp_link_stats *l, char *buf, size_t len);

uint64_t stats_now_ms(void);

/* Application bytes that went through the kernel TCP socket: counted as
 * bytes and as TCP bytes (st may be NULL).  The TCP stream (preload) and
 * the channel's own TCP I/O (core: held, switching) both count here. */
static inline void stats_count_tcp(struct sdp_conn_stats *st, bool sent, uint64_t n)
{
	if (!st || !n)
		return;
	atomic_fetch_add_explicit(sent ? &st->bytes_sent : &st->bytes_received, n,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(sent ? &st->tcp_bytes_sent : &st->tcp_bytes_received, n,
				  memory_order_relaxed);
}

#endif

/* The writer's side of the per-process shared-memory stats segment:
 * exclusive creation with its checks, the fallback name, slot and link record
 * allocation from private geometry; and the text helpers and the JSON
 * serializers every printer shares.  The reader is base/stats_read.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/stats_shm.h"

const char *stats_dir(void)
{
	const char *dir = getenv("SDPSHIM_RUN_DIR");

	return (dir && *dir) ? dir : "/dev/shm";
}

uint64_t stats_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

_Static_assert(sizeof(struct sdp_proc_stats) == 440, "header layout (tests/fuzz/fuzz_stats.c)");
_Static_assert(sizeof(struct sdp_conn_stats) == 208, "slot layout");
_Static_assert(sizeof(struct sdp_link_stats) == 144, "link record layout");
_Static_assert(sizeof(struct sdp_link_stats) % 8 == 0 && sizeof(struct sdp_conn_stats) % 8 == 0,
	       "records stay 8-byte aligned");

size_t stats_seg_len(uint32_t slots)
{
	return sizeof(struct sdp_proc_stats) + (size_t)slots * sizeof(struct sdp_conn_stats);
}

size_t stats_link_off(uint32_t slots, uint32_t i)
{
	return stats_seg_len(slots) + (size_t)i * sizeof(struct sdp_link_stats);
}

/* Raw syscalls for open and close: this runs inside the preload, under our
 * own hooks.  Returns an fd or -errno. */
static int open_exclusive(const char *path)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path,
			      O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	return fd < 0 ? -errno : fd;
}

/* A regular file with one link that we own.  Under a name that carries our
 * own pid, such a file is stale (see the header). */
static bool stale_own_file(const char *path, uid_t uid)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid &&
	       st.st_nlink == 1;
}

static const char *file_kind(mode_t mode)
{
	if (S_ISREG(mode))  return "file";
	if (S_ISLNK(mode))  return "symbolic link";
	if (S_ISFIFO(mode)) return "fifo";
	if (S_ISDIR(mode))  return "directory";
	if (S_ISSOCK(mode)) return "socket";
	return "device";
}

/* "a fifo of uid 65534": what holds a name we will not use. */
static void describe_taken(const char *path, char *out, size_t len)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		snprintf(out, len, "something that vanished");
	else if (S_ISREG(st.st_mode) && st.st_nlink != 1)
		snprintf(out, len, "a file of uid %u with %lu links", (unsigned)st.st_uid,
			 (unsigned long)st.st_nlink);
	else
		snprintf(out, len, "a %s of uid %u", file_kind(st.st_mode), (unsigned)st.st_uid);
}

#ifndef GRND_INSECURE
#define GRND_INSECURE 0x0004 /* Linux >= 5.6 */
#endif

/* 16 hex digits nobody can guess: getrandom, never blocking.  Without it,
 * the clock and an address: O_EXCL still keeps the file ours, only a guess
 * could then make us run without a segment. */
static void random_hex(char out[17])
{
	uint64_t v;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v) &&
	    getrandom(&v, sizeof(v), GRND_INSECURE) != (ssize_t)sizeof(v)) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

static int seg_name(struct stats_seg *seg, const char *dir, uid_t uid, pid_t pid,
		    const char *suffix)
{
	int n = snprintf(seg->path, sizeof(seg->path), "%s/sdpshim-%u-%d%s.stats", dir,
			 (unsigned)uid, (int)pid, suffix);

	return (n < 0 || n >= (int)sizeof(seg->path)) ? -ENAMETOOLONG : 0;
}

/* The usual name, or a fresh unpredictable one when it is held by a file we
 * must not use.  Returns an fd of a file this call created, or -errno. */
static int open_fresh(struct stats_seg *seg, const char *dir, uid_t uid, pid_t pid)
{
	char hex[17], suffix[18];
	int fd, err = seg_name(seg, dir, uid, pid, "");

	if (err)
		return err;
	fd = open_exclusive(seg->path);
	if (fd == -EEXIST && stale_own_file(seg->path, uid) && unlink(seg->path) == 0)
		fd = open_exclusive(seg->path);
	if (fd != -EEXIST)
		return fd;
	describe_taken(seg->path, seg->taken, sizeof(seg->taken));
	for (int tries = 0; tries < 4 && fd == -EEXIST; tries++) {
		random_hex(hex);
		snprintf(suffix, sizeof(suffix), "-%s", hex);
		err = seg_name(seg, dir, uid, pid, suffix);
		if (err)
			return err;
		fd = open_exclusive(seg->path);
	}
	return fd;
}

/* The file we created is what we think: ours, regular, one link, `size`. */
static int check_created(int fd, uid_t uid, off_t size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1 || st.st_size != size)
		return -EPERM;
	return 0;
}

static int size_and_map(struct stats_seg *seg, int fd, uid_t uid, size_t len)
{
	void *map;
	int err = check_created(fd, uid, 0);

	if (!err && ftruncate(fd, (off_t)len) < 0)
		err = -errno;
	if (!err)
		err = check_created(fd, uid, (off_t)len);
	if (err)
		return err;
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -ENOMEM;
	seg->hdr = map;
	seg->map_len = len;
	return 0;
}

void stats_comm_copy(const char *raw, size_t raw_len, char *out, size_t len)
{
	size_t i;

	for (i = 0; i + 1 < len && i < raw_len && raw[i]; i++) {
		unsigned char c = (unsigned char)raw[i];

		out[i] = (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : (char)c;
	}
	if (len)
		out[i] = '\0';
}

static void fill_header(struct stats_seg *seg, pid_t pid, uid_t uid, const char *comm)
{
	struct sdp_proc_stats *h = seg->hdr;

	h->version = STATS_VERSION;
	h->slot_count = seg->slot_count;
	h->link_count = seg->link_count;
	h->pid = pid;
	h->uid = uid;
	h->start_ms = stats_now_ms();
	stats_comm_copy(comm ? comm : "?", sizeof(h->comm), h->comm, sizeof(h->comm));
	atomic_thread_fence(memory_order_release);
	h->magic = STATS_MAGIC; /* last: readers check it */
}

int stats_seg_create(struct stats_seg *seg, const char *dir, pid_t pid, uid_t uid,
		     const char *comm, uint32_t slots, uint32_t links)
{
	size_t len = stats_link_off(slots, links);
	int fd, err;

	memset(seg, 0, sizeof(*seg));
	if (slots == 0 || slots > STATS_SLOTS_MAX || links == 0 || links > STATS_LINKS_MAX)
		return -EINVAL;
	fd = open_fresh(seg, dir, uid, pid);
	if (fd < 0)
		return fd;
	err = size_and_map(seg, fd, uid, len);
	syscall(SYS_close, fd);
	if (err) {
		unlink(seg->path); /* this call created it */
		return err;
	}
	seg->owner = true;
	seg->slot_count = slots;
	seg->link_count = links;
	fill_header(seg, pid, uid, comm);
	return 0;
}

void stats_seg_detach(struct stats_seg *seg)
{
	if (seg->hdr)
		munmap(seg->hdr, seg->map_len);
	seg->hdr = NULL;
	seg->owner = false;
}

void stats_seg_unlink(struct stats_seg *seg)
{
	if (seg->hdr && seg->owner)
		unlink(seg->path);
	seg->owner = false;
}

void stats_seg_destroy(struct stats_seg *seg)
{
	if (seg->hdr && seg->owner)
		unlink(seg->path);
	stats_seg_detach(seg);
}

static _Atomic(struct stats_seg *) current_seg;

void stats_seg_set_current(struct stats_seg *seg)
{
	atomic_store(&current_seg, seg);
}

struct stats_seg *stats_seg_current(void)
{
	return atomic_load(&current_seg);
}

/* Records (slots and link records) start with in_use and seq; the rest
 * is theirs. */
_Static_assert(offsetof(struct sdp_conn_stats, seq) == 4 && offsetof(struct sdp_conn_stats, fd) == 8,
	       "a slot starts with in_use, seq");
_Static_assert(offsetof(struct sdp_link_stats, seq) == 4 &&
	       offsetof(struct sdp_link_stats, role) == 8, "a link record starts with in_use, seq");
#define RECORD_HEAD (2 * sizeof(uint32_t))

/* Claims a free record of a table of n records of `size` bytes, searching
 * from `start`: in_use goes 0 -> 2 (being set up, invisible to readers), all
 * after seq is zeroed and seq made even.  Returns its index (the caller sets
 * its fields, then stores in_use 1), or n when every record is taken. */
static uint32_t record_claim(void *table, size_t size, uint32_t n, uint32_t start)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t at = (uint32_t)(((uint64_t)start + i) % n), expected = 0, seq;
		char *rec = (char *)table + (size_t)at * size;
		_Atomic uint32_t *in_use = (_Atomic uint32_t *)rec, *seqp = in_use + 1;

		if (atomic_load_explicit(in_use, memory_order_relaxed))
			continue;
		if (!atomic_compare_exchange_strong(in_use, &expected, 2))
			continue;
		seq = atomic_load(seqp);
		memset(rec + RECORD_HEAD, 0, size - RECORD_HEAD);
		atomic_store(seqp, (seq | 1) + 1); /* even, whatever it was */
		return at;
	}
	return n;
}

/* Called under the caller's lock (preload/sock.c's table lock).  Only
 * private geometry picks the slot; the shared bytes are just its contents. */
struct sdp_conn_stats *stats_slot_alloc(struct stats_seg *seg)
{
	uint32_t n = seg->slot_count, at;
	struct sdp_conn_stats *s;

	if (!seg->hdr || n == 0 || stats_seg_len(n) > seg->map_len)
		return NULL;
	at = record_claim(seg->hdr->slot, sizeof(*s), n, seg->alloc_hint);
	if (at == n)
		return NULL;
	s = &seg->hdr->slot[at];
	s->fd = -1;
	s->opened_ms = stats_now_ms();
	seg->alloc_hint = (at + 1) % n;
	atomic_store_explicit(&s->in_use, 1, memory_order_release);
	return s;
}

void stats_slot_release(struct stats_seg *seg, struct sdp_conn_stats *slot)
{
	(void)seg;
	if (slot)
		atomic_store_explicit(&slot->in_use, 0, memory_order_release);
}

void stats_slot_begin(struct sdp_conn_stats *slot)
{
	atomic_fetch_add_explicit(&slot->seq, 1, memory_order_acq_rel);
}

void stats_slot_end(struct sdp_conn_stats *slot)
{
	atomic_fetch_add_explicit(&slot->seq, 1, memory_order_acq_rel);
}

/* The link table follows the slots; only private geometry places it.  Any
 * thread may call this: a record is claimed by compare-and-swap, and the
 * hint is only where the search starts. */
struct sdp_link_stats *stats_link_alloc(struct stats_seg *seg)
{
	uint32_t n = seg->link_count, at;
	struct sdp_link_stats *table;

	if (!seg->hdr || n == 0 || stats_link_off(seg->slot_count, n) > seg->map_len)
		return NULL;
	table = (struct sdp_link_stats *)((char *)seg->hdr + stats_seg_len(seg->slot_count));
	at = record_claim(table, sizeof(*table), n,
			  atomic_load_explicit(&seg->link_hint, memory_order_relaxed) % n);
	if (at == n)
		return NULL;
	table[at].opened_ms = stats_now_ms();
	atomic_store_explicit(&seg->link_hint, (at + 1) % n, memory_order_relaxed);
	atomic_store_explicit(&table[at].in_use, 1, memory_order_release);
	return &table[at];
}

void stats_link_release(struct stats_seg *seg, struct sdp_link_stats *link)
{
	(void)seg;
	if (link)
		atomic_store_explicit(&link->in_use, 0, memory_order_release);
}

void stats_link_begin(struct sdp_link_stats *link)
{
	atomic_fetch_add_explicit(&link->seq, 1, memory_order_acq_rel);
}

void stats_link_end(struct sdp_link_stats *link)
{
	atomic_fetch_add_explicit(&link->seq, 1, memory_order_acq_rel);
}

void stats_addr_set(struct stats_addr *out, const struct sockaddr *sa)
{
	memset(out, 0, sizeof(*out));
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		out->family = AF_INET;
		out->port = ntohs(in->sin_port);
		memcpy(out->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		out->family = AF_INET6;
		out->port = ntohs(in6->sin6_port);
		memcpy(out->addr, &in6->sin6_addr, 16);
	}
}

void stats_addr_format(const struct stats_addr *a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	if (a->family == AF_INET) {
		inet_ntop(AF_INET, a->addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, a->port);
	} else if (a->family == AF_INET6) {
		inet_ntop(AF_INET6, a->addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, a->port);
	} else {
		snprintf(buf, len, "-");
	}
}

const char *stats_link_role_name(uint8_t role)
{
	switch (role) {
	case STATS_LINK_CLIENT: return "client";
	case STATS_LINK_SERVER: return "server";
	default:                return "none";
	}
}

const char *stats_link_state_name(uint8_t state)
{
	switch (state) {
	case STATS_LINK_CONNECTING: return "connecting";
	case STATS_LINK_UP:         return "up";
	case STATS_LINK_FAILED:     return "failed";
	case STATS_LINK_CLOSING:    return "closing";
	default:                    return "unknown";
	}
}

const char *stats_chan_state_name(uint8_t state)
{
	switch (state) {
	case STATS_CHAN_NONE:       return "none";
	case STATS_CHAN_CONNECTING: return "connecting";
	case STATS_CHAN_BINDING:    return "binding";
	case STATS_CHAN_OPEN:       return "open";
	case STATS_CHAN_MOVING:     return "moving";
	case STATS_CHAN_FALLBACK:   return "fallback";
	case STATS_CHAN_CLOSED:     return "closed";
	case STATS_CHAN_HELD:       return "held";
	case STATS_CHAN_CLIMBING:   return "climbing";
	default:                    return "unknown";
	}
}

const char *stats_role_name(uint8_t role)
{
	switch (role) {
	case STATS_ROLE_CLIENT:   return "client";
	case STATS_ROLE_SERVER:   return "server";
	case STATS_ROLE_LISTENER: return "listener";
	default:                  return "none";
	}
}

#define U64(field) (unsigned long long)atomic_load_explicit(&s->field, memory_order_relaxed)

int stats_conn_json(const struct sdp_conn_stats *s, pid_t pid, const char *comm,
		    uint64_t closed_ms, char *buf, size_t len)
{
	char local[64], remote[64], closed[48] = "", name[65];
	int n;

	stats_addr_format(&s->local, local, sizeof(local));
	stats_addr_format(&s->remote, remote, sizeof(remote));
	stats_comm_copy(comm, comm ? strnlen(comm, sizeof(name) - 1) : 0, name, sizeof(name));
	if (closed_ms)
		snprintf(closed, sizeof(closed), ",\"closed_ms\":%llu", (unsigned long long)closed_ms);
	n = snprintf(buf, len,
		     "{\"pid\":%d,\"comm\":\"%s\",\"fd\":%d,\"role\":\"%s\",\"local\":\"%s\","
		     "\"remote\":\"%s\",\"path\":\"%s\",\"reason\":\"%s\",\"negcached\":%s,"
		     "\"channel\":\"%s\",\"bytes_sent\":%llu,\"bytes_received\":%llu,"
		     "\"copy_bytes_sent\":%llu,\"copy_bytes_received\":%llu,"
		     "\"zcopy_bytes_sent\":%llu,\"zcopy_bytes_received\":%llu,"
		     "\"zcopy_ops\":%llu,\"zcopy_cancels\":%llu,"
		     "\"mr_cache_hits\":%llu,\"mr_cache_misses\":%llu,"
		     "\"credit_updates_sent\":%llu,\"credit_stalls\":%llu,"
		     "\"tx_credits\":%u,\"rx_posted\":%u,\"switches\":%u,\"climbs\":%u,"
		     "\"tcp_bytes_sent\":%llu,\"tcp_bytes_received\":%llu,"
		     "\"opened_ms\":%llu,\"moved_ms\":%llu%s}",
		     (int)pid, name, s->fd, stats_role_name(s->role), local, remote,
		     sdp_path_name((enum sdp_path)s->path),
		     sdp_reason_name((enum sdp_reason)s->reason), s->negcached ? "true" : "false",
		     stats_chan_state_name(__atomic_load_n(&s->state, __ATOMIC_RELAXED)),
		     U64(bytes_sent), U64(bytes_received), U64(copy_bytes_sent),
		     U64(copy_bytes_received), U64(zcopy_bytes_sent), U64(zcopy_bytes_received),
		     U64(zcopy_ops), U64(zcopy_cancels), U64(mr_cache_hits), U64(mr_cache_misses),
		     U64(credit_updates_sent), U64(credit_stalls),
		     (unsigned)atomic_load(&s->tx_credits), (unsigned)atomic_load(&s->rx_posted),
		     (unsigned)atomic_load(&s->switches), (unsigned)atomic_load(&s->climbs),
		     U64(tcp_bytes_sent), U64(tcp_bytes_received), (unsigned long long)s->opened_ms,
		     U64(moved_ms), closed);
	return (n < 0 || (size_t)n >= len) ? -1 : n;
}

#define L64(field) (unsigned long long)atomic_load_explicit(&l->field, memory_order_relaxed)
#define L32(field) (unsigned)atomic_load_explicit(&l->field, memory_order_relaxed)

int stats_link_json(const struct sdp_link_stats *l, char *buf, size_t len)
{
	char local[64], peer[64];
	int n;

	stats_addr_format(&l->local, local, sizeof(local));
	stats_addr_format(&l->peer, peer, sizeof(peer));
	n = snprintf(buf, len,
		     "{\"role\":\"%s\",\"state\":\"%s\",\"local\":\"%s\",\"peer\":\"%s\","
		     "\"streams\":%u,\"streams_max\":%u,\"streams_opened\":%llu,"
		     "\"pinned_bytes\":%llu,\"credits_total\":%u,\"credits_in_use\":%u,"
		     "\"msgs_sent\":%llu,\"msgs_received\":%llu,\"msgs_received_by_app\":%llu,"
		     "\"probes_sent\":%llu,\"bytes_sent\":%llu,\"bytes_received\":%llu,\"opened_ms\":%llu}",
		     stats_link_role_name(l->role), stats_link_state_name(l->state), local, peer,
		     L32(streams), L32(streams_max), L64(streams_opened), L64(pinned_bytes),
		     L32(credits_total), L32(credits_in_use), L64(msgs_sent), L64(msgs_received),
		     L64(msgs_received_by_app), L64(probes_sent), L64(bytes_sent), L64(bytes_received), (unsigned long long)l->opened_ms);
	return (n < 0 || (size_t)n >= len) ? -1 : n;
}

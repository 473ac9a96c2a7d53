/* The per-process shared-memory stats segment: creation, slot allocation,
 * read-only attach for `sdpshim stat`, and the one JSON serializer. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/stats_shm.h"

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

static size_t seg_len(uint32_t slots)
{
	return sizeof(struct sdp_proc_stats) + (size_t)slots * sizeof(struct sdp_conn_stats);
}

int stats_seg_create(struct stats_seg *seg, const char *dir, pid_t pid, uid_t uid,
		     const char *comm, uint32_t slots)
{
	size_t len = seg_len(slots);
	void *map;
	int fd;

	memset(seg, 0, sizeof(*seg));
	if (snprintf(seg->path, sizeof(seg->path), "%s/sdpshim-%u-%d.stats", dir, (unsigned)uid,
		     (int)pid) >= (int)sizeof(seg->path))
		return -ENAMETOOLONG;
	/* Raw syscalls: this runs inside the preload, under our own hooks. */
	fd = (int)syscall(SYS_openat, AT_FDCWD, seg->path,
			  O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		int err = -errno;
		syscall(SYS_close, fd);
		unlink(seg->path);
		return err;
	}
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	syscall(SYS_close, fd);
	if (map == MAP_FAILED) {
		unlink(seg->path);
		return -ENOMEM;
	}
	seg->hdr = map;
	seg->map_len = len;
	seg->owner = true;
	seg->hdr->version = STATS_VERSION;
	seg->hdr->slot_count = slots;
	seg->hdr->pid = pid;
	seg->hdr->uid = uid;
	seg->hdr->start_ms = stats_now_ms();
	snprintf(seg->hdr->comm, sizeof(seg->hdr->comm), "%s", comm ? comm : "?");
	for (char *c = seg->hdr->comm; *c; c++) /* it is printed inside JSON strings */
		if (*c < 0x20 || *c == '"' || *c == '\\' || *c == 0x7f)
			*c = '_';
	atomic_thread_fence(memory_order_release);
	seg->hdr->magic = STATS_MAGIC; /* last: readers check it */
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

struct sdp_conn_stats *stats_slot_alloc(struct stats_seg *seg)
{
	struct sdp_proc_stats *h = seg->hdr;
	uint32_t start, i;

	if (!h)
		return NULL;
	start = atomic_load_explicit(&h->alloc_hint, memory_order_relaxed);
	for (i = 0; i < h->slot_count; i++) {
		struct sdp_conn_stats *s = &h->slot[(start + i) % h->slot_count];
		uint32_t expected = 0;

		if (atomic_load_explicit(&s->in_use, memory_order_relaxed))
			continue;
		if (!atomic_compare_exchange_strong(&s->in_use, &expected, 2))
			continue; /* 2 = being initialised, invisible to readers */
		uint32_t seq = atomic_load(&s->seq);
		memset((char *)s + offsetof(struct sdp_conn_stats, fd), 0,
		       sizeof(*s) - offsetof(struct sdp_conn_stats, fd));
		atomic_store(&s->seq, seq + 2);
		s->fd = -1;
		s->opened_ms = stats_now_ms();
		atomic_store_explicit(&h->alloc_hint, (start + i + 1) % h->slot_count,
				      memory_order_relaxed);
		atomic_store_explicit(&s->in_use, 1, memory_order_release);
		return s;
	}
	return NULL;
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

int stats_seg_open_ro(struct stats_seg *seg, const char *path)
{
	struct sdp_proc_stats probe;
	struct stat st;
	void *map;
	int fd;

	memset(seg, 0, sizeof(*seg));
	snprintf(seg->path, sizeof(seg->path), "%s", path);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(probe) ||
	    pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe) ||
	    probe.magic != STATS_MAGIC || probe.version != STATS_VERSION ||
	    seg_len(probe.slot_count) > (size_t)st.st_size) {
		close(fd);
		return -EINVAL;
	}
	if (kill(probe.pid, 0) < 0 && errno == ESRCH) {
		close(fd);
		return -ESRCH;
	}
	map = mmap(NULL, seg_len(probe.slot_count), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -ENOMEM;
	seg->hdr = map;
	seg->map_len = seg_len(probe.slot_count);
	return 0;
}

bool stats_slot_snapshot(const struct sdp_conn_stats *slot, struct sdp_conn_stats *out)
{
	for (int tries = 0; tries < 100; tries++) {
		uint32_t before = atomic_load_explicit(&slot->seq, memory_order_acquire);

		if (atomic_load_explicit(&slot->in_use, memory_order_acquire) != 1)
			return false;
		if (before & 1)
			continue;
		memcpy(out, slot, sizeof(*out));
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&slot->seq, memory_order_relaxed) == before)
			return true;
	}
	return false;
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
	char local[64], remote[64], closed[48] = "";
	int n;

	stats_addr_format(&s->local, local, sizeof(local));
	stats_addr_format(&s->remote, remote, sizeof(remote));
	if (closed_ms)
		snprintf(closed, sizeof(closed), ",\"closed_ms\":%llu", (unsigned long long)closed_ms);
	n = snprintf(buf, len,
		     "{\"pid\":%d,\"comm\":\"%s\",\"fd\":%d,\"role\":\"%s\",\"local\":\"%s\","
		     "\"remote\":\"%s\",\"path\":\"%s\",\"reason\":\"%s\",\"negcached\":%s,"
		     "\"bytes_sent\":%llu,\"bytes_received\":%llu,"
		     "\"copy_bytes_sent\":%llu,\"copy_bytes_received\":%llu,"
		     "\"zcopy_bytes_sent\":%llu,\"zcopy_bytes_received\":%llu,"
		     "\"zcopy_ops\":%llu,\"zcopy_cancels\":%llu,"
		     "\"mr_cache_hits\":%llu,\"mr_cache_misses\":%llu,"
		     "\"credit_updates_sent\":%llu,\"credit_stalls\":%llu,"
		     "\"tx_credits\":%u,\"rx_posted\":%u,\"switches\":%u,"
		     "\"opened_ms\":%llu%s}",
		     (int)pid, comm ? comm : "", s->fd, stats_role_name(s->role), local, remote,
		     sdp_path_name((enum sdp_path)s->path),
		     sdp_reason_name((enum sdp_reason)s->reason), s->negcached ? "true" : "false",
		     U64(bytes_sent), U64(bytes_received), U64(copy_bytes_sent),
		     U64(copy_bytes_received), U64(zcopy_bytes_sent), U64(zcopy_bytes_received),
		     U64(zcopy_ops), U64(zcopy_cancels), U64(mr_cache_hits), U64(mr_cache_misses),
		     U64(credit_updates_sent), U64(credit_stalls),
		     (unsigned)atomic_load(&s->tx_credits), (unsigned)atomic_load(&s->rx_posted),
		     (unsigned)atomic_load(&s->switches), (unsigned long long)s->opened_ms, closed);
	return (n < 0 || (size_t)n >= len) ? -1 : n;
}

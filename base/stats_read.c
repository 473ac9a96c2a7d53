/* The reader's side of the per-process stats segments (`sdpshim stat`): the
 * parsers that check a segment image already copied into private memory
 * (stats_header_parse, stats_slot_parse; fuzzed by tests/fuzz/fuzz_stats.c),
 * and stats_seg_read, which opens one segment file without trusting its
 * name, type, owner, size or contents and copies out its header and live
 * slots with pread().  Nothing here maps a segment, so a file truncated
 * under the reader gives a short read, never SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/stats_shm.h"

#define SLOT_SIZE sizeof(struct sdp_conn_stats)
#define READ_CHUNK_SLOTS 256u /* slots per pread() of the scan */
#define STABLE_TRIES 100      /* re-reads of a slot a writer keeps changing */

_Static_assert(offsetof(struct sdp_conn_stats, seq) == 4, "seq right after in_use");
_Static_assert(sizeof(((struct sdp_proc_stats *)0)->comm) == 64, "comm[64]");
_Static_assert(sizeof(((struct stats_proc_info *)0)->comm) == 65, "comm[64] + NUL");

const char *stats_image_error_text(enum stats_image_error err)
{
	switch (err) {
	case STATS_IMAGE_OK:          return "valid";
	case STATS_IMAGE_SHORT:       return "shorter than a header";
	case STATS_IMAGE_BAD_MAGIC:   return "no stats magic";
	case STATS_IMAGE_BAD_VERSION: return "an unknown version";
	case STATS_IMAGE_BAD_SLOTS:   return "a slot count that is 0, too large or past the end";
	case STATS_IMAGE_BAD_PID:     return "a pid that is not positive";
	}
	return "unknown stats image error";
}

/* Printable ASCII without '"' or '\\': it is printed inside JSON strings. */
static void copy_comm(const char *raw, size_t raw_len, char *out, size_t len)
{
	size_t i;

	for (i = 0; i + 1 < len && i < raw_len && raw[i]; i++) {
		unsigned char c = (unsigned char)raw[i];
		out[i] = (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : (char)c;
	}
	out[i] = '\0';
}

static void fill_info(const struct sdp_proc_stats *raw, struct stats_proc_info *out)
{
	memset(out, 0, sizeof(*out));
	out->pid = raw->pid;
	out->uid = raw->uid;
	out->slot_count = raw->slot_count;
	out->start_ms = raw->start_ms;
	copy_comm(raw->comm, sizeof(raw->comm), out->comm, sizeof(out->comm));
	for (size_t i = 0; i < 3; i++)
		out->conns_by_path[i] = atomic_load_explicit(&raw->conns_by_path[i],
							     memory_order_relaxed);
	for (size_t i = 0; i < STATS_REASON_SLOTS; i++)
		out->conns_by_reason[i] = atomic_load_explicit(&raw->conns_by_reason[i],
							       memory_order_relaxed);
	out->bytes_sent = atomic_load_explicit(&raw->bytes_sent, memory_order_relaxed);
	out->bytes_received = atomic_load_explicit(&raw->bytes_received, memory_order_relaxed);
	out->negcache_hits = atomic_load_explicit(&raw->negcache_hits, memory_order_relaxed);
}

enum stats_image_error stats_header_parse(const void *buf, size_t len, uint64_t image_len,
					  struct stats_proc_info *out)
{
	struct sdp_proc_stats raw;

	if (!buf || len < sizeof(raw) || image_len < sizeof(raw))
		return STATS_IMAGE_SHORT;
	memcpy(&raw, buf, sizeof(raw)); /* the header is read once, here */
	if (raw.magic != STATS_MAGIC)
		return STATS_IMAGE_BAD_MAGIC;
	if (raw.version != STATS_VERSION)
		return STATS_IMAGE_BAD_VERSION;
	if (raw.slot_count == 0 || raw.slot_count > STATS_SLOTS_MAX ||
	    stats_seg_len(raw.slot_count) > image_len)
		return STATS_IMAGE_BAD_SLOTS;
	if (raw.pid <= 0)
		return STATS_IMAGE_BAD_PID;
	fill_info(&raw, out);
	return STATS_IMAGE_OK;
}

static bool family_ok(const struct stats_addr *a)
{
	return a->family == 0 || a->family == AF_INET || a->family == AF_INET6;
}

static bool slot_fields_ok(const struct sdp_conn_stats *s)
{
	return atomic_load_explicit(&s->in_use, memory_order_relaxed) == 1 &&
	       (atomic_load_explicit(&s->seq, memory_order_relaxed) & 1) == 0 &&
	       s->role <= STATS_ROLE_LISTENER && s->path <= SDP_PATH_RDMA &&
	       s->reason < SDP_REASON_COUNT && family_ok(&s->local) && family_ok(&s->remote);
}

bool stats_slot_parse(const void *buf, size_t len, struct sdp_conn_stats *out)
{
	if (!buf || len < SLOT_SIZE)
		return false;
	memcpy(out, buf, SLOT_SIZE);
	return slot_fields_ok(out);
}

enum stats_image_error stats_image_parse(const void *buf, size_t len, struct stats_proc_info *out)
{
	return stats_header_parse(buf, len, len, out);
}

bool stats_image_slot(const void *buf, size_t len, const struct stats_proc_info *info, uint32_t i,
		      struct sdp_conn_stats *out)
{
	size_t off;

	if (!buf || i >= info->slot_count || i >= STATS_SLOTS_MAX)
		return false;
	off = stats_seg_len(i);
	if (off > len || len - off < SLOT_SIZE)
		return false;
	return stats_slot_parse((const char *)buf + off, len - off, out);
}

/* ---- the file ------------------------------------------------------------ */

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/* Up to len bytes at off; fewer only at the end of the file.  -errno on error. */
static ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static const char *kind_of(mode_t mode)
{
	if (S_ISLNK(mode))  return "a symbolic link";
	if (S_ISFIFO(mode)) return "a fifo";
	if (S_ISDIR(mode))  return "a directory";
	if (S_ISSOCK(mode)) return "a socket";
	if (S_ISCHR(mode))  return "a character device";
	if (S_ISBLK(mode))  return "a block device";
	return "not a file";
}

/* A non-regular name is refused before any open (a FIFO would block, a
 * device could act); the open never follows a link and never blocks, and
 * fstat confirms that what opened is what lstat saw. */
static int open_segment(const char *path, uid_t owner, struct stat *st, char *why, size_t len)
{
	struct stat seen;
	int fd, err;

	if (lstat(path, &seen) < 0)
		return -errno;
	if (!S_ISREG(seen.st_mode)) {
		say(why, len, "not a regular file (%s)", kind_of(seen.st_mode));
		return -EINVAL;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		say(why, len, "%s", err == -ELOOP ? "not a regular file (a symbolic link)"
						 : strerror(-err));
		return err;
	}
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_dev != seen.st_dev ||
	    st->st_ino != seen.st_ino) {
		say(why, len, "replaced while it was being opened");
		close(fd);
		return -EINVAL;
	}
	if (st->st_uid != owner) {
		say(why, len, "owned by uid %u, not by uid %u as its name says",
		    (unsigned)st->st_uid, (unsigned)owner);
		close(fd);
		return -EPERM;
	}
	return fd;
}

static int read_header(int fd, const struct stat *st, struct stats_proc_info *info, char *why,
		       size_t len)
{
	unsigned char buf[sizeof(struct sdp_proc_stats)];
	ssize_t got = pread_full(fd, buf, sizeof(buf), 0);
	enum stats_image_error err;

	if (got < 0) {
		say(why, len, "%s", strerror((int)-got));
		return (int)got;
	}
	err = stats_header_parse(buf, (size_t)got, (uint64_t)st->st_size, info);
	if (err != STATS_IMAGE_OK) {
		say(why, len, "not a valid stats segment (%s; %lld bytes)",
		    stats_image_error_text(err), (long long)st->st_size);
		return -EINVAL;
	}
	return 0;
}

/* The header names the process and the user the file's name and owner do;
 * a valid segment of a dead process is -ESRCH. */
static int check_process(const struct stats_proc_info *info, pid_t pid, uid_t owner, char *why,
			 size_t len)
{
	if (info->pid != pid) {
		say(why, len, "it names pid %d inside", (int)info->pid);
		return -EINVAL;
	}
	if (info->uid != owner) {
		say(why, len, "it names uid %u inside", (unsigned)info->uid);
		return -EINVAL;
	}
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return -ESRCH;
	return 0;
}

/* One slot, read until no writer changed it in between (its seq, even, the
 * same before and after), into *out, checked.  A slot that keeps changing,
 * is freed, or is cut off by a truncation is skipped. */
static bool read_slot_stable(int fd, off_t off, struct sdp_conn_stats *out)
{
	unsigned char raw[SLOT_SIZE];
	off_t seq_off = off + (off_t)offsetof(struct sdp_conn_stats, seq);

	for (int tries = 0; tries < STABLE_TRIES; tries++) {
		uint32_t before, after;

		if (pread_full(fd, &before, sizeof(before), seq_off) != (ssize_t)sizeof(before))
			return false;
		if (before & 1)
			continue;
		if (pread_full(fd, raw, sizeof(raw), off) != (ssize_t)sizeof(raw) ||
		    pread_full(fd, &after, sizeof(after), seq_off) != (ssize_t)sizeof(after))
			return false;
		if (before != after)
			continue;
		return stats_slot_parse(raw, sizeof(raw), out) &&
		       atomic_load_explicit(&out->seq, memory_order_relaxed) == before;
	}
	return false;
}

static int snapshot_add(struct stats_snapshot *snap, const struct sdp_conn_stats *s, size_t *cap)
{
	if (snap->count == *cap) {
		size_t grown = *cap ? *cap * 2 : 16;
		struct sdp_conn_stats *conn = realloc(snap->conn, grown * SLOT_SIZE);

		if (!conn)
			return -ENOMEM;
		snap->conn = conn;
		*cap = grown;
	}
	memcpy(&snap->conn[snap->count++], s, SLOT_SIZE);
	return 0;
}

/* Checks the live slots of one chunk already read (first..first+n-1). */
static int take_chunk(int fd, const unsigned char *chunk, uint32_t first, uint32_t n,
		      struct stats_snapshot *snap, size_t *cap)
{
	struct sdp_conn_stats s;

	for (uint32_t j = 0; j < n; j++) {
		if (!stats_slot_parse(chunk + (size_t)j * SLOT_SIZE, SLOT_SIZE, &s))
			continue;
		if (read_slot_stable(fd, (off_t)stats_seg_len(first + j), &s) &&
		    snapshot_add(snap, &s, cap) != 0)
			return -ENOMEM;
	}
	return 0;
}

/* Scans the slot_count slots the header announced (checked against the
 * file's size), a chunk at a time; a file cut short ends the scan. */
static int read_slots(int fd, struct stats_snapshot *snap)
{
	uint32_t total = snap->info.slot_count, first = 0;
	unsigned char *chunk = malloc(READ_CHUNK_SLOTS * SLOT_SIZE);
	size_t cap = 0;
	int err = 0;

	if (!chunk)
		return -ENOMEM;
	while (first < total && !err) {
		uint32_t want = total - first < READ_CHUNK_SLOTS ? total - first : READ_CHUNK_SLOTS;
		ssize_t got = pread_full(fd, chunk, want * SLOT_SIZE, (off_t)stats_seg_len(first));
		uint32_t whole = got > 0 ? (uint32_t)((size_t)got / SLOT_SIZE) : 0;

		err = take_chunk(fd, chunk, first, whole, snap, &cap);
		if (whole < want)
			break;
		first += want;
	}
	free(chunk);
	return err;
}

int stats_seg_read(const char *path, uid_t owner, pid_t pid, struct stats_snapshot *snap,
		   char *why, size_t why_len)
{
	struct stat st;
	int fd, err;

	memset(snap, 0, sizeof(*snap));
	say(why, why_len, "%s", "");
	fd = open_segment(path, owner, &st, why, why_len);
	if (fd < 0)
		return fd;
	err = read_header(fd, &st, &snap->info, why, why_len);
	if (err && st.st_nlink == 1 && kill(pid, 0) < 0 && errno == ESRCH)
		err = -ESRCH; /* the named process died before it finished writing the header */
	if (!err)
		err = check_process(&snap->info, pid, owner, why, why_len);
	if (!err)
		err = read_slots(fd, snap);
	close(fd);
	if (err) {
		if (why && why_len && !why[0])
			say(why, why_len, "%s", strerror(-err));
		stats_snapshot_free(snap);
	}
	return err;
}

void stats_snapshot_free(struct stats_snapshot *snap)
{
	free(snap->conn);
	snap->conn = NULL;
	snap->count = 0;
}

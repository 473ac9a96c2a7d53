/* The reader's side of the per-process stats segments (`sdpshim stat`): the
 * parsers that check a segment image already copied into private memory
 * (stats_header_parse, stats_slot_parse, stats_link_parse; fuzzed by
 * tests/fuzz/fuzz_stats.c), and stats_seg_read, which opens one segment file
 * without trusting its name, type, owner, size or contents and copies out its
 * header, live slots and live link records with pread().  Nothing here maps a
 * segment, so a file truncated under the reader gives a short read, never
 * SIGBUS. */
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
#define LINK_SIZE sizeof(struct sdp_link_stats)
#define READ_CHUNK_RECORDS 256u /* records per pread() of the scan */
#define STABLE_TRIES 100        /* re-reads of a record a writer keeps changing */
#define RECORD_MAX (SLOT_SIZE > LINK_SIZE ? SLOT_SIZE : LINK_SIZE)

_Static_assert(offsetof(struct sdp_conn_stats, seq) == 4, "seq right after in_use");
_Static_assert(offsetof(struct sdp_link_stats, seq) == 4, "seq right after in_use");
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
	case STATS_IMAGE_BAD_LINKS:   return "a link count that is 0, too large or past the end";
	}
	return "unknown stats image error";
}

static void fill_info(const struct sdp_proc_stats *raw, struct stats_proc_info *out)
{
	memset(out, 0, sizeof(*out));
	out->pid = raw->pid;
	out->uid = raw->uid;
	out->slot_count = raw->slot_count;
	out->link_count = raw->link_count;
	out->start_ms = raw->start_ms;
	stats_comm_copy(raw->comm, sizeof(raw->comm), out->comm, sizeof(out->comm));
	for (size_t i = 0; i < 3; i++)
		out->conns_by_path[i] = atomic_load_explicit(&raw->conns_by_path[i],
							     memory_order_relaxed);
	for (size_t i = 0; i < STATS_REASON_SLOTS; i++)
		out->conns_by_reason[i] = atomic_load_explicit(&raw->conns_by_reason[i],
							       memory_order_relaxed);
	out->bytes_sent = atomic_load_explicit(&raw->bytes_sent, memory_order_relaxed);
	out->bytes_received = atomic_load_explicit(&raw->bytes_received, memory_order_relaxed);
	out->negcache_hits = atomic_load_explicit(&raw->negcache_hits, memory_order_relaxed);
	out->pin_budget = atomic_load_explicit(&raw->pin_budget, memory_order_relaxed);
	out->pinned_bytes = atomic_load_explicit(&raw->pinned_bytes, memory_order_relaxed);
	out->budget_refusals = atomic_load_explicit(&raw->budget_refusals, memory_order_relaxed);
	out->progress_wakeups = atomic_load_explicit(&raw->progress_wakeups, memory_order_relaxed);
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
	if (raw.link_count == 0 || raw.link_count > STATS_LINKS_MAX ||
	    stats_link_off(raw.slot_count, raw.link_count) > image_len)
		return STATS_IMAGE_BAD_LINKS;
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

static bool link_fields_ok(const struct sdp_link_stats *l)
{
	return atomic_load_explicit(&l->in_use, memory_order_relaxed) == 1 &&
	       (atomic_load_explicit(&l->seq, memory_order_relaxed) & 1) == 0 &&
	       (l->role == STATS_LINK_CLIENT || l->role == STATS_LINK_SERVER) &&
	       l->state <= STATS_LINK_CLOSING && l->pad == 0 && l->pad2 == 0 &&
	       family_ok(&l->local) && family_ok(&l->peer);
}

bool stats_link_parse(const void *buf, size_t len, struct sdp_link_stats *out)
{
	if (!buf || len < LINK_SIZE)
		return false;
	memcpy(out, buf, LINK_SIZE);
	return link_fields_ok(out);
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

bool stats_image_link(const void *buf, size_t len, const struct stats_proc_info *info, uint32_t i,
		      struct sdp_link_stats *out)
{
	size_t off;

	if (!buf || i >= info->link_count || i >= STATS_LINKS_MAX ||
	    info->slot_count > STATS_SLOTS_MAX)
		return false;
	off = stats_link_off(info->slot_count, i);
	if (off > len || len - off < LINK_SIZE)
		return false;
	return stats_link_parse((const char *)buf + off, len - off, out);
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

/* The two kinds of record a segment holds after its header. */
struct record_kind {
	size_t size;
	bool (*parse)(const void *buf, size_t len, void *out);
	uint32_t (*seq)(const void *record); /* of a parsed copy */
};

static bool parse_slot(const void *buf, size_t len, void *out)
{
	return stats_slot_parse(buf, len, out);
}

static uint32_t seq_of_slot(const void *record)
{
	return atomic_load_explicit(&((const struct sdp_conn_stats *)record)->seq,
				    memory_order_relaxed);
}

static bool parse_link(const void *buf, size_t len, void *out)
{
	return stats_link_parse(buf, len, out);
}

static uint32_t seq_of_link(const void *record)
{
	return atomic_load_explicit(&((const struct sdp_link_stats *)record)->seq,
				    memory_order_relaxed);
}

static const struct record_kind slot_kind = { SLOT_SIZE, parse_slot, seq_of_slot };
static const struct record_kind link_kind = { LINK_SIZE, parse_link, seq_of_link };

/* Where one kind's records go: a growing array of private copies. */
struct record_list {
	void *items;
	size_t count, cap;
};

/* One record, read until no writer changed it in between (its seq, even,
 * the same before and after), into *out, checked.  A record that keeps
 * changing, is freed, or is cut off by a truncation is skipped.  Every
 * record has seq at offset 4, right after in_use. */
static bool read_record_stable(int fd, off_t off, const struct record_kind *kind, void *out)
{
	unsigned char raw[RECORD_MAX];
	off_t seq_off = off + 4;

	for (int tries = 0; tries < STABLE_TRIES; tries++) {
		uint32_t before, after;

		if (pread_full(fd, &before, sizeof(before), seq_off) != (ssize_t)sizeof(before))
			return false;
		if (before & 1)
			continue;
		if (pread_full(fd, raw, kind->size, off) != (ssize_t)kind->size ||
		    pread_full(fd, &after, sizeof(after), seq_off) != (ssize_t)sizeof(after))
			return false;
		if (before != after)
			continue;
		return kind->parse(raw, kind->size, out) && kind->seq(out) == before;
	}
	return false;
}

static int record_add(struct record_list *list, const struct record_kind *kind, const void *rec)
{
	if (list->count == list->cap) {
		size_t grown = list->cap ? list->cap * 2 : 16;
		void *items = realloc(list->items, grown * kind->size);

		if (!items)
			return -ENOMEM;
		list->items = items;
		list->cap = grown;
	}
	memcpy((char *)list->items + list->count * kind->size, rec, kind->size);
	list->count++;
	return 0;
}

/* Checks the live records of one chunk already read (first..first+n-1),
 * the table starting at byte `base`. */
static int take_chunk(int fd, const unsigned char *chunk, off_t base, uint32_t first, uint32_t n,
		      const struct record_kind *kind, struct record_list *list)
{
	union { struct sdp_conn_stats slot; struct sdp_link_stats link; } rec; /* aligned */

	for (uint32_t j = 0; j < n; j++) {
		off_t off = base + (off_t)((size_t)(first + j) * kind->size);

		if (!kind->parse(chunk + (size_t)j * kind->size, kind->size, &rec))
			continue;
		if (read_record_stable(fd, off, kind, &rec) && record_add(list, kind, &rec) != 0)
			return -ENOMEM;
	}
	return 0;
}

/* Scans the `total` records of one table (its count checked against the
 * file's size by the header's parser), a chunk at a time; a file cut short
 * ends the scan. */
static int read_table(int fd, off_t base, uint32_t total, const struct record_kind *kind,
		      struct record_list *list)
{
	unsigned char *chunk = malloc(READ_CHUNK_RECORDS * kind->size);
	uint32_t first = 0;
	int err = 0;

	if (!chunk)
		return -ENOMEM;
	while (first < total && !err) {
		uint32_t want = total - first < READ_CHUNK_RECORDS ? total - first : READ_CHUNK_RECORDS;
		ssize_t got = pread_full(fd, chunk, want * kind->size,
					 base + (off_t)((size_t)first * kind->size));
		uint32_t whole = got > 0 ? (uint32_t)((size_t)got / kind->size) : 0;

		err = take_chunk(fd, chunk, base, first, whole, kind, list);
		if (whole < want)
			break;
		first += want;
	}
	free(chunk);
	return err;
}

/* The live slots, then the live link records, into snap (freed by the
 * caller on error). */
static int read_records(int fd, struct stats_snapshot *snap)
{
	struct record_list slots = { NULL, 0, 0 }, links = { NULL, 0, 0 };
	int err;

	err = read_table(fd, (off_t)stats_seg_len(0), snap->info.slot_count, &slot_kind, &slots);
	snap->conn = slots.items;
	snap->count = slots.count;
	if (err)
		return err;
	err = read_table(fd, (off_t)stats_link_off(snap->info.slot_count, 0), snap->info.link_count,
			 &link_kind, &links);
	snap->link = links.items;
	snap->link_count = links.count;
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
		err = read_records(fd, snap);
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
	free(snap->link);
	snap->conn = NULL;
	snap->count = 0;
	snap->link = NULL;
	snap->link_count = 0;
}

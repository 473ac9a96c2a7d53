/* Unit tests (TAP) for the stats segment's trust rules (base/stats_shm.c,
 * base/stats_read.c): the writer creates its file exclusively and never
 * opens one someone else put under its name (another user's file, a
 * symlink, a file with two links), reuses only a stale file of its own, and
 * allocates slots and link records from private geometry whatever the
 * shared header says; the reader refuses FIFOs (without blocking), symlinks,
 * other owners, short or lying headers and another pid's segment, and copies
 * out only live slots and link records with fields in range; the header's
 * pinned-memory fields and the link records read back as written.  Cases
 * that need a file of another user run as root only (they pass, saying so,
 * otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/stats_shm.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define OTHER_UID 65534u /* nobody */
#define SLOTS 16u
#define LINKS 8u

static char dir[64];

/* A fresh sticky, world-writable directory, like /dev/shm. */
static void fresh_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/sdpshim-unit-XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 01777) != 0) {
		perror("test_stats: mkdtemp");
		exit(1);
	}
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_stats: could not remove %s\n", dir);
}

static void usual_name(char *out, size_t len, pid_t pid)
{
	snprintf(out, len, "%s/sdpshim-%u-%d.stats", dir, (unsigned)geteuid(), (int)pid);
}

static int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return (n == (ssize_t)strlen(text) && chmod(path, mode) == 0) ? 0 : -1;
}

/* The whole file equals text. */
static bool file_is(const char *path, const char *text)
{
	char buf[256];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf));

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)strlen(text) && memcmp(buf, text, (size_t)n) == 0;
}

static bool is_fallback_name(const char *path)
{
	char prefix[128];
	size_t len;

	usual_name(prefix, sizeof(prefix), getpid());
	len = strlen(prefix) - strlen(".stats");
	return strncmp(path, prefix, len) == 0 && path[len] == '-' &&
	       strspn(path + len + 1, "0123456789abcdef") == 16 &&
	       strcmp(path + len + 17, ".stats") == 0;
}

static int create(struct stats_seg *seg)
{
	return stats_seg_create(seg, dir, getpid(), geteuid(), "unit", SLOTS, LINKS);
}

/* ---- writer ------------------------------------------------------------------ */

static int test_create_exclusive(void)
{
	struct stats_seg seg;
	struct stat st;
	char name[128];
	int err, ok;

	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	err = create(&seg);
	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     check(strcmp(seg.path, name) == 0, "path %s, expected %s", seg.path, name) &&
	     check(seg.taken[0] == '\0', "taken '%s'", seg.taken) &&
	     check(lstat(name, &st) == 0 && S_ISREG(st.st_mode), "not a regular file") &&
	     check((st.st_mode & 0777) == 0600, "mode %o", (unsigned)(st.st_mode & 0777)) &&
	     check(st.st_uid == geteuid() && st.st_nlink == 1, "owner %u, %lu links",
		   (unsigned)st.st_uid, (unsigned long)st.st_nlink) &&
	     check((size_t)st.st_size == stats_link_off(SLOTS, LINKS), "size %lld",
		   (long long)st.st_size);
	if (err == 0)
		stats_seg_destroy(&seg);
	ok = ok && check(access(name, F_OK) != 0, "destroy left %s", name);
	remove_dir();
	return ok;
}

static int test_stale_own_file_reused(void)
{
	struct stats_seg seg;
	char name[128];
	struct stat st;
	int err, ok;

	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	write_file(name, "left by a dead process with this pid\n", 0600);
	err = create(&seg);
	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     check(strcmp(seg.path, name) == 0, "path %s", seg.path) &&
	     check(seg.taken[0] == '\0', "taken '%s'", seg.taken) &&
	     check(stat(name, &st) == 0 && (size_t)st.st_size == stats_link_off(SLOTS, LINKS),
		   "not the new segment");
	if (err == 0)
		stats_seg_destroy(&seg);
	remove_dir();
	return ok;
}

/* Whatever is put under the name stays as it was; the segment goes elsewhere. */
static int expect_fallback(const char *name, const char *kept, const char *kept_text,
			   const char *taken_word)
{
	struct stats_seg seg;
	struct sdp_conn_stats *slot;
	int err = create(&seg), ok;

	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     check(is_fallback_name(seg.path), "path %s is not a fallback name", seg.path) &&
	     check(strstr(seg.taken, taken_word) != NULL, "taken '%s', expected '%s'", seg.taken,
		   taken_word);
	if (err == 0) {
		slot = stats_slot_alloc(&seg);
		ok = check(slot != NULL, "no slot") && ok;
		if (slot)
			slot->local.port = 4242;
		stats_seg_destroy(&seg);
	}
	ok = check(file_is(kept, kept_text), "%s changed", kept) && ok;
	ok = check(access(name, F_OK) == 0 || errno != ENOENT, "%s was removed", name) && ok;
	return ok;
}

static int test_foreign_file_not_used(void)
{
	char name[128];
	int ok;

	if (geteuid() != 0)
		return printf("#   needs root to make a file of another user: not run\n") > 0;
	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	write_file(name, "planted\n", 0666);
	if (chown(name, OTHER_UID, OTHER_UID) != 0)
		perror("chown");
	ok = expect_fallback(name, name, "planted\n", "a file of uid 65534");
	remove_dir();
	return ok;
}

static int test_symlink_not_followed(void)
{
	char name[128], target[128];
	int ok;

	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	snprintf(target, sizeof(target), "%s/target", dir);
	write_file(target, "target\n", 0600);
	ok = check(symlink(target, name) == 0, "symlink: %s", strerror(errno)) &&
	     expect_fallback(name, target, "target\n", "a symbolic link");
	remove_dir();
	return ok;
}

static int test_two_links_not_removed(void)
{
	char name[128], other[128];
	int ok;

	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	snprintf(other, sizeof(other), "%s/other", dir);
	write_file(other, "linked\n", 0600);
	ok = check(link(other, name) == 0, "link: %s", strerror(errno)) &&
	     expect_fallback(name, other, "linked\n", "2 links");
	remove_dir();
	return ok;
}

/* The shared header is written, never read back: lies in it move nothing. */
static int test_private_geometry(void)
{
	struct stats_seg seg;
	unsigned got = 0, inside = 0;
	int err, ok;

	fresh_dir();
	err = create(&seg);
	ok = check(err == 0, "create: %s", strerror(-err));
	if (err == 0) {
		const char *base = (const char *)seg.hdr;
		unsigned links = 0, links_inside = 0;

		seg.hdr->slot_count = UINT32_MAX;
		seg.hdr->link_count = 0x7ffffff0u;
		seg.hdr->reserved = 0x7ffffff0u;
		for (unsigned i = 0; i < SLOTS + 4; i++) {
			struct sdp_conn_stats *s = stats_slot_alloc(&seg);

			if (!s)
				continue;
			got++;
			inside += (const char *)s >= base + sizeof(*seg.hdr) &&
				  (const char *)(s + 1) <= base + stats_seg_len(SLOTS);
		}
		for (unsigned i = 0; i < LINKS + 4; i++) {
			struct sdp_link_stats *l = stats_link_alloc(&seg);

			if (!l)
				continue;
			links++;
			links_inside += (const char *)l >= base + stats_seg_len(SLOTS) &&
					(const char *)(l + 1) <= base + seg.map_len;
		}
		ok = check(got == SLOTS && inside == SLOTS, "%u slots, %u inside their table", got,
			   inside) &&
		     check(links == LINKS && links_inside == LINKS,
			   "%u link records, %u inside their table", links, links_inside);
		stats_seg_destroy(&seg);
	}
	remove_dir();
	return ok;
}

/* ---- reader ------------------------------------------------------------------ */

/* A valid segment of this process with three slots set and one freed. */
static int make_segment(struct stats_seg *seg)
{
	struct sdp_conn_stats *s[4];
	int err = create(seg);

	if (err)
		return err;
	for (int i = 0; i < 4; i++)
		s[i] = stats_slot_alloc(seg);
	s[0]->role = STATS_ROLE_CLIENT;
	s[0]->path = SDP_PATH_TCP;
	s[0]->reason = SDP_REASON_LOOPBACK;
	s[0]->remote.family = AF_INET;
	s[0]->remote.port = 6379;
	s[1]->role = STATS_ROLE_LISTENER;
	s[2]->reason = 999;            /* out of range: never shown */
	stats_slot_release(seg, s[3]); /* free */
	return 0;
}

static int read_expect(const char *path, uid_t owner, pid_t pid, int want_err, const char *word)
{
	struct stats_snapshot snap;
	char why[160];
	int err = stats_seg_read(path, owner, pid, &snap, why, sizeof(why));

	if (err == 0)
		stats_snapshot_free(&snap);
	return check(err == want_err, "%s: %d (%s), expected %d", path, err, why, want_err) &&
	       check(!word || strstr(why, word) != NULL, "why '%s', expected '%s'", why, word);
}

static int test_read_valid(void)
{
	struct stats_seg seg;
	struct stats_snapshot snap;
	char why[160];
	int err, ok;

	fresh_dir();
	err = make_segment(&seg);
	ok = check(err == 0, "create: %s", strerror(-err));
	if (err == 0) {
		err = stats_seg_read(seg.path, geteuid(), getpid(), &snap, why, sizeof(why));
		ok = check(err == 0, "read: %s", why) &&
		     check(snap.info.slot_count == SLOTS && snap.info.pid == getpid(),
			   "header %u slots, pid %d", snap.info.slot_count, (int)snap.info.pid) &&
		     check(strcmp(snap.info.comm, "unit") == 0, "comm %s", snap.info.comm) &&
		     check(snap.count == 2, "%zu live slots, expected 2", snap.count) &&
		     check(snap.count > 0 && snap.conn[0].remote.port == 6379, "first slot");
		if (err == 0)
			stats_snapshot_free(&snap);
		stats_seg_destroy(&seg);
	}
	remove_dir();
	return ok;
}

static void on_alarm(int sig)
{
	(void)sig;
	_exit(3); /* the reader blocked: the binary fails */
}

static int test_read_fifo_no_block(void)
{
	char name[128];
	int ok;

	fresh_dir();
	usual_name(name, sizeof(name), getpid());
	signal(SIGALRM, on_alarm);
	alarm(10);
	ok = check(mkfifo(name, 0666) == 0, "mkfifo: %s", strerror(errno)) &&
	     read_expect(name, geteuid(), getpid(), -EINVAL, "not a regular file (a fifo)");
	alarm(0);
	remove_dir();
	return ok;
}

static int test_read_symlink(void)
{
	struct stats_seg seg;
	char name[128];
	int ok, err;

	fresh_dir();
	err = make_segment(&seg);
	snprintf(name, sizeof(name), "%s/sdpshim-%u-%d.stats", dir, (unsigned)geteuid(), 1);
	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     check(symlink(seg.path, name) == 0, "symlink: %s", strerror(errno)) &&
	     read_expect(name, geteuid(), getpid(), -EINVAL, "a symbolic link");
	if (err == 0)
		stats_seg_destroy(&seg);
	remove_dir();
	return ok;
}

static int test_read_other_owner(void)
{
	struct stats_seg seg;
	int ok, err;

	if (geteuid() != 0)
		return printf("#   needs root to make a file of another user: not run\n") > 0;
	fresh_dir();
	err = make_segment(&seg);
	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     check(chown(seg.path, OTHER_UID, OTHER_UID) == 0, "chown: %s", strerror(errno)) &&
	     read_expect(seg.path, geteuid(), getpid(), -EPERM, "owned by uid 65534");
	if (err == 0)
		stats_seg_destroy(&seg);
	remove_dir();
	return ok;
}

static int test_read_bad_images(void)
{
	struct stats_seg seg;
	int ok, err;

	fresh_dir();
	err = make_segment(&seg);
	ok = check(err == 0, "create: %s", strerror(-err));
	if (err == 0) {
		/* Cut mid-slots: the header's slot count no longer fits. */
		ok = check(truncate(seg.path, (off_t)stats_seg_len(SLOTS / 2)) == 0, "truncate") &&
		     read_expect(seg.path, geteuid(), getpid(), -EINVAL, "not a valid stats segment");
		/* Cut mid-links: the slots fit, the link records do not. */
		ok = check(truncate(seg.path, (off_t)stats_link_off(SLOTS, LINKS - 1)) == 0,
			   "truncate") &&
		     read_expect(seg.path, geteuid(), getpid(), -EINVAL, "link count") && ok;
		ok = check(truncate(seg.path, (off_t)stats_link_off(SLOTS, LINKS)) == 0, "extend") && ok;
		seg.hdr->link_count = 0;
		ok = read_expect(seg.path, geteuid(), getpid(), -EINVAL, "link count") && ok;
		seg.hdr->link_count = STATS_LINKS_MAX + 1;
		ok = read_expect(seg.path, geteuid(), getpid(), -EINVAL, "link count") && ok;
		seg.hdr->link_count = LINKS;
		ok = read_expect(seg.path, geteuid(), getpid(), 0, NULL) && ok;
		seg.hdr->version = 1; /* the layout before link records */
		ok = read_expect(seg.path, geteuid(), getpid(), -EINVAL, "unknown version") && ok;
		seg.hdr->version = STATS_VERSION;
		seg.hdr->slot_count = UINT32_MAX;
		ok = read_expect(seg.path, geteuid(), getpid(), -EINVAL, "slot count") && ok;
		seg.hdr->slot_count = SLOTS;
		ok = read_expect(seg.path, geteuid(), getpid() + 1, -EINVAL, "names pid") && ok;
		seg.hdr->magic = 0;
		ok = read_expect(seg.path, geteuid(), getpid(), -EINVAL, "magic") && ok;
		ok = check(truncate(seg.path, 5) == 0, "truncate") &&
		     read_expect(seg.path, geteuid(), getpid(), -EINVAL, "shorter than a header") && ok;
		stats_seg_unlink(&seg);
		stats_seg_detach(&seg); /* the mapping is past the end of the file now */
	}
	remove_dir();
	return ok;
}

static int test_read_dead_process(void)
{
	struct stats_seg seg;
	pid_t child = fork();
	int ok, err;

	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);
	fresh_dir();
	err = stats_seg_create(&seg, dir, child, geteuid(), "gone", SLOTS, LINKS);
	ok = check(err == 0, "create: %s", strerror(-err)) &&
	     read_expect(seg.path, geteuid(), child, -ESRCH, NULL);
	if (err == 0)
		stats_seg_destroy(&seg);
	remove_dir();
	return ok;
}


/* ---- the pinned-memory budget and link records --------------------------------- */

static int test_read_pin_fields(void)
{
	struct stats_seg seg;
	struct stats_snapshot snap;
	char why[160];
	int err, ok;

	fresh_dir();
	err = make_segment(&seg);
	ok = check(err == 0, "create: %s", strerror(-err));
	if (err == 0) {
		atomic_store(&seg.hdr->pin_budget, 8388608);
		atomic_store(&seg.hdr->pinned_bytes, 4268032);
		atomic_store(&seg.hdr->budget_refusals, 7);
		atomic_store(&seg.hdr->progress_wakeups, 4242);
		err = stats_seg_read(seg.path, geteuid(), getpid(), &snap, why, sizeof(why));
		ok = check(err == 0, "read: %s", why) &&
		     check(snap.info.pin_budget == 8388608 && snap.info.pinned_bytes == 4268032 &&
			   snap.info.budget_refusals == 7, "budget %llu, pinned %llu, refusals %llu",
			   (unsigned long long)snap.info.pin_budget,
			   (unsigned long long)snap.info.pinned_bytes,
			   (unsigned long long)snap.info.budget_refusals) &&
		     check(snap.info.progress_wakeups == 4242, "progress wakeups %llu",
			   (unsigned long long)snap.info.progress_wakeups) &&
		     check(snap.info.link_count == LINKS, "link_count %u", snap.info.link_count) &&
		     check(snap.link_count == 0, "%zu live links in a segment with none",
			   snap.link_count);
		if (err == 0)
			stats_snapshot_free(&snap);
		stats_seg_destroy(&seg);
	}
	remove_dir();
	return ok;
}

static void fill_link(struct sdp_link_stats *l, uint8_t role, uint16_t peer_port)
{
	stats_link_begin(l);
	l->role = role;
	l->state = STATS_LINK_UP;
	l->local.family = AF_INET;
	l->local.port = 4791;
	l->local.addr[0] = 10;
	l->peer.family = AF_INET6;
	l->peer.port = peer_port;
	l->peer.addr[15] = 1;
	stats_link_end(l);
	atomic_store(&l->streams, 3);
	atomic_store(&l->streams_max, 255);
	atomic_store(&l->pinned_bytes, 1u << 20);
	atomic_store(&l->credits_total, 64);
	atomic_store(&l->credits_in_use, 5);
	atomic_store(&l->msgs_sent, 1000);
	atomic_store(&l->msgs_received, 999);
	atomic_store(&l->msgs_received_by_app, 400);
	atomic_store(&l->probes_sent, 7);
	atomic_store(&l->bytes_sent, 123456);
	atomic_store(&l->bytes_received, 654321);
	atomic_store(&l->streams_opened, 9);
}

/* Two good link records read back byte for byte; a record with a bad role,
 * one with a bad state, one with a pad set, one being written (seq odd) and
 * a released one are skipped. */
static int test_read_links(void)
{
	struct stats_seg seg;
	struct stats_snapshot snap;
	struct sdp_link_stats *l[7];
	char why[160];
	int err, ok;

	fresh_dir();
	err = make_segment(&seg);
	ok = check(err == 0, "create: %s", strerror(-err));
	if (err != 0) {
		remove_dir();
		return ok;
	}
	for (int i = 0; i < 7; i++) {
		l[i] = stats_link_alloc(&seg);
		ok = check(l[i] != NULL, "link %d not allocated", i) && ok;
	}
	if (!ok) {
		stats_seg_destroy(&seg);
		remove_dir();
		return ok;
	}
	fill_link(l[0], STATS_LINK_CLIENT, 7000);
	fill_link(l[1], STATS_LINK_SERVER, 7001);
	fill_link(l[2], 9, 7002);                 /* no such role */
	fill_link(l[3], STATS_LINK_CLIENT, 7003);
	l[3]->state = 4;                          /* no such state */
	fill_link(l[4], STATS_LINK_CLIENT, 7004);
	l[4]->pad2 = 1;
	fill_link(l[5], STATS_LINK_CLIENT, 7005);
	stats_link_begin(l[5]);                   /* being written */
	fill_link(l[6], STATS_LINK_SERVER, 7006);
	stats_link_release(&seg, l[6]);
	err = stats_seg_read(seg.path, geteuid(), getpid(), &snap, why, sizeof(why));
	ok = check(err == 0, "read: %s", why);
	if (err == 0) {
		ok = check(snap.link_count == 2, "%zu live links, expected 2", snap.link_count) &&
		     check(memcmp(&snap.link[0], l[0], sizeof(*l[0])) == 0, "link 0 differs") &&
		     check(memcmp(&snap.link[1], l[1], sizeof(*l[1])) == 0, "link 1 differs") &&
		     check(snap.count == 2, "%zu live slots beside them", snap.count) && ok;
		stats_snapshot_free(&snap);
	}
	/* Released records are given out again, fresh: with l[0] and l[6] free
	 * and one never used, three allocations succeed and a fourth fails. */
	stats_link_release(&seg, l[0]);
	bool reused0 = false, reused6 = false, fresh = true;
	for (int i = 0; i < 3; i++) {
		struct sdp_link_stats *again = stats_link_alloc(&seg);

		reused0 |= again == l[0];
		reused6 |= again == l[6];
		fresh = fresh && again && again->role == 0 && atomic_load(&again->msgs_sent) == 0 &&
			(atomic_load(&again->seq) & 1) == 0 && again->opened_ms != 0;
	}
	ok = check(reused0 && reused6, "released records not reused: %d %d", reused0, reused6) &&
	     check(fresh, "a record given out is not fresh") &&
	     check(stats_link_alloc(&seg) == NULL, "more records than LINKS") && ok;
	stats_seg_destroy(&seg);
	remove_dir();
	return ok;
}

static int test_link_json(void)
{
	struct sdp_link_stats l;
	char buf[1024];
	int n;

	memset(&l, 0, sizeof(l));
	fill_link(&l, STATS_LINK_SERVER, 7001);
	l.opened_ms = 1700000000000ull;
	n = stats_link_json(&l, buf, sizeof(buf));
	return check(n > 0 && (size_t)n == strlen(buf), "length %d", n) &&
	       check(strcmp(buf, "{\"role\":\"server\",\"state\":\"up\",\"local\":\"10.0.0.0:4791\","
			    "\"peer\":\"[::1]:7001\",\"streams\":3,\"streams_max\":255,"
			    "\"streams_opened\":9,\"pinned_bytes\":1048576,\"credits_total\":64,"
			    "\"credits_in_use\":5,\"msgs_sent\":1000,\"msgs_received\":999,\"msgs_received_by_app\":400,"
			    "\"probes_sent\":7,"
			    "\"bytes_sent\":123456,\"bytes_received\":654321,"
			    "\"opened_ms\":1700000000000}") == 0, "%s", buf) &&
	       check(stats_link_json(&l, buf, 40) == -1, "a short buffer was not refused");
}

/* A process name is the app's to choose (a binary named so): in a stats
 * line it can neither end its JSON string nor add a field. */
static int test_conn_json_comm(void)
{
	struct sdp_conn_stats st;
	char buf[2048];
	int n;

	memset(&st, 0, sizeof(st));
	st.role = STATS_ROLE_CLIENT;
	st.path = SDP_PATH_RDMA;
	n = stats_conn_json(&st, 42, "x\",\"path\":\"tcp\\\x01\xc3\xa9", 0, buf, sizeof(buf));
	return check(n > 0 && (size_t)n == strlen(buf), "length %d", n) &&
	       check(strstr(buf, "\"comm\":\"x_,_path_:_tcp____\",") != NULL, "%s", buf) &&
	       check(strstr(buf, "\"path\":\"tcp\"") == NULL, "a field was added: %s", buf);
}

static const struct tap_case cases[] = {
	{ "writer: O_EXCL create, 0600 regular file of ours, one link, its size",
	  test_create_exclusive },
	{ "writer: a stale file of ours under the name is replaced", test_stale_own_file_reused },
	{ "writer: another user's file under the name is never opened (fallback name)",
	  test_foreign_file_not_used },
	{ "writer: a symlink under the name is never followed (fallback name)",
	  test_symlink_not_followed },
	{ "writer: a file with two links is left alone (fallback name)", test_two_links_not_removed },
	{ "writer: slots come from private geometry, whatever the shared header says",
	  test_private_geometry },
	{ "reader: a valid segment gives its header and only its live, in-range slots",
	  test_read_valid },
	{ "reader: a FIFO is refused without blocking", test_read_fifo_no_block },
	{ "reader: a symlink is refused", test_read_symlink },
	{ "reader: a file of another owner is refused", test_read_other_owner },
	{ "reader: short, truncated, lying or foreign-pid images are refused", test_read_bad_images },
	{ "reader: a valid segment of a dead process is -ESRCH", test_read_dead_process },
	{ "reader: the header's budget, pinned bytes, refusals and link count read back",
	  test_read_pin_fields },
	{ "reader: live link records read back byte for byte; corrupt, unsettled or freed "
	  "ones are skipped", test_read_links },
	{ "a link record's JSON", test_link_json },
	{ "a connection's JSON: the process name cannot end its string or add a field",
	  test_conn_json_comm },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}

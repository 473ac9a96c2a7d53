/* `sdpshim stat`: reads the shared-memory stats segments of preloaded
 * processes and prints their connections (and their links, when they have
 * any) as tables or as one JSON document.
 * Each segment is read once into private copies (base/stats_read.c checks
 * the file's type and owner and every field); a file it refuses is named on
 * stderr and skipped, and the others are still shown. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/stats_shm.h"
#include "tools/cli.h"

#define CELL_MAX 64
#define CONN_JSON_MAX 2048

struct stat_opts {
	bool json, raw_bytes, listeners, all_users;
	pid_t only_pid;        /* 0: every process */
	unsigned watch_secs;   /* 0: print once */
};

/* One segment as read: private copies of its header and live slots (its
 * comm, snap.info.comm, checked printable, without '"' or '\\'). */
struct proc_view {
	struct stats_snapshot snap;
	pid_t pid;
};

struct proc_list {
	struct proc_view *proc;
	size_t count, cap;
};

enum col { COL_PID, COL_COMM, COL_FD, COL_ROLE, COL_LOCAL, COL_REMOTE, COL_PATH, COL_REASON,
	   COL_SENT, COL_RECV, COL_ZCOPY, COL_CREDITS, COL_SWITCHES, COL_COUNT };

static const char *const col_title[COL_COUNT] = {
	"PID", "COMM", "FD", "ROLE", "LOCAL", "REMOTE", "PATH", "REASON",
	"SENT", "RECV", "ZCOPY%", "CREDITS", "SWITCHES",
};

/* Numeric columns are right-aligned. */
static const bool col_right[COL_COUNT] = {
	[COL_PID] = true, [COL_FD] = true, [COL_SENT] = true, [COL_RECV] = true,
	[COL_ZCOPY] = true, [COL_CREDITS] = true, [COL_SWITCHES] = true,
};

struct table_row {
	pid_t pid;
	int fd;
	char cell[COL_COUNT][CELL_MAX];
};

struct table {
	struct table_row *row;
	size_t count, cap;
};

static volatile sig_atomic_t stop_requested;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdpshim stat [--json] [--bytes] [--listeners] [-p PID] [-w SECS] [--all-users]\n"
		"  --json        one JSON document instead of the table\n"
		"  --bytes       exact byte counts instead of 1.2M\n"
		"  --listeners   also show listening sockets\n"
		"  -p PID        only this process\n"
		"  -w SECS       repeat every SECS seconds until interrupted\n"
		"  --all-users   every user's processes (root only)\n"
		"Segments are read from %s (SDPSHIM_RUN_DIR).\n", stats_dir());
}

static int parse_number(const char *text, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v <= 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Returns 0 to go on, 1 after --help, -1 on bad usage. */
static int parse_args(int argc, char **argv, struct stat_opts *o)
{
	enum { OPT_JSON = 256, OPT_BYTES, OPT_LISTENERS, OPT_ALL_USERS };
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "bytes", no_argument, NULL, OPT_BYTES },
		{ "listeners", no_argument, NULL, OPT_LISTENERS },
		{ "all-users", no_argument, NULL, OPT_ALL_USERS },
		{ "pid", required_argument, NULL, 'p' },
		{ "watch", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long v;
	int opt;

	memset(o, 0, sizeof(*o));
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "p:w:h", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_JSON: o->json = true; break;
		case OPT_BYTES: o->raw_bytes = true; break;
		case OPT_LISTENERS: o->listeners = true; break;
		case OPT_ALL_USERS: o->all_users = true; break;
		case 'h': return 1;
		case 'p':
			if (parse_number(optarg, INT32_MAX, &v) != 0) {
				fprintf(stderr, "sdpshim stat: -p needs a process id, not '%s'\n", optarg);
				return -1;
			}
			o->only_pid = (pid_t)v;
			break;
		case 'w':
			if (parse_number(optarg, 86400, &v) != 0) {
				fprintf(stderr, "sdpshim stat: -w needs seconds (1-86400), not '%s'\n",
					optarg);
				return -1;
			}
			o->watch_secs = (unsigned)v;
			break;
		default:
			fprintf(stderr, "sdpshim stat: bad or incomplete option '%s'\n",
				argv[optind - 1]);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sdpshim stat: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (o->all_users && geteuid() != 0) {
		fprintf(stderr, "sdpshim stat: --all-users needs root\n");
		return -1;
	}
	return 0;
}

/* "sdpshim-<uid>-<pid>.stats", or the fallback name a writer takes when
 * that one is taken, "sdpshim-<uid>-<pid>-<16 hex digits>.stats"; numbers
 * in their plain decimal form only. */
static bool parse_segment_name(const char *name, unsigned *uid, int *pid)
{
	char canon[64];
	int used = -1;

	if (sscanf(name, "sdpshim-%u-%d%n", uid, pid, &used) != 2 || used < 0 || *pid <= 0)
		return false;
	if (snprintf(canon, sizeof(canon), "sdpshim-%u-%d", *uid, *pid) != used ||
	    strncmp(name, canon, (size_t)used) != 0)
		return false;
	name += used;
	if (name[0] == '-') {
		if (strspn(name + 1, "0123456789abcdef") != 16)
			return false;
		name += 17;
	}
	return strcmp(name, ".stats") == 0;
}

static int proc_list_add(struct proc_list *list, const struct stats_snapshot *snap)
{
	struct proc_view *p;

	if (list->count == list->cap) {
		size_t cap = list->cap ? list->cap * 2 : 16;
		p = realloc(list->proc, cap * sizeof(*p));
		if (!p)
			return -1;
		list->proc = p;
		list->cap = cap;
	}
	p = &list->proc[list->count++];
	p->snap = *snap;
	p->pid = snap->info.pid;
	return 0;
}

static void proc_list_free(struct proc_list *list)
{
	for (size_t i = 0; i < list->count; i++)
		stats_snapshot_free(&list->proc[i].snap);
	free(list->proc);
	memset(list, 0, sizeof(*list));
}

static bool wanted_segment(const struct stat_opts *o, unsigned uid, int pid)
{
	if (!o->all_users && uid != (unsigned)getuid())
		return false;
	return o->only_pid == 0 || o->only_pid == pid;
}

/* Reads one segment file; dead processes' files are removed silently, and
 * a file that is not a valid segment of uid's process pid is named and
 * skipped. */
static void attach_segment(const char *path, unsigned uid, int pid, struct proc_list *list)
{
	struct stats_snapshot snap;
	char why[160];
	int err = stats_seg_read(path, (uid_t)uid, (pid_t)pid, &snap, why, sizeof(why));

	if (err == -ESRCH) {
		unlink(path);
		return;
	}
	if (err == -ENOENT)
		return; /* the process exited while we scanned */
	if (err) {
		fprintf(stderr, "sdpshim stat: skipping %s: %s\n", path, why);
		return;
	}
	if (proc_list_add(list, &snap) != 0)
		stats_snapshot_free(&snap);
}

static int compare_proc(const void *a, const void *b)
{
	const struct proc_view *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Returns 0, or -1 when the directory cannot be read at all. */
static int collect_processes(const struct stat_opts *o, struct proc_list *list)
{
	const char *dir = stats_dir();
	DIR *d = opendir(dir);
	struct dirent *de;

	memset(list, 0, sizeof(*list));
	if (!d) {
		if (errno == ENOENT)
			return 0;
		fprintf(stderr, "sdpshim stat: cannot read %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		char path[PATH_MAX];
		unsigned uid;
		int pid;

		if (!parse_segment_name(de->d_name, &uid, &pid) || !wanted_segment(o, uid, pid))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		attach_segment(path, uid, pid, list);
	}
	closedir(d);
	if (list->count > 1)
		qsort(list->proc, list->count, sizeof(list->proc[0]), compare_proc);
	return 0;
}

/* ---- table -------------------------------------------------------------- */

static void format_size(uint64_t v, bool raw, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	double x = (double)v;
	int unit = -1;

	if (raw || v < 1024) {
		snprintf(buf, len, "%" PRIu64, v);
		return;
	}
	while (x >= 1024.0 && unit < (int)sizeof(units) - 2) {
		x /= 1024.0;
		unit++;
	}
	snprintf(buf, len, "%.1f%c", x, units[unit]);
}

static void format_zcopy(const struct sdp_conn_stats *s, char *buf, size_t len)
{
	uint64_t sent = atomic_load_explicit(&s->bytes_sent, memory_order_relaxed);
	uint64_t zc = atomic_load_explicit(&s->zcopy_bytes_sent, memory_order_relaxed);

	if (sent == 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.0f%%", 100.0 * (double)zc / (double)sent);
}

static void format_credits(const struct sdp_conn_stats *s, char *buf, size_t len)
{
	if (s->path != SDP_PATH_RDMA)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%u/%u", (unsigned)atomic_load(&s->tx_credits),
			 (unsigned)atomic_load(&s->rx_posted));
}

static void fill_row(struct table_row *r, const struct proc_view *p,
		     const struct sdp_conn_stats *s, bool raw)
{
	r->pid = p->pid;
	r->fd = s->fd;
	snprintf(r->cell[COL_PID], CELL_MAX, "%d", (int)p->pid);
	snprintf(r->cell[COL_COMM], CELL_MAX, "%.*s", CELL_MAX - 1, p->snap.info.comm);
	snprintf(r->cell[COL_FD], CELL_MAX, "%d", s->fd);
	snprintf(r->cell[COL_ROLE], CELL_MAX, "%s", stats_role_name(s->role));
	stats_addr_format(&s->local, r->cell[COL_LOCAL], CELL_MAX);
	stats_addr_format(&s->remote, r->cell[COL_REMOTE], CELL_MAX);
	snprintf(r->cell[COL_PATH], CELL_MAX, "%s", sdp_path_name((enum sdp_path)s->path));
	snprintf(r->cell[COL_REASON], CELL_MAX, "%s%s",
		 sdp_reason_name((enum sdp_reason)s->reason), s->negcached ? "*" : "");
	format_size(atomic_load(&s->bytes_sent), raw, r->cell[COL_SENT], CELL_MAX);
	format_size(atomic_load(&s->bytes_received), raw, r->cell[COL_RECV], CELL_MAX);
	format_zcopy(s, r->cell[COL_ZCOPY], CELL_MAX);
	format_credits(s, r->cell[COL_CREDITS], CELL_MAX);
	snprintf(r->cell[COL_SWITCHES], CELL_MAX, "%u", (unsigned)atomic_load(&s->switches));
}

static struct table_row *table_add(struct table *t)
{
	if (t->count == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct table_row *row = realloc(t->row, cap * sizeof(*row));
		if (!row)
			return NULL;
		t->row = row;
		t->cap = cap;
	}
	return &t->row[t->count++];
}

static bool row_visible(const struct sdp_conn_stats *s, const struct stat_opts *o)
{
	return o->listeners || s->role != STATS_ROLE_LISTENER;
}

static void collect_rows(const struct proc_view *p, const struct stat_opts *o, struct table *t)
{
	for (size_t i = 0; i < p->snap.count; i++) {
		const struct sdp_conn_stats *s = &p->snap.conn[i];
		struct table_row *r;

		if (!row_visible(s, o))
			continue;
		r = table_add(t);
		if (!r)
			return;
		fill_row(r, p, s, o->raw_bytes);
	}
}

static int compare_row(const void *a, const void *b)
{
	const struct table_row *x = a, *y = b;

	if (x->pid != y->pid)
		return (x->pid > y->pid) - (x->pid < y->pid);
	return (x->fd > y->fd) - (x->fd < y->fd);
}

static void print_cells(char cells[COL_COUNT][CELL_MAX], const int *width)
{
	for (int c = 0; c < COL_COUNT; c++) {
		const char *sep = c + 1 < COL_COUNT ? "  " : "\n";
		printf(col_right[c] ? "%*s%s" : "%-*s%s", width[c], cells[c], sep);
	}
}

static void print_table(struct table *t)
{
	char title[COL_COUNT][CELL_MAX];
	int width[COL_COUNT];

	for (int c = 0; c < COL_COUNT; c++) {
		snprintf(title[c], CELL_MAX, "%s", col_title[c]);
		width[c] = (int)strlen(col_title[c]);
		for (size_t i = 0; i < t->count; i++) {
			int w = (int)strlen(t->row[i].cell[c]);
			if (w > width[c])
				width[c] = w;
		}
	}
	qsort(t->row, t->count, sizeof(t->row[0]), compare_row);
	print_cells(title, width);
	for (size_t i = 0; i < t->count; i++)
		print_cells(t->row[i].cell, width);
}

static size_t reason_slot_count(void)
{
	return SDP_REASON_COUNT < STATS_REASON_SLOTS ? SDP_REASON_COUNT : STATS_REASON_SLOTS;
}

/* "(loopback 2, no_device 1)" for the connections that stayed on TCP. */
static void print_tcp_reasons(const struct stats_proc_info *h)
{
	const char *sep = " (";

	for (size_t r = 0; r < reason_slot_count(); r++) {
		uint64_t n = h->conns_by_reason[r];
		if (n == 0 || r == SDP_REASON_NONE)
			continue;
		printf("%s%s %" PRIu64, sep, sdp_reason_name((enum sdp_reason)r), n);
		sep = ", ";
	}
	if (sep[0] == ',')
		printf(")");
}

static void print_summary(const struct proc_view *p, bool raw)
{
	const struct stats_proc_info *h = &p->snap.info;
	char pinned[CELL_MAX], budget[CELL_MAX];

	printf("pid %d %s: %" PRIu64 " rdma, %" PRIu64 " tcp", (int)p->pid, p->snap.info.comm,
	       h->conns_by_path[SDP_PATH_RDMA], h->conns_by_path[SDP_PATH_TCP]);
	print_tcp_reasons(h);
	format_size(h->pinned_bytes, raw, pinned, sizeof(pinned));
	format_size(h->pin_budget, raw, budget, sizeof(budget));
	printf(", negcache hits %" PRIu64 ", pinned %s of %s, budget refusals %" PRIu64
	       ", progress wakeups %" PRIu64 "\n",
	       h->negcache_hits, pinned, budget, h->budget_refusals, h->progress_wakeups);
}

/* ---- links -------------------------------------------------------------- */

enum link_col { LCOL_PID, LCOL_COMM, LCOL_PEER, LCOL_ROLE, LCOL_STATE, LCOL_STREAMS,
		LCOL_PINNED, LCOL_CREDITS, LCOL_MSGS, LCOL_COUNT };

static const char *const link_col_title[LCOL_COUNT] = {
	"PID", "COMM", "PEER", "ROLE", "STATE", "STREAMS", "PINNED", "CREDITS", "MSGS",
};

static const bool link_col_right[LCOL_COUNT] = {
	[LCOL_PID] = true, [LCOL_STREAMS] = true, [LCOL_PINNED] = true, [LCOL_CREDITS] = true,
	[LCOL_MSGS] = true,
};

struct link_row {
	char cell[LCOL_COUNT][CELL_MAX];
};

/* STREAMS is open/cap, CREDITS in use/total, MSGS sent/received. */
static void fill_link_row(struct link_row *r, const struct proc_view *p,
			  const struct sdp_link_stats *l, bool raw)
{
	char sent[24], received[24]; /* format_size: at most 20 digits */

	snprintf(r->cell[LCOL_PID], CELL_MAX, "%d", (int)p->pid);
	snprintf(r->cell[LCOL_COMM], CELL_MAX, "%.*s", CELL_MAX - 1, p->snap.info.comm);
	stats_addr_format(&l->peer, r->cell[LCOL_PEER], CELL_MAX);
	snprintf(r->cell[LCOL_ROLE], CELL_MAX, "%s", stats_link_role_name(l->role));
	snprintf(r->cell[LCOL_STATE], CELL_MAX, "%s", stats_link_state_name(l->state));
	snprintf(r->cell[LCOL_STREAMS], CELL_MAX, "%u/%u", (unsigned)atomic_load(&l->streams),
		 (unsigned)atomic_load(&l->streams_max));
	format_size(atomic_load(&l->pinned_bytes), raw, r->cell[LCOL_PINNED], CELL_MAX);
	snprintf(r->cell[LCOL_CREDITS], CELL_MAX, "%u/%u", (unsigned)atomic_load(&l->credits_in_use),
		 (unsigned)atomic_load(&l->credits_total));
	format_size(atomic_load(&l->msgs_sent), raw, sent, sizeof(sent));
	format_size(atomic_load(&l->msgs_received), raw, received, sizeof(received));
	snprintf(r->cell[LCOL_MSGS], CELL_MAX, "%s/%s", sent, received);
}

static void print_link_cells(char cells[LCOL_COUNT][CELL_MAX], const int *width)
{
	for (int c = 0; c < LCOL_COUNT; c++) {
		const char *sep = c + 1 < LCOL_COUNT ? "  " : "\n";
		printf(link_col_right[c] ? "%*s%s" : "%-*s%s", width[c], cells[c], sep);
	}
}

/* The live links of every process, in process order; nothing at all when
 * no process has one. */
static void show_links(const struct proc_list *list, bool raw)
{
	struct link_row title, *rows;
	size_t n = 0, total = 0;
	int width[LCOL_COUNT];

	for (size_t i = 0; i < list->count; i++)
		total += list->proc[i].snap.link_count;
	if (total == 0)
		return;
	rows = calloc(total, sizeof(*rows));
	if (!rows)
		return;
	for (size_t i = 0; i < list->count; i++)
		for (size_t j = 0; j < list->proc[i].snap.link_count; j++)
			fill_link_row(&rows[n++], &list->proc[i], &list->proc[i].snap.link[j], raw);
	for (int c = 0; c < LCOL_COUNT; c++) {
		snprintf(title.cell[c], CELL_MAX, "%s", link_col_title[c]);
		width[c] = (int)strlen(link_col_title[c]);
		for (size_t i = 0; i < n; i++)
			if ((int)strlen(rows[i].cell[c]) > width[c])
				width[c] = (int)strlen(rows[i].cell[c]);
	}
	printf("\nlinks:\n");
	print_link_cells(title.cell, width);
	for (size_t i = 0; i < n; i++)
		print_link_cells(rows[i].cell, width);
	free(rows);
}

static void show_table(const struct proc_list *list, const struct stat_opts *o)
{
	struct table t = { 0 };

	if (list->count == 0) {
		printf("no sdpshim processes\n");
		return;
	}
	for (size_t i = 0; i < list->count; i++)
		collect_rows(&list->proc[i], o, &t);
	print_table(&t);
	show_links(list, o->raw_bytes);
	printf("\n");
	for (size_t i = 0; i < list->count; i++)
		print_summary(&list->proc[i], o->raw_bytes);
	free(t.row);
}

/* ---- JSON --------------------------------------------------------------- */

struct byte_totals {
	uint64_t sent, received;
};

/* The header's totals include closed connections; the live slots are a
 * lower bound that still holds if a writer does not maintain the totals. */
static struct byte_totals process_bytes(const struct stats_snapshot *snap)
{
	struct byte_totals live = { 0, 0 }, total;

	for (size_t i = 0; i < snap->count; i++) {
		live.sent += atomic_load(&snap->conn[i].bytes_sent);
		live.received += atomic_load(&snap->conn[i].bytes_received);
	}
	total.sent = snap->info.bytes_sent;
	total.received = snap->info.bytes_received;
	if (live.sent > total.sent)
		total.sent = live.sent;
	if (live.received > total.received)
		total.received = live.received;
	return total;
}

static void json_print_reasons(const struct stats_proc_info *h)
{
	const char *sep = "";

	printf("\"conns_by_reason\":{");
	for (size_t r = 0; r < reason_slot_count(); r++) {
		uint64_t n = h->conns_by_reason[r];
		if (n == 0)
			continue;
		printf("%s\"%s\":%" PRIu64, sep, sdp_reason_name((enum sdp_reason)r), n);
		sep = ",";
	}
	printf("}");
}

static void json_print_connections(const struct proc_view *p, const struct stat_opts *o)
{
	char buf[CONN_JSON_MAX];
	const char *sep = "";

	printf("\"connections\":[");
	for (size_t i = 0; i < p->snap.count; i++) {
		const struct sdp_conn_stats *s = &p->snap.conn[i];

		if (!row_visible(s, o))
			continue;
		if (stats_conn_json(s, p->pid, p->snap.info.comm, 0, buf, sizeof(buf)) < 0)
			continue;
		printf("%s%s", sep, buf);
		sep = ",";
	}
	printf("]");
}

static void json_print_links(const struct proc_view *p)
{
	char buf[CONN_JSON_MAX];
	const char *sep = "";

	printf("\"links\":[");
	for (size_t i = 0; i < p->snap.link_count; i++) {
		if (stats_link_json(&p->snap.link[i], buf, sizeof(buf)) < 0)
			continue;
		printf("%s%s", sep, buf);
		sep = ",";
	}
	printf("]");
}

static void json_print_process(const struct proc_view *p, const struct stat_opts *o)
{
	const struct stats_proc_info *h = &p->snap.info;
	struct byte_totals bytes = process_bytes(&p->snap);

	printf("{\"pid\":%d,\"comm\":\"%s\",", (int)p->pid, p->snap.info.comm);
	printf("\"conns_by_path\":{\"tcp\":%" PRIu64 ",\"rdma\":%" PRIu64 "},",
	       h->conns_by_path[SDP_PATH_TCP], h->conns_by_path[SDP_PATH_RDMA]);
	json_print_reasons(h);
	printf(",\"negcache_hits\":%" PRIu64 ",\"bytes_sent\":%" PRIu64
	       ",\"bytes_received\":%" PRIu64 ",",
	       h->negcache_hits, bytes.sent, bytes.received);
	printf("\"pin_budget\":%" PRIu64 ",\"pinned_bytes\":%" PRIu64
	       ",\"budget_refusals\":%" PRIu64 ",\"progress_wakeups\":%" PRIu64 ",",
	       h->pin_budget, h->pinned_bytes, h->budget_refusals, h->progress_wakeups);
	json_print_connections(p, o);
	printf(",");
	json_print_links(p);
	printf("}");
}

static void show_json(const struct proc_list *list, const struct stat_opts *o)
{
	printf("{\"processes\":[");
	for (size_t i = 0; i < list->count; i++) {
		if (i)
			printf(",");
		json_print_process(&list->proc[i], o);
	}
	printf("]}\n");
}

/* ---- main --------------------------------------------------------------- */

static int show_once(const struct stat_opts *o)
{
	struct proc_list list;

	if (collect_processes(o, &list) != 0)
		return 1;
	if (o->json)
		show_json(&list, o);
	else
		show_table(&list, o);
	proc_list_free(&list);
	fflush(stdout);
	return 0;
}

static void on_interrupt(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void catch_interrupts(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static int watch(const struct stat_opts *o)
{
	catch_interrupts();
	while (!stop_requested) {
		if (!o->json)
			printf("\033[H\033[2J"); /* home, clear screen */
		if (show_once(o) != 0)
			return 1;
		for (unsigned s = 0; s < o->watch_secs && !stop_requested; s++)
			sleep(1);
	}
	return 0;
}

int stat_main(int argc, char **argv)
{
	struct stat_opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	return o.watch_secs ? watch(&o) : show_once(&o);
}

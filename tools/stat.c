/* `sdpshim stat`: the options, reading the shared-memory stats segments of
 * preloaded processes, the filters and the sort order; the printers are in
 * tools/stat_table.c (table, JSON), stat_totals.c, stat_prom.c and
 * stat_live.c (tools/stat.h).
 * Each segment is read once into private copies (base/stats_read.c checks
 * the file's type and owner and every field); a file it refuses is named on
 * stderr and skipped, and the others are still shown. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/stat.h"

#define INTERVAL_MIN 0.01
#define INTERVAL_MAX 86400.0

volatile sig_atomic_t stat_stop_requested;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdpshim stat [--json | --totals | --prom] [-i SECS [-n COUNT]] [filters]\n"
		"                    [--sort FIELD] [--bytes] [--listeners] [-w SECS] [--all-users]\n"
		"  --json         one JSON document instead of the table\n"
		"  --totals       connections and bytes per process and per path/reason\n"
		"  --prom         Prometheus text format 0.0.4 (for node_exporter's textfile\n"
		"                 collector: sdpshim stat --prom > DIR/sdpshim.prom)\n"
		"  -i SECS        live view: every SECS seconds (0.5 works) each connection's\n"
		"                 bytes/s each way and the bytes since the last refresh\n"
		"  -n COUNT       with -i or -w: stop after COUNT refreshes\n"
		"  -w SECS        repeat the table (or --json, --totals, --prom) every SECS seconds\n"
		"  --bytes        exact byte counts instead of 1.2M\n"
		"  --listeners    also show listening sockets\n"
		"  --all-users    every user's processes (root only)\n"
		"filters (every output):\n"
		"  -p, --pid PID  only this process\n"
		"  --comm NAME    only processes with this command name\n"
		"  --path PATH    only connections on this path: rdma, tcp, undecided\n"
		"  --reason R     only connections with this reason (loopback, no_device, ...)\n"
		"  --sort FIELD   pid (default), comm, fd, path, reason; largest first:\n"
		"                 sent, recv, bytes (sent + received), rate (with -i)\n"
		"Segments are read from %s (SDPSHIM_RUN_DIR).\n", stats_dir());
}

/* ---- options ------------------------------------------------------------ */

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

static int parse_seconds(const char *text, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v) || v < INTERVAL_MIN || v > INTERVAL_MAX)
		return -1;
	*out = v;
	return 0;
}

static int parse_path(const char *text)
{
	for (int p = SDP_PATH_UNDECIDED; p <= SDP_PATH_RDMA; p++)
		if (strcmp(text, sdp_path_name((enum sdp_path)p)) == 0)
			return p;
	return -1;
}

static int parse_sort(const char *text, enum stat_sort *out)
{
	static const char *const names[] = {
		[SORT_PID] = "pid", [SORT_COMM] = "comm", [SORT_FD] = "fd", [SORT_PATH] = "path",
		[SORT_REASON] = "reason", [SORT_SENT] = "sent", [SORT_RECV] = "recv",
		[SORT_BYTES] = "bytes", [SORT_RATE] = "rate",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(text, names[i]) == 0) {
			*out = (enum stat_sort)i;
			return 0;
		}
	}
	return -1;
}

static int bad_usage(const char *fmt, const char *what)
{
	fprintf(stderr, "sdpshim stat: ");
	fprintf(stderr, fmt, what);
	fprintf(stderr, "\n");
	return -1;
}

/* The option's value into o; 0, or -1 after a one-line diagnostic. */
static int take_value(int opt, const char *arg, struct stat_opts *o)
{
	long v;

	switch (opt) {
	case 'p':
		if (parse_number(arg, INT32_MAX, &v) != 0)
			return bad_usage("--pid needs a process id, not '%s'", arg);
		o->only_pid = (pid_t)v;
		return 0;
	case 'w':
		if (parse_number(arg, 86400, &v) != 0)
			return bad_usage("-w needs seconds (1-86400), not '%s'", arg);
		o->watch_secs = (unsigned)v;
		return 0;
	case 'i':
		if (parse_seconds(arg, &o->interval) != 0)
			return bad_usage("-i needs seconds (0.01-86400, 0.5 works), not '%s'", arg);
		return 0;
	case 'n':
		if (parse_number(arg, INT32_MAX, &o->count) != 0)
			return bad_usage("-n needs a positive count, not '%s'", arg);
		return 0;
	}
	return bad_usage("bad option value '%s'", arg);
}

/* The filter or sort option's value into o; 0, or -1 after a diagnostic. */
static int take_filter(int opt, const char *arg, struct stat_opts *o)
{
	switch (opt) {
	case 'C':
		if (!*arg || strlen(arg) > 64)
			return bad_usage("--comm needs a command name (1-64 characters), not '%s'", arg);
		o->only_comm = arg;
		return 0;
	case 'P':
		o->only_path = parse_path(arg);
		if (o->only_path < 0)
			return bad_usage("--path needs rdma, tcp or undecided, not '%s'", arg);
		return 0;
	case 'R':
		o->only_reason = sdp_reason_from_name(arg);
		if (o->only_reason < 0)
			return bad_usage("--reason needs a reason name (see README), not '%s'", arg);
		return 0;
	case 'S':
		if (parse_sort(arg, &o->sort) != 0)
			return bad_usage("--sort needs pid, comm, fd, path, reason, sent, recv, bytes "
					 "or rate, not '%s'", arg);
		return 0;
	}
	return bad_usage("bad option value '%s'", arg);
}

static int set_mode(struct stat_opts *o, enum stat_mode mode)
{
	if (o->mode != STAT_TABLE && o->mode != mode)
		return bad_usage("%s", "--json, --totals and --prom are one each; give one");
	o->mode = mode;
	return 0;
}

/* The options that only go with others. */
static int check_combination(const struct stat_opts *o)
{
	if (o->interval > 0 && o->watch_secs)
		return bad_usage("%s", "-i and -w are two ways to repeat; give one");
	if (o->interval > 0 && o->mode != STAT_TABLE)
		return bad_usage("%s", "-i is the live table; it does not go with --json, --totals "
				 "or --prom (use -w to repeat those)");
	if (o->count && !o->interval && !o->watch_secs)
		return bad_usage("%s", "-n counts the refreshes of -i or -w; give one of them");
	if (o->sort == SORT_RATE && !o->interval)
		return bad_usage("%s", "--sort rate needs -i (rates are measured between refreshes)");
	if (o->all_users && geteuid() != 0)
		return bad_usage("%s", "--all-users needs root");
	return 0;
}

/* Returns 0 to go on, 1 after --help, -1 on bad usage (said on stderr). */
static int parse_args(int argc, char **argv, struct stat_opts *o)
{
	enum { OPT_JSON = 256, OPT_BYTES, OPT_LISTENERS, OPT_ALL_USERS, OPT_TOTALS, OPT_PROM };
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "totals", no_argument, NULL, OPT_TOTALS },
		{ "prom", no_argument, NULL, OPT_PROM },
		{ "bytes", no_argument, NULL, OPT_BYTES },
		{ "listeners", no_argument, NULL, OPT_LISTENERS },
		{ "all-users", no_argument, NULL, OPT_ALL_USERS },
		{ "pid", required_argument, NULL, 'p' },
		{ "comm", required_argument, NULL, 'C' },
		{ "path", required_argument, NULL, 'P' },
		{ "reason", required_argument, NULL, 'R' },
		{ "sort", required_argument, NULL, 'S' },
		{ "watch", required_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, err = 0;

	memset(o, 0, sizeof(*o));
	o->only_path = o->only_reason = -1;
	optind = 1;
	opterr = 0;
	while (!err && (opt = getopt_long(argc, argv, ":p:w:i:n:h", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_JSON: err = set_mode(o, STAT_JSON); break;
		case OPT_TOTALS: err = set_mode(o, STAT_TOTALS); break;
		case OPT_PROM: err = set_mode(o, STAT_PROM); break;
		case OPT_BYTES: o->raw_bytes = true; break;
		case OPT_LISTENERS: o->listeners = true; break;
		case OPT_ALL_USERS: o->all_users = true; break;
		case 'h': return 1;
		case 'p': case 'w': case 'i': case 'n': err = take_value(opt, optarg, o); break;
		case 'C': case 'P': case 'R': case 'S': err = take_filter(opt, optarg, o); break;
		case ':': return bad_usage("option '%s' needs a value", argv[optind - 1]);
		default: return bad_usage("unknown option '%s' (see sdpshim stat --help)",
					  argv[optind - 1]);
		}
	}
	if (err)
		return -1;
	if (optind < argc)
		return bad_usage("unexpected argument '%s'", argv[optind]);
	return check_combination(o);
}

/* ---- reading the segments ----------------------------------------------- */

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

void stat_proc_list_free(struct proc_list *list)
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

static bool wanted_conn(const struct sdp_conn_stats *s, const struct stat_opts *o)
{
	if (!o->listeners && s->role == STATS_ROLE_LISTENER)
		return false;
	if (o->only_path >= 0 && s->path != o->only_path)
		return false;
	return o->only_reason < 0 || s->reason == o->only_reason;
}

/* A link carries RDMA streams: it goes with a filter that keeps those. */
static bool wanted_links(const struct stat_opts *o)
{
	return (o->only_path < 0 || o->only_path == SDP_PATH_RDMA) &&
	       (o->only_reason < 0 || o->only_reason == SDP_REASON_NONE);
}

/* Keeps the wanted connections of snap, in place. */
static void filter_snapshot(struct stats_snapshot *snap, const struct stat_opts *o)
{
	size_t kept = 0;

	for (size_t i = 0; i < snap->count; i++)
		if (wanted_conn(&snap->conn[i], o))
			snap->conn[kept++] = snap->conn[i];
	snap->count = kept;
	if (!wanted_links(o))
		snap->link_count = 0;
}

/* Reads one segment file; dead processes' files are removed silently, and
 * a file that is not a valid segment of uid's process pid is named and
 * skipped. */
static void attach_segment(const char *path, unsigned uid, int pid, const struct stat_opts *o,
			   struct proc_list *list)
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
	if (o->only_comm && strcmp(snap.info.comm, o->only_comm) != 0) {
		stats_snapshot_free(&snap);
		return;
	}
	filter_snapshot(&snap, o);
	if (proc_list_add(list, &snap) != 0)
		stats_snapshot_free(&snap);
}

/* ---- order -------------------------------------------------------------- */

int stat_cmp_int(long long x, long long y)
{
	return (x > y) - (x < y);
}

static int cmp_desc(double x, double y)
{
	return (x < y) - (x > y);
}

static uint64_t conn_bytes(const struct sdp_conn_stats *s)
{
	return stat_u64(&s->bytes_sent) + stat_u64(&s->bytes_received);
}

static int compare_key(const struct conn_ref *x, const struct conn_ref *y, enum stat_sort sort)
{
	const struct sdp_conn_stats *a = x->conn, *b = y->conn;

	switch (sort) {
	case SORT_PID: return 0;
	case SORT_COMM: return strcmp(x->proc->snap.info.comm, y->proc->snap.info.comm);
	case SORT_FD: return stat_cmp_int(a->fd, b->fd);
	case SORT_PATH: return strcmp(sdp_path_name((enum sdp_path)a->path),
				      sdp_path_name((enum sdp_path)b->path));
	case SORT_REASON: return strcmp(sdp_reason_name((enum sdp_reason)a->reason),
					sdp_reason_name((enum sdp_reason)b->reason));
	case SORT_SENT: return cmp_desc((double)stat_u64(&a->bytes_sent),
					(double)stat_u64(&b->bytes_sent));
	case SORT_RECV: return cmp_desc((double)stat_u64(&a->bytes_received),
					(double)stat_u64(&b->bytes_received));
	case SORT_BYTES: return cmp_desc((double)conn_bytes(a), (double)conn_bytes(b));
	case SORT_RATE: return cmp_desc(x->rate_sent + x->rate_recv, y->rate_sent + y->rate_recv);
	}
	return 0;
}

int stat_compare_refs(const struct conn_ref *x, const struct conn_ref *y, enum stat_sort sort)
{
	int c = compare_key(x, y, sort);

	if (c)
		return c;
	c = stat_cmp_int(x->proc->pid, y->proc->pid);
	return c ? c : stat_cmp_int(x->conn->fd, y->conn->fd);
}

static int compare_refs(const void *a, const void *b, void *arg)
{
	return stat_compare_refs(a, b, *(const enum stat_sort *)arg);
}

void stat_sort_refs(struct conn_ref *refs, size_t n, enum stat_sort sort)
{
	if (n > 1)
		qsort_r(refs, n, sizeof(refs[0]), compare_refs, &sort);
}

/* p's connections as references into out; how many. */
static size_t refs_of_process(const struct proc_view *p, struct conn_ref *out)
{
	for (size_t j = 0; j < p->snap.count; j++)
		out[j] = (struct conn_ref){ p, &p->snap.conn[j], 0, 0 };
	return p->snap.count;
}

struct conn_ref *stat_conn_refs(const struct proc_list *list, enum stat_sort sort, size_t *n)
{
	struct conn_ref *refs;
	size_t total = 0, k = 0;

	*n = 0;
	for (size_t i = 0; i < list->count; i++)
		total += list->proc[i].snap.count;
	refs = total ? calloc(total, sizeof(*refs)) : NULL;
	if (!refs)
		return NULL;
	for (size_t i = 0; i < list->count; i++)
		k += refs_of_process(&list->proc[i], refs + k);
	stat_sort_refs(refs, total, sort);
	*n = total;
	return refs;
}

/* Each process's own connections in --sort order too (the JSON's order). */
static void sort_each_process(struct proc_list *list, enum stat_sort sort)
{
	for (size_t i = 0; i < list->count; i++) {
		struct stats_snapshot *snap = &list->proc[i].snap;
		struct conn_ref *refs = calloc(snap->count ? snap->count : 1, sizeof(*refs));
		struct sdp_conn_stats *sorted = calloc(snap->count ? snap->count : 1, sizeof(*sorted));

		if (refs && sorted) {
			stat_sort_refs(refs, refs_of_process(&list->proc[i], refs), sort);
			for (size_t j = 0; j < snap->count; j++)
				sorted[j] = *refs[j].conn;
			memcpy(snap->conn, sorted, snap->count * sizeof(*sorted));
		}
		free(refs);
		free(sorted);
	}
}

static int compare_proc(const void *a, const void *b, void *arg)
{
	const struct proc_view *x = a, *y = b;
	int c = 0;

	if (*(const enum stat_sort *)arg == SORT_COMM)
		c = strcmp(x->snap.info.comm, y->snap.info.comm);
	return c ? c : stat_cmp_int(x->pid, y->pid);
}

int stat_collect(const struct stat_opts *o, struct proc_list *list)
{
	const char *dir = stats_dir();
	DIR *d = opendir(dir);
	struct dirent *de;
	enum stat_sort sort = o->sort;

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
		attach_segment(path, uid, pid, o, list);
	}
	closedir(d);
	if (list->count > 1)
		qsort_r(list->proc, list->count, sizeof(list->proc[0]), compare_proc, &sort);
	sort_each_process(list, o->sort);
	return 0;
}

/* ---- shared helpers ----------------------------------------------------- */

uint64_t stat_u64(const _Atomic uint64_t *counter)
{
	return atomic_load_explicit(counter, memory_order_relaxed);
}

void stat_format_size(uint64_t v, bool raw, char *buf, size_t len)
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

struct byte_totals stat_process_bytes(const struct stats_snapshot *snap)
{
	struct byte_totals live = { 0, 0 }, total;

	for (size_t i = 0; i < snap->count; i++) {
		live.sent += stat_u64(&snap->conn[i].bytes_sent);
		live.received += stat_u64(&snap->conn[i].bytes_received);
	}
	total.sent = snap->info.bytes_sent;
	total.received = snap->info.bytes_received;
	if (live.sent > total.sent)
		total.sent = live.sent;
	if (live.received > total.received)
		total.received = live.received;
	return total;
}

size_t stat_reason_slots(void)
{
	return SDP_REASON_COUNT < STATS_REASON_SLOTS ? SDP_REASON_COUNT : STATS_REASON_SLOTS;
}

/* ---- main --------------------------------------------------------------- */

static int show_once(const struct stat_opts *o)
{
	struct proc_list list;

	if (stat_collect(o, &list) != 0)
		return 1;
	switch (o->mode) {
	case STAT_TABLE: stat_show_table(&list, o); break;
	case STAT_JSON: stat_show_json(&list, o); break;
	case STAT_TOTALS: stat_show_totals(&list, o); break;
	case STAT_PROM: stat_show_prom(&list, o); break;
	}
	stat_proc_list_free(&list);
	fflush(stdout);
	return ferror(stdout) ? 1 : 0;
}

static void on_interrupt(int sig)
{
	(void)sig;
	stat_stop_requested = 1;
}

void stat_catch_interrupts(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

void stat_clear_screen(void)
{
	printf("\033[H\033[2J");
}

void stat_sleep(double secs)
{
	struct timespec left = { (time_t)secs, 0 };

	left.tv_nsec = (long)((secs - (double)left.tv_sec) * 1e9);

	while (!stat_stop_requested && nanosleep(&left, &left) != 0 && errno == EINTR)
		;
}

/* -w: the one-shot output again every watch_secs; a terminal is cleared
 * first, anything else gets each repeat after the last. */
static int watch(const struct stat_opts *o)
{
	bool tty = isatty(STDOUT_FILENO);

	stat_catch_interrupts();
	for (long n = 0; !stat_stop_requested && (!o->count || n < o->count); n++) {
		if (n)
			stat_sleep(o->watch_secs);
		if (stat_stop_requested)
			break;
		if (tty && o->mode == STAT_TABLE)
			stat_clear_screen();
		if (show_once(o) != 0)
			return 1;
	}
	return 0;
}

int stat_main(int argc, char **argv)
{
	struct stat_opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc > 0) {
		usage(stdout);
		return 0;
	}
	if (rc < 0)
		return 2;
	if (o.interval > 0)
		return stat_live(&o);
	return o.watch_secs ? watch(&o) : show_once(&o);
}

/* `sdpshim stat -i SECS [-n COUNT]`: the live view.  Every SECS seconds it
 * reads the segments again and shows, per connection, the bytes/s each way
 * (the counters' difference over the time measured between the two reads,
 * CLOCK_MONOTONIC) and the bytes since the last refresh.  A connection is
 * the same one from refresh to refresh when its process (pid and start
 * time) and its fd, role, addresses and opening time are: a new one is
 * marked "new" (its whole count is its delta), one gone since the last
 * refresh "closed" (with its last counts).  On a terminal each refresh
 * replaces the screen; otherwise refreshes follow each other, each under a
 * header line with the time. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/stat.h"

enum live_col { LV_PID, LV_COMM, LV_FD, LV_ROLE, LV_REMOTE, LV_PATH, LV_REASON, LV_RATE_SENT,
		LV_RATE_RECV, LV_DELTA_SENT, LV_DELTA_RECV, LV_SENT, LV_RECV, LV_NOTE, LV_COUNT };

static const char *const live_title[LV_COUNT] = {
	"PID", "COMM", "FD", "ROLE", "REMOTE", "PATH", "REASON", "SENT/s", "RECV/s",
	"+SENT", "+RECV", "SENT", "RECV", "NOTE",
};

static const bool live_right[LV_COUNT] = {
	[LV_PID] = true, [LV_FD] = true, [LV_RATE_SENT] = true, [LV_RATE_RECV] = true,
	[LV_DELTA_SENT] = true, [LV_DELTA_RECV] = true, [LV_SENT] = true, [LV_RECV] = true,
};

/* One read of every segment, its connections in identity order. */
struct sample {
	struct proc_list list;
	struct conn_ref *refs;
	bool *seen; /* per ref: matched by the next sample */
	size_t n;
	struct timespec at; /* CLOCK_MONOTONIC */
};

/* What tells two connections apart across reads. */
static int compare_identity(const void *a, const void *b)
{
	const struct conn_ref *x = a, *y = b;
	const struct sdp_conn_stats *s = x->conn, *t = y->conn;
	int c;

	if (x->proc->pid != y->proc->pid)
		return x->proc->pid < y->proc->pid ? -1 : 1;
	if (x->proc->snap.info.start_ms != y->proc->snap.info.start_ms)
		return x->proc->snap.info.start_ms < y->proc->snap.info.start_ms ? -1 : 1;
	if (s->fd != t->fd)
		return s->fd < t->fd ? -1 : 1;
	if (s->opened_ms != t->opened_ms)
		return s->opened_ms < t->opened_ms ? -1 : 1;
	if (s->role != t->role)
		return s->role < t->role ? -1 : 1;
	c = memcmp(&s->local, &t->local, sizeof(s->local));
	return c ? c : memcmp(&s->remote, &t->remote, sizeof(s->remote));
}

static void sample_free(struct sample *smp)
{
	free(smp->refs);
	free(smp->seen);
	stat_proc_list_free(&smp->list);
	memset(smp, 0, sizeof(*smp));
}

static int sample_take(const struct stat_opts *o, struct sample *smp)
{
	memset(smp, 0, sizeof(*smp));
	if (stat_collect(o, &smp->list) != 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &smp->at);
	smp->refs = stat_conn_refs(&smp->list, SORT_PID, &smp->n);
	smp->seen = calloc(smp->n ? smp->n : 1, sizeof(*smp->seen));
	if (!smp->seen) {
		sample_free(smp);
		return -1;
	}
	if (smp->n > 1)
		qsort(smp->refs, smp->n, sizeof(smp->refs[0]), compare_identity);
	return 0;
}

static double seconds_between(const struct timespec *from, const struct timespec *to)
{
	return (double)(to->tv_sec - from->tv_sec) + (double)(to->tv_nsec - from->tv_nsec) / 1e9;
}

/* The counter's growth since the last read (all of it when it is new, or
 * was reset under the same identity). */
static uint64_t grown(uint64_t now, const _Atomic uint64_t *before)
{
	uint64_t was = before ? stat_u64(before) : 0;

	return now >= was ? now - was : now;
}

/* A connection of this refresh, with what it did since the last one. */
struct live_row {
	struct conn_ref ref;
	uint64_t delta_sent, delta_recv;
	const char *note;
};

static struct live_row measure(const struct conn_ref *now, struct sample *prev, double secs)
{
	struct conn_ref *was = bsearch(now, prev->refs, prev->n, sizeof(*now), compare_identity);
	struct live_row row = { *now, 0, 0, was ? "" : "new" };

	if (was)
		prev->seen[was - prev->refs] = true;
	row.delta_sent = grown(stat_u64(&now->conn->bytes_sent), was ? &was->conn->bytes_sent : NULL);
	row.delta_recv = grown(stat_u64(&now->conn->bytes_received),
			       was ? &was->conn->bytes_received : NULL);
	row.ref.rate_sent = secs > 0 ? (double)row.delta_sent / secs : 0;
	row.ref.rate_recv = secs > 0 ? (double)row.delta_recv / secs : 0;
	return row;
}

static int compare_rows(const void *a, const void *b, void *arg)
{
	const struct live_row *x = a, *y = b;

	return stat_compare_refs(&x->ref, &y->ref, *(const enum stat_sort *)arg);
}

static void format_rate(double rate, bool raw, char *buf, size_t len)
{
	stat_format_size((uint64_t)(rate + 0.5), raw, buf, len);
}

static void fill_live_row(char *row, const struct live_row *r, bool raw, bool closed)
{
	const struct sdp_conn_stats *s = r->ref.conn;

	snprintf(grid_cell(row, LV_PID), CELL_MAX, "%d", (int)r->ref.proc->pid);
	snprintf(grid_cell(row, LV_COMM), CELL_MAX, "%.*s", CELL_MAX - 1,
		 r->ref.proc->snap.info.comm);
	snprintf(grid_cell(row, LV_FD), CELL_MAX, "%d", s->fd);
	snprintf(grid_cell(row, LV_ROLE), CELL_MAX, "%s", stats_role_name(s->role));
	stats_addr_format(&s->remote, grid_cell(row, LV_REMOTE), CELL_MAX);
	snprintf(grid_cell(row, LV_PATH), CELL_MAX, "%s", sdp_path_name((enum sdp_path)s->path));
	snprintf(grid_cell(row, LV_REASON), CELL_MAX, "%s",
		 sdp_reason_name((enum sdp_reason)s->reason));
	if (closed) {
		for (int c = LV_RATE_SENT; c <= LV_DELTA_RECV; c++)
			snprintf(grid_cell(row, (size_t)c), CELL_MAX, "-");
	} else {
		format_rate(r->ref.rate_sent, raw, grid_cell(row, LV_RATE_SENT), CELL_MAX);
		format_rate(r->ref.rate_recv, raw, grid_cell(row, LV_RATE_RECV), CELL_MAX);
		stat_format_size(r->delta_sent, raw, grid_cell(row, LV_DELTA_SENT), CELL_MAX);
		stat_format_size(r->delta_recv, raw, grid_cell(row, LV_DELTA_RECV), CELL_MAX);
	}
	stat_format_size(stat_u64(&s->bytes_sent), raw, grid_cell(row, LV_SENT), CELL_MAX);
	stat_format_size(stat_u64(&s->bytes_received), raw, grid_cell(row, LV_RECV), CELL_MAX);
	snprintf(grid_cell(row, LV_NOTE), CELL_MAX, "%s", closed ? "closed" : r->note);
}

/* "sdpshim stat 2026-12-03T10:30:00.123+0000  refresh 2/3, measured 0.501 s" */
static void print_header(long number, long count, double secs)
{
	struct timespec now;
	struct tm tm;
	char when[40], zone[8], of[24] = "";

	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	strftime(zone, sizeof(zone), "%z", &tm);
	if (count)
		snprintf(of, sizeof(of), "/%ld", count);
	printf("sdpshim stat %s.%03ld%s  refresh %ld%s, measured %.3f s\n", when,
	       now.tv_nsec / 1000000, zone, number, of, secs);
}

/* The rows of this refresh, then those of the connections gone since the last. */
static void print_refresh(struct sample *now, struct sample *prev, const struct stat_opts *o)
{
	double secs = seconds_between(&prev->at, &now->at);
	struct live_row *rows = calloc(now->n ? now->n : 1, sizeof(*rows));
	enum stat_sort sort = o->sort;
	double all_sent = 0, all_recv = 0;
	struct grid g;
	char *row;

	if (!rows)
		return;
	for (size_t i = 0; i < now->n; i++) {
		rows[i] = measure(&now->refs[i], prev, secs);
		all_sent += rows[i].ref.rate_sent;
		all_recv += rows[i].ref.rate_recv;
	}
	if (now->n > 1)
		qsort_r(rows, now->n, sizeof(rows[0]), compare_rows, &sort);
	grid_init(&g, LV_COUNT, live_title, live_right);
	for (size_t i = 0; i < now->n && (row = grid_add_row(&g)) != NULL; i++)
		fill_live_row(row, &rows[i], o->raw_bytes, false);
	for (size_t i = 0; i < prev->n; i++) {
		struct live_row gone = { prev->refs[i], 0, 0, "" };

		if (!prev->seen[i] && (row = grid_add_row(&g)) != NULL)
			fill_live_row(row, &gone, o->raw_bytes, true);
	}
	if (g.nrows)
		grid_print(&g);
	else
		printf("no sdpshim connections\n");
	printf("all: %zu connections in %zu processes, sent %.0f B/s, received %.0f B/s\n",
	       now->n, now->list.count, all_sent, all_recv);
	grid_free(&g);
	free(rows);
}

int stat_live(const struct stat_opts *o)
{
	bool tty = isatty(STDOUT_FILENO);
	struct sample prev, now;

	stat_catch_interrupts();
	if (sample_take(o, &prev) != 0)
		return 1;
	for (long k = 1; !o->count || k <= o->count; k++) {
		stat_sleep(o->interval);
		if (stat_stop_requested)
			break;
		if (sample_take(o, &now) != 0) {
			sample_free(&prev);
			return 1;
		}
		if (tty)
			stat_clear_screen();
		else if (k > 1)
			printf("\n");
		print_header(k, o->count, seconds_between(&prev.at, &now.at));
		print_refresh(&now, &prev, o);
		fflush(stdout);
		sample_free(&prev);
		prev = now;
	}
	sample_free(&prev);
	return ferror(stdout) ? 1 : 0;
}

/* `sdpshim stat --totals`: the live connections the filters kept, added up
 * per process and per path and reason (connections, processes, bytes each
 * way), and over all. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/stat.h"

/* What one group of connections adds up to. */
struct tally {
	const struct proc_view *proc; /* per process: the process; per path: the last counted */
	int path, reason;             /* per path/reason */
	uint64_t conns, procs, sent, received;
	uint64_t on_path[STAT_PATHS]; /* of conns */
};

static void tally_add(struct tally *t, const struct proc_view *p, const struct sdp_conn_stats *s)
{
	if (t->proc != p)
		t->procs++;
	t->proc = p;
	t->conns++;
	t->on_path[s->path < STAT_PATHS ? s->path : SDP_PATH_UNDECIDED]++;
	t->sent += stat_u64(&s->bytes_sent);
	t->received += stat_u64(&s->bytes_received);
}

static int cmp_u64_desc(uint64_t x, uint64_t y)
{
	return (x < y) - (x > y);
}

/* By the amount --sort names, largest first; then rdma before tcp, by
 * reason, by pid (a process's tally has path and reason 0). */
static int compare_tally(const void *a, const void *b, void *arg)
{
	const struct tally *x = a, *y = b;
	int c = 0;

	switch (*(const enum stat_sort *)arg) {
	case SORT_SENT: c = cmp_u64_desc(x->sent, y->sent); break;
	case SORT_RECV: c = cmp_u64_desc(x->received, y->received); break;
	case SORT_BYTES: c = cmp_u64_desc(x->sent + x->received, y->sent + y->received); break;
	default: break;
	}
	if (!c)
		c = stat_cmp_int(y->path, x->path);
	if (!c)
		c = stat_cmp_int(x->reason, y->reason);
	return c ? c : stat_cmp_int(x->proc->pid, y->proc->pid);
}

static void sort_tallies(struct tally *t, size_t n, enum stat_sort sort)
{
	if (n > 1)
		qsort_r(t, n, sizeof(*t), compare_tally, &sort);
}

static void fill_amounts(char *row, size_t col, const struct tally *t, bool raw)
{
	snprintf(grid_cell(row, col), CELL_MAX, "%" PRIu64, t->conns);
	stat_format_size(t->sent, raw, grid_cell(row, col + 1), CELL_MAX);
	stat_format_size(t->received, raw, grid_cell(row, col + 2), CELL_MAX);
}

static void print_per_process(const struct proc_list *list, const struct stat_opts *o)
{
	static const char *const title[] = { "PID", "COMM", "CONNS", "SENT", "RECV", "RDMA", "TCP" };
	static const bool right[] = { true, false, true, true, true, true, true };
	struct tally *t = calloc(list->count, sizeof(*t));
	struct grid g;
	char *row;

	if (!t)
		return;
	for (size_t i = 0; i < list->count; i++) {
		t[i].proc = &list->proc[i];
		for (size_t j = 0; j < list->proc[i].snap.count; j++)
			tally_add(&t[i], &list->proc[i], &list->proc[i].snap.conn[j]);
	}
	sort_tallies(t, list->count, o->sort);
	grid_init(&g, 7, title, right);
	for (size_t i = 0; i < list->count && (row = grid_add_row(&g)) != NULL; i++) {
		snprintf(grid_cell(row, 0), CELL_MAX, "%d", (int)t[i].proc->pid);
		snprintf(grid_cell(row, 1), CELL_MAX, "%.*s", CELL_MAX - 1, t[i].proc->snap.info.comm);
		fill_amounts(row, 2, &t[i], o->raw_bytes);
		snprintf(grid_cell(row, 5), CELL_MAX, "%" PRIu64, t[i].on_path[SDP_PATH_RDMA]);
		snprintf(grid_cell(row, 6), CELL_MAX, "%" PRIu64, t[i].on_path[SDP_PATH_TCP]);
	}
	printf("per process:\n");
	grid_print(&g);
	grid_free(&g);
	free(t);
}

/* Every (path, reason) that has a connection, in path then reason order. */
static size_t tally_paths(const struct proc_list *list, struct tally *out)
{
	static struct tally cell[STAT_PATHS][SDP_REASON_COUNT];
	size_t n = 0;

	memset(cell, 0, sizeof(cell));
	for (size_t i = 0; i < list->count; i++)
		for (size_t j = 0; j < list->proc[i].snap.count; j++) {
			const struct sdp_conn_stats *s = &list->proc[i].snap.conn[j];

			if (s->path < STAT_PATHS && s->reason < SDP_REASON_COUNT)
				tally_add(&cell[s->path][s->reason], &list->proc[i], s);
		}
	for (int p = STAT_PATHS - 1; p >= 0; p--) /* rdma first */
		for (int r = 0; r < SDP_REASON_COUNT; r++)
			if (cell[p][r].conns) {
				out[n] = cell[p][r];
				out[n].path = p;
				out[n++].reason = r;
			}
	return n;
}

static void print_per_path(const struct proc_list *list, const struct stat_opts *o,
			   struct tally *all)
{
	static const char *const title[] = { "PATH", "REASON", "CONNS", "SENT", "RECV", "PROCS" };
	static const bool right[] = { false, false, true, true, true, true };
	struct tally t[STAT_PATHS * SDP_REASON_COUNT];
	size_t n = tally_paths(list, t);
	struct grid g;
	char *row;

	sort_tallies(t, n, o->sort);
	grid_init(&g, 6, title, right);
	for (size_t i = 0; i < n; i++) {
		all->conns += t[i].conns;
		all->sent += t[i].sent;
		all->received += t[i].received;
		if (!(row = grid_add_row(&g)))
			break;
		snprintf(grid_cell(row, 0), CELL_MAX, "%s", sdp_path_name((enum sdp_path)t[i].path));
		snprintf(grid_cell(row, 1), CELL_MAX, "%s", sdp_reason_name((enum sdp_reason)t[i].reason));
		fill_amounts(row, 2, &t[i], o->raw_bytes);
		snprintf(grid_cell(row, 5), CELL_MAX, "%" PRIu64, t[i].procs);
	}
	printf("\nper path and reason:\n");
	grid_print(&g);
	grid_free(&g);
}

void stat_show_totals(const struct proc_list *list, const struct stat_opts *o)
{
	struct tally all = { 0 };
	char sent[CELL_MAX], received[CELL_MAX];

	if (list->count == 0) {
		printf("no sdpshim processes\n");
		return;
	}
	print_per_process(list, o);
	print_per_path(list, o, &all);
	stat_format_size(all.sent, o->raw_bytes, sent, sizeof(sent));
	stat_format_size(all.received, o->raw_bytes, received, sizeof(received));
	printf("\nall: %" PRIu64 " connections in %zu processes, sent %s, received %s\n",
	       all.conns, list->count, sent, received);
}

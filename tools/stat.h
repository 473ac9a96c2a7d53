/* The parts of `sdpshim stat` shared by its files: the options, the
 * processes as read (filtered), connection references in sort order, a
 * column-aligned text grid and the size format.  tools/stat.c reads and
 * filters; tools/stat_table.c prints the table and JSON, stat_totals.c
 * --totals, stat_prom.c --prom, stat_live.c the -i refreshes, and
 * stat_grid.c lays out the text tables. */
#ifndef SDPSHIM_STAT_H
#define SDPSHIM_STAT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/stats_shm.h"

#define CELL_MAX 64
#define STAT_PATHS (SDP_PATH_RDMA + 1) /* enum sdp_path values */

enum stat_mode { STAT_TABLE, STAT_JSON, STAT_TOTALS, STAT_PROM };

/* --sort: ascending for the names, largest first for the amounts. */
enum stat_sort { SORT_PID, SORT_COMM, SORT_FD, SORT_PATH, SORT_REASON, SORT_SENT, SORT_RECV,
		 SORT_BYTES, SORT_RATE };

struct stat_opts {
	enum stat_mode mode;
	bool raw_bytes, listeners, all_users;
	pid_t only_pid;        /* 0: every process */
	const char *only_comm; /* NULL: every process */
	int only_path;         /* enum sdp_path, or -1 */
	int only_reason;       /* enum sdp_reason, or -1 */
	enum stat_sort sort;
	unsigned watch_secs;   /* -w: 0, print once */
	double interval;       /* -i: 0, no live refresh */
	long count;            /* -n: 0, until interrupted */
};

/* One segment as read: private copies of its header and of the live slots
 * the filters kept (its comm, snap.info.comm, checked printable, without
 * '"' or '\\'). */
struct proc_view {
	struct stats_snapshot snap;
	pid_t pid;
};

struct proc_list {
	struct proc_view *proc;
	size_t count, cap;
};

/* One connection of one process; rates are bytes/s, set by the live view. */
struct conn_ref {
	const struct proc_view *proc;
	const struct sdp_conn_stats *conn;
	double rate_sent, rate_recv;
};

extern volatile sig_atomic_t stat_stop_requested;

/* tools/stat.c */
/* The wanted processes, each with only its wanted connections; 0, or -1
 * when the directory cannot be read. */
int stat_collect(const struct stat_opts *o, struct proc_list *list);
void stat_proc_list_free(struct proc_list *list);
/* Every connection of the list, in --sort order; NULL with *n 0 when there
 * is none (or no memory). */
struct conn_ref *stat_conn_refs(const struct proc_list *list, enum stat_sort sort, size_t *n);
void stat_sort_refs(struct conn_ref *refs, size_t n, enum stat_sort sort);
/* The --sort order: the key, then pid, then fd. */
int stat_compare_refs(const struct conn_ref *x, const struct conn_ref *y, enum stat_sort sort);
int stat_cmp_int(long long x, long long y); /* -1, 0, 1 for a qsort */
void stat_format_size(uint64_t v, bool raw, char *buf, size_t len);
uint64_t stat_u64(const _Atomic uint64_t *counter); /* a relaxed load */
/* The header's byte totals include closed connections; the live slots are
 * a lower bound that holds if a writer does not keep the totals. */
struct byte_totals {
	uint64_t sent, received;
};
struct byte_totals stat_process_bytes(const struct stats_snapshot *snap);
/* The reasons with a slot in the header: min(SDP_REASON_COUNT, STATS_REASON_SLOTS). */
size_t stat_reason_slots(void);
void stat_catch_interrupts(void);
void stat_clear_screen(void); /* a terminal's: home, then clear */
/* Sleeps secs seconds, less when interrupted (stat_stop_requested). */
void stat_sleep(double secs);

/* tools/stat_grid.c: a table of text cells, printed with aligned columns
 * (numbers right). */
struct grid {
	size_t ncols, nrows, cap;
	const char *const *title;
	const bool *right;
	char *cells; /* nrows * ncols cells of CELL_MAX */
};
void grid_init(struct grid *g, size_t ncols, const char *const *title, const bool *right);
/* The new row's first cell (ncols cells of CELL_MAX, each ""), NULL when out of memory. */
char *grid_add_row(struct grid *g);
char *grid_cell(char *row, size_t col);
void grid_print(const struct grid *g);
void grid_free(struct grid *g);

/* tools/stat_table.c */
void stat_show_table(const struct proc_list *list, const struct stat_opts *o);
void stat_show_json(const struct proc_list *list, const struct stat_opts *o);
/* tools/stat_totals.c */
void stat_show_totals(const struct proc_list *list, const struct stat_opts *o);
/* tools/stat_prom.c */
void stat_show_prom(const struct proc_list *list, const struct stat_opts *o);
/* tools/stat_live.c: refreshes until interrupted or o->count; the exit code. */
int stat_live(const struct stat_opts *o);

#endif

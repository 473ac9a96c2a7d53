/* `sdpshim stat`'s one-shot views: the connection table (with the links
 * table and a summary line per process) and the JSON document, of the
 * processes and connections tools/stat.c collected and filtered. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/stat.h"

#define CONN_JSON_MAX 2048

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

static void format_zcopy(const struct sdp_conn_stats *s, char *buf, size_t len)
{
	uint64_t sent = stat_u64(&s->bytes_sent);
	uint64_t zc = stat_u64(&s->zcopy_bytes_sent);

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

static void fill_row(char *row, const struct conn_ref *r, bool raw)
{
	const struct sdp_conn_stats *s = r->conn;

	snprintf(grid_cell(row, COL_PID), CELL_MAX, "%d", (int)r->proc->pid);
	snprintf(grid_cell(row, COL_COMM), CELL_MAX, "%.*s", CELL_MAX - 1, r->proc->snap.info.comm);
	snprintf(grid_cell(row, COL_FD), CELL_MAX, "%d", s->fd);
	snprintf(grid_cell(row, COL_ROLE), CELL_MAX, "%s", stats_role_name(s->role));
	stats_addr_format(&s->local, grid_cell(row, COL_LOCAL), CELL_MAX);
	stats_addr_format(&s->remote, grid_cell(row, COL_REMOTE), CELL_MAX);
	snprintf(grid_cell(row, COL_PATH), CELL_MAX, "%s", sdp_path_name((enum sdp_path)s->path));
	snprintf(grid_cell(row, COL_REASON), CELL_MAX, "%s%s",
		 sdp_reason_name((enum sdp_reason)s->reason), s->negcached ? "*" : "");
	stat_format_size(stat_u64(&s->bytes_sent), raw, grid_cell(row, COL_SENT), CELL_MAX);
	stat_format_size(stat_u64(&s->bytes_received), raw, grid_cell(row, COL_RECV), CELL_MAX);
	format_zcopy(s, grid_cell(row, COL_ZCOPY), CELL_MAX);
	format_credits(s, grid_cell(row, COL_CREDITS), CELL_MAX);
	snprintf(grid_cell(row, COL_SWITCHES), CELL_MAX, "%u/%u", (unsigned)atomic_load(&s->switches),
		 (unsigned)atomic_load(&s->climbs));
}

/* "(loopback 2, no_device 1)" for the connections that stayed on TCP. */
static void print_tcp_reasons(const struct stats_proc_info *h)
{
	const char *sep = " (";

	for (size_t r = 0; r < stat_reason_slots(); r++) {
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
	stat_format_size(h->pinned_bytes, raw, pinned, sizeof(pinned));
	stat_format_size(h->pin_budget, raw, budget, sizeof(budget));
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

/* STREAMS is open/cap, CREDITS in use/total, MSGS sent/received. */
static void fill_link_row(char *row, const struct proc_view *p, const struct sdp_link_stats *l,
			  bool raw)
{
	char sent[24], received[24]; /* stat_format_size: at most 20 digits */

	snprintf(grid_cell(row, LCOL_PID), CELL_MAX, "%d", (int)p->pid);
	snprintf(grid_cell(row, LCOL_COMM), CELL_MAX, "%.*s", CELL_MAX - 1, p->snap.info.comm);
	stats_addr_format(&l->peer, grid_cell(row, LCOL_PEER), CELL_MAX);
	snprintf(grid_cell(row, LCOL_ROLE), CELL_MAX, "%s", stats_link_role_name(l->role));
	snprintf(grid_cell(row, LCOL_STATE), CELL_MAX, "%s", stats_link_state_name(l->state));
	snprintf(grid_cell(row, LCOL_STREAMS), CELL_MAX, "%u/%u", (unsigned)atomic_load(&l->streams),
		 (unsigned)atomic_load(&l->streams_max));
	stat_format_size(stat_u64(&l->pinned_bytes), raw, grid_cell(row, LCOL_PINNED), CELL_MAX);
	snprintf(grid_cell(row, LCOL_CREDITS), CELL_MAX, "%u/%u",
		 (unsigned)atomic_load(&l->credits_in_use), (unsigned)atomic_load(&l->credits_total));
	stat_format_size(stat_u64(&l->msgs_sent), raw, sent, sizeof(sent));
	stat_format_size(stat_u64(&l->msgs_received), raw, received, sizeof(received));
	snprintf(grid_cell(row, LCOL_MSGS), CELL_MAX, "%s/%s", sent, received);
}

/* The live links of every process, in process order; nothing at all when
 * no process has one. */
static void show_links(const struct proc_list *list, bool raw)
{
	struct grid g;
	char *row;

	grid_init(&g, LCOL_COUNT, link_col_title, link_col_right);
	for (size_t i = 0; i < list->count; i++)
		for (size_t j = 0; j < list->proc[i].snap.link_count; j++)
			if ((row = grid_add_row(&g)) != NULL)
				fill_link_row(row, &list->proc[i], &list->proc[i].snap.link[j], raw);
	if (g.nrows) {
		printf("\nlinks:\n");
		grid_print(&g);
	}
	grid_free(&g);
}

void stat_show_table(const struct proc_list *list, const struct stat_opts *o)
{
	struct grid g;
	struct conn_ref *refs;
	size_t n;
	char *row;

	if (list->count == 0) {
		printf("no sdpshim processes\n");
		return;
	}
	grid_init(&g, COL_COUNT, col_title, col_right);
	refs = stat_conn_refs(list, o->sort, &n);
	for (size_t i = 0; i < n; i++)
		if ((row = grid_add_row(&g)) != NULL)
			fill_row(row, &refs[i], o->raw_bytes);
	free(refs);
	grid_print(&g);
	grid_free(&g);
	show_links(list, o->raw_bytes);
	printf("\n");
	for (size_t i = 0; i < list->count; i++)
		print_summary(&list->proc[i], o->raw_bytes);
}

/* ---- JSON --------------------------------------------------------------- */

static void json_print_reasons(const struct stats_proc_info *h)
{
	const char *sep = "";

	printf("\"conns_by_reason\":{");
	for (size_t r = 0; r < stat_reason_slots(); r++) {
		uint64_t n = h->conns_by_reason[r];
		if (n == 0)
			continue;
		printf("%s\"%s\":%" PRIu64, sep, sdp_reason_name((enum sdp_reason)r), n);
		sep = ",";
	}
	printf("}");
}

/* One member of a JSON array into buf: its length, or -1 to leave it out. */
typedef int (*json_member_fn)(const struct proc_view *p, size_t i, char *buf, size_t len);

static int conn_member(const struct proc_view *p, size_t i, char *buf, size_t len)
{
	return stats_conn_json(&p->snap.conn[i], p->pid, p->snap.info.comm, 0, buf, len);
}

static int link_member(const struct proc_view *p, size_t i, char *buf, size_t len)
{
	return stats_link_json(&p->snap.link[i], buf, len);
}

static void json_print_array(const char *name, const struct proc_view *p, size_t n,
			     json_member_fn member)
{
	char buf[CONN_JSON_MAX];
	const char *sep = "";

	printf("\"%s\":[", name);
	for (size_t i = 0; i < n; i++) {
		if (member(p, i, buf, sizeof(buf)) < 0)
			continue;
		printf("%s%s", sep, buf);
		sep = ",";
	}
	printf("]");
}

static void json_print_process(const struct proc_view *p)
{
	const struct stats_proc_info *h = &p->snap.info;
	struct byte_totals bytes = stat_process_bytes(&p->snap);

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
	json_print_array("connections", p, p->snap.count, conn_member);
	printf(",");
	json_print_array("links", p, p->snap.link_count, link_member);
	printf("}");
}

void stat_show_json(const struct proc_list *list, const struct stat_opts *o)
{
	(void)o;
	printf("{\"processes\":[");
	for (size_t i = 0; i < list->count; i++) {
		if (i)
			printf(",");
		json_print_process(&list->proc[i]);
	}
	printf("]}\n");
}

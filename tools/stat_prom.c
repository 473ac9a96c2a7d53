/* `sdpshim stat --prom`: the counters of the processes and connections the
 * filters kept, in the Prometheus text format 0.0.4 (tools/prom_text.h),
 * each metric family once with its HELP and TYPE and then all its samples.
 * Names start with sdpshim_; counters end in _total.  Only the exposition
 * goes to stdout, so `sdpshim stat --prom > file.prom` feeds node_exporter's
 * textfile collector. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/prom_text.h"
#include "tools/stat.h"

#define LINE_MAX_PROM 1024

/* A family whose samples are one per process (labels pid, comm). */
struct proc_family {
	const char *name, *type, *help;
	uint64_t (*value)(const struct proc_view *p);
};

/* A family whose samples are one per live connection. */
struct conn_family {
	const char *name, *help;
	size_t counter; /* offsetof an _Atomic uint64_t in struct sdp_conn_stats */
};

static uint64_t proc_sent(const struct proc_view *p)
{
	return stat_process_bytes(&p->snap).sent;
}

static uint64_t proc_received(const struct proc_view *p)
{
	return stat_process_bytes(&p->snap).received;
}

static uint64_t proc_negcache_hits(const struct proc_view *p) { return p->snap.info.negcache_hits; }
static uint64_t proc_pin_budget(const struct proc_view *p) { return p->snap.info.pin_budget; }
static uint64_t proc_pinned(const struct proc_view *p) { return p->snap.info.pinned_bytes; }
static uint64_t proc_refusals(const struct proc_view *p) { return p->snap.info.budget_refusals; }
static uint64_t proc_wakeups(const struct proc_view *p) { return p->snap.info.progress_wakeups; }

static const struct proc_family proc_families[] = {
	{ "sdpshim_process_sent_bytes_total", "counter",
	  "Application bytes sent by the process's connections, whatever the path.", proc_sent },
	{ "sdpshim_process_received_bytes_total", "counter",
	  "Application bytes received by the process's connections, whatever the path.",
	  proc_received },
	{ "sdpshim_process_negcache_hits_total", "counter",
	  "Path decisions taken from the negative cache.", proc_negcache_hits },
	{ "sdpshim_process_pin_budget_bytes", "gauge",
	  "The pinned-memory budget in effect (SDPSHIM_PIN_BUDGET).", proc_pin_budget },
	{ "sdpshim_process_pinned_bytes", "gauge", "Bytes registered (pinned) now.", proc_pinned },
	{ "sdpshim_process_budget_refusals_total", "counter",
	  "Registrations the pinned-memory budget refused.", proc_refusals },
	{ "sdpshim_process_progress_wakeups_total", "counter",
	  "Times the progress thread woke.", proc_wakeups },
};

#define CONN_COUNTER(field) offsetof(struct sdp_conn_stats, field)

static const struct conn_family conn_families[] = {
	{ "sdpshim_connection_sent_bytes_total", "Application bytes sent, whatever the path.",
	  CONN_COUNTER(bytes_sent) },
	{ "sdpshim_connection_received_bytes_total", "Application bytes received, whatever the path.",
	  CONN_COUNTER(bytes_received) },
	{ "sdpshim_connection_copy_sent_bytes_total", "Bytes sent by buffer copy over RDMA.",
	  CONN_COUNTER(copy_bytes_sent) },
	{ "sdpshim_connection_copy_received_bytes_total", "Bytes received by buffer copy over RDMA.",
	  CONN_COUNTER(copy_bytes_received) },
	{ "sdpshim_connection_zcopy_sent_bytes_total", "Bytes sent by zero-copy.",
	  CONN_COUNTER(zcopy_bytes_sent) },
	{ "sdpshim_connection_zcopy_received_bytes_total", "Bytes received by zero-copy.",
	  CONN_COUNTER(zcopy_bytes_received) },
	{ "sdpshim_connection_zcopy_ops_total", "Zero-copy transfers.", CONN_COUNTER(zcopy_ops) },
	{ "sdpshim_connection_zcopy_cancels_total", "Zero-copy transfers cancelled.",
	  CONN_COUNTER(zcopy_cancels) },
	{ "sdpshim_connection_credit_stalls_total", "Times queued data waited for the peer's credits.",
	  CONN_COUNTER(credit_stalls) },
};

static void put_family(const char *name, const char *type, const char *help)
{
	char line[LINE_MAX_PROM];

	if (prom_family(name, type, help, line, sizeof(line)) > 0)
		fputs(line, stdout);
}

static void put_sample(const char *name, const struct prom_label *l, size_t n, uint64_t value)
{
	char line[LINE_MAX_PROM];

	if (prom_sample(name, l, n, value, line, sizeof(line)) > 0)
		fputs(line, stdout);
	else
		fprintf(stderr, "sdpshim stat: a sample of %s is too long, left out\n", name);
}

/* The labels of one process: pid, comm and up to two more. */
struct proc_labels {
	char pid[16];
	struct prom_label l[4];
};

static void proc_labels(struct proc_labels *pl, const struct proc_view *p)
{
	snprintf(pl->pid, sizeof(pl->pid), "%d", (int)p->pid);
	pl->l[0] = (struct prom_label){ "pid", pl->pid };
	pl->l[1] = (struct prom_label){ "comm", p->snap.info.comm };
}

static void put_proc_family(const struct proc_list *list, const struct proc_family *f)
{
	struct proc_labels pl = { .pid = "" };

	put_family(f->name, f->type, f->help);
	for (size_t i = 0; i < list->count; i++) {
		proc_labels(&pl, &list->proc[i]);
		put_sample(f->name, pl.l, 2, f->value(&list->proc[i]));
	}
}

/* Connections decided since the process started, by path, then by reason
 * (the segment counts the two apart); --path and --reason pick series. */
static void put_decisions(const struct proc_list *list, const struct stat_opts *o)
{
	static const char by_path[] = "sdpshim_process_connections_by_path_total";
	static const char by_reason[] = "sdpshim_process_connections_by_reason_total";
	struct proc_labels pl = { .pid = "" };

	put_family(by_path, "counter", "Connections whose path was decided, by path.");
	for (size_t i = 0; i < list->count; i++)
		for (int p = SDP_PATH_TCP; p <= SDP_PATH_RDMA; p++) {
			if (o->only_path >= 0 && o->only_path != p)
				continue;
			proc_labels(&pl, &list->proc[i]);
			pl.l[2] = (struct prom_label){ "path", sdp_path_name((enum sdp_path)p) };
			put_sample(by_path, pl.l, 3, list->proc[i].snap.info.conns_by_path[p]);
		}
	put_family(by_reason, "counter", "Connections by the reason of their path (none: RDMA).");
	for (size_t i = 0; i < list->count; i++)
		for (size_t r = 0; r < stat_reason_slots(); r++) {
			if ((o->only_reason >= 0 && (size_t)o->only_reason != r) ||
			    list->proc[i].snap.info.conns_by_reason[r] == 0)
				continue;
			proc_labels(&pl, &list->proc[i]);
			pl.l[2] = (struct prom_label){ "reason", sdp_reason_name((enum sdp_reason)r) };
			put_sample(by_reason, pl.l, 3, list->proc[i].snap.info.conns_by_reason[r]);
		}
}

/* Live connections now, per process, path and reason. */
static void put_open_connections(const struct proc_list *list)
{
	static const char name[] = "sdpshim_connections";
	static uint64_t count[STAT_PATHS][SDP_REASON_COUNT];
	struct proc_labels pl = { .pid = "" };

	put_family(name, "gauge", "Live connections the filters kept, by path and reason.");
	for (size_t i = 0; i < list->count; i++) {
		const struct stats_snapshot *snap = &list->proc[i].snap;

		memset(count, 0, sizeof(count));
		for (size_t j = 0; j < snap->count; j++)
			if (snap->conn[j].path < STAT_PATHS && snap->conn[j].reason < SDP_REASON_COUNT)
				count[snap->conn[j].path][snap->conn[j].reason]++;
		proc_labels(&pl, &list->proc[i]);
		for (int p = 0; p < STAT_PATHS; p++)
			for (int r = 0; r < SDP_REASON_COUNT; r++) {
				if (!count[p][r])
					continue;
				pl.l[2] = (struct prom_label){ "path", sdp_path_name((enum sdp_path)p) };
				pl.l[3] = (struct prom_label){ "reason",
							       sdp_reason_name((enum sdp_reason)r) };
				put_sample(name, pl.l, 4, count[p][r]);
			}
	}
}

/* The labels of one connection: pid, comm, fd, role, local, remote, path,
 * reason (pid and fd, with the addresses, tell connections apart). */
struct conn_labels {
	char pid[16], fd[16], local[64], remote[64];
	struct prom_label l[8];
};

static void conn_labels(struct conn_labels *cl, const struct conn_ref *r)
{
	const struct sdp_conn_stats *s = r->conn;

	snprintf(cl->pid, sizeof(cl->pid), "%d", (int)r->proc->pid);
	snprintf(cl->fd, sizeof(cl->fd), "%d", s->fd);
	stats_addr_format(&s->local, cl->local, sizeof(cl->local));
	stats_addr_format(&s->remote, cl->remote, sizeof(cl->remote));
	cl->l[0] = (struct prom_label){ "pid", cl->pid };
	cl->l[1] = (struct prom_label){ "comm", r->proc->snap.info.comm };
	cl->l[2] = (struct prom_label){ "fd", cl->fd };
	cl->l[3] = (struct prom_label){ "role", stats_role_name(s->role) };
	cl->l[4] = (struct prom_label){ "local", cl->local };
	cl->l[5] = (struct prom_label){ "remote", cl->remote };
	cl->l[6] = (struct prom_label){ "path", sdp_path_name((enum sdp_path)s->path) };
	cl->l[7] = (struct prom_label){ "reason", sdp_reason_name((enum sdp_reason)s->reason) };
}

static void put_conn_families(const struct conn_ref *refs, size_t n)
{
	struct conn_labels cl = { .pid = "" };

	for (size_t f = 0; f < sizeof(conn_families) / sizeof(conn_families[0]); f++) {
		const struct conn_family *fam = &conn_families[f];

		put_family(fam->name, "counter", fam->help);
		for (size_t i = 0; i < n; i++) {
			const char *base = (const char *)refs[i].conn;

			conn_labels(&cl, &refs[i]);
			put_sample(fam->name, cl.l, 8,
				   stat_u64((const _Atomic uint64_t *)(base + fam->counter)));
		}
	}
	put_family("sdpshim_connection_switches_total", "counter", "Path switches, both ways.");
	for (size_t i = 0; i < n; i++) {
		conn_labels(&cl, &refs[i]);
		put_sample("sdpshim_connection_switches_total", cl.l, 8,
			   atomic_load_explicit(&refs[i].conn->switches, memory_order_relaxed));
	}
	put_family("sdpshim_connection_climbs_total", "counter",
		   "Path switches back from TCP to RDMA.");
	for (size_t i = 0; i < n; i++) {
		conn_labels(&cl, &refs[i]);
		put_sample("sdpshim_connection_climbs_total", cl.l, 8,
			   atomic_load_explicit(&refs[i].conn->climbs, memory_order_relaxed));
	}
}

void stat_show_prom(const struct proc_list *list, const struct stat_opts *o)
{
	struct conn_ref *refs;
	size_t n;

	put_family("sdpshim_processes", "gauge", "Preloaded processes shown (after the filters).");
	put_sample("sdpshim_processes", NULL, 0, list->count);
	for (size_t f = 0; f < sizeof(proc_families) / sizeof(proc_families[0]); f++)
		put_proc_family(list, &proc_families[f]);
	put_decisions(list, o);
	put_open_connections(list);
	refs = stat_conn_refs(list, o->sort, &n);
	put_conn_families(refs, n);
	free(refs);
}

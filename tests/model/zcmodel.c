/* The model's frame: building the open connection the way channel setup
 * would (buffers, receives, windows' device), tearing it down, findings,
 * the driver's settle loop (the progress thread's share: completions,
 * deferred work; the app's wake-ups), time, and rdma_cm events. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "zcm_internal.h"

struct zcm_state zcm;

#define SETTLE_LIMIT 5000
/* Control slots: where they live moved (send buffer, then receive buffer);
 * both buffers get room for them, so either layout fits. */
#define CTRL_ROOM (32u * 64u)

/* ------------------------------------------------------------ patterns */

#define LAP 65521u /* prime */

static uint8_t lap_table[2][LAP + LAP];  /* the table twice: any rotation is contiguous */
static uint8_t canary_block[4096];

static void tables_init(void)
{
	static bool done;

	if (done)
		return;
	for (unsigned d = 0; d < 2; d++) {
		uint64_t x = 0x243F6A8885A308D3ull * (d + 1);

		for (unsigned i = 0; i < LAP; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			lap_table[d][i] = lap_table[d][i + LAP] = (uint8_t)(x & 0x7f);
		}
	}
	for (unsigned i = 0; i < sizeof(canary_block); i++)
		canary_block[i] = (uint8_t)(0x80u | (i * 37u & 0x7fu));
	done = true;
}

/* Where the pattern of offset off starts in the doubled table, and how
 * many bytes follow it there before the next lap's rotation. */
static const uint8_t *lap_at(uint64_t off, unsigned dir, size_t *run)
{
	uint64_t lap = off / LAP;
	uint32_t pos = (uint32_t)((off % LAP + 7 * (lap % LAP)) % LAP);

	*run = LAP - off % LAP;
	return &lap_table[dir & 1][pos];
}

uint8_t zcm_pattern(uint64_t off, unsigned dir)
{
	size_t run;

	tables_init();
	return *lap_at(off, dir, &run);
}

void zcm_pattern_fill(uint8_t *dst, uint64_t off, size_t n, unsigned dir)
{
	tables_init();
	while (n) {
		size_t run;
		const uint8_t *src = lap_at(off, dir, &run);

		if (run > n)
			run = n;
		memcpy(dst, src, run);
		dst += run;
		off += run;
		n -= run;
	}
}

size_t zcm_pattern_mismatch(const uint8_t *b, uint64_t off, size_t n, unsigned dir)
{
	size_t done = 0;

	tables_init();
	while (done < n) {
		size_t run;
		const uint8_t *src = lap_at(off + done, dir, &run);

		if (run > n - done)
			run = n - done;
		if (memcmp(b + done, src, run) != 0) {
			for (size_t i = 0; i < run; i++)
				if (b[done + i] != src[i])
					return done + i;
		}
		done += run;
	}
	return n;
}

void zcm_canary_fill(uint8_t *dst, size_t n)
{
	tables_init();
	for (size_t i = 0; i < n; i += sizeof(canary_block))
		memcpy(dst + i, canary_block, n - i < sizeof(canary_block) ? n - i : sizeof(canary_block));
}

size_t zcm_canary_find(const uint8_t *b, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, 8);
		if (w & 0x8080808080808080ull)
			break;
	}
	for (; i < n; i++)
		if (b[i] & 0x80)
			return i;
	return n;
}

/* ------------------------------------------------------------ findings */

/* ZCM_IGNORE="text|text...": findings containing one of these are known
 * and skipped, so a fuzzing run can look past them. */
static bool ignored(const char *line)
{
	const char *list = getenv("ZCM_IGNORE");
	char tok[200];

	while (list && *list) {
		size_t n = strcspn(list, "|");

		if (n > 0 && n < sizeof(tok)) {
			memcpy(tok, list, n);
			tok[n] = '\0';
			if (strstr(line, tok))
				return true;
		}
		list += n + (list[n] == '|');
	}
	return false;
}

void zcm_finding(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (ignored(line))
		return;
	zcm.nfindings++;
	if (zcm.opts.fuzzing || getenv("ZCM_TRACE"))
		fprintf(stderr, "zcmodel finding: %s\n", line);
	if (zcm.opts.fuzzing)
		abort();
	if (strstr(zcm.findings, line))
		return; /* each distinct finding once */
	snprintf(zcm.findings + zcm.findings_len, sizeof(zcm.findings) - zcm.findings_len, "%s\n",
		 line);
	zcm.findings_len = strlen(zcm.findings);
}

void zcm_note_abort(bool by_last)
{
	if (zcm.abort_known)
		return;
	zcm.abort_known = true;
	zcm.abort_limit = by_last ? zcm.taken_before : zcm.taken_off;
	zcm_trace("the connection is reset; the peer's stream reached %llu",
		  (unsigned long long)zcm.abort_limit);
}

const char *zcm_findings(void)
{
	return zcm.findings;
}

int zcm_finding_count(void)
{
	return zcm.nfindings;
}

void zcm_trace(const char *fmt, ...)
{
	static int on = -1;
	va_list ap;

	if (on < 0)
		on = getenv("ZCM_TRACE") != NULL;
	if (!on)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "[%8llu ms] ", (unsigned long long)(zcm.now_us / 1000));
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---------------------------------------------------------- the channel */

static void conn_timer_cb(void *arg)
{
	conn_on_timer(arg);
}

static void load_tunables(const struct zcm_opts *o)
{
	char num[32];

	setenv("SDPSHIM_BUF_SIZE", "4096", 1);
	setenv("SDPSHIM_BUF_COUNT", "8", 1);
	snprintf(num, sizeof(num), "%u", ZCM_ZC_THRESH);
	setenv("SDPSHIM_ZCOPY_THRESH", num, 1);
	setenv("SDPSHIM_SPIN_US", "0", 1);
	if (o->answer_ms) {
		snprintf(num, sizeof(num), "%u", o->answer_ms);
		setenv("SDPSHIM_ZCOPY_ANSWER_MS", num, 1);
	} else {
		unsetenv("SDPSHIM_ZCOPY_ANSWER_MS");
	}
	if (o->nb_wait_ms) {
		snprintf(num, sizeof(num), "%u", o->nb_wait_ms);
		setenv("SDPSHIM_ZCOPY_NB_WAIT_MS", num, 1);
	} else {
		unsetenv("SDPSHIM_ZCOPY_NB_WAIT_MS");
	}
	tunables_load_env();
	sdp_log_level = o->quiet ? SDP_LOG_NONE : SDP_LOG_WARN;
	if (getenv("ZCM_TRACE"))
		sdp_log_level = SDP_LOG_DEBUG;
}

static void setup_buffers(struct sdp_conn *c)
{
	int err = 0;

	c->buf_size = sdp_tun.buf_size;
	c->buf_count = (uint16_t)sdp_tun.buf_count;
	c->rx_mem_len = (size_t)c->buf_size * c->buf_count + CTRL_ROOM;
	c->rx_mem = dev_alloc_registered(c->dev, c->rx_mem_len, &c->rx_mr, &err);
	c->rx_ring = calloc(c->buf_count, sizeof(*c->rx_ring));
#ifdef SDP_CONN_HAS_CTRL_MEM /* trees where control messages are built apart */
	c->ctrl_mem = c->rx_mem + (size_t)c->buf_size * c->buf_count;
#endif
	c->peer_buf_size = ZCM_BUF_SIZE;
	c->peer_buf_count = ZCM_BUF_COUNT;
	c->tx_peer_bufs = ZCM_BUF_COUNT;
#ifdef CTRL_SLOTS /* trees with send slots sized apart from the peer's buffers */
	c->tx_slot_size = ZCM_BUF_SIZE;
#endif
	c->tx_nslots = ZCM_BUF_COUNT + 1;
	c->tx_mem_len = (size_t)c->tx_nslots * ZCM_BUF_SIZE + CTRL_ROOM;
	c->tx_mem = dev_alloc_registered(c->dev, c->tx_mem_len, &c->tx_mr, &err);
	c->tx_slots = calloc(c->tx_nslots, sizeof(*c->tx_slots));
	if (!c->rx_mem || !c->rx_ring || !c->tx_mem || !c->tx_slots)
		abort();
	for (uint32_t i = 0; i < c->buf_count; i++)
		conn_repost_recv(c, i);
}

/* An open client channel, as conn_alloc, conn_setup_qp and ATTACH leave it. */
static struct sdp_conn *make_conn(void)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	c->cm_kind = CM_KIND_CONN;
	pthread_mutex_init(&c->lock, NULL);
	conn_cond_init(&c->cond);
	atomic_init(&c->refs, 1);
	conn_phase_start(c, CONN_OPEN);
	c->close_state = CLOSE_ACTIVE;
	c->established = true;
	c->tcp_fd = -1;
	policy_default(&c->policy);
	c->timer.fn = conn_timer_cb;
	c->timer.arg = c;
	c->stall_timer.fn = conn_stall_timer_fired;
	c->stall_timer.arg = c;
	c->probe_timer.fn = conn_probe_timer_fired;
	c->probe_timer.arg = c;
	c->rd_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->wr_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->dev = &zcm.dev;
	c->cq = &zcm.cq;
	c->qp = &zcm.qp;
	c->max_inline = zcm.dev.max_inline;
	c->sq_depth = sdp_tun.buf_count + 32;
	zcm.c = c;
	setup_buffers(c);
	c->last_rx_ms = progress_now_ms();
	return c;
}

struct sdp_conn *zcm_open(const struct zcm_opts *opts)
{
	if (zcm.open)
		zcm_close();
	memset(&zcm, 0, sizeof(zcm));
	zcm.opts = *opts;
	zcm.open = true;
	load_tunables(opts);
	zcm_verbs_init();
	zcm_peer_init();
	zcm_stubs_init();
	zcm_app_init();
	return make_conn();
}

void zcm_close(void)
{
	struct sdp_conn *c = zcm.c;

	if (!zcm.open)
		return;
	zcm_app_free();
	if (c) {
		close(c->rd_fd);
		close(c->wr_fd);
		free(c->rx_ring);
		free(c->tx_slots);
		free(c->drain_buf);
		free(c->sw.local);
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->lock);
		free(c);
	}
	zcm_verbs_free();
	zcm_peer_free();
	zcm.c = NULL;
	zcm.open = false;
}

struct sdp_conn *zcm_conn(void)
{
	return zcm.c;
}

/* ----------------------------------------------------------- driving */

/* The progress thread's completion handler. */
void zcm_progress(void)
{
	if (zcm_cq_count() == 0)
		return;
	if (!zcm_lock_free()) {
		zcm_finding("the app blocked holding the connection lock");
		return;
	}
	conn_lock(zcm.c);
	cq_poll(zcm.c);
	conn_unlock(zcm.c);
}

void zcm_settle(void)
{
	if (!zcm.open || zcm.app.broken)
		return;
	for (int i = 0; i < SETTLE_LIMIT; i++) {
		bool did = zcm_peer_pump();

		did |= zcm_run_deferred();
		if (zcm_cq_count() > 0 && zcm_lock_free()) {
			zcm_progress();
			did = true;
		}
		did |= zcm_app_try_wake();
		if (!did) {
			zcm_check_idle_invariants("once the call returned");
			return;
		}
	}
	zcm_finding("the app and progress thread never settle: a wait that wakes at once, again and again");
	zcm_app_abandon();
}

uint64_t zcm_now_ms(void)
{
	return zcm.now_us / 1000;
}

void zcm_advance(unsigned ms)
{
	uint64_t target = zcm.now_us + (uint64_t)ms * 1000;

	for (;;) {
		uint64_t next;

		zcm_settle();
		next = zcm_next_timer_us();
		if (zcm_app_deadline_us() < next && !zcm.app.hold)
			next = zcm_app_deadline_us();
		if (next > target)
			break;
		if (next > zcm.now_us)
			zcm.now_us = next;
		if (!zcm_fire_timers() && !zcm_app_try_wake())
			break; /* nothing due after all (a held app) */
	}
	zcm.now_us = target;
	zcm_settle();
}

void zcm_run_network(void)
{
	for (int i = 0; i < 100000; i++) {
		zcm_settle();
		if (zcm_exec_next() >= 0 || zcm_complete_next() || zcm_peer_auto_step())
			continue;
		return;
	}
}

void zcm_carrier_drop(void)
{
	if (!zcm_lock_free()) {
		zcm_finding("the app blocked holding the connection lock");
		return;
	}
	zcm_trace("rdma_cm: DISCONNECTED");
	conn_lock(zcm.c);
	close_ev_carrier_failed(zcm.c, ECONNRESET, "RDMA_CM_EVENT_DISCONNECTED");
	conn_unlock(zcm.c);
	zcm_settle();
}

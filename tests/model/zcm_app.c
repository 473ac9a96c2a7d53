/* The modelled app: one send or recv at a time through the real
 * conn_send/conn_recv, on its own thread, handing a baton back and forth
 * with the driver so only one of them runs: the core's waits park the app
 * (zcm_park) and the driver resumes it when its wait is satisfied (the
 * readiness eventfd is readable, a condition was broadcast), times out or
 * is interrupted by a signal.  When a call returns, its result is checked
 * against the peer's stream, and the idle invariants are checked: no window
 * of ours reachable, no RDMA queued into or out of app memory, no
 * registration held. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "zcm_internal.h"

#define A (zcm.app)
#define P (zcm.peer)
enum { TURN_DRIVER, TURN_APP };

__thread bool zcm_on_app_thread;
static bool signal_delivered;

void zcm_app_init(void)
{
	memset(&A, 0, sizeof(A));
	pthread_mutex_init(&zcm.bm, NULL);
	pthread_cond_init(&zcm.bc, NULL);
	zcm.turn = TURN_DRIVER;
}

/* ------------------------------------------------------------- baton */

static void wait_turn_locked(int me)
{
	while (zcm.turn != me)
		zcm_real_cond_wait(&zcm.bc, &zcm.bm);
}

static void pass_baton(int me, int to)
{
	pthread_mutex_lock(&zcm.bm);
	zcm.turn = to;
	zcm_real_cond_broadcast(&zcm.bc);
	wait_turn_locked(me);
	pthread_mutex_unlock(&zcm.bm);
}

enum zcm_wake zcm_park(enum zcm_park kind, uint64_t deadline_us, int fd)
{
	A.park = kind;
	A.park_deadline_us = deadline_us;
	A.park_fd = fd;
	A.park_gen = zcm.cond_gen;
	pass_baton(TURN_APP, TURN_DRIVER);
	if (A.abandon)
		longjmp(A.jb, 1);
	return A.wake;
}

static void *app_main(void *arg)
{
	struct iovec iov = { A.buf, A.call.len };
	volatile ssize_t r = ZCM_ABANDONED;

	(void)arg;
	zcm_on_app_thread = true;
	pthread_mutex_lock(&zcm.bm);
	wait_turn_locked(TURN_APP);
	pthread_mutex_unlock(&zcm.bm);
	if (setjmp(A.jb) == 0) {
		if (A.call.kind == ZCM_RECV)
			r = conn_recv(zcm.c, &iov, 1, A.call.flags, A.call.nonblock, A.call.timeout_ms);
		else
			r = conn_send(zcm.c, &iov, 1, A.call.flags, A.call.nonblock, A.call.timeout_ms);
	}
	A.result = r;
	A.done = true;
	A.park = PARK_NONE;
	pthread_mutex_lock(&zcm.bm);
	zcm.turn = TURN_DRIVER;
	zcm_real_cond_broadcast(&zcm.bc);
	pthread_mutex_unlock(&zcm.bm);
	return NULL;
}

/* ----------------------------------------------------- result checks */

static uint64_t peer_offered(void)
{
	uint64_t end = P.tx_off;

	for (int i = 0; i < P.nsrc; i++)
		if (P.src[i].off + P.src[i].len > end)
			end = P.src[i].off + P.src[i].len;
	return end;
}

static void check_recv_bytes(ssize_t r)
{
	size_t bad = zcm_pattern_mismatch(A.buf, A.rx_off, (size_t)r, ZCM_DIR_TO_US);
	size_t canary;

	if (bad == (size_t)r)
		return;
	canary = zcm_canary_find(A.buf, (size_t)r);
	if (canary < (size_t)r)
		zcm_finding("recv returned a byte the peer never wrote (the buffer's old contents) "
			    "at %zu of %zd", canary, r);
	else if (!P.tx_ambiguous)
		zcm_finding("recv returned byte %#x at stream offset %llu, the peer sent %#x there "
			    "(a duplicate, gap or reorder)", A.buf[bad],
			    (unsigned long long)(A.rx_off + bad),
			    zcm_pattern(A.rx_off + bad, ZCM_DIR_TO_US));
}

static bool blocking_untimed(void)
{
	return !A.call.nonblock && !(A.call.flags & MSG_DONTWAIT) && A.call.timeout_ms < 0 &&
	       A.call.signal_after_ms < 0;
}

static void check_error(ssize_t r, const char *what)
{
	if (r == -EAGAIN && blocking_untimed())
		zcm_finding("a blocking %s with no timeout returned EAGAIN", what);
	else if (r == -EINTR && A.call.signal_after_ms < 0)
		zcm_finding("%s returned EINTR with no signal", what);
	else if (r != -EAGAIN && r != -EINTR)
		A.error_reported = true;
}

/* EOF: the peer closed (DisConn), after every byte it sent; a reset is
 * reported as an error first (else the app takes a cut stream for whole),
 * unless the DisConn came before it (the stream was whole: Linux TCP too
 * reads EOF after a FIN, whatever follows). */
static void check_eof(void)
{
	if (A.error_reported)
		return;
	if (zcm.abort_known && !zcm.fin_before_reset)
		zcm_finding("recv returned EOF on a reset connection with no error reported");
	else if (!P.sent_disconn)
		zcm_finding("recv returned EOF although the peer never closed");
	else if (!P.tx_ambiguous && !zcm.qp_err && A.rx_off < P.disconn_off)
		zcm_finding("recv returned EOF at %llu; the peer sent %llu bytes before DisConn",
			    (unsigned long long)A.rx_off, (unsigned long long)P.disconn_off);
	A.eof_seen = true;
}

static void check_recv(ssize_t r)
{
	if (r > (ssize_t)A.call.len)
		zcm_finding("recv returned %zd bytes into a %zu-byte buffer", r, A.call.len);
	if (r > 0) {
		if (!P.tx_ambiguous && A.rx_off + (uint64_t)r > peer_offered())
			zcm_finding("recv returned %zd bytes at %llu; the peer sent only %llu", r,
				    (unsigned long long)A.rx_off, (unsigned long long)peer_offered());
		if (zcm.abort_known && A.rx_off + (uint64_t)r > zcm.abort_limit)
			zcm_finding("recv returned bytes up to %llu that arrived after the connection was "
				    "reset (at %llu)", (unsigned long long)(A.rx_off + (uint64_t)r),
				    (unsigned long long)zcm.abort_limit);
		else if (!(A.call.flags & MSG_TRUNC))
			check_recv_bytes(r);
		if (!(A.call.flags & MSG_PEEK))
			A.rx_off += (uint64_t)r;
	} else if (r == 0) {
		check_eof();
	} else {
		check_error(r, "recv");
	}
}

static void check_send(ssize_t r)
{
	if (r > (ssize_t)A.call.len)
		zcm_finding("send returned %zd for a %zu-byte buffer", r, A.call.len);
	if (r > 0)
		A.tx_off += (uint64_t)r;
	else if (r < 0)
		check_error(r, "send");
	else
		zcm_finding("send returned 0 for a %zu-byte buffer", A.call.len);
	/* The app reuses the buffer at once: bytes read from it later are not
	 * the stream's (the peer's checks see 0xee). */
	memset(A.buf, 0xee, A.buf_len);
}

static void call_returned(void)
{
	pthread_join(A.th, NULL);
	A.running = false;
	zcm_trace("app %s returned %zd", A.call.kind == ZCM_RECV ? "recv" : "send", A.result);
	if (A.result == ZCM_ABANDONED)
		return;
	if (A.call.kind == ZCM_RECV)
		check_recv(A.result);
	else
		check_send(A.result);
	zcm_check_idle_invariants("after the call returned");
}

/* ---------------------------------------------------- idle invariants */

static bool app_memory_key(uint32_t lkey)
{
	struct zcm_mr *m = zcm_mr_by_lkey(lkey);

	return m && m->mre;
}

void zcm_check_idle_invariants(const char *when)
{
	if (A.running || A.broken || !zcm.c)
		return;
	for (int i = 0; i < ZCM_MW_MAX; i++)
		if (zcm_window_exposed(&zcm.mws[i]))
			zcm_finding("a memory window over an app buffer is still reachable %s", when);
	for (uint32_t p = zcm.sq_tail; p != zcm.sq_head; p++) {
		struct zcm_swr *s = &zcm.sq[p % ZCM_SQ_MAX];

		if (s->executed || zcm.qp_err || !app_memory_key(s->lkey))
			continue;
		if (s->opcode == IBV_WR_RDMA_READ)
			zcm_finding("an RDMA READ into an app buffer is still queued %s", when);
		else if (s->opcode != IBV_WR_SEND)
			zcm_finding("an RDMA WRITE from an app buffer is still queued %s", when);
	}
	for (struct zcm_mr *m = zcm.mrs; m; m = m->next)
		if (m->mre && m->mre->users > 0)
			zcm_finding("an app buffer's registration is still held %s", when);
}

/* ---------------------------------------------------------- driving */

bool zcm_app_busy(void)
{
	return A.running;
}

bool zcm_app_parked(void)
{
	return A.running && A.park != PARK_NONE;
}

static void resume(enum zcm_wake how)
{
	A.wake = how;
	A.park = PARK_NONE;
	pass_baton(TURN_DRIVER, TURN_APP);
	if (A.done)
		call_returned();
}

static uint64_t signal_at_us(void)
{
	if (A.call.signal_after_ms < 0 || signal_delivered)
		return UINT64_MAX;
	return A.start_us + (uint64_t)A.call.signal_after_ms * 1000;
}

uint64_t zcm_app_deadline_us(void)
{
	uint64_t d;

	if (!zcm_app_parked())
		return UINT64_MAX;
	d = A.park_deadline_us;
	if (A.park == PARK_POLL && signal_at_us() < d)
		d = signal_at_us();
	return d;
}

static bool fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

bool zcm_app_try_wake(void)
{
	if (!zcm_app_parked() || A.hold)
		return false;
	if (A.park == PARK_POLL && zcm.now_us >= signal_at_us()) {
		signal_delivered = true;
		resume(WAKE_SIGNAL);
	} else if (zcm.now_us >= A.park_deadline_us) {
		resume(WAKE_TIMEOUT);
	} else if (A.park == PARK_POLL && fd_readable(A.park_fd)) {
		resume(WAKE_READY);
	} else if (A.park == PARK_COND && zcm.cond_gen != A.park_gen) {
		resume(WAKE_READY);
	} else {
		return false;
	}
	return true;
}

void zcm_app_abandon(void)
{
	if (!A.running)
		return;
	A.abandon = true;
	A.broken = true;
	resume(WAKE_TIMEOUT);
}

static void free_buffer(void)
{
	if (!A.buf)
		return;
	zcm_mr_drop_range((uintptr_t)A.buf, (uintptr_t)A.buf + A.buf_len);
	free(A.buf);
	A.buf = NULL;
}

void zcm_app_free(void)
{
	zcm_app_abandon();
	free_buffer();
	pthread_cond_destroy(&zcm.bc);
	pthread_mutex_destroy(&zcm.bm);
}

static void fill_buffer(void)
{
	if (A.call.kind == ZCM_RECV)
		zcm_canary_fill(A.buf, A.buf_len);
	else
		zcm_pattern_fill(A.buf, A.tx_off, A.buf_len, ZCM_DIR_TO_PEER);
}

void zcm_app_start(const struct zcm_call *call)
{
	if (A.running || A.broken)
		return;
	free_buffer();
	A.call = *call;
	A.buf_len = call->len ? call->len : 1;
	A.buf = malloc(A.buf_len);
	if (!A.buf)
		abort();
	fill_buffer();
	A.start_us = zcm.now_us;
	A.done = A.abandon = false;
	A.park = PARK_NONE;
	A.running = true;
	signal_delivered = false;
	zcm_trace("app %s %zu flags %#x nb %d timeout %d", call->kind == ZCM_RECV ? "recv" : "send",
		  call->len, call->flags, call->nonblock, call->timeout_ms);
	pthread_mutex_lock(&zcm.bm);
	zcm.turn = TURN_APP;
	pthread_mutex_unlock(&zcm.bm);
	if (pthread_create(&A.th, NULL, app_main, NULL) != 0)
		abort();
	pthread_mutex_lock(&zcm.bm);
	wait_turn_locked(TURN_DRIVER);
	pthread_mutex_unlock(&zcm.bm);
	if (A.done)
		call_returned();
	zcm_settle();
}

/* The bound on a call: its timeout or signal, plus ZCM_WAIT_BOUND_MS. */
static uint64_t call_limit_us(void)
{
	uint64_t base = A.start_us;

	if (A.call.timeout_ms >= 0)
		base += (uint64_t)A.call.timeout_ms * 1000;
	if (A.call.signal_after_ms >= 0)
		base += (uint64_t)A.call.signal_after_ms * 1000;
	return base + (uint64_t)ZCM_WAIT_BOUND_MS * 1000;
}

static bool network_step(void)
{
	return zcm_exec_next() >= 0 || zcm_complete_next() || zcm_peer_auto_step();
}

ssize_t zcm_app_finish(void)
{
	/* A call the input held could not act until now: its bound counts
	 * from here, not from its start. */
	uint64_t limit = call_limit_us(), from_now = zcm.now_us + (uint64_t)ZCM_WAIT_BOUND_MS * 1000;

	if (limit < from_now)
		limit = from_now;

	A.hold = false;
	while (A.running) {
		uint64_t next;

		zcm_settle();
		if (!A.running || network_step())
			continue;
		next = zcm_app_deadline_us();
		if (zcm_next_timer_us() < next)
			next = zcm_next_timer_us();
		if (next >= limit) {
			if (!blocking_untimed())
				zcm_finding("a %s (timeout %d ms, signal at %d ms) did not return within "
					    "%u ms of model time",
					    A.call.kind == ZCM_RECV ? "recv" : "send", A.call.timeout_ms,
					    A.call.signal_after_ms, ZCM_WAIT_BOUND_MS);
			zcm_app_abandon();
			break;
		}
		if (next > zcm.now_us)
			zcm.now_us = next;
		zcm_fire_timers();
		zcm_app_try_wake();
	}
	return A.result;
}

ssize_t zcm_app_result(void)
{
	return A.result;
}

void zcm_app_hold(bool hold)
{
	A.hold = hold;
	if (!hold)
		zcm_settle();
}

ssize_t zcm_app_do(const struct zcm_call *call)
{
	zcm_app_start(call);
	return zcm_app_finish();
}

uint64_t zcm_app_rx_off(void)
{
	return A.rx_off;
}

uint64_t zcm_app_tx_off(void)
{
	return A.tx_off;
}

void zcm_app_check_readable(void)
{
	uint64_t readable, unread;

	if (A.running || A.broken)
		return;
	readable = conn_readable_bytes(zcm.c);
	unread = peer_offered() > A.rx_off ? peer_offered() - A.rx_off : 0;
	if (!P.tx_ambiguous && readable > unread)
		zcm_finding("the socket says %llu bytes are readable; the peer has %llu unread in the "
			    "stream", (unsigned long long)readable, (unsigned long long)unread);
}

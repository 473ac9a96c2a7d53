/* What lies beside the data path, replaced for the model: the registration
 * cache and device buffers (regions in the model's verbs), the progress
 * thread's timers and deferred work (fired by the driver on the fake
 * clock), the libc table (poll parks the app thread), the clock and the
 * condition waits (--wrap: they park the app thread too), and the hooks of
 * the binding handshake, the TCP watcher and channel setup, which an open
 * channel with no TCP socket never needs.  Everything is weak, so a real
 * definition the lead moves into a linked file wins. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/real.h"
#include "core/link.h" /* rdv_port() */
#include "core/wait_set.h"
#include "zcm_internal.h"

#define WEAK __attribute__((weak))
#define MONO_BASE_US     1000000000ull          /* the fake monotonic clock starts at 1000 s */
#define REALTIME_BASE_US 1700000000000000ull

struct real_libc real;
__thread int sdp_in_lib;

/* ------------------------------------------------------------- clock */

int __wrap_clock_gettime(clockid_t id, struct timespec *ts);
int __real_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __real_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
				  const struct timespec *abs);
int __real_pthread_cond_broadcast(pthread_cond_t *c);
int __real_pthread_cond_signal(pthread_cond_t *c);
int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __wrap_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
				  const struct timespec *abs);
int __wrap_pthread_cond_broadcast(pthread_cond_t *c);
int __wrap_pthread_cond_signal(pthread_cond_t *c);

int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
	uint64_t us = zcm.now_us + (id == CLOCK_REALTIME ? REALTIME_BASE_US : MONO_BASE_US);

	ts->tv_sec = (time_t)(us / 1000000);
	ts->tv_nsec = (long)(us % 1000000) * 1000;
	return 0;
}

WEAK uint64_t progress_now_ms(void)
{
	return (zcm.now_us + MONO_BASE_US) / 1000;
}

WEAK uint64_t progress_coarse_ms(void)
{
	return progress_now_ms();
}

WEAK uint64_t progress_coarse_slack_ms(void)
{
	return 0; /* the model's clock has no ticks */
}

WEAK uint64_t progress_deadline_ms(unsigned ms_from_now)
{
	return progress_coarse_ms() + progress_coarse_slack_ms() + ms_from_now;
}

WEAK uint64_t stats_now_ms(void)
{
	return (zcm.now_us + REALTIME_BASE_US) / 1000; /* the stats' wall clock */
}

/* ------------------------------------------------------ waits and wakes */

int zcm_real_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	return __real_pthread_cond_wait(c, m);
}

int zcm_real_cond_broadcast(pthread_cond_t *c)
{
	return __real_pthread_cond_broadcast(c);
}

/* The app thread waits on a condition: it gives the mutex up, as the real
 * wait does, and the driver runs until a broadcast or the deadline. */
int __wrap_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abs)
{
	uint64_t at = (uint64_t)abs->tv_sec * 1000000 + (uint64_t)abs->tv_nsec / 1000;
	enum zcm_wake w;

	if (!zcm_on_app_thread)
		return __real_pthread_cond_timedwait(c, m, abs);
	pthread_mutex_unlock(m);
	/* c->cond's waits read CLOCK_MONOTONIC (conn_cond_init). */
	w = zcm_park(PARK_COND, at > MONO_BASE_US ? at - MONO_BASE_US : 0, -1);
	pthread_mutex_lock(m);
	return w == WAKE_TIMEOUT ? ETIMEDOUT : 0;
}

int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (!zcm_on_app_thread)
		return __real_pthread_cond_wait(c, m);
	pthread_mutex_unlock(m);
	zcm_park(PARK_COND, UINT64_MAX, -1);
	pthread_mutex_lock(m);
	return 0;
}

int __wrap_pthread_cond_broadcast(pthread_cond_t *c)
{
	zcm.cond_gen++;
	return __real_pthread_cond_broadcast(c);
}

int __wrap_pthread_cond_signal(pthread_cond_t *c)
{
	zcm.cond_gen++;
	return __real_pthread_cond_signal(c);
}

/* real.poll: conn_wait sleeping on a readiness eventfd. */
static int model_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	enum zcm_wake w;

	if (!zcm_on_app_thread || timeout_ms == 0 || n != 1)
		return poll(fds, n, 0);
	w = zcm_park(PARK_POLL, timeout_ms < 0 ? UINT64_MAX : zcm.now_us + (uint64_t)timeout_ms * 1000,
		     fds[0].fd);
	if (w == WAKE_SIGNAL) {
		errno = EINTR;
		return -1;
	}
	if (w == WAKE_TIMEOUT)
		return 0;
	fds[0].revents = POLLIN;
	return 1;
}

static ssize_t model_read(int fd, void *buf, size_t len)
{
	return read(fd, buf, len);
}

static ssize_t model_write(int fd, const void *buf, size_t len)
{
	return write(fd, buf, len);
}

/* ------------------------------------------------------ timers, defer */

WEAK void progress_timer_arm(struct progress_timer *t, uint64_t at_ms)
{
	int free_slot = -1;

	for (int i = 0; i < ZCM_TIMERS; i++) {
		if (zcm.timers[i] == t)
			free_slot = i;
		else if (!zcm.timers[i] && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0) {
		zcm_finding("more timers than the model holds");
		return;
	}
	zcm.timers[free_slot] = t;
	t->node.at_ms = at_ms;
	t->armed = true;
}

WEAK void progress_timer_cancel(struct progress_timer *t)
{
	for (int i = 0; i < ZCM_TIMERS; i++)
		if (zcm.timers[i] == t)
			zcm.timers[i] = NULL;
	t->armed = false;
}

uint64_t zcm_next_timer_us(void)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < ZCM_TIMERS; i++) {
		struct progress_timer *t = zcm.timers[i];
		uint64_t at;

		if (!t || !t->armed)
			continue;
		at = t->node.at_ms * 1000 > MONO_BASE_US ? t->node.at_ms * 1000 - MONO_BASE_US : 0;
		if (at < next)
			next = at;
	}
	return next;
}

bool zcm_fire_timers(void)
{
	bool fired = false;

	for (int i = 0; i < ZCM_TIMERS; i++) {
		struct progress_timer *t = zcm.timers[i];

		if (!t || !t->armed || t->node.at_ms * 1000 > zcm.now_us + MONO_BASE_US)
			continue;
		if (!zcm_lock_free()) {
			zcm_finding("the app blocked holding the connection lock");
			return fired;
		}
		zcm.timers[i] = NULL;
		t->armed = false;
		t->fn(t->arg);
		fired = true;
	}
	return fired;
}

WEAK int progress_defer(void (*fn)(void *arg), void *arg)
{
	if (zcm.ndeferred >= ZCM_DEFER_MAX)
		return -ENOMEM;
	zcm.deferred[zcm.ndeferred].fn = fn;
	zcm.deferred[zcm.ndeferred].arg = arg;
	zcm.ndeferred++;
	return 0;
}

bool zcm_run_deferred(void)
{
	bool ran = false;

	while (zcm.ndeferred > 0 && zcm_lock_free()) {
		void (*fn)(void *) = zcm.deferred[0].fn;
		void *arg = zcm.deferred[0].arg;

		memmove(&zcm.deferred[0], &zcm.deferred[1],
			(size_t)(zcm.ndeferred - 1) * sizeof(zcm.deferred[0]));
		zcm.ndeferred--;
		fn(arg);
		ran = true;
	}
	return ran;
}

bool zcm_lock_free(void)
{
	if (pthread_mutex_trylock(&zcm.c->lock) != 0)
		return false;
	pthread_mutex_unlock(&zcm.c->lock);
	return true;
}

WEAK void progress_linger_begin(void) {}
WEAK void progress_linger_end(void) {}
WEAK int progress_watch(int fd, uint32_t events, struct progress_source *src) { return 0; }
WEAK int progress_rewatch(int fd, uint32_t events, struct progress_source *src) { return 0; }
WEAK void progress_unwatch(int fd) {}
WEAK void progress_close_hidden(int fd) {}

/* ------------------------------------------- registrations and buffers */

WEAK int mrcache_get(struct sdp_dev *dev, const void *addr, size_t len, bool need_write,
		     struct mrc_entry **out, bool *hit)
{
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)4095;
	uintptr_t end = ((uintptr_t)addr + len + 4095) & ~(uintptr_t)4095;
	struct zcm_mr *m;
	struct mrc_entry *e;

	if (zcm.pin_budget_spent)
		return -ENOBUFS;
	m = zcm_mr_add(start, end, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, NULL);
	e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->start = start;
	e->end = end;
	e->mr = &m->mr;
	e->dev = dev;
	e->users = 1;
	e->writable = true;
	m->mre = e;
	*out = e;
	*hit = false;
	return 0;
}

void zcm_pin_budget_spent(bool spent)
{
	zcm.pin_budget_spent = spent;
}

WEAK void mrcache_put(struct mrc_entry *e)
{
	if (--e->users < 0)
		zcm_finding("an app buffer's registration was released twice");
}

WEAK void *dev_alloc_registered(struct sdp_dev *dev, size_t len, struct ibv_mr **mr, int *err)
{
	void *mem = NULL;
	struct zcm_mr *m;

	if (zcm.pin_budget_spent) {
		*err = -ENOBUFS;
		return NULL;
	}
	if (posix_memalign(&mem, 4096, len) != 0) {
		*err = -ENOMEM;
		return NULL;
	}
	memset(mem, 0, len);
	m = zcm_mr_add((uintptr_t)mem, (uintptr_t)mem + len, IBV_ACCESS_LOCAL_WRITE, mem);
	*mr = &m->mr;
	return mem;
}

WEAK void dev_free_registered(void *mem, size_t len, struct ibv_mr *mr)
{
	for (struct zcm_mr *m = zcm.mrs; m; m = m->next) {
		if (mr && &m->mr == mr) {
			m->live = false;
			free(m->owned);
			m->owned = NULL;
		}
	}
}

/* --------------------------------------------------- channel lifetime */

WEAK void conn_get(struct sdp_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
}

WEAK void conn_put(struct sdp_conn *c)
{
	atomic_fetch_sub(&c->refs, 1); /* the model frees the channel itself */
}

WEAK int conn_repost_recv(struct sdp_conn *c, uint32_t slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(c->rx_mem + (size_t)slot * c->buf_size),
			       .length = c->buf_size, .lkey = c->rx_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = WR_ID(WR_RECV, slot), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	if (!c->qp)
		return -ENOTCONN;
	return -ibv_post_recv(c->qp, &wr, &bad);
}

WEAK void conn_schedule_destroy(struct sdp_conn *c)
{
	c->destroy_queued = true; /* teardown is the model's (zcm_close) */
}

/* ------------------------------------------- TCP, binding, setup hooks */

/* Declared again: trees from before the binding handshake lack them. */
void bind_on_carrier_failed(struct sdp_conn *c);
void bind_client_on_attach(struct sdp_conn *c);
void bind_client_on_detach(struct sdp_conn *c);
void bind_fallback(struct sdp_conn *c, enum sdp_reason reason);
void bind_on_violation(struct sdp_conn *c, const char *what);
void bind_server_on_commit(struct sdp_conn *c);
void bind_on_timer(struct sdp_conn *c);
void bind_on_tcp_ready(struct sdp_conn *c);
void pending_drop(struct sdp_conn *c);
void pending_on_timer(struct sdp_conn *c);
void queue_attach(struct sdp_conn *c);

/* A forked child's adopted stream (core/climb.c): never made in the model. */
WEAK struct sdp_conn *conn_alloc(bool is_server, const struct sdp_policy *policy) { return NULL; }
WEAK int progress_dup_hidden(int fd) { return -1; }
WEAK int progress_start(void) { return -1; }
WEAK uint16_t rdv_port(void) { return 0; }

WEAK void tcp_send_reset(struct sdp_conn *c) {}
WEAK void tcp_watch_start(struct sdp_conn *c, uint32_t events) {}
WEAK void tcp_drain_start(struct sdp_conn *c) {}
WEAK void tcp_drain_on_close(struct sdp_conn *c, bool abort) {}
WEAK void tcp_drain_on_timer(struct sdp_conn *c) {}
WEAK int tcp_drain_send(struct sdp_conn *c) { return 0; }
WEAK void conn_fallback(struct sdp_conn *c, enum sdp_reason reason)
{
	zcm_trace("conn_fallback(%d) on an open channel", (int)reason);
}
WEAK void bind_on_carrier_failed(struct sdp_conn *c) {}
WEAK void bind_client_on_attach(struct sdp_conn *c) {}
WEAK void bind_client_on_detach(struct sdp_conn *c) {}
WEAK void bind_fallback(struct sdp_conn *c, enum sdp_reason reason) {}
WEAK void bind_on_violation(struct sdp_conn *c, const char *what) {}
WEAK void bind_server_on_commit(struct sdp_conn *c) {}
WEAK void bind_on_timer(struct sdp_conn *c) {}
WEAK void bind_keep_bound(struct sdp_conn *c) {}
WEAK void bind_on_tcp_ready(struct sdp_conn *c) {}
WEAK void pending_drop(struct sdp_conn *c) {}
WEAK void pending_on_timer(struct sdp_conn *c) {}
WEAK void queue_attach(struct sdp_conn *c) {}

/* Links (core/link.c): the model's channels have QPs of their own. */
struct ibv_cq;
struct sdp_link;
int link_send(struct sdp_conn *c, uint64_t wr_id, const void *msg, uint32_t len);
int link_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr);
void link_force_fail(struct sdp_conn *c, const char *why);
void link_stream_stop(struct sdp_conn *c);
void link_on_cq_event(void *ctx, struct ibv_cq *cq);
void link_stream_awaits_sends(struct sdp_conn *c);
WEAK int link_send(struct sdp_conn *c, uint64_t wr_id, const void *msg, uint32_t len) { return -EPIPE; }
WEAK int link_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr) { return -EPIPE; }
WEAK void link_force_fail(struct sdp_conn *c, const char *why) {}
WEAK void link_stream_stop(struct sdp_conn *c) {}
WEAK void link_on_cq_event(void *ctx, struct ibv_cq *cq) {}
WEAK void link_stream_awaits_sends(struct sdp_conn *c) {}
bool link_sink_claim(struct sdp_conn *c);
void link_sink_release(struct sdp_conn *c);
void link_reap(struct sdp_conn *c);
WEAK bool link_sink_claim(struct sdp_conn *c) { return true; }
WEAK void link_sink_release(struct sdp_conn *c) {}
WEAK void link_reap(struct sdp_conn *c) {}
struct sdp_link *link_hold(struct sdp_conn *c);
void link_app_reap_held(struct sdp_link *link);
void link_app_poll_held(struct sdp_link *link);
void link_reap_held(struct sdp_link *link);
bool link_arms_owed(void);
void link_arm_owed_all(void);
WEAK bool link_arms_owed(void) { return false; }
WEAK void link_arm_owed_all(void) {}
WEAK struct sdp_link *link_hold(struct sdp_conn *c) { return NULL; }
WEAK void link_app_reap_held(struct sdp_link *link) {}
WEAK void link_app_poll_held(struct sdp_link *link) {}
WEAK void link_reap_held(struct sdp_link *link) {}
/* core/app_wake.c: no links in the model, so no CQ arm is ever owed. */
WEAK void conn_sleep_begin_any(void) {}
WEAK void conn_sleep_end_any(void) {}
void conn_sleep_end_cleanup(void *unused);
WEAK void conn_sleep_end_cleanup(void *unused) {}
WEAK int conn_take_completions(void) { return 0; }
WEAK int conn_take_completions_then_sleep(void) { return 0; }
/* core/wait_set.c: no links in the model, so a sleep is the indicator's poll. */
WEAK int wait_set_sleep(int ind_fd, uint64_t serial, bool linked, int timeout_ms)
{
	struct pollfd pfd = { .fd = ind_fd, .events = POLLIN };
	int rc = real.poll(&pfd, 1, timeout_ms);

	return rc > 0 ? WAIT_SET_INDICATOR : rc;
}
/* The same wait without the sleeper count (core/app_wake.c). */
WEAK void conn_cond_wait_counted(struct sdp_conn *c, const struct timespec *until)
{
	if (until)
		pthread_cond_timedwait(&c->cond, &c->lock, until);
	else
		pthread_cond_wait(&c->cond, &c->lock);
}

void zcm_stubs_init(void)
{
	memset(&real, 0, sizeof(real));
	real.poll = model_poll;
	real.read = model_read;
	real.write = model_write;
}

/* The climb (core/climb.c) dials links and builds channels: the model
 * has neither, and its switches never hold a stream (no owner). */
struct sdp_climb_req;
bool bind_make_nonce(uint8_t nonce[16]);
void climb_refuse(struct sdp_link *link, uint16_t idx, uint8_t code);
void conn_release_channel(struct sdp_conn *c);
int conn_setup_tx(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count);
int link_client_open(struct sdp_conn *c, const struct sockaddr *dst, socklen_t dst_len,
		     enum sdp_reason *reason);
int link_stream_send_kind(struct sdp_conn *c, uint8_t kind, const void *payload, uint32_t len);
int link_stream_setup(struct sdp_conn *c, struct sdp_link *link, uint16_t idx);
void link_stream_unsetup(struct sdp_conn *c);
WEAK bool bind_make_nonce(uint8_t nonce[16])
{
	memset(nonce, 0x5a, 16);
	return true;
}
WEAK void climb_refuse(struct sdp_link *link, uint16_t idx, uint8_t code) {}
WEAK void conn_release_channel(struct sdp_conn *c) {}
WEAK int conn_setup_tx(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count)
{
	return -ENOMEM;
}
WEAK int link_client_open(struct sdp_conn *c, const struct sockaddr *dst, socklen_t dst_len,
			  enum sdp_reason *reason)
{
	return -ENODEV;
}
WEAK int link_stream_send_kind(struct sdp_conn *c, uint8_t kind, const void *payload, uint32_t len)
{
	return -EPIPE;
}
WEAK int link_stream_setup(struct sdp_conn *c, struct sdp_link *link, uint16_t idx) { return -EPIPE; }
WEAK void link_stream_unsetup(struct sdp_conn *c) {}

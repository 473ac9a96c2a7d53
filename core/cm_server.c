/* The server side of channel setup: an rdma_cm listener beside each
 * listening TCP socket validates Hellos, accepts channels into a pending
 * table keyed by TCP 4-tuple, and accept() attaches the matching one. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "base/sockaddr.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "core/listener.h"
#include "core/qp.h"
#include "core/tcp_diag.h"
#include "core/verbs_fence.h"

#define PENDING_FIRST_CHECK_MS 10
#define PENDING_MAX_CHECK_MS   200
#define ACCEPTED_ELSEWHERE_MS  100
#define OWN_ACCEPT_GRACE_MS    5000

static void listener_put(struct sdp_listener *l)
{
	if (atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&l->lock);
	free(l);
}

void listener_hold(struct sdp_listener *l)
{
	atomic_fetch_add(&l->refs, 1);
}

void listener_release(struct sdp_listener *l)
{
	listener_put(l);
}

#define RELISTEN_FIRST_MS 250u
#define RELISTEN_MAX_MS   8000u

/* rdma_cm listens on l's address; 0 or an errno. */
static int listen_on(struct sdp_listener *l, struct rdma_event_channel *ch)
{
	int rc, err;

	VERBS_CTL_ENTER();
	rc = rdma_create_id(ch, &l->id, l, RDMA_PS_TCP);
	if (rc == 0)
		rc = rdma_bind_addr(l->id, (struct sockaddr *)&l->local);
	if (rc == 0)
		rc = rdma_listen(l->id, l->backlog > 0 ? l->backlog : 128);
	err = rc ? errno : 0;
	if (rc && l->id)
		rdma_destroy_id(l->id);
	if (rc)
		l->id = NULL;
	VERBS_CTL_LEAVE();
	return err;
}

struct sdp_listener *listener_open(const struct sockaddr *local, int backlog,
				   const struct sdp_policy *policy, int *err)
{
	struct rdma_event_channel *ch;
	struct sdp_listener *l;
	uint8_t addr[16];

	if (progress_start() != 0 || cm_channel_ensure(&ch) != 0) {
		*err = -EIO;
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		*err = -ENOMEM;
		return NULL;
	}
	l->cm_kind = CM_KIND_LISTENER;
	pthread_mutex_init(&l->lock, NULL);
	atomic_init(&l->refs, 1);
	sockaddr_to_tuple_addr(local, addr, &l->port);
	memcpy(&l->local, local, sockaddr_len(local));
	l->backlog = backlog;
	l->pending_max = backlog > 0 ? (unsigned)backlog * 2 + 16 : 144;
	l->policy = *policy;
	if (l->policy.client_net_count > SDP_CLIENT_NETS_MAX)
		l->policy.client_net_count = SDP_CLIENT_NETS_MAX;
	*err = listen_on(l, ch);
	if (*err) {
		listener_put(l);
		return NULL;
	}
	return l;
}

struct sdp_listener *listener_create(const struct sockaddr *local, int backlog,
				     const struct sdp_policy *policy,
				     enum sdp_reason *reason)
{
	uint16_t port = sockaddr_port(local);
	int err = 0;
	struct sdp_listener *l = listener_open(local, backlog, policy, &err);

	if (l)
		return l;
	if (err < 0) { /* no rdma_cm channel, or no memory */
		*reason = err == -EIO ? SDP_REASON_RDMA_CM_ERROR : SDP_REASON_RESOURCES;
		return NULL;
	}
	if (err == EADDRINUSE)
		sdp_warn("no RDMA listener on port %u: another process holds that port in the RDMA "
			 "port space; this listener serves TCP only", port);
	else
		sdp_info("no RDMA listener on port %u: %s; this listener serves TCP only", port,
			 strerror(err));
	*reason = err == EADDRINUSE ? SDP_REASON_RESOURCES : SDP_REASON_LISTENER_TCP;
	return NULL;
}

/* Listeners waiting to listen again, each with a reference (progress
 * thread only: it drops ids, fires the timers and reads uevents). */
static struct sdp_listener *relisten_waiting;

static void relisten_list(struct sdp_listener *l)
{
	if (l->relisten_listed)
		return;
	listener_hold(l);
	l->relisten_next = relisten_waiting;
	relisten_waiting = l;
	l->relisten_listed = true;
}

static void relisten_unlist(struct sdp_listener *l)
{
	if (!l->relisten_listed)
		return;
	for (struct sdp_listener **p = &relisten_waiting; *p; p = &(*p)->relisten_next) {
		if (*p == l) {
			*p = l->relisten_next;
			break;
		}
	}
	l->relisten_listed = false;
	listener_put(l);
}

void cm_server_device_added(void)
{
	for (struct sdp_listener *l = relisten_waiting; l; l = l->relisten_next) {
		l->relisten_ms = RELISTEN_FIRST_MS;
		progress_timer_arm(&l->relisten, progress_now_ms());
	}
}

/* Its device went: the id goes (it holds the device), and rdma_cm listens
 * again, with a backoff, until the address is on an RDMA device again.
 * Meanwhile clients' channels are refused and they use TCP.  Progress
 * thread, like the listener's teardown. */
static void relisten_fired(void *arg)
{
	struct sdp_listener *l = arg;
	struct rdma_event_channel *ch;
	int err;

	if (l->closing || l->id) {
		relisten_unlist(l);
		return;
	}
	err = cm_channel_ensure(&ch) != 0 ? EIO : listen_on(l, ch);
	if (!err) {
		sdp_info("port %u listens for RDMA channels again", l->port);
		relisten_unlist(l); /* the last reference may go: l is not used after */
		return;
	}
	sdp_debug("port %u: no RDMA listener yet: %s", l->port, strerror(err));
	l->relisten_ms = l->relisten_ms * 2 < RELISTEN_MAX_MS ? l->relisten_ms * 2 : RELISTEN_MAX_MS;
	progress_timer_arm(&l->relisten, progress_now_ms() + l->relisten_ms);
}

static void drop_id_on_progress(void *arg)
{
	struct sdp_listener *l = arg;

	if (!l->closing && l->id) {
		VERBS_CTL_ENTER();
		rdma_destroy_id(l->id);
		VERBS_CTL_LEAVE();
		l->id = NULL;
		sdp_warn("port %u: the RDMA device went; new connections use TCP until it is back", l->port);
		l->relisten.fn = relisten_fired;
		l->relisten.arg = l;
		l->relisten_ms = RELISTEN_FIRST_MS;
		progress_timer_arm(&l->relisten, progress_now_ms() + l->relisten_ms);
		relisten_list(l);
	}
	listener_put(l);
}

/* The event is acked before the id can be destroyed: later, on the queue. */
static void listener_lost_device(struct sdp_listener *l)
{
	listener_hold(l);
	if (progress_defer(drop_id_on_progress, l) != 0) {
		sdp_error("port %u: cannot queue the release of a removed device's listener", l->port);
		listener_put(l);
	}
}

static void pending_unlink_locked(struct sdp_listener *l, struct sdp_conn *c)
{
	for (struct sdp_conn **pp = &l->pending; *pp; pp = &(*pp)->pend_next) {
		if (*pp == c) {
			*pp = c->pend_next;
			c->pend_next = NULL;
			l->pending_count--;
			pending_budget_give(c);
			return;
		}
	}
}

static void destroy_listener_on_progress(void *arg)
{
	struct sdp_listener *l = arg;
	struct sdp_conn *c;

	pthread_mutex_lock(&l->lock);
	while ((c = l->pending) != NULL) {
		pending_unlink_locked(l, c);
		pthread_mutex_unlock(&l->lock);
		conn_lock(c);
		c->lsn = NULL;
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		conn_unlock(c);
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	progress_timer_cancel(&l->relisten);
	relisten_unlist(l);
	VERBS_CTL_ENTER();
	if (l->id)
		rdma_destroy_id(l->id);
	l->id = NULL;
	VERBS_CTL_LEAVE();
	listener_put(l);
}

void listener_close(struct sdp_listener *l)
{
	pthread_mutex_lock(&l->lock);
	l->closing = true;
	pthread_mutex_unlock(&l->lock);
	if (progress_defer(destroy_listener_on_progress, l) != 0)
		sdp_error("cannot queue listener teardown: out of memory");
}

static void reject(struct rdma_cm_id *id, uint8_t code)
{
	struct sdp_reject_wire rej;

	sdp_reject_to_wire(code, &rej);
	VERBS_CTL_ENTER();
	rdma_reject(id, &rej, sizeof(rej));
	VERBS_CTL_LEAVE();
}

static void destroy_id_on_progress(void *id)
{
	VERBS_CTL_ENTER();
	rdma_destroy_id(id);
	VERBS_CTL_LEAVE();
}

/* Rejects a connect request that has no channel; the id is destroyed after
 * this event is acked (rdma_cm requires that order). */
void cm_reject_request(struct rdma_cm_id *id, uint8_t code)
{
	reject(id, code);
	progress_defer(destroy_id_on_progress, id);
}

static bool same_addr(const uint8_t a[16], const struct sockaddr *sa)
{
	uint8_t b[16];
	uint16_t port;

	sockaddr_to_tuple_addr(sa, b, &port);
	return memcmp(a, b, 16) == 0;
}

/* A Hello is acceptable if it parses and names this listener's port and
 * the address the RDMA connection really comes from. */
static uint8_t check_hello(struct sdp_listener *l, struct rdma_cm_event *ev, struct sdp_hello *h)
{
	enum sdp_wire_error werr = sdp_hello_from_wire(ev->param.conn.private_data,
						       ev->param.conn.private_data_len, h);

	if (werr != SDP_WIRE_OK) {
		sdp_warn_limited("rejecting an RDMA connect: Hello %s", sdp_wire_error_text(werr));
		return werr == SDP_WIRE_BAD_VERSION ? SDP_REJECT_VERSION : SDP_REJECT_MALFORMED;
	}
	if (h->tuple.dst_port != l->port || !same_addr(h->tuple.src_addr, rdma_get_peer_addr(ev->id))) {
		sdp_warn_limited("rejecting an RDMA connect: Hello names a TCP tuple this listener "
			 "does not serve");
		return SDP_REJECT_TUPLE;
	}
	return 0;
}

/* A server channel for the tuple, counted in the pending budget, with its
 * nonce; NULL if there is no memory, no budget left or no random source. */
static struct sdp_conn *pending_channel_new(struct sdp_listener *l, const struct sdp_tuple *t,
					   bool on_link)
{
	struct sdp_conn *c = conn_alloc(true, &l->policy);

	if (!c)
		return NULL;
	c->tuple = *t;
	c->budget_stream = on_link;
	if (!pending_budget_take(c)) {
		static atomic_bool warned;
		/* Once per process as a warning: a flood must not flood the log. */
		sdp_log_at(atomic_exchange(&warned, true) ? SDP_LOG_INFO : SDP_LOG_WARN,
			"refusing an RDMA channel for port %u: the pending budget is spent "
			"(%s); that client uses TCP", l->port, on_link ? "SDPSHIM_PENDING_STREAMS_MAX"
			: "SDPSHIM_PENDING_MAX/SDPSHIM_PENDING_PER_SOURCE");
		conn_put(c);
		return NULL;
	}
	if (!bind_make_nonce(c->nonce_local)) {
		pending_budget_give(c);
		conn_put(c);
		return NULL;
	}
	return c;
}

/* Into the listener's pending table, until accept() claims it or its TTL. */
static void pending_insert(struct sdp_listener *l, struct sdp_conn *c)
{
	pthread_mutex_lock(&l->lock);
	atomic_fetch_add(&l->refs, 1);
	c->lsn = l;
	c->pend_next = l->pending;
	l->pending = c;
	l->pending_count++;
	pthread_mutex_unlock(&l->lock);
	c->pending_deadline_ms = progress_deadline_ms(sdp_tun.pending_ttl_ms);
	c->pending_check_ms = PENDING_FIRST_CHECK_MS;
	conn_arm_timer(c, PENDING_FIRST_CHECK_MS);
}

/* Sizes nothing from the Hello: our receive buffers are our policy, and
 * the send slots, capped at our own geometry, wait for accept(). */
static void accept_channel(struct sdp_listener *l, struct rdma_cm_event *ev,
			   const struct sdp_hello *h)
{
	enum sdp_reason reason = SDP_REASON_RESOURCES;
	struct sdp_hello_ack_wire ack_wire;
	struct sdp_hello_ack ack;
	struct rdma_conn_param param;
	struct sdp_conn *c = pending_channel_new(l, &h->tuple, false);

	if (!c) {
		cm_reject_request(ev->id, SDP_REJECT_RESOURCES);
		return;
	}
	c->cm_id = ev->id;
	ev->id->context = c;
	c->peer_buf_size = h->buf_size; /* checked by the decoder; used at accept() */
	c->peer_buf_count = h->buf_count;
	c->tx_peer_bufs = h->buf_count; /* credits for control messages (DETACH) meanwhile */
	if (conn_setup_qp(c, ev->id, 0, 0, &reason) != 0) {
		reject(ev->id, SDP_REJECT_RESOURCES); /* the teardown destroys QP and id */
		pending_budget_give(c);
		conn_lock(c);
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		conn_unlock(c);
		return;
	}
	conn_post_all_recvs(c);
	ack = (struct sdp_hello_ack){ .version = SDP_WIRE_VERSION, .buf_count = c->buf_count,
				      .buf_size = c->buf_size };
	memcpy(ack.nonce, c->nonce_local, SDP_NONCE_SIZE);
	sdp_hello_ack_to_wire(&ack, &ack_wire);
	cm_conn_param(&param, &ack_wire, sizeof(ack_wire));
	pending_insert(l, c);
	cm_apply_ack_timeout(ev->id);
	VERBS_CTL_ENTER();
	int rc = qp_accept(c->dev, ev->id, c->qp, &param);
	VERBS_CTL_LEAVE();
	if (rc != 0)
		sdp_warn("rdma_accept failed: %s", strerror(errno)); /* the peer times out: TCP */
	else
		sdp_debug("accepted an RDMA channel for port %u (%u pending)", l->port, l->pending_count);
}

static bool listener_full(struct sdp_listener *l)
{
	bool full;

	pthread_mutex_lock(&l->lock);
	full = l->closing || l->pending_count >= l->pending_max;
	pthread_mutex_unlock(&l->lock);
	return full;
}

static bool client_allowed(struct sdp_listener *l, const uint8_t src_addr[16])
{
	if (sdp_nets_match(l->policy.client_nets, l->policy.client_net_count, src_addr))
		return true;
	sdp_info("refusing an RDMA channel for port %u: the client's network is not in the "
		 "rule's clients= list; it uses TCP", l->port);
	return false;
}

void cm_listener_event(struct sdp_listener *l, struct rdma_cm_event *ev)
{
	struct sdp_hello h;
	uint8_t code;

	if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && ev->id == l->id)
		listener_lost_device(l);
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		return;
	if (listener_full(l)) {
		cm_reject_request(ev->id, SDP_REJECT_RESOURCES);
		return;
	}
	code = check_hello(l, ev, &h);
	if (code) {
		cm_reject_request(ev->id, code);
		return;
	}
	if (!client_allowed(l, h.tuple.src_addr)) {
		cm_reject_request(ev->id, SDP_REJECT_RULE);
		return;
	}
	if (h.flags & SDP_HELLO_FLAG_LINK)
		link_server_accept(l, ev, &h);
	else
		accept_channel(l, ev, &h);
}

/* An OPEN on a link: the checks a Hello gets (the tuple names this
 * listener's port and the link's own peer address), then a pending
 * channel that answers with its nonce. */
void cm_server_open_stream(struct sdp_listener *l, struct sdp_link *link, uint16_t idx,
			   const struct sdp_open *o, const struct sockaddr *peer,
			   const uint8_t *client_nonce)
{
	struct sdp_conn *c;
	int err;

	if (l && l->rendezvous) {
		link_answer_open(link, idx, NULL, SDP_REJECT_TUPLE); /* no TCP listener here */
		return;
	}
	if (!l || listener_full(l)) {
		link_answer_open(link, idx, NULL, SDP_REJECT_RESOURCES);
		return;
	}
	if (o->tuple.dst_port != l->port || !same_addr(o->tuple.src_addr, peer)) {
		sdp_warn_limited("refusing a stream: its OPEN names a TCP tuple this listener does not serve");
		link_answer_open(link, idx, NULL, SDP_REJECT_TUPLE);
		return;
	}
	if (!client_allowed(l, o->tuple.src_addr)) {
		link_answer_open(link, idx, NULL, SDP_REJECT_RULE);
		return;
	}
	c = pending_channel_new(l, &o->tuple, true);
	if (!c) {
		link_answer_open(link, idx, NULL, SDP_REJECT_RESOURCES);
		return;
	}
	climb_note_peer_rdv(c, peer, o->rdv_port);
	c->peer_buf_size = o->buf_size; /* checked by the decoder, capped by the link */
	c->peer_buf_count = o->buf_count;
	c->tx_peer_bufs = o->buf_count;
	err = link_stream_setup(c, link, idx);
	if (err) {
		if (err == -EBUSY)
			sdp_warn_limited("refusing a stream: its index is still in use on the link");
		pending_budget_give(c);
		conn_lock(c);
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		conn_unlock(c);
		if (err != -EBUSY)
			link_answer_open(link, idx, NULL, SDP_REJECT_RESOURCES);
		return;
	}
	c->established = true; /* the link is */
	if (client_nonce) { /* OPEN_COMMIT: the COMMIT came with it */
		c->committed = true;
		memcpy(c->nonce_peer, client_nonce, SDP_NONCE_SIZE);
	}
	conn_lock(c);
	pending_insert(l, c);
	link_answer_open(link, idx, c, 0);
	conn_unlock(c);
	sdp_debug("opened a %sstream on a link for port %u", client_nonce ? "committed " : "", l->port);
}

void conn_stream_lost(struct sdp_conn *c, enum sdp_reason unopened, const char *why)
{
	if (!c->carrier_why)
		c->carrier_why = why;
	if (c->is_server && c->phase == CONN_PENDING)
		pending_drop(c); /* out of the listener's table first */
	else if (!c->is_server && client_stream_awaits_answer(c))
		conn_fallback(c, unopened);
	else
		close_ev_carrier_failed(c, ECONNRESET, why);
}

/* Takes c out of its listener's pending table; true if it was there. */
static bool pending_take(struct sdp_conn *c)
{
	struct sdp_listener *l = c->lsn;
	bool found = false;

	if (!l)
		return false;
	pthread_mutex_lock(&l->lock);
	for (struct sdp_conn *p = l->pending; p; p = p->pend_next)
		found |= p == c;
	if (found)
		pending_unlink_locked(l, c);
	pthread_mutex_unlock(&l->lock);
	if (found) {
		c->lsn = NULL;
		listener_put(l);
	}
	return found;
}

void pending_drop(struct sdp_conn *c)
{
	pending_take(c);
	conn_set_phase(c, CONN_DEAD);
	conn_schedule_destroy(c);
}

/* The channel is the accepted socket's from now on; the client learns it
 * from the ATTACH, and until that completes the stream stays where it is. */
void queue_attach(struct sdp_conn *c)
{
	c->attach_unconfirmed = true;
	c->attach_posted = false;
	if (sdp_tun.debug_attach_delay_ms) {
		conn_arm_timer(c, sdp_tun.debug_attach_delay_ms);
		c->attach_held = true; /* tests: widen the window a fork can hit */
		return;
	}
	tx_queue_ctrl(c, SDP_MID_ATTACH);
}

void cm_server_conn_event(struct sdp_conn *c, struct rdma_cm_event *ev)
{
	conn_lock(c);
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		c->established = true;
		if (c->phase == CONN_ATTACHING && c->bind == BIND_PROVEN)
			bind_server_open(c);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		if (c->phase == CONN_PENDING) {
			pending_drop(c);
		} else {
			close_ev_carrier_failed(c, ECONNRESET, rdma_event_str(ev->event));
		}
		break;
	default:
		break;
	}
	conn_unlock(c);
}

#define DETACH_GRACE_MS 5000

/* Sends DETACH: the channel will never be attached, the client uses TCP. */
static void pending_detach(struct sdp_conn *c, const char *why)
{
	if (!pending_take(c))
		return; /* the DISCONNECTED path took it */
	c->pending_detached = true;
	sdp_info("%s; telling the client to use TCP", why);
	c->detach_reason = SDP_REASON_ACCEPTED_ELSEWHERE;
	tx_queue_ctrl(c, SDP_MID_DETACH);
	tx_kick(c);
	conn_arm_timer(c, DETACH_GRACE_MS); /* the client's disconnect usually comes first */
}

/* Milliseconds to the next look at a pending channel's TCP connection. */
static unsigned pending_next_check(struct sdp_conn *c, enum tcp_accept_state st, uint64_t ttl_left)
{
	if (st == TCP_STATE_UNKNOWN)
		return (unsigned)ttl_left; /* no sock_diag: only the TTL is left */
	if (st == TCP_ACCEPTED)
		c->pending_check_ms = ACCEPTED_ELSEWHERE_MS; /* confirm it then */
	else if (c->pending_check_ms < PENDING_MAX_CHECK_MS)
		c->pending_check_ms *= 2;
	return c->pending_check_ms < ttl_left ? c->pending_check_ms : (unsigned)ttl_left;
}

/* Seen accepted since c->pending_accepted_ms, by the socket of inode: by
 * another process once that lasted ACCEPTED_ELSEWHERE_MS.  This process's
 * own accept() on its way to attaching (a thread the scheduler or an
 * emulator holds back, or one waiting for a link's completions) holds
 * the socket itself: it gets OWN_ACCEPT_GRACE_MS, after which an app that
 * took the socket without accept() (a raw system call) is given up on. */
static bool accepted_elsewhere(const struct sdp_conn *c, uint64_t now, uint32_t inode)
{
	uint64_t seen = now - c->pending_accepted_ms;

	if (seen < ACCEPTED_ELSEWHERE_MS)
		return false;
	return seen >= OWN_ACCEPT_GRACE_MS || !tcp_diag_socket_is_ours(inode);
}

/* The pending timer: the TTL, and meanwhile (with a growing interval) the
 * question whether another process, such as a pre-fork server's worker that
 * inherited the listening socket, accepted the TCP connection: its client
 * would otherwise wait the whole TTL for an ATTACH. */
void pending_on_timer(struct sdp_conn *c)
{
	uint64_t now = progress_now_ms();
	enum tcp_accept_state st;
	uint32_t inode = 0;

	if (c->pending_detached) {
		/* DETACH went out a grace period ago; the client never hung up. */
		conn_set_phase(c, CONN_DEAD);
		conn_schedule_destroy(c);
		return;
	}
	if (!c->lsn || now >= c->pending_deadline_ms) {
		pending_detach(c, "an RDMA channel was never matched by accept()");
		return;
	}
	st = tcp_diag_accept_state(&c->tuple, &inode);
	if (st != TCP_ACCEPTED) {
		c->pending_accepted_ms = 0;
	} else if (!c->pending_accepted_ms) {
		c->pending_accepted_ms = now;
	} else if (accepted_elsewhere(c, now, inode)) {
		pending_detach(c, "another process accepted the TCP connection of an RDMA channel");
		return;
	}
	conn_arm_timer(c, pending_next_check(c, st, c->pending_deadline_ms - now));
}

static void tuple_of_accepted(const struct sockaddr *local, const struct sockaddr *peer,
			      struct sdp_tuple *t)
{
	sockaddr_to_tuple_addr(peer, t->src_addr, &t->src_port);
	sockaddr_to_tuple_addr(local, t->dst_addr, &t->dst_port);
}

static bool tuple_equal(const struct sdp_tuple *a, const struct sdp_tuple *b)
{
	return a->src_port == b->src_port && a->dst_port == b->dst_port &&
	       memcmp(a->src_addr, b->src_addr, 16) == 0 && memcmp(a->dst_addr, b->dst_addr, 16) == 0;
}

/* The newest channel that names this tuple, committed ones first (an
 * uncommitted one may be an attempt its client gave up).  Unlinked, with
 * the owner's reference.  Several can exist only if someone forged a Hello
 * for the tuple: the client's PROOF then decides, and a wrong pick costs
 * the client RDMA, never its bytes. */
static struct sdp_conn *take_candidate(struct sdp_listener *l, const struct sdp_tuple *t)
{
	struct sdp_conn *best = NULL;

	pthread_mutex_lock(&l->lock);
	for (struct sdp_conn *c = l->pending; c; c = c->pend_next)
		if (tuple_equal(&c->tuple, t) && (!best || (c->committed && !best->committed)))
			best = c;
	if (best) {
		pending_unlink_locked(l, best);
		conn_get(best);
	}
	pthread_mutex_unlock(&l->lock);
	return best;
}

static bool pending_names(struct sdp_listener *l, const struct sdp_tuple *t)
{
	bool found = false;

	pthread_mutex_lock(&l->lock);
	for (struct sdp_conn *c = l->pending; c && !found; c = c->pend_next)
		found = tuple_equal(&c->tuple, t);
	pthread_mutex_unlock(&l->lock);
	return found;
}

void conn_accept_prepare(struct sdp_listener *l, const struct sockaddr *local,
			 const struct sockaddr *peer)
{
	struct sdp_tuple t;

	tuple_of_accepted(local, peer, &t);
	if (!pending_names(l, &t))
		link_reap_listener(l);
}

/* The send slots, sized now that a socket claims the channel. */
static bool setup_send_side(struct sdp_conn *c)
{
	int err = conn_setup_tx(c, c->peer_buf_size, c->peer_buf_count);

	if (err)
		conn_warn_setup_error(err, "an RDMA channel's send buffers (the connection uses TCP)");
	return err == 0;
}

struct sdp_conn *conn_attach_accepted(struct sdp_listener *l, int fd, const struct sockaddr *local,
				      const struct sockaddr *peer, void *owner,
				      const struct conn_owner_ops *ops, struct sdp_conn_stats *st)
{
	struct sdp_tuple t;
	struct sdp_conn *c;

	tuple_of_accepted(local, peer, &t);
	c = take_candidate(l, &t);
	if (!c)
		return NULL;
	conn_lock(c);
	c->lsn = NULL;
	listener_put(l);
	if (c->phase != CONN_PENDING) {
		/* Dropped after take_candidate() took it out of the table (the
		 * client's disconnect or RELEASED: pending_drop() found it gone and
		 * queued its teardown).  Attaching a dead channel reset the TCP
		 * connection; the connection is plain TCP's instead. */
		conn_unlock(c);
		conn_put(c);
		return NULL;
	}
	progress_timer_cancel(&c->timer);
	c->tcp_fd = progress_dup_hidden(fd);
	if (c->carrier_dead || c->peer_gave_up || c->tcp_fd < 0 || !setup_send_side(c)) {
		conn_set_phase(c, CONN_DEAD);
		c->detach_reason = SDP_REASON_RESOURCES;
		if (!c->carrier_dead)
			tx_queue_ctrl(c, SDP_MID_DETACH);
		tx_kick(c);
		conn_schedule_destroy(c);
		conn_unlock(c);
		conn_put(c);
		return NULL;
	}
	c->owner = owner;
	c->owner_ops = ops;
	c->st = st;
	if (c->st)
		atomic_store(&c->st->rx_posted, c->buf_count);
	conn_set_phase(c, CONN_ATTACHING);
	bind_server_begin(c); /* accept() returns now; the handshake goes on */
	conn_update_readiness(c, false);
	conn_unlock(c);
	return c;
}

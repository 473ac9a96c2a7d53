/* State shared by the files of the connection model (tests/model/):
 * one model per process, in the global `zcm`.  See zcmodel.h. */
#ifndef SDPSHIM_TESTS_ZCM_INTERNAL_H
#define SDPSHIM_TESTS_ZCM_INTERNAL_H

#include <pthread.h>
#include <setjmp.h>

#include "core/conn_internal.h"
#include "core/dev.h"
#include "core/mrcache.h"
#include "zcmodel.h"

#define ZCM_SQ_MAX    512
#define ZCM_RQ_MAX    64
#define ZCM_CQ_MAX    1024
#define ZCM_OUT_MAX   64
#define ZCM_PWIN_MAX  32
#define ZCM_PSRC_MAX  8
#define ZCM_KEYS_MAX  64
#define ZCM_TIMERS    8
#define ZCM_DEFER_MAX 16
#define ZCM_ABANDONED ((ssize_t)-999999)

/* One work request on our send queue. */
struct zcm_swr {
	uint64_t wr_id;
	int opcode;              /* enum ibv_wr_opcode */
	uint64_t laddr;
	uint32_t llen, lkey;
	bool has_sge;
	uint8_t *inline_copy;    /* an inline SEND's bytes, copied at post */
	uint8_t mid;             /* a SEND's message id, read at post */
	uint64_t raddr;
	uint32_t rkey, imm_be;
	struct ibv_mw *mw;       /* BIND_MW */
	uint32_t bind_rkey;
	uint64_t bind_addr, bind_len;
	unsigned bind_access;
	struct ibv_mr *bind_mr;
	uint32_t inv_rkey;       /* LOCAL_INV */
	bool executed;
	enum ibv_wc_status status;
	uint32_t byte_len;
};

struct zcm_rwr {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t len, lkey;
};

struct zcm_cqe {
	struct ibv_wc wc;
	uint8_t mid;             /* a receive's message id (0: not a message) */
	uint64_t end_off;        /* our stream offset at most, once the core took it (0: none) */
};

/* A memory region of ours (an app buffer, the staging buffer, channel
 * buffers).  Dropped when its memory is freed. */
struct zcm_mr {
	struct ibv_mr mr;
	uintptr_t start, end;
	unsigned access;
	bool live;
	void *owned;             /* memory allocated for it (dev_alloc_registered) */
	struct mrc_entry *mre;   /* the cache entry it backs, if any */
	struct zcm_mr *next;
};

/* One of our memory windows. */
struct zcm_mw {
	struct ibv_mw mw;
	bool allocated, bound;
	uint64_t addr, len;
	unsigned access;
	uint32_t rkey;
	struct zcm_mr *mr;
};
#define ZCM_MW_MAX 8

/* A window of the peer over its own memory. */
struct zcm_pwin {
	bool valid;
	uint32_t rkey;
	uint64_t addr;           /* a fake remote address */
	uint32_t len;
	unsigned access;
	uint8_t *mem;
	uint32_t read_bytes;     /* READ by us (successfully) */
	uint32_t written;        /* bytes we wrote into it (sink) */
};

/* One of the peer's SrcAvails (its stream to us). */
struct zcm_psrc {
	uint64_t off;
	uint32_t len;
	int win;
	bool cancelled;
};

/* A peer operation waiting for the wire (RC order; receives for SENDs). */
struct zcm_pop {
	enum { POP_SEND, POP_WRITE, POP_WRITE_IMM } kind;
	uint8_t *data;
	uint32_t len;
	uint8_t mid;
	uint32_t rkey, imm;
	uint64_t addr;
	uint64_t end_off;        /* wire_off after it (0: adds no bytes) */
};

struct zcm_peer {
	uint32_t seq;            /* its last message sequence */
	uint32_t rx_seq;         /* our last sequence it received */
	uint32_t ack_sent;       /* the ack it last sent us */
	uint32_t our_ack;        /* our latest ack of its messages */
	bool auto_honest;
	bool dead;
	/* its stream to us */
	uint64_t tx_off;         /* next byte's offset (bytes placed or offered and kept) */
	bool tx_ambiguous;       /* it broke the protocol so its positions are unknown */
	/* The furthest our side's stream can be once it took everything queued
	 * so far: each outstanding SrcAvail counted whole, each claim taken at
	 * its word.  Unlike tx_off (which learns a SrcAvail's bytes only from
	 * our RdmaRdCompl, and forgets bytes queued behind it), it never lags
	 * what was queued, lies or not: the tags (end_off) that say how far the
	 * core's stream may have got before a reset. */
	uint64_t wire_off;
	struct zcm_psrc src[ZCM_PSRC_MAX];
	int nsrc;
	int raw_srcs;            /* SrcAvails it made up (zcm_peer_raw) not answered yet */
	uint32_t last_src_read;
	bool sent_disconn;
	uint64_t disconn_off;
	/* our sink (for its stream) */
	bool sink_valid, sink_answered;
	uint64_t sink_off, sink_addr;
	uint32_t sink_len, sink_rkey;
	bool sink_cancelled;
	/* our stream */
	uint64_t rx_off;
	bool rx_ambiguous;
	bool osrc_valid, osrc_cancelled, osrc_answered;
	uint64_t osrc_off, osrc_addr;
	uint32_t osrc_len, osrc_rkey, osrc_read;
	bool psink_active;       /* its sink for our stream */
	uint64_t psink_off;
	int psink_win;
	bool starving_seen;      /* our last message asked for an ack */
	/* every window key of ours it saw */
	uint32_t keys[ZCM_KEYS_MAX];
	uint64_t key_addr[ZCM_KEYS_MAX];
	uint32_t key_len[ZCM_KEYS_MAX];
	int nkeys;
	/* what it received */
	int count[32];
	struct zcm_msg last[32];
	int total_msgs;
	bool got_abort;
	struct zcm_pop out[ZCM_OUT_MAX];
	int nout;
	struct zcm_pwin win[ZCM_PWIN_MAX];
	int nwin;
};

enum zcm_park { PARK_NONE, PARK_POLL, PARK_COND, PARK_SLEEP };
enum zcm_wake { WAKE_READY, WAKE_TIMEOUT, WAKE_SIGNAL };

struct zcm_app {
	pthread_t th;
	bool running, done, abandon, hold, broken;
	struct zcm_call call;
	uint8_t *buf;            /* the call's buffer (kept until the next call) */
	size_t buf_len;
	ssize_t result;
	uint64_t start_us;
	enum zcm_park park;
	uint64_t park_deadline_us;  /* UINT64_MAX: none */
	int park_fd;
	unsigned park_gen;
	enum zcm_wake wake;
	jmp_buf jb;
	uint64_t rx_off, tx_off;
	bool error_reported;
	bool eof_seen;
};

struct zcm_state {
	struct zcm_opts opts;
	bool open;
	struct sdp_conn *c;
	uint64_t now_us;
	/* verbs */
	struct ibv_context ctx;
	struct ibv_pd pd;
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_comp_channel cc;
	struct sdp_dev dev;
	bool qp_err;
	struct zcm_swr sq[ZCM_SQ_MAX];
	uint32_t sq_head, sq_tail;        /* [tail, head) not completed */
	struct zcm_rwr rq[ZCM_RQ_MAX];
	uint32_t rq_head, rq_tail;
	struct zcm_cqe cqes[ZCM_CQ_MAX];
	uint32_t cq_head, cq_tail;
	struct zcm_mr *mrs;
	uint32_t next_key;
	struct zcm_mw mws[ZCM_MW_MAX];
	/* the connection's state as the model knows it */
	bool abort_known;
	bool fin_before_reset;            /* the peer's DisConn was taken in first */
	uint64_t abort_limit;             /* the peer's stream the core took in by then */
	uint64_t taken_off, taken_before; /* ... after the last completion it polled, before it */
	int binds_after_abort, binds_posted;
	bool pin_budget_spent;            /* zcm_pin_budget_spent() */
	/* progress thread */
	struct progress_timer *timers[ZCM_TIMERS];
	struct { void (*fn)(void *); void *arg; } deferred[ZCM_DEFER_MAX];
	int ndeferred;
	unsigned cond_gen;
	/* baton */
	pthread_mutex_t bm;
	pthread_cond_t bc;
	int turn;                         /* 0 driver, 1 app */
	struct zcm_app app;
	struct zcm_peer peer;
	/* findings */
	char findings[8192];
	size_t findings_len;
	int nfindings;
};

extern struct zcm_state zcm;

/* zcm_verbs.c */
void zcm_verbs_init(void);
void zcm_verbs_free(void);
struct zcm_mr *zcm_mr_add(uintptr_t start, uintptr_t end, unsigned access, void *owned);
void zcm_mr_drop_range(uintptr_t start, uintptr_t end);
struct zcm_mr *zcm_mr_by_lkey(uint32_t lkey);
void zcm_cq_push(const struct ibv_wc *wc, uint8_t mid, uint64_t end_off);
uint32_t zcm_cq_count(void);
bool zcm_rq_take(struct zcm_rwr *out);
void zcm_qp_to_error(enum ibv_wc_status first_status);
/* A remote access to our windows: true if it succeeded (data copied;
 * data NULL: the access is only tried). */
bool zcm_remote_access(uint32_t rkey, uint64_t addr, uint32_t len, bool write, uint8_t *data);
bool zcm_window_exposed(const struct zcm_mw *w);

/* The connection is known to be reset (an ABORT either way, or the
 * carrier failed with the peer's TCP reset): later bytes are not the app's.
 * by_last: the completion the core is handling caused it (its bytes do not
 * count as taken in). */
void zcm_note_abort(bool by_last);

/* zcm_peer.c */
void zcm_peer_init(void);
void zcm_peer_free(void);
void zcm_peer_on_send(const uint8_t *msg, uint32_t len);
void zcm_peer_on_write(uint64_t raddr, uint32_t rkey, const uint8_t *data, uint32_t len,
		       bool imm, uint32_t imm_be, enum ibv_wc_status *st);
enum ibv_wc_status zcm_peer_on_read(uint64_t raddr, uint32_t rkey, uint8_t *dst, uint32_t len);
bool zcm_peer_pump(void);
bool zcm_peer_auto_step(void);
void zcm_peer_note_key(uint32_t rkey, uint64_t addr, uint32_t len);

/* zcm_app.c */
void zcm_app_init(void);
void zcm_app_free(void);
bool zcm_app_parked(void);
/* Resumes the parked app if its wait is satisfied now; true if it ran. */
bool zcm_app_try_wake(void);
/* The app's wait deadline (a timeout or a signal), or UINT64_MAX. */
uint64_t zcm_app_deadline_us(void);
void zcm_app_expire(void);
void zcm_app_abandon(void);
enum zcm_wake zcm_park(enum zcm_park kind, uint64_t deadline_us, int fd);
extern __thread bool zcm_on_app_thread;
void zcm_check_idle_invariants(const char *when);

/* zcm_stubs.c */
void zcm_stubs_init(void);
uint64_t zcm_next_timer_us(void);
bool zcm_fire_timers(void);
bool zcm_run_deferred(void);
int zcm_real_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int zcm_real_cond_broadcast(pthread_cond_t *c);
/* True if the connection lock is free (the driver may act). */
bool zcm_lock_free(void);

/* zcmodel.c */
void zcm_progress(void);

#endif

/* Private to the zero-copy files (zcopy.c, zc_window.c, zc_read.c,
 * zc_write.c): their limits, their counters and the helpers they share.
 * All functions are called with the conn lock held, as core/zcopy.h's. */
#ifndef SDPSHIM_ZC_INTERNAL_H
#define SDPSHIM_ZC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/conn_internal.h"
#include "core/wire.h"

#define MAX_ZC_LEN      (1u << 30)      /* one SrcAvail moves at most 1 GiB */
/* One direct READ, and one sink, move at most this much: a transfer then
 * takes well under SDPSHIM_ZCOPY_ANSWER_MS even on a slow link, so the
 * bound on waiting for the peer never cuts an honest transfer short. */
#define MAX_ZC_STEP     (8u << 20)

/* Counters live in the socket's stats slot; a closed socket has none. */
#define COUNT(c, field, n)                                                                  \
	do {                                                                                \
		if ((c)->st)                                                                \
			atomic_fetch_add_explicit(&(c)->st->field, (uint64_t)(n),           \
						  memory_order_relaxed);                    \
	} while (0)

struct mrc_entry;

/* zcopy.c: what every part uses. */
void zc_count_cache(struct sdp_conn *c, bool hit);
/* Aborts the connection for a zero-copy protocol violation (logged). */
void zc_violation(struct sdp_conn *c, const char *what);
int zc_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr);
/* No window is bound or offered on a reset channel or one without carrier. */
bool zc_channel_sound(const struct sdp_conn *c);
/* An app thread leaves a zero-copy operation (a switch may wait for it). */
void zc_leave(struct sdp_conn *c);

/* zc_window.c: the memory windows. */
bool zc_mw_ready(struct sdp_conn *c, struct zc_window *w);
int zc_mw_bind(struct sdp_conn *c, struct zc_window *w, struct mrc_entry *mre, uint64_t addr,
	       uint32_t len, int access);
/* Registers [buf, +n) and binds w over it with access (remote read or
 * write): 0 with *mre held; 1 if the buffer cannot be registered (buffer
 * copy instead, and also when the bind failed and the stream moved to TCP:
 * its bytes go there); -ECONNRESET if the bind failed and the stream could
 * not move (the carrier is given up). */
int zc_expose(struct sdp_conn *c, struct zc_window *w, const void *buf, uint32_t n, int access,
	      struct mrc_entry **mre);
/* Invalidates the window and waits until that is done (or fails the QP). */
void zc_mw_close(struct sdp_conn *c, struct zc_window *w);
/* Waits, ignoring signals, at most SDPSHIM_ZCOPY_ANSWER_MS for pred. */
void zc_wait_answer(struct sdp_conn *c, bool (*pred)(struct sdp_conn *), const char *what);

/* zc_read.c: read zero-copy. */
ssize_t zc_send_as_source(struct sdp_conn *c, const void *buf, size_t len, int timeout_ms,
			  uint64_t start_us);
bool zc_on_src_avail(struct sdp_conn *c, const struct sdp_ext *x, struct rx_entry *e);
bool zc_on_rd_compl(struct sdp_conn *c, const struct sdp_ext *x);
bool zc_on_src_cancel(struct sdp_conn *c, const struct sdp_ext *x);
void zc_read_completed(struct sdp_conn *c, bool ok);

/* zc_write.c: write zero-copy. */
/* Does the peer wait with a sink at our offset that a send of len fills? */
bool zc_sink_usable(struct sdp_conn *c, size_t len);
ssize_t zc_send_into_sink(struct sdp_conn *c, const void *buf);
bool zc_on_sink_avail(struct sdp_conn *c, const struct sdp_ext *x);
bool zc_on_sink_cancel(struct sdp_conn *c, const struct sdp_ext *x);
bool zc_on_sink_cancel_ack(struct sdp_conn *c, const struct sdp_ext *x);

#endif

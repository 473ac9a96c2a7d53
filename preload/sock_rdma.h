/* Binding a tracked socket to an RDMA channel and back: the owner
 * callbacks the channel raises, and the mode switches they cause. */
#ifndef SDPSHIM_SOCK_RDMA_H
#define SDPSHIM_SOCK_RDMA_H

#include "core/conn.h"
#include "preload/sock.h"

extern const struct conn_owner_ops sock_conn_ops;

/* s takes c (and the caller's reference to it): mode RDMA, readiness moves
 * to the channel.  Called with s->lock held. */
void sock_adopt_conn(struct sdp_sock *s, struct sdp_conn *c);
/* If c fell back, s is on kernel TCP, with the fallback's reason, when this
 * returns: the progress thread may still be delivering that news (the event
 * comes after the phase, from whichever thread raised it).  c: the caller's
 * reference to s's channel. */
void sock_settle_fallback(struct sdp_sock *s, struct sdp_conn *c);
/* At close: the path a channel reached (TCP after a fallback, RDMA once
 * open) whose event has not reached the socket yet. */
void sock_settle_path(struct sdp_sock *s, struct sdp_conn *c);
/* The channel of s, with a reference, or NULL if s is not RDMA-backed. */
struct sdp_conn *sock_conn_get(struct sdp_sock *s);

/* Before fork (every RDMA socket of this process) or exec (those without
 * FD_CLOEXEC): move each stream to plain TCP, so the other process image
 * inherits kernel sockets.  Bounded by SDPSHIM_SWITCH_TIMEOUT_MS. */
void sock_switch_all_to_tcp(bool only_inheritable);
/* The owner moves one stream to TCP (reason forked), waiting until
 * deadline_ms (progress_now_ms()); true if it is on kernel TCP now. */
bool sock_switch_one_to_tcp(struct sdp_sock *s, uint64_t deadline_ms);
/* s->lock held, s inherited on RDMA: its owner moved the stream to TCP,
 * and this process now uses the kernel socket (path tcp, reason forked),
 * never touching the owner's channel. */
void sock_take_over_on_tcp(struct sdp_sock *s);

#endif

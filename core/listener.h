/* The rdma_cm listener that shadows a listening TCP socket, and its table
 * of pending channels keyed by the TCP 4-tuple their Hello names. */
#ifndef SDPSHIM_LISTENER_H
#define SDPSHIM_LISTENER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "base/policy.h"
#include "base/reason.h"
#include "core/progress.h"

struct rdma_cm_id;
struct sdp_conn;

struct sdp_listener {
	int cm_kind;              /* CM_KIND_LISTENER: first, for rdma_cm id contexts */
	pthread_mutex_t lock;     /* pending list */
	_Atomic int refs;
	struct rdma_cm_id *id;    /* NULL while its device is gone (progress thread) */
	struct sockaddr_storage local; /* what it listens on, to listen again */
	int backlog;
	struct progress_timer relisten; /* the next try once the device went */
	unsigned relisten_ms;
	struct sdp_listener *relisten_next; /* cm_server.c's list of those waiting */
	bool relisten_listed;
	struct sdp_conn *pending; /* channels waiting for accept() */
	unsigned pending_count, pending_max;
	uint16_t port;
	bool closing;
	bool rendezvous;          /* core/rendezvous.c's: links for CLIMB_REQs, no TCP listener */
	/* The path decision's, handed to each channel that arrives; its
	 * client_nets (rule option clients=) may open channels (none: any). */
	struct sdp_policy policy;
};

/* Starts listening with rdma_cm on the address and port of a listening TCP
 * socket.  NULL with *reason set when it cannot (no RDMA address there,
 * port taken in the RDMA port space...). */
struct sdp_listener *listener_create(const struct sockaddr *local, int backlog,
				     const struct sdp_policy *policy,
				     enum sdp_reason *reason);
/* The same without a word: NULL with *err (an errno from rdma_cm, or
 * -EIO with no rdma_cm channel, -ENOMEM).  A port of 0 listens on an
 * ephemeral port (core/rendezvous.c reads it). */
struct sdp_listener *listener_open(const struct sockaddr *local, int backlog,
				   const struct sdp_policy *policy, int *err);
/* A reference for a link that routes OPENs to the listener. */
void listener_hold(struct sdp_listener *l);
void listener_release(struct sdp_listener *l);
/* The TCP listener closed: stop accepting channels, drop the pending ones. */
void listener_close(struct sdp_listener *l);

#endif

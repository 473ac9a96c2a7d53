/* The rdma_cm listener that shadows a listening TCP socket, and its table
 * of pending channels keyed by the TCP 4-tuple their Hello names. */
#ifndef SDPSHIM_LISTENER_H
#define SDPSHIM_LISTENER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "ipoib_fallback/reason.h"
#include "ipoib_fallback/rules.h"

struct rdma_cm_id;
struct sdp_conn;

struct sdp_listener {
	int cm_kind;              /* CM_KIND_LISTENER: first, for rdma_cm id contexts */
	pthread_mutex_t lock;     /* pending list */
	_Atomic int refs;
	struct rdma_cm_id *id;
	struct sdp_conn *pending; /* channels waiting for accept() */
	unsigned pending_count, pending_max;
	uint16_t port;
	bool closing;
	/* Rule option clients=: the client networks that may open channels
	 * (none: any). */
	unsigned client_net_count;
	struct rule_net client_nets[RULE_CLIENT_NETS_MAX];
};

/* Starts listening with rdma_cm on the address and port of a listening TCP
 * socket.  NULL with *reason set when it cannot (no RDMA address there,
 * port taken in the RDMA port space...). */
struct sdp_listener *listener_create(const struct sockaddr *local, int backlog,
				     const struct rule_net *client_nets, unsigned client_net_count,
				     enum sdp_reason *reason);
/* The TCP listener closed: stop accepting channels, drop the pending ones. */
void listener_close(struct sdp_listener *l);

#endif

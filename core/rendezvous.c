/* The process's rendezvous port (docs/upgrade.md, "Fork"): one rdma_cm
 * listener on an ephemeral port of every address, named in each OPEN and
 * OPEN_ACK this process sends, where a forked child of the peer dials to
 * move a stream it took over back to RDMA.  Links accepted here carry
 * CLIMB_REQs only: an OPEN on one is refused (no TCP listener is behind
 * it).  Owns the per-process instance. */
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/sockaddr.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "core/listener.h"

static pthread_mutex_t rdv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_listener *rdv;
static bool rdv_failed;    /* tried once in this process: it stays without */

static struct sdp_listener *listen_any(int family)
{
	struct sockaddr_storage any;
	struct sdp_policy policy;
	int err = 0;

	memset(&any, 0, sizeof(any));
	any.ss_family = (sa_family_t)family;
	if (family == AF_INET6)
		((struct sockaddr_in6 *)&any)->sin6_addr = in6addr_any;
	policy_default(&policy);
	return listener_open((const struct sockaddr *)&any, 64, &policy, &err);
}

static void create_locked(void)
{
	struct sdp_listener *l = listen_any(AF_INET6);

	if (!l)
		l = listen_any(AF_INET);
	if (!l) {
		rdv_failed = true;
		sdp_debug("no rendezvous port: a forked child of a peer cannot bring a stream of this "
			  "process back to RDMA");
		return;
	}
	SDP_GUARD_ENTER();
	l->port = ntohs(rdma_get_src_port(l->id));
	SDP_GUARD_LEAVE();
	sockaddr_set_port(&l->local, l->port); /* a listen again keeps it */
	l->rendezvous = true;
	rdv = l;
	sdp_debug("rendezvous port %u", l->port);
}

uint16_t rdv_port_ensure(void)
{
	uint16_t port = 0;

	if (!sdp_tun.climb || !sdp_tun.climb_fork)
		return 0;
	pthread_mutex_lock(&rdv_lock);
	if (!rdv && !rdv_failed)
		create_locked();
	if (rdv)
		port = rdv->port;
	pthread_mutex_unlock(&rdv_lock);
	return port;
}

uint16_t rdv_port(void)
{
	uint16_t port = 0;

	pthread_mutex_lock(&rdv_lock);
	if (rdv)
		port = rdv->port;
	pthread_mutex_unlock(&rdv_lock);
	return port;
}

/* The parent's listener is its own (its id hangs off the parent's event
 * channel): the child makes its own when it needs one. */
void rdv_atfork_child(void)
{
	pthread_mutex_init(&rdv_lock, NULL);
	rdv = NULL;
	rdv_failed = false;
}

/* The choice of path for each connection: rules, SDPSHIM_MODE, loopback,
 * device presence, RLIMIT_MEMLOCK and the negative cache decide whether an
 * RDMA attempt is made, and record why not. */
#ifndef SDPSHIM_PATH_H
#define SDPSHIM_PATH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/policy.h"
#include "base/reason.h"
#include "ipoib_fallback/rules.h"

struct path_decision {
	bool try_rdma;              /* make the RDMA attempt */
	bool require_rdma;          /* rule "use rdma": no TCP fallback */
	bool negcached;             /* reason came from the negative cache */
	enum sdp_reason reason;     /* SDP_REASON_NONE when try_rdma */
	/* The matching rule's options over policy_default(); a server's
	 * client_nets are its rule's clients= (none when no rule matched). */
	struct sdp_policy policy;
};

/* Reads SDPSHIM_MODE and the rules file (SDPSHIM_CONFIG, else
 * /etc/sdpshim.conf).  Safe to call once per process image. */
void path_init(void);
/* Re-creates the negative cache after fork (its lock may be held). */
void path_atfork_child(void);

void path_decide_client(const struct sockaddr *dst, struct path_decision *out);
void path_decide_server(const struct sockaddr *local, struct path_decision *out);

/* Records a failed attempt so the next connect to dst skips detection,
 * until the entry expires (SDPSHIM_NEGCACHE_TTL_MS). */
void path_remember_failure(const struct sockaddr *dst, enum sdp_reason reason);

/* True if an RDMA device and the rdma_cm node exist (cached for 2 s). */
bool path_rdma_device_present(void);

bool sockaddr_is_loopback(const struct sockaddr *sa);
bool sockaddr_is_inet(const struct sockaddr *sa, socklen_t len);
const char *path_progname(void);

#endif

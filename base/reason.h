/* Path and fallback reason codes, in the style of SMC's decline codes.
 * Every connection records one reason; the names are stable (tests, the
 * stats file and operators script against them). */
#ifndef SDPSHIM_REASON_H
#define SDPSHIM_REASON_H

enum sdp_path {
	SDP_PATH_UNDECIDED = 0,
	SDP_PATH_TCP       = 1,
	SDP_PATH_RDMA      = 2,
};

/* X(enum suffix, stable name, one-line explanation) */
#define SDP_REASON_LIST(X)                                                        \
	X(NONE,               "none",               "connection runs over RDMA")      \
	X(PENDING,            "pending",            "path not decided yet")           \
	X(RULE_TCP,           "rule_tcp",           "a config rule or SDPSHIM_MODE says tcp") \
	X(NO_DEVICE,          "no_device",          "no RDMA device on this host")    \
	X(LOOPBACK,           "loopback",           "loopback address (rdma_cm cannot use it)") \
	X(PEER_NO_SDPSHIM,    "peer_no_sdpshim",    "peer does not run sdpshim on this port") \
	X(PEER_UNREACHABLE,   "peer_unreachable",   "no RDMA route or address for the peer") \
	X(RDMA_TIMEOUT,       "rdma_timeout",       "RDMA connect did not finish within the timeout") \
	X(RDMA_CM_ERROR,      "rdma_cm_error",      "rdma_cm or verbs call failed")   \
	X(MEMLOCK,            "memlock",            "RLIMIT_MEMLOCK too low to register buffers") \
	X(PROTOCOL,           "protocol",           "malformed or incompatible Hello/HelloAck") \
	X(PEER_REJECTED,      "peer_rejected",      "peer sdpshim declined (its rules or resources)") \
	X(NOT_ELIGIBLE,       "not_eligible",       "socket is not an RDMA candidate (options, state)") \
	X(INHERITED,          "inherited",          "socket inherited from another process image") \
	X(ACCEPTED_ELSEWHERE, "accepted_elsewhere", "server process that accepted does not own the channel") \
	X(LISTENER_TCP,       "listener_tcp",       "listening socket has no RDMA listener")  \
	X(RESOURCES,          "resources",          "out of QPs, CQs, memory or pending slots") \
	X(FAILOVER,           "failover",           "RDMA carrier failed; stream moved to TCP") \
	X(FORKED,             "forked",             "socket shared with a forked process; moved to TCP") \
	X(UNPROVEN,           "unproven",           "the channel's peer did not prove it owns this TCP connection")

enum sdp_reason {
#define SDP_REASON_ENUM(sym, name, text) SDP_REASON_##sym,
	SDP_REASON_LIST(SDP_REASON_ENUM)
#undef SDP_REASON_ENUM
	SDP_REASON_COUNT
};

/* Stable short name, for example "peer_no_sdpshim". */
const char *sdp_reason_name(enum sdp_reason reason);
/* One-line explanation for logs and `sdpshim stat`. */
const char *sdp_reason_text(enum sdp_reason reason);
/* Reverse of sdp_reason_name(); returns -1 for an unknown name. */
int sdp_reason_from_name(const char *name);
const char *sdp_path_name(enum sdp_path path);

#endif

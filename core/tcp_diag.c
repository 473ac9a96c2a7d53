/* Whether the server end of a kernel TCP connection has been accepted, by
 * any process: an exact sock_diag lookup of the 4-tuple, whose answer
 * carries the socket's inode (0 while it waits in the listen queue); and
 * whether this process holds that socket (/proc/thread-self/fd). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"
#include "core/tcp_diag.h"

#define TCP_LISTEN_STATE 10 /* TCP_LISTEN in the kernel's numbering */

struct diag_request {
	struct nlmsghdr nlh;
	struct inet_diag_req_v2 req;
};

static bool addr_is_v4_mapped(const uint8_t a[16])
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(a, prefix, sizeof(prefix)) == 0;
}

static void build_request(const struct sdp_tuple *t, struct diag_request *r)
{
	bool v4 = addr_is_v4_mapped(t->src_addr) && addr_is_v4_mapped(t->dst_addr);

	memset(r, 0, sizeof(*r));
	r->nlh.nlmsg_len = sizeof(*r);
	r->nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	r->nlh.nlmsg_flags = NLM_F_REQUEST;
	r->req.sdiag_family = v4 ? AF_INET : AF_INET6;
	r->req.sdiag_protocol = IPPROTO_TCP;
	r->req.idiag_states = ~0u;
	/* The server socket's view: source is the server, destination the client. */
	r->req.id.idiag_sport = htons(t->dst_port);
	r->req.id.idiag_dport = htons(t->src_port);
	memcpy(r->req.id.idiag_src, v4 ? t->dst_addr + 12 : t->dst_addr, v4 ? 4 : 16);
	memcpy(r->req.id.idiag_dst, v4 ? t->src_addr + 12 : t->src_addr, v4 ? 4 : 16);
	r->req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	r->req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
}

/* The answer about the connection asked for: an exact lookup that finds no
 * connection returns the listening socket instead (lookup falls back to
 * listeners), which is told apart by its state and its empty peer port.
 * The headers are copied out, so buf needs no alignment. */
enum tcp_accept_state tcp_diag_parse_reply(const void *buf, size_t len, uint16_t peer_port_be,
					   uint32_t *inode)
{
	const uint8_t *payload;
	struct nlmsghdr h;
	struct inet_diag_msg m;

	if (buf == NULL || len < sizeof(h))
		return TCP_STATE_UNKNOWN;
	memcpy(&h, buf, sizeof(h));
	payload = (const uint8_t *)buf + NLMSG_HDRLEN;
	if (!NLMSG_OK(&h, len))
		return TCP_STATE_UNKNOWN;
	if (h.nlmsg_type == NLMSG_ERROR) {
		struct nlmsgerr e;

		if (h.nlmsg_len < NLMSG_LENGTH(sizeof(e)))
			return TCP_STATE_UNKNOWN;
		memcpy(&e, payload, sizeof(e));
		return e.error == -ENOENT ? TCP_NOT_ACCEPTED : TCP_STATE_UNKNOWN;
	}
	if (h.nlmsg_type != SOCK_DIAG_BY_FAMILY || h.nlmsg_len < NLMSG_LENGTH(sizeof(m)))
		return TCP_STATE_UNKNOWN;
	memcpy(&m, payload, sizeof(m));
	if (m.idiag_state == TCP_LISTEN_STATE || m.id.idiag_dport != peer_port_be || !m.idiag_inode)
		return TCP_NOT_ACCEPTED;
	if (inode)
		*inode = m.idiag_inode;
	return TCP_ACCEPTED;
}

enum tcp_accept_state tcp_diag_accept_state(const struct sdp_tuple *t, uint32_t *inode)
{
	struct diag_request r;
	union {
		struct nlmsghdr h;
		char bytes[1024];
	} reply;
	enum tcp_accept_state state = TCP_STATE_UNKNOWN;
	int fd = real.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	ssize_t n;

	if (fd < 0)
		return TCP_STATE_UNKNOWN;
	build_request(t, &r);
	/* The kernel answers within send(): the reply is queued when it returns. */
	if (real.send(fd, &r, sizeof(r), 0) == (ssize_t)sizeof(r)) {
		n = real.recv(fd, &reply, sizeof(reply), MSG_DONTWAIT);
		if (n >= 0)
			state = tcp_diag_parse_reply(&reply, (size_t)n, r.req.id.idiag_dport, inode);
	}
	real.close(fd);
	return state;
}

bool tcp_diag_socket_is_ours(uint32_t inode)
{
	char want[32], link[32];
	struct dirent *e;
	bool found = false;
	ssize_t n;
	DIR *d;
	int len = snprintf(want, sizeof(want), "socket:[%u]", inode);

	/* The calling thread's view: /proc/self is the main thread's, whose fd
	 * table is gone once it called pthread_exit(). */
	d = opendir("/proc/thread-self/fd");
	if (!d)
		d = opendir("/proc/self/fd"); /* before Linux 3.17 */
	if (!d)
		return false;
	while (!found && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(d), e->d_name, link, sizeof(link));
		found = n == len && memcmp(link, want, (size_t)len) == 0;
	}
	closedir(d);
	return found;
}

/* libFuzzer harness for the sock_diag reply parser of core/tcp_diag.c:
 * tcp_diag_parse_reply, the verdict on the kernel's answer to the exact
 * lookup of a connection's server end (accepted by some process, still
 * queued, or sock_diag unusable).
 *
 * Input: two bytes, the peer (client) port exactly as the request carries it
 * (network order, copied as they are), then the reply bytes as recv() returned
 * them.
 *
 * Checked: the verdict is the model's below, written from the netlink and
 * inet_diag layouts (one message: a header whose nlmsg_len is at least 16 and
 * at most the bytes received; NLMSG_ERROR with a whole nlmsgerr is
 * NOT_ACCEPTED for -ENOENT, else UNKNOWN; SOCK_DIAG_BY_FAMILY with a whole
 * inet_diag_msg is NOT_ACCEPTED for the listener (state LISTEN or another
 * peer port) and otherwise ACCEPTED exactly when the inode is not 0; anything
 * else UNKNOWN); only the message's own nlmsg_len bytes count (decoding
 * exactly those gives the same verdict, from a buffer that size so ASan sees
 * any read past it, and one byte short is UNKNOWN); the verdict does not
 * depend on the buffer's alignment; the inode is given (and is the reply's,
 * never 0) exactly for ACCEPTED; ACCEPTED turns to NOT_ACCEPTED for any
 * other peer port, and UNKNOWN stays UNKNOWN for any; NULL is UNKNOWN. */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/real.h"
#include "core/tcp_diag.h"
#include "tests/fuzz/fuzz.h"

struct real_libc real; /* tcp_diag.c's socket calls; the parser makes none */

/* The model's layout (host byte order, as netlink carries it), checked
 * against the kernel headers the library is built with. */
#define NLH_LEN          16u         /* struct nlmsghdr */
#define NLH_OFF_TYPE     4u
#define ERR_MSG_LEN      (NLH_LEN + 4u + NLH_LEN) /* + int error + the request's header */
#define ERR_OFF_ERROR    NLH_LEN
#define DIAG_MSG_LEN     (NLH_LEN + 72u)          /* + struct inet_diag_msg */
#define DIAG_OFF_STATE   (NLH_LEN + 1u)
#define DIAG_OFF_DPORT   (NLH_LEN + 6u)
#define DIAG_OFF_INODE   (NLH_LEN + 68u)
#define TYPE_ERROR       2u          /* NLMSG_ERROR */
#define TYPE_SOCK_DIAG   20u         /* SOCK_DIAG_BY_FAMILY */
#define STATE_LISTEN     10u         /* TCP_LISTEN */

_Static_assert(sizeof(struct nlmsghdr) == NLH_LEN && NLMSG_HDRLEN == NLH_LEN, "layout");
_Static_assert(offsetof(struct nlmsghdr, nlmsg_type) == NLH_OFF_TYPE, "layout");
_Static_assert(NLMSG_LENGTH(sizeof(struct nlmsgerr)) == ERR_MSG_LEN, "layout");
_Static_assert(NLMSG_LENGTH(sizeof(struct inet_diag_msg)) == DIAG_MSG_LEN, "layout");
_Static_assert(NLH_LEN + offsetof(struct inet_diag_msg, idiag_state) == DIAG_OFF_STATE, "layout");
_Static_assert(NLH_LEN + offsetof(struct inet_diag_msg, id.idiag_dport) == DIAG_OFF_DPORT, "layout");
_Static_assert(NLH_LEN + offsetof(struct inet_diag_msg, idiag_inode) == DIAG_OFF_INODE, "layout");
_Static_assert(NLMSG_ERROR == TYPE_ERROR && SOCK_DIAG_BY_FAMILY == TYPE_SOCK_DIAG, "types");

static enum tcp_accept_state model(const uint8_t *b, size_t n, uint16_t peer_port_be)
{
	uint32_t len;

	if (n < NLH_LEN)
		return TCP_STATE_UNKNOWN;
	len = ne32_at(b);
	if (len < NLH_LEN || len > n)
		return TCP_STATE_UNKNOWN;
	switch (ne16_at(b + NLH_OFF_TYPE)) {
	case TYPE_ERROR:
		if (len < ERR_MSG_LEN)
			return TCP_STATE_UNKNOWN;
		return (int32_t)ne32_at(b + ERR_OFF_ERROR) == -ENOENT ? TCP_NOT_ACCEPTED
									: TCP_STATE_UNKNOWN;
	case TYPE_SOCK_DIAG:
		if (len < DIAG_MSG_LEN)
			return TCP_STATE_UNKNOWN;
		if (b[DIAG_OFF_STATE] == STATE_LISTEN || ne16_at(b + DIAG_OFF_DPORT) != peer_port_be)
			return TCP_NOT_ACCEPTED;
		return ne32_at(b + DIAG_OFF_INODE) ? TCP_ACCEPTED : TCP_NOT_ACCEPTED;
	default:
		return TCP_STATE_UNKNOWN;
	}
}

/* The verdict on a copy of n bytes at offset shift of a buffer that ends
 * right after them. */
static enum tcp_accept_state parse_copy(const uint8_t *data, size_t n, size_t shift,
					uint16_t peer_port_be)
{
	uint8_t *copy = malloc(n + shift + 1);
	enum tcp_accept_state st;

	CHECK(copy != NULL);
	memcpy(copy + shift, data, n);
	st = tcp_diag_parse_reply(copy + shift, n, peer_port_be, NULL);
	free(copy);
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum tcp_accept_state st;
	uint32_t inode = 0;
	uint16_t port;

	if (size < 2)
		return 0;
	memcpy(&port, data, sizeof(port));
	data += 2;
	size -= 2;

	st = tcp_diag_parse_reply(data, size, port, &inode);
	CHECK(st == TCP_NOT_ACCEPTED || st == TCP_ACCEPTED || st == TCP_STATE_UNKNOWN);
	CHECK(st == model(data, size, port));
	/* The inode is given exactly for an accepted connection: its own. */
	CHECK(st == TCP_ACCEPTED ? inode != 0 && inode == ne32_at(data + DIAG_OFF_INODE) : inode == 0);
	CHECK(tcp_diag_parse_reply(NULL, size, port, NULL) == TCP_STATE_UNKNOWN);

	/* Alignment: the library's buffer is aligned, a fuzz input need not be. */
	CHECK(parse_copy(data, size, 1, port) == st);
	CHECK(parse_copy(data, size, 3, port) == st);

	/* The peer port decides only between the connection and the listener. */
	if (st == TCP_ACCEPTED)
		CHECK(tcp_diag_parse_reply(data, size, (uint16_t)~port, NULL) == TCP_NOT_ACCEPTED);
	if (st == TCP_STATE_UNKNOWN)
		CHECK(tcp_diag_parse_reply(data, size, (uint16_t)~port, NULL) == TCP_STATE_UNKNOWN);

	/* Only the first message's own bytes count. */
	if (size >= NLH_LEN) {
		uint32_t own = ne32_at(data);
		if (own >= NLH_LEN && own <= size) {
			uint8_t *exact = malloc(own), *short_by_one = malloc(own - 1);
			CHECK(exact != NULL && short_by_one != NULL);
			memcpy(exact, data, own);
			memcpy(short_by_one, data, own - 1);
			CHECK(tcp_diag_parse_reply(exact, own, port, NULL) == st);
			CHECK(tcp_diag_parse_reply(short_by_one, own - 1, port, NULL) == TCP_STATE_UNKNOWN);
			free(exact);
			free(short_by_one);
		}
	}
	return 0;
}

/* Unit tests (TAP) for core/tcp_diag.c against this machine's
 * kernel: a connection waiting in the listen queue is not accepted, the
 * same connection after accept() is, a tuple of no connection (answered
 * with the listener) is not, over IPv4 and IPv6 loopback; the inode of an
 * accepted socket is this process's when it accepted it, and not when a
 * child process did (the server's "accepted elsewhere" judgment). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/real.h"
#include "core/tcp_diag.h"
#include "tap.h"

struct real_libc real; /* the module calls libc through this table */

struct conn_pair {
	int lfd, cfd;
	struct sdp_tuple t; /* src = client, dst = server */
};

static void tuple_addr(const struct sockaddr_storage *ss, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		memcpy(out, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
	}
}

/* A listener on loopback and a connected client, not accepted yet. */
static int open_pair(int family, struct conn_pair *p)
{
	struct sockaddr_storage ss = { .ss_family = (sa_family_t)family }, local;
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	socklen_t llen = sizeof(local);

	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	p->lfd = socket(family, SOCK_STREAM, 0);
	p->cfd = socket(family, SOCK_STREAM, 0);
	if (p->lfd < 0 || p->cfd < 0 || bind(p->lfd, (struct sockaddr *)&ss, len) != 0 ||
	    listen(p->lfd, 4) != 0 || getsockname(p->lfd, (struct sockaddr *)&ss, &len) != 0 ||
	    connect(p->cfd, (struct sockaddr *)&ss, len) != 0 ||
	    getsockname(p->cfd, (struct sockaddr *)&local, &llen) != 0)
		return check(0, "cannot set up a loopback connection (family %d)", family);
	tuple_addr(&local, p->t.src_addr, &p->t.src_port);
	tuple_addr(&ss, p->t.dst_addr, &p->t.dst_port);
	return 1;
}

static void close_pair(struct conn_pair *p)
{
	close(p->cfd);
	close(p->lfd);
}

static int queued_then_accepted(int family)
{
	struct conn_pair p;
	int ok, afd;

	if (!open_pair(family, &p))
		return 0;
	ok = check(tcp_diag_accept_state(&p.t, NULL) == TCP_NOT_ACCEPTED,
		   "a connection in the listen queue reads as accepted");
	afd = accept(p.lfd, NULL, NULL);
	ok &= check(afd >= 0, "accept failed");
	ok &= check(tcp_diag_accept_state(&p.t, NULL) == TCP_ACCEPTED,
		    "an accepted connection does not read as accepted");
	/* A tuple with no connection (as before the client's SYN): the kernel's
	 * lookup falls back to the listening socket, which must not count. */
	p.t.src_port ^= 1;
	{
		enum tcp_accept_state st = tcp_diag_accept_state(&p.t, NULL);
		ok &= check(st == TCP_NOT_ACCEPTED, "a tuple naming no connection reads as %d", st);
	}
	if (afd >= 0)
		close(afd);
	close_pair(&p);
	return ok;
}

/* Accepted here: the inode sock_diag names is one of our fds. */
static int accepted_here_is_ours(void)
{
	struct conn_pair p;
	uint32_t inode = 0;
	int ok, afd;

	if (!open_pair(AF_INET, &p))
		return 0;
	afd = accept(p.lfd, NULL, NULL);
	ok = check(afd >= 0, "accept failed");
	ok &= check(tcp_diag_accept_state(&p.t, &inode) == TCP_ACCEPTED && inode != 0,
		    "an accepted connection gives no inode");
	ok &= check(tcp_diag_socket_is_ours(inode), "our accepted socket (inode %u) is not ours",
		    inode);
	if (afd >= 0)
		close(afd);
	close_pair(&p);
	return ok;
}

/* Accepted by a child process (a pre-fork server's worker): not ours,
 * though we hold the listener and the client end. */
static int accepted_by_child_is_not_ours(void)
{
	struct conn_pair p;
	struct pollfd pfd;
	uint32_t inode = 0;
	int ok = 1, ready[2], done[2], status = 0;
	char byte = 0;
	pid_t pid;

	if (!open_pair(AF_INET, &p))
		return 0;
	if (pipe(ready) != 0 || pipe(done) != 0)
		return check(0, "pipe failed");
	pid = fork();
	if (pid == 0) {
		int afd;

		alarm(20); /* bounded, whatever the parent does */
		close(done[1]);
		close(ready[0]);
		afd = accept(p.lfd, NULL, NULL);
		byte = afd >= 0 ? 'a' : 'x';
		if (write(ready[1], &byte, 1) != 1 || read(done[0], &byte, 1) < 0)
			_exit(1);
		_exit(0);
	}
	ok &= check(pid > 0, "fork failed");
	pfd = (struct pollfd){ .fd = ready[0], .events = POLLIN };
	ok &= check(pid > 0 && poll(&pfd, 1, 10000) == 1 && read(ready[0], &byte, 1) == 1 &&
			    byte == 'a',
		    "the child did not accept within 10 s");
	if (ok) {
		ok &= check(tcp_diag_accept_state(&p.t, &inode) == TCP_ACCEPTED && inode != 0,
			    "a connection the child accepted gives no inode");
		ok &= check(!tcp_diag_socket_is_ours(inode),
			    "the child's accepted socket (inode %u) reads as ours", inode);
	}
	close(done[1]); /* the child's read returns */
	if (pid > 0)
		ok &= check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
				    WEXITSTATUS(status) == 0,
			    "the child ended with status %d", status);
	close(done[0]);
	close(ready[0]);
	close(ready[1]);
	close_pair(&p);
	return ok;
}

static int ipv4(void) { return queued_then_accepted(AF_INET); }
static int ipv6(void) { return queued_then_accepted(AF_INET6); }

int main(void)
{
	static const struct tap_case cases[] = {
		{ "test_tcp_diag: IPv4 loopback: queued is not accepted, accept() makes it so", ipv4 },
		{ "test_tcp_diag: IPv6 loopback: queued is not accepted, accept() makes it so", ipv6 },
		{ "test_tcp_diag: a socket this process accepted is its own (inode in /proc/self/fd)",
		  accepted_here_is_ours },
		{ "test_tcp_diag: a socket a child process accepted is not this process's",
		  accepted_by_child_is_not_ours },
	};

	real.socket = socket;
	real.send = send;
	real.recv = recv;
	real.close = close;
	return tap_run(cases, sizeof(cases) / sizeof(cases[0]));
}

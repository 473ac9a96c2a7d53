/* acceptwait: times a non-blocking accept4() the way an event loop makes it,
 * for tests/vm/35-trust.bats (a pending channel must never stall it).
 *
 *   acceptwait -s PORT [-a ADDR] [-n COUNT]
 *
 * Listens on ADDR:PORT (default 0.0.0.0) with a non-blocking socket and prints
 * "listening port=PORT".  For each of COUNT connections (default 1): poll() for
 * readability, then one accept4(SOCK_NONBLOCK), timed by itself with
 * CLOCK_MONOTONIC: "accept_ms=X.Y" (an EAGAIN is printed as "accept_eagain
 * ms=X.Y" and polled again).  It then echoes every byte of that connection
 * (poll-driven, non-blocking) until EOF, shuts the write side down and prints
 * "echoed bytes=N".  Exit 0, or 1 on any error (one "FAIL ..." line); a guard
 * ends a run that takes longer than GUARD_SECS. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "progutil.h"

#define GUARD_SECS 120
#define CHUNK      65536

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL still running after the guard time\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void wait_for(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		int rc = poll(&p, 1, -1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			fail("poll: %s", strerror(errno));
		if (p.revents & POLLNVAL)
			fail("poll: invalid fd %d", fd);
		return; /* readable, writable, or an error the next call reports */
	}
}

static void write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			wait_for(fd, POLLOUT);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("write: %s", n < 0 ? strerror(errno) : "0 bytes");
		p += n;
		len -= (size_t)n;
	}
}

static void echo(int fd)
{
	static uint8_t buf[CHUNK];
	unsigned long long total = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			wait_for(fd, POLLIN);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail("read: %s", strerror(errno));
		if (n == 0)
			break;
		write_all(fd, buf, (size_t)n);
		total += (unsigned long long)n;
	}
	shutdown(fd, SHUT_WR);
	close(fd);
	printf("echoed bytes=%llu\n", total);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *addr = "0.0.0.0", *port = NULL;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
	int o, count = 1, one = 1, lfd, err;

	while ((o = getopt(argc, argv, "s:a:n:")) != -1) {
		switch (o) {
		case 's': port = optarg; break;
		case 'a': addr = optarg; break;
		case 'n': count = atoi(optarg); break;
		default: port = NULL; optind = argc; break;
		}
	}
	if (!port || count < 1) {
		fprintf(stderr, "usage: acceptwait -s PORT [-a ADDR] [-n COUNT]\n");
		return 2;
	}
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);
	signal(SIGPIPE, SIG_IGN);
	err = getaddrinfo(addr, port, &hints, &ai);
	if (err)
		fail("address %s port %s: %s", addr, port, gai_strerror(err));
	lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (lfd < 0)
		fail("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, 16) != 0)
		fail("bind/listen: %s", strerror(errno));
	freeaddrinfo(ai);
	printf("listening port=%s\n", port);
	fflush(stdout);
	for (int i = 0; i < count; i++) {
		int fd;
		double t0, ms;

		for (;;) {
			wait_for(lfd, POLLIN);
			t0 = prog_mono_ms();
			fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			ms = prog_mono_ms() - t0;
			if (fd >= 0)
				break;
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				fail("accept4: %s", strerror(errno));
			printf("accept_eagain ms=%.1f errno=%s\n", ms, strerror(errno));
			fflush(stdout);
		}
		printf("accept_ms=%.1f\n", ms);
		fflush(stdout);
		echo(fd);
	}
	close(lfd);
	return 0;
}

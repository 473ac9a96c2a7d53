/* cancelconn: a thread cancelled while its blocking connect() waits for the
 * server's answer must not take the library down with it.
 *
 *   cancelconn HOST PORT GO_FILE CONT_FILE
 *
 * 1. Connects to an echo server and checks a 64 KiB echo (on a linked
 *    server: this makes the link), keeps that connection open, prints
 *    "linked".
 * 2. Waits for GO_FILE (the test stops the server meanwhile, so that the
 *    next connect's answer cannot come), starts a thread whose blocking
 *    connect() to HOST:PORT waits for it, and cancels that thread
 *    CANCEL_AFTER_MS later.  The thread must end cancelled within
 *    JOIN_BOUND_S: "cancelled ms=N" (N from the cancel to the join).
 * 3. Waits for CONT_FILE (the test resumes the server), then checks a new
 *    connection's echo and the first connection's again, closes both and
 *    prints "ok".
 * Any failure prints "FAIL ..." and exits 1; a hang past GUARD_SECS exits 3. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "progutil.h"
#include "seedpat.h"

#define GUARD_SECS      90
#define ECHO_BYTES      65536
#define CANCEL_AFTER_MS 300
#define JOIN_BOUND_S    30
#define FILE_WAIT_S     60

static const char *host, *port;

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL still running after the guard time\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

static void fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static int connect_to_server(void)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai;
	int fd;

	if (getaddrinfo(host, port, &hints, &ai) != 0)
		fail("getaddrinfo");
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		fail("socket");
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
		fail("connect");
	freeaddrinfo(ai);
	return fd;
}

/* Sends ECHO_BYTES of stream `seed` and checks every byte that comes back. */
static void check_echo(int fd, uint64_t seed)
{
	static uint8_t out[ECHO_BYTES], in[ECHO_BYTES];
	size_t got = 0;

	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = seedpat_byte(seed, i);
	for (size_t sent = 0; sent < sizeof(out);) {
		ssize_t n = send(fd, out + sent, sizeof(out) - sent, MSG_NOSIGNAL);

		if (n <= 0)
			fail("send");
		sent += (size_t)n;
		while (got < sent) {
			ssize_t r = recv(fd, in + got, sent - got, 0);

			if (r <= 0) {
				errno = r == 0 ? EPIPE : errno;
				fail("recv");
			}
			got += (size_t)r;
		}
	}
	if (memcmp(in, out, sizeof(out)) != 0) {
		printf("FAIL echo of stream %llu differs\n", (unsigned long long)seed);
		exit(1);
	}
}

static void wait_for_file(const char *path)
{
	for (int i = 0; i < FILE_WAIT_S * 50; i++) {
		if (access(path, F_OK) == 0)
			return;
		usleep(20000);
	}
	printf("FAIL %s never appeared\n", path);
	exit(1);
}

static void *connect_thread(void *arg)
{
	(void)arg;
	(void)connect_to_server(); /* waits: the server is stopped */
	/* Reached only when the connect returned first (a deferred cancel):
	 * the cancel takes effect at the next cancellation point.  The socket
	 * stays open until the process exits.  A thread still here after a
	 * minute was never cancelled: main reports it. */
	for (int i = 0; i < 60000; i++) {
		pthread_testcancel();
		usleep(1000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	struct timespec until;
	void *ret;
	int first, second, err;
	double t0;

	if (argc != 5) {
		fprintf(stderr, "usage: cancelconn HOST PORT GO_FILE CONT_FILE\n");
		return 2;
	}
	host = argv[1];
	port = argv[2];
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);

	first = connect_to_server();
	check_echo(first, 1);
	printf("linked\n");
	fflush(stdout);

	wait_for_file(argv[3]);
	if (pthread_create(&t, NULL, connect_thread, NULL) != 0)
		fail("pthread_create");
	usleep(CANCEL_AFTER_MS * 1000);
	t0 = prog_mono_ms();
	pthread_cancel(t);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += JOIN_BOUND_S;
	err = pthread_timedjoin_np(t, &ret, &until);
	if (err != 0) {
		printf("FAIL the cancelled thread did not end within %d s: %s\n", JOIN_BOUND_S, strerror(err));
		exit(1);
	}
	if (ret != PTHREAD_CANCELED) {
		printf("FAIL the thread ended without being cancelled\n");
		exit(1);
	}
	printf("cancelled ms=%.0f\n", prog_mono_ms() - t0);
	fflush(stdout);

	wait_for_file(argv[4]);
	second = connect_to_server();
	check_echo(second, 2);
	check_echo(first, 3);
	close(second);
	close(first);
	printf("ok\n");
	return 0;
}

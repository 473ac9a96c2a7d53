/* peerkill: one end of a TCP stream that runs until the connection ends, for
 * tests that SIGKILL the other end mid-stream and check how this end learns it.
 *
 *   peerkill server ADDR PORT send|recv   listen on ADDR:PORT, accept one connection
 *   peerkill client ADDR PORT send|recv   connect to ADDR:PORT
 *
 * "send" writes 64 KiB messages forever, "recv" reads forever.  Lines on stdout:
 *   connected pid=PID                     the connection is up
 *   streaming bytes=N                     once, after STREAMING_BYTES moved
 *   end eof bytes=N end_ms=T              read returned 0
 *   end errno=NAME (text) bytes=N end_ms=T  read/write failed
 * end_ms is CLOCK_REALTIME in milliseconds (comparable with `date +%s%3N`).
 * Exit status: 0 when the stream ended by EOF, ECONNRESET, EPIPE or ECONNABORTED
 * (what a TCP peer's death looks like), 1 for another error, 3 when nothing ended
 * it within GUARD_SECS (a hang). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define GUARD_SECS      60
#define MSG_BYTES       65536
#define STREAMING_BYTES (8u << 20)

static void on_alarm(int sig)
{
	static const char msg[] = "end hang: still running after the guard time\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

static long long realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *errno_name(int e)
{
	switch (e) {
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	case ECONNABORTED: return "ECONNABORTED";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EIO: return "EIO";
	case ENOTCONN: return "ENOTCONN";
	case EBADF: return "EBADF";
	default: return "other";
	}
}

static void die(const char *what)
{
	printf("error %s: %s\n", what, strerror(errno));
	exit(1);
}

static int open_socket(const char *role, const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
	int one = 1, fd, lfd, err = getaddrinfo(host, port, &hints, &ai);

	if (err) {
		printf("error %s:%s: %s\n", host, port, gai_strerror(err));
		exit(1);
	}
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	if (!strcmp(role, "client")) {
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
			die("connect");
		freeaddrinfo(ai);
		return fd;
	}
	lfd = fd;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0)
		die("bind");
	if (listen(lfd, 4) != 0)
		die("listen");
	freeaddrinfo(ai);
	printf("listening\n");
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(lfd);
	return fd;
}

int main(int argc, char **argv)
{
	static uint8_t buf[MSG_BYTES];
	unsigned long long moved = 0;
	int fd, sending, announced = 0;

	if (argc != 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    (strcmp(argv[4], "send") && strcmp(argv[4], "recv"))) {
		fprintf(stderr, "usage: peerkill server|client ADDR PORT send|recv\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);
	sending = !strcmp(argv[4], "send");
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	fd = open_socket(argv[1], argv[2], argv[3]);
	printf("connected pid=%d\n", (int)getpid());
	fflush(stdout);
	for (;;) {
		ssize_t n = sending ? write(fd, buf, sizeof(buf)) : read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && !sending) {
			printf("end eof bytes=%llu end_ms=%lld\n", moved, realtime_ms());
			return 0;
		}
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			printf("end errno=%s (%s) bytes=%llu end_ms=%lld\n", errno_name(e), strerror(e),
			       moved, realtime_ms());
			return e == ECONNRESET || e == EPIPE || e == ECONNABORTED ? 0 : 1;
		}
		moved += (unsigned long long)n;
		if (!announced && moved >= STREAMING_BYTES) {
			announced = 1;
			printf("streaming bytes=%llu\n", moved);
			fflush(stdout);
		}
	}
}

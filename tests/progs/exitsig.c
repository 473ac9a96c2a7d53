/* exitsig: _exit from a signal handler that interrupts a sender mid-send,
 * for the test that an _exit never hangs the process, whatever library
 * code the signal interrupted (preload/exit_flush.c bounds its flush).
 *
 *   exitsig server ADDR PORT ROUNDS   accept ROUNDS connections one by one and
 *                                     read each until it ends
 *   exitsig client ADDR PORT ROUNDS   ROUNDS times: fork a child that connects,
 *                                     sends 64 KiB messages without end and
 *                                     leaves by _exit(7) from a SIGALRM handler
 *                                     50-250 ms in
 *
 * Lines on stdout: "server conn N: eof|errno=E after B bytes" and
 * "client round N: rc R in T ms".  The client exits 0 only if every child
 * ended by its _exit(7) within BOUND_MS. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG_BYTES 65536
#define BOUND_MS  9000 /* the flush's bounds (0.5 s for the closes; linger, at most 5 s, plus 2.5 s) and a margin */

static long long monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int addr_of(const char *host, const char *port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((unsigned short)atoi(port));
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int serve(const struct sockaddr_in *sa, int rounds)
{
	static char buf[MSG_BYTES];
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);

	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, (const struct sockaddr *)sa, sizeof(*sa)) != 0 || listen(ls, 8) != 0) {
		perror("exitsig: listen");
		return 1;
	}
	printf("server listening\n");
	fflush(stdout);
	for (int i = 0; i < rounds; i++) {
		long long bytes = 0;
		ssize_t n;
		int fd = accept(ls, NULL, NULL);

		if (fd < 0) {
			perror("exitsig: accept");
			return 1;
		}
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			bytes += n;
		printf("server conn %d: %s after %lld bytes\n", i, n == 0 ? "eof" : strerror(errno), bytes);
		fflush(stdout);
		close(fd);
	}
	return 0;
}

static void on_alarm(int sig)
{
	(void)sig;
	_exit(7);
}

static void child(const struct sockaddr_in *sa, int round)
{
	static char buf[MSG_BYTES];
	struct itimerval it = { { 0, 0 }, { 0, (50 + (round * 37) % 200) * 1000 } };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0)
		_exit(2);
	memset(buf, 'x', sizeof(buf));
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, NULL);
	for (;;)
		if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) < 0)
			_exit(3);
}

static int run_clients(const struct sockaddr_in *sa, int rounds)
{
	int bad = 0;

	for (int i = 0; i < rounds; i++) {
		long long start = monotonic_ms(), took;
		int status = 0;
		pid_t pid = fork();

		if (pid == 0)
			child(sa, i);
		if (pid < 0 || waitpid(pid, &status, 0) != pid)
			return 1;
		took = monotonic_ms() - start;
		printf("client round %d: rc %d in %lld ms\n", i,
		       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), took);
		fflush(stdout);
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 7 || took > BOUND_MS;
	}
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;

	if (argc != 5 || addr_of(argv[2], argv[3], &sa) != 0) {
		fprintf(stderr, "usage: exitsig server|client ADDR PORT ROUNDS\n");
		return 2;
	}
	if (strcmp(argv[1], "server") == 0)
		return serve(&sa, atoi(argv[4]));
	return run_clients(&sa, atoi(argv[4]));
}

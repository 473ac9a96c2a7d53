/* forkecho: a fork-per-connection echo server and a checking client, for the
 * tests of moving a connection from RDMA to TCP when a process forks or execs
 * (tests/vm/70-switch.bats).
 *
 *   forkecho -s PORT [-a ADDR] [-x] [-n MAXCONNS] [-d MS]
 *       Listens on ADDR:PORT (default 0.0.0.0) and prints "forkecho: listening on
 *       PORT" and "forkecho: server pid PID".  For every accepted connection it
 *       forks; the parent closes the accepted fd at once and accepts the next one
 *       (children are reaped from a SIGCHLD handler), the child echoes every byte
 *       until EOF, closes and exits 0.  With -x the child instead moves the socket
 *       to fd 3 and execs /bin/sh -c 'exec cat <&3 >&3': the echo runs in a new
 *       image on an inherited descriptor.  With -X spawn the parent makes that
 *       child with posix_spawn instead of fork (the accepted fd is set
 *       FD_CLOEXEC first: only the spawn's dup2 action to fd 3 hands it over);
 *       with -X system, with system("cat <&FD >&FD &") (the shell leaves cat
 *       running in the background; the parent cannot wait for it).  Neither
 *       runs fork handlers.  After MAXCONNS connections (0 or no -n:
 *       never) the parent waits for every child, prints how long its fork()
 *       calls took (median, p90, max) and exits 0, or 1 if a child failed
 *       (nonzero exit or a signal).  With -d the parent holds each
 *       accepted connection MS milliseconds before it forks (so a test can see
 *       the connection's queue pair before the fork moves it to TCP).
 *
 *   forkecho -s PORT [-a ADDR] -w WORKERS -n MAXCONNS
 *       A pre-fork server instead: WORKERS processes (at most 64) forked after
 *       listen, each accepting on the inherited socket and echoing one connection
 *       at a time; the parent never accepts.  After MAXCONNS connections were
 *       served it stops the workers and exits 0, or 1 if a worker failed.
 *
 *   forkecho -c HOST -p PORT [-n CONNS] [-j PARALLEL] [-b BYTES] [-S SEED]
 *       CONNS connections (default 1), at most PARALLEL at once (threads, default
 *       1).  Each sends BYTES (default 65536; k, M, G suffixes) of a pseudo-random
 *       pattern that depends on SEED and the connection's index, then
 *       shutdown(SHUT_WR), while reading the echo (poll on a non-blocking socket,
 *       so neither direction waits for the other), until EOF.  The echo must have
 *       the length and the SHA-256 of the bytes sent; every received byte is also
 *       compared with the pattern, so a failure names the first wrong offset.
 *       One line per connection: "conn I bytes=N sha256=HEX ok|BAD" (N and HEX of
 *       the echo; details of a BAD one go to stderr), then "forkecho: K/CONNS ok".
 *       Exit 0 only if every connection was ok.
 *
 * Errors print one "forkecho: ..." line on stderr; usage errors exit 2, other
 * failures 1.  A connection that makes no progress for STALL_SECS fails. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"

#define CHUNK      65536
#define STALL_SECS 120

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "forkecho: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr, "usage: forkecho -s PORT [-a ADDR] [-x | -X spawn|system] [-n MAXCONNS] [-d MS]\n"
			"       forkecho -s PORT [-a ADDR] -w WORKERS -n MAXCONNS\n"
			"       forkecho -c HOST -p PORT [-n CONNS] [-j PARALLEL] [-b BYTES] "
			"[-S SEED]\n");
	exit(2);
}

static struct addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_family = (passive && !host) ? AF_INET : AF_UNSPEC,
				  .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0) }, *ai;
	int err = getaddrinfo(host, port, &hints, &ai);

	if (err)
		die("address %s port %s: %s", host ? host : "*", port, gai_strerror(err));
	return ai;
}

/* --- server ----------------------------------------------------------------- */

static volatile sig_atomic_t reaped, child_failures;

static void note_child(int status)
{
	reaped++;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		child_failures++;
}

static void on_sigchld(int sig)
{
	int saved = errno, status;

	(void)sig;
	while (waitpid(-1, &status, WNOHANG) > 0)
		note_child(status);
	errno = saved;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Echoes until EOF, then closes.  Returns 0, or 1 after a one-line error. */
static int echo_conn(int fd, int index)
{
	static uint8_t buf[CHUNK];
	uint64_t total = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "forkecho: child %d (pid %d): read after %llu bytes: %s\n",
				index, (int)getpid(), (unsigned long long)total, strerror(errno));
			close(fd);
			return 1;
		}
		if (n == 0)
			break;
		if (write_all(fd, buf, (size_t)n) != 0) {
			fprintf(stderr, "forkecho: child %d (pid %d): write after %llu bytes: %s\n",
				index, (int)getpid(), (unsigned long long)total, strerror(errno));
			close(fd);
			return 1;
		}
		total += (uint64_t)n;
	}
	if (close(fd) != 0) {
		fprintf(stderr, "forkecho: child %d (pid %d): close: %s\n", index, (int)getpid(),
			strerror(errno));
		return 1;
	}
	return 0;
}

/* The forked child: echo until EOF. */
static void child_echo(int fd, int index) __attribute__((noreturn));
static void child_echo(int fd, int index)
{
	_exit(echo_conn(fd, index));
}

/* The forked child with -x: the socket becomes fd 3 of a shell that execs cat. */
static void child_exec(int fd, int index) __attribute__((noreturn));
static void child_exec(int fd, int index)
{
	if (fd != 3) {
		if (dup2(fd, 3) != 3) {
			fprintf(stderr, "forkecho: child %d: dup2 to fd 3: %s\n", index, strerror(errno));
			_exit(1);
		}
		close(fd);
	} else if (fcntl(3, F_SETFD, 0) != 0) {
		fprintf(stderr, "forkecho: child %d: clear FD_CLOEXEC: %s\n", index, strerror(errno));
		_exit(1);
	}
	signal(SIGPIPE, SIG_DFL);
	execl("/bin/sh", "sh", "-c", "exec cat <&3 >&3", (char *)NULL);
	fprintf(stderr, "forkecho: child %d: exec /bin/sh: %s\n", index, strerror(errno));
	_exit(127);
}

enum { ECHO_FORK, ECHO_FORK_EXEC, ECHO_SPAWN, ECHO_SYSTEM };

extern char **environ;

/* The echo child without fork: posix_spawn or system (-X).  The child's
 * pid (0 for system, whose cat is the shell's), or -1. */
static pid_t spawn_echo(int fd, int index, int mode)
{
	char *argv[] = { "sh", "-c", "exec cat <&3 >&3", NULL };
	posix_spawn_file_actions_t actions;
	char command[64];
	pid_t pid = -1;
	int rc;

	if (mode == ECHO_SYSTEM) {
		snprintf(command, sizeof(command), "cat <&%d >&%d &", fd, fd);
		rc = system(command);
		if (rc != 0)
			fprintf(stderr, "forkecho: system for connection %d: status %d\n", index, rc);
		return rc == 0 ? 0 : -1;
	}
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || posix_spawn_file_actions_init(&actions) != 0)
		return -1;
	rc = posix_spawn_file_actions_adddup2(&actions, fd, 3);
	if (rc == 0)
		rc = posix_spawn(&pid, "/bin/sh", &actions, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&actions);
	if (rc != 0) {
		fprintf(stderr, "forkecho: posix_spawn for connection %d: %s\n", index, strerror(rc));
		return -1;
	}
	return pid;
}

static int fork_delay_ms;   /* -d */
static int prefork_workers; /* -w */

/* How long each fork() took in the parent (with the shim: moving the accepted
 * socket to TCP first), for the summary line. */
#define MAX_TIMED_FORKS 100000
static double fork_us[MAX_TIMED_FORKS];
static int timed_forks;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void print_fork_times(void)
{
	if (timed_forks == 0)
		return;
	qsort(fork_us, (size_t)timed_forks, sizeof(fork_us[0]), cmp_double);
	printf("forkecho: server: fork() took median %.0f us, p90 %.0f us, max %.0f us over %d forks\n",
	       fork_us[timed_forks / 2], fork_us[timed_forks * 9 / 10], fork_us[timed_forks - 1],
	       timed_forks);
}

/* -w: WORKERS processes forked before any connection, each accepting on the
 * inherited listening socket and echoing one connection at a time; served
 * connections are counted in shared memory.  Once MAXCONNS were served the
 * parent stops the workers. */
static int prefork_serve(int lfd, int workers, int maxconns)
{
	atomic_int *served = mmap(NULL, sizeof(*served), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[64];
	int failed = 0, status;

	if (served == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	atomic_init(served, 0);
	signal(SIGCHLD, SIG_DFL);
	fflush(NULL);
	for (int w = 0; w < workers; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork of worker %d: %s", w, strerror(errno));
		if (pids[w] == 0) {
			for (int index = 0;; index++) {
				int fd = accept(lfd, NULL, NULL);

				if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
					continue;
				if (fd < 0)
					die("worker %d: accept: %s", w, strerror(errno));
				if (echo_conn(fd, w * 100000 + index) != 0)
					_exit(1);
				atomic_fetch_add(served, 1);
			}
		}
	}
	while (atomic_load(served) < maxconns && waitpid(-1, &status, WNOHANG) == 0)
		nanosleep(&(struct timespec){ 0, 10000000L }, NULL);
	for (int w = 0; w < workers; w++)
		kill(pids[w], SIGTERM);
	for (int w = 0; w < workers; w++)
		if (waitpid(pids[w], &status, 0) == pids[w] &&
		    !(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM))
			failed++; /* it ended on its own: an error */
	printf("forkecho: server: %d connections served by %d pre-forked workers, %d workers "
	       "failed\n", atomic_load(served), workers, failed);
	fflush(stdout);
	return failed || atomic_load(served) < maxconns ? 1 : 0;
}

static int server(const char *addr, const char *port, int maxconns, int exec_mode)
{
	struct addrinfo *ai = resolve(addr, port, 1);
	struct sigaction sa;
	sigset_t chld;
	int one = 1, lfd, forked = 0, by_system = 0, fork_failures = 0, status;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCHLD, &sa, NULL) != 0)
		die("sigaction: %s", strerror(errno));
	lfd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0)
		die("bind %s:%s: %s", addr ? addr : "0.0.0.0", port, strerror(errno));
	if (listen(lfd, 128) != 0)
		die("listen: %s", strerror(errno));
	freeaddrinfo(ai);
	printf("forkecho: listening on %s\nforkecho: server pid %d\n", port, (int)getpid());
	fflush(stdout);
	if (prefork_workers > 0)
		return prefork_serve(lfd, prefork_workers, maxconns);

	for (int accepted = 0; maxconns == 0 || accepted < maxconns;) {
		pid_t pid;
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept: %s", strerror(errno));
		}
		accepted++;
		if (fork_delay_ms > 0)
			nanosleep(&(struct timespec){ fork_delay_ms / 1000,
						      (fork_delay_ms % 1000) * 1000000L }, NULL);
		fflush(NULL); /* nothing buffered for the child to repeat */
		if (exec_mode >= ECHO_SPAWN) {
			pid = spawn_echo(fd, accepted, exec_mode);
			if (pid < 0)
				fork_failures++;
			else if (pid > 0)
				forked++;
			else
				by_system++;
			if (close(fd) != 0)
				die("close of the accepted fd in the parent: %s", strerror(errno));
			continue;
		}
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		pid = fork();
		if (pid > 0) {
			clock_gettime(CLOCK_MONOTONIC, &t1);
			if (timed_forks < MAX_TIMED_FORKS)
				fork_us[timed_forks++] = (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
							 (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
		}
		if (pid < 0) {
			fprintf(stderr, "forkecho: fork for connection %d: %s\n", accepted,
				strerror(errno));
			fork_failures++;
			close(fd);
			continue;
		}
		if (pid == 0) {
			close(lfd);
			if (exec_mode)
				child_exec(fd, accepted);
			child_echo(fd, accepted);
		}
		forked++;
		if (close(fd) != 0)
			die("close of the accepted fd in the parent: %s", strerror(errno));
	}
	close(lfd);

	/* All accepted: wait for the children still running, SIGCHLD blocked so the
	 * handler and this loop do not race for the same children. */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	while (reaped < forked) {
		pid_t p = waitpid(-1, &status, 0);
		if (p < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "forkecho: waitpid with %d of %d children reaped: %s\n",
				(int)reaped, forked, strerror(errno));
			child_failures++;
			break;
		}
		note_child(status);
	}
	print_fork_times();
	printf("forkecho: server: %d connections, %d children failed, %d forks failed\n",
	       forked + by_system + fork_failures, (int)child_failures, fork_failures);
	fflush(stdout);
	return (child_failures || fork_failures) ? 1 : 0;
}

/* --- client ----------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Byte OFF of connection seed CSEED is a pure function of both (as in stream.c). */
static void fill(uint64_t cseed, uint64_t off, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len;) {
		uint64_t s = cseed ^ (((off + i) / 8) * 0x2545f4914f6cdd1dULL);
		uint64_t w = splitmix(&s);
		for (unsigned k = (unsigned)((off + i) % 8); k < 8 && i < len; k++, i++)
			buf[i] = (uint8_t)(w >> (8 * k));
	}
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct {
	struct addrinfo *ai;
	const char *host, *port;
	int conns;
	uint64_t bytes, seed;
	atomic_int next, ok;
	pthread_mutex_t out_lock;
} cl = { .out_lock = PTHREAD_MUTEX_INITIALIZER };

struct conn_state {
	uint8_t *out, *in, *want;
	char err[256];
};

static void set_err(struct conn_state *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct conn_state *c, const char *fmt, ...)
{
	va_list ap;

	if (c->err[0])
		return; /* keep the first */
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
}

static int connect_any(struct conn_state *c)
{
	int fd = -1, saved = 0;

	for (struct addrinfo *a = cl.ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM, 0);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			return fd;
		saved = errno;
		close(fd);
		fd = -1;
	}
	set_err(c, "connect %s:%s: %s", cl.host, cl.port, strerror(saved));
	return -1;
}

/* Send the pattern and read the echo at the same time; returns 1 if ok. */
static int run_conn(struct conn_state *c, int index)
{
	uint64_t cseed = cl.seed ^ ((uint64_t)index * 0xd1342543de82ef95ULL), mix = cseed;
	uint64_t sent = 0, got = 0, bad_at = UINT64_MAX;
	size_t out_len = 0, out_pos = 0;
	sha256_ctx sha_out, sha_in;
	uint8_t d_out[SHA256_DIGEST_LEN], d_in[SHA256_DIGEST_LEN];
	char hex_in[SHA256_HEX_LEN + 1], hex_out[SHA256_HEX_LEN + 1];
	double last = mono_s();
	int fd, shut = 0, eof = 0, ok;

	cseed = splitmix(&mix);
	c->err[0] = '\0';
	sha256_init(&sha_out);
	sha256_init(&sha_in);
	fd = connect_any(c);
	if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
		set_err(c, "fcntl O_NONBLOCK: %s", strerror(errno));
		close(fd);
		fd = -1;
	}
	while (fd >= 0 && !eof) {
		struct pollfd p = { fd, POLLIN, 0 };
		int progress = 0;

		if (sent == cl.bytes && !shut) {
			if (shutdown(fd, SHUT_WR) != 0) {
				set_err(c, "shutdown(SHUT_WR) after %llu bytes: %s",
					(unsigned long long)sent, strerror(errno));
				break;
			}
			shut = 1;
		}
		if (!shut)
			p.events |= POLLOUT;
		if (poll(&p, 1, 1000) < 0 && errno != EINTR) {
			set_err(c, "poll: %s", strerror(errno));
			break;
		}
		if (!shut && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			if (out_pos == out_len) {
				uint64_t left = cl.bytes - sent;
				out_len = left < CHUNK ? (size_t)left : CHUNK;
				out_pos = 0;
				fill(cseed, sent, c->out, out_len);
				sha256_update(&sha_out, c->out, out_len);
			}
			ssize_t n = write(fd, c->out + out_pos, out_len - out_pos);
			if (n > 0) {
				out_pos += (size_t)n;
				sent += (uint64_t)n;
				progress = 1;
			} else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				set_err(c, "write after %llu bytes sent, %llu received: %s",
					(unsigned long long)sent, (unsigned long long)got,
					strerror(errno));
				break;
			}
		}
		if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
			ssize_t n = read(fd, c->in, CHUNK);
			if (n > 0) {
				size_t expect = got < cl.bytes ? (size_t)(cl.bytes - got < (uint64_t)n
					? cl.bytes - got : (uint64_t)n) : 0;
				fill(cseed, got, c->want, expect);
				if (bad_at == UINT64_MAX) {
					if (memcmp(c->in, c->want, expect) != 0) {
						size_t i = 0;
						while (c->in[i] == c->want[i])
							i++;
						bad_at = got + i;
					} else if (expect < (size_t)n) {
						bad_at = got + expect; /* more than was sent */
					}
				}
				sha256_update(&sha_in, c->in, (size_t)n);
				got += (uint64_t)n;
				progress = 1;
			} else if (n == 0) {
				eof = 1;
			} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				set_err(c, "read after %llu bytes sent, %llu received: %s",
					(unsigned long long)sent, (unsigned long long)got,
					strerror(errno));
				break;
			}
		}
		if (progress || eof) {
			last = mono_s();
		} else if (mono_s() - last > STALL_SECS) {
			set_err(c, "no progress for %d s (%llu bytes sent, %llu received, %s)",
				STALL_SECS, (unsigned long long)sent, (unsigned long long)got,
				shut ? "write side shut" : "still sending");
			break;
		}
	}
	if (fd >= 0 && close(fd) != 0)
		set_err(c, "close: %s", strerror(errno));
	/* Bytes never generated (an early failure) still count toward the sent digest. */
	while (sent < cl.bytes) {
		uint64_t left = cl.bytes - sent;
		size_t len = left < CHUNK ? (size_t)left : CHUNK;
		if (out_pos < out_len) { /* the rest of a chunk already hashed */
			sent += out_len - out_pos;
			out_pos = out_len;
			continue;
		}
		fill(cseed, sent, c->out, len);
		sha256_update(&sha_out, c->out, len);
		sent += len;
	}
	sha256_final(&sha_out, d_out);
	sha256_final(&sha_in, d_in);
	sha256_hex(d_out, hex_out);
	sha256_hex(d_in, hex_in);
	if (!c->err[0] && got != cl.bytes)
		set_err(c, "echo has %llu bytes, sent %llu", (unsigned long long)got,
			(unsigned long long)cl.bytes);
	if (!c->err[0] && memcmp(d_out, d_in, sizeof(d_out)) != 0)
		set_err(c, "echo sha256 differs from the sent bytes' %s", hex_out);
	if (bad_at != UINT64_MAX) {
		char first[64];
		snprintf(first, sizeof(first), "; first wrong byte at offset %llu",
			 (unsigned long long)bad_at);
		strncat(c->err, first, sizeof(c->err) - strlen(c->err) - 1);
	}
	ok = !c->err[0] && bad_at == UINT64_MAX;
	pthread_mutex_lock(&cl.out_lock);
	printf("conn %d bytes=%llu sha256=%s %s\n", index, (unsigned long long)got, hex_in,
	       ok ? "ok" : "BAD");
	fflush(stdout);
	if (!ok)
		fprintf(stderr, "forkecho: conn %d: %s (sent sha256=%s)\n", index,
			c->err[0] ? c->err : "echo differs from the sent bytes", hex_out);
	pthread_mutex_unlock(&cl.out_lock);
	return ok;
}

static void *worker_main(void *arg)
{
	struct conn_state c;

	(void)arg;
	c.out = malloc(CHUNK);
	c.in = malloc(CHUNK);
	c.want = malloc(CHUNK);
	if (!c.out || !c.in || !c.want)
		die("malloc");
	for (;;) {
		int i = atomic_fetch_add(&cl.next, 1);
		if (i >= cl.conns)
			break;
		if (run_conn(&c, i + 1))
			atomic_fetch_add(&cl.ok, 1);
	}
	free(c.out);
	free(c.in);
	free(c.want);
	return NULL;
}

static int client(const char *host, const char *port, int conns, int parallel)
{
	pthread_t *threads;
	int started = 0, ok;

	cl.ai = resolve(host, port, 0);
	cl.host = host;
	cl.port = port;
	cl.conns = conns;
	if (parallel > conns)
		parallel = conns;
	threads = calloc((size_t)parallel, sizeof(*threads));
	if (!threads)
		die("malloc");
	for (int i = 0; i < parallel; i++) {
		int err = pthread_create(&threads[i], NULL, worker_main, NULL);
		if (err) {
			fprintf(stderr, "forkecho: pthread_create: %s (running %d threads)\n",
				strerror(err), started);
			if (started == 0)
				exit(1);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	freeaddrinfo(cl.ai);
	ok = atomic_load(&cl.ok);
	printf("forkecho: %d/%d ok\n", ok, conns);
	fflush(stdout);
	return ok == conns ? 0 : 1;
}

/* --- options ---------------------------------------------------------------- */

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		goto bad;
	switch (*end) {
	case '\0': return v;
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	default: goto bad;
	}
	if (end[1] == '\0')
		return v;
bad:
	fprintf(stderr, "forkecho: bad size '%s' (a number of bytes, optional k, M or G)\n", s);
	exit(2);
}

static int parse_int(const char *s, const char *what, int min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > 1000000) {
		fprintf(stderr, "forkecho: bad %s '%s'\n", what, s);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	const char *listen_port = NULL, *addr = NULL, *host = NULL, *port = NULL;
	int c, exec_mode = 0, count = -1, parallel = 1;

	signal(SIGPIPE, SIG_IGN);
	cl.bytes = 65536;
	cl.seed = 1;
	while ((c = getopt(argc, argv, "s:a:xX:n:d:w:c:p:j:b:S:")) != -1) {
		switch (c) {
		case 's': listen_port = optarg; break;
		case 'a': addr = optarg; break;
		case 'x': exec_mode = ECHO_FORK_EXEC; break;
		case 'X':
			if (strcmp(optarg, "spawn") != 0 && strcmp(optarg, "system") != 0)
				usage();
			exec_mode = strcmp(optarg, "spawn") == 0 ? ECHO_SPAWN : ECHO_SYSTEM;
			break;
		case 'n': count = parse_int(optarg, "-n", 0); break;
		case 'd': fork_delay_ms = parse_int(optarg, "-d", 0); break;
		case 'w': prefork_workers = parse_int(optarg, "-w", 1); break; /* (<= 64) */
		case 'c': host = optarg; break;
		case 'p': port = optarg; break;
		case 'j': parallel = parse_int(optarg, "-j", 1); break;
		case 'b': cl.bytes = parse_size(optarg); break;
		case 'S': cl.seed = parse_size(optarg); break;
		default: usage();
		}
	}
	if (optind != argc || (!listen_port == !host))
		usage();
	if (listen_port) {
		parse_int(listen_port, "port", 1);
		if (prefork_workers > 64 || (prefork_workers && (count < 1 || exec_mode)))
			usage();
		return server(addr, listen_port, count < 0 ? 0 : count, exec_mode);
	}
	if (!port)
		usage();
	parse_int(port, "port", 1);
	if (count < 0)
		count = 1;
	if (count < 1)
		usage();
	return client(host, port, count, parallel);
}

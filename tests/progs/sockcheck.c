/* sockcheck: app-behaviour scenarios (half-close, fork/thread servers, sendfile, inetd, exec
 * inheritance, exec without fork, a child's own connections, IPv6, recv with MSG_TRUNC), every byte checked by SHA-256 or compared.
 * Usage: sockcheck SCENARIO ADDR PORT */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sha256.h"

#define GUARD_SECS     30
#define PAYLOAD_BYTES  (1u << 20)
#define SENDFILE_BYTES (64u << 20)
#define CHILD_SCENARIO "serve-fd3" /* what execinherit re-executes itself as */
#define CHILD_NAME     "sockcheck-child"

static const char *scenario = "?";
static pid_t main_pid;
static char alarm_msg[128];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", scenario);
	if (getpid() != main_pid)
		printf("[pid %d] ", (int)getpid());
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)
#define ERR strerror(errno)

static void on_alarm(int sig)
{
	(void)sig;
	if (write(STDOUT_FILENO, alarm_msg, strlen(alarm_msg)) < 0)
		_exit(1);
	_exit(1);
}

static void guard(void)
{
	snprintf(alarm_msg, sizeof(alarm_msg), "FAIL %s: [pid %d] still running after %d s\n",
		 scenario, (int)getpid(), GUARD_SECS);
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);
}

/* --- addresses and sockets ------------------------------------------------ */

struct endpoint {
	struct sockaddr_storage addr;
	socklen_t len;
	int family;
};

static void parse_endpoint(const char *host, const char *port, struct endpoint *ep)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	int err = getaddrinfo(host, port, &hints, &ai);

	CHECK(err == 0, "bad address %s port %s: %s", host, port, gai_strerror(err));
	memcpy(&ep->addr, ai->ai_addr, ai->ai_addrlen);
	ep->len = ai->ai_addrlen;
	ep->family = ai->ai_family;
	freeaddrinfo(ai);
}

static bool is_v6_wildcard(const struct endpoint *ep)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ep->addr;

	return ep->family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
}

/* Listens on ep; a [::] listener also takes IPv4 connections. */
static int listen_on(const struct endpoint *ep)
{
	int one = 1, zero = 0, fd = socket(ep->family, SOCK_STREAM, 0);

	CHECK(fd >= 0, "socket: %s", ERR);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (is_v6_wildcard(ep))
		CHECK(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0,
		      "IPV6_V6ONLY: %s", ERR);
	CHECK(bind(fd, (const struct sockaddr *)&ep->addr, ep->len) == 0, "bind: %s", ERR);
	CHECK(listen(fd, 64) == 0, "listen: %s", ERR);
	return fd;
}

static int connect_to(const struct endpoint *ep)
{
	int fd = socket(ep->family, SOCK_STREAM, 0);

	CHECK(fd >= 0, "socket: %s", ERR);
	CHECK(connect(fd, (const struct sockaddr *)&ep->addr, ep->len) == 0, "connect: %s", ERR);
	return fd;
}

static int accept_one(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	CHECK(fd >= 0, "accept: %s", ERR);
	return fd;
}

static void write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0, "write: %s", n < 0 ? ERR : "wrote 0 bytes");
		p += n;
		len -= (size_t)n;
	}
}

/* Reads until EOF into buf (at most cap bytes); returns the count. */
static size_t read_to_eof(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;

	for (;;) {
		ssize_t n = read(fd, buf + got, cap - got);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n >= 0, "read: %s", ERR);
		if (n == 0)
			return got;
		got += (size_t)n;
		CHECK(got < cap, "more than %zu bytes before EOF", cap - 1);
	}
}

/* --- payloads and digests ------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint8_t *payload_new(uint64_t seed, size_t len)
{
	uint8_t *buf = malloc(len + 8);

	CHECK(buf, "malloc %zu bytes failed", len);
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = splitmix(&seed);
		memcpy(buf + i, &w, 8);
	}
	return buf;
}

static void digest_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1])
{
	uint8_t d[SHA256_DIGEST_LEN];

	sha256(data, len, d);
	sha256_hex(d, hex);
}

/* Connection sizes differ (and are odd) so a mix-up cannot go unnoticed. */
static size_t payload_len(uint64_t seed)
{
	return PAYLOAD_BYTES + (size_t)(seed * 4099 % 65521);
}

/* --- the exchange: the client sends a payload and half-closes; the server
 * reads to EOF and replies, then closes ----------------------------------- */

enum reply {
	REPLY_DIGEST,      /* "HEX\n" (or sha256sum's "HEX  -\n") */
	REPLY_ECHO,        /* the payload back */
	REPLY_DIGEST_ECHO, /* "HEX\n" then the payload back */
};

struct sender {
	int fd;
	const uint8_t *payload;
	size_t len;
};

static void *sender_main(void *p)
{
	struct sender *s = p;
	char c = 'x';

	write_all(s->fd, s->payload, s->len);
	CHECK(shutdown(s->fd, SHUT_WR) == 0, "shutdown(SHUT_WR): %s", ERR);
	errno = 0;
	CHECK(send(s->fd, &c, 1, MSG_NOSIGNAL) < 0 && errno == EPIPE,
	      "send after shutdown(SHUT_WR): want EPIPE, got %s", errno ? ERR : "success");
	return NULL;
}

static void check_digest_line(const char *reply, size_t n, const char *want_hex)
{
	CHECK(n >= SHA256_HEX_LEN + 1, "reply of %zu bytes is too short for a digest", n);
	CHECK(memcmp(reply, want_hex, SHA256_HEX_LEN) == 0,
	      "the server's digest %.64s differs from the payload's %s", reply, want_hex);
	CHECK((n == SHA256_HEX_LEN + 1 && reply[SHA256_HEX_LEN] == '\n') ||
	      (n == SHA256_HEX_LEN + 4 && !memcmp(reply + SHA256_HEX_LEN, "  -\n", 4)),
	      "unexpected text after the digest (%zu bytes in all)", n);
}

static void check_reply(enum reply kind, const uint8_t *payload, size_t len, const uint8_t *reply,
			size_t n)
{
	char want[SHA256_HEX_LEN + 1], got[SHA256_HEX_LEN + 1];
	size_t head = kind == REPLY_DIGEST_ECHO ? SHA256_HEX_LEN + 1 : 0;

	digest_hex(payload, len, want);
	if (kind == REPLY_DIGEST) {
		check_digest_line((const char *)reply, n, want);
		return;
	}
	if (kind == REPLY_DIGEST_ECHO)
		check_digest_line((const char *)reply, n < head ? n : head, want);
	CHECK(n - head == len, "echo of %zu bytes, %zu were sent", n - head, len);
	digest_hex(reply + head, n - head, got);
	CHECK(!strcmp(got, want), "echo sha256 %s, sent %s", got, want);
}

/* One client connection: send seed's payload concurrently with reading the
 * reply to EOF, then verify the reply. */
static void run_client(const struct endpoint *ep, uint64_t seed, enum reply kind)
{
	size_t len = payload_len(seed), cap = len + 256;
	uint8_t *payload = payload_new(seed, len), *reply = malloc(cap);
	struct sender s = { connect_to(ep), payload, len };
	pthread_t thread;
	size_t n;

	CHECK(reply, "malloc failed");
	CHECK(pthread_create(&thread, NULL, sender_main, &s) == 0, "pthread_create failed");
	n = read_to_eof(s.fd, reply, cap);
	pthread_join(thread, NULL);
	check_reply(kind, payload, len, reply, n);
	close(s.fd);
	free(payload);
	free(reply);
}

/* After the peer's FIN: readable (EOF), RDHUP, and still writable. */
static void check_half_closed(int fd)
{
	struct pollfd p = { fd, POLLIN | POLLOUT | POLLRDHUP, 0 };
	char c;

	CHECK(poll(&p, 1, 5000) == 1, "poll after EOF: %s", ERR);
	CHECK(p.revents == (POLLIN | POLLOUT | POLLRDHUP),
	      "revents 0x%x after the peer's shutdown(SHUT_WR), expected IN|OUT|RDHUP", p.revents);
	CHECK(read(fd, &c, 1) == 0, "EOF is not sticky");
}

/* The server side of one exchange on fd; closes fd. */
static void serve(int fd, enum reply kind)
{
	size_t cap = 2 * PAYLOAD_BYTES, n;
	uint8_t *buf = malloc(cap);
	char hex[SHA256_HEX_LEN + 2];

	CHECK(buf, "malloc failed");
	n = read_to_eof(fd, buf, cap);
	if (kind == REPLY_DIGEST_ECHO)
		check_half_closed(fd);
	digest_hex(buf, n, hex);
	strcat(hex, "\n");
	if (kind != REPLY_ECHO)
		write_all(fd, hex, SHA256_HEX_LEN + 1);
	if (kind != REPLY_DIGEST)
		write_all(fd, buf, n);
	CHECK(shutdown(fd, SHUT_WR) == 0, "server shutdown(SHUT_WR): %s", ERR);
	CHECK(read(fd, buf, 1) == 0, "no EOF after replying");
	close(fd);
	free(buf);
}

/* --- servers in threads --------------------------------------------------- */

struct thread_server {
	pthread_t thread;
	int lfd, count;
	enum reply kind;
	bool thread_per_conn;
};

struct conn_job {
	int fd;
	enum reply kind;
};

static void *conn_main(void *p)
{
	struct conn_job *job = p;

	serve(job->fd, job->kind);
	free(job);
	return NULL;
}

static void *acceptor_main(void *p)
{
	struct thread_server *ts = p;
	pthread_t threads[64];

	CHECK(ts->count <= 64, "too many connections");
	for (int i = 0; i < ts->count; i++) {
		struct conn_job *job = malloc(sizeof(*job));
		CHECK(job, "malloc failed");
		job->fd = accept_one(ts->lfd);
		job->kind = ts->kind;
		if (!ts->thread_per_conn) {
			conn_main(job);
			continue;
		}
		CHECK(pthread_create(&threads[i], NULL, conn_main, job) == 0, "pthread_create");
	}
	for (int i = 0; ts->thread_per_conn && i < ts->count; i++)
		pthread_join(threads[i], NULL);
	return NULL;
}

static void thread_server_start(struct thread_server *ts, const struct endpoint *ep, int count,
				enum reply kind, bool thread_per_conn)
{
	ts->lfd = listen_on(ep);
	ts->count = count;
	ts->kind = kind;
	ts->thread_per_conn = thread_per_conn;
	CHECK(pthread_create(&ts->thread, NULL, acceptor_main, ts) == 0, "pthread_create failed");
}

static void thread_server_join(struct thread_server *ts)
{
	pthread_join(ts->thread, NULL);
	close(ts->lfd);
}

/* --- processes ------------------------------------------------------------ */

static void expect_child_ok(pid_t pid, const char *what)
{
	int status;

	CHECK(waitpid(pid, &status, 0) == pid, "waitpid %s: %s", what, ERR);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s (pid %d) ended with %s %d", what,
	      (int)pid, WIFEXITED(status) ? "exit" : "signal",
	      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* fork(); in the child, runs fn(arg) and exits 0 (exit, so atexit handlers run). */
static pid_t spawn(void (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	CHECK(pid >= 0, "fork: %s", ERR);
	if (pid == 0) {
		guard();
		fn(arg);
		fflush(stdout);
		exit(0);
	}
	return pid;
}

/* --- scenarios ------------------------------------------------------------ */

static void scenario_halfclose(const struct endpoint *ep)
{
	struct thread_server ts;

	thread_server_start(&ts, ep, 2, REPLY_DIGEST_ECHO, false);
	run_client(ep, 11, REPLY_DIGEST_ECHO);
	run_client(ep, 12, REPLY_DIGEST_ECHO);
	thread_server_join(&ts);
}

struct client_thread {
	pthread_t thread;
	const struct endpoint *ep;
	uint64_t seed;
	enum reply kind;
};

static void *client_thread_main(void *p)
{
	struct client_thread *ct = p;

	run_client(ct->ep, ct->seed, ct->kind);
	return NULL;
}

static void run_concurrent_clients(const struct endpoint *ep, int count, uint64_t first_seed)
{
	struct client_thread ct[16];

	CHECK(count <= 16, "too many clients");
	for (int i = 0; i < count; i++) {
		ct[i] = (struct client_thread){ .ep = ep, .seed = first_seed + (uint64_t)i,
						.kind = REPLY_DIGEST };
		CHECK(pthread_create(&ct[i].thread, NULL, client_thread_main, &ct[i]) == 0,
		      "pthread_create failed");
	}
	for (int i = 0; i < count; i++)
		pthread_join(ct[i].thread, NULL);
}

#define FORK_SEQUENTIAL 20
#define FORK_CONCURRENT 5

static void forkserver_clients(void *arg)
{
	const struct endpoint *ep = arg;

	for (int i = 0; i < FORK_SEQUENTIAL; i++)
		run_client(ep, 100 + (uint64_t)i, REPLY_DIGEST);
	run_concurrent_clients(ep, FORK_CONCURRENT, 200);
}

struct fork_job {
	int lfd, fd;
};

static void forkserver_child(void *arg)
{
	struct fork_job *job = arg;

	close(job->lfd);
	serve(job->fd, REPLY_DIGEST);
}

static void scenario_forkserver(const struct endpoint *ep)
{
	const int total = FORK_SEQUENTIAL + FORK_CONCURRENT;
	int lfd = listen_on(ep);
	pid_t clients, servers[FORK_SEQUENTIAL + FORK_CONCURRENT];

	clients = spawn(forkserver_clients, (void *)ep);
	for (int i = 0; i < total; i++) {
		struct fork_job job = { lfd, accept_one(lfd) };
		servers[i] = spawn(forkserver_child, &job);
		close(job.fd); /* the parent's copy; the child serves */
	}
	close(lfd);
	for (int i = 0; i < total; i++)
		expect_child_ok(servers[i], "a forked server");
	expect_child_ok(clients, "the client process");
}

static void scenario_threadserver(const struct endpoint *ep)
{
	struct thread_server ts;

	thread_server_start(&ts, ep, 8, REPLY_DIGEST, true);
	run_concurrent_clients(ep, 8, 300);
	thread_server_join(&ts);
}

/* --- sendfile ------------------------------------------------------------- */

struct big_file {
	int fd;
	size_t size;
	char hex[SHA256_HEX_LEN + 1];
};

static void big_file_create(struct big_file *f)
{
	const char *dir = getenv("TMPDIR");
	char path[512];
	uint8_t *data = payload_new(400, SENDFILE_BYTES);

	snprintf(path, sizeof(path), "%s/sockcheck-sendfile-XXXXXX", dir && *dir ? dir : "/tmp");
	f->fd = mkstemp(path);
	CHECK(f->fd >= 0, "mkstemp %s: %s", path, ERR);
	unlink(path);
	write_all(f->fd, data, SENDFILE_BYTES);
	f->size = SENDFILE_BYTES;
	digest_hex(data, SENDFILE_BYTES, f->hex);
	free(data);
}

static off_t file_position(int fd)
{
	return lseek(fd, 0, SEEK_CUR);
}

/* sendfile() with an explicit offset: the file position must not move. */
static void send_with_offset(int sock, const struct big_file *f)
{
	off_t off = 0, before = file_position(f->fd);

	while ((size_t)off < f->size) {
		ssize_t n = sendfile(sock, f->fd, &off, f->size - (size_t)off);
		CHECK(n > 0, "sendfile: %s", n < 0 ? ERR : "sent 0");
	}
	CHECK(file_position(f->fd) == before, "sendfile with an offset moved the file position");
}

/* sendfile64() from the file position: the position must end at the end. */
static void send_from_position(int sock, const struct big_file *f)
{
	size_t done = 0;

	CHECK(lseek(f->fd, 0, SEEK_SET) == 0, "lseek: %s", ERR);
	while (done < f->size) {
		ssize_t n = sendfile64(sock, f->fd, NULL, f->size - done);
		CHECK(n > 0, "sendfile64: %s", n < 0 ? ERR : "sent 0");
		done += (size_t)n;
	}
	CHECK(file_position(f->fd) == (off_t)f->size, "sendfile64 left the file position at %lld",
	      (long long)file_position(f->fd));
}

struct sendfile_server {
	int lfd;
	const struct big_file *file;
};

static void *sendfile_server_main(void *p)
{
	struct sendfile_server *ss = p;
	int fd = accept_one(ss->lfd);

	send_with_offset(fd, ss->file);
	close(fd);
	fd = accept_one(ss->lfd);
	send_from_position(fd, ss->file);
	close(fd);
	return NULL;
}

static void receive_file(const struct endpoint *ep, const struct big_file *f, const char *how)
{
	int fd = connect_to(ep);
	uint8_t *buf = malloc(f->size + 1);
	char hex[SHA256_HEX_LEN + 1];
	size_t n;

	CHECK(buf, "malloc failed");
	n = read_to_eof(fd, buf, f->size + 1);
	digest_hex(buf, n, hex);
	CHECK(n == f->size, "%s: received %zu bytes of %zu", how, n, f->size);
	CHECK(!strcmp(hex, f->hex), "%s: received sha256 %s, the file has %s", how, hex, f->hex);
	close(fd);
	free(buf);
}

static void scenario_sendfile(const struct endpoint *ep)
{
	struct big_file f;
	struct sendfile_server ss = { listen_on(ep), &f };
	pthread_t server;

	big_file_create(&f);
	CHECK(pthread_create(&server, NULL, sendfile_server_main, &ss) == 0, "pthread_create");
	receive_file(ep, &f, "sendfile with an offset");
	receive_file(ep, &f, "sendfile64 from the file position");
	pthread_join(server, NULL);
	close(ss.lfd);
	close(f.fd);
}

/* --- inetd and exec inheritance ------------------------------------------- */

struct exec_job {
	int lfd, fd;
	int target_fds[2]; /* where the socket goes in the child (-1: unused) */
	const char *path;
	char *const *argv;
};

static void exec_with_socket(void *arg)
{
	struct exec_job *job = arg;

	close(job->lfd); /* first: it may sit on a target fd */
	for (int i = 0; i < 2; i++)
		if (job->target_fds[i] >= 0)
			CHECK(dup2(job->fd, job->target_fds[i]) == job->target_fds[i], "dup2: %s",
			      ERR);
	if (job->fd != job->target_fds[0] && job->fd != job->target_fds[1])
		close(job->fd);
	execv(job->path, job->argv);
	fail("exec %s: %s", job->path, ERR);
}

struct exec_client {
	const struct endpoint *ep;
	int lfd;
	uint64_t seed;
	enum reply kind;
};

static void exec_client_main(void *arg)
{
	struct exec_client *c = arg;

	close(c->lfd);
	run_client(c->ep, c->seed, c->kind);
}

/* A client process talks to whatever the forked child exec's on the socket;
 * the client runs in its own process so the child inherits only the server end. */
static void serve_by_exec(const struct endpoint *ep, int lfd, struct exec_job *job,
			  uint64_t seed, enum reply kind)
{
	struct exec_client client = { ep, lfd, seed, kind };
	pid_t client_pid, server_pid;

	client_pid = spawn(exec_client_main, &client);
	job->lfd = lfd;
	job->fd = accept_one(lfd);
	server_pid = spawn(exec_with_socket, job);
	close(job->fd);
	expect_child_ok(server_pid, job->path);
	expect_child_ok(client_pid, "the client process");
}

static void scenario_inetd(const struct endpoint *ep)
{
	char *digest_argv[] = { "/bin/sh", "-c", "sha256sum", NULL };
	char *cat_argv[] = { "/bin/cat", NULL };
	struct exec_job digest = { .target_fds = { 0, 1 }, .path = "/bin/sh", .argv = digest_argv };
	struct exec_job cat = { .target_fds = { 0, 1 }, .path = "/bin/cat", .argv = cat_argv };
	int lfd = listen_on(ep);

	serve_by_exec(ep, lfd, &digest, 500, REPLY_DIGEST);
	serve_by_exec(ep, lfd, &cat, 501, REPLY_ECHO);
	close(lfd);
}

static void scenario_execinherit(const struct endpoint *ep)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *self_argv[] = { CHILD_NAME, CHILD_SCENARIO, NULL };
	char *sh_argv[] = { "/bin/sh", "-c", "sha256sum <&3 >&3", NULL };
	struct exec_job reexec = { .target_fds = { 3, -1 }, .path = self, .argv = self_argv };
	struct exec_job shell = { .target_fds = { 3, -1 }, .path = "/bin/sh", .argv = sh_argv };
	int lfd = listen_on(ep);

	CHECK(n > 0, "readlink /proc/self/exe: %s", ERR);
	self[n] = '\0';
	serve_by_exec(ep, lfd, &reexec, 600, REPLY_DIGEST);
	serve_by_exec(ep, lfd, &shell, 601, REPLY_DIGEST);
	close(lfd);
}

/* execnofork: the process that holds the connection execs, with no fork
 * first: it echoes the first EXEC_HEAD bytes itself, then puts the socket on
 * fd 3 and becomes sh -c 'exec cat <&3 >&3', which echoes the rest.  One
 * connection for each of glibc's exec functions. */
#define EXEC_HEAD (256u << 10)

enum exec_fn { BY_EXECV, BY_EXECVP, BY_EXECVPE, BY_EXECL, BY_EXECLP, BY_EXECLE, BY_FEXECVE,
	       BY_EXECVEAT, BY_EXEC_FNS };
static const char *const exec_fn_names[BY_EXEC_FNS] = {
	"execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "execveat",
};

static void exec_cat_on_fd3(enum exec_fn fn)
{
	static const char script[] = "exec cat <&3 >&3";
	char *argv[] = { "sh", "-c", (char *)script, NULL };
	extern char **environ;
	int shfd;

	switch (fn) {
	case BY_EXECV: execv("/bin/sh", argv); break;
	case BY_EXECVP: execvp("sh", argv); break;
	case BY_EXECVPE: execvpe("sh", argv, environ); break;
	case BY_EXECL: execl("/bin/sh", "sh", "-c", script, (char *)NULL); break;
	case BY_EXECLP: execlp("sh", "sh", "-c", script, (char *)NULL); break;
	case BY_EXECLE: execle("/bin/sh", "sh", "-c", script, (char *)NULL, environ); break;
	case BY_FEXECVE:
		shfd = open("/bin/sh", O_RDONLY | O_CLOEXEC);
		CHECK(shfd >= 0, "open /bin/sh: %s", ERR);
		fexecve(shfd, argv, environ);
		break;
	case BY_EXECVEAT: execveat(AT_FDCWD, "/bin/sh", argv, environ, 0); break;
	default: break;
	}
	fail("%s of /bin/sh: %s", exec_fn_names[fn], ERR);
}

static const struct endpoint *exec_launch_ep;

struct exec_server {
	const struct endpoint *ep;
	int ready_fd; /* written once this process listens */
	enum exec_fn fn;
};

/* The server process listens itself: a listener inherited through fork
 * belongs to the parent, which would keep its channels. */
static void echo_head_then_exec(void *arg)
{
	struct exec_server *es = arg;
	uint8_t *head = malloc(EXEC_HEAD);
	size_t got = 0;
	int lfd = listen_on(es->ep), fd;

	CHECK(head, "malloc failed");
	CHECK(write(es->ready_fd, "L", 1) == 1, "write to the client: %s", ERR);
	close(es->ready_fd);
	fd = accept_one(lfd);
	close(lfd);
	while (got < EXEC_HEAD) {
		ssize_t n = read(fd, head + got, EXEC_HEAD - got);

		CHECK(n > 0, "read of the first bytes: %s", n == 0 ? "EOF" : ERR);
		got += (size_t)n;
	}
	write_all(fd, head, EXEC_HEAD);
	free(head);
	usleep(300 * 1000); /* the QP lives long enough to be seen by `rdma resource show qp` */
	if (fd != 3) {
		CHECK(dup2(fd, 3) == 3, "dup2: %s", ERR);
		close(fd);
	}
	exec_cat_on_fd3(es->fn);
}

/* Forks each server in turn, from a process that never used RDMA: a child
 * of one that did cannot use the device contexts librdmacm opened before
 * the fork, and its connections would stay on TCP. */
static void launch_exec_servers(void *arg)
{
	int ready_fd = *(int *)arg;
	int failed = 0;

	for (int fn = 0; fn < BY_EXEC_FNS; fn++) {
		struct exec_server es = { NULL, ready_fd, fn };
		pid_t pid;
		int status;

		es.ep = exec_launch_ep;
		pid = fork();
		CHECK(pid >= 0, "fork: %s", ERR);
		if (pid == 0)
			echo_head_then_exec(&es);
		CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", ERR);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "sockcheck: the %s server ended with status 0x%x\n",
				exec_fn_names[fn], status);
			failed++;
		}
	}
	CHECK(failed == 0, "%d exec'd servers failed", failed);
}

static void scenario_execnofork(const struct endpoint *ep)
{
	int ready[2];
	pid_t launcher;

	CHECK(pipe(ready) == 0, "pipe: %s", ERR);
	exec_launch_ep = ep;
	launcher = spawn(launch_exec_servers, &ready[1]);
	close(ready[1]);
	for (int fn = 0; fn < BY_EXEC_FNS; fn++) {
		char c;

		CHECK(read(ready[0], &c, 1) == 1, "the %s server did not listen", exec_fn_names[fn]);
		run_client(ep, 700 + (uint64_t)fn, REPLY_ECHO);
	}
	close(ready[0]);
	expect_child_ok(launcher, "the process that forks the exec'd servers");
}

/* forkchild: a process that already used RDMA forks, and the child makes
 * and accepts connections of its own; so does the child's child.  Each
 * generation listens on a port of its own. */
#define FORK_GENERATIONS 3

static struct endpoint port_after(const struct endpoint *ep, int offset);

/* On ep's address and a port the kernel picks (no other listener can hold it). */
static void exchange_in_process(const struct endpoint *ep, uint64_t seed)
{
	struct thread_server ts;
	struct endpoint any = port_after(ep, 0), bound;
	in_port_t *port = ep->family == AF_INET6 ? &((struct sockaddr_in6 *)&any.addr)->sin6_port
						 : &((struct sockaddr_in *)&any.addr)->sin_port;

	*port = 0;
	thread_server_start(&ts, &any, 2, REPLY_DIGEST_ECHO, false);
	bound = any;
	CHECK(getsockname(ts.lfd, (struct sockaddr *)&bound.addr, &bound.len) == 0,
	      "getsockname: %s", ERR);
	run_client(&bound, seed, REPLY_DIGEST_ECHO);
	run_client(&bound, seed + 1, REPLY_DIGEST_ECHO);
	thread_server_join(&ts);
}

static struct endpoint port_after(const struct endpoint *ep, int offset)
{
	struct endpoint next = *ep;
	in_port_t *port = ep->family == AF_INET6 ? &((struct sockaddr_in6 *)&next.addr)->sin6_port
						 : &((struct sockaddr_in *)&next.addr)->sin_port;

	*port = htons((in_port_t)(ntohs(*port) + offset));
	return next;
}

static const struct endpoint *fork_base_ep;

static void generation_main(void *arg)
{
	int generation = *(int *)arg;

	exchange_in_process(fork_base_ep, 800 + 10 * (uint64_t)generation);
	if (generation + 1 < FORK_GENERATIONS) {
		int next = generation + 1;

		expect_child_ok(spawn(generation_main, &next), "the forked child");
	}
}

static void scenario_forkchild(const struct endpoint *ep)
{
	int first = 0;

	fork_base_ep = ep;
	generation_main(&first);
}

/* The re-executed image: fd 3 is a connected TCP socket it inherited. */
static int inherited_child_main(void)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	int type = 0;
	socklen_t tlen = sizeof(type);

	scenario = "execinherit";
	guard();
	CHECK(getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_STREAM,
	      "fd 3 is not an inherited stream socket: %s", ERR);
	CHECK(getpeername(3, (struct sockaddr *)&peer, &len) == 0, "getpeername(3): %s", ERR);
	serve(3, REPLY_DIGEST);
	return 0;
}

/* --- IPv6 ----------------------------------------------------------------- */

static void check_family(int fd, int family)
{
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);

	CHECK(getsockname(fd, (struct sockaddr *)&local, &llen) == 0 &&
	      getpeername(fd, (struct sockaddr *)&peer, &plen) == 0, "get*name: %s", ERR);
	CHECK(local.ss_family == family && peer.ss_family == family,
	      "address families %d/%d, expected %d", local.ss_family, peer.ss_family, family);
}

static void *v6_server_main(void *p)
{
	int *lfd = p, fd = accept_one(*lfd);

	check_family(fd, AF_INET6);
	serve(fd, REPLY_DIGEST_ECHO);
	return NULL;
}

static void v6_exchange(const struct endpoint *ep)
{
	int lfd = listen_on(ep);
	pthread_t server;

	CHECK(pthread_create(&server, NULL, v6_server_main, &lfd) == 0, "pthread_create");
	run_client(ep, 700, REPLY_DIGEST_ECHO);
	pthread_join(server, NULL);
	close(lfd);
}

/* A dual-stack [::] listener reached over IPv4: the server sees ::ffff:a.b.c.d. */
static void v4_mapped_exchange(const struct endpoint *ep)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ep->addr;
	struct endpoint any, v4;
	char port[16];
	struct thread_server ts;

	snprintf(port, sizeof(port), "%u", ntohs(a6->sin6_port));
	parse_endpoint("::", port, &any);
	parse_endpoint("127.0.0.1", port, &v4);
	thread_server_start(&ts, &any, 1, REPLY_DIGEST, false);
	run_client(&v4, 701, REPLY_DIGEST);
	thread_server_join(&ts);
}

static void scenario_ipv6(const struct endpoint *ep)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ep->addr;

	CHECK(ep->family == AF_INET6, "the ipv6 scenario needs an IPv6 ADDR such as ::1");
	v6_exchange(ep);
	if (IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr))
		v4_mapped_exchange(ep);
}

/* --- recv with MSG_TRUNC --------------------------------------------------- */

/* TCP's MSG_TRUNC discards: recv returns the count and writes nothing (the
 * buffer may be NULL).  Each step's bytes are sent only after the reader has
 * asked for them and had time to block, so a blocking recv waits with nothing
 * buffered (the zero-copy receive path, on RDMA), and with MSG_WAITALL, after
 * part of the bytes came (a wait with bytes already discarded). */
#define TRUNC_DELAY_US 100000
#define TRUNC_TAIL     4099

struct trunc_step {
	size_t first, second; /* bytes the server writes, the second part after a pause */
};

static const struct trunc_step trunc_steps[] = {
	{ 1000, 0 },    /* recv(fd, NULL, 1000, MSG_TRUNC) */
	{ 1000, 2000 }, /* recv(fd, NULL, 3000, MSG_TRUNC | MSG_WAITALL) */
	{ 500, 0 },     /* recv(fd, canary, 500, MSG_TRUNC): the buffer stays untouched */
	{ 1, 0 },       /* recv(fd, NULL, 1, MSG_TRUNC | MSG_DONTWAIT) after poll */
};

struct trunc_server {
	int lfd;
	const uint8_t *payload;
};

static void *trunc_server_main(void *p)
{
	struct trunc_server *ts = p;
	int fd = accept_one(ts->lfd);
	size_t off = 0;
	char go;

	for (size_t i = 0; i < sizeof(trunc_steps) / sizeof(trunc_steps[0]); i++) {
		CHECK(read(fd, &go, 1) == 1, "server: no go byte for step %zu: %s", i, ERR);
		usleep(TRUNC_DELAY_US);
		write_all(fd, ts->payload + off, trunc_steps[i].first);
		off += trunc_steps[i].first;
		if (trunc_steps[i].second) {
			usleep(TRUNC_DELAY_US);
			write_all(fd, ts->payload + off, trunc_steps[i].second);
			off += trunc_steps[i].second;
		}
	}
	CHECK(read(fd, &go, 1) == 1, "server: no go byte for the tail: %s", ERR);
	write_all(fd, ts->payload + off, TRUNC_TAIL);
	CHECK(shutdown(fd, SHUT_WR) == 0, "server shutdown(SHUT_WR): %s", ERR);
	CHECK(read(fd, &go, 1) == 0, "server: no EOF from the client");
	close(fd);
	return NULL;
}

/* Discards want bytes with recv(.., flags | MSG_TRUNC) calls of the rest. */
static void trunc_discard(int fd, void *buf, size_t want, int flags, const char *what)
{
	size_t got = 0;

	while (got < want) {
		ssize_t n = recv(fd, buf, want - got, flags | MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0, "%s: recv(MSG_TRUNC) returned %zd after %zu of %zu bytes: %s", what, n,
		      got, want, n < 0 ? ERR : "EOF");
		CHECK((size_t)n <= want - got, "%s: recv(MSG_TRUNC) returned %zd, asked for %zu", what,
		      n, want - got);
		CHECK(!(flags & MSG_WAITALL) || (size_t)n == want - got,
		      "%s: MSG_WAITALL returned %zd of %zu", what, n, want - got);
		got += (size_t)n;
	}
}

static void scenario_trunc(const struct endpoint *ep)
{
	size_t total = TRUNC_TAIL;
	struct trunc_server ts;
	pthread_t server;
	uint8_t canary[500], *payload, *tail;
	struct pollfd pfd;
	int fd;

	for (size_t i = 0; i < sizeof(trunc_steps) / sizeof(trunc_steps[0]); i++)
		total += trunc_steps[i].first + trunc_steps[i].second;
	payload = payload_new(800, total);
	tail = malloc(TRUNC_TAIL + 1);
	CHECK(tail, "malloc failed");
	ts = (struct trunc_server){ listen_on(ep), payload };
	CHECK(pthread_create(&server, NULL, trunc_server_main, &ts) == 0, "pthread_create");
	fd = connect_to(ep);

	write_all(fd, "g", 1);
	trunc_discard(fd, NULL, 1000, 0, "blocking, NULL buffer");
	write_all(fd, "g", 1);
	trunc_discard(fd, NULL, 3000, MSG_WAITALL, "MSG_WAITALL, NULL buffer");
	write_all(fd, "g", 1);
	memset(canary, 0xa5, sizeof(canary));
	trunc_discard(fd, canary, sizeof(canary), 0, "blocking, a buffer");
	for (size_t i = 0; i < sizeof(canary); i++)
		CHECK(canary[i] == 0xa5, "recv(MSG_TRUNC) wrote into the buffer at byte %zu", i);
	write_all(fd, "g", 1);
	pfd = (struct pollfd){ fd, POLLIN, 0 };
	CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN), "poll: no byte to discard");
	trunc_discard(fd, NULL, 1, MSG_DONTWAIT, "MSG_DONTWAIT, NULL buffer");

	/* The stream goes on right after the discarded bytes. */
	write_all(fd, "g", 1);
	CHECK(read_to_eof(fd, tail, TRUNC_TAIL + 1) == TRUNC_TAIL, "the tail is not %u bytes",
	      TRUNC_TAIL);
	CHECK(memcmp(tail, payload + total - TRUNC_TAIL, TRUNC_TAIL) == 0,
	      "the bytes after the discarded ones differ from what was sent");
	close(fd);
	pthread_join(server, NULL);
	close(ts.lfd);
	free(payload);
	free(tail);
}

/* --- main ----------------------------------------------------------------- */

struct scenario {
	const char *name;
	void (*run)(const struct endpoint *ep);
};

static const struct scenario scenarios[] = {
	{ "halfclose", scenario_halfclose }, { "forkserver", scenario_forkserver },
	{ "threadserver", scenario_threadserver }, { "sendfile", scenario_sendfile },
	{ "inetd", scenario_inetd }, { "execinherit", scenario_execinherit },
	{ "execnofork", scenario_execnofork }, { "forkchild", scenario_forkchild },
	{ "ipv6", scenario_ipv6 }, { "trunc", scenario_trunc },
};

static int usage(void)
{
	fprintf(stderr, "usage: sockcheck SCENARIO ADDR PORT\n  SCENARIO:");
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		fprintf(stderr, " %s", scenarios[i].name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct endpoint ep;

	main_pid = getpid();
	signal(SIGPIPE, SIG_IGN);
	if (argc == 2 && !strcmp(argv[1], CHILD_SCENARIO))
		return inherited_child_main();
	if (argc != 4)
		return usage();
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (strcmp(argv[1], scenarios[i].name))
			continue;
		scenario = argv[1];
		guard();
		parse_endpoint(argv[2], argv[3], &ep);
		scenarios[i].run(&ep);
		printf("ok %s\n", scenario);
		return 0;
	}
	return usage();
}

/* readiness: checks the readiness semantics apps see on a TCP connection (epoll LT/ET/ONESHOT/
 * RDHUP, poll, ppoll, select, pselect, mixed fd sets, connects, one socket's life in an epoll
 * set, a socket joining a set another thread sleeps in).  Usage: readiness ADDR PORT CASE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define SHORT_MS   150   /* a wait that must time out: nothing is ready */
#define READY_MS   5000  /* a wait that must be cut short: something is ready */
#define PROMPT_MS  2000  /* "cut short" means returning within this */
#define LATER_MS   200   /* delay before a helper thread makes something ready */
#define GUARD_SECS 30

static const char *case_name = "?";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", case_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)
#define ERR strerror(errno)

static char alarm_msg[128];

static void on_alarm(int sig)
{
	(void)sig;
	if (write(STDOUT_FILENO, alarm_msg, strlen(alarm_msg)) < 0)
		_exit(1);
	_exit(1);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* --- endpoints and the connected pair ------------------------------------ */

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

static void set_nonblock(int fd)
{
	CHECK(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK: %s", ERR);
}

/* A socket bound to the endpoint with SO_REUSEADDR; listening if asked. */
static int bound_socket(const struct endpoint *ep, bool listening)
{
	int one = 1, fd = socket(ep->family, SOCK_STREAM, 0);

	CHECK(fd >= 0, "socket: %s", ERR);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(fd, (const struct sockaddr *)&ep->addr, ep->len) == 0, "bind: %s", ERR);
	if (listening)
		CHECK(listen(fd, 16) == 0, "listen: %s", ERR);
	return fd;
}

struct pair {
	int listener, client, server;
};

/* Blocking connect and accept; both ends are then made non-blocking. */
static void open_pair(const struct endpoint *ep, struct pair *p)
{
	p->listener = bound_socket(ep, true);
	p->client = socket(ep->family, SOCK_STREAM, 0);
	CHECK(p->client >= 0, "socket: %s", ERR);
	CHECK(connect(p->client, (const struct sockaddr *)&ep->addr, ep->len) == 0,
	      "blocking connect: %s", ERR);
	p->server = accept(p->listener, NULL, NULL);
	CHECK(p->server >= 0, "accept: %s", ERR);
	set_nonblock(p->client);
	set_nonblock(p->server);
}

/* --- byte flows: every byte is a function of (seed, offset) -------------- */

struct flow {
	uint64_t sent, received;
	uint8_t seed;
};

static uint8_t flow_byte(const struct flow *f, uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 8) * 7 + f->seed * 29);
}

static void wait_fd(int fd, short events)
{
	struct pollfd p = { fd, events, 0 };

	CHECK(poll(&p, 1, READY_MS) == 1, "fd %d not ready for 0x%x within %d ms", fd, events,
	      READY_MS);
}

static void flow_send(int fd, struct flow *f, size_t len)
{
	uint8_t buf[4096];

	CHECK(len <= sizeof(buf), "flow_send: %zu bytes is too many", len);
	for (size_t i = 0; i < len; i++)
		buf[i] = flow_byte(f, f->sent + i);
	for (size_t done = 0; done < len;) {
		ssize_t n = write(fd, buf + done, len - done);
		if (n < 0 && errno == EAGAIN) {
			wait_fd(fd, POLLOUT);
			continue;
		}
		CHECK(n > 0, "write: %s", n < 0 ? ERR : "wrote 0");
		done += (size_t)n;
	}
	f->sent += len;
}

/* One read of at most max bytes; returns its count (-1 on EAGAIN, 0 at EOF). */
static ssize_t flow_read_once(int fd, struct flow *f, size_t max)
{
	uint8_t buf[4096];
	ssize_t n = read(fd, buf, max < sizeof(buf) ? max : sizeof(buf));

	if (n < 0 && errno == EAGAIN)
		return -1;
	CHECK(n >= 0, "read: %s", ERR);
	for (ssize_t i = 0; i < n; i++)
		CHECK(buf[i] == flow_byte(f, f->received + (uint64_t)i),
		      "byte %llu of the stream is wrong",
		      (unsigned long long)(f->received + (uint64_t)i));
	f->received += (uint64_t)n;
	return n;
}

static void flow_recv_exact(int fd, struct flow *f, size_t len)
{
	while (len) {
		ssize_t n = flow_read_once(fd, f, len);
		if (n < 0) {
			wait_fd(fd, POLLIN);
			continue;
		}
		CHECK(n > 0, "EOF with %zu bytes still expected", len);
		len -= (size_t)n;
	}
}

/* Reads until EAGAIN; everything sent must have arrived by then. */
static void flow_drain(int fd, struct flow *f)
{
	ssize_t n;

	while ((n = flow_read_once(fd, f, 4096)) > 0)
		;
	CHECK(n < 0, "EOF while draining");
	CHECK(f->received == f->sent, "drained %llu bytes, %llu were sent",
	      (unsigned long long)f->received, (unsigned long long)f->sent);
}

/* --- doing something later, from a helper thread ------------------------- */

struct later {
	pthread_t thread;
	int delay_ms;
	void (*action)(void *);
	void *arg;
};

static void *later_main(void *p)
{
	struct later *l = p;

	sleep_ms(l->delay_ms);
	l->action(l->arg);
	return NULL;
}

static void later_start(struct later *l, void (*action)(void *), void *arg)
{
	l->delay_ms = LATER_MS;
	l->action = action;
	l->arg = arg;
	CHECK(pthread_create(&l->thread, NULL, later_main, l) == 0, "pthread_create failed");
}

static void later_join(struct later *l)
{
	pthread_join(l->thread, NULL);
}

struct send_job {
	int fd;
	struct flow *flow;
	size_t len;
};

static void send_job_run(void *p)
{
	struct send_job *j = p;

	flow_send(j->fd, j->flow, j->len);
}

/* --- epoll helpers -------------------------------------------------------- */

static int epoll_with(int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	CHECK(ep >= 0, "epoll_create1: %s", ERR);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "EPOLL_CTL_ADD: %s", ERR);
	return ep;
}

static void epoll_rearm(int ep, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == 0, "EPOLL_CTL_MOD: %s", ERR);
}

static void expect_epoll_none(int ep, const char *when)
{
	struct epoll_event ev[4];
	long long t0 = now_ms();
	int n = epoll_wait(ep, ev, 4, SHORT_MS);
	long long took = now_ms() - t0;

	CHECK(n >= 0, "%s: epoll_wait: %s", when, ERR);
	CHECK(n == 0, "%s: epoll_wait reported fd %d events 0x%x, expected nothing", when,
	      ev[0].data.fd, ev[0].events);
	CHECK(took >= SHORT_MS, "%s: epoll_wait timed out after %lld ms, before its %d ms", when,
	      took, SHORT_MS);
}

/* Exactly one event, for fd, with exactly the events want. */
static void expect_epoll_exact(int ep, int fd, uint32_t want, const char *when)
{
	struct epoll_event ev[4];
	long long t0 = now_ms();
	int n = epoll_wait(ep, ev, 4, READY_MS);

	CHECK(n >= 0, "%s: epoll_wait: %s", when, ERR);
	CHECK(n == 1, "%s: epoll_wait returned %d after %lld ms, expected 1 event", when, n,
	      now_ms() - t0);
	CHECK(ev[0].data.fd == fd, "%s: event for fd %d, expected fd %d", when, ev[0].data.fd, fd);
	CHECK(ev[0].events == want, "%s: events 0x%x, expected exactly 0x%x", when, ev[0].events,
	      want);
	CHECK(now_ms() - t0 < PROMPT_MS, "%s: the event took %lld ms", when, now_ms() - t0);
}

/* Waits (up to READY_MS) until the fd's events include the bits in want. */
static void wait_epoll_bits(int fd, uint32_t want, const char *when)
{
	int ep = epoll_with(fd, want);
	struct epoll_event ev;
	int n = epoll_wait(ep, &ev, 1, READY_MS);

	CHECK(n == 1 && (ev.events & want) == want, "%s: events 0x%x never showed up", when, want);
	close(ep);
}

/* --- epoll cases ---------------------------------------------------------- */

/* A new arrival after LATER_MS must cut a long wait short. */
static void expect_epoll_wakeup(int ep, struct pair *p, struct flow *up, uint32_t want)
{
	struct send_job job = { p->client, up, 300 };
	struct later later;

	later_start(&later, send_job_run, &job);
	expect_epoll_exact(ep, p->server, want, "data arriving during a long epoll_wait");
	later_join(&later);
}

static void case_epoll_lt(struct pair *p)
{
	struct flow up = { .seed = 1 };
	int ep = epoll_with(p->server, EPOLLIN), wep;

	expect_epoll_none(ep, "before any data");
	flow_send(p->client, &up, 100);
	expect_epoll_exact(ep, p->server, EPOLLIN, "after 100 bytes arrived");
	flow_recv_exact(p->server, &up, 10);
	expect_epoll_exact(ep, p->server, EPOLLIN, "after reading 10 of 100 bytes");
	expect_epoll_exact(ep, p->server, EPOLLIN, "asking again without reading");
	flow_drain(p->server, &up);
	expect_epoll_none(ep, "after draining");
	expect_epoll_wakeup(ep, p, &up, EPOLLIN);
	flow_drain(p->server, &up);
	expect_epoll_none(ep, "after draining again");
	wep = epoll_with(p->client, EPOLLOUT);
	expect_epoll_exact(wep, p->client, EPOLLOUT, "an idle connected socket is writable");
	expect_epoll_exact(wep, p->client, EPOLLOUT, "and stays writable (level-triggered)");
	close(wep);
	close(ep);
}

static void case_epoll_et(struct pair *p)
{
	struct flow up = { .seed = 2 };
	int ep = epoll_with(p->server, EPOLLIN | EPOLLET);

	expect_epoll_none(ep, "before any data");
	flow_send(p->client, &up, 100);
	expect_epoll_exact(ep, p->server, EPOLLIN, "after the first 100 bytes");
	expect_epoll_none(ep, "second wait without new data (edge-triggered reports once)");
	flow_recv_exact(p->server, &up, 10);
	expect_epoll_none(ep, "after a partial read, no new data");
	flow_send(p->client, &up, 50);
	expect_epoll_exact(ep, p->server, EPOLLIN, "after 50 more bytes (a new edge, undrained)");
	expect_epoll_none(ep, "again without new data");
	flow_drain(p->server, &up);
	expect_epoll_none(ep, "after draining");
	expect_epoll_wakeup(ep, p, &up, EPOLLIN);
	expect_epoll_none(ep, "after the wake-up, not drained, no new data");
	flow_drain(p->server, &up);
	close(ep);
}

/* An app that switches EPOLLOUT on and off with EPOLL_CTL_MOD around every
 * message (redis-benchmark): each MOD reports what the socket is at once,
 * and the readable side, whose indicator the MODs leave alone, keeps
 * reporting data and waking a sleeper. */
#define MOD_ROUNDS 200

static void case_epoll_mod_toggle(struct pair *p)
{
	struct flow up = { .seed = 5 };
	int ep = epoll_with(p->server, EPOLLIN);
	struct epoll_event ev[4];

	for (int i = 0; i < MOD_ROUNDS; i++) {
		bool data = i % 50 == 25;
		int n;

		if (data) {
			flow_send(p->client, &up, 10);
			wait_fd(p->server, POLLIN);
		}
		epoll_rearm(ep, p->server, EPOLLIN | EPOLLOUT);
		expect_epoll_exact(ep, p->server, data ? EPOLLIN | EPOLLOUT : EPOLLOUT,
				   "after a MOD adding EPOLLOUT");
		epoll_rearm(ep, p->server, EPOLLIN);
		if (data) {
			expect_epoll_exact(ep, p->server, EPOLLIN, "after a MOD dropping EPOLLOUT, unread");
			flow_drain(p->server, &up);
		}
		n = epoll_wait(ep, ev, 4, 0);
		CHECK(n == 0, "round %d, after a MOD dropping EPOLLOUT: %d events (0x%x)", i, n,
		      n > 0 ? ev[0].events : 0);
	}
	expect_epoll_none(ep, "after the MODs");
	expect_epoll_wakeup(ep, p, &up, EPOLLIN);
	flow_drain(p->server, &up);
	close(ep);
}

/* --- every waiter hears of data another thread's epoll_wait took in ------ */

/* A thread asleep in epoll_wait on a set holding the socket: with sdpshim
 * it may take the completion in itself, and answer from user space. */
struct epoll_waiter {
	pthread_t thread;
	int ep, n;
	int timeout_ms; /* 0: READY_MS */
	long long took_ms;
	struct epoll_event first; /* the first event it got */
};

static void *epoll_waiter_main(void *p)
{
	struct epoll_waiter *w = p;
	struct epoll_event ev[4];
	long long t0 = now_ms();

	w->n = epoll_wait(w->ep, ev, 4, w->timeout_ms ? w->timeout_ms : READY_MS);
	w->took_ms = now_ms() - t0;
	if (w->n > 0)
		w->first = ev[0];
	return NULL;
}

static void epoll_waiter_start(struct epoll_waiter *w, int ep)
{
	w->ep = ep;
	w->timeout_ms = 0;
	CHECK(pthread_create(&w->thread, NULL, epoll_waiter_main, w) == 0, "pthread_create failed");
	sleep_ms(50); /* asleep before the main thread waits too */
}

static void epoll_waiter_join(struct epoll_waiter *w, const char *when)
{
	pthread_join(w->thread, NULL);
	CHECK(w->n == 1 && w->took_ms < PROMPT_MS, "%s: the epoll_wait thread got %d after %lld ms",
	      when, w->n, w->took_ms);
}

/* The main thread waits on pfd beside a thread in epoll_wait on ep; data
 * sent LATER_MS later must end both waits. */
static void both_wake(struct pair *p, struct flow *up, int ep, struct pollfd pfd, const char *when)
{
	struct send_job job = { p->client, up, 100 };
	struct epoll_waiter w;
	struct later later;
	long long t0;
	int n;

	epoll_waiter_start(&w, ep);
	later_start(&later, send_job_run, &job);
	t0 = now_ms();
	n = poll(&pfd, 1, READY_MS);
	CHECK(n == 1 && (pfd.revents & POLLIN) && now_ms() - t0 < PROMPT_MS,
	      "%s: poll got %d (revents 0x%x) after %lld ms", when, n, pfd.revents, now_ms() - t0);
	later_join(&later);
	epoll_waiter_join(&w, when);
	flow_drain(p->server, up);
}

static void case_epoll_watchers(struct pair *p)
{
	struct flow up = { .seed = 6 };
	int ep = epoll_with(p->server, EPOLLIN), ep2;
	struct epoll_event ev;

	/* The set itself polled (nested), the socket polled, and a second set. */
	both_wake(p, &up, ep, (struct pollfd){ ep, POLLIN, 0 }, "poll on the epoll fd");
	both_wake(p, &up, ep, (struct pollfd){ p->server, POLLIN, 0 }, "poll on the socket");
	ep2 = epoll_with(p->server, EPOLLIN);
	both_wake(p, &up, ep, (struct pollfd){ ep2, POLLIN, 0 }, "a second set");
	CHECK(epoll_wait(ep2, &ev, 1, 0) == 0, "the second set reports a drained socket");
	close(ep2);
	expect_epoll_none(ep, "every waiter woke, the socket drained");
	close(ep);
}

/* --- a thread asleep in a set before its first RDMA socket joins --------- */

#define JOINED_TAG 0x5eed0001feedull /* the app's data for the socket that joins */

/* A thread sleeps in epoll_wait on a set of one idle pipe; then the socket
 * joins the set and data comes.  The thread must wake with the socket's
 * event and the app's data, not with one of the library's own (its shadow
 * set's, registered inside the app's set: data the app never gave) and not
 * after its timeout.  raw: the set is made by a raw system call, which the
 * library does not see.  Returns the set, still open. */
static int joined_while_asleep(struct pair *p, struct flow *up, bool raw, const char *when)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
	struct epoll_waiter w;
	int ep = raw ? (int)syscall(SYS_epoll_create1, EPOLL_CLOEXEC) : epoll_create1(EPOLL_CLOEXEC);
	int pfd[2];

	CHECK(ep >= 0 && pipe(pfd) == 0, "%s: epoll_create1 or pipe: %s", when, ERR);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0, "%s: adding the pipe: %s", when, ERR);
	epoll_waiter_start(&w, ep);
	sleep_ms(LATER_MS); /* asleep in the kernel, on the pipe alone */
	ev.data.u64 = JOINED_TAG;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p->server, &ev) == 0, "%s: adding the socket: %s", when,
	      ERR);
	sleep_ms(LATER_MS);
	flow_send(p->client, up, 100);
	pthread_join(w.thread, NULL);
	CHECK(w.n == 1 && w.first.data.u64 == JOINED_TAG && (w.first.events & EPOLLIN) &&
		      w.took_ms < 2 * LATER_MS + PROMPT_MS,
	      "%s: the thread asleep before the socket joined got %d event(s) after %lld ms, the "
	      "first with data 0x%llx (the socket's is 0x%llx) and events 0x%x",
	      when, w.n, w.took_ms, w.n > 0 ? (unsigned long long)w.first.data.u64 : 0ull,
	      JOINED_TAG, w.n > 0 ? w.first.events : 0);
	flow_recv_exact(p->server, up, 100);
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p->server, NULL) == 0, "%s: EPOLL_CTL_DEL: %s", when, ERR);
	close(pfd[0]);
	close(pfd[1]);
	return ep;
}

/* The socket joins while the thread sleeps, and nothing comes: the wait
 * (woken by the library's own set, with nothing for the app) ends at its
 * timeout, not a whole timeout later. */
#define JOINED_WAIT_MS 1000

static void joined_idle_times_out(struct pair *p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
	struct epoll_waiter w;
	int ep = epoll_create1(EPOLL_CLOEXEC), pfd[2];

	CHECK(ep >= 0 && pipe(pfd) == 0, "epoll_create1 or pipe: %s", ERR);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0, "adding the pipe: %s", ERR);
	w.timeout_ms = JOINED_WAIT_MS;
	w.ep = ep;
	CHECK(pthread_create(&w.thread, NULL, epoll_waiter_main, &w) == 0, "pthread_create failed");
	sleep_ms(JOINED_WAIT_MS * 6 / 10);
	ev.data.u64 = JOINED_TAG;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p->server, &ev) == 0, "adding the socket: %s", ERR);
	pthread_join(w.thread, NULL);
	CHECK(w.n == 0 && w.took_ms >= JOINED_WAIT_MS && w.took_ms < JOINED_WAIT_MS + 300,
	      "a %d ms wait the socket joined, idle, returned %d after %lld ms", JOINED_WAIT_MS, w.n,
	      w.took_ms);
	close(pfd[0]);
	close(pfd[1]);
	close(ep);
}

static void case_epoll_joined_asleep(struct pair *p)
{
	struct flow up = { .seed = 8 };
	int first = joined_while_asleep(p, &up, false, "no set held the socket before");
	int second = joined_while_asleep(p, &up, false, "while another set keeps its record");
	int third = joined_while_asleep(p, &up, true, "a set made by a raw system call");

	joined_idle_times_out(p);
	close(third);
	close(second);
	close(first);
}

static void check_epoll_ctl_errors(int ep, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	errno = 0;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0 && errno == EEXIST,
	      "adding an fd twice: want EEXIST, got %s", ERR);
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0, "EPOLL_CTL_DEL: %s", ERR);
	errno = 0;
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT,
	      "modifying a deleted fd: want ENOENT, got %s", ERR);
}

static void case_epoll_oneshot(struct pair *p)
{
	const uint32_t oneshot = EPOLLIN | EPOLLONESHOT;
	struct flow up = { .seed = 3 };
	int ep = epoll_with(p->server, oneshot);

	expect_epoll_none(ep, "before any data");
	flow_send(p->client, &up, 100);
	expect_epoll_exact(ep, p->server, EPOLLIN, "after 100 bytes");
	expect_epoll_none(ep, "after reporting once, data still pending");
	flow_send(p->client, &up, 50);
	expect_epoll_none(ep, "new data must not re-arm a one-shot fd");
	epoll_rearm(ep, p->server, oneshot);
	expect_epoll_exact(ep, p->server, EPOLLIN, "EPOLL_CTL_MOD re-armed it, 150 bytes pending");
	expect_epoll_none(ep, "disarmed again");
	flow_drain(p->server, &up);
	epoll_rearm(ep, p->server, oneshot);
	expect_epoll_none(ep, "re-armed with nothing to read");
	expect_epoll_wakeup(ep, p, &up, EPOLLIN);
	expect_epoll_none(ep, "disarmed after the wake-up");
	flow_drain(p->server, &up);
	check_epoll_ctl_errors(ep, p->server);
	close(ep);
}

static void expect_poll_revents(int fd, short events, short want, const char *when)
{
	struct pollfd pfd = { fd, events, 0 };
	int n = poll(&pfd, 1, READY_MS);

	CHECK(n == 1, "%s: poll returned %d (%s)", when, n, n < 0 ? ERR : "timeout");
	CHECK(pfd.revents == want, "%s: revents 0x%x, expected exactly 0x%x", when, pfd.revents,
	      want);
}

static void expect_eof(int fd, const char *who)
{
	char c;

	CHECK(read(fd, &c, 1) == 0, "%s: read after the peer's FIN: want 0 (EOF), got %s", who,
	      ERR);
	CHECK(read(fd, &c, 1) == 0, "%s: EOF must be sticky", who);
}

#define RDHUP_ALL (EPOLLIN | EPOLLOUT | EPOLLRDHUP)

/* The client half-closes: the server sees data, then RDHUP and EOF, and stays writable. */
static void client_half_closes(struct pair *p, int ep)
{
	struct flow up = { .seed = 4 };

	flow_send(p->client, &up, 10);
	CHECK(shutdown(p->client, SHUT_WR) == 0, "shutdown(SHUT_WR): %s", ERR);
	wait_epoll_bits(p->server, EPOLLRDHUP, "the peer's shutdown(SHUT_WR)");
	expect_epoll_exact(ep, p->server, RDHUP_ALL, "data and FIN pending, still writable");
	expect_poll_revents(p->server, POLLIN | POLLOUT | POLLRDHUP, POLLIN | POLLOUT | POLLRDHUP,
			    "poll after the peer's FIN");
	flow_recv_exact(p->server, &up, 10);
	expect_eof(p->server, "server");
	expect_epoll_exact(ep, p->server, RDHUP_ALL, "at EOF: readable (EOF), RDHUP, writable");
}

/* Then the server replies and half-closes too: both sides are fully shut (HUP). */
static void server_half_closes(struct pair *p, int ep)
{
	struct flow down = { .seed = 5 };

	flow_send(p->server, &down, 300);
	flow_recv_exact(p->client, &down, 300);
	CHECK(shutdown(p->server, SHUT_WR) == 0, "server shutdown(SHUT_WR): %s", ERR);
	wait_epoll_bits(p->client, EPOLLRDHUP, "client sees the server's FIN");
	expect_eof(p->client, "client");
	expect_epoll_exact(ep, p->server, RDHUP_ALL | EPOLLHUP, "both directions shut: EPOLLHUP");
}

static void case_epoll_rdhup(struct pair *p)
{
	int ep = epoll_with(p->server, RDHUP_ALL);

	expect_epoll_exact(ep, p->server, EPOLLOUT, "an idle connection: writable only");
	client_half_closes(p, ep);
	server_half_closes(p, ep);
	close(ep);
}

/* CPU time this thread used, in ms. */
static long long thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A wait that must time out without spinning: at most half its time on the CPU. */
static void expect_epoll_idle(int ep, const char *when)
{
	long long cpu = thread_cpu_ms();

	expect_epoll_none(ep, when);
	cpu = thread_cpu_ms() - cpu;
	CHECK(cpu <= SHORT_MS / 2, "%s: the %d ms wait used %lld ms of CPU (it spun)", when, SHORT_MS,
	      cpu);
}

/* Two threads wait on a set whose only registration reports a hang-up,
 * level-triggered: every wait of each returns it at once (the library
 * hands its listed readiness to the other thread's sleep). */
#define RDHUP_WAITS 10

static void *rdhup_waits(void *arg)
{
	int ep = *(int *)arg;
	struct epoll_event ev[4];
	intptr_t got = 0;

	for (int i = 0; i < RDHUP_WAITS; i++)
		got += epoll_wait(ep, ev, 4, READY_MS) == 1 && ev[0].events == EPOLLRDHUP;
	return (void *)got;
}

static void rdhup_in_two_threads(int ep)
{
	pthread_t t[2];
	long long t0 = now_ms();
	void *got[2];

	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, rdhup_waits, &ep) == 0, "pthread_create failed");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], &got[i]);
	CHECK((intptr_t)got[0] == RDHUP_WAITS && (intptr_t)got[1] == RDHUP_WAITS &&
		      now_ms() - t0 < PROMPT_MS,
	      "two threads' %d waits each: RDHUP %ld and %ld times, in %lld ms (level-triggered: every "
	      "wait, at once)", RDHUP_WAITS, (long)(intptr_t)got[0], (long)(intptr_t)got[1],
	      now_ms() - t0);
}

/* Unread bytes on a socket watched without EPOLLIN (a paused connection:
 * events 0, or EPOLLRDHUP alone) wake no one: the waits sleep.  The peer's
 * half-close is still reported, level-triggered. */
static void case_epoll_unwanted(struct pair *p)
{
	struct flow up = { 0, 0, 11 };
	struct epoll_event ev[4];
	int ep = epoll_with(p->server, 0), n;

	flow_send(p->client, &up, 64);
	wait_epoll_bits(p->server, EPOLLIN, "64 bytes sent");
	expect_epoll_idle(ep, "64 unread bytes, events 0");
	epoll_rearm(ep, p->server, EPOLLRDHUP);
	expect_epoll_idle(ep, "64 unread bytes, EPOLLRDHUP only");
	CHECK(shutdown(p->client, SHUT_WR) == 0, "shutdown: %s", ERR);
	expect_epoll_exact(ep, p->server, EPOLLRDHUP, "the peer half-closed, EPOLLRDHUP only");
	n = epoll_wait(ep, ev, 4, 0);
	CHECK(n == 1 && ev[0].events == EPOLLRDHUP, "level-triggered: RDHUP again, got %d events 0x%x",
	      n, n > 0 ? ev[0].events : 0);
	rdhup_in_two_threads(ep);
	flow_recv_exact(p->server, &up, 64);
	CHECK(flow_read_once(p->server, &up, 64) == 0, "EOF expected after the 64 bytes");
	close(ep);
}

/* poll() that must time out without spinning (nothing asked is ready). */
static void expect_poll_idle(int fd, short events, const char *when)
{
	struct pollfd pfd = { fd, events, 0 };
	long long cpu = thread_cpu_ms(), t0 = now_ms();
	int n = poll(&pfd, 1, SHORT_MS);

	CHECK(n == 0, "%s: poll returned %d (revents 0x%x), expected a timeout", when, n, pfd.revents);
	CHECK(now_ms() - t0 >= SHORT_MS, "%s: poll timed out after %lld ms, before its %d ms", when,
	      now_ms() - t0, SHORT_MS);
	cpu = thread_cpu_ms() - cpu;
	CHECK(cpu <= SHORT_MS / 2, "%s: the %d ms poll used %lld ms of CPU (it spun)", when, SHORT_MS,
	      cpu);
}

/* The same with poll() and select(): events 0, POLLRDHUP alone, select's
 * exceptfds alone; the half-close still ends a POLLRDHUP wait promptly. */
static void case_poll_unwanted(struct pair *p)
{
	struct flow up = { 0, 0, 12 };
	struct pollfd pfd = { p->server, POLLRDHUP, 0 };
	struct timeval tv = { 0, SHORT_MS * 1000 };
	long long t0, cpu;
	fd_set ex;
	int n;

	flow_send(p->client, &up, 64);
	wait_epoll_bits(p->server, EPOLLIN, "64 bytes sent");
	expect_poll_idle(p->server, 0, "64 unread bytes, events 0");
	expect_poll_idle(p->server, POLLRDHUP, "64 unread bytes, POLLRDHUP only");
	FD_ZERO(&ex);
	FD_SET(p->server, &ex);
	cpu = thread_cpu_ms();
	n = select(p->server + 1, NULL, NULL, &ex, &tv);
	cpu = thread_cpu_ms() - cpu;
	CHECK(n == 0, "select on exceptfds alone returned %d", n);
	CHECK(cpu <= SHORT_MS / 2, "the %d ms select used %lld ms of CPU (it spun)", SHORT_MS, cpu);
	CHECK(shutdown(p->client, SHUT_WR) == 0, "shutdown: %s", ERR);
	t0 = now_ms();
	n = poll(&pfd, 1, READY_MS);
	CHECK(n == 1 && pfd.revents == POLLRDHUP, "the peer half-closed: poll returned %d, revents 0x%x",
	      n, pfd.revents);
	CHECK(now_ms() - t0 < PROMPT_MS, "the half-close took %lld ms to show", now_ms() - t0);
	expect_poll_idle(p->server, 0, "the peer half-closed, 64 unread bytes, events 0");
	FD_ZERO(&ex);
	FD_SET(p->server, &ex);
	tv = (struct timeval){ 0, SHORT_MS * 1000 };
	cpu = thread_cpu_ms();
	n = select(p->server + 1, NULL, NULL, &ex, &tv);
	cpu = thread_cpu_ms() - cpu;
	CHECK(n == 0 && cpu <= SHORT_MS / 2, "after the half-close, select on exceptfds alone: %d, "
	      "%lld ms of CPU", n, cpu);
	flow_recv_exact(p->server, &up, 64);
	CHECK(flow_read_once(p->server, &up, 64) == 0, "EOF expected after the 64 bytes");
}

/* A set where a pipe is always readable, asked with maxevents 1: the
 * socket's data must still be reported in turn (the kernel puts a reported
 * level-triggered fd at the back of its list), never starved.  The data
 * comes while the thread loops in epoll_wait (so that the thread itself
 * may take it in), or while no one waits. */
#define STARVE_ROUNDS 40

static int starve_count(int ep, struct pair *p, struct flow *up, bool while_waiting)
{
	struct send_job job = { p->client, up, 100 };
	struct later later;
	struct epoll_event out;
	int seen = 0, after = -1;
	long long t0 = now_ms();

	if (while_waiting)
		later_start(&later, send_job_run, &job);
	else
		send_job_run(&job);
	for (int i = 0; after >= 0 ? i - after < STARVE_ROUNDS : now_ms() - t0 < READY_MS; i++) {
		int n = epoll_wait(ep, &out, 1, READY_MS);

		CHECK(n == 1, "wait %d: epoll_wait returned %d", i, n);
		if (out.data.u64 == 2 && after < 0)
			after = i;
		seen += out.data.u64 == 2;
	}
	if (while_waiting)
		later_join(&later);
	flow_recv_exact(p->server, up, 100);
	return after < 0 ? -1 : seen;
}

static void case_epoll_starve(struct pair *p)
{
	struct flow up = { .seed = 13 };
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
	int ep = epoll_create1(EPOLL_CLOEXEC), pfd[2];

	CHECK(ep >= 0 && pipe(pfd) == 0, "epoll_create1 or pipe: %s", ERR);
	CHECK(write(pfd[1], "x", 1) == 1, "write to the pipe: %s", ERR);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0, "adding the pipe: %s", ERR);
	ev.data.u64 = 2;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p->server, &ev) == 0, "adding the socket: %s", ERR);
	for (int round = 0; round < 4; round++) {
		int seen = starve_count(ep, p, &up, round % 2 == 0);

		CHECK(seen >= STARVE_ROUNDS / 4,
		      "round %d: the readable socket was reported %d times in the %d waits of "
		      "maxevents 1 after its first report, beside an always readable pipe",
		      round, seen, STARVE_ROUNDS);
	}
	close(pfd[0]);
	close(pfd[1]);
	close(ep);
}

/* Timeouts the kernel refuses are refused (EINVAL) at once, never taken
 * for "wait forever": ppoll and pselect with a negative time or
 * nanoseconds past a second, select with a negative time. */
static void expect_einval(int rc, long long t0, const char *what)
{
	CHECK(rc == -1 && errno == EINVAL, "%s: returned %d (%s), expected EINVAL", what, rc,
	      rc < 0 ? ERR : "no error");
	CHECK(now_ms() - t0 < PROMPT_MS, "%s: took %lld ms", what, now_ms() - t0);
}

static void case_bad_timeout(struct pair *p)
{
	static const struct timespec bad_ts[] = { { -1, 0 }, { 0, -1 }, { 0, 1000000000L } };
	struct pollfd pfd = { p->server, POLLIN, 0 };
	struct timeval tv = { -1, 0 };
	struct flow up = { .seed = 14 };
	fd_set r;
	long long t0;

	flow_send(p->client, &up, 1); /* the stream is bound (on its path) before it closes */
	flow_recv_exact(p->server, &up, 1);
	for (size_t i = 0; i < sizeof(bad_ts) / sizeof(bad_ts[0]); i++) {
		t0 = now_ms();
		expect_einval(ppoll(&pfd, 1, &bad_ts[i], NULL), t0, "ppoll");
		FD_ZERO(&r);
		FD_SET(p->server, &r);
		t0 = now_ms();
		expect_einval(pselect(p->server + 1, &r, NULL, NULL, &bad_ts[i], NULL), t0, "pselect");
	}
	FD_ZERO(&r);
	FD_SET(p->server, &r);
	t0 = now_ms();
	expect_einval(select(p->server + 1, &r, NULL, NULL, &tv), t0, "select");
}

/* --- a set under several fd numbers (dup, dup2, F_DUPFD) --------------- */

/* Each copy of the set reports the app's own data for the socket; after
 * the first number is closed, the copies still wait, change and report. */
static void case_epoll_dup(struct pair *p)
{
	struct flow up = { .seed = 17 };
	int ep = epoll_with(p->server, EPOLLIN), copy, high, dupfd;

	copy = dup(ep);
	high = dup2(ep, 900);
	dupfd = fcntl(ep, F_DUPFD_CLOEXEC, 700);
	CHECK(copy >= 0 && high == 900 && dupfd >= 700, "dup %d, dup2 %d, F_DUPFD %d: %s", copy,
	      high, dupfd, ERR);
	expect_epoll_none(copy, "a copy, before any data");
	flow_send(p->client, &up, 40);
	expect_epoll_exact(copy, p->server, EPOLLIN, "dup's copy, after 40 bytes");
	expect_epoll_exact(high, p->server, EPOLLIN, "dup2's copy, after 40 bytes");
	expect_epoll_exact(dupfd, p->server, EPOLLIN, "F_DUPFD's copy, after 40 bytes");
	flow_drain(p->server, &up);
	close(ep); /* the number the set was made under goes; the set stays */
	expect_epoll_none(high, "after draining and closing the first number");
	expect_epoll_wakeup(high, p, &up, EPOLLIN);
	flow_drain(p->server, &up);
	epoll_rearm(dupfd, p->server, EPOLLIN | EPOLLOUT);
	expect_epoll_exact(copy, p->server, EPOLLOUT, "after EPOLL_CTL_MOD through a copy");
	CHECK(epoll_ctl(copy, EPOLL_CTL_DEL, p->server, NULL) == 0, "EPOLL_CTL_DEL: %s", ERR);
	flow_send(p->client, &up, 10);
	expect_epoll_none(dupfd, "after EPOLL_CTL_DEL through another copy");
	CHECK(epoll_ctl(high, EPOLL_CTL_ADD, p->server,
			&(struct epoll_event){ .events = EPOLLIN, .data.fd = p->server }) == 0,
	      "EPOLL_CTL_ADD again: %s", ERR);
	close(copy);
	close(high);
	expect_epoll_exact(dupfd, p->server, EPOLLIN, "the last copy, after 10 bytes");
	flow_drain(p->server, &up);
	close(dupfd);
}

/* --- select past FD_SETSIZE, and the time left after a signal ----------- */

#define BIG_FDS 2048 /* a set of this many bits, as an app sized by its fd limit makes */
#define LONG_BITS (8 * sizeof(unsigned long))

struct big_set {
	unsigned long w[BIG_FDS / LONG_BITS];
};

static void big_add(struct big_set *b, int fd)
{
	b->w[fd / LONG_BITS] |= 1UL << (fd % LONG_BITS);
}

static bool big_has(const struct big_set *b, int fd)
{
	return b->w[fd / LONG_BITS] >> (fd % LONG_BITS) & 1;
}

/* select(getdtablesize(), ...) with an fd_set of FD_SETSIZE bits, the fd
 * limit raised: the kernel reads no bit past its fd table (still small
 * here), and neither may the shim (ASan sees a read or write past r). */
static void select_nfds_past_set(struct pair *p)
{
	struct flow up = { .seed = 18 };
	fd_set r;
	int n;

	flow_send(p->client, &up, 9);
	wait_fd(p->server, POLLIN);
	FD_ZERO(&r);
	FD_SET(p->server, &r);
	n = select(getdtablesize(), &r, NULL, NULL, &(struct timeval){ 5, 0 });
	CHECK(n == 1 && FD_ISSET(p->server, &r), "select of nfds %d (the fd limit) with an fd_set "
	      "of %d bits: %d (%s)", getdtablesize(), FD_SETSIZE, n, n < 0 ? ERR : "-");
	flow_drain(p->server, &up);
}

/* A socket at fd 2000 (past FD_SETSIZE) and a pipe at 1500 in one
 * read set of nfds 2001: the kernel takes it (nfds is cut to the fd table,
 * never refused), and so must the shim. */
static void select_past_setsize(struct pair *p)
{
	struct flow up = { .seed = 16 };
	struct big_set r;
	int pipefd[2], sock_hi = 2000, pipe_hi = 1500, n;

	CHECK(pipe(pipefd) == 0, "pipe: %s", ERR);
	CHECK(dup2(p->server, sock_hi) == sock_hi && dup2(pipefd[0], pipe_hi) == pipe_hi,
	      "dup2: %s", ERR);
	CHECK(write(pipefd[1], "x", 1) == 1, "write: %s", ERR);
	memset(&r, 0, sizeof(r));
	big_add(&r, sock_hi);
	big_add(&r, pipe_hi);
	n = select(sock_hi + 1, (fd_set *)(void *)&r, NULL, NULL, &(struct timeval){ 5, 0 });
	CHECK(n == 1, "select of nfds %d: %d (%s), expected 1", sock_hi + 1, n, n < 0 ? ERR : "-");
	CHECK(big_has(&r, pipe_hi) && !big_has(&r, sock_hi), "the pipe only: pipe %d, socket %d",
	      big_has(&r, pipe_hi), big_has(&r, sock_hi));
	flow_send(p->client, &up, 21);
	wait_fd(p->server, POLLIN);
	memset(&r, 0, sizeof(r));
	big_add(&r, sock_hi);
	n = select(sock_hi + 1, (fd_set *)(void *)&r, NULL, NULL, &(struct timeval){ 5, 0 });
	CHECK(n == 1 && big_has(&r, sock_hi), "the socket at fd %d with data: %d (%s), bit %d",
	      sock_hi, n, n < 0 ? ERR : "-", big_has(&r, sock_hi));
	flow_drain(sock_hi, &up);
	close(sock_hi);
	close(pipe_hi);
	close(pipefd[0]);
	close(pipefd[1]);
}

static void on_usr2(int sig)
{
	(void)sig;
}

static void *signal_later(void *arg)
{
	usleep(LATER_MS * 1000);
	pthread_kill(*(pthread_t *)arg, SIGUSR2);
	return NULL;
}

/* A select cut short by a signal (EINTR) writes the time left, as Linux
 * does: about 2.8 of its 3 s, not the 3 s it was given. */
static void select_time_left(struct pair *p)
{
	struct sigaction sa = { .sa_handler = on_usr2 }, old; /* no SA_RESTART: EINTR */
	struct timeval tv = { 3, 0 };
	pthread_t self = pthread_self(), t;
	long long left_ms;
	fd_set r;
	int n, err;

	sigaction(SIGUSR2, &sa, &old);
	FD_ZERO(&r);
	FD_SET(p->server, &r);
	CHECK(pthread_create(&t, NULL, signal_later, &self) == 0, "pthread_create failed");
	n = select(p->server + 1, &r, NULL, NULL, &tv);
	err = errno;
	pthread_join(t, NULL);
	sigaction(SIGUSR2, &old, NULL);
	errno = err;
	left_ms = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
	CHECK(n == -1 && errno == EINTR, "select interrupted: %d (%s), expected EINTR", n,
	      n < 0 ? ERR : "no error");
	CHECK(left_ms < 2990 && left_ms > 0, "time left after EINTR: %lld ms of 3000", left_ms);
}

/* A connection opened and closed at once (its stats line written: the
 * library's stats file then stays open, hidden, high in the fd table). */
static void throwaway_connection(const struct pair *p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int c, a;

	CHECK(getsockname(p->listener, (struct sockaddr *)&ss, &len) == 0, "getsockname: %s", ERR);
	c = socket(ss.ss_family, SOCK_STREAM, 0);
	CHECK(c >= 0 && connect(c, (struct sockaddr *)&ss, len) == 0, "connect: %s", ERR);
	a = accept(p->listener, NULL, NULL);
	CHECK(a >= 0, "accept: %s", ERR);
	close(c);
	close(a);
}

/* The highest fd open in this process, by /proc/self/fd. */
static int highest_open_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int high = -1;

	CHECK(d != NULL, "opendir /proc/self/fd: %s", ERR);
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd != dirfd(d) && fd > high)
			high = fd;
	}
	closedir(d);
	return high;
}

/* The same select(getdtablesize(), ...) once the library holds an fd of its
 * own far past FD_SETSIZE (with a stats file, or an RDMA socket's
 * indicators): the kernel's fd table then spans it, and a kernel select of
 * that nfds would read and write that many bits, past the app's fd_set, on
 * the kernel-only path too.  The bytes after the set must stay as they were.
 * READINESS_LIB_FD_HIGH=1 (the native run, with a stats file and the limit
 * raised before the library's first fd): a connection opened and closed
 * first writes a stats line, and the stats file must then be there past
 * FD_SETSIZE, else the step proves nothing.  (Over RDMA the socket's
 * indicators are such fds already.) */
static void select_nfds_past_set_lib_fd_high(struct pair *p)
{
	struct {
		fd_set set;
		unsigned char after[8192];
	} guarded;
	struct flow up = { .seed = 19 };
	bool lib_fd_expected = getenv("READINESS_LIB_FD_HIGH") != NULL;
	int n, high;

	if (lib_fd_expected)
		throwaway_connection(p); /* its stats line opens the stats file */
	high = highest_open_fd();
	if (lib_fd_expected)
		CHECK(high >= FD_SETSIZE, "no fd of the library past FD_SETSIZE (highest %d): this "
		      "step would prove nothing", high);
	flow_send(p->client, &up, 9);
	wait_fd(p->server, POLLIN);
	memset(guarded.after, 0xa5, sizeof(guarded.after));
	FD_ZERO(&guarded.set);
	FD_SET(p->server, &guarded.set);
	n = select(getdtablesize(), &guarded.set, NULL, NULL, &(struct timeval){ 5, 0 });
	CHECK(n == 1 && FD_ISSET(p->server, &guarded.set), "select of nfds %d with an fd_set of %d "
	      "bits, the highest fd open %d: %d (%s)", getdtablesize(), FD_SETSIZE, high, n,
	      n < 0 ? ERR : "-");
	for (size_t i = 0; i < sizeof(guarded.after); i++)
		CHECK(guarded.after[i] == 0xa5, "byte %zu past the fd_set was written (0x%02x)", i,
		      guarded.after[i]);
	flow_drain(p->server, &up);
}

static void case_select_big(struct pair *p)
{
	struct rlimit lim;

	CHECK(getrlimit(RLIMIT_NOFILE, &lim) == 0, "getrlimit: %s", ERR);
	if (lim.rlim_cur < 32 * BIG_FDS) {
		lim.rlim_cur = lim.rlim_max < 32 * BIG_FDS ? lim.rlim_max : 32 * BIG_FDS;
		CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s", ERR);
	}
	CHECK(lim.rlim_cur >= BIG_FDS, "the fd limit (%llu) is below %d",
	      (unsigned long long)lim.rlim_cur, BIG_FDS);
	/* First, while the app's own fds keep the kernel's fd table small:
	 * what it spans past FD_SETSIZE is then the library's alone. */
	select_nfds_past_set(p);
	select_nfds_past_set_lib_fd_high(p);
	select_past_setsize(p);
	select_time_left(p);
}

/* --- poll, ppoll, select, pselect through one interface ------------------ */

enum wait_api { API_POLL, API_PPOLL, API_SELECT, API_PSELECT };

struct wait_result {
	int rc;
	bool readable, writable;
	long long took_ms;
};

static struct timespec ms_to_timespec(int ms)
{
	return (struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000L };
}

static int poll_like(enum wait_api api, struct pollfd *pfd, nfds_t n, int ms, const sigset_t *mask)
{
	struct timespec ts = ms_to_timespec(ms);

	if (api == API_POLL)
		return poll(pfd, n, ms);
	return ppoll(pfd, n, ms < 0 ? NULL : &ts, mask);
}

static int select_like(enum wait_api api, int nfds, fd_set *r, fd_set *w, int ms,
		       const sigset_t *mask)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	struct timespec ts = ms_to_timespec(ms);

	if (api == API_SELECT)
		return select(nfds, r, w, NULL, ms < 0 ? NULL : &tv);
	return pselect(nfds, r, w, NULL, ms < 0 ? NULL : &ts, mask);
}

/* Waits for rfd readable and/or wfd writable (-1: not asked). */
static struct wait_result wait_api_call(enum wait_api api, int rfd, int wfd, int ms,
					const sigset_t *mask)
{
	struct wait_result res = { 0, false, false, 0 };
	long long t0 = now_ms();

	if (api == API_POLL || api == API_PPOLL) {
		struct pollfd pfd[2] = { { rfd, POLLIN, 0 }, { wfd, POLLOUT, 0 } };
		res.rc = poll_like(api, pfd, 2, ms, mask);
		res.readable = pfd[0].revents & POLLIN;
		res.writable = pfd[1].revents & POLLOUT;
	} else {
		fd_set r, w;
		FD_ZERO(&r);
		FD_ZERO(&w);
		if (rfd >= 0)
			FD_SET(rfd, &r);
		if (wfd >= 0)
			FD_SET(wfd, &w);
		res.rc = select_like(api, (rfd > wfd ? rfd : wfd) + 1, &r, &w, ms, mask);
		res.readable = rfd >= 0 && FD_ISSET(rfd, &r);
		res.writable = wfd >= 0 && FD_ISSET(wfd, &w);
	}
	res.took_ms = now_ms() - t0;
	return res;
}

static void expect_wait(enum wait_api api, int rfd, int wfd, int want_r, int want_w,
			const char *when)
{
	struct wait_result res = wait_api_call(api, rfd, wfd, READY_MS, NULL);
	int want_rc = want_r + want_w;

	CHECK(res.rc >= 0, "%s: %s", when, ERR);
	CHECK(res.rc == want_rc, "%s: returned %d, expected %d", when, res.rc, want_rc);
	CHECK(res.readable == want_r && res.writable == want_w,
	      "%s: readable=%d writable=%d, expected %d/%d", when, res.readable, res.writable,
	      want_r, want_w);
	CHECK(res.took_ms < PROMPT_MS, "%s: took %lld ms", when, res.took_ms);
}

static void expect_wait_timeout(enum wait_api api, int rfd, int ms, const char *when)
{
	struct wait_result res = wait_api_call(api, rfd, -1, ms, NULL);

	CHECK(res.rc == 0, "%s: returned %d (%s), expected a timeout", when, res.rc,
	      res.rc < 0 ? ERR : "ready");
	CHECK(!res.readable, "%s: fd marked readable on timeout", when);
	CHECK(res.took_ms >= ms, "%s: timed out after %lld ms, before its %d ms", when,
	      res.took_ms, ms);
	CHECK(res.took_ms < ms + PROMPT_MS, "%s: a %d ms timeout took %lld ms", when, ms,
	      res.took_ms);
}

static void expect_wait_wakeup(enum wait_api api, struct pair *p, struct flow *up)
{
	struct send_job job = { p->client, up, 64 };
	struct later later;
	struct wait_result res;

	later_start(&later, send_job_run, &job);
	res = wait_api_call(api, p->server, -1, READY_MS, NULL);
	later_join(&later);
	CHECK(res.rc == 1 && res.readable, "data arriving during a long wait: rc %d readable %d",
	      res.rc, res.readable);
	CHECK(res.took_ms >= LATER_MS - 20 && res.took_ms < PROMPT_MS,
	      "woke after %lld ms; the data came after %d ms", res.took_ms, LATER_MS);
	flow_drain(p->server, up);
}

/* The sequence every readiness API must get right. */
static void check_wait_api(enum wait_api api, struct pair *p)
{
	struct flow up = { .seed = 6 };

	expect_wait_timeout(api, p->server, SHORT_MS, "nothing to read");
	expect_wait(api, -1, p->client, 0, 1, "an idle connected socket is writable");
	expect_wait(api, p->server, p->client, 0, 1, "readable not yet, writable yes");
	flow_send(p->client, &up, 64);
	wait_fd(p->server, POLLIN);
	expect_wait(api, p->server, p->client, 1, 1, "64 bytes pending, and writable");
	expect_wait(api, p->server, -1, 1, 0, "still pending (level-triggered)");
	flow_drain(p->server, &up);
	expect_wait_timeout(api, p->server, SHORT_MS, "after draining");
	expect_wait_timeout(api, p->server, 0, "a zero timeout");
	expect_wait_wakeup(api, p, &up);
	expect_wait_timeout(api, p->server, SHORT_MS, "after draining the wake-up data");
}

static void poll_extras(struct pair *p)
{
	struct pollfd pfd[3] = { { -1, POLLIN, 7 }, { p->server, POLLIN, 0 },
				 { p->server, POLLOUT, 0 } };
	int n = poll(pfd, 3, READY_MS);

	CHECK(n == 1, "poll with a -1 entry and the socket twice: %d, expected 1", n);
	CHECK(pfd[0].revents == 0, "a negative fd must get revents 0, got 0x%x", pfd[0].revents);
	CHECK(pfd[1].revents == 0 && pfd[2].revents == POLLOUT,
	      "revents 0x%x/0x%x, expected 0/POLLOUT", pfd[1].revents, pfd[2].revents);
	expect_poll_revents(p->server, POLLIN | POLLOUT | POLLRDHUP, POLLOUT,
			    "an idle socket: POLLOUT, no RDHUP");
}

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

/* The mask a ppoll/pselect passes must be the one in force while it waits. */
static void check_sigmask(enum wait_api api, int fd)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigset_t blocked, unblocked, old;
	struct wait_result res;

	sigemptyset(&blocked);
	sigaddset(&blocked, SIGUSR1);
	sigemptyset(&unblocked);
	sigaction(SIGUSR1, &sa, NULL);
	sigprocmask(SIG_BLOCK, &blocked, &old);
	got_usr1 = 0;
	raise(SIGUSR1);
	res = wait_api_call(api, fd, -1, SHORT_MS, &blocked);
	CHECK(res.rc == 0 && !got_usr1, "a pending SIGUSR1 kept blocked by the mask: rc %d, "
	      "handler %s", res.rc, got_usr1 ? "ran" : "did not run");
	res = wait_api_call(api, fd, -1, READY_MS, &unblocked);
	CHECK(res.rc < 0 && errno == EINTR, "a pending SIGUSR1 unblocked by the mask: want "
	      "EINTR, got rc %d (%s)", res.rc, res.rc < 0 ? ERR : "no error");
	CHECK(got_usr1 && res.took_ms < PROMPT_MS, "handler %d, took %lld ms", got_usr1,
	      res.took_ms);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/* select must handle an fd far above the others (fd_set bit 1000). */
static void select_high_fd(struct pair *p)
{
	struct flow up = { .seed = 7 };
	struct rlimit lim;
	int want = 1000, high;

	if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur <= (rlim_t)want)
		want = (int)lim.rlim_cur - 1;
	high = dup2(p->server, want);
	CHECK(high == want, "dup2 to fd %d: %s", want, ERR);
	expect_wait_timeout(API_SELECT, high, SHORT_MS, "fd 1000, nothing to read");
	flow_send(p->client, &up, 33);
	wait_fd(p->server, POLLIN);
	expect_wait(API_SELECT, high, -1, 1, 0, "fd 1000 with data pending");
	flow_drain(high, &up);
	close(high);
}

static void case_poll(struct pair *p)
{
	check_wait_api(API_POLL, p);
	poll_extras(p);
}

static void case_ppoll(struct pair *p)
{
	check_wait_api(API_PPOLL, p);
	check_sigmask(API_PPOLL, p->server);
}

static void case_select(struct pair *p)
{
	check_wait_api(API_SELECT, p);
	select_high_fd(p);
}

static void case_pselect(struct pair *p)
{
	check_wait_api(API_PSELECT, p);
	check_sigmask(API_PSELECT, p->server);
}

/* --- mixed: a socket, a pipe, an eventfd and a timerfd in one set -------- */

enum { SRC_SOCK = 1, SRC_PIPE = 2, SRC_EVENT = 4, SRC_TIMER = 8, SRC_ALL = 15 };

struct mixed {
	struct pair *p;
	struct flow up;
	int fds[4]; /* indexed by the bit number of SRC_* */
	int pipe_w, ep;
	struct pollfd pfd[4];
};

static void mixed_open(struct mixed *m, struct pair *p)
{
	int pipefd[2];

	m->p = p;
	m->up = (struct flow){ .seed = 8 };
	CHECK(pipe2(pipefd, O_NONBLOCK) == 0, "pipe2: %s", ERR);
	m->fds[0] = p->server;
	m->fds[1] = pipefd[0];
	m->pipe_w = pipefd[1];
	m->fds[2] = eventfd(0, EFD_NONBLOCK);
	m->fds[3] = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	CHECK(m->fds[2] >= 0 && m->fds[3] >= 0, "eventfd/timerfd: %s", ERR);
	m->ep = epoll_create1(0);
	for (int i = 0; i < 4; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1u << i };
		CHECK(epoll_ctl(m->ep, EPOLL_CTL_ADD, m->fds[i], &ev) == 0, "epoll add: %s", ERR);
		m->pfd[i] = (struct pollfd){ m->fds[i], POLLIN, 0 };
	}
}

static unsigned mixed_epoll_bits(struct mixed *m, int ms)
{
	struct epoll_event ev[8];
	int n = epoll_wait(m->ep, ev, 8, ms);
	unsigned bits = 0;

	CHECK(n >= 0, "epoll_wait: %s", ERR);
	for (int i = 0; i < n; i++) {
		CHECK(ev[i].events == EPOLLIN, "events 0x%x for source 0x%x, expected EPOLLIN",
		      ev[i].events, ev[i].data.u32);
		bits |= ev[i].data.u32;
	}
	return bits;
}

static unsigned mixed_poll_bits(struct mixed *m, int ms)
{
	int n = poll(m->pfd, 4, ms), counted = 0;
	unsigned bits = 0;

	CHECK(n >= 0, "poll: %s", ERR);
	for (int i = 0; i < 4; i++) {
		if (!m->pfd[i].revents)
			continue;
		CHECK(m->pfd[i].revents == POLLIN, "revents 0x%x for source 0x%x",
		      m->pfd[i].revents, 1u << i);
		bits |= 1u << i;
		counted++;
	}
	CHECK(counted == n, "poll returned %d but %d entries have revents", n, counted);
	return bits;
}

/* Sources become ready one by one; both sets must converge on exactly want. */
static void mixed_expect(struct mixed *m, unsigned want, const char *when)
{
	for (int use_poll = 0; use_poll < 2; use_poll++) {
		long long until = now_ms() + READY_MS;
		unsigned got;

		for (;;) {
			got = use_poll ? mixed_poll_bits(m, READY_MS) : mixed_epoll_bits(m, READY_MS);
			CHECK(!(got & ~want), "%s: %s reported sources 0x%x, expected 0x%x", when,
			      use_poll ? "poll" : "epoll", got, want);
			if (got == want || now_ms() > until)
				break;
			sleep_ms(2);
		}
		CHECK(got == want, "%s: %s reported 0x%x, expected 0x%x", when,
		      use_poll ? "poll" : "epoll", got, want);
	}
}

static void mixed_expect_none(struct mixed *m, const char *when)
{
	long long t0 = now_ms();
	unsigned e = mixed_epoll_bits(m, SHORT_MS), q = mixed_poll_bits(m, SHORT_MS);

	CHECK(e == 0 && q == 0, "%s: epoll 0x%x poll 0x%x ready, expected none", when, e, q);
	CHECK(now_ms() - t0 >= 2 * SHORT_MS, "%s: two %d ms timeouts took %lld ms", when, SHORT_MS,
	      now_ms() - t0);
}

static void mixed_trigger(struct mixed *m, unsigned which)
{
	uint64_t one = 1;
	struct itimerspec its = { .it_value = { 0, 50 * 1000000L } };

	if (which & SRC_SOCK)
		flow_send(m->p->client, &m->up, 77);
	if (which & SRC_PIPE)
		CHECK(write(m->pipe_w, "p", 1) == 1, "pipe write: %s", ERR);
	if (which & SRC_EVENT)
		CHECK(write(m->fds[2], &one, 8) == 8, "eventfd write: %s", ERR);
	if (which & SRC_TIMER)
		CHECK(timerfd_settime(m->fds[3], 0, &its, NULL) == 0, "timerfd: %s", ERR);
}

static void mixed_consume(struct mixed *m, unsigned which)
{
	uint64_t count = 0;
	char c;

	if (which & SRC_SOCK)
		flow_drain(m->p->server, &m->up);
	if (which & SRC_PIPE)
		CHECK(read(m->fds[1], &c, 1) == 1 && c == 'p', "pipe read: %s", ERR);
	if (which & SRC_EVENT)
		CHECK(read(m->fds[2], &count, 8) == 8 && count == 1, "eventfd read: %s", ERR);
	if (which & SRC_TIMER)
		CHECK(read(m->fds[3], &count, 8) == 8 && count == 1, "timerfd read: %s", ERR);
}

static void mixed_step(struct mixed *m, unsigned which, const char *name)
{
	char when[96];

	snprintf(when, sizeof(when), "only the %s is ready", name);
	mixed_trigger(m, which);
	mixed_expect(m, which, when);
	mixed_consume(m, which);
	mixed_expect_none(m, "after consuming it");
}

static void mixed_trigger_sock(void *p)
{
	mixed_trigger(p, SRC_SOCK);
}

static void case_mixed(struct pair *p)
{
	struct mixed m;
	struct later later;

	mixed_open(&m, p);
	mixed_expect_none(&m, "nothing triggered");
	mixed_step(&m, SRC_TIMER, "timerfd");
	mixed_step(&m, SRC_PIPE, "pipe");
	mixed_step(&m, SRC_EVENT, "eventfd");
	mixed_step(&m, SRC_SOCK, "socket");
	mixed_step(&m, SRC_ALL, "all four");
	mixed_step(&m, SRC_PIPE | SRC_SOCK, "pipe and socket");
	later_start(&later, mixed_trigger_sock, &m);
	CHECK(mixed_epoll_bits(&m, READY_MS) == SRC_SOCK, "socket data during a long epoll_wait");
	later_join(&later);
	mixed_expect(&m, SRC_SOCK, "the socket after the wake-up");
	mixed_consume(&m, SRC_SOCK);
	mixed_expect_none(&m, "the end");
}

/* --- connects ------------------------------------------------------------- */

/* connect() again on a socket whose connect completed: 0 (Linux finishes the
 * state change) at most once, then EISCONN. */
static void expect_eisconn(int fd, const struct endpoint *ep)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		errno = 0;
		int rc = connect(fd, (const struct sockaddr *)&ep->addr, ep->len);
		if (rc < 0 && errno == EISCONN)
			return;
		CHECK(rc == 0 && attempt == 0, "connect on a connected socket: want EISCONN, got "
		      "rc %d (%s)", rc, ERR);
	}
}

static void exchange_both_ways(int client, int server, uint8_t seed)
{
	struct flow up = { .seed = seed }, down = { .seed = (uint8_t)(seed + 1) };

	flow_send(client, &up, 1000);
	flow_send(server, &down, 2000);
	flow_recv_exact(server, &up, 1000);
	flow_recv_exact(client, &down, 2000);
}

static void expect_so_error(int fd, int want, const char *when)
{
	int err = -1;
	socklen_t len = sizeof(err);

	CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0, "SO_ERROR: %s", ERR);
	CHECK(err == want, "%s: SO_ERROR %d (%s), expected %d (%s)", when, err, strerror(err),
	      want, strerror(want));
}

static void case_nbconnect(const struct endpoint *ep)
{
	int lfd = bound_socket(ep, true), fd = socket(ep->family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int rc, sfd;

	CHECK(fd >= 0, "socket: %s", ERR);
	errno = 0;
	rc = connect(fd, (const struct sockaddr *)&ep->addr, ep->len);
	CHECK(rc == 0 || errno == EINPROGRESS, "non-blocking connect: want 0 or EINPROGRESS, "
	      "got %s", ERR);
	if (rc < 0) {
		errno = 0;
		rc = connect(fd, (const struct sockaddr *)&ep->addr, ep->len);
		CHECK(rc == 0 || errno == EALREADY || errno == EISCONN,
		      "second connect while in progress: want EALREADY, 0 or EISCONN, got %s", ERR);
	}
	expect_poll_revents(fd, POLLOUT, POLLOUT, "connect completion");
	expect_so_error(fd, 0, "after POLLOUT");
	expect_eisconn(fd, ep);
	sfd = accept(lfd, NULL, NULL);
	CHECK(sfd >= 0, "accept: %s", ERR);
	set_nonblock(sfd);
	exchange_both_ways(fd, sfd, 9);
	close(sfd);
	close(fd);
	close(lfd);
}

static void expect_refused_blocking(const struct endpoint *ep)
{
	int fd = socket(ep->family, SOCK_STREAM, 0);

	errno = 0;
	CHECK(connect(fd, (const struct sockaddr *)&ep->addr, ep->len) < 0 &&
	      errno == ECONNREFUSED, "blocking connect to a closed port: want ECONNREFUSED, got %s",
	      errno ? ERR : "success");
	close(fd);
}

/* Returns a non-blocking socket whose connect to the closed port is under way
 * or already refused (then *refused_now is set). */
static int start_refused_connect(const struct endpoint *ep, bool *refused_now)
{
	int fd = socket(ep->family, SOCK_STREAM | SOCK_NONBLOCK, 0);

	errno = 0;
	CHECK(connect(fd, (const struct sockaddr *)&ep->addr, ep->len) < 0 &&
	      (errno == EINPROGRESS || errno == ECONNREFUSED),
	      "non-blocking connect to a closed port: want EINPROGRESS or ECONNREFUSED, got %s",
	      errno ? ERR : "success");
	*refused_now = errno == ECONNREFUSED;
	return fd;
}

static void expect_refused_poll(const struct endpoint *ep)
{
	bool now;
	int fd = start_refused_connect(ep, &now);
	struct pollfd pfd = { fd, POLLOUT, 0 };

	if (!now) {
		CHECK(poll(&pfd, 1, READY_MS) == 1, "poll after a refused connect: %s", ERR);
		CHECK(pfd.revents & (POLLERR | POLLHUP), "refused connect: revents 0x%x, expected "
		      "POLLERR or POLLHUP", pfd.revents);
		expect_so_error(fd, ECONNREFUSED, "refused non-blocking connect");
		expect_so_error(fd, 0, "SO_ERROR read twice");
	}
	close(fd);
}

static void expect_refused_epoll(const struct endpoint *ep)
{
	bool now;
	int fd = start_refused_connect(ep, &now), ep_fd;
	struct epoll_event ev;

	if (!now) {
		ep_fd = epoll_with(fd, EPOLLOUT);
		CHECK(epoll_wait(ep_fd, &ev, 1, READY_MS) == 1, "epoll after a refused connect");
		CHECK(ev.events & (EPOLLERR | EPOLLHUP), "refused connect: epoll events 0x%x",
		      ev.events);
		expect_so_error(fd, ECONNREFUSED, "refused connect seen by epoll");
		close(ep_fd);
	}
	close(fd);
}

static void case_refused(const struct endpoint *ep)
{
	/* Bound but not listening: the port is ours and SYNs get a RST. */
	int hold = bound_socket(ep, false);

	expect_refused_blocking(ep);
	expect_refused_poll(ep);
	expect_refused_epoll(ep);
	expect_refused_blocking(ep);
	close(hold);
}

/* --- one socket's life in one epoll set ---------------------------------- */

/* The kernel's answers to ADD, MOD, DEL and a second ADD, epoll, poll and
 * select agreeing on fd's readiness, data from the peer included.  Leaves fd
 * registered for EPOLLOUT. */
static void lifecycle_round(int epfd, int fd, int sfd, struct flow *down, const char *when)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	errno = 0;
	CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno == EEXIST,
	      "%s: a second EPOLL_CTL_ADD: want EEXIST, got %s", when, errno ? ERR : "success");
	epoll_rearm(epfd, fd, EPOLLIN);
	expect_epoll_none(epfd, when);
	expect_wait_timeout(API_SELECT, fd, SHORT_MS, when);
	flow_send(sfd, down, 100);
	expect_epoll_exact(epfd, fd, EPOLLIN, when);
	expect_poll_revents(fd, POLLIN | POLLOUT, POLLIN | POLLOUT, when);
	expect_wait(API_PSELECT, fd, fd, 1, 1, when);
	flow_recv_exact(fd, down, 100);
	CHECK(epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0, "%s: EPOLL_CTL_DEL: %s", when, ERR);
	errno = 0;
	CHECK(epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) < 0 && errno == ENOENT,
	      "%s: a second EPOLL_CTL_DEL: want ENOENT, got %s", when, errno ? ERR : "success");
	errno = 0;
	CHECK(epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT,
	      "%s: EPOLL_CTL_MOD after DEL: want ENOENT, got %s", when, errno ? ERR : "success");
	ev.events = EPOLLOUT;
	CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0, "%s: ADD again: %s", when, ERR);
	expect_epoll_exact(epfd, fd, EPOLLOUT, when);
}

/* A socket registered before its connect (its path still undecided), used
 * while another socket of the process stays unconnected, then after that one
 * closes: the shim takes a different road in each phase (records the
 * registration; checks the socket's path; goes straight to libc). */
static void case_lifecycle(const struct endpoint *ep)
{
	struct flow down = { .seed = 21 };
	int lfd = bound_socket(ep, true), idle = socket(ep->family, SOCK_STREAM, 0);
	int fd = socket(ep->family, SOCK_STREAM | SOCK_NONBLOCK, 0), epfd, sfd, rc;

	CHECK(idle >= 0 && fd >= 0, "socket: %s", ERR);
	epfd = epoll_with(fd, EPOLLIN | EPOLLOUT); /* (the kernel says OUT|HUP until connect) */
	errno = 0;
	rc = connect(fd, (const struct sockaddr *)&ep->addr, ep->len);
	CHECK(rc == 0 || errno == EINPROGRESS, "non-blocking connect: %s", ERR);
	expect_epoll_exact(epfd, fd, EPOLLOUT, "connected, registered before connect");
	sfd = accept(lfd, NULL, NULL);
	CHECK(sfd >= 0, "accept: %s", ERR);
	set_nonblock(sfd);
	lifecycle_round(epfd, fd, sfd, &down, "another socket still unconnected");
	close(idle);
	lifecycle_round(epfd, fd, sfd, &down, "every socket connected");
	exchange_both_ways(fd, sfd, 22);
	close(epfd);
	close(sfd);
	close(fd);
	close(lfd);
}

/* --- main ----------------------------------------------------------------- */

struct pair_case {
	const char *name;
	void (*run)(struct pair *p);
};

static const struct pair_case pair_cases[] = {
	{ "epoll_lt", case_epoll_lt },	   { "epoll_et", case_epoll_et },
	{ "epoll_oneshot", case_epoll_oneshot }, { "epoll_rdhup", case_epoll_rdhup },
	{ "poll", case_poll },		   { "ppoll", case_ppoll },
	{ "select", case_select },	   { "pselect", case_pselect },
	{ "mixed", case_mixed },		   { "epoll_watchers", case_epoll_watchers },
	{ "epoll_mod_toggle", case_epoll_mod_toggle }, { "epoll_joined_asleep", case_epoll_joined_asleep },
	{ "epoll_unwanted", case_epoll_unwanted }, { "poll_unwanted", case_poll_unwanted },
	{ "epoll_starve", case_epoll_starve }, { "bad_timeout", case_bad_timeout },
	{ "select_big", case_select_big }, { "epoll_dup", case_epoll_dup },
};

static int usage(void)
{
	fprintf(stderr, "usage: readiness ADDR PORT CASE\n  CASE: ");
	for (size_t i = 0; i < sizeof(pair_cases) / sizeof(pair_cases[0]); i++)
		fprintf(stderr, "%s ", pair_cases[i].name);
	fprintf(stderr, "nbconnect refused lifecycle\n");
	return 2;
}

static bool run_case(const char *name, const struct endpoint *ep)
{
	struct pair p;

	if (!strcmp(name, "nbconnect")) {
		case_nbconnect(ep);
		return true;
	}
	if (!strcmp(name, "refused")) {
		case_refused(ep);
		return true;
	}
	if (!strcmp(name, "lifecycle")) {
		case_lifecycle(ep);
		return true;
	}
	for (size_t i = 0; i < sizeof(pair_cases) / sizeof(pair_cases[0]); i++) {
		if (strcmp(name, pair_cases[i].name))
			continue;
		open_pair(ep, &p);
		pair_cases[i].run(&p);
		close(p.client);
		close(p.server);
		close(p.listener);
		return true;
	}
	return false;
}

int main(int argc, char **argv)
{
	struct endpoint ep;

	if (argc != 4)
		return usage();
	case_name = argv[3];
	snprintf(alarm_msg, sizeof(alarm_msg), "FAIL %s: still running after %d s\n", case_name,
		 GUARD_SECS);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);
	parse_endpoint(argv[1], argv[2], &ep);
	if (!run_case(argv[3], &ep))
		return usage();
	printf("ok %s\n", argv[3]);
	return 0;
}

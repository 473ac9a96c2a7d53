/* Process hooks: fork, vfork, daemon, exec and spawn, and the pthread_atfork
 * handlers that keep the fd table and stats consistent across them. */
#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h" /* sdp_log_atfork_child() */
#include "base/pin_budget.h" /* pin_budget_atfork_child() */
#include "base/real.h"
#include "core/conn.h"
#include "core/verbs_fence.h" /* verbs_fence_fork_*() */
#include "ipoib_fallback/path.h"
#include "preload/fork_handoff.h"
#include "preload/gate.h"
#include "preload/readiness.h"
#include "preload/init.h"
#include "preload/procs.h"
#include "preload/sock.h"
#include "preload/sock_rdma.h"

/* A channel's verbs resources stay with this process.  Under handoff
 * (the default) the streams stay on RDMA, and one moves to TCP when a
 * process that inherited it uses it (preload/fork_handoff.c); under switch,
 * every stream moves to TCP first; under keep, they stay, and a child that
 * uses one gets EIO. */
void proc_atfork_prepare(void)
{
	handoff_lock_for_fork(); /* first, and before the socket table's lock, as its server takes them */
	switch (fork_mode()) {
	case FORK_HANDOFF:
		handoff_atfork_prepare();
		break;
	case FORK_SWITCH:
		sock_switch_all_to_tcp(false);
		break;
	case FORK_KEEP:
		break;
	}
	sock_atfork_prepare();
	gate_atfork_prepare();
	/* Last: a thread inside the fence takes none of the locks above
	 * there, so it leaves the fence whoever holds them. */
	verbs_fence_fork_prepare();
}

void proc_atfork_parent(void)
{
	verbs_fence_fork_parent();
	gate_atfork_after();
	rdy_epoll_atfork_parent(); /* the socket table's lock is still held */
	sock_atfork_parent();
	handoff_unlock_after_fork();
}

void proc_atfork_child(void)
{
	verbs_fence_fork_child();
	sdp_log_atfork_child();
	pin_budget_atfork_child(); /* first: the child's segment publishes to it */
	gate_atfork_after();
	sock_atfork_child();
	handoff_atfork_child();
	rdy_epoll_atfork_child();
	path_atfork_child();
	conn_layer_atfork_child();
}

SDP_EXPORT pid_t fork(void)
{
	pid_t pid;

	sdp_ensure_init();
	handoff_fork_begin();
	pid = real.fork(); /* the atfork handlers do the work */
	handoff_fork_end(pid); /* the parent records the child that may share its streams */
	return pid;
}

/* vfork's child shares our stack and may only exec or _exit; running the
 * fork handlers there is unsafe, so vfork is a fork (a strict superset). */
SDP_EXPORT pid_t vfork(void)
{
	return fork();
}

/* daemon() re-points fds 0-2 at /dev/null internally; forget any tracked
 * socket that was there. */
SDP_EXPORT int daemon(int nochdir, int noclose)
{
	int rc;

	sdp_ensure_init();
	fork_force_switch(true); /* its parent leaves by _exit: no handoff */
	rc = real.daemon(nochdir, noclose);
	fork_force_switch(false);
	if (rc == 0 && !noclose) {
		for (int fd = 0; fd <= 2; fd++) {
			struct stat st;

			if (sock_of(fd) && (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)))
				sock_forget_fd(fd);
		}
	}
	return rc;
}

/* Sockets that exec closes (FD_CLOEXEC) end here: write their stats lines. */
static void prepare_exec(void)
{
	sdp_ensure_init();
	sock_switch_all_to_tcp(true); /* the new image inherits kernel sockets */
	handoff_exit_moves_begin();   /* an exec that fails leaves no old bound behind */
	handoff_orphans_at_exit();    /* a forked process may still use these */
	sock_prepare_exec();
}

SDP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	prepare_exec();
	return real.execve(path, argv, envp);
}

/* glibc's other exec functions reach execve by a call inside libc, which no
 * preload sees: each is hooked on its own. */
SDP_EXPORT int execv(const char *path, char *const argv[])
{
	prepare_exec();
	return real.execv(path, argv);
}

SDP_EXPORT int execvp(const char *file, char *const argv[])
{
	prepare_exec();
	return real.execvp(file, argv);
}

SDP_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	prepare_exec();
	return real.execvpe(file, argv, envp);
}

SDP_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	prepare_exec();
	return real.fexecve(fd, argv, envp);
}

SDP_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			int flags)
{
	sdp_ensure_init();
	if (!real.execveat) {
		errno = ENOSYS;
		return -1;
	}
	prepare_exec();
	return real.execveat(dirfd, path, argv, envp, flags);
}

/* The list forms: count the arguments (and the NULL that ends them), then
 * copy them into argv; execle's environment follows the NULL.  The va_list
 * goes by address: where it is a struct or a pointer (arm64, i386), a
 * callee's va_arg on a copy would leave the caller's behind. */
static size_t count_list_args(const char *arg, va_list *ap)
{
	size_t n = 1;
	va_list copy;

	va_copy(copy, *ap);
	for (const char *a = arg; a; a = va_arg(copy, const char *))
		n++;
	va_end(copy);
	return n;
}

static void fill_list_args(char **argv, const char *arg, va_list *ap)
{
	size_t i = 0;

	argv[i++] = (char *)arg;
	while (arg) {
		arg = va_arg(*ap, const char *);
		argv[i++] = (char *)arg;
	}
}

/* execl and execlp: the list in an argv of this frame, then exec_fn. */
static int exec_list(int (*exec_fn)(const char *, char *const[]), const char *file,
		     const char *arg, va_list *ap)
{
	char *argv[count_list_args(arg, ap)];

	fill_list_args(argv, arg, ap);
	prepare_exec();
	return exec_fn(file, argv);
}

SDP_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	int rc;

	va_start(ap, arg);
	sdp_ensure_init(); /* real.execv */
	rc = exec_list(real.execv, path, arg, &ap);
	va_end(ap);
	return rc;
}

SDP_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	int rc;

	va_start(ap, arg);
	sdp_ensure_init(); /* real.execvp */
	rc = exec_list(real.execvp, file, arg, &ap);
	va_end(ap);
	return rc;
}

SDP_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char *const *envp;

	va_start(ap, arg);
	char *argv[count_list_args(arg, &ap)];

	fill_list_args(argv, arg, &ap);
	envp = va_arg(ap, char *const *);
	va_end(ap);
	prepare_exec();
	return real.execve(path, argv, envp);
}

/* posix_spawn, system and popen make their child with clone(CLONE_VFORK),
 * which runs no fork handler, and the child execs at once: for the sockets
 * it is an exec.  What the child inherits (no FD_CLOEXEC, or named by a
 * dup2 file action) moves to TCP first; unlike an exec, this process goes
 * on, and its other sockets keep RDMA. */
static void prepare_spawn(void)
{
	sdp_ensure_init();
	sock_switch_all_to_tcp(true);
}

SDP_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	prepare_spawn();
	return real.posix_spawn(pid, path, actions, attr, argv, envp);
}

SDP_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	prepare_spawn();
	return real.posix_spawnp(pid, file, actions, attr, argv, envp);
}

/* The child will get fd as newfd whatever its FD_CLOEXEC says. */
SDP_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *actions, int fd, int newfd)
{
	struct sdp_sock *s;

	sdp_ensure_init();
	s = sock_of(fd);
	if (s)
		atomic_store(&s->spawn_dup, true);
	return real.posix_spawn_file_actions_adddup2(actions, fd, newfd);
}

SDP_EXPORT int system(const char *command)
{
	if (command)
		prepare_spawn();
	return real.system(command);
}

SDP_EXPORT FILE *popen(const char *command, const char *type)
{
	prepare_spawn();
	return real.popen(command, type);
}

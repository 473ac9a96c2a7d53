/* The table of real libc functions behind every hook, resolved once with
 * dlsym(RTLD_NEXT).  Library code calls real.X() for kernel behaviour. */
#ifndef SDPSHIM_REAL_H
#define SDPSHIM_REAL_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* X(return type, name, (parameter types), mandatory?) */
#define REAL_SYMBOLS(X)                                                                  \
	X(int, socket, (int, int, int), 1)                                               \
	X(int, bind, (int, const struct sockaddr *, socklen_t), 1)                        \
	X(int, listen, (int, int), 1)                                                    \
	X(int, accept, (int, struct sockaddr *, socklen_t *), 1)                          \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int), 1)                    \
	X(int, connect, (int, const struct sockaddr *, socklen_t), 1)                     \
	X(int, close, (int), 1)                                                          \
	X(int, shutdown, (int, int), 1)                                                  \
	X(ssize_t, read, (int, void *, size_t), 1)                                       \
	X(ssize_t, write, (int, const void *, size_t), 1)                                \
	X(ssize_t, readv, (int, const struct iovec *, int), 1)                           \
	X(ssize_t, writev, (int, const struct iovec *, int), 1)                          \
	X(ssize_t, recv, (int, void *, size_t, int), 1)                                  \
	X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *), 1) \
	X(ssize_t, recvmsg, (int, struct msghdr *, int), 1)                              \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *), 1) \
	X(ssize_t, send, (int, const void *, size_t, int), 1)                            \
	X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t), 1) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int), 1)                        \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int), 1)                  \
	X(ssize_t, sendfile, (int, int, off_t *, size_t), 1)                             \
	X(ssize_t, sendfile64, (int, int, off64_t *, size_t), 1)                         \
	X(int, poll, (struct pollfd *, nfds_t, int), 1)                                  \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *), 1) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *), 1)         \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *), 1) \
	X(int, epoll_create, (int), 1)                                                   \
	X(int, epoll_create1, (int), 1)                                                  \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *), 1)                      \
	X(int, epoll_wait, (int, struct epoll_event *, int, int), 1)                     \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *), 1)  \
	X(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *), 0) \
	X(int, fcntl, (int, int, ...), 1)                                                \
	X(int, fcntl64, (int, int, ...), 0)                                              \
	X(int, ioctl, (int, unsigned long, ...), 1)                                      \
	X(int, getsockopt, (int, int, int, void *, socklen_t *), 1)                       \
	X(int, setsockopt, (int, int, int, const void *, socklen_t), 1)                   \
	X(int, getsockname, (int, struct sockaddr *, socklen_t *), 1)                     \
	X(int, getpeername, (int, struct sockaddr *, socklen_t *), 1)                     \
	X(int, dup, (int), 1)                                                            \
	X(int, dup2, (int, int), 1)                                                      \
	X(int, dup3, (int, int, int), 1)                                                 \
	X(int, close_range, (unsigned int, unsigned int, int), 0)                        \
	X(pid_t, fork, (void), 1)                                                        \
	X(void, _exit, (int), 0)                                                         \
	X(void, _Exit, (int), 0)                                                         \
	X(int, daemon, (int, int), 1)                                                    \
	X(int, execve, (const char *, char *const[], char *const[]), 1)                  \
	X(int, execv, (const char *, char *const[]), 1)                                  \
	X(int, execvp, (const char *, char *const[]), 1)                                 \
	X(int, execvpe, (const char *, char *const[], char *const[]), 1)                 \
	X(int, fexecve, (int, char *const[], char *const[]), 1)                          \
	X(int, execveat, (int, const char *, char *const[], char *const[], int), 0)       \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *,   \
			     const posix_spawnattr_t *, char *const[], char *const[]), 1)  \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *,  \
			      const posix_spawnattr_t *, char *const[], char *const[]), 1) \
	X(int, posix_spawn_file_actions_adddup2, (posix_spawn_file_actions_t *, int, int), 1) \
	X(int, system, (const char *), 1)                                                \
	X(FILE *, popen, (const char *, const char *), 1)                                \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t), 0)                         \
	X(ssize_t, __recv_chk, (int, void *, size_t, size_t, int), 0)                    \
	X(ssize_t, __recvfrom_chk, (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *), 0) \
	X(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t), 0)                    \
	X(int, __ppoll_chk, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t), 0)

struct real_libc {
#define REAL_MEMBER(ret, name, params, mandatory) ret (*name) params;
	REAL_SYMBOLS(REAL_MEMBER)
#undef REAL_MEMBER
};

extern struct real_libc real __attribute__((visibility("hidden")));

/* Resolves every symbol; aborts with a clear message if a mandatory one is
 * missing or resolves back to our own hook.  Idempotent. */
void real_resolve(void);

#endif

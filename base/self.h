/* This process's id without a system call on the per-message path. */
#ifndef SDPSHIM_SELF_H
#define SDPSHIM_SELF_H

#include <sys/types.h>

/* getpid(), read once per process: the fork child's first atfork handler
 * reads it again (self_pid_after_fork).  vfork is a fork under the
 * library (preload/hooks_proc.c); a child made without fork handlers
 * (posix_spawn, system, _Fork) runs no hook before it execs. */
pid_t self_pid(void);
void self_pid_after_fork(void);

#endif

/* This process's id without a system call on the per-message path. */
#ifndef SDPSHIM_SELF_H
#define SDPSHIM_SELF_H

#include <sys/types.h>

/* getpid(), read once per process and kept on a page that the kernel
 * wipes in every child (MADV_WIPEONFORK), so a child of fork, _Fork or
 * clone reads its own id again.  Without such a page (a kernel before
 * 4.14): getpid() each time. */
pid_t self_pid(void);

#endif

/* The flush of RDMA-backed sockets at exit, _exit and _Exit
 * (preload/exit_flush.c). */
#ifndef SDPSHIM_EXIT_FLUSH_H
#define SDPSHIM_EXIT_FLUSH_H

/* atexit: flushes once per process (the first of exit and _exit does). */
void exit_flush_at_exit(void);
/* The process holds an RDMA-backed socket: start the helper that an
 * _exit asks for the flush (once per process). */
void exit_flush_helper_ensure(void);
/* The flush dealt with one more socket (preload/sock.c): the _exit that
 * waits for it knows it is not stuck. */
void exit_flush_note_progress(void);

#endif

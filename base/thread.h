/* The library's own threads (base/thread.c). */
#ifndef SDPSHIM_THREAD_H
#define SDPSHIM_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* Starts fn(arg) on a thread of the library: every signal blocked in it
 * (signals stay with the app's threads), detached unless joinable, with a
 * stack of stack_size bytes (0: the default).  Returns 0 or the
 * pthread_create error; *tid may be NULL for a detached thread. */
int lib_thread_start(pthread_t *tid, void *(*fn)(void *), void *arg, bool joinable,
		     size_t stack_size);

#endif

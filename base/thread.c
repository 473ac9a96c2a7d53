/* Owns how the library starts its own threads (the progress thread, the
 * fork handoff's server, the watch of inherited devices, the _exit helper):
 * signals blocked, so that none is delivered to a thread the app knows
 * nothing of. */
#include <signal.h>

#include "base/thread.h"

int lib_thread_start(pthread_t *tid, void *(*fn)(void *), void *arg, bool joinable,
		     size_t stack_size)
{
	pthread_attr_t attr;
	pthread_t ignored;
	sigset_t all, old;
	int err;

	pthread_attr_init(&attr);
	if (!joinable)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (stack_size)
		pthread_attr_setstacksize(&attr, stack_size);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(tid ? tid : &ignored, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return err;
}

/* Owns the cached process id that the per-message checks ("is this
 * channel ours, or inherited across fork?") compare against. */
#include <stdatomic.h>
#include <unistd.h>

#include "base/self.h"

static _Atomic pid_t cached_pid;

pid_t self_pid(void)
{
	pid_t pid = atomic_load_explicit(&cached_pid, memory_order_relaxed);

	if (__builtin_expect(pid == 0, 0)) {
		pid = getpid();
		atomic_store_explicit(&cached_pid, pid, memory_order_relaxed);
	}
	return pid;
}

void self_pid_after_fork(void)
{
	atomic_store_explicit(&cached_pid, getpid(), memory_order_relaxed);
}

/* Owns the cached process id that the per-message checks ("is this
 * channel ours, or inherited across fork?") compare against. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/self.h"

#define CELL_PAGE 4096

static pthread_once_t cell_once = PTHREAD_ONCE_INIT;
/* NULL: not made yet, or no wipe-on-fork page here (getpid() every time). */
static _Atomic pid_t *_Atomic cell;

/* A page the kernel zeroes in every child, however it was made (fork,
 * _Fork, clone without CLONE_VM): a child never reads its parent's id. */
static void make_cell(void)
{
	void *page = mmap(NULL, CELL_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (page == MAP_FAILED)
		return;
	if (madvise(page, CELL_PAGE, MADV_WIPEONFORK) != 0) {
		munmap(page, CELL_PAGE);
		return;
	}
	atomic_store_explicit(&cell, (_Atomic pid_t *)page, memory_order_release);
}

pid_t self_pid(void)
{
	/* Once the page is made, a load: no pthread_once on the per-message path. */
	_Atomic pid_t *page = atomic_load_explicit(&cell, memory_order_acquire);
	pid_t pid;

	if (__builtin_expect(!page, 0)) {
		pthread_once(&cell_once, make_cell);
		page = atomic_load_explicit(&cell, memory_order_acquire);
		if (!page)
			return getpid();
	}
	pid = atomic_load_explicit(page, memory_order_relaxed);
	if (__builtin_expect(pid == 0, 0)) {
		pid = getpid();
		atomic_store_explicit(page, pid, memory_order_relaxed);
	}
	return pid;
}

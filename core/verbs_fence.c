/* The fork fence (core/verbs_fence.h): a reader-writer lock that control-path
 * calls into librdmacm and libibverbs hold shared, and a fork exclusive.
 * Readers are preferred: a call that waits inside those libraries for another
 * thread's call (rdma_destroy_id for the ack of its events) is never held up
 * by a fork that waits for it. */
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "base/log.h"
#include "core/verbs_fence.h"

/* A fork waits this long at most: a call that does not come back from those
 * libraries (a dead device's command) must not stop the app's forks. */
#define FORK_WAIT_MAX_S 2
#define FORK_WAIT_SAID_MS 100

static pthread_rwlock_t fence = PTHREAD_RWLOCK_INITIALIZER;
static __thread unsigned depth;     /* this thread's nesting inside the fence */
static __thread int cancel_before; /* its cancelability when it entered */
static bool held_for_fork;          /* the forking thread took it exclusive */

/* Not cancellable inside (librdmacm's write() is a cancellation point): a
 * thread cancelled there would leave the fence held, and every later fork
 * would wait for ever. */
void verbs_fence_enter(void)
{
	if (depth++ == 0) {
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_before);
		pthread_rwlock_rdlock(&fence);
	}
}

void verbs_fence_leave(void)
{
	if (--depth == 0) {
		pthread_rwlock_unlock(&fence);
		pthread_setcancelstate(cancel_before, NULL);
	}
}

/* The fence exclusive, within FORK_WAIT_MAX_S; says so when it took long. */
static bool take_for_fork(void)
{
	struct timespec start, until, end;
	long long waited_ms;
	int rc;

	if (pthread_rwlock_trywrlock(&fence) == 0)
		return true;
	clock_gettime(CLOCK_MONOTONIC, &start);
	until = start;
	until.tv_sec += FORK_WAIT_MAX_S;
	rc = pthread_rwlock_clockwrlock(&fence, CLOCK_MONOTONIC, &until);
	if (rc != 0) {
		sdp_warn("fork: a call into librdmacm or libibverbs did not return within %d ms; "
			 "forking without waiting for it (the child's first RDMA connection may hang)",
			 FORK_WAIT_MAX_S * 1000);
		return false;
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	waited_ms = (long long)(end.tv_sec - start.tv_sec) * 1000 +
		    (end.tv_nsec - start.tv_nsec) / 1000000;
	if (waited_ms >= FORK_WAIT_SAID_MS)
		sdp_info("fork: waited %lld ms for a call into librdmacm or libibverbs to return",
			 waited_ms);
	return true;
}

void verbs_fence_fork_prepare(void)
{
	/* A fork from inside the fence (a signal handler that forks) cannot
	 * wait for itself; its child takes its chances, as before. */
	held_for_fork = depth == 0 && take_for_fork();
}

void verbs_fence_fork_parent(void)
{
	if (held_for_fork)
		pthread_rwlock_unlock(&fence);
	held_for_fork = false;
}

void verbs_fence_fork_child(void)
{
	/* The child's only thread is the one that forked: nobody else is
	 * inside.  If it forked from inside, its leave is still to come. */
	pthread_rwlock_init(&fence, NULL);
	if (depth)
		pthread_rwlock_rdlock(&fence);
	held_for_fork = false;
}

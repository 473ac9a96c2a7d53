/* A fork against librdmacm's and libibverbs' process-wide locks.  Those
 * libraries guard their device list and id table with mutexes of their own,
 * which no fork handler of theirs releases: a child forked while one of our
 * threads held one (the progress thread accepting a link, say) inherits it
 * held, and its first rdma_cm call (a climb's dial, a new connection) waits
 * for ever.  So each control-path call into them runs inside the fence, and
 * a fork waits until no thread of ours is inside.  The data path (posts,
 * polls, arms) takes no such lock and stays out. */
#ifndef SDPSHIM_VERBS_FENCE_H
#define SDPSHIM_VERBS_FENCE_H

#include "base/guard.h"

void verbs_fence_enter(void);
void verbs_fence_leave(void);

/* The fork handlers (preload/hooks_proc.c): prepare first, parent and child
 * last. */
void verbs_fence_fork_prepare(void);
void verbs_fence_fork_parent(void);
void verbs_fence_fork_child(void);

/* A control-path call into librdmacm or libibverbs: the fence and the
 * recursion guard. */
#define VERBS_CTL_ENTER() (verbs_fence_enter(), SDP_GUARD_ENTER())
#define VERBS_CTL_LEAVE() (SDP_GUARD_LEAVE(), verbs_fence_leave())

#endif

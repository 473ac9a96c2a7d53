/* Library initialisation: a constructor plus pthread_once, so hooks work
 * before main, during init and in every thread.  The recursion guard is in
 * base/guard.h. */
#ifndef SDPSHIM_INIT_H
#define SDPSHIM_INIT_H

#include <stdbool.h>

#include "base/guard.h"

extern volatile bool sdp_ready SDP_HIDDEN;

void sdp_init_slow(void);
/* preload/hooks_mem.c: the free and realloc hooks start following the
 * registration cache (before any socket can use it). */
void mem_hooks_init(void);

static inline void sdp_ensure_init(void)
{
	if (unlikely(!sdp_ready))
		sdp_init_slow();
}

#endif

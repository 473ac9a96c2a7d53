/* A blocked call's sleep on one stream (core/wait_set.c). */
#ifndef SDPSHIM_WAIT_SET_H
#define SDPSHIM_WAIT_SET_H

#include <stdbool.h>
#include <stdint.h>

#define WAIT_SET_INDICATOR 1 /* the indicator is readable */
#define WAIT_SET_CHANNEL   2 /* a links' channel has events: take them in (conn_take_completions) */

/* Sleeps until ind_fd (the stream's readable or writable eventfd; serial:
 * the stream's serial, which tells it from a later stream's) is readable or, for a linked stream, a
 * link completion channel has an event, or timeout_ms (-1: none) passes.
 * Returns a mask of WAIT_SET_*, 0 on timeout, -1 with errno (EINTR).
 * A cancellation point, as poll is. */
int wait_set_sleep(int ind_fd, uint64_t serial, bool linked, int timeout_ms);
/* In a forked child: every thread's set is its parent's; all are closed. */
void wait_set_atfork_child(void);

#endif

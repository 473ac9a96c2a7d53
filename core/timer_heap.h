/* A binary min-heap of deadlines: the progress thread's timers (thousands
 * of connections each hold one or two), O(log n) to arm or cancel one and
 * O(1) to find the earliest.  No locking: the caller's. */
#ifndef SDPSHIM_TIMER_HEAP_H
#define SDPSHIM_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Embedded in what is timed; idx is its place while it is in a heap. */
struct heap_node {
	uint64_t at_ms;
	size_t idx;
};

struct timer_heap {
	struct heap_node **v;
	size_t n, cap;
};

/* Adds node (not in the heap).  0, or -ENOMEM (the heap is unchanged). */
int timer_heap_push(struct timer_heap *h, struct heap_node *node);

/* Takes node out if it is in this heap (a node left over from before a fork
 * is not: then false). */
bool timer_heap_remove(struct timer_heap *h, struct heap_node *node);

/* The earliest deadline's node, or NULL. */
static inline struct heap_node *timer_heap_top(const struct timer_heap *h)
{
	return h->n ? h->v[0] : NULL;
}

/* Forgets every node (after fork: they are the parent's); keeps the array. */
void timer_heap_clear(struct timer_heap *h);

#endif

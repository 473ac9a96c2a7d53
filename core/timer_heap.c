/* The timer heap (core/timer_heap.h): sift up and down over an array of
 * node pointers, each node knowing its index. */
#include <errno.h>
#include <stdlib.h>

#include "core/timer_heap.h"

static void put(struct timer_heap *h, size_t i, struct heap_node *node)
{
	h->v[i] = node;
	node->idx = i;
}

static void sift_up(struct timer_heap *h, size_t i)
{
	struct heap_node *node = h->v[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (h->v[parent]->at_ms <= node->at_ms)
			break;
		put(h, i, h->v[parent]);
		i = parent;
	}
	put(h, i, node);
}

static void sift_down(struct timer_heap *h, size_t i)
{
	struct heap_node *node = h->v[i];

	for (;;) {
		size_t child = 2 * i + 1;

		if (child >= h->n)
			break;
		if (child + 1 < h->n && h->v[child + 1]->at_ms < h->v[child]->at_ms)
			child++;
		if (node->at_ms <= h->v[child]->at_ms)
			break;
		put(h, i, h->v[child]);
		i = child;
	}
	put(h, i, node);
}

int timer_heap_push(struct timer_heap *h, struct heap_node *node)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct heap_node **v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	put(h, h->n++, node);
	sift_up(h, node->idx);
	return 0;
}

bool timer_heap_remove(struct timer_heap *h, struct heap_node *node)
{
	size_t i = node->idx;
	struct heap_node *last;

	if (i >= h->n || h->v[i] != node)
		return false;
	last = h->v[--h->n];
	if (last != node) {
		put(h, i, last);
		sift_down(h, i);
		sift_up(h, last->idx);
	}
	return true;
}

void timer_heap_clear(struct timer_heap *h)
{
	h->n = 0;
}

/* Unit tests (TAP) for core/timer_heap.c: the earliest deadline first,
 * re-arming and cancelling from anywhere in the heap against a reference
 * (a plain array scanned each step), ties, a node not in the heap, clear,
 * and that ten thousand timers cost O(log n) steps each, not O(n). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer_heap.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define NODES 512

struct timer {
	struct heap_node node;
	bool in;
};

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The reference: the smallest deadline among the nodes in the heap. */
static uint64_t reference_min(const struct timer *t, size_t n, bool *any)
{
	uint64_t min = UINT64_MAX;

	*any = false;
	for (size_t i = 0; i < n; i++)
		if (t[i].in && t[i].node.at_ms <= min) {
			min = t[i].node.at_ms;
			*any = true;
		}
	return min;
}

static bool heap_valid(const struct timer_heap *h)
{
	for (size_t i = 0; i < h->n; i++) {
		if (h->v[i]->idx != i)
			return false;
		if (i && h->v[(i - 1) / 2]->at_ms > h->v[i]->at_ms)
			return false;
	}
	return true;
}

static int test_against_reference(void)
{
	static struct timer t[NODES];
	struct timer_heap h = { 0 };
	int ok = 1, bad_top = 0, bad_shape = 0;

	memset(t, 0, sizeof(t));
	for (int step = 0; step < 200000; step++) {
		struct timer *x = &t[next_rand() % NODES];
		unsigned op = (unsigned)(next_rand() % 4);
		struct heap_node *top;
		uint64_t min;
		bool any;

		if (op < 2) { /* arm or re-arm: out first, new deadline, in */
			if (x->in)
				timer_heap_remove(&h, &x->node);
			x->node.at_ms = 1 + next_rand() % 1000; /* many ties */
			x->in = timer_heap_push(&h, &x->node) == 0;
		} else if (op == 2) { /* cancel */
			bool was = timer_heap_remove(&h, &x->node);
			if (was != x->in)
				bad_shape++;
			x->in = false;
		} else if ((top = timer_heap_top(&h)) != NULL) { /* fire the earliest */
			struct timer *due = (struct timer *)top;
			timer_heap_remove(&h, top);
			due->in = false;
		}
		min = reference_min(t, NODES, &any);
		top = timer_heap_top(&h);
		if (any != (top != NULL) || (top && top->at_ms != min))
			bad_top++;
		if ((step & 255) == 0 && !heap_valid(&h))
			bad_shape++;
	}
	ok &= check(bad_top == 0, "the top is the reference's earliest at every step (%d wrong)", bad_top);
	ok &= check(bad_shape == 0, "heap order, indexes and membership hold (%d wrong)", bad_shape);
	free(h.v);
	return ok;
}

static int test_foreign_and_clear(void)
{
	struct timer a = { 0 }, b = { 0 }, stale = { 0 };
	struct timer_heap h = { 0 };
	int ok = 1;

	a.node.at_ms = 5;
	b.node.at_ms = 3;
	ok &= check(timer_heap_push(&h, &a.node) == 0 && timer_heap_push(&h, &b.node) == 0, "push");
	ok &= check(timer_heap_top(&h) == &b.node, "earliest first");
	stale.node.idx = 0; /* as a node left from before a fork claims */
	ok &= check(!timer_heap_remove(&h, &stale.node), "a node not in the heap is not removed");
	ok &= check(h.n == 2 && timer_heap_top(&h) == &b.node, "and the heap is unchanged");
	timer_heap_clear(&h);
	ok &= check(timer_heap_top(&h) == NULL, "cleared: empty");
	ok &= check(!timer_heap_remove(&h, &a.node), "cleared: its old nodes are not in it");
	ok &= check(timer_heap_push(&h, &a.node) == 0 && timer_heap_top(&h) == &a.node, "usable again");
	free(h.v);
	return ok;
}

/* 10,000 timers, each re-armed 20 times: a list scanned per operation
 * takes about 10^9 steps; the heap about 3 x 10^6.  Timed against the
 * same work on 100 timers (the ratio, not a wall-clock bound). */
static double rearm_seconds(size_t n, int rounds)
{
	struct timer *t = calloc(n, sizeof(*t));
	struct timer_heap h = { 0 };
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (size_t i = 0; i < n; i++) {
		t[i].node.at_ms = 1 + next_rand() % 100000;
		timer_heap_push(&h, &t[i].node);
	}
	for (int r = 0; r < rounds; r++)
		for (size_t i = 0; i < n; i++) {
			timer_heap_remove(&h, &t[i].node);
			t[i].node.at_ms = 1 + next_rand() % 100000;
			timer_heap_push(&h, &t[i].node);
		}
	clock_gettime(CLOCK_MONOTONIC, &b);
	free(h.v);
	free(t);
	return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

static int test_scales(void)
{
	double small = rearm_seconds(100, 2000), large = rearm_seconds(10000, 20);
	double per_small = small / (100.0 * 2001), per_large = large / (10000.0 * 21);

	/* log2(10000)/log2(100) = 2; a linear scan would be 100 times. */
	return check(per_large < 20 * per_small + 1e-7,
		     "per operation: %.0f ns at 10000 timers, %.0f ns at 100", per_large * 1e9,
		     per_small * 1e9);
}

static const struct tap_case cases[] = {
	{ "earliest first, re-arm and cancel anywhere, against a reference", test_against_reference },
	{ "a node not in the heap, and clear (after fork)", test_foreign_and_clear },
	{ "ten thousand timers: logarithmic, not linear", test_scales },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}

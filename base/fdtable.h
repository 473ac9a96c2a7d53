/* The fd table: one tagged pointer per kernel fd, two levels, sized from
 * RLIMIT_NOFILE.  Lookups are lock-free (the hot path of every hook);
 * changes are serialised by the socket layer (sock_table_lock). */
#ifndef SDPSHIM_FDTABLE_H
#define SDPSHIM_FDTABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum fdt_kind {
	FDT_NONE   = 0, /* not ours: pass straight through */
	FDT_SOCK   = 1, /* a tracked AF_INET/AF_INET6 stream socket (struct sdp_sock) */
	FDT_EPOLL  = 2, /* an epoll instance we shadow (struct sdp_epoll) */
	FDT_HIDDEN = 3, /* an fd the library owns; the app must not close it */
};

#define FDT_CHUNK_SHIFT 10
#define FDT_CHUNK_SIZE  (1u << FDT_CHUNK_SHIFT)
#define FDT_TAG_MASK    ((uintptr_t)3)

struct fdt_root {
	_Atomic(_Atomic uintptr_t *) *chunk;
	_Atomic size_t chunk_count; /* 0 until fdt_init() has filled chunk */
	size_t max_fds;
};

extern struct fdt_root fdt_root __attribute__((visibility("hidden")));
/* Where every chunk not allocated yet points: all zero (FDT_NONE), never
 * written, so a lookup needs no NULL test. */
extern _Atomic uintptr_t fdt_zero_chunk[FDT_CHUNK_SIZE] __attribute__((visibility("hidden")));
/* The first chunk (fds 0..1023, where nearly every process keeps its fds) is
 * static: a lookup there needs no bound and no chunk pointer.  All zero
 * until fdt_init() has put it in the table, so before initialisation every
 * lookup still finds nothing. */
extern _Atomic uintptr_t fdt_chunk0[FDT_CHUNK_SIZE] __attribute__((visibility("hidden")));

/* Sizes the table for max_fds descriptors (0: from RLIMIT_NOFILE).
 * Returns 0 or -ENOMEM. */
int fdt_init(size_t max_fds);

static inline uintptr_t fdt_raw(int fd)
{
	size_t ci = (size_t)(unsigned)fd >> FDT_CHUNK_SHIFT;
	_Atomic uintptr_t *chunk;

	if (__builtin_expect((unsigned)fd < FDT_CHUNK_SIZE, 1))
		return atomic_load_explicit(&fdt_chunk0[(unsigned)fd], memory_order_acquire);
	if (ci >= atomic_load_explicit(&fdt_root.chunk_count, memory_order_acquire))
		return 0;
	chunk = atomic_load_explicit(&fdt_root.chunk[ci], memory_order_acquire);
	return atomic_load_explicit(&chunk[(unsigned)fd & (FDT_CHUNK_SIZE - 1)],
				    memory_order_acquire);
}

static inline enum fdt_kind fdt_kind_of(int fd)
{
	return (enum fdt_kind)(fdt_raw(fd) & FDT_TAG_MASK);
}

/* The object stored for fd if it has this kind, else NULL.  Only for the
 * kinds with an object (FDT_SOCK, FDT_EPOLL), which is never NULL: taking
 * the tag away and testing the two low bits then decides, and a caller's
 * NULL test costs nothing more (the hooks' fast path is this lookup). */
static inline void *fdt_get(int fd, enum fdt_kind kind)
{
	uintptr_t v = fdt_raw(fd) - (uintptr_t)kind;

	if (v & FDT_TAG_MASK)
		return NULL;
	if (!v)
		__builtin_unreachable(); /* FDT_SOCK and FDT_EPOLL objects are never NULL */
	return (void *)v;
}

/* Stores (kind, obj) for fd: obj 4-byte aligned, never NULL for FDT_SOCK and
 * FDT_EPOLL (FDT_HIDDEN has none).  Returns 0, or -EBADF if fd is outside
 * the table (it then stays untracked). */
int fdt_set(int fd, enum fdt_kind kind, void *obj);
void fdt_clear(int fd);

/* Calls fn for every fd of the given kind, in ascending order. */
void fdt_for_each(enum fdt_kind kind, void (*fn)(int fd, void *obj, void *ctx), void *ctx);

#endif

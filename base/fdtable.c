/* The fd table: two-level array of tagged pointers indexed by kernel fd.
 * Chunks are allocated on first use and never freed, so lookups need no lock;
 * until then a chunk pointer names the shared zero chunk.  The first chunk
 * is static (fdt_chunk0), so the common lookup is one load. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "base/fdtable.h"

struct fdt_root fdt_root;
_Atomic uintptr_t fdt_zero_chunk[FDT_CHUNK_SIZE];
_Atomic uintptr_t fdt_chunk0[FDT_CHUNK_SIZE];

#define FDT_MAX_FDS_CAP (1u << 24) /* 16M descriptors: 128 KiB of chunk pointers */

int fdt_init(size_t max_fds)
{
	_Atomic(_Atomic uintptr_t *) *chunks;
	struct rlimit rl;
	size_t count;

	if (fdt_root.chunk)
		return 0;
	if (max_fds == 0) {
		/* The hard limit: the app may raise its soft limit later. */
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY)
			max_fds = (size_t)rl.rlim_max;
		else
			max_fds = FDT_MAX_FDS_CAP;
	}
	if (max_fds > FDT_MAX_FDS_CAP)
		max_fds = FDT_MAX_FDS_CAP;
	if (max_fds < FDT_CHUNK_SIZE)
		max_fds = FDT_CHUNK_SIZE;
	count = (max_fds + FDT_CHUNK_SIZE - 1) / FDT_CHUNK_SIZE;
	chunks = calloc(count, sizeof(*chunks));
	if (!chunks)
		return -ENOMEM;
	atomic_init(&chunks[0], fdt_chunk0);
	for (size_t ci = 1; ci < count; ci++)
		atomic_init(&chunks[ci], fdt_zero_chunk);
	fdt_root.chunk = chunks;
	fdt_root.max_fds = count * FDT_CHUNK_SIZE;
	/* Last, with release: a lookup that sees the count sees the chunks. */
	atomic_store_explicit(&fdt_root.chunk_count, count, memory_order_release);
	return 0;
}

static _Atomic uintptr_t *chunk_for(int fd, int create)
{
	size_t ci = (size_t)(unsigned)fd >> FDT_CHUNK_SHIFT;
	_Atomic uintptr_t *chunk, *fresh, *expected = fdt_zero_chunk;

	if (fd < 0 || ci >= fdt_root.chunk_count)
		return NULL;
	chunk = atomic_load_explicit(&fdt_root.chunk[ci], memory_order_acquire);
	if (chunk != fdt_zero_chunk)
		return chunk;
	if (!create)
		return NULL;
	fresh = calloc(FDT_CHUNK_SIZE, sizeof(*fresh));
	if (!fresh)
		return NULL;
	if (!atomic_compare_exchange_strong(&fdt_root.chunk[ci], &expected, fresh)) {
		free(fresh);
		return expected;
	}
	return fresh;
}

int fdt_set(int fd, enum fdt_kind kind, void *obj)
{
	_Atomic uintptr_t *chunk = chunk_for(fd, 1);

	if (!chunk)
		return -EBADF;
	atomic_store_explicit(&chunk[(unsigned)fd & (FDT_CHUNK_SIZE - 1)],
			      (uintptr_t)obj | (uintptr_t)kind, memory_order_release);
	return 0;
}

void fdt_clear(int fd)
{
	_Atomic uintptr_t *chunk = chunk_for(fd, 0);

	if (chunk)
		atomic_store_explicit(&chunk[(unsigned)fd & (FDT_CHUNK_SIZE - 1)], 0,
				      memory_order_release);
}

void fdt_for_each(enum fdt_kind kind, void (*fn)(int fd, void *obj, void *ctx), void *ctx)
{
	for (size_t ci = 0; ci < fdt_root.chunk_count; ci++) {
		_Atomic uintptr_t *chunk = atomic_load(&fdt_root.chunk[ci]);

		if (chunk == fdt_zero_chunk)
			continue;
		for (size_t i = 0; i < FDT_CHUNK_SIZE; i++) {
			uintptr_t v = atomic_load(&chunk[i]);

			if (v && (v & FDT_TAG_MASK) == (uintptr_t)kind)
				fn((int)(ci * FDT_CHUNK_SIZE + i), (void *)(v & ~FDT_TAG_MASK), ctx);
		}
	}
}

/* Memory hooks for the zero-copy registration cache: every call that can
 * change which pages back an address range (free, realloc, munmap, mremap,
 * madvise, mmap with MAP_FIXED) first drops cached registrations that
 * overlap it.  With an empty cache free and realloc are one jump (through
 * their route) and the page-level hooks one load and a syscall. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/real.h"
#include "core/mrcache.h"
#include "preload/init.h"

void __libc_free(void *ptr);
void *__libc_realloc(void *ptr, size_t size);

static void free_first(void *ptr);
static void *realloc_first(void *ptr, size_t size);

/* free/realloc are resolved on first use: they can be called before our
 * constructor (by other libraries' constructors).  Until then the pointers
 * name the *_first functions, which resolve both, so the hooks never test
 * for NULL.  dlsym does not allocate on success; should it free while we
 * resolve, glibc's own free takes it. */
static void (*_Atomic real_free)(void *) = free_first;
static void *(*_Atomic real_realloc)(void *, size_t) = realloc_first;
static __thread bool resolving;
/* The routes: where the free and realloc hooks jump.  real_free and
 * real_realloc (or the *_first functions until resolved) while the cache is
 * empty; the invalidating paths while it holds entries (route_for_cache(),
 * switched under the cache's lock before an entry is handed out). */
static void (*_Atomic free_route)(void *) = free_first;
static void *(*_Atomic realloc_route)(void *, size_t) = realloc_first;

static void resolve_alloc(void)
{
	void (*ff)(void *) = free_first;
	void *(*rf)(void *, size_t) = realloc_first;
	void *f, *r;

	resolving = true;
	f = dlsym(RTLD_NEXT, "free");
	r = dlsym(RTLD_NEXT, "realloc");
	resolving = false;
	if (f)
		atomic_store_explicit(&real_free, (void (*)(void *))f, memory_order_relaxed);
	if (r)
		atomic_store_explicit(&real_realloc, (void *(*)(void *, size_t))r,
				      memory_order_relaxed);
	/* A route still on *_first goes to libc; one the cache has switched
	 * to its invalidating path stays there. */
	if (f)
		atomic_compare_exchange_strong(&free_route, &ff, (void (*)(void *))f);
	if (r)
		atomic_compare_exchange_strong(&realloc_route, &rf, (void *(*)(void *, size_t))r);
}

static __attribute__((noinline)) void free_first(void *ptr)
{
	void (*fn)(void *);

	if (resolving) {
		__libc_free(ptr);
		return;
	}
	resolve_alloc();
	fn = atomic_load_explicit(&real_free, memory_order_relaxed);
	(fn == free_first ? __libc_free : fn)(ptr);
}

static __attribute__((noinline)) void *realloc_first(void *ptr, size_t size)
{
	void *(*fn)(void *, size_t);

	if (resolving)
		return __libc_realloc(ptr, size);
	resolve_alloc();
	fn = atomic_load_explicit(&real_realloc, memory_order_relaxed);
	return (fn == realloc_first ? __libc_realloc : fn)(ptr, size);
}

static inline bool cache_live(void)
{
	return atomic_load_explicit(&mrcache_live, memory_order_relaxed) != 0 && !sdp_in_lib;
}

static void invalidate_block(void *ptr)
{
	if (ptr && cache_live())
		mrcache_invalidate(ptr, malloc_usable_size(ptr));
}

static __attribute__((noinline, cold)) void free_invalidating(void *ptr)
{
	invalidate_block(ptr);
	atomic_load_explicit(&real_free, memory_order_relaxed)(ptr);
}

static __attribute__((noinline, cold)) void *realloc_invalidating(void *ptr, size_t size)
{
	invalidate_block(ptr);
	return atomic_load_explicit(&real_realloc, memory_order_relaxed)(ptr, size);
}

static void route_for_cache(bool live)
{
	atomic_store_explicit(&free_route,
			      live ? free_invalidating
					 : atomic_load_explicit(&real_free, memory_order_relaxed),
			      memory_order_release);
	atomic_store_explicit(&realloc_route,
			      live ? realloc_invalidating
					 : atomic_load_explicit(&real_realloc, memory_order_relaxed),
			      memory_order_release);
}

void mem_hooks_init(void)
{
	mrcache_watch(route_for_cache);
}

/* The route is the decision (one load, fused into the jump). */
SDP_EXPORT void free(void *ptr)
{
	atomic_load_explicit(&free_route, memory_order_relaxed)(ptr);
}

SDP_EXPORT void *realloc(void *ptr, size_t size)
{
	return atomic_load_explicit(&realloc_route, memory_order_relaxed)(ptr, size);
}

/* The page-level calls go straight to the kernel: they must not depend on
 * the library's initialisation, because allocators (jemalloc, for one) call
 * mmap while holding their own locks, and initialisation allocates. */
SDP_EXPORT int munmap(void *addr, size_t len)
{
	if (unlikely(cache_live()))
		mrcache_invalidate(addr, len);
	return (int)syscall(SYS_munmap, addr, len);
}

SDP_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *new_addr = NULL;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	if (unlikely(cache_live())) {
		mrcache_invalidate(old, old_len);
		if (flags & MREMAP_FIXED)
			mrcache_invalidate(new_addr, new_len);
	}
	return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
}

/* Advice after which the next touch may map different pages. */
static bool advice_changes_pages(int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_FREE:
	case MADV_REMOVE:
	case MADV_DONTFORK:
	case MADV_DOFORK:
		return true;
	default:
		return false;
	}
}

SDP_EXPORT int madvise(void *addr, size_t len, int advice)
{
	if (unlikely(cache_live()) && advice_changes_pages(advice))
		mrcache_invalidate(addr, len);
	return (int)syscall(SYS_madvise, addr, len, advice);
}

SDP_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (unlikely(cache_live()) && (flags & MAP_FIXED))
		mrcache_invalidate(addr, len);
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

SDP_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

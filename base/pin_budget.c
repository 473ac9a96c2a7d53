/* The pinned-memory budget: one process-wide count that every pinning
 * registration takes from and gives back to, its limit (SDPSHIM_PIN_BUDGET
 * under the soft RLIMIT_MEMLOCK), refusals, and the copy of all three in
 * the stats segment's header.  See base/pin_budget.h. */
#include <inttypes.h>
#include <linux/capability.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/pin_budget.h"
#include "base/stats_shm.h"

static _Atomic uint64_t pin_limit = SDP_PIN_BUDGET_DEFAULT;
static _Atomic uint64_t pinned;
static _Atomic uint64_t refusals;
static _Atomic bool refusal_logged;
static bool limit_capped;                        /* set by pin_budget_init only */
static _Atomic(struct sdp_proc_stats *) mirror; /* the segment's header, or NULL */

size_t pin_pages_len(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (page == 0 || page == (size_t)-1)
		page = 4096;
	if (len > SIZE_MAX - page)
		return SIZE_MAX; /* more than any budget */
	return (len + page - 1) / page * page;
}

bool pin_has_cap_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data) != 0)
		return false;
	return (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

bool pin_memlock_binds(uint64_t *soft)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    pin_has_cap_ipc_lock())
		return false;
	*soft = (uint64_t)rl.rlim_cur;
	return true;
}

/* Stores *src into *dst until no change of *src slipped in between: after
 * every writer returned, *dst holds the last value of *src (the last store
 * of all was checked against *src after the last change). */
static void mirror_copy(_Atomic uint64_t *dst, _Atomic uint64_t *src)
{
	uint64_t v;

	do {
		v = atomic_load(src);
		atomic_store(dst, v);
	} while (atomic_load(src) != v);
}

static void mirror_pinned(void)
{
	struct sdp_proc_stats *h = atomic_load(&mirror);

	if (h)
		mirror_copy(&h->pinned_bytes, &pinned);
}

void pin_budget_init(void)
{
	uint64_t limit = sdp_tun.pin_budget, soft;

	limit_capped = false;
	if (pin_memlock_binds(&soft) && soft < limit) {
		limit = soft;
		limit_capped = true;
	}
	atomic_store(&pin_limit, limit);
}

bool pin_budget_try(size_t bytes)
{
	uint64_t limit = atomic_load_explicit(&pin_limit, memory_order_relaxed);
	uint64_t cur = atomic_load(&pinned);

	do {
		if ((uint64_t)bytes > limit || cur > limit - (uint64_t)bytes)
			return false;
	} while (!atomic_compare_exchange_weak(&pinned, &cur, cur + (uint64_t)bytes));
	mirror_pinned();
	return true;
}

static void note_refusal(size_t bytes)
{
	struct sdp_proc_stats *h;

	atomic_fetch_add(&refusals, 1);
	h = atomic_load(&mirror);
	if (h)
		mirror_copy(&h->budget_refusals, &refusals);
	if (atomic_exchange(&refusal_logged, true))
		return;
	sdp_warn("the pinned-memory budget of %" PRIu64 " bytes (SDPSHIM_PIN_BUDGET%s) has no room "
		 "for %zu more (%" PRIu64 " pinned): new RDMA connections use TCP (reason resources) "
		 "and zero-copy uses buffer copy while it is spent; this is said once",
		 atomic_load(&pin_limit), limit_capped ? ", capped at RLIMIT_MEMLOCK" : "", bytes,
		 atomic_load(&pinned));
}

bool pin_budget_take(size_t bytes)
{
	if (pin_budget_try(bytes))
		return true;
	note_refusal(bytes);
	return false;
}

/* Never below zero: a forked child may release what its parent took. */
void pin_budget_give(size_t bytes)
{
	uint64_t cur = atomic_load(&pinned);

	while (!atomic_compare_exchange_weak(&pinned, &cur,
					     cur > (uint64_t)bytes ? cur - (uint64_t)bytes : 0))
		;
	mirror_pinned();
}

uint64_t pin_budget_limit(void)
{
	return atomic_load(&pin_limit);
}

uint64_t pin_budget_pinned(void)
{
	return atomic_load(&pinned);
}

uint64_t pin_budget_refusals(void)
{
	return atomic_load(&refusals);
}

bool pin_budget_capped(void)
{
	return limit_capped;
}

void pin_budget_publish(struct sdp_proc_stats *hdr)
{
	if (hdr)
		atomic_store(&hdr->pin_budget, atomic_load(&pin_limit));
	atomic_store(&mirror, hdr);
	if (!hdr)
		return;
	mirror_copy(&hdr->pinned_bytes, &pinned);
	mirror_copy(&hdr->budget_refusals, &refusals);
}

void pin_budget_atfork_child(void)
{
	atomic_store(&mirror, NULL);
	atomic_store(&pinned, 0);
	atomic_store(&refusals, 0);
	atomic_store(&refusal_logged, false);
}

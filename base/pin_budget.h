/* The process's budget for pinned memory (issue 15).  Every registration
 * that pins pages (a channel's buffers, a staging buffer, an entry of the
 * zero-copy registration cache) takes its bytes from one process-wide count
 * before it registers, and gives them back once it deregistered.  The
 * budget is SDPSHIM_PIN_BUDGET (default 256 MiB), lowered to the soft
 * RLIMIT_MEMLOCK where that limit binds the process (finite, and no
 * CAP_IPC_LOCK), as read by pin_budget_init.  Past it a registration is
 * refused: a channel's setup fails with -ENOBUFS (reason resources: the
 * connection uses TCP), zero-copy uses buffer copy for that call.  The
 * first refusal is logged, once per process; every one is counted.
 *
 * The count, the budget and the refusals are mirrored into the stats
 * segment's header for `sdpshim stat`: stored there, never read back. */
#ifndef SDPSHIM_PIN_BUDGET_H
#define SDPSHIM_PIN_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sdp_proc_stats;

/* The budget from sdp_tun.pin_budget (tunables_load_env first) and the
 * soft RLIMIT_MEMLOCK of now.  Keeps the count; before any call the budget
 * is SDP_PIN_BUDGET_DEFAULT. */
void pin_budget_init(void);

/* Takes bytes from the budget: true if they fit (then give them back with
 * pin_budget_give), false if not, counted as a refusal and logged the first
 * time.  pin_budget_try is the same without counting or logging, for a
 * caller that can release something and try again (the registration cache
 * evicts), and calls pin_budget_take for its last attempt. */
bool pin_budget_take(size_t bytes);
bool pin_budget_try(size_t bytes);
void pin_budget_give(size_t bytes);

/* The bytes a registration of len bytes pins: whole pages. */
size_t pin_pages_len(size_t len);

uint64_t pin_budget_limit(void);    /* the budget in effect */
uint64_t pin_budget_pinned(void);   /* bytes taken now */
uint64_t pin_budget_refusals(void); /* refusals so far */
/* True if pin_budget_init lowered SDPSHIM_PIN_BUDGET (or its default) to
 * the soft RLIMIT_MEMLOCK. */
bool pin_budget_capped(void);

/* The soft RLIMIT_MEMLOCK where it binds this process (finite and no
 * CAP_IPC_LOCK): true with *soft set; false where nothing limits pinning. */
bool pin_memlock_binds(uint64_t *soft);
/* True if this process has CAP_IPC_LOCK in its effective set. */
bool pin_has_cap_ipc_lock(void);

/* From now on, the budget, the count and the refusals are also stored into
 * hdr (the process's stats segment; NULL stops it).  The caller keeps hdr
 * mapped until it stops the mirror. */
void pin_budget_publish(struct sdp_proc_stats *hdr);

/* In a forked child: nothing is pinned by this process yet, nothing is
 * mirrored, and a refusal is logged again. */
void pin_budget_atfork_child(void);

#endif

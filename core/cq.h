/* Completion handling: the completion channels' events (channels' own CQs:
 * the progress thread; links' CQs: it or an app thread, core/app_wake.c)
 * and the poll loop that dispatches work completions by kind. */
#ifndef SDPSHIM_CQ_H
#define SDPSHIM_CQ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/progress.h"

struct sdp_dev;

void cq_on_channel_ready(struct progress_source *src, uint32_t events);
void cq_on_link_channel_ready(struct progress_source *src, uint32_t events);
int cq_take_link_events(struct sdp_dev *dev);

/* app_wake.c: in a forked child, no app set holds this process's channels. */
void app_wake_atfork_child(void);
/* app_wake.c: the once-a-second sweep runs (a link is up, or an app set
 * holds the channels); it stops itself when neither is true. */
void app_wake_sweep_start(void);
/* app_wake.c: is an app thread busy-polling now?  Then a link handling a
 * CQ event leaves its CQ unarmed (the spinner finds what comes) and calls
 * app_wake_arm_owed: the arm is made before any thread sleeps
 * (conn_sleep_begin_any), or by a timer once no thread has spun for a
 * while. */
bool app_wake_spinning(void);
/* ... or did one stop spinning less than a lease ago?  It is between two
 * spins (a server answering the request its spin found): a CQ event that
 * arrives then, while no thread sleeps, leaves the CQ unarmed too, or each
 * message armed for the next would wake the progress thread for as long as
 * the app spins. */
bool app_wake_spun_lately(void);
/* ... or is the taker a thread woken in a blocked call, which arms the
 * CQ when it sleeps again (conn_take_completions_then_sleep)? */
bool app_wake_taker_sleeps_again(void);
void app_wake_arm_owed(void);
/* app_wake.c: the count of waits that went to sleep on readiness so far,
 * and is a thread asleep on readiness now?  A link polled by non-blocking
 * calls under the current epoch, while no thread sleeps, leaves its CQ
 * unarmed too (link.c). */
unsigned app_wake_sleep_epoch(void);
bool app_wake_anyone_asleep(void);

#endif

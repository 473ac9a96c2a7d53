/* Completion handling: the progress thread's completion-channel callback
 * and the poll loop that dispatches work completions by kind. */
#ifndef SDPSHIM_CQ_H
#define SDPSHIM_CQ_H

#include <stdint.h>

#include "core/progress.h"

void cq_on_channel_ready(struct progress_source *src, uint32_t events);

#endif

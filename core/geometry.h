/* What a channel's registrations take, from its geometry: the lengths
 * core/setup.c registers for the receive buffers (with the control slots
 * after them) and for the send slots.  Pure arithmetic, so the launcher
 * (`sdpshim doctor`) links it too (core/geometry.c). */
#ifndef SDPSHIM_GEOMETRY_H
#define SDPSHIM_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

/* Control messages go from slots after our receive buffers (setup.c). */
#define CTRL_SLOTS     32u
#define CTRL_SLOT_SIZE 64u

/* Receive buffers and control slots: one registration. */
size_t conn_rx_mem_len(uint32_t buf_size, uint32_t buf_count);
/* Send slots: one registration of nslots slots (the peer's buffer count,
 * capped at ours, plus one). */
size_t conn_tx_mem_len(uint32_t slot_size, uint32_t nslots);

#endif

/* The byte counts of a channel's registrations (core/geometry.h), and the
 * pinned memory one connection of this process's geometry costs
 * (conn_pinned_bytes_estimate, core/conn.h). */
#include "base/config.h"
#include "base/pin_budget.h" /* pin_pages_len() */
#include "core/conn.h"
#include "core/geometry.h"

size_t conn_rx_mem_len(uint32_t buf_size, uint32_t buf_count)
{
	return (size_t)buf_size * buf_count + (size_t)CTRL_SLOTS * CTRL_SLOT_SIZE;
}

size_t conn_tx_mem_len(uint32_t slot_size, uint32_t nslots)
{
	return (size_t)slot_size * nslots;
}

size_t conn_pinned_bytes_estimate(void)
{
	return pin_pages_len(conn_rx_mem_len(sdp_tun.buf_size, sdp_tun.buf_count)) +
	       pin_pages_len(conn_tx_mem_len(sdp_tun.buf_size, sdp_tun.buf_count + 1));
}

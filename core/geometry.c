/* The byte counts of a channel's registrations (core/geometry.h), and the
 * pinned memory one connection of this process's geometry costs
 * (conn_pinned_bytes_estimate, core/conn.h), or one link (whatever number
 * of streams it carries: link_pinned_bytes_estimate). */
#include "base/config.h"
#include "base/pin_budget.h" /* pin_pages_len() */
#include "core/conn.h"
#include "core/geometry.h"
#include "core/wire.h" /* SDP_LH_SIZE */

size_t conn_rx_mem_len(uint32_t buf_size, uint32_t buf_count)
{
	return (size_t)buf_size * buf_count + (size_t)CTRL_SLOTS * CTRL_SLOT_SIZE;
}

size_t conn_tx_mem_len(uint32_t slot_size, uint32_t nslots)
{
	return (size_t)slot_size * nslots;
}

size_t link_pinned_bytes_estimate(void)
{
	size_t buf = (size_t)sdp_tun.buf_size + SDP_LH_SIZE;

	/* Receive buffers and as many send slots (core/link.c). */
	return 2 * pin_pages_len(buf * sdp_tun.link_bufs);
}

size_t conn_pinned_bytes_estimate(void)
{
	return pin_pages_len(conn_rx_mem_len(sdp_tun.buf_size, sdp_tun.buf_count)) +
	       pin_pages_len(conn_tx_mem_len(sdp_tun.buf_size, sdp_tun.buf_count + 1));
}

/* The uevent reader of core/uevent.h: splits a kernel uevent into its
 * fields and looks for an RDMA device's removal or addition.  Pure: no I/O. */
#include <string.h>

#include "core/uevent.h"

static bool field_is(const char *field, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(field, want, n) == 0;
}

/* The message has the field `action` and an RDMA subsystem. */
static bool rdma_action(const char *msg, size_t len, const char *action)
{
	bool removal = false, rdma = false;
	size_t off = 0;

	if (!msg)
		return false;
	while (off < len) {
		const char *field = msg + off;
		const char *end = memchr(field, '\0', len - off);
		size_t n = end ? (size_t)(end - field) : len - off;

		removal |= field_is(field, n, action);
		rdma |= field_is(field, n, "SUBSYSTEM=infiniband") ||
			field_is(field, n, "SUBSYSTEM=infiniband_verbs");
		off += n + 1;
	}
	return removal && rdma;
}

bool uevent_is_rdma_removal(const char *msg, size_t len)
{
	return rdma_action(msg, len, "ACTION=remove");
}

bool uevent_is_rdma_addition(const char *msg, size_t len)
{
	return rdma_action(msg, len, "ACTION=add");
}

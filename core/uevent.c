/* The uevent reader of core/uevent.h: splits a kernel uevent into its
 * fields and looks for an RDMA device's removal.  Pure: no I/O. */
#include <string.h>

#include "core/uevent.h"

static bool field_is(const char *field, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(field, want, n) == 0;
}

bool uevent_is_rdma_removal(const char *msg, size_t len)
{
	bool removal = false, rdma = false;
	size_t off = 0;

	if (!msg)
		return false;
	while (off < len) {
		const char *field = msg + off;
		const char *end = memchr(field, '\0', len - off);
		size_t n = end ? (size_t)(end - field) : len - off;

		removal |= field_is(field, n, "ACTION=remove");
		rdma |= field_is(field, n, "SUBSYSTEM=infiniband") ||
			field_is(field, n, "SUBSYSTEM=infiniband_verbs");
		off += n + 1;
	}
	return removal && rdma;
}

/* Unit tests (TAP) for core/uevent.c: which kernel uevents name an RDMA
 * device's removal (the verbs file's or the device's), and which do not:
 * additions, other subsystems, fields that only start or end like the
 * wanted ones, a last field without its NUL, a message cut short. */
#include <stdbool.h>
#include <string.h>

#include "core/uevent.h"
#include "tap.h"

/* A message as the kernel sends it: fields NUL-separated, the last one too. */
#define UVERBS_REMOVE                                                                 \
	"remove@/devices/virtual/infiniband_verbs/uverbs0\0ACTION=remove\0"           \
	"DEVPATH=/devices/virtual/infiniband_verbs/uverbs0\0SUBSYSTEM=infiniband_verbs\0" \
	"MAJOR=231\0MINOR=192\0DEVNAME=infiniband/uverbs0\0SEQNUM=4021\0"
#define IBDEV_REMOVE                                                                  \
	"remove@/devices/virtual/infiniband/rxe0\0ACTION=remove\0"                   \
	"DEVPATH=/devices/virtual/infiniband/rxe0\0SUBSYSTEM=infiniband\0NAME=rxe0\0SEQNUM=4022\0"

static bool removal(const char *msg, size_t len)
{
	return uevent_is_rdma_removal(msg, len);
}

static int test_removals(void)
{
	int ok = 1;

	ok &= check(removal(UVERBS_REMOVE, sizeof(UVERBS_REMOVE) - 1), "the verbs file's removal");
	ok &= check(removal(IBDEV_REMOVE, sizeof(IBDEV_REMOVE) - 1), "the device's removal");
	return ok;
}

static int test_not_removals(void)
{
	static const char add[] = "add@/devices/virtual/infiniband_verbs/uverbs0\0ACTION=add\0"
				  "SUBSYSTEM=infiniband_verbs\0";
	static const char net[] = "remove@/devices/virtual/net/rxenet0\0ACTION=remove\0"
				  "SUBSYSTEM=net\0INTERFACE=rxenet0\0";
	static const char header_only[] = "remove@/devices/virtual/infiniband/rxe0\0"
					  "SUBSYSTEM=infiniband\0";
	static const char longer[] = "ACTION=remove\0SUBSYSTEM=infiniband_verbsX\0";
	static const char prefixed[] = "XACTION=remove\0SUBSYSTEM=infiniband\0";
	static const char change[] = "ACTION=change\0SUBSYSTEM=infiniband\0";
	int ok = 1;

	ok &= check(!removal(add, sizeof(add) - 1), "an addition");
	ok &= check(!removal(net, sizeof(net) - 1), "a netdev's removal");
	ok &= check(!removal(header_only, sizeof(header_only) - 1), "no ACTION field (the header does not count)");
	ok &= check(!removal(longer, sizeof(longer) - 1), "a subsystem that only starts like it");
	ok &= check(!removal(prefixed, sizeof(prefixed) - 1), "a field that only ends like ACTION=remove");
	ok &= check(!removal(change, sizeof(change) - 1), "a change");
	ok &= check(!removal(NULL, 10), "NULL");
	ok &= check(!removal(UVERBS_REMOVE, 0), "no bytes");
	return ok;
}

static int test_bounds(void)
{
	static const char no_nul[] = "ACTION=remove\0SUBSYSTEM=infiniband";
	size_t cut = strlen("remove@/devices/virtual/infiniband_verbs/uverbs0") + 1 + strlen("ACTION=remov");
	int ok = 1;

	ok &= check(removal(no_nul, sizeof(no_nul) - 1), "the last field without its NUL counts");
	ok &= check(!removal(no_nul, sizeof(no_nul) - 2), "nor when it is one byte short");
	ok &= check(!removal(UVERBS_REMOVE, cut), "a message cut inside ACTION=remove");
	return ok;
}

/* What brings held streams back (core/climb.c): a device's addition. */
static int test_additions(void)
{
	static const char add[] = "add@/devices/virtual/infiniband_verbs/uverbs0\0ACTION=add\0"
				  "SUBSYSTEM=infiniband_verbs\0";
	static const char ibdev[] = "add@/devices/virtual/infiniband/rxe0\0ACTION=add\0"
				    "SUBSYSTEM=infiniband\0NAME=rxe0\0";
	static const char net[] = "add@/devices/virtual/net/rxenet0\0ACTION=add\0SUBSYSTEM=net\0";
	int ok = 1;

	ok &= check(uevent_is_rdma_addition(add, sizeof(add) - 1), "the verbs file's addition");
	ok &= check(uevent_is_rdma_addition(ibdev, sizeof(ibdev) - 1), "the device's addition");
	ok &= check(!uevent_is_rdma_addition(net, sizeof(net) - 1), "a netdev's addition");
	ok &= check(!uevent_is_rdma_addition(IBDEV_REMOVE, sizeof(IBDEV_REMOVE) - 1), "a removal");
	ok &= check(!uevent_is_rdma_addition(NULL, 10), "NULL");
	return ok;
}

int main(void)
{
	static const struct tap_case cases[] = {
		{ "an RDMA device's or verbs file's removal is one", test_removals },
		{ "additions, other subsystems and near misses are not", test_not_removals },
		{ "only the given bytes are read; a last field may lack its NUL", test_bounds },
		{ "an RDMA device's or verbs file's addition is one; a removal is not", test_additions },
	};

	return tap_run(cases, sizeof(cases) / sizeof(cases[0]));
}

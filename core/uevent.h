/* Reads a kernel uevent (NETLINK_KOBJECT_UEVENT) for the two facts the
 * device watch needs: an RDMA device, or its verbs file, went away or came. */
#ifndef SDPSHIM_UEVENT_H
#define SDPSHIM_UEVENT_H

#include <stdbool.h>
#include <stddef.h>

/* True when the message, "ACTION@DEVPATH" then NUL-separated KEY=VALUE
 * fields (the last one may lack its NUL), has the fields ACTION=remove and
 * SUBSYSTEM=infiniband or SUBSYSTEM=infiniband_verbs.  Reads only the len
 * bytes; NULL is false. */
bool uevent_is_rdma_removal(const char *msg, size_t len);
/* The same for ACTION=add: an RDMA device (or its verbs file) came. */
bool uevent_is_rdma_addition(const char *msg, size_t len);

#endif

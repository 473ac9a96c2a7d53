/* Private to ipoib_fallback/rules.c and rules_match.c. */
#ifndef SDPSHIM_RULES_INTERNAL_H
#define SDPSHIM_RULES_INTERNAL_H

#include <stdint.h>

/* The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
extern const uint8_t rules_v4_mapped_prefix[12];

#endif

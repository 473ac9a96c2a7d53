/* Names and explanations of the path/fallback reason codes. */
#include <string.h>

#include "base/reason.h"

static const char *const reason_names[SDP_REASON_COUNT] = {
#define SDP_REASON_NAME(sym, name, text) [SDP_REASON_##sym] = name,
	SDP_REASON_LIST(SDP_REASON_NAME)
#undef SDP_REASON_NAME
};

static const char *const reason_texts[SDP_REASON_COUNT] = {
#define SDP_REASON_TEXT(sym, name, text) [SDP_REASON_##sym] = text,
	SDP_REASON_LIST(SDP_REASON_TEXT)
#undef SDP_REASON_TEXT
};

const char *sdp_reason_name(enum sdp_reason reason)
{
	if ((unsigned)reason >= SDP_REASON_COUNT)
		return "unknown";
	return reason_names[reason];
}

const char *sdp_reason_text(enum sdp_reason reason)
{
	if ((unsigned)reason >= SDP_REASON_COUNT)
		return "unknown reason";
	return reason_texts[reason];
}

int sdp_reason_from_name(const char *name)
{
	for (int i = 0; i < SDP_REASON_COUNT; i++)
		if (strcmp(reason_names[i], name) == 0)
			return i;
	return -1;
}

const char *sdp_path_name(enum sdp_path path)
{
	switch (path) {
	case SDP_PATH_UNDECIDED: return "undecided";
	case SDP_PATH_TCP:       return "tcp";
	case SDP_PATH_RDMA:      return "rdma";
	}
	return "unknown";
}

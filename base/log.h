/* One-line diagnostics on stderr, filtered by SDPSHIM_LOG=error|warn|info|debug.
 * Writes with a raw syscall so it never re-enters the interposed libc. */
#ifndef SDPSHIM_LOG_H
#define SDPSHIM_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum sdp_log_level {
	SDP_LOG_NONE  = 0,
	SDP_LOG_ERROR = 1,
	SDP_LOG_WARN  = 2,
	SDP_LOG_INFO  = 3,
	SDP_LOG_DEBUG = 4,
};

extern int sdp_log_level;

/* Parses "error|warn|info|debug|none" (or 0-4); returns -1 if unknown. */
int sdp_log_parse_level(const char *text);
/* Sets the level from SDPSHIM_LOG; an unknown value keeps "warn" and says so. */
void sdp_log_init_from_env(void);

void sdp_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sdp_log_at(level, ...)                          \
	do {                                            \
		if (sdp_log_level >= (level))           \
			sdp_logf((level), __VA_ARGS__); \
	} while (0)
#define sdp_error(...) sdp_log_at(SDP_LOG_ERROR, __VA_ARGS__)
#define sdp_warn(...)  sdp_log_at(SDP_LOG_WARN, __VA_ARGS__)
#define sdp_info(...)  sdp_log_at(SDP_LOG_INFO, __VA_ARGS__)
#define sdp_debug(...) sdp_log_at(SDP_LOG_DEBUG, __VA_ARGS__)

/* A diagnostic a peer can repeat at will (a refused Hello, a forged OPEN):
 * each site writes at most SDP_LOG_BURST lines a SDP_LOG_WINDOW_MS, and
 * the first line after a window that left some out says how many. */
#define SDP_LOG_BURST     5u
#define SDP_LOG_WINDOW_MS 10000u

struct sdp_log_limit {
	uint64_t window_start_ms;
	unsigned in_window, left_out;
	bool started; /* a window began */
};

/* Does this line go out (now_ms: a monotonic clock)?  *left_out: the lines
 * the window that just ended left out (0 if none, or the window goes on). */
bool sdp_log_admit(struct sdp_log_limit *lim, uint64_t now_ms, unsigned *left_out);
bool sdp_log_limited_ok(struct sdp_log_limit *lim, int level);
/* A forked child: another thread may have held the limits' lock. */
void sdp_log_atfork_child(void);

#define sdp_log_limited(lim, level, ...)                                             \
	do {                                                                          \
		if (sdp_log_level >= (level) && sdp_log_limited_ok((lim), (level)))   \
			sdp_logf((level), __VA_ARGS__);                               \
	} while (0)
/* A site's own limit: one static per expansion. */
#define sdp_log_limited_at(level, ...) \
	do { static struct sdp_log_limit lim_; sdp_log_limited(&lim_, (level), __VA_ARGS__); } while (0)
#define sdp_warn_limited(...) sdp_log_limited_at(SDP_LOG_WARN, __VA_ARGS__)
#define sdp_info_limited(...) sdp_log_limited_at(SDP_LOG_INFO, __VA_ARGS__)

#endif

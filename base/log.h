/* One-line diagnostics on stderr, filtered by SDPSHIM_LOG=error|warn|info|debug.
 * Writes with a raw syscall so it never re-enters the interposed libc. */
#ifndef SDPSHIM_LOG_H
#define SDPSHIM_LOG_H

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

#endif

/* stderr logging for the library and the launcher: level filter and a
 * "sdpshim[pid]: level: message" line format. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

int sdp_log_level = SDP_LOG_WARN;

static const char *const level_names[] = { "none", "error", "warn", "info", "debug" };

int sdp_log_parse_level(const char *text)
{
	if (!text || !*text)
		return -1;
	for (int i = 0; i <= SDP_LOG_DEBUG; i++)
		if (strcmp(text, level_names[i]) == 0)
			return i;
	if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
		return text[0] - '0';
	return -1;
}

void sdp_log_init_from_env(void)
{
	const char *env = getenv("SDPSHIM_LOG");
	int level;

	if (!env || !*env)
		return;
	level = sdp_log_parse_level(env);
	if (level < 0) {
		sdp_logf(SDP_LOG_WARN, "SDPSHIM_LOG='%.32s' is not error|warn|info|debug; using warn", env);
		return;
	}
	sdp_log_level = level;
}

void sdp_logf(int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int len;

	if (level < SDP_LOG_ERROR || level > SDP_LOG_DEBUG)
		level = SDP_LOG_ERROR;
	if (sdp_log_level >= SDP_LOG_DEBUG) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		len = snprintf(line, sizeof(line), "sdpshim[%d] %ld.%03ld: %s: ", (int)getpid(),
			       (long)ts.tv_sec, ts.tv_nsec / 1000000, level_names[level]);
	} else {
		len = snprintf(line, sizeof(line), "sdpshim[%d]: %s: ", (int)getpid(),
			       level_names[level]);
	}
	va_start(ap, fmt);
	len += vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
	va_end(ap);
	if (len > (int)sizeof(line) - 2)
		len = (int)sizeof(line) - 2;
	line[len++] = '\n';
	syscall(SYS_write, 2, line, (size_t)len);
}

/* stderr logging for the library and the launcher: level filter, a
 * "sdpshim[pid]: level: message" line format, and the limit on lines a
 * peer can repeat at will (sdp_log_admit). */
#include <pthread.h>
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

static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

void sdp_log_atfork_child(void)
{
	pthread_mutex_init(&limit_lock, NULL);
}

bool sdp_log_admit(struct sdp_log_limit *lim, uint64_t now_ms, unsigned *left_out)
{
	bool admit;

	*left_out = 0;
	pthread_mutex_lock(&limit_lock);
	if (!lim->started || now_ms - lim->window_start_ms >= SDP_LOG_WINDOW_MS) {
		*left_out = lim->left_out;
		lim->started = true;
		lim->window_start_ms = now_ms;
		lim->in_window = 0;
		lim->left_out = 0;
	}
	admit = lim->in_window < SDP_LOG_BURST;
	if (admit)
		lim->in_window++;
	else
		lim->left_out++;
	pthread_mutex_unlock(&limit_lock);
	return admit;
}

bool sdp_log_limited_ok(struct sdp_log_limit *lim, int level)
{
	struct timespec ts;
	unsigned left_out;
	bool admit;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	admit = sdp_log_admit(lim, (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000, &left_out);
	if (left_out)
		sdp_logf(level, "%u more lines like the next were left out in %u s", left_out,
			 SDP_LOG_WINDOW_MS / 1000);
	return admit;
}

/* Shared helpers of the test programs: clock, timestamped log lines,
 * number parsing (tests/lib/progutil.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "progutil.h"

static double log_start_ms;

double prog_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void prog_log_start(void)
{
	log_start_ms = prog_mono_ms();
}

void prog_logline(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" t_ms=%.0f\n", prog_mono_ms() - log_start_ms);
	fflush(stdout);
}

bool prog_parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* Small pieces the test programs (tests/progs/) share: a monotonic clock,
 * timestamped log lines, and range-checked number parsing. */
#ifndef SDPSHIM_TESTS_PROGUTIL_H
#define SDPSHIM_TESTS_PROGUTIL_H

#include <stdbool.h>

/* CLOCK_MONOTONIC in milliseconds. */
double prog_mono_ms(void);
/* Starts the clock prog_logline's t_ms counts from. */
void prog_log_start(void);
/* Prints the line, then " t_ms=N" (since prog_log_start) and a newline,
 * and flushes stdout. */
void prog_logline(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A whole decimal number in min..max into *out; false otherwise. */
bool prog_parse_long(const char *s, long min, long max, long *out);

#endif

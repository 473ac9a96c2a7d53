/* TAP output for the C unit tests: one numbered line per case, failed
 * detail checks as "#" comments under it. */
#ifndef SDPSHIM_TESTS_TAP_H
#define SDPSHIM_TESTS_TAP_H

/* Prints "ok N - desc" or "not ok N - desc" and counts failures. */
void tap_result(int ok, const char *desc);
/* A detail check inside one case: returns ok; prints the message if not. */
int check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The exit status: 0 if every case passed. */
int tap_exit_status(void);

/* A table-driven test program: the plan, one result line per case, and the
 * exit status for main to return. */
struct tap_case {
	const char *desc;
	int (*fn)(void);
};
int tap_run(const struct tap_case *cases, unsigned count);
/* Runs fn in a child process, bounded by alarm_s seconds: a crash, a
 * sanitizer report or a hang fails that case alone.  True if fn passed. */
int tap_run_isolated(int (*fn)(void), unsigned alarm_s);

#endif

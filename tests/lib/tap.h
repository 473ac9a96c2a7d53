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

#endif

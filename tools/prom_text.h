/* The Prometheus text exposition format, version 0.0.4: metric family
 * headers (# HELP, # TYPE) and samples with escaped label values, written
 * into caller buffers so the rules can be tested on their own
 * (tests/unit/test_prom.c).  Nothing here knows the stats segment. */
#ifndef SDPSHIM_PROM_TEXT_H
#define SDPSHIM_PROM_TEXT_H

#include <stddef.h>
#include <stdint.h>

struct prom_label {
	const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not checked */
	const char *value; /* any bytes; escaped on output */
};

/* value with '\\' -> "\\\\", '"' -> "\\\"" and newline -> "\\n" (a label
 * value inside double quotes).  Returns the length, or -1 if it did not fit
 * (out is then still NUL-terminated when len > 0). */
int prom_escape_label(const char *value, char *out, size_t len);
/* The same for HELP text, where only '\\' and newline are escaped. */
int prom_escape_help(const char *text, char *out, size_t len);
/* "# HELP name help\n# TYPE name type\n".  Returns the length or -1. */
int prom_family(const char *name, const char *type, const char *help, char *out, size_t len);
/* "name{l1=\"v1\",...} value\n" ("name value\n" without labels).  Returns
 * the length or -1. */
int prom_sample(const char *name, const struct prom_label *labels, size_t n, uint64_t value,
		char *out, size_t len);

#endif

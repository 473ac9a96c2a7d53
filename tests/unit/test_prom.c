/* Unit tests (TAP) for the Prometheus text format helpers (tools/prom_text.c)
 * behind `sdpshim stat --prom`: label values escape backslash, double quote
 * and newline and nothing else; HELP text escapes backslash and newline but
 * not the quote; a family header is its HELP then its TYPE line; a sample
 * lists its labels in order (no braces without labels); and a buffer too
 * small gives -1, never a cut line. */
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "tools/prom_text.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int same(const char *got, const char *want)
{
	return check(strcmp(got, want) == 0, "got [%s], want [%s]", got, want);
}

static int test_label_escape(void)
{
	static const struct { const char *in, *out; } cases[] = {
		{ "python3", "python3" },
		{ "a\\b", "a\\\\b" },
		{ "say \"hi\"", "say \\\"hi\\\"" },
		{ "two\nlines", "two\\nlines" },
		{ "\\\"\n", "\\\\\\\"\\n" },
		{ "tab\tstays", "tab\tstays" },
		{ "", "" },
	};
	char out[64];
	int ok = 1;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int n = prom_escape_label(cases[i].in, out, sizeof(out));

		ok &= check(n == (int)strlen(cases[i].out), "case %zu: length %d", i, n);
		ok &= same(out, cases[i].out);
	}
	return ok;
}

static int test_help_escape(void)
{
	char out[64];
	int ok = 1;

	ok &= check(prom_escape_help("a \"quoted\" \\ word\n", out, sizeof(out)) > 0, "fits");
	ok &= same(out, "a \"quoted\" \\\\ word\\n");
	return ok;
}

static int test_family(void)
{
	char out[256];
	int n = prom_family("sdpshim_x_total", "counter", "Bytes\\sent\nnow", out, sizeof(out));

	return check(n == (int)strlen(out), "length %d", n) &
	       same(out, "# HELP sdpshim_x_total Bytes\\\\sent\\nnow\n"
			 "# TYPE sdpshim_x_total counter\n");
}

static int test_sample(void)
{
	const struct prom_label l[] = { { "pid", "42" }, { "comm", "my \"app\"\n" } };
	char out[256];
	int ok = 1;

	ok &= check(prom_sample("sdpshim_x_total", l, 2, 18446744073709551615ull, out,
				sizeof(out)) > 0, "fits");
	ok &= same(out, "sdpshim_x_total{pid=\"42\",comm=\"my \\\"app\\\"\\n\"} 18446744073709551615\n");
	ok &= check(prom_sample("sdpshim_processes", NULL, 0, 0, out, sizeof(out)) > 0, "fits");
	ok &= same(out, "sdpshim_processes 0\n");
	return ok;
}

/* Every length short of the whole line fails and leaves a string. */
static int test_too_small(void)
{
	const struct prom_label l[] = { { "path", "tcp" } };
	const char *want = "sdpshim_y{path=\"tcp\"} 7\n";
	char out[64];
	int ok = 1;

	for (size_t len = 1; len <= strlen(want); len++) {
		memset(out, 'x', sizeof(out));
		ok &= check(prom_sample("sdpshim_y", l, 1, 7, out, len) == -1, "len %zu fits", len);
		ok &= check(memchr(out, '\0', len) != NULL, "len %zu: not terminated", len);
	}
	ok &= check(prom_sample("sdpshim_y", l, 1, 7, out, strlen(want) + 1) ==
		    (int)strlen(want), "the exact size fits");
	ok &= check(prom_escape_label("a\"b", out, 4) == -1, "escaped growth counted");
	ok &= check(prom_family("n", "gauge", "h", out, 0) == -1, "len 0");
	return ok;
}

static const struct tap_case cases[] = {
	{ "label values escape backslash, double quote and newline only", test_label_escape },
	{ "HELP text escapes backslash and newline, not the quote", test_help_escape },
	{ "a family is its HELP line then its TYPE line", test_family },
	{ "a sample lists escaped labels in order; none without braces", test_sample },
	{ "a buffer too small gives -1 and a terminated string", test_too_small },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}

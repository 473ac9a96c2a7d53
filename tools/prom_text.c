/* Owns the Prometheus text format 0.0.4 as strings: escaping of label values
 * and HELP text, the family header and one sample line (tools/prom_text.h). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tools/prom_text.h"

/* A growing string in a fixed buffer: once it overflows, it stays failed. */
struct text_buf {
	char *out;
	size_t len, used;
	bool failed;
};

static void tb_init(struct text_buf *tb, char *out, size_t len)
{
	tb->out = out;
	tb->len = len;
	tb->used = 0;
	tb->failed = len == 0;
	if (len)
		out[0] = '\0';
}

static void tb_put(struct text_buf *tb, const char *s, size_t n)
{
	if (tb->failed || n >= tb->len - tb->used) {
		tb->failed = true;
		return;
	}
	memcpy(tb->out + tb->used, s, n);
	tb->used += n;
	tb->out[tb->used] = '\0';
}

static void tb_str(struct text_buf *tb, const char *s)
{
	tb_put(tb, s, strlen(s));
}

static int tb_result(const struct text_buf *tb)
{
	return tb->failed ? -1 : (int)tb->used;
}

/* Escapes s into tb; a double quote only when quote is set. */
static void tb_escaped(struct text_buf *tb, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			tb_put(tb, "\\\\", 2);
		else if (*s == '\n')
			tb_put(tb, "\\n", 2);
		else if (*s == '"' && quote)
			tb_put(tb, "\\\"", 2);
		else
			tb_put(tb, s, 1);
	}
}

int prom_escape_label(const char *value, char *out, size_t len)
{
	struct text_buf tb;

	tb_init(&tb, out, len);
	tb_escaped(&tb, value, true);
	return tb_result(&tb);
}

int prom_escape_help(const char *text, char *out, size_t len)
{
	struct text_buf tb;

	tb_init(&tb, out, len);
	tb_escaped(&tb, text, false);
	return tb_result(&tb);
}

int prom_family(const char *name, const char *type, const char *help, char *out, size_t len)
{
	struct text_buf tb;

	tb_init(&tb, out, len);
	tb_str(&tb, "# HELP ");
	tb_str(&tb, name);
	tb_str(&tb, " ");
	tb_escaped(&tb, help, false);
	tb_str(&tb, "\n# TYPE ");
	tb_str(&tb, name);
	tb_str(&tb, " ");
	tb_str(&tb, type);
	tb_str(&tb, "\n");
	return tb_result(&tb);
}

int prom_sample(const char *name, const struct prom_label *labels, size_t n, uint64_t value,
		char *out, size_t len)
{
	struct text_buf tb;
	char num[24];

	tb_init(&tb, out, len);
	tb_str(&tb, name);
	for (size_t i = 0; i < n; i++) {
		tb_str(&tb, i ? "," : "{");
		tb_str(&tb, labels[i].name);
		tb_str(&tb, "=\"");
		tb_escaped(&tb, labels[i].value, true);
		tb_str(&tb, "\"");
	}
	if (n)
		tb_str(&tb, "}");
	snprintf(num, sizeof(num), " %" PRIu64 "\n", value);
	tb_str(&tb, num);
	return tb_result(&tb);
}

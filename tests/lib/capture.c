/* fd 2 into a file and back, for the unit tests (see capture.h). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "capture.h"

static FILE *captured;
static int saved_stderr = -1;

void stderr_capture_begin(void)
{
	fflush(stderr);
	captured = tmpfile();
	saved_stderr = dup(2);
	if (!captured || saved_stderr < 0 || dup2(fileno(captured), 2) < 0) {
		perror("stderr_capture_begin");
		exit(1);
	}
}

int stderr_capture_end(char *buf, size_t len)
{
	size_t n;
	int lines = 0;

	dup2(saved_stderr, 2);
	close(saved_stderr);
	saved_stderr = -1;
	rewind(captured);
	n = fread(buf, 1, len - 1, captured);
	buf[n] = '\0';
	fclose(captured);
	captured = NULL;
	for (size_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	return lines;
}

/* What a unit test's code under test logs: the library writes its lines to
 * fd 2 with a raw write, so they are caught at the fd, in a file. */
#ifndef SDPSHIM_TESTS_CAPTURE_H
#define SDPSHIM_TESTS_CAPTURE_H

#include <stddef.h>

/* From now on fd 2 goes to a file (exits on failure). */
void stderr_capture_begin(void);
/* fd 2 is back; the text written meanwhile is in buf (NUL-terminated, cut
 * to len - 1 bytes).  Returns how many lines it holds. */
int stderr_capture_end(char *buf, size_t len);

#endif

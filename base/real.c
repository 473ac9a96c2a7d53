/* Resolves the real libc entry points behind our hooks, once, into `real`. */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fortify.h" /* prototypes for dlsym of the _chk variants */
#include "base/guard.h"
#include "base/real.h"

struct real_libc real;
/* The recursion guard of base/guard.h. */
__thread int sdp_in_lib;

static void die_unresolved(const char *name, const char *why)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "sdpshim: fatal: cannot resolve libc symbol '%s': %s\n",
			 name, why);
	if (n > 0)
		syscall(SYS_write, 2, msg, (size_t)n);
	abort();
}

static void *resolve_one(const char *name, void *our_hook, int mandatory)
{
	void *sym = dlsym(RTLD_NEXT, name);

	if (sym == our_hook)
		die_unresolved(name, "dlsym returned sdpshim's own hook");
	if (!sym && mandatory)
		die_unresolved(name, "not found after sdpshim in the link chain");
	return sym;
}

void real_resolve(void)
{
#define REAL_RESOLVE(ret, name, params, mandatory) \
	real.name = (ret(*) params)resolve_one(#name, (void *)&name, mandatory);
	REAL_SYMBOLS(REAL_RESOLVE)
#undef REAL_RESOLVE
}

/* The `sdpshim` launcher: `run` starts a program with the library
 * preloaded; `stat` and `doctor` live in their own files. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdpshim run [-l LEVEL] [-s STATS_FILE] [-c CONFIG] [--] CMD [ARGS...]\n"
		"       sdpshim stat [--json | --totals | --prom] [-i SECS [-n N]] [filters] (stat --help)\n"
		"       sdpshim doctor [ADDR]\n"
		"       sdpshim version\n"
		"\n"
		"run     runs CMD with libsdpshim.so preloaded: its TCP sockets move to RDMA\n"
		"        when the peer runs sdpshim and an RDMA device reaches it.\n"
		"stat    shows every connection of your preloaded processes (path, reason, bytes).\n"
		"doctor  checks RDMA devices, ports, RLIMIT_MEMLOCK, config, and the route to ADDR.\n");
}

/* The library: $SDPSHIM_LIB, else next to this binary (build tree), else
 * ../lib/sdpshim/ from it (an install under any prefix, or a package
 * unpacked anywhere), else the install location built in (SDPSHIM_LIBDIR).
 * *how says which; on failure out holds the last path tried. */
int find_library(char *out, size_t len, const char **how)
{
	const char *env = getenv("SDPSHIM_LIB");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		snprintf(out, len, "%s", env);
		*how = "from SDPSHIM_LIB";
		return access(out, R_OK) == 0 ? 0 : -1;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			*how = "next to this sdpshim";
			if (snprintf(out, len, "%s/libsdpshim.so", self) < (int)len &&
			    access(out, R_OK) == 0)
				return 0;
			*how = "in ../lib/sdpshim of this sdpshim";
			if (snprintf(out, len, "%s/../lib/sdpshim/libsdpshim.so", self) < (int)len &&
			    access(out, R_OK) == 0)
				return 0;
		}
	}
	snprintf(out, len, "%s/libsdpshim.so", SDPSHIM_LIBDIR);
	*how = "the install location built in";
	return access(out, R_OK) == 0 ? 0 : -1;
}

static int prepend_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *value;
	int rc;

	if (old && *old)
		rc = asprintf(&value, "%s:%s", lib, old);
	else
		rc = asprintf(&value, "%s", lib);
	if (rc < 0)
		return -1;
	rc = setenv("LD_PRELOAD", value, 1);
	free(value);
	return rc;
}

int run_main(int argc, char **argv)
{
	char lib[PATH_MAX];
	const char *how;
	int opt;

	optind = 1;
	while ((opt = getopt(argc, argv, "+l:s:c:h")) != -1) {
		switch (opt) {
		case 'l': setenv("SDPSHIM_LOG", optarg, 1); break;
		case 's': setenv("SDPSHIM_STATS_FILE", optarg, 1); break;
		case 'c': setenv("SDPSHIM_CONFIG", optarg, 1); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "sdpshim run: no command given\n");
		usage(stderr);
		return 2;
	}
	if (find_library(lib, sizeof(lib), &how) != 0) {
		fprintf(stderr, "sdpshim run: cannot find libsdpshim.so (tried %s; set SDPSHIM_LIB)\n",
			lib);
		return 127;
	}
	if (prepend_preload(lib) != 0) {
		perror("sdpshim run: setenv LD_PRELOAD");
		return 127;
	}
	execvp(argv[optind], &argv[optind]);
	fprintf(stderr, "sdpshim run: cannot run %s: %s\n", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "run") == 0)
		return run_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "stat") == 0)
		return stat_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "doctor") == 0)
		return doctor_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("sdpshim %s\n", SDPSHIM_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "sdpshim: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}

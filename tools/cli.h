/* Sub-commands of the `sdpshim` launcher. */
#ifndef SDPSHIM_CLI_H
#define SDPSHIM_CLI_H

#include <stddef.h>

/* argv[0] is the sub-command name; each returns the process exit code. */
int run_main(int argc, char **argv);    /* tools/sdpshim.c */
int stat_main(int argc, char **argv);   /* tools/stat.c */
int doctor_main(int argc, char **argv); /* tools/doctor.c */

/* The libsdpshim.so that `run` preloads (tools/sdpshim.c): 0 with its path
 * in out, or -1 with the last path tried; *how says where it was found. */
int find_library(char *out, size_t len, const char **how);

#endif

/* Sub-commands of the `sdpshim` launcher. */
#ifndef SDPSHIM_CLI_H
#define SDPSHIM_CLI_H

/* argv[0] is the sub-command name; each returns the process exit code. */
int run_main(int argc, char **argv);    /* preload/sdpshim_cli.c */
int stat_main(int argc, char **argv);   /* preload/stat_cli.c */
int doctor_main(int argc, char **argv); /* ipoib_fallback/doctor_cli.c */

#endif

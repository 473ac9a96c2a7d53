/* Sub-commands of the `sdpshim` launcher. */
#ifndef SDPSHIM_CLI_H
#define SDPSHIM_CLI_H

/* argv[0] is the sub-command name; each returns the process exit code. */
int run_main(int argc, char **argv);    /* tools/sdpshim.c */
int stat_main(int argc, char **argv);   /* tools/stat.c */
int doctor_main(int argc, char **argv); /* tools/doctor.c */

#endif

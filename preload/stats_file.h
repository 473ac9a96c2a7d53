/* SDPSHIM_STATS_FILE: the line each connection writes when it closes
 * (preload/stats_file.c). */
#ifndef SDPSHIM_STATS_FILE_H
#define SDPSHIM_STATS_FILE_H

#include <stdint.h>
#include <sys/types.h>

#include "base/stats_shm.h"

/* Appends st's JSON line, if SDPSHIM_STATS_FILE names a file. */
void stats_file_append(const struct sdp_conn_stats *st, pid_t pid, uint64_t closed_ms);

/* fork: the writer's lock is held across it (taken after the socket
 * table's); the child re-creates it and keeps the parent's open file. */
void stats_file_atfork_prepare(void);
void stats_file_atfork_parent(void);
void stats_file_atfork_child(void);

#endif

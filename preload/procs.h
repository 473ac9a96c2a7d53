/* Process events: fork handlers, daemon(), and exec preparation. */
#ifndef SDPSHIM_PROCS_H
#define SDPSHIM_PROCS_H

void proc_atfork_prepare(void);
void proc_atfork_parent(void);
void proc_atfork_child(void);

#endif

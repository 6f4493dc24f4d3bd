/* host_exec.h - what the executables of the host backends (cpu/, ref/)
 * share: the backend's head, the context, the signature, the counters. The
 * backend's own struct begins with it, and the table's stats, desc, context
 * and times slots are these functions. */
#ifndef FC_HOST_EXEC_H
#define FC_HOST_EXEC_H

#include "lower/program_desc.h"
#include "runtime/backend.h"

typedef struct fc_host_exec {
    fc_exec_head head;
    fc_context *ctx;
    fc_program_desc d; /* the signature and the graph's text */
    fc_run_stats stats;
    fc_compile_times times;
} fc_host_exec;

void fc_host_exec_stats(const fc_program *p, fc_run_stats *out);
const fc_program_desc *fc_host_exec_desc(const fc_program *p);
fc_context *fc_host_exec_context(const fc_program *p);
void fc_host_exec_times(const fc_program *p, fc_compile_times *out);

#endif

/* host_exec.c - the slots the host backends' tables share (host_exec.h). */
#include "runtime/host_exec.h"

static const fc_host_exec *host(const fc_program *p) { return (const fc_host_exec *)(const void *)p; }

void fc_host_exec_stats(const fc_program *p, fc_run_stats *out) { *out = host(p)->stats; }
const fc_program_desc *fc_host_exec_desc(const fc_program *p) { return &host(p)->d; }
fc_context *fc_host_exec_context(const fc_program *p) { return host(p)->ctx; }
void fc_host_exec_times(const fc_program *p, fc_compile_times *out) { *out = host(p)->times; }

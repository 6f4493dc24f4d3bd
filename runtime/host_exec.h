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

/* A zeroed executable of `size` bytes (the backend's struct, which begins
 * with an fc_host_exec) of backend b, in ctx; NULL when out of memory. */
fc_host_exec *fc_host_exec_new(fc_context *ctx, const fc_backend *b, size_t size);
/* What a compile of g ends with, started at t0 (fc_now_ms) and so far
 * with status st: the signature, the graph's text, the compile's time, and
 * h into *out; on failure (st's, or FC_ERR_NOMEM) h freed by its backend's
 * free. */
fc_status fc_host_exec_finish(fc_host_exec *h, fc_graph *g, double t0, fc_status st, fc_program **out);
/* Free h's signature and h itself (the end of a backend's free). */
void fc_host_exec_release(fc_host_exec *h);
/* fc_run on host pointers for a backend whose run_shaped takes tensors:
 * the counts checked, each pointer given its parameter's or result's
 * static type, then run_shaped. */
fc_status fc_host_exec_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream,
                           fc_status (*run_shaped)(fc_program *, const fc_tensor *, int, const fc_tensor *, int, void *));

void fc_host_exec_stats(const fc_program *p, fc_run_stats *out);
const fc_program_desc *fc_host_exec_desc(const fc_program *p);
fc_context *fc_host_exec_context(const fc_program *p);
void fc_host_exec_times(const fc_program *p, fc_compile_times *out);
/* A host backend's table slots: its own functions, named p_compile,
 * p_run, ... (p_built, p_present, p_compile, p_run, p_run_shaped,
 * p_run_host, p_describe, p_free), and the functions above. */
#define FC_HOST_BACKEND_SLOTS(p)                                                                                \
    .built = p##_built, .present = p##_present, .compile = p##_compile, .run = p##_run,                         \
    .run_shaped = p##_run_shaped, .run_host = p##_run_host, .describe = p##_describe, .free = p##_free,          \
    .stats = fc_host_exec_stats, .desc = fc_host_exec_desc, .context = fc_host_exec_context, .times = fc_host_exec_times

#endif

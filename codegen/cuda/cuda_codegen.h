/*
 * cuda_codegen.h - CUDA C for a launch plan (internal).
 *
 * Codegen reads a scheduled plan (passes/passes.h) and writes one CUDA C
 * translation unit for the whole plan plus launch metadata for each kernel.
 * It knows nothing of the driver: the runtime compiles the source with NVRTC,
 * loads it and launches each kernel with the described arguments.
 */
#ifndef FC_CUDA_CODEGEN_H
#define FC_CUDA_CODEGEN_H

#include "passes/passes.h"

typedef enum fc_launch_kind {
    FC_LAUNCH_KERNEL,  /* a generated kernel in the module */
    FC_LAUNCH_LIBRARY, /* a library call (cuBLASLt matmul; a later issue) */
    FC_LAUNCH_ALIAS,   /* nothing to launch: an output aliases an input buffer */
} fc_launch_kind;

typedef struct fc_launch {
    fc_launch_kind kind;
    char name[64];    /* kernel function name (extern "C") */
    int group;        /* plan group id */
    unsigned grid[3]; /* grid dimensions */
    unsigned block[3];
    unsigned smem;    /* dynamic shared memory bytes */
    /* Kernel parameters in order: one device pointer per value id. The
     * first nreads are read, the rest written. */
    int nargs, nreads;
    int *args;        /* value ids (malloc'd) */
    char summary[160]; /* for --emit=plan: "softmax-like row reduce: reduce_max, sub, exp, ..." */
} fc_launch;

typedef struct fc_cuda_src {
    char *source; /* malloc'd CUDA C */
    fc_launch *launches; /* launch order */
    int nlaunches;
} fc_cuda_src;

/* Generate the source and launches for `plan`. */
fc_status fc_cuda_codegen(const fc_plan *plan, fc_cuda_src *out);
void fc_cuda_src_release(fc_cuda_src *s);

#endif

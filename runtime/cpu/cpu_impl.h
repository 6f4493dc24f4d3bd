/*
 * cpu_impl.h - the CPU program's layout and what its files share (internal
 * to runtime/cpu/cpu_*.c): cpu_program.c compiles and runs a program,
 * cpu_library.c runs its library groups, cpu_decode.c those of the decode
 * ops, cpu_string.c string_normalizer's.
 */
#ifndef FC_RUNTIME_CPU_IMPL_H
#define FC_RUNTIME_CPU_IMPL_H

#include "runtime/cpu/cpu_program.h"
#include "ir.h"

#ifdef FUSEC_HAVE_LLVM

#include "codegen/llvm/llvm_codegen.h"
#include "passes/epilogue.h"
#include "passes/passes.h"

typedef struct pool pool; /* the program's threads (cpu_program.c) */

struct fc_cpu_program {
    fc_context *ctx;
    fc_cpu_options opts;
    int threads;     /* resolved opts.threads */
    fc_graph *g;     /* fusec's copy, after the passes */
    fc_plan plan;
    fc_llvm_module *mod;
    fc_llvm_kernel *kern; /* per group, in launch order */
    /* Per group, in launch order: a library gemm's or matmul's node,
     * decoded at compile time (fc_cpu_check_library) for its runs. */
    fc_gemm_info *gemm;

    fc_plan_classes cls; /* storage classes, by value id (see the top of the file) */

    void *arena;      /* plan.arena_bytes of intermediates */
    void **args;      /* per-launch scratch: the kernel's pointers */
    int max_args;
    pool *pool;       /* started by the first parallel kernel */
    char note[512];   /* why the plan is not the fused one, or "" */
    char **strbuf;    /* per group: a string result's bytes (cpu_string.c) */
};

/* Run library group gr (gi: its node decoded, for a gemm or matmul) on
 * its pointers args (inputs, then outputs). */
fc_status fc_cpu_run_library(fc_cpu_program *p, const fc_group *gr, const fc_gemm_info *gi, void *const *args);
/* update_slice and cache_attention (cpu_decode.c): whether op is one, and
 * run library group gr of one. */
bool fc_cpu_is_decode_op(fc_op op);

fc_status fc_cpu_run_decode(fc_cpu_program *p, const fc_group *gr, void *const *args);
/* string_normalizer, library group gr at launch position pos (cpu_string.c);
 * the string outputs of fc_cpu_run made the caller's (fusec.h's layout:
 * pointers and bytes in one block); and the freeing of the program's bytes. */
fc_status fc_cpu_run_string(fc_cpu_program *p, int pos, const fc_group *gr, void *const *args);
fc_status fc_cpu_own_strings(fc_cpu_program *p, fc_tensor *outputs, int nout);
void fc_cpu_free_strings(fc_cpu_program *p);

#endif
#endif

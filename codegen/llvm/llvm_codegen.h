/*
 * llvm_codegen.h - the LLVM CPU backend's code generator (internal).
 *
 * Reads a scheduled plan (passes/passes.h), the same one the CUDA backend
 * gets, and lowers every POINTWISE and REDUCE group to one host function
 * through the LLVM C API: LLVM IR, the standard optimization pipeline for
 * the host CPU (so the loops vectorize), and ORC LLJIT. LIBRARY groups
 * (matmul, attention, gemm) get no code: the runtime calls BLAS for them.
 *
 * Only compiled when CMake found LLVM (FUSEC_HAVE_LLVM); runtime/cpu/cpu_program.c
 * is the only user. docs/CPU-BACKEND.md describes the generated code.
 */
#ifndef FC_LLVM_CODEGEN_H
#define FC_LLVM_CODEGEN_H

#include "passes/passes.h"

/*
 * A generated kernel. It runs iterations [begin, end) of its group's outer
 * loop: elements of the iteration space for a POINTWISE group, rows for a
 * REDUCE group. Disjoint ranges may run on different threads at once.
 * args holds one host pointer per group input, then one per group output,
 * in the order of fc_group's inputs and outputs (dense row-major buffers
 * in each dtype's storage: f16/bf16 as 16-bit patterns, bool as a byte).
 */
typedef void (*fc_llvm_kernel_fn)(void *const *args, int64_t begin, int64_t end);

typedef struct fc_llvm_kernel {
    fc_llvm_kernel_fn fn; /* NULL for a LIBRARY group (no generated code) */
    int64_t iters;        /* trip count of the outer loop */
    int64_t grain;        /* split [0, iters) at multiples of this only */
    int64_t work;         /* rough cost of the whole kernel (elements x ops), for threading */
    char summary[160];    /* "pointwise: mul,add,erf,..." */
} fc_llvm_kernel;

typedef struct fc_llvm_options {
    bool keep_ir; /* keep the optimized module's text (fc_llvm_module_ir) */
} fc_llvm_options;

/* The JIT-compiled code of one plan; owns the machine code. */
typedef struct fc_llvm_module fc_llvm_module;

/*
 * Compile every group of `plan`. kernels must have room for plan->ngroups
 * entries; kernels[i] describes plan->groups[i]. Errors go to the plan's
 * context: FC_ERR_UNSUPPORTED for a group this backend cannot lower (the
 * message names it), FC_ERR_RUNTIME for an LLVM failure. *row_conflict
 * (if not NULL) is set when the reason is a reduction group that reads a
 * per-row value, or one computed from it, at another row's index: a plan
 * that fusion should not have made (the graph compiles unfused).
 */
fc_status fc_llvm_compile(const fc_plan *plan, const fc_llvm_options *o, fc_llvm_module **out,
                          fc_llvm_kernel *kernels, bool *row_conflict);
/* The optimized LLVM IR of the module, if it was kept; else NULL. */
const char *fc_llvm_module_ir(const fc_llvm_module *m);
/* Free the module and its machine code. NULL is ignored. */
void fc_llvm_module_free(fc_llvm_module *m);

/* "x86_64-pc-linux-gnu, cpu znver3, LLVM 14.0.6": what the code is built for. */
const char *fc_llvm_target_description(void);

#endif

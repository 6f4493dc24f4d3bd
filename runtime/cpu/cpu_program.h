/*
 * cpu_program.h - the CPU backend: compile a graph for the host CPU and run
 * it on host buffers (internal header; the CLI and the tests use it).
 *
 * fc_cpu_compile runs the same pipeline as fc_compile on a copy of the graph
 * (passes, fusion, scheduling, memory plan), then lowers every kernel group
 * to LLVM IR and JIT-compiles it for the host (codegen/llvm/). matmul,
 * attention and gemm groups call BLAS (OpenBLAS through CBLAS when CMake
 * found it, plain loops otherwise). Large kernels split their outer loop
 * across threads. docs/CPU-BACKEND.md has the details and the numbers.
 *
 * When fusec was configured without LLVM, everything here still links:
 * fc_cpu_compile fails with FC_ERR_UNSUPPORTED ("this build has no CPU
 * backend (LLVM not found at configure time)") and fc_cpu_available() is
 * false.
 *
 * Tensors follow fc_run_reference's convention (fusec.h): dense row-major
 * host memory in each dtype's storage, f16/bf16 as uint16_t bit patterns,
 * bool as one byte. A program is not to be run from two threads at once
 * (it owns one arena of intermediates); distinct programs may.
 */
#ifndef FC_RUNTIME_CPU_PROGRAM_H
#define FC_RUNTIME_CPU_PROGRAM_H

#include "fusec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_cpu_program fc_cpu_program;
struct fc_plan;

typedef struct fc_cpu_options {
    /* Threads that run a large kernel, the calling thread included. 0: the
     * FUSEC_CPU_THREADS environment variable if set, else every online
     * core. 1: never start a thread. */
    int threads;
    bool fuse;    /* vertical and horizontal fusion; default true */
    bool keep_ir; /* keep the optimized LLVM IR (fc_cpu_program_llvm_ir) */
    fc_precision precision; /* the autocast pass's target; FC_PRECISION_TF32 computes f32 */
    fc_numerics numerics; /* rounding inside kernels (fc_compile_options.numerics); default fast */
    /* The collectives' group and this program's rank in it
     * (fc_compile_options.tp, tp_rank; docs/PARALLEL.md). */
    const struct fc_tp_group *tp;
    int tp_rank;
} fc_cpu_options;

/* Fill o with the defaults. */
void fc_cpu_options_default(fc_cpu_options *o);

/* True when this build has the CPU backend (LLVM was found). */
bool fc_cpu_available(void);

/*
 * Compile g for the host CPU. Every symbolic dim must be bound (shapes are
 * baked into the code). The graph is not modified: fusec compiles a copy.
 * Errors go to g's context.
 */
fc_status fc_cpu_compile(fc_graph *g, fc_cpu_program **out);
fc_status fc_cpu_compile_ex(fc_graph *g, const fc_cpu_options *o, fc_cpu_program **out);

/*
 * Run p. inputs[i] must match parameter i in dtype and shape. On success
 * outputs[0..nout) hold newly allocated tensors (release each with
 * fc_tensor_release); on failure they are all empty. nout must equal the
 * graph's number of results.
 */
fc_status fc_cpu_run(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout);

/*
 * Run p writing into the caller's buffers: outputs[k] must have result k's
 * dtype and shape and non-NULL data (unless empty), and must not overlap
 * any input or another output. Nothing is allocated per call but the
 * temporaries of 16-bit matmuls.
 */
fc_status fc_cpu_run_into(fc_cpu_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout);

/*
 * fc_cpu_run, then (iters > 0) a benchmark: two warm-up runs, then `iters`
 * runs timed one by one with CLOCK_MONOTONIC; the median in milliseconds goes
 * to *median_ms. The outputs hold the first run's results. For the CLI's
 * --bench N ("time: X ms median of N").
 */
fc_status fc_cpu_bench(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout, int iters,
                       double *median_ms);

/* For the profile (runtime/profile.h): one run into the caller's outputs
 * (as fc_cpu_run_into, unchecked) with group pos's start and end times
 * (fc_now_ms) in t[2 pos], t[2 pos + 1] (2 x the groups; an alias's 0). */
fc_status fc_cpu_run_timed(fc_cpu_program *p, const fc_tensor *inputs, const fc_tensor *outputs, double *t);
/* The plan's groups, and group pos as a launch record (name, kind,
 * summary, cost, source, arguments: l->args malloc'd, the caller frees). */
int fc_cpu_program_ngroups(const fc_cpu_program *p);
struct fc_launch;
fc_status fc_cpu_program_launch(const fc_cpu_program *p, int pos, struct fc_launch *l);
/* fc_program_plan_dot of the program's plan. */
char *fc_cpu_program_plan_dot(fc_cpu_program *p);

/* Free a program and its machine code. NULL is ignored. */
void fc_cpu_program_free(fc_cpu_program *p);

/*
 * The launch plan as text, one line per launch, in the form of
 * fc_program_plan_text (the last line is "total: K kernels, L library
 * calls, B bytes of intermediates"). malloc'd (fc_free); NULL on failure.
 */
char *fc_cpu_program_plan_text(fc_cpu_program *p);
/* The optimized LLVM IR of the program, if compiled with keep_ir; else NULL. */
const char *fc_cpu_program_llvm_ir(const fc_cpu_program *p);
/* Why the program runs another plan than the fused one ("" when it does
 * not): a fused reduction group the code generator refused (it reads a
 * per-row value at another row's index), compiled unfused instead. */
const char *fc_cpu_program_note(const fc_cpu_program *p);
/* fusec's copy of the graph, after the passes. */
fc_graph *fc_cpu_program_graph(const fc_cpu_program *p);
/* The launch plan (groups in launch order, the memory plan). */
const struct fc_plan *fc_cpu_program_plan(const fc_cpu_program *p);
/* Threads a large kernel runs on (the calling thread included). */
int fc_cpu_program_threads(const fc_cpu_program *p);
/* Generated kernels and library calls of the program; either may be NULL. */
void fc_cpu_program_count_launches(const fc_cpu_program *p, int *kernels, int *library);
/* What the code is compiled for ("x86_64-pc-linux-gnu, cpu znver3, LLVM
 * 14.0.6; BLAS: OpenBLAS"), or the reason there is no CPU backend. */
const char *fc_cpu_target_description(void);

#ifdef __cplusplus
}
#endif
#endif

/*
 * program.h - compiled programs, seen from inside fusec (internal header).
 *
 * The public half is in fusec.h: fc_compile, fc_run, fc_program_free and
 * the emit functions. This header adds what the CLI and the tests need:
 * read access to the plan, the launches and the cubin; a host-to-host run
 * with an optional benchmark; and the numeric comparison against the
 * reference interpreter, with the tolerance of each dtype.
 *
 * docs/RUNTIME-PROGRAM.md describes the compile and run flow, the memory
 * plan and the tolerance table.
 */
#ifndef FC_RUNTIME_PROGRAM_H
#define FC_RUNTIME_PROGRAM_H

#include "codegen/cuda/cuda_codegen.h"

/* Not runtime/cuda.h: this header needs no CUDA header, so the CLI can use
 * it without the toolkit's include directory. fc_bytes is shared with
 * runtime/cuda.h under one guard (free it with fc_bytes_free). */
#ifndef FC_BYTES_DEFINED
#define FC_BYTES_DEFINED
typedef struct fc_bytes {
    uint8_t *data;
    size_t size;
} fc_bytes;
#endif

/* ------------------------------------------------------------------ */
/* Accessors. Everything returned is owned by the program.             */
/* ------------------------------------------------------------------ */

/* The graph that was compiled: fusec's copy, after the passes. */
fc_graph *fc_program_graph(const fc_program *p);
/* The launch plan (groups in launch order, the memory plan). */
const fc_plan *fc_program_plan(const fc_program *p);
/* The launches, in order (kernels, library calls and aliases). */
int fc_program_num_launches(const fc_program *p);
const fc_launch *fc_program_launch(const fc_program *p, int i);
/* How many launches of each kind; any pointer may be NULL. */
void fc_program_count_launches(const fc_program *p, int *kernels, int *library, int *aliases);
/* The CUDA target the cubin was compiled for, major*10+minor (90: sm_90). */
int fc_program_sm(const fc_program *p);
/* The cubin NVRTC made of fc_program_cuda_source(p), for sm fc_program_sm(p). */
const fc_bytes *fc_program_cubin(const fc_program *p);

/* ------------------------------------------------------------------ */
/* Running from host memory.                                           */
/* ------------------------------------------------------------------ */

/*
 * Copy host tensors to the device, run p there, and copy the results back.
 * inputs[i] must match parameter i of the graph in dtype and shape (as in
 * fc_run_reference). On success outputs[0..nout) hold newly allocated host
 * tensors in fc_run_reference's storage convention (release each with
 * fc_tensor_release); on failure they are all empty.
 *
 * bench_iters > 0 also benchmarks: after the checked run, a few warm-up
 * runs, then bench_iters runs each timed with a pair of CUDA events; the
 * median in milliseconds goes to *median_ms (which may be NULL otherwise).
 * Device buffers are allocated for the call and freed before it returns.
 * Without a GPU this fails as fc_run does (FC_ERR_RUNTIME, "no CUDA ...").
 */
fc_status fc_program_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters);

/* ------------------------------------------------------------------ */
/* Comparing a backend's outputs with the reference interpreter's.     */
/* ------------------------------------------------------------------ */

/*
 * The tolerance of a dtype: an element passes when
 *
 *     |got - want| <= abs + rel * |want|        (numpy.allclose's rule)
 *
 * with NaN equal to NaN and an infinity equal only to itself.
 *
 *   dtype   rel      abs      why
 *   f64     1e-9     1e-12    f64 kernels; only summation order and libm
 *                             ulps differ from the reference
 *   f32     1e-5     1e-5     ~100 ulps at 1.0: reductions accumulate in a
 *                             different order (and in f32) than the
 *                             reference's float64, and expf/tanhf differ by
 *                             a few ulps; abs covers results that cancel
 *                             to near zero
 *   f16     2e-3     1e-3     two f16 ulps relative, one ulp at 1.0
 *   bf16    1.6e-2   1e-2     two bf16 ulps relative, one ulp at 1.0
 *   ints    0        0        exact
 *   bool    0        0        exact
 *
 * Why two ulps for the 16-bit floats: a fused kernel keeps intermediates in
 * f32 registers, while the reference rounds every node's result to its
 * dtype, so a chain of 16-bit ops may round once where the reference
 * rounds at every step, and the two can end one ulp apart on either side.
 * The abs terms assume data of order one (the tests' inputs are); they are
 * what keeps cancellation (x - y with x close to y) from failing on the
 * rounding of the operands.
 */
typedef struct fc_tolerance {
    double rel, abs;
} fc_tolerance;

fc_tolerance fc_dtype_tolerance(fc_dtype dt);

/* How one output compares with the reference. */
typedef struct fc_output_diff {
    fc_dtype dtype;
    int64_t numel;
    fc_tolerance tol;
    double max_abs_err; /* max |got - want| (inf when a NaN or inf differs) */
    double max_rel_err; /* max |got - want| / |want| over elements with want != 0 */
    int64_t nbad;       /* elements outside the tolerance */
    int64_t worst;      /* element furthest outside (or nearest to) its bound; -1 if empty */
    double worst_got, worst_want;
    bool shape_ok;      /* same dtype, rank and shape */
    bool pass;          /* shape_ok and nbad == 0 */
} fc_output_diff;

/*
 * Compare got[i] with want[i] for i < n and fill diffs[i]. Returns FC_OK
 * when every output passes; FC_ERR_RUNTIME when one does not, with a
 * message on ctx naming the first failing output, its errors, its
 * tolerance and its worst element (every diffs[i] is filled either way);
 * FC_ERR_USAGE for NULL arguments.
 */
fc_status fc_compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, int n,
                             fc_output_diff *diffs);

/*
 * One line about diffs for output `index`, for the CLI's --check and the
 * tests:
 *   output 0 (f32, 1024 elements): max_abs_err 1.19e-07 max_rel_err 2.4e-07
 *   (tolerance rel 1e-05 abs 1e-05): ok
 * ending in "FAIL (N elements out of tolerance; worst [i]: got G, want W)"
 * or "FAIL (dtype or shape differs)". Returns buf.
 */
const char *fc_output_diff_format(const fc_output_diff *d, int index, char *buf, size_t n);

#endif

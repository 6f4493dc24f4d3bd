/*
 * gemm_desc.h - one GEMM as plain data: the problem a gemm or matmul node
 * poses (fc_gemm_plan) and what a library launch runs (fc_gemm_desc),
 * with no GPU and no graph.
 *
 * The lowering makes them from plan nodes (fc_gemm_plan_of,
 * fc_gemm_desc_of: the only functions here that read a node); the program
 * description carries them (lower/program_desc.h), the cache and AOT files
 * store them, and a backend's GEMM library runs them
 * (runtime/cuda/cublaslt.h). fc_gemm_desc_valid bounds every access a
 * description implies, so one read from bytes cannot make a library touch
 * memory outside its buffers. docs/GEMM.md has the mapping in full.
 */
#ifndef FC_LOWER_GEMM_DESC_H
#define FC_LOWER_GEMM_DESC_H

#include "passes/epilogue.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* A GEMM as plain data (no GPU, no graph)                              */
/* ------------------------------------------------------------------ */

/* The problem a gemm (or matmul) node poses, in row-major terms. */
typedef struct fc_gemm_plan {
    fc_dtype ab, out;      /* operand dtype; result dtype */
    bool trans_a, trans_b; /* a stored [K, M]; weights stored [N, K] */
    int nweights;          /* > 1: the weights are concatenated along N */
    int64_t M, N, K;       /* each product: [M, K] x [K, N] -> [M, N]; N over every weight */
    int64_t lda, ldw;      /* row strides (elements) of a and of the (concatenated) weight */
    /* The innermost batch dims, as one strided batch (strides in elements;
     * 0 = broadcast). The result is dense: stride_y = M * N. */
    int64_t batch, stride_a, stride_w, stride_y;
    /* The outer batch dims that do not fit one stride: a loop of calls. */
    int nouter;
    int64_t outer_size[FC_MAX_RANK], outer_a[FC_MAX_RANK], outer_w[FC_MAX_RANK], outer_y[FC_MAX_RANK];
    bool folded_batch; /* a's batch dims were folded into M (weights without batch) */
    /* The epilogue: y = act(alpha * a w + residual + bias), rounded once
     * to `out`. The bias is [N] (with several weights: one [N_i] each);
     * the residual has y's shape and is cuBLASLt's C, with beta = 1. */
    bool has_bias, has_residual;
    fc_gemm_act act;
    double alpha;
} fc_gemm_plan;

/* The plan of node n (static shapes). FC_ERR_UNSUPPORTED, with a message,
 * for nodes cuBLASLt does not run here (not a gemm or matmul, f64 with an
 * epilogue, symbolic dims, integer dtypes). */
fc_status fc_gemm_plan_of(fc_context *ctx, const fc_node *n, fc_gemm_plan *p);
/* The same from node n decoded (fc_gemm_info_of) and its result y: a
 * dynamic variant's GEMM at one shape (lower/variant_desc.h) is planned by
 * it from the operands' types bound to the shape, so that it gets what the
 * bound node would. op names the node in messages. */
fc_status fc_gemm_plan_of_info(fc_context *ctx, fc_op op, const fc_gemm_info *gi, const fc_value *y,
                               fc_gemm_plan *p);

/* Number of cuBLASLt calls the plan makes per run. */
int64_t fc_gemm_plan_calls(const fc_gemm_plan *p);
/* Number of operands: a, the weights, their biases, the residual. */
int fc_gemm_plan_nops(const fc_gemm_plan *p);

/*
 * One library launch's GEMM: what the runtime needs to run it, with no
 * graph. A program description holds one per such launch
 * (runtime/cuda/program.h), and runtime/cuda/program_cache.c serializes it.
 */
typedef struct fc_gemm_desc {
    fc_gemm_plan plan;
    int64_t *wcols; /* plan.nweights entries: weight i's columns N_i (they sum to plan.N) */
    /* Positions among the launch's arguments (fc_launch.args): op_arg[i]
     * for operand i in the gemm's order (a, w1..wn, [bias1..biasn],
     * [residual]: fc_gemm_plan_nops of them), out_arg for the result. */
    int *op_arg;
    int out_arg;
    /* Which fused-sibling GEMM this is (concatenated weights are kept per
     * handle under it): NULL for the description itself; a dynamic
     * variant's shapes set the variant's launch, so that all its shapes
     * share one concatenation instead of copying the weights per shape.
     * Not serialized. */
    const void *share;
} fc_gemm_desc;

/*
 * The description of node n (a gemm or matmul) run as a launch whose
 * arguments are the value ids arg_ids[0 .. nargs) (fc_launch.args: every
 * operand and the result, a repeated operand once). No GPU needed.
 * FC_ERR_UNSUPPORTED as fc_gemm_plan_of; FC_ERR_USAGE when a value of n is
 * not among the arguments; FC_ERR_NOMEM. *out is zeroed on failure.
 * Release it with fc_gemm_desc_release.
 */
fc_status fc_gemm_desc_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_gemm_desc *out);
/* Free what d owns and zero it. NULL is ignored. */
void fc_gemm_desc_release(fc_gemm_desc *d);

/*
 * Whether d is a GEMM that cuBLASLt can run safely for a launch of nargs
 * arguments whose buffers hold arg_bytes[i] bytes: dtypes, flags and
 * counts that make sense, positions in range, weight columns that sum to
 * N, and every byte each call reads or writes (over the batch and the
 * loop) inside its buffer. The program decoder runs it on what it reads (a
 * crafted file must not make cuBLASLt write out of bounds), and fc_compile
 * on what it made. false, with the reason in why[0 .. n), when it is not.
 */
bool fc_gemm_desc_valid(const fc_gemm_desc *d, int nargs, const int64_t *arg_bytes, char *why, size_t n);

#endif

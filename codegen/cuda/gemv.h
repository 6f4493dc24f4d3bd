/*
 * gemv.h - GEMMs of a few rows against weights stored [N, K] (trans_b) as
 * generated kernels of CUDA cores (internal to codegen/cuda).
 *
 * A decode step multiplies one row (a few, at a small batch) by each
 * weight: a stream of weight reads, whose time is the bytes over the
 * memory's bandwidth when enough of them are in flight. Two layouts:
 *
 * [N, K] (trans_b: PyTorch's [out, in], Llama's projections, a tied LM
 * head): a row of W is one output's contiguous K. One warp computes two
 * outputs for all M rows over a slice of K: each lane reads 16 bytes of
 * each row a step (32-lane strides of 8 elements), multiplies them by the
 * rows of A (which every warp reads, from L1), and a warp shuffle sums the
 * lanes. Where N gives too few blocks to keep the memory busy (the split
 * rule in gemv.c, from N, K and the SM count), the 8 warps of a block split
 * K between them (2, 4 or 8 ways) and sum their partials in shared memory
 * in warp order before the epilogue. Sibling weights (several right
 * operands, their results concatenated) are one launch: the column says
 * which weight. From 3 rows (tc), where that kernel's scalar FMAs make it
 * compute-bound, a block computes 16 columns on tensor cores instead
 * (mma.m16n8k16, 16 weight rows against A's rows as B's columns), its 8
 * warps (16 where 8-warp blocks would be fewer than two a SM) splitting K
 * (gemv.c, tc_warps and emit_nk_tc).
 *
 * [K, N] (HF Conv1D's [in, out], GPT-2): a row of W holds every output's
 * element k. A block computes 32 outputs: 4 lanes of 8 columns (16-byte
 * loads of W[k, n..n+7]) by 64 rows of k at a time; the rows' partials are
 * summed by warp shuffles and in shared memory, and where 32-column blocks
 * are too few, a cluster of 2 to 8 blocks (sm 90) splits K and block 0
 * sums the others' partials (pushed into its shared memory) in rank order
 * before the epilogue. The weights, being the program's parameters, are
 * loaded into registers before griddepcontrol.wait.
 *
 * Both: no global workspace, no atomics, the same sums in every run, the
 * epilogue (scale, bias, residual, activation, cast) once per output; a
 * programmatic dependent (fc_launch.pdl) that fetches its weights while
 * the kernel before it finishes. docs/GEMM.md, "GEMVs".
 */
#ifndef FC_CUDA_GEMV_H
#define FC_CUDA_GEMV_H
#include "emit.h"
#include <stdbool.h>

/* FC_GEMV_KN_MAX_M: the [K, N] kernel's rows. Measured on the H200 at
 * GPT-2's shapes (docs/PERF.md): at M = 1 0.5 to 1 us a launch faster than
 * the skinny GEMM, at M = 8 twice as slow (8 scalar loads of A and 64 FMAs
 * a weight row a thread, 100 registers: 2 blocks a SM), so more rows keep
 * the skinny kernel. */
enum { FC_GEMV_MAX_M = 8, FC_GEMV_KN_MAX_M = 1, FC_GEMV_MAX_WEIGHTS = 4 };

/* What a GEMV runs: y [M, N] = act(alpha A W^T + bias + residual), A [M,
 * K] and the weights W_i [N_i, K] row-major, N the sum of the N_i; or,
 * with kn, y = act(alpha A W + bias + residual) for one weight W [K, N]. */
typedef struct fc_gemv {
    int64_t M, N, K;
    int nweights;
    int64_t n[FC_GEMV_MAX_WEIGHTS];        /* N_i */
    int a, w[FC_GEMV_MAX_WEIGHTS];         /* their positions among the group's inputs */
    int bias[FC_GEMV_MAX_WEIGHTS], residual; /* -1: none */
    int act; /* 0 none, 1 relu, 2 gelu_tanh */
    double alpha;
    fc_dtype dtype;
    bool kn;        /* W [K, N] (one weight), not [N, K] */
    bool tc;        /* [N, K] on tensor cores (M >= 3) */
    int splits;     /* K split: [N, K] between a block's warps (8 or 16 on tensor cores: tc_warps), [K, N] between a cluster's blocks (1: none) */
    bool constant_w; /* W and the bias are the program's parameters or computed at load (loaded before the wait: [K, N], tensor cores) */
    /* Pads read and written around (the padding pass's GEMV form,
     * passes/pad.c), each group's launch left out (-1: none). a_pad: the
     * group that pads A's rows with zeros to K (concat(x, 0)) alone; the
     * kernel stages x (value a_src, rows of ka) with the zeros in shared
     * memory itself. y_slice: the group that copies the first no columns
     * of the result into a graph result (value y_dst), which the kernel
     * writes instead, rows of no. Without them ka = K, no = N. */
    int a_pad, y_slice, a_src, y_dst;
    int64_t ka, no;
    /* A gate evaluated in the epilogue (gemv.c, absorb_gate): the
     * pointwise group (-1: none) that reads the result [M, 2F] alone,
     * through its halves, as a SwiGLU's silu(gate) * up does; a block then
     * computes column pairs (p, F + p) and stores the group's result
     * (value gate_dst, [M, F]) in the result's place. */
    int gate, gate_dst;
    int64_t f;
} fc_gemv;

/* Whether group gr of static plan `plan` runs as a GEMV, and how (*out,
 * may be NULL): a gemm or matmul of f16 or bf16 operands and result (bias
 * and residual of that type), not trans_a, M <= FC_GEMV_MAX_M, on sm 80 or
 * newer, unless FUSEC_SKINNY=0 is in the environment (the fallback to
 * cuBLASLt that the skinny GEMMs share); and either trans_b with 1 to
 * FC_GEMV_MAX_WEIGHTS weights [N_i, K] of static dims, K a multiple of 256
 * (32 lanes by 8 elements), or, at M <= FC_GEMV_KN_MAX_M, one weight [K, N]
 * of static dims whose K
 * slices (K over the cluster's blocks, at most 8 on sm 90, 1 before) are
 * at most 512 deep (8 rows a thread). */bool fc_cuda_gemv_plan(const fc_plan *plan, const fc_group *gr, fc_gemv *out);

/* Whether group gi of plan is a pad that a GEMV or a skinny GEMM reads or
 * writes around (fc_gemv.a_pad, y_slice; fc_skinny.y_slice; choice: every
 * group's GEMM choice), or a gate a GEMV evaluates (fc_gemv.gate), so that
 * it has no launch of its own. */
struct fc_gemm_choice;
bool fc_cuda_pad_absorbed(const fc_plan *plan, const struct fc_gemm_choice *choice, int gi);

/* The group that copies the first *no columns of group gr's one result
 * ([M, N], read by that group alone) into a graph result (value *dst),
 * which a kernel computing the result can write instead, rows of *no;
 * -1: none (and *dst, *no untouched). */
int fc_cuda_result_slice(const fc_plan *plan, const fc_group *gr, int64_t M, int64_t N, int *dst, int64_t *no);

/* Append to s the kernel `name` for group gr, planned as k by
 * fc_cuda_gemv_plan, and fill l: its summary ("gemv ..., M x N x K", then
 * ", K in S slices of a block's warps" or "of a cluster" where split), kind,
 * grid, block and pdl.
 * l->args stay the group's inputs then its output, as the caller made
 * them, but for a pad read or written around (a_pad, y_slice): x in A's
 * place, the graph result in the output's; and for a gate (gate): its
 * result in the output's. */
fc_status fc_cuda_emit_gemv(const fc_plan *plan, const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s, fc_launch *l);

#endif

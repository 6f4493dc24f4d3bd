/*
 * gemv.h - GEMMs of a few rows against weights stored [N, K] (trans_b) as
 * generated kernels of CUDA cores (internal to codegen/cuda).
 *
 * A decode step of a model whose linear layers keep PyTorch's [out, in]
 * weights (Llama's q/k/v, gate/up, down projections, a tied LM head)
 * multiplies one row (a few, at a small batch) by each weight: a stream of
 * weight reads, where a row of W is one output's contiguous K. One warp
 * computes two outputs for all M rows: each lane reads 16 bytes of each
 * row a step (a row's K in 32-lane strides of 8 elements), multiplies
 * them by the rows of A (which every warp reads, from L1), and a warp
 * shuffle sums the lanes. No shared memory, no cluster: any grid size
 * fills the GPU, and the kernel is a programmatic dependent that prefetches
 * its weight rows into L2 before it waits for the kernel before.
 * Sibling weights (several right operands, their results concatenated) are
 * one launch: the column says which weight. The skinny GEMMs (skinny.h)
 * take W [K, N]; this takes what they cannot.
 */
#ifndef FC_CUDA_GEMV_H
#define FC_CUDA_GEMV_H
#include "emit.h"
#include <stdbool.h>

enum { FC_GEMV_MAX_M = 8, FC_GEMV_MAX_WEIGHTS = 4 };

/* What a GEMV runs: y [M, N] = act(alpha A W^T + bias + residual), A [M,
 * K] and the weights W_i [N_i, K] row-major, N the sum of the N_i. */
typedef struct fc_gemv {
    int64_t M, N, K;
    int nweights;
    int64_t n[FC_GEMV_MAX_WEIGHTS];        /* N_i */
    int a, w[FC_GEMV_MAX_WEIGHTS];         /* their positions among the group's inputs */
    int bias[FC_GEMV_MAX_WEIGHTS], residual; /* -1: none */
    int act; /* 0 none, 1 relu, 2 gelu_tanh */
    double alpha;
    fc_dtype dtype;
} fc_gemv;

/* Whether group gr of static plan `plan` runs as a GEMV, and how (*out,
 * may be NULL): a gemm or matmul of f16 or bf16 operands and result (bias
 * and residual of that type), trans_b and not trans_a, 1 to
 * FC_GEMV_MAX_WEIGHTS weights of rank 2 with static dims, M <= FC_GEMV_MAX_M,
 * K a multiple of 256 (32 lanes by 8 elements), on sm 80 or newer, unless
 * FUSEC_SKINNY=0 is in the environment (the fallback to cuBLASLt that the
 * skinny GEMMs share). */
bool fc_cuda_gemv_plan(const fc_plan *plan, const fc_group *gr, fc_gemv *out);

/* Append to s the kernel `name` for group gr, planned as k by
 * fc_cuda_gemv_plan, and fill l: its summary, kind, grid, block and pdl.
 * l->args stay the group's inputs then its output, as the caller made
 * them. */
fc_status fc_cuda_emit_gemv(const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s, fc_launch *l);

#endif

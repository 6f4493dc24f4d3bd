/*
 * skinny.h - GEMMs of few rows (static M <= 64) as generated kernels on
 * Hopper (internal to codegen/cuda).
 *
 * A static plan's GEMM with M <= 64 rows is latency, not bandwidth:
 * cuBLASLt runs it as one kernel or more (a split-K GEMM and its reduction)
 * on few blocks, and the block waits for each (docs/PERF.md has the
 * measurements). Here one kernel of thread block clusters splits
 * K across a cluster's blocks and sums the partial tiles through
 * distributed shared memory, and it may start while the kernel before it
 * finishes (a programmatic dependent launch: fc_launch.pdl), fetching its
 * weights meanwhile. docs/GEMM.md, "Skinny GEMMs", has the design and the
 * measurements; bench/micro/skinny_gemm_bench.cu the kernels it was chosen
 * from.
 */
#ifndef FC_CUDA_SKINNY_H
#define FC_CUDA_SKINNY_H
#include "attention.h"
#include "emit.h"
#include <stdbool.h>

/* What a skinny GEMM runs: y [M, N] = act(alpha A W + bias + residual),
 * A [M, K] and W [K, N] row-major. */
typedef struct fc_skinny {
    int64_t M, N, K;
    int splits;    /* S: blocks of a cluster, each a K slice */
    int64_t slice; /* KS = K / S, a multiple of 64, at most 384 */
    int a, w, bias, residual; /* their positions among the group's inputs (-1: none) */
    int act;       /* 0 none, 1 relu, 2 gelu_tanh */
    double alpha;
    bool constant_w; /* W (and the bias, if any) are the program's parameters */
    fc_dtype dtype;
    /* The result's compaction written around (the padding pass's padded N,
     * passes/pad.c): y_slice, the group that copies the first no columns
     * of the result into a graph result (value y_dst), which the kernel
     * writes instead, rows of no, the group left without a launch (-1:
     * none, no = N). */
    int y_slice, y_dst;
    int64_t no;
} fc_skinny;

/* Whether group gr of static plan `plan` runs as a skinny GEMM, and how
 * (*out, may be NULL): a one-weight gemm or matmul of f16 or bf16 operands
 * and result (bias and residual of that type), neither operand transposed,
 * the weight of rank 2 with static dims, M <= 64, N and K multiples of 64,
 * K <= 3072, N x K >= 768 x 768 (the sizes measured: smaller GEMMs keep
 * cuBLASLt), on sm 90 compiled for sm_90a (fc_cuda_attention_hopper), and
 * unless the environment has FUSEC_SKINNY=0 (a fallback, ir/switches.def;
 * it changes the source, so it is in the switches marker,
 * fc_cuda_source_switches). The GEMM choice (gemm_choice.c) tries the GEMV
 * (gemv.h) first: a single row runs there. */
bool fc_cuda_skinny_plan(const fc_plan *plan, const fc_group *gr, fc_skinny *out);

/* Append to s the kernel `name` for group gr, planned as k by
 * fc_cuda_skinny_plan (preceded, the first time, by the device templates:
 * *templates says which the unit has, 0 at first), and fill l: its summary ("skinny
 * gemm[...], M x N x K, K in S slices of a cluster", then ", writes the no
 * columns of the result" where y_slice), kind, grid, block, shared memory,
 * the two tensor maps (A and W), pdl. l->args are the group's inputs then
 * outputs, as the caller made them, but for a slice written around: the
 * graph result in the output's place. */
fc_status fc_cuda_emit_skinny(const fc_group *gr, const fc_skinny *k, const char *name, fc_strbuf *s, unsigned *templates,
                              fc_launch *l);

/*
 * Attention and projection: a skinny GEMM whose A is the result of an
 * attention group read by nothing else, one kernel for both (the attention
 * group gets no launch; its result is never stored). The kernel's cluster
 * splits K by heads: block r computes heads r h .. + h of the attention (h =
 * heads_per_block) for all M rows and multiplies them by W's rows of those
 * heads. docs/GEMM.md, "Attention and projection".
 */
typedef struct fc_skinny_attention {
    fc_skinny gemm;          /* the projection: splits = heads / heads_per_block, slice = 64 heads_per_block */
    fc_attention_rows rows;  /* the attention (codegen/cuda/attention.h) */
    int heads_per_block;
    int gemm_group;          /* the GEMM group's index in plan->groups */
} fc_skinny_attention;

/* Whether attention group ga = plan->groups[a] of static plan `plan` runs
 * inside the GEMM group gg that reads its result, and how (*out, may be
 * NULL; out->gemm_group is gg's index): gg a skinny GEMM
 * (fc_cuda_skinny_plan) whose A is ga's one output, which no other group
 * reads and the graph does not return; ga an attention as
 * fc_cuda_attention_rows reads it, of head dim 64, the GEMM's dtype, B T =
 * M and heads x 64 = K; the heads in at most 8 blocks of a cluster; no
 * group after ga up to gg writing arena memory where ga's inputs are (the
 * kernel reads them at gg's place in the plan, not ga's); unless
 * FUSEC_SKINNY=0 is in the environment. */
bool fc_cuda_skinny_attention_plan(const fc_plan *plan, int a, fc_skinny_attention *out);

/* Append the fused kernel `name` (templates as fc_cuda_emit_skinny) and fill
 * l as fc_cuda_emit_skinny does, its arguments too (l->args replaced): the
 * attention group's inputs, the GEMM group's but A, then the result; four
 * tensor maps (q, k, v, W). */
fc_status fc_cuda_emit_skinny_attention(const fc_group *ga, const fc_group *gg, const fc_skinny_attention *f, const char *name,
                                        fc_strbuf *s, unsigned *templates, fc_launch *l);

/* The fused kernel's dynamic shared memory, bytes. */
unsigned fc_cuda_skinny_attention_smem(int heads_per_block, int splits);

#endif

/*
 * attention.h - the flash-attention kernel of one `attention` node (internal).
 *
 * The generator writes CUDA C for the attention group of a plan: one
 * extern "C" __global__ kernel with every shape, stride, scale, mask and
 * dtype baked in as constants, instantiating a kernel template that is
 * emitted once per translation unit (behind #ifndef guards, so several
 * attention kernels and the rest of the plan's kernels share one unit, and
 * the text also compiles on its own). docs/ATTENTION.md has the design.
 *
 * The group. Its nodes are the attention node and, optionally, a chain of
 * permute/reshape ops on its result whose last value is the group's one
 * output (the kernel then writes [B, H, S, D] straight into the [B, S, H*D]
 * buffer the next GEMM reads). Its inputs are the stored buffers that q, k,
 * v (and the mask) are read from: each operand may be a chain of views
 * (split, slice, reshape, permute, expand) of an input, which the kernel
 * reads in place through strides (passes/attention.h: fc_attention_view).
 *
 * Kernel parameters, in order: one pointer per group input (gr->inputs
 * order), then the output: exactly what fc_cuda_codegen puts in
 * fc_launch.args; then, for fc_attn_fa3, one `const __grid_constant__`
 * tensor map per operand it loads through TMA (q, k, v order), as
 * fc_launch.tmaps describes them (the runtime encodes them over the run's
 * pointers). Base pointers must be 16-byte aligned (cudaMalloc and the
 * plan's arena are 256-byte aligned; for tensor maps the runtime checks).
 *
 * Launch: 1-D grid. fc_attn_tc and fc_attn_rows use static shared memory
 * only (at most 40 KB): l->smem is 0. The Hopper kernel (fc_attn_fa3, where
 * fc_cuda_attention_hopper(plan->sm)) takes up to 225 KiB of dynamic shared
 * memory (l->smem; the caller raises the function's limit) and 384 or 512
 * threads, on a persistent grid of plan->sm_count blocks (132 when 0) at
 * most, each walking work tiles (any grid size computes the same result).
 */
#ifndef FC_CUDA_ATTENTION_H
#define FC_CUDA_ATTENTION_H

#include "cuda_codegen.h"

/*
 * Write the kernel `name` for attention group gr of plan. On success
 * *source is a malloc'd, NUL-terminated CUDA C text (free it) to append to
 * the translation unit after the prelude (or to compile alone), and l gets
 * kind FC_LAUNCH_KERNEL, the name, grid, block and smem (args are the
 * caller's, see above). On failure (a group this generator cannot read:
 * FC_ERR_UNSUPPORTED; out of memory) the error is on the graph's context and
 * *source is NULL.
 */
fc_status fc_cuda_emit_attention(const fc_plan *plan, const fc_group *gr, const char *name, char **source,
                                 fc_launch *l);

/*
 * fc_attn_fa3's shape rules, some fixed by the caller: fc_cuda_emit_attention
 * is fc_cuda_emit_attention_forced with all of them zero. For tests, which
 * must reach each path of the Hopper kernel at small shapes where the rules
 * would not take it (every path is taken by the rules at some shape).
 */
typedef struct fc_attention_force {
    bool persistent;          /* a persistent grid, also for causal attention at head dims above 64 */
    int64_t l2_section_bytes; /* > 0: sections of batch elements whose K and V fit in this many bytes, at any head dim */
    bool no_tma;              /* every operand by cp.async, as for a layout TMA cannot read */
} fc_attention_force;
fc_status fc_cuda_emit_attention_forced(const fc_plan *plan, const fc_group *gr, const char *name,
                                        const fc_attention_force *force, char **source, fc_launch *l);

/* Which kernel a group gets, for plans and tests: true for the tensor-core
 * kernel (bf16/f16, head dims up to 128), false for the general one. */
bool fc_cuda_attention_uses_mma(const fc_group *gr);

/* Whether units for compute capability sm (major * 10 + minor; 0 unknown)
 * are compiled for sm_90a and get the Hopper attention kernel: sm 90. The
 * codegen (plan->sm) and fc_program_extra_nvrtc_options ask the same
 * question. */
bool fc_cuda_attention_hopper(int sm);

/*
 * An attention group as the skinny GEMM's prologue reads it
 * (codegen/cuda/skinny.c, "attention and projection"): the result [B, H, T,
 * D] (or [H, T, D]; B is then 1) written as the rows of a [B T, H D] matrix,
 * and each of q, k, v read from a [rows, row] matrix of one group input
 * (op[i].input), head h of batch element b at rows b T .. + T, columns
 * col0 + h head .. + D. Only an attention node without a mask input, of
 * static bf16 or f16 operands with Sq = Sk = T, whose operands are such
 * views (16-byte rows: TMA loads them) and whose result goes to the group's
 * one output in that layout. False (and *out untouched) otherwise.
 */
typedef struct fc_attention_rows {
    int64_t batch, heads, seq, head_dim;
    bool causal;
    double scale; /* the default already resolved: 1 / sqrt(D) */
    fc_dtype dtype;
    struct {
        int input;           /* index in gr->inputs */
        int64_t row;         /* elements a row */
        int64_t head, col0;  /* head h's first column: col0 + h head */
    } op[3];                 /* q, k, v */
} fc_attention_rows;
bool fc_cuda_attention_rows(const fc_group *gr, fc_attention_rows *out);

/* Append the attention templates (helpers, the tensor-core pieces, the
 * Hopper kernel's, guarded: once a unit) and the m64nNk16 wrappers
 * fc_attn_wgss<n> and fc_attn_wgrs<n>, for a generator that builds on them. */
void fc_cuda_emit_attention_templates(fc_strbuf *s, int n);

#endif

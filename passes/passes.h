/*
 * passes.h - the pass pipeline and the launch plan it produces (internal).
 *
 * Pipeline (passes/pipeline.c is this list):
 *   verify -> canonicalize -> [lower attention] -> decompose -> canonicalize
 *   -> attention -> residual -> epilogue -> verify -> fuse (vertical, horizontal,
 *   schedule) -> batch -> memory plan
 *
 * Files: fuse.c (groups), schedule.c (launch order, batching), memplan.c,
 * plan.c (questions about a plan and its values, its release), plan_bind.c.
 *
 * Graph passes read and write the IR in place and know nothing of CUDA.
 * fuse/schedule/memplan produce an fc_plan: kernel groups in launch order
 * with their iteration spaces, and an arena offset for every intermediate.
 */
#ifndef FC_PASSES_H
#define FC_PASSES_H

#include "ir.h"

/* ---- graph -> graph passes ------------------------------------------- */

/* softmax(scale * Q K^T [+ mask]) V, written out, becomes one `attention`
 * node (passes/attention.h, docs/ATTENTION.md). */
fc_status fc_pass_attention(fc_graph *g);
/* CSE, DCE, constant folding, algebraic identities, redundant casts, view
 * chains folded (reshape of reshape, permute of permute, ...). */
fc_status fc_pass_canonicalize(fc_graph *g);
/* softmax, layernorm, rmsnorm, gelu, silu and reduce_mean become
 * primitives. f16/bf16 composites compute in f32 (cast in, cast out), so
 * numerics match the composite's reference semantics. */
fc_status fc_pass_decompose(fc_graph *g);
/* The same for the dynamic variant: a layernorm or rmsnorm over a symbolic
 * dim lowers too, its means kept as reduce_mean (which kernels divide by
 * the row length at run time). fc_pass_decompose leaves those composite. */
fc_status fc_pass_decompose_dynamic(fc_graph *g);
/* batch_norm(conv(..)) becomes one conv with the norm folded into its
 * weight and bias (passes/fold_batch_norm.c). */
fc_status fc_pass_fold_batch_norm(fc_graph *g);
/* conv, conv_transpose, the pools, batch_norm, pad and resize become
 * channels-last slices, matmuls and elementwise ops (passes/lower_conv.c). */
fc_status fc_pass_lower_conv(fc_graph *g);
/* The same, for a backend with a convolution library: 2-D convolutions
 * that are not depthwise and compute in a 16-bit dtype become conv_cl
 * nodes (ops.def) instead of im2col and a matmul. p is the precision the
 * autocast pass will compute in: under bf16 or f16 an f32 convolution's
 * operands are rounded to it, so it goes to the library too. */
fc_status fc_pass_lower_conv_library(fc_graph *g, fc_precision p);
/* Permutes moved through elementwise ops so that consecutive channels-last
 * regions meet and their permutes cancel (passes/layout.c). */
fc_status fc_pass_layout(fc_graph *g);
/* y = add(add(x, o), m) of 16-bit floats, o and m GEMM products, becomes
 * add(x, add(o, m)): the GEMM's residual is the branch o, not the stream's
 * rounded sum; only where y's add joins its readers' kernel, so that no
 * launch is added (passes/residual.c; fast numerics only). */
fc_status fc_pass_residual(fc_graph *g);
/* matmul + transposed operands + bias + relu/gelu_tanh + residual + cast
 * become one `gemm` node (a cuBLASLt call with its epilogue); sibling
 * matmuls sharing a left operand become one gemm (docs/GEMM.md). */
fc_status fc_pass_epilogue(fc_graph *g);
/* GEMM dims padded to 16-byte rows where the cost rule says it pays (zero
 * weights kept by the runtime, zero columns written by the producing
 * kernel, the result sliced back to its shape); a GEMM over an empty K
 * becomes its epilogue over zeros (passes/pad.c, docs/GEMM.md). */
fc_status fc_pass_pad(fc_graph *g);
/* The device fc_pass_pad's cost rule is written for: a GEMM's math rate
 * (16-bit and f32 operands, FLOP/s), the copy bandwidth (bytes/s), one
 * launch (s), how many times slower an unaligned GEMM's math runs, and the
 * fraction of the unaligned time the padded shape (with its copies and
 * launches) must stay under. fc_pass_pad uses fc_pad_rule_h200. */
typedef struct fc_pad_rule {
    double flops16, flops32, bytes_per_s, launch_s, slowdown, margin;
    /* The backend writes a result with unaligned rows in place by aligned
     * GEMMs over rows R apart, each of at least this many rows (the CUDA
     * runtime's, runtime/cuda/cublaslt.h); 0: it does not. */
    int64_t interleave_min_rows;
    /* How many times longer an unaligned GEMM of few rows takes to stream
     * its bytes (its one-element loads); 0 counts as 1. */
    double bytes_slowdown;
    /* The backend's GEMV kernels (the CUDA runtime's, codegen/cuda/gemv.h):
     * 16-bit, one weight, at most gemv_max_m rows against [N, K] weights
     * of K a multiple of gemv_k_step (any N), and gemv_kn_max_m against
     * [K, N] of K at most gemv_kn_max_k (any K and N, at full speed where
     * N is aligned). They read a's rows unpadded (with a bound) and write
     * the result unpadded, so padding only the weight (K of [N, K], N of
     * [K, N]) costs no copy per run; 0: no such kernel. */
    int64_t gemv_max_m, gemv_kn_max_m, gemv_k_step, gemv_kn_max_k;
    /* bytes_slowdown for a weight stored [K, N] (untransposed) where the
     * backend's general GEMM runs the unaligned shape (not its GEMV); 0:
     * bytes_slowdown. */
    double kn_bytes_slowdown;
} fc_pad_rule;
extern const fc_pad_rule fc_pad_rule_h200;
fc_status fc_pass_pad_with(fc_graph *g, const fc_pad_rule *rule);
/* A concat of more than FC_CONCAT_MAX_FANIN operands becomes a balanced
 * tree of concats of at most that many (passes/concat_tree.c); _with
 * takes another fan-in (at least 2). */
fc_status fc_pass_concat_tree(fc_graph *g);
fc_status fc_pass_concat_tree_with(fc_graph *g, int fanin);
/* The most operands one concat keeps. At 64 a concat's pointers are 520
 * bytes of kernel parameters (the limit is 4 KB before CUDA 12.1), it
 * weighs half a group (fc_node_weight) so the ops computing its operands
 * fuse into it, and NVRTC compiles a lone one in under a second
 * (docs/PERF.md); a lowered 7x7 (or 4x4x4) convolution's columns, one
 * operand per kernel offset, stay one concat. */
#define FC_CONCAT_MAX_FANIN 64
/* Remove nodes whose results are unused (marks them dead, compacts). */
fc_status fc_pass_dce(fc_graph *g);
/* Tensor parallelism (passes/shard.c, docs/PARALLEL.md): *out the new
 * graph one rank of `degree` runs (fusec.h's fc_graph_shard); g is not
 * changed. */
fc_status fc_pass_shard(fc_graph *g, int degree, fc_graph **out);
/* Autocast (passes/autocast.c): compute in precision p as torch.autocast
 * does (low-precision GEMM and attention operands, f32 reductions, norms
 * and transcendentals, promotion elsewhere); the graph's parameters and
 * results keep their dtypes. A no-op for FC_PRECISION_AS_WRITTEN and
 * FC_PRECISION_TF32 (TF32 is GEMM math, not a dtype). */
fc_status fc_pass_autocast(fc_graph *g, fc_precision p);
/* Dynamic variant only: every `attention` op becomes matmul, softmax and
 * matmul in the compute dtype (the flash-attention kernel needs static
 * shapes). Runs before decompose (passes/lower_attention.c). */
fc_status fc_pass_lower_attention(fc_graph *g);

/* ---- the launch plan ------------------------------------------------- */

typedef enum fc_group_kind {
    FC_GROUP_POINTWISE, /* one iteration space: `space` (elementwise, broadcast, views) */
    FC_GROUP_REDUCE,    /* rows x reduced elements: one or more reductions + their consumers */
    FC_GROUP_LIBRARY,   /* an opaque op run by a library (matmul via cuBLASLt) */
    FC_GROUP_ALIAS,     /* no launch: a view of an existing buffer (reshape of a contiguous value) */
    FC_GROUP_ATTENTION, /* one attention node (+ a permute/reshape chain of its result): a generated flash-attention kernel */
} fc_group_kind;

typedef struct fc_group {
    int id;
    fc_group_kind kind;
    fc_node **nodes; /* the group's nodes, topological order */
    int nnodes, cap_nodes;
    fc_value **inputs; /* values read from outside: params or other groups' outputs */
    int ninputs;
    fc_value **outputs; /* values written: used by another group or a graph result */
    int noutputs;

    /* Iteration space. POINTWISE: the shape `space` (all outputs have its
     * element count). REDUCE: `space` is the full (unreduced) shape and
     * reduced[d] marks the reduced dims; rows = product of the kept dims,
     * row_len = product of the reduced dims. In a dynamic plan a dim of
     * `space` may be a symbol; rows and row_len are then -1 where they are
     * symbolic (fc_group_rows_mono gives them as monomials). */
    int rank;
    int64_t space[FC_MAX_RANK];
    bool reduced[FC_MAX_RANK];
    int64_t rows, row_len;

    /* Launch batching: independent small POINTWISE groups that are ready at
     * the same time run in one launch. Groups with the same nonzero `batch`
     * (1 + the position of the batch's first group) are adjacent in launch
     * order; 0: launched alone. */
    int batch;

    /* Computed from parameters alone into GEMM weights only: run when the
     * weights are loaded, not at every run (passes/loadtime.c). */
    bool loadtime;

    /* Cost: the ops.def weights of the nodes plus one per view inlined
     * into the group, and the reductions among the nodes (fusion's cost
     * cap, fc_fuse_options.max_group_weight). */
    int weight, nreduce;
} fc_group;

typedef struct fc_plan {
    fc_graph *g;
    fc_arena arena; /* all plan memory */
    fc_group **groups; /* launch order (topological) */
    int ngroups, cap_groups;
    int *group_of_node; /* indexed by node id: group id, or -1 */

    /* Memory plan: every intermediate value (written by one group, read by
     * another, not a graph param or result) has an offset in one device
     * arena; values whose lifetimes do not overlap share memory. */
    int64_t *offset; /* indexed by value id; -1: not in the arena */
    int64_t arena_bytes;        /* peak: size of the arena */
    int64_t intermediate_bytes; /* sum of every intermediate's bytes */

    /* Dynamic variant (docs/FUSION.md, "Dynamic shapes"). dynamic: the plan
     * was made on a graph with unbound symbols (no memory plan: offset
     * NULL). A plan made from it by fc_plan_bind has dynamic false, owns
     * its graph (owned_graph == g, freed by fc_plan_release) and keeps the
     * symbol values it was bound with (sym_values[i]: symbol i of the
     * dynamic graph; nsyms of them). */
    bool dynamic;
    fc_graph *owned_graph;
    int64_t *sym_values;
    int nsyms;

    /* The compute capability the code is generated for (major * 10 +
     * minor; 0: any). Set by the runtime before fc_cuda_codegen; only the
     * attention kernel asks (codegen/cuda/attention.h). */
    int sm;
    /* The streaming multiprocessors of the device it runs on (0: unknown).
     * Set by the runtime before fc_cuda_codegen of a dynamic variant; the
     * variant's generated GEMMs launch one persistent block per SM
     * (codegen/cuda/gemm.c). */
    int sm_count;
    /* How the kernels round what they compute (fc_compile_options.numerics;
     * docs/NUMERICS.md). Set by the runtime before code generation. */
    fc_numerics numerics;
} fc_plan;

/* In a REDUCE group: does v hold one element per row, in the kept dims'
 * order (the space with the reduced dims removed or set to 1)? */
bool fc_group_is_row_shape(const fc_group *gr, const fc_value *v);
/* In REDUCE group gr of plan p: mark (is_row, by value id) the values a
 * kernel computes once per row: the reductions, then each in-group node
 * with one output whose operands are per-row values or come from outside
 * the group and whose output has row shape by row_shape (the backends' own
 * test: they index such values differently). Both code generators use it. */
void fc_group_mark_rows(const fc_plan *p, const fc_group *gr, bool *is_row,
                        bool (*row_shape)(const fc_group *gr, const fc_value *v));
/* Does v, broadcast into the group's full space, give each row its own
 * single value (every reduced dim 1 or absent, every kept dim matching)? */
bool fc_group_row_broadcast(const fc_group *gr, const fc_value *v);
/* Element count of the group's space, its rows and its row length, as
 * monomials (symbols kept; for static groups the static factor is the
 * number). */
fc_mono fc_group_space_mono(const fc_group *gr);
fc_mono fc_group_rows_mono(const fc_group *gr);
fc_mono fc_group_row_len_mono(const fc_group *gr);

/* The cap on a group's cost (its weight, times its reductions for a row
 * kernel): the cost rule "a group too large for registers", measured as
 * what NVRTC takes, since compile time is what fails first. NVRTC's time
 * grows faster than linearly in a kernel's size, so a long chain must
 * become several kernels; at this cap a full group of any one op compiles
 * in under a second (docs/PERF.md has the measurements), and the store and
 * load between two such kernels are small against a full group's work per
 * element. */
#define FC_GROUP_MAX_WEIGHT 256

/* Options of the fusion passes. */
typedef struct fc_fuse_options {
    bool vertical;   /* default true */
    bool horizontal; /* default true */
    int max_group_weight; /* cost rule: a group too large to compile; default FC_GROUP_MAX_WEIGHT */
    bool attention_in_place; /* attention groups read view operands in place and write through
                              * a permute/reshape chain (the CUDA kernel); false: a library group
                              * with stored, contiguous operands; default true */
    bool dynamic;            /* the dynamic variant: symbols stay unbound, kernels take them as
                              * arguments, no memory plan (a layout placed per shape);
                              * default false */
    bool conv_library;       /* 2-D convolutions become conv_cl library calls (cuDNN) instead of
                              * im2col and a GEMM (fc_pass_lower_conv_library); default false */
    fc_precision precision;  /* the autocast pass's target (passes/autocast.c); default
                              * FC_PRECISION_AS_WRITTEN: the graph's dtypes */
    fc_numerics numerics;    /* FC_NUMERICS_EAGER computes the graph as written: the recognizers
                              * that turn written-out GELU and norms into one op (rounding once
                              * where the graph rounds every step) stay off; default fast */
    fc_pass_hook after_pass; /* called after each graph pass with its name (fc_run_passes,
                              * --dump-after); default NULL */
    void *after_pass_user;   /* after_pass's first argument */
} fc_fuse_options;

void fc_fuse_options_default(fc_fuse_options *o);

/* Form kernel groups (vertical then horizontal fusion). Requires every dim
 * static (bind symbols first), unless o->dynamic. The plan is initialised by this call and
 * freed with fc_plan_release. */
fc_status fc_pass_fuse(fc_graph *g, const fc_fuse_options *o, fc_plan *plan);
/* Order groups for launch and compute group inputs/outputs. */
fc_status fc_pass_schedule(fc_plan *plan);
/* Mark the groups that compute GEMM weights from parameters alone
 * (fc_group.loadtime; passes/loadtime.c). Static plans only. */
fc_status fc_pass_loadtime(fc_plan *plan);
/* Batch independent small pointwise groups of the same dependency level
 * into one launch (reorders groups by level when it batches). */
fc_status fc_pass_batch(fc_plan *plan);
/* Assign arena offsets by liveness (256-byte aligned). Groups of one batch
 * run at once: what they read lives until the batch's end. */
fc_status fc_pass_memplan(fc_plan *plan);
void fc_plan_release(fc_plan *plan);

/*
 * The memory plan's first half (passes/memplan.c), for a plan placed at
 * many shapes (a dynamic variant's): what depends on the groups alone, made
 * once, as data (ir/arena_layout.h): the storage classes that need arena
 * memory, their lifetimes, and every value's size as its dims with the
 * symbols kept. fc_arena_layout_place is the second half; fc_pass_memplan
 * is the two in a row, so a placement gives value for value the offsets,
 * arena_bytes and intermediate_bytes that fc_pass_memplan (and so
 * fc_plan_bind) gives for the same values. The layout keeps the plan's
 * graph's name (the graph must outlive it), nothing else of the plan.
 * Free it with fc_arena_layout_free.
 */
struct fc_arena_layout;
fc_status fc_memplan_layout_make(const fc_plan *plan, struct fc_arena_layout **out);

/* The storage classes of a plan (passes/memplan.c): an FC_GROUP_ALIAS
 * group's outputs are views of the buffer it reads, so a class is a value
 * that owns a buffer (its root) plus every alias of it, transitively. The
 * memory plan and the runtimes that place values by it share these. */
typedef struct fc_plan_classes {
    int nvalues;      /* plan->g->next_value_id; the arrays are indexed by value id */
    fc_value **val;   /* id -> value, for every param, group input/output, alias
                       * source and graph result; NULL for the rest */
    int *root;        /* id -> id of its class root (id itself for a root) */
    int *result_slot; /* root id -> the first graph result in the class, or -1 */
} fc_plan_classes;

/* Compute plan's classes into c (arrays from ctx; FC_ERR_NOMEM leaves c
 * empty). Free with fc_plan_classes_free (an empty c is fine). */
fc_status fc_plan_classes_make(fc_context *ctx, const fc_plan *plan, fc_plan_classes *c);
void fc_plan_classes_free(fc_context *ctx, fc_plan_classes *c);

/* The whole pipeline: graph passes, then fusion, scheduling, memory plan.
 * With o->dynamic: the graph keeps its symbols (at most FC_DYN_MAX_SYMS),
 * attention ops are lowered to primitives (no attention pattern fusion),
 * symbolic groups are never batched, and there is no memory plan. */
fc_status fc_pipeline(fc_graph *g, const fc_fuse_options *o, fc_plan *plan);

/* A concrete plan for one shape of a dynamic plan: sym_values[i] is the
 * value of symbol i of dyn->g (dyn->g->syms order), nsyms == dyn->g->nsyms.
 * `out` owns a copy of dyn->g with every symbol replaced by its value, in
 * which every value and node id is the same as in dyn->g; its groups are
 * dyn's groups in the same order (group i of out is group i of dyn), with
 * concrete spaces, rows and row lengths; the memory plan is run on it. No
 * fusion decision is made again. A binding that does not fit the graph
 * (a size below 1, sizes that contradict a node's shape rule) gives
 * FC_ERR_INPUT with the reason on the context; out is then empty. Release
 * with fc_plan_release. */
fc_status fc_plan_bind(const fc_plan *dyn, const int64_t *sym_values, int nsyms, fc_plan *out);

/* Bytes of a value with static dims (fc_value_bytes_at(v, NULL)). */
int64_t fc_value_bytes(const fc_value *v);
/* Bytes of v with each symbolic dim given by sym_values (NULL: v has
 * static dims); -1 if the product overflows 64 bits. */
int64_t fc_value_bytes_at(const fc_value *v, const int64_t *sym_values);

#endif

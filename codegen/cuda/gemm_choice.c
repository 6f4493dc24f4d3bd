/* gemm_choice.c - the table of rules that says which code runs a GEMM
 * (gemm_choice.h; docs/GEMM.md, "Which code runs a GEMM"). */
#include "gemm_choice.h"
#include "gemm.h"
#include "decode.h"

#include <string.h>

static const fc_group *group(const fc_plan *plan, int gi) { return plan->groups[gi]; }

static bool is_gemm_op(const fc_group *gr) {
    return gr->nodes[0]->op == FC_OP_MATMUL || gr->nodes[0]->op == FC_OP_GEMM;
}

/* A dynamic plan's library op that is neither gemm nor matmul: no call
 * takes symbolic sizes, and no kernel is generated for it. */
static bool dynamic_not_gemm(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    (void)c;
    return plan->dynamic && !is_gemm_op(group(plan, gi));
}

/* The dynamic variant's GEMMs are generated kernels, so that a new shape
 * needs no library setup (descriptors, an algorithm query, a lazily loaded
 * kernel), unless FUSEC_VARIANT_GEMM=cublaslt or no tile kernel fits the
 * group (fc_cuda_gemm_kernel_fits: an f64 epilogue, several weights of
 * symbolic size). */
static bool dynamic_generated(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    (void)c;
    return plan->dynamic && fc_cuda_variant_gemm_kernels() && fc_cuda_gemm_kernel_fits(group(plan, gi));
}

static bool dynamic_any(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    (void)gi;
    (void)c;
    return plan->dynamic;
}

/* A skinny GEMM whose A is the result of an attention group that runs
 * inside it (fc_cuda_skinny_attention_plan, which also requires the GEMM to
 * be skinny: FUSEC_SKINNY=0 turns both off). */
static bool skinny_attention(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    for (int a = 0; a < gi; a++) {
        fc_skinny_attention f;
        if (group(plan, a)->kind == FC_GROUP_ATTENTION && fc_cuda_skinny_attention_plan(plan, a, &f) && f.gemm_group == gi) {
            c->fused = f;
            c->attention = a;
            return true;
        }
    }
    return false;
}

/* Static M <= 64 on sm_90a, unless FUSEC_SKINNY=0 (fc_cuda_skinny_plan). */
static bool skinny(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    return fc_cuda_skinny_plan(plan, group(plan, gi), &c->skinny);
}

/* Static M <= 8 against weights stored [N, K] (trans_b), which the skinny
 * kernels do not take, or M = 1 against [K, N], which they take but run
 * slower at one row (one TMA slice a block, 96 blocks at most for GPT-2:
 * docs/PERF.md), unless FUSEC_SKINNY=0 (fc_cuda_gemv_plan). Tried before the skinny rule, after the attention
 * and projection (a fusion the GEMV has not). */
static bool gemv(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    return fc_cuda_gemv_plan(plan, group(plan, gi), &c->gemv);
}

/* A convolution (conv_cl): one cuDNN call (runtime/cuda/cudnn.h). */
static bool conv(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    (void)c;
    return group(plan, gi)->nodes[0]->op == FC_OP_CONV_CL;
}

static bool always(const fc_plan *plan, int gi, fc_gemm_choice *c) {
    (void)plan;
    (void)gi;
    (void)c;
    return true;
}

static const fc_gemm_rule rules[] = {
    {"dynamic: not a gemm or matmul", dynamic_not_gemm, FC_GEMM_UNSUPPORTED},
    {"dynamic: generated tiles", dynamic_generated, FC_GEMM_GENERATED},
    {"dynamic: cuBLASLt (FUSEC_VARIANT_GEMM=cublaslt)", dynamic_any, FC_GEMM_LIBRARY},
    {"static: a convolution: cuDNN", conv, FC_GEMM_LIBRARY},
    {"static: attention and projection in one skinny kernel", skinny_attention, FC_GEMM_SKINNY_ATTENTION},
    {"static: GEMV (M <= 8, sm 80+)", gemv, FC_GEMM_GEMV},
    {"static: skinny (M <= 64, sm_90a)", skinny, FC_GEMM_SKINNY},
    {"static: cuBLASLt", always, FC_GEMM_LIBRARY},
};

const fc_gemm_rule *fc_cuda_gemm_rules(int *count) {
    *count = (int)(sizeof rules / sizeof rules[0]);
    return rules;
}

void fc_cuda_gemm_choose(const fc_plan *plan, int gi, fc_gemm_choice *out) {
    memset(out, 0, sizeof *out);
    out->attention = -1;
    out->path = FC_GEMM_NONE;
    out->rule = "not a library group";
    if (group(plan, gi)->kind != FC_GROUP_LIBRARY || group(plan, gi)->batch > 0) return;
    if (fc_cuda_is_decode_group(group(plan, gi))) {
        out->rule = "a decode op: its own kernel (decode.c)";
        return;
    }
    if (fc_op_is_collective(group(plan, gi)->nodes[0]->op)) {
        out->rule = "a collective: NCCL (runtime/cuda/nccl.c)";
        return;
    }
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
        if (rules[r].when(plan, gi, out)) {
            out->path = rules[r].path;
            out->rule = rules[r].name;
            return;
        }
}

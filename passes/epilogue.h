/*
 * epilogue.h - GEMM epilogue fusion and horizontal GEMM fusion (internal).
 *
 * fc_pass_epilogue turns every matmul that cuBLASLt can run into a `gemm`
 * node (ir/ops.def) that carries what the library can do for free around the
 * product: transposed operands, a bias, a residual, relu or gelu_tanh, a
 * scale and a cast of the result. Sibling gemms that share their left operand
 * and whose right operands are graph parameters become one gemm over the
 * concatenated weights, its result sliced. docs/GEMM.md has the rules, the
 * fallbacks and the constant-weights contract.
 *
 * Pipeline position: after the second canonicalize (composites are
 * primitives, CSE has merged equal values) and before fusion, which then
 * sees each gemm as one library group.
 */
#ifndef FC_PASSES_EPILOGUE_H
#define FC_PASSES_EPILOGUE_H

#include "ir.h"

#include <stdbool.h>
#include <stddef.h>

/* Rewrite g in place (the rewriter rebuilds it; a DCE ends the pass). */
fc_status fc_pass_epilogue(fc_graph *g);

/*
 * The entries of a gemm node's `spec` list attribute, in order. ir/build.c
 * (infer_gemm) reads the same entries by index; the two must agree.
 */
enum fc_gemm_spec {
    FC_GEMM_TRANS_A,  /* 1: a is stored [.., K, M] (the graph had permute(a) of its last two dims) */
    FC_GEMM_TRANS_B,  /* 1: every right operand is stored [.., N, K] */
    FC_GEMM_NWEIGHTS, /* the number of right operands; more than 1 after horizontal fusion */
    FC_GEMM_BIAS,     /* 1: one bias per right operand follows the right operands */
    FC_GEMM_RESIDUAL, /* 1: the last operand is added before the activation (cuBLASLt's C, beta = 1) */
    FC_GEMM_ACT,      /* an fc_gemm_act */
    FC_GEMM_SPEC_LEN
};

typedef enum fc_gemm_act {
    FC_GEMM_ACT_NONE = 0,
    FC_GEMM_ACT_RELU = 1,
    FC_GEMM_ACT_GELU_TANH = 2, /* cuBLASLt's GELU is the tanh form */
} fc_gemm_act;

/* A gemm node decoded (or a matmul, read as the plain gemm it is). The
 * pointers point into the node's operand array. */
typedef struct fc_gemm_info {
    bool trans_a, trans_b;
    int nweights;
    bool has_bias, has_residual;
    fc_gemm_act act;
    double alpha;   /* the `scale` attribute */
    fc_dtype out;   /* the result's dtype (`to`) */
    fc_value *a;
    fc_value **w;    /* nweights right operands */
    fc_value **bias; /* nweights biases, or NULL */
    fc_value *residual; /* or NULL */
} fc_gemm_info;

/* Decode n; false when n is neither a gemm nor a matmul. */
bool fc_gemm_info_of(const fc_node *n, fc_gemm_info *out);

/* A one-line description for plans: "gemm[trans_b,bias,gelu_tanh] -> bf16"
 * (the flags that are set, in spec order, then the result dtype). Returns buf. */
const char *fc_gemm_describe(const fc_node *n, char *buf, size_t size);

#endif

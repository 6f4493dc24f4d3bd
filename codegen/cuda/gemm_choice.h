/*
 * gemm_choice.h - which code runs a plan's GEMM (internal to codegen/cuda).
 *
 * A `gemm` or `matmul` group (a library group of the plan) runs one of five
 * ways: a cuBLASLt call (runtime/cublaslt.c), a skinny GEMM kernel
 * (skinny.h: static M <= 64 on Hopper), a skinny GEMM with the attention
 * that produces its A inside it (skinny.h, "attention and projection"), a
 * GEMV kernel (gemv.h: static M <= 8, weights [N, K] or [K, N]), or the
 * dynamic variant's generated tiles (gemm.h). fc_cuda_gemm_choose is
 * the one place that decides, by a table of rules tried in order (the
 * first whose condition holds wins); the dispatcher (codegen.c) calls it
 * for every group before it emits anything. docs/GEMM.md, "Which code
 * runs a GEMM", lists the rules.
 */
#ifndef FC_CUDA_GEMM_CHOICE_H
#define FC_CUDA_GEMM_CHOICE_H

#include "gemv.h"
#include "skinny.h"

typedef enum fc_gemm_path {
    FC_GEMM_NONE,             /* not a library group: the other generators' */
    FC_GEMM_LIBRARY,          /* a library call: cuBLASLt for gemm and matmul */
    FC_GEMM_SKINNY,           /* skinny.c's kernel (choice.skinny) */
    FC_GEMM_SKINNY_ATTENTION, /* skinny.c's kernel with the attention group
                               * choice.attention inside (choice.fused) */
    FC_GEMM_GEMV,             /* gemv.c's kernel (choice.gemv) */
    FC_GEMM_GENERATED,        /* gemm.c's tiles, sizes from the symbols */
    FC_GEMM_UNSUPPORTED,      /* a library op of a dynamic plan that no call
                               * or kernel runs: an error (bind the symbols) */
} fc_gemm_path;

typedef struct fc_gemm_choice {
    fc_gemm_path path;
    const char *rule;          /* the name of the rule that chose it */
    fc_skinny skinny;          /* FC_GEMM_SKINNY */
    fc_skinny_attention fused; /* FC_GEMM_SKINNY_ATTENTION */
    fc_gemv gemv;              /* FC_GEMM_GEMV */
    int attention;             /* FC_GEMM_SKINNY_ATTENTION: the attention's index in plan->groups; else -1 */
} fc_gemm_choice;

/* How group plan->groups[gi] runs (*out filled; path FC_GEMM_NONE and
 * rule "not a library group" for any group that is not a library one). */
void fc_cuda_gemm_choose(const fc_plan *plan, int gi, fc_gemm_choice *out);

/* The rules, in the order they are tried (*count of them): for the docs and
 * for the tests, which check that every rule is reached. */
typedef struct fc_gemm_rule {
    const char *name;
    bool (*when)(const fc_plan *plan, int gi, fc_gemm_choice *c); /* may fill c's details */
    fc_gemm_path path;
} fc_gemm_rule;
const fc_gemm_rule *fc_cuda_gemm_rules(int *count);

#endif

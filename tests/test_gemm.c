/* test_gemm.c - GEMM epilogue fusion, horizontal GEMM fusion and the
 * cuBLASLt runtime (passes/epilogue.c, runtime/cublaslt.c, docs/GEMM.md).
 *
 * Without a GPU:
 *  1. Pass tests: each .ir file of tests/gemm/ holds an input graph and, in
 *     comments, the passes to run and the exact IR expected after them, in
 *     the format of tests/passes/ (# RUN:, # BIND:, # EXPECT:). The result
 *     must be a fixpoint and the expected text canonical .ir.
 *  2. Each of those graphs computes the same before and after its passes
 *     under the reference interpreter (the gemm's one rounding against the
 *     graph's many, within the result dtype's tolerance).
 *  3. Plans: fc_pipeline + fc_cuda_codegen give the expected kernels and
 *     library calls; no gemm's result is read by more than one kernel in the
 *     epilogue cases; every kernel compiles with NVRTC for sm_90.
 *  4. The gemm op's builder checks; 5. fc_gemm_plan_of (batches, loops,
 *     transposes, the epilogue); 5b. the launch's description
 *     (fc_gemm_desc_of: operand positions, weight columns) and its check
 *     against buffer sizes (fc_gemm_desc_valid), which the program decoder
 *     relies on; 6. an allocation failure at every allocation of the
 *     pass; 7. the runtime fails cleanly without a device.
 *  7a. Which code runs a GEMM (fc_cuda_gemm_choose, codegen/cuda/
 *     gemm_choice.c) for representative shapes, and its fallbacks.
 *  7b. The cuBLASLt problem of every GPU case below (fc_cublaslt_key_of:
 *     the column-major mapping, batch strides, the loop, the concatenated
 *     weights' layout) evaluated on the host as cuBLASLt defines it, against
 *     the reference interpreter: the mapping is checked even without a GPU.
 *     Each case's launch description is valid for buffers of exactly its
 *     operands' sizes.
 * With a GPU:
 *  8. Every epilogue, dtype, batch layout, transposed and concatenated
 *     operand through cuBLASLt, run from the launch's description as a
 *     program runs it, against the reference interpreter.
 * Without one, part 8 prints "skipped: no CUDA device (...)".
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gemm.h"
#include "codegen/cuda/gemm_choice.h"
#include "ir.h"
#include "nvrtc_check.h"
#include "pass_file.h"
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/ref/interp.h"
#include "runtime/cuda/program.h"
#include "test_util.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_graph *parse(fc_context *ctx, const char *name, const char *text) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, name, text, strlen(text), NULL, NULL, 0, &g) != FC_OK)
        fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    return g;
}

/* The passes the pipeline runs up to and including epilogue fusion. */
#define PIPELINE_PASSES "canonicalize,decompose,canonicalize,epilogue"

/* ------------------------------------------------------------------ */
/* Numerics helpers                                                     */
/* ------------------------------------------------------------------ */

/* The tolerance of a result dtype: an element passes when
 *     |got - want| <= rel * (|want| + mean |want|)
 * The mean term is there because a GEMM's error scales with the size of
 * the products it sums, not with the sum: an element that cancels to
 * near zero may carry an error of the order of its neighbours'. */
static double rel_tol(fc_dtype dt, bool gpu) {
    switch (dt) {
    case FC_F64: return 1e-12;
    case FC_F32: return gpu ? 1e-4 : 1e-5; /* cuBLASLt sums in another order (no TF32: it is off) */
    case FC_F16: return 2e-3;
    case FC_BF16: return 1.6e-2;
    default: return 0;
    }
}

/* Worst |got - want| / tolerance over n elements (<= 1 passes); `where`
 * gets the index of the worst. */
static double worst_ratio(const double *got, const double *want, int64_t n, double rel, int64_t *where) {
    double mean = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) mean += fabs(want[i]);
    mean = n ? mean / (double)n : 0;
    *where = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]), tol = rel * (fabs(want[i]) + mean) + 1e-30;
        if (isnan(got[i]) != isnan(want[i])) err = INFINITY;
        if (isnan(got[i]) && isnan(want[i])) err = 0;
        if (err / tol > worst) {
            worst = err / tol;
            *where = i;
        }
    }
    return worst;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
}

static void random_interp_inputs(const fc_graph *g, fc_interp_tensor *in) {
    for (int i = 0; i < g->nparams; i++) {
        const fc_value *p = g->params[i];
        in[i].dtype = p->dtype;
        in[i].rank = p->rank;
        int64_t n = 1;
        for (int d = 0; d < p->rank; d++) n *= in[i].shape[d] = p->dims[d];
        in[i].data = malloc(sizeof(double) * (size_t)(n ? n : 1));
        for (int64_t j = 0; j < n; j++) in[i].data[j] = uniform();
    }
}

/* ------------------------------------------------------------------ */
/* 1 and 2. Pass tests and their numerics                               */
/* ------------------------------------------------------------------ */

/* g0 and g1 give the same results (within the result dtypes' tolerance)
 * on random inputs under the reference interpreter. */
static void check_same_results(const char *name, fc_graph *g0, fc_graph *g1) {
    CHECK_EQ_INT(g0->nparams, g1->nparams);
    CHECK_EQ_INT(g0->noutputs, g1->noutputs);
    if (g0->nparams != g1->nparams || g0->noutputs != g1->noutputs) return;
    fc_interp_tensor in[16] = {{0}}, r0[8] = {{0}}, r1[8] = {{0}};
    if (g0->nparams > 16 || g0->noutputs > 8) {
        CHECK(false);
        return;
    }
    random_interp_inputs(g0, in);
    fc_status s0 = fc_interp_run(g0, in, g0->nparams, r0, g0->noutputs);
    fc_status s1 = fc_interp_run(g1, in, g1->nparams, r1, g1->noutputs);
    CHECK_EQ_INT(s0, FC_OK);
    CHECK_EQ_INT(s1, FC_OK);
    if (s0 || s1) fprintf(stderr, "%s: reference: %s\n", name, fc_last_error(g0->ctx));
    for (int k = 0; !s0 && !s1 && k < g0->noutputs; k++) {
        int64_t n = fc_interp_tensor_numel(&r0[k]), at;
        CHECK_EQ_INT(fc_interp_tensor_numel(&r1[k]), n);
        if (fc_interp_tensor_numel(&r1[k]) != n) continue;
        double w = worst_ratio(r1[k].data, r0[k].data, n, rel_tol(r0[k].dtype, false), &at);
        if (w > 1)
            fprintf(stderr, "%s: result %d differs after the passes: [%lld] %.9g vs %.9g (%.2f x tolerance)\n", name,
                    k, (long long)at, r1[k].data[at], r0[k].data[at], w);
        CHECK(w <= 1);
    }
    for (int i = 0; i < g0->nparams; i++) free(in[i].data);
    for (int k = 0; k < g0->noutputs; k++) {
        fc_interp_tensor_release(&r0[k]);
        fc_interp_tensor_release(&r1[k]);
    }
}

static void test_files(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/gemm", src_dir());
    char **files = list_ir(dir);
    CHECK(files != NULL);
    if (!files) return;
    int n = 0;
    for (int i = 0; files[i]; i++, n++) run_pass_file(files[i], check_same_results);
    CHECK(n >= 14);
    free_list(files);
}

/* ------------------------------------------------------------------ */
/* 3. Plans                                                             */
/* ------------------------------------------------------------------ */

typedef struct plan_case {
    const char *name;
    const char *ir;
    int kernels, libraries;
    bool one_kernel_after; /* check: each gemm's result is read by at most one kernel */
    int64_t gemm_cols;     /* when set: the columns of the (one) gemm's result, padded or not */
} plan_case;

static const plan_case plan_cases[] = {
    {"gelu_tanh(x @ W + b), the benchmark's shape",
     "graph f(%x: bf16[8192, 4096], %w: bf16[4096, 16384], %b: bf16[16384]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = gelu_tanh(%h1)\n  return %y\n}\n",
     0, 1, true, 0},
    {"GPT-2 MLP (bias, gelu_tanh, bias, residual)",
     "graph f(%x: bf16[8192, 768], %w1: bf16[768, 3072], %b1: bf16[3072], %w2: bf16[3072, 768], %b2: bf16[768]) {\n"
     "  %h = matmul(%x, %w1)\n  %h1 = add(%h, %b1)\n  %g = gelu_tanh(%h1)\n  %o = matmul(%g, %w2)\n"
     "  %o1 = add(%o, %b2)\n  %y = add(%o1, %x)\n  return %y\n}\n",
     0, 2, true, 0},
    {"SwiGLU MLP (gate and up fused; silu(g) * u one kernel)",
     "graph f(%x: bf16[8192, 512], %wg: bf16[512, 1408], %wu: bf16[512, 1408], %wd: bf16[1408, 512]) {\n"
     "  %g = matmul(%x, %wg)\n  %u = matmul(%x, %wu)\n  %s = silu(%g)\n  %h = mul(%s, %u)\n"
     "  %y = matmul(%h, %wd)\n  return %y\n}\n",
     1, 2, true, 0},
    {"three sibling projections",
     "graph f(%x: bf16[512, 768], %wq: bf16[768, 768], %wk: bf16[768, 768], %wv: bf16[768, 768]) {\n"
     "  %q = matmul(%x, %wq)\n  %k = matmul(%x, %wk)\n  %v = matmul(%x, %wv)\n  return %q, %k, %v\n}\n",
     1, 1, false, 0},
    {"erf gelu tail: one kernel",
     "graph f(%x: f32[256, 512], %w: f32[512, 1024], %b: f32[1024]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = gelu(%h1)\n  return %y\n}\n",
     1, 1, true, 0},
    {"silu tail: one kernel",
     "graph f(%x: bf16[256, 512], %w: bf16[512, 1024], %b: bf16[1024]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = silu(%h1)\n  return %y\n}\n",
     1, 1, true, 0},
    {"residual after the activation: one kernel",
     "graph f(%x: f32[256, 512], %w: f32[512, 512], %b: f32[512], %r: f32[256, 512]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %a = relu(%h1)\n  %y = add(%a, %r)\n  return %y\n}\n",
     1, 1, true, 0},
    {"layernorm after the gemm: the next group reads it",
     "graph f(%x: bf16[256, 768], %w: bf16[768, 768], %b: bf16[768], %g: bf16[768], %be: bf16[768]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %h2 = add(%h1, %x)\n  %y = layernorm(%h2, %g, %be)\n"
     "  return %y\n}\n",
     1, 1, true, 0},
    {"batched attention-like products, transposed, scaled",
     "graph f(%q: f16[8, 128, 64], %k: f16[8, 128, 64], %v: f16[8, 128, 64]) {\n"
     "  %kt = permute(%k, perm=[0, 2, 1])\n  %s = matmul(%q, %kt)\n  %s1 = mul(%s, 0.125)\n"
     "  %p = softmax(%s1, axis=-1)\n  %o = matmul(%p, %v)\n  return %o\n}\n",
     1, 0, true, 0}, /* recognised as attention: one flash-attention kernel */
    /* Unaligned shapes (passes/pad.c, the default cost rule). */
    {"LM head, N = 50257, M = 8192: the gemm writes the caller's 50257 columns in place (interleaved rows)",
     "graph f(%x: bf16[8192, 768], %w: bf16[50257, 768]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     0, 1, true, 50257},
    {"LM head, N = 50257, M = 128: the gemm writes 50264 columns; the zero block's kernel and the caller's copy",
     "graph f(%x: bf16[128, 768], %w: bf16[50257, 768]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     2, 1, true, 50264},
    {"LM head into a softmax: the softmax reads the padded result in place (no copy)",
     "graph f(%x: bf16[8192, 768], %w: bf16[50257, 768]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  %p = softmax(%y, axis=-1)\n  return %p\n}\n",
     2, 1, true, 50264},
    {"LM head at M = 1: bound by the weight's bytes, not padded",
     "graph f(%x: bf16[1, 768], %w: bf16[50257, 768]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     0, 1, true, 50257},
    {"K = 767 after relu: relu writes the padded rows (one kernel), the weight's pad one copy",
     "graph f(%x: bf16[8192, 767], %w: bf16[767, 3072]) {\n"
     "  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     2, 1, true, 3072},
    {"aligned GPT-2 shapes: nothing padded",
     "graph f(%x: bf16[8192, 768], %w: bf16[768, 3072], %b: bf16[3072]) {\n"
     "  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n  return %y\n}\n",
     0, 1, true, 3072},
};

/* The columns of the plan's one library group's result (-1: not one). */
static int64_t library_cols(const fc_plan *p) {
    int64_t cols = -1;
    int n = 0;
    for (int a = 0; a < p->ngroups; a++) {
        const fc_group *lib = p->groups[a];
        if (lib->kind != FC_GROUP_LIBRARY) continue;
        const fc_value *y = lib->nodes[0]->out[0];
        cols = y->dims[y->rank - 1];
        n++;
    }
    return n == 1 ? cols : -1;
}

static int count_kind(const fc_cuda_src *s, fc_launch_kind k) {
    int n = 0;
    for (int i = 0; i < s->nlaunches; i++) n += s->launches[i].kind == k;
    return n;
}

/* The largest number of kernel groups that read one library group's results. */
static int kernels_after_library(const fc_plan *p) {
    int worst = 0;
    for (int a = 0; a < p->ngroups; a++) {
        const fc_group *lib = p->groups[a];
        if (lib->kind != FC_GROUP_LIBRARY) continue;
        int readers = 0;
        for (int b = 0; b < p->ngroups; b++) {
            const fc_group *gb = p->groups[b];
            if (gb->kind == FC_GROUP_LIBRARY) continue;
            bool reads = false;
            for (int i = 0; i < gb->ninputs && !reads; i++)
                for (int o = 0; o < lib->noutputs; o++) reads |= gb->inputs[i] == lib->outputs[o];
            readers += reads;
        }
        if (readers > worst) worst = readers;
    }
    return worst;
}

static void test_plans(void) {
    fc_context *ctx = fc_context_new();
    for (size_t c = 0; c < sizeof plan_cases / sizeof plan_cases[0]; c++) {
        const plan_case *pc = &plan_cases[c];
        fc_graph *g = parse(ctx, pc->name, pc->ir);
        CHECK(g != NULL);
        if (!g) continue;
        fc_plan plan;
        fc_status st = fc_pipeline(g, NULL, &plan);
        CHECK_EQ_INT(st, FC_OK);
        fc_cuda_src src = {0};
        if (!st) st = fc_cuda_codegen(&plan, &src);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s: %s\n", pc->name, fc_last_error(ctx));
        if (!st) {
            int k = count_kind(&src, FC_LAUNCH_KERNEL), l = count_kind(&src, FC_LAUNCH_LIBRARY);
            if (k != pc->kernels || l != pc->libraries)
                fprintf(stderr, "%s: %d kernels, %d library calls (want %d, %d)\n", pc->name, k, l, pc->kernels,
                        pc->libraries);
            CHECK_EQ_INT(k, pc->kernels);
            CHECK_EQ_INT(l, pc->libraries);
            if (pc->one_kernel_after) CHECK(kernels_after_library(&plan) <= 1);
            if (pc->gemm_cols) CHECK_EQ_INT(library_cols(&plan), pc->gemm_cols);
            /* Every library launch is a gemm that reads its operands in place. */
            for (int i = 0; i < src.nlaunches; i++)
                if (src.launches[i].kind == FC_LAUNCH_LIBRARY) CHECK_STR(src.launches[i].name, "gemm");
            check_nvrtc_compiles(ctx, src.source, "gemm_test.cu", pc->name);
        }
        fc_cuda_src_release(&src);
        fc_plan_release(&plan);
        fc_graph_free(g);
    }
    fc_context_free(ctx);
}

/* fc_gemm_describe, as plans should show the epilogue. */
static void test_describe(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = parse(ctx, "describe",
                        "graph f(%x: bf16[8, 16], %w: bf16[32, 16], %b: bf16[32], %r: bf16[8, 32]) {\n"
                        "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 1, 1, 1, 1, 2], scale=0.5)\n  return %y\n}\n");
    CHECK(g != NULL);
    if (g) {
        char buf[160];
        CHECK_STR(fc_gemm_describe(g->nodes[0], buf, sizeof buf), "gemm[trans_b,scale=0.5,bias,residual,gelu_tanh] -> bf16");
    }
    fc_graph_free(g);
    g = parse(ctx, "describe2", "graph f(%x: f32[8, 16], %w: f32[16, 4]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n");
    if (g) {
        char buf[160];
        CHECK_STR(fc_gemm_describe(g->nodes[0], buf, sizeof buf), "matmul -> f32");
    }
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* ------------------------------------------------------------------ */
/* 4. The builder                                                       */
/* ------------------------------------------------------------------ */

static void expect_build_error(fc_context *ctx, const char *stmt, const char *params, const char *msg) {
    char text[1024];
    snprintf(text, sizeof text, "graph f(%s) {\n  %%y = %s\n  return %%y\n}\n", params, stmt);
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "gemm.ir", text, strlen(text), NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_ERR_INPUT);
    bool has = strstr(fc_last_error(ctx), msg) != NULL;
    if (!has) fprintf(stderr, "for %s: want '%s' in:\n%s\n", stmt, msg, fc_last_error(ctx));
    CHECK(has);
    fc_graph_free(g);
}

static void test_builder(void) {
    fc_context *ctx = fc_context_new();
    const char *p = "%x: bf16[8, 16], %w: bf16[16, 32], %w2: bf16[16, 8], %b: bf16[32], %bf: f32[32], "
                    "%r: bf16[8, 32], %w3: bf16[2, 16, 8], %xf: f64[8, 16], %wf: f64[16, 32]";
    expect_build_error(ctx, "gemm(%x, %w, to=bf16, spec=[0, 0, 1, 0, 0])", p, "gemm: spec must have 6 entries");
    expect_build_error(ctx, "gemm(%x, %w, to=bf16, spec=[0, 0, 1, 0, 0, 3])", p, "gemm: bad spec");
    expect_build_error(ctx, "gemm(%x, %w, to=bf16, spec=[0, 0, 1, 1, 0, 0])", p, "gemm: spec asks for 3 operands, got 2");
    expect_build_error(ctx, "gemm(%x, %w, to=f16, spec=[0, 0, 1, 0, 0, 0])", p,
                       "gemm: to=f16: the result must be the operands' dtype (bf16) or f32");
    expect_build_error(ctx, "gemm(%x, %w, %bf, to=bf16, spec=[0, 0, 1, 1, 0, 0])", p, "gemm: bias 0 must be bf16[.., 32]");
    expect_build_error(ctx, "gemm(%x, %w, %x, to=bf16, spec=[0, 0, 1, 0, 1, 0])", p,
                       "gemm: the residual must be bf16[8, 32] (the result's type), got bf16[8, 16]");
    expect_build_error(ctx, "gemm(%x, %w, to=bf16, spec=[1, 0, 1, 0, 0, 0])", p, "gemm: inner dimensions differ (8 vs 16)");
    expect_build_error(ctx, "gemm(%x, %w, %w3, to=bf16, spec=[0, 0, 2, 0, 0, 0])", p, "rank 2 when n > 1");
    expect_build_error(ctx, "gemm(%xf, %wf, to=f64, spec=[0, 0, 1, 0, 0, 0])", p, "must be f32, f16 or bf16");
    expect_build_error(ctx, "gemm(%x, 2.0, to=bf16, spec=[0, 0, 1, 0, 0, 0])", p, "cannot be a bare number");

    /* A valid one, with every feature: f32 result of bf16 operands. */
    const char *ok = "graph f(%x: bf16[3, 16, 8], %w: bf16[4, 16], %v: bf16[2, 16], %b: f32[4], %c: f32[1, 2], "
                     "%r: f32[3, 8, 6]) {\n"
                     "  %y = gemm(%x, %w, %v, %b, %c, %r, to=f32, spec=[1, 1, 2, 1, 1, 1], scale=2.0)\n  return %y\n}\n";
    fc_graph *g = parse(ctx, "ok", ok);
    CHECK(g != NULL);
    if (g) {
        CHECK_EQ_INT(g->nodes[0]->out[0]->rank, 3);
        CHECK_EQ_INT(g->nodes[0]->out[0]->dims[2], 6);
        CHECK_EQ_INT(g->nodes[0]->out[0]->dtype, FC_F32);
        fc_gemm_info gi;
        CHECK(fc_gemm_info_of(g->nodes[0], &gi));
        CHECK(gi.trans_a && gi.trans_b && gi.has_bias && gi.has_residual);
        CHECK_EQ_INT(gi.nweights, 2);
        CHECK_EQ_INT(gi.act, FC_GEMM_ACT_RELU);
        CHECK_NEAR(gi.alpha, 2.0, 0);
        CHECK(gi.bias && gi.bias[1] == g->params[4]);
        CHECK(gi.residual == g->params[5]);
        CHECK_EQ_INT(fc_verify(g), FC_OK);
        char *s = fc_print(g);
        CHECK(s && strstr(s, "gemm(%x, %w, %v, %b, %c, %r, to=f32, spec=[1, 1, 2, 1, 1, 1], scale=2.0) : f32[3, 8, 6]"));
        fc_free(s);
    }
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* ------------------------------------------------------------------ */
/* 5. The runtime's plan of a node                                      */
/* ------------------------------------------------------------------ */

static bool plan_of_text(fc_context *ctx, const char *params, const char *stmt, fc_gemm_plan *p) {
    char text[1024];
    snprintf(text, sizeof text, "graph f(%s) {\n  %%y = %s\n  return %%y\n}\n", params, stmt);
    fc_graph *g = parse(ctx, stmt, text);
    CHECK(g != NULL);
    if (!g) return false;
    fc_status st = fc_gemm_plan_of(ctx, g->nodes[g->nnodes - 1], p);
    CHECK_EQ_INT(st, FC_OK);
    if (st) fprintf(stderr, "%s: %s\n", stmt, fc_last_error(ctx));
    fc_graph_free(g);
    return st == FC_OK;
}

static void test_gemm_plan(void) {
    fc_context *ctx = fc_context_new();
    fc_gemm_plan p;
    /* A weight without batch dims: the batch is more rows. */
    if (plan_of_text(ctx, "%x: f32[2, 3, 16, 32], %w: f32[32, 24]", "matmul(%x, %w)", &p)) {
        CHECK(p.folded_batch);
        CHECK_EQ_INT(p.M, 96);
        CHECK_EQ_INT(p.N, 24);
        CHECK_EQ_INT(p.K, 32);
        CHECK_EQ_INT(p.batch, 1);
        CHECK_EQ_INT(p.nouter, 0);
        CHECK_EQ_INT(fc_gemm_plan_calls(&p), 1);
    }
    /* Batched weights: one strided batch. */
    if (plan_of_text(ctx, "%x: f16[4, 16, 32], %w: f16[4, 32, 24]", "matmul(%x, %w)", &p)) {
        CHECK(!p.folded_batch);
        CHECK_EQ_INT(p.batch, 4);
        CHECK_EQ_INT(p.stride_a, 16 * 32);
        CHECK_EQ_INT(p.stride_w, 32 * 24);
        CHECK_EQ_INT(p.stride_y, 16 * 24);
        CHECK_EQ_INT(p.nouter, 0);
    }
    /* Broadcast on both sides: the inner dim is a strided batch (a of
     * stride 0), the outer one a loop. */
    if (plan_of_text(ctx, "%x: bf16[2, 1, 16, 32], %w: bf16[3, 32, 24]", "matmul(%x, %w)", &p)) {
        CHECK_EQ_INT(p.batch, 3);
        CHECK_EQ_INT(p.stride_a, 0);
        CHECK_EQ_INT(p.stride_w, 32 * 24);
        CHECK_EQ_INT(p.stride_y, 16 * 24);
        CHECK_EQ_INT(p.nouter, 1);
        CHECK_EQ_INT(p.outer_size[0], 2);
        CHECK_EQ_INT(p.outer_a[0], 16 * 32);
        CHECK_EQ_INT(p.outer_w[0], 0);
        CHECK_EQ_INT(p.outer_y[0], 3 * 16 * 24);
        CHECK_EQ_INT(fc_gemm_plan_calls(&p), 2);
    }
    /* Two batch dims that chain: one strided batch of 6. */
    if (plan_of_text(ctx, "%x: f32[2, 3, 8, 4], %w: f32[2, 3, 4, 5]", "matmul(%x, %w)", &p)) {
        CHECK_EQ_INT(p.batch, 6);
        CHECK_EQ_INT(p.nouter, 0);
    }
    /* A transposed batched a cannot fold: a strided batch, weight stride 0. */
    if (plan_of_text(ctx, "%x: f32[4, 32, 16], %w: f32[32, 24]", "gemm(%x, %w, to=f32, spec=[1, 0, 1, 0, 0, 0])", &p)) {
        CHECK(p.trans_a && !p.folded_batch);
        CHECK_EQ_INT(p.M, 16);
        CHECK_EQ_INT(p.K, 32);
        CHECK_EQ_INT(p.lda, 16);
        CHECK_EQ_INT(p.batch, 4);
        CHECK_EQ_INT(p.stride_w, 0);
    }
    /* Rank-1 operands: [1, K] and [K, 1]. */
    if (plan_of_text(ctx, "%v: f32[64], %w: f32[64, 32]", "matmul(%v, %w)", &p)) {
        CHECK_EQ_INT(p.M, 1);
        CHECK_EQ_INT(p.N, 32);
        CHECK_EQ_INT(p.K, 64);
    }
    if (plan_of_text(ctx, "%x: f32[5, 64], %v: f32[64]", "matmul(%x, %v)", &p)) {
        CHECK_EQ_INT(p.M, 5);
        CHECK_EQ_INT(p.N, 1);
    }
    /* Concatenated weights: N is the sum, the leading dim of the
     * concatenation N (W) or K (W^T). */
    if (plan_of_text(ctx, "%x: bf16[8, 64], %w1: bf16[64, 32], %w2: bf16[64, 16]",
                     "gemm(%x, %w1, %w2, to=bf16, spec=[0, 0, 2, 0, 0, 0])", &p)) {
        CHECK_EQ_INT(p.N, 48);
        CHECK_EQ_INT(p.ldw, 48);
        CHECK_EQ_INT(p.nweights, 2);
    }
    if (plan_of_text(ctx, "%x: bf16[8, 64], %w1: bf16[32, 64], %w2: bf16[16, 64]",
                     "gemm(%x, %w1, %w2, to=bf16, spec=[0, 1, 2, 0, 0, 0])", &p)) {
        CHECK_EQ_INT(p.N, 48);
        CHECK_EQ_INT(p.ldw, 64);
    }
    /* The epilogue travels in the plan (the runtime has no node). */
    if (plan_of_text(ctx, "%x: f16[8, 64], %w: f16[64, 32], %b: f32[32], %r: f32[8, 32]",
                     "gemm(%x, %w, %b, %r, to=f32, spec=[0, 0, 1, 1, 1, 2], scale=0.5)", &p)) {
        CHECK(p.has_bias && p.has_residual);
        CHECK_EQ_INT(p.act, FC_GEMM_ACT_GELU_TANH);
        CHECK_NEAR(p.alpha, 0.5, 0);
        CHECK_EQ_INT(p.ab, FC_F16);
        CHECK_EQ_INT(p.out, FC_F32);
        CHECK_EQ_INT(fc_gemm_plan_nops(&p), 4);
    }
    if (plan_of_text(ctx, "%x: f32[4, 8], %w: f32[8, 2]", "matmul(%x, %w)", &p)) {
        CHECK(!p.has_bias && !p.has_residual && p.act == FC_GEMM_ACT_NONE);
        CHECK_NEAR(p.alpha, 1, 0);
    }
    /* What cuBLASLt does not run here. */
    fc_graph *g = parse(ctx, "f64", "graph f(%x: f64[4, 4]) {\n  %y = exp(%x)\n  return %y\n}\n");
    if (g) {
        CHECK_EQ_INT(fc_gemm_plan_of(ctx, g->nodes[0], &p), FC_ERR_UNSUPPORTED);
        CHECK(strstr(fc_last_error(ctx), "cuBLASLt runs gemm and matmul nodes, not exp") != NULL);
    }
    fc_graph_free(g);
    g = parse(ctx, "sym", "graph f(%x: f32[B, 4], %w: f32[4, 4]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n");
    if (g) {
        CHECK_EQ_INT(fc_gemm_plan_of(ctx, g->nodes[0], &p), FC_ERR_UNSUPPORTED);
        CHECK(strstr(fc_last_error(ctx), "symbolic dims") != NULL);
    }
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* ------------------------------------------------------------------ */
/* 5b. The launch's description                                         */
/* ------------------------------------------------------------------ */

/* The byte sizes of the arguments, as a program's storage gives them. */
static void arg_bytes_of(const fc_graph *g, const int *ids, int nargs, int64_t *bytes) {
    for (int a = 0; a < nargs; a++) {
        bytes[a] = -1;
        for (int i = 0; i < g->nparams; i++)
            if (g->params[i]->id == ids[a]) bytes[a] = fc_value_bytes(g->params[i]);
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i]->out[0]->id == ids[a]) bytes[a] = fc_value_bytes(g->nodes[i]->out[0]);
    }
}

static void test_gemm_desc(void) {
    fc_context *ctx = fc_context_new();
    /* QKV with biases, the launch's arguments in another order than the
     * operands (as a group's inputs may be). */
    fc_graph *g = parse(ctx, "qkv",
                        "graph f(%x: bf16[2, 8, 64], %wq: bf16[64, 64], %wk: bf16[64, 32], %wv: bf16[64, 16], "
                        "%bq: bf16[64], %bk: bf16[32], %bv: bf16[16]) {\n"
                        "  %y = gemm(%x, %wq, %wk, %wv, %bq, %bk, %bv, to=bf16, spec=[0, 0, 3, 1, 0, 0])\n"
                        "  return %y\n}\n");
    if (!g) {
        CHECK(false);
        fc_context_free(ctx);
        return;
    }
    const fc_node *n = g->nodes[0];
    /* Arguments: y, then the parameters backwards. */
    int ids[8];
    ids[0] = n->out[0]->id;
    for (int i = 0; i < 7; i++) ids[1 + i] = g->params[6 - i]->id;
    fc_gemm_desc d;
    CHECK_EQ_INT(fc_gemm_desc_of(ctx, n, ids, 8, &d), FC_OK);
    CHECK_EQ_INT(d.out_arg, 0);
    for (int k = 0; k < 7; k++) CHECK_EQ_INT(d.op_arg[k], 7 - k); /* operand k is parameter k */
    CHECK_EQ_INT(d.plan.nweights, 3);
    CHECK_EQ_INT(d.plan.N, 112);
    CHECK_EQ_INT(d.wcols[0], 64);
    CHECK_EQ_INT(d.wcols[1], 32);
    CHECK_EQ_INT(d.wcols[2], 16);
    CHECK(d.plan.has_bias && d.plan.folded_batch);
    CHECK_EQ_INT(d.plan.M, 16);

    int64_t bytes[8];
    arg_bytes_of(g, ids, 8, bytes);
    char why[256];
    CHECK(fc_gemm_desc_valid(&d, 8, bytes, why, sizeof why));
    /* One byte short anywhere is refused, with the operand named. */
    for (int a = 0; a < 8; a++) {
        bytes[a]--;
        bool ok = fc_gemm_desc_valid(&d, 8, bytes, why, sizeof why);
        CHECK(!ok);
        if (ok) fprintf(stderr, "argument %d one byte short: accepted\n", a);
        bytes[a]++;
    }
    /* Nonsense that a crafted file could hold: refused, never a crash. */
    fc_gemm_desc bad = d;
    bad.plan.M = INT64_MAX / 2;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.outer_size[0] = 3;
    bad.plan.outer_y[0] = INT64_MAX / 2;
    bad.plan.nouter = 1;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.nouter = FC_MAX_RANK + 1;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.ab = FC_I32;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    CHECK(strstr(why, "not a GEMM") != NULL);
    bad = d;
    bad.plan.out = FC_F16; /* bf16 operands give bf16 or f32 */
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.act = (fc_gemm_act)7;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.alpha = NAN;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.N = 113; /* the columns sum to 112 */
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    CHECK(strstr(why, "sum to 112") != NULL);
    bad = d;
    bad.plan.ldw = 64; /* the concatenation is [64, 112] */
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.has_residual = true; /* one more operand than positions */
    CHECK(!fc_gemm_desc_valid(&bad, 7, bytes, why, sizeof why));
    bad = d;
    bad.out_arg = 8;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    bad = d;
    bad.plan.nweights = 9;
    CHECK(!fc_gemm_desc_valid(&bad, 8, bytes, why, sizeof why));
    fc_gemm_desc_release(&d);
    CHECK(d.op_arg == NULL && d.wcols == NULL);
    fc_gemm_desc_release(NULL);

    /* Zero-size GEMMs are valid descriptions with buffers of no bytes: M,
     * N or K of 0 (an empty operand's leading dim may be 0); cuBLASLt is
     * not called for them. */
    static const char *const empty[] = {
        "graph f(%x: f32[0, 16], %w: f32[16, 8]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
        "graph f(%x: f32[4, 16], %w: f32[16, 0]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
        "graph f(%x: f32[4, 0], %w: f32[0, 8]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
        "graph f(%x: f32[4, 16], %w: f32[0, 16]) {\n  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
    };
    for (size_t e = 0; e < sizeof empty / sizeof empty[0]; e++) {
        fc_graph *ge = parse(ctx, "empty", empty[e]);
        CHECK(ge != NULL);
        if (!ge) continue;
        CHECK_EQ_INT(fc_pass_epilogue(ge), FC_OK);
        const fc_node *m = ge->nodes[ge->nnodes - 1];
        int eids[3] = {ge->params[0]->id, ge->params[1]->id, m->out[0]->id};
        fc_gemm_desc de;
        CHECK_EQ_INT(fc_gemm_desc_of(ctx, m, eids, 3, &de), FC_OK);
        int64_t eb[3];
        arg_bytes_of(ge, eids, 3, eb);
        bool ok = fc_gemm_desc_valid(&de, 3, eb, why, sizeof why);
        CHECK(ok);
        if (!ok) fprintf(stderr, "empty GEMM %zu refused: %s\n", e, why);
        fc_gemm_desc_release(&de);
        fc_graph_free(ge);
    }

    /* A value missing from the arguments; a node cuBLASLt does not run. */
    CHECK_EQ_INT(fc_gemm_desc_of(ctx, n, ids, 7, &d), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "no argument for value") != NULL);
    CHECK(d.op_arg == NULL);
    fc_graph_free(g);
    g = parse(ctx, "exp", "graph f(%x: f32[4, 4]) {\n  %y = exp(%x)\n  return %y\n}\n");
    if (g) {
        int ids2[2] = {g->params[0]->id, g->nodes[0]->out[0]->id};
        CHECK_EQ_INT(fc_gemm_desc_of(ctx, g->nodes[0], ids2, 2, &d), FC_ERR_UNSUPPORTED);
        CHECK(d.op_arg == NULL);
    }
    fc_graph_free(g);

    /* Every allocation failing in turn: FC_ERR_NOMEM, nothing left. */
    g = parse(ctx, "qkv2",
              "graph f(%x: f32[8, 64], %w1: f32[64, 32], %w2: f32[64, 16]) {\n"
              "  %y = gemm(%x, %w1, %w2, to=f32, spec=[0, 0, 2, 0, 0, 0])\n  return %y\n}\n");
    if (g) {
        int ids3[4] = {g->params[0]->id, g->params[1]->id, g->params[2]->id, g->nodes[0]->out[0]->id};
        int failures = 0;
        for (long k = 1; k < 100; k++) {
            fc_context_fail_alloc_after(ctx, k);
            fc_status st = fc_gemm_desc_of(ctx, g->nodes[0], ids3, 4, &d);
            fc_context_fail_alloc_after(ctx, 0);
            if (st == FC_OK) break;
            failures++;
            CHECK_EQ_INT(st, FC_ERR_NOMEM);
        }
        CHECK(failures >= 1);
        fc_gemm_desc_release(&d);
    }
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* ------------------------------------------------------------------ */
/* 6. Allocation failures                                               */
/* ------------------------------------------------------------------ */

static void test_alloc_failures(void) {
    static const char *const graphs[] = {
        "graph f(%x: bf16[2, 16, 64], %wq: bf16[64, 64], %bq: bf16[64], %wk: bf16[64, 32], %bk: bf16[32], "
        "%r: bf16[2, 16, 64]) {\n  %q0 = matmul(%x, %wq)\n  %q1 = add(%q0, %bq)\n  %q = add(%q1, %r)\n"
        "  %k0 = matmul(%x, %wk)\n  %k = add(%k0, %bk)\n  %g = gelu_tanh(%q)\n  return %g, %k\n}\n",
        "graph f(%x: f32[8, 16], %w: f32[16, 16], %v: f32[16, 16]) {\n  %a = matmul(%x, %w)\n  %b = matmul(%x, %v)\n"
        "  %c = add(%a, %b)\n  %d = relu(%c)\n  return %d\n}\n",
    };
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++)
        CHECK(pass_through_alloc_failures(graphs[i], NULL, fc_pass_epilogue) > 5);
}

/* ------------------------------------------------------------------ */
/* 7 and 8. The runtime                                                 */
/* ------------------------------------------------------------------ */

static void test_runtime_without_device(fc_context *ctx) {
    CHECK(fc_cublaslt_version() > 0);
    fc_cublaslt *h = (fc_cublaslt *)1;
    CHECK_EQ_INT(fc_cublaslt_create(ctx, NULL, NULL, &h), FC_ERR_RUNTIME);
    CHECK(h == NULL);
    CHECK(strncmp(fc_last_error(ctx), "no CUDA", 7) == 0);
    fc_graph *g = parse(ctx, "nodev", "graph f(%x: f32[8, 16], %w: f32[16, 4]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n");
    fc_gemm_desc d = {0};
    if (g) {
        int ids[3] = {g->params[0]->id, g->params[1]->id, g->nodes[0]->out[0]->id};
        CHECK_EQ_INT(fc_gemm_desc_of(ctx, g->nodes[0], ids, 3, &d), FC_OK); /* no GPU needed */
        CUdeviceptr ptrs[3] = {0, 0, 0};
        CHECK_EQ_INT(fc_cublaslt_launch(NULL, ctx, &d, ptrs, 3, 0, 0, NULL), FC_ERR_USAGE);
        CHECK(strstr(fc_last_error(ctx), "no handle") != NULL);
    }
    fc_gemm_desc_release(&d);
    fc_graph_free(g);
    CHECK_EQ_INT(fc_cublaslt_num_algos(NULL), 0);
    fc_cublaslt_destroy(NULL);
    fc_cublaslt_forget(NULL, NULL);
}

typedef struct gpu_case {
    const char *name;
    const char *ir; /* DT stands for the dtype under test */
    bool bf16_only;
} gpu_case;

static const gpu_case gpu_cases[] = {
    {"plain", "graph g(%x: DT[64, 128], %w: DT[128, 96]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", false},
    {"bias", "graph g(%x: DT[64, 128], %w: DT[128, 96], %b: DT[96]) {\n  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n"
             "  return %y\n}\n", false},
    {"bias relu", "graph g(%x: DT[64, 128], %w: DT[128, 96], %b: DT[96]) {\n  %h = matmul(%x, %w)\n"
                  "  %h1 = add(%h, %b)\n  %y = relu(%h1)\n  return %y\n}\n", false},
    {"bias gelu_tanh", "graph g(%x: DT[64, 128], %w: DT[128, 96], %b: DT[96]) {\n  %h = matmul(%x, %w)\n"
                       "  %h1 = add(%h, %b)\n  %y = gelu_tanh(%h1)\n  return %y\n}\n", false},
    {"relu", "graph g(%x: DT[64, 128], %w: DT[128, 96]) {\n  %h = matmul(%x, %w)\n  %y = relu(%h)\n  return %y\n}\n",
     false},
    {"gelu_tanh", "graph g(%x: DT[64, 128], %w: DT[128, 96]) {\n  %h = matmul(%x, %w)\n  %y = gelu_tanh(%h)\n"
                  "  return %y\n}\n", false},
    {"residual bias relu", "graph g(%x: DT[64, 128], %w: DT[128, 96], %b: DT[96], %r: DT[64, 96]) {\n"
                           "  %h = matmul(%x, %w)\n  %h1 = add(%r, %h)\n  %h2 = add(%h1, %b)\n  %y = relu(%h2)\n"
                           "  return %y\n}\n", false},
    {"scale", "graph g(%x: DT[64, 128], %w: DT[128, 96]) {\n  %h = matmul(%x, %w)\n  %y = mul(%h, 0.125)\n"
              "  return %y\n}\n", false},
    {"transposed a and b", "graph g(%x: DT[128, 64], %w: DT[96, 128]) {\n  %xt = permute(%x, perm=[1, 0])\n"
                           "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%xt, %wt)\n  return %y\n}\n", false},
    {"strided batch", "graph g(%x: DT[3, 40, 64], %w: DT[3, 64, 24]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     false},
    {"batch folded into rows", "graph g(%x: DT[2, 3, 33, 64], %w: DT[64, 40], %b: DT[40]) {\n"
                               "  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n  return %y\n}\n", false},
    {"batch broadcast (a loop of calls)",
     "graph g(%x: DT[2, 1, 16, 32], %w: DT[3, 32, 24]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", false},
    {"transposed batched a", "graph g(%x: DT[4, 32, 16], %w: DT[32, 24]) {\n  %xt = permute(%x, perm=[0, 2, 1])\n"
                             "  %y = matmul(%xt, %w)\n  return %y\n}\n", false},
    {"K = 1024", "graph g(%x: DT[32, 1024], %w: DT[1024, 64], %b: DT[64]) {\n  %h = matmul(%x, %w)\n"
                 "  %h1 = add(%h, %b)\n  %y = gelu_tanh(%h1)\n  return %y\n}\n", false},
    {"siblings with biases (W concatenated by columns)",
     "graph g(%x: DT[2, 24, 64], %wq: DT[64, 64], %bq: DT[64], %wk: DT[64, 32], %bk: DT[32], %wv: DT[64, 32], "
     "%bv: DT[32]) {\n  %q0 = matmul(%x, %wq)\n  %q = add(%q0, %bq)\n  %k0 = matmul(%x, %wk)\n  %k = add(%k0, %bk)\n"
     "  %v0 = matmul(%x, %wv)\n  %v = add(%v0, %bv)\n  return %q, %k, %v\n}\n", false},
    {"siblings W^T with relu (W concatenated by rows)",
     "graph g(%x: DT[48, 64], %wg: DT[80, 64], %wu: DT[80, 64]) {\n  %wgt = permute(%wg, perm=[1, 0])\n"
     "  %wut = permute(%wu, perm=[1, 0])\n  %g0 = matmul(%x, %wgt)\n  %g = relu(%g0)\n  %u0 = matmul(%x, %wut)\n"
     "  %u = relu(%u0)\n  return %g, %u\n}\n", false},
    {"unaligned N, W^T: written in place over interleaved rows",
     "graph g(%x: DT[1024, 64], %w: DT[1001, 64]) {\n  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n"
     "  return %y\n}\n", false},
    {"siblings W^T with an unaligned N in all, in place over interleaved rows",
     "graph g(%x: DT[1024, 64], %wg: DT[500, 64], %wu: DT[501, 64]) {\n  %wgt = permute(%wg, perm=[1, 0])\n"
     "  %wut = permute(%wu, perm=[1, 0])\n  %g = matmul(%x, %wgt)\n  %u = matmul(%x, %wut)\n  return %g, %u\n}\n",
     false},
    {"rank-1 left operand", "graph g(%v: DT[64], %w: DT[64, 32]) {\n  %y = matmul(%v, %w)\n  return %y\n}\n", false},
    {"autocast (16-bit in, f32 tail, cast out)",
     "graph g(%x: bf16[64, 128], %w: bf16[128, 96]) {\n  %xf = cast(%x, to=f32)\n  %wf = cast(%w, to=f32)\n"
     "  %h = matmul(%xf, %wf)\n  %g = gelu_tanh(%h)\n  %y = cast(%g, to=bf16)\n  return %y\n}\n", true},
    {"f32 result of 16-bit inputs",
     "graph g(%x: f16[64, 128], %w: f16[128, 96], %b: f32[96]) {\n  %xf = cast(%x, to=f32)\n"
     "  %wf = cast(%w, to=f32)\n  %h = matmul(%xf, %wf)\n  %y = add(%h, %b)\n  return %y\n}\n", true},
};

/* The one gemm (or matmul) of g, or NULL. */
static const fc_node *only_library_node(const fc_graph *g) {
    const fc_node *found = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead || (n->op != FC_OP_GEMM && n->op != FC_OP_MATMUL)) continue;
        if (found) return NULL;
        found = n;
    }
    return found;
}

/* Result k of the graph out of the gemm's result y (host doubles): y
 * itself, or a slice of its last dim. */
static bool extract(const fc_graph *g, int k, const fc_value *y, const double *yd, double *out) {
    const fc_value *v = g->outputs[k];
    int64_t n = 1;
    for (int d = 0; d < y->rank; d++) n *= y->dims[d];
    if (v == y) {
        memcpy(out, yd, sizeof(double) * (size_t)n);
        return true;
    }
    if (!v->def || v->def->op != FC_OP_SLICE || v->def->in[0] != y || v->def->a.step != 1) return false;
    int64_t cols = y->dims[y->rank - 1], rows = n / cols, w = v->dims[v->rank - 1], start = v->def->a.start;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < w; c++) out[r * w + c] = yd[r * cols + start + c];
    return true;
}

typedef struct gpu_env {
    fc_context *ctx;
    fc_cuda_device *dev;
    fc_cublaslt *h;
    CUdeviceptr ws;
} gpu_env;

/* Run the one library node of the rewritten graph on the GPU; compare each
 * graph result with the reference interpreter's on the original graph. */
static void run_gpu_case(gpu_env *env, fc_cublaslt *h, const char *name, const char *ir, bool twice) {
    fc_context *ctx = env->ctx;
    fc_graph *g0 = parse(ctx, name, ir);
    fc_graph *g1 = g0 ? fc_graph_clone(g0) : NULL;
    CHECK(g0 && g1);
    if (!g0 || !g1 || run_passes(g1, PIPELINE_PASSES, name) != FC_OK) {
        CHECK(false);
        fc_graph_free(g0);
        fc_graph_free(g1);
        return;
    }
    const fc_node *n = only_library_node(g1);
    CHECK(n != NULL);
    int np = g0->nparams, no = g0->noutputs;
    fc_tensor in[16] = {{0}}, ref[8] = {{0}};
    CUdeviceptr dptr[17] = {0};
    int ids[17];
    for (int i = 0; i < np; i++) {
        const fc_value *p = g0->params[i];
        in[i].dtype = p->dtype;
        in[i].rank = p->rank;
        for (int d = 0; d < p->rank; d++) in[i].shape[d] = p->dims[d];
        int64_t cnt = fc_tensor_numel(&in[i]);
        in[i].data = malloc((size_t)cnt * fc_dtype_size(p->dtype));
        for (int64_t j = 0; j < cnt; j++) fc_interp_store(p->dtype, in[i].data, j, uniform());
    }
    fc_status st = fc_run_reference(g0, in, np, ref, no);
    CHECK_EQ_INT(st, FC_OK);
    const fc_value *y = n ? n->out[0] : NULL;
    size_t ybytes = y ? (size_t)fc_value_bytes(y) : 0;
    for (int i = 0; i < np && st == FC_OK; i++) {
        size_t bytes = (size_t)fc_value_bytes(g1->params[i]);
        st = fc_cuda_alloc(env->dev, bytes, &dptr[i]);
        if (!st) st = fc_cuda_upload(env->dev, dptr[i], in[i].data, bytes);
        ids[i] = g1->params[i]->id;
    }
    if (st == FC_OK && y) {
        st = fc_cuda_alloc(env->dev, ybytes, &dptr[np]);
        ids[np] = y->id;
    }
    /* The launch as a program makes it: the description from the node,
     * then pointers by argument position. */
    fc_gemm_desc desc = {0};
    if (st == FC_OK && y) st = fc_gemm_desc_of(ctx, n, ids, np + 1, &desc);
    int queries = fc_cublaslt_heuristic_queries(h);
    if (st == FC_OK && y)
        st = fc_cublaslt_launch(h, ctx, &desc, dptr, np + 1, env->ws, FC_CUBLASLT_WORKSPACE_BYTES, NULL);
    if (st == FC_OK && y && twice) {
        /* The second run finds its algorithm (and concatenated weights) in
         * the handle: no new heuristic query. */
        int after_first = fc_cublaslt_heuristic_queries(h);
        /* One query per distinct problem: one, or up to ten for a result
         * written in place over interleaved rows (each of the eight row
         * phases starts at its own column shift, and the first and the
         * last columns' small GEMMs). */
        CHECK(after_first <= queries + 10);
        st = fc_cublaslt_launch(h, ctx, &desc, dptr, np + 1, env->ws, FC_CUBLASLT_WORKSPACE_BYTES, NULL);
        CHECK_EQ_INT(fc_cublaslt_heuristic_queries(h), after_first);
    }
    if (st == FC_OK) st = fc_cuda_stream_sync(env->dev, NULL);
    CHECK_EQ_INT(st, FC_OK);
    if (st) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    if (st == FC_OK && y) {
        void *host = malloc(ybytes);
        int64_t ny = (int64_t)(ybytes / fc_dtype_size(y->dtype));
        double *yd = malloc(sizeof(double) * (size_t)ny), *got = malloc(sizeof(double) * (size_t)ny);
        double *want = malloc(sizeof(double) * (size_t)ny);
        st = fc_cuda_download(env->dev, host, dptr[np], ybytes);
        CHECK_EQ_INT(st, FC_OK);
        for (int64_t j = 0; j < ny; j++) yd[j] = fc_interp_load(y->dtype, host, j);
        for (int k = 0; k < no && st == FC_OK; k++) {
            bool ok = extract(g1, k, y, yd, got);
            CHECK(ok);
            if (!ok) continue;
            int64_t cnt = fc_tensor_numel(&ref[k]), at;
            for (int64_t j = 0; j < cnt; j++) want[j] = fc_interp_load(ref[k].dtype, ref[k].data, j);
            double w = worst_ratio(got, want, cnt, rel_tol(ref[k].dtype, true), &at);
            if (w > 1)
                fprintf(stderr, "%s: result %d: [%lld] got %.9g, want %.9g (%.2f x tolerance)\n", name, k, (long long)at,
                        got[at], want[at], w);
            CHECK(w <= 1);
        }
        free(host);
        free(yd);
        free(got);
        free(want);
    }
    /* The handle keeps concatenated weights under the description's
     * address, where the next case's description may land, with weights
     * at these very addresses once they are freed and allocated again. */
    (void)fc_cuda_stream_sync(env->dev, NULL);
    fc_cublaslt_forget(h, &desc);
    fc_gemm_desc_release(&desc);
    for (int i = 0; i <= np; i++) fc_cuda_free(env->dev, dptr[i]);
    for (int i = 0; i < np; i++) free(in[i].data);
    for (int k = 0; k < no; k++) fc_tensor_release(&ref[k]);
    fc_graph_free(g0);
    fc_graph_free(g1);
}

/* ------------------------------------------------------------------ */
/* 7b. cuBLASLt's problem, evaluated on the host                        */
/* ------------------------------------------------------------------ */

/* D = act(alpha op(A) op(B) + beta C + bias) for one cuBLASLt call, as its
 * documentation defines it: column-major, element (i, j) of a matrix with
 * leading dim ld at i + j * ld; op T reads the stored matrix transposed;
 * the bias is per row of D. Offsets are in elements. */
static void lt_call(const fc_cublaslt_key *k, double alpha, double beta, const double *A, const double *B,
                    const double *C, const double *bias, double *D) {
    for (int64_t b = 0; b < k->batch; b++) {
        const double *Ab = A + b * k->stride_a, *Bb = B + b * k->stride_b, *Cb = C + b * k->stride_d;
        double *Db = D + b * k->stride_d;
        for (int64_t i = 0; i < k->m; i++)
            for (int64_t j = 0; j < k->n; j++) {
                double acc = 0;
                for (int64_t l = 0; l < k->k; l++) {
                    double a = k->op_a == CUBLAS_OP_N ? Ab[i + l * k->lda] : Ab[l + i * k->lda];
                    double bb = k->op_b == CUBLAS_OP_N ? Bb[l + j * k->ldb] : Bb[j + l * k->ldb];
                    acc += a * bb;
                }
                double v = alpha * acc + (beta != 0 ? beta * Cb[i + j * k->ldd] : 0);
                if (k->epilogue & CUBLASLT_EPILOGUE_BIAS) v += bias[i];
                if (k->epilogue & CUBLASLT_EPILOGUE_RELU) v = v < 0 ? 0 : v;
                if (k->epilogue & CUBLASLT_EPILOGUE_GELU) {
                    const double c = sqrt(2.0 / 3.14159265358979323846);
                    v = 0.5 * v * (1.0 + tanh(c * (v + 0.044715 * v * v * v)));
                }
                Db[i + j * k->ldd] = v;
            }
    }
}

/* Host data of operand `v` of the rewritten graph: its parameter's. */
static const double *param_data(const fc_graph *g, const fc_value *v, const fc_interp_tensor *in) {
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i] == v) return in[i].data;
    return NULL;
}

static void emulate_case(const char *name, const char *ir) {
    fc_context *ctx = fc_context_new();
    fc_graph *g0 = parse(ctx, name, ir), *g1 = g0 ? fc_graph_clone(g0) : NULL;
    const fc_node *n = NULL;
    if (g1 && run_passes(g1, PIPELINE_PASSES, name) == FC_OK) n = only_library_node(g1);
    CHECK(n != NULL);
    fc_gemm_plan p;
    if (!n || fc_gemm_plan_of(ctx, n, &p) != FC_OK) {
        CHECK(false);
        fc_graph_free(g0);
        fc_graph_free(g1);
        fc_context_free(ctx);
        return;
    }
    fc_gemm_info gi;
    fc_gemm_info_of(n, &gi);
    /* The description a program would carry for this launch is valid
     * against buffers of exactly the operands' sizes. */
    {
        int ids[17], nargs = g1->nparams + 1;
        int64_t bytes[17];
        for (int i = 0; i < g1->nparams; i++) ids[i] = g1->params[i]->id;
        ids[g1->nparams] = n->out[0]->id;
        arg_bytes_of(g1, ids, nargs, bytes);
        fc_gemm_desc desc;
        CHECK_EQ_INT(fc_gemm_desc_of(ctx, n, ids, nargs, &desc), FC_OK);
        char why[256] = "";
        bool ok = desc.op_arg && fc_gemm_desc_valid(&desc, nargs, bytes, why, sizeof why);
        if (!ok) fprintf(stderr, "%s: description refused: %s\n", name, why);
        CHECK(ok);
        fc_gemm_desc_release(&desc);
    }
    fc_interp_tensor in[16] = {{0}}, ref[8] = {{0}};
    random_interp_inputs(g0, in);
    for (int i = 0; i < g0->nparams; i++) /* as the device would hold them */
        for (int64_t j = 0; j < fc_interp_tensor_numel(&in[i]); j++)
            in[i].data[j] = fc_round_to_dtype(in[i].data[j], in[i].dtype);
    CHECK_EQ_INT(fc_interp_run(g0, in, g0->nparams, ref, g0->noutputs), FC_OK);

    /* The weight and bias cuBLASLt reads: the parameters, or their
     * concatenation laid out as runtime/cublaslt.c builds it. */
    const double *w = param_data(g1, gi.w[0], in), *bias = gi.has_bias ? param_data(g1, gi.bias[0], in) : NULL;
    double *wcat = NULL, *bcat = NULL;
    if (gi.nweights > 1) {
        wcat = calloc((size_t)(p.K * p.N), sizeof *wcat);
        bcat = calloc((size_t)p.N, sizeof *bcat);
        int64_t off = 0;
        for (int i = 0; i < gi.nweights; i++) {
            const fc_value *wi = gi.w[i];
            const double *src = param_data(g1, wi, in);
            int64_t Ni = gi.trans_b ? wi->dims[0] : wi->dims[1];
            for (int64_t r = 0; r < (gi.trans_b ? Ni : p.K); r++)
                for (int64_t c = 0; c < (gi.trans_b ? p.K : Ni); c++) {
                    if (gi.trans_b) wcat[(off + r) * p.K + c] = src[r * p.K + c]; /* rows stacked: [N, K] */
                    else wcat[r * p.N + off + c] = src[r * Ni + c];             /* columns side by side: [K, N] */
                }
            if (gi.has_bias)
                for (int64_t c = 0; c < Ni; c++) bcat[off + c] = param_data(g1, gi.bias[i], in)[c];
            off += Ni;
        }
        w = wcat;
        bias = gi.has_bias ? bcat : NULL;
    }
    const double *x = param_data(g1, gi.a, in), *res = gi.has_residual ? param_data(g1, gi.residual, in) : NULL;
    CHECK(x && w && (!gi.has_bias || bias) && (!gi.has_residual || res));
    const fc_value *y = n->out[0];
    int64_t ny = 1;
    for (int d = 0; d < y->rank; d++) ny *= y->dims[d];
    double *yd = calloc((size_t)ny, sizeof *yd), *got = calloc((size_t)ny, sizeof *got);
    fc_cublaslt_key k;
    fc_cublaslt_key_of(&p, false, 256, 512, gi.has_bias ? 768 : 0, 1024, 1024, FC_CUBLASLT_WORKSPACE_BYTES, &k);
    CHECK_EQ_INT(k.version, FC_CUBLASLT_KEY_VERSION);
    CHECK_EQ_INT(k.compute, CUBLAS_COMPUTE_32F);
    for (int64_t o = 0; x && w && o < fc_gemm_plan_calls(&p); o++) {
        int64_t rest = o, oa = 0, ow = 0, oy = 0;
        for (int d = p.nouter - 1; d >= 0; d--) {
            int64_t i = rest % p.outer_size[d];
            rest /= p.outer_size[d];
            oa += i * p.outer_a[d];
            ow += i * p.outer_w[d];
            oy += i * p.outer_y[d];
        }
        lt_call(&k, gi.alpha, gi.has_residual ? 1.0 : 0.0, w + ow, x + oa, res ? res + oy : yd + oy, bias, yd + oy);
    }
    for (int64_t j = 0; j < ny; j++) yd[j] = fc_round_to_dtype(yd[j], y->dtype);
    for (int r = 0; r < g0->noutputs; r++) {
        CHECK(extract(g1, r, y, yd, got));
        int64_t at, cnt = fc_interp_tensor_numel(&ref[r]);
        double worst = worst_ratio(got, ref[r].data, cnt, rel_tol(ref[r].dtype, false), &at);
        if (worst > 1)
            fprintf(stderr, "%s: host cuBLASLt result %d: [%lld] %.9g, want %.9g (%.2f x tolerance)\n", name, r,
                    (long long)at, got[at], ref[r].data[at], worst);
        CHECK(worst <= 1);
    }
    free(yd);
    free(got);
    free(wcat);
    free(bcat);
    for (int i = 0; i < g0->nparams; i++) free(in[i].data);
    for (int r = 0; r < g0->noutputs; r++) fc_interp_tensor_release(&ref[r]);
    fc_graph_free(g0);
    fc_graph_free(g1);
    fc_context_free(ctx);
}

static void test_emulated(void) {
    static const char *const dtypes[] = {"f32", "f16", "bf16"};
    for (size_t c = 0; c < sizeof gpu_cases / sizeof gpu_cases[0]; c++)
        for (size_t d = 0; d < 3; d++) {
            if (gpu_cases[c].bf16_only && d > 0) continue;
            char *ir = with_dtype(gpu_cases[c].ir, dtypes[d]);
            char name[160];
            snprintf(name, sizeof name, "%s (%s)", gpu_cases[c].name, dtypes[d]);
            emulate_case(name, ir);
            free(ir);
        }
}

static void test_gpu(gpu_env *env) {
    static const char *const dtypes[] = {"f32", "f16", "bf16"};
    int ran = 0;
    for (size_t c = 0; c < sizeof gpu_cases / sizeof gpu_cases[0]; c++) {
        for (size_t d = 0; d < 3; d++) {
            if (gpu_cases[c].bf16_only && d > 0) continue;
            char *ir = with_dtype(gpu_cases[c].ir, dtypes[d]);
            char name[160];
            snprintf(name, sizeof name, "%s (%s)", gpu_cases[c].name, gpu_cases[c].bf16_only ? "mixed" : dtypes[d]);
            int before = check_failed;
            run_gpu_case(env, env->h, name, ir, true);
            printf("%s %s\n", check_failed == before ? "ok  " : "FAIL", name);
            ran++;
            free(ir);
        }
    }
    printf("GPU: %d cases, %d algorithms chosen, %d heuristic queries\n", ran, fc_cublaslt_num_algos(env->h),
           fc_cublaslt_heuristic_queries(env->h));
    CHECK(fc_cublaslt_heuristic_queries(env->h) <= fc_cublaslt_num_algos(env->h));

    /* One weight with bias and relu, by hand: exact on small integers. */
    {
        fc_context *ctx = env->ctx;
        fc_graph *g = parse(ctx, "direct", "graph f(%x: f32[4, 8], %w: f32[8, 4], %b: f32[4]) {\n"
                                           "  %y = gemm(%x, %w, %b, to=f32, spec=[0, 0, 1, 1, 0, 1])\n  return %y\n}\n");
        fc_gemm_desc desc = {0};
        CUdeviceptr x = 0, w = 0, b = 0, y = 0;
        float hx[32], hw[32], hb[4], hy[16];
        for (int i = 0; i < 32; i++) hx[i] = (float)(i % 5) - 2, hw[i] = (float)(i % 3) - 1;
        for (int i = 0; i < 4; i++) hb[i] = (float)i - 1.5f;
        fc_status st = g ? FC_OK : FC_ERR_INPUT;
        if (!st) st = fc_cuda_alloc(env->dev, sizeof hx, &x);
        if (!st) st = fc_cuda_alloc(env->dev, sizeof hw, &w);
        if (!st) st = fc_cuda_alloc(env->dev, sizeof hb, &b);
        if (!st) st = fc_cuda_alloc(env->dev, sizeof hy, &y);
        if (!st) st = fc_cuda_upload(env->dev, x, hx, sizeof hx);
        if (!st) st = fc_cuda_upload(env->dev, w, hw, sizeof hw);
        if (!st) st = fc_cuda_upload(env->dev, b, hb, sizeof hb);
        if (!st) {
            /* Arguments in a launch's order: inputs, then the result. */
            int ids[4] = {g->params[0]->id, g->params[1]->id, g->params[2]->id, g->nodes[0]->out[0]->id};
            st = fc_gemm_desc_of(ctx, g->nodes[0], ids, 4, &desc);
        }
        CUdeviceptr args[4] = {x, w, b, y};
        if (!st) st = fc_cublaslt_launch(env->h, ctx, &desc, args, 4, env->ws, FC_CUBLASLT_WORKSPACE_BYTES, NULL);
        if (!st) st = fc_cuda_download(env->dev, hy, y, sizeof hy);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "gemm by hand: %s\n", fc_last_error(ctx));
        for (int m = 0; !st && m < 4; m++)
            for (int n = 0; n < 4; n++) {
                double s = hb[n];
                for (int k = 0; k < 8; k++) s += (double)hx[m * 8 + k] * hw[k * 4 + n];
                CHECK_NEAR(hy[m * 4 + n], s < 0 ? 0 : s, 0); /* small integers: exact */
            }
        fc_cuda_free(env->dev, x);
        fc_cuda_free(env->dev, w);
        fc_cuda_free(env->dev, b);
        fc_cuda_free(env->dev, y);
        fc_gemm_desc_release(&desc);
        fc_graph_free(g);
    }

    /* The algorithm table round-trips through bytes (the disk cache's job):
     * a second handle seeded with it makes no heuristic query. */
    fc_cublaslt *h2 = NULL;
    CHECK_EQ_INT(fc_cublaslt_create(env->ctx, env->dev, NULL, &h2), FC_OK);
    if (h2) {
        fc_cublaslt_key key;
        uint8_t algo[FC_CUBLASLT_ALGO_BYTES];
        for (int i = 0; fc_cublaslt_algo_at(env->h, i, &key, algo); i++)
            CHECK_EQ_INT(fc_cublaslt_algo_insert(h2, &key, algo), FC_OK);
        char *ir = with_dtype(gpu_cases[3].ir, "bf16");
        run_gpu_case(env, h2, "bias gelu_tanh (bf16, algorithm from the table)", ir, false);
        free(ir);
        CHECK_EQ_INT(fc_cublaslt_heuristic_queries(h2), 0);
        fc_cublaslt_destroy(h2);
    }
}

/* The dynamic variant's tile rule (fc_cuda_gemm_tiles, the kernels' own
 * fc_gm_tiles), without a GPU: a split launch stays within the split-K
 * workspace (16 MiB of f32, for every tile) and its 1024 counters,
 * whatever the sizes and the grid; M <= 64 takes the 64 x 64 tiles; the
 * 128 x 128 mma.sync tile only without wgmma or at M <= 768, and the wgmma
 * tile only with it, at M > 768; and a few shapes land where docs/GEMM.md
 * says. */
static void test_variant_tile_rule(void) {
    static const long long sizes[] = {1, 7, 64, 65, 127, 129, 300, 768, 1000, 3072, 8192};
    static const long long zs[] = {1, 3, 96}, ps[] = {1, 114, 132}, wbns[] = {0, 128, 192, 256};
    int bad = 0;
    for (size_t a = 0; a < 11; a++)
        for (size_t b = 0; b < 11; b++)
            for (size_t c = 0; c < 11; c++)
                for (size_t z = 0; z < 3; z++)
                    for (size_t q = 0; q < 3; q++)
                        for (size_t w = 0; w < 4; w++) {
                            long long M = sizes[a], N = sizes[b], K = sizes[c], Z = zs[z], P = ps[q], wbn = wbns[w];
                            long long kper = 0, nk = (K + 63) / 64;
                            int t = fc_cuda_gemm_tiles(M, N, K, Z, P, wbn, &kper);
                            long long bm = t ? 128 : 64, bn = t == 2 ? wbn : t == 1 ? 128 : 64;
                            long long tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn) * Z, splits = kper > 0 ? (nk + kper - 1) / kper : 0;
                            bool ok = kper >= 1 && kper <= nk && t >= 0 && t <= 2 && (t != 1 || wbn == 0 || M <= 768) && (t != 2 || wbn > 0) &&
                                      (t != 2 || M > 768) && (M > 64 || t == 0) &&
                                      (splits == 1 || (tiles * splits * bm * bn <= 4194304 && tiles <= 1024));
                            if (!ok && bad++ < 5)
                                fprintf(stderr, "tile rule: M %lld N %lld K %lld Z %lld P %lld wbn %lld: tile %d, kper %lld\n", M, N, K,
                                        Z, P, wbn, t, kper);
                        }
    CHECK_EQ_INT(bad, 0);
    long long kper = 0;
    CHECK_EQ_INT(fc_cuda_gemm_tiles(4096, 2304, 768, 1, 132, 192, &kper), 2); /* 32 x 12 tiles, 3 rounds */
    CHECK_EQ_INT(kper, 12);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(4096, 2304, 768, 1, 132, 0, &kper), 1);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(512, 2304, 768, 1, 132, 192, &kper), 1); /* M <= 768: 128 x 128 mma.sync */
    CHECK_EQ_INT(kper, 12);                                                       /* 72 tiles: unsplit */
    CHECK_EQ_INT(fc_cuda_gemm_tiles(256, 2304, 768, 1, 132, 192, &kper), 1); /* 36 tiles, split 3 */
    CHECK_EQ_INT(kper, 4);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(256, 768, 768, 1, 132, 192, &kper), 0);  /* 48 64 x 64 tiles, split 2 */
    CHECK_EQ_INT(kper, 6);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(384, 768, 3072, 1, 132, 192, &kper), 1); /* 18 tiles, split 7 */
    CHECK_EQ_INT(kper, 7);
    /* test_specialize's split 128 x 128 case (g23) must reach that tile. */
    CHECK_EQ_INT(fc_cuda_gemm_tiles(200, 2120, 700, 1, 132, 192, &kper), 1);
    CHECK_EQ_INT(kper, 4);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(16, 768, 3072, 1, 132, 192, &kper), 0); /* 12 tiles, 10 splits of 5 k tiles */
    CHECK_EQ_INT(kper, 5);
    /* GPT-2's out projection and MLP down projection at T = 1024 (M 1024,
     * N 768): 32 wgmma tiles, split 4 (the wgmma tile's splits may use the
     * whole 16 MiB workspace). */
    CHECK_EQ_INT(fc_cuda_gemm_tiles(1024, 768, 3072, 1, 132, 192, &kper), 2);
    CHECK_EQ_INT(kper, 12);
    CHECK_EQ_INT(fc_cuda_gemm_tiles(1024, 768, 768, 1, 132, 192, &kper), 2);
    CHECK_EQ_INT(kper, 3);
    CHECK_EQ_INT(fc_cuda_gemm_wgmma_bn(80), 0);
    CHECK_EQ_INT(fc_cuda_gemm_wgmma_bn(90), 192);
}

/* The dynamic variant's GEMM kernels for sm 90 (wgmma tiles, compiled for
 * sm_90a as the runtime compiles every sm 90 program) and for sm 80
 * (mma.sync only), without a GPU: the sources compile with NVRTC, the sm 90
 * one also for plain sm_90 (without sm_90a's features the kernels fall
 * back to mma.sync tiles, inside the same shared memory), and
 * the shared memory is what a block may have. Transposes, an epilogue, f16
 * and bf16, a batch with a broadcast weight. */
static void test_variant_sources(void) {
    static const char text[] =
        "graph vs(%x: bf16[M, 256], %w: bf16[256, 384], %g_b: bf16[384], %xa: f16[T, 320], %wa: f16[200, T],\n"
        "         %q: bf16[B, 2, M, 64], %wq: bf16[2, 64, 128]) {\n"
        "  %h = matmul(%x, %w)\n  %a = add(%h, %g_b)\n  %y1 = gelu_tanh(%a)\n"
        "  %at = permute(%xa, perm=[1, 0])\n  %wt = permute(%wa, perm=[1, 0])\n  %y2 = matmul(%at, %wt)\n"
        "  %y3 = matmul(%q, %wq)\n  return %y1, %y2, %y3\n}\n";
    fc_context *ctx = fc_context_new();
    for (int sm = 80; sm <= 90; sm += 10) {
        fc_graph *g = parse(ctx, "variant sources", text);
        CHECK(g != NULL);
        if (!g) continue;
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.dynamic = true;
        fc_plan plan;
        fc_status st = fc_pipeline(g, &fo, &plan);
        CHECK_EQ_INT(st, FC_OK);
        fc_cuda_src src = {0};
        if (!st) {
            plan.sm = sm;
            plan.sm_count = 132;
            st = fc_cuda_codegen(&plan, &src);
            CHECK_EQ_INT(st, FC_OK);
            if (st) fprintf(stderr, "variant sources, sm %d: %s\n", sm, fc_last_error(ctx));
        }
        if (!st) {
            const bool wg = fc_cuda_gemm_wgmma_bn(sm) > 0;
            char want[64];
            snprintf(want, sizeof want, "struct fc_wg_ss<%d>", fc_cuda_gemm_wgmma_bn(sm));
            CHECK_EQ_INT(strstr(src.source, want) != NULL, wg);
            CHECK_EQ_INT(strstr(src.source, "#define FC_GM_WGMMA 1") != NULL, wg);
            int gemms = 0;
            for (int i = 0; i < src.nlaunches; i++) {
                const fc_launch *l = &src.launches[i];
                if (l->kind != FC_LAUNCH_KERNEL || l->smem == 0) continue; /* the GEMMs are the kernels with dynamic shared memory */
                gemms++;
                CHECK_EQ_INT(l->block[0], 256);
                CHECK(l->smem > 0 && l->smem <= 227 * 1024);
            }
            CHECK_EQ_INT(gemms, 3);
            const char *extra[8];
            int nextra = fc_program_extra_nvrtc_options(sm, false, extra);
            for (int plain = 0; plain < 1 + (sm == 90); plain++) {
                fc_bytes cubin = {0};
                st = fc_nvrtc_compile(ctx, src.source, "variant_gemm.cu", sm / 10, sm % 10, extra, plain ? 0 : nextra, &cubin);
                if (st) fprintf(stderr, "variant sources, sm %d%s: NVRTC: %s\n", sm, plain ? " (plain)" : "", fc_last_error(ctx));
                CHECK_EQ_INT(st, FC_OK);
                CHECK(cubin.size > 0);
                fc_bytes_free(&cubin);
            }
        }
        fc_cuda_src_release(&src);
        fc_plan_release(&plan);
        fc_graph_free(g);
    }
    fc_context_free(ctx);
}

/* The GEMM choice (codegen/cuda/gemm_choice.c): static M 9..64 on sm 90
 * skinny, M above 64 (or sm 80, or FUSEC_SKINNY=0) cuBLASLt; M 1 against
 * a [K, N] weight, or a [N, K] one, a GEMV (cuBLASLt with FUSEC_SKINNY=0); GPT-2's out
 * projection at T = 64 with its attention inside; a dynamic plan's GEMMs
 * generated tiles, cuBLASLt with FUSEC_VARIANT_GEMM=cublaslt. Every rule but the dynamic non-GEMM library op (which no
 * pipeline leaves: a dynamic plan lowers its attention ops) is reached. */
typedef struct choice_case {
    const char *what, *text, *env; /* env: "NAME=VALUE" set for the case, or NULL */
    int sm;
    fc_gemm_path path;
    const char *rule;
} choice_case;

static void test_gemm_choice(void) {
    static const choice_case cases[] = {
        {"static M 1", "graph c1(%x: bf16[1, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_GEMV, "static: GEMV (M <= 8, sm 80+)"},
        {"static M 9", "graph c1b(%x: bf16[9, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_SKINNY, "static: skinny (M <= 64, sm_90a)"},
        {"static M 17, epilogue", "graph c2(%x: f16[17, 768], %w: f16[768, 768], %b: f16[768]) {\n"
         "  %y = gemm(%x, %w, %b, to=f16, spec=[0, 0, 1, 1, 0, 1])\n  return %y\n}\n", NULL, 90, FC_GEMM_SKINNY,
         "static: skinny (M <= 64, sm_90a)"},
        {"static M [2, 32]", "graph c3(%x: bf16[2, 32, 3072], %w: bf16[3072, 768]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL,
         90, FC_GEMM_SKINNY, "static: skinny (M <= 64, sm_90a)"},
        {"static M 65", "graph c4(%x: bf16[65, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_LIBRARY, "static: cuBLASLt"},
        {"static M 4096", "graph c5(%x: bf16[4096, 768], %w: bf16[768, 3072]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_LIBRARY, "static: cuBLASLt"},
        {"static M 16, sm 80", "graph c6(%x: bf16[16, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL,
         80, FC_GEMM_LIBRARY, "static: cuBLASLt"},
        {"static M 16, FUSEC_SKINNY=0", "graph c7(%x: bf16[16, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
         "FUSEC_SKINNY=0", 90, FC_GEMM_LIBRARY, "static: cuBLASLt"},
        {"static f32 M 16", "graph c8(%x: f32[16, 768], %w: f32[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_LIBRARY, "static: cuBLASLt"},
        {"static M 1, weight [N, K]", "graph c9(%x: bf16[1, 2048], %w: bf16[8192, 2048]) {\n"
         "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", NULL, 90, FC_GEMM_GEMV,
         "static: GEMV (M <= 8, sm 80+)"},
        {"static M 1, weight [N, K], FUSEC_SKINNY=0", "graph c10(%x: bf16[1, 2048], %w: bf16[8192, 2048]) {\n"
         "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", "FUSEC_SKINNY=0", 90, FC_GEMM_LIBRARY,
         "static: cuBLASLt"},
        {"dynamic bf16", "graph d1(%x: bf16[M, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 90,
         FC_GEMM_GENERATED, "dynamic: generated tiles"},
        {"dynamic f32, sm 80", "graph d2(%x: f32[M, 64], %w: f32[64, 32]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", NULL, 80,
         FC_GEMM_GENERATED, "dynamic: generated tiles"},
        {"dynamic, FUSEC_VARIANT_GEMM=cublaslt", "graph d3(%x: bf16[M, 768], %w: bf16[768, 2304]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
         "FUSEC_VARIANT_GEMM=cublaslt", 90, FC_GEMM_LIBRARY, "dynamic: cuBLASLt (FUSEC_VARIANT_GEMM=cublaslt)"},
    };
    fc_context *ctx = fc_context_new();
    int nrules = 0;
    const fc_gemm_rule *rules = fc_cuda_gemm_rules(&nrules);
    bool reached[16] = {0};
    CHECK(nrules > 0 && nrules <= 16);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const choice_case *cc = &cases[c];
        char name[64] = "";
        if (cc->env) {
            snprintf(name, sizeof name, "%.*s", (int)(strchr(cc->env, '=') - cc->env), cc->env);
            setenv(name, strchr(cc->env, '=') + 1, 1);
        }
        fc_graph *g = parse(ctx, cc->what, cc->text);
        CHECK(g != NULL);
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.dynamic = g && g->nsyms > 0;
        fc_plan plan;
        fc_status st = g ? fc_pipeline(g, &fo, &plan) : FC_ERR_INPUT;
        CHECK_EQ_INT(st, FC_OK);
        int gemms = 0;
        for (int i = 0; !st && i < plan.ngroups; i++) {
            plan.sm = cc->sm;
            fc_gemm_choice ch;
            fc_cuda_gemm_choose(&plan, i, &ch);
            if (plan.groups[i]->kind != FC_GROUP_LIBRARY) {
                CHECK_EQ_INT(ch.path, FC_GEMM_NONE);
                continue;
            }
            gemms++;
            if (ch.path != cc->path || strcmp(ch.rule, cc->rule))
                fprintf(stderr, "gemm choice: %s: path %d by \"%s\", want %d by \"%s\"\n", cc->what, ch.path, ch.rule, cc->path, cc->rule);
            CHECK_EQ_INT(ch.path, cc->path);
            CHECK(strcmp(ch.rule, cc->rule) == 0);
            if (ch.path == FC_GEMM_SKINNY) CHECK(ch.skinny.splits >= 1 && ch.skinny.M <= 64);
            for (int r = 0; r < nrules; r++) reached[r] |= !strcmp(rules[r].name, ch.rule);
        }
        CHECK_EQ_INT(gemms, 1);
        if (!st) fc_plan_release(&plan);
        fc_graph_free(g);
        if (cc->env) unsetenv(name);
    }
    /* The GPT-2 block at B = 1, T = 64: QKV, fc and down projection
     * skinny, the out projection with its attention inside (that attention
     * group gets no launch); with FUSEC_SKINNY=0, all four cuBLASLt's. */
    for (int off = 0; off < 2; off++) {
        if (off) setenv("FUSEC_SKINNY", "0", 1);
        fc_binding b[2] = {{"B", 1}, {"T", 64}};
        fc_graph *g = NULL;
        CHECK_EQ_INT(fc_parse_file(ctx, "examples/gpt2_block_bf16.ir", NULL, b, 2, &g), FC_OK);
        fc_plan plan;
        fc_status st = g ? fc_pipeline(g, NULL, &plan) : FC_ERR_INPUT;
        CHECK_EQ_INT(st, FC_OK);
        int n[FC_GEMM_UNSUPPORTED + 1] = {0};
        for (int i = 0; !st && i < plan.ngroups; i++) {
            plan.sm = 90;
            fc_gemm_choice ch;
            fc_cuda_gemm_choose(&plan, i, &ch);
            n[ch.path]++;
            if (ch.path == FC_GEMM_SKINNY_ATTENTION) {
                CHECK(ch.attention >= 0 && ch.attention < i);
                CHECK(plan.groups[ch.attention]->kind == FC_GROUP_ATTENTION);
                CHECK_EQ_INT(ch.fused.gemm_group, i);
            }
            for (int r = 0; r < nrules; r++) reached[r] |= !strcmp(rules[r].name, ch.rule);
        }
        CHECK_EQ_INT(n[FC_GEMM_SKINNY], off ? 0 : 3);
        CHECK_EQ_INT(n[FC_GEMM_SKINNY_ATTENTION], off ? 0 : 1);
        CHECK_EQ_INT(n[FC_GEMM_LIBRARY], off ? 4 : 0);
        if (!st) fc_plan_release(&plan);
        fc_graph_free(g);
        if (off) unsetenv("FUSEC_SKINNY");
    }
    /* A convolution the library runs (conv_cl, with a convolution
     * library): cuDNN, one library launch. */
    {
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.conv_library = true;
        fc_plan plan;
        fc_graph *g = NULL;
        fc_status st = fc_parse_file(ctx, "tests/passes/conv_library.ir", NULL, NULL, 0, &g);
        if (!st) st = fc_pipeline(g, &fo, &plan);
        CHECK_EQ_INT(st, FC_OK);
        int convs = 0;
        for (int i = 0; !st && i < plan.ngroups; i++) {
            fc_gemm_choice ch;
            fc_cuda_gemm_choose(&plan, i, &ch);
            for (int r = 0; r < nrules; r++) reached[r] |= !strcmp(rules[r].name, ch.rule);
            if (plan.groups[i]->kind == FC_GROUP_LIBRARY && plan.groups[i]->nodes[0]->op == FC_OP_CONV_CL) {
                CHECK_EQ_INT(ch.path, FC_GEMM_LIBRARY);
                convs++;
            }
        }
        CHECK_EQ_INT(convs, 2);
        if (!st) fc_plan_release(&plan);
        fc_graph_free(g);
    }
    for (int r = 0; r < nrules; r++) {
        if (rules[r].path == FC_GEMM_UNSUPPORTED) continue;
        if (!reached[r]) fprintf(stderr, "gemm choice: rule \"%s\" not reached\n", rules[r].name);
        CHECK(reached[r]);
    }
    fc_context_free(ctx);
}

/* fc_cublaslt_interleave_of: where it applies, and that its GEMMs (rows R
 * apart from row j, columns [c_j, c_j + N_j)) and the two edges (the
 * first and last g columns) write every element of the result, each GEMM's
 * first element and leading dimension 16-byte aligned and inside the row. */
static void test_interleave_plan(void) {
    struct {
        fc_dtype ab, out;
        int64_t M, N, K;
        bool bias, applies;
    } cases[] = {
        {FC_BF16, FC_BF16, 8192, 50257, 768, false, true},  {FC_BF16, FC_BF16, 1024, 1001, 64, false, true},
        {FC_F32, FC_F32, 1024, 1001, 64, false, true},      {FC_BF16, FC_BF16, 4096, 32001, 4096, false, true},
        {FC_F16, FC_F16, 2048, 30522, 64, false, true},     {FC_BF16, FC_F32, 1024, 50258, 64, false, true},
        {FC_BF16, FC_BF16, 8192, 50264, 768, false, false}, /* aligned already */
        {FC_BF16, FC_BF16, 1000, 50257, 768, false, false}, /* M not a multiple of 8 */
        {FC_BF16, FC_BF16, 512, 50257, 768, false, false},  /* 64 rows a GEMM: too few */
        {FC_BF16, FC_BF16, 8192, 50257, 768, true, false},  /* a bias */
        {FC_BF16, FC_BF16, 8192, 50257, 767, false, false}, /* rows of x unaligned */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fc_gemm_plan p = {.ab = cases[i].ab, .out = cases[i].out, .trans_b = true, .nweights = 1, .M = cases[i].M,
                          .N = cases[i].N, .K = cases[i].K, .lda = cases[i].K, .ldw = cases[i].K, .batch = 1,
                          .has_bias = cases[i].bias, .alpha = 1};
        fc_cublaslt_interleave il;
        bool got = fc_cublaslt_interleave_of(&p, 256, 256, 256, FC_CUBLASLT_WORKSPACE_BYTES, &il);
        CHECK(got == cases[i].applies);
        if (got != cases[i].applies) fprintf(stderr, "interleave case %zu: %d\n", i, got);
        if (!got) continue;
        CHECK(fc_cublaslt_interleave_of(&p, 256, 256, 258, FC_CUBLASLT_WORKSPACE_BYTES, &il) == false);
        fc_cublaslt_interleave_of(&p, 256, 256, 256, FC_CUBLASLT_WORKSPACE_BYTES, &il);
        const int64_t eo = (int64_t)fc_dtype_size(p.out), R = il.rows, N = p.N;
        CHECK(R >= 2 && R <= 16 && p.M % R == 0 && il.sub_m == p.M / R && il.edge * eo == 16);
        CHECK((R * N * eo) % 16 == 0);
        CHECK(il.scratch_bytes >= (size_t)(2 * p.M * il.edge * eo) && il.scratch_bytes % 256 == 0);
        /* Every column of row j's class: covered by its GEMM or an edge. */
        for (int64_t j = 0; j < R; j++) {
            CHECK(((j * N + il.col0[j]) * eo) % 16 == 0);
            CHECK(il.col0[j] >= 0 && il.col0[j] < il.edge && il.cols[j] % il.edge == 0 && il.cols[j] > 0);
            CHECK(il.col0[j] + il.cols[j] <= N && il.col0[j] + il.cols[j] >= N - il.edge);
        }
    }
}

int main(void) {
    test_interleave_plan();
    test_files();
    test_plans();
    test_describe();
    test_builder();
    test_gemm_plan();
    test_gemm_desc();
    test_alloc_failures();
    test_emulated();
    test_variant_tile_rule();
    test_variant_sources();
    test_gemm_choice();

    fc_context *ctx = fc_context_new();
    int skipped = 0;
    if (!fc_cuda_available(ctx)) {
        char why[512];
        snprintf(why, sizeof why, "%s", fc_last_error(ctx));
        test_runtime_without_device(ctx);
        printf("skipped: no CUDA device (%s)\n", why);
        skipped = 1;
    } else {
        gpu_env env = {.ctx = ctx};
        fc_status st = fc_cuda_device_open(ctx, 0, &env.dev);
        if (!st) st = fc_cublaslt_create(ctx, env.dev, NULL, &env.h);
        if (!st) st = fc_cuda_alloc(env.dev, FC_CUBLASLT_WORKSPACE_BYTES, &env.ws);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "GPU setup: %s\n", fc_last_error(ctx));
        else test_gpu(&env);
        if (env.dev) fc_cuda_free(env.dev, env.ws);
        fc_cublaslt_destroy(env.h);
        fc_cuda_device_close(env.dev);
    }
    fc_context_free(ctx);
    if (skipped) {
        printf("test_gemm: %d passed, %d failed, 1 skipped\n", check_passed, check_failed);
        return check_failed ? 1 : 0;
    }
    return check_report("test_gemm");
}

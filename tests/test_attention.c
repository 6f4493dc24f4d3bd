/* test_attention.c - attention fusion (passes/attention.c) and the
 * flash-attention kernels (codegen/cuda/attention.c); docs/ATTENTION.md.
 *
 * Without a GPU:
 *  1. Pass tests: every spelling of softmax(scale * Q K^T [+ mask]) V that
 *     the matcher knows becomes one attention node (with the expected
 *     causal flag, mask and scale), and every near-miss stays as it was.
 *     Each rewritten graph computes what the original computes under the
 *     reference interpreter, within the tolerance of the roundings the
 *     kernel skips. Two spellings are checked against their exact IR.
 *  2. The GPT-2 block: after the pass and the epilogue pass, one attention
 *     node and four gemms.
 *  3. Strided views: fc_attention_view and fc_attention_output_strides on
 *     the QKV split/reshape/permute chain, and the chains they refuse.
 *  4. Codegen: the kernel of every configuration below (bf16/f16 tensor-core
 *     kernel, f32/f64/wide-head general kernel, causal, masks, odd lengths,
 *     strided QKV, an output written through permute/reshape) compiles
 *     with NVRTC for sm_90 (and the tensor-core kernels for sm_90a); the
 *     same groups generated for sm 90 get the Hopper kernel (fc_attn_fa3)
 *     where both head dims are 49 to 128 (stored as 64 or 128), with its launch (384 or
 *     512 threads, dynamic shared memory), compiled for sm_90a (ptxas);
 *     groups it cannot read are refused.
 *  5. Allocation failures at every allocation of the pass.
 * With a GPU:
 *  6. Every configuration of 4 runs on the device, launched directly
 *     (runtime/cuda.h), against the reference interpreter within the
 *     dtype's tolerance: fc_attn_tc/fc_attn_rows, and fc_attn_fa3 where it
 *     applies ("gpu: <case> (wgmma): ok" lines). FUSEC_ATTN_BENCH=1 also
 *     times the benchmark shapes (B=8, H=16, S=2048, D=128/64) on
 *     both kernels; FUSEC_ATTN_BENCH_ONLY, _QUICK, _D, _VARIANTS and
 *     FUSEC_ATTN_TEST_OPTS (see bench() and test_kernels()) serve
 *     experiments; FUSEC_ATTN_DUMP=dir writes the kernels' sources;
 *     FUSEC_ATTN_CASES=D=80|D=96 runs only the cases so named.
 * Without a GPU, part 6 prints "skipped: no CUDA device (...)".
 */
#include "check.h"
#include "pass_file.h"
#include "splitmix.h"
#include "codegen/cuda/attention.h"
#include "fusec.h"
#include "ir.h"
#include "passes/attention.h"
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/replay.h"
#include "runtime/ref/interp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static uint64_t rng = 12345;
static double uniform(void) { return splitmix_uniform(&rng); } /* [-1, 1) */

/* Random data for parameter v: floats in [-amp, amp), bools true 3 times
 * in 4, integers in [0, 4). */
static void fill(fc_tensor *t, const fc_value *v, double amp) {
    t->dtype = v->dtype;
    t->rank = v->rank;
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= (t->shape[i] = v->dims[i]);
    t->data = calloc((size_t)(n ? n : 1), fc_dtype_size(v->dtype));
    for (int64_t i = 0; i < n; i++) {
        double x = uniform() * amp;
        switch (v->dtype) {
        case FC_F64: ((double *)t->data)[i] = x; break;
        case FC_F32: ((float *)t->data)[i] = (float)x; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)x); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)x); break;
        case FC_BOOL: ((uint8_t *)t->data)[i] = uniform() > -0.5; break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)((uniform() + 1) * 2); break;
        case FC_I64: ((int64_t *)t->data)[i] = (int64_t)((uniform() + 1) * 2); break;
        default: break;
        }
    }
}

static double element(const fc_tensor *t, int64_t i) { return fc_interp_load(t->dtype, t->data, i); }

/* |got - want| <= abs + rel |want| everywhere (NaN equals NaN). Prints the
 * first few misses. */
static bool allclose(const char *name, const fc_tensor *got, const fc_tensor *want, double rel, double abs_) {
    int64_t n = fc_tensor_numel(want), bad = 0;
    double worst = 0;
    if (fc_tensor_numel(got) != n || got->dtype != want->dtype) {
        fprintf(stderr, "%s: shape or dtype differs\n", name);
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        double g = element(got, i), w = element(want, i);
        if (isnan(g) && isnan(w)) continue;
        double e = fabs(g - w), tol = abs_ + rel * fabs(w);
        if (!(e <= tol)) {
            if (bad < 4) fprintf(stderr, "%s: element %lld: got %.8g, want %.8g\n", name, (long long)i, g, w);
            bad++;
        }
        if (e / tol > worst) worst = e / tol;
    }
    if (bad) fprintf(stderr, "%s: %lld of %lld elements outside the tolerance (rel %g, abs %g)\n", name, (long long)bad,
                     (long long)n, rel, abs_);
    return bad == 0;
}

static fc_graph *parse(fc_context *ctx, const char *name, const char *ir) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, name, ir, strlen(ir), NULL, NULL, 0, &g) != FC_OK) {
        fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
        return NULL;
    }
    return g;
}

/* The graph passes before the attention pass in fc_pipeline. */
static fc_status prefix(fc_graph *g) {
    fc_status st = fc_pass_canonicalize(g);
    if (!st) st = fc_pass_decompose(g);
    if (!st) st = fc_pass_canonicalize(g);
    return st;
}

static int count_op(const fc_graph *g, fc_op op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += !g->nodes[i]->dead && g->nodes[i]->op == op;
    return n;
}

static fc_node *find_op(const fc_graph *g, fc_op op) {
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == op) return g->nodes[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* 1. Pass tests                                                       */
/* ------------------------------------------------------------------ */

typedef struct pass_case {
    const char *name;
    const char *ir;
    int fused;     /* attention nodes expected after the pass (0: stays unfused) */
    int causal;    /* expected causal flag of the (first) attention */
    int mask;      /* expected: 0 no mask, 1 bool mask, 2 float mask */
    double scale;  /* expected scale attribute (0: not checked) */
} pass_case;

/* Shapes are small (13 is odd on purpose) so the reference runs fast. */
#define QKV(dt) "%q: " dt "[2, 2, 13, 8], %k: " dt "[2, 2, 13, 8], %v: " dt "[2, 2, 13, 8]"
#define CAUSAL_IOTA                                                 \
    "  %qi = iota(shape=[13, 13], axis=0, dtype=i32)\n"             \
    "  %kj = iota(shape=[13, 13], axis=1, dtype=i32)\n"
/* f32 attention of q, k and v widened from a lower dtype: %o. */
#define WIDENED_ATTENTION                          \
    "  %qf = cast(%q, to=f32)\n"                   \
    "  %kf = cast(%k, to=f32)\n"                   \
    "  %vf = cast(%v, to=f32)\n"                   \
    "  %kt = permute(%kf, perm=[0, 1, 3, 2])\n"    \
    "  %s0 = matmul(%qf, %kt)\n"                   \
    "  %s = mul(%s0, 0.125)\n"                     \
    "  %p = softmax(%s, axis=-1)\n"                \
    "  %o = matmul(%p, %vf)\n"

static const pass_case pass_cases[] = {
    {"composite softmax, scale on the scores by div, K by permute",
     "graph a(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = div(%s0, 2.8284271247461903)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 0, 0, 1.0 / 2.8284271247461903},
    {"softmax by hand (axis 3, keepdim), causal where(ge(i, j), s, -inf), scale on q",
     "graph b(" QKV("f32") ") {\n"
     "  %qs = mul(%q, 0.35355339059327373)\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%qs, %kt)\n" CAUSAL_IOTA
     "  %keep = ge(%qi, %kj)\n"
     "  %sm = where(%keep, %s, -inf)\n"
     "  %mx = reduce_max(%sm, axes=[3], keepdim=true)\n"
     "  %d = sub(%sm, %mx)\n"
     "  %e = exp(%d)\n"
     "  %z = reduce_sum(%e, axes=[3], keepdim=true)\n"
     "  %p = div(%e, %z)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 1, 0, 0.35355339059327373},
    {"K already [.., D, S], scaled; causal where(lt(i, j), -inf, s) from reshaped 1-D iotas",
     "graph c(%q: f32[2, 13, 8], %kt: f32[2, 8, 13], %v: f32[2, 13, 8]) {\n"
     "  %ks = mul(%kt, 0.5)\n"
     "  %s = matmul(%q, %ks)\n"
     "  %i = iota(shape=[13], axis=0, dtype=i32)\n"
     "  %qi = reshape(%i, shape=[13, 1])\n"
     "  %kj = reshape(%i, shape=[1, 13])\n"
     "  %drop = lt(%qi, %kj)\n"
     "  %sm = where(%drop, -inf, %s)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 1, 0, 0.5},
    {"bf16 with the softmax in f32 (cast in, cast out), scale on K before its permute",
     "graph d(" QKV("bf16") ") {\n"
     "  %ks = mul(%k, 0.25)\n"
     "  %kt = permute(%ks, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %sf = cast(%s, to=f32)\n"
     "  %p0 = softmax(%sf, axis=-1)\n"
     "  %p = cast(%p0, to=bf16)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 0, 0, 0.25},
    {"causal mask added as numbers: s + where(le(j, i), 0, -inf)",
     "graph e(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n" CAUSAL_IOTA
     "  %keep = le(%kj, %qi)\n"
     "  %zero = full(shape=[13, 13], value=0)\n"
     "  %ninf = full(shape=[13, 13], value=-inf)\n"
     "  %mask = where(%keep, %zero, %ninf)\n"
     "  %sm = add(%s, %mask)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 1, 0, 0.125},
    {"an additive mask tensor after the scale",
     "graph f(" QKV("f32") ", %m: f32[13, 13]) {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n"
     "  %sm = add(%m, %s)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 0, 2, 0.125},
    {"a bool mask tensor selecting keys, and causal too",
     "graph g(" QKV("bf16") ", %m: bool[2, 1, 1, 13]) {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %sm = where(%m, %s, -inf)\n" CAUSAL_IOTA
     "  %keep = ge(%qi, %kj)\n"
     "  %sc = where(%keep, %sm, -inf)\n"
     "  %p = softmax(%sc, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 1, 1, 1.0},
    {"masked_fill(pad == 0, -inf): the mask is pad != 0",
     "graph h(" QKV("f32") ", %pad: i32[2, 1, 1, 13]) {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n"
     "  %z = eq(%pad, 0)\n"
     "  %sm = where(%z, -inf, %s)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 0, 1, 0.125},
    {"autocast: f32 attention of widened bf16 tensors, cast back: bf16 attention",
     "graph i(" QKV("bf16") ") {\n"
     WIDENED_ATTENTION
     "  %y = cast(%o, to=bf16)\n"
     "  return %y\n}\n",
     1, 0, 0, 0.125},
    {"autocast with an f32 result: f32 attention of the casts",
     "graph j(" QKV("bf16") ") {\n"
     WIDENED_ATTENTION
     "  return %o\n}\n",
     1, 0, 0, 0.125},
    {"the attention op itself stays",
     "graph k(" QKV("bf16") ") {\n"
     "  %o = attention(%q, %k, %v, causal=true)\n"
     "  return %o\n}\n",
     1, 1, 0, 0},
    {"scale on both q and k",
     "graph l(" QKV("f32") ") {\n"
     "  %qs = mul(%q, 0.5)\n"
     "  %ks = mul(%k, 0.5)\n"
     "  %kt = permute(%ks, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%qs, %kt)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     1, 0, 0, 0.25},
    {"two layers: two attentions, the second reading the first",
     "graph m(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  %s1 = matmul(%o, %kt)\n"
     "  %t = mul(%s1, 0.125)\n"
     "  %p1 = softmax(%t, axis=-1)\n"
     "  %o1 = matmul(%p1, %v)\n"
     "  return %o1\n}\n",
     2, 0, 0, 0.125},
    /* Near-misses: each stays unfused. */
    {"near-miss: softmax over the queries (axis -2)",
     "graph n1(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n"
     "  %p = softmax(%s, axis=-2)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: a mask on the wrong dimension (keeps j >= i)",
     "graph n2(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s = mul(%s0, 0.125)\n" CAUSAL_IOTA
     "  %keep = ge(%kj, %qi)\n"
     "  %sm = where(%keep, %s, -inf)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: a mask over the batch index, not the keys",
     "graph n2b(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %hi = iota(shape=[2, 13, 13], axis=0, dtype=i32)\n"
     "  %kj = iota(shape=[2, 13, 13], axis=2, dtype=i32)\n"
     "  %keep = ge(%hi, %kj)\n"
     "  %sm = where(%keep, %s0, -inf)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: a scale after the softmax",
     "graph n3(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %p0 = softmax(%s, axis=-1)\n"
     "  %p = mul(%p0, 0.5)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: the scores are a graph result too",
     "graph n4(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o, %s\n}\n",
     0, 0, 0, 0},
    {"near-miss: the mask added before the scale ((s + m) * c scales the mask)",
     "graph n5(" QKV("f32") ", %m: f32[13, 13]) {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s0 = matmul(%q, %kt)\n"
     "  %s1 = add(%s0, %m)\n"
     "  %s = mul(%s1, 0.125)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: masked with -1e9, not -inf",
     "graph n6(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n" CAUSAL_IOTA
     "  %keep = ge(%qi, %kj)\n"
     "  %sm = where(%keep, %s, -1e9)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: bf16 scores for an f16 result (a coarser rounding than the result's)",
     "graph n7(%q: bf16[2, 13, 8], %k: bf16[2, 13, 8], %v: f16[2, 13, 8]) {\n"
     "  %kt = permute(%k, perm=[0, 2, 1])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %sh = cast(%s, to=f16)\n"
     "  %p = softmax(%sh, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: softmax without the max subtracted",
     "graph n8(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %e = exp(%s)\n"
     "  %z = reduce_sum(%e, axes=[-1], keepdim=true)\n"
     "  %p = div(%e, %z)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: a mask that widens the scores",
     "graph n9(%q: f32[13, 8], %k: f32[13, 8], %v: f32[13, 8], %m: f32[3, 13, 13]) {\n"
     "  %kt = permute(%k, perm=[1, 0])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %sm = add(%s, %m)\n"
     "  %p = softmax(%sm, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o\n}\n",
     0, 0, 0, 0},
    {"near-miss: the probabilities are a graph result too",
     "graph n10(" QKV("f32") ") {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
     "  %s = matmul(%q, %kt)\n"
     "  %p = softmax(%s, axis=-1)\n"
     "  %o = matmul(%p, %v)\n"
     "  return %o, %p\n}\n",
     0, 0, 0, 0},
};

/* The tolerance of "the rewritten graph computes what the original does":
 * the kernel skips the graph's roundings of the scores and probabilities,
 * which for 16-bit graphs is worth about two units of the result's dtype. */
static void equivalence_tolerance(fc_dtype dt, double *rel, double *abs_) {
    switch (dt) {
    case FC_BF16: *rel = 3.2e-2, *abs_ = 2e-2; break;
    case FC_F16: *rel = 4e-3, *abs_ = 2e-3; break;
    case FC_F64: *rel = 1e-9, *abs_ = 1e-12; break;
    default: *rel = 1e-4, *abs_ = 1e-5; break;
    }
}

static void check_equivalent(fc_context *ctx, const char *name, fc_graph *g0, fc_graph *g) {
    int nin = g0->nparams, nout = g0->noutputs;
    fc_tensor in[8] = {0}, a[4] = {0}, b[4] = {0};
    for (int i = 0; i < nin; i++) fill(&in[i], g0->params[i], 1.0);
    fc_status s0 = fc_run_reference(g0, in, nin, a, nout), s1 = fc_run_reference(g, in, nin, b, nout);
    CHECK_EQ_INT(s0, FC_OK);
    CHECK_EQ_INT(s1, FC_OK);
    if (s0 || s1) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    for (int o = 0; o < nout && !s0 && !s1; o++) {
        double rel, abs_;
        equivalence_tolerance(a[o].dtype, &rel, &abs_);
        CHECK(allclose(name, &b[o], &a[o], rel, abs_));
    }
    for (int i = 0; i < nin; i++) free(in[i].data);
    for (int o = 0; o < nout; o++) {
        fc_tensor_release(&a[o]);
        fc_tensor_release(&b[o]);
    }
}

static void test_pass_cases(fc_context *ctx) {
    for (size_t i = 0; i < sizeof pass_cases / sizeof *pass_cases; i++) {
        const pass_case *c = &pass_cases[i];
        fc_graph *g0 = parse(ctx, c->name, c->ir), *g = parse(ctx, c->name, c->ir);
        CHECK(g0 && g);
        if (!g0 || !g) {
            fc_graph_free(g0);
            fc_graph_free(g);
            continue;
        }
        int mm_before = count_op(g, FC_OP_MATMUL), att_before = count_op(g, FC_OP_ATTENTION);
        fc_status st = prefix(g);
        if (!st) st = fc_pass_attention(g);
        CHECK_EQ_INT(st, FC_OK);
        CHECK_EQ_INT(fc_verify(g), FC_OK);
        int att = count_op(g, FC_OP_ATTENTION), mm = count_op(g, FC_OP_MATMUL);
        /* Each attention made replaces two matmuls. */
        bool ok = att == c->fused && mm == mm_before - 2 * (att - att_before);
        CHECK(ok);
        fc_node *n = find_op(g, FC_OP_ATTENTION);
        if (c->fused && n) {
            CHECK_EQ_INT(n->a.causal, c->causal);
            int mask = n->nin < 4 ? 0 : n->in[3]->dtype == FC_BOOL ? 1 : 2;
            CHECK_EQ_INT(mask, c->mask);
            /* The graph's constant as its op uses it: rounded to f32 or bf16. */
            if (c->scale) CHECK_NEAR(n->a.scale, c->scale, (n->out[0]->dtype == FC_BF16 ? 4e-3 : 1e-7) * c->scale);
        }
        if (!ok || (c->fused && !n)) {
            char *t = fc_print(g);
            fprintf(stderr, "%s: %d attention, %d matmul after the pass:\n%s\n", c->name, att, mm, t);
            fc_free(t);
        }
        /* A second run finds nothing more to do. */
        char *t1 = fc_print(g);
        CHECK_EQ_INT(fc_pass_attention(g), FC_OK);
        char *t2 = fc_print(g);
        CHECK_STR(t2, t1);
        fc_free(t1);
        fc_free(t2);
        check_equivalent(ctx, c->name, g0, g);
        fc_graph_free(g0);
        fc_graph_free(g);
    }
}

/* Exact IR after the pass, for the two spellings that matter most. */
static void test_exact_ir(fc_context *ctx) {
    static const char gpt2[] =
        "graph attn(%qkv: bf16[2, 16, 96]) {\n"
        "  %q0, %k0, %v0 = split(%qkv, axis=-1, sizes=[32, 32, 32])\n"
        "  %q1 = reshape(%q0, shape=[2, 16, 4, 8])\n"
        "  %q = permute(%q1, perm=[0, 2, 1, 3])\n"
        "  %k1 = reshape(%k0, shape=[2, 16, 4, 8])\n"
        "  %kt = permute(%k1, perm=[0, 2, 3, 1])\n"
        "  %v1 = reshape(%v0, shape=[2, 16, 4, 8])\n"
        "  %v = permute(%v1, perm=[0, 2, 1, 3])\n"
        "  %s0 = matmul(%q, %kt)\n"
        "  %s = mul(%s0, 0.35355339059327373)\n"
        "  %qi = iota(shape=[16, 16], axis=0, dtype=i32)\n"
        "  %kj = iota(shape=[16, 16], axis=1, dtype=i32)\n"
        "  %keep = ge(%qi, %kj)\n"
        "  %sm = where(%keep, %s, -inf)\n"
        "  %p = softmax(%sm, axis=-1)\n"
        "  %a = matmul(%p, %v)\n"
        "  %a1 = permute(%a, perm=[0, 2, 1, 3])\n"
        "  %a2 = reshape(%a1, shape=[2, 16, 32])\n"
        "  return %a2\n"
        "}\n";
    static const char gpt2_expect[] =
        "graph attn(%qkv: bf16[2, 16, 96]) {\n"
        "  %v0 = slice(%qkv, axis=2, end=32) : bf16[2, 16, 32]\n"
        "  %v2 = slice(%qkv, axis=2, start=32, end=64) : bf16[2, 16, 32]\n"
        "  %v3 = slice(%qkv, axis=2, start=64, end=96) : bf16[2, 16, 32]\n"
        "  %q1 = reshape(%v0, shape=[2, 16, 4, 8]) : bf16[2, 16, 4, 8]\n"
        "  %q = permute(%q1, perm=[0, 2, 1, 3]) : bf16[2, 4, 16, 8]\n"
        "  %k1 = reshape(%v2, shape=[2, 16, 4, 8]) : bf16[2, 16, 4, 8]\n"
        "  %v1 = reshape(%v3, shape=[2, 16, 4, 8]) : bf16[2, 16, 4, 8]\n"
        "  %v = permute(%v1, perm=[0, 2, 1, 3]) : bf16[2, 4, 16, 8]\n"
        "  %v4 = permute(%k1, perm=[0, 2, 1, 3]) : bf16[2, 4, 16, 8]\n"
        "  %a = attention(%q, %v4, %v, causal=true, scale=0.353515625) : bf16[2, 4, 16, 8]\n"
        "  %a1 = permute(%a, perm=[0, 2, 1, 3]) : bf16[2, 16, 4, 8]\n"
        "  %a2 = reshape(%a1, shape=[2, 16, 32]) : bf16[2, 16, 32]\n"
        "  return %a2\n"
        "}\n";
    static const char autocast[] =
        "graph ac(%q: bf16[3, 10, 16], %k: bf16[3, 10, 16], %v: bf16[3, 10, 16], %m: f32[10, 10]) {\n"
        "  %qf = cast(%q, to=f32)\n"
        "  %kf = cast(%k, to=f32)\n"
        "  %vf = cast(%v, to=f32)\n"
        "  %kt = permute(%kf, perm=[0, 2, 1])\n"
        "  %s0 = matmul(%qf, %kt)\n"
        "  %s = mul(%s0, 0.25)\n"
        "  %sm = add(%s, %m)\n"
        "  %p = softmax(%sm, axis=-1)\n"
        "  %o = matmul(%p, %vf)\n"
        "  %y = cast(%o, to=bf16)\n"
        "  return %y\n"
        "}\n";
    static const char autocast_expect[] =
        "graph ac(%q: bf16[3, 10, 16], %k: bf16[3, 10, 16], %v: bf16[3, 10, 16], %m: f32[10, 10]) {\n"
        "  %y = attention(%q, %k, %v, %m, scale=0.25) : bf16[3, 10, 16]\n"
        "  return %y\n"
        "}\n";
    const char *in[2] = {gpt2, autocast}, *want[2] = {gpt2_expect, autocast_expect};
    for (int i = 0; i < 2; i++) {
        fc_graph *g = parse(ctx, "exact", in[i]);
        CHECK(g != NULL);
        if (!g) continue;
        CHECK_EQ_INT(prefix(g), FC_OK);
        CHECK_EQ_INT(fc_pass_attention(g), FC_OK);
        char *t = fc_print(g);
        CHECK_STR(t, want[i]);
        fc_free(t);
        fc_graph_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* 2. The GPT-2 block                                                  */
/* ------------------------------------------------------------------ */

static void test_gpt2_block(fc_context *ctx) {
    const char *src = getenv("FUSEC_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/gpt2_block_bf16.ir", src && *src ? src : ".");
    fc_binding binds[2] = {{"B", 8}, {"T", 1024}};
    fc_graph *g = NULL;
    fc_status st = fc_parse_file(ctx, path, NULL, binds, 2, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
        return;
    }
    st = prefix(g);
    if (!st) st = fc_pass_attention(g);
    if (!st) st = fc_pass_epilogue(g);
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(count_op(g, FC_OP_ATTENTION), 1);
    CHECK_EQ_INT(count_op(g, FC_OP_MATMUL), 0);
    CHECK_EQ_INT(count_op(g, FC_OP_GEMM), 4);
    fc_node *n = find_op(g, FC_OP_ATTENTION);
    if (n) {
        CHECK(n->a.causal);
        CHECK_EQ_INT(n->nin, 3);
        CHECK_NEAR(n->a.scale, 0.125, 0);
    }
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* 3. Strided views                                                    */
/* ------------------------------------------------------------------ */

static bool is_param(const fc_value *v, void *arg) {
    (void)arg;
    return v->param_index >= 0;
}

static void test_views(fc_context *ctx) {
    static const char ir[] =
        "graph v(%qkv: bf16[2, 16, 96], %x: f32[4, 6]) {\n"
        "  %q0, %k0, %v0 = split(%qkv, axis=-1, sizes=[32, 32, 32])\n"
        "  %k1 = reshape(%k0, shape=[2, 16, 4, 8])\n"
        "  %k = permute(%k1, perm=[0, 2, 1, 3])\n"
        "  %s = slice(%k, axis=2, start=1, step=3)\n"
        "  %e = expand(%q0, shape=[3, 2, 16, 32])\n"
        "  %t = permute(%x, perm=[1, 0])\n"
        "  %bad = reshape(%t, shape=[24])\n"
        "  %ok = reshape(%x, shape=[2, 12])\n"
        "  %o1 = permute(%k, perm=[0, 2, 1, 3])\n"
        "  %o2 = reshape(%o1, shape=[2, 16, 32])\n"
        "  return %s, %e, %bad, %ok, %o2\n"
        "}\n";
    fc_graph *g = parse(ctx, "views", ir);
    CHECK(g != NULL);
    if (!g) return;
    fc_strided_view w;
    /* k[b, h, s, d] = qkv[b, s, 32 + 8 h + d] */
    const fc_value *k = g->outputs[4]->def->in[0]->def->in[0];
    CHECK(fc_attention_view(k, is_param, NULL, &w));
    CHECK(w.root == g->params[0]);
    CHECK_EQ_INT(w.offset, 32);
    CHECK(w.stride[0] == 1536 && w.stride[1] == 8 && w.stride[2] == 96 && w.stride[3] == 1);
    /* A slice with a step: offset 1 row, stride 3 rows. */
    CHECK(fc_attention_view(g->outputs[0], is_param, NULL, &w));
    CHECK_EQ_INT(w.offset, 32 + 96);
    CHECK_EQ_INT(w.stride[2], 288);
    /* expand: a new leading dim of stride 0. */
    CHECK(fc_attention_view(g->outputs[1], is_param, NULL, &w));
    CHECK(w.stride[0] == 0 && w.stride[1] == 1536 && w.stride[2] == 96 && w.stride[3] == 1);
    /* Merging dims a permute separated: no strides. */
    CHECK(!fc_attention_view(g->outputs[2], is_param, NULL, &w));
    CHECK(fc_attention_view(g->outputs[3], is_param, NULL, &w));
    CHECK(w.stride[0] == 12 && w.stride[1] == 1);
    /* Output strides: k [2, 4, 16, 8] written into o2 [2, 16, 32]. */
    int64_t os[FC_MAX_RANK];
    CHECK(fc_attention_output_strides(k, g->outputs[4], os));
    CHECK(os[0] == 512 && os[1] == 8 && os[2] == 32 && os[3] == 1);
    CHECK(fc_attention_output_strides(g->outputs[4], g->outputs[4], os));
    CHECK(os[0] == 512 && os[1] == 32 && os[2] == 1);
    CHECK(!fc_attention_output_strides(k, g->outputs[0], os)); /* a slice is not bijective */
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* 4. Codegen                                                          */
/* ------------------------------------------------------------------ */

/* An attention group as fusion makes it: the attention node and the
 * permute/reshape chain from its result to the graph's one output; the
 * graph's parameters are the group's inputs. */
typedef struct agroup {
    fc_graph *g;
    fc_node *nodes[16];
    fc_value *out;
    fc_group gr;
    fc_plan plan;
} agroup;

static bool make_group(fc_context *ctx, const char *name, const char *ir, bool run_pass, agroup *a) {
    memset(a, 0, sizeof *a);
    if (!(a->g = parse(ctx, name, ir))) return false;
    if (run_pass && (prefix(a->g) || fc_pass_attention(a->g))) {
        fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
        return false;
    }
    fc_node *n = find_op(a->g, FC_OP_ATTENTION);
    if (!n) {
        fprintf(stderr, "%s: no attention node\n", name);
        return false;
    }
    a->out = a->g->outputs[0];
    int nn = 0;
    for (fc_value *v = a->out; v != n->out[0] && nn < 15; v = v->def->in[0]) a->nodes[nn++] = v->def;
    a->nodes[nn++] = n;
    for (int i = 0; i < nn / 2; i++) {
        fc_node *t = a->nodes[i];
        a->nodes[i] = a->nodes[nn - 1 - i];
        a->nodes[nn - 1 - i] = t;
    }
    a->gr.kind = FC_GROUP_LIBRARY;
    a->gr.nodes = a->nodes;
    a->gr.nnodes = nn;
    a->gr.inputs = a->g->params;
    a->gr.ninputs = a->g->nparams;
    a->gr.outputs = &a->out;
    a->gr.noutputs = 1;
    a->plan.g = a->g;
    return true;
}

typedef struct kcase {
    const char *name;
    const char *ir;
    bool pass; /* run the attention pass first (written-out pattern) */
    bool mma;  /* expected kernel */
} kcase;

#define ATT1(dt, b, sq, sk, d, dv, attrs)                                                          \
    "graph t(%q: " dt "[" b ", " sq ", " d "], %k: " dt "[" b ", " sk ", " d "], %v: " dt "[" b ", " \
    sk ", " dv "]) {\n  %o = attention(%q, %k, %v" attrs ")\n  return %o\n}\n"

static const kcase kcases[] = {
    {"bf16 causal D=64 S=127", ATT1("bf16", "2, 3", "127", "127", "64", "64", ", causal=true"), false, true},
    {"bf16 D=128 S=200", ATT1("bf16", "1, 2", "200", "200", "128", "128", ""), false, true},
    {"f16 causal D=128 S=65", ATT1("f16", "2, 2", "65", "65", "128", "128", ", causal=true"), false, true},
    {"f16 D=64 S=1000", ATT1("f16", "1, 3", "1000", "1000", "64", "64", ""), false, true},
    {"bf16 causal D=128 S=1537", ATT1("bf16", "1, 1", "1537", "1537", "128", "128", ", causal=true"), false, true},
    {"bf16 causal S=1", ATT1("bf16", "3", "1", "1", "64", "64", ", causal=true"), false, true},
    {"bf16 causal Sq < Sk", ATT1("bf16", "2, 2", "33", "300", "64", "64", ", causal=true"), false, true},
    {"f16 causal Sq > Sk", ATT1("f16", "1, 2", "300", "33", "128", "128", ", causal=true"), false, true},
    {"bf16 D=80 Dv=32 scale", ATT1("bf16", "2", "100", "90", "80", "32", ", scale=0.3"), false, true},
    {"bf16 D=8", ATT1("bf16", "2", "129", "129", "8", "8", ", causal=true"), false, true},
    {"bf16 causal D=128 Dv=64 (8 warps)", ATT1("bf16", "2, 2", "130", "130", "128", "64", ", causal=true"), false, true},
    {"bf16 D=64 Dv=128 S=700", ATT1("bf16", "2", "700", "700", "64", "128", ""), false, true},
    {"f16 causal D=128 Sq=1000 Sk=1300", ATT1("f16", "1, 2", "1000", "1300", "128", "128", ", causal=true"), false, true},
    {"bf16 D=120 (padded to 128) S=333", ATT1("bf16", "3", "333", "333", "120", "120", ""), false, true},
    {"bf16 D=256 (general kernel)", ATT1("bf16", "1, 2", "70", "70", "256", "256", ", causal=true"), false, false},
    {"f32 causal D=64", ATT1("f32", "2, 2", "77", "77", "64", "64", ", causal=true"), false, false},
    {"f64 D=33", ATT1("f64", "3", "20", "37", "33", "70", ""), false, false},
    {"bf16 GQA broadcast k/v",
     "graph t(%q: bf16[2, 4, 65, 64], %k: bf16[2, 1, 65, 64], %v: bf16[2, 1, 65, 64]) {\n"
     "  %o = attention(%q, %k, %v, causal=true)\n  return %o\n}\n",
     false, true},
    {"bf16 bool mask [Sq, Sk] and causal",
     "graph t(%q: bf16[2, 2, 70, 64], %k: bf16[2, 2, 70, 64], %v: bf16[2, 2, 70, 64], %m: bool[70, 70]) {\n"
     "  %o = attention(%q, %k, %v, %m, causal=true)\n  return %o\n}\n",
     false, true},
    {"f16 float key-padding mask [B, 1, 1, Sk]",
     "graph t(%q: f16[2, 2, 65, 128], %k: f16[2, 2, 77, 128], %v: f16[2, 2, 77, 128], %m: f32[2, 1, 1, 77]) {\n"
     "  %o = attention(%q, %k, %v, %m, scale=0.1)\n  return %o\n}\n",
     false, true},
    {"f16 D=96 bool mask per batch (8 warps)",
     "graph t(%q: f16[2, 150, 96], %k: f16[2, 150, 96], %v: f16[2, 150, 96], %m: bool[2, 150, 150]) {\n"
     "  %o = attention(%q, %k, %v, %m)\n  return %o\n}\n",
     false, true},
    {"bf16 rows with no key (NaN)",
     "graph t(%q: bf16[1, 70, 64], %k: bf16[1, 70, 64], %v: bf16[1, 70, 64], %m: bool[70, 1]) {\n"
     "  %o = attention(%q, %k, %v, %m)\n  return %o\n}\n",
     false, true},
    {"f32 float mask",
     "graph t(%q: f32[2, 45, 64], %k: f32[2, 45, 64], %v: f32[2, 45, 48], %m: f32[45, 45]) {\n"
     "  %o = attention(%q, %k, %v, %m, causal=true)\n  return %o\n}\n",
     false, false},
    {"bf16 k stored [B, D, S], v a strided slice",
     "graph t(%q: bf16[2, 66, 64], %kt: bf16[2, 64, 66], %vv: bf16[2, 66, 128]) {\n"
     "  %k = permute(%kt, perm=[0, 2, 1])\n  %v = slice(%vv, axis=2, start=1, step=2)\n"
     "  %o = attention(%q, %k, %v)\n  return %o\n}\n",
     false, true},
    {"written out: fused QKV read in place, result written as [B, S, H*D]",
     "graph t(%qkv: bf16[2, 257, 768]) {\n"
     "  %q0, %k0, %v0 = split(%qkv, axis=-1, sizes=[256, 256, 256])\n"
     "  %q1 = reshape(%q0, shape=[2, 257, 4, 64])\n  %q = permute(%q1, perm=[0, 2, 1, 3])\n"
     "  %k1 = reshape(%k0, shape=[2, 257, 4, 64])\n  %kt = permute(%k1, perm=[0, 2, 3, 1])\n"
     "  %v1 = reshape(%v0, shape=[2, 257, 4, 64])\n  %v = permute(%v1, perm=[0, 2, 1, 3])\n"
     "  %s0 = matmul(%q, %kt)\n  %s = mul(%s0, 0.125)\n"
     "  %qi = iota(shape=[257, 257], axis=0, dtype=i32)\n  %kj = iota(shape=[257, 257], axis=1, dtype=i32)\n"
     "  %keep = ge(%qi, %kj)\n  %sm = where(%keep, %s, -inf)\n  %p = softmax(%sm, axis=-1)\n"
     "  %a = matmul(%p, %v)\n  %a1 = permute(%a, perm=[0, 2, 1, 3])\n  %a2 = reshape(%a1, shape=[2, 257, 256])\n"
     "  return %a2\n}\n",
     true, true},
    {"written out: f16, D=128, non-causal, softmax in f32",
     "graph t(%q: f16[1, 2, 190, 128], %k: f16[1, 2, 190, 128], %v: f16[1, 2, 190, 128]) {\n"
     "  %kt = permute(%k, perm=[0, 1, 3, 2])\n  %s0 = matmul(%q, %kt)\n  %s = mul(%s0, 0.08838834764831845)\n"
     "  %sf = cast(%s, to=f32)\n  %p0 = softmax(%sf, axis=-1)\n  %p = cast(%p0, to=f16)\n"
     "  %o = matmul(%p, %v)\n  return %o\n}\n",
     true, true},
    /* Head dims that fc_attn_fa3 stores as 128 (fa3_head_dims in
     * codegen/cuda/attention.c): Phi-2's 80, 96, and an odd pair. */
    {"bf16 causal D=80 S=300", ATT1("bf16", "1, 4", "300", "300", "80", "80", ", causal=true"), false, true},
    {"f16 D=96 Sq < Sk", ATT1("f16", "2, 2", "190", "260", "96", "96", ""), false, true},
    {"bf16 D=72 Dv=112", ATT1("bf16", "3", "100", "150", "72", "112", ""), false, true},
    {"written out: fused QKV at D=80 read in place, result written as [B, S, H*D]",
     "graph t(%qkv: bf16[2, 129, 480]) {\n"
     "  %q0, %k0, %v0 = split(%qkv, axis=-1, sizes=[160, 160, 160])\n"
     "  %q1 = reshape(%q0, shape=[2, 129, 2, 80])\n  %q = permute(%q1, perm=[0, 2, 1, 3])\n"
     "  %k1 = reshape(%k0, shape=[2, 129, 2, 80])\n  %kt = permute(%k1, perm=[0, 2, 3, 1])\n"
     "  %v1 = reshape(%v0, shape=[2, 129, 2, 80])\n  %v = permute(%v1, perm=[0, 2, 1, 3])\n"
     "  %s0 = matmul(%q, %kt)\n  %s = mul(%s0, 0.11180339887498948)\n"
     "  %qi = iota(shape=[129, 129], axis=0, dtype=i32)\n  %kj = iota(shape=[129, 129], axis=1, dtype=i32)\n"
     "  %keep = ge(%qi, %kj)\n  %sm = where(%keep, %s, -inf)\n  %p = softmax(%sm, axis=-1)\n"
     "  %a = matmul(%p, %v)\n  %a1 = permute(%a, perm=[0, 2, 1, 3])\n  %a2 = reshape(%a1, shape=[2, 129, 160])\n"
     "  return %a2\n}\n",
     true, true},
};

/* An attention group of bf16 q [b, h, sq, d], k and v [b, h, sk, d], its
 * plan for sm 90 (fc_attn_fa3 where the head dims allow). False (a failed
 * check, nothing to free) if it cannot be made. */
static bool fa3_group(fc_context *ctx, const char *name, int b, int h, int sq, int sk, int d, bool causal, agroup *a) {
    char ir[512];
    snprintf(ir, sizeof ir,
             "graph t(%%q: bf16[%d, %d, %d, %d], %%k: bf16[%d, %d, %d, %d], %%v: bf16[%d, %d, %d, %d]) {\n"
             "  %%o = attention(%%q, %%k, %%v, causal=%s)\n  return %%o\n}\n",
             b, h, sq, d, b, h, sk, d, b, h, sk, d, causal ? "true" : "false");
    if (!make_group(ctx, name, ir, false, a)) {
        CHECK(false);
        fc_graph_free(a->g);
        return false;
    }
    a->plan.sm = 90;
    return true;
}

/* fc_attn_fa3's key tile: 64 where all the keys fit in 64 (a 128-key tile
 * would be half masked; docs/ATTENTION.md), else 128. No GPU: the source's
 * configuration line. */
static void test_key_tile(fc_context *ctx) {
    CHECK(fc_cuda_attention_hopper(90) && !fc_cuda_attention_hopper(0) && !fc_cuda_attention_hopper(100));
    static const struct {
        int sk;
        const char *want;
    } cases[] = {{8, "BN = 64, NC"}, {64, "BN = 64, NC"}, {65, "BN = 128, NC"}, {256, "BN = 128, NC"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        agroup a;
        if (!fa3_group(ctx, "key_tile", 1, 12, 64, cases[i].sk, 64, false, &a)) continue;
        char *src = NULL;
        fc_launch l = {0};
        CHECK_EQ_INT(fc_cuda_emit_attention(&a.plan, &a.gr, "fc_key_tile", &src, &l), FC_OK);
        const bool ok = src && strstr(src, cases[i].want);
        if (!ok) fprintf(stderr, "key tile: %d keys: want %s\n", cases[i].sk, cases[i].want);
        CHECK(ok);
        free(src);
        fc_graph_free(a.g);
    }
}

/* fc_attn_fa3's other shape rules, as the launch and the config line show
 * them (no GPU): a persistent grid (min(SMs, tiles) blocks) except for
 * causal attention with two consumer warpgroups (head dims above 64), which
 * gets one block per work tile; L2 sections of batch elements whose K and V
 * fit in 32 MiB with two consumers, one section of all with three. The
 * environment variables that once chose these for measuring are not read:
 * set, they change nothing. */
static void test_shape_rules(fc_context *ctx) {
    static const struct {
        int d;
        bool causal;
        long long grid, hg; /* B=4, H=16, S=2048: K and V 1 MiB a head at D = 128 */
        int block;
    } cases[] = {{128, true, 1024, 32, 384}, {128, false, 3, 32, 384}, {64, true, 3, 64, 512}, {64, false, 3, 64, 512}};
    static const char *const gone[] = {"FUSEC_ATTN_TMA", "FUSEC_ATTN_WGMMA", "FUSEC_ATTN_PERSIST", "FUSEC_ATTN_BN",
                                       "FUSEC_ATTN_L2SECT"};
    static const char *const set[] = {"0", "0", "1", "256", "1"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        agroup a;
        if (!fa3_group(ctx, "shape_rules", 4, 16, 2048, 2048, cases[i].d, cases[i].causal, &a)) continue;
        a.plan.sm_count = 3;
        char *src = NULL, *src_env = NULL;
        fc_launch l = {0}, le = {0};
        CHECK_EQ_INT(fc_cuda_emit_attention(&a.plan, &a.gr, "fc_rules", &src, &l), FC_OK);
        for (size_t e = 0; e < sizeof gone / sizeof *gone; e++) setenv(gone[e], set[e], 1);
        CHECK_EQ_INT(fc_cuda_emit_attention(&a.plan, &a.gr, "fc_rules", &src_env, &le), FC_OK);
        for (size_t e = 0; e < sizeof gone / sizeof *gone; e++) unsetenv(gone[e]);
        char hg[64];
        snprintf(hg, sizeof hg, "NB = 64, HG = %lld;", cases[i].hg);
        CHECK(src && strstr(src, "fc_attn_fa3<") && strstr(src, hg) && strstr(src, "BN = 128, NC"));
        CHECK_EQ_INT((long long)l.grid[0], cases[i].grid);
        CHECK_EQ_INT((int)l.block[0], cases[i].block);
        CHECK_EQ_INT(l.ntmaps, 3);
        CHECK(src && src_env && strcmp(src, src_env) == 0);
        CHECK(l.grid[0] == le.grid[0] && l.block[0] == le.block[0] && l.smem == le.smem && l.ntmaps == le.ntmaps);
        if (src && !strstr(src, hg)) fprintf(stderr, "shape rules: D=%d%s: want %s\n", cases[i].d, cases[i].causal ? " causal" : "", hg);
        free(src);
        free(src_env);
        fc_graph_free(a.g);
    }
}

static void test_codegen_refusals(fc_context *ctx) {
    /* q computed, not a view of an input: codegen refuses (fusion must
     * store it); an output chain through an elementwise op likewise. */
    static const char ir1[] = "graph r(%q: bf16[1, 16, 64], %k: bf16[1, 16, 64], %v: bf16[1, 16, 64]) {\n"
                              "  %e = exp(%q)\n  %o = attention(%e, %k, %v)\n  return %o\n}\n";
    static const char ir2[] = "graph r(%q: bf16[1, 16, 64], %k: bf16[1, 16, 64], %v: bf16[1, 16, 64]) {\n"
                              "  %o = attention(%q, %k, %v)\n  %n = neg(%o)\n  return %n\n}\n";
    const char *irs[2] = {ir1, ir2};
    for (int i = 0; i < 2; i++) {
        agroup a;
        bool ok = make_group(ctx, "refusal", irs[i], false, &a);
        CHECK(ok);
        if (ok) {
            char *src = NULL;
            fc_launch l = {0};
            CHECK_EQ_INT(fc_cuda_emit_attention(&a.plan, &a.gr, "fc_refused", &src, &l), FC_ERR_UNSUPPORTED);
            CHECK(src == NULL);
            CHECK(strstr(fc_last_error(ctx), "attention codegen") != NULL);
        }
        fc_graph_free(a.g);
    }
}

/* ------------------------------------------------------------------ */
/* 6. On the GPU                                                       */
/* ------------------------------------------------------------------ */

typedef struct gpu {
    fc_cuda_device *d;
    bool ok;
} gpu;

/* Launch the kernel of group a on the device with inputs `in`; the output
 * goes to `got` (allocated here). ms: the mean time of `iters` launches
 * after one warm-up, when iters > 0. */
static fc_status run_on_gpu(fc_context *ctx, gpu *G, agroup *a, const char *src, const fc_launch *l, const fc_tensor *in,
                            fc_tensor *got, int iters, double *ms, const char *const *extra, int nextra) {
    fc_bytes cubin = {0};
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    CUdeviceptr ptr[9] = {0};
    CUtensorMap maps[FC_LAUNCH_MAX_TMAPS];
    fc_status st = fc_nvrtc_compile(ctx, src, "attention.cu", G->d->info.cc_major, G->d->info.cc_minor, extra, nextra, &cubin);
    if (!st) st = fc_cuda_module_load(G->d, cubin.data, cubin.size, &mod);
    if (!st) st = fc_cuda_module_function(G->d, mod, l->name, &fn);
    if (!st && l->smem > 48 * 1024) st = fc_cuda_function_set_max_shared(G->d, fn, (int)l->smem);
    int nin = a->gr.ninputs;
    void *args[9 + FC_LAUNCH_MAX_TMAPS];
    for (int i = 0; !st && i < nin; i++) {
        size_t bytes = (size_t)fc_tensor_numel(&in[i]) * fc_dtype_size(in[i].dtype);
        st = fc_cuda_alloc(G->d, bytes ? bytes : 1, &ptr[i]);
        if (!st) st = fc_cuda_upload(G->d, ptr[i], in[i].data, bytes);
        args[i] = &ptr[i];
    }
    const fc_value *w = a->out;
    got->dtype = w->dtype;
    got->rank = w->rank;
    int64_t n = 1;
    for (int i = 0; i < w->rank; i++) n *= (got->shape[i] = w->dims[i]);
    size_t obytes = (size_t)n * fc_dtype_size(w->dtype);
    got->data = malloc(obytes ? obytes : 1);
    if (!st) st = fc_cuda_alloc(G->d, obytes ? obytes : 1, &ptr[nin]);
    if (!st) st = fc_cuda_memset_async(G->d, ptr[nin], 0xff, obytes, NULL); /* NaN: unwritten elements show */
    args[nin] = &ptr[nin];
    /* The tensor maps after the pointers, as fc_launch_args makes them. */
    for (int t = 0; !st && t < l->ntmaps; t++) {
        st = fc_launch_tmap_encode(G->d, l, t, ptr[l->tmaps[t].arg], &maps[t]);
        args[nin + 1 + t] = &maps[t];
    }
    fc_cuda_launch_cfg cfg = {{l->grid[0], l->grid[1], l->grid[2]}, {l->block[0], l->block[1], l->block[2]}, l->smem, NULL, false};
    if (!st) st = fc_cuda_launch(G->d, fn, &cfg, args);
    if (!st) st = fc_cuda_device_sync(G->d);
    if (!st) st = fc_cuda_download(G->d, got->data, ptr[nin], obytes);
    if (!st && iters > 0) {
        fc_cuda_timer t = {0};
        float total = 0;
        st = fc_cuda_timer_create(G->d, &t);
        if (!st) st = fc_cuda_timer_start(G->d, &t, NULL);
        for (int i = 0; !st && i < iters; i++) st = fc_cuda_launch(G->d, fn, &cfg, args);
        if (!st) st = fc_cuda_timer_stop(G->d, &t, NULL, &total);
        fc_cuda_timer_destroy(G->d, &t);
        *ms = total / iters;
    }
    for (int i = 0; i <= nin; i++) fc_cuda_free(G->d, ptr[i]);
    fc_cuda_module_unload(G->d, mod);
    fc_bytes_free(&cubin);
    return st;
}

static const char *const sm90a[] = {"--gpu-architecture=sm_90a"};

/* The Hopper kernel (fc_attn_fa3) is generated for plans with sm 90:
 * does this kcase get it? */
static bool expect_fa3(const kcase *c, const agroup *a) {
    const fc_node *n = a->gr.nodes[0];
    const fc_value *q = n->in[0], *o = n->out[0];
    int64_t d = (q->dims[q->rank - 1] + 15) / 16 * 16, dv = (o->dims[o->rank - 1] + 15) / 16 * 16;
    return c->mma && fc_cuda_attention_hopper(90) && d > 48 && dv > 48; /* stored as 64 or 128 */
}

/* fc_attn_fa3's tensor maps (TMA loads) where the codegen must make them:
 * Q, K and V dense, or views whose head dim is contiguous with strides of
 * whole 16 bytes (the fused QKV split, GQA's broadcast heads: left out of
 * the map); not a K stored [B, D, S] nor a V sliced with step 2 (their
 * head dim is strided: cp.async or element loads), nor rows of 1 (S = 1).
 * kmap_rank: the rank of the second map (K's where Q, K, V all have one). */
static const struct {
    const char *name;
    int ntmaps, kmap_rank;
} tma_expect[] = {
    {"bf16 D=128 S=200", 3, 3},
    {"bf16 causal S=1", 0, 0},
    {"bf16 GQA broadcast k/v", 3, 3}, /* k [2, 1, 65, 64]: B only */
    {"bf16 k stored [B, D, S], v a strided slice", 1, 0},
    {"written out: fused QKV read in place, result written as [B, S, H*D]", 3, 4}, /* B, H apart */
    {"bf16 D=120 (padded to 128) S=333", 3, 3},
    {"bf16 causal D=80 S=300", 3, 3},
    {"written out: fused QKV at D=80 read in place, result written as [B, S, H*D]", 3, 4},
};

/* Append src to the unit (*unit, *len); false when out of memory. */
static bool unit_append(char **unit, size_t *len, const char *src) {
    size_t n = strlen(src);
    char *u = realloc(*unit, *len + n + 1);
    if (!u) return false;
    memcpy(u + *len, src, n + 1);
    *unit = u;
    *len += n;
    return true;
}

static void test_kernels(fc_context *ctx, gpu *G) {
    /* Every kernel again in one translation unit, as a plan with several
     * attention groups gets: the shared templates are emitted once. Two
     * units: code for any GPU (plan sm 0), and for sm 90 (the Hopper
     * kernel where it applies, compiled for sm_90a). */
    char *unit[2] = {NULL, NULL};
    size_t unit_len[2] = {0, 0};
    bool unit_ok[2] = {true, true};
    /* FUSEC_ATTN_CASES=a|b: only the cases whose names hold a or b. */
    const char *only = getenv("FUSEC_ATTN_CASES");
    for (size_t i = 0; i < sizeof kcases / sizeof *kcases; i++) {
        const kcase *c = &kcases[i];
        bool picked = !only || !*only;
        for (const char *p = only; p && *p && !picked; p = strchr(p, '|') ? strchr(p, '|') + 1 : "") {
            const size_t n = strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p);
            for (const char *q = c->name; *q && !picked; q++) picked = n > 0 && !strncmp(q, p, n);
        }
        if (!picked) continue;
        agroup a;
        bool ok = make_group(ctx, c->name, c->ir, c->pass, &a);
        CHECK(ok);
        if (!ok) {
            fc_graph_free(a.g);
            continue;
        }
        CHECK(fc_cuda_attention_uses_mma(&a.gr) == c->mma);
        fc_tensor in[8] = {0}, want = {0};
        int nin = a.g->nparams;
        fc_status rst = FC_ERR_RUNTIME;
        if (G->ok) {
            for (int k = 0; k < nin; k++) fill(&in[k], a.g->params[k], 2.0);
            /* The reference of the graph the kernel implements (after the
             * pass: the attention op's exact semantics). */
            rst = fc_run_reference(a.g, in, nin, &want, 1);
            CHECK_EQ_INT(rst, FC_OK);
        }
        /* target 0: plan sm 0 (fc_attn_tc or fc_attn_rows), compiled for
         * sm_90 and, for the tensor-core kernel, sm_90a too (ptxas);
         * target 1: plan sm 90 (fc_attn_fa3 where expected), sm_90a. */
        const bool fa3 = expect_fa3(c, &a);
        for (int target = 0; target < (c->mma ? 2 : 1); target++) {
            a.plan.sm = target ? 90 : 0;
            /* fc_attn_fa3's persistent grid with 3 blocks, so that each walks
             * several work tiles, in both directions of its rounds (the
             * cp.async run below: 2 blocks where the codegen makes the grid
             * persistent, not for causal D=128); and its tiles in sections of one
             * batch element each (a 1 KiB budget for the section's K and V;
             * the cp.async run: the rules, which at these sizes make one
             * section of all of them). */
            a.plan.sm_count = 3;
            const fc_attention_force walk = {.persistent = true, .l2_section_bytes = 1024}; /* causal D=128 too */
            char *src = NULL;
            fc_launch l = {0};
            fc_status st = fc_cuda_emit_attention_forced(&a.plan, &a.gr, "fc_attention_test", &walk, &src, &l);
            CHECK_EQ_INT(st, FC_OK);
            if (st) {
                fprintf(stderr, "%s: %s\n", c->name, fc_last_error(ctx));
                continue;
            }
            const bool hopper = target && fa3;
            /* FUSEC_ATTN_DUMP=dir: the sources, for nvcc -Xptxas -v and cuobjdump. */
            const char *dump = getenv("FUSEC_ATTN_DUMP");
            if (dump && *dump) {
                char path[512];
                snprintf(path, sizeof path, "%s/k%02zu_%s.cu", dump, i, hopper ? "fa3" : "sm90");
                FILE *f = fopen(path, "w");
                if (f) {
                    fputs(src, f);
                    fclose(f);
                }
            }
            CHECK(l.kind == FC_LAUNCH_KERNEL && l.grid[0] >= 1);
            if (hopper) {
                /* One block per SM of the plan (3), at most one per work tile
                 * (64 query rows per consumer warpgroup, per batch element). */
                const fc_value *ov = a.out;
                int64_t nbatch = 1, rows = 64 * ((int64_t)l.block[0] / 128 - 1);
                for (int d = 0; d < ov->rank - 2; d++) nbatch *= ov->dims[d];
                const int64_t tiles = (ov->dims[ov->rank - 2] + rows - 1) / rows * nbatch;
                CHECK_EQ_INT((int64_t)l.grid[0], tiles < 3 ? tiles : 3);
            }
            CHECK(hopper ? (l.block[0] == 384 || l.block[0] == 512) && l.smem > 48 * 1024 && l.smem <= 227 * 1024
                         : l.smem == 0 && (c->mma ? l.block[0] == 128 || l.block[0] == 256 : l.block[0] == 256));
            CHECK((strstr(src, "fc_attn_fa3<") != NULL) == hopper);
            /* Tensor maps: only for fc_attn_fa3, one kernel parameter each. */
            int nparams = 0;
            for (const char *p = src; (p = strstr(p, "const __grid_constant__ fc_wg_tmap")); p++) nparams++;
            CHECK_EQ_INT(nparams, l.ntmaps);
            CHECK(hopper || l.ntmaps == 0);
            for (size_t e = 0; hopper && e < sizeof tma_expect / sizeof *tma_expect; e++)
                if (!strcmp(tma_expect[e].name, c->name)) {
                    CHECK_EQ_INT(l.ntmaps, tma_expect[e].ntmaps);
                    if (l.ntmaps >= 2) CHECK_EQ_INT(l.tmaps[1].rank, tma_expect[e].kmap_rank);
                }
            for (int t = 0; t < l.ntmaps; t++)
                CHECK(l.tmaps[t].swizzle128 && l.tmaps[t].box[0] == 64 && l.tmaps[t].strides[0] % 16 == 0 &&
                      l.tmaps[t].arg < a.gr.ninputs && l.tmaps[t].rank >= 2 && l.tmaps[t].rank <= FC_TMAP_MAX_RANK);
            char name[64];
            snprintf(name, sizeof name, "fc_attention_unit_%zu", i);
            char *src2 = NULL;
            fc_launch l2 = {0};
            if (fc_cuda_emit_attention(&a.plan, &a.gr, name, &src2, &l2) == FC_OK)
                unit_ok[target] = unit_append(&unit[target], &unit_len[target], src2) && unit_ok[target];
            free(src2);
            for (int arch = target; arch < (c->mma ? 2 : 1); arch++) {
                if (G->ok && arch == target) continue; /* run_on_gpu below compiles it */
                fc_bytes cubin = {0};
                st = fc_nvrtc_compile(ctx, src, "attention.cu", 9, 0, arch ? sm90a : NULL, arch, &cubin);
                CHECK_EQ_INT(st, FC_OK);
                if (st) fprintf(stderr, "%s (%s, plan sm %d): %s\n", c->name, arch ? "sm_90a" : "sm_90", a.plan.sm, fc_last_error(ctx));
                fc_bytes_free(&cubin);
            }
            /* On the GPU: the sm_90 kernel, and the Hopper one (with the
             * NVRTC options of FUSEC_ATTN_TEST_OPTS, space-separated:
             * experiments' macros). */
            if (G->ok && (target == 0 || hopper)) {
                fc_tensor got = {0};
                double ms = 0;
                const char *hopts[8] = {sm90a[0]};
                int nh = 1;
                char obuf[512] = "";
                const char *te = getenv("FUSEC_ATTN_TEST_OPTS");
                if (te) snprintf(obuf, sizeof obuf, "%s", te);
                for (char *sv = NULL, *t = strtok_r(obuf, " ", &sv); t && nh < 8; t = strtok_r(NULL, " ", &sv)) hopts[nh++] = t;
                st = run_on_gpu(ctx, G, &a, src, &l, in, &got, 0, &ms, target ? hopts : NULL, target ? nh : 0);
                CHECK_EQ_INT(st, FC_OK);
                if (st) fprintf(stderr, "%s: %s\n", c->name, fc_last_error(ctx));
                if (!st && !rst) {
                    fc_tolerance tol = fc_dtype_tolerance(want.dtype);
                    char what[160];
                    snprintf(what, sizeof what, "%s%s", c->name, hopper ? (l.ntmaps ? " (wgmma, TMA)" : " (wgmma)") : "");
                    bool good = allclose(what, &got, &want, tol.rel, tol.abs);
                    CHECK(good);
                    printf("gpu: %s: %s\n", what, good ? "ok" : "WRONG");
                    fflush(stdout);
                }
                free(got.data);
                /* The same kernel without its tensor maps (every load by
                 * cp.async), which is what a layout TMA cannot read gets. */
                if (hopper && l.ntmaps > 0 && !rst) {
                    const fc_attention_force cp_async = {.no_tma = true};
                    char *src0 = NULL;
                    fc_launch l0 = {0};
                    a.plan.sm_count = 2;
                    st = fc_cuda_emit_attention_forced(&a.plan, &a.gr, "fc_attention_test", &cp_async, &src0, &l0);
                    a.plan.sm_count = 3;
                    CHECK(st == FC_OK && l0.ntmaps == 0);
                    fc_tensor got0 = {0};
                    if (!st) st = run_on_gpu(ctx, G, &a, src0, &l0, in, &got0, 0, &ms, hopts, nh);
                    CHECK_EQ_INT(st, FC_OK);
                    if (st) fprintf(stderr, "%s (cp.async): %s\n", c->name, fc_last_error(ctx));
                    if (!st) {
                        fc_tolerance tol = fc_dtype_tolerance(want.dtype);
                        char what[160];
                        snprintf(what, sizeof what, "%s (wgmma, cp.async)", c->name);
                        bool good = allclose(what, &got0, &want, tol.rel, tol.abs);
                        CHECK(good);
                        printf("gpu: %s: %s\n", what, good ? "ok" : "WRONG");
                    }
                    free(got0.data);
                    free(src0);
                }
            }
            free(src);
        }
        for (int k = 0; k < nin; k++) free(in[k].data);
        if (!rst) fc_tensor_release(&want);
        fc_graph_free(a.g);
    }
    for (int target = 0; target < 2; target++) {
        CHECK((unit[target] != NULL || (only && *only)) && unit_ok[target]);
        for (int arch = target; unit[target] && arch < 2; arch++) {
            fc_bytes cubin = {0};
            fc_status st = fc_nvrtc_compile(ctx, unit[target], "attention_unit.cu", 9, 0, arch ? sm90a : NULL, arch, &cubin);
            CHECK_EQ_INT(st, FC_OK);
            if (st) fprintf(stderr, "one unit (plan sm %d, %s): %s\n", target ? 90 : 0, arch ? "sm_90a" : "sm_90", fc_last_error(ctx));
            fc_bytes_free(&cubin);
        }
        free(unit[target]);
    }
}

/* 7. Through the runtime (fc_compile for the device, fc_run): kernels with
 * tensor maps on an H100/H200. Every run gets new buffers, so the eager
 * first run, the graph built at the second and the graph patched at each
 * later one all encode maps over new pointers; each result against the
 * reference. Then an input 2 bytes off 16-byte alignment: FC_ERR_INPUT
 * naming the alignment, nothing launched (no fault), and a good run after. */
static void test_runtime_tma(fc_context *ctx, gpu *G) {
    static const char *const names[2] = {"bf16 D=128 S=200",
                                         "written out: fused QKV read in place, result written as [B, S, H*D]"};
    enum { RUNS = 4 };
    for (int c = 0; c < 2; c++) {
        const kcase *kc = NULL;
        for (size_t i = 0; i < sizeof kcases / sizeof *kcases; i++)
            if (!strcmp(kcases[i].name, names[c])) kc = &kcases[i];
        fc_graph *g = kc ? parse(ctx, kc->name, kc->ir) : NULL;
        fc_program *p = NULL;
        CHECK(g && fc_compile(g, NULL, &p) == FC_OK);
        if (!p) {
            fprintf(stderr, "%s: %s\n", names[c], fc_last_error(ctx));
            fc_graph_free(g);
            continue;
        }
        const fc_program_desc *d = fc_program_desc_of(p);
        int ntmaps = 0;
        for (int i = 0; i < d->src.nlaunches; i++) ntmaps += d->src.launches[i].ntmaps;
        const bool tma = G->d->info.cc_major == 9 && G->d->info.cc_minor == 0 && fc_cuda_attention_hopper(90);
        CHECK(!tma || ntmaps > 0);
        const int nin = g->nparams;
        fc_tensor in[4] = {0}, want = {0};
        for (int k = 0; k < nin; k++) fill(&in[k], g->params[k], 2.0);
        CHECK_EQ_INT(fc_run_reference(g, in, nin, &want, 1), FC_OK);
        const size_t obytes = (size_t)fc_tensor_numel(&want) * fc_dtype_size(want.dtype);
        CUdeviceptr din[RUNS][4] = {{0}}, dout[RUNS] = {0};
        fc_status st = FC_OK;
        for (int r = 0; r < RUNS && !st; r++) {
            for (int k = 0; k < nin && !st; k++) {
                size_t bytes = (size_t)fc_tensor_numel(&in[k]) * fc_dtype_size(in[k].dtype);
                st = fc_cuda_alloc(G->d, bytes + 16, &din[r][k]); /* + 16: room for the misaligned run */
                if (!st) st = fc_cuda_upload(G->d, din[r][k], in[k].data, bytes);
            }
            if (!st) st = fc_cuda_alloc(G->d, obytes, &dout[r]);
        }
        CHECK_EQ_INT(st, FC_OK);
        fc_tensor got = want;
        got.data = malloc(obytes);
        for (int r = 0; r < RUNS + 2 && !st; r++) {
            /* Run RUNS: input 0 two bytes further on; the run after it, good again. */
            const int b = r < RUNS ? r : 0;
            void *ip[4], *op[1] = {(void *)(uintptr_t)dout[b]};
            for (int k = 0; k < nin; k++) ip[k] = (void *)(uintptr_t)(din[b][k] + (r == RUNS && k == 0 ? 2 : 0));
            fc_status rs = fc_run(p, ip, nin, op, 1, NULL);
            if (r == RUNS && ntmaps > 0) {
                CHECK_EQ_INT(rs, FC_ERR_INPUT);
                CHECK(strstr(fc_last_error(ctx), "16-byte aligned") != NULL);
                CHECK_EQ_INT(fc_cuda_device_sync(G->d), FC_OK); /* nothing faulted */
                continue;
            }
            if (r == RUNS) continue; /* no tensor maps: a misaligned run is the caller's fault */
            CHECK_EQ_INT(rs, FC_OK);
            if (rs) fprintf(stderr, "%s: run %d: %s\n", names[c], r, fc_last_error(ctx));
            if (!rs) rs = fc_cuda_device_sync(G->d);
            if (!rs) rs = fc_cuda_download(G->d, got.data, dout[b], obytes);
            char what[200];
            snprintf(what, sizeof what, "%s, fc_run %d (%d tensor maps)", names[c], r, ntmaps);
            /* The error contract (docs/NUMERICS.md), as --check: within the
             * dtype's tolerance of the dtype-faithful reference, or no
             * further from float64 than the margin times that reference's
             * own error. The kernel keeps the scores and probabilities in
             * f32 where the reference rounds them to bf16, so a fixed
             * tolerance alone fails a few elements of some inputs. */
            fc_output_diff od;
            bool good = !rs && fc_check_outputs(g, in, nin, &got, 1, &od) == FC_OK && od.pass;
            if (!rs && !good) {
                char line[512];
                fprintf(stderr, "%s: %s\n", what, fc_output_diff_format(&od, 0, line, sizeof line));
            }
            CHECK(good);
            printf("gpu: %s: %s\n", what, good ? "ok" : "WRONG");
        }
        fc_run_stats rs;
        fc_program_stats(p, &rs);
        printf("gpu: %s: %llu graph replays, %llu nodes patched, graphs: %s\n", names[c], (unsigned long long)rs.graph_replays,
               (unsigned long long)rs.graph_patches, rs.graph_skip_reason[0] ? rs.graph_skip_reason : "on");
        /* Runs 1 .. RUNS - 1 replay the graph (unless graphs are off here),
         * each patched for its new pointers; the misaligned run is refused
         * before the graph is touched, so the good run after it replays
         * too: graphs stay on. */
        const char *ge = getenv("FUSEC_CUDA_GRAPHS");
        if (!(ge && !strcmp(ge, "0"))) {
            CHECK(rs.graph_replays >= RUNS && rs.graph_patches >= RUNS - 2);
            CHECK_EQ_INT(rs.graph_skips, 0);
            CHECK(rs.graph_skip_reason[0] == 0);
        }
        free(got.data);
        for (int r = 0; r < RUNS; r++) {
            for (int k = 0; k < nin; k++) fc_cuda_free(G->d, din[r][k]);
            fc_cuda_free(G->d, dout[r]);
        }
        for (int k = 0; k < nin; k++) free(in[k].data);
        fc_tensor_release(&want);
        fc_program_free(p);
        fc_graph_free(g);
    }
}

/* The benchmark shapes, timed (FUSEC_ATTN_BENCH=1): FLOPs are
 * 4 B H S^2 D, halved for causal. Each shape runs fc_attn_tc (plan sm 0)
 * and fc_attn_fa3 (plan sm 90, sm_90a), the latter also with each option
 * set of FUSEC_ATTN_BENCH_VARIANTS (';'-separated NVRTC option lists,
 * options separated by spaces: "-DFOO=1;-DFOO=2 -DBAR=2", for a kernel
 * under experiment). Every fc_attn_fa3 result is
 * compared with fc_attn_tc's at the dtype's tolerance ("same" or
 * "DIFFERS" on its line): the benchmark shapes checked against the other
 * kernel, whose code is unchanged by fc_attn_fa3's experiments. */
static void bench(fc_context *ctx, gpu *G) {
    static const struct {
        const char *dt;
        int d;
        bool causal;
    } shapes[] = {{"bf16", 128, true}, {"bf16", 128, false}, {"bf16", 64, true}, {"bf16", 64, false}, {"f16", 128, true},
                  {"bf16", 80, true},  {"bf16", 80, false},  {"bf16", 96, true}, {"bf16", 96, false}};
    /* Variants: [0] sm 0, [1] sm 90, [2] sm 90 without TMA (every load by
     * cp.async, what a layout TMA cannot read gets), then the environment's. */
    const char *opts[10][6] = {{NULL}};
    int nopts[10] = {0, 1, 1};
    char vbuf[1024] = "";
    int nv = 3;
    const char *ve = getenv("FUSEC_ATTN_BENCH_VARIANTS");
    if (ve) snprintf(vbuf, sizeof vbuf, "%s", ve);
    opts[1][0] = opts[2][0] = sm90a[0];
    for (char *save = NULL, *v = strtok_r(vbuf, ";", &save); v && nv < 10; v = strtok_r(NULL, ";", &save)) {
        opts[nv][0] = sm90a[0];
        nopts[nv] = 1;
        for (char *s2 = NULL, *o = strtok_r(v, " ", &s2); o && nopts[nv] < 6; o = strtok_r(NULL, " ", &s2)) opts[nv][nopts[nv]++] = o;
        nv++;
    }
    const char *quick = getenv("FUSEC_ATTN_BENCH_QUICK"); /* =1: bf16 only */
    const char *only_d = getenv("FUSEC_ATTN_BENCH_D");    /* =80,96 (say): those head dims only */
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (quick && *quick == '1' && strcmp(shapes[i].dt, "bf16") != 0) continue;
        bool listed = !only_d || !*only_d;
        for (const char *p = only_d; p && *p && !listed; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") listed = atoi(p) == shapes[i].d;
        if (!listed) continue;
        char ir[512];
        snprintf(ir, sizeof ir,
                 "graph b(%%q: %s[8, 16, 2048, %d], %%k: %s[8, 16, 2048, %d], %%v: %s[8, 16, 2048, %d]) {\n"
                 "  %%o = attention(%%q, %%k, %%v, causal=%s)\n  return %%o\n}\n",
                 shapes[i].dt, shapes[i].d, shapes[i].dt, shapes[i].d, shapes[i].dt, shapes[i].d,
                 shapes[i].causal ? "true" : "false");
        agroup a;
        if (!make_group(ctx, "bench", ir, false, &a)) {
            fc_graph_free(a.g);
            continue;
        }
        fc_tensor in[3] = {0};
        for (int k = 0; k < 3; k++) fill(&in[k], a.g->params[k], 1.0);
        double flops = 4.0 * 8 * 16 * 2048.0 * 2048.0 * shapes[i].d * (shapes[i].causal ? 0.5 : 1.0);
        fc_tensor base = {0};
        a.plan.sm_count = G->d->info.sm_count; /* fc_attn_fa3's persistent grid: one block per SM */
        for (int var = 0; var < nv; var++) {
            a.plan.sm = var ? 90 : 0;
            if (var && !fc_cuda_attention_hopper(90)) break;
            char *src = NULL;
            fc_launch l = {0};
            const fc_attention_force force = {.no_tma = var == 2};
            if (fc_cuda_emit_attention_forced(&a.plan, &a.gr, "fc_attention_bench", &force, &src, &l)) continue;
            fc_tensor got = {0};
            double ms = 0;
            fc_status st = run_on_gpu(ctx, G, &a, src, &l, in, &got, 50, &ms, opts[var], nopts[var]);
            char vname[160] = "mma.sync";
            if (var >= 1) snprintf(vname, sizeof vname, "wgmma%s", l.ntmaps ? " TMA" : " cp.async");
            for (int o = 1; var > 1 && o < nopts[var]; o++) {
                size_t used = strlen(vname);
                snprintf(vname + used, sizeof vname - used, " %s", opts[var][o]);
            }
            const char *same = "";
            if (!st && var == 0) {
                base = got; /* what the fc_attn_fa3 variants are compared with */
                got.data = NULL;
            } else if (!st && base.data) {
                fc_tolerance tol = fc_dtype_tolerance(got.dtype);
                same = allclose(vname, &got, &base, tol.rel, tol.abs) ? ", same" : ", DIFFERS";
            }
            if (!st)
                printf("bench: %s B=8 H=16 S=2048 D=%d %s %s: %.3f ms, %.0f TFLOP/s%s\n", shapes[i].dt, shapes[i].d,
                       shapes[i].causal ? "causal" : "full", vname, ms, flops / ms * 1e-9, same);
            else
                fprintf(stderr, "bench: %s\n", fc_last_error(ctx));
            free(got.data);
            free(src);
        }
        free(base.data);
        for (int k = 0; k < 3; k++) free(in[k].data);
        fc_graph_free(a.g);
    }
}

/* ------------------------------------------------------------------ */
/* 5. Allocation failures                                              */
/* ------------------------------------------------------------------ */

static void test_alloc_failures(void) {
    CHECK(pass_through_alloc_failures(pass_cases[1].ir, prefix, fc_pass_attention) > 3);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_pass_cases(ctx);
    test_exact_ir(ctx);
    test_gpt2_block(ctx);
    test_views(ctx);
    test_codegen_refusals(ctx);
    test_key_tile(ctx);
    test_shape_rules(ctx);
    test_alloc_failures();

    gpu G = {0};
    G.ok = fc_cuda_available(ctx) && fc_cuda_device_open(ctx, 0, &G.d) == FC_OK;
    if (!G.ok) printf("skipped: no CUDA device (%s); compiling only\n", fc_last_error(ctx));
    /* FUSEC_ATTN_BENCH_ONLY=1: the GPU's benchmark without the kernel tests. */
    const char *bo = getenv("FUSEC_ATTN_BENCH_ONLY");
    if (!(G.ok && bo && *bo == '1')) test_kernels(ctx, &G);
    if (G.ok && !(bo && *bo == '1')) test_runtime_tma(ctx, &G);
    const char *b = getenv("FUSEC_ATTN_BENCH");
    if (G.ok && b && *b == '1') bench(ctx, &G);
    fc_cuda_device_close(G.d);
    fc_context_free(ctx);
    return check_report("test_attention");
}

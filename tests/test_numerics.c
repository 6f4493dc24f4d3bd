/* test_numerics.c - the kernels' numerics (docs/NUMERICS.md).
 *
 *  1. Generated CUDA, fast numerics: a value computed inside a kernel is
 *     never rounded before its store (no fc_rnd_* in the kernel bodies) in
 *     pointwise chains, reduction prologues and epilogues, and the
 *     pointwise kernels after a GEMM and after attention; a weak scalar of
 *     a bf16 multiply is the f32 nearest it. Eager numerics round every
 *     bf16 value (fc_rnd_bf16) and use eager PyTorch's formulas. Every
 *     source is compiled by NVRTC for sm_90 (fc_compile does; no GPU).
 *  2. The CPU backend in both modes against the reference: fast within
 *     the contract against the exact reference (and at or below eager's
 *     error), eager within a bf16 ulp of the rounding reference, the bf16
 *     pointwise chain with model-like inputs.
 */
#include "check.h"
#include "ir.h"
#include "runtime/ref/interp.h"
#include "splitmix.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static fc_graph *parse(fc_context *ctx, const char *ir) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "numerics.ir", ir, strlen(ir), NULL, NULL, 0, &g);
    if (st) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

/* The kernel bodies (the source after the prelude) of ir compiled for
 * CUDA sm_90 with numerics nm; NULL on failure. */
static char *cuda_kernels(fc_context *ctx, const char *ir, fc_numerics nm) {
    fc_graph *g = parse(ctx, ir);
    if (!g) return NULL;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.sm = 90;
    o.numerics = nm;
    fc_program *p = NULL;
    fc_status st = fc_compile(g, &o, &p);
    if (st) fprintf(stderr, "compile (NVRTC): %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    char *src = p ? fc_program_cuda_source(p) : NULL;
    const char *body = src ? strstr(src, "// group") : NULL;
    char *out = body ? strdup(body) : NULL;
    CHECK(out != NULL);
    fc_free(src);
    fc_program_free(p);
    fc_graph_free(g);
    return out;
}

static const char *chain =
    "graph chain(%x: bf16[64, 256], %r: bf16[64, 256]) {\n"
    "  %a = mul(%x, 1.702)\n  %b = add(%a, %r)\n  %c = gelu(%b)\n  %d = sigmoid(%r)\n"
    "  %e = mul(%c, %d)\n  %y = add(%e, %x)\n  return %y\n}\n";

/* A reduction with a prologue (the scale) and an epilogue (the weight). */
static const char *reduce_graph =
    "graph rs(%x: bf16[64, 512], %w: bf16[512]) {\n"
    "  %s = mul(%x, 0.125)\n  %q = mul(%s, %s)\n  %m = reduce_sum(%q, axes=[-1], keepdim=true)\n"
    "  %e = mul(%m, 0.001953125)\n  %r = rsqrt(%e)\n  %n = mul(%s, %r)\n  %y = mul(%n, %w)\n  return %y\n}\n";

/* A GEMM whose tail is more than cuBLASLt's epilogue (silu), and one
 * attention followed by a scale and a residual: the pointwise kernels
 * after them. */
static const char *gemm_graph =
    "graph gm(%x: bf16[64, 128], %w: bf16[128, 256], %b: bf16[256]) {\n"
    "  %h = matmul(%x, %w)\n  %hb = add(%h, %b)\n  %s = silu(%hb)\n  %y = mul(%s, 1.702)\n  return %y\n}\n";
static const char *attn_graph =
    "graph at(%q: bf16[2, 4, 64, 64], %k: bf16[2, 4, 64, 64], %v: bf16[2, 4, 64, 64], %r: bf16[2, 4, 64, 64]) {\n"
    "  %o = attention(%q, %k, %v, causal=true)\n  %s = mul(%o, 0.5)\n  %t = tanh(%s)\n  %y = add(%t, %r)\n"
    "  return %y\n}\n";

static void test_cuda_codegen(fc_context *ctx) {
    /* The pointwise chain: fast keeps every intermediate in f32 and rounds
     * at the store; the weak scalar is 1.702f, not bf16's 1.703125. */
    char *k = cuda_kernels(ctx, chain, FC_NUMERICS_FAST);
    if (k) {
        CHECK_EQ_INT(count(k, "fc_rnd_bf16("), 0);
        CHECK(strstr(k, "(float)1.7020000219345093") != NULL);
        CHECK(strstr(k, "1.703125") == NULL);
        CHECK(strstr(k, "fmaf(") != NULL); /* gelu's x/2 (1 + erf): one fma, t + 1 unrounded */
        CHECK(strstr(k, "fc_to<__nv_bfloat16>(") != NULL);
        CHECK(strstr(k, "_eager(") == NULL);
    }
    free(k);
    /* Eager: a, b, gelu, sigmoid and e rounded (y's store rounds y), each
     * of the vector's elements; eager PyTorch's sigmoid, and no fma. */
    k = cuda_kernels(ctx, chain, FC_NUMERICS_EAGER);
    if (k) {
        CHECK(count(k, "fc_rnd_bf16(") >= 5);
        CHECK_EQ_INT(count(k, "fc_rnd_bf16(") % 5, 0);
        CHECK(strstr(k, "fc_sigmoid_eager(") != NULL);
        CHECK(strstr(k, "fmaf(") == NULL);
        CHECK(strstr(k, "(float)1.7020000219345093") != NULL); /* eager takes the scalar in f32 too */
    }
    free(k);
    const char *graphs[] = {reduce_graph, gemm_graph, attn_graph};
    for (int i = 0; i < 3; i++) {
        k = cuda_kernels(ctx, graphs[i], FC_NUMERICS_FAST);
        if (k) {
            if (count(k, "fc_rnd_")) fprintf(stderr, "fast numerics rounded inside a kernel:\n%s\n", k);
            CHECK_EQ_INT(count(k, "fc_rnd_"), 0);
        }
        free(k);
        k = cuda_kernels(ctx, graphs[i], FC_NUMERICS_EAGER);
        if (k) CHECK(count(k, "fc_rnd_bf16(") > 0);
        free(k);
    }
    /* The reduction's per-row value, a bf16 sum, is kept in f32 (fast) or
     * rounded (eager). */
    k = cuda_kernels(ctx, reduce_graph, FC_NUMERICS_EAGER);
    if (k) CHECK(strstr(k, " = fc_rnd_bf16(acc") != NULL);
    free(k);
    k = cuda_kernels(ctx, reduce_graph, FC_NUMERICS_FAST);
    if (k) CHECK(strstr(k, " = fc_rnd_bf16(acc") == NULL && strstr(k, " = acc") != NULL);
    free(k);
}

/* ---- the CPU backend ------------------------------------------------------ */

/* bf16 inputs of shape [rows, cols]: N(0, 1)-like (a sum of uniforms), as
 * activations after a norm are. */
static fc_tensor bf16_input(int64_t rows, int64_t cols, uint64_t seed) {
    fc_tensor t = {FC_BF16, 2, {rows, cols}, NULL};
    uint16_t *d = malloc(sizeof *d * (size_t)(rows * cols));
    uint64_t s = seed;
    for (int64_t i = 0; i < rows * cols; i++) {
        double u = 0;
        for (int j = 0; j < 4; j++) u += splitmix_uniform(&s);
        d[i] = fc_f32_to_bf16((float)(u * 0.866)); /* variance 4/3 * 0.75 = 1 */
    }
    t.data = d;
    return t;
}

/* One ulp of bf16 at x (the spacing of bf16 values around |x|). */
static double bf16_ulp(double x) {
    x = fabs(x);
    if (x < 0x1p-126) return 0x1p-133;
    return ldexp(1.0, ilogb(x) - 7);
}

typedef struct errs {
    double rel_l2, max_ulp;
} errs;

/* got (bf16 storage) against exact: relative L2 and max ulps of bf16. */
static errs error_of(const fc_tensor *got, const fc_interp_tensor *exact) {
    errs e = {0, 0};
    double se = 0, sx = 0;
    int64_t n = fc_interp_tensor_numel(exact);
    for (int64_t i = 0; i < n; i++) {
        double x = fc_interp_load(got->dtype, got->data, i), w = exact->data[i], d = x - w;
        se += d * d;
        sx += w * w;
        double u = fabs(d) / bf16_ulp(w);
        if (u > e.max_ulp) e.max_ulp = u;
    }
    e.rel_l2 = sx > 0 ? sqrt(se / sx) : 0;
    return e;
}

/* Run ir on the CPU backend with numerics nm; outputs into out (one). */
static fc_status run_cpu(fc_context *ctx, const char *ir, fc_numerics nm, const fc_tensor *in, int nin, fc_tensor *out) {
    fc_graph *g = parse(ctx, ir);
    if (!g) return FC_ERR_INPUT;
    fc_compile_options o = options_for(FC_DEVICE_CPU, FC_PRECISION_AS_WRITTEN);
    o.numerics = nm;
    fc_program *p = NULL;
    fc_status st = fc_compile(g, &o, &p);
    if (!st) st = fc_program_run_host(p, in, nin, out, 1, NULL, 0);
    if (st) fprintf(stderr, "cpu: %s\n", fc_last_error(ctx));
    fc_program_free(p);
    fc_graph_free(g);
    return st;
}

/* The reference both ways on in: exact and rounding every value. */
static void reference(fc_context *ctx, const char *ir, const fc_tensor *in, int nin, fc_interp_tensor *exact,
                      fc_interp_tensor *faithful) {
    fc_graph *g = parse(ctx, ir);
    fc_interp_tensor din[4];
    for (int i = 0; i < nin; i++) {
        int64_t n = fc_tensor_numel(&in[i]);
        din[i] = (fc_interp_tensor){in[i].dtype, in[i].rank, {0}, malloc(sizeof(double) * (size_t)n)};
        memcpy(din[i].shape, in[i].shape, sizeof din[i].shape);
        for (int64_t j = 0; j < n; j++) din[i].data[j] = fc_interp_load(in[i].dtype, in[i].data, j);
    }
    CHECK_EQ_INT(fc_interp_run_rounding(g, FC_REF_EXACT, din, nin, exact, 1), FC_OK);
    CHECK_EQ_INT(fc_interp_run_rounding(g, FC_REF_DTYPE, din, nin, faithful, 1), FC_OK);
    for (int i = 0; i < nin; i++) free(din[i].data);
    fc_graph_free(g);
}

/* ir (bf16 output) on the CPU in both modes against the reference. */
static void check_cpu(fc_context *ctx, const char *name, const char *ir, fc_tensor *in, int nin) {
    fc_tensor fast = {0}, eager = {0};
    fc_interp_tensor exact = {0}, faithful = {0};
    if (run_cpu(ctx, ir, FC_NUMERICS_FAST, in, nin, &fast) || run_cpu(ctx, ir, FC_NUMERICS_EAGER, in, nin, &eager)) {
        CHECK(false);
        fc_tensor_release(&fast);
        return;
    }
    reference(ctx, ir, in, nin, &exact, &faithful);
    if (!exact.data || !faithful.data) return;
    errs ef = error_of(&fast, &exact), ee = error_of(&eager, &exact);
    /* Fast: its error is the output's rounding and f32 arithmetic, at or
     * below rounding every value (eager's), and within the contract. The
     * f32 error of an intermediate can exceed half an ulp of a result that
     * cancels (y = e + x with e near -x): up to 2 ulps are allowed, where
     * eager's errors reach thousands. */
    if (getenv("FUSEC_TEST_VERBOSE"))
        fprintf(stderr, "%s: fast rel L2 %.3g max %.2f ulp; eager rel L2 %.3g max %.2f ulp\n", name, ef.rel_l2,
                ef.max_ulp, ee.rel_l2, ee.max_ulp);
    CHECK(ef.rel_l2 <= ee.rel_l2);
    CHECK(ef.max_ulp <= 2.0);
    fc_graph *g = parse(ctx, ir);
    fc_output_diff cd;
    fc_status st = fc_check_outputs(g, in, nin, &fast, 1, &cd);
    if (st) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_graph_free(g);
    /* Eager: the rounding reference, to a bf16 ulp (f32 arithmetic and the
     * CPU's exp/erf approximations tip a rounding now and then), and most
     * elements exactly. */
    int64_t n = fc_interp_tensor_numel(&faithful), same = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fc_interp_load(FC_BF16, eager.data, i), w = faithful.data[i];
        same += x == w;
        if (fabs(x - w) / bf16_ulp(w) > worst) worst = fabs(x - w) / bf16_ulp(w);
    }
    CHECK(worst <= 1.0);
    CHECK(same >= n * 95 / 100);
    fc_tensor_release(&fast);
    fc_tensor_release(&eager);
    fc_interp_tensor_release(&exact);
    fc_interp_tensor_release(&faithful);
}

static void test_cpu(fc_context *ctx) {
    if (!fc_device_built(FC_DEVICE_CPU)) {
        printf("test_numerics: no CPU backend in this build; its checks are skipped\n");
        return;
    }
    static const char *big_chain =
        "graph chain(%x: bf16[256, 1024], %r: bf16[256, 1024]) {\n"
        "  %a = mul(%x, 1.702)\n  %b = add(%a, %r)\n  %c = gelu(%b)\n  %d = sigmoid(%r)\n"
        "  %e = mul(%c, %d)\n  %y = add(%e, %x)\n  return %y\n}\n";
    fc_tensor in[2] = {bf16_input(256, 1024, 1), bf16_input(256, 1024, 2)};
    check_cpu(ctx, "pointwise chain", big_chain, in, 2);
    static const char *softmax_bf16 =
        "graph sm(%x: bf16[256, 1024]) {\n  %s = mul(%x, 0.125)\n  %m = reduce_max(%s, axes=[-1], keepdim=true)\n"
        "  %d = sub(%s, %m)\n  %e = exp(%d)\n  %z = reduce_sum(%e, axes=[-1], keepdim=true)\n  %y = div(%e, %z)\n"
        "  return %y\n}\n";
    check_cpu(ctx, "softmax written in bf16", softmax_bf16, in, 1);
    static const char *rms_bf16 =
        "graph rs(%x: bf16[256, 1024], %r: bf16[256, 1024]) {\n  %h = add(%x, %r)\n  %q = mul(%h, %h)\n"
        "  %m = reduce_mean(%q, axes=[-1], keepdim=true)\n  %e = add(%m, 1e-6)\n  %s = rsqrt(%e)\n"
        "  %y = mul(%h, %s)\n  return %y\n}\n";
    check_cpu(ctx, "rmsnorm written in bf16", rms_bf16, in, 2);
    /* A weak scalar is taken in f32 in both modes: 3 * 1.702 = 5.106 rounds
     * to 5.09375 (with bf16's 1.703125 it would be 5.125). */
    static const char *weak = "graph w(%x: bf16[2]) {\n  %y = mul(%x, 1.702)\n  return %y\n}\n";
    uint16_t xs[2] = {fc_f32_to_bf16(1.0f), fc_f32_to_bf16(3.0f)};
    fc_tensor wx = {FC_BF16, 1, {2}, xs};
    for (int m = 0; m < 2; m++) {
        fc_tensor y = {0};
        if (run_cpu(ctx, weak, m ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST, &wx, 1, &y) == FC_OK) {
            CHECK_NEAR(fc_interp_load(FC_BF16, y.data, 0), 1.703125, 0);
            CHECK_NEAR(fc_interp_load(FC_BF16, y.data, 1), 5.09375, 0);
        }
        fc_tensor_release(&y);
    }
    /* Division by a weak scalar is a multiply by its f32 reciprocal, as
     * eager PyTorch's CUDA kernel divides: x / 3 for x = 3 is 3 * (1/3)f,
     * exactly 1 in f32 (so in bf16). */
    static const char *divide = "graph d(%x: f32[2]) {\n  %y = div(%x, 3.0)\n  return %y\n}\n";
    float fx[2] = {3.0f, 1.0f};
    fc_tensor dx = {FC_F32, 1, {2}, fx};
    fc_tensor y = {0};
    if (run_cpu(ctx, divide, FC_NUMERICS_FAST, &dx, 1, &y) == FC_OK) {
        CHECK_NEAR(((float *)y.data)[0], (double)(3.0f * (1.0f / 3.0f)), 0);
        CHECK_NEAR(((float *)y.data)[1], (double)(1.0f / 3.0f), 0);
    }
    fc_tensor_release(&y);
    for (int i = 0; i < 2; i++) free(in[i].data);
}

/* FUSEC_NUMERICS_MEASURE=1: the CPU backend's f32 unary ops against
 * float64 over 2^20 points of their range, max error in f32 ulps (the
 * table of docs/NUMERICS.md). Bounds hold: each is checked to be within
 * twice what the table says. */
static void measure(fc_context *ctx) {
    static const struct { const char *op; double lo, hi, bound; } ops[] = {
        {"exp", -87, 88, 1.02}, {"log", 1e-30, 1e30, 1.0}, {"tanh", -10, 10, 1.4}, {"erf", -5, 5, 2.5},
        {"sigmoid", -30, 30, 2.1}, {"silu", -30, 30, 3.1}, {"gelu", -3, 8, 110}, {"gelu_tanh", -3, 8, 16},
        {"rsqrt", 1e-30, 1e30, 1.0}, {"sqrt", 0, 1e30, 0.5}, {"recip", 1e-30, 1e30, 0.5},
    };
    const int64_t n = 1 << 20;
    bool verbose = getenv("FUSEC_NUMERICS_MEASURE") != NULL;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char ir[160];
        snprintf(ir, sizeof ir, "graph u(%%x: f32[%lld]) {\n  %%y = %s(%%x)\n  return %%y\n}\n", (long long)n, ops[i].op);
        float *x = malloc(sizeof *x * (size_t)n);
        bool logscale = ops[i].lo > 0;
        for (int64_t j = 0; j < n; j++) {
            double t = (double)j / (double)(n - 1);
            x[j] = (float)(logscale ? exp(log(ops[i].lo) + t * (log(ops[i].hi) - log(ops[i].lo)))
                                    : ops[i].lo + t * (ops[i].hi - ops[i].lo));
        }
        fc_tensor in = {FC_F32, 1, {n}, x}, y = {0};
        fc_interp_tensor ex = {0}, fa = {0};
        if (run_cpu(ctx, ir, FC_NUMERICS_FAST, &in, 1, &y) == FC_OK) {
            reference(ctx, ir, &in, 1, &ex, &fa);
            double worst = 0;
            for (int64_t j = 0; ex.data && j < n; j++) {
                double w = ex.data[j], got = ((float *)y.data)[j];
                if (!isfinite(w) || fabs(w) < 0x1p-126) continue; /* subnormal results: absolute error */
                double ulp = ldexp(1.0, ilogb(w) - 23);
                if (fabs(got - w) / ulp > worst) worst = fabs(got - w) / ulp;
            }
            if (verbose) printf("measure: %-10s [%g, %g]: max %.2f f32 ulp\n", ops[i].op, ops[i].lo, ops[i].hi, worst);
            CHECK(worst <= 2 * ops[i].bound);
        }
        fc_tensor_release(&y);
        fc_interp_tensor_release(&ex);
        fc_interp_tensor_release(&fa);
        free(x);
    }
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_cuda_codegen(ctx);
    test_cpu(ctx);
    if (fc_device_built(FC_DEVICE_CPU)) measure(ctx);
    fc_context_free(ctx);
    return check_report("test_numerics");
}

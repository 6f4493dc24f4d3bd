/* test_program.c - fc_compile, fc_run and what a program emits.
 *
 * Everywhere (CI has no GPU): graphs compile (passes, codegen, NVRTC for
 * sm_90); the plan text ends with its total line; the PTX has entry points;
 * unbound symbols and other misuse give clear errors; allocation failures
 * anywhere in fc_compile are reported and leak nothing; fc_compare_outputs
 * applies the tolerance table. GEMMs: matmul + relu is one library call
 * and no kernel, three projections of one input are one call; each
 * library launch carries its GEMM's description, which survives the
 * serialized format byte for byte, and a corrupted or truncated one is
 * refused (one that would let cuBLASLt write past a buffer included).
 *
 * Without a GPU, fc_run fails cleanly (FC_ERR_RUNTIME, a message about
 * CUDA) and the numeric part prints "skipped". With a GPU every graph runs
 * through fc_program_run_host and is compared with fc_run_reference,
 * printing max_abs_err and max_rel_err per output; parameters returned as
 * they are and values returned twice go through fc_run itself. So do the
 * GEMMs: matmul + relu; the horizontal GEMM through fc_run with inputs at
 * two sets of addresses (the concatenated weights rebuilt when the weights
 * move), and decoded from its bytes; examples/gpt2_block.ir (B=1, T=64)
 * and examples/llama_block.ir (B=2, T=16), parsed with bindings, and
 * tests/layers/gpt2_4.ir (four blocks sharing their kernels). */
#include "check.h"
#include "desc_damage.h"
#include "test_util.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/ref/interp.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "ir/switches.h"
#include "passes/passes.h"

#include <math.h>
#include <stdlib.h>

/* ---- graphs ------------------------------------------------------------------ */

typedef fc_graph *(*graph_fn)(fc_context *ctx);

/* relu(x * y + 1) over [4, 256]: one pointwise kernel. */
static fc_graph *g_pointwise4(fc_context *ctx) { return g_pointwise(ctx, "pointwise", 4); }

/* softmax over rows of 1000: a row reduction. */
static fc_graph *g_softmax(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "softmax");
    fc_dim d[2] = {8, 1000};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d);
    fc_value *r = fc_softmax(g, x, -1);
    fc_graph_return(g, 1, &r);
    return g;
}

/* A bf16 pointwise chain with a broadcast bias. */
static fc_graph *g_bf16(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "bf16_gelu");
    fc_dim d[2] = {16, 384}, b[1] = {384};
    fc_value *x = fc_param(g, "x", FC_BF16, 2, d), *bias = fc_param(g, "b", FC_BF16, 1, b);
    fc_value *r = fc_gelu(g, fc_add(g, x, bias));
    fc_graph_return(g, 1, &r);
    return g;
}

/* An f16 row sum and an f32 layernorm side by side: two results. */
static fc_graph *g_two_results(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "two_results");
    fc_dim d[2] = {32, 128}, w[1] = {128};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d);
    fc_value *h = fc_param(g, "h", FC_F16, 2, d);
    fc_value *gw = fc_param(g, "w", FC_F32, 1, w), *gb = fc_param(g, "b", FC_F32, 1, w);
    int ax = 1;
    fc_value *outs[2] = {fc_layernorm(g, x, gw, gb, -1, 1e-5), fc_reduce_sum(g, fc_exp(g, h), 1, &ax, false)};
    fc_graph_return(g, 2, outs);
    return g;
}

/* A parameter returned as it is, a value returned twice, and a value that
 * is both returned and used (storage edge cases of the runtime). */
static fc_graph *g_aliases(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "aliases");
    fc_dim d[1] = {1000};
    fc_value *x = fc_param(g, "x", FC_F32, 1, d);
    fc_value *e = fc_exp(g, x);
    fc_value *s = fc_sin(g, e);
    fc_value *outs[4] = {x, e, s, e};
    fc_graph_return(g, 4, outs);
    return g;
}

/* Each graph fused, and some unfused too (one kernel per op), which
 * exercises the arena: every op's result is then an intermediate. */
static const struct {
    const char *name;
    graph_fn make;
    bool fuse;
} graphs[] = {
    {"pointwise", g_pointwise4, true},     {"softmax", g_softmax, true},
    {"bf16_gelu", g_bf16, true},           {"two_results", g_two_results, true},
    {"aliases", g_aliases, true},          {"softmax_unfused", g_softmax, false},
    {"two_results_unfused", g_two_results, false}, {"bf16_gelu_unfused", g_bf16, false},
};
#define NGRAPHS ((int)(sizeof graphs / sizeof graphs[0]))

/* ---- helpers ------------------------------------------------------------------- */

static bool ends_with_total_line(const char *text) {
    size_t n = strlen(text);
    if (n == 0 || text[n - 1] != '\n') return false;
    const char *last = text + n - 1;
    while (last > text && last[-1] != '\n') last--;
    return strncmp(last, "total: ", 7) == 0 && strstr(last, " kernels, ") && strstr(last, " library calls, ") &&
           strstr(last, " bytes of intermediates\n");
}

static unsigned long long rng = 0x243f6a8885a308d3ull;
static double uniform(double lo, double hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

/* Random inputs for every parameter of g (values of order one). */
static fc_tensor *random_inputs(fc_graph *g) {
    int n = fc_graph_num_params(g);
    fc_tensor *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) {
        param_type(&t[i], fc_graph_param(g, i));
        int64_t numel = fc_tensor_numel(&t[i]);
        t[i].data = malloc((size_t)(numel ? numel : 1) * fc_dtype_size(t[i].dtype));
        for (int64_t j = 0; j < numel; j++) fc_interp_store(t[i].dtype, t[i].data, j, uniform(-2, 2));
    }
    return t;
}

static void free_tensors(fc_tensor *t, int n) {
    for (int i = 0; t && i < n; i++) fc_tensor_release(&t[i]);
    free(t);
}

/* ---- everywhere ---------------------------------------------------------------------- */

static void test_compile(fc_context *ctx, const char *name, graph_fn make, bool fuse) {
    fc_graph *g = make(ctx);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.fuse = fuse;
    o.sm = 90; /* what CI checks, whatever the machine has */
    fc_program *p = NULL;
    fc_status st = fc_compile(g, &o, &p);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (!p) {
        fc_graph_free(g);
        return;
    }
    CHECK_EQ_INT(fc_program_sm(p), 90);

    char *plan = fc_program_plan_text(p);
    CHECK(plan && ends_with_total_line(plan));
    CHECK(plan && strstr(plan, "\narena: ") != NULL);
    if (plan && getenv("FUSEC_TEST_VERBOSE")) printf("%s:\n%s", name, plan);
    int kernels = 0;
    fc_program_count_launches(p, &kernels, NULL, NULL);
    CHECK(kernels >= 1);
    if (plan && kernels >= 1) CHECK(strncmp(plan, "launch 0: kernel ", 17) == 0);
    fc_free(plan);

    char *src = fc_program_cuda_source(p);
    CHECK(src && strstr(src, "__global__") != NULL);
    fc_free(src);
    char *ptx = fc_program_ptx(p);
    if (!ptx) fprintf(stderr, "%s: ptx: %s\n", name, fc_last_error(ctx));
    CHECK(ptx && strstr(ptx, ".entry") != NULL && strstr(ptx, ".target sm_90") != NULL);
    fc_free(ptx);
    const fc_bytes *cubin = fc_program_cubin(p);
    CHECK(cubin && cubin->size > 64 && memcmp(cubin->data, "\x7f" "ELF", 4) == 0);

    /* The plan's memory figures are the ones printed. */
    const fc_plan *pl = fc_program_plan(p);
    CHECK(pl->arena_bytes % 256 == 0);
    CHECK(pl->arena_bytes <= pl->intermediate_bytes + 256 * (int64_t)pl->ngroups);
    /* Unfused, a chain of kernels reuses arena memory. */
    if (!fuse && kernels >= 4) CHECK(pl->arena_bytes > 0 && pl->arena_bytes < pl->intermediate_bytes);

    /* The user's graph is untouched: compiling twice gives the same text. */
    fc_program *q = NULL;
    CHECK_EQ_INT(fc_compile(g, &o, &q), FC_OK);
    char *s1 = fc_program_cuda_source(p), *s2 = q ? fc_program_cuda_source(q) : NULL;
    CHECK(s1 && s2 && strcmp(s1, s2) == 0);
    fc_free(s1);
    fc_free(s2);
    fc_program_free(q);
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_unbound_symbol(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "dynamic");
    fc_dim d[2] = {fc_sym(g, "B"), 64};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d);
    fc_value *r = fc_tanh(g, x);
    fc_graph_return(g, 1, &r);
    fc_program *p = (fc_program *)&p; /* must be set to NULL */
    CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_ERR_INPUT);
    CHECK(p == NULL);
    CHECK_STR(fc_last_error(ctx), "symbol B is unbound: bind it (--bind B=...) to compile");
    fc_graph_free(g);

    /* Bound, it compiles. */
    g = fc_graph_new(ctx, "bound");
    CHECK_EQ_INT(fc_graph_bind(g, "B", 3), FC_OK);
    fc_dim d2[2] = {fc_sym(g, "B"), 64};
    x = fc_param(g, "x", FC_F32, 2, d2);
    r = fc_tanh(g, x);
    fc_graph_return(g, 1, &r);
    CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_OK);
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_misuse(fc_context *ctx) {
    fc_program *p = NULL;
    CHECK_EQ_INT(fc_compile(NULL, NULL, &p), FC_ERR_USAGE);
    fc_graph *g = fc_graph_new(ctx, "no_return");
    fc_dim d[1] = {4};
    fc_exp(g, fc_param(g, "x", FC_F32, 1, d));
    CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "no results") != NULL);
    CHECK_EQ_INT(fc_compile(g, NULL, NULL), FC_ERR_USAGE);
    fc_graph_free(g);

    /* A graph with a builder error: its status comes back. */
    g = fc_graph_new(ctx, "broken");
    fc_dim a[1] = {4}, b[1] = {5};
    fc_value *r = fc_add(g, fc_param(g, "x", FC_F32, 1, a), fc_param(g, "y", FC_F32, 1, b));
    fc_graph_return(g, 1, &r);
    CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_ERR_INPUT);
    fc_graph_free(g);

    fc_program_free(NULL);
    CHECK(fc_program_plan_text(NULL) == NULL);
    CHECK_EQ_INT(fc_run(NULL, NULL, 0, NULL, 0, NULL), FC_ERR_USAGE);
}

static fc_graph *g_qkv_f32(fc_context *ctx);

/* Every allocation fc_compile makes through the context can fail: the
 * status is FC_ERR_NOMEM and nothing leaks (ASan's leak check). */
static void test_alloc_failures(graph_fn make) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = make(ctx);
    int failures = 0;
    fc_program *p = compile_through_alloc_failures(ctx, g, NULL, &failures);
    CHECK(p != NULL);
    fc_program_free(p);
    CHECK(failures > 10);
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* The tolerance rule on tensors made by hand. */
static void test_compare(fc_context *ctx) {
    float a[4] = {1.0f, -2.0f, 0.0f, NAN}, b[4] = {1.0f, -2.0f, 0.0f, NAN};
    fc_tensor got = {FC_F32, 1, {4}, a}, want = {FC_F32, 1, {4}, b};
    fc_output_diff d;
    CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &d), FC_OK);
    CHECK(d.pass && d.nbad == 0 && d.max_abs_err == 0);

    /* Inside: 5e-6 relative on 1.0, and an absolute 5e-6 where want is 0. */
    a[0] = 1.000005f;
    a[2] = 5e-6f;
    CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &d), FC_OK);
    CHECK(d.pass);
    CHECK_NEAR(d.max_abs_err, 5e-6, 1e-7);
    CHECK_NEAR(d.max_rel_err, 5e-6, 1e-7); /* want == 0 does not count */
    char line[512];
    fc_output_diff_format(&d, 0, line, sizeof line);
    CHECK(strstr(line, "output 0 (f32, 4 elements): max_abs_err ") == line && strstr(line, ": ok"));

    /* Outside: -2 vs -2.001; a NaN against a number. */
    a[1] = -2.001f;
    a[3] = 1.0f;
    CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &d), FC_ERR_RUNTIME);
    CHECK(!d.pass && d.nbad == 2);
    CHECK(isinf(d.max_abs_err));
    CHECK_EQ_INT(d.worst, 3);
    CHECK(strstr(fc_last_error(ctx), "output 0 (f32, 4 elements)") != NULL);
    CHECK(strstr(fc_last_error(ctx), "FAIL (2 elements out of tolerance") != NULL);

    /* bf16: one ulp apart passes, four do not. */
    uint16_t x[2] = {fc_f32_to_bf16(1.5f), fc_f32_to_bf16(100.0f)};
    uint16_t y[2] = {(uint16_t)(x[0] + 1), x[1]};
    fc_tensor bg = {FC_BF16, 1, {2}, x}, bw = {FC_BF16, 1, {2}, y};
    CHECK_EQ_INT(fc_compare_outputs(ctx, &bg, &bw, 1, &d), FC_OK);
    y[1] = (uint16_t)(x[1] + 4);
    CHECK_EQ_INT(fc_compare_outputs(ctx, &bg, &bw, 1, &d), FC_ERR_RUNTIME);
    CHECK_EQ_INT(d.worst, 1);

    /* Integers are exact, even past 2^53. */
    int64_t i1[1] = {(1ll << 60) + 1}, i2[1] = {1ll << 60};
    fc_tensor ig = {FC_I64, 1, {1}, i1}, iw = {FC_I64, 1, {1}, i2};
    CHECK_EQ_INT(fc_compare_outputs(ctx, &ig, &iw, 1, &d), FC_ERR_RUNTIME);
    CHECK(d.nbad == 1);
    i1[0] = i2[0];
    CHECK_EQ_INT(fc_compare_outputs(ctx, &ig, &iw, 1, &d), FC_OK);

    /* A shape that differs; several outputs, the second failing. */
    fc_tensor g2 = {FC_F32, 2, {2, 2}, b};
    CHECK_EQ_INT(fc_compare_outputs(ctx, &g2, &want, 1, &d), FC_ERR_RUNTIME);
    CHECK(!d.shape_ok && !d.pass);
    CHECK_STR(fc_last_error(ctx), "output 0 is f32[2, 2], the reference's is f32[4]");
    fc_tensor gs[2] = {want, g2}, ws[2] = {want, want};
    fc_output_diff ds[2];
    CHECK_EQ_INT(fc_compare_outputs(ctx, gs, ws, 2, ds), FC_ERR_RUNTIME);
    CHECK(ds[0].pass && !ds[1].pass);
    CHECK(strstr(fc_last_error(ctx), "output 1 ") == fc_last_error(ctx));
    CHECK_EQ_INT(fc_compare_outputs(ctx, NULL, ws, 1, ds), FC_ERR_USAGE);

    /* The table. */
    CHECK_NEAR(fc_dtype_tolerance(FC_F32).rel, 1e-5, 0);
    CHECK_NEAR(fc_dtype_tolerance(FC_BF16).rel, 1.6e-2, 0);
    CHECK_NEAR(fc_dtype_tolerance(FC_I32).abs, 0, 0);
}

/* ---- GEMMs --------------------------------------------------------------------------- */

/* relu(a @ b): after the epilogue pass one gemm applies the relu, so the
 * program is one cuBLASLt call and no kernel. */
static fc_graph *g_matmul_relu(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "mm");
    fc_dim ad[2] = {64, 32}, bd[2] = {32, 16};
    fc_value *a = fc_param(g, "a", FC_F32, 2, ad), *b = fc_param(g, "b", FC_F32, 2, bd); /* in this order */
    fc_value *r = fc_relu(g, fc_matmul(g, a, b));
    fc_graph_return(g, 1, &r);
    return g;
}

/* Three projections of one input, each with its bias, returned as three
 * results: horizontal fusion makes them one gemm over the concatenated
 * weights. wt: the weights are stored [N_i, K] and transposed in the graph
 * (PyTorch's Linear layout), so the concatenation stacks rows; otherwise
 * [K, N_i], and it places column blocks. */
static fc_graph *g_qkv(fc_context *ctx, fc_dtype dt, bool wt) {
    fc_graph *g = fc_graph_new(ctx, wt ? "qkv_wt" : "qkv");
    fc_dim xd[3] = {2, 24, 64};
    fc_value *x = fc_param(g, "x", dt, 3, xd), *outs[3];
    static const char *const wn[3] = {"wq", "wk", "wv"}, *const bn[3] = {"bq", "bk", "bv"};
    static const int64_t cols[3] = {64, 32, 48};
    fc_value *w[3], *b[3];
    for (int i = 0; i < 3; i++) {
        fc_dim wd[2] = {wt ? cols[i] : 64, wt ? 64 : cols[i]}, bd[1] = {cols[i]};
        w[i] = fc_param(g, wn[i], dt, 2, wd);
        b[i] = fc_param(g, bn[i], dt, 1, bd);
    }
    static const int perm[2] = {1, 0};
    for (int i = 0; i < 3; i++) outs[i] = fc_add(g, fc_matmul(g, x, wt ? fc_permute(g, w[i], 2, perm) : w[i]), b[i]);
    fc_graph_return(g, 3, outs);
    return g;
}

static fc_graph *g_qkv_f32(fc_context *ctx) { return g_qkv(ctx, FC_F32, false); }

static void test_matmul(fc_context *ctx) {
    fc_graph *g = g_matmul_relu(ctx);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    fc_program *p = NULL;
    CHECK_EQ_INT(fc_compile(g, &o, &p), FC_OK);
    char *plan = p ? fc_program_plan_text(p) : NULL;
    CHECK_STR(plan, "launch 0: library gemm ops: gemm[relu] -> f32\n"
                    "arena: 0 bytes peak (0 bytes if every intermediate had its own buffer)\n"
                    "total: 0 kernels, 1 library calls, 0 bytes of intermediates\n");
    fc_free(plan);
    /* The description the runtime runs: positions of a, b and the result
     * among the launch's arguments, and the plan of the product. */
    const fc_gemm_desc *gd = p ? fc_program_gemm(fc_program_desc_of(p), 0) : NULL;
    CHECK(gd != NULL);
    if (gd) {
        const fc_launch *l = fc_program_launch(p, 0);
        CHECK_EQ_INT(l->nargs, 3);
        const fc_program_desc *d = fc_program_desc_of(p); /* value ids are the program's */
        CHECK_EQ_INT(l->args[gd->op_arg[0]], d->params[0].value);
        CHECK_EQ_INT(l->args[gd->op_arg[1]], d->params[1].value);
        CHECK_EQ_INT(l->args[gd->out_arg], d->outputs[0].value);
        CHECK_EQ_INT(gd->plan.M, 64);
        CHECK_EQ_INT(gd->plan.N, 16);
        CHECK_EQ_INT(gd->plan.K, 32);
        CHECK_EQ_INT(gd->plan.act, FC_GEMM_ACT_RELU);
    }
    fc_program_free(p);
    fc_graph_free(g);

    /* Horizontal fusion: one library call for the three projections. */
    for (int wt = 0; wt < 2; wt++) {
        g = g_qkv(ctx, wt ? FC_BF16 : FC_F32, wt);
        p = NULL;
        CHECK_EQ_INT(fc_compile(g, &o, &p), FC_OK);
        int library = 0;
        fc_program_count_launches(p, NULL, &library, NULL);
        CHECK_EQ_INT(library, 1);
        plan = p ? fc_program_plan_text(p) : NULL;
        CHECK(plan && strstr(plan, wt ? ": library gemm ops: gemm[trans_b,x3,bias] -> bf16\n"
                                      : ": library gemm ops: gemm[x3,bias] -> f32\n"));
        if (plan && getenv("FUSEC_TEST_VERBOSE")) printf("%s", plan);
        fc_free(plan);
        fc_program_free(p);
        fc_graph_free(g);
    }
}

/* The serialized program with GEMMs: encode, decode, encode gives the same
 * bytes; every truncation of the records before the source is refused and
 * every byte flipped there is refused or decodes to a valid program (ASan
 * watches the reads); every allocation of the decoder fails in turn. */
static void test_gemm_serialization(fc_context *ctx) {
    fc_graph *gs[3] = {g_matmul_relu(ctx), g_qkv(ctx, FC_F32, false), g_qkv(ctx, FC_BF16, true)};
    fc_cache_key k0 = fc_program_cache_key("text", gs[1], 90, false, true, false, FC_PRECISION_AS_WRITTEN, FC_NUMERICS_FAST, NULL, 0, 13, 0),
                 k1 = fc_program_cache_key("text", gs[1], 90, false, true, true, FC_PRECISION_AS_WRITTEN, FC_NUMERICS_FAST, NULL, 0, 13, 0);
    CHECK(memcmp(&k0, &k1, sizeof k0) != 0);
    /* Two precisions never share a program cache entry. */
    for (int pr = 1; pr < FC_PRECISION_COUNT; pr++) {
        fc_cache_key kp = fc_program_cache_key("text", gs[1], 90, false, true, false, (fc_precision)pr, FC_NUMERICS_FAST, NULL, 0, 13, 0);
        CHECK(memcmp(&k0, &kp, sizeof k0) != 0);
    }
    fc_cache_key k2 = fc_program_cache_key("text", gs[1], 90, false, true, false, FC_PRECISION_AS_WRITTEN, FC_NUMERICS_EAGER, NULL, 0, 13, 0);
    CHECK(memcmp(&k0, &k2, sizeof k0) != 0); /* eager numerics: other kernels, another entry */
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    for (int k = 0; k < 3; k++) {
        fc_program *p = NULL;
        /* The f32 QKV program asks for TF32: the flag goes through the
         * bytes (and, through the program cache's key, never shares an
         * entry with the same graph compiled without it). */
        o.allow_tf32 = k == 1;
        /* The bf16 QKV program under --precision=bf16 (the same plan: it
         * is bf16 already): the precision goes through the bytes too. */
        o.precision = k == 2 ? FC_PRECISION_BF16 : FC_PRECISION_AS_WRITTEN;
        o.numerics = k == 2 ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST;
        CHECK_EQ_INT(fc_compile(gs[k], &o, &p), FC_OK);
        if (p) CHECK_EQ_INT(fc_program_desc_of(p)->tf32, k == 1);
        if (p) CHECK_EQ_INT(fc_program_desc_of(p)->numerics, k == 2 ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST);
        const fc_program_desc *d = p ? fc_program_desc_of(p) : NULL;
        fc_bytes a = {NULL, 0}, b = {NULL, 0};
        if (!d || fc_program_desc_encode(ctx, d, &a) != FC_OK) {
            CHECK(false);
            fc_program_free(p);
            continue;
        }
        fc_program_desc back;
        fc_status st = fc_program_desc_decode(ctx, a.data, a.size, &back);
        if (st != FC_OK) fprintf(stderr, "decode: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        if (st == FC_OK) {
            int found = 0;
            for (int i = 0; i < back.src.nlaunches; i++) found += fc_program_gemm(&back, i) != NULL;
            CHECK_EQ_INT(found, 1);
            CHECK_EQ_INT(back.tf32, k == 1);
            CHECK_EQ_INT(back.precision, k == 2 ? FC_PRECISION_BF16 : FC_PRECISION_AS_WRITTEN);
            CHECK_EQ_INT(back.numerics, k == 2 ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST);
            CHECK_EQ_INT(fc_program_desc_encode(ctx, &back, &b), FC_OK);
            CHECK(a.size == b.size && memcmp(a.data, b.data, a.size) == 0);
            fc_program_desc_release(&back);
            fc_bytes_free(&b);
        }
        /* The records end where the source's length starts. */
        size_t end = a.size - strlen(d->src.source) - 4;
        check_desc_damage(ctx, &a, end + 1, end);
        fc_bytes_free(&a);
        fc_program_free(p);
    }
    for (int k = 0; k < 3; k++) fc_graph_free(gs[k]);

    /* A GEMM whose result would not fit its buffer is refused: the bytes of
     * the mm program with M raised from 64 to 65 (found by its value). */
    fc_graph *g = g_matmul_relu(ctx);
    fc_program *p = NULL;
    o.precision = FC_PRECISION_AS_WRITTEN;
    CHECK_EQ_INT(fc_compile(g, &o, &p), FC_OK);
    fc_bytes a = {NULL, 0};
    if (p && fc_program_desc_encode(ctx, fc_program_desc_of(p), &a) == FC_OK) {
        /* M, N, K = 64, 16, 32 as three consecutive little-endian i64. */
        uint8_t mnk[24] = {64, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 32};
        uint8_t *at = NULL;
        for (size_t i = 0; i + sizeof mnk <= a.size && !at; i++)
            if (!memcmp(a.data + i, mnk, sizeof mnk)) at = a.data + i;
        CHECK(at != NULL);
        if (at) {
            at[0] = 65;
            fc_program_desc x;
            CHECK_EQ_INT(fc_program_desc_decode(ctx, a.data, a.size, &x), FC_ERR_INPUT);
            CHECK(strstr(fc_last_error(ctx), "launch 0: its GEMM: ") != NULL);
            printf("a GEMM out of its buffer: %s\n", fc_last_error(ctx));
        }
    }
    fc_bytes_free(&a);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- without a GPU ------------------------------------------------------------------- */

static void test_run_without_gpu(fc_context *ctx) {
    fc_graph *g = g_pointwise4(ctx);
    fc_program *p = compile_checked(g, NULL);
    CHECK_EQ_INT(fc_program_sm(p), 90); /* sm 0 without a device: sm_90 */
    /* Pointers that would crash if anything touched them. */
    void *in[2] = {(void *)(uintptr_t)0x1000, (void *)(uintptr_t)0x2000}, *out[1] = {(void *)(uintptr_t)0x3000};
    fc_status st = fc_run(p, in, 2, out, 1, NULL);
    CHECK_EQ_INT(st, FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "CUDA") != NULL);
    printf("fc_run without a GPU: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(fc_run(p, in, 1, out, 1, NULL), FC_ERR_USAGE); /* wrong count first */

    fc_tensor *host = random_inputs(g);
    fc_tensor res[1];
    CHECK_EQ_INT(fc_program_run_host(p, host, 2, res, 1, NULL, 0), FC_ERR_RUNTIME);
    CHECK(res[0].data == NULL);
    free_tensors(host, 2);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- with a GPU ---------------------------------------------------------------------- */

/* Run a graph on the GPU and with the reference; compare. */
static void run_and_compare(fc_context *ctx, const char *name, graph_fn make, bool fuse) {
    fc_graph *g = make(ctx);
    fc_program *p = NULL;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.fuse = fuse;
    fc_status st = fc_compile(g, &o, &p);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK) {
        fc_graph_free(g);
        return;
    }
    int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_tensor *in = random_inputs(g);
    fc_tensor *got = calloc((size_t)nout, sizeof *got), *want = calloc((size_t)nout, sizeof *want);
    double ms = -1;
    st = fc_program_run_host(p, in, nin, got, nout, &ms, 10);
    if (st != FC_OK) fprintf(stderr, "%s: run: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(fc_run_reference(g, in, nin, want, nout), FC_OK);
    if (st == FC_OK) {
        CHECK(ms > 0);
        fc_output_diff *d = calloc((size_t)nout, sizeof *d);
        st = fc_compare_outputs(ctx, got, want, nout, d);
        for (int k = 0; k < nout; k++) {
            char line[512];
            printf("%s: %s\n", name, fc_output_diff_format(&d[k], k, line, sizeof line));
        }
        printf("%s: median %.4f ms\n", name, ms);
        CHECK_EQ_INT(st, FC_OK);
        free(d);
    }
    free_tensors(got, nout);
    free_tensors(want, nout);
    free_tensors(in, nin);
    fc_program_free(p);
    fc_graph_free(g);
}

/* fc_run itself, with device buffers and a stream of the caller's: runs
 * twice (the cached module and arena), results that are parameters or
 * returned twice come back right. */
static void test_fc_run_device(fc_context *ctx) {
    fc_graph *g = g_aliases(ctx);
    fc_program *p = compile_checked(g, NULL);
    fc_cuda_device *dev = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
    if (!p || !dev) {
        fc_cuda_device_close(dev);
        fc_program_free(p);
        fc_graph_free(g);
        return;
    }
    enum { N = 1000 };
    float x[N], out[4][N];
    for (int i = 0; i < N; i++) x[i] = (float)uniform(-1, 1);
    CUdeviceptr dx, dout[4];
    CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof x, &dx), FC_OK);
    for (int k = 0; k < 4; k++) CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof x, &dout[k]), FC_OK);
    CHECK_EQ_INT(fc_cuda_upload(dev, dx, x, sizeof x), FC_OK);
    void *in[1] = {(void *)(uintptr_t)dx}, *outs[4];
    for (int k = 0; k < 4; k++) outs[k] = (void *)(uintptr_t)dout[k];
    for (int rep = 0; rep < 2; rep++) {
        for (int k = 0; k < 4; k++) CHECK_EQ_INT(fc_cuda_memset_async(dev, dout[k], 0, sizeof x, NULL), FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        fc_status st = fc_run(p, in, 1, outs, 4, dev->stream);
        if (st != FC_OK) fprintf(stderr, "fc_run: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        for (int k = 0; k < 4; k++) CHECK_EQ_INT(fc_cuda_download(dev, out[k], dout[k], sizeof x), FC_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            double e = exp((double)x[i]), s = sin((double)(float)e);
            bad += out[0][i] != x[i];
            bad += fabs(out[1][i] - e) > 1e-5 * e;
            bad += fabs(out[2][i] - s) > 1e-5;
            bad += out[3][i] != out[1][i];
        }
        CHECK_EQ_INT(bad, 0);
    }
    /* The default stream (NULL) works too. */
    CHECK_EQ_INT(fc_run(p, in, 1, outs, 4, NULL), FC_OK);
    CHECK_EQ_INT(fc_cuda_device_sync(dev), FC_OK);
    fc_cuda_free(dev, dx);
    for (int k = 0; k < 4; k++) fc_cuda_free(dev, dout[k]);
    fc_cuda_device_close(dev);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- GEMMs and whole blocks on the GPU ------------------------------------------------ */

/* A parameter's inputs: uniform in [lo, hi]. */
typedef struct input_range {
    const char *name;
    double lo, hi;
} input_range;

/* Inputs for g: each parameter uniform in its range in `ranges` (by name),
 * [-1, 1] when it has none. */
static fc_tensor *ranged_inputs(fc_graph *g, const input_range *ranges, int nranges) {
    int n = fc_graph_num_params(g);
    fc_tensor *t = random_inputs(g);
    for (int i = 0; i < n; i++) {
        const char *name = g->params[i]->name ? g->params[i]->name : "";
        double lo = -1, hi = 1;
        /* By name, or by a layer's name for it ("l3_ln1_w": "ln1_w"). */
        const size_t nl = strlen(name);
        for (int r = 0; r < nranges; r++) {
            const size_t nr = strlen(ranges[r].name);
            if (!strcmp(ranges[r].name, name) || (nl > nr && name[nl - nr - 1] == '_' && !strcmp(name + nl - nr, ranges[r].name)))
                lo = ranges[r].lo, hi = ranges[r].hi;
        }
        for (int64_t j = 0; j < fc_tensor_numel(&t[i]); j++) fc_interp_store(t[i].dtype, t[i].data, j, uniform(lo, hi));
    }
    return t;
}

/* Compare outputs with the reference's; print one line per output. */
static void compare_and_print(fc_context *ctx, const char *name, const fc_tensor *got, const fc_tensor *want,
                              int nout) {
    fc_output_diff *d = calloc((size_t)nout, sizeof *d);
    fc_status st = fc_compare_outputs(ctx, got, want, nout, d);
    for (int k = 0; k < nout; k++) {
        char line[512];
        printf("%s: %s\n", name, fc_output_diff_format(&d[k], k, line, sizeof line));
    }
    CHECK_EQ_INT(st, FC_OK);
    free(d);
}

/* Compile g, run it through fc_program_run_host, compare with the
 * reference. A library call with no CUDA path yet (attention, until its
 * kernel lands) is a note, not a failure: the run must then say so before
 * queueing anything. */
static void run_graph_on_gpu(fc_context *ctx, const char *name, fc_graph *g, const input_range *ranges,
                             int nranges) {
    fc_program *p = NULL;
    fc_status st = fc_compile(g, NULL, &p);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (!p) return;
    int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g), library = 0;
    fc_program_count_launches(p, NULL, &library, NULL);
    fc_tensor *in = ranged_inputs(g, ranges, nranges);
    fc_tensor *got = calloc((size_t)nout, sizeof *got), *want = calloc((size_t)nout, sizeof *want);
    double ms = -1;
    st = fc_program_run_host(p, in, nin, got, nout, &ms, 10);
    if (st == FC_ERR_UNSUPPORTED && strstr(fc_last_error(ctx), "attention has no CUDA implementation")) {
        printf("%s: not compared: %s\n", name, fc_last_error(ctx));
    } else {
        if (st != FC_OK) fprintf(stderr, "%s: run: %s\n", name, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        CHECK_EQ_INT(fc_run_reference(g, in, nin, want, nout), FC_OK);
        if (st == FC_OK) {
            compare_and_print(ctx, name, got, want, nout);
            printf("%s: %d library calls, %d cuBLASLt heuristic queries, median %.4f ms\n", name, library,
                   fc_program_gemm_queries(p), ms);
            /* One query per distinct problem, on the first run only. */
            /* One algorithm per GEMM problem: a heuristic query, or a
             * choice from the on-disk cache (a warm cache answers all). */
            int chosen = fc_program_gemm_queries(p) + fc_program_gemm_disk_hits(p);
            CHECK(chosen >= 1 && chosen <= library);
        }
    }
    free_tensors(got, nout);
    free_tensors(want, nout);
    free_tensors(in, nin);
    fc_program_free(p);
}

static void test_matmul_gpu(fc_context *ctx) {
    fc_graph *g = g_matmul_relu(ctx);
    run_graph_on_gpu(ctx, "mm (gemm[relu])", g, NULL, 0);
    fc_graph_free(g);
}

/*
 * The example blocks, parsed with bindings, at the scale of a model's
 * tensors: weights of standard deviation 0.02 (GPT-2's initialization),
 * norm weights near 1, small biases, activations of order one. Random
 * weights in [-2, 2] would make the outputs of order 10^3, where f32
 * summation order alone exceeds the f32 tolerance's absolute term.
 *
 * GPT-2's fc_w is ten times smaller still, which keeps gelu_tanh's inputs
 * within a few tenths: cuBLASLt evaluates the GELU epilogue's tanh with
 * its own approximation, and at inputs of order one its error could reach
 * the f32 tolerance after the 3072-long sum that follows. The epilogue's
 * accuracy is tested on its own in tests/test_gemm.c; here a misplaced
 * operand, a wrong stride or a stale workspace would still be off by
 * 10^-2, a thousand times the tolerance.
 */
#define W02 -0.0346, 0.0346 /* uniform with standard deviation 0.02 */

static void test_examples_gpu(fc_context *ctx) {
    static const input_range gpt2[] = {
        {"x", -1, 1},          {"ln1_w", 0.9, 1.1},    {"ln1_b", -0.02, 0.02}, {"attn_w", W02},
        {"attn_b", -0.02, 0.02}, {"proj_w", W02},      {"proj_b", -0.02, 0.02}, {"ln2_w", 0.9, 1.1},
        {"ln2_b", -0.02, 0.02}, {"fc_w", -0.00346, 0.00346}, {"fc_b", -0.02, 0.02}, {"out_w", W02},
        {"out_b", -0.02, 0.02},
    };
    static const input_range llama[] = {
        {"x", -1, 1},     {"cos", -1, 1},   {"sin", -1, 1},       {"attn_norm_w", 0.9, 1.1},
        {"wq", W02},      {"wk", W02},      {"wv", W02},          {"wo", W02},
        {"ffn_norm_w", 0.9, 1.1}, {"w_gate", W02}, {"w_up", W02}, {"w_down", W02},
    };
    static const struct {
        const char *file;
        fc_binding bind[2];
        const input_range *ranges;
        int nranges;
    } examples[] = {
        {"examples/gpt2_block.ir", {{"B", 1}, {"T", 64}}, gpt2, (int)(sizeof gpt2 / sizeof gpt2[0])},
        {"examples/llama_block.ir", {{"B", 2}, {"T", 16}}, llama, (int)(sizeof llama / sizeof llama[0])},
        /* Four blocks: each layer's launches run the first layer's kernels. */
        {"tests/layers/gpt2_4.ir", {{"B", 1}, {"T", 64}}, gpt2, (int)(sizeof gpt2 / sizeof gpt2[0])},
    };
    const char *src = getenv("FUSEC_SRC");
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) {
        char path[512], name[128];
        snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", examples[e].file);
        snprintf(name, sizeof name, "%s (B=%lld, T=%lld)", examples[e].file, (long long)examples[e].bind[0].value,
                 (long long)examples[e].bind[1].value);
        fc_graph *g = NULL;
        fc_status st = fc_parse_file(ctx, path, NULL, examples[e].bind, 2, &g);
        if (st != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        if (g) run_graph_on_gpu(ctx, name, g, examples[e].ranges, examples[e].nranges);
        fc_graph_free(g);
    }
}

/* Device copies of host tensors (fc_run's pointers); NULL entries on failure. */
static void **upload_all(fc_cuda_device *dev, const fc_tensor *t, int n) {
    void **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)fc_tensor_numel(&t[i]) * fc_dtype_size(t[i].dtype);
        CUdeviceptr dp = 0;
        fc_status st = fc_cuda_alloc(dev, bytes, &dp);
        if (st == FC_OK) st = fc_cuda_upload(dev, dp, t[i].data, bytes);
        CHECK_EQ_INT(st, FC_OK);
        ptrs[i] = (void *)(uintptr_t)dp;
    }
    return ptrs;
}

static void free_all(fc_cuda_device *dev, void **ptrs, int n) {
    for (int i = 0; ptrs && i < n; i++)
        if (ptrs[i]) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)ptrs[i]);
    free(ptrs);
}

/* Run p on device inputs `in` into `out` (fc_run, on the device's stream)
 * and compare the results with `want`. */
static void run_device_and_compare(fc_context *ctx, const char *name, fc_program *p, fc_cuda_device *dev,
                                   void **in, void **out, const fc_tensor *want) {
    int nin = fc_program_num_inputs(p), nout = fc_program_num_outputs(p);
    for (int k = 0; k < nout; k++) {
        size_t bytes = (size_t)fc_tensor_numel(&want[k]) * fc_dtype_size(want[k].dtype);
        CHECK_EQ_INT(fc_cuda_memset_async(dev, (CUdeviceptr)(uintptr_t)out[k], 0xff, bytes, NULL), FC_OK);
    }
    fc_status st = fc_run(p, in, nin, out, nout, dev->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(dev, NULL);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_tensor *got = calloc((size_t)nout, sizeof *got);
    for (int k = 0; k < nout && st == FC_OK; k++) {
        got[k] = want[k];
        size_t bytes = (size_t)fc_tensor_numel(&want[k]) * fc_dtype_size(want[k].dtype);
        got[k].data = malloc(bytes);
        st = fc_cuda_download(dev, got[k].data, (CUdeviceptr)(uintptr_t)out[k], bytes);
        CHECK_EQ_INT(st, FC_OK);
    }
    if (st == FC_OK) compare_and_print(ctx, name, got, want, nout);
    for (int k = 0; k < nout; k++) free(got[k].data);
    free(got);
}

/*
 * The horizontal GEMM (three projections of one input, one cuBLASLt call
 * over weights concatenated on the first run) through fc_run with two
 * sets of inputs at different addresses, weights included: the runs
 * alternate A, B, A, so the concatenation must be rebuilt each time the
 * weights move (the constant-weights contract: a weight at a new address
 * is copied again). The same program decoded from its bytes (as a cache
 * entry or an AOT file holds it) runs too, with a handle of its own.
 */
static void test_horizontal_gpu(fc_context *ctx, fc_dtype dt, bool wt) {
    fc_graph *g = g_qkv(ctx, dt, wt);
    const char *label = wt ? "qkv W^T (bf16)" : "qkv W (f32)";
    fc_program *p = NULL, *q = NULL;
    CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_OK);
    fc_cuda_device *dev = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
    if (p) {
        /* q: p's description through the serialized format. */
        fc_bytes blob = {NULL, 0};
        fc_program_desc desc;
        CHECK_EQ_INT(fc_program_desc_encode(ctx, fc_program_desc_of(p), &blob), FC_OK);
        CHECK_EQ_INT(fc_program_desc_decode(ctx, blob.data, blob.size, &desc), FC_OK);
        const int nk = fc_program_nkernels(p);
        fc_bytes *copy = calloc((size_t)nk + 1, sizeof *copy);
        for (int k = 0; k < nk; k++) {
            const fc_bytes *c = fc_program_kernel_cubin(p, k);
            copy[k] = (fc_bytes){malloc(c->size), c->size};
            memcpy(copy[k].data, c->data, c->size);
        }
        CHECK_EQ_INT(fc_program_from_desc(ctx, &desc, copy, FC_PROGRAM_FILE, &q), FC_OK);
        fc_bytes_free(&blob);
    }
    if (!p || !q || !dev) {
        fc_program_free(q);
        fc_program_free(p);
        fc_cuda_device_close(dev);
        fc_graph_free(g);
        return;
    }
    int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    static const input_range ranges[] = {{"x", -1, 1},       {"wq", -0.1, 0.1},  {"wk", -0.1, 0.1},
                                         {"wv", -0.1, 0.1},  {"bq", -0.1, 0.1}, {"bk", -0.1, 0.1},
                                         {"bv", -0.1, 0.1}};
    fc_tensor *host[2], want[2][3];
    memset(want, 0, sizeof want);
    void **dev_in[2];
    for (int s = 0; s < 2; s++) {
        host[s] = ranged_inputs(g, ranges, (int)(sizeof ranges / sizeof ranges[0]));
        CHECK_EQ_INT(fc_run_reference(g, host[s], nin, want[s], nout), FC_OK);
        dev_in[s] = upload_all(dev, host[s], nin);
    }
    void **dev_out = calloc((size_t)nout, sizeof *dev_out);
    for (int k = 0; k < nout; k++) {
        CUdeviceptr dp = 0;
        CHECK_EQ_INT(fc_cuda_alloc(dev, (size_t)fc_tensor_numel(&want[0][k]) * fc_dtype_size(dt), &dp), FC_OK);
        dev_out[k] = (void *)(uintptr_t)dp;
    }
    static const int order[3] = {0, 1, 0};
    int queries = 0;
    for (int r = 0; r < 3; r++) {
        char name[96];
        snprintf(name, sizeof name, "%s, run %d (inputs %c)", label, r + 1, "AB"[order[r]]);
        run_device_and_compare(ctx, name, p, dev, dev_in[order[r]], dev_out, want[order[r]]);
        /* Every pointer is 256-aligned: the same problem, no new query. */
        if (r == 0) queries = fc_program_gemm_queries(p) + fc_program_gemm_disk_hits(p);
        CHECK_EQ_INT(fc_program_gemm_queries(p) + fc_program_gemm_disk_hits(p), queries);
    }
    CHECK_EQ_INT(queries, 1);
    char name[96];
    snprintf(name, sizeof name, "%s, decoded program (inputs B)", label);
    run_device_and_compare(ctx, name, q, dev, dev_in[1], dev_out, want[1]);
    for (int s = 0; s < 2; s++) {
        free_all(dev, dev_in[s], nin);
        free_tensors(host[s], nin);
        for (int k = 0; k < nout; k++) fc_tensor_release(&want[s][k]);
    }
    free_all(dev, dev_out, nout);
    fc_program_free(q);
    fc_program_free(p);
    fc_cuda_device_close(dev);
    fc_graph_free(g);
}

/* The switches that change the generated source but no NVRTC option (the
 * table's `source` column, ir/switches.def) reach the program cache's key
 * through a marker option: a program compiled under one setting is never
 * served under another. Every such switch, set alone to other than its
 * default, gives a marker of its own; set to its default, none. */
static void test_source_switches_in_key(fc_context *ctx) {
    for (int i = 0; i < FC_SW_COUNT; i++)
        if (fc_switch_info_of((fc_switch_id)i)->source) unsetenv(fc_switch_info_of((fc_switch_id)i)->name);
    fc_graph *g = g_softmax(ctx);
    const char *plain[4], *plain80[4];
    const int n0 = fc_program_extra_nvrtc_options(90, false, plain);
    const int n80 = fc_program_extra_nvrtc_options(80, false, plain80);
    for (int i = 0; i < n0; i++) CHECK(strncmp(plain[i], "-DFC_SWITCHES", 13) != 0);
    const fc_cache_key k0 = fc_program_cache_key("text", g, 90, false, true, false, FC_PRECISION_AS_WRITTEN, FC_NUMERICS_FAST, plain, n0, 13, 0);
    int nsource = 0;
    for (int i = 0; i < FC_SW_COUNT; i++) {
        const fc_switch_info *sw = fc_switch_info_of((fc_switch_id)i);
        if (!sw->source) continue;
        nsource++;
        const char *opts[4], *again[4], *sm80[4], *dflt[4];
        setenv(sw->name, "x", 1);
        const int n = fc_program_extra_nvrtc_options(90, false, opts);
        const int n2 = fc_program_extra_nvrtc_options(90, false, again);
        const int n8 = fc_program_extra_nvrtc_options(80, false, sm80); /* every target gets it */
        setenv(sw->name, sw->dflt, 1);
        const int nd = fc_program_extra_nvrtc_options(90, false, dflt);
        unsetenv(sw->name);
        CHECK_EQ_INT(n, n0 + 1);
        CHECK_EQ_INT(n2, n);
        CHECK_EQ_INT(n8, n80 + 1);
        CHECK_EQ_INT(nd, n0);
        if (n != n0 + 1 || n2 != n) continue;
        char want[96];
        snprintf(want, sizeof want, "-DFC_SWITCHES=%s=x", sw->name);
        CHECK(strcmp(opts[n - 1], want) == 0);
        CHECK(opts[n - 1] == again[n2 - 1]); /* interned: programs keep the pointer */
        const fc_cache_key k1 = fc_program_cache_key("text", g, 90, false, true, false, FC_PRECISION_AS_WRITTEN, FC_NUMERICS_FAST, opts, n,
                                                        13, 0);
        CHECK(memcmp(&k0, &k1, sizeof k0) != 0);
    }
    CHECK(nsource >= 2); /* FUSEC_SKINNY, FUSEC_VARIANT_GEMM */
    /* Two at once: both, in table order. */
    setenv("FUSEC_SKINNY", "0", 1);
    setenv("FUSEC_VARIANT_GEMM", "cublaslt", 1);
    const char *both[4];
    const int nb = fc_program_extra_nvrtc_options(90, false, both);
    unsetenv("FUSEC_SKINNY");
    unsetenv("FUSEC_VARIANT_GEMM");
    CHECK_EQ_INT(nb, n0 + 1);
    if (nb == n0 + 1) CHECK(strcmp(both[nb - 1], "-DFC_SWITCHES=FUSEC_SKINNY=0,FUSEC_VARIANT_GEMM=cublaslt") == 0);
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_source_switches_in_key(ctx);
    for (int i = 0; i < NGRAPHS; i++) test_compile(ctx, graphs[i].name, graphs[i].make, graphs[i].fuse);
    test_unbound_symbol(ctx);
    test_misuse(ctx);
    test_compare(ctx);
    test_alloc_failures(g_softmax);
    test_alloc_failures(g_qkv_f32); /* the GEMM descriptions too */
    test_matmul(ctx);
    test_gemm_serialization(ctx);

    if (!fc_cuda_available(NULL)) {
        test_run_without_gpu(ctx);
        printf("test_program: GPU part skipped (no CUDA device)\n");
    } else {
        for (int i = 0; i < NGRAPHS; i++) run_and_compare(ctx, graphs[i].name, graphs[i].make, graphs[i].fuse);
        test_fc_run_device(ctx);
        test_matmul_gpu(ctx);
        test_horizontal_gpu(ctx, FC_F32, false);
        test_horizontal_gpu(ctx, FC_BF16, true);
        test_examples_gpu(ctx);
    }
    fc_context_free(ctx);
    return check_report("test_program");
}

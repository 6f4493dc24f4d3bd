/* test_residual.c - a 16-bit residual sum that a GEMM adds again is not
 * stored where that costs no launch (passes/residual.c, docs/NUMERICS.md
 * "Residual sums").
 *
 *  1. The plan of the bf16 GPT-2 block followed by a layernorm (as in a
 *     model, where the next block's layernorm reads y): the attention
 *     projection stores the branch o (no residual), the second layernorm's
 *     kernel reads x and o, the last GEMM's residual is o, the final
 *     layernorm's kernel adds x, and no group stores x1. The block alone
 *     (y a graph result) and eager numerics plan as written (x1 stored by
 *     the projection's epilogue). The CUDA sources compile with NVRTC for
 *     sm_90 (no GPU needed).
 *  2. Launch counts: the block alone at B = 8, T = 1024 is 3 kernels and 4
 *     library calls (the rewrite would add a kernel after the last GEMM),
 *     and with the layernorm after it 4 and 4, the same as without the
 *     rewrite (the add of x joins the layernorm's kernel). Four blocks in
 *     a row are rewritten all (a layernorm at the end) or not at all (y at
 *     the end), with as many launches as eager numerics.
 *  3. The CPU backend with model-like inputs (B = 1, T = 128): with the
 *     layernorm after it the error against float64 is below rounding every
 *     value's and below storing x1 in bf16 (two programs, x1 between
 *     them); the block alone is at the error of x1 stored, which is the
 *     least any plan without a kernel after the last GEMM can reach (the
 *     exact computation with only x1 and y rounded, also measured). With
 *     x1 returned as well, it is written and both results pass
 *     fc_check_outputs.
 */
#include "check.h"
#include "ir.h"
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "runtime/ref/interp.h"
#include "splitmix.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_LEN 128

/* text with every `from` replaced by `to` (a new string). */
static char *replace(const char *text, const char *from, const char *to) {
    size_t n = 0, lf = strlen(from), lt = strlen(to);
    for (const char *p = text; (p = strstr(p, from)); p += lf) n++;
    char *out = malloc(strlen(text) + n * lt + 1), *o = out;
    for (const char *p = text, *q; ; p = q + lf) {
        q = strstr(p, from);
        size_t k = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, k);
        o += k;
        if (!q) break;
        memcpy(o, to, lt);
        o += lt;
    }
    *o = 0;
    return out;
}

static fc_graph *parse_bt(fc_context *ctx, const char *text, int64_t batch, int64_t t_len) {
    fc_binding b[2] = {{"B", batch}, {"T", t_len}};
    fc_graph *g = NULL;
    if (fc_parse(ctx, "gpt2_block_bf16.ir", text, strlen(text), NULL, b, 2, &g) != FC_OK)
        fprintf(stderr, "parse: %s\n", fc_last_error(ctx));
    CHECK(g != NULL);
    return g;
}

static fc_graph *parse(fc_context *ctx, const char *text) { return parse_bt(ctx, text, 1, T_LEN); }

/* The block with a layernorm reading y, as the next block's would. */
static char *with_layernorm_after(const char *text) {
    char *t = replace(text, ") {\n", ", %lnf_w: bf16[768], %lnf_b: bf16[768]) {\n");
    char *r = replace(t, "  return %y\n", "  %z = layernorm(%y, %lnf_w, %lnf_b, axis=-1, eps=1e-5)\n  return %z\n");
    free(t);
    return r;
}

static const fc_value *param(const fc_graph *g, const char *name) {
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i]->name && !strcmp(g->params[i]->name, name)) return g->params[i];
    return NULL;
}

static bool reads(const fc_group *gr, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return true;
    return false;
}

/* 1. The plan: rewritten (the layernorm after the block, fast numerics)
 * or as written. */
static void test_plan(fc_context *ctx, const char *text, fc_numerics nm, bool rewritten) {
    fc_graph *g = parse(ctx, text);
    if (!g) return;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.numerics = nm;
    fc_plan plan;
    if (fc_pipeline(g, &fo, &plan) != FC_OK) {
        CHECK(!"the pipeline failed");
        fc_graph_free(g);
        return;
    }
    const fc_value *x = param(g, "%x") ? param(g, "%x") : param(g, "x");
    CHECK(x != NULL);
    /* The gemms in launch order: qkv, proj, fc, down. */
    const fc_node *gemm[4] = {0};
    int ngemm = 0, ln_reads_x_and_o = 0, x1_stored = 0, adds_after = 0, norm_adds_x = 0;
    for (int i = 0; i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        if (gr->kind == FC_GROUP_LIBRARY && ngemm < 4) gemm[ngemm++] = gr->nodes[0];
        for (int k = 0; k < gr->noutputs; k++)
            x1_stored += gr->outputs[k]->name && !strcmp(gr->outputs[k]->name, "x1");
    }
    CHECK_EQ_INT(ngemm, 4);
    if (ngemm < 4) goto out;
    fc_gemm_info proj, down;
    CHECK(fc_gemm_info_of(gemm[1], &proj) && fc_gemm_info_of(gemm[3], &down));
    for (int i = 0; i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        if (gr->kind == FC_GROUP_REDUCE && reads(gr, x) && reads(gr, gemm[1]->out[0])) ln_reads_x_and_o++;
        if (gr->kind == FC_GROUP_POINTWISE && reads(gr, x) && reads(gr, gemm[3]->out[0])) adds_after++;
        if (gr->kind == FC_GROUP_REDUCE && reads(gr, x) && reads(gr, gemm[3]->out[0])) norm_adds_x++;
    }
    CHECK_EQ_INT(adds_after, 0); /* never a kernel of its own */
    if (rewritten) {
        CHECK(proj.has_bias && !proj.has_residual);
        CHECK(down.has_bias && down.has_residual && down.residual == gemm[1]->out[0]);
        CHECK_EQ_INT(ln_reads_x_and_o, 1);
        CHECK_EQ_INT(norm_adds_x, 1);
        CHECK_EQ_INT(x1_stored, 0);
    } else {
        /* As written: x1 = proj + x in the epilogue, read by the layernorm
         * and the last GEMM. */
        CHECK(proj.has_residual && proj.residual == x);
        CHECK(down.has_residual && down.residual == gemm[1]->out[0]);
        CHECK_EQ_INT(x1_stored, 1);
        CHECK_EQ_INT(ln_reads_x_and_o, 0);
        CHECK_EQ_INT(norm_adds_x, 0);
    }
out:
    fc_plan_release(&plan);
    fc_graph_free(g);
}

/* Groups that launch (kernels and library calls) and stored values named
 * l<k>_x1 of the plan of text. */
static void plan_counts(fc_context *ctx, const char *text, fc_numerics nm, int *launches, int *x1_stored) {
    *launches = *x1_stored = -1;
    fc_graph *g = parse(ctx, text);
    if (!g) return;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.numerics = nm;
    fc_plan plan;
    if (fc_pipeline(g, &fo, &plan) == FC_OK) {
        *launches = *x1_stored = 0;
        for (int i = 0; i < plan.ngroups; i++) {
            const fc_group *gr = plan.groups[i];
            *launches += gr->kind != FC_GROUP_ALIAS;
            for (int k = 0; k < gr->noutputs; k++) {
                const char *n = gr->outputs[k]->name;
                *x1_stored += n && strlen(n) > 3 && !strcmp(n + strlen(n) - 3, "_x1");
            }
        }
        fc_plan_release(&plan);
    } else {
        CHECK(!"the pipeline failed");
    }
    fc_graph_free(g);
}

/* Four bf16 blocks in a row (tests/layers/gpt2_4.ir in bf16), ending in
 * y and ending in a layernorm: each block's y is the next block's r, so
 * the chain is rewritten from its end. Ending in y, no block is (each
 * rewritten block would move a kernel to the end); ending in a layernorm,
 * every one is, no x1 is stored; both as many launches as eager's. */
static void test_chain_of_blocks(fc_context *ctx) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/tests/layers/gpt2_4.ir", src ? src : ".");
    char *f32 = read_file(path, NULL);
    CHECK(f32 != NULL);
    if (!f32) return;
    char *bf16 = replace(f32, "f32", "bf16");
    char *t = replace(bf16, ") {\n", ", %lnf_w: bf16[768], %lnf_b: bf16[768]) {\n");
    char *ln = replace(t, "  return %l3_y\n", "  %z = layernorm(%l3_y, %lnf_w, %lnf_b, axis=-1, eps=1e-5)\n  return %z\n");
    CHECK(strstr(ln, "%z = layernorm") != NULL);
    int fast, eager, x1_fast, x1_eager;
    plan_counts(ctx, bf16, FC_NUMERICS_FAST, &fast, &x1_fast);
    plan_counts(ctx, bf16, FC_NUMERICS_EAGER, &eager, &x1_eager);
    CHECK(fast > 0 && fast == eager);
    CHECK_EQ_INT(x1_fast, 4);
    CHECK_EQ_INT(x1_eager, 4);
    plan_counts(ctx, ln, FC_NUMERICS_FAST, &fast, &x1_fast);
    plan_counts(ctx, ln, FC_NUMERICS_EAGER, &eager, &x1_eager);
    CHECK(fast > 0 && fast == eager);
    CHECK_EQ_INT(x1_fast, 0);
    CHECK_EQ_INT(x1_eager, 4);
    free(ln);
    free(t);
    free(bf16);
    free(f32);
}

/* g compiled for CUDA sm 90 (NVRTC, no GPU needed); NULL on failure. */
static fc_program *compile_cuda90(fc_graph *g, fc_numerics nm) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.sm = 90;
    o.numerics = nm;
    return compile_checked(g, &o);
}

/* 2. The launches of a CUDA program (sm 90, compiled without a GPU): the
 * plan text's last line. */
static void test_launches(fc_context *ctx, const char *text, int64_t batch, int64_t t_len, fc_numerics nm,
                          const char *want) {
    fc_graph *g = parse_bt(ctx, text, batch, t_len);
    if (!g) return;
    fc_program *p = compile_cuda90(g, nm);
    char *plan = p ? fc_program_plan_text(p) : NULL;
    const char *total = plan ? strstr(plan, "total: ") : NULL;
    if (!total || strncmp(total, want, strlen(want)) != 0)
        fprintf(stderr, "B=%lld T=%lld: expected '%s', got '%s'\n", (long long)batch, (long long)t_len, want,
                total ? total : "(no plan)");
    CHECK(total && strncmp(total, want, strlen(want)) == 0);
    fc_free(plan);
    fc_program_free(p);
    fc_graph_free(g);
}

/* The CUDA source of the block compiles (NVRTC, sm_90). */
static void test_cuda_compiles(fc_context *ctx, const char *text) {
    fc_graph *g = parse(ctx, text);
    if (!g) return;
    fc_program *p = compile_cuda90(g, FC_NUMERICS_FAST);
    char *src = p ? fc_program_cuda_source(p) : NULL;
    CHECK(src != NULL);
    /* The second layernorm's kernel adds x and o (in f32) before its sums,
     * and so does the last one x and the last GEMM's result; no kernel of
     * its own adds them. */
    int prologue_adds = 0;
    for (const char *q = src; q && (q = strstr(q, ": reduce: add,cast,reduce_sum,")); q++) prologue_adds++;
    CHECK_EQ_INT(prologue_adds, 2);
    CHECK(src && strstr(src, ": pointwise: add\n") == NULL);
    fc_free(src);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- 2. numerics on the CPU backend ------------------------------------ */

static double gaussian(uint64_t *s) {
    double u = 0.5 * (splitmix_uniform(s) + 1.0), v = 0.5 * (splitmix_uniform(s) + 1.0);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

/* bench/numerics_bench.py's inputs: activations N(0, 1), matrices 0.02
 * N(0, 1), norm weights 1 + 0.1 N(0, 1), biases 0.02 N(0, 1). */
static void make_inputs(const fc_graph *g, fc_tensor *in) {
    uint64_t s = 7;
    for (int i = 0; i < g->nparams; i++) {
        const fc_value *v = g->params[i];
        const char *n = v->name ? v->name : "";
        if (*n == '%') n++;
        size_t len = strlen(n);
        fc_tensor t = {FC_BF16, v->rank, {0}, NULL};
        int64_t numel = 1;
        for (int d = 0; d < v->rank; d++) numel *= (t.shape[d] = v->dims[d]);
        uint16_t *data = malloc(sizeof *data * (size_t)numel);
        bool is_w = len >= 2 && !strcmp(n + len - 2, "_w"), is_b = len >= 2 && !strcmp(n + len - 2, "_b");
        for (int64_t j = 0; j < numel; j++) {
            double z = gaussian(&s);
            double x = v->rank == 2 && is_w ? 0.02 * z : v->rank == 1 && is_w ? 1.0 + 0.1 * z : is_b ? 0.02 * z : z;
            data[j] = fc_f32_to_bf16((float)x);
        }
        t.data = data;
        in[i] = t;
    }
}

/* The block's text on the CPU backend (fast numerics): its nout outputs. */
static fc_status run_cpu(fc_context *ctx, const char *text, const fc_tensor *in, int nin, fc_tensor *out, int nout) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CPU;
    fc_graph *g = parse(ctx, text);
    fc_program *p = g ? compile_checked(g, &o) : NULL;
    fc_status st = p ? fc_program_run_host(p, in, nin, out, nout, NULL, 0) : FC_ERR_INPUT;
    fc_program_free(p);
    fc_graph_free(g);
    return st;
}

static double rel_l2(const fc_tensor *got, const fc_interp_tensor *exact) {
    double se = 0, sx = 0;
    for (int64_t i = 0; i < fc_interp_tensor_numel(exact); i++) {
        double d = fc_interp_load(got->dtype, got->data, i) - exact->data[i];
        se += d * d;
        sx += exact->data[i] * exact->data[i];
    }
    return sqrt(se / sx);
}

static double rel_l2_ref(const fc_interp_tensor *got, const fc_interp_tensor *exact) {
    double se = 0, sx = 0;
    for (int64_t i = 0; i < fc_interp_tensor_numel(exact); i++) {
        double d = got->data[i] - exact->data[i];
        se += d * d;
        sx += exact->data[i] * exact->data[i];
    }
    return sqrt(se / sx);
}

/* The graph's exact and dtype-faithful results on the inputs (float64). */
static void reference(fc_graph *g, const fc_tensor *in, int nin, fc_interp_tensor *exact,
                      fc_interp_tensor *faithful) {
    fc_interp_tensor din[20];
    for (int i = 0; i < nin; i++) {
        int64_t n = fc_tensor_numel(&in[i]);
        din[i] = (fc_interp_tensor){in[i].dtype, in[i].rank, {0}, malloc(sizeof(double) * (size_t)n)};
        memcpy(din[i].shape, in[i].shape, sizeof din[i].shape);
        for (int64_t j = 0; j < n; j++) din[i].data[j] = fc_interp_load(in[i].dtype, in[i].data, j);
    }
    CHECK_EQ_INT(fc_interp_run_rounding(g, FC_REF_EXACT, din, nin, exact, 1), FC_OK);
    if (faithful) CHECK_EQ_INT(fc_interp_run_rounding(g, FC_REF_DTYPE, din, nin, faithful, 1), FC_OK);
    for (int i = 0; i < nin; i++) free(din[i].data);
}

/* An exact result rounded to bf16, as a tensor. */
static fc_tensor to_bf16(const fc_interp_tensor *t) {
    fc_tensor r = {FC_BF16, t->rank, {0}, NULL};
    memcpy(r.shape, t->shape, sizeof r.shape);
    int64_t n = fc_interp_tensor_numel(t);
    uint16_t *d = malloc(sizeof *d * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = fc_f32_to_bf16((float)t->data[i]);
    r.data = d;
    return r;
}

typedef struct errors {
    double now;      /* fusec, one program */
    double before;   /* x1 stored in bf16: two programs */
    double faithful; /* every value rounded */
    double floor;    /* exact but for x1 and the result, each rounded once */
} errors;

/* The errors of the text (result `ret`) on the CPU backend, against
 * float64. */
static errors measure(fc_context *ctx, const char *text, const char *ret) {
    errors e = {-1, -1, -1, -1};
    fc_graph *g = parse(ctx, text);
    if (!g) return e;
    int nin = g->nparams;
    fc_tensor in[20];
    CHECK(nin <= 19);
    make_inputs(g, in);
    fc_interp_tensor exact = {0}, faithful = {0};
    reference(g, in, nin, &exact, &faithful);
    fc_graph_free(g);

    fc_tensor now = {0};
    CHECK_EQ_INT(run_cpu(ctx, text, in, nin, &now, 1), FC_OK);
    /* x1 stored in bf16 between two programs: the first half returns x1,
     * the second reads it where the block reads x1. */
    char want[64];
    snprintf(want, sizeof want, "return %s", ret);
    char *first = replace(text, want, "return %x1");
    char *t1 = replace(text, ") {\n", ", %x1s: bf16[B, T, 768]) {\n");
    char *t2 = replace(t1, "layernorm(%x1,", "layernorm(%x1s,");
    char *second = replace(t2, "add(%x1, %m)", "add(%x1s, %m)");
    fc_tensor x1 = {0}, before = {0};
    CHECK_EQ_INT(run_cpu(ctx, first, in, nin, &x1, 1), FC_OK);
    in[nin] = x1;
    CHECK_EQ_INT(run_cpu(ctx, second, in, nin + 1, &before, 1), FC_OK);
    /* The floor of every plan that stores x1 in bf16: the exact x1,
     * rounded, into the exact second half, whose result is rounded. */
    fc_graph *g1 = parse(ctx, first), *g2 = parse(ctx, second);
    fc_interp_tensor x1_exact = {0}, y_exact = {0};
    if (g1 && g2) {
        reference(g1, in, nin, &x1_exact, NULL);
        fc_tensor x1r = to_bf16(&x1_exact);
        in[nin] = x1r;
        reference(g2, in, nin + 1, &y_exact, NULL);
        fc_tensor yr = to_bf16(&y_exact);
        if (exact.data && y_exact.data) e.floor = rel_l2(&yr, &exact);
        fc_tensor_release(&yr);
        fc_tensor_release(&x1r);
    }
    fc_graph_free(g1);
    fc_graph_free(g2);
    if (now.data && before.data && exact.data && faithful.data) {
        e.now = rel_l2(&now, &exact);
        e.before = rel_l2(&before, &exact);
        e.faithful = rel_l2_ref(&faithful, &exact);
    }
    fc_interp_tensor_release(&x1_exact);
    fc_interp_tensor_release(&y_exact);
    free(first);
    free(t1);
    free(t2);
    free(second);
    fc_tensor_release(&now);
    fc_tensor_release(&before);
    fc_tensor_release(&x1);
    for (int i = 0; i < nin; i++) free(in[i].data);
    fc_interp_tensor_release(&exact);
    fc_interp_tensor_release(&faithful);
    return e;
}

static void test_cpu_numerics(fc_context *ctx, const char *text, const char *ln_after) {
    if (!fc_device_built(FC_DEVICE_CPU)) {
        printf("test_residual: no CPU backend in this build; its numerics are skipped\n");
        return;
    }
    /* The block alone: as written, at the error of x1 stored, which no
     * plan without a kernel after the last GEMM gets far below. */
    errors b = measure(ctx, text, "%y");
    printf("gpt2_block_bf16 B=1 T=%d on the CPU, rel L2 against float64: %.5f (x1 stored in bf16: %.5f; "
           "every value rounded: %.5f; only x1 and y rounded, exactly: %.5f)\n",
           T_LEN, b.now, b.before, b.faithful, b.floor);
    CHECK(b.now > 0 && b.now < b.faithful);
    CHECK(fabs(b.now - b.before) < 0.02 * b.before);
    CHECK(b.floor > 0 && b.floor < b.now && b.floor > 0.9 * b.now);
    /* Followed by a layernorm, the block's x1 is never rounded. */
    errors l = measure(ctx, ln_after, "%z");
    printf("the same block then a layernorm: %.5f (x1 stored in bf16: %.5f; every value rounded: %.5f)\n", l.now,
           l.before, l.faithful);
    CHECK(l.now > 0 && l.now < l.faithful);
    CHECK(l.now < 0.9 * l.before);

    /* x1 a graph result too: still written (by the layernorm's kernel,
     * which computes it), both results within the contract, z as
     * without. */
    fc_graph *g = parse(ctx, ln_after);
    if (!g) return;
    int nin = g->nparams;
    fc_tensor in[20];
    make_inputs(g, in);
    fc_graph_free(g);
    fc_tensor now = {0};
    CHECK_EQ_INT(run_cpu(ctx, ln_after, in, nin, &now, 1), FC_OK);
    char *both = replace(ln_after, "return %z", "return %z, %x1");
    fc_tensor outs[2] = {{0}, {0}};
    CHECK_EQ_INT(run_cpu(ctx, both, in, nin, outs, 2), FC_OK);
    fc_graph *gb = parse(ctx, both);
    fc_output_diff diffs[2];
    if (gb && outs[0].data && outs[1].data && now.data) {
        fc_status cs = fc_check_outputs(gb, in, nin, outs, 2, diffs);
        if (cs) fprintf(stderr, "x1 returned: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(cs, FC_OK);
        CHECK(!memcmp(outs[0].data, now.data, (size_t)fc_tensor_numel(&now) * 2)); /* z as before */
    }
    fc_graph_free(gb);
    fc_tensor_release(&outs[0]);
    fc_tensor_release(&outs[1]);
    fc_tensor_release(&now);
    free(both);
    for (int i = 0; i < nin; i++) free(in[i].data);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/examples/gpt2_block_bf16.ir", src ? src : ".");
    char *text = read_file(path, NULL);
    CHECK(text != NULL);
    if (text) {
        char *ln_after = with_layernorm_after(text);
        test_plan(ctx, ln_after, FC_NUMERICS_FAST, true);
        test_plan(ctx, ln_after, FC_NUMERICS_EAGER, false);
        test_plan(ctx, text, FC_NUMERICS_FAST, false);
        test_plan(ctx, text, FC_NUMERICS_EAGER, false);
        test_cuda_compiles(ctx, ln_after);
        test_chain_of_blocks(ctx);
        /* The launches of the profiled size (docs/NUMERICS.md). */
        test_launches(ctx, text, 8, 1024, FC_NUMERICS_FAST, "total: 3 kernels, 4 library calls");
        test_launches(ctx, ln_after, 8, 1024, FC_NUMERICS_FAST, "total: 4 kernels, 4 library calls");
        test_launches(ctx, ln_after, 8, 1024, FC_NUMERICS_EAGER, "total: 4 kernels, 4 library calls");
        test_cpu_numerics(ctx, text, ln_after);
        free(ln_after);
    }
    free(text);
    fc_context_free(ctx);
    return check_report("test_residual");
}

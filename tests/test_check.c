/*
 * test_check.c - --check's verdict (fc_compare_outputs_exact): every
 * shipped example passes on the CPU backend (and with a GPU on cuda) with
 * data at the CLI's scale (uniform in [-1, 1), so activations reach the
 * hundreds) and at a model's scale, and so do the small f32 attention
 * block and the written-out graphs; planted bugs still fail: a perturbed
 * output element, a wrong constant (the attention scale, an epsilon), a
 * dropped bias, a wrong function, an off-by-one in a causal mask, a
 * reduction over the wrong axis. The bugs' outputs come from the reference
 * interpreter running the buggy graph (or the CPU backend, where the build
 * has it), the verdict against the correct graph's references, as --check
 * gives it.
 */
#include "check.h"
#include "fusec.h"
#include "splitmix.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* text with its one occurrence of `from` replaced by `to` (a planted bug);
 * NULL (and a failure) when from does not occur exactly once. */
static char *replace_once(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at || strstr(at + 1, from)) {
        fprintf(stderr, "planted bug: '%s' does not occur exactly once\n", from);
        check_failed++;
        return NULL;
    }
    size_t pre = (size_t)(at - text), nf = strlen(from), nt = strlen(to), rest = strlen(at + nf);
    char *s = malloc(pre + nt + rest + 1);
    if (!s) return NULL;
    memcpy(s, text, pre);
    memcpy(s + pre, to, nt);
    memcpy(s + pre + nt, at + nf, rest + 1);
    return s;
}

/* Random inputs for g's parameters (every dim static): uniform in [-1, 1)
 * as the CLI's, or, with model_scale, a matrix [K, N] divided by sqrt(K)
 * as an initialiser would (so activations stay of order one). */
static fc_tensor *make_inputs(fc_graph *g, bool model_scale, uint64_t seed) {
    int np = fc_graph_num_params(g);
    fc_tensor *in = calloc((size_t)np + 1, sizeof *in);
    uint64_t state = seed;
    for (int i = 0; in && i < np; i++) {
        const fc_value *p = fc_graph_param(g, i);
        fc_tensor *t = &in[i];
        t->dtype = fc_value_dtype(p);
        t->rank = fc_value_rank(p);
        for (int d = 0; d < t->rank; d++) t->shape[d] = fc_value_dim(p, d);
        int64_t n = fc_tensor_numel(t);
        t->data = malloc((size_t)(n ? n : 1) * fc_dtype_size(t->dtype));
        double scale = model_scale && t->rank == 2 ? 1 / sqrt((double)t->shape[0]) : 1;
        for (int64_t k = 0; t->data && k < n; k++) {
            double u = splitmix_uniform(&state) * scale;
            switch (t->dtype) {
            case FC_F32: ((float *)t->data)[k] = (float)u; break;
            case FC_BF16: ((uint16_t *)t->data)[k] = fc_f32_to_bf16((float)u); break;
            case FC_F16: ((uint16_t *)t->data)[k] = fc_f32_to_f16((float)u); break;
            default: memset(t->data, 0, (size_t)n * fc_dtype_size(t->dtype)); break;
            }
        }
    }
    return in;
}

static void free_tensors(fc_tensor *t, int n, bool release) {
    for (int i = 0; t && i < n; i++) {
        if (release) fc_tensor_release(&t[i]);
        else free(t[i].data);
    }
    free(t);
}

static fc_graph *parse(fc_context *ctx, const char *name, const char *text, const char *graph, const char *binds) {
    fc_binding b[4];
    int nb = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", binds);
    for (char *tok = strtok(buf, ","); tok && nb < 4; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        b[nb++] = (fc_binding){tok, atoll(eq + 1)};
    }
    fc_graph *g = NULL;
    /* fc_parse copies the names it keeps. */
    if (fc_parse(ctx, name, text, strlen(text), graph, b, nb, &g) != FC_OK || fc_verify(g) != FC_OK) {
        fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
        check_failed++;
        fc_graph_free(g);
        return NULL;
    }
    return g;
}

/* Outputs of g for in on device dev when it is available here (the CPU
 * backend, or with a GPU cuda), else the reference interpreter's. NULL on
 * failure (reported). */
static fc_tensor *outputs_on(fc_graph *g, const fc_tensor *in, fc_device dev) {
    int np = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_tensor *out = calloc((size_t)nout + 1, sizeof *out);
    fc_status st;
    if (dev != FC_DEVICE_REF && fc_device_available(dev)) {
        fc_compile_options co;
        fc_compile_options_default(&co);
        co.device = dev;
        fc_program *p = NULL;
        st = fc_compile(g, &co, &p);
        if (st == FC_OK) st = fc_program_run_host(p, in, np, out, nout, NULL, 0);
        fc_program_free(p);
    } else {
        st = fc_run_reference(g, in, np, out, nout);
    }
    if (st != FC_OK) {
        fprintf(stderr, "running %s: %s\n", fc_graph_name(g), fc_last_error(fc_graph_context(g)));
        check_failed++;
        free_tensors(out, nout, true);
        return NULL;
    }
    return out;
}

static fc_tensor *outputs_of(fc_graph *g, const fc_tensor *in, bool cpu) {
    return outputs_on(g, in, cpu ? FC_DEVICE_CPU : FC_DEVICE_REF);
}

/* --check's verdict on got for graph g and inputs in (fc_check_outputs):
 * true when every output passes. Prints the verdict's lines. */
static bool verdict(const char *what, fc_graph *g, const fc_tensor *in, const fc_tensor *got) {
    int np = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_output_diff d[8];
    fc_status st = nout <= 8 ? fc_check_outputs(g, in, np, got, nout, d) : FC_ERR_USAGE;
    if (st != FC_OK && st != FC_ERR_RUNTIME) {
        fprintf(stderr, "%s: reference: %s\n", what, fc_last_error(fc_graph_context(g)));
        check_failed++;
        return false;
    }
    for (int i = 0; i < nout; i++) {
        char line[768];
        printf("%s: %s\n", what, fc_output_diff_format(&d[i], i, line, sizeof line));
    }
    return st == FC_OK;
}

/* CHECK that --check refuses got (wrong on purpose). */
static void check_refused(const char *what, fc_graph *g, const fc_tensor *in, const fc_tensor *got) {
    bool pass = verdict(what, g, in, got);
    if (pass) fprintf(stderr, "%s: passed --check\n", what);
    CHECK(!pass);
}

typedef struct example {
    const char *file, *graph, *binds;
} example;

static const example examples[] = {
    {"examples/gpt2_block.ir", NULL, "B=1,T=16"},
    {"examples/gpt2_block_bf16.ir", NULL, "B=1,T=16"},
    {"examples/llama_block.ir", NULL, "B=1,T=16"},
    {"examples/mlp.ir", NULL, "B=8"},
    {"examples/layernorm.ir", NULL, "B=2,T=8"},
    {"examples/layernorm.ir", "layernorm_explicit", "B=2,T=8"},
    {"examples/pointwise.ir", NULL, "N=16"},
    {"examples/softmax.ir", NULL, "N=8"},
    {"examples/softmax.ir", "softmax_explicit", "N=8"},
};

/* A small f32 attention block ([1, 2, 16, 64]: 2048 elements), where the
 * fixed f32 tolerance failed on two elements. */
static const char attention_ir[] =
    "graph attn(%q: f32[1, 2, 16, 64], %k: f32[1, 2, 16, 64], %v: f32[1, 2, 16, 64]) {\n"
    "  %kt = permute(%k, perm=[0, 1, 3, 2])\n"
    "  %s0 = matmul(%q, %kt) : f32[1, 2, 16, 16]\n"
    "  %s = mul(%s0, 0.125)\n"
    "  %p = softmax(%s, axis=-1)\n"
    "  %a = matmul(%p, %v) : f32[1, 2, 16, 64]\n"
    "  return %a\n"
    "}\n";

/* Every example passes on the CPU backend (the reference where there is
 * none) and, with a GPU, on cuda, at both scales. */
static void test_examples_pass(fc_context *ctx) {
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) {
        char *text = read_file(examples[e].file, NULL);
        CHECK(text != NULL);
        if (!text) continue;
        fc_graph *g = parse(ctx, examples[e].file, text, examples[e].graph, examples[e].binds);
        for (int scale = 0; g && scale < 2; scale++) {
            for (int cuda = 0; cuda < 2; cuda++) {
                if (cuda && !fc_device_available(FC_DEVICE_CUDA)) continue;
                fc_tensor *in = make_inputs(g, scale, 0);
                fc_tensor *got = outputs_on(g, in, cuda ? FC_DEVICE_CUDA : FC_DEVICE_CPU);
                char what[256];
                snprintf(what, sizeof what, "%s %s %s on %s", examples[e].file,
                         examples[e].graph ? examples[e].graph : "", scale ? "model scale" : "cli scale",
                         cuda ? "cuda" : "cpu");
                if (got) CHECK(verdict(what, g, in, got));
                free_tensors(got, fc_graph_num_outputs(g), true);
                free_tensors(in, fc_graph_num_params(g), false);
            }
        }
        fc_graph_free(g);
        free(text);
    }
}

static void test_attention_passes(fc_context *ctx) {
    fc_graph *g = parse(ctx, "attn.ir", attention_ir, NULL, "");
    if (!g) return;
    for (int scale = 0; scale < 2; scale++) {
        fc_tensor *in = make_inputs(g, scale, 7);
        fc_tensor *got = outputs_of(g, in, true);
        if (got) CHECK(verdict("f32 attention", g, in, got));
        free_tensors(got, 1, true);
        free_tensors(in, 3, false);
    }
    fc_graph_free(g);
}

typedef struct planted {
    const char *what, *file, *binds, *from, *to;
} planted;

/* Bugs a backend could have, each planted in the graph's text. */
static const planted bugs[] = {
    {"wrong attention scale", "examples/gpt2_block.ir", "B=1,T=16", "mul(%s0, 0.125)", "mul(%s0, 0.126)"},
    {"causal mask off by one", "examples/gpt2_block.ir", "B=1,T=16", "ge(%qi, %kj)", "gt(%qi, %kj)"},
    {"dropped bias", "examples/gpt2_block.ir", "B=1,T=16", "%o  = add(%o0, %proj_b)", "%o  = add(%o0, 0.0)"},
    {"wrong layernorm eps", "examples/layernorm.ir", "B=2,T=8", "eps=1e-5", "eps=1e-2"},
    {"dropped bias (bf16)", "examples/mlp.ir", "B=8", "%y  = add(%o, %b2)", "%y  = add(%o, 0.0)"},
    {"gelu for gelu_tanh", "examples/gpt2_block.ir", "B=1,T=16", "gelu_tanh(%f1)", "gelu(%f1)"},
    {"sigmoid for silu (bf16)", "examples/llama_block.ir", "B=1,T=16", "silu(%gate)", "sigmoid(%gate)"},
    {"causal mask one key too far", "examples/gpt2_block.ir", "B=1,T=16", "%keep = ge(%qi, %kj)",
     "%qi1 = add(%qi, 1)\n  %keep = ge(%qi1, %kj)"},
    {"softmax over the wrong axis", "examples/gpt2_block.ir", "B=1,T=16", "softmax(%sm, axis=-1)",
     "softmax(%sm, axis=-2)"},
};

/* Each planted bug fails, at the model's scale, on the CPU backend and on
 * the reference interpreter. The attention scale is 0.8% off, well inside
 * a bf16 ulp of the scores' size at the CLI's scale, so only the f32
 * graph is asked to see it. */
static void test_planted_bugs_fail(fc_context *ctx) {
    for (size_t b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
        char *text = read_file(bugs[b].file, NULL);
        char *bad = text ? replace_once(text, bugs[b].from, bugs[b].to) : NULL;
        CHECK(bad != NULL);
        if (!bad) {
            free(text);
            continue;
        }
        fc_graph *g = parse(ctx, bugs[b].file, text, NULL, bugs[b].binds);
        fc_graph *gb = parse(ctx, bugs[b].what, bad, NULL, bugs[b].binds);
        for (int cpu = 0; g && gb && cpu < 2; cpu++) {
            fc_tensor *in = make_inputs(g, true, 3);
            fc_tensor *got = outputs_of(gb, in, cpu);
            char what[256];
            snprintf(what, sizeof what, "planted: %s (%s)", bugs[b].what, cpu ? "cpu" : "reference");
            if (got) check_refused(what, g, in, got);
            free_tensors(got, fc_graph_num_outputs(gb), true);
            free_tensors(in, fc_graph_num_params(g), false);
        }
        fc_graph_free(g);
        fc_graph_free(gb);
        free(bad);
        free(text);
    }
}

/* A correct output with one element perturbed by a few per cent of the
 * output's typical size fails; the output itself passes. An f32 graph at
 * either scale; a bf16 one at the model's, since at the CLI's scale its
 * own rounding (the dtype-faithful computation's error) reaches tens. */
static void test_perturbed_element_fails(fc_context *ctx) {
    const example *cases[] = {&examples[0], &examples[1], &examples[3], &examples[7]};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *text = read_file(cases[c]->file, NULL);
        fc_graph *g = text ? parse(ctx, cases[c]->file, text, cases[c]->graph, cases[c]->binds) : NULL;
        bool f32 = g && fc_value_dtype(fc_graph_param(g, 0)) == FC_F32;
        for (int scale = f32 ? 0 : 1; g && scale < 2; scale++) {
            fc_tensor *in = make_inputs(g, scale, 5);
            fc_tensor *got = outputs_of(g, in, true);
            if (got) {
                CHECK(verdict("unperturbed", g, in, got));
                /* 5% of the output's root mean square added to element 37
                 * (10% for bf16, whose ulp is 0.8%). */
                fc_tensor *t = &got[0];
                int64_t n = fc_tensor_numel(t);
                double sq = 0;
                for (int64_t i = 0; i < n; i++) {
                    double x = t->dtype == FC_F32 ? ((float *)t->data)[i]
                                                  : fc_bf16_to_f32(((uint16_t *)t->data)[i]);
                    sq += x * x;
                }
                double delta = (f32 ? 0.05 : 0.1) * sqrt(sq / (double)n);
                if (t->dtype == FC_F32) ((float *)t->data)[37] += (float)delta;
                else {
                    uint16_t *h = t->data;
                    h[37] = fc_f32_to_bf16(fc_bf16_to_f32(h[37]) + (float)delta);
                }
                char what[256];
                snprintf(what, sizeof what, "perturbed element: %s %s", cases[c]->file,
                         scale ? "model scale" : "cli scale");
                check_refused(what, g, in, got);
            }
            free_tensors(got, fc_graph_num_outputs(g), true);
            free_tensors(in, fc_graph_num_params(g), false);
        }
        fc_graph_free(g);
        free(text);
    }
}

/* The API's contracts: exact outputs must be f64 tensors of the
 * reference's shape; integer outputs are compared exactly. */
static void test_api(fc_context *ctx) {
    float g32[4] = {1, 2, 3, 4}, w32[4] = {1, 2, 3, 4};
    double e64[4] = {1, 2, 3, 4};
    fc_tensor got = {FC_F32, 1, {4}, g32}, want = {FC_F32, 1, {4}, w32}, exact = {FC_F64, 1, {4}, e64};
    fc_output_diff d;
    CHECK(fc_compare_outputs_exact(ctx, &got, &want, &exact, 1, &d) == FC_OK && d.pass && d.margin > 0);
    fc_tensor bad = {FC_F32, 1, {4}, g32};
    CHECK(fc_compare_outputs_exact(ctx, &got, &want, &bad, 1, &d) == FC_ERR_USAGE);
    CHECK(fc_compare_outputs_exact(ctx, &got, &want, NULL, 1, &d) == FC_ERR_USAGE);
    /* Off by a wide margin of what rounding explains: a FAIL naming both errors. */
    g32[2] = 3.001f;
    CHECK(fc_compare_outputs_exact(ctx, &got, &want, &exact, 1, &d) == FC_ERR_RUNTIME && !d.pass && d.worst == 2);
    CHECK(strstr(fc_last_error(ctx), "against float64") != NULL);
    int32_t gi[2] = {1, 2}, wi[2] = {1, 3};
    fc_tensor goti = {FC_I32, 1, {2}, gi}, wanti = {FC_I32, 1, {2}, wi}, exacti = {FC_I32, 1, {2}, wi};
    CHECK(fc_compare_outputs_exact(ctx, &goti, &wanti, &exacti, 1, &d) == FC_ERR_RUNTIME && d.nbad == 1);
    /* An integer computed from an unrounded value may land on the exact
     * side of the faithful one (a cast of 2.9999 kept in f32), not past it. */
    int32_t ei[2] = {1, 2};
    exacti.data = ei;
    CHECK(fc_compare_outputs_exact(ctx, &goti, &wanti, &exacti, 1, &d) == FC_OK);
    gi[1] = 0;
    CHECK(fc_compare_outputs_exact(ctx, &goti, &wanti, &exacti, 1, &d) == FC_ERR_RUNTIME);
    CHECK(fc_compare_outputs(ctx, &goti, &wanti, 1, &d) == FC_ERR_RUNTIME);
    CHECK(fc_check_margin(FC_I32) == 0 && fc_check_margin(FC_BF16) > 0 && fc_check_margin(FC_F32) > 0);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_api(ctx);
    test_examples_pass(ctx);
    test_attention_passes(ctx);
    test_planted_bugs_fail(ctx);
    test_perturbed_element_fails(ctx);
    fc_context_free(ctx);
    return check_report("test_check");
}

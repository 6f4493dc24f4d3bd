/* test_autocast.c - the autocast pass (passes/autocast.c) as the pipeline
 * runs it, and its numerics (no GPU needed):
 *
 *  1. Plans: the f32 examples (the GPT-2 block, the Llama block, the MLP)
 *     under FC_PRECISION_BF16 keep no cast of an activation as a kernel of
 *     its own: every group made only of casts casts graph parameters; the
 *     weights' casts (and the concatenations of sibling weights' casts)
 *     are load-time kernels (passes/loadtime.c), run when the weights are
 *     loaded; every matmul became a GEMM reading bf16, sibling GEMMs merge
 *     as in the f32 plan, and at every run the plan has the kernels of the
 *     f32 plan beside the casts of inputs read by a GEMM.
 *  2. Numerics on the CPU backend, and on CUDA where a GPU is present
 *     (skipped without one), against the float64 reference of the
 *     graph as written: the f32 graphs of tests/passes/autocast_*.ir and
 *     the blocks above, at bf16 and f16, with data of order one (weights
 *     scaled by 1/sqrt(fan-in), as a model's are). Each output is within
 *     the autocast tolerance (docs/PRECISION.md): relative L2 error
 *     ||got - want|| / ||want|| at most 1e-2 for bf16 and 1.5e-3 for f16; and
 *     is no closer than f32 would be (above 1e-5), which shows the low
 *     dtype was used. FC_PRECISION_F32 on the bf16 Llama block gives, in
 *     bf16, the f32 reference of the same graph written in f32, to bf16's
 *     rounding (2e-3 relative L2 error).
 *  3. The pass is idempotent and leaves graphs without float32 values (and
 *     float64 ones) as they were; FC_PRECISION_AS_WRITTEN and _TF32 change
 *     nothing.
 *
 * FUSEC_TEST_VERBOSE=1 prints every error measured in 2.
 */
#include "check.h"
#include "ir.h"
#include "passes/passes.h"
#include "runtime/ref/interp.h"
#include "splitmix.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;
static bool verbose;

static fc_graph *parse_file(const char *rel, const fc_binding *binds, int nbinds, const char *replace_bf16) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src_dir(), rel);
    char *text = read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) return NULL;
    if (replace_bf16) /* the same graph with its bf16 written as another dtype of four letters or fewer */
        for (char *p = text; (p = strstr(p, "bf16")); p += 4) memcpy(p, replace_bf16, 4);
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, path, text, strlen(text), NULL, binds, nbinds, &g);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    free(text);
    return g;
}

/* ------------------------------------------------------------------ */
/* 1. Plans                                                            */
/* ------------------------------------------------------------------ */

typedef struct plan_counts {
    int kernels, library, param_casts, gemms_low;
    int at_load; /* load-time kernels (passes/loadtime.c), not counted in kernels */
} plan_counts;

static bool only_casts(const fc_group *gr) {
    for (int i = 0; i < gr->nnodes; i++)
        if (gr->nodes[i]->op != FC_OP_CAST) return false;
    return gr->nnodes > 0;
}

static plan_counts plan_of(fc_graph *g, fc_precision p) {
    plan_counts c = {0};
    fc_graph *copy = fc_graph_clone(g);
    CHECK(copy != NULL);
    if (!copy) return c;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.precision = p;
    fc_plan plan;
    fc_status st = fc_pipeline(copy, &fo, &plan);
    CHECK_EQ_INT(st, FC_OK);
    for (int i = 0; st == FC_OK && i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        if (gr->kind == FC_GROUP_ALIAS) continue;
        if (gr->kind == FC_GROUP_LIBRARY) {
            c.library++;
            for (int k = 0; k < gr->nnodes; k++) {
                const fc_node *n = gr->nodes[k];
                if (n->op == FC_OP_GEMM && n->in[0]->dtype == FC_BF16 && n->in[1]->dtype == FC_BF16) c.gemms_low++;
            }
            continue;
        }
        if (gr->loadtime) {
            /* A weight's cast (or the concatenation of sibling weights'
             * casts), of parameters only. */
            c.at_load++;
            for (int k = 0; k < gr->nnodes; k++) {
                const fc_node *n = gr->nodes[k];
                CHECK(n->op == FC_OP_CAST || n->op == FC_OP_CONCAT);
                if (n->op == FC_OP_CAST) CHECK(n->in[0]->param_index >= 0);
            }
            continue;
        }
        c.kernels++;
        if (!only_casts(gr)) continue;
        /* A per-run kernel of casts alone: of parameters only, never of a
         * value a kernel or a GEMM made (that cast belongs in its
         * producer), and never of a weight (that runs at load). */
        for (int k = 0; k < gr->nnodes; k++) {
            const fc_value *x = gr->nodes[k]->in[0];
            CHECK(x->param_index >= 0);
            if (x->param_index < 0) fprintf(stderr, "%s: a cast of an activation is a kernel of its own\n", g->name);
            c.param_casts += x->param_index >= 0;
        }
    }
    if (st == FC_OK) fc_plan_release(&plan);
    fc_graph_free(copy);
    return c;
}

static void test_plans(void) {
    const fc_binding bt[] = {{"B", 2}, {"T", 64}}, b[] = {{"B", 256}};
    struct {
        const char *file;
        const fc_binding *binds;
        int nbinds, matmuls, gemms, param_casts, at_load, library;
    } cases[] = {
        /* attn_w, attn_b, proj_w, fc_w, fc_b, out_w cast at load (proj_b
         * and out_b are f32 biases of f32 results; the scores and P @ V
         * are attention); the f32 plan's kernels and calls at every run */
        {"examples/gpt2_block.ir", bt, 2, 4, 4, 0, 6, 4},
        /* the seven weights at load, q with k and gate with up joined by
         * a concat of their casts, so the sibling GEMMs merge as in the f32
         * plan; v stays apart (its result is stored in bf16 for attention,
         * q and k in f32 for the rotary embedding), one call more than f32 */
        {"bench/llama_block_f32.ir", bt, 2, 7, 5, 0, 5, 5},
        /* x (read by the first GEMM and the residual) at every run; w1,
         * b1, w2 at load */
        {"bench/mlp_f32.ir", b, 1, 2, 2, 1, 3, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fc_graph *g = parse_file(cases[i].file, cases[i].binds, cases[i].nbinds, NULL);
        if (!g) continue;
        plan_counts f32 = plan_of(g, FC_PRECISION_AS_WRITTEN), bf16 = plan_of(g, FC_PRECISION_BF16);
        if (verbose)
            printf("  %s: f32 %d kernels %d library; bf16 %d kernels (%d parameter casts) %d at load %d library, "
                   "%d bf16 GEMMs\n",
                   cases[i].file, f32.kernels, f32.library, bf16.kernels, bf16.param_casts, bf16.at_load,
                   bf16.library, bf16.gemms_low);
        CHECK_EQ_INT(f32.param_casts, 0);
        CHECK_EQ_INT(f32.at_load, 0);
        CHECK_EQ_INT(bf16.param_casts, cases[i].param_casts);
        CHECK_EQ_INT(bf16.at_load, cases[i].at_load);
        CHECK_EQ_INT(bf16.gemms_low, cases[i].gemms);
        CHECK_EQ_INT(bf16.library, cases[i].library);
        /* Beside the casts of activations, the f32 plan's kernels. */
        CHECK_EQ_INT(bf16.kernels - bf16.param_casts, f32.kernels);
        fc_graph_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* 2. Numerics on the CPU backend and CUDA                             */
/* ------------------------------------------------------------------ */

static double value_at(const fc_tensor *t, int64_t i) { return fc_interp_load(t->dtype, t->data, i); }

static void set_at(fc_tensor *t, int64_t i, double x) {
    switch (t->dtype) {
    case FC_F64: ((double *)t->data)[i] = x; break;
    case FC_F32: ((float *)t->data)[i] = (float)x; break;
    case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)x); break;
    case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)x); break;
    default: break;
    }
}

/* ||got - want|| / ||want|| over every element. */
static double rel_l2(const fc_tensor *got, const fc_tensor *want) {
    int64_t n = fc_tensor_numel(want);
    if (fc_tensor_numel(got) != n) return INFINITY;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = value_at(got, i) - value_at(want, i), w = value_at(want, i);
        num += d * d;
        den += w * w;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Inputs of order one: uniform [-1, 1), weights (rank-2 parameters whose
 * name has a w: w1, wq, attn_w) scaled by 1/sqrt(rows), as a model's are
 * scaled by their fan-in, so that activations stay of order one. */
static fc_tensor *make_inputs(fc_graph *g, uint64_t seed) {
    int n = fc_graph_num_params(g);
    fc_tensor *in = calloc((size_t)n + 1, sizeof *in);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        fc_value *p = fc_graph_param(g, i);
        param_type(&in[i], p);
        int64_t numel = fc_tensor_numel(&in[i]);
        in[i].data = calloc((size_t)(numel ? numel : 1), fc_dtype_size(in[i].dtype));
        bool weight = in[i].rank == 2 && p->name && strchr(p->name, 'w');
        double scale = weight ? 1.0 / sqrt((double)in[i].shape[0]) : 1.0;
        for (int64_t k = 0; k < numel; k++) set_at(&in[i], k, splitmix_uniform(&s) * scale);
    }
    return in;
}

static void free_tensors(fc_tensor *t, int n) {
    for (int i = 0; i < n; i++) fc_tensor_release(&t[i]);
    free(t);
}

/* The device the numeric cases run on: the CPU backend, then CUDA where a
 * GPU is present. */
static fc_device device = FC_DEVICE_CPU;

/* Compile g for `device` at precision p and run it on `in`; NULL on
 * failure (a CHECK failed). */
static fc_tensor *run_on(fc_graph *g, fc_precision p, const fc_tensor *in) {
    fc_compile_options o = options_for(device, p);
    fc_program *prog = compile_checked(g, &o);
    if (!prog) return NULL;
    int nout = fc_graph_num_outputs(g);
    fc_tensor *out = calloc((size_t)nout + 1, sizeof *out);
    fc_status st = fc_program_run_host(prog, in, fc_graph_num_params(g), out, nout, NULL, 0);
    CHECK_EQ_INT(st, FC_OK);
    fc_program_free(prog);
    if (st != FC_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static fc_tensor *run_ref(fc_graph *g, const fc_tensor *in) {
    int nout = fc_graph_num_outputs(g);
    fc_tensor *want = calloc((size_t)nout + 1, sizeof *want);
    fc_status st = fc_run_reference(g, in, fc_graph_num_params(g), want, nout);
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK) {
        free(want);
        return NULL;
    }
    return want;
}

/* The autocast tolerance (docs/PRECISION.md): relative L2 error, about five
 * units of roundoff of the low dtype (2^-9 for bf16, 2^-12 for f16). */
static double autocast_tolerance(fc_precision p) { return p == FC_PRECISION_BF16 ? 1e-2 : 1.5e-3; }

static void numeric_case(const char *file, const fc_binding *binds, int nbinds) {
    fc_graph *g = parse_file(file, binds, nbinds, NULL);
    if (!g) return;
    fc_tensor *in = make_inputs(g, 7);
    fc_tensor *want = run_ref(g, in);
    int nout = fc_graph_num_outputs(g);
    const fc_precision ps[] = {FC_PRECISION_BF16, FC_PRECISION_F16};
    for (int k = 0; want && k < 2; k++) {
        fc_tensor *got = run_on(g, ps[k], in);
        for (int i = 0; got && i < nout; i++) {
            CHECK_EQ_INT(got[i].dtype, want[i].dtype); /* results keep their declared dtype */
            double e = rel_l2(&got[i], &want[i]), tol = autocast_tolerance(ps[k]);
            if (verbose || e > tol || e < 1e-5)
                printf("  %s %s out%d at %s: relative L2 error %.3g (tolerance %.3g)\n", fc_device_name(device), file,
                       i, ps[k] == FC_PRECISION_BF16 ? "bf16" : "f16", e, tol);
            CHECK(e <= tol);
            CHECK(e > 1e-5); /* the low dtype was used */
        }
        if (got) free_tensors(got, nout);
    }
    if (want) free_tensors(want, nout);
    free_tensors(in, fc_graph_num_params(g));
    fc_graph_free(g);
}

/* FC_PRECISION_F32 on a bf16 graph computes what the graph written in f32
 * computes, rounded once to the declared bf16 results. */
static void widen_case(void) {
    const fc_binding bt[] = {{"B", 1}, {"T", 16}};
    fc_graph *g16 = parse_file("examples/llama_block.ir", bt, 2, NULL);
    fc_graph *g32 = parse_file("examples/llama_block.ir", bt, 2, "f32 ");
    if (!g16 || !g32) {
        fc_graph_free(g16);
        fc_graph_free(g32);
        return;
    }
    /* The same numbers for both: generated in f32, rounded to bf16, read
     * back into the f32 graph's inputs. */
    fc_tensor *in16 = make_inputs(g16, 11), *in32 = make_inputs(g32, 11);
    int np = fc_graph_num_params(g16);
    for (int i = 0; i < np; i++)
        for (int64_t k = 0; k < fc_tensor_numel(&in16[i]); k++) set_at(&in32[i], k, value_at(&in16[i], k));
    fc_tensor *want = run_ref(g32, in32);
    fc_tensor *wide = run_on(g16, FC_PRECISION_F32, in16), *narrow = run_on(g16, FC_PRECISION_AS_WRITTEN, in16);
    if (want && wide && narrow) {
        CHECK_EQ_INT(wide[0].dtype, FC_BF16);
        double ew = rel_l2(&wide[0], &want[0]), en = rel_l2(&narrow[0], &want[0]);
        if (verbose) printf("  llama_block bf16: against its f32 form, f32 precision %.3g, as written %.3g\n", ew, en);
        CHECK(ew <= 2e-3);
        CHECK(ew < en);
    }
    if (want) free_tensors(want, 1);
    if (wide) free_tensors(wide, 1);
    if (narrow) free_tensors(narrow, 1);
    free_tensors(in16, np);
    free_tensors(in32, np);
    fc_graph_free(g16);
    fc_graph_free(g32);
}

static void numerics_on(void) {
    const fc_binding bt[] = {{"B", 1}, {"T", 16}}, b[] = {{"B", 32}};
    const char *passes[] = {"tests/passes/autocast_gemm_chain.ir", "tests/passes/autocast_softmax.ir",
                            "tests/passes/autocast_layernorm.ir", "tests/passes/autocast_mlp.ir",
                            "tests/passes/autocast_attention.ir", "tests/passes/autocast_attention_scaled.ir",
                            "tests/passes/autocast_gemm_residual.ir"};
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) numeric_case(passes[i], NULL, 0);
    numeric_case("examples/gpt2_block.ir", bt, 2);
    numeric_case("bench/llama_block_f32.ir", bt, 2);
    numeric_case("bench/mlp_f32.ir", b, 1);
    widen_case();
}

static void test_numerics(void) {
    if (fc_device_built(FC_DEVICE_CPU)) {
        device = FC_DEVICE_CPU;
        numerics_on();
    } else {
        printf("  (no CPU backend in this build: its numerics skipped)\n");
    }
    if (fc_device_available(FC_DEVICE_CUDA)) {
        device = FC_DEVICE_CUDA;
        numerics_on();
    } else {
        printf("  (no GPU: the CUDA numerics skipped)\n");
    }
}

/* ------------------------------------------------------------------ */
/* 3. What the pass leaves alone                                       */
/* ------------------------------------------------------------------ */

static char *after(fc_graph *g, fc_precision p, int times) {
    fc_graph *c = fc_graph_clone(g);
    CHECK(c != NULL);
    if (!c) return NULL;
    for (int i = 0; i < times; i++) CHECK_EQ_INT(fc_pass_autocast(c, p), FC_OK);
    CHECK_EQ_INT(fc_verify(c), FC_OK);
    char *s = fc_print(c);
    fc_graph_free(c);
    return s;
}

static void test_leaves(void) {
    const fc_binding bt[] = {{"B", 1}, {"T", 8}};
    fc_graph *f32 = parse_file("examples/gpt2_block.ir", bt, 2, NULL);
    fc_graph *bf16 = parse_file("examples/gpt2_block_bf16.ir", bt, 2, NULL);
    if (f32 && bf16) {
        char *orig = fc_print(f32), *orig16 = fc_print(bf16);
        const fc_precision same[] = {FC_PRECISION_AS_WRITTEN, FC_PRECISION_TF32};
        for (int i = 0; i < 2; i++) {
            char *s = after(f32, same[i], 1);
            CHECK_STR(s, orig);
            fc_free(s);
        }
        /* A bf16 graph has no f32 value at bf16 (decompose has not run). */
        char *s16 = after(bf16, FC_PRECISION_BF16, 1);
        CHECK_STR(s16, orig16);
        fc_free(s16);
        /* Idempotent: a second run changes nothing. */
        const fc_precision ps[] = {FC_PRECISION_BF16, FC_PRECISION_F16};
        for (int i = 0; i < 2; i++) {
            char *once = after(f32, ps[i], 1), *twice = after(f32, ps[i], 2);
            CHECK(once && strcmp(once, orig) != 0);
            CHECK_STR(twice, once);
            fc_free(once);
            fc_free(twice);
        }
        char *w1 = after(bf16, FC_PRECISION_F32, 1), *w2 = after(bf16, FC_PRECISION_F32, 2);
        CHECK(w1 && strcmp(w1, orig16) != 0);
        CHECK_STR(w2, w1);
        fc_free(w1);
        fc_free(w2);
        /* Nothing to widen in an f32 graph. */
        char *w32 = after(f32, FC_PRECISION_F32, 1);
        CHECK_STR(w32, orig);
        fc_free(w32);
        fc_free(orig);
        fc_free(orig16);
    }
    fc_graph_free(f32);
    fc_graph_free(bf16);
}

int main(void) {
    ctx = fc_context_new();
    const char *v = getenv("FUSEC_TEST_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    test_plans();
    test_numerics();
    test_leaves();
    fc_context_free(ctx);
    return check_report("test_autocast");
}

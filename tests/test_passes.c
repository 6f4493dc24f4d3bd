/* test_passes.c - the graph passes: canonicalize, decompose, dce and the
 * rewriting utilities under them.
 *
 *  1. File tests (as TCC's and MLIR's): every .ir file in tests/passes/ holds an
 *     input graph and, in comments, the passes to run and the exact IR
 *     expected after them:
 *
 *         # RUN: decompose,canonicalize      (passes, in order)
 *         # BIND: N=4                        (optional: symbol bindings)
 *         # EXPECT:
 *         # graph f(%x: f32[4]) {
 *         #   ...
 *         # }
 *         graph f(%x: f32[4]) { ... }
 *
 *     The block ends at the first line that is not a comment. The runner
 *     parses the first graph, runs the passes (fc_verify after each), prints
 *     and compares exactly; then checks the result is a fixpoint (running
 *     the passes again changes nothing) and that the expected text parses
 *     and prints back to itself.
 *  2. Numerics of decompose: every composite, in f32, bf16 and f16, gives
 *     the same results as the composite under the reference interpreter.
 *  3. Every graph of examples/ (and tests/format/all_ops.ir) stays valid
 *     under every pass (autocast at each precision too), symbolic and bound, and computes the same after the
 *     whole graph pipeline.
 *  4. The rewriter's own invariants, bad calls, and allocation failures at
 *     every allocation of the pipeline.
 *  5. Random graphs: canonicalize leaves every result of 400 random graphs
 *     bit-identical under the reference, NaN, inf and signed zeros included.
 *
 * FUSEC_TEST_VERBOSE=1 prints the numeric errors of 2 and 3 (as multiples of
 * their tolerance); FUSEC_FUZZ_ITERS and FUSEC_FUZZ_SEED lengthen 5.
 */
#include "check.h"
#include "ir.h"
#include "pass_file.h"
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "runtime/ref/interp.h"
#include "test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse "N=4, B=2" into binds (names point into a static copy). */
/* ------------------------------------------------------------------ */
/* 1. File tests                                                       */
/* ------------------------------------------------------------------ */

static void test_files(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/passes", src_dir());
    char **files = list_ir(dir);
    CHECK(files != NULL);
    int n = 0;
    for (int i = 0; files && files[i]; i++, n++) run_pass_file(files[i], NULL);
    CHECK(n >= 20);
    free_list(files);
}

/* ------------------------------------------------------------------ */
/* Running graphs                                                      */
/* ------------------------------------------------------------------ */

/* A small deterministic generator: xorshift64*. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

/* Random inputs for g's params (static dims): floats in [lo, hi), integers
 * in [0, 4) (valid gather indices for the test graphs), bools 0/1. Float
 * matrices ([K, N], as matmul weights are) are scaled by 1/sqrt(K), as
 * initialisers do: unscaled, a transformer block's activations grow to
 * millions and its attention turns into an argmax whose winner flips on a
 * last-bit difference, which would test the conditioning of the inputs
 * rather than the passes. */
static void make_inputs(fc_graph *g, fc_interp_tensor *in, double lo, double hi) {
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = g->params[i];
        in[i].dtype = p->dtype;
        in[i].rank = p->rank;
        int64_t n = 1;
        for (int k = 0; k < p->rank; k++) n *= in[i].shape[k] = p->dims[k];
        in[i].data = malloc(sizeof(double) * (size_t)(n ? n : 1));
        double scale = p->rank == 2 && p->dims[0] > 0 ? 1.0 / sqrt((double)p->dims[0]) : 1.0;
        for (int64_t j = 0; j < n; j++) {
            double u = uniform();
            if (fc_dtype_is_float(p->dtype)) in[i].data[j] = (lo + (hi - lo) * u) * scale;
            else if (p->dtype == FC_BOOL) in[i].data[j] = u < 0.5;
            else in[i].data[j] = (double)(int)(u * 4);
        }
    }
}

/* Largest error of `got` against `ref`, as a multiple of the tolerance:
 * <= 1 passes. The tolerance of an element is tol * |ref| + 1e-6 or, with
 * of_max, tol * max |ref| + 1e-6. NaN must match NaN and inf match inf. */
static double worst_error(const fc_interp_tensor *got, const fc_interp_tensor *ref, double tol, bool of_max) {
    if (got->rank != ref->rank || memcmp(got->shape, ref->shape, sizeof(int64_t) * (size_t)ref->rank)) return INFINITY;
    int64_t n = fc_interp_tensor_numel(ref);
    double worst = 0, max_ref = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref->data[i]) && fabs(ref->data[i]) > max_ref) max_ref = fabs(ref->data[i]);
    for (int64_t i = 0; i < n; i++) {
        double a = got->data[i], b = ref->data[i];
        if (isnan(a) || isnan(b)) {
            if (isnan(a) != isnan(b)) return INFINITY;
            continue;
        }
        if (isinf(a) || isinf(b)) {
            if (a != b) return INFINITY;
            continue;
        }
        double e = fabs(a - b) / (1e-6 + tol * (of_max ? max_ref : fabs(b)));
        if (e > worst) worst = e;
    }
    return worst;
}

/* ------------------------------------------------------------------ */
/* 2. Numerics of decompose                                            */
/* ------------------------------------------------------------------ */

/* One composite per graph; DT is replaced by the dtype under test. */
static const char *const composites[] = {
    "graph t(%x: DT[4, 37]) {\n %y = softmax(%x, axis=-1)\n return %y\n}\n",
    "graph t(%x: DT[3, 5, 7]) {\n %y = softmax(%x, axis=1)\n return %y\n}\n",
    "graph t(%x: DT[4, 48], %w: DT[48], %b: DT[48]) {\n %y = layernorm(%x, %w, %b, eps=1e-5)\n return %y\n}\n",
    "graph t(%x: DT[2, 6, 5], %w: DT[6], %b: DT[6]) {\n %y = layernorm(%x, %w, %b, axis=1, eps=1e-3)\n return %y\n}\n",
    "graph t(%x: DT[3, 16], %w: f32[16], %b: f32[16]) {\n %y = layernorm(%x, %w, %b)\n return %y\n}\n",
    "graph t(%x: DT[4, 64], %w: DT[64]) {\n %y = rmsnorm(%x, %w, eps=1e-6)\n return %y\n}\n",
    "graph t(%x: DT[2, 3, 40], %w: DT[40]) {\n %y = rmsnorm(%x, %w, eps=1e-5)\n return %y\n}\n",
    "graph t(%x: DT[4, 33]) {\n %y = gelu(%x)\n return %y\n}\n",
    "graph t(%x: DT[4, 33]) {\n %y = silu(%x)\n return %y\n}\n",
    "graph t(%x: DT[3, 4, 5]) {\n %y = reduce_mean(%x, axes=[0, 2])\n return %y\n}\n",
    "graph t(%x: DT[3, 4, 5]) {\n %y = reduce_mean(%x, axes=[-1], keepdim=true)\n return %y\n}\n",
    "graph t(%x: DT[3, 4, 5]) {\n %y = reduce_mean(%x, axes=[])\n return %y\n}\n",
    /* integer inputs: gelu and silu compute in f32 */
    "graph t(%x: DT[4, 8], %i: i32[4, 8]) {\n %y = gelu(%i)\n %z = silu(%i)\n return %y, %z\n}\n",
};

static bool has_composite(const fc_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && (fc_op_table[g->nodes[i]->op].kind == FC_KIND_COMPOSITE || g->nodes[i]->op == FC_OP_GELU ||
                                   g->nodes[i]->op == FC_OP_SILU))
            return true;
    return false;
}

/* Run g0 and g1 on the same random inputs; the worst error of g1's results
 * against g0's (see worst_error), INFINITY if either fails to run. */
static double compare_runs(fc_graph *g0, fc_graph *g1, double tol, bool of_max, double lo, double hi) {
    fc_interp_tensor in[64] = {0}, r0[16] = {0}, r1[16] = {0};
    FC_ASSERT(g0->nparams <= 64 && g0->noutputs <= 16);
    double worst = INFINITY;
    make_inputs(g0, in, lo, hi);
    if (fc_interp_run(g0, in, g0->nparams, r0, g0->noutputs) != FC_OK ||
        fc_interp_run(g1, in, g1->nparams, r1, g1->noutputs) != FC_OK) {
        fprintf(stderr, "run: %s\n", fc_last_error(g0->ctx));
    } else {
        worst = 0;
        for (int i = 0; i < g0->noutputs; i++) {
            double e = worst_error(&r1[i], &r0[i], tol, of_max);
            if (e > worst) worst = e;
        }
    }
    for (int i = 0; i < g0->nparams; i++) fc_interp_tensor_release(&in[i]);
    for (int i = 0; i < g0->noutputs; i++) {
        fc_interp_tensor_release(&r0[i]);
        fc_interp_tensor_release(&r1[i]);
    }
    return worst;
}

/* Parse graph `graph` of `text` twice, run `passes` on the second copy, and
 * compare the two on random inputs (compare_runs). *lowered (if given)
 * tells whether no composite is left. */
static double compare_after(const char *text, const char *graph, const char *passes, const fc_binding *binds, int nbinds,
                            double tol, bool of_max, double lo, double hi, bool *lowered) {
    fc_context *ctx = fc_context_new();
    fc_graph *g0 = NULL, *g1 = NULL;
    double worst = INFINITY;
    if (fc_parse(ctx, "t.ir", text, strlen(text), graph, binds, nbinds, &g0) != FC_OK ||
        fc_parse(ctx, "t.ir", text, strlen(text), graph, binds, nbinds, &g1) != FC_OK) {
        fprintf(stderr, "parse: %s\n", fc_last_error(ctx));
    } else if (run_passes(g1, passes, "compare") == FC_OK) {
        if (lowered) *lowered = !has_composite(g1);
        worst = compare_runs(g0, g1, tol, of_max, lo, hi);
    }
    fc_graph_free(g0);
    fc_graph_free(g1);
    fc_context_free(ctx);
    return worst;
}

/* Tolerances: f32 differs from the float64 reference by f32 rounding of each
 * step; f16/bf16 results are rounded once in both, so they may differ by one
 * unit in the last place (2^-7 of the value for bf16, 2^-10 for f16) where
 * the f32 result lies next to a rounding boundary. */
static void test_decompose_numerics(void) {
    static const struct { const char *name; double tol; } dts[] = {
        {"f32", 1e-5},
        {"bf16", 1.0 / 128},
        {"f16", 1.0 / 1024},
    };
    for (size_t c = 0; c < sizeof composites / sizeof composites[0]; c++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            char *text = with_dtype(composites[c], dts[d].name);
            static const char *const pipelines[] = {"decompose", "canonicalize,decompose,canonicalize"};
            for (int p = 0; p < 2; p++) {
                bool lowered = false;
                /* Offset inputs: layernorm must subtract a mean that is not 0. */
                double e = compare_after(text, NULL, pipelines[p], NULL, 0, dts[d].tol, false, -1.5, 3.5, &lowered);
                if (getenv("FUSEC_TEST_VERBOSE")) fprintf(stderr, "decompose %s/%s c%zu: error %.3f\n", dts[d].name, pipelines[p], c, e);
                if (e > 1 || !lowered) fprintf(stderr, "decompose numerics: error %g (lowered %d) for %s:\n%s", e, lowered, pipelines[p], text);
                CHECK(e <= 1);
                CHECK(lowered);
            }
            free(text);
        }
}

/* ------------------------------------------------------------------ */
/* 3. Examples                                                         */
/* ------------------------------------------------------------------ */

static const fc_binding example_binds[] = {{"B", 2}, {"T", 8}, {"N", 4}, {"S", 8}};

/* Every pass alone and the graph pipeline keep every graph valid, with its
 * symbols free and bound; the pipeline computes the same values. */
static void test_examples_one(const char *path, const char *graph) {
    static const char *const pipelines[] = {"canonicalize", "decompose", "dce", "canonicalize,decompose,canonicalize",
                                            "decompose,autocast_bf16,canonicalize",
                                            "decompose,autocast_f16,canonicalize",
                                            "decompose,autocast_f32,canonicalize"};
    const int npipelines = (int)(sizeof pipelines / sizeof pipelines[0]);
    char *text = read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) return;
    for (int bound = 0; bound < 2; bound++)
        for (int p = 0; p < npipelines; p++) {
            fc_context *ctx = fc_context_new();
            fc_graph *g = NULL;
            fc_status st = fc_parse(ctx, path, text, strlen(text), graph, example_binds, bound ? 4 : 0, &g);
            if (st != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
            CHECK(st == FC_OK);
            if (st == FC_OK) {
                char where[512];
                snprintf(where, sizeof where, "%s (%s, %s)", path, graph, bound ? "bound" : "symbolic");
                CHECK(run_passes(g, pipelines[p], where) == FC_OK);
                /* The result prints, and the text parses back. */
                char *out = fc_print(g);
                CHECK(out != NULL);
                fc_graph *back = NULL;
                if (out) {
                    st = fc_parse(ctx, "printed", out, strlen(out), NULL, example_binds, bound ? 4 : 0, &back);
                    if (st != FC_OK) fprintf(stderr, "%s: printed IR does not parse: %s\n%s", where, fc_last_error(ctx), out);
                    CHECK(st == FC_OK);
                }
                fc_graph_free(back);
                fc_free(out);
            }
            fc_graph_free(g);
            fc_context_free(ctx);
        }
    /* The pipeline computes the same values, at small static shapes.
     * Matmuls sum many rounded terms, so errors are measured against the
     * largest result rather than each element. */
    bool narrow = strstr(text, "bf16[") || strstr(text, "f16[");
    double e = compare_after(text, graph, "canonicalize,decompose,canonicalize", example_binds, 4, narrow ? 3e-2 : 1e-4,
                             true, -1, 1, NULL);
    if (getenv("FUSEC_TEST_VERBOSE")) fprintf(stderr, "%s (%s): error %.3f\n", path, graph, e);
    if (e > 1) fprintf(stderr, "%s (%s): the pipeline changed the results (error %g)\n", path, graph, e);
    CHECK(e <= 1);
    free(text);
}

static void test_examples(void) {
    char dir[1024];
    const char *const dirs[] = {"examples", "tests/format"};
    int ngraphs = 0;
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/%s", src_dir(), dirs[k]);
        char **files = list_ir(dir);
        for (int i = 0; files && files[i]; i++) {
            char *text = read_file(files[i], NULL);
            if (!text) continue;
            fc_context *ctx = fc_context_new();
            char **names = NULL;
            int n = 0;
            if (fc_parse_graph_names(ctx, files[i], text, strlen(text), &names, &n) == FC_OK) {
                for (int j = 0; j < n; j++, ngraphs++) {
                    test_examples_one(files[i], names[j]);
                    fc_free(names[j]);
                }
                fc_free(names);
            }
            fc_context_free(ctx);
            free(text);
        }
        free_list(files);
    }
    CHECK(ngraphs >= 8); /* the examples were found */
}

/* ------------------------------------------------------------------ */
/* 4. The rewriter, and allocation failures                            */
/* ------------------------------------------------------------------ */

/* Ids are dense: every param, weak operand and result of a live node has a
 * distinct id below next_value_id, and node i has id i. */
static bool ids_dense(const fc_graph *g) {
    bool *seen = calloc((size_t)g->next_value_id + 1, 1);
    int count = 0;
    bool ok = true;
#define SEE(v)                                                                          \
    do {                                                                                \
        int id_ = (v)->id;                                                              \
        if (id_ < 0 || id_ >= g->next_value_id || seen[id_]) ok = false;                \
        else seen[id_] = true, count++;                                                 \
    } while (0)
    for (int i = 0; i < g->nparams; i++) SEE(g->params[i]);
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->id != i || n->dead) ok = false;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k]->weak) SEE(n->in[k]);
        for (int k = 0; k < n->nout; k++) SEE(n->out[k]);
    }
#undef SEE
    free(seen);
    return ok && count == g->next_value_id && g->next_node_id == g->nnodes;
}

/* A rebuild by hand: mul(a, a) becomes pow(a, 2) in place. */
static void test_rewriter(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "rw");
    fc_dim d4 = 4;
    fc_value *x = fc_param(g, "x", FC_F32, 1, &d4);
    fc_value *a = fc_exp(g, x);
    fc_value *b = fc_mul(g, a, a);
    fc_value *c = fc_tanh(g, b);
    fc_value *e = fc_add(g, c, fc_scalar(g, 1.0)); /* an unused fc_scalar handle leaves an id hole */
    a->name = "a";
    c->name = "c";
    CHECK(fc_graph_return(g, 1, &e) == FC_OK);
    fc_node *mul = b->def;

    /* Use counts: a is read twice by mul, e is the result. */
    int *uses = fc_use_counts(g);
    CHECK_EQ_INT(uses[a->id], 2);
    CHECK_EQ_INT(uses[b->id], 1);
    CHECK_EQ_INT(uses[e->id], 1);
    CHECK_EQ_INT(uses[x->id], 1);
    fc_ctx_freemem(ctx, uses);

    fc_rewriter rw;
    CHECK(fc_rw_begin(&rw, g) == FC_OK);
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        if (n->op != FC_OP_MUL) {
            CHECK(fc_rw_keep(&rw, n));
            continue;
        }
        fc_value *p = fc_rw_op2s(&rw, FC_OP_POW, n->in[0], 2.0);
        CHECK(p != NULL && p->name == NULL);
        CHECK(fc_rw_replace(&rw, n->out[0], p));
        CHECK(fc_rw_value(&rw, b) == p);
        /* A cast to the value's own dtype builds nothing. */
        CHECK(fc_rw_cast(&rw, p, FC_F32) == p);
    }
    CHECK(fc_rw_end(&rw) == FC_OK);
    CHECK(fc_verify(g) == FC_OK);
    char *s = fc_print(g);
    CHECK_STR(s, "graph rw(%x: f32[4]) {\n"
                 "  %a = exp(%x) : f32[4]\n"
                 "  %v0 = pow(%a, 2.0) : f32[4]\n"
                 "  %c = tanh(%v0) : f32[4]\n"
                 "  %v1 = add(%c, 1.0) : f32[4]\n"
                 "  return %v1\n"
                 "}\n");
    fc_free(s);
    CHECK(ids_dense(g));
    /* The dropped node is dead and its result has no id, so a stale use of
     * it is caught by the verifier rather than aliasing a live value. */
    CHECK(mul->dead);
    CHECK_EQ_INT(b->id, -1);
    fc_value *saved = c->def->in[0];
    c->def->in[0] = b;
    CHECK(fc_verify(g) != FC_OK);
    c->def->in[0] = saved;
    CHECK(fc_verify(g) == FC_OK);

    /* In place, outside a rebuild. */
    fc_replace_all_uses(g, a, x);
    s = fc_print(g);
    CHECK(s && strstr(s, "pow(%x, 2.0)") && strstr(s, "%a = exp(%x)"));
    fc_free(s);
    CHECK(fc_pass_dce(g) == FC_OK);
    s = fc_print(g);
    CHECK(s && !strstr(s, "exp("));
    fc_free(s);
    CHECK(ids_dense(g));
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* New nodes take the location of the node they replace, so an error found
 * later still points at the source statement. */
static void test_locations(void) {
    static const char text[] = "graph f(%x: bf16[2, 8], %w: bf16[8]) {\n"
                               "  %a = exp(%x)\n"
                               "  %y = rmsnorm(%a, %w)\n"
                               "  return %y\n"
                               "}\n";
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    CHECK(fc_parse(ctx, "f.ir", text, strlen(text), NULL, NULL, 0, &g) == FC_OK);
    if (!g) return;
    fc_loc before = g->cur_loc;
    CHECK(fc_pass_decompose(g) == FC_OK);
    CHECK(g->nnodes > 5);
    CHECK_EQ_INT(g->nodes[0]->loc.line, 2);
    for (int i = 1; i < g->nnodes; i++) CHECK_EQ_INT(g->nodes[i]->loc.line, 3);
    CHECK(g->cur_loc.line == before.line && g->cur_loc.col == before.col);
    CHECK(ids_dense(g));
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* Bad calls are refused: NULL graphs, graphs already poisoned, graphs
 * without results. */
static void test_refusals(void) {
    CHECK(fc_pass_canonicalize(NULL) == FC_ERR_USAGE);
    CHECK(fc_pass_decompose(NULL) == FC_ERR_USAGE);
    CHECK(fc_pass_dce(NULL) == FC_ERR_USAGE);
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "bad");
    fc_dim d[2] = {2, 3};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d);
    fc_value *y = fc_matmul(g, x, x); /* inner dims differ: poisons g */
    (void)y;
    CHECK(fc_graph_status(g) == FC_ERR_INPUT);
    CHECK(fc_pass_canonicalize(g) == FC_ERR_INPUT);
    CHECK(fc_pass_decompose(g) == FC_ERR_INPUT);
    CHECK(fc_pass_dce(g) == FC_ERR_INPUT);
    fc_graph_free(g);

    /* A graph without results: every node would be dead. */
    g = fc_graph_new(ctx, "open");
    fc_dim d4 = 4;
    fc_exp(g, fc_param(g, "x", FC_F32, 1, &d4));
    CHECK(fc_pass_canonicalize(g) == FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "no results") != NULL);
    CHECK(fc_pass_decompose(g) == FC_ERR_USAGE);
    CHECK(fc_pass_dce(g) == FC_ERR_USAGE);
    CHECK_EQ_INT(g->nnodes, 1);
    fc_graph_free(g);
    fc_context_free(ctx);
}

static fc_status canon_decompose(fc_graph *g) {
    fc_status st = fc_pass_canonicalize(g);
    if (st == FC_OK) st = fc_pass_decompose(g);
    if (st == FC_OK) st = fc_pass_canonicalize(g);
    return st;
}

/* Fail the Nth allocation of the pipeline for every N until it succeeds:
 * each failure must come back as FC_ERR_NOMEM without a crash or a leak
 * (ASan/LSan builds check the latter). */
static void test_alloc_failures(void) {
    static const char text[] = "graph f(%x: bf16[4, 32], %w: bf16[32], %b: bf16[32]) {\n"
                               "  %a = layernorm(%x, %w, %b)\n"
                               "  %r = rmsnorm(%a, %w)\n"
                               "  %s = softmax(%r, axis=0)\n"
                               "  %g = gelu(%s)\n"
                               "  %m = reduce_mean(%g, axes=[1], keepdim=true)\n"
                               "  %o = mul(%m, 1.0)\n"
                               "  %t = reshape(%s, shape=[32, 4])\n"
                               "  %u = reshape(%t, shape=[4, 32])\n"
                               "  %y = add(%u, %o)\n"
                               "  return %y\n"
                               "}\n";
    CHECK(pass_through_alloc_failures(text, NULL, canon_decompose) > 10);
}

/* ------------------------------------------------------------------ */
/* 5. Random graphs: canonicalize changes no result                    */
/* ------------------------------------------------------------------ */

static int pick(int n) { return (int)(uniform() * n) % n; }

/* Constants the identities and folds look for, and ones they must not take. */
static double special(void) {
    static const double v[] = {0.0, -0.0, 1.0, 1.0, 2.0, 0.5, -1.0, 3.0, 1.001, 1e-3};
    return v[pick(10)];
}

/* A random graph over [4, 6] values of several dtypes, made of the ops and
 * shapes the rules look at: weak scalars and fulls of special values,
 * identity-prone ops, cast chains, view chains, duplicated nodes. */
static fc_graph *random_graph(fc_context *ctx) {
    static const fc_dtype floats[] = {FC_F32, FC_BF16, FC_F16, FC_F64};
    static const fc_dtype all[] = {FC_F32, FC_BF16, FC_F16, FC_F64, FC_I32, FC_I8, FC_I64, FC_BOOL};
    fc_graph *g = fc_graph_new(ctx, "fuzz");
    fc_dim shape[2] = {4, 6}, flat[1] = {24}, tr[2] = {6, 4}, row[1] = {6};
    fc_value *pool[64];
    int n = 0;
    pool[n++] = fc_param(g, "a", FC_F32, 2, shape);
    pool[n++] = fc_param(g, "b", FC_BF16, 2, shape);
    pool[n++] = fc_param(g, "c", FC_F16, 2, shape);
    pool[n++] = fc_param(g, "i", FC_I32, 2, shape);
    int nsteps = 20 + pick(20);
    for (int step = 0; step < nsteps && n < 64; step++) {
        fc_value *x = pool[pick(n)], *y = pool[pick(n)], *r = NULL;
        bool xf = fc_dtype_is_float(x->dtype);
        switch (pick(12)) {
        case 0: { /* unary */
            static fc_value *(*const un[])(fc_graph *, fc_value *) = {fc_neg, fc_exp, fc_tanh, fc_relu, fc_abs, fc_sigmoid};
            r = xf ? un[pick(6)](g, x) : fc_neg(g, x);
            break;
        }
        case 1:
        case 2: { /* binary with a tensor, a weak scalar or a full */
            static fc_value *(*const bin[])(fc_graph *, fc_value *, fc_value *) = {fc_add, fc_sub, fc_mul, fc_div,
                                                                                  fc_max, fc_pow};
            fc_value *other = y;
            int k = pick(3);
            if (k == 1) {
                other = fc_scalar(g, special());
                if (pick(2)) other->weak_int = other->scalar == (double)(int)other->scalar && !signbit(other->scalar);
            } else if (k == 2) {
                bool full_shape = pick(2);
                other = fc_full(g, full_shape ? 2 : 1, full_shape ? shape : row, special(), all[pick(6)]);
            }
            r = pick(2) ? bin[pick(6)](g, x, other) : bin[pick(6)](g, other, x);
            break;
        }
        case 3: r = fc_cast(g, x, all[pick(7)]); break;
        case 4: r = fc_cast(g, fc_cast(g, x, all[pick(7)]), all[pick(7)]); break;
        case 5: r = fc_reshape(g, fc_reshape(g, x, 1, flat), 2, pick(2) ? shape : tr); break;
        case 6: {
            int p10[2] = {1, 0}, p01[2] = {0, 1};
            r = fc_permute(g, fc_permute(g, x, 2, p10), 2, pick(2) ? p10 : p01);
            break;
        }
        case 7: r = pick(2) ? fc_expand(g, x, 2, shape) : fc_slice(g, x, pick(2), 0, INT64_MAX, 1); break;
        case 8: r = xf ? fc_neg(g, fc_neg(g, x)) : fc_add(g, x, x); break;
        case 9: { /* where of a compare, or of a constant condition */
            fc_value *cond = pick(2) ? fc_gt(g, x, fc_scalar(g, 0.5)) : fc_full(g, 0, NULL, pick(2), FC_BOOL);
            r = fc_where(g, cond, x, y);
            break;
        }
        case 10: { /* an exact duplicate of an earlier node, for CSE */
            r = fc_mul(g, x, y);
            fc_value *r2 = fc_mul(g, x, y);
            r = fc_add(g, r, r2);
            break;
        }
        case 11: r = fc_full(g, 2, shape, special(), floats[pick(4)]); break;
        }
        if (!r || fc_graph_status(g)) break;
        if (r->rank == 2 && r->dims[0] == 4 && r->dims[1] == 6) pool[n++] = r;
    }
    fc_value *outs[3] = {pool[n - 1], pool[n - 2], pool[n / 2]};
    fc_graph_return(g, 3, outs);
    return g;
}

/* Equal as the reference stores them; the sign of a zero may differ (the
 * documented x + 0 -> x rewrite). */
static bool same_results(const fc_interp_tensor *a, const fc_interp_tensor *b) {
    int64_t n = fc_interp_tensor_numel(a);
    if (a->dtype != b->dtype || n != fc_interp_tensor_numel(b)) return false;
    for (int64_t i = 0; i < n; i++)
        if (!(a->data[i] == b->data[i] || (isnan(a->data[i]) && isnan(b->data[i])))) return false;
    return true;
}

/* FUSEC_FUZZ_ITERS=N runs N graphs instead of 400 (FUSEC_FUZZ_SEED picks
 * another sequence), for a longer search by hand. */
static void test_random_graphs(void) {
    const char *env = getenv("FUSEC_FUZZ_ITERS"), *seed = getenv("FUSEC_FUZZ_SEED");
    int iters = env ? atoi(env) : 400, tested = 0;
    if (seed) rng_state = strtoull(seed, NULL, 10) * 0x2545f4914f6cdd1dull + 1; /* never 0: xorshift sticks at 0 */
    for (int iter = 0; iter < iters; iter++) {
        fc_context *ctx = fc_context_new();
        fc_graph *g = random_graph(ctx);
        if (fc_graph_status(g) == FC_OK && fc_verify(g) == FC_OK) {
            fc_interp_tensor in[4] = {0}, r0[3] = {0}, r1[3] = {0};
            make_inputs(g, in, -2, 2);
            /* Special inputs: the identities must hold for them too. */
            static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 65504.0, 1e-30, 3.5};
            for (int p = 0; p < 4; p++)
                for (int j = 0; j < 24; j += 2) in[p].data[j] = specials[pick(10)];
            bool ok = fc_interp_run(g, in, 4, r0, 3) == FC_OK;
            char *before = fc_print(g);
            CHECK(fc_pass_canonicalize(g) == FC_OK);
            CHECK(fc_verify(g) == FC_OK);
            ok = ok && fc_interp_run(g, in, 4, r1, 3) == FC_OK;
            CHECK(ok);
            for (int k = 0; ok && k < 3; k++) {
                bool same = same_results(&r0[k], &r1[k]);
                if (!same) {
                    char *after = fc_print(g);
                    fprintf(stderr, "canonicalize changed result %d of:\n%s\ninto:\n%s", k, before, after);
                    fc_free(after);
                }
                CHECK(same);
            }
            fc_free(before);
            for (int k = 0; k < 4; k++) fc_interp_tensor_release(&in[k]);
            for (int k = 0; k < 3; k++) {
                fc_interp_tensor_release(&r0[k]);
                fc_interp_tensor_release(&r1[k]);
            }
            tested++;
        }
        fc_graph_free(g);
        fc_context_free(ctx);
    }
    CHECK(tested > iters * 3 / 4);
}

int main(void) {
    test_files();
    test_decompose_numerics();
    test_examples();
    test_rewriter();
    test_locations();
    test_refusals();
    test_alloc_failures();
    test_random_graphs();
    return check_report("test_passes");
}

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
 *     under every pass, symbolic and bound, and computes the same after the
 *     whole graph pipeline.
 *  4. The rewriter's own invariants, and allocation failures at every
 *     allocation of a pass.
 */
#include "check.h"
#include "ir.h"
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "runtime/interp.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src_dir(void) {
    const char *s = getenv("FUSEC_SRC");
    return s && *s ? s : ".";
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* The *.ir files of a directory, sorted (malloc'd paths; NULL-terminated). */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char **list_ir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".ir")) continue;
        v = realloc(v, sizeof *v * (size_t)(n + 2));
        v[n] = malloc(strlen(dir) + l + 2);
        sprintf(v[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (!v) v = calloc(1, sizeof *v);
    v[n] = NULL;
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v) {
    for (int i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

/* Run a comma-separated list of passes, verifying after each. */
static fc_status run_passes(fc_graph *g, const char *list, const char *where) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save, *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        fc_status st;
        if (!strcmp(p, "canonicalize")) st = fc_pass_canonicalize(g);
        else if (!strcmp(p, "decompose")) st = fc_pass_decompose(g);
        else if (!strcmp(p, "dce")) st = fc_pass_dce(g);
        else {
            fprintf(stderr, "%s: unknown pass '%s'\n", where, p);
            return FC_ERR_USAGE;
        }
        if (st == FC_OK) st = fc_verify(g);
        if (st != FC_OK) {
            fprintf(stderr, "%s: after %s: %s\n", where, p, fc_last_error(g->ctx));
            return st;
        }
    }
    return FC_OK;
}

/* Parse "N=4, B=2" into binds (names point into a static copy). */
static int parse_binds(const char *text, fc_binding *binds, int max) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    int n = 0;
    for (char *save, *p = strtok_r(buf, ", ", &save); p && n < max; p = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(p, '=');
        if (!eq) continue;
        *eq = 0;
        binds[n].name = p;
        binds[n].value = strtoll(eq + 1, NULL, 10);
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ */
/* 1. File tests                                                       */
/* ------------------------------------------------------------------ */

typedef struct {
    char run[256], bind[256];
    char *expect; /* malloc'd */
} directives;

/* Read the RUN, BIND and EXPECT comments of a test file. */
static bool read_directives(const char *text, directives *d) {
    memset(d, 0, sizeof *d);
    size_t cap = strlen(text) + 1, len = 0;
    d->expect = malloc(cap);
    d->expect[0] = 0;
    bool in_expect = false, have_expect = false;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        if (in_expect) {
            if (n == 0 || line[0] != '#') {
                in_expect = false;
            } else {
                /* "# text" -> "text"; "#" alone -> an empty line */
                size_t skip = n >= 2 && line[1] == ' ' ? 2 : 1;
                memcpy(d->expect + len, line + skip, n - skip);
                len += n - skip;
                d->expect[len++] = '\n';
                d->expect[len] = 0;
            }
        }
        if (!in_expect) {
            if (!strncmp(line, "# RUN:", 6)) snprintf(d->run, sizeof d->run, "%.*s", (int)(n - 6), line + 6);
            else if (!strncmp(line, "# BIND:", 7)) snprintf(d->bind, sizeof d->bind, "%.*s", (int)(n - 7), line + 7);
            else if (!strncmp(line, "# EXPECT:", 9)) in_expect = have_expect = true;
        }
        line += n + (eol ? 1 : 0);
    }
    return d->run[0] && have_expect;
}

static void run_file_test(const char *path) {
    char *text = read_file(path);
    CHECK(text != NULL);
    if (!text) return;
    directives d;
    if (!read_directives(text, &d)) {
        fprintf(stderr, "%s: needs '# RUN:' and '# EXPECT:'\n", path);
        CHECK(false);
        free(d.expect);
        free(text);
        return;
    }
    fc_binding binds[8];
    int nbinds = parse_binds(d.bind, binds, 8);
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    if (fc_parse(ctx, path, text, strlen(text), NULL, binds, nbinds, &g) != FC_OK) {
        fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
        CHECK(false);
    } else if (run_passes(g, d.run, path) != FC_OK) {
        CHECK(false);
    } else {
        char *got = fc_print(g);
        if (!got || strcmp(got, d.expect)) fprintf(stderr, "FAIL %s (RUN:%s)\n", path, d.run);
        CHECK_STR(got, d.expect);
        /* A fixpoint: the same passes again change nothing. */
        if (run_passes(g, d.run, path) == FC_OK) {
            char *again = fc_print(g);
            if (!again || !got || strcmp(again, got)) fprintf(stderr, "FAIL %s: not a fixpoint\n", path);
            CHECK_STR(again, got);
            fc_free(again);
        } else {
            CHECK(false);
        }
        fc_free(got);
        /* The expected text is itself canonical .ir. */
        fc_graph *e = NULL;
        if (fc_parse(ctx, "expect", d.expect, strlen(d.expect), NULL, binds, nbinds, &e) == FC_OK) {
            char *back = fc_print(e);
            CHECK_STR(back, d.expect);
            fc_free(back);
        } else {
            fprintf(stderr, "%s: the EXPECT block does not parse: %s\n", path, fc_last_error(ctx));
            CHECK(false);
        }
        fc_graph_free(e);
    }
    fc_graph_free(g);
    fc_context_free(ctx);
    free(d.expect);
    free(text);
}

static void test_files(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/passes", src_dir());
    char **files = list_ir(dir);
    CHECK(files != NULL);
    int n = 0;
    for (int i = 0; files && files[i]; i++, n++) run_file_test(files[i]);
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
 * in [0, 4) (valid gather indices for the test graphs), bools 0/1. */
static void make_inputs(fc_graph *g, fc_interp_tensor *in, double lo, double hi) {
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = g->params[i];
        in[i].dtype = p->dtype;
        in[i].rank = p->rank;
        int64_t n = 1;
        for (int k = 0; k < p->rank; k++) n *= in[i].shape[k] = p->dims[k];
        in[i].data = malloc(sizeof(double) * (size_t)(n ? n : 1));
        for (int64_t j = 0; j < n; j++) {
            double u = uniform();
            if (fc_dtype_is_float(p->dtype)) in[i].data[j] = lo + (hi - lo) * u;
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

static char *with_dtype(const char *tmpl, const char *dt) {
    char *out = malloc(strlen(tmpl) * 2 + 64);
    char *o = out;
    for (const char *p = tmpl; *p;) {
        if (p[0] == 'D' && p[1] == 'T') {
            o += sprintf(o, "%s", dt);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static bool has_composite(const fc_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && (fc_op_table[g->nodes[i]->op].kind == FC_KIND_COMPOSITE || g->nodes[i]->op == FC_OP_GELU ||
                                   g->nodes[i]->op == FC_OP_SILU))
            return true;
    return false;
}

/* Run `text` as written and after `passes` on the same random inputs;
 * returns the worst error (see worst_error). */
static double compare_after(const char *text, const char *graph, const char *passes, const fc_binding *binds, int nbinds,
                            double tol, bool of_max, double lo, double hi, bool *lowered) {
    fc_context *ctx = fc_context_new();
    fc_graph *g0 = NULL, *g1 = NULL;
    double worst = INFINITY;
    if (fc_parse(ctx, "t.ir", text, strlen(text), graph, binds, nbinds, &g0) != FC_OK ||
        fc_parse(ctx, "t.ir", text, strlen(text), graph, binds, nbinds, &g1) != FC_OK) {
        fprintf(stderr, "parse: %s\n", fc_last_error(ctx));
        goto out;
    }
    if (run_passes(g1, passes, "compare") != FC_OK) goto out;
    if (lowered) *lowered = !has_composite(g1);
    fc_interp_tensor in[64] = {0}, r0[16] = {0}, r1[16] = {0};
    FC_ASSERT(g0->nparams <= 64 && g0->noutputs <= 16);
    make_inputs(g0, in, lo, hi);
    if (fc_interp_run(g0, in, g0->nparams, r0, g0->noutputs) != FC_OK ||
        fc_interp_run(g1, in, g1->nparams, r1, g1->noutputs) != FC_OK) {
        fprintf(stderr, "run: %s\n", fc_last_error(ctx));
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
out:
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
    static const char *const pipelines[] = {"canonicalize", "decompose", "dce", "canonicalize,decompose,canonicalize"};
    char *text = read_file(path);
    CHECK(text != NULL);
    if (!text) return;
    for (int bound = 0; bound < 2; bound++)
        for (int p = 0; p < 4; p++) {
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
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/%s", src_dir(), dirs[k]);
        char **files = list_ir(dir);
        for (int i = 0; files && files[i]; i++) {
            char *text = read_file(files[i]);
            if (!text) continue;
            fc_context *ctx = fc_context_new();
            char **names = NULL;
            int n = 0;
            if (fc_parse_graph_names(ctx, files[i], text, strlen(text), &names, &n) == FC_OK) {
                for (int j = 0; j < n; j++) {
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
}

int main(void) {
    test_files();
    test_decompose_numerics();
    test_examples();
    return check_report("test_passes");
}

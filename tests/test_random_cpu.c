/* test_random_cpu.c - differential test of the CPU backend.
 *
 * Random graphs go through the whole pipeline (passes, fusion, memory
 * plan, LLVM) on the CPU backend, and their results are compared with the
 * reference interpreter's, twice: compiled with eager numerics (every value
 * rounded, as the reference rounds) to each dtype's tolerance
 * (fc_compare_outputs), and with fast numerics (the default: values kept in
 * f32 inside a kernel) to the error contract against the exact reference
 * (fc_check_outputs, docs/NUMERICS.md).
 *
 *  - tests/random_graph.h graphs (elementwise, broadcast, view, reduction
 *    and composite ops over random shapes, odd sizes and size-1 dims, f32
 *    and bf16), fused, and every fifth one also unfused (one kernel per op,
 *    so every value goes through the arena);
 *  - matmul graphs from the generator below (random_graph.h's `matmul`
 *    option makes none yet): batched and broadcast products, transposed
 *    operands, a scale, bias, residual, relu or gelu_tanh and a cast, two
 *    products sharing their left operand: the epilogue pass turns them into
 *    `gemm` nodes, and the CPU backend runs those with BLAS.
 *
 *   FUSEC_RANDOM_GRAPHS=N   how many random_graph.h graphs (default 500)
 *   FUSEC_SEED=S            run seed S only, of both kinds (what a failure prints)
 *
 * A failure prints the seed, the message and the .ir text of the graph.
 * A graph whose fused plan the code generator refuses (a fusion problem,
 * docs/CPU-BACKEND.md) runs unfused, is checked as any other, and is listed
 * with a "note:" line. Without LLVM the test says so and passes.
 */
#include "check.h"
#include "test_util.h"
#include "ir.h"
#include "random_graph.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/ref/interp.h"
#include "runtime/cuda/program.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- inputs ------------------------------------------------------------------ */

typedef struct rng {
    uint64_t s;
} rng;

static double uniform(rng *r, double lo, double hi) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(r->s >> 11) / 9007199254740992.0;
}

static void fill(fc_tensor *t, rng *r, double scale) {
    int64_t n = fc_tensor_numel(t);
    t->data = malloc((size_t)(n > 0 ? n : 1) * fc_dtype_size(t->dtype));
    for (int64_t i = 0; i < n; i++) {
        double x = uniform(r, -scale, scale);
        switch (t->dtype) {
        case FC_F64: ((double *)t->data)[i] = x; break;
        case FC_F32: ((float *)t->data)[i] = (float)x; break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)x); break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)x); break;
        default: memset(t->data, 0, (size_t)n * fc_dtype_size(t->dtype)); return;
        }
    }
}

/* Random inputs in [-scale, scale]; a matmul weight (a parameter named w*)
 * is scaled by 1/sqrt(its largest dim), as trained weights are, so products
 * stay of order one. */
static fc_tensor *make_inputs(fc_graph *g, uint64_t seed, double scale) {
    int n = fc_graph_num_params(g);
    fc_tensor *t = calloc((size_t)n + 1, sizeof *t);
    rng r = {seed * 0x9E3779B97F4A7C15ull + 7};
    for (int i = 0; i < n; i++) {
        fc_value *p = fc_graph_param(g, i);
        int64_t big = param_type(&t[i], p);
        const char *name = p->name;
        fill(&t[i], &r, name && name[0] == 'w' ? 1.0 / sqrt((double)big) : scale);
    }
    return t;
}

static void free_tensors(fc_tensor *t, int n) {
    for (int i = 0; t && i < n; i++) fc_tensor_release(&t[i]);
    free(t);
}

/* ---- one graph ------------------------------------------------------------------ */

static int failures, fallbacks;

/* Compile and run `ir` on the CPU backend with numerics `nm` and with the
 * reference; false (and a report) when they differ by more than nm allows. */
static bool check_mode(fc_context *ctx, const char *kind, uint64_t seed, const char *ir, bool fuse, fc_numerics nm) {
    fc_graph *g = NULL;
    fc_cpu_program *p = NULL;
    fc_tensor *in = NULL, got[8], want[8];
    int nin = 0, nout = 0;
    bool ran = false, ok = false;
    char why[2048] = "";
    fc_status st = fc_parse(ctx, "random.ir", ir, strlen(ir), NULL, NULL, 0, &g);
    if (st == FC_OK) {
        nin = fc_graph_num_params(g);
        nout = fc_graph_num_outputs(g);
        /* Matmul graphs get inputs in [-1, 1]: their epilogues round once
         * where the graph rounds after every op, and with 16-bit dtypes the
         * graph's own roundings of intermediates larger than the result
         * (a gelu of a negative sum) would exceed the result's tolerance. */
        in = make_inputs(g, seed, !strcmp(kind, "matmul") ? 1.0 : 2.0);
        fc_cpu_options o;
        fc_cpu_options_default(&o);
        o.fuse = fuse;
        o.numerics = nm;
        st = fc_cpu_compile_ex(g, &o, &p);
    }
    if (st == FC_OK && fc_cpu_program_note(p)[0]) {
        /* Fusion built a group the CPU code generator refuses; it ran
         * unfused. Not a failure of this backend, but worth seeing. */
        fallbacks++;
        printf("note: %s graph, seed %llu: %s\n", kind, (unsigned long long)seed, fc_cpu_program_note(p));
    }
    if (st == FC_OK) st = fc_cpu_run(p, in, nin, got, nout);
    if (st == FC_OK && nm == FC_NUMERICS_FAST) {
        fc_output_diff cd[8];
        st = fc_check_outputs(g, in, nin, got, nout, cd);
        /* The oracle refusing the graph (a gather index out of range) is
         * not a failure: nothing to compare. */
        ok = st != FC_ERR_RUNTIME;
        if (!ok) snprintf(why, sizeof why, "  fast numerics: %s\n", fc_last_error(ctx));
        for (int k = 0; k < nout; k++) fc_tensor_release(&got[k]);
    } else if (st == FC_OK) {
        ran = true;
        st = fc_run_reference(g, in, nin, want, nout);
        if (st != FC_OK) {
            /* The oracle refused the graph (a gather index out of range,
             * say): nothing to compare. */
            fc_clear_error(ctx);
            ok = true;
            for (int k = 0; k < nout; k++) fc_tensor_release(&got[k]);
            ran = false;
        }
    }
    if (ran) {
        fc_output_diff diffs[8];
        st = fc_compare_outputs(ctx, got, want, nout, diffs);
        ok = st == FC_OK;
        size_t len = 0;
        for (int k = 0; k < nout && !ok; k++)
            len += (size_t)snprintf(why + len, len < sizeof why ? sizeof why - len : 0, "  %s\n",
                                    fc_output_diff_format(&diffs[k], k, (char[512]){0}, 512));
        for (int k = 0; k < nout; k++) {
            fc_tensor_release(&got[k]);
            fc_tensor_release(&want[k]);
        }
    } else if (st != FC_OK) {
        snprintf(why, sizeof why, "  %s\n", fc_last_error(ctx));
    }
    if (!ok) {
        failures++;
        char *plan = p ? fc_cpu_program_plan_text(p) : NULL;
        fprintf(stderr,
                "FAIL: %s graph, seed %llu%s%s\n%s--- plan:\n%s--- graph (reproduce: FUSEC_SEED=%llu ./test_random_cpu):\n%s\n",
                kind, (unsigned long long)seed, fuse ? "" : " (unfused)", nm == FC_NUMERICS_EAGER ? " (eager)" : "",
                why, plan ? plan : "(none)\n",
                (unsigned long long)seed, ir);
        free(plan);
    }
    fc_cpu_program_free(p);
    free_tensors(in, nin);
    fc_graph_free(g);
    fc_clear_error(ctx);
    return ok;
}

/* Both numerics: eager against the rounding reference, fast against the
 * error bound. */
static bool check_graph(fc_context *ctx, const char *kind, uint64_t seed, const char *ir, bool fuse) {
    bool eager = check_mode(ctx, kind, seed, ir, fuse, FC_NUMERICS_EAGER);
    return check_mode(ctx, kind, seed, ir, fuse, FC_NUMERICS_FAST) && eager;
}

/* ---- matmul graphs ---------------------------------------------------------------- */

static int pick(rng *r, int n) { return (int)uniform(r, 0, n - 1e-9); }

/* "[0, 1, ..., rank-1, rank-2]": the permutation that swaps the last two dims. */
static void transpose_perm(char *out, size_t n, int rank) {
    size_t pos = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < rank; i++)
        pos += (size_t)snprintf(out + pos, n - pos, "%s%d", i ? ", " : "",
                                i == rank - 2 ? rank - 1 : i == rank - 1 ? rank - 2 : i);
    snprintf(out + pos, n - pos, "]");
}

static void shape_text(char *out, size_t n, const int64_t *d, int rank) {
    size_t pos = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < rank; i++) pos += (size_t)snprintf(out + pos, n - pos, "%s%lld", i ? ", " : "", (long long)d[i]);
    snprintf(out + pos, n - pos, "]");
}

/*
 * A random matmul graph: %x [batch.., M, K] times %w1 [K, N] (or a batched
 * [batch.., K, N]), either operand possibly stored transposed and permuted
 * back, then a tail of the ops the epilogue pass folds (scale, bias,
 * residual, relu or gelu_tanh, a cast) or leaves (erf gelu, silu), and
 * sometimes a second product of the same %x (horizontal gemm fusion).
 */
static char *matmul_graph(uint64_t seed) {
    rng r = {seed * 0x2545F4914F6CDD1Dull + 3};
    static const int64_t sizes[] = {1, 2, 3, 5, 8, 16, 17, 33, 64};
    static const char *const dts[] = {"f32", "bf16", "f16", "f64"};
    const char *dt = dts[pick(&r, 4)];
    int nb = pick(&r, 3);
    int64_t batch[2] = {sizes[pick(&r, 4)], sizes[pick(&r, 4)]};
    int64_t M = sizes[pick(&r, 9)], K = sizes[pick(&r, 9)], N = sizes[pick(&r, 9)];
    bool ta = pick(&r, 4) == 0, tb = pick(&r, 3) == 0, wbatch = nb > 0 && pick(&r, 4) == 0;
    tbuf params = {0}, body = {0};
    int64_t xd[4], wd[4];
    int xr = 0, wr = 0;
    for (int i = 0; i < nb; i++) xd[xr++] = batch[i];
    xd[xr++] = ta ? K : M;
    xd[xr++] = ta ? M : K;
    if (wbatch)
        for (int i = 0; i < nb; i++) wd[wr++] = pick(&r, 2) ? batch[i] : 1; /* broadcast batch */
    wd[wr++] = tb ? N : K;
    wd[wr++] = tb ? K : N;
    char s[128];
    shape_text(s, sizeof s, xd, xr);
    tb_add(&params, "%%x: %s%s", dt, s);
    shape_text(s, sizeof s, wd, wr);
    tb_add(&params, ", %%w1: %s%s", dt, s);
    /* operands, permuted back when stored transposed */
    char perm[64];
    const char *a = "%x", *b = "%w1";
    if (ta) {
        transpose_perm(perm, sizeof perm, xr);
        tb_add(&body, "  %%xt = permute(%%x, perm=%s)\n", perm);
        a = "%xt";
    }
    if (tb) {
        transpose_perm(perm, sizeof perm, wr);
        tb_add(&body, "  %%wt = permute(%%w1, perm=%s)\n", perm);
        b = "%wt";
    }
    tb_add(&body, "  %%h = matmul(%s, %s)\n", a, b);
    const char *cur = "%h";
    int step = 0;
    char name[16], prev[16];
    /* the tail */
    if (pick(&r, 3) == 0) {
        snprintf(name, sizeof name, "%%t%d", step++);
        tb_add(&body, "  %s = mul(%s, %s)\n", name, cur, pick(&r, 2) ? "0.125" : "-2.0");
        snprintf(prev, sizeof prev, "%s", name);
        cur = prev;
    }
    if (pick(&r, 2)) {
        tb_add(&params, ", %%b1: %s[%lld]", dt, (long long)N);
        snprintf(name, sizeof name, "%%t%d", step++);
        tb_add(&body, "  %s = add(%s, %%b1)\n", name, cur);
        snprintf(prev, sizeof prev, "%s", name);
        cur = prev;
    }
    if (pick(&r, 3) == 0) {
        int64_t od[4];
        int orank = 0;
        for (int i = 0; i < nb; i++) od[orank++] = batch[i];
        od[orank++] = M;
        od[orank++] = N;
        shape_text(s, sizeof s, od, orank);
        tb_add(&params, ", %%res: %s%s", dt, s);
        snprintf(name, sizeof name, "%%t%d", step++);
        tb_add(&body, "  %s = add(%s, %%res)\n", name, cur);
        snprintf(prev, sizeof prev, "%s", name);
        cur = prev;
    }
    static const char *const acts[] = {"relu", "gelu_tanh", "gelu", "silu", NULL, NULL};
    const char *act = acts[pick(&r, 6)];
    if (act) {
        snprintf(name, sizeof name, "%%t%d", step++);
        tb_add(&body, "  %s = %s(%s)\n", name, act, cur);
        snprintf(prev, sizeof prev, "%s", name);
        cur = prev;
    }
    /* A cast only narrows: a 16-bit result widened to f32 would be compared
     * at f32's tolerance, but it holds only 16-bit precision (the epilogue
     * rounds once where the graph rounds after every op). */
    if (!strcmp(dt, "f32") && pick(&r, 4) == 0) {
        snprintf(name, sizeof name, "%%t%d", step++);
        tb_add(&body, "  %s = cast(%s, to=%s)\n", name, cur, pick(&r, 2) ? "f16" : "bf16");
        snprintf(prev, sizeof prev, "%s", name);
        cur = prev;
    }
    /* a second product of %x (same flags): horizontal gemm fusion */
    bool second = !wbatch && pick(&r, 3) == 0;
    if (second) {
        int64_t N2 = sizes[pick(&r, 9)];
        int64_t w2[2] = {tb ? N2 : K, tb ? K : N2};
        shape_text(s, sizeof s, w2, 2);
        tb_add(&params, ", %%w2: %s%s", dt, s);
        const char *b2 = "%w2";
        if (tb) {
            tb_add(&body, "  %%w2t = permute(%%w2, perm=[1, 0])\n");
            b2 = "%w2t";
        }
        tb_add(&body, "  %%h2 = matmul(%s, %s)\n", a, b2);
    }
    size_t size = params.len + body.len + 128;
    char *out = malloc(size);
    snprintf(out, size, "graph mm%llu(%s) {\n%s  return %s%s\n}\n", (unsigned long long)seed, params.text, body.text,
             cur, second ? ", %h2" : "");
    return out;
}

int main(void) {
    if (!fc_cpu_available()) {
        printf("test_random_cpu: skipped (%s)\n", fc_cpu_target_description());
        return 0;
    }
    fc_context *ctx = fc_context_new();
    int n = getenv("FUSEC_RANDOM_GRAPHS") ? atoi(getenv("FUSEC_RANDOM_GRAPHS")) : 500;
    int nmatmul = n / 4 > 0 ? n / 4 : 1;
    uint64_t only = getenv("FUSEC_SEED") ? strtoull(getenv("FUSEC_SEED"), NULL, 10) : 0;
    clock_t t0 = clock();
    int graphs = 0;
    for (int seed = 1; seed <= n; seed++) {
        if (only && (uint64_t)seed != only) continue;
        rg_opts o = {.max_nodes = 12, .bf16 = true, .matmul = true};
        char *ir = random_graph((uint64_t)seed, &o);
        CHECK(check_graph(ctx, "random", (uint64_t)seed, ir, true));
        graphs++;
        if (seed % 5 == 0 || only) {
            CHECK(check_graph(ctx, "random", (uint64_t)seed, ir, false));
            graphs++;
        }
        free(ir);
    }
    for (int seed = 1; seed <= nmatmul || (only && seed <= (int)only); seed++) {
        if (only && (uint64_t)seed != only) continue;
        char *ir = matmul_graph((uint64_t)seed);
        CHECK(check_graph(ctx, "matmul", (uint64_t)seed, ir, true));
        graphs++;
        free(ir);
    }
    printf("test_random_cpu: %d graphs, %d failed, %d compiled unfused, %.1f s of CPU time\n", graphs, failures,
           fallbacks, (double)(clock() - t0) / CLOCKS_PER_SEC);
    fc_context_free(ctx);
    return check_report("test_random_cpu");
}

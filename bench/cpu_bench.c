/*
 * cpu_bench.c - the CPU backend against hand-written C loops and the
 * reference interpreter, in one run on this machine.
 *
 *   ninja -C build cpu_bench && build/cpu_bench [--iters N] [--no-reference]
 *
 * The target is built -O3 -march=native (CMakeLists.txt), so the C loops
 * below are what a careful programmer gets from the compiler for the host.
 * Workloads (f32, 4096 x 4096):
 *
 *   pointwise  y = gelu(x * 1.702 + r) * sigmoid(r) + x   (erf gelu)
 *   softmax    y = softmax(x, axis=-1); the C version is the usual two
 *              passes (max, then exp and sum) and a scaling pass
 *   colsum     y = reduce_sum(x, axes=[0]); the C version walks the rows in
 *              order, adding each into the sums (contiguous reads)
 *
 * Each time is the median of N runs (fc_cpu_bench for fusec). fusec runs
 * on every core by default and on one thread for comparison; the C loops
 * are single-threaded, as written. The reference interpreter is timed once
 * on the pointwise chain (it takes seconds). Results are checked against
 * the C loop before anything is timed.
 */
#include "fusec.h"
#include "ir/timing.h"
#include "runtime/cpu_program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROWS 4096
#define COLS 4096
#define N ((size_t)ROWS * COLS)

/* ---- the hand-written loops ------------------------------------------------ */

static void pointwise_c(const float *restrict x, const float *restrict r, float *restrict y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float a = x[i] * 1.702f + r[i];
        float g = 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
        float s = 1.0f / (1.0f + expf(-r[i]));
        y[i] = g * s + x[i];
    }
}

static void softmax_c(const float *restrict x, float *restrict y, size_t rows, size_t cols) {
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols;
        float *yr = y + i * cols;
        float m = -INFINITY, sum = 0.0f;
        for (size_t j = 0; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        for (size_t j = 0; j < cols; j++) {
            float e = expf(xr[j] - m);
            yr[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (size_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

/* Column sums, in the order that reads memory contiguously. */
static void colsum_c(const float *restrict x, float *restrict y, size_t rows, size_t cols) {
    for (size_t j = 0; j < cols; j++) y[j] = 0;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) y[j] += x[i * cols + j];
}

/* ---- helpers ---------------------------------------------------------------- */

static fc_graph *parse(fc_context *ctx, const char *text) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, "cpu_bench.ir", text, strlen(text), NULL, NULL, 0, &g) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        exit(1);
    }
    return g;
}

static fc_cpu_program *compile(fc_context *ctx, fc_graph *g, int threads) {
    fc_cpu_options o;
    fc_cpu_options_default(&o);
    o.threads = threads;
    fc_cpu_program *p = NULL;
    double t0 = fc_now_ms();
    if (fc_cpu_compile_ex(g, &o, &p) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        exit(1);
    }
    if (threads == 0) printf("  compile: %.1f ms\n", fc_now_ms() - t0);
    return p;
}

static fc_tensor tensor(float *data) {
    fc_tensor t = {.dtype = FC_F32, .rank = 2, .shape = {ROWS, COLS}, .data = data};
    return t;
}

/* Median ms of fusec on p over `iters` runs into `out`. */
static double time_fusec(fc_context *ctx, fc_cpu_program *p, const fc_tensor *in, int nin, int iters) {
    fc_tensor out;
    double ms = 0;
    if (fc_cpu_bench(p, in, nin, &out, 1, iters, &ms) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        exit(1);
    }
    fc_tensor_release(&out);
    return ms;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = d;
    }
    return m;
}

static float *random_floats(unsigned long long seed, double lo, double hi) {
    float *x = malloc(N * sizeof *x);
    if (!x) exit(1);
    for (size_t i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(lo + (hi - lo) * (double)(seed >> 11) / 9007199254740992.0);
    }
    return x;
}

int main(int argc, char **argv) {
    int iters = 10;
    bool reference = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-reference")) reference = false;
        else {
            fprintf(stderr, "usage: cpu_bench [--iters N] [--no-reference]\n");
            return 2;
        }
    }
    if (!fc_cpu_available()) {
        printf("cpu_bench: %s\n", fc_cpu_target_description());
        return 0;
    }
    fc_context *ctx = fc_context_new();
    printf("target: %s\n", fc_cpu_target_description());
    float *x = random_floats(1, -3, 3), *r = random_floats(2, -3, 3);
    float *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
    double *t = calloc((size_t)iters + 1, sizeof *t);
    if (!want || !got || !t) return 1;

    /* ---- pointwise ---- */
    printf("pointwise y = gelu(x*1.702 + r) * sigmoid(r) + x, f32 [%d, %d]\n", ROWS, COLS);
    fc_graph *g = parse(ctx, "graph pointwise(%x: f32[4096, 4096], %r: f32[4096, 4096]) {\n"
                             "  %a = mul(%x, 1.702)\n  %b = add(%a, %r)\n  %g = gelu(%b)\n"
                             "  %s = sigmoid(%r)\n  %p = mul(%g, %s)\n  %y = add(%p, %x)\n  return %y\n}\n");
    fc_cpu_program *p = compile(ctx, g, 0), *p1 = compile(ctx, g, 1);
    fc_tensor in[2] = {tensor(x), tensor(r)}, out = tensor(got);
    pointwise_c(x, r, want, N);
    if (fc_cpu_run_into(p, in, 2, &out, 1) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        return 1;
    }
    printf("  max |fusec - C loop| = %.3g\n", max_diff(got, want, N));
    for (int i = 0; i < iters; i++) {
        double t0 = fc_now_ms();
        pointwise_c(x, r, want, N);
        t[i] = fc_now_ms() - t0;
    }
    double c_ms = fc_median(t, iters);
    double f_ms = time_fusec(ctx, p, in, 2, iters), f1_ms = time_fusec(ctx, p1, in, 2, iters);
    printf("  C loop -O3 -march=native (1 thread): %8.2f ms\n", c_ms);
    printf("  fusec CPU, %d threads:               %8.2f ms  (%.2fx the C loop's time)\n",
           fc_cpu_program_threads(p), f_ms, f_ms / c_ms);
    printf("  fusec CPU, 1 thread:                 %8.2f ms  (%.2fx the C loop's time)\n", f1_ms, f1_ms / c_ms);
    if (reference) {
        fc_tensor ref;
        double t0 = fc_now_ms();
        if (fc_run_reference(g, in, 2, &ref, 1) != FC_OK) {
            fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
            return 1;
        }
        double ref_ms = fc_now_ms() - t0;
        fc_tensor_release(&ref);
        printf("  reference interpreter (1 run):       %8.1f ms  (fusec %.0fx faster; 1 thread %.0fx)\n", ref_ms,
               ref_ms / f_ms, ref_ms / f1_ms);
    }
    fc_cpu_program_free(p);
    fc_cpu_program_free(p1);
    fc_graph_free(g);

    /* ---- softmax ---- */
    printf("softmax over rows, f32 [%d, %d]\n", ROWS, COLS);
    g = parse(ctx, "graph softmax(%x: f32[4096, 4096]) {\n  %y = softmax(%x, axis=-1)\n  return %y\n}\n");
    p = compile(ctx, g, 0);
    p1 = compile(ctx, g, 1);
    softmax_c(x, want, ROWS, COLS);
    if (fc_cpu_run_into(p, in, 1, &out, 1) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        return 1;
    }
    printf("  max |fusec - C loop| = %.3g\n", max_diff(got, want, N));
    for (int i = 0; i < iters; i++) {
        double t0 = fc_now_ms();
        softmax_c(x, want, ROWS, COLS);
        t[i] = fc_now_ms() - t0;
    }
    c_ms = fc_median(t, iters);
    f_ms = time_fusec(ctx, p, in, 1, iters);
    f1_ms = time_fusec(ctx, p1, in, 1, iters);
    printf("  C two-pass loop (1 thread):          %8.2f ms\n", c_ms);
    printf("  fusec CPU, %d threads:               %8.2f ms  (%.2fx the C loop's time)\n",
           fc_cpu_program_threads(p), f_ms, f_ms / c_ms);
    printf("  fusec CPU, 1 thread:                 %8.2f ms  (%.2fx the C loop's time)\n", f1_ms, f1_ms / c_ms);
    fc_cpu_program_free(p);
    fc_cpu_program_free(p1);
    fc_graph_free(g);

    /* ---- column sums ---- */
    printf("column sums (reduce_sum over axis 0), f32 [%d, %d]\n", ROWS, COLS);
    g = parse(ctx, "graph colsum(%x: f32[4096, 4096]) {\n  %y = reduce_sum(%x, axes=[0])\n  return %y\n}\n");
    p = compile(ctx, g, 0);
    p1 = compile(ctx, g, 1);
    colsum_c(x, want, ROWS, COLS);
    fc_tensor col = {.dtype = FC_F32, .rank = 1, .shape = {COLS}, .data = got};
    if (fc_cpu_run_into(p, in, 1, &col, 1) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        return 1;
    }
    printf("  max |fusec - C loop| = %.3g\n", max_diff(got, want, COLS));
    for (int i = 0; i < iters; i++) {
        double t0 = fc_now_ms();
        colsum_c(x, want, ROWS, COLS);
        t[i] = fc_now_ms() - t0;
    }
    c_ms = fc_median(t, iters);
    f_ms = time_fusec(ctx, p, in, 1, iters);
    f1_ms = time_fusec(ctx, p1, in, 1, iters);
    printf("  C loop, rows outer (1 thread):       %8.2f ms\n", c_ms);
    printf("  fusec CPU, %d threads:               %8.2f ms  (%.2fx the C loop's time)\n",
           fc_cpu_program_threads(p), f_ms, f_ms / c_ms);
    printf("  fusec CPU, 1 thread:                 %8.2f ms  (%.2fx the C loop's time)\n", f1_ms, f1_ms / c_ms);
    fc_cpu_program_free(p);
    fc_cpu_program_free(p1);
    fc_graph_free(g);

    free(x);
    free(r);
    free(want);
    free(got);
    free(t);
    fc_context_free(ctx);
    return 0;
}

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
#include "runtime/cpu/cpu_program.h"

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

/* The loops with one signature: y from x (and r, for the pointwise chain). */
static void pointwise_loop(const float *x, const float *r, float *y) { pointwise_c(x, r, y, N); }
static void softmax_loop(const float *x, const float *r, float *y) { (void)r, softmax_c(x, y, ROWS, COLS); }
static void colsum_loop(const float *x, const float *r, float *y) { (void)r, colsum_c(x, y, ROWS, COLS); }

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

/* One workload: the graph, its C loop and what the loop is called. */
typedef struct workload {
    const char *title, *ir, *loop_name;
    void (*loop)(const float *x, const float *r, float *y);
    int nin;        /* x, then r */
    int64_t out_n;  /* the result's elements: [ROWS, COLS], or [COLS] */
    bool reference; /* also time the reference interpreter (it takes seconds) */
} workload;

/* Check fusec against the C loop, then time the loop, fusec on every core
 * and on one thread (and the reference interpreter when asked). */
static int run_workload(fc_context *ctx, const workload *w, float *x, float *r, float *want, float *got, double *t,
                        int iters) {
    printf("%s\n", w->title);
    fc_graph *g = parse(ctx, w->ir);
    fc_cpu_program *p = compile(ctx, g, 0), *p1 = compile(ctx, g, 1);
    fc_tensor in[2] = {tensor(x), tensor(r)}, out = tensor(got);
    if (w->out_n == COLS) out = (fc_tensor){.dtype = FC_F32, .rank = 1, .shape = {COLS}, .data = got};
    w->loop(x, r, want);
    if (fc_cpu_run_into(p, in, w->nin, &out, 1) != FC_OK) {
        fprintf(stderr, "cpu_bench: %s\n", fc_last_error(ctx));
        return 1;
    }
    printf("  max |fusec - C loop| = %.3g\n", max_diff(got, want, (size_t)w->out_n));
    for (int i = 0; i < iters; i++) {
        double t0 = fc_now_ms();
        w->loop(x, r, want);
        t[i] = fc_now_ms() - t0;
    }
    double c_ms = fc_median(t, iters);
    double f_ms = time_fusec(ctx, p, in, w->nin, iters), f1_ms = time_fusec(ctx, p1, in, w->nin, iters);
    printf("  %-36s %8.2f ms\n", w->loop_name, c_ms);
    printf("  fusec CPU, %d threads:               %8.2f ms  (%.2fx the C loop's time)\n",
           fc_cpu_program_threads(p), f_ms, f_ms / c_ms);
    printf("  fusec CPU, 1 thread:                 %8.2f ms  (%.2fx the C loop's time)\n", f1_ms, f1_ms / c_ms);
    if (w->reference) {
        fc_tensor ref;
        double t0 = fc_now_ms();
        if (fc_run_reference(g, in, w->nin, &ref, 1) != FC_OK) {
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
    return 0;
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
    const workload all[] = {
        {"pointwise y = gelu(x*1.702 + r) * sigmoid(r) + x, f32 [4096, 4096]",
         "graph pointwise(%x: f32[4096, 4096], %r: f32[4096, 4096]) {\n"
         "  %a = mul(%x, 1.702)\n  %b = add(%a, %r)\n  %g = gelu(%b)\n"
         "  %s = sigmoid(%r)\n  %p = mul(%g, %s)\n  %y = add(%p, %x)\n  return %y\n}\n",
         "C loop -O3 -march=native (1 thread):", pointwise_loop, 2, (int64_t)N, reference},
        {"softmax over rows, f32 [4096, 4096]",
         "graph softmax(%x: f32[4096, 4096]) {\n  %y = softmax(%x, axis=-1)\n  return %y\n}\n",
         "C two-pass loop (1 thread):", softmax_loop, 1, (int64_t)N, false},
        {"column sums (reduce_sum over axis 0), f32 [4096, 4096]",
         "graph colsum(%x: f32[4096, 4096]) {\n  %y = reduce_sum(%x, axes=[0])\n  return %y\n}\n",
         "C loop, rows outer (1 thread):", colsum_loop, 1, COLS, false},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !rc; i++)
        rc = run_workload(ctx, &all[i], x, r, want, got, t, iters);
    free(x);
    free(r);
    free(want);
    free(got);
    free(t);
    fc_context_free(ctx);
    return rc;
}

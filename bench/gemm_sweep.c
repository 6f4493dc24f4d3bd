/* gemm_sweep.c - fusec's side of bench/gemm_sweep.sh: y = x @ W at each
 * shape named on the command line, compiled for CUDA and timed in one
 * process (one CUDA context, no process start per shape).
 *
 *   gemm_sweep [--reps N] [--budget S] [--dtype bf16|f16|f32] [--tail none|softmax|f32] FORM,M,N,K ...
 *
 * FORM tb: W [N, K] used transposed (the tied LM head, x @ permute(W));
 * nn: W [K, N]. The tail: y is the graph's result (none), or softmax(y)
 * (a kernel reads y: a padded y is read in place), or y cast to f32. For
 * each shape one line
 *
 *   fusec FORM M N K MS KERNELS CALLS PATH
 *
 * MS: the median of N timed runs (fc_program_run_host's CUDA events), "-"
 * when it failed (the message on stderr) or when the budget of S seconds
 * (wall time since the start) was spent before the shape began; KERNELS
 * and CALLS: the plan's generated kernels and library calls (a padded GEMM
 * has its zero block or compaction kernels); PATH: skinny (the skinny
 * kernel runs the GEMM), cublaslt, or kernels (generated tiles). */
#include "fusec.h"

#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t seed = 0x5eed;

/* Uniform in [-1, 1) (xorshift64*; values for timing only). */
static double uniform(void) {
    seed ^= seed >> 12;
    seed ^= seed << 25;
    seed ^= seed >> 27;
    return (double)((seed * 0x2545F4914F6CDD1Dull) >> 11) / 4503599627370496.0 - 1.0;
}

/* Small values (of every dtype the sweep takes) so the products stay finite. */
static void fill(fc_tensor *t) {
    const int64_t n = fc_tensor_numel(t);
    for (int64_t e = 0; e < n; e++) {
        const float v = (float)(0.1 * uniform());
        if (t->dtype == FC_F32) ((float *)t->data)[e] = v;
        else if (t->dtype == FC_BF16) ((uint16_t *)t->data)[e] = fc_f32_to_bf16(v);
        else ((uint16_t *)t->data)[e] = fc_f32_to_f16(v);
    }
}

/* One shape: its line, or false (with the message) when it failed. */
static bool sweep_one(fc_context *ctx, const char *dt, const char *tail, const char *form, long M, long N, long K, int reps) {
    const bool tb = !strcmp(form, "tb");
    const char *end = !strcmp(tail, "softmax") ? "  %t = softmax(%y, axis=-1)\n  return %t\n}\n"
                      : !strcmp(tail, "f32")   ? "  %t = cast(%y, to=f32)\n  return %t\n}\n"
                                               : "  return %y\n}\n";
    char text[512];
    snprintf(text, sizeof text, "graph g(%%x: %s[%ld, %ld], %%w: %s[%ld, %ld]) {\n%s%s", dt, M, K, dt, tb ? N : K, tb ? K : N,
             tb ? "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n" : "  %y = matmul(%x, %w)\n", end);
    fc_graph *g = NULL;
    fc_program *p = NULL;
    fc_status st = fc_parse(ctx, "sweep", text, strlen(text), NULL, NULL, 0, &g);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    if (!st) st = fc_compile(g, &o, &p);
    int kernels = -1, calls = -1;
    const char *path = "?";
    if (!st) {
        char *plan = fc_program_plan_text(p);
        const char *tot = plan ? strstr(plan, "total: ") : NULL;
        if (tot) sscanf(tot, "total: %d kernels, %d library calls", &kernels, &calls);
        path = plan && strstr(plan, "skinny") ? "skinny" : calls > 0 ? "cublaslt" : "kernels";
        fc_free(plan);
    }
    fc_tensor in[2] = {{0}}, out = {0};
    for (int i = 0; !st && i < 2; i++) {
        st = fc_program_input(p, i, &in[i], NULL);
        in[i].data = st ? NULL : malloc((size_t)fc_tensor_numel(&in[i]) * 4 + 4);
        if (!st && !in[i].data) st = FC_ERR_NOMEM;
        if (!st) fill(&in[i]);
    }
    double ms = 0;
    if (!st) st = fc_program_run_host(p, in, 2, &out, 1, &ms, reps);
    if (st) fprintf(stderr, "gemm_sweep: %s %ld %ld %ld: %s\n", form, M, N, K, fc_last_error(ctx));
    if (!st) printf("fusec %s %ld %ld %ld %.4f %d %d %s\n", form, M, N, K, ms, kernels, calls, path);
    else printf("fusec %s %ld %ld %ld - %d %d %s\n", form, M, N, K, kernels, calls, path);
    fflush(stdout);
    fc_tensor_release(&out);
    for (int i = 0; i < 2; i++) free(in[i].data);
    fc_program_free(p);
    fc_graph_free(g);
    return st == FC_OK;
}

int main(int argc, char **argv) {
    int reps = 30;
    double budget = 1e9;
    const char *dt = "bf16", *tail = "none";
    int a = 1;
    for (; a + 1 < argc && !strncmp(argv[a], "--", 2); a += 2) {
        if (!strcmp(argv[a], "--reps")) reps = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--budget")) budget = atof(argv[a + 1]);
        else if (!strcmp(argv[a], "--dtype")) dt = argv[a + 1];
        else if (!strcmp(argv[a], "--tail")) tail = argv[a + 1];
        else break;
    }
    if (a >= argc || reps < 1) {
        fprintf(stderr, "usage: gemm_sweep [--reps N] [--budget S] [--dtype bf16|f16|f32] [--tail none|softmax|f32] FORM,M,N,K ...\n");
        return 2;
    }
    fc_context *ctx = fc_context_new();
    if (!ctx || !fc_device_available(FC_DEVICE_CUDA)) {
        fprintf(stderr, "gemm_sweep: no CUDA device\n");
        fc_context_free(ctx);
        return 1;
    }
    const double start = now_s();
    int failed = 0;
    for (; a < argc; a++) {
        char form[8];
        long M, N, K;
        if (sscanf(argv[a], "%7[a-z],%ld,%ld,%ld", form, &M, &N, &K) != 4 || (strcmp(form, "tb") && strcmp(form, "nn"))) {
            fprintf(stderr, "gemm_sweep: '%s' is not FORM,M,N,K\n", argv[a]);
            failed++;
            continue;
        }
        if (now_s() - start > budget) {
            printf("fusec %s %ld %ld %ld - -1 -1 budget\n", form, M, N, K);
            continue;
        }
        failed += !sweep_one(ctx, dt, tail, form, M, N, K, reps);
    }
    fc_context_free(ctx);
    return failed ? 1 : 0;
}

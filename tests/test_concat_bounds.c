/* test_concat_bounds.c - a concat of thousands of operands (docs/SECURITY.md,
 * "Resource limits"):
 *
 *   - 10,000 operands (half parameters, half computed) parse, and plan in
 *     under 5 s (a minute under the sanitizers);
 *   - no concat that reaches fusion has more than FC_CONCAT_MAX_FANIN
 *     operands, every group stays within the cost cap, and no kernel of
 *     the generated CUDA takes more than 4 KB of parameters (it took one
 *     pointer per operand, 80 KB, past even the 32764 bytes of CUDA 12.1);
 *   - the generated CUDA nests its concat branches log2(operands) deep (a
 *     chain of `else if`s nested once per operand overflowed NVRTC's
 *     stack), and a concat of a few hundred operands compiles with NVRTC;
 *   - the CPU backend compiles the 10,000 and computes the reference's
 *     values (it refused more than 64 operands in one concat).
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "fusec.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

enum { COLS = 3 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The process's CPU time: what a loaded machine does not inflate. */
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* concat(%p0, mul(%x, 1), %p2, mul(%x, 3), ...) of n operands f32[1, COLS]
 * along axis 0: even operands are parameters, odd ones computed. */
static char *concat_text(int n) {
    size_t cap = (size_t)n * 64 + 256, len = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    len += (size_t)snprintf(t + len, cap - len, "graph cat(%%x: f32[1, %d]", COLS);
    for (int i = 0; i < n; i += 2) len += (size_t)snprintf(t + len, cap - len, ", %%p%d: f32[1, %d]", i, COLS);
    len += (size_t)snprintf(t + len, cap - len, ") {\n");
    for (int i = 1; i < n; i += 2) len += (size_t)snprintf(t + len, cap - len, "  %%m%d = mul(%%x, %d.0)\n", i, i);
    len += (size_t)snprintf(t + len, cap - len, "  %%y = concat(");
    for (int i = 0; i < n; i++) len += (size_t)snprintf(t + len, cap - len, "%s%%%c%d", i ? ", " : "", i % 2 ? 'm' : 'p', i);
    snprintf(t + len, cap - len, ", axis=0)\n  return %%y\n}\n");
    return t;
}

static fc_graph *parse(fc_context *ctx, const char *text) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "cat.ir", text, strlen(text), NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st) fprintf(stderr, "%s\n", fc_last_error(ctx));
    return st ? NULL : g;
}

/* Bytes of parameters of each __global__ kernel in src: the most. */
static long max_kernel_param_bytes(const char *src, int *nkernels) {
    long most = 0;
    *nkernels = 0;
    static const char head[] = "__global__ void ";
    for (const char *p = src; (p = strstr(p, head)); p++) {
        const char *q = p + strlen(head);
        if (!strncmp(q, "__launch_bounds__(", 18)) q = strchr(q, ')') + 1;
        const char *open = strchr(q, '('), *close = open ? strchr(open, ')') : NULL;
        if (!close) break;
        /* every parameter is a pointer or an i64: 8 bytes */
        long params = close > open + 1 ? 1 : 0;
        for (const char *r = open; r < close; r++) params += *r == ',';
        if (params * 8 > most) most = params * 8;
        (*nkernels)++;
    }
    return most;
}

/* The deepest nesting of braces in src. */
static int max_depth(const char *src) {
    int d = 0, most = 0;
    for (const char *p = src; *p; p++) {
        if (*p == '{' && ++d > most) most = d;
        if (*p == '}') d--;
    }
    return most;
}

static void test_plan_and_cuda(fc_context *ctx, const char *text, int n) {
    fc_graph *g = parse(ctx, text);
    if (!g) return;
    fc_plan plan;
    double t0 = now(), c0 = cpu();
    fc_status st = fc_pipeline(g, NULL, &plan);
    double dt = now() - t0, dc = cpu() - c0;
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s\n", fc_last_error(ctx));
        fc_graph_free(g);
        return;
    }
    printf("concat of %d: planned in %.3f s (%.3f s of CPU), %d groups\n", n, dt, dc, plan.ngroups);
    CHECK(dt < (SANITIZED ? 60.0 : 5.0));
    int most_in = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == FC_OP_CONCAT && g->nodes[i]->nin > most_in) most_in = g->nodes[i]->nin;
    CHECK(most_in <= FC_CONCAT_MAX_FANIN);
    for (int i = 0; i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        CHECK((int64_t)gr->weight * (gr->nreduce > 1 ? gr->nreduce : 1) <= FC_GROUP_MAX_WEIGHT);
        CHECK(gr->ninputs + gr->noutputs <= 512);
    }
    fc_cuda_src src = {0};
    t0 = now();
    st = fc_cuda_codegen(&plan, &src);
    CHECK_EQ_INT(st, FC_OK);
    if (!st) {
        int nk = 0;
        long bytes = max_kernel_param_bytes(src.source, &nk);
        int depth = max_depth(src.source);
        printf("  CUDA source: %zu bytes, %d kernels, at most %ld bytes of parameters, braces %d deep (%.3f s)\n",
               strlen(src.source), nk, bytes, depth, now() - t0);
        CHECK(nk >= 1);
        CHECK(bytes <= 4096);
        CHECK(depth <= 40);
    }
    fc_cuda_src_release(&src);
    fc_plan_release(&plan);
    fc_graph_free(g);
}

/* The CPU backend against the reference interpreter. */
static void test_cpu(fc_context *ctx, const char *text, int n) {
    if (!fc_device_built(FC_DEVICE_CPU)) {
        printf("no CPU backend in this build: the CPU run is skipped\n");
        return;
    }
    fc_graph *g = parse(ctx, text);
    if (!g) return;
    int nin = fc_graph_num_params(g);
    fc_tensor *in = calloc((size_t)nin, sizeof *in);
    float *data = calloc((size_t)nin * COLS, sizeof *data);
    CHECK(in && data);
    if (!in || !data) goto out;
    for (int i = 0; i < nin; i++) {
        in[i] = (fc_tensor){FC_F32, 2, {1, COLS}, data + (size_t)i * COLS};
        for (int c = 0; c < COLS; c++) data[(size_t)i * COLS + c] = (float)(i * COLS + c) * 0.25f - 7.0f;
    }
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CPU;
    fc_program *p = NULL;
    double t0 = now(), c0 = cpu();
    fc_status st = fc_compile(g, &o, &p);
    double dt = now() - t0, dc = cpu() - c0;
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "CPU compile: %s\n", fc_last_error(ctx));
        goto out;
    }
    fc_tensor got = {0}, want = {0};
    t0 = now();
    st = fc_program_run_host(p, in, nin, &got, 1, NULL, 0);
    CHECK_EQ_INT(st, FC_OK);
    printf("concat of %d on the CPU: compiled in %.2f s (%.2f s of CPU), ran in %.3f s\n", n, dt, dc, now() - t0);
    if (!st) {
        CHECK(got.rank == 2 && got.shape[0] == n && got.shape[1] == COLS);
        CHECK_EQ_INT(fc_run_reference(g, in, nin, &want, 1), FC_OK);
        fc_output_diff d;
        CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &d), FC_OK);
        CHECK(d.pass);
        /* and by hand: row i is parameter i/2 + 1, or x * i */
        const float *y = got.data;
        int bad = 0;
        for (int i = 0; y && i < n; i++)
            for (int c = 0; c < COLS; c++) {
                float e = i % 2 ? data[c] * (float)i : data[(size_t)(i / 2 + 1) * COLS + c];
                bad += y[(size_t)i * COLS + c] != e;
            }
        CHECK_EQ_INT(bad, 0);
    }
    fc_tensor_release(&got);
    fc_tensor_release(&want);
    fc_program_free(p);
out:
    free(in);
    free(data);
    fc_graph_free(g);
}

/* A concat of 130 operands through NVRTC for sm_90: the binary search
 * compiles (as one kernel, 300 operands took NVRTC 4.9 s on the H200's
 * host; the fan-in and the cost cap keep each kernel smaller). */
static void test_nvrtc(fc_context *ctx) {
    char *text = concat_text(130);
    fc_graph *g = text ? parse(ctx, text) : NULL;
    free(text);
    if (!g) return;
    fc_plan plan;
    fc_status st = fc_pipeline(g, NULL, &plan);
    CHECK_EQ_INT(st, FC_OK);
    if (!st) {
        fc_cuda_src src = {0};
        st = fc_cuda_codegen(&plan, &src);
        CHECK_EQ_INT(st, FC_OK);
        if (!st) {
            fc_bytes cubin = {0};
            double t0 = now(), c0 = cpu();
            fc_status cst = fc_nvrtc_compile(ctx, src.source, "cat.cu", 9, 0, NULL, 0, &cubin);
            if (cst) fprintf(stderr, "NVRTC: %s\n", fc_last_error(ctx));
            CHECK_EQ_INT(cst, FC_OK);
            printf("concat of 130: %d groups, NVRTC %.2f s (%.2f s of CPU)\n", plan.ngroups, now() - t0, cpu() - c0);
            fc_bytes_free(&cubin);
        }
        fc_cuda_src_release(&src);
        fc_plan_release(&plan);
    }
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    enum { N = 10000 };
    char *text = concat_text(N);
    CHECK(text != NULL);
    if (text) {
        double t0 = now();
        fc_graph *g = parse(ctx, text);
        printf("concat of %d: parsed in %.3f s\n", N, now() - t0);
        CHECK(g && fc_graph_num_params(g) == N / 2 + 1);
        fc_graph_free(g);
        test_plan_and_cuda(ctx, text, N);
        test_cpu(ctx, text, N);
    }
    free(text);
    test_nvrtc(ctx);
    fc_context_free(ctx);
    return check_report("test_concat_bounds");
}

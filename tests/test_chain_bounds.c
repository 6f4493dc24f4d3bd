/* test_chain_bounds.c - a long chain of elementwise ops parses and plans in
 * time and memory that grow linearly with its length (docs/SECURITY.md,
 * "Resource limits": a 100,000-op chain parses and plans in under 10 s and
 * 2 GB; the 50 MB chain plans in under 60 s and 4 GB).
 *
 * Those sizes take seconds to minutes, so this test runs them scaled down,
 * each in a child process of its own (its peak RSS is then its own), from
 * the .ir text through fc_parse and fc_pipeline, as `fusec` does:
 *
 *   - CPU time: a chain 4 times longer takes less than 8 times the CPU
 *     time (linear: 4, quadratic: 16; from 20,000 ops, as a shorter chain
 *     fits in the caches and runs faster an op), and 80,000 ops take under
 *     8 s (the 100,000-op target's rate, 100 us an op; only in an
 *     optimized build without AddressSanitizer, which slows everything
 *     alike and leaves the ratio);
 *   - memory: the peak RSS grows by under 2,000 bytes an op between the
 *     two chains (the 50 MB chain is 1.75 million ops: 3.5 GB at that
 *     rate, within its 4 GB), and the 80,000-op child stays under 512 MB;
 *     not under AddressSanitizer, whose shadow memory and quarantine are
 *     no measure of fusec's.
 *
 *   - kernels: the fusion cap keeps every generated kernel small enough
 *     for NVRTC (one kernel of a 50 MB chain took it 10.9 GB and minutes):
 *     a chain of each op weight (add 1, tanh 4, erf 8, pow 32, sin 64:
 *     ops.def) over two full groups and a part, compiled for sm_90 in a
 *     child, takes under 10 s of CPU time and 2 GB (0.4 to 1 s and 170 MB
 *     measured; one uncapped group of 9 sins took NVRTC minutes).
 *
 * CPU time, not wall time: a loaded machine (CI's two shared cores) does
 * not stretch it, and small times are padded so that timer noise cannot
 * fail the ratio.
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "fusec.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* n ops in a chain over f32[1024]: `op` of the previous value alone
 * (unary ops) or of it and %y; op NULL: add and mul by turns, the chain of
 * docs/PERF.md's measurements. */
static char *chain_text(const char *op, int n, size_t *len) {
    size_t cap = (size_t)n * 40 + 256, k = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    k += (size_t)snprintf(t + k, cap - k, "graph chain(%%x: f32[1024], %%y: f32[1024]) {\n  %%v0 = add(%%x, %%y)\n");
    bool unary = op && fc_op_is_unary(fc_op_from_name(op, strlen(op)));
    for (int i = 1; i < n; i++) {
        const char *o = op ? op : i % 2 ? "mul" : "add";
        if (unary) k += (size_t)snprintf(t + k, cap - k, "  %%v%d = %s(%%v%d)\n", i, o, i - 1);
        else k += (size_t)snprintf(t + k, cap - k, "  %%v%d = %s(%%v%d, %%y)\n", i, o, i - 1);
    }
    k += (size_t)snprintf(t + k, cap - k, "  return %%v%d\n}\n", n - 1);
    *len = k;
    return t;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct measured {
    double cpu;       /* seconds of CPU time for the parse and the plan */
    long maxrss_kb;   /* the child's peak resident set */
    int groups;       /* the plan's groups */
    int ok;           /* the parse and the plan succeeded */
} measured;

typedef enum job { TEXT_ONLY, PLAN, NVRTC } job;

/* The job in this process: the text of the chain, then (PLAN) its parse
 * and plan, or (NVRTC) its parse, plan, CUDA source and NVRTC's compile,
 * timed. */
static void run_job(job j, const char *op, int n, measured *r) {
    size_t len = 0;
    char *text = chain_text(op, n, &len);
    if (!text) return;
    if (j == TEXT_ONLY) r->ok = 1;
    fc_context *ctx = j == TEXT_ONLY ? NULL : fc_context_new();
    fc_graph *g = NULL;
    fc_plan p;
    double c0 = cpu_s();
    fc_status st = ctx ? fc_parse(ctx, "chain.ir", text, len, NULL, NULL, 0, &g) : FC_OK;
    if (ctx && st == FC_OK) st = fc_pipeline(g, NULL, &p);
    if (ctx && st == FC_OK) {
        r->groups = p.ngroups;
        if (j == NVRTC) {
            fc_cuda_src src = {0};
            st = fc_cuda_codegen(&p, &src);
            fc_bytes cubin = {0};
            c0 = cpu_s();
            if (st == FC_OK) st = fc_nvrtc_compile(ctx, src.source, "chain.cu", 9, 0, NULL, 0, &cubin);
            fc_bytes_free(&cubin);
            fc_cuda_src_release(&src);
        }
        fc_plan_release(&p);
    }
    r->cpu = cpu_s() - c0;
    if (ctx) {
        if (st == FC_OK) r->ok = 1;
        else fprintf(stderr, "chain of %d %s: %s\n", n, op ? op : "add/mul", fc_last_error(ctx));
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->maxrss_kb = ru.ru_maxrss;
    fc_graph_free(g);
    fc_context_free(ctx);
    free(text);
}

/* run_job in a child process, whose peak RSS is then the job's own. */
static measured run_child(job j, const char *op, int n) {
    measured m = {0, 0, 0, 0};
    int fd[2];
    if (pipe(fd) != 0) return m;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return m;
    }
    if (pid == 0) {
        close(fd[0]);
        measured r = {0, 0, 0, 0};
        run_job(j, op, n, &r);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], &m, sizeof m);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof m || !WIFEXITED(status) || WEXITSTATUS(status) != 0) m.ok = 0;
    return m;
}

/* A chain of op over two full groups and a part compiles with NVRTC in
 * bounded time and memory. */
static void test_kernels(const char *op) {
    int n = 2 * FC_GROUP_MAX_WEIGHT / fc_op_weight(fc_op_from_name(op, strlen(op))) + 3;
    measured m = run_child(NVRTC, op, n);
    CHECK(m.ok);
    printf("chain of %d %s: %d groups, NVRTC %.2f s of CPU, peak RSS %ld MB\n", n, op, m.groups, m.cpu,
           m.maxrss_kb / 1024);
    CHECK(m.groups >= 3);
    CHECK(m.cpu < 10.0);
    if (!UNDER_ASAN) CHECK(m.maxrss_kb < 2048L * 1024);
}

int main(void) {
    enum { SHORT = 20000, LONG = 80000 };
    measured base = run_child(TEXT_ONLY, NULL, LONG);
    measured s = run_child(PLAN, NULL, SHORT), l = run_child(PLAN, NULL, LONG);
    CHECK(base.ok && s.ok && l.ok);
    static const char *const ops[] = {"add", "tanh", "erf", "pow", "sin"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) test_kernels(ops[i]);
    if (!(base.ok && s.ok && l.ok)) return check_report("test_chain_bounds");
    printf("chain of %d: %.3f s of CPU, peak RSS %ld MB, %d groups\n", SHORT, s.cpu, s.maxrss_kb / 1024, s.groups);
    printf("chain of %d: %.3f s of CPU, peak RSS %ld MB, %d groups (the text alone: %ld MB)\n", LONG, l.cpu,
           l.maxrss_kb / 1024, l.groups, base.maxrss_kb / 1024);
    /* Linear time: 4x the ops in under 8x the CPU time. */
    CHECK(l.cpu < 8.0 * s.cpu + 0.2);
    /* The plan is linear too: groups of capped size, about 4x as many. */
    CHECK(l.groups >= 3 * s.groups && l.groups <= 5 * s.groups + 4);
    if (!UNDER_ASAN) {
        double per_op = 1024.0 * (double)(l.maxrss_kb - s.maxrss_kb) / (double)(LONG - SHORT);
        printf("peak RSS: %.0f bytes an op between the two chains\n", per_op);
        CHECK(per_op < 2000.0);
        CHECK(l.maxrss_kb < 512L * 1024);
#if defined(__OPTIMIZE__)
        /* An optimized build: the library is compiled as this test is. */
        CHECK(l.cpu < 8.0);
#endif
    }
    return check_report("test_chain_bounds");
}

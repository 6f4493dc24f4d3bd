/*
 * cpu_backend.c - the LLVM CPU backend behind the backend interface
 * (runtime/backend.h): fc_compile with FC_DEVICE_CPU, and fc_run on host
 * pointers. The compiler itself is runtime/cpu/cpu_program.c; this file only
 * adapts it to the table, and gives its programs the description (the
 * signature) every executable has.
 */
#include "runtime/collective.h"
#include "runtime/host_exec.h"
#include "ir/ir.h"
#include "ir/timing.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/profile.h"

#include <pthread.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

typedef struct cpu_exec {
    fc_host_exec h;
    fc_cpu_program *prog;
} cpu_exec;

static cpu_exec *exec_of(fc_program *p) { return (cpu_exec *)(void *)p; }

static void cpu_free(fc_program *p) {
    cpu_exec *x = exec_of(p);
    fc_cpu_program_free(x->prog);
    fc_host_exec_release(&x->h);
}

static fc_status cpu_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    const double t0 = fc_now_ms();
    cpu_exec *x = (cpu_exec *)(void *)fc_host_exec_new(g->ctx, &fc_backend_cpu, sizeof *x);
    if (!x) return FC_ERR_NOMEM;
    fc_cpu_options co;
    fc_cpu_options_default(&co);
    co.fuse = o->fuse;
    co.precision = o->precision;
    co.numerics = o->numerics;
    co.tp = o->tp;
    co.tp_rank = o->tp_rank;
    fc_status st = fc_tp_check_options(g->ctx, o, FC_DEVICE_CPU);
    return fc_host_exec_finish(&x->h, g, t0, st != FC_OK ? st : fc_cpu_compile_ex(g, &co, &x->prog), out);
}

static fc_status cpu_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                                void *stream) {
    (void)stream; /* host code runs on the calling thread */
    cpu_exec *x = exec_of(p);
    fc_status st = fc_cpu_run_into(x->prog, inputs, nin, outputs, nout);
    if (st == FC_OK) x->h.stats.runs++;
    return st;
}

static fc_status cpu_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream) {
    return fc_host_exec_run(p, inputs, nin, outputs, nout, stream, cpu_run_shaped);
}

static fc_status cpu_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters) {
    cpu_exec *x = exec_of(p);
    fc_status st = bench_iters > 0 ? fc_cpu_bench(x->prog, inputs, nin, outputs, nout, bench_iters, median_ms)
                                   : fc_cpu_run(x->prog, inputs, nin, outputs, nout);
    if (st == FC_OK) x->h.stats.runs += 1 + (uint64_t)(bench_iters > 0 ? bench_iters : 0);
    return st;
}

static char *copy_text(fc_context *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *c = fc_ctx_malloc(ctx, n);
    if (c) memcpy(c, s, n);
    return c;
}

static char *cpu_describe(fc_program *p, fc_describe_kind what) {
    cpu_exec *x = exec_of(p);
    if (what == FC_DESCRIBE_PLAN) return fc_cpu_program_plan_text(x->prog);
    if (what == FC_DESCRIBE_SOURCE) {
        const char *ir = fc_cpu_program_llvm_ir(x->prog);
        if (ir) return copy_text(x->h.ctx, ir);
        fc_set_error(x->h.ctx, FC_ERR_UNSUPPORTED,
                     "program %s: the CPU backend keeps its LLVM IR only when $FUSEC_DEBUG has \"code\"",
                     x->h.d.graph_name);
        return NULL;
    }
    if (what == FC_DESCRIBE_DOT) return fc_cpu_program_plan_dot(x->prog);
    fc_backend_unsupported(p, "PTX");
    return NULL;
}

/* ------------------------------------------------------------------ */
/* The profile: the wall clock around each group.                      */
/* ------------------------------------------------------------------ */

/* The CPU's copy bandwidth, measured once per process: memcpy of a buffer
 * far larger than the caches, best of a few, counting the bytes read and
 * written (what a kernel's bytes count). One thread: a kernel that runs on
 * several reaches more, so a fraction above 1 can happen and says so. */
static double cpu_copy_gbps;
static pthread_once_t cpu_copy_once = PTHREAD_ONCE_INIT;

static void measure_copy(void) {
    const size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int i = 0; i < 4; i++) {
        const double t0 = fc_now_ms();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
        const double ms = fc_now_ms() - t0;
        if (ms > 0 && 2.0 * (double)n / (ms * 1e-3) * 1e-9 > best) best = 2.0 * (double)n / (ms * 1e-3) * 1e-9;
    }
    free(a);
    free(b);
    cpu_copy_gbps = best;
}

/* A multiply-add rate, measured once: sixteen independent chains of
 * eight-lane vectors (GCC's vector extension; as wide as the build's
 * target flags let the compiler make them), one thread, times the threads
 * a kernel runs on. A rough ceiling, said as such: a BLAS built for the
 * machine's widest vectors can pass it (a fraction above 1). */
typedef float v8f __attribute__((vector_size(32)));
static double cpu_flops_1t;
static pthread_once_t cpu_flops_once = PTHREAD_ONCE_INIT;

static void measure_flops(void) {
    v8f acc[16], m = {0}, x = {0};
    for (int l = 0; l < 8; l++) {
        m[l] = 0.999999f;
        x[l] = 1e-7f * (float)(l + 1);
    }
    for (int i = 0; i < 16; i++) acc[i] = x * (float)i;
    const int iters = 1000000;
    const double t0 = fc_now_ms();
    for (int it = 0; it < iters; it++)
        for (int i = 0; i < 16; i++) acc[i] = acc[i] * m + x;
    const double ms = fc_now_ms() - t0;
    volatile float sink = 0;
    for (int i = 0; i < 16; i++) sink += acc[i][0];
    (void)sink;
    cpu_flops_1t = ms > 0 ? 2.0 * 16 * 8 * (double)iters / (ms * 1e-3) : 0;
}

static fc_status cpu_profile(fc_program *pr, const fc_tensor *inputs, int nin, fc_profile_rec *r) {
    cpu_exec *x = exec_of(pr);
    fc_cpu_program *p = x->prog;
    const int ng = fc_cpu_program_ngroups(p);
    const int nout = x->h.d.noutputs;
    fc_tensor *outs = calloc((size_t)nout + 1, sizeof *outs);
    double *t = calloc(2 * (size_t)ng + 1, sizeof *t), *plain = calloc((size_t)r->runs + 1, sizeof *plain);
    fc_status st = outs && t && plain ? FC_OK : fc_set_error(x->h.ctx, FC_ERR_NOMEM, "out of memory (profile)");
    /* The first run checks the inputs and allocates the outputs. */
    if (st == FC_OK) st = fc_cpu_run(p, inputs, nin, outs, nout);
    if (st == FC_OK) st = fc_profile_rec_init(r, ng);
    for (int i = 0; i < ng && st == FC_OK; i++) {
        fc_launch l;
        st = fc_cpu_program_launch(p, i, &l);
        if (st == FC_OK) st = fc_profile_info_from_launch(r, i, &l);
        free(l.args);
    }
    for (int k = 0; k < r->warmup && st == FC_OK; k++) st = fc_cpu_run_timed(p, inputs, outs, t);
    int flow = 1;
    for (int k = 0; k < r->runs && st == FC_OK; k++) {
        r->run_start[k] = fc_now_ms();
        st = fc_cpu_run_timed(p, inputs, outs, t);
        r->run_end[k] = fc_now_ms();
        for (int i = 0; i < ng && st == FC_OK; i++) {
            if (r->launches[i].kind == FC_LAUNCH_ALIAS) continue;
            /* The host calls the kernel and the kernel runs in the call:
             * one span on both tracks, joined as a GPU launch is. */
            fc_profile_event *h = fc_profile_rec_event(r, FC_TRACK_HOST, k, i, t[2 * i], t[2 * i + 1]);
            fc_profile_event *d = h ? fc_profile_rec_event(r, FC_TRACK_DEVICE, k, i, t[2 * i], t[2 * i + 1]) : NULL;
            if (!d) st = FC_ERR_NOMEM;
            else {
                r->events[r->nevents - 2].flow = r->events[r->nevents - 1].flow = flow++;
                snprintf(r->events[r->nevents - 2].name, sizeof h->name, "call %s", r->launches[i].name);
            }
        }
    }
    for (int k = 0; k < r->runs && st == FC_OK; k++) {
        const double t0 = fc_now_ms();
        st = fc_cpu_run_into(p, inputs, nin, outs, nout);
        plain[k] = fc_now_ms() - t0;
    }
    if (st == FC_OK) {
        r->plain_wall_ms = fc_median(plain, r->runs);
        pthread_once(&cpu_copy_once, measure_copy);
        pthread_once(&cpu_flops_once, measure_flops);
        const int threads = fc_cpu_program_threads(p);
        snprintf(r->device, sizeof r->device, "CPU, %d threads (%.80s)", threads, fc_cpu_target_description());
        r->peak_gbps = cpu_copy_gbps;
        r->peak_tflops = cpu_flops_1t * threads * 1e-12;
        snprintf(r->peak_source, sizeof r->peak_source,
                 "measured: memcpy of 64 MiB on one thread; a vector multiply-add loop times %d threads", threads);
        x->h.stats.runs += (uint64_t)(1 + r->warmup + 2 * r->runs);
    }
    for (int k = 0; outs && k < nout; k++) fc_tensor_release(&outs[k]);
    free(outs);
    free(t);
    free(plain);
    return st;
}

static bool cpu_built(void) { return fc_cpu_available(); }
static bool cpu_present(void) { return true; }

const fc_backend fc_backend_cpu = {
    .name = "cpu",
    .device = FC_DEVICE_CPU,
    .preference = 2,
    FC_HOST_BACKEND_SLOTS(cpu),
    .profile = cpu_profile,
};

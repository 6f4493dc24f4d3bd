/*
 * cpu_backend.c - the LLVM CPU backend behind the backend interface
 * (runtime/backend.h): fc_compile with FC_DEVICE_CPU, and fc_run on host
 * pointers. The compiler itself is runtime/cpu/cpu_program.c; this file only
 * adapts it to the table, and gives its programs the description (the
 * signature) every executable has.
 */
#include "runtime/host_exec.h"
#include "ir/ir.h"
#include "ir/timing.h"
#include "runtime/cpu/cpu_program.h"

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
    return fc_host_exec_finish(&x->h, g, t0, fc_cpu_compile_ex(g, &co, &x->prog), out);
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
    fc_backend_unsupported(p, "PTX");
    return NULL;
}

static bool cpu_built(void) { return fc_cpu_available(); }
static bool cpu_present(void) { return true; }

const fc_backend fc_backend_cpu = {
    .name = "cpu",
    .device = FC_DEVICE_CPU,
    .preference = 2,
    FC_HOST_BACKEND_SLOTS(cpu),
};

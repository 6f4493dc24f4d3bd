/*
 * cpu_program.c - the CPU backend's programs: compile a graph for the host
 * with LLVM and run it on host buffers.
 *
 * Compiling:
 *
 *   clone -> every dim static? -> fc_pipeline (the passes, fusion,
 *   scheduling, memory plan: exactly what the CUDA backend gets) ->
 *   fc_llvm_compile (codegen/llvm: one JIT-compiled function per kernel
 *   group) -> storage classes (fc_plan_classes_make, as runtime/cuda/program_*.c)
 *
 * Running: the groups in launch order. A generated kernel gets one host
 * pointer per input and output; a large one (work above PARALLEL_WORK) has
 * its outer loop (elements or rows) split into contiguous ranges, one per
 * thread of a small pool that the program starts on first need; the calling
 * thread takes the first range. LIBRARY groups (matmul, attention, gemm)
 * call BLAS: cblas_sgemm/dgemm when CMake found OpenBLAS (FUSEC_HAVE_CBLAS),
 * a plain loop otherwise; f16 and bf16 operands are converted to f32 first
 * and the result rounded back once.
 *
 * A fused plan the code generator refuses (a reduction group that reads a
 * per-row value at another row's index: a fusion problem) is compiled again
 * unfused, and the plan text says so in a "note:" line.
 *
 * Storage. A value's bytes live where runtime/cuda/program_*.c puts them on the
 * device: a class rooted at a parameter in the caller's input buffer, a
 * class holding a graph result in the caller's output buffer, anything else
 * in the program's arena at plan->offset. Results no kernel writes in place
 * (a parameter returned as it is, a value returned twice) are copied last.
 *
 * Without LLVM (the GPU machine), only stubs are compiled: fc_cpu_compile
 * says why there is no CPU backend.
 */
#include "runtime/cpu/cpu_impl.h"
#include "ir/switches.h"
#include "ir.h"
#include "ir/timing.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef FUSEC_HAVE_LLVM

#include "codegen/llvm/llvm_codegen.h"
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "lower/launch_cost.h"
#include "lower/plan_dot.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* -DFUSEC_NO_CBLAS (in CMAKE_C_FLAGS) forces the plain loops, to test them on
 * a machine that has OpenBLAS. */
#if defined(FUSEC_HAVE_CBLAS) && !defined(FUSEC_NO_CBLAS)
#define USE_CBLAS 1
#include <cblas.h>
#endif

/* A kernel is split across threads when it does at least this much work
 * (elements x ops): below it, waking the pool costs more than it saves
 * (a 7-op pointwise chain breaks even at about 64K elements; docs/PERF.md,
 * "CPU backend"). */
#define PARALLEL_WORK (1 << 19)
/* Warm-up runs before a benchmark. */
#define BENCH_WARMUP 2
/* The arena's alignment: a cache line, and any vector load. */
#define ARENA_ALIGN 64

/* ------------------------------------------------------------------ */
/* The thread pool.                                                    */
/* ------------------------------------------------------------------ */


typedef struct worker {
    pool *p;
    int index; /* runs chunk index + 1; the caller runs chunk 0 */
} worker;

struct pool {
    int nworkers;
    pthread_t *threads;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    unsigned long gen; /* bumped for every job */
    int busy;          /* workers still running the current job */
    bool quit;
    /* the current job */
    fc_llvm_kernel_fn fn;
    void *const *args;
    int64_t iters, grain;
    int nchunks;
};

/* Chunk c of nchunks: a contiguous range of whole grains. */
static void run_chunk(const pool *p, int c) {
    int64_t units = (p->iters + p->grain - 1) / p->grain;
    int64_t u0 = units * c / p->nchunks, u1 = units * (c + 1) / p->nchunks;
    int64_t b = u0 * p->grain, e = u1 * p->grain;
    if (e > p->iters) e = p->iters;
    if (b < e) p->fn(p->args, b, e);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pool *p = w->p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, w->index + 1);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_free(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->idle);
    free(p->threads);
    free(p->workers);
    free(p);
}

/* A pool of n - 1 workers (the caller is the n-th thread). NULL if nothing
 * could be started: the caller then runs everything itself. */
static pool *pool_new(int n) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = calloc((size_t)n, sizeof *p->threads);
    p->workers = calloc((size_t)n, sizeof *p->workers);
    if (!p->threads || !p->workers || pthread_mutex_init(&p->mu, NULL)) {
        free(p->threads);
        free(p->workers);
        free(p);
        return NULL;
    }
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (int i = 0; i < n - 1; i++) {
        p->workers[i] = (worker){p, i};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i])) break;
        p->nworkers++;
    }
    if (p->nworkers == 0) {
        pool_free(p);
        return NULL;
    }
    return p;
}

static void pool_run(pool *p, fc_llvm_kernel_fn fn, void *const *args, int64_t iters, int64_t grain) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->args = args;
    p->iters = iters;
    p->grain = grain > 0 ? grain : 1;
    p->nchunks = p->nworkers + 1;
    p->busy = p->nworkers;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------------------------ */
/* Programs.                                                           */
/* ------------------------------------------------------------------ */


void fc_cpu_options_default(fc_cpu_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->fuse = true;
    o->keep_ir = false;
}

bool fc_cpu_available(void) { return true; }

const char *fc_cpu_target_description(void) {
    static char desc[320];
    snprintf(desc, sizeof desc, "%s; BLAS: %s", fc_llvm_target_description(),
#ifdef USE_CBLAS
             "OpenBLAS (CBLAS)"
#else
             "none (plain loops)"
#endif
    );
    return desc;
}

static int resolve_threads(int requested) {
    if (requested > 0) return requested;
    const long env = fc_switch_int(FC_SW_CPU_THREADS, 0);
    if (env > 0 && env <= INT_MAX) return (int)env;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 256 ? 256 : n) : 1;
}

/* Zeroed memory through the context, so that fault injection
 * (fc_context_fail_alloc_after) reaches the runtime's allocations too. */
static void *zalloc(fc_context *ctx, size_t n, size_t size) {
    void *q = fc_ctx_malloc(ctx, (n ? n : 1) * size);
    if (q) memset(q, 0, (n ? n : 1) * size);
    return q;
}

/* ---- storage classes (passes/memplan.c) -------------------------------- */

static fc_status build_storage(fc_cpu_program *p) {
    const fc_plan *plan = &p->plan;
    fc_status st = fc_plan_classes_make(p->ctx, plan, &p->cls);
    if (st != FC_OK) return st;
    /* Every argument must have storage: check it here, at compile time. */
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *grp = plan->groups[pos];
        int nargs = grp->ninputs + grp->noutputs;
        if (nargs > p->max_args) p->max_args = nargs;
        for (int i = 0; i < nargs; i++) {
            const fc_value *v = i < grp->ninputs ? grp->inputs[i] : grp->outputs[i - grp->ninputs];
            const fc_value *r = p->cls.val[p->cls.root[v->id]];
            bool ok = r->param_index >= 0 || p->cls.result_slot[r->id] >= 0 || plan->offset[v->id] >= 0;
            if (!ok)
                return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                    "internal error: value %%%s of group %d has no storage in the memory plan",
                                    v->name ? v->name : "?", pos);
        }
    }
    return FC_OK;
}

/* The host address of value id for one run. */
static void *value_ptr(const fc_cpu_program *p, int id, const fc_tensor *inputs, const fc_tensor *outputs) {
    const fc_value *r = p->cls.val[p->cls.root[id]];
    if (r->param_index >= 0) return inputs[r->param_index].data;
    if (p->cls.result_slot[r->id] >= 0) return outputs[p->cls.result_slot[r->id]].data;
    FC_ASSERT(p->plan.offset[id] >= 0);
    /* No arena when every intermediate is empty (a dim bound to 0): there is
     * nothing to point into, and NULL + 0 is undefined. */
    return p->arena ? (char *)p->arena + p->plan.offset[id] : NULL;
}

/* ------------------------------------------------------------------ */
/* Compiling.                                                          */
/* ------------------------------------------------------------------ */


/* Library groups are checked at compile time, so a plan the runtime cannot
 * run fails in fc_cpu_compile: one node, its result the group's only
 * output, every operand a group input. A gemm or matmul is decoded here
 * once, into *out, for its runs (cpu_library.c). */
static fc_status check_library(fc_cpu_program *p, const fc_group *gr, fc_gemm_info *out) {
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi = {0};
    bool ok = gr->nnodes == 1 && gr->noutputs == 1 && gr->outputs[0] == n->out[0] && n->nout == 1;
    for (int i = 0; ok && i < n->nin; i++) {
        bool found = false;
        for (int j = 0; j < gr->ninputs; j++) found |= gr->inputs[j] == n->in[i];
        ok = found;
    }
    if (ok && n->op == FC_OP_STRING_NORMALIZER)
        ok = true;
    else if (ok && (fc_cpu_is_decode_op(n->op) || fc_op_is_collective(n->op)))
        ok = !fc_op_is_collective(n->op) || fc_dtype_is_float(n->in[0]->dtype);
    else if (ok && n->op == FC_OP_ATTENTION)
        ok = fc_dtype_is_float(n->in[0]->dtype) && n->nin <= 4 &&
             (n->nin < 4 || n->in[3]->dtype == FC_BOOL || fc_dtype_is_float(n->in[3]->dtype));
    else if (ok) {
        ok = fc_gemm_info_of(n, &gi) && fc_dtype_is_float(gi.a->dtype) &&
             (gi.a->dtype == FC_F64 ? !gi.has_bias && !gi.has_residual && gi.act == FC_GEMM_ACT_NONE &&
                                          n->out[0]->dtype == FC_F64
                                    : n->out[0]->dtype != FC_F64);
        for (int i = 0; ok && gi.has_bias && i < gi.nweights; i++) ok = gi.w[i]->rank >= 2;
    }
    if (ok) {
        *out = gi;
        return FC_OK;
    }
    return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "CPU backend: %s is not supported as a library call",
                        fc_op_table[n->op].name);
}

/* The passes and the LLVM code of g, fused or not. On failure, *row_conflict
 * says whether the code generator refused a reduction group that fusion
 * should not have made (fc_llvm_compile). */
static fc_status compile_plan(fc_cpu_program *p, fc_graph *g, bool fuse, bool *row_conflict) {
    p->g = fc_graph_clone(g);
    if (!p->g) return strstr(p->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = fuse;
    fo.attention_in_place = false; /* attention runs as a library call here (contiguous operands) */
    fo.precision = p->opts.precision; /* TF32 is GEMM math the CPU has not: f32 */
    fo.numerics = p->opts.numerics;
    fc_status st = fc_pipeline(p->g, &fo, &p->plan);
    if (st != FC_OK) return st;
    if (!p->plan.offset) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the plan has no memory plan");
    if (p->g->nparams != g->nparams || p->g->noutputs != g->noutputs)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the passes changed the graph's signature");
    p->gemm = zalloc(p->ctx, (size_t)p->plan.ngroups + 1, sizeof *p->gemm);
    if (!p->gemm) return FC_ERR_NOMEM;
    for (int i = 0; i < p->plan.ngroups; i++) {
        const fc_group *gr = p->plan.groups[i];
        if (gr->kind == FC_GROUP_LIBRARY && (st = check_library(p, gr, &p->gemm[i])) != FC_OK) return st;
        if (gr->kind != FC_GROUP_LIBRARY && gr->kind != FC_GROUP_ALIAS && gr->kind != FC_GROUP_POINTWISE &&
            gr->kind != FC_GROUP_REDUCE)
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "CPU backend: group %d is of a kind it cannot run (%d)", i,
                                (int)gr->kind);
    }
    p->kern = zalloc(p->ctx, (size_t)p->plan.ngroups + 1, sizeof *p->kern);
    if (!p->kern) return FC_ERR_NOMEM;
    fc_llvm_options lo = {.keep_ir = p->opts.keep_ir};
    p->plan.numerics = p->opts.numerics;
    st = fc_llvm_compile(&p->plan, &lo, &p->mod, p->kern, row_conflict);
    for (int i = 0; st == FC_OK && i < p->plan.ngroups; i++) {
        fc_group_kind kind = p->plan.groups[i]->kind;
        if ((kind == FC_GROUP_POINTWISE || kind == FC_GROUP_REDUCE) && !p->kern[i].fn)
            st = fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: group %d has no compiled kernel", i);
    }
    return st;
}

/* Undo compile_plan, for another try. */
static void release_plan(fc_cpu_program *p) {
    fc_llvm_module_free(p->mod);
    fc_ctx_freemem(p->ctx, p->kern);
    fc_ctx_freemem(p->ctx, p->gemm);
    fc_plan_release(&p->plan);
    fc_graph_free(p->g);
    p->mod = NULL;
    p->kern = NULL;
    p->gemm = NULL;
    p->g = NULL;
}

static fc_status compile_program(fc_cpu_program *p, fc_graph *g) {
    bool row_conflict = false;
    fc_status st = compile_plan(p, g, p->opts.fuse, &row_conflict);
    if (st == FC_ERR_UNSUPPORTED && row_conflict) {
        /* A reduction group that reads a per-row value at another row's
         * index cannot run in one pass over its rows, and fusion should not
         * have built it (docs/CPU-BACKEND.md). Rather than refuse a valid
         * graph, compile it unfused (slower, but every group is then one op)
         * and say so in the plan. */
        snprintf(p->note, sizeof p->note, "fused plan refused, compiled unfused: %.400s", fc_last_error(p->ctx));
        fc_clear_error(p->ctx);
        release_plan(p);
        st = compile_plan(p, g, false, &row_conflict);
    }
    if (st != FC_OK) return st;
    if ((st = build_storage(p)) != FC_OK) return st;
    p->args = zalloc(p->ctx, (size_t)p->max_args + 1, sizeof *p->args);
    if (!p->args) return FC_ERR_NOMEM;
    if (p->plan.arena_bytes > 0) {
        size_t bytes = ((size_t)p->plan.arena_bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        p->arena = aligned_alloc(ARENA_ALIGN, bytes);
        if (!p->arena) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (a %zu-byte arena)", bytes);
    }
    return FC_OK;
}

fc_status fc_cpu_compile_ex(fc_graph *g, const fc_cpu_options *o, fc_cpu_program **out) {
    if (out) *out = NULL;
    fc_status st = fc_graph_check_compile(g, out != NULL, "fc_cpu_compile");
    if (st != FC_OK) return st;
    fc_context *ctx = g->ctx;
    st = fc_graph_check_static(g);
    if (st != FC_OK) return st;
    fc_cpu_program *p = zalloc(ctx, 1, sizeof *p);
    if (!p) return FC_ERR_NOMEM;
    p->ctx = ctx;
    if (o) p->opts = *o;
    else fc_cpu_options_default(&p->opts);
    /* FUSEC_DEBUG=code keeps the generated IR, as it keeps CUDA sources. */
    if (strstr(fc_switch_str(FC_SW_DEBUG), "code")) p->opts.keep_ir = true;
    p->threads = resolve_threads(p->opts.threads);
    st = compile_program(p, g);
    if (st != FC_OK) {
        if (st == FC_ERR_NOMEM && !strstr(ctx->error, "memory")) fc_set_error(ctx, st, "out of memory (CPU compile)");
        fc_cpu_program_free(p);
        return st;
    }
    *out = p;
    return FC_OK;
}

fc_status fc_cpu_compile(fc_graph *g, fc_cpu_program **out) { return fc_cpu_compile_ex(g, NULL, out); }

/* ------------------------------------------------------------------ */
/* Running.                                                            */
/* ------------------------------------------------------------------ */

static bool type_matches(const fc_tensor *t, const fc_value *v) {
    if (t->dtype != v->dtype || t->rank != v->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (t->shape[d] != v->dims[d]) return false;
    return true;
}

static fc_status check_tensors(fc_cpu_program *p, const char *what, const fc_tensor *ts, int n, int want,
                               fc_value *const *vals, bool outputs) {
    const fc_graph *g = p->g;
    if (n != want)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "%s: graph %s has %d %s, not %d", what, g->name, want,
                            outputs ? "results" : "inputs", n);
    if (n > 0 && !ts) return fc_set_error(p->ctx, FC_ERR_USAGE, "%s: %s is NULL", what, outputs ? "outputs" : "inputs");
    for (int i = 0; i < n; i++) {
        const fc_value *v = vals[i];
        if (!type_matches(&ts[i], v)) {
            char want_s[160];
            fc_type_str(g, v->dtype, v->rank, v->dims, want_s, sizeof want_s);
            return fc_set_error(p->ctx, FC_ERR_INPUT, "%s: %s %d must be %s", what, outputs ? "output" : "input", i,
                                want_s);
        }
        if (!ts[i].data && fc_value_bytes(v) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "%s: %s %d has no data", what, outputs ? "output" : "input", i);
    }
    return FC_OK;
}

/* Does kernel kn run on the pool? Enough work, and at least two grains. */
static bool parallel(const fc_cpu_program *p, const fc_llvm_kernel *kn) {
    return p->threads > 1 && kn->work >= PARALLEL_WORK && kn->iters >= 2 * kn->grain;
}

static void run_kernel(fc_cpu_program *p, const fc_llvm_kernel *kn, void *const *args) {
    if (kn->iters <= 0) return;
    if (parallel(p, kn)) {
        if (!p->pool) p->pool = pool_new(p->threads);
        if (p->pool) {
            pool_run(p->pool, kn->fn, args, kn->iters, kn->grain);
            return;
        }
    }
    kn->fn(args, 0, kn->iters);
}

/* The groups in launch order; t (the profile's timed runs; else NULL)
 * gets each group's start and end. */
static fc_status run_groups(fc_cpu_program *p, const fc_tensor *inputs, const fc_tensor *outputs, double *t) {
    const fc_plan *plan = &p->plan;
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *gr = plan->groups[pos];
        if (gr->kind == FC_GROUP_ALIAS) continue;
        if (t) t[2 * pos] = fc_now_ms();
        for (int i = 0; i < gr->ninputs; i++) p->args[i] = value_ptr(p, gr->inputs[i]->id, inputs, outputs);
        for (int i = 0; i < gr->noutputs; i++)
            p->args[gr->ninputs + i] = value_ptr(p, gr->outputs[i]->id, inputs, outputs);
        if (gr->kind == FC_GROUP_LIBRARY) {
            fc_status st = gr->nodes[0]->op == FC_OP_STRING_NORMALIZER ? fc_cpu_run_string(p, pos, gr, p->args)
                                                                        : fc_cpu_run_library(p, gr, &p->gemm[pos], p->args);
            if (st != FC_OK) return st;
        } else run_kernel(p, &p->kern[pos], p->args);
        if (t) t[2 * pos + 1] = fc_now_ms();
    }
    /* Results no kernel wrote in place. */
    const fc_graph *g = p->g;
    for (int k = 0; k < g->noutputs; k++) {
        const fc_value *v = g->outputs[k], *r = p->cls.val[p->cls.root[v->id]];
        const void *src;
        if (r->param_index >= 0) src = inputs[r->param_index].data;
        else if (p->cls.result_slot[r->id] != k) src = outputs[p->cls.result_slot[r->id]].data;
        else continue;
        if (fc_value_bytes(v) > 0 && src != outputs[k].data) memcpy(outputs[k].data, src, (size_t)fc_value_bytes(v));
    }
    return FC_OK;
}

fc_status fc_cpu_run_into(fc_cpu_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout) {
    if (!p) return FC_ERR_USAGE;
    fc_status st = check_tensors(p, "fc_cpu_run", inputs, nin, p->g->nparams, p->g->params, false);
    if (st == FC_OK) st = check_tensors(p, "fc_cpu_run", outputs, nout, p->g->noutputs, p->g->outputs, true);
    if (st == FC_OK) st = run_groups(p, inputs, outputs, NULL);
    return st;
}

/* Allocate the result tensors (malloc: fc_tensor_release frees them). */
static fc_status alloc_outputs(fc_cpu_program *p, fc_tensor *outputs, int nout) {
    if (nout > 0 && !outputs) return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_cpu_run: outputs is NULL");
    if (nout != p->g->noutputs)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_cpu_run: graph %s has %d results, not %d", p->g->name,
                            p->g->noutputs, nout);
    for (int k = 0; k < nout; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    for (int k = 0; k < nout; k++) {
        const fc_value *v = p->g->outputs[k];
        fc_tensor *t = &outputs[k];
        t->dtype = v->dtype;
        t->rank = v->rank;
        for (int d = 0; d < v->rank; d++) t->shape[d] = v->dims[d];
        size_t bytes = (size_t)fc_value_bytes(v);
        t->data = fc_ctx_malloc(p->ctx, bytes ? bytes : 1);
        if (!t->data) {
            for (int j = 0; j <= k; j++) fc_tensor_release(&outputs[j]);
            return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (results)");
        }
    }
    return FC_OK;
}

fc_status fc_cpu_run(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout) {
    if (!p) return FC_ERR_USAGE;
    fc_status st = alloc_outputs(p, outputs, nout);
    if (st != FC_OK) return st;
    st = fc_cpu_run_into(p, inputs, nin, outputs, nout);
    if (st == FC_OK) st = fc_cpu_own_strings(p, outputs, nout);
    if (st != FC_OK)
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    return st;
}

fc_status fc_cpu_bench(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout, int iters,
                       double *median_ms) {
    if (!p) return FC_ERR_USAGE;
    if (iters < 0) return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_cpu_bench: iters %d < 0", iters);
    fc_status st = fc_cpu_run(p, inputs, nin, outputs, nout);
    if (st != FC_OK || iters == 0) return st;
    /* The timed runs write into scratch outputs, so the checked results
     * stay those of the first run. */
    fc_tensor *scratch = calloc((size_t)nout + 1, sizeof *scratch);
    double *ms = calloc((size_t)iters, sizeof *ms);
    if (!scratch || !ms) st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (bench)");
    if (st == FC_OK) st = alloc_outputs(p, scratch, nout);
    for (int i = 0; i < BENCH_WARMUP && st == FC_OK; i++) st = run_groups(p, inputs, scratch, NULL);
    for (int i = 0; i < iters && st == FC_OK; i++) {
        double t0 = fc_now_ms();
        st = run_groups(p, inputs, scratch, NULL);
        ms[i] = fc_now_ms() - t0;
    }
    if (st == FC_OK && median_ms) *median_ms = fc_median(ms, iters);
    for (int k = 0; scratch && k < nout; k++) fc_tensor_release(&scratch[k]);
    free(scratch);
    free(ms);
    if (st != FC_OK)
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    return st;
}

fc_status fc_cpu_run_timed(fc_cpu_program *p, const fc_tensor *inputs, const fc_tensor *outputs, double *t) {
    if (!p || !t) return FC_ERR_USAGE;
    memset(t, 0, sizeof *t * 2 * (size_t)p->plan.ngroups);
    return run_groups(p, inputs, outputs, t);
}

int fc_cpu_program_ngroups(const fc_cpu_program *p) { return p ? p->plan.ngroups : 0; }

fc_status fc_cpu_program_launch(const fc_cpu_program *p, int pos, fc_launch *l) {
    memset(l, 0, sizeof *l);
    const fc_group *gr = p->plan.groups[pos];
    l->kind = gr->kind == FC_GROUP_LIBRARY ? FC_LAUNCH_LIBRARY : gr->kind == FC_GROUP_ALIAS ? FC_LAUNCH_ALIAS
                                                                                          : FC_LAUNCH_KERNEL;
    l->group = gr->id;
    if (l->kind == FC_LAUNCH_LIBRARY) snprintf(l->name, sizeof l->name, "%s", fc_op_table[gr->nodes[0]->op].name);
    else if (l->kind == FC_LAUNCH_ALIAS) snprintf(l->name, sizeof l->name, "alias");
    else snprintf(l->name, sizeof l->name, "fc_g%d", pos); /* the plan text's name */
    snprintf(l->summary, sizeof l->summary, "%s", p->kern[pos].summary);
    fc_launch_note(l, &p->plan, pos, pos, -1);
    l->nargs = gr->ninputs + gr->noutputs;
    l->nreads = gr->ninputs;
    l->args = malloc(sizeof *l->args * (size_t)(l->nargs + 1));
    if (!l->args) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int i = 0; i < gr->ninputs; i++) l->args[i] = gr->inputs[i]->id;
    for (int i = 0; i < gr->noutputs; i++) l->args[gr->ninputs + i] = gr->outputs[i]->id;
    return FC_OK;
}

char *fc_cpu_program_plan_dot(fc_cpu_program *p) { return p ? fc_plan_dot(p->ctx, &p->plan) : NULL; }

/* ------------------------------------------------------------------ */
/* Inspection and freeing.                                             */
/* ------------------------------------------------------------------ */

void fc_cpu_program_count_launches(const fc_cpu_program *p, int *kernels, int *library) {
    int k = 0, l = 0;
    for (int i = 0; p && i < p->plan.ngroups; i++) {
        if (p->plan.groups[i]->kind == FC_GROUP_LIBRARY) l++;
        else if (p->plan.groups[i]->kind != FC_GROUP_ALIAS) k++;
    }
    if (kernels) *kernels = k;
    if (library) *library = l;
}


char *fc_cpu_program_plan_text(fc_cpu_program *p) {
    if (!p) return NULL;
    fc_strbuf t = {0};
    for (int i = 0; i < p->plan.ngroups; i++) {
        const fc_group *gr = p->plan.groups[i];
        const fc_llvm_kernel *kn = &p->kern[i];
        if (gr->kind == FC_GROUP_LIBRARY)
            fc_strbuf_printf(&t, "launch %d: library %s ops: %s\n", i, fc_op_table[gr->nodes[0]->op].name, kn->summary);
        else if (gr->kind == FC_GROUP_ALIAS)
            fc_strbuf_printf(&t, "launch %d: alias (a view, nothing runs) ops: %s\n", i, kn->summary);
        else
            fc_strbuf_printf(&t, "launch %d: kernel fc_g%d iters=%lld threads=%d ops: %s\n", i, i, (long long)kn->iters,
                        parallel(p, kn) ? p->threads : 1,
                        kn->summary);
    }
    int kernels, library;
    fc_cpu_program_count_launches(p, &kernels, &library);
    if (p->note[0]) fc_strbuf_printf(&t, "note: %s\n", p->note);
    fc_strbuf_printf(&t, "arena: %lld bytes peak (%lld bytes if every intermediate had its own buffer)\n",
                (long long)p->plan.arena_bytes, (long long)p->plan.intermediate_bytes);
    fc_strbuf_printf(&t, "total: %d kernels, %d library calls, %lld bytes of intermediates\n", kernels, library,
                (long long)p->plan.intermediate_bytes);
    if (t.oom || !t.buf) {
        free(t.buf);
        fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (plan text)");
        return NULL;
    }
    return t.buf;
}

const char *fc_cpu_program_llvm_ir(const fc_cpu_program *p) { return p ? fc_llvm_module_ir(p->mod) : NULL; }
const char *fc_cpu_program_note(const fc_cpu_program *p) { return p ? p->note : ""; }
fc_graph *fc_cpu_program_graph(const fc_cpu_program *p) { return p ? p->g : NULL; }
const struct fc_plan *fc_cpu_program_plan(const fc_cpu_program *p) { return p ? &p->plan : NULL; }
int fc_cpu_program_threads(const fc_cpu_program *p) { return p ? p->threads : 0; }

void fc_cpu_program_free(fc_cpu_program *p) {
    if (!p) return;
    pool_free(p->pool);
    fc_cpu_free_strings(p);
    fc_llvm_module_free(p->mod);
    fc_ctx_freemem(p->ctx, p->kern);
    fc_ctx_freemem(p->ctx, p->gemm);
    fc_plan_classes_free(p->ctx, &p->cls);
    fc_ctx_freemem(p->ctx, p->args);
    free(p->arena);
    fc_plan_release(&p->plan);
    fc_graph_free(p->g);
    fc_ctx_freemem(p->ctx, p);
}

#else /* !FUSEC_HAVE_LLVM: the API links, and says why it cannot run. */

static const char no_backend[] = "this build has no CPU backend (LLVM not found at configure time)";

void fc_cpu_options_default(fc_cpu_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->fuse = true;
}
bool fc_cpu_available(void) { return false; }
const char *fc_cpu_target_description(void) { return no_backend; }

fc_status fc_cpu_compile_ex(fc_graph *g, const fc_cpu_options *o, fc_cpu_program **out) {
    (void)o;
    if (out) *out = NULL;
    if (!g) return FC_ERR_USAGE;
    return fc_set_error(fc_graph_context(g), FC_ERR_UNSUPPORTED, "%s", no_backend);
}
fc_status fc_cpu_compile(fc_graph *g, fc_cpu_program **out) { return fc_cpu_compile_ex(g, NULL, out); }

/* No program can exist in this build, so the rest only rejects NULL. */
fc_status fc_cpu_run(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout) {
    (void)p; (void)inputs; (void)nin; (void)outputs; (void)nout;
    return FC_ERR_USAGE;
}
fc_status fc_cpu_run_into(fc_cpu_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout) {
    (void)p; (void)inputs; (void)nin; (void)outputs; (void)nout;
    return FC_ERR_USAGE;
}
fc_status fc_cpu_bench(fc_cpu_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout, int iters,
                       double *median_ms) {
    (void)p; (void)inputs; (void)nin; (void)outputs; (void)nout; (void)iters; (void)median_ms;
    return FC_ERR_USAGE;
}
void fc_cpu_program_free(fc_cpu_program *p) { (void)p; }
fc_status fc_cpu_run_timed(fc_cpu_program *p, const fc_tensor *inputs, const fc_tensor *outputs, double *t) {
    (void)p; (void)inputs; (void)outputs; (void)t;
    return FC_ERR_USAGE;
}
int fc_cpu_program_ngroups(const fc_cpu_program *p) { (void)p; return 0; }
fc_status fc_cpu_program_launch(const fc_cpu_program *p, int pos, struct fc_launch *l) {
    (void)p; (void)pos; (void)l;
    return FC_ERR_USAGE;
}
char *fc_cpu_program_plan_dot(fc_cpu_program *p) { (void)p; return NULL; }
char *fc_cpu_program_plan_text(fc_cpu_program *p) { (void)p; return NULL; }
const char *fc_cpu_program_llvm_ir(const fc_cpu_program *p) { (void)p; return NULL; }
const char *fc_cpu_program_note(const fc_cpu_program *p) { (void)p; return ""; }
fc_graph *fc_cpu_program_graph(const fc_cpu_program *p) { (void)p; return NULL; }
const struct fc_plan *fc_cpu_program_plan(const fc_cpu_program *p) { (void)p; return NULL; }
int fc_cpu_program_threads(const fc_cpu_program *p) { (void)p; return 0; }
void fc_cpu_program_count_launches(const fc_cpu_program *p, int *kernels, int *library) {
    (void)p;
    if (kernels) *kernels = 0;
    if (library) *library = 0;
}

#endif

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
#include "runtime/cpu/cpu_program.h"
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
 * (elements x ops): below it, waking the pool costs more than it saves.
 * Measured here: a 7-op pointwise chain breaks even at about 64K elements
 * (0.09 ms on one thread); 16K elements run 20% slower on two threads. */
#define PARALLEL_WORK (1 << 19)
/* Warm-up runs before a benchmark. */
#define BENCH_WARMUP 2
/* The arena's alignment: a cache line, and any vector load. */
#define ARENA_ALIGN 64

/* ------------------------------------------------------------------ */
/* The thread pool.                                                    */
/* ------------------------------------------------------------------ */

typedef struct pool pool;

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

struct fc_cpu_program {
    fc_context *ctx;
    fc_cpu_options opts;
    int threads;     /* resolved opts.threads */
    fc_graph *g;     /* fusec's copy, after the passes */
    fc_plan plan;
    fc_llvm_module *mod;
    fc_llvm_kernel *kern; /* per group, in launch order */

    fc_plan_classes cls; /* storage classes, by value id (see the top of the file) */

    void *arena;      /* plan.arena_bytes of intermediates */
    void **args;      /* per-launch scratch: the kernel's pointers */
    int max_args;
    pool *pool;       /* started by the first parallel kernel */
    char note[512];   /* why the plan is not the fused one, or "" */
};

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
    return (char *)p->arena + p->plan.offset[id];
}

/* ------------------------------------------------------------------ */
/* Library calls: matmul, attention, gemm.                             */
/* ------------------------------------------------------------------ */

static int64_t numel_of(const fc_value *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->dims[d];
    return n;
}

/* C = alpha op(A) op(B) + beta C, row-major, f32 or f64: cblas where it is
 * linked, else these loops (one text for both types). */
#ifndef USE_CBLAS
#define GEMM_LOOPS(T)                                                                                                  \
    for (int64_t i = 0; i < M; i++) {                                                                                  \
        T *c = C + i * ldc;                                                                                            \
        for (int64_t j = 0; j < N; j++) c[j] = beta == 0 ? 0 : beta * c[j];                                            \
        for (int64_t k = 0; k < K; k++) {                                                                              \
            T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);                                                      \
            if (tb)                                                                                                    \
                for (int64_t j = 0; j < N; j++) c[j] += a * Bm[j * ldb + k];                                           \
            else                                                                                                       \
                for (int64_t j = 0; j < N; j++) c[j] += a * Bm[k * ldb + j];                                           \
        }                                                                                                              \
    }
#endif

static void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *Bm, int64_t ldb, float beta, float *C, int64_t ldc) {
#ifdef USE_CBLAS
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
#else
    GEMM_LOOPS(float)
#endif
}

static void gemm_f64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
                     const double *Bm, int64_t ldb, double beta, double *C, int64_t ldc) {
#ifdef USE_CBLAS
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
#else
    GEMM_LOOPS(double)
#endif
}

/* A float operand in the compute type of its dtype: f64 and f32 as they are,
 * f16 and bf16 converted to a new f32 array (*owned, to free). */
static const void *as_compute(fc_dtype dt, const void *data, int64_t n, void **owned) {
    *owned = NULL;
    if (dt == FC_F32 || dt == FC_F64) return data;
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) return NULL;
    const uint16_t *h = data;
    for (int64_t i = 0; i < n; i++) f[i] = dt == FC_BF16 ? fc_bf16_to_f32(h[i]) : fc_f16_to_f32(h[i]);
    *owned = f;
    return f;
}

/* A result computed in f32 (or f64) into storage of dtype dt, rounded once. */
static void store_compute(fc_dtype dt, const void *src, void *dst, int64_t n) {
    if (dt == FC_F32 || dt == FC_F64) {
        if (src != dst) memcpy(dst, src, (size_t)n * fc_dtype_size(dt));
        return;
    }
    const float *f = src;
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = dt == FC_BF16 ? fc_f32_to_bf16(f[i]) : fc_f32_to_f16(f[i]);
}

/* Batch dims of up to four [.., X, Y] operands, broadcast (NumPy rules). */
typedef struct batch {
    int nb;
    int64_t shape[FC_MAX_RANK];
    int64_t stride[4][FC_MAX_RANK]; /* in matrices; 0 where broadcast */
    int64_t count;
} batch;

static void batch_init(batch *bt, int nops, const fc_value *const *ops, const int *nbatch) {
    memset(bt, 0, sizeof *bt);
    for (int i = 0; i < nops; i++)
        if (nbatch[i] > bt->nb) bt->nb = nbatch[i];
    for (int d = 0; d < bt->nb; d++) bt->shape[d] = 1;
    for (int i = 0; i < nops; i++) {
        int off = bt->nb - nbatch[i];
        int64_t s = 1;
        for (int d = bt->nb - 1; d >= 0; d--) {
            int64_t dim = d >= off ? ops[i]->dims[d - off] : 1;
            bt->stride[i][d] = dim == 1 ? 0 : s;
            s *= dim;
            if (dim != 1) bt->shape[d] = dim;
        }
    }
    bt->count = 1;
    for (int d = 0; d < bt->nb; d++) bt->count *= bt->shape[d];
}

static int64_t batch_offset(const batch *bt, int op, int64_t t) {
    int64_t off = 0;
    for (int d = bt->nb - 1; d >= 0; d--) {
        off += (t % bt->shape[d]) * bt->stride[op][d];
        t /= bt->shape[d];
    }
    return off;
}

static bool fits_int(int64_t x) { return x >= 0 && x <= 0x7fffffff; }

/* The host address of node operand v: the group's inputs hold each
 * distinct operand once, in args[0 .. ninputs). */
static void *operand_ptr(const fc_group *gr, void *const *args, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return args[i];
    FC_UNREACHABLE("a library operand that is not a group input");
}

/* Element i of a float tensor of dtype dt, as a float. */
static float load_float(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_F32: return ((const float *)data)[i];
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)data)[i]);
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)data)[i]);
    default: FC_UNREACHABLE("load_float of a non-f32/f16/bf16 dtype");
    }
}

/*
 * matmul and gemm (passes/epilogue.c, docs/GEMM.md), both read through
 * fc_gemm_info_of:
 *
 *   y[.., m, off_i + j] = act(scale * sum_k A[.., m, k] Bi[.., k, j] + bias_i[j] + residual[.., m, off_i + j])
 *
 * One GEMM per right operand (and per batch, unless the operand has no
 * batch dims: the left one is then dense [batch * M, K] and one call does
 * them all) writes its block of columns of an f32 result (f64 for f64),
 * with scale as alpha; the epilogue then adds bias and residual, applies the
 * activation and rounds once to the result's dtype. matmul's rank-1
 * operands are [1, K] and [K, 1].
 */
static fc_status run_gemm(fc_cpu_program *p, const fc_group *gr, const fc_node *n, void *const *args) {
    fc_gemm_info gi;
    FC_ASSERT(fc_gemm_info_of(n, &gi)); /* checked by check_library */
    const fc_value *a = gi.a, *y = n->out[0];
    fc_dtype in_dt = a->dtype, out_dt = y->dtype;
    bool f64 = in_dt == FC_F64;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int64_t M = a->rank == 1 ? 1 : a->dims[a->rank - (gi.trans_a ? 1 : 2)];
    int64_t K = a->dims[a->rank - (gi.trans_a ? 2 : 1)];
    int64_t total = numel_of(y), Ntot = 0;
    for (int i = 0; i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        Ntot += w->rank == 1 ? 1 : w->dims[w->rank - (gi.trans_b ? 2 : 1)];
    }
    if (!fits_int(total / (Ntot > 0 ? Ntot : 1)) || !fits_int(Ntot) || !fits_int(K))
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "%s: a dimension exceeds the BLAS interface's int",
                            fc_op_table[n->op].name);
    /* The product lands in the result itself when it has the compute type
     * and nothing follows it; else in a temporary. */
    bool epilogue = gi.has_bias || gi.has_residual || gi.act != FC_GEMM_ACT_NONE;
    void *out = args[gr->ninputs];
    void *C = out, *tmp_c = NULL, *owned[FC_MAX_RANK + 2] = {NULL};
    int nowned = 0;
    fc_status st = FC_OK;
    if (out_dt != (f64 ? FC_F64 : FC_F32) || epilogue) C = tmp_c = malloc(es * (size_t)(total > 0 ? total : 1));
    const void *A = as_compute(in_dt, operand_ptr(gr, args, a), numel_of(a), &owned[nowned]);
    nowned++;
    if (!C || (!A && numel_of(a) > 0)) st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (%s)", fc_op_table[n->op].name);
    int64_t off = 0;
    for (int i = 0; st == FC_OK && i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        int64_t N = w->rank == 1 ? 1 : w->dims[w->rank - (gi.trans_b ? 2 : 1)];
        const fc_value *ops[2] = {a, w};
        int nbatch[2] = {a->rank > 2 ? a->rank - 2 : 0, w->rank > 2 ? w->rank - 2 : 0};
        batch bt;
        batch_init(&bt, 2, ops, nbatch);
        void *own = NULL;
        const void *W = as_compute(in_dt, operand_ptr(gr, args, w), numel_of(w), &own);
        if (own && nowned < FC_MAX_RANK + 2) owned[nowned++] = own;
        else if (own) { /* more weights than slots: keep the list bounded */
            free(own);
            st = fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "gemm: too many 16-bit right operands");
            break;
        }
        if (!W && numel_of(w) > 0) {
            st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (%s)", fc_op_table[n->op].name);
            break;
        }
        if (K == 0 || M == 0 || N == 0) { /* empty sums are 0; BLAS rejects K = 0 */
            for (int64_t t = 0; t < bt.count && K == 0; t++)
                for (int64_t m = 0; m < M; m++)
                    memset((char *)C + (size_t)((t * M + m) * Ntot + off) * es, 0, (size_t)N * es);
            off += N;
            continue;
        }
        bool one = nbatch[1] == 0 && !gi.trans_a;
        int64_t nb = one ? 1 : bt.count, rows = one ? M * bt.count : M;
        int64_t lda = gi.trans_a ? M : K, ldb = gi.trans_b ? K : N;
        for (int64_t t = 0; t < nb; t++) {
            const char *at = (const char *)A + (size_t)(batch_offset(&bt, 0, t) * M * K) * es;
            const char *wt = (const char *)W + (size_t)(batch_offset(&bt, 1, t) * K * N) * es;
            char *ct = (char *)C + (size_t)(t * M * Ntot + off) * es;
            if (f64)
                gemm_f64(gi.trans_a, gi.trans_b, rows, N, K, gi.alpha, (const double *)at, lda, (const double *)wt, ldb,
                         0.0, (double *)ct, Ntot);
            else
                gemm_f32(gi.trans_a, gi.trans_b, rows, N, K, (float)gi.alpha, (const float *)at, lda,
                         (const float *)wt, ldb, 0.0f, (float *)ct, Ntot);
        }
        off += N;
    }
    if (st == FC_OK && tmp_c) {
        if (f64) { /* f64: matmul only, no epilogue */
            memcpy(out, C, (size_t)total * es);
        } else {
            const float *c = C;
            for (int64_t e = 0; e < total; e++) {
                float v = c[e];
                if (gi.has_bias) {
                    int64_t col = e % Ntot, base = 0;
                    for (int i = 0; i < gi.nweights; i++) {
                        int64_t N = gi.w[i]->dims[gi.w[i]->rank - (gi.trans_b ? 2 : 1)];
                        if (col < base + N) {
                            v += load_float(gi.bias[i]->dtype, operand_ptr(gr, args, gi.bias[i]), col - base);
                            break;
                        }
                        base += N;
                    }
                }
                if (gi.has_residual) v += load_float(gi.residual->dtype, operand_ptr(gr, args, gi.residual), e);
                if (gi.act == FC_GEMM_ACT_RELU) v = v < 0 ? 0.0f : v;
                else if (gi.act == FC_GEMM_ACT_GELU_TANH) /* x/2 (1 + tanh u) = x / (1 + e^-2u), as codegen */
                    v = v / (1.0f + expf(-2.0f * 0.79788456080286535588f * (v + 0.044715f * v * v * v)));
                switch (out_dt) {
                case FC_F32: ((float *)out)[e] = v; break;
                case FC_BF16: ((uint16_t *)out)[e] = fc_f32_to_bf16(v); break;
                case FC_F16: ((uint16_t *)out)[e] = fc_f32_to_f16(v); break;
                default: FC_UNREACHABLE("gemm result dtype");
                }
            }
        }
    }
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(tmp_c);
    return st;
}

/* Element i of an attention mask as a double: a bool mask (1 keeps the
 * key, 0 drops it) or a float one (added to the score). */
static double load_mask(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_BOOL: return ((const uint8_t *)data)[i] != 0 ? 1.0 : 0.0;
    case FC_F64: return ((const double *)data)[i];
    default: return load_float(dt, data, i);
    }
}

/* One row of attention scores s[0 .. Sk) becomes probabilities: the mask
 * row at `mrow` applied (read as a double, whatever its dtype), a softmax
 * over the first nk keys, zeros after them. NaN wins the max, as in the
 * reference; a row whose keys are all dropped is NaN (0/0). */
static void softmax_row_f32(float *s, int64_t nk, int64_t Sk, const fc_value *mk, const void *M, int64_t mrow,
                            int64_t Mk) {
    float m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < nk; j++) {
        if (mk) {
            double mv = load_mask(mk->dtype, M, mrow + (Mk == 1 ? 0 : j));
            s[j] = mk->dtype == FC_BOOL ? (mv != 0 ? s[j] : -INFINITY) : (float)(s[j] + mv);
        }
        m = isnan(s[j]) || s[j] > m ? s[j] : m;
    }
    for (int64_t j = 0; j < nk; j++) sum += s[j] = expf(s[j] - m);
    for (int64_t j = 0; j < Sk; j++) s[j] = j < nk ? s[j] / sum : 0.0f;
}

static void softmax_row_f64(double *s, int64_t nk, int64_t Sk, const fc_value *mk, const void *M, int64_t mrow,
                            int64_t Mk) {
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < nk; j++) {
        if (mk) {
            double mv = load_mask(mk->dtype, M, mrow + (Mk == 1 ? 0 : j));
            s[j] = mk->dtype == FC_BOOL ? (mv != 0 ? s[j] : -INFINITY) : s[j] + mv;
        }
        m = isnan(s[j]) || s[j] > m ? s[j] : m;
    }
    for (int64_t j = 0; j < nk; j++) sum += s[j] = exp(s[j] - m);
    for (int64_t j = 0; j < Sk; j++) s[j] = j < nk ? s[j] / sum : 0.0;
}

/*
 * attention(q, k, v, [mask]) = softmax(q k^T scale [+ mask]) v, per batch,
 * in f32 (f64 for f64): the scores by GEMM; per row the mask (a bool mask
 * drops the keys where it is false, a float mask is added), then a softmax
 * over the keys the row sees (causal: j <= i, the others left out, as the
 * reference does); the probabilities times v by GEMM. A row whose keys are
 * all dropped is NaN, as 0/0 in the reference. The mask is [mbatch.., Mq,
 * Mk] with Mq 1 or Sq, Mk 1 or Sk (missing dims are 1), its batch dims
 * broadcast with the others'.
 */
static fc_status run_attention(fc_cpu_program *p, const fc_group *gr, const fc_node *n, void *const *args) {
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2], *o = n->out[0];
    const fc_value *mk = n->nin > 3 ? n->in[3] : NULL;
    fc_dtype dt = q->dtype;
    bool f64 = dt == FC_F64;
    int64_t Sq = q->dims[q->rank - 2], D = q->dims[q->rank - 1], Sk = k->dims[k->rank - 2], Dv = v->dims[v->rank - 1];
    int64_t Mq = mk && mk->rank >= 2 ? mk->dims[mk->rank - 2] : 1, Mk = mk && mk->rank >= 1 ? mk->dims[mk->rank - 1] : 1;
    const fc_value *ops[4] = {q, k, v, mk};
    int nbatch[4] = {q->rank - 2, k->rank - 2, v->rank - 2, mk && mk->rank > 2 ? mk->rank - 2 : 0};
    batch bt;
    batch_init(&bt, mk ? 4 : 3, ops, nbatch);
    if (!fits_int(Sq) || !fits_int(Sk) || !fits_int(D) || !fits_int(Dv))
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "attention: a dimension exceeds the BLAS interface's int");
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    void *oq, *ok, *ov, *oo = NULL;
    const char *Q = as_compute(dt, operand_ptr(gr, args, q), numel_of(q), &oq);
    const char *Kp = as_compute(dt, operand_ptr(gr, args, k), numel_of(k), &ok);
    const char *V = as_compute(dt, operand_ptr(gr, args, v), numel_of(v), &ov);
    const void *M = mk ? operand_ptr(gr, args, mk) : NULL;
    char *O = args[gr->ninputs];
    if (dt == FC_F16 || dt == FC_BF16) O = oo = malloc(sizeof(float) * (size_t)(numel_of(o) > 0 ? numel_of(o) : 1));
    char *S = malloc(es * (size_t)(Sq * Sk > 0 ? Sq * Sk : 1));
    fc_status st = FC_OK;
    if ((!Q && numel_of(q)) || (!Kp && numel_of(k)) || (!V && numel_of(v)) || (!O && numel_of(o)) || !S)
        st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (attention)");
    for (int64_t t = 0; st == FC_OK && t < bt.count; t++) {
        const char *qt = Q + (size_t)(batch_offset(&bt, 0, t) * Sq * D) * es;
        const char *kt = Kp + (size_t)(batch_offset(&bt, 1, t) * Sk * D) * es;
        const char *vt = V + (size_t)(batch_offset(&bt, 2, t) * Sk * Dv) * es;
        int64_t mbase = mk ? batch_offset(&bt, 3, t) * Mq * Mk : 0;
        char *ot = O + (size_t)(t * Sq * Dv) * es;
        if (Sq == 0 || Dv == 0) continue;
        if (Sk == 0) { /* no keys at all: NaN */
            for (int64_t i = 0; i < Sq * Dv; i++) {
                if (f64) ((double *)ot)[i] = NAN;
                else ((float *)ot)[i] = NAN;
            }
            continue;
        }
        if (f64) gemm_f64(false, true, Sq, Sk, D, scale, (const double *)qt, D, (const double *)kt, D, 0.0, (double *)S, Sk);
        else gemm_f32(false, true, Sq, Sk, D, (float)scale, (const float *)qt, D, (const float *)kt, D, 0.0f, (float *)S, Sk);
        for (int64_t i = 0; i < Sq; i++) {
            int64_t nk = n->a.causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
            int64_t mrow = mbase + (Mq == 1 ? 0 : i) * Mk;
            if (f64) softmax_row_f64((double *)S + i * Sk, nk, Sk, mk, M, mrow, Mk);
            else softmax_row_f32((float *)S + i * Sk, nk, Sk, mk, M, mrow, Mk);
        }
        if (f64) gemm_f64(false, false, Sq, Dv, Sk, 1.0, (const double *)S, Sk, (const double *)vt, Dv, 0.0, (double *)ot, Dv);
        else gemm_f32(false, false, Sq, Dv, Sk, 1.0f, (const float *)S, Sk, (const float *)vt, Dv, 0.0f, (float *)ot, Dv);
    }
    if (st == FC_OK && oo) store_compute(dt, O, args[gr->ninputs], numel_of(o));
    free(oq);
    free(ok);
    free(ov);
    free(oo);
    free(S);
    return st;
}

static fc_status run_library(fc_cpu_program *p, const fc_group *gr, void *const *args) {
    const fc_node *n = gr->nodes[0];
    if (n->op == FC_OP_ATTENTION) return run_attention(p, gr, n, args);
    return run_gemm(p, gr, n, args);
}

/* Library groups are checked at compile time, so a plan the runtime cannot
 * run fails in fc_cpu_compile: one node, its result the group's only
 * output, every operand a group input. */
static fc_status check_library(fc_cpu_program *p, const fc_group *gr) {
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi;
    bool ok = gr->nnodes == 1 && gr->noutputs == 1 && gr->outputs[0] == n->out[0] && n->nout == 1;
    for (int i = 0; ok && i < n->nin; i++) {
        bool found = false;
        for (int j = 0; j < gr->ninputs; j++) found |= gr->inputs[j] == n->in[i];
        ok = found;
    }
    if (ok && n->op == FC_OP_ATTENTION)
        ok = fc_dtype_is_float(n->in[0]->dtype) && n->nin <= 4 &&
             (n->nin < 4 || n->in[3]->dtype == FC_BOOL || fc_dtype_is_float(n->in[3]->dtype));
    else if (ok) {
        ok = fc_gemm_info_of(n, &gi) && fc_dtype_is_float(gi.a->dtype) &&
             (gi.a->dtype == FC_F64 ? !gi.has_bias && !gi.has_residual && gi.act == FC_GEMM_ACT_NONE &&
                                          n->out[0]->dtype == FC_F64
                                    : n->out[0]->dtype != FC_F64);
        for (int i = 0; ok && gi.has_bias && i < gi.nweights; i++) ok = gi.w[i]->rank >= 2;
    }
    if (ok) return FC_OK;
    return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "CPU backend: %s is not supported as a library call",
                        fc_op_table[n->op].name);
}

/* ------------------------------------------------------------------ */
/* Compiling.                                                          */
/* ------------------------------------------------------------------ */


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
    fc_status st = fc_pipeline(p->g, &fo, &p->plan);
    if (st != FC_OK) return st;
    if (!p->plan.offset) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the plan has no memory plan");
    if (p->g->nparams != g->nparams || p->g->noutputs != g->noutputs)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the passes changed the graph's signature");
    for (int i = 0; i < p->plan.ngroups; i++) {
        const fc_group *gr = p->plan.groups[i];
        if (gr->kind == FC_GROUP_LIBRARY && (st = check_library(p, gr)) != FC_OK) return st;
        if (gr->kind != FC_GROUP_LIBRARY && gr->kind != FC_GROUP_ALIAS && gr->kind != FC_GROUP_POINTWISE &&
            gr->kind != FC_GROUP_REDUCE)
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "CPU backend: group %d is of a kind it cannot run (%d)", i,
                                (int)gr->kind);
    }
    p->kern = zalloc(p->ctx, (size_t)p->plan.ngroups + 1, sizeof *p->kern);
    if (!p->kern) return FC_ERR_NOMEM;
    fc_llvm_options lo = {.keep_ir = p->opts.keep_ir};
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
    fc_plan_release(&p->plan);
    fc_graph_free(p->g);
    p->mod = NULL;
    p->kern = NULL;
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
    if (!g) return FC_ERR_USAGE;
    fc_context *ctx = g->ctx;
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cpu_compile: out is NULL");
    if (g->status != FC_OK)
        return fc_set_error(ctx, g->status, "fc_cpu_compile: graph %s has an error from building it", g->name);
    if (!g->returned)
        return fc_set_error(ctx, FC_ERR_INPUT, "fc_cpu_compile: graph %s has no results (call fc_graph_return)",
                            g->name);
    fc_status st = fc_graph_check_static(g);
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

static fc_status run_groups(fc_cpu_program *p, const fc_tensor *inputs, const fc_tensor *outputs) {
    const fc_plan *plan = &p->plan;
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *gr = plan->groups[pos];
        if (gr->kind == FC_GROUP_ALIAS) continue;
        for (int i = 0; i < gr->ninputs; i++) p->args[i] = value_ptr(p, gr->inputs[i]->id, inputs, outputs);
        for (int i = 0; i < gr->noutputs; i++)
            p->args[gr->ninputs + i] = value_ptr(p, gr->outputs[i]->id, inputs, outputs);
        if (gr->kind == FC_GROUP_LIBRARY) {
            fc_status st = run_library(p, gr, p->args);
            if (st != FC_OK) return st;
            continue;
        }
        run_kernel(p, &p->kern[pos], p->args);
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
    if (st == FC_OK) st = run_groups(p, inputs, outputs);
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
    for (int i = 0; i < BENCH_WARMUP && st == FC_OK; i++) st = run_groups(p, inputs, scratch);
    for (int i = 0; i < iters && st == FC_OK; i++) {
        double t0 = fc_now_ms();
        st = run_groups(p, inputs, scratch);
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
    fc_llvm_module_free(p->mod);
    fc_ctx_freemem(p->ctx, p->kern);
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

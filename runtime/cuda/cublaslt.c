/*
 * cublaslt.c - GEMM descriptions run through cuBLASLt (cublaslt.h has the
 * contract, docs/GEMM.md the whole story).
 *
 * The column-major trick. Our tensors are row-major; cuBLASLt is
 * column-major, and its epilogues are not supported for a row-ordered D. A
 * row-major [M, N] matrix is, byte for byte, a column-major N x M matrix, so
 * instead of Y = X W we ask for Y^T = W^T X^T:
 *
 *   cuBLASLt   m = N, n = M, k = K
 *   A = W      column-major N x K (ld N)   when W is [K, N]       op N
 *              column-major K x N (ld K)   when W is [N, K] (tb)  op T
 *   B = X      column-major K x M (ld K)   when X is [M, K]       op N
 *              column-major M x K (ld M)   when X is [K, M] (ta)  op T
 *   C = D = Y  column-major N x M (ld N), with beta = 1 and C = the
 *              residual when there is one
 *
 * The bias is per row of D, that is per column of Y: exactly the [N] bias
 * broadcast along Y's rows.
 *
 * The descriptions (fc_gemm_desc) are made before the backend runs, from
 * plan nodes (lower/gemm_desc.c); everything here reads them only. The
 * handle's fused-sibling weights are in cublaslt_concat.c, its algorithm
 * records on disk in cublaslt_record.c, its layout in cublaslt_impl.h.
 *
 * Nothing here prints. Every cuBLASLt call goes through FC_CUBLASLT_CHECK,
 * every driver call through FC_CU_CHECK; those return at once, so functions
 * that own resources call small helpers and clean up after them.
 */
#include "runtime/cuda/cublaslt.h"
#include "ir/le.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/program_cache.h"

#include <cublasLt.h>
#include <xxhash.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The handle                                                           */
/* ------------------------------------------------------------------ */

#include "runtime/cuda/cublaslt_impl.h"


/* Candidates asked of the heuristic when timing (options.tune). */
#define TUNE_CANDIDATES 8

/* Over every handle of the process. */
static _Atomic long total_queries, total_disk_hits;

size_t fc_cublaslt_version(void) { return cublasLtGetVersion(); }

static fc_status make_current(fc_context *ctx, fc_cuda_device *d) {
    FC_CU_CHECK(ctx, d->cu->CtxSetCurrent(d->cuctx));
    return FC_OK;
}

static fc_status lt_create(fc_context *ctx, cublasLtHandle_t *lt) {
    FC_CUBLASLT_CHECK(ctx, cublasLtCreate(lt));
    return FC_OK;
}

fc_status fc_cublaslt_create(fc_context *ctx, fc_cuda_device *dev, const fc_cublaslt_options *o, fc_cublaslt **out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cublaslt_create: out is NULL");
    *out = NULL;
    if (!dev) {
        /* Say why there is no device, as the driver layer words it. */
        if (!fc_cuda_available(ctx)) return FC_ERR_RUNTIME;
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_cublaslt_create: no device given (open one with fc_cuda_device_open)");
    }
    fc_status st = make_current(ctx, dev);
    if (st != FC_OK) return st;
    fc_cublaslt *h = fc_ctx_malloc(ctx, sizeof *h);
    if (!h) return FC_ERR_NOMEM;
    memset(h, 0, sizeof *h);
    h->ctx = ctx;
    h->dev = dev;
    h->allow_tf32 = o && o->allow_tf32;
    h->cache = o ? o->cache : NULL;
    h->reuse_family = o && o->reuse_family;
    fc_cublaslt_device_id_of(&dev->info, &h->id);
    h->mapped = o && o->mapped;
    h->tune = o && o->tune;
    h->lt_borrowed = o && o->share;
    if (h->lt_borrowed) h->lt = o->share->lt;
    else st = lt_create(ctx, &h->lt);
    if (st != FC_OK) {
        fc_ctx_freemem(ctx, h);
        return st;
    }
    *out = h;
    return FC_OK;
}



static void entry_free(lt_entry *e) {
    if (e->op) cublasLtMatmulDescDestroy(e->op);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->c) cublasLtMatrixLayoutDestroy(e->c);
    if (e->d) cublasLtMatrixLayoutDestroy(e->d);
    e->op = NULL;
    e->a = e->b = e->c = e->d = NULL;
    e->ready = false;
}

void fc_cublaslt_destroy(fc_cublaslt *h) {
    if (!h) return;
    /* Teardown errors are ignored: nothing can be done about them, and they
     * must not hide the error that led here. */
    (void)h->dev->cu->CtxSetCurrent(h->dev->cuctx);
    for (int i = 0; i < h->nentries; i++) {
        entry_free(h->entries[i]);
        fc_ctx_freemem(h->ctx, h->entries[i]);
    }
    fc_ctx_freemem(h->ctx, h->entries);
    fc_ctx_freemem(h->ctx, h->index);
    for (int i = 0; i < h->nconcats; i++) fc_lt_concat_clear(h, &h->concats[i]);
    fc_ctx_freemem(h->ctx, h->concats);
    for (int i = 0; i < h->nfamilies; i++) fc_ctx_freemem(h->ctx, h->families[i].picks);
    fc_ctx_freemem(h->ctx, h->families);
    fc_cuda_region_free(h->dev, &h->mem);
    if (h->lt && !h->lt_borrowed) cublasLtDestroy(h->lt);
    fc_ctx_freemem(h->ctx, h);
}

int fc_cublaslt_num_algos(const fc_cublaslt *h) {
    int n = 0;
    for (int i = 0; h && i < h->nentries; i++) n += h->entries[i]->have_algo;
    return n;
}

bool fc_cublaslt_algo_at(const fc_cublaslt *h, int i, fc_cublaslt_key *key, uint8_t algo[FC_CUBLASLT_ALGO_BYTES]) {
    _Static_assert(sizeof(cublasLtMatmulAlgo_t) == FC_CUBLASLT_ALGO_BYTES, "cublasLtMatmulAlgo_t changed size");
    for (int j = 0; h && j < h->nentries; j++) {
        const lt_entry *e = h->entries[j];
        if (!e->have_algo || i-- > 0) continue;
        *key = e->key;
        memcpy(algo, &e->algo, FC_CUBLASLT_ALGO_BYTES);
        return true;
    }
    return false;
}

int fc_cublaslt_heuristic_queries(const fc_cublaslt *h) { return h ? h->queries : 0; }
int fc_cublaslt_disk_hits(const fc_cublaslt *h) { return h ? h->disk_hits : 0; }
long fc_cublaslt_heuristic_queries_total(void) { return atomic_load(&total_queries); }
long fc_cublaslt_disk_hits_total(void) { return atomic_load(&total_disk_hits); }

/* The entries are found through an open-addressing index (FNV-1a of the
 * key's bytes): a dynamic program's variant meets a new size of each GEMM
 * at every new shape, and a linear search over thousands of entries cost
 * ~100 us a launch in a sweep over 1024 sequence lengths. */
static uint64_t key_hash(const fc_cublaslt_key *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *key; i++) x = (x ^ b[i]) * 1099511628211ull;
    return x;
}

static lt_entry *find_entry(const fc_cublaslt *h, const fc_cublaslt_key *key) {
    if (!h->index_cap) return NULL;
    for (size_t i = key_hash(key) & (h->index_cap - 1);; i = (i + 1) & (h->index_cap - 1)) {
        int at = h->index[i];
        if (at < 0) return NULL;
        if (!memcmp(&h->entries[at]->key, key, sizeof *key)) return h->entries[at];
    }
}

/* Put entry `at` into the index (which has a free slot). */
static void index_put(fc_cublaslt *h, int at) {
    size_t i = key_hash(&h->entries[at]->key) & (h->index_cap - 1);
    while (h->index[i] >= 0) i = (i + 1) & (h->index_cap - 1);
    h->index[i] = at;
}

static lt_entry *add_entry(fc_cublaslt *h, fc_context *ctx, const fc_cublaslt_key *key) {
    if (!fc_ctx_grow(ctx, (void **)&h->entries, &h->cap_entries, h->nentries + 1, sizeof *h->entries)) return NULL;
    /* At most half full: rebuilt at twice the size when it would not be. */
    if ((size_t)(h->nentries + 1) * 2 > h->index_cap) {
        size_t cap = h->index_cap ? h->index_cap * 2 : 16;
        int *ix = fc_ctx_malloc(ctx, sizeof *ix * cap);
        if (!ix) return NULL;
        fc_ctx_freemem(ctx, h->index);
        h->index = ix;
        h->index_cap = cap;
        for (size_t i = 0; i < cap; i++) ix[i] = -1;
        for (int i = 0; i < h->nentries; i++) index_put(h, i);
    }
    lt_entry *e = fc_ctx_malloc(ctx, sizeof *e);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->key = *key;
    h->entries[h->nentries++] = e;
    index_put(h, h->nentries - 1);
    return e;
}

fc_status fc_cublaslt_algo_insert(fc_cublaslt *h, const fc_cublaslt_key *key, const uint8_t algo[FC_CUBLASLT_ALGO_BYTES]) {
    if (!h || !key || !algo) return FC_ERR_USAGE;
    if (key->version != FC_CUBLASLT_KEY_VERSION)
        return fc_set_error(h->ctx, FC_ERR_USAGE, "fc_cublaslt_algo_insert: key version %lld, not %d",
                            (long long)key->version, FC_CUBLASLT_KEY_VERSION);
    lt_entry *e = find_entry(h, key);
    if (!e && !(e = add_entry(h, h->ctx, key))) return FC_ERR_NOMEM;
    entry_free(e); /* re-made, and the algorithm checked, at first use */
    memcpy(&e->algo, algo, FC_CUBLASLT_ALGO_BYTES);
    e->have_algo = true;
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Keys and descriptors                                                 */
/* ------------------------------------------------------------------ */

cudaDataType_t fc_lt_cuda_type(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return CUDA_R_64F;
    case FC_F32: return CUDA_R_32F;
    case FC_F16: return CUDA_R_16F;
    case FC_BF16: return CUDA_R_16BF;
    default: FC_UNREACHABLE("cuda_type: not a GEMM dtype (fc_gemm_plan_of checks)");
    }
}

static cublasLtEpilogue_t epilogue_of(const fc_gemm_plan *p) {
    switch (p->act) {
    case FC_GEMM_ACT_RELU: return p->has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case FC_GEMM_ACT_GELU_TANH: return p->has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case FC_GEMM_ACT_NONE: break;
    }
    return p->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

/* The largest power of two up to 256 dividing every address a call makes
 * from base `ptr` with these byte offsets (cuBLASLt's alignment
 * preferences: the heuristic only offers kernels that can read them). */
static int64_t alignment(uint64_t bits) {
    if (bits == 0) return 256;
    uint64_t low = bits & (~bits + 1);
    return low > 256 ? 256 : (int64_t)low;
}

/* The pointers of one call (before the outer loop's offsets). */
typedef struct lt_ptrs {
    CUdeviceptr x, w, bias, c, d;
} lt_ptrs;

/* The key of one call of p; the result's leading dimension is ldd (p->N
 * for a dense result). */
static void make_key_ld(bool allow_tf32, const fc_gemm_plan *p, const lt_ptrs *ptr, size_t ws_bytes, int64_t ldd,
                        fc_cublaslt_key *k) {
    memset(k, 0, sizeof *k);
    k->version = FC_CUBLASLT_KEY_VERSION;
    k->a_type = k->b_type = fc_lt_cuda_type(p->ab);
    k->d_type = fc_lt_cuda_type(p->out);
    if (p->ab == FC_F64) {
        k->compute = CUBLAS_COMPUTE_64F;
        k->scale_type = CUDA_R_64F;
    } else {
        /* f16 and bf16 accumulate in f32 (never CUBLAS_COMPUTE_16F); f32
         * uses TF32 tensor cores only when asked to. */
        k->compute = p->ab == FC_F32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        k->scale_type = CUDA_R_32F;
    }
    k->op_a = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    k->op_b = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    k->epilogue = epilogue_of(p);
    k->m = p->N;
    k->n = p->M;
    k->k = p->K;
    k->lda = p->ldw;
    k->ldb = p->lda;
    k->ldd = ldd;
    k->batch = p->batch;
    k->stride_a = p->batch > 1 ? p->stride_w : 0;
    k->stride_b = p->batch > 1 ? p->stride_a : 0;
    k->stride_d = p->batch > 1 ? p->stride_y : 0;
    uint64_t es_ab = fc_dtype_size(p->ab), es_out = fc_dtype_size(p->out);
    uint64_t bw = ptr->w | (uint64_t)k->stride_a * es_ab, bx = ptr->x | (uint64_t)k->stride_b * es_ab;
    uint64_t bc = ptr->c | (uint64_t)k->stride_d * es_out, bd = ptr->d | (uint64_t)k->stride_d * es_out;
    for (int d = 0; d < p->nouter; d++) {
        bw |= (uint64_t)p->outer_w[d] * es_ab;
        bx |= (uint64_t)p->outer_a[d] * es_ab;
        bc |= (uint64_t)p->outer_y[d] * es_out;
        bd |= (uint64_t)p->outer_y[d] * es_out;
    }
    k->align_a = alignment(bw);
    k->align_b = alignment(bx);
    k->align_c = alignment(bc);
    k->align_d = alignment(bd);
    k->align_bias = p->has_bias ? alignment(ptr->bias) : 0;
    k->workspace_bytes = (int64_t)ws_bytes;
}

static void make_key(bool allow_tf32, const fc_gemm_plan *p, const lt_ptrs *ptr, size_t ws_bytes,
                     fc_cublaslt_key *k) {
    make_key_ld(allow_tf32, p, ptr, ws_bytes, p->N, k);
}

void fc_cublaslt_key_of(const fc_gemm_plan *p, bool allow_tf32, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                        CUdeviceptr c, CUdeviceptr d, size_t ws_bytes, fc_cublaslt_key *k) {
    lt_ptrs ptr = {.x = x, .w = w, .bias = bias, .c = c, .d = d};
    make_key(allow_tf32, p, &ptr, ws_bytes, k);
}

fc_status fc_lt_make_layout(fc_context *ctx, cublasLtMatrixLayout_t *out, int64_t type, int64_t rows, int64_t cols,
                           int64_t ld, int64_t batch, int64_t stride) {
    FC_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutCreate(out, (cudaDataType_t)type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        FC_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                sizeof count));
        FC_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                &stride, sizeof stride));
    }
    return FC_OK;
}

/* The matmul and layout descriptors of key k into e (entry_free undoes a
 * partial one). */
static fc_status make_descriptors(fc_context *ctx, const fc_cublaslt_key *k, lt_entry *e) {
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulDescCreate(&e->op, (cublasComputeType_t)k->compute,
                                                    (cudaDataType_t)k->scale_type));
    int32_t op_a = (int32_t)k->op_a, op_b = (int32_t)k->op_b;
    uint32_t epi = (uint32_t)k->epilogue;
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    /* Stored shapes: op(A) is m x k, op(B) is k x n. */
    bool ta = k->op_a == CUBLAS_OP_T, tb = k->op_b == CUBLAS_OP_T;
    fc_status st = fc_lt_make_layout(ctx, &e->a, k->a_type, ta ? k->k : k->m, ta ? k->m : k->k, k->lda, k->batch, k->stride_a);
    if (st == FC_OK)
        st = fc_lt_make_layout(ctx, &e->b, k->b_type, tb ? k->n : k->k, tb ? k->k : k->n, k->ldb, k->batch, k->stride_b);
    if (st == FC_OK) st = fc_lt_make_layout(ctx, &e->c, k->d_type, k->m, k->n, k->ldd, k->batch, k->stride_d);
    if (st == FC_OK) st = fc_lt_make_layout(ctx, &e->d, k->d_type, k->m, k->n, k->ldd, k->batch, k->stride_d);
    return st;
}

static fc_status set_bias(fc_context *ctx, lt_entry *e, CUdeviceptr bias) {
    const void *p = (const void *)(uintptr_t)bias;
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
    return FC_OK;
}

static fc_status set_pref(fc_context *ctx, cublasLtMatmulPreference_t pref, const fc_cublaslt_key *k) {
    uint64_t ws = (uint64_t)k->workspace_bytes;
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_c, (uint32_t)k->align_d};
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                sizeof ws));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                &al[0], sizeof al[0]));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                &al[1], sizeof al[1]));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                &al[2], sizeof al[2]));
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                &al[3], sizeof al[3]));
    return FC_OK;
}

/* The heuristic's first `want` candidates into res (*count of them); the
 * first is e's algorithm. */
static fc_status heuristic(fc_cublaslt *h, fc_context *ctx, lt_entry *e, cublasLtMatmulPreference_t pref,
                           cublasLtMatmulHeuristicResult_t *res, int want, int *count) {
    memset(res, 0, sizeof *res * (size_t)want);
    *count = 0;
    h->queries++;
    atomic_fetch_add(&total_queries, 1);
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmulAlgoGetHeuristic(h->lt, e->op, e->a, e->b, e->c, e->d, pref, want, res, count));
    if (*count > 0) e->algo = res[0].algo;
    return FC_OK;
}

/* Defined with the records' code below. */
static void describe_key(const fc_cublaslt_key *k, char *buf, size_t n);

/* The heuristic's first `want` candidates for e's problem under its
 * preferences, into res (*count of them, at least 1 on FC_OK). */
static fc_status ask_heuristic(fc_cublaslt *h, fc_context *ctx, lt_entry *e, cublasLtMatmulHeuristicResult_t *res,
                               int want, int *count) {
    cublasLtMatmulPreference_t pref = NULL;
    fc_status st = FC_OK;
    *count = 0;
    cublasStatus_t cs = cublasLtMatmulPreferenceCreate(&pref);
    if (cs != CUBLAS_STATUS_SUCCESS) st = fc_cublaslt_fail(ctx, cs, "cublasLtMatmulPreferenceCreate(&pref)", __FILE__, __LINE__);
    if (st == FC_OK) st = set_pref(ctx, pref, &e->key);
    if (st == FC_OK) st = heuristic(h, ctx, e, pref, res, want, count);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st == FC_OK && *count == 0) {
        char what[512];
        describe_key(&e->key, what, sizeof what);
        st = fc_set_error(ctx, FC_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for this GEMM: %s", what);
    }
    return st;
}

/* ------------------------------------------------------------------ */
/* Choosing by timing (options.tune)                                    */
/* ------------------------------------------------------------------ */

#define TUNE_REPS 8   /* single launches per candidate and round */
#define TUNE_ROUNDS 3 /* timings per candidate, interleaved; the least counts */

static size_t type_bytes(int64_t t) {
    switch ((cudaDataType_t)t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    default: return 2;
    }
}

/* Bytes a column-major layout of `cols` columns spans, batches included. */
static size_t layout_bytes(int64_t type, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    return type_bytes(type) * (size_t)(ld * cols + (batch > 1 ? stride * (batch - 1) : 0));
}

static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

/* The least time of TUNE_REPS single launches of algo, each between two
 * events and waited for, in ms; < 0 when the library refuses it. Single
 * launches, not a loop of them: in a loop the next launch may overlap the
 * one before, which measures throughput, while a program's GEMM waits for
 * the kernel before it. Neither ranks the candidates as the program's
 * graph does at small sizes (docs/GEMM.md, "Choosing by timing"), hence
 * tune is off by default. */
static float time_algo(fc_cublaslt *h, fc_cuda_device *dev, fc_cuda_timer *t, lt_entry *e,
                       const cublasLtMatmulAlgo_t *algo, const void *alpha, const void *beta, CUdeviceptr a,
                       CUdeviceptr b, CUdeviceptr d, CUdeviceptr ws, size_t ws_bytes) {
    cudaStream_t s = (cudaStream_t)dev->stream;
    void *vd = (void *)(uintptr_t)d;
#define LT_CALL()                                                                                                     \
    cublasLtMatmul(h->lt, e->op, alpha, (const void *)(uintptr_t)a, e->a, (const void *)(uintptr_t)b, e->b, beta, vd, \
                   e->c, vd, e->d, algo, (void *)(uintptr_t)ws, ws_bytes, s)
    if (LT_CALL() != CUBLAS_STATUS_SUCCESS) return -1; /* a warm-up: a lazily loaded kernel's load */
    float least = -1;
    for (int r = 0; r < TUNE_REPS; r++) {
        float ms = -1;
        if (fc_cuda_timer_start(dev, t, dev->stream) != FC_OK || LT_CALL() != CUBLAS_STATUS_SUCCESS ||
            fc_cuda_timer_stop(dev, t, dev->stream, &ms) != FC_OK)
            return -1;
        if (least < 0 || ms < least) least = ms;
    }
#undef LT_CALL
    return least;
}

/* Keep the fastest of the heuristic's `count` candidates in e->algo, timed
 * on scratch buffers of the problem's sizes (zeros; C is D). Best effort:
 * on any failure e keeps the heuristic's first, and nothing is said on the
 * caller's context. Candidates are timed in TUNE_ROUNDS interleaved
 * rounds and each keeps its least time, so that other work on the device
 * meanwhile (a dynamic program's variant, beside a specialization built
 * in the background) does not pick for it. */
static void tune(fc_cublaslt *h, lt_entry *e, const cublasLtMatmulHeuristicResult_t *res, int count, bool residual) {
    fc_context *scratch = fc_context_new();
    if (!scratch) return;
    fc_cuda_device dev = fc_cuda_device_view(h->dev, scratch);
    const fc_cublaslt_key *k = &e->key;
    const bool ta = k->op_a == CUBLAS_OP_T, tb = k->op_b == CUBLAS_OP_T;
    const size_t ba = up256(layout_bytes(k->a_type, ta ? k->m : k->k, k->lda, k->batch, k->stride_a));
    const size_t bb = up256(layout_bytes(k->b_type, tb ? k->k : k->n, k->ldb, k->batch, k->stride_b));
    const size_t bd = up256(layout_bytes(k->d_type, k->n, k->ldd, k->batch, k->stride_d));
    const size_t bbias = up256((size_t)k->m * type_bytes(k->d_type)), ws_bytes = (size_t)k->workspace_bytes;
    const size_t total = ba + bb + bd + bbias + ws_bytes;
    /* Mapped, so that releasing it waits for nothing (a specialization's
     * tuning runs beside the caller's launches). */
    fc_cuda_region mem = {0};
    CUdeviceptr base = 0;
    bool mapped = fc_cuda_region_grow(&dev, &mem, total) == FC_OK;
    if (mapped) base = mem.base;
    else if (fc_cuda_alloc(&dev, total, &base) != FC_OK) base = 0;
    fc_cuda_timer t = {0};
    if (base && fc_cuda_memset_async(&dev, base, 0, total, dev.stream) == FC_OK &&
        fc_cuda_timer_create(&dev, &t) == FC_OK) {
        const CUdeviceptr a = base, b = a + ba, d = b + bb, bias = d + bd, ws = bias + bbias;
        const void *pb = (const void *)(uintptr_t)bias;
        bool ok = !k->align_bias || cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pb,
                                                                   sizeof pb) == CUBLAS_STATUS_SUCCESS;
        float one32 = 1.0f, beta32 = residual ? 1.0f : 0.0f;
        double one64 = 1.0, beta64 = residual ? 1.0 : 0.0;
        const bool f64 = k->scale_type == CUDA_R_64F;
        const void *alpha = f64 ? (const void *)&one64 : (const void *)&one32;
        const void *beta = f64 ? (const void *)&beta64 : (const void *)&beta32;
        float best[TUNE_CANDIDATES];
        for (int i = 0; i < count; i++) best[i] = -1;
        for (int r = 0; ok && r < TUNE_ROUNDS; r++)
            for (int i = 0; i < count; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws_bytes) continue;
                float ms = time_algo(h, &dev, &t, e, &res[i].algo, alpha, beta, a, b, d, ws, ws_bytes);
                if (ms > 0 && (best[i] < 0 || ms < best[i])) best[i] = ms;
            }
        int pick = -1;
        for (int i = 0; i < count; i++)
            if (best[i] > 0 && (pick < 0 || best[i] < best[pick])) pick = i;
        if (ok && pick >= 0) {
            e->algo = res[pick].algo;
            h->tuned++;
            h->tune_changed += pick != 0;
        }
    }
    fc_cuda_timer_destroy(&dev, &t);
    (void)fc_cuda_stream_sync(&dev, NULL);
    if (mapped) fc_cuda_region_free(&dev, &mem);
    else if (base) (void)fc_cuda_free(&dev, base);
    fc_context_free(scratch);
}

int fc_cublaslt_tuned(const fc_cublaslt *h, int *changed) {
    if (changed) *changed = h ? h->tune_changed : 0;
    return h ? h->tuned : 0;
}

/* "m=4096 n=8192 k=1024 bf16 -> bf16 epilogue 36 batch 1", for errors. */
static void describe_key(const fc_cublaslt_key *k, char *buf, size_t n) {
    snprintf(buf, n, "m=%lld n=%lld k=%lld (op %s%s) A/B type %lld, D type %lld, compute %lld, epilogue %lld, batch %lld, "
             "alignment %lld/%lld/%lld/%lld bytes",
             (long long)k->m, (long long)k->n, (long long)k->k, k->op_a == CUBLAS_OP_T ? "T" : "N",
             k->op_b == CUBLAS_OP_T ? "T" : "N", (long long)k->a_type, (long long)k->d_type, (long long)k->compute,
             (long long)k->epilogue, (long long)k->batch, (long long)k->align_a, (long long)k->align_b,
             (long long)k->align_c, (long long)k->align_d);
}


/* The cache the handle's algorithms go to: the options', else the
 * process's (NULL if it cannot be opened: then the handle works without). */
static fc_cache *algo_cache(const fc_cublaslt *h) {
    if (h->cache) return h->cache;
    fc_context scratch = {0};
    return fc_cache_global(&scratch);
}

/* Look e's problem up in the cache. True when an algorithm was found that
 * decodes and that the library accepts for e's descriptors (which prepare
 * has made, with the bias pointer set); e->algo holds it then. A record
 * that is not usable is removed, so that the heuristic's answer replaces
 * it. Cache trouble is a miss: the errors go to a scratch context, never
 * over the caller's message. */
static bool algo_from_cache(fc_cublaslt *h, lt_entry *e) {
    fc_cache *c = algo_cache(h);
    if (!c || fc_cache_mode_of(c) == FC_CACHE_OFF) return false;
    fc_context scratch = {0};
    fc_cache_key key = fc_lt_algo_cache_key(&e->key, &h->id, h->tune);
    void *data = NULL;
    size_t size = 0;
    if (fc_cache_get(c, &scratch, FC_CACHE_ALGO, &key, &data, &size) != FC_OK || !data) return false;
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES];
    char why[160];
    bool ok = fc_cublaslt_algo_record_decode(data, size, &e->key, &h->id, algo, why, sizeof why);
    fc_ctx_freemem(&scratch, data);
    if (!ok) {
        /* The cache's checksum held, so the bytes are what was written:
         * not a record of this problem. Counted as corrupt, as a program
         * entry that does not decode would be. */
        fc_cache_note_corrupt(c);
        (void)fc_cache_remove(c, &scratch, FC_CACHE_ALGO, &key);
        return false;
    }
    cublasLtMatmulAlgo_t a;
    memcpy(&a, algo, sizeof a);
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    cublasStatus_t cs = cublasLtMatmulAlgoCheck(h->lt, e->op, e->a, e->b, e->c, e->d, &a, &res);
    if (cs != CUBLAS_STATUS_SUCCESS || res.state != CUBLAS_STATUS_SUCCESS ||
        res.workspaceSize > (size_t)e->key.workspace_bytes) {
        /* The library refuses it: another version (the key holds the
         * version, so this is rare), or a record that lies. Not used. */
        (void)fc_cache_remove(c, &scratch, FC_CACHE_ALGO, &key);
        return false;
    }
    e->algo = a;
    return true;
}

/* Keep e's algorithm, just chosen by the heuristic, in the cache. A
 * failed write is not an error: the next process asks again. */
static void algo_to_cache(fc_cublaslt *h, const lt_entry *e) {
    fc_cache *c = algo_cache(h);
    if (!c || fc_cache_mode_of(c) == FC_CACHE_OFF) return;
    fc_context scratch = {0};
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES], rec[FC_CUBLASLT_ALGO_RECORD_BYTES];
    memcpy(algo, &e->algo, sizeof algo);
    fc_cublaslt_algo_record_encode(&e->key, &h->id, algo, rec);
    fc_cache_key key = fc_lt_algo_cache_key(&e->key, &h->id, h->tune);
    (void)fc_cache_put(c, &scratch, FC_CACHE_ALGO, &key, rec, sizeof rec);
}

/* A problem's family key: its key with the sizes (m, n, k, leading dims,
 * batch, strides) zeroed. */
static void family_key(const fc_cublaslt_key *k, fc_cublaslt_key *f) {
    *f = *k;
    f->m = f->n = f->k = f->lda = f->ldb = f->ldd = f->batch = f->stride_a = f->stride_b = f->stride_d = 0;
}

static lt_family *find_family(fc_cublaslt *h, const fc_cublaslt_key *key) {
    fc_cublaslt_key f;
    family_key(key, &f);
    for (int i = 0; i < h->nfamilies; i++)
        if (!memcmp(&h->families[i].key, &f, sizeof f)) return &h->families[i];
    return NULL;
}

/* Remember e's algorithm, just chosen for its sizes, in its family. Out of
 * memory only loses the reuse. */
static void family_add(fc_cublaslt *h, const lt_entry *e) {
    lt_family *f = find_family(h, &e->key);
    if (!f) {
        if (!fc_ctx_grow(h->ctx, (void **)&h->families, &h->cap_families, h->nfamilies + 1, sizeof *h->families))
            return;
        f = &h->families[h->nfamilies++];
        memset(f, 0, sizeof *f);
        family_key(&e->key, &f->key);
    }
    if (!fc_ctx_grow(h->ctx, (void **)&f->picks, &f->cap_picks, f->npicks + 1, sizeof *f->picks)) return;
    f->picks[f->npicks++] = (lt_pick){e->key.m, e->key.n, e->key.k, e->algo};
}

/* How far apart two sizes are: the largest ratio between them over m, n
 * and k, as a power of two (0: within 2x in every dim). */
static int size_distance(const lt_pick *p, const fc_cublaslt_key *k) {
    int64_t a[3] = {p->m, p->n, p->k}, b[3] = {k->m, k->n, k->k};
    int far = 0;
    for (int i = 0; i < 3; i++) {
        int64_t lo = a[i] < b[i] ? a[i] : b[i], hi = a[i] < b[i] ? b[i] : a[i];
        int d = 0;
        while (lo > 0 && lo * 2 <= hi) lo *= 2, d++;
        if (d > far) far = d;
    }
    return far;
}

/* Picks further than this (8x in some dim) are not reused: the heuristic
 * chooses for the new sizes, which then serve their own neighbourhood. A
 * handful of queries per family over sizes 1 to 1024, where reusing one
 * size's choice for all (say M = 1's for M = 1024) ran the dynamic GPT-2
 * block at T = 1024 2x slower (docs/PERF.md). */
#define FAMILY_REUSE_DISTANCE 3

/* The algorithm chosen for the nearest size of e's family, if it is near
 * enough and cuBLASLt accepts it for e's sizes (e's descriptors are made);
 * else the next nearest, once. */
static bool algo_from_family(fc_cublaslt *h, lt_entry *e) {
    const lt_family *f = find_family(h, &e->key);
    if (!f) return false;
    int tried = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        int best = -1, bestd = FAMILY_REUSE_DISTANCE + 1;
        for (int i = 0; i < f->npicks; i++) {
            int dd = size_distance(&f->picks[i], &e->key);
            if (i != tried && dd < bestd) best = i, bestd = dd;
        }
        if (best < 0) return false;
        tried = best;
        cublasLtMatmulHeuristicResult_t res;
        memset(&res, 0, sizeof res);
        cublasLtMatmulAlgo_t a = f->picks[best].algo;
        cublasStatus_t cs = cublasLtMatmulAlgoCheck(h->lt, e->op, e->a, e->b, e->c, e->d, &a, &res);
        if (cs == CUBLAS_STATUS_SUCCESS && res.state == CUBLAS_STATUS_SUCCESS &&
            res.workspaceSize <= (size_t)e->key.workspace_bytes) {
            e->algo = a;
            return true;
        }
    }
    return false;
}

int fc_cublaslt_family_reuses(const fc_cublaslt *h) { return h ? h->family_reuses : 0; }

/* Descriptors and an algorithm for entry e: a seeded algorithm is checked
 * first, then one from the cache; otherwise, or if the library refuses
 * them, one heuristic query, whose answer goes to the cache. */
static fc_status prepare(fc_cublaslt *h, fc_context *ctx, lt_entry *e, CUdeviceptr bias, bool residual) {
    fc_status st = make_descriptors(ctx, &e->key, e);
    if (st == FC_OK && e->key.align_bias) st = set_bias(ctx, e, bias); /* the heuristic reads its alignment */
    if (st != FC_OK) {
        entry_free(e);
        return st;
    }
    if (e->have_algo) {
        cublasLtMatmulHeuristicResult_t res;
        memset(&res, 0, sizeof res);
        cublasStatus_t cs = cublasLtMatmulAlgoCheck(h->lt, e->op, e->a, e->b, e->c, e->d, &e->algo, &res);
        if (cs == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= (size_t)e->key.workspace_bytes) {
            e->ready = true;
            return FC_OK;
        }
        e->have_algo = false; /* stale (another library version?): ask again */
    }
    if (h->reuse_family && algo_from_family(h, e)) {
        h->family_reuses++;
        e->have_algo = e->ready = true;
        return FC_OK;
    }
    if (algo_from_cache(h, e)) {
        h->disk_hits++;
        atomic_fetch_add(&total_disk_hits, 1);
        e->have_algo = e->ready = true;
        if (h->reuse_family) family_add(h, e);
        return FC_OK;
    }
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    int count = 0;
    st = ask_heuristic(h, ctx, e, res, h->tune ? TUNE_CANDIDATES : 1, &count);
    if (st == FC_OK && h->tune && count > 1) tune(h, e, res, count, residual);
    if (st != FC_OK) {
        entry_free(e);
        return st;
    }
    e->have_algo = e->ready = true;
    if (h->reuse_family) family_add(h, e);
    algo_to_cache(h, e);
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Running                                                              */
/* ------------------------------------------------------------------ */

static fc_status matmul_call(fc_cublaslt *h, fc_context *ctx, lt_entry *e, const void *alpha, const void *beta,
                             CUdeviceptr w, CUdeviceptr x, CUdeviceptr c, CUdeviceptr d, CUdeviceptr ws,
                             size_t ws_bytes, CUstream s) {
    FC_CUBLASLT_CHECK(ctx, cublasLtMatmul(h->lt, e->op, alpha, (const void *)(uintptr_t)w, e->a,
                                          (const void *)(uintptr_t)x, e->b, beta, (const void *)(uintptr_t)c, e->c,
                                          (void *)(uintptr_t)d, e->d, &e->algo, (void *)(uintptr_t)ws, ws_bytes,
                                          (cudaStream_t)s));
    return FC_OK;
}

/* One call of plan q at these pointers, its result of leading dimension
 * ldd (no bias, no outer loop: fc_cublaslt_interleave_of's sub-GEMMs). */
static fc_status call_once(fc_cublaslt *h, fc_context *ctx, const fc_gemm_plan *q, const lt_ptrs *ptr, int64_t ldd,
                           const void *alpha, const void *beta, CUdeviceptr ws, size_t ws_bytes, CUstream s) {
    fc_cublaslt_key key;
    make_key_ld(h->allow_tf32, q, ptr, ws_bytes, ldd, &key);
    lt_entry *e = find_entry(h, &key);
    if (!e && !(e = add_entry(h, ctx, &key))) return FC_ERR_NOMEM;
    fc_status st = e->ready ? FC_OK : prepare(h, ctx, e, 0, false);
    return st != FC_OK ? st : matmul_call(h, ctx, e, alpha, beta, ptr->w, ptr->x, ptr->d, ptr->d, ws, ws_bytes, s);
}

/* Columns [col, col + il->edge) of every row of the result, from a dense
 * [M, edge] block at src: one strided copy. */
static fc_status copy_edge(fc_cublaslt *h, fc_context *ctx, const fc_gemm_plan *p, const fc_cublaslt_interleave *il,
                           CUdeviceptr src, CUdeviceptr d, int64_t col, CUstream s) {
    const size_t eo = fc_dtype_size(p->out);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.srcPitch = (size_t)il->edge * eo;
    c.dstDevice = d + (size_t)col * eo;
    c.dstPitch = (size_t)p->N * eo;
    c.WidthInBytes = (size_t)il->edge * eo;
    c.Height = (size_t)p->M;
    FC_CU_CHECK(ctx, h->dev->cu->Memcpy2DAsync(&c, s));
    return FC_OK;
}

/* The result of p written in place by aligned GEMMs over interleaved rows
 * (cublaslt.h, fc_cublaslt_interleave_of): the two edges first (into the
 * workspace's start, then copied out), then the R interleaved GEMMs with
 * the whole workspace (queued after the copies on one stream). Where an
 * edge and an interleaved GEMM both write a column, both wrote the same
 * dot products. */
static fc_status run_interleaved(fc_cublaslt *h, fc_context *ctx, const fc_gemm_plan *p, const lt_ptrs *ptr,
                                 const fc_cublaslt_interleave *il, const void *alpha, const void *beta,
                                 CUdeviceptr ws, size_t ws_bytes, CUstream s) {
    const size_t es = fc_dtype_size(p->ab), eo = fc_dtype_size(p->out);
    const CUdeviceptr left = ws, right = ws + (size_t)(p->M * il->edge) * eo;
    const CUdeviceptr ws_edges = ws + il->scratch_bytes;
    const size_t ws_edges_bytes = ws_bytes - il->scratch_bytes;
    fc_gemm_plan q = *p;
    q.N = il->edge;
    lt_ptrs e = *ptr;
    fc_status st = FC_OK;
    for (int side = 0; side < 2 && st == FC_OK; side++) {
        const int64_t col = side ? p->N - il->edge : 0;
        e.w = ptr->w + (size_t)(col * p->ldw) * es;
        e.d = e.c = side ? right : left;
        st = call_once(h, ctx, &q, &e, il->edge, alpha, beta, ws_edges, ws_edges_bytes, s);
        if (st == FC_OK) st = copy_edge(h, ctx, p, il, e.d, ptr->d, col, s);
    }
    q.M = il->sub_m;
    q.lda = p->lda * il->rows;
    for (int j = 0; j < il->rows && st == FC_OK; j++) {
        q.N = il->cols[j];
        e.x = ptr->x + (size_t)(j * p->lda) * es;
        e.w = ptr->w + (size_t)(il->col0[j] * p->ldw) * es;
        e.d = e.c = ptr->d + (size_t)(j * p->N + il->col0[j]) * eo;
        st = call_once(h, ctx, &q, &e, p->N * il->rows, alpha, beta, ws, ws_bytes, s);
    }
    return st;
}

/* Run d with one pointer per operand (in the gemm's order) and the result. */
static fc_status run(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *in,
                     CUdeviceptr out, CUdeviceptr workspace, size_t ws_bytes, CUstream s) {
    const fc_gemm_plan *p = &d->plan;
    if (workspace % FC_CUBLASLT_WORKSPACE_ALIGN)
        return fc_set_error(ctx, FC_ERR_USAGE, "cuBLASLt: the workspace must be %d-byte aligned",
                            FC_CUBLASLT_WORKSPACE_ALIGN);
    if (!workspace) ws_bytes = 0;
    if (p->M == 0 || p->N == 0 || p->batch == 0 || fc_gemm_plan_calls(p) == 0) return FC_OK; /* nothing to write */
    bool epilogue = p->has_bias || p->has_residual || p->act != FC_GEMM_ACT_NONE;
    if (p->K == 0 && epilogue) /* the pad pass writes a static one as its epilogue over zeros */
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "a GEMM with K = 0 and an epilogue is not run by cuBLASLt");
    fc_status st = make_current(ctx, h->dev);
    if (st != FC_OK) return st;
    if (!s) s = h->dev->stream; /* NULL is the device's stream, as everywhere in runtime/cuda/cuda.h */
    if (p->K == 0) {
        /* An empty sum: zeros, over the whole (dense) result. */
        int64_t elems = p->M * p->N * p->batch * fc_gemm_plan_calls(p);
        FC_CU_CHECK(ctx, h->dev->cu->MemsetD8Async(out, 0, (size_t)elems * fc_dtype_size(p->out), s));
        return FC_OK;
    }

    lt_ptrs ptr = {.x = in[0], .w = in[1], .d = out};
    ptr.bias = p->has_bias ? in[1 + p->nweights] : 0;
    ptr.c = p->has_residual ? in[fc_gemm_plan_nops(p) - 1] : out;
    if (p->nweights > 1) {
        st = fc_lt_concatenated(h, ctx, d, in, s, &ptr.w, &ptr.bias);
        if (st != FC_OK) return st;
    }

    float alpha32 = (float)p->alpha, beta32 = p->has_residual ? 1.0f : 0.0f;
    double alpha64 = p->alpha, beta64 = p->has_residual ? 1.0 : 0.0;
    const void *alpha = p->ab == FC_F64 ? (const void *)&alpha64 : (const void *)&alpha32;
    const void *beta = p->ab == FC_F64 ? (const void *)&beta64 : (const void *)&beta32;
    size_t es = fc_dtype_size(p->ab), eo = fc_dtype_size(p->out);

    fc_cublaslt_interleave il;
    if (fc_cublaslt_interleave_of(p, ptr.x, ptr.w, ptr.d, ws_bytes, &il))
        return run_interleaved(h, ctx, p, &ptr, &il, alpha, beta, workspace, ws_bytes, s);

    fc_cublaslt_key key;
    make_key(h->allow_tf32, p, &ptr, ws_bytes, &key);
    lt_entry *e = find_entry(h, &key);
    if (!e && !(e = add_entry(h, ctx, &key))) return FC_ERR_NOMEM;
    if (!e->ready && (st = prepare(h, ctx, e, ptr.bias, p->has_residual)) != FC_OK) return st;
    if (p->has_bias && (st = set_bias(ctx, e, ptr.bias)) != FC_OK) return st;

    /* The outer batch dims: one call per index, offsets by their strides. */
    int64_t calls = fc_gemm_plan_calls(p);
    for (int64_t o = 0; o < calls; o++) {
        int64_t rest = o, oa = 0, ow = 0, oy = 0;
        for (int dd = p->nouter - 1; dd >= 0; dd--) {
            int64_t i = rest % p->outer_size[dd];
            rest /= p->outer_size[dd];
            oa += i * p->outer_a[dd];
            ow += i * p->outer_w[dd];
            oy += i * p->outer_y[dd];
        }
        st = matmul_call(h, ctx, e, alpha, beta, ptr.w + (size_t)ow * es, ptr.x + (size_t)oa * es,
                         ptr.c + (size_t)oy * eo, ptr.d + (size_t)oy * eo, workspace, ws_bytes, s);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

/* The operands' pointers (d's positions in the launch's arguments) into
 * *in: `small` when 16 do, else an allocation (release with
 * release_operands). The positions were checked when the description was
 * made or read (fc_gemm_desc_valid); a caller of its own may still pass too
 * few arguments. */
static fc_status gather_operands(fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *args, int nargs,
                                 CUdeviceptr small[16], CUdeviceptr **in) {
    *in = small;
    if (!d || !d->op_arg || !d->wcols || nargs < 0 || (nargs > 0 && !args))
        return fc_set_error(ctx, FC_ERR_USAGE, "cuBLASLt: no GEMM description or no launch arguments");
    int nops = fc_gemm_plan_nops(&d->plan);
    bool in_range = d->out_arg >= 0 && d->out_arg < nargs;
    for (int k = 0; k < nops; k++) in_range = in_range && d->op_arg[k] >= 0 && d->op_arg[k] < nargs;
    if (!in_range)
        return fc_set_error(ctx, FC_ERR_USAGE, "cuBLASLt: the GEMM's operands are not among the %d launch arguments",
                            nargs);
    if (nops > 16 && !(*in = fc_ctx_malloc(ctx, sizeof **in * (size_t)nops))) return FC_ERR_NOMEM;
    for (int k = 0; k < nops; k++) (*in)[k] = args[d->op_arg[k]];
    return FC_OK;
}

static void release_operands(fc_context *ctx, CUdeviceptr *in, const CUdeviceptr *small) {
    if (in != small) fc_ctx_freemem(ctx, in);
}

fc_status fc_cublaslt_refresh_weights(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *args,
                                      int nargs, CUstream s) {
    if (!h || !d) return FC_ERR_USAGE;
    if (d->plan.nweights <= 1) return FC_OK;
    CUdeviceptr small[16], *in = small, w = 0, bias = 0;
    fc_status st = gather_operands(ctx, d, args, nargs, small, &in);
    if (st == FC_OK) st = make_current(ctx, h->dev);
    if (st == FC_OK) st = fc_lt_concatenated(h, ctx, d, in, s ? s : h->dev->stream, &w, &bias);
    release_operands(ctx, in, small);
    return st;
}

fc_status fc_cublaslt_warm(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, size_t ws_bytes) {
    if (!h || !d) return FC_ERR_USAGE;
    const fc_gemm_plan *p = &d->plan;
    if (p->M == 0 || p->N == 0 || p->batch == 0 || p->K == 0 || fc_gemm_plan_calls(p) == 0) return FC_OK;
    /* Addresses as cuMemAlloc and the arena give them: 256-aligned (the key
     * records the alignments; a run at other alignments prepares its own). */
    const CUdeviceptr aligned = 256;
    lt_ptrs ptr = {.x = aligned, .w = aligned, .d = aligned, .c = aligned, .bias = p->has_bias ? aligned : 0};
    /* Written in place over interleaved rows: its calls are other
     * problems, prepared at the first run. */
    fc_cublaslt_interleave il;
    if (fc_cublaslt_interleave_of(p, aligned, aligned, aligned, ws_bytes, &il)) return FC_OK;
    fc_cublaslt_key key;
    make_key(h->allow_tf32, p, &ptr, ws_bytes, &key);
    fc_status st = make_current(ctx, h->dev);
    if (st != FC_OK) return st;
    lt_entry *e = find_entry(h, &key);
    if (!e && !(e = add_entry(h, ctx, &key))) return FC_ERR_NOMEM;
    return e->ready ? FC_OK : prepare(h, ctx, e, ptr.bias, p->has_residual);
}

fc_status fc_cublaslt_launch(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *args,
                             int nargs, CUdeviceptr workspace, size_t ws_bytes, CUstream s) {
    if (!h) return fc_set_error(ctx, FC_ERR_USAGE, "cuBLASLt: no handle (fc_cublaslt_create failed or was not called)");
    CUdeviceptr small[16], *in = small;
    fc_status st = gather_operands(ctx, d, args, nargs, small, &in);
    if (st == FC_OK) st = run(h, ctx, d, in, args[d->out_arg], workspace, ws_bytes, s);
    release_operands(ctx, in, small);
    return st;
}

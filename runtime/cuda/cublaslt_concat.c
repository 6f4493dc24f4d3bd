/* cublaslt_concat.c - the concatenated weights of horizontally fused GEMMs, per cuBLASLt handle (cublaslt.h). */
#include "runtime/cuda/cublaslt_impl.h"

#include <stdlib.h>
#include <string.h>

/* What a concatenation is kept under: the GEMM it serves (fc_gemm_desc.share). */
static const void *concat_key(const fc_gemm_desc *d) { return d->share ? d->share : (const void *)d; }

/* Free what a concatenation holds (its slot stays, for the same address). */
void fc_lt_concat_clear(fc_cublaslt *h, lt_concat *c) {
    if (c->w && !c->mapped) (void)h->dev->cu->MemFree(c->w);
    if (c->bias && !c->mapped) (void)h->dev->cu->MemFree(c->bias);
    fc_ctx_freemem(h->ctx, c->src);
    fc_ctx_freemem(h->ctx, c->wcols);
    const void *key = c->key;
    memset(c, 0, sizeof *c);
    c->key = key;
}

/* ------------------------------------------------------------------ */
/* Concatenated weights                                                 */
/* ------------------------------------------------------------------ */

/* Copy `rows` rows of `bytes` bytes from a packed source into a buffer of
 * pitch `dst_pitch` (the slow path of the column block copy, one driver
 * call per row: taken only when cublasLtMatrixTransform refuses a type). */
static fc_status copy_rows(fc_context *ctx, const fc_cuda_driver *cu, CUdeviceptr dst, size_t dst_pitch,
                           CUdeviceptr src, size_t bytes, int64_t rows, CUstream s) {
    for (int64_t r = 0; r < rows; r++)
        FC_CU_CHECK(ctx, cu->MemcpyDtoDAsync(dst + (size_t)r * dst_pitch, src + (size_t)r * bytes, bytes, s));
    return FC_OK;
}

static fc_status transform_desc(fc_context *ctx, cublasLtMatrixTransformDesc_t *td) {
    FC_CUBLASLT_CHECK(ctx, cublasLtMatrixTransformDescCreate(td, CUDA_R_32F));
    return FC_OK;
}

/* Weight i ([K, Ni] row-major) into columns [off, off + Ni) of the
 * concatenation ([K, N] row-major). In cuBLASLt's column-major terms this is
 * an Ni x K block copied from ld Ni to ld N: one cublasLtMatrixTransform
 * (C = 1 * A). */
static fc_status copy_column_block(fc_cublaslt *h, fc_context *ctx, fc_dtype dt, CUdeviceptr dst, CUdeviceptr src,
                                   int64_t Ni, int64_t K, int64_t N, CUstream s) {
    size_t es = fc_dtype_size(dt);
    cublasLtMatrixTransformDesc_t td = NULL;
    cublasLtMatrixLayout_t la = NULL, lc = NULL;
    fc_status st = transform_desc(ctx, &td);
    if (st == FC_OK) st = fc_lt_make_layout(ctx, &la, fc_lt_cuda_type(dt), Ni, K, Ni, 1, 0);
    if (st == FC_OK) st = fc_lt_make_layout(ctx, &lc, fc_lt_cuda_type(dt), Ni, K, N, 1, 0);
    cublasStatus_t cs = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == FC_OK) {
        float one = 1.0f, zero = 0.0f;
        cs = cublasLtMatrixTransform(h->lt, td, &one, (const void *)(uintptr_t)src, la, &zero, NULL, NULL,
                                     (void *)(uintptr_t)dst, lc, (cudaStream_t)s);
    }
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (td) cublasLtMatrixTransformDescDestroy(td);
    if (st != FC_OK || cs == CUBLAS_STATUS_SUCCESS) return st;
    if (cs != CUBLAS_STATUS_NOT_SUPPORTED && cs != CUBLAS_STATUS_INVALID_VALUE && cs != CUBLAS_STATUS_ARCH_MISMATCH)
        return fc_cublaslt_fail(ctx, cs, "cublasLtMatrixTransform(...) (weight concatenation)", __FILE__, __LINE__);
    return copy_rows(ctx, h->dev->cu, dst, (size_t)N * es, src, (size_t)Ni * es, K, s);
}

/* Whether c's buffers were made for d's layout. */
static bool same_layout(const lt_concat *c, const fc_gemm_desc *d) {
    const fc_gemm_plan *p = &d->plan;
    return c->wcols && c->ab == p->ab && c->out == p->out && c->trans_b == p->trans_b &&
           c->has_bias == p->has_bias && c->K == p->K && c->nweights == p->nweights &&
           !memcmp(c->wcols, d->wcols, sizeof *c->wcols * (size_t)p->nweights);
}

/* (Re)make c's buffers for d's layout; they hold no data yet. */
static fc_status concat_make(fc_cublaslt *h, fc_context *ctx, lt_concat *c, const fc_gemm_desc *d) {
    const fc_gemm_plan *p = &d->plan;
    fc_lt_concat_clear(h, c);
    c->nsrc = p->nweights * (p->has_bias ? 2 : 1); /* the weights, then the biases: operands 1 .. nsrc */
    c->src = fc_ctx_malloc(ctx, sizeof *c->src * (size_t)c->nsrc);
    int64_t *wcols = fc_ctx_malloc(ctx, sizeof *wcols * (size_t)p->nweights);
    if (!c->src || !wcols) {
        fc_ctx_freemem(ctx, wcols);
        fc_lt_concat_clear(h, c);
        return FC_ERR_NOMEM;
    }
    const size_t wbytes = (size_t)(p->K * p->N) * fc_dtype_size(p->ab), bbytes = (size_t)p->N * fc_dtype_size(p->out);
    fc_status st = FC_ERR_UNSUPPORTED;
    if (h->mapped) {
        /* Taken from the handle's region, never freed on their own: a
         * handle's layouts do not change, so a concatenation is made once. */
        c->mapped = true;
        st = fc_cuda_region_take(h->dev, &h->mem, wbytes, &c->w);
        if (st == FC_OK && p->has_bias) st = fc_cuda_region_take(h->dev, &h->mem, bbytes, &c->bias);
        if (st == FC_ERR_UNSUPPORTED) {
            /* No virtual memory management (nothing was taken): allocate. */
            c->mapped = h->mapped = false;
            c->w = c->bias = 0;
        }
    }
    if (st == FC_ERR_UNSUPPORTED) {
        st = fc_cuda_alloc(h->dev, wbytes, &c->w);
        if (st == FC_OK && p->has_bias) st = fc_cuda_alloc(h->dev, bbytes, &c->bias);
    }
    if (st != FC_OK) {
        fc_ctx_freemem(ctx, wcols);
        fc_lt_concat_clear(h, c);
        return st;
    }
    /* Set last: a concatenation with wcols is complete (same_layout). */
    memcpy(wcols, d->wcols, sizeof *wcols * (size_t)p->nweights);
    c->wcols = wcols;
    c->ab = p->ab;
    c->out = p->out;
    c->trans_b = p->trans_b;
    c->has_bias = p->has_bias;
    c->K = p->K;
    c->nweights = p->nweights;
    return FC_OK;
}

static lt_concat *find_concat(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d) {
    const void *key = concat_key(d);
    for (int i = 0; i < h->nconcats; i++)
        if (h->concats[i].key == key) return &h->concats[i];
    if (h->nconcats == h->cap_concats) {
        int cap = h->cap_concats ? 2 * h->cap_concats : 4;
        lt_concat *c = fc_ctx_realloc(ctx, h->concats, sizeof *c * (size_t)cap);
        if (!c) return NULL;
        h->concats = c;
        h->cap_concats = cap;
    }
    lt_concat *c = &h->concats[h->nconcats++];
    memset(c, 0, sizeof *c);
    c->key = key;
    return c;
}

void fc_cublaslt_forget(fc_cublaslt *h, const fc_gemm_desc *d) {
    for (int i = 0; h && d && !d->share && i < h->nconcats; i++)
        if (h->concats[i].key == d) fc_lt_concat_clear(h, &h->concats[i]);
}

/* The concatenated weight (and bias) of a horizontally fused gemm: built on
 * the first run, and again only if a weight comes at another address. The
 * copies are queued on s, before the GEMM that reads them. */
fc_status fc_lt_concatenated(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *in,
                              CUstream s, CUdeviceptr *w, CUdeviceptr *bias) {
    const fc_gemm_plan *p = &d->plan;
    lt_concat *c = find_concat(h, ctx, d);
    if (!c) return FC_ERR_NOMEM;
    fc_status st = FC_OK;
    if (!same_layout(c, d) && (st = concat_make(h, ctx, c, d)) != FC_OK) return st;
    *w = c->w;
    *bias = c->bias;
    if (c->valid && !memcmp(c->src, in + 1, sizeof *c->src * (size_t)c->nsrc)) return FC_OK;

    c->valid = false;
    const fc_cuda_driver *cu = h->dev->cu;
    size_t es = fc_dtype_size(p->ab), eo = fc_dtype_size(p->out);
    int64_t off = 0;
    for (int i = 0; i < p->nweights && st == FC_OK; i++) {
        int64_t Ni = d->wcols[i];
        if (p->trans_b) {
            /* [Ni, K] blocks stacked: [N, K]. */
            size_t bytes = (size_t)(Ni * p->K) * es;
            CUresult r = cu->MemcpyDtoDAsync(c->w + (size_t)(off * p->K) * es, in[1 + i], bytes, s);
            if (r != CUDA_SUCCESS) st = fc_cu_fail(ctx, r, "MemcpyDtoDAsync(weight block)", __FILE__, __LINE__);
        } else {
            st = copy_column_block(h, ctx, p->ab, c->w + (size_t)off * es, in[1 + i], Ni, p->K, p->N, s);
        }
        if (st == FC_OK && p->has_bias) {
            CUresult r = cu->MemcpyDtoDAsync(c->bias + (size_t)off * eo, in[1 + p->nweights + i], (size_t)Ni * eo, s);
            if (r != CUDA_SUCCESS) st = fc_cu_fail(ctx, r, "MemcpyDtoDAsync(bias block)", __FILE__, __LINE__);
        }
        off += Ni;
    }
    if (st != FC_OK) return st;
    memcpy(c->src, in + 1, sizeof *c->src * (size_t)c->nsrc);
    c->valid = true;
    return FC_OK;
}

bool fc_cublaslt_same_handle(const fc_cublaslt *a, const fc_cublaslt *b) { return a && b && a->lt == b->lt; }

bool fc_cublaslt_concats_mapped(const fc_cublaslt *h) {
    bool all = h && h->nconcats > 0;
    for (int i = 0; all && i < h->nconcats; i++) all = h->concats[i].mapped;
    return all;
}

int fc_cublaslt_num_concats(const fc_cublaslt *h) {
    int n = 0;
    for (int i = 0; h && i < h->nconcats; i++) n += h->concats[i].wcols != NULL;
    return n;
}

void fc_cublaslt_weights_changed(fc_cublaslt *h) {
    for (int i = 0; h && i < h->nconcats; i++) h->concats[i].valid = false;
}

bool fc_cublaslt_weights_stale(const fc_cublaslt *h) {
    for (int i = 0; h && i < h->nconcats; i++)
        if (h->concats[i].wcols && !h->concats[i].valid) return true;
    return false;
}


/* cublaslt_interleave.c - how an unaligned result is written in place by aligned GEMMs over interleaved rows (cublaslt.h, fc_cublaslt_interleave_of; cublaslt.c runs it). */
#include "runtime/cuda/cublaslt_impl.h"

#include <string.h>

bool fc_cublaslt_interleave_of(const fc_gemm_plan *p, CUdeviceptr x, CUdeviceptr w, CUdeviceptr d, size_t ws_bytes,
                               fc_cublaslt_interleave *out) {
    memset(out, 0, sizeof *out);
    if (p->batch > 1 || p->nouter > 0 || p->trans_a || !p->trans_b || p->has_bias || p->has_residual) return false;
    if (p->M <= 0 || p->N <= 0 || p->K <= 0) return false;
    const int64_t es = (int64_t)fc_dtype_size(p->ab), eo = (int64_t)fc_dtype_size(p->out);
    const int64_t row_bytes = p->N * eo;
    if (row_bytes % 16 == 0 || eo > 16 || 16 % eo) return false; /* aligned already */
    int64_t R = 1;
    while ((R * row_bytes) % 16) R *= 2; /* the fewest rows apart that start aligned: 16 at most */
    const int64_t g = 16 / eo;
    if (R > 16 || p->M % R || p->M / R < FC_CUBLASLT_INTERLEAVE_MIN_ROWS || p->N < 2 * g) return false;
    if ((p->lda * es) % 16 || (p->ldw * es) % 16 || x % 16 || w % 16 || d % 16) return false;
    const size_t scratch = (size_t)((2 * p->M * g * eo + 255) / 256 * 256);
    if (ws_bytes < scratch) return false;
    out->rows = (int)R;
    out->sub_m = p->M / R;
    out->edge = g;
    out->scratch_bytes = scratch;
    for (int64_t j = 0; j < R; j++) {
        /* Row j starts at element j N; c_j more makes it a multiple of g,
         * and so is every R-th row's after it (R N is a multiple of g). */
        out->col0[j] = (g - (j * p->N) % g) % g;
        out->cols[j] = (p->N - out->col0[j]) / g * g;
    }
    return true;
}

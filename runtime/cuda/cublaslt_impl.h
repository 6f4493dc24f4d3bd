/*
 * cublaslt_impl.h - the cuBLASLt handle's layout, shared by its files
 * (internal to runtime/cuda/cublaslt*.c): cublaslt.c (the handle, keys,
 * algorithms and running), cublaslt_concat.c (fused siblings'
 * concatenated weights), cublaslt_record.c (algorithm records on disk).
 */
#ifndef FC_RUNTIME_CUBLASLT_IMPL_H
#define FC_RUNTIME_CUBLASLT_IMPL_H

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_check.h"

#include <cublasLt.h>

/* One problem: its key, the algorithm, and the descriptors made for it
 * (kept, so that a run costs a table lookup and the matmul call). */
typedef struct lt_entry {
    fc_cublaslt_key key;
    cublasLtMatmulAlgo_t algo;
    bool have_algo; /* from the heuristic, or from a cache (then checked) */
    bool ready;     /* descriptors made and the algorithm usable */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c, d;
} lt_entry;

/* A family of problems (reuse_family): the same types, transposes,
 * epilogue and alignments at other sizes, and the algorithms chosen for it
 * (by the heuristic or from the disk), each with the sizes it was chosen
 * for. */
typedef struct lt_pick {
    int64_t m, n, k;
    cublasLtMatmulAlgo_t algo;
} lt_pick;

typedef struct lt_family {
    fc_cublaslt_key key; /* sizes, leading dims and strides zeroed */
    lt_pick *picks;
    int npicks, cap_picks;
} lt_family;

/* The concatenated weights (and biases) of one horizontally fused gemm,
 * kept under its description's address, or under the GEMM the description
 * is a shape of (fc_gemm_desc.share). The layout fields record what the
 * buffers were made for: a description of another layout at the same
 * address (a test reusing stack memory) gets new ones. */
typedef struct lt_concat {
    const void *key;
    fc_dtype ab, out;
    bool trans_b, has_bias;
    int64_t K;
    int nweights;
    int64_t *wcols;   /* a copy of desc->wcols; NULL: nothing made yet */
    CUdeviceptr *src; /* the weights', then the biases', pointers last copied */
    int nsrc;
    bool valid;       /* the buffers hold the data of src */
    CUdeviceptr w, bias;
    bool mapped;      /* w and bias are the handle's region's (freed with it) */
} lt_concat;

struct fc_cublaslt {
    fc_context *ctx; /* the device's, for allocations */
    fc_cuda_device *dev;
    cublasLtHandle_t lt;
    bool lt_borrowed;    /* lt is the options' share's */
    bool tune;           /* options.tune */
    int tuned, tune_changed;
    bool mapped;         /* the concatenations are taken from mem */
    fc_cuda_region mem;  /* mapped: the concatenations' memory */
    bool allow_tf32;
    fc_cache *cache;          /* the options' cache; NULL: the process's, looked up at each use */
    fc_cublaslt_device_id id; /* what an algorithm from the disk must have been chosen for */
    lt_entry **entries;
    int nentries, cap_entries;
    int *index;        /* open addressing: entry positions, -1 free */
    size_t index_cap;  /* a power of two, or 0 */
    lt_concat *concats;
    int nconcats, cap_concats;
    int queries, disk_hits;
    bool reuse_family;
    int family_reuses;
    lt_family *families; /* reuse_family: the algorithms chosen per family */
    int nfamilies, cap_families;
};

/* cublaslt.c */
cudaDataType_t fc_lt_cuda_type(fc_dtype dt);
/* A column-major layout of rows x cols (leading dim ld), batched. */
fc_status fc_lt_make_layout(fc_context *ctx, cublasLtMatrixLayout_t *out, int64_t type, int64_t rows, int64_t cols,
                           int64_t ld, int64_t batch, int64_t stride);

/* cublaslt_record.c */
/* The on-disk cache's key of an algorithm for problem k on device dev
 * (tuned: chosen by timing, kept apart from the heuristic's). */
fc_cache_key fc_lt_algo_cache_key(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev, bool tuned);

/* cublaslt_concat.c */
/* Free what a concatenation holds (its slot stays, for the same address). */
void fc_lt_concat_clear(fc_cublaslt *h, lt_concat *c);
/* Fused siblings' weights (operands in, in the gemm's order) as one
 * concatenated weight *w and bias *bias, made or copied again on stream s
 * when needed. */
fc_status fc_lt_concatenated(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *in,
                             CUstream s, CUdeviceptr *w, CUdeviceptr *bias);

#endif

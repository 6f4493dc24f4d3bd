/*
 * cublaslt.h - GEMMs through cuBLASLt: the library side of the plan's
 * library launches (internal header).
 *
 * A `gemm` node (passes/epilogue.c) or a plain `matmul` node runs as one
 * cuBLASLt matmul, or as a short loop of them when its batch dims cannot be
 * expressed as one strided batch. Row-major tensors are multiplied with the
 * column-major trick: cuBLASLt computes Y^T = W^T X^T, which is Y in
 * row-major order, so D stays column-ordered and the epilogues (bias, relu,
 * gelu, the residual as C with beta = 1) all apply. docs/GEMM.md has the
 * mapping in full.
 *
 * The GEMM's description (fc_gemm_desc, lower/gemm_desc.h) is plain
 * data made before the backend runs; a handle here runs a description
 * with the launch's pointers.
 *
 * Everything here needs a GPU at run time except fc_cublaslt_key_of and
 * fc_cublaslt_version. Without a driver or device every entry point
 * fails cleanly with an fc_status and a message on the context; nothing
 * prints or exits.
 *
 * A handle is used by one thread at a time (as an fc_context is) and keeps,
 * for the life of the program that owns it:
 *  - the algorithm chosen for each problem (cublasLtMatmulAlgoGetHeuristic
 *    costs about 100 us, so it runs once per problem, not once per call),
 *    also kept in the on-disk cache (level FC_CACHE_ALGO) so that a new
 *    process asks the heuristic only about problems never seen on this
 *    device and library (see "The on-disk algorithm cache" below);
 *  - the concatenated weights of horizontally fused gemms, built on their
 *    first run (the user guarantees the weights do not change between runs;
 *    a weight passed at a new address is copied again).
 */
#ifndef FC_RUNTIME_CUBLASLT_H
#define FC_RUNTIME_CUBLASLT_H

#include "cache/cache.h"
#include "lower/gemm_desc.h"
#include "runtime/cuda/cuda.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The workspace cuBLASLt may use: 32 MiB on Hopper (NVIDIA's advice for
 * sm_90), 256-byte aligned. The caller owns it and allocates it once:
 * runtime/cuda/program_*.c puts it at the end of the program's arena. Never per
 * run. */
#define FC_CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)
#define FC_CUBLASLT_WORKSPACE_ALIGN 256

/* ------------------------------------------------------------------ */
/* The handle and running                                               */
/* ------------------------------------------------------------------ */

typedef struct fc_cublaslt fc_cublaslt;

typedef struct fc_cublaslt_options {
    /* f32 GEMMs on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32): about
     * 10 bits of mantissa per product, so off by default; f16/bf16 always
     * accumulate in f32. */
    bool allow_tf32;
    /* Where chosen algorithms are kept between processes (level
     * FC_CACHE_ALGO). NULL: the process's cache, the one fc_compile uses
     * (fc_cache_global), looked up at each use, so fc_cache_global_close
     * between runs is safe. A cache opened with mode FC_CACHE_OFF keeps
     * them in the handle only. A cache given here must outlive the handle. */
    fc_cache *cache;
    /* For a handle that sees one GEMM at many sizes (a dynamic program's
     * variant, which meets every new sequence length at a run): a problem
     * never seen takes the algorithm chosen for the nearest size of its
     * family (the same types, transposes, epilogue and alignments; other
     * sizes), if that size is within 8x in m, n and k and
     * cublasLtMatmulAlgoCheck accepts it (else the next nearest), instead
     * of a heuristic query (~100-170 us) and the first launch of another
     * cuBLASLt kernel (its lazy load: up to ~15 ms). Off by default: the
     * heuristic's choice for the exact sizes is the faster one to keep. */
    bool reuse_family;
    /* For the many short-lived handles of one owner (a dynamic program's
     * specializations, made and freed by its background thread while the
     * caller's thread launches): `share` (not NULL) lends its cuBLASLt
     * handle, which this one uses and does not destroy (cuBLASLt calls
     * are thread-safe on one handle; `share` must outlive this one), and
     * `mapped` puts the concatenated weights in mapped memory
     * (fc_cuda_region_take), whose release never waits for the device.
     * cublasLtCreate and cuMemFree in another thread stall a caller's
     * launches (docs/DYNAMIC.md). */
    const struct fc_cublaslt *share;
    bool mapped;
    /* Choose each new problem's algorithm by timing the heuristic's first
     * candidates (up to 8), each launched alone on scratch buffers of the
     * problem's sizes, instead of taking its first. About 1-20 ms per
     * problem, once: the choice goes to the disk cache, under a key of its
     * own. Programs set it only with FUSEC_GEMM_TUNE=1: measured in the
     * GPT-2 block's graph on the H200, the timed choices were 18-26%
     * slower at T = 64 and 1-2% faster at B = 8, T = 1024 (docs/GEMM.md,
     * "Choosing by timing"). */
    bool tune;
} fc_cublaslt_options;

/*
 * Create a handle for device `dev` (an open fc_cuda_device: cuBLASLt works
 * in its primary context). `o` may be NULL (the defaults). Without a device
 * (dev NULL) this fails with FC_ERR_RUNTIME and the driver's reason ("no
 * CUDA driver: ..." or "no CUDA device: ...") on ctx. *out is NULL on
 * failure. The device must outlive the handle.
 */
fc_status fc_cublaslt_create(fc_context *ctx, fc_cuda_device *dev, const fc_cublaslt_options *o, fc_cublaslt **out);
/* Free the handle, its descriptors and its concatenated weights. The work
 * queued with it must be finished (free after a sync). NULL is ignored. */
void fc_cublaslt_destroy(fc_cublaslt *h);

/*
 * Queue the GEMM d on stream s (NULL: the device's stream, as in
 * runtime/cuda/cuda.h; CU_STREAM_LEGACY for the legacy one). args[i] is the
 * device pointer of the launch's argument i, which d's positions index.
 * `workspace` holds ws_bytes bytes and is FC_CUBLASLT_WORKSPACE_ALIGN
 * aligned (FC_CUBLASLT_WORKSPACE_BYTES; 0 and 0 work, with fewer
 * algorithms). Returns when the work is queued.
 *
 * The handle keeps the concatenated weights of a horizontally fused GEMM
 * under d's address, so d must stay where it is while the handle runs it
 * (a program's descriptions do, for the program's life), or be forgotten
 * (fc_cublaslt_forget) before it is freed or reused. A description of
 * other shapes at a remembered address gets new buffers, never the old
 * ones.
 *
 * Errors: FC_ERR_USAGE (no handle, bad arguments), FC_ERR_UNSUPPORTED (K =
 * 0, or a problem cuBLASLt has no algorithm for), FC_ERR_RUNTIME (CUDA or
 * cuBLASLt failed), FC_ERR_NOMEM.
 */
fc_status fc_cublaslt_launch(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *args,
                             int nargs, CUdeviceptr workspace, size_t ws_bytes, CUstream s);
/*
 * Choose d's algorithm now (descriptors, then the disk cache or one
 * heuristic query), as its first launch with 256-aligned pointers and a
 * ws_bytes workspace would, without launching anything. A dynamic
 * program's background thread warms a specialization this way, so that its
 * first run on the caller's thread asks cuBLASLt nothing.
 */
fc_status fc_cublaslt_warm(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, size_t ws_bytes);
/*
 * For a GEMM of fused siblings: bring the concatenated weights (and biases)
 * up to date with the weights at these addresses now, queued on stream s,
 * as the launch would. CUDA Graph replay calls this before it captures the
 * GEMM, so that the capture holds only the matmul: weights that move are
 * copied once, not at every replay. FC_OK at once for other GEMMs.
 */
fc_status fc_cublaslt_refresh_weights(fc_cublaslt *h, fc_context *ctx, const fc_gemm_desc *d, const CUdeviceptr *args,
                                      int nargs, CUstream s);

/* How many concatenations of fused siblings' weights the handle holds. */
int fc_cublaslt_num_concats(const fc_cublaslt *h);
/* How many problems h chose an algorithm for by timing (options.tune), and
 * how many of those chose another than the heuristic's first. */
int fc_cublaslt_tuned(const fc_cublaslt *h, int *changed);
/* Whether a and b use one cuBLASLt handle (fc_cublaslt_options.share), and
 * whether h's concatenations are in mapped memory (.mapped; tests). */
bool fc_cublaslt_same_handle(const fc_cublaslt *a, const fc_cublaslt *b);
bool fc_cublaslt_concats_mapped(const fc_cublaslt *h);
/* New values were written into weights in place: every concatenation is
 * stale, and is copied again at its next launch or refresh. */
void fc_cublaslt_weights_changed(fc_cublaslt *h);
/* Whether some concatenation is stale (a replayed graph, which launches no
 * copies of its own, must refresh its GEMMs' weights first). */
bool fc_cublaslt_weights_stale(const fc_cublaslt *h);

/* Drop what the handle keeps for description d (its concatenated
 * weights), once the work that used them is finished. NULLs are ignored,
 * and so is a shared description (d->share): its concatenation serves
 * other descriptions and lives as long as the handle. */
void fc_cublaslt_forget(fc_cublaslt *h, const fc_gemm_desc *d);

/* ------------------------------------------------------------------ */
/* The algorithm table                                                  */
/* ------------------------------------------------------------------ */

/*
 * One problem as cuBLASLt sees it (its A is the weight, its B the left
 * operand: see the top of the file). Every field is int64 so the struct has
 * no padding and can be hashed and compared as bytes. A disk cache must
 * also key on the device (name, compute capability) and on
 * fc_cublaslt_version(): an algorithm is only valid for those.
 */
#define FC_CUBLASLT_KEY_VERSION 1
typedef struct fc_cublaslt_key {
    int64_t version; /* FC_CUBLASLT_KEY_VERSION */
    int64_t a_type, b_type, d_type, compute, scale_type; /* cudaDataType / cublasComputeType_t */
    int64_t op_a, op_b, epilogue;                      /* cublasOperation_t, cublasLtEpilogue_t */
    int64_t m, n, k, lda, ldb, ldd;
    int64_t batch, stride_a, stride_b, stride_d;
    int64_t align_a, align_b, align_c, align_d, align_bias; /* bytes, powers of two up to 256 */
    int64_t workspace_bytes;
} fc_cublaslt_key;

/* The key of plan p's problem for the pointers of one call: x the left
 * operand, w the (concatenated) weight, c the residual (or d), d the
 * result. No GPU needed: the tests check the column-major mapping on the
 * host with it. */
void fc_cublaslt_key_of(const fc_gemm_plan *p, bool allow_tf32, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                        CUdeviceptr c, CUdeviceptr d, size_t ws_bytes, fc_cublaslt_key *k);

/*
 * A result whose rows are not 16-byte aligned (N * the result's size not a
 * multiple of 16: an LM head's vocabulary of 50257), written in place at
 * the aligned kernels' speed (docs/GEMM.md, "Unaligned results in place").
 * Row r starts at element r N; every R-th row (R = 16 / gcd(N * size, 16))
 * is 16-byte aligned after a shift of c < g = 16 / size columns. So the
 * rows j, j + R, j + 2R, ... form a matrix of leading dimension R N whose
 * columns [c_j, c_j + N_j) (N_j a multiple of g) start aligned: R aligned
 * GEMMs of M / R rows (x's rows R apart, W^T's rows from c_j) write all
 * but under g columns at each end of every row. Two GEMMs of g columns,
 * the first and the last g of every row, into the workspace, and two
 * strided copies (cuMemcpy2D) write those. Applies to a W^T weight (rows of
 * K), no bias or residual, one call (no batch), M a multiple of R with at
 * least FC_CUBLASLT_INTERLEAVE_MIN_ROWS rows a GEMM, 16-byte aligned x, W
 * and result pointers and leading dimensions, N >= 2 g. The pad pass
 * leaves such a result unpadded when this is cheaper than padding N and
 * copying the result (passes/pad.c).
 */
#define FC_CUBLASLT_INTERLEAVE_MIN_ROWS 128
typedef struct fc_cublaslt_interleave {
    int rows;          /* R */
    int64_t sub_m;     /* M / R */
    int64_t edge;      /* g */
    int64_t col0[16];  /* c_j, j < R */
    int64_t cols[16];  /* N_j */
    size_t scratch_bytes; /* the edges' results at the workspace's start (256-byte multiple) */
} fc_cublaslt_interleave;
/* Whether plan p, at these pointers and with ws_bytes of workspace, is run
 * so; *out then says how. No GPU needed. */
bool fc_cublaslt_interleave_of(const fc_gemm_plan *p, CUdeviceptr x, CUdeviceptr w, CUdeviceptr d, size_t ws_bytes,
                               fc_cublaslt_interleave *out);

/* The opaque cublasLtMatmulAlgo_t, as bytes. */
#define FC_CUBLASLT_ALGO_BYTES 64

/* The cuBLASLt version (cublasLtGetVersion; 130000 style). No GPU needed. */
size_t fc_cublaslt_version(void);
/* The algorithms chosen so far: entry i's key and algorithm. */
int fc_cublaslt_num_algos(const fc_cublaslt *h);
bool fc_cublaslt_algo_at(const fc_cublaslt *h, int i, fc_cublaslt_key *key, uint8_t algo[FC_CUBLASLT_ALGO_BYTES]);
/* Seed the table from a cache. The algorithm is checked
 * (cublasLtMatmulAlgoCheck) at its first use, and replaced by a heuristic
 * query if the library refuses it. */
fc_status fc_cublaslt_algo_insert(fc_cublaslt *h, const fc_cublaslt_key *key, const uint8_t algo[FC_CUBLASLT_ALGO_BYTES]);
/* How many heuristic queries the handle has made (for tests: one per
 * distinct problem not found in the cache). */
int fc_cublaslt_heuristic_queries(const fc_cublaslt *h);
/* How many algorithms the handle took from the cache (checked with
 * cublasLtMatmulAlgoCheck and used) instead of asking the heuristic. */
int fc_cublaslt_disk_hits(const fc_cublaslt *h);
/* How many algorithms came from a nearby size of the same family (reuse_family). */
int fc_cublaslt_family_reuses(const fc_cublaslt *h);
/* The same two counts over every handle of the process (for tests that
 * run programs, whose handles they cannot reach). */
long fc_cublaslt_heuristic_queries_total(void);
long fc_cublaslt_disk_hits_total(void);

/* ------------------------------------------------------------------ */
/* The on-disk algorithm cache                                          */
/*                                                                      */
/* On a miss in the handle's table, the algorithm of a problem is looked */
/* up in the cache (level FC_CACHE_ALGO) under fc_cublaslt_algo_cache_key */
/* (the problem and the device); a record that decodes and that         */
/* cublasLtMatmulAlgoCheck accepts (status, and a workspace need within  */
/* the key's workspace) is used. Anything else is removed from the      */
/* cache and the heuristic is asked, and its answer stored. These        */
/* functions need no GPU: the tests check the key and the record with   */
/* them. docs/GEMM.md, "Algorithms on disk", has the whole story.       */
/* ------------------------------------------------------------------ */

/* What an algorithm's validity depends on besides the problem. */
typedef struct fc_cublaslt_device_id {
    char name[256];          /* cuDeviceGetName, NUL-padded */
    int64_t cc_major, cc_minor;
    int64_t sm_count;        /* a MIG slice or a cut-down part of one name: other answers */
    int64_t driver_version;  /* cuDriverGetVersion */
    int64_t lt_version;      /* cublasLtGetVersion */
    int64_t cudart_version;  /* cublasLtGetCudartVersion: the runtime cuBLASLt was built for */
} fc_cublaslt_device_id;

/* The identity of the device described by info, with this process's
 * cuBLASLt. No GPU needed (info may be made up). */
void fc_cublaslt_device_id_of(const fc_cuda_device_info *info, fc_cublaslt_device_id *id);

/* Bump when the record layout or the key recipe changes: it is in the key
 * and in the record, so old entries are never read. */
#define FC_CUBLASLT_ALGO_RECORD_VERSION 1
#define FC_CUBLASLT_ALGO_MAGIC "FCLTALGO"
/* Every record has this size (docs/GEMM.md has the layout). */
#define FC_CUBLASLT_ALGO_RECORD_BYTES 592

/* XXH3-128 (fc_cache_key_begin's stream) over a tag, the record version,
 * every field of the problem k, the matrix order (column-major, for all
 * four layouts), and every field of the device. */
fc_cache_key fc_cublaslt_algo_cache_key(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev);

/* The record of (k, dev, algo): FC_CUBLASLT_ALGO_RECORD_BYTES bytes into
 * out, with its own checksum. */
void fc_cublaslt_algo_record_encode(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev,
                                    const uint8_t algo[FC_CUBLASLT_ALGO_BYTES],
                                    uint8_t out[FC_CUBLASLT_ALGO_RECORD_BYTES]);

/* Read a record: its size, magic, version, field count and checksum, then
 * that it is the record of exactly (k, dev) (a key collision, or a record
 * of another device, is refused). The algorithm into algo; false, with the
 * reason in why[0 .. n), when the record is not usable. It is still to be
 * checked with cublasLtMatmulAlgoCheck before use. */
bool fc_cublaslt_algo_record_decode(const void *data, size_t size, const fc_cublaslt_key *k,
                                    const fc_cublaslt_device_id *dev, uint8_t algo[FC_CUBLASLT_ALGO_BYTES],
                                    char *why, size_t n);

#endif

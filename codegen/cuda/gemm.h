/*
 * gemm.h - the GEMMs of a dynamic variant as generated CUDA kernels
 * (internal to codegen/cuda).
 *
 * A dynamic plan's `gemm` and `matmul` groups become kernels whose sizes,
 * leading dims and batch strides are computed from the symbol arguments,
 * so a new shape needs new grid dims and symbol values and nothing else:
 * no cuBLASLt descriptors, algorithm queries or lazily loaded library
 * kernels. Static plans (and so specializations) keep cuBLASLt, but for
 * their GEMMs of at most 64 rows on Hopper (skinny.h).
 * docs/GEMM.md, "Generated GEMMs in the dynamic variant", has the design.
 */
#ifndef FC_CUDA_GEMM_H
#define FC_CUDA_GEMM_H

#include "emit.h"

#include <stdbool.h>

/* Whether dynamic plans get generated GEMM kernels: true unless the
 * environment has FUSEC_VARIANT_GEMM=cublaslt (a fallback: library
 * launches; the source differs, and so does its kernel-cache key). */
bool fc_cuda_variant_gemm_kernels(void);

/* Whether library group gr of a dynamic plan runs as a generated kernel:
 * a gemm or matmul of f16, bf16, f32 or f64 operands (integer matmuls stay
 * library launches, which report that nothing runs them). */
bool fc_cuda_gemm_kernel_fits(const fc_group *gr);

/* The N of the 128 x N wgmma tile that a variant compiled for compute
 * capability sm (major * 10 + minor) uses for its f16/bf16 GEMMs: 0 (no
 * wgmma: mma.sync tiles only) unless sm is 90 (docs/GEMM.md). */
int fc_cuda_gemm_wgmma_bn(int sm);

/* Which tile an f16/bf16 GEMM of M x N x K, batch Z, takes on a grid of P
 * blocks, with wgmma tiles 128 x wbn (wbn from fc_cuda_gemm_wgmma_bn; 0:
 * none): 0 for 64 x 64 mma.sync tiles, 1 for 128 x 128
 * mma.sync tiles, 2 for wgmma tiles; *kper: the 64-deep k tiles of one K
 * split (K splits when that is fewer than K's). The same code is the
 * kernels' own rule (fc_gm_tiles), so the tests can tell which kernel a
 * shape runs. */
int fc_cuda_gemm_tiles(long long M, long long N, long long K, long long Z, long long P, long long wbn, long long *kper);

/* Which kernel the generated GEMM of group gr (of a dynamic plan) runs
 * with the symbols at syms, for compute capability sm on a grid of `blocks`
 * blocks (the SM count), and in *splits its K splits (1: none): -1 for a
 * group fc_cuda_gemm_kernel_fits refuses. For the tests, which must know
 * which kernel each of their cases reaches. */
enum { FC_GEMM_PATH_FMA, FC_GEMM_PATH_MMA_SMALL, FC_GEMM_PATH_MMA_LARGE, FC_GEMM_PATH_WGMMA };
int fc_cuda_gemm_path(const fc_group *gr, const int64_t *syms, int nsyms, int sm, int64_t blocks, int64_t *splits);

/* Append the Hopper helpers of codegen/cuda/wgmma.cuh.inc (fc_wg_fence,
 * fc_wg_commit, fc_wg_wait, fc_wg_desc, ...: what the generated GEMMs and
 * fc_attn_fa3 share), compiled only for sm_90a and guarded so that a unit
 * that gets them twice sees them once. */
void fc_cuda_emit_wgmma_helpers(fc_strbuf *s);

/* Append fc_wg_ss<n>, the wgmma m64nNk16 wrappers that wgmma.cuh.inc
 * declares (n a multiple of 8 up to 256; bf16 and f16 inputs, f32
 * accumulators), guarded so that a unit gets each n once. */
void fc_cuda_emit_wgmma_ss(fc_strbuf *s, int n);

/*
 * Append to s the kernel `name` for group gr of dynamic plan `plan`
 * (preceded, when *templates is false, by the device templates, after
 * which *templates is true), and fill l: kind, block, shared memory, the
 * symbolic grid and nsyms (l->args are the group's inputs then outputs,
 * as the caller made them). FC_ERR_UNSUPPORTED (with a message on the
 * graph's context) for a group fc_cuda_gemm_kernel_fits refuses.
 */
fc_status fc_cuda_emit_gemm(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, bool *templates,
                            fc_launch *l);

#endif

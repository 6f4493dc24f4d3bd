/*
 * gemm.h - the GEMMs of a dynamic variant as generated CUDA kernels
 * (internal to codegen/cuda).
 *
 * A dynamic plan's `gemm` and `matmul` groups become kernels whose sizes,
 * leading dims and batch strides are computed from the symbol arguments,
 * so a new shape needs new grid dims and symbol values and nothing else:
 * no cuBLASLt descriptors, algorithm queries or lazily loaded library
 * kernels. Static plans (and so specializations) keep cuBLASLt.
 * docs/GEMM.md, "Generated GEMMs in the dynamic variant", has the design.
 */
#ifndef FC_CUDA_GEMM_H
#define FC_CUDA_GEMM_H

#include "cuda_codegen.h"

#include <stdbool.h>

/* Whether dynamic plans get generated GEMM kernels: true unless the
 * environment has FUSEC_VARIANT_GEMM=cublaslt, which restores library
 * launches (the source differs, and so does its kernel-cache key). */
bool fc_cuda_variant_gemm_kernels(void);

/* Whether library group gr of a dynamic plan runs as a generated kernel:
 * a gemm or matmul of f16, bf16, f32 or f64 operands (integer matmuls stay
 * library launches, which report that nothing runs them). */
bool fc_cuda_gemm_kernel_fits(const fc_group *gr);

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

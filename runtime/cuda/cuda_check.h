/*
 * cuda_check.h - the check macros for CUDA driver, NVRTC and cuBLASLt calls
 * (internal header).
 *
 * Every call into the driver, NVRTC or cuBLASLt goes through one of these.
 * On failure the macro records on the fc_context the call's own text, where
 * it was made (file:line) and the library's error name and message, then
 * returns FC_ERR_RUNTIME from the enclosing function, which must therefore
 * return fc_status. For example
 *
 *     FC_CU_CHECK(d->ctx, d->cu->MemAlloc(out, bytes));
 *
 * records (on one line)
 *
 *     runtime/cuda/cuda_driver.c:NNN: d->cu->MemAlloc(out, bytes) failed:
 *     CUDA_ERROR_OUT_OF_MEMORY: out of memory
 *
 * Cleanup is not the macro's business: a function that holds resources
 * calls a helper that uses the macro and cleans up when it returns an
 * error (see fc_cuda_device_open). The one exception is NVRTC, whose
 * program is needed for the error message anyway: FC_NVRTC_CHECK destroys
 * the program it reports on.
 */
#ifndef FC_RUNTIME_CUDA_CHECK_H
#define FC_RUNTIME_CUDA_CHECK_H

#include "ir.h"

#include <cuda.h>
#include <nvrtc.h>

/* --- CUDA driver ------------------------------------------------------ */

/* Record a failed driver call; returns FC_ERR_RUNTIME. The error's name
 * and text come from cuGetErrorName/String when the driver is loaded. */
fc_status fc_cu_fail(fc_context *ctx, CUresult r, const char *call, const char *file, int line);

#define FC_CU_CHECK(ctx, call)                                                 \
    do {                                                                       \
        CUresult fc_cu_r_ = (call);                                            \
        if (fc_cu_r_ != CUDA_SUCCESS)                                          \
            return fc_cu_fail((ctx), fc_cu_r_, #call, __FILE__, __LINE__);     \
    } while (0)

/* --- NVRTC ------------------------------------------------------------ */

/* What a failed NVRTC call can be reported with: the program (for its
 * log; may be NULL before nvrtcCreateProgram), its name and its source. */
typedef struct fc_nvrtc_unit {
    nvrtcProgram prog;
    const char *name;
    const char *source;
} fc_nvrtc_unit;

/* Record a failed NVRTC call: the call, file:line, NVRTC's error string,
 * the program log, and the source (an excerpt around the first error line,
 * or, when $FUSEC_DEBUG contains "code", as much of the numbered source as
 * fits from 40 lines before the first error). Destroys unit->prog (and
 * sets it NULL). Returns FC_ERR_RUNTIME.
 * unit may be NULL for calls that have no program. */
fc_status fc_nvrtc_fail(fc_context *ctx, fc_nvrtc_unit *unit, nvrtcResult r, const char *call, const char *file,
                        int line);

#define FC_NVRTC_CHECK(ctx, unit, call)                                        \
    do {                                                                       \
        nvrtcResult fc_nvrtc_r_ = (call);                                      \
        if (fc_nvrtc_r_ != NVRTC_SUCCESS)                                      \
            return fc_nvrtc_fail((ctx), (unit), fc_nvrtc_r_, #call, __FILE__, __LINE__); \
    } while (0)

/* Create unit->prog from unit->source and compile it with the NVRTC
 * options opt[0 .. nopt). The caller destroys unit->prog whatever this
 * returns (a failing check already has, and set it NULL). */
fc_status fc_nvrtc_unit_compile(fc_context *ctx, fc_nvrtc_unit *unit, int nopt, const char *const *opt);

/* --- cuBLASLt --------------------------------------------------------- */

/* Record a failed cuBLASLt call (status is a cublasStatus_t, passed as an
 * int so this header need not include cublasLt.h); returns FC_ERR_RUNTIME. */
fc_status fc_cublaslt_fail(fc_context *ctx, int status, const char *call, const char *file, int line);

#define FC_CUBLASLT_CHECK(ctx, call)                                           \
    do {                                                                       \
        int fc_lt_s_ = (int)(call);                                            \
        if (fc_lt_s_ != 0 /* CUBLAS_STATUS_SUCCESS */)                         \
            return fc_cublaslt_fail((ctx), fc_lt_s_, #call, __FILE__, __LINE__); \
    } while (0)

/* "runtime/cuda/cuda_driver.c" from a __FILE__ that may be an absolute
 * path: from its runtime/ folder on (else the last two components), so
 * messages do not depend on the build tree. */
const char *fc_check_short_file(const char *file);

#endif

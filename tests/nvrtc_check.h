/* nvrtc_check.h - CHECK that generated CUDA source compiles with NVRTC for
 * sm_90 (NVRTC needs no GPU); when it does not, what failed and NVRTC's
 * message go to stderr. */
#ifndef FC_TEST_NVRTC_CHECK_H
#define FC_TEST_NVRTC_CHECK_H
#include "check.h"
#include "runtime/cuda/cuda.h"

#include <stdio.h>

static inline fc_status check_nvrtc_compiles(fc_context *ctx, const char *source, const char *file, const char *what) {
    fc_bytes cubin = {0};
    fc_status st = fc_nvrtc_compile(ctx, source, file, 9, 0, NULL, 0, &cubin);
    if (st) fprintf(stderr, "%s: NVRTC: %s\n", what, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_bytes_free(&cubin);
    return st;
}

#endif

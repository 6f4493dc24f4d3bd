/*
 * cupti.h - CUPTI's activity records for the profile, CUPTI loaded with
 * dlopen only when a profile is asked for (a program that is never
 * profiled never loads it, and a machine without it runs everything else).
 *
 * While a capture is open, CUPTI records every kernel the device runs and
 * every driver API call, each with a correlation id; the profile pushes an
 * external id (its run and launch) around each launch, and CUPTI's
 * external-correlation records map the one to the other, so a library
 * call's kernels (cuBLASLt's, whose names fusec does not choose) belong to
 * their launch. Times are CUPTI's nanoseconds, as milliseconds from the
 * capture's start.
 */
#ifndef FC_RUNTIME_CUDA_CUPTI_H
#define FC_RUNTIME_CUDA_CUPTI_H

#include "fusec.h"

#include <stdint.h>

typedef struct fc_cupti_kernel {
    uint32_t correlation;
    double start, end; /* ms from the capture's start */
    char name[96];     /* the device's name for it, cut */
} fc_cupti_kernel;

typedef struct fc_cupti_api {
    uint32_t correlation;
    double start, end;
    unsigned cbid; /* the driver call (CUpti_driver_api_trace_cbid) */
} fc_cupti_api;

typedef struct fc_cupti_ext {
    uint32_t correlation;
    uint64_t id; /* what fc_cupti_push gave */
} fc_cupti_ext;

/* Load CUPTI (once per process) and start recording. FC_ERR_UNSUPPORTED
 * with where it looked when there is none; one capture at a time. */
fc_status fc_cupti_begin(fc_context *ctx);
/* Tag the launches made from now until fc_cupti_pop with id (> 0). */
void fc_cupti_push(uint64_t id);
void fc_cupti_pop(void);
/* Now, on the records' clock. */
double fc_cupti_now_ms(void);
/* Stop recording, flush, and hand over the records (malloc'd; the
 * caller frees each array). */
fc_status fc_cupti_end(fc_context *ctx, fc_cupti_kernel **k, int *nk, fc_cupti_api **a, int *na, fc_cupti_ext **e,
                       int *ne);

#endif

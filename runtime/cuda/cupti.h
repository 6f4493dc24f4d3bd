/*
 * cupti.h - CUPTI's activity records for the profile, CUPTI loaded with
 * dlopen only when a profile is asked for (a program that is never
 * profiled never loads it, and a machine without it runs everything else).
 *
 * While a capture is open, CUPTI records every kernel the device runs and,
 * in a capture with calls, every driver API call, each with a correlation
 * id; the profile pushes an
 * external id (its run and launch) around each launch, or around a CUDA
 * Graph replay (its run, and FC_CUPTI_REPLAY for the launch), and CUPTI's
 * external-correlation records map the one to the other, so a library
 * call's kernels (cuBLASLt's, whose names fusec does not choose) belong to
 * their launch. Times are CUPTI's nanoseconds, as milliseconds from the
 * capture's start.
 *
 * A replay's kernels all carry the correlation id of the one cuGraphLaunch
 * that ran them (a capture of replays records no calls at all: its kernels
 * belong to a run by their start times), so which kernel is which launch
 * comes from their order:
 * the graph is a chain in launch order (runtime/cuda/replay.h), so its
 * kernels start in that order. fc_cupti_map checks it by name: each
 * generated kernel is its launch's function, and a library call's kernels
 * are those between the generated kernels around it (split by the names a
 * launch-by-launch run gave each when library calls follow one another).
 */
#ifndef FC_RUNTIME_CUDA_CUPTI_H
#define FC_RUNTIME_CUDA_CUPTI_H

#include "fusec.h"
#include "runtime/profile.h"

#include <stdint.h>

/* The external id of launch i of run k: ((k + 1) << FC_CUPTI_RUN_SHIFT) |
 * i; a replay of run k has FC_CUPTI_REPLAY for i. */
#define FC_CUPTI_RUN_SHIFT 24
#define FC_CUPTI_REPLAY ((1u << FC_CUPTI_RUN_SHIFT) - 1)

typedef struct fc_cupti_kernel {
    uint32_t correlation;
    uint32_t graph;    /* the CUDA Graph that launched it (CUPTI's id), 0 for none */
    double start, end; /* ms from the capture's start */
    char name[96];     /* the device's name for it, cut */
} fc_cupti_kernel;

typedef struct fc_cupti_api {
    uint32_t correlation;
    double start, end;
    unsigned cbid; /* the call: CUpti_driver_api_trace_cbid, or with runtime CUpti_runtime_api_trace_cbid */
    bool runtime;  /* a runtime API call (a library's launch) */
} fc_cupti_api;

typedef struct fc_cupti_ext {
    uint32_t correlation;
    uint64_t id; /* what fc_cupti_push gave */
} fc_cupti_ext;

/* A capture's records (malloc'd arrays). */
typedef struct fc_cupti_records {
    fc_cupti_kernel *k;
    fc_cupti_api *a;
    fc_cupti_ext *e;
    int nk, na, ne;
} fc_cupti_records;
void fc_cupti_records_free(fc_cupti_records *r); /* zeroed after */

/* Load CUPTI (once per process) and start recording: the kernels, and
 * with calls the driver and runtime calls and the external ids too (CUPTI's records of
 * API calls cost host time in every call; a capture of replays needs
 * none). FC_ERR_UNSUPPORTED with where it looked when there is none; one
 * capture at a time. */
fc_status fc_cupti_begin(fc_context *ctx, bool calls);
/* Whether the captures take kernel timestamps from the GPU's hardware event
 * system (no instrumentation between kernels), after the first begin. */
bool fc_cupti_hw_trace(void);
/* Tag the launches made from now until fc_cupti_pop with id (> 0). */
void fc_cupti_push(uint64_t id);
void fc_cupti_pop(void);
/* Now, on the records' clock. */
double fc_cupti_now_ms(void);
/* Stop recording, flush, and hand over the records (*out: the caller frees
 * them). The clock of the next capture starts again. */
fc_status fc_cupti_end(fc_context *ctx, fc_cupti_records *out);

/*
 * A capture's records as r's events (runtime/profile.h), on any machine
 * (nothing here calls CUPTI). A kernel belongs to a run by its tag, or, a
 * graph's kernel without one (a capture without calls), to the measured
 * run whose span (r->run_start .. run_end) holds its start, as part of a
 * replay. Records of runs 0 .. r->runs-1 are events of those runs;
 * launch-by-launch records of run learn (>= r->runs; -1: none) say which
 * kernels each launch runs, for splitting the kernels of library calls
 * that follow one another in a replay; other runs' are dropped. replays:
 * every measured run was a replay (one with no kernel is a mismatch).
 * rec->e is sorted in place. A replay whose kernels do not match the
 * launches (a count, or a name where a generated kernel belongs) adds
 * nothing: why then says what differed, and no event of any run is kept
 * (the caller profiles launch by launch instead); why is "" otherwise.
 * FC_ERR_NOMEM (on r->ctx).
 */
fc_status fc_cupti_map(fc_profile_rec *r, int learn, bool replays, fc_cupti_records *rec, char *why, size_t nwhy);

#endif

/*
 * cudnn.h - convolution descriptions (lower/conv_desc.h) run through
 * cuDNN's graph API (internal header).
 *
 * cuDNN is loaded with dlopen, as the driver is: fusec has no link-time
 * dependency on it, and without it (or without its headers at build time)
 * convolutions take the im2col path (passes/lower_conv.c). The library is
 * looked for under its standard names, libcudnn.so.9 and then
 * libcudnn_graph.so.9, on the dynamic loader's path: a system install, or
 * PyTorch's pip package with its folder on LD_LIBRARY_PATH
 * (python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))'
 * plus /lib). docs/RUNTIME.md, "Convolutions: cuDNN".
 *
 * A description becomes one cuDNN operation graph: CONVOLUTION_FORWARD on
 * NHWC x and KRSC w, then one POINTWISE op per epilogue step (add the
 * bias, add the residual, relu or gelu_tanh, in that order; an identity
 * for a cast alone), through f32 virtual tensors, into y. The execution
 * plan is chosen by timing: the engine configurations of heuristic mode A
 * (and of the fallback mode when mode A has fewer than three) that
 * finalize within the workspace (the cuBLASLt workspace inside the arena:
 * the two libraries run one call at a time on one stream), each run on
 * the device on scratch buffers; the fastest is kept. The choice (the
 * engine's global index, its knobs and its measured time) goes to the
 * on-disk cache (FC_CACHE_ALGO, as GEMM algorithms do), so that another
 * process builds the same plan without asking the heuristic or timing. Every cuDNN call goes
 * through one check macro that records the call, where it was made and
 * cuDNN's own message.
 */
#ifndef FC_RUNTIME_CUDA_CUDNN_H
#define FC_RUNTIME_CUDA_CUDNN_H

#include "cache/cache.h"
#include "lower/conv_desc.h"
#include "runtime/cuda/cuda.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether cuDNN 9 can be used in this process: built with its headers,
 * and the library loads with every function fusec calls, at version 9 or
 * later. When not, why (a line for --emit=plan) in why[0 .. n). Loads it
 * once per process; any thread. No GPU needed. *version: cudnnGetVersion
 * (90100 for 9.1.0), 0 when it did not load; may be NULL. */
bool fc_cudnn_available(size_t *version, char *why, size_t n);

typedef struct fc_cudnn fc_cudnn;

/* A cuDNN handle on open device dev (its context made current), whose
 * plans go to cache c (NULL: the process's cache). */
fc_status fc_cudnn_create(fc_context *ctx, fc_cuda_device *dev, fc_cache *c, fc_cudnn **out);
/* Destroy every plan and the handle. NULL is ignored. */
void fc_cudnn_destroy(fc_cudnn *h);

/* Make sure d has its execution plan (from the handle, the disk cache or
 * the heuristic, in that order), within ws_bytes of workspace. Launches
 * call it themselves; a run's first pass makes every plan before a CUDA
 * Graph is captured. */
fc_status fc_cudnn_prepare(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, size_t ws_bytes);

/* Run d on stream s with the launch's argument pointers args[0 .. nargs)
 * (positions as d says) and workspace ws of ws_bytes. Capturable: a CUDA
 * Graph records it as kernels. */
fc_status fc_cudnn_launch(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, const CUdeviceptr *args, int nargs,
                          CUdeviceptr ws, size_t ws_bytes, CUstream s);

/* What d's plan on h is (false, *out zeroed, when h has none): its
 * engine, its measured time per run (ms: the search's, or the one stored
 * with the choice on disk; 0 when it could not be timed), its workspace
 * and how many candidates were timed to choose it (0: it came from disk).
 * The time against the convolution's floor (fc_conv_desc_flops, its
 * bytes) says when even the best engine cuDNN has is slow. */
typedef struct fc_cudnn_plan_stat {
    int64_t engine;
    double ms;
    int64_t workspace;
    int candidates;
} fc_cudnn_plan_stat;
bool fc_cudnn_plan_info(const fc_cudnn *h, const fc_conv_desc *d, fc_cudnn_plan_stat *out);

/* How many plans this handle chose by asking the heuristic, and how many
 * it built from a choice on disk. For tests and the benchmark. */
int fc_cudnn_heuristic_queries(const fc_cudnn *h);
int fc_cudnn_disk_hits(const fc_cudnn *h);
/* The same over every handle of the process. */
long fc_cudnn_heuristic_queries_total(void);
long fc_cudnn_disk_hits_total(void);

/* ------------------------------------------------------------------ */
/* The on-disk record of a plan choice: no GPU needed (tests).          */
/* ------------------------------------------------------------------ */

#define FC_CUDNN_MAX_KNOBS 32
typedef struct fc_cudnn_choice {
    int64_t engine; /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
    double ms;      /* its measured time per run (stored to the nanosecond) */
    int nknobs;
    int64_t knob_type[FC_CUDNN_MAX_KNOBS], knob_value[FC_CUDNN_MAX_KNOBS];
} fc_cudnn_choice;

/* The cache key of d's plan on a device (name, compute capability, SM
 * count, driver) with cuDNN `version`. */
fc_cache_key fc_cudnn_choice_key(const fc_conv_desc *d, const fc_cuda_device_info *dev, size_t version);
/* The record of choice c under key k into out (at most
 * FC_CUDNN_RECORD_MAX bytes); returns its size. */
#define FC_CUDNN_RECORD_MAX (8 + 4 + 16 + 8 + 8 + 4 + 16 * FC_CUDNN_MAX_KNOBS)
size_t fc_cudnn_choice_encode(const fc_cache_key *k, const fc_cudnn_choice *c, uint8_t *out);
/* Decode a record read under key k: false when it is not one (another
 * key or record version, a bad size or count, no measured time). */
bool fc_cudnn_choice_decode(const fc_cache_key *k, const uint8_t *data, size_t size, fc_cudnn_choice *c);

#endif

/*
 * cuda.h - the CUDA layer of the runtime (internal header).
 *
 * Three parts:
 *   - the driver table: every CUDA driver entry point fusec calls, resolved at
 *     first use from libcuda.so.1 (dlopen + cuGetProcAddress; see
 *     docs/RUNTIME.md for why libcuda is never linked);
 *   - a small device API on top of it (primary context, one stream, buffers,
 *     modules, launches, event timers, CUDA Graph capture) for the codegen
 *     and runtime stages;
 *   - NVRTC: CUDA C source to a cubin, and the exact options used.
 *
 * Every failure is recorded on an fc_context and returned as an fc_status;
 * nothing here prints or exits. The check macros are in cuda_check.h.
 *
 * Naming note: this file is runtime/cuda/cuda.h, so it includes the toolkit's
 * header as <cuda.h> (angle brackets never search the including file's own
 * folder). Never add runtime/ itself to an include path.
 */
#ifndef FC_RUNTIME_CUDA_H
#define FC_RUNTIME_CUDA_H

#include "ir.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* Owned byte buffers (cubins).                                        */
/* ------------------------------------------------------------------ */
/* fc_bytes and fc_bytes_free are ir/ir.h's. */

/* ------------------------------------------------------------------ */
/* The driver table.                                                   */
/* ------------------------------------------------------------------ */

/*
 * X(name, version): each driver function fusec uses, without its "cu"
 * prefix, and the CUDA version of the ABI we call it with. The version is
 * the suffix of its PFN_cu<name>_v<version> typedef in cudaTypedefs.h, and it
 * is the version we pass to cuGetProcAddress: pinning it per function means
 * a newer driver can never hand us an entry point whose signature changed
 * (cuCtxSynchronize takes a CUcontext from 13.0 on, for example), and an
 * older driver is never asked for a version it does not know (which
 * cuGetProcAddress answers with CUDA_ERROR_INVALID_VALUE).
 *
 * Members are named without the "cu" prefix because cuda.h #defines many of
 * the prefixed names (cuMemAlloc -> cuMemAlloc_v2) and they would be renamed.
 */
#define FC_CUDA_DRIVER_FUNCTIONS(X)                                            \
    X(GetErrorName, 6000)                                                      \
    X(GetErrorString, 6000)                                                    \
    X(Init, 2000)                                                              \
    X(DriverGetVersion, 2020)                                                  \
    X(DeviceGet, 2000)                                                         \
    X(DeviceGetCount, 2000)                                                    \
    X(DeviceGetAttribute, 2000)                                                \
    X(DeviceGetName, 2000)                                                     \
    X(DeviceTotalMem, 3020)                                                    \
    X(DevicePrimaryCtxRetain, 7000)                                            \
    X(DevicePrimaryCtxRelease, 11000)                                          \
    X(CtxSetCurrent, 4000)                                                     \
    X(CtxSynchronize, 2000)                                                    \
    X(MemGetInfo, 3020)                                                        \
    X(ModuleLoadData, 2000)                                                    \
    X(ModuleUnload, 2000)                                                      \
    X(ModuleGetFunction, 2000)                                                 \
    X(FuncSetAttribute, 9000)                                                  \
    X(FuncGetAttribute, 2020)                                                  \
    X(OccupancyMaxActiveBlocksPerMultiprocessor, 6050)                         \
    X(LaunchKernel, 4000)                                                      \
    X(MemAlloc, 3020)                                                          \
    X(MemFree, 3020)                                                           \
    X(MemAllocHost, 3020)                                                      \
    X(MemFreeHost, 2000)                                                       \
    X(MemcpyHtoD, 3020)                                                        \
    X(MemcpyDtoH, 3020)                                                        \
    X(MemcpyDtoD, 3020)                                                        \
    X(MemcpyHtoDAsync, 3020)                                                   \
    X(MemcpyDtoHAsync, 3020)                                                   \
    X(MemcpyDtoDAsync, 3020)                                                   \
    X(Memcpy2DAsync, 3020)                                                     \
    X(MemsetD8, 3020)                                                          \
    X(MemsetD8Async, 3020)                                                     \
    X(StreamCreate, 2000)                                                      \
    X(StreamDestroy, 4000)                                                     \
    X(StreamSynchronize, 2000)                                                 \
    X(StreamWaitEvent, 3020)                                                   \
    X(EventCreate, 2000)                                                       \
    X(EventRecord, 2000)                                                       \
    X(EventSynchronize, 2000)                                                  \
    X(EventElapsedTime, 2000)                                                  \
    X(EventDestroy, 4000)                                                      \
    X(StreamBeginCapture, 10010)                                               \
    X(StreamEndCapture, 10000)                                                 \
    X(GraphInstantiateWithFlags, 11040)                                        \
    X(GraphLaunch, 10000)                                                      \
    X(GraphUpload, 11010)                                                      \
    X(GraphExecDestroy, 10000)                                                 \
    X(GraphDestroy, 10000)                                                     \
    X(GraphCreate, 10000)                                                      \
    X(GraphAddKernelNode, 12000)                                               \
    X(GraphAddChildGraphNode, 10000)                                           \
    X(GraphExecKernelNodeSetParams, 12000)                                     \
    X(GraphExecChildGraphNodeSetParams, 11010)                                 \
    X(TensorMapEncodeTiled, 12000)

/* Functions used when the driver has them, NULL otherwise (a driver
 * without them still loads): graph edges with a type (CUDA 12.3), for the
 * programmatic edges of a graph (runtime/cuda/replay.c); the extensible
 * launch, for a programmatic dependent launched on a stream
 * (fc_cuda_launch_cfg.programmatic); the virtual memory management of
 * fc_cuda_region. */
#define FC_CUDA_DRIVER_OPTIONAL(X)                                             \
    X(GraphAddDependencies, 12030)                                             \
    X(LaunchKernelEx, 11060)                                                   \
    X(MemAddressReserve, 10020)                                                \
    X(MemAddressFree, 10020)                                                   \
    X(MemCreate, 10020)                                                        \
    X(MemRelease, 10020)                                                       \
    X(MemMap, 10020)                                                           \
    X(MemUnmap, 10020)                                                         \
    X(MemSetAccess, 10020)                                                     \
    X(MemGetAllocationGranularity, 10020)

/* The resolved driver: one pointer per function above, plus its version. */
typedef struct fc_cuda_driver {
#define FC_CUDA_DRIVER_MEMBER(name, version) PFN_cu##name##_v##version name;
    FC_CUDA_DRIVER_FUNCTIONS(FC_CUDA_DRIVER_MEMBER)
    FC_CUDA_DRIVER_OPTIONAL(FC_CUDA_DRIVER_MEMBER)
#undef FC_CUDA_DRIVER_MEMBER
    int version; /* cuDriverGetVersion: 1000 * major + 10 * minor */
} fc_cuda_driver;

/*
 * The driver table, loaded and cuInit'ed on the first call from any thread
 * (once per process; libcuda is never unloaded). NULL when the driver cannot
 * be used: no libcuda.so.1, a driver older than CUDA 12.0, the toolkit's
 * stub library, or no device. Then ctx (if not NULL) holds why, starting
 * with "no CUDA driver:" or "no CUDA device:".
 */
const fc_cuda_driver *fc_cuda_driver_get(fc_context *ctx);
/* True when the driver loaded and at least one device is present; else
 * false with the reason on ctx, as fc_cuda_driver_get. Never crashes. */
bool fc_cuda_available(fc_context *ctx);

/* ------------------------------------------------------------------ */
/* Device query.                                                       */
/* ------------------------------------------------------------------ */
typedef struct fc_cuda_device_info {
    int ordinal;
    char name[256];
    int cc_major, cc_minor;         /* compute capability: 9.0 on H100/H200 */
    int sm_count;                   /* streaming multiprocessors */
    size_t total_mem;               /* bytes of device memory */
    int max_threads_per_block;
    int max_shared_per_block;       /* bytes, without opting in */
    int max_shared_per_block_optin; /* bytes, with cuFuncSetAttribute */
    int l2_bytes;
    int warp_size;
    int driver_version;             /* as fc_cuda_driver.version */
    int vmm;                        /* virtual memory management (fc_cuda_region) */
} fc_cuda_device_info;

/* Number of devices (0 is not an error here), or an error on ctx when the
 * driver is missing. */
fc_status fc_cuda_device_count(fc_context *ctx, int *count);
/* Properties of device `ordinal` without opening it. */
fc_status fc_cuda_device_query(fc_context *ctx, int ordinal, fc_cuda_device_info *info);

/* ------------------------------------------------------------------ */
/* The device API.                                                     */
/*                                                                      */
/* An fc_cuda_device holds a device's retained primary context (the     */
/* context the CUDA runtime and PyTorch also use, so memory and modules */
/* can be shared with them) and one non-blocking stream, the default    */
/* for every call below that takes a CUstream: pass NULL for it.        */
/* Errors are recorded on the context given to fc_cuda_device_open.    */
/* Each call makes the primary context current on the calling thread    */
/* (a thread-local store in the driver), so any thread may use the      */
/* device, one at a time, as with the fc_context itself.                */
/* ------------------------------------------------------------------ */
typedef struct fc_cuda_device {
    fc_context *ctx; /* errors go here */
    const fc_cuda_driver *cu;
    CUdevice dev;
    CUcontext cuctx; /* the retained primary context */
    CUstream stream; /* fusec's stream: CU_STREAM_NON_BLOCKING */
    fc_cuda_device_info info;
    bool borrowed; /* fc_cuda_device_borrow's: the stream and context are another handle's */
} fc_cuda_device;

/* Open device `ordinal`; *out is NULL on failure. */
fc_status fc_cuda_device_open(fc_context *ctx, int ordinal, fc_cuda_device **out);
/* Synchronize, destroy the stream, release the primary context, free d.
 * Teardown errors are ignored: nothing can be done about them. NULL ok. */
void fc_cuda_device_close(fc_cuda_device *d);
/* A second handle on open device `from`, whose errors go to ctx: the same
 * primary context, stream and properties, made without a driver call.
 * `from` must outlive it; closing it frees the handle alone (no
 * synchronize). A dynamic program's specializations borrow one device
 * (docs/DYNAMIC.md): a stream created or destroyed in another thread
 * stalls the caller's launches by ~30 us. */
fc_status fc_cuda_device_borrow(fc_context *ctx, const fc_cuda_device *from, fc_cuda_device **out);
/* The same, by value, for a handle on the stack (never closed): another
 * thread's use of `from` with its errors on a context of its own. */
fc_cuda_device fc_cuda_device_view(const fc_cuda_device *from, fc_context *ctx);
/* Wait for all work on the device (every stream of the primary context). */
fc_status fc_cuda_device_sync(fc_cuda_device *d);
/* Wait for the work queued on stream s (NULL: the device's stream). */
fc_status fc_cuda_stream_sync(fc_cuda_device *d, CUstream s);

/* Buffers. Synchronous copies are ordered after the work already queued on
 * the device's stream and return when the copy is done. */
fc_status fc_cuda_alloc(fc_cuda_device *d, size_t bytes, CUdeviceptr *out);
fc_status fc_cuda_free(fc_cuda_device *d, CUdeviceptr p); /* 0 is ignored */
fc_status fc_cuda_upload(fc_cuda_device *d, CUdeviceptr dst, const void *src, size_t bytes);
fc_status fc_cuda_download(fc_cuda_device *d, void *dst, CUdeviceptr src, size_t bytes);
fc_status fc_cuda_upload_async(fc_cuda_device *d, CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
fc_status fc_cuda_download_async(fc_cuda_device *d, void *dst, CUdeviceptr src, size_t bytes, CUstream s);
fc_status fc_cuda_memset_async(fc_cuda_device *d, CUdeviceptr dst, unsigned char byte, size_t bytes, CUstream s);
/*
 * A device region that grows in place: an address range reserved once (as
 * large as the device's memory), backed by physical memory mapped at its
 * end as it grows (the virtual memory management API: cuMemCreate,
 * cuMemMap). Its base never moves, so whatever holds its addresses stays
 * right, and growing frees nothing, so it never waits for the device: a
 * free-then-alloc growth (cuMemFree synchronizes) stalls a caller's call
 * and blocks other threads' launches meanwhile (docs/DYNAMIC.md). A zeroed
 * struct is an empty region.
 */
typedef struct fc_cuda_region {
    CUdeviceptr base; /* 0 until the first growth reserves the range */
    size_t reserved, mapped, granularity;
    size_t taken; /* bytes handed out by fc_cuda_region_take */
    struct fc_cuda_region_chunk {
        CUmemGenericAllocationHandle handle;
        size_t bytes;
    } *chunk; /* each growth's physical memory, in address order */
    int nchunks, capchunks;
} fc_cuda_region;
/* Map at least `bytes` from r->base (rounded up to the granularity; a
 * region already that large is left alone). FC_ERR_UNSUPPORTED, with r
 * unchanged and no error recorded, when the driver or the device has no
 * virtual memory management (the caller then allocates as before); any
 * other failure is recorded and leaves r as it was. */
fc_status fc_cuda_region_grow(fc_cuda_device *d, fc_cuda_region *r, size_t bytes);
/* Unmap and release everything, free the range, zero r. The caller makes
 * sure no queued work still uses it. NULL and an empty region are ignored. */
void fc_cuda_region_free(fc_cuda_device *d, fc_cuda_region *r);
/* `bytes` of r after what it handed out before (256-byte aligned, as
 * cuMemAlloc's), growing it as needed; given back only by
 * fc_cuda_region_free. For buffers that live as long as their owner and
 * whose freeing must not wait for the device. FC_ERR_UNSUPPORTED as
 * fc_cuda_region_grow's. */
fc_status fc_cuda_region_take(fc_cuda_device *d, fc_cuda_region *r, size_t bytes, CUdeviceptr *out);

/* Page-locked host memory (a copy from it to the device is a DMA the
 * stream orders; its source must stay unchanged until the copy ran). */
fc_status fc_cuda_host_alloc(fc_cuda_device *d, size_t bytes, void **out);
void fc_cuda_host_free(fc_cuda_device *d, void *p); /* NULL is ignored */
/* Events that only order or wait (no timing). */
fc_status fc_cuda_event_create(fc_cuda_device *d, CUevent *out);
void fc_cuda_event_destroy(fc_cuda_device *d, CUevent e); /* NULL is ignored */
fc_status fc_cuda_event_record(fc_cuda_device *d, CUevent e, CUstream s);
fc_status fc_cuda_event_sync(fc_cuda_device *d, CUevent e);

/* Modules and functions. The image must be a cubin (an ELF file, as
 * fc_nvrtc_compile makes); anything else is FC_ERR_USAGE. The driver
 * copies the image, so it may be freed after the call. */
fc_status fc_cuda_module_load(fc_cuda_device *d, const void *cubin, size_t size, CUmodule *out);
void fc_cuda_module_unload(fc_cuda_device *d, CUmodule m); /* NULL is ignored */
fc_status fc_cuda_module_function(fc_cuda_device *d, CUmodule m, const char *name, CUfunction *out);
/* Allow f more than 48 KiB of dynamic shared memory (up to
 * info.max_shared_per_block_optin). */
fc_status fc_cuda_function_set_max_shared(fc_cuda_device *d, CUfunction f, int bytes);
/* How many blocks of f (block threads, smem bytes of dynamic shared
 * memory) one multiprocessor holds at once. */
fc_status fc_cuda_occupancy(fc_cuda_device *d, CUfunction f, int block, size_t smem, int *blocks);

/* A tiled tensor map (the descriptor the bulk tensor copy engine reads)
 * over the global memory at addr: rank dims, innermost first; the byte
 * strides of dims 1 .. rank - 1; a box of box[] elements; elements outside
 * the dims read as zeros. Encoding is host work (cuTensorMapEncodeTiled);
 * FC_ERR_RUNTIME with the driver's reason when it refuses the map. */
fc_status fc_cuda_tensor_map(fc_cuda_device *d, CUtensorMap *out, CUtensorMapDataType dtype, unsigned rank,
                             CUdeviceptr addr, const cuuint64_t *dims, const cuuint64_t *strides,
                             const cuuint32_t *box, CUtensorMapSwizzle swizzle);

/* A launch configuration. */
typedef struct fc_cuda_launch_cfg {
    unsigned grid[3];      /* blocks in x, y, z (each >= 1) */
    unsigned block[3];     /* threads in x, y, z (each >= 1) */
    unsigned shared_bytes; /* dynamic shared memory per block */
    CUstream stream;       /* NULL: the device's stream */
    /* fc_cuda_launch: a programmatic dependent (fc_launch.pdl: f waits,
     * griddepcontrol.wait, before it touches memory), launched with
     * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION so that it may
     * start while the kernel before it on the stream finishes. Where the
     * device (below sm 90) or the driver (no cuLaunchKernelEx) cannot, a
     * plain launch. The graph calls take the edge's type as an argument
     * instead and ignore it. */
    bool programmatic;
} fc_cuda_launch_cfg;

/* Launch f. args[i] points at the value of parameter i, as cuLaunchKernel
 * takes them. Errors in the kernel itself show up at the next sync. */
fc_status fc_cuda_launch(fc_cuda_device *d, CUfunction f, const fc_cuda_launch_cfg *cfg, void **args);

/* Timing with a pair of events. start/stop record on stream s (NULL: the
 * device's stream); stop waits for the stop event and returns the time
 * between the two in milliseconds (resolution about 0.5 us). */
typedef struct fc_cuda_timer {
    CUevent start, stop;
} fc_cuda_timer;
fc_status fc_cuda_timer_create(fc_cuda_device *d, fc_cuda_timer *t);
fc_status fc_cuda_timer_start(fc_cuda_device *d, fc_cuda_timer *t, CUstream s);
fc_status fc_cuda_timer_stop(fc_cuda_device *d, fc_cuda_timer *t, CUstream s, float *ms);
void fc_cuda_timer_destroy(fc_cuda_device *d, fc_cuda_timer *t); /* zeroed ok */

/* CUDA Graphs. Capture is thread-local (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
 * it forbids unsafe calls such as cuMemAlloc on the capturing thread only,
 * so a library capture never disturbs other threads of the application.
 * capture_end instantiates the captured graph into *out (and frees the
 * graph itself). Capture on the device's own stream: pass NULL. */
fc_status fc_cuda_capture_begin(fc_cuda_device *d, CUstream s);
fc_status fc_cuda_capture_end(fc_cuda_device *d, CUstream s, CUgraphExec *out);
fc_status fc_cuda_graph_launch(fc_cuda_device *d, CUgraphExec g, CUstream s);
/* Upload g's work to the device on stream s without running it, so that
 * its first launch costs what any other does. */
fc_status fc_cuda_graph_upload(fc_cuda_device *d, CUgraphExec g, CUstream s);
void fc_cuda_graph_destroy(fc_cuda_device *d, CUgraphExec g); /* NULL is ignored */

/* Graphs built node by node (runtime/cuda/replay.c), so that each node's handle
 * is known and its parameters can be changed in the instantiated graph.
 * `dep` is the node the new one runs after (NULL: none). capture_end_graph
 * ends a capture and returns the graph itself (not instantiated); free it
 * with graph_free. A child graph is copied into its parent. */
fc_status fc_cuda_graph_create(fc_cuda_device *d, CUgraph *out);
fc_status fc_cuda_graph_add_kernel(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUfunction f,
                                   const fc_cuda_launch_cfg *cfg, void **args, CUgraphNode *out);
/* As fc_cuda_graph_add_kernel, with a programmatic edge from dep (a kernel
 * node): f may start as dep's blocks trigger (griddepcontrol.launch_dependents)
 * or finish and must wait for dep itself (griddepcontrol.wait). Where the
 * driver or device cannot (before CUDA 12.3, or below sm_90), a plain
 * edge: *programmatic says which. */
fc_status fc_cuda_graph_add_kernel_programmatic(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUfunction f,
                                                const fc_cuda_launch_cfg *cfg, void **args, CUgraphNode *out,
                                                bool *programmatic);
fc_status fc_cuda_graph_add_child(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUgraph child, CUgraphNode *out);
fc_status fc_cuda_graph_instantiate(fc_cuda_device *d, CUgraph g, CUgraphExec *out);
fc_status fc_cuda_capture_end_graph(fc_cuda_device *d, CUstream s, CUgraph *out);
/* New parameters for a kernel node, or a new child graph for a child node,
 * of an instantiated graph (the topology stays). */
fc_status fc_cuda_exec_set_kernel(fc_cuda_device *d, CUgraphExec e, CUgraphNode n, CUfunction f,
                                  const fc_cuda_launch_cfg *cfg, void **args);
fc_status fc_cuda_exec_set_child(fc_cuda_device *d, CUgraphExec e, CUgraphNode n, CUgraph child);
void fc_cuda_graph_free(fc_cuda_device *d, CUgraph g); /* NULL is ignored */

/* ------------------------------------------------------------------ */
/* NVRTC.                                                              */
/* ------------------------------------------------------------------ */

#define FC_NVRTC_MAX_OPTIONS 48
#define FC_NVRTC_OPTION_BYTES 8192

/*
 * The exact option list fc_nvrtc_compile passes to NVRTC, in order. Hash
 * every opt[i] (with fc_nvrtc_version) for a cache key. The strings point
 * into `storage` or at the caller's extra options, so the struct is valid as
 * long as those are; it needs no freeing.
 */
typedef struct fc_nvrtc_options {
    int count;
    const char *opt[FC_NVRTC_MAX_OPTIONS];
    char storage[FC_NVRTC_OPTION_BYTES];
} fc_nvrtc_options;

/*
 * Build the option list for a compile for sm_<major><minor>:
 *   --gpu-architecture=sm_XY   (omitted when an extra option sets the arch,
 *                              e.g. "--gpu-architecture=sm_90a" for wgmma)
 *   -std=c++17
 *   -default-device            (unannotated functions are __device__)
 *   -I<toolkit include dir>    (CUDA 13.0 NVRTC has no built-in cuda_fp16.h
 *                              or cuda_bf16.h; $FUSEC_CUDA_INCLUDE_DIR
 *                              overrides the build-time directory)
 *   extra[0..nextra)           (e.g. "--use_fast_math", "-lineinfo")
 * --use_fast_math is never on by default: it changes results (flush to
 * zero, approximate division and transcendentals), and fusec's numerics are
 * checked against the reference interpreter.
 */
fc_status fc_nvrtc_options_build(fc_context *ctx, int sm_major, int sm_minor, const char *const *extra,
                                 int nextra, fc_nvrtc_options *out);

/*
 * Compile CUDA C++ `source` to a cubin for sm_<major><minor>. `name` names
 * the program in NVRTC's log (NULL: "fusec_kernel.cu"). Kernels should be
 * extern "C" so that their names are not mangled. On success *cubin_out
 * owns the cubin (fc_bytes_free). On failure *cubin_out is empty and the
 * error on ctx holds the failing call, NVRTC's log and the numbered source
 * near the first error (more of it, as far as the message's FC_ERROR_MAX
 * bytes allow, when $FUSEC_DEBUG contains "code").
 */
fc_status fc_nvrtc_compile(fc_context *ctx, const char *source, const char *name, int sm_major, int sm_minor,
                           const char *const *extra_opts, int nextra, fc_bytes *cubin_out);

/*
 * Compile n units at once, each to its own cubin, with the options `opts`
 * (fc_nvrtc_options_build's), on up to `threads` threads (<= 1: in the
 * calling thread). cubins[i] gets unit i's cubin (fc_bytes_free each).
 * On failure every cubin is freed and ctx has the first failing unit's
 * error (in unit order, so the message does not depend on scheduling).
 */
fc_status fc_nvrtc_compile_many(fc_context *ctx, const char *const *sources, const char *const *names, int n,
                                const fc_nvrtc_options *opts, int threads, fc_bytes *cubins);
/* How many threads fc_nvrtc_compile_many should get for n units on this
 * machine: the CPUs online, at most 16 (NVRTC's memory per program) and n. */
int fc_nvrtc_threads(int n);

/* The version of the NVRTC library loaded (13.0 here). FC_ERR_RUNTIME if
 * NVRTC cannot say. */
fc_status fc_nvrtc_version(int *major, int *minor);

#endif

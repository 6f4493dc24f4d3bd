/*
 * program_impl.h - the CUDA program's layout and the functions its files
 * share (runtime/cuda/program_*.c; internal to them). One program's
 * life: program_compile.c makes it, variant_compile.c makes a dynamic
 * program's variant and program_variant.c its shapes, program_device.c
 * readies the device for it, program_launch.c queues its runs,
 * program_host_run.c runs it from host memory, program_exec.c frees and
 * describes it, program_plan.c keeps its plan for introspection.
 *
 * fc_compile runs the whole pipeline on a copy of the graph:
 *
 *   clone -> every dim static? -> fc_pipeline (passes, fusion, schedule,
 *   memory plan) -> fc_cuda_codegen (one CUDA C source, a launch list)
 *   -> NVRTC (a cubin for sm_XY)
 *
 * with the compile cache around it (docs/CACHE.md): a program compiled
 * before, by this process or another, comes whole from a level-2 entry and
 * skips everything above; a source compiled before gets its cubin from a
 * level-1 entry and skips NVRTC.
 *
 * What runs is the program's description (fc_program_desc, program.h):
 * the signature, the launches, where each value lives, the source. It
 * points into no graph, so a cache entry or an AOT file can carry it. A
 * cold compile builds it from the plan (build_desc); the plan and the
 * graph after the passes are kept only for introspection.
 *
 * NVRTC needs no GPU, so compiling works on any machine, and so do the
 * emit functions. Nothing is loaded on a device at compile time: the first
 * fc_run opens device 0, loads the module, resolves the kernels, allocates
 * the arena and, for a program with GEMMs, creates its cuBLASLt handle;
 * every later run reuses them. Lazy, so that a machine without a GPU (CI)
 * can compile and a program that is only inspected never touches the
 * driver.
 *
 * Library launches. A gemm (or matmul) group runs through cuBLASLt
 * (runtime/cuda/cublaslt.c) from the GEMM's description in fc_program_desc,
 * made at compile time, because a program from the cache or a file has no
 * graph to read it from. Its workspace (32 MiB) is the arena's tail. A
 * conv_cl group runs through cuDNN (runtime/cuda/cudnn.c) from its
 * convolution's description, with the same workspace: launches run one at
 * a time on one stream, in a CUDA Graph too.
 *
 * Storage. Each value a launch names gets its device pointer from its
 * storage class (see passes/memplan.c): a class rooted at a parameter lives
 * in the caller's input buffer; a class holding a graph result lives in the
 * caller's output buffer for that result; any other class lives in the
 * program's arena at plan->offset. Results that are not written by a
 * kernel in place (a parameter returned as it is, a view of a parameter, a
 * value returned twice) are copied device-to-device after the launches.
 */
#ifndef FC_RUNTIME_CUDA_PROGRAM_IMPL_H
#define FC_RUNTIME_CUDA_PROGRAM_IMPL_H

#include "runtime/cuda/program.h"
#include "runtime/backend.h"
#include "ir/switches.h"
/* program_compile.c's calls into the code generator (fc_cuda_codegen,
 * and fc_cuda_attention_hopper for the NVRTC options), until it includes
 * compile_driver.h as the other compile drivers do; and the plan that
 * struct fc_program keeps for introspection (program_plan.c). The other
 * files here call neither: scripts/check-layers.sh checks which objects
 * reference passes/ and codegen/. */
#include "passes/passes.h"
#include "lower/variant_desc.h"
#include "ir/timing.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/program_cache.h"
#include "runtime/cuda/dynamic.h"
#include "runtime/cuda/frame.h"
#include "runtime/cuda/replay.h"

#include <math.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Kernels may use up to 48 KiB of dynamic shared memory without opting in. */
#define DEFAULT_MAX_SHARED (48 * 1024)
/* Warm-up runs before a benchmark: module load, clocks, caches. */
#define BENCH_WARMUP 3

/*
 * The CUDA backend's executables are tagged types, one struct per role;
 * the public fc_program * points at one of them, and its tag (the first
 * member, after the backend's fc_exec_head) says which:
 *
 *   FC_PROG_STATIC    struct fc_program: a static executable (fc_compile of
 *                     a static graph, the cache, a file, a dynamic
 *                     program's specialization)
 *   FC_PROG_VARIANT   fc_prog_variant: a dynamic program's variant (kernels
 *                     taking the symbol values), its shared arena and graph
 *   FC_PROG_INSTANCE  fc_prog_instance: one shape of a variant, borrowing
 *                     its module, kernels, handle and arena
 *   FC_PROG_DYNAMIC   fc_prog_dynamic: a dynamic program, the handle the
 *                     caller holds; it owns (through runtime/cuda/dynamic.c)
 *                     its variant, instances and specializations
 *
 * A variant and an instance run as executables do: their first member is
 * a struct fc_program (tagged with their kind), so the launch, replay and
 * device code takes either. A dynamic program runs nothing itself and has
 * no executable's fields: only the signature, stats and times the public
 * calls read (fc_prog_dyn_of).
 */
typedef enum fc_prog_kind {
    FC_PROG_STATIC,
    FC_PROG_VARIANT,
    FC_PROG_INSTANCE,
    FC_PROG_DYNAMIC,
} fc_prog_kind;

/* The first member of every CUDA executable. */
typedef struct fc_prog_tag {
    fc_exec_head head; /* the CUDA backend's (runtime/backend.h) */
    fc_prog_kind kind;
} fc_prog_tag;

/* An executable: what runs launches. */
struct fc_program {
    fc_prog_tag tag;
    fc_context *ctx;
    fc_compile_options opts;
    fc_program_desc d;    /* what runs: signature, launches, storage, source */
    fc_bytes *kcubins;    /* per distinct kernel (d.src.kernels), its own cubin */
    fc_weights *weights;  /* a program from a file: the parameters' data it carried, or NULL */
    fc_compile_times times;
    int max_args;         /* most kernel parameters of any launch */
    int ngemms;           /* launches that run a GEMM through cuBLASLt */
    int nconvs;           /* launches that run a convolution through cuDNN */
    /* A cold compile of a graph with 2-D convolutions: whether they went to
     * cuDNN (it loaded: fc_cudnn_available), and the plan's line saying
     * which path they took and why ("" for a graph without them). */
    bool conv_library;
    char conv_note[320];

    /* Introspection only: fusec's copy of the graph after the passes, and
     * the plan. A cold compile keeps them; a program from the cache or a
     * file makes them on demand (materialize). An instance's plan is bound
     * to its shape and borrows or owns its graph (plan.owned_graph): g is
     * never an instance's to free. */
    fc_graph *g;
    fc_plan plan;

    /* Device state, made by the first run (ensure_device). An instance's
     * device, module, kernels, handle, arena and scratch are its
     * variant's, borrowed. */
    fc_cuda_device *dev;
    CUmodule *kmodules;   /* per distinct kernel (kcubins) */
    CUfunction *func; /* per launch; NULL for launches that are not kernels */
    bool funcs_ready;
    CUdeviceptr arena;   /* the intermediates, then (with GEMMs) the cuBLASLt workspace */
    /* The arena as mapped memory (fc_cuda_region): a specialization's
     * (freeing it waits for nothing), and a variant's when the device has
     * virtual memory management. */
    fc_cuda_region arena_region;
    fc_launch_params args; /* per-run scratch: the kernel parameters (runtime/cuda/replay.h) */
    fc_cublaslt *blas;   /* made by the first run of a program with GEMMs */
    CUdeviceptr blas_ws; /* its workspace, FC_CUBLASLT_WORKSPACE_BYTES inside the arena */
    fc_cudnn *dnn;       /* made by the first run of a program with convolutions; shares blas_ws */

    /* CUDA Graph replay (runtime/cuda/replay.c): built at the second run. */
    fc_replay *replay;
    bool graphs_decided; /* the options and environment were read (first run) */
    /* Load-time launches (fc_launch.loadtime): whether their results are
     * current, and by parameter index the address each parameter they read
     * had when they ran (0 for the parameters they do not read). */
    bool weights_loaded;
    CUdeviceptr *loaded_from;
    bool replay_off;     /* graphs are off, or building or patching one failed (stats say why) */
    fc_run_stats stats;

    /* A static executable that is a dynamic program's specialization: its
     * dynamic program's device and cuBLASLt handle, borrowed (program.h);
     * its arena is then arena_region's. NULL otherwise. */
    fc_device_lease *lease;
    bool specialization; /* a dynamic program's (fc_program_use_lease): FUSEC_LOG=spec traces it */

    /* The profile (program_profile.c): while nonzero, a run is tagged for
     * CUPTI (runtime/cuda/cupti.h): a replay of the graph with
     * profile_tag | FC_CUPTI_REPLAY, launch i of a run launch by launch
     * with profile_tag | i; profile_eager makes it go launch by launch.
     * Zero otherwise: a run tests it once. */
    uint64_t profile_tag;
    bool profile_eager;
    /* Each launch's NVTX range name ("fc_reduce_1f2e: reduce: ... @
     * model.ir:12-15"), made by the first run launched one by one. */
    char (*nvtx_names)[192];
};

/* A dynamic program's variant. */
typedef struct fc_prog_variant {
    fc_program x; /* tagged FC_PROG_VARIANT */
    /* The arena its instances share, and how often it moved. The arena is
     * arena_region's when the device has virtual memory management: it
     * grows in place and never moves (nor waits for the device); otherwise
     * it is one cuMemAlloc, freed and allocated again, larger, when a shape
     * needs more. */
    int64_t shared_arena_bytes;
    int64_t arena_reserved; /* what fc_program_reserve_arena mapped (the declared largest shape's need) */
    bool arena_moves;       /* no region: the arena is reallocated to grow */
    unsigned arena_gen;     /* bumped when the arena moves */
    /* A variant of frame kernels only: one graph for all its shapes
     * (enqueue_shared), which reads each shape's sizes and pointers from
     * the frame. shared_graph: the variant is such, and the shared graph
     * has not failed (then instances build graphs of their own). */
    bool shared_graph;
    fc_replay *shared_replay;
    /* A variant compiled with frame entries (d.src.frame_words > 0): the
     * table its kernels read their sizes and pointers from. Its shared
     * graph then never changes: a run writes the frame, not the graph
     * (runtime/cuda/frame.h). */
    fc_frame *frame;
    int frame_carrier; /* its carrier's launch (fc_cuda_src_frame_carrier), -1: the frame is copied */
    /* What each shape's instance is made from (lower/variant_desc.h): the
     * memory plan's layout, every value's storage kind, which grids are
     * per shape, each GEMM as types. The variant's own d.outputs[k].copy_from
     * holds each result's copy source (its bytes are per shape). */
    fc_variant_desc lowered;
} fc_prog_variant;

/* One shape of a variant (an "instance"): the variant's module and kernels
 * are borrowed, the kernels take these symbol values as trailing
 * arguments. One allocation holds it, its symbol values and its
 * description's arrays; the description's names, launch argument lists
 * and GEMM operand positions are the variant's (fc_variant_desc_at), so
 * freeing it is one free. */
typedef struct fc_prog_instance {
    fc_program x; /* tagged FC_PROG_INSTANCE */
    fc_prog_variant *variant;
    int64_t *syms;
    int nsyms;
    unsigned arena_gen; /* the variant's arena_gen its graph was built for */
} fc_prog_instance;

/* A dynamic program: the handle the caller holds. */
typedef struct fc_prog_dynamic {
    fc_prog_tag tag; /* FC_PROG_DYNAMIC */
    fc_context *ctx;
    fc_compile_options opts;
    fc_program_desc d; /* the signature (symbolic shapes), graph text and target; no launches */
    fc_compile_times times;
    fc_run_stats stats; /* the guards' and specializations' counters */
    /* Introspection only, made on demand from d.graph_text (materialize). */
    fc_graph *g;
    fc_plan plan;
    struct fc_dynamic *dyn; /* guards, specializations, the variant and its instances */
} fc_prog_dynamic;

static inline fc_prog_kind fc_prog_kind_of(const fc_program *p) {
    return ((const fc_prog_tag *)(const void *)p)->kind;
}
/* p as its role's type, or NULL when it is of another kind. */
static inline fc_prog_dynamic *fc_prog_dyn_of(const fc_program *p) {
    return p && fc_prog_kind_of(p) == FC_PROG_DYNAMIC ? (fc_prog_dynamic *)(void *)p : NULL;
}
static inline fc_prog_variant *fc_prog_variant_of(const fc_program *p) {
    return p && fc_prog_kind_of(p) == FC_PROG_VARIANT ? (fc_prog_variant *)(void *)p : NULL;
}
static inline fc_prog_instance *fc_prog_instance_of(const fc_program *p) {
    return p && fc_prog_kind_of(p) == FC_PROG_INSTANCE ? (fc_prog_instance *)(void *)p : NULL;
}
/* p as an executable (any kind but a dynamic program), else NULL. */
static inline fc_program *fc_prog_exec_of(const fc_program *p) {
    return p && fc_prog_kind_of(p) != FC_PROG_DYNAMIC ? (fc_program *)p : NULL;
}

struct fc_device_lease {
    pthread_mutex_t mu;
    fc_context *ctx;     /* errors of the lease's own device and handle */
    fc_cuda_device *dev; /* opened by the first borrower */
    fc_cublaslt *blas;   /* made by the first borrower with GEMMs */
};


/* A copy of s through ctx (fault injection applies); NULL on failure. */
static inline char *dup_str(fc_context *ctx, const char *s) {
    size_t n = strlen(s);
    char *c = fc_ctx_malloc(ctx, n + 1);
    if (c) memcpy(c, s, n + 1);
    return c;
}

/* FUSEC_LOG=spec: one step of making or freeing a program, from t0 to now
 * (a dynamic program's specializations, on its background thread). */
static inline void spec_step(const fc_program *p, const char *what, double t0) {
    if (p->specialization) fc_trace(FC_LOG_SPEC, "%.3f..%.3f [%s] %s", t0, fc_now_ms(), p->d.graph_name, what);
}

/* What a compile needs of NVRTC before it starts: the exact options (for
 * the keys and the compile) and the version (for the keys). */
typedef struct nvrtc_setup {
    const char *extra[4];
    int nextra;
    fc_nvrtc_options opts;
    int major, minor;
    bool version_known;
} nvrtc_setup;

/* Process-wide: a variant's arena growth (program_variant.c). */
extern pthread_mutex_t fc_prog_arena_lock;

/* program_compile.c */
int fc_prog_device_sm_count(void);
void fc_prog_set_target(fc_program_desc *d, const fc_compile_options *o);
fc_store fc_prog_store_at(const fc_plan_classes *c, int id, int64_t offset, int64_t bytes);
fc_store fc_prog_copy_source(const fc_plan_classes *c, const fc_graph *g, int k, int64_t bytes);
fc_status fc_prog_build_desc(fc_program *p);
void fc_prog_count_launch_args(fc_program *p);
fc_status fc_prog_nvrtc_setup_make(fc_program *p, nvrtc_setup *n);
fc_status fc_prog_get_cubin(fc_program *p, fc_cache *cache, const nvrtc_setup *nv, bool *from_cache);
/* A zeroed executable of this kind, size bytes (its role's struct). */
fc_program *fc_prog_new_exec(fc_context *ctx, fc_prog_kind kind, size_t size);
static inline fc_program *fc_prog_new_program(fc_context *ctx) {
    return fc_prog_new_exec(ctx, FC_PROG_STATIC, sizeof(fc_program));
}

/* program_plan.c: free a program's graph after the passes and its plan
 * (introspection; either may be empty). */
void fc_prog_introspection_free(fc_graph **g, fc_plan *plan);

/* program_variant.c */
fc_status fc_prog_grow_arena(fc_prog_variant *v, int64_t bytes, bool exact);

/* program_device.c */
fc_status fc_prog_check_supported(const fc_program *p);
int64_t fc_prog_arena_size(const fc_program *p, int64_t *ws_offset);
fc_status fc_prog_ensure_device(fc_program *p);

/* program_launch.c */
fc_status fc_prog_enqueue(fc_program *p, void *const *inputs, void *const *outputs, CUstream s);
fc_status fc_prog_prepare_run(fc_program *p);

/* The CUDA backend's compile, run and host run (its table is in program_exec.c). */
fc_status fc_prog_cuda_compile(fc_graph *g, const fc_compile_options *o, fc_program **out);
fc_status fc_prog_cuda_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream);
/* fc_program_run_host's checks of a call: a static program, nin inputs of
 * its parameters' types with data, nout outputs (program_host_run.c). */
fc_status fc_prog_host_check(fc_program *p, const fc_tensor *inputs, int nin, int nout);
/* Device buffers of a run from host memory: in[] uploaded from inputs,
 * out[] allocated (zeroed arrays; the caller frees what is nonzero). */
fc_status fc_prog_host_buffers(fc_program *p, const fc_tensor *inputs, CUdeviceptr *in, int nin, CUdeviceptr *out,
                               int nout);
struct fc_profile_rec;
/* The backend's profile entry (program_profile.c, runtime/profile.h). */
fc_status fc_prog_cuda_profile(fc_program *p, const fc_tensor *inputs, int nin, struct fc_profile_rec *r);
fc_status fc_prog_cuda_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout, double *median_ms, int bench_iters);

#endif

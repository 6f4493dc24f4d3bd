/*
 * program.h - compiled programs, seen from inside fusec (internal header).
 *
 * The public half is in fusec.h: fc_compile, fc_run, fc_program_free and
 * the emit functions (and, until they move there, the file, signature and
 * timing functions of runtime/cuda/aot.h). This header adds what the CLI, the
 * cache, AOT files and the tests need: the program's description (what
 * runs, with no graph: what a cache entry or a file holds); read access to
 * the plan, the launches and the cubin; counters; a host-to-host run with
 * an optional benchmark; and the numeric comparison against the reference
 * interpreter, with the tolerance of each dtype.
 *
 * docs/RUNTIME-PROGRAM.md describes the compile and run flow, the memory
 * plan and the tolerance table; docs/CACHE.md the cache; docs/AOT.md files.
 */
#ifndef FC_RUNTIME_PROGRAM_H
#define FC_RUNTIME_PROGRAM_H

#include "lower/program_desc.h"
#include "runtime/cuda/aot.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Not runtime/cuda/cuda.h: this header needs no CUDA header, so the CLI can use
 * it without the toolkit's include directory. fc_bytes is ir/ir.h's. */

/* "compiled", "kernel cache", "program cache", "file". */
const char *fc_program_origin_name(fc_program_origin o);

/*
 * Make a program from a description and the cubins of its distinct
 * kernels (kcubins: desc->src.nkernels of them, an fc_ctx_malloc'd array;
 * both moved into the program: *desc is zeroed and kcubins owned by it,
 * also on failure, when they are freed). The description must be valid
 * (fc_program_desc_decode checks one). For AOT files.
 */
fc_status fc_program_from_desc(fc_context *ctx, fc_program_desc *desc, fc_bytes *kcubins, fc_program_origin origin,
                               fc_program **out);
/*
 * A dynamic program's file holds its variant's cubins, not its plan: its
 * load compiles the graph again (passes and codegen) with the cubins of
 * the file given, by kernel name, in place of the cache and NVRTC. A
 * kernel whose source hashes differently from the one the file's cubin
 * was made from, or that the file lacks, fails the compile (FC_ERR_INPUT)
 * instead of being compiled: loading a file never runs NVRTC.
 */
typedef struct fc_given_cubin {
    char name[64];           /* the kernel (fc_cuda_kernel.name) */
    uint8_t source_hash[16]; /* fc_program_kernel_source_hash of its source */
    const uint8_t *data;     /* its cubin (borrowed) */
    size_t size;
    bool used;               /* set by the compile that took it */
} fc_given_cubin;
/* This thread's compiles take their kernels' cubins from k[0..n) (NULL, 0:
 * the cache and NVRTC again). */
void fc_program_give_cubins(fc_given_cubin *k, int n);
/* The hash of a kernel's source that fc_given_cubin records. */
void fc_program_kernel_source_hash(const char *source, uint8_t out[16]);

/* The parameters' data a program file carried (fc_program_weights), moved
 * into p (freed with it). */
void fc_program_set_weights(fc_program *p, fc_weights *w);
/* The program's description. */
const fc_program_desc *fc_program_desc_of(const fc_program *p);
/* How many of p's CUDA Graph edges are programmatic (0 before its graph is
 * built, or without one): the skinny GEMMs' (docs/RUNTIME-GRAPHS.md). */
int fc_program_programmatic_edges(const fc_program *p);
fc_program_origin fc_program_origin_of(const fc_program *p);
/* The context the program reports errors to. */
fc_context *fc_program_context(const fc_program *p);
/* p's cuBLASLt handle (an instance's is its variant's); NULL before its
 * first run or without GEMMs. */
struct fc_cublaslt *fc_program_blas(const fc_program *p);
/* p's device handle (NULL before its first run or prepare); tests. */
const struct fc_cuda_device *fc_program_device(const fc_program *p);
/* The program's times, to be filled in by whoever made it (a load). */
fc_compile_times *fc_program_times_ref(fc_program *p);

/* The NVRTC options a program for sm (90 for 9.0) adds to
 * fc_nvrtc_options_build's own (extra must have room for 4); returns how
 * many. Every compile of a program's source (cubin, PTX, AOT) uses these.
 * On sm 90: sm_90a, for the Hopper attention and skinny kernels, which
 * the codegen then emits (fc_cuda_attention_hopper, codegen/cuda/attention.h);
 * with a switch that changes the source set (the table's `source`
 * column: FUSEC_SKINNY, FUSEC_VARIANT_GEMM), a marker macro. */
int fc_program_extra_nvrtc_options(int sm, bool fast_math, const char **extra);
/* The name of the program's source in NVRTC's messages: "fusec_<graph>.cu". */
void fc_program_unit_name(const char *graph_name, char *buf, size_t n);

/* ------------------------------------------------------------------ */
/* Counters, for tests and tools: process-wide, since the start.       */
/* ------------------------------------------------------------------ */
typedef struct fc_compile_counters {
    uint64_t compiles;       /* fc_compile calls that succeeded */
    uint64_t program_hits;   /* ...of which came from a level-2 entry */
    uint64_t kernel_hits;    /* cubins found in the cache (level 1) */
    uint64_t nvrtc_compiles; /* cubins NVRTC made for fc_compile */
} fc_compile_counters;

void fc_compile_counters_get(fc_compile_counters *out);

/* ------------------------------------------------------------------ */
/* Accessors. Everything returned is owned by the program.             */
/* ------------------------------------------------------------------ */

/*
 * The graph that was compiled, after the passes, and its plan (groups in
 * launch order, the memory plan). A cold compile has them. A program from
 * the cache or from a file ran no passes: the first call parses the
 * program's graph text and runs the passes on it (the result is kept), so
 * these cost a compile's passes then. For introspection only: the runtime
 * never uses them, and their value ids need not be the launches' ids.
 * NULL on failure (the error on the program's context).
 */
fc_graph *fc_program_graph(fc_program *p);
/* (passes/passes.h has the plan's type: a reader includes it) */
typedef struct fc_plan fc_plan;
const fc_plan *fc_program_plan(fc_program *p);
/* fc_program_plan_dot of that plan (program_plan.c). */
char *fc_prog_plan_dot(fc_program *p);
/* The launches, in order (kernels, library calls and aliases). */
int fc_program_num_launches(const fc_program *p);
const fc_launch *fc_program_launch(const fc_program *p, int i);
/* How many launches of each kind; any pointer may be NULL. */
void fc_program_count_launches(const fc_program *p, int *kernels, int *library, int *aliases);
/* How many cuBLASLt heuristic queries the program's runs have made (one
 * per distinct GEMM problem: later runs reuse the algorithms); 0 before
 * the first run. For tests. */
int fc_program_gemm_queries(const fc_program *p);
/* How many of those algorithms came from the on-disk cache instead of a
 * heuristic query (a warm cache answers them all). */
int fc_program_gemm_disk_hits(const fc_program *p);
/* The CUDA target the cubin was compiled for, major*10+minor (90: sm_90). */
int fc_program_sm(const fc_program *p);
/* A cubin of the program, for sm fc_program_sm(p): its first kernel's
 * (an empty one for a program without kernels). */
const fc_bytes *fc_program_cubin(const fc_program *p);
/* A program's distinct kernels (d.src.kernels: launches of the same
 * computation share one), and the cubin of kernel k, made alone (a
 * program from a file has each in the file). fc_program_cubin is kernel
 * 0's. */
int fc_program_nkernels(const fc_program *p);
const fc_bytes *fc_program_kernel_cubin(const fc_program *p, int k);

/* fc_program_run_host, the tolerances and fc_compare_outputs are public
 * (fusec.h). */

#endif

/* ------------------------------------------------------------------ */
/* Dynamic programs (runtime/cuda/dynamic.c, docs/DYNAMIC.md).              */
/* ------------------------------------------------------------------ */
struct fc_dynamic;
/* The dynamic variant of g (symbols unbound): the dynamic pipeline and
 * codegen, NVRTC (through the kernel cache); it never runs itself. */
fc_status fc_program_compile_variant(fc_graph *g, const fc_compile_options *o, fc_program **out);
/* One shape of variant v: its memory plan, description, grids and GEMM
 * descriptions, evaluated from v's lowered description
 * (lower/variant_desc.h) in one allocation: no pass and no code
 * generator runs. It borrows v's module, kernels, cuBLASLt handle, arena
 * and parameter scratch; its graph and plan (fc_program_plan) are v's.
 * Free it (before v) with fc_program_free. FC_ERR_INPUT for a binding
 * that does not fit the graph. */
fc_status fc_program_instance(fc_program *v, const int64_t *syms, int nsyms, fc_program **out);
/* Open the device, load the module, allocate what a run needs and choose
 * every GEMM's algorithm, now (a dynamic program's background thread does
 * this for each specialization it builds). */
fc_status fc_program_prepare(fc_program *p);
/* Build p's CUDA Graph now, for the caller's pointers inputs/outputs
 * (placeholders: nothing runs, and the first run patches whatever moved),
 * so that p's first run replays it instead of launching one by one and its
 * second run does not pay for the build. A dynamic program's background
 * thread does this for each specialization, with the pointers of the run
 * that missed. FC_ERR_UNSUPPORTED when p does not replay (graphs off), or
 * has fused sibling GEMMs (their concatenated weights are made by a run);
 * its graph is then built at its second run as usual. */
fc_status fc_program_prebuild_graph(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout);
/* The size a variant's arena should grow to ahead of need after a run of
 * instance inst (twice what inst needs, when the arena holds less and
 * grows in place), else 0. Any thread. */
int64_t fc_program_arena_ahead_bytes(fc_program *inst);
/* Grow variant v's arena to `bytes` ahead of need (a dynamic program's
 * background thread, while the caller's thread runs instances): only an
 * arena that grows in place, best effort (on failure nothing changes and
 * a run that needs the memory grows it then). True when it grew. */
bool fc_program_arena_ahead(fc_program *v, int64_t bytes);
/*
 * What a dynamic program lends the specializations its background thread
 * makes and frees while the caller's thread launches (docs/DYNAMIC.md):
 * one device handle (its stream and primary context) and one cuBLASLt
 * handle for all of them, made by the first that needs them. A
 * specialization then makes no stream and no cuBLASLt handle, and keeps
 * its arena and concatenated weights in mapped memory (fc_cuda_region),
 * whose release does not wait for the device: in another thread, a stream
 * create or destroy, cublasLtCreate and cuMemFree each stall the caller's
 * launches (docs/PERF.md has the times).
 * A lease is shared by the threads of one dynamic program (it locks
 * itself); free it after every program that used it.
 */
typedef struct fc_device_lease fc_device_lease;
fc_device_lease *fc_device_lease_new(void); /* NULL: out of memory */
void fc_device_lease_free(fc_device_lease *l);  /* NULL is ignored */
/* Before p's first run or prepare: p uses l (NULL: its own device, as any
 * program). */
void fc_program_use_lease(fc_program *p, fc_device_lease *l);
/* Map variant v's arena for the shape of these symbol values now, exactly
 * its need (fc_program_reserve): opens the device and loads the module if
 * no run has yet. Shapes within it then grow nothing, ahead or not. */
fc_status fc_program_reserve_arena(fc_program *v, const int64_t *syms, int nsyms);
/* A variant of frame kernels: its one graph (the shared graph every shape
 * replays) built, instantiated and uploaded now, from instance inst,
 * before any run, so that the program's first run costs what a new
 * shape's does (fc_program_reserve). Opens the device and loads the module
 * if no run has yet. FC_OK with nothing to do when the variant has no
 * frame, graphs are off, or the graph exists; on failure the first run
 * builds it as usual. */
fc_status fc_program_prebuild_shared_graph(fc_program *inst);
/* The CUDA backend's fc_run_shaped and fc_program_stats (a dynamic
 * program's guards and specializations, or a static program's run), in
 * runtime/cuda/dynamic.c. */
fc_status fc_cuda_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                             void *stream);
void fc_cuda_program_stats(const fc_program *p, fc_run_stats *out);
/* An empty program that only carries a dynamic program's state. */
fc_program *fc_program_new_shell(fc_context *ctx, const fc_compile_options *o);
void fc_program_set_dynamic(fc_program *p, struct fc_dynamic *dyn);
struct fc_dynamic *fc_program_dynamic(const fc_program *p);
fc_run_stats *fc_program_stats_ref(fc_program *p);
/* Give shell p the signature (symbolic shapes), graph text and target of g. */
fc_status fc_program_set_signature(fc_program *p, fc_graph *g);

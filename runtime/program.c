/*
 * program.c - compiled programs: fc_compile, fc_run and what they emit.
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
 * (runtime/cublaslt.c) from the GEMM's description in fc_program_desc,
 * made at compile time, because a program from the cache or a file has no
 * graph to read it from. Its workspace (32 MiB) is the arena's tail.
 *
 * Storage. Each value a launch names gets its device pointer from its
 * storage class (see passes/memplan.c): a class rooted at a parameter lives
 * in the caller's input buffer; a class holding a graph result lives in the
 * caller's output buffer for that result; any other class lives in the
 * program's arena at plan->offset. Results that are not written by a
 * kernel in place (a parameter returned as it is, a view of a parameter, a
 * value returned twice) are copied device-to-device after the launches.
 */
#include "runtime/program.h"
#include "codegen/cuda/attention.h"
#include "ir/timing.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/interp.h"
#include "runtime/program_cache.h"
#include "runtime/dynamic.h"
#include "runtime/frame.h"
#include "runtime/replay.h"

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

struct fc_program {
    fc_context *ctx;
    fc_compile_options opts;
    fc_program_desc d;    /* what runs: signature, launches, storage, source */
    fc_bytes cubin;       /* NVRTC's cubin of d.src.source (an AOT file: the whole file) */
    fc_compile_times times;
    int max_args;         /* most kernel parameters of any launch */
    int ngemms;           /* launches that run a GEMM through cuBLASLt */

    /* Introspection only: fusec's copy of the graph after the passes, and
     * the plan. A cold compile keeps them; a program from the cache or a
     * file makes them on demand (materialize). */
    fc_graph *g;
    fc_plan plan;

    /* Device state, made by the first run (ensure_device). */
    fc_cuda_device *dev;
    CUmodule module;
    CUfunction *func; /* per launch; NULL for launches that are not kernels */
    bool funcs_ready;
    CUdeviceptr arena;   /* the intermediates, then (with GEMMs) the cuBLASLt workspace */
    fc_launch_params args; /* per-run scratch: the kernel parameters (runtime/replay.h) */
    fc_cublaslt *blas;   /* made by the first run of a program with GEMMs */
    CUdeviceptr blas_ws; /* its workspace, FC_CUBLASLT_WORKSPACE_BYTES inside the arena */

    /* CUDA Graph replay (runtime/replay.c): built at the second run. */
    fc_replay *replay;
    bool graphs_decided; /* the options and environment were read (first run) */
    bool replay_off;     /* graphs are off, or building or patching one failed (stats say why) */
    fc_run_stats stats;

    /* One shape of a dynamic program's variant (an "instance"): the
     * variant's module and kernels are borrowed, the kernels take these
     * symbol values as trailing arguments. */
    fc_program *variant;
    int64_t *syms;
    int nsyms;
    unsigned arena_gen;         /* instance: the variant's arena_gen its graph was built for */
    /* A variant: the arena its instances share, and how often it moved.
     * The arena is arena_region's when the device has virtual memory
     * management: it grows in place and never moves (nor waits for the
     * device); otherwise it is one cuMemAlloc, freed and allocated again,
     * larger, when a shape needs more. */
    int64_t shared_arena_bytes;
    int64_t arena_reserved; /* what fc_program_reserve_arena mapped (the declared largest shape's need) */
    fc_cuda_region arena_region;
    bool arena_moves; /* no region: the arena is reallocated to grow */
    /* A variant whose launches are all kernels: one graph for all its
     * shapes, re-pointed at each shape's grids and sizes when the shape
     * changes (enqueue_shared). It holds the shape of instance shared_owner
     * (ids from next_instance_id) and the arena of generation shared_gen.
     * shared_graph: the variant is all kernels, $FUSEC_SHARED_GRAPH is
     * not 0 and the shared graph has not failed (then instances build
     * graphs of their own). */
    bool shared_graph;
    fc_replay *shared_replay;
    /* A variant compiled with frame entries (d.src.frame_words > 0): the
     * table its kernels read their sizes and pointers from. Its shared
     * graph then never changes: a run writes the frame, not the graph
     * (runtime/frame.h). */
    fc_frame *frame;
    int frame_carrier; /* its carrier's launch (fc_cuda_src_frame_carrier), -1: the frame is copied */
    uint64_t shared_owner, next_instance_id;
    unsigned shared_gen;
    uint64_t instance_id; /* instance: its id in the variant (from 1) */
    bool plan_owns_graph;       /* g is plan.owned_graph (an instance's bound plan) */
    /* A variant of kernels only: what each shape's instance is made from
     * (instance_from_layout). The memory plan's layout (the classes, their
     * lifetimes, the sizes as formulas: only the placement is per shape),
     * and every value's storage kind and index, which do not depend on
     * the shape either (an arena value's index is its offset, per shape).
     * The variant's own d.outputs[k].copy_from holds each result's copy
     * source the same way (its bytes are per shape). */
    fc_memplan_layout *layout;
    fc_store *store_kind;
    bool *grid_sized; /* by launch: its grid depends on the symbols (else the variant's is every shape's) */
    /* An instance made from the layout: its description's arrays live in
     * the program's own allocation, and its names and launch argument
     * lists are the variant's, so they are not freed one by one. */
    bool desc_inline;

    /* A dynamic program (runtime/dynamic.c): guards, specializations. */
    struct fc_dynamic *dyn;
    /* A specialization: its dynamic program's device and cuBLASLt handle,
     * borrowed (program.h). Its arena is then arena_region's too. */
    fc_device_lease *lease;
    bool specialization; /* a dynamic program's (fc_program_use_lease): FUSEC_LOG=spec traces it */
};

struct fc_device_lease {
    pthread_mutex_t mu;
    fc_context *ctx;     /* errors of the lease's own device and handle */
    fc_cuda_device *dev; /* opened by the first borrower */
    fc_cublaslt *blas;   /* made by the first borrower with GEMMs */
};

/* Process-wide counters (fc_compile_counters_get). */
static _Atomic uint64_t count_compiles, count_program_hits, count_kernel_hits, count_nvrtc;

/* A copy of s through ctx (fault injection applies); NULL on failure. */
static char *dup_str(fc_context *ctx, const char *s) {
    size_t n = strlen(s);
    char *c = fc_ctx_malloc(ctx, n + 1);
    if (c) memcpy(c, s, n + 1);
    return c;
}

/* FUSEC_LOG=spec: one step of making or freeing a program, from t0 to now
 * (a dynamic program's specializations, on its background thread). */
static void spec_step(const fc_program *p, const char *what, double t0) {
    if (p->specialization) fc_trace(FC_LOG_SPEC, "%.3f..%.3f [%s] %s", t0, fc_now_ms(), p->d.graph_name, what);
}

/* ------------------------------------------------------------------ */
/* Options, descriptions, counters.                                    */
/* ------------------------------------------------------------------ */

void fc_compile_options_default(fc_compile_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device = FC_DEVICE_CUDA;
    o->sm = 0;
    o->fast_math = false;
    o->fuse = true;
    o->cuda_graphs = true;
    o->dynamic = false;
    o->max_specializations = 8;
    o->specialize = FC_SPECIALIZE_BACKGROUND;
}

/* Every compile of a program's source (the cubin, the PTX, an AOT file)
 * uses these, so the PTX is the PTX of the cubin. At most 3. */
int fc_program_extra_nvrtc_options(int sm, bool fast_math, const char **extra) {
    int n = 0;
    if (fast_math) extra[n++] = "--use_fast_math";
    /* sm_90a (wgmma, setmaxnreg) for the Hopper attention kernel, which the
     * codegen emits under the same condition. */
    if (fc_cuda_attention_hopper(sm)) extra[n++] = "--gpu-architecture=sm_90a";
    /* The switches that change the source and nothing else (FUSEC_ATTN_TMA,
     * FUSEC_ATTN_BN, ...): a macro no kernel reads, there only so that the
     * cache keys of the choices differ. */
    const char *sw = fc_cuda_source_switches();
    if (sw) extra[n++] = sw;
    return n;
}

void fc_program_unit_name(const char *graph_name, char *buf, size_t n) {
    snprintf(buf, n, "fusec_%.64s.cu", graph_name ? graph_name : "program");
}

void fc_program_desc_release(fc_program_desc *d) {
    if (!d) return;
    free(d->graph_name);
    free(d->graph_text);
    for (int i = 0; d->params && i < d->nparams; i++) free(d->params[i].name);
    for (int i = 0; d->outputs && i < d->noutputs; i++) free(d->outputs[i].name);
    free(d->params);
    free(d->outputs);
    free(d->store);
    for (int i = 0; d->gemm && i < d->src.nlaunches; i++) fc_gemm_desc_release(&d->gemm[i]);
    free(d->gemm);
    fc_cuda_src_release(&d->src);
    memset(d, 0, sizeof *d);
}

const fc_gemm_desc *fc_program_gemm(const fc_program_desc *d, int i) {
    if (!d || !d->gemm || i < 0 || i >= d->src.nlaunches || !d->gemm[i].op_arg) return NULL;
    return &d->gemm[i];
}

fc_status fc_program_check_gemm(fc_context *ctx, const fc_program_desc *d, int i, char *why, size_t n) {
    const fc_gemm_desc *g = fc_program_gemm(d, i);
    if (!g) return FC_OK;
    const fc_launch *l = &d->src.launches[i];
    /* The bytes of each argument's buffer; launch arguments have storage
     * (build_desc and the decoder check that first). */
    int64_t small[16], *bytes = small;
    if (l->nargs > 16 && !(bytes = fc_ctx_malloc(ctx, sizeof *bytes * (size_t)l->nargs))) return FC_ERR_NOMEM;
    for (int a = 0; a < l->nargs; a++) bytes[a] = d->store[l->args[a]].bytes;
    bool ok = l->kind == FC_LAUNCH_LIBRARY && fc_gemm_desc_valid(g, l->nargs, bytes, why, n);
    if (l->kind != FC_LAUNCH_LIBRARY) snprintf(why, n, "a GEMM for a launch that is not a library call");
    if (bytes != small) fc_ctx_freemem(ctx, bytes);
    return ok ? FC_OK : FC_ERR_INPUT;
}

int64_t fc_program_tensor_bytes(const fc_program_tensor *t) {
    if (!t || (unsigned)t->dtype >= FC_DTYPE_COUNT || t->rank < 0 || t->rank > FC_MAX_RANK) return 0;
    int64_t n = (int64_t)fc_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && n > INT64_MAX / t->dims[i])) return 0;
        n *= t->dims[i];
    }
    return n;
}

const char *fc_program_origin_name(fc_program_origin o) {
    switch (o) {
    case FC_PROGRAM_COMPILED: return "compiled";
    case FC_PROGRAM_KERNEL_CACHE: return "kernel cache";
    case FC_PROGRAM_PROGRAM_CACHE: return "program cache";
    case FC_PROGRAM_FILE: return "file";
    }
    return "?";
}

void fc_compile_counters_get(fc_compile_counters *out) {
    if (!out) return;
    out->compiles = atomic_load(&count_compiles);
    out->program_hits = atomic_load(&count_program_hits);
    out->kernel_hits = atomic_load(&count_kernel_hits);
    out->nvrtc_compiles = atomic_load(&count_nvrtc);
}

/* ------------------------------------------------------------------ */
/* Compiling.                                                          */
/* ------------------------------------------------------------------ */


/* Device 0's properties, when there is a device (NULL context: a missing
 * one is not an error here). */
static bool device_info(fc_cuda_device_info *info) {
    return fc_cuda_available(NULL) && fc_cuda_device_query(NULL, 0, info) == FC_OK;
}

/* sm 0 means the device's own compute capability, or sm_90 when there is
 * no device: NVRTC needs none, and the H100/H200 is the target. */
static int resolve_sm(int sm) {
    fc_cuda_device_info info;
    if (sm > 0) return sm;
    return device_info(&info) ? info.cc_major * 10 + info.cc_minor : 90;
}

/* The device's streaming multiprocessors, 0 when there is no device (the
 * code generator then assumes an H100/H200's 132). */
static int device_sm_count(void) {
    fc_cuda_device_info info;
    return device_info(&info) ? info.sm_count : 0;
}

/* What a description records of the compile options: the resolved target
 * and the switches that change the code or the GEMMs. */
static void set_target(fc_program_desc *d, const fc_compile_options *o) {
    d->sm = resolve_sm(o->sm);
    d->fast_math = o->fast_math;
    d->fuse = o->fuse;
    d->tf32 = o->allow_tf32;
}

/* Where value id lives (the table at the top of the file), given its
 * arena offset (-1: none) and its size. */
static fc_store store_at(const fc_plan_classes *c, int id, int64_t offset, int64_t bytes) {
    fc_store s = {FC_STORE_NONE, 0, 0};
    if (!c->val[id]) return s;
    s.bytes = bytes;
    const fc_value *r = c->val[c->root[id]];
    if (r->param_index >= 0) {
        s.kind = FC_STORE_INPUT;
        s.index = r->param_index;
    } else if (c->result_slot[r->id] >= 0) {
        s.kind = FC_STORE_OUTPUT;
        s.index = c->result_slot[r->id];
    } else if (offset >= 0) {
        s.kind = FC_STORE_ARENA;
        s.index = offset;
    }
    return s;
}

static fc_store store_of(const fc_plan_classes *c, const fc_plan *plan, int id) {
    const fc_value *v = c->val[id];
    return store_at(c, id, plan->offset ? plan->offset[id] : -1, v ? fc_value_bytes(v) : 0);
}

/* Where result k is copied from after the launches, when no kernel writes
 * it in place (a parameter, or a view of one, returned as it is; a class
 * whose result slot is another output); FC_STORE_NONE otherwise. bytes:
 * the result's size. */
static fc_store copy_source(const fc_plan_classes *c, const fc_graph *g, int k, int64_t bytes) {
    const fc_value *r = c->val[c->root[g->outputs[k]->id]];
    if (r->param_index >= 0) return (fc_store){FC_STORE_INPUT, r->param_index, bytes};
    if (c->result_slot[r->id] != k) return (fc_store){FC_STORE_OUTPUT, c->result_slot[r->id], bytes};
    return (fc_store){FC_STORE_NONE, 0, 0};
}

/* v's type (symbolic dims kept as they are). */
static void set_tensor_type(fc_program_tensor *t, const fc_value *v) {
    t->dtype = v->dtype;
    t->rank = v->rank;
    for (int d = 0; d < v->rank; d++) t->dims[d] = v->dims[d];
    t->value = v->id;
}

/* Check that every launch argument and every result has storage in the
 * plan's classes (so that a mismatch between the plan and the codegen
 * shows up at compile time, in CI, not as a bad pointer on a GPU), and
 * fill the description from them. */
static fc_status fill_desc(fc_program *p, const fc_plan_classes *c) {
    fc_graph *g = p->g;
    const fc_plan *plan = &p->plan;
    fc_program_desc *d = &p->d;

    /* A result class not rooted at a parameter must be written by a group. */
    for (int k = 0; k < g->noutputs; k++) {
        const fc_value *r = c->val[c->root[g->outputs[k]->id]];
        if (r->param_index >= 0) continue;
        bool written = false;
        for (int pos = 0; pos < plan->ngroups && !written; pos++) {
            const fc_group *grp = plan->groups[pos];
            if (grp->kind == FC_GROUP_ALIAS) continue;
            for (int i = 0; i < grp->noutputs; i++) written |= grp->outputs[i] == r;
        }
        if (!written)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                "internal error: result %d of graph %s is not written by any kernel", k, g->name);
    }

    d->nvalues = c->nvalues;
    d->store = fc_ctx_malloc(p->ctx, sizeof *d->store * (size_t)(c->nvalues + 1));
    d->params = fc_ctx_malloc(p->ctx, sizeof *d->params * (size_t)(g->nparams + 1));
    d->outputs = fc_ctx_malloc(p->ctx, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    d->graph_name = dup_str(p->ctx, g->name);
    if (!d->store || !d->params || !d->outputs || !d->graph_name) return FC_ERR_NOMEM;
    memset(d->params, 0, sizeof *d->params * (size_t)(g->nparams + 1));
    memset(d->outputs, 0, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    for (int id = 0; id < c->nvalues; id++) d->store[id] = store_of(c, plan, id);

    for (int i = 0; i < g->nparams; i++) {
        fc_program_tensor *t = &d->params[i];
        set_tensor_type(t, g->params[i]);
        d->nparams = i + 1; /* so that release frees the names made so far */
        if (!(t->name = dup_str(p->ctx, g->params[i]->name ? g->params[i]->name : ""))) return FC_ERR_NOMEM;
    }
    for (int k = 0; k < g->noutputs; k++) {
        fc_program_tensor *t = &d->outputs[k];
        set_tensor_type(t, g->outputs[k]);
        t->copy_from = copy_source(c, g, k, fc_value_bytes(g->outputs[k]));
    }
    d->noutputs = g->noutputs;
    d->arena_bytes = plan->arena_bytes;
    d->intermediate_bytes = plan->intermediate_bytes;

    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind == FC_LAUNCH_ALIAS) continue;
        for (int a = 0; a < l->nargs; a++) {
            int id = l->args[a];
            if (id < 0 || id >= d->nvalues || d->store[id].kind == FC_STORE_NONE)
                return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                    "internal error: launch %d (%s) argument %d is value %d, which has no storage "
                                    "in the memory plan",
                                    i, l->name, a, id);
        }
    }
    return FC_OK;
}

/* The node of library launch group `id`: its group's only node. */
static const fc_node *library_node(const fc_plan *plan, int id) {
    for (int i = 0; i < plan->ngroups; i++)
        if (plan->groups[i]->id == id) return plan->groups[i]->nnodes == 1 ? plan->groups[i]->nodes[0] : NULL;
    return NULL;
}

/*
 * Each library launch that cuBLASLt runs gets its GEMM's description, and
 * the description is checked against the storage now, as the launch
 * arguments are. A library call cuBLASLt cannot run (an integer matmul,
 * attention) gets none: compiling it is not an error, so that its plan
 * can be inspected, and running it fails with FC_ERR_UNSUPPORTED.
 */
static fc_status describe_gemms(fc_program *p) {
    fc_program_desc *d = &p->d;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        const fc_node *n = l->kind == FC_LAUNCH_LIBRARY ? library_node(&p->plan, l->group) : NULL;
        if (!n || (n->op != FC_OP_GEMM && n->op != FC_OP_MATMUL)) continue;
        if (!d->gemm) {
            size_t bytes = sizeof *d->gemm * (size_t)d->src.nlaunches;
            if (!(d->gemm = fc_ctx_malloc(p->ctx, bytes))) return FC_ERR_NOMEM;
            memset(d->gemm, 0, bytes);
        }
        fc_status st = fc_gemm_desc_of(p->ctx, n, l->args, l->nargs, &d->gemm[i]);
        if (st == FC_ERR_UNSUPPORTED) continue;
        char why[256] = "";
        if (st == FC_OK) st = fc_program_check_gemm(p->ctx, d, i, why, sizeof why);
        else if (st != FC_ERR_NOMEM) snprintf(why, sizeof why, "%.250s", p->ctx->error);
        if (st == FC_ERR_NOMEM) return st;
        if (st != FC_OK)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: launch %d (%s): its GEMM: %s", i, l->name,
                                why);
    }
    return FC_OK;
}

static fc_status build_desc(fc_program *p) {
    fc_plan_classes c;
    fc_status st = fc_plan_classes_make(p->ctx, &p->plan, &c);
    if (st == FC_OK) st = fill_desc(p, &c);
    fc_plan_classes_free(p->ctx, &c);
    return st == FC_OK ? describe_gemms(p) : st;
}

/* The most arguments of any launch (the size of the run's scratch), and
 * how many launches run a GEMM. */
static void count_launch_args(fc_program *p) {
    p->max_args = 0;
    p->ngemms = 0;
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind != FC_LAUNCH_ALIAS && l->nargs + l->nsyms > p->max_args) p->max_args = l->nargs + l->nsyms;
        if (fc_program_gemm(&p->d, i)) p->ngemms++;
    }
}

/* The cold path: passes, codegen, description. */
static fc_status plan_and_generate(fc_program *p, fc_graph *g) {
    p->g = fc_graph_clone(g);
    /* The clone does not say why it failed; the graph was checked above,
     * so it is memory unless its message says otherwise. */
    if (!p->g) return strstr(p->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;

    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = p->opts.fuse;
    double t = fc_now_ms();
    fc_status st = fc_pipeline(p->g, &fo, &p->plan);
    p->times.passes_ms = fc_now_ms() - t;
    if (st != FC_OK) return st;
    if (!p->plan.offset) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the plan has no memory plan");
    if (p->g->nparams != g->nparams || p->g->noutputs != g->noutputs)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                            "internal error: the passes changed the graph's signature (%d -> %d params, %d -> %d "
                            "results)",
                            g->nparams, p->g->nparams, g->noutputs, p->g->noutputs);

    t = fc_now_ms();
    p->plan.sm = p->d.sm;
    p->plan.sm_count = device_sm_count(); /* the attention kernel's persistent grid */
    st = fc_cuda_codegen(&p->plan, &p->d.src);
    if (st == FC_OK) st = build_desc(p);
    p->times.codegen_ms = fc_now_ms() - t;
    return st;
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

static fc_status nvrtc_setup_make(fc_program *p, nvrtc_setup *n) {
    n->nextra = fc_program_extra_nvrtc_options(p->d.sm, p->d.fast_math, n->extra);
    fc_status st = fc_nvrtc_options_build(p->ctx, p->d.sm / 10, p->d.sm % 10, n->extra, n->nextra, &n->opts);
    n->version_known = fc_nvrtc_version(&n->major, &n->minor) == FC_OK;
    return st;
}

/*
 * A level-2 lookup: on a hit, the description decoded from the entry
 * replaces p->d. An entry that does not decode, or that is not for this
 * very graph and these options (the key says it is; a check costs a
 * strcmp), is a miss: the cold path's put then replaces it. Only running
 * out of memory is an error.
 */
static fc_status lookup_program(fc_program *p, fc_cache *cache, const fc_cache_key *key, bool *hit) {
    *hit = false;
    void *bytes = NULL;
    size_t n = 0;
    fc_status st = fc_cache_get(cache, p->ctx, FC_CACHE_PROGRAM, key, &bytes, &n);
    if (st != FC_OK || !bytes) return st;
    fc_program_desc d;
    st = fc_program_desc_decode(p->ctx, bytes, n, &d);
    fc_free(bytes);
    if (st == FC_ERR_NOMEM) return st;
    if (st != FC_OK) {
        fc_cache_reject(cache, p->ctx, FC_CACHE_PROGRAM, key); /* corrupt, not a hit */
        return FC_OK;
    }
    if (d.sm != p->d.sm || d.fast_math != p->d.fast_math || d.fuse != p->d.fuse ||
        strcmp(d.graph_text, p->d.graph_text) != 0) {
        fc_program_desc_release(&d);
        fc_cache_reject(cache, p->ctx, FC_CACHE_PROGRAM, key);
        return FC_OK;
    }
    fc_program_desc_release(&p->d);
    p->d = d;
    *hit = true;
    return FC_OK;
}

/* A cubin as the cache gave it must still look like one: the checksum
 * proves the entry is what was written, not that what was written was
 * right. */
static bool looks_like_cubin(const void *data, size_t n) {
    return n > 64 && memcmp(data, "\x7f" "ELF", 4) == 0;
}

/* The cubin of p->d.src.source: from the cache (level 1), else NVRTC, then
 * stored. *from_cache says which. A failed store is not an error: the
 * compile succeeded (its message stays on the context). */
static fc_status get_cubin(fc_program *p, fc_cache *cache, const nvrtc_setup *nv, bool *from_cache) {
    *from_cache = false;
    fc_program_desc *d = &p->d;
    char unit[96];
    fc_program_unit_name(d->graph_name, unit, sizeof unit);
    fc_cache_key key = {{0}};
    if (cache) {
        double t = fc_now_ms();
        key = fc_kernel_cache_key(d->src.source, unit, d->sm, nv->opts.opt, nv->opts.count, nv->major, nv->minor);
        memcpy(d->kernel_key, key.bytes, sizeof d->kernel_key);
        void *bin = NULL;
        size_t n = 0;
        fc_status st = fc_cache_get(cache, p->ctx, FC_CACHE_KERNEL, &key, &bin, &n);
        p->times.cache_ms += fc_now_ms() - t;
        if (st != FC_OK) return st;
        if (bin && looks_like_cubin(bin, n)) {
            p->cubin.data = bin;
            p->cubin.size = n;
            atomic_fetch_add(&count_kernel_hits, 1);
            *from_cache = true;
            return FC_OK;
        }
        if (bin) fc_cache_reject(cache, p->ctx, FC_CACHE_KERNEL, &key);
        fc_free(bin);
    }
    double t = fc_now_ms();
    fc_status st = fc_nvrtc_compile(p->ctx, d->src.source, unit, d->sm / 10, d->sm % 10, nv->extra, nv->nextra,
                                    &p->cubin);
    p->times.nvrtc_ms += fc_now_ms() - t;
    atomic_fetch_add(&count_nvrtc, 1);
    if (st != FC_OK || !cache) return st;
    t = fc_now_ms();
    fc_cache_note_compile(cache);
    (void)fc_cache_put(cache, p->ctx, FC_CACHE_KERNEL, &key, p->cubin.data, p->cubin.size);
    p->times.cache_ms += fc_now_ms() - t;
    return FC_OK;
}

/* Store the description as a level-2 entry; failures are not errors. */
static void store_program(fc_program *p, fc_cache *cache, const fc_cache_key *key) {
    double t = fc_now_ms();
    fc_bytes blob = {NULL, 0};
    if (fc_program_desc_encode(p->ctx, &p->d, &blob) == FC_OK)
        (void)fc_cache_put(cache, p->ctx, FC_CACHE_PROGRAM, key, blob.data, blob.size);
    fc_bytes_free(&blob);
    p->times.cache_ms += fc_now_ms() - t;
}

/* The steps of fc_compile after the program exists; fc_compile frees the
 * program when one fails. */
static fc_status compile_program(fc_program *p, fc_graph *g) {
    fc_program_desc *d = &p->d;
    set_target(d, &p->opts);

    fc_cache *cache = NULL;
    fc_status st = fc_cache_global_open(p->ctx, &cache);
    if (st != FC_OK) return st;
    nvrtc_setup nv;
    st = nvrtc_setup_make(p, &nv);
    if (st != FC_OK) return st;
    /* Without NVRTC's version a cubin's key would not say which compiler
     * made it: do without the cache rather than risk a stale one. */
    if (fc_cache_mode_of(cache) == FC_CACHE_OFF || !nv.version_known) cache = NULL;

    /* The graph's canonical text: the level-2 key, and what a program from
     * the cache or a file re-plans from when asked for its plan. */
    double t = fc_now_ms();
    d->graph_text = fc_print(g);
    if (!d->graph_text) {
        if (strstr(p->ctx->error, "out of memory")) return FC_ERR_NOMEM;
        char why[512];
        snprintf(why, sizeof why, "%.500s", p->ctx->error);
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: cannot print graph %s: %s", g->name, why);
    }
    bool program_hit = false;
    fc_cache_key pkey = {{0}};
    if (cache) {
        pkey = fc_program_cache_key(d->graph_text, g, d->sm, d->fast_math, d->fuse, d->tf32, nv.opts.opt, nv.opts.count,
                                    nv.major, nv.minor);
        st = lookup_program(p, cache, &pkey, &program_hit);
        if (st != FC_OK) return st;
        p->times.cache_ms += fc_now_ms() - t; /* without a cache, the text is "other" time */
    }

    if (!program_hit && (st = plan_and_generate(p, g)) != FC_OK) return st;
    count_launch_args(p);
    bool kernel_hit = false;
    st = get_cubin(p, cache, &nv, &kernel_hit);
    if (st != FC_OK) return st;
    if (cache && !program_hit) store_program(p, cache, &pkey);
    if (cache) {
        /* Publish this compile's hits and misses now: a process that only
         * ever hits would otherwise never write them (puts flush too). */
        fc_context scratch = {0};
        (void)fc_cache_flush_stats(cache, &scratch);
    }
    p->times.origin = program_hit ? FC_PROGRAM_PROGRAM_CACHE
                      : kernel_hit ? FC_PROGRAM_KERNEL_CACHE
                                   : FC_PROGRAM_COMPILED;
    if (program_hit) atomic_fetch_add(&count_program_hits, 1);
    return FC_OK;
}

static fc_program *new_program(fc_context *ctx) {
    fc_program *p = fc_ctx_malloc(ctx, sizeof *p);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    return p;
}

static fc_status prepare_run(fc_program *p);
static fc_status check_buffers(const fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout);

/* ------------------------------------------------------------------ */
/* The dynamic variant and its instances (docs/DYNAMIC.md).            */
/* ------------------------------------------------------------------ */

/* The variant's signature: names, dtypes and (symbolic) shapes. Its
 * storage is per shape: an instance's description has it. */
static fc_status variant_signature(fc_program *p) {
    fc_graph *g = p->g;
    fc_program_desc *d = &p->d;
    d->params = fc_ctx_malloc(p->ctx, sizeof *d->params * (size_t)(g->nparams + 1));
    d->outputs = fc_ctx_malloc(p->ctx, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    d->graph_name = dup_str(p->ctx, g->name);
    if (!d->params || !d->outputs || !d->graph_name) return FC_ERR_NOMEM;
    memset(d->params, 0, sizeof *d->params * (size_t)(g->nparams + 1));
    memset(d->outputs, 0, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    for (int i = 0; i < g->nparams; i++) {
        set_tensor_type(&d->params[i], g->params[i]);
        d->nparams = i + 1;
        if (!(d->params[i].name = dup_str(p->ctx, g->params[i]->name ? g->params[i]->name : ""))) return FC_ERR_NOMEM;
    }
    for (int k = 0; k < g->noutputs; k++) set_tensor_type(&d->outputs[k], g->outputs[k]);
    d->noutputs = g->noutputs;
    return FC_OK;
}

/* A variant of kernels only: the memory plan's layout, every value's
 * storage kind and each result's copy source, made once, so that a shape's
 * instance only places the arena and evaluates sizes and grids. */
static fc_status variant_layout(fc_program *v) {
    fc_status st = fc_memplan_layout_make(&v->plan, &v->layout);
    if (st != FC_OK) return st;
    const int nv = fc_memplan_layout_nvalues(v->layout);
    fc_plan_classes c;
    if ((st = fc_plan_classes_make(v->ctx, &v->plan, &c)) != FC_OK) return st;
    /* Which values live in the arena does not depend on the sizes: a
     * placement at every symbol = 1 says which. */
    int64_t ones[FC_DYN_MAX_SYMS], arena, inter;
    for (int k = 0; k < FC_DYN_MAX_SYMS; k++) ones[k] = 1;
    int64_t *off = fc_ctx_malloc(v->ctx, sizeof *off * (size_t)(nv + 1));
    v->store_kind = fc_ctx_malloc(v->ctx, sizeof *v->store_kind * (size_t)(nv + 1));
    if (!off || !v->store_kind) st = FC_ERR_NOMEM;
    if (st == FC_OK) st = fc_memplan_layout_place(v->layout, ones, off, NULL, &arena, &inter);
    for (int id = 0; id < nv && st == FC_OK; id++) v->store_kind[id] = store_at(&c, id, off[id], 0);
    for (int k = 0; k < v->d.noutputs && st == FC_OK; k++) v->d.outputs[k].copy_from = copy_source(&c, v->g, k, 0);
    /* A kernel whose grid formulas are constants (a GEMM's persistent
     * grid) has the variant's grid at every shape. */
    const int nl = v->d.src.nlaunches;
    if (st == FC_OK && !(v->grid_sized = fc_ctx_malloc(v->ctx, sizeof *v->grid_sized * (size_t)(nl + 1))))
        st = FC_ERR_NOMEM;
    for (int i = 0; i < nl && st == FC_OK; i++) {
        const fc_launch *l = &v->d.src.launches[i];
        /* A frame kernel has one grid for every shape (frame_setup). */
        v->grid_sized[i] = l->kind == FC_LAUNCH_KERNEL && l->nsyms > 0 && !l->frame;
        if (v->grid_sized[i] && fc_mono_is_static(&l->grid_work[0]) && fc_mono_is_static(&l->grid_work[1]) &&
            fc_mono_is_static(&l->grid_work[2]))
            v->grid_sized[i] = false;
    }
    fc_ctx_freemem(v->ctx, off);
    fc_plan_classes_free(v->ctx, &c);
    return st;
}

static size_t round_up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Room for n + 1 elements of size elem at *at (16-byte aligned); *at moves
 * past them. Returns where they start. */
static size_t take(size_t *at, size_t elem, int n) {
    size_t start = *at;
    *at += round_up16(elem * (size_t)(n + 1));
    return start;
}

/*
 * The instance of a variant of kernels only at syms, from its layout: no
 * graph is bound and nothing is planned again. One allocation holds the
 * program, its symbol values, its memory plan's offsets and its
 * description (storage, signature, the variant's launches with this
 * shape's grids, or the variant's own for frame kernels); the per-shape
 * work is the arena placement, a size per distinct value shape and three
 * grid formulas per kernel whose grid is per shape. The result is
 * what binding the graph (fc_plan_bind, then build_desc) makes, value by
 * value (tests/test_dynamic.c checks it).
 */
static fc_status instance_from_layout(fc_program *v, const int64_t *syms, int nsyms, fc_program **out) {
    fc_status st = fc_graph_check_bind_values(v->plan.g, syms, nsyms);
    if (st != FC_OK) return st;
    const int nv = fc_memplan_layout_nvalues(v->layout), np = v->d.nparams, no = v->d.noutputs;
    const int nl = v->d.src.nlaunches;
    /* Frame kernels: the variant's launches themselves, whose grids are
     * every shape's (set when the variant's device is ready); else a copy
     * with this shape's grids. */
    const bool frame = v->d.src.frame_words > 0;
    /* The allocation's parts, one after another, each 16-byte aligned. */
    size_t at = round_up16(sizeof(fc_program));
    const size_t at_syms = take(&at, sizeof(int64_t), nsyms), at_offset = take(&at, sizeof(int64_t), nv),
                 at_bytes = take(&at, sizeof(int64_t), nv), at_store = take(&at, sizeof(fc_store), nv),
                 at_params = take(&at, sizeof(fc_program_tensor), np),
                 at_outputs = take(&at, sizeof(fc_program_tensor), no),
                 at_launches = frame ? 0 : take(&at, sizeof(fc_launch), nl);
    char *block = fc_ctx_malloc(v->ctx, at);
    if (!block) return fc_set_error(v->ctx, FC_ERR_NOMEM, "out of memory (a shape of program %s)", v->d.graph_name);
    fc_program *p = (fc_program *)(void *)block;
    memset(p, 0, sizeof *p);
    p->ctx = v->ctx;
    p->opts = v->opts;
    p->desc_inline = true;
    p->variant = v;
    p->instance_id = ++v->next_instance_id;
    p->syms = (int64_t *)(void *)(block + at_syms);
    memcpy(p->syms, syms, sizeof *syms * (size_t)nsyms);
    p->nsyms = nsyms;
    /* The plan: the variant's graph and groups (borrowed: it owns nothing),
     * the symbol values its grids are evaluated at, and the placement. */
    fc_plan *plan = &p->plan;
    plan->g = p->g = v->plan.g;
    p->plan_owns_graph = true; /* not p's to free */
    plan->groups = v->plan.groups;
    plan->ngroups = v->plan.ngroups;
    plan->group_of_node = v->plan.group_of_node;
    plan->sm = v->plan.sm;
    plan->nsyms = nsyms;
    plan->sym_values = p->syms;
    plan->offset = (int64_t *)(void *)(block + at_offset);
    int64_t *bytes = (int64_t *)(void *)(block + at_bytes);
    st = fc_memplan_layout_place(v->layout, syms, plan->offset, bytes, &plan->arena_bytes, &plan->intermediate_bytes);
    fc_program_desc *d = &p->d;
    /* The variant's target, as resolved (no device query per shape). */
    d->sm = v->d.sm;
    d->fast_math = v->d.fast_math;
    d->fuse = v->d.fuse;
    d->tf32 = v->d.tf32;
    d->graph_name = v->d.graph_name;
    d->arena_bytes = plan->arena_bytes;
    d->intermediate_bytes = plan->intermediate_bytes;
    d->nvalues = nv;
    d->store = (fc_store *)(void *)(block + at_store);
    for (int id = 0; id < nv; id++) {
        d->store[id] = v->store_kind[id];
        d->store[id].bytes = bytes[id];
        if (d->store[id].kind == FC_STORE_ARENA) d->store[id].index = plan->offset[id];
    }
    d->nparams = np;
    d->noutputs = no;
    d->params = (fc_program_tensor *)(void *)(block + at_params);
    d->outputs = (fc_program_tensor *)(void *)(block + at_outputs);
    for (int i = 0; i < np + no; i++) {
        fc_program_tensor *t = i < np ? &d->params[i] : &d->outputs[i - np];
        *t = i < np ? v->d.params[i] : v->d.outputs[i - np];
        for (int q = 0; q < t->rank; q++) t->dims[q] = fc_dim_value(t->dims[q], syms);
        if (i >= np && t->copy_from.kind != FC_STORE_NONE) t->copy_from.bytes = bytes[t->value];
    }
    d->src.nlaunches = nl;
    d->src.frame_words = v->d.src.frame_words;
    d->src.frame_carried = v->d.src.frame_carried;
    if (frame) d->src.launches = v->d.src.launches;
    else {
        d->src.launches = (fc_launch *)(void *)(block + at_launches);
        memcpy(d->src.launches, v->d.src.launches, sizeof(fc_launch) * (size_t)nl);
    }
    for (int i = 0; i < nl && st == FC_OK; i++)
        if (v->grid_sized[i]) st = fc_cuda_launch_grid(plan, &v->d.src.launches[i], d->src.launches[i].grid);
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->max_args = v->max_args;
    *out = p;
    return FC_OK;
}

fc_status fc_program_compile_variant(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    *out = NULL;
    double t0 = fc_now_ms();
    fc_program *p = new_program(g->ctx);
    if (!p) return FC_ERR_NOMEM;
    p->opts = *o;
    fc_program_desc *d = &p->d;
    set_target(d, o);
    fc_cache *cache = NULL;
    fc_status st = fc_cache_global_open(p->ctx, &cache);
    nvrtc_setup nv;
    if (st == FC_OK) st = nvrtc_setup_make(p, &nv);
    if (st == FC_OK && (fc_cache_mode_of(cache) == FC_CACHE_OFF || !nv.version_known)) cache = NULL;
    if (st == FC_OK) {
        p->g = fc_graph_clone(g);
        if (!p->g) st = strstr(p->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;
    }
    if (st == FC_OK) {
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.vertical = fo.horizontal = o->fuse;
        fo.dynamic = true;
        double t = fc_now_ms();
        st = fc_pipeline(p->g, &fo, &p->plan);
        p->times.passes_ms = fc_now_ms() - t;
    }
    if (st == FC_OK) {
        double t = fc_now_ms();
        p->plan.sm = d->sm;
        p->plan.sm_count = device_sm_count();
        st = fc_cuda_codegen(&p->plan, &d->src);
        if (st == FC_OK) st = variant_signature(p);
        p->times.codegen_ms = fc_now_ms() - t;
    }
    bool kernel_hit = false;
    if (st == FC_OK) {
        count_launch_args(p);
        st = get_cubin(p, cache, &nv, &kernel_hit);
    }
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->times.origin = kernel_hit ? FC_PROGRAM_KERNEL_CACHE : FC_PROGRAM_COMPILED;
    p->times.compile_ms = fc_now_ms() - t0;
    /* Kernels only: one graph for every shape, and instances made from the
     * layout (a cuBLASLt call's description is made from its bound node). */
    const bool kernels_only = fc_replay_kernels_only(d);
    p->shared_graph = kernels_only && !fc_env_is_zero("FUSEC_SHARED_GRAPH");
    if (kernels_only && (st = variant_layout(p)) != FC_OK) {
        fc_program_free(p);
        return st;
    }
    *out = p;
    return FC_OK;
}

fc_status fc_program_instance(fc_program *v, const int64_t *syms, int nsyms, fc_program **out) {
    *out = NULL;
    if (v->layout) return instance_from_layout(v, syms, nsyms, out);
    /* Library launches: the whole graph bound to the shape (a cuBLASLt
     * call's description is made from its bound node). */
    fc_program *p = new_program(v->ctx);
    if (!p) return FC_ERR_NOMEM;
    p->opts = v->opts;
    /* The variant's target, as resolved (no device query per shape). */
    p->d.sm = v->d.sm;
    p->d.fast_math = v->d.fast_math;
    p->d.fuse = v->d.fuse;
    p->d.tf32 = v->d.tf32;
    p->variant = v;
    p->instance_id = ++v->next_instance_id;
    fc_status st = fc_plan_bind(&v->plan, syms, nsyms, &p->plan);
    if (st == FC_OK) {
        /* The plan's graph: its own bound copy. */
        p->g = p->plan.g;
        p->plan_owns_graph = true;
        p->syms = fc_ctx_malloc(p->ctx, sizeof *p->syms * (size_t)(nsyms + 1));
        fc_launch *ls = fc_ctx_malloc(p->ctx, sizeof *ls * (size_t)(v->d.src.nlaunches + 1));
        if (!p->syms || !ls) {
            fc_ctx_freemem(p->ctx, ls);
            st = FC_ERR_NOMEM;
        } else {
            memcpy(p->syms, syms, sizeof *syms * (size_t)nsyms);
            p->nsyms = nsyms;
            /* The variant's launches, with this shape's grids. fc_cuda_src
             * frees the lists with free(). */
            p->d.src.launches = ls;
            for (int i = 0; i < v->d.src.nlaunches && st == FC_OK; i++) {
                ls[i] = v->d.src.launches[i];
                ls[i].args = malloc(sizeof(int) * (size_t)(ls[i].nargs + 1));
                if (!ls[i].args) {
                    st = FC_ERR_NOMEM;
                    break;
                }
                memcpy(ls[i].args, v->d.src.launches[i].args, sizeof(int) * (size_t)ls[i].nargs);
                p->d.src.nlaunches = i + 1;
                if (ls[i].kind == FC_LAUNCH_KERNEL) st = fc_cuda_launch_grid(&p->plan, &v->d.src.launches[i], ls[i].grid);
            }
        }
    }
    if (st == FC_OK) st = build_desc(p);
    /* Fused siblings' weights are the same at every shape: one
     * concatenation in the variant's handle serves them all. */
    for (int i = 0; st == FC_OK && i < p->d.src.nlaunches; i++)
        if (fc_program_gemm(&p->d, i)) p->d.gemm[i].share = &v->d.src.launches[i];
    if (st != FC_OK) {
        if (st == FC_ERR_NOMEM) fc_set_error(p->ctx, st, "out of memory (a shape of program %s)", v->d.graph_name);
        fc_program_free(p);
        return st;
    }
    count_launch_args(p);
    *out = p;
    return FC_OK;
}

fc_status fc_program_prepare(fc_program *p) {
    fc_status st = prepare_run(p);
    /* And every GEMM's algorithm, so the first run asks cuBLASLt nothing. */
    const double t = fc_now_ms();
    for (int i = 0; i < p->d.src.nlaunches && st == FC_OK && p->blas; i++)
        if (fc_program_gemm(&p->d, i)) st = fc_cublaslt_warm(p->blas, p->ctx, &p->d.gemm[i], FC_CUBLASLT_WORKSPACE_BYTES);
    if (p->blas) spec_step(p, "GEMM algorithms", t);
    return st;
}

fc_status fc_program_set_signature(fc_program *p, fc_graph *g) {
    p->g = g;
    fc_status st = variant_signature(p);
    p->g = NULL;
    if (st == FC_OK && !(p->d.graph_text = fc_print(g))) st = FC_ERR_NOMEM;
    set_target(&p->d, &p->opts);
    return st;
}

void fc_program_set_dynamic(fc_program *p, struct fc_dynamic *dyn) { p->dyn = dyn; }
struct fc_dynamic *fc_program_dynamic(const fc_program *p) { return p ? p->dyn : NULL; }
fc_run_stats *fc_program_stats_ref(fc_program *p) { return &p->stats; }
struct fc_cublaslt *fc_program_blas(const fc_program *p) { return p ? p->blas : NULL; }

const struct fc_cuda_device *fc_program_device(const fc_program *p) { return p ? p->dev : NULL; }

fc_program *fc_program_new_shell(fc_context *ctx, const fc_compile_options *o) {
    fc_program *p = new_program(ctx);
    if (p) p->opts = *o;
    return p;
}

fc_status fc_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    if (out) *out = NULL;
    if (!g) return FC_ERR_USAGE;
    fc_context *ctx = g->ctx;
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: out is NULL");
    if (g->status != FC_OK)
        return fc_set_error(ctx, g->status, "fc_compile: graph %s has an error from building it", g->name);
    if (!g->returned)
        return fc_set_error(ctx, FC_ERR_INPUT, "fc_compile: graph %s has no results (call fc_graph_return)",
                            g->name);
    fc_compile_options defaults;
    if (!o) {
        fc_compile_options_default(&defaults);
        o = &defaults;
    }
    if (o->device != FC_DEVICE_CUDA)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                            "fc_compile: only the CUDA device is supported here (the CPU backend is not built into "
                            "fc_compile yet)");
    if (o->sm < 0) return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad sm %d (90 means sm_90)", o->sm);
    /* A dynamic program when asked for and some symbol is unbound
     * (runtime/dynamic.c); a fully bound graph is static either way. */
    if (o->dynamic && fc_graph_check_static(g) != FC_OK) {
        fc_clear_error(ctx);
        return fc_dynamic_compile(g, o, out);
    }
    /* Before copying anything: the most common mistake, with its fix. */
    fc_status st = fc_graph_check_static(g);
    if (st != FC_OK) return st;

    double t0 = fc_now_ms();
    fc_program *p = new_program(ctx);
    if (!p) return FC_ERR_NOMEM;
    p->opts = *o;
    st = compile_program(p, g);
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->times.compile_ms = fc_now_ms() - t0;
    atomic_fetch_add(&count_compiles, 1);
    *out = p;
    return FC_OK;
}

fc_status fc_program_from_desc(fc_context *ctx, fc_program_desc *desc, fc_bytes *cubin, fc_program_origin origin,
                               fc_program **out) {
    if (out) *out = NULL;
    if (!desc || !cubin || !out) {
        fc_program_desc_release(desc);
        fc_bytes_free(cubin);
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_from_desc: NULL argument");
    }
    fc_program *p = new_program(ctx);
    if (!p) {
        fc_program_desc_release(desc);
        fc_bytes_free(cubin);
        return FC_ERR_NOMEM;
    }
    p->d = *desc;
    p->cubin = *cubin;
    memset(desc, 0, sizeof *desc);
    memset(cubin, 0, sizeof *cubin);
    fc_compile_options_default(&p->opts);
    p->opts.sm = p->d.sm;
    p->opts.fast_math = p->d.fast_math;
    p->opts.fuse = p->d.fuse;
    p->opts.allow_tf32 = p->d.tf32;
    p->times.origin = origin;
    count_launch_args(p);
    *out = p;
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Freeing.                                                            */
/* ------------------------------------------------------------------ */

void fc_program_free(fc_program *p) {
    if (!p) return;
    fc_dynamic_free(p->dyn);
    if (p->variant) {
        /* The device, module, kernels, cuBLASLt handle and arena are the
         * variant's. No synchronize: an instance owns no device memory, and
         * a graph still running is freed by the driver when it completes
         * (cuGraphExecDestroy). */
        fc_replay_free(p->replay, p->dev);
        if (p->blas)
            for (int i = 0; i < p->d.src.nlaunches; i++)
                if (fc_program_gemm(&p->d, i)) fc_cublaslt_forget(p->blas, &p->d.gemm[i]);
        p->replay = NULL;
        p->func = NULL;
        p->blas = NULL;
        p->arena = 0;
        p->module = NULL;
        p->dev = NULL;
        memset(&p->args, 0, sizeof p->args); /* the variant's scratch */
    }
    if (p->desc_inline) {
        /* Everything is in p's own allocation, or the variant's. */
        fc_ctx_freemem(p->ctx, p);
        return;
    }
    fc_ctx_freemem(p->ctx, p->syms);
    if (p->dev) {
        const double t0 = fc_now_ms();
        fc_replay_free(p->replay, p->dev);
        fc_replay_free(p->shared_replay, p->dev);
        fc_frame_free(p->frame, p->dev);
        spec_step(p, "freeing: graph", t0);
        /* Teardown errors are ignored, and kept off the context: nothing can
         * be done about them, and they must not hide an earlier error. The
         * synchronize makes sure no queued launch still uses the arena. */
        const fc_cuda_driver *cu = p->dev->cu;
        double t = fc_now_ms();
        (void)cu->CtxSetCurrent(p->dev->cuctx);
        (void)cu->CtxSynchronize();
        spec_step(p, "freeing: synchronized", t);
        t = fc_now_ms();
        fc_cublaslt_destroy(p->blas); /* it uses the device: before it is closed */
        spec_step(p, "freeing: cuBLASLt handle", t);
        t = fc_now_ms();
        if (p->arena_region.base) fc_cuda_region_free(p->dev, &p->arena_region);
        else if (p->arena) (void)cu->MemFree(p->arena);
        spec_step(p, "freeing: arena", t);
        t = fc_now_ms();
        if (p->module) (void)cu->ModuleUnload(p->module);
        spec_step(p, "freeing: module unloaded", t);
        t = fc_now_ms();
        fc_cuda_device_close(p->dev);
        spec_step(p, "freeing: device closed", t);
    }
    fc_ctx_freemem(p->ctx, p->func);
    fc_launch_params_free(p->ctx, &p->args);
    fc_memplan_layout_free(p->layout);
    fc_ctx_freemem(p->ctx, p->store_kind);
    fc_ctx_freemem(p->ctx, p->grid_sized);
    fc_bytes_free(&p->cubin);
    fc_program_desc_release(&p->d);
    fc_plan_release(&p->plan);
    if (!p->plan_owns_graph) fc_graph_free(p->g);
    fc_ctx_freemem(p->ctx, p);
}

/* ------------------------------------------------------------------ */
/* Accessors.                                                          */
/* ------------------------------------------------------------------ */

/* A program that ran no passes here (from the cache or a file) re-plans
 * its graph text when asked for its graph or plan. */
static fc_status materialize(fc_program *p) {
    if (p->g) return FC_OK;
    if (!p->d.graph_text)
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "program %s carries no graph text to plan from",
                            p->d.graph_name ? p->d.graph_name : "?");
    fc_graph *g = NULL;
    fc_status st = fc_parse(p->ctx, "<program graph>", p->d.graph_text, strlen(p->d.graph_text), NULL, NULL, 0, &g);
    if (st != FC_OK) return st;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = p->d.fuse;
    st = fc_pipeline(g, &fo, &p->plan);
    if (st != FC_OK) {
        fc_plan_release(&p->plan);
        memset(&p->plan, 0, sizeof p->plan);
        fc_graph_free(g);
        return st;
    }
    p->g = g;
    return FC_OK;
}

fc_graph *fc_program_graph(fc_program *p) { return p && materialize(p) == FC_OK ? p->g : NULL; }
const fc_plan *fc_program_plan(fc_program *p) { return p && materialize(p) == FC_OK ? &p->plan : NULL; }
int fc_program_num_launches(const fc_program *p) { return p ? p->d.src.nlaunches : 0; }
const fc_launch *fc_program_launch(const fc_program *p, int i) {
    return p && i >= 0 && i < p->d.src.nlaunches ? &p->d.src.launches[i] : NULL;
}
int fc_program_sm(const fc_program *p) { return p ? p->d.sm : 0; }
const fc_bytes *fc_program_cubin(const fc_program *p) { return p ? &p->cubin : NULL; }
const fc_program_desc *fc_program_desc_of(const fc_program *p) { return p ? &p->d : NULL; }
int fc_program_programmatic_edges(const fc_program *p) { return p && p->replay ? fc_replay_programmatic_edges(p->replay) : 0; }
fc_program_origin fc_program_origin_of(const fc_program *p) { return p ? p->times.origin : FC_PROGRAM_COMPILED; }

void fc_program_count_launches(const fc_program *p, int *kernels, int *library, int *aliases) {
    int k = 0, l = 0, a = 0;
    for (int i = 0; p && i < p->d.src.nlaunches; i++) {
        switch (p->d.src.launches[i].kind) {
        case FC_LAUNCH_KERNEL: k++; break;
        case FC_LAUNCH_LIBRARY: l++; break;
        case FC_LAUNCH_ALIAS: a++; break;
        }
    }
    if (kernels) *kernels = k;
    if (library) *library = l;
    if (aliases) *aliases = a;
}

int fc_program_gemm_queries(const fc_program *p) { return p ? fc_cublaslt_heuristic_queries(p->blas) : 0; }
int fc_program_gemm_disk_hits(const fc_program *p) { return p ? fc_cublaslt_disk_hits(p->blas) : 0; }

int fc_program_num_inputs(const fc_program *p) { return p ? p->d.nparams : 0; }
int fc_program_num_outputs(const fc_program *p) { return p ? p->d.noutputs : 0; }

static void tensor_type_of(const fc_program_tensor *t, fc_tensor *out) {
    memset(out, 0, sizeof *out);
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (int d = 0; d < t->rank; d++) out->shape[d] = t->dims[d];
    out->data = NULL;
}

fc_status fc_program_input(const fc_program *p, int i, fc_tensor *type, const char **name) {
    if (!p || !type || i < 0 || i >= p->d.nparams) {
        if (p) return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_program_input: bad input %d (or NULL type)", i);
        return FC_ERR_USAGE;
    }
    tensor_type_of(&p->d.params[i], type);
    if (name) *name = p->d.params[i].name;
    return FC_OK;
}

fc_status fc_program_output(const fc_program *p, int i, fc_tensor *type) {
    if (!p || !type || i < 0 || i >= p->d.noutputs) {
        if (p) return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_program_output: bad output %d (or NULL type)", i);
        return FC_ERR_USAGE;
    }
    tensor_type_of(&p->d.outputs[i], type);
    return FC_OK;
}

fc_compile_times *fc_program_times_ref(fc_program *p) { return p ? &p->times : NULL; }
fc_context *fc_program_context(const fc_program *p) { return p ? p->ctx : NULL; }

void fc_program_times(const fc_program *p, fc_compile_times *out) {
    if (!out) return;
    if (p) *out = p->times;
    else memset(out, 0, sizeof *out);
}

/* ------------------------------------------------------------------ */
/* Text: the plan, the source, the PTX.                                */
/* ------------------------------------------------------------------ */

/* What a program's plan, source and PTX show: a dynamic program shows its
 * dynamic variant (kernels with the dims as arguments), when it has one. */
static fc_program *shown(fc_program *p) {
    fc_program *v = p->dyn ? fc_dynamic_variant(p->dyn) : NULL;
    return v ? v : p;
}

char *fc_program_plan_text(fc_program *p) {
    if (!p) return NULL;
    p = shown(p);
    fc_strbuf t = {.ctx = p->ctx};
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        switch (l->kind) {
        case FC_LAUNCH_KERNEL:
            fc_strbuf_printf(&t, "launch %d: kernel %s grid=(%u,%u,%u) block=(%u,%u,%u) ops: %s\n", i, l->name,
                        l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->summary);
            break;
        case FC_LAUNCH_LIBRARY:
            fc_strbuf_printf(&t, "launch %d: library %s ops: %s\n", i, l->name[0] ? l->name : "matmul", l->summary);
            break;
        case FC_LAUNCH_ALIAS:
            fc_strbuf_printf(&t, "launch %d: alias (a view, nothing runs) ops: %s\n", i, l->summary);
            break;
        }
    }
    int kernels, library;
    fc_program_count_launches(p, &kernels, &library, NULL);
    fc_strbuf_printf(&t, "arena: %lld bytes peak (%lld bytes if every intermediate had its own buffer)\n",
                (long long)p->d.arena_bytes, (long long)p->d.intermediate_bytes);
    /* The last line, exactly: tests and scripts parse it. */
    fc_strbuf_printf(&t, "total: %d kernels, %d library calls, %lld bytes of intermediates\n", kernels, library,
                (long long)p->d.intermediate_bytes);
    if (t.oom || !t.buf) {
        fc_ctx_freemem(p->ctx, t.buf);
        fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (plan text)");
        return NULL;
    }
    return t.buf;
}

/* One line per step; the "why" column says what a zero means. */
char *fc_compile_times_text(const fc_compile_times *t) {
    if (!t) return NULL;
    fc_strbuf s = {0};
    const char *how = "";
    switch (t->origin) {
    case FC_PROGRAM_COMPILED: how = "compiled: passes, codegen and NVRTC ran"; break;
    case FC_PROGRAM_KERNEL_CACHE: how = "passes and codegen ran; the cubin came from the cache"; break;
    case FC_PROGRAM_PROGRAM_CACHE: how = "warm start: the whole program came from the cache"; break;
    case FC_PROGRAM_FILE: how = "loaded from a compiled program file"; break;
    }
    bool cached = t->origin == FC_PROGRAM_PROGRAM_CACHE || t->origin == FC_PROGRAM_FILE;
    /* What fc_compile spent outside the named steps: the clone, the
     * graph's text, building the program. */
    double other = t->compile_ms - t->passes_ms - t->codegen_ms - t->nvrtc_ms - t->cache_ms;
    if (other < 0) other = 0;
    double total = t->parse_ms + t->compile_ms + t->device_ms + t->load_ms;
    fc_strbuf_printf(&s, "time: %.3f ms to %s (%s)\n", total, t->loaded ? "the first run" : "a compiled program", how);
    fc_strbuf_printf(&s, "  parse    %10.3f ms\n", t->parse_ms);
    fc_strbuf_printf(&s, "  passes   %10.3f ms%s\n", t->passes_ms, cached ? "  (skipped)" : "");
    fc_strbuf_printf(&s, "  codegen  %10.3f ms%s\n", t->codegen_ms, cached ? "  (skipped)" : "");
    fc_strbuf_printf(&s, "  nvrtc    %10.3f ms%s\n", t->nvrtc_ms,
                t->origin == FC_PROGRAM_COMPILED ? "" : "  (skipped: cubin from the cache or the file)");
    fc_strbuf_printf(&s, "  cache    %10.3f ms\n", t->cache_ms);
    fc_strbuf_printf(&s, "  other    %10.3f ms\n", other);
    fc_strbuf_printf(&s, "  device   %10.3f ms%s\n", t->device_ms, t->loaded ? "" : "  (no run yet)");
    fc_strbuf_printf(&s, "  load     %10.3f ms%s\n", t->load_ms, t->loaded ? "" : "  (no run yet)");
    if (s.oom || !s.buf) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}

char *fc_program_cuda_source(fc_program *p) {
    if (!p) return NULL;
    p = shown(p);
    if (!p->d.src.source) {
        fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "program %s has no CUDA source", p->d.graph_name);
        return NULL;
    }
    return dup_str(p->ctx, p->d.src.source);
}

static fc_status get_ptx(fc_context *ctx, fc_nvrtc_unit *unit, char *buf) {
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetPTX(unit->prog, buf));
    return FC_OK;
}

/* Compile unit->source again and take the PTX; the caller destroys
 * unit->prog (each failing check already has). */
static fc_status compile_ptx(fc_context *ctx, fc_nvrtc_unit *unit, const fc_nvrtc_options *opts, char **out) {
    nvrtcProgram prog = NULL;
    FC_NVRTC_CHECK(ctx, unit, nvrtcCreateProgram(&prog, unit->source, unit->name, 0, NULL, NULL));
    unit->prog = prog;
    FC_NVRTC_CHECK(ctx, unit, nvrtcCompileProgram(unit->prog, opts->count, opts->opt));
    size_t size = 0;
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetPTXSize(unit->prog, &size));
    char *buf = fc_ctx_malloc(ctx, size + 1);
    if (!buf) return FC_ERR_NOMEM;
    fc_status st = get_ptx(ctx, unit, buf);
    if (st != FC_OK) {
        fc_ctx_freemem(ctx, buf);
        return st;
    }
    buf[size] = 0; /* the size counts NVRTC's terminator; this one is for safety */
    *out = buf;
    return FC_OK;
}

char *fc_program_ptx(fc_program *p) {
    if (!p) return NULL;
    p = shown(p);
    /* Not kept from fc_compile: few callers want it, and NVRTC makes it
     * again in a few milliseconds with exactly the same options. */
    if (!p->d.src.source) {
        fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "program %s has no CUDA source", p->d.graph_name);
        return NULL;
    }
    const char *extra[4];
    int nextra = fc_program_extra_nvrtc_options(p->d.sm, p->d.fast_math, extra);
    fc_nvrtc_options opts;
    if (fc_nvrtc_options_build(p->ctx, p->d.sm / 10, p->d.sm % 10, extra, nextra, &opts) != FC_OK) return NULL;
    char name[96];
    fc_program_unit_name(p->d.graph_name, name, sizeof name);
    fc_nvrtc_unit unit = {NULL, name, p->d.src.source};
    char *ptx = NULL;
    fc_status st = compile_ptx(p->ctx, &unit, &opts, &ptx);
    if (unit.prog) nvrtcDestroyProgram(&unit.prog);
    return st == FC_OK ? ptx : NULL;
}

/* ------------------------------------------------------------------ */
/* Running.                                                            */
/* ------------------------------------------------------------------ */

/* Every library launch must have a CUDA path: a GEMM description. */
static fc_status check_supported(const fc_program *p) {
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind != FC_LAUNCH_LIBRARY || fc_program_gemm(&p->d, i)) continue;
        if (!strcmp(l->name, "gemm") || !strcmp(l->name, "matmul"))
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                                "launch %d (%s: %s): cuBLASLt runs f32, f16 and bf16 GEMMs, and f64 ones without an "
                                "epilogue, not this one",
                                i, l->name, l->summary);
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                            "launch %d (%s): %s has no CUDA implementation yet (library calls on CUDA: gemm and "
                            "matmul, through cuBLASLt)",
                            i, l->summary, l->name);
    }
    return FC_OK;
}

/* The arena's size: the intermediates, then the cuBLASLt workspace when
 * the program runs GEMMs (*ws_offset: where it starts, 256-aligned). -1
 * when it does not fit an int64 (only a crafted description does that). */
static int64_t arena_size(const fc_program *p, int64_t *ws_offset) {
    const int64_t align = FC_CUBLASLT_WORKSPACE_ALIGN, ws = (int64_t)FC_CUBLASLT_WORKSPACE_BYTES;
    *ws_offset = 0;
    if (p->ngemms == 0) return p->d.arena_bytes;
    if (p->d.arena_bytes > INT64_MAX - align - ws) return -1;
    *ws_offset = (p->d.arena_bytes + align - 1) / align * align;
    return *ws_offset + ws;
}

static fc_status ensure_device(fc_program *p);

fc_device_lease *fc_device_lease_new(void) {
    fc_device_lease *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (!(l->ctx = fc_context_new())) {
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void fc_device_lease_free(fc_device_lease *l) {
    if (!l) return;
    if (l->dev) {
        (void)l->dev->cu->CtxSetCurrent(l->dev->cuctx);
        (void)l->dev->cu->CtxSynchronize();
    }
    fc_cublaslt_destroy(l->blas);
    fc_cuda_device_close(l->dev);
    fc_context_free(l->ctx);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void fc_program_use_lease(fc_program *p, fc_device_lease *l) {
    if (p && !p->dev) p->lease = l;
    if (p) p->specialization = true;
}

/* The lease's failure, said on p's context. Under l->mu. */
static fc_status lease_error(fc_program *p, fc_status st) {
    return fc_set_error(p->ctx, st, "%s", fc_last_error(p->lease->ctx));
}

/* p->dev: a handle on the lease's device, opened by its first borrower. */
static fc_status lease_device(fc_program *p) {
    fc_device_lease *l = p->lease;
    pthread_mutex_lock(&l->mu);
    fc_status st = l->dev ? FC_OK : fc_cuda_device_open(l->ctx, 0, &l->dev);
    if (st != FC_OK) st = lease_error(p, st);
    else st = fc_cuda_device_borrow(p->ctx, l->dev, &p->dev);
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* The lease's cuBLASLt handle (made by its first borrower with GEMMs),
 * for p's own handle to share. */
static fc_status lease_blas(fc_program *p, const fc_cublaslt **out) {
    fc_device_lease *l = p->lease;
    pthread_mutex_lock(&l->mu);
    fc_status st = FC_OK;
    if (!l->blas && (st = fc_cublaslt_create(l->ctx, l->dev, NULL, &l->blas)) != FC_OK) st = lease_error(p, st);
    *out = l->blas;
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* Scratch for the kernel parameters of the largest launch. */
static fc_status ensure_args(fc_program *p) {
    if (p->args.block) return FC_OK;
    return fc_launch_params_alloc(p->ctx, p->max_args, &p->args);
}

/* The variants' arena growths are serialized process-wide: the caller's
 * thread grows an arena for the shape it runs now (ensure_instance), a
 * dynamic program's background thread grows it ahead of need
 * (fc_program_arena_ahead). Growths are rare; one lock serves all. A
 * variant's shared_arena_bytes is written under it and read without it
 * (atomically) on every run. */
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

/* Make v's arena (a variant's) hold `bytes`: doubled at least (a sweep of
 * growing shapes grows it a few times), or exactly (fc_program_reserve's
 * declared largest shape). Under arena_lock. */
static fc_status grow_arena(fc_program *v, int64_t bytes, bool exact) {
    if (bytes <= v->shared_arena_bytes) return FC_OK; /* grown ahead meanwhile */
    if (!v->arena_region.base && !v->arena && fc_env_is_zero("FUSEC_ARENA_REGION"))
        v->arena_moves = true; /* measuring the reallocated arena (docs/DYNAMIC.md) */
    int64_t grown = !exact && v->shared_arena_bytes * 2 > bytes ? v->shared_arena_bytes * 2 : bytes;
    const double t0 = fc_now_ms();
    fc_status st = v->arena_moves ? FC_ERR_UNSUPPORTED : fc_cuda_region_grow(v->dev, &v->arena_region, (size_t)grown);
    if (st == FC_OK) {
        if (v->arena != v->arena_region.base) v->arena_gen++; /* its first growth */
        v->arena = v->arena_region.base;
        grown = (int64_t)v->arena_region.mapped;
    } else if (st == FC_ERR_UNSUPPORTED) {
        v->arena_moves = true;
        if (v->arena) {
            /* cuMemFree waits for the work that may still use it. */
            (void)fc_cuda_free(v->dev, v->arena);
            v->arena = 0;
            __atomic_store_n(&v->shared_arena_bytes, 0, __ATOMIC_RELEASE);
        }
        st = fc_cuda_alloc(v->dev, (size_t)grown, &v->arena);
        if (st != FC_OK) return st;
        v->arena_gen++;
    } else {
        return st;
    }
    __atomic_store_n(&v->shared_arena_bytes, grown, __ATOMIC_RELEASE);
    v->stats.arena_grows++;
    v->stats.arena_grow_ms += fc_now_ms() - t0;
    return FC_OK;
}

int64_t fc_program_arena_ahead_bytes(fc_program *inst) {
    fc_program *v = inst ? inst->variant : NULL;
    if (!v || !v->arena_region.base) return 0; /* only an arena that grows in place (never one that moves) */
    int64_t ws_offset = 0, bytes = arena_size(inst, &ws_offset);
    if (bytes <= 0 || bytes > INT64_MAX / 2) return 0;
    /* Within the declared largest shape: nothing more ahead. */
    if (bytes <= __atomic_load_n(&v->arena_reserved, __ATOMIC_ACQUIRE)) return 0;
    return 2 * bytes > __atomic_load_n(&v->shared_arena_bytes, __ATOMIC_ACQUIRE) ? 2 * bytes : 0;
}

bool fc_program_arena_ahead(fc_program *v, int64_t bytes) {
    bool grew = false;
    pthread_mutex_lock(&arena_lock);
    if (v && v->dev && v->arena_region.base && bytes > v->shared_arena_bytes) {
        /* The device as the caller's thread has it, but with errors going
         * to a context of this thread's own: a failure here is nobody's
         * error (the run that needs the memory grows the arena itself). */
        fc_context *scratch = fc_context_new();
        fc_cuda_device dev = fc_cuda_device_view(v->dev, scratch);
        if (scratch && fc_cuda_region_grow(&dev, &v->arena_region, (size_t)bytes) == FC_OK) {
            __atomic_store_n(&v->shared_arena_bytes, (int64_t)v->arena_region.mapped, __ATOMIC_RELEASE);
            grew = true;
        }
        fc_context_free(scratch);
    }
    pthread_mutex_unlock(&arena_lock);
    return grew;
}

fc_status fc_program_reserve_arena(fc_program *v, const int64_t *syms, int nsyms) {
    fc_program *inst = NULL;
    fc_status st = fc_program_instance(v, syms, nsyms, &inst);
    if (st != FC_OK) return st;
    int64_t ws_offset = 0, bytes = arena_size(inst, &ws_offset);
    fc_program_free(inst);
    if (bytes < 0) return fc_set_error(v->ctx, FC_ERR_RUNTIME, "program %s: an arena too large", v->d.graph_name);
    if ((st = ensure_device(v)) != FC_OK) return st;
    pthread_mutex_lock(&arena_lock);
    st = grow_arena(v, bytes, true);
    if (st == FC_OK && bytes > v->arena_reserved) __atomic_store_n(&v->arena_reserved, bytes, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&arena_lock);
    return st;
}

/* An instance (one shape of a dynamic program's variant) borrows the
 * variant's module, kernels and cuBLASLt handle, and shares one arena with
 * every other instance: the variant's, grown (doubled) when a shape needs
 * more. A grown arena moves, so instances made for the old one drop their
 * graphs (arena_gen tells them). */
static fc_status ensure_instance(fc_program *p) {
    fc_program *v = p->variant;
    fc_status st = ensure_device(v);
    if (st != FC_OK) return st;
    p->func = v->func;
    p->funcs_ready = true;
    if (p->ngemms > 0 && !v->blas) {
        double t = fc_now_ms();
        /* The variant meets every size of its GEMMs: a new one reuses the
         * algorithm of its family when cuBLASLt accepts it (docs/DYNAMIC.md). */
        fc_cublaslt_options lo = {.reuse_family = true, .allow_tf32 = v->d.tf32};
        st = fc_cublaslt_create(v->ctx, v->dev, &lo, &v->blas);
        v->times.load_ms += fc_now_ms() - t;
        if (st != FC_OK) return st;
    }
    p->blas = v->blas;
    /* The variant's parameter scratch: its largest launch is every
     * instance's, and one caller thread runs them one at a time. */
    p->args = v->args;
    int64_t ws_offset = 0, bytes = arena_size(p, &ws_offset);
    if (bytes < 0) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "program %s: an arena too large", p->d.graph_name);
    if (bytes > __atomic_load_n(&v->shared_arena_bytes, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&arena_lock);
        st = grow_arena(v, bytes, false);
        pthread_mutex_unlock(&arena_lock);
        if (st != FC_OK) return st;
    }
    if (p->arena_gen != v->arena_gen) {
        fc_replay_free(p->replay, p->dev);
        p->replay = NULL;
        p->arena_gen = v->arena_gen;
    }
    p->arena = v->arena;
    p->blas_ws = v->arena + (CUdeviceptr)ws_offset;
    return FC_OK;
}

/*
 * A variant with frame kernels: one grid per kernel for every shape, and
 * the frame. A kernel whose grid depends on the symbols gets twice as many
 * blocks as the device holds at once (its occupancy on every SM), at most
 * its grid_max: its grid-stride loop covers any size with them, and extra
 * blocks at a small shape find no work and exit. Twice, not once: with one
 * wave the GPT-2 block's softmax (a row loop per block) took 163 us at T =
 * 700 against 132 with a block per 8 rows, and the block 2-8% longer at T
 * 600-750; with two it matches the shape-sized grids there, for ~0.6 us
 * more at small T (docs/PERF.md, run 21). Constant grids (a GEMM's
 * persistent grid, a batched launch) stay.
 */
static fc_status frame_setup(fc_program *v) {
    /* FUSEC_FRAME_GRID=N (1-16): N waves instead, for measuring. */
    const char *e = getenv("FUSEC_FRAME_GRID");
    const int mul = e && atoi(e) >= 1 && atoi(e) <= 16 ? atoi(e) : 2;
    for (int i = 0; i < v->d.src.nlaunches; i++) {
        fc_launch *l = &v->d.src.launches[i];
        if (l->kind != FC_LAUNCH_KERNEL || !l->frame) continue;
        for (int a = 0; a < 3; a++) {
            if (fc_mono_is_static(&l->grid_work[a])) continue;
            int per_sm = 0;
            fc_status st = fc_cuda_occupancy(v->dev, v->func[i], (int)(l->block[0] * l->block[1] * l->block[2]),
                                             l->smem, &per_sm);
            if (st != FC_OK) return st;
            int64_t n = (int64_t)(per_sm > 0 ? per_sm : 1) * v->dev->info.sm_count * mul;
            if (l->grid_max[a] > 0 && n > l->grid_max[a]) n = l->grid_max[a];
            l->grid[a] = (unsigned)(n < 1 ? 1 : n);
        }
    }
    v->frame_carrier = fc_cuda_src_frame_carrier(&v->d.src);
    return fc_frame_create(v->dev, v->d.src.frame_words, v->frame_carrier >= 0, &v->frame);
}

/* Open the device, load the module, resolve the kernels and allocate the
 * arena, each once; a step that failed is tried again by the next run.
 * The first two are timed for fc_program_times: at a warm start they are
 * most of the time to the first output. */
static fc_status ensure_device(fc_program *p) {
    fc_status st;
    if (p->variant) {
        /* An instance uses its variant's device: no context or stream of
         * its own to make at a new shape's first call. */
        if ((st = ensure_device(p->variant)) != FC_OK) return st;
        p->dev = p->variant->dev;
        return ensure_instance(p);
    }
    if (!p->dev) {
        double t = fc_now_ms();
        st = p->lease ? lease_device(p) : fc_cuda_device_open(p->ctx, 0, &p->dev);
        p->times.device_ms += fc_now_ms() - t;
        spec_step(p, p->lease ? "device borrowed" : "device opened", t);
        if (st != FC_OK) return st;
    }
    fc_cuda_device *d = p->dev;
    if (!p->module) {
        /* A cubin runs on its own major architecture, on the same or a
         * newer minor one; say so plainly instead of the driver's
         * CUDA_ERROR_NO_BINARY_FOR_GPU. */
        int major = p->d.sm / 10, minor = p->d.sm % 10;
        if (d->info.cc_major != major || d->info.cc_minor < minor)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                "the program was compiled for sm_%d but CUDA device 0 (%s) is sm_%d%d: compile "
                                "with sm 0 (the device's own) or %d",
                                p->d.sm, d->info.name, d->info.cc_major, d->info.cc_minor,
                                d->info.cc_major * 10 + d->info.cc_minor);
        double t = fc_now_ms();
        st = fc_cuda_module_load(d, p->cubin.data, p->cubin.size, &p->module);
        p->times.load_ms += fc_now_ms() - t;
        spec_step(p, "module loaded", t);
        if (st != FC_OK) return st;
    }
    if (!p->funcs_ready) {
        double t = fc_now_ms();
        if (!p->func) {
            p->func = fc_ctx_malloc(p->ctx, sizeof *p->func * (size_t)(p->d.src.nlaunches + 1));
            if (!p->func) return FC_ERR_NOMEM;
            memset(p->func, 0, sizeof *p->func * (size_t)(p->d.src.nlaunches + 1));
        }
        for (int i = 0; i < p->d.src.nlaunches; i++) {
            const fc_launch *l = &p->d.src.launches[i];
            if (l->kind != FC_LAUNCH_KERNEL || p->func[i]) continue;
            st = fc_cuda_module_function(d, p->module, l->name, &p->func[i]);
            if (st == FC_OK && l->smem > DEFAULT_MAX_SHARED)
                st = fc_cuda_function_set_max_shared(d, p->func[i], (int)l->smem);
            if (st != FC_OK) {
                p->func[i] = NULL;
                return st;
            }
        }
        p->funcs_ready = true;
        p->times.load_ms += fc_now_ms() - t;
        p->times.loaded = true;
        spec_step(p, "kernels looked up", t);
    }
    if ((st = ensure_args(p)) != FC_OK) return st;
    if (p->d.src.frame_words > 0 && !p->frame && (st = frame_setup(p)) != FC_OK) return st;
    /* One allocation for the intermediates and the cuBLASLt workspace:
     * cuMemAlloc's base is 256-aligned, and so is the workspace's offset. */
    int64_t ws_offset = 0, bytes = arena_size(p, &ws_offset);
    if (bytes < 0)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "program %s: an arena of %lld bytes is too large",
                            p->d.graph_name, (long long)p->d.arena_bytes);
    if (!p->arena && bytes > 0) {
        /* A lease's programs map theirs: freeing it then waits for nothing. */
        const double t = fc_now_ms();
        st = p->lease ? fc_cuda_region_grow(d, &p->arena_region, (size_t)bytes) : FC_ERR_UNSUPPORTED;
        if (st == FC_OK) p->arena = p->arena_region.base;
        else if (st == FC_ERR_UNSUPPORTED) st = fc_cuda_alloc(d, (size_t)bytes, &p->arena);
        spec_step(p, p->arena_region.base ? "arena mapped" : "arena allocated", t);
        if (st != FC_OK) return st;
    }
    if (p->ngemms > 0 && !p->blas) {
        /* cublasLtCreate loads the library's kernels: timed with the load. */
        double t = fc_now_ms();
        /* FUSEC_GEMM_TUNE=1: algorithms chosen by timing (once per problem:
         * the disk cache keeps them). Off by default: timed alone, the
         * choices made the GPT-2 block at T = 64 18-26% slower in its graph
         * than the heuristic's first (docs/GEMM.md, "Choosing by timing"). */
        fc_cublaslt_options lo = {.allow_tf32 = p->d.tf32, .tune = fc_env_is_one("FUSEC_GEMM_TUNE")};
        if (p->lease && (st = lease_blas(p, &lo.share)) != FC_OK) return st;
        lo.mapped = p->lease != NULL;
        st = fc_cublaslt_create(p->ctx, d, &lo, &p->blas);
        p->times.load_ms += fc_now_ms() - t;
        spec_step(p, lo.share ? "cuBLASLt handle shared" : "cuBLASLt handle created", t);
        if (st != FC_OK) return st;
        p->blas_ws = p->arena + (CUdeviceptr)ws_offset;
    }
    return FC_OK;
}

static fc_replay_env env_of(const fc_program *p) {
    const fc_frame *f = p->variant ? p->variant->frame : NULL;
    fc_replay_env e = {p->dev,   p->ctx,  &p->d,         p->func,         p->arena,           p->blas,
                       p->blas_ws, p->syms, p->nsyms, fc_frame_device(f), fc_frame_image(f), -1};
    if (e.frame_image) e.frame_carrier = p->variant->frame_carrier;
    return e;
}

static fc_status copy_dtod(fc_program *p, CUdeviceptr dst, CUdeviceptr src, int64_t bytes, CUstream s) {
    if (bytes == 0 || dst == src) return FC_OK;
    const fc_cuda_driver *cu = p->dev->cu;
    FC_CU_CHECK(p->ctx, cu->CtxSetCurrent(p->dev->cuctx));
    FC_CU_CHECK(p->ctx, cu->MemcpyDtoDAsync(dst, src, (size_t)bytes, s));
    return FC_OK;
}

/* Graphs off for p from now on, for this reason (the stats keep it; the
 * log says it once). */
static void graphs_off(fc_program *p, const char *why) {
    p->replay_off = true;
    snprintf(p->stats.graph_skip_reason, sizeof p->stats.graph_skip_reason, "%s", why);
    fc_trace(FC_LOG_GRAPHS, "program %s: runs launch by launch: %s", p->d.graph_name, why);
}

/* Whether p replays at all, decided at its first run: the options and the
 * environment are read once, not at every run. */
static void decide_graphs(fc_program *p) {
    p->graphs_decided = true;
    if (!p->opts.cuda_graphs) graphs_off(p, "CUDA Graphs are off (fc_compile_options.cuda_graphs, or --no-graphs)");
    else if (fc_env_is_zero("FUSEC_CUDA_GRAPHS")) graphs_off(p, "CUDA Graphs are off ($FUSEC_CUDA_GRAPHS=0)");
    else if (p->d.src.nlaunches == 0) graphs_off(p, "the program launches nothing");
}

/* The launches one by one. */
static fc_status enqueue_eager(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind == FC_LAUNCH_ALIAS) continue; /* a view: nothing to do */
        int nparams;
        fc_status st = fc_launch_args(&e, i, inputs, outputs, &p->args, &nparams);
        if (st != FC_OK) return st;
        if (l->kind == FC_LAUNCH_LIBRARY) {
            st = fc_cublaslt_launch(p->blas, p->ctx, &p->d.gemm[i], p->args.val, l->nargs, p->blas_ws,
                                              FC_CUBLASLT_WORKSPACE_BYTES, s);
            if (st != FC_OK) return st;
            continue;
        }
        fc_cuda_launch_cfg cfg = {{l->grid[0], l->grid[1], l->grid[2]},
                                  {l->block[0], l->block[1], l->block[2]},
                                  l->smem,
                                  s};
        st = fc_cuda_launch(p->dev, p->func[i], &cfg, p->args.ptr);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

static fc_status build_graph(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    double t = fc_now_ms();
    fc_status st = fc_replay_build(&e, inputs, outputs, &p->args, s, &p->replay);
    p->stats.graph_build_ms += fc_now_ms() - t;
    if (st == FC_OK) {
        p->stats.graph_captures++;
        fc_trace(FC_LOG_GRAPHS, "program %s: graph built, %d programmatic edges", p->d.graph_name,
                 fc_replay_programmatic_edges(p->replay));
    }
    return st;
}

fc_status fc_program_prebuild_graph(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout) {
    if (!p) return FC_ERR_USAGE;
    fc_status st = check_buffers(p, inputs, nin, outputs, nout);
    if (st == FC_OK) st = prepare_run(p);
    if (st != FC_OK) return st;
    if (!p->graphs_decided) decide_graphs(p);
    if (p->replay) return FC_OK;
    if (p->replay_off) return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "%s", p->stats.graph_skip_reason);
    /* Refreshing concatenated weights copies from the caller's buffers,
     * which a build with placeholder pointers must not do. */
    for (int i = 0; i < p->d.src.nlaunches; i++)
        if (fc_program_gemm(&p->d, i) && p->d.gemm[i].plan.nweights > 1)
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                                "program %s has fused sibling GEMMs: its graph is built at its second run",
                                p->d.graph_name);
    double t = fc_now_ms();
    st = build_graph(p, inputs, outputs, NULL);
    spec_step(p, "graph built (captured, instantiated)", t);
    /* Uploaded now, and waited for (this is the background thread): the
     * first launch of a graph otherwise uploads it, ~50 us.
     * FUSEC_SPEC_UPLOAD=0 leaves it to that launch (measuring). */
    if (st == FC_OK && !fc_env_is_zero("FUSEC_SPEC_UPLOAD")) {
        t = fc_now_ms();
        st = fc_replay_upload(p->replay, p->dev, NULL);
        spec_step(p, "graph upload queued", t);
        t = fc_now_ms();
        if (st == FC_OK) st = fc_cuda_stream_sync(p->dev, NULL);
        spec_step(p, "graph upload waited for", t);
    }
    if (st == FC_OK) p->stats.graph_prebuilt++;
    return st;
}

/* Weights written in place (fc_program_weights_changed): the graph
 * launches no copies, so the concatenations of its sibling GEMMs are
 * brought up to date on stream s first. */
static fc_status refresh_weights(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        if (!fc_program_gemm(&p->d, i) || p->d.gemm[i].plan.nweights <= 1) continue;
        int n;
        fc_status st = fc_launch_args(&e, i, inputs, outputs, &p->args, &n);
        if (st == FC_OK) st = fc_cublaslt_refresh_weights(p->blas, p->ctx, &p->d.gemm[i], p->args.val, n, s);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

fc_status fc_program_weights_changed(fc_program *p) {
    if (!p) return FC_ERR_USAGE;
    if (p->dyn) return fc_dynamic_weights_changed(p->dyn);
    fc_cublaslt_weights_changed(p->blas);
    return FC_OK;
}

/* An instance of a variant whose launches are all kernels: the variant's
 * one graph, built at the first run of any shape, re-pointed at this
 * shape if it holds another (fc_replay_rebind: each kernel node gets this
 * shape's grid and sizes, ~1 us a node, where a graph of its own costs
 * 70-140 us to build at the second run and ~35 us to destroy at eviction),
 * then patched for the caller's pointers and launched. Without library
 * calls there is nothing a first eager run must set up, so every run of
 * every shape, the first included, replays. (Launching a new shape one by
 * one and re-pointing the graph after the launches, while the GPU runs
 * them, was measured and is slower: docs/DYNAMIC.md, "A new shape's first
 * call".) FC_ERR_UNSUPPORTED: the caller runs eagerly (the reason is in the
 * stats and the log). */
/* The variant's shared graph, built from instance p for these buffers (its
 * time and count in p's stats). */
static fc_status build_shared(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_program *v = p->variant;
    fc_replay_env e = env_of(p);
    const double t = fc_now_ms();
    fc_status st = fc_replay_build(&e, inputs, outputs, &p->args, s, &v->shared_replay);
    p->stats.graph_build_ms += fc_now_ms() - t;
    if (st != FC_OK) return st;
    p->stats.graph_captures++;
    fc_trace(FC_LOG_GRAPHS, "program %s: the variant's graph: %s, %d programmatic edges", p->d.graph_name,
             !v->frame                ? "re-pointed at each new shape"
             : v->frame_carrier >= 0 ? "frame kernels, the frame carried by the first (its node updated when the frame changes)"
                                     : "frame kernels (never re-pointed)",
             fc_replay_programmatic_edges(v->shared_replay));
    return FC_OK;
}

static fc_status enqueue_shared(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_program *v = p->variant;
    fc_replay_env e = env_of(p);
    fc_status st = FC_OK;
    const char *failed = NULL;
    if (!v->shared_replay) {
        st = build_shared(p, inputs, outputs, s);
        if (st != FC_OK) failed = "building the graph failed";
    } else if (!v->frame && (v->shared_owner != p->instance_id || v->shared_gen != v->arena_gen)) {
        /* (Frame kernels read the shape and the arena from the frame.) */
        double t = fc_now_ms();
        st = fc_replay_rebind(v->shared_replay, &e, inputs, outputs, &p->args, &p->stats.graph_patches);
        p->stats.graph_build_ms += fc_now_ms() - t;
        if (st == FC_OK) p->stats.graph_reshapes++;
        else failed = "re-pointing the graph at a new shape failed";
    }
    if (st == FC_OK) {
        v->shared_owner = p->instance_id;
        v->shared_gen = v->arena_gen;
        st = fc_replay_launch(v->shared_replay, &e, inputs, outputs, &p->args, s, &p->stats.graph_patches);
        if (st != FC_OK) failed = "patching the graph failed";
    }
    if (failed) {
        /* This run goes launch by launch; the variant's shapes build graphs
         * of their own from now on (enqueue_graph), as with library calls. */
        char reason[200];
        snprintf(reason, sizeof reason, "the variant's shared graph: %s: %.100s", failed, fc_last_error(p->ctx));
        fc_trace(FC_LOG_GRAPHS, "program %s: %s", p->d.graph_name, reason);
        fc_replay_free(v->shared_replay, v->dev);
        v->shared_replay = NULL;
        v->shared_graph = false;
        p->stats.graph_skips++;
        snprintf(p->stats.graph_skip_reason, sizeof p->stats.graph_skip_reason, "%.159s", reason);
        return FC_ERR_UNSUPPORTED;
    }
    p->stats.graph_replays++;
    return FC_OK;
}

fc_status fc_program_prebuild_shared_graph(fc_program *inst) {
    fc_program *v = inst->variant;
    if (!v) return fc_set_error(inst->ctx, FC_ERR_USAGE, "fc_program_prebuild_shared_graph: not an instance");
    fc_status st = ensure_device(inst);
    if (st != FC_OK) return st;
    if (!inst->graphs_decided) decide_graphs(inst);
    if (!v->frame || !v->shared_graph || inst->replay_off || v->shared_replay) return FC_OK;
    /* No caller's buffers yet: frame kernels' nodes hold none, and the
     * carrier's words (made with NULL for them) differ from the first
     * run's, which updates its node. */
    const int np = inst->d.nparams, no = inst->d.noutputs;
    void **none = calloc((size_t)(np + no) + 1, sizeof *none);
    if (!none) return fc_set_error(inst->ctx, FC_ERR_NOMEM, "out of memory (a graph)");
    fc_replay_env e = env_of(inst);
    CUstream s = inst->dev->stream;
    bool wrote = false;
    st = fc_frame_write(v->frame, inst->dev, &e, none, none + np, s, &wrote);
    if (st == FC_OK) st = build_shared(inst, none, none + np, s);
    if (st == FC_OK) st = fc_replay_upload(v->shared_replay, inst->dev, s);
    if (st == FC_OK) st = fc_cuda_stream_sync(inst->dev, s);
    free(none);
    if (st != FC_OK) {
        /* The first run tries again (and reports what it meets); a graph
         * built but not uploaded is not counted. */
        if (v->shared_replay) inst->stats.graph_captures--;
        fc_replay_free(v->shared_replay, inst->dev);
        v->shared_replay = NULL;
        return st;
    }
    inst->stats.graph_prebuilt++;
    fc_trace(FC_LOG_GRAPHS, "program %s: the variant's graph built ahead of its first run (fc_program_reserve)",
             inst->d.graph_name);
    return FC_OK;
}

/* The launches as a CUDA Graph (runtime/replay.c), built at the second run
 * (the first runs eagerly: it makes cuBLASLt's choices and concatenated
 * weights, which a capture must not allocate). FC_ERR_UNSUPPORTED: run
 * eagerly instead (the reason is in the stats and the log). */
static fc_status enqueue_graph(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    if (!p->graphs_decided) decide_graphs(p);
    if (p->variant && p->variant->shared_graph && !p->replay_off)
        return enqueue_shared(p, inputs, outputs, s);
    /* The first run is eager by design, unless the graph was built before
     * it (fc_program_prebuild_graph); a later eager one is a skip. */
    if (p->stats.runs == 0 && !p->replay) return FC_ERR_UNSUPPORTED;
    if (p->replay_off) {
        p->stats.graph_skips++;
        return FC_ERR_UNSUPPORTED;
    }
    fc_replay_env e = env_of(p);
    fc_status st = FC_OK;
    const char *failed = NULL;
    if (!p->replay) {
        st = build_graph(p, inputs, outputs, s);
        if (st != FC_OK) failed = "building the graph failed";
    }
    /* A failed refresh is the run's error (nothing was launched), not a
     * reason to give up the graph. */
    if (st == FC_OK && fc_cublaslt_weights_stale(p->blas) && (st = refresh_weights(p, inputs, outputs, s)) != FC_OK)
        return st;
    if (st == FC_OK) {
        st = fc_replay_launch(p->replay, &e, inputs, outputs, &p->args, s, &p->stats.graph_patches);
        /* A graph that could not be patched is never launched again (nothing
         * of it was queued: the launch is the last step). */
        if (st != FC_OK) failed = "patching the graph failed";
    }
    if (failed) {
        /* This run and the later ones go launch by launch. */
        char reason[160];
        snprintf(reason, sizeof reason, "%s: %.120s", failed, fc_last_error(p->ctx));
        fc_replay_free(p->replay, p->dev);
        p->replay = NULL;
        graphs_off(p, reason);
        p->stats.graph_skips++;
        return FC_ERR_UNSUPPORTED;
    }
    p->stats.graph_replays++;
    return FC_OK;
}

/* Queue every launch, then the result copies, on stream s. The device is
 * ready (ensure_device) and every library call is a GEMM
 * (check_supported). */
static fc_status enqueue(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    fc_status st = fc_launch_check_pointers(&e, inputs, outputs);
    if (st != FC_OK) return st;
    if (e.frame) {
        /* Frame kernels, replayed or not, read this run's sizes and
         * pointers from the frame: its changed words first. */
        bool wrote = false;
        st = fc_frame_write(p->variant->frame, p->dev, &e, inputs, outputs, s, &wrote);
        if (st != FC_OK) return st;
        p->stats.frame_writes += wrote;
    }
    st = enqueue_graph(p, inputs, outputs, s);
    if (st == FC_ERR_UNSUPPORTED) st = enqueue_eager(p, inputs, outputs, s);
    if (st != FC_OK) return st;
    /* Results no kernel wrote in place: a parameter (or a view of one)
     * returned, or a value returned more than once. */
    for (int k = 0; k < p->d.noutputs; k++) {
        const fc_program_tensor *o = &p->d.outputs[k];
        CUdeviceptr dst = (CUdeviceptr)(uintptr_t)outputs[k], src;
        if (o->copy_from.kind == FC_STORE_INPUT) src = (CUdeviceptr)(uintptr_t)inputs[o->copy_from.index];
        else if (o->copy_from.kind == FC_STORE_OUTPUT) src = (CUdeviceptr)(uintptr_t)outputs[o->copy_from.index];
        else continue;
        st = copy_dtod(p, dst, src, fc_program_tensor_bytes(o), s);
        if (st != FC_OK) return st;
    }
    p->stats.runs++;
    return FC_OK;
}

/* NULL pointers are allowed only for empty tensors. */
static fc_status check_buffers(const fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout) {
    const fc_program_desc *d = &p->d;
    if (nin != d->nparams || nout != d->noutputs)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: graph %s takes %d inputs and %d outputs, not %d and %d",
                            d->graph_name, d->nparams, d->noutputs, nin, nout);
    if ((nin > 0 && !inputs) || (nout > 0 && !outputs))
        return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: inputs or outputs is NULL");
    for (int i = 0; i < nin; i++)
        if (!inputs[i] && fc_program_tensor_bytes(&d->params[i]) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: input %d is a NULL device pointer", i);
    for (int k = 0; k < nout; k++)
        if (!outputs[k] && fc_program_tensor_bytes(&d->outputs[k]) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: output %d is a NULL device pointer", k);
    return FC_OK;
}

/* What a run needs: a program it can run (checked first, so that one it
 * cannot allocates nothing), then the device state. */
static fc_status prepare_run(fc_program *p) {
    fc_status st = check_supported(p);
    return st != FC_OK ? st : ensure_device(p);
}

fc_status fc_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream) {
    if (!p) return FC_ERR_USAGE;
    if (p->dyn)
        return fc_set_error(p->ctx, FC_ERR_USAGE,
                            "fc_run: program %s is dynamic (some dims are symbolic): run it with fc_run_shaped, "
                            "which takes the shapes",
                            fc_program_desc_of(p)->graph_name ? fc_program_desc_of(p)->graph_name : "?");
    fc_status st = check_buffers(p, inputs, nin, outputs, nout);
    if (st == FC_OK) st = prepare_run(p);
    if (st != FC_OK) return st;
    /* NULL is the caller's default stream, the legacy one, as the CUDA
     * runtime has it (fusec's own stream is internal). */
    return enqueue(p, inputs, outputs, stream ? (CUstream)stream : CU_STREAM_LEGACY);
}

/* ------------------------------------------------------------------ */
/* Running from host memory.                                           */
/* ------------------------------------------------------------------ */

static bool type_matches(const fc_tensor *t, const fc_program_tensor *v) {
    if (t->dtype != v->dtype || t->rank != v->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (t->shape[d] != v->dims[d]) return false;
    return true;
}

/* "f32[4, 256]", as fc_type_str writes a static type. */
static const char *program_tensor_str(const fc_program_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "%s[", fc_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

/* Warm up, then time `iters` runs one by one; the median goes to *median. */
static fc_status bench(fc_program *p, void *const *in, void *const *out, int iters, double *median) {
    fc_cuda_device *d = p->dev;
    double *ms = fc_ctx_malloc(p->ctx, sizeof *ms * (size_t)iters);
    if (!ms) return FC_ERR_NOMEM;
    fc_cuda_timer timer = {0};
    fc_status st = fc_cuda_timer_create(d, &timer);
    for (int i = 0; i < BENCH_WARMUP && st == FC_OK; i++) st = enqueue(p, in, out, d->stream);
    for (int i = 0; i < iters && st == FC_OK; i++) {
        st = fc_cuda_timer_start(d, &timer, d->stream);
        if (st == FC_OK) st = enqueue(p, in, out, d->stream);
        float t = 0;
        if (st == FC_OK) st = fc_cuda_timer_stop(d, &timer, d->stream, &t);
        ms[i] = t;
    }
    if (st == FC_OK) *median = fc_median(ms, iters);
    fc_cuda_timer_destroy(d, &timer);
    fc_ctx_freemem(p->ctx, ms);
    return st;
}

/* Device buffers of one host run; freed whatever happens. */
typedef struct host_run {
    CUdeviceptr *in, *out;
    int nin, nout;
} host_run;

static fc_status host_run_body(fc_program *p, host_run *h, const fc_tensor *inputs, fc_tensor *outputs,
                               double *median_ms, int bench_iters) {
    const fc_program_desc *desc = &p->d;
    fc_cuda_device *d = p->dev;
    for (int i = 0; i < h->nin; i++) {
        size_t bytes = (size_t)fc_program_tensor_bytes(&desc->params[i]);
        fc_status st = fc_cuda_alloc(d, bytes, &h->in[i]);
        if (st == FC_OK) st = fc_cuda_upload(d, h->in[i], inputs[i].data, bytes);
        if (st != FC_OK) return st;
    }
    for (int k = 0; k < h->nout; k++) {
        fc_status st = fc_cuda_alloc(d, (size_t)fc_program_tensor_bytes(&desc->outputs[k]), &h->out[k]);
        if (st != FC_OK) return st;
    }
    /* fc_run's pointer convention: device addresses as void pointers. */
    void **in = fc_ctx_malloc(p->ctx, sizeof *in * (size_t)(h->nin + h->nout + 1));
    if (!in) return FC_ERR_NOMEM;
    void **out = in + h->nin;
    for (int i = 0; i < h->nin; i++) in[i] = (void *)(uintptr_t)h->in[i];
    for (int k = 0; k < h->nout; k++) out[k] = (void *)(uintptr_t)h->out[k];

    fc_status st = enqueue(p, in, out, d->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL); /* a faulting kernel shows up here */
    if (st == FC_OK && bench_iters > 0) {
        double med = 0;
        st = bench(p, in, out, bench_iters, &med);
        if (st == FC_OK && median_ms) *median_ms = med;
    }
    fc_ctx_freemem(p->ctx, in);
    if (st != FC_OK) return st;

    for (int k = 0; k < h->nout; k++) {
        const fc_program_tensor *v = &desc->outputs[k];
        fc_tensor *t = &outputs[k];
        size_t bytes = (size_t)fc_program_tensor_bytes(v);
        t->data = fc_ctx_malloc(p->ctx, bytes); /* malloc: fc_tensor_release frees it */
        if (!t->data) return FC_ERR_NOMEM;
        t->dtype = v->dtype;
        t->rank = v->rank;
        for (int dd = 0; dd < v->rank; dd++) t->shape[dd] = v->dims[dd];
        st = fc_cuda_download(d, t->data, h->out[k], bytes);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

fc_status fc_program_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters) {
    if (!p) return FC_ERR_USAGE;
    const fc_program_desc *desc = &p->d;
    if (nout > 0 && !outputs) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: outputs is NULL");
    for (int k = 0; k < nout; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    if (nin != desc->nparams || nout != desc->noutputs)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "run: graph %s takes %d inputs and %d outputs, not %d and %d",
                            desc->graph_name, desc->nparams, desc->noutputs, nin, nout);
    if (nin > 0 && !inputs) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: inputs is NULL");
    if (bench_iters < 0) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: bench_iters %d < 0", bench_iters);
    for (int i = 0; i < nin; i++) {
        const fc_program_tensor *v = &desc->params[i];
        if (!type_matches(&inputs[i], v)) {
            char want[128];
            program_tensor_str(v, want, sizeof want);
            return fc_set_error(p->ctx, FC_ERR_INPUT, "run: input %d (%%%s) must be %s", i,
                                v->name && v->name[0] ? v->name : "?", want);
        }
        if (!inputs[i].data && fc_program_tensor_bytes(v) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "run: input %d has no data", i);
    }
    fc_status st = prepare_run(p);
    if (st != FC_OK) return st;

    host_run h = {NULL, NULL, nin, nout};
    h.in = fc_ctx_malloc(p->ctx, sizeof *h.in * (size_t)(nin + nout + 1));
    if (!h.in) return FC_ERR_NOMEM;
    memset(h.in, 0, sizeof *h.in * (size_t)(nin + nout + 1));
    h.out = h.in + nin;
    st = host_run_body(p, &h, inputs, outputs, median_ms, bench_iters);

    /* Free the buffers without losing the first error's message. */
    if (st != FC_OK) (void)p->dev->cu->CtxSynchronize();
    for (int i = 0; i < nin + nout; i++) {
        if (!h.in[i]) continue;
        if (st != FC_OK) (void)p->dev->cu->MemFree(h.in[i]);
        else st = fc_cuda_free(p->dev, h.in[i]);
    }
    fc_ctx_freemem(p->ctx, h.in);
    if (st != FC_OK)
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    return st;
}

/* ------------------------------------------------------------------ */
/* Comparing outputs.                                                  */
/* ------------------------------------------------------------------ */

fc_tolerance fc_dtype_tolerance(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return (fc_tolerance){1e-9, 1e-12};
    case FC_F32: return (fc_tolerance){1e-5, 1e-5};
    case FC_F16: return (fc_tolerance){2e-3, 1e-3};
    case FC_BF16: return (fc_tolerance){1.6e-2, 1e-2};
    case FC_I64: case FC_I32: case FC_I8: case FC_BOOL: case FC_DTYPE_COUNT: break;
    }
    return (fc_tolerance){0, 0};
}

/* Element i of an integer or bool tensor, exactly (a double would lose
 * i64 values above 2^53). */
static int64_t load_int(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_I64: return ((const int64_t *)data)[i];
    case FC_I32: return ((const int32_t *)data)[i];
    case FC_I8: return ((const int8_t *)data)[i];
    case FC_BOOL: return ((const uint8_t *)data)[i];
    default: FC_UNREACHABLE("load_int of a float dtype");
    }
}

static bool valid_tensor(const fc_tensor *t) {
    return (unsigned)t->dtype < FC_DTYPE_COUNT && t->rank >= 0 && t->rank <= FC_MAX_RANK && fc_tensor_numel(t) >= 0;
}

static bool same_type(const fc_tensor *a, const fc_tensor *b) {
    if (!valid_tensor(a) || !valid_tensor(b)) return false;
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static void compare_one(const fc_tensor *got, const fc_tensor *want, fc_output_diff *r) {
    memset(r, 0, sizeof *r);
    r->dtype = want->dtype;
    r->tol = fc_dtype_tolerance(want->dtype);
    r->worst = -1;
    r->shape_ok = same_type(got, want);
    if (!r->shape_ok) return;
    r->numel = fc_tensor_numel(want);
    bool is_float = fc_dtype_is_float(want->dtype);
    double worst_ratio = -1;
    for (int64_t i = 0; i < r->numel; i++) {
        double x, w, err, bound;
        bool ok;
        if (is_float) {
            x = fc_interp_load(got->dtype, got->data, i);
            w = fc_interp_load(want->dtype, want->data, i);
        } else {
            int64_t xi = load_int(got->dtype, got->data, i), wi = load_int(want->dtype, want->data, i);
            x = (double)xi;
            w = (double)wi;
            if (xi == wi) x = w; /* equal, even where doubles cannot tell */
            else if (x == w) x = nextafter(w, INFINITY);
        }
        if (isnan(x) || isnan(w)) {
            ok = isnan(x) && isnan(w);
            err = ok ? 0 : INFINITY;
        } else if (isinf(x) || isinf(w)) {
            ok = x == w;
            err = ok ? 0 : INFINITY;
        } else {
            err = fabs(x - w);
            ok = err <= r->tol.abs + r->tol.rel * fabs(w);
        }
        bound = r->tol.abs + r->tol.rel * (isfinite(w) ? fabs(w) : 0);
        if (err > r->max_abs_err) r->max_abs_err = err;
        if (w != 0 && !isnan(w)) {
            double rel = isinf(w) ? (ok ? 0 : INFINITY) : err / fabs(w);
            if (rel > r->max_rel_err) r->max_rel_err = rel;
        }
        if (!ok) r->nbad++;
        /* The element nearest to (or furthest past) its bound. */
        double ratio = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            r->worst = i;
            r->worst_got = x;
            r->worst_want = w;
        }
    }
    r->pass = r->nbad == 0;
}

/* "f32[4, 8]" for a host tensor (its rank may be bad: it is being checked). */
static const char *tensor_type_str(const fc_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "%s[", fc_dtype_name(t->dtype));
    int rank = t->rank < 0 ? 0 : t->rank > FC_MAX_RANK ? FC_MAX_RANK : t->rank;
    for (int d = 0; d < rank && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

const char *fc_output_diff_format(const fc_output_diff *d, int index, char *buf, size_t n) {
    if (!d->shape_ok) {
        snprintf(buf, n, "output %d: FAIL (dtype or shape differs)", index);
        return buf;
    }
    int len = snprintf(buf, n, "output %d (%s, %lld elements): max_abs_err %.3g max_rel_err %.3g (tolerance rel %g abs %g): ",
                       index, fc_dtype_name(d->dtype), (long long)d->numel, d->max_abs_err, d->max_rel_err,
                       d->tol.rel, d->tol.abs);
    if (len < 0 || (size_t)len >= n) return buf;
    if (d->pass)
        snprintf(buf + len, n - (size_t)len, "ok");
    else
        snprintf(buf + len, n - (size_t)len, "FAIL (%lld elements out of tolerance; worst [%lld]: got %.9g, want %.9g)",
                 (long long)d->nbad, (long long)d->worst, d->worst_got, d->worst_want);
    return buf;
}

fc_status fc_compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, int n,
                             fc_output_diff *diffs) {
    if (n < 0 || (n > 0 && (!got || !want || !diffs)))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compare_outputs: NULL arguments or n < 0");
    for (int i = 0; i < n; i++) {
        if ((fc_tensor_numel(&got[i]) > 0 && !got[i].data) || (fc_tensor_numel(&want[i]) > 0 && !want[i].data))
            return fc_set_error(ctx, FC_ERR_USAGE, "fc_compare_outputs: output %d has no data", i);
    }
    int first_bad = -1;
    for (int i = 0; i < n; i++) {
        compare_one(&got[i], &want[i], &diffs[i]);
        if (!diffs[i].pass && first_bad < 0) first_bad = i;
    }
    if (first_bad < 0) return FC_OK;
    char line[512];
    fc_output_diff_format(&diffs[first_bad], first_bad, line, sizeof line);
    if (!diffs[first_bad].shape_ok) {
        char a[160], b[160];
        return fc_set_error(ctx, FC_ERR_RUNTIME, "output %d is %s, the reference's is %s", first_bad,
                            tensor_type_str(&got[first_bad], a, sizeof a),
                            tensor_type_str(&want[first_bad], b, sizeof b));
    }
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", line);
}

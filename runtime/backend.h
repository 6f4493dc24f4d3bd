/*
 * backend.h - the one interface every backend implements (internal header).
 *
 * A backend turns a graph into an executable and runs it: CUDA (NVRTC
 * kernels through the driver), the LLVM CPU backend, the reference
 * interpreter. Each fills one `fc_backend` table of functions, in the
 * manner of QBE's `Target` or ggml's `ggml_backend_i`; the public calls of
 * fusec.h (fc_compile, fc_run, fc_run_shaped, fc_program_run_host, the
 * stats, the plan and source texts, fc_program_free) look the table up
 * and call through it (runtime/backend.c). Nothing outside a backend's own
 * files knows its executable's layout.
 *
 * An executable is a backend's own struct whose first member is an
 * fc_exec_head: the public fc_program handle points at it, and the head
 * says whose it is. Adding a backend is a folder with its table and one
 * line in the registry (runtime/backend.c); docs/ARCHITECTURE.md
 * has the recipe.
 */
#ifndef FC_RUNTIME_BACKEND_H
#define FC_RUNTIME_BACKEND_H

#include "fusec.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct fc_backend fc_backend;
struct fc_program_desc;
struct fc_profile_rec;

/* What every executable begins with. */
typedef struct fc_exec_head {
    const fc_backend *backend;
} fc_exec_head;

/* What describe() writes. */
typedef enum fc_describe_kind {
    FC_DESCRIBE_PLAN,   /* the launch plan (fc_program_plan_text's form) */
    FC_DESCRIBE_SOURCE, /* the generated source: CUDA C, LLVM IR */
    FC_DESCRIBE_ASM,    /* what the source compiles to: PTX */
    FC_DESCRIBE_DOT,    /* the fused graph in DOT (fc_program_plan_dot) */
} fc_describe_kind;

struct fc_backend {
    const char *name; /* the --device name: "cuda", "cpu", "ref" */
    fc_device device;
    /* Which backend fc_device_default picks first when several are
     * available: the highest. */
    int preference;
    /* This build has the backend; it can run here now (a GPU present). */
    bool (*built)(void);
    bool (*present)(void);

    /* g into *out (an executable whose head names this backend). Errors go
     * to g's context; *out is NULL on failure. */
    fc_status (*compile)(fc_graph *g, const fc_compile_options *o, fc_program **out);
    /* fusec.h's fc_run and fc_run_shaped: pointers in the backend's memory
     * (device memory on CUDA, host memory on the CPU and ref). */
    fc_status (*run)(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream);
    fc_status (*run_shaped)(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                            void *stream);
    /* fc_program_run_host: host tensors in, new host tensors out, and an
     * optional benchmark. */
    fc_status (*run_host)(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                          double *median_ms, int bench_iters);
    /* A malloc'd text (fc_free); NULL with the error on the program's
     * context, FC_ERR_UNSUPPORTED for a kind the backend has not. */
    char *(*describe)(fc_program *p, fc_describe_kind what);
    void (*stats)(const fc_program *p, fc_run_stats *out);
    /* The description: the signature (names, dtypes, shapes, the graph's
     * text) at least; what runs, for CUDA (runtime/cuda/program.h). */
    const struct fc_program_desc *(*desc)(const fc_program *p);
    fc_context *(*context)(const fc_program *p);
    /* fc_program_profile's measurements (runtime/profile.h): r's warmup and
     * runs set, the rest for the backend to fill. NULL: the backend cannot
     * profile. */
    fc_status (*profile)(fc_program *p, const fc_tensor *inputs, int nin, struct fc_profile_rec *r);
    /* Times of the making (NULL: all zero, origin "compiled"). */
    void (*times)(const fc_program *p, fc_compile_times *out);
    void (*free)(fc_program *p);
    /* A tensor-parallel group's device part (runtime/collective.c):
     * `degree` ranks' communicators into *out, and their release. NULL: the
     * backend has none (the host backends' groups are in-process). */
    fc_status (*group_new)(fc_context *ctx, int degree, void **out);
    void (*group_free)(void *dev);
};

/* The backend of p (never NULL for a live program). */
static inline const fc_backend *fc_backend_of(const fc_program *p) {
    return ((const fc_exec_head *)(const void *)p)->backend;
}

/* The registry: every backend of the library, in listing order. */
int fc_backend_count(void);
const fc_backend *fc_backend_at(int i);
/* The backend of device d; NULL for a value out of range. */
const fc_backend *fc_backend_for(fc_device d);
/* Whether p is d's (false for NULL). */
bool fc_program_is(const fc_program *p, fc_device d);
/* Say on p's context that p's backend cannot do `what`: FC_ERR_UNSUPPORTED. */
fc_status fc_backend_unsupported(fc_program *p, const char *what);

/* The backends (each in its own files). */
extern const fc_backend fc_backend_cuda, fc_backend_cpu, fc_backend_ref;

#endif

/*
 * program_desc.h - a lowered program's description: everything a backend
 * needs to run it, and nothing that points into a graph: the signature,
 * the launches (lower/launch.h), where every value lives, each library
 * launch's GEMM (lower/gemm_desc.h), the source.
 *
 * Every backend describes its executables with one (the CPU and reference
 * backends fill the signature only); the CUDA backend runs one, and its
 * cache and AOT files serialize it (runtime/cuda/program_cache.c).
 */
#ifndef FC_LOWER_PROGRAM_DESC_H
#define FC_LOWER_PROGRAM_DESC_H

#include "lower/conv_desc.h"
#include "lower/gemm_desc.h"
#include "lower/launch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* What a program runs: its description.                               */
/*                                                                     */
/* Everything fc_run needs, and nothing that points into a graph: the  */
/* signature, the launches, where every value lives, the source. A     */
/* cold compile builds it from the plan; a warm start (a level-2 cache */
/* entry) and an AOT file decode it (runtime/cuda/program_cache.c), so the  */
/* passes and the codegen do not run again. See docs/CACHE.md.         */
/* ------------------------------------------------------------------ */

/* Where a value's bytes live while the program runs (docs/RUNTIME-PROGRAM.md,
 * "Storage"). The numbers are part of the serialized format: never renumber. */
typedef enum fc_store_kind {
    FC_STORE_NONE = 0,   /* no storage: the value is never named by a launch */
    FC_STORE_INPUT = 1,  /* the caller's inputs[index] */
    FC_STORE_OUTPUT = 2, /* the caller's outputs[index] */
    FC_STORE_ARENA = 3,  /* the program's arena, at byte offset index */
} fc_store_kind;

typedef struct fc_store {
    fc_store_kind kind;
    int64_t index;
    int64_t bytes; /* the value's size, so that arena offsets can be checked */
} fc_store;

/* A parameter or a result of the program. */
typedef struct fc_program_tensor {
    char *name;         /* parameters: the graph's name for it ("" if none); results: NULL */
    fc_dtype dtype;
    int rank;
    int64_t dims[FC_MAX_RANK];
    int value;          /* its value id (an index of fc_program_desc.store) */
    /* Parameters only: an inout parameter (docs/DECODE.md), whose buffer
     * the program writes in place; a host run copies it back. */
    bool inout;
    /* Results only: a result no kernel writes in place (a parameter
     * returned as it is, a value returned twice) is copied from here after
     * the launches (an INPUT or another OUTPUT); FC_STORE_NONE otherwise. */
    fc_store copy_from;
} fc_program_tensor;

typedef struct fc_program_desc {
    char *graph_name;
    char *graph_text;   /* fc_print of the graph as given to fc_compile */
    int sm;             /* the target: major*10+minor */
    bool fast_math, fuse;
    bool tf32; /* f32 GEMMs on TF32 tensor cores (fc_compile_options.allow_tf32) */
    fc_precision precision; /* the autocast the plan was made with (fc_compile_options.precision) */
    fc_numerics numerics; /* fc_compile_options.numerics: the kernels' rounding */
    int nparams, noutputs;
    fc_program_tensor *params, *outputs;
    int nvalues;
    fc_store *store;    /* by value id, nvalues of them */
    int64_t arena_bytes, intermediate_bytes;
    fc_cuda_src src;    /* the CUDA C source and the launches */
    /* The GEMMs of library launches, by launch (src.nlaunches entries, or
     * NULL when there are none): entry i describes what cuBLASLt runs for
     * launch i (lower/gemm_desc.h; fc_program_gemm reads it); it is
     * zeroed for a kernel, an alias, and a library call that has no CUDA
     * path (attention, an integer matmul: running one fails cleanly). */
    struct fc_gemm_desc *gemm;
    /* The convolutions of library launches, by launch, as .gemm (or NULL
     * when there are none): entry i is what cuDNN runs for launch i
     * (lower/conv_desc.h; fc_program_conv reads it), zeroed (N = 0) for
     * every other launch. */
    fc_conv_desc *conv;
    /* A key over the distinct kernels' level-1 keys (src.kernels[].key),
     * a record for tools. A warm start looks each kernel's cubin up by the
     * key its entry records (an entry passes the same trust checks as a
     * cubin); a cold compile recomputes every key from the kernel's own
     * source and the options. */
    uint8_t kernel_key[16];
} fc_program_desc;

/* The type of value v into t (its value id too). */
void fc_program_tensor_set_type(fc_program_tensor *t, const fc_value *v);
/* The signature of g into d (zeroed by the caller): its name, and each
 * parameter's and result's name, dtype and (symbolic) shape; no storage,
 * no launches. What every backend's executable describes itself with.
 * FC_ERR_NOMEM (d is then released by fc_program_desc_release). */
fc_status fc_program_desc_signature(fc_context *ctx, const fc_graph *g, fc_program_desc *d);
/* Free everything a description owns and zero it. NULL is ignored. */
void fc_program_desc_release(fc_program_desc *d);
/* The GEMM of launch i, or NULL when it runs none (see .gemm above). */
const struct fc_gemm_desc *fc_program_gemm(const fc_program_desc *d, int i);
/*
 * Check launch i's GEMM against the description it is part of: its
 * operands' positions, and every byte cuBLASLt touches inside the storage
 * of the launch's arguments (fc_gemm_desc_valid). FC_OK; FC_ERR_INPUT with
 * the reason in why (nothing on ctx) when it does not hold; FC_ERR_NOMEM.
 * fc_compile checks what it made, the decoder what it read.
 */
fc_status fc_program_check_gemm(fc_context *ctx, const fc_program_desc *d, int i, char *why, size_t n);
/* The convolution of launch i, or NULL when it runs none (see .conv). */
const fc_conv_desc *fc_program_conv(const fc_program_desc *d, int i);
/* fc_program_check_gemm for launch i's convolution (fc_conv_desc_valid). */
fc_status fc_program_check_conv(fc_context *ctx, const fc_program_desc *d, int i, char *why, size_t n);
/* fc_run's first check of a call against d: nin inputs and nout outputs,
 * and the arrays there when they are not empty. FC_ERR_USAGE on ctx. */
fc_status fc_program_desc_check_call(fc_context *ctx, const fc_program_desc *d, const void *inputs, int nin,
                                     const void *outputs, int nout);
/* The bytes of a parameter or result (0 for a bad shape). */
int64_t fc_program_tensor_bytes(const fc_program_tensor *t);

#endif

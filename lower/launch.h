/*
 * launch.h - the launch list of a lowered program: what each launch runs
 * (a generated kernel, a library call, an alias), its grid, block, shared
 * memory and arguments, and the source the kernels are in.
 *
 * Codegen fills it (codegen/cuda/cuda_codegen.h: fc_cuda_codegen); after
 * that it is plain data that the program description carries
 * (lower/program_desc.h), the cache and AOT files store, and the runtime
 * reads at run time with the functions below, never through codegen: a
 * launch's grid at a shape is a formula of the symbols evaluated here.
 *
 * The names are CUDA's (fc_cuda_src, grid, block, shared memory, tensor
 * maps) because the data is: CUDA's launch configuration, which only
 * codegen/cuda fills and the cache and AOT formats store field by field.
 * The CPU backend runs its plan and has no launch list. What a run reads
 * of it beyond the launch configuration is neutral: fc_launch_grid takes
 * symbol values, not a plan, and this header needs nothing of passes/.
 */
#ifndef FC_LOWER_LAUNCH_H
#define FC_LOWER_LAUNCH_H

#include "ir/ir.h"

typedef enum fc_launch_kind {
    FC_LAUNCH_KERNEL,  /* a generated kernel in the module */
    FC_LAUNCH_LIBRARY, /* a library call (a cuBLASLt GEMM, a cuDNN convolution) */
    FC_LAUNCH_ALIAS,   /* nothing to launch: an output aliases an input buffer */
} fc_launch_kind;

/*
 * A tensor map (a CUtensorMap, the descriptor the bulk tensor copy engine,
 * TMA, reads) that a kernel takes as a `const __grid_constant__` parameter.
 * Its shape is static (codegen knows it), but it holds a base address, so
 * the runtime encodes it (cuTensorMapEncodeTiled) at every launch, and
 * again when a graph replay patches that argument's pointer
 * (runtime/replay.c: fc_launch_args; docs/RUNTIME-GRAPHS.md).
 * Dims go innermost first, as the driver takes them: element
 * (c0, c1, ..) of the map is at args[arg] + (offset + c0) * esize +
 * c1 * strides[0] + c2 * strides[1] + ...
 */
#define FC_TMAP_MAX_RANK 5
#define FC_LAUNCH_MAX_TMAPS 4
typedef struct fc_tmap {
    int arg;                            /* the kernel argument (index into fc_launch.args) it reads */
    int64_t offset;                     /* elements from that argument's pointer */
    fc_dtype dtype;                     /* FC_BF16 or FC_F16 */
    int rank;                           /* 1 .. FC_TMAP_MAX_RANK */
    int64_t dims[FC_TMAP_MAX_RANK];     /* elements, innermost first */
    int64_t strides[FC_TMAP_MAX_RANK - 1]; /* bytes, of dims 1 .. rank - 1 (multiples of 16) */
    uint32_t box[FC_TMAP_MAX_RANK];     /* the box one copy moves (each 1 .. 256) */
    bool swizzle128;                    /* 128-byte swizzle (box[0] * esize == 128); else none */
} fc_tmap;

typedef struct fc_launch {
    fc_launch_kind kind;
    char name[64];    /* kernel function name (extern "C") */
    int group;        /* plan group id */
    unsigned grid[3]; /* grid dimensions */
    unsigned block[3];
    unsigned min_blocks; /* kernels: __launch_bounds__'s blocks per SM (0: not given) */
    unsigned smem;    /* dynamic shared memory bytes */
    /* Kernel parameters in order: one device pointer per value id. The
     * first nreads are read, the rest written. */
    int nargs, nreads;
    int *args;        /* value ids (malloc'd) */
    /* Kernels only: after the pointers (and symbol values), one
     * `const __grid_constant__` CUtensorMap (128 bytes, 64-aligned) per
     * tmaps[i], in this order. Static kernels only (nsyms == 0). */
    int ntmaps;
    fc_tmap tmaps[FC_LAUNCH_MAX_TMAPS];
    /* Dynamic plans: a generated kernel takes, after its pointers, one
     * `long long` per symbol of the graph (s0 .. s{nsyms-1}, symbol index
     * order, all of them), so every kernel gets the same list. 0 for static
     * kernels and for launches that are not kernels. */
    int nsyms;
    /* Dynamic plans of kernels only (docs/DYNAMIC.md, "The frame"): the
     * kernel's one parameter is the frame, a device table of 64-bit words
     * that the runtime writes when a call's shape or buffers change: word
     * k < nsyms is symbol k's value, word nsyms + id the address of value
     * id. The kernel loads its words, waits for the kernel before it
     * (griddepcontrol.wait on sm_90: it may be launched as a programmatic
     * dependent) and runs the body that would otherwise be the kernel.
     * Its grid-stride loops make any grid correct, so the runtime gives it
     * one grid for every shape, and a CUDA Graph of such kernels never
     * changes. */
    bool frame;
    /* The kernel waits (griddepcontrol.wait) before it reads anything a
     * kernel before it wrote, and writes nothing before that: the graph
     * joins it to a kernel node before it by a programmatic edge, so it
     * starts while that kernel finishes (runtime/replay.c). The skinny
     * GEMMs (skinny.h) and every frame kernel. */
    bool pdl;
    /* A load-time kernel (passes/loadtime.c): it computes GEMM weights
     * from parameters alone, into memory no other launch uses. The CUDA
     * runtime runs it when the weights are loaded (the first run, a
     * parameter it reads at a new address, fc_program_weights_changed),
     * not at every run; running it every time gives the same results. */
    bool loadtime;
    /* Dynamic plans: grid[a] = ceil(work[a] / per[a]) for the bound sizes,
     * clamped to [1, grid_max[a]] (fc_launch_grid). grid[] holds the
     * grid for every symbol = 1 as a placeholder. */
    fc_mono grid_work[3];
    int64_t grid_per[3];
    int64_t grid_max[3];
    char summary[160]; /* for --emit=plan: "softmax-like row reduce: reduce_max, sub, exp, ..." */
    /* For the profile (lower/launch_cost.h): where the launch's ops are
     * written ("gpt2_block.ir:12-15,18", or the imported model's value
     * names), how many source ops it covers, the bytes its arguments hold
     * and the FLOPs it computes (-1: not known, a dynamic plan's). */
    char source[128];
    int nsource_ops;
    int64_t bytes;
    double flops;
} fc_launch;

/* A distinct kernel of the unit: launches whose kernels are the same text
 * (layer k's copy of layer 0's) all name it. Each is compiled on its own,
 * so that its cubin is cached under its own source and shared by every
 * program that has it. */
typedef struct fc_cuda_kernel {
    char name[64];     /* its function (and fc_launch.name of every launch of it) */
    char *source;      /* malloc'd: a unit of its own (prelude, templates, the kernel); NULL once decoded */
    uint8_t key[16];   /* its cubin's cache key (the runtime fills it) */
} fc_cuda_kernel;

typedef struct fc_cuda_src {
    char *source; /* malloc'd CUDA C: the whole unit, each distinct kernel once */
    fc_cuda_kernel *kernels; /* the distinct kernels, in order of first launch */
    int nkernels;
    fc_launch *launches; /* launch order */
    int nlaunches;
    int frame_words; /* > 0: the kernels take the frame (fc_launch.frame), of this many words */
    /* The first kernel (fc_cuda_src_frame_carrier) carries the frame's
     * words as its second parameter and stores them into the frame for the
     * kernels after it (docs/DYNAMIC.md, "The carried frame"); false: the
     * runtime copies the frame before the launches. */
    bool frame_carried;
} fc_cuda_src;

/* The grid of launch l (made from a dynamic plan) at one shape: sym_values
 * gives each of the plan's nsyms symbols (l->nsyms of them). Static
 * launches: l->grid. Block size and shared memory do not change (l->block,
 * l->smem). FC_ERR_INPUT (on ctx) if the grid would exceed the hardware's
 * limits; FC_ERR_USAGE when the values are not the launch's symbols. */
fc_status fc_launch_grid(fc_context *ctx, const fc_launch *l, const int64_t *sym_values, int nsyms, unsigned grid[3]);
/* The position of value `id` among a launch's arguments arg_ids[0 ..
 * nargs), or -1. */
int fc_launch_arg_position(const int *arg_ids, int nargs, int id);
/* Free the source and the launch list (each launch's args) and zero s. */
void fc_cuda_src_release(fc_cuda_src *s);
/* The launch index of the frame's carrier (the first kernel) when
 * s->frame_carried, else -1. */
int fc_cuda_src_frame_carrier(const fc_cuda_src *s);

#endif

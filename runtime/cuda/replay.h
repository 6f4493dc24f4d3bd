/*
 * replay.h - a program's launch sequence as a CUDA Graph, replayed with new
 * pointers patched in (internal header; docs/RUNTIME-GRAPHS.md).
 *
 * A run of a program is a fixed sequence of launches: generated kernels
 * and cuBLASLt calls. Launching them one by one costs a few microseconds of
 * host time each; a CUDA Graph launches them all with one call. What
 * changes between runs is only where the caller's tensors are (the arena,
 * the cuBLASLt workspace and the shapes stay), so the graph is built once
 * and each later run patches the nodes that read or write a caller's
 * buffer whose address changed:
 *
 *  - a kernel node gets its new parameters (cuGraphExecKernelNodeSetParams);
 *  - a cuBLASLt call is a child graph (captured from the stream); when one
 *    of its pointers changes it is captured again and swapped in
 *    (cuGraphExecChildGraphNodeSetParams). cuBLASLt's own kernels and
 *    their parameters are its business: fusec never edits them.
 *
 * Nothing is copied into static buffers. The graph is a chain (each node
 * after the one before), the order of the eager run.
 *
 * The same arguments are made by the eager path (fc_launch_args) so that a
 * kernel gets the same parameters whichever way it runs.
 */
#ifndef FC_RUNTIME_REPLAY_H
#define FC_RUNTIME_REPLAY_H

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/program.h"

/* What running launch i of a description needs, provided by the program
 * (runtime/cuda/program_*.c): a static program, or one shape of a dynamic one. */
typedef struct fc_replay_env {
    fc_cuda_device *dev;
    fc_context *ctx;
    const fc_program_desc *d; /* launches, storage, GEMMs */
    const CUfunction *func;   /* per launch (kernels) */
    CUdeviceptr arena;
    fc_cublaslt *blas;
    CUdeviceptr ws; /* cuBLASLt's workspace, FC_CUBLASLT_WORKSPACE_BYTES */
    /* Trailing 64-bit kernel parameters of launches with nsyms > 0 (the
     * symbol values of a dynamic program's shape). */
    const int64_t *syms;
    int nsyms;
    /* The frame (runtime/cuda/frame.h) of a variant whose kernels take it
     * (fc_launch.frame): their one parameter. 0 otherwise. */
    CUdeviceptr frame;
    /* A carried frame (fc_cuda_src.frame_carried): this run's words
     * (d->src.frame_words of them, filled before any launch), the carrier
     * kernel's second parameter; NULL when the frame is copied. */
    const uint64_t *frame_image;
    int frame_carrier; /* the carrier's launch index (fc_cuda_src_frame_carrier), -1 for none */
    fc_cudnn *dnn;     /* the convolutions' handle (launches with fc_program_conv); shares ws */
    /* The collectives' NCCL group (runtime/cuda/nccl.h) and this program's
     * rank in it; NULL: the program has no group. */
    const void *nccl;
    int tp_rank;
} fc_replay_env;

/* Library launch i on stream s with its arguments' pointers argval[0 ..
 * nargs): its convolution through cuDNN, a collective through NCCL, else
 * its GEMM through cuBLASLt (which fails cleanly for a library call with
 * none of them). */
fc_status fc_replay_library_call(const fc_replay_env *e, int i, const CUdeviceptr *argval, int nargs, CUstream s);

/* Where value id lives in this run: a caller's buffer (inputs, outputs)
 * or fusec's arena. */
CUdeviceptr fc_launch_value_ptr(const fc_replay_env *e, int id, void *const *inputs, void *const *outputs);

/*
 * Scratch for one launch's kernel parameters, made once per program for its
 * largest launch. The values live in storage of their own types: pointers
 * and symbol values as 64-bit words (val; cuBLASLt launches read their
 * pointers from it too), tensor maps in CUtensorMap storage with the type's
 * alignment (map; the host copy cuLaunchKernel and graph nodes read from);
 * ptr points at each parameter's value, as cuLaunchKernel takes them.
 */
typedef struct fc_launch_params {
    CUdeviceptr *val; /* max_args words */
    CUtensorMap *map; /* FC_LAUNCH_MAX_TMAPS maps */
    void **ptr;       /* max_args + FC_LAUNCH_MAX_TMAPS */
    void *block;      /* the one allocation holding the three */
} fc_launch_params;
/* Scratch for launches of up to max_args pointer and symbol parameters
 * (and up to FC_LAUNCH_MAX_TMAPS tensor maps). FC_ERR_NOMEM on failure. */
fc_status fc_launch_params_alloc(fc_context *ctx, int max_args, fc_launch_params *out);
void fc_launch_params_free(fc_context *ctx, fc_launch_params *p); /* zeroed ok */

/* Tensor map t of kernel launch l (l->tmaps[t]) over p, the pointer its
 * argument has in this run, into *out: FC_ERR_INPUT when p plus the map's
 * offset is not 16-byte aligned (TMA's rule), FC_ERR_RUNTIME when the
 * driver refuses the map. fc_launch_args' encoder, for tests that launch
 * a kernel by hand too. */
fc_status fc_launch_tmap_encode(fc_cuda_device *dev, const fc_launch *l, int t, CUdeviceptr p, CUtensorMap *out);
/* Whether every tensor map of e's launches can take this run's pointers
 * (FC_ERR_INPUT naming the kernel and argument if not). A run checks this
 * before it launches or patches anything, so that a caller's misaligned
 * buffer is refused as an input error and leaves the program's graph as it
 * was, rather than failing half-way through patching it. */
fc_status fc_launch_check_pointers(const fc_replay_env *e, void *const *inputs, void *const *outputs);

/*
 * Launch i's parameters into pa: for a frame kernel the frame alone (its
 * pointers and sizes are the frame's words), and for the frame's carrier
 * the words too (e->frame_image, by value); else the pointers, then the symbol values, then
 * the tensor maps (l->tmaps, encoded over this run's pointers), and *n =
 * how many. inputs and outputs are fc_run's. Fails only for a launch with
 * tensor maps: a pointer the copy engine cannot take (not 16-byte aligned
 * at the map's offset: FC_ERR_INPUT, naming the kernel and argument), or a
 * map the driver refuses (FC_ERR_RUNTIME); nothing is launched then.
 */
fc_status fc_launch_args(const fc_replay_env *e, int i, void *const *inputs, void *const *outputs,
                         fc_launch_params *pa, int *n);

typedef struct fc_replay fc_replay;

/*
 * Build and instantiate the graph of e's launches with these pointers, for
 * a launch on stream s (fused siblings' weights are refreshed there first).
 * A kernel whose launch says pdl (every frame kernel, and a static
 * program's skinny GEMMs) follows a kernel node before it by a programmatic
 * edge (it may start as that one finishes, and waits for it inside),
 * unless the driver or device cannot. Frame kernels'
 * nodes hold no caller pointer, so fc_replay_launch patches none of them
 * but a carrier, whose parameters hold the frame's words (e->frame_image).
 * pa: scratch with room for the most parameters of any launch.
 * On failure *out is NULL and ctx says why (the caller runs eagerly and
 * reports the reason).
 */
fc_status fc_replay_build(const fc_replay_env *e, void *const *inputs, void *const *outputs, fc_launch_params *pa,
                          CUstream s, fc_replay **out);
/*
 * Launch the graph on stream s after patching the nodes whose caller
 * pointers differ from the last run's (a kernel node with tensor maps gets
 * them encoded again over the new pointers), and the frame's carrier when
 * e->frame_image differs from the words it holds; *patched += how many
 * nodes were patched.
 */
fc_status fc_replay_launch(fc_replay *r, const fc_replay_env *e, void *const *inputs, void *const *outputs,
                           fc_launch_params *pa, CUstream s, uint64_t *patched);
/* Whether d's launches are kernels (and aliases) only: no library call. */
bool fc_replay_kernels_only(const fc_program_desc *d);
/* Upload the graph to the device on stream s, without running it (a graph
 * built ahead of its first run: that run then pays no upload). */
fc_status fc_replay_upload(fc_replay *r, fc_cuda_device *dev, CUstream s);
void fc_replay_free(fc_replay *r, fc_cuda_device *dev); /* NULL is ignored */
/* How many of the graph's edges are programmatic (fc_replay_build). */
int fc_replay_programmatic_edges(const fc_replay *r);

#endif

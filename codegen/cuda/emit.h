/* emit.h - what every CUDA generator of codegen/cuda builds on (internal
 * to codegen/cuda): the C type of a buffer, sizes as C text, the SM count
 * a grid is sized for, the opening of a kernel. The generated GEMMs
 * (gemm.c), the skinny GEMMs (skinny.c), attention (attention.c) and the
 * pointwise and row kernels (kernel.h) include it; the dispatcher
 * (codegen.c, fc_cuda_codegen) calls each of them. */
#ifndef FC_CUDA_EMIT_H
#define FC_CUDA_EMIT_H

#include "cuda_codegen.h"

/* The opening of launch l's kernel, up to its parameters, for blocks of
 * `block` threads (min_blocks: __launch_bounds__'s blocks per SM, 0 for
 * none), which it records in l: its entry point `extern "C" __global__
 * void __launch_bounds__(..) name(`, or for a frame launch the device
 * function `name_main(` that the frame entry (frame_entry.c, with those
 * bounds) calls after reading the frame. */
void fc_cuda_kernel_open(fc_strbuf *s, fc_launch *l, unsigned block, unsigned min_blocks);
/* The end of the parameter list and the start of launch l's kernel body:
 * ") {" and, for an entry point (not a frame body, whose frame entry
 * waits), the wait for the kernel before and the trigger of the kernel
 * after (fc_cuda_grid_start), with l->pdl set: the runtime may launch it
 * as a programmatic dependent. */
void fc_cuda_kernel_body(fc_strbuf *s, fc_launch *l);
/* What every kernel that may be a programmatic dependent runs first (sm 90;
 * nothing before): griddepcontrol.wait, for the whole grid before it,
 * memory flushed, then griddepcontrol.launch_dependents. Literal asm, so a
 * unit without the prelude (attention's own tests) compiles it too. */
extern const char fc_cuda_grid_start[];
/* `__launch_bounds__(..)` for l's recorded block and blocks per SM, in buf. */
const char *fc_cuda_launch_bounds(const fc_launch *l, char *buf, size_t n);
/* A product of dims as C text for a kernel of a dynamic plan: `3072ll`,
 * `(s0 * s1 * 768ll)` (symbol i is the kernel's parameter s<i>). Returns buf. */
const char *fc_cuda_mono_text(const fc_mono *m, char *buf, size_t n);
/* The C type a buffer of dtype dt has in generated code ("__nv_bfloat16",
 * "i64", ...). */
const char *fc_cuda_storage_type(fc_dtype dt);
/* The SM count of the device plan is compiled for (fc_plan.sm_count), or
 * an H100/H200 SXM's 132 when that is unknown (a plan made without a
 * device): the persistent grids' and the one-wave rules' count. */
int64_t fc_cuda_plan_sms(const fc_plan *plan);

/* Plan queries of the kernels that run two groups or more (a skinny GEMM
 * with its attention, an attention with its cache updates). */
/* The position of v among group gr's inputs, or -1. */
int fc_cuda_group_input(const fc_group *gr, const fc_value *v);
/* The index of the one group that reads value v, or -1 (none, several, or
 * v a graph result). */
int fc_cuda_sole_reader(const fc_plan *plan, const fc_value *v);
/* Whether group a's inputs may be read at group g's place (g > a) rather
 * than at a's, where the memory plan saw them read: no group after a up
 * to g, g included, writes arena memory where they are. */
bool fc_cuda_inputs_survive(const fc_plan *plan, int a, int g);
/* The position of value v among a launch's arguments args[0 .. *n),
 * appended (and *n counted) if new. */
int fc_cuda_launch_arg(int *args, int *n, const fc_value *v);

#endif

/* nccl.h - NCCL for the collectives of a tensor-parallel group
 * (docs/PARALLEL.md), loaded with dlopen as the driver is: a build and a
 * run without NCCL work, and a group on CUDA then fails saying so.
 *
 * One process drives every GPU of the group: ncclCommInitAll makes one
 * communicator per visible GPU 0 .. degree-1, and rank r's program runs on
 * GPU r, from its own host thread (the calls of one communicator are then
 * ordered, and no rank's call waits in a thread another rank needs). */
#ifndef FC_RUNTIME_CUDA_NCCL_H
#define FC_RUNTIME_CUDA_NCCL_H

#include "ir/ir.h"
#include "runtime/cuda/cuda.h"

/* The CUDA table's group_new and group_free (runtime/backend.h). */
fc_status fc_nccl_group_new(fc_context *ctx, int degree, void **out);
void fc_nccl_group_free(void *grp);

/* Whether a library launch named `name` is a collective (codegen names
 * them "<op>.<dtype>", as "all_reduce.bf16"). */
bool fc_nccl_is_collective(const char *name);

/* Launch `name` of rank `rank` of grp on stream s: in and out device
 * buffers of in_bytes and out_bytes (out may be in: NCCL's in-place
 * all_reduce). all_gather and reduce_scatter are along the outermost axis
 * (codegen refuses others over more than one rank). Captured into a CUDA
 * Graph like any stream work. */
fc_status fc_nccl_launch(fc_context *ctx, const void *grp, int rank, const char *name, CUdeviceptr in,
                         int64_t in_bytes, CUdeviceptr out, int64_t out_bytes, CUstream s);

#endif

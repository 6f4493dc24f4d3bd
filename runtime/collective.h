/* collective.h - tensor-parallel groups (fusec.h's fc_tp_group) and the
 * in-process collectives the host backends (cpu/, ref/) run between the
 * threads that are a group's ranks (docs/PARALLEL.md). */
#ifndef FC_RUNTIME_COLLECTIVE_H
#define FC_RUNTIME_COLLECTIVE_H

#include "ir/ir.h"

typedef struct fc_host_group fc_host_group;

struct fc_tp_group {
    fc_device device;
    int degree;
    fc_host_group *host; /* cpu, ref: the ranks are threads of this process */
    void *dev;           /* a device backend's (CUDA: one NCCL communicator per GPU) */
    void (*dev_free)(void *dev);
};

/* One collective node n (all_reduce, all_gather, reduce_scatter) of rank
 * `rank` of grp: in and out are dense storage of dtype `dt` (F64, F32,
 * F16, BF16), in of the concrete shape xshape[0..xrank) and out of the
 * result's shape from it (n's attributes); out may be in (an
 * in-place all_reduce). Every rank of the group must call it, for the same
 * node, in the same order; each call returns when this rank's out is
 * written. The sums are in float64, over the ranks in rank order, rounded
 * once to dt, so every rank gets the same bits. grp NULL: n must be over
 * one rank (then out is a copy of in); otherwise FC_ERR_USAGE on ctx. */
fc_status fc_host_collective(fc_context *ctx, const fc_tp_group *grp, int rank, const fc_node *n, fc_dtype dt,
                             int xrank, const int64_t *xshape, const void *in, void *out);

/* The compile options' group, checked for a program of device d: of d,
 * and tp_rank one of its ranks (a NULL group takes any rank 0). */
fc_status fc_tp_check_options(fc_context *ctx, const fc_compile_options *o, fc_device d);

/* Element i of dense storage of float dtype dt (F64, F32, F16, BF16), and
 * x stored there (rounded to dt). */
double fc_host_load(fc_dtype dt, const void *p, int64_t i);
void fc_host_store(fc_dtype dt, void *p, int64_t i, double x);

#endif

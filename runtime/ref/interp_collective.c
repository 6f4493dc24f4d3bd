/*
 * interp_collective.c - the reference semantics of the collectives
 * (docs/PARALLEL.md): all_reduce, all_gather and reduce_scatter, between
 * simulated ranks. Each rank is an interpreter on its own thread, running
 * the one sharded graph on its shard of the inputs; a collective meets
 * the other ranks' interpreters at the same node (runtime/collective.c)
 * and sums in float64 in rank order. Without a group a collective must be
 * over one rank, and is then its operand.
 */
#include "interp_impl.h"

#include "runtime/collective.h"

fc_status fc_ref_run_collective(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x = operand(ip, 0);
    int64_t R = n->a.ranks, shape[FC_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    int ax = 0;
    if (n->op != FC_OP_ALL_REDUCE && !fc_ref_axis_ok(ip, n->a.axis, x->rank, &ax))
        return FC_ERR_INPUT;
    if (n->op == FC_OP_ALL_GATHER)
        shape[ax] *= R;
    else if (n->op == FC_OP_REDUCE_SCATTER) {
        if (R < 1 || shape[ax] % R != 0)
            return fc_ref_err(ip, FC_ERR_INPUT, "dim %d (%lld) is not a multiple of ranks (%lld)", ax,
                              (long long)shape[ax], (long long)R);
        shape[ax] /= R;
    }
    fc_status st = fc_ref_set_result(ip, 0, x->rank, shape);
    if (st != FC_OK)
        return st;
    st = fc_host_collective(ip->ctx, ip->tp, ip->tp_rank, n, FC_F64, x->rank, x->shape, x->data, result(ip, 0)->data);
    return st == FC_OK ? st : fc_ref_err(ip, st, "%s", fc_last_error(ip->ctx));
}

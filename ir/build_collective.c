/* build_collective.c - inference of the collectives (all_reduce,
 * all_gather, reduce_scatter; docs/PARALLEL.md).
 *
 * Every rank of a group runs the same graph (one program per rank, the
 * same shapes), so a collective's result type is one formula of its
 * operand's: all_reduce keeps it, all_gather multiplies the axis by the
 * group's size and reduce_scatter divides it. The axis of the two that
 * change it must be static, since the result's dim is a product of it. */
#include "ir.h"

/* The largest group: eight GPUs of one host, with room. */
#define FC_MAX_RANKS 1024

bool fc_infer_collective(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                         fc_dim *dims) {
    const char *name = fc_op_table[op].name;
    const fc_value *x = in[0];
    if (x->weak) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: the operand must be a tensor, not a number", name);
        return false;
    }
    if (!fc_dtype_is_float(x->dtype)) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: the operand must be a float tensor, got %s", name,
                       fc_dtype_name(x->dtype));
        return false;
    }
    if (a->ranks < 1 || a->ranks > FC_MAX_RANKS) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: ranks must be 1 .. %d, got %lld", name, FC_MAX_RANKS,
                       (long long)a->ranks);
        return false;
    }
    *dt = x->dtype;
    *rank = x->rank;
    for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d];
    if (op == FC_OP_ALL_REDUCE) return true;
    int64_t ax = a->axis < 0 ? a->axis + x->rank : a->axis;
    if (ax < 0 || ax >= x->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: axis %lld is out of range for rank %d", name, (long long)a->axis,
                       x->rank);
        return false;
    }
    fc_dim d = x->dims[ax];
    if (d < 0) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: dim %lld (the axis) must be static", name, (long long)ax);
        return false;
    }
    if (op == FC_OP_ALL_GATHER) {
        dims[ax] = d * a->ranks;
        return true;
    }
    FC_ASSERT(op == FC_OP_REDUCE_SCATTER);
    if (d % a->ranks != 0) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: dim %lld (%lld) is not a multiple of ranks (%lld)", name, (long long)ax,
                       (long long)d, (long long)a->ranks);
        return false;
    }
    dims[ax] = d / a->ranks;
    return true;
}

/* build_decode.c - the ops of decoding with a key/value cache: inference of
 * update_slice and cache_attention, and the verifier's rules for the inout
 * parameters they write (docs/DECODE.md).
 *
 * The aliasing is made checkable by keeping it narrow: an inout parameter
 * has exactly one use, the destination operand of one update_slice, and
 * every reader of the cache reads that update's result. So no node can see
 * the old contents after the write (there is no old value left to name),
 * the write-back is that update (one per parameter, of the parameter's own
 * dtype and shape, since update_slice's result has its destination's
 * type), and the memory plan can put the result in the parameter's buffer
 * (passes/memplan.c) without a copy. */
#include "ir.h"

#include <stdio.h>

static bool need_index_scalar(fc_graph *g, const char *op, const fc_value *v, const char *what) {
    if (!v->weak && v->rank == 0 && (v->dtype == FC_I32 || v->dtype == FC_I64)) return true;
    char buf[96];
    fc_graph_error(g, FC_ERR_INPUT, "%s: %s must be an i32 or i64 scalar tensor (rank 0), got %s", op, what,
                   v->weak ? "a number" : fc_type_str(g, v->dtype, v->rank, v->dims, buf, sizeof buf));
    return false;
}

/* update_slice(dst, src, offset, axis): dst an inout parameter; src of its
 * dtype and rank, equal dims but along axis, where it is at most dst's. */
static bool infer_update_slice(fc_graph *g, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                               fc_dim *dims) {
    const char *op = "update_slice";
    fc_value *dst = in[0], *src = in[1];
    if (dst->weak || dst->param_index < 0 || !dst->inout) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: the destination must be an inout parameter (written in place)", op);
        return false;
    }
    if (src->weak || src->dtype != dst->dtype || src->rank != dst->rank) {
        char sd[96], ss[96];
        fc_graph_error(g, FC_ERR_INPUT, "%s: the source (%s) must have the destination's dtype and rank (%s)", op,
                       src->weak ? "a number" : fc_type_str(g, src->dtype, src->rank, src->dims, ss, sizeof ss),
                       fc_type_str(g, dst->dtype, dst->rank, dst->dims, sd, sizeof sd));
        return false;
    }
    int64_t ax = a->axis < 0 ? a->axis + dst->rank : a->axis;
    if (ax < 0 || ax >= dst->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: axis %lld is out of range for rank %d", op, (long long)a->axis, dst->rank);
        return false;
    }
    for (int d = 0; d < dst->rank; d++) {
        fc_dim s = src->dims[d], t = dst->dims[d];
        bool ok = d == ax ? (fc_dim_is_sym(s) || fc_dim_is_sym(t) || s <= t) : s == t;
        if (!ok) {
            char ss[32], st[32];
            fc_graph_error(g, FC_ERR_INPUT, "%s: the source's dimension %d (%s) %s the destination's (%s)", op, d,
                           fc_dim_str(g, s, ss, sizeof ss), d == ax ? "exceeds" : "differs from",
                           fc_dim_str(g, t, st, sizeof st));
            return false;
        }
    }
    if (!need_index_scalar(g, op, in[2], "the offset")) return false;
    *dt = dst->dtype;
    *rank = dst->rank;
    for (int d = 0; d < dst->rank; d++) dims[d] = dst->dims[d];
    return true;
}

/* cache_attention(q [B, Hq, Sq, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], len):
 * [B, Hq, Sq, Dv]; one float dtype; Hq a multiple of Hkv. */
static bool infer_cache_attention(fc_graph *g, fc_value *const *in, fc_dtype *dt, int *rank, fc_dim *dims) {
    const char *op = "cache_attention";
    static const char *const names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        const fc_value *x = in[i];
        if (x->weak || !fc_dtype_is_float(x->dtype) || x->rank != 4 || x->dtype != in[0]->dtype) {
            char buf[96];
            fc_graph_error(g, FC_ERR_INPUT, "%s: %s must be a rank-4 float tensor [B, H, S, D] of q's dtype, got %s",
                           op, names[i], x->weak ? "a number" : fc_type_str(g, x->dtype, x->rank, x->dims, buf, sizeof buf));
            return false;
        }
    }
    const fc_value *q = in[0], *k = in[1], *v = in[2];
    const char *bad = NULL;
    if (q->dims[0] != k->dims[0] || k->dims[0] != v->dims[0]) bad = "q, k and v must have one batch size";
    else if (k->dims[1] != v->dims[1]) bad = "k and v must have one number of heads";
    else if (k->dims[2] != v->dims[2]) bad = "k and v must have one cache length";
    else if (q->dims[3] != k->dims[3]) bad = "q and k must have one head dimension";
    else if (!fc_dim_is_sym(q->dims[1]) && !fc_dim_is_sym(k->dims[1]) &&
             (k->dims[1] < 1 || q->dims[1] % k->dims[1] != 0))
        bad = "q's heads must be a multiple of k's (grouped-query attention)";
    else if (fc_dim_is_sym(q->dims[1]) != fc_dim_is_sym(k->dims[1]) ||
             (fc_dim_is_sym(q->dims[1]) && q->dims[1] != k->dims[1]))
        bad = "q's and k's head counts must be static, or one symbol";
    if (bad) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: %s", op, bad);
        return false;
    }
    if (!need_index_scalar(g, op, in[3], "the key/value length")) return false;
    *dt = q->dtype;
    *rank = 4;
    dims[0] = q->dims[0];
    dims[1] = q->dims[1];
    dims[2] = q->dims[2];
    dims[3] = v->dims[3];
    return true;
}

bool fc_infer_decode(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                     fc_dim *dims) {
    if (op == FC_OP_UPDATE_SLICE) return infer_update_slice(g, in, a, dt, rank, dims);
    FC_ASSERT(op == FC_OP_CACHE_ATTENTION);
    return infer_cache_attention(g, in, dt, rank, dims);
}

fc_status fc_verify_inout(fc_graph *g) {
    for (int i = 0; i < g->nparams; i++) {
        const fc_value *p = g->params[i];
        if (!p->inout) continue;
        int writes = 0, others = 0;
        for (int n = 0; n < g->nnodes; n++) {
            const fc_node *nd = g->nodes[n];
            if (nd->dead) continue;
            for (int k = 0; k < nd->nin; k++)
                if (nd->in[k] == p) {
                    if (nd->op == FC_OP_UPDATE_SLICE && k == 0) writes++;
                    else others++;
                }
        }
        for (int k = 0; k < g->noutputs; k++) others += g->outputs[k] == p;
        if (writes != 1 || others != 0)
            return fc_set_error(g->ctx, FC_ERR_INPUT,
                                "graph %s: inout parameter %%%s must have exactly one use, as the destination of "
                                "an update_slice (it has %d such use%s and %d other%s)",
                                g->name, p->name, writes, writes == 1 ? "" : "s", others, others == 1 ? "" : "s");
    }
    return FC_OK;
}

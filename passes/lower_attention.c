/* lower_attention.c - attention ops written out as primitives, for the
 * dynamic variant of a program.
 *
 * The generated flash-attention kernel (codegen/cuda/attention.c) bakes
 * every shape and stride into a template instance; with a symbolic sequence
 * length it has neither. A dynamic program therefore runs
 *
 *   attention(q, k, v, [mask], causal, scale)
 *     = matmul(softmax(where(keep, matmul(q, k^T) * scale [+ mask], -inf)), v)
 *
 * in the compute dtype (f32, f64 for f64: the reference's numerics), as
 * library matmuls around one fused row kernel (softmax with its mask and
 * scale). `keep` is the causal mask (query i sees keys j <= i, top-left
 * aligned as the reference has it) made of two iotas, and/or the bool mask.
 * softmax itself is decomposed by fc_pass_decompose afterwards.
 *
 * An attention whose head dim is symbolic and whose scale is the default
 * 1/sqrt(D) stays as it is (codegen then reports it unsupported).
 */
#include "passes.h"
#include "rewrite.h"

#include <math.h>
#include <string.h>

static fc_value *where_ninf(fc_rewriter *rw, fc_value *keep, fc_value *s) {
    fc_value *ninf = fc_rw_scalar(rw, -INFINITY, false);
    if (!keep || !s || !ninf) return NULL;
    fc_value *in[3] = {keep, s, ninf};
    fc_node *n = fc_rw_build(rw, FC_OP_WHERE, in, 3, NULL);
    return n ? n->out[0] : NULL;
}

static fc_value *iota2(fc_rewriter *rw, fc_dim rows, fc_dim cols, int axis) {
    fc_attrs a;
    fc_attrs_defaults(FC_OP_IOTA, &a);
    int64_t shape[2] = {rows, cols};
    a.list = shape;
    a.nlist = 2;
    a.axis = axis;
    a.dtype = FC_I64;
    fc_node *n = fc_rw_build(rw, FC_OP_IOTA, NULL, 0, &a);
    return n ? n->out[0] : NULL;
}

static fc_value *lower(fc_rewriter *rw, fc_node *n) {
    fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->nin > 3 ? n->in[3] : NULL;
    int rq = q->rank, rk = k->rank;
    if (rq < 2 || rk < 2) return NULL;
    fc_dim D = q->dims[rq - 1];
    double scale = n->a.scale;
    if (scale == FC_ATTENTION_DEFAULT_SCALE) {
        if (fc_dim_is_sym(D)) return NULL;
        scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    }
    fc_dtype ct = q->dtype == FC_F64 ? FC_F64 : FC_F32;
    fc_value *qc = fc_rw_cast(rw, q, ct), *kc = fc_rw_cast(rw, k, ct), *vc = fc_rw_cast(rw, v, ct);
    if (!qc || !kc || !vc) return NULL;

    fc_attrs pa;
    fc_attrs_defaults(FC_OP_PERMUTE, &pa);
    int64_t perm[FC_MAX_RANK];
    for (int i = 0; i < rk; i++) perm[i] = i;
    perm[rk - 2] = rk - 1;
    perm[rk - 1] = rk - 2;
    pa.list = perm;
    pa.nlist = rk;
    fc_node *kt = fc_rw_build(rw, FC_OP_PERMUTE, &kc, 1, &pa);
    if (!kt) return NULL;
    fc_value *s = fc_rw_op2(rw, FC_OP_MATMUL, qc, kt->out[0]);
    s = fc_rw_op2s(rw, FC_OP_MUL, s, scale);
    if (mask && mask->dtype == FC_BOOL) s = where_ninf(rw, mask, s);
    else if (mask) s = fc_rw_op2(rw, FC_OP_ADD, s, fc_rw_cast(rw, mask, ct));
    if (n->a.causal) {
        fc_dim sq = q->dims[rq - 2], sk = k->dims[rk - 2];
        fc_value *keep = fc_rw_op2(rw, FC_OP_GE, iota2(rw, sq, sk, 0), iota2(rw, sq, sk, 1));
        s = where_ninf(rw, keep, s);
    }
    /* softmax over the last axis (its default) */
    return fc_rw_op2(rw, FC_OP_MATMUL, fc_rw_op1(rw, FC_OP_SOFTMAX, s), vc);
}

/* fc_rw_lower_nodes' callback: attention nodes only. */
static fc_value *lower_node(fc_rewriter *rw, fc_node *n, void *arg) {
    (void)arg;
    return n->op == FC_OP_ATTENTION ? lower(rw, n) : NULL;
}

fc_status fc_pass_lower_attention(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "lower_attention");
    if (st) return st;
    bool any = false;
    for (int i = 0; i < g->nnodes && !any; i++) any = !g->nodes[i]->dead && g->nodes[i]->op == FC_OP_ATTENTION;
    if (!any) return FC_OK;
    return fc_rw_lower_nodes(g, lower_node, NULL);
}

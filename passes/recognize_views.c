/*
 * recognize_views.c - move the 2-D reshape of a linear layer's activations
 * past the layer. PyTorch exports GPT-2's Conv1D (and any linear layer of a
 * 3-D activation, as Gemm) as
 *
 *     reshape(x, [-1, K]) -> matmul(., W) -> add(., b) -> reshape(., [B, T, N])
 *
 * The reshapes are free as views, but a reshape between a row reduction and
 * its consumer, or between a matmul and its residual add, keeps fusion and
 * the GEMM epilogue from seeing the pattern the hand-written graph has. So:
 *
 *   matmul(reshape(x, [M, K]), W)  ->  reshape(matmul(x', W), [M, N])
 *       when W is 2-D and x's dims split into leading dims of product M and
 *       trailing dims of product K (x' is x with the trailing dims merged);
 *   op(reshape(y), c, ..)          ->  reshape(op(y, c, ..))
 *       for a reshape that flattens (its rank below y's) and an
 *       elementwise op whose other operands are scalars, or 1-D and
 *       broadcast along the last dim, which the reshape keeps, or reshapes
 *       of values of y's dims;
 *   reshape(reshape(z))            ->  reshape(z), or z itself.
 *
 * Each rewrite keeps every element's value and its row-major position, so
 * the graph computes the same numbers.
 */
#include "passes.h"
#include "recognize.h"
#include "rewrite.h"

#include <string.h>

static bool same_dims(const fc_value *a, int rank, const fc_dim *dims) {
    return a->rank == rank && !memcmp(a->dims, dims, sizeof(fc_dim) * (size_t)rank);
}

static fc_value *reshape_to(fc_rewriter *rw, fc_value *x, const fc_value *like) {
    if (same_dims(x, like->rank, like->dims)) return x;
    return fc_rw_reshape(rw, x, like->rank, like->dims);
}

/* The source of v when v is a reshape, else NULL. */
static fc_value *reshaped(fc_value *v) { return v->def && v->def->op == FC_OP_RESHAPE ? v->def->in[0] : NULL; }

static fc_value *sink_matmul(fc_rewriter *rw, fc_node *n) {
    fc_value *r = n->in[0], *w = n->in[1], *x = reshaped(r);
    if (!x || r->rank != 2 || w->rank != 2 || x->rank < 3 || !fc_value_is_static(x) || !fc_value_is_static(r))
        return NULL;
    int64_t lead = 1;
    int split = -1;
    for (int i = 0; i < x->rank - 1 && split < 0; i++) {
        lead *= x->dims[i];
        if (lead == r->dims[0]) split = i + 1; /* the trailing dims multiply to K: same element count */
    }
    if (split < 2) return NULL; /* one leading dim: x' would be r itself */
    fc_dim d[FC_MAX_RANK];
    for (int i = 0; i < split; i++) d[i] = x->dims[i];
    d[split] = r->dims[1];
    fc_value *xs = split == x->rank - 1 ? x : fc_rw_reshape(rw, x, split + 1, d);
    fc_node *mm = xs ? fc_rw_build(rw, FC_OP_MATMUL, (fc_value *[]){xs, w}, 2, &n->a) : NULL;
    return mm ? reshape_to(rw, mm->out[0], n->out[0]) : NULL;
}

static fc_value *sink_elementwise(fc_rewriter *rw, fc_node *n) {
    fc_value *out = n->out[0], *in[8];
    if (n->nout != 1 || n->nin > 8 || out->rank < 1) return NULL;
    const fc_value *src = NULL; /* the dims the reshapes come from */
    for (int k = 0; k < n->nin; k++) {
        fc_value *y = reshaped(n->in[k]);
        /* a flatten (rank falls), as the linear layers' reshapes are */
        if (!y || !same_dims(n->in[k], out->rank, out->dims) || y->rank <= out->rank) continue;
        if (!src) src = y;
        if (!same_dims(y, src->rank, src->dims)) return NULL;
    }
    if (!src || src->rank < 1 || src->dims[src->rank - 1] != out->dims[out->rank - 1]) return NULL;
    fc_dim last = out->dims[out->rank - 1];
    for (int k = 0; k < n->nin; k++) {
        fc_value *v = n->in[k], *y = reshaped(v);
        if (y && same_dims(v, out->rank, out->dims) && y->rank > out->rank) in[k] = y;
        else if (v->weak || v->rank == 0 || (v->rank == 1 && (v->dims[0] == 1 || v->dims[0] == last))) in[k] = v;
        else return NULL;
    }
    fc_node *m = fc_rw_build(rw, n->op, in, n->nin, &n->a);
    return m ? reshape_to(rw, m->out[0], out) : NULL;
}

static fc_value *recognize(fc_rewriter *rw, fc_node *n, void *arg) {
    (void)arg;
    if (n->op == FC_OP_MATMUL) return sink_matmul(rw, n);
    if (n->op == FC_OP_RESHAPE) {
        fc_value *z = reshaped(n->in[0]);
        return z ? reshape_to(rw, z, n->out[0]) : NULL;
    }
    if (fc_op_is_elementwise(n->op)) return sink_elementwise(rw, n);
    return NULL;
}

fc_status fc_pass_recognize_views(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "recognize_views");
    if (st == FC_OK) st = fc_rw_lower_nodes(g, recognize, NULL);
    return st == FC_OK ? fc_pass_dce(g) : st;
}

/* fold_batch_norm.c - a batch norm after a convolution folds into the
 * convolution's weight and bias.
 *
 * batch_norm(conv(x, w, b), scale, bias, mean, var) with a = scale *
 * rsqrt(var + eps) per output channel is conv(x, w * a[:, None ..],
 * (b - mean) * a + bias): the norm costs nothing at run time, and the
 * convolution that was written without a bias (the usual "bias=False
 * before BatchNorm") gets one, which the GEMM epilogue adds. It folds when
 * the convolution's result has no other use; the new weight and bias are
 * computed in f32 and rounded once to the weight's dtype (a few small
 * elementwise kernels over the weights, not over the activations).
 *
 * The folded convolution is placed at the norm; the old one is left
 * without uses, for canonicalize to remove.
 */
#include "passes.h"
#include "rewrite.h"

#include <string.h>

/* The folded conv replacing norm n over c = conv(x, w, [b]). */
static fc_value *fold(fc_rewriter *rw, fc_node *n, fc_node *c) {
    fc_graph *g = rw->g;
    fc_value *w = c->in[1], *b = c->nin > 2 ? c->in[2] : NULL;
    fc_dtype wt = w->dtype, ct = wt == FC_F64 ? FC_F64 : FC_F32;
    fc_value *a = fc_mul(g, fc_rw_cast(rw, n->in[1], ct),
                         fc_rsqrt(g, fc_add(g, fc_rw_cast(rw, n->in[4], ct), fc_scalar(g, n->a.eps))));
    fc_dim d[FC_MAX_RANK];
    d[0] = w->dims[0];
    for (int i = 1; i < w->rank; i++) d[i] = 1;
    fc_value *w2 = fc_rw_cast(rw, fc_mul(g, fc_rw_cast(rw, w, ct), fc_reshape(g, a, w->rank, d)), wt);
    fc_value *shift = b ? fc_sub(g, fc_rw_cast(rw, b, ct), fc_rw_cast(rw, n->in[3], ct)) : fc_neg(g, fc_rw_cast(rw, n->in[3], ct));
    fc_value *b2 = fc_rw_cast(rw, fc_add(g, fc_mul(g, shift, a), fc_rw_cast(rw, n->in[2], ct)), wt);
    if (g->status) return NULL;
    fc_value *in[3] = {c->in[0], w2, b2};
    fc_node *f = fc_build(g, FC_OP_CONV, in, 3, &c->a);
    return f ? f->out[0] : NULL;
}

fc_status fc_pass_fold_batch_norm(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "fold_batch_norm");
    if (st) return st;
    int *uses = fc_use_counts(g);
    if (!uses) return fc_graph_error(g, FC_ERR_NOMEM, "out of memory (fold_batch_norm)");
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) {
        fc_ctx_freemem(g->ctx, uses);
        return g->status;
    }
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        /* the use count is read before remapping: a folded conv is never
         * the operand of a norm, so the original operand is what counts */
        fc_node *c = n->op == FC_OP_BATCH_NORM ? n->in[0]->def : NULL;
        bool foldable = c && c->op == FC_OP_CONV && uses[n->in[0]->id] == 1 && n->in[0]->dtype == c->in[1]->dtype;
        fc_rw_remap(&rw, n);
        fc_value *y = foldable ? fold(&rw, n, c) : NULL;
        if (y) fc_rw_replace(&rw, n->out[0], y);
        else if (!g->status) fc_rw_keep(&rw, n);
    }
    fc_ctx_freemem(g->ctx, uses);
    if ((st = fc_rw_end(&rw))) return st;
    return fc_pass_dce(g);
}

/*
 * residual.c - a 16-bit residual sum is not stored to be added again.
 *
 * A residual network's stream is a sum r = add(x, o): x the stream so far,
 * o a branch that a GEMM computes (an attention projection). When a later
 * GEMM adds its product m to r (y = add(r, m), the next residual), the
 * epilogue pass would make r the product's residual operand, so r is
 * stored between the kernels, rounded to its dtype: a rounding of the
 * size of the whole stream, which the output y carries a second time on
 * top of its own. Written as
 *
 *     y = add(x, add(o, m))
 *
 * the GEMM's residual is the branch o (small, so its rounding is small),
 * the stream x is added to the GEMM's result in f32 by the kernel after
 * it, and r's other readers (a layernorm or rmsnorm) compute x + o in f32
 * in their own prologue from the two operands: r is stored only where it
 * is a graph result. The exact value is the same; what is rounded moves
 * from a stream-sized value to branch-sized ones.
 *
 * The rule: y = add(r, m) and r = add(x, o) of one 16-bit float dtype and
 * one shape, m a GEMM's product (a matmul, then scales by a number or a
 * row-vector bias, each the only use of the value before it), o the
 * operand of r that is such a product (the other one when both are), x
 * the other. Fast numerics only (eager computes the graph as written);
 * f32 sums are left alone (their rounding is 2^16 times smaller than a
 * bf16 one's, and the rewrite costs a kernel).
 *
 * What it costs, per element of r (docs/NUMERICS.md, "Residual sums"):
 * the GEMM that made r stops reading x (-1 element), each reader of r
 * reads x and o (+1 element each), and the add of x after the last GEMM
 * is a kernel of its own unless it fuses with what follows (read t and x,
 * write y: +3 elements): +4 elements in a GPT-2 block, one launch more.
 */
#include "passes.h"
#include "rewrite.h"

#include <string.h>

static bool low_precision(fc_dtype dt) { return dt == FC_BF16 || dt == FC_F16; }

/* A row vector broadcast along the rows of x: [.., N], every other dim 1. */
static bool row_vector(const fc_value *v, const fc_value *x) {
    if (v->weak || v->rank < 1 || v->rank > x->rank || v->dims[v->rank - 1] != x->dims[x->rank - 1]) return false;
    for (int d = 0; d + 1 < v->rank; d++)
        if (v->dims[d] != 1) return false;
    return true;
}

/* v is a GEMM's product, as the epilogue pass folds it: a matmul of v's
 * dtype, then scales by numbers and a row-vector bias, each step the only
 * use of the value before it. */
static bool gemm_product(const fc_value *v, const int *uses) {
    for (const fc_value *cur = v;;) {
        const fc_node *d = cur->def;
        if (!d || d->nout != 1 || d->out[0]->dtype != v->dtype) return false;
        if (d->op == FC_OP_MATMUL) return d->in[0]->rank >= 2 && d->in[1]->rank >= 2;
        const fc_value *next = NULL;
        if ((d->op == FC_OP_MUL || d->op == FC_OP_DIV) && d->in[1]->weak) next = d->in[0];
        else if (d->op == FC_OP_MUL && d->in[0]->weak) next = d->in[1];
        else if (d->op == FC_OP_ADD && row_vector(d->in[1], d->in[0])) next = d->in[0];
        else if (d->op == FC_OP_ADD && row_vector(d->in[0], d->in[1])) next = d->in[1];
        if (!next || next->weak || !fc_same_type(next, cur) || uses[next->id] != 1) return false;
        cur = next;
    }
}

/* y = add(r, m) as the rule wants it: sets *r_at (the operand that is the
 * residual sum) and *branch (the operand of r that goes into the GEMM). */
static bool matches(const fc_node *y, int *uses, int *r_at, int *branch) {
    if (y->op != FC_OP_ADD || y->nout != 1 || !low_precision(y->out[0]->dtype)) return false;
    for (int k = 0; k < 2; k++) {
        const fc_value *r = y->in[k], *m = y->in[1 - k];
        if (r->weak || m->weak || !fc_same_type(r, y->out[0]) || !fc_same_type(m, r)) continue;
        if (uses[m->id] != 1 || !gemm_product(m, uses)) continue;
        const fc_node *s = r->def;
        if (!s || s->op != FC_OP_ADD || s->in[0]->weak || s->in[1]->weak || !fc_same_type(s->in[0], r) ||
            !fc_same_type(s->in[1], r))
            continue;
        /* The branch: the operand a GEMM computes (its chain may have r
         * as one more user: o is read by r and, after this, by the GEMM). */
        int b = -1;
        for (int j = 1; j >= 0 && b < 0; j--) {
            const fc_value *o = s->in[j];
            uses[o->id]--; /* r's read of o does not count against the chain */
            if (uses[o->id] == 0 && gemm_product(o, uses)) b = j;
            uses[o->id]++;
        }
        if (b < 0) continue;
        *r_at = k;
        *branch = b;
        return true;
    }
    return false;
}

fc_status fc_pass_residual(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "residual");
    if (st) return st;
    int *uses = fc_use_counts(g);
    if (!uses) return g->status = FC_ERR_NOMEM;
    int found = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int r_at, b;
        found += !g->nodes[i]->dead && matches(g->nodes[i], uses, &r_at, &b);
    }
    if (found == 0) {
        fc_ctx_freemem(g->ctx, uses);
        return FC_OK;
    }
    /* Decided on the graph as it is (the counts are not updated as nodes
     * change): y's operands are defined before y, so y' is built at y. */
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) {
        fc_ctx_freemem(g->ctx, uses);
        return g->status;
    }
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        int r_at, b;
        bool hit = matches(n, uses, &r_at, &b);
        fc_rw_remap(&rw, n);
        if (!hit) {
            fc_rw_keep(&rw, n);
            continue;
        }
        const fc_node *s = n->in[r_at]->def;
        fc_value *x = s->in[1 - b], *o = s->in[b], *m = n->in[1 - r_at];
        fc_value *t = fc_rw_op2(&rw, FC_OP_ADD, o, m);
        fc_value *y = fc_rw_op2(&rw, FC_OP_ADD, x, t);
        if (!y) break;
        y->name = n->out[0]->name;
        if (!fc_rw_replace(&rw, n->out[0], y)) break;
    }
    fc_ctx_freemem(g->ctx, uses);
    st = fc_rw_end(&rw);
    /* r may have no reader left (when y was its only one). */
    return st == FC_OK ? fc_pass_dce(g) : st;
}

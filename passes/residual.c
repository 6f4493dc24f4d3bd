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
 * the stream x is added to the GEMM's result t = o + m in f32 by the
 * kernel that reads y, and r's other readers (a layernorm or rmsnorm) compute x + o in f32
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
 * bf16 one's).
 *
 * Only where the add of x joins a kernel that reads y (the next block's
 * layernorm or rmsnorm): every reader of y, and there is one, is a
 * reduction or an elementwise op other than an add that a GEMM's epilogue
 * takes (a reader rewritten with y as its r reads y no more; decide()).
 * Elsewhere (a graph whose result is y and nothing reads it, y read by a
 * GEMM) the add would be a launch of its own, and cuBLASLt's epilogue
 * adds one matrix of the result's dtype (its C), so no plan without that
 * launch keeps x + o from being rounded to 16 bits before m is added: the
 * sum stays as written.
 *
 * What it costs, per element of r (docs/NUMERICS.md, "Residual sums"):
 * the GEMM that made r stops reading x (-1 element), each reader of r
 * reads x and o (+1 element each), the kernel that y fuses into reads t
 * and x instead of y (+1) and stores y where others read it (+1): +1 to
 * +3 elements, no launch.
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

/* Does a reader of v compute in a kernel that the add making v can join?
 * A reduction or an elementwise op does (vertical fusion puts v's add in
 * its prologue, and stores v from there if something else needs it),
 * but for an add of a GEMM's product, which the epilogue pass makes that
 * GEMM's residual. */
static bool kernel_reader(const fc_node *u, const fc_value *v, const int *uses) {
    if (fc_op_is_reduce(u->op)) return true;
    if (!fc_op_is_elementwise(u->op)) return false;
    if (u->op == FC_OP_ADD && u->nin == 2) {
        const fc_value *other = u->in[0] == v ? u->in[1] : u->in[0];
        if (uses[other->id] == 1 && gemm_product(other, uses)) return false;
    }
    return true;
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

/* The matches to rewrite, by node id: those whose y, once rewritten, is
 * read only by kernel_readers, at least one (they then compute its add of
 * x in their prologue). A reader that is itself rewritten with y as its
 * r no longer reads y, so the nodes are decided last to first: in a chain
 * of blocks each block's y is the next block's r, and the chain is
 * rewritten when its end is read by a kernel (a final layernorm), and
 * left as written when its end is a GEMM's epilogue or a graph result
 * read by nothing. */
static bool *decide(fc_graph *g, int *uses) {
    size_t nv = (size_t)g->next_value_id + 1, nn = (size_t)g->next_node_id + 1;
    int *count = fc_ctx_malloc(g->ctx, sizeof *count * 3 * nv);
    bool *chosen = fc_ctx_malloc(g->ctx, sizeof *chosen * nn);
    if (!count || !chosen) {
        fc_ctx_freemem(g->ctx, count);
        fc_ctx_freemem(g->ctx, chosen);
        return NULL;
    }
    memset(count, 0, sizeof *count * 3 * nv);
    memset(chosen, 0, sizeof *chosen * nn);
    int *kernel = count, *other = count + nv, *gone = count + 2 * nv;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *u = g->nodes[i];
        for (int k = 0; !u->dead && k < u->nin; k++) {
            const fc_value *v = u->in[k];
            if (v->weak || v->id < 0 || v->id >= g->next_value_id) continue;
            if (kernel_reader(u, v, uses)) kernel[v->id]++;
            else other[v->id]++;
        }
    }
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const fc_node *n = g->nodes[i];
        int r_at, b;
        if (n->dead || !matches(n, uses, &r_at, &b)) continue;
        int y = n->out[0]->id;
        if (kernel[y] == 0 || other[y] != gone[y]) continue;
        chosen[n->id] = true;
        gone[n->in[r_at]->id]++; /* n reads r no more: r's readers are one fewer */
    }
    fc_ctx_freemem(g->ctx, count);
    return chosen;
}

fc_status fc_pass_residual(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "residual");
    if (st) return st;
    int *uses = fc_use_counts(g);
    bool *chosen = uses ? decide(g, uses) : NULL;
    if (!chosen) {
        fc_ctx_freemem(g->ctx, uses);
        return g->status = FC_ERR_NOMEM;
    }
    int found = 0, ids = g->next_node_id; /* the rewriter's new nodes come after */
    for (int i = 0; i < g->nnodes; i++) found += chosen[g->nodes[i]->id];
    if (found == 0) {
        fc_ctx_freemem(g->ctx, uses);
        fc_ctx_freemem(g->ctx, chosen);
        return FC_OK;
    }
    /* Decided on the graph as it is (the counts are not updated as nodes
     * change): y's operands are defined before y, so y' is built at y. */
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) {
        fc_ctx_freemem(g->ctx, uses);
        fc_ctx_freemem(g->ctx, chosen);
        return g->status;
    }
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        int r_at, b;
        bool hit = n->id >= 0 && n->id < ids && chosen[n->id] && matches(n, uses, &r_at, &b);
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
    fc_ctx_freemem(g->ctx, chosen);
    st = fc_rw_end(&rw);
    /* r may have no reader left (when y was its only one). */
    return st == FC_OK ? fc_pass_dce(g) : st;
}

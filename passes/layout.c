/* layout.c - keep activations channels-last between convolutions.
 *
 * lower_conv ends every lowered op with the permute from channels-last
 * back to NCHW ([0, r-1, 1, .., r-2]) and starts the next one with the
 * inverse. Between them sit the elementwise ops of the network (ReLU, the
 * residual add, casts), so the two permutes do not meet. This pass moves
 * such a permute below each elementwise op that reads it:
 *
 *     e(permute(a, P), b)  ->  permute(e(a, permute(b, P^-1)), P)
 *
 * (b reshaped to the rank first when it broadcasts with fewer dims; a weak
 * scalar stays; b = permute(b0, P) becomes b0). Walking the graph in order
 * moves the permute down a whole chain, until canonicalize cancels it
 * against the next convolution's permute in, or it reaches a graph result
 * or an op that is not elementwise (a reduction, a matmul, a view), where
 * fusion reads it as a view. So a residual network runs channels-last
 * from its first convolution to its pooling head, and the only transposes
 * left are at the graph's edges, inside the kernels next to them.
 *
 * Only the channels-first permute of rank 3 to 5 moves: other permutes
 * (attention heads, say) are where their graphs put them.
 */
#include "passes.h"
#include "rewrite.h"

/* Whether p is [0, r-1, 1, .., r-2]. */
static bool channels_first_perm(const fc_node *p) {
    if (!p || p->op != FC_OP_PERMUTE || p->a.nlist < 3 || p->a.nlist > 5) return false;
    int r = p->a.nlist;
    if (p->a.list[0] != 0 || p->a.list[1] != r - 1) return false;
    for (int i = 2; i < r; i++)
        if (p->a.list[i] != i - 1) return false;
    return true;
}

static fc_node *moving_permute(const fc_value *v) { return v && !v->weak && channels_first_perm(v->def) ? v->def : NULL; }

/* b as an operand of the channels-last op: the permute undone, or the
 * inverse permute applied (after a reshape to rank r). */
static fc_value *to_last(fc_graph *g, fc_value *b, int r) {
    if (b->weak) return b;
    if (moving_permute(b) && b->rank == r) return b->def->in[0];
    if (b->rank < r) {
        fc_dim d[FC_MAX_RANK];
        int pad = r - b->rank;
        for (int i = 0; i < r; i++) d[i] = i < pad ? 1 : b->dims[i - pad];
        b = fc_reshape(g, b, r, d);
    }
    int perm[FC_MAX_RANK];
    perm[0] = 0;
    for (int i = 1; i < r - 1; i++) perm[i] = i + 1;
    perm[r - 1] = 1;
    return fc_permute(g, b, r, perm);
}

/* The replacement of elementwise node n with a moving permute operand, or
 * NULL to keep it. */
static fc_value *move_below(fc_graph *g, fc_node *n) {
    bool unary = fc_op_is_unary(n->op) || n->op == FC_OP_CAST;
    bool binary = fc_op_is_binary(n->op) || fc_op_is_compare(n->op);
    if (!unary && !binary) return NULL;
    fc_node *p = NULL;
    for (int k = 0; k < n->nin && !p; k++) p = moving_permute(n->in[k]);
    if (!p || n->out[0]->rank != p->a.nlist) return NULL;
    int r = n->out[0]->rank;
    for (int k = 0; k < n->nin; k++)
        if (!n->in[k]->weak && n->in[k]->rank > r) return NULL;
    fc_value *in[2];
    for (int k = 0; k < n->nin; k++) in[k] = to_last(g, n->in[k], r);
    fc_node *e = fc_build(g, n->op, in, n->nin, &n->a);
    if (!e) return NULL;
    int perm[FC_MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = (int)p->a.list[i];
    return fc_permute(g, e->out[0], r, perm);
}

fc_status fc_pass_layout(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "layout");
    if (st) return st;
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) return g->status;
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        fc_value *y = move_below(g, n);
        if (g->status) break;
        if (y && fc_same_type(y, n->out[0])) fc_rw_replace(&rw, n->out[0], y);
        else fc_rw_keep(&rw, n);
    }
    st = fc_rw_end(&rw);
    /* The permutes a moved one leaves without readers go now: autocast,
     * next, counts every node's reads when it decides what to store in
     * 16 bits, and a dead f32 read keeps a whole residual chain in f32. */
    return st ? st : fc_pass_dce(g);
}

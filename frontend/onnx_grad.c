/* onnx_grad.c - ONNX's Gradient (domain ai.onnx.preview.training), done at
 * import as reverse-mode differentiation of the IR the importer has built
 * so far: the forward ops from the `xs` to `y` are already nodes of the
 * graph (in topological order), so the walk goes back over them from y's
 * defining node, each op adding its operands' adjoints as new IR ops. The
 * adjoint of y is all ones, so a non-scalar y gives the gradient of its
 * sum. Differentiating the IR rather than the ONNX nodes means every ONNX
 * op that translates onto differentiable IR ops is covered at once; an op
 * without a rule is an error naming the model's node it came from. */
#include "onnx_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct grad_ctx {
    ox_ctx *ox;
    fc_graph *g;
    fc_value **adj; /* by value id: the adjoint so far, or NULL */
    bool *dep;      /* by value id: depends on one of the xs */
    int nids;
} grad_ctx;

static bool tracked(const grad_ctx *c, const fc_value *v) {
    return v && !v->weak && v->id >= 0 && v->id < c->nids && c->dep[v->id];
}

/* A zero tensor shaped as v (a missing adjoint, an output no path reaches). */
static fc_value *zeros_like(fc_graph *g, const fc_value *v) { return fc_full(g, v->rank, v->dims, 0, v->dtype); }

/* The adjoint of a broadcast operand: dy summed over the axes that
 * broadcasting added (leading ones, and dims of 1 that became larger),
 * reshaped to the operand's own dims. */
static fc_value *unbroadcast(fc_graph *g, fc_value *dy, const fc_value *to) {
    int axes[FC_MAX_RANK], n = 0, lead = dy->rank - to->rank;
    for (int d = 0; d < dy->rank; d++) {
        bool add = d < lead || (to->dims[d - lead] == 1 && dy->dims[d] != 1);
        if (add) axes[n++] = d;
    }
    fc_value *s = n ? fc_reduce_sum(g, dy, n, axes, true) : dy;
    if (n == 0 && dy->rank == to->rank) return s;
    return fc_reshape(g, s, to->rank, to->dims);
}

static void accumulate(grad_ctx *c, const fc_value *x, fc_value *d) {
    if (!tracked(c, x) || !d) return;
    if (d->rank != x->rank || memcmp(d->dims, x->dims, sizeof(fc_dim) * (size_t)x->rank)) d = unbroadcast(c->g, d, x);
    if (d->dtype != x->dtype) d = fc_cast(c->g, d, x->dtype);
    c->adj[x->id] = c->adj[x->id] ? fc_add(c->g, c->adj[x->id], d) : d;
}

/* x with its last two dims swapped. */
static fc_value *swap_last(fc_graph *g, fc_value *x) {
    int perm[FC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) perm[d] = d;
    perm[x->rank - 2] = x->rank - 1;
    perm[x->rank - 1] = x->rank - 2;
    return fc_permute(g, x, x->rank, perm);
}

/* matmul(a, b) with rank-1 operands promoted as the op does: dA = dY @ B^T,
 * dB = A^T @ dY on the promoted shapes, batch dims reduced where they were
 * broadcast, then the operands' own shapes. */
static void grad_matmul(grad_ctx *c, const fc_node *n, fc_value *dy) {
    fc_graph *g = c->g;
    fc_value *a = n->in[0], *b = n->in[1];
    fc_dim ad[FC_MAX_RANK], bd[FC_MAX_RANK], yd[FC_MAX_RANK];
    int ra = fc_matmul_operand_dims(a, true, ad), rb = fc_matmul_operand_dims(b, false, bd);
    fc_value *a2 = ra == a->rank ? a : fc_reshape(g, a, ra, ad);
    fc_value *b2 = rb == b->rank ? b : fc_reshape(g, b, rb, bd);
    /* dy on the promoted shape: batch.., M, N (a rank-1 side's 1 put back). */
    int nb = dy->rank - (a->rank != 1) - (b->rank != 1);
    memcpy(yd, dy->dims, sizeof(fc_dim) * (size_t)nb);
    yd[nb] = a->rank == 1 ? 1 : dy->dims[nb];
    yd[nb + 1] = b->rank == 1 ? 1 : dy->dims[dy->rank - 1];
    fc_value *dy2 = nb + 2 == dy->rank ? dy : fc_reshape(g, dy, nb + 2, yd);
    /* Back to a rank-1 operand's own shape here: accumulate's broadcast
     * rule would read [K, 1] as K broadcast over a leading dim. */
    if (tracked(c, a)) {
        fc_value *d = unbroadcast(g, fc_matmul(g, dy2, swap_last(g, b2)), a2);
        accumulate(c, a, d->rank == a->rank ? d : fc_reshape(g, d, a->rank, a->dims));
    }
    if (tracked(c, b)) {
        fc_value *d = unbroadcast(g, fc_matmul(g, swap_last(g, a2), dy2), b2);
        accumulate(c, b, d->rank == b->rank ? d : fc_reshape(g, d, b->rank, b->dims));
    }
}

/* Is axis d of x reduced by n (an empty axes list reduces every one). */
static bool reduced(const fc_node *n, int d) {
    if (!n->a.nlist) return true;
    for (int i = 0; i < n->a.nlist; i++)
        if (norm_axis(n->a.list[i], n->in[0]->rank) == d) return true;
    return false;
}

/* The static size of the reduced dims, or -1 when one is symbolic. */
static int64_t reduced_count(const fc_node *n) {
    const fc_value *x = n->in[0];
    int64_t cnt = 1;
    for (int d = 0; d < x->rank; d++) {
        if (!reduced(n, d)) continue;
        if (fc_dim_is_sym(x->dims[d])) return -1;
        cnt *= x->dims[d];
    }
    return cnt;
}

/* reduce_sum / reduce_mean: dy back to the kept rank, expanded over x. */
static fc_value *grad_reduce(grad_ctx *c, const fc_node *n, fc_value *dy) {
    const fc_value *x = n->in[0];
    fc_dim kd[FC_MAX_RANK];
    memcpy(kd, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    for (int d = 0; d < x->rank; d++)
        if (reduced(n, d)) kd[d] = 1;
    fc_value *k = n->a.keepdim ? dy : fc_reshape(c->g, dy, x->rank, kd);
    fc_value *e = fc_expand(c->g, k, x->rank, x->dims);
    if (n->op == FC_OP_REDUCE_MEAN) e = fc_div(c->g, e, fc_scalar(c->g, (double)reduced_count(n)));
    return e;
}

/* Zeros of x's shape with `len` (static) along axis. */
static fc_value *zero_block(fc_graph *g, const fc_value *x, int axis, int64_t len) {
    fc_dim d[FC_MAX_RANK];
    memcpy(d, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    d[axis] = len;
    return fc_full(g, x->rank, d, 0, x->dtype);
}

/* slice with step 1: dy placed back between zero blocks. */
static fc_value *grad_slice(grad_ctx *c, const fc_node *n, fc_value *dy) {
    const fc_value *x = n->in[0];
    int ax = norm_axis(n->a.axis, x->rank);
    int64_t len = x->dims[ax], out = dy->dims[ax];
    int64_t s = n->a.start < 0 ? n->a.start + len : n->a.start;
    if (s < 0) s = 0;
    if (s > len) s = len;
    fc_value *parts[3];
    int np = 0;
    if (s > 0) parts[np++] = zero_block(c->g, x, ax, s);
    parts[np++] = dy;
    if (len - s - out > 0) parts[np++] = zero_block(c->g, x, ax, len - s - out);
    return np == 1 ? dy : fc_concat(c->g, np, parts, ax);
}

/* Why a node has no rule here (NULL: it has one). */
static const char *no_rule(const fc_node *n) {
    switch (n->op) {
    case FC_OP_REDUCE_MEAN: return reduced_count(n) < 0 ? "a mean over a symbolic dim" : NULL;
    case FC_OP_SLICE: {
        int ax = norm_axis(n->a.axis, n->in[0]->rank);
        if (n->a.step != 1) return "a slice with a step other than 1";
        return fc_dim_is_sym(n->in[0]->dims[ax]) || fc_dim_is_sym(n->out[0]->dims[ax]) ? "a slice along a symbolic dim" : NULL;
    }
    case FC_OP_CONCAT:
        for (int i = 0; i < n->nin; i++)
            if (fc_dim_is_sym(n->in[i]->dims[norm_axis(n->a.axis, n->in[i]->rank)])) return "a concat along a symbolic dim";
        return NULL;
    case FC_OP_SPLIT: return NULL;
    case FC_OP_NEG: case FC_OP_ABS: case FC_OP_EXP: case FC_OP_LOG: case FC_OP_SQRT: case FC_OP_RSQRT:
    case FC_OP_RECIP: case FC_OP_SIN: case FC_OP_COS: case FC_OP_TANH: case FC_OP_SIGMOID: case FC_OP_RELU:
    case FC_OP_ERF: case FC_OP_GELU: case FC_OP_SILU: case FC_OP_ADD: case FC_OP_SUB: case FC_OP_MUL:
    case FC_OP_DIV: case FC_OP_MAX: case FC_OP_MIN: case FC_OP_POW: case FC_OP_WHERE: case FC_OP_CAST:
    case FC_OP_REDUCE_SUM: case FC_OP_RESHAPE: case FC_OP_PERMUTE: case FC_OP_EXPAND: case FC_OP_MATMUL:
    case FC_OP_SOFTMAX: return NULL;
    default: return "";
    }
}

/* The adjoints of node n's operands from those of its results. */
static void grad_node(grad_ctx *c, const fc_node *n) {
    fc_graph *g = c->g;
    fc_value *x = n->nin ? n->in[0] : NULL, *y = n->out[0], *dy = c->adj[y->id];
    fc_value *b = n->nin > 1 ? n->in[1] : NULL;
    fc_value *zero = fc_scalar(g, 0);
    switch (n->op) {
    case FC_OP_NEG: accumulate(c, x, fc_neg(g, dy)); break;
    case FC_OP_ABS: accumulate(c, x, fc_where(g, fc_gt(g, x, zero), dy, fc_where(g, fc_lt(g, x, zero), fc_neg(g, dy), zero))); break;
    case FC_OP_EXP: accumulate(c, x, fc_mul(g, dy, y)); break;
    case FC_OP_LOG: accumulate(c, x, fc_div(g, dy, x)); break;
    case FC_OP_SQRT: accumulate(c, x, fc_div(g, fc_mul(g, dy, fc_scalar(g, 0.5)), y)); break;
    case FC_OP_RSQRT: accumulate(c, x, fc_div(g, fc_mul(g, fc_mul(g, dy, fc_scalar(g, -0.5)), y), x)); break;
    case FC_OP_RECIP: accumulate(c, x, fc_neg(g, fc_mul(g, dy, fc_mul(g, y, y)))); break;
    case FC_OP_SIN: accumulate(c, x, fc_mul(g, dy, fc_cos(g, x))); break;
    case FC_OP_COS: accumulate(c, x, fc_neg(g, fc_mul(g, dy, fc_sin(g, x)))); break;
    case FC_OP_TANH: accumulate(c, x, fc_mul(g, dy, fc_sub(g, fc_scalar(g, 1), fc_mul(g, y, y)))); break;
    case FC_OP_SIGMOID: accumulate(c, x, fc_mul(g, dy, fc_mul(g, y, fc_sub(g, fc_scalar(g, 1), y)))); break;
    case FC_OP_RELU: accumulate(c, x, fc_where(g, fc_gt(g, x, zero), dy, zero)); break;
    case FC_OP_ERF: /* 2/sqrt(pi) exp(-x^2) */
        accumulate(c, x, fc_mul(g, dy, fc_mul(g, fc_scalar(g, 2 / sqrt(M_PI)), fc_exp(g, fc_neg(g, fc_mul(g, x, x))))));
        break;
    case FC_OP_GELU: { /* Phi(x) + x phi(x) */
        fc_value *cdf = fc_mul(g, fc_scalar(g, 0.5), fc_add(g, fc_scalar(g, 1), fc_erf(g, fc_mul(g, x, fc_scalar(g, M_SQRT1_2)))));
        fc_value *pdf = fc_mul(g, fc_scalar(g, 1 / sqrt(2 * M_PI)), fc_exp(g, fc_mul(g, fc_scalar(g, -0.5), fc_mul(g, x, x))));
        accumulate(c, x, fc_mul(g, dy, fc_add(g, cdf, fc_mul(g, x, pdf))));
        break;
    }
    case FC_OP_SILU: { /* s (1 + x (1 - s)) */
        fc_value *s = fc_sigmoid(g, x);
        accumulate(c, x, fc_mul(g, dy, fc_mul(g, s, fc_add(g, fc_scalar(g, 1), fc_mul(g, x, fc_sub(g, fc_scalar(g, 1), s))))));
        break;
    }
    case FC_OP_ADD: accumulate(c, x, dy); accumulate(c, b, dy); break;
    case FC_OP_SUB: accumulate(c, x, dy); if (tracked(c, b)) accumulate(c, b, fc_neg(g, dy)); break;
    case FC_OP_MUL:
        if (tracked(c, x)) accumulate(c, x, fc_mul(g, dy, b));
        if (tracked(c, b)) accumulate(c, b, fc_mul(g, dy, x));
        break;
    case FC_OP_DIV:
        if (tracked(c, x)) accumulate(c, x, fc_div(g, dy, b));
        if (tracked(c, b)) accumulate(c, b, fc_neg(g, fc_div(g, fc_mul(g, dy, y), b)));
        break;
    case FC_OP_MAX: case FC_OP_MIN: { /* a tie goes to the first operand */
        fc_value *first = n->op == FC_OP_MAX ? fc_ge(g, x, b) : fc_le(g, x, b);
        if (tracked(c, x)) accumulate(c, x, fc_where(g, first, dy, zero));
        if (tracked(c, b)) accumulate(c, b, fc_where(g, first, zero, dy));
        break;
    }
    case FC_OP_POW:
        if (tracked(c, x)) accumulate(c, x, fc_mul(g, dy, fc_mul(g, b, fc_pow(g, x, fc_sub(g, b, fc_scalar(g, 1))))));
        if (tracked(c, b)) accumulate(c, b, fc_mul(g, dy, fc_mul(g, y, fc_log(g, x))));
        break;
    case FC_OP_WHERE:
        if (tracked(c, b)) accumulate(c, b, fc_where(g, x, dy, zero));
        if (tracked(c, n->in[2])) accumulate(c, n->in[2], fc_where(g, x, zero, dy));
        break;
    case FC_OP_CAST: accumulate(c, x, fc_cast(g, dy, x->dtype)); break;
    case FC_OP_REDUCE_SUM: case FC_OP_REDUCE_MEAN: accumulate(c, x, grad_reduce(c, n, dy)); break;
    case FC_OP_RESHAPE: accumulate(c, x, fc_reshape(g, dy, x->rank, x->dims)); break;
    case FC_OP_PERMUTE: {
        int inv[FC_MAX_RANK];
        for (int d = 0; d < n->a.nlist; d++) inv[n->a.list[d]] = d;
        accumulate(c, x, fc_permute(g, dy, x->rank, inv));
        break;
    }
    case FC_OP_EXPAND: accumulate(c, x, dy); break;
    case FC_OP_MATMUL: grad_matmul(c, n, dy); break;
    case FC_OP_SOFTMAX: { /* y (dy - sum(dy y)) along the axis */
        int ax = norm_axis(n->a.axis, y->rank);
        accumulate(c, x, fc_mul(g, y, fc_sub(g, dy, fc_reduce_sum(g, fc_mul(g, dy, y), 1, &ax, true))));
        break;
    }
    case FC_OP_SLICE: accumulate(c, x, grad_slice(c, n, dy)); break;
    case FC_OP_CONCAT: {
        int ax = norm_axis(n->a.axis, y->rank);
        int64_t at = 0;
        for (int i = 0; i < n->nin; i++) {
            int64_t len = n->in[i]->dims[ax];
            if (tracked(c, n->in[i])) accumulate(c, n->in[i], fc_slice(g, dy, ax, at, at + len, 1));
            at += len;
        }
        break;
    }
    default: break;
    }
}

/* Gradient's split: the results' adjoints (zeros where a result has none)
 * concatenated back. Handled apart since any of its results may carry one. */
static void grad_split(grad_ctx *c, const fc_node *n) {
    fc_value *parts[64];
    if (n->nout > 64) return;
    for (int i = 0; i < n->nout; i++) parts[i] = c->adj[n->out[i]->id] ? c->adj[n->out[i]->id] : zeros_like(c->g, n->out[i]);
    accumulate(c, n->in[0], fc_concat(c->g, n->nout, parts, norm_axis(n->a.axis, n->in[0]->rank)));
}

/* The model's name for the node an IR op was made for. */
static const char *source_name(const fc_graph *g, const fc_node *n) {
    if (n->loc.line >= 1 && n->loc.line <= g->nsrc_ops && g->src_ops[n->loc.line - 1]) return g->src_ops[n->loc.line - 1];
    return "?";
}

static bool attr_str(const ProtobufCBinaryData *s, char *buf, size_t cap) {
    if (!s->len || s->len >= cap) return false;
    memcpy(buf, s->data, s->len);
    buf[s->len] = 0;
    return true;
}

#define GRAD_MAX 64
#define GRAD_SUPPORTED "neg, abs, exp, log, sqrt, rsqrt, recip, sin, cos, tanh, sigmoid, relu, erf, gelu, silu, add, " \
    "sub, mul, div, max, min, pow, where, cast, matmul, reduce_sum, reduce_mean, softmax, reshape, permute, expand, " \
    "slice, concat, split"

fc_status ox_op_gradient(ox_ctx *ox) {
    const Onnx__NodeProto *nd = ox->node;
    const Onnx__AttributeProto *axs = attr(nd, "xs"), *azs = attr(nd, "zs"), *ay = attr(nd, "y");
    if (!axs || !axs->n_strings || !ay || !ay->has_s)
        return ERR("Gradient needs the attributes xs (a list of names) and y (a name)");
    size_t nx = axs->n_strings, nz = azs ? azs->n_strings : 0;
    if (nx + nz > GRAD_MAX) return ERR("%zu xs and zs: at most %d", nx + nz, GRAD_MAX);
    if ((size_t)ox->nin != nx + nz)
        return ERR("%d inputs, but xs and zs name %zu values", ox->nin, nx + nz);
    if ((size_t)ox->nout != nx) return ERR("%d outputs, but xs names %zu values", ox->nout, nx);
    char yname[256], name[256];
    if (!attr_str(&ay->s, yname, sizeof yname)) return ERR("attribute y is empty or too long");
    fc_value *xv[GRAD_MAX];
    for (size_t i = 0; i < nx + nz; i++) {
        const ProtobufCBinaryData *s = i < nx ? &axs->strings[i] : &azs->strings[i - nx];
        if (!attr_str(s, name, sizeof name)) return ERR("a name in xs or zs is empty or too long");
        /* The gradient is taken where the forward graph already is: feeds
         * that differ from the named values would need the forward
         * subgraph evaluated a second time, which is not done. */
        if (!nd->input[i] || strcmp(nd->input[i], name))
            return ERR("input %zu is '%s' but %s names '%s': only feeds that are the named values themselves are supported",
                       i, nd->input[i] ? nd->input[i] : "", i < nx ? "xs" : "zs", name);
        if (i >= nx) continue;
        ox_val *val = ox->in[i];
        if (!val) return ERR("x '%s' is absent", name);
        if (val->k || !val->v)
            return ERR("x '%s' is known data at import (an initializer or a constant), which the importer folds: only "
                       "gradients with respect to graph inputs and the values computed from them are supported", name);
        if (!fc_dtype_is_float(val->v->dtype)) return ERR("x '%s' has dtype %s: only float values have gradients", name,
                                                          fc_dtype_name(val->v->dtype));
        xv[i] = val->v;
    }
    ox_val *yval = ox_lookup(ox, yname);
    if (!yval) return ERR("y '%s' is not defined before the Gradient node", yname);
    fc_graph *g = G;
    grad_ctx c = {ox, g, NULL, NULL, g->next_value_id};
    c.adj = calloc((size_t)c.nids + 1, sizeof *c.adj);
    c.dep = calloc((size_t)c.nids + 1, sizeof *c.dep);
    fc_status st = FC_OK;
    if (!c.adj || !c.dep) { st = fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < nx; i++) c.dep[xv[i]->id] = true;
    fc_value *yv = yval->v;
    if (yv && !fc_dtype_is_float(yv->dtype)) {
        st = ERR("y '%s' has dtype %s: only float values have gradients", yname, fc_dtype_name(yv->dtype));
        goto done;
    }
    int nnodes = g->nnodes, last = -1;
    for (int i = 0; i < nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead) continue;
        bool d = false;
        for (int j = 0; j < n->nin && !d; j++) d = tracked(&c, n->in[j]);
        /* Only float values carry a gradient: a compare, or a cast to an
         * integer, is a constant to it (PyTorch's detach). */
        for (int j = 0; j < n->nout; j++) c.dep[n->out[j]->id] = d && fc_dtype_is_float(n->out[j]->dtype);
        if (yv && n->out[0] && yv->def == n) last = i;
    }
    /* A y known at import was folded from known data only: it depends on
     * no x (the xs are not known), so every gradient is zero, as it is for
     * a y that no x reaches. */
    if (yv && tracked(&c, yv)) {
        c.adj[yv->id] = fc_full(g, yv->rank, yv->dims, 1, yv->dtype);
        for (int i = last; i >= 0; i--) {
            const fc_node *n = g->nodes[i];
            if (n->dead) continue;
            bool any = false, deps = false;
            for (int j = 0; j < n->nout; j++) any = any || c.adj[n->out[j]->id];
            for (int j = 0; j < n->nin; j++) deps = deps || tracked(&c, n->in[j]);
            if (!any || !deps) continue;
            const char *why = no_rule(n);
            if (why) {
                if (*why)
                    st = ERR("the forward graph from xs to y '%s' has %s (made for node '%s'), which has no gradient "
                             "rule", yname, why, source_name(g, n));
                else
                    st = ERR("the forward graph from xs to y '%s' has the IR op '%s' (made for node '%s'), which has "
                             "no gradient rule (supported: " GRAD_SUPPORTED ")", yname, fc_op_table[n->op].name,
                             source_name(g, n));
                goto done;
            }
            if (n->op == FC_OP_SPLIT) grad_split(&c, n);
            else grad_node(&c, n);
            if (fc_graph_status(g)) goto done;
        }
    }
    for (size_t i = 0; i < nx; i++) {
        fc_value *d = c.adj[xv[i]->id];
        OUT(i, d ? d : zeros_like(g, xv[i]));
    }
done:
    free(c.adj);
    free(c.dep);
    return st;
}

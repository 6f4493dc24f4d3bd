/*
 * recognize_norm.c - LayerNorm and RMSNorm written out become the norm ops
 * again.
 *
 *   LayerNorm:  d = x - reduce_mean(x, [-1]);  var = reduce_mean(d^2, [-1])
 *               y = d / sqrt(var + eps)  [* w]  [+ b]     -> layernorm(x, w, b)
 *   RMSNorm:    ms = reduce_mean(x^2, [-1])
 *               y = x * rsqrt(ms + eps)  [* w]            -> rmsnorm(x, w)
 *
 * d^2 is pow(d, 2) or d * d; 1/sqrt(a) is rsqrt(a), reciprocal(sqrt(a)),
 * 1 / sqrt(a), or a division by sqrt(a) (ONNX has no Rsqrt: PyTorch exports
 * Llama's rsqrt as Sqrt and Reciprocal). The means reduce the last axis
 * with keepdim; w and b are 1-D over it (a norm without them gets a weight
 * of ones and a bias of zeros, which canonicalize folds away after
 * decompose). The rewrite is made at the pattern's outermost node: a core
 * whose one user multiplies it by a weight waits for that user.
 */
#include "passes.h"
#include "recognize.h"
#include "rewrite.h"

#include <math.h>
#include <string.h>

typedef struct nctx {
    fc_rc rc;
    fc_node **user; /* by value id: the node reading it (meaningful when used once) */
} nctx;

static bool mean_last(const fc_value *m, fc_value **x) {
    if (fc_rc_op(m) != FC_OP_REDUCE_MEAN) return false;
    const fc_node *r = m->def;
    const fc_value *in = r->in[0];
    if (!r->a.keepdim || r->a.nlist != 1 || in->rank < 1) return false;
    int64_t ax = r->a.list[0] < 0 ? r->a.list[0] + in->rank : r->a.list[0];
    if (ax != in->rank - 1) return false;
    *x = r->in[0];
    return true;
}

/* v = x^2 (pow(x, 2) or x * x), private: x, else NULL. */
static fc_value *square_of(const nctx *c, fc_value *v) {
    if (!fc_rc_private(&c->rc, v, 1)) return NULL;
    const fc_node *n = v->def;
    if (n->op == FC_OP_POW && fc_rc_is(n->in[1], v->dtype, 2.0)) return n->in[0];
    if (n->op == FC_OP_MUL && n->in[0] == n->in[1]) return n->in[0];
    return NULL;
}

/* a = add(m, eps) with a constant eps, private: m and *eps. */
static fc_value *plus_eps(const nctx *c, fc_value *a, double *eps) {
    if (fc_rc_op(a) != FC_OP_ADD || !fc_rc_private(&c->rc, a, 1)) return NULL;
    for (int side = 0; side < 2; side++)
        if (fc_rc_constant(a->def->in[1 - side], a->dtype, eps) && *eps >= 0 && isfinite(*eps)) return a->def->in[side];
    return NULL;
}

/* v = 1 / sqrt(m + eps) in one of its spellings: m and *eps. */
static fc_value *inv_std(const nctx *c, fc_value *v, double *eps) {
    if (!fc_rc_private(&c->rc, v, 1)) return NULL;
    const fc_node *n = v->def;
    if (n->op == FC_OP_RSQRT) return plus_eps(c, n->in[0], eps);
    fc_value *s = NULL;
    if (n->op == FC_OP_RECIP) s = n->in[0];
    else if (n->op == FC_OP_DIV && fc_rc_is(n->in[0], v->dtype, 1.0)) s = n->in[1];
    if (!s || fc_rc_op(s) != FC_OP_SQRT || !fc_rc_private(&c->rc, s, 1)) return NULL;
    return plus_eps(c, s->def->in[0], eps);
}

/* y = num * inv_std or num / sqrt(..): num, the mean and eps. */
static fc_value *normalized(const nctx *c, fc_value *y, fc_value **mean, double *eps) {
    const fc_node *n = y->def;
    if (!n) return NULL;
    if (n->op == FC_OP_DIV) {
        fc_value *s = n->in[1];
        if (fc_rc_op(s) != FC_OP_SQRT || !fc_rc_private(&c->rc, s, 1)) return NULL;
        *mean = plus_eps(c, s->def->in[0], eps);
        return *mean ? n->in[0] : NULL;
    }
    if (n->op != FC_OP_MUL) return NULL;
    for (int side = 0; side < 2; side++)
        if ((*mean = inv_std(c, n->in[1 - side], eps))) return n->in[side];
    return NULL;
}

typedef struct norm {
    fc_op op;
    fc_value *x;
    double eps;
} norm;

/* Is y a norm core (layernorm or rmsnorm without weight and bias)? */
static bool core(const nctx *c, fc_value *y, norm *out) {
    fc_value *m, *num = normalized(c, y, &m, &out->eps), *sq_in;
    if (!num || !fc_dtype_is_float(y->dtype) || !fc_same_type(num, y)) return false;
    if (!mean_last(m, &sq_in) || !fc_rc_private(&c->rc, m, 1)) return false;
    fc_value *base = square_of(c, sq_in);
    if (!base || base != num) return false;
    fc_value *x, *mx;
    /* layernorm: num = x - reduce_mean(x); it is read by the square and y */
    if (fc_rc_op(num) == FC_OP_SUB && fc_rc_private(&c->rc, num, num->def && sq_in->def->in[0] == sq_in->def->in[1] ? 3 : 2) &&
        mean_last(mx = num->def->in[1], &x) && x == num->def->in[0] && fc_rc_private(&c->rc, mx, 1)) {
        out->op = FC_OP_LAYERNORM;
        out->x = x;
        return fc_same_type(x, y);
    }
    out->op = FC_OP_RMSNORM;
    out->x = num;
    return true;
}

/* v is a 1-D tensor over the last dim of y, of y's dtype. */
static bool vector_for(const fc_value *v, const fc_value *y) {
    return !v->weak && v->rank == 1 && v->dims[0] == y->dims[y->rank - 1] && v->dtype == y->dtype;
}

/* n = mul(core, w) with a weight vector: the core's value and w. */
static fc_value *weighted(const nctx *c, const fc_node *n, fc_value **w) {
    if (n->op != FC_OP_MUL) return NULL;
    for (int side = 0; side < 2; side++) {
        fc_value *y = n->in[side];
        if (vector_for(n->in[1 - side], n->out[0]) && fc_rc_private(&c->rc, y, 1) && fc_same_type(y, n->out[0])) {
            *w = n->in[1 - side];
            return y;
        }
    }
    return NULL;
}

static fc_value *full_like(fc_rewriter *rw, const fc_value *y, double value) {
    fc_attrs at;
    fc_attrs_defaults(FC_OP_FULL, &at);
    int64_t d = y->dims[y->rank - 1];
    at.list = &d;
    at.nlist = 1;
    at.value = value;
    at.dtype = y->dtype;
    fc_node *n = fc_rw_build(rw, FC_OP_FULL, NULL, 0, &at);
    return n ? n->out[0] : NULL;
}

static fc_value *build(fc_rewriter *rw, const norm *nm, fc_value *w, fc_value *b) {
    fc_attrs at;
    fc_attrs_defaults(nm->op, &at);
    at.eps = nm->eps;
    if (!w) w = full_like(rw, nm->x, 1.0);
    fc_value *in[3] = {nm->x, w, NULL};
    if (nm->op == FC_OP_LAYERNORM) {
        at.axis = -1;
        in[2] = b ? b : full_like(rw, nm->x, 0.0);
    }
    if (!in[1] || (nm->op == FC_OP_LAYERNORM && !in[2])) return NULL;
    fc_node *n = fc_rw_build(rw, nm->op, in, nm->op == FC_OP_LAYERNORM ? 3 : 2, &at);
    return n ? n->out[0] : NULL;
}

/* The user of v when v has one, else NULL. */
static const fc_node *sole_user(const nctx *c, const fc_value *v) {
    return v->id >= 0 && v->id < c->rc.nuses && c->rc.uses[v->id] == 1 ? c->user[v->id] : NULL;
}

static fc_value *recognize(fc_rewriter *rw, fc_node *n, void *arg) {
    const nctx *c = arg;
    fc_value *y = n->out[0], *w = NULL, *cy;
    norm nm;
    if (n->nout != 1 || y->rank < 1) return NULL;
    /* add(mul(core, w), b): layernorm with weight and bias */
    if (n->op == FC_OP_ADD)
        for (int side = 0; side < 2; side++) {
            fc_value *m = n->in[side], *b = n->in[1 - side];
            if (!vector_for(b, y) || !m->def || !fc_rc_private(&c->rc, m, 1) || !fc_same_type(m, y)) continue;
            if ((cy = weighted(c, m->def, &w)) && core(c, cy, &nm) && nm.op == FC_OP_LAYERNORM) return build(rw, &nm, w, b);
        }
    const fc_node *u;
    if ((cy = weighted(c, n, &w)) && core(c, cy, &nm)) {
        /* a layernorm whose weighted value gets a bias: wait for the add */
        if (nm.op == FC_OP_LAYERNORM && (u = sole_user(c, y)) && u->op == FC_OP_ADD &&
            (vector_for(u->in[0], y) || vector_for(u->in[1], y)))
            return NULL;
        return build(rw, &nm, w, NULL);
    }
    if (!core(c, y, &nm)) return NULL;
    if ((u = sole_user(c, y)) && u->op == FC_OP_MUL && (vector_for(u->in[0], y) || vector_for(u->in[1], y))) return NULL;
    return build(rw, &nm, NULL, NULL);
}

fc_status fc_pass_recognize_norm(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "recognize_norm");
    if (st) return st;
    nctx c = {.rc = {.uses = fc_use_counts(g), .nuses = g->next_value_id}};
    c.user = fc_ctx_malloc(g->ctx, sizeof *c.user * (size_t)(c.rc.nuses + 1));
    if (!c.rc.uses || !c.user) {
        fc_ctx_freemem(g->ctx, c.rc.uses);
        fc_ctx_freemem(g->ctx, c.user);
        return fc_set_error(g->ctx, g->status = FC_ERR_NOMEM, "out of memory (recognize_norm)");
    }
    /* A value used once may be used by the graph's results, not a node:
     * its user stays NULL. */
    memset(c.user, 0, sizeof *c.user * (size_t)(c.rc.nuses + 1));
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k]->id >= 0 && n->in[k]->id < c.rc.nuses) c.user[n->in[k]->id] = n;
    }
    st = fc_rw_lower_nodes(g, recognize, &c);
    fc_ctx_freemem(g->ctx, c.rc.uses);
    fc_ctx_freemem(g->ctx, c.user);
    return st == FC_OK ? fc_pass_dce(g) : st;
}

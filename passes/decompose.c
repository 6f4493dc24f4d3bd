/* decompose.c - lower the composite ops to primitives.
 *
 * softmax, layernorm, rmsnorm, gelu, silu and reduce_mean become the
 * elementwise ops and reductions they are made of; a split becomes its
 * slices. Fusion then has to
 * rebuild each of them as one kernel from the primitives, which is the
 * point: nothing later is special-cased by op name, and a user who writes a
 * softmax out by hand gets the same kernel as one who writes `softmax`.
 * gelu_tanh stays whole: it is a single elementwise op, and the GEMM
 * epilogue wants it as one.
 *
 * Precision. The reference semantics of a composite computes in float64
 * and rounds its result once; for f16/bf16 inputs eager PyTorch computes in
 * f32 and rounds once. So a narrow (f16/bf16) input is cast to f32 first,
 * everything is computed in f32, and the result is cast back once; the
 * weight and bias of the norms are cast to f32 too. Computing the pieces in
 * bf16 would round after every step and drift far from the reference.
 * Integer inputs of gelu/silu (whose result is f32) are cast to f32 first,
 * which is what the unary op does to them.
 *
 * Reductions are kept with keepdim=true so that their results broadcast
 * back against the input without reshapes. A mean is a sum times 1/N with N
 * the number of reduced elements, which must be static: a composite that
 * needs N of a symbolic dim is left alone (bind the symbol to lower it).
 */
#include "passes.h"
#include "rewrite.h"

/* The dtype a composite computes in: f32 for narrow floats and integers
 * (whose unary results are f32), else the input's own. */
static fc_dtype compute_dtype(fc_dtype dt) {
    return dt == FC_F64 ? FC_F64 : FC_F32;
}

/* The number of elements along the given (normalized) axes, or -1 if one is
 * symbolic. */
static int64_t static_count(const fc_value *x, const bool *axes) {
    int64_t n = 1;
    for (int i = 0; i < x->rank; i++) {
        if (!axes[i]) continue;
        if (fc_dim_is_sym(x->dims[i])) return -1;
        n *= x->dims[i];
    }
    return n;
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* reduce_mean(x, axes, keepdim) -> mul(reduce_sum(x, axes, keepdim), 1/N).
 * NULL (leave it) when N is symbolic. */
static fc_value *lower_mean(fc_rewriter *rw, fc_node *n) {
    fc_value *x = n->in[0];
    bool red[FC_MAX_RANK] = {false};
    for (int i = 0; i < x->rank; i++) red[i] = n->a.nlist == 0;
    for (int i = 0; i < n->a.nlist; i++) red[norm_axis(n->a.list[i], x->rank)] = true;
    int64_t count = static_count(x, red);
    if (count < 0) return NULL;
    fc_value *xc = fc_rw_cast(rw, x, compute_dtype(x->dtype));
    fc_value *sum = fc_rw_reduce(rw, FC_OP_REDUCE_SUM, xc, n->a.nlist, n->a.list, n->a.keepdim);
    return fc_rw_op2s(rw, FC_OP_MUL, sum, 1.0 / (double)count);
}

/* softmax(x, axis): m = reduce_max(x, [axis], keepdim); e = exp(x - m);
 * e / reduce_sum(e, [axis], keepdim). Subtracting the row max keeps exp in
 * range; it is what the reference does too. */
static fc_value *lower_softmax(fc_rewriter *rw, fc_node *n) {
    fc_value *x = fc_rw_cast(rw, n->in[0], compute_dtype(n->in[0]->dtype));
    int64_t axis = n->a.axis;
    fc_value *m = fc_rw_reduce(rw, FC_OP_REDUCE_MAX, x, 1, &axis, true);
    fc_value *e = fc_rw_op1(rw, FC_OP_EXP, fc_rw_op2(rw, FC_OP_SUB, x, m));
    fc_value *s = fc_rw_reduce(rw, FC_OP_REDUCE_SUM, e, 1, &axis, true);
    return fc_rw_op2(rw, FC_OP_DIV, e, s);
}

/* A 1-D weight or bias of size N, in dtype ct, shaped to broadcast along
 * `axis` of a rank-`rank` input: [N] when the axis is the last, else
 * [N, 1, ..., 1] (one 1 per dim after the axis). */
static fc_value *along_axis(fc_rewriter *rw, fc_value *w, fc_dtype ct, int axis, int rank) {
    fc_value *wc = fc_rw_cast(rw, w, ct);
    if (axis == rank - 1) return wc;
    fc_dim shape[FC_MAX_RANK];
    shape[0] = w->dims[0];
    for (int i = 1; i < rank - axis; i++) shape[i] = 1;
    return fc_rw_reshape(rw, wc, rank - axis, shape);
}

/* layernorm(x, w, b, axis, eps):
 *   mean = reduce_sum(x, [axis]) * 1/N;  d = x - mean
 *   var  = reduce_sum(d * d, [axis]) * 1/N   (biased, as torch)
 *   y    = d * rsqrt(var + eps) * w' + b'
 * The two-pass variance (of d, not E[x^2] - mean^2) is the one that does not
 * cancel catastrophically. When N is symbolic (a dynamic program), the
 * means stay reduce_mean, which divides by the row length at run time. */
static fc_value *mean_of(fc_rewriter *rw, fc_value *x, int64_t ax, fc_dim n) {
    if (fc_dim_is_sym(n)) return fc_rw_reduce(rw, FC_OP_REDUCE_MEAN, x, 1, &ax, true);
    return fc_rw_op2s(rw, FC_OP_MUL, fc_rw_reduce(rw, FC_OP_REDUCE_SUM, x, 1, &ax, true), 1.0 / (double)n);
}

static fc_value *lower_layernorm(fc_rewriter *rw, fc_node *n, bool symbolic_means) {
    fc_value *x = n->in[0];
    int axis = norm_axis(n->a.axis, x->rank);
    fc_dim N = x->dims[axis];
    if (fc_dim_is_sym(N) && !symbolic_means) return NULL;
    fc_dtype ct = compute_dtype(x->dtype);
    int64_t ax = n->a.axis;

    fc_value *xc = fc_rw_cast(rw, x, ct);
    fc_value *mean = mean_of(rw, xc, ax, N);
    fc_value *d = fc_rw_op2(rw, FC_OP_SUB, xc, mean);
    fc_value *sq = fc_rw_op2(rw, FC_OP_MUL, d, d);
    fc_value *var = mean_of(rw, sq, ax, N);
    fc_value *rstd = fc_rw_op1(rw, FC_OP_RSQRT, fc_rw_op2s(rw, FC_OP_ADD, var, n->a.eps));
    fc_value *xn = fc_rw_op2(rw, FC_OP_MUL, d, rstd);
    fc_value *xw = fc_rw_op2(rw, FC_OP_MUL, xn, along_axis(rw, n->in[1], ct, axis, x->rank));
    return fc_rw_op2(rw, FC_OP_ADD, xw, along_axis(rw, n->in[2], ct, axis, x->rank));
}

/* rmsnorm(x, w, eps) = x * rsqrt(reduce_sum(x * x, [-1]) * 1/N + eps) * w.
 * A symbolic N (the last dim) keeps the mean as reduce_mean. */
static fc_value *lower_rmsnorm(fc_rewriter *rw, fc_node *n, bool symbolic_means) {
    fc_value *x = n->in[0];
    fc_dim last = x->dims[x->rank - 1];
    if (fc_dim_is_sym(last) && !symbolic_means) return NULL;
    fc_dtype ct = compute_dtype(x->dtype);
    int64_t ax = -1;

    fc_value *xc = fc_rw_cast(rw, x, ct);
    fc_value *ms = mean_of(rw, fc_rw_op2(rw, FC_OP_MUL, xc, xc), ax, last);
    fc_value *r = fc_rw_op1(rw, FC_OP_RSQRT, fc_rw_op2s(rw, FC_OP_ADD, ms, n->a.eps));
    fc_value *xr = fc_rw_op2(rw, FC_OP_MUL, xc, r);
    return fc_rw_op2(rw, FC_OP_MUL, xr, fc_rw_cast(rw, n->in[1], ct));
}

/* gelu(x) = x * 0.5 * (erf(x * (1/sqrt 2)) + 1), the erf form of torch's
 * default gelu; multiplying by 1/sqrt(2) instead of dividing by sqrt(2) is
 * what PyTorch's kernels do. */
static fc_value *lower_gelu(fc_rewriter *rw, fc_node *n) {
    fc_value *x = fc_rw_cast(rw, n->in[0], compute_dtype(n->in[0]->dtype));
    fc_value *half = fc_rw_op2s(rw, FC_OP_MUL, x, 0.5);
    fc_value *t = fc_rw_op1(rw, FC_OP_ERF, fc_rw_op2s(rw, FC_OP_MUL, x, 0.7071067811865476));
    return fc_rw_op2(rw, FC_OP_MUL, half, fc_rw_op2s(rw, FC_OP_ADD, t, 1.0));
}

/* silu(x) = x * sigmoid(x). */
static fc_value *lower_silu(fc_rewriter *rw, fc_node *n) {
    fc_value *x = fc_rw_cast(rw, n->in[0], compute_dtype(n->in[0]->dtype));
    return fc_rw_op2(rw, FC_OP_MUL, x, fc_rw_op1(rw, FC_OP_SIGMOID, x));
}

/* split(x) = one slice per piece. A slice is a view that fusion inlines into
 * its readers, and one that must be stored (a graph result, a library call's
 * operand) is its own copy kernel over its own shape; a split kept whole
 * would need one kernel iterating over the input and storing pieces of
 * different shapes, which no backend's store loop expresses. The later
 * pieces replace the split's other results here; the first is returned. */
static fc_value *lower_split(fc_rewriter *rw, fc_node *n) {
    fc_value *x = n->in[0];
    int ax = norm_axis(n->a.axis, x->rank);
    if (fc_dim_is_sym(x->dims[ax])) return NULL;
    fc_value *first = NULL;
    int64_t start = 0;
    for (int i = 0; i < n->nout; i++) {
        fc_attrs a;
        fc_attrs_defaults(FC_OP_SLICE, &a);
        a.axis = ax;
        a.start = start;
        a.end = start + n->out[i]->dims[ax];
        a.step = 1;
        start = a.end;
        fc_node *s = fc_rw_build(rw, FC_OP_SLICE, &x, 1, &a);
        if (!s) return NULL;
        if (i == 0) first = s->out[0];
        else if (!fc_rw_replace(rw, n->out[i], s->out[0])) return NULL;
    }
    return first;
}

/* The primitives replacing n, placed where n was; NULL if n stays (not a
 * composite, or one that cannot be lowered) or on error. */
static fc_value *lower(fc_rewriter *rw, fc_node *n, bool symbolic_means) {
    switch (n->op) {
    case FC_OP_REDUCE_MEAN: return lower_mean(rw, n);
    case FC_OP_SOFTMAX: return lower_softmax(rw, n);
    case FC_OP_LAYERNORM: return lower_layernorm(rw, n, symbolic_means);
    case FC_OP_RMSNORM: return lower_rmsnorm(rw, n, symbolic_means);
    case FC_OP_GELU: return lower_gelu(rw, n);
    case FC_OP_SILU: return lower_silu(rw, n);
    case FC_OP_SPLIT: return lower_split(rw, n);
    default: return NULL;
    }
}

/* fc_rw_lower_nodes' callback; arg: whether means over symbolic dims are
 * allowed (bool). */
static fc_value *lower_node(fc_rewriter *rw, fc_node *n, void *arg) { return lower(rw, n, *(const bool *)arg); }

static fc_status decompose(fc_graph *g, bool symbolic_means) {
    fc_status st = fc_pass_precheck(g, "decompose");
    return st ? st : fc_rw_lower_nodes(g, lower_node, &symbolic_means);
}

fc_status fc_pass_decompose(fc_graph *g) { return decompose(g, false); }

fc_status fc_pass_decompose_dynamic(fc_graph *g) { return decompose(g, true); }

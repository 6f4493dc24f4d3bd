/* onnx_ops3.c - the third part of the op translation table: the losses
 * (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), the normalizations
 * over channels (BatchNormalization in inference, InstanceNormalization,
 * MeanVarianceNormalization), the global poolings, DepthToSpace and
 * SpaceToDepth, ReduceProd, Atan, Asin and Acos, ReverseSequence and LRN.
 * onnx_ops.c holds the table. */
#include "onnx_ops.h"

#include <math.h>
#include <string.h>



/* "mean" (the default), "sum" or "none": 0, 1, 2; -1 for anything else. */
static int reduction(const Onnx__NodeProto *n) {
    const Onnx__AttributeProto *a = attr(n, "reduction");
    if (!a || !a->has_s || (a->s.len == 4 && !memcmp(a->s.data, "mean", 4))) return 0;
    if (a->s.len == 3 && !memcmp(a->s.data, "sum", 3)) return 1;
    if (a->s.len == 4 && !memcmp(a->s.data, "none", 4)) return 2;
    return -1;
}

/* The negative log likelihood of logp [N, C, d..] at target [N, d..]:
 * the class picked by comparing an iota over C with the target (the IR has
 * no scatter or take-along), weighted, ignore_index masked out. */
static fc_value *nll(ox_ctx *ox, const Onnx__NodeProto *n, fc_value *logp, fc_value *target, fc_value *weight) {
    if (!logp || !target || logp->rank < 2 || target->rank != logp->rank - 1) {
        ERR("expects input [N, C, ...] and target [N, ...]");
        return NULL;
    }
    fc_value *t = fc_cast(G, target, FC_I64), *valid = NULL;
    const Onnx__AttributeProto *ig = attr(n, "ignore_index");
    if (ig) {
        valid = fc_ne(G, t, fc_scalar_int(G, ig->i));
        t = fc_where(G, valid, t, fc_scalar_int(G, 0));
    }
    fc_dim ud[FC_MAX_RANK];
    for (int d = 0, j = 0; d < logp->rank; d++) ud[d] = d == 1 ? 1 : t->dims[j++];
    fc_value *hit = fc_eq(G, fc_iota(G, logp->rank, logp->dims, 1, FC_I64), fc_reshape(G, t, logp->rank, ud));
    int ax1[1] = {1};
    fc_value *picked = fc_reduce_sum(G, fc_where(G, hit, logp, fc_scalar(G, 0)), 1, ax1, false);
    fc_value *w = weight ? fc_gather(G, weight, t, 0) : fc_full(G, t->rank, t->dims, 1, logp->dtype);
    if (valid) w = fc_where(G, valid, w, fc_scalar(G, 0));
    fc_value *loss = fc_mul(G, fc_neg(G, picked), w);
    int r = reduction(n);
    if (r < 0) {
        ERR("reduction must be mean, sum or none");
        return NULL;
    }
    if (r == 2) return loss;
    fc_value *s = fc_reduce_sum(G, loss, 0, NULL, false);
    return r == 1 ? s : fc_div(G, s, fc_reduce_sum(G, w, 0, NULL, false));
}

fc_status ox_op_nll(ox_ctx *ox, const Onnx__NodeProto *n) {
    OUT(0, nll(ox, n, in(ox, 0), in(ox, 1), in(ox, 2)));
    return FC_OK;
}

fc_status ox_op_sce(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank < 2) return ERR("expects scores [N, C, ...]");
    int ax1[1] = {1};
    fc_value *s = fc_sub(G, x, fc_reduce_max(G, x, 1, ax1, true));
    fc_value *logp = fc_sub(G, s, fc_log(G, fc_reduce_sum(G, fc_exp(G, s), 1, ax1, true)));
    OUT(0, nll(ox, n, logp, in(ox, 1), in(ox, 2)));
    if (ox->nout > 1) OUT(1, logp);
    return FC_OK;
}

/* A per-channel [C] parameter shaped to broadcast over [N, C, d..]. */
static fc_value *per_channel(ox_ctx *ox, fc_value *p, int rank) {
    if (!p) return NULL;
    fc_dim d[FC_MAX_RANK];
    int r = rank - 1;
    for (int i = 0; i < r; i++) d[i] = i == 0 ? (p->rank ? p->dims[0] : 1) : 1;
    return fc_reshape(G, p, r, d);
}

fc_status ox_op_batchnorm(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank < 2) return ERR("expects X [N, C, ...]");
    if (ai(n, "training_mode", 0) || ox->nout > 1 || (ox->opset < 7 && !ai(n, "is_test", 0) && ox->nout > 1))
        return ERR("training mode (running statistics outputs) is not supported");
    if (ox->opset < 9 && !ai(n, "spatial", 1)) return ERR("spatial=0 is not supported");
    fc_value *p[4] = {in(ox, 1), in(ox, 2), in(ox, 3), in(ox, 4)};
    bool plain = isf(x->dtype);
    for (int i = 0; i < 4; i++) plain = plain && p[i] && p[i]->rank == 1 && p[i]->dtype == x->dtype;
    if (plain) { /* the IR's batch_norm, which folds into a preceding conv */
        OUT(0, fc_batch_norm(G, x, p[0], p[1], p[2], p[3], af(n, "epsilon", 1e-5)));
        return FC_OK;
    }
    fc_value *sc = per_channel(ox, in(ox, 1), x->rank), *b = per_channel(ox, in(ox, 2), x->rank);
    fc_value *m = per_channel(ox, in(ox, 3), x->rank), *v = per_channel(ox, in(ox, 4), x->rank);
    if (!sc || !b || !m || !v) return ERR("needs X, scale, B, mean and var");
    fc_value *inv = fc_rsqrt(G, fc_add(G, v, fc_scalar(G, af(n, "epsilon", 1e-5))));
    OUT(0, fc_add(G, fc_mul(G, fc_mul(G, fc_sub(G, x, m), inv), sc), b));
    return FC_OK;
}

static fc_value *normalize(ox_ctx *ox, fc_value *x, int na, const int *axes, double eps) {
    fc_value *mean = fc_reduce_mean(G, x, na, axes, true);
    fc_value *dx = fc_sub(G, x, mean);
    fc_value *var = fc_reduce_mean(G, fc_mul(G, dx, dx), na, axes, true);
    return fc_mul(G, dx, fc_rsqrt(G, fc_add(G, var, fc_scalar(G, eps))));
}

fc_status ox_op_instancenorm(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank < 3) return ERR("expects X [N, C, d, ...]");
    int axes[FC_MAX_RANK], na = 0;
    for (int d = 2; d < x->rank; d++) axes[na++] = d;
    fc_value *y = normalize(ox, x, na, axes, af(n, "epsilon", 1e-5));
    OUT(0, fc_add(G, fc_mul(G, y, per_channel(ox, in(ox, 1), x->rank)), per_channel(ox, in(ox, 2), x->rank)));
    return FC_OK;
}

fc_status ox_op_mvn(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axes[FC_MAX_RANK] = {0, 2, 3}, na = 3;
    const Onnx__AttributeProto *a = attr(n, "axes");
    if (a) {
        na = 0;
        for (size_t i = 0; i < a->n_ints && na < FC_MAX_RANK; i++)
            axes[na++] = (int)(a->ints[i] < 0 ? a->ints[i] + x->rank : a->ints[i]);
    }
    for (int i = 0; i < na; i++)
        if (axes[i] < 0 || axes[i] >= x->rank) return ERR("axis out of range");
    OUT(0, normalize(ox, x, na, axes, 1e-9));
    return FC_OK;
}

fc_status ox_op_global_pool(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank < 3) return ERR("expects X [N, C, d, ...]");
    int axes[FC_MAX_RANK], na = 0;
    for (int d = 2; d < x->rank; d++) axes[na++] = d;
    bool spatial = x->rank <= FC_MAX_SPATIAL + 2 && isf(x->dtype);
    for (int d = 2; d < x->rank; d++) spatial = spatial && !fc_dim_is_sym(x->dims[d]);
    if (spatial && !strcmp(n->op_type, "GlobalAveragePool")) {
        OUT(0, fc_global_avg_pool(G, x));
        return FC_OK;
    }
    OUT(0, !strcmp(n->op_type, "GlobalMaxPool") ? fc_reduce_max(G, x, na, axes, true)
                                                 : fc_reduce_mean(G, x, na, axes, true));
    return FC_OK;
}

/* DepthToSpace and SpaceToDepth: a reshape, a permute and a reshape. */
fc_status ox_op_depth_space(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank != 4) return ERR("expects X [N, C, H, W]");
    for (int d = 0; d < 4; d++)
        if (x->dims[d] < 0) return ERR("symbolic dims; bind them (--bind)");
    int64_t b = ai(n, "blocksize", 0), N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    if (b < 1) return ERR("blocksize must be at least 1");
    fc_dim s6[6], s4[4];
    int perm[6];
    if (!strcmp(n->op_type, "DepthToSpace")) {
        if (C % (b * b)) return ERR("C is not a multiple of blocksize^2");
        bool crd = attr(n, "mode") && attr(n, "mode")->s.len == 3 && !memcmp(attr(n, "mode")->s.data, "CRD", 3);
        int64_t c2 = C / (b * b);
        if (crd) {
            fc_dim a[6] = {N, c2, b, b, H, W};
            int p[6] = {0, 1, 4, 2, 5, 3};
            memcpy(s6, a, sizeof a);
            memcpy(perm, p, sizeof p);
        } else {
            fc_dim a[6] = {N, b, b, c2, H, W};
            int p[6] = {0, 3, 4, 1, 5, 2};
            memcpy(s6, a, sizeof a);
            memcpy(perm, p, sizeof p);
        }
        fc_dim o[4] = {N, c2, H * b, W * b};
        memcpy(s4, o, sizeof o);
    } else {
        if (H % b || W % b) return ERR("H and W must be multiples of blocksize");
        fc_dim a[6] = {N, C, H / b, b, W / b, b};
        int p[6] = {0, 3, 5, 1, 2, 4};
        memcpy(s6, a, sizeof a);
        memcpy(perm, p, sizeof p);
        fc_dim o[4] = {N, C * b * b, H / b, W / b};
        memcpy(s4, o, sizeof o);
    }
    OUT(0, fc_reshape(G, fc_permute(G, fc_reshape(G, x, 6, s6), 6, perm), 4, s4));
    return FC_OK;
}

/* ReduceProd: the IR has no product reduction, so |prod| = exp(sum(log|x|))
 * in f64, the sign from the count of negatives, 0 when any element is 0;
 * integer results are rounded (exp(log(24)) is not exactly 24). */
fc_status ox_op_reduce_prod(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axes[FC_MAX_RANK], na = 0;
    if (ox->opset < 18) {
        const Onnx__AttributeProto *a = attr(n, "axes");
        for (size_t i = 0; a && i < a->n_ints && na < FC_MAX_RANK; i++)
            axes[na++] = (int)(a->ints[i] < 0 ? a->ints[i] + x->rank : a->ints[i]);
    } else if (has_in(ox, 1)) {
        ox_const *k = ox->in[1]->k;
        if (!k) return ERR("the axes input must be known when importing");
        for (int64_t i = 0; i < k->n && na < FC_MAX_RANK; i++) {
            int64_t v = ox_const_int(k, i);
            axes[na++] = (int)(v < 0 ? v + x->rank : v);
        }
    }
    if (na == 0 && ox->opset >= 18 && ai(n, "noop_with_empty_axes", 0)) {
        OUT(0, x);
        return FC_OK;
    }
    for (int i = 0; i < na; i++)
        if (axes[i] < 0 || axes[i] >= x->rank) return ERR("axis out of range");
    OUT(0, fc_cast(G, ox_product(ox, x, na, axes, ai(n, "keepdims", 1) != 0), x->dtype));
    return FC_OK;
}

fc_value *ox_product(ox_ctx *ox, fc_value *x, int na, const int *axes, bool keep) {
    fc_value *xf = fc_cast(G, x, FC_F64);
    fc_value *mag = fc_exp(G, fc_reduce_sum(G, fc_log(G, fc_abs(G, xf)), na, axes, keep));
    fc_value *neg = fc_reduce_sum(G, fc_cast(G, fc_lt(G, xf, fc_scalar(G, 0)), FC_F64), na, axes, keep);
    fc_value *half = fc_mul(G, neg, fc_scalar(G, 0.5));
    fc_value *odd = fc_ne(G, fc_cast(G, fc_cast(G, half, FC_I64), FC_F64), half);
    fc_value *zero = fc_reduce_max(G, fc_cast(G, fc_eq(G, xf, fc_scalar(G, 0)), FC_F64), na, axes, keep);
    if (!isf(x->dtype)) mag = fc_cast(G, fc_cast(G, fc_add(G, mag, fc_scalar(G, 0.5)), FC_I64), FC_F64);
    fc_value *p = fc_where(G, odd, fc_neg(G, mag), mag);
    return fc_where(G, fc_gt(G, zero, fc_scalar(G, 0)), fc_scalar(G, 0), p);
}

/* TopK for a known, small K: K rounds of a max (or min), the first index
 * that holds it among those not yet taken, and that index masked out; the
 * IR has no sort. Ties go to the lower index, as ONNX asks; the result is
 * sorted whatever `sorted` says (which ONNX allows). */
#define OX_TOPK_MAX 64
fc_status ox_op_topk(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x0 = in(ox, 0);
    if (!x0) return ERR("needs an input");
    int64_t k;
    if (ox->opset < 10) {
        k = ai(n, "k", -1);
    } else {
        if (!has_in(ox, 1)) return ERR("needs K");
        if (!ox->in[1]->k) return ERR("K must be known when importing");
        k = ox->in[1]->k->n ? ox_const_int(ox->in[1]->k, 0) : -1;
    }
    int axis = (int)ai(n, "axis", -1);
    if (axis < 0) axis += x0->rank;
    if (axis < 0 || axis >= x0->rank) return ERR("bad axis");
    if (x0->dims[axis] < 0) return ERR("TopK over symbolic dim %d; bind it (--bind)", axis);
    if (k < 0 || k > x0->dims[axis]) return ERR("K = %lld for a dim of %lld", (long long)k, (long long)x0->dims[axis]);
    if (k > OX_TOPK_MAX) return ERR("K = %lld: at most %d is supported (each is a round of reductions)", (long long)k, OX_TOPK_MAX);
    bool largest = ai(n, "largest", 1) != 0;
    fc_dtype dt = x0->dtype;
    fc_value *x = fc_cast(G, x0, FC_F64);
    if (k == 0) {
        fc_dim d[FC_MAX_RANK];
        memcpy(d, x0->dims, sizeof d);
        d[axis] = 0;
        OUT(0, fc_full(G, x0->rank, d, 0, dt));
        OUT(1, fc_full(G, x0->rank, d, 0, FC_I64));
        return FC_OK;
    }
    int ax[1] = {axis};
    const double big = 4503599627370496.0; /* 2^52: above every index, exact in f64 */
    fc_value *io = fc_iota(G, x0->rank, x0->dims, axis, FC_I64), *iof = fc_cast(G, io, FC_F64);
    fc_value *taken = fc_full(G, x0->rank, x0->dims, 0, FC_F64);
    fc_value *vals[OX_TOPK_MAX], *idxs[OX_TOPK_MAX];
    fc_value *cur = x;
    for (int64_t j = 0; j < k; j++) {
        fc_value *m = largest ? fc_reduce_max(G, cur, 1, ax, true) : fc_reduce_min(G, cur, 1, ax, true);
        fc_value *score = fc_add(G, fc_where(G, fc_eq(G, cur, m), iof, fc_scalar(G, big)), fc_mul(G, taken, fc_scalar(G, big)));
        fc_value *first = fc_reduce_min(G, score, 1, ax, true);
        fc_value *hit = fc_eq(G, iof, first);
        vals[j] = m;
        idxs[j] = first;
        taken = fc_add(G, taken, fc_cast(G, hit, FC_F64));
        cur = fc_where(G, hit, fc_scalar(G, largest ? -INFINITY : INFINITY), cur);
    }
    fc_value *v = k == 1 ? vals[0] : fc_concat(G, (int)k, vals, axis);
    fc_value *i = k == 1 ? idxs[0] : fc_concat(G, (int)k, idxs, axis);
    OUT(0, fc_cast(G, v, dt));
    if (ox->nout > 1) OUT(1, fc_cast(G, i, FC_I64));
    return FC_OK;
}

/* atan(x) as Cephes' atanf computes it: |x| reduced to [0, tan(pi/8)] by
 * atan(a) = pi/2 + atan(-1/a) above tan(3 pi/8) and pi/4 + atan((a-1)/(a+1))
 * above tan(pi/8), then an odd polynomial of degree 9 (relative error about
 * 1e-7, f32's rounding). */
static fc_value *arctan(ox_ctx *ox, fc_value *x) {
    fc_value *a = fc_abs(G, x), *one = fc_scalar(G, 1.0);
    fc_value *big = fc_gt(G, a, fc_scalar(G, 2.414213562373095)), *mid = fc_gt(G, a, fc_scalar(G, 0.4142135623730950));
    fc_value *t = fc_where(G, big, fc_neg(G, fc_div(G, one, a)),
                           fc_where(G, mid, fc_div(G, fc_sub(G, a, one), fc_add(G, a, one)), a));
    /* pi/2 above tan(3 pi/8), pi/4 above tan(pi/8) (big implies mid) */
    fc_value *y0 = fc_mul(G, fc_add(G, fc_cast(G, big, x->dtype), fc_cast(G, mid, x->dtype)), fc_scalar(G, M_PI / 4));
    fc_value *z = fc_mul(G, t, t);
    fc_value *p = fc_sub(G, fc_mul(G, z, fc_scalar(G, 8.05374449538e-2)), fc_scalar(G, 1.38776856032e-1));
    p = fc_sub(G, fc_mul(G, fc_add(G, fc_mul(G, p, z), fc_scalar(G, 1.99777106478e-1)), z), fc_scalar(G, 3.33329491539e-1));
    p = fc_add(G, fc_mul(G, fc_mul(G, p, z), t), t);
    fc_value *r = fc_add(G, y0, p);
    return fc_where(G, fc_lt(G, x, fc_scalar(G, 0)), fc_neg(G, r), r);
}

/* Atan, and Asin and Acos through it: asin(x) = atan(x / sqrt(1 - x^2)),
 * acos(x) = 2 atan(sqrt((1 - x) / (1 + x))) (no cancellation near 1; x = -1
 * gives atan(inf) = pi/2). Outside [-1, 1] the square root is NaN, as asin
 * and acos are. */
fc_status ox_op_arc(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    if (!isf(x->dtype)) return ERR("needs a float input");
    fc_value *one = fc_scalar(G, 1.0), *y;
    if (!strcmp(n->op_type, "Atan")) y = arctan(ox, x);
    else if (!strcmp(n->op_type, "Asin")) y = arctan(ox, fc_div(G, x, fc_sqrt(G, fc_sub(G, one, fc_mul(G, x, x)))));
    else y = fc_mul(G, arctan(ox, fc_sqrt(G, fc_div(G, fc_sub(G, one, x), fc_add(G, one, x)))), fc_scalar(G, 2.0));
    OUT(0, y);
    return FC_OK;
}

/* ReverseSequence: along time_axis, the first sequence_lens[b] elements of
 * each batch entry reversed, the rest as they are; a take along the time
 * axis at len - 1 - t below len, t above. */
fc_status ox_op_reverse_sequence(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *lens = in(ox, 1);
    if (!x || !lens) return ERR("needs an input and sequence_lens");
    int ta = (int)ai(n, "time_axis", 0), ba = (int)ai(n, "batch_axis", 1);
    if (x->rank < 2 || ta < 0 || ta > 1 || ba < 0 || ba > 1 || ta == ba) return ERR("time_axis and batch_axis must be 0 and 1");
    for (int d = 0; d < x->rank; d++)
        if (x->dims[d] < 0) return ERR("symbolic dims are not supported");
    if (lens->rank != 1 || lens->dims[0] != x->dims[ba]) return ERR("sequence_lens must have the batch's length");
    fc_dim ld[FC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) ld[d] = d == ba ? x->dims[ba] : 1;
    fc_value *len = fc_reshape(G, fc_cast(G, lens, FC_I64), x->rank, ld);
    fc_value *t = fc_iota(G, x->rank, x->dims, ta, FC_I64);
    fc_value *idx = fc_where(G, fc_lt(G, t, len), fc_sub(G, fc_sub(G, len, fc_scalar_int(G, 1)), t), t);
    OUT(0, ox_take_along(ox, x, ta, idx));
    return FC_OK;
}

/* LRN over the channels (axis 1): x / (bias + alpha / size * sum of x^2 over
 * the size channels around c)^beta, the window's sum as the sum of `size`
 * slices of the squares padded with zero channels. */
fc_status ox_op_lrn(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int64_t size = ai(n, "size", 0);
    if (x->rank < 3 || !isf(x->dtype)) return ERR("needs a float input [N, C, ...]");
    if (size < 1 || size > 64) return ERR("size must be 1 to 64");
    int64_t C = x->dims[1];
    if (C < 0) return ERR("symbolic channels are not supported");
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    fc_value *sq = fc_mul(G, x, x);
    fc_dim zd[FC_MAX_RANK];
    memcpy(zd, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    fc_value *parts[3];
    int np = 0;
    if (lo) { zd[1] = lo; parts[np++] = fc_full(G, x->rank, zd, 0, x->dtype); }
    parts[np++] = sq;
    if (hi) { zd[1] = hi; parts[np++] = fc_full(G, x->rank, zd, 0, x->dtype); }
    fc_value *padded = np > 1 ? fc_concat(G, np, parts, 1) : sq, *sum = NULL;
    for (int64_t i = 0; i < size; i++) {
        fc_value *s = fc_slice(G, padded, 1, i, i + C, 1);
        sum = sum ? fc_add(G, sum, s) : s;
    }
    fc_value *den = fc_add(G, fc_mul(G, sum, fc_scalar(G, af(n, "alpha", 1e-4) / (double)size)), fc_scalar(G, af(n, "bias", 1.0)));
    OUT(0, fc_div(G, x, fc_pow(G, den, fc_scalar(G, af(n, "beta", 0.75)))));
    return FC_OK;
}

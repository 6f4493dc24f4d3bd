/* onnx_ops2.c - the second half of the op translation table: reductions,
 * normalizations, matmul and Gemm, and the ops composed from masks (Trilu,
 * CumSum, OneHot, EyeLike, Pad). onnx_ops.c holds the table itself. */
#include "onnx_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



/* Reduction axes: an attribute, or (ReduceSum from 13, the others from 18)
 * an input that must be known. Returns the count; *all for "every axis". */
static fc_status reduce_axes(ox_ctx *ox, const Onnx__NodeProto *n, int rank, int *axes, int *na, bool *noop) {
    *na = 0;
    *noop = false;
    int64_t from = !strcmp(n->op_type, "ReduceSum") ? 13 : 18;
    if (ox->opset < from) {
        const Onnx__AttributeProto *a = attr(n, "axes");
        if (a)
            for (size_t i = 0; i < a->n_ints && *na < FC_MAX_RANK; i++) axes[(*na)++] = norm_axis(a->ints[i], rank);
    } else if (has_in(ox, 1)) {
        ox_const *k = ox->in[1]->k;
        if (!k) return ERR("the axes input must be known when importing");
        for (int64_t i = 0; i < k->n && *na < FC_MAX_RANK; i++) axes[(*na)++] = norm_axis(ox_const_int(k, i), rank);
    }
    if (*na == 0 && ox->opset >= from && ai(n, "noop_with_empty_axes", 0)) *noop = true;
    for (int i = 0; i < *na; i++)
        if (axes[i] < 0 || axes[i] >= rank) return ERR("axis out of range");
    return FC_OK;
}

fc_status ox_op_reduce(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axes[FC_MAX_RANK], na;
    bool noop;
    fc_status st = reduce_axes(ox, n, x->rank, axes, &na, &noop);
    if (st) return st;
    const char *op = n->op_type + 6;
    fc_dtype dt = x->dtype;
    if (noop) {
        /* An identity, but for the ops that transform each element. */
        fc_value *y = x;
        if (!strcmp(op, "L1") || !strcmp(op, "L2")) y = fc_abs(G, x);
        else if (!strcmp(op, "SumSquare")) y = fc_mul(G, x, x);
        else if (!strcmp(op, "LogSum")) y = fc_log(G, x);
        OUT(0, y);
        return FC_OK;
    }
    bool keep = ai(n, "keepdims", 1) != 0;
    fc_value *y;
    if (!strcmp(op, "Sum")) y = fc_reduce_sum(G, x, na, axes, keep);
    else if (!strcmp(op, "Max")) y = fc_reduce_max(G, x, na, axes, keep);
    else if (!strcmp(op, "Min")) y = fc_reduce_min(G, x, na, axes, keep);
    else if (!strcmp(op, "Mean")) y = isf(dt) ? fc_reduce_mean(G, x, na, axes, keep)
                                              : fc_reduce_mean(G, fc_cast(G, x, FC_F64), na, axes, keep);
    else if (!strcmp(op, "L1")) y = fc_reduce_sum(G, fc_abs(G, x), na, axes, keep);
    else if (!strcmp(op, "L2")) y = fc_sqrt(G, fc_reduce_sum(G, fc_mul(G, x, x), na, axes, keep));
    else if (!strcmp(op, "SumSquare")) y = fc_reduce_sum(G, fc_mul(G, x, x), na, axes, keep);
    else if (!strcmp(op, "LogSum")) y = fc_log(G, fc_reduce_sum(G, x, na, axes, keep));
    else {
        /* LogSumExp, stable: max + log(sum(exp(x - max))). */
        fc_value *m = fc_reduce_max(G, x, na, axes, true);
        fc_value *s = fc_reduce_sum(G, fc_exp(G, fc_sub(G, x, m)), na, axes, keep);
        fc_value *mk = keep ? m : fc_reduce_max(G, x, na, axes, false);
        y = fc_add(G, fc_log(G, s), mk);
    }
    if (y && y->dtype != dt) y = fc_cast(G, y, dt);
    OUT(0, y);
    return FC_OK;
}

/* ArgMax as the smallest (or, select_last_index, largest) index where the
 * element equals the max. */
fc_status ox_op_argmax(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axis = norm_axis(ai(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    bool keep = ai(n, "keepdims", 1) != 0, last = ai(n, "select_last_index", 0) != 0;
    bool mx = !strcmp(n->op_type, "ArgMax");
    int ax[1] = {axis};
    fc_value *m = mx ? fc_reduce_max(G, x, 1, ax, true) : fc_reduce_min(G, x, 1, ax, true);
    fc_value *io = fc_iota(G, x->rank, x->dims, axis, FC_I64);
    fc_value *hit = fc_eq(G, x, m);
    fc_value *y = last ? fc_reduce_max(G, fc_where(G, hit, io, fc_scalar_int(G, -1)), 1, ax, keep)
                       : fc_reduce_min(G, fc_where(G, hit, io, fc_scalar_int(G, INT32_MAX)), 1, ax, keep);
    OUT(0, y);
    return FC_OK;
}

/* Softmax, LogSoftmax and Hardmax. Before opset 13 they work on the input
 * flattened to 2-D at `axis` (default 1); from 13 on one axis (default -1). */
fc_status ox_op_softmax(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    bool old = ox->opset < 13;
    int axis = norm_axis(ai(n, "axis", old ? 1 : -1), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    fc_value *v = x;
    if (old && axis != x->rank - 1) {
        fc_dim d2[2] = {1, 1};
        for (int d = 0; d < x->rank; d++) {
            if (x->dims[d] < 0) return ERR("the opset-%lld 2-D form over symbolic dims; bind them (--bind)", (long long)ox->opset);
            d2[d < axis ? 0 : 1] *= x->dims[d];
        }
        v = fc_reshape(G, x, 2, d2);
    }
    int a = old && axis != x->rank - 1 ? 1 : axis;
    int ax[1] = {a};
    fc_value *y;
    if (!strcmp(n->op_type, "Softmax")) {
        y = fc_softmax(G, v, a);
    } else if (!strcmp(n->op_type, "LogSoftmax")) {
        fc_value *s = fc_sub(G, v, fc_reduce_max(G, v, 1, ax, true));
        y = fc_sub(G, s, fc_log(G, fc_reduce_sum(G, fc_exp(G, s), 1, ax, true)));
    } else {
        fc_value *m = fc_reduce_max(G, v, 1, ax, true);
        fc_value *io = fc_iota(G, v->rank, v->dims, a, FC_I64);
        fc_value *first = fc_reduce_min(G, fc_where(G, fc_eq(G, v, m), io, fc_scalar_int(G, INT32_MAX)), 1, ax, true);
        y = fc_cast(G, fc_eq(G, io, first), v->dtype);
    }
    if (v != x) y = fc_reshape(G, y, x->rank, x->dims);
    if (y && y->dtype != x->dtype) y = fc_cast(G, y, x->dtype);
    OUT(0, y);
    return FC_OK;
}

/* The IR's matmul takes floats of one dtype; integer matmuls go through f64
 * (exact below 2^53). */
static fc_value *matmul_any(ox_ctx *ox, fc_value *a, fc_value *b) {
    if (!a || !b) return NULL;
    if (isf(a->dtype)) return fc_matmul(G, a, b->dtype == a->dtype ? b : fc_cast(G, b, a->dtype));
    fc_value *y = fc_matmul(G, fc_cast(G, a, FC_F64), fc_cast(G, b, FC_F64));
    return fc_cast(G, y, a->dtype);
}

fc_status ox_op_matmul(ox_ctx *ox, const Onnx__NodeProto *n) {
    OUT(0, matmul_any(ox, in(ox, 0), in(ox, 1)));
    return FC_OK;
}

static fc_value *transpose2(ox_ctx *ox, fc_value *x) {
    int perm[2] = {1, 0};
    return fc_permute(G, x, 2, perm);
}

fc_status ox_op_gemm(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = in(ox, 0), *b = in(ox, 1), *c = in(ox, 2);
    if (!a || !b) return ERR("needs 2 inputs");
    if (a->rank != 2 || b->rank != 2) return ERR("A and B must be 2-D");
    if (ai(n, "transA", 0)) a = transpose2(ox, a);
    if (ai(n, "transB", 0)) b = transpose2(ox, b);
    double alpha = af(n, "alpha", 1.0), beta = af(n, "beta", 1.0);
    fc_value *y = matmul_any(ox, a, b);
    if (alpha != 1.0) y = fc_mul(G, y, fc_scalar(G, alpha));
    if (c && beta != 0.0) y = fc_add(G, y, beta == 1.0 ? c : fc_mul(G, c, fc_scalar(G, beta)));
    OUT(0, y);
    return FC_OK;
}

/* LayerNormalization over axis..end. One axis with a weight of that size is
 * the IR's layernorm (so it fuses as one); more axes, or the Mean and
 * InvStdDev outputs, are composed. */
fc_status ox_op_layernorm(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *w = in(ox, 1), *b = in(ox, 2);
    if (!x || !w) return ERR("needs X and Scale");
    int axis = norm_axis(ai(n, "axis", -1), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    double eps = af(n, "epsilon", 1e-5);
    if (ai(n, "stash_type", 1) != 1) return ERR("stash_type other than 1 (float) is not supported");
    bool simple = axis == x->rank - 1 && w->rank == 1 && (!b || b->rank == 1) && ox->nout == 1 && isf(x->dtype);
    if (simple) {
        if (!b) b = fc_full(G, 1, w->dims, 0, w->dtype);
        OUT(0, fc_layernorm(G, x, w, b, axis, eps));
        return FC_OK;
    }
    int axes[FC_MAX_RANK], na = 0;
    for (int d = axis; d < x->rank; d++) axes[na++] = d;
    fc_value *xf = x->dtype == FC_F16 || x->dtype == FC_BF16 ? fc_cast(G, x, FC_F32) : x;
    fc_value *mean = fc_reduce_mean(G, xf, na, axes, true);
    fc_value *dx = fc_sub(G, xf, mean);
    fc_value *var = fc_reduce_mean(G, fc_mul(G, dx, dx), na, axes, true);
    fc_value *inv = fc_rsqrt(G, fc_add(G, var, fc_scalar(G, eps)));
    fc_value *y = fc_mul(G, fc_mul(G, dx, inv), w);
    if (b) y = fc_add(G, y, b);
    if (y && y->dtype != x->dtype) y = fc_cast(G, y, x->dtype);
    OUT(0, y);
    if (ox->nout > 1) OUT(1, mean);
    if (ox->nout > 2) OUT(2, inv);
    return FC_OK;
}

/* The [.., N, M] masks of row and column: col - row, from iotas. */
static fc_value *diag_offset(ox_ctx *ox, fc_dim rows, fc_dim cols) {
    fc_dim d2[2] = {rows, cols};
    return fc_sub(G, fc_iota(G, 2, d2, 1, FC_I64), fc_iota(G, 2, d2, 0, FC_I64));
}

fc_status ox_op_trilu(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank < 2) return ERR("needs an input of rank 2 or more");
    int64_t k = 0;
    if (has_in(ox, 1)) {
        if (!ox->in[1]->k) return ERR("k must be known when importing");
        k = ox_const_int(ox->in[1]->k, 0);
    }
    fc_value *off = diag_offset(ox, x->dims[x->rank - 2], x->dims[x->rank - 1]);
    fc_value *keep = ai(n, "upper", 1) ? fc_ge(G, off, fc_scalar_int(G, k)) : fc_le(G, off, fc_scalar_int(G, k));
    OUT(0, fc_where(G, keep, x, fc_scalar_int(G, 0)));
    return FC_OK;
}

/* CumSum along an axis as a matmul with a 0/1 triangle, in f64 (exact for
 * the integer sums a model takes). */
fc_status ox_op_cumsum(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || !has_in(ox, 1)) return ERR("needs x and an axis");
    if (!ox->in[1]->k) return ERR("the axis must be known when importing");
    int axis = norm_axis(ox_const_int(ox->in[1]->k, 0), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    fc_dim len = x->dims[axis];
    if (len < 0) return ERR("a cumulative sum over symbolic dim %d; bind it (--bind)", axis);
    bool excl = ai(n, "exclusive", 0), rev = ai(n, "reverse", 0);
    /* out[j] = sum_i x[i] * m[i][j]; off = j - i. */
    fc_value *off = diag_offset(ox, len, len);
    fc_value *m = rev ? (excl ? fc_lt(G, off, fc_scalar_int(G, 0)) : fc_le(G, off, fc_scalar_int(G, 0)))
                      : (excl ? fc_gt(G, off, fc_scalar_int(G, 0)) : fc_ge(G, off, fc_scalar_int(G, 0)));
    int perm[FC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) perm[d] = d;
    perm[axis] = x->rank - 1;
    perm[x->rank - 1] = axis;
    fc_value *xt = axis == x->rank - 1 ? x : fc_permute(G, x, x->rank, perm);
    fc_value *y = fc_matmul(G, fc_cast(G, xt, FC_F64), fc_cast(G, m, FC_F64));
    if (axis != x->rank - 1) y = fc_permute(G, y, x->rank, perm);
    OUT(0, fc_cast(G, y, x->dtype));
    return FC_OK;
}

fc_status ox_op_onehot(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *idx = in(ox, 0), *vals = in(ox, 2);
    if (!idx || !has_in(ox, 1) || !vals) return ERR("needs indices, depth and values");
    if (!ox->in[1]->k) return ERR("the depth must be known when importing");
    int64_t depth = ox->in[1]->k->n ? ox_const_int(ox->in[1]->k, 0) : -1;
    if (depth < 1 || depth > ((int64_t)1 << 31)) return ERR("depth %lld", (long long)depth);
    if (idx->rank + 1 > FC_MAX_RANK) return ERR("rank over %d", FC_MAX_RANK);
    int r = idx->rank + 1, axis = norm_axis(ai(n, "axis", -1), r);
    if (axis < 0 || axis >= r) return ERR("bad axis");
    fc_dim d[FC_MAX_RANK], u[FC_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++) {
        d[i] = i == axis ? depth : idx->dims[j];
        u[i] = i == axis ? 1 : idx->dims[j++];
    }
    fc_value *ii = fc_cast(G, idx, FC_I64);
    ii = fc_where(G, fc_lt(G, ii, fc_scalar_int(G, 0)), fc_add(G, ii, fc_scalar_int(G, depth)), ii);
    fc_value *hit = fc_eq(G, fc_iota(G, r, d, axis, FC_I64), fc_reshape(G, ii, r, u));
    fc_dim one[1] = {1};
    fc_value *off = fc_reshape(G, fc_slice(G, vals, 0, 0, 1, 1), 0, one);
    fc_value *on = fc_reshape(G, fc_slice(G, vals, 0, 1, 2, 1), 0, one);
    OUT(0, fc_where(G, hit, on, off));
    return FC_OK;
}

fc_status ox_op_eyelike(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || x->rank != 2) return ERR("needs a 2-D input");
    fc_dtype dt = x->dtype;
    if (attr(n, "dtype") && !ox_dtype_from_onnx((int32_t)ai(n, "dtype", 1), &dt)) return ERR("unsupported dtype");
    fc_value *off = diag_offset(ox, x->dims[0], x->dims[1]);
    OUT(0, fc_cast(G, fc_eq(G, off, fc_scalar_int(G, ai(n, "k", 0))), dt));
    return FC_OK;
}

/* Pad: constant, edge and reflect, axis by axis, with concats of full
 * blocks or slices; negative pads crop. */
fc_status ox_op_pad(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int64_t pads[2 * FC_MAX_RANK];
    int np = 0;
    if (ox->opset < 11) {
        const Onnx__AttributeProto *a = attr(n, "pads");
        if (!a || (int)a->n_ints != 2 * x->rank) return ERR("pads must have 2*rank entries");
        for (size_t i = 0; i < a->n_ints; i++) pads[np++] = a->ints[i];
    } else {
        ox_const *k = has_in(ox, 1) ? ox->in[1]->k : NULL;
        if (!k) return ERR("pads must be known when importing");
        int axes[FC_MAX_RANK], na = x->rank;
        for (int d = 0; d < x->rank; d++) axes[d] = d;
        if (has_in(ox, 3)) {
            ox_const *ka = ox->in[3]->k;
            if (!ka) return ERR("axes must be known when importing");
            na = (int)ka->n;
            for (int i = 0; i < na; i++) axes[i] = norm_axis(ox_const_int(ka, i), x->rank);
        }
        if (k->n != 2 * na) return ERR("pads has %lld entries for %d axes", (long long)k->n, na);
        for (int i = 0; i < 2 * x->rank; i++) pads[i] = 0;
        for (int i = 0; i < na; i++) {
            if (axes[i] < 0 || axes[i] >= x->rank) return ERR("bad axis");
            pads[axes[i]] = ox_const_int(k, i);
            pads[axes[i] + x->rank] = ox_const_int(k, i + na);
        }
        np = 2 * x->rank;
    }
    char mode[16] = "constant";
    const Onnx__AttributeProto *ma = attr(n, "mode");
    if (ma && ma->has_s) snprintf(mode, sizeof mode, "%.*s", (int)(ma->s.len < 15 ? ma->s.len : 15), ma->s.data);
    double cv = ox->opset < 11 ? af(n, "value", 0) : 0;
    fc_value *cval = NULL;
    if (ox->opset >= 11 && has_in(ox, 2)) cval = in(ox, 2);
    bool edge = !strcmp(mode, "edge"), refl = !strcmp(mode, "reflect");
    if (!edge && !refl && strcmp(mode, "constant")) return ERR("mode '%s' is not supported", mode);
    const ox_const *kv = cval ? ox->in[2]->k : NULL;
    if (kv && kv->n == 1 && !kv->kind && (kv->f || kv->i)) {
        cv = kv->f ? kv->f[0] : (double)kv->i[0];
        cval = NULL;
    }
    bool fits = !cval; /* the IR's pad: static padded dims, a reflect pad within its dim */
    for (int d = 0; d < x->rank && fits; d++) {
        int64_t lo = pads[d], hi = pads[d + x->rank];
        fits = (!lo && !hi) || (!fc_dim_is_sym(x->dims[d]) && (!refl || (lo < x->dims[d] && hi < x->dims[d])));
    }
    if (fits) {
        OUT(0, fc_pad(G, x, pads, edge ? FC_PAD_EDGE : refl ? FC_PAD_REFLECT : FC_PAD_CONSTANT, cv));
        return FC_OK;
    }
    fc_value *y = x;
    for (int d = 0; d < x->rank; d++) {
        int64_t lo = pads[d], hi = pads[d + x->rank];
        if (!lo && !hi) continue;
        if (y->dims[d] < 0) return ERR("padding symbolic dim %d; bind it (--bind)", d);
        if (lo < 0 || hi < 0) y = fc_slice(G, y, d, lo < 0 ? -lo : 0, hi < 0 ? y->dims[d] + hi : INT64_MAX, 1);
        lo = lo > 0 ? lo : 0;
        hi = hi > 0 ? hi : 0;
        fc_value *parts[2 * 64 + 1];
        int k = 0;
        int64_t len = y->dims[d];
        if (lo + hi > 64 && (edge || refl)) return ERR("pads over 64 in edge or reflect mode");
        if (refl && (lo >= len || hi >= len)) return ERR("reflect pads must be smaller than the dim");
        fc_dim bd[FC_MAX_RANK];
        memcpy(bd, y->dims, sizeof bd);
        if (lo) {
            if (edge || refl)
                for (int64_t i = lo; i >= 1; i--) parts[k++] = fc_slice(G, y, d, edge ? 0 : i, edge ? 1 : i + 1, 1);
            else {
                bd[d] = lo;
                parts[k++] = cval ? fc_add(G, fc_full(G, y->rank, bd, 0, y->dtype), cval) : fc_full(G, y->rank, bd, cv, y->dtype);
            }
        }
        parts[k++] = y;
        if (hi) {
            if (edge || refl)
                for (int64_t i = 1; i <= hi; i++)
                    parts[k++] = fc_slice(G, y, d, edge ? len - 1 : len - 1 - i, edge ? len : len - i, 1);
            else {
                bd[d] = hi;
                parts[k++] = cval ? fc_add(G, fc_full(G, y->rank, bd, 0, y->dtype), cval) : fc_full(G, y->rank, bd, cv, y->dtype);
            }
        }
        y = fc_concat(G, k, parts, d);
    }
    OUT(0, y);
    return FC_OK;
}

/* Einsum of one or two operands without repeated letters in one operand:
 * batch letters (in both and the output), contracted ones (in both, not the
 * output), and free ones, as permute, reshape, matmul, reshape, permute. */
fc_status ox_op_einsum(ox_ctx *ox, const Onnx__NodeProto *n) {
    const Onnx__AttributeProto *ea = attr(n, "equation");
    if (!ea || !ea->has_s) return ERR("needs an equation");
    char eq[128];
    size_t l = 0;
    for (size_t i = 0; i < ea->s.len && l < sizeof eq - 1; i++) {
        char c = (char)ea->s.data[i];
        if (c == ' ') continue;
        /* Letters index a table: anything else is refused here. */
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ',' || c == '-' || c == '>' || c == '.'))
            return ERR("equation: byte 0x%02x is not a letter", (unsigned)(unsigned char)c);
        eq[l++] = c;
    }
    eq[l] = 0;
    if (strstr(eq, "...")) return ERR("equation '%s': '...' is not supported", eq);
    char *arrow = strstr(eq, "->");
    char implicit[64];
    const char *outs;
    if (arrow) {
        *arrow = 0;
        outs = arrow + 2;
    } else {
        /* The implicit output: the letters that appear once, in order. */
        int k = 0;
        for (int c = 'A'; c <= 'z' && k < 63; c++) {
            int cnt = 0;
            for (const char *p = eq; *p; p++) cnt += *p == c;
            if (cnt == 1) implicit[k++] = (char)c;
        }
        implicit[k] = 0;
        outs = implicit;
    }
    char *comma = strchr(eq, ',');
    if (!comma && ox->nin == 1) {
        /* One operand: a permute and a sum over the letters not kept. */
        fc_value *a = in(ox, 0);
        if (!a || (int)strlen(eq) != a->rank) return ERR("equation does not match the rank");
        int sum[FC_MAX_RANK], ns = 0, perm[FC_MAX_RANK], r = 0;
        char kept[FC_MAX_RANK + 1];
        for (int d = 0; d < a->rank; d++) {
            if (strchr(eq + d + 1, eq[d])) return ERR("repeated letters (diagonals) are not supported");
            if (strchr(outs, eq[d])) kept[r++] = eq[d];
            else sum[ns++] = d;
        }
        kept[r] = 0;
        fc_value *y = ns ? fc_reduce_sum(G, a, ns, sum, false) : a;
        if ((int)strlen(outs) != r) return ERR("equation output does not match");
        bool ident = true;
        for (int i = 0; i < r; i++) {
            const char *c = strchr(kept, outs[i]);
            if (!c) return ERR("equation output letter '%c' is not the operand's", outs[i]);
            perm[i] = (int)(c - kept);
            ident &= perm[i] == i;
        }
        OUT(0, ident ? y : fc_permute(G, y, r, perm));
        return FC_OK;
    }
    if (!comma || strchr(comma + 1, ',') || ox->nin != 2) return ERR("equation: only one or two operands are supported");
    *comma = 0;
    const char *sa = eq, *sb = comma + 1;
    fc_value *a = in(ox, 0), *b = in(ox, 1);
    if (!a || !b || (int)strlen(sa) != a->rank || (int)strlen(sb) != b->rank) return ERR("equation does not match the ranks");
    char bat[16], con[16], fa[16], fb[16];
    int nb = 0, nc = 0, na = 0, nf = 0;
    fc_dim size[128] = {0};
    for (const char *p = sa; *p; p++) {
        if (strchr(p + 1, *p)) return ERR("repeated letters (diagonals) are not supported");
        size[(unsigned char)*p] = a->dims[p - sa];
        if (strchr(sb, *p)) { if (strchr(outs, *p)) bat[nb++] = *p; else con[nc++] = *p; }
        else if (strchr(outs, *p)) fa[na++] = *p;
        else return ERR("summing a letter of one operand is not supported");
    }
    for (const char *p = sb; *p; p++) {
        if (strchr(p + 1, *p)) return ERR("repeated letters (diagonals) are not supported");
        size[(unsigned char)*p] = b->dims[p - sb];
        if (!strchr(sa, *p)) { if (strchr(outs, *p)) fb[nf++] = *p; else return ERR("summing a letter of one operand is not supported"); }
    }
    /* a -> [bat.., fa.., con..], b -> [bat.., con.., fb..]. */
    int pa[FC_MAX_RANK], pb[FC_MAX_RANK], k = 0;
    for (int i = 0; i < nb; i++) pa[k++] = (int)(strchr(sa, bat[i]) - sa);
    for (int i = 0; i < na; i++) pa[k++] = (int)(strchr(sa, fa[i]) - sa);
    for (int i = 0; i < nc; i++) pa[k++] = (int)(strchr(sa, con[i]) - sa);
    k = 0;
    for (int i = 0; i < nb; i++) pb[k++] = (int)(strchr(sb, bat[i]) - sb);
    for (int i = 0; i < nc; i++) pb[k++] = (int)(strchr(sb, con[i]) - sb);
    for (int i = 0; i < nf; i++) pb[k++] = (int)(strchr(sb, fb[i]) - sb);
    fc_dim M = 1, K = 1, N = 1, bd[FC_MAX_RANK];
    for (int i = 0; i < na; i++) M *= size[(unsigned char)fa[i]];
    for (int i = 0; i < nc; i++) K *= size[(unsigned char)con[i]];
    for (int i = 0; i < nf; i++) N *= size[(unsigned char)fb[i]];
    for (int i = 0; i < nb; i++) bd[i] = size[(unsigned char)bat[i]];
    for (int i = 0; i < 128; i++)
        if (size[i] < 0) return ERR("symbolic dims; bind them (--bind)");
    fc_dim sa3[FC_MAX_RANK], sb3[FC_MAX_RANK], so[FC_MAX_RANK];
    memcpy(sa3, bd, sizeof(fc_dim) * (size_t)nb);
    memcpy(sb3, bd, sizeof(fc_dim) * (size_t)nb);
    sa3[nb] = M; sa3[nb + 1] = K;
    sb3[nb] = K; sb3[nb + 1] = N;
    fc_value *am = fc_reshape(G, fc_permute(G, a, a->rank, pa), nb + 2, sa3);
    fc_value *bm = fc_reshape(G, fc_permute(G, b, b->rank, pb), nb + 2, sb3);
    fc_value *y = matmul_any(ox, am, bm);
    char order[32];
    int r = 0;
    for (int i = 0; i < nb; i++) { so[r] = bd[i]; order[r++] = bat[i]; }
    for (int i = 0; i < na; i++) { so[r] = size[(unsigned char)fa[i]]; order[r++] = fa[i]; }
    for (int i = 0; i < nf; i++) { so[r] = size[(unsigned char)fb[i]]; order[r++] = fb[i]; }
    if (r != (int)strlen(outs) || r > FC_MAX_RANK) return ERR("equation output does not match");
    y = fc_reshape(G, y, r, so);
    int po[FC_MAX_RANK];
    bool ident = true;
    for (int i = 0; i < r; i++) {
        const char *c = memchr(order, outs[i], (size_t)r);
        if (!c) return ERR("equation output letter '%c' is not an input's", outs[i]);
        po[i] = (int)(c - order);
        ident &= po[i] == i;
    }
    OUT(0, ident ? y : fc_permute(G, y, r, po));
    return FC_OK;
}

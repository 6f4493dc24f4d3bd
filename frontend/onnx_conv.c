/* onnx_conv.c - Conv, ConvTranspose, MaxPool and AveragePool, composed from
 * the IR's ops (the IR has no convolution or window op).
 *
 * Every spatial position of a window is a strided slice of the padded input
 * ([N, C, O1, .., On] for kernel offset (k1, .., kn): start k*dilation,
 * step stride). A pooling combines the K = k1*..*kn slices elementwise (max,
 * or the sum over the count of the positions that are not padding). A
 * convolution stacks them into [N, G, C/G*K, O1*..*On] (im2col) and
 * multiplies by the weight as [G, M/G, C/G*K]: one batched matmul, which
 * the GEMM path runs. A transposed convolution is the convolution of the
 * input with stride-1 zeros inserted between its elements, by the flipped
 * kernel with its in and out channels swapped.
 *
 * The windows need static spatial dims; K is at most MAX_WINDOW (the
 * slices are nodes of the graph).
 */
#include "onnx_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_WINDOW 512
#define MAX_SPATIAL 3
#define MAX_ATTR ((int64_t)1 << 30) /* strides, dilations, pads: keeps the size arithmetic in range */

typedef struct window {
    int ns;                   /* spatial dims */
    int64_t k[MAX_SPATIAL];   /* kernel size */
    int64_t s[MAX_SPATIAL];   /* stride */
    int64_t d[MAX_SPATIAL];   /* dilation */
    int64_t pb[MAX_SPATIAL], pe[MAX_SPATIAL]; /* explicit pads, begin and end */
    int64_t extra[MAX_SPATIAL]; /* more padding at the end (ceil_mode) */
    int64_t o[MAX_SPATIAL];   /* output size */
} window;

static int ints_attr(const Onnx__NodeProto *n, const char *name, int64_t *out, int cap) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a) return -1;
    if ((int)a->n_ints > cap) return -2;
    for (size_t i = 0; i < a->n_ints; i++) out[i] = a->ints[i];
    return (int)a->n_ints;
}

static bool str_attr_is(const Onnx__NodeProto *n, const char *name, const char *want, const char *def) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a || !a->has_s) return !strcmp(want, def);
    return a->s.len == strlen(want) && !memcmp(a->s.data, want, a->s.len);
}

/* The window of node n over x (kernel sizes given, or from kernel_shape),
 * its pads and output sizes. ceil: pool's ceil_mode. */
static fc_status make_window(ox_ctx *ox, const Onnx__NodeProto *n, const fc_value *x, const int64_t *kernel, window *w,
                             bool ceil) {
    memset(w, 0, sizeof *w);
    w->ns = x->rank - 2;
    if (w->ns < 1 || w->ns > MAX_SPATIAL) return ERR("expects an input [N, C, D1 .. Dn] with n from 1 to %d", MAX_SPATIAL);
    for (int i = 0; i < x->rank; i++)
        if (fc_dim_is_sym(x->dims[i])) return ERR("dim %d of the input is symbolic; bind it (--bind)", i);
    int64_t v[2 * MAX_SPATIAL];
    if (kernel) {
        memcpy(w->k, kernel, sizeof(int64_t) * (size_t)w->ns);
    } else if (ints_attr(n, "kernel_shape", v, MAX_SPATIAL) != w->ns) {
        return ERR("kernel_shape must have one entry per spatial dim");
    } else {
        memcpy(w->k, v, sizeof(int64_t) * (size_t)w->ns);
    }
    for (int i = 0; i < w->ns; i++) w->s[i] = w->d[i] = 1;
    int c;
    if ((c = ints_attr(n, "strides", v, MAX_SPATIAL)) >= 0) {
        if (c != w->ns) return ERR("strides must have one entry per spatial dim");
        memcpy(w->s, v, sizeof(int64_t) * (size_t)w->ns);
    }
    if ((c = ints_attr(n, "dilations", v, MAX_SPATIAL)) >= 0) {
        if (c != w->ns) return ERR("dilations must have one entry per spatial dim");
        memcpy(w->d, v, sizeof(int64_t) * (size_t)w->ns);
    }
    if ((c = ints_attr(n, "pads", v, 2 * MAX_SPATIAL)) >= 0) {
        if (c != 2 * w->ns) return ERR("pads must have two entries per spatial dim");
        for (int i = 0; i < w->ns; i++) {
            w->pb[i] = v[i];
            w->pe[i] = v[w->ns + i];
        }
    }
    bool same_upper = str_attr_is(n, "auto_pad", "SAME_UPPER", "NOTSET");
    bool same_lower = str_attr_is(n, "auto_pad", "SAME_LOWER", "NOTSET");
    bool valid = str_attr_is(n, "auto_pad", "VALID", "NOTSET");
    if (!same_upper && !same_lower && !valid && !str_attr_is(n, "auto_pad", "NOTSET", "NOTSET"))
        return ERR("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    int64_t K = 1;
    for (int i = 0; i < w->ns; i++) {
        if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0)
            return ERR("kernel sizes, strides and dilations must be positive, pads not negative");
        if (w->k[i] > MAX_WINDOW || w->s[i] > MAX_ATTR || w->d[i] > MAX_ATTR || w->pb[i] > MAX_ATTR || w->pe[i] > MAX_ATTR)
            return ERR("a kernel size over %d, or a stride, dilation or pad over 2^30", MAX_WINDOW);
        int64_t in = x->dims[i + 2], span = w->d[i] * (w->k[i] - 1) + 1;
        if (valid) w->pb[i] = w->pe[i] = 0;
        if (same_upper || same_lower) {
            int64_t o = (in + w->s[i] - 1) / w->s[i], total = (o - 1) * w->s[i] + span - in;
            if (total < 0) total = 0;
            w->pb[i] = same_upper ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        }
        int64_t padded = in + w->pb[i] + w->pe[i];
        if (padded < span) return ERR("the window (%lld) is larger than the padded input (%lld)", (long long)span, (long long)padded);
        int64_t o = (padded - span) / w->s[i] + 1;
        if (ceil && (padded - span) % w->s[i]) {
            o++;
            if ((o - 1) * w->s[i] >= in + w->pb[i]) o--; /* the last window must start inside the input */
        }
        w->o[i] = o;
        w->extra[i] = (o - 1) * w->s[i] + span - padded;
        if (w->extra[i] < 0) w->extra[i] = 0;
        K *= w->k[i];
        if (K > MAX_WINDOW) break;
    }
    if (K > MAX_WINDOW) return ERR("a window of %lld positions (at most %d)", (long long)K, MAX_WINDOW);
    return FC_OK;
}

/* x padded along `axis` with lo and hi elements of value v. */
static fc_value *pad_axis(ox_ctx *ox, fc_value *x, int axis, int64_t lo, int64_t hi, double v) {
    if (!x || (lo == 0 && hi == 0)) return x;
    fc_value *parts[3];
    int np = 0;
    fc_dim d[FC_MAX_RANK];
    memcpy(d, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    if (lo) {
        d[axis] = lo;
        parts[np++] = fc_full(G, x->rank, d, v, x->dtype);
    }
    parts[np++] = x;
    if (hi) {
        d[axis] = hi;
        parts[np++] = fc_full(G, x->rank, d, v, x->dtype);
    }
    return fc_concat(G, np, parts, axis);
}

/* x padded by the window: the explicit pads with v, the ceil_mode extra
 * with v_extra. */
static fc_value *pad_window(ox_ctx *ox, fc_value *x, const window *w, double v, double v_extra) {
    for (int i = 0; i < w->ns; i++) {
        x = pad_axis(ox, x, i + 2, w->pb[i], w->pe[i], v);
        x = pad_axis(ox, x, i + 2, 0, w->extra[i], v_extra);
    }
    return x;
}

/* The slice of padded xp for window position `pos` (the flat index of a
 * kernel offset, last spatial dim fastest): [N, C, O1 .. On]. */
static fc_value *window_slice(ox_ctx *ox, fc_value *xp, const window *w, int64_t pos) {
    int64_t off[MAX_SPATIAL];
    for (int i = w->ns - 1; i >= 0; i--) {
        off[i] = pos % w->k[i];
        pos /= w->k[i];
    }
    for (int i = 0; i < w->ns; i++) {
        int64_t start = off[i] * w->d[i];
        xp = fc_slice(G, xp, i + 2, start, start + (w->o[i] - 1) * w->s[i] + 1, w->s[i]);
    }
    return xp;
}

static int64_t window_size(const window *w) {
    int64_t K = 1;
    for (int i = 0; i < w->ns; i++) K *= w->k[i];
    return K;
}

/* The lowest value of dtype dt, which pads a max pool. */
static double lowest(fc_dtype dt) {
    switch (dt) {
    case FC_I64: return -9223372036854775808.0;
    case FC_I32: return -2147483648.0;
    case FC_I8: return -128.0;
    default: return -INFINITY;
    }
}

fc_status ox_op_pool(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    bool is_max = !strcmp(n->op_type, "MaxPool");
    if (is_max && ox->nout > 1) return ERR("the Indices output is not supported");
    window w;
    fc_status st = make_window(ox, n, x, NULL, &w, ai(n, "ceil_mode", 0) != 0);
    if (st) return st;
    if (!is_max && (w.d[0] != 1 || (w.ns > 1 && w.d[1] != 1) || (w.ns > 2 && w.d[2] != 1)))
        return ERR("AveragePool with dilations is not supported");
    int64_t K = window_size(&w);
    if (is_max) {
        fc_value *xp = pad_window(ox, x, &w, lowest(x->dtype), lowest(x->dtype)), *y = NULL;
        for (int64_t p = 0; p < K; p++) {
            fc_value *s = window_slice(ox, xp, &w, p);
            y = y ? fc_max(G, y, s) : s;
        }
        OUT(0, y);
        return FC_OK;
    }
    if (!isf(x->dtype)) return ERR("AveragePool of a %s input", fc_dtype_name(x->dtype));
    /* The divisor: how many positions of each window are counted, from a
     * ones tensor padded as x is (pads count with count_include_pad; the
     * ceil_mode extra never does). */
    bool include = ai(n, "count_include_pad", 0) != 0;
    fc_dim od[FC_MAX_RANK];
    od[0] = od[1] = 1;
    for (int i = 0; i < w.ns; i++) od[i + 2] = x->dims[i + 2];
    fc_value *ones = pad_window(ox, fc_full(G, x->rank, od, 1, x->dtype), &w, include ? 1 : 0, 0);
    fc_value *xp = pad_window(ox, x, &w, 0, 0), *sum = NULL, *cnt = NULL;
    for (int64_t p = 0; p < K; p++) {
        fc_value *s = window_slice(ox, xp, &w, p), *c = window_slice(ox, ones, &w, p);
        sum = sum ? fc_add(G, sum, s) : s;
        cnt = cnt ? fc_add(G, cnt, c) : c;
    }
    OUT(0, fc_div(G, sum, cnt));
    return FC_OK;
}

/* Convolution of x [N, C, ..] by weight wt [M, C/G, k..] with window w,
 * groups G, bias b (or NULL). */
static fc_value *conv(ox_ctx *ox, fc_value *x, fc_value *wt, fc_value *b, const window *w, int64_t G_) {
    int64_t N = x->dims[0], C = x->dims[1], M = wt->dims[0], K = window_size(w), P = 1;
    for (int i = 0; i < w->ns; i++) P *= w->o[i];
    fc_value *xp = pad_window(ox, x, w, 0, 0);
    fc_value *cols[MAX_WINDOW];
    fc_dim d[FC_MAX_RANK];
    for (int64_t p = 0; p < K; p++) {
        fc_value *s = window_slice(ox, xp, w, p);
        d[0] = N, d[1] = C, d[2] = 1, d[3] = P;
        cols[p] = fc_reshape(G, s, 4, d);
    }
    fc_value *col = K == 1 ? cols[0] : fc_concat(G, (int)K, cols, 2); /* [N, C, K, P] */
    d[0] = N, d[1] = G_, d[2] = C / G_ * K, d[3] = P;
    col = fc_reshape(G, col, 4, d);
    fc_dim wd[3] = {G_, M / G_, C / G_ * K};
    fc_value *y = fc_matmul(G, fc_reshape(G, wt, 3, wd), col); /* [N, G, M/G, P] */
    fc_dim yd[FC_MAX_RANK];
    yd[0] = N, yd[1] = M;
    for (int i = 0; i < w->ns; i++) yd[i + 2] = w->o[i];
    y = fc_reshape(G, y, w->ns + 2, yd);
    if (b) {
        fc_dim bd[FC_MAX_RANK];
        bd[0] = M;
        for (int i = 0; i < w->ns; i++) bd[i + 1] = 1;
        y = fc_add(G, y, fc_reshape(G, b, w->ns + 1, bd));
    }
    return y;
}

static fc_status check_weight(ox_ctx *ox, const fc_value *x, const fc_value *wt) {
    if (!x || !wt) return ERR("needs an input and a weight");
    if (wt->rank != x->rank) return ERR("the weight must have the input's rank");
    for (int i = 0; i < wt->rank; i++)
        if (fc_dim_is_sym(wt->dims[i])) return ERR("the weight's dims must be static");
    if (!isf(x->dtype) || wt->dtype != x->dtype) return ERR("expects float input and weight of one dtype");
    return FC_OK;
}

fc_status ox_op_conv(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *wt = in(ox, 1), *b = in(ox, 2);
    fc_status st = check_weight(ox, x, wt);
    if (st) return st;
    int64_t groups = ai(n, "group", 1);
    if (groups < 1 || x->dims[1] % groups || wt->dims[0] % groups || wt->dims[1] * groups != x->dims[1])
        return ERR("the channels (%lld in, weight [%lld, %lld, ..]) do not fit group %lld", (long long)x->dims[1],
                   (long long)wt->dims[0], (long long)wt->dims[1], (long long)groups);
    window w;
    if ((st = make_window(ox, n, x, wt->dims + 2, &w, false))) return st;
    if (b && (b->rank != 1 || b->dims[0] != wt->dims[0])) return ERR("the bias must be [M]");
    OUT(0, conv(ox, x, wt, b, &w, groups));
    return FC_OK;
}

/* x with s-1 zeros between neighbours along `axis`: (I - 1) * s + 1. */
static fc_value *dilate_axis(ox_ctx *ox, fc_value *x, int axis, int64_t s) {
    if (s == 1) return x;
    fc_dim d[FC_MAX_RANK];
    int r = x->rank;
    for (int i = 0, j = 0; i < r; i++) {
        d[j++] = x->dims[i];
        if (i == axis) d[j++] = 1;
    }
    fc_value *u = fc_reshape(G, x, r + 1, d);
    d[axis + 1] = s - 1;
    fc_value *parts[2] = {u, fc_full(G, r + 1, d, 0, x->dtype)};
    fc_value *z = fc_concat(G, 2, parts, axis + 1);
    memcpy(d, x->dims, sizeof(fc_dim) * (size_t)r);
    d[axis] = x->dims[axis] * s;
    return fc_slice(G, fc_reshape(G, z, r, d), axis, 0, (x->dims[axis] - 1) * s + 1, 1);
}

fc_status ox_op_conv_transpose(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *wt = in(ox, 1), *b = in(ox, 2);
    fc_status st = check_weight(ox, x, wt);
    if (st) return st;
    int64_t groups = ai(n, "group", 1), C = x->dims[1];
    if (groups < 1 || C % groups || wt->dims[0] != C) return ERR("the weight must be [C, M/group, k..]");
    int ns = x->rank - 2;
    if (ns < 1 || ns > MAX_SPATIAL) return ERR("expects an input [N, C, D1 .. Dn] with n from 1 to %d", MAX_SPATIAL);
    for (int i = 0; i < x->rank; i++)
        if (fc_dim_is_sym(x->dims[i])) return ERR("dim %d of the input is symbolic; bind it (--bind)", i);
    int64_t s[MAX_SPATIAL], d[MAX_SPATIAL], pads[2 * MAX_SPATIAL] = {0}, opad[MAX_SPATIAL] = {0}, oshape[MAX_SPATIAL];
    for (int i = 0; i < ns; i++) s[i] = d[i] = 1;
    int c;
    if ((c = ints_attr(n, "strides", s, MAX_SPATIAL)) >= 0 && c != ns) return ERR("strides must have one entry per spatial dim");
    if ((c = ints_attr(n, "dilations", d, MAX_SPATIAL)) >= 0 && c != ns) return ERR("dilations must have one entry per spatial dim");
    if ((c = ints_attr(n, "pads", pads, 2 * MAX_SPATIAL)) >= 0 && c != 2 * ns) return ERR("pads must have two entries per spatial dim");
    if ((c = ints_attr(n, "output_padding", opad, MAX_SPATIAL)) >= 0 && c != ns) return ERR("output_padding must have one entry per spatial dim");
    int nos = ints_attr(n, "output_shape", oshape, MAX_SPATIAL);
    bool same_upper = str_attr_is(n, "auto_pad", "SAME_UPPER", "NOTSET");
    bool same_lower = str_attr_is(n, "auto_pad", "SAME_LOWER", "NOTSET");
    if (nos >= 0 && nos != ns) return ERR("output_shape must have one entry per spatial dim");
    for (int i = 0; i < ns; i++) {
        int64_t lim[] = {s[i], d[i], pads[i], pads[ns + i], opad[i], nos >= 0 ? oshape[i] : 0, wt->dims[i + 2]};
        for (size_t j = 0; j < sizeof lim / sizeof *lim; j++)
            if (lim[j] > MAX_ATTR || lim[j] < -MAX_ATTR) return ERR("a stride, dilation, pad, size or kernel dim over 2^30");
        if (wt->dims[i + 2] > MAX_WINDOW) return ERR("a kernel size over %d", MAX_WINDOW);
        int64_t in = x->dims[i + 2], k = wt->dims[i + 2], full = s[i] * (in - 1) + opad[i] + (k - 1) * d[i] + 1;
        if (nos >= 0 || same_upper || same_lower) {
            int64_t out = nos >= 0 ? oshape[i] : in * s[i], total = full - out;
            /* as the ONNX reference computes them: SAME_UPPER puts the smaller
             * half first, anything else (SAME_LOWER, output_shape) the larger,
             * halves rounded down; a negative total (an output_shape past
             * the full result) pads the end with zeros */
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            pads[i] = same_upper ? half : total - half;
            pads[ns + i] = total - pads[i];
        } else if (pads[i] < 0 || pads[ns + i] < 0) {
            return ERR("pads must not be negative");
        }
        if (s[i] < 1 || d[i] < 1) return ERR("strides and dilations must be positive");
    }
    /* The input with the strides' zeros, padded by d*(k-1) less the pads
     * (cropped where that is negative), convolved at stride 1. */
    fc_value *xz = x;
    for (int i = 0; i < ns; i++) xz = dilate_axis(ox, xz, i + 2, s[i]);
    for (int i = 0; i < ns; i++) {
        int64_t span = d[i] * (wt->dims[i + 2] - 1), lo = span - pads[i], hi = span - pads[ns + i] + opad[i];
        int64_t len = xz->dims[i + 2];
        if (lo < 0 || hi < 0) {
            int64_t a = lo < 0 ? -lo : 0, e = hi < 0 ? len + hi : len;
            if (e <= a) return ERR("the pads crop the whole input");
            xz = fc_slice(G, xz, i + 2, a, e, 1);
            lo = lo < 0 ? 0 : lo;
            hi = hi < 0 ? 0 : hi;
        }
        xz = pad_axis(ox, xz, i + 2, lo, hi, 0);
    }
    /* weight [C, M/G, k..] -> [G, C/G, M/G, k..] -> [G, M/G, C/G, k..],
     * each kernel flipped, -> [M, C/G, k..] */
    int64_t Mg = wt->dims[1], Cg = C / groups;
    fc_dim wd[FC_MAX_RANK];
    wd[0] = groups, wd[1] = Cg, wd[2] = Mg;
    for (int i = 0; i < ns; i++) wd[i + 3] = wt->dims[i + 2];
    fc_value *w5 = fc_reshape(G, wt, ns + 3, wd);
    int perm[FC_MAX_RANK] = {0, 2, 1};
    for (int i = 0; i < ns; i++) perm[i + 3] = i + 3;
    w5 = fc_permute(G, w5, ns + 3, perm);
    for (int i = 0; i < ns; i++) {
        int64_t k = wt->dims[i + 2];
        if (k > 1) {
            fc_dim kd[1] = {k};
            fc_value *rev = fc_sub(G, fc_scalar_int(G, k - 1), fc_iota(G, 1, kd, 0, FC_I64));
            w5 = fc_gather(G, w5, rev, i + 3);
        }
    }
    wd[0] = groups * Mg, wd[1] = Cg;
    for (int i = 0; i < ns; i++) wd[i + 2] = wt->dims[i + 2];
    fc_value *wf = fc_reshape(G, w5, ns + 2, wd);
    window w;
    memset(&w, 0, sizeof w);
    w.ns = ns;
    for (int i = 0; i < ns; i++) {
        w.k[i] = wt->dims[i + 2];
        w.s[i] = 1;
        w.d[i] = d[i];
        w.o[i] = xz->dims[i + 2] - d[i] * (w.k[i] - 1);
        if (w.o[i] < 1) return ERR("the output would be empty");
    }
    if (window_size(&w) > MAX_WINDOW) return ERR("a window of %lld positions (at most %d)", (long long)window_size(&w), MAX_WINDOW);
    if (b && (b->rank != 1 || b->dims[0] != groups * Mg)) return ERR("the bias must be [M]");
    OUT(0, conv(ox, xz, wf, b, &w, groups));
    return FC_OK;
}

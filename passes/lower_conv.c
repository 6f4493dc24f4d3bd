/* lower_conv.c - lower the convolution family, pooling, batch norm, pad and
 * resize to the IR's primitives, channels-last.
 *
 * A convolution becomes an im2col and one matmul: the input is permuted to
 * channels-last ([N, D1 .. Dn, C]), padded with zero blocks (concat), and
 * each of the K kernel offsets is a strided slice of it ([N, O1 .. On, C]).
 * The K slices stacked after the channels are the columns [N*P, C*K], and
 * the weight, [M, C*K] as it is stored, multiplies them transposed: y
 * [N*P, M], then [N, O1 .. On, M]. So a 1x1
 * convolution at stride 1 is exactly a GEMM of the activations, and the
 * bias, activation, residual and cast after it fold into the GEMM epilogue
 * (passes/epilogue.c) like any linear layer's; the slices and the concat
 * are views that fusion puts in the kernel producing the columns.
 *
 * Grouped convolutions are a batched matmul over the groups; depthwise ones
 * (one input and one output channel per group) are K multiply-adds of the
 * slices by a weight row, one elementwise kernel after fusion instead of a
 * matmul of inner size K. A transposed convolution is the convolution, at
 * stride 1, of the input with stride-1 zeros between its elements, padded
 * by d(k-1) less its pads, by the flipped kernel with in and out channels
 * swapped. Pools combine the K slices elementwise (max, or the sum over
 * the count of positions that are not padding).
 *
 * With a convolution library (fc_pass_lower_conv_library: the CUDA backend
 * with cuDNN), a 2-D convolution that is not depthwise is instead one
 * conv_cl node on the channels-last input and weight (the weight's
 * permute runs at load time, passes/loadtime.c), with its bias an add
 * after it; the epilogue pass folds that add and the activation, residual
 * and cast after it into the node, so that the library runs the
 * convolution and its tail as one call and no kernel makes columns.
 *
 * Each lowered op is permuted back to NCHW at its end; canonicalize then
 * cancels a permute back and the next op's permute in, and the layout pass
 * (passes/layout.c) moves the remaining ones through the elementwise ops
 * between convolutions, so activations stay channels-last from the first
 * convolution to the graph's edge.
 *
 * Precision: as passes/decompose.c, the elementwise sums (depthwise, pools,
 * batch norm, resize) compute in f32 for narrow inputs and round once; the
 * matmuls accumulate in f32 as every matmul does.
 *
 * The public builders (fc_slice, fc_concat, ..) place their nodes here
 * during the rebuild: fc_build appends to the graph being rebuilt, and
 * every operand they see is already remapped.
 */
#include "passes.h"
#include "rewrite.h"

#include <math.h>
#include <string.h>

#define MAX_WINDOW 4096 /* slices per window: the lowering makes one node per kernel offset */

static fc_dtype compute_dtype(fc_dtype dt) { return dt == FC_F64 ? FC_F64 : FC_F32; }

/* x as dtype dt: x itself when it has it. */
static fc_value *cast(fc_graph *g, fc_value *x, fc_dtype dt) { return x && x->dtype == dt ? x : fc_cast(g, x, dt); }

/* x [N, C, D..] -> [N, D.., C] */
static fc_value *to_last(fc_graph *g, fc_value *x) {
    int perm[FC_MAX_RANK], r = x->rank;
    perm[0] = 0;
    for (int i = 1; i < r - 1; i++) perm[i] = i + 1;
    perm[r - 1] = 1;
    return fc_permute(g, x, r, perm);
}

/* y [N, D.., C] -> [N, C, D..] */
static fc_value *to_first(fc_graph *g, fc_value *y) {
    int perm[FC_MAX_RANK], r = y->rank;
    perm[0] = 0;
    perm[1] = r - 1;
    for (int i = 2; i < r; i++) perm[i] = i - 1;
    return fc_permute(g, y, r, perm);
}

/* x padded along `axis` with lo and hi elements of value v (a negative
 * count crops). */
static fc_value *pad_axis(fc_graph *g, fc_value *x, int axis, int64_t lo, int64_t hi, double v) {
    if (g->status || (lo == 0 && hi == 0)) return x;
    if (lo < 0 || hi < 0) {
        int64_t n = x->dims[axis];
        x = fc_slice(g, x, axis, lo < 0 ? -lo : 0, hi < 0 ? n + hi : n, 1);
        lo = lo < 0 ? 0 : lo;
        hi = hi < 0 ? 0 : hi;
        if (lo == 0 && hi == 0) return x;
    }
    fc_value *parts[3];
    int np = 0;
    fc_dim d[FC_MAX_RANK];
    memcpy(d, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    if (lo) {
        d[axis] = lo;
        parts[np++] = fc_full(g, x->rank, d, v, x->dtype);
    }
    parts[np++] = x;
    if (hi) {
        d[axis] = hi;
        parts[np++] = fc_full(g, x->rank, d, v, x->dtype);
    }
    return fc_concat(g, np, parts, axis);
}

/* The ceil-mode overhang of a pool window past the end pad. */
static int64_t overhang(const fc_window_geom *w, int i) {
    int64_t e = (w->out[i] - 1) * w->s[i] + w->d[i] * (w->k[i] - 1) + 1 - (w->in[i] + w->pb[i] + w->pe[i]);
    return e > 0 ? e : 0;
}

/* Channels-last xl padded by the window: the pads with v, the overhang
 * with v_over. */
static fc_value *pad_window(fc_graph *g, fc_value *xl, const fc_window_geom *w, double v, double v_over) {
    for (int i = 0; i < w->ns; i++) {
        xl = pad_axis(g, xl, i + 1, w->pb[i], w->pe[i], v);
        xl = pad_axis(g, xl, i + 1, 0, overhang(w, i), v_over);
    }
    return xl;
}

/* The slice of padded channels-last xp at kernel offset q (flat, last
 * spatial dim fastest): [N, O.., C]. */
static fc_value *window_slice(fc_graph *g, fc_value *xp, const fc_window_geom *w, int64_t q) {
    int64_t off[FC_MAX_SPATIAL];
    for (int i = w->ns - 1; i >= 0; i--) {
        off[i] = q % w->k[i];
        q /= w->k[i];
    }
    for (int i = 0; i < w->ns; i++) {
        int64_t start = off[i] * w->d[i], end = start + (w->out[i] - 1) * w->s[i] + 1;
        if (start != 0 || end != xp->dims[i + 1] || w->s[i] != 1) xp = fc_slice(g, xp, i + 1, start, end, w->s[i]);
    }
    return xp;
}

/* [N, O.., last] with N from x (maybe symbolic). */
static fc_value *spatial_shape(fc_graph *g, fc_value *y, fc_dim n, const fc_window_geom *w, fc_dim last) {
    fc_dim d[FC_MAX_RANK];
    d[0] = n;
    for (int i = 0; i < w->ns; i++) d[i + 1] = w->out[i];
    d[w->ns + 1] = last;
    return fc_reshape(g, y, w->ns + 2, d);
}

/* The convolution of padded channels-last xp [N, D.., C] by wt [M, C/G,
 * k..] (NCHW weight) over window w (its pads already applied), groups G,
 * bias b or NULL: channels-last [N, O.., M]. */
static fc_value *conv_last(fc_graph *g, fc_value *xp, fc_value *wt, fc_value *b, const fc_window_geom *w, int64_t G) {
    int ns = w->ns, r = ns + 2;
    int64_t C = xp->dims[r - 1], M = wt->dims[0], Cg = C / G, Mg = M / G, K = fc_window_size(w);
    fc_dim N = xp->dims[0];
    fc_value *cols[MAX_WINDOW];
    for (int64_t q = 0; q < K; q++) cols[q] = window_slice(g, xp, w, q);
    fc_value *y;
    if (G > 1 && Cg == 1 && Mg == 1) {
        /* depthwise: sum over q of slice_q * w[:, q], in the compute dtype */
        fc_dtype ct = compute_dtype(xp->dtype);
        fc_dim wd[2] = {C, K};
        int tr[2] = {1, 0};
        fc_value *wk = cast(g, fc_permute(g, fc_reshape(g, wt, 2, wd), 2, tr), ct); /* [K, C] */
        y = NULL;
        for (int64_t q = 0; q < K; q++) {
            fc_value *t = fc_mul(g, cast(g, cols[q], ct), fc_slice(g, wk, 0, q, q + 1, 1));
            y = y ? fc_add(g, y, t) : t;
        }
        if (b) y = fc_add(g, y, cast(g, b, ct));
        return cast(g, y, xp->dtype);
    }
    /* The columns [N, O.., C, K], index c*K + q: the weight [M, C/G, k..]
     * is then [M, C/G*K] as it is stored, and the GEMM reads it transposed
     * in place (no kernel reorders the weights). */
    fc_value *col = cols[0];
    if (K > 1) {
        fc_dim d[FC_MAX_RANK];
        memcpy(d, cols[0]->dims, sizeof(fc_dim) * (size_t)r);
        d[r] = 1;
        for (int64_t q = 0; q < K; q++) cols[q] = fc_reshape(g, cols[q], r + 1, d);
        col = fc_concat(g, (int)K, cols, r);
    }
    if (G == 1) {
        /* [N, O.., C*K] @ [C*K, M]: the matmul keeps the activation's
         * rank, so the bias, activation and residual that follow are its
         * epilogue directly */
        fc_dim cd[FC_MAX_RANK];
        memcpy(cd, col->dims, sizeof(fc_dim) * (size_t)r);
        cd[r - 1] = C * K;
        if (K > 1) col = fc_reshape(g, col, r, cd);
        fc_dim wd[2] = {M, C * K};
        int tr[2] = {1, 0};
        y = fc_matmul(g, col, fc_permute(g, fc_reshape(g, wt, 2, wd), 2, tr));
        return b ? fc_add(g, y, b) : y;
    } else {
        /* columns [NP, G, Cg*K] -> [G, NP, Cg*K]; weight [G, Mg, Cg*K],
         * transposed; [G, NP, Mg] -> [NP, G, Mg] -> [NP, M] */
        fc_dim c3[3] = {FC_DIM_INFER, G, Cg * K}, w3[3] = {G, Mg, Cg * K}, yd[2] = {FC_DIM_INFER, M};
        int p102[3] = {1, 0, 2}, p021[3] = {0, 2, 1};
        fc_value *cg = fc_permute(g, fc_reshape(g, col, 3, c3), 3, p102);
        fc_value *wg = fc_permute(g, fc_reshape(g, wt, 3, w3), 3, p021);
        y = fc_reshape(g, fc_permute(g, fc_matmul(g, cg, wg), 3, p102), 2, yd);
    }
    y = spatial_shape(g, y, N, w, M);
    return b ? fc_add(g, y, b) : y;
}

static fc_status geom_of(fc_graph *g, const fc_node *n, fc_window_geom *w) {
    const fc_value *x = n->in[0];
    int64_t in[FC_MAX_SPATIAL], k[FC_MAX_SPATIAL];
    for (int i = 2; i < x->rank; i++) in[i - 2] = x->dims[i];
    if (n->nin > 1)
        for (int i = 2; i < x->rank; i++) k[i - 2] = n->in[1]->dims[i];
    char err[256];
    if (!fc_window_geom_of(n->op, &n->a, x->rank - 2, in, n->nin > 1 ? k : NULL, w, err, sizeof err))
        return fc_graph_error(g, FC_ERR_INPUT, "%s: %s", fc_op_table[n->op].name, err);
    if (fc_window_size(w) > MAX_WINDOW)
        return fc_graph_error(g, FC_ERR_UNSUPPORTED, "%s: a window of %lld positions (at most %d)",
                              fc_op_table[n->op].name, (long long)fc_window_size(w), MAX_WINDOW);
    return FC_OK;
}

/* What the lowering is for: im2col only, or a convolution library, and the
 * precision the autocast pass will compute in. */
typedef struct lowering {
    bool library;
    fc_precision precision;
} lowering;

#define CHANNEL_ALIGN 8 /* 16-byte rows of 16-bit channels-last data */

/* The dtype a convolution of operands of dtype dt computes in after
 * autocast: the low dtype for f32 under bf16 or f16 (its operands are
 * rounded to it), f32 for 16-bit ones under f32 (they are widened). */
static fc_dtype conv_dtype(fc_dtype dt, fc_precision p) {
    bool narrow = dt == FC_F16 || dt == FC_BF16;
    if (p == FC_PRECISION_F32 && narrow) return FC_F32;
    if (dt != FC_F32) return dt;
    return p == FC_PRECISION_BF16 ? FC_BF16 : p == FC_PRECISION_F16 ? FC_F16 : dt;
}

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* The input channels conv n runs at in the library: C, or C padded with
 * zero channels to the next multiple of CHANNEL_ALIGN when that pays.
 * cuDNN's tensor-core engines need channels per group and output channels
 * in multiples of 8 (a ResNet stem's 3 channels had no engine on the
 * H200); zero channels in the input and the weight add nothing to the sum.
 * The weight is padded once, at load time (it reads parameters alone:
 * passes/loadtime.c), and the input by the kernel that makes it
 * channels-last (the pad is a concat with a zero block, a view that fusion
 * puts into that kernel). It pays for a window of several positions: the
 * im2col path would write K C columns per output position (147 for a
 * ResNet stem's 7x7 over 3 channels, 4.6 times the padded input at stride
 * 2; 27 for a 3x3 stem, 0.84 times) and then run a GEMM of an unaligned
 * inner size C K with an f32 result, where the library reads the padded
 * input once and writes the low dtype. A 1x1 convolution with unaligned
 * channels stays a GEMM of the input as it is. Only for one group: a
 * grouped convolution's groups would each need their own pad. */
static int64_t library_channels(const fc_node *n, const fc_window_geom *w) {
    int64_t C = n->in[1]->dims[1];
    if (C % CHANNEL_ALIGN == 0 || n->a.groups != 1 || fc_window_size(w) == 1) return C;
    return round_up(C, CHANNEL_ALIGN);
}

/* Whether conv n goes to the convolution library as one conv_cl: 2-D,
 * computing in a 16-bit float (as written, or f32 rounded by autocast;
 * cuDNN's engines for f32 data run TF32 on tensor cores, whose 10-bit
 * products missed f32's tolerance by 100x on the H200: f32 convolutions
 * stay im2col and an f32 GEMM), not depthwise (K multiply-adds, one
 * elementwise kernel that fusion joins to its neighbours, beat a library
 * call there), the same pad at both ends of each axis (cuDNN's engines are
 * made and tested for those; the asymmetric pads of SAME padding at stride
 * 2 stay im2col), channels per group (padded: library_channels) and
 * output channels in multiples of 8, and an input larger than 1x1. */
static bool library_conv(const fc_node *n, const fc_window_geom *w, fc_precision p) {
    const fc_value *x = n->in[0], *wt = n->in[1];
    if (w->ns != 2 || fc_dim_is_sym(x->dims[1]) || fc_dim_is_sym(wt->dims[0]) || fc_dim_is_sym(wt->dims[1]))
        return false;
    fc_dtype dt = conv_dtype(x->dtype, p);
    bool narrow = (dt == FC_F16 || dt == FC_BF16) && conv_dtype(wt->dtype, p) == dt;
    bool symmetric = w->pb[0] == w->pe[0] && w->pb[1] == w->pe[1];
    bool aligned = library_channels(n, w) % CHANNEL_ALIGN == 0 && wt->dims[0] % CHANNEL_ALIGN == 0;
    /* A 1x1 input (a squeeze-and-excitation block's pooled channels) is a
     * plain GEMM with no columns to gather: cuBLASLt takes it. cuDNN's
     * heuristic offered no fused engine for EfficientNet-B0's, and its
     * fallback engines made the model 9x slower on the H200. */
    bool pooled = w->in[0] == 1 && w->in[1] == 1;
    return narrow && !fc_conv_is_depthwise(n) && symmetric && aligned && !pooled;
}

/* Channels-last v [.., C] with zero channels after its own up to c. */
static fc_value *pad_channels(fc_graph *g, fc_value *v, int64_t c) {
    int last = v->rank - 1;
    return pad_axis(g, v, last, 0, c - v->dims[last], 0);
}

/* conv n as conv_cl on channels-last x and weight [M, kh, kw, C/G]
 * (their channels padded: library_channels); the bias an add after it,
 * which the epilogue pass folds back in with the activation, residual and
 * cast that follow. */
static fc_value *conv_library(fc_graph *g, fc_node *n, const fc_window_geom *w) {
    int64_t c = library_channels(n, w);
    fc_value *xl = pad_channels(g, to_last(g, n->in[0]), c), *wl = pad_channels(g, to_last(g, n->in[1]), c);
    int64_t win[4 * FC_MAX_SPATIAL + FC_CONV_EPI_LEN] = {0};
    memcpy(win, n->a.list, sizeof win[0] * (size_t)(4 * w->ns));
    fc_attrs at;
    fc_attrs_defaults(FC_OP_CONV_CL, &at);
    at.list = win;
    at.nlist = 4 * w->ns + FC_CONV_EPI_LEN;
    at.groups = n->a.groups;
    at.dtype = xl->dtype;
    fc_value *in[2] = {xl, wl};
    fc_node *cv = fc_build(g, FC_OP_CONV_CL, in, 2, &at);
    if (!cv) return NULL;
    fc_value *y = cv->out[0];
    if (n->nin > 2) y = fc_add(g, y, n->in[2]);
    return to_first(g, y);
}

static fc_value *lower_conv(fc_graph *g, fc_node *n, const lowering *lw) {
    fc_window_geom w;
    if (geom_of(g, n, &w)) return NULL;
    if (lw->library && library_conv(n, &w, lw->precision)) return conv_library(g, n, &w);
    fc_value *xp = pad_window(g, to_last(g, n->in[0]), &w, 0, 0);
    return to_first(g, conv_last(g, xp, n->in[1], n->nin > 2 ? n->in[2] : NULL, &w, n->a.groups));
}

/* x with s-1 zeros between neighbours along `axis`: (I - 1) * s + 1. */
static fc_value *dilate_axis(fc_graph *g, fc_value *x, int axis, int64_t s) {
    if (s == 1 || g->status) return x;
    fc_dim d[FC_MAX_RANK];
    int r = x->rank;
    for (int i = 0, j = 0; i < r; i++) {
        d[j++] = x->dims[i];
        if (i == axis) d[j++] = 1;
    }
    fc_value *u = fc_reshape(g, x, r + 1, d);
    d[axis + 1] = s - 1;
    fc_value *parts[2] = {u, fc_full(g, r + 1, d, 0, x->dtype)};
    fc_value *z = fc_concat(g, 2, parts, axis + 1);
    memcpy(d, x->dims, sizeof(fc_dim) * (size_t)r);
    d[axis] = x->dims[axis] * s;
    return fc_slice(g, fc_reshape(g, z, r, d), axis, 0, (x->dims[axis] - 1) * s + 1, 1);
}

static fc_value *lower_conv_transpose(fc_graph *g, fc_node *n) {
    fc_window_geom w;
    if (geom_of(g, n, &w)) return NULL;
    fc_value *x = n->in[0], *wt = n->in[1];
    int ns = w.ns;
    int64_t G = n->a.groups, C = x->dims[1], Cg = C / G, Mg = wt->dims[1];
    fc_value *xl = to_last(g, x);
    for (int i = 0; i < ns; i++) xl = dilate_axis(g, xl, i + 1, w.s[i]);
    for (int i = 0; i < ns; i++) {
        int64_t span = w.d[i] * (w.k[i] - 1);
        xl = pad_axis(g, xl, i + 1, span - w.pb[i], span - w.pe[i] + w.op[i], 0);
    }
    /* weight [C, Mg, k..] -> [G, Cg, Mg, k..] -> [G, Mg, Cg, k..], each
     * kernel dim reversed, -> [M, Cg, k..] */
    fc_dim wd[FC_MAX_RANK];
    wd[0] = G, wd[1] = Cg, wd[2] = Mg;
    for (int i = 0; i < ns; i++) wd[i + 3] = w.k[i];
    int perm[FC_MAX_RANK] = {0, 2, 1};
    for (int i = 0; i < ns; i++) perm[i + 3] = i + 3;
    fc_value *w5 = fc_permute(g, fc_reshape(g, wt, ns + 3, wd), ns + 3, perm);
    for (int i = 0; i < ns; i++) {
        if (w.k[i] == 1) continue;
        fc_dim kd[1] = {w.k[i]};
        fc_value *rev = fc_sub(g, fc_scalar_int(g, w.k[i] - 1), fc_iota(g, 1, kd, 0, FC_I64));
        w5 = fc_gather(g, w5, rev, i + 3);
    }
    wd[0] = G * Mg, wd[1] = Cg;
    for (int i = 0; i < ns; i++) wd[i + 2] = w.k[i];
    fc_value *wf = fc_reshape(g, w5, ns + 2, wd);
    /* the stride-1 convolution over the prepared input */
    fc_window_geom c = w;
    for (int i = 0; i < ns; i++) {
        c.in[i] = xl->dims[i + 1];
        c.s[i] = 1;
        c.pb[i] = c.pe[i] = c.op[i] = 0;
    }
    return to_first(g, conv_last(g, xl, wf, n->nin > 2 ? n->in[2] : NULL, &c, G));
}

/* The lowest value of dt, which pads a max pool. */
static double lowest(fc_dtype dt) {
    switch (dt) {
    case FC_I64: return -9223372036854775808.0;
    case FC_I32: return -2147483648.0;
    case FC_I8: return -128.0;
    case FC_BOOL: return 0;
    default: return -INFINITY;
    }
}

static fc_value *lower_pool(fc_graph *g, fc_node *n) {
    fc_window_geom w;
    if (geom_of(g, n, &w)) return NULL;
    fc_value *x = n->in[0], *xl = to_last(g, x);
    int64_t K = fc_window_size(&w);
    if (n->op == FC_OP_MAX_POOL) {
        fc_value *xp = pad_window(g, xl, &w, lowest(x->dtype), lowest(x->dtype)), *y = NULL;
        for (int64_t q = 0; q < K; q++) {
            fc_value *s = window_slice(g, xp, &w, q);
            y = y ? fc_max(g, y, s) : s;
        }
        return to_first(g, y);
    }
    fc_dtype ct = compute_dtype(x->dtype);
    fc_value *xp = pad_window(g, cast(g, xl, ct), &w, 0, 0), *sum = NULL;
    bool padded = false;
    for (int i = 0; i < w.ns; i++) padded = padded || w.pb[i] || w.pe[i] || overhang(&w, i);
    for (int64_t q = 0; q < K; q++) {
        fc_value *s = window_slice(g, xp, &w, q);
        sum = sum ? fc_add(g, sum, s) : s;
    }
    fc_value *y;
    if (!padded || (n->a.count_pad && !overhang(&w, 0) && (w.ns < 2 || !overhang(&w, 1)) && (w.ns < 3 || !overhang(&w, 2)))) {
        y = fc_mul(g, sum, fc_scalar(g, 1.0 / (double)K));
    } else {
        /* the divisor per output position, from a ones tensor padded as x
         * is (the pads count with count_pad, the overhang never) */
        fc_dim od[FC_MAX_RANK];
        od[0] = 1;
        for (int i = 0; i < w.ns; i++) od[i + 1] = w.in[i];
        od[w.ns + 1] = 1;
        double v = n->a.count_pad ? 1 : 0;
        fc_value *ones = pad_window(g, fc_full(g, w.ns + 2, od, 1, ct), &w, v, 0), *cnt = NULL;
        for (int64_t q = 0; q < K; q++) {
            fc_value *c = window_slice(g, ones, &w, q);
            cnt = cnt ? fc_add(g, cnt, c) : c;
        }
        y = fc_div(g, sum, cnt);
    }
    return to_first(g, cast(g, y, x->dtype));
}

/* Spatial extent from which a global average pool is two means. */
#define GAP_SPLIT_MIN 256

/* The mean over the spatial dims of channels-last [N, D1 .. Dn, C] is a
 * reduction over axes that are not the innermost, with N*C rows of
 * D1*..*Dn elements: a kernel has a block per 32 rows (codegen/cuda/reduce.c),
 * 32 blocks for EfficientNet-B0's first squeeze-excite at batch 32 (1024
 * rows over 112x112), far too few for the GPU, and the depthwise
 * convolution fused before it runs at the same parallelism. For a large
 * extent (GAP_SPLIT_MIN and up: a 16x16 map) it is the mean over the last
 * spatial dim, then the mean of those over the others: the first, which
 * reads the whole tensor and computes what is fused before it, has
 * N*D1*..*Dn-1*C rows; the second reads D1*..*Dn-1 values per row. Both in
 * the compute dtype: the partial means are not rounded to a narrow input's
 * dtype. Equal counts per partial, so the mean of the means is the mean. */
static fc_value *lower_global_avg_pool(fc_graph *g, fc_node *n) {
    fc_value *x = n->in[0];
    int axes[FC_MAX_SPATIAL], ns = x->rank - 2;
    for (int i = 0; i < ns; i++) axes[i] = i + 1;
    int64_t extent = 1;
    for (int i = 2; i < x->rank; i++) extent = fc_dim_is_sym(x->dims[i]) || extent < 0 ? -1 : extent * x->dims[i];
    fc_value *xl = to_last(g, x);
    if (ns < 2 || extent < GAP_SPLIT_MIN || x->dims[x->rank - 1] < 2) return to_first(g, fc_reduce_mean(g, xl, ns, axes, true));
    const fc_dtype ct = compute_dtype(x->dtype);
    int last = ns;
    fc_value *part = fc_reduce_mean(g, cast(g, xl, ct), 1, &last, true);
    return to_first(g, cast(g, fc_reduce_mean(g, part, ns - 1, axes, true), x->dtype));
}

/* p [C] as [C, 1 ..] against a rank-r input, in dtype ct. */
static fc_value *per_channel(fc_graph *g, fc_value *p, int r, fc_dtype ct) {
    fc_dim d[FC_MAX_RANK];
    d[0] = p->dims[0];
    for (int i = 1; i < r - 1; i++) d[i] = 1;
    return fc_reshape(g, cast(g, p, ct), r - 1, d);
}

/* batch_norm = x * a + c with a = scale * rsqrt(var + eps), c = bias -
 * mean * a: two per-channel vectors, then one multiply-add per element. */
static fc_value *lower_batch_norm(fc_graph *g, fc_node *n) {
    fc_value *x = n->in[0];
    fc_dtype ct = compute_dtype(x->dtype);
    int r = x->rank;
    fc_value *var = cast(g, n->in[4], ct), *a = fc_mul(g, cast(g, n->in[1], ct),
                                                         fc_rsqrt(g, fc_add(g, var, fc_scalar(g, n->a.eps))));
    fc_value *c = fc_sub(g, cast(g, n->in[2], ct), fc_mul(g, cast(g, n->in[3], ct), a));
    fc_value *y = fc_mul(g, cast(g, x, ct), per_channel(g, a, r, ct));
    return fc_add(g, y, per_channel(g, c, r, ct));
}

/* pad: constant pads are zero blocks (negative ones slices); reflect and
 * edge gather along each padded axis with an index vector
 * (iota - begin, folded into range). */
static fc_value *lower_pad(fc_graph *g, fc_node *n) {
    fc_value *x = n->in[0];
    int r = x->rank;
    for (int i = 0; i < r; i++) {
        int64_t lo = n->a.list[i], hi = n->a.list[r + i], len = x->dims[i];
        if (lo == 0 && hi == 0) continue;
        if (n->a.mode == FC_PAD_CONSTANT || len + lo + hi == 0) {
            x = pad_axis(g, x, i, lo, hi, n->a.value);
            continue;
        }
        fc_dim od[1] = {len + lo + hi};
        fc_value *idx = fc_sub(g, fc_iota(g, 1, od, 0, FC_I64), fc_scalar_int(g, lo));
        if (n->a.mode == FC_PAD_EDGE || len == 1) {
            idx = fc_max(g, fc_min(g, idx, fc_scalar_int(g, len - 1)), fc_scalar_int(g, 0));
        } else { /* reflect: |i|, then (n-1) - |(n-1) - |i|| */
            fc_value *last = fc_scalar_int(g, len - 1);
            idx = fc_sub(g, last, fc_abs(g, fc_sub(g, last, fc_abs(g, idx))));
        }
        x = fc_gather(g, x, idx, i);
    }
    return x;
}

/* floor(v) and ceil(v) of an f64 vector, as i64, from the truncating cast. */
static fc_value *round_i64(fc_graph *g, fc_value *v, bool up) {
    fc_value *t = cast(g, v, FC_I64), *tf = cast(g, t, FC_F64);
    return up ? fc_add(g, t, cast(g, fc_gt(g, v, tf), FC_I64)) : fc_sub(g, t, cast(g, fc_lt(g, v, tf), FC_I64));
}

/* resize, one spatial axis at a time: the source coordinate of every
 * output index (f64, from iota, the reference's arithmetic), then a gather
 * (nearest) or two gathers and a lerp (linear). */
static fc_value *resize_axis(fc_graph *g, fc_value *x, int axis, int64_t m, int64_t mode, int64_t coord, fc_dtype ct) {
    int64_t len = x->dims[axis];
    if (len == m) return x;
    fc_dim od[1] = {m};
    fc_value *o = fc_iota(g, 1, od, 0, FC_F64), *src;
    double scale = (double)m / (double)len;
    switch (coord) {
    case FC_COORD_ALIGN_CORNERS:
        src = m == 1 ? fc_full(g, 1, od, 0, FC_F64)
                     : fc_div(g, fc_mul(g, o, fc_scalar(g, (double)(len - 1))), fc_scalar(g, (double)(m - 1)));
        break;
    case FC_COORD_ASYMMETRIC: src = fc_div(g, o, fc_scalar(g, scale)); break;
    case FC_COORD_PYTORCH_HALF_PIXEL:
        if (m == 1) {
            src = fc_full(g, 1, od, 0, FC_F64);
            break;
        }
        /* fall through */
    default: src = fc_sub(g, fc_div(g, fc_add(g, o, fc_scalar(g, 0.5)), fc_scalar(g, scale)), fc_scalar(g, 0.5)); break;
    }
    fc_value *last = fc_scalar_int(g, len - 1), *zero = fc_scalar_int(g, 0);
    if (mode != FC_RESIZE_LINEAR) {
        fc_value *idx;
        switch (mode) {
        case FC_RESIZE_NEAREST_FLOOR: idx = round_i64(g, src, false); break;
        case FC_RESIZE_NEAREST_CEIL: idx = round_i64(g, src, true); break;
        case FC_RESIZE_NEAREST_HALF_UP: idx = round_i64(g, fc_add(g, src, fc_scalar(g, 0.5)), false); break;
        default: idx = round_i64(g, fc_sub(g, src, fc_scalar(g, 0.5)), true); break;
        }
        return fc_gather(g, x, fc_max(g, fc_min(g, idx, last), zero), axis);
    }
    src = fc_max(g, src, fc_scalar(g, 0.0));
    fc_value *lo = fc_min(g, cast(g, src, FC_I64), last), *hi = fc_min(g, fc_add(g, lo, fc_scalar_int(g, 1)), last);
    fc_value *f = fc_min(g, fc_sub(g, src, cast(g, lo, FC_F64)), fc_scalar(g, 1.0));
    fc_dim fd[FC_MAX_RANK];
    fd[0] = m;
    for (int i = axis + 1; i < x->rank; i++) fd[i - axis] = 1;
    f = fc_reshape(g, cast(g, f, ct), x->rank - axis, fd);
    fc_value *a = fc_gather(g, x, lo, axis), *b = fc_gather(g, x, hi, axis);
    return fc_add(g, a, fc_mul(g, fc_sub(g, b, a), f));
}

static fc_value *lower_resize(fc_graph *g, fc_node *n) {
    fc_value *x = n->in[0];
    fc_dtype ct = compute_dtype(x->dtype);
    if (n->a.mode == FC_RESIZE_LINEAR) x = cast(g, x, ct);
    for (int i = 2; i < x->rank; i++) x = resize_axis(g, x, i, n->a.list[i], n->a.mode, n->a.coord, ct);
    return x;
}

static fc_value *lower(fc_rewriter *rw, fc_node *n, void *arg) {
    const lowering *lw = arg;
    fc_graph *g = rw->g;
    fc_value *y;
    switch (n->op) {
    case FC_OP_CONV: y = lower_conv(g, n, lw); break;
    case FC_OP_CONV_TRANSPOSE: y = lower_conv_transpose(g, n); break;
    case FC_OP_MAX_POOL:
    case FC_OP_AVG_POOL: y = lower_pool(g, n); break;
    case FC_OP_GLOBAL_AVG_POOL: y = lower_global_avg_pool(g, n); break;
    case FC_OP_BATCH_NORM: y = lower_batch_norm(g, n); break;
    case FC_OP_PAD: y = lower_pad(g, n); break;
    case FC_OP_RESIZE: y = lower_resize(g, n); break;
    default: return NULL;
    }
    return g->status ? NULL : y;
}

static fc_status lower_all(fc_graph *g, lowering lw) {
    fc_status st = fc_pass_precheck(g, "lower_conv");
    return st ? st : fc_rw_lower_nodes(g, lower, &lw);
}

fc_status fc_pass_lower_conv(fc_graph *g) { return lower_all(g, (lowering){.library = false}); }
fc_status fc_pass_lower_conv_library(fc_graph *g, fc_precision p) {
    return lower_all(g, (lowering){.library = true, .precision = p});
}

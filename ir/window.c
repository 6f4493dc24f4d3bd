/* window.c - the geometry of the convolution family (conv, conv_transpose,
 * max_pool, avg_pool) and the result types of those ops and of
 * global_avg_pool, batch_norm, pad and resize.
 *
 * One function (fc_window_geom_of) reads a node's packed `window`
 * attribute and computes the output sizes, so that shape inference, the
 * reference interpreter and the lowering pass cannot disagree on them.
 *
 * The spatial dims must be static: an output size is arithmetic on the
 * input size, pads and strides that the IR's symbolic dims (products of
 * symbols) cannot express. The batch dim may be symbolic; the channels
 * must be static where the weight or the groups constrain them.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

#define LIMIT ((int64_t)1 << 30) /* strides, dilations, pads, kernel sizes: keeps the size arithmetic in range */

/* Positions in one window: the reference loops over them per output
 * element, and 2^24 keeps their product and the loops in range. */
#define MAX_WINDOW ((int64_t)1 << 24)

#define NAME(op) (fc_op_table[op].name)

/* How many ints per spatial dim the window of op holds. */
static int window_width(fc_op op) { return op == FC_OP_CONV || op == FC_OP_CONV_CL ? 4 : 5; }

bool fc_window_geom_of(fc_op op, const fc_attrs *a, int ns, const int64_t *in, const int64_t *kernel,
                       fc_window_geom *w, char *err, size_t nerr) {
    memset(w, 0, sizeof *w);
    w->ns = ns;
    if (ns < 1 || ns > FC_MAX_SPATIAL) {
        snprintf(err, nerr, "expects an input [N, C, D1 .. Dn] with n from 1 to %d", FC_MAX_SPATIAL);
        return false;
    }
    int width = window_width(op), extra = op == FC_OP_CONV_CL ? FC_CONV_EPI_LEN : 0;
    if (a->nlist != width * ns + extra) {
        snprintf(err, nerr, "window has %d entries; %d spatial dims need %d", a->nlist, ns, width * ns + extra);
        return false;
    }
    const int64_t *l = a->list;
    bool pool = op == FC_OP_MAX_POOL || op == FC_OP_AVG_POOL;
    if (pool) l += ns; /* the pools' window starts with the kernel sizes */
    for (int i = 0; i < ns; i++) {
        w->in[i] = in[i];
        w->k[i] = pool ? a->list[i] : kernel[i];
        w->s[i] = l[i];
        w->d[i] = l[ns + i];
        w->pb[i] = l[2 * ns + i];
        w->pe[i] = l[3 * ns + i];
        w->op[i] = op == FC_OP_CONV_TRANSPOSE ? l[4 * ns + i] : 0;
        if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0 || w->op[i] < 0) {
            snprintf(err, nerr, "kernel sizes, strides and dilations must be positive, pads not negative");
            return false;
        }
        if (w->k[i] > LIMIT || w->s[i] > LIMIT || w->d[i] > LIMIT || w->pb[i] > LIMIT || w->pe[i] > LIMIT ||
            w->op[i] > LIMIT || in[i] > LIMIT) {
            snprintf(err, nerr, "a kernel size, stride, dilation, pad or spatial size over 2^30");
            return false;
        }
        int64_t span = w->d[i] * (w->k[i] - 1) + 1, o;
        if (op == FC_OP_CONV_TRANSPOSE) {
            if (w->op[i] >= w->s[i] && w->op[i] >= w->d[i]) {
                snprintf(err, nerr, "output padding %lld must be smaller than the stride or the dilation",
                         (long long)w->op[i]);
                return false;
            }
            o = w->s[i] * (in[i] - 1) + w->op[i] + span - w->pb[i] - w->pe[i];
        } else {
            int64_t padded = in[i] + w->pb[i] + w->pe[i];
            if (padded < span) {
                snprintf(err, nerr, "the window (%lld) is larger than the padded input (%lld) in spatial dim %d",
                         (long long)span, (long long)padded, i);
                return false;
            }
            o = (padded - span) / w->s[i] + 1;
            /* ceil mode: one more window when some rows are left over, if
             * it starts inside the input or its leading pad */
            if (pool && a->ceil && (padded - span) % w->s[i] && o * w->s[i] < in[i] + w->pb[i]) o++;
        }
        if (o < 1) {
            snprintf(err, nerr, "the output would be empty in spatial dim %d", i);
            return false;
        }
        w->out[i] = o;
    }
    if (w->k[0] * (ns > 1 ? w->k[1] : 1) > MAX_WINDOW / (ns > 2 ? w->k[2] : 1)) {
        snprintf(err, nerr, "a window of more than %lld positions", (long long)MAX_WINDOW);
        return false;
    }
    return true;
}

int64_t fc_window_size(const fc_window_geom *w) {
    int64_t K = 1;
    for (int i = 0; i < w->ns; i++) K *= w->k[i];
    return K;
}

bool fc_conv_is_depthwise(const fc_node *n) {
    const fc_value *w = n->in[1];
    return n->a.groups > 1 && w->dims[1] == 1 && w->dims[0] == n->a.groups;
}

/* ---- result types -------------------------------------------------------- */

static bool fail(fc_graph *g, fc_op op, const char *msg) {
    fc_graph_error(g, FC_ERR_INPUT, "%s: %s", NAME(op), msg);
    return false;
}

static bool static_spatial(fc_graph *g, fc_op op, const fc_value *x, int64_t *in) {
    if (x->rank < 3 || x->rank > FC_MAX_SPATIAL + 2)
        return fail(g, op, "expects an input [N, C, D1 .. Dn] with n from 1 to 3");
    for (int i = 2; i < x->rank; i++) {
        if (fc_dim_is_sym(x->dims[i])) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: spatial dim %d of the input is symbolic; bind it", NAME(op), i);
            return false;
        }
        in[i - 2] = x->dims[i];
    }
    return true;
}

static bool float_operands(fc_graph *g, fc_op op, fc_value *const *in, int nin) {
    for (int i = 0; i < nin; i++) {
        if (!fc_dtype_is_float(in[i]->dtype)) return fail(g, op, "expects float operands");
        if (in[i]->dtype != in[0]->dtype) return fail(g, op, "expects operands of one dtype");
    }
    return true;
}

static bool geom(fc_graph *g, fc_op op, const fc_attrs *a, int ns, const int64_t *in, const int64_t *k, fc_window_geom *w) {
    char err[256];
    if (fc_window_geom_of(op, a, ns, in, k, w, err, sizeof err)) return true;
    return fail(g, op, err);
}

/* conv(x [N, C, D..], w [M, C/groups, k..], [b [M]]) and
 * conv_transpose(x [N, C, D..], w [C, M/groups, k..], [b [M]]). */
static bool infer_conv(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, int *rank, fc_dim *dims) {
    const fc_value *x = in[0], *wt = in[1];
    int64_t sp[FC_MAX_SPATIAL], k[FC_MAX_SPATIAL];
    if (!static_spatial(g, op, x, sp) || !float_operands(g, op, in, nin)) return false;
    if (wt->rank != x->rank) return fail(g, op, "the weight must have the input's rank");
    for (int i = 0; i < wt->rank; i++)
        if (fc_dim_is_sym(wt->dims[i])) return fail(g, op, "the weight's dims must be static");
    if (fc_dim_is_sym(x->dims[1])) return fail(g, op, "the input's channels (dim 1) must be static");
    int64_t G = a->groups, C = x->dims[1], M;
    if (G < 1 || C % G) return fail(g, op, "groups must be positive and divide the input's channels");
    if (op == FC_OP_CONV) {
        M = wt->dims[0];
        if (M % G || wt->dims[1] * G != C) {
            fc_graph_error(g, FC_ERR_INPUT, "conv: the weight [%lld, %lld, ..] does not fit %lld channels in %lld groups",
                           (long long)wt->dims[0], (long long)wt->dims[1], (long long)C, (long long)G);
            return false;
        }
    } else {
        if (wt->dims[0] != C) return fail(g, op, "the weight must be [C, M/groups, k..]");
        M = wt->dims[1] * G;
    }
    if (nin == 3 && (in[2]->rank != 1 || in[2]->dims[0] != M)) return fail(g, op, "the bias must be [M]");
    for (int i = 2; i < wt->rank; i++) k[i - 2] = wt->dims[i];
    fc_window_geom w;
    if (!geom(g, op, a, x->rank - 2, sp, k, &w)) return false;
    *rank = x->rank;
    dims[0] = x->dims[0];
    dims[1] = M;
    for (int i = 0; i < w.ns; i++) dims[i + 2] = w.out[i];
    return true;
}

static bool infer_pool(fc_graph *g, fc_op op, fc_value *x, const fc_attrs *a, int *rank, fc_dim *dims) {
    int64_t sp[FC_MAX_SPATIAL];
    if (!static_spatial(g, op, x, sp)) return false;
    if (op == FC_OP_AVG_POOL && !fc_dtype_is_float(x->dtype)) return fail(g, op, "expects a float input");
    fc_window_geom w;
    if (!geom(g, op, a, x->rank - 2, sp, NULL, &w)) return false;
    *rank = x->rank;
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int i = 0; i < w.ns; i++) dims[i + 2] = w.out[i];
    return true;
}

static bool infer_batch_norm(fc_graph *g, fc_value *const *in, int *rank, fc_dim *dims) {
    const fc_value *x = in[0];
    if (x->rank < 2) return fail(g, FC_OP_BATCH_NORM, "expects an input [N, C, ..]");
    if (!float_operands(g, FC_OP_BATCH_NORM, in, 5)) return false;
    for (int i = 1; i < 5; i++)
        if (in[i]->rank != 1 || in[i]->dims[0] != x->dims[1])
            return fail(g, FC_OP_BATCH_NORM, "scale, bias, mean and var must be [C], C the input's dim 1");
    *rank = x->rank;
    memcpy(dims, x->dims, sizeof(fc_dim) * (size_t)x->rank);
    return true;
}

static bool infer_pad(fc_graph *g, fc_value *x, const fc_attrs *a, int *rank, fc_dim *dims) {
    if (a->nlist != 2 * x->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "pad: pads has %d entries; rank %d needs %d", a->nlist, x->rank, 2 * x->rank);
        return false;
    }
    if (a->mode < 0 || a->mode > 2) return fail(g, FC_OP_PAD, "mode must be 0 (constant), 1 (reflect) or 2 (edge)");
    for (int i = 0; i < x->rank; i++) {
        int64_t lo = a->list[i], hi = a->list[x->rank + i];
        if (lo == 0 && hi == 0) {
            dims[i] = x->dims[i];
            continue;
        }
        if (fc_dim_is_sym(x->dims[i])) {
            fc_graph_error(g, FC_ERR_INPUT, "pad: dim %d is symbolic and padded; bind it", i);
            return false;
        }
        if (lo > LIMIT || hi > LIMIT || lo < -LIMIT || hi < -LIMIT) return fail(g, FC_OP_PAD, "a pad over 2^30");
        int64_t n = x->dims[i], o = n + lo + hi;
        if (o < 0) return fail(g, FC_OP_PAD, "negative pads crop more than the whole dim");
        if (a->mode != 0 && o > 0 && n == 0) return fail(g, FC_OP_PAD, "reflect and edge pads of an empty dim");
        if (a->mode == 1 && (lo >= n || hi >= n) && n > 1)
            return fail(g, FC_OP_PAD, "reflect pads must be smaller than the dim");
        dims[i] = o;
    }
    *rank = x->rank;
    return true;
}

static bool infer_resize(fc_graph *g, fc_value *x, const fc_attrs *a, int *rank, fc_dim *dims) {
    int64_t sp[FC_MAX_SPATIAL];
    if (!static_spatial(g, FC_OP_RESIZE, x, sp)) return false;
    if (!fc_dtype_is_float(x->dtype)) return fail(g, FC_OP_RESIZE, "expects a float input");
    if (a->nlist != x->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "resize: shape has %d entries for rank %d", a->nlist, x->rank);
        return false;
    }
    if (a->mode < 0 || a->mode > 4) return fail(g, FC_OP_RESIZE, "mode must be 0 to 4");
    if (a->coord < 0 || a->coord > 3) return fail(g, FC_OP_RESIZE, "coord must be 0 to 3");
    if (a->list[0] != x->dims[0] || a->list[1] != x->dims[1])
        return fail(g, FC_OP_RESIZE, "shape must keep the input's dims 0 and 1 (N and C)");
    for (int i = 2; i < x->rank; i++)
        if (a->list[i] < 1 || a->list[i] > LIMIT) return fail(g, FC_OP_RESIZE, "spatial sizes must be from 1 to 2^30");
    *rank = x->rank;
    for (int i = 0; i < x->rank; i++) dims[i] = a->list[i];
    return true;
}

/* conv_cl(x [N, D.., C], w [M, k.., C/groups], [bias [M]], [residual
 * [N, O.., M]]): channels-last, 2-D (ops.def). What the convolution
 * library takes: f32/f16/bf16 operands of one dtype, `to` theirs or f32,
 * bias and residual of dtype `to`. */
static bool infer_conv_cl(fc_graph *g, fc_value *const *in, int nin, const fc_attrs *a, fc_dtype *dt, int *rank,
                          fc_dim *dims) {
    fc_op op = FC_OP_CONV_CL;
    const fc_value *x = in[0], *wt = in[1];
    int r = x->rank;
    if (r != 4 || wt->rank != 4) return fail(g, op, "expects an input [N, H, W, C] and a weight [M, kh, kw, C/groups]");
    if (x->dtype != wt->dtype || (x->dtype != FC_F32 && x->dtype != FC_F16 && x->dtype != FC_BF16))
        return fail(g, op, "expects f32, f16 or bf16 input and weight of one dtype");
    if ((unsigned)a->dtype >= FC_DTYPE_COUNT || (a->dtype != x->dtype && a->dtype != FC_F32))
        return fail(g, op, "to must be the operands' dtype or f32");
    for (int i = 1; i < r; i++)
        if (fc_dim_is_sym(x->dims[i])) return fail(g, op, "the input's spatial dims and channels must be static");
    for (int i = 0; i < r; i++)
        if (fc_dim_is_sym(wt->dims[i])) return fail(g, op, "the weight's dims must be static");
    int64_t G = a->groups, C = x->dims[r - 1], M = wt->dims[0];
    if (G < 1 || C % G || M % G || wt->dims[r - 1] * G != C)
        return fail(g, op, "the weight's channels and the groups do not fit the input's channels");
    if (a->nlist != 4 * (r - 2) + FC_CONV_EPI_LEN) return fail(g, op, "window must have 11 entries (2-D)");
    const int64_t *e = a->list + 4 * (r - 2);
    if ((e[FC_CONV_BIAS] != 0 && e[FC_CONV_BIAS] != 1) || (e[FC_CONV_RESIDUAL] != 0 && e[FC_CONV_RESIDUAL] != 1) ||
        e[FC_CONV_ACT] < 0 || e[FC_CONV_ACT] > 2)
        return fail(g, op, "the epilogue flags are 0 or 1 and act 0 to 2");
    if (nin != 2 + (int)e[FC_CONV_BIAS] + (int)e[FC_CONV_RESIDUAL])
        return fail(g, op, "the window's bias and residual flags do not match the operands");
    int64_t sp[FC_MAX_SPATIAL], k[FC_MAX_SPATIAL];
    for (int i = 0; i < r - 2; i++) {
        sp[i] = x->dims[i + 1];
        k[i] = wt->dims[i + 1];
    }
    fc_window_geom w;
    if (!geom(g, op, a, r - 2, sp, k, &w)) return false;
    *dt = a->dtype;
    *rank = r;
    dims[0] = x->dims[0];
    for (int i = 0; i < w.ns; i++) dims[i + 1] = w.out[i];
    dims[r - 1] = M;
    int next = 2;
    if (e[FC_CONV_BIAS]) {
        const fc_value *b = in[next++];
        if (b->rank != 1 || b->dims[0] != M || b->dtype != a->dtype) return fail(g, op, "the bias must be [M] of dtype `to`");
    }
    if (e[FC_CONV_RESIDUAL]) {
        const fc_value *res = in[next++];
        bool same = res->rank == r && res->dtype == a->dtype;
        for (int i = 0; same && i < r; i++) same = res->dims[i] == dims[i];
        if (!same) return fail(g, op, "the residual must have the result's shape and dtype `to`");
    }
    return true;
}

bool fc_infer_window_op(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, fc_dtype *dt, int *rank,
                        fc_dim *dims) {
    *dt = in[0]->dtype;
    switch (op) {
    case FC_OP_CONV:
    case FC_OP_CONV_TRANSPOSE: return infer_conv(g, op, in, nin, a, rank, dims);
    case FC_OP_MAX_POOL:
    case FC_OP_AVG_POOL: return infer_pool(g, op, in[0], a, rank, dims);
    case FC_OP_GLOBAL_AVG_POOL: {
        int64_t sp[FC_MAX_SPATIAL];
        if (!static_spatial(g, op, in[0], sp)) return false;
        if (!fc_dtype_is_float(in[0]->dtype)) return fail(g, op, "expects a float input");
        *rank = in[0]->rank;
        dims[0] = in[0]->dims[0];
        dims[1] = in[0]->dims[1];
        for (int i = 2; i < *rank; i++) dims[i] = 1;
        return true;
    }
    case FC_OP_BATCH_NORM: return infer_batch_norm(g, in, rank, dims);
    case FC_OP_PAD: return infer_pad(g, in[0], a, rank, dims);
    case FC_OP_RESIZE: return infer_resize(g, in[0], a, rank, dims);
    case FC_OP_CONV_CL: return infer_conv_cl(g, in, nin, a, dt, rank, dims);
    default: FC_UNREACHABLE("fc_infer_window_op: not a window op");
    }
}

/* builders_conv.c - the public builders of the convolution family, pad and
 * resize: fc_window (zeros meaning the defaults, auto_pad resolved against
 * the input's sizes) packed into the ops' `window` attribute (ops.def). */
#include "ir.h"

#include <string.h>

static fc_value *result(fc_graph *g, fc_node *n) { return n ? n->out[0] : &g->poison_value; }

static int64_t or_one(int64_t v) { return v ? v : 1; }

/* The window attribute of op over x (weight w for the convolutions) into
 * list; false after an error. */
static bool pack_window(fc_graph *g, fc_op op, const fc_value *x, const fc_value *w, const fc_window *win, int64_t *list,
                        fc_attrs *a) {
    if (g->status) return false;
    if (!win || !x || (op != FC_OP_MAX_POOL && op != FC_OP_AVG_POOL && !w)) {
        fc_graph_error(g, FC_ERR_USAGE, "%s: needs an input%s and a window", fc_op_table[op].name,
                       op == FC_OP_CONV || op == FC_OP_CONV_TRANSPOSE ? ", a weight" : "");
        return false;
    }
    int ns = x->rank - 2;
    if (ns < 1 || ns > FC_MAX_SPATIAL || (w && w->rank != x->rank)) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: expects an input [N, C, D1 .. Dn] with n from 1 to 3%s",
                       fc_op_table[op].name, w ? " and a weight of its rank" : "");
        return false;
    }
    bool pool = op == FC_OP_MAX_POOL || op == FC_OP_AVG_POOL;
    int64_t *l = list;
    if (pool)
        for (int i = 0; i < ns; i++) *l++ = win->kernel[i];
    for (int i = 0; i < ns; i++) l[i] = or_one(win->stride[i]);
    for (int i = 0; i < ns; i++) l[ns + i] = or_one(win->dilation[i]);
    for (int i = 0; i < ns; i++) {
        int64_t pb = win->pad_begin[i], pe = win->pad_end[i];
        if (win->auto_pad == FC_PAD_VALID) pb = pe = 0;
        if (win->auto_pad == FC_PAD_SAME_UPPER || win->auto_pad == FC_PAD_SAME_LOWER) {
            /* the pads that make the output ceil(in / s) (in * s for a
             * transposed convolution); a symbolic dim is reported by
             * inference */
            int64_t in = fc_dim_is_sym(x->dims[i + 2]) ? 1 : x->dims[i + 2], s = l[i];
            int64_t k = pool ? win->kernel[i] : w->dims[i + 2], span = l[ns + i] * (k - 1) + 1, total;
            if (op == FC_OP_CONV_TRANSPOSE) total = s * (in - 1) + win->output_padding[i] + span - in * s;
            else total = ((in + s - 1) / s - 1) * s + span - in;
            if (total < 0) total = 0;
            pb = win->auto_pad == FC_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            pe = total - pb;
        }
        l[2 * ns + i] = pb;
        l[3 * ns + i] = pe;
        if (op == FC_OP_CONV_TRANSPOSE) l[4 * ns + i] = win->output_padding[i];
    }
    fc_attrs_defaults(op, a);
    a->list = list;
    a->nlist = (op == FC_OP_CONV ? 4 : 5) * ns;
    a->groups = or_one(win->groups);
    a->ceil = win->ceil_mode;
    a->count_pad = win->count_include_pad;
    return true;
}

static fc_value *window_op(fc_graph *g, fc_op op, fc_value *x, fc_value *w, fc_value *b, const fc_window *win) {
    if (!g) return NULL;
    int64_t list[5 * FC_MAX_SPATIAL];
    fc_attrs a;
    if (!pack_window(g, op, x, w, win, list, &a)) return &g->poison_value;
    fc_value *in[3] = {x, w, b};
    bool pool = op == FC_OP_MAX_POOL || op == FC_OP_AVG_POOL;
    return result(g, fc_build(g, op, in, pool ? 1 : b ? 3 : 2, &a));
}

fc_value *fc_conv(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, const fc_window *win) {
    return window_op(g, FC_OP_CONV, x, w, b, win);
}
fc_value *fc_conv_transpose(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, const fc_window *win) {
    return window_op(g, FC_OP_CONV_TRANSPOSE, x, w, b, win);
}
fc_value *fc_max_pool(fc_graph *g, fc_value *x, const fc_window *win) { return window_op(g, FC_OP_MAX_POOL, x, NULL, NULL, win); }
fc_value *fc_avg_pool(fc_graph *g, fc_value *x, const fc_window *win) { return window_op(g, FC_OP_AVG_POOL, x, NULL, NULL, win); }

fc_value *fc_global_avg_pool(fc_graph *g, fc_value *x) {
    if (!g) return NULL;
    return result(g, fc_build(g, FC_OP_GLOBAL_AVG_POOL, &x, 1, NULL));
}

fc_value *fc_batch_norm(fc_graph *g, fc_value *x, fc_value *scale, fc_value *bias, fc_value *mean, fc_value *var,
                        double eps) {
    if (!g) return NULL;
    fc_attrs a;
    fc_attrs_defaults(FC_OP_BATCH_NORM, &a);
    a.eps = eps;
    fc_value *in[5] = {x, scale, bias, mean, var};
    return result(g, fc_build(g, FC_OP_BATCH_NORM, in, 5, &a));
}

fc_value *fc_pad(fc_graph *g, fc_value *x, const int64_t *pads, fc_pad_mode mode, double value) {
    if (!g) return NULL;
    if (g->status) return &g->poison_value;
    if (!x || !pads) {
        fc_graph_error(g, FC_ERR_USAGE, "pad: needs an input and pads");
        return &g->poison_value;
    }
    fc_attrs a;
    fc_attrs_defaults(FC_OP_PAD, &a);
    a.list = (int64_t *)pads; /* fc_build copies the list */
    a.nlist = 2 * x->rank;
    a.mode = mode;
    a.value = value;
    return result(g, fc_build(g, FC_OP_PAD, &x, 1, &a));
}

fc_value *fc_resize(fc_graph *g, fc_value *x, int rank, const fc_dim *shape, fc_resize_mode mode, fc_resize_coord coord) {
    if (!g) return NULL;
    if (g->status) return &g->poison_value;
    if (!shape || rank < 0 || rank > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_USAGE, "resize: bad shape (%d entries)", rank);
        return &g->poison_value;
    }
    fc_attrs a;
    fc_attrs_defaults(FC_OP_RESIZE, &a);
    int64_t list[FC_MAX_RANK];
    for (int i = 0; i < rank; i++) list[i] = shape[i];
    a.list = list;
    a.nlist = rank;
    a.mode = mode;
    a.coord = coord;
    return result(g, fc_build(g, FC_OP_RESIZE, &x, 1, &a));
}

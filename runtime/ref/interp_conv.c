/*
 * interp_conv.c - the reference interpreter's convolutions, pools, batch
 * norm, pad and resize, written as their definitions: direct loops over
 * NCHW, every window position checked against the input's bounds (the
 * padding is never materialized), sums in float64.
 *
 * The geometry comes from fc_window_geom_of (ir/window.c), the function
 * shape inference uses, on the concrete shapes.
 */
#include "interp_impl.h"

/* The window geometry of the current node over x (and weight w). */
static fc_status geom_of(interp *ip, const ibuf *x, const ibuf *w, fc_window_geom *g)
{
    char err[256];
    int ns = x->rank - 2;
    const int64_t *k = w ? w->shape + 2 : NULL;
    if (!fc_window_geom_of(ip->node->op, &ip->node->a, ns, x->shape + 2, k, g, err, sizeof err))
        return fc_ref_err(ip, FC_ERR_INPUT, "%s", err);
    return FC_OK;
}

/* Spatial index: position `flat` of shape dims[0..ns) into idx. */
static void unflatten(int64_t flat, int ns, const int64_t *dims, int64_t *idx)
{
    for (int i = ns - 1; i >= 0; i--) {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
}

/* Flat offset of spatial index idx in dims, or -1 if outside. */
static int64_t flatten_in(int ns, const int64_t *dims, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < ns; i++) {
        if (idx[i] < 0 || idx[i] >= dims[i])
            return -1;
        off = off * dims[i] + idx[i];
    }
    return off;
}

/* Where tap q of the window at pos lands: at[i] = pos[i]*s - pb + k[i]*d
 * (an output position of conv and the pools, an input one of conv_transpose). */
static void tap_of(const fc_window_geom *g, const int64_t *pos, int64_t q, int64_t *at)
{
    int64_t kk[FC_MAX_SPATIAL];
    unflatten(q, g->ns, g->k, kk);
    for (int i = 0; i < g->ns; i++)
        at[i] = pos[i] * g->s[i] - g->pb[i] + kk[i] * g->d[i];
}

static fc_status set_out(interp *ip, int64_t n, int64_t c, const fc_window_geom *g)
{
    int64_t shape[FC_MAX_RANK] = {n, c};
    for (int i = 0; i < g->ns; i++)
        shape[i + 2] = g->out[i];
    return fc_ref_set_result(ip, 0, g->ns + 2, shape);
}

/* conv: y[n, m, o] = b[m] + sum over c in m's group, kernel offsets k of
 * x[n, c, o*s - pb + k*d] * w[m, c, k]. */
fc_status fc_ref_run_conv(interp *ip)
{
    const ibuf *x = operand(ip, 0), *w = operand(ip, 1);
    const ibuf *b = ip->node->nin > 2 ? operand(ip, 2) : NULL;
    fc_window_geom g;
    fc_status st = geom_of(ip, x, w, &g);
    if (st == FC_OK)
        st = set_out(ip, x->shape[0], w->shape[0], &g);
    if (st != FC_OK)
        return st;
    int ns = g.ns;
    int64_t N = x->shape[0], C = x->shape[1], M = w->shape[0], G = ip->node->a.groups;
    int64_t Cg = C / G, Mg = M / G, P = prod(g.out, 0, ns), S = prod(g.in, 0, ns), K = fc_window_size(&g);
    double *y = result(ip, 0)->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t p = 0; p < P; p++) {
                int64_t o[FC_MAX_SPATIAL], at[FC_MAX_SPATIAL];
                unflatten(p, ns, g.out, o);
                double acc = b ? b->data[m] : 0.0;
                for (int64_t cg = 0; cg < Cg; cg++) {
                    int64_t c = m / Mg * Cg + cg;
                    for (int64_t q = 0; q < K; q++) {
                        tap_of(&g, o, q, at);
                        int64_t off = flatten_in(ns, g.in, at);
                        if (off >= 0)
                            acc += x->data[(n * C + c) * S + off] * w->data[(m * Cg + cg) * K + q];
                    }
                }
                y[(n * M + m) * P + p] = acc;
            }
    return FC_OK;
}

/* conv_transpose: every input element x[n, c, i] adds x * w[c, mg, k] to
 * y[n, g*Mg + mg, i*s - pb + k*d] (c in group g). */
fc_status fc_ref_run_conv_transpose(interp *ip)
{
    const ibuf *x = operand(ip, 0), *w = operand(ip, 1);
    const ibuf *b = ip->node->nin > 2 ? operand(ip, 2) : NULL;
    int64_t G = ip->node->a.groups, Mg = w->shape[1];
    fc_window_geom g;
    fc_status st = geom_of(ip, x, w, &g);
    if (st == FC_OK)
        st = set_out(ip, x->shape[0], Mg * G, &g);
    if (st != FC_OK)
        return st;
    int ns = g.ns;
    int64_t N = x->shape[0], C = x->shape[1], M = Mg * G, Cg = C / G;
    int64_t P = prod(g.out, 0, ns), S = prod(g.in, 0, ns), K = fc_window_size(&g);
    double *y = result(ip, 0)->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t p = 0; p < P; p++)
                y[(n * M + m) * P + p] = b ? b->data[m] : 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < S; p++) {
                int64_t i[FC_MAX_SPATIAL], at[FC_MAX_SPATIAL];
                unflatten(p, ns, g.in, i);
                double xv = x->data[(n * C + c) * S + p];
                for (int64_t mg = 0; mg < Mg; mg++) {
                    int64_t m = c / Cg * Mg + mg;
                    for (int64_t q = 0; q < K; q++) {
                        tap_of(&g, i, q, at);
                        int64_t off = flatten_in(ns, g.out, at);
                        if (off >= 0)
                            y[(n * M + m) * P + off] += xv * w->data[(c * Mg + mg) * K + q];
                    }
                }
            }
    return FC_OK;
}

/* max_pool and avg_pool: over the window positions inside the input. The
 * average divides by their count, or with count_pad by the positions
 * inside the input and its explicit pads (a ceil-mode window's overhang
 * past the end pad never counts, as in ONNX and PyTorch). */
fc_status fc_ref_run_pool(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    bool is_max = ip->node->op == FC_OP_MAX_POOL, count_pad = ip->node->a.count_pad;
    fc_window_geom g;
    fc_status st = geom_of(ip, x, NULL, &g);
    if (st == FC_OK)
        st = set_out(ip, x->shape[0], x->shape[1], &g);
    if (st != FC_OK)
        return st;
    int ns = g.ns;
    int64_t NC = x->shape[0] * x->shape[1], P = prod(g.out, 0, ns), S = prod(g.in, 0, ns), K = fc_window_size(&g);
    double *y = result(ip, 0)->data;
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t p = 0; p < P; p++) {
            int64_t o[FC_MAX_SPATIAL], at[FC_MAX_SPATIAL];
            unflatten(p, ns, g.out, o);
            double acc = is_max ? -INFINITY : 0.0, count = 0;
            for (int64_t q = 0; q < K; q++) {
                tap_of(&g, o, q, at);
                bool in_pads = true;
                for (int i = 0; i < ns; i++)
                    in_pads = in_pads && at[i] >= -g.pb[i] && at[i] < g.in[i] + g.pe[i];
                int64_t off = flatten_in(ns, g.in, at);
                if (off >= 0) {
                    double v = x->data[nc * S + off];
                    acc = is_max ? (v > acc || isnan(v) ? v : acc) : acc + v;
                }
                if (off >= 0 || (count_pad && in_pads))
                    count++;
            }
            y[nc * P + p] = is_max ? acc : acc / count;
        }
    return FC_OK;
}

fc_status fc_ref_run_global_avg_pool(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    int64_t shape[FC_MAX_RANK] = {x->shape[0], x->shape[1]};
    for (int i = 2; i < x->rank; i++)
        shape[i] = 1;
    fc_status st = fc_ref_set_result(ip, 0, x->rank, shape);
    if (st != FC_OK)
        return st;
    int64_t NC = x->shape[0] * x->shape[1], S = prod(x->shape, 2, x->rank);
    double *y = result(ip, 0)->data;
    for (int64_t nc = 0; nc < NC; nc++) {
        double acc = 0;
        for (int64_t p = 0; p < S; p++)
            acc += x->data[nc * S + p];
        y[nc] = acc / (double)S;
    }
    return FC_OK;
}

fc_status fc_ref_run_batch_norm(interp *ip)
{
    const ibuf *x = operand(ip, 0), *scale = operand(ip, 1), *bias = operand(ip, 2);
    const ibuf *mean = operand(ip, 3), *var = operand(ip, 4);
    fc_status st = fc_ref_set_result(ip, 0, x->rank, x->shape);
    if (st != FC_OK)
        return st;
    int64_t N = x->shape[0], C = x->shape[1], S = prod(x->shape, 2, x->rank);
    double eps = ip->node->a.eps, *y = result(ip, 0)->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double r = 1.0 / sqrt(var->data[c] + eps);
            for (int64_t p = 0; p < S; p++) {
                int64_t i = (n * C + c) * S + p;
                y[i] = (x->data[i] - mean->data[c]) * r * scale->data[c] + bias->data[c];
            }
        }
    return FC_OK;
}

/* The source index along a dim of size n for padded index j (j already
 * shifted by the begin pad), or -1 for the constant. */
static int64_t pad_source(int64_t j, int64_t n, int64_t mode)
{
    if (j >= 0 && j < n)
        return j;
    if (mode == FC_PAD_CONSTANT)
        return -1;
    if (mode == FC_PAD_EDGE)
        return j < 0 ? 0 : n - 1;
    if (n == 1)
        return 0;
    /* reflect, without repeating the edge: -1 -> 1, n -> n - 2 */
    return j < 0 ? -j : 2 * (n - 1) - j;
}

fc_status fc_ref_run_pad(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int r = x->rank;
    int64_t shape[FC_MAX_RANK];
    for (int i = 0; i < r; i++)
        shape[i] = x->shape[i] + a->list[i] + a->list[r + i];
    fc_status st = fc_ref_set_result(ip, 0, r, shape);
    if (st != FC_OK)
        return st;
    ibuf *out = result(ip, 0);
    for (int64_t e = 0; e < out->numel; e++) {
        int64_t rest = e, off = 0;
        bool constant = false;
        int64_t idx[FC_MAX_RANK];
        for (int i = r - 1; i >= 0; i--) {
            idx[i] = rest % shape[i];
            rest /= shape[i];
        }
        for (int i = 0; i < r; i++) {
            int64_t j = pad_source(idx[i] - a->list[i], x->shape[i], a->mode);
            if (j < 0)
                constant = true;
            off = off * x->shape[i] + (j < 0 ? 0 : j);
        }
        out->data[e] = constant ? a->value : x->data[off];
    }
    return FC_OK;
}

/* The source coordinate of output index o along a dim scaled from n to m. */
static double resize_source(int64_t o, int64_t n, int64_t m, int64_t coord)
{
    double scale = (double)m / (double)n;
    switch (coord) {
    case FC_COORD_ALIGN_CORNERS: return m == 1 ? 0.0 : (double)o * (double)(n - 1) / (double)(m - 1);
    case FC_COORD_ASYMMETRIC: return (double)o / scale;
    case FC_COORD_PYTORCH_HALF_PIXEL: return m > 1 ? ((double)o + 0.5) / scale - 0.5 : 0.0;
    default: return ((double)o + 0.5) / scale - 0.5; /* half_pixel */
    }
}

static int64_t clamp_index(double v, int64_t n)
{
    return v < 0 ? 0 : v > (double)(n - 1) ? n - 1 : (int64_t)v;
}

/* The nearest source index by the rounding of mode. */
static int64_t resize_nearest(double src, int64_t n, int64_t mode)
{
    double r;
    switch (mode) {
    case FC_RESIZE_NEAREST_FLOOR: r = floor(src); break;
    case FC_RESIZE_NEAREST_CEIL: r = ceil(src); break;
    case FC_RESIZE_NEAREST_HALF_UP: r = floor(src + 0.5); break;
    default: r = ceil(src - 0.5); break; /* round half down */
    }
    return clamp_index(r, n);
}

/* resize: nearest picks one source element per dim; linear interpolates
 * the 2^ns corners around the source point, clamped to the input. */
fc_status fc_ref_run_resize(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int r = x->rank, ns = r - 2;
    int64_t shape[FC_MAX_RANK];
    for (int i = 0; i < r; i++)
        shape[i] = i < 2 ? x->shape[i] : a->list[i];
    fc_status st = fc_ref_set_result(ip, 0, r, shape);
    if (st != FC_OK)
        return st;
    const int64_t *in = x->shape + 2, *os = shape + 2;
    int64_t NC = x->shape[0] * x->shape[1], P = prod(os, 0, ns), S = prod(in, 0, ns);
    double *y = result(ip, 0)->data;
    for (int64_t p = 0; p < P; p++) {
        int64_t o[FC_MAX_SPATIAL], lo[FC_MAX_SPATIAL], hi[FC_MAX_SPATIAL];
        double f[FC_MAX_SPATIAL];
        unflatten(p, ns, os, o);
        for (int i = 0; i < ns; i++) {
            double src = resize_source(o[i], in[i], os[i], a->coord);
            if (a->mode != FC_RESIZE_LINEAR) {
                lo[i] = hi[i] = resize_nearest(src, in[i], a->mode);
                f[i] = 0;
                continue;
            }
            if (src < 0)
                src = 0;
            lo[i] = clamp_index(floor(src), in[i]);
            hi[i] = lo[i] + 1 < in[i] ? lo[i] + 1 : in[i] - 1;
            f[i] = src - (double)lo[i];
            if (f[i] > 1)
                f[i] = 1;
        }
        for (int64_t nc = 0; nc < NC; nc++) {
            double acc = 0;
            for (int corner = 0; corner < (1 << ns); corner++) {
                double wgt = 1;
                int64_t at[FC_MAX_SPATIAL];
                for (int i = 0; i < ns; i++) {
                    bool up = (corner >> i) & 1;
                    at[i] = up ? hi[i] : lo[i];
                    wgt *= up ? f[i] : 1 - f[i];
                }
                if (wgt != 0)
                    acc += wgt * x->data[nc * S + flatten_in(ns, in, at)];
            }
            y[nc * P + p] = acc;
        }
    }
    return FC_OK;
}

/* conv_cl (ops.def): the convolution of channels-last x [N, H.., C] by w
 * [M, k.., C/G], then its epilogue in float64 (bias, residual, the
 * activation), rounded once by run_node: the one rounding the library's
 * fused call makes. */
fc_status fc_ref_run_conv_cl(interp *ip)
{
    const fc_node *nd = ip->node;
    const ibuf *x = operand(ip, 0), *w = operand(ip, 1);
    const int64_t *e = nd->a.list + nd->a.nlist - FC_CONV_EPI_LEN;
    int next = 2;
    const ibuf *b = e[FC_CONV_BIAS] ? operand(ip, next++) : NULL;
    const ibuf *res = e[FC_CONV_RESIDUAL] ? operand(ip, next++) : NULL;
    int r = x->rank, ns = r - 2;
    char err[256];
    fc_window_geom g;
    if (!fc_window_geom_of(nd->op, &nd->a, ns, x->shape + 1, w->shape + 1, &g, err, sizeof err))
        return fc_ref_err(ip, FC_ERR_INPUT, "%s", err);
    int64_t N = x->shape[0], C = x->shape[r - 1], M = w->shape[0], G = nd->a.groups;
    int64_t Cg = C / G, Mg = M / G, P = prod(g.out, 0, ns), S = prod(g.in, 0, ns), K = fc_window_size(&g);
    int64_t shape[FC_MAX_RANK] = {N};
    for (int i = 0; i < ns; i++)
        shape[i + 1] = g.out[i];
    shape[r - 1] = M;
    fc_status st = fc_ref_set_result(ip, 0, r, shape);
    if (st != FC_OK)
        return st;
    if (res && res->numel != result(ip, 0)->numel)
        return fc_ref_err(ip, FC_ERR_INPUT, "the residual's shape differs from the result's at run time");
    double *y = result(ip, 0)->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < P; p++) {
            int64_t o[FC_MAX_SPATIAL], at[FC_MAX_SPATIAL];
            unflatten(p, ns, g.out, o);
            for (int64_t m = 0; m < M; m++) {
                double acc = 0.0;
                for (int64_t q = 0; q < K; q++) {
                    tap_of(&g, o, q, at);
                    int64_t off = flatten_in(ns, g.in, at);
                    if (off < 0)
                        continue;
                    for (int64_t cg = 0; cg < Cg; cg++) {
                        int64_t c = m / Mg * Cg + cg;
                        acc += x->data[(n * S + off) * C + c] * w->data[(m * K + q) * Cg + cg];
                    }
                }
                int64_t at_y = (n * P + p) * M + m;
                if (b)
                    acc += b->data[m];
                if (res)
                    acc += res->data[at_y];
                if (e[FC_CONV_ACT] == 1) /* as gemm's: 1 relu, 2 gelu_tanh */
                    acc = scalar_op(FC_OP_RELU, acc, 0, 0);
                else if (e[FC_CONV_ACT] == 2)
                    acc = scalar_op(FC_OP_GELU_TANH, acc, 0, 0);
                y[at_y] = acc;
            }
        }
    return FC_OK;
}

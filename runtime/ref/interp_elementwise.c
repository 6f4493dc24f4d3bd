/*
 * interp_elementwise.c - the reference interpreter's elementwise ops
 * (unary, binary, compare, where, cast), reductions and normalizations
 * (softmax, layernorm, rmsnorm), all in float64.
 */
#include "interp_impl.h"

/* ================================================================ */
/* Elementwise ops: unary, binary, compare, where, cast.             */
/* ================================================================ */

/*
 * The dtype a weak scalar takes next to a tensor of dtype `other`, as in
 * PyTorch: a float tensor's dtype; an integer tensor's for an integer
 * scalar, else f32; a bool tensor gives i64 for an integer scalar.
 */
static fc_dtype weak_dtype(fc_dtype other, const fc_value *w)
{
    if (fc_dtype_is_float(other))
        return other;
    if (w->weak_int)
        return other == FC_BOOL ? FC_I64 : other;
    return FC_F32;
}

/*
 * The dtype an elementwise node computes in: its operands are converted to
 * it first (as PyTorch converts operands to the common dtype). For most ops
 * that is the result's dtype. Compares give bool, so their common dtype is
 * the promotion of the operands; cast converts nothing.
 */
static fc_dtype compute_dtype(const fc_node *n)
{
    switch (n->op) {
    case FC_OP_EQ: case FC_OP_NE: case FC_OP_LT:
    case FC_OP_LE: case FC_OP_GT: case FC_OP_GE: {
        const fc_value *a = n->in[0], *b = n->in[1];
        if (a->weak && b->weak)
            return FC_F64; /* nothing to round against */
        if (a->weak)
            return weak_dtype(b->dtype, a);
        if (b->weak)
            return weak_dtype(a->dtype, b);
        return fc_promote(a->dtype, b->dtype);
    }
    case FC_OP_CAST:
        return n->in[0]->dtype;
    default:
        return n->out[0]->dtype;
    }
}

/* Unary, binary, compare, where and cast: broadcast every operand to the
 * result shape and apply scalar_op element by element. */
fc_status fc_ref_run_elementwise(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *in[3];
    int64_t strides[3][FC_MAX_RANK];
    bool convert[3];
    fc_dtype cdt = compute_dtype(n);
    FC_ASSERT(n->nin >= 1 && n->nin <= 3);

    int rank = 0;
    int64_t shape[FC_MAX_RANK];
    for (int k = 0; k < n->nin; k++) {
        in[k] = operand(ip, k);
        /* where's condition is read as bool, not converted. A weak scalar
         * is always rounded: its exact value is not of any dtype yet. */
        convert[k] = !(n->op == FC_OP_WHERE && k == 0) &&
                     (n->in[k]->weak || n->in[k]->dtype != cdt);
        int64_t next[FC_MAX_RANK];
        int nr;
        char s1[256], s2[256];
        if (!fc_ref_bcast_shape(rank, shape, in[k]->rank, in[k]->shape, &nr, next))
            return fc_ref_err(ip, FC_ERR_INPUT, "operand shapes do not broadcast at run time (%s with %s)",
                              fc_ref_shape_str(rank, shape, s1, sizeof s1),
                              fc_ref_shape_str(in[k]->rank, in[k]->shape, s2, sizeof s2));
        rank = nr;
        memcpy(shape, next, sizeof next);
    }
    fc_status st = fc_ref_set_result(ip, 0, rank, shape);
    if (st != FC_OK)
        return st;
    for (int k = 0; k < n->nin; k++)
        fc_ref_bcast_strides(in[k]->rank, in[k]->shape, rank, strides[k]);

    ibuf *out = result(ip, 0);
    for (int64_t i = 0; i < out->numel; i++) {
        double x[3] = {0, 0, 0};
        for (int k = 0; k < n->nin; k++) {
            x[k] = in[k]->data[offset_of(i, rank, shape, strides[k])];
            if (convert[k])
                x[k] = ref_round(ip, x[k], cdt);
        }
        out->data[i] = scalar_op(n->op, x[0], x[1], x[2]);
    }
    return FC_OK;
}

/* ================================================================ */
/* Reductions and normalizations.                                    */
/* ================================================================ */

fc_status fc_ref_run_reduce(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x = operand(ip, 0);
    bool red[FC_MAX_RANK] = {false};

    /* An empty axes list reduces every axis. A scalar has nothing to reduce
     * but accepts axis 0 / -1, as PyTorch does. */
    int r = x->rank;
    for (int i = 0; i < n->a.nlist; i++) {
        int ax;
        if (!fc_ref_norm_axis(n->a.list[i], r > 0 ? r : 1, &ax))
            return fc_ref_err(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d",
                              (long long)n->a.list[i], r);
        if (r > 0)
            red[ax] = true;
    }
    if (n->a.nlist == 0)
        for (int i = 0; i < r; i++)
            red[i] = true;

    int orank = 0;
    int64_t oshape[FC_MAX_RANK], count = 1;
    for (int i = 0; i < r; i++) {
        if (red[i])
            count *= x->shape[i];
        if (!red[i])
            oshape[orank++] = x->shape[i];
        else if (n->a.keepdim)
            oshape[orank++] = 1;
    }
    if (count == 0 && (n->op == FC_OP_REDUCE_MAX || n->op == FC_OP_REDUCE_MIN))
        return fc_ref_err(ip, FC_ERR_INPUT, "reduction over an empty axis has no identity");
    fc_status st = fc_ref_set_result(ip, 0, orank, oshape);
    if (st != FC_OK)
        return st;

    /* ostride[i]: how far input dim i moves in the result; 0 if reduced.
     * keepdim only adds size-1 dims, which do not change the layout. */
    int64_t ostride[FC_MAX_RANK], s = 1;
    for (int i = r - 1; i >= 0; i--) {
        ostride[i] = red[i] ? 0 : s;
        if (!red[i])
            s *= x->shape[i];
    }

    ibuf *out = result(ip, 0);
    double init = n->op == FC_OP_REDUCE_MAX ? -INFINITY : n->op == FC_OP_REDUCE_MIN ? INFINITY : 0.0;
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = init;
    for (int64_t i = 0; i < x->numel; i++) {
        double v = x->data[i], *acc = &out->data[offset_of(i, r, x->shape, ostride)];
        switch (n->op) {
        case FC_OP_REDUCE_SUM:
        case FC_OP_REDUCE_MEAN: *acc += v; break;
        case FC_OP_REDUCE_MAX: *acc = scalar_op(FC_OP_MAX, *acc, v, 0); break;
        case FC_OP_REDUCE_MIN: *acc = scalar_op(FC_OP_MIN, *acc, v, 0); break;
        default: FC_UNREACHABLE("fc_ref_run_reduce: not a reduction");
        }
    }
    if (n->op == FC_OP_REDUCE_MEAN)
        for (int64_t i = 0; i < out->numel; i++)
            out->data[i] /= (double)count; /* 0/0 = NaN for an empty axis, as PyTorch */
    return FC_OK;
}

/* The axis attribute of softmax/layernorm, normalized (a scalar: 0). */
static fc_status norm_axis_attr(interp *ip, const ibuf *x, int *axis)
{
    *axis = 0;
    if (!fc_ref_norm_axis(ip->node->a.axis, x->rank > 0 ? x->rank : 1, axis))
        return fc_ref_err(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d",
                          (long long)ip->node->a.axis, x->rank);
    return FC_OK;
}

/* A 1-D weight of layernorm/rmsnorm must have `len` elements. */
static fc_status check_weight(interp *ip, int i, int64_t len)
{
    const ibuf *w = operand(ip, i);
    char sh[256];
    if (w->rank != 1 || w->shape[0] != len)
        return fc_ref_err(ip, FC_ERR_INPUT, "operand %d has shape %s at run time; it must be [%lld]", i,
                          fc_ref_shape_str(w->rank, w->shape, sh, sizeof sh), (long long)len);
    return FC_OK;
}

fc_status fc_ref_run_softmax(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    int axis;
    fc_status st = norm_axis_attr(ip, x, &axis);
    if (st == FC_OK)
        st = fc_ref_set_result(ip, 0, x->rank, x->shape);
    if (st != FC_OK)
        return st;
    double *y = result(ip, 0)->data;
    int64_t outer, len, inner;
    rows_at(x, axis, &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x->data + o * len * inner + i;
            double *yr = y + o * len * inner + i;
            /* Subtract the row max for range, as every implementation does;
             * in float64 it changes nothing else. */
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < len; j++)
                m = scalar_op(FC_OP_MAX, m, xr[j * inner], 0);
            for (int64_t j = 0; j < len; j++)
                sum += yr[j * inner] = exp(xr[j * inner] - m);
            for (int64_t j = 0; j < len; j++)
                yr[j * inner] /= sum;
        }
    return FC_OK;
}

fc_status fc_ref_run_layernorm(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    int axis;
    int64_t outer, len, inner;
    fc_status st = norm_axis_attr(ip, x, &axis);
    if (st != FC_OK)
        return st;
    rows_at(x, axis, &outer, &len, &inner);
    if ((st = check_weight(ip, 1, len)) != FC_OK || (st = check_weight(ip, 2, len)) != FC_OK ||
        (st = fc_ref_set_result(ip, 0, x->rank, x->shape)) != FC_OK)
        return st;
    const double *w = operand(ip, 1)->data, *b = operand(ip, 2)->data;
    double *y = result(ip, 0)->data, eps = ip->node->a.eps;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x->data + o * len * inner + i;
            double *yr = y + o * len * inner + i;
            double mean = 0.0, var = 0.0;
            for (int64_t j = 0; j < len; j++)
                mean += xr[j * inner];
            mean /= (double)len;
            for (int64_t j = 0; j < len; j++)
                var += (xr[j * inner] - mean) * (xr[j * inner] - mean);
            var /= (double)len; /* biased, as torch.nn.LayerNorm */
            double rstd = 1.0 / sqrt(var + eps);
            for (int64_t j = 0; j < len; j++)
                yr[j * inner] = (xr[j * inner] - mean) * rstd * w[j] + b[j];
        }
    return FC_OK;
}

fc_status fc_ref_run_rmsnorm(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    if (x->rank == 0)
        return fc_ref_err(ip, FC_ERR_INPUT, "x must have rank >= 1");
    int64_t outer, len, inner;
    rows_at(x, x->rank - 1, &outer, &len, &inner);
    fc_status st = check_weight(ip, 1, len);
    if (st == FC_OK)
        st = fc_ref_set_result(ip, 0, x->rank, x->shape);
    if (st != FC_OK)
        return st;
    const double *w = operand(ip, 1)->data;
    double *y = result(ip, 0)->data, eps = ip->node->a.eps;
    for (int64_t o = 0; o < outer; o++) {
        const double *xr = x->data + o * len;
        double ms = 0.0;
        for (int64_t j = 0; j < len; j++)
            ms += xr[j] * xr[j];
        ms /= (double)len;
        double r = 1.0 / sqrt(ms + eps);
        for (int64_t j = 0; j < len; j++)
            y[o * len + j] = xr[j] * r * w[j];
    }
    return FC_OK;
}


/*
 * interp_views.c - the reference interpreter's shape ops (reshape, permute,
 * expand, slice, concat, split), creation ops (iota, full) and gather. A
 * view is a copy here: every value is dense.
 */
#include "interp_impl.h"

/* ================================================================ */
/* Shape ops.                                                        */
/* ================================================================ */

/* Copy x's data into result 0 (reshape is a copy in row-major order). */
static void copy_all(interp *ip, const ibuf *x)
{
    memcpy(result(ip, 0)->data, x->data, sizeof(double) * (size_t)x->numel);
}

/*
 * reshape: the result's dims, with symbols substituted; one unknown (-1 or
 * a symbol not bound yet) is inferred from the element count.
 */
fc_status fc_ref_run_reshape(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_value *v = ip->node->out[0];
    int64_t shape[FC_MAX_RANK], known = 1;
    int unknown = -1;
    for (int i = 0; i < v->rank; i++) {
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0) {
            if (unknown >= 0)
                return fc_ref_err(ip, FC_ERR_INPUT, "more than one dim of the result is unknown");
            unknown = i;
            continue;
        }
        if (shape[i] != 0 && known > INT64_MAX / shape[i])
            return fc_ref_err(ip, FC_ERR_INPUT, "the result's element count overflows int64");
        known *= shape[i];
    }
    if (unknown >= 0) {
        if (known == 0 || x->numel % known != 0)
            return fc_ref_err(ip, FC_ERR_INPUT, "cannot infer dim %d: %lld elements into a multiple of %lld",
                              unknown, (long long)x->numel, (long long)known);
        shape[unknown] = x->numel / known;
    } else if (known != x->numel) {
        char s1[256], s2[256];
        return fc_ref_err(ip, FC_ERR_INPUT, "cannot reshape %s into %s at run time",
                          fc_ref_shape_str(x->rank, x->shape, s1, sizeof s1),
                          fc_ref_shape_str(v->rank, shape, s2, sizeof s2));
    }
    fc_status st = fc_ref_set_result(ip, 0, v->rank, shape);
    if (st == FC_OK)
        copy_all(ip, x);
    return st;
}

fc_status fc_ref_run_permute(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int perm[FC_MAX_RANK];
    bool seen[FC_MAX_RANK] = {false};
    if (a->nlist != x->rank)
        return fc_ref_err(ip, FC_ERR_INPUT, "perm has %d entries for rank %d", a->nlist, x->rank);
    for (int i = 0; i < x->rank; i++) {
        if (!fc_ref_norm_axis(a->list[i], x->rank, &perm[i]) || seen[perm[i]])
            return fc_ref_err(ip, FC_ERR_INPUT, "perm is not a permutation of the %d axes", x->rank);
        seen[perm[i]] = true;
    }
    int64_t oshape[FC_MAX_RANK], xstride[FC_MAX_RANK], ostride[FC_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        oshape[i] = x->shape[perm[i]];
    fc_status st = fc_ref_set_result(ip, 0, x->rank, oshape);
    if (st != FC_OK)
        return st;
    /* Result dim i walks input dim perm[i], with x's row-major strides. */
    int64_t s = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xstride[i] = s;
        s *= x->shape[i];
    }
    for (int i = 0; i < x->rank; i++)
        ostride[i] = xstride[perm[i]];
    ibuf *out = result(ip, 0);
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = x->data[offset_of(i, x->rank, oshape, ostride)];
    return FC_OK;
}

/* Broadcast x into result 0, whose shape has been set. */
static void broadcast_into(interp *ip, const ibuf *x)
{
    ibuf *out = result(ip, 0);
    int64_t strides[FC_MAX_RANK];
    fc_ref_bcast_strides(x->rank, x->shape, out->rank, strides);
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = x->data[offset_of(i, out->rank, out->shape, strides)];
}

/*
 * expand: the result's dims; an entry written -1 keeps x's (right-aligned)
 * dim. Every dim of x must equal its result dim or be 1.
 */
fc_status fc_ref_run_expand(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_value *v = ip->node->out[0];
    const fc_attrs *a = &ip->node->a;
    int r = v->rank;
    int64_t shape[FC_MAX_RANK];
    char s1[256], s2[256];
    if (r < x->rank)
        return fc_ref_err(ip, FC_ERR_INPUT, "cannot expand rank %d to rank %d", x->rank, r);
    for (int i = 0; i < r; i++) {
        int j = i - (r - x->rank);
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0 && j >= 0 && i < a->nlist && a->list[i] == FC_DIM_INFER)
            shape[i] = x->shape[j];
        if (shape[i] < 0)
            return fc_ref_err(ip, FC_ERR_INPUT, "dim %d of the result is not known from the inputs", i);
        if (j >= 0 && x->shape[j] != 1 && x->shape[j] != shape[i])
            return fc_ref_err(ip, FC_ERR_INPUT, "cannot expand %s to %s at run time",
                              fc_ref_shape_str(x->rank, x->shape, s1, sizeof s1),
                              fc_ref_shape_str(r, shape, s2, sizeof s2));
    }
    fc_status st = fc_ref_set_result(ip, 0, r, shape);
    if (st == FC_OK)
        broadcast_into(ip, x);
    return st;
}

/* Python slicing of [start:end:step] on a dim of size n: first index and
 * count. Negative bounds count from the end; both are clamped. */
static void slice_range(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count)
{
    if (start < 0)
        start = start + n < 0 ? 0 : start + n;
    else if (start > n)
        start = n;
    if (end < 0)
        end = end + n < 0 ? 0 : end + n;
    else if (end > n)
        end = n;
    *first = start;
    *count = end > start ? (end - start - 1) / step + 1 : 0;
}

fc_status fc_ref_run_slice(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int axis;
    if (!fc_ref_axis_ok(ip, a->axis, x->rank, &axis))
        return FC_ERR_INPUT;
    if (a->step < 1)
        return fc_ref_err(ip, FC_ERR_INPUT, "step must be >= 1, not %lld", (long long)a->step);
    int64_t first, count, outer, len, inner;
    slice_range(x->shape[axis], a->start, a->end, a->step, &first, &count);
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = count;
    fc_status st = fc_ref_set_result(ip, 0, x->rank, shape);
    if (st != FC_OK)
        return st;
    rows_at(x, axis, &outer, &len, &inner);
    double *y = result(ip, 0)->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < count; j++)
            memcpy(y + (o * count + j) * inner, x->data + (o * len + first + j * a->step) * inner,
                   sizeof(double) * (size_t)inner);
    return FC_OK;
}

fc_status fc_ref_run_concat(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x0 = operand(ip, 0);
    int axis;
    if (!fc_ref_axis_ok(ip, n->a.axis, x0->rank, &axis))
        return FC_ERR_INPUT;
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, x0->shape, sizeof shape);
    shape[axis] = 0;
    for (int k = 0; k < n->nin; k++) {
        const ibuf *x = operand(ip, k);
        char s1[256], s2[256];
        bool same = x->rank == x0->rank;
        for (int i = 0; same && i < x->rank; i++)
            same = i == axis || x->shape[i] == x0->shape[i];
        if (!same)
            return fc_ref_err(ip, FC_ERR_INPUT, "operand shapes %s and %s differ off axis %d at run time",
                              fc_ref_shape_str(x0->rank, x0->shape, s1, sizeof s1),
                              fc_ref_shape_str(x->rank, x->shape, s2, sizeof s2), axis);
        if (shape[axis] > INT64_MAX - x->shape[axis])
            return fc_ref_err(ip, FC_ERR_INPUT, "the result's size overflows int64");
        shape[axis] += x->shape[axis];
    }
    fc_status st = fc_ref_set_result(ip, 0, x0->rank, shape);
    if (st != FC_OK)
        return st;
    /* Row o of the result is row o of every operand, one after another. */
    double *y = result(ip, 0)->data;
    int64_t outer = prod(shape, 0, axis), inner = prod(shape, axis + 1, x0->rank);
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n->nin; k++) {
            const ibuf *x = operand(ip, k);
            int64_t chunk = x->shape[axis] * inner;
            memcpy(y, x->data + o * chunk, sizeof(double) * (size_t)chunk);
            y += chunk;
        }
    return FC_OK;
}

/* split: the sizes attribute with symbols substituted; one unknown (-1 or
 * an unbound symbol) takes what is left of the axis. */
fc_status fc_ref_run_split(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x = operand(ip, 0);
    int axis;
    if (!fc_ref_axis_ok(ip, n->a.axis, x->rank, &axis))
        return FC_ERR_INPUT;
    if (n->a.nlist != n->nout)
        return fc_ref_err(ip, FC_ERR_INPUT, "%d sizes for %d results", n->a.nlist, n->nout);

    int64_t *sizes = fc_ref_alloc_zeroed(ip->ctx, n->nout, sizeof(int64_t));
    if (!sizes)
        return nomem(ip);
    int64_t total = x->shape[axis], used = 0;
    int unknown = -1;
    fc_status st = FC_OK;
    for (int k = 0; k < n->nout && st == FC_OK; k++) {
        sizes[k] = resolve_dim(ip, n->a.list[k]);
        if (sizes[k] < 0 && unknown < 0)
            unknown = k;
        else if (sizes[k] < 0)
            st = fc_ref_err(ip, FC_ERR_INPUT, "more than one size is unknown");
        else if (sizes[k] > total - used)
            st = fc_ref_err(ip, FC_ERR_INPUT, "sizes add up to more than the axis size %lld at run time",
                            (long long)total);
        else
            used += sizes[k];
    }
    if (st == FC_OK && unknown >= 0)
        sizes[unknown] = total - used;
    else if (st == FC_OK && used != total)
        st = fc_ref_err(ip, FC_ERR_INPUT, "sizes add up to %lld, not the axis size %lld at run time",
                        (long long)used, (long long)total);

    int64_t outer, len, inner, offset = 0;
    rows_at(x, axis, &outer, &len, &inner);
    for (int k = 0; k < n->nout && st == FC_OK; k++) {
        int64_t shape[FC_MAX_RANK];
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = sizes[k];
        if ((st = fc_ref_set_result(ip, k, x->rank, shape)) != FC_OK)
            break;
        double *y = result(ip, k)->data;
        int64_t chunk = sizes[k] * inner;
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + o * chunk, x->data + (o * len + offset) * inner, sizeof(double) * (size_t)chunk);
        offset += sizes[k];
    }
    fc_ctx_freemem(ip->ctx, sizes);
    return st;
}

/* Multi-index of the i-th element (row-major over shape). */
static void unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/* The concrete shape of a creation op's result: every dim must be known. */
static fc_status creation_shape(interp *ip, int64_t *shape)
{
    const fc_value *v = ip->node->out[0];
    for (int i = 0; i < v->rank; i++) {
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0 && fc_dim_is_sym(v->dims[i]))
            return fc_ref_err(ip, FC_ERR_INPUT, "symbol %s is not bound by the inputs", sym_name(ip, v->dims[i]));
        if (shape[i] < 0)
            return fc_ref_err(ip, FC_ERR_INPUT, "dim %d of the result is not known", i);
    }
    return fc_ref_set_result(ip, 0, v->rank, shape);
}

fc_status fc_ref_run_iota(interp *ip)
{
    const fc_value *v = ip->node->out[0];
    int64_t shape[FC_MAX_RANK], idx[FC_MAX_RANK];
    int axis = 0;
    if (v->rank > 0 && !fc_ref_axis_ok(ip, ip->node->a.axis, v->rank, &axis))
        return FC_ERR_INPUT;
    fc_status st = creation_shape(ip, shape);
    if (st != FC_OK)
        return st;
    ibuf *out = result(ip, 0);
    for (int64_t i = 0; i < out->numel; i++) {
        unravel(i, out->rank, shape, idx);
        out->data[i] = out->rank > 0 ? (double)idx[axis] : 0.0;
    }
    return FC_OK;
}

fc_status fc_ref_run_full(interp *ip)
{
    int64_t shape[FC_MAX_RANK];
    fc_status st = creation_shape(ip, shape);
    if (st != FC_OK)
        return st;
    ibuf *out = result(ip, 0);
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = ip->node->a.value; /* rounded to the dtype with every result */
    return FC_OK;
}

/*
 * gather(table, idx, axis): out[pre, j, post] = table[pre, idx[j], post].
 * A negative index counts from the end; one out of range is an error.
 */
fc_status fc_ref_run_gather(interp *ip)
{
    const ibuf *t = operand(ip, 0), *ix = operand(ip, 1);
    int axis;
    if (!fc_ref_axis_ok(ip, ip->node->a.axis, t->rank, &axis))
        return FC_ERR_INPUT;
    int orank = t->rank - 1 + ix->rank;
    if (orank > FC_MAX_RANK)
        return fc_ref_err(ip, FC_ERR_INPUT, "the result would have rank %d (max %d)", orank, FC_MAX_RANK);
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)axis);
    memcpy(shape + axis, ix->shape, sizeof(int64_t) * (size_t)ix->rank);
    memcpy(shape + axis + ix->rank, t->shape + axis + 1, sizeof(int64_t) * (size_t)(t->rank - axis - 1));
    fc_status st = fc_ref_set_result(ip, 0, orank, shape);
    if (st != FC_OK)
        return st;

    int64_t outer, len, inner;
    rows_at(t, axis, &outer, &len, &inner);
    double *y = result(ip, 0)->data;
    for (int64_t j = 0; j < ix->numel; j++) {
        double d = ix->data[j];
        /* Indices come from integer tensors; the range test is done on the
         * double first so the conversion below is always defined. */
        if (!(d >= -(double)len && d < (double)len) || d != trunc(d))
            return fc_set_error(ip->ctx, FC_ERR_RUNTIME,
                                "reference: gather: index %.17g is out of range for axis %d of size %lld",
                                d, axis, (long long)len);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ix->numel; j++) {
            int64_t k = (int64_t)ix->data[j];
            if (k < 0)
                k += len;
            memcpy(y + (o * ix->numel + j) * inner, t->data + (o * len + k) * inner,
                   sizeof(double) * (size_t)inner);
        }
    return FC_OK;
}


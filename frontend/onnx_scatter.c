/* onnx_scatter.c - ScatterElements (and its older name Scatter) and
 * ScatterND, composed from the IR's elementwise ops and reductions (the IR
 * has no scatter).
 *
 * Both are written as one comparison: for an axis of length A written by K
 * updates, hit[a, k] says that update k lands on position a (an iota over A
 * against the update's index). The result at a is the update whose hit is
 * set, combined with the data by the reduction: none takes it, add adds the
 * sum of the updates that land there, mul multiplies by their product, max
 * and min take the largest or smallest of the data and those updates. The
 * intermediate has K times the data's size, which suits the suite's and the
 * exporters' scatters (a few updates along an axis) but not scattering a
 * large tensor into a large one. For reduction none ONNX leaves duplicate
 * indices undefined; here their updates are summed.
 */
#include "onnx_ops.h"

#include <math.h>
#include <string.h>

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN, RED_BAD };

static int reduction(const Onnx__NodeProto *n) {
    const Onnx__AttributeProto *a = attr(n, "reduction");
    if (!a || !a->has_s) return RED_NONE;
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < RED_BAD; i++)
        if (a->s.len == strlen(names[i]) && !memcmp(a->s.data, names[i], a->s.len)) return i;
    return RED_BAD;
}

/*
 * data [.., A (at ax), ..]; key and upd [.., 1 (at ax), K (at ax + 1), ..]
 * (the other dims the data's, or 1 for key where every update shares it):
 * each update with its index along ax. Returns the scattered data.
 */
static fc_value *scatter_along(ox_ctx *ox, fc_value *data, int ax, fc_value *key, fc_value *upd, int red) {
    fc_dim hd[FC_MAX_RANK];
    int r = data->rank + 1;
    for (int d = 0; d < r; d++) hd[d] = d <= ax ? data->dims[d] : d == ax + 1 ? upd->dims[ax + 1] : data->dims[d - 1];
    fc_value *hit = fc_eq(G, fc_iota(G, r, hd, ax, FC_I64), key);
    int k = ax + 1;
    fc_value *any = fc_reduce_max(G, fc_cast(G, hit, FC_I32), 1, &k, false);
    any = fc_gt(G, any, fc_scalar(G, 0));
    fc_value *dx = data;
    switch (red) {
    case RED_NONE:
        return fc_where(G, any, fc_reduce_sum(G, fc_where(G, hit, upd, fc_scalar(G, 0)), 1, &k, false), dx);
    case RED_ADD:
        return fc_add(G, dx, fc_reduce_sum(G, fc_where(G, hit, upd, fc_scalar(G, 0)), 1, &k, false));
    case RED_MUL:
        return fc_cast(G, fc_mul(G, fc_cast(G, dx, FC_F64), ox_product(ox, fc_where(G, hit, upd, fc_scalar(G, 1)), 1, &k, false)),
                       data->dtype);
    default: {
        fc_value *none = fc_scalar(G, red == RED_MAX ? -INFINITY : INFINITY);
        fc_value *u = red == RED_MAX ? fc_reduce_max(G, fc_where(G, hit, upd, none), 1, &k, false)
                                     : fc_reduce_min(G, fc_where(G, hit, upd, none), 1, &k, false);
        return fc_where(G, any, red == RED_MAX ? fc_max(G, dx, u) : fc_min(G, dx, u), dx);
    }
    }
}

/* Both scatters' operands (data, indices, updates) and reduction. */
static fc_status operands(ox_ctx *ox, const Onnx__NodeProto *n, fc_value **data, fc_value **idx, fc_value **upd,
                          int *red) {
    *data = in(ox, 0);
    *idx = in(ox, 1);
    *upd = in(ox, 2);
    if (!*data || !*idx || !*upd) return ERR("needs data, indices and updates");
    *red = reduction(n);
    if (*red == RED_BAD) return ERR("reduction must be none, add, mul, max or min");
    if ((*red == RED_MAX || *red == RED_MIN) && !isf((*data)->dtype)) return ERR("reduction max and min need float data");
    if ((*data)->dtype == FC_BOOL && *red != RED_NONE) return ERR("a reduction needs numeric data");
    return FC_OK;
}

fc_status ox_op_scatter_elements(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *data, *idx, *upd;
    int red;
    fc_status st = operands(ox, n, &data, &idx, &upd, &red);
    if (st) return st;
    int r = data->rank;
    int ax = norm_axis(ai(n, "axis", 0), r);
    if (ax < 0 || ax >= r) return ERR("axis out of range");
    if (idx->rank != r || upd->rank != r) return ERR("data, indices and updates must have one rank");
    for (int d = 0; d < r; d++) {
        if (idx->dims[d] != upd->dims[d]) return ERR("indices and updates must have one shape");
        if (d != ax && idx->dims[d] != data->dims[d])
            return ERR("indices shorter than the data in dim %d (not the axis) are not supported", d);
        if (idx->dims[d] < 0 || data->dims[d] < 0) return ERR("symbolic dims are not supported");
    }
    /* The updates' axis goes after the data's: [.., 1, K, ..]. */
    fc_dim kd[FC_MAX_RANK];
    for (int d = 0; d <= r; d++) kd[d] = d < ax ? idx->dims[d] : d == ax ? 1 : idx->dims[d - 1];
    fc_value *key = fc_reshape(G, ox_wrap_index(ox, fc_cast(G, idx, FC_I64), data->dims[ax]), r + 1, kd);
    OUT(0, scatter_along(ox, data, ax, key, fc_reshape(G, upd, r + 1, kd), red));
    return FC_OK;
}

fc_status ox_op_scatter_nd(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *data, *idx, *upd;
    int red;
    fc_status st = operands(ox, n, &data, &idx, &upd, &red);
    if (st) return st;
    if (idx->rank < 1) return ERR("indices must have a rank of 1 or more");
    int64_t k = idx->dims[idx->rank - 1];
    if (k < 1 || k > data->rank) return ERR("the indices' last dim must be 1 to the data's rank");
    int64_t rows = 1, nupd = 1;
    for (int d = 0; d < data->rank; d++)
        if (data->dims[d] < 0) return ERR("symbolic dims are not supported");
    for (int d = 0; d < idx->rank; d++)
        if (idx->dims[d] < 0) return ERR("symbolic dims are not supported");
    for (int d = 0; d < k; d++) rows *= data->dims[d];
    for (int d = 0; d + 1 < idx->rank; d++) nupd *= idx->dims[d];
    int rest = data->rank - (int)k;
    if (upd->rank != idx->rank - 1 + rest) return ERR("updates must have the shape indices[:-1] + data[k:]");
    for (int d = 0; d < rest; d++)
        if (upd->dims[idx->rank - 1 + d] != data->dims[k + d]) return ERR("updates must have the shape indices[:-1] + data[k:]");
    /* The first k dims of the data as one of `rows`, each index row as its
     * offset there; then a scatter of rows: data [rows, rest..], the updates
     * [1, nupd, rest..], their offsets [1, nupd, 1..]. */
    fc_dim dd[FC_MAX_RANK], ud[FC_MAX_RANK], od[FC_MAX_RANK], cd[1] = {nupd};
    dd[0] = rows;
    ud[0] = od[0] = 1;
    ud[1] = od[1] = nupd;
    for (int d = 0; d < rest; d++) {
        dd[1 + d] = data->dims[k + d];
        ud[2 + d] = data->dims[k + d];
        od[2 + d] = 1;
    }
    fc_value *ix = fc_reshape(G, idx, 2, (fc_dim[]){nupd, k});
    fc_value *off = NULL;
    int64_t stride = rows;
    for (int i = 0; i < k; i++) {
        stride /= data->dims[i];
        fc_value *c = fc_reshape(G, fc_slice(G, ix, 1, i, i + 1, 1), 1, cd);
        c = fc_mul(G, ox_wrap_index(ox, fc_cast(G, c, FC_I64), data->dims[i]), fc_scalar_int(G, stride));
        off = off ? fc_add(G, off, c) : c;
    }
    fc_value *out = scatter_along(ox, fc_reshape(G, data, 1 + rest, dd), 0, fc_reshape(G, off, 2 + rest, od),
                                  fc_reshape(G, upd, 2 + rest, ud), red);
    OUT(0, fc_reshape(G, out, data->rank, data->dims));
    return FC_OK;
}

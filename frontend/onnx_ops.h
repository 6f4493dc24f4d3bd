/* onnx_ops.h - what the translation files (onnx_ops.c, onnx_ops2.c,
 * onnx_ops3.c) share: a node's attributes and operands, and their short
 * names for the graph being built and the node's results. Internal to
 * frontend/. */
#ifndef FC_ONNX_OPS_H
#define FC_ONNX_OPS_H

#include "onnx.h"

#include <string.h>

#define G (ox->g)
#define OUT(i, val) (ox->out_v[(i)] = (val))
#define ERR(...) ox_error(ox, FC_ERR_UNSUPPORTED, __VA_ARGS__)

static inline const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}
static inline int64_t ai(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a ? a->i : def;
}
static inline double af(const Onnx__NodeProto *n, const char *name, double def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a ? a->f : def;
}
/* Operand i is present (ONNX marks an omitted optional input by an empty name). */
static inline bool has_in(ox_ctx *ox, int i) { return i < ox->nin && ox->in[i]; }
/* Operand i as a value of the graph (a constant made a parameter or a full). */
static inline fc_value *in(ox_ctx *ox, int i) { return has_in(ox, i) ? ox_materialize(ox, ox->in[i]) : NULL; }
static inline bool isf(fc_dtype dt) { return dt == FC_F32 || dt == FC_F64 || dt == FC_F16 || dt == FC_BF16; }
static inline int norm_axis(int64_t a, int rank) { return (int)(a < 0 ? a + rank : a); }

/* The product of x over the axes, in f64 (exp of the sum of the logs of the
 * magnitudes, the sign from the count of negatives, 0 where a factor is 0;
 * rounded to an integer for integer x): ReduceProd's, and the scatters'
 * reduction mul. */
fc_value *ox_product(ox_ctx *ox, fc_value *x, int na, const int *axes, bool keep);
/* Indices along a dim of length len (i64), negative ones counted from the
 * end (len < 0, a symbol: as they are). */
fc_value *ox_wrap_index(ox_ctx *ox, fc_value *idx, fc_dim len);
/* x [static] taken along axis at idx (i64, x's rank, every other dim of
 * idx within x's): out[.., i, ..] = x[.., idx[.., i, ..], ..], as a gather
 * from the flattened x at the linear index. */
fc_value *ox_take_along(ox_ctx *ox, fc_value *x, int axis, fc_value *idx);

#endif

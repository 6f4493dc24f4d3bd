/*
 * interp.c - the reference interpreter: the oracle every backend is checked
 * against. Written for clarity, not speed.
 *
 * Every value is held as a dense, row-major array of doubles; every op
 * computes in float64; and every node's results are rounded to their dtype
 * once the node has run. That is what an exact machine would produce running
 * the graph node by node. A fused backend differs from it only by its own
 * rounding of intermediates, which the numeric tests cover with a tolerance
 * for each dtype.
 *
 * Shapes. Value types may hold symbolic dims. The interpreter binds each
 * symbol from the input tensors, then computes every node's result shape
 * again from its operands' concrete shapes, as the op's semantics say, and
 * unifies it with the value's type: static dims must agree, a bound symbol
 * must agree, an unbound one is bound. So a binding the builder could not
 * foresee (B = 1 where it assumed broadcasting, say) is reported as an error,
 * never turned into an out-of-bounds read.
 *
 * Errors go to the graph's context. Nothing prints or exits; every
 * temporary is freed on every path.
 */
#include "interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ */
/* Elements: rounding, loading, storing.                             */
/* ================================================================ */

/*
 * Rounding is fc_round_to_dtype's (ir/dtype.c), one definition for every
 * stage. What it does, which is what the oracle means by "rounded":
 *  - f32/f16/bf16: round to nearest-even directly from double (no double
 *    rounding through f32); too large a magnitude gives inf.
 *  - i8/i32/i64: truncate toward zero and saturate at the dtype's limits
 *    (i64 just inside 2^63, the largest double below it); NaN gives 0. That
 *    is CUDA's cvt.rzi.sat (__float2int_rz), and it keeps every conversion
 *    defined where C leaves out-of-range ones undefined. Integer arithmetic
 *    that overflows therefore saturates here, where PyTorch wraps around:
 *    numeric tests keep integer results in range. Integers beyond 2^53 are
 *    not exact in a double.
 *  - bool: 1 if x != 0, NaN included (as C's (bool) and PyTorch), else 0.
 */

double fc_interp_load(fc_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case FC_F64: return ((const double *)data)[i];
    case FC_F32: return ((const float *)data)[i];
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)data)[i]);
    case FC_I64: return (double)((const int64_t *)data)[i];
    case FC_I32: return ((const int32_t *)data)[i];
    case FC_I8: return ((const int8_t *)data)[i];
    case FC_BOOL: return ((const uint8_t *)data)[i] != 0 ? 1.0 : 0.0;
    case FC_DTYPE_COUNT: break;
    }
    FC_UNREACHABLE("fc_interp_load: bad dtype");
}

void fc_interp_store(fc_dtype dt, void *data, int64_t i, double x)
{
    x = fc_round_to_dtype(x, dt);
    switch (dt) {
    case FC_F64: ((double *)data)[i] = x; return;
    case FC_F32: ((float *)data)[i] = (float)x; return;
    /* x is already an f16/bf16 value (or inf/NaN), so going through float
     * is exact: no double rounding. */
    case FC_F16: ((uint16_t *)data)[i] = fc_f32_to_f16((float)x); return;
    case FC_BF16: ((uint16_t *)data)[i] = fc_f32_to_bf16((float)x); return;
    case FC_I64: ((int64_t *)data)[i] = (int64_t)x; return; /* in range: saturated above */
    case FC_I32: ((int32_t *)data)[i] = (int32_t)x; return;
    case FC_I8: ((int8_t *)data)[i] = (int8_t)x; return;
    case FC_BOOL: ((uint8_t *)data)[i] = x != 0.0; return;
    case FC_DTYPE_COUNT: break;
    }
    FC_UNREACHABLE("fc_interp_store: bad dtype");
}

/* ================================================================ */
/* Concrete shapes.                                                  */
/* ================================================================ */

/* Product of dims; false if it overflows int64. */
static bool shape_numel(int rank, const int64_t *shape, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > INT64_MAX / shape[i])
            return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}

/* Product of shape[from..to), for shapes already known not to overflow. */
static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= shape[i];
    return n;
}

static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

/* Normalize a possibly negative axis against rank; false if out of range. */
static bool norm_axis(int64_t axis, int rank, int *out)
{
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return false;
    *out = (int)axis;
    return true;
}

/*
 * Element offsets that read an operand of shape in[0..inr) while walking a
 * result of shape out[0..outr), by NumPy broadcasting: dims align on the
 * right, a missing or size-1 dim is read with stride 0. The shapes must
 * already be known to broadcast.
 */
static void bcast_strides(int inr, const int64_t *in, int outr, int64_t *strides)
{
    int64_t s = 1;
    for (int i = outr - 1; i >= 0; i--) {
        int j = i - (outr - inr);
        if (j < 0) {
            strides[i] = 0;
            continue;
        }
        strides[i] = in[j] == 1 ? 0 : s;
        s *= in[j];
    }
}

/* Offset of the i-th element (row-major over shape) under strides. */
static int64_t offset_of(int64_t i, int rank, const int64_t *shape, const int64_t *strides)
{
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; d--) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return off;
}

/* Multi-index of the i-th element (row-major over shape). */
static void unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/*
 * Broadcast shapes a and b into out (rank max of both). False if a pair of
 * dims is neither equal nor 1.
 */
static bool bcast_shape(int ar, const int64_t *a, int br, const int64_t *b, int *outr, int64_t *out)
{
    int r = ar > br ? ar : br;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ar), ib = i - (r - br);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    *outr = r;
    return true;
}

/* ================================================================ */
/* The interpreter state.                                            */
/* ================================================================ */

/* The concrete value of one fc_value. data is NULL until it is computed. */
typedef struct ibuf {
    int rank;
    int64_t shape[FC_MAX_RANK];
    int64_t numel;
    double *data;
} ibuf;

typedef struct interp {
    fc_graph *g;
    fc_context *ctx;
    int64_t *sym;     /* value of symbol i, or -1 while unbound */
    int *sym_param;   /* which input bound symbol i (-1: a result did) */
    int *sym_dim;     /* ...and which dim of it */
    ibuf *val;        /* by value id */
    int nval;
    const fc_node *node; /* the node being run, for messages */
} interp;

static const char *value_name(const fc_value *v, char *buf, size_t n)
{
    if (v->name)
        snprintf(buf, n, "%%%s", v->name);
    else
        snprintf(buf, n, "%%%d", v->id);
    return buf;
}

/*
 * Record an error. While a node runs, the message names its op and first
 * result: "reference: matmul %y: inner dimensions differ (3 vs 4)".
 */
__attribute__((format(printf, 3, 4)))
static fc_status ierr(interp *ip, fc_status st, const char *fmt, ...)
{
    char msg[1024], name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ip->node && ip->node->nout > 0)
        return fc_set_error(ip->ctx, st, "reference: %s %s: %s", fc_op_table[ip->node->op].name,
                            value_name(ip->node->out[0], name, sizeof name), msg);
    return fc_set_error(ip->ctx, st, "reference: %s", msg);
}

static fc_status nomem(interp *ip)
{
    return ierr(ip, FC_ERR_NOMEM, "out of memory");
}

/* Zeroed memory for n elements of size `size` (at least one byte, so that
 * an empty tensor still gets a non-NULL pointer). NULL on failure. */
static void *alloc_zeroed(fc_context *ctx, int64_t n, size_t size)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / size)
        return NULL;
    size_t bytes = (size_t)n * size;
    if (bytes == 0)
        bytes = 1;
    void *p = fc_ctx_malloc(ctx, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* A symbolic or static dim's concrete size, or -1 if not known yet. */
static int64_t resolve_dim(const interp *ip, fc_dim d)
{
    if (d >= 0)
        return d;
    if (fc_dim_is_sym(d)) {
        int s = fc_dim_sym_index(d);
        FC_ASSERT(s >= 0 && s < ip->g->nsyms);
        return ip->sym[s];
    }
    return -1; /* FC_DIM_INFER */
}

static const char *sym_name(const interp *ip, fc_dim d)
{
    const char *s = fc_sym_name(ip->g, d);
    return s ? s : "?";
}

/* Give the buffer of value v a concrete shape and zeroed storage. */
static fc_status alloc_buf(interp *ip, const fc_value *v, int rank, const int64_t *shape)
{
    char name[128], sh[256];
    ibuf *b = &ip->val[v->id];
    FC_ASSERT(b->data == NULL);
    int64_t n;
    if (!shape_numel(rank, shape, &n))
        return ierr(ip, FC_ERR_INPUT, "%s has shape %s: its element count overflows int64",
                    value_name(v, name, sizeof name), shape_str(rank, shape, sh, sizeof sh));
    b->data = alloc_zeroed(ip->ctx, n, sizeof(double));
    if (!b->data)
        return nomem(ip);
    b->rank = rank;
    for (int i = 0; i < rank; i++) /* not memcpy: shape may be NULL for rank 0 */
        b->shape[i] = shape[i];
    b->numel = n;
    return FC_OK;
}

/*
 * Result k of the current node has the concrete shape `shape`, computed from
 * its operands. Unify it with the value's type (binding new symbols) and
 * allocate its buffer.
 */
static fc_status set_result(interp *ip, int k, int rank, const int64_t *shape)
{
    const fc_value *v = ip->node->out[k];
    char name[128], sh[256], ty[256];
    if (rank != v->rank)
        return ierr(ip, FC_ERR_INPUT, "result %s has shape %s at run time, but its type is %s",
                    value_name(v, name, sizeof name), shape_str(rank, shape, sh, sizeof sh),
                    fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty));
    for (int i = 0; i < rank; i++) {
        fc_dim d = v->dims[i];
        if (fc_dim_is_sym(d) && resolve_dim(ip, d) < 0) {
            ip->sym[fc_dim_sym_index(d)] = shape[i]; /* first seen here */
            continue;
        }
        int64_t want = resolve_dim(ip, d);
        if (want >= 0 && want != shape[i]) {
            if (fc_dim_is_sym(d))
                return ierr(ip, FC_ERR_INPUT,
                            "result %s has shape %s at run time, but its type is %s with %s = %lld",
                            value_name(v, name, sizeof name), shape_str(rank, shape, sh, sizeof sh),
                            fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty),
                            sym_name(ip, d), (long long)want);
            return ierr(ip, FC_ERR_INPUT, "result %s has shape %s at run time, but its type is %s",
                        value_name(v, name, sizeof name), shape_str(rank, shape, sh, sizeof sh),
                        fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty));
        }
    }
    return alloc_buf(ip, v, rank, shape);
}

/* The buffer of operand i of the current node (computed before, since nodes
 * are in topological order). */
static const ibuf *operand(const interp *ip, int i)
{
    const fc_value *v = ip->node->in[i];
    FC_ASSERT(v->id >= 0 && v->id < ip->nval);
    const ibuf *b = &ip->val[v->id];
    FC_ASSERT(b->data != NULL);
    return b;
}

static ibuf *result(const interp *ip, int k)
{
    return &ip->val[ip->node->out[k]->id];
}

/* ================================================================ */
/* Elementwise ops: unary, binary, compare, where, cast.             */
/* ================================================================ */

/* The scalar semantics of every elementwise op, in float64: one
 * definition in ir/scalar.c, shared with constant folding. */
static double scalar_op(fc_op op, double a, double b, double c)
{
    return fc_scalar_eval(op, a, b, c);
}

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
static fc_status run_elementwise(interp *ip)
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
        if (!bcast_shape(rank, shape, in[k]->rank, in[k]->shape, &nr, next))
            return ierr(ip, FC_ERR_INPUT, "operand shapes do not broadcast at run time (%s with %s)",
                        shape_str(rank, shape, s1, sizeof s1),
                        shape_str(in[k]->rank, in[k]->shape, s2, sizeof s2));
        rank = nr;
        memcpy(shape, next, sizeof next);
    }
    fc_status st = set_result(ip, 0, rank, shape);
    if (st != FC_OK)
        return st;
    for (int k = 0; k < n->nin; k++)
        bcast_strides(in[k]->rank, in[k]->shape, rank, strides[k]);

    ibuf *out = result(ip, 0);
    for (int64_t i = 0; i < out->numel; i++) {
        double x[3] = {0, 0, 0};
        for (int k = 0; k < n->nin; k++) {
            x[k] = in[k]->data[offset_of(i, rank, shape, strides[k])];
            if (convert[k])
                x[k] = fc_round_to_dtype(x[k], cdt);
        }
        out->data[i] = scalar_op(n->op, x[0], x[1], x[2]);
    }
    return FC_OK;
}

/* ================================================================ */
/* Reductions and normalizations.                                    */
/* ================================================================ */

static fc_status run_reduce(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x = operand(ip, 0);
    bool red[FC_MAX_RANK] = {false};

    /* An empty axes list reduces every axis. A scalar has nothing to reduce
     * but accepts axis 0 / -1, as PyTorch does. */
    int r = x->rank;
    for (int i = 0; i < n->a.nlist; i++) {
        int ax;
        if (!norm_axis(n->a.list[i], r > 0 ? r : 1, &ax))
            return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d",
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
        return ierr(ip, FC_ERR_INPUT, "reduction over an empty axis has no identity");
    fc_status st = set_result(ip, 0, orank, oshape);
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
        default: FC_UNREACHABLE("run_reduce: not a reduction");
        }
    }
    if (n->op == FC_OP_REDUCE_MEAN)
        for (int64_t i = 0; i < out->numel; i++)
            out->data[i] /= (double)count; /* 0/0 = NaN for an empty axis, as PyTorch */
    return FC_OK;
}

/*
 * View x as [outer, len, inner] around `axis`: element (o, j, i) is at
 * (o * len + j) * inner + i. A scalar is one row of length 1.
 */
static void rows_at(const ibuf *x, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    if (x->rank == 0) {
        *outer = *len = *inner = 1;
        return;
    }
    *outer = prod(x->shape, 0, axis);
    *len = x->shape[axis];
    *inner = prod(x->shape, axis + 1, x->rank);
}

/* The axis attribute of softmax/layernorm, normalized (a scalar: 0). */
static fc_status norm_axis_attr(interp *ip, const ibuf *x, int *axis)
{
    *axis = 0;
    if (!norm_axis(ip->node->a.axis, x->rank > 0 ? x->rank : 1, axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d",
                    (long long)ip->node->a.axis, x->rank);
    return FC_OK;
}

/* A 1-D weight of layernorm/rmsnorm must have `len` elements. */
static fc_status check_weight(interp *ip, int i, int64_t len)
{
    const ibuf *w = operand(ip, i);
    char sh[256];
    if (w->rank != 1 || w->shape[0] != len)
        return ierr(ip, FC_ERR_INPUT, "operand %d has shape %s at run time; it must be [%lld]", i,
                    shape_str(w->rank, w->shape, sh, sizeof sh), (long long)len);
    return FC_OK;
}

static fc_status run_softmax(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    int axis;
    fc_status st = norm_axis_attr(ip, x, &axis);
    if (st == FC_OK)
        st = set_result(ip, 0, x->rank, x->shape);
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

static fc_status run_layernorm(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    int axis;
    int64_t outer, len, inner;
    fc_status st = norm_axis_attr(ip, x, &axis);
    if (st != FC_OK)
        return st;
    rows_at(x, axis, &outer, &len, &inner);
    if ((st = check_weight(ip, 1, len)) != FC_OK || (st = check_weight(ip, 2, len)) != FC_OK ||
        (st = set_result(ip, 0, x->rank, x->shape)) != FC_OK)
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

static fc_status run_rmsnorm(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    if (x->rank == 0)
        return ierr(ip, FC_ERR_INPUT, "x must have rank >= 1");
    int64_t outer, len, inner;
    rows_at(x, x->rank - 1, &outer, &len, &inner);
    fc_status st = check_weight(ip, 1, len);
    if (st == FC_OK)
        st = set_result(ip, 0, x->rank, x->shape);
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

/* ================================================================ */
/* matmul and attention.                                             */
/* ================================================================ */

/*
 * Broadcast the batch dims (all but the last two) of up to four operands.
 * bshape gets the batch shape; strides[k] the batch strides of operand k in
 * units of its matrices.
 */
static fc_status bcast_batch(interp *ip, int nops, const int *brank, const int64_t *const *bdims,
                             int *nb, int64_t *bshape, int64_t (*strides)[FC_MAX_RANK])
{
    *nb = 0;
    for (int k = 0; k < nops; k++) {
        int64_t next[FC_MAX_RANK];
        int nr;
        char s1[256], s2[256];
        if (!bcast_shape(*nb, bshape, brank[k], bdims[k], &nr, next))
            return ierr(ip, FC_ERR_INPUT, "batch dims do not broadcast at run time (%s with %s)",
                        shape_str(*nb, bshape, s1, sizeof s1), shape_str(brank[k], bdims[k], s2, sizeof s2));
        *nb = nr;
        memcpy(bshape, next, sizeof next);
    }
    for (int k = 0; k < nops; k++)
        bcast_strides(brank[k], bdims[k], *nb, strides[k]);
    return FC_OK;
}

/*
 * PyTorch matmul: a rank-1 left operand is [1, K] and a rank-1 right
 * operand [K, 1], and the added dim is dropped from the result; batch dims
 * broadcast.
 */
static fc_status run_matmul(interp *ip)
{
    const ibuf *a = operand(ip, 0), *b = operand(ip, 1);
    if (a->rank < 1 || b->rank < 1)
        return ierr(ip, FC_ERR_INPUT, "operands must have rank >= 1");
    int64_t M = a->rank == 1 ? 1 : a->shape[a->rank - 2], K = a->shape[a->rank - 1];
    int64_t Kb = b->rank == 1 ? b->shape[0] : b->shape[b->rank - 2], N = b->rank == 1 ? 1 : b->shape[b->rank - 1];
    if (K != Kb)
        return ierr(ip, FC_ERR_INPUT, "inner dimensions differ at run time (%lld vs %lld)", (long long)K,
                    (long long)Kb);

    int brank[2] = {a->rank > 2 ? a->rank - 2 : 0, b->rank > 2 ? b->rank - 2 : 0};
    const int64_t *bdims[2] = {a->shape, b->shape};
    int64_t bshape[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
    int nb;
    fc_status st = bcast_batch(ip, 2, brank, bdims, &nb, bshape, bstride);
    if (st != FC_OK)
        return st;

    int orank = nb;
    int64_t oshape[FC_MAX_RANK + 2];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    if (a->rank > 1)
        oshape[orank++] = M;
    if (b->rank > 1)
        oshape[orank++] = N;
    if ((st = set_result(ip, 0, orank, oshape)) != FC_OK)
        return st;

    double *c = result(ip, 0)->data;
    int64_t nbatch = prod(bshape, 0, nb);
    for (int64_t t = 0; t < nbatch; t++) {
        const double *am = a->data + offset_of(t, nb, bshape, bstride[0]) * M * K;
        const double *bm = b->data + offset_of(t, nb, bshape, bstride[1]) * K * N;
        double *cm = c + t * M * N; /* zeroed by set_result */
        /* k in the middle loop reads b row by row, which is many times
         * faster on big operands. Each c[m][j] still sums its products in
         * order k = 0..K-1, so it is bit for bit the textbook loop. */
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                double amk = am[m * K + k];
                for (int64_t j = 0; j < N; j++)
                    cm[m * N + j] += amk * bm[k * N + j];
            }
    }
    return FC_OK;
}

/*
 * attention(q, k, v, [mask]) = softmax(q @ k^T * scale [+ mask]) @ v over
 * [.., S, D] operands whose batch dims broadcast. The causal mask is
 * top-left aligned, as SDPA's is_causal: query i sees keys j <= i. The
 * optional mask broadcasts to the scores [batch.., Sq, Sk]: a bool mask
 * keeps the keys where it is true (a key it drops is -inf), a float mask is
 * added to the scaled score. A row that keeps no key is NaN (0/0), as the
 * written-out softmax of a row of -inf is.
 */
static fc_status run_attention(interp *ip)
{
    const ibuf *q = operand(ip, 0), *k = operand(ip, 1), *v = operand(ip, 2);
    const ibuf *mk = ip->node->nin > 3 ? operand(ip, 3) : NULL;
    bool mask_bool = mk && ip->node->in[3]->dtype == FC_BOOL;
    if (q->rank < 2 || k->rank < 2 || v->rank < 2)
        return ierr(ip, FC_ERR_INPUT, "q, k and v must have rank >= 2");
    int64_t Sq = q->shape[q->rank - 2], D = q->shape[q->rank - 1];
    int64_t Sk = k->shape[k->rank - 2], Dk = k->shape[k->rank - 1];
    int64_t Sv = v->shape[v->rank - 2], Dv = v->shape[v->rank - 1];
    if (Dk != D || Sv != Sk)
        return ierr(ip, FC_ERR_INPUT,
                    "shapes do not agree at run time (q [.., %lld, %lld], k [.., %lld, %lld], v [.., %lld, %lld])",
                    (long long)Sq, (long long)D, (long long)Sk, (long long)Dk, (long long)Sv, (long long)Dv);

    /* The mask as a [mbatch.., Mq, Mk] operand: a rank-0 or rank-1 mask
     * gets leading 1s, Mq is 1 or Sq and Mk is 1 or Sk. */
    int64_t mshape[FC_MAX_RANK + 2], Mq = 1, Mk = 1;
    int mrank = 0;
    if (mk) {
        int pad = mk->rank < 2 ? 2 - mk->rank : 0;
        for (int i = 0; i < pad; i++)
            mshape[mrank++] = 1;
        for (int i = 0; i < mk->rank; i++)
            mshape[mrank++] = mk->shape[i];
        Mq = mshape[mrank - 2];
        Mk = mshape[mrank - 1];
        if ((Mq != 1 && Mq != Sq) || (Mk != 1 && Mk != Sk))
            return ierr(ip, FC_ERR_INPUT, "the mask's last dims (%lld, %lld) do not broadcast to the scores (%lld, %lld)",
                        (long long)Mq, (long long)Mk, (long long)Sq, (long long)Sk);
    }

    int nops = mk ? 4 : 3;
    int brank[4] = {q->rank - 2, k->rank - 2, v->rank - 2, mrank - 2};
    const int64_t *bdims[4] = {q->shape, k->shape, v->shape, mshape};
    int64_t bshape[FC_MAX_RANK], bstride[4][FC_MAX_RANK];
    int nb;
    fc_status st = bcast_batch(ip, nops, brank, bdims, &nb, bshape, bstride);
    if (st != FC_OK)
        return st;
    int64_t oshape[FC_MAX_RANK + 2];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    oshape[nb] = Sq;
    oshape[nb + 1] = Dv;
    if ((st = set_result(ip, 0, nb + 2, oshape)) != FC_OK)
        return st;

    double scale = ip->node->a.scale;
    if (scale == FC_ATTENTION_DEFAULT_SCALE)
        scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    double *p = alloc_zeroed(ip->ctx, Sk, sizeof(double)); /* one row of probabilities */
    if (!p)
        return nomem(ip);

    double *o = result(ip, 0)->data;
    int64_t nbatch = prod(bshape, 0, nb);
    for (int64_t t = 0; t < nbatch; t++) {
        const double *qm = q->data + offset_of(t, nb, bshape, bstride[0]) * Sq * D;
        const double *km = k->data + offset_of(t, nb, bshape, bstride[1]) * Sk * D;
        const double *vm = v->data + offset_of(t, nb, bshape, bstride[2]) * Sk * Dv;
        const double *mm = mk ? mk->data + offset_of(t, nb, bshape, bstride[3]) * Mq * Mk : NULL;
        double *om = o + t * Sq * Dv;
        for (int64_t i = 0; i < Sq; i++) {
            /* Masked keys are left out, which is softmax with -inf there. */
            int64_t nk = ip->node->a.causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                double s = 0.0;
                for (int64_t d = 0; d < D; d++)
                    s += qm[i * D + d] * km[j * D + d];
                p[j] = s * scale;
                if (mm) {
                    double x = mm[(Mq == 1 ? 0 : i) * Mk + (Mk == 1 ? 0 : j)];
                    p[j] = mask_bool ? (x != 0.0 ? p[j] : -INFINITY) : p[j] + x;
                }
                m = scalar_op(FC_OP_MAX, m, p[j], 0);
            }
            for (int64_t j = 0; j < nk; j++)
                sum += p[j] = exp(p[j] - m);
            for (int64_t d = 0; d < Dv; d++) {
                double acc = 0.0;
                for (int64_t j = 0; j < nk; j++)
                    acc += p[j] * vm[j * Dv + d];
                om[i * Dv + d] = acc / sum; /* no keys: 0/0 = NaN */
            }
        }
    }
    fc_ctx_freemem(ip->ctx, p);
    return FC_OK;
}

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
static fc_status run_reshape(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_value *v = ip->node->out[0];
    int64_t shape[FC_MAX_RANK], known = 1;
    int unknown = -1;
    for (int i = 0; i < v->rank; i++) {
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0) {
            if (unknown >= 0)
                return ierr(ip, FC_ERR_INPUT, "more than one dim of the result is unknown");
            unknown = i;
            continue;
        }
        if (shape[i] != 0 && known > INT64_MAX / shape[i])
            return ierr(ip, FC_ERR_INPUT, "the result's element count overflows int64");
        known *= shape[i];
    }
    if (unknown >= 0) {
        if (known == 0 || x->numel % known != 0)
            return ierr(ip, FC_ERR_INPUT, "cannot infer dim %d: %lld elements into a multiple of %lld",
                        unknown, (long long)x->numel, (long long)known);
        shape[unknown] = x->numel / known;
    } else if (known != x->numel) {
        char s1[256], s2[256];
        return ierr(ip, FC_ERR_INPUT, "cannot reshape %s into %s at run time",
                    shape_str(x->rank, x->shape, s1, sizeof s1), shape_str(v->rank, shape, s2, sizeof s2));
    }
    fc_status st = set_result(ip, 0, v->rank, shape);
    if (st == FC_OK)
        copy_all(ip, x);
    return st;
}

static fc_status run_permute(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int perm[FC_MAX_RANK];
    bool seen[FC_MAX_RANK] = {false};
    if (a->nlist != x->rank)
        return ierr(ip, FC_ERR_INPUT, "perm has %d entries for rank %d", a->nlist, x->rank);
    for (int i = 0; i < x->rank; i++) {
        if (!norm_axis(a->list[i], x->rank, &perm[i]) || seen[perm[i]])
            return ierr(ip, FC_ERR_INPUT, "perm is not a permutation of the %d axes", x->rank);
        seen[perm[i]] = true;
    }
    int64_t oshape[FC_MAX_RANK], xstride[FC_MAX_RANK], ostride[FC_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        oshape[i] = x->shape[perm[i]];
    fc_status st = set_result(ip, 0, x->rank, oshape);
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
    bcast_strides(x->rank, x->shape, out->rank, strides);
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = x->data[offset_of(i, out->rank, out->shape, strides)];
}

/*
 * expand: the result's dims; an entry written -1 keeps x's (right-aligned)
 * dim. Every dim of x must equal its result dim or be 1.
 */
static fc_status run_expand(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_value *v = ip->node->out[0];
    const fc_attrs *a = &ip->node->a;
    int r = v->rank;
    int64_t shape[FC_MAX_RANK];
    char s1[256], s2[256];
    if (r < x->rank)
        return ierr(ip, FC_ERR_INPUT, "cannot expand rank %d to rank %d", x->rank, r);
    for (int i = 0; i < r; i++) {
        int j = i - (r - x->rank);
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0 && j >= 0 && i < a->nlist && a->list[i] == FC_DIM_INFER)
            shape[i] = x->shape[j];
        if (shape[i] < 0)
            return ierr(ip, FC_ERR_INPUT, "dim %d of the result is not known from the inputs", i);
        if (j >= 0 && x->shape[j] != 1 && x->shape[j] != shape[i])
            return ierr(ip, FC_ERR_INPUT, "cannot expand %s to %s at run time",
                        shape_str(x->rank, x->shape, s1, sizeof s1), shape_str(r, shape, s2, sizeof s2));
    }
    fc_status st = set_result(ip, 0, r, shape);
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

static fc_status run_slice(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    int axis;
    if (!norm_axis(a->axis, x->rank, &axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)a->axis, x->rank);
    if (a->step < 1)
        return ierr(ip, FC_ERR_INPUT, "step must be >= 1, not %lld", (long long)a->step);
    int64_t first, count, outer, len, inner;
    slice_range(x->shape[axis], a->start, a->end, a->step, &first, &count);
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = count;
    fc_status st = set_result(ip, 0, x->rank, shape);
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

static fc_status run_concat(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x0 = operand(ip, 0);
    int axis;
    if (!norm_axis(n->a.axis, x0->rank, &axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)n->a.axis, x0->rank);
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
            return ierr(ip, FC_ERR_INPUT, "operand shapes %s and %s differ off axis %d at run time",
                        shape_str(x0->rank, x0->shape, s1, sizeof s1),
                        shape_str(x->rank, x->shape, s2, sizeof s2), axis);
        if (shape[axis] > INT64_MAX - x->shape[axis])
            return ierr(ip, FC_ERR_INPUT, "the result's size overflows int64");
        shape[axis] += x->shape[axis];
    }
    fc_status st = set_result(ip, 0, x0->rank, shape);
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
static fc_status run_split(interp *ip)
{
    const fc_node *n = ip->node;
    const ibuf *x = operand(ip, 0);
    int axis;
    if (!norm_axis(n->a.axis, x->rank, &axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)n->a.axis, x->rank);
    if (n->a.nlist != n->nout)
        return ierr(ip, FC_ERR_INPUT, "%d sizes for %d results", n->a.nlist, n->nout);

    int64_t *sizes = alloc_zeroed(ip->ctx, n->nout, sizeof(int64_t));
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
            st = ierr(ip, FC_ERR_INPUT, "more than one size is unknown");
        else if (sizes[k] > total - used)
            st = ierr(ip, FC_ERR_INPUT, "sizes add up to more than the axis size %lld at run time",
                      (long long)total);
        else
            used += sizes[k];
    }
    if (st == FC_OK && unknown >= 0)
        sizes[unknown] = total - used;
    else if (st == FC_OK && used != total)
        st = ierr(ip, FC_ERR_INPUT, "sizes add up to %lld, not the axis size %lld at run time",
                  (long long)used, (long long)total);

    int64_t outer, len, inner, offset = 0;
    rows_at(x, axis, &outer, &len, &inner);
    for (int k = 0; k < n->nout && st == FC_OK; k++) {
        int64_t shape[FC_MAX_RANK];
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = sizes[k];
        if ((st = set_result(ip, k, x->rank, shape)) != FC_OK)
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

/* The concrete shape of a creation op's result: every dim must be known. */
static fc_status creation_shape(interp *ip, int64_t *shape)
{
    const fc_value *v = ip->node->out[0];
    for (int i = 0; i < v->rank; i++) {
        shape[i] = resolve_dim(ip, v->dims[i]);
        if (shape[i] < 0 && fc_dim_is_sym(v->dims[i]))
            return ierr(ip, FC_ERR_INPUT, "symbol %s is not bound by the inputs", sym_name(ip, v->dims[i]));
        if (shape[i] < 0)
            return ierr(ip, FC_ERR_INPUT, "dim %d of the result is not known", i);
    }
    return set_result(ip, 0, v->rank, shape);
}

static fc_status run_iota(interp *ip)
{
    const fc_value *v = ip->node->out[0];
    int64_t shape[FC_MAX_RANK], idx[FC_MAX_RANK];
    int axis = 0;
    if (v->rank > 0 && !norm_axis(ip->node->a.axis, v->rank, &axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)ip->node->a.axis,
                    v->rank);
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

static fc_status run_full(interp *ip)
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
static fc_status run_gather(interp *ip)
{
    const ibuf *t = operand(ip, 0), *ix = operand(ip, 1);
    int axis;
    if (!norm_axis(ip->node->a.axis, t->rank, &axis))
        return ierr(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)ip->node->a.axis,
                    t->rank);
    int orank = t->rank - 1 + ix->rank;
    if (orank > FC_MAX_RANK)
        return ierr(ip, FC_ERR_INPUT, "the result would have rank %d (max %d)", orank, FC_MAX_RANK);
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)axis);
    memcpy(shape + axis, ix->shape, sizeof(int64_t) * (size_t)ix->rank);
    memcpy(shape + axis + ix->rank, t->shape + axis + 1, sizeof(int64_t) * (size_t)(t->rank - axis - 1));
    fc_status st = set_result(ip, 0, orank, shape);
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

/* ================================================================ */
/* Running a graph.                                                  */
/* ================================================================ */

/* Is v a value of this graph (an id in range)? */
static bool known_value(const interp *ip, const fc_value *v)
{
    return v && v->id >= 0 && v->id < ip->nval;
}

static fc_status run_gemm(interp *ip); /* at the end of the file, with its own notes */

static fc_status run_node(interp *ip)
{
    const fc_node *n = ip->node;
    fc_status st = FC_ERR_UNSUPPORTED;

    /* Nodes are in topological order, each value defined once. A pass that
     * broke that gets an error here rather than an abort: the pass tests run
     * this oracle on the graphs that passes produce. */
    for (int k = 0; k < n->nin; k++)
        if (!known_value(ip, n->in[k]) || !ip->val[n->in[k]->id].data)
            return ierr(ip, FC_ERR_INPUT, "operand %d is used before it is computed", k);
    for (int k = 0; k < n->nout; k++)
        if (!known_value(ip, n->out[k]) || ip->val[n->out[k]->id].data)
            return ierr(ip, FC_ERR_INPUT, "result %d is defined twice", k);
    /* Every op is listed, without a default, so that a new op in ops.def
     * is a compile error (-Wswitch) until it is given semantics here. */
    switch (n->op) {
    case FC_OP_NEG: case FC_OP_ABS: case FC_OP_EXP: case FC_OP_LOG:
    case FC_OP_SQRT: case FC_OP_RSQRT: case FC_OP_RECIP: case FC_OP_SIN:
    case FC_OP_COS: case FC_OP_TANH: case FC_OP_SIGMOID: case FC_OP_RELU:
    case FC_OP_GELU: case FC_OP_GELU_TANH: case FC_OP_SILU: case FC_OP_ERF:
    case FC_OP_ADD: case FC_OP_SUB: case FC_OP_MUL: case FC_OP_DIV:
    case FC_OP_MAX: case FC_OP_MIN: case FC_OP_POW:
    case FC_OP_EQ: case FC_OP_NE: case FC_OP_LT:
    case FC_OP_LE: case FC_OP_GT: case FC_OP_GE:
    case FC_OP_WHERE: case FC_OP_CAST:
        st = run_elementwise(ip);
        break;
    case FC_OP_REDUCE_SUM: case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN: case FC_OP_REDUCE_MEAN:
        st = run_reduce(ip);
        break;
    case FC_OP_SOFTMAX: st = run_softmax(ip); break;
    case FC_OP_LAYERNORM: st = run_layernorm(ip); break;
    case FC_OP_RMSNORM: st = run_rmsnorm(ip); break;
    case FC_OP_MATMUL: st = run_matmul(ip); break;
    case FC_OP_ATTENTION: st = run_attention(ip); break;
    case FC_OP_GEMM: st = run_gemm(ip); break;
    case FC_OP_RESHAPE: st = run_reshape(ip); break;
    case FC_OP_PERMUTE: st = run_permute(ip); break;
    case FC_OP_EXPAND: st = run_expand(ip); break;
    case FC_OP_SLICE: st = run_slice(ip); break;
    case FC_OP_CONCAT: st = run_concat(ip); break;
    case FC_OP_SPLIT: st = run_split(ip); break;
    case FC_OP_IOTA: st = run_iota(ip); break;
    case FC_OP_FULL: st = run_full(ip); break;
    case FC_OP_GATHER: st = run_gather(ip); break;
    case FC_OP_COUNT: FC_UNREACHABLE("run_node: bad op");
    }
    if (st != FC_OK)
        return st;
    /* Round every result to its dtype: the one rounding per node. */
    for (int k = 0; k < n->nout; k++) {
        ibuf *b = result(ip, k);
        FC_ASSERT(b->data != NULL);
        for (int64_t i = 0; i < b->numel; i++)
            b->data[i] = fc_round_to_dtype(b->data[i], n->out[k]->dtype);
    }
    return FC_OK;
}

/* Check input i against parameter i, binding the symbols in its type. */
static fc_status bind_input(interp *ip, int i, const fc_interp_tensor *t)
{
    const fc_value *p = ip->g->params[i];
    char name[128], ty[256], sh[256];
    value_name(p, name, sizeof name);
    fc_type_str(ip->g, p->dtype, p->rank, p->dims, ty, sizeof ty);
    if (t->dtype != p->dtype)
        return ierr(ip, FC_ERR_INPUT, "input %d (%s) is %s, but the parameter is %s", i, name,
                    (unsigned)t->dtype < FC_DTYPE_COUNT ? fc_dtype_name(t->dtype) : "a bad dtype", ty);
    if (t->rank != p->rank)
        return ierr(ip, FC_ERR_INPUT, "input %d (%s) has rank %d, but the parameter is %s", i, name, t->rank, ty);
    shape_str(t->rank, t->shape, sh, sizeof sh);
    for (int d = 0; d < p->rank; d++) {
        fc_dim pd = p->dims[d];
        int64_t size = t->shape[d];
        if (size < 0)
            return ierr(ip, FC_ERR_INPUT, "input %d (%s) has a negative dim in shape %s", i, name, sh);
        if (!fc_dim_is_sym(pd)) {
            if (pd != size)
                return ierr(ip, FC_ERR_INPUT, "input %d (%s) has shape %s, but the parameter is %s", i, name,
                            sh, ty);
            continue;
        }
        int s = fc_dim_sym_index(pd);
        FC_ASSERT(s >= 0 && s < ip->g->nsyms);
        if (ip->sym[s] < 0) {
            ip->sym[s] = size;
            ip->sym_param[s] = i;
            ip->sym_dim[s] = d;
        } else if (ip->sym[s] != size) {
            char other[128];
            return ierr(ip, FC_ERR_INPUT,
                        "input %d (%s) has shape %s, so symbol %s = %lld, but input %d (%s) set %s = %lld "
                        "(dim %d)",
                        i, name, sh, sym_name(ip, pd), (long long)size, ip->sym_param[s],
                        value_name(ip->g->params[ip->sym_param[s]], other, sizeof other), sym_name(ip, pd),
                        (long long)ip->sym[s], ip->sym_dim[s]);
        }
    }
    fc_status st = alloc_buf(ip, p, t->rank, t->shape);
    if (st != FC_OK)
        return st;
    ibuf *b = &ip->val[p->id];
    if (b->numel > 0 && !t->data)
        return ierr(ip, FC_ERR_USAGE, "input %d (%s) has no data", i, name);
    for (int64_t j = 0; j < b->numel; j++)
        b->data[j] = fc_round_to_dtype(t->data[j], p->dtype);
    return FC_OK;
}

/* Weak scalars are operands without a defining node: give each a rank-0
 * buffer holding its exact value (each use rounds it to its node's dtype). */
static fc_status load_weak_scalars(interp *ip)
{
    for (int i = 0; i < ip->g->nnodes; i++) {
        const fc_node *n = ip->g->nodes[i];
        for (int k = 0; !n->dead && k < n->nin; k++) {
            const fc_value *v = n->in[k];
            if (!known_value(ip, v) || !v->weak || ip->val[v->id].data)
                continue; /* a bad id is reported when the node runs */
            fc_status st = alloc_buf(ip, v, 0, NULL);
            if (st != FC_OK)
                return st;
            ip->val[v->id].data[0] = v->scalar;
        }
    }
    return FC_OK;
}

/* Checks shared by both entry points, before anything is allocated. */
static fc_status check_call(fc_graph *g, int nin, bool have_inputs, int nout, bool have_outputs)
{
    fc_context *ctx = g->ctx;
    if (fc_graph_status(g) != FC_OK) {
        /* Keep the builder's message: it says what went wrong first. */
        if (fc_last_error(ctx)[0] == '\0')
            fc_set_error(ctx, fc_graph_status(g), "reference: graph %s has an earlier error", g->name);
        return fc_graph_status(g);
    }
    if (!g->returned)
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s has no return", g->name);
    if (nin != g->nparams || (nin > 0 && !have_inputs))
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s takes %d inputs, not %d", g->name,
                            g->nparams, nin);
    if (nout != g->noutputs || (nout > 0 && !have_outputs))
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s has %d outputs, not %d", g->name,
                            g->noutputs, nout);
    return FC_OK;
}

/* Element count of a host tensor's shape; -1 if the shape is bad or the
 * count overflows int64 (so that a caller's malloc fails, not overruns). */
static int64_t numel_or_bad(int rank, const int64_t *shape)
{
    int64_t n;
    if (rank < 0 || rank > FC_MAX_RANK)
        return -1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0)
            return -1;
    return shape_numel(rank, shape, &n) ? n : -1;
}

int64_t fc_interp_tensor_numel(const fc_interp_tensor *t)
{
    return numel_or_bad(t->rank, t->shape);
}

void fc_interp_tensor_release(fc_interp_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
}

fc_status fc_interp_run(fc_graph *g, const fc_interp_tensor *inputs, int nin, fc_interp_tensor *outputs,
                        int nout)
{
    if (!g)
        return FC_ERR_USAGE;
    for (int i = 0; outputs && i < nout; i++)
        memset(&outputs[i], 0, sizeof outputs[i]);
    fc_status st = check_call(g, nin, inputs != NULL, nout, outputs != NULL);
    if (st != FC_OK)
        return st;

    interp ip = {.g = g, .ctx = g->ctx, .nval = g->next_value_id};
    ip.sym = alloc_zeroed(ip.ctx, g->nsyms, sizeof(int64_t));
    ip.sym_param = alloc_zeroed(ip.ctx, g->nsyms, sizeof(int));
    ip.sym_dim = alloc_zeroed(ip.ctx, g->nsyms, sizeof(int));
    ip.val = alloc_zeroed(ip.ctx, ip.nval, sizeof(ibuf));
    if (!ip.sym || !ip.sym_param || !ip.sym_dim || !ip.val) {
        st = nomem(&ip);
        goto done;
    }
    for (int s = 0; s < g->nsyms; s++)
        ip.sym[s] = ip.sym_param[s] = -1;

    for (int i = 0; i < nin && st == FC_OK; i++)
        st = bind_input(&ip, i, &inputs[i]);
    if (st == FC_OK)
        st = load_weak_scalars(&ip);
    for (int i = 0; i < g->nnodes && st == FC_OK; i++) {
        if (g->nodes[i]->dead)
            continue;
        ip.node = g->nodes[i];
        st = run_node(&ip);
    }
    ip.node = NULL;

    /* Copy the results out; a value may be returned twice, so copy. */
    for (int i = 0; i < nout && st == FC_OK; i++) {
        const fc_value *v = g->outputs[i];
        if (!known_value(&ip, v) || !ip.val[v->id].data) {
            st = ierr(&ip, FC_ERR_INPUT, "result %d of graph %s is never computed", i, g->name);
            break;
        }
        const ibuf *b = &ip.val[v->id];
        fc_interp_tensor *t = &outputs[i];
        t->dtype = v->dtype;
        t->rank = b->rank;
        memcpy(t->shape, b->shape, sizeof t->shape);
        /* fc_ctx_malloc is malloc with fault injection: released with free(). */
        t->data = alloc_zeroed(ip.ctx, b->numel, sizeof(double));
        if (!t->data) {
            st = nomem(&ip);
            break;
        }
        for (int64_t j = 0; j < b->numel; j++)
            t->data[j] = fc_round_to_dtype(b->data[j], v->dtype);
    }
    if (st != FC_OK)
        for (int i = 0; i < nout; i++)
            fc_interp_tensor_release(&outputs[i]);

done:
    for (int i = 0; ip.val && i < ip.nval; i++)
        fc_ctx_freemem(ip.ctx, ip.val[i].data);
    fc_ctx_freemem(ip.ctx, ip.val);
    fc_ctx_freemem(ip.ctx, ip.sym);
    fc_ctx_freemem(ip.ctx, ip.sym_param);
    fc_ctx_freemem(ip.ctx, ip.sym_dim);
    return st;
}

/* ================================================================ */
/* fc_run_reference: fc_tensor storage in and out.                   */
/* ================================================================ */

int64_t fc_tensor_numel(const fc_tensor *t)
{
    return numel_or_bad(t->rank, t->shape);
}

void fc_tensor_release(fc_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
}

fc_status fc_run_reference(fc_graph *g, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout)
{
    if (!g)
        return FC_ERR_USAGE;
    fc_context *ctx = g->ctx;
    for (int i = 0; outputs && i < nout; i++)
        memset(&outputs[i], 0, sizeof outputs[i]);
    fc_status st = check_call(g, nin, inputs != NULL, nout, outputs != NULL);
    if (st != FC_OK)
        return st;

    fc_interp_tensor *din = alloc_zeroed(ctx, nin, sizeof *din);
    fc_interp_tensor *dout = alloc_zeroed(ctx, nout, sizeof *dout);
    if (!din || !dout) {
        st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
        goto done;
    }

    /* Decode the inputs' storage into doubles. */
    for (int i = 0; i < nin && st == FC_OK; i++) {
        const fc_tensor *t = &inputs[i];
        int64_t n = numel_or_bad(t->rank, t->shape);
        if ((unsigned)t->dtype >= FC_DTYPE_COUNT)
            st = fc_set_error(ctx, FC_ERR_USAGE, "reference: input %d has a bad dtype", i);
        else if (n < 0)
            st = fc_set_error(ctx, FC_ERR_USAGE,
                              "reference: input %d has a bad shape (rank, negative dim or overflow)", i);
        else if (n > 0 && !t->data)
            st = fc_set_error(ctx, FC_ERR_USAGE, "reference: input %d has no data", i);
        if (st != FC_OK)
            break;
        din[i].dtype = t->dtype;
        din[i].rank = t->rank;
        memcpy(din[i].shape, t->shape, sizeof din[i].shape);
        din[i].data = alloc_zeroed(ctx, n, sizeof(double));
        if (!din[i].data) {
            st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
            break;
        }
        for (int64_t j = 0; j < n; j++)
            din[i].data[j] = fc_interp_load(t->dtype, t->data, j);
    }

    if (st == FC_OK)
        st = fc_interp_run(g, din, nin, dout, nout);

    /* Encode the results into each dtype's storage. fc_ctx_malloc is
     * malloc (with fault injection), so fc_tensor_release can free() it. */
    for (int i = 0; i < nout && st == FC_OK; i++) {
        fc_tensor *t = &outputs[i];
        int64_t n = fc_interp_tensor_numel(&dout[i]);
        t->dtype = dout[i].dtype;
        t->rank = dout[i].rank;
        memcpy(t->shape, dout[i].shape, sizeof t->shape);
        t->data = alloc_zeroed(ctx, n, fc_dtype_size(t->dtype));
        if (!t->data) {
            st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
            break;
        }
        for (int64_t j = 0; j < n; j++)
            fc_interp_store(t->dtype, t->data, j, dout[i].data[j]);
    }
    if (st != FC_OK)
        for (int i = 0; i < nout; i++)
            fc_tensor_release(&outputs[i]);

done:
    for (int i = 0; din && i < nin; i++)
        fc_ctx_freemem(ctx, din[i].data);
    for (int i = 0; dout && i < nout; i++)
        fc_interp_tensor_release(&dout[i]);
    fc_ctx_freemem(ctx, din);
    fc_ctx_freemem(ctx, dout);
    return st;
}

/* ================================================================ */
/* gemm: the fused matmul that passes/epilogue.c makes (docs/GEMM.md). */
/* Added with that pass; kept apart from the ops above on purpose.    */
/* ================================================================ */

/*
 * gemm(a, b1..bn, [bias1..biasn], [residual], to=, spec=, scale=):
 *
 *   y[.., m, off_i + j] = act(scale * sum_k A[.., m, k] * Bi[.., k, j]
 *                             + bias_i[j] + residual[.., m, off_i + j])
 *
 * with A = a, or a's last two dims swapped when spec[0] (trans_a); Bi = bi,
 * or swapped when spec[1] (trans_b); off_i = N1 + .. + N(i-1). Everything is
 * float64, and run_node rounds the result to `to` once: the one rounding a
 * cuBLASLt epilogue makes, where the unfused graph rounded after the matmul
 * and after each op of its tail.
 */
static fc_status run_gemm(interp *ip)
{
    const fc_node *n = ip->node;
    const int64_t *spec = n->a.list;
    FC_ASSERT(n->a.nlist == 6); /* checked by the builder */
    bool ta = spec[0] != 0, tb = spec[1] != 0, has_bias = spec[3] != 0, has_res = spec[4] != 0;
    int nw = (int)spec[2], act = (int)spec[5];
    const ibuf *a = operand(ip, 0);
    if (a->rank < 2)
        return ierr(ip, FC_ERR_INPUT, "the left operand must have rank >= 2");
    int64_t M = a->shape[a->rank - (ta ? 1 : 2)], K = a->shape[a->rank - (ta ? 2 : 1)];

    /* Batch dims broadcast between a and each right operand; with several
     * right operands those are matrices, so the batch is a's. */
    int nb = 0;
    int64_t bshape[FC_MAX_RANK], Ntot = 0;
    for (int i = 0; i < nw; i++) {
        const ibuf *w = operand(ip, 1 + i);
        if (w->rank < 2 || w->shape[w->rank - (tb ? 1 : 2)] != K)
            return ierr(ip, FC_ERR_INPUT, "right operand %d does not match K = %lld at run time", i, (long long)K);
        int brank[2] = {a->rank - 2, w->rank - 2};
        const int64_t *bdims[2] = {a->shape, w->shape};
        int64_t bs[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
        int nbi;
        fc_status st = bcast_batch(ip, 2, brank, bdims, &nbi, bs, bstride);
        if (st != FC_OK)
            return st;
        if (i > 0 && (nbi != nb || memcmp(bs, bshape, sizeof(int64_t) * (size_t)nb)))
            return ierr(ip, FC_ERR_INPUT, "right operands have different batch dims");
        nb = nbi;
        memcpy(bshape, bs, sizeof bs);
        Ntot += w->shape[w->rank - (tb ? 2 : 1)];
    }
    int64_t oshape[FC_MAX_RANK];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    oshape[nb] = M;
    oshape[nb + 1] = Ntot;
    fc_status st = set_result(ip, 0, nb + 2, oshape);
    if (st != FC_OK)
        return st;
    double *y = result(ip, 0)->data; /* zeroed: the sums start there */
    int64_t nbatch = prod(bshape, 0, nb);

    int64_t off = 0;
    for (int i = 0; i < nw; i++) {
        const ibuf *w = operand(ip, 1 + i);
        int64_t N = w->shape[w->rank - (tb ? 2 : 1)];
        int brank[2] = {a->rank - 2, w->rank - 2};
        const int64_t *bdims[2] = {a->shape, w->shape};
        int64_t bs[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
        int nbi;
        st = bcast_batch(ip, 2, brank, bdims, &nbi, bs, bstride);
        if (st != FC_OK)
            return st;
        for (int64_t t = 0; t < nbatch; t++) {
            const double *am = a->data + offset_of(t, nb, bshape, bstride[0]) * M * K;
            const double *bm = w->data + offset_of(t, nb, bshape, bstride[1]) * K * N;
            double *ym = y + t * M * Ntot + off;
            /* k in the middle, as run_matmul: each sum still adds its
             * products in order k = 0..K-1. */
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++) {
                    double amk = ta ? am[k * M + m] : am[m * K + k];
                    for (int64_t j = 0; j < N; j++)
                        ym[m * Ntot + j] += amk * (tb ? bm[j * K + k] : bm[k * N + j]);
                }
        }
        off += N;
    }

    /* The epilogue, element by element: scale, bias, residual, activation. */
    const ibuf *res = has_res ? operand(ip, n->nin - 1) : NULL;
    if (res && res->numel != result(ip, 0)->numel)
        return ierr(ip, FC_ERR_INPUT, "the residual's shape differs from the result's at run time");
    int64_t total = nbatch * M * Ntot;
    for (int64_t e = 0; e < total; e++) {
        int64_t col = e % Ntot;
        double v = n->a.scale * y[e];
        if (has_bias) {
            /* col lies in right operand i's columns [off, off + N). */
            int64_t base = 0;
            for (int i = 0; i < nw; i++) {
                const ibuf *w = operand(ip, 1 + i), *b = operand(ip, 1 + nw + i);
                int64_t N = w->shape[w->rank - (tb ? 2 : 1)];
                if (col < base + N) {
                    if (b->numel != N)
                        return ierr(ip, FC_ERR_INPUT, "bias %d has %lld elements, not %lld", i, (long long)b->numel,
                                    (long long)N);
                    v += b->data[col - base];
                    break;
                }
                base += N;
            }
        }
        if (res)
            v += res->data[e];
        if (act == 1)
            v = scalar_op(FC_OP_RELU, v, 0, 0);
        else if (act == 2)
            v = scalar_op(FC_OP_GELU_TANH, v, 0, 0);
        y[e] = v;
    }
    return FC_OK;
}

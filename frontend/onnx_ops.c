/* onnx_ops.c - the op translation table: each ONNX op_type onto the IR's
 * ops (ir/ops.def), composing where the IR has no op of its own (Floor from
 * casts, ArgMax from a max and an iota, Tile from reshape and expand,
 * CumSum as a matmul with a triangle, ...). The IR has no constant tensors:
 * a constant operand is fc_full when it is one repeated value, else a
 * parameter with its data in the weights (ox_materialize). Opset
 * differences (attributes that became inputs) are read where they apply. */
#include "onnx_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef fc_status (*ox_fn)(ox_ctx *ox, const Onnx__NodeProto *n);

/* ---- attributes and operands --------------------------------------- */

static const char *as(const Onnx__NodeProto *n, const char *name, const char *def) {
    const Onnx__AttributeProto *a = attr(n, name);
    static char buf[64];
    if (!a || !a->has_s) return def;
    size_t l = a->s.len < sizeof buf - 1 ? a->s.len : sizeof buf - 1;
    memcpy(buf, a->s.data, l);
    buf[l] = 0;
    return buf;
}


static ox_const *kin(ox_ctx *ox, int i) { return has_in(ox, i) ? ox->in[i]->k : NULL; }

/* Operand i of a binary, compare or where op: a known one-element constant
 * that does not widen the result's rank becomes a weak scalar, as
 * `mul(%x, 0.5)` is written in .ir text, so that the passes see the same
 * patterns as in hand-written graphs (GELU's constants, attention's scale);
 * ONNX gives both operands one dtype, so the scalar's is the tensor's. */
static fc_value *operand(ox_ctx *ox, int i, int lo, int hi) {
    ox_const *k = kin(ox, i);
    if (!k || ox->in[i]->v || k->n != 1 || k->kind || k->dt == FC_BF16 || k->dt == FC_F16 || k->dt == FC_BOOL)
        return in(ox, i);
    int maxr = -1;
    for (int j = lo; j <= hi; j++)
        if (j != i && has_in(ox, j) && !(kin(ox, j) && !ox->in[j]->v)) {
            int r = ox->in[j]->v ? ox->in[j]->v->rank : 0;
            if (r > maxr) maxr = r;
        }
    if (maxr < k->rank) return in(ox, i);
    if (k->i) return k->i[0] == (int64_t)(double)k->i[0] ? fc_scalar_int(G, k->i[0]) : in(ox, i);
    return fc_scalar(G, k->f[0]);
}
static int rank_of(ox_ctx *ox, int i) {
    return ox->in[i]->v ? ox->in[i]->v->rank : ox->in[i]->k->rank;
}
static fc_dim dim_of(ox_ctx *ox, int i, int d) {
    return ox->in[i]->v ? ox->in[i]->v->dims[d] : ox->in[i]->k->shape[d];
}
static fc_dtype dt_of(ox_ctx *ox, int i) { return ox->in[i]->v ? ox->in[i]->v->dtype : ox->in[i]->k->dt; }

/* A list of ints: the attribute before opset `as_input_from`, input `idx`
 * (which must be known) from it on. Returns the count, -1 when absent. */
static int ints_arg(ox_ctx *ox, const char *name, int idx, int64_t as_input_from, int64_t *out, int cap,
                    fc_status *st) {
    *st = FC_OK;
    if (ox->opset < as_input_from) {
        const Onnx__AttributeProto *a = attr(ox->node, name);
        if (!a) return -1;
        if ((int)a->n_ints > cap) { *st = ERR("attribute '%s' has too many entries", name); return -1; }
        for (size_t i = 0; i < a->n_ints; i++) out[i] = a->ints[i];
        return (int)a->n_ints;
    }
    if (!has_in(ox, idx)) return -1;
    ox_const *k = kin(ox, idx);
    if (!k) { *st = ERR("input %d ('%s') must be known when importing (a constant or computed from shapes)", idx, name); return -1; }
    if (k->n > cap) { *st = ERR("input '%s' has too many entries", name); return -1; }
    if (k->kind)
        for (int64_t i = 0; i < k->n; i++)
            if (k->kind[i]) { *st = ERR("input '%s' depends on symbolic dims; bind them (--bind)", name); return -1; }
    for (int64_t i = 0; i < k->n; i++) out[i] = ox_const_int(k, i);
    return (int)k->n;
}


/* ---- elementwise --------------------------------------------------- */

typedef fc_value *(*un_fn)(fc_graph *, fc_value *);
typedef fc_value *(*bin_fn)(fc_graph *, fc_value *, fc_value *);

static const struct { const char *op; un_fn f; } unary_ops[] = {
    {"Neg", fc_neg}, {"Abs", fc_abs}, {"Exp", fc_exp}, {"Log", fc_log}, {"Sqrt", fc_sqrt},
    {"Reciprocal", fc_recip}, {"Sin", fc_sin}, {"Cos", fc_cos}, {"Tanh", fc_tanh}, {"Sigmoid", fc_sigmoid},
    {"Relu", fc_relu}, {"Erf", fc_erf},
};
static const struct { const char *op; bin_fn f; } binary_ops[] = {
    {"Add", fc_add}, {"Sub", fc_sub}, {"Mul", fc_mul}, {"Max", fc_max}, {"Min", fc_min},
    {"Equal", fc_eq}, {"Less", fc_lt}, {"LessOrEqual", fc_le}, {"Greater", fc_gt}, {"GreaterOrEqual", fc_ge},
    {"Sum", fc_add},
};

static fc_status op_unary(ox_ctx *ox, const Onnx__NodeProto *n) {
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++)
        if (!strcmp(n->op_type, unary_ops[i].op)) {
            fc_value *x = in(ox, 0);
            fc_dtype dt = x ? x->dtype : FC_F32;
            fc_value *y = unary_ops[i].f(G, x);
            /* The IR computes transcendental ops of integers in f32; ONNX keeps the type. */
            if (y && y->dtype != dt) y = fc_cast(G, y, dt);
            OUT(0, y);
            return FC_OK;
        }
    return ERR("internal: no unary op");
}

static fc_status op_binary(ox_ctx *ox, const Onnx__NodeProto *n) {
    bin_fn f = NULL;
    for (size_t i = 0; i < sizeof binary_ops / sizeof *binary_ops; i++)
        if (!strcmp(n->op_type, binary_ops[i].op)) f = binary_ops[i].f;
    if (ox->nin < 1 || !has_in(ox, 0)) return ERR("needs an input");
    if (ox->opset < 7 && ai(n, "broadcast", 0) && attr(n, "axis")) {
        /* Before opset 7, B broadcasts to A with its dims at A's dims axis,
         * axis+1, ..: B reshaped to A's rank, 1 elsewhere, broadcasts the
         * same way today. */
        fc_value *a = in(ox, 0), *b = in(ox, 1);
        if (!a || !b || ox->nin != 2) return ERR("needs two inputs");
        int64_t axis = ai(n, "axis", 0);
        if (axis < 0) axis += a->rank;
        if (axis < 0 || axis + b->rank > a->rank) return ERR("axis %lld does not place B [rank %d] in A [rank %d]",
                                                             (long long)ai(n, "axis", 0), b->rank, a->rank);
        fc_dim d[FC_MAX_RANK];
        for (int i = 0; i < a->rank; i++) d[i] = i < axis || i >= axis + b->rank ? 1 : b->dims[i - axis];
        OUT(0, f(G, a, fc_reshape(G, b, a->rank, d)));
        return FC_OK;
    }
    if (ox->nin == 2) {
        /* A weak scalar is an operand, never a result: one of the two stays a tensor. */
        fc_value *a = operand(ox, 0, 0, 1), *b = operand(ox, 1, 0, 1);
        if (a && b && a->weak && b->weak) a = in(ox, 0);
        OUT(0, f(G, a, b));
        return FC_OK;
    }
    fc_value *acc = in(ox, 0);
    for (int i = 1; i < ox->nin; i++) acc = f(G, acc, in(ox, i));
    OUT(0, acc);
    return FC_OK;
}

static fc_status op_mean(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *acc = in(ox, 0);
    for (int i = 1; i < ox->nin; i++) acc = fc_add(G, acc, in(ox, i));
    OUT(0, fc_div(G, acc, fc_scalar(G, ox->nin)));
    return FC_OK;
}

/* Integer division truncates in ONNX; the IR's div is true division. */
static fc_status op_div(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = in(ox, 0), *b = in(ox, 1);
    if (!a || !b) return ERR("needs 2 inputs");
    if (isf(a->dtype)) {
        fc_value *bs = operand(ox, 1, 0, 1);
        OUT(0, fc_div(G, a, bs ? bs : b));
        return FC_OK;
    }
    fc_value *q = fc_div(G, fc_cast(G, a, FC_F64), fc_cast(G, b, FC_F64));
    OUT(0, fc_cast(G, q, a->dtype));
    return FC_OK;
}

/* trunc(x) through an i64 cast, then floor and ceil from it. Exact for
 * |x| < 2^63, which holds every value that is not already an integer. */
static fc_value *trunc_of(ox_ctx *ox, fc_value *x) { return fc_cast(G, fc_cast(G, x, FC_I64), x->dtype); }
static fc_value *floor_of(ox_ctx *ox, fc_value *x) {
    fc_value *t = trunc_of(ox, x);
    return fc_sub(G, t, fc_cast(G, fc_gt(G, t, x), x->dtype));
}
static fc_status op_floor_ceil(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || !isf(x->dtype)) return ERR("needs a float input");
    fc_value *t = trunc_of(ox, x);
    /* Infinities and NaN pass through unchanged. */
    fc_value *r = !strcmp(n->op_type, "Floor") ? fc_sub(G, t, fc_cast(G, fc_gt(G, t, x), x->dtype))
                                               : fc_add(G, t, fc_cast(G, fc_lt(G, t, x), x->dtype));
    fc_value *keep = fc_ne(G, fc_sub(G, x, x), fc_scalar(G, 0)); /* inf - inf and nan - nan are nan */
    OUT(0, fc_where(G, keep, x, r));
    return FC_OK;
}
static fc_status op_round(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x || !isf(x->dtype)) return ERR("needs a float input");
    fc_value *f = floor_of(ox, fc_add(G, x, fc_scalar(G, 0.5)));
    /* Ties round to even: x + 0.5 landing on an odd integer goes one down. */
    fc_value *tie = fc_eq(G, fc_sub(G, f, x), fc_scalar(G, 0.5));
    fc_value *half = floor_of(ox, fc_mul(G, f, fc_scalar(G, 0.5)));
    fc_value *odd = fc_ne(G, fc_sub(G, f, fc_mul(G, half, fc_scalar(G, 2.0))), fc_scalar(G, 0));
    fc_value *down = fc_where(G, tie, fc_where(G, odd, fc_sub(G, f, fc_scalar(G, 1.0)), f), f);
    fc_value *keep = fc_ne(G, fc_sub(G, x, x), fc_scalar(G, 0));
    OUT(0, fc_where(G, keep, x, down));
    return FC_OK;
}

static fc_status op_pow(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = in(ox, 0);
    ox_const *kb = kin(ox, 1);
    /* A known one-element exponent (x ** 3 in GELU) is a weak scalar. */
    fc_value *b = a && isf(a->dtype) && kb && !ox->in[1]->v && kb->n == 1 && !kb->kind && kb->rank <= a->rank
                      ? fc_scalar(G, ox_const_dbl(kb, 0)) : in(ox, 1);
    if (!a || !b) return ERR("needs 2 inputs");
    if (!b->weak && b->dtype != a->dtype) b = fc_cast(G, b, a->dtype);
    fc_value *r = fc_pow(G, a, b);
    if (r && r->dtype != a->dtype) r = fc_cast(G, r, a->dtype);
    OUT(0, r);
    return FC_OK;
}

static fc_status op_mod(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = in(ox, 0), *b = in(ox, 1);
    if (!a || !b) return ERR("needs 2 inputs");
    fc_dtype dt = a->dtype;
    fc_value *fa = fc_cast(G, a, FC_F64), *fb = fc_cast(G, b, FC_F64);
    fc_value *q = fc_div(G, fa, fb);
    /* fmod=1: the sign of the dividend (C's fmod); fmod=0: of the divisor. */
    q = ai(n, "fmod", 0) ? trunc_of(ox, q) : floor_of(ox, q);
    OUT(0, fc_cast(G, fc_sub(G, fa, fc_mul(G, fb, q)), dt));
    return FC_OK;
}

static fc_status op_sign(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    fc_value *s = fc_sub(G, fc_cast(G, fc_gt(G, x, fc_scalar_int(G, 0)), x->dtype),
                         fc_cast(G, fc_lt(G, x, fc_scalar_int(G, 0)), x->dtype));
    OUT(0, s);
    return FC_OK;
}

static fc_status op_logic(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = in(ox, 0);
    if (!a) return ERR("needs an input");
    if (!strcmp(n->op_type, "Not")) { OUT(0, fc_eq(G, a, fc_scalar_int(G, 0))); return FC_OK; }
    fc_value *b = in(ox, 1);
    if (!b) return ERR("needs 2 inputs");
    /* And and Or as a where (one op, broadcasting as ONNX does; where(c,
     * true, false) is c to canonicalize, so an And with a mask that is all
     * true leaves the other mask as the attention recognizer reads it). */
    if (a->dtype == FC_BOOL && b->dtype == FC_BOOL && strcmp(n->op_type, "Xor")) {
        if (!strcmp(n->op_type, "And")) OUT(0, fc_where(G, a, b, fc_full(G, 0, NULL, 0.0, FC_BOOL)));
        else OUT(0, fc_where(G, a, fc_full(G, 0, NULL, 1.0, FC_BOOL), b));
        return FC_OK;
    }
    fc_value *ia = fc_cast(G, a, FC_I32), *ib = fc_cast(G, b, FC_I32);
    if (!strcmp(n->op_type, "And")) OUT(0, fc_ne(G, fc_mul(G, ia, ib), fc_scalar_int(G, 0)));
    else if (!strcmp(n->op_type, "Or")) OUT(0, fc_ne(G, fc_add(G, ia, ib), fc_scalar_int(G, 0)));
    else OUT(0, fc_ne(G, ia, ib));
    return FC_OK;
}

static fc_status op_isnan_isinf(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    if (!strcmp(n->op_type, "IsNaN")) { OUT(0, fc_ne(G, x, x)); return FC_OK; }
    bool pos = ai(n, "detect_positive", 1), neg = ai(n, "detect_negative", 1);
    fc_value *p = fc_eq(G, x, fc_scalar(G, INFINITY)), *m = fc_eq(G, x, fc_scalar(G, -INFINITY));
    if (pos && neg) OUT(0, fc_eq(G, fc_abs(G, x), fc_scalar(G, INFINITY)));
    else if (pos) OUT(0, p);
    else if (neg) OUT(0, m);
    else OUT(0, fc_full(G, x->rank, x->dims, 0, FC_BOOL));
    return FC_OK;
}

static fc_status op_where(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *a = operand(ox, 1, 0, 2), *b = operand(ox, 2, 0, 2);
    if (a && b && a->weak && b->weak) a = in(ox, 1);
    OUT(0, fc_where(G, in(ox, 0), a, b));
    return FC_OK;
}

static fc_status op_cast(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_dtype to;
    if (!strcmp(n->op_type, "CastLike")) {
        if (!has_in(ox, 1)) return ERR("needs 2 inputs");
        to = dt_of(ox, 1);
    } else {
        int64_t t = ai(n, "to", 0);
        if (!ox_dtype_from_onnx((int32_t)t, &to))
            return ERR("cast to %s is not supported", ox_onnx_dtype_name((int32_t)t));
    }
    fc_value *x = in(ox, 0);
    OUT(0, x && x->dtype == to ? x : fc_cast(G, x, to));
    return FC_OK;
}

static fc_status op_identity(ox_ctx *ox, const Onnx__NodeProto *n) {
    if (!has_in(ox, 0)) return ERR("needs an input");
    if (!strcmp(n->op_type, "Dropout") && (ai(n, "is_test", 1) == 0 || has_in(ox, 2))) {
        ox_const *t = kin(ox, 2);
        if (ai(n, "is_test", 1) == 0 || !t || ox_const_int(t, 0))
            return ERR("training mode is not supported (inference only: training_mode must be a known false)");
    }
    if (kin(ox, 0) && !ox->in[0]->v) {
        /* Known data stays known. */
        ox_const *k = kin(ox, 0);
        ox_const *c = ox_const_new(k->dt, k->rank, k->shape);
        if (!c) return FC_ERR_NOMEM;
        for (int64_t i = 0; i < k->n; i++) {
            if (c->f) c->f[i] = k->f[i];
            else c->i[i] = k->i[i];
        }
        if (k->kind) {
            c->kind = malloc((size_t)k->n);
            if (!c->kind) { ox_const_free(c); return FC_ERR_NOMEM; }
            memcpy(c->kind, k->kind, (size_t)k->n);
        }
        ox->out_k[0] = c;
    } else {
        OUT(0, in(ox, 0));
    }
    /* Dropout in inference: the mask output is all true. */
    if (ox->nout > 1 && !strcmp(n->op_type, "Dropout")) {
        fc_value *x = in(ox, 0);
        if (x) OUT(1, fc_full(G, x->rank, x->dims, 1, FC_BOOL));
    }
    return FC_OK;
}

/* ---- activations ---------------------------------------------------- */

static fc_status op_act(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    const char *op = n->op_type;
    fc_value *zero = fc_scalar(G, 0), *y = NULL;
    if (!strcmp(op, "LeakyRelu")) {
        y = fc_where(G, fc_lt(G, x, zero), fc_mul(G, x, fc_scalar(G, af(n, "alpha", 0.01))), x);
    } else if (!strcmp(op, "Elu") || !strcmp(op, "Celu")) {
        double a = af(n, "alpha", 1.0);
        fc_value *e = !strcmp(op, "Celu") ? fc_exp(G, fc_div(G, x, fc_scalar(G, a))) : fc_exp(G, x);
        y = fc_where(G, fc_lt(G, x, zero), fc_mul(G, fc_sub(G, e, fc_scalar(G, 1.0)), fc_scalar(G, a)), x);
    } else if (!strcmp(op, "Selu")) {
        double a = af(n, "alpha", 1.67326319217681884765625), gm = af(n, "gamma", 1.05070102214813232421875);
        fc_value *e = fc_mul(G, fc_sub(G, fc_exp(G, x), fc_scalar(G, 1.0)), fc_scalar(G, a));
        y = fc_mul(G, fc_where(G, fc_le(G, x, zero), e, x), fc_scalar(G, gm));
    } else if (!strcmp(op, "Softplus")) {
        /* log(1 + exp(x)), written so that large x does not overflow. */
        fc_value *ax = fc_abs(G, x);
        y = fc_add(G, fc_relu(G, x), fc_log(G, fc_add(G, fc_exp(G, fc_neg(G, ax)), fc_scalar(G, 1.0))));
    } else if (!strcmp(op, "Softsign")) {
        y = fc_div(G, x, fc_add(G, fc_abs(G, x), fc_scalar(G, 1.0)));
    } else if (!strcmp(op, "Mish")) {
        fc_value *ax = fc_abs(G, x);
        fc_value *sp = fc_add(G, fc_relu(G, x), fc_log(G, fc_add(G, fc_exp(G, fc_neg(G, ax)), fc_scalar(G, 1.0))));
        y = fc_mul(G, x, fc_tanh(G, sp));
    } else if (!strcmp(op, "HardSwish")) {
        y = fc_hardswish(G, x);
    } else if (!strcmp(op, "HardSigmoid")) {
        double a = af(n, "alpha", 0.2), b = af(n, "beta", 0.5);
        y = fc_max(G, fc_min(G, fc_add(G, fc_mul(G, x, fc_scalar(G, a)), fc_scalar(G, b)), fc_scalar(G, 1.0)), zero);
    } else if (!strcmp(op, "ThresholdedRelu")) {
        y = fc_where(G, fc_gt(G, x, fc_scalar(G, af(n, "alpha", 1.0))), x, zero);
    } else if (!strcmp(op, "PRelu")) {
        fc_value *slope = in(ox, 1);
        /* Before opset 7 a 1-D slope is per channel (axis 1). */
        if (slope && ox->opset < 7 && slope->rank == 1 && x->rank > 2 && slope->dims[0] == x->dims[1] &&
            slope->dims[0] != x->dims[x->rank - 1]) {
            fc_dim sd[FC_MAX_RANK];
            for (int d = 0; d < x->rank - 1; d++) sd[d] = d == 0 ? slope->dims[0] : 1;
            slope = fc_reshape(G, slope, x->rank - 1, sd);
        }
        y = fc_where(G, fc_lt(G, x, zero), fc_mul(G, x, slope), x);
    } else if (!strcmp(op, "Sinh") || !strcmp(op, "Cosh")) {
        fc_value *e = fc_exp(G, x), *r = fc_exp(G, fc_neg(G, x));
        y = fc_mul(G, op[0] == 'S' && op[3] == 'h' ? fc_sub(G, e, r) : fc_add(G, e, r), fc_scalar(G, 0.5));
    } else if (!strcmp(op, "Asinh")) {
        y = fc_log(G, fc_add(G, x, fc_sqrt(G, fc_add(G, fc_mul(G, x, x), fc_scalar(G, 1.0)))));
    } else if (!strcmp(op, "Acosh")) {
        y = fc_log(G, fc_add(G, x, fc_sqrt(G, fc_sub(G, fc_mul(G, x, x), fc_scalar(G, 1.0)))));
    } else if (!strcmp(op, "Atanh")) {
        y = fc_mul(G, fc_log(G, fc_div(G, fc_add(G, x, fc_scalar(G, 1.0)), fc_sub(G, fc_scalar(G, 1.0), x))), fc_scalar(G, 0.5));
    } else if (!strcmp(op, "Shrink")) {
        double bias = af(n, "bias", 0), lambd = af(n, "lambd", 0.5);
        y = fc_where(G, fc_lt(G, x, fc_scalar(G, -lambd)), fc_add(G, x, fc_scalar(G, bias)),
                     fc_where(G, fc_gt(G, x, fc_scalar(G, lambd)), fc_sub(G, x, fc_scalar(G, bias)), zero));
    } else if (!strcmp(op, "Gelu")) {
        const char *ap = as(n, "approximate", "none");
        y = !strcmp(ap, "tanh") ? fc_gelu_tanh(G, x) : fc_gelu(G, x);
    } else if (!strcmp(op, "Tan")) {
        y = fc_div(G, fc_sin(G, x), fc_cos(G, x));
    } else if (!strcmp(op, "Clip")) {
        fc_value *lo = NULL, *hi = NULL;
        if (ox->opset < 11) {
            if (attr(n, "min")) lo = fc_scalar(G, af(n, "min", 0));
            if (attr(n, "max")) hi = fc_scalar(G, af(n, "max", 0));
        } else {
            lo = in(ox, 1);
            hi = in(ox, 2);
        }
        y = x;
        if (lo) y = fc_max(G, y, lo);
        if (hi) y = fc_min(G, y, hi);
    }
    if (y && y->dtype != x->dtype) y = fc_cast(G, y, x->dtype);
    OUT(0, y);
    return FC_OK;
}

/* ---- shape ops ------------------------------------------------------ */

static fc_status op_shape(ox_ctx *ox, const Onnx__NodeProto *n) {
    if (!has_in(ox, 0)) return ERR("needs an input");
    int r = rank_of(ox, 0);
    int64_t start = ai(n, "start", 0), end = ai(n, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t cnt = end > start ? end - start : 0;
    bool size = !strcmp(n->op_type, "Size");
    int64_t sh[1] = {cnt};
    ox_const *k = ox_const_new(FC_I64, size ? 0 : 1, sh);
    if (!k) return FC_ERR_NOMEM;
    k->kind = calloc((size_t)(cnt ? cnt : 1), 1);
    if (!k->kind) { ox_const_free(k); return FC_ERR_NOMEM; }
    if (size) {
        k->i[0] = 1;
        for (int d = 0; d < r; d++) {
            fc_dim v = dim_of(ox, 0, d);
            if (v < 0) k->kind[0] = OX_UNKNOWN;
            else k->i[0] *= v;
        }
    } else {
        for (int64_t d = 0; d < cnt; d++) {
            fc_dim v = dim_of(ox, 0, (int)(start + d));
            k->i[d] = v;
            k->kind[d] = v < 0 ? OX_SYM : OX_KNOWN;
        }
    }
    ox->out_k[0] = k;
    return FC_OK;
}

/* Reshape's target from a known shape input: 0 copies the input's dim
 * (unless allowzero), symbolic dims pass through, and one element computed
 * from symbols becomes the inferred dim. */
static fc_status op_reshape(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    fc_dim dims[FC_MAX_RANK];
    int r;
    if (ox->opset < 5) return ERR("Reshape before opset 5 is not supported");
    ox_const *k = kin(ox, 1);
    if (!k) return ERR("the target shape must be known when importing (a constant or computed from shapes)");
    if (k->n > FC_MAX_RANK) return ERR("target rank %lld is over %d", (long long)k->n, FC_MAX_RANK);
    r = (int)k->n;
    bool allowzero = ai(n, "allowzero", 0);
    int infer = 0;
    for (int d = 0; d < r; d++) {
        int kind = k->kind ? k->kind[d] : OX_KNOWN;
        int64_t v = ox_const_int(k, d);
        if (kind == OX_UNKNOWN || (kind == OX_KNOWN && v == -1)) { dims[d] = FC_DIM_INFER; infer++; }
        else if (kind == OX_SYM) dims[d] = v;
        else if (v == 0 && !allowzero) {
            if (d >= x->rank) return ERR("shape entry %d is 0 (copy) past the input's rank %d", d, x->rank);
            dims[d] = x->dims[d];
        } else if (v < 0) return ERR("shape entry %d is %lld", d, (long long)v);
        else dims[d] = v;
    }
    if (infer > 1) return ERR("the target shape has %d dims that are unknown or computed from symbols; bind the symbols (--bind)", infer);
    OUT(0, fc_reshape(G, x, r, dims));
    return FC_OK;
}

static fc_status op_transpose(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int perm[FC_MAX_RANK];
    const Onnx__AttributeProto *a = attr(n, "perm");
    if (a && (int)a->n_ints != x->rank) return ERR("perm has %zu entries for rank %d", a->n_ints, x->rank);
    for (int d = 0; d < x->rank; d++) perm[d] = a ? norm_axis(a->ints[d], x->rank) : x->rank - 1 - d;
    OUT(0, fc_permute(G, x, x->rank, perm));
    return FC_OK;
}

static fc_status op_squeeze_unsqueeze(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int64_t axes[FC_MAX_RANK * 2];
    fc_status st;
    int na = ints_arg(ox, "axes", 1, 13, axes, FC_MAX_RANK * 2, &st);
    if (st) return st;
    bool unsq = !strcmp(n->op_type, "Unsqueeze");
    fc_dim dims[FC_MAX_RANK];
    int r = 0;
    if (unsq) {
        if (na < 0) return ERR("needs axes");
        int out_r = x->rank + na;
        if (out_r > FC_MAX_RANK) return ERR("rank %d is over %d", out_r, FC_MAX_RANK);
        bool ins[FC_MAX_RANK * 2] = {0};
        for (int i = 0; i < na; i++) {
            int a = norm_axis(axes[i], out_r);
            if (a < 0 || a >= out_r || ins[a]) return ERR("bad axis %lld", (long long)axes[i]);
            ins[a] = true;
        }
        for (int d = 0, s = 0; d < out_r; d++) dims[r++] = ins[d] ? 1 : x->dims[s++];
    } else {
        bool drop[FC_MAX_RANK] = {0};
        for (int i = 0; i < na; i++) {
            int a = norm_axis(axes[i], x->rank);
            if (a < 0 || a >= x->rank) return ERR("bad axis %lld", (long long)axes[i]);
            if (x->dims[a] != 1) return ERR("axis %d has size %lld, not 1", a, (long long)x->dims[a]);
            drop[a] = true;
        }
        for (int d = 0; d < x->rank; d++) {
            if (na < 0 && x->dims[d] < 0) return ERR("squeezing every size-1 dim of a symbolic shape");
            if (!(na < 0 ? x->dims[d] == 1 : drop[d])) dims[r++] = x->dims[d];
        }
    }
    OUT(0, fc_reshape(G, x, r, dims));
    return FC_OK;
}

static fc_status op_flatten(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axis = norm_axis(ai(n, "axis", 1), x->rank);
    fc_dim dims[2] = {1, 1};
    for (int d = 0; d < x->rank; d++) {
        fc_dim *p = &dims[d < axis ? 0 : 1];
        if (x->dims[d] < 0) *p = FC_DIM_INFER;
        else if (*p != FC_DIM_INFER) *p *= x->dims[d];
    }
    if (dims[0] == FC_DIM_INFER && dims[1] == FC_DIM_INFER) return ERR("both sides have symbolic dims; bind them (--bind)");
    OUT(0, fc_reshape(G, x, 2, dims));
    return FC_OK;
}

static fc_status op_concat(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *xs[64];
    int k = 0;
    for (int i = 0; i < ox->nin; i++)
        if (has_in(ox, i)) {
            fc_value *v = in(ox, i);
            /* ONNX allows empty inputs to Concat; they add nothing. */
            bool empty = false;
            for (int d = 0; v && d < v->rank; d++) empty |= v->dims[d] == 0;
            if (!empty || (k == 0 && i == ox->nin - 1)) xs[k++] = v;
        }
    if (!k) return ERR("needs an input");
    OUT(0, fc_concat(G, k, xs, norm_axis(ai(n, "axis", 0), xs[0] ? xs[0]->rank : 1)));
    return FC_OK;
}

static fc_status op_split(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axis = norm_axis(ai(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    int64_t sz[16];
    fc_status st;
    int ns = ox->opset < 13 && ox->opset >= 2 ? ints_arg(ox, "split", 1, 13, sz, 16, &st) : ints_arg(ox, "split", 1, 13, sz, 16, &st);
    if (st) return st;
    fc_dim sizes[16];
    int nout = ox->nout;
    if (ns < 0) {
        fc_dim len = x->dims[axis];
        if (len < 0) return ERR("splitting a symbolic dim into equal parts; bind it (--bind)");
        if (nout < 1) return ERR("no outputs");
        int64_t part = (len + nout - 1) / nout;
        for (int i = 0; i < nout; i++) {
            int64_t s = len - part * i;
            sizes[i] = s < 0 ? 0 : s > part ? part : s;
        }
    } else {
        if (ns != nout) return ERR("split has %d sizes for %d outputs", ns, nout);
        for (int i = 0; i < ns; i++) {
            if (sz[i] < 0) return ERR("split size %d is %lld", i, (long long)sz[i]);
            sizes[i] = sz[i];
        }
    }
    fc_value *outs[16];
    fc_split(G, x, axis, nout, sizes, outs);
    for (int i = 0; i < nout; i++) OUT(i, outs[i]);
    return FC_OK;
}

/* ONNX Slice: starts/ends/axes/steps lists. Negative steps go through a
 * gather with descending indices (the IR's slice steps forward only). */
static fc_status op_slice(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int64_t st_[FC_MAX_RANK], en[FC_MAX_RANK], ax[FC_MAX_RANK], sp[FC_MAX_RANK];
    fc_status st;
    int ns = ints_arg(ox, "starts", 1, 10, st_, FC_MAX_RANK, &st);
    if (st) return st;
    int ne = ints_arg(ox, "ends", 2, 10, en, FC_MAX_RANK, &st);
    if (st) return st;
    int na = ints_arg(ox, "axes", 3, 10, ax, FC_MAX_RANK, &st);
    if (st) return st;
    int np = ox->opset >= 10 ? ints_arg(ox, "steps", 4, 10, sp, FC_MAX_RANK, &st) : -1;
    if (st) return st;
    if (ns < 0 || ne != ns) return ERR("starts and ends must be given, of one length");
    if (na >= 0 && na != ns) return ERR("axes has %d entries for %d starts", na, ns);
    if (np >= 0 && np != ns) return ERR("steps has %d entries for %d starts", np, ns);
    fc_value *y = x;
    for (int i = 0; i < ns; i++) {
        int a = norm_axis(na >= 0 ? ax[i] : i, x->rank);
        if (a < 0 || a >= x->rank) return ERR("bad axis");
        int64_t step = np >= 0 ? sp[i] : 1;
        if (step == 0) return ERR("step 0");
        fc_dim len = y->dims[a];
        if (step > 0) {
            int64_t s = st_[i], e = en[i];
            if (len < 0 && (s != 0 || e < INT32_MAX))
                return ERR("slicing symbolic dim %d; bind it (--bind)", a);
            y = fc_slice(G, y, a, s, e, step);
            continue;
        }
        if (len < 0) return ERR("a negative step over symbolic dim %d; bind it (--bind)", a);
        int64_t s = st_[i], e = en[i];
        if (s < 0) s += len;
        if (e < 0) e += len;
        s = s < -1 ? -1 : s > len - 1 ? len - 1 : s;
        e = e < -1 ? -1 : e > len - 1 ? len - 1 : e;
        int64_t cnt = s > e ? (s - e + (-step) - 1) / (-step) : 0;
        if (cnt == 0) {
            fc_dim d2[FC_MAX_RANK];
            memcpy(d2, y->dims, sizeof d2);
            d2[a] = 0;
            y = fc_full(G, y->rank, d2, 0, y->dtype);
            continue;
        }
        fc_dim c1[1] = {cnt};
        fc_value *idx = fc_add(G, fc_mul(G, fc_iota(G, 1, c1, 0, FC_I64), fc_scalar_int(G, step)), fc_scalar_int(G, s));
        y = fc_gather(G, y, idx, a);
    }
    OUT(0, y);
    return FC_OK;
}

/* Negative indices count from the end in ONNX. */
fc_value *ox_wrap_index(ox_ctx *ox, fc_value *idx, fc_dim len) {
    if (len < 0) return idx;
    return fc_where(G, fc_lt(G, idx, fc_scalar_int(G, 0)), fc_add(G, idx, fc_scalar_int(G, len)), idx);
}

static fc_status op_gather(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *idx = in(ox, 1);
    if (!x || !idx) return ERR("needs 2 inputs");
    int axis = norm_axis(ai(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("bad axis");
    if (idx->rank == 0) {
        /* A scalar index drops the axis: gather with [1] and reshape. A
         * known one (x[:, 0], x[..., -1]: a pooler's first token, the last
         * token's logits) is a slice, a view the consumer can read in place. */
        fc_dim one[1] = {1};
        ox_const *k = kin(ox, 1);
        fc_value *g1;
        if (k && k->n == 1 && (!k->kind || k->kind[0] == OX_KNOWN) && x->dims[axis] >= 0) {
            int64_t i = ox_const_int(k, 0);
            if (i < 0) i += x->dims[axis];
            if (i < 0 || i >= x->dims[axis]) return ERR("index %lld out of range", (long long)ox_const_int(k, 0));
            g1 = fc_slice(G, x, axis, i, i + 1, 1);
        } else {
            g1 = fc_gather(G, x, fc_reshape(G, ox_wrap_index(ox, idx, x->dims[axis]), 1, one), axis);
        }
        fc_dim dims[FC_MAX_RANK];
        int r = 0;
        for (int d = 0; d < x->rank; d++)
            if (d != axis) dims[r++] = x->dims[d];
        OUT(0, fc_reshape(G, g1, r, dims));
        return FC_OK;
    }
    OUT(0, fc_gather(G, x, ox_wrap_index(ox, idx, x->dims[axis]), axis));
    return FC_OK;
}

static bool static_shape(const fc_value *v) {
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] < 0) return false;
    return true;
}

/* GatherElements: a gather from the flattened input at the linear index of
 * each element, with the index along `axis` replaced by the given one. */
static fc_status op_gather_elements(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *idx = in(ox, 1);
    if (!x || !idx) return ERR("needs 2 inputs");
    if (!static_shape(x) || !static_shape(idx)) return ERR("symbolic shapes; bind them (--bind)");
    int r = x->rank, axis = norm_axis(ai(n, "axis", 0), r);
    if (axis < 0 || axis >= r || idx->rank != r) return ERR("bad axis or index rank");
    OUT(0, ox_take_along(ox, x, axis, ox_wrap_index(ox, fc_cast(G, idx, FC_I64), x->dims[axis])));
    return FC_OK;
}

fc_value *ox_take_along(ox_ctx *ox, fc_value *x, int axis, fc_value *idx) {
    fc_value *lin = NULL;
    int64_t stride = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        fc_value *c = d == axis ? idx : fc_iota(G, idx->rank, idx->dims, d, FC_I64);
        fc_value *t = fc_mul(G, c, fc_scalar_int(G, stride));
        lin = lin ? fc_add(G, lin, t) : t;
        stride *= x->dims[d];
    }
    fc_dim flat[1] = {stride};
    return fc_gather(G, fc_reshape(G, x, 1, flat), lin, 0);
}

static fc_status op_gather_nd(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *idx = in(ox, 1);
    if (!x || !idx) return ERR("needs 2 inputs");
    if (!static_shape(x) || !static_shape(idx) || idx->rank < 1) return ERR("symbolic shapes; bind them (--bind)");
    /* The first batch_dims dims are shared: data and indices go together
     * along them, an iota of the indices' leading dims in the linear index. */
    int64_t b = ai(n, "batch_dims", 0), k = idx->dims[idx->rank - 1];
    if (b < 0 || b >= idx->rank || b >= x->rank) return ERR("batch_dims %lld out of range", (long long)b);
    for (int d = 0; d < b; d++)
        if (x->dims[d] != idx->dims[d]) return ERR("the batch dims of data and indices differ");
    if (k < 1 || b + k > x->rank) return ERR("index depth %lld for rank %d", (long long)k, x->rank);
    k += b;
    fc_value *ii = fc_cast(G, idx, FC_I64), *lin = NULL;
    int64_t stride = 1;
    fc_dim lead[FC_MAX_RANK];
    int ir = idx->rank - 1;
    memcpy(lead, idx->dims, sizeof(fc_dim) * (size_t)ir);
    for (int64_t j = k - 1; j >= 0; j--) {
        fc_value *c = j < b ? fc_iota(G, ir, lead, (int)j, FC_I64)
                            : ox_wrap_index(ox, fc_reshape(G, fc_slice(G, ii, idx->rank - 1, j - b, j - b + 1, 1), ir, lead),
                                            x->dims[j]);
        fc_value *t = fc_mul(G, c, fc_scalar_int(G, stride));
        lin = lin ? fc_add(G, lin, t) : t;
        stride *= x->dims[j];
    }
    fc_dim tdims[FC_MAX_RANK];
    int tr = 0;
    tdims[tr++] = stride;
    for (int d = (int)k; d < x->rank; d++) tdims[tr++] = x->dims[d];
    OUT(0, fc_gather(G, fc_reshape(G, x, tr, tdims), lin, 0));
    return FC_OK;
}

/* Expand broadcasts both ways (a 1 in the shape keeps the input's dim). */
static fc_status op_expand(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    ox_const *k = kin(ox, 1);
    if (!k) return ERR("the target shape must be known when importing");
    if (k->n > FC_MAX_RANK) return ERR("rank over %d", FC_MAX_RANK);
    int r = (int)k->n > x->rank ? (int)k->n : x->rank;
    fc_dim want[FC_MAX_RANK], xd[FC_MAX_RANK];
    for (int d = 0; d < r; d++) {
        int i = d - (r - (int)k->n), j = d - (r - x->rank);
        fc_dim s = i >= 0 ? ox_const_int(k, i) : 1;
        if (i >= 0 && k->kind && k->kind[i] == OX_UNKNOWN) return ERR("the target shape is computed from symbols; bind them (--bind)");
        if (s < 0 && !(i >= 0 && k->kind && k->kind[i] == OX_SYM)) return ERR("shape entry %d is %lld", i, (long long)s);
        xd[d] = j >= 0 ? x->dims[j] : 1;
        want[d] = s == 1 ? xd[d] : s;
    }
    if (r > x->rank) x = fc_reshape(G, x, r, xd);
    bool same = true;
    for (int d = 0; d < r; d++) same &= want[d] == xd[d];
    OUT(0, same ? x : fc_expand(G, x, r, want));
    return FC_OK;
}

static fc_status op_tile(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int64_t rep[FC_MAX_RANK];
    fc_status st;
    int nr = ints_arg(ox, "repeats", 1, 0, rep, FC_MAX_RANK, &st);
    if (st) return st;
    if (nr != x->rank) return ERR("repeats has %d entries for rank %d", nr, x->rank);
    for (int d = 0; d < nr; d++)
        if (rep[d] < 0 || rep[d] > ((int64_t)1 << 31)) return ERR("repeats entry %d is %lld", d, (long long)rep[d]);
    if (2 * x->rank > FC_MAX_RANK) return ERR("rank %d is too large to tile (the IR's rank is at most %d)", x->rank, FC_MAX_RANK);
    fc_dim a[FC_MAX_RANK], b[FC_MAX_RANK], c[FC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) {
        a[2 * d] = 1;
        a[2 * d + 1] = x->dims[d];
        b[2 * d] = rep[d];
        b[2 * d + 1] = x->dims[d];
        if (x->dims[d] < 0 && rep[d] != 1) return ERR("tiling symbolic dim %d; bind it (--bind)", d);
        c[d] = x->dims[d] < 0 ? x->dims[d] : rep[d] * x->dims[d];
    }
    fc_value *y = fc_expand(G, fc_reshape(G, x, 2 * x->rank, a), 2 * x->rank, b);
    OUT(0, fc_reshape(G, y, x->rank, c));
    return FC_OK;
}

static fc_status op_constant(ox_ctx *ox, const Onnx__NodeProto *n) {
    const Onnx__AttributeProto *a;
    ox_const *k = NULL;
    int64_t sh[1] = {0};
    if ((a = attr(n, "value")) && a->t) {
        fc_status st = ox_tensor_to_const(ox, a->t, NULL, &k);
        if (st) return st;
    } else if ((a = attr(n, "value_float")) || (a = attr(n, "value_int"))) {
        bool f = !strcmp(a->name, "value_float");
        if (!(k = ox_const_new(f ? FC_F32 : FC_I64, 0, sh))) return FC_ERR_NOMEM;
        if (f) k->f[0] = a->f;
        else k->i[0] = a->i;
    } else if ((a = attr(n, "value_floats")) || (a = attr(n, "value_ints"))) {
        bool f = !strcmp(a->name, "value_floats");
        sh[0] = (int64_t)(f ? a->n_floats : a->n_ints);
        if (!(k = ox_const_new(f ? FC_F32 : FC_I64, 1, sh))) return FC_ERR_NOMEM;
        for (int64_t i = 0; i < sh[0]; i++) {
            if (f) k->f[i] = a->floats[i];
            else k->i[i] = a->ints[i];
        }
    } else {
        return ERR("only value, value_float(s) and value_int(s) are supported (not sparse or string values)");
    }
    ox->out_k[0] = k;
    return FC_OK;
}

static fc_status op_constant_of_shape(ox_ctx *ox, const Onnx__NodeProto *n) {
    ox_const *k = kin(ox, 0);
    if (!k) return ERR("the shape must be known when importing");
    if (k->n > FC_MAX_RANK) return ERR("rank over %d", FC_MAX_RANK);
    fc_dim dims[FC_MAX_RANK];
    for (int d = 0; d < k->n; d++) {
        if (k->kind && k->kind[d] == OX_UNKNOWN) return ERR("the shape is computed from symbols; bind them (--bind)");
        dims[d] = ox_const_int(k, d);
        if (dims[d] < 0 && !(k->kind && k->kind[d] == OX_SYM)) return ERR("shape entry %d is %lld", d, (long long)dims[d]);
    }
    double v = 0;
    fc_dtype dt = FC_F32;
    const Onnx__AttributeProto *a = attr(n, "value");
    if (a && a->t) {
        ox_const *c;
        fc_status st = ox_tensor_to_const(ox, a->t, NULL, &c);
        if (st) return st;
        dt = c->dt;
        v = c->n ? ox_const_dbl(c, 0) : 0;
        ox_const_free(c);
    }
    OUT(0, fc_full(G, (int)k->n, dims, v, dt));
    return FC_OK;
}

static fc_status op_range(ox_ctx *ox, const Onnx__NodeProto *n) {
    ox_const *s = kin(ox, 0), *l = kin(ox, 1), *d = kin(ox, 2);
    if (!s || !l || !d) return ERR("start, limit and delta must be known when importing (the output's size depends on them)");
    double a = ox_const_dbl(s, 0), b = ox_const_dbl(l, 0), c = ox_const_dbl(d, 0);
    if (c == 0) return ERR("delta is 0");
    double cnt = ceil((b - a) / c);
    if (!(cnt >= 0)) cnt = 0;
    if (cnt > (double)((int64_t)1 << 31)) return ERR("%g elements is too many", cnt);
    fc_dim len[1] = {(fc_dim)cnt};
    fc_dtype dt = s->dt;
    fc_value *it = fc_iota(G, 1, len, 0, isf(dt) ? FC_F64 : FC_I64);
    OUT(0, fc_cast(G, fc_add(G, fc_mul(G, it, fc_scalar(G, c)), fc_scalar(G, a)), dt));
    return FC_OK;
}

/* ---- the rest lives in onnx_ops2.c ---------------------------------- */
fc_status ox_op_reduce(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_argmax(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_softmax(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_matmul(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_gemm(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_layernorm(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_trilu(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_cumsum(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_pad(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_einsum(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_onehot(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_eyelike(ox_ctx *ox, const Onnx__NodeProto *n);
/* onnx_ops3.c */
fc_status ox_op_nll(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_sce(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_batchnorm(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_instancenorm(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_mvn(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_global_pool(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_depth_space(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_reduce_prod(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_topk(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_conv(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_conv_transpose(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_pool(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_resize(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_scatter_elements(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_scatter_nd(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_arc(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_reverse_sequence(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_lrn(ox_ctx *ox, const Onnx__NodeProto *n);
fc_status ox_op_string_normalizer(ox_ctx *ox, const Onnx__NodeProto *n);

static const struct { const char *op; ox_fn fn; } table[] = {
    {"Neg", op_unary}, {"Abs", op_unary}, {"Exp", op_unary}, {"Log", op_unary}, {"Sqrt", op_unary},
    {"Reciprocal", op_unary}, {"Sin", op_unary}, {"Cos", op_unary}, {"Tanh", op_unary},
    {"Sigmoid", op_unary}, {"Relu", op_unary}, {"Erf", op_unary},
    {"Add", op_binary}, {"Sub", op_binary}, {"Mul", op_binary}, {"Max", op_binary}, {"Min", op_binary},
    {"Sum", op_binary}, {"Equal", op_binary}, {"Less", op_binary}, {"LessOrEqual", op_binary},
    {"Greater", op_binary}, {"GreaterOrEqual", op_binary}, {"Mean", op_mean}, {"Div", op_div},
    {"Pow", op_pow}, {"Mod", op_mod}, {"Sign", op_sign}, {"Floor", op_floor_ceil}, {"Ceil", op_floor_ceil},
    {"Round", op_round}, {"Not", op_logic}, {"And", op_logic}, {"Or", op_logic}, {"Xor", op_logic},
    {"IsNaN", op_isnan_isinf}, {"IsInf", op_isnan_isinf}, {"Where", op_where}, {"Cast", op_cast},
    {"CastLike", op_cast}, {"Identity", op_identity}, {"Dropout", op_identity},
    {"LeakyRelu", op_act}, {"Elu", op_act}, {"Celu", op_act}, {"Selu", op_act}, {"Softplus", op_act},
    {"Softsign", op_act}, {"Mish", op_act}, {"HardSigmoid", op_act}, {"HardSwish", op_act},
    {"ThresholdedRelu", op_act}, {"PRelu", op_act}, {"Gelu", op_act}, {"Tan", op_act}, {"Clip", op_act},
    {"Sinh", op_act}, {"Cosh", op_act}, {"Asinh", op_act}, {"Acosh", op_act}, {"Atanh", op_act}, {"Shrink", op_act},
    {"Shape", op_shape}, {"Size", op_shape}, {"Reshape", op_reshape}, {"Transpose", op_transpose},
    {"Squeeze", op_squeeze_unsqueeze}, {"Unsqueeze", op_squeeze_unsqueeze}, {"Flatten", op_flatten},
    {"Concat", op_concat}, {"Split", op_split}, {"Slice", op_slice}, {"Gather", op_gather},
    {"GatherElements", op_gather_elements}, {"GatherND", op_gather_nd}, {"Expand", op_expand},
    {"Tile", op_tile}, {"Constant", op_constant}, {"ConstantOfShape", op_constant_of_shape},
    {"Range", op_range},
    {"ReduceSum", ox_op_reduce}, {"ReduceMean", ox_op_reduce}, {"ReduceMax", ox_op_reduce},
    {"ReduceMin", ox_op_reduce}, {"ReduceL1", ox_op_reduce}, {"ReduceL2", ox_op_reduce},
    {"ReduceSumSquare", ox_op_reduce}, {"ReduceLogSum", ox_op_reduce}, {"ReduceLogSumExp", ox_op_reduce},
    {"ArgMax", ox_op_argmax}, {"ArgMin", ox_op_argmax}, {"Softmax", ox_op_softmax},
    {"LogSoftmax", ox_op_softmax}, {"Hardmax", ox_op_softmax}, {"MatMul", ox_op_matmul},
    {"Gemm", ox_op_gemm}, {"LayerNormalization", ox_op_layernorm}, {"Trilu", ox_op_trilu},
    {"CumSum", ox_op_cumsum}, {"Pad", ox_op_pad}, {"Einsum", ox_op_einsum}, {"OneHot", ox_op_onehot},
    {"EyeLike", ox_op_eyelike},
    {"NegativeLogLikelihoodLoss", ox_op_nll}, {"SoftmaxCrossEntropyLoss", ox_op_sce},
    {"BatchNormalization", ox_op_batchnorm}, {"InstanceNormalization", ox_op_instancenorm},
    {"MeanVarianceNormalization", ox_op_mvn}, {"GlobalAveragePool", ox_op_global_pool},
    {"GlobalMaxPool", ox_op_global_pool}, {"DepthToSpace", ox_op_depth_space},
    {"SpaceToDepth", ox_op_depth_space}, {"ReduceProd", ox_op_reduce_prod}, {"TopK", ox_op_topk},
    {"Conv", ox_op_conv}, {"ConvTranspose", ox_op_conv_transpose}, {"MaxPool", ox_op_pool},
    {"AveragePool", ox_op_pool}, {"Resize", ox_op_resize}, {"Upsample", ox_op_resize},
    {"ScatterElements", ox_op_scatter_elements}, {"Scatter", ox_op_scatter_elements}, {"ScatterND", ox_op_scatter_nd},
    {"Atan", ox_op_arc}, {"Asin", ox_op_arc}, {"Acos", ox_op_arc}, {"ReverseSequence", ox_op_reverse_sequence},
    {"LRN", ox_op_lrn}, {"StringNormalizer", ox_op_string_normalizer},
};

bool ox_op_known(const char *op_type) {
    if (ox_op_is_sequence(op_type)) return true;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].op, op_type)) return true;
    return false;
}

fc_status ox_translate(ox_ctx *ox) {
    const char *op = ox->node->op_type;
    if (ox_op_is_sequence(op)) return ox_op_sequence(ox);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].op, op)) return table[i].fn(ox, ox->node);
    return ox_error(ox, FC_ERR_UNSUPPORTED, "op_type '%s' is not supported (docs/ONNX.md lists the supported ops)", op);
}

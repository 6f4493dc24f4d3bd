/* build.c - the generic builder: shape and dtype inference for every op,
 * and fc_build, which every builder calls (the public one-function-per-op
 * builders on top of it are in builders.c).
 *
 * Every check happens here, when a node is built, so the C API and the
 * parser report the same errors. Errors poison the graph (sticky) and are
 * located at g->cur_loc when the graph came from text. */
#include "ir.h"

#include <stdio.h>
#include <string.h>

typedef struct fc_type {
    fc_dtype dt;
    int rank;
    fc_dim dims[FC_MAX_RANK];
} fc_type;

#define NAME(op) (fc_op_table[op].name)

static const char *tstr(fc_graph *g, const fc_value *v, char *buf, size_t n) {
    return fc_type_str(g, v->dtype, v->rank, v->dims, buf, n);
}

static const char *dstr(fc_graph *g, fc_dim d, char *buf, size_t n) { return fc_dim_str(g, d, buf, n); }

/* Normalize a possibly negative axis against rank; false if out of range. */
static bool norm_axis(int64_t axis, int rank, int *out) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) return false;
    *out = (int)a;
    return true;
}

static bool bad_axis(fc_graph *g, fc_op op, int64_t axis, int rank) {
    fc_graph_error(g, FC_ERR_INPUT, "%s: axis %lld is out of range for rank %d", NAME(op), (long long)axis, rank);
    return false;
}

/* Two dims that must be equal. Reports the mismatch; `what` names them. */
static bool dims_must_match(fc_graph *g, fc_op op, fc_dim a, fc_dim b, const char *what) {
    if (a == b) return true;
    char sa[64], sb[64];
    dstr(g, a, sa, sizeof sa);
    dstr(g, b, sb, sizeof sb);
    if (fc_dim_is_sym(a) && fc_dim_is_sym(b))
        fc_graph_error(g, FC_ERR_INPUT, "%s: %s differ: symbolic dimensions %s and %s must be equal (bind them to one value)",
                       NAME(op), what, sa, sb);
    else
        fc_graph_error(g, FC_ERR_INPUT, "%s: %s differ (%s vs %s)", NAME(op), what, sa, sb);
    return false;
}

/* NumPy broadcasting of t with v's shape, into t. */
static bool broadcast_into(fc_graph *g, fc_op op, fc_type *t, const fc_value *v) {
    int rank = t->rank > v->rank ? t->rank : v->rank;
    fc_dim out[FC_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int ia = t->rank - rank + i, ib = v->rank - rank + i;
        fc_dim a = ia >= 0 ? t->dims[ia] : 1, b = ib >= 0 ? v->dims[ib] : 1;
        if (a == b || b == 1) out[i] = a;
        else if (a == 1) out[i] = b;
        else {
            char sa[64], sb[64];
            dstr(g, a, sa, sizeof sa);
            dstr(g, b, sb, sizeof sb);
            if (fc_dim_is_sym(a) && fc_dim_is_sym(b))
                fc_graph_error(g, FC_ERR_INPUT,
                               "%s: cannot broadcast: symbolic dimensions %s and %s must be equal (bind them to one value)",
                               NAME(op), sa, sb);
            else
                fc_graph_error(g, FC_ERR_INPUT, "%s: cannot broadcast dimension %s with %s (dimension %d of the result)",
                               NAME(op), sa, sb, i - rank);
            return false;
        }
    }
    t->rank = rank;
    memcpy(t->dims, out, sizeof(fc_dim) * (size_t)rank);
    return true;
}

/* The computation dtype of elementwise operands: PyTorch promotion over the
 * tensor operands; weak scalars take it (a float scalar with an integer or
 * bool tensor gives f32, an integer scalar with bool gives i64). Sets the
 * weak scalars' dtype. */
static bool operand_dtype(fc_graph *g, fc_op op, fc_value *const *in, int first, int nin, fc_dtype *out) {
    bool have = false, weak_float = false, weak_int = false;
    fc_dtype dt = FC_BOOL;
    for (int i = first; i < nin; i++) {
        if (in[i]->weak) {
            if (in[i]->weak_int) weak_int = true;
            else weak_float = true;
            continue;
        }
        dt = have ? fc_promote(dt, in[i]->dtype) : in[i]->dtype;
        have = true;
    }
    if (!have) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: needs at least one tensor operand, not only numbers", NAME(op));
        return false;
    }
    if (weak_float && !fc_dtype_is_float(dt)) dt = FC_F32;
    else if (weak_int && dt == FC_BOOL) dt = FC_I64;
    for (int i = first; i < nin; i++)
        if (in[i]->weak) in[i]->dtype = dt;
    *out = dt;
    return true;
}

static bool need_float(fc_graph *g, fc_op op, const fc_value *v, const char *which) {
    if (fc_dtype_is_float(v->dtype)) return true;
    fc_graph_error(g, FC_ERR_INPUT, "%s: %s must be a float tensor, got %s", NAME(op), which, fc_dtype_name(v->dtype));
    return false;
}

static void set_type(fc_type *t, fc_dtype dt, int rank, const fc_dim *dims) {
    FC_ASSERT(rank >= 0 && rank <= FC_MAX_RANK);
    t->dt = dt;
    t->rank = rank;
    if (rank) memcpy(t->dims, dims, sizeof(fc_dim) * (size_t)rank);
}

/* ---- per-group inference ------------------------------------------------ */

static bool infer_unary(fc_graph *g, fc_op op, fc_value *x, fc_type *t) {
    fc_dtype dt = x->dtype;
    bool keeps_int = op == FC_OP_NEG || op == FC_OP_ABS || op == FC_OP_RELU;
    if (keeps_int) {
        if (dt == FC_BOOL) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: not defined for bool", NAME(op));
            return false;
        }
    } else if (!fc_dtype_is_float(dt)) {
        dt = FC_F32; /* as torch.exp(int tensor): the default float dtype */
    }
    set_type(t, dt, x->rank, x->dims);
    return true;
}

static bool infer_elementwise(fc_graph *g, fc_op op, fc_value *const *in, int nin, fc_type *t) {
    int first = 0;
    if (op == FC_OP_WHERE) {
        if (in[0]->weak || in[0]->dtype != FC_BOOL) {
            fc_graph_error(g, FC_ERR_INPUT, "where: the condition must be a bool tensor, got %s",
                           in[0]->weak ? "a number" : fc_dtype_name(in[0]->dtype));
            return false;
        }
        first = 1;
    }
    fc_dtype dt;
    if (!operand_dtype(g, op, in, first, nin, &dt)) return false;
    t->rank = 0;
    for (int i = 0; i < nin; i++)
        if (!in[i]->weak && !broadcast_into(g, op, t, in[i])) return false;
    if (fc_op_is_compare(op)) dt = FC_BOOL;
    else if (op == FC_OP_DIV && !fc_dtype_is_float(dt)) dt = FC_F32; /* true division */
    t->dt = dt;
    return true;
}

static bool infer_reduce(fc_graph *g, fc_op op, fc_value *x, const fc_attrs *a, fc_type *t) {
    bool reduced[FC_MAX_RANK] = {0};
    if (a->nlist == 0) {
        for (int i = 0; i < x->rank; i++) reduced[i] = true;
    }
    for (int i = 0; i < a->nlist; i++) {
        int ax;
        if (!norm_axis(a->list[i], x->rank, &ax)) return bad_axis(g, op, a->list[i], x->rank);
        if (reduced[ax]) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: axis %lld appears twice in axes", NAME(op), (long long)a->list[i]);
            return false;
        }
        reduced[ax] = true;
    }
    fc_dtype dt = x->dtype;
    if (op == FC_OP_REDUCE_SUM && !fc_dtype_is_float(dt)) dt = FC_I64;
    if (op == FC_OP_REDUCE_MEAN && !need_float(g, op, x, "the input")) return false;
    t->dt = dt;
    t->rank = 0;
    for (int i = 0; i < x->rank; i++) {
        if (!reduced[i]) t->dims[t->rank++] = x->dims[i];
        else if (a->keepdim) t->dims[t->rank++] = 1;
    }
    return true;
}

static bool infer_norm(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_type *t) {
    fc_value *x = in[0];
    if (!need_float(g, op, x, "the input")) return false;
    if (x->rank < 1) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: the input must have at least one dimension", NAME(op));
        return false;
    }
    int ax = x->rank - 1;
    if (op != FC_OP_RMSNORM && !norm_axis(a->axis, x->rank, &ax)) return bad_axis(g, op, a->axis, x->rank);
    if (op != FC_OP_SOFTMAX) {
        int nparams = op == FC_OP_LAYERNORM ? 3 : 2;
        for (int i = 1; i < nparams; i++) {
            const char *which = i == 1 ? "the weight" : "the bias";
            if (!need_float(g, op, in[i], which)) return false;
            if (in[i]->rank != 1) {
                fc_graph_error(g, FC_ERR_INPUT, "%s: %s must have rank 1, got rank %d", NAME(op), which, in[i]->rank);
                return false;
            }
            char what[64];
            snprintf(what, sizeof what, "%s size and the normalized dimension", which + 4);
            if (!dims_must_match(g, op, in[i]->dims[0], x->dims[ax], what)) return false;
        }
    }
    set_type(t, x->dtype, x->rank, x->dims);
    return true;
}

int fc_matmul_operand_dims(const fc_value *v, bool left, fc_dim *dims) {
    if (v->rank == 1) {
        dims[0] = left ? 1 : v->dims[0];
        dims[1] = left ? v->dims[0] : 1;
        return 2;
    }
    memcpy(dims, v->dims, sizeof(fc_dim) * (size_t)v->rank);
    return v->rank;
}

static bool infer_matmul(fc_graph *g, fc_value *a, fc_value *b, fc_type *t) {
    fc_op op = FC_OP_MATMUL;
    if (!need_float(g, op, a, "the left operand") || !need_float(g, op, b, "the right operand")) return false;
    if (a->dtype != b->dtype) {
        fc_graph_error(g, FC_ERR_INPUT, "matmul: operands have different dtypes (%s vs %s); cast one first",
                       fc_dtype_name(a->dtype), fc_dtype_name(b->dtype));
        return false;
    }
    if (a->rank < 1 || b->rank < 1) {
        fc_graph_error(g, FC_ERR_INPUT, "matmul: operands must have at least one dimension");
        return false;
    }
    /* Promote rank-1 operands: [K] -> [1, K] on the left, [K] -> [K, 1] on the right. */
    fc_value pa = *a, pb = *b;
    pa.rank = fc_matmul_operand_dims(a, true, pa.dims);
    pb.rank = fc_matmul_operand_dims(b, false, pb.dims);
    if (!dims_must_match(g, op, pa.dims[pa.rank - 1], pb.dims[pb.rank - 2], "inner dimensions")) return false;
    fc_type batch = {0};
    fc_value ba = pa, bb = pb;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!broadcast_into(g, op, &batch, &ba) || !broadcast_into(g, op, &batch, &bb)) return false;
    t->dt = a->dtype;
    t->rank = batch.rank;
    memcpy(t->dims, batch.dims, sizeof(fc_dim) * (size_t)batch.rank);
    if (a->rank != 1) t->dims[t->rank++] = pa.dims[pa.rank - 2];
    if (b->rank != 1) t->dims[t->rank++] = pb.dims[pb.rank - 1];
    return true;
}

/*
 * attention(q, k, v, [mask]): q [.., Sq, D], k [.., Sk, D], v [.., Sk, Dv],
 * one float dtype; the batch dims (all but the last two) broadcast. The
 * optional mask broadcasts (NumPy, right-aligned) to the scores
 * [batch.., Sq, Sk]: its last two dims are 1 or Sq and 1 or Sk, and its
 * leading dims join the batch broadcast. A bool mask keeps the keys where
 * it is true; a float mask (any float dtype) is added to the scaled scores.
 * The result is [batch.., Sq, Dv] of q's dtype.
 */
static bool infer_attention(fc_graph *g, fc_value *const *in, int nin, fc_type *t) {
    fc_op op = FC_OP_ATTENTION;
    static const char *const names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (!need_float(g, op, in[i], names[i])) return false;
        if (in[i]->rank < 2) {
            fc_graph_error(g, FC_ERR_INPUT, "attention: %s must have rank >= 2 ([.., S, D]), got rank %d", names[i], in[i]->rank);
            return false;
        }
        if (in[i]->dtype != in[0]->dtype) {
            fc_graph_error(g, FC_ERR_INPUT, "attention: q, k and v must have one dtype (%s vs %s)",
                           fc_dtype_name(in[0]->dtype), fc_dtype_name(in[i]->dtype));
            return false;
        }
    }
    fc_value *q = in[0], *k = in[1], *v = in[2];
    if (!dims_must_match(g, op, q->dims[q->rank - 1], k->dims[k->rank - 1], "head dimensions of q and k")) return false;
    if (!dims_must_match(g, op, k->dims[k->rank - 2], v->dims[v->rank - 2], "sequence lengths of k and v")) return false;
    fc_type batch = {0};
    for (int i = 0; i < 3; i++) {
        fc_value b = *in[i];
        b.rank -= 2;
        if (!broadcast_into(g, op, &batch, &b)) return false;
    }
    if (nin > 3) {
        fc_value *m = in[3];
        if (m->weak || (m->dtype != FC_BOOL && !fc_dtype_is_float(m->dtype))) {
            fc_graph_error(g, FC_ERR_INPUT, "attention: the mask must be a bool or float tensor, got %s",
                           m->weak ? "a number" : fc_dtype_name(m->dtype));
            return false;
        }
        /* Its last two dims against [Sq, Sk]; a missing dim is 1. */
        fc_dim want[2] = {q->dims[q->rank - 2], k->dims[k->rank - 2]};
        for (int i = 0; i < 2; i++) {
            int d = m->rank - 2 + i;
            if (d < 0 || m->dims[d] == 1 || m->dims[d] == want[i]) continue;
            char sm[64], sw[64];
            fc_graph_error(g, FC_ERR_INPUT, "attention: the mask's %s dimension (%s) must be 1 or %s",
                           i == 0 ? "query" : "key", dstr(g, m->dims[d], sm, sizeof sm), dstr(g, want[i], sw, sizeof sw));
            return false;
        }
        if (m->rank > 2) {
            fc_value b = *m;
            b.rank -= 2;
            if (!broadcast_into(g, op, &batch, &b)) return false;
        }
    }
    t->dt = q->dtype;
    t->rank = batch.rank;
    memcpy(t->dims, batch.dims, sizeof(fc_dim) * (size_t)batch.rank);
    t->dims[t->rank++] = q->dims[q->rank - 2];
    t->dims[t->rank++] = v->dims[v->rank - 1];
    return true;
}

/*
 * gemm (made by passes/epilogue.c; docs/GEMM.md):
 *   gemm(a, b1..bn, [bias1..biasn], [residual], to=, spec=[ta, tb, n, bias, residual, act], scale=)
 * a is [.., M, K] ([.., K, M] when ta), each bi [.., K, Ni] ([.., Ni, K] when
 * tb); the result is [batch.., M, N1+..+Nn] of dtype `to`. The entries of
 * spec are read by index here and by name in passes/epilogue.h (FC_GEMM_*),
 * which must agree. Only what cuBLASLt can run is accepted: f16/bf16/f32
 * operands of one dtype, `to` their dtype or f32, bias and residual of dtype
 * `to` (cuBLASLt reads them as D's type), each bias [.., Ni] with every
 * other dim 1, the residual exactly the result's shape.
 */
static bool infer_gemm(fc_graph *g, fc_value *const *in, int nin, const fc_attrs *a, fc_type *t) {
    fc_op op = FC_OP_GEMM;
    enum { TA, TB, NW, BIAS, RES, ACT, LEN };
    if (a->nlist != LEN) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: spec must have %d entries [trans_a, trans_b, n, bias, residual, act], got %d",
                       LEN, a->nlist);
        return false;
    }
    const int64_t *s = a->list;
    bool flags_ok = (s[TA] == 0 || s[TA] == 1) && (s[TB] == 0 || s[TB] == 1) && (s[BIAS] == 0 || s[BIAS] == 1) &&
                    (s[RES] == 0 || s[RES] == 1) && s[ACT] >= 0 && s[ACT] <= 2 && s[NW] >= 1 && s[NW] <= nin;
    if (!flags_ok) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: bad spec [%lld, %lld, %lld, %lld, %lld, %lld] (flags are 0 or 1, n >= 1, act 0..2)",
                       (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3], (long long)s[4], (long long)s[5]);
        return false;
    }
    int nw = (int)s[NW];
    int want_in = 1 + nw + (s[BIAS] ? nw : 0) + (s[RES] ? 1 : 0);
    if (nin != want_in) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: spec asks for %d operands, got %d", want_in, nin);
        return false;
    }
    fc_value *x = in[0];
    bool dt_ok = x->dtype == FC_F32 || x->dtype == FC_F16 || x->dtype == FC_BF16;
    if (!dt_ok || x->rank < 2) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: the left operand must be f32, f16 or bf16 of rank >= 2, got %s rank %d",
                       fc_dtype_name(x->dtype), x->rank);
        return false;
    }
    if (a->dtype != x->dtype && a->dtype != FC_F32) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: to=%s: the result must be the operands' dtype (%s) or f32",
                       fc_dtype_name(a->dtype), fc_dtype_name(x->dtype));
        return false;
    }
    fc_dim M = s[TA] ? x->dims[x->rank - 1] : x->dims[x->rank - 2];
    fc_dim K = s[TA] ? x->dims[x->rank - 2] : x->dims[x->rank - 1];
    fc_type batch = {0};
    fc_value bx = *x;
    bx.rank -= 2;
    if (!broadcast_into(g, op, &batch, &bx)) return false;
    fc_dim N = 0;
    for (int i = 0; i < nw; i++) {
        fc_value *w = in[1 + i];
        if (w->dtype != x->dtype || w->rank < 2 || (nw > 1 && w->rank != 2)) {
            fc_graph_error(g, FC_ERR_INPUT, "gemm: right operand %d must be %s of rank >= 2 (rank 2 when n > 1), got %s rank %d",
                           i, fc_dtype_name(x->dtype), fc_dtype_name(w->dtype), w->rank);
            return false;
        }
        fc_dim wk = s[TB] ? w->dims[w->rank - 1] : w->dims[w->rank - 2];
        fc_dim wn = s[TB] ? w->dims[w->rank - 2] : w->dims[w->rank - 1];
        if (!dims_must_match(g, op, K, wk, "inner dimensions")) return false;
        fc_value bw = *w;
        bw.rank -= 2;
        if (!broadcast_into(g, op, &batch, &bw)) return false;
        if (nw > 1 && fc_dim_is_sym(wn)) {
            fc_graph_error(g, FC_ERR_INPUT, "gemm: right operand %d has a symbolic output dimension (bind it to concatenate)", i);
            return false;
        }
        N = nw == 1 ? wn : N + wn;
        if (s[BIAS]) {
            fc_value *b = in[1 + nw + i];
            bool shape_ok = b->rank >= 1 && b->dims[b->rank - 1] == wn;
            for (int d = 0; d + 1 < b->rank; d++) shape_ok = shape_ok && b->dims[d] == 1;
            if (b->dtype != a->dtype || !shape_ok) {
                char ts[256], ns[64];
                fc_graph_error(g, FC_ERR_INPUT, "gemm: bias %d must be %s[.., %s] (every other dim 1), got %s", i,
                               fc_dtype_name(a->dtype), dstr(g, wn, ns, sizeof ns), tstr(g, b, ts, sizeof ts));
                return false;
            }
        }
    }
    if (batch.rank + 2 > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "gemm: result rank %d exceeds %d", batch.rank + 2, FC_MAX_RANK);
        return false;
    }
    t->dt = a->dtype;
    t->rank = batch.rank;
    memcpy(t->dims, batch.dims, sizeof(fc_dim) * (size_t)batch.rank);
    t->dims[t->rank++] = M;
    t->dims[t->rank++] = N;
    if (s[RES]) {
        fc_value *r = in[nin - 1];
        bool same = r->dtype == t->dt && r->rank == t->rank && !memcmp(r->dims, t->dims, sizeof(fc_dim) * (size_t)t->rank);
        if (!same) {
            char ts[256], rs[256];
            fc_graph_error(g, FC_ERR_INPUT, "gemm: the residual must be %s (the result's type), got %s",
                           fc_type_str(g, t->dt, t->rank, t->dims, ts, sizeof ts), tstr(g, r, rs, sizeof rs));
            return false;
        }
    }
    return true;
}

/* Static product and sorted symbol list of a shape (for reshape). */
typedef struct { int64_t prod; int nsym; fc_dim syms[FC_MAX_RANK]; } fc_factors;

static bool factor(const fc_dim *dims, int rank, fc_factors *f) {
    f->prod = 1;
    f->nsym = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == FC_DIM_INFER) continue;
        if (fc_dim_is_sym(dims[i])) f->syms[f->nsym++] = dims[i];
        else if (dims[i] != 0 && f->prod > INT64_MAX / dims[i]) return false;
        else f->prod *= dims[i];
    }
    return true;
}

/* Remove the symbols of `sub` from `f`; false if one is missing. */
static bool cancel_syms(fc_factors *f, const fc_factors *sub) {
    for (int i = 0; i < sub->nsym; i++) {
        int j = 0;
        while (j < f->nsym && f->syms[j] != sub->syms[i]) j++;
        if (j == f->nsym) return false;
        f->syms[j] = f->syms[--f->nsym];
    }
    return true;
}

static bool infer_reshape(fc_graph *g, fc_value *x, const fc_attrs *a, fc_type *t) {
    fc_op op = FC_OP_RESHAPE;
    if (a->nlist > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "reshape: rank %d is out of range (at most %d dimensions)", a->nlist, FC_MAX_RANK);
        return false;
    }
    int infer_at = -1;
    for (int i = 0; i < a->nlist; i++) {
        if (a->list[i] == FC_DIM_INFER) {
            if (infer_at >= 0) {
                fc_graph_error(g, FC_ERR_INPUT, "reshape: only one dimension can be -1");
                return false;
            }
            infer_at = i;
        } else if (a->list[i] < 0 && !fc_dim_is_sym(a->list[i])) {
            fc_graph_error(g, FC_ERR_INPUT, "reshape: dimension %d is negative (%lld)", i, (long long)a->list[i]);
            return false;
        }
    }
    fc_factors fin, fout;
    if (!factor(x->dims, x->rank, &fin) || !factor(a->list, a->nlist, &fout)) {
        fc_graph_error(g, FC_ERR_INPUT, "reshape: shape is too large (element count overflows 64 bits)");
        return false;
    }
    char s1[256], s2[256];
    set_type(t, x->dtype, a->nlist, a->list);
    fc_factors rest = fin;
    bool syms_ok = cancel_syms(&rest, &fout);
    if (infer_at < 0) {
        if (syms_ok && rest.nsym == 0 && fin.prod == fout.prod) return true;
    } else if (syms_ok) {
        if (rest.nsym == 0 && fout.prod != 0 && fin.prod % fout.prod == 0) {
            t->dims[infer_at] = fin.prod / fout.prod;
            return true;
        }
        if (rest.nsym == 1 && fin.prod == fout.prod) {
            t->dims[infer_at] = rest.syms[0];
            return true;
        }
        if (rest.nsym > 1 || (rest.nsym == 1 && fin.prod != fout.prod)) {
            fc_type want = {x->dtype, a->nlist, {0}};
            if (a->nlist) memcpy(want.dims, a->list, sizeof(fc_dim) * (size_t)a->nlist);
            fc_type_str(g, want.dt, want.rank, want.dims, s2, sizeof s2);
            fc_graph_error(g, FC_ERR_INPUT, "reshape: cannot infer -1 from %s to %s: the size would be a product of symbols",
                           tstr(g, x, s1, sizeof s1), strchr(s2, '['));
            return false;
        }
    }
    fc_type want = {x->dtype, a->nlist, {0}};
    if (a->nlist) memcpy(want.dims, a->list, sizeof(fc_dim) * (size_t)a->nlist);
    fc_type_str(g, want.dt, want.rank, want.dims, s2, sizeof s2);
    fc_graph_error(g, FC_ERR_INPUT, "reshape: cannot reshape %s to %s: element counts differ", tstr(g, x, s1, sizeof s1),
                   strchr(s2, '['));
    (void)op;
    return false;
}

static bool infer_permute(fc_graph *g, fc_value *x, const fc_attrs *a, fc_type *t) {
    if (a->nlist != x->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "permute: perm has %d entries but the input has rank %d", a->nlist, x->rank);
        return false;
    }
    bool seen[FC_MAX_RANK] = {0};
    t->dt = x->dtype;
    t->rank = x->rank;
    for (int i = 0; i < a->nlist; i++) {
        int ax;
        if (!norm_axis(a->list[i], x->rank, &ax)) return bad_axis(g, FC_OP_PERMUTE, a->list[i], x->rank);
        if (seen[ax]) {
            fc_graph_error(g, FC_ERR_INPUT, "permute: axis %lld appears twice in perm", (long long)a->list[i]);
            return false;
        }
        seen[ax] = true;
        t->dims[i] = x->dims[ax];
    }
    return true;
}

static bool infer_expand(fc_graph *g, fc_value *x, const fc_attrs *a, fc_type *t) {
    if (a->nlist < x->rank || a->nlist > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "expand: target rank %d must be >= the input rank %d and <= %d", a->nlist, x->rank,
                       FC_MAX_RANK);
        return false;
    }
    t->dt = x->dtype;
    t->rank = a->nlist;
    int lead = a->nlist - x->rank;
    for (int i = 0; i < a->nlist; i++) {
        fc_dim want = a->list[i];
        if (i < lead) {
            if (want < 0 && !fc_dim_is_sym(want)) {
                fc_graph_error(g, FC_ERR_INPUT, "expand: new dimension %d cannot be %lld", i, (long long)want);
                return false;
            }
            t->dims[i] = want;
            continue;
        }
        fc_dim have = x->dims[i - lead];
        if (want == FC_DIM_INFER) want = have;
        if (have != want && have != 1) {
            char sa[64], sb[64];
            fc_graph_error(g, FC_ERR_INPUT, "expand: cannot expand dimension %d from %s to %s (only size-1 dimensions expand)",
                           i - lead, dstr(g, have, sa, sizeof sa), dstr(g, want, sb, sizeof sb));
            return false;
        }
        if (want < 0 && !fc_dim_is_sym(want)) {
            fc_graph_error(g, FC_ERR_INPUT, "expand: dimension %d cannot be %lld", i, (long long)want);
            return false;
        }
        t->dims[i] = want;
    }
    return true;
}

int64_t fc_view_start(const fc_value *v, int ax, int64_t *step) {
    const fc_node *n = v->def;
    int64_t start = 0;
    *step = 1;
    if (n->op == FC_OP_SLICE) {
        const int64_t dim = n->in[0]->dims[ax], s = n->a.start;
        start = s < 0 ? (s + dim < 0 ? 0 : s + dim) : (s > dim ? dim : s);
        *step = n->a.step;
    } else {
        for (int i = 0; i < v->def_index; i++) start += n->out[i]->dims[ax];
    }
    return start;
}

/* Python slice length for a static dim. */
static int64_t slice_len(int64_t n, int64_t start, int64_t end, int64_t step) {
    if (start < 0) start = start + n < 0 ? 0 : start + n;
    if (start > n) start = n;
    if (end < 0) end = end + n < 0 ? 0 : end + n;
    if (end > n) end = n;
    return end <= start ? 0 : (end - start - 1) / step + 1;
}

static bool infer_slice(fc_graph *g, fc_value *x, const fc_attrs *a, fc_type *t) {
    int ax;
    if (!norm_axis(a->axis, x->rank, &ax)) return bad_axis(g, FC_OP_SLICE, a->axis, x->rank);
    if (a->step < 1) {
        fc_graph_error(g, FC_ERR_INPUT, "slice: step must be >= 1, got %lld", (long long)a->step);
        return false;
    }
    set_type(t, x->dtype, x->rank, x->dims);
    fc_dim n = x->dims[ax];
    if (!fc_dim_is_sym(n)) {
        t->dims[ax] = slice_len(n, a->start, a->end, a->step);
    } else if (a->start == 0 && a->end == INT64_MAX && a->step == 1) {
        t->dims[ax] = n;
    } else {
        char s[64];
        fc_graph_error(g, FC_ERR_INPUT, "slice: cannot slice symbolic dimension %s (bind it first)", dstr(g, n, s, sizeof s));
        return false;
    }
    return true;
}

static bool infer_concat(fc_graph *g, fc_value *const *in, int nin, const fc_attrs *a, fc_type *t) {
    fc_value *x = in[0];
    int ax;
    if (!norm_axis(a->axis, x->rank, &ax)) return bad_axis(g, FC_OP_CONCAT, a->axis, x->rank);
    set_type(t, x->dtype, x->rank, x->dims);
    for (int i = 1; i < nin; i++) {
        if (in[i]->rank != x->rank) {
            fc_graph_error(g, FC_ERR_INPUT, "concat: operand %d has rank %d but operand 0 has rank %d", i, in[i]->rank, x->rank);
            return false;
        }
        t->dt = fc_promote(t->dt, in[i]->dtype);
        for (int d = 0; d < x->rank; d++) {
            if (d == ax) continue;
            char what[64];
            snprintf(what, sizeof what, "dimension %d of operands 0 and %d", d, i);
            if (!dims_must_match(g, FC_OP_CONCAT, x->dims[d], in[i]->dims[d], what)) return false;
        }
    }
    int64_t sum = 0;
    for (int i = 0; i < nin; i++) {
        fc_dim d = in[i]->dims[ax];
        if (fc_dim_is_sym(d)) {
            if (nin == 1) { sum = d; break; }
            char s[64];
            fc_graph_error(g, FC_ERR_INPUT, "concat: operand %d has symbolic size %s along the axis (bind it first)", i,
                           dstr(g, d, s, sizeof s));
            return false;
        }
        sum += d;
    }
    t->dims[ax] = sum;
    return true;
}

static bool infer_split(fc_graph *g, fc_value *x, const fc_attrs *a, fc_type *ts) {
    int ax;
    if (!norm_axis(a->axis, x->rank, &ax)) return bad_axis(g, FC_OP_SPLIT, a->axis, x->rank);
    if (a->nlist < 1) {
        fc_graph_error(g, FC_ERR_INPUT, "split: sizes must not be empty");
        return false;
    }
    fc_dim n = x->dims[ax];
    int64_t sum = 0;
    int infer_at = -1;
    for (int i = 0; i < a->nlist; i++) {
        fc_dim s = a->list[i];
        if (s == FC_DIM_INFER && infer_at < 0) { infer_at = i; continue; }
        if (s < 0) {
            fc_graph_error(g, FC_ERR_INPUT, "split: size %d must be a non-negative integer (or one -1)", i);
            return false;
        }
        sum += s;
    }
    if (fc_dim_is_sym(n)) {
        char s[64];
        fc_graph_error(g, FC_ERR_INPUT, "split: cannot split symbolic dimension %s (bind it first)", dstr(g, n, s, sizeof s));
        return false;
    }
    if (infer_at < 0 ? sum != n : sum > n) {
        fc_graph_error(g, FC_ERR_INPUT, "split: sizes add up to %lld but dimension %d has size %lld", (long long)sum, ax,
                       (long long)n);
        return false;
    }
    for (int i = 0; i < a->nlist; i++) {
        set_type(&ts[i], x->dtype, x->rank, x->dims);
        ts[i].dims[ax] = i == infer_at ? n - sum : a->list[i];
    }
    return true;
}

static bool infer_create(fc_graph *g, fc_op op, const fc_attrs *a, fc_type *t) {
    if (a->nlist > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: rank %d is out of range (at most %d dimensions)", NAME(op), a->nlist, FC_MAX_RANK);
        return false;
    }
    for (int i = 0; i < a->nlist; i++)
        if (a->list[i] < 0 && !fc_dim_is_sym(a->list[i])) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: dimension %d of shape must be a size, got %lld", NAME(op), i,
                           (long long)a->list[i]);
            return false;
        }
    if ((unsigned)a->dtype >= FC_DTYPE_COUNT) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: bad dtype", NAME(op));
        return false;
    }
    if (op == FC_OP_IOTA) {
        int ax;
        if (!norm_axis(a->axis, a->nlist, &ax)) return bad_axis(g, op, a->axis, a->nlist);
        if (a->dtype == FC_BOOL) {
            fc_graph_error(g, FC_ERR_INPUT, "iota: dtype cannot be bool");
            return false;
        }
    }
    set_type(t, a->dtype, a->nlist, a->list);
    return true;
}

static bool infer_gather(fc_graph *g, fc_value *table, fc_value *idx, const fc_attrs *a, fc_type *t) {
    int ax;
    if (!norm_axis(a->axis, table->rank, &ax)) return bad_axis(g, FC_OP_GATHER, a->axis, table->rank);
    if (!fc_dtype_is_int(idx->dtype)) {
        fc_graph_error(g, FC_ERR_INPUT, "gather: indices must be an integer tensor, got %s", fc_dtype_name(idx->dtype));
        return false;
    }
    if (table->rank - 1 + idx->rank > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "gather: result rank %d exceeds %d", table->rank - 1 + idx->rank, FC_MAX_RANK);
        return false;
    }
    t->dt = table->dtype;
    t->rank = 0;
    for (int i = 0; i < ax; i++) t->dims[t->rank++] = table->dims[i];
    for (int i = 0; i < idx->rank; i++) t->dims[t->rank++] = idx->dims[i];
    for (int i = ax + 1; i < table->rank; i++) t->dims[t->rank++] = table->dims[i];
    return true;
}

/* ---- the generic builder ------------------------------------------------- */

static bool accepts_weak(fc_op op) { return fc_op_is_binary(op) || fc_op_is_compare(op) || op == FC_OP_WHERE; }

static int infer_op(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, fc_type *ts);

/* Infer the result types of op; returns the number of results, 0 on error.
 * Strings are refused here, for the builders and the verifier alike. */
static int infer(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, fc_type *ts) {
    if (!fc_check_string_use(g, op, in, nin, NULL, 0)) return 0;
    int nout = infer_op(g, op, in, nin, a, ts);
    for (int i = 0; i < nout; i++)
        if (!fc_check_string_use(g, op, NULL, 0, &ts[i].dt, 1)) return 0;
    return nout;
}

static int infer_op(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, fc_type *ts) {
    if (fc_op_is_unary(op)) return infer_unary(g, op, in[0], ts);
    if (fc_op_is_binary(op) || fc_op_is_compare(op) || op == FC_OP_WHERE) return infer_elementwise(g, op, in, nin, ts);
    if (fc_op_is_reduce(op)) return infer_reduce(g, op, in[0], a, ts);
    switch (op) {
    case FC_OP_CAST:
        if ((unsigned)a->dtype >= FC_DTYPE_COUNT) return fc_graph_error(g, FC_ERR_INPUT, "cast: bad dtype"), 0;
        set_type(ts, a->dtype, in[0]->rank, in[0]->dims);
        return 1;
    case FC_OP_SOFTMAX:
    case FC_OP_LAYERNORM:
    case FC_OP_RMSNORM: return infer_norm(g, op, in, a, ts);
    case FC_OP_MATMUL: return infer_matmul(g, in[0], in[1], ts);
    case FC_OP_ATTENTION: return infer_attention(g, in, nin, ts);
    case FC_OP_GEMM: return infer_gemm(g, in, nin, a, ts);
    case FC_OP_RESHAPE: return infer_reshape(g, in[0], a, ts);
    case FC_OP_PERMUTE: return infer_permute(g, in[0], a, ts);
    case FC_OP_EXPAND: return infer_expand(g, in[0], a, ts);
    case FC_OP_SLICE: return infer_slice(g, in[0], a, ts);
    case FC_OP_CONCAT: return infer_concat(g, in, nin, a, ts);
    case FC_OP_SPLIT: return infer_split(g, in[0], a, ts) ? a->nlist : 0;
    case FC_OP_IOTA:
    case FC_OP_FULL: return infer_create(g, op, a, ts);
    case FC_OP_GATHER: return infer_gather(g, in[0], in[1], a, ts);
    case FC_OP_UPDATE_SLICE:
    case FC_OP_CACHE_ATTENTION: return fc_infer_decode(g, op, in, a, &ts->dt, &ts->rank, ts->dims) ? 1 : 0;
    case FC_OP_ALL_REDUCE:
    case FC_OP_ALL_GATHER:
    case FC_OP_REDUCE_SCATTER: return fc_infer_collective(g, op, in, a, &ts->dt, &ts->rank, ts->dims) ? 1 : 0;
    case FC_OP_CONV: case FC_OP_CONV_TRANSPOSE: case FC_OP_MAX_POOL: case FC_OP_AVG_POOL:
    case FC_OP_GLOBAL_AVG_POOL: case FC_OP_BATCH_NORM: case FC_OP_PAD: case FC_OP_RESIZE: case FC_OP_CONV_CL:
        return fc_infer_window_op(g, op, in, nin, a, &ts->dt, &ts->rank, ts->dims) ? 1 : 0;
    case FC_OP_STRING_NORMALIZER: return fc_infer_string_op(g, op, in, a, &ts->dt, &ts->rank, ts->dims) ? 1 : 0;
    default: FC_UNREACHABLE("op without inference");
    }
}

fc_node *fc_build(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a) {
    if (!g || g->status) return NULL;
    if ((unsigned)op >= FC_OP_COUNT) {
        fc_graph_error(g, FC_ERR_USAGE, "bad op %d", (int)op);
        return NULL;
    }
    const fc_op_info *info = &fc_op_table[op];
    if (nin < info->min_in || (info->max_in >= 0 && nin > info->max_in)) {
        if (info->min_in == info->max_in)
            fc_graph_error(g, FC_ERR_INPUT, "%s: expects %d operand%s, got %d", info->name, info->min_in,
                           info->min_in == 1 ? "" : "s", nin);
        else if (info->max_in < 0)
            fc_graph_error(g, FC_ERR_INPUT, "%s: expects at least %d operand%s, got %d", info->name, info->min_in,
                           info->min_in == 1 ? "" : "s", nin);
        else
            fc_graph_error(g, FC_ERR_INPUT, "%s: expects %d to %d operands, got %d", info->name, info->min_in, info->max_in, nin);
        return NULL;
    }
    for (int i = 0; i < nin; i++) {
        if (!in[i]) {
            fc_graph_error(g, FC_ERR_USAGE, "%s: operand %d is NULL", info->name, i);
            return NULL;
        }
        if (in[i]->graph != g) { /* before the poison test: another graph's poison is not ours */
            fc_foreign_value(g, info->name, "operand", i);
            return NULL;
        }
        if (in[i]->poison) return NULL; /* the graph is already poisoned */
        if (in[i]->weak && !accepts_weak(op)) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: operand %d cannot be a bare number", info->name, i);
            return NULL;
        }
    }
    fc_attrs attrs;
    if (a) attrs = *a;
    else fc_attrs_defaults(op, &attrs);

    int maxout = op == FC_OP_SPLIT ? (attrs.nlist > 0 ? attrs.nlist : 1) : 1;
    fc_type *ts = fc_arena_alloc(&g->arena, sizeof(fc_type) * (size_t)maxout);
    if (!ts) return g->status = FC_ERR_NOMEM, NULL;
    int nout = infer(g, op, in, nin, &attrs, ts);
    if (nout <= 0) return NULL;
    for (int i = 0; i < nout; i++)
        if (!fc_check_shape(g, info->name, ts[i].dt, ts[i].rank, ts[i].dims)) return NULL;

    fc_node *n = fc_arena_alloc(&g->arena, sizeof *n);
    fc_value **ins = fc_arena_alloc(&g->arena, sizeof(fc_value *) * (size_t)(nin ? nin : 1));
    fc_value **outs = fc_arena_alloc(&g->arena, sizeof(fc_value *) * (size_t)nout);
    int64_t *list = attrs.nlist ? fc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)attrs.nlist) : NULL;
    if (!n || !ins || !outs || (attrs.nlist && !list) ||
        !fc_grow(&g->arena, (void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes))
        return g->status = FC_ERR_NOMEM, NULL;
    if (attrs.nlist) memcpy(list, attrs.list, sizeof(int64_t) * (size_t)attrs.nlist);
    attrs.list = list;
    if (attrs.nstrs) {
        const char **strs = fc_arena_alloc(&g->arena, sizeof *strs * (size_t)attrs.nstrs);
        if (!strs) return g->status = FC_ERR_NOMEM, NULL;
        for (int i = 0; i < attrs.nstrs; i++)
            if (!(strs[i] = fc_arena_strndup(&g->arena, attrs.strs[i], strlen(attrs.strs[i]))))
                return g->status = FC_ERR_NOMEM, NULL;
        attrs.strs = strs;
    } else {
        attrs.strs = NULL;
    }
    for (int i = 0; i < nin; i++) {
        ins[i] = in[i];
        if (in[i]->weak) {
            /* A weak scalar belongs to one use: copy it so a shared fc_scalar
             * handle cannot carry one node's dtype into another. */
            fc_value *w = fc_arena_alloc(&g->arena, sizeof *w);
            if (!w) return g->status = FC_ERR_NOMEM, NULL;
            *w = *in[i];
            w->id = g->next_value_id++;
            ins[i] = w;
        }
    }
    for (int i = 0; i < nout; i++) {
        fc_value *v = fc_arena_alloc(&g->arena, sizeof *v);
        if (!v) return g->status = FC_ERR_NOMEM, NULL;
        v->graph = g;
        v->dtype = ts[i].dt;
        v->rank = ts[i].rank;
        memcpy(v->dims, ts[i].dims, sizeof(fc_dim) * (size_t)ts[i].rank);
        v->def = n;
        v->def_index = i;
        v->param_index = -1;
        v->id = g->next_value_id++;
        outs[i] = v;
    }
    n->op = op;
    n->id = g->next_node_id++;
    n->nin = nin;
    n->nout = nout;
    n->in = ins;
    n->out = outs;
    n->a = attrs;
    n->loc = g->cur_loc;
    g->nodes[g->nnodes++] = n;
    return n;
}

/* Re-run inference on an existing node and compare with its stored result
 * types: the verifier's check that no pass broke a node. */
fc_status fc_reinfer_check(fc_graph *g, fc_node *n) {
    fc_type ts[64];
    fc_type *t = n->nout <= 64 ? ts : fc_arena_alloc(&g->arena, sizeof(fc_type) * (size_t)n->nout);
    if (!t) return FC_ERR_NOMEM;
    int nout = infer(g, n->op, n->in, n->nin, &n->a, t);
    if (nout <= 0) return g->status ? g->status : FC_ERR_INPUT;
    if (nout != n->nout)
        return fc_set_error(g->ctx, FC_ERR_INPUT, "verify: %s node %d has %d results, inference gives %d", NAME(n->op), n->id,
                            n->nout, nout);
    for (int i = 0; i < nout; i++) {
        fc_value *v = n->out[i];
        bool same = v->dtype == t[i].dt && v->rank == t[i].rank &&
                    !memcmp(v->dims, t[i].dims, sizeof(fc_dim) * (size_t)v->rank);
        if (!same) {
            char a[256], b[256];
            return fc_set_error(g->ctx, FC_ERR_INPUT, "verify: %s node %d result %d has type %s, inference gives %s",
                                NAME(n->op), n->id, i, tstr(g, v, a, sizeof a),
                                fc_type_str(g, t[i].dt, t[i].rank, t[i].dims, b, sizeof b));
        }
    }
    return FC_OK;
}

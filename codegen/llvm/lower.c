/*
 * lower.c - plan groups to LLVM IR: one host function per kernel group.
 *
 * The semantics are those of the CUDA codegen (codegen/cuda/emit.c), and the
 * structure follows it:
 *
 *  - Every value is produced by one recursive function, emit_value(v, L):
 *    the value of v at linear index L of v's own shape. Elementwise ops
 *    evaluate their operands at the NumPy-broadcast index; views (reshape,
 *    permute, expand, slice, split, concat, gather, iota, full) are index
 *    arithmetic on L, never copies. Results are memoized per (value, index)
 *    inside the current loop body.
 *  - Every value is computed in the compute type of its dtype: f32 for
 *    f32/f16/bf16, f64 for f64, i64 for the integers and bool. In eager
 *    numerics it is rounded to its dtype once computed (mathlib.c); in
 *    fast numerics (the default) a float value stays unrounded until it is
 *    stored (lk_result, lk_store_output), casts to float dtypes too; the
 *    constants of iota and full round in both (docs/NUMERICS.md).
 *
 * The code is scalar, in plain counted loops; LLVM's loop vectorizer widens
 * the innermost loops for the host (mathlib.c keeps the f32 math free of
 * calls so that it can). Where CUDA uses threads, the CPU code has loops:
 *
 *  - POINTWISE: the iteration space split as [outer, inner], inner being
 *    the trailing dims (at least 64 elements when the shape allows), so the
 *    coordinates of the inner dims come from the inner induction variable
 *    and those of the outer dims are computed once per outer step: a bias
 *    broadcast along the last dim is then a contiguous load.
 *  - REDUCE: a loop over rows; in each row one loop per reduction (a phase)
 *    with an accumulator, the per-row values computed after their phase,
 *    then one loop that writes the full-shape outputs, then the per-row
 *    outputs. Sums carry llvm.loop.vectorize.enable, which allows the
 *    vectorizer to reassociate them (f32 sums are accumulated in several
 *    lanes, as the CUDA threads do); max and min reduce integer order keys
 *    (mathlib.c) so that NaN propagates and the loop still vectorizes.
 *    Reductions over leading dims (column sums) run blocks of rows through
 *    each phase together instead (reduce_columns), so that the innermost
 *    loop reads neighbouring elements.
 *
 * Each kernel runs a range [begin, end) of its outer loop (elements or rows)
 * so the runtime can split it across threads. Its signature is
 *   void fc_gN(void **args, i64 begin, i64 end)
 * a thin wrapper over an internal body whose pointer parameters are
 * noalias, which is what lets the vectorizer skip runtime alias checks (the
 * memory plan never lets a kernel's inputs and outputs overlap).
 *
 * Concat and gather use selects over clamped indices instead of branches:
 * every operand is evaluated (at an in-bounds index) and the right one is
 * selected, so the loop stays branch-free and vectorizable.
 *
 * A per-row value exists for the current row only. check_row_reads() makes
 * sure at compile time that every read of one is at the row's own index;
 * a group where fusion put it anywhere else is refused, not miscompiled.
 */
#include "codegen/llvm/lower_impl.h"
#include "passes/epilogue.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------ */

void lk_fail(kern *k, fc_status st, const char *fmt, ...) {
    if (k->err) return;
    k->err = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->msg, sizeof k->msg, fmt, ap);
    va_end(ap);
}

/* ---- memo ------------------------------------------------------------------ */

static bool remember(kern *k, const memo *m) {
    if (k->nmemo == k->cap_memo) {
        int cap = k->cap_memo ? k->cap_memo * 2 : 128;
        memo *p = realloc(k->memo, sizeof *p * (size_t)cap);
        if (!p) {
            lk_fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
            return false;
        }
        k->memo = p;
        k->cap_memo = cap;
    }
    k->memo[k->nmemo++] = *m;
    return true;
}

static LLVMValueRef find(const kern *k, const memo *key) {
    for (int i = k->nmemo - 1; i >= 0; i--) {
        const memo *m = &k->memo[i];
        if (m->kind != key->kind || m->idx != key->idx || m->id != key->id) continue;
        if (key->kind != MEMO_VALUE && !same_dims(m->rank, m->dims, key->rank, key->dims)) continue;
        if (key->kind == MEMO_BIDX && !same_dims(m->xrank, m->xdims, key->xrank, key->xdims)) continue;
        return m->val;
    }
    return NULL;
}

static memo coord_key(int rank, const int64_t *dims, int d, LLVMValueRef idx) {
    memo m = {.kind = MEMO_COORD, .id = d, .idx = idx, .rank = rank};
    memcpy(m.dims, dims, sizeof(int64_t) * (size_t)rank);
    return m;
}

/* ---- index arithmetic --------------------------------------------------------- */

/* Coordinate d of linear index L in a shape: (L / stride) % dim. The modulo
 * is left out when no dim before d is larger than 1 (L / stride < dim then). */
LLVMValueRef lk_coord(kern *k, int rank, const int64_t *dims, LLVMValueRef L, int d) {
    if (dims[d] == 1) return ic(k, 0);
    memo key = coord_key(rank, dims, d, L);
    LLVMValueRef c = find(k, &key);
    if (c) return c;
    c = idiv(k, L, prod(dims, d + 1, rank));
    if (prod(dims, 0, d) > 1) c = irem(k, c, dims[d]);
    key.val = c;
    remember(k, &key);
    return c;
}

/* Record a coordinate known from a loop (so lk_coord() need not divide). */
void lk_seed_coord(kern *k, int rank, const int64_t *dims, int d, LLVMValueRef L, LLVMValueRef c) {
    memo key = coord_key(rank, dims, d, L);
    key.val = c;
    remember(k, &key);
}

/* Linear index of coordinates c in shape x. */
LLVMValueRef lk_linear(kern *k, const fc_value *x, LLVMValueRef *c) {
    LLVMValueRef idx = ic(k, 0);
    for (int d = 0; d < x->rank; d++)
        if (x->dims[d] != 1) idx = iadd(k, idx, imul(k, c[d], prod(x->dims, d + 1, x->rank)));
    return idx;
}

/* Index of operand x, broadcast (NumPy: right-aligned) into shape `out`, at
 * index L of `out`. */
static LLVMValueRef bcast_index(kern *k, int orank, const int64_t *odims, LLVMValueRef L, const fc_value *x) {
    if (same_dims(orank, odims, x->rank, x->dims)) return L;
    if (numel_of(x) == 1) return ic(k, 0);
    memo key = {.kind = MEMO_BIDX, .idx = L, .rank = orank, .xrank = x->rank};
    memcpy(key.dims, odims, sizeof(int64_t) * (size_t)orank);
    memcpy(key.xdims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    LLVMValueRef idx = find(k, &key);
    if (idx) return idx;
    int off = orank - x->rank;
    idx = ic(k, 0);
    for (int d = 0; d < x->rank; d++) {
        if (x->dims[d] == 1) continue;
        LLVMValueRef c = lk_coord(k, orank, odims, L, d + off);
        idx = iadd(k, idx, imul(k, c, prod(x->dims, d + 1, x->rank)));
    }
    key.val = idx;
    remember(k, &key);
    return idx;
}

/* ---- values ------------------------------------------------------------------ */

LLVMValueRef lk_zero(kern *k, fc_dtype dt) {
    LLVMTypeRef t = lm_ctype(k->M, dt);
    return fc_dtype_is_float(dt) ? LLVMConstReal(t, 0) : LLVMConstInt(t, 0, 0);
}

static bool input_pos(const kern *k, const fc_value *v, int *pos) {
    for (int i = 0; i < k->gr->ninputs; i++)
        if (k->gr->inputs[i] == v) {
            *pos = i;
            return true;
        }
    return false;
}

static LLVMValueRef element_ptr(kern *k, int arg, fc_dtype dt, LLVMValueRef idx) {
    return LLVMBuildInBoundsGEP2(B, lm_stype(k->M, dt), k->ptr[arg], &idx, 1, "");
}

static LLVMValueRef load_input(kern *k, int pos, const fc_value *v, LLVMValueRef L) {
    LLVMValueRef ld = LLVMBuildLoad2(B, lm_stype(k->M, v->dtype), element_ptr(k, pos, v->dtype, L), "");
    LLVMSetAlignment(ld, (unsigned)fc_dtype_size(v->dtype));
    return lm_from_storage(k->M, v->dtype, ld);
}

void lk_store_output(kern *k, int o, const fc_value *v, LLVMValueRef L, LLVMValueRef x) {
    /* lm_to_storage takes a value of v's dtype: one kept unrounded is
     * rounded here, once. */
    if (lk_unrounded(k, v)) x = lm_round(k->M, v->dtype, x);
    LLVMValueRef st = LLVMBuildStore(B, lm_to_storage(k->M, v->dtype, x),
                                     element_ptr(k, k->gr->ninputs + o, v->dtype, L));
    LLVMSetAlignment(st, (unsigned)fc_dtype_size(v->dtype));
}

/* The dtype an elementwise node computes in, exactly as the reference
 * (runtime/ref/interp_elementwise.c, compute_dtype): its result's dtype, except that
 * compares work in the promotion of their operands (a weak scalar taking
 * the tensor's) and cast converts from its input's dtype. */
static fc_dtype weak_dtype(fc_dtype other, const fc_value *w) {
    if (fc_dtype_is_float(other)) return other;
    if (w->weak_int) return other == FC_BOOL ? FC_I64 : other;
    return FC_F32;
}

static fc_dtype compute_dtype(const fc_node *n) {
    if (fc_op_is_compare(n->op)) {
        const fc_value *a = n->in[0], *b = n->in[1];
        if (a->weak && b->weak) return FC_F64;
        if (a->weak) return weak_dtype(b->dtype, a);
        if (b->weak) return weak_dtype(a->dtype, b);
        return fc_promote(a->dtype, b->dtype);
    }
    if (n->op == FC_OP_CAST) return n->in[0]->dtype;
    return n->out[0]->dtype;
}

/* Operand i of n at n's index L, converted to dtype cdt. A weak scalar is
 * a constant rounded to fc_weak_scalar_dtype (f32 for an add of bf16
 * values: the same compute type as cdt's), as the reference rounds it. */
static LLVMValueRef operand(kern *k, const fc_node *n, int i, LLVMValueRef L, fc_dtype cdt) {
    const fc_value *x = n->in[i];
    if (x->weak) return lm_literal(k->M, fc_weak_scalar_dtype(n->op, cdt), x->scalar);
    const fc_value *out = n->out[0];
    LLVMValueRef v = lk_emit_value(k, x, bcast_index(k, out->rank, out->dims, L, x));
    return lm_convert(k->M, v, x->dtype, cdt);
}

static LLVMValueRef fconst(kern *k, LLVMValueRef like, double x) { return LLVMConstReal(LLVMTypeOf(like), x); }

static LLVMValueRef unary_float(kern *k, fc_op op, LLVMValueRef a) {
    lmod *M = k->M;
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMValueRef one = fconst(k, a, 1.0);
    switch (op) {
    case FC_OP_NEG: return LLVMBuildFNeg(B, a, "");
    case FC_OP_ABS: return lm_intrinsic(M, "llvm.fabs", t, &a, 1);
    case FC_OP_EXP: return lm_exp(M, a);
    case FC_OP_LOG: return lm_log(M, a);
    case FC_OP_SQRT: return lm_intrinsic(M, "llvm.sqrt", t, &a, 1);
    case FC_OP_RSQRT: return LLVMBuildFDiv(B, one, lm_intrinsic(M, "llvm.sqrt", t, &a, 1), "");
    case FC_OP_RECIP: return LLVMBuildFDiv(B, one, a, "");
    case FC_OP_SIN: return lm_intrinsic(M, "llvm.sin", t, &a, 1);
    case FC_OP_COS: return lm_intrinsic(M, "llvm.cos", t, &a, 1);
    case FC_OP_TANH: return lm_tanh(M, a);
    case FC_OP_ERF: return lm_erf(M, a);
    case FC_OP_SIGMOID: /* 1 / (1 + e^-x) */
        return LLVMBuildFDiv(B, one, LLVMBuildFAdd(B, one, lm_exp(M, LLVMBuildFNeg(B, a, "")), ""), "");
    case FC_OP_SILU: /* x / (1 + e^-x) */
        return LLVMBuildFDiv(B, a, LLVMBuildFAdd(B, one, lm_exp(M, LLVMBuildFNeg(B, a, "")), ""), "");
    case FC_OP_HARDSWISH: { /* x * min(max(x + 3, 0), 6) / 6; NaN stays NaN (ordered compares are false) */
        LLVMValueRef s = LLVMBuildFAdd(B, a, fconst(k, a, 3.0), "");
        s = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, s, fconst(k, a, 0), ""), fconst(k, a, 0), s, "");
        s = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, s, fconst(k, a, 6.0), ""), fconst(k, a, 6.0), s, "");
        return LLVMBuildFMul(B, a, LLVMBuildFMul(B, s, fconst(k, a, 1.0 / 6.0), ""), "");
    }
    case FC_OP_RELU: /* x < 0 ? 0 : x; NaN stays NaN */
        return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, a, fconst(k, a, 0), ""), fconst(k, a, 0), a, "");
    case FC_OP_GELU: { /* x/2 (1 + erf(x / sqrt 2)) */
        LLVMValueRef e = lm_erf(M, LLVMBuildFMul(B, a, fconst(k, a, 0.70710678118654752440), ""));
        return LLVMBuildFMul(B, LLVMBuildFMul(B, a, fconst(k, a, 0.5), ""), LLVMBuildFAdd(B, one, e, ""), "");
    }
    case FC_OP_GELU_TANH: {
        /* x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
         * x / (1 + e^(-2u)) (since 1 + tanh(u) = 2 / (1 + e^(-2u))): one exp,
         * and no cancellation in 1 + tanh(u) for negative x. */
        LLVMValueRef x3 = LLVMBuildFMul(B, LLVMBuildFMul(B, a, a, ""), a, "");
        LLVMValueRef in = LLVMBuildFAdd(B, a, LLVMBuildFMul(B, x3, fconst(k, a, 0.044715), ""), "");
        LLVMValueRef e = lm_exp(M, LLVMBuildFMul(B, in, fconst(k, a, -2.0 * 0.79788456080286535588), ""));
        return LLVMBuildFDiv(B, a, LLVMBuildFAdd(B, one, e, ""), "");
    }
    default: return NULL;
    }
}

static LLVMValueRef unary_int(kern *k, fc_op op, LLVMValueRef a) {
    LLVMValueRef z = LLVMConstInt(LLVMTypeOf(a), 0, 0);
    switch (op) {
    case FC_OP_NEG: return LLVMBuildSub(B, z, a, "");
    case FC_OP_ABS: return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, z, ""), LLVMBuildSub(B, z, a, ""), a, "");
    case FC_OP_RELU: return lm_smax(k->M, a, z);
    default: return NULL;
    }
}

static LLVMValueRef binary(kern *k, fc_op op, bool fl, LLVMValueRef a, LLVMValueRef b) {
    lmod *M = k->M;
    switch (op) {
    case FC_OP_ADD: return fl ? LLVMBuildFAdd(B, a, b, "") : LLVMBuildAdd(B, a, b, "");
    case FC_OP_SUB: return fl ? LLVMBuildFSub(B, a, b, "") : LLVMBuildSub(B, a, b, "");
    case FC_OP_MUL: return fl ? LLVMBuildFMul(B, a, b, "") : LLVMBuildMul(B, a, b, "");
    case FC_OP_DIV: return fl ? LLVMBuildFDiv(B, a, b, "") : NULL; /* integer division gives f32 */
    case FC_OP_MAX: return fl ? lm_fmax(M, a, b) : lm_smax(M, a, b);
    case FC_OP_MIN: return fl ? lm_fmin(M, a, b) : lm_smin(M, a, b);
    case FC_OP_POW: {
        LLVMValueRef ab[2] = {a, b};
        if (fl) return lm_intrinsic(M, "llvm.pow", LLVMTypeOf(a), ab, 2);
        /* Integers: pow in double, then truncated and saturated, which is
         * what the reference computes. */
        ab[0] = LLVMBuildSIToFP(B, a, M->t_f64, "");
        ab[1] = LLVMBuildSIToFP(B, b, M->t_f64, "");
        return lm_convert(M, lm_intrinsic(M, "llvm.pow", M->t_f64, ab, 2), FC_F64, FC_I64);
    }
    default: return NULL;
    }
}

static LLVMValueRef compare(kern *k, fc_op op, bool fl, LLVMValueRef a, LLVMValueRef b) {
    LLVMValueRef c;
    if (fl) {
        /* Ordered predicates (false for NaN), except ne, which is true. */
        LLVMRealPredicate p = op == FC_OP_EQ ? LLVMRealOEQ : op == FC_OP_NE ? LLVMRealUNE : op == FC_OP_LT ? LLVMRealOLT
                              : op == FC_OP_LE ? LLVMRealOLE : op == FC_OP_GT ? LLVMRealOGT : LLVMRealOGE;
        c = LLVMBuildFCmp(B, p, a, b, "");
    } else {
        LLVMIntPredicate p = op == FC_OP_EQ ? LLVMIntEQ : op == FC_OP_NE ? LLVMIntNE : op == FC_OP_LT ? LLVMIntSLT
                             : op == FC_OP_LE ? LLVMIntSLE : op == FC_OP_GT ? LLVMIntSGT : LLVMIntSGE;
        c = LLVMBuildICmp(B, p, a, b, "");
    }
    return LLVMBuildZExt(B, c, k->M->t_i64, "");
}

/* Division by a weak scalar b is a multiply by 1/b rounded to the compute
 * type, as the CUDA code generator and eager PyTorch's CUDA kernel do it
 * (codegen/cuda/expr.c, weak_reciprocal): *inv is 1/b. False for b = 0 or
 * inf, which keep the division. */
static bool weak_reciprocal(const fc_node *n, fc_dtype cdt, double *inv) {
    if (!n->in[1]->weak) return false;
    fc_dtype wt = fc_opmath_dtype(cdt);
    double b = fc_round_to_dtype(n->in[1]->scalar, wt);
    *inv = fc_round_to_dtype(1.0 / b, wt);
    return isfinite(b) && isfinite(*inv);
}

static LLVMValueRef emit_elementwise(kern *k, const fc_node *n, LLVMValueRef L) {
    const fc_value *v = n->out[0];
    fc_dtype cdt = compute_dtype(n);
    bool fl = fc_dtype_is_float(cdt);
    if (n->op == FC_OP_CAST) {
        /* Kept unrounded (fast numerics): converted to the compute type only. */
        fc_dtype to = lk_unrounded(k, v) ? fc_opmath_dtype(v->dtype) : v->dtype;
        return lm_convert(k->M, operand(k, n, 0, L, cdt), cdt, to);
    }
    if (n->op == FC_OP_WHERE) {
        /* The condition is read as bool, never converted. */
        LLVMValueRef c = lk_emit_value(k, n->in[0], bcast_index(k, v->rank, v->dims, L, n->in[0]));
        c = LLVMBuildICmp(B, LLVMIntNE, c, LLVMConstInt(LLVMTypeOf(c), 0, 0), "");
        return LLVMBuildSelect(B, c, operand(k, n, 1, L, cdt), operand(k, n, 2, L, cdt), "");
    }
    LLVMValueRef a = operand(k, n, 0, L, cdt), r = NULL;
    if (fc_op_is_compare(n->op)) return compare(k, n->op, fl, a, operand(k, n, 1, L, cdt));
    double inv;
    if (n->nin == 1) r = fl ? unary_float(k, n->op, a) : unary_int(k, n->op, a);
    else if (fl && n->op == FC_OP_DIV && weak_reciprocal(n, cdt, &inv)) r = LLVMBuildFMul(B, a, fconst(k, a, inv), "");
    else r = binary(k, n->op, fl, a, operand(k, n, 1, L, cdt));
    if (!r) {
        lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: %s on %s is not supported", fc_op_table[n->op].name,
                fc_dtype_name(cdt));
        return lk_zero(k, v->dtype);
    }
    return lk_result(k, v, r);
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* concat: every operand is read at its coordinate clamped into range, and
 * the one that owns the coordinate is selected. */
/* Length of concat n's operands [lo, hi) along ax. */
static int64_t concat_len(const fc_node *n, int ax, int lo, int hi) {
    int64_t len = 0;
    for (int i = lo; i < hi; i++) len += n->in[i]->dims[ax];
    return len;
}

/* Operands [lo, hi) of concat n, the first starting at off along ax (the
 * range owns coordinates): a balanced tree of selects, log2 of the
 * operands deep, with no bound on their number. Every operand is computed
 * (a select is not a branch), at a coordinate clamped into its range. */
static LLVMValueRef concat_range(kern *k, const fc_node *n, const fc_value *v, LLVMValueRef *c, int ax, int lo, int hi,
                                 int64_t off) {
    if (hi - lo == 1) {
        const fc_value *x = n->in[lo];
        LLVMValueRef in_c[FC_MAX_RANK];
        memcpy(in_c, c, sizeof(LLVMValueRef) * (size_t)v->rank);
        LLVMValueRef t = isub(k, c[ax], ic(k, off));
        in_c[ax] = lm_smin(k->M, lm_smax(k->M, t, ic(k, 0)), ic(k, x->dims[ax] - 1));
        return lm_convert(k->M, lk_emit_value(k, x, lk_linear(k, x, in_c)), x->dtype, v->dtype);
    }
    int mid = lo + (hi - lo) / 2;
    int64_t left = concat_len(n, ax, lo, mid);
    if (left == 0) return concat_range(k, n, v, c, ax, mid, hi, off); /* owns no coordinate */
    if (concat_len(n, ax, mid, hi) == 0) return concat_range(k, n, v, c, ax, lo, mid, off);
    LLVMValueRef a = concat_range(k, n, v, c, ax, lo, mid, off), b = concat_range(k, n, v, c, ax, mid, hi, off + left);
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, c[ax], ic(k, off + left), ""), a, b, "");
}

static LLVMValueRef emit_concat(kern *k, const fc_node *n, const fc_value *v, LLVMValueRef *c) {
    int ax = norm_axis(n->a.axis, v->rank);
    if (concat_len(n, ax, 0, n->nin) == 0) return lk_zero(k, v->dtype);
    return concat_range(k, n, v, c, ax, 0, n->nin, 0);
}

static LLVMValueRef emit_view(kern *k, const fc_node *n, const fc_value *v, LLVMValueRef L) {
    lmod *M = k->M;
    const fc_attrs *a = &n->a;
    const fc_value *x = n->nin ? n->in[0] : NULL;
    if (n->op == FC_OP_RESHAPE) return lk_emit_value(k, x, L); /* same linear index */
    if (n->op == FC_OP_FULL) return lm_literal(M, v->dtype, a->value);
    LLVMValueRef c[FC_MAX_RANK], in_c[FC_MAX_RANK];
    for (int d = 0; d < v->rank; d++) c[d] = lk_coord(k, v->rank, v->dims, L, d);
    switch (n->op) {
    case FC_OP_PERMUTE:
        for (int d = 0; d < v->rank; d++) in_c[norm_axis(a->list[d], x->rank)] = c[d];
        break;
    case FC_OP_EXPAND: {
        int off = v->rank - x->rank;
        for (int d = 0; d < x->rank; d++) in_c[d] = x->dims[d] == 1 ? ic(k, 0) : c[d + off];
        break;
    }
    case FC_OP_SLICE:
    case FC_OP_SPLIT: {
        int ax = norm_axis(a->axis, x->rank);
        int64_t step;
        const int64_t start = fc_view_start(v, ax, &step);
        memcpy(in_c, c, sizeof(LLVMValueRef) * (size_t)x->rank);
        in_c[ax] = iadd(k, ic(k, start), imul(k, c[ax], step));
        break;
    }
    case FC_OP_IOTA: {
        LLVMValueRef i = v->rank > 0 ? c[norm_axis(a->axis, v->rank)] : ic(k, 0);
        if (fc_dtype_is_float(v->dtype)) return lm_round(M, v->dtype, LLVMBuildUIToFP(B, i, lm_ctype(M, v->dtype), ""));
        return lm_round(M, v->dtype, LLVMBuildZExt(B, i, M->t_i64, ""));
    }
    case FC_OP_CONCAT: return emit_concat(k, n, v, c);
    case FC_OP_GATHER: {
        const fc_value *tab = n->in[0], *ix = n->in[1];
        int ax = norm_axis(a->axis, tab->rank);
        LLVMValueRef ixc[FC_MAX_RANK];
        for (int d = 0; d < ix->rank; d++) ixc[d] = c[ax + d];
        LLVMValueRef e = lk_emit_value(k, ix, lk_linear(k, ix, ixc));
        /* Negative indices count from the end; out-of-range ones are
         * clamped (a kernel cannot report them; the reference rejects them). */
        int64_t dim = tab->dims[ax];
        e = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, e, lm_i64(M, 0), ""), LLVMBuildAdd(B, e, lm_i64(M, dim), ""), e, "");
        e = lm_smin(M, lm_smax(M, e, lm_i64(M, 0)), lm_i64(M, dim > 0 ? dim - 1 : 0));
        if (k->ity != M->t_i64) e = LLVMBuildTrunc(B, e, k->ity, "");
        for (int d = 0; d < ax; d++) in_c[d] = c[d];
        in_c[ax] = e;
        for (int d = ax + 1; d < tab->rank; d++) in_c[d] = c[d - 1 + ix->rank];
        x = tab;
        break;
    }
    default: FC_UNREACHABLE("not a view");
    }
    return lk_emit_value(k, x, lk_linear(k, x, in_c));
}

LLVMValueRef lk_emit_value(kern *k, const fc_value *v, LLVMValueRef L) {
    if (k->err) return lk_zero(k, v->dtype);
    /* A per-row value is the current row's, computed after its phase. */
    if (k->reduce && k->is_row[v->id]) {
        if (k->row_arr && k->row_arr[v->id]) {
            LLVMTypeRef t = lm_ctype(k->M, v->dtype);
            LLVMValueRef at = LLVMBuildInBoundsGEP2(B, t, k->row_arr[v->id], &k->cur_b, 1, "");
            return LLVMBuildLoad2(B, t, at, "");
        }
        if (k->row_val[v->id]) return k->row_val[v->id];
        lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a per-row value is read before its reduction");
        return lk_zero(k, v->dtype);
    }
    memo key = {.kind = MEMO_VALUE, .id = v->id, .idx = L};
    LLVMValueRef e = find(k, &key);
    if (e) return e;
    int pos;
    const fc_node *n = v->def;
    if (input_pos(k, v, &pos)) e = load_input(k, pos, v, L);
    else if (!n) {
        lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a value read by the group is neither computed nor an input");
        return lk_zero(k, v->dtype);
    } else if (fc_op_is_reduce(n->op)) {
        lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a reduction result is read at an element index");
        return lk_zero(k, v->dtype);
    } else if (fc_op_is_view(n->op)) e = emit_view(k, n, v, L);
    else if (fc_op_is_elementwise(n->op)) e = emit_elementwise(k, n, L);
    else {
        lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: %s cannot be computed inside a kernel", fc_op_table[n->op].name);
        return lk_zero(k, v->dtype);
    }
    key.val = e;
    remember(k, &key);
    return e;
}

/* ---- functions ------------------------------------------------------------------ */

static void add_attr(lmod *M, LLVMValueRef fn, unsigned index, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind) LLVMAddAttributeAtIndex(fn, index, LLVMCreateEnumAttribute(M->c, kind, 0));
}

static void summarize(const fc_group *gr, char *out, size_t n) {
    const fc_node *n0 = gr->nnodes ? gr->nodes[0] : NULL;
    if (gr->kind == FC_GROUP_LIBRARY && n0 && n0->op == FC_OP_GEMM) { /* "gemm[trans_b,bias] -> bf16" */
        fc_gemm_describe(n0, out, n);
        return;
    }
    if (gr->kind == FC_GROUP_LIBRARY && n0 && n0->op == FC_OP_ATTENTION) { /* "attention[causal,mask] -> f32" */
        bool causal = n0->a.causal, mask = n0->nin > 3;
        snprintf(out, n, "attention%s%s%s%s%s -> %s", causal || mask ? "[" : "", causal ? "causal" : "",
                 causal && mask ? "," : "", mask ? "mask" : "", causal || mask ? "]" : "",
                 fc_dtype_name(n0->out[0]->dtype));
        return;
    }
    size_t pos = (size_t)snprintf(out, n, "%s:", gr->kind == FC_GROUP_REDUCE ? "reduce"
                                                 : gr->kind == FC_GROUP_LIBRARY ? "library"
                                                 : gr->kind == FC_GROUP_ALIAS ? "alias" : "pointwise");
    for (int i = 0; i < gr->nnodes && pos + 16 < n; i++)
        pos += (size_t)snprintf(out + pos, n - pos, "%s%s", i ? "," : " ", fc_op_table[gr->nodes[i]->op].name);
}

/* The largest element count of any value of the graph: it decides the index type. */
static int64_t largest_numel(const fc_graph *g) {
    int64_t m = 1;
    for (int i = 0; i < g->nparams; i++) {
        int64_t n = numel_of(g->params[i]);
        if (n > m) m = n;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int o = 0; o < n->nout; o++) {
            int64_t c = numel_of(n->out[o]);
            if (c > m) m = c;
        }
    }
    return m;
}

/*
 * Emit group gr as `void name(void **args, i64 begin, i64 end)`, which loads
 * the pointers and calls the internal body `name.body(begin, end, p0, ...)`
 * whose pointer parameters are noalias (inputs readonly, outputs writeonly).
 */
static fc_status lower_group(lmod *M, const fc_plan *plan, const fc_group *gr, const char *name, bool wide,
                             int64_t *grain, bool *row_conflict, char *msg, size_t msg_size) {
    int nptr = gr->ninputs + gr->noutputs;
    LLVMTypeRef *params = calloc((size_t)nptr + 2, sizeof *params);
    kern k = {.M = M, .plan = plan, .gr = gr, .reduce = gr->kind == FC_GROUP_REDUCE};
    k.ity = wide ? M->t_i64 : M->t_i32;
    k.ptr = calloc((size_t)nptr + 1, sizeof *k.ptr);
    k.is_row = calloc((size_t)plan->g->next_value_id + 1, sizeof *k.is_row);
    k.row_val = calloc((size_t)plan->g->next_value_id + 1, sizeof *k.row_val);
    if (!params || !k.ptr || !k.is_row || !k.row_val) {
        free(params);
        free(k.ptr);
        free(k.is_row);
        free(k.row_val);
        return FC_ERR_NOMEM;
    }
    params[0] = params[1] = M->t_i64;
    for (int i = 0; i < nptr; i++) {
        const fc_value *v = i < gr->ninputs ? gr->inputs[i] : gr->outputs[i - gr->ninputs];
        params[i + 2] = LLVMPointerType(lm_stype(M, v->dtype), 0);
    }
    char body_name[80];
    snprintf(body_name, sizeof body_name, "%s.body", name);
    LLVMTypeRef body_ty = LLVMFunctionType(M->t_void, params, (unsigned)nptr + 2, 0);
    LLVMValueRef body = LLVMAddFunction(M->m, body_name, body_ty);
    LLVMSetLinkage(body, LLVMInternalLinkage);
    add_attr(M, body, LLVMAttributeFunctionIndex, "nounwind");
    for (int i = 0; i < nptr; i++) {
        unsigned idx = (unsigned)i + 3; /* attribute indices of parameters start at 1 */
        add_attr(M, body, idx, "noalias");
        add_attr(M, body, idx, "nocapture");
        add_attr(M, body, idx, i < gr->ninputs ? "readonly" : "writeonly");
        k.ptr[i] = LLVMGetParam(body, (unsigned)i + 2);
    }
    LLVMPositionBuilderAtEnd(M->b, LLVMAppendBasicBlockInContext(M->c, body, "entry"));
    LLVMValueRef b = LLVMGetParam(body, 0), e = LLVMGetParam(body, 1);
    if (!wide) {
        b = LLVMBuildTrunc(M->b, b, M->t_i32, "");
        e = LLVMBuildTrunc(M->b, e, M->t_i32, "");
    }
    if (gr->kind == FC_GROUP_REDUCE) lk_reduce_kernel(&k, b, e);
    else lk_pointwise_kernel(&k, b, e);
    LLVMBuildRetVoid(M->b);

    /* The wrapper with the runtime's calling convention. */
    LLVMTypeRef i8p = LLVMPointerType(M->t_i8, 0);
    LLVMTypeRef wparams[3] = {LLVMPointerType(i8p, 0), M->t_i64, M->t_i64};
    LLVMValueRef wrap = LLVMAddFunction(M->m, name, LLVMFunctionType(M->t_void, wparams, 3, 0));
    add_attr(M, wrap, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(M->b, LLVMAppendBasicBlockInContext(M->c, wrap, "entry"));
    LLVMValueRef *cargs = calloc((size_t)nptr + 2, sizeof *cargs);
    if (!cargs) {
        k.err = FC_ERR_NOMEM;
    } else {
        cargs[0] = LLVMGetParam(wrap, 1);
        cargs[1] = LLVMGetParam(wrap, 2);
        for (int i = 0; i < nptr; i++) {
            LLVMValueRef idx = LLVMConstInt(M->t_i64, (unsigned long long)i, 0);
            LLVMValueRef slot = LLVMBuildInBoundsGEP2(M->b, i8p, LLVMGetParam(wrap, 0), &idx, 1, "");
            LLVMValueRef p = LLVMBuildLoad2(M->b, i8p, slot, "");
            cargs[i + 2] = LLVMBuildBitCast(M->b, p, params[i + 2], "");
        }
        LLVMBuildCall2(M->b, body_ty, body, cargs, (unsigned)nptr + 2, "");
        LLVMBuildRetVoid(M->b);
    }
    fc_status st = k.err;
    if (st && st != FC_ERR_NOMEM) snprintf(msg, msg_size, "%s", k.msg);
    *grain = k.grain;
    *row_conflict = k.row_conflict;
    free(k.row_arr);
    free(cargs);
    free(params);
    free(k.ptr);
    free(k.is_row);
    free(k.row_val);
    free(k.memo);
    return st;
}

fc_status fc_llvm_lower(lmod *M, const fc_plan *plan, fc_llvm_kernel *kernels) {
    bool wide = largest_numel(plan->g) >= ((int64_t)1 << 31);
    for (int i = 0; i < plan->ngroups; i++) {
        const fc_group *gr = plan->groups[i];
        fc_llvm_kernel *kn = &kernels[i];
        memset(kn, 0, sizeof *kn);
        summarize(gr, kn->summary, sizeof kn->summary);
        if (gr->kind != FC_GROUP_POINTWISE && gr->kind != FC_GROUP_REDUCE) continue;
        char name[32], msg[512] = "";
        snprintf(name, sizeof name, "fc_g%d", i);
        int64_t grain = 0;
        fc_status st = lower_group(M, plan, gr, name, wide, &grain, &M->row_conflict, msg, sizeof msg);
        if (st == FC_ERR_NOMEM) return fc_set_error(M->ctx, st, "out of memory (LLVM codegen)");
        if (st) return fc_set_error(M->ctx, st, "%s (group %d: %s)", msg, i, kn->summary);
        int64_t space = prod(gr->space, 0, gr->rank);
        kn->iters = gr->kind == FC_GROUP_REDUCE ? gr->rows : space;
        kn->work = space * (gr->nnodes + 1);
        /* Pointwise ranges split at whole inner rows when there are enough
         * of them; a kernel with odd-shaped outputs writes those in the
         * call that starts at 0, so any split is correct. */
        kn->grain = grain > 0 ? grain : 1;
        if (gr->kind == FC_GROUP_POINTWISE && gr->rank > 0 && gr->space[gr->rank - 1] >= 64 &&
            space / gr->space[gr->rank - 1] >= 16)
            kn->grain = gr->space[gr->rank - 1];
    }
    return FC_OK;
}

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
 *  - Every value is rounded to its dtype once computed (mathlib.c), in the
 *    compute type of the dtype: f32 for f32/f16/bf16, f64 for f64, i64 for
 *    the integers and bool.
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
#include "codegen/llvm/llvm_internal.h"
#include "passes/epilogue.h"

#include <llvm-c/DebugInfo.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernel state --------------------------------------------------------- */

typedef enum memo_kind {
    MEMO_VALUE, /* a value at an index */
    MEMO_COORD, /* coordinate `id` of an index in a shape */
    MEMO_BIDX,  /* the index of an operand (xdims) broadcast into a shape (dims) */
} memo_kind;

typedef struct memo {
    memo_kind kind;
    int id;           /* VALUE: the value id; COORD: the dim */
    LLVMValueRef idx; /* the linear index it is for */
    int rank, xrank;
    int64_t dims[FC_MAX_RANK], xdims[FC_MAX_RANK];
    LLVMValueRef val;
} memo;

typedef struct kern {
    lmod *M;
    const fc_plan *plan;
    const fc_group *gr;
    LLVMValueRef *ptr; /* body parameters: one pointer per group input, then per output */
    LLVMTypeRef ity;   /* index arithmetic: i32 when every index fits, else i64 */
    memo *memo;
    int nmemo, cap_memo;
    /* REDUCE groups */
    bool reduce;
    bool *is_row;           /* per value id: computed once per row */
    LLVMValueRef *row_val;  /* per value id: its value for the current row */
    LLVMValueRef row;       /* the current row (ity) */
    /* Column schedule (a block of rows at once): per value id, an array of
     * its per-row values for the rows of the block, read at cur_b. */
    LLVMValueRef *row_arr;
    LLVMValueRef cur_b;
    int64_t grain;          /* split the outer range at multiples of this (0: no preference) */
    bool row_conflict;      /* check_row_reads refused the group */
    fc_status err;
    char msg[512];
} kern;

static void fail(kern *k, fc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(kern *k, fc_status st, const char *fmt, ...) {
    if (k->err) return;
    k->err = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->msg, sizeof k->msg, fmt, ap);
    va_end(ap);
}

#define B (k->M->b)

/* ---- shapes ---------------------------------------------------------------- */

static int64_t prod(const int64_t *dims, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= dims[i];
    return n;
}

static int64_t numel_of(const fc_value *v) { return prod(v->dims, 0, v->rank); }

static bool same_dims(int ra, const int64_t *a, int rb, const int64_t *b) {
    if (ra != rb) return false;
    for (int i = 0; i < ra; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static bool is_full(const fc_group *gr, const fc_value *v) { return same_dims(v->rank, v->dims, gr->rank, gr->space); }

/* ---- memo ------------------------------------------------------------------ */

static bool remember(kern *k, const memo *m) {
    if (k->nmemo == k->cap_memo) {
        int cap = k->cap_memo ? k->cap_memo * 2 : 128;
        memo *p = realloc(k->memo, sizeof *p * (size_t)cap);
        if (!p) {
            fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
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

static LLVMValueRef ic(kern *k, int64_t v) { return LLVMConstInt(k->ity, (unsigned long long)v, 1); }
static LLVMValueRef iadd(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(B, a, b, ""); }
static LLVMValueRef isub(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWSub(B, a, b, ""); }
static LLVMValueRef imul(kern *k, LLVMValueRef a, int64_t c) {
    return c == 1 ? a : LLVMBuildNSWMul(B, a, ic(k, c), "");
}
static LLVMValueRef idiv(kern *k, LLVMValueRef a, int64_t c) { return c == 1 ? a : LLVMBuildUDiv(B, a, ic(k, c), ""); }
static LLVMValueRef irem(kern *k, LLVMValueRef a, int64_t c) { return LLVMBuildURem(B, a, ic(k, c), ""); }

/* Coordinate d of linear index L in a shape: (L / stride) % dim. The modulo
 * is left out when no dim before d is larger than 1 (L / stride < dim then). */
static LLVMValueRef coord(kern *k, int rank, const int64_t *dims, LLVMValueRef L, int d) {
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

/* Record a coordinate known from a loop (so coord() need not divide). */
static void seed_coord(kern *k, int rank, const int64_t *dims, int d, LLVMValueRef L, LLVMValueRef c) {
    memo key = coord_key(rank, dims, d, L);
    key.val = c;
    remember(k, &key);
}

/* Linear index of coordinates c in shape x. */
static LLVMValueRef linear(kern *k, const fc_value *x, LLVMValueRef *c) {
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
        LLVMValueRef c = coord(k, orank, odims, L, d + off);
        idx = iadd(k, idx, imul(k, c, prod(x->dims, d + 1, x->rank)));
    }
    key.val = idx;
    remember(k, &key);
    return idx;
}

/* ---- values ------------------------------------------------------------------ */

static LLVMValueRef zero(kern *k, fc_dtype dt) {
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

static void store_output(kern *k, int o, const fc_value *v, LLVMValueRef L, LLVMValueRef x) {
    LLVMValueRef st = LLVMBuildStore(B, lm_to_storage(k->M, v->dtype, x),
                                     element_ptr(k, k->gr->ninputs + o, v->dtype, L));
    LLVMSetAlignment(st, (unsigned)fc_dtype_size(v->dtype));
}

static LLVMValueRef emit_value(kern *k, const fc_value *v, LLVMValueRef L);

/* The dtype an elementwise node computes in, exactly as the reference
 * (runtime/interp.c, compute_dtype): its result's dtype, except that
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
 * a constant rounded to cdt (the reference rounds it at each use). */
static LLVMValueRef operand(kern *k, const fc_node *n, int i, LLVMValueRef L, fc_dtype cdt) {
    const fc_value *x = n->in[i];
    if (x->weak) return lm_literal(k->M, cdt, x->scalar);
    const fc_value *out = n->out[0];
    LLVMValueRef v = emit_value(k, x, bcast_index(k, out->rank, out->dims, L, x));
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

static LLVMValueRef emit_elementwise(kern *k, const fc_node *n, LLVMValueRef L) {
    const fc_value *v = n->out[0];
    fc_dtype cdt = compute_dtype(n);
    bool fl = fc_dtype_is_float(cdt);
    if (n->op == FC_OP_CAST) return lm_convert(k->M, operand(k, n, 0, L, cdt), cdt, v->dtype);
    if (n->op == FC_OP_WHERE) {
        /* The condition is read as bool, never converted. */
        LLVMValueRef c = emit_value(k, n->in[0], bcast_index(k, v->rank, v->dims, L, n->in[0]));
        c = LLVMBuildICmp(B, LLVMIntNE, c, LLVMConstInt(LLVMTypeOf(c), 0, 0), "");
        return LLVMBuildSelect(B, c, operand(k, n, 1, L, cdt), operand(k, n, 2, L, cdt), "");
    }
    LLVMValueRef a = operand(k, n, 0, L, cdt), r = NULL;
    if (fc_op_is_compare(n->op)) return compare(k, n->op, fl, a, operand(k, n, 1, L, cdt));
    if (n->nin == 1) r = fl ? unary_float(k, n->op, a) : unary_int(k, n->op, a);
    else r = binary(k, n->op, fl, a, operand(k, n, 1, L, cdt));
    if (!r) {
        fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: %s on %s is not supported", fc_op_table[n->op].name,
             fc_dtype_name(cdt));
        return zero(k, v->dtype);
    }
    return lm_round(k->M, v->dtype, r);
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* concat: every operand is read at its coordinate clamped into range, and
 * the one that owns the coordinate is selected. */
static LLVMValueRef emit_concat(kern *k, const fc_node *n, const fc_value *v, LLVMValueRef *c) {
    int ax = norm_axis(n->a.axis, v->rank);
    LLVMValueRef in_c[FC_MAX_RANK], vals[64], ends[64];
    int nv = 0;
    int64_t off = 0;
    for (int i = 0; i < n->nin; i++) {
        const fc_value *x = n->in[i];
        int64_t len = x->dims[ax];
        if (len == 0) continue; /* owns no coordinate */
        if (nv == 64) {
            fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: concat of more than 64 operands");
            return zero(k, v->dtype);
        }
        memcpy(in_c, c, sizeof(LLVMValueRef) * (size_t)v->rank);
        LLVMValueRef t = isub(k, c[ax], ic(k, off));
        in_c[ax] = lm_smin(k->M, lm_smax(k->M, t, ic(k, 0)), ic(k, len - 1));
        vals[nv] = lm_convert(k->M, emit_value(k, x, linear(k, x, in_c)), x->dtype, v->dtype);
        off += len;
        ends[nv++] = ic(k, off);
    }
    if (nv == 0) return zero(k, v->dtype);
    LLVMValueRef r = vals[nv - 1];
    for (int i = nv - 2; i >= 0; i--)
        r = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, c[ax], ends[i], ""), vals[i], r, "");
    return r;
}

static LLVMValueRef emit_view(kern *k, const fc_node *n, const fc_value *v, LLVMValueRef L) {
    lmod *M = k->M;
    const fc_attrs *a = &n->a;
    const fc_value *x = n->nin ? n->in[0] : NULL;
    if (n->op == FC_OP_RESHAPE) return emit_value(k, x, L); /* same linear index */
    if (n->op == FC_OP_FULL) return lm_literal(M, v->dtype, a->value);
    LLVMValueRef c[FC_MAX_RANK], in_c[FC_MAX_RANK];
    for (int d = 0; d < v->rank; d++) c[d] = coord(k, v->rank, v->dims, L, d);
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
        int64_t start = 0, step = 1;
        if (n->op == FC_OP_SLICE) {
            int64_t dim = x->dims[ax];
            start = a->start < 0 ? (a->start + dim < 0 ? 0 : a->start + dim) : (a->start > dim ? dim : a->start);
            step = a->step;
        } else {
            for (int i = 0; i < v->def_index; i++) start += n->out[i]->dims[ax];
        }
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
        LLVMValueRef e = emit_value(k, ix, linear(k, ix, ixc));
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
    return emit_value(k, x, linear(k, x, in_c));
}

static LLVMValueRef emit_value(kern *k, const fc_value *v, LLVMValueRef L) {
    if (k->err) return zero(k, v->dtype);
    /* A per-row value is the current row's, computed after its phase. */
    if (k->reduce && k->is_row[v->id]) {
        if (k->row_arr && k->row_arr[v->id]) {
            LLVMTypeRef t = lm_ctype(k->M, v->dtype);
            LLVMValueRef at = LLVMBuildInBoundsGEP2(B, t, k->row_arr[v->id], &k->cur_b, 1, "");
            return LLVMBuildLoad2(B, t, at, "");
        }
        if (k->row_val[v->id]) return k->row_val[v->id];
        fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a per-row value is read before its reduction");
        return zero(k, v->dtype);
    }
    memo key = {.kind = MEMO_VALUE, .id = v->id, .idx = L};
    LLVMValueRef e = find(k, &key);
    if (e) return e;
    int pos;
    const fc_node *n = v->def;
    if (input_pos(k, v, &pos)) e = load_input(k, pos, v, L);
    else if (!n) {
        fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a value read by the group is neither computed nor an input");
        return zero(k, v->dtype);
    } else if (fc_op_is_reduce(n->op)) {
        fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a reduction result is read at an element index");
        return zero(k, v->dtype);
    } else if (fc_op_is_view(n->op)) e = emit_view(k, n, v, L);
    else if (fc_op_is_elementwise(n->op)) e = emit_elementwise(k, n, L);
    else {
        fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: %s cannot be computed inside a kernel", fc_op_table[n->op].name);
        return zero(k, v->dtype);
    }
    key.val = e;
    remember(k, &key);
    return e;
}

/* ---- loops ------------------------------------------------------------------ */

typedef struct loop {
    LLVMBasicBlockRef pre, header, exit;
    LLVMValueRef iv, lo, acc, acc_init;
    int64_t step;
    int mark;
} loop;

/* for (iv = lo; iv < hi; iv++), with an optional accumulator phi (acc). The
 * builder is left in the body; memo entries made in it die with the loop. */
static void loop_open(kern *k, loop *lp, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef acc_init) {
    lmod *M = k->M;
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(B));
    lp->pre = LLVMGetInsertBlock(B);
    lp->header = LLVMAppendBasicBlockInContext(M->c, fn, "loop");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(M->c, fn, "body");
    lp->exit = LLVMAppendBasicBlockInContext(M->c, fn, "done");
    LLVMBuildBr(B, lp->header);
    LLVMPositionBuilderAtEnd(B, lp->header);
    lp->iv = LLVMBuildPhi(B, k->ity, "i");
    lp->acc = acc_init ? LLVMBuildPhi(B, LLVMTypeOf(acc_init), "acc") : NULL;
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, lp->iv, hi, ""), body, lp->exit);
    LLVMPositionBuilderAtEnd(B, body);
    lp->lo = lo;
    lp->acc_init = acc_init;
    lp->step = 1;
    lp->mark = k->nmemo;
}

/* Loop metadata {llvm.loop.vectorize.enable = true}: the loop's ID node is
 * self-referential, made from a temporary node. The hint also allows the
 * vectorizer to reorder floating-point reductions. */
static void hint_vectorize(lmod *M, LLVMValueRef br) {
    LLVMMetadataRef opt[2] = {LLVMMDStringInContext2(M->c, "llvm.loop.vectorize.enable", 26),
                              LLVMValueAsMetadata(LLVMConstInt(M->t_i1, 1, 0))};
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(M->c, NULL, 0);
    LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(M->c, opt, 2)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(M->c, ops, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(M->c, "llvm.loop", 9), LLVMMetadataAsValue(M->c, id));
}

static void loop_close(kern *k, loop *lp, LLVMValueRef acc_next, bool vectorize_hint) {
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(B);
    LLVMValueRef next = iadd(k, lp->iv, ic(k, lp->step));
    LLVMValueRef br = LLVMBuildBr(B, lp->header);
    if (vectorize_hint) hint_vectorize(k->M, br);
    LLVMValueRef iv_in[2] = {lp->lo, next};
    LLVMBasicBlockRef from[2] = {lp->pre, latch};
    LLVMAddIncoming(lp->iv, iv_in, from, 2);
    if (lp->acc) {
        LLVMValueRef acc_in[2] = {lp->acc_init, acc_next};
        LLVMAddIncoming(lp->acc, acc_in, from, 2);
    }
    LLVMPositionBuilderAtEnd(B, lp->exit);
    k->nmemo = lp->mark;
}

/* ---- POINTWISE kernels ---------------------------------------------------------- */

static void store_full_outputs(kern *k, LLVMValueRef L) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->reduce && k->is_row[v->id]) continue;
        if (!is_full(gr, v)) continue;
        store_output(k, o, v, L, emit_value(k, v, L));
    }
}

static void pointwise_kernel(kern *k, LLVMValueRef b, LLVMValueRef e) {
    const fc_group *gr = k->gr;
    const int64_t *dims = gr->space;
    int rank = gr->rank;
    int64_t n = prod(dims, 0, rank);
    if (n == 0) return;
    /* dims [split, rank) are the inner loop: at least 64 elements if the
     * shape has them. */
    int split = rank;
    int64_t inner = 1;
    while (split > 0 && inner < 64) inner *= dims[--split];
    loop lo;
    LLVMValueRef base = ic(k, 0), i_lo = b, i_hi = e, oc[FC_MAX_RANK];
    if (split > 0) {
        /* for o in [b / inner, ceil(e / inner)): i in [max(b - o inner, 0), min(e - o inner, inner)) */
        loop_open(k, &lo, idiv(k, b, inner), idiv(k, iadd(k, e, ic(k, inner - 1)), inner), NULL);
        base = imul(k, lo.iv, inner);
        i_lo = lm_smax(k->M, isub(k, b, base), ic(k, 0));
        i_hi = lm_smin(k->M, isub(k, e, base), ic(k, inner));
        for (int d = 0; d < split; d++) {
            oc[d] = idiv(k, lo.iv, prod(dims, d + 1, split));
            if (prod(dims, 0, d) > 1) oc[d] = irem(k, oc[d], dims[d]);
        }
    }
    loop li;
    loop_open(k, &li, i_lo, i_hi, NULL);
    LLVMValueRef L = split > 0 ? iadd(k, base, li.iv) : li.iv;
    for (int d = 0; d < rank; d++) {
        LLVMValueRef c;
        if (dims[d] == 1) continue;
        if (d < split) c = oc[d];
        else {
            c = idiv(k, li.iv, prod(dims, d + 1, rank));
            if (prod(dims, split, d) > 1) c = irem(k, c, dims[d]);
        }
        seed_coord(k, rank, dims, d, L, c);
    }
    store_full_outputs(k, L);
    loop_close(k, &li, NULL, false);
    if (split > 0) loop_close(k, &lo, NULL, false);

    /* Outputs of another shape (the pieces of a stored split): each loops
     * over its own elements, in the call whose range starts at 0 (the runtime
     * may split the main range; these are written once either way). */
    bool odd = false;
    for (int o = 0; o < gr->noutputs; o++) odd |= !is_full(gr, gr->outputs[o]);
    if (!odd) return;
    lmod *M = k->M;
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(B));
    LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(M->c, fn, "odd");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(M->c, fn, "odd_done");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntEQ, b, ic(k, 0), ""), yes, done);
    LLVMPositionBuilderAtEnd(B, yes);
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (is_full(gr, v)) continue;
        loop lv;
        loop_open(k, &lv, ic(k, 0), ic(k, numel_of(v)), NULL);
        store_output(k, o, v, lv.iv, emit_value(k, v, lv.iv));
        loop_close(k, &lv, NULL, false);
    }
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, done);
}

/* ---- REDUCE kernels -------------------------------------------------------------- */

/* The values computed once per row (the rule both code generators share),
 * a row-shaped value being one in the kept dims' order. */
static void mark_rows(kern *k) { fc_group_mark_rows(k->plan, k->gr, k->is_row, fc_group_is_row_shape); }

/*
 * A per-row value exists for the current row only, and so does every value
 * computed from one (softmax's e / s). Check that each read of them is at
 * the current row:
 *  - a per-row value: by a per-row elementwise op or reshape (both row
 *    shaped, so the linear index is the row), by a full-shape elementwise op
 *    that broadcasts it over the row, or by a reduction (of a row that is
 *    one element long);
 *  - a full-shape value computed from one: by a reduction, or by a
 *    full-shape elementwise op reading it at its own index.
 * Anything else (a permute, slice or broadcast that reads another row's
 * value) cannot be computed in one pass over the rows. Fusion should not
 * have built such a group; it is refused rather than computed wrongly.
 */
static void check_row_reads(kern *k) {
    const fc_group *gr = k->gr;
    bool *dep = calloc((size_t)k->plan->g->next_value_id + 1, sizeof *dep); /* computed from a per-row value */
    if (!dep) {
        fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
        return;
    }
    for (int i = 0; i < gr->nnodes && !k->err; i++) { /* in topological order */
        const fc_node *n = gr->nodes[i];
        bool row_out = n->nout == 1 && k->is_row[n->out[0]->id], reduce = fc_op_is_reduce(n->op);
        for (int j = 0; j < n->nin; j++) {
            const fc_value *x = n->in[j];
            if (x->weak || (!k->is_row[x->id] && !dep[x->id])) continue;
            for (int o = 0; o < n->nout && !reduce && !row_out; o++) dep[n->out[o]->id] = true;
            bool ok;
            if (reduce) ok = is_full(gr, x) && (dep[x->id] || fc_group_row_broadcast(gr, x));
            else if (!k->is_row[x->id]) ok = fc_op_is_elementwise(n->op) && is_full(gr, n->out[0]) && is_full(gr, x);
            else if (row_out) ok = fc_op_is_elementwise(n->op) || n->op == FC_OP_RESHAPE;
            else ok = fc_op_is_elementwise(n->op) && is_full(gr, n->out[0]) && fc_group_row_broadcast(gr, x);
            if (!ok) {
                char xs[128], ns[128];
                k->row_conflict = true;
                fc_type_str(k->plan->g, x->dtype, x->rank, x->dims, xs, sizeof xs);
                fc_type_str(k->plan->g, n->out[0]->dtype, n->out[0]->rank, n->out[0]->dims, ns, sizeof ns);
                fail(k, FC_ERR_UNSUPPORTED,
                     "CPU codegen: a reduction kernel reads %s (%s) in %s (%s) at another row's index; fusion "
                     "should have stored it",
                     k->is_row[x->id] ? "a per-row value" : "a value computed from a per-row value", xs,
                     fc_op_table[n->op].name, ns);
                break;
            }
        }
    }
    free(dep);
}

/* A stored value of a REDUCE group that is not a per-row value but has one
 * element per row, in row order: it is written once per row. */
static bool row_stored(const kern *k, const fc_value *v) {
    return fc_group_is_row_shape(k->gr, v); /* implies numel(v) == rows */
}

/* Whether a reduction kernel stores full-shape results (the rest are
 * stored per row); a result that is neither fails the kernel. */
static bool has_full_outputs(kern *k) {
    const fc_group *gr = k->gr;
    bool any = false;
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->is_row[v->id] || (!is_full(gr, v) && row_stored(k, v))) continue;
        if (!is_full(gr, v))
            fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a stored result of a reduction kernel is neither full nor per-row");
        any = true;
    }
    return any;
}

/* The reduction's accumulator type and initial value. Float max/min work on
 * order keys (mathlib.c). */
static LLVMValueRef acc_init(kern *k, const fc_node *r, fc_dtype acc_dt) {
    lmod *M = k->M;
    bool fl = fc_dtype_is_float(acc_dt);
    LLVMTypeRef ct = lm_ctype(M, acc_dt);
    switch (r->op) {
    case FC_OP_REDUCE_MAX:
        return fl ? lm_fkey(M, LLVMConstReal(ct, -INFINITY), true) : lm_i64(M, INT64_MIN);
    case FC_OP_REDUCE_MIN:
        return fl ? lm_fkey(M, LLVMConstReal(ct, INFINITY), false) : lm_i64(M, INT64_MAX);
    default: return fl ? LLVMConstReal(ct, 0) : lm_i64(M, 0);
    }
}

static LLVMValueRef acc_step(kern *k, const fc_node *r, bool fl, LLVMValueRef acc, LLVMValueRef x) {
    lmod *M = k->M;
    switch (r->op) {
    case FC_OP_REDUCE_MAX: return lm_smax(M, acc, fl ? lm_fkey(M, x, true) : x);
    case FC_OP_REDUCE_MIN: return lm_smin(M, acc, fl ? lm_fkey(M, x, false) : x);
    default: return fl ? LLVMBuildFAdd(B, acc, x, "") : LLVMBuildAdd(B, acc, x, "");
    }
}

/* Rows a column-schedule block holds (its per-row arrays live on the stack). */
#define COLUMN_BLOCK 1024

/* An array of COLUMN_BLOCK elements of type t in the function's entry block
 * (so that it is allocated once, not once per loop iteration). */
static LLVMValueRef entry_array(kern *k, LLVMTypeRef t) {
    lmod *M = k->M;
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(LLVMGetBasicBlockParent(LLVMGetInsertBlock(B)));
    LLVMBuilderRef eb = LLVMCreateBuilderInContext(M->c);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first) LLVMPositionBuilderBefore(eb, first);
    else LLVMPositionBuilderAtEnd(eb, entry);
    LLVMValueRef a = LLVMBuildArrayAlloca(eb, t, LLVMConstInt(M->t_i32, COLUMN_BLOCK, 0), "rows");
    LLVMSetAlignment(a, 64);
    LLVMDisposeBuilder(eb);
    return a;
}

static LLVMValueRef arr_load(kern *k, LLVMTypeRef t, LLVMValueRef arr, LLVMValueRef i) {
    return LLVMBuildLoad2(B, t, LLVMBuildInBoundsGEP2(B, t, arr, &i, 1, ""), "");
}
static void arr_store(kern *k, LLVMTypeRef t, LLVMValueRef arr, LLVMValueRef i, LLVMValueRef x) {
    LLVMBuildStore(B, x, LLVMBuildInBoundsGEP2(B, t, arr, &i, 1, ""));
}

/* The reduction's result for one row from its accumulator, rounded. */
static LLVMValueRef acc_final(kern *k, const fc_node *r, fc_dtype acc_dt, LLVMValueRef acc, int64_t len) {
    lmod *M = k->M;
    bool fl = fc_dtype_is_float(acc_dt), sum = r->op == FC_OP_REDUCE_SUM || r->op == FC_OP_REDUCE_MEAN;
    if (fl && !sum) acc = lm_fkey_inverse(M, acc, lm_ctype(M, acc_dt));
    if (r->op == FC_OP_REDUCE_MEAN) acc = LLVMBuildFDiv(B, acc, LLVMConstReal(LLVMTypeOf(acc), (double)len), "");
    fc_dtype out_dt = r->out[0]->dtype;
    return acc_dt == out_dt ? lm_round(M, out_dt, acc) : lm_convert(M, acc, acc_dt, out_dt);
}

static fc_dtype acc_dtype(const fc_node *r) { return r->in[0]->dtype == FC_BOOL ? FC_I64 : r->in[0]->dtype; }

/* The per-row nodes whose per-row operands are all computed (ready[]),
 * in order; each is marked ready. */
static int ready_row_nodes(kern *k, bool *ready, const fc_node **out) {
    const fc_group *gr = k->gr;
    int n = 0;
    for (int j = 0; j < gr->nnodes; j++) {
        const fc_node *m = gr->nodes[j];
        if (fc_op_is_reduce(m->op) || m->nout != 1) continue;
        const fc_value *v = m->out[0];
        if (!k->is_row[v->id] || ready[v->id]) continue;
        bool ok = true;
        for (int q = 0; q < m->nin; q++)
            if (!m->in[q]->weak && k->is_row[m->in[q]->id] && !ready[m->in[q]->id]) ok = false;
        if (!ok) continue;
        ready[v->id] = true;
        out[n++] = m;
    }
    return n;
}

/*
 * The column schedule, for reductions over leading dims (every reduced dim
 * before every kept one, size-1 dims aside): element j of row r is at
 * j * rows + r, so neighbouring rows are neighbouring in memory. One row at
 * a time would read with a stride of `rows`; instead a block of up to
 * COLUMN_BLOCK rows goes through each phase together, the innermost loop
 * running over the rows of the block (contiguous: it vectorizes), with the
 * accumulators and the per-row values in arrays on the stack.
 */
static void reduce_columns(kern *k, LLVMValueRef b, LLVMValueRef e) {
    lmod *M = k->M;
    const fc_group *gr = k->gr;
    const int64_t *dims = gr->space;
    int rank = gr->rank;
    int64_t rows = gr->rows, len = gr->row_len;
    int nv = k->plan->g->next_value_id;
    bool *ready = calloc((size_t)nv + 1, sizeof *ready);
    const fc_node **nodes = calloc((size_t)gr->nnodes + 1, sizeof *nodes);
    k->row_arr = calloc((size_t)nv + 1, sizeof *k->row_arr);
    if (!ready || !nodes || !k->row_arr) {
        free(ready);
        free(nodes);
        fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
        return;
    }
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *n = gr->nodes[i];
        if (n->nout == 1 && k->is_row[n->out[0]->id])
            k->row_arr[n->out[0]->id] = entry_array(k, lm_ctype(M, n->out[0]->dtype));
    }
    /* Strides of each dim among the kept dims and among the reduced ones. */
    int64_t kst[FC_MAX_RANK], rst[FC_MAX_RANK], ks = 1, rs = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (gr->reduced[d]) { rst[d] = rs; rs *= dims[d]; }
        else { kst[d] = ks; ks *= dims[d]; }
    }
    /* Open a loop over the rows of the block, inside a loop over j or not;
     * sets cur_b, row, and L = j * rows + row with its coordinates. */
#define OPEN_ROWS(lp, j)                                                                            do {                                                                                                loop_open(k, &(lp), ic(k, 0), nb, NULL);                                                        k->cur_b = (lp).iv;                                                                             k->row = iadd(k, blk.iv, (lp).iv);                                                              if (j) {                                                                                            L = iadd(k, imul(k, (j), rows), k->row);                                                        for (int d = 0, kseen = 0, rseen = 0; d < rank; d++) {                                              if (dims[d] == 1) continue;                                                                     LLVMValueRef c = gr->reduced[d] ? idiv(k, (j), rst[d]) : idiv(k, k->row, kst[d]);                 if (gr->reduced[d] ? rseen++ : kseen++) c = irem(k, c, dims[d]);                                seed_coord(k, rank, dims, d, L, c);                                                         }                                                                                           }                                                                                           } while (0)

    loop blk;
    loop_open(k, &blk, b, e, NULL);
    blk.step = COLUMN_BLOCK;
    LLVMValueRef nb = lm_smin(M, isub(k, e, blk.iv), ic(k, COLUMN_BLOCK)), L = NULL;
    for (int i = 0; i < gr->nnodes && !k->err; i++) {
        const fc_node *r = gr->nodes[i];
        if (!fc_op_is_reduce(r->op)) continue;
        fc_dtype acc_dt = acc_dtype(r);
        bool fl = fc_dtype_is_float(acc_dt);
        LLVMValueRef init = acc_init(k, r, acc_dt);
        LLVMTypeRef at = LLVMTypeOf(init);
        LLVMValueRef acc = entry_array(k, at);
        loop li, lj, lb;
        OPEN_ROWS(li, NULL);
        arr_store(k, at, acc, li.iv, init);
        loop_close(k, &li, NULL, false);
        /* for j: for the rows of the block: acc[b] op= x[j * rows + row] */
        loop_open(k, &lj, ic(k, 0), ic(k, len), NULL);
        OPEN_ROWS(lb, lj.iv);
        LLVMValueRef x = lm_convert(M, emit_value(k, r->in[0], L), r->in[0]->dtype, acc_dt);
        arr_store(k, at, acc, lb.iv, acc_step(k, r, fl, arr_load(k, at, acc, lb.iv), x));
        loop_close(k, &lb, NULL, false);
        loop_close(k, &lj, NULL, false);
        /* The reduction and the per-row values it makes computable. */
        ready[r->out[0]->id] = true;
        int nready = ready_row_nodes(k, ready, nodes);
        OPEN_ROWS(li, NULL);
        const fc_value *rv = r->out[0];
        arr_store(k, lm_ctype(M, rv->dtype), k->row_arr[rv->id], li.iv, acc_final(k, r, acc_dt, arr_load(k, at, acc, li.iv), len));
        for (int q = 0; q < nready; q++) {
            const fc_value *v = nodes[q]->out[0];
            k->is_row[v->id] = false;
            LLVMValueRef val = emit_value(k, v, k->row); /* row shaped: its index is the row */
            k->is_row[v->id] = true;
            arr_store(k, lm_ctype(M, v->dtype), k->row_arr[v->id], li.iv, val);
        }
        loop_close(k, &li, NULL, false);
    }
    if (has_full_outputs(k) && !k->err) {
        loop lj, lb;
        loop_open(k, &lj, ic(k, 0), ic(k, len), NULL);
        OPEN_ROWS(lb, lj.iv);
        store_full_outputs(k, L);
        loop_close(k, &lb, NULL, false);
        loop_close(k, &lj, NULL, false);
    }
    loop lo;
    OPEN_ROWS(lo, NULL);
    for (int o = 0; o < gr->noutputs && !k->err; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->is_row[v->id]) store_output(k, o, v, k->row, emit_value(k, v, k->row));
        else if (!is_full(gr, v) && row_stored(k, v)) store_output(k, o, v, k->row, emit_value(k, v, k->row));
    }
    loop_close(k, &lo, NULL, false);
#undef OPEN_ROWS
    loop_close(k, &blk, NULL, false);
    k->grain = COLUMN_BLOCK;
    free(ready);
    free(nodes);
}

static void reduce_kernel(kern *k, LLVMValueRef b, LLVMValueRef e) {
    lmod *M = k->M;
    const fc_group *gr = k->gr;
    const int64_t *dims = gr->space;
    int rank = gr->rank;
    mark_rows(k);
    check_row_reads(k);
    if (k->err) return;
    /* Every reduced dim before every kept one (size-1 dims aside), and
     * enough rows for blocks to pay: the column schedule. */
    bool columns = gr->rows >= 8 && gr->rows + COLUMN_BLOCK < ((int64_t)1 << 31), kept_seen = false;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (!gr->reduced[d]) kept_seen = true;
        else if (kept_seen) columns = false;
    }
    if (columns) {
        reduce_columns(k, b, e);
        return;
    }
    bool trailing = true, seen = false;
    for (int d = 0; d < rank; d++) {
        if (gr->reduced[d]) seen = true;
        else if (seen) trailing = false;
    }
    int64_t len = gr->row_len;
    /* Strides of each dim among the kept dims and among the reduced dims. */
    int64_t kst[FC_MAX_RANK], rst[FC_MAX_RANK], ks = 1, rs = 1, kept_before[FC_MAX_RANK], red_before[FC_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        if (gr->reduced[d]) { rst[d] = rs; rs *= dims[d]; }
        else { kst[d] = ks; ks *= dims[d]; }
    }
    int64_t kb = 1, rb = 1;
    for (int d = 0; d < rank; d++) {
        kept_before[d] = kb;
        red_before[d] = rb;
        if (gr->reduced[d]) rb *= dims[d];
        else kb *= dims[d];
    }

    loop lr;
    loop_open(k, &lr, b, e, NULL);
    LLVMValueRef row = lr.iv;
    k->row = row;
    for (int id = 0; id < k->plan->g->next_value_id; id++) k->row_val[id] = NULL;
    /* The kept coordinates, once per row, and the row's first element. */
    LLVMValueRef kc[FC_MAX_RANK], base = trailing ? imul(k, row, len) : ic(k, 0);
    for (int d = 0; d < rank; d++) {
        if (gr->reduced[d] || dims[d] == 1) continue;
        kc[d] = idiv(k, row, kst[d]);
        if (kept_before[d] > 1) kc[d] = irem(k, kc[d], dims[d]);
        if (!trailing) base = iadd(k, base, imul(k, kc[d], prod(dims, d + 1, rank)));
    }

    /* Open an element loop over the row; returns its full index L. */
#define OPEN_ELEMENTS(lp, init)                                                                    \
    do {                                                                                           \
        loop_open(k, &(lp), ic(k, 0), ic(k, len), (init));                                         \
        LLVMValueRef off = trailing ? (lp).iv : ic(k, 0);                                          \
        for (int d = 0; d < rank; d++) {                                                           \
            if (dims[d] == 1) continue;                                                            \
            LLVMValueRef c = kc[d];                                                                \
            if (gr->reduced[d]) {                                                                  \
                c = idiv(k, (lp).iv, rst[d]);                                                      \
                if (red_before[d] > 1) c = irem(k, c, dims[d]);                                    \
                if (!trailing) off = iadd(k, off, imul(k, c, prod(dims, d + 1, rank)));            \
            }                                                                                      \
            cs[d] = c;                                                                             \
        }                                                                                          \
        L = iadd(k, base, off);                                                                    \
        for (int d = 0; d < rank; d++)                                                             \
            if (dims[d] != 1) seed_coord(k, rank, dims, d, L, cs[d]);                              \
    } while (0)

    LLVMValueRef cs[FC_MAX_RANK], L;
    for (int i = 0; i < gr->nnodes && !k->err; i++) {
        const fc_node *r = gr->nodes[i];
        if (!fc_op_is_reduce(r->op)) continue;
        fc_dtype acc_dt = acc_dtype(r);
        bool fl = fc_dtype_is_float(acc_dt);
        loop lp;
        OPEN_ELEMENTS(lp, acc_init(k, r, acc_dt));
        LLVMValueRef x = lm_convert(M, emit_value(k, r->in[0], L), r->in[0]->dtype, acc_dt);
        LLVMValueRef next = acc_step(k, r, fl, lp.acc, x);
        bool sum = r->op == FC_OP_REDUCE_SUM || r->op == FC_OP_REDUCE_MEAN;
        loop_close(k, &lp, next, sum && fl);
        /* The header phi is the final value at the loop's exit. */
        k->row_val[r->out[0]->id] = acc_final(k, r, acc_dt, lp.acc, len);
        /* Per-row values now computable, at the row's index (their linear
         * index is the row: they are row shaped). */
        for (int j = 0; j < gr->nnodes; j++) {
            const fc_node *m = gr->nodes[j];
            if (fc_op_is_reduce(m->op) || m->nout != 1) continue;
            const fc_value *v = m->out[0];
            if (!k->is_row[v->id] || k->row_val[v->id]) continue;
            bool ready = true;
            for (int q = 0; q < m->nin; q++)
                if (!m->in[q]->weak && k->is_row[m->in[q]->id] && !k->row_val[m->in[q]->id]) ready = false;
            if (!ready) continue;
            k->is_row[v->id] = false;
            LLVMValueRef val = emit_value(k, v, row);
            k->is_row[v->id] = true;
            k->row_val[v->id] = val;
        }
    }
    /* The full-shape outputs, then the per-row ones. */
    if (has_full_outputs(k) && !k->err) {
        loop lp;
        OPEN_ELEMENTS(lp, NULL);
        store_full_outputs(k, L);
        loop_close(k, &lp, NULL, false);
    }
#undef OPEN_ELEMENTS
    for (int o = 0; o < gr->noutputs && !k->err; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id]) {
            /* Row shaped, but computed from outside data only (fusion lets
             * such a value join): it is computed at the row's index. */
            if (!is_full(gr, v) && row_stored(k, v)) store_output(k, o, v, row, emit_value(k, v, row));
            continue;
        }
        if (!k->row_val[v->id]) {
            fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a per-row result is never computed");
            break;
        }
        store_output(k, o, v, row, k->row_val[v->id]);
    }
    loop_close(k, &lr, NULL, false);
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
    if (gr->kind == FC_GROUP_REDUCE) reduce_kernel(&k, b, e);
    else pointwise_kernel(&k, b, e);
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

/*
 * lower_impl.h - what the files of the kernel lowering share (internal to
 * codegen/llvm/lower*.c; llvm_internal.h is what all of codegen/llvm shares).
 *
 *   lower.c         a value at an index (emit_value: elementwise ops and
 *                   views), the memo, index arithmetic; one function per
 *                   group (fc_llvm_lower)
 *   lower_loop.c    counted loops, and the POINTWISE kernel's loop nest
 *   lower_reduce.c  the REDUCE kernel's loop nests: row by row, or blocks
 *                   of rows for reductions over leading dims
 *
 * lower.c's opening comment describes the whole scheme.
 */
#ifndef FC_LLVM_LOWER_IMPL_H
#define FC_LLVM_LOWER_IMPL_H

#include "codegen/llvm/llvm_internal.h"

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

#define B (k->M->b)

/* Record the kernel's first error (later ones are consequences of it). */
void lk_fail(kern *k, fc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- shapes ---------------------------------------------------------------- */

static inline int64_t prod(const int64_t *dims, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= dims[i];
    return n;
}

static inline int64_t numel_of(const fc_value *v) { return prod(v->dims, 0, v->rank); }

static inline bool same_dims(int ra, const int64_t *a, int rb, const int64_t *b) {
    if (ra != rb) return false;
    for (int i = 0; i < ra; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static inline bool is_full(const fc_group *gr, const fc_value *v) {
    return same_dims(v->rank, v->dims, gr->rank, gr->space);
}

/* ---- index arithmetic --------------------------------------------------------- */

static inline LLVMValueRef ic(kern *k, int64_t v) { return LLVMConstInt(k->ity, (unsigned long long)v, 1); }
static inline LLVMValueRef iadd(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(B, a, b, ""); }
static inline LLVMValueRef isub(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWSub(B, a, b, ""); }
static inline LLVMValueRef imul(kern *k, LLVMValueRef a, int64_t c) {
    return c == 1 ? a : LLVMBuildNSWMul(B, a, ic(k, c), "");
}
static inline LLVMValueRef idiv(kern *k, LLVMValueRef a, int64_t c) {
    return c == 1 ? a : LLVMBuildUDiv(B, a, ic(k, c), "");
}
static inline LLVMValueRef irem(kern *k, LLVMValueRef a, int64_t c) { return LLVMBuildURem(B, a, ic(k, c), ""); }

/* ---- values (lower.c) ------------------------------------------------------- */

/* Coordinate d of linear index L in a shape (memoized). */
LLVMValueRef lk_coord(kern *k, int rank, const int64_t *dims, LLVMValueRef L, int d);
/* Record a coordinate known from a loop (so lk_coord need not divide). */
void lk_seed_coord(kern *k, int rank, const int64_t *dims, int d, LLVMValueRef L, LLVMValueRef c);
/* Linear index of coordinates c in shape x. */
LLVMValueRef lk_linear(kern *k, const fc_value *x, LLVMValueRef *c);
/* 0 in dt's compute type. */
LLVMValueRef lk_zero(kern *k, fc_dtype dt);
/* Store x (of v's compute type) as element L of group output o. */
void lk_store_output(kern *k, int o, const fc_value *v, LLVMValueRef L, LLVMValueRef x);
/* The value of v at linear index L of v's own shape: rounded to its dtype,
 * or in fast numerics, for a float v, as computed (lk_result). */
LLVMValueRef lk_emit_value(kern *k, const fc_value *v, LLVMValueRef L);
/* x, the value an op computed for v, as the kernel keeps it: in fast
 * numerics a float value stays unrounded in its compute type (its store
 * rounds it, lk_store_output); otherwise it is rounded to v's dtype. */
static inline bool lk_unrounded(const kern *k, const fc_value *v) {
    return k->plan->numerics == FC_NUMERICS_FAST && fc_dtype_is_float(v->dtype);
}
static inline LLVMValueRef lk_result(kern *k, const fc_value *v, LLVMValueRef x) {
    return lk_unrounded(k, v) ? x : lm_round(k->M, v->dtype, x);
}

/* ---- loops (lower_loop.c) ---------------------------------------------------- */

typedef struct loop {
    LLVMBasicBlockRef pre, header, exit;
    LLVMValueRef iv, lo, acc, acc_init;
    int64_t step;
    int mark;
} loop;

/* for (iv = lo; iv < hi; iv += step), with an optional accumulator phi
 * (acc); the builder is left in the body. lk_loop_close ends it, with the
 * accumulator's next value, and leaves the builder after the loop. */
void lk_loop_open(kern *k, loop *lp, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef acc_init);
void lk_loop_close(kern *k, loop *lp, LLVMValueRef acc_next, bool vectorize_hint);
/* Store every full-shape output of the group at index L. */
void lk_store_full_outputs(kern *k, LLVMValueRef L);

/* ---- kernels ----------------------------------------------------------------- */

/* The loop nest of a POINTWISE (lower_loop.c) or REDUCE (lower_reduce.c)
 * group over the range [b, e) of its outer loop. */
void lk_pointwise_kernel(kern *k, LLVMValueRef b, LLVMValueRef e);
void lk_reduce_kernel(kern *k, LLVMValueRef b, LLVMValueRef e);

#endif

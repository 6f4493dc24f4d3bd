/*
 * gemm_desc.c - a gemm or matmul node as plain data (gemm_desc.h), and the
 * check of a description read from bytes. The column-major mapping these
 * feed is in runtime/cuda/cublaslt.c and docs/GEMM.md.
 *
 * Batches. The node's batch dims become one strided batch where the strides
 * line up (a weight without batch dims is stride 0), an outer loop of calls
 * where they do not, and nothing at all when the weight has no batch dims:
 * then X's batch dims fold into M, one large GEMM.
 */
#include "lower/gemm_desc.h"
#include "lower/launch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The plan of a node (no GPU)                                         */
/* ------------------------------------------------------------------ */

static bool static_shape(const fc_value *v) {
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] < 0) return false;
    return true;
}

fc_status fc_gemm_plan_of(fc_context *ctx, const fc_node *n, fc_gemm_plan *p) {
    memset(p, 0, sizeof *p);
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi))
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "cuBLASLt runs gemm and matmul nodes, not %s",
                            fc_op_table[n->op].name);
    return fc_gemm_plan_of_info(ctx, n->op, &gi, n->out[0], p);
}

fc_status fc_gemm_plan_of_info(fc_context *ctx, fc_op op, const fc_gemm_info *info, const fc_value *y,
                               fc_gemm_plan *p) {
    memset(p, 0, sizeof *p);
    const fc_gemm_info gi = *info;
    const fc_value *a = gi.a;
    fc_dtype dt = a->dtype;
    bool epilogue = gi.has_bias || gi.has_residual || gi.act != FC_GEMM_ACT_NONE || gi.alpha != 1.0;
    if (!(dt == FC_F32 || dt == FC_F16 || dt == FC_BF16 || (dt == FC_F64 && !epilogue)))
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s of %s on CUDA: cuBLASLt runs f32, f16 and bf16 (and plain f64)",
                            fc_op_table[op].name, fc_dtype_name(dt));
    bool shapes_ok = static_shape(a) && static_shape(y);
    for (int i = 0; i < gi.nweights; i++) shapes_ok = shapes_ok && static_shape(gi.w[i]);
    if (!shapes_ok)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s with symbolic dims: bind every symbol to run it",
                            fc_op_table[op].name);

    if (a->rank < 1 || gi.w[0]->rank < 1)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s of a scalar", fc_op_table[op].name);
    int64_t ad[FC_MAX_RANK] = {0}, wd[FC_MAX_RANK] = {0};
    int ra = fc_matmul_operand_dims(a, true, ad), rw = fc_matmul_operand_dims(gi.w[0], false, wd);
    p->ab = dt;
    p->out = gi.out;
    p->trans_a = gi.trans_a;
    p->trans_b = gi.trans_b;
    p->nweights = gi.nweights;
    p->M = gi.trans_a ? ad[ra - 1] : ad[ra - 2];
    p->K = gi.trans_a ? ad[ra - 2] : ad[ra - 1];
    for (int i = 0; i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        p->N += gi.trans_b ? w->dims[w->rank - 2] : w->dims[w->rank - 1];
    }
    if (gi.nweights == 1) p->N = gi.trans_b ? wd[rw - 2] : wd[rw - 1];
    p->lda = gi.trans_a ? p->M : p->K;
    p->ldw = gi.trans_b ? p->K : p->N;
    p->has_bias = gi.has_bias;
    p->has_residual = gi.has_residual;
    p->act = gi.act;
    p->alpha = gi.alpha;

    /* Batch dims: broadcast (right-aligned), size-1 dims dropped (ir's
     * rule, in monomials, evaluated: every dim here is static). */
    fc_mono mn = fc_mono_one(), msize[FC_MAX_RANK], msa[FC_MAX_RANK], msw[FC_MAX_RANK], msy[FC_MAX_RANK];
    mn.c = p->M * p->N;
    int nb = fc_matmul_batch_layout(ad, ra, wd, rw, mn, msize, msa, msw, msy);
    int64_t size[FC_MAX_RANK], sa[FC_MAX_RANK], sw[FC_MAX_RANK], sy[FC_MAX_RANK];
    for (int d = 0; d < nb; d++) {
        size[d] = fc_mono_eval(&msize[d], NULL, 0);
        sa[d] = fc_mono_eval(&msa[d], NULL, 0);
        sw[d] = fc_mono_eval(&msw[d], NULL, 0);
        sy[d] = fc_mono_eval(&msy[d], NULL, 0);
    }

    /* A weight without batch dims and a dense, untransposed X: the batch is
     * more rows of one GEMM. */
    bool w_flat = true, a_dense = !gi.trans_a;
    int64_t dense = p->M * p->K;
    for (int d = nb - 1; d >= 0; d--) {
        w_flat = w_flat && sw[d] == 0;
        a_dense = a_dense && sa[d] == dense;
        dense *= size[d];
    }
    if (nb > 0 && w_flat && a_dense) {
        for (int d = 0; d < nb; d++) p->M *= size[d];
        p->folded_batch = true;
        nb = 0;
    }

    /* The innermost dims whose strides chain (s[d] = s[d+1] * size[d+1] for
     * every operand) are one strided batch; the rest is a loop. */
    int inner = nb;
    while (inner > 1) {
        int d = inner - 2;
        bool chains = sa[d] == sa[d + 1] * size[d + 1] && sw[d] == sw[d + 1] * size[d + 1] &&
                      sy[d] == sy[d + 1] * size[d + 1];
        if (!chains) break;
        inner--;
    }
    int first_inner = nb > 0 ? inner - 1 : 0;
    p->batch = 1;
    for (int d = first_inner; d < nb; d++) p->batch *= size[d];
    if (nb > 0) {
        p->stride_a = sa[nb - 1];
        p->stride_w = sw[nb - 1];
        p->stride_y = sy[nb - 1];
    }
    p->nouter = first_inner;
    for (int d = 0; d < first_inner; d++) {
        p->outer_size[d] = size[d];
        p->outer_a[d] = sa[d];
        p->outer_w[d] = sw[d];
        p->outer_y[d] = sy[d];
    }
    return FC_OK;
}

int64_t fc_gemm_plan_calls(const fc_gemm_plan *p) {
    int64_t c = 1;
    for (int d = 0; d < p->nouter; d++) c *= p->outer_size[d];
    return c;
}

int fc_gemm_plan_nops(const fc_gemm_plan *p) {
    return 1 + p->nweights * (p->has_bias ? 2 : 1) + (p->has_residual ? 1 : 0);
}

/* ------------------------------------------------------------------ */
/* The description of a launch (no GPU)                                */
/* ------------------------------------------------------------------ */

void fc_gemm_desc_release(fc_gemm_desc *d) {
    if (!d) return;
    free(d->wcols);
    free(d->op_arg);
    memset(d, 0, sizeof *d);
}

/* The position of value id among the launch's arguments, or -1. */
fc_status fc_gemm_desc_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_gemm_desc *out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_gemm_desc_of: out is NULL");
    memset(out, 0, sizeof *out);
    if (!n || nargs < 0 || (nargs > 0 && !arg_ids))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_gemm_desc_of: no node or no launch arguments");
    fc_gemm_desc d = {0};
    fc_status st = fc_gemm_plan_of(ctx, n, &d.plan);
    if (st != FC_OK) return st;
    fc_gemm_info gi;
    fc_gemm_info_of(n, &gi);
    int nops = fc_gemm_plan_nops(&d.plan);
    FC_ASSERT(nops == n->nin); /* the plan's flags are the node's spec */
    /* Allocated through ctx (fault injection), freed with free() as the
     * rest of a program description is. */
    d.wcols = fc_ctx_malloc(ctx, sizeof *d.wcols * (size_t)d.plan.nweights);
    d.op_arg = fc_ctx_malloc(ctx, sizeof *d.op_arg * (size_t)nops);
    if (!d.wcols || !d.op_arg) {
        fc_gemm_desc_release(&d);
        return FC_ERR_NOMEM;
    }
    for (int i = 0; i < d.plan.nweights; i++) {
        const fc_value *w = gi.w[i];
        /* One weight may be a rank-1 [K] operand of a matmul: plan.N is 1. */
        d.wcols[i] = d.plan.nweights == 1 ? d.plan.N : gi.trans_b ? w->dims[0] : w->dims[1];
    }
    for (int k = 0; k <= nops; k++) {
        const fc_value *v = k < nops ? n->in[k] : n->out[0];
        int a = fc_launch_arg_position(arg_ids, nargs, v->id);
        if (a < 0) {
            fc_gemm_desc_release(&d);
            return fc_set_error(ctx, FC_ERR_USAGE, "%s: the launch has no argument for value %d (%s %d)",
                                fc_op_table[n->op].name, v->id, k < nops ? "operand" : "the result", k);
        }
        if (k < nops) d.op_arg[k] = a;
        else d.out_arg = a;
    }
    *out = d;
    return FC_OK;
}

/* x * y + z without overflow, all >= 0; false when it would overflow. */
static bool muladd(int64_t x, int64_t y, int64_t z, int64_t *out) {
    int64_t t;
    return x >= 0 && y >= 0 && z >= 0 && !__builtin_mul_overflow(x, y, &t) && !__builtin_add_overflow(t, z, out);
}

/*
 * The elements a row-major matrix of rows x cols (row stride ld) spans,
 * repeated `batch` times at stride bstride and over the outer loop at
 * strides ostride: the highest element index any call touches, plus one
 * (0 when nothing is touched). false on overflow or a negative number.
 */
static bool span(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t bstride, const fc_gemm_plan *p,
                 const int64_t *ostride, int64_t *out) {
    *out = 0;
    if (rows < 0 || cols < 0 || ld < 0 || batch < 0 || bstride < 0) return false;
    bool empty = rows == 0 || cols == 0 || batch == 0;
    for (int d = 0; d < p->nouter; d++) {
        if (p->outer_size[d] < 0 || ostride[d] < 0) return false;
        empty = empty || p->outer_size[d] == 0;
    }
    if (empty) return true;
    int64_t last = cols - 1;
    if (!muladd(rows - 1, ld, last, &last) || !muladd(batch - 1, bstride, last, &last)) return false;
    for (int d = 0; d < p->nouter; d++)
        if (!muladd(p->outer_size[d] - 1, ostride[d], last, &last)) return false;
    return muladd(last, 1, 1, out);
}

/* Whether `elems` elements of dtype dt fit in `bytes`. */
static bool fits(int64_t elems, fc_dtype dt, int64_t bytes) {
    int64_t need;
    return muladd(elems, (int64_t)fc_dtype_size(dt), 0, &need) && need <= bytes;
}

static bool gemm_dtype(fc_dtype dt) { return dt == FC_F32 || dt == FC_F16 || dt == FC_BF16 || dt == FC_F64; }

/* The least leading dim of a row-major rows x cols operand: a row, and at
 * least 1 (cuBLASLt's rule), except for an empty one, which no call reads. */
static int64_t least_ld(int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return cols > 0 ? cols : 0;
    return cols > 1 ? cols : 1;
}

#define INVALID(...) return snprintf(why, n, __VA_ARGS__), false

/* An operand read as row-major rows x cols with leading dim ld (named
 * ld_name), the plan's batch with batch stride bstride, and loop strides
 * ostride: a leading dim of at least a row (least_ld), and every element
 * inside the operand's buffer of `bytes`. */
static bool operand_fits(const fc_gemm_plan *p, const char *what, const char *ld_name, int64_t rows, int64_t cols,
                         int64_t ld, int64_t bstride, const int64_t *ostride, int64_t bytes, char *why, size_t n) {
    int64_t e;
    if (ld < least_ld(rows, cols)) INVALID("%s %lld for rows of %lld", ld_name, (long long)ld, (long long)cols);
    if (!span(rows, cols, ld, p->batch, bstride, p, ostride, &e) || !fits(e, p->ab, bytes))
        INVALID("the %s's %lld elements do not fit its buffer of %lld bytes", what, (long long)e, (long long)bytes);
    return true;
}

bool fc_gemm_desc_valid(const fc_gemm_desc *d, int nargs, const int64_t *arg_bytes, char *why, size_t n) {
    const fc_gemm_plan *p = &d->plan;
    /* The types fc_gemm_plan_of accepts and cuBLASLt runs. */
    if ((unsigned)p->ab >= FC_DTYPE_COUNT || (unsigned)p->out >= FC_DTYPE_COUNT || !gemm_dtype(p->ab))
        INVALID("operand dtype %d, result dtype %d: not a GEMM's", (int)p->ab, (int)p->out);
    bool widened = (p->ab == FC_F16 || p->ab == FC_BF16) && p->out == FC_F32;
    if (p->out != p->ab && !widened)
        INVALID("a %s GEMM cannot give %s", fc_dtype_name(p->ab), fc_dtype_name(p->out));
    if ((unsigned)p->act > FC_GEMM_ACT_GELU_TANH) INVALID("unknown activation %d", (int)p->act);
    if (!isfinite(p->alpha)) INVALID("the scale is not finite");
    bool epilogue = p->has_bias || p->has_residual || p->act != FC_GEMM_ACT_NONE || p->alpha != 1.0;
    if (p->ab == FC_F64 && epilogue) INVALID("an f64 GEMM with an epilogue");
    if (p->nweights < 1 || p->nweights > nargs) INVALID("%d weights for %d arguments", p->nweights, nargs);
    if (p->M < 0 || p->N < 0 || p->K < 0 || p->nouter < 0 || p->nouter > FC_MAX_RANK)
        INVALID("negative sizes, or %d loop dims", p->nouter);
    if (!d->wcols || !d->op_arg) INVALID("no weight columns or operand positions");

    /* Positions, and the bytes of each operand's buffer. */
    int nops = fc_gemm_plan_nops(p);
    for (int k = 0; k <= nops; k++) {
        int a = k < nops ? d->op_arg[k] : d->out_arg;
        if (a < 0 || a >= nargs) INVALID("operand %d is argument %d of %d", k, a, nargs);
    }
    int64_t sum = 0;
    for (int i = 0; i < p->nweights; i++)
        if (d->wcols[i] < 0 || __builtin_add_overflow(sum, d->wcols[i], &sum))
            INVALID("weight %d has %lld columns", i, (long long)d->wcols[i]);
    if (sum != p->N) INVALID("the weights' columns sum to %lld, not N = %lld", (long long)sum, (long long)p->N);

    /* Every element a call reads or writes, inside its buffer. Leading
     * dims at least a row (what cuBLASLt requires too), and at least 1
     * where there is something to read: a GEMM with M, N or K = 0 makes no
     * call (least_ld). */
    int64_t a_rows = p->trans_a ? p->K : p->M, a_cols = p->trans_a ? p->M : p->K, e;
    if (!operand_fits(p, "left operand", "lda", a_rows, a_cols, p->lda, p->stride_a, p->outer_a,
                      arg_bytes[d->op_arg[0]], why, n))
        return false;
    const int *bias_arg = p->has_bias ? &d->op_arg[1 + p->nweights] : NULL;
    if (p->nweights == 1) {
        int64_t w_rows = p->trans_b ? p->N : p->K, w_cols = p->trans_b ? p->K : p->N;
        if (!operand_fits(p, "weight", "ldw", w_rows, w_cols, p->ldw, p->stride_w, p->outer_w, arg_bytes[d->op_arg[1]],
                          why, n))
            return false;
        if (bias_arg && !fits(p->N, p->out, arg_bytes[*bias_arg])) INVALID("the bias does not fit its buffer");
    } else {
        /* Concatenated: each weight a dense matrix without batch dims, and
         * the concatenation laid out as runtime/cuda/cublaslt.c builds it. */
        if (p->ldw != (p->trans_b ? p->K : p->N) || (p->batch > 1 && p->stride_w != 0))
            INVALID("concatenated weights with ldw %lld or a batch stride", (long long)p->ldw);
        for (int dd = 0; dd < p->nouter; dd++)
            if (p->outer_w[dd] != 0) INVALID("concatenated weights with a loop stride");
        for (int i = 0; i < p->nweights; i++) {
            if (!muladd(p->K, d->wcols[i], 0, &e) || !fits(e, p->ab, arg_bytes[d->op_arg[1 + i]]))
                INVALID("weight %d does not fit its buffer", i);
            if (bias_arg && !fits(d->wcols[i], p->out, arg_bytes[bias_arg[i]]))
                INVALID("bias %d does not fit its buffer", i);
        }
    }
    if (!span(p->M, p->N, p->N, p->batch, p->stride_y, p, p->outer_y, &e))
        INVALID("the result's extent overflows");
    if (!fits(e, p->out, arg_bytes[d->out_arg]))
        INVALID("the result's %lld elements do not fit its buffer", (long long)e);
    if (p->has_residual && !fits(e, p->out, arg_bytes[d->op_arg[nops - 1]]))
        INVALID("the residual's %lld elements do not fit its buffer", (long long)e);
    return true;
}

#undef INVALID

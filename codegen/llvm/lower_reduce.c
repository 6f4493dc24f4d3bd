/*
 * lower_reduce.c - the REDUCE kernel: a loop over rows, one loop per
 * reduction in each row (a phase), the per-row values after their phase,
 * then the stored results; or, for reductions over leading dims, blocks of
 * rows through each phase together (reduce_columns). lower.c's opening
 * comment has the whole scheme.
 */
#include "codegen/llvm/lower_impl.h"

#include <math.h>
#include <stdlib.h>

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
        lk_fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
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
                lk_fail(k, FC_ERR_UNSUPPORTED,
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
            lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a stored result of a reduction kernel is neither full nor per-row");
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

/* The reduction's result for one row from its accumulator, rounded as
 * lk_result keeps values (unrounded in fast numerics when it is a float of
 * the accumulator's dtype). */
static LLVMValueRef acc_final(kern *k, const fc_node *r, fc_dtype acc_dt, LLVMValueRef acc, int64_t len) {
    lmod *M = k->M;
    bool fl = fc_dtype_is_float(acc_dt), sum = r->op == FC_OP_REDUCE_SUM || r->op == FC_OP_REDUCE_MEAN;
    if (fl && !sum) acc = lm_fkey_inverse(M, acc, lm_ctype(M, acc_dt));
    if (r->op == FC_OP_REDUCE_MEAN) acc = LLVMBuildFDiv(B, acc, LLVMConstReal(LLVMTypeOf(acc), (double)len), "");
    fc_dtype out_dt = r->out[0]->dtype;
    return acc_dt == out_dt ? lk_result(k, r->out[0], acc) : lm_convert(M, acc, acc_dt, out_dt);
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
        lk_fail(k, FC_ERR_NOMEM, "out of memory (LLVM codegen)");
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
#define OPEN_ROWS(lp, j)                                                                           \
    do {                                                                                           \
        lk_loop_open(k, &(lp), ic(k, 0), nb, NULL);                                                \
        k->cur_b = (lp).iv;                                                                        \
        k->row = iadd(k, blk.iv, (lp).iv);                                                         \
        if (j) {                                                                                   \
            L = iadd(k, imul(k, (j), rows), k->row);                                               \
            for (int d = 0, kseen = 0, rseen = 0; d < rank; d++) {                                 \
                if (dims[d] == 1) continue;                                                        \
                LLVMValueRef c = gr->reduced[d] ? idiv(k, (j), rst[d]) : idiv(k, k->row, kst[d]);  \
                if (gr->reduced[d] ? rseen++ : kseen++) c = irem(k, c, dims[d]);                   \
                lk_seed_coord(k, rank, dims, d, L, c);                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

    loop blk;
    lk_loop_open(k, &blk, b, e, NULL);
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
        lk_loop_close(k, &li, NULL, false);
        /* for j: for the rows of the block: acc[b] op= x[j * rows + row] */
        lk_loop_open(k, &lj, ic(k, 0), ic(k, len), NULL);
        OPEN_ROWS(lb, lj.iv);
        LLVMValueRef x = lm_convert(M, lk_emit_value(k, r->in[0], L), r->in[0]->dtype, acc_dt);
        arr_store(k, at, acc, lb.iv, acc_step(k, r, fl, arr_load(k, at, acc, lb.iv), x));
        lk_loop_close(k, &lb, NULL, false);
        lk_loop_close(k, &lj, NULL, false);
        /* The reduction and the per-row values it makes computable. */
        ready[r->out[0]->id] = true;
        int nready = ready_row_nodes(k, ready, nodes);
        OPEN_ROWS(li, NULL);
        const fc_value *rv = r->out[0];
        arr_store(k, lm_ctype(M, rv->dtype), k->row_arr[rv->id], li.iv, acc_final(k, r, acc_dt, arr_load(k, at, acc, li.iv), len));
        for (int q = 0; q < nready; q++) {
            const fc_value *v = nodes[q]->out[0];
            k->is_row[v->id] = false;
            LLVMValueRef val = lk_emit_value(k, v, k->row); /* row shaped: its index is the row */
            k->is_row[v->id] = true;
            arr_store(k, lm_ctype(M, v->dtype), k->row_arr[v->id], li.iv, val);
        }
        lk_loop_close(k, &li, NULL, false);
    }
    if (has_full_outputs(k) && !k->err) {
        loop lj, lb;
        lk_loop_open(k, &lj, ic(k, 0), ic(k, len), NULL);
        OPEN_ROWS(lb, lj.iv);
        lk_store_full_outputs(k, L);
        lk_loop_close(k, &lb, NULL, false);
        lk_loop_close(k, &lj, NULL, false);
    }
    loop lo;
    OPEN_ROWS(lo, NULL);
    for (int o = 0; o < gr->noutputs && !k->err; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->is_row[v->id]) lk_store_output(k, o, v, k->row, lk_emit_value(k, v, k->row));
        else if (!is_full(gr, v) && row_stored(k, v)) lk_store_output(k, o, v, k->row, lk_emit_value(k, v, k->row));
    }
    lk_loop_close(k, &lo, NULL, false);
#undef OPEN_ROWS
    lk_loop_close(k, &blk, NULL, false);
    k->grain = COLUMN_BLOCK;
    free(ready);
    free(nodes);
}

void lk_reduce_kernel(kern *k, LLVMValueRef b, LLVMValueRef e) {
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
    lk_loop_open(k, &lr, b, e, NULL);
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
        lk_loop_open(k, &(lp), ic(k, 0), ic(k, len), (init));                                      \
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
            if (dims[d] != 1) lk_seed_coord(k, rank, dims, d, L, cs[d]);                           \
    } while (0)

    LLVMValueRef cs[FC_MAX_RANK], L;
    for (int i = 0; i < gr->nnodes && !k->err; i++) {
        const fc_node *r = gr->nodes[i];
        if (!fc_op_is_reduce(r->op)) continue;
        fc_dtype acc_dt = acc_dtype(r);
        bool fl = fc_dtype_is_float(acc_dt);
        loop lp;
        OPEN_ELEMENTS(lp, acc_init(k, r, acc_dt));
        LLVMValueRef x = lm_convert(M, lk_emit_value(k, r->in[0], L), r->in[0]->dtype, acc_dt);
        LLVMValueRef next = acc_step(k, r, fl, lp.acc, x);
        bool sum = r->op == FC_OP_REDUCE_SUM || r->op == FC_OP_REDUCE_MEAN;
        lk_loop_close(k, &lp, next, sum && fl);
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
            LLVMValueRef val = lk_emit_value(k, v, row);
            k->is_row[v->id] = true;
            k->row_val[v->id] = val;
        }
    }
    /* The full-shape outputs, then the per-row ones. */
    if (has_full_outputs(k) && !k->err) {
        loop lp;
        OPEN_ELEMENTS(lp, NULL);
        lk_store_full_outputs(k, L);
        lk_loop_close(k, &lp, NULL, false);
    }
#undef OPEN_ELEMENTS
    for (int o = 0; o < gr->noutputs && !k->err; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id]) {
            /* Row shaped, but computed from outside data only (fusion lets
             * such a value join): it is computed at the row's index. */
            if (!is_full(gr, v) && row_stored(k, v)) lk_store_output(k, o, v, row, lk_emit_value(k, v, row));
            continue;
        }
        if (!k->row_val[v->id]) {
            lk_fail(k, FC_ERR_UNSUPPORTED, "CPU codegen: a per-row result is never computed");
            break;
        }
        lk_store_output(k, o, v, row, k->row_val[v->id]);
    }
    lk_loop_close(k, &lr, NULL, false);
}


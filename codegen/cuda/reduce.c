/* reduce.c - REDUCE groups: rows x reduced elements.
 *
 * tpr threads share a row (a warp per row for short rows, a block per row
 * otherwise; for column reductions, up to COL_SPLIT threads strided by the
 * rows side by side in the block: column_loop). Each reduction is
 * a phase over the row followed by an all-reduce; values per row (the
 * reductions and what is computed from them alone) are computed once per
 * row after their phase; the final phase writes the outputs. For rows up
 * to 64 elements a thread (16K and more per row), the full-shape inputs
 * are loaded once into registers in a prologue and every phase reads them
 * from there (a persistent reduction); longer rows loop over memory in
 * each phase.
 */
#include "kernel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row shape for the CUDA kernels: as many elements as rows (a per-row
 * value is indexed by the row), no more dims than the space. */
static bool row_numel(const fc_group *gr, const fc_value *v) {
    fc_mono rows = fc_group_rows_mono(gr), ne = fc_mono_of(v->dims, v->rank);
    return fc_mono_eq(&ne, &rows) && v->rank <= gr->rank;
}

/* Mark values computed once per row (fc_group_mark_rows). */
static void mark_rows(kctx *k) {
    const fc_group *gr = k->gr;
    fc_group_mark_rows(k->p, gr, k->is_row, row_numel);
    /* A stored value of per-row shape that does not depend on the
     * reductions is computed and stored once per row too. */
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id] && !fc_cg_full_shape(gr, v) && row_numel(gr, v)) k->is_row[v->id] = true;
    }
}

/* Worth keeping in registers rather than recomputing: from the ops.def
 * cost class MID up (a cast or an add of a register-held input is not). */
static bool costly(fc_op op) { return fc_op_cost_of(op) >= FC_COST_MID; }

/* If a per-row value divides anything in the group, compute its reciprocal
 * once per row (memo key "rcp"). */
static void row_reciprocal(kctx *k, const fc_value *v, const char *name) {
    if (!fc_dtype_is_float(v->dtype)) return;
    for (int i = 0; i < k->gr->nnodes; i++) {
        const fc_node *n = k->gr->nodes[i];
        if (n->op == FC_OP_DIV && n->in[1] == v && fc_dtype_is_float(n->out[0]->dtype)) {
            char rn[24];
            snprintf(rn, sizeof rn, "rcp%d", k->tmp++);
            fc_strbuf_printf(k->s, "    %s %s = (%s)1 / %s;\n", fc_cg_compute_type(v->dtype), rn, fc_cg_compute_type(v->dtype), name);
            fc_cg_remember(k, v->id, "rcp", rn);
            return;
        }
    }
}

typedef struct phase_arg {
    const fc_node *r; /* the reduction of this phase */
    const char *acc;
    const char *store; /* register array that keeps the reduced input, or NULL */
    bool early;        /* also store the full-shape outputs at each element */
} phase_arg;

static void accumulate(kctx *k, int e, const char *L, void *arg) {
    phase_arg *pa = arg;
    const char *x = fc_cg_emit_value(k, pa->r->in[0], L);
    if (pa->store) fc_strbuf_printf(k->s, "      %s[c][%d] = %s;\n", pa->store, e, x);
    const char *ct = fc_cg_compute_type(pa->r->out[0]->dtype == FC_BOOL ? FC_I64 : pa->r->in[0]->dtype);
    switch (pa->r->op) {
    case FC_OP_REDUCE_MAX: fc_strbuf_printf(k->s, "      %s = fc_max(%s, (%s)%s);\n", pa->acc, pa->acc, ct, x); break;
    case FC_OP_REDUCE_MIN: fc_strbuf_printf(k->s, "      %s = fc_min(%s, (%s)%s);\n", pa->acc, pa->acc, ct, x); break;
    default: fc_strbuf_printf(k->s, "      %s += (%s)%s;\n", pa->acc, ct, x); break;
    }
    if (pa->early) {
        store_arg sa = {NULL, true};
        fc_cg_store_element(k, e, L, &sa);
    }
}

/* The row loop of a REDUCE kernel (reduce_kernel) at one vector width:
 * rl->loop_open opens the element loop for rl->vec. Emitted once, or
 * twice for a symbolic row length (a vector path and a scalar one). */
typedef struct row_loop {
    int tpr, rpb, vec;
    int64_t kv, len;
    bool cache, sym_len;
    const char *rows_s, *len_s, *loop_open;
    /* Column reduction (column_loop): rpb rows of a block side by side,
     * tpr threads splitting each row's range; kept_coords declares the
     * row's kept coordinates; early: the full-shape outputs are stored in
     * the first phase. */
    bool column, early;
    const char *kept_coords;
} row_loop;

static fc_status reduce_rows(kctx *k, const row_loop *rl) {
    const fc_group *gr = k->gr;
    const int tpr = rl->tpr, rpb = rl->rpb, vec = rl->vec;
    const int64_t kv = rl->kv, len = rl->len;
    const bool cache = rl->cache, sym_len = rl->sym_len;
    const char *rows_s = rl->rows_s, *len_s = rl->len_s, *loop_open = rl->loop_open;
    if (rl->column) {
        /* Every thread of the block runs every row step (the combine
         * synchronizes the block): a thread past the last row takes the
         * last row's coordinates, skips the element loops and stores
         * nothing. */
        fc_strbuf_printf(k->s, "  for (i64 row0 = (i64)blockIdx.x * %d; row0 < %s; row0 += (i64)gridDim.x * %d) {\n", rpb, rows_s, rpb);
        fc_strbuf_printf(k->s, "    const bool live = row0 + tx < %s;\n    const i64 row = live ? row0 + tx : (%s) - 1;\n%s", rows_s,
                         rows_s, rl->kept_coords);
    } else {
        fc_strbuf_printf(k->s, "  for (i64 row = (i64)blockIdx.x * %d + threadIdx.x / %d; row < %s; row += (i64)gridDim.x * %d) {\n", rpb,
                         tpr, rows_s, rpb);
    }
    char (*vin)[24], (*vout)[24];
    if (!fc_cg_vector_names(gr, &vin, &vout)) return FC_ERR_NOMEM;
    if (cache) {
        /* Prologue: the row's full-shape inputs into registers, once. */
        for (int i = 0; i < gr->ninputs; i++) {
            const bool bq = fc_cg_in_prologue(k, i);
            if (!fc_cg_full_shape(gr, gr->inputs[i]) && !bq) continue;
            const char *st = fc_cuda_storage_type(gr->inputs[i]->dtype);
            fc_strbuf_printf(k->s, "    fc_vec<%s, %d> %c%d[%lld];\n", st, vec, bq ? 'q' : 'r', i, (long long)kv);
        }
        fc_strbuf_printf(k->s, "%s", loop_open);
        for (int i = 0; i < gr->ninputs; i++) {
            char ld[128], at[64];
            if (fc_cg_full_shape(gr, gr->inputs[i])) {
                fc_strbuf_printf(k->s, "      r%d[c] = %s;\n", i, fc_cg_vector_load(k, i, vec, "base", ld, sizeof ld));
            } else if (fc_cg_in_prologue(k, i)) {
                snprintf(at, sizeof at, "base %% %lldll", (long long)fc_cg_vector_bcast(gr, i, vec));
                fc_strbuf_printf(k->s, "      q%d[c] = %s;\n", i, fc_cg_vector_load(k, i, vec, at, ld, sizeof ld));
            }
        }
        fc_strbuf_printf(k->s, "    }}\n");
    }
    /* One phase per reduction, in order. */
    bool first_phase = true;
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *r = gr->nodes[i];
        if (!fc_op_is_reduce(r->op)) continue;
        fc_dtype acc_dt = r->in[0]->dtype == FC_BOOL ? FC_I64 : r->in[0]->dtype;
        const char *ct = fc_cg_compute_type(acc_dt);
        char acc[24], init[64];
        snprintf(acc, sizeof acc, "acc%d", k->tmp++);
        if (r->op == FC_OP_REDUCE_MAX)
            snprintf(init, sizeof init, fc_dtype_is_float(acc_dt) ? "-INFINITY" : "(i64)0x8000000000000000ull");
        else if (r->op == FC_OP_REDUCE_MIN)
            snprintf(init, sizeof init, fc_dtype_is_float(acc_dt) ? "INFINITY" : "(i64)0x7fffffffffffffffll");
        else snprintf(init, sizeof init, "0");
        fc_strbuf_printf(k->s, "    %s %s = %s;\n", ct, acc, init);
        /* Persistent rows: keep the reduced value's input (softmax's exp) in
         * registers when later phases read it too, so it is computed once. */
        char store[16] = "";
        const fc_value *x = r->in[0];
        if (cache && x->def && fc_cg_in_group(k, x->def) && costly(x->def->op) && k->ncached < 8 && kv * vec <= 64 &&
            !fc_cg_is_input(k, x, NULL)) {
            bool later_use = false;
            for (int j = 0; j < gr->nnodes; j++)
                for (int q = 0; q < gr->nodes[j]->nin; q++)
                    if (gr->nodes[j]->in[q] == x && gr->nodes[j] != r) later_use = true;
            if (later_use) {
                snprintf(store, sizeof store, "s%d", k->tmp++);
                fc_strbuf_printf(k->s, "    %s %s[%lld][%d];\n", fc_cg_compute_type(x->dtype), store, (long long)kv, vec);
            }
        }
        fc_strbuf_printf(k->s, "%s", loop_open);
        int mark = k->nmemo, cmark = k->ncm;
        fc_cg_vector_loads(k, "base", vec, vin, cache ? "r%d[c]" : NULL);
        phase_arg pa = {r, acc, store[0] ? store : NULL, rl->early && first_phase};
        first_phase = false;
        fc_cg_elements(k, "base", vec, vin, accumulate, &pa);
        k->nmemo = mark;
        k->ncm = cmark;
        fc_strbuf_printf(k->s, "    }}\n");
        if (store[0]) {
            k->cached_vid[k->ncached] = x->id;
            snprintf(k->cached_arr[k->ncached], sizeof k->cached_arr[0], "%s", store);
            k->ncached++;
        }
        const char *opname = r->op == FC_OP_REDUCE_MAX ? "fc_op_max" : r->op == FC_OP_REDUCE_MIN ? "fc_op_min" : "fc_op_sum";
        const char *smem = acc_dt == FC_F64 ? "smem_d" : fc_dtype_is_float(acc_dt) ? "smem_f" : "smem_i";
        if (rl->column && tpr > 1) {
            /* The tpr partials of a row are threadIdx.x = tx + rpb * tid:
             * through shared memory, every thread gets the row's value. */
            fc_strbuf_printf(k->s, "    __syncthreads();\n    c%s[threadIdx.x] = %s;\n    __syncthreads();\n", smem, acc);
            fc_strbuf_printf(k->s, "    %s = c%s[tx];\n    for (int y = 1; y < %d; y++) %s = %s()(%s, c%s[y * %d + tx]);\n", acc, smem, tpr, acc,
                             opname, acc, smem, rpb);
        } else if (tpr > 32) fc_strbuf_printf(k->s, "    %s = fc_allreduce(%s, %d, %s, %s());\n", acc, acc, tpr, smem, opname);
        else if (tpr > 1) fc_strbuf_printf(k->s, "    %s = fc_allreduce(%s, %d, (%s *)0, %s());\n", acc, acc, tpr, ct, opname);
        char val[256];
        if (r->op == FC_OP_REDUCE_MEAN && sym_len) snprintf(val, sizeof val, "(%s / (%s)%s)", acc, ct, len_s);
        else if (r->op == FC_OP_REDUCE_MEAN) snprintf(val, sizeof val, "(%s / (%s)%lld)", acc, ct, (long long)len);
        else snprintf(val, sizeof val, "%s", acc);
        char rv[600];
        if (fc_cg_unrounded(k, r->out[0])) snprintf(rv, sizeof rv, "%s", val);
        else fc_cg_rounded(rv, sizeof rv, r->out[0]->dtype, val);
        char name[24];
        snprintf(name, sizeof name, "red%d", k->tmp++);
        fc_strbuf_printf(k->s, "    %s %s = %s;\n", fc_cg_compute_type(r->out[0]->dtype), name, rv);
        fc_cg_remember(k, r->out[0]->id, "row", name);
        row_reciprocal(k, r->out[0], name);
        k->row_ready[r->out[0]->id] = true;
        /* Per-row values that are now computable. */
        for (int j = 0; j < gr->nnodes; j++) {
            const fc_node *m = gr->nodes[j];
            if (fc_op_is_reduce(m->op) || m->nout != 1 || !k->is_row[m->out[0]->id] || k->row_ready[m->out[0]->id]) continue;
            bool ready = true;
            for (int q = 0; q < m->nin; q++)
                if (!m->in[q]->weak && k->is_row[m->in[q]->id] && !k->row_ready[m->in[q]->id]) ready = false;
            if (!ready) continue;
            /* evaluate at the row index with the row-level operands resolved */
            k->is_row[m->out[0]->id] = false;
            const char *e = fc_cg_emit_value(k, m->out[0], "row");
            k->is_row[m->out[0]->id] = true;
            fc_cg_remember(k, m->out[0]->id, "row", e);
            row_reciprocal(k, m->out[0], e);
            k->row_ready[m->out[0]->id] = true;
        }
    }
    /* Final phase: full-shape outputs per element, per-row outputs once. */
    bool any_full = false;
    for (int o = 0; o < gr->noutputs; o++)
        if (!k->is_row[gr->outputs[o]->id] && !rl->early) any_full = true;
    if (any_full) {
        fc_strbuf_printf(k->s, "%s", loop_open);
        int mark = k->nmemo, cmark = k->ncm;
        fc_cg_vector_loads(k, "base", vec, vin, cache ? "r%d[c]" : NULL);
        fc_cg_declare_vector_outputs(k, vec, vout);
        store_arg sa = {vec > 1 ? vout : NULL, true};
        fc_cg_elements(k, "base", vec, vin, fc_cg_store_element, &sa);
        fc_cg_vector_stores(k, vec, vout, "base");
        k->nmemo = mark;
        k->ncm = cmark;
        fc_strbuf_printf(k->s, "    }}\n");
    }
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id]) continue;
        const char *e = fc_cg_lookup(k, v->id, "row");
        fc_strbuf_printf(k->s, "    if (tid == 0%s) o%d[row] = fc_to<%s>(%s);\n", rl->column ? " && live" : "", o, fc_cuda_storage_type(v->dtype),
                         e ? e : "0");
    }
    fc_strbuf_printf(k->s, "  }\n");
    free(vin);
    free(vout);
    return FC_OK;
}

/* The element loop over a contiguous row of len_s elements, chunks of vec
 * from j0 (a trailing reduction without its row in registers). */
static void trailing_loop_open(char *buf, size_t n, int tpr, int vec, const char *len_s) {
    snprintf(buf, n, "    for (i64 j0 = (i64)tid * %d; j0 < %s; j0 += %d) {\n      {\n      i64 base = row * %s + j0;\n", vec,
             len_s, tpr * vec, len_s);
}

/* Whether every input of gr has its iteration shape (no broadcast one). */
static bool all_full_inputs(const fc_group *gr) {
    for (int i = 0; i < gr->ninputs; i++)
        if (!fc_cg_full_shape(gr, gr->inputs[i])) return false;
    return true;
}

/* Threads that split a column reduction's row (a power of two). */
#define COL_SPLIT 8

/* Coordinate of a dim of extent `dim` whose stride in the flat index idx
 * (of `count` values) is rem: in 32-bit arithmetic when everything is a
 * constant below 2^31 (a 64-bit division is a sequence of instructions,
 * a 32-bit one by a constant a multiply and a shift). */
static void coord_text(char *buf, size_t n, const char *idx, const fc_mono *rem, fc_dim dim, const fc_mono *count) {
    if (fc_mono_is_static(rem) && !fc_dim_is_sym(dim) && fc_mono_is_static(count) && count->c <= INT32_MAX) {
        snprintf(buf, n, "(i64)((unsigned)%s / %lldu %% %lldu)", idx, (long long)rem->c, (long long)dim);
    } else {
        char rs[SZ], ds[SZ];
        snprintf(buf, n, "((%s / %s) %% %s)", idx, fc_cuda_mono_text(rem, rs, sizeof rs), fc_cg_dimx(dim, ds, sizeof ds));
    }
}

/* A column reduction's element loop (loop_open: j0 from tid by tpr, its
 * reduced coordinates and `base`, the flat index composed from them and
 * the row's) and the row's kept coordinates (kept, declared once a row).
 * The coordinates are named crd<d>, the kernel's chunk coordinates, so
 * that views read them instead of dividing base again. */
static void column_loop(kctx *k, int tpr, const char *len_s, char *loop_open, size_t nl, char *kept, size_t nk) {
    const fc_group *gr = k->gr;
    char st[FC_MAX_RANK][SZ];
    fc_cg_stride_text(gr->space, gr->rank, st);
    const fc_mono rows = fc_group_rows_mono(gr), len = fc_group_row_len_mono(gr);
    size_t pos = (size_t)snprintf(loop_open, nl, "    for (i64 j0 = tid; j0 < %s && live; j0 += %d) {\n      {\n", len_s, tpr);
    size_t kpos = 0;
    fc_mono krem = fc_mono_one(), rrem = fc_mono_one();
    for (int d = gr->rank - 1; d >= 0; d--) {
        fc_mono *rem = gr->reduced[d] ? &rrem : &krem;
        char c[CX];
        coord_text(c, sizeof c, gr->reduced[d] ? "j0" : "row", rem, gr->space[d], gr->reduced[d] ? &len : &rows);
        snprintf(k->chunk_c[d], sizeof k->chunk_c[d], "crd%d", d);
        if (gr->reduced[d] && pos < nl) pos += (size_t)snprintf(loop_open + pos, nl - pos, "      const i64 crd%d = %s;\n", d, c);
        else if (!gr->reduced[d] && kpos < nk) kpos += (size_t)snprintf(kept + kpos, nk - kpos, "    const i64 crd%d = %s;\n", d, c);
        fc_mono_mul_dim(rem, gr->space[d]);
    }
    if (pos < nl) pos += (size_t)snprintf(loop_open + pos, nl - pos, "      i64 base = 0");
    for (int d = 0; d < gr->rank && pos < nl; d++) pos += (size_t)snprintf(loop_open + pos, nl - pos, " + crd%d * %s", d, st[d]);
    if (pos < nl) snprintf(loop_open + pos, nl - pos, ";\n");
    k->chunk_coords = true;
}

/* Does v, computed in the kernel, depend on a reduction or a per-row
 * value? seen: by value id, 0 not known, 1 no, 2 yes. */
static bool after_reduction(kctx *k, const fc_value *v, char *seen) {
    if (seen[v->id]) return seen[v->id] == 2;
    bool dep = k->is_row[v->id];
    if (!dep && v->def && !fc_cg_is_input(k, v, NULL)) {
        dep = fc_op_is_reduce(v->def->op);
        for (int q = 0; q < v->def->nin && !dep; q++)
            if (!v->def->in[q]->weak) dep = after_reduction(k, v->def->in[q], seen);
    }
    seen[v->id] = dep ? 2 : 1;
    return dep;
}

/* Whether a column reduction has full-shape outputs and none of them
 * depends on its reductions: then they are stored in the first phase,
 * where the elements are computed anyway, and no final phase computes
 * them again (a depthwise convolution fused before a squeeze-excite pool
 * is the whole cost of the kernel, and would run twice). */
static bool full_outputs_first(kctx *k) {
    const fc_group *gr = k->gr;
    char *seen = calloc((size_t)k->p->g->next_value_id + 1, 1);
    if (!seen) return false;
    bool any = false, dep = false;
    for (int o = 0; o < gr->noutputs && !dep; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->is_row[v->id]) continue;
        any = true;
        dep = after_reduction(k, v, seen);
    }
    free(seen);
    return any && !dep;
}

fc_status fc_cg_reduce_kernel(kctx *k, fc_launch *l) {
    const fc_group *gr = k->gr;
    /* Trailing reduction: the reduced dims are a suffix, rows are contiguous. */
    bool trailing = true;
    bool seen_reduced = false;
    for (int d = 0; d < gr->rank; d++) {
        if (gr->reduced[d]) seen_reduced = true;
        else if (seen_reduced) trailing = false;
    }
    /* Dynamic plans: rows and the row length are monomials; the vector
     * width comes from the row length's static factor (so it divides every
     * binding), and a symbolic row length takes a looped schedule sized by
     * that static factor (valid for any length >= 1). */
    fc_mono mrows = fc_group_rows_mono(gr), mlen = fc_group_row_len_mono(gr);
    bool sym_len = !fc_mono_is_static(&mlen);
    char rows_s[SZ], len_s[SZ];
    fc_cuda_mono_text(&mrows, rows_s, sizeof rows_s);
    fc_cuda_mono_text(&mlen, len_s, sizeof len_s);
    int64_t len = mlen.c;
    int vec = trailing ? fc_cg_vector_width(k, len) : 1;
    int64_t nvec = len / vec;
    int tpr, rpb;
    if (!trailing) {
        /* Column reduction: consecutive threads take consecutive rows
         * (the kept coordinates, the innermost of which is contiguous:
         * coalesced), and up to COL_SPLIT threads split each row's range,
         * so that a block covers 256 / COL_SPLIT rows and the grid has that
         * many times more blocks than with a thread per row (1024 rows of
         * 12544 elements took 4 blocks and 19.5 ms on an H200). */
        tpr = 1;
        while (tpr < COL_SPLIT && 2 * tpr <= len) tpr *= 2;
        rpb = 256 / tpr;
    } else if (sym_len) {
        if (nvec >= 512) {
            tpr = 256;
            rpb = 1;
        } else {
            tpr = 32;
            rpb = 8;
        }
    } else if (nvec <= 128) {
        tpr = 32;
        rpb = 8;
    } else {
        tpr = 64;
        while (tpr < 1024 && tpr * 4 < nvec) tpr *= 2;
        rpb = 1;
    }
    k->tpr = tpr;
    int64_t kv = (nvec + tpr - 1) / tpr; /* vectors per thread */
    /* Persistent: keep full-shape inputs in registers when they fit. */
    size_t cache_bytes = 0;
    for (int i = 0; i < gr->ninputs; i++)
        if (fc_cg_full_shape(gr, gr->inputs[i])) cache_bytes += (size_t)kv * (size_t)vec * fc_dtype_size(gr->inputs[i]->dtype);
    /* A row of no elements (a dim bound to 0) has nothing to hold: it takes
     * the loop, which runs no times, and no zero-length array is declared. */
    bool cache = trailing && !sym_len && vec > 1 && kv >= 1 && kv <= 8 && cache_bytes <= 512;
    /* And, in what is left of those 512 bytes, the suffix-broadcast inputs
     * (a norm's weight and bias), so that their loads overlap the row's
     * instead of following the reductions: the GPT-2 block's layernorms
     * read theirs after two all-reduces, an L2 round trip the GPU waited
     * for. Only where the blocks fit in one wave (or the rows are
     * symbolic): with more, other blocks hide that latency, and the
     * registers cost more than it saves (docs/CODEGEN.md). */
    k->nbq = 0;
    const bool one_wave = !fc_mono_is_static(&mrows) || (mrows.c + rpb - 1) / rpb <= fc_cuda_plan_sms(k->p);
    for (int i = 0; cache && one_wave && i < gr->ninputs && k->nbq < 8; i++) {
        const size_t b = (size_t)kv * (size_t)vec * fc_dtype_size(gr->inputs[i]->dtype);
        if (fc_cg_vector_bcast(gr, i, vec) > 0 && cache_bytes + b <= 512) {
            k->bq[k->nbq++] = i;
            cache_bytes += b;
        }
    }
    unsigned block = (unsigned)(tpr * rpb);
    fc_cg_kernel_signature(k, l, block);
    mark_rows(k);
    k->row_coords = trailing;

    /* The element loop over a row; chunk c covers elements [j0, j0 + vec). */
    char loop_open[4096]; /* rank 8: 8 terms of at most ~4 size expressions */
    if (cache)
        snprintf(loop_open, sizeof loop_open,
                 "    _Pragma(\"unroll\") for (int c = 0; c < %lld; c++) {\n      i64 j0 = ((i64)c * %d + tid) * %d;\n"
                 "      if (j0 < %lldll) {\n      i64 base = row * %lldll + j0;\n",
                 (long long)kv, tpr, vec, (long long)len, (long long)len);
    else if (trailing)
        trailing_loop_open(loop_open, sizeof loop_open, tpr, vec, len_s);
    char kept[2048] = "";
    bool early = false;
    if (!trailing) {
        column_loop(k, tpr, len_s, loop_open, sizeof loop_open, kept, sizeof kept);
        early = full_outputs_first(k);
        fc_strbuf_printf(k->s, "  /* column reduction: rows are the kept coordinates */\n");
    }

    if (!trailing) {
        if (tpr > 1)
            fc_strbuf_printf(k->s, "  __shared__ double csmem_d[256]; __shared__ float csmem_f[256]; __shared__ i64 csmem_i[256];\n");
        fc_strbuf_printf(k->s, "  const int tx = threadIdx.x %% %d, tid = threadIdx.x / %d;\n", rpb, rpb);
    } else {
        if (tpr > 32) fc_strbuf_printf(k->s, "  __shared__ double smem_d[32]; __shared__ float smem_f[32]; __shared__ i64 smem_i[32];\n");
        fc_strbuf_printf(k->s, "  const int tid = threadIdx.x %% %d;\n", tpr);
    }
    row_loop rl = {tpr, rpb, vec, kv, len, cache, sym_len, rows_s, len_s, loop_open, !trailing, early, kept};
    /* A symbolic row length gives vec 1 (no static factor to divide), so
     * every load is one element. When the length is a multiple of the
     * width the dtypes allow, long enough to give each of a row's threads
     * a vector (shorter rows are slower as vectors: docs/CODEGEN.md) and the buffers are
     * 16-byte aligned (checked at run time), the rows go as vectors
     * instead: the row loop twice, chosen per launch. Only where every
     * input has the kernel's shape (a broadcast input's period is
     * symbolic). */
    const int wide = sym_len && trailing && !cache && all_full_inputs(gr) ? fc_cg_vector_width(k, 16) : 1;
    fc_status st;
    if (wide > 1) {
        fc_strbuf_printf(k->s, "  if ((%s) %% %d == 0 && (%s) >= %d && ((0ull", len_s, wide, len_s, tpr * wide);
        for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(k->s, " | (unsigned long long)a%d", i);
        for (int o = 0; o < gr->noutputs; o++)
            if (!k->is_row[gr->outputs[o]->id]) fc_strbuf_printf(k->s, " | (unsigned long long)o%d", o);
        fc_strbuf_printf(k->s, ") & 15) == 0) {\n");
        char open_wide[4096];
        trailing_loop_open(open_wide, sizeof open_wide, tpr, wide, len_s);
        row_loop rw = rl;
        rw.vec = wide;
        rw.loop_open = open_wide;
        /* Both loops start from the same state: row values not made yet. */
        const size_t nv = (size_t)k->p->g->next_value_id + 1;
        bool *ready = malloc(nv);
        if (!ready) return FC_ERR_NOMEM;
        memcpy(ready, k->row_ready, nv);
        const int mark = k->nmemo, cmark = k->ncm;
        st = reduce_rows(k, &rw);
        fc_strbuf_printf(k->s, "  } else {\n");
        memcpy(k->row_ready, ready, nv);
        free(ready);
        k->nmemo = mark;
        k->ncm = cmark;
        if (st == FC_OK) st = reduce_rows(k, &rl);
        fc_strbuf_printf(k->s, "  }\n");
    } else {
        st = reduce_rows(k, &rl);
    }
    k->chunk_coords = false;
    if (st != FC_OK) return st;
    fc_strbuf_printf(k->s, "}\n\n");
    int64_t grid = (mrows.c + rpb - 1) / rpb;
    if (grid > (1 << 30)) grid = 1 << 30;
    if (grid < 1) grid = 1;
    l->grid[0] = (unsigned)grid;
    l->grid[1] = l->grid[2] = 1;
    l->grid_work[0] = mrows;
    l->grid_per[0] = rpb;
    l->grid_max[0] = 1 << 30;
    return FC_OK;
}

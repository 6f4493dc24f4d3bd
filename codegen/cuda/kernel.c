/* kernel.c - what pointwise and row kernels share: their parameters, the
 * vector width, vector loads and stores, and the walk over the elements of
 * a chunk (kernel.h). */
#include "kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dynamic plans: `, i64 s0, ..., i64 s{n-1}` after the pointers. */
static void sym_params(kctx *k, bool comma) {
    if (!k->dyn) return;
    for (int i = 0; i < k->nsyms; i++) fc_strbuf_printf(k->s, "%si64 s%d", comma || i ? ", " : "", i);
}

void fc_cg_sym_args(kctx *k, const char *prefix) {
    if (!k->dyn) return;
    for (int i = 0; i < k->nsyms; i++) fc_strbuf_printf(k->s, "%ss%d, ", prefix, i);
}

/* The argument list of a group's kernel (or body function). */
void fc_cg_kernel_params(kctx *k) {
    const fc_group *gr = k->gr;
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(k->s, "%sconst %s *__restrict__ a%d", i ? ", " : "", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    for (int i = 0; i < gr->noutputs; i++)
        fc_strbuf_printf(k->s, "%s%s *__restrict__ o%d", i || gr->ninputs ? ", " : "", fc_cuda_storage_type(gr->outputs[i]->dtype), i);
    sym_params(k, gr->ninputs + gr->noutputs > 0);
}

void fc_cg_kernel_signature(kctx *k, fc_launch *l, unsigned block) {
    fc_cuda_kernel_open(k->s, l, block, 0);
    fc_cg_kernel_params(k);
    fc_cuda_kernel_body(k->s, l);
}

/* Vector width: 16 bytes of the widest full-shape input or output, when
 * `len` (the contiguous run) is a multiple of it. */
int fc_cg_vector_width(const kctx *k, int64_t len) {
    const fc_group *gr = k->gr;
    size_t widest = 1;
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i]->rank == gr->rank && !memcmp(gr->inputs[i]->dims, gr->space, sizeof(int64_t) * (size_t)gr->rank))
            if (fc_dtype_size(gr->inputs[i]->dtype) > widest) widest = fc_dtype_size(gr->inputs[i]->dtype);
    for (int i = 0; i < gr->noutputs; i++)
        if (fc_dtype_size(gr->outputs[i]->dtype) > widest) widest = fc_dtype_size(gr->outputs[i]->dtype);
    int vec = (int)(16 / widest);
    if (vec > 8) vec = 8;
    while (vec > 1 && len % vec) vec /= 2;
    return vec;
}

bool fc_cg_full_shape(const fc_group *gr, const fc_value *v) {
    if (v->rank != gr->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] != gr->space[d]) return false;
    return true;
}

/* A trailing reduction's element L = row * len + j0 + e: coordinate d of
 * the group's space is, for an outer (kept) dim, one of row's (the same for
 * the whole row: the compiler computes it once a row), for a reduced dim,
 * one of j0 + e (a vector chunk never crosses the end of a row: its width
 * divides the row's length). */
static void row_element_coords(kctx *k, const char *L, int e) {
    const fc_group *gr = k->gr;
    int r0 = gr->rank;
    while (r0 > 0 && gr->reduced[r0 - 1]) r0--;
    char outer[FC_MAX_RANK][SZ], inner[FC_MAX_RANK][SZ], dim[SZ], buf[FC_MAX_RANK][CX];
    const char *c[FC_MAX_RANK];
    fc_cg_stride_text(gr->space, r0, outer);
    fc_cg_stride_text(gr->space + r0, gr->rank - r0, inner);
    for (int d = 0; d < gr->rank; d++) {
        fc_cg_dimx(gr->space[d], dim, sizeof dim);
        int w;
        if (d < r0 && d == 0) w = snprintf(buf[d], CX, "(row / %s)", outer[d]);
        else if (d < r0) w = snprintf(buf[d], CX, "((row / %s) %% %s)", outer[d], dim);
        else if (gr->rank - r0 == 1) w = snprintf(buf[d], CX, "(j0 + %d)", e);
        else if (d == r0) w = snprintf(buf[d], CX, "((j0 + %d) / %s)", e, inner[d - r0]);
        else w = snprintf(buf[d], CX, "(((j0 + %d) / %s) %% %s)", e, inner[d - r0], dim);
        c[d] = w < CX ? buf[d] : NULL;
    }
    fc_cg_note_coords(k, L, gr->rank, gr->space, c);
}

/* Element base + e of a pointwise kernel's chunk (k->chunk_coords). */
static void chunk_element_coords(kctx *k, const char *L, int e) {
    const fc_group *gr = k->gr;
    char last[48];
    const char *c[FC_MAX_RANK];
    for (int d = 0; d < gr->rank; d++) c[d] = k->chunk_c[d];
    snprintf(last, sizeof last, "(%s + %d)", k->chunk_c[gr->rank - 1], e);
    c[gr->rank - 1] = last;
    fc_cg_note_coords(k, L, gr->rank, gr->space, c);
}

/* Declare the coordinates of the chunk at base once (k->chunk_c), where a
 * chunk never crosses the last dim: its width divides it. */
void fc_cg_chunk_base_coords(kctx *k, int vec) {
    const fc_group *gr = k->gr;
    k->chunk_coords = false;
    if (gr->rank < 1) return;
    fc_dim last = gr->space[gr->rank - 1];
    if (vec > 1 && (fc_dim_is_sym(last) || last % vec)) return;
    char st[FC_MAX_RANK][SZ], dim[SZ];
    fc_cg_stride_text(gr->space, gr->rank, st);
    for (int d = 0; d < gr->rank; d++) {
        snprintf(k->chunk_c[d], sizeof k->chunk_c[d], "cb%d", k->tmp++);
        if (d == 0) fc_strbuf_printf(k->s, "      i64 %s = base / %s;\n", k->chunk_c[d], st[0]);
        else fc_strbuf_printf(k->s, "      i64 %s = (base / %s) %% %s;\n", k->chunk_c[d], st[d], fc_cg_dimx(gr->space[d], dim, sizeof dim));
    }
    k->chunk_coords = true;
}

void fc_cg_elements(kctx *k, const char *base, int vec, char vin[][24], elem_fn fn, void *arg) {
    const fc_group *gr = k->gr;
    for (int e = 0; e < vec; e++) {
        char L[24];
        snprintf(L, sizeof L, "L%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %s + %d;\n", L, base, e);
        if (k->row_coords) row_element_coords(k, L, e);
        if (k->chunk_coords) chunk_element_coords(k, L, e);
        /* Suffix-broadcast inputs: their index for this element, and the
         * vector lane that holds it. */
        k->nbx = 0;
        for (int b = 0; b < k->nbv; b++) {
            int at = -1;
            for (int q = 0; q < k->nbx; q++)
                if (k->bx[q].p == k->bv[b].p) at = q;
            if (at < 0) {
                at = k->nbx++;
                snprintf(k->bx[at].L, sizeof k->bx[at].L, "%s", L);
                k->bx[at].p = k->bv[b].p;
                snprintf(k->bx[at].ix, sizeof k->bx[at].ix, "bx%d", k->tmp++);
                fc_strbuf_printf(k->s, "      i64 %s = %s + %d;\n", k->bx[at].ix, k->bv[b].off, e);
            }
            char ex[96];
            snprintf(ex, sizeof ex, "fc_ld_lane(%s, %d)", vin[k->bv[b].input], e);
            fc_cg_remember(k, gr->inputs[k->bv[b].input]->id, k->bx[at].ix, ex);
        }
        for (int i = 0; i < gr->ninputs; i++)
            if (vin[i][0] && fc_cg_full_shape(gr, gr->inputs[i])) {
                char ex[96];
                snprintf(ex, sizeof ex, "fc_ld_lane(%s, %d)", vin[i], e);
                fc_cg_remember(k, gr->inputs[i]->id, L, ex);
            }
        for (int i = 0; i < k->ncached; i++) {
            char ex[96];
            snprintf(ex, sizeof ex, "%s[c][%d]", k->cached_arr[i], e);
            fc_cg_remember(k, k->cached_vid[i], L, ex);
        }
        fn(k, e, L, arg);
    }
}

/* The load of vec elements of input i from element `at` on, as C text in
 * buf: a plain dereference in a parameter kernel (its `const __restrict__`
 * pointer gives ld.global.nc), fc_nc_vec in a frame kernel, whose pointers
 * are loaded from the frame (the compiler cannot see they are read-only
 * for the kernel's life; without it permutes are much slower, docs/PERF.md). */
const char *fc_cg_vector_load(const kctx *k, int i, int vec, const char *at, char *buf, size_t n) {
    const char *t = fc_cuda_storage_type(k->gr->inputs[i]->dtype);
    if (k->frame) snprintf(buf, n, "fc_nc_vec<%s, %d>(a%d + %s)", t, vec, i, at);
    else snprintf(buf, n, "*(const fc_vec<%s, %d> *)(a%d + %s)", t, vec, i, at);
    return buf;
}

/* P when input i of the group is a suffix-broadcast input (a norm's
 * weight) that moves as vectors of vec: every chunk stays inside one copy
 * of it (P % vec == 0; base is a multiple of vec) and the vector is at
 * most 16 bytes (the alignment kernels assume of every pointer); else 0. */
int64_t fc_cg_vector_bcast(const fc_group *gr, int i, int vec) {
    const fc_value *x = gr->inputs[i];
    int64_t p = vec > 1 && !fc_cg_full_shape(gr, x) ? fc_cg_suffix_numel(gr, x) : 0;
    return p > 0 && p % vec == 0 && (size_t)vec * fc_dtype_size(x->dtype) <= 16 ? p : 0;
}

bool fc_cg_in_prologue(const kctx *k, int i) {
    for (int q = 0; q < k->nbq; q++)
        if (k->bq[q] == i) return true;
    return false;
}

/* Declare vector loads of every full-shape input at `base`; names in vin. */
void fc_cg_vector_loads(kctx *k, const char *base, int vec, char vin[][24], const char *cache_fmt) {
    const fc_group *gr = k->gr;
    k->nbv = k->nbx = 0;
    for (int i = 0; i < gr->ninputs; i++) {
        vin[i][0] = 0;
        const fc_value *x = gr->inputs[i];
        const int64_t p = fc_cg_vector_bcast(gr, i, vec);
        if (p > 0 && k->nbv < 8) {
            char *off = k->bv[k->nbv].off;
            off[0] = 0;
            for (int b = 0; b < k->nbv; b++)
                if (k->bv[b].p == p) memcpy(off, k->bv[b].off, sizeof k->bv[b].off);
            if (!off[0]) {
                snprintf(off, 24, "bo%d", k->tmp++);
                fc_strbuf_printf(k->s, "      i64 %s = %s %% %lldll;\n", off, base, (long long)p);
            }
            k->bv[k->nbv].input = i;
            k->bv[k->nbv].p = p;
            k->nbv++;
            if (cache_fmt && fc_cg_in_prologue(k, i)) {
                snprintf(vin[i], 24, "q%d[c]", i);
                continue;
            }
            snprintf(vin[i], 24, "v%d", k->tmp++);
            char ld[128];
            fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s = %s;\n", fc_cuda_storage_type(x->dtype), vec, vin[i],
                             fc_cg_vector_load(k, i, vec, off, ld, sizeof ld));
            continue;
        }
        if (!fc_cg_full_shape(gr, gr->inputs[i]) || vec == 1) continue;
        if (cache_fmt) {
            snprintf(vin[i], 24, cache_fmt, i);
        } else {
            snprintf(vin[i], 24, "v%d", k->tmp++);
            char ld[128];
            fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s = %s;\n", fc_cuda_storage_type(gr->inputs[i]->dtype), vec, vin[i],
                             fc_cg_vector_load(k, i, vec, base, ld, sizeof ld));
        }
    }
}

void fc_cg_store_element(kctx *k, int e, const char *L, void *arg) {
    store_arg *sa = arg;
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->reduce && k->is_row[v->id]) continue;
        if (!fc_cg_full_shape(gr, v)) {
            fc_cg_fail(k, "codegen: a stored result does not have the kernel's iteration shape");
            return;
        }
        /* bf16/f16 outputs not computed yet at this index are stored
         * unrounded (see bind); the store's conversion rounds once. */
        if ((v->dtype == FC_BF16 || v->dtype == FC_F16) && !fc_cg_lookup(k, v->id, L)) k->store_only_vid = v->id;
        const char *x = fc_cg_emit_value(k, v, L);
        k->store_only_vid = -1;
        if (sa->vout && sa->vout[o][0]) fc_strbuf_printf(k->s, "      %s.v[%d] = fc_to<%s>(%s);\n", sa->vout[o], e, fc_cuda_storage_type(v->dtype), x);
        else fc_strbuf_printf(k->s, "      o%d[%s] = fc_to<%s>(%s);\n", o, L, fc_cuda_storage_type(v->dtype), x);
    }
}

void fc_cg_declare_vector_outputs(kctx *k, int vec, char vout[][24]) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        vout[o][0] = 0;
        if (vec == 1 || (k->reduce && k->is_row[gr->outputs[o]->id])) continue;
        snprintf(vout[o], 24, "w%d", k->tmp++);
        fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s;\n", fc_cuda_storage_type(gr->outputs[o]->dtype), vec, vout[o]);
    }
}

void fc_cg_vector_stores(kctx *k, int vec, char vout[][24], const char *base) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++)
        if (vout[o][0])
            fc_strbuf_printf(k->s, "      *(fc_vec<%s, %d> *)(o%d + %s) = %s;\n", fc_cuda_storage_type(gr->outputs[o]->dtype), vec, o, base, vout[o]);
}

bool fc_cg_vector_names(const fc_group *gr, char (**vin)[24], char (**vout)[24]) {
    *vin = calloc((size_t)gr->ninputs + 1, 24);
    *vout = calloc((size_t)gr->noutputs + 1, 24);
    if (*vin && *vout) return true;
    free(*vin);
    free(*vout);
    *vin = *vout = NULL;
    return false;
}

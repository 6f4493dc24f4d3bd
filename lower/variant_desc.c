/* variant_desc.c - a dynamic variant's lowered description (variant_desc.h): its GEMMs as types, and the variant's description at one shape. */
#include "lower/variant_desc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fc_gemm_form_release(fc_context *ctx, fc_gemm_form *f) {
    if (!f) return;
    fc_ctx_freemem(ctx, f->w);
    fc_ctx_freemem(ctx, f->op_arg);
    memset(f, 0, sizeof *f);
}

static void set_type(fc_program_tensor *t, const fc_value *v) {
    memset(t, 0, sizeof *t);
    fc_program_tensor_set_type(t, v);
}

fc_status fc_gemm_form_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_gemm_form *out) {
    memset(out, 0, sizeof *out);
    fc_gemm_info gi;
    if (!n || !fc_gemm_info_of(n, &gi)) return FC_ERR_UNSUPPORTED;
    const int nops = n->nin;
    fc_gemm_form f = {.op = n->op, .info = gi};
    f.info.a = f.info.residual = NULL;
    f.info.w = f.info.bias = NULL;
    set_type(&f.a, gi.a);
    set_type(&f.y, n->out[0]);
    f.w = fc_ctx_malloc(ctx, sizeof *f.w * (size_t)(gi.nweights + 1));
    f.op_arg = fc_ctx_malloc(ctx, sizeof *f.op_arg * (size_t)(nops + 1));
    if (!f.w || !f.op_arg) {
        fc_gemm_form_release(ctx, &f);
        return FC_ERR_NOMEM;
    }
    for (int i = 0; i < gi.nweights; i++) set_type(&f.w[i], gi.w[i]);
    /* Operand k's position (k == nops: the result's). */
    for (int k = 0; k <= nops; k++) {
        const int id = k < nops ? n->in[k]->id : n->out[0]->id;
        int a = 0;
        while (a < nargs && arg_ids[a] != id) a++;
        if (a == nargs) {
            fc_gemm_form_release(ctx, &f);
            return fc_set_error(ctx, FC_ERR_USAGE, "%s: the launch has no argument for value %d",
                                fc_op_table[n->op].name, id);
        }
        if (k < nops) f.op_arg[k] = a;
        else f.out_arg = a;
    }
    *out = f;
    return FC_OK;
}

void fc_variant_desc_release(fc_context *ctx, fc_variant_desc *vd, int nlaunches) {
    if (!vd) return;
    fc_arena_layout_free(vd->arena);
    fc_ctx_freemem(ctx, vd->store);
    fc_ctx_freemem(ctx, vd->grid_sized);
    for (int i = 0; vd->gemm && i < nlaunches; i++) fc_gemm_form_release(ctx, &vd->gemm[i]);
    fc_ctx_freemem(ctx, vd->gemm);
    memset(vd, 0, sizeof *vd);
}

static size_t round_up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Room for n + 1 elements of size elem at *at (16-byte aligned); *at moves
 * past them. Returns where they start. */
static size_t take(size_t *at, size_t elem, int n) {
    size_t start = *at;
    *at += round_up16(elem * (size_t)(n + 1));
    return start;
}

/* Where each of d's arrays starts in the block. */
typedef struct parts {
    size_t offset, bytes, store, params, outputs, launches, gemm, wcols, end;
} parts;

static parts parts_of(const fc_variant_desc *vd, const fc_program_desc *v) {
    const int nv = vd->arena->nvalues, nl = v->src.nlaunches;
    parts p;
    size_t at = 0;
    p.offset = take(&at, sizeof(int64_t), nv);
    p.bytes = take(&at, sizeof(int64_t), nv);
    p.store = take(&at, sizeof(fc_store), nv);
    p.params = take(&at, sizeof(fc_program_tensor), v->nparams);
    p.outputs = take(&at, sizeof(fc_program_tensor), v->noutputs);
    /* Frame kernels: the variant's launches themselves, whose grids are
     * every shape's (set when the variant's device is ready). */
    p.launches = v->src.frame_words > 0 ? 0 : take(&at, sizeof(fc_launch), nl);
    p.gemm = vd->gemm ? take(&at, sizeof(fc_gemm_desc), nl) : 0;
    p.wcols = vd->gemm ? take(&at, sizeof(int64_t), vd->gemm_weights) : 0;
    p.end = at;
    return p;
}

size_t fc_variant_desc_bytes(const fc_variant_desc *vd, const fc_program_desc *v) { return parts_of(vd, v).end; }

/* A value of type t at the shape, for the GEMM planner (fc_value: only its
 * type is read). */
static void bound_value(const fc_program_tensor *t, const int64_t *syms, fc_value *out) {
    memset(out, 0, sizeof *out);
    out->dtype = t->dtype;
    out->rank = t->rank;
    out->param_index = -1;
    for (int q = 0; q < t->rank; q++) out->dims[q] = fc_dim_value(t->dims[q], syms);
}

/* The GEMMs can have this many weights each without an allocation. */
#define FORM_WEIGHTS 8

/* Launch i's GEMM at the shape into g (wcols: its weights' columns' room),
 * checked against d's storage. */
static fc_status gemm_at(fc_context *ctx, const fc_gemm_form *f, const int64_t *syms, const fc_program_desc *v,
                         const fc_program_desc *d, int i, int64_t *wcols, fc_gemm_desc *g) {
    const int nw = f->info.nweights;
    fc_value a, y, w_small[FORM_WEIGHTS], *w = w_small;
    fc_value *wp_small[FORM_WEIGHTS], **wp = wp_small;
    if (nw > FORM_WEIGHTS) {
        w = fc_ctx_malloc(ctx, sizeof *w * (size_t)nw);
        wp = fc_ctx_malloc(ctx, sizeof *wp * (size_t)nw);
    }
    fc_status st = !w || !wp ? FC_ERR_NOMEM : FC_OK;
    if (st == FC_OK) {
        bound_value(&f->a, syms, &a);
        bound_value(&f->y, syms, &y);
        for (int k = 0; k < nw; k++) {
            bound_value(&f->w[k], syms, &w[k]);
            wp[k] = &w[k];
        }
        fc_gemm_info gi = f->info;
        gi.a = &a;
        gi.w = wp;
        memset(g, 0, sizeof *g);
        st = fc_gemm_plan_of_info(ctx, f->op, &gi, &y, &g->plan);
        /* One weight may be a rank-1 [K] operand of a matmul: N is 1. */
        for (int k = 0; k < nw && st == FC_OK; k++)
            wcols[k] = nw == 1 ? g->plan.N : gi.trans_b ? w[k].dims[0] : w[k].dims[1];
    }
    if (w != w_small) fc_ctx_freemem(ctx, w);
    if (wp != wp_small) fc_ctx_freemem(ctx, wp);
    char why[256] = "";
    if (st == FC_OK) {
        g->wcols = wcols;
        g->op_arg = f->op_arg;
        g->out_arg = f->out_arg;
        /* Fused siblings' weights are the same at every shape: one
         * concatenation, kept under the variant's launch, serves them all. */
        g->share = &v->src.launches[i];
        st = fc_program_check_gemm(ctx, d, i, why, sizeof why);
    } else if (st == FC_ERR_UNSUPPORTED) {
        /* A GEMM cuBLASLt does not run (as at compile time: no
         * description, and running the launch fails cleanly). */
        memset(g, 0, sizeof *g);
        return FC_OK;
    } else if (st != FC_ERR_NOMEM) {
        snprintf(why, sizeof why, "%.250s", fc_last_error(ctx));
    }
    if (st != FC_OK && st != FC_ERR_NOMEM) {
        memset(g, 0, sizeof *g);
        return fc_set_error(ctx, FC_ERR_RUNTIME, "internal error: launch %d (%s): its GEMM at this shape: %s", i,
                            d->src.launches[i].name, why);
    }
    return st;
}

fc_status fc_variant_desc_at(fc_context *ctx, const fc_variant_desc *vd, const fc_program_desc *v,
                             const int64_t *syms, int nsyms, void *block, fc_program_desc *d) {
    const parts at = parts_of(vd, v);
    char *b = block;
    const int nv = vd->arena->nvalues, np = v->nparams, no = v->noutputs, nl = v->src.nlaunches;
    int64_t *offset = (int64_t *)(void *)(b + at.offset), *bytes = (int64_t *)(void *)(b + at.bytes);
    memset(d, 0, sizeof *d);
    fc_status st = fc_arena_layout_place(vd->arena, syms, offset, bytes, &d->arena_bytes, &d->intermediate_bytes);
    if (st != FC_OK) return st;
    /* The variant's target, as resolved (no device query per shape). */
    d->sm = v->sm;
    d->fast_math = v->fast_math;
    d->fuse = v->fuse;
    d->tf32 = v->tf32;
    d->precision = v->precision;
    d->numerics = v->numerics;
    d->graph_name = v->graph_name;
    d->nvalues = nv;
    d->store = (fc_store *)(void *)(b + at.store);
    for (int id = 0; id < nv; id++) {
        d->store[id] = vd->store[id];
        d->store[id].bytes = bytes[id];
        if (d->store[id].kind == FC_STORE_ARENA) d->store[id].index = offset[id];
    }
    d->nparams = np;
    d->noutputs = no;
    d->params = (fc_program_tensor *)(void *)(b + at.params);
    d->outputs = (fc_program_tensor *)(void *)(b + at.outputs);
    for (int i = 0; i < np + no; i++) {
        fc_program_tensor *t = i < np ? &d->params[i] : &d->outputs[i - np];
        *t = i < np ? v->params[i] : v->outputs[i - np];
        for (int q = 0; q < t->rank; q++) t->dims[q] = fc_dim_value(t->dims[q], syms);
        if (i >= np && t->copy_from.kind != FC_STORE_NONE) t->copy_from.bytes = bytes[t->value];
    }
    d->src.nlaunches = nl;
    d->src.frame_words = v->src.frame_words;
    d->src.frame_carried = v->src.frame_carried;
    if (v->src.frame_words > 0) {
        d->src.launches = v->src.launches;
    } else {
        d->src.launches = (fc_launch *)(void *)(b + at.launches);
        memcpy(d->src.launches, v->src.launches, sizeof(fc_launch) * (size_t)nl);
    }
    for (int i = 0; i < nl && st == FC_OK; i++)
        if (vd->grid_sized[i]) st = fc_launch_grid(ctx, &v->src.launches[i], syms, nsyms, d->src.launches[i].grid);
    if (st != FC_OK || !vd->gemm) return st;
    d->gemm = (fc_gemm_desc *)(void *)(b + at.gemm);
    memset(d->gemm, 0, sizeof *d->gemm * (size_t)nl);
    int64_t *wcols = (int64_t *)(void *)(b + at.wcols);
    for (int i = 0; i < nl && st == FC_OK; i++) {
        const fc_gemm_form *f = &vd->gemm[i];
        if (!f->op_arg) continue;
        st = gemm_at(ctx, f, syms, v, d, i, wcols, &d->gemm[i]);
        wcols += f->info.nweights;
    }
    return st;
}

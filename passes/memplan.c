/*
 * memplan.c - the memory plan: one device arena for every intermediate.
 *
 * Input: a scheduled plan (groups in launch order, each with the values it
 * reads from outside and the values it writes). Output: plan->offset[id],
 * the byte offset of each intermediate in one device arena (-1 for values
 * that live elsewhere), plan->arena_bytes (the arena's size) and
 * plan->intermediate_bytes (what the intermediates would take without
 * sharing).
 *
 * Storage classes. An FC_GROUP_ALIAS group launches nothing: its outputs
 * are views (a reshape of a contiguous value) of the buffer it reads. So
 * the unit of storage is a class: a value that owns a buffer (its root)
 * plus every alias of it, transitively. A class is live from the group
 * that writes its root to the last group that reads any of its members,
 * and all members get the root's offset. fc_plan_classes_make computes the
 * classes; the runtimes place values by the same ones (passes.h).
 *
 * An update_slice's result joins the class of its destination, the inout
 * parameter it writes in place, so every runtime places it in the caller's
 * buffer of that parameter. An all_reduce's result joins its operand's
 * class when nothing else reads the operand (a row-parallel GEMM's
 * product): the GEMM writes the buffer the sum is made in, in place
 * (NCCL's in-place form; the host collectives sum into scratch first), and
 * the kernel after it reads that buffer; no copy, no second buffer.
 *
 * Which classes go in the arena: those that are not rooted at a graph
 * parameter (the caller's input buffer holds them) and contain no graph
 * result (the caller's output buffer holds them, and the kernel that
 * writes the root writes there directly). Everything else a group writes
 * is an intermediate. A value that is written but never read by a later
 * group (a result the plan keeps for another reason) still gets storage,
 * live only during its writer: the kernel has to write it somewhere.
 *
 * Lifetimes are launch positions [first, last], inclusive (a value read
 * and a value written by one launch never share memory). Placement is
 * greedy by size with best fit over offsets, in multiples of 256 bytes
 * (ir/arena_layout.c, which says why). A load-time group's results
 * (passes/loadtime.c) live for the whole program: they are computed once
 * and read by the runs after.
 *
 * Two halves. Everything above but the sizes follows from the groups: the
 * classes, which need arena memory, their lifetimes. The layout
 * (fc_memplan_layout_make, an fc_arena_layout of ir/arena_layout.h) keeps
 * that, with each value's size as its dtype's bytes and its dims, symbols
 * kept (its "form"); a placement (fc_arena_layout_place) evaluates the
 * forms at one shape's symbol values and runs the best fit.
 * fc_pass_memplan is the two in a row; a dynamic variant keeps the layout
 * in its lowered description and places it per shape, which makes a new
 * shape's memory plan a few hundred operations and no allocation.
 */
#include "passes/passes.h"

#include "ir/arena_layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Remember v under its id. Values from outside the graph's id range are a
 * broken plan, not a user error. */
static void see(fc_plan_classes *c, fc_value *v) {
    FC_ASSERT(v && v->id >= 0 && v->id < c->nvalues);
    c->val[v->id] = v;
}

static bool group_has_node(const fc_group *grp, const fc_node *n) {
    for (int i = 0; i < grp->nnodes; i++)
        if (grp->nodes[i] == n) return true;
    return false;
}

/* The value outside alias group `grp` that output `o` is a view of: follow
 * first operands back through the group's own nodes (views take the viewed
 * value as their first operand). */
static fc_value *alias_source(const fc_group *grp, fc_value *o) {
    fc_value *v = o;
    while (v->def && group_has_node(grp, v->def)) {
        FC_ASSERT(v->def->nin >= 1);
        v = v->def->in[0];
    }
    return v;
}

fc_status fc_plan_classes_make(fc_context *ctx, const fc_plan *plan, fc_plan_classes *c) {
    const fc_graph *g = plan->g;
    int nv = g->next_value_id;
    size_t n = (size_t)(nv ? nv : 1);
    *c = (fc_plan_classes){nv, NULL, NULL, NULL};
    c->val = fc_ctx_malloc(ctx, n * sizeof *c->val);
    c->root = fc_ctx_malloc(ctx, n * sizeof *c->root);
    c->result_slot = fc_ctx_malloc(ctx, n * sizeof *c->result_slot);
    if (!c->val || !c->root || !c->result_slot) {
        fc_plan_classes_free(ctx, c);
        return FC_ERR_NOMEM;
    }
    for (int id = 0; id < nv; id++) {
        c->val[id] = NULL;
        c->root[id] = id;
        c->result_slot[id] = -1;
    }

    /* The values an all_reduce may sum in place: read by one group, written
     * at every run (not a parameter, a load-time result or a graph
     * result). */
    int *readers = fc_ctx_malloc(ctx, n * sizeof *readers);
    if (!readers) {
        fc_plan_classes_free(ctx, c);
        return FC_ERR_NOMEM;
    }
    memset(readers, 0, n * sizeof *readers);
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *grp = plan->groups[pos];
        for (int i = 0; i < grp->ninputs; i++) readers[grp->inputs[i]->id]++;
        for (int i = 0; grp->loadtime && i < grp->noutputs; i++) readers[grp->outputs[i]->id] = -1;
    }
    for (int k = 0; k < g->noutputs; k++) readers[g->outputs[k]->id] = -1;

    /* Launch order means an alias's source already has its final root. */
    for (int i = 0; i < g->nparams; i++) see(c, g->params[i]);
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *grp = plan->groups[pos];
        for (int i = 0; i < grp->ninputs; i++) see(c, grp->inputs[i]);
        for (int i = 0; i < grp->noutputs; i++) {
            fc_value *o = grp->outputs[i];
            see(c, o);
            if (grp->kind == FC_GROUP_ALIAS) {
                fc_value *src = alias_source(grp, o);
                see(c, src);
                c->root[o->id] = c->root[src->id];
            }
            /* An update_slice writes its result in place, in the buffer of
             * its destination (an inout parameter: docs/DECODE.md). */
            if (o->def && o->def->op == FC_OP_UPDATE_SLICE) {
                see(c, o->def->in[0]);
                c->root[o->id] = c->root[o->def->in[0]->id];
            }
            fc_value *x = o->def && o->def->op == FC_OP_ALL_REDUCE ? o->def->in[0] : NULL;
            if (x && x->def && readers[x->id] == 1 && c->root[x->id] == x->id) c->root[o->id] = x->id;
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        fc_value *v = g->outputs[k];
        see(c, v);
        int r = c->root[v->id];
        if (c->result_slot[r] < 0) c->result_slot[r] = k;
    }
    fc_ctx_freemem(ctx, readers);
    return FC_OK;
}

void fc_plan_classes_free(fc_context *ctx, fc_plan_classes *c) {
    fc_ctx_freemem(ctx, c->val);
    fc_ctx_freemem(ctx, c->root);
    fc_ctx_freemem(ctx, c->result_slot);
    *c = (fc_plan_classes){0, NULL, NULL, NULL};
}

/* The form of v: the first one with v's dtype size and dims, or a new
 * one. */
static int form_index(fc_arena_layout *l, const fc_value *v) {
    const int esize = (int)fc_dtype_size(v->dtype);
    for (int f = 0; f < l->nforms; f++) {
        const fc_arena_form *w = &l->form[f];
        if (w->rank == v->rank && w->esize == esize && !memcmp(w->dims, v->dims, sizeof *v->dims * (size_t)v->rank))
            return f;
    }
    fc_arena_form *w = &l->form[l->nforms];
    memset(w, 0, sizeof *w);
    w->esize = esize;
    w->rank = v->rank;
    memcpy(w->dims, v->dims, sizeof *v->dims * (size_t)v->rank);
    return l->nforms++;
}

/* Lifetimes per class (by root id, into first and last): the first write
 * of a member (the root's writer; alias groups come later) and the last
 * read of any member. */
static void class_lifetimes(const fc_plan *plan, const int *root, int nv, int *first, int *last) {
    for (int id = 0; id < nv; id++) first[id] = last[id] = -1;
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *grp = plan->groups[pos];
        /* The groups of one batch run at once: a value is written at the
         * batch's start and read until its end. */
        int wpos = pos, rpos = pos;
        if (grp->batch > 0) {
            wpos = grp->batch - 1;
            while (rpos + 1 < plan->ngroups && plan->groups[rpos + 1]->batch == grp->batch) rpos++;
        }
        /* A load-time group's results are kept from one weight load to
         * the next: nothing else may share their memory. */
        if (grp->loadtime) wpos = 0, rpos = plan->ngroups - 1;
        for (int i = 0; i < grp->noutputs; i++) {
            int r = root[grp->outputs[i]->id];
            if (first[r] < 0 || wpos < first[r]) first[r] = wpos;
            if (rpos > last[r]) last[r] = rpos;
        }
        for (int i = 0; i < grp->ninputs; i++) {
            int r = root[grp->inputs[i]->id];
            if (rpos > last[r]) last[r] = rpos;
        }
    }
    /* A cache update's inputs (the new rows, the offset) live as long as
     * a cache_attention reads the updated cache: a backend may run the
     * update inside that attention, which then reads the new rows from
     * their source (codegen/cuda/decode.c). */
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *u = plan->groups[pos];
        if (u->kind != FC_GROUP_LIBRARY || u->nnodes != 1 || u->nodes[0]->op != FC_OP_UPDATE_SLICE || u->noutputs != 1) continue;
        int until = -1;
        for (int j = pos + 1; j < plan->ngroups; j++) {
            const fc_group *a = plan->groups[j];
            if (a->kind != FC_GROUP_LIBRARY || a->nnodes != 1 || a->nodes[0]->op != FC_OP_CACHE_ATTENTION) continue;
            for (int i = 0; i < a->ninputs; i++)
                if (a->inputs[i] == u->outputs[0]) until = j;
        }
        for (int i = 0; until >= 0 && i < u->ninputs; i++) {
            int r = root[u->inputs[i]->id];
            if (until > last[r]) last[r] = until;
        }
    }
    /* A pointwise group that reads nothing but the GEMM right before it
     * has its results live from that GEMM on: a backend may evaluate the
     * group in the GEMM's epilogue (a GEMV's gate, codegen/cuda/gemv.c),
     * which stores them while other blocks still read the GEMM's
     * operands. */
    for (int pos = 0; pos + 1 < plan->ngroups; pos++) {
        const fc_group *m = plan->groups[pos], *q = plan->groups[pos + 1];
        if (m->kind != FC_GROUP_LIBRARY || m->nnodes != 1 || m->noutputs != 1 || m->batch > 0 || m->loadtime ||
            (m->nodes[0]->op != FC_OP_GEMM && m->nodes[0]->op != FC_OP_MATMUL))
            continue;
        if (q->kind != FC_GROUP_POINTWISE || q->batch > 0 || q->loadtime || q->ninputs != 1 || q->inputs[0] != m->outputs[0]) continue;
        for (int i = 0; i < q->noutputs; i++) {
            int r = root[q->outputs[i]->id];
            if (first[r] > pos) first[r] = pos;
        }
    }
}

/* The classes that need arena memory (see the top of the file), their
 * members and their members' forms, into l. first, last: by root id. */
static void find_classes(fc_arena_layout *l, const fc_plan_classes *c, const int *first, const int *last) {
    const int nv = l->nvalues;
    for (int id = 0; id < nv; id++) {
        const fc_value *v = c->val[id];
        l->form_of[id] = v ? form_index(l, v) : -1;
        if (v && !v->weak) l->form[l->form_of[id]].checked = true;
        l->class_of[id] = -1;
    }
    for (int r = 0; r < nv; r++) {
        const fc_value *v = c->val[r];
        if (c->root[r] != r || !v || v->weak || v->param_index >= 0 || c->result_slot[r] >= 0) continue;
        if (first[r] < 0) continue; /* never written by a group: nothing to store */
        l->class_of[r] = l->nclasses;
        l->cls[l->nclasses++] = (fc_arena_class){r, first[r], last[r], 0, 0};
    }
    /* Every member takes its root's offset; the class's size is its
     * largest member's (aliases match anyway), weak scalars aside. Each
     * class gets room for all its members' forms, one after another. */
    for (int id = 0; id < nv; id++)
        if (c->val[id]) l->class_of[id] = l->class_of[c->root[id]];
    for (int id = 0; id < nv; id++)
        if (l->class_of[id] >= 0 && !c->val[id]->weak) l->cls[l->class_of[id]].forms_at++;
    int at = 0;
    for (int k = 0; k < l->nclasses; k++) {
        int n = l->cls[k].forms_at;
        l->cls[k].forms_at = at;
        at += n;
    }
    for (int id = 0; id < nv; id++) {
        int k = l->class_of[id];
        if (k < 0 || c->val[id]->weak) continue;
        fc_arena_class *cl = &l->cls[k];
        int f = l->form_of[id], *forms = l->class_forms + cl->forms_at;
        bool seen = false;
        for (int i = 0; i < cl->nforms && !seen; i++) seen = forms[i] == f;
        if (!seen) forms[cl->nforms++] = f;
    }
}

fc_status fc_memplan_layout_make(const fc_plan *plan, fc_arena_layout **out) {
    *out = NULL;
    if (!plan || !plan->g) return FC_ERR_USAGE;
    fc_context *ctx = plan->g->ctx;
    const int nv = plan->g->next_value_id;
    const size_t n = (size_t)(nv ? nv : 1);
    fc_arena_layout *l = fc_ctx_malloc(ctx, sizeof *l);
    if (!l) return FC_ERR_NOMEM;
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->graph_name = plan->g->name;
    l->nvalues = nv;
    fc_plan_classes c;
    int *first = NULL, *last = NULL;
    fc_status st = fc_plan_classes_make(ctx, plan, &c);
    if (st == FC_OK) {
        l->form = fc_ctx_malloc(ctx, n * sizeof *l->form);
        l->form_of = fc_ctx_malloc(ctx, n * sizeof *l->form_of);
        l->class_of = fc_ctx_malloc(ctx, n * sizeof *l->class_of);
        l->cls = fc_ctx_malloc(ctx, n * sizeof *l->cls);
        l->class_forms = fc_ctx_malloc(ctx, n * sizeof *l->class_forms);
        first = fc_ctx_malloc(ctx, n * sizeof *first);
        last = fc_ctx_malloc(ctx, n * sizeof *last);
        if (!l->form || !l->form_of || !l->class_of || !l->cls || !l->class_forms || !first ||
            !last)
            st = FC_ERR_NOMEM;
    }
    if (st == FC_OK) {
        class_lifetimes(plan, c.root, nv, first, last);
        find_classes(l, &c, first, last);
    }
    fc_ctx_freemem(ctx, first);
    fc_ctx_freemem(ctx, last);
    fc_plan_classes_free(ctx, &c);
    if (st != FC_OK) {
        fc_arena_layout_free(l);
        return st;
    }
    *out = l;
    return FC_OK;
}

fc_status fc_pass_memplan(fc_plan *plan) {
    if (!plan || !plan->g) return FC_ERR_USAGE;
    plan->offset = NULL;
    plan->arena_bytes = plan->intermediate_bytes = 0;
    fc_arena_layout *l = NULL;
    fc_status st = fc_memplan_layout_make(plan, &l);
    int64_t *offset = NULL;
    if (st == FC_OK) {
        const int nv = l->nvalues;
        offset = fc_arena_alloc(&plan->arena, (size_t)(nv ? nv : 1) * sizeof *offset);
        if (!offset) st = FC_ERR_NOMEM;
    }
    /* The plan's dims are static (a dynamic plan has no memory plan: its
     * instances place a layout at their sizes). */
    if (st == FC_OK)
        st = fc_arena_layout_place(l, NULL, offset, NULL, &plan->arena_bytes, &plan->intermediate_bytes);
    fc_arena_layout_free(l);
    if (st != FC_OK) {
        plan->arena_bytes = plan->intermediate_bytes = 0;
        return st;
    }
    plan->offset = offset;
    return FC_OK;
}

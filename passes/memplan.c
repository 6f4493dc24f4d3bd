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
 * Which classes go in the arena: those that are not rooted at a graph
 * parameter (the caller's input buffer holds them) and contain no graph
 * result (the caller's output buffer holds them, and the kernel that
 * writes the root writes there directly). Everything else a group writes
 * is an intermediate. A value that is written but never read by a later
 * group (a result the plan keeps for another reason) still gets storage,
 * live only during its writer: the kernel has to write it somewhere.
 *
 * Lifetimes are closed intervals of launch positions [first, last]: a
 * value read by group j and a value written by group j are both live at
 * j and never share memory, since a kernel may read and write in any order.
 *
 * Allocation: "greedy by size" with best fit over offsets (the scheme of
 * TFLite's arena planner; Pisarchyk and Lee, "Efficient Memory Management
 * for Deep Neural Net Inference", 2020). Classes are placed largest first
 * (ties: earlier start, then lower value id, so the plan is
 * deterministic). Each is put in the smallest gap between the buffers
 * already placed whose lifetimes overlap its own, or above all of them if
 * no gap is large enough. Largest first because the large buffers are the
 * hard ones to fit; small ones then fill the holes. Offsets and sizes are
 * multiples of 256 bytes (the alignment cuMemAlloc gives, and enough for
 * any vector load a kernel makes).
 */
#include "passes/passes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMPLAN_ALIGN 256

/* One storage class that needs arena memory. */
typedef struct interval {
    int root;        /* value id of the class root */
    int first, last; /* launch positions, inclusive */
    int64_t size;    /* bytes, rounded up to MEMPLAN_ALIGN */
    int64_t offset;  /* assigned offset, -1 until placed */
} interval;

/* Scratch state of one run of the pass; freed by memplan_free. */
typedef struct memplan {
    fc_context *ctx;
    int nv;             /* value ids are 0 .. nv-1 */
    fc_plan_classes cls; /* val, root, result_slot by value id */
    int *first, *last;  /* per root: first writer, last reader (-1: none) */
    int64_t *bytes;     /* per root: largest member (aliases match anyway) */
    interval *iv;
    int niv;
} memplan;

static int64_t align_up(int64_t n) { return (n + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

static void *scratch(memplan *m, size_t n, size_t elem) {
    return fc_ctx_malloc(m->ctx, (n ? n : 1) * elem);
}

static void memplan_free(memplan *m) {
    fc_plan_classes_free(m->ctx, &m->cls);
    fc_ctx_freemem(m->ctx, m->first);
    fc_ctx_freemem(m->ctx, m->last);
    fc_ctx_freemem(m->ctx, m->bytes);
    fc_ctx_freemem(m->ctx, m->iv);
}

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
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        fc_value *v = g->outputs[k];
        see(c, v);
        int r = c->root[v->id];
        if (c->result_slot[r] < 0) c->result_slot[r] = k;
    }
    return FC_OK;
}

void fc_plan_classes_free(fc_context *ctx, fc_plan_classes *c) {
    fc_ctx_freemem(ctx, c->val);
    fc_ctx_freemem(ctx, c->root);
    fc_ctx_freemem(ctx, c->result_slot);
    *c = (fc_plan_classes){0, NULL, NULL, NULL};
}

/* Order for placement: largest first, then earliest start, then id. */
static int by_size_desc(const void *pa, const void *pb) {
    const interval *a = pa, *b = pb;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    return (a->root > b->root) - (a->root < b->root);
}

static int by_offset(const void *pa, const void *pb) {
    const interval *const *a = pa, *const *b = pb;
    if ((*a)->offset != (*b)->offset) return (*a)->offset < (*b)->offset ? -1 : 1;
    return ((*a)->root > (*b)->root) - ((*a)->root < (*b)->root);
}

static bool lifetimes_overlap(const interval *a, const interval *b) {
    return a->first <= b->last && b->first <= a->last;
}

/* Place every interval; returns the peak (the arena size). `live` is
 * scratch for niv pointers. */
static int64_t place_all(interval *iv, int niv, interval **live) {
    int64_t peak = 0;
    qsort(iv, (size_t)niv, sizeof *iv, by_size_desc);
    for (int i = 0; i < niv; i++) {
        interval *cur = &iv[i];
        /* The buffers already placed that are live at the same time. */
        int nlive = 0;
        for (int j = 0; j < i; j++)
            if (lifetimes_overlap(cur, &iv[j])) live[nlive++] = &iv[j];
        qsort(live, (size_t)nlive, sizeof *live, by_offset);

        /* Best fit: the smallest gap between them that holds cur; the top
         * (above every live buffer) when none does. */
        int64_t best = -1, best_gap = INT64_MAX, top = 0;
        for (int j = 0; j < nlive; j++) {
            int64_t gap = live[j]->offset - top;
            if (gap >= cur->size && gap < best_gap) {
                best = top;
                best_gap = gap;
            }
            int64_t end = live[j]->offset + live[j]->size;
            if (end > top) top = end;
        }
        cur->offset = best >= 0 ? best : top;
        if (cur->offset + cur->size > peak) peak = cur->offset + cur->size;
    }
    return peak;
}

static fc_status memplan_run(memplan *m, fc_plan *plan) {
    int nv = m->nv;

    /* Every value the plan touches, and the classes the alias groups make. */
    fc_status st = fc_plan_classes_make(m->ctx, plan, &m->cls);
    if (st != FC_OK) return st;
    fc_value *const *val = m->cls.val;
    const int *root = m->cls.root;
    m->first = scratch(m, (size_t)nv, sizeof *m->first);
    m->last = scratch(m, (size_t)nv, sizeof *m->last);
    m->bytes = scratch(m, (size_t)nv, sizeof *m->bytes);
    if (!m->first || !m->last || !m->bytes) return FC_ERR_NOMEM;
    for (int id = 0; id < nv; id++) {
        m->first[id] = m->last[id] = -1;
        m->bytes[id] = 0;
    }

    /* Lifetimes per class: the first write of a member (the root's writer;
     * alias groups come later) and the last read of any member. */
    for (int pos = 0; pos < plan->ngroups; pos++) {
        const fc_group *grp = plan->groups[pos];
        /* The groups of one batch run at once: a value is written at the
         * batch's start and read until its end. */
        int wpos = pos, rpos = pos;
        if (grp->batch > 0) {
            wpos = grp->batch - 1;
            while (rpos + 1 < plan->ngroups && plan->groups[rpos + 1]->batch == grp->batch) rpos++;
        }
        for (int i = 0; i < grp->noutputs; i++) {
            int r = root[grp->outputs[i]->id];
            if (m->first[r] < 0 || wpos < m->first[r]) m->first[r] = wpos;
            if (rpos > m->last[r]) m->last[r] = rpos;
        }
        for (int i = 0; i < grp->ninputs; i++) {
            int r = root[grp->inputs[i]->id];
            if (rpos > m->last[r]) m->last[r] = rpos;
        }
    }
    for (int id = 0; id < nv; id++) {
        if (!val[id] || val[id]->weak) continue;
        int64_t b = plan->sized ? fc_value_bytes_at(val[id], plan->sym_values) : fc_value_bytes(val[id]);
        if (b < 0 && plan->sized)
            return fc_set_error(m->ctx, FC_ERR_INPUT, "bind: a value of graph %s is too large (its size overflows 64 bits)",
                                plan->g->name);
        FC_ASSERT(b >= 0);
        int r = root[id];
        if (b > m->bytes[r]) m->bytes[r] = b;
    }

    /* The classes that need arena memory (see the top of the file). */
    m->iv = scratch(m, (size_t)nv, sizeof *m->iv);
    interval **live = scratch(m, (size_t)nv, sizeof *live);
    if (!m->iv || !live) {
        fc_ctx_freemem(m->ctx, live);
        return FC_ERR_NOMEM;
    }
    int64_t sum = 0;
    for (int r = 0; r < nv; r++) {
        const fc_value *v = val[r];
        if (root[r] != r || !v || v->weak || v->param_index >= 0 || m->cls.result_slot[r] >= 0) continue;
        if (m->first[r] < 0) continue; /* never written by a group: nothing to store */
        m->iv[m->niv++] = (interval){r, m->first[r], m->last[r], align_up(m->bytes[r]), -1};
        sum += m->bytes[r];
    }
    int64_t peak = place_all(m->iv, m->niv, live);
    fc_ctx_freemem(m->ctx, live);

    plan->offset = fc_arena_alloc(&plan->arena, (size_t)(nv ? nv : 1) * sizeof *plan->offset);
    if (!plan->offset) return FC_ERR_NOMEM;
    /* Offsets by root first, then every member takes its root's. */
    for (int id = 0; id < nv; id++) plan->offset[id] = -1;
    for (int i = 0; i < m->niv; i++) plan->offset[m->iv[i].root] = m->iv[i].offset;
    for (int id = 0; id < nv; id++)
        if (val[id] && root[id] != id) plan->offset[id] = plan->offset[root[id]];
    plan->arena_bytes = peak;
    plan->intermediate_bytes = sum;
    return FC_OK;
}

fc_status fc_pass_memplan(fc_plan *plan) {
    if (!plan || !plan->g) return FC_ERR_USAGE;
    memplan m;
    memset(&m, 0, sizeof m);
    m.ctx = plan->g->ctx;
    m.nv = plan->g->next_value_id;
    plan->offset = NULL;
    plan->arena_bytes = plan->intermediate_bytes = 0;
    fc_status st = memplan_run(&m, plan);
    memplan_free(&m);
    if (st != FC_OK) {
        plan->offset = NULL;
        plan->arena_bytes = plan->intermediate_bytes = 0;
    }
    return st;
}

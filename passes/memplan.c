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
 *
 * Two halves. Everything above but the sizes follows from the groups: the
 * classes, which need arena memory, their lifetimes. The layout
 * (fc_memplan_layout_make) keeps that, with each value's size as a
 * representative value whose dims give it (its "form"); a placement
 * (fc_memplan_layout_place) evaluates the forms at one shape's symbol
 * values and runs the best fit. fc_pass_memplan is the two in a row; a
 * dynamic variant keeps the layout and places it per shape, which makes a
 * new shape's memory plan a few hundred operations and no allocation.
 */
#include "passes/passes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMPLAN_ALIGN 256

/* One storage class that needs arena memory, at one shape. */
typedef struct interval {
    int root;        /* value id of the class root */
    int index;       /* its class in the layout (fc_memplan_layout.cls) */
    int first, last; /* launch positions, inclusive */
    int64_t size;    /* bytes, rounded up to MEMPLAN_ALIGN */
    int64_t offset;  /* assigned offset, -1 until placed */
} interval;

/* A class that needs arena memory, as the layout keeps it: everything but
 * its size, which is the largest of its members' at the shape. */
typedef struct layout_class {
    int root, first, last;
    int forms_at, nforms; /* its members' sizes: layout->class_forms[forms_at ..] */
} layout_class;

/*
 * The shape-independent half of the memory plan. Which values are stored
 * where, which classes need arena memory and when each is live follow from
 * the groups alone; only the sizes depend on the symbols. A size is kept
 * as a "form": a representative value whose dims (symbolic or not) give
 * the bytes of every value with the same dtype size and dims, so that a
 * placement evaluates each distinct size once.
 */
struct fc_memplan_layout {
    fc_context *ctx;
    const char *graph_name; /* the plan's graph's (it outlives the layout) */
    int nvalues;            /* value ids are 0 .. nvalues-1 */
    int nforms;
    const fc_value **form; /* a representative value of each distinct size */
    bool *form_checked;    /* used by a value that is not a weak scalar: its overflow is an error */
    int *form_of;          /* by value id: its form; -1 for values the plan never names */
    int *class_of;         /* by value id: the arena class whose offset it takes; -1: not in the arena */
    int nclasses;
    layout_class *cls;
    int *class_forms; /* every class's member forms, one class after another */
};

static int64_t align_up(int64_t n) { return (n + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

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
static bool placed_before(const interval *a, const interval *b) {
    if (a->size != b->size) return a->size > b->size;
    if (a->first != b->first) return a->first < b->first;
    return a->root < b->root;
}

static bool below(const interval *a, const interval *b) {
    if (a->offset != b->offset) return a->offset < b->offset;
    return a->root < b->root;
}

static int cmp_placement(const void *pa, const void *pb) {
    const interval *a = pa, *b = pb;
    return placed_before(a, b) ? -1 : placed_before(b, a);
}

/* Short lists (a dynamic variant's instance places a dozen classes per
 * shape) are insertion-sorted: qsort's calls would cost more than the
 * comparisons. Both orders are total (ids break ties), so either sort
 * gives the same plan. */
#define SHORT_SORT 32

static void sort_for_placement(interval *iv, int n) {
    if (n > SHORT_SORT) {
        qsort(iv, (size_t)n, sizeof *iv, cmp_placement);
        return;
    }
    for (int i = 1; i < n; i++) {
        interval x = iv[i];
        int j = i;
        for (; j > 0 && placed_before(&x, &iv[j - 1]); j--) iv[j] = iv[j - 1];
        iv[j] = x;
    }
}

static bool lifetimes_overlap(const interval *a, const interval *b) {
    return a->first <= b->last && b->first <= a->last;
}

/* Place every interval; returns the peak (the arena size). `placed` is
 * scratch for niv pointers: the intervals placed so far, kept in offset
 * order as each is placed (a binary search and a move), so that finding
 * the buffers live beside the next one is a scan, not a sort of them per
 * interval (which made a plan with thousands of intermediates live at
 * once, as a wide concat's operands are, cost n^2 log n). */
static int64_t place_all(interval *iv, int niv, interval **placed) {
    int64_t peak = 0;
    int nplaced = 0;
    sort_for_placement(iv, niv);
    for (int i = 0; i < niv; i++) {
        interval *cur = &iv[i];
        /* Best fit: the smallest gap between the buffers live at the same
         * time that holds cur; the top (above every one) when none does. */
        int64_t best = -1, best_gap = INT64_MAX, top = 0;
        for (int j = 0; j < nplaced; j++) {
            const interval *p = placed[j];
            if (!lifetimes_overlap(cur, p)) continue;
            int64_t gap = p->offset - top;
            if (gap >= cur->size && gap < best_gap) {
                best = top;
                best_gap = gap;
            }
            int64_t end = p->offset + p->size;
            if (end > top) top = end;
        }
        cur->offset = best >= 0 ? best : top;
        if (cur->offset + cur->size > peak) peak = cur->offset + cur->size;
        int lo = 0, hi = nplaced;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (below(placed[mid], cur)) lo = mid + 1;
            else hi = mid;
        }
        memmove(&placed[lo + 1], &placed[lo], sizeof *placed * (size_t)(nplaced - lo));
        placed[lo] = cur;
        nplaced++;
    }
    return peak;
}

void fc_memplan_layout_free(fc_memplan_layout *l) {
    if (!l) return;
    fc_context *ctx = l->ctx;
    fc_ctx_freemem(ctx, l->form);
    fc_ctx_freemem(ctx, l->form_checked);
    fc_ctx_freemem(ctx, l->form_of);
    fc_ctx_freemem(ctx, l->class_of);
    fc_ctx_freemem(ctx, l->cls);
    fc_ctx_freemem(ctx, l->class_forms);
    fc_ctx_freemem(ctx, l);
}

/* The form of v: the first value seen with v's dtype size and dims, or v
 * itself as a new form. */
static int form_index(fc_memplan_layout *l, const fc_value *v) {
    for (int f = 0; f < l->nforms; f++) {
        const fc_value *w = l->form[f];
        if (w->rank == v->rank && fc_dtype_size(w->dtype) == fc_dtype_size(v->dtype) &&
            !memcmp(w->dims, v->dims, sizeof *v->dims * (size_t)v->rank))
            return f;
    }
    l->form[l->nforms] = v;
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
}

/* The classes that need arena memory (see the top of the file), their
 * members and their members' forms, into l. first, last: by root id. */
static void find_classes(fc_memplan_layout *l, const fc_plan_classes *c, const int *first, const int *last) {
    const int nv = l->nvalues;
    for (int id = 0; id < nv; id++) {
        const fc_value *v = c->val[id];
        l->form_of[id] = v ? form_index(l, v) : -1;
        if (v && !v->weak) l->form_checked[l->form_of[id]] = true;
        l->class_of[id] = -1;
    }
    for (int r = 0; r < nv; r++) {
        const fc_value *v = c->val[r];
        if (c->root[r] != r || !v || v->weak || v->param_index >= 0 || c->result_slot[r] >= 0) continue;
        if (first[r] < 0) continue; /* never written by a group: nothing to store */
        l->class_of[r] = l->nclasses;
        l->cls[l->nclasses++] = (layout_class){r, first[r], last[r], 0, 0};
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
        layout_class *cl = &l->cls[k];
        int f = l->form_of[id], *forms = l->class_forms + cl->forms_at;
        bool seen = false;
        for (int i = 0; i < cl->nforms && !seen; i++) seen = forms[i] == f;
        if (!seen) forms[cl->nforms++] = f;
    }
}

fc_status fc_memplan_layout_make(const fc_plan *plan, fc_memplan_layout **out) {
    *out = NULL;
    if (!plan || !plan->g) return FC_ERR_USAGE;
    fc_context *ctx = plan->g->ctx;
    const int nv = plan->g->next_value_id;
    const size_t n = (size_t)(nv ? nv : 1);
    fc_memplan_layout *l = fc_ctx_malloc(ctx, sizeof *l);
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
        l->form_checked = fc_ctx_malloc(ctx, n * sizeof *l->form_checked);
        l->form_of = fc_ctx_malloc(ctx, n * sizeof *l->form_of);
        l->class_of = fc_ctx_malloc(ctx, n * sizeof *l->class_of);
        l->cls = fc_ctx_malloc(ctx, n * sizeof *l->cls);
        l->class_forms = fc_ctx_malloc(ctx, n * sizeof *l->class_forms);
        first = fc_ctx_malloc(ctx, n * sizeof *first);
        last = fc_ctx_malloc(ctx, n * sizeof *last);
        if (!l->form || !l->form_checked || !l->form_of || !l->class_of || !l->cls || !l->class_forms || !first ||
            !last)
            st = FC_ERR_NOMEM;
    }
    if (st == FC_OK) {
        memset(l->form_checked, 0, n * sizeof *l->form_checked);
        class_lifetimes(plan, c.root, nv, first, last);
        find_classes(l, &c, first, last);
    }
    fc_ctx_freemem(ctx, first);
    fc_ctx_freemem(ctx, last);
    fc_plan_classes_free(ctx, &c);
    if (st != FC_OK) {
        fc_memplan_layout_free(l);
        return st;
    }
    *out = l;
    return FC_OK;
}

int fc_memplan_layout_nvalues(const fc_memplan_layout *l) { return l ? l->nvalues : 0; }

/* Scratch of a placement kept on the stack up to this many classes and
 * forms (a dynamic variant's instance then allocates nothing for it). */
#define PLACE_SMALL 64

fc_status fc_memplan_layout_place(const fc_memplan_layout *l, const int64_t *sym_values, int64_t *offset,
                                  int64_t *bytes, int64_t *arena_bytes, int64_t *intermediate_bytes) {
    int64_t fb_small[PLACE_SMALL], off_small[PLACE_SMALL];
    interval iv_small[PLACE_SMALL];
    interval *live_small[PLACE_SMALL];
    int64_t *fb = fb_small, *off = off_small;
    interval *iv = iv_small;
    interval **live = live_small;
    const int nc = l->nclasses;
    if (l->nforms > PLACE_SMALL) fb = fc_ctx_malloc(l->ctx, sizeof *fb * (size_t)l->nforms);
    if (nc > PLACE_SMALL) {
        off = fc_ctx_malloc(l->ctx, sizeof *off * (size_t)nc);
        iv = fc_ctx_malloc(l->ctx, sizeof *iv * (size_t)nc);
        live = fc_ctx_malloc(l->ctx, sizeof *live * (size_t)nc);
    }
    fc_status st = FC_OK;
    if (!fb || !off || !iv || !live) st = FC_ERR_NOMEM;
    /* Each distinct size once. */
    for (int f = 0; f < l->nforms && st == FC_OK; f++) {
        fb[f] = fc_value_bytes_at(l->form[f], sym_values);
        if (fb[f] < 0 && l->form_checked[f])
            st = fc_set_error(l->ctx, FC_ERR_INPUT, "bind: a value of graph %s is too large (its size overflows 64 bits)",
                              l->graph_name);
    }
    if (st == FC_OK) {
        int64_t sum = 0;
        for (int k = 0; k < nc; k++) {
            const layout_class *cl = &l->cls[k];
            int64_t size = 0;
            for (int i = 0; i < cl->nforms; i++)
                if (fb[l->class_forms[cl->forms_at + i]] > size) size = fb[l->class_forms[cl->forms_at + i]];
            iv[k] = (interval){cl->root, k, cl->first, cl->last, align_up(size), -1};
            sum += size;
        }
        *arena_bytes = place_all(iv, nc, live);
        *intermediate_bytes = sum;
        for (int k = 0; k < nc; k++) off[iv[k].index] = iv[k].offset;
        for (int id = 0; id < l->nvalues; id++) {
            offset[id] = l->class_of[id] >= 0 ? off[l->class_of[id]] : -1;
            if (bytes) bytes[id] = l->form_of[id] >= 0 ? fb[l->form_of[id]] : 0;
        }
    }
    if (fb != fb_small) fc_ctx_freemem(l->ctx, fb);
    if (off != off_small) fc_ctx_freemem(l->ctx, off);
    if (iv != iv_small) fc_ctx_freemem(l->ctx, iv);
    if (live != live_small) fc_ctx_freemem(l->ctx, live);
    return st;
}

fc_status fc_pass_memplan(fc_plan *plan) {
    if (!plan || !plan->g) return FC_ERR_USAGE;
    plan->offset = NULL;
    plan->arena_bytes = plan->intermediate_bytes = 0;
    fc_memplan_layout *l = NULL;
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
        st = fc_memplan_layout_place(l, NULL, offset, NULL, &plan->arena_bytes, &plan->intermediate_bytes);
    fc_memplan_layout_free(l);
    if (st != FC_OK) {
        plan->arena_bytes = plan->intermediate_bytes = 0;
        return st;
    }
    plan->offset = offset;
    return FC_OK;
}

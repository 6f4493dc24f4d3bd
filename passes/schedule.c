/* schedule.c - launch order: groups in dependency order (Kahn's
 * algorithm, ties by the first node), and launch batching of small
 * independent pointwise groups. Both are near-linear in the groups and
 * their inputs: a wide concat has thousands of sibling groups before
 * horizontal fusion gathers them. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define BATCH_MAX_ELEMS (1 << 16) /* "small": a few waves of one SM at most */
#define BATCH_MAX_GROUPS 16
/* A batch's kernel takes every group's pointers: at most this many keep it
 * within the 4 KB of parameters that CUDA before 12.1 allows (8 bytes
 * each, with room for the symbols of a dynamic plan). */
#define BATCH_MAX_ARGS 384

/* A binary min-heap of group positions keyed by their first node's id:
 * Kahn's algorithm takes the ready group that comes first in the graph. */
typedef struct ready_heap {
    int *pos;
    int n;
    const fc_plan *p;
} ready_heap;

static int first_node(const ready_heap *h, int i) { return h->p->groups[h->pos[i]]->nodes[0]->id; }

static void heap_push(ready_heap *h, int q) {
    int i = h->n++;
    h->pos[i] = q;
    while (i > 0 && first_node(h, (i - 1) / 2) > first_node(h, i)) {
        int up = (i - 1) / 2, t = h->pos[up];
        h->pos[up] = h->pos[i];
        h->pos[i] = t;
        i = up;
    }
}

static int heap_pop(ready_heap *h) {
    int top = h->pos[0];
    h->pos[0] = h->pos[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && first_node(h, l) < first_node(h, m)) m = l;
        if (r < h->n && first_node(h, r) < first_node(h, m)) m = r;
        if (m == i) break;
        int t = h->pos[m];
        h->pos[m] = h->pos[i];
        h->pos[i] = t;
        i = m;
    }
    return top;
}

fc_status fc_pass_schedule(fc_plan *p) {
    /* Kahn's algorithm over group dependencies, ties broken by the first
     * node's position so the order is deterministic. Edges are kept as
     * lists (a dependency matrix would be quadratic in the groups), each
     * producer counted once per consumer. */
    int n = p->ngroups, nedges = 0;
    for (int b = 0; b < n; b++) nedges += p->groups[b]->ninputs;
    int *indeg = calloc((size_t)n + 1, sizeof(int));
    int *mark = malloc(sizeof(int) * ((size_t)n + 1));
    int *first = calloc((size_t)n + 2, sizeof(int)); /* CSR: consumers of a at succ[first[a] .. first[a+1]) */
    int *succ = malloc(sizeof(int) * ((size_t)nedges + 1));
    int *src = malloc(sizeof(int) * ((size_t)nedges + 1)), *dst = malloc(sizeof(int) * ((size_t)nedges + 1));
    ready_heap h = {.pos = malloc(sizeof(int) * ((size_t)n + 1)), .p = p};
    fc_group **sorted = fc_arena_alloc(&p->arena, sizeof *sorted * (size_t)(n ? n : 1));
    fc_status st = FC_OK;
    if (!indeg || !mark || !first || !succ || !src || !dst || !h.pos || !sorted) {
        st = FC_ERR_NOMEM;
        goto out;
    }
    /* Group ids index the arrays; the heap holds positions in p->groups. */
    int *pos_of = mark; /* reused below, after the edges are made */
    for (int q = 0; q < n; q++) mark[q] = -1;
    int e = 0;
    for (int b = 0; b < n; b++) {
        fc_group *gb = p->groups[b];
        for (int k = 0; k < gb->ninputs; k++) {
            fc_value *v = gb->inputs[k];
            if (!v->def) continue;
            int a = p->group_of_node[v->def->id];
            if (a >= 0 && a != gb->id && mark[a] != gb->id) {
                mark[a] = gb->id;
                src[e] = a;
                dst[e++] = gb->id;
                indeg[gb->id]++;
                first[a + 1]++;
            }
        }
    }
    for (int q = 0; q < n; q++) first[q + 1] += first[q];
    for (int q = 0; q < n; q++) mark[q] = first[q];
    for (int k = 0; k < e; k++) succ[mark[src[k]]++] = dst[k];
    for (int q = 0; q < n; q++) pos_of[p->groups[q]->id] = q;
    for (int q = 0; q < n; q++)
        if (!indeg[p->groups[q]->id]) heap_push(&h, q);
    int count = 0;
    while (h.n) {
        int best = heap_pop(&h), id = p->groups[best]->id;
        sorted[count++] = p->groups[best];
        for (int k = first[id]; k < first[id + 1]; k++)
            if (--indeg[succ[k]] == 0) heap_push(&h, pos_of[succ[k]]);
    }
    FC_ASSERT(count == n); /* fusion never makes a cycle */
    p->groups = sorted;
    p->cap_groups = n;
    for (int q = 0; q < n; q++) {
        p->groups[q]->id = q;
        for (int k = 0; k < p->groups[q]->nnodes; k++) p->group_of_node[p->groups[q]->nodes[k]->id] = q;
    }
out:
    free(indeg); free(mark); free(first); free(succ); free(src); free(dst); free(h.pos);
    return st;
}

/* Elements of a group's space; a symbolic space is never small (its size
 * is not known when the batch is made). */
static int64_t space_elems(const fc_group *gr) {
    fc_mono m = fc_group_space_mono(gr);
    return fc_mono_is_static(&m) ? m.c : INT64_MAX;
}

/* A small pointwise group: a candidate for a batch. A load-time group is
 * not: it runs when weights are loaded, not beside the per-run groups. */
static bool is_small(const fc_group *gr) {
    return gr->kind == FC_GROUP_POINTWISE && !gr->loadtime && space_elems(gr) <= BATCH_MAX_ELEMS;
}

/* Dependency level of each group: 0 for groups that read only params,
 * else one more than the deepest producer. Groups of one level are ready at
 * the same time. */
static int *group_levels(fc_plan *p) {
    int *level = calloc((size_t)p->ngroups + 1, sizeof(int));
    if (!level) return NULL;
    for (int b = 0; b < p->ngroups; b++) { /* launch order is topological */
        fc_group *gb = p->groups[b];
        for (int k = 0; k < gb->ninputs; k++) {
            fc_value *v = gb->inputs[k];
            int a = v->def ? p->group_of_node[v->def->id] : -1;
            if (a >= 0 && a != gb->id && level[a] + 1 > level[b]) level[b] = level[a] + 1;
        }
    }
    return level;
}

fc_status fc_pass_batch(fc_plan *p) {
    int n = p->ngroups;
    for (int i = 0; i < n; i++) p->groups[i]->batch = 0;
    int *level = group_levels(p);
    if (!level) return FC_ERR_NOMEM;
    /* Any level with two or more small pointwise groups? (A level is at
     * most the group count.) */
    int *small_at = calloc((size_t)n + 1, sizeof(int));
    if (!small_at) {
        free(level);
        return FC_ERR_NOMEM;
    }
    bool any = false;
    for (int a = 0; a < n; a++)
        if (is_small(p->groups[a]) && ++small_at[level[a]] >= 2) any = true;
    free(small_at);
    if (!any) {
        free(level);
        return FC_OK;
    }
    /* Order by level (a valid topological order), small pointwise groups
     * last within their level so each batch is contiguous. */
    fc_group **sorted = fc_arena_alloc(&p->arena, sizeof *sorted * (size_t)n);
    if (!sorted) {
        free(level);
        return FC_ERR_NOMEM;
    }
    /* A counting sort on (level, small), stable in launch order. */
    int *start = calloc(2 * (size_t)n + 2, sizeof(int));
    if (!start) {
        free(level);
        return FC_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) start[2 * level[i] + is_small(p->groups[i]) + 1]++;
    for (int k = 0; k < 2 * n + 1; k++) start[k + 1] += start[k];
    for (int i = 0; i < n; i++) sorted[start[2 * level[i] + is_small(p->groups[i])]++] = p->groups[i];
    free(start);
    free(level);
    p->groups = sorted;
    for (int q = 0; q < n; q++) {
        p->groups[q]->id = q;
        for (int k = 0; k < p->groups[q]->nnodes; k++) p->group_of_node[p->groups[q]->nodes[k]->id] = q;
    }
    level = group_levels(p);
    if (!level) return FC_ERR_NOMEM;
    for (int a = 0; a < n;) {
        fc_group *ga = p->groups[a];
        int b = a + 1, args = ga->ninputs + ga->noutputs;
        if (is_small(ga))
            while (b < n && b - a < BATCH_MAX_GROUPS && level[b] == level[a] && is_small(p->groups[b]) &&
                   args + p->groups[b]->ninputs + p->groups[b]->noutputs <= BATCH_MAX_ARGS) {
                args += p->groups[b]->ninputs + p->groups[b]->noutputs;
                b++;
            }
        if (b - a >= 2)
            for (int q = a; q < b; q++) p->groups[q]->batch = a + 1;
        a = b;
    }
    free(level);
    return FC_OK;
}


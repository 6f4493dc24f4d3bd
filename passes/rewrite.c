/* rewrite.c - graph-rewriting utilities shared by the passes: the rebuild
 * walk (rewrite.h explains it), replace-all-uses, use counts, compaction. */
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

/* Out of memory inside a pass: the context already holds the message (the
 * allocator wrote it); make the graph sticky-poisoned with it. */
static void nomem(fc_graph *g) {
    if (g->status == FC_OK) g->status = FC_ERR_NOMEM;
}

/* A malloc'd array of `elem`-byte entries grown to hold `need`, the new
 * part zeroed: the new pointer (and *cap updated), or NULL on out of
 * memory with the array unchanged. */
static void *grow_array(fc_graph *g, void *arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return arr;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    unsigned char *p = fc_ctx_realloc(g->ctx, arr, elem * (size_t)ncap);
    if (!p) {
        nomem(g);
        return NULL;
    }
    memset(p + elem * (size_t)*cap, 0, elem * (size_t)(ncap - *cap));
    *cap = ncap;
    return p;
}

bool fc_same_dims(const fc_value *a, const fc_value *b) {
    return a->rank == b->rank && (a->rank == 0 || !memcmp(a->dims, b->dims, sizeof(fc_dim) * (size_t)a->rank));
}

bool fc_same_type(const fc_value *a, const fc_value *b) { return a->dtype == b->dtype && fc_same_dims(a, b); }

/* ---- ids -------------------------------------------------------------- */

/* Dense ids: nodes by array position; values as the printer meets them
 * (params, then each node's weak operands and results). */
static void renumber(fc_graph *g) {
    int vid = 0;
    for (int i = 0; i < g->nparams; i++) g->params[i]->id = vid++;
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        n->id = i;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k]->weak) n->in[k]->id = vid++;
        for (int k = 0; k < n->nout; k++) n->out[k]->id = vid++;
    }
    g->next_value_id = vid;
    g->next_node_id = g->nnodes;
}

/* A node that left the graph: its results can no longer be looked up by id,
 * so a stale use of one fails the verifier instead of aliasing a live value
 * that inherits the id. */
static void retire(fc_node *n) {
    n->dead = true;
    for (int k = 0; k < n->nout; k++) n->out[k]->id = -1;
}

void fc_graph_compact(fc_graph *g) {
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) retire(n);
        else g->nodes[k++] = n;
    }
    g->nnodes = k;
    renumber(g);
}

/* ---- the rebuild ------------------------------------------------------ */

fc_status fc_rw_begin(fc_rewriter *rw, fc_graph *g) {
    memset(rw, 0, sizeof *rw);
    rw->g = g;
    if (g->status) return g->status;
    rw->old = fc_ctx_malloc(g->ctx, sizeof *rw->old * (size_t)(g->nnodes ? g->nnodes : 1));
    if (rw->old) rw->map = grow_array(g, NULL, &rw->cap_map, g->next_value_id + 1, sizeof *rw->map);
    if (!rw->old || !rw->map) {
        fc_ctx_freemem(g->ctx, rw->old);
        fc_ctx_freemem(g->ctx, rw->map);
        rw->old = NULL;
        rw->map = NULL;
        nomem(g);
        return g->status;
    }
    rw->nold = g->nnodes;
    if (rw->nold) memcpy(rw->old, g->nodes, sizeof *rw->old * (size_t)rw->nold);
    /* Every old node leaves the graph; fc_rw_keep brings it back. */
    for (int i = 0; i < rw->nold; i++) {
        if (rw->old[i]->dead) rw->old[i] = NULL; /* removed before: not revisited */
        else rw->old[i]->dead = true;
    }
    g->nnodes = 0;
    rw->saved_loc = g->cur_loc;
    rw->first_new_id = g->next_node_id;
    return FC_OK;
}

fc_node *fc_rw_next(fc_rewriter *rw) {
    if (rw->g->status) return NULL;
    while (rw->next < rw->nold) {
        fc_node *n = rw->old[rw->next++];
        if (!n) continue;
        rw->g->cur_loc = n->loc;
        return n;
    }
    return NULL;
}

fc_value *fc_rw_value(const fc_rewriter *rw, fc_value *v) {
    /* Chains end: fc_rw_replace only ever maps an unmapped value to an
     * unmapped value, so there are no cycles. */
    while (v && !v->weak && v->id >= 0 && v->id < rw->cap_map && rw->map[v->id]) v = rw->map[v->id];
    return v;
}

/* ---- covers: the source lines a replacement stands for ----------------- */

enum { COVER_NODES = 128, COVER_STOPS = 64, COVER_LINES = 256 };

static bool is_new(const fc_rewriter *rw, const fc_node *n) { return n->id >= rw->first_new_id; }

/* The old values the new node n reads, directly or through other new
 * nodes: where the pattern it replaced begins. */
static int cover_stops(const fc_rewriter *rw, const fc_node *n, const fc_value **st, int nst, int depth) {
    for (int k = 0; k < n->nin && nst >= 0; k++) {
        const fc_value *v = n->in[k];
        if (v->weak || !v->def) continue;
        if (!is_new(rw, v->def)) {
            if (nst == COVER_STOPS) return -1;
            st[nst++] = v;
        } else if (depth < 8) {
            nst = cover_stops(rw, v->def, st, nst, depth + 1);
        }
    }
    return nst;
}

static int cmp_line(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* to (new) replaces from (old): to covers the old nodes from which from is
 * computed back to to's operands. Constants (nodes without operands) are
 * shared across the graph and left out; a walk that runs past COVER_NODES
 * nodes has left the pattern, and to keeps its own line only. */
static bool cover(fc_rewriter *rw, fc_node *from, fc_node *to) {
    const fc_value *st[COVER_STOPS];
    const int nst = cover_stops(rw, to, st, 0, 0);
    if (nst < 0) return true;
    const fc_node *seen[COVER_NODES], *stack[COVER_NODES];
    int nseen = 0, nstack = 0, nlines = 0;
    stack[nstack++] = from;
    while (nstack > 0) {
        const fc_node *x = stack[--nstack];
        bool dup = false;
        for (int i = 0; i < nseen && !dup; i++) dup = seen[i] == x;
        if (dup) continue;
        if (nseen == COVER_NODES) return true;
        seen[nseen++] = x;
        nlines += 1 + x->ncover;
        for (int k = 0; k < x->nin; k++) {
            const fc_value *v = x->in[k];
            bool stop = v->weak || !v->def || is_new(rw, v->def) || v->def->nin == 0;
            for (int i = 0; i < nst && !stop; i++) stop = st[i] == v;
            if (stop) continue;
            if (nstack == COVER_NODES) return true;
            stack[nstack++] = v->def;
        }
    }
    nlines += to->ncover;
    int buf[COVER_LINES * 2];
    if (nlines > (int)(sizeof buf / sizeof *buf)) return true;
    int n = 0;
    for (int i = 0; i < to->ncover; i++) buf[n++] = to->cover[i];
    for (int i = 0; i < nseen; i++) {
        if (seen[i]->loc.line > 0) buf[n++] = seen[i]->loc.line;
        for (int k = 0; k < seen[i]->ncover; k++) buf[n++] = seen[i]->cover[k];
    }
    qsort(buf, (size_t)n, sizeof *buf, cmp_line);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (buf[i] != to->loc.line && (m == 0 || buf[i] != buf[m - 1])) buf[m++] = buf[i];
    if (m == 0 || m > COVER_LINES) return true;
    int *c = fc_arena_alloc(&rw->g->arena, sizeof *c * (size_t)m);
    if (!c) {
        nomem(rw->g);
        return false;
    }
    memcpy(c, buf, sizeof *c * (size_t)m);
    to->cover = c;
    to->ncover = m;
    return true;
}

bool fc_rw_replace(fc_rewriter *rw, fc_value *from, fc_value *to) {
    from = fc_rw_value(rw, from);
    to = fc_rw_value(rw, to);
    FC_ASSERT(from && to && !from->weak && !to->weak && from->id >= 0);
    FC_ASSERT(fc_same_type(from, to)); /* a pass never changes a value's type */
    if (from == to) return true;
    fc_value **map = grow_array(rw->g, rw->map, &rw->cap_map, from->id + 1, sizeof *map);
    if (!map) return false;
    rw->map = map;
    rw->map[from->id] = to;
    if (from->def && to->def && is_new(rw, to->def) && !is_new(rw, from->def)) return cover(rw, from->def, to->def);
    return true;
}

void fc_rw_remap(fc_rewriter *rw, fc_node *n) {
    for (int i = 0; i < n->nin; i++) n->in[i] = fc_rw_value(rw, n->in[i]);
}

bool fc_rw_keep(fc_rewriter *rw, fc_node *n) {
    fc_graph *g = rw->g;
    if (g->status) return false;
    FC_ASSERT(n->dead); /* kept twice, or not from this rebuild */
    fc_rw_remap(rw, n);
    if (!fc_grow(&g->arena, (void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes)) {
        nomem(g);
        return false;
    }
    g->nodes[g->nnodes++] = n;
    n->dead = false;
    return true;
}

fc_node *fc_rw_make(fc_rewriter *rw, fc_op op, fc_value *const *in, int nin, const fc_attrs *a) {
    fc_graph *g = rw->g;
    if (g->status) return NULL;
    fc_value *small[8], **ins = small;
    if (nin > 8 && !(ins = fc_ctx_malloc(g->ctx, sizeof *ins * (size_t)nin))) {
        nomem(g);
        return NULL;
    }
    for (int i = 0; i < nin; i++) ins[i] = fc_rw_value(rw, in[i]);
    /* A slot for the made node is reserved first, so that remembering it
     * cannot fail after fc_build succeeded. */
    fc_node *n = NULL, **made = grow_array(g, rw->made, &rw->cap_made, rw->nmade + 1, sizeof *made);
    if (made) {
        rw->made = made;
        n = fc_build(g, op, ins, nin, a);
    }
    if (ins != small) fc_ctx_freemem(g->ctx, ins);
    if (!n) return NULL;
    /* fc_build appended it; take it back out: the caller decides. */
    FC_ASSERT(g->nnodes > 0 && g->nodes[g->nnodes - 1] == n);
    g->nnodes--;
    n->dead = true;
    rw->made[rw->nmade++] = n;
    return n;
}

fc_node *fc_rw_build(fc_rewriter *rw, fc_op op, fc_value *const *in, int nin, const fc_attrs *a) {
    fc_node *n = fc_rw_make(rw, op, in, nin, a);
    return n && fc_rw_keep(rw, n) ? n : NULL;
}

fc_status fc_rw_end(fc_rewriter *rw) {
    fc_graph *g = rw->g;
    if (!g->status) {
        for (int i = 0; i < g->noutputs; i++) g->outputs[i] = fc_rw_value(rw, g->outputs[i]);
        for (int i = 0; i < rw->nold; i++)
            if (rw->old[i] && rw->old[i]->dead) retire(rw->old[i]);
        for (int i = 0; i < rw->nmade; i++)
            if (rw->made[i]->dead) retire(rw->made[i]);
        renumber(g);
    }
    g->cur_loc = rw->saved_loc;
    fc_ctx_freemem(g->ctx, rw->old);
    fc_ctx_freemem(g->ctx, rw->map);
    fc_ctx_freemem(g->ctx, rw->made);
    fc_status st = g->status;
    memset(rw, 0, sizeof *rw);
    return st;
}

/* ---- builders placed here ----------------------------------------------- */

fc_value *fc_rw_scalar(fc_rewriter *rw, double v, bool is_int) {
    fc_graph *g = rw->g;
    if (g->status) return NULL;
    fc_value *s = fc_scalar(g, v);
    if (g->status) return NULL;
    s->weak_int = is_int;
    return s;
}

static fc_value *first_result(fc_node *n) { return n ? n->out[0] : NULL; }

fc_value *fc_rw_op1(fc_rewriter *rw, fc_op op, fc_value *x) {
    if (!x) return NULL;
    return first_result(fc_rw_build(rw, op, &x, 1, NULL));
}

fc_value *fc_rw_op2(fc_rewriter *rw, fc_op op, fc_value *a, fc_value *b) {
    if (!a || !b) return NULL;
    fc_value *in[2] = {a, b};
    return first_result(fc_rw_build(rw, op, in, 2, NULL));
}

fc_value *fc_rw_op2s(fc_rewriter *rw, fc_op op, fc_value *a, double s) {
    if (!a) return NULL;
    return fc_rw_op2(rw, op, a, fc_rw_scalar(rw, s, false));
}

fc_value *fc_rw_cast(fc_rewriter *rw, fc_value *x, fc_dtype dt) {
    if (!x) return NULL;
    x = fc_rw_value(rw, x);
    if (x->dtype == dt) return x;
    fc_attrs a;
    fc_attrs_defaults(FC_OP_CAST, &a);
    a.dtype = dt;
    return first_result(fc_rw_build(rw, FC_OP_CAST, &x, 1, &a));
}

/* Attributes of op with `n` list entries copied in (the builder copies the
 * list into the arena; this only adapts the const-ness). */
static fc_attrs with_list(fc_op op, int n, const int64_t *list, int64_t *buf) {
    fc_attrs a;
    fc_attrs_defaults(op, &a);
    FC_ASSERT(n >= 0 && n <= FC_MAX_RANK);
    if (n) memcpy(buf, list, sizeof(int64_t) * (size_t)n);
    a.list = buf;
    a.nlist = n;
    return a;
}

fc_value *fc_rw_reduce(fc_rewriter *rw, fc_op op, fc_value *x, int naxes, const int64_t *axes, bool keepdim) {
    if (!x) return NULL;
    int64_t buf[FC_MAX_RANK];
    fc_attrs a = with_list(op, naxes, axes, buf);
    a.keepdim = keepdim;
    return first_result(fc_rw_build(rw, op, &x, 1, &a));
}

fc_value *fc_rw_reshape(fc_rewriter *rw, fc_value *x, int rank, const fc_dim *shape) {
    if (!x) return NULL;
    int64_t buf[FC_MAX_RANK];
    fc_attrs a = with_list(FC_OP_RESHAPE, rank, shape, buf);
    return first_result(fc_rw_build(rw, FC_OP_RESHAPE, &x, 1, &a));
}

/* ---- helpers outside a rebuild ------------------------------------------ */

fc_status fc_pass_precheck(fc_graph *g, const char *pass) {
    if (!g) return FC_ERR_USAGE;
    if (g->status) return g->status;
    if (!g->returned)
        return fc_set_error(g->ctx, FC_ERR_USAGE, "%s: graph '%s' has no results (fc_graph_return was not called)", pass,
                            g->name);
    return FC_OK;
}

void fc_replace_all_uses(fc_graph *g, fc_value *from, fc_value *to) {
    FC_ASSERT(fc_same_type(from, to));
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        for (int k = 0; !n->dead && k < n->nin; k++)
            if (n->in[k] == from) n->in[k] = to;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == from) g->outputs[i] = to;
}

int *fc_use_counts(fc_graph *g) {
    int *uses = fc_ctx_malloc(g->ctx, sizeof *uses * (size_t)(g->next_value_id + 1));
    if (!uses) {
        nomem(g);
        return NULL;
    }
    memset(uses, 0, sizeof *uses * (size_t)(g->next_value_id + 1));
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        for (int k = 0; !n->dead && k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (!v->weak && v->id >= 0 && v->id < g->next_value_id) uses[v->id]++;
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        fc_value *v = g->outputs[i];
        if (v->id >= 0 && v->id < g->next_value_id) uses[v->id]++;
    }
    return uses;
}

fc_status fc_rw_lower_nodes(fc_graph *g, fc_rw_lower_fn lower, void *arg) {
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) return g->status;
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        fc_value *y = lower(&rw, n, arg);
        if (!y) {
            fc_rw_keep(&rw, n);
            continue;
        }
        y = fc_rw_cast(&rw, y, n->out[0]->dtype);
        if (y) fc_rw_replace(&rw, n->out[0], y);
    }
    return fc_rw_end(&rw);
}

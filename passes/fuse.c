/* fuse.c - vertical and horizontal fusion: nodes become kernel groups.
 *
 * Vertical fusion walks the graph from its results back to its inputs
 * (consumers first). A node joins the group of its consumers when every
 * consumer is in one group and the group's iteration space can compute it:
 *
 *  - a POINTWISE group computes any elementwise, broadcast or view node by
 *    index arithmetic (views never become copies);
 *  - a reduction whose consumers are all in one group over the reduction's
 *    input space turns that group into a REDUCE group (rows x reduced
 *    elements), which can hold several reductions in sequence (softmax's max
 *    then sum, layernorm's mean then variance) and the ops that need both the
 *    reduced value and the original row;
 *  - a node used by several groups starts a group of its own and its result
 *    is stored, except views and creation ops, which are recomputed inside
 *    every consumer (they cost index arithmetic only).
 *
 * Because a node only joins when all its users are already in the group,
 * every node of a group feeds only that group: vertical fusion cannot make
 * a cycle. Horizontal fusion merges sibling groups (same space, a shared
 * input) and checks group reachability first, so it cannot either.
 *
 * Cost rules: a group never grows past max_group_nodes (registers), and an
 * expensive op (a transcendental) that is read through a view is stored
 * rather than recomputed at several indices.
 */
#include "passes.h"
#include "attention.h"

#include <stdlib.h>
#include <string.h>

#define MULTI (-2) /* inlined into every group that uses it */

void fc_fuse_options_default(fc_fuse_options *o) {
    o->vertical = true;
    o->horizontal = true;
    o->max_group_nodes = 256;
    o->attention_in_place = true;
    o->dynamic = false;
}

int64_t fc_value_bytes(const fc_value *v) { return fc_value_bytes_at(v, NULL); }

int64_t fc_value_bytes_at(const fc_value *v, const int64_t *sym_values) {
    int64_t n = (int64_t)fc_dtype_size(v->dtype);
    for (int i = 0; i < v->rank; i++) {
        int64_t d = sym_values ? fc_dim_value(v->dims[i], sym_values) : v->dims[i];
        if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
        n *= d;
    }
    return n;
}

static bool is_expensive(fc_op op) {
    switch (op) {
    case FC_OP_EXP: case FC_OP_LOG: case FC_OP_SIN: case FC_OP_COS: case FC_OP_TANH: case FC_OP_SIGMOID:
    case FC_OP_GELU: case FC_OP_GELU_TANH: case FC_OP_SILU: case FC_OP_ERF: case FC_OP_POW:
        return true;
    default: return false;
    }
}

/* ---- use lists --------------------------------------------------------- */

typedef struct uses {
    int *start; /* per value id: index into list */
    int *count;
    fc_node **list;
} uses;

static bool build_uses(fc_graph *g, uses *u) {
    int nv = g->next_value_id;
    u->start = calloc((size_t)nv + 1, sizeof(int));
    u->count = calloc((size_t)nv + 1, sizeof(int));
    int total = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead) total += g->nodes[i]->nin;
    u->list = calloc((size_t)total + 1, sizeof(fc_node *));
    if (!u->start || !u->count || !u->list) return false;
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->nin; k++)
            if (!n->in[k]->weak) u->count[n->in[k]->id]++;
    }
    int pos = 0;
    for (int v = 0; v < nv; v++) {
        u->start[v] = pos;
        pos += u->count[v];
        u->count[v] = 0;
    }
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (v->weak) continue;
            /* one entry per (user, value) even if used twice */
            bool dup = false;
            for (int j = 0; j < u->count[v->id]; j++)
                if (u->list[u->start[v->id] + j] == n) dup = true;
            if (!dup) u->list[u->start[v->id] + u->count[v->id]++] = n;
        }
    }
    return true;
}

static void free_uses(uses *u) {
    free(u->start);
    free(u->count);
    free(u->list);
}

/* ---- groups -------------------------------------------------------------- */

typedef struct fuse_state {
    fc_graph *g;
    fc_plan *plan;
    const fc_fuse_options *o;
    uses u;
    bool *is_output; /* per value id */
} fuse_state;

#define BATCH_MAX_ELEMS (1 << 16) /* "small": a few waves of one SM at most */
#define BATCH_MAX_GROUPS 16

static fc_group *new_group(fuse_state *s, fc_group_kind kind) {
    fc_plan *p = s->plan;
    if (!fc_grow(&p->arena, (void **)&p->groups, &p->cap_groups, p->ngroups + 1, sizeof *p->groups)) return NULL;
    fc_group *gr = fc_arena_alloc(&p->arena, sizeof *gr);
    if (!gr) return NULL;
    gr->id = p->ngroups;
    gr->kind = kind;
    p->groups[p->ngroups++] = gr;
    return gr;
}

static bool add_node(fuse_state *s, fc_group *gr, fc_node *n) {
    if (!fc_grow(&s->plan->arena, (void **)&gr->nodes, &gr->cap_nodes, gr->nnodes + 1, sizeof *gr->nodes)) return false;
    gr->nodes[gr->nnodes++] = n;
    s->plan->group_of_node[n->id] = gr->id;
    return true;
}

static void set_space(fc_group *gr, const fc_value *v) {
    gr->rank = v->rank;
    for (int i = 0; i < v->rank; i++) gr->space[i] = v->dims[i];
}

static bool same_shape(const fc_value *v, int rank, const int64_t *dims) {
    if (v->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (v->dims[i] != dims[i]) return false;
    return true;
}

fc_mono fc_group_space_mono(const fc_group *gr) { return fc_mono_of(gr->space, gr->rank); }

fc_mono fc_group_rows_mono(const fc_group *gr) {
    fc_mono m = fc_mono_one();
    for (int d = 0; d < gr->rank; d++)
        if (!gr->reduced[d]) fc_mono_mul_dim(&m, gr->space[d]);
    return m;
}

fc_mono fc_group_row_len_mono(const fc_group *gr) {
    fc_mono m = fc_mono_one();
    for (int d = 0; d < gr->rank; d++)
        if (gr->reduced[d]) fc_mono_mul_dim(&m, gr->space[d]);
    return m;
}

/* A value of a REDUCE group is ROW level when it holds one element per row
 * in the kept dims' order: its shape is the space with the reduced dims
 * removed or set to 1. */
bool fc_group_is_row_shape(const fc_group *gr, const fc_value *v) {
    int j = 0;
    for (int d = 0; d < gr->rank; d++) {
        if (gr->reduced[d]) {
            if (j < v->rank && v->rank == gr->rank && v->dims[j] == 1) j++;
            continue;
        }
        while (j < v->rank && v->dims[j] == 1 && gr->space[d] != 1) j++;
        if (j >= v->rank || v->dims[j] != gr->space[d]) return false;
        j++;
    }
    while (j < v->rank && v->dims[j] == 1) j++;
    return j == v->rank;
}

void fc_group_mark_rows(const fc_plan *p, const fc_group *gr, bool *is_row,
                        bool (*row_shape)(const fc_group *gr, const fc_value *v)) {
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *n = gr->nodes[i];
        if (fc_op_is_reduce(n->op)) {
            is_row[n->out[0]->id] = true;
            continue;
        }
        if (n->nout != 1) continue;
        bool dep = false, other = false;
        for (int j = 0; j < n->nin; j++) {
            const fc_value *x = n->in[j];
            if (x->weak) continue;
            if (is_row[x->id]) dep = true;
            else if (x->def && p->group_of_node[x->def->id] == gr->id) other = true;
        }
        if (dep && !other && row_shape(gr, n->out[0])) is_row[n->out[0]->id] = true;
    }
}

/* Does reading operand v, broadcast (NumPy, right-aligned) into the group's
 * full space, give one value per row, the row's own? Every reduced dim is 1
 * (or absent) in v and every kept dim matches (a size-1 kept dim of the
 * space may be absent). */
bool fc_group_row_broadcast(const fc_group *gr, const fc_value *v) {
    if (v->rank > gr->rank) return false;
    int off = gr->rank - v->rank;
    for (int d = 0; d < gr->rank; d++) {
        int64_t vd = d < off ? 1 : v->dims[d - off];
        if (gr->reduced[d] ? vd != 1 : (vd != gr->space[d] && gr->space[d] != 1)) return false;
        if (!gr->reduced[d] && d < off && gr->space[d] != 1) return false;
    }
    return true;
}

static bool is_full(const fc_group *gr, const fc_value *v) { return same_shape(v, gr->rank, gr->space); }

/* Reduction axes of node n as a mask over its input's dims. */
static void reduce_mask(const fc_node *n, bool *mask) {
    const fc_value *x = n->in[0];
    memset(mask, 0, sizeof(bool) * FC_MAX_RANK);
    if (n->a.nlist == 0)
        for (int i = 0; i < x->rank; i++) mask[i] = true;
    for (int i = 0; i < n->a.nlist; i++) {
        int64_t a = n->a.list[i] < 0 ? n->a.list[i] + x->rank : n->a.list[i];
        mask[a] = true;
    }
}

static void make_reduce(fc_group *gr, const fc_node *r) {
    gr->kind = FC_GROUP_REDUCE;
    set_space(gr, r->in[0]);
    reduce_mask(r, gr->reduced);
    /* Products of atoms: -1 where a symbol makes them unknown (dynamic). */
    fc_mono rows = fc_group_rows_mono(gr), len = fc_group_row_len_mono(gr);
    gr->rows = fc_mono_is_static(&rows) ? rows.c : -1;
    gr->row_len = fc_mono_is_static(&len) ? len.c : -1;
}

/* The single group of all users of n's results, or -1 (none, several, or a
 * user that is inlined everywhere). */
static int users_group(fuse_state *s, fc_node *n) {
    int grp = -1;
    for (int k = 0; k < n->nout; k++) {
        fc_value *v = n->out[k];
        for (int j = 0; j < s->u.count[v->id]; j++) {
            int ug = s->plan->group_of_node[s->u.list[s->u.start[v->id] + j]->id];
            if (ug < 0) return -1;
            if (grp >= 0 && ug != grp) return -1;
            grp = ug;
        }
    }
    return grp;
}

static bool any_output(fuse_state *s, fc_node *n) {
    for (int k = 0; k < n->nout; k++)
        if (s->is_output[n->out[k]->id]) return true;
    return false;
}

static bool has_users(fuse_state *s, fc_node *n) {
    for (int k = 0; k < n->nout; k++)
        if (s->u.count[n->out[k]->id]) return true;
    return false;
}

/* Can elementwise/view node n be computed inside group gr? */
static bool fits(fuse_state *s, fc_group *gr, fc_node *n) {
    if (gr->kind == FC_GROUP_LIBRARY || gr->kind == FC_GROUP_ATTENTION) return false;
    if (gr->nnodes >= s->o->max_group_nodes) return false;
    bool out = any_output(s, n);
    if (gr->kind == FC_GROUP_POINTWISE) {
        /* A stored result is written at the iteration index. */
        return !out || (n->nout == 1 && is_full(gr, n->out[0]));
    }
    /* REDUCE group: FULL-level values are computed per element, ROW-level
     * ones once per row; a view of outside data may be read at any index,
     * but must not depend on the group's reductions (checked when the
     * reduction itself joins). Stored results must be FULL or ROW. */
    if (n->nout != 1) return !out;
    fc_value *v = n->out[0];
    if (is_full(gr, v) || fc_group_is_row_shape(gr, v)) return true;
    return !out;
}

/* Does a view that is computed in group gr (a member, or a view inlined
 * everywhere) read v, directly or through members of gr? A reshape between
 * per-row shapes keeps the row and is allowed. gr is the group as it would
 * be with the reduction (a REDUCE group). */
static bool view_downstream(fuse_state *s, fc_group *gr, fc_value *v, int depth) {
    if (depth > 256) return true; /* be safe on absurdly deep chains */
    for (int j = 0; j < s->u.count[v->id]; j++) {
        fc_node *u = s->u.list[s->u.start[v->id] + j];
        int ug = s->plan->group_of_node[u->id];
        if (ug != gr->id && ug != MULTI) continue;
        if (fc_op_is_view(u->op)) {
            bool row_reshape = u->op == FC_OP_RESHAPE && fc_group_is_row_shape(gr, u->out[0]) && fc_group_is_row_shape(gr, v);
            if (!row_reshape || ug == MULTI) return true;
        }
        for (int k = 0; k < u->nout; k++)
            if (view_downstream(s, gr, u->out[k], depth + 1)) return true;
    }
    return false;
}

/* Can reduction r join group gr (its only consumer group)? */
static bool reduction_fits(fuse_state *s, fc_group *gr, fc_node *r) {
    if (gr->kind == FC_GROUP_LIBRARY || gr->kind == FC_GROUP_ATTENTION || gr->nnodes >= s->o->max_group_nodes) return false;
    bool mask[FC_MAX_RANK];
    reduce_mask(r, mask);
    if (!is_full(gr, r->in[0]) && gr->kind == FC_GROUP_REDUCE) return false;
    if (gr->kind == FC_GROUP_POINTWISE && !same_shape(r->in[0], gr->rank, gr->space)) return false;
    if (gr->kind == FC_GROUP_REDUCE && memcmp(mask, gr->reduced, sizeof(bool) * (size_t)gr->rank) != 0) return false;
    /* As the group would be after the merge: */
    fc_group trial = *gr;
    make_reduce(&trial, r);
    if (any_output(s, r) && !fc_group_is_row_shape(&trial, r->out[0])) return false;
    /* Every user must read the reduced value once per row: an elementwise
     * op that broadcasts it over the row (FULL result) or that works on
     * row values (ROW result), or a reshape between row shapes. */
    fc_value *v = r->out[0];
    for (int j = 0; j < s->u.count[v->id]; j++) {
        fc_node *u = s->u.list[s->u.start[v->id] + j];
        fc_value *uo = u->out[0];
        if (u->op == FC_OP_RESHAPE && fc_group_is_row_shape(&trial, uo)) continue;
        if (!fc_op_is_elementwise(u->op)) return false;
        if (fc_group_is_row_shape(&trial, uo)) continue; /* its element count is the row count */
        if (is_full(&trial, uo) && fc_group_row_broadcast(&trial, v)) continue;
        return false;
    }
    /* No view in the group may read the reduced value, directly or through
     * other members: a view reads its operand at another index, possibly in
     * another row, and a reduced value exists only for the current row
     * (permute(softmax(x)) must store the softmax first). */
    if (view_downstream(s, &trial, v, 0)) return false;
    return true;
}

/* Stored values, as the attention view walk asks: graph results, params,
 * and anything that is not a view (its group writes it). A view that ends
 * up stored anyway (read by a library call, say) only shortens the chain
 * codegen walks. */
static bool stored_for_attention(const fc_value *v, void *arg) {
    fuse_state *s = arg;
    return s->is_output[v->id] || !v->def || !fc_op_is_view(v->def->op);
}

/* Is group gr (all the consumers of attention n) a chain of permute/reshape
 * ops from n's result to one stored value, which the kernel can write
 * through strides? Then n joins it, and no copy kernel runs. */
static bool attention_output_chain(fuse_state *s, fc_group *gr, fc_node *n) {
    if (gr->kind != FC_GROUP_POINTWISE || any_output(s, n)) return false;
    fc_value *v = n->out[0];
    int len = 0;
    while (!s->is_output[v->id] && s->u.count[v->id] == 1) {
        fc_node *u = s->u.list[s->u.start[v->id]];
        if (s->plan->group_of_node[u->id] != gr->id) break;
        if (u->op != FC_OP_PERMUTE && u->op != FC_OP_RESHAPE) return false;
        v = u->out[0];
        len++;
    }
    int64_t st[FC_MAX_RANK];
    return len > 0 && len == gr->nnodes && fc_attention_output_strides(n->out[0], v, st);
}

static fc_status vertical(fuse_state *s) {
    fc_graph *g = s->g;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        if (!has_users(s, n) && !any_output(s, n)) continue; /* dead: DCE's job */
        int ug = s->o->vertical ? users_group(s, n) : -1;
        fc_group *target = ug >= 0 ? s->plan->groups[ug] : NULL;

        if (n->op == FC_OP_ATTENTION && s->o->attention_in_place) {
            fc_group *gr = target && attention_output_chain(s, target, n) ? target : new_group(s, FC_GROUP_ATTENTION);
            if (!gr) return FC_ERR_NOMEM;
            gr->kind = FC_GROUP_ATTENTION;
            if (!add_node(s, gr, n)) return FC_ERR_NOMEM;
            continue;
        }
        /* Every reduction, reduce_mean too: decompose leaves that composite
         * only over a symbolic dim (dynamic plans), and its kernel divides by
         * the row length. */
        if (fc_op_is_reduce(n->op)) {
            if (target && reduction_fits(s, target, n)) {
                if (target->kind == FC_GROUP_POINTWISE) make_reduce(target, n);
                if (!add_node(s, target, n)) return FC_ERR_NOMEM;
            } else {
                fc_group *gr = new_group(s, FC_GROUP_REDUCE);
                if (!gr) return FC_ERR_NOMEM;
                make_reduce(gr, n);
                if (!add_node(s, gr, n)) return FC_ERR_NOMEM;
            }
            continue;
        }
        if (fc_op_table[n->op].kind == FC_KIND_OPAQUE || fc_op_table[n->op].kind == FC_KIND_COMPOSITE) {
            fc_group *gr = new_group(s, FC_GROUP_LIBRARY);
            if (!gr || !add_node(s, gr, n)) return FC_ERR_NOMEM;
            continue;
        }
        /* Elementwise, broadcast or view. */
        bool expensive_through_view = false;
        if (is_expensive(n->op))
            for (int j = 0; j < s->u.count[n->out[0]->id]; j++)
                if (fc_op_is_view(s->u.list[s->u.start[n->out[0]->id] + j]->op)) expensive_through_view = true;
        if (target && !expensive_through_view && fits(s, target, n)) {
            if (!add_node(s, target, n)) return FC_ERR_NOMEM;
            continue;
        }
        bool library_user = false;
        for (int j = 0; j < s->u.count[n->out[0]->id]; j++) {
            fc_node *u = s->u.list[s->u.start[n->out[0]->id] + j];
            int ugr = s->plan->group_of_node[u->id];
            if (ugr >= 0 && s->plan->groups[ugr]->kind == FC_GROUP_LIBRARY) library_user = true;
            /* An attention kernel reads a view in place when strides can
             * express the whole chain down to what is stored. */
            fc_strided_view view;
            if (ugr >= 0 && s->plan->groups[ugr]->kind == FC_GROUP_ATTENTION &&
                !(u->op == FC_OP_ATTENTION && fc_attention_view(n->out[0], stored_for_attention, s, &view)))
                library_user = true;
        }
        /* A library call needs its operands in memory: a view it reads is
         * stored (a copy kernel), everything else is recomputed. */
        if (fc_op_is_view(n->op) && !any_output(s, n) && !library_user && s->o->vertical) {
            s->plan->group_of_node[n->id] = MULTI;
            continue;
        }
        fc_group *gr = new_group(s, FC_GROUP_POINTWISE);
        if (!gr) return FC_ERR_NOMEM;
        set_space(gr, n->out[0]);
        if (n->op == FC_OP_SPLIT) {
            /* A split's results have different shapes; its group iterates
             * over the input and stores every piece (views would be better,
             * but a stored split is rare: splits are normally inlined). */
            set_space(gr, n->in[0]);
        }
        if (!add_node(s, gr, n)) return FC_ERR_NOMEM;
    }
    return FC_OK;
}

/* Groups were created consumers-first; put each group's nodes back in
 * topological order and the groups in launch order (by their first node's
 * position, then fixed up by fc_pass_schedule). */
static int cmp_node(const void *a, const void *b) {
    const fc_node *x = *(fc_node *const *)a, *y = *(fc_node *const *)b;
    return (x->id > y->id) - (x->id < y->id);
}

/* ---- inputs, outputs and group dependencies ------------------------------ */

static bool push_value(fc_arena *ar, fc_value ***arr, int *n, int *cap, fc_value *v) {
    for (int i = 0; i < *n; i++)
        if ((*arr)[i] == v) return true;
    if (!fc_grow(ar, (void **)arr, cap, *n + 1, sizeof **arr)) return false;
    (*arr)[(*n)++] = v;
    return true;
}

/* Is value v computed inside group gid (by a member or an inlined view)? */
static bool computed_in(const fc_plan *p, const fc_value *v, int gid) {
    if (!v->def) return false;
    int og = p->group_of_node[v->def->id];
    return og == gid || og == MULTI;
}

/* Collect the stored values a group reads, following inlined views. */
static bool collect_inputs(fc_plan *p, fc_group *gr, fc_node *n, int *cap_in, bool *seen) {
    for (int k = 0; k < n->nin; k++) {
        fc_value *v = n->in[k];
        if (v->weak) continue;
        if (computed_in(p, v, gr->id) && p->group_of_node[v->def->id] == MULTI) {
            if (seen[v->def->id]) continue;
            seen[v->def->id] = true;
            if (!collect_inputs(p, gr, v->def, cap_in, seen)) return false;
        } else if (!computed_in(p, v, gr->id)) {
            if (!push_value(&p->arena, &gr->inputs, &gr->ninputs, cap_in, v)) return false;
        }
    }
    return true;
}

static fc_status compute_io(fuse_state *s) {
    fc_plan *p = s->plan;
    fc_graph *g = s->g;
    bool *seen = calloc((size_t)g->next_node_id + 1, sizeof(bool));
    if (!seen) return FC_ERR_NOMEM;
    for (int i = 0; i < p->ngroups; i++) {
        fc_group *gr = p->groups[i];
        gr->ninputs = gr->noutputs = 0;
        gr->inputs = gr->outputs = NULL;
        int cap_in = 0, cap_out = 0;
        memset(seen, 0, sizeof(bool) * ((size_t)g->next_node_id + 1));
        for (int k = 0; k < gr->nnodes; k++)
            if (!collect_inputs(p, gr, gr->nodes[k], &cap_in, seen)) goto oom;
        for (int k = 0; k < gr->nnodes; k++) {
            fc_node *n = gr->nodes[k];
            for (int o = 0; o < n->nout; o++) {
                fc_value *v = n->out[o];
                bool stored = s->is_output[v->id];
                for (int j = 0; j < s->u.count[v->id] && !stored; j++)
                    if (p->group_of_node[s->u.list[s->u.start[v->id] + j]->id] != gr->id) stored = true;
                if (stored && !push_value(&p->arena, &gr->outputs, &gr->noutputs, &cap_out, v)) goto oom;
            }
        }
    }
    free(seen);
    return FC_OK;
oom:
    free(seen);
    return FC_ERR_NOMEM;
}

/* reach[a][b]: group b depends (transitively) on group a. */
static bool *reachability(fc_plan *p) {
    int n = p->ngroups;
    bool *r = calloc((size_t)n * (size_t)n + 1, sizeof(bool));
    if (!r) return NULL;
    /* Groups are in topological order here, and fc_pass_schedule made each
     * group's id its position. */
    for (int b = 0; b < n; b++) {
        fc_group *gb = p->groups[b];
        for (int k = 0; k < gb->ninputs; k++) {
            fc_value *v = gb->inputs[k];
            if (!v->def) continue;
            int a = p->group_of_node[v->def->id];
            if (a < 0) continue;
            FC_ASSERT(p->groups[a]->id == a);
            r[(size_t)a * (size_t)n + (size_t)b] = true;
            for (int q = 0; q < n; q++)
                if (r[(size_t)q * (size_t)n + (size_t)a]) r[(size_t)q * (size_t)n + (size_t)b] = true;
        }
    }
    return r;
}

static bool shares_input(const fc_group *a, const fc_group *b) {
    for (int i = 0; i < a->ninputs; i++)
        for (int j = 0; j < b->ninputs; j++)
            if (a->inputs[i] == b->inputs[j]) return true;
    return false;
}

static bool same_space(const fc_group *a, const fc_group *b) {
    if (a->kind != b->kind || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->space[i] != b->space[i] || (a->kind == FC_GROUP_REDUCE && a->reduced[i] != b->reduced[i])) return false;
    return true;
}

/* Horizontal fusion: siblings that read one input over one space become
 * one multi-output kernel. */
static fc_status horizontal(fuse_state *s) {
    fc_plan *p = s->plan;
    for (;;) {
        fc_status st = fc_pass_schedule(p);
        if (st) return st;
        bool *reach = reachability(p);
        if (!reach) return FC_ERR_NOMEM;
        int n = p->ngroups, ma = -1, mb = -1;
        for (int a = 0; a < n && ma < 0; a++)
            for (int b = a + 1; b < n && ma < 0; b++) {
                fc_group *ga = p->groups[a], *gb = p->groups[b];
                if (ga->kind == FC_GROUP_LIBRARY || ga->kind == FC_GROUP_ATTENTION || !same_space(ga, gb) ||
                    !shares_input(ga, gb))
                    continue;
                if (reach[(size_t)a * (size_t)n + (size_t)b] || reach[(size_t)b * (size_t)n + (size_t)a]) continue;
                if (ga->nnodes + gb->nnodes > s->o->max_group_nodes) continue;
                ma = a;
                mb = b;
            }
        free(reach);
        if (ma < 0) return FC_OK;
        fc_group *ga = p->groups[ma], *gb = p->groups[mb];
        for (int k = 0; k < gb->nnodes; k++)
            if (!add_node(s, ga, gb->nodes[k])) return FC_ERR_NOMEM;
        qsort(ga->nodes, (size_t)ga->nnodes, sizeof *ga->nodes, cmp_node);
        memmove(&p->groups[mb], &p->groups[mb + 1], sizeof *p->groups * (size_t)(p->ngroups - mb - 1));
        p->ngroups--;
        /* renumber */
        for (int q = 0; q < p->ngroups; q++) {
            fc_group *gq = p->groups[q];
            gq->id = q;
            for (int k = 0; k < gq->nnodes; k++) p->group_of_node[gq->nodes[k]->id] = q;
        }
        st = compute_io(s);
        if (st) return st;
    }
}

fc_status fc_pass_schedule(fc_plan *p) {
    /* Kahn's algorithm over group dependencies, ties broken by the first
     * node's position so the order is deterministic. */
    int n = p->ngroups;
    int *indeg = calloc((size_t)n + 1, sizeof(int));
    int *order = calloc((size_t)n + 1, sizeof(int));
    bool *done = calloc((size_t)n + 1, sizeof(bool));
    bool *dep = calloc((size_t)n * (size_t)n + 1, sizeof(bool));
    if (!indeg || !order || !done || !dep) {
        free(indeg); free(order); free(done); free(dep);
        return FC_ERR_NOMEM;
    }
    for (int b = 0; b < n; b++) {
        fc_group *gb = p->groups[b];
        for (int k = 0; k < gb->ninputs; k++) {
            fc_value *v = gb->inputs[k];
            if (!v->def) continue;
            int a = p->group_of_node[v->def->id];
            if (a >= 0 && a != gb->id && !dep[(size_t)a * (size_t)n + (size_t)gb->id]) {
                dep[(size_t)a * (size_t)n + (size_t)gb->id] = true;
                indeg[gb->id]++;
            }
        }
    }
    int count = 0;
    while (count < n) {
        int best = -1;
        for (int q = 0; q < n; q++) {
            fc_group *gq = p->groups[q];
            if (done[gq->id] || indeg[gq->id]) continue;
            if (best < 0 || gq->nodes[0]->id < p->groups[best]->nodes[0]->id) best = q;
        }
        FC_ASSERT(best >= 0); /* fusion never makes a cycle */
        int id = p->groups[best]->id;
        done[id] = true;
        order[count++] = best;
        for (int b = 0; b < n; b++)
            if (dep[(size_t)id * (size_t)n + (size_t)b]) indeg[b]--;
    }
    fc_group **sorted = fc_arena_alloc(&p->arena, sizeof *sorted * (size_t)(n ? n : 1));
    if (!sorted) {
        free(indeg); free(order); free(done); free(dep);
        return FC_ERR_NOMEM;
    }
    for (int q = 0; q < n; q++) sorted[q] = p->groups[order[q]];
    p->groups = sorted;
    p->cap_groups = n;
    for (int q = 0; q < n; q++) {
        p->groups[q]->id = q;
        for (int k = 0; k < p->groups[q]->nnodes; k++) p->group_of_node[p->groups[q]->nodes[k]->id] = q;
    }
    free(indeg); free(order); free(done); free(dep);
    return FC_OK;
}

fc_status fc_pass_fuse(fc_graph *g, const fc_fuse_options *o, fc_plan *plan) {
    fc_fuse_options defaults;
    if (!o) {
        fc_fuse_options_default(&defaults);
        o = &defaults;
    }
    memset(plan, 0, sizeof *plan);
    plan->g = g;
    fc_arena_init(&plan->arena, g->ctx);
    plan->dynamic = o->dynamic;
    if (!o->dynamic) {
        fc_status check = fc_graph_check_static(g);
        if (check != FC_OK) return check;
    } else if (g->nsyms > FC_DYN_MAX_SYMS) {
        return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "fusion: graph %s has %d symbols; a dynamic program takes at most %d",
                            g->name, g->nsyms, FC_DYN_MAX_SYMS);
    }
    plan->group_of_node = fc_arena_alloc(&plan->arena, sizeof(int) * ((size_t)g->next_node_id + 1));
    if (!plan->group_of_node) return FC_ERR_NOMEM;
    for (int i = 0; i <= g->next_node_id; i++) plan->group_of_node[i] = -1;

    fuse_state s = {.g = g, .plan = plan, .o = o};
    s.is_output = calloc((size_t)g->next_value_id + 1, sizeof(bool));
    if (!s.is_output || !build_uses(g, &s.u)) {
        free(s.is_output);
        free_uses(&s.u);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (fusion)");
    }
    for (int i = 0; i < g->noutputs; i++) s.is_output[g->outputs[i]->id] = true;

    fc_status st = vertical(&s);
    for (int i = 0; !st && i < plan->ngroups; i++)
        qsort(plan->groups[i]->nodes, (size_t)plan->groups[i]->nnodes, sizeof(fc_node *), cmp_node);
    if (!st) st = compute_io(&s);
    if (!st) st = fc_pass_schedule(plan);
    if (!st && o->horizontal) st = horizontal(&s);
    if (!st) st = compute_io(&s);
    if (!st) st = fc_pass_schedule(plan);
    free(s.is_output);
    free_uses(&s.u);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (fusion)");
    return st;
}

/* Elements of a group's space; a symbolic space is never small (its size
 * is not known when the batch is made). */
static int64_t space_elems(const fc_group *gr) {
    fc_mono m = fc_group_space_mono(gr);
    return fc_mono_is_static(&m) ? m.c : INT64_MAX;
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
    /* Any level with two or more small pointwise groups? */
    bool any = false;
    for (int a = 0; a < n && !any; a++)
        for (int b = a + 1; b < n && !any; b++)
            any = level[a] == level[b] && p->groups[a]->kind == FC_GROUP_POINTWISE &&
                  p->groups[b]->kind == FC_GROUP_POINTWISE && space_elems(p->groups[a]) <= BATCH_MAX_ELEMS &&
                  space_elems(p->groups[b]) <= BATCH_MAX_ELEMS;
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
    int m = 0, maxlevel = 0;
    for (int i = 0; i < n; i++)
        if (level[i] > maxlevel) maxlevel = level[i];
    for (int lv = 0; lv <= maxlevel; lv++)
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++) {
                fc_group *gr = p->groups[i];
                bool small = gr->kind == FC_GROUP_POINTWISE && space_elems(gr) <= BATCH_MAX_ELEMS;
                if (level[i] == lv && small == (pass == 1)) sorted[m++] = gr;
            }
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
        int b = a + 1;
        if (ga->kind == FC_GROUP_POINTWISE && space_elems(ga) <= BATCH_MAX_ELEMS)
            while (b < n && b - a < BATCH_MAX_GROUPS && level[b] == level[a] && p->groups[b]->kind == FC_GROUP_POINTWISE &&
                   space_elems(p->groups[b]) <= BATCH_MAX_ELEMS)
                b++;
        if (b - a >= 2)
            for (int q = a; q < b; q++) p->groups[q]->batch = a + 1;
        a = b;
    }
    free(level);
    return FC_OK;
}

void fc_plan_release(fc_plan *plan) {
    if (!plan) return;
    fc_graph *owned = plan->owned_graph;
    fc_arena_release(&plan->arena);
    fc_graph_free(owned);
    memset(plan, 0, sizeof *plan);
}

fc_status fc_pipeline(fc_graph *g, const fc_fuse_options *o, fc_plan *plan) {
    fc_status st;
    memset(plan, 0, sizeof *plan);
    bool dynamic = o && o->dynamic;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_canonicalize(g))) return st;
    if (dynamic && (st = fc_pass_lower_attention(g))) return st;
    if ((st = dynamic ? fc_pass_decompose_dynamic(g) : fc_pass_decompose(g))) return st;
    if ((st = fc_pass_canonicalize(g))) return st;
    if (!dynamic && (st = fc_pass_attention(g))) return st;
    if ((st = fc_pass_epilogue(g))) return st;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_fuse(g, o, plan))) return st;
    if (o == NULL || o->horizontal)
        if ((st = fc_pass_batch(plan))) return fc_set_error(g->ctx, st, "out of memory (batching)");
    if (dynamic) return FC_OK; /* a memory plan per shape: fc_plan_bind, or an instance's layout */
    if ((st = fc_pass_memplan(plan))) return st;
    return FC_OK;
}

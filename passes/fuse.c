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
 *    reduced value and the original row; so does a group of per-row ops of
 *    the reduced value alone (per_row_group);
 *  - a node used by several groups starts a group of its own and its result
 *    is stored, except views and creation ops, which are recomputed inside
 *    every consumer (they cost index arithmetic only).
 *
 * Because a node only joins when all its users are already in the group,
 * every node of a group feeds only that group: vertical fusion cannot make
 * a cycle. Horizontal fusion merges sibling groups (same space, a shared
 * input) and checks group reachability first, so it cannot either.
 *
 * Cost rules: a group never grows past max_group_weight (group_cost: the
 * ops.def weights of its nodes and of the views inlined into it, times its
 * reductions), and an op of cost HIGH (a transcendental) that is read
 * through a view is stored rather than recomputed at several indices.
 *
 * Every step is near-linear in the nodes and groups (tests/test_pass_scale.c
 * checks that doubling a chain or a concat does not quadruple the time).
 */
#include "passes.h"
#include "attention.h"

#include <stdlib.h>
#include <string.h>

#define MULTI (-2) /* inlined into every group that uses it */

void fc_fuse_options_default(fc_fuse_options *o) {
    o->vertical = true;
    o->horizontal = true;
    o->max_group_weight = FC_GROUP_MAX_WEIGHT;
    o->attention_in_place = true;
    o->dynamic = false;
    o->conv_library = false;
    o->precision = FC_PRECISION_AS_WRITTEN;
    o->numerics = FC_NUMERICS_FAST;
    o->after_pass = NULL;
    o->after_pass_user = NULL;
}

/* Worth storing rather than recomputing at another index (ops.def, column
 * `cost`, says why only HIGH is). */
static bool is_expensive(fc_op op) { return fc_op_cost_of(op) >= FC_COST_HIGH; }

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
            /* One entry per (user, value) even if used twice. Users are
             * listed node by node, so a repeat is the list's last entry
             * (a scan of the list would be quadratic in a value's users). */
            int c = u->count[v->id];
            if (c == 0 || u->list[u->start[v->id] + c - 1] != n) u->list[u->start[v->id] + u->count[v->id]++] = n;
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
    /* A view inlined into its users' groups (MULTI), by node id: the one
     * group it is charged to (-1: several), and the length of the inlined
     * chain of views from it to a group member. */
    int *inl_group, *inl_depth;
    /* Marks of one walk, by value id (view_downstream, compute_io): a
     * value is marked when mark[id] == epoch. */
    int *mark, *node_mark; /* node_mark: by node id */
    int epoch;
} fuse_state;

/* The weight of a group as codegen writes it: a row kernel emits the ops
 * feeding each reduction once per phase, so its source grows with the
 * weight times the reductions. */
static int64_t group_cost(int64_t weight, int nreduce) { return weight * (nreduce > 1 ? nreduce : 1); }

static bool cost_fits(const fuse_state *s, const fc_group *gr, int add_weight, int add_reduce) {
    return group_cost(gr->weight + add_weight, gr->nreduce + add_reduce) <= s->o->max_group_weight;
}

static int next_epoch(fuse_state *s) { return ++s->epoch; }

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
    gr->weight += fc_node_weight(n);
    gr->nreduce += fc_op_is_reduce(n->op);
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
    if (gr->kind == FC_GROUP_LIBRARY || gr->kind == FC_GROUP_ATTENTION || gr->kind == FC_GROUP_ALIAS) return false;
    if (!cost_fits(s, gr, fc_node_weight(n), 0)) return false;
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
    /* A value met again was answered (false) already: without the mark,
     * a chain of values with two users each is walked on every path,
     * exponentially many. The caller starts a new epoch. */
    if (s->mark[v->id] == s->epoch) return false;
    s->mark[v->id] = s->epoch;
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

/* Is pointwise group gr, as REDUCE group trial of reduction r, all per-row
 * values of r: elementwise nodes of row shape, each reading r's result or
 * such a node and no other value of the group? Then r joins it and they
 * are computed once per row after it (the mean's scale and the cast after
 * a squeeze-excite pool's sum, which were a kernel of one block). Members
 * were added consumers first: from the last, producers come first. */
static bool per_row_group(fuse_state *s, const fc_group *gr, const fc_group *trial, const fc_node *r) {
    next_epoch(s);
    s->mark[r->out[0]->id] = s->epoch;
    for (int i = gr->nnodes - 1; i >= 0; i--) {
        const fc_node *m = gr->nodes[i];
        if (m->nout != 1 || !fc_op_is_elementwise(m->op) || !fc_group_is_row_shape(trial, m->out[0])) return false;
        bool reads_row = false;
        for (int q = 0; q < m->nin; q++) {
            const fc_value *x = m->in[q];
            if (x->weak) continue;
            if (s->mark[x->id] == s->epoch) reads_row = true;
            else if (x->def && s->plan->group_of_node[x->def->id] == gr->id) return false;
        }
        if (!reads_row) return false;
        s->mark[m->out[0]->id] = s->epoch;
    }
    return true;
}

/* Can reduction r join group gr (its only consumer group)? */
static bool reduction_fits(fuse_state *s, fc_group *gr, fc_node *r) {
    if (gr->kind == FC_GROUP_LIBRARY || gr->kind == FC_GROUP_ATTENTION || gr->kind == FC_GROUP_ALIAS ||
        !cost_fits(s, gr, fc_node_weight(r), 1))
        return false;
    bool mask[FC_MAX_RANK];
    reduce_mask(r, mask);
    if (!is_full(gr, r->in[0]) && gr->kind == FC_GROUP_REDUCE) return false;
    /* As the group would be after the merge: */
    fc_group trial = *gr;
    make_reduce(&trial, r);
    if (gr->kind == FC_GROUP_POINTWISE && !same_shape(r->in[0], gr->rank, gr->space) && !per_row_group(s, gr, &trial, r))
        return false;
    if (gr->kind == FC_GROUP_REDUCE && memcmp(mask, gr->reduced, sizeof(bool) * (size_t)gr->rank) != 0) return false;
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
    next_epoch(s);
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

/* Does decode op u read operand v in place, through strides
 * (codegen/cuda/decode.c)? update_slice's new rows and cache_attention's
 * queries may be any strided view of what is stored: a decode step's
 * keys, values and queries are views of the QKV projection's result. */
static bool decode_reads_in_place(fuse_state *s, const fc_node *u, const fc_value *v) {
    fc_strided_view view;
    if (!s->o->attention_in_place) return false;
    bool operand = (u->op == FC_OP_UPDATE_SLICE && u->in[1] == v && u->in[0] != v && u->in[2] != v) ||
                   (u->op == FC_OP_CACHE_ATTENTION && u->in[0] == v && u->in[1] != v && u->in[2] != v && u->in[3] != v);
    return operand && fc_attention_view(v, stored_for_attention, s, &view);
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

/* May view n be inlined into every group that reads it? Its index
 * arithmetic is code in each of them, so it is charged like a member: to
 * the one group its users (directly, or through inlined views) belong to,
 * or, for a view shared by several groups, to each group that reads it
 * directly, with the chain of inlined views behind it bounded by the same
 * cap. Without the charge a long chain of views that canonicalize cannot
 * fold would all be inlined into one kernel. The charge is the node's
 * weight: a concat's grows with its operands. Records the charge. */
static bool inline_view(fuse_state *s, fc_node *n) {
    const int unset = -3, w = fc_node_weight(n);
    int one = unset, depth = 0;
    for (int k = 0; k < n->nout; k++) {
        fc_value *v = n->out[k];
        for (int j = 0; j < s->u.count[v->id]; j++) {
            fc_node *u = s->u.list[s->u.start[v->id] + j];
            int ug = s->plan->group_of_node[u->id], charged = ug;
            if (ug == MULTI) {
                charged = s->inl_group[u->id];
                if (s->inl_depth[u->id] > depth) depth = s->inl_depth[u->id];
            } else if (ug >= 0 && !cost_fits(s, s->plan->groups[ug], w, 0)) {
                return false;
            }
            one = one == unset || one == charged ? charged : -1;
        }
    }
    if (depth + 1 > s->o->max_group_weight) return false;
    if (one >= 0 && !cost_fits(s, s->plan->groups[one], w, 0)) return false;
    s->inl_group[n->id] = one >= 0 ? one : -1;
    s->inl_depth[n->id] = depth + 1;
    if (one >= 0) {
        s->plan->groups[one]->weight += w;
        return true;
    }
    int last = -1; /* users of one group are usually adjacent: charge each group once a run */
    for (int k = 0; k < n->nout; k++)
        for (int j = 0; j < s->u.count[n->out[k]->id]; j++) {
            int ug = s->plan->group_of_node[s->u.list[s->u.start[n->out[k]->id] + j]->id];
            if (ug >= 0 && ug != last) s->plan->groups[ug]->weight += w;
            last = ug;
        }
    return true;
}

/* Is gr a kernel that only narrows v: one cast of it to a 16-bit dtype
 * (under autocast, the bf16 operand of the GEMM after a norm whose f32
 * result is also a later residual)? Then the kernel that computes v
 * stores both dtypes: 6 bytes an element against the 10 (and a launch) of
 * a kernel that reads the f32 value back only to narrow it. */
static bool narrowing_only(const fc_group *gr, const fc_value *v) {
    if (gr->kind != FC_GROUP_POINTWISE || gr->nnodes != 1) return false;
    const fc_node *c = gr->nodes[0];
    return c->op == FC_OP_CAST && c->in[0] == v && fc_dtype_size(c->out[0]->dtype) < fc_dtype_size(v->dtype);
}

/* The row kernel that computes elementwise node n, read by several
 * kernels, and stores it for the others: a residual add's next norm (the
 * sum is read by the norm and by the next residual add), so the add is no
 * kernel of its own and its operands are read once. Tensor parallelism
 * needs it: the add after an all_reduce cannot be a GEMM's epilogue. Only
 * kernels read n: a library call's operand keeps its own kernel, unless
 * the host is a kernel that only narrows n (narrowing_only): then n's
 * kernel is that one, which stores n for the library as well.
 * The host must be the last made of n's user groups: groups are made
 * consumers first, so every group edge of vertical fusion runs from a
 * later-made group to an earlier-made one, and n's new edges (from the
 * host to the other readers) do too, which keeps the plan acyclic. */
static fc_group *row_host(fuse_state *s, fc_node *n) {
    if (n->nout != 1 || !fc_op_is_elementwise(n->op) || any_output(s, n)) return NULL;
    const fc_value *v = n->out[0];
    int host = -1;
    bool several = false, library = false;
    for (int j = 0; j < s->u.count[v->id]; j++) {
        int ug = s->plan->group_of_node[s->u.list[s->u.start[v->id] + j]->id];
        if (ug < 0) return NULL; /* a view inlined everywhere */
        library |= s->plan->groups[ug]->kind == FC_GROUP_LIBRARY;
        several |= host >= 0 && ug != host;
        host = ug > host ? ug : host;
    }
    fc_group *gr = several ? s->plan->groups[host] : NULL;
    if (!gr || !is_full(gr, v)) return NULL;
    if (gr->kind == FC_GROUP_REDUCE && !library) return gr;
    return narrowing_only(gr, v) ? gr : NULL;
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
        if (!target && !expensive_through_view && s->o->vertical) target = row_host(s, n);
        if (target && !expensive_through_view && fits(s, target, n)) {
            if (!add_node(s, target, n)) return FC_ERR_NOMEM;
            continue;
        }
        bool library_user = false;
        for (int j = 0; j < s->u.count[n->out[0]->id]; j++) {
            fc_node *u = s->u.list[s->u.start[n->out[0]->id] + j];
            int ugr = s->plan->group_of_node[u->id];
            if (ugr >= 0 && s->plan->groups[ugr]->kind == FC_GROUP_LIBRARY && !decode_reads_in_place(s, u, n->out[0]))
                library_user = true;
            /* An attention kernel reads a view in place when strides can
             * express the whole chain down to what is stored. */
            fc_strided_view view;
            if (ugr >= 0 && s->plan->groups[ugr]->kind == FC_GROUP_ATTENTION &&
                !(u->op == FC_OP_ATTENTION && fc_attention_view(n->out[0], stored_for_attention, s, &view)))
                library_user = true;
        }
        /* A library call needs its operands in memory: a view it reads is
         * stored (a copy kernel), everything else is recomputed. */
        if (fc_op_is_view(n->op) && !any_output(s, n) && !library_user && s->o->vertical && inline_view(s, n)) {
            s->plan->group_of_node[n->id] = MULTI;
            continue;
        }
        /* A reshape of a value that is stored anyway (a parameter, or what
         * a launch writes: not a view, which may be inlined) is that
         * buffer read as another shape: a library call reads it in place
         * (an alias launches nothing; passes/memplan.c shares the buffer). */
        if (n->op == FC_OP_RESHAPE && library_user && !any_output(s, n) &&
            (!n->in[0]->def || !fc_op_is_view(n->in[0]->def->op))) {
            fc_group *gr = new_group(s, FC_GROUP_ALIAS);
            if (!gr) return FC_ERR_NOMEM;
            set_space(gr, n->out[0]);
            if (!add_node(s, gr, n)) return FC_ERR_NOMEM;
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

/* Is value v computed inside group gid (by a member or an inlined view)? */
static bool computed_in(const fc_plan *p, const fc_value *v, int gid) {
    if (!v->def) return false;
    int og = p->group_of_node[v->def->id];
    return og == gid || og == MULTI;
}

/* Append v to the group's inputs unless marked in this epoch. */
static bool push_input(fuse_state *s, fc_group *gr, int *cap, fc_value *v) {
    if (s->mark[v->id] == s->epoch) return true;
    s->mark[v->id] = s->epoch;
    if (!fc_grow(&s->plan->arena, (void **)&gr->inputs, cap, gr->ninputs + 1, sizeof *gr->inputs)) return false;
    gr->inputs[gr->ninputs++] = v;
    return true;
}

/* Collect the stored values a group reads, following inlined views (each
 * once: node_mark). */
static bool collect_inputs(fuse_state *s, fc_group *gr, fc_node *n, int *cap_in) {
    fc_plan *p = s->plan;
    for (int k = 0; k < n->nin; k++) {
        fc_value *v = n->in[k];
        if (v->weak) continue;
        if (computed_in(p, v, gr->id) && p->group_of_node[v->def->id] == MULTI) {
            if (s->node_mark[v->def->id] == s->epoch) continue;
            s->node_mark[v->def->id] = s->epoch;
            if (!collect_inputs(s, gr, v->def, cap_in)) return false;
        } else if (!computed_in(p, v, gr->id)) {
            if (!push_input(s, gr, cap_in, v)) return false;
        }
    }
    return true;
}

static fc_status compute_io(fuse_state *s) {
    fc_plan *p = s->plan;
    for (int i = 0; i < p->ngroups; i++) {
        fc_group *gr = p->groups[i];
        gr->ninputs = gr->noutputs = 0;
        gr->inputs = gr->outputs = NULL;
        int cap_in = 0, cap_out = 0;
        next_epoch(s);
        for (int k = 0; k < gr->nnodes; k++)
            if (!collect_inputs(s, gr, gr->nodes[k], &cap_in)) return FC_ERR_NOMEM;
        for (int k = 0; k < gr->nnodes; k++) {
            fc_node *n = gr->nodes[k];
            for (int o = 0; o < n->nout; o++) {
                fc_value *v = n->out[o];
                bool stored = s->is_output[v->id];
                for (int j = 0; j < s->u.count[v->id] && !stored; j++)
                    if (p->group_of_node[s->u.list[s->u.start[v->id] + j]->id] != gr->id) stored = true;
                if (!stored) continue;
                if (!fc_grow(&p->arena, (void **)&gr->outputs, &cap_out, gr->noutputs + 1, sizeof *gr->outputs))
                    return FC_ERR_NOMEM;
                gr->outputs[gr->noutputs++] = v;
            }
        }
    }
    return FC_OK;
}

static bool same_space(const fc_group *a, const fc_group *b) {
    if (a->kind != b->kind || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->space[i] != b->space[i] || (a->kind == FC_GROUP_REDUCE && a->reduced[i] != b->reduced[i])) return false;
    return true;
}

/* ---- horizontal fusion ---------------------------------------------------- */

/* Group dependencies during horizontal fusion. level[g] is a labelling
 * that grows along every dependency (a producer's level is below its
 * consumers'), kept so after each merge: two groups of one level never
 * depend on each other, and a path from x to y passes only through levels
 * below y's, which bounds the walk that looks for one. */
typedef struct hfuse {
    fuse_state *s;
    int *level;    /* by group id */
    bool *alive;   /* by group id: not merged into another */
    int *gmark;    /* by group id, marked when == s->epoch */
    fc_value **stack;
    int nstack, cap_stack;
    int64_t budget; /* walk steps left; spent, a pair counts as dependent */
} hfuse;

static bool push_stack(hfuse *h, fc_value *v) {
    if (h->nstack == h->cap_stack) {
        int cap = h->cap_stack ? 2 * h->cap_stack : 64;
        fc_value **st = realloc(h->stack, sizeof *st * (size_t)cap);
        if (!st) return false;
        h->stack = st;
        h->cap_stack = cap;
    }
    h->stack[h->nstack++] = v;
    return true;
}

/* Walk the consumers of group x (through inlined views): visit(h, g, arg)
 * for each consumer group g not yet marked in this epoch; it returns 1 to
 * walk on from g, 0 to skip g, -1 to stop. -1 also for out of memory. */
static int walk_consumers(hfuse *h, int x, int (*visit)(hfuse *h, int g, void *arg), void *arg) {
    fuse_state *s = h->s;
    fc_plan *p = s->plan;
    h->nstack = 0;
    next_epoch(s);
    h->gmark[x] = s->epoch;
    for (int k = 0; k < p->groups[x]->noutputs; k++)
        if (!push_stack(h, p->groups[x]->outputs[k])) return -1;
    while (h->nstack) {
        fc_value *v = h->stack[--h->nstack];
        for (int j = 0; j < s->u.count[v->id]; j++) {
            fc_node *u = s->u.list[s->u.start[v->id] + j];
            int ug = p->group_of_node[u->id];
            if (ug == MULTI) {
                if (s->node_mark[u->id] == s->epoch) continue;
                s->node_mark[u->id] = s->epoch;
                for (int k = 0; k < u->nout; k++)
                    if (!push_stack(h, u->out[k])) return -1;
                continue;
            }
            if (ug < 0 || h->gmark[ug] == s->epoch) continue;
            h->gmark[ug] = s->epoch;
            int r = visit(h, ug, arg);
            if (r < 0) return -1;
            if (r == 0) continue;
            for (int k = 0; k < p->groups[ug]->noutputs; k++)
                if (!push_stack(h, p->groups[ug]->outputs[k])) return -1;
        }
    }
    return 0;
}

/* Looking for `target` (its id) from below its level. */
static int visit_find(hfuse *h, int g, void *arg) {
    int target = *(int *)arg;
    if (g == target || --h->budget < 0) return -1;
    return h->level[g] < h->level[target];
}

/* Raising the levels above a merged group: consumers of `from` that do
 * not sit above it are raised and queued. */
typedef struct raise_work {
    int from_level;
    int *queue;
    int n;
    bool *inq; /* by group id: in the queue now */
} raise_work;

static int visit_raise(hfuse *h, int g, void *arg) {
    raise_work *w = arg;
    if (h->level[g] <= w->from_level) {
        h->level[g] = w->from_level + 1;
        if (!w->inq[g]) w->queue[w->n++] = g;
        w->inq[g] = true;
    }
    return 0;
}

/* Does either group depend on the other? */
static bool dependent(hfuse *h, int a, int b) {
    if (h->level[a] == h->level[b]) return false;
    int lo = h->level[a] < h->level[b] ? a : b, hi = lo == a ? b : a;
    if (h->budget < 0) return true;
    return walk_consumers(h, lo, visit_find, &hi) < 0;
}

/* After a merge into x: every consumer must sit above its producers.
 * Levels only grow, so the propagation ends; the queue holds a group at
 * most once at a time. */
static fc_status raise_levels(hfuse *h, int x, int *queue, bool *inq) {
    raise_work w = {.queue = queue, .inq = inq};
    w.queue[w.n++] = x;
    inq[x] = true;
    while (w.n) {
        int g = w.queue[--w.n];
        inq[g] = false;
        w.from_level = h->level[g];
        if (walk_consumers(h, g, visit_raise, &w) < 0) return FC_ERR_NOMEM;
    }
    return FC_OK;
}

/* Merge group b into group a (both alive, independent, one space). */
static fc_status merge(hfuse *h, fc_group *ga, fc_group *gb) {
    fuse_state *s = h->s;
    fc_plan *p = s->plan;
    int cap = ga->cap_nodes;
    if (!fc_grow(&p->arena, (void **)&ga->nodes, &cap, ga->nnodes + gb->nnodes, sizeof *ga->nodes)) return FC_ERR_NOMEM;
    ga->cap_nodes = cap;
    for (int k = 0; k < gb->nnodes; k++) {
        ga->nodes[ga->nnodes++] = gb->nodes[k];
        p->group_of_node[gb->nodes[k]->id] = ga->id;
    }
    ga->weight += gb->weight;
    ga->nreduce += gb->nreduce;
    /* Inputs: the union (independent groups read nothing of each other).
     * Outputs: both lists (disjoint). */
    next_epoch(s);
    for (int k = 0; k < ga->ninputs; k++) s->mark[ga->inputs[k]->id] = s->epoch;
    int cap_in = ga->ninputs;
    for (int k = 0; k < gb->ninputs; k++)
        if (!push_input(s, ga, &cap_in, gb->inputs[k])) return FC_ERR_NOMEM;
    int cap_out = ga->noutputs;
    if (!fc_grow(&p->arena, (void **)&ga->outputs, &cap_out, ga->noutputs + gb->noutputs, sizeof *ga->outputs))
        return FC_ERR_NOMEM;
    for (int k = 0; k < gb->noutputs; k++) ga->outputs[ga->noutputs++] = gb->outputs[k];
    h->alive[gb->id] = false;
    if (h->level[gb->id] > h->level[ga->id]) h->level[ga->id] = h->level[gb->id];
    return FC_OK;
}

/* Horizontal fusion: siblings that read one input over one space become
 * one multi-output kernel. Groups are taken in launch order; each takes
 * in, in order, every later group that reads one of its inputs, has its
 * space, fits the cost cap with it, and neither depends on the other. The
 * candidates come from each input's list of readers, and dependence is a
 * walk bounded by the levels, so the pass is near-linear; a walk budget
 * past which a pair counts as dependent keeps pathological graphs (many
 * siblings across many levels) bounded too. */
static fc_status horizontal(fuse_state *s) {
    fc_plan *p = s->plan;
    int n = p->ngroups, nv = s->g->next_value_id;
    fc_status st = FC_OK;
    hfuse h = {.s = s};
    h.level = calloc((size_t)n + 1, sizeof(int));
    h.alive = malloc((size_t)n + 1);
    h.gmark = calloc((size_t)n + 1, sizeof(int));
    int *queue = malloc(sizeof(int) * ((size_t)n + 1));
    bool *inq = calloc((size_t)n + 1, sizeof(bool));
    int *rstart = calloc((size_t)nv + 2, sizeof(int)), *readers = NULL;
    int nin = 0;
    for (int b = 0; b < n; b++) nin += p->groups[b]->ninputs;
    readers = malloc(sizeof(int) * ((size_t)nin + 1));
    if (!h.level || !h.alive || !h.gmark || !queue || !inq || !rstart || !readers) {
        st = FC_ERR_NOMEM;
        goto out;
    }
    h.budget = 64 * ((int64_t)n + nin) + 4096;
    /* Scheduled: ids are positions and the order is topological. */
    for (int b = 0; b < n; b++) {
        fc_group *gb = p->groups[b];
        h.alive[b] = true;
        for (int k = 0; k < gb->ninputs; k++) {
            fc_value *v = gb->inputs[k];
            int a = v->def ? p->group_of_node[v->def->id] : -1;
            if (a >= 0 && a != b && h.level[a] + 1 > h.level[b]) h.level[b] = h.level[a] + 1;
            rstart[v->id + 1]++;
        }
    }
    for (int v = 0; v < nv; v++) rstart[v + 1] += rstart[v];
    {
        int *fill = malloc(sizeof(int) * ((size_t)nv + 1));
        if (!fill) {
            st = FC_ERR_NOMEM;
            goto out;
        }
        memcpy(fill, rstart, sizeof(int) * (size_t)nv);
        for (int b = 0; b < n; b++)
            for (int k = 0; k < p->groups[b]->ninputs; k++) readers[fill[p->groups[b]->inputs[k]->id]++] = b;
        free(fill);
    }
    for (int a = 0; a < n; a++) {
        fc_group *ga = p->groups[a];
        if (!h.alive[a] || ga->kind == FC_GROUP_LIBRARY || ga->kind == FC_GROUP_ATTENTION || ga->kind == FC_GROUP_ALIAS)
            continue;
        bool merged = false;
        for (int k = 0; k < ga->ninputs && cost_fits(s, ga, 1, 0); k++) { /* ninputs grows with merges */
            int vid = ga->inputs[k]->id, lo = rstart[vid], hi = rstart[vid + 1];
            while (lo < hi) { /* the first reader after a */
                int mid = (lo + hi) / 2;
                if (readers[mid] <= a) lo = mid + 1;
                else hi = mid;
            }
            for (int j = lo; j < rstart[vid + 1] && cost_fits(s, ga, 1, 0); j++) {
                int b = readers[j];
                fc_group *gb = p->groups[b];
                if (!h.alive[b] || !same_space(ga, gb) || !cost_fits(s, ga, gb->weight, gb->nreduce) || dependent(&h, a, b))
                    continue;
                if ((st = merge(&h, ga, gb)) || (st = raise_levels(&h, a, queue, inq))) goto out;
                merged = true;
            }
        }
        if (merged) qsort(ga->nodes, (size_t)ga->nnodes, sizeof *ga->nodes, cmp_node);
    }
    int m = 0;
    for (int q = 0; q < n; q++)
        if (h.alive[q]) p->groups[m++] = p->groups[q];
    p->ngroups = m;
    for (int q = 0; q < m; q++) {
        p->groups[q]->id = q;
        for (int k = 0; k < p->groups[q]->nnodes; k++) p->group_of_node[p->groups[q]->nodes[k]->id] = q;
    }
out:
    free(h.level); free(h.alive); free(h.gmark); free(h.stack); free(queue); free(inq); free(rstart); free(readers);
    return st;
}

static void free_state(fuse_state *s) {
    free(s->is_output);
    free(s->mark);
    free(s->node_mark);
    free(s->inl_group);
    free(s->inl_depth);
    free_uses(&s->u);
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
    s.mark = calloc((size_t)g->next_value_id + 1, sizeof(int));
    s.node_mark = calloc((size_t)g->next_node_id + 1, sizeof(int));
    s.inl_group = calloc((size_t)g->next_node_id + 1, sizeof(int));
    s.inl_depth = calloc((size_t)g->next_node_id + 1, sizeof(int));
    if (!s.is_output || !s.mark || !s.node_mark || !s.inl_group || !s.inl_depth || !build_uses(g, &s.u)) {
        free_state(&s);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (fusion)");
    }
    for (int i = 0; i < g->noutputs; i++) s.is_output[g->outputs[i]->id] = true;
    /* An update_slice writes its inout parameter whether or not anything
     * reads the result: its group stores it (in the parameter's buffer). */
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == FC_OP_UPDATE_SLICE) s.is_output[g->nodes[i]->out[0]->id] = true;

    fc_status st = vertical(&s);
    for (int i = 0; !st && i < plan->ngroups; i++)
        qsort(plan->groups[i]->nodes, (size_t)plan->groups[i]->nnodes, sizeof(fc_node *), cmp_node);
    if (!st) st = compute_io(&s);
    if (!st) st = fc_pass_schedule(plan);
    if (!st && o->horizontal) st = horizontal(&s);
    if (!st) st = compute_io(&s);
    if (!st) st = fc_pass_schedule(plan);
    free_state(&s);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (fusion)");
    return st;
}


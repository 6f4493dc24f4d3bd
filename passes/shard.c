/*
 * shard.c - tensor parallelism (docs/PARALLEL.md): the graph one rank of
 * `degree` runs, Megatron-style.
 *
 * Every value of the source graph gets a state on the ranks:
 *   REP      every rank holds all of it;
 *   SPLIT a  rank r holds slice r of `degree` equal slices along axis a;
 *   PARTIAL  every rank holds a summand: the value is the sum over ranks;
 *   UNDEC    a parameter not yet used (or a permute or cast of one): its
 *            first use decides how it is cut, so a weight takes the cut
 *            its matmul wants.
 * The states start from the weights: a matmul of a replicated value by a
 * weight splits the weight's output features (column-parallel: QKV, up,
 * gate, the LM head), a matmul of a value split along its features splits
 * the weight's input features (row-parallel: the attention output and
 * down projections) and gives a PARTIAL result. Views carry a split along
 * (a reshape of [B, T, H*D] into heads splits the heads, so attention and
 * key/value heads are split with their projections), elementwise ops and
 * attention keep it, and a parameter met by a split value with its full
 * size there (a bias, a key/value cache) is split to match. Where a value
 * is needed in a state it is not in, a collective makes it so: all_reduce
 * (PARTIAL to REP), all_gather (SPLIT to REP) or reduce_scatter (PARTIAL
 * to SPLIT); any op not named here reads its operands whole. So each
 * attention block and each MLP ends in one all_reduce, right after its
 * row-parallel matmul and before the residual add, and results are
 * whole on every rank (a key/value cache's update stays the rank's part).
 *
 * The graph is walked twice with the same rules: first without building,
 * to decide every parameter's cut at its first use (the parameters come
 * first in the new graph, with their shapes cut), then building the new
 * graph, where the decided parameters make the same choices. The rules
 * read only the states and the source graph's shapes, so both walks agree.
 */
#include "passes/passes.h"
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

typedef enum { REP, SPLIT, PARTIAL, UNDEC } kind;

typedef struct state {
    kind k;
    int axis;  /* SPLIT: the axis */
    int param; /* UNDEC: the parameter's value id */
    signed char perm[FC_MAX_RANK]; /* UNDEC: the parameter's axis of each of this value's */
} state;

typedef struct shard {
    fc_graph *g, *out; /* out NULL: the deciding walk */
    int t;             /* the degree */
    state *st;         /* by source value id */
    fc_value **nv;     /* by source value id: the new value, in its state */
    fc_value **rep;    /* by source value id: its whole value, once made */
} shard;

static bool building(const shard *s) { return s->out != NULL; }

/* A static dim that the degree divides. */
static bool divisible(const shard *s, fc_dim d) { return d > 0 && d % s->t == 0; }

static state st_rep(void) { return (state){.k = REP}; }
static state st_split(int axis) { return (state){.k = SPLIT, .axis = axis}; }

/* The state of v, a parameter's UNDEC followed to its decision. */
static state state_of(const shard *s, const fc_value *v) {
    if (v->weak) return st_rep();
    state x = s->st[v->id];
    if (x.k != UNDEC) return x;
    state p = s->st[x.param];
    if (p.k == UNDEC) return x;
    if (p.k != SPLIT) return p;
    for (int d = 0; d < v->rank; d++)
        if (x.perm[d] == p.axis) return st_split(d);
    FC_UNREACHABLE("shard: a parameter's split axis lost in a permute");
}

/* Decide an UNDEC value's parameter so that v is in state want. */
static bool decide(shard *s, const fc_value *v, state want) {
    state x = s->st[v->id];
    FC_ASSERT(x.k == UNDEC && !building(s));
    const fc_value *p = s->g->params[0];
    for (int i = 0; i < s->g->nparams; i++)
        if (s->g->params[i]->id == x.param) p = s->g->params[i];
    if (want.k == REP) {
        s->st[x.param] = st_rep();
        return true;
    }
    if (want.k != SPLIT || !divisible(s, v->dims[want.axis])) return false;
    s->st[x.param] = st_split(x.perm[want.axis]);
    FC_ASSERT(p->dims[x.perm[want.axis]] == v->dims[want.axis]);
    return true;
}

/* ---- the collectives ------------------------------------------------------ */

static fc_value *collective(shard *s, fc_op op, fc_value *x, int axis) {
    fc_attrs a;
    fc_attrs_defaults(op, &a);
    a.axis = axis;
    a.ranks = s->t;
    fc_node *n = fc_build(s->out, op, &x, 1, &a);
    return n ? n->out[0] : NULL;
}

static fc_value *permute(shard *s, fc_value *x, const int64_t *perm) {
    fc_attrs a;
    fc_attrs_defaults(FC_OP_PERMUTE, &a);
    a.list = (int64_t *)perm;
    a.nlist = x ? x->rank : 0;
    fc_node *n = x ? fc_build(s->out, FC_OP_PERMUTE, &x, 1, &a) : NULL;
    return n ? n->out[0] : NULL;
}

/* The whole of x (source value v's part, split along axis). The ranks'
 * parts follow one another along the outermost axis only (NCCL's
 * all_gather, and the memory of every collective library), so a split
 * with rows before it is gathered with the axis moved to the front and
 * back: the logits of a column-parallel LM head, [B, T, V/t]. */
static fc_value *gather(shard *s, const fc_value *v, fc_value *x, int axis) {
    bool rows = false;
    for (int d = 0; d < axis; d++) rows |= v->dims[d] != 1;
    if (!rows) return collective(s, FC_OP_ALL_GATHER, x, axis);
    int64_t to[FC_MAX_RANK], back[FC_MAX_RANK];
    to[0] = axis;
    for (int d = 0, k = 1; d < v->rank; d++)
        if (d != axis) to[k++] = d;
    for (int d = 0; d < v->rank; d++) back[to[d]] = d;
    return permute(s, collective(s, FC_OP_ALL_GATHER, permute(s, x, to), 0), back);
}

/*
 * Source value v in state `want`: true, and (when building) *out its new
 * value; false when no collective can make it so (a whole value cannot be
 * cut without a slice per rank, and every rank runs one graph). A value
 * made whole is kept, so a second reader gathers nothing.
 */
static bool get(shard *s, fc_value *v, state want, fc_value **out) {
    *out = NULL;
    if (v->weak) {
        if (want.k != REP) return false;
        if (building(s)) *out = fc_scalar(s->out, v->scalar), (*out)->weak_int = v->weak_int;
        return true;
    }
    state x = state_of(s, v);
    if (x.k == UNDEC) {
        if (!decide(s, v, want)) return false;
        x = state_of(s, v);
    }
    if (want.k == REP) {
        if (x.k == REP) {
            *out = building(s) ? s->nv[v->id] : NULL;
            return true;
        }
        if (!building(s)) return true;
        if (!s->rep[v->id])
            s->rep[v->id] = x.k == PARTIAL ? collective(s, FC_OP_ALL_REDUCE, s->nv[v->id], 0)
                                           : gather(s, v, s->nv[v->id], x.axis);
        *out = s->rep[v->id];
        return *out != NULL;
    }
    FC_ASSERT(want.k == SPLIT);
    if (x.k == SPLIT && x.axis == want.axis) {
        *out = building(s) ? s->nv[v->id] : NULL;
        return true;
    }
    if (x.k == PARTIAL && divisible(s, v->dims[want.axis])) {
        if (building(s)) *out = collective(s, FC_OP_REDUCE_SCATTER, s->nv[v->id], want.axis);
        return !building(s) || *out;
    }
    return false;
}

/* ---- the rules ---------------------------------------------------------- */

/* What a node's rule chose: each operand's state, the results' states, and
 * for a reshape or expand the split result axis whose dim is cut. */
typedef struct choice {
    state in[16];
    state out[16];
    int cut; /* a result axis whose size in the shape attribute is divided, or -1 */
} choice;

/* Every operand and result whole. */
static void all_rep(const fc_node *n, choice *c) {
    for (int i = 0; i < n->nin && i < 16; i++) c->in[i] = st_rep();
    for (int k = 0; k < n->nout && k < 16; k++) c->out[k] = st_rep();
    c->cut = -1;
}

/* Whether operand v can be had in state want (deciding a parameter in the
 * first walk): the test the rules choose by. */
static bool can(shard *s, fc_value *v, state want) {
    if (v->weak) return want.k == REP;
    state x = state_of(s, v);
    if (x.k == UNDEC) return want.k == REP || (want.k == SPLIT && divisible(s, v->dims[want.axis]));
    if (want.k == REP) return true;
    return (x.k == SPLIT && x.axis == want.axis) || (x.k == PARTIAL && divisible(s, v->dims[want.axis]));
}

/* Operand v's axis aligned with result axis `axis` of a broadcast of rank
 * r, or -1 where v has no such axis. */
static int aligned(const fc_value *v, int r, int axis) {
    int d = axis - (r - v->rank);
    return d >= 0 ? d : -1;
}

/* Elementwise and where: split like the first split operand, the others
 * split there too where they have the full size, whole where they
 * broadcast. */
static void rule_elementwise(shard *s, const fc_node *n, choice *c) {
    const fc_value *y = n->out[0];
    int axis = -1;
    for (int i = 0; i < n->nin && axis < 0; i++) {
        state x = state_of(s, n->in[i]);
        if (x.k == SPLIT) axis = x.axis + (y->rank - n->in[i]->rank);
    }
    all_rep(n, c);
    if (axis < 0) return;
    for (int i = 0; i < n->nin; i++) {
        fc_value *v = n->in[i];
        int d = v->weak ? -1 : aligned(v, y->rank, axis);
        state want = d >= 0 && v->dims[d] != 1 ? st_split(d) : st_rep();
        if (!can(s, v, want)) return all_rep(n, c);
        c->in[i] = want;
    }
    c->out[0] = st_split(axis);
}

static void rule_matmul(shard *s, const fc_node *n, choice *c) {
    fc_value *a = n->in[0], *b = n->in[1];
    const fc_value *y = n->out[0];
    state sa = state_of(s, a), sb = state_of(s, b);
    all_rep(n, c);
    if (a->rank < 2 || b->rank < 2) return;
    bool a_whole = sa.k == REP || sa.k == UNDEC || sa.k == PARTIAL;
    /* A weight not yet cut, or (the second walk) cut for this. */
    bool b_weight = sb.k == UNDEC || (building(s) && sb.k == SPLIT && sb.axis == b->rank - 1);
    if (a_whole && b_weight && can(s, b, st_split(b->rank - 1))) { /* column-parallel */
        c->in[1] = st_split(b->rank - 1);
        c->out[0] = st_split(y->rank - 1);
    } else if (sa.k == SPLIT && sa.axis == a->rank - 1 && can(s, b, st_split(b->rank - 2))) { /* row-parallel */
        c->in[0] = sa;
        c->in[1] = st_split(b->rank - 2);
        c->out[0] = (state){.k = PARTIAL};
    } else if (sa.k == SPLIT && sa.axis < a->rank - 2) { /* a batch axis: heads */
        int ya = aligned(a, y->rank, sa.axis) >= 0 ? sa.axis + (y->rank - a->rank) : -1;
        int bd = b->rank - (y->rank - ya);
        state wb = bd >= 0 && b->dims[bd] != 1 ? st_split(bd) : st_rep();
        if (ya < 0 || !can(s, b, wb)) return;
        c->in[0] = sa;
        c->in[1] = wb;
        c->out[0] = st_split(ya);
    } else if (sa.k == SPLIT && sa.axis == a->rank - 2 && can(s, b, st_rep())) { /* rows */
        c->in[0] = sa;
        c->out[0] = st_split(y->rank - 2);
    }
}

/* A reshape keeps a split when the dims before it are the same and the
 * split dim is the outer one of a group that merges or splits: [B, T, H*D]
 * split at H*D is [B, T, H, D] split at H, and back. */
static void rule_reshape(shard *s, const fc_node *n, choice *c) {
    const fc_value *x = n->in[0], *y = n->out[0];
    state sx = state_of(s, x);
    all_rep(n, c);
    if (sx.k != SPLIT || sx.axis >= y->rank) return;
    int a = sx.axis;
    for (int d = 0; d < a; d++)
        if (x->dims[d] != y->dims[d]) return;
    int64_t p = 1;
    bool ok = false;
    for (int d = a; d < y->rank && !ok && y->dims[a] > 0; d++) { /* in[a] split into out[a..d] */
        if (y->dims[d] <= 0) break;
        p *= y->dims[d];
        ok = p == x->dims[a] && divisible(s, y->dims[a]);
    }
    p = 1;
    for (int d = a; d < x->rank && !ok; d++) { /* in[a..d] merged into out[a] */
        if (x->dims[d] <= 0) break;
        p *= x->dims[d];
        ok = p == y->dims[a] && divisible(s, x->dims[a]) && y->dims[a] > 0;
    }
    if (!ok) return;
    c->in[0] = sx;
    c->out[0] = st_split(a);
    c->cut = a;
}

/* Views and ops along one axis: a split elsewhere passes through. */
static void rule_axis_op(shard *s, const fc_node *n, choice *c, int op_axis, int yaxis_of_x_split) {
    all_rep(n, c);
    state sx = state_of(s, n->in[0]);
    if (sx.k != SPLIT || sx.axis == op_axis || yaxis_of_x_split < 0) return;
    for (int i = 0; i < n->nin; i++) {
        if (!can(s, n->in[i], st_split(sx.axis))) return all_rep(n, c);
        c->in[i] = st_split(sx.axis);
    }
    for (int k = 0; k < n->nout; k++) c->out[k] = st_split(yaxis_of_x_split);
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* attention(q, k, v, [mask]) and cache_attention(q, k, v, len): split along
 * a head axis of q (not the last two), with the keys and values there. */
static void rule_attention(shard *s, const fc_node *n, choice *c) {
    fc_value *q = n->in[0];
    state sq = state_of(s, q);
    all_rep(n, c);
    if (sq.k != SPLIT || sq.axis >= q->rank - 2) return;
    int r = q->rank;
    c->in[0] = sq;
    for (int i = 1; i < n->nin; i++) {
        fc_value *v = n->in[i];
        int d = v->weak || (n->op == FC_OP_CACHE_ATTENTION && i == 3) ? -1 : aligned(v, r, sq.axis);
        state want = d >= 0 && v->dims[d] != 1 ? st_split(d) : st_rep();
        if (!can(s, v, want)) return all_rep(n, c);
        c->in[i] = want;
    }
    c->out[0] = sq;
}

static void choose(shard *s, const fc_node *n, choice *c) {
    const fc_value *x = n->nin > 0 ? n->in[0] : NULL;
    state sx = x ? state_of(s, x) : st_rep();
    if (fc_op_is_elementwise(n->op)) {
        /* A cast of an unused parameter is decided by the cast's use. */
        if (n->op == FC_OP_CAST && sx.k == UNDEC) {
            all_rep(n, c);
            c->in[0] = c->out[0] = sx;
            return;
        }
        return rule_elementwise(s, n, c);
    }
    switch (n->op) {
    case FC_OP_MATMUL: return rule_matmul(s, n, c);
    case FC_OP_RESHAPE: return rule_reshape(s, n, c);
    case FC_OP_PERMUTE: {
        all_rep(n, c);
        if (sx.k == UNDEC) {
            c->in[0] = sx;
            c->out[0] = sx;
            for (int d = 0; d < n->a.nlist && d < FC_MAX_RANK; d++) c->out[0].perm[d] = sx.perm[n->a.list[d]];
        } else if (sx.k == SPLIT) {
            c->in[0] = sx;
            for (int d = 0; d < n->a.nlist; d++)
                if (n->a.list[d] == sx.axis) c->out[0] = st_split(d);
        }
        return;
    }
    case FC_OP_EXPAND: {
        int ya = sx.k == SPLIT ? sx.axis + (n->out[0]->rank - x->rank) : -1;
        rule_axis_op(s, n, c, -1, ya);
        c->cut = c->out[0].k == SPLIT ? ya : -1;
        return;
    }
    case FC_OP_SLICE:
    case FC_OP_SPLIT:
    case FC_OP_SOFTMAX: return rule_axis_op(s, n, c, norm_axis(n->a.axis, x->rank), sx.axis);
    case FC_OP_CONCAT: return rule_axis_op(s, n, c, norm_axis(n->a.axis, x->rank), sx.axis);
    case FC_OP_REDUCE_SUM: case FC_OP_REDUCE_MAX: case FC_OP_REDUCE_MIN: case FC_OP_REDUCE_MEAN: {
        int ya = sx.k == SPLIT ? sx.axis : -1, hit = -1;
        for (int i = 0; i < n->a.nlist; i++) {
            int ax = norm_axis(n->a.list[i], x->rank);
            if (ax == sx.axis) hit = ax;
            if (ya >= 0 && !n->a.keepdim && ax < sx.axis) ya--;
        }
        return rule_axis_op(s, n, c, hit >= 0 ? sx.axis : -1, ya);
    }
    case FC_OP_LAYERNORM:
    case FC_OP_RMSNORM: {
        /* Normalized over the last axis (layernorm: its axis and after);
         * the scale and bias are whole. */
        int from = n->op == FC_OP_LAYERNORM ? norm_axis(n->a.axis, x->rank) : x->rank - 1;
        all_rep(n, c);
        if (sx.k != SPLIT || sx.axis >= from) return;
        for (int i = 1; i < n->nin; i++)
            if (!can(s, n->in[i], st_rep())) return;
        c->in[0] = sx;
        c->out[0] = sx;
        return;
    }
    case FC_OP_ATTENTION:
    case FC_OP_CACHE_ATTENTION: return rule_attention(s, n, c);
    case FC_OP_UPDATE_SLICE: {
        /* The cache is cut as the rows written into it. */
        all_rep(n, c);
        state ss = state_of(s, n->in[1]);
        if (ss.k != SPLIT || ss.axis == norm_axis(n->a.axis, x->rank) || !can(s, n->in[0], ss)) return;
        c->in[0] = c->in[1] = c->out[0] = ss;
        return;
    }
    default: return all_rep(n, c);
    }
}

/* ---- the two walks ------------------------------------------------------- */

static fc_status walk(shard *s) {
    fc_graph *g = s->g;
    fc_value *ins[64];
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        if (n->nin > 64 || n->nout > 16)
            return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "shard: %s has too many operands",
                                fc_op_table[n->op].name);
        choice c;
        choose(s, n, &c);
        if (building(s)) s->out->cur_loc = n->loc;
        for (int k = 0; k < n->nin; k++) {
            /* An UNDEC operand passes through a permute or cast unbuilt in
             * the first walk; when building it has been decided. */
            if (c.in[k].k == UNDEC && !building(s)) continue;
            if (!get(s, n->in[k], c.in[k], &ins[k]))
                return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "shard: %s: operand %d cannot be had as chosen",
                                    fc_op_table[n->op].name, k);
        }
        for (int k = 0; k < n->nout; k++) s->st[n->out[k]->id] = c.out[k];
        if (!building(s)) continue;
        fc_attrs a = n->a;
        int64_t list[FC_MAX_RANK];
        if (c.cut >= 0) { /* reshape, expand: the shape is the result's, cut */
            const fc_value *y = n->out[0];
            for (int d = 0; d < y->rank; d++) list[d] = fc_dim_map(g, s->out, y->dims[d]);
            list[c.cut] /= s->t;
            a.list = list;
            a.nlist = y->rank;
        } else if (fc_op_list_is_dims(n->op) && a.nlist > 0) {
            if (a.nlist > FC_MAX_RANK) return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "shard: a long shape");
            for (int d = 0; d < a.nlist; d++) list[d] = fc_dim_map(g, s->out, a.list[d]);
            a.list = list;
        }
        fc_node *m = fc_build(s->out, n->op, ins, n->nin, &a);
        if (!m) return fc_graph_status(s->out);
        for (int k = 0; k < n->nout; k++) {
            s->nv[n->out[k]->id] = m->out[k];
            if (n->out[k]->name)
                m->out[k]->name = fc_arena_strndup(&s->out->arena, n->out[k]->name, strlen(n->out[k]->name));
        }
    }
    return FC_OK;
}

/* The new graph: its parameters cut as decided, the nodes rebuilt, the
 * results whole (a cache's update stays the rank's part). */
static fc_status build(shard *s) {
    fc_graph *g = s->g, *o = s->out;
    for (int i = 0; i < g->nbinds; i++)
        if (fc_graph_bind(o, g->binds[i].name, g->binds[i].value)) return fc_graph_status(o);
    for (int i = 0; i < g->nsyms; i++) fc_graph_sym(o, g->syms[i], strlen(g->syms[i]));
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = g->params[i];
        state x = s->st[p->id];
        if (x.k == UNDEC) x = s->st[p->id] = st_rep();
        fc_dim dims[FC_MAX_RANK];
        for (int d = 0; d < p->rank; d++) dims[d] = fc_dim_map(g, o, p->dims[d]);
        if (x.k == SPLIT) dims[x.axis] /= s->t;
        fc_value *q = fc_build_param(o, p->name, strlen(p->name), p->dtype, p->rank, dims);
        if (!q || o->status) return fc_graph_status(o);
        q->inout = p->inout;
        q->shard_axis1 = x.k == SPLIT ? x.axis + 1 : 0;
        s->nv[p->id] = q;
    }
    fc_status st = walk(s);
    if (st != FC_OK) return st;
    o->cur_loc = (fc_loc){0, 0};
    fc_value **outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    if (!outs) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory");
    for (int k = 0; k < g->noutputs && st == FC_OK; k++) {
        fc_value *v = g->outputs[k];
        bool cache = v->def && v->def->op == FC_OP_UPDATE_SLICE;
        if (cache && state_of(s, v).k == SPLIT) outs[k] = s->nv[v->id];
        else if (!get(s, v, st_rep(), &outs[k]) || !outs[k])
            st = fc_graph_status(o) != FC_OK ? fc_graph_status(o)
                                            : fc_set_error(g->ctx, FC_ERR_RUNTIME, "shard: result %d not made", k);
    }
    if (st == FC_OK) st = fc_graph_return(o, g->noutputs, outs);
    free(outs);
    return st;
}

fc_status fc_pass_shard(fc_graph *g, int degree, fc_graph **out) {
    if (!out) return g ? fc_set_error(g->ctx, FC_ERR_USAGE, "fc_graph_shard: out is NULL") : FC_ERR_USAGE;
    *out = NULL;
    fc_status st = fc_pass_precheck(g, "shard");
    if (st != FC_OK) return st;
    if (degree < 1 || degree > 1024)
        return fc_set_error(g->ctx, FC_ERR_USAGE, "fc_graph_shard: degree must be 1 .. 1024, got %d", degree);
    int nv = g->next_value_id + 1;
    shard s = {.g = g, .t = degree};
    s.st = calloc((size_t)nv, sizeof *s.st);
    s.nv = calloc((size_t)nv, sizeof *s.nv);
    s.rep = calloc((size_t)nv, sizeof *s.rep);
    if (!s.st || !s.nv || !s.rep) st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory");
    for (int i = 0; st == FC_OK && i < g->nparams; i++) {
        fc_value *p = g->params[i];
        s.st[p->id] = (state){.k = UNDEC, .param = p->id};
        for (int d = 0; d < FC_MAX_RANK; d++) s.st[p->id].perm[d] = (signed char)d;
    }
    if (st == FC_OK) st = walk(&s);
    if (st == FC_OK) {
        /* Forget the first walk's node states: the second sets them again
         * from the decided parameters. */
        for (int i = 0; i < nv; i++) {
            bool is_param = false;
            for (int k = 0; k < g->nparams && !is_param; k++) is_param = g->params[k]->id == i;
            if (!is_param) s.st[i] = st_rep();
        }
        s.out = fc_graph_new(g->ctx, g->name);
        st = s.out ? build(&s) : fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory");
        if (st == FC_OK) st = fc_verify(s.out);
    }
    if (st == FC_OK) *out = s.out;
    else fc_graph_free(s.out);
    free(s.st);
    free(s.nv);
    free(s.rep);
    return st;
}

fc_status fc_graph_shard(fc_graph *g, int degree, fc_graph **out) { return fc_pass_shard(g, degree, out); }


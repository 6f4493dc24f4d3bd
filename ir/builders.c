/* builders.c - the public builders, one function per op (fusec.h): each
 * packs its operands and attributes, checks what only it can (list
 * lengths), and calls fc_build (build.c), which infers and checks the
 * result's type. A failed build returns the graph's poison value (the
 * error stays on the graph), so calls can be chained. */
#include "ir.h"

#define NAME(op) (fc_op_table[op].name)

/* ---- the public builders ------------------------------------------------- */

static fc_value *result(fc_graph *g, fc_node *n) { return n ? n->out[0] : &g->poison_value; }

static fc_value *build1(fc_graph *g, fc_op op, fc_value *x) {
    if (!g) return NULL;
    return result(g, fc_build(g, op, &x, 1, NULL));
}

static fc_value *build2(fc_graph *g, fc_op op, fc_value *a, fc_value *b) {
    if (!g) return NULL;
    fc_value *in[2] = {a, b};
    return result(g, fc_build(g, op, in, 2, NULL));
}

#define UNARY(fn, OP) fc_value *fn(fc_graph *g, fc_value *x) { return build1(g, FC_OP_##OP, x); }
#define BINARY(fn, OP) fc_value *fn(fc_graph *g, fc_value *a, fc_value *b) { return build2(g, FC_OP_##OP, a, b); }
UNARY(fc_neg, NEG)
UNARY(fc_abs, ABS)
UNARY(fc_exp, EXP)
UNARY(fc_log, LOG)
UNARY(fc_sqrt, SQRT)
UNARY(fc_rsqrt, RSQRT)
UNARY(fc_recip, RECIP)
UNARY(fc_sin, SIN)
UNARY(fc_cos, COS)
UNARY(fc_tanh, TANH)
UNARY(fc_sigmoid, SIGMOID)
UNARY(fc_relu, RELU)
UNARY(fc_gelu, GELU)
UNARY(fc_gelu_tanh, GELU_TANH)
UNARY(fc_silu, SILU)
UNARY(fc_hardswish, HARDSWISH)
UNARY(fc_erf, ERF)
BINARY(fc_add, ADD)
BINARY(fc_sub, SUB)
BINARY(fc_mul, MUL)
BINARY(fc_div, DIV)
BINARY(fc_max, MAX)
BINARY(fc_min, MIN)
BINARY(fc_pow, POW)
BINARY(fc_eq, EQ)
BINARY(fc_ne, NE)
BINARY(fc_lt, LT)
BINARY(fc_le, LE)
BINARY(fc_gt, GT)
BINARY(fc_ge, GE)
BINARY(fc_matmul, MATMUL)
#undef UNARY
#undef BINARY

fc_value *fc_where(fc_graph *g, fc_value *cond, fc_value *a, fc_value *b) {
    if (!g) return NULL;
    fc_value *in[3] = {cond, a, b};
    return result(g, fc_build(g, FC_OP_WHERE, in, 3, NULL));
}

/* Attributes with defaults, then the op's own. */
static fc_attrs attrs_for(fc_op op) {
    fc_attrs a;
    fc_attrs_defaults(op, &a);
    return a;
}

static bool check_list(fc_graph *g, fc_op op, int n, const void *list, int max) {
    if (g->status) return false;
    if (n < 0 || n > max || (n > 0 && !list)) {
        fc_graph_error(g, FC_ERR_USAGE, "%s: bad list (%d entries)", NAME(op), n);
        return false;
    }
    return true;
}

fc_value *fc_cast(fc_graph *g, fc_value *x, fc_dtype to) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_CAST);
    a.dtype = to;
    return result(g, fc_build(g, FC_OP_CAST, &x, 1, &a));
}

static fc_value *reduce(fc_graph *g, fc_op op, fc_value *x, int naxes, const int *axes, bool keepdim) {
    if (!g) return NULL;
    if (!check_list(g, op, naxes, axes, FC_MAX_RANK)) return &g->poison_value;
    fc_attrs a = attrs_for(op);
    int64_t list[FC_MAX_RANK];
    for (int i = 0; i < naxes; i++) list[i] = axes[i];
    a.list = list;
    a.nlist = naxes;
    a.keepdim = keepdim;
    char why[200];
    if (x && !x->poison && x->graph == g && fc_empty_max_message(op, x, &a, why, sizeof why))
        return fc_graph_error(g, FC_ERR_INPUT, "%s", why), &g->poison_value;
    return result(g, fc_build(g, op, &x, 1, &a));
}

fc_value *fc_reduce_sum(fc_graph *g, fc_value *x, int n, const int *axes, bool k) { return reduce(g, FC_OP_REDUCE_SUM, x, n, axes, k); }
fc_value *fc_reduce_max(fc_graph *g, fc_value *x, int n, const int *axes, bool k) { return reduce(g, FC_OP_REDUCE_MAX, x, n, axes, k); }
fc_value *fc_reduce_min(fc_graph *g, fc_value *x, int n, const int *axes, bool k) { return reduce(g, FC_OP_REDUCE_MIN, x, n, axes, k); }
fc_value *fc_reduce_mean(fc_graph *g, fc_value *x, int n, const int *axes, bool k) { return reduce(g, FC_OP_REDUCE_MEAN, x, n, axes, k); }

fc_value *fc_softmax(fc_graph *g, fc_value *x, int axis) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_SOFTMAX);
    a.axis = axis;
    return result(g, fc_build(g, FC_OP_SOFTMAX, &x, 1, &a));
}

fc_value *fc_layernorm(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, int axis, double eps) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_LAYERNORM);
    a.axis = axis;
    a.eps = eps;
    fc_value *in[3] = {x, w, b};
    return result(g, fc_build(g, FC_OP_LAYERNORM, in, 3, &a));
}

fc_value *fc_rmsnorm(fc_graph *g, fc_value *x, fc_value *w, double eps) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_RMSNORM);
    a.eps = eps;
    fc_value *in[2] = {x, w};
    return result(g, fc_build(g, FC_OP_RMSNORM, in, 2, &a));
}

fc_value *fc_attention(fc_graph *g, fc_value *q, fc_value *k, fc_value *v, bool causal, double scale) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_ATTENTION);
    a.causal = causal;
    a.scale = scale;
    fc_value *in[3] = {q, k, v};
    return result(g, fc_build(g, FC_OP_ATTENTION, in, 3, &a));
}

fc_value *fc_update_slice(fc_graph *g, fc_value *dst, fc_value *src, fc_value *offset, int axis) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_UPDATE_SLICE);
    a.axis = axis;
    fc_value *in[3] = {dst, src, offset};
    return result(g, fc_build(g, FC_OP_UPDATE_SLICE, in, 3, &a));
}

fc_value *fc_cache_attention(fc_graph *g, fc_value *q, fc_value *k, fc_value *v, fc_value *len, bool causal,
                             double scale) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_CACHE_ATTENTION);
    a.causal = causal;
    a.scale = scale;
    fc_value *in[4] = {q, k, v, len};
    return result(g, fc_build(g, FC_OP_CACHE_ATTENTION, in, 4, &a));
}

/* op of the nin values in, with attributes a and the list dims[0 .. rank)
 * (a shape, or a permutation). */
static fc_value *with_list(fc_graph *g, fc_op op, fc_value *const *in, int nin, int rank, const fc_dim *dims,
                           fc_attrs *a) {
    if (!g) return NULL;
    if (!check_list(g, op, rank, dims, FC_MAX_RANK)) return &g->poison_value;
    int64_t list[FC_MAX_RANK];
    for (int i = 0; i < rank; i++) list[i] = dims[i];
    a->list = list;
    a->nlist = rank;
    return result(g, fc_build(g, op, in, nin, a));
}

static fc_value *with_dims(fc_graph *g, fc_op op, fc_value *x, int rank, const fc_dim *dims, int nin) {
    fc_attrs a = attrs_for(op);
    return with_list(g, op, &x, nin, rank, dims, &a);
}

fc_value *fc_reshape(fc_graph *g, fc_value *x, int rank, const fc_dim *shape) { return with_dims(g, FC_OP_RESHAPE, x, rank, shape, 1); }
fc_value *fc_expand(fc_graph *g, fc_value *x, int rank, const fc_dim *shape) { return with_dims(g, FC_OP_EXPAND, x, rank, shape, 1); }

fc_value *fc_permute(fc_graph *g, fc_value *x, int rank, const int *perm) {
    if (!g) return NULL;
    if (!check_list(g, FC_OP_PERMUTE, rank, perm, FC_MAX_RANK)) return &g->poison_value;
    fc_dim dims[FC_MAX_RANK];
    for (int i = 0; i < rank; i++) dims[i] = perm[i];
    return with_dims(g, FC_OP_PERMUTE, x, rank, dims, 1);
}

fc_value *fc_slice(fc_graph *g, fc_value *x, int axis, int64_t start, int64_t end, int64_t step) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_SLICE);
    a.axis = axis;
    a.start = start;
    a.end = end;
    a.step = step;
    return result(g, fc_build(g, FC_OP_SLICE, &x, 1, &a));
}

fc_value *fc_concat(fc_graph *g, int n, fc_value *const *xs, int axis) {
    if (!g) return NULL;
    if (!check_list(g, FC_OP_CONCAT, n, xs, 1 << 20)) return &g->poison_value;
    fc_attrs a = attrs_for(FC_OP_CONCAT);
    a.axis = axis;
    return result(g, fc_build(g, FC_OP_CONCAT, xs, n, &a));
}

fc_status fc_split(fc_graph *g, fc_value *x, int axis, int n, const fc_dim *sizes, fc_value **outs) {
    if (!g) return FC_ERR_USAGE;
    if (!outs) return fc_graph_error(g, FC_ERR_USAGE, "split: outs is NULL");
    for (int i = 0; i < n; i++) outs[i] = &g->poison_value;
    if (!check_list(g, FC_OP_SPLIT, n, sizes, 1 << 20)) return g->status;
    fc_attrs a = attrs_for(FC_OP_SPLIT);
    a.axis = axis;
    a.nlist = n;
    a.list = fc_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!a.list) return g->status = FC_ERR_NOMEM;
    for (int i = 0; i < n; i++) a.list[i] = sizes[i];
    fc_node *node = fc_build(g, FC_OP_SPLIT, &x, 1, &a);
    if (!node) return g->status ? g->status : FC_ERR_INPUT;
    for (int i = 0; i < n; i++) outs[i] = node->out[i];
    return FC_OK;
}

static fc_value *create(fc_graph *g, fc_op op, int rank, const fc_dim *shape, fc_attrs *a) {
    return with_list(g, op, NULL, 0, rank, shape, a);
}

fc_value *fc_iota(fc_graph *g, int rank, const fc_dim *shape, int axis, fc_dtype dt) {
    fc_attrs a = attrs_for(FC_OP_IOTA);
    a.axis = axis;
    a.dtype = dt;
    return create(g, FC_OP_IOTA, rank, shape, &a);
}

fc_value *fc_full(fc_graph *g, int rank, const fc_dim *shape, double value, fc_dtype dt) {
    fc_attrs a = attrs_for(FC_OP_FULL);
    a.value = value;
    a.dtype = dt;
    return create(g, FC_OP_FULL, rank, shape, &a);
}

fc_value *fc_gather(fc_graph *g, fc_value *table, fc_value *idx, int axis) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(FC_OP_GATHER);
    a.axis = axis;
    fc_value *in[2] = {table, idx};
    return result(g, fc_build(g, FC_OP_GATHER, in, 2, &a));
}

/* The collectives (docs/PARALLEL.md): over a group of `ranks` ranks. */
static fc_value *collective(fc_graph *g, fc_op op, fc_value *x, int axis, int ranks) {
    if (!g) return NULL;
    fc_attrs a = attrs_for(op);
    a.axis = axis;
    a.ranks = ranks;
    return result(g, fc_build(g, op, &x, 1, &a));
}

fc_value *fc_all_reduce(fc_graph *g, fc_value *x, int ranks) { return collective(g, FC_OP_ALL_REDUCE, x, 0, ranks); }
fc_value *fc_all_gather(fc_graph *g, fc_value *x, int axis, int ranks) {
    return collective(g, FC_OP_ALL_GATHER, x, axis, ranks);
}
fc_value *fc_reduce_scatter(fc_graph *g, fc_value *x, int axis, int ranks) {
    return collective(g, FC_OP_REDUCE_SCATTER, x, axis, ranks);
}

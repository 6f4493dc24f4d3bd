/* canonicalize.c - put a graph in canonical form: fold constants, apply
 * algebraic identities, fold view chains, merge common subexpressions, and
 * remove dead code.
 *
 * One rebuild walk (rewrite.h) in topological order. Each node, its
 * operands already canonical, goes through place():
 *   1. simplify: the rules below may replace its result by an existing
 *      value or by new nodes, which are placed the same way (so they are
 *      simplified and merged too);
 *   2. CSE: a node equal to one already placed (same op, same operands,
 *      same attributes) is replaced by it;
 *   3. otherwise it is kept.
 * Rules only look at a node's operands, which come earlier and are already
 * final, so one walk reaches the fixpoint; DCE then drops what is unused.
 *
 * The rules never change a value's dtype or shape (a replacement must have
 * the type of what it replaces; fc_rw_replace asserts it) and never change
 * a result, NaN, inf and the sign of zero included: no reassociation of
 * floats, x * 0 stays (NaN * 0 and inf * 0 are NaN), x + 0.0 stays for
 * floats (-0.0 + 0.0 is +0.0, and 1 / that is +inf where 1 / x is -inf),
 * and constants are folded with the reference semantics (float64, operands
 * converted to the compute dtype, the result rounded once to its dtype).
 */
#include "passes.h"
#include "rewrite.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct Canon {
    fc_rewriter rw;
    fc_node **cse; /* open addressing over the nodes placed so far */
    size_t cap, n;
} Canon;

static bool place(Canon *c, fc_node *n);

/* ------------------------------------------------------------------ */
/* Looking at operands                                                 */
/* ------------------------------------------------------------------ */

/* The node defining v when it is an `op`, else NULL. */
static fc_node *def_op(const fc_value *v, fc_op op) {
    return !v->weak && v->def && v->def->op == op ? v->def : NULL;
}

/* A compile-time constant operand: a weak scalar (its exact value: each use
 * converts it) or the result of `full` (its value as stored: rounded to the
 * full's dtype, as the reference stores it). */
static bool constant(const fc_value *v, double *out) {
    if (v->weak) {
        *out = v->scalar;
        return true;
    }
    fc_node *f = def_op(v, FC_OP_FULL);
    if (!f) return false;
    *out = fc_round_to_dtype(f->a.value, v->dtype);
    return true;
}

/* The dtype an elementwise node computes in: its operands are converted to
 * it first. The result dtype, except for compares (the promotion of the
 * operands; a weak scalar's dtype was set by the builder to the one it
 * takes) and cast (which converts nothing: rounding the result casts). */
static fc_dtype compute_dtype(const fc_node *n) {
    if (fc_op_is_compare(n->op)) return fc_promote(n->in[0]->dtype, n->in[1]->dtype);
    if (n->op == FC_OP_CAST) return n->in[0]->dtype;
    return n->out[0]->dtype;
}

/* Operand k of elementwise node n as the op sees it: converted to the
 * compute dtype (a weak scalar always is, to fc_weak_scalar_dtype, as the
 * reference converts it; where's condition never is). */
static double operand_value(const fc_node *n, int k, double v) {
    fc_dtype cdt = compute_dtype(n);
    bool convert = !(n->op == FC_OP_WHERE && k == 0) && (n->in[k]->weak || n->in[k]->dtype != cdt);
    if (n->in[k]->weak) cdt = fc_weak_scalar_dtype(n->op, cdt);
    return convert ? fc_round_to_dtype(v, cdt) : v;
}

/* Operand k of n is a constant equal to `want` after conversion. */
static bool operand_is(const fc_node *n, int k, double want) {
    double v;
    return constant(n->in[k], &v) && operand_value(n, k, v) == want;
}

/* Operand k of n is a zero of the given sign after conversion. Integers
 * have one zero, which matches either sign. */
static bool operand_is_zero(const fc_node *n, int k, bool negative) {
    double v;
    if (!constant(n->in[k], &v)) return false;
    v = operand_value(n, k, v);
    return v == 0.0 && (!fc_dtype_is_float(compute_dtype(n)) || (bool)signbit(v) == negative);
}

/* The scalar semantics of the elementwise ops: the reference's own
 * (ir/scalar.c), so a folded constant is the value the reference computes. */
static double eval(fc_op op, double a, double b, double c) { return fc_scalar_eval(op, a, b, c); }

/* ------------------------------------------------------------------ */
/* Making replacements                                                 */
/* ------------------------------------------------------------------ */

/* Make a node here and place it (simplified and merged like any other);
 * returns what its result became. NULL on error. */
static fc_value *emit(Canon *c, fc_op op, fc_value *const *in, int nin, const fc_attrs *a) {
    fc_node *n = fc_rw_make(&c->rw, op, in, nin, a);
    if (!n || !place(c, n)) return NULL;
    return fc_rw_value(&c->rw, n->out[0]);
}

/* full(shape = v's shape, value, dtype = v's dtype): a constant of v's type. */
static fc_value *emit_full(Canon *c, const fc_value *v, double value) {
    fc_attrs a;
    fc_attrs_defaults(FC_OP_FULL, &a);
    int64_t shape[FC_MAX_RANK];
    if (v->rank) memcpy(shape, v->dims, sizeof(fc_dim) * (size_t)v->rank);
    a.list = shape;
    a.nlist = v->rank;
    a.value = value;
    a.dtype = v->dtype;
    return emit(c, FC_OP_FULL, NULL, 0, &a);
}

/* op(x) with the attributes of `like` but a new list. */
static fc_value *emit_with_list(Canon *c, fc_op op, fc_value *x, const fc_attrs *like, int nlist, const int64_t *list) {
    fc_attrs a = *like;
    int64_t buf[FC_MAX_RANK];
    FC_ASSERT(nlist <= FC_MAX_RANK);
    if (nlist) memcpy(buf, list, sizeof(int64_t) * (size_t)nlist);
    a.list = buf;
    a.nlist = nlist;
    return emit(c, op, &x, 1, &a);
}

/* ------------------------------------------------------------------ */
/* Constant folding: every tensor operand is a `full`                  */
/* ------------------------------------------------------------------ */

static fc_value *fold_elementwise(Canon *c, fc_node *n) {
    double x[3] = {0, 0, 0};
    bool any_full = false;
    for (int k = 0; k < n->nin; k++) {
        if (!constant(n->in[k], &x[k])) return NULL;
        any_full |= !n->in[k]->weak;
        x[k] = operand_value(n, k, x[k]);
    }
    FC_ASSERT(any_full); /* the builder refuses nodes of weak scalars only */
    fc_value *y = n->out[0];
    return emit_full(c, y, fc_round_to_dtype(eval(n->op, x[0], x[1], x[2]), y->dtype));
}

/* A reduction of a full: max/min give its value; sum gives value * N and
 * mean (value * N) / N, as the reference sums N equal values in float64
 * (the product can differ from that sum in the last bit of a double, far
 * below any dtype's rounding; it is exact for integers and powers of two).
 * N must be static, and max/min of nothing has no value. */
static fc_value *fold_reduce(Canon *c, fc_node *n) {
    fc_value *x = n->in[0];
    double v;
    if (!def_op(x, FC_OP_FULL) || !constant(x, &v)) return NULL;
    bool red[FC_MAX_RANK] = {false};
    for (int i = 0; i < x->rank; i++) red[i] = n->a.nlist == 0;
    for (int i = 0; i < n->a.nlist; i++) red[n->a.list[i] < 0 ? n->a.list[i] + x->rank : n->a.list[i]] = true;
    double count = 1;
    for (int i = 0; i < x->rank; i++) {
        if (!red[i]) continue;
        if (fc_dim_is_sym(x->dims[i])) return NULL;
        count *= (double)x->dims[i];
    }
    double r;
    switch (n->op) {
    case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN:
        if (count == 0) return NULL;
        r = v;
        break;
    case FC_OP_REDUCE_SUM: r = v * count; break;
    case FC_OP_REDUCE_MEAN: r = v * count / count; break;
    default: return NULL;
    }
    return emit_full(c, n->out[0], fc_round_to_dtype(r, n->out[0]->dtype));
}

/* A view or copy of fulls is a full of the new shape (concat: when every
 * operand holds the same value in the result's dtype). */
static fc_value *fold_shape(Canon *c, fc_node *n) {
    double v = 0;
    for (int k = 0; k < n->nin; k++) {
        double vk;
        if (!def_op(n->in[k], FC_OP_FULL) || !constant(n->in[k], &vk)) return NULL;
        vk = fc_round_to_dtype(vk, n->out[0]->dtype);
        if (k > 0 && memcmp(&v, &vk, sizeof v) != 0) return NULL;
        v = vk;
    }
    return emit_full(c, n->out[0], v);
}

static fc_value *fold(Canon *c, fc_node *n) {
    if (fc_op_is_elementwise(n->op)) return fold_elementwise(c, n);
    switch (n->op) {
    case FC_OP_REDUCE_SUM:
    case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN:
    case FC_OP_REDUCE_MEAN: return fold_reduce(c, n);
    case FC_OP_RESHAPE:
    case FC_OP_PERMUTE:
    case FC_OP_EXPAND:
    case FC_OP_SLICE:
    case FC_OP_CONCAT: return fold_shape(c, n);
    default: return NULL; /* composites are folded once decomposed */
    }
}

/* ------------------------------------------------------------------ */
/* Algebraic identities                                                */
/* ------------------------------------------------------------------ */

/* x, if it can stand for n's result: a tensor of the same dtype and shape. */
static fc_value *if_same(const fc_node *n, fc_value *x) {
    return !x->weak && fc_same_type(x, n->out[0]) ? x : NULL;
}

/* Every value of dtype `from` is exactly a value of dtype `to`, so a cast
 * there and back (or on to a third dtype) loses nothing. */
static bool cast_is_exact(fc_dtype from, fc_dtype to) {
    if (from == to) return true;
    switch (from) {
    case FC_BOOL: return true;             /* 0 and 1 exist in every dtype */
    case FC_I8: return to != FC_BOOL;      /* |x| <= 128 is exact even in bf16 (8 significant bits) */
    case FC_I32: return to == FC_I64 || to == FC_F64;
    case FC_F16:
    case FC_BF16: return to == FC_F32 || to == FC_F64;
    case FC_F32: return to == FC_F64;
    default: return false; /* i64 and f64 fit nowhere else exactly */
    }
}

/* reduce_max or reduce_min over dims that are all of size 1: each result
 * is the one element it reduces, so x reshaped (a view; no kernel of its
 * own). A decode step's reduce_max over its T = 1 positions is one. Not
 * reduce_sum: 0 + -0.0 is +0.0. */
static fc_value *reduce_of_one(Canon *c, fc_node *n) {
    fc_value *x = n->in[0];
    if ((n->op != FC_OP_REDUCE_MAX && n->op != FC_OP_REDUCE_MIN) || x->dtype != n->out[0]->dtype) return NULL;
    for (int i = 0; i < x->rank; i++) {
        bool red = n->a.nlist == 0;
        for (int k = 0; k < n->a.nlist; k++) red |= (n->a.list[k] < 0 ? n->a.list[k] + x->rank : n->a.list[k]) == i;
        if (red && x->dims[i] != 1) return NULL;
    }
    fc_attrs ra;
    fc_attrs_defaults(FC_OP_RESHAPE, &ra);
    return emit_with_list(c, FC_OP_RESHAPE, x, &ra, n->out[0]->rank, n->out[0]->dims);
}

static fc_value *identity(Canon *c, fc_node *n) {
    fc_value *r = NULL;
    switch (n->op) {
    case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN: return reduce_of_one(c, n);
    case FC_OP_MUL: /* x * 1, 1 * x */
        if (operand_is(n, 1, 1.0)) r = if_same(n, n->in[0]);
        if (!r && operand_is(n, 0, 1.0)) r = if_same(n, n->in[1]);
        return r;
    case FC_OP_ADD:
        /* x + -0.0 is x for every float x; x + 0.0 is not (-0.0 + 0.0 is
         * +0.0), so for floats only a negative zero goes. */
        if (operand_is_zero(n, 1, true)) r = if_same(n, n->in[0]);
        if (!r && operand_is_zero(n, 0, true)) r = if_same(n, n->in[1]);
        return r;
    case FC_OP_SUB:
        /* x - 0.0 is x for every x (x - -0.0 is x + 0.0: not). 0 - x is not
         * -x either: 0 - 0 is +0, -0 is -0. */
        return operand_is_zero(n, 1, false) ? if_same(n, n->in[0]) : NULL;
    case FC_OP_DIV: /* x / 1 */
    case FC_OP_POW: /* x ** 1: pow(x, 1) is x for every x, NaN and inf too */
        return operand_is(n, 1, 1.0) ? if_same(n, n->in[0]) : NULL;
    case FC_OP_NEG: {
        /* neg(neg(x)) -> x for floats. Integers saturate in the reference,
         * so -(-(-128)) on i8 is -127, not -128: leave them. */
        fc_node *inner = def_op(n->in[0], FC_OP_NEG);
        return inner && fc_dtype_is_float(n->out[0]->dtype) ? if_same(n, inner->in[0]) : NULL;
    }
    case FC_OP_WHERE: { /* where(constant, a, b) */
        double v;
        fc_value *cond = n->in[0], *out = n->out[0];
        if (!cond->weak && constant(cond, &v)) return if_same(n, v != 0.0 ? n->in[1] : n->in[2]);
        /* where(c, true, false) is c (c AND true, as an importer writes a
         * logical and), broadcast to the result's shape. */
        if (cond->weak || cond->dtype != FC_BOOL || out->dtype != FC_BOOL || !operand_is(n, 1, 1.0) ||
            !operand_is(n, 2, 0.0))
            return NULL;
        if (fc_same_type(cond, out)) return cond;
        fc_attrs a;
        fc_attrs_defaults(FC_OP_EXPAND, &a);
        return emit_with_list(c, FC_OP_EXPAND, cond, &a, out->rank, out->dims);
    }
    case FC_OP_CAST: {
        fc_value *x = n->in[0];
        if (x->dtype == n->a.dtype) return x; /* to its own dtype */
        /* cast(cast(x, B), C) -> cast(x, C) when x -> B is exact; with C the
         * dtype of x that is x itself (bf16 -> f32 -> bf16). */
        fc_node *inner = def_op(x, FC_OP_CAST);
        if (inner && cast_is_exact(inner->in[0]->dtype, x->dtype))
            return emit_with_list(c, FC_OP_CAST, inner->in[0], &n->a, 0, NULL);
        return NULL;
    }
    default: return NULL;
    }
}

/* ------------------------------------------------------------------ */
/* View chains                                                         */
/* ------------------------------------------------------------------ */

static fc_value *view(Canon *c, fc_node *n) {
    fc_value *x = n->in[0];
    switch (n->op) {
    case FC_OP_RESHAPE: {
        if (fc_same_type(x, n->out[0])) return x;
        /* reshape(reshape(y, s1), s2) -> reshape(y, s2): s2 was valid for
         * the inner result, which has y's element count and symbols. */
        fc_node *inner = def_op(x, FC_OP_RESHAPE);
        return inner ? emit_with_list(c, FC_OP_RESHAPE, inner->in[0], &n->a, n->a.nlist, n->a.list) : NULL;
    }
    case FC_OP_PERMUTE: {
        /* Result dim i is input dim perm[i]; through an inner permute it is
         * dim inner_perm[perm[i]] of the inner input. */
        int rank = x->rank;
        int64_t perm[FC_MAX_RANK];
        bool is_identity = true;
        fc_node *inner = def_op(x, FC_OP_PERMUTE);
        for (int i = 0; i < rank; i++) {
            int64_t p = n->a.list[i] < 0 ? n->a.list[i] + rank : n->a.list[i];
            if (inner) p = inner->a.list[p] < 0 ? inner->a.list[p] + rank : inner->a.list[p];
            perm[i] = p;
            is_identity &= p == i;
        }
        if (inner) return is_identity ? inner->in[0] : emit_with_list(c, FC_OP_PERMUTE, inner->in[0], &n->a, rank, perm);
        if (is_identity) return x;
        /* A permute that moves only dims of size 1 keeps every element
         * where it is: a reshape (a view, where a permute is a copy). A
         * decode step's [B, 1, H, D] -> [B, H, 1, D] is one. */
        int64_t last = -1;
        for (int i = 0; i < rank; i++) {
            if (x->dims[perm[i]] == 1) continue;
            if (perm[i] < last) return NULL;
            last = perm[i];
        }
        fc_attrs ra;
        fc_attrs_defaults(FC_OP_RESHAPE, &ra);
        return emit_with_list(c, FC_OP_RESHAPE, x, &ra, rank, n->out[0]->dims);
    }
    case FC_OP_EXPAND: {
        if (fc_same_type(x, n->out[0])) return x;
        /* expand(expand(y, s1), s2) -> expand(y, s2): every dim of y is 1 or
         * already the size it ends up with. The result's dims spell s2
         * without -1, which would refer to the inner shape. */
        fc_node *inner = def_op(x, FC_OP_EXPAND);
        return inner ? emit_with_list(c, FC_OP_EXPAND, inner->in[0], &n->a, n->out[0]->rank, n->out[0]->dims) : NULL;
    }
    case FC_OP_SLICE: return fc_same_type(x, n->out[0]) ? x : NULL; /* the full range */
    default: return NULL;
    }
}

/* The value n's (only) result becomes, or NULL to keep n. */
static fc_value *simplify(Canon *c, fc_node *n) {
    fc_value *r = fold(c, n);
    if (!r && !c->rw.g->status) r = identity(c, n);
    if (!r && !c->rw.g->status) r = view(c, n);
    return r;
}

/* ------------------------------------------------------------------ */
/* Common subexpressions                                               */
/* ------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t operand_key(const fc_value *v) {
    if (!v->weak) return (uint64_t)v->id;
    uint64_t bits;
    memcpy(&bits, &v->scalar, sizeof bits);
    return mix(bits, (uint64_t)v->dtype + 1000003u);
}

static uint64_t node_hash(const fc_node *n) {
    uint64_t h = mix((uint64_t)n->op, (uint64_t)n->nin);
    for (int k = 0; k < n->nin; k++) h = mix(h, operand_key(n->in[k]));
    /* The table masks the low bits, and mix leaves them nearly equal for
     * scalars that differ only in their high bits (1.0, 2.0, 3.0: the
     * exponent), which made probe runs as long as the table: finish with
     * a full avalanche (the MurmurHash3 finalizer). */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* Weak scalars are per-use copies: equal when they have one value (to the
 * bit: -0.0 is not 0.0) and one dtype. */
static bool same_operand(const fc_value *a, const fc_value *b) {
    if (a == b) return true;
    return a->weak && b->weak && a->dtype == b->dtype && !memcmp(&a->scalar, &b->scalar, sizeof a->scalar);
}

/* Equal in every attribute of the op's signature (fields the op does not
 * use are ignored, whatever they hold). Floats compare to the bit. */
static bool same_attrs(fc_op op, fc_attrs a, fc_attrs b) {
    const fc_attr_spec *specs;
    int nspecs = fc_op_attr_specs(op, &specs);
    for (int k = 0; k < nspecs; k++) {
        int64_t *ia, *ib;
        bool *ba, *bb;
        double *fa, *fb;
        fc_dtype *da, *db;
        fc_attr_field(&a, specs[k].name, &ia, &ba, &fa, &da);
        fc_attr_field(&b, specs[k].name, &ib, &bb, &fb, &db);
        switch (specs[k].kind) {
        case FC_ATTR_INT: if (*ia != *ib) return false; break;
        case FC_ATTR_BOOL: if (*ba != *bb) return false; break;
        case FC_ATTR_FLOAT: if (memcmp(fa, fb, sizeof *fa)) return false; break;
        case FC_ATTR_DTYPE: if (*da != *db) return false; break;
        case FC_ATTR_INTS:
        case FC_ATTR_DIMS:
            if (a.nlist != b.nlist || (a.nlist && memcmp(a.list, b.list, sizeof(int64_t) * (size_t)a.nlist)))
                return false;
            break;
        case FC_ATTR_STRS:
            if (a.nstrs != b.nstrs) return false;
            for (int i = 0; i < a.nstrs; i++)
                if (strcmp(a.strs[i], b.strs[i])) return false;
            break;
        }
    }
    return true;
}

static bool same_node(const fc_node *a, const fc_node *b) {
    if (a->op != b->op || a->nin != b->nin || a->nout != b->nout) return false;
    for (int k = 0; k < a->nin; k++)
        if (!same_operand(a->in[k], b->in[k])) return false;
    return same_attrs(a->op, a->a, b->a);
}

/* The slot of a node equal to n, or the empty slot where n goes. */
static fc_node **cse_slot(Canon *c, const fc_node *n) {
    size_t i = (size_t)node_hash(n) & (c->cap - 1);
    while (c->cse[i] && !same_node(c->cse[i], n)) i = (i + 1) & (c->cap - 1);
    return &c->cse[i];
}

static bool cse_grow(Canon *c) {
    if (2 * (c->n + 1) <= c->cap) return true;
    size_t cap = c->cap ? 2 * c->cap : 64;
    fc_node **old = c->cse;
    size_t old_cap = c->cap;
    c->cse = fc_ctx_malloc(c->rw.g->ctx, sizeof *c->cse * cap);
    if (!c->cse) {
        c->cse = old;
        c->rw.g->status = FC_ERR_NOMEM;
        return false;
    }
    memset(c->cse, 0, sizeof *c->cse * cap);
    c->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) *cse_slot(c, old[i]) = old[i];
    fc_ctx_freemem(c->rw.g->ctx, old);
    return true;
}

/* ------------------------------------------------------------------ */
/* The walk                                                            */
/* ------------------------------------------------------------------ */

/* Place node n (made or old, operands canonical, not in the graph yet):
 * replace it by a simpler value, by an equal node, or keep it. */
static bool place(Canon *c, fc_node *n) {
    fc_graph *g = c->rw.g;
    fc_value *r = simplify(c, n);
    if (g->status) return false;
    if (r) {
        FC_ASSERT(n->nout == 1);
        return fc_rw_replace(&c->rw, n->out[0], r);
    }
    if (!cse_grow(c)) return false;
    fc_node **slot = cse_slot(c, n);
    if (*slot) {
        for (int k = 0; k < n->nout; k++)
            if (!fc_rw_replace(&c->rw, n->out[k], (*slot)->out[k])) return false;
        return true;
    }
    if (!fc_rw_keep(&c->rw, n)) return false;
    *slot = n;
    c->n++;
    return true;
}

fc_status fc_pass_canonicalize(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "canonicalize");
    if (st) return st;
    Canon c = {0};
    if (fc_rw_begin(&c.rw, g) != FC_OK) return g->status;
    for (fc_node *n; (n = fc_rw_next(&c.rw));) {
        fc_rw_remap(&c.rw, n);
        if (!place(&c, n)) break;
    }
    fc_ctx_freemem(g->ctx, c.cse);
    st = fc_rw_end(&c.rw);
    return st ? st : fc_pass_dce(g);
}

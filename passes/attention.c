/*
 * attention.c - attention fusion: softmax(scale * (Q @ K^T) [+ mask]) @ V,
 * however it was written, becomes one `attention` node, which codegen turns
 * into one flash-attention kernel (codegen/cuda/attention.c). Unfused, the
 * pattern writes and reads the S x S score matrix several times; fused, the
 * scores never leave the chip.
 *
 * The matcher starts at every matmul P @ V and reads the graph backwards:
 *
 *   [cast]  P @ V                      the result, maybe cast (autocast)
 *   P     = [guard] [cast] softmax(X)  the guard: where(isnan(P), 0, P), as
 *                                      PyTorch's exporter writes it
 *           softmax over the last axis: composite, or the primitives decompose
 *                                      makes: div(e, reduce_sum(e)),
 *                                      e = exp(sub(X, reduce_max(X)))
 *   X     = ops(S)                     any order of: casts, mul/div by a
 *                                      constant (the scale), where(c, x, -inf)
 *                                      or where(c, -inf, x), add(x, mask)
 *   S     = Q' @ K'                    K' = K^T by a permute (or by the
 *                                      exporter's reshape to [-1, S, D],
 *                                      transpose, reshape back), or a tensor
 *                                      laid out as [.., D, S]
 *   Q', K', V                          views, casts and scales peeled off
 *
 * A where's condition (or an added where(c, 0, -inf)) built from iota and a
 * comparison is recognised as the causal mask when it keeps exactly the keys
 * j <= i (the causal mask may drop keys with a finite minimum instead of
 * -inf, see is_drop); a condition or an added tensor that does not come from iota is a
 * mask operand. An iota condition that is not causal (a mask on the wrong
 * dimension, say) leaves the pattern unfused.
 *
 * What must hold for the rewrite (else the graph stays as it was):
 *  - every intermediate (the scores, the probabilities, everything between)
 *    is used only inside the pattern and is not a graph result: a value the
 *    graph still needs would have to be computed anyway;
 *  - the softmax is over the last axis (the keys);
 *  - an added mask tensor comes after every scale (scale * S + mask, as
 *    SDPA), and every op keeps the score shape (a mask may broadcast into
 *    the scores, not widen them);
 *  - the scale is finite and positive (a negative one would turn a where's
 *    -inf into +inf), and nothing but casts sits between softmax and P @ V
 *    (a scale after the softmax is not attention);
 *  - Q, K and V have one dtype, which is the result's.
 *
 * Rounding. The graph rounds every intermediate to its dtype; the kernel
 * computes the scores and the probabilities in f32 and rounds once, at the
 * end. As for the gemm epilogues (docs/GEMM.md), skipping a rounding is
 * harmless when it was to the result's dtype D or finer (f32, f64): the
 * fused result is then at least as close to the exact value, within D's
 * tolerance of the graph. An intermediate of a coarser or different 16-bit
 * dtype (bf16 scores for an f16 result) leaves the pattern unfused. Peeled
 * casts (bf16 -> f32 of Q, K, V) are exact and cost nothing.
 *
 * Infinities and NaN: where(c, s, -inf) drops the key whatever s is, as the
 * kernel does. An added causal mask (s + where(c, 0, -inf)) is -inf for
 * finite s, and the kernel drops the key; only a NaN or +inf score at a
 * masked position would differ, where the graph gives NaN.
 */
#include "passes/attention.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */
/* ------------------------------------------------------------------ */

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* May the kernel skip rounding an intermediate of dtype di when the result
 * has dtype d? Only when di is d or finer (see the file comment). */
static bool skip_ok(fc_dtype di, fc_dtype d) {
    if (di == d || di == FC_F64) return true;
    return di == FC_F32 && d != FC_F64;
}

/* A cast that changes no value: a narrower float widened. */
static bool widening(fc_dtype from, fc_dtype to) {
    if (to == FC_F64) return from == FC_F32 || from == FC_F16 || from == FC_BF16;
    return to == FC_F32 && (from == FC_F16 || from == FC_BF16);
}

/* The value of a constant operand as an op computing in dtype dt uses it: a
 * weak scalar is rounded to dt, a `full` holds a value of its own dtype
 * (converted to dt). False when v is not a constant. */
static bool constant_of(const fc_value *v, fc_dtype dt, double *out) {
    if (v->weak) {
        *out = fc_round_to_dtype(v->scalar, dt);
        return true;
    }
    if (v->def && v->def->op == FC_OP_FULL) {
        *out = fc_round_to_dtype(fc_round_to_dtype(v->def->a.value, v->dtype), dt);
        return true;
    }
    return false;
}

static bool is_const(const fc_value *v, fc_dtype dt, double want) {
    double x;
    return constant_of(v, dt, &x) && x == want;
}

/* A constant that drops a key: -inf, or the lowest finite value of the
 * scores' dtype (or of f32), which is what PyTorch writes for a mask
 * (torch.finfo(dtype).min). The finite one drops the key only when the row
 * keeps some other key, whose score is the row's max: exp(min - max) is
 * then 0. So it is taken only for the causal mask, which keeps every row's
 * diagonal. Other large negative numbers (-1e9) are not taken: nothing says
 * that they mean "masked". */
static bool is_drop(const fc_value *v, fc_dtype dt, bool *exact) {
    double x;
    if (!constant_of(v, dt, &x)) return false;
    *exact = x == -INFINITY;
    double lowest = dt == FC_F64 ? -DBL_MAX : dt == FC_F16 ? -65504.0 : dt == FC_BF16 ? -3.3895313892515355e38 : -FLT_MAX;
    return x == -INFINITY || x == lowest || x == -FLT_MAX;
}

/* ------------------------------------------------------------------ */
/* Strided views (shared with fusion and codegen)                      */
/* ------------------------------------------------------------------ */

static void row_major(const fc_value *v, int64_t *st) {
    int64_t s = 1;
    for (int i = v->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= v->dims[i];
    }
}

/*
 * Strides for viewing a tensor of dims od (strides os) as dims nd, keeping
 * the row-major element order, or false when no strides can (dims that are
 * merged must be laid out one inside the other). This is PyTorch's
 * computeStride (aten/src/ATen/TensorUtils.cpp): walk the old dims from the
 * innermost, cut them into chunks that are contiguous among themselves, and
 * give each chunk's new dims strides within it.
 */
static bool reshape_strides(int orank, const int64_t *od, const int64_t *os, int nrank, const int64_t *nd,
                            int64_t *ns) {
    int64_t numel = 1;
    for (int i = 0; i < orank; i++) numel *= od[i];
    if (numel == 0 || orank == 0) {
        /* Nothing is read, or one element: any strides do. */
        int64_t s = 1;
        for (int i = nrank - 1; i >= 0; i--) {
            ns[i] = numel == 0 ? s : 0;
            s *= nd[i];
        }
        return true;
    }
    int view_d = nrank - 1;
    int64_t chunk_base_stride = os[orank - 1], tensor_numel = 1, view_numel = 1;
    for (int tensor_d = orank - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= od[tensor_d];
        if (tensor_d == 0 || (od[tensor_d - 1] != 1 && os[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || nd[view_d] == 1)) {
                ns[view_d] = view_numel * chunk_base_stride;
                view_numel *= nd[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (tensor_d > 0) {
                chunk_base_stride = os[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

static bool view_rec(const fc_value *v, fc_stored_fn stored, void *arg, fc_strided_view *out, int depth) {
    if (v->weak || !fc_value_is_static(v) || depth > 64) return false;
    const fc_node *n = v->def;
    out->rank = v->rank;
    if (!n || stored(v, arg)) {
        out->root = v;
        out->offset = 0;
        row_major(v, out->stride);
        return true;
    }
    fc_strided_view x;
    switch (n->op) {
    case FC_OP_PERMUTE:
    case FC_OP_SLICE:
    case FC_OP_SPLIT:
    case FC_OP_EXPAND:
    case FC_OP_RESHAPE:
        if (!view_rec(n->in[0], stored, arg, &x, depth + 1)) return false;
        break;
    default:
        return false; /* not a view: it must be stored to be read */
    }
    const fc_value *in = n->in[0];
    out->root = x.root;
    out->offset = x.offset;
    switch (n->op) {
    case FC_OP_PERMUTE:
        for (int i = 0; i < v->rank; i++) out->stride[i] = x.stride[norm_axis(n->a.list[i], v->rank)];
        return true;
    case FC_OP_SLICE: {
        int ax = norm_axis(n->a.axis, in->rank);
        int64_t dim = in->dims[ax], start = n->a.start;
        start = start < 0 ? (start + dim < 0 ? 0 : start + dim) : (start > dim ? dim : start);
        memcpy(out->stride, x.stride, sizeof x.stride);
        out->stride[ax] = x.stride[ax] * n->a.step;
        out->offset += start * x.stride[ax];
        return true;
    }
    case FC_OP_SPLIT: {
        int ax = norm_axis(n->a.axis, in->rank);
        memcpy(out->stride, x.stride, sizeof x.stride);
        for (int i = 0; i < v->def_index; i++) out->offset += n->out[i]->dims[ax] * x.stride[ax];
        return true;
    }
    case FC_OP_EXPAND:
        for (int i = 0; i < v->rank; i++) {
            int j = i - (v->rank - in->rank);
            out->stride[i] = j < 0 || (in->dims[j] == 1 && v->dims[i] != 1) ? 0 : x.stride[j];
        }
        return true;
    default: /* reshape */
        return reshape_strides(in->rank, in->dims, x.stride, v->rank, v->dims, out->stride);
    }
}

bool fc_attention_view(const fc_value *v, fc_stored_fn stored, void *arg, fc_strided_view *out) {
    memset(out, 0, sizeof *out);
    return view_rec(v, stored, arg, out, 0);
}

bool fc_attention_output_strides(const fc_value *o, const fc_value *w, int64_t *strides) {
    if (!fc_value_is_static(w)) return false;
    int64_t st[FC_MAX_RANK], prev[FC_MAX_RANK];
    row_major(w, st);
    const fc_value *cur = w;
    for (int depth = 0; cur != o; depth++) {
        const fc_node *n = cur->def;
        if (!n || depth > 64 || (n->op != FC_OP_PERMUTE && n->op != FC_OP_RESHAPE)) return false;
        const fc_value *x = n->in[0];
        memcpy(prev, st, sizeof st);
        if (n->op == FC_OP_PERMUTE) {
            /* cur[c] = x[d] with d[perm[i]] = c[i]: x's dim perm[i] has cur's stride i. */
            for (int i = 0; i < cur->rank; i++) st[norm_axis(n->a.list[i], cur->rank)] = prev[i];
        } else if (!fc_value_is_static(x) || !reshape_strides(cur->rank, cur->dims, prev, x->rank, x->dims, st)) {
            return false; /* x = reshape(cur) read through cur's strides */
        }
        cur = x;
    }
    memcpy(strides, st, sizeof(int64_t) * (size_t)o->rank);
    return true;
}

/* ------------------------------------------------------------------ */
/* The matcher's state                                                  */
/* ------------------------------------------------------------------ */

#define MAX_CHAIN 64 /* nodes of one pattern: about 15 in every spelling we know */
#define MAX_PEELED 16

typedef struct actx {
    fc_graph *g;
    int *uses;      /* by value id: uses by live nodes and graph results */
    bool *claimed;  /* by node id: part of an accepted match */
    bool *visited;  /* by node id: scratch of from_iota */
    fc_node *chain[MAX_CHAIN]; /* the nodes of the match being tried */
    int nchain;
    bool overflow;
} actx;

static void push(actx *a, fc_node *n) {
    if (a->nchain < MAX_CHAIN) a->chain[a->nchain++] = n;
    else a->overflow = true;
}

static bool usable(const actx *a, const fc_node *n) { return n && !n->dead && !a->claimed[n->id]; }

/* Does v depend on an iota? Then it is a structured mask, which the kernel
 * should compute rather than read: only the causal one is recognised. */
static bool iota_rec(actx *a, const fc_value *v, int depth) {
    const fc_node *n = v->def;
    if (!n || v->weak || a->visited[n->id]) return false;
    if (depth > 256) return true; /* too deep to tell: say yes, which leaves it unfused */
    a->visited[n->id] = true;
    if (n->op == FC_OP_IOTA) return true;
    for (int k = 0; k < n->nin; k++)
        if (iota_rec(a, n->in[k], depth + 1)) return true;
    return false;
}

static bool from_iota(actx *a, const fc_value *v) {
    memset(a->visited, 0, sizeof *a->visited * (size_t)(a->g->next_node_id + 1));
    return iota_rec(a, v, 0);
}

/* ------------------------------------------------------------------ */
/* The causal mask                                                      */
/* ------------------------------------------------------------------ */

/* Does dtype dt hold the integers 0 .. len-1 exactly? */
static bool holds_indices(fc_dtype dt, fc_dim len) {
    switch (dt) {
    case FC_I64: case FC_F64: return true;
    case FC_I32: return true; /* an i32 iota or cast already holds them */
    case FC_I8: return len >= 0 && len <= 128;
    case FC_F32: return len >= 0 && len <= (1 << 24);
    case FC_F16: return len >= 0 && len <= 2048;
    case FC_BF16: return len >= 0 && len <= 256;
    default: return false;
    }
}

/*
 * If every element of v equals its own coordinate along one dim of v,
 * return that dim counted from the end (1 = last) and its length in *len;
 * else 0. Seen through casts that keep the values, expands, permutes and
 * reshapes that only add or drop dims of size 1.
 */
static int index_dim(const fc_value *v, fc_dim *len, int depth) {
    const fc_node *n = v->def;
    if (!n || v->weak || depth > 32) return 0;
    int k;
    switch (n->op) {
    case FC_OP_IOTA: {
        int ax = norm_axis(n->a.axis, v->rank);
        *len = v->dims[ax];
        return holds_indices(v->dtype, *len) ? v->rank - ax : 0;
    }
    case FC_OP_CAST:
        k = index_dim(n->in[0], len, depth + 1);
        return k && holds_indices(v->dtype, *len) ? k : 0;
    case FC_OP_EXPAND:
        /* Dims are right-aligned: counted from the end they stay put. */
        return index_dim(n->in[0], len, depth + 1);
    case FC_OP_PERMUTE: {
        const fc_value *x = n->in[0];
        if (!(k = index_dim(x, len, depth + 1))) return 0;
        int src = x->rank - k;
        for (int p = 0; p < v->rank; p++)
            if (norm_axis(n->a.list[p], v->rank) == src) return v->rank - p;
        return 0;
    }
    case FC_OP_RESHAPE: {
        /* Only size-1 dims come or go: the dims that are not 1 must be the
         * same list, and the varying dim is the same entry of that list. */
        const fc_value *x = n->in[0];
        if (!(k = index_dim(x, len, depth + 1)) || *len == 1) return 0;
        fc_dim xs[FC_MAX_RANK], vs[FC_MAX_RANK];
        int vpos[FC_MAX_RANK], nx = 0, nv = 0, which = -1;
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] != 1) {
                if (i == x->rank - k) which = nx;
                xs[nx++] = x->dims[i];
            }
        for (int i = 0; i < v->rank; i++)
            if (v->dims[i] != 1) {
                vpos[nv] = i;
                vs[nv++] = v->dims[i];
            }
        if (nx != nv || which < 0 || memcmp(xs, vs, sizeof(fc_dim) * (size_t)nx)) return 0;
        return v->rank - vpos[which];
    }
    default:
        return 0;
    }
}

/* Which axis of the scores the index value v stands for
 * after broadcasting: 2 for the query axis, 1 for the key axis, else 0. */
static int score_axis(const fc_value *v, const fc_value *scores, bool corner) {
    fc_dim len;
    int k = index_dim(v, &len, 0);
    int R = scores->rank;
    /* a corner of a larger table (see corner()) has indices past the scores' */
    if (k == 2 && R >= 2 && (corner ? len >= scores->dims[R - 2] : len == scores->dims[R - 2])) return 2;
    if (k == 1 && R >= 2 && (corner ? len >= scores->dims[R - 1] : len == scores->dims[R - 1])) return 1;
    return 0;
}

/*
 * v seen through slices that start at 0 with step 1, as an exporter cuts
 * the [T, T] corner out of a causal table for the longest sequence
 * (bias[:, :, :T, :T]): element (i, j) of such a slice is element (i, j) of
 * the table, so a causal table gives a causal corner. *peeled says whether
 * a slice was seen; the corner must then have the scores' last two dims.
 * Expands are seen through as well: the mask broadcasts into the scores
 * anyway, and an expand is that broadcast written out (Hugging Face expands
 * its [1, 1, T, S] causal mask to the batch, which an exporter keeps when
 * the table is too large to fold).
 */
static const fc_value *corner(const fc_value *v, const fc_value *scores, bool *peeled) {
    *peeled = false;
    for (int guard = 0; guard < 8 && v->def && (v->def->op == FC_OP_SLICE || v->def->op == FC_OP_EXPAND); guard++) {
        const fc_node *n = v->def;
        if (n->op == FC_OP_SLICE) {
            if (n->a.start != 0 || n->a.step != 1) return v;
            *peeled = true;
        }
        v = n->in[0];
    }
    return v;
}

static bool corner_fits(const fc_value *c, const fc_value *scores) {
    int R = scores->rank;
    return c->rank >= 2 && R >= 2 && c->dims[c->rank - 2] == scores->dims[R - 2] &&
           c->dims[c->rank - 1] == scores->dims[R - 1];
}

/*
 * Is cond (broadcast into `scores`) the causal condition? `keep` says what
 * it selects: the keys kept (where(c, s, -inf)) or the keys dropped
 * (where(c, -inf, s)). Causal keeps exactly j <= i. Returns 1 for causal,
 * 0 when cond does not come from iota (a mask tensor), -1 for an iota
 * condition that is not causal.
 */
static int causal_cond(actx *a, const fc_value *cond, const fc_value *scores, bool keep, bool cut_above) {
    if (!from_iota(a, cond)) return 0;
    bool cut;
    const fc_value *table = corner(cond, scores, &cut);
    if (cut && !corner_fits(cond, scores)) return -1;
    cut = cut || cut_above;
    const fc_node *n = table->def;
    if (!n || !fc_op_is_compare(n->op) || n->op == FC_OP_EQ || n->op == FC_OP_NE) return -1;
    int x = score_axis(n->in[0], scores, cut), y = score_axis(n->in[1], scores, cut);
    if (!x || !y || x == y) return -1;
    /* Write it as "j OP i" (j the key index, i the query index). */
    fc_op op = n->op;
    if (x == 2) op = op == FC_OP_GE ? FC_OP_LE : op == FC_OP_GT ? FC_OP_LT : op == FC_OP_LE ? FC_OP_GE : FC_OP_GT;
    if (keep) return op == FC_OP_LE ? 1 : -1;  /* kept: j <= i */
    return op == FC_OP_GT ? 1 : -1;            /* dropped: j > i */
}

/* An added mask m: 1 when it is the causal mask as numbers, where(c, 0,
 * -inf) or where(c, -inf, 0) (through casts); 0 when it does not come from
 * iota (a mask tensor); -1 otherwise. */
static int additive_causal(actx *a, const fc_value *m, const fc_value *scores) {
    if (!from_iota(a, m)) return 0;
    while (m->def && m->def->op == FC_OP_CAST && fc_dtype_is_float(m->dtype) && fc_dtype_is_float(m->def->in[0]->dtype))
        m = m->def->in[0];
    bool cut;
    const fc_value *table = corner(m, scores, &cut);
    if (cut && !corner_fits(m, scores)) return -1;
    const fc_node *w = table->def;
    if (!w || w->op != FC_OP_WHERE) return -1;
    fc_dtype dt = m->dtype;
    bool exact;
    if (is_const(w->in[1], dt, 0.0) && is_drop(w->in[2], dt, &exact)) return causal_cond(a, w->in[0], scores, true, cut) == 1 ? 1 : -1;
    if (is_drop(w->in[1], dt, &exact) && is_const(w->in[2], dt, 0.0)) return causal_cond(a, w->in[0], scores, false, cut) == 1 ? 1 : -1;
    return -1;
}

/* ------------------------------------------------------------------ */
/* The pattern                                                          */
/* ------------------------------------------------------------------ */

/* What the walk over the score ops found. */
typedef struct scores {
    double scale;
    bool seen_scale; /* a scale was met (walking down: applied after what comes next) */
    bool causal;
    fc_value *mask;
    const fc_node *mask_invert; /* the mask is the negation of this eq/ne */
} scores;

/* Q', K' or V: the operand is permute(base, perm), up to peeled casts
 * (exact widenings) and scales (folded into the attention's scale). */
typedef struct operand {
    fc_value *orig; /* the matmul's operand */
    fc_value *base;
    int64_t perm[FC_MAX_RANK];
    bool peeled; /* a cast or a scale was peeled: rebuild from base */
    double scale;
    fc_dtype scaled_dt[MAX_PEELED]; /* dtypes whose rounding the peeled scales skip */
    int nscaled;
} operand;

/* One match, ready to be built. */
typedef struct match {
    fc_node *last; /* its result becomes the attention's */
    fc_node *guard; /* where(isnan(P), 0, P) that must stay, on the result; or NULL */
    operand q, k, v;
    bool causal;
    double scale;
    fc_value *mask;
    const fc_node *mask_invert;
} match;

static bool reduces_last(const fc_node *r) {
    const fc_value *x = r->in[0];
    return r->a.keepdim && r->a.nlist == 1 && x->rank >= 1 && norm_axis(r->a.list[0], x->rank) == x->rank - 1;
}

/* P = softmax(X) over the last axis: return X (the nodes join the chain). */
static fc_value *match_softmax(actx *a, fc_value *p) {
    fc_node *n = p->def;
    if (!usable(a, n) || p->rank < 1) return NULL;
    if (n->op == FC_OP_SOFTMAX) {
        if (norm_axis(n->a.axis, p->rank) != p->rank - 1) return NULL;
        push(a, n);
        return n->in[0];
    }
    /* div(e, reduce_sum(e)), e = exp(sub(x, reduce_max(x))) */
    if (n->op != FC_OP_DIV) return NULL;
    fc_value *e = n->in[0], *sum = n->in[1];
    fc_node *rs = sum->def, *ex = e->def;
    if (!usable(a, rs) || rs->op != FC_OP_REDUCE_SUM || !reduces_last(rs) || rs->in[0] != e) return NULL;
    if (!usable(a, ex) || ex->op != FC_OP_EXP) return NULL;
    fc_node *sub = ex->in[0]->def;
    if (!usable(a, sub) || sub->op != FC_OP_SUB) return NULL;
    fc_value *x = sub->in[0], *mx = sub->in[1];
    fc_node *rm = mx->def;
    if (!usable(a, rm) || rm->op != FC_OP_REDUCE_MAX || !reduces_last(rm) || rm->in[0] != x) return NULL;
    if (!fc_same_dims(x, p) || !fc_same_dims(e, p) || !fc_same_dims(ex->in[0], p)) return NULL;
    push(a, n);
    push(a, rs);
    push(a, ex);
    push(a, sub);
    push(a, rm);
    return x;
}

/* The tensor operand of a mul/div by a constant that keeps its shape, and
 * the factor; NULL when n is not one. */
static fc_value *scaled_operand(const fc_node *n, double *factor) {
    if (n->op != FC_OP_MUL && n->op != FC_OP_DIV) return NULL;
    fc_dtype dt = n->out[0]->dtype;
    if (!fc_dtype_is_float(dt)) return NULL;
    for (int side = 0; side < 2; side++) {
        fc_value *x = n->in[side], *c = n->in[1 - side];
        if (n->op == FC_OP_DIV && side == 1) break; /* c / x is not a scale */
        double s;
        if (x->weak || !fc_same_dims(x, n->out[0]) || !constant_of(c, dt, &s)) continue;
        if (n->op == FC_OP_DIV) {
            if (s == 0 || !isfinite(s)) return NULL;
            s = 1.0 / s;
        }
        *factor = s;
        return x;
    }
    return NULL;
}

/* Walk from the softmax input down to the scores' matmul through casts,
 * scales and masks; returns the matmul (the nodes join the chain). */
static fc_node *walk_scores(actx *a, fc_value *cur, scores *st, int depth) {
    for (; depth < MAX_CHAIN; depth++) {
        fc_node *n = cur->def;
        if (!usable(a, n)) return NULL;
        fc_value *out = n->out[0];
        switch (n->op) {
        case FC_OP_MATMUL:
            if (n->in[0]->rank < 2 || n->in[1]->rank < 2) return NULL;
            push(a, n);
            return n;
        case FC_OP_CAST:
            if (!fc_dtype_is_float(out->dtype) || !fc_dtype_is_float(n->in[0]->dtype)) return NULL;
            push(a, n);
            cur = n->in[0];
            continue;
        case FC_OP_MUL:
        case FC_OP_DIV: {
            double s;
            fc_value *x = scaled_operand(n, &s);
            if (!x) return NULL;
            st->scale *= s;
            st->seen_scale = true;
            push(a, n);
            cur = x;
            continue;
        }
        case FC_OP_WHERE: {
            fc_dtype dt = out->dtype;
            bool a_exact = false, b_exact = false;
            bool a_inf = is_drop(n->in[1], dt, &a_exact), b_inf = is_drop(n->in[2], dt, &b_exact);
            if (a_inf == b_inf) return NULL;
            fc_value *x = a_inf ? n->in[2] : n->in[1], *c = n->in[0];
            if (x->weak || !fc_same_dims(x, out)) return NULL;
            bool keep = b_inf; /* where(c, x, -inf): c holds the keys kept */
            int kind = causal_cond(a, c, out, keep, false);
            if (kind < 0 || (kind == 0 && !(a_exact || b_exact))) return NULL;
            if (kind == 1) {
                st->causal = true; /* twice is the same mask */
            } else {
                if (st->mask) return NULL;
                if (!keep) {
                    /* The mask must say "keep": negate an eq/ne (exact for
                     * NaN too: ne is !eq); other conditions stay unfused. */
                    if (!c->def || (c->def->op != FC_OP_EQ && c->def->op != FC_OP_NE)) return NULL;
                    st->mask_invert = c->def;
                }
                st->mask = c;
            }
            push(a, n);
            cur = x;
            continue;
        }
        case FC_OP_ADD: {
            if (n->in[0]->weak || n->in[1]->weak) return NULL;
            /* Either side may be the scores: try both. */
            for (int side = 0; side < 2; side++) {
                fc_value *x = n->in[side], *m = n->in[1 - side];
                if (!fc_same_dims(x, out)) continue;
                scores saved = *st;
                int nchain = a->nchain;
                int kind = additive_causal(a, m, out);
                bool ok = kind == 1;
                if (kind == 1) st->causal = true;
                if (kind == 0 && fc_dtype_is_float(m->dtype) && !st->seen_scale && !st->mask) {
                    st->mask = m; /* scale * S + mask: a scale after it would scale the mask too */
                    ok = true;
                }
                if (ok) {
                    push(a, n);
                    fc_node *mm = walk_scores(a, x, st, depth + 1);
                    if (mm) return mm;
                }
                *st = saved;
                a->nchain = nchain;
            }
            return NULL;
        }
        default:
            return NULL;
        }
    }
    return NULL;
}

/*
 * v = reshape(permute(reshape(z, [N, a, b]), [0, 2, 1]), [.., b, a]) with z
 * of dims [.., a, b] and N the product of its leading dims: the last two
 * dims of z swapped, as torchlib's scaled_dot_product_attention writes K^T
 * (the leading dims flattened so that the transpose is rank 3). z, or NULL.
 */
static fc_value *flat_transpose(actx *a, fc_value *v) {
    fc_node *r2 = v->def;
    if (!usable(a, r2) || r2->op != FC_OP_RESHAPE || v->rank < 3 || !fc_value_is_static(v)) return NULL;
    fc_node *t = r2->in[0]->def;
    if (!usable(a, t) || t->op != FC_OP_PERMUTE || t->out[0]->rank != 3) return NULL;
    if (norm_axis(t->a.list[0], 3) != 0 || norm_axis(t->a.list[1], 3) != 2 || norm_axis(t->a.list[2], 3) != 1) return NULL;
    fc_node *r1 = t->in[0]->def;
    if (!usable(a, r1) || r1->op != FC_OP_RESHAPE) return NULL;
    fc_value *z = r1->in[0];
    int r = v->rank;
    if (z->rank != r || !fc_value_is_static(z)) return NULL;
    for (int i = 0; i < r - 2; i++)
        if (z->dims[i] != v->dims[i]) return NULL;
    if (z->dims[r - 2] != v->dims[r - 1] || z->dims[r - 1] != v->dims[r - 2]) return NULL;
    const fc_value *f = t->in[0];
    if (f->dims[1] != z->dims[r - 2] || f->dims[2] != z->dims[r - 1]) return NULL;
    return z;
}

/* Peel views, casts (when `casts`) and scales (when `scales`) off v. */
static void peel(actx *a, fc_value *v, bool casts, bool scales, operand *o) {
    memset(o, 0, sizeof *o);
    o->orig = o->base = v;
    o->scale = 1.0;
    for (int i = 0; i < v->rank; i++) o->perm[i] = i;
    for (int guard = 0; guard < 64; guard++) {
        fc_node *n = o->base->def;
        if (!usable(a, n)) return;
        if (n->op == FC_OP_PERMUTE) {
            /* permute(permute(x, p), perm) = permute(x, r), r[i] = p[perm[i]] */
            for (int i = 0; i < v->rank; i++) o->perm[i] = norm_axis(n->a.list[o->perm[i]], v->rank);
            o->base = n->in[0];
            continue;
        }
        fc_value *z = flat_transpose(a, o->base);
        if (z) {
            /* The chain is permute(z, [.., r-1, r-2]). */
            int r = v->rank;
            for (int i = 0; i < r; i++) o->perm[i] = o->perm[i] == r - 1 ? r - 2 : o->perm[i] == r - 2 ? r - 1 : o->perm[i];
            o->base = z;
            continue;
        }
        if (casts && n->op == FC_OP_CAST && widening(n->in[0]->dtype, n->out[0]->dtype)) {
            o->base = n->in[0];
            o->peeled = true;
            continue;
        }
        double s;
        fc_value *x;
        if (scales && o->nscaled < MAX_PEELED && (x = scaled_operand(n, &s))) {
            o->scale *= s;
            o->scaled_dt[o->nscaled++] = n->out[0]->dtype;
            o->base = x;
            o->peeled = true;
            continue;
        }
        return;
    }
}

static bool identity(const int64_t *perm, int rank) {
    for (int i = 0; i < rank; i++)
        if (perm[i] != i) return false;
    return true;
}

/* The node whose result the attention of dtype t replaces: mm itself, or
 * the one cast of mm's result to t (autocast: f32 product, cast back). */
static fc_node *result_node(actx *a, fc_node *mm, fc_dtype t) {
    fc_value *y = mm->out[0];
    if (y->dtype == t) return mm;
    if (a->uses[y->id] != 1) return NULL;
    for (int i = 0; i < a->g->nnodes; i++) {
        fc_node *u = a->g->nodes[i];
        if (u->dead || u->nin < 1 || u->in[0] != y) continue;
        return usable(a, u) && u->op == FC_OP_CAST && u->out[0]->dtype == t ? u : NULL;
    }
    return NULL;
}

/* Every value made inside the chain (but the last node's result) is used
 * only by chain nodes and is not a graph result. */
static bool chain_is_private(const actx *a, const fc_node *last) {
    for (int i = 0; i < a->nchain; i++) {
        const fc_node *n = a->chain[i];
        if (n == last) continue;
        for (int k = 0; k < n->nout; k++) {
            const fc_value *v = n->out[k];
            int inner = 0;
            for (int j = 0; j < a->nchain; j++)
                for (int s = 0; s < a->chain[j]->nin; s++) inner += a->chain[j]->in[s] == v;
            if (inner != a->uses[v->id]) return false;
        }
    }
    return true;
}

/* Casts between floats above v (they join the chain). */
static fc_value *float_casts(actx *a, fc_value *p) {
    while (p->def && usable(a, p->def) && p->def->op == FC_OP_CAST && fc_dtype_is_float(p->dtype) &&
           fc_dtype_is_float(p->def->in[0]->dtype)) {
        push(a, p->def);
        p = p->def->in[0];
    }
    return p;
}

/* p = where(isnan(x), 0, x), the exporters' guard of softmax rows that kept
 * no key (IsNaN is ne(x, x)): the where (its nodes join the chain), or NULL. */
static fc_node *nan_guard(actx *a, fc_value *p) {
    fc_node *w = p->def;
    if (!usable(a, w) || w->op != FC_OP_WHERE) return NULL;
    fc_value *x = w->in[2];
    fc_node *c = w->in[0]->def;
    if (!usable(a, c) || c->op != FC_OP_NE || c->in[0] != x || c->in[1] != x) return NULL;
    if (!is_const(w->in[1], p->dtype, 0.0) || !fc_same_dims(x, p) || x->dtype != p->dtype) return NULL;
    push(a, w);
    push(a, c);
    return w;
}

/* Try the pattern ending in matmul mm (P @ V); fill m on success. */
static bool match_at(actx *a, fc_node *mm, match *m) {
    a->nchain = 0;
    a->overflow = false;
    if (!usable(a, mm) || mm->in[0]->rank < 2 || mm->in[1]->rank < 2) return false;
    push(a, mm);
    fc_value *p = float_casts(a, mm->in[0]);
    fc_node *guard = nan_guard(a, p);
    if (guard) p = float_casts(a, guard->in[2]);
    fc_value *x = match_softmax(a, p);
    if (!x) return false;
    scores st = {.scale = 1.0};
    fc_node *smm = walk_scores(a, x, &st, 0);
    if (!smm || a->overflow) return false;

    /* Operands: first with the casts peeled (16-bit attention of an
     * autocast graph), else as the matmuls read them. */
    memset(m, 0, sizeof *m);
    fc_node *last = NULL;
    for (int attempt = 0; attempt < 2 && !last; attempt++) {
        bool casts = attempt == 0;
        peel(a, smm->in[0], casts, true, &m->q);
        peel(a, smm->in[1], casts, true, &m->k);
        peel(a, mm->in[1], casts, false, &m->v);
        fc_dtype t = m->q.base->dtype;
        if (!fc_dtype_is_float(t) || m->k.base->dtype != t || m->v.base->dtype != t) continue;
        last = result_node(a, mm, t);
    }
    if (!last) return false;
    if (last != mm) push(a, last);
    if (a->overflow) return false;
    m->last = last;
    /* The guard sets the rows that kept no key (NaN) to 0. Causal attention
     * keeps every row's diagonal key and no mask drops nothing, so there
     * the guard only differs for NaN inputs, and goes; with a mask operand
     * it stays, on the result (0 @ V is 0). */
    m->guard = guard && !st.causal && st.mask ? guard : NULL;
    m->causal = st.causal;
    m->mask = st.mask;
    m->mask_invert = st.mask_invert;
    m->scale = st.scale * m->q.scale * m->k.scale;
    if (!isfinite(m->scale) || !(m->scale > 0)) return false;

    /* The roundings the kernel skips must be to the result's dtype or finer. */
    fc_dtype d = last->out[0]->dtype;
    for (int i = 0; i < a->nchain; i++)
        if (a->chain[i] != last && fc_dtype_is_float(a->chain[i]->out[0]->dtype) &&
            !skip_ok(a->chain[i]->out[0]->dtype, d))
            return false; /* (a bool, the guard's isnan, is no rounding) */
    const operand *ops[2] = {&m->q, &m->k};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < ops[i]->nscaled; j++)
            if (!skip_ok(ops[i]->scaled_dt[j], d)) return false;
    return chain_is_private(a, last);
}

/* ------------------------------------------------------------------ */
/* Building                                                             */
/* ------------------------------------------------------------------ */

static fc_value *build_permute(fc_rewriter *rw, fc_value *x, const int64_t *perm) {
    if (identity(perm, x->rank)) return fc_rw_value(rw, x);
    fc_attrs at;
    fc_attrs_defaults(FC_OP_PERMUTE, &at);
    int64_t p[FC_MAX_RANK];
    memcpy(p, perm, sizeof(int64_t) * (size_t)x->rank);
    at.list = p;
    at.nlist = x->rank;
    fc_node *n = fc_rw_build(rw, FC_OP_PERMUTE, &x, 1, &at);
    return n ? n->out[0] : NULL;
}

/* The operand the attention reads: the matmul's own operand when nothing
 * but views was peeled, else permute(base, perm). */
static fc_value *build_operand(fc_rewriter *rw, const operand *o) {
    if (!o->peeled) return fc_rw_value(rw, o->orig);
    return build_permute(rw, o->base, o->perm);
}

static fc_value *build_attention(fc_rewriter *rw, const match *m) {
    fc_value *in[4];
    in[0] = build_operand(rw, &m->q);
    /* K' = K^T: K is K' with its last two dims swapped. */
    int64_t kperm[FC_MAX_RANK];
    int r = m->k.orig->rank;
    memcpy(kperm, m->k.perm, sizeof kperm);
    kperm[r - 2] = m->k.perm[r - 1];
    kperm[r - 1] = m->k.perm[r - 2];
    in[1] = build_permute(rw, m->k.base, kperm);
    in[2] = build_operand(rw, &m->v);
    int nin = 3;
    if (m->mask_invert) {
        fc_op inv = m->mask_invert->op == FC_OP_EQ ? FC_OP_NE : FC_OP_EQ;
        in[nin++] = fc_rw_op2(rw, inv, m->mask_invert->in[0], m->mask_invert->in[1]);
    } else if (m->mask) {
        in[nin++] = fc_rw_value(rw, m->mask);
    }
    for (int i = 0; i < nin; i++)
        if (!in[i]) return NULL;
    fc_attrs at;
    fc_attrs_defaults(FC_OP_ATTENTION, &at);
    at.causal = m->causal;
    at.scale = m->scale;
    fc_node *n = fc_rw_build(rw, FC_OP_ATTENTION, in, nin, &at);
    fc_value *y = n ? n->out[0] : NULL;
    if (y && m->guard) {
        /* The guard's fill in the attention's dtype: an autocast graph's
         * guard sat on the f32 probabilities, and an f32 fill would
         * promote the 16-bit result it now guards. */
        fc_value *w[3] = {fc_rw_op2(rw, FC_OP_NE, y, y), fc_rw_cast(rw, m->guard->in[1], y->dtype), y};
        fc_node *g = w[0] && w[1] ? fc_rw_build(rw, FC_OP_WHERE, w, 3, NULL) : NULL;
        y = g ? g->out[0] : NULL;
    }
    return y;
}

/* ------------------------------------------------------------------ */

fc_status fc_pass_attention(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "attention");
    if (st) return st;
    int nmm = 0;
    for (int i = 0; i < g->nnodes; i++) nmm += !g->nodes[i]->dead && g->nodes[i]->op == FC_OP_MATMUL;
    if (nmm < 2) return FC_OK;

    size_t nn = (size_t)g->next_node_id + 1;
    actx a = {.g = g};
    a.uses = fc_use_counts(g);
    a.claimed = fc_ctx_malloc(g->ctx, nn * sizeof *a.claimed);
    a.visited = fc_ctx_malloc(g->ctx, nn * sizeof *a.visited);
    int *match_of = fc_ctx_malloc(g->ctx, nn * sizeof *match_of); /* by node id: the match built there */
    match *matches = fc_ctx_malloc(g->ctx, (size_t)nmm * sizeof *matches);
    if (!a.uses || !a.claimed || !a.visited || !match_of || !matches) {
        st = g->status = FC_ERR_NOMEM;
        goto out;
    }
    memset(a.claimed, 0, nn * sizeof *a.claimed);
    for (size_t i = 0; i < nn; i++) match_of[i] = -1;

    /* Match in graph order; a node belongs to the first pattern that
     * claims it, so patterns never overlap. */
    int nmatch = 0;
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead || n->op != FC_OP_MATMUL || !match_at(&a, n, &matches[nmatch])) continue;
        for (int k = 0; k < a.nchain; k++) a.claimed[a.chain[k]->id] = true;
        match_of[matches[nmatch].last->id] = nmatch;
        nmatch++;
    }
    if (nmatch == 0) goto out;

    /* Rebuild: the attention takes the place of the pattern's last node,
     * where everything it reads is defined. The rest of the pattern is
     * left without users, for DCE. */
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) {
        st = g->status;
        goto out;
    }
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        int mi = match_of[n->id];
        if (mi < 0) {
            fc_rw_keep(&rw, n);
            continue;
        }
        fc_value *y = build_attention(&rw, &matches[mi]);
        if (!y) break;
        y->name = n->out[0]->name; /* the value it stands for: plans read as the graph */
        if (!fc_rw_replace(&rw, n->out[0], y)) break;
    }
    st = fc_rw_end(&rw);
    if (st == FC_OK) st = fc_pass_dce(g);
out:
    fc_ctx_freemem(g->ctx, a.uses);
    fc_ctx_freemem(g->ctx, a.claimed);
    fc_ctx_freemem(g->ctx, a.visited);
    fc_ctx_freemem(g->ctx, match_of);
    fc_ctx_freemem(g->ctx, matches);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (attention fusion)");
    return st;
}

/*
 * autocast.c - compute a graph in another precision, by torch.autocast's
 * rules (docs/PRECISION.md).
 *
 * Most exported models are float32; their GEMMs only reach tensor cores in
 * bf16 or f16. torch.autocast sorts ops into three lists, and so does this
 * pass, on the primitives decompose left (so a softmax written out by hand
 * is treated as the composite is):
 *
 *   low       matmul, conv_cl, attention: f32 operands are rounded to the low dtype
 *             (bf16 or f16); the product accumulates in f32.
 *   f32       the reductions, softmax, layernorm, rmsnorm (the composites
 *             decompose keeps), exp, log, pow, rsqrt, recip: 16-bit
 *             operands are widened, the op computes in f32. autocast lists
 *             sum and softmax but not max; here softmax is its primitives,
 *             and a row max in bf16 would make the x - max before the exp
 *             a bf16 subtraction, which the composite never rounds.
 *   promote   everything else follows its operands (PyTorch promotion:
 *             bf16 + f32 is f32), as autocast leaves such ops alone.
 *
 * Where this differs from torch.autocast, it is to round less, never more:
 *
 *   - A matmul's result stays f32. autocast rounds it to the low dtype; here
 *     the matmul reads cast(cast(x, bf16), f32) operands, which the epilogue
 *     pass turns into a bf16 GEMM with an f32 result, and the dtype the
 *     result is stored in is chosen by its users (below). The GEMM
 *     accumulates in f32 either way; an f32 result lets the epilogue fold an
 *     f32 residual and bias (cuBLASLt reads them in the result's dtype).
 *   - A value is stored in the low dtype only when every use of it reads it
 *     in the low dtype anyway: the operands of matmuls and attention,
 *     through views (reshape, permute, slice, split, expand). The cast is
 *     placed right after its producer, so it fuses into the producer's
 *     kernel (or, after a GEMM, becomes the GEMM's result dtype), and the
 *     views and the kernels reading them move half the bytes.
 *   - A bias (a rank-1 parameter added to a matmul's result) is stored low
 *     when the sum, or the relu/gelu_tanh of it, is stored low: that is
 *     nn.Linear's bias under autocast, and what lets the epilogue fold the
 *     bias into a GEMM whose result is low (cuBLASLt reads the bias in the
 *     result's dtype).
 *   - A bias may also be a `full` (an exporter's zero bias, shared by many
 *     layers); a shared bias that some sums read low and others in f32 gets
 *     a low copy for the former, so every GEMM folds its own.
 *   - A scale (x * c, x / c by a bare number) of a product whose result is
 *     stored low reads the product low, as autocast computes it; the
 *     attention pass folds the exporters' scales of Q and K^T into its own.
 *   - The residual of a matmul's sum reads low when the sum is stored low;
 *     the sum's own operand (the one GEMM's result) stays f32, as a
 *     convolution's below.
 *   - A convolution (conv_cl) is a low op like a matmul. Its bias is stored
 *     low also when the sum takes a residual before the relu, and the
 *     residual operand of such a sum reads low when the sum (or its relu)
 *     is stored low: a 16-bit convolutional network's residual stream is
 *     16-bit under autocast (convolutions return the low dtype and sums of
 *     low values stay low), and then conv + bias + residual + relu is one
 *     library call whose result is low.
 *
 * A parameter read in the low dtype (a weight) is cast by one cast node,
 * placed first; with no producer to fuse into, it is a kernel of its own,
 * which passes/loadtime.c marks to run when the weights are loaded, not at
 * every run (docs/PRECISION.md). The graph's parameters and results keep the
 * dtypes the caller declared, so results are cast back at the end (the cast
 * fuses into the kernel or GEMM that produces the result). float64 is never
 * touched, as autocast leaves it.
 *
 * FC_PRECISION_F32 is the same walk with f32 as the "low" dtype: 16-bit
 * parameters, constants and casts become f32, and every float op computes
 * in f32. FC_PRECISION_AS_WRITTEN and FC_PRECISION_TF32 change nothing here
 * (TF32 is how cuBLASLt multiplies f32, not a dtype).
 */
#include "passes.h"
#include "rewrite.h"

#include <string.h>

typedef enum op_list { LIST_PROMOTE, LIST_LOW, LIST_F32 } op_list;

static op_list list_of(fc_op op) {
    switch (op) {
    case FC_OP_MATMUL:
    case FC_OP_CONV_CL:
    case FC_OP_ATTENTION: return LIST_LOW;
    case FC_OP_REDUCE_SUM:
    case FC_OP_REDUCE_MEAN:
    case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN:
    case FC_OP_SOFTMAX:
    case FC_OP_LAYERNORM:
    case FC_OP_RMSNORM:
    case FC_OP_EXP:
    case FC_OP_LOG:
    case FC_OP_POW:
    case FC_OP_RSQRT:
    case FC_OP_RECIP: return LIST_F32;
    default: return LIST_PROMOTE;
    }
}

/* A matmul and a convolution multiply the rounded low values in f32 (see
 * the file comment); attention keeps the low dtype, as its kernel does. */
static bool products_in_f32(fc_op op) { return op == FC_OP_MATMUL || op == FC_OP_CONV_CL; }

/* Operand k of a low-list op that is read in the low dtype (attention's
 * mask is added to the f32 scores and keeps its dtype). */
static bool low_operand(const fc_node *n, int k) { return products_in_f32(n->op) ? k < 2 : k < 3; }

/* Views that only move elements: a view of a low value is low. */
static bool is_plain_view(fc_op op) {
    return op == FC_OP_RESHAPE || op == FC_OP_PERMUTE || op == FC_OP_SLICE || op == FC_OP_SPLIT ||
           op == FC_OP_EXPAND;
}

static bool is_narrow(fc_dtype dt) { return dt == FC_F16 || dt == FC_BF16; }

/* n is x * c or x / c by a bare number c, keeping x's shape: a scale. */
static bool is_scale(const fc_node *n) {
    if ((n->op != FC_OP_MUL && n->op != FC_OP_DIV) || n->nout != 1) return false;
    for (int k = 0; k < 2; k++) {
        const fc_value *x = n->in[k], *c = n->in[1 - k];
        if (n->op == FC_OP_DIV && k == 1) break; /* c / x is no scale */
        if (!x->weak && c->weak && fc_same_dims(x, n->out[0])) return true;
    }
    return false;
}

typedef struct ac {
    fc_graph *g;
    fc_dtype low;       /* bf16 or f16; f32 for FC_PRECISION_F32 */
    bool widen;         /* FC_PRECISION_F32 */
    int nvals;          /* value ids below this are the graph's before the walk */
    fc_value **cur;     /* by old value id: its value now, when its dtype changed */
    bool *store_low;    /* by old value id: stored in `low` */
    int *uses, *ok_uses; /* by old value id: uses, and uses that read it low */
    fc_node **user;     /* by old value id: a (the last seen) user */
    int *pos;           /* by node id: its position in the graph */
    int *all_uses;      /* by old value id: every use (uses[] counts those the walk has seen) */
    fc_value **low_copy; /* by old value id: a constant bias's low form, for the uses that read it low */
    fc_value **in, **out; /* scratch for one node's operands and results */
} ac;

/* ------------------------------------------------------------------ */
/* Which values are stored low                                         */
/* ------------------------------------------------------------------ */

/* v is cast(x, f32) of an x in the low dtype: a matmul operand as this
 * pass writes it. */
static bool widened_from_low(const ac *a, const fc_value *v) {
    const fc_node *c = v->def;
    return v->dtype == FC_F32 && c && c->op == FC_OP_CAST && c->in[0]->dtype == a->low;
}

/* How far v is along a convolution's epilogue chain, the tail the
 * epilogue pass folds into a conv_cl (passes/epilogue.c): the result, +
 * bias, + residual, then the activation, each at most once and in that
 * order (the bias before the residual). 0: not a convolution's. */
enum { CHAIN_NONE, CHAIN_CONV, CHAIN_BIAS, CHAIN_RESIDUAL, CHAIN_ACT };

/* v's stage, or CHAIN_NONE when it is beyond `most` (which bounds the walk
 * down: a residual stream of relu(conv + residual) is not walked). */
static int stage_upto(const fc_value *v, int most) {
    const fc_node *d = v->def;
    if (!d || v->weak) return CHAIN_NONE;
    if (d->op == FC_OP_CONV_CL) return CHAIN_CONV;
    if (d->op == FC_OP_RELU || d->op == FC_OP_GELU_TANH)
        return most >= CHAIN_ACT && fc_dtype_is_float(v->dtype) && stage_upto(d->in[0], CHAIN_RESIDUAL) ? CHAIN_ACT
                                                                                                      : CHAIN_NONE;
    if (d->op != FC_OP_ADD || d->in[0]->weak || d->in[1]->weak || most < CHAIN_BIAS) return CHAIN_NONE;
    int best = CHAIN_NONE;
    for (int k = 0; k < 2; k++) {
        const fc_value *x = d->in[k], *y = d->in[1 - k];
        if (y->rank == 1 && y->rank < v->rank && stage_upto(x, CHAIN_CONV)) best = best ? best : CHAIN_BIAS;
        else if (most >= CHAIN_RESIDUAL && fc_same_dims(y, v) && stage_upto(x, CHAIN_BIAS)) best = CHAIN_RESIDUAL;
    }
    return best;
}

static int conv_stage(const fc_value *v) { return stage_upto(v, CHAIN_ACT); }

/* v is a convolution's result (conv_cl), or that plus its bias. */
static bool conv_result(const fc_value *v) { return stage_upto(v, CHAIN_BIAS) != CHAIN_NONE; }

/* The conv_cl of conv_result v. */
static const fc_node *chain_conv(const fc_value *v) {
    const fc_node *d = v->def;
    if (d && d->op == FC_OP_ADD) d = stage_upto(d->in[0], CHAIN_CONV) ? d->in[0]->def : d->in[1]->def;
    return d && d->op == FC_OP_CONV_CL ? d : NULL;
}

/* Does user u of v carry v's convolution chain on (as the epilogue will
 * fold it: u is v's only use)? An add of two convolutions' sums, each
 * used once, continues the chain of the one first in the graph: the
 * epilogue gives a tail to the first chain that reaches it, and the other
 * sum becomes its residual. */
static bool continues(const ac *a, const fc_node *u, const fc_value *v) {
    int s = conv_stage(v);
    if (!s || s == CHAIN_ACT || u->nout != 1 || a->all_uses[v->id] != 1) return false;
    if (u->op == FC_OP_RELU || u->op == FC_OP_GELU_TANH) return fc_dtype_is_float(u->out[0]->dtype);
    if (u->op != FC_OP_ADD || u->in[0]->weak || u->in[1]->weak) return false;
    const fc_value *y = u->in[0] == v ? u->in[1] : u->in[0];
    if (s == CHAIN_CONV && y->rank == 1 && y->rank < v->rank) return true;
    if (s == CHAIN_RESIDUAL || !fc_same_dims(y, u->out[0])) return false;
    if (!conv_result(y) || a->all_uses[y->id] != 1) return true;
    const fc_node *cv = chain_conv(v), *cy = chain_conv(y);
    return cv && cy && a->pos[cv->id] < a->pos[cy->id];
}

/* v ends a convolution's chain: torch.autocast returns a convolution's
 * result in the low dtype, and so the value the library call writes (the
 * convolution with the tail the epilogue folds) is stored low whatever
 * reads it; the ops after it read it widened, exactly. */
static bool conv_end(const ac *a, const fc_value *v) {
    if (!conv_stage(v)) return false;
    const fc_node *u = a->user[v->id];
    return !(u && continues(a, u, v));
}

/* v is a constant vector a product's result may add as its bias: a
 * parameter, or a `full` (the zero bias an exporter shares between
 * layers). */
static bool constant_bias(const fc_value *v) {
    if (v->weak || v->rank != 1) return false;
    return v->param_index >= 0 || (v->def && v->def->op == FC_OP_FULL);
}

/* v is a matmul's result, or that plus a constant bias: what one GEMM
 * writes (before an activation or a residual). */
static bool product_sum(const fc_value *v) {
    const fc_node *d = v->def;
    if (!d || v->weak) return false;
    if (d->op == FC_OP_MATMUL) return true;
    if (d->op != FC_OP_ADD) return false;
    for (int k = 0; k < 2; k++) {
        const fc_value *x = d->in[k], *b = d->in[1 - k];
        if (!x->weak && x->def && x->def->op == FC_OP_MATMUL && constant_bias(b) && b->rank < v->rank) return true;
    }
    return false;
}

/* v, the sum of a matmul's result and a bias, is stored low, or its one
 * use is a relu or gelu_tanh whose result is (see the file comment). A
 * convolution's sum may first take its residual, as the library's
 * epilogue does: conv + bias + residual, then the activation. Every user
 * of v is decided: they come after v's add in the graph. */
static bool tail_low(const ac *a, const fc_value *v) {
    if (a->store_low[v->id]) return true;
    const fc_node *u = a->user[v->id];
    if (a->uses[v->id] != 1 || !u) return false;
    if (u->op == FC_OP_ADD && (conv_result(v) || product_sum(v))) return tail_low(a, u->out[0]);
    if (u->op != FC_OP_RELU && u->op != FC_OP_GELU_TANH) return false;
    return a->store_low[u->out[0]->id];
}

/* v is a matmul's or a convolution's result (a matmul's with its bias),
 * through views: a value torch.autocast holds in the low dtype. */
static bool viewed_product(const fc_value *v) {
    while (v->def && is_plain_view(v->def->op)) v = v->def->in[0];
    return product_sum(v) || (v->def && v->def->op == FC_OP_CONV_CL);
}

/* Does operand k of n read its value in the low dtype anyway? n's results
 * are decided (every user of them comes later in the graph). */
static bool use_reads_low(const ac *a, const fc_node *n, int k) {
    if (list_of(n->op) == LIST_LOW) return low_operand(n, k);
    if (is_plain_view(n->op)) {
        for (int r = 0; r < n->nout; r++)
            if (!a->store_low[n->out[r]->id]) return false;
        return true;
    }
    /* A scale of a product, whose result is stored low, reads its operand
     * low, as torch.autocast computes it (the product is low there): the
     * exporters write attention's 1/sqrt(d) as a scale of Q and of K^T
     * before the scores' matmul, and so the projection that makes Q and K
     * stays one low GEMM whose result the attention reads in place (the
     * attention pass folds the scale into its own, in f32). */
    if (is_scale(n) && !n->in[k]->weak && viewed_product(n->in[k])) return a->store_low[n->out[0]->id];
    if (n->op == FC_OP_ADD) {
        const fc_value *bias = n->in[k], *other = n->in[1 - k];
        if (other->weak || !other->def) return false;
        if (constant_bias(bias) && bias->rank < n->out[0]->rank && products_in_f32(other->def->op))
            return tail_low(a, n->out[0]);
        /* The residual of a GEMM's sum, when the sum with it is stored
         * low: as a convolution's below, the library reads it in the
         * result's dtype, and so one GEMM writes the low sum (a
         * convolutional network whose 1x1 convolutions are GEMMs). The
         * operand that is the GEMM's own sum (used only here) stays f32;
         * of two such sums, the first in the graph is the GEMM's own. */
        if (product_sum(other) && a->all_uses[other->id] == 1 && fc_same_dims(bias, n->out[0]) &&
            a->store_low[n->out[0]->id]) {
            bool own = product_sum(bias) && a->all_uses[bias->id] == 1 && a->pos[bias->def->id] < a->pos[other->def->id];
            return !own;
        }
        /* A convolution's bias or residual, when the sum is stored low:
         * the residual stream of a 16-bit convolutional network is 16-bit
         * (a convolution under torch.autocast returns the low dtype, and
         * sums of low values stay low), and the library reads it so. The
         * operand whose chain the add continues is the convolution's own
         * sum, not its residual, and stays f32. */
        return continues(a, n, other) && tail_low(a, n->out[0]);
    }
    return false;
}

/* A widened low value (what this pass writes for a matmul's operand) has
 * its low form already: storing it low again would only add casts. */
static void decide(ac *a, const fc_value *v) {
    bool all_low = a->uses[v->id] > 0 && a->ok_uses[v->id] == a->uses[v->id] && !widened_from_low(a, v);
    a->store_low[v->id] = v->dtype == FC_F32 && (all_low || conv_end(a, v));
}

/* Every node's position and every value's uses (a graph result is one). */
static void count_uses(ac *a) {
    fc_graph *g = a->g;
    memset(a->all_uses, 0, sizeof *a->all_uses * (size_t)(a->nvals + 1));
    for (int i = 0; i < g->noutputs; i++) a->all_uses[g->outputs[i]->id]++;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        a->pos[n->id] = i;
        for (int k = 0; !n->dead && k < n->nin; k++)
            if (!n->in[k]->weak) a->all_uses[n->in[k]->id]++;
    }
}

/* One walk from the last node to the first: a value is decided when the
 * walk reaches its producer, since every user of it came before. */
static void find_low_values(ac *a) {
    fc_graph *g = a->g;
    for (int i = 0; i < g->noutputs; i++) a->uses[g->outputs[i]->id]++; /* the caller reads its dtype */
    for (int i = g->nnodes - 1; i >= 0; i--) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int r = 0; r < n->nout; r++) decide(a, n->out[r]);
        for (int k = 0; k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (v->weak) continue;
            a->uses[v->id]++;
            a->ok_uses[v->id] += use_reads_low(a, n, k);
            a->user[v->id] = n;
        }
    }
    for (int i = 0; i < g->nparams; i++) decide(a, g->params[i]);
}

/* ------------------------------------------------------------------ */
/* The rebuild                                                         */
/* ------------------------------------------------------------------ */

/* What old value v stands for now. */
static fc_value *now(const ac *a, fc_rewriter *rw, fc_value *v) {
    if (!v->weak && v->id >= 0 && v->id < a->nvals && a->cur[v->id]) return a->cur[v->id];
    return fc_rw_value(rw, v);
}

/* The operands of n as they are now, adjusted to n's list; true when n must
 * be rebuilt (an operand or an attribute changed). */
static bool operands_for(ac *a, fc_rewriter *rw, fc_node *n, fc_value **in, fc_attrs *at) {
    bool changed = false;
    *at = n->a;
    for (int k = 0; k < n->nin; k++) {
        in[k] = now(a, rw, n->in[k]);
        changed |= !n->in[k]->weak && in[k]->dtype != n->in[k]->dtype;
    }
    switch (list_of(n->op)) {
    case LIST_LOW: {
        int nlow = products_in_f32(n->op) ? 2 : 3;
        bool any = false;
        for (int k = 0; k < nlow; k++) {
            const fc_value *v = n->in[k];
            if (v->dtype == FC_F64 || !fc_dtype_is_float(v->dtype)) return changed;
            any |= v->dtype != a->low && !(products_in_f32(n->op) && widened_from_low(a, v));
        }
        /* Already low as written (a 16-bit graph, or this pass's own
         * output: the pass is idempotent). */
        if (!any) return changed;
        for (int k = 0; k < nlow; k++) {
            in[k] = fc_rw_cast(rw, in[k], a->low);
            if (products_in_f32(n->op)) in[k] = fc_rw_cast(rw, in[k], FC_F32);
            if (!in[k]) return true;
        }
        if (n->op == FC_OP_CONV_CL) at->dtype = FC_F32; /* the products' dtype, as a matmul's */
        return true;
    }
    case LIST_F32:
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k]->weak || !is_narrow(in[k]->dtype)) continue;
            in[k] = fc_rw_cast(rw, in[k], FC_F32);
            changed = true;
        }
        return changed;
    case LIST_PROMOTE:
        break;
    }
    /* A constant bias that some GEMMs read low and others in f32 (a zero
     * bias shared by layers whose results are stored differently): the
     * uses that read it low get a low copy, made once (at load, or folded
     * for a `full`), so that each GEMM folds its bias. */
    for (int k = 0; !a->widen && n->op == FC_OP_ADD && k < 2; k++) {
        fc_value *v = n->in[k];
        if (!constant_bias(v) || v->dtype != FC_F32 || v->id >= a->nvals || a->store_low[v->id] || !use_reads_low(a, n, k))
            continue;
        if (!a->low_copy[v->id]) a->low_copy[v->id] = fc_rw_cast(rw, in[k], a->low);
        if (!(in[k] = a->low_copy[v->id])) return true;
        changed = true;
    }
    if (!a->widen) return changed;
    /* f32 throughout: 16-bit casts and constants become f32. */
    if ((n->op == FC_OP_CAST || n->op == FC_OP_FULL || n->op == FC_OP_IOTA) && is_narrow(at->dtype)) {
        at->dtype = FC_F32;
        changed = true;
    }
    return changed;
}

/* n's results are now the values in out[]: record them, storing low what
 * was decided so. */
static void place_results(ac *a, fc_rewriter *rw, fc_node *n, fc_value **out) {
    for (int r = 0; r < n->nout; r++) {
        fc_value *old = n->out[r], *v = out[r];
        if (!v) return;
        if (v != old && !v->name) v->name = old->name;
        if (a->store_low[old->id]) v = fc_rw_cast(rw, v, a->low);
        if (!v) return;
        if (fc_same_type(v, old)) {
            if (v != old) fc_rw_replace(rw, old, v);
        } else {
            a->cur[old->id] = v;
        }
    }
}

static fc_status rebuild(ac *a) {
    fc_graph *g = a->g;
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) return g->status;
    /* Parameters read in another dtype: one cast each, before everything. */
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = g->params[i];
        bool widen = a->widen && is_narrow(p->dtype);
        if (widen || a->store_low[p->id]) a->cur[p->id] = fc_rw_cast(&rw, p, a->low);
    }
    fc_value **in = a->in, **out = a->out;
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_attrs at;
        if (!operands_for(a, &rw, n, in, &at)) {
            fc_rw_remap(&rw, n);
            fc_rw_keep(&rw, n);
            memcpy(out, n->out, sizeof *out * (size_t)n->nout);
        } else if (n->op == FC_OP_CAST && in[0]->dtype == at.dtype) {
            out[0] = in[0]; /* a cast the new dtypes made empty (f32 throughout) */
        } else {
            fc_node *m = fc_rw_build(&rw, n->op, in, n->nin, &at);
            if (!m) break;
            FC_ASSERT(m->nout == n->nout);
            memcpy(out, m->out, sizeof *out * (size_t)n->nout);
        }
        place_results(a, &rw, n, out);
    }
    /* Results keep their declared dtypes: cast back once, at the end. */
    for (int i = 0; i < g->noutputs && !g->status; i++) {
        fc_value *y = g->outputs[i];
        if (y->param_index >= 0 || y->id < 0 || y->id >= a->nvals || !a->cur[y->id]) continue;
        fc_value *c = fc_rw_cast(&rw, a->cur[y->id], y->dtype);
        if (c) fc_rw_replace(&rw, y, c);
    }
    return fc_rw_end(&rw);
}

static bool needs_work(const fc_graph *g, bool widen) {
    for (int i = 0; i < g->nparams; i++)
        if (widen ? is_narrow(g->params[i]->dtype) : g->params[i]->dtype == FC_F32) return true;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        for (int r = 0; !n->dead && r < n->nout; r++)
            if (widen ? is_narrow(n->out[r]->dtype) : n->out[r]->dtype == FC_F32) return true;
    }
    return false;
}

fc_status fc_pass_autocast(fc_graph *g, fc_precision p) {
    fc_status st = fc_pass_precheck(g, "autocast");
    if (st) return st;
    ac a = {.g = g, .nvals = g->next_value_id};
    switch (p) {
    case FC_PRECISION_BF16: a.low = FC_BF16; break;
    case FC_PRECISION_F16: a.low = FC_F16; break;
    case FC_PRECISION_F32:
        a.low = FC_F32;
        a.widen = true;
        break;
    default: return FC_OK;
    }
    if (!needs_work(g, a.widen)) return FC_OK;
    size_t n = (size_t)a.nvals + 1, nio = 1;
    for (int i = 0; i < g->nnodes; i++) {
        if ((size_t)g->nodes[i]->nin > nio) nio = (size_t)g->nodes[i]->nin;
        if ((size_t)g->nodes[i]->nout > nio) nio = (size_t)g->nodes[i]->nout;
    }
    a.in = fc_ctx_malloc(g->ctx, nio * sizeof *a.in);
    a.out = fc_ctx_malloc(g->ctx, nio * sizeof *a.out);
    a.cur = fc_ctx_malloc(g->ctx, n * sizeof *a.cur);
    a.store_low = fc_ctx_malloc(g->ctx, n * sizeof *a.store_low);
    a.uses = fc_ctx_malloc(g->ctx, n * sizeof *a.uses);
    a.ok_uses = fc_ctx_malloc(g->ctx, n * sizeof *a.ok_uses);
    a.user = fc_ctx_malloc(g->ctx, n * sizeof *a.user);
    a.pos = fc_ctx_malloc(g->ctx, ((size_t)g->next_node_id + 1) * sizeof *a.pos);
    a.all_uses = fc_ctx_malloc(g->ctx, n * sizeof *a.all_uses);
    a.low_copy = fc_ctx_malloc(g->ctx, n * sizeof *a.low_copy);
    if (!a.cur || !a.store_low || !a.uses || !a.ok_uses || !a.user || !a.pos || !a.all_uses || !a.low_copy || !a.in ||
        !a.out) {
        st = g->status = FC_ERR_NOMEM;
    } else {
        memset(a.cur, 0, n * sizeof *a.cur);
        memset(a.store_low, 0, n * sizeof *a.store_low);
        memset(a.uses, 0, n * sizeof *a.uses);
        memset(a.ok_uses, 0, n * sizeof *a.ok_uses);
        memset(a.user, 0, n * sizeof *a.user);
        memset(a.low_copy, 0, n * sizeof *a.low_copy);
        count_uses(&a);
        if (!a.widen) find_low_values(&a);
        st = rebuild(&a);
    }
    void *scratch[] = {a.cur, a.store_low, a.uses, a.ok_uses, a.user, a.pos, a.all_uses, a.low_copy, a.in, a.out};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) fc_ctx_freemem(g->ctx, scratch[i]);
    return st;
}

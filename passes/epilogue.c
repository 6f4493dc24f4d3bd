/*
 * epilogue.c - GEMM epilogue fusion and horizontal GEMM fusion.
 *
 * Two rewrites, each one rebuild of the graph (passes/rewrite.h), then DCE.
 *
 * 1. Epilogues. Every matmul of f32/f16/bf16 matrices (rank >= 2) becomes a
 *    `gemm` node, absorbing what cuBLASLt does for free:
 *
 *      operands  permute(x) of the last two dims   -> trans_a / trans_b
 *                cast(x16 -> f32) on both operands -> 16-bit inputs, f32 out
 *      tail      mul or div by a number            -> scale (alpha)
 *                add of a row vector [.., N]       -> bias
 *                add of a same-shape tensor        -> residual (C, beta = 1)
 *                relu, gelu_tanh                   -> the activation
 *                cast                              -> the result's dtype
 *
 *    in this order: the tail is read from the matmul forward, each step must
 *    be the only user of the value before it (and that value no graph
 *    result), and it stops at the first op that does not fit. Bias and
 *    residual adds may come in either order but only before the activation:
 *    cuBLASLt computes act(alpha * A B + beta * C + bias). Whatever does not
 *    fit (erf gelu, silu, a residual after the activation, silu(g) * u)
 *    stays in the graph, where vertical fusion makes it one kernel reading
 *    the gemm's result once.
 *
 *    A tail is only folded when the gemm computes what the graph means, up
 *    to the tolerance of the result's dtype D (see prefix_ok): cuBLASLt
 *    rounds once, at the end, where the graph rounds after every op. That
 *    is at least as precise as the graph whenever every value it skips
 *    rounding is D or f32. A bf16 matmul whose result is cast to f32 is
 *    therefore not folded (the bf16 rounding is part of what it means), and
 *    neither is a bias of a dtype other than D (cuBLASLt reads the bias as
 *    D's type).
 *
 * 2. Horizontal fusion. Single-weight gemms that read the same left operand
 *    with the same flags, scale and dtype, whose right operands (and
 *    biases) are graph parameters of rank 2 (a bias may also be a constant
 *    vector, a full), become one gemm over all the weights; each old result is a slice of the new one (a view, which
 *    fusion inlines into the kernels that read it). The concatenated weight
 *    is built by the runtime once, on the first run (runtime/cublaslt.c),
 *    which is why the weights must be parameters the user keeps constant
 *    between runs (docs/GEMM.md).
 */
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The gemm node                                                        */
/* ------------------------------------------------------------------ */

bool fc_gemm_info_of(const fc_node *n, fc_gemm_info *gi) {
    memset(gi, 0, sizeof *gi);
    gi->alpha = 1.0;
    if (n->op == FC_OP_MATMUL) {
        gi->nweights = 1;
        gi->out = n->out[0]->dtype;
        gi->a = n->in[0];
        gi->w = &n->in[1];
        return true;
    }
    if (n->op != FC_OP_GEMM || n->a.nlist != FC_GEMM_SPEC_LEN) return false;
    const int64_t *s = n->a.list;
    gi->trans_a = s[FC_GEMM_TRANS_A] != 0;
    gi->trans_b = s[FC_GEMM_TRANS_B] != 0;
    gi->nweights = (int)s[FC_GEMM_NWEIGHTS];
    gi->has_bias = s[FC_GEMM_BIAS] != 0;
    gi->has_residual = s[FC_GEMM_RESIDUAL] != 0;
    gi->act = (fc_gemm_act)s[FC_GEMM_ACT];
    gi->alpha = n->a.scale;
    gi->out = n->a.dtype;
    gi->a = n->in[0];
    gi->w = &n->in[1];
    gi->bias = gi->has_bias ? &n->in[1 + gi->nweights] : NULL;
    gi->residual = gi->has_residual ? n->in[n->nin - 1] : NULL;
    return true;
}

/* Append ",text" (or "text" first) to buf[0 .. *len). */
static void add_flag(char *buf, size_t size, size_t *len, const char *text) {
    if (*len >= size) return;
    int n = snprintf(buf + *len, size - *len, "%s%s", *len ? "," : "", text);
    *len += n > 0 ? (size_t)n : 0;
}

const char *fc_gemm_describe(const fc_node *n, char *buf, size_t size) {
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi)) {
        snprintf(buf, size, "%s", fc_op_table[n->op].name);
        return buf;
    }
    char flags[160] = "", tmp[48];
    size_t len = 0;
    if (gi.trans_a) add_flag(flags, sizeof flags, &len, "trans_a");
    if (gi.trans_b) add_flag(flags, sizeof flags, &len, "trans_b");
    if (gi.nweights > 1) {
        snprintf(tmp, sizeof tmp, "x%d", gi.nweights);
        add_flag(flags, sizeof flags, &len, tmp);
    }
    if (gi.alpha != 1.0) {
        snprintf(tmp, sizeof tmp, "scale=%g", gi.alpha);
        add_flag(flags, sizeof flags, &len, tmp);
    }
    if (gi.has_bias) add_flag(flags, sizeof flags, &len, "bias");
    if (gi.has_residual) add_flag(flags, sizeof flags, &len, "residual");
    if (gi.act == FC_GEMM_ACT_RELU) add_flag(flags, sizeof flags, &len, "relu");
    if (gi.act == FC_GEMM_ACT_GELU_TANH) add_flag(flags, sizeof flags, &len, "gelu_tanh");
    snprintf(buf, size, "%s%s%s%s -> %s", fc_op_table[n->op].name, len ? "[" : "", flags, len ? "]" : "",
             fc_dtype_name(gi.out));
    return buf;
}

/* ------------------------------------------------------------------ */
/* Uses                                                                 */
/* ------------------------------------------------------------------ */

/* users[id]: the one live node reading value `id`, NULL when none, or
 * &several when it has more than one use (a graph result counts as one; a
 * node reading it twice counts twice). */
static fc_node several;

static fc_node **sole_users(fc_graph *g) {
    fc_node **users = fc_ctx_malloc(g->ctx, sizeof *users * (size_t)(g->next_value_id + 1));
    if (!users) return NULL;
    memset(users, 0, sizeof *users * (size_t)(g->next_value_id + 1));
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (v->weak || v->id < 0) continue;
            users[v->id] = users[v->id] ? &several : n;
        }
    }
    for (int k = 0; k < g->noutputs; k++) users[g->outputs[k]->id] = &several;
    return users;
}

/* ------------------------------------------------------------------ */
/* 1. Epilogues                                                         */
/* ------------------------------------------------------------------ */

typedef enum step_kind { STEP_SCALE, STEP_BIAS, STEP_RESIDUAL, STEP_ACT, STEP_CAST } step_kind;

typedef struct step {
    step_kind kind;
    fc_node *node;     /* the tail op */
    fc_value *operand; /* bias or residual */
    double scale;
    fc_gemm_act act;
} step;

#define MAX_STEPS 5 /* scale, bias, residual, activation, cast */

/* One matmul and the part of its tail that folds. */
typedef struct chain {
    fc_node *mm;
    fc_value *a, *b; /* the operands the gemm reads (permutes and casts peeled) */
    bool ta, tb;
    step steps[MAX_STEPS];
    int nsteps;
} chain;

typedef struct epi {
    fc_graph *g;
    fc_node **users;
    bool *claimed;   /* by node id: already the tail of some chain */
    int *chain_at;   /* by node id: the chain whose gemm is built there, or -1 */
    bool *drop;      /* by node id: a matmul or tail op the gemm replaces */
    chain *chains;
    int nchains;
} epi;

static fc_node *sole_user(const epi *e, const fc_value *v) {
    fc_node *u = e->users[v->id];
    return u == &several ? NULL : u;
}

static bool is_gemm_dtype(fc_dtype dt) { return dt == FC_F32 || dt == FC_F16 || dt == FC_BF16; }

/* x, when v is permute(x) swapping exactly the last two dims: cuBLASLt reads
 * x with a transpose flag instead of a copy. */
static fc_value *peel_transpose(fc_value *v, bool *trans) {
    *trans = false;
    const fc_node *p = v->def;
    if (!p || p->op != FC_OP_PERMUTE || v->rank < 2) return v;
    for (int i = 0; i < v->rank; i++) {
        int64_t src = p->a.list[i] < 0 ? p->a.list[i] + v->rank : p->a.list[i];
        int64_t want = i == v->rank - 2 ? v->rank - 1 : i == v->rank - 1 ? v->rank - 2 : i;
        if (src != want) return v;
    }
    *trans = true;
    return p->in[0];
}

/* The 16-bit source of cast(x16 -> f32), else NULL. The cast is exact, and
 * a 16-bit GEMM accumulating in f32 computes what the f32 matmul of the
 * widened values computes, so the gemm reads the 16-bit tensors directly
 * (autocast graphs: cast in, f32 matmul and tail, cast out). */
static fc_value *widened_from(fc_value *v) {
    const fc_node *c = v->def;
    if (!c || c->op != FC_OP_CAST || v->dtype != FC_F32) return NULL;
    fc_dtype src = c->in[0]->dtype;
    return src == FC_F16 || src == FC_BF16 ? c->in[0] : NULL;
}

/* A row vector broadcast along the rows of x: shape [.., N] with N the last
 * dim of x and every other dim 1, at most x's rank. */
static bool is_row_vector(const fc_value *v, const fc_value *x) {
    if (v->weak || v->rank < 1 || v->rank > x->rank || v->dims[v->rank - 1] != x->dims[x->rank - 1]) return false;
    for (int d = 0; d + 1 < v->rank; d++)
        if (v->dims[d] != 1) return false;
    return true;
}

/* Read the tail of the matmul's result forward as far as it has the shape of
 * the gemm's steps; prefix_ok then decides how much of it folds. */
static int match_tail(const epi *e, const fc_node *mm, step *steps) {
    const fc_value *cur = mm->out[0];
    bool have_scale = false, have_bias = false, have_res = false, have_act = false;
    int n = 0;
    while (n < MAX_STEPS) {
        fc_node *u = sole_user(e, cur);
        if (!u || e->claimed[u->id] || u->nout != 1 || !fc_same_dims(u->out[0], cur)) break;
        step st = {.node = u, .scale = 1.0};
        int self = u->in[0] == cur ? 0 : 1;
        fc_value *other = u->nin == 2 ? u->in[1 - self] : NULL;
        bool ok = true;
        switch (u->op) {
        case FC_OP_MUL:
        case FC_OP_DIV: {
            /* Only right after the product: alpha scales A B alone (a
             * convolution's epilogue has no scale). */
            ok = !have_scale && !have_bias && !have_res && !have_act && other->weak && mm->op != FC_OP_CONV_CL;
            if (!ok) break;
            /* The number as the graph uses it: in the tensor's dtype. */
            double s = fc_round_to_dtype(other->scalar, u->out[0]->dtype);
            if (u->op == FC_OP_DIV) {
                ok = self == 0 && s != 0 && isfinite(s);
                s = 1.0 / s;
            }
            st.kind = STEP_SCALE;
            st.scale = s;
            have_scale = true;
            break;
        }
        case FC_OP_ADD:
            ok = !have_act && !other->weak;
            if (!ok) break;
            if (!have_bias && is_row_vector(other, cur) && (mm->op != FC_OP_CONV_CL || other->rank == 1)) {
                st.kind = STEP_BIAS;
                have_bias = true;
            } else if (!have_res && fc_same_dims(other, cur)) {
                st.kind = STEP_RESIDUAL;
                have_res = true;
            } else {
                ok = false;
            }
            st.operand = other;
            break;
        case FC_OP_RELU:
        case FC_OP_GELU_TANH:
            ok = !have_act && fc_dtype_is_float(u->out[0]->dtype);
            st.kind = STEP_ACT;
            st.act = u->op == FC_OP_RELU ? FC_GEMM_ACT_RELU : FC_GEMM_ACT_GELU_TANH;
            have_act = true;
            break;
        case FC_OP_CAST:
            st.kind = STEP_CAST;
            steps[n++] = st;
            return n; /* the result's dtype: nothing folds after it */
        default:
            ok = false;
        }
        if (!ok) break;
        steps[n++] = st;
        cur = u->out[0];
    }
    return n;
}

/*
 * Can the gemm stop after the first `len` steps? `ab` is the dtype cuBLASLt
 * reads A and B in. Its result dtype D is the last step's (the matmul's for
 * len 0). cuBLASLt gives D = ab or f32, with bias and residual of dtype D.
 * And every value whose rounding the gemm skips (the matmul's result and
 * each step's but the last) must be D or f32: rounding there is finer than
 * at the end, so the gemm is within D's tolerance of the graph.
 */
static fc_value *narrowed(fc_value *v, fc_dtype d);

static bool prefix_ok(const fc_node *mm, fc_dtype ab, const step *s, int len) {
    fc_dtype d = len ? s[len - 1].node->out[0]->dtype : mm->out[0]->dtype;
    if (d != ab && d != FC_F32) return false;
    for (int i = -1; i < len - 1; i++) {
        fc_dtype di = i < 0 ? mm->out[0]->dtype : s[i].node->out[0]->dtype;
        if (di != d && di != FC_F32) return false;
    }
    for (int i = 0; i < len; i++)
        if ((s[i].kind == STEP_BIAS || s[i].kind == STEP_RESIDUAL) && s[i].operand->dtype != d &&
            !(mm->op == FC_OP_CONV_CL && narrowed(s[i].operand, d)))
            return false;
    return true;
}

/* A convolution's bias or residual as the node reads it at result dtype
 * d: v, or the 16-bit value v widens (autocast stores a convolutional
 * network's residual stream low and widens it for the f32 sum; the
 * widening is exact, so the library reads the 16-bit tensor). */
static fc_value *narrowed(fc_value *v, fc_dtype d) {
    fc_value *w = widened_from(v);
    return v->dtype == d ? v : w && w->dtype == d ? w : NULL;
}

/* A conv_cl as lower_conv makes it: no epilogue yet. */
static bool bare_conv(const fc_node *n) {
    if (n->op != FC_OP_CONV_CL || n->nin != 2 || n->a.nlist < FC_CONV_EPI_LEN) return false;
    const int64_t *e = n->a.list + n->a.nlist - FC_CONV_EPI_LEN;
    return !e[FC_CONV_BIAS] && !e[FC_CONV_RESIDUAL] && !e[FC_CONV_ACT];
}

/* A head of an epilogue chain: a matmul, or a convolution the library
 * runs. */
static bool chain_head(const fc_node *n) { return !n->dead && (n->op == FC_OP_MATMUL || bare_conv(n)); }

/* The chain of matmul (or conv_cl) mm, or false when mm stays a matmul
 * (rank-1 operands, f64, or what cuBLASLt cannot take). */
static bool make_chain(epi *e, fc_node *mm, chain *c) {
    memset(c, 0, sizeof *c);
    c->mm = mm;
    fc_value *a = mm->in[0], *b = mm->in[1];
    if (a->rank < 2 || b->rank < 2 || !is_gemm_dtype(a->dtype)) return false;
    if (mm->op == FC_OP_CONV_CL) {
        /* conv_cl takes its operands as they are: only the widening
         * casts of autocast peel */
        fc_value *a16 = widened_from(a), *b16 = widened_from(b);
        if (a16 && b16 && a16->dtype == b16->dtype) {
            a = a16;
            b = b16;
        }
        c->a = a;
        c->b = b;
        step steps[MAX_STEPS];
        int n = match_tail(e, mm, steps);
        while (n > 0 && !prefix_ok(mm, a->dtype, steps, n)) n--;
        fc_dtype d = n ? steps[n - 1].node->out[0]->dtype : mm->out[0]->dtype;
        for (int i = 0; i < n; i++)
            if (steps[i].operand) steps[i].operand = narrowed(steps[i].operand, d);
        memcpy(c->steps, steps, sizeof steps[0] * (size_t)n);
        c->nsteps = n;
        return true;
    }
    fc_value *a16 = widened_from(a), *b16 = widened_from(b);
    if (a16 && b16 && a16->dtype == b16->dtype) {
        a = a16;
        b = b16;
    }
    c->a = peel_transpose(a, &c->ta);
    c->b = peel_transpose(b, &c->tb);
    step steps[MAX_STEPS];
    int n = match_tail(e, mm, steps);
    while (n > 0 && !prefix_ok(mm, a->dtype, steps, n)) n--;
    /* With no tail the gemm's result is the matmul's (f32 for widened
     * inputs, else their dtype): always a result cuBLASLt gives. */
    FC_ASSERT(prefix_ok(mm, a->dtype, steps, n));
    memcpy(c->steps, steps, sizeof steps[0] * (size_t)n);
    c->nsteps = n;
    return true;
}

/* The operands of chain c's node: a, b, then the bias and the residual its
 * tail adds (their flags set in bias_flag, res_flag; the activation in
 * act, the scale in *scale). Returns how many. */
static int chain_operands(fc_rewriter *rw, const chain *c, fc_value **in, int64_t *bias_flag, int64_t *res_flag,
                          int64_t *act, double *scale) {
    fc_value *bias = NULL, *res = NULL;
    for (int i = 0; i < c->nsteps; i++) {
        const step *s = &c->steps[i];
        switch (s->kind) {
        case STEP_SCALE: *scale = s->scale; break;
        case STEP_BIAS: bias = s->operand; break;
        case STEP_RESIDUAL: res = s->operand; break;
        case STEP_ACT: *act = s->act; break;
        case STEP_CAST: break; /* the result's dtype */
        }
    }
    int nin = 0;
    in[nin++] = fc_rw_value(rw, c->a);
    in[nin++] = fc_rw_value(rw, c->b);
    *bias_flag = bias != NULL;
    *res_flag = res != NULL;
    if (bias) in[nin++] = fc_rw_value(rw, bias);
    if (res) in[nin++] = fc_rw_value(rw, res);
    return nin;
}

/* The dtype of chain c's result: its last step's. */
static fc_dtype chain_dtype(const chain *c) {
    return c->nsteps ? c->steps[c->nsteps - 1].node->out[0]->dtype : c->mm->out[0]->dtype;
}

/* Build the gemm of chain c here; returns its result. */
static fc_value *build_gemm(fc_rewriter *rw, const chain *c) {
    int64_t spec[FC_GEMM_SPEC_LEN] = {0};
    spec[FC_GEMM_TRANS_A] = c->ta;
    spec[FC_GEMM_TRANS_B] = c->tb;
    spec[FC_GEMM_NWEIGHTS] = 1;
    fc_attrs at;
    fc_attrs_defaults(FC_OP_GEMM, &at);
    at.dtype = chain_dtype(c);
    fc_value *in[4];
    int nin = chain_operands(rw, c, in, &spec[FC_GEMM_BIAS], &spec[FC_GEMM_RESIDUAL], &spec[FC_GEMM_ACT], &at.scale);
    at.list = spec;
    at.nlist = FC_GEMM_SPEC_LEN;
    fc_node *n = fc_rw_build(rw, FC_OP_GEMM, in, nin, &at);
    return n ? n->out[0] : NULL;
}

/* Build the conv_cl of chain c here, its tail in the window's epilogue
 * entries (a convolution's tail has no scale: match_tail); returns its
 * result. */
static fc_value *build_conv(fc_rewriter *rw, const chain *c) {
    const fc_node *cv = c->mm;
    int64_t win[4 * FC_MAX_SPATIAL + FC_CONV_EPI_LEN];
    int nl = cv->a.nlist;
    memcpy(win, cv->a.list, sizeof win[0] * (size_t)nl);
    int64_t *e = win + nl - FC_CONV_EPI_LEN;
    fc_attrs at = cv->a;
    at.list = win;
    at.dtype = chain_dtype(c);
    fc_value *in[4];
    double scale = 1.0;
    int nin = chain_operands(rw, c, in, &e[FC_CONV_BIAS], &e[FC_CONV_RESIDUAL], &e[FC_CONV_ACT], &scale);
    fc_node *n = fc_rw_build(rw, FC_OP_CONV_CL, in, nin, &at);
    return n ? n->out[0] : NULL;
}

static fc_status epilogues(fc_graph *g) {
    int nmatmul = 0;
    for (int i = 0; i < g->nnodes; i++) nmatmul += chain_head(g->nodes[i]);
    if (nmatmul == 0) return FC_OK;
    epi e = {.g = g};
    size_t nn = (size_t)g->next_node_id + 1;
    e.users = sole_users(g);
    e.claimed = fc_ctx_malloc(g->ctx, nn * sizeof *e.claimed);
    e.drop = fc_ctx_malloc(g->ctx, nn * sizeof *e.drop);
    e.chain_at = fc_ctx_malloc(g->ctx, nn * sizeof *e.chain_at);
    e.chains = fc_ctx_malloc(g->ctx, (size_t)nmatmul * sizeof *e.chains);
    fc_status st = FC_OK;
    if (!e.users || !e.claimed || !e.drop || !e.chain_at || !e.chains) {
        st = g->status = FC_ERR_NOMEM;
        goto out;
    }
    memset(e.claimed, 0, nn * sizeof *e.claimed);
    memset(e.drop, 0, nn * sizeof *e.drop);
    for (size_t i = 0; i < nn; i++) e.chain_at[i] = -1;

    /* Match every matmul's tail first: a tail op belongs to the first
     * matmul (in graph order) that reaches it, so add(mm1, mm2) makes mm2
     * the residual of mm1's gemm, and mm2 a plain gemm. */
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (!chain_head(n)) continue;
        chain *c = &e.chains[e.nchains];
        if (!make_chain(&e, n, c)) continue;
        fc_node *last = c->nsteps ? c->steps[c->nsteps - 1].node : n;
        e.drop[n->id] = true;
        for (int k = 0; k < c->nsteps; k++) {
            e.claimed[c->steps[k].node->id] = true;
            e.drop[c->steps[k].node->id] = true;
        }
        e.chain_at[last->id] = e.nchains++;
    }
    if (e.nchains == 0) goto out;

    /* Rebuild: each gemm takes the place of the last op it absorbs, where
     * every operand it reads is defined; the other absorbed ops go. */
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) {
        st = g->status;
        goto out;
    }
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        int ci = e.chain_at[n->id];
        if (ci >= 0) {
            const chain *c = &e.chains[ci];
            fc_value *y = c->mm->op == FC_OP_CONV_CL ? build_conv(&rw, c) : build_gemm(&rw, c);
            if (y) {
                y->name = n->out[0]->name; /* the value it stands for: plans read as the graph */
                fc_rw_replace(&rw, n->out[0], y);
            }
        } else if (!e.drop[n->id]) {
            fc_rw_keep(&rw, n);
        }
    }
    st = fc_rw_end(&rw);
out:
    fc_ctx_freemem(g->ctx, e.users);
    fc_ctx_freemem(g->ctx, e.claimed);
    fc_ctx_freemem(g->ctx, e.drop);
    fc_ctx_freemem(g->ctx, e.chain_at);
    fc_ctx_freemem(g->ctx, e.chains);
    return st;
}

/* ------------------------------------------------------------------ */
/* 2. Horizontal fusion                                                 */
/* ------------------------------------------------------------------ */

static bool is_param(const fc_value *v) { return !v->def && !v->weak && v->param_index >= 0; }

/* A parameter cast to another dtype (autocast's form of an f32 model's
 * weight), whose cast comes before node position `before`. */
static bool is_cast_param(const fc_value *v, const int *pos, int before) {
    return v->def && v->def->op == FC_OP_CAST && is_param(v->def->in[0]) && pos[v->def->id] < before;
}

/* A constant vector: an exported model's bias that is one repeated value
 * (a freshly initialized model's zeros), which the importer makes a full.
 * The merged gemm gets a full of its own in its place (made where the
 * group is, so wherever the old one was placed does not matter), which
 * runs at weight load. */
static bool is_full_vector(const fc_value *v) { return v->def && v->def->op == FC_OP_FULL && v->rank == 1; }

/* A gemm that may join siblings: one weight, a parameter matrix or a cast
 * of one (and such a bias, or a constant one), no residual (residuals are
 * per-call data, not weights). A cast must come before the gemm at
 * position i. */
static bool can_join(const fc_node *n, const int *pos, int i) {
    fc_gemm_info gi;
    if (n->dead || n->op != FC_OP_GEMM || !fc_gemm_info_of(n, &gi)) return false;
    if (gi.nweights != 1 || gi.has_residual || gi.w[0]->rank != 2) return false;
    if (!is_param(gi.w[0]) && !is_cast_param(gi.w[0], pos, i)) return false;
    if (fc_dim_is_sym(gi.w[0]->dims[0]) || fc_dim_is_sym(gi.w[0]->dims[1])) return false;
    return !gi.has_bias || is_param(gi.bias[0]) || is_cast_param(gi.bias[0], pos, i) || is_full_vector(gi.bias[0]);
}

/* A copy of the full that v is, built at its first use (memo: by v's id,
 * so that groups sharing one bias, as an export's layers do, share one). */
static fc_value *fresh_full(fc_rewriter *rw, const fc_value *v, fc_value **memo) {
    if (memo[v->id]) return memo[v->id];
    fc_node *f = fc_rw_build(rw, FC_OP_FULL, NULL, 0, &v->def->a);
    return f ? (memo[v->id] = f->out[0]) : NULL;
}

/* The operands in[from .. from + n) joined along axis (a concat node). */
static fc_value *joined(fc_rewriter *rw, fc_value **in, int n, int axis) {
    fc_attrs at;
    fc_attrs_defaults(FC_OP_CONCAT, &at);
    at.axis = axis;
    fc_node *cat = fc_rw_build(rw, FC_OP_CONCAT, in, n, &at);
    return cat ? cat->out[0] : NULL;
}

/* Same left operand, flags, scale and result dtype. */
static bool siblings(const fc_node *x, const fc_node *y) {
    fc_gemm_info a, b;
    fc_gemm_info_of(x, &a);
    fc_gemm_info_of(y, &b);
    return a.a == b.a && a.trans_a == b.trans_a && a.trans_b == b.trans_b && a.has_bias == b.has_bias &&
           a.act == b.act && a.alpha == b.alpha && a.out == b.out && a.w[0]->dtype == b.w[0]->dtype;
}

static fc_status horizontal(fc_graph *g) {
    size_t nn = (size_t)g->next_node_id + 1;
    int *leader = fc_ctx_malloc(g->ctx, nn * sizeof *leader); /* by node id: first sibling's id, or -1 */
    int *size = fc_ctx_malloc(g->ctx, nn * sizeof *size);     /* by leader id: siblings in its group */
    if (!leader || !size) {
        fc_ctx_freemem(g->ctx, leader);
        fc_ctx_freemem(g->ctx, size);
        return g->status = FC_ERR_NOMEM;
    }
    int groups = 0;
    /* size doubles as the node positions until the groups are found: a
     * cast weight must come before its group's first member. */
    int *pos = size;
    for (size_t i = 0; i < nn; i++) leader[i] = -1, pos[i] = INT32_MAX;
    for (int i = 0; i < g->nnodes; i++) pos[g->nodes[i]->id] = i;
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (!can_join(n, pos, i)) continue;
        leader[n->id] = n->id;
        for (int j = 0; j < i; j++) {
            fc_node *m = g->nodes[j];
            if (leader[m->id] == m->id && siblings(m, n) && can_join(n, pos, j)) {
                leader[n->id] = m->id;
                break;
            }
        }
    }
    for (size_t i = 0; i < nn; i++) size[i] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (leader[n->id] >= 0 && ++size[leader[n->id]] == 2) groups++;
    }
    if (groups == 0) {
        fc_ctx_freemem(g->ctx, leader);
        fc_ctx_freemem(g->ctx, size);
        return FC_OK;
    }

    /* Rebuild: at its first member (after which every operand exists, as
     * all are the shared left operand, parameters or casts of parameters
     * placed before it) a group becomes one gemm and a slice per member;
     * later members go. */
    fc_node **old = fc_ctx_malloc(g->ctx, sizeof *old * (size_t)(g->nnodes + 1));
    fc_value **in = fc_ctx_malloc(g->ctx, sizeof *in * (size_t)(2 * g->nnodes + 2));
    fc_value **memo = fc_ctx_malloc(g->ctx, sizeof *memo * (size_t)(g->next_value_id + 1));
    if (!old || !in || !memo) {
        fc_ctx_freemem(g->ctx, leader);
        fc_ctx_freemem(g->ctx, size);
        fc_ctx_freemem(g->ctx, old);
        fc_ctx_freemem(g->ctx, in);
        fc_ctx_freemem(g->ctx, memo);
        return g->status = FC_ERR_NOMEM;
    }
    memset(memo, 0, sizeof *memo * (size_t)(g->next_value_id + 1));
    int nold = g->nnodes;
    memcpy(old, g->nodes, sizeof *old * (size_t)nold);
    fc_rewriter rw;
    fc_status st = fc_rw_begin(&rw, g);
    if (st == FC_OK) {
        for (fc_node *n; (n = fc_rw_next(&rw));) {
            fc_rw_remap(&rw, n);
            int ld = leader[n->id];
            if (ld < 0 || size[ld] < 2) {
                fc_rw_keep(&rw, n);
                continue;
            }
            if (ld != n->id) continue; /* made at its leader */
            fc_gemm_info gi;
            fc_gemm_info_of(n, &gi);
            int k = 0, nmem = 0;
            bool all_params = true;
            in[k++] = fc_rw_value(&rw, gi.a);
            for (int j = 0; j < nold; j++)
                if (leader[old[j]->id] == ld) {
                    in[k] = fc_rw_value(&rw, old[j]->in[1]);
                    all_params &= is_param(in[k++]);
                    nmem++;
                }
            if (gi.has_bias) {
                /* A constant bias is as good as a parameter here: the
                 * runtime's kept concatenation takes a load-time result
                 * (as the padding pass's zero blocks are). Siblings that
                 * share one full share its copy. */
                for (int j = 0; j < nold; j++)
                    if (leader[old[j]->id] == ld) {
                        const fc_value *b = old[j]->in[2];
                        if (!is_full_vector(b)) in[k] = fc_rw_value(&rw, old[j]->in[2]);
                        else if (!(in[k] = fresh_full(&rw, b, memo))) break;
                        all_params &= is_param(in[k]) || is_full_vector(in[k]);
                        k++;
                    }
                if (k != 1 + 2 * nmem) break;
            }
            int nw = nmem;
            if (!all_params) {
                /* Cast weights: joined in the graph, by a concat that
                 * computes only from parameters (a load-time kernel,
                 * passes/loadtime.c), into one weight and one bias. The
                 * runtime's kept concatenation is for parameters alone. */
                in[1] = joined(&rw, in + 1, nmem, gi.trans_b ? 0 : 1);
                if (gi.has_bias) in[2] = joined(&rw, in + 1 + nmem, nmem, 0);
                if (!in[1] || (gi.has_bias && !in[2])) break;
                k = gi.has_bias ? 3 : 2;
                nw = 1;
            }
            fc_attrs at = n->a;
            int64_t spec[FC_GEMM_SPEC_LEN];
            memcpy(spec, n->a.list, sizeof spec);
            spec[FC_GEMM_NWEIGHTS] = nw;
            at.list = spec;
            at.nlist = FC_GEMM_SPEC_LEN;
            fc_node *big = fc_rw_build(&rw, FC_OP_GEMM, in, k, &at);
            if (!big) break;
            int64_t off = 0;
            int axis = big->out[0]->rank - 1;
            for (int j = 0; j < nold; j++) {
                fc_node *m = old[j];
                if (leader[m->id] != ld) continue;
                fc_value *y = m->out[0];
                int64_t cols = y->dims[y->rank - 1];
                fc_attrs sa;
                fc_attrs_defaults(FC_OP_SLICE, &sa);
                sa.axis = axis;
                sa.start = off;
                sa.end = off + cols;
                fc_node *sl = fc_rw_build(&rw, FC_OP_SLICE, &big->out[0], 1, &sa);
                if (!sl) break;
                sl->out[0]->name = y->name;
                if (!fc_rw_replace(&rw, y, sl->out[0])) break;
                off += cols;
            }
        }
        st = fc_rw_end(&rw);
    }
    fc_ctx_freemem(g->ctx, leader);
    fc_ctx_freemem(g->ctx, size);
    fc_ctx_freemem(g->ctx, old);
    fc_ctx_freemem(g->ctx, in);
    fc_ctx_freemem(g->ctx, memo);
    return st;
}

/* ------------------------------------------------------------------ */

fc_status fc_pass_epilogue(fc_graph *g) {
    if (!g) return FC_ERR_USAGE;
    if (g->status) return g->status;
    fc_status st = epilogues(g);
    if (st == FC_OK) st = horizontal(g);
    /* The permutes and casts the gemms read through may have no user left. */
    if (st == FC_OK) st = fc_pass_dce(g);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (epilogue fusion)");
    return st;
}

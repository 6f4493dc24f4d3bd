/*
 * recognize_gelu.c - GELU written out becomes the gelu op again.
 *
 *   tanh form (GPT-2's NewGELU, torch's approximate='tanh'):
 *       0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   -> gelu_tanh(x)
 *   erf form (BERT, torch's default):
 *       0.5 * x * (1 + erf(x / sqrt(2)))                           -> gelu(x)
 *
 * The three factors of the outer product may come in any order and
 * association (exporters write (x * 0.5) * (1 + ..), hand-written graphs
 * x * (..) * 0.5); x^3 is pow(x, 3) or x * x * x; x / sqrt(2) may be
 * x * (1 / sqrt(2)). Constants must be these numbers as x's dtype holds
 * them. gelu_tanh is one elementwise op that the GEMM epilogue takes (a
 * matmul + bias + GELU becomes one cuBLASLt call); gelu is lowered by
 * decompose to the primitives the hand-written gelu gives.
 */
#include "passes.h"
#include "recognize.h"
#include "rewrite.h"

#include <math.h>

#define MAX_FACTORS 4

/* The factors of a product of muls: v itself, or (when v is a mul that is
 * the root or used only by the product) its operands' factors. */
static int factors(const fc_rc *rc, fc_value *v, bool root, fc_value **f, int nf) {
    if (nf > MAX_FACTORS) return nf;
    if (fc_rc_op(v) == FC_OP_MUL && (root || fc_rc_private(rc, v, 1))) {
        nf = factors(rc, v->def->in[0], false, f, nf);
        return factors(rc, v->def->in[1], false, f, nf);
    }
    if (nf < MAX_FACTORS) f[nf] = v;
    return nf + 1;
}

/* Of the n factors f, remove the constant c (as dtype dt); false if absent. */
static bool take_const(fc_value **f, int *n, fc_dtype dt, double c) {
    for (int i = 0; i < *n; i++)
        if (fc_rc_is(f[i], dt, c)) {
            f[i] = f[--*n];
            return true;
        }
    return false;
}

/* v = add(op(u), 1) with op's result private: u, else NULL. */
static fc_value *one_plus(const fc_rc *rc, fc_value *v, fc_op op, fc_dtype dt) {
    if (fc_rc_op(v) != FC_OP_ADD || !fc_rc_private(rc, v, 1)) return NULL;
    for (int side = 0; side < 2; side++) {
        fc_value *t = v->def->in[side];
        if (fc_rc_op(t) == op && fc_rc_private(rc, t, 1) && fc_rc_is(v->def->in[1 - side], dt, 1.0)) return t->def->in[0];
    }
    return NULL;
}

/* Is v = x^3: pow(x, 3), or x * x * x in any association? */
static bool is_cube(const fc_rc *rc, fc_value *v, fc_value *x, fc_dtype dt) {
    if (!fc_rc_private(rc, v, 1)) return false;
    if (fc_rc_op(v) == FC_OP_POW) return v->def->in[0] == x && fc_rc_is(v->def->in[1], dt, 3.0);
    fc_value *f[MAX_FACTORS + 1];
    int n = factors(rc, v, true, f, 0);
    if (n != 3) return false;
    for (int i = 0; i < 3; i++)
        if (f[i] != x) return false;
    return true;
}

/* u = sqrt(2/pi) * (x + 0.044715 * x^3), in any order. */
static bool tanh_inner(const fc_rc *rc, fc_value *u, fc_value *x, fc_dtype dt) {
    fc_value *f[MAX_FACTORS + 1];
    if (!fc_rc_private(rc, u, 1)) return false;
    int n = factors(rc, u, true, f, 0);
    if (n != 2 || !take_const(f, &n, dt, sqrt(2.0 / M_PI))) return false;
    fc_value *s = f[0];
    if (fc_rc_op(s) != FC_OP_ADD || !fc_rc_private(rc, s, 1)) return false;
    for (int side = 0; side < 2; side++) {
        fc_value *c = s->def->in[1 - side];
        if (s->def->in[side] != x || fc_rc_op(c) != FC_OP_MUL || !fc_rc_private(rc, c, 1)) continue;
        fc_value *g[MAX_FACTORS + 1];
        int m = factors(rc, c, true, g, 0);
        if (!take_const(g, &m, dt, 0.044715)) continue;
        if (m == 1 && is_cube(rc, g[0], x, dt)) return true;
        if (m == 3 && g[0] == x && g[1] == x && g[2] == x) return true; /* x * x * x, flattened with the constant */
    }
    return false;
}

/* w = x / sqrt(2) or x * (1 / sqrt(2)). */
static bool erf_inner(const fc_rc *rc, fc_value *w, fc_value *x, fc_dtype dt) {
    if (!fc_rc_private(rc, w, 1)) return false;
    const fc_node *n = w->def;
    if (n->op == FC_OP_DIV) return n->in[0] == x && fc_rc_is(n->in[1], dt, sqrt(2.0));
    if (n->op != FC_OP_MUL) return false;
    return (n->in[0] == x && fc_rc_is(n->in[1], dt, M_SQRT1_2)) || (n->in[1] == x && fc_rc_is(n->in[0], dt, M_SQRT1_2));
}

static fc_value *recognize(fc_rewriter *rw, fc_node *n, void *arg) {
    const fc_rc *rc = arg;
    if (n->op != FC_OP_MUL) return NULL;
    fc_dtype dt = n->out[0]->dtype;
    if (!fc_dtype_is_float(dt)) return NULL;
    fc_value *f[MAX_FACTORS + 1];
    int nf = factors(rc, n->out[0], true, f, 0);
    if (nf != 3 || !take_const(f, &nf, dt, 0.5)) return NULL;
    /* f[0], f[1]: x and (1 + tanh/erf(..)), in either order */
    for (int i = 0; i < 2; i++) {
        fc_value *x = f[i], *t = f[1 - i], *u;
        if (x->weak || x->dtype != dt || !fc_same_type(x, n->out[0])) continue;
        if ((u = one_plus(rc, t, FC_OP_TANH, dt)) && tanh_inner(rc, u, x, dt)) return fc_rw_op1(rw, FC_OP_GELU_TANH, x);
        if ((u = one_plus(rc, t, FC_OP_ERF, dt)) && erf_inner(rc, u, x, dt)) return fc_rw_op1(rw, FC_OP_GELU, x);
    }
    return NULL;
}

fc_status fc_pass_recognize_gelu(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "recognize_gelu");
    if (st) return st;
    fc_rc rc = {.uses = fc_use_counts(g), .nuses = g->next_value_id};
    if (!rc.uses) return fc_set_error(g->ctx, g->status = FC_ERR_NOMEM, "out of memory (recognize_gelu)");
    st = fc_rw_lower_nodes(g, recognize, &rc);
    fc_ctx_freemem(g->ctx, rc.uses);
    return st == FC_OK ? fc_pass_dce(g) : st;
}

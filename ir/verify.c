/* verify.c - the verifier: every structural invariant of a graph. It runs
 * after every structural pass in debug builds, so a pass that breaks the
 * graph is caught where it broke it. */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>



static fc_status fail(fc_graph *g, const char *fmt, int a, const char *s) {
    return fc_set_error(g->ctx, FC_ERR_INPUT, fmt, a, s);
}

/* A max or min over an axis of size 0 has no value (no identity, unlike a
 * sum's 0): PyTorch refuses it ("Expected reduction dim to have non-zero
 * size"), and so does fusec on every device: the parser (located in the
 * .ir text), the public builders, and binding a symbol to 0. Not fc_build
 * itself: decompose writes a softmax over an empty axis (an empty result,
 * as in PyTorch) with a reduce_max whose values no element reads. */
bool fc_empty_max_message(fc_op op, const fc_value *x, const fc_attrs *a, char *buf, size_t n) {
    if (op != FC_OP_REDUCE_MAX && op != FC_OP_REDUCE_MIN) return false;
    for (int i = 0; i < a->nlist; i++) {
        int64_t ax = a->list[i] < 0 ? a->list[i] + x->rank : a->list[i];
        if (ax >= 0 && ax < x->rank && x->dims[ax] == 0) {
            snprintf(buf, n, "%s over axis %lld, of size 0: a max or min over an empty axis has no value (as in "
                     "PyTorch; reduce_sum gives 0, reduce_mean NaN)", fc_op_table[op].name, (long long)a->list[i]);
            return true;
        }
    }
    return false;
}

fc_status fc_verify(fc_graph *g) {
    if (!g) return FC_ERR_USAGE;
    if (g->status) {
        /* The context still holds the first builder error. */
        return g->status;
    }
    if (!g->returned || g->noutputs < 1)
        return fc_set_error(g->ctx, FC_ERR_INPUT, "graph %s: no return (a graph must return at least one value)", g->name);
    /* defined[id]: the value has been defined by an earlier node or is a param. */
    bool *defined = calloc((size_t)g->next_value_id + 1, sizeof *defined);
    if (!defined) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory");
    fc_status st = FC_OK;
    for (int i = 0; i < g->nparams && !st; i++) {
        fc_value *p = g->params[i];
        if (p->param_index != i || p->def || p->graph != g) st = fail(g, "verify: parameter %d (%s) is malformed", i, p->name);
        else defined[p->id] = true;
    }
    for (int i = 0; i < g->nnodes && !st; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        const fc_op_info *info = &fc_op_table[n->op];
        if (n->nin < info->min_in || (info->max_in >= 0 && n->nin > info->max_in)) {
            st = fail(g, "verify: node %d (%s) has a wrong operand count", n->id, info->name);
            break;
        }
        for (int k = 0; k < n->nin && !st; k++) {
            fc_value *v = n->in[k];
            if (!v || v->poison) st = fail(g, "verify: node %d (%s) has a missing operand", n->id, info->name);
            else if (v->graph != g)
                st = fail(g, "verify: node %d (%s) uses a value of another graph", n->id, info->name);
            else if (!v->weak && (v->id < 0 || v->id >= g->next_value_id || !defined[v->id]))
                st = fail(g, "verify: node %d (%s) uses a value before it is defined", n->id, info->name);
        }
        if (st) break;
        for (int k = 0; k < n->nout && !st; k++) {
            fc_value *v = n->out[k];
            if (!v || v->def != n || v->def_index != k || v->graph != g)
                st = fail(g, "verify: node %d (%s) has a malformed result", n->id, info->name);
            else if (defined[v->id]) st = fail(g, "verify: node %d (%s) redefines a value", n->id, info->name);
            else defined[v->id] = true;
        }
        if (!st) st = fc_reinfer_check(g, n);
    }
    for (int i = 0; i < g->noutputs && !st; i++) {
        fc_value *v = g->outputs[i];
        if (!v || v->weak || v->graph != g || v->id < 0 || v->id >= g->next_value_id || !defined[v->id] || (v->def && v->def->dead))
            st = fail(g, "verify: result %d of graph %s is not defined", i, g->name);
    }
    free(defined);
    if (!st) st = fc_verify_inout(g);
    return st;
}

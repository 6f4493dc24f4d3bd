/* clone.c - deep copy of a graph, rebuilt node by node through fc_build so
 * the copy is checked exactly like the original. Compilation works on a
 * copy so the user's graph is never changed by the passes. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

fc_dim fc_dim_map(fc_graph *g, fc_graph *c, fc_dim d) {
    if (!fc_dim_is_sym(d)) return d;
    const char *name = fc_sym_name(g, d);
    return fc_graph_sym(c, name, strlen(name));
}

static fc_graph *clone_bound(fc_graph *g, const fc_binding *binds, int nbinds);

fc_graph *fc_graph_clone(fc_graph *g) { return clone_bound(g, NULL, 0); }

fc_graph *fc_graph_specialize(fc_graph *g, const fc_binding *binds, int nbinds) {
    return clone_bound(g, binds, nbinds);
}

static fc_graph *clone_bound(fc_graph *g, const fc_binding *binds, int nbinds) {
    if (!g) return NULL;
    if (nbinds < 0 || (nbinds > 0 && !binds)) {
        fc_set_error(g->ctx, FC_ERR_USAGE, "specialize: bad bindings (%d given%s)", nbinds, binds ? "" : ", NULL");
        return NULL;
    }
    if (g->status) {
        fc_set_error(g->ctx, g->status, "clone: the graph has an error");
        return NULL;
    }
    fc_graph *c = fc_graph_new(g->ctx, g->name);
    if (!c) return NULL;
    fc_value **map = calloc((size_t)g->next_value_id + 1, sizeof *map);
    fc_value **ins = NULL;
    int cap_ins = 0;
    if (!map) goto oom;
    /* Its own copies: the clone may outlive g (a graph specialized from
     * the shapes of input files replaces the parsed one), and its launches
     * and diagnostics name the file. */
    if (g->src_file && !(c->src_file = fc_arena_strndup(&c->arena, g->src_file, strlen(g->src_file)))) goto oom;
    if (g->src_text && !(c->src_text = fc_arena_strndup(&c->arena, g->src_text, g->src_len))) goto oom;
    c->src_len = g->src_text ? g->src_len : 0;
    if (!fc_graph_copy_src_ops(c, g)) goto oom;
    for (int i = 0; i < g->nbinds; i++)
        if (fc_graph_bind(c, g->binds[i].name, g->binds[i].value)) goto fail;
    for (int i = 0; i < nbinds; i++)
        if (fc_graph_bind(c, binds[i].name, binds[i].value)) goto fail;
    for (int i = 0; i < g->nsyms; i++) fc_graph_sym(c, g->syms[i], strlen(g->syms[i]));
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = g->params[i];
        fc_dim dims[FC_MAX_RANK];
        for (int d = 0; d < p->rank; d++) dims[d] = fc_dim_map(g, c, p->dims[d]);
        map[p->id] = fc_build_param(c, p->name, strlen(p->name), p->dtype, p->rank, dims);
        if (c->status) goto fail;
        map[p->id]->inout = p->inout;
    }
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        if (n->nin > cap_ins) {
            cap_ins = n->nin * 2;
            fc_value **p = realloc(ins, sizeof *ins * (size_t)cap_ins);
            if (!p) goto oom;
            ins = p;
        }
        for (int k = 0; k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (v->weak) {
                ins[k] = fc_scalar(c, v->scalar);
                if (c->status) goto fail;
                ins[k]->weak_int = v->weak_int;
            } else {
                ins[k] = map[v->id];
                FC_ASSERT(ins[k]);
            }
        }
        c->cur_loc = n->loc;
        fc_attrs a = n->a;
        int64_t list[64];
        if (fc_op_list_is_dims(n->op) && a.nlist > 0 && a.nlist <= 64) {
            for (int k = 0; k < a.nlist; k++) list[k] = fc_dim_map(g, c, a.list[k]);
            a.list = list;
        }
        fc_node *m = fc_build(c, n->op, ins, n->nin, &a);
        if (!m) goto fail;
        if (!fc_node_copy_cover(c, m, n)) goto oom;
        FC_ASSERT(m->nout == n->nout);
        for (int k = 0; k < n->nout; k++) {
            map[n->out[k]->id] = m->out[k];
            if (n->out[k]->name) {
                m->out[k]->name = fc_arena_strndup(&c->arena, n->out[k]->name, strlen(n->out[k]->name));
                if (!m->out[k]->name) goto oom;
            }
        }
    }
    c->cur_loc = (fc_loc){0, 0};
    if (g->returned) {
        fc_value **outs = calloc((size_t)g->noutputs, sizeof *outs);
        if (!outs) goto oom;
        for (int i = 0; i < g->noutputs; i++) outs[i] = map[g->outputs[i]->id];
        fc_status st = fc_graph_return(c, g->noutputs, outs);
        free(outs);
        if (st) goto fail;
    }
    /* A symbol bound to 0 under a max or min (fc_empty_max_message): only
     * when binding, since a plain clone may be of decompose's output. */
    for (int i = 0; i < c->nnodes && nbinds > 0; i++) {
        char why[200];
        const fc_node *n = c->nodes[i];
        if (!n->dead && n->nin > 0 && fc_empty_max_message(n->op, n->in[0], &n->a, why, sizeof why)) {
            fc_set_error(g->ctx, FC_ERR_INPUT, "specialize: %s", why);
            goto fail;
        }
    }
    free(map);
    free(ins);
    return c;
oom:
    fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (cloning graph %s)", g->name);
fail:
    free(map);
    free(ins);
    fc_graph_free(c);
    return NULL;
}

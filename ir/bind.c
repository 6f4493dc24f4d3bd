/* bind.c - an id-preserving copy of a graph with its symbols replaced by
 * sizes (fc_graph_bind_copy). A dynamic plan is made once on a graph whose
 * symbols stay unbound; for each new shape the runtime needs the same plan
 * with concrete sizes, whose value and node ids mean what they meant in the
 * dynamic graph (launch argument lists are value ids). fc_graph_specialize
 * rebuilds through fc_build and renumbers; this copies the structure as it
 * is and re-checks each node's types instead. */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does v's element count, at 8 bytes an element, fit in 64 bits? */
static bool fits(const fc_value *v) {
    int64_t ne;
    return fc_shape_numel(v->dims, v->rank, &ne, NULL) && ne <= INT64_MAX / 8;
}

/* The copy of value v (made on first sight). */
static fc_value *copy_value(fc_graph *c, fc_value **map, fc_value *v, const int64_t *vals) {
    if (map[v->id]) return map[v->id];
    fc_value *w = fc_arena_alloc(&c->arena, sizeof *w);
    if (!w) return NULL;
    *w = *v;
    w->graph = c;
    w->def = NULL; /* set by the defining node's copy */
    for (int d = 0; d < v->rank; d++) w->dims[d] = fc_dim_value(v->dims[d], vals);
    if (v->name) {
        w->name = fc_arena_strndup(&c->arena, v->name, strlen(v->name));
        if (!w->name) return NULL;
    }
    map[v->id] = w;
    return w;
}

fc_status fc_graph_check_bind_values(const fc_graph *g, const int64_t *vals, int nvals) {
    if (g->status) return fc_set_error(g->ctx, g->status, "bind: the graph has an error");
    if (nvals != g->nsyms)
        return fc_set_error(g->ctx, FC_ERR_INPUT, "bind: graph %s has %d symbols, %d values given", g->name, g->nsyms,
                            nvals);
    for (int i = 0; i < nvals; i++)
        if (vals[i] < 1)
            return fc_set_error(g->ctx, FC_ERR_INPUT, "bind: symbol %s = %lld: a size must be at least 1", g->syms[i],
                                (long long)vals[i]);
    return FC_OK;
}

fc_status fc_graph_bind_copy(fc_graph *g, const int64_t *vals, int nvals, fc_graph **out) {
    *out = NULL;
    fc_context *ctx = g->ctx;
    fc_status st = fc_graph_check_bind_values(g, vals, nvals);
    if (st != FC_OK) return st;
    fc_graph *c = fc_graph_new(ctx, g->name);
    fc_value **map = calloc((size_t)g->next_value_id + 1, sizeof *map);
    if (!c || !map || !fc_graph_copy_src_ops(c, g)) goto oom;
    c->next_value_id = g->next_value_id;
    c->next_node_id = g->next_node_id;
    c->returned = g->returned;
    c->params = fc_arena_alloc(&c->arena, sizeof *c->params * (size_t)(g->nparams + 1));
    c->nodes = fc_arena_alloc(&c->arena, sizeof *c->nodes * (size_t)(g->nnodes + 1));
    c->outputs = fc_arena_alloc(&c->arena, sizeof *c->outputs * (size_t)(g->noutputs + 1));
    if (!c->params || !c->nodes || !c->outputs) goto oom;
    c->cap_params = g->nparams + 1;
    c->cap_nodes = g->nnodes + 1;
    for (int i = 0; i < g->nparams; i++) {
        fc_value *p = copy_value(c, map, g->params[i], vals);
        if (!p || (p->name && !fc_name_index_put(&c->param_names, &c->arena, p->name, strlen(p->name), c->nparams)))
            goto oom;
        c->params[c->nparams++] = p;
        if (!fits(p)) {
            fc_set_error(ctx, FC_ERR_INPUT, "bind: parameter %%%s is too large (its element count overflows 64 bits)",
                         p->name ? p->name : "?");
            goto fail;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        fc_node *m = fc_arena_alloc(&c->arena, sizeof *m);
        if (!m) goto oom;
        *m = *n;
        if (!fc_node_copy_cover(c, m, n)) goto oom;
        m->in = fc_arena_alloc(&c->arena, sizeof *m->in * (size_t)(n->nin ? n->nin : 1));
        m->out = fc_arena_alloc(&c->arena, sizeof *m->out * (size_t)(n->nout ? n->nout : 1));
        if (!m->in || !m->out) goto oom;
        if (n->a.nlist) {
            m->a.list = fc_arena_alloc(&c->arena, sizeof *m->a.list * (size_t)n->a.nlist);
            if (!m->a.list) goto oom;
            bool dims = fc_op_list_is_dims(n->op);
            for (int k = 0; k < n->a.nlist; k++) m->a.list[k] = dims ? fc_dim_value(n->a.list[k], vals) : n->a.list[k];
        }
        for (int k = 0; k < n->nin; k++) {
            fc_value *v = n->in[k];
            if (!v->weak && !map[v->id]) {
                fc_set_error(ctx, FC_ERR_INPUT, "bind: node %d reads value %d before it is defined", n->id, v->id);
                goto fail;
            }
            if (!(m->in[k] = copy_value(c, map, v, vals))) goto oom;
        }
        /* A symbol bound to 0 under a max or min (fc_empty_max_message). */
        char why[200];
        if (n->nin > 0 && fc_empty_max_message(m->op, m->in[0], &m->a, why, sizeof why)) {
            fc_set_error(ctx, FC_ERR_INPUT, "bind: %s", why);
            goto fail;
        }
        for (int k = 0; k < n->nout; k++) {
            if (!(m->out[k] = copy_value(c, map, n->out[k], vals))) goto oom;
            m->out[k]->def = m;
            if (!fits(m->out[k])) {
                fc_set_error(ctx, FC_ERR_INPUT, "bind: a %s result of graph %s is too large (its size overflows 64 bits)",
                             fc_op_table[n->op].name, g->name);
                goto fail;
            }
        }
        c->nodes[c->nnodes++] = m;
        c->cur_loc = n->loc;
        fc_status st = fc_reinfer_check(c, m);
        if (st == FC_ERR_NOMEM) goto oom;
        if (st) {
            char why[FC_ERROR_MAX / 2];
            size_t wl = strlen(ctx->error);
            if (wl >= sizeof why) wl = sizeof why - 1;
            memcpy(why, ctx->error, wl);
            why[wl] = 0;
            char b[256] = "";
            size_t pos = 0;
            for (int s = 0; s < nvals && pos + 40 < sizeof b; s++)
                pos += (size_t)snprintf(b + pos, sizeof b - pos, "%s%s=%lld", s ? ", " : "", g->syms[s], (long long)vals[s]);
            fc_set_error(ctx, FC_ERR_INPUT, "bind: the sizes %s do not fit graph %s: %s", b, g->name, why);
            goto fail;
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        fc_value *v = g->outputs[i];
        if (!map[v->id]) {
            fc_set_error(ctx, FC_ERR_INPUT, "bind: result %d of graph %s is not defined", i, g->name);
            goto fail;
        }
        c->outputs[c->noutputs++] = map[v->id];
    }
    c->cur_loc = (fc_loc){0, 0};
    free(map);
    *out = c;
    return FC_OK;
oom:
    free(map);
    fc_graph_free(c);
    return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (binding graph %s)", g->name);
fail:
    free(map);
    fc_graph_free(c);
    return FC_ERR_INPUT;
}

/* plan_bind.c - a dynamic plan made concrete for one shape (fc_plan_bind).
 *
 * The dynamic plan's fusion decisions are kept as they are: the groups, their
 * order, their nodes, inputs and outputs. Only sizes change. The graph is
 * copied with every symbol replaced by its value (fc_graph_bind_copy keeps
 * every value and node id and re-checks every node's types, so a binding
 * that contradicts the graph is an input error, not a broken plan), each
 * group is copied onto the copy's nodes and values, and the memory plan is
 * run. Cost: linear in the graph plus the memory plan; no fusion.
 *
 * No run calls it: a dynamic variant's shapes are made from its lowered
 * description (lower/variant_desc.h), which gives value for value what a
 * bound plan gives (tests/test_dynamic.c compares the two at every shape
 * of a sweep). It is the reference for that, and the way to a bound plan
 * for tools and tests. */
#include "passes.h"

#include <string.h>

/* The copy of value v of the dynamic graph: a parameter, or a result of a
 * node (the copy keeps both indices). Group inputs and outputs are never
 * weak scalars. */
static fc_value *value_of(fc_graph *g, fc_node **nmap, const fc_value *v) {
    fc_value *w = v->def ? nmap[v->def->id]->out[v->def_index] : g->params[v->param_index];
    FC_ASSERT(w->id == v->id);
    return w;
}

fc_status fc_plan_bind(const fc_plan *dyn, const int64_t *sym_values, int nsyms, fc_plan *out) {
    memset(out, 0, sizeof *out);
    if (!dyn || !dyn->g || (nsyms > 0 && !sym_values)) return FC_ERR_USAGE;
    fc_graph *dg = dyn->g;
    fc_context *ctx = dg->ctx;
    fc_graph *g = NULL;
    fc_status st = fc_graph_bind_copy(dg, sym_values, nsyms, &g);
    if (st) return st;

    out->g = g;
    out->owned_graph = g;
    fc_arena_init(&out->arena, ctx);
    out->nsyms = nsyms;
    /* id -> node of the copy */
    int nn = g->next_node_id;
    fc_node **nmap = fc_arena_alloc(&out->arena, sizeof *nmap * (size_t)(nn + 1));
    out->sym_values = fc_arena_alloc(&out->arena, sizeof(int64_t) * (size_t)(nsyms + 1));
    out->group_of_node = fc_arena_alloc(&out->arena, sizeof(int) * (size_t)(nn + 1));
    out->groups = fc_arena_alloc(&out->arena, sizeof *out->groups * (size_t)(dyn->ngroups + 1));
    if (!nmap || !out->sym_values || !out->group_of_node || !out->groups) goto oom;
    if (nsyms) memcpy(out->sym_values, sym_values, sizeof(int64_t) * (size_t)nsyms);
    memcpy(out->group_of_node, dyn->group_of_node, sizeof(int) * (size_t)(nn + 1));
    for (int i = 0; i < g->nnodes; i++) nmap[g->nodes[i]->id] = g->nodes[i];

    for (int gi = 0; gi < dyn->ngroups; gi++) {
        const fc_group *d = dyn->groups[gi];
        fc_group *gr = fc_arena_alloc(&out->arena, sizeof *gr);
        if (!gr) goto oom;
        *gr = *d;
        gr->nodes = fc_arena_alloc(&out->arena, sizeof *gr->nodes * (size_t)(d->nnodes + 1));
        gr->inputs = fc_arena_alloc(&out->arena, sizeof *gr->inputs * (size_t)(d->ninputs + 1));
        gr->outputs = fc_arena_alloc(&out->arena, sizeof *gr->outputs * (size_t)(d->noutputs + 1));
        if (!gr->nodes || !gr->inputs || !gr->outputs) goto oom;
        gr->cap_nodes = d->nnodes + 1;
        for (int k = 0; k < d->nnodes; k++) {
            gr->nodes[k] = nmap[d->nodes[k]->id];
            FC_ASSERT(gr->nodes[k]);
        }
        for (int k = 0; k < d->ninputs; k++) gr->inputs[k] = value_of(g, nmap, d->inputs[k]);
        for (int k = 0; k < d->noutputs; k++) gr->outputs[k] = value_of(g, nmap, d->outputs[k]);
        for (int k = 0; k < d->rank; k++) gr->space[k] = fc_dim_value(d->space[k], sym_values);
        if (gr->kind == FC_GROUP_REDUCE) {
            fc_mono rows = fc_group_rows_mono(d), len = fc_group_row_len_mono(d);
            gr->rows = fc_mono_eval(&rows, sym_values, nsyms);
            gr->row_len = fc_mono_eval(&len, sym_values, nsyms);
            if (gr->rows < 0 || gr->row_len < 0) {
                fc_plan_release(out);
                return fc_set_error(ctx, FC_ERR_INPUT, "bind: group %d of graph %s is too large (its size overflows 64 bits)",
                                    gi, dg->name);
            }
        }
        out->groups[out->ngroups++] = gr;
    }
    out->cap_groups = out->ngroups;
    st = fc_pass_memplan(out);
    if (st) {
        fc_plan_release(out);
        return st == FC_ERR_NOMEM ? fc_set_error(ctx, st, "out of memory (binding plan of %s)", dg->name) : st;
    }
    return FC_OK;
oom:
    fc_plan_release(out);
    return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (binding plan of %s)", dg->name);
}

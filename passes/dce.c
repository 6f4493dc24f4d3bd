/* dce.c - dead code elimination: remove every node none of whose results
 * is (transitively) used by a graph result.
 *
 * Every op is pure (no op writes memory a graph result does not see), so a
 * node is needed exactly when a graph result depends on it. One walk from
 * the last node to the first decides that, because the order is
 * topological: when a node is reached, every user of its results has
 * already been seen. Params are the graph's signature and always stay.
 * The one op with an effect, update_slice (it writes its inout parameter
 * in place: docs/DECODE.md), is always needed. */
#include "passes.h"
#include "rewrite.h"

#include <string.h>

fc_status fc_pass_dce(fc_graph *g) {
    fc_status st = fc_pass_precheck(g, "dce");
    if (st) return st;
    bool *live = fc_ctx_malloc(g->ctx, sizeof *live * (size_t)(g->next_value_id + 1));
    if (!live) return g->status = FC_ERR_NOMEM;
    memset(live, 0, sizeof *live * (size_t)(g->next_value_id + 1));
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i]->id] = true;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        fc_node *n = g->nodes[i];
        if (n->dead) continue;
        bool needed = n->op == FC_OP_UPDATE_SLICE;
        for (int k = 0; k < n->nout; k++) needed |= live[n->out[k]->id];
        if (!needed) {
            n->dead = true;
            continue;
        }
        for (int k = 0; k < n->nin; k++)
            if (!n->in[k]->weak) live[n->in[k]->id] = true;
    }
    fc_ctx_freemem(g->ctx, live);
    fc_graph_compact(g);
    return FC_OK;
}

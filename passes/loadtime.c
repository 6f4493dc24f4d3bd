/*
 * loadtime.c - the kernels that compute GEMM weights from parameters run
 * when the weights are loaded, not at every run (docs/GEMM.md, "Weights
 * computed at load time").
 *
 * Some kernels of a plan read nothing but parameters and make nothing but
 * GEMM weights: the casts autocast writes for an f32 model's weights, the
 * concatenation of casted sibling weights (epilogue), the zero columns and
 * rows the pad pass gives a weight, the zero block of a padded N. Their
 * results are the same at every run as long as the parameters are, which
 * is the contract a GEMM's weights already have ("The constant-weights
 * contract": the runtime keeps concatenated weights the same way). So such
 * a group is marked `loadtime`: its results get arena memory of their own
 * for the whole program (memplan), it is never batched with per-run
 * groups, and the runtime runs it at the first run, again when a parameter
 * it reads comes at another address, and after fc_program_weights_changed;
 * other runs skip it (a replayed CUDA Graph does not hold it). A backend
 * that runs every launch at every run computes the same results.
 *
 * A group is load-time when
 *   - it is a kernel or a view (not a library call, not attention),
 *   - every value it reads is a parameter or a load-time group's result,
 *   - no result of it is a graph result, and every read of its results is
 *     a load-time group's, or a GEMM's or convolution's (conv_cl) weight or
 *     bias operand (never its left operand, input or residual: those are
 *     per-run data).
 * The reads decide backwards (a reader comes later in launch order), the
 * sources forwards. The walks repeat until nothing changes: a group the
 * backward walk finds per-run may be the source of a later group the
 * forward walk had marked (a folded batch norm's scale that both a GEMM's
 * weight and a per-run kernel's bias are made from). That reader must then
 * run per run too, after its source: the load-time launches run before
 * every per-run one, so it would read memory not yet written. Marks only
 * ever clear, so the walks end.
 *
 * Pipeline position: after fusion (the groups) and before batching and the
 * memory plan, which read the mark. Static plans only: a dynamic variant's
 * instances share one graph of launches for every shape.
 */
#include "passes/epilogue.h"
#include "passes/passes.h"

#include <string.h>

static bool is_param(const fc_value *v) { return !v->def && v->param_index >= 0; }

/* Value x as group gr reads it from outside: through gr's own views. */
static const fc_value *outside_source(const fc_plan *plan, const fc_group *gr, const fc_value *x) {
    while (x->def && x->def->nin >= 1 && plan->group_of_node[x->def->id] == gr->id) x = x->def->in[0];
    return x;
}

/* Whether library group gr reads v only as a GEMM's weight or bias. */
static bool weight_read(const fc_plan *plan, const fc_group *gr, const fc_value *v) {
    if (gr->kind != FC_GROUP_LIBRARY) return false;
    bool any = false;
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *n = gr->nodes[i];
        fc_gemm_info gi;
        if (n->op == FC_OP_CONV_CL) {
            /* conv_cl(x, w, [bias], [residual]): x and the residual are
             * per-run data (the bias is operand 2 when it is there) */
            bool bias = n->a.list[n->a.nlist - FC_CONV_EPI_LEN + FC_CONV_BIAS] != 0;
            for (int k = 0; k < n->nin; k++) {
                bool weight = k == 1 || (k == 2 && bias);
                if (outside_source(plan, gr, n->in[k]) != v) continue;
                if (!weight) return false;
                any = true;
            }
            continue;
        }
        if (n->op != FC_OP_GEMM || !fc_gemm_info_of(n, &gi)) {
            for (int k = 0; k < n->nin; k++)
                if (outside_source(plan, gr, n->in[k]) == v) return false;
            continue;
        }
        if (outside_source(plan, gr, gi.a) == v) return false;
        if (gi.has_residual && outside_source(plan, gr, gi.residual) == v) return false;
        for (int w = 0; w < gi.nweights; w++) {
            any |= outside_source(plan, gr, gi.w[w]) == v;
            if (gi.has_bias) any |= outside_source(plan, gr, gi.bias[w]) == v;
        }
    }
    return any;
}

fc_status fc_pass_loadtime(fc_plan *plan) {
    if (!plan || !plan->g) return FC_ERR_USAGE;
    for (int i = 0; i < plan->ngroups; i++) plan->groups[i]->loadtime = false;
    if (plan->dynamic) return FC_OK;
    const fc_graph *g = plan->g;
    const size_t nv = (size_t)g->next_value_id + 1;
    /* by value id: some read of it (or the caller's) is per-run */
    bool *per_run = fc_ctx_malloc(g->ctx, nv * sizeof *per_run);
    if (!per_run) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (load-time groups)");
    memset(per_run, 0, nv * sizeof *per_run);
    for (int i = 0; i < g->noutputs; i++) per_run[g->outputs[i]->id] = true;

    for (int i = 0; i < plan->ngroups; i++) {
        fc_group *gr = plan->groups[i];
        gr->loadtime = gr->kind == FC_GROUP_POINTWISE || gr->kind == FC_GROUP_REDUCE || gr->kind == FC_GROUP_ALIAS;
    }
    for (bool changed = true; changed;) {
        changed = false;
        /* Forwards: groups computed from parameters and load-time groups alone. */
        for (int i = 0; i < plan->ngroups; i++) {
            fc_group *gr = plan->groups[i];
            bool ok = gr->loadtime;
            for (int k = 0; ok && k < gr->ninputs; k++) {
                const fc_value *v = gr->inputs[k];
                if (v->weak || is_param(v)) continue;
                int src = v->def ? plan->group_of_node[v->def->id] : -1;
                ok = src >= 0 && src < i && plan->groups[src]->loadtime;
            }
            changed |= ok != gr->loadtime;
            gr->loadtime = ok;
        }
        /* Backwards: every read of a load-time group's results is a weight's. */
        for (int i = plan->ngroups - 1; i >= 0; i--) {
            fc_group *gr = plan->groups[i];
            for (int k = 0; gr->loadtime && k < gr->noutputs; k++) {
                gr->loadtime = !per_run[gr->outputs[k]->id];
                changed |= !gr->loadtime;
            }
            for (int k = 0; k < gr->ninputs; k++) {
                const fc_value *v = gr->inputs[k];
                if (!gr->loadtime && !weight_read(plan, gr, v)) per_run[v->id] = true;
            }
        }
    }
    fc_ctx_freemem(g->ctx, per_run);
    return FC_OK;
}

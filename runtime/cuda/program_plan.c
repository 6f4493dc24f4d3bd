/*
 * program_plan.c - a CUDA program's graph after the passes and its plan,
 * kept for introspection only (fc_program_graph, fc_program_plan): the
 * compile keeps what it made; a program from the cache or a file, which
 * ran no passes here, plans its graph text again when asked. A compile
 * driver (scripts/check-layers.sh): nothing a run calls is here.
 */
#include "runtime/cuda/compile_driver.h"
#include "lower/plan_dot.h"

/* The graph and plan, made here when absent (for an executable or a
 * dynamic program alike: the fields each keeps for introspection). */
static fc_status materialize(fc_context *ctx, const fc_program_desc *d, fc_graph **pg, fc_plan *plan) {
    if (*pg) return FC_OK;
    if (!d->graph_text)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s carries no graph text to plan from",
                            d->graph_name ? d->graph_name : "?");
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "<program graph>", d->graph_text, strlen(d->graph_text), NULL, NULL, 0, &g);
    if (st != FC_OK) return st;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = d->fuse;
    fo.precision = d->precision;
    fo.numerics = d->numerics;
    st = fc_pipeline(g, &fo, plan);
    plan->numerics = d->numerics;
    if (st != FC_OK) {
        fc_plan_release(plan);
        memset(plan, 0, sizeof *plan);
        fc_graph_free(g);
        return st;
    }
    *pg = g;
    return FC_OK;
}

/* An instance shows its variant's graph and plan: the groups it runs,
 * with the symbols unbound. */
static fc_program *planned(fc_program *p) {
    fc_prog_instance *in = fc_prog_instance_of(p);
    return in ? &in->variant->x : p;
}

fc_graph *fc_program_graph(fc_program *p) {
    if (!p) return NULL;
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    if (dp) return materialize(dp->ctx, &dp->d, &dp->g, &dp->plan) == FC_OK ? dp->g : NULL;
    p = planned(p);
    return materialize(p->ctx, &p->d, &p->g, &p->plan) == FC_OK ? p->g : NULL;
}

const fc_plan *fc_program_plan(fc_program *p) {
    if (!p) return NULL;
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    if (dp) return materialize(dp->ctx, &dp->d, &dp->g, &dp->plan) == FC_OK ? &dp->plan : NULL;
    p = planned(p);
    return materialize(p->ctx, &p->d, &p->g, &p->plan) == FC_OK ? &p->plan : NULL;
}

void fc_prog_introspection_free(fc_graph **g, fc_plan *plan) {
    fc_plan_release(plan);
    fc_graph_free(*g);
    *g = NULL;
}

char *fc_prog_plan_dot(fc_program *p) {
    const fc_plan *plan = fc_program_plan(p);
    return plan ? fc_plan_dot(fc_program_context(p), plan) : NULL;
}

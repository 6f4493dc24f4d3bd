/*
 * plan_dot.h - a launch plan as a Graphviz graph (fc_program_plan_dot):
 * each group a cluster coloured by its kind, its ops inside, the values
 * between ops as edges labelled with their types. The runtime's compile
 * drivers call it with the plan they keep.
 */
#ifndef FC_LOWER_PLAN_DOT_H
#define FC_LOWER_PLAN_DOT_H

#include "passes/passes.h"

/* The DOT text of plan (malloc'd; NULL with FC_ERR_NOMEM on ctx). */
char *fc_plan_dot(fc_context *ctx, const fc_plan *plan);

#endif

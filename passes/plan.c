/* plan.c - questions about a plan and its values that the passes and both
 * code generators ask: a value's size, a group's rows and row length, which
 * values of a row kernel are per-row; and the plan's release.
 *
 * They live apart from fusion so that a reader of a plan (codegen, the
 * runtime, the memory plan) depends on these small answers, not on the
 * file that makes groups. */
#include "passes.h"

#include "ir/arena_layout.h"

#include <string.h>

int64_t fc_value_bytes(const fc_value *v) { return fc_value_bytes_at(v, NULL); }

int64_t fc_value_bytes_at(const fc_value *v, const int64_t *sym_values) {
    return fc_dims_bytes_at((int)fc_dtype_size(v->dtype), v->dims, v->rank, sym_values);
}

fc_mono fc_group_space_mono(const fc_group *gr) { return fc_mono_of(gr->space, gr->rank); }

fc_mono fc_group_rows_mono(const fc_group *gr) {
    fc_mono m = fc_mono_one();
    for (int d = 0; d < gr->rank; d++)
        if (!gr->reduced[d]) fc_mono_mul_dim(&m, gr->space[d]);
    return m;
}

fc_mono fc_group_row_len_mono(const fc_group *gr) {
    fc_mono m = fc_mono_one();
    for (int d = 0; d < gr->rank; d++)
        if (gr->reduced[d]) fc_mono_mul_dim(&m, gr->space[d]);
    return m;
}

/* A value of a REDUCE group is ROW level when it holds one element per row
 * in the kept dims' order: its shape is the space with the reduced dims
 * removed or set to 1. */
bool fc_group_is_row_shape(const fc_group *gr, const fc_value *v) {
    int j = 0;
    for (int d = 0; d < gr->rank; d++) {
        if (gr->reduced[d]) {
            if (j < v->rank && v->rank == gr->rank && v->dims[j] == 1) j++;
            continue;
        }
        while (j < v->rank && v->dims[j] == 1 && gr->space[d] != 1) j++;
        if (j >= v->rank || v->dims[j] != gr->space[d]) return false;
        j++;
    }
    while (j < v->rank && v->dims[j] == 1) j++;
    return j == v->rank;
}

void fc_group_mark_rows(const fc_plan *p, const fc_group *gr, bool *is_row,
                        bool (*row_shape)(const fc_group *gr, const fc_value *v)) {
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *n = gr->nodes[i];
        if (fc_op_is_reduce(n->op)) {
            is_row[n->out[0]->id] = true;
            continue;
        }
        if (n->nout != 1) continue;
        bool dep = false, other = false;
        for (int j = 0; j < n->nin; j++) {
            const fc_value *x = n->in[j];
            if (x->weak) continue;
            if (is_row[x->id]) dep = true;
            else if (x->def && p->group_of_node[x->def->id] == gr->id) other = true;
        }
        if (dep && !other && row_shape(gr, n->out[0])) is_row[n->out[0]->id] = true;
    }
}

/* Does reading operand v, broadcast (NumPy, right-aligned) into the group's
 * full space, give one value per row, the row's own? Every reduced dim is 1
 * (or absent) in v and every kept dim matches (a size-1 kept dim of the
 * space may be absent). */
bool fc_group_row_broadcast(const fc_group *gr, const fc_value *v) {
    if (v->rank > gr->rank) return false;
    int off = gr->rank - v->rank;
    for (int d = 0; d < gr->rank; d++) {
        int64_t vd = d < off ? 1 : v->dims[d - off];
        if (gr->reduced[d] ? vd != 1 : (vd != gr->space[d] && gr->space[d] != 1)) return false;
        if (!gr->reduced[d] && d < off && gr->space[d] != 1) return false;
    }
    return true;
}

void fc_plan_release(fc_plan *plan) {
    if (!plan) return;
    fc_graph *owned = plan->owned_graph;
    fc_arena_release(&plan->arena);
    fc_graph_free(owned);
    memset(plan, 0, sizeof *plan);
}


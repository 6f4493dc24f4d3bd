/*
 * param_init.c - what a parameter is to its graph (a layer's weight, its
 * bias, a norm's scale or shift, or data), and the range a model's own
 * initializer would draw it from (fc_graph_param_inits). The CLI's random
 * inputs use it so that a graph runs with values of a realistic size:
 * weights of order one make a 768-wide matmul's results ~16 and a block's
 * activations reach the hundreds, where no error measure means much.
 *
 * The rules follow PyTorch's defaults for the layers the ops come from:
 * nn.Linear draws its weight and bias uniformly from +-1/sqrt(fan_in)
 * (kaiming_uniform with a = sqrt(5)); nn.LayerNorm and RMSNorm start at a
 * scale of 1 and a shift of 0, widened here to 1 +- 0.1 and +- 0.1 so that
 * a dropped or misplaced scale or shift still changes the result.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>

/* Ops that pass a parameter on unchanged in what it is to the graph. */
static bool carries(fc_op op) {
    return op == FC_OP_CAST || op == FC_OP_RESHAPE || op == FC_OP_PERMUTE || op == FC_OP_EXPAND;
}

static void assign(fc_param_init *p, fc_param_role role, int64_t fan_in) {
    if (p->role != FC_ROLE_DATA) return; /* the first use that says decides */
    p->role = role;
    p->fan_in = fan_in;
    switch (role) {
    case FC_ROLE_WEIGHT:
    case FC_ROLE_BIAS: p->hi = 1.0 / sqrt((double)fan_in); p->lo = -p->hi; break;
    case FC_ROLE_NORM_SCALE: p->lo = 0.9; p->hi = 1.1; break;
    case FC_ROLE_NORM_SHIFT: p->lo = -0.1; p->hi = 0.1; break;
    default: break;
    }
}

fc_status fc_graph_param_inits(const fc_graph *g, fc_param_init *out, int n) {
    if (!g || (n > 0 && !out) || n < 0) return FC_ERR_USAGE;
    if (g->status) return g->status;
    for (int i = 0; i < n; i++) out[i] = (fc_param_init){FC_ROLE_DATA, 0, -1.0, 1.0};
    size_t nv = (size_t)(g->next_value_id > 0 ? g->next_value_id : 1);
    /* Per value: the parameter it carries (or -1), and for a matmul's
     * result (carried too), the matmul's contraction size (or 0). */
    int *origin = malloc(nv * sizeof *origin);
    int64_t *mm_k = calloc(nv, sizeof *mm_k);
    if (!origin || !mm_k) {
        free(origin);
        free(mm_k);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nv; i++) origin[i] = -1;
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i]->id >= 0) origin[g->params[i]->id] = i;
#define ORIGIN(v) ((v)->id >= 0 && (size_t)(v)->id < nv ? origin[(v)->id] : -1)
#define MM_K(v) ((v)->id >= 0 && (size_t)(v)->id < nv ? mm_k[(v)->id] : 0)
    for (int k = 0; k < g->nnodes; k++) {
        const fc_node *nd = g->nodes[k];
        if (nd->dead || nd->nin < 1 || nd->nout < 1) continue;
        int p0 = ORIGIN(nd->in[0]);
        int p1 = nd->nin > 1 ? ORIGIN(nd->in[1]) : -1;
        fc_value *res = nd->out[0];
        bool res_ok = res->id >= 0 && (size_t)res->id < nv;
        if (carries(nd->op) && res_ok) {
            origin[res->id] = p0;
            mm_k[res->id] = MM_K(nd->in[0]);
        } else if (nd->op == FC_OP_MATMUL && nd->nin == 2) {
            const fc_value *a = nd->in[0];
            int64_t kdim = a->rank > 0 ? a->dims[a->rank - 1] : 0;
            if (kdim > 0 && res_ok) mm_k[res->id] = kdim;
            if (p1 >= 0 && p1 < n && kdim > 0) assign(&out[p1], FC_ROLE_WEIGHT, kdim);
        } else if (nd->op == FC_OP_LAYERNORM || nd->op == FC_OP_RMSNORM) {
            if (p1 >= 0 && p1 < n) assign(&out[p1], FC_ROLE_NORM_SCALE, 0);
            int p2 = nd->nin > 2 ? ORIGIN(nd->in[2]) : -1;
            if (p2 >= 0 && p2 < n) assign(&out[p2], FC_ROLE_NORM_SHIFT, 0);
        } else if (nd->op == FC_OP_ADD && nd->nin == 2) {
            int64_t k0 = MM_K(nd->in[0]), k1 = MM_K(nd->in[1]);
            if (p1 >= 0 && p1 < n && k0 > 0) assign(&out[p1], FC_ROLE_BIAS, k0);
            if (p0 >= 0 && p0 < n && k1 > 0) assign(&out[p0], FC_ROLE_BIAS, k1);
        }
    }
#undef ORIGIN
#undef MM_K
    /* Integer and bool parameters are indices and masks, never scaled. */
    for (int i = 0; i < n && i < g->nparams; i++) {
        fc_dtype dt = g->params[i]->dtype;
        if (dt != FC_F64 && dt != FC_F32 && dt != FC_F16 && dt != FC_BF16)
            out[i] = (fc_param_init){FC_ROLE_DATA, 0, -1.0, 1.0};
    }
    free(origin);
    free(mm_k);
    return FC_OK;
}

/* launch_cost.c - a launch's bytes, FLOPs and source lines from its plan groups (launch_cost.h). */
#include "lower/launch_cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t numel_of(const fc_value *v) {
    int64_t n = 0;
    bool sym = false;
    if (!fc_shape_numel(v->dims, v->rank, &n, &sym) || sym) return -1;
    return n;
}

/* The FLOPs of node nd, or -1 when a shape is symbolic. */
static double node_flops(const fc_node *nd) {
    const fc_op_info *info = &fc_op_table[nd->op];
    const fc_value *out = nd->nout > 0 ? nd->out[0] : NULL;
    const int64_t on = out ? numel_of(out) : 0;
    if (on < 0) return -1;
    if (nd->op == FC_OP_MATMUL || nd->op == FC_OP_GEMM) {
        fc_gemm_info gi;
        const fc_value *a = nd->in[0];
        bool ta = false;
        if (nd->op == FC_OP_GEMM && fc_gemm_info_of(nd, &gi)) {
            a = gi.a;
            ta = gi.trans_a;
        }
        if (a->rank < 2) return 2.0 * (double)on * (double)(a->rank ? a->dims[0] : 1);
        const fc_dim k = a->dims[ta ? a->rank - 2 : a->rank - 1];
        return k < 0 ? -1 : 2.0 * (double)on * (double)k;
    }
    if (nd->op == FC_OP_CONV_CL) {
        /* Channels-last out [N, OH, OW, M], weight [M, kh, kw, C/G]: a
         * multiply-add per output element and weight element of its
         * output channel. Without it a library convolution's profile row
         * had bytes but no TFLOP/s to hold against the device's peak. */
        const int64_t wn = numel_of(nd->in[1]);
        const fc_dim m = nd->in[1]->dims[0];
        if (wn < 0 || m <= 0) return -1;
        return 2.0 * (double)on * (double)(wn / m);
    }
    if (nd->op == FC_OP_ATTENTION) {
        /* Q K^T and P V: out is [.., Sq, D], k is [.., Sk, D]. */
        const fc_value *k = nd->in[1];
        const fc_dim sk = k->rank >= 2 ? k->dims[k->rank - 2] : 1;
        if (sk < 0) return -1;
        return (nd->a.causal ? 2.0 : 4.0) * (double)on * (double)sk;
    }
    if (nd->nin == 0) return 0;
    const int64_t in = numel_of(nd->in[0]);
    if (in < 0) return -1;
    switch (info->kind) {
    case FC_KIND_ELEMWISE:
    case FC_KIND_BROADCAST: return fc_op_is_view(nd->op) ? 0 : (double)on;
    case FC_KIND_REDUCTION: return (double)in;
    case FC_KIND_COMPOSITE: /* the primitives they decompose into, per input element */
        return (nd->op == FC_OP_SOFTMAX ? 5.0 : nd->op == FC_OP_LAYERNORM ? 8.0 : nd->op == FC_OP_RMSNORM ? 4.0 : 1.0) *
               (double)in;
    default: return 0; /* views move data, they compute nothing */
    }
}

/* The groups of a launch, in order: first .. last, then extra. */
static int launch_groups(const fc_plan *plan, int first, int last, int extra, const fc_group **out, int cap) {
    int n = 0;
    for (int i = first; i <= last && i < plan->ngroups && n < cap; i++) out[n++] = plan->groups[i];
    if (extra >= 0 && extra < plan->ngroups && n < cap) out[n++] = plan->groups[extra];
    return n;
}

#define MAX_LAUNCH_GROUPS 64

void fc_launch_cost(const fc_plan *plan, int first, int last, int extra, int64_t *bytes, double *flops) {
    const fc_group *grs[MAX_LAUNCH_GROUPS];
    const int ng = launch_groups(plan, first, last, extra, grs, MAX_LAUNCH_GROUPS);
    int64_t b = 0;
    double f = 0;
    for (int i = 0; i < ng; i++) {
        const fc_group *gr = grs[i];
        for (int k = 0; k < gr->ninputs + gr->noutputs && b >= 0; k++) {
            const fc_value *v = k < gr->ninputs ? gr->inputs[k] : gr->outputs[k - gr->ninputs];
            /* A value one group of the launch writes and another reads
             * (extra reads what the first wrote) counts once. */
            bool inner = false;
            for (int j = 0; j < ng && k < gr->ninputs && !inner; j++)
                for (int o = 0; j != i && o < grs[j]->noutputs; o++) inner |= grs[j]->outputs[o] == v;
            if (inner) continue;
            const int64_t vb = fc_value_bytes(v);
            b = vb < 0 ? -1 : b + vb;
        }
        for (int k = 0; k < gr->nnodes && f >= 0; k++) {
            const double nf = node_flops(gr->nodes[k]);
            f = nf < 0 ? -1 : f + nf;
        }
    }
    if (bytes) *bytes = b;
    if (flops) *flops = f;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void fc_launch_source(const fc_plan *plan, int first, int last, int extra, char *buf, size_t n, int *nops) {
    const fc_group *grs[MAX_LAUNCH_GROUPS];
    const int ng = launch_groups(plan, first, last, extra, grs, MAX_LAUNCH_GROUPS);
    int nodes = 0;
    for (int i = 0; i < ng; i++)
        for (int k = 0; k < grs[i]->nnodes; k++) nodes += 1 + grs[i]->nodes[k]->ncover;
    int *lines = calloc((size_t)nodes + 1, sizeof *lines);
    int nl = 0, unnamed = 0;
    size_t pos = 0;
    buf[0] = 0;
    for (int i = 0; i < ng; i++)
        for (int k = 0; k < grs[i]->nnodes; k++) {
            const fc_node *nd = grs[i]->nodes[k];
            for (int c = 0; c < nd->ncover && lines; c++) lines[nl++] = nd->cover[c];
            if (nd->loc.line > 0) {
                if (lines) lines[nl++] = nd->loc.line;
                continue;
            }
            unnamed++;
        }
    int distinct = 0;
    if (nl > 0 && plan->g->src_ops) {
        /* An imported model's: the names of the nodes it runs, in the
         * model's order, each once; those that do not fit are counted. */
        qsort(lines, (size_t)nl, sizeof *lines, cmp_int);
        int shown = 0;
        for (int i = 0; i < nl; i++) {
            if (i && lines[i] == lines[i - 1]) continue;
            distinct++;
            const char *name = fc_graph_src_op(plan->g, (fc_loc){lines[i], 0});
            if (!name) continue;
            const size_t len = strlen(name);
            if (pos + len + 16 < n && shown == distinct - 1) {
                pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", pos ? "," : "", name);
                shown++;
            }
        }
        if (shown < distinct) snprintf(buf + pos, n - pos, "%s+%d more", pos ? ", " : "", distinct - shown);
        pos = strlen(buf);
    } else if (nl > 0) {
        qsort(lines, (size_t)nl, sizeof *lines, cmp_int);
        const char *file = plan->g->src_file ? plan->g->src_file : "";
        const char *slash = strrchr(file, '/');
        if (slash) file = slash + 1;
        pos = (size_t)snprintf(buf, n, "%s:", file);
        for (int i = 0; i < nl && pos + 1 < n;) {
            int j = i;
            while (j + 1 < nl && lines[j + 1] <= lines[j] + 1) j++; /* a run of lines (repeats included) */
            for (int q = i; q <= j; q++) distinct += q == i || lines[q] != lines[q - 1];
            pos += (size_t)snprintf(buf + pos, n - pos, i ? ",%d" : "%d", lines[i]);
            if (lines[j] != lines[i] && pos + 1 < n) pos += (size_t)snprintf(buf + pos, n - pos, "-%d", lines[j]);
            i = j + 1;
        }
    } else {
        /* No lines: an imported model's ops, named by the tensors they
         * write (the importer keeps the model's names). */
        for (int i = 0; i < ng; i++)
            for (int k = 0; k < grs[i]->nnodes && pos + 1 < n; k++) {
                const fc_node *nd = grs[i]->nodes[k];
                const char *name = nd->nout > 0 && nd->out[0]->name ? nd->out[0]->name : NULL;
                if (!name) continue;
                pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", pos ? "," : "", name);
            }
        distinct = unnamed;
    }
    if (pos >= n && n > 4) memcpy(buf + n - 4, "...", 4);
    free(lines);
    if (nops) *nops = distinct;
}

void fc_launch_note(fc_launch *l, const fc_plan *plan, int first, int last, int extra) {
    fc_launch_cost(plan, first, last, extra, &l->bytes, &l->flops);
    fc_launch_source(plan, first, last, extra, l->source, sizeof l->source, &l->nsource_ops);
}

/*
 * cpu_decode.c - the CPU backend's library calls for decoding with a
 * key/value cache (docs/DECODE.md): update_slice and cache_attention.
 *
 * Both read their run-time integer (the offset, the key/value length) from
 * its host buffer and refuse a value out of range with FC_ERR_INPUT before
 * touching memory, as the reference does, so a wrong position is an error
 * of the call and never a write outside the cache. update_slice's result is
 * its destination's buffer (passes/memplan.c puts the two in one storage
 * class), so it copies only the new rows.
 */
#include "runtime/cpu/cpu_impl.h"
#include "runtime/collective.h"

#ifdef FUSEC_HAVE_LLVM

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *operand(const fc_group *gr, void *const *args, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return args[i];
    FC_UNREACHABLE("a library operand that is not a group input");
}

static int64_t index_scalar(const fc_value *v, const void *p) {
    return v->dtype == FC_I64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

static int64_t prod(const fc_value *v, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++) n *= v->dims[d];
    return n;
}

static fc_status update_slice(fc_cpu_program *p, const fc_group *gr, const fc_node *n, void *const *args) {
    const fc_value *dst = n->in[0], *src = n->in[1];
    int ax = (int)(n->a.axis < 0 ? n->a.axis + dst->rank : n->a.axis);
    int64_t off = index_scalar(n->in[2], operand(gr, args, n->in[2]));
    int64_t room = dst->dims[ax] - src->dims[ax];
    if (off < 0 || off > room)
        return fc_set_error(p->ctx, FC_ERR_INPUT,
                            "update_slice %%%s: offset %lld is out of range: %lld rows along axis %d fit only at 0 .. "
                            "%lld of %lld",
                            n->out[0]->name ? n->out[0]->name : "?", (long long)off, (long long)src->dims[ax], ax,
                            (long long)room, (long long)dst->dims[ax]);
    char *o = args[gr->ninputs];
    const char *d = operand(gr, args, dst), *s = operand(gr, args, src);
    size_t es = fc_dtype_size(dst->dtype);
    if (o != d) memcpy(o, d, (size_t)prod(dst, 0, dst->rank) * es); /* not in place: never in a plan today */
    int64_t outer = prod(dst, 0, ax), inner = prod(dst, ax + 1, dst->rank);
    int64_t len = dst->dims[ax], slen = src->dims[ax];
    for (int64_t a = 0; a < outer; a++)
        memcpy(o + (size_t)((a * len + off) * inner) * es, s + (size_t)(a * slen * inner) * es,
               (size_t)(slen * inner) * es);
    return FC_OK;
}

/* Per (batch, query head, query): the scores against keys j < len (causal:
 * j <= len - Sq + i) in double, softmax, times v; key head h / (Hq/Hkv). */
static fc_status cache_attention(fc_cpu_program *p, const fc_group *gr, const fc_node *n, void *const *args) {
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    int64_t B = q->dims[0], Hq = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    int64_t Hkv = k->dims[1], S = k->dims[2], Dv = v->dims[3];
    int64_t len = index_scalar(n->in[3], operand(gr, args, n->in[3]));
    bool causal = n->a.causal;
    if (len < (causal ? Sq : 1) || len > S)
        return fc_set_error(p->ctx, FC_ERR_INPUT,
                            "cache_attention %%%s: key/value length %lld is out of range: the cache holds %lld%s",
                            n->out[0]->name ? n->out[0]->name : "?", (long long)len, (long long)S,
                            causal ? " and the queries need as many keys as there are queries" : "");
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    const void *Q = operand(gr, args, q), *K = operand(gr, args, k), *V = operand(gr, args, v);
    void *O = args[gr->ninputs];
    double *pr = malloc(sizeof(double) * (size_t)(len + Dv));
    if (!pr) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (cache_attention)");
    double *acc = pr + len;
    fc_dtype dt = q->dtype;
    int64_t group = Hq / Hkv;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t qb = (b * Hq + h) * Sq, kb = (b * Hkv + h / group) * S;
            for (int64_t i = 0; i < Sq; i++) {
                int64_t nk = causal ? len - Sq + i + 1 : len;
                double m = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < nk; j++) {
                    double s = 0.0;
                    for (int64_t e = 0; e < D; e++) s += fc_host_load(dt, Q, (qb + i) * D + e) * fc_host_load(dt, K, (kb + j) * D + e);
                    pr[j] = s * scale;
                    m = isnan(pr[j]) || pr[j] > m ? pr[j] : m;
                }
                for (int64_t j = 0; j < nk; j++) sum += pr[j] = exp(pr[j] - m);
                for (int64_t e = 0; e < Dv; e++) acc[e] = 0.0;
                for (int64_t j = 0; j < nk; j++)
                    for (int64_t e = 0; e < Dv; e++) acc[e] += pr[j] * fc_host_load(dt, V, (kb + j) * Dv + e);
                for (int64_t e = 0; e < Dv; e++) fc_host_store(dt, O, (qb + i) * Dv + e, acc[e] / sum);
            }
        }
    free(pr);
    return FC_OK;
}

bool fc_cpu_is_decode_op(fc_op op) { return op == FC_OP_UPDATE_SLICE || op == FC_OP_CACHE_ATTENTION; }

fc_status fc_cpu_run_decode(fc_cpu_program *p, const fc_group *gr, void *const *args) {
    const fc_node *n = gr->nodes[0];
    return n->op == FC_OP_UPDATE_SLICE ? update_slice(p, gr, n, args) : cache_attention(p, gr, n, args);
}

#endif

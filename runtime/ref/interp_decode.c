/*
 * interp_decode.c - the reference semantics of decoding with a key/value
 * cache (docs/DECODE.md): update_slice and cache_attention.
 *
 * Both read an integer scalar at run time (the offset, the key/value
 * length). The interpreter checks it against the shapes and refuses a value
 * out of range with FC_ERR_INPUT naming it: the oracle never reads or writes
 * outside a buffer, and an error leaves the caller's inout buffers as they
 * were (interp.c writes them back only after a successful run).
 */
#include "interp_impl.h"

/* The run-time integer of a rank-0 operand. */
static int64_t scalar_operand(const interp *ip, int i) { return (int64_t)operand(ip, i)->data[0]; }

fc_status fc_ref_run_update_slice(interp *ip)
{
    const ibuf *dst = operand(ip, 0), *src = operand(ip, 1);
    int ax;
    if (!fc_ref_norm_axis(ip->node->a.axis, dst->rank, &ax))
        return fc_ref_err(ip, FC_ERR_INPUT, "axis %lld is out of range", (long long)ip->node->a.axis);
    for (int d = 0; d < dst->rank; d++)
        if (d == ax ? src->shape[d] > dst->shape[d] : src->shape[d] != dst->shape[d])
            return fc_ref_err(ip, FC_ERR_INPUT, "the source's dimension %d (%lld) does not fit the destination's (%lld)",
                              d, (long long)src->shape[d], (long long)dst->shape[d]);
    int64_t off = scalar_operand(ip, 2), room = dst->shape[ax] - src->shape[ax];
    if (off < 0 || off > room)
        return fc_ref_err(ip, FC_ERR_INPUT,
                          "offset %lld is out of range: %lld rows along axis %d fit only at 0 .. %lld of %lld",
                          (long long)off, (long long)src->shape[ax], ax, (long long)room, (long long)dst->shape[ax]);
    fc_status st = fc_ref_set_result(ip, 0, dst->rank, dst->shape);
    if (st != FC_OK)
        return st;
    double *o = result(ip, 0)->data;
    memcpy(o, dst->data, sizeof(double) * (size_t)dst->numel);
    int64_t outer, len, inner, souter, slen, sinner;
    rows_at(dst, ax, &outer, &len, &inner);
    rows_at(src, ax, &souter, &slen, &sinner);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < slen; j++)
            memcpy(o + (a * len + off + j) * inner, src->data + (a * slen + j) * inner, sizeof(double) * (size_t)inner);
    return FC_OK;
}

/* softmax(scale q k^T) v per (batch, query head) over the keys j < len
 * (causal: j <= len - Sq + i), key head h / (Hq / Hkv). */
fc_status fc_ref_run_cache_attention(interp *ip)
{
    const ibuf *q = operand(ip, 0), *k = operand(ip, 1), *v = operand(ip, 2);
    int64_t B = q->shape[0], Hq = q->shape[1], Sq = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], S = k->shape[2], Dv = v->shape[3];
    if (Hkv < 1 || Hq % Hkv != 0)
        return fc_ref_err(ip, FC_ERR_INPUT, "q's %lld heads are not a multiple of k's %lld", (long long)Hq,
                          (long long)Hkv);
    int64_t len = scalar_operand(ip, 3);
    bool causal = ip->node->a.causal;
    if (len < (causal ? Sq : 1) || len > S)
        return fc_ref_err(ip, FC_ERR_INPUT,
                          "key/value length %lld is out of range: the cache holds %lld%s",
                          (long long)len, (long long)S, causal ? " and the queries need as many keys as there are queries" : "");
    int64_t oshape[4] = {B, Hq, Sq, Dv};
    fc_status st = fc_ref_set_result(ip, 0, 4, oshape);
    if (st != FC_OK)
        return st;
    double scale = ip->node->a.scale;
    if (scale == FC_ATTENTION_DEFAULT_SCALE)
        scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    double *p = fc_ref_alloc_zeroed(ip->ctx, len, sizeof(double));
    if (!p)
        return nomem(ip);
    double *o = result(ip, 0)->data;
    int64_t group = Hq / Hkv;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const double *qm = q->data + (b * Hq + h) * Sq * D;
            const double *km = k->data + (b * Hkv + h / group) * S * D;
            const double *vm = v->data + (b * Hkv + h / group) * S * Dv;
            double *om = o + (b * Hq + h) * Sq * Dv;
            for (int64_t i = 0; i < Sq; i++) {
                int64_t nk = causal ? len - Sq + i + 1 : len;
                fc_ref_attention_row(qm + i * D, km, vm, nk, D, Dv, scale, NULL, 0, false, p, om + i * Dv);
            }
        }
    fc_ctx_freemem(ip->ctx, p);
    return FC_OK;
}

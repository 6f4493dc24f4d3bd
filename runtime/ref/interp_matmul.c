/*
 * interp_matmul.c - the reference interpreter's matrix ops: matmul,
 * attention, and gemm (the fused matmul with its epilogue), each summing
 * its products in float64 in order k = 0..K-1.
 */
#include "interp_impl.h"

/* ================================================================ */
/* matmul and attention.                                             */
/* ================================================================ */

/*
 * Broadcast the batch dims (all but the last two) of up to four operands.
 * bshape gets the batch shape; strides[k] the batch strides of operand k in
 * units of its matrices.
 */
static fc_status bcast_batch(interp *ip, int nops, const int *brank, const int64_t *const *bdims,
                             int *nb, int64_t *bshape, int64_t (*strides)[FC_MAX_RANK])
{
    *nb = 0;
    for (int k = 0; k < nops; k++) {
        int64_t next[FC_MAX_RANK];
        int nr;
        char s1[256], s2[256];
        if (!fc_ref_bcast_shape(*nb, bshape, brank[k], bdims[k], &nr, next))
            return fc_ref_err(ip, FC_ERR_INPUT, "batch dims do not broadcast at run time (%s with %s)",
                              fc_ref_shape_str(*nb, bshape, s1, sizeof s1),
                              fc_ref_shape_str(brank[k], bdims[k], s2, sizeof s2));
        *nb = nr;
        memcpy(bshape, next, sizeof next);
    }
    for (int k = 0; k < nops; k++)
        fc_ref_bcast_strides(brank[k], bdims[k], *nb, strides[k]);
    return FC_OK;
}

/* bcast_batch of a matmul's two operands, whose batch dims are the first
 * arank of a's and the first brank of b's. */
static fc_status bcast_pair(interp *ip, const ibuf *a, int arank, const ibuf *b, int brank, int *nb, int64_t *bshape,
                            int64_t (*strides)[FC_MAX_RANK])
{
    const int ranks[2] = {arank, brank};
    const int64_t *bdims[2] = {a->shape, b->shape};
    return bcast_batch(ip, 2, ranks, bdims, nb, bshape, strides);
}

/*
 * PyTorch matmul: a rank-1 left operand is [1, K] and a rank-1 right
 * operand [K, 1], and the added dim is dropped from the result; batch dims
 * broadcast.
 */
fc_status fc_ref_run_matmul(interp *ip)
{
    const ibuf *a = operand(ip, 0), *b = operand(ip, 1);
    if (a->rank < 1 || b->rank < 1)
        return fc_ref_err(ip, FC_ERR_INPUT, "operands must have rank >= 1");
    int64_t M = a->rank == 1 ? 1 : a->shape[a->rank - 2], K = a->shape[a->rank - 1];
    int64_t Kb = b->rank == 1 ? b->shape[0] : b->shape[b->rank - 2], N = b->rank == 1 ? 1 : b->shape[b->rank - 1];
    if (K != Kb)
        return fc_ref_err(ip, FC_ERR_INPUT, "inner dimensions differ at run time (%lld vs %lld)", (long long)K,
                          (long long)Kb);

    int64_t bshape[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
    int nb;
    fc_status st =
        bcast_pair(ip, a, a->rank > 2 ? a->rank - 2 : 0, b, b->rank > 2 ? b->rank - 2 : 0, &nb, bshape, bstride);
    if (st != FC_OK)
        return st;

    int orank = nb;
    int64_t oshape[FC_MAX_RANK + 2];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    if (a->rank > 1)
        oshape[orank++] = M;
    if (b->rank > 1)
        oshape[orank++] = N;
    if ((st = fc_ref_set_result(ip, 0, orank, oshape)) != FC_OK)
        return st;

    double *c = result(ip, 0)->data;
    int64_t nbatch = prod(bshape, 0, nb);
    for (int64_t t = 0; t < nbatch; t++) {
        const double *am = a->data + offset_of(t, nb, bshape, bstride[0]) * M * K;
        const double *bm = b->data + offset_of(t, nb, bshape, bstride[1]) * K * N;
        double *cm = c + t * M * N; /* zeroed by fc_ref_set_result */
        /* k in the middle loop reads b row by row, which is many times
         * faster on big operands. Each c[m][j] still sums its products in
         * order k = 0..K-1, so it is bit for bit the textbook loop. */
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                double amk = am[m * K + k];
                for (int64_t j = 0; j < N; j++)
                    cm[m * N + j] += amk * bm[k * N + j];
            }
    }
    return FC_OK;
}

/*
 * attention(q, k, v, [mask]) = softmax(q @ k^T * scale [+ mask]) @ v over
 * [.., S, D] operands whose batch dims broadcast. The causal mask is
 * top-left aligned, as SDPA's is_causal: query i sees keys j <= i. The
 * optional mask broadcasts to the scores [batch.., Sq, Sk]: a bool mask
 * keeps the keys where it is true (a key it drops is -inf), a float mask is
 * added to the scaled score. A row that keeps no key is NaN (0/0), as the
 * written-out softmax of a row of -inf is.
 */
void fc_ref_attention_row(const double *qi, const double *km, const double *vm, int64_t nk, int64_t D, int64_t Dv,
                          double scale, const double *mrow, int64_t mstep, bool mbool, double *p, double *oi)
{
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < nk; j++) {
        double s = 0.0;
        for (int64_t d = 0; d < D; d++)
            s += qi[d] * km[j * D + d];
        p[j] = s * scale;
        if (mrow) {
            double x = mrow[j * mstep];
            p[j] = mbool ? (x != 0.0 ? p[j] : -INFINITY) : p[j] + x;
        }
        m = scalar_op(FC_OP_MAX, m, p[j], 0);
    }
    for (int64_t j = 0; j < nk; j++)
        sum += p[j] = exp(p[j] - m);
    for (int64_t d = 0; d < Dv; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < nk; j++)
            acc += p[j] * vm[j * Dv + d];
        oi[d] = acc / sum; /* no keys: 0/0 = NaN */
    }
}

fc_status fc_ref_run_attention(interp *ip)
{
    const ibuf *q = operand(ip, 0), *k = operand(ip, 1), *v = operand(ip, 2);
    const ibuf *mk = ip->node->nin > 3 ? operand(ip, 3) : NULL;
    bool mask_bool = mk && ip->node->in[3]->dtype == FC_BOOL;
    if (q->rank < 2 || k->rank < 2 || v->rank < 2)
        return fc_ref_err(ip, FC_ERR_INPUT, "q, k and v must have rank >= 2");
    int64_t Sq = q->shape[q->rank - 2], D = q->shape[q->rank - 1];
    int64_t Sk = k->shape[k->rank - 2], Dk = k->shape[k->rank - 1];
    int64_t Sv = v->shape[v->rank - 2], Dv = v->shape[v->rank - 1];
    if (Dk != D || Sv != Sk)
        return fc_ref_err(ip, FC_ERR_INPUT,
                          "shapes do not agree at run time "
                          "(q [.., %lld, %lld], k [.., %lld, %lld], v [.., %lld, %lld])",
                          (long long)Sq, (long long)D, (long long)Sk, (long long)Dk, (long long)Sv, (long long)Dv);

    /* The mask as a [mbatch.., Mq, Mk] operand: a rank-0 or rank-1 mask
     * gets leading 1s, Mq is 1 or Sq and Mk is 1 or Sk. */
    int64_t mshape[FC_MAX_RANK + 2], Mq = 1, Mk = 1;
    int mrank = 0;
    if (mk) {
        int pad = mk->rank < 2 ? 2 - mk->rank : 0;
        for (int i = 0; i < pad; i++)
            mshape[mrank++] = 1;
        for (int i = 0; i < mk->rank; i++)
            mshape[mrank++] = mk->shape[i];
        Mq = mshape[mrank - 2];
        Mk = mshape[mrank - 1];
        if ((Mq != 1 && Mq != Sq) || (Mk != 1 && Mk != Sk))
            return fc_ref_err(ip, FC_ERR_INPUT,
                              "the mask's last dims (%lld, %lld) do not broadcast to the scores (%lld, %lld)",
                              (long long)Mq, (long long)Mk, (long long)Sq, (long long)Sk);
    }

    int nops = mk ? 4 : 3;
    int brank[4] = {q->rank - 2, k->rank - 2, v->rank - 2, mrank - 2};
    const int64_t *bdims[4] = {q->shape, k->shape, v->shape, mshape};
    int64_t bshape[FC_MAX_RANK], bstride[4][FC_MAX_RANK];
    int nb;
    fc_status st = bcast_batch(ip, nops, brank, bdims, &nb, bshape, bstride);
    if (st != FC_OK)
        return st;
    int64_t oshape[FC_MAX_RANK + 2];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    oshape[nb] = Sq;
    oshape[nb + 1] = Dv;
    if ((st = fc_ref_set_result(ip, 0, nb + 2, oshape)) != FC_OK)
        return st;

    double scale = ip->node->a.scale;
    if (scale == FC_ATTENTION_DEFAULT_SCALE)
        scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    double *p = fc_ref_alloc_zeroed(ip->ctx, Sk, sizeof(double)); /* one row of probabilities */
    if (!p)
        return nomem(ip);

    double *o = result(ip, 0)->data;
    int64_t nbatch = prod(bshape, 0, nb);
    for (int64_t t = 0; t < nbatch; t++) {
        const double *qm = q->data + offset_of(t, nb, bshape, bstride[0]) * Sq * D;
        const double *km = k->data + offset_of(t, nb, bshape, bstride[1]) * Sk * D;
        const double *vm = v->data + offset_of(t, nb, bshape, bstride[2]) * Sk * Dv;
        const double *mm = mk ? mk->data + offset_of(t, nb, bshape, bstride[3]) * Mq * Mk : NULL;
        double *om = o + t * Sq * Dv;
        for (int64_t i = 0; i < Sq; i++) {
            /* Masked keys are left out, which is softmax with -inf there. */
            int64_t nk = ip->node->a.causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
            const double *mrow = mm ? mm + (Mq == 1 ? 0 : i) * Mk : NULL;
            int64_t mstep = Mk == 1 ? 0 : 1;
            fc_ref_attention_row(qm + i * D, km, vm, nk, D, Dv, scale, mrow, mstep, mask_bool, p, om + i * Dv);
        }
    }
    fc_ctx_freemem(ip->ctx, p);
    return FC_OK;
}

/* ================================================================ */
/* gemm: the fused matmul that passes/epilogue.c makes (docs/GEMM.md). */
/* Its own loops: transposed operands, several right operands, a tail. */
/* ================================================================ */

/*
 * gemm(a, b1..bn, [bias1..biasn], [residual], to=, spec=, scale=):
 *
 *   y[.., m, off_i + j] = act(scale * sum_k A[.., m, k] * Bi[.., k, j]
 *                             + bias_i[j] + residual[.., m, off_i + j])
 *
 * with A = a, or a's last two dims swapped when spec[0] (trans_a); Bi = bi,
 * or swapped when spec[1] (trans_b); off_i = N1 + .. + N(i-1). Everything is
 * float64, and run_node rounds the result to `to` once: the one rounding a
 * cuBLASLt epilogue makes, where the unfused graph rounded after the matmul
 * and after each op of its tail.
 */
fc_status fc_ref_run_gemm(interp *ip)
{
    const fc_node *n = ip->node;
    const int64_t *spec = n->a.list;
    FC_ASSERT(n->a.nlist == 6); /* checked by the builder */
    bool ta = spec[0] != 0, tb = spec[1] != 0, has_bias = spec[3] != 0, has_res = spec[4] != 0;
    int nw = (int)spec[2], act = (int)spec[5];
    const ibuf *a = operand(ip, 0);
    if (a->rank < 2)
        return fc_ref_err(ip, FC_ERR_INPUT, "the left operand must have rank >= 2");
    int64_t M = a->shape[a->rank - (ta ? 1 : 2)], K = a->shape[a->rank - (ta ? 2 : 1)];

    /* Batch dims broadcast between a and each right operand; with several
     * right operands those are matrices, so the batch is a's. */
    int nb = 0;
    int64_t bshape[FC_MAX_RANK], Ntot = 0;
    for (int i = 0; i < nw; i++) {
        const ibuf *w = operand(ip, 1 + i);
        if (w->rank < 2 || w->shape[w->rank - (tb ? 1 : 2)] != K)
            return fc_ref_err(ip, FC_ERR_INPUT, "right operand %d does not match K = %lld at run time", i,
                              (long long)K);
        int64_t bs[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
        int nbi;
        fc_status st = bcast_pair(ip, a, a->rank - 2, w, w->rank - 2, &nbi, bs, bstride);
        if (st != FC_OK)
            return st;
        if (i > 0 && (nbi != nb || memcmp(bs, bshape, sizeof(int64_t) * (size_t)nb)))
            return fc_ref_err(ip, FC_ERR_INPUT, "right operands have different batch dims");
        nb = nbi;
        memcpy(bshape, bs, sizeof bs);
        Ntot += w->shape[w->rank - (tb ? 2 : 1)];
    }
    int64_t oshape[FC_MAX_RANK];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nb);
    oshape[nb] = M;
    oshape[nb + 1] = Ntot;
    fc_status st = fc_ref_set_result(ip, 0, nb + 2, oshape);
    if (st != FC_OK)
        return st;
    double *y = result(ip, 0)->data; /* zeroed: the sums start there */
    int64_t nbatch = prod(bshape, 0, nb);

    int64_t off = 0;
    for (int i = 0; i < nw; i++) {
        const ibuf *w = operand(ip, 1 + i);
        int64_t N = w->shape[w->rank - (tb ? 2 : 1)];
        int64_t bs[FC_MAX_RANK], bstride[2][FC_MAX_RANK];
        int nbi;
        st = bcast_pair(ip, a, a->rank - 2, w, w->rank - 2, &nbi, bs, bstride);
        if (st != FC_OK)
            return st;
        for (int64_t t = 0; t < nbatch; t++) {
            const double *am = a->data + offset_of(t, nb, bshape, bstride[0]) * M * K;
            const double *bm = w->data + offset_of(t, nb, bshape, bstride[1]) * K * N;
            double *ym = y + t * M * Ntot + off;
            /* k in the middle, as fc_ref_run_matmul: each sum still adds its
             * products in order k = 0..K-1. */
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++) {
                    double amk = ta ? am[k * M + m] : am[m * K + k];
                    for (int64_t j = 0; j < N; j++)
                        ym[m * Ntot + j] += amk * (tb ? bm[j * K + k] : bm[k * N + j]);
                }
        }
        off += N;
    }

    /* The epilogue, element by element: scale, bias, residual, activation. */
    const ibuf *res = has_res ? operand(ip, n->nin - 1) : NULL;
    if (res && res->numel != result(ip, 0)->numel)
        return fc_ref_err(ip, FC_ERR_INPUT, "the residual's shape differs from the result's at run time");
    int64_t total = nbatch * M * Ntot;
    for (int64_t e = 0; e < total; e++) {
        int64_t col = e % Ntot;
        double v = n->a.scale * y[e];
        if (has_bias) {
            /* col lies in right operand i's columns [off, off + N). */
            int64_t base = 0;
            for (int i = 0; i < nw; i++) {
                const ibuf *w = operand(ip, 1 + i), *b = operand(ip, 1 + nw + i);
                int64_t N = w->shape[w->rank - (tb ? 2 : 1)];
                if (col < base + N) {
                    if (b->numel != N)
                        return fc_ref_err(ip, FC_ERR_INPUT, "bias %d has %lld elements, not %lld", i,
                                          (long long)b->numel, (long long)N);
                    v += b->data[col - base];
                    break;
                }
                base += N;
            }
        }
        if (res)
            v += res->data[e];
        if (act == 1)
            v = scalar_op(FC_OP_RELU, v, 0, 0);
        else if (act == 2)
            v = scalar_op(FC_OP_GELU_TANH, v, 0, 0);
        y[e] = v;
    }
    return FC_OK;
}

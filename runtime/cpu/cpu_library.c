/* cpu_library.c - the CPU backend's library groups (matmul, gemm, attention): BLAS, or plain loops, on host buffers (cpu_impl.h). */
#include "runtime/cpu/cpu_impl.h"
#include "runtime/collective.h"

#ifdef FUSEC_HAVE_LLVM

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* -DFUSEC_NO_CBLAS (in CMAKE_C_FLAGS) forces the plain loops, to test them on
 * a machine that has OpenBLAS. */
#if defined(FUSEC_HAVE_CBLAS) && !defined(FUSEC_NO_CBLAS)
#define USE_CBLAS 1
#include <cblas.h>
#endif

/* ------------------------------------------------------------------ */
/* Library calls: matmul, attention, gemm.                             */
/* ------------------------------------------------------------------ */

static int64_t numel_of(const fc_value *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->dims[d];
    return n;
}

/* C = alpha op(A) op(B) + beta C, row-major, f32 or f64: cblas where it is
 * linked, else these loops (one text for both types). */
#ifndef USE_CBLAS
#define GEMM_LOOPS(T)                                                                                                  \
    for (int64_t i = 0; i < M; i++) {                                                                                  \
        T *c = C + i * ldc;                                                                                            \
        for (int64_t j = 0; j < N; j++) c[j] = beta == 0 ? 0 : (T)beta * c[j];                                         \
        for (int64_t k = 0; k < K; k++) {                                                                              \
            T a = (T)alpha * (ta ? A[k * lda + i] : A[i * lda + k]);                                                   \
            if (tb)                                                                                                    \
                for (int64_t j = 0; j < N; j++) c[j] += a * Bm[j * ldb + k];                                           \
            else                                                                                                       \
                for (int64_t j = 0; j < N; j++) c[j] += a * Bm[k * ldb + j];                                           \
        }                                                                                                              \
    }
#endif

/* f64 (double operands) or f32 (float, alpha and beta rounded to float:
 * the product is computed in the operands' type either way). */
static void gemm(bool f64, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void *Av,
                 int64_t lda, const void *Bv, int64_t ldb, double beta, void *Cv, int64_t ldc) {
#ifdef USE_CBLAS
    const CBLAS_TRANSPOSE a_op = ta ? CblasTrans : CblasNoTrans, b_op = tb ? CblasTrans : CblasNoTrans;
    if (f64)
        cblas_dgemm(CblasRowMajor, a_op, b_op, (int)M, (int)N, (int)K, alpha, Av, (int)lda, Bv, (int)ldb, beta, Cv,
                    (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, a_op, b_op, (int)M, (int)N, (int)K, (float)alpha, Av, (int)lda, Bv, (int)ldb,
                    (float)beta, Cv, (int)ldc);
#else
    if (f64) {
        const double *A = Av, *Bm = Bv;
        double *C = Cv;
        GEMM_LOOPS(double)
    } else {
        const float *A = Av, *Bm = Bv;
        float *C = Cv;
        GEMM_LOOPS(float)
    }
#endif
}

/* A float operand in the compute type of its dtype: f64 and f32 as they are,
 * f16 and bf16 converted to a new f32 array (*owned, to free). */
static const void *as_compute(fc_dtype dt, const void *data, int64_t n, void **owned) {
    *owned = NULL;
    if (dt == FC_F32 || dt == FC_F64) return data;
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) return NULL;
    const uint16_t *h = data;
    for (int64_t i = 0; i < n; i++) f[i] = dt == FC_BF16 ? fc_bf16_to_f32(h[i]) : fc_f16_to_f32(h[i]);
    *owned = f;
    return f;
}

/* A result computed in f32 (or f64) into storage of dtype dt, rounded once. */
static void store_compute(fc_dtype dt, const void *src, void *dst, int64_t n) {
    if (dt == FC_F32 || dt == FC_F64) {
        if (src != dst) memcpy(dst, src, (size_t)n * fc_dtype_size(dt));
        return;
    }
    const float *f = src;
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = dt == FC_BF16 ? fc_f32_to_bf16(f[i]) : fc_f32_to_f16(f[i]);
}

/* Batch dims of up to four [.., X, Y] operands, broadcast (NumPy rules). */
typedef struct batch {
    int nb;
    int64_t shape[FC_MAX_RANK];
    int64_t stride[4][FC_MAX_RANK]; /* in matrices; 0 where broadcast */
    int64_t count;
} batch;

static void batch_init(batch *bt, int nops, const fc_value *const *ops, const int *nbatch) {
    memset(bt, 0, sizeof *bt);
    for (int i = 0; i < nops; i++)
        if (nbatch[i] > bt->nb) bt->nb = nbatch[i];
    for (int d = 0; d < bt->nb; d++) bt->shape[d] = 1;
    for (int i = 0; i < nops; i++) {
        int off = bt->nb - nbatch[i];
        int64_t s = 1;
        for (int d = bt->nb - 1; d >= 0; d--) {
            int64_t dim = d >= off ? ops[i]->dims[d - off] : 1;
            bt->stride[i][d] = dim == 1 ? 0 : s;
            s *= dim;
            if (dim != 1) bt->shape[d] = dim;
        }
    }
    bt->count = 1;
    for (int d = 0; d < bt->nb; d++) bt->count *= bt->shape[d];
}

static int64_t batch_offset(const batch *bt, int op, int64_t t) {
    int64_t off = 0;
    for (int d = bt->nb - 1; d >= 0; d--) {
        off += (t % bt->shape[d]) * bt->stride[op][d];
        t /= bt->shape[d];
    }
    return off;
}

static bool fits_int(int64_t x) { return x >= 0 && x <= 0x7fffffff; }

/* The host address of node operand v: the group's inputs hold each
 * distinct operand once, in args[0 .. ninputs). */
static void *operand_ptr(const fc_group *gr, void *const *args, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return args[i];
    FC_UNREACHABLE("a library operand that is not a group input");
}

/* Element i of a float tensor of dtype dt, as a float. */
static float load_float(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_F32: return ((const float *)data)[i];
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)data)[i]);
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)data)[i]);
    default: FC_UNREACHABLE("load_float of a non-f32/f16/bf16 dtype");
    }
}

/*
 * matmul and gemm (passes/epilogue.c, docs/GEMM.md), both decoded at
 * compile time (fc_gemm_info_of, in fc_cpu_check_library):
 *
 *   y[.., m, off_i + j] = act(scale * sum_k A[.., m, k] Bi[.., k, j] + bias_i[j] + residual[.., m, off_i + j])
 *
 * One GEMM per right operand (and per batch, unless the operand has no
 * batch dims: the left one is then dense [batch * M, K] and one call does
 * them all) writes its block of columns of an f32 result (f64 for f64),
 * with scale as alpha; the epilogue then adds bias and residual, applies the
 * activation and rounds once to the result's dtype. matmul's rank-1
 * operands are [1, K] and [K, 1].
 */
static fc_status run_gemm(fc_cpu_program *p, const fc_group *gr, const fc_node *n, const fc_gemm_info *info,
                         void *const *args) {
    FC_ASSERT(info->a); /* decoded by check_library */
    const fc_gemm_info gi = *info;
    const fc_value *a = gi.a, *y = n->out[0];
    fc_dtype in_dt = a->dtype, out_dt = y->dtype;
    bool f64 = in_dt == FC_F64;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int64_t M = a->rank == 1 ? 1 : a->dims[a->rank - (gi.trans_a ? 1 : 2)];
    int64_t K = a->dims[a->rank - (gi.trans_a ? 2 : 1)];
    int64_t total = numel_of(y), Ntot = 0;
    for (int i = 0; i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        Ntot += w->rank == 1 ? 1 : w->dims[w->rank - (gi.trans_b ? 2 : 1)];
    }
    if (!fits_int(total / (Ntot > 0 ? Ntot : 1)) || !fits_int(Ntot) || !fits_int(K))
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "%s: a dimension exceeds the BLAS interface's int",
                            fc_op_table[n->op].name);
    /* The product lands in the result itself when it has the compute type
     * and nothing follows it; else in a temporary. */
    bool epilogue = gi.has_bias || gi.has_residual || gi.act != FC_GEMM_ACT_NONE;
    void *out = args[gr->ninputs];
    void *C = out, *tmp_c = NULL, *owned[FC_MAX_RANK + 2] = {NULL};
    int nowned = 0;
    fc_status st = FC_OK;
    if (out_dt != (f64 ? FC_F64 : FC_F32) || epilogue) C = tmp_c = malloc(es * (size_t)(total > 0 ? total : 1));
    const void *A = as_compute(in_dt, operand_ptr(gr, args, a), numel_of(a), &owned[nowned]);
    nowned++;
    if (!C || (!A && numel_of(a) > 0)) st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (%s)", fc_op_table[n->op].name);
    int64_t off = 0;
    for (int i = 0; st == FC_OK && i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        int64_t N = w->rank == 1 ? 1 : w->dims[w->rank - (gi.trans_b ? 2 : 1)];
        const fc_value *ops[2] = {a, w};
        int nbatch[2] = {a->rank > 2 ? a->rank - 2 : 0, w->rank > 2 ? w->rank - 2 : 0};
        batch bt;
        batch_init(&bt, 2, ops, nbatch);
        void *own = NULL;
        const void *W = as_compute(in_dt, operand_ptr(gr, args, w), numel_of(w), &own);
        if (own && nowned < FC_MAX_RANK + 2) owned[nowned++] = own;
        else if (own) { /* more weights than slots: keep the list bounded */
            free(own);
            st = fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "gemm: too many 16-bit right operands");
            break;
        }
        if (!W && numel_of(w) > 0) {
            st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (%s)", fc_op_table[n->op].name);
            break;
        }
        if (K == 0 || M == 0 || N == 0) { /* empty sums are 0; BLAS rejects K = 0 */
            for (int64_t t = 0; t < bt.count && K == 0; t++)
                for (int64_t m = 0; m < M; m++)
                    memset((char *)C + (size_t)((t * M + m) * Ntot + off) * es, 0, (size_t)N * es);
            off += N;
            continue;
        }
        bool one = nbatch[1] == 0 && !gi.trans_a;
        int64_t nb = one ? 1 : bt.count, rows = one ? M * bt.count : M;
        int64_t lda = gi.trans_a ? M : K, ldb = gi.trans_b ? K : N;
        for (int64_t t = 0; t < nb; t++) {
            const char *at = (const char *)A + (size_t)(batch_offset(&bt, 0, t) * M * K) * es;
            const char *wt = (const char *)W + (size_t)(batch_offset(&bt, 1, t) * K * N) * es;
            char *ct = (char *)C + (size_t)(t * M * Ntot + off) * es;
            gemm(f64, gi.trans_a, gi.trans_b, rows, N, K, gi.alpha, at, lda, wt, ldb, 0.0, ct, Ntot);
        }
        off += N;
    }
    if (st == FC_OK && tmp_c) {
        if (f64) { /* f64: matmul only, no epilogue */
            memcpy(out, C, (size_t)total * es);
        } else {
            const float *c = C;
            for (int64_t e = 0; e < total; e++) {
                float v = c[e];
                if (gi.has_bias) {
                    int64_t col = e % Ntot, base = 0;
                    for (int i = 0; i < gi.nweights; i++) {
                        int64_t N = gi.w[i]->dims[gi.w[i]->rank - (gi.trans_b ? 2 : 1)];
                        if (col < base + N) {
                            v += load_float(gi.bias[i]->dtype, operand_ptr(gr, args, gi.bias[i]), col - base);
                            break;
                        }
                        base += N;
                    }
                }
                if (gi.has_residual) v += load_float(gi.residual->dtype, operand_ptr(gr, args, gi.residual), e);
                if (gi.act == FC_GEMM_ACT_RELU) v = v < 0 ? 0.0f : v;
                else if (gi.act == FC_GEMM_ACT_GELU_TANH) /* x/2 (1 + tanh u) = x / (1 + e^-2u), as codegen */
                    v = v / (1.0f + expf(-2.0f * 0.79788456080286535588f * (v + 0.044715f * v * v * v)));
                switch (out_dt) {
                case FC_F32: ((float *)out)[e] = v; break;
                case FC_BF16: ((uint16_t *)out)[e] = fc_f32_to_bf16(v); break;
                case FC_F16: ((uint16_t *)out)[e] = fc_f32_to_f16(v); break;
                default: FC_UNREACHABLE("gemm result dtype");
                }
            }
        }
    }
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(tmp_c);
    return st;
}

/* Element i of an attention mask as a double: a bool mask (1 keeps the
 * key, 0 drops it) or a float one (added to the score). */
static double load_mask(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_BOOL: return ((const uint8_t *)data)[i] != 0 ? 1.0 : 0.0;
    case FC_F64: return ((const double *)data)[i];
    default: return load_float(dt, data, i);
    }
}

/* One row of attention scores s[0 .. Sk) becomes probabilities: the mask
 * row at `mrow` applied (read as a double, whatever its dtype), a softmax
 * over the first nk keys, zeros after them. NaN wins the max, as in the
 * reference; a row whose keys are all dropped is NaN (0/0). */
#define SOFTMAX_ROW(name, T, EXP)                                                                               \
    static void name(T *s, int64_t nk, int64_t Sk, const fc_value *mk, const void *M, int64_t mrow, int64_t Mk) { \
        T m = -INFINITY, sum = 0;                                                                               \
        for (int64_t j = 0; j < nk; j++) {                                                                      \
            if (mk) {                                                                                           \
                double mv = load_mask(mk->dtype, M, mrow + (Mk == 1 ? 0 : j));                                  \
                s[j] = mk->dtype == FC_BOOL ? (mv != 0 ? s[j] : -INFINITY) : (T)(s[j] + mv);                    \
            }                                                                                                   \
            m = isnan(s[j]) || s[j] > m ? s[j] : m;                                                             \
        }                                                                                                       \
        for (int64_t j = 0; j < nk; j++) sum += s[j] = EXP(s[j] - m);                                           \
        for (int64_t j = 0; j < Sk; j++) s[j] = j < nk ? s[j] / sum : 0;                                        \
    }
SOFTMAX_ROW(softmax_row_f32, float, expf)
SOFTMAX_ROW(softmax_row_f64, double, exp)
#undef SOFTMAX_ROW

/*
 * attention(q, k, v, [mask]) = softmax(q k^T scale [+ mask]) v, per batch,
 * in f32 (f64 for f64): the scores by GEMM; per row the mask (a bool mask
 * drops the keys where it is false, a float mask is added), then a softmax
 * over the keys the row sees (causal: j <= i, the others left out, as the
 * reference does); the probabilities times v by GEMM. A row whose keys are
 * all dropped is NaN, as 0/0 in the reference. The mask is [mbatch.., Mq,
 * Mk] with Mq 1 or Sq, Mk 1 or Sk (missing dims are 1), its batch dims
 * broadcast with the others'.
 */
static fc_status run_attention(fc_cpu_program *p, const fc_group *gr, const fc_node *n, void *const *args) {
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2], *o = n->out[0];
    const fc_value *mk = n->nin > 3 ? n->in[3] : NULL;
    fc_dtype dt = q->dtype;
    bool f64 = dt == FC_F64;
    int64_t Sq = q->dims[q->rank - 2], D = q->dims[q->rank - 1], Sk = k->dims[k->rank - 2], Dv = v->dims[v->rank - 1];
    int64_t Mq = mk && mk->rank >= 2 ? mk->dims[mk->rank - 2] : 1, Mk = mk && mk->rank >= 1 ? mk->dims[mk->rank - 1] : 1;
    const fc_value *ops[4] = {q, k, v, mk};
    int nbatch[4] = {q->rank - 2, k->rank - 2, v->rank - 2, mk && mk->rank > 2 ? mk->rank - 2 : 0};
    batch bt;
    batch_init(&bt, mk ? 4 : 3, ops, nbatch);
    if (!fits_int(Sq) || !fits_int(Sk) || !fits_int(D) || !fits_int(Dv))
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "attention: a dimension exceeds the BLAS interface's int");
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    void *oq, *ok, *ov, *oo = NULL;
    const char *Q = as_compute(dt, operand_ptr(gr, args, q), numel_of(q), &oq);
    const char *Kp = as_compute(dt, operand_ptr(gr, args, k), numel_of(k), &ok);
    const char *V = as_compute(dt, operand_ptr(gr, args, v), numel_of(v), &ov);
    const void *M = mk ? operand_ptr(gr, args, mk) : NULL;
    char *O = args[gr->ninputs];
    if (dt == FC_F16 || dt == FC_BF16) O = oo = malloc(sizeof(float) * (size_t)(numel_of(o) > 0 ? numel_of(o) : 1));
    char *S = malloc(es * (size_t)(Sq * Sk > 0 ? Sq * Sk : 1));
    fc_status st = FC_OK;
    if ((!Q && numel_of(q)) || (!Kp && numel_of(k)) || (!V && numel_of(v)) || (!O && numel_of(o)) || !S)
        st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (attention)");
    for (int64_t t = 0; st == FC_OK && t < bt.count; t++) {
        const char *qt = Q + (size_t)(batch_offset(&bt, 0, t) * Sq * D) * es;
        const char *kt = Kp + (size_t)(batch_offset(&bt, 1, t) * Sk * D) * es;
        const char *vt = V + (size_t)(batch_offset(&bt, 2, t) * Sk * Dv) * es;
        int64_t mbase = mk ? batch_offset(&bt, 3, t) * Mq * Mk : 0;
        char *ot = O + (size_t)(t * Sq * Dv) * es;
        if (Sq == 0 || Dv == 0) continue;
        if (Sk == 0) { /* no keys at all: NaN */
            for (int64_t i = 0; i < Sq * Dv; i++) {
                if (f64) ((double *)ot)[i] = NAN;
                else ((float *)ot)[i] = NAN;
            }
            continue;
        }
        gemm(f64, false, true, Sq, Sk, D, scale, qt, D, kt, D, 0.0, S, Sk);
        for (int64_t i = 0; i < Sq; i++) {
            int64_t nk = n->a.causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
            int64_t mrow = mbase + (Mq == 1 ? 0 : i) * Mk;
            if (f64) softmax_row_f64((double *)S + i * Sk, nk, Sk, mk, M, mrow, Mk);
            else softmax_row_f32((float *)S + i * Sk, nk, Sk, mk, M, mrow, Mk);
        }
        gemm(f64, false, false, Sq, Dv, Sk, 1.0, S, Sk, vt, Dv, 0.0, ot, Dv);
    }
    if (st == FC_OK && oo) store_compute(dt, O, args[gr->ninputs], numel_of(o));
    free(oq);
    free(ok);
    free(ov);
    free(oo);
    free(S);
    return st;
}

fc_status fc_cpu_run_library(fc_cpu_program *p, const fc_group *gr, const fc_gemm_info *gi, void *const *args) {
    const fc_node *n = gr->nodes[0];
    if (n->op == FC_OP_ATTENTION) return run_attention(p, gr, n, args);
    if (fc_cpu_is_decode_op(n->op)) return fc_cpu_run_decode(p, gr, args);
    if (fc_op_is_collective(n->op)) {
        int64_t shape[FC_MAX_RANK];
        for (int d = 0; d < n->in[0]->rank; d++) shape[d] = n->in[0]->dims[d];
        return fc_host_collective(p->ctx, p->opts.tp, p->opts.tp_rank, n, n->in[0]->dtype, n->in[0]->rank, shape,
                                  args[0], args[gr->ninputs]);
    }
    return run_gemm(p, gr, n, gi, args);
}

#endif

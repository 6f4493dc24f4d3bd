/*
 * pad.c - GEMM shapes the fast kernels take: dimensions padded to 16-byte
 * rows where that pays, and GEMMs over an empty K written as what they
 * compute (docs/GEMM.md, "Unaligned shapes").
 *
 * Why 16 bytes. Every row a GEMM reads or writes starts at a multiple of
 * its leading dimension; the tensor-core kernels load and store rows 16
 * bytes at a time (cp.async, TMA, 128-bit vectors), so a leading dimension
 * that is not a multiple of 16 bytes (8 bf16/f16 elements, 4 f32) leaves
 * only kernels that move one element at a time, several times slower. In
 * the row-major mapping (docs/GEMM.md) the leading dimensions are K (the
 * rows of a, and of a transposed weight), N (the rows of an untransposed
 * weight, and of the result); M is never one (a transposed a is left
 * alone). So K and N are what gets padded:
 *
 *   N  the weights get zero columns and the result N_p columns, of which a
 *      slice gives the graph its N. A weight that is a parameter is padded
 *      by appending one more weight, a zero block, to the gemm: the runtime
 *      builds the concatenated weight once and keeps it, as it does for
 *      fused siblings (fc_program_weights_changed refreshes it); the zero
 *      block is a load-time kernel (passes/loadtime.c). A weight that a
 *      kernel computes is padded by a concat that fusion puts into that
 *      kernel; for a cast of a parameter (autocast) that kernel runs at
 *      load. The slice is a view: a kernel that reads the result reads it
 *      through the view, so only a result that leaves the graph (or that a
 *      library call reads) costs a copy.
 *   K  a and the weights get zero columns (rows, for an untransposed
 *      weight), through concats: the kernel that produces a writes the
 *      padded rows itself (the concat joins its group); a weight that is a
 *      parameter (or a cast of one) is padded by a load-time kernel, once,
 *      not at every run.
 *
 * A result with unaligned N that the backend writes in place by aligned
 * GEMMs over interleaved rows (fc_pad_rule.interleave_min_rows; the CUDA
 * runtime, runtime/cuda/cublaslt.h) is left unpadded when that is cheaper
 * than the padded GEMM and its compaction copy: an LM head's returned
 * logits at large M.
 *
 * The cost rule (plan_of, fc_pad_rule) estimates both shapes from the device's floors: a
 * GEMM takes the longer of its math and its bytes, and the unaligned one
 * SLOWDOWN times the math (measured 3 to 7x at M >= 128, and nothing when
 * the bytes dominate, at M = 1; docs/PERF.md) and its bytes slower too
 * (few rows: 1.5x, 3x for cuBLASLt on a [K, N] weight); the padded one adds every
 * copy and launch the padding makes. Padding is done only when that is
 * faster by a margin.
 *
 * K = 0: a product over an empty sum is zeros, so such a gemm is its
 * epilogue over zeros (act(residual + bias)) and a matmul is a `full`;
 * no backend has to run a GEMM that reads nothing.
 *
 * Pipeline position: after epilogue, so that the gemm it pads already has
 * its bias, activation and fused siblings (one zero block pads them all,
 * and the slice does not break the tail matching); before fusion, which
 * puts the concats and the slice into kernels.
 */
#include "passes/epilogue.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

#include <string.h>

/* MAX_OPERANDS: the operands a rewritten gemm may have (the graph's
 * largest sibling group plus two). */
enum { ROW_BYTES = 16, MAX_OPERANDS = 256 };

/* The rule's device (DESIGN's H200 floors: bf16 GEMMs about 770 TFLOP/s,
 * copies about 4 TB/s; f32 without TF32 at its SIMT rate), and how much
 * slower the math of an unaligned GEMM runs. MARGIN: padding must win by
 * that factor, so that a shape near the break-even keeps its one call. */
/* bytes_slowdown: at M = 1 and 8 the unaligned GEMMs streamed their
 * weights 1.35 to 3.0 times slower than the aligned shape's kernel (cuBLASLt's
 * align1 kernels, the [K, N] GEMV on odd rows; bench/gemm_sweep.sh,
 * docs/PERF.md), 1.02 to 1.2 at a few [N, K] shapes: 1.5.
 * kn_bytes_slowdown: cuBLASLt's align1 kernels alone, on a [K, N] weight at
 * M = 8 (the sweep, its time over the aligned shape's, each less a 2 us
 * launch): 8 x 32001 x 767 0.0442 ms against 0.0152 (cuBLASLt at 32008 x
 * 768), 3.2x; 8 x 30522 x 767 0.0435 against the 46.9 MB of 30528 x 768 at
 * 4 TB/s (11.7 us; its measured 0.0283 is the skinny kernel's), 3.6x;
 * 8 x 50257 x 768 0.0656 against 0.0237 and 8 x 32001 x 768 0.0430 against
 * 0.0152, 2.9x and 3.1x: 3.0, the low end (as slowdown's). At 1.5 the rule
 * priced 8 x 32001 x 767 at 22 us unaligned (measured 44; at 3.0, 41) and
 * left it unpadded. */
const fc_pad_rule fc_pad_rule_h200 = {
    .flops16 = 770e12, .flops32 = 50e12, .bytes_per_s = 4.0e12, .launch_s = 2e-6, .slowdown = 3.0, .margin = 0.8,
    .interleave_min_rows = 128, /* FC_CUBLASLT_INTERLEAVE_MIN_ROWS */
    .bytes_slowdown = 1.5,
    .gemv_max_m = 8, .gemv_kn_max_m = 1, .gemv_k_step = 256, .gemv_kn_max_k = 4096, /* codegen/cuda/gemv.h */
    .kn_bytes_slowdown = 3.0,
};

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static bool is_param(const fc_value *v) { return !v->def && !v->weak && v->param_index >= 0; }

/* Whether v is stored by something other than a kernel that can write it
 * padded: a parameter, or a library call's (gemm, attention) result. */
static bool stored_as_is(const fc_value *v) {
    return !v->def || fc_op_table[v->def->op].kind == FC_KIND_OPAQUE;
}

/* Whether a weight padded by a concat is padded once, when the weights are
 * loaded, not at every run: a parameter, or a cast of one (autocast's
 * form), whose padded form is computed from parameters alone
 * (passes/loadtime.c). */
static bool padded_at_load(const fc_value *v) {
    return is_param(v) || (v->def && v->def->op == FC_OP_CAST && is_param(v->def->in[0]));
}

static double copy_s(const fc_pad_rule *r, double elems, int es) { return 2.0 * elems * es / r->bytes_per_s + r->launch_s; }

/* How many times slower an unaligned GEMM streams its bytes: kn, a weight
 * [K, N] that the general GEMM runs (kn_bytes_slowdown), else the rule's
 * bytes_slowdown. */
static double bytes_factor(const fc_pad_rule *r, bool kn) {
    double f = kn && r->kn_bytes_slowdown > 0 ? r->kn_bytes_slowdown : r->bytes_slowdown;
    return f > 0 ? f : 1;
}

/* One GEMM's time: the longer of its math and its bytes, the math
 * SLOWDOWN times slower and the bytes bytes_factor(kn) times when
 * unaligned. */
static double gemm_s(const fc_pad_rule *r, double M, double N, double K, int es, bool aligned, bool kn) {
    double math = 2.0 * M * N * K / (es == 2 ? r->flops16 : r->flops32);
    double bytes = (M * K + K * N + M * N) * es / r->bytes_per_s;
    if (!aligned) return r->slowdown * math + bytes_factor(r, kn) * bytes + r->launch_s;
    return (math > bytes ? math : bytes) + r->launch_s;
}

/* Facts about the graph the rule reads, by value id. */
typedef struct pad_ctx {
    fc_rewriter rw;
    const fc_pad_rule *rule;
    bool *leaves;       /* the value is a graph result or read by a library call */
    fc_value **padded;  /* by value id: its K-padded form, made once */
    int nvalues;
} pad_ctx;

/* What one gemm needs: padded K and N, and how. */
typedef struct pad_plan {
    fc_gemm_info gi;
    int64_t M, N, K, Np, Kp;
    bool pad_k, pad_n;
    bool n_by_block; /* N padded by a zero weight the runtime keeps */
    bool transpose_w; /* not padded: the weight transposed at load, for the in-place form */
} pad_plan;

static bool all_params(const fc_gemm_info *gi) {
    for (int i = 0; i < gi->nweights; i++)
        if (!is_param(gi->w[i]) || gi->w[i]->rank != 2) return false;
    for (int i = 0; gi->has_bias && i < gi->nweights; i++)
        if (!is_param(gi->bias[i])) return false;
    return true;
}

/* The time of p's result written in place, unaligned N and all, by the
 * backend's aligned GEMMs over rows R apart (fc_pad_rule.interleave_min_rows;
 * the CUDA runtime's conditions, runtime/cuda/cublaslt.h): the aligned
 * GEMM's time, the weight read R - 1 more times, R + 2 launches, the two
 * edge GEMMs' reads of a and their strided copies. -1 where it does not
 * apply. eo: the result's element size. */
static double interleaved_s(const fc_pad_rule *r, const fc_gemm_info *gi, const pad_plan *p, int es, int eo) {
    if (r->interleave_min_rows <= 0 || !gi->trans_b || gi->has_bias || gi->has_residual || 16 % eo) return -1;
    int64_t R = 1;
    while ((R * p->N * eo) % 16) R *= 2; /* the fewest rows apart that start aligned */
    const int64_t g = 16 / eo;
    if (p->M % R || p->M / R < r->interleave_min_rows || p->N < 2 * g) return -1;
    double M = (double)p->M, N = (double)p->N, K = (double)p->K;
    double t = gemm_s(r, M, N, K, es, true, false);
    t += (double)(R - 1) * N * K * es / r->bytes_per_s + (double)(R + 3) * r->launch_s;
    t += 2 * (M * K * es + 2 * M * (double)g * eo) / r->bytes_per_s;
    return t;
}

/* Whether the backend's GEMV runs p's gemm, padded or not
 * (fc_pad_rule.gemv_max_m): one 16-bit weight computed at load, few enough
 * rows for its layout, the result of the operands' type. Its padded form
 * pads the weight alone, K of [N, K] (a's pad is read around: the kernel
 * reads a's rows with a bound), N of [K, N] (the result's slice is written
 * around: the kernel writes the unpadded rows), each for nothing per run;
 * the other dim costs the kernel nothing unaligned. */
static bool gemv_form(const fc_pad_rule *r, const fc_node *n, const pad_plan *p, int es) {
    const fc_gemm_info *gi = &p->gi;
    if (es != 2 || gi->nweights != 1 || gi->out != gi->a->dtype || n->out[0]->dtype != gi->a->dtype || !padded_at_load(gi->w[0]) ||
        (gi->has_bias && !padded_at_load(gi->bias[0])))
        return false;
    if (gi->trans_b) return p->M <= r->gemv_max_m && r->gemv_k_step > 0 && p->Kp % r->gemv_k_step == 0;
    return p->M <= r->gemv_kn_max_m && p->K <= r->gemv_kn_max_k;
}

/* Decide for gemm n; false leaves it as it is. */
static bool plan_of(const pad_ctx *c, const fc_node *n, pad_plan *p) {
    memset(p, 0, sizeof *p);
    if (n->op != FC_OP_GEMM || !fc_gemm_info_of(n, &p->gi)) return false;
    const fc_gemm_info *gi = &p->gi;
    const fc_value *a = gi->a, *y = n->out[0];
    int es = (int)fc_dtype_size(a->dtype);
    if ((es != 2 && es != 4) || gi->trans_a || !fc_value_is_static(a) || !fc_value_is_static(y)) return false;
    for (int i = 0; i < gi->nweights; i++)
        if (gi->w[i]->rank != 2 || !fc_value_is_static(gi->w[i])) return false; /* a batched weight: no */
    int64_t align = ROW_BYTES / es;
    p->K = a->dims[a->rank - 1];
    p->N = y->dims[y->rank - 1];
    p->M = 1;
    for (int d = 0; d + 1 < a->rank; d++) p->M *= a->dims[d];
    if (p->M == 0 || p->N == 0 || p->K == 0) return false;
    p->Kp = round_up(p->K, align);
    p->Np = round_up(p->N, align);
    /* Untransposed siblings have rows of N_i each, but the runtime runs
     * their concatenation, whose rows are N long: only N counts. */
    p->pad_k = p->Kp != p->K;
    p->pad_n = p->Np != p->N && !gi->has_residual; /* a residual would need padding too */
    /* Siblings are concatenated by the runtime once, from parameters: a
     * sibling padded by a concat would be a value computed per run, which
     * that one copy would not follow. So siblings are padded only in N, by
     * the zero block, and only a single weight is padded through concats. */
    if (p->pad_k && gi->nweights > 1) p->pad_k = false;
    if (!p->pad_k && !p->pad_n) return false;
    const fc_pad_rule *r = c->rule;
    if (gemv_form(r, n, p, es)) {
        if (gi->trans_b) p->pad_n = false;
        else p->pad_k = false;
        if (!p->pad_k && !p->pad_n) return false;
        /* The GEMV runs the unaligned shape too: bytes_slowdown. */
        double before = gemm_s(r, (double)p->M, (double)p->N, (double)p->K, es, false, false);
        double after =
            gemm_s(r, (double)p->M, (double)(p->pad_n ? p->Np : p->N), (double)(p->pad_k ? p->Kp : p->K), es, true, false);
        return after < r->margin * before;
    }
    p->n_by_block = p->pad_n && !p->pad_k && all_params(gi);
    if (p->pad_n && !p->n_by_block && gi->nweights > 1) p->pad_n = false;
    if (!p->pad_k && !p->pad_n) return false;

    int64_t Kp = p->pad_k ? p->Kp : p->K, Np = p->pad_n ? p->Np : p->N;
    double extra = 0;
    if (p->pad_k && stored_as_is(a)) extra += copy_s(r, (double)p->M * (double)Kp, es);
    /* A weight's padding, and the zero block, cost nothing per run when
     * computed at load (padded_at_load); a weight computed per run is
     * padded by the kernel that computes it. */
    if (p->pad_k && stored_as_is(gi->w[0]) && !padded_at_load(gi->w[0])) extra += copy_s(r, (double)Np * (double)Kp, es);
    if (p->pad_k && p->pad_n && gi->has_bias && stored_as_is(gi->bias[0]) && !padded_at_load(gi->bias[0]))
        extra += r->launch_s;
    if (p->pad_n && c->leaves[y->id]) extra += copy_s(r, (double)p->M * (double)p->N, (int)fc_dtype_size(y->dtype));
    double before = gemm_s(r, (double)p->M, (double)p->N, (double)p->K, es, false, !gi->trans_b);
    double after = gemm_s(r, (double)p->M, (double)Np, (double)Kp, es, true, false) + extra;
    if (p->pad_n && !p->pad_k) {
        /* The backend may write the unaligned result in place instead. */
        double in_place = interleaved_s(r, gi, p, es, (int)fc_dtype_size(y->dtype));
        if (in_place >= 0 && in_place < after) return false;
        /* An untransposed weight's rows are N long, unaligned too, which
         * the in-place form cannot read: the exporters store an LM head's
         * weight so ([K, N], the tied embedding transposed). Computed at
         * load, it can be transposed there once, for nothing per run. */
        if (!gi->trans_b && gi->nweights == 1 && padded_at_load(gi->w[0])) {
            fc_gemm_info t = *gi;
            t.trans_b = true;
            in_place = interleaved_s(r, &t, p, es, (int)fc_dtype_size(y->dtype));
            if (in_place >= 0 && in_place < after) {
                p->pad_n = false;
                p->transpose_w = true;
                return true;
            }
        }
    }
    if (p->pad_n && p->pad_k && gi->trans_b) {
        /* K padded alone, and the result (N unaligned) written in place as
         * at an aligned K: no compaction of a padded result (at M = 8192
         * that copy was a third of the GEMM's time: docs/PERF.md). */
        pad_plan k_only = *p;
        k_only.K = p->Kp;
        double in_place = interleaved_s(r, gi, &k_only, es, (int)fc_dtype_size(y->dtype));
        if (in_place >= 0) {
            if (stored_as_is(a)) in_place += copy_s(r, (double)p->M * (double)p->Kp, es);
            if (stored_as_is(gi->w[0]) && !padded_at_load(gi->w[0])) in_place += copy_s(r, (double)p->N * (double)p->Kp, es);
            if (in_place < after) {
                p->pad_n = false;
                return in_place < r->margin * before;
            }
        }
    }
    return after < r->margin * before;
}

/* full(0) of dtype dt and shape dims (rank r), placed here. */
static fc_value *zeros(pad_ctx *c, fc_dtype dt, int r, const int64_t *dims) {
    fc_attrs at;
    fc_attrs_defaults(FC_OP_FULL, &at);
    int64_t shape[FC_MAX_RANK];
    memcpy(shape, dims, sizeof *shape * (size_t)r);
    at.list = shape;
    at.nlist = r;
    at.value = 0.0;
    at.dtype = dt;
    fc_node *z = fc_rw_build(&c->rw, FC_OP_FULL, NULL, 0, &at);
    return z ? z->out[0] : NULL;
}

/* v with `more` zero entries appended along axis. */
static fc_value *pad_axis(pad_ctx *c, fc_value *v, int axis, int64_t more) {
    if (!v || more == 0) return v;
    int64_t dims[FC_MAX_RANK];
    memcpy(dims, v->dims, sizeof *dims * (size_t)v->rank);
    dims[axis] = more;
    fc_value *in[2] = {v, zeros(c, v->dtype, v->rank, dims)};
    if (!in[1]) return NULL;
    fc_attrs at;
    fc_attrs_defaults(FC_OP_CONCAT, &at);
    at.axis = axis;
    fc_node *cat = fc_rw_build(&c->rw, FC_OP_CONCAT, in, 2, &at);
    return cat ? cat->out[0] : NULL;
}

/* a with its rows padded to Kp, made once per value. */
static fc_value *padded_rows(pad_ctx *c, fc_value *a, int64_t Kp) {
    fc_value *now = fc_rw_value(&c->rw, a);
    if (a->id < c->nvalues && c->padded[a->id] && c->padded[a->id]->dims[a->rank - 1] == Kp) return c->padded[a->id];
    fc_value *p = pad_axis(c, now, now->rank - 1, Kp - now->dims[now->rank - 1]);
    if (p && a->id < c->nvalues) c->padded[a->id] = p;
    return p;
}

/* Build the padded gemm of p (node n) here and replace n's result. */
static bool rewrite(pad_ctx *c, fc_node *n, const pad_plan *p) {
    const fc_gemm_info *gi = &p->gi;
    int nw = gi->nweights;
    fc_value *in[MAX_OPERANDS];
    if (n->nin + 2 > MAX_OPERANDS) return fc_rw_keep(&c->rw, n); /* more siblings than any graph has */
    int k = 0;
    in[k++] = p->pad_k ? padded_rows(c, gi->a, p->Kp) : fc_rw_value(&c->rw, gi->a);
    int64_t spec[FC_GEMM_SPEC_LEN];
    memcpy(spec, n->a.list, sizeof spec);
    int kaxis = gi->trans_b ? 1 : 0, naxis = 1 - kaxis;
    if (p->transpose_w) {
        int64_t perm[2] = {1, 0};
        fc_attrs pa;
        fc_attrs_defaults(FC_OP_PERMUTE, &pa);
        pa.list = perm;
        pa.nlist = 2;
        fc_value *w = fc_rw_value(&c->rw, gi->w[0]);
        fc_node *t = fc_rw_build(&c->rw, FC_OP_PERMUTE, &w, 1, &pa);
        in[k++] = t ? t->out[0] : NULL;
        spec[FC_GEMM_TRANS_B] = 1;
    } else if (p->n_by_block) {
        for (int i = 0; i < nw; i++) in[k++] = fc_rw_value(&c->rw, gi->w[i]);
        int64_t dims[2];
        dims[kaxis] = p->K;
        dims[naxis] = p->Np - p->N;
        in[k++] = zeros(c, gi->w[0]->dtype, 2, dims);
        if (gi->has_bias) {
            for (int i = 0; i < nw; i++) in[k++] = fc_rw_value(&c->rw, gi->bias[i]);
            int64_t b = p->Np - p->N;
            in[k++] = zeros(c, gi->bias[0]->dtype, 1, &b);
        }
        spec[FC_GEMM_NWEIGHTS] = nw + 1;
    } else {
        /* One weight (plan_of), padded by concats along K and N. */
        fc_value *w = fc_rw_value(&c->rw, gi->w[0]);
        if (p->pad_k) w = pad_axis(c, w, kaxis, p->Kp - p->K);
        if (p->pad_n) w = pad_axis(c, w, naxis, p->Np - p->N);
        in[k++] = w;
        if (gi->has_bias) {
            fc_value *b = fc_rw_value(&c->rw, gi->bias[0]);
            in[k++] = p->pad_n ? pad_axis(c, b, 0, p->Np - p->N) : b;
        }
    }
    if (gi->has_residual) in[k++] = fc_rw_value(&c->rw, gi->residual);
    for (int i = 0; i < k; i++)
        if (!in[i]) return false;
    fc_attrs at = n->a;
    at.list = spec;
    at.nlist = FC_GEMM_SPEC_LEN;
    fc_node *big = fc_rw_build(&c->rw, FC_OP_GEMM, in, k, &at);
    if (!big) return false;
    fc_value *y = big->out[0];
    if (p->pad_n) {
        fc_attrs sa;
        fc_attrs_defaults(FC_OP_SLICE, &sa);
        sa.axis = y->rank - 1;
        sa.start = 0;
        sa.end = p->N;
        fc_node *sl = fc_rw_build(&c->rw, FC_OP_SLICE, &y, 1, &sa);
        if (!sl) return false;
        y = sl->out[0];
    }
    y->name = n->out[0]->name;
    return fc_rw_replace(&c->rw, n->out[0], y);
}

/* ------------------------------------------------------------------ */
/* K = 0                                                                */
/* ------------------------------------------------------------------ */

static bool empty_k(const fc_node *n, fc_gemm_info *gi) {
    if (!fc_gemm_info_of(n, gi)) return false;
    const fc_value *a = gi->a;
    if (a->rank < 1 || !fc_value_is_static(a) || !fc_value_is_static(n->out[0])) return false;
    int64_t K = a->rank == 1 ? a->dims[0] : gi->trans_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
    return K == 0;
}

/* What a gemm over an empty K computes: act(0 + residual + bias), in the
 * result's dtype; zeros for a matmul. */
static bool rewrite_empty(pad_ctx *c, fc_node *n, const fc_gemm_info *gi) {
    fc_value *y = n->out[0];
    fc_value *t = zeros(c, y->dtype, y->rank, y->dims);
    if (t && gi->has_residual) t = fc_rw_op2(&c->rw, FC_OP_ADD, t, fc_rw_value(&c->rw, gi->residual));
    if (t && gi->has_bias) {
        fc_value *b = fc_rw_value(&c->rw, gi->bias[0]);
        if (gi->nweights > 1) {
            fc_value *bs[MAX_OPERANDS];
            if (gi->nweights > MAX_OPERANDS) return fc_rw_keep(&c->rw, n);
            for (int i = 0; i < gi->nweights; i++) bs[i] = fc_rw_value(&c->rw, gi->bias[i]);
            fc_attrs at;
            fc_attrs_defaults(FC_OP_CONCAT, &at);
            at.axis = 0;
            fc_node *cat = fc_rw_build(&c->rw, FC_OP_CONCAT, bs, gi->nweights, &at);
            b = cat ? cat->out[0] : NULL;
        }
        t = b ? fc_rw_op2(&c->rw, FC_OP_ADD, t, b) : NULL;
    }
    if (t && gi->act == FC_GEMM_ACT_RELU) t = fc_rw_op1(&c->rw, FC_OP_RELU, t);
    if (t && gi->act == FC_GEMM_ACT_GELU_TANH) t = fc_rw_op1(&c->rw, FC_OP_GELU_TANH, t);
    t = t ? fc_rw_cast(&c->rw, t, y->dtype) : NULL;
    return t && fc_rw_replace(&c->rw, y, t);
}

/* ------------------------------------------------------------------ */

fc_status fc_pass_pad(fc_graph *g) { return fc_pass_pad_with(g, &fc_pad_rule_h200); }

fc_status fc_pass_pad_with(fc_graph *g, const fc_pad_rule *rule) {
    fc_status st = fc_pass_precheck(g, "pad");
    if (st != FC_OK) return st;
    if (!rule) return fc_set_error(g->ctx, FC_ERR_USAGE, "fc_pass_pad_with: no rule");
    pad_ctx c = {.nvalues = g->next_value_id, .rule = rule};
    c.leaves = fc_ctx_malloc(g->ctx, sizeof *c.leaves * (size_t)(c.nvalues + 1));
    c.padded = fc_ctx_malloc(g->ctx, sizeof *c.padded * (size_t)(c.nvalues + 1));
    if (!c.leaves || !c.padded) {
        fc_ctx_freemem(g->ctx, c.leaves);
        fc_ctx_freemem(g->ctx, c.padded);
        return fc_set_error(g->ctx, g->status = FC_ERR_NOMEM, "out of memory (padding)");
    }
    memset(c.leaves, 0, sizeof *c.leaves * (size_t)(c.nvalues + 1));
    memset(c.padded, 0, sizeof *c.padded * (size_t)(c.nvalues + 1));
    for (int i = 0; i < g->noutputs; i++) c.leaves[g->outputs[i]->id] = true;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead || fc_op_table[n->op].kind != FC_KIND_OPAQUE) continue;
        for (int k = 0; k < n->nin; k++) c.leaves[n->in[k]->id] = true;
    }
    /* Only rebuild when something changes (most graphs: nothing). */
    bool any = false;
    for (int i = 0; i < g->nnodes && !any; i++) {
        fc_gemm_info gi;
        pad_plan p;
        const fc_node *n = g->nodes[i];
        any = !n->dead && (empty_k(n, &gi) || plan_of(&c, n, &p));
    }
    if (any && (st = fc_rw_begin(&c.rw, g)) == FC_OK) {
        for (fc_node *n; (n = fc_rw_next(&c.rw));) {
            fc_rw_remap(&c.rw, n);
            fc_gemm_info gi;
            pad_plan p;
            bool ok = true;
            if (empty_k(n, &gi)) ok = rewrite_empty(&c, n, &gi);
            else if (plan_of(&c, n, &p)) ok = rewrite(&c, n, &p);
            else ok = fc_rw_keep(&c.rw, n);
            if (!ok) break;
        }
        st = fc_rw_end(&c.rw);
        if (st == FC_OK) st = fc_pass_dce(g);
    }
    fc_ctx_freemem(g->ctx, c.leaves);
    fc_ctx_freemem(g->ctx, c.padded);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (padding)");
    return st;
}

/*
 * attention.c - CUDA C for an attention group: one flash-attention kernel.
 *
 * The kernels themselves are CUDA templates, emitted once per translation
 * unit: attention_helpers.cuh.inc, attention_tc.cuh.inc and
 * attention_fa3.cuh.inc, plain CUDA that the build turns into the C strings
 * included below (cmake/embed.cmake):
 *
 *  - fc_attn_tc, the tensor-core kernel for bf16 and f16 with head dims up
 *    to 128 (FlashAttention-2): 16 query rows per warp, 4 or 8 warps a
 *    block, K and V tiles of 64 keys in shared memory (cp.async, the copy
 *    of the next tile overlapping the math on this one), mma.sync m16n8k16
 *    with f32 accumulators, ldmatrix for every fragment, the online softmax
 *    in f32 registers, causal blocks past the diagonal skipped;
 *  - fc_attn_fa3 (attention_fa3.cuh.inc), the Hopper kernel (FlashAttention-3's
 *    structure: wgmma, a producer warpgroup feeding K and V through
 *    mbarriers, setmaxnreg, intra-warpgroup overlap and ping-pong), for
 *    plans generated for sm 90 whose head dims are 49 to 128 (stored as
 *    64 or 128: fa3_head_dims); the unit is then compiled for sm_90a
 *    (fc_cuda_attention_hopper);
 *  - fc_attn_rows, the general kernel (f32, f64, other head dims): a warp
 *    per query row, the same online softmax in f32 (f64 for f64).
 *
 * Per kernel, this file writes a config struct of constants (shapes,
 * strides, scale, mask kind, which loads may be 16-byte copies) and a thin
 * extern "C" kernel that instantiates the template with it. Everything is a
 * compile-time constant, so index arithmetic folds and loops unroll.
 *
 * Operands are read in place. q, k, v and the mask are each a chain of view
 * ops over a group input (a split of a fused QKV projection, reshaped to
 * heads and permuted, say): fc_attention_view turns the chain into an
 * offset and a stride per dim, and the kernel reads element (b.., i, d) at
 * base + offset + sum b_j * batch_stride_j + i * row_stride + d * col_stride.
 * The result is written the same way through the permute/reshape chain that
 * ends in the group's output.
 */
#include "attention.h"
#include "emit.h"
#include "gemm.h"
#include "passes/attention.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the device code ------------------------------------------------------- */

/* The text of the .cuh.inc files, as the build embeds it (CMakeLists.txt:
 * the embedded/ folder of the build tree is on the include path). */
static const char helpers_src[] =
#include "attention_helpers.cuh.inc.str"
    ;

static const char templates_src[] =
#include "attention_tc.cuh.inc.str"
    ;

static const char wgmma_src[] =
#include "attention_fa3.cuh.inc.str"
    ;

/* One wgmma m64nNk16 per input type, f32 accumulators, as the
 * specializations the Hopper template calls: fc_attn_wgss<N> (A and B by
 * descriptors, both K-major; the first product of a tile overwrites) and
 * fc_attn_wgrs<N> (A from registers, B N-major, accumulating). Written per
 * kernel, once per unit (#ifndef guard), since the operand list (N / 2
 * accumulators) depends on N. */
static void emit_wgop(fc_strbuf *s, int n, bool ss) {
    const char *form = ss ? "ss" : "rs";
    fc_strbuf_printf(s, "#if defined(FC_ATTN_FA3) && !defined(FC_ATTN_WG%s_%d)\n#define FC_ATTN_WG%s_%d\n", form, n, form, n);
    fc_strbuf_printf(s, "template <> struct fc_attn_wg%s<%d> {\n", form, n);
    static const char *const types[2][2] = {{"__nv_bfloat16", "bf16"}, {"__half", "f16"}};
    const int nd = n / 2;
    for (int t = 0; t < 2; t++) {
        if (ss)
            fc_strbuf_printf(s, "  static __device__ __forceinline__ void run(float (&d)[%d][4], unsigned long long a, unsigned long long b, int acc, %s) {\n",
                             n / 8, types[t][0]);
        else
            fc_strbuf_printf(s, "  static __device__ __forceinline__ void run(float (&d)[%d][4], const unsigned (&a)[4], unsigned long long b, %s) {\n",
                             n / 8, types[t][0]);
        /* The scale-d predicate: the operand after the descriptors (or the A registers and B's descriptor). */
        fc_strbuf_printf(s, "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n", nd + (ss ? 2 : 5));
        fc_strbuf_printf(s, "      \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", n, types[t][1], types[t][1]);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s%%%d", i ? ", " : "", i);
        if (ss) fc_strbuf_printf(s, "}, %%%d, %%%d, p, 1, 1, 0, 0;\\n}\\n\"\n      : ", nd, nd + 1);
        else fc_strbuf_printf(s, "}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, 1;\\n}\\n\"\n      : ", nd, nd + 1, nd + 2, nd + 3, nd + 4);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s\"+f\"(d[%d][%d])", i ? ", " : "", i / 4, i % 4);
        if (ss) fc_strbuf_printf(s, "\n      : \"l\"(a), \"l\"(b), \"r\"(acc));\n  }\n");
        else fc_strbuf_printf(s, "\n      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(1));\n  }\n");
    }
    fc_strbuf_printf(s, "};\n#endif\n");
}

/* ---- string builder -------------------------------------------------------- */

/* Source text is built with fc_strbuf (ir/strbuf.c). */

/* ---- reading the group ----------------------------------------------------- */

static const fc_node *attention_node(const fc_group *gr) {
    const fc_node *n = NULL;
    for (int i = 0; i < gr->nnodes; i++)
        if (gr->nodes[i]->op == FC_OP_ATTENTION) {
            if (n) return NULL; /* one per group */
            n = gr->nodes[i];
        }
    return n;
}

static int input_index(const fc_group *gr, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return i;
    return -1;
}

static bool is_group_input(const fc_value *v, void *arg) { return input_index(arg, v) >= 0; }

/* How the kernel reads one operand, as strides into a group input. */
typedef struct layout {
    int input;                  /* index in gr->inputs */
    int64_t offset;             /* elements */
    int64_t row, col;           /* the last two dims; 0 where a dim is 1 (broadcast) */
    int64_t batch[FC_MAX_RANK]; /* per batch dim of the result; 0 where broadcast */
} layout;

/* Fill L for operand x (rank may be below 2 for a mask) against nb batch
 * dims of the result. False (with why in err) if it cannot be read in place. */
static bool layout_of(const fc_group *gr, const fc_value *x, int nb, layout *L, char *err, size_t errn,
                      const char *what) {
    fc_strided_view view;
    memset(L, 0, sizeof *L);
    if (!fc_attention_view(x, is_group_input, (void *)gr, &view) || (L->input = input_index(gr, view.root)) < 0) {
        snprintf(err, errn, "%s is not a strided view of a group input (fusion must store it or its views)", what);
        return false;
    }
    int xr = x->rank;
    L->offset = view.offset;
    L->row = xr >= 2 && x->dims[xr - 2] != 1 ? view.stride[xr - 2] : 0;
    L->col = xr >= 1 && x->dims[xr - 1] != 1 ? view.stride[xr - 1] : 0;
    for (int b = 0; b < nb; b++) {
        int xd = b - (nb - (xr - 2)); /* batch dims align on the right */
        L->batch[b] = xd >= 0 && x->dims[xd] != 1 ? view.stride[xd] : 0;
    }
    return true;
}

/* May the kernel copy rows of n elements of L 16 bytes at a time (8 bf16)? */
static bool vec16(const layout *L, int64_t n, int nb) {
    if (L->col != 1 || n % 8 || L->row % 8 || L->offset % 8) return false;
    for (int b = 0; b < nb; b++)
        if (L->batch[b] % 8) return false;
    return true;
}

/* The output chain: every node but the attention must be a permute or a
 * reshape between its result and the group's one output. */
static bool output_layout(const fc_group *gr, const fc_node *n, int64_t *strides) {
    if (gr->noutputs != 1 || !fc_attention_output_strides(n->out[0], gr->outputs[0], strides)) return false;
    int chain = 0;
    for (const fc_value *v = gr->outputs[0]; v != n->out[0]; v = v->def->in[0]) chain++;
    return chain == gr->nnodes - 1;
}

static int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }
static int64_t round64(int64_t x) { return (x + 63) / 64 * 64; }

/*
 * Whether fc_attn_fa3 takes head dims D and Dv (both at most 128: the
 * tensor-core kernels' range). It stores each in whole 64-column panels
 * (the 128-byte swizzle that TMA writes and wgmma reads), so a head dim of
 * 80 or 96 is stored as 128 with zero columns, which the loads write (TMA
 * fills the columns past the map's D with zeros; cp.async and the element
 * loads likewise), not the producer of Q, K and V: no copy, nothing wider
 * in memory. Q K^T runs only the k16 steps of D (C::DK: 5 of 8 at D = 80);
 * P V runs the whole panel width, since wgmma's canonical N-major layouts
 * with the 128-byte swizzle are whole 64-column atoms. A head dim of 48 or
 * less would leave three quarters of the panel's columns or more idle in
 * P V: those keep fc_attn_tc.
 */
static bool fa3_head_dims(int64_t D, int64_t Dv) { return round16(D) > 48 && round16(Dv) > 48; }

/* A tensor map for fc_attn_fa3's TMA loads, and how the kernel finds the
 * batch coordinates of its dims 2 .. rank - 1. */
typedef struct tma_plan {
    fc_tmap map;
    /* Map dim 2 + k covers the result's batch dims in the bit set
     * members[k] (one, or neighbours merged where their strides allow); its
     * coordinate is their index as one number, computed by the config's
     * tcoords(). */
    unsigned members[FC_TMAP_MAX_RANK - 2];
} tma_plan;

/*
 * Whether TMA can load operand L (rows of n elements, rows of them, in
 * boxes of box_rows rows by 64 columns) for a result o of nb batch dims,
 * and the map if so. TMA's rules: the head dim contiguous; the row and batch
 * strides multiples of 16 bytes (below 2^40); the view's offset a multiple of
 * 16 bytes (the base pointer's alignment is checked at every launch); at
 * most 5 dims once broadcast batch dims (stride 0: every batch reads the
 * same rows, so the dim is left out of the map) are dropped and contiguous
 * neighbours merged; 16-bit elements (fa3 only runs bf16 and f16). Otherwise
 * the kernel keeps its cp.async loads for this operand.
 */
static bool tma_of(const layout *L, const fc_value *o, int nb, int64_t rows, int64_t n, int box_rows, fc_dtype t,
                   tma_plan *tp) {
    const int64_t es = 2, lim = (int64_t)1 << 40;
    memset(tp, 0, sizeof *tp);
    if ((t != FC_BF16 && t != FC_F16) || L->col != 1 || L->offset < 0 || L->row <= 0 || L->row >= lim / es || (L->row * es) % 16 ||
        (L->offset * es) % 16 || n < 1 || rows < 1 || rows > INT_MAX || n > INT_MAX)
        return false;
    fc_tmap *m = &tp->map;
    m->arg = L->input;
    m->offset = L->offset;
    m->dtype = t;
    m->dims[0] = n;
    m->dims[1] = rows;
    m->strides[0] = L->row * es;
    m->box[0] = 64;
    m->box[1] = (uint32_t)box_rows;
    m->swizzle128 = true;
    m->rank = 2;
    /* Batch dims, inner to outer, each joining the map dim of its inner
     * neighbour when it is exactly that dim's extent further on. */
    int64_t size = 0, stride = 0;
    for (int b = nb - 1; b >= 0; b--) {
        const int64_t d = o->dims[b], st = L->batch[b];
        if (d == 1 || st == 0) continue; /* coordinate 0 / a broadcast: not in the map */
        if (st < 0 || st >= lim / es || (st * es) % 16 || d > INT_MAX) return false; /* coordinates are 32-bit */
        if (size && st % stride == 0 && st / stride == size && size <= INT_MAX / d) {
            size *= d;
            m->dims[m->rank - 1] = size;
            tp->members[m->rank - 3] |= 1u << b;
            continue;
        }
        if (m->rank == FC_TMAP_MAX_RANK) return false;
        const int k = m->rank - 2;
        size = d;
        stride = st;
        m->dims[m->rank] = d;
        m->strides[m->rank - 1] = st * es;
        m->box[m->rank] = 1;
        tp->members[k] = 1u << b;
        m->rank++;
    }
    return true;
}

bool fc_cuda_attention_uses_mma(const fc_group *gr) {
    const fc_node *n = attention_node(gr);
    if (!n) return false;
    const fc_value *q = n->in[0], *o = n->out[0];
    fc_dtype t = o->dtype;
    int64_t d = q->dims[q->rank - 1], dv = o->dims[o->rank - 1];
    return (t == FC_BF16 || t == FC_F16) && d >= 1 && dv >= 1 && round16(d) <= 128 && round16(dv) <= 128;
}

/* The rows form (attention.h): every check the skinny GEMM's attention
 * prologue relies on, so that codegen/cuda/skinny.c never reads a layout. */
bool fc_cuda_attention_rows(const fc_group *gr, fc_attention_rows *out) {
    const fc_node *n = attention_node(gr);
    if (!n || n->nin != 3) return false; /* no mask input */
    const fc_value *o = n->out[0];
    const int R = o->rank, nb = R - 2;
    if (nb < 1 || nb > 2 || !fc_value_is_static(o)) return false;
    const fc_dtype t = o->dtype;
    if (t != FC_BF16 && t != FC_F16) return false;
    const int64_t B = nb == 2 ? o->dims[0] : 1, H = o->dims[R - 3], T = o->dims[R - 2], Dv = o->dims[R - 1];
    for (int i = 0; i < 3; i++)
        if (n->in[i]->dtype != t || !fc_value_is_static(n->in[i]) || n->in[i]->rank != R) return false;
    const int64_t D = n->in[0]->dims[R - 1];
    if (D != Dv || n->in[1]->dims[R - 1] != D || n->in[1]->dims[R - 2] != T || B < 1 || H < 1 || T < 1) return false;
    /* The result written as [B, T, H * D]: rows b T + t, columns h D + d. */
    int64_t os[FC_MAX_RANK];
    if (!output_layout(gr, n, os) || os[R - 1] != 1 || os[R - 2] != H * D || os[R - 3] != D || (nb == 2 && B > 1 && os[0] != T * H * D))
        return false;
    fc_attention_rows r = {.batch = B, .heads = H, .seq = T, .head_dim = D, .causal = n->a.causal, .dtype = t};
    r.scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? 1.0 / sqrt((double)D) : n->a.scale;
    char err[256];
    for (int i = 0; i < 3; i++) {
        layout L;
        if (!layout_of(gr, n->in[i], nb, &L, err, sizeof err, "operand")) return false;
        const int64_t head = L.batch[nb - 1];
        /* Rows of the root's [rows, L.row] matrix: batch b's rows follow batch
         * b - 1's; every head's D columns inside a row; 16-byte rows (TMA). */
        if (L.col != 1 || L.row <= 0 || (L.row * 2) % 16 || L.row > INT_MAX || L.offset < 0 || head < 0 ||
            (nb == 2 && B > 1 && L.batch[0] != T * L.row) || L.offset + (H - 1) * head + D > L.row)
            return false;
        r.op[i].input = L.input;
        r.op[i].row = L.row;
        r.op[i].head = head;
        r.op[i].col0 = L.offset;
    }
    if (out) *out = r;
    return true;
}

/* The templates' text: the helpers, the tensor-core pieces, the shared
 * Hopper helpers (fc_wg_*, which fc_attn_fa3 uses) and the Hopper kernel's,
 * each guarded to once a unit. */
static void emit_templates(fc_strbuf *s) {
    fc_strbuf_printf(s, "%s%s", helpers_src, templates_src);
    fc_cuda_emit_wgmma_helpers(s);
    fc_strbuf_printf(s, "%s", wgmma_src);
}

void fc_cuda_emit_attention_templates(fc_strbuf *s, int n) {
    emit_templates(s);
    emit_wgop(s, n, true);
    emit_wgop(s, n, false);
}

bool fc_cuda_attention_hopper(int sm) { return sm == 90; }

/* Whether fc_attn_fa3 gets a persistent grid (the kernel text is the same
 * either way, only the grid differs). Yes, except for causal attention
 * with two consumer warpgroups (head dims above 64): there the tiles are
 * long (about twice the work per key tile of D = 64) and of unequal length,
 * and the hardware's block scheduler, which starts each block on whichever
 * SM frees first, balances them better than the persistent blocks' fixed
 * rounds; at D = 64, where the tiles are short, persistence pays
 * (measured: docs/PERF.md, "Attention"). */
static bool attention_persistent(bool causal, int nc, const fc_attention_force *force) {
    return force->persistent || !(causal && nc == 2);
}

/* fc_attn_fa3's key tile BN (the wgmma N and the TMA box rows): 128, or 64
 * where all the keys fit in 64, since a 128-key tile would be half masked
 * (measured: docs/PERF.md, "Attention"). */
static int attention_key_tile(int64_t keys) { return keys <= 64 ? 64 : 128; }

/* The blocks of fc_attn_fa3's persistent grid: one per SM (one block fills
 * an SM: its shared memory and registers) of the device the plan is for
 * (fc_cuda_plan_sms); never more than the work tiles. Any grid computes the
 * same result: each block walks the tiles with the grid's size as its
 * stride. */
static int64_t persistent_blocks(const fc_plan *plan, int64_t tiles, bool persistent) {
    const int64_t sms = fc_cuda_plan_sms(plan);
    return persistent && sms < tiles ? sms : tiles;
}

/* fc_attn_fa3's sections of batch elements (the kernel's C::HG): the
 * largest divisor of the nb batch elements whose K and V, kv bytes each,
 * fit in ATTN_L2_SECTION bytes together, so that while the blocks walk a
 * section's tiles its K and V stay in L2 (50 MB on an H100/H200) instead
 * of being read again from memory by every query tile: with every batch
 * element's last query tile first, over all of them, the K and V of a
 * large batch of heads are in use at once and the kernel is bound by
 * memory. Only with two consumer warpgroups (head dims above 64): at
 * D = 64 (three, 192 query rows a tile) the memory is not the limit and
 * the sections' unequal causal rounds cost more than they save; there all
 * batch elements are one section (measured: docs/PERF.md, "Attention").
 * force->l2_section_bytes > 0 replaces the budget at every head dim. */
enum { ATTN_L2_SECTION = 32 << 20 };
static int64_t l2_section(int64_t nb, int64_t kv, int nc, const fc_attention_force *force) {
    const int64_t budget = force->l2_section_bytes > 0 ? force->l2_section_bytes : nc == 2 ? ATTN_L2_SECTION : 0;
    if (budget <= 0 || nb < 1) return nb > 0 ? nb : 1;
    const int64_t cap = kv > 0 ? budget / kv : nb;
    int64_t hg = 1;
    for (int64_t d = 1; d <= nb && d <= cap; d++)
        if (nb % d == 0) hg = d;
    return hg;
}

/* ---- the kernel ------------------------------------------------------------ */

static const char *flag(bool b) { return b ? "true" : "false"; }

/* fc_attn_fa3's config members for TMA: which of Q, K, V have a tensor
 * map (QTMA ..), its rank (QR ..), and tcoords(t, q, k, v), which writes
 * batch t's coordinates of map dims 2 .. rank - 1 (tma_plan). */
static void emit_tcoords(fc_strbuf *s, const fc_value *o, int nb, const tma_plan tp[3], const bool tma[3]) {
    static const char *const up[3] = {"Q", "K", "V"}, *const lo[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        fc_strbuf_printf(s, "  static constexpr bool %sTMA = %s;\n  static constexpr int %sR = %d;\n", up[i], flag(tma[i]), up[i],
                         tma[i] ? tp[i].map.rank : 2);
    fc_strbuf_printf(s, "  static __device__ __forceinline__ void tcoords(long long t, int (&q)[5], int (&k)[5], int (&v)[5]) {\n");
    fc_strbuf_printf(s, "    (void)t; (void)q; (void)k; (void)v;\n");
    bool any = false;
    for (int i = 0; i < 3; i++) any = any || (tma[i] && tp[i].map.rank > 2);
    if (any) {
        /* The batch index, innermost dim first (as offsets()). */
        for (int b = nb - 1; b >= 0; b--)
            fc_strbuf_printf(s, "    const long long c%d = t %% %lldll; t /= %lldll; (void)c%d;\n", b, (long long)o->dims[b],
                             (long long)o->dims[b], b);
        for (int i = 0; i < 3; i++) {
            for (int d = 2; tma[i] && d < tp[i].map.rank; d++) {
                /* Horner over the members, outer to inner. */
                fc_strbuf_printf(s, "    %s[%d] = (int)", lo[i], d);
                for (int b = 0; b < nb; b++)
                    if (tp[i].members[d - 2] >> b & 1) fc_strbuf_printf(s, "(");
                fc_strbuf_printf(s, "0");
                for (int b = 0; b < nb; b++)
                    if (tp[i].members[d - 2] >> b & 1) fc_strbuf_printf(s, " * %lldll + c%d)", (long long)o->dims[b], b);
                fc_strbuf_printf(s, ";\n");
            }
        }
    }
    fc_strbuf_printf(s, "  }\n");
}

fc_status fc_cuda_emit_attention(const fc_plan *plan, const fc_group *gr, const char *name, char **source,
                                 fc_launch *l) {
    static const fc_attention_force rules = {0};
    return fc_cuda_emit_attention_forced(plan, gr, name, &rules, source, l);
}

fc_status fc_cuda_emit_attention_forced(const fc_plan *plan, const fc_group *gr, const char *name,
                                        const fc_attention_force *force, char **source, fc_launch *l) {
    fc_context *ctx = plan->g->ctx;
    *source = NULL;
    char err[256] = "";
    const fc_node *n = attention_node(gr);
    if (!n) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen: group %d holds no single attention node", gr->id);
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->nin > 3 ? n->in[3] : NULL, *o = n->out[0];
    const int R = o->rank, nb = R - 2;
    const int64_t Sq = o->dims[R - 2], Dv = o->dims[R - 1], D = q->dims[q->rank - 1], Sk = k->dims[k->rank - 2];
    int64_t NB = 1;
    for (int b = 0; b < nb; b++) NB *= o->dims[b];

    layout L[4];
    int64_t os[FC_MAX_RANK];
    const fc_value *ops[4] = {q, k, v, mask};
    static const char *const what[4] = {"q", "k", "v", "the mask"};
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) ok = !ops[i] || layout_of(gr, ops[i], nb, &L[i], err, sizeof err, what[i]);
    if (ok && !output_layout(gr, n, os)) {
        snprintf(err, sizeof err, "the result is not written through permute/reshape ops to the group's one output");
        ok = false;
    }
    for (int i = 0; ok && i < gr->ninputs; i++)
        if (!fc_dtype_is_float(gr->inputs[i]->dtype) && gr->inputs[i]->dtype != FC_BOOL) {
            snprintf(err, sizeof err, "input %d has dtype %s", i, fc_dtype_name(gr->inputs[i]->dtype));
            ok = false;
        }
    if (ok && (Sq > INT_MAX / 2 || Sk > INT_MAX / 2 || D > 65536 || Dv > 65536)) {
        snprintf(err, sizeof err, "a dimension is too large (Sq %lld, Sk %lld, D %lld, Dv %lld)", (long long)Sq,
                 (long long)Sk, (long long)D, (long long)Dv);
        ok = false;
    }
    if (!ok) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen (group %d): %s", gr->id, err);

    const bool mma = fc_cuda_attention_uses_mma(gr);
    /* The Hopper kernel (fc_attn_fa3) where the unit is compiled for sm_90a
     * and both head dims fill more than three quarters of their 64-column
     * swizzle panels (fa3_head_dims); everything else takes fc_attn_tc. */
    const bool fa3 = mma && fc_cuda_attention_hopper(plan->sm) && fa3_head_dims(D, Dv);
    const fc_dtype t = o->dtype;
    const bool f64 = t == FC_F64;
    /* Warps of the tensor-core kernel (16 query rows each). 8 warps share
     * each K/V tile among 128 rows, which halves the loads per FLOP; at
     * about 225 registers a thread (head dim 128) that is one block of 8
     * warps per SM. Head dims up to 64 need about 135 registers, so blocks
     * of 4 warps fit 3 to an SM instead. Short sequences take 4 warps. */
    const int nw = round16(D) > 64 && Sq > 64 ? 8 : 4;
    /* fc_attn_fa3: NC consumer warpgroups of 64 query rows (three where
     * both head dims are 64: their registers fit in 160 a thread, and 192
     * rows a block read K and V a third less often than 128; else two),
     * key tiles of BN = 128 (64 for at most 64 keys), ST stages of K and V (3 where the shared
     * memory takes them, else 2). Measured: docs/PERF.md, "Attention". */
    const int64_t dp = round64(D), dvp = round64(Dv);
    const int nc = dp <= 64 && dvp <= 64 ? 3 : 2, bn = attention_key_tile(Sk);
    const int64_t fa3_smem3 = 1024 + 2 * (64 * nc * dp + 3 * bn * (dp + dvp)) + 32 * 3 + 8 * nc;
    const int stages = fa3_smem3 <= 227 * 1024 ? 3 : 2;
    const int64_t fa3_smem = 1024 + 2 * (64 * nc * dp + stages * bn * (dp + dvp)) + 32 * stages + 8 * nc;
    /* fc_attn_fa3: Q, K and V through TMA where their layouts allow it
     * (tma_of), each in boxes of 64 columns (128 bytes, one swizzle panel)
     * by the tile's rows. */
    tma_plan tp[3];
    bool tma[3] = {false, false, false};
    if (fa3 && !force->no_tma) {
        tma[0] = tma_of(&L[0], o, nb, Sq, D, 64, o->dtype, &tp[0]);
        tma[1] = tma_of(&L[1], o, nb, Sk, D, bn, o->dtype, &tp[1]);
        tma[2] = tma_of(&L[2], o, nb, Sk, Dv, bn, o->dtype, &tp[2]);
    }
    const int rows_per_block = fa3 ? 64 * nc : mma ? 16 * nw : 8, threads = fa3 ? 128 * (nc + 1) : mma ? 32 * nw : 256;
    const int64_t nqt = (Sq + rows_per_block - 1) / rows_per_block;
    const bool empty = Sq == 0 || Dv == 0 || NB == 0;
    if (!empty && nqt * NB > INT_MAX)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen (group %d): %lld blocks are too many for one grid",
                            gr->id, (long long)(nqt * NB));
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    const int mask_kind = !mask ? 0 : mask->dtype == FC_BOOL ? 1 : 2;
    const size_t csize = f64 ? 8 : 4;
    int64_t kt = 32768 / (int64_t)((size_t)(D + Dv > 0 ? D + Dv : 1) * csize);
    kt = kt < 1 ? 1 : kt > 64 ? 64 : kt;

    fc_strbuf s = {0};
    emit_templates(&s);
    fc_strbuf_printf(&s, "// attention: %s%s%s, q [%lld x %lld], k/v [%lld], dv %lld, %lld batches, %s kernel\n",
        fc_dtype_name(t), n->a.causal ? ", causal" : "", mask_kind == 1 ? ", bool mask" : mask_kind == 2 ? ", added mask" : "",
        (long long)Sq, (long long)D, (long long)Sk, (long long)Dv, (long long)NB, mma ? "mma" : "row");
    if (empty) {
        /* Nothing to compute: a kernel that returns, so the launch list stays uniform. */
        fc_strbuf_printf(&s, "extern \"C\" __global__ void %s(", name);
    } else {
        if (fa3) {
            fc_strbuf_printf(&s, "#if !defined(FC_ATTN_FA3)\n#error \"fusec: this attention kernel needs a unit compiled for sm_90a\"\n#endif\n");
            emit_wgop(&s, bn, true);
            emit_wgop(&s, (int)dvp, false);
        }
        fc_strbuf_printf(&s, "struct fc_attn_cfg_%s {\n", name);
        fc_strbuf_printf(&s, "  typedef %s T;\n  typedef %s M;\n  typedef %s CT;\n", fc_cuda_storage_type(t),
            mask ? fc_cuda_storage_type(mask->dtype) : "unsigned char", f64 ? "double" : "float");
        /* DP, DVP: the head dims as the kernel stores them (fc_attn_fa3:
         * whole panels; fc_attn_tc: whole k16 steps); DK: the k16 steps of
         * Q K^T, the columns past it zeros that would add nothing. */
        fc_strbuf_printf(&s, "  static constexpr int SQ = %lld, SK = %lld, D = %lld, DV = %lld, DP = %lld, DVP = %lld, DK = %lld, KT = %lld, MASK = %d, NW = %d, ST = %d, BN = %d, NC = %d;\n",
            (long long)Sq, (long long)Sk, (long long)D, (long long)Dv, (long long)(fa3 ? dp : round16(D)),
            (long long)(fa3 ? dvp : round16(Dv)), (long long)round16(D), (long long)kt, mask_kind, nw, stages, bn, nc);
        fc_strbuf_printf(&s, "  static constexpr long long NB = %lld, HG = %lld;\n", (long long)NB,
                         (long long)l2_section(NB, Sk * (D + Dv) * (int64_t)fc_dtype_size(t), nc, force));
        bool ovec = os[R - 1] == 1 && Dv % 2 == 0 && os[R - 2] % 2 == 0;
        for (int b = 0; b < nb; b++) ovec = ovec && os[b] % 2 == 0;
        fc_strbuf_printf(&s, "  static constexpr bool CAUSAL = %s, QVEC = %s, KVEC = %s, VVEC = %s, OVEC = %s;\n", flag(n->a.causal),
            flag(vec16(&L[0], D, nb)), flag(vec16(&L[1], D, nb)), flag(vec16(&L[2], Dv, nb)), flag(ovec));
        fc_strbuf_printf(&s, "  static constexpr long long QS = %lld, QD = %lld, KS = %lld, KD = %lld, VS = %lld, VD = %lld,\n",
            (long long)L[0].row, (long long)L[0].col, (long long)L[1].row, (long long)L[1].col, (long long)L[2].row,
            (long long)L[2].col);
        fc_strbuf_printf(&s, "    MQ = %lld, MK = %lld, OS = %lld, OD = %lld;\n", mask ? (long long)L[3].row : 0LL,
            mask ? (long long)L[3].col : 0LL, (long long)(Sq == 1 ? 0 : os[R - 2]), (long long)(Dv == 1 ? 0 : os[R - 1]));
        fc_strbuf_printf(&s, "  static constexpr float SCALE_LOG2 = (float)%.17g;\n", scale * 1.4426950408889634);
        fc_strbuf_printf(&s, "  static constexpr double SCALE = %.17g;\n", scale);
        /* Batch index t -> element offsets, innermost batch dim first. */
        fc_strbuf_printf(&s, "  static __device__ __forceinline__ void offsets(long long t, long long &q, long long &k, long long &v,"
                " long long &m, long long &o) {\n");
        fc_strbuf_printf(&s, "    q = %lldll; k = %lldll; v = %lldll; m = %lldll; o = 0;\n", (long long)L[0].offset,
            (long long)L[1].offset, (long long)L[2].offset, mask ? (long long)L[3].offset : 0LL);
        fc_strbuf_printf(&s, "    long long c = 0;\n    (void)c; (void)t;\n");
        for (int b = nb - 1; b >= 0; b--) {
            if (o->dims[b] == 1) continue;
            fc_strbuf_printf(&s, "    c = t %% %lldll; t /= %lldll;", (long long)o->dims[b], (long long)o->dims[b]);
            static const char *const names[5] = {"q", "k", "v", "m", "o"};
            int64_t st[5] = {L[0].batch[b], L[1].batch[b], L[2].batch[b], mask ? L[3].batch[b] : 0, os[b]};
            for (int i = 0; i < 5; i++)
                if (st[i]) fc_strbuf_printf(&s, " %s += c * %lldll;", names[i], (long long)st[i]);
            fc_strbuf_printf(&s, "\n");
        }
        fc_strbuf_printf(&s, "  }\n");
        if (fa3) emit_tcoords(&s, o, nb, tp, tma);
        fc_strbuf_printf(&s, "};\n");
        fc_strbuf_printf(&s, "extern \"C\" __global__ void __launch_bounds__(%d%s) %s(", threads, fa3 ? ", 1" : "", name);
    }
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(&s, "const %s *__restrict__ a%d, ", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    fc_strbuf_printf(&s, "%s *__restrict__ o0", fc_cuda_storage_type(gr->outputs[0]->dtype));
    /* The tensor maps, after the pointers: fc_launch.tmaps, in this order. */
    static const char *const tname[3] = {"tq", "tk", "tv"};
    for (int i = 0; i < 3 && !empty; i++)
        if (tma[i]) fc_strbuf_printf(&s, ", const __grid_constant__ fc_wg_tmap %s", tname[i]);
    fc_cuda_kernel_body(&s, l);
    if (!empty) {
        fc_strbuf_printf(&s, "  fc_attn_%s<fc_attn_cfg_%s>(a%d, a%d, a%d, ", fa3 ? "fa3" : mma ? "tc" : "rows", name, L[0].input,
                         L[1].input, L[2].input);
        if (mask) fc_strbuf_printf(&s, "a%d, o0", L[3].input);
        else fc_strbuf_printf(&s, "(const unsigned char *)0, o0");
        for (int i = 0; i < 3 && fa3; i++) fc_strbuf_printf(&s, tma[i] ? ", &%s" : ", nullptr", tname[i]);
        fc_strbuf_printf(&s, ");\n");
    } else {
        for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(&s, "  (void)a%d;\n", i);
        fc_strbuf_printf(&s, "  (void)o0;\n");
    }
    fc_strbuf_printf(&s, "}\n");
    if (s.oom) {
        free(s.buf);
        return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (attention codegen)");
    }

    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    l->grid[0] = empty ? 1u : (unsigned)(fa3 ? persistent_blocks(plan, nqt * NB, attention_persistent(n->a.causal, nc, force)) : nqt * NB);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = empty ? 32u : (unsigned)threads;
    l->block[1] = l->block[2] = 1;
    /* fc_attn_fa3: dynamic shared memory, aligned up to 1024 bytes inside:
     * Q (64 NC rows), the K and V stages, 4 mbarriers a stage. */
    l->smem = empty || !fa3 ? 0u : (unsigned)fa3_smem;
    l->ntmaps = 0;
    for (int i = 0; i < 3 && !empty; i++)
        if (tma[i]) l->tmaps[l->ntmaps++] = tp[i].map;
    /* The plan line says which operands the copy engine loads (--emit=plan). */
    char tmas[16] = "";
    if (l->ntmaps)
        snprintf(tmas, sizeof tmas, ", TMA%s%s%s", tma[0] ? " q" : "", tma[1] ? " k" : "", tma[2] ? " v" : "");
    snprintf(l->summary, sizeof l->summary, "attention: %s %s%s%s, %lld x %lld x %lld x %lld%s", fa3 ? "flash wgmma" : mma ? "flash mma" : "flash rows",
             fc_dtype_name(t), n->a.causal ? ", causal" : "", mask_kind ? ", mask" : "", (long long)NB, (long long)Sq,
             (long long)Sk, (long long)D, tmas);
    *source = s.buf;
    return FC_OK;
}

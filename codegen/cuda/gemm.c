/* gemm.c - the GEMMs of a dynamic variant as generated CUDA kernels.
 *
 * cuBLASLt binds a matmul's descriptors to its sizes, so a variant that
 * runs its GEMMs through it pays, at every new shape, for new descriptors,
 * an algorithm (a heuristic query far from known sizes) and sometimes the
 * lazy load of a library kernel (docs/DYNAMIC.md). Here the sizes are
 * kernel arguments instead: one kernel per GEMM group, compiled with the
 * rest of the variant, computes M, N, K, the leading dims and the batch
 * strides from the symbol values (s0 ..) and calls the device templates of
 * gemm.cuh.inc, which choose a tile shape from those sizes at run time.
 *
 * The plan of a node is the one runtime/cublaslt.c (fc_gemm_plan_of) makes,
 * with monomials in place of sizes: rank-1 operands promoted, batch dims
 * broadcast (static 1 only: a symbol is never assumed to be 1), a batch
 * folded into M when the weight has none and A is dense and untransposed.
 * Every remaining batch dim, strided or not, is one dim of grid.z's
 * decomposition, so cuBLASLt's strided batch and its outer loop of calls
 * are one launch here.
 */
#include "gemm.h"
#include "ir/switches.h"
#include "passes/epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char templates_src[] =
#include "gemm.cuh.inc.str"
    ;
static const char wgmma_src[] =
#include "wgmma.cuh.inc.str"
    ;

/* Must match gemm.cuh.inc: FC_GM_THREADS, the mma.sync tile shapes (the
 * large one, then the small) and the wgmma tile's 128 rows and 64-deep k
 * tiles. The persistent grid is one block per SM (fc_cuda_plan_sms: the
 * device's, or an H100/H200 SXM's 132 when the variant is compiled without
 * a device). WS_FLOATS: the split-K workspace, 16 MiB of f32
 * (FC_GM_WS_FLOATS): room for the wgmma tile's full split on 132 SMs
 * (170 tiles of 128 x 192 at once; docs/GEMM.md). */
enum { GM_THREADS = 256, WG_BM = 128, WG_BK = 64 };
#define WS_FLOATS 4194304
static const int tc_tiles[2][4] = {{128, 128, 64, 4}, {64, 64, 64, 4}}; /* BM, BN, BK, stages */
static const int simt_bm_max = 64, simt_bn = 64, simt_bk = 16;

/* The wgmma tile: 128 x WG_BN x 64 in WG_STAGES cp.async stages (GPT-2's
 * N are multiples of 192: 768 is 4 tiles, so 4096 rows make 128 tiles for
 * 132 SMs, one round), its C tile in f32 after the first stages - 2 within
 * the 227 KiB a block may have (fc_gm_wg_units). The epilogue stores 8
 * columns at once where y's rows allow it, on the mma.sync tiles too
 * (docs/GEMM.md). */
enum { WG_BN = 192, WG_STAGES = 5 };

/*
 * The tile rule, written once for both compilers: compiled here as C
 * (fc_cuda_gemm_tiles, which the tests ask which kernel a shape takes) and
 * emitted as the body of the device function fc_gm_tiles that every GEMM
 * kernel runs (the same answer in every block: a function of M, N, K, the
 * batch Z and the block count P alone). It returns the tile: 0, 64 x 64
 * (mma.sync); 1, 128 x 128 (mma.sync); 2, 128 x wbn (wgmma); and in
 * *kper the 64-deep k tiles of one K split. With one block per SM a shape
 * takes ceil(units / P) rounds, so:
 *  - a tile shape with fewer tiles than P is split along K: floor(P /
 *    tiles) splits (so that every unit runs in the first round), at most
 *    what the workspace holds, evened out over the k tiles;
 *  - M <= 64 takes 64 x 64 tiles (and computes nothing more: a 64-bit
 *    division is a long dependent chain, and every thread of every launch
 *    runs this at its start);
 *  - otherwise the small tile (64 x 64) and one large tile, each with its
 *    K split, and the one whose rounds x (its unit's time) is smaller. The
 *    large tile is mma.sync's 128 x 128 without wgmma or at M <= WG_MIN_M,
 *    else wgmma's 128 x wbn. A unit's time: k tiles x a k step, plus a
 *    unit's start and end, plus, when split, a share per split (the last
 *    block reads every partial alone: S x 96 KiB for 128 x 192). The
 *    times, in 10 ns, from the H200 (docs/GEMM.md): a 64 x 64 mma.sync k
 *    step 0.45 us, 1 us a unit, 0.15 us a split (16 KiB partials); a 128 x
 *    128 mma.sync tile twice a 64 x 64 one unsplit, 1.9 us a split (64 KiB
 *    partials); a 128 x 192 wgmma k step 0.78 us,
 *    scaled by the bytes it loads ((128 + wbn) x 64 x 2: these tiles are
 *    bound by the loads), 1.5 us a unit, 0.8 us a split. Unsplit, the 128 x
 *    128 tile wins where its rounds x 2 <= the 64 x 64 tiles' rounds;
 *    split, it serves GPT-2's M 193-384 at N 2304, 129-256 at N 3072,
 *    705-768 at N 768 and K 768, 321-768 at K 3072 (one round of 18 to 48
 *    tiles unsplit, on a third of the SMs or fewer; docs/PERF.md).
 *    WG_MIN_M: in the GPT-2 variant's sweep (B=1, M = T) the wgmma tile
 *    this model picked was slower than the mma.sync tiles for T up to 768
 *    (whole block; T a multiple of 8, where it applies) and faster above.
 *    The splits of either large tile may use the whole workspace (a large
 *    tile left unsplit on a quarter of the SMs was the slower choice).
 * No comments inside: it becomes one line of the device source.
 */
#define WG_MIN_M 768
#define WG_STEP (78 * (128 + wbn) / 320)
#define WG_UNIT 150
#define WG_PART (80 * wbn / 192)
#define SMALL_STEP 45
#define SMALL_UNIT 100
#define SMALL_PART 15
#define LARGE_STEP 90
#define LARGE_UNIT 200
#define LARGE_PART 190
#define TILE_RULE_BODY                                                                                              \
    {                                                                                                               \
        long long nk = (K + 63) / 64, p = P < 1 ? 1 : P, want;                                                      \
        long long ts = ((M + 63) / 64) * ((N + 63) / 64) * Z, ks = nk;                                              \
        if (ts < p && nk >= 2) {                                                                                    \
            want = p / ts;                                                                                          \
            if (want > fc_gm_ws_floats() / (64 * 64) / ts) want = fc_gm_ws_floats() / (64 * 64) / ts;               \
            if (want >= 2) ks = (nk + want - 1) / want;                                                             \
        }                                                                                                           \
        *kper = ks;                                                                                                 \
        const int mma = wbn == 0 || M <= WG_MIN_M;                                                                  \
        if (mma && M <= 64) return 0;                                                                               \
        long long bn = mma ? 128 : wbn;                                                                             \
        long long tb = ((M + 127) / 128) * ((N + bn - 1) / bn) * Z, kb = nk;                                        \
        if (tb < p && nk >= 2) {                                                                                    \
            want = p / tb;                                                                                          \
            if (want > fc_gm_ws_floats() / (128 * bn) / tb) want = fc_gm_ws_floats() / (128 * bn) / tb;             \
            if (want >= 2) kb = (nk + want - 1) / want;                                                             \
        }                                                                                                           \
        long long ss = (nk + ks - 1) / ks, sb = (nk + kb - 1) / kb;                                                 \
        long long cs = (ts * ss + p - 1) / p * (ks * SMALL_STEP + SMALL_UNIT + (ss > 1 ? ss * SMALL_PART : 0));     \
        long long cb = (tb * sb + p - 1) / p *                                                                      \
                       (mma ? kb * LARGE_STEP + LARGE_UNIT + (sb > 1 ? sb * LARGE_PART : 0)                         \
                            : kb * WG_STEP + WG_UNIT + (sb > 1 ? sb * WG_PART : 0));                                \
        if (cb > cs) return 0;                                                                                      \
        *kper = kb;                                                                                                 \
        return mma ? 1 : 2;                                                                                         \
    }
#define TILE_RULE_SIGNATURE(name)                                                                                    \
    int name(long long M, long long N, long long K, long long Z, long long P, long long wbn, long long *kper)
#define STRING_OF_(...) #__VA_ARGS__
#define STRING_OF(...) STRING_OF_(__VA_ARGS__)

/* The split-K workspace, in floats, which the splits of every tile may
 * use whole. The device source defines it as a constant
 * (fc_cuda_emit_gemm). */
static long long fc_gm_ws_floats(void) { return WS_FLOATS; }

TILE_RULE_SIGNATURE(fc_cuda_gemm_tiles) TILE_RULE_BODY

static const char tile_rule_src[] = "__device__ __forceinline__ " STRING_OF(TILE_RULE_SIGNATURE(fc_gm_tiles)) " " STRING_OF(
    TILE_RULE_BODY) "\n";

bool fc_cuda_variant_gemm_kernels(void) { return strcmp(fc_switch_str(FC_SW_VARIANT_GEMM), "cublaslt") != 0; }

static bool float_dtype(fc_dtype dt) { return dt == FC_F16 || dt == FC_BF16 || dt == FC_F32 || dt == FC_F64; }

bool fc_cuda_gemm_kernel_fits(const fc_group *gr) {
    if (gr->nnodes != 1 || gr->noutputs != 1) return false;
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi) || !float_dtype(gi.a->dtype) || !float_dtype(gi.out)) return false;
    if (gi.a->rank < 1 || gi.w[0]->rank < 1 || n->out[0] != gr->outputs[0]) return false;
    bool epilogue = gi.has_bias || gi.has_residual || gi.act != FC_GEMM_ACT_NONE || gi.alpha != 1.0;
    if (gi.a->dtype == FC_F64 && (epilogue || gi.out != FC_F64)) return false;
    /* Several weights: their column ends are sums, which must be constants
     * for grid.x's monomial (the pass fuses rank-2 parameters only). */
    for (int i = 0; gi.nweights > 1 && i < gi.nweights; i++)
        if (gi.w[i]->rank != 2 || !fc_value_is_static(gi.w[i])) return false;
    return true;
}

/* ---- the plan, in monomials ----------------------------------------------- */

typedef struct vplan {
    fc_gemm_info gi;
    fc_mono M, N, K, lda;
    int nb;
    fc_mono size[FC_MAX_RANK], sa[FC_MAX_RANK], sw[FC_MAX_RANK], sy[FC_MAX_RANK];
} vplan;

static void plan_of(const fc_node *n, vplan *p) {
    memset(p, 0, sizeof *p);
    fc_gemm_info_of(n, &p->gi);
    const fc_gemm_info *gi = &p->gi;
    fc_dim ad[FC_MAX_RANK], wd[FC_MAX_RANK];
    int ra = fc_matmul_operand_dims(gi->a, true, ad), rw = fc_matmul_operand_dims(gi->w[0], false, wd);
    fc_mono M0 = fc_mono_dim(gi->trans_a ? ad[ra - 1] : ad[ra - 2]);
    p->K = fc_mono_dim(gi->trans_a ? ad[ra - 2] : ad[ra - 1]);
    if (gi->nweights == 1) p->N = fc_mono_dim(gi->trans_b ? wd[rw - 2] : wd[rw - 1]);
    else {
        p->N = fc_mono_one();
        p->N.c = 0;
        for (int i = 0; i < gi->nweights; i++) p->N.c += gi->w[i]->dims[gi->trans_b ? 0 : 1];
    }
    p->lda = gi->trans_a ? M0 : p->K;

    int nb = fc_matmul_batch_layout(ad, ra, wd, rw, fc_mono_mul(M0, &p->N), p->size, p->sa, p->sw, p->sy);
    /* A weight without batch dims and a dense, untransposed A: the batch
     * is more rows of one GEMM (as fc_gemm_plan_of folds it). */
    bool w_flat = true, a_dense = !gi->trans_a;
    fc_mono dense = fc_mono_mul(M0, &p->K);
    for (int d = nb - 1; d >= 0; d--) {
        w_flat = w_flat && p->sw[d].c == 0;
        a_dense = a_dense && fc_mono_eq(&p->sa[d], &dense);
        dense = fc_mono_mul(dense, &p->size[d]);
    }
    p->M = M0;
    if (nb > 0 && w_flat && a_dense) {
        for (int d = 0; d < nb; d++) p->M = fc_mono_mul(p->M, &p->size[d]);
        nb = 0;
    }
    p->nb = nb;
}

/* Weight i's columns (N, or a sibling's static count) and its leading dim
 * (its columns, or K with trans_b). */
static fc_mono weight_cols(const vplan *p, int i) {
    if (p->gi.nweights == 1) return p->N;
    fc_mono c = fc_mono_one();
    c.c = p->gi.w[i]->dims[p->gi.trans_b ? 0 : 1];
    return c;
}
static fc_mono weight_ld(const vplan *p, int i) { return p->gi.trans_b ? p->K : weight_cols(p, i); }

int fc_cuda_gemm_path(const fc_group *gr, const int64_t *syms, int nsyms, int sm, int64_t blocks, int64_t *splits) {
    *splits = 1;
    if (!fc_cuda_gemm_kernel_fits(gr)) return -1;
    vplan p;
    plan_of(gr->nodes[0], &p);
    if (fc_dtype_size(p.gi.a->dtype) != 2) return FC_GEMM_PATH_FMA;
    int64_t M = fc_mono_eval(&p.M, syms, nsyms), N = fc_mono_eval(&p.N, syms, nsyms), K = fc_mono_eval(&p.K, syms, nsyms), Z = 1;
    for (int d = 0; d < p.nb; d++) Z *= fc_mono_eval(&p.size[d], syms, nsyms);
    long long kper = 1, nk = (K + 63) / 64;
    /* The kernels' fc_gm_vectorized, of the sizes (base pointers taken as
     * aligned: cudaMalloc's and the arena's are). */
    bool vec = fc_mono_eval(&p.lda, syms, nsyms) % 8 == 0;
    for (int i = 0; i < p.gi.nweights; i++) {
        const fc_mono cols = weight_cols(&p, i), ld = weight_ld(&p, i);
        vec = vec && fc_mono_eval(&ld, syms, nsyms) % 8 == 0 && (p.gi.trans_b || fc_mono_eval(&cols, syms, nsyms) % 8 == 0);
    }
    for (int d = 0; d < p.nb; d++)
        vec = vec && fc_mono_eval(&p.sa[d], syms, nsyms) % 8 == 0 && fc_mono_eval(&p.sw[d], syms, nsyms) % 8 == 0;
    int t = fc_cuda_gemm_tiles(M, N, K, Z, blocks, vec ? fc_cuda_gemm_wgmma_bn(sm) : 0, &kper);
    *splits = kper > 0 ? (nk + kper - 1) / kper : 1;
    return t == 2 ? FC_GEMM_PATH_WGMMA : t == 1 ? FC_GEMM_PATH_MMA_LARGE : FC_GEMM_PATH_MMA_SMALL;
}

/* ---- emitting --------------------------------------------------------------- */

#define EX 128 /* room for one size expression */

/* The kernel parameter holding value v: a<i> for the group's input i. */
static void param_of(const fc_group *gr, const fc_value *v, char *out, size_t n) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i]->id == v->id) {
            snprintf(out, n, "a%d", i);
            return;
        }
    FC_UNREACHABLE("gemm operand is not an input of its group");
}

static const char *act_name(fc_gemm_act a) { return a == FC_GEMM_ACT_RELU ? "1" : a == FC_GEMM_ACT_GELU_TANH ? "2" : "0"; }

int fc_cuda_gemm_wgmma_bn(int sm) { return sm == 90 ? WG_BN : 0; }

/* Dynamic shared memory of the largest tile shape fc_gm_run may pick: its
 * cp.async stages, or its C tile in f32, which reuses them. Where the
 * variant has wgmma tiles, the mma.sync ones count too: a unit compiled for
 * plain sm_90 (without sm_90a's wgmma) runs those instead. */
static unsigned smem_bytes(const vplan *p, int wbn) {
    size_t es = fc_dtype_size(p->gi.a->dtype);
    if (es != 2) return (unsigned)((size_t)(simt_bm_max * simt_bk + simt_bk * simt_bn) * es);
    unsigned best = 0;
    for (int i = 0; i < 3; i++) {
        unsigned b, c;
        if (i < 2) {
            int bm = tc_tiles[i][0], bn = tc_tiles[i][1], bk = tc_tiles[i][2], st = tc_tiles[i][3];
            int a = p->gi.trans_a ? bk * (bm + 8) : bm * (bk + 8), w = p->gi.trans_b ? bn * (bk + 8) : bk * (bn + 8);
            b = (unsigned)(2 * st * (a + w)); /* the stages, rows padded */
            c = (unsigned)(4 * bm * (bn + 8)); /* then C in f32 */
        } else {
            if (!wbn) break;
            /* Swizzled stages (no padding) from a 1024-aligned start; C in
             * f32 after the first stages - 2 of them. */
            const int st = WG_STAGES, sb = 2 * (WG_BM + wbn) * WG_BK;
            b = (unsigned)(1024 + st * sb);
            c = (unsigned)(1024 + (st - 2) * sb + 4 * WG_BM * (wbn + 8));
        }
        if (b > best) best = b;
        if (c > best) best = c;
    }
    return best;
}

void fc_cuda_emit_wgmma_helpers(fc_strbuf *s) { fc_strbuf_printf(s, "%s", wgmma_src); }

/* fc_wg_ss<n> (wgmma.cuh.inc): one wgmma m64nNk16 per input type, f32
 * accumulators, both operands by descriptor, TA and TB its transpose bits.
 * Written out per n since the operand list (n / 2 accumulators) depends on
 * it; once per unit (#ifndef guard), and only where the helpers are (sm_90a). */
void fc_cuda_emit_wgmma_ss(fc_strbuf *s, int n) {
    fc_strbuf_printf(s, "#if defined(FC_WG_HELPERS) && !defined(FC_WG_SS_%d)\n#define FC_WG_SS_%d\n", n, n);
    fc_strbuf_printf(s, "template <> struct fc_wg_ss<%d> {\n", n);
    static const char *const types[2][2] = {{"__nv_bfloat16", "bf16"}, {"__half", "f16"}};
    const int nd = n / 2;
    for (int t = 0; t < 2; t++) {
        fc_strbuf_printf(s,
                         "  template <int TA, int TB>\n  static __device__ __forceinline__ void run(float (&d)[%d][4], "
                         "unsigned long long a, unsigned long long b, %s *) {\n",
                         n / 8, types[t][0]);
        /* The scale-d predicate (1: accumulate) after the descriptors, then the transpose bits. */
        fc_strbuf_printf(s, "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n", nd + 2);
        fc_strbuf_printf(s, "      \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", n, types[t][1], types[t][1]);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s%%%d", i ? ", " : "", i);
        fc_strbuf_printf(s, "}, %%%d, %%%d, p, 1, 1, %%%d, %%%d;\\n}\\n\"\n      : ", nd, nd + 1, nd + 3, nd + 4);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s\"+f\"(d[%d][%d])", i ? ", " : "", i / 4, i % 4);
        fc_strbuf_printf(s, "\n      : \"l\"(a), \"l\"(b), \"r\"(1), \"n\"(TA), \"n\"(TB));\n  }\n");
    }
    fc_strbuf_printf(s, "};\n#endif\n");
}

static void set_grid(fc_launch *l, int a, fc_mono work, int64_t per, int64_t max, int nsyms) {
    int64_t ones[FC_DYN_MAX_SYMS];
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++) ones[i] = 1;
    l->grid_work[a] = work;
    l->grid_per[a] = per;
    l->grid_max[a] = max;
    int64_t w = fc_mono_eval(&work, ones, nsyms), g = w / per + (w % per != 0);
    l->grid[a] = (unsigned)(g < 1 ? 1 : g > max ? max : g);
}

fc_status fc_cuda_emit_gemm(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, bool *templates,
                            fc_launch *l) {
    fc_graph *g = plan->g;
    if (!fc_cuda_gemm_kernel_fits(gr))
        return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "codegen: group %d: no generated GEMM kernel for it", gr->id);
    vplan p;
    plan_of(gr->nodes[0], &p);
    const fc_gemm_info *gi = &p.gi;
    int nw = gi->nweights, nsyms = g->nsyms;
    const int wbn = fc_cuda_gemm_wgmma_bn(plan->sm);
    if (!*templates) {
        fc_strbuf_printf(s, "#define FC_GM_WGMMA %d\n#define FC_GM_WBN %d\n#define FC_GM_WST %d\n#define FC_GM_WS_FLOATS %lld\n"
                         "#define fc_gm_ws_floats() ((long long)FC_GM_WS_FLOATS)\n",
                         wbn ? 1 : 0, wbn, WG_STAGES, fc_gm_ws_floats());
        if (wbn) {
            fc_cuda_emit_wgmma_helpers(s);
            fc_cuda_emit_wgmma_ss(s, wbn);
        }
        fc_strbuf_printf(s, "%s%s\n", tile_rule_src, templates_src);
        *templates = true;
    }
    const char *tin = fc_cuda_storage_type(gi->a->dtype), *tout = fc_cuda_storage_type(gi->out);
    fc_strbuf_printf(s, "// group %d: %s\n", gr->id, l->summary);
    fc_cuda_kernel_open(s, l, GM_THREADS, 1);
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(s, "%sconst %s *a%d", i ? ", " : "", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    fc_strbuf_printf(s, "%s%s *o0", gr->ninputs ? ", " : "", tout);
    for (int i = 0; i < nsyms; i++) fc_strbuf_printf(s, ", i64 s%d", i);
    fc_cuda_kernel_body(s, l);
    fc_strbuf_printf(s, "  fc_gm_args<%d, %d> p;\n", nw, p.nb);
    char x[EX], y[EX];
    param_of(gr, gi->a, x, sizeof x);
    fc_strbuf_printf(s, "  p.a = %s; p.lda = %s;\n", x, fc_cuda_mono_text(&p.lda, y, sizeof y));
    int64_t end = 0;
    for (int i = 0; i < nw; i++) {
        param_of(gr, gi->w[i], x, sizeof x);
        const fc_mono ld = weight_ld(&p, i);
        if (nw > 1) end += weight_cols(&p, i).c;
        fc_strbuf_printf(s, "  p.w[%d] = %s; p.ldw[%d] = %s; ", i, x, i, fc_cuda_mono_text(&ld, y, sizeof y));
        if (nw > 1) fc_strbuf_printf(s, "p.wend[%d] = %lldll;", i, (long long)end);
        else fc_strbuf_printf(s, "p.wend[0] = %s;", fc_cuda_mono_text(&p.N, y, sizeof y));
        if (gi->has_bias) param_of(gr, gi->bias[i], x, sizeof x);
        fc_strbuf_printf(s, " p.bias[%d] = %s;\n", i, gi->has_bias ? x : "0");
    }
    if (gi->has_residual) param_of(gr, gi->residual, x, sizeof x);
    fc_strbuf_printf(s, "  p.res = %s; p.y = o0;\n", gi->has_residual ? x : "0");
    char m[EX], n[EX], k[EX];
    fc_strbuf_printf(s, "  p.M = %s; p.N = %s; p.K = %s;\n", fc_cuda_mono_text(&p.M, m, sizeof m),
                     fc_cuda_mono_text(&p.N, n, sizeof n), fc_cuda_mono_text(&p.K, k, sizeof k));
    for (int d = 0; d < p.nb; d++) {
        char t[4][EX];
        fc_strbuf_printf(s, "  p.bsize[%d] = %s; p.bsa[%d] = %s; p.bsw[%d] = %s; p.bsy[%d] = %s;\n", d,
                         fc_cuda_mono_text(&p.size[d], t[0], EX), d, fc_cuda_mono_text(&p.sa[d], t[1], EX), d,
                         fc_cuda_mono_text(&p.sw[d], t[2], EX), d, fc_cuda_mono_text(&p.sy[d], t[3], EX));
    }
    /* alpha is an f32 scale, as cuBLASLt's for these types. */
    fc_strbuf_printf(s, "  p.alpha = (float)%.9g;\n  fc_gm_run<%s, %s, %s, %s, %s, %s, %s, %s, %d, %d>(p);\n}\n\n", (double)(float)gi->alpha,
                     tin, tout, gi->trans_a ? "true" : "false", gi->trans_b ? "true" : "false", act_name(gi->act),
                     gi->has_bias ? "true" : "false", gi->has_residual ? "true" : "false",
                     gi->alpha != 1.0 ? "true" : "false", nw, p.nb);

    l->kind = FC_LAUNCH_KERNEL;
    l->nsyms = nsyms;
    l->smem = smem_bytes(&p, wbn);
    /* The persistent grid: one block per SM, the same for every shape (a
     * device with fewer SMs than blocks would run a second, partial round). */
    const int64_t nblocks = fc_cuda_plan_sms(plan);
    fc_mono blocks = fc_mono_one();
    blocks.c = nblocks;
    set_grid(l, 0, blocks, 1, nblocks, nsyms);
    set_grid(l, 1, fc_mono_one(), 1, 1, nsyms);
    set_grid(l, 2, fc_mono_one(), 1, 1, nsyms);
    return FC_OK;
}

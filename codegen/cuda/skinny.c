/* skinny.c - GEMMs of few rows (static M <= 64) as cluster split-K kernels
 * on Hopper: the rule that picks them, their split, and their launch
 * (skinny.h; the device template is skinny.cuh.inc). */
#include "skinny.h"
#include "attention.h"
#include "gemm.h"
#include "passes/epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char skinny_src[] =
#include "skinny.cuh.inc"
    ;

/* Must match skinny.cuh.inc: 128 threads (one warpgroup), 64 rows and 64
 * columns a cluster, a K slice of at most MAX_SLICE (its A and W slices,
 * 2 x 96 KiB, and the f32 tile in shared memory), at most 8 blocks a
 * cluster (the portable size). */
enum { SK_THREADS = 128, SK_ROWS = 64, SK_COLS = 64, SK_PANEL = 64, MAX_SLICE = 384, MAX_SPLITS = 8 };
/* Fewer blocks than this and the split doubles (where K allows): the H200
 * ran the GPT-2 out projection (N 768, K 768) in 2.86 us on 48 blocks of
 * 192-deep slices, against 3.0 on 72 (docs/GEMM.md). */
enum { MIN_BLOCKS = 48 };

bool fc_cuda_skinny_enabled(void) { return !fc_env_is_zero("FUSEC_SKINNY"); }

static int input_index(const fc_group *gr, const fc_value *v) {
    for (int i = 0; v && i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return i;
    return -1;
}

/* The split: the fewest K slices of at most MAX_SLICE that divide K into
 * 64-deep panels evenly, doubled (to the next such count) while the grid
 * has fewer than MIN_BLOCKS blocks. 0: none fits. */
static int splits_of(int64_t N, int64_t K) {
    const int64_t panels = K / SK_PANEL;
    int s = 0;
    for (int c = 1; c <= MAX_SPLITS && !s; c++)
        if (panels % c == 0 && panels / c * SK_PANEL <= MAX_SLICE) s = c;
    while (s && N / SK_COLS * s < MIN_BLOCKS) {
        int next = 0;
        for (int c = s + 1; c <= MAX_SPLITS && !next; c++)
            if (panels % c == 0) next = c;
        if (!next) break;
        s = next;
    }
    return s;
}

bool fc_cuda_skinny_plan(const fc_plan *plan, const fc_group *gr, fc_skinny *out) {
    if (plan->dynamic || plan->sm != 90 || !fc_cuda_attention_hopper(plan->sm) || !fc_cuda_skinny_enabled()) return false;
    if (gr->kind != FC_GROUP_LIBRARY || gr->nnodes != 1 || gr->noutputs != 1 || gr->batch > 0) return false;
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi) || gi.nweights != 1 || gi.trans_a || gi.trans_b || n->out[0] != gr->outputs[0]) return false;
    const fc_value *a = gi.a, *w = gi.w[0], *y = n->out[0];
    const fc_dtype t = a->dtype;
    if ((t != FC_BF16 && t != FC_F16) || w->dtype != t || gi.out != t || y->dtype != t) return false;
    if (gi.has_bias && gi.bias[0]->dtype != t) return false;
    if (gi.has_residual && gi.residual->dtype != t) return false;
    if (a->rank < 2 || w->rank != 2 || y->rank != a->rank || !fc_value_is_static(a) || !fc_value_is_static(w)) return false;
    int64_t M = 1;
    for (int d = 0; d + 1 < a->rank; d++) M *= a->dims[d];
    const int64_t K = a->dims[a->rank - 1], N = w->dims[1];
    if (M < 1 || M > SK_ROWS || w->dims[0] != K || N % SK_COLS || K % SK_PANEL || N * K < 768 * 768) return false;
    const int s = splits_of(N, K);
    if (!s) return false;
    fc_skinny k = {
        .M = M, .N = N, .K = K, .splits = s, .slice = K / s, .a = input_index(gr, a), .w = input_index(gr, w),
        .bias = gi.has_bias ? input_index(gr, gi.bias[0]) : -1, .residual = gi.has_residual ? input_index(gr, gi.residual) : -1,
        .act = gi.act == FC_GEMM_ACT_RELU ? 1 : gi.act == FC_GEMM_ACT_GELU_TANH ? 2 : 0, .alpha = gi.alpha, .dtype = t,
    };
    if (k.a < 0 || k.w < 0 || (gi.has_bias && k.bias < 0) || (gi.has_residual && k.residual < 0)) return false;
    /* Fetched before griddepcontrol.wait only what no kernel of the
     * program writes: its parameters. */
    k.constant_w = w->param_index >= 0 && (!gi.has_bias || gi.bias[0]->param_index >= 0);
    if (out) *out = k;
    return true;
}

static fc_tmap tmap_of(int arg, fc_dtype t, int64_t cols, int64_t rows, uint32_t box_rows) {
    fc_tmap m = {.arg = arg, .dtype = t, .rank = 2, .swizzle128 = true};
    m.dims[0] = cols;
    m.dims[1] = rows;
    m.strides[0] = cols * fc_dtype_size(t);
    m.box[0] = SK_PANEL;
    m.box[1] = box_rows;
    return m;
}

fc_status fc_cuda_emit_skinny(const fc_group *gr, const fc_skinny *k, const char *name, fc_strbuf *s, bool *templates,
                              fc_launch *l) {
    char d[96];
    fc_gemm_describe(gr->nodes[0], d, sizeof d);
    snprintf(l->summary, sizeof l->summary, "skinny %s, %lld x %lld x %lld, K in %d slices of a cluster", d, (long long)k->M,
             (long long)k->N, (long long)k->K, k->splits);
    if (!*templates) {
        fc_cuda_emit_wgmma_helpers(s);
        fc_cuda_emit_wgmma_ss(s, SK_COLS);
        fc_strbuf_printf(s, "%s", skinny_src);
        *templates = true;
    }
    const char *t = fc_cuda_storage_type(k->dtype);
    fc_strbuf_printf(s, "// group %d: %s\n", gr->id, l->summary);
    fc_strbuf_printf(s, "extern \"C\" __global__ void __cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 1) %s(", k->splits,
                     SK_THREADS, name);
    for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", t, i);
    fc_strbuf_printf(s, "%s *__restrict__ o0, const __grid_constant__ fc_wg_tmap ta, const __grid_constant__ fc_wg_tmap tw) {\n",
                     t);
    fc_strbuf_printf(s, "#if defined(FC_SK_TEMPLATES)\n");
    fc_strbuf_printf(s, "  fc_sk_run<%s, %lld, %d, %d, %s, %s, %s>(&ta, &tw, ", t, (long long)k->slice, k->splits, k->act,
                     k->bias >= 0 ? "true" : "false", k->residual >= 0 ? "true" : "false", k->constant_w ? "true" : "false");
    if (k->bias >= 0) fc_strbuf_printf(s, "a%d, ", k->bias);
    else fc_strbuf_printf(s, "(const %s *)0, ", t);
    if (k->residual >= 0) fc_strbuf_printf(s, "a%d, ", k->residual);
    else fc_strbuf_printf(s, "(const %s *)0, ", t);
    fc_strbuf_printf(s, "o0, %lld, %lld, (float)%.17g);\n", (long long)k->M, (long long)k->N, k->alpha);
    /* Compiled without sm_90a (which the rule requires): loud, never wrong. */
    fc_strbuf_printf(s, "#else\n  __trap();\n#endif\n}\n");

    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    l->grid[0] = (unsigned)(k->N / SK_COLS * k->splits);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = SK_THREADS;
    l->block[1] = l->block[2] = 1;
    l->min_blocks = 1;
    /* fc_sk_run's dynamic shared memory: 1024 of alignment, the W and A
     * slices (128 bytes a row of depth each), the f32 tile (64 x 68), the
     * residual's rows this block finishes, the bias, two mbarriers. */
    const int64_t rows = (SK_ROWS + k->splits - 1) / k->splits;
    l->smem = (unsigned)(1024 + k->slice * 128 * 2 + SK_ROWS * 68 * 4 + rows * 128 + 128 + 16);
    const uint32_t wbox = (uint32_t)(k->slice <= 256 ? k->slice : k->slice / 2);
    l->ntmaps = 2;
    /* A's boxes hold its M rows (the panel's other rows are never stored). */
    l->tmaps[0] = tmap_of(k->a, k->dtype, k->K, k->M, (uint32_t)k->M);
    l->tmaps[1] = tmap_of(k->w, k->dtype, k->N, k->K, wbox);
    l->pdl = true;
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

/* skinny.c - GEMMs of few rows (static M <= 64) as cluster split-K kernels
 * on Hopper: the rule that picks them, their split, and their launch
 * (skinny.h; the device template is skinny.cuh.inc). */
#include "skinny.h"
#include "attention.h"
#include "gemm.h"
#include "gemv.h"
#include "ir/switches.h"
#include "passes/epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char skinny_src[] =
#include "skinny.cuh.inc.str"
    ;
static const char skinny_attention_src[] =
#include "skinny_attention.cuh.inc.str"
    ;

/* Must match skinny.cuh.inc: 128 threads (one warpgroup), 64 rows and 64
 * columns a cluster, a K slice of at most MAX_SLICE (its A and W slices,
 * 2 x 96 KiB, and the f32 tile in shared memory), at most 8 blocks a
 * cluster (the portable size). */
enum { SK_THREADS = 128, SK_ROWS = 64, SK_COLS = 64, SK_PANEL = 64, MAX_SLICE = 384, MAX_SPLITS = 8 };

/* The widest N the skinny kernel takes. Measured on the H200 at M = 8, K =
 * 768 (bench/gemm_sweep.sh, docs/PERF.md), a vocabulary's width ran 1.8 to
 * 1.9 times slower here than in cuBLASLt: N 32000 0.0305 ms against 0.0154,
 * 50256 0.0433 against 0.0237, 128256 0.1000 against 0.0560 (a block's 64
 * columns and a 64-row wgmma tile of which 8 rows are real, a thousand
 * blocks and more). It was measured faster than cuBLASLt up to GPT-2's
 * widest projection (3072); between the two nothing was measured, and the
 * limit keeps the projections of wider models (4096 to 8192). */
enum { SK_MAX_COLS = 8192 };
/* Fewer blocks than this and the split doubles (where K allows): 48
 * blocks of 192-deep slices ran the GPT-2 out projection (N 768, K 768)
 * faster than 72 did on the H200 (docs/PERF.md). */
enum { MIN_BLOCKS = 48 };

/* The partial tiles' bytes in a block's shared memory (fc_sk_tiles<S, NT>):
 * the ceil(64 / S) rows it finishes of each of the S NT tiles of the
 * cluster, 68 floats a row. */
static int64_t tiles_bytes(int splits, int nt) {
    return (int64_t)splits * nt * ((SK_ROWS + splits - 1) / splits) * 68 * 4;
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
    if (plan->dynamic || plan->sm != 90 || !fc_cuda_attention_hopper(plan->sm) || !fc_switch_on(FC_SW_SKINNY)) return false;
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
    if (M < 1 || M > SK_ROWS || w->dims[0] != K || N % SK_COLS || N > SK_MAX_COLS || K % SK_PANEL || N * K < 768 * 768)
        return false;
    const int s = splits_of(N, K);
    if (!s) return false;
    fc_skinny k = {
        .M = M, .N = N, .K = K, .splits = s, .slice = K / s, .a = fc_cuda_group_input(gr, a),
        .w = fc_cuda_group_input(gr, w), .bias = gi.has_bias ? fc_cuda_group_input(gr, gi.bias[0]) : -1,
        .residual = gi.has_residual ? fc_cuda_group_input(gr, gi.residual) : -1,
        .act = gi.act == FC_GEMM_ACT_RELU ? 1 : gi.act == FC_GEMM_ACT_GELU_TANH ? 2 : 0, .alpha = gi.alpha, .dtype = t,
        .y_slice = -1, .y_dst = -1, .no = N,
    };
    if (k.a < 0 || k.w < 0 || (gi.has_bias && k.bias < 0) || (gi.has_residual && k.residual < 0)) return false;
    /* Fetched before griddepcontrol.wait only what no kernel of the
     * program writes: its parameters. */
    k.constant_w = w->param_index >= 0 && (!gi.has_bias || gi.bias[0]->param_index >= 0);
    /* A padded N's compaction (a result of the graph) written by the
     * epilogue, which stores rows of any length: no copy kernel. Not with
     * a residual, whose rows are the padded result's. */
    if (plan->offset && !gi.has_residual) k.y_slice = fc_cuda_result_slice(plan, gr, M, N, &k.y_dst, &k.no);
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

/* What both kernels' launches share: kind, name, a cluster of k->splits
 * blocks per 64 columns, blocks of `threads`, one block an SM, and pdl (they
 * wait before they read what the kernel before wrote). */
static void fill_launch(fc_launch *l, const char *name, const fc_skinny *k, unsigned threads) {
    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    l->grid[0] = (unsigned)(k->N / SK_COLS * k->splits);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = threads;
    l->block[1] = l->block[2] = 1;
    l->min_blocks = 1;
    l->pdl = true;
}

/* W's tensor map (argument arg): boxes of the K slice's rows, half of it
 * past 256 rows (a box holds at most 256). */
static fc_tmap w_tmap(const fc_skinny *k, int arg) {
    return tmap_of(arg, k->dtype, k->N, k->K, (uint32_t)(k->slice <= 256 ? k->slice : k->slice / 2));
}

/* The device templates, once a unit each: the skinny GEMM's (bit 1 of
 * *templates) and, for the attention prologue, the attention templates and
 * the fused kernel's (bit 2). */
static void emit_templates(fc_strbuf *s, unsigned *templates, bool attention) {
    if (!(*templates & 1u)) {
        fc_cuda_emit_wgmma_helpers(s);
        fc_cuda_emit_wgmma_ss(s, SK_COLS);
        fc_strbuf_printf(s, "%s", skinny_src);
        *templates |= 1u;
    }
    if (attention && !(*templates & 2u)) {
        fc_cuda_emit_attention_templates(s, SK_COLS);
        fc_strbuf_printf(s, "%s", skinny_attention_src);
        *templates |= 2u;
    }
}

fc_status fc_cuda_emit_skinny(const fc_group *gr, const fc_skinny *k, const char *name, fc_strbuf *s, unsigned *templates,
                              fc_launch *l) {
    char d[96];
    fc_gemm_describe(gr->nodes[0], d, sizeof d);
    const int w0 = snprintf(l->summary, sizeof l->summary, "skinny %s, %lld x %lld x %lld, K in %d slices of a cluster", d,
                            (long long)k->M, (long long)k->N, (long long)k->K, k->splits);
    if (k->y_slice >= 0 && w0 > 0 && (size_t)w0 < sizeof l->summary)
        snprintf(l->summary + w0, sizeof l->summary - (size_t)w0, ", writes the %lld columns of the result", (long long)k->no);
    /* The slice's launch is left out (codegen.c): the graph result written in the padded result's place. */
    if (k->y_slice >= 0) l->args[gr->ninputs] = k->y_dst;
    emit_templates(s, templates, false);
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
    fc_strbuf_printf(s, "o0, %lld, %lld, %lld, (float)%.17g);\n", (long long)k->M, (long long)k->N, (long long)k->no, k->alpha);
    /* Compiled without sm_90a (which the rule requires): loud, never wrong. */
    fc_strbuf_printf(s, "#else\n  __trap();\n#endif\n}\n");

    fill_launch(l, name, k, SK_THREADS);
    /* fc_sk_run's dynamic shared memory: 1024 of alignment, the W and A
     * slices (128 bytes a row of depth each), the partial tiles, the
     * residual's rows this block finishes, the bias, two mbarriers. */
    const int64_t rows = (SK_ROWS + k->splits - 1) / k->splits;
    l->smem = (unsigned)(1024 + k->slice * 128 * 2 + tiles_bytes(k->splits, 1) + rows * 128 + 128 + 16);
    l->ntmaps = 2;
    /* A's boxes hold its M rows (the panel's other rows are never stored). */
    l->tmaps[0] = tmap_of(k->a, k->dtype, k->K, k->M, (uint32_t)k->M);
    l->tmaps[1] = w_tmap(k, k->w);
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

/* ---- attention and projection ---------------------------------------------- */

bool fc_cuda_skinny_attention_plan(const fc_plan *plan, int a, fc_skinny_attention *out) {
    const fc_group *ga = plan->groups[a];
    if (!fc_switch_on(FC_SW_SKINNY) || ga->kind != FC_GROUP_ATTENTION || ga->noutputs != 1 || ga->batch > 0) return false;
    const int g = fc_cuda_sole_reader(plan, ga->outputs[0]);
    if (g <= a) return false;
    const fc_group *gg = plan->groups[g];
    fc_skinny k;
    if (!fc_cuda_skinny_plan(plan, gg, &k) || gg->inputs[k.a] != ga->outputs[0] || !fc_cuda_inputs_survive(plan, a, g)) return false;
    /* The residual, bias or weight being the attention's result too: not this kernel. */
    if (k.w == k.a || k.bias == k.a || k.residual == k.a) return false;
    fc_attention_rows r;
    if (!fc_cuda_attention_rows(ga, &r) || r.dtype != k.dtype || r.head_dim != SK_PANEL || r.batch * r.seq != k.M ||
        r.heads * r.head_dim != k.K)
        return false;
    /* Heads a block: the fewest that leave at most MAX_SPLITS blocks a cluster. */
    int hpb = 0;
    for (int h = 1; h <= r.heads && !hpb; h++)
        if (r.heads % h == 0 && r.heads / h <= MAX_SPLITS) hpb = h;
    if (!hpb || fc_cuda_skinny_attention_smem(hpb, (int)(r.heads / hpb)) > 227 * 1024) return false;
    k.splits = (int)(r.heads / hpb);
    k.slice = (int64_t)hpb * SK_PANEL;
    k.y_slice = k.y_dst = -1; /* the fused kernel writes the result as the group has it */
    k.no = k.N;
    if (out) *out = (fc_skinny_attention){.gemm = k, .rows = r, .heads_per_block = hpb, .gemm_group = g};
    return true;
}

/* fc_ska_run's warpgroups: one a head, at most 4. */
static int attention_warpgroups(int heads_per_block) { return heads_per_block < 4 ? heads_per_block : 4; }

unsigned fc_cuda_skinny_attention_smem(int heads_per_block, int splits) {
    /* fc_ska_run: 1024 of alignment, W's rows (128 bytes each), Q, K and V
     * of each head (64 x 128 bytes each), each warpgroup's f32 tile, the
     * residual's rows, the bias, 1 + heads mbarriers. */
    const int rows = (SK_ROWS + splits - 1) / splits;
    return (unsigned)(1024 + heads_per_block * SK_PANEL * 128 + heads_per_block * 3 * SK_ROWS * 128 +
                      tiles_bytes(splits, attention_warpgroups(heads_per_block)) + rows * 128 + 128 + 8 * (1 + heads_per_block));
}

fc_status fc_cuda_emit_skinny_attention(const fc_group *ga, const fc_group *gg, const fc_skinny_attention *f, const char *name,
                                        fc_strbuf *s, unsigned *templates, fc_launch *l) {
    const fc_skinny *k = &f->gemm;
    const fc_attention_rows *r = &f->rows;
    char d[96];
    fc_gemm_describe(gg->nodes[0], d, sizeof d);
    const int w0 = snprintf(l->summary, sizeof l->summary, "skinny %.90s of attention%s, %lld x %lld x %lld", d,
                            r->causal ? " causal" : "", (long long)k->M, (long long)k->N, (long long)k->K);
    if (w0 > 0 && (size_t)w0 < sizeof l->summary)
        snprintf(l->summary + w0, sizeof l->summary - (size_t)w0, ", %d heads a block of %d", f->heads_per_block, k->splits);
    emit_templates(s, templates, true);

    /* Arguments: the attention group's inputs, the GEMM group's but its A
     * (computed here), the result. */
    free(l->args);
    l->args = calloc((size_t)(ga->ninputs + gg->ninputs + 1), sizeof(int));
    if (!l->args) return FC_ERR_NOMEM;
    int n = 0, op[3];
    for (int i = 0; i < ga->ninputs; i++) fc_cuda_launch_arg(l->args, &n, ga->inputs[i]);
    for (int i = 0; i < 3; i++) op[i] = fc_cuda_launch_arg(l->args, &n, ga->inputs[r->op[i].input]);
    const int w = fc_cuda_launch_arg(l->args, &n, gg->inputs[k->w]);
    const int bias = k->bias >= 0 ? fc_cuda_launch_arg(l->args, &n, gg->inputs[k->bias]) : -1;
    const int res = k->residual >= 0 ? fc_cuda_launch_arg(l->args, &n, gg->inputs[k->residual]) : -1;
    for (int i = 0; i < gg->ninputs; i++)
        if (i != k->a) fc_cuda_launch_arg(l->args, &n, gg->inputs[i]);
    l->nreads = n;
    l->args[n++] = gg->outputs[0]->id;
    l->nargs = n;

    const char *t = fc_cuda_storage_type(k->dtype);
    fc_strbuf_printf(s, "// groups %d and %d: %s\n", ga->id, gg->id, l->summary);
    const int nw = attention_warpgroups(f->heads_per_block);
    fc_strbuf_printf(s, "extern \"C\" __global__ void __cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 1) %s(", k->splits,
                     SK_THREADS * nw, name);
    for (int i = 0; i < l->nreads; i++) fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", t, i);
    fc_strbuf_printf(s, "%s *__restrict__ o0, const __grid_constant__ fc_wg_tmap tq, const __grid_constant__ fc_wg_tmap tk, "
                        "const __grid_constant__ fc_wg_tmap tv, const __grid_constant__ fc_wg_tmap tw) {\n", t);
    fc_strbuf_printf(s, "#if defined(FC_SKA_TEMPLATES)\n");
    fc_strbuf_printf(s, "  fc_ska_run<%s, %d, %d, %d, %d, %s, %s, %s, %s, %lld>(&tq, &tk, &tv, &tw, ", t, f->heads_per_block, nw, k->splits,
                     k->act, bias >= 0 ? "true" : "false", res >= 0 ? "true" : "false", k->constant_w ? "true" : "false",
                     r->causal ? "true" : "false", (long long)r->seq);
    for (int i = 0; i < 3; i++) fc_strbuf_printf(s, "make_int3(%lld, %lld, 0), ", (long long)r->op[i].col0, (long long)r->op[i].head);
    fc_strbuf_printf(s, "(float)%.17g, ", r->scale * 1.4426950408889634);
    if (bias >= 0) fc_strbuf_printf(s, "a%d, ", bias);
    else fc_strbuf_printf(s, "(const %s *)0, ", t);
    if (res >= 0) fc_strbuf_printf(s, "a%d, ", res);
    else fc_strbuf_printf(s, "(const %s *)0, ", t);
    fc_strbuf_printf(s, "o0, %lld, %lld, (float)%.17g);\n", (long long)k->M, (long long)k->N, k->alpha);
    for (int i = 0; i < l->nreads; i++) fc_strbuf_printf(s, "  (void)a%d;\n", i);
    fc_strbuf_printf(s, "#else\n  __trap();\n#endif\n}\n");

    fill_launch(l, name, k, (unsigned)(SK_THREADS * nw));
    l->smem = fc_cuda_skinny_attention_smem(f->heads_per_block, k->splits);
    /* Q, K, V: [M rows, row] matrices of their buffers, boxes of 64 rows
     * (zeros past M) by one head's 64 columns; W as the skinny GEMM's. */
    l->ntmaps = 4;
    for (int i = 0; i < 3; i++) l->tmaps[i] = tmap_of(op[i], k->dtype, r->op[i].row, k->M, SK_ROWS);
    l->tmaps[3] = w_tmap(k, w);
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

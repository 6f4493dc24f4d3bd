/* test_skinny.c - the skinny GEMMs (codegen/cuda/skinny.c: static M <= 64,
 * cluster split-K, sm_90a).
 *
 * Without a GPU: which GEMMs the rule takes and which it leaves to cuBLASLt
 * (rows, dtypes, transposes, sizes, the switch), the split it picks, the
 * launch it describes (grid, block, shared memory, tensor maps, the
 * programmatic-dependent flag), that the source compiles with NVRTC for
 * sm_90a (fc_compile), that the weights are fetched before the wait only
 * where they are the program's parameters, and that the flag survives the
 * program cache's encoding.
 *
 * On an sm 90 GPU: each case against the reference interpreter (float64
 * inside, each dtype's tolerance), run four times on new buffers each time
 * (the eager first run, the graph built at the second, patched after: the
 * tensor maps re-encoded over the new pointers), M = 1 to 64, every
 * epilogue, and the GPT-2 block at B = 1, T = 64 and T = 7.
 *
 * The GEMVs of gemv.c (M <= 8 against [N, K] weights) the same way: the
 * rule and the source here, the numbers against the reference on a GPU
 * (any, sm 80 or newer). */
#include "check.h"
#include "fusec.h"
#include "splitmix.h"
#include "codegen/cuda/attention.h"
#include "codegen/cuda/skinny.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "ir/switches.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 777;

/* Random data for parameter v: uniform in [-0.5, 0.5), or with `model`
 * (the GPT-2 block, the attention cases) as test_program's: the input (and
 * the attention's q, k, v) in [-1, 1], the norms'
 * scales near 1, weights of standard deviation 0.02 and fc_w ten times
 * smaller, biases within 0.02. With the GEMM cases' range the block's
 * outputs reach the hundreds, and with fc_w at 0.02 the last residual sum
 * cancels to where one bf16 rounding of its operands (order one) exceeds
 * the tolerance (2 of 49152 elements, on the H200). */
static void fill(fc_tensor *t, const fc_value *v, bool model) {
    t->dtype = fc_value_dtype(v);
    t->rank = fc_value_rank(v);
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= (t->shape[i] = fc_value_dim(v, i));
    t->data = calloc((size_t)n, fc_dtype_size(t->dtype));
    const char *name = v->name;
    double lo = -0.5, hi = 0.5;
    static const char *const acts[] = {"x", "qkv", "q", "k", "v", "q0", "k0", "v0"};
    bool act = false;
    for (size_t i = 0; name && i < sizeof acts / sizeof *acts; i++) act = act || !strcmp(name, acts[i]);
    if (model && act) lo = -1, hi = 1;
    else if (model && name && !strcmp(name, "fc_w")) lo = -0.00346, hi = 0.00346;
    else if (model && t->rank == 2) lo = -0.0346, hi = 0.0346;
    else if (model && name && strstr(name, "ln")) lo = strstr(name, "_w") ? 0.9 : -0.02, hi = strstr(name, "_w") ? 1.1 : 0.02;
    else if (model) lo = -0.02, hi = 0.02;
    for (int64_t i = 0; i < n; i++) {
        const float x = (float)(lo + (splitmix_uniform(&rng) + 1) * 0.5 * (hi - lo));
        if (t->dtype == FC_BOOL) ((uint8_t *)t->data)[i] = 1; /* a mask that keeps every key */
        else if (t->dtype == FC_F32) ((float *)t->data)[i] = x;
        else if (t->dtype == FC_F16) ((uint16_t *)t->data)[i] = fc_f32_to_f16(x);
        else ((uint16_t *)t->data)[i] = fc_f32_to_bf16(x);
    }
}

static fc_graph *parse(fc_context *ctx, const char *name, const char *ir) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, name, ir, strlen(ir), NULL, NULL, 0, &g) != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    return g;
}

static fc_graph *parse_gpt2(fc_context *ctx, int T) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/examples/gpt2_block_bf16.ir", src ? src : ".");
    fc_binding b[2] = {{"B", 1}, {"T", T}};
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, NULL, b, 2, &g) != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
    return g;
}

/* The skinny launches of p: how many, and each one's K split in splits[]. */
static int skinny_launches(const fc_program *p, int *splits, int max) {
    const fc_program_desc *d = fc_program_desc_of(p);
    int n = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (strncmp(l->summary, "skinny ", 7)) continue;
        const char *in = strstr(l->summary, "K in "), *of = strstr(l->summary, "a block of ");
        if (n < max) splits[n] = in ? atoi(in + 5) : of ? atoi(of + 11) : -1;
        n++;
    }
    return n;
}

static int library_launches(const fc_program *p) {
    const fc_program_desc *d = fc_program_desc_of(p);
    int n = 0;
    for (int i = 0; i < d->src.nlaunches; i++) n += d->src.launches[i].kind == FC_LAUNCH_LIBRARY;
    return n;
}

static fc_program *compile(fc_context *ctx, fc_graph *g) {
    fc_program *p = NULL;
    if (!g || fc_compile(g, NULL, &p) != FC_OK) fprintf(stderr, "compile: %s\n", fc_last_error(ctx));
    return p;
}

/* The launches of p whose summary starts with `prefix`. */
static int launches_named(const fc_program *p, const char *prefix) {
    const fc_program_desc *d = fc_program_desc_of(p);
    int n = 0;
    for (int i = 0; i < d->src.nlaunches; i++) n += !strncmp(d->src.launches[i].summary, prefix, strlen(prefix));
    return n;
}

/* 1. The GPT-2 block at B = 1, T = 64: its four GEMMs are skinny, split
 * 2, 6, 2 and 8 ways (QKV 2304 x 768; out 768 x 768 with the attention
 * inside, 2 heads a block; fc 3072 x 768, down 768 x 3072), each launch
 * described as the kernel needs it, and no attention launch of its own. */
static void test_gpt2_plan(fc_context *ctx, bool hopper) {
    fc_graph *g = parse_gpt2(ctx, 64);
    fc_program *p = compile(ctx, g);
    CHECK(p != NULL);
    if (!p) {
        fc_graph_free(g);
        return;
    }
    int s[8] = {0};
    const int n = skinny_launches(p, s, 8);
    if (!hopper) {
        CHECK_EQ_INT(n, 0);
        CHECK_EQ_INT(library_launches(p), 4);
    } else {
        CHECK_EQ_INT(n, 4);
        CHECK_EQ_INT(library_launches(p), 0);
        CHECK_EQ_INT(s[0], 2);
        CHECK_EQ_INT(s[1], 6);
        CHECK_EQ_INT(s[2], 2);
        CHECK_EQ_INT(s[3], 8);
        CHECK_EQ_INT(launches_named(p, "attention"), 0);
        /* The projection adds the residual: the block's sum is its result,
         * read by no kernel it could join, so passes/residual.c leaves the
         * sums as written and no kernel follows the down projection. */
        CHECK_EQ_INT(launches_named(p, "skinny gemm[bias,residual] -> bf16 of attention causal"), 1);
        const fc_program_desc *d = fc_program_desc_of(p);
        CHECK_EQ_INT(d->src.nlaunches, 6);
        static const unsigned grids[4] = {72, 72, 96, 96}; /* N / 64 x the split */
        int k = 0;
        for (int i = 0; i < d->src.nlaunches; i++) {
            const fc_launch *l = &d->src.launches[i];
            if (strncmp(l->summary, "skinny ", 7)) {
                CHECK(l->pdl); /* the layernorms and the attention wait too (emit.c) */
                continue;
            }
            CHECK(l->kind == FC_LAUNCH_KERNEL && l->pdl);
            CHECK_EQ_INT((int)l->block[0], strstr(l->summary, "of attention") ? 256 : 128); /* a warpgroup a head */
            if (k < 4) CHECK_EQ_INT((int)l->grid[0], (int)grids[k]);
            CHECK(l->smem > 0 && l->smem <= 232448);
            if (strstr(l->summary, "of attention")) {
                /* q, k, v: the [64, 2304] qkv buffer in boxes of 64 rows by one
                 * head's 64 columns; W: [768, 768] in boxes of 2 heads' rows. */
                CHECK_EQ_INT(l->ntmaps, 4);
                for (int m = 0; m < 3; m++) {
                    CHECK_EQ_INT((int)l->tmaps[m].dims[0], 2304);
                    CHECK_EQ_INT((int)l->tmaps[m].dims[1], 64);
                    CHECK_EQ_INT((int)l->tmaps[m].box[0], 64);
                    CHECK_EQ_INT((int)l->tmaps[m].box[1], 64);
                    CHECK_EQ_INT(l->tmaps[m].arg, l->tmaps[0].arg); /* one buffer */
                }
                CHECK_EQ_INT((int)l->tmaps[3].dims[1], 768);
                CHECK_EQ_INT((int)l->tmaps[3].box[1], 128);
                CHECK(l->tmaps[3].arg != l->tmaps[0].arg);
                /* Columns 0, 768 and 1536 of a row, 64 further a head; weights before the wait. */
                CHECK(strstr(d->src.source, "fc_ska_run<__nv_bfloat16, 2, 2, 6, 0, true, true, true, true, 64>(&tq, &tk, &tv, &tw, "
                                            "make_int3(0, 64, 0), make_int3(768, 64, 0), make_int3(1536, 64, 0)") != NULL);
                k++;
                continue;
            }
            CHECK_EQ_INT(l->ntmaps, 2);
            /* A: [M, K] in 64 x 64 boxes; W: [K, N] in 64-column boxes of the slice (or half of it). */
            CHECK_EQ_INT((int)l->tmaps[0].dims[1], 64);
            CHECK_EQ_INT((int)l->tmaps[0].box[0], 64);
            CHECK_EQ_INT((int)l->tmaps[0].box[1], 64);
            CHECK(l->tmaps[0].swizzle128 && l->tmaps[1].swizzle128);
            CHECK_EQ_INT((int)l->tmaps[1].box[0], 64);
            CHECK_EQ_INT((int)l->tmaps[1].dims[1], (int)l->tmaps[0].dims[0]); /* W's rows are A's K */
            CHECK(l->tmaps[0].arg != l->tmaps[1].arg);
            k++;
        }
        CHECK(strstr(d->src.source, "__cluster_dims__(8, 1, 1)") != NULL);
        CHECK(strstr(d->src.source, "__cluster_dims__(6, 1, 1)") != NULL);
        /* The weights are parameters: fetched before the wait. */
        CHECK(strstr(d->src.source, ", true>(&ta, &tw") != NULL && strstr(d->src.source, ", false>(&ta, &tw") == NULL);
        /* The flag travels through the program cache's encoding. */
        fc_bytes b = {0};
        CHECK_EQ_INT(fc_program_desc_encode(ctx, d, &b), FC_OK);
        fc_program_desc x;
        memset(&x, 0, sizeof x);
        CHECK_EQ_INT(fc_program_desc_decode(ctx, b.data, b.size, &x), FC_OK);
        CHECK_EQ_INT(x.src.nlaunches, d->src.nlaunches);
        for (int i = 0; i < d->src.nlaunches && i < x.src.nlaunches; i++) CHECK(x.src.launches[i].pdl == d->src.launches[i].pdl);
        fc_program_desc_release(&x);
        fc_bytes_free(&b);
    }
    fc_program_free(p);
    fc_graph_free(g);
    /* T = 65: 65 rows, cuBLASLt's. */
    g = parse_gpt2(ctx, 65);
    p = compile(ctx, g);
    CHECK(p && skinny_launches(p, s, 8) == 0 && library_launches(p) == 4);
    fc_program_free(p);
    fc_graph_free(g);
    /* FUSEC_SKINNY=0: cuBLASLt's (read at codegen), and the attention its
     * own kernel (it runs inside a skinny GEMM only). */
    setenv("FUSEC_SKINNY", "0", 1);
    g = parse_gpt2(ctx, 64);
    p = compile(ctx, g);
    CHECK(p && skinny_launches(p, s, 8) == 0 && library_launches(p) == 4);
    if (p && hopper) CHECK_EQ_INT(launches_named(p, "attention"), 1);
    unsetenv("FUSEC_SKINNY");
    fc_program_free(p);
    fc_graph_free(g);
}

/* 2. What the rule leaves to cuBLASLt, and what it takes. */
typedef struct rcase {
    const char *name, *ir;
    int splits; /* 0: not skinny; else the first skinny launch's */
    bool constant_w;
    int count; /* skinny launches where there are several (0: one) */
} rcase;
static const rcase rcases[] = {
    {"bf16 9 x 2304 x 768, bias", "graph a(%x: bf16[9, 768], %w: bf16[768, 2304], %b: bf16[2304]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 0])\n  return %y\n}\n", 2, true, 0},
    {"f16 17 x 768 x 768, bias, residual, relu", "graph b(%x: f16[17, 768], %w: f16[768, 768], %b: f16[768], %r: f16[17, 768]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=f16, spec=[0, 0, 1, 1, 1, 1])\n  return %y\n}\n", 4, true, 0},
    {"bf16 [2, 32] x 3072 x 768, gelu, scale", "graph c(%x: bf16[2, 32, 768], %w: bf16[768, 3072], %b: bf16[3072]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 2], scale=0.5)\n  return %y\n}\n", 2, true, 0},
    {"bf16 64 x 768 x 3072, bias, residual", "graph d(%x: bf16[64, 3072], %w: bf16[3072, 768], %b: bf16[768], %r: bf16[64, 768]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 0, 1, 1, 1, 0])\n  return %y\n}\n", 8, true, 0},
    {"bf16 40 x 1024 x 1024, computed weight", "graph e(%x: bf16[40, 1024], %v: f32[1024, 1024]) {\n"
     "  %w = cast(%v, to=bf16)\n  %y = matmul(%x, %w)\n  return %y\n}\n", 4, false, 0},
    {"chain: layernorm, then the GEMM", "graph ch1(%x: bf16[64, 768], %g: bf16[768], %c: bf16[768], %w: bf16[768, 2304], %b: bf16[2304]) {\n"
     "  %h = layernorm(%x, %g, %c, axis=-1, eps=1e-5)\n  %m = matmul(%h, %w)\n  %y = add(%m, %b)\n  return %y\n}\n", 2, true, 0},
    {"chain: two GEMMs, then gelu", "graph ch2(%x: bf16[64, 768], %w: bf16[768, 768], %v: bf16[768, 3072]) {\n"
     "  %m = matmul(%x, %w)\n  %n = matmul(%m, %v)\n  %y = gelu_tanh(%n)\n  %z = mul(%y, 2.0)\n  return %z\n}\n", 4, true, 2},
    {"bf16 64 x 1536 x 2048, plain", "graph f(%x: bf16[64, 2048], %w: bf16[2048, 1536]) {\n"
     "  %y = matmul(%x, %w)\n  return %y\n}\n", 8, true, 0},
    /* Not taken. */
    {"65 rows", "graph n1(%x: bf16[65, 768], %w: bf16[768, 768]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", 0, false, 0},
    {"f32", "graph n2(%x: f32[64, 768], %w: f32[768, 768]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", 0, false, 0},
    {"f32 result (autocast)", "graph n3(%x: bf16[64, 768], %w: bf16[768, 768]) {\n"
     "  %y = gemm(%x, %w, to=f32, spec=[0, 0, 1, 0, 0, 0])\n  return %y\n}\n", 0, false, 0},
    {"trans_b", "graph n4(%x: bf16[64, 768], %w: bf16[768, 768]) {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", 0, false, 0},
    {"N 800 (not a multiple of 64)", "graph n5(%x: bf16[64, 768], %w: bf16[768, 800]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", 0, false, 0},
    {"K 3136 (over 8 slices of 384)", "graph n6(%x: bf16[64, 3136], %w: bf16[3136, 768]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     0, false, 0},
    {"256 x 256 (smaller than measured)", "graph n7(%x: bf16[32, 256], %w: bf16[256, 256]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     0, false, 0},
    {"batched weight", "graph n8(%x: bf16[2, 16, 768], %w: bf16[2, 768, 768]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n", 0, false, 0},
};

static void test_rule(fc_context *ctx, bool hopper) {
    for (size_t c = 0; c < sizeof rcases / sizeof *rcases; c++) {
        const rcase *rc = &rcases[c];
        fc_graph *g = parse(ctx, rc->name, rc->ir);
        fc_program *p = compile(ctx, g);
        CHECK(p != NULL);
        if (p) {
            int s[2] = {0};
            const int n = skinny_launches(p, s, 2), want = hopper && rc->splits ? (rc->count ? rc->count : 1) : 0;
            if (n != want || (want && s[0] != rc->splits)) {
                fprintf(stderr, "%s: %d skinny launches (split %d), want %d (split %d)\n", rc->name, n, s[0], want, rc->splits);
                CHECK(false);
            }
            if (want) {
                const char *src = fc_program_desc_of(p)->src.source;
                CHECK(strstr(src, rc->constant_w ? ", true>(&ta, &tw" : ", false>(&ta, &tw") != NULL);
            }
        }
        fc_program_free(p);
        fc_graph_free(g);
    }
}

/* 3. Attention and projection: an attention op on views of one qkv
 * buffer [B, T, 3 H D] (split, reshape, permute, as GPT-2 writes it), its
 * result permuted back to [B, T, H D] and projected with a bias and a
 * residual. `how`: 0 plain; 1 a boolean mask input too; 2 the attention's
 * result also returned; 3 the same with q, k, v of their own buffers [B,
 * H, T, D] (rows of one head at a time: not the rows form); 4 qkv computed
 * by a kernel (an arena buffer) and the projection's result read by one
 * more (tanh): the memory plan may put the result where qkv was, which the
 * fused kernel still reads (fused = -1: fused exactly when they do not
 * overlap, and the case must make them overlap); 5 as 0 in f16; 6 q, k, v
 * of three buffers [B, T, H D] (three maps over three arguments); 7 qkv
 * [T, B, 3 H D] (a batch element's rows are not consecutive: not fused). */
typedef struct acase {
    const char *name;
    int B, T, H, D;
    bool causal;
    int how;
    int fused; /* heads a block when fused, 0 when not */
} acase;
static const acase acases[] = {
    {"attention 1 x 64, 12 heads, causal", 1, 64, 12, 64, true, 0, 2},
    {"attention 2 x 32, 12 heads, causal (two batch elements in the rows)", 2, 32, 12, 64, true, 0, 2},
    {"attention 1 x 7, 12 heads, not causal", 1, 7, 12, 64, false, 0, 2},
    {"attention 4 x 5, 16 heads, not causal", 4, 5, 16, 64, false, 0, 2},
    {"attention 1 x 48, 24 heads, causal (3 heads a block)", 1, 48, 24, 64, true, 0, 3},
    {"attention 1 x 64, 12 heads, causal, f16", 1, 64, 12, 64, true, 5, 2},
    {"attention 2 x 9, 16 heads, not causal, f16", 2, 9, 16, 64, false, 5, 2},
    {"attention 2 x 16, q, k, v of three buffers", 2, 16, 12, 64, true, 6, 2},
    /* Not fused. */
    {"attention with a mask input", 1, 64, 12, 64, false, 1, 0},
    {"attention result returned too", 1, 64, 12, 64, true, 2, 0},
    {"attention of head-major buffers", 1, 64, 12, 64, true, 3, 0},
    {"attention of head dim 128", 1, 64, 6, 128, true, 0, 0},
    {"attention 1 x 65 (65 rows)", 1, 65, 12, 64, true, 0, 0},
    {"attention of a [T, B, 3 H D] qkv", 2, 32, 12, 64, true, 7, 0},
    {"attention of a computed qkv, its projection's result reusing qkv's memory", 1, 64, 12, 64, true, 4, -1},
};

static void attn_ir(char *buf, size_t n, const acase *a) {
    const int B = a->B, T = a->T, H = a->H, D = a->D, W = H * D;
    const char *t = a->how == 5 ? "f16" : "bf16";
    int at = 0;
    if (a->how == 3)
        at += snprintf(buf + at, n - (size_t)at,
                       "graph sa(%%q: %s[%d, %d, %d, %d], %%k: %s[%d, %d, %d, %d], %%v: %s[%d, %d, %d, %d], ", t, B, H, T, D, t, B,
                       H, T, D, t, B, H, T, D);
    else if (a->how == 6)
        at += snprintf(buf + at, n - (size_t)at, "graph sa(%%q0: %s[%d, %d, %d], %%k0: %s[%d, %d, %d], %%v0: %s[%d, %d, %d], ", t, B,
                       T, W, t, B, T, W, t, B, T, W);
    else if (a->how == 7) at += snprintf(buf + at, n - (size_t)at, "graph sa(%%qkv: %s[%d, %d, %d], ", t, T, B, 3 * W);
    else at += snprintf(buf + at, n - (size_t)at, "graph sa(%%%s: %s[%d, %d, %d], ", a->how == 4 ? "qin" : "qkv", t, B, T, 3 * W);
    at += snprintf(buf + at, n - (size_t)at, "%%w: %s[%d, %d], %%b: %s[%d], %%r: %s[%d, %d, %d]%s) {\n", t, W, W, t, W, t, B, T, W,
                   a->how == 1 ? ", %m: bool[1, 1, 1, 1]" : "");
    if (a->how == 4) at += snprintf(buf + at, n - (size_t)at, "  %%qkv = mul(%%qin, 2.0)\n");
    if (a->how != 3) {
        if (a->how != 6)
            at += snprintf(buf + at, n - (size_t)at, "  %%q0, %%k0, %%v0 = split(%%qkv, axis=-1, sizes=[%d, %d, %d])\n", W, W, W);
        static const char *const ops[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++)
            at += snprintf(buf + at, n - (size_t)at, "  %%%s1 = reshape(%%%s0, shape=[%d, %d, %d, %d])\n  %%%s = permute(%%%s1, perm=%s)\n",
                           ops[i], ops[i], a->how == 7 ? T : B, a->how == 7 ? B : T, H, D, ops[i], ops[i],
                           a->how == 7 ? "[1, 2, 0, 3]" : "[0, 2, 1, 3]");
    }
    at += snprintf(buf + at, n - (size_t)at, "  %%a = attention(%%q, %%k, %%v%s, causal=%s)\n", a->how == 1 ? ", %m" : "",
                   a->causal ? "true" : "false");
    at += snprintf(buf + at, n - (size_t)at,
                   "  %%a1 = permute(%%a, perm=[0, 2, 1, 3])\n  %%a2 = reshape(%%a1, shape=[%d, %d, %d])\n"
                   "  %%o0 = matmul(%%a2, %%w)\n  %%o1 = add(%%o0, %%b)\n  %%y = add(%%r, %%o1)\n%s  return %%%s%s\n}\n",
                   B, T, W, a->how == 4 ? "  %z = tanh(%y)\n" : "", a->how == 4 ? "z" : "y", a->how == 2 ? ", %a2" : "");
}

/* The value id that the launch whose summary starts with `prefix` writes
 * first (-1: no such launch). */
static int written_by(const fc_program_desc *d, const char *prefix) {
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (!strncmp(l->summary, prefix, strlen(prefix)) && l->nargs > l->nreads) return l->args[l->nreads];
    }
    return -1;
}

static void test_attention_rule(fc_context *ctx, bool hopper) {
    for (size_t c = 0; c < sizeof acases / sizeof *acases; c++) {
        const acase *a = &acases[c];
        char ir[4096];
        attn_ir(ir, sizeof ir, a);
        fc_graph *g = parse(ctx, a->name, ir);
        fc_program *p = compile(ctx, g);
        CHECK(p != NULL);
        if (p) {
            const int fused = launches_named(p, a->how == 5 ? "skinny gemm[bias,residual] -> f16 of attention"
                                                            : "skinny gemm[bias,residual] -> bf16 of attention");
            bool want = hopper && a->fused;
            if (a->fused < 0) {
                /* Where the memory plan put qkv and the projection's result. */
                const fc_program_desc *d = fc_program_desc_of(p);
                const int qkv = written_by(d, "pointwise: mul"), y = written_by(d, "skinny ");
                CHECK(qkv >= 0 && y >= 0);
                if (qkv >= 0 && y >= 0) {
                    const fc_store *sq = &d->store[qkv], *sy = &d->store[y];
                    const bool overlap = sq->kind == FC_STORE_ARENA && sy->kind == FC_STORE_ARENA && sq->index < sy->index + sy->bytes && sy->index < sq->index + sq->bytes;
                    CHECK(overlap); /* else this case tests nothing */
                    want = hopper && !overlap;
                }
            }
            if (fused != (want ? 1 : 0) || launches_named(p, "attention") != (want ? 0 : 1)) {
                fprintf(stderr, "%s: %d fused launches, %d attention launches, want %d\n", a->name, fused,
                        launches_named(p, "attention"), want);
                CHECK(false);
            }
            int sp[1] = {0};
            if (want && a->fused > 0 && skinny_launches(p, sp, 1) == 1) CHECK_EQ_INT(sp[0], a->H / a->fused);
            if (want && a->fused > 0) {
                char tag[64];
                snprintf(tag, sizeof tag, "a block of %d", a->H / a->fused);
                const fc_program_desc *d = fc_program_desc_of(p);
                for (int i = 0; i < d->src.nlaunches; i++)
                    if (strstr(d->src.launches[i].summary, "of attention")) {
                        char heads[32];
                        snprintf(heads, sizeof heads, ", %d heads ", a->fused);
                        CHECK(strstr(d->src.launches[i].summary, heads) != NULL && strstr(d->src.launches[i].summary, tag) != NULL);
                        CHECK(d->src.launches[i].pdl && d->src.launches[i].ntmaps == 4);
                        const fc_tmap *m = d->src.launches[i].tmaps;
                        if (a->how == 6) CHECK(m[0].arg != m[1].arg && m[1].arg != m[2].arg && m[0].arg != m[2].arg);
                        else CHECK(m[0].arg == m[1].arg && m[1].arg == m[2].arg); /* one qkv buffer */
                    }
            }
        }
        fc_program_free(p);
        fc_graph_free(g);
    }
}

/* 4. On the GPU: each taken case and the GPT-2 block against the
 * reference, four runs on new device buffers each. */
/* want_edges >= 0: the programmatic edges p's graph must have after the
 * runs (4 for the GPT-2 block: one into each of its skinny GEMMs). */
static void run_case(fc_context *ctx, fc_cuda_device *dev, const char *name, fc_graph *g, bool model, int want_edges) {
    fc_program *p = compile(ctx, g);
    CHECK(p != NULL);
    if (!p) return;
    const int nin = g->nparams, nout = g->noutputs;
    fc_tensor in[16] = {{0}}, want[4] = {{0}};
    for (int k = 0; k < nin; k++) fill(&in[k], g->params[k], model);
    CHECK_EQ_INT(fc_run_reference(g, in, nin, want, nout), FC_OK);
    for (int r = 0; r < 4; r++) {
        CUdeviceptr din[16] = {0}, dout[4] = {0};
        void *ip[16], *op[4];
        fc_status st = FC_OK;
        for (int k = 0; k < nin && !st; k++) {
            const size_t bytes = (size_t)fc_tensor_numel(&in[k]) * fc_dtype_size(in[k].dtype);
            st = fc_cuda_alloc(dev, bytes, &din[k]);
            if (!st) st = fc_cuda_upload(dev, din[k], in[k].data, bytes);
            ip[k] = (void *)(uintptr_t)din[k];
        }
        for (int k = 0; k < nout && !st; k++) {
            st = fc_cuda_alloc(dev, (size_t)fc_tensor_numel(&want[k]) * fc_dtype_size(want[k].dtype), &dout[k]);
            op[k] = (void *)(uintptr_t)dout[k];
        }
        if (!st) st = fc_run(p, ip, nin, op, nout, NULL);
        if (!st) st = fc_cuda_device_sync(dev); /* fc_run only queues the work */
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s: run %d: %s\n", name, r, fc_last_error(ctx));
        for (int k = 0; k < nout && !st; k++) {
            fc_tensor got = want[k];
            const size_t bytes = (size_t)fc_tensor_numel(&want[k]) * fc_dtype_size(want[k].dtype);
            got.data = malloc(bytes);
            st = fc_cuda_download(dev, got.data, dout[k], bytes);
            fc_output_diff d;
            if (!st && fc_compare_outputs(ctx, &got, &want[k], 1, &d) != FC_OK) {
                char line[512];
                fprintf(stderr, "%s: run %d: %s\n", name, r, fc_output_diff_format(&d, k, line, sizeof line));
                CHECK(false);
            }
            free(got.data);
        }
        for (int k = 0; k < nin; k++) fc_cuda_free(dev, din[k]);
        for (int k = 0; k < nout; k++) fc_cuda_free(dev, dout[k]);
    }
    if (want_edges >= 0 && fc_program_programmatic_edges(p) != want_edges) {
        fprintf(stderr, "%s: %d programmatic edges, want %d\n", name, fc_program_programmatic_edges(p), want_edges);
        CHECK(false);
    }
    for (int k = 0; k < nin; k++) free(in[k].data);
    for (int k = 0; k < nout; k++) fc_tensor_release(&want[k]);
    fc_program_free(p);
}

/* 5. GEMVs (codegen/cuda/gemv.c): M <= 8 rows against weights stored [N,
 * K] (trans_b): one weight or sibling weights (their results
 * concatenated), a bias each, a residual, relu and gelu_tanh, N not a
 * multiple of the 16 columns a block computes, the matmul of a permuted
 * weight (the epilogue pass makes it trans_b); Llama-1B's projections
 * (QKV 3072 x 2048, o and down 2048 x 2048 and 2048 x 8192), whose few
 * blocks split K between their warps; and against weights [K, N] (GPT-2's
 * QKV, out, MLP up and down projections at M 1; M 2 and 8 stay skinny), split over a
 * cluster, an odd N and K, a tiny one, a weight cast at load (loaded before
 * the wait) and a computed one (after it); the padding pass's GEMV forms
 * (odd K of [N, K], odd N of [K, N]: the weight padded at load).
 * Without a GPU, the rule (and what it leaves to the skinny GEMMs and
 * cuBLASLt), the split, the grid, and that the source compiles; on one,
 * each against the reference. */
typedef struct gvcase {
    const char *name, *ir;
    bool gemv;     /* the rule takes it */
    int splits;    /* the K split it picks (1: none) */
    bool computed; /* [K, N]: the weight is computed, loaded after the wait */
} gvcase;
#define GV_NK(name, M, N, K) "graph " name "(%x: bf16[" #M ", " #K "], %w: bf16[" #N ", " #K "]"
#define GV_KN(name, T, M, N, K) "graph " name "(%x: " T "[" #M ", " #K "], %w: " T "[" #K ", " #N "]"
#define GV_GATE(name, T, M, F, K)                                                                                              \
    "graph " name "(%x: " T "[" #M ", " #K "], %a: " T "[" #F ", " #K "], %b: " T "[" #F ", " #K "]) {\n"                        \
    "  %at = permute(%a, perm=[1, 0])\n  %g = matmul(%x, %at)\n  %bt = permute(%b, perm=[1, 0])\n  %u = matmul(%x, %bt)\n" \
    "  %s = silu(%g)\n  %y = mul(%s, %u)\n  return %y\n}\n"
static const gvcase gvcases[] = {
    {"gemv bf16 1 x 3072 x 2048", GV_NK("g1", 1, 3072, 2048) ") {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", true, 4, false},
    {"gemv f16 3 x 1000 x 512, bias, gelu", "graph g2(%x: f16[3, 512], %w: f16[1000, 512], %b: f16[1000]) {\n"
     "  %y = gemm(%x, %w, %b, to=f16, spec=[0, 1, 1, 1, 0, 2])\n  return %y\n}\n", true, 8, false},
    {"gemv bf16 8 x (512 + 128 + 130) x 256, siblings", "graph g3(%x: bf16[8, 256], %a: bf16[512, 256], %b: bf16[128, 256], "
     "%c: bf16[130, 256]) {\n  %y = gemm(%x, %a, %b, %c, to=bf16, spec=[0, 1, 3, 0, 0, 0])\n  return %y\n}\n", true, 8, false},
    {"gemv bf16 2 x 768 x 768, residual, scale", "graph g4(%x: bf16[2, 768], %w: bf16[768, 768], %r: bf16[2, 768]) {\n"
     "  %y = gemm(%x, %w, %r, to=bf16, spec=[0, 1, 1, 0, 1, 0], scale=0.5)\n  return %y\n}\n", true, 1, false},
    {"gemv bf16 4 x (256 + 256) x 512, siblings with biases, relu", "graph g5(%x: bf16[4, 512], %a: bf16[256, 512], "
     "%b: bf16[256, 512], %p: bf16[256], %q: bf16[256]) {\n"
     "  %y = gemm(%x, %a, %b, %p, %q, to=bf16, spec=[0, 1, 2, 1, 0, 1])\n  return %y\n}\n", true, 8, false},
    {"gemv bf16 [1, 1] x 1024 x 1024, permuted weight", "graph g6(%x: bf16[1, 1, 1024], %w: bf16[1024, 1024]) {\n"
     "  %t = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %t)\n  return %y\n}\n", true, 2, false},
    /* Llama-1B's decode projections: split between a block's warps, two or
     * more 256-element steps a warp; on tensor cores (3 rows and more) 16
     * warps where 8-warp blocks would be fewer than two a SM. */
    {"gemv bf16 1 x 2048 x 8192 (down)", GV_NK("g10", 1, 2048, 8192) ") {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", true, 8, false},
    {"gemv bf16 8 x 2048 x 2048, residual (o)", GV_NK("g11", 8, 2048, 2048) ", %r: bf16[8, 2048]) {\n"
     "  %y = gemm(%x, %w, %r, to=bf16, spec=[0, 1, 1, 0, 1, 0])\n  return %y\n}\n", true, 16, false},
    {"gemv bf16 8 x 3072 x 8192, bias, gelu", GV_NK("g12", 8, 3072, 8192) ", %b: bf16[3072]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 1, 1, 1, 0, 2])\n  return %y\n}\n", true, 16, false},
    {"gemv bf16 8 x 2050 x 2048, odd N, bias, residual", GV_NK("g13", 8, 2050, 2048) ", %b: bf16[2050], %r: bf16[8, 2050]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 1, 1, 1, 1, 0])\n  return %y\n}\n", true, 16, false},
    {"gemv bf16 1 x 16384 x 2048 (gate and up)", GV_NK("g14", 1, 16384, 2048) ") {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", true, 4, false},
    /* A SwiGLU gate in the gate and up GEMV's epilogue: the pointwise
     * group gets no launch of its own (launches_named counts one GEMV and
     * the test below that it is the program's one kernel). */
    {"gemv bf16 1 x (8192 + 8192) x 2048, SiLU gate", GV_GATE("g17", "bf16", 1, 8192, 2048), true, 4, false},
    {"gemv f16 8 x (1004 + 1004) x 512, SiLU gate", GV_GATE("g18", "f16", 8, 1004, 512), true, 8, false},
    {"gemv bf16 2 x (1004 + 1004) x 1024, SiLU gate", GV_GATE("g19", "bf16", 2, 1004, 1024), true, 2, false},
    /* Weights [K, N] (GPT-2's Conv1D): a cluster splits K. */
    {"gemv [K, N] bf16 1 x 2304 x 768, bias (QKV)", GV_KN("k1", "bf16", 1, 2304, 768) ", %b: bf16[2304]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 0])\n  return %y\n}\n", true, 4, false},
    {"gemv [K, N] bf16 1 x 768 x 768, bias, residual (out)", GV_KN("k3", "bf16", 1, 768, 768) ", %b: bf16[768], %r: bf16[1, 768]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 0, 1, 1, 1, 0])\n  return %y\n}\n", true, 8, false},
    {"gemv [K, N] bf16 1 x 3072 x 768, bias, gelu (up)", GV_KN("k4", "bf16", 1, 3072, 768) ", %b: bf16[3072]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 2])\n  return %y\n}\n", true, 4, false},
    {"gemv [K, N] f16 1 x 3072 x 768, bias, gelu, scale", GV_KN("k5", "f16", 1, 3072, 768) ", %b: f16[3072]) {\n"
     "  %y = gemm(%x, %w, %b, to=f16, spec=[0, 0, 1, 1, 0, 2], scale=0.5)\n  return %y\n}\n", true, 4, false},
    {"gemv [K, N] bf16 1 x 768 x 3072, bias, residual (down)", GV_KN("k6", "bf16", 1, 768, 3072) ", %b: bf16[768], %r: bf16[1, 768]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 0, 1, 1, 1, 0])\n  return %y\n}\n", true, 8, false},
    {"gemv [K, N] bf16 1 x 771 x 767, odd N and K, bias, residual, relu", GV_KN("k8", "bf16", 1, 771, 767) ", %b: bf16[771], "
     "%r: bf16[1, 771]) {\n  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 0, 1, 1, 1, 1])\n  return %y\n}\n", true, 8, false},
    {"gemv [K, N] bf16 1 x 100 x 200, tiny", GV_KN("k9", "bf16", 1, 100, 200) ") {\n  %y = matmul(%x, %w)\n  return %y\n}\n", true, 2,
     false},
    /* A weight computed at load (a cast of a parameter) is constant too:
     * loaded before the wait; one computed at every run after it. */
    {"gemv [K, N] bf16 [1, 1] x 1024 x 1024, weight cast at load", "graph k10(%x: bf16[1, 1, 1024], %v: f32[1024, 1024]) {\n"
     "  %w = cast(%v, to=bf16)\n  %y = matmul(%x, %w)\n  return %y\n}\n", true, 8, false},
    {"gemv [K, N] bf16 [1, 1] x 1024 x 1024, computed weight", "graph k11(%x: bf16[1, 1, 1024], %v: f32[1024, 1024]) {\n"
     "  %w = cast(%v, to=bf16)\n  %y = matmul(%x, %w)\n  return %y, %w\n}\n", true, 8, true},
    /* Unaligned, through the padding pass's GEMV form (passes/pad.c): the
     * weight padded at load, x's rows staged with their zeros by the
     * kernel ([N, K], odd K), the result written unpadded ([K, N], odd N). */
    {"gemv bf16 1 x 50257 x 767, odd K padded", GV_NK("g15", 1, 50257, 767) ") {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", true, 1, false},
    {"gemv bf16 8 x 16384 x 767, odd K padded, bias", GV_NK("g16", 8, 16384, 767) ", %b: bf16[16384]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 1, 1, 1, 0, 0])\n  return %y\n}\n", true, 8, false},
    {"gemv [K, N] bf16 1 x 16385 x 768, odd N padded, bias", GV_KN("k12", "bf16", 1, 16385, 768) ", %b: bf16[16385]) {\n"
     "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 0])\n  return %y\n}\n", true, 2, false},
    /* Not taken. */
    {"not gemv: M 9", "graph g7(%x: bf16[9, 1024], %w: bf16[1024, 1024]) {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", false, 0, false},
    {"not gemv: K 320", "graph g8(%x: bf16[1, 320], %w: bf16[1024, 320]) {\n"
     "  %y = gemm(%x, %w, to=bf16, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", false, 0, false},
    {"not gemv: f32", "graph g9(%x: f32[1, 1024], %w: f32[1024, 1024]) {\n"
     "  %y = gemm(%x, %w, to=f32, spec=[0, 1, 1, 0, 0, 0])\n  return %y\n}\n", false, 0, false},
    {"not gemv: [K, N], M 2 (skinny)", GV_KN("n10", "bf16", 2, 768, 768) ") {\n  %y = matmul(%x, %w)\n  return %y\n}\n", false, 0,
     false},
    {"not gemv: [K, N], M 8 (skinny)", GV_KN("n12", "bf16", 8, 768, 3072) ", %b: bf16[768], %r: bf16[8, 768]) {\n"
     "  %y = gemm(%x, %w, %b, %r, to=bf16, spec=[0, 0, 1, 1, 1, 0])\n  return %y\n}\n", false, 0, false},
    {"not gemv: [K, N], K 8192 (16 rows a thread)", GV_KN("n11", "bf16", 1, 768, 8192) ") {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     false, 0, false},
};

static void test_gemv(fc_context *ctx, fc_cuda_device *dev) {
    const bool on = fc_switch_on(FC_SW_SKINNY);
    for (size_t c = 0; c < sizeof gvcases / sizeof *gvcases; c++) {
        const gvcase *gc = &gvcases[c];
        fc_graph *g = parse(ctx, gc->name, gc->ir);
        fc_program *p = compile(ctx, g);
        CHECK(p != NULL);
        const int n = p ? launches_named(p, "gemv ") : -1, want = gc->gemv && on;
        if (p && n != want) {
            fprintf(stderr, "%s: %d gemv launches, want %d\n", gc->name, n, want);
            CHECK(false);
        }
        if (p && want) {
            const fc_program_desc *d = fc_program_desc_of(p);
            const bool kn = strstr(gc->name, "[K, N]") != NULL;
            for (int i = 0; i < d->src.nlaunches; i++) {
                const fc_launch *l = &d->src.launches[i];
                if (strncmp(l->summary, "gemv ", 5)) continue;
                CHECK(l->pdl);
                const char *in = strstr(l->summary, "K in ");
                const int splits = in ? atoi(in + 5) : 1;
                CHECK_EQ_INT((int)l->block[0], strstr(l->summary, "on tensor cores") ? 32 * splits : 256);
                if (splits != gc->splits) {
                    fprintf(stderr, "%s: %s, want %d slices\n", gc->name, l->summary, gc->splits);
                    CHECK(false);
                }
                CHECK(!in || strstr(l->summary, kn ? "of a cluster" : "of a block's warps") != NULL);
                /* Columns a block: 32 for [K, N] (times the cluster), 16 / splits for [N, K], 16 on tensor cores
                 * (from 3 rows, K in 8 or 16 slices). */
                const char *x = strstr(l->summary, " x "), *to = strstr(l->summary, "-> ");
                const long long N = x ? atoll(x + 3) : 0, M = to && strchr(to, ',') ? atoll(strchr(to, ',') + 2) : 0;
                const bool tc = !kn && M >= 3;
                CHECK((strstr(l->summary, "on tensor cores") != NULL) == tc);
                const long long grid = kn ? (N + 31) / 32 * gc->splits : tc ? (N + 15) / 16 : (N + 16 / gc->splits - 1) / (16 / gc->splits);
                CHECK_EQ_INT((int)l->grid[0], (int)grid);
            }
            if (strstr(gc->name, "SiLU gate")) {
                /* The GEMV is the program's one kernel, the gate in its epilogue. */
                int kernels = 0;
                for (int i = 0; i < d->src.nlaunches; i++) kernels += d->src.launches[i].kind == FC_LAUNCH_KERNEL;
                CHECK_EQ_INT(kernels, 1);
                CHECK(strstr(d->src.launches[0].summary, "sigmoid,mul,cast,mul of its halves") != NULL);
            }
            if (strstr(gc->name, "padded")) {
                /* The GEMV the one kernel of every run, the pad of x or the result's compaction inside it. */
                int per_run = 0;
                bool around = false;
                for (int i = 0; i < d->src.nlaunches; i++) {
                    const fc_launch *l = &d->src.launches[i];
                    per_run += l->kind == FC_LAUNCH_KERNEL && !l->loadtime;
                    around = around || strstr(l->summary, kn ? "writes the 16385 columns" : "padded inside");
                }
                CHECK_EQ_INT(per_run, 1);
                CHECK(around);
            }
            char cl[48];
            snprintf(cl, sizeof cl, "__cluster_dims__(%d, 1, 1)", gc->splits);
            CHECK((strstr(d->src.source, cl) != NULL) == (kn && gc->splits > 1));
            if (strstr(d->src.source, "uint4 w[U][2];")) {
                /* On tensor cores: the parameters' first weights loaded before the wait. */
                const char *w = strstr(d->src.source, "uint4 w[U][2];"), *wait = w ? strstr(w, "griddepcontrol.wait") : NULL;
                const char *ld = w ? strstr(w, "fc_gv_load8(wr") : NULL;
                CHECK(wait && ld && ld < wait);
            } else if (!kn) {
                /* On CUDA cores: at 2 rows the parameters' first weight steps
                 * loaded into registers before the wait, at 1 row nothing (both
                 * measured on the H200, docs/GEMM.md); no L2 prefetch. */
                const char *k0 = strstr(d->src.source, "uint4 wp[PU][2]");
                const bool two = strstr(gc->name, " 2 x ") != NULL;
                CHECK((k0 != NULL) == two);
                if (k0) {
                    const char *w = strstr(k0, "griddepcontrol.wait"), *ld = strstr(k0, "fc_gv_load8(wr");
                    CHECK(w && ld && ld < w);
                    CHECK(strstr(d->src.source, "enum { PU = SPW < 4 ? SPW : 4 };") != NULL);
                } else {
                    /* One flag for both streams' alignment, as the loop was measured. */
                    CHECK(strstr(d->src.source, "const bool al = ") != NULL);
                }
                CHECK(strstr(d->src.source, "prefetch.global") == NULL);
            } else {
                /* Parameters' weights loaded before the wait, a computed one after it. */
                const char *w = strstr(d->src.source, "uint4 w[R];");
                CHECK(w != NULL);
                if (w) CHECK((strstr(w, "griddepcontrol.wait") != NULL) == !gc->computed);
            }
        }
        fc_program_free(p);
        if (g && dev && want) run_case(ctx, dev, gc->name, g, false, -1);
        fc_graph_free(g);
    }
}

int main(void) {
    fc_context *ctx = fc_context_new();
    /* What fc_compile targets here: the device's, or sm 90 without one. */
    fc_cuda_device *dev = NULL;
    const bool gpu = fc_cuda_available(ctx) && fc_cuda_device_open(ctx, 0, &dev) == FC_OK;
    const bool sm90 = !gpu || (dev->info.cc_major == 9 && dev->info.cc_minor == 0);
    const bool hopper = sm90 && fc_cuda_attention_hopper(90) && fc_switch_on(FC_SW_SKINNY);
    test_gpt2_plan(ctx, hopper);
    test_rule(ctx, hopper);
    test_attention_rule(ctx, hopper);
    test_gemv(ctx, gpu ? dev : NULL);
    if (!gpu) printf("skipped: no CUDA device; the plans and the sources only\n");
    else if (!hopper) printf("skipped: not an sm 90 device with sm_90a; the plans only\n");
    else {
        for (size_t c = 0; c < sizeof rcases / sizeof *rcases; c++) {
            if (!rcases[c].splits) continue;
            fc_graph *g = parse(ctx, rcases[c].name, rcases[c].ir);
            if (g) run_case(ctx, dev, rcases[c].name, g, false, -1);
            fc_graph_free(g);
        }
        for (size_t c = 0; c < sizeof acases / sizeof *acases; c++) {
            char ir[4096];
            attn_ir(ir, sizeof ir, &acases[c]);
            fc_graph *g = parse(ctx, acases[c].name, ir);
            if (g) run_case(ctx, dev, acases[c].name, g, true, -1); /* GPT-2's scales (fill) */
            fc_graph_free(g);
        }
        static const int Ts[2] = {64, 7};
        for (int t = 0; t < 2; t++) {
            fc_graph *g = parse_gpt2(ctx, Ts[t]);
            /* Six kernels (two layernorms, four skinny GEMMs, the attention
             * inside the second), every one a programmatic dependent: each
             * after the first joins the one before by a programmatic edge,
             * 5 (none without graphs). */
            if (g) run_case(ctx, dev, Ts[t] == 64 ? "gpt2 B=1 T=64" : "gpt2 B=1 T=7", g, true,
                             !fc_switch_on(FC_SW_CUDA_GRAPHS) ? 0 : 5);
            fc_graph_free(g);
        }
    }
    if (dev) fc_cuda_device_close(dev);
    fc_context_free(ctx);
    return check_report("test_skinny");
}

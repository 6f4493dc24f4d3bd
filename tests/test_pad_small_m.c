/* test_pad_small_m.c - what the padding pass (passes/pad.c) does with the
 * GEMMs of few rows (decode, batch 1: the skinny kernels' range) and with a
 * dynamic variant's generated GEMMs, at the unaligned sizes of real models
 * (docs/GEMM.md, "Unaligned shapes": "Few rows, and dynamic plans").
 *
 * Plans for sm 90 through the whole pipeline (fc_pipeline, its default
 * rule) and the CUDA code generator; no GPU needed:
 *  1. The LM head at M = 1 and 8, x @ W^T and x @ W, at every vocabulary
 *     of the sweep (50257, 32001, 30522, 49408, 151936, 128257; K 768):
 *     x @ W^T the GEMV, unpadded (it takes any N); x @ W at M = 1 the
 *     [K, N] GEMV, its weight padded at load to N a multiple of 8 where it
 *     is not, the kernel writing the unpadded result (no compaction); at
 *     M = 8 the skinny kernel where N is a multiple of 64 (151936), else
 *     cuBLASLt, on a weight padded at load by a zero block where N is
 *     unaligned (and the result compacted: 0.8 MB).
 *  1b. x @ W^T with an odd K (767) at M = 1 and 8: the weight padded at
 *     load to K 768, the GEMV staging x's rows with the zeros itself (no
 *     copy kernel per run); with x written by a kernel, that kernel writes
 *     the padded rows. The sources compile with NVRTC.
 *  2. An odd K (767) written by a kernel: at M = 8 and 64 padded to 768
 *     (the kernel writes the zero columns, the weight is padded at load),
 *     which makes it a skinny GEMM of K 768; at M = 1 the [K, N] GEMV.
 *  2b. x @ W with an odd K and a vocabulary N (odd or not) at M = 1 to
 *     64: at M = 1 the [K, N] GEMV (N padded at load where odd); from
 *     M = 2 K and N padded (the kernel writing x writes the zero columns,
 *     the weight padded at load), the skinny kernel where N_p is whole
 *     64-column tiles, writing the N columns of the graph's result itself,
 *     else cuBLASLt aligned, its result compacted by a kernel when the
 *     graph returns it and read in place by a kernel that reads it. The
 *     result keeps its logical shape; the sources compile with NVRTC.
 *  3. A dynamic plan (M symbolic) with an odd K and a vocabulary N: not
 *     padded (the pass runs on static plans); its GEMM is a generated tile
 *     kernel whose unit compiles with NVRTC for sm_90a.
 * The sizes where the rule's answers are measured: bench/gemm_sweep.sh.
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gemm_choice.h"
#include "fusec.h"
#include "ir.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct small_plan {
    int kernels, library, loadtime;
    int64_t out_n;     /* the graph's first result's last dim */
    fc_gemm_path path; /* the one GEMM's */
    char summary[160]; /* the GEMM launch's */
} small_plan;

/* Plan text for sm 90 and what it holds; false when it could not be made. */
static bool plan_of(fc_context *ctx, const char *what, const char *text, bool dynamic, small_plan *sp, char **source) {
    memset(sp, 0, sizeof *sp);
    sp->path = FC_GEMM_NONE;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.dynamic = dynamic;
    fc_graph *g = NULL;
    fc_plan plan;
    fc_status st = fc_parse(ctx, what, text, strlen(text), NULL, NULL, 0, &g);
    if (!st) st = fc_pipeline(g, &fo, &plan);
    CHECK_EQ_INT(st, FC_OK);
    if (st) fprintf(stderr, "%s: %s\n", what, fc_last_error(ctx));
    fc_cuda_src src = {0};
    if (!st) {
        plan.sm = 90;
        plan.sm_count = 132;
        const fc_value *o = plan.g->outputs[0];
        sp->out_n = o->dims[o->rank - 1];
        int ngemm = 0;
        for (int i = 0; i < plan.ngroups; i++) {
            fc_gemm_choice c;
            fc_cuda_gemm_choose(&plan, i, &c);
            if (c.path == FC_GEMM_NONE) continue;
            sp->path = c.path;
            ngemm++;
        }
        CHECK_EQ_INT(ngemm, 1);
        st = fc_cuda_codegen(&plan, &src);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s: %s\n", what, fc_last_error(ctx));
        fc_plan_release(&plan);
    }
    for (int i = 0; !st && i < src.nlaunches; i++) {
        const fc_launch *l = &src.launches[i];
        if (l->kind == FC_LAUNCH_KERNEL) sp->kernels++;
        if (l->kind == FC_LAUNCH_LIBRARY) sp->library++;
        if (l->loadtime) sp->loadtime++;
        if (l->kind == FC_LAUNCH_LIBRARY || strstr(l->summary, "gemm"))
            snprintf(sp->summary, sizeof sp->summary, "%s", l->summary);
    }
    if (source && !st) {
        *source = src.source;
        src.source = NULL;
    }
    fc_cuda_src_release(&src);
    fc_graph_free(g);
    return st == FC_OK;
}

static const int vocab[] = {50257, 32001, 30522, 49408, 151936, 128257};

static void test_lm_head(fc_context *ctx) {
    static const int rows[] = {1, 8};
    for (size_t m = 0; m < sizeof rows / sizeof *rows; m++)
        for (size_t v = 0; v < sizeof vocab / sizeof *vocab; v++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = rows[m], N = vocab[v];
                char text[512], what[96];
                if (tb)
                    snprintf(text, sizeof text,
                             "graph h(%%x: bf16[%d, 768], %%w: bf16[%d, 768]) {\n  %%wt = permute(%%w, perm=[1, 0])\n"
                             "  %%y = matmul(%%x, %%wt)\n  return %%y\n}\n", M, N);
                else
                    snprintf(text, sizeof text, "graph h(%%x: bf16[%d, 768], %%w: bf16[768, %d]) {\n  %%y = matmul(%%x, %%w)\n  return %%y\n}\n",
                             M, N);
                snprintf(what, sizeof what, "LM head %s, M %d, N %d", tb ? "x @ W^T" : "x @ W", M, N);
                small_plan sp;
                if (!plan_of(ctx, what, text, false, &sp, NULL)) continue;
                /* x @ W^T (weights [N, K], K = 768 a multiple of 256)
                 * and x @ W (weights [K, N]) at M = 1: the GEMV kernel;
                 * x @ W at more rows: the skinny kernel where N is whole
                 * 64-column tiles, at most 8192 of them (a vocabulary's
                 * width runs faster in cuBLASLt); else cuBLASLt. */
                const bool gemv = tb || M == 1, skinny = !gemv && N % 64 == 0 && N <= 8192;
                const fc_gemm_path want = skinny ? FC_GEMM_SKINNY : gemv ? FC_GEMM_GEMV : FC_GEMM_LIBRARY;
                /* x @ W with N unaligned: the weight padded at load; the
                 * [K, N] GEMV writes the N columns itself, cuBLASLt's
                 * result is compacted by a kernel. Else the GEMM alone. */
                const bool pad = !tb && N % 8 && !skinny;
                const bool own = want != FC_GEMM_LIBRARY;
                char cols[64];
                snprintf(cols, sizeof cols, "writes the %d columns of the result", N);
                const int kernels = (own ? 1 : 0) + (pad ? 1 : 0) + (pad && !own ? 1 : 0);
                const bool ok = sp.kernels == kernels && sp.library == (own ? 0 : 1) && sp.loadtime == (pad ? 1 : 0) &&
                                sp.path == want && (!pad || !own || strstr(sp.summary, cols));
                if (!ok)
                    fprintf(stderr, "%s: %d kernels, %d calls, %d at load, path %d (%s)\n", what, sp.kernels, sp.library, sp.loadtime,
                            (int)sp.path, sp.summary);
                CHECK(ok);
            }
}

static void test_odd_k(fc_context *ctx) {
    static const char fmt[] = "graph k(%%x: bf16[%d, 767], %%w: bf16[767, 2304]) {\n  %%r = relu(%%x)\n"
                              "  %%y = matmul(%%r, %%w)\n  return %%y\n}\n";
    char text[256];
    small_plan sp;
    snprintf(text, sizeof text, fmt, 64);
    if (plan_of(ctx, "odd K, M 64", text, false, &sp, NULL)) {
        /* relu writes the padded rows (one kernel), the weight is padded at load, the GEMM is skinny at K 768. */
        CHECK_EQ_INT(sp.path, FC_GEMM_SKINNY);
        CHECK_EQ_INT(sp.kernels, 3);
        CHECK_EQ_INT(sp.library, 0);
        CHECK_EQ_INT(sp.loadtime, 1);
        CHECK(strstr(sp.summary, "64 x 2304 x 768") != NULL);
        if (!strstr(sp.summary, "64 x 2304 x 768")) fprintf(stderr, "odd K, M 64: '%s'\n", sp.summary);
    }
    snprintf(text, sizeof text, fmt, 8);
    if (plan_of(ctx, "odd K, M 8", text, false, &sp, NULL)) {
        /* As at M = 64: cuBLASLt's unaligned [K, N] kernels stream 3x slower (passes/pad.c). */
        CHECK_EQ_INT(sp.path, FC_GEMM_SKINNY);
        CHECK_EQ_INT(sp.kernels, 3);
        CHECK_EQ_INT(sp.library, 0);
        CHECK_EQ_INT(sp.loadtime, 1);
        CHECK(strstr(sp.summary, "8 x 2304 x 768") != NULL);
    }
    snprintf(text, sizeof text, fmt, 1);
    if (plan_of(ctx, "odd K, M 1", text, false, &sp, NULL)) {
        /* The GEMV of [K, N] weights takes any K: nothing padded. */
        CHECK_EQ_INT(sp.path, FC_GEMM_GEMV);
        CHECK_EQ_INT(sp.kernels, 2); /* relu, the GEMV */
        CHECK_EQ_INT(sp.library, 0);
        CHECK_EQ_INT(sp.loadtime, 0);
    }
}

/* source compiled by NVRTC for sm_90a, as the program would. */
static void nvrtc_compiles(fc_context *ctx, const char *what, const char *source) {
    const char *extra[8];
    const int nextra = fc_program_extra_nvrtc_options(90, false, extra);
    fc_bytes cubin = {0};
    fc_status st = source ? fc_nvrtc_compile(ctx, source, "pad_gemv.cu", 9, 0, extra, nextra, &cubin) : FC_ERR_INPUT;
    if (st) fprintf(stderr, "%s: NVRTC: %s\n", what, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_bytes_free(&cubin);
}

static void test_odd_k_gemv(fc_context *ctx) {
    static const int rows[] = {1, 8};
    for (size_t m = 0; m < sizeof rows / sizeof *rows; m++)
        for (int relu = 0; relu < 2; relu++) {
            char text[512], what[96];
            snprintf(text, sizeof text,
                     "graph o(%%x: bf16[%d, 767], %%w: bf16[50257, 767]) {\n%s  %%wt = permute(%%w, perm=[1, 0])\n"
                     "  %%y = matmul(%s, %%wt)\n  return %%y\n}\n",
                     rows[m], relu ? "  %r = relu(%x)\n" : "", relu ? "%r" : "%x");
            snprintf(what, sizeof what, "x @ W^T, K 767, M %d%s", rows[m], relu ? ", x from relu" : "");
            small_plan sp;
            char *source = NULL;
            if (!plan_of(ctx, what, text, false, &sp, &source)) continue;
            char shape[64];
            snprintf(shape, sizeof shape, "%d x 50257 x 768", rows[m]);
            /* The weight's pad at load, the GEMV at K 768 (and relu writing the padded rows). */
            const bool inside = strstr(sp.summary, "A's rows of 767 padded inside") != NULL;
            const bool ok = sp.path == FC_GEMM_GEMV && sp.kernels == 2 + relu && sp.library == 0 && sp.loadtime == 1 &&
                            strstr(sp.summary, shape) && inside == !relu;
            if (!ok)
                fprintf(stderr, "%s: %d kernels, %d calls, %d at load, path %d (%s)\n", what, sp.kernels, sp.library, sp.loadtime,
                        (int)sp.path, sp.summary);
            CHECK(ok);
            nvrtc_compiles(ctx, what, source);
            free(source);
        }
    /* The [K, N] GEMV writing the unpadded result of a padded weight. */
    small_plan sp;
    char *source = NULL;
    if (plan_of(ctx, "x @ W, M 1, N 50257",
                "graph n(%x: bf16[1, 768], %w: bf16[768, 50257], %b: bf16[50257]) {\n  %h = matmul(%x, %w)\n"
                "  %y = add(%h, %b)\n  return %y\n}\n",
                false, &sp, &source)) {
        CHECK_EQ_INT(sp.path, FC_GEMM_GEMV);
        CHECK_EQ_INT(sp.loadtime, 2); /* the weight and the bias padded, each at load */
        CHECK_EQ_INT(sp.kernels, 3);
        CHECK(strstr(sp.summary, "1 x 50264 x 768") && strstr(sp.summary, "writes the 50257 columns"));
        nvrtc_compiles(ctx, "x @ W, M 1, N 50257", source);
        free(source);
    }
}

/* x @ W, K 767, at few rows and vocabulary sizes: the shapes whose
 * unaligned cuBLASLt kernels streamed 3x slower than the aligned shape's
 * (bench/gemm_sweep.sh: 8 x 32001 x 767 and 8 x 30522 x 767, left unpadded
 * by a rule that priced them at 1.5x). x from relu (which writes the padded
 * rows); the result returned (tail 0) or read by a softmax (tail 1). */
static void test_odd_k_kn(fc_context *ctx) {
    static const int rows[] = {1, 2, 3, 8, 16, 64};
    static const int cols[] = {32001, 30522, 50257, 49408, 8191};
    for (size_t m = 0; m < sizeof rows / sizeof *rows; m++)
        for (size_t v = 0; v < sizeof cols / sizeof *cols; v++)
            for (int tail = 0; tail < 2; tail++) {
                const int M = rows[m], N = cols[v];
                char text[512], what[96];
                snprintf(text, sizeof text,
                         "graph q(%%x: bf16[%d, 767], %%w: bf16[767, %d]) {\n  %%r = relu(%%x)\n"
                         "  %%y = matmul(%%r, %%w)\n%s}\n",
                         M, N, tail ? "  %t = softmax(%y, axis=-1)\n  return %t\n" : "  return %y\n");
                snprintf(what, sizeof what, "x @ W, M %d, N %d, K 767%s", M, N, tail ? ", softmax" : "");
                small_plan sp;
                char *source = NULL;
                if (!plan_of(ctx, what, text, false, &sp, M == 8 && !tail ? &source : NULL)) continue;
                const int Np = (N + 7) / 8 * 8;
                const bool gemv = M == 1, skinny = !gemv && Np % 64 == 0 && Np <= 8192, own = gemv || skinny;
                const fc_gemm_path want = gemv ? FC_GEMM_GEMV : skinny ? FC_GEMM_SKINNY : FC_GEMM_LIBRARY;
                /* Per run: relu (writing the padded rows), the GEMM, a
                 * compaction only of cuBLASLt's returned result, the
                 * softmax; at load: the weight's pad (none for the GEMV at
                 * an aligned N, which takes any K). */
                const int loadtime = gemv && N == Np ? 0 : 1;
                const int kernels = 1 + loadtime + (own ? 1 : 0) + (!own && !tail && N != Np ? 1 : 0) + tail;
                char shape[64], written[64];
                snprintf(shape, sizeof shape, "%d x %d x %d", M, Np, gemv ? 767 : 768);
                snprintf(written, sizeof written, "writes the %d columns of the result", N);
                const bool writes = own && !tail && N != Np;
                const bool ok = sp.path == want && sp.kernels == kernels && sp.library == (own ? 0 : 1) &&
                                sp.loadtime == loadtime && sp.out_n == N && (!own || strstr(sp.summary, shape)) &&
                                (!writes || strstr(sp.summary, written));
                if (!ok)
                    fprintf(stderr, "%s: %d kernels, %d calls, %d at load, path %d, N %lld (%s)\n", what, sp.kernels, sp.library,
                            sp.loadtime, (int)sp.path, (long long)sp.out_n, sp.summary);
                CHECK(ok);
                if (source) nvrtc_compiles(ctx, what, source);
                free(source);
            }
    /* The sweep's graph: x a parameter, which no kernel writes, so its pad
     * is a kernel of its own (3 blocks at M = 8). */
    small_plan sp;
    static const int sweep_n[] = {30522, 32001};
    for (int i = 0; i < 2; i++) {
        char text[256], what[96];
        snprintf(text, sizeof text, "graph p(%%x: bf16[8, 767], %%w: bf16[767, %d]) {\n  %%y = matmul(%%x, %%w)\n  return %%y\n}\n",
                 sweep_n[i]);
        snprintf(what, sizeof what, "x @ W, M 8, N %d, K 767, x a parameter", sweep_n[i]);
        if (!plan_of(ctx, what, text, false, &sp, NULL)) continue;
        CHECK_EQ_INT(sp.path, FC_GEMM_LIBRARY);
        CHECK_EQ_INT(sp.library, 1);
        CHECK_EQ_INT(sp.kernels, 3); /* x's pad, the weight's at load, the compaction */
        CHECK_EQ_INT(sp.loadtime, 1);
        CHECK_EQ_INT(sp.out_n, sweep_n[i]);
    }
}

/* Not few rows, but the same odd K: at M = 8192 K is padded alone and the
 * unaligned result written in place by cuBLASLt over interleaved rows
 * (passes/pad.c; runtime/cuda/cublaslt_interleave.c), as at K 768: no
 * compaction kernel. */
static void test_odd_k_in_place(fc_context *ctx) {
    small_plan sp;
    if (!plan_of(ctx, "x @ W^T, M 8192, K 767, N 50257",
                 "graph b(%x: bf16[8192, 767], %w: bf16[50257, 767]) {\n  %r = relu(%x)\n  %wt = permute(%w, perm=[1, 0])\n"
                 "  %y = matmul(%r, %wt)\n  return %y\n}\n",
                 false, &sp, NULL))
        return;
    CHECK_EQ_INT(sp.path, FC_GEMM_LIBRARY);
    CHECK_EQ_INT(sp.library, 1);
    CHECK_EQ_INT(sp.kernels, 2); /* relu writing the padded rows, the weight's pad at load */
    CHECK_EQ_INT(sp.loadtime, 1);
    CHECK(strstr(sp.summary, "gemm[trans_b] -> bf16") != NULL);
}

static void test_dynamic(fc_context *ctx) {
    static const char text[] = "graph d(%x: bf16[M, 767], %w: bf16[767, 50257]) {\n  %r = relu(%x)\n"
                               "  %y = matmul(%r, %w)\n  return %y\n}\n";
    small_plan sp;
    char *source = NULL;
    if (!plan_of(ctx, "dynamic, odd K, N 50257", text, true, &sp, &source)) return;
    CHECK_EQ_INT(sp.path, FC_GEMM_GENERATED);
    CHECK_EQ_INT(sp.library, 0);
    CHECK_EQ_INT(sp.loadtime, 0); /* nothing padded: no weight computed at load */
    const char *extra[8];
    const int nextra = fc_program_extra_nvrtc_options(90, false, extra);
    fc_bytes cubin = {0};
    fc_status st = source ? fc_nvrtc_compile(ctx, source, "pad_dynamic.cu", 9, 0, extra, nextra, &cubin) : FC_ERR_INPUT;
    if (st) fprintf(stderr, "dynamic: NVRTC: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_bytes_free(&cubin);
    free(source);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_lm_head(ctx);
    test_odd_k(ctx);
    test_odd_k_gemv(ctx);
    test_odd_k_kn(ctx);
    test_odd_k_in_place(ctx);
    test_dynamic(ctx);
    fc_context_free(ctx);
    return check_report("test_pad_small_m");
}

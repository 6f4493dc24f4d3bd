/* test_attention_headdim.c - attention at head dims of 80 (Phi-2) and 96
 * on the fast path (docs/ATTENTION.md, "Head dims").
 *
 * The graph is a block's attention as a model writes it: a fused QKV
 * projection with a bias, its split into heads, causal softmax(Q K^T / sqrt(D))
 * V written out, the heads joined again, the output projection and the
 * residual. At head dims of 64, 80 and 96 (four heads, so the hidden size is
 * 256, 320 or 384: every GEMM aligned):
 *
 *  1. Plans for sm 90 (no GPU needed): the attention is one launch of the
 *     Hopper kernel (fc_attn_fa3: "flash wgmma", 384 threads, dynamic shared
 *     memory, Q, K and V read in place from the projection by three tensor
 *     maps), its head dim stored as 128 with Q K^T over the k16 steps of D
 *     only (DK); the plan has exactly the launches of the D = 64 plan (no
 *     copy that pads Q, K or V, no slice of the result). For sm 0 the same
 *     group is the mma.sync kernel (the Hopper kernel needs sm_90a).
 *  2. The unit of each sm 90 plan compiles with NVRTC for sm_90a, with the
 *     options the runtime gives it (fc_program_extra_nvrtc_options).
 *  3. Numerics: the block on the CPU backend against the reference
 *     (fc_check_outputs), and with a GPU through fc_compile/fc_run on CUDA
 *     (on an sm 90 device the plan must say "flash wgmma").
 * Without a CPU backend (no LLVM) or a GPU, those parts print "skipped".
 */
#include "check.h"
#include "splitmix.h"
#include "codegen/cuda/cuda_codegen.h"
#include "fusec.h"
#include "ir.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 128, H = 4 };

/* The block at head dim d, as .ir text. */
static void block_ir(char *buf, size_t n, int d) {
    const int hd = H * d;
    snprintf(buf, n,
             "graph blk(%%x: bf16[%d, %d, %d], %%wqkv: bf16[%d, %d], %%bqkv: bf16[%d], %%wo: bf16[%d, %d], %%bo: bf16[%d]) {\n"
             "  %%h = matmul(%%x, %%wqkv)\n  %%qkv = add(%%h, %%bqkv)\n"
             "  %%q0, %%k0, %%v0 = split(%%qkv, axis=-1, sizes=[%d, %d, %d])\n"
             "  %%q1 = reshape(%%q0, shape=[%d, %d, %d, %d])\n  %%q = permute(%%q1, perm=[0, 2, 1, 3])\n"
             "  %%k1 = reshape(%%k0, shape=[%d, %d, %d, %d])\n  %%kt = permute(%%k1, perm=[0, 2, 3, 1])\n"
             "  %%v1 = reshape(%%v0, shape=[%d, %d, %d, %d])\n  %%v = permute(%%v1, perm=[0, 2, 1, 3])\n"
             "  %%s0 = matmul(%%q, %%kt)\n  %%s = mul(%%s0, %.17g)\n"
             "  %%qi = iota(shape=[%d, %d], axis=0, dtype=i32)\n  %%kj = iota(shape=[%d, %d], axis=1, dtype=i32)\n"
             "  %%keep = ge(%%qi, %%kj)\n  %%sm = where(%%keep, %%s, -inf)\n  %%p = softmax(%%sm, axis=-1)\n"
             "  %%a = matmul(%%p, %%v)\n  %%a1 = permute(%%a, perm=[0, 2, 1, 3])\n  %%a2 = reshape(%%a1, shape=[%d, %d, %d])\n"
             "  %%o0 = matmul(%%a2, %%wo)\n  %%o = add(%%o0, %%bo)\n  %%y = add(%%o, %%x)\n  return %%y\n}\n",
             B, T, hd, hd, 3 * hd, 3 * hd, hd, hd, hd, /* params */
             hd, hd, hd, B, T, H, d, B, T, H, d, B, T, H, d, 1.0 / sqrt((double)d), T, T, T, T, B, T, hd);
}

static fc_graph *parse_block(fc_context *ctx, int d) {
    char ir[4096];
    block_ir(ir, sizeof ir, d);
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "block", ir, strlen(ir), NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st) fprintf(stderr, "head dim %d: %s\n", d, fc_last_error(ctx));
    return g;
}

/* The launches of the block's plan for sm (the attention launch's index in
 * *att, -1 if none), its source in *src (release it). */
static bool plan_block(fc_context *ctx, int d, int sm, fc_cuda_src *src, int *att) {
    memset(src, 0, sizeof *src);
    *att = -1;
    fc_graph *g = parse_block(ctx, d);
    if (!g) return false;
    fc_plan plan;
    fc_status st = fc_pipeline(g, NULL, &plan);
    CHECK_EQ_INT(st, FC_OK);
    if (!st) {
        plan.sm = sm;
        plan.sm_count = 132;
        st = fc_cuda_codegen(&plan, src);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "head dim %d, sm %d: %s\n", d, sm, fc_last_error(ctx));
        fc_plan_release(&plan);
    }
    fc_graph_free(g);
    for (int i = 0; !st && i < src->nlaunches; i++)
        if (!strncmp(src->launches[i].summary, "attention:", 10)) {
            CHECK(*att < 0); /* one attention launch */
            *att = i;
        }
    return st == FC_OK;
}

/* 1 and 2: the plans, and NVRTC on the sm 90 units. */
static void test_plans(fc_context *ctx) {
    fc_cuda_src base;
    int base_att;
    if (!plan_block(ctx, 64, 90, &base, &base_att)) return;
    CHECK(base_att >= 0 && strstr(base.launches[base_att].summary, "flash wgmma"));
    static const int dims[] = {80, 96};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        const int d = dims[i];
        fc_cuda_src src;
        int att;
        if (!plan_block(ctx, d, 90, &src, &att)) continue;
        /* The same launches as at D = 64, kind for kind: nothing pads. */
        CHECK_EQ_INT(src.nlaunches, base.nlaunches);
        for (int l = 0; l < src.nlaunches && l < base.nlaunches; l++) CHECK_EQ_INT(src.launches[l].kind, base.launches[l].kind);
        CHECK_EQ_INT(att, base_att);
        if (att >= 0) {
            const fc_launch *l = &src.launches[att];
            const bool wg = strstr(l->summary, "flash wgmma") != NULL;
            if (!wg) fprintf(stderr, "head dim %d: the attention is '%s'\n", d, l->summary);
            CHECK(wg);
            CHECK_EQ_INT((int)l->block[0], 384); /* two consumer warpgroups and the producer */
            CHECK(l->smem > 48 * 1024 && l->smem <= 227 * 1024);
            CHECK_EQ_INT(l->ntmaps, 3); /* Q, K, V read in place from the projection */
            for (int t = 0; t < l->ntmaps; t++) CHECK_EQ_INT(l->tmaps[t].dims[0], d); /* columns past D: zeros */
        }
        char want[64];
        snprintf(want, sizeof want, "DP = 128, DVP = 128, DK = %d,", d);
        CHECK(src.source && strstr(src.source, want));
        /* 2: the unit compiles for sm_90a. */
        const char *extra[8];
        const int nextra = fc_program_extra_nvrtc_options(90, false, extra);
        fc_bytes cubin = {0};
        fc_status st = fc_nvrtc_compile(ctx, src.source, "headdim.cu", 9, 0, extra, nextra, &cubin);
        if (st) fprintf(stderr, "head dim %d: NVRTC: %s\n", d, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        CHECK(cubin.size > 0);
        fc_bytes_free(&cubin);
        fc_cuda_src_release(&src);
        /* Without sm_90a, the mma.sync kernel. */
        if (plan_block(ctx, d, 0, &src, &att)) {
            CHECK(att >= 0 && strstr(src.launches[att].summary, "flash mma"));
            fc_cuda_src_release(&src);
        }
    }
    fc_cuda_src_release(&base);
}

static uint64_t seed = 0x80;

/* 3: the block on dev against the reference; wgmma: the plan must use the
 * Hopper kernel. */
static void run_block(fc_context *ctx, fc_device dev, int d, bool wgmma) {
    fc_graph *g = parse_block(ctx, d);
    if (!g) return;
    const fc_compile_options o = options_for(dev, FC_PRECISION_AS_WRITTEN);
    fc_program *p = compile_checked(g, &o);
    if (!p) {
        fc_graph_free(g);
        return;
    }
    char *plan = fc_program_plan_text(p);
    if (wgmma) CHECK(plan && strstr(plan, "flash wgmma"));
    fc_free(plan);
    const int nin = fc_graph_num_params(g);
    fc_tensor in[5] = {{0}};
    for (int i = 0; i < nin && i < 5; i++) {
        CHECK_EQ_INT(fc_program_input(p, i, &in[i], NULL), FC_OK);
        const int64_t n = fc_tensor_numel(&in[i]);
        in[i].data = calloc((size_t)n + 1, 2);
        /* Weights scaled so the scores spread over a few units. */
        const double amp = i == 0 ? 1.0 : i == 1 || i == 3 ? 2.0 / sqrt((double)(H * d)) : 0.1;
        for (int64_t e = 0; e < n && in[i].data; e++)
            ((uint16_t *)in[i].data)[e] = fc_f32_to_bf16((float)(amp * (2 * splitmix_uniform(&seed) - 1)));
    }
    fc_tensor got = {0};
    fc_status st = fc_program_run_host(p, in, nin, &got, 1, NULL, 0);
    CHECK_EQ_INT(st, FC_OK);
    if (!st) {
        fc_output_diff diff;
        st = fc_check_outputs(g, in, nin, &got, 1, &diff);
        if (st) fprintf(stderr, "head dim %d (%s): %s\n", d, dev == FC_DEVICE_CUDA ? "cuda" : "cpu", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        printf("%s: head dim %d: %s\n", dev == FC_DEVICE_CUDA ? "gpu" : "cpu", d, st ? "WRONG" : "ok");
        fc_tensor_release(&got);
    }
    for (int i = 0; i < nin; i++) free(in[i].data);
    fc_program_free(p);
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_plans(ctx);
    static const int dims[] = {80, 96};
    if (fc_device_available(FC_DEVICE_CPU))
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) run_block(ctx, FC_DEVICE_CPU, dims[i], false);
    else
        printf("skipped: no CPU backend\n");
    fc_cuda_device *dev = NULL;
    if (fc_device_available(FC_DEVICE_CUDA) && fc_cuda_device_open(ctx, 0, &dev) == FC_OK) {
        const bool hopper = dev->info.cc_major == 9 && dev->info.cc_minor == 0;
        fc_cuda_device_close(dev);
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) run_block(ctx, FC_DEVICE_CUDA, dims[i], hopper);
    } else {
        printf("skipped: no CUDA device\n");
    }
    fc_context_free(ctx);
    return check_report("test_attention_headdim");
}

/* test_fusion.c - fusion patterns: each graph (written in .ir text, the
 * composite and the primitive spellings) must become the expected number of
 * kernels, and every generated kernel must compile with NVRTC for sm_90
 * (no GPU needed). */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "fusec.h"
#include "nvrtc_check.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "random_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fusion_case {
    const char *name;
    const char *ir;
    int kernels;   /* expected generated kernels */
    int libraries; /* expected library calls */
} fusion_case;

static const fusion_case cases[] = {
    {"pointwise chain",
     "graph f(%x: bf16[64, 256], %r: bf16[64, 256]) {\n"
     "  %xf = cast(%x, to=f32)\n  %rf = cast(%r, to=f32)\n"
     "  %a = mul(%xf, 1.702)\n  %b = add(%a, %rf)\n  %c = gelu(%b)\n  %s = sigmoid(%rf)\n"
     "  %d = mul(%c, %s)\n  %e = add(%d, %xf)\n  %y = cast(%e, to=bf16)\n  return %y\n}\n",
     1, 0},
    {"broadcast bias",
     "graph f(%x: f32[64, 256], %b: f32[256]) {\n  %y = add(%x, %b)\n  %z = relu(%y)\n  return %z\n}\n", 1, 0},
    {"softmax composite",
     "graph f(%x: bf16[128, 1024]) {\n  %y = softmax(%x, axis=-1)\n  return %y\n}\n", 1, 0},
    {"softmax primitives",
     "graph f(%x: f32[128, 1024]) {\n  %m = reduce_max(%x, axes=[-1], keepdim=true)\n  %d = sub(%x, %m)\n"
     "  %e = exp(%d)\n  %s = reduce_sum(%e, axes=[-1], keepdim=true)\n  %y = div(%e, %s)\n  return %y\n}\n",
     1, 0},
    {"layernorm",
     "graph f(%x: f32[128, 768], %w: f32[768], %b: f32[768]) {\n  %y = layernorm(%x, %w, %b)\n  return %y\n}\n", 1, 0},
    {"rmsnorm",
     "graph f(%x: bf16[128, 4096], %w: bf16[4096]) {\n  %y = rmsnorm(%x, %w)\n  return %y\n}\n", 1, 0},
    {"add + layernorm, two outputs",
     "graph f(%x: bf16[64, 4096], %r: bf16[64, 4096], %w: bf16[4096], %b: bf16[4096]) {\n"
     "  %s = add(%x, %r)\n  %y = layernorm(%s, %w, %b)\n  return %s, %y\n}\n",
     1, 0},
    /* A norm read in f32 (a later residual) and in bf16 (the next GEMM,
     * through a cast): the norm's kernel writes both, no kernel only
     * casts (a post-norm transformer under --precision=bf16). */
    {"layernorm stores its bf16 cast too, beside an f32 residual read by a kernel",
     "graph f(%x: f32[128, 768], %w: f32[768], %b: f32[768], %wq: bf16[768, 768]) {\n"
     "  %y = layernorm(%x, %w, %b)\n  %c = cast(%y, to=bf16)\n  %h = matmul(%c, %wq)\n  %hf = cast(%h, to=f32)\n"
     "  %s = add(%hf, %y)\n  return %s\n}\n",
     2, 1},
    {"layernorm stores its bf16 cast too, beside an f32 residual read by the GEMM",
     "graph f(%x: f32[128, 768], %w: f32[768], %b: f32[768], %wq: bf16[768, 768]) {\n"
     "  %y = layernorm(%x, %w, %b)\n  %c = cast(%y, to=bf16)\n  %cf = cast(%c, to=f32)\n  %wf = cast(%wq, to=f32)\n"
     "  %h = matmul(%cf, %wf)\n  %s = add(%h, %y)\n  return %s\n}\n",
     1, 1},
    {"short rows (warp per row)",
     "graph f(%x: f32[1000, 100]) {\n  %y = softmax(%x)\n  return %y\n}\n", 1, 0},
    {"long rows (looped)",
     "graph f(%x: f32[4, 100000]) {\n  %y = softmax(%x)\n  return %y\n}\n", 1, 0},
    {"column reduction",
     "graph f(%x: f32[512, 64]) {\n  %s = reduce_sum(%x, axes=[0])\n  return %s\n}\n", 1, 0},
    {"rank-8 column reduction (a long index expression)",
     "graph f(%x: f32[2, 3, 2, 3, 2, 3, 2, 5]) {\n  %s = reduce_sum(%x, axes=[0, 2, 4])\n  return %s\n}\n", 1, 0},
    /* Column reductions: a block of 32 rows side by side with 8 threads
     * splitting each row (codegen/cuda/reduce.c). A stored result that does
     * not depend on the reduction is written in the reduction's loop; one
     * that does, in a final phase (the column softmax). */
    {"column reduction storing what it reduces",
     "graph f(%x: bf16[3, 20, 18, 40], %y: f32[40]) {\n  %xf = cast(%x, to=f32)\n  %a = mul(%xf, %y)\n"
     "  %s = reduce_sum(%a, axes=[1, 2])\n  return %a, %s\n}\n",
     1, 0},
    /* Per-row ops after a reduction (a mean's scale, the cast for the next
     * GEMM) are computed once per row in its kernel, not by a kernel of
     * their own; a row value that does not read the reduction is not. */
    {"scale and cast after a column sum",
     "graph f(%x: f32[64, 32, 48]) {\n  %s = reduce_sum(%x, axes=[1], keepdim=true)\n  %m = mul(%s, 0.03125)\n"
     "  %c = cast(%m, to=bf16)\n  return %c\n}\n",
     1, 0},
    {"scale and cast after a trailing sum, without keepdim",
     "graph f(%x: f32[64, 48]) {\n  %s = reduce_sum(%x, axes=[1])\n  %m = mul(%s, 0.5)\n  %c = cast(%m, to=bf16)\n"
     "  return %c\n}\n",
     1, 0},
    {"a per-row op reading another row value keeps its kernel",
     "graph f(%x: f32[64, 48], %b: f32[64]) {\n  %s = reduce_sum(%x, axes=[1])\n  %e = exp(%b)\n  %m = mul(%s, %e)\n"
     "  return %m\n}\n",
     2, 0},
    {"column softmax", "graph f(%x: f32[37, 45]) {\n  %y = softmax(%x, axis=0)\n  return %y\n}\n", 1, 0},
    /* EfficientNet-B0's first block at 40x36: the pool is two means (passes/lower_conv.c), the depthwise
     * convolution fused into the first, whose rows are N*H*C. */
    {"squeeze-excite pool over a large map: the depthwise convolution in the first of two means",
     "graph f(%x: f32[2, 16, 40, 36], %w: f32[16, 1, 3, 3], %b: f32[16]) {\n  %s = sigmoid(%x)\n  %xa = mul(%x, %s)\n"
     "  %d = conv(%xa, %w, %b, window=[1, 1, 1, 1, 1, 1, 1, 1], groups=16)\n  %ds = sigmoid(%d)\n  %da = mul(%d, %ds)\n"
     "  %g = global_avg_pool(%da)\n  %y = mul(%da, %g)\n  return %y\n}\n",
     3, 0},
    {"sibling reductions (horizontal)",
     "graph f(%x: f32[128, 512]) {\n  %a = reduce_sum(%x, axes=[1])\n  %b = reduce_max(%x, axes=[1])\n  return %a, %b\n}\n",
     1, 0},
    {"sibling pointwise (horizontal)",
     "graph f(%x: f32[128, 512]) {\n  %a = exp(%x)\n  %b = tanh(%x)\n  return %a, %b\n}\n", 1, 0},
    {"independent small kernels batched into one launch",
     "graph f(%a: f32[64, 3], %b: f32[32], %c: f32[100]) {\n  %x = exp(%a)\n  %y = tanh(%b)\n  %z = neg(%c)\n"
     "  return %x, %y, %z\n}\n",
     1, 0},
    {"dependent kernels are not batched (nor reductions)",
     "graph f(%a: f32[64, 32]) {\n  %s = reduce_sum(%a, axes=[1], keepdim=true)\n  %t = permute(%a, perm=[1, 0])\n"
     "  %u = exp(%t)\n  %v = reduce_sum(%u, axes=[0], keepdim=true)\n  %w = permute(%v, perm=[1, 0])\n  %y = add(%s, %w)\n"
     "  return %y\n}\n",
     3, 0},
    /* A view must not read a reduced value inside the reduction's kernel: it
     * reads another row. Found by the CPU backend's random graphs (seeds
     * 1750, 2893, 3335); the softmax's kernel stores the exponentials
     * (read by its sum and by the division) and the sums, and the
     * permute's kernel divides. */
    {"permute of a softmax is not fused into the softmax",
     "graph f(%x: f32[16, 32]) {\n  %s = softmax(%x)\n  %p = permute(%s, perm=[1, 0])\n  return %p\n}\n", 2, 0},
    {"permute of a reduced value is not fused into the reduction",
     "graph f(%x: f32[16, 32], %y: f32[32, 16]) {\n  %r = reduce_sum(%x, axes=[1], keepdim=true)\n  %n = neg(%r)\n"
     "  %p = permute(%n, perm=[1, 0])\n  %a = add(%y, %p)\n  return %a\n}\n",
     2, 0},
    /* A stored per-row value that does not depend on the reductions (seed 353). */
    {"row-shaped result independent of the reduction",
     "graph f(%x: f32[16, 32], %b: f32[16, 1]) {\n  %r = reduce_sum(%x, axes=[1], keepdim=true)\n  %e = exp(%b)\n"
     "  %a = add(%r, %e)\n  return %a, %e\n}\n",
     2, 0},
    {"views fold into indexing",
     "graph f(%x: f32[8, 16, 32]) {\n  %p = permute(%x, perm=[2, 0, 1])\n  %r = reshape(%p, shape=[32, 128])\n"
     "  %s = slice(%r, axis=1, start=1, end=-1, step=2)\n  %e = exp(%s)\n  return %e\n}\n",
     1, 0},
    {"concat, split, iota, where",
     "graph f(%a: f32[4, 8], %b: f32[4, 8]) {\n  %c = concat(%a, %b, axis=1)\n  %p, %q = split(%c, axis=1, sizes=[4, 12])\n"
     "  %i = iota(shape=[4, 12], axis=1, dtype=i32)\n  %m = lt(%i, 6)\n  %w = where(%m, %q, 0.0)\n  return %w\n}\n",
     1, 0},
    {"gather (embedding)",
     "graph f(%t: f32[100, 64], %i: i32[16]) {\n  %e = gather(%t, %i)\n  %y = mul(%e, 8.0)\n  return %y\n}\n", 1, 0},
    {"matmul + bias + gelu_tanh is one library call (cuBLASLt epilogue)",
     "graph f(%x: f32[16, 64], %w: f32[64, 32], %b: f32[32]) {\n  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n"
     "  %z = gelu_tanh(%y)\n  return %z\n}\n",
     0, 1},
    {"matmul + erf gelu: one kernel after the library call",
     "graph f(%x: f32[16, 64], %w: f32[64, 32], %b: f32[32]) {\n  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n"
     "  %z = gelu(%y)\n  return %z\n}\n",
     1, 1},
    /* ops.def `cost`: HIGH read through a view is stored (2 kernels), MID
     * is recomputed at the view's index (1 kernel). */
    {"exp read through a permute is stored",
     "graph f(%x: f32[64, 32]) {\n  %e = exp(%x)\n  %p = permute(%e, perm=[1, 0])\n  return %p\n}\n", 2, 0},
    {"div read through a permute is recomputed",
     "graph f(%x: f32[64, 32], %y: f32[64, 32]) {\n  %e = div(%x, %y)\n  %p = permute(%e, perm=[1, 0])\n"
     "  return %p\n}\n",
     1, 0},
    /* ops.def `weight`: five sins weigh 320, past the cap of 256, so the
     * chain is two kernels (each compiles in well under a second; one
     * kernel of many sins takes NVRTC minutes). */
    {"a chain of sins splits by weight",
     "graph f(%x: f32[1024]) {\n  %a = sin(%x)\n  %b = sin(%a)\n  %c = sin(%b)\n  %d = sin(%c)\n  %e = sin(%d)\n"
     "  return %e\n}\n",
     2, 0},
};

static int count_kind(const fc_cuda_src *src, fc_launch_kind kind) {
    int n = 0;
    for (int i = 0; i < src->nlaunches; i++) n += src->launches[i].kind == kind;
    return n;
}

int main(void) {
    fc_context *ctx = fc_context_new();
    const char *dump = getenv("FUSEC_TEST_DUMP");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const fusion_case *fc = &cases[c];
        fc_graph *g = NULL;
        fc_status st = fc_parse(ctx, fc->name, fc->ir, strlen(fc->ir), NULL, NULL, 0, &g);
        CHECK_EQ_INT(st, FC_OK);
        if (st) {
            fprintf(stderr, "%s\n", fc_last_error(ctx));
            continue;
        }
        fc_plan plan;
        st = fc_pipeline(g, NULL, &plan);
        CHECK_EQ_INT(st, FC_OK);
        if (st) {
            fprintf(stderr, "%s: %s\n", fc->name, fc_last_error(ctx));
            fc_plan_release(&plan);
            fc_graph_free(g);
            continue;
        }
        fc_cuda_src src;
        st = fc_cuda_codegen(&plan, &src);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s: %s\n", fc->name, fc_last_error(ctx));
        if (!st) {
            int k = count_kind(&src, FC_LAUNCH_KERNEL), l = count_kind(&src, FC_LAUNCH_LIBRARY);
            if (k != fc->kernels || l != fc->libraries)
                fprintf(stderr, "%s: %d kernels, %d library calls (want %d, %d)\n", fc->name, k, l, fc->kernels, fc->libraries);
            CHECK_EQ_INT(k, fc->kernels);
            CHECK_EQ_INT(l, fc->libraries);
            if (dump && strstr(fc->name, dump)) printf("%s\n", src.source);
            check_nvrtc_compiles(ctx, src.source, "fusion_test.cu", fc->name);
            fc_cuda_src_release(&src);
        }
        fc_plan_release(&plan);
        fc_graph_free(g);
    }
    /* Random graphs: every one must fuse, generate and compile. A failure
     * prints its seed and .ir text. */
    int nrandom = getenv("FUSEC_RANDOM_GRAPHS") ? atoi(getenv("FUSEC_RANDOM_GRAPHS")) : 40;
    for (int seed = 1; seed <= nrandom; seed++) {
        rg_opts o = {.max_nodes = 12, .bf16 = true};
        char *ir = random_graph((uint64_t)seed, &o);
        fc_graph *g = NULL;
        fc_status st = fc_parse(ctx, "random.ir", ir, strlen(ir), NULL, NULL, 0, &g);
        fc_plan plan = {0};
        fc_cuda_src src = {0};
        fc_bytes cubin = {0};
        if (!st) st = fc_pipeline(g, NULL, &plan);
        if (!st) st = fc_cuda_codegen(&plan, &src);
        if (!st) st = fc_nvrtc_compile(ctx, src.source, "random.cu", 9, 0, NULL, 0, &cubin);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "random graph seed %d failed: %s\n%s\n", seed, fc_last_error(ctx), ir);
        fc_bytes_free(&cubin);
        fc_cuda_src_release(&src);
        fc_plan_release(&plan);
        fc_graph_free(g);
        free(ir);
    }
    fc_context_free(ctx);
    return check_report("test_fusion");
}

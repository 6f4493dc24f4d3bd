/* test_codegen_budget.c - the instruction-budget rules of pointwise and row
 * kernels (docs/CODEGEN.md, "Instruction budget of pointwise kernels"),
 * checked on the emitted CUDA source, and every kernel compiled by NVRTC:
 *
 *   - a bf16 value whose only use is its store is not rounded before it
 *     (the store rounds); one that is also read again is rounded;
 *   - loaded elements are not rounded (they already have their dtype);
 *   - a suffix-broadcast operand (a norm's weight) moves as a vector, and
 *     in a persistent row kernel of one wave it is loaded with the row in
 *     the prologue (not over many waves);
 *   - a space below 2^31 elements has a 32-bit loop counter, a larger one
 *     keeps 64-bit indexing; dynamic kernels keep 64-bit indexing;
 *   - h * (t + 1) with t + 1 read once is fma(h, t, h); read twice, not.
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "fusec.h"
#include "nvrtc_check.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernel source of `ir` (the part after the prelude), or NULL. Also
 * compiled with NVRTC for sm_90. Free with free(). */
static char *kernels_for(fc_context *ctx, const char *ir, bool dynamic, fc_numerics numerics) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "budget.ir", ir, strlen(ir), NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s\n", fc_last_error(ctx));
        return NULL;
    }
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.dynamic = dynamic;
    fc_plan plan;
    st = fc_pipeline(g, &fo, &plan);
    CHECK_EQ_INT(st, FC_OK);
    char *out = NULL;
    plan.numerics = numerics;
    if (!st) {
        fc_cuda_src src = {0};
        st = fc_cuda_codegen(&plan, &src);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s\n", fc_last_error(ctx));
        if (!st) {
            check_nvrtc_compiles(ctx, src.source, "budget.cu", "budget.cu");
            const char *k = strstr(src.source, "// group");
            out = strdup(k ? k : "");
        }
        fc_cuda_src_release(&src);
        fc_plan_release(&plan);
    }
    fc_graph_free(g);
    return out;
}

static char *kernels(fc_context *ctx, const char *ir, bool dynamic) {
    return kernels_for(ctx, ir, dynamic, FC_NUMERICS_FAST);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

int main(void) {
    fc_context *ctx = fc_context_new();

    /* bench/pointwise.ir's chain, smaller: one store, never rounded before it. */
    char *k = kernels(ctx,
                      "graph pw(%x: bf16[256, 1024], %r: bf16[256, 1024]) {\n"
                      "  %xf = cast(%x, to=f32)\n  %rf = cast(%r, to=f32)\n"
                      "  %a = mul(%xf, 1.702)\n  %b = add(%a, %rf)\n  %g = gelu(%b)\n"
                      "  %sr = sigmoid(%rf)\n  %p = mul(%g, %sr)\n  %q = add(%p, %xf)\n"
                      "  %y = cast(%q, to=bf16)\n  return %y\n}\n",
                      false);
    if (k) {
        CHECK_EQ_INT(count(k, "fc_rnd_bf16("), 0);
        CHECK_EQ_INT(count(k, "fc_to<__nv_bfloat16>("), 8);
        CHECK(strstr(k, "fc_ld_lane(v") != NULL);
        CHECK(strstr(k, "for (unsigned t = (unsigned)t0; t < 32768u;") != NULL);
        CHECK(strstr(k, "for (i64 t") == NULL);
        /* gelu's x/2 * (1 + erf(..)) is one fused multiply-add, 8 a thread. */
        CHECK_EQ_INT(count(k, "fmaf("), 8);
        CHECK(strstr(k, "+ (float)1)") == NULL);
    }
    free(k);

    /* A `t + 1` that is also stored, or read twice, stays an add. */
    k = kernels(ctx,
                "graph p1(%x: f32[64, 256]) {\n  %t = exp(%x)\n  %u = add(%t, 1.0)\n  %m = mul(%x, %u)\n"
                "  %n = mul(%m, %u)\n  return %n\n}\n",
                false);
    if (k) CHECK_EQ_INT(count(k, "fmaf("), 0);
    free(k);

    /* A bf16 add stored and read again (add + layernorm's residual). In
     * fast numerics the layernorm reads the add's unrounded f32 value and
     * only the stores round (docs/NUMERICS.md); in eager numerics the
     * rounded value feeds the arithmetic, so it is rounded (once an
     * element), and the stores of %s and %y do not round again. The
     * weight and bias are vector loads at base % 1024. */
    static const char *aln =
        "graph aln(%x: bf16[64, 1024], %r: bf16[64, 1024], %w: bf16[1024], %b: bf16[1024]) {\n"
        "  %s = add(%x, %r)\n  %sr = cast(%s, to=f32)\n  %wf = cast(%w, to=f32)\n  %bf = cast(%b, to=f32)\n"
        "  %yf = layernorm(%sr, %wf, %bf, axis=-1, eps=1e-5)\n  %y = cast(%yf, to=bf16)\n  return %s, %y\n}\n";
    k = kernels_for(ctx, aln, false, FC_NUMERICS_EAGER);
    if (k) CHECK(strstr(k, "fc_rnd_bf16(") != NULL);
    free(k);
    k = kernels(ctx, aln, false);
    if (k) {
        CHECK(strstr(k, "fc_rnd_bf16(") == NULL);
        CHECK(strstr(k, "% 1024ll;") != NULL);
        CHECK(strstr(k, "fc_ld(a2[") == NULL); /* no scalar weight loads */
        CHECK(strstr(k, "fc_ld(a3[") == NULL);
        CHECK(strstr(k, "fc_rnd_bf16(fc_ld") == NULL); /* loads are exact */
        /* 64 rows, 8 blocks: one wave, so the weight and bias are loaded
         * with the row in the prologue, once, not after the reductions. */
        CHECK(strstr(k, "q2[c] = ") != NULL && strstr(k, "q3[c] = ") != NULL);
        CHECK_EQ_INT(count(k, "(a2 + "), 1);
        CHECK_EQ_INT(count(k, "(a3 + "), 1);
    }
    free(k);
    /* The same with 32768 rows (4096 blocks, many waves): the weight and
     * bias are loaded where they are read. */
    {
        char ir[512];
        const int rows = 32768;
        snprintf(ir, sizeof ir,
                 "graph alnb(%%x: bf16[%d, 1024], %%r: bf16[%d, 1024], %%w: bf16[1024], %%b: bf16[1024]) {\n"
                 "  %%s = add(%%x, %%r)\n  %%sr = cast(%%s, to=f32)\n  %%wf = cast(%%w, to=f32)\n"
                 "  %%bf = cast(%%b, to=f32)\n  %%yf = layernorm(%%sr, %%wf, %%bf, axis=-1, eps=1e-5)\n"
                 "  %%y = cast(%%yf, to=bf16)\n  return %%s, %%y\n}\n",
                 rows, rows);
        k = kernels(ctx, ir, false);
        if (k) {
            CHECK(strstr(k, "q2[c]") == NULL && strstr(k, "q3[c]") == NULL);
            CHECK(count(k, "(a2 + ") >= 1);
        }
        free(k);
    }

    /* rmsnorm with an f32 weight and bf16 rows: 8 lanes of f32 are 32
     * bytes, more than the 16-byte alignment kernels assume: scalar loads. */
    k = kernels(ctx,
                "graph rms(%x: bf16[64, 1024], %w: f32[1024]) {\n"
                "  %xf = cast(%x, to=f32)\n  %yf = rmsnorm(%xf, %w, eps=1e-6)\n  %y = cast(%yf, to=bf16)\n  return %y\n}\n",
                false);
    if (k) {
        CHECK(strstr(k, "fc_ld(a1[") != NULL);
        CHECK(strstr(k, "fc_vec<float, 8>") == NULL);
    }
    free(k);

    /* 2^32 elements: the loop counter and indices stay 64-bit. */
    k = kernels(ctx, "graph big(%x: bf16[65536, 65536]) {\n  %y = mul(%x, 2.0)\n  return %y\n}\n", false);
    if (k) {
        CHECK(strstr(k, "for (i64 t = t0; t < 536870912ll; t += stride)") != NULL);
        CHECK(strstr(k, "unsigned t") == NULL);
    }
    free(k);

    /* Dynamic kernels: sizes are unknown at compile time, 64-bit indexing. */
    k = kernels(ctx,
                "graph dyn(%x: bf16[B, 1024], %w: bf16[1024]) {\n  %y = mul(%x, %w)\n  return %y\n}\n",
                true);
    if (k) {
        CHECK(strstr(k, "for (i64 t = t0; t < nthreads; t += stride)") != NULL);
        CHECK(strstr(k, "unsigned t") == NULL);
        CHECK(strstr(k, "% 1024ll;") != NULL); /* the static suffix still moves as vectors */
    }
    free(k);

    fc_context_free(ctx);
    return check_report("test_codegen_budget");
}

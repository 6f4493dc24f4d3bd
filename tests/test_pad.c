/* test_pad.c - the numerics of every padded GEMM path (passes/pad.c,
 * docs/GEMM.md "Unaligned shapes") on each backend this machine runs.
 *
 * Each case is a small graph with an unaligned N or K. It is padded the way
 * the pipeline pads large shapes (epilogue, then the pad pass with a rule
 * that pads whatever is unaligned: the default rule would leave shapes this
 * small alone), compiled for the CPU backend and, with a GPU, for CUDA
 * (where the zero block goes through cuBLASLt's kept concatenation), and
 * run against the reference interpreter on the graph as written. Then the
 * weights change in place, fc_program_weights_changed says so, and the
 * next run must give the new weights' results: a padded weight the program
 * keeps must not go stale. On CUDA one more case is compiled as written, at
 * a size the pipeline's own rule pads. Without a GPU the CUDA half prints
 * "skipped". First, the pass under an allocation failure at each of its
 * allocations.
 */
#include "check.h"
#include "pass_file.h"
#include "fusec.h"
#include "ir.h"
#include "passes/passes.h"
#include "splitmix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pad_case {
    const char *name;
    const char *ir;
    const char *want; /* a node the padded graph must hold, as fc_print writes it */
    bool as_written;  /* compiled as written: the pipeline's own rule pads it (CUDA only: a size the rule pads) */
    bool in_place;    /* padded by a rule for which the backend's in-place form is the cheaper */
    bool gemv;        /* padded by a rule whose backend has GEMV kernels (fc_pad_rule.gemv_max_m) */
} pad_case;

static const pad_case cases[] = {
    {"N by a zero block, x @ W^T (the LM head's form)",
     "graph f(%x: bf16[6, 32], %w: bf16[13, 32]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     "spec=[0, 1, 2, 0, 0, 0]", false, false, false},
    {"N by a zero block with bias and gelu_tanh",
     "graph f(%x: bf16[6, 32], %w: bf16[32, 13], %b: bf16[13]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = gelu_tanh(%h1)\n  return %y\n}\n",
     "spec=[0, 0, 2, 1, 0, 2]", false, false, false},
    {"N: fused siblings and one zero block",
     "graph f(%x: f16[6, 32], %wq: f16[32, 13], %wk: f16[32, 13], %bq: f16[13], %bk: f16[13]) {\n"
     "  %q0 = matmul(%x, %wq)\n  %q = add(%q0, %bq)\n  %k0 = matmul(%x, %wk)\n  %k = add(%k0, %bk)\n"
     "  return %q, %k\n}\n",
     "spec=[0, 0, 3, 1, 0, 0]", false, false, false},
    {"N: the padded result read in place by a softmax",
     "graph f(%x: bf16[6, 32], %w: bf16[13, 32]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  %p = softmax(%y, axis=-1)\n  return %p\n}\n",
     "slice(", false, false, false},
    {"K: relu writes the padded rows; the weight padded by a concat",
     "graph f(%x: f16[6, 13], %w: f16[13, 16]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     "concat(%r,", false, false, false},
    {"K and N, f32 (rows of 4), with a bias",
     "graph f(%x: f32[6, 13], %w: f32[13, 5], %b: f32[5]) {\n"
     "  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n  return %y\n}\n",
     ": f32[16, 8]", false, false, false},
    {"K = 0: the epilogue over zeros",
     "graph f(%x: bf16[4, 0], %w: bf16[0, 8], %b: bf16[8]) {\n"
     "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = relu(%h1)\n  return %y\n}\n",
     "full(shape=[4, 8]", false, false, false},
    {"the pipeline's rule: x @ W^T, N = 4001, padded by the default rule",
     "graph f(%x: bf16[512, 768], %w: bf16[4001, 768]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     "gemm[trans_b,x2]", true, false, false},
    {"N, x @ W (the export's LM head form): W transposed at load for the in-place form, no slice",
     "graph f(%x: bf16[512, 8], %w: bf16[8, 1001]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "spec=[0, 1, 1, 0, 0, 0]) : bf16[512, 1001]", false, true, false},
    {"the pipeline's rule: x @ W, f32, N = 4001, M = 4096: W transposed at load, the result written in place",
     "graph f(%x: f32[4096, 64], %w: f32[64, 4001]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "library gemm ops: gemm[trans_b] -> f32", true, false, false},
    {"K and N, x @ W^T: K padded alone, the result (N unaligned) written in place, no slice",
     "graph f(%x: bf16[512, 13], %w: bf16[1001, 13]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     "spec=[0, 1, 1, 0, 0, 0]) : bf16[512, 1001]", false, true, false},
    /* The GEMV forms: the weight alone padded at load (K of [N, K], N of
     * [K, N]); on CUDA the GEMV stages x's rows with their zeros itself,
     * or writes the unpadded result. */
    {"GEMV form: K of [N, K], x @ W^T at M = 3, a bias",
     "graph f(%x: bf16[3, 255], %w: bf16[13, 255], %b: bf16[13]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %h = matmul(%x, %wt)\n  %y = add(%h, %b)\n  return %y\n}\n",
     "spec=[0, 1, 1, 1, 0, 0]) : bf16[3, 13]", false, false, true},
    {"GEMV form: N of [K, N], x @ W at M = 1, a bias",
     "graph f(%x: bf16[1, 64], %w: bf16[64, 13], %b: bf16[13]) {\n"
     "  %h = matmul(%x, %w)\n  %y = add(%h, %b)\n  return %y\n}\n",
     "spec=[0, 0, 1, 1, 0, 0]) : bf16[1, 16]", false, false, true},
    {"the pipeline's rule: x @ W^T, M = 1, K = 767: the weight padded at load, x padded by the GEMV",
     "graph f(%x: bf16[1, 767], %w: bf16[50257, 767]) {\n"
     "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
     "A's rows of 767 padded inside", true, false, false},
    {"the pipeline's rule: x @ W, M = 1, N = 50257: the weight padded at load, the result written unpadded",
     "graph f(%x: bf16[1, 768], %w: bf16[768, 50257]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "writes the 50257 columns of the result", true, false, false},
    {"the pipeline's rule: x @ W, M = 8, N = 50257: a zero block, cuBLASLt aligned, the result compacted",
     "graph f(%x: bf16[8, 768], %w: bf16[768, 50257]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "library gemm ops: gemm[x2] -> bf16", true, false, false},
    /* x @ W at few rows, K 767 and N a vocabulary: K and N padded (x's
     * rows by the kernel that writes x, or a pad kernel for a parameter),
     * the skinny kernel writing the unpadded result where N_p is whole
     * 64-column tiles, at most 8192, else cuBLASLt aligned and the result compacted. */
    {"the pipeline's rule: x @ W, M = 8, N = 8191, K = 767, x from relu: the skinny kernel writes the 8191 columns",
     "graph f(%x: bf16[8, 767], %w: bf16[767, 8191]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     "8 x 8192 x 768, K in 2 slices of a cluster, writes the 8191 columns of the result", true, false, false},
    {"the pipeline's rule: x @ W, M = 8, N = 30522, K = 767, x a parameter (the sweep's graph): cuBLASLt aligned",
     "graph f(%x: bf16[8, 767], %w: bf16[767, 30522]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "library gemm ops: gemm -> bf16", true, false, false},
    {"the pipeline's rule: x @ W, M = 8, N = 32001, K = 767, x from relu: cuBLASLt aligned, the result compacted",
     "graph f(%x: bf16[8, 767], %w: bf16[767, 32001]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     "library gemm ops: gemm -> bf16", true, false, false},
    {"the pipeline's rule: x @ W, M = 8, N = 32001, K = 767, x a parameter (the sweep's graph)",
     "graph f(%x: bf16[8, 767], %w: bf16[767, 32001]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "library gemm ops: gemm -> bf16", true, false, false},
    {"the pipeline's rule: x @ W, M = 3, N = 32001, K = 767, the padded result read in place by a softmax",
     "graph f(%x: bf16[3, 767], %w: bf16[767, 32001]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n"
     "  %t = softmax(%y, axis=-1)\n  return %t\n}\n",
     "library gemm ops: gemm -> bf16", true, false, false},
    {"the pipeline's rule: x @ W, M = 64, N = 8191, K = 767: the skinny kernel writes the 8191 columns",
     "graph f(%x: bf16[64, 767], %w: bf16[767, 8191]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     "64 x 8192 x 768, K in 2 slices of a cluster, writes the 8191 columns of the result", true, false, false},
    {"the pipeline's rule: x @ W, M = 64, N = 30522, K = 767: cuBLASLt aligned, the result compacted",
     "graph f(%x: bf16[64, 767], %w: bf16[767, 30522]) {\n  %r = relu(%x)\n  %y = matmul(%r, %w)\n  return %y\n}\n",
     "library gemm ops: gemm -> bf16", true, false, false},
    {"the pipeline's rule: x @ W, M = 1, N = 32001, K = 767: the [K, N] GEMV at N 32008",
     "graph f(%x: bf16[1, 767], %w: bf16[767, 32001]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
     "writes the 32001 columns of the result", true, false, false},
};

static uint64_t seed = 0x5eed;

static void fill(fc_tensor *t) {
    int64_t n = fc_tensor_numel(t);
    for (int64_t e = 0; e < n; e++) {
        float v = (float)(2 * splitmix_uniform(&seed) - 1);
        if (t->dtype == FC_F32) ((float *)t->data)[e] = v;
        else if (t->dtype == FC_BF16) ((uint16_t *)t->data)[e] = fc_f32_to_bf16(v);
        else ((uint16_t *)t->data)[e] = fc_f32_to_f16(v);
    }
}

/* g padded as the pipeline pads large shapes, whatever its size. */
static fc_graph *padded(fc_graph *g, const pad_case *pc) {
    static const fc_pad_rule always = {1e12, 1e12, 1e12, 0, 1e30, 1, 0, 0, 0, 0, 0, 0, 0};
    static const fc_pad_rule in_place = {1e12, 1e12, 1e12, 0, 1e30, 1, 1, 0, 0, 0, 0, 0, 0};
    static const fc_pad_rule gemv = {1e12, 1e12, 1e12, 0, 1e30, 1, 0, 2, 8, 1, 8, 4096, 0};
    fc_graph *p = fc_graph_clone(g);
    CHECK(p != NULL);
    if (!p) return NULL;
    CHECK_EQ_INT(fc_pass_epilogue(p), FC_OK);
    CHECK_EQ_INT(fc_pass_pad_with(p, pc->gemv ? &gemv : pc->in_place ? &in_place : &always), FC_OK);
    CHECK_EQ_INT(fc_verify(p), FC_OK);
    char *text = fc_print(p);
    CHECK(text && strstr(text, pc->want));
    /* Written in place: no compaction of a padded result. */
    if (pc->in_place) CHECK(text && !strstr(text, "slice("));
    if (text && !strstr(text, pc->want)) fprintf(stderr, "%s: no '%s' in\n%s", pc->name, pc->want, text);
    fc_free(text);
    return p;
}

/* Run p twice against the reference on g: as compiled, then after every
 * input but the first (the weights) changed in place. */
static void run_case(fc_context *ctx, fc_device dev, const pad_case *pc) {
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, pc->name, pc->ir, strlen(pc->ir), NULL, NULL, 0, &g), FC_OK);
    if (!g) return;
    fc_graph *gp = pc->as_written ? fc_graph_clone(g) : padded(g, pc);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = dev;
    fc_program *p = NULL;
    if (gp) CHECK_EQ_INT(fc_compile(gp, &o, &p), FC_OK);
    if (p && pc->as_written) {
        char *plan = fc_program_plan_text(p);
        CHECK(plan && strstr(plan, pc->want));
        if (plan && !strstr(plan, pc->want)) fprintf(stderr, "%s: no '%s' in\n%s", pc->name, pc->want, plan);
        fc_free(plan);
    }
    if (!p) {
        fprintf(stderr, "%s: %s\n", pc->name, fc_last_error(ctx));
        fc_graph_free(gp);
        fc_graph_free(g);
        return;
    }
    int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_tensor in[8] = {{0}};
    for (int i = 0; i < nin && i < 8; i++) {
        CHECK_EQ_INT(fc_program_input(p, i, &in[i], NULL), FC_OK);
        in[i].data = calloc((size_t)(fc_tensor_numel(&in[i]) + 1), 4);
        fill(&in[i]);
    }
    for (int run = 0; run < 2; run++) {
        if (run == 1) {
            for (int i = 1; i < nin; i++) fill(&in[i]);
            CHECK_EQ_INT(fc_program_weights_changed(p), FC_OK);
        }
        fc_tensor got[4] = {{0}}, want[4] = {{0}};
        CHECK_EQ_INT(fc_program_run_host(p, in, nin, got, nout, NULL, 0), FC_OK);
        CHECK_EQ_INT(fc_run_reference(g, in, nin, want, nout), FC_OK);
        fc_output_diff diff[4];
        fc_status st = fc_compare_outputs(ctx, got, want, nout, diff);
        if (st != FC_OK) fprintf(stderr, "%s (%s, run %d): %s\n", pc->name, dev == FC_DEVICE_CUDA ? "cuda" : "cpu", run,
                                 fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        for (int k = 0; k < nout; k++) {
            fc_tensor_release(&got[k]);
            fc_tensor_release(&want[k]);
        }
    }
    for (int i = 0; i < nin; i++) free(in[i].data);
    fc_program_free(p);
    fc_graph_free(gp);
    fc_graph_free(g);
}

/* An allocation failing at every allocation of the pass in turn: out of
 * memory (and a poisoned graph), or the same padded graph once the pass
 * gets what it asks for. */
/* Every GEMM padded (the rule that pads always). */
static fc_status pad_always(fc_graph *g) {
    static const fc_pad_rule always = {1e12, 1e12, 1e12, 0, 1e30, 1, 0, 0, 0, 0, 0, 0, 0};
    return fc_pass_pad_with(g, &always);
}

static void test_alloc_failures(void) {
    /* K and N, a bias: every kind of rewrite but the zero block; then the
     * zero block, siblings. */
    CHECK(pass_through_alloc_failures(cases[5].ir, fc_pass_epilogue, pad_always) > 3);
    CHECK(pass_through_alloc_failures(cases[2].ir, fc_pass_epilogue, pad_always) > 3);
}

int main(void) {
    test_alloc_failures();
    fc_context *ctx = fc_context_new();
    const fc_device devs[2] = {FC_DEVICE_CPU, FC_DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        if (!fc_device_available(devs[d])) {
            printf("skipped: no %s device\n", d ? "CUDA" : "CPU");
            continue;
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            if (!cases[c].as_written || devs[d] == FC_DEVICE_CUDA) run_case(ctx, devs[d], &cases[c]);
    }
    fc_context_free(ctx);
    return check_report("test_pad");
}

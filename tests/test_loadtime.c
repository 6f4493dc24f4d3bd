/* test_loadtime.c - load-time kernels (passes/loadtime.c, docs/GEMM.md
 * "Weights computed at load time").
 *
 *  1. Plans (no GPU): which groups the pipeline marks load-time. The casts
 *     of an f32 model's weights under FC_PRECISION_BF16, the concatenation
 *     of sibling weights' casts and its K padding, the zero block of a
 *     padded N are; a cast of an input read as a GEMM's left operand, a
 *     cast a pointwise kernel also reads, a cast that is a graph result are
 *     not. Load-time results share memory with nothing (the memory plan),
 *     and are never batched with per-run groups.
 *  2. Numerics against the float64 reference of the graph as written, on
 *     the CPU backend and, with a GPU, on CUDA (where the load-time kernels
 *     run only when the weights are loaded): the relative L2 error within
 *     the autocast tolerance at every run, while a weight changes in place
 *     (with fc_program_weights_changed) and another moves to a new buffer
 *     with new values (no call: a moved parameter is noticed), across
 *     eager runs and replayed CUDA Graphs.
 */
#include "check.h"
#include "ir.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "splitmix.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;

/* Two sibling GEMMs over x's relu with f32 weights and K = 767 (padded to
 * 768 by the pipeline's rule: relu writes the padded rows, the joined cast
 * weights are padded at load), then a GEMM with a bias. */
static const char *const mlp_text =
    "graph f(%x: f32[512, 767], %wg: f32[767, 384], %wu: f32[767, 384], %w2: f32[384, 200], %b2: f32[200]) {\n"
    "  %r = relu(%x)\n  %g = matmul(%r, %wg)\n  %u = matmul(%r, %wu)\n  %s = sigmoid(%g)\n  %h = mul(%s, %u)\n"
    "  %y0 = matmul(%h, %w2)\n  %y = add(%y0, %b2)\n  return %y\n}\n";

static fc_graph *parse(const char *text, const fc_binding *b, int nb) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "<test>", text, strlen(text), NULL, b, nb, &g);
    if (st != FC_OK) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

/* ------------------------------------------------------------------ */
/* 1. Plans                                                            */
/* ------------------------------------------------------------------ */

typedef struct counts {
    int at_load, per_run, library, batched_at_load;
    bool concat_at_load, full_at_load;
} counts;

static bool has_op(const fc_group *gr, fc_op op) {
    for (int i = 0; i < gr->nnodes; i++)
        if (gr->nodes[i]->op == op) return true;
    return false;
}

/* Load-time results overlap no other value of the arena. */
static void check_memory(const fc_plan *plan) {
    fc_plan_classes c;
    CHECK_EQ_INT(fc_plan_classes_make(ctx, plan, &c), FC_OK);
    for (int i = 0; i < plan->ngroups; i++) {
        const fc_group *gr = plan->groups[i];
        if (!gr->loadtime || gr->kind == FC_GROUP_ALIAS) continue;
        for (int k = 0; k < gr->noutputs; k++) {
            const fc_value *v = gr->outputs[k];
            int64_t off = plan->offset[v->id], end = off + fc_value_bytes(v);
            CHECK(off >= 0);
            for (int id = 0; id < c.nvalues; id++) {
                const fc_value *w = c.val[id];
                if (!w || w->weak || plan->offset[id] < 0 || c.root[id] == c.root[v->id]) continue;
                int64_t wo = plan->offset[id], we = wo + fc_value_bytes(w);
                CHECK(we <= off || wo >= end);
            }
        }
    }
    fc_plan_classes_free(ctx, &c);
}

static counts plan_counts(fc_graph *g, fc_precision p) {
    counts n = {0};
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.precision = p;
    fc_plan plan;
    fc_status st = fc_pipeline(g, &fo, &plan);
    if (st != FC_OK) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK) return n;
    for (int i = 0; i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        /* The load-time launches run before every per-run one: what a
         * load-time group reads is a parameter or a load-time result. */
        for (int k = 0; gr->loadtime && k < gr->ninputs; k++) {
            const fc_value *v = gr->inputs[k];
            if (v->weak || !v->def) continue;
            int src = plan.group_of_node[v->def->id];
            CHECK(src >= 0 && src < i && plan.groups[src]->loadtime);
        }
        if (gr->kind == FC_GROUP_ALIAS) continue;
        if (gr->kind == FC_GROUP_LIBRARY) {
            CHECK(!gr->loadtime);
            n.library++;
        } else if (gr->loadtime) {
            n.at_load++;
            n.batched_at_load += gr->batch > 0;
            n.concat_at_load |= has_op(gr, FC_OP_CONCAT);
            n.full_at_load |= has_op(gr, FC_OP_FULL);
        } else {
            n.per_run++;
        }
    }
    check_memory(&plan);
    fc_plan_release(&plan);
    return n;
}

static void test_plans(void) {
    struct {
        const char *what, *text;
        fc_precision p;
        int at_load, per_run, library;
        bool concat, full;
    } cases[] = {
        {"siblings over cast weights, K padded at load", mlp_text, FC_PRECISION_BF16, 2, 2, 2, true, true},
        {"the same as written (f32): nothing to do at load", mlp_text, FC_PRECISION_AS_WRITTEN, 0, 2, 2, false, false},
        {"a cast input read as the left operand runs per run",
         "graph f(%x: f32[64, 64], %w: bf16[64, 64]) {\n  %xc = cast(%x, to=bf16)\n  %y = matmul(%xc, %w)\n"
         "  return %y\n}\n",
         FC_PRECISION_AS_WRITTEN, 0, 1, 1, false, false},
        {"a weight's cast that a kernel also reads runs per run",
         "graph f(%x: bf16[64, 64], %w: f32[64, 64]) {\n  %wc = cast(%w, to=bf16)\n  %y = matmul(%x, %wc)\n"
         "  %z = add(%y, %wc)\n  return %z\n}\n",
         FC_PRECISION_AS_WRITTEN, 0, -1, 1, false, false},
        {"a weight's cast that is a result runs per run",
         "graph f(%x: bf16[64, 64], %w: f32[64, 64]) {\n  %wc = cast(%w, to=bf16)\n  %y = matmul(%x, %wc)\n"
         "  return %y, %wc\n}\n",
         FC_PRECISION_AS_WRITTEN, 0, 1, 1, false, false},
        {"a weight's cast read only by the GEMM runs at load",
         "graph f(%x: bf16[64, 64], %w: f32[64, 64]) {\n  %wc = cast(%w, to=bf16)\n  %y = matmul(%x, %wc)\n"
         "  return %y\n}\n",
         FC_PRECISION_AS_WRITTEN, 1, 0, 1, false, false},
        {"the LM head at M = 128: the zero block of N at load, the slice of the result per run",
         "graph f(%x: bf16[128, 768], %w: bf16[50257, 768]) {\n  %wt = permute(%w, perm=[1, 0])\n"
         "  %y = matmul(%x, %wt)\n  return %y\n}\n",
         FC_PRECISION_AS_WRITTEN, 1, 1, 1, false, true},
        {"the LM head at M = 8192: not padded, written in place (runtime/cuda/cublaslt.h)",
         "graph f(%x: bf16[8192, 768], %w: bf16[50257, 768]) {\n  %wt = permute(%w, perm=[1, 0])\n"
         "  %y = matmul(%x, %wt)\n  return %y\n}\n",
         FC_PRECISION_AS_WRITTEN, 0, 0, 1, false, false},
        {"a folded batch norm's scale that a per-run bias is made from: the weight made from it runs per run",
         "graph f(%x: f32[1, 4, 5, 5], %w: f32[4, 4, 1, 1], %wdw: f32[4, 1, 3, 3], %s: f32[4], %b: f32[4],\n"
         "        %m: f32[4], %v: f32[4]) {\n  %e = conv(%x, %w, window=[1, 1, 1, 1, 0, 0, 0, 0])\n"
         "  %en = batch_norm(%e, %s, %b, %m, %v)\n  %d = conv(%en, %wdw, window=[1, 1, 1, 1, 1, 1, 1, 1], groups=4)\n"
         "  %dn = batch_norm(%d, %s, %b, %m, %v)\n  return %dn\n}\n",
         FC_PRECISION_AS_WRITTEN, 0, -1, 1, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fc_graph *g = parse(cases[i].text, NULL, 0);
        if (!g) continue;
        counts n = plan_counts(g, cases[i].p);
        bool ok = n.at_load == cases[i].at_load && (cases[i].per_run < 0 || n.per_run == cases[i].per_run) &&
                  n.library == cases[i].library && n.concat_at_load == cases[i].concat &&
                  n.full_at_load == cases[i].full;
        if (!ok)
            fprintf(stderr, "%s: %d at load, %d per run, %d library (concat %d, full %d)\n", cases[i].what, n.at_load,
                    n.per_run, n.library, n.concat_at_load, n.full_at_load);
        CHECK(ok);
        fc_graph_free(g);
    }
    /* The f32 GPT-2 block: its six weight and bias casts at load, none
     * batched (the bf16 biases' casts were a batch of their own). */
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/gpt2_block.ir", src_dir());
    char *text = read_file(path, NULL);
    CHECK(text != NULL);
    const fc_binding bt[] = {{"B", 2}, {"T", 64}};
    fc_graph *g = text ? parse(text, bt, 2) : NULL;
    if (g) {
        counts n = plan_counts(g, FC_PRECISION_BF16);
        CHECK_EQ_INT(n.at_load, 6);
        CHECK_EQ_INT(n.batched_at_load, 0);
        CHECK_EQ_INT(n.library, 4);
        fc_graph_free(g);
    }
    free(text);
}

/* ------------------------------------------------------------------ */
/* 2. Numerics                                                         */
/* ------------------------------------------------------------------ */

enum { NIN = 5 };
static uint64_t seed = 0x10ad;

/* Data of order one: x in [-1, 1), weights scaled by 1/sqrt(fan-in). */
static void fill(fc_tensor *t, bool weight) {
    int64_t n = fc_tensor_numel(t);
    double scale = weight && t->rank == 2 ? 1.0 / sqrt((double)t->shape[0]) : 1.0;
    for (int64_t e = 0; e < n; e++) ((float *)t->data)[e] = (float)((2 * splitmix_uniform(&seed) - 1) * scale);
}

/* ||got - want|| / ||want|| of f32 tensors. */
static double rel_l2(const float *got, const fc_tensor *want) {
    double num = 0, den = 0;
    for (int64_t e = 0; e < fc_tensor_numel(want); e++) {
        double w = ((const float *)want->data)[e], d = got[e] - w;
        num += d * d;
        den += w * w;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Within bf16 autocast's tolerance (docs/PRECISION.md), and further than
 * f32 would be: the low precision was used. */
static void check_close(const char *what, int run, const float *got, fc_graph *g, const fc_tensor *in) {
    fc_tensor want;
    CHECK_EQ_INT(fc_run_reference(g, in, NIN, &want, 1), FC_OK);
    double e = rel_l2(got, &want);
    if (!(e <= 1e-2 && e > 1e-5)) fprintf(stderr, "%s, run %d: relative L2 error %.3g\n", what, run, e);
    CHECK(e <= 1e-2 && e > 1e-5);
    fc_tensor_release(&want);
}

static fc_program *compile_bf16(fc_graph *g, fc_device dev) {
    fc_compile_options o = options_for(dev, FC_PRECISION_BF16);
    return compile_checked(g, &o);
}

static void make_inputs(fc_program *p, fc_tensor *in) {
    for (int i = 0; i < NIN; i++) {
        CHECK_EQ_INT(fc_program_input(p, i, &in[i], NULL), FC_OK);
        in[i].data = malloc((size_t)fc_tensor_numel(&in[i]) * 4 + 4);
        fill(&in[i], i > 0);
    }
}

static void test_cpu(fc_graph *g) {
    fc_program *p = compile_bf16(g, FC_DEVICE_CPU);
    if (!p) return;
    fc_tensor in[NIN];
    make_inputs(p, in);
    for (int run = 0; run < 3; run++) {
        if (run == 1) {
            fill(&in[1], true);
            CHECK_EQ_INT(fc_program_weights_changed(p), FC_OK);
        }
        if (run == 2) fill(&in[3], true);
        fc_tensor got;
        CHECK_EQ_INT(fc_program_run_host(p, in, NIN, &got, 1, NULL, 0), FC_OK);
        check_close("cpu", run, got.data, g, in);
        fc_tensor_release(&got);
    }
    for (int i = 0; i < NIN; i++) free(in[i].data);
    fc_program_free(p);
}

static void test_cuda(fc_graph *g) {
    fc_cuda_device *dev = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
    fc_program *p = dev ? compile_bf16(g, FC_DEVICE_CUDA) : NULL;
    if (!p) {
        fc_cuda_device_close(dev);
        return;
    }
    fc_tensor in[NIN], out;
    make_inputs(p, in);
    CUdeviceptr buf[NIN] = {0}, moved = 0, y = 0;
    size_t bytes[NIN];
    for (int i = 0; i < NIN; i++) {
        bytes[i] = (size_t)fc_tensor_numel(&in[i]) * 4;
        CHECK_EQ_INT(fc_cuda_alloc(dev, bytes[i], &buf[i]), FC_OK);
        CHECK_EQ_INT(fc_cuda_upload(dev, buf[i], in[i].data, bytes[i]), FC_OK);
    }
    CHECK_EQ_INT(fc_program_output(p, 0, &out), FC_OK);
    size_t ybytes = (size_t)fc_tensor_numel(&out) * 4;
    float *host_y = malloc(ybytes);
    CHECK_EQ_INT(fc_cuda_alloc(dev, ybytes, &y), FC_OK);
    CHECK_EQ_INT(fc_cuda_alloc(dev, bytes[3], &moved), FC_OK);
    for (int run = 0; run < 8; run++) {
        if (run == 3) { /* wg in place, and the call */
            fill(&in[1], true);
            CHECK_EQ_INT(fc_cuda_upload(dev, buf[1], in[1].data, bytes[1]), FC_OK);
            CHECK_EQ_INT(fc_program_weights_changed(p), FC_OK);
        }
        if (run == 5) { /* w2 at a new address with new values, no call */
            fill(&in[3], true);
            CHECK_EQ_INT(fc_cuda_upload(dev, moved, in[3].data, bytes[3]), FC_OK);
            CUdeviceptr t = buf[3];
            buf[3] = moved;
            moved = t;
        }
        if (run == 6) { /* x (per-run data) changes in place: no call needed */
            fill(&in[0], false);
            CHECK_EQ_INT(fc_cuda_upload(dev, buf[0], in[0].data, bytes[0]), FC_OK);
        }
        void *args[NIN], *res[1] = {(void *)(uintptr_t)y};
        for (int i = 0; i < NIN; i++) args[i] = (void *)(uintptr_t)buf[i];
        CHECK_EQ_INT(fc_run(p, args, NIN, res, 1, dev->stream), FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        CHECK_EQ_INT(fc_cuda_download(dev, host_y, y, ybytes), FC_OK);
        check_close("cuda", run, host_y, g, in);
    }
    fc_run_stats s;
    fc_program_stats(p, &s);
    printf("cuda: %llu runs, %llu replays\n", (unsigned long long)s.runs, (unsigned long long)s.graph_replays);
    CHECK(s.graph_replays >= 5);
    for (int i = 0; i < NIN; i++) {
        fc_cuda_free(dev, buf[i]);
        free(in[i].data);
    }
    fc_cuda_free(dev, moved);
    fc_cuda_free(dev, y);
    free(host_y);
    fc_program_free(p);
    fc_cuda_device_close(dev);
}

int main(void) {
    ctx = fc_context_new();
    test_plans();
    fc_graph *g = parse(mlp_text, NULL, 0);
    if (g && fc_device_available(FC_DEVICE_CPU)) test_cpu(g);
    else printf("skipped: no CPU backend\n");
    if (g && fc_device_available(FC_DEVICE_CUDA)) test_cuda(g);
    else printf("skipped: no CUDA device\n");
    fc_graph_free(g);
    fc_context_free(ctx);
    return check_report("test_loadtime");
}

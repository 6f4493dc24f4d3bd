/* test_conv_library.c - convolutions through a convolution library
 * (conv_cl, run by cuDNN on CUDA), without a GPU:
 *
 *   - the lowering decisions: with fc_fuse_options.conv_library each 2-D
 *     convolution that is not depthwise is one conv_cl library group with
 *     its bias, residual and ReLU folded in, and no im2col GEMM is left;
 *     without it, none is made;
 *   - the rewritten graphs compute what the graphs of tests/conv/ did, on
 *     the reference interpreter (which runs conv_cl as its definition);
 *   - the description a launch carries (lower/conv_desc.h) and its bounds
 *     check, and the on-disk record of a plan choice (runtime/cuda/cudnn.h);
 *   - a CUDA compile (NVRTC only) of the bf16 ResNet block: its plan names
 *     one cuDNN call per convolution and says which path convolutions took.
 */
#include "check.h"
#include "conv_inputs.h"
#include "fusec.h"
#include "ir.h"
#include "lower/conv_desc.h"
#include "runtime/cuda/program.h"
#include "passes/passes.h"
#include "runtime/cuda/cudnn.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <string.h>

static fc_context *ctx;

static fc_graph *load(const char *file) {
    const char *src = getenv("FUSEC_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", file);
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, NULL, NULL, 0, &g) != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
    CHECK(g != NULL);
    return g;
}

static int count_op(const fc_graph *g, fc_op op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += !g->nodes[i]->dead && g->nodes[i]->op == op;
    return n;
}

/* file through the whole pipeline with options fo: its graph, with the
 * plan in *plan, or NULL (the failure checked and said). */
static fc_graph *planned(const char *file, const fc_fuse_options *fo, fc_plan *plan) {
    fc_graph *g = load(file);
    if (!g) return NULL;
    fc_status st = fc_pipeline(g, fo, plan);
    CHECK_EQ_INT(st, FC_OK);
    if (st == FC_OK) return g;
    fprintf(stderr, "%s: %s\n", file, fc_last_error(ctx));
    fc_graph_free(g);
    return NULL;
}

/* The epilogue entries of conv_cl node n. */
static const int64_t *epi(const fc_node *n) { return n->a.list + n->a.nlist - FC_CONV_EPI_LEN; }

/* The ResNet block through the whole pass pipeline with a library: six
 * convolutions, six conv_cl groups, their tails folded in. */
static void test_plan_decisions(void) {
    /* off by default: the CPU backend's compile reads the default (a
     * conv_cl there has no library to run it) */
    fc_fuse_options d;
    memset(&d, 0xff, sizeof d);
    fc_fuse_options_default(&d);
    CHECK(!d.conv_library);
    for (int lib = 0; lib < 2; lib++) {
        fc_fuse_options fo = d; /* the default, and the library or not */
        fo.conv_library = lib;
        fc_plan plan;
        fc_graph *g = planned("tests/conv/resnet_block_bf16.ir", &fo, &plan);
        if (!g) continue;
        int convs = 0, gemms = 0, relu = 0, residual = 0, bias = 0;
        for (int i = 0; i < plan.ngroups; i++) {
            const fc_group *gr = plan.groups[i];
            for (int k = 0; k < gr->nnodes; k++) {
                const fc_node *n = gr->nodes[k];
                if (n->op == FC_OP_GEMM || n->op == FC_OP_MATMUL) gemms++;
                if (n->op != FC_OP_CONV_CL) continue;
                convs++;
                CHECK(gr->kind == FC_GROUP_LIBRARY && gr->nnodes == 1);
                bias += epi(n)[FC_CONV_BIAS] != 0;
                residual += epi(n)[FC_CONV_RESIDUAL] != 0;
                relu += epi(n)[FC_CONV_ACT] == FC_GEMM_ACT_RELU;
            }
        }
        if (lib) {
            /* c0..c4 and the shortcut (the stem c0's 3 input channels
             * padded to 8); every batch norm folded into a bias; c2 and
             * c4 take the residual; all but the shortcut's end in relu */
            CHECK_EQ_INT(convs, 6);
            CHECK_EQ_INT(bias, 6);
            CHECK_EQ_INT(residual, 2);
            CHECK_EQ_INT(relu, 5);
            CHECK_EQ_INT(gemms, 1); /* the classifier */
        } else {
            CHECK_EQ_INT(convs, 0);
            CHECK(gemms > 1);
        }
        fc_plan_release(&plan);
        fc_graph_free(g);
    }
}

/* The graphs of tests/conv/ (f32) after the library lowering for
 * precision p (no autocast: the operands stay f32) and the epilogue: the
 * same values as before, to f32's rounding (conv_cl rounds once where the
 * graph rounded after the convolution and each step). */
static void test_values_kept(const char *file, bool fold, fc_precision p, int want_calls) {
    char path[256];
    snprintf(path, sizeof path, "tests/conv/%s", file);
    fc_graph *g0 = load(path), *g1 = load(path);
    if (!g0 || !g1) {
        fc_graph_free(g0);
        fc_graph_free(g1);
        return;
    }
    fc_status st = fold ? fc_pass_fold_batch_norm(g1) : FC_OK;
    if (!st) st = fc_pass_lower_conv_library(g1, p);
    if (!st) st = fc_pass_layout(g1);
    if (!st) st = fc_pass_canonicalize(g1);
    if (!st) st = fc_pass_decompose(g1);
    if (!st) st = fc_pass_canonicalize(g1);
    if (!st) st = fc_pass_epilogue(g1);
    if (!st) st = fc_verify(g1);
    if (st) fprintf(stderr, "%s: %s\n", file, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(count_op(g1, FC_OP_CONV_CL), want_calls);
    CHECK_EQ_INT(count_op(g1, FC_OP_CONV), 0);
    int nout = fc_graph_num_outputs(g0);
    fc_tensor want[32] = {0}, got[32] = {0};
    CHECK(nout <= 32);
    if (nout > 32) nout = 32;
    CHECK_EQ_INT(conv_run_ref(g0, FC_F32, want, nout), FC_OK);
    CHECK_EQ_INT(conv_run_ref(g1, FC_F32, got, nout), FC_OK);
    for (int o = 0; o < nout; o++) {
        int64_t n = fc_tensor_numel(&want[o]), bad = 0;
        CHECK_EQ_INT(fc_tensor_numel(&got[o]), n);
        for (int64_t k = 0; k < n && got[o].data && want[o].data; k++) {
            double a = ((float *)want[o].data)[k], b = ((float *)got[o].data)[k];
            if (!(fabs(a - b) <= 1e-4 * (1 + fabs(a)))) bad++;
        }
        if (bad) fprintf(stderr, "%s: output %d differs in %lld elements\n", file, o, (long long)bad);
        CHECK(bad == 0);
        fc_tensor_release(&want[o]);
        fc_tensor_release(&got[o]);
    }
    fc_graph_free(g0);
    fc_graph_free(g1);
}

/* The description of the golden graph's second conv_cl, and what its
 * bounds check refuses. */
static void test_desc(void) {
    fc_graph *g = load("tests/passes/conv_library.ir");
    if (!g) return;
    fc_status st = fc_pass_lower_conv_library(g, FC_PRECISION_AS_WRITTEN);
    if (!st) st = fc_pass_layout(g);
    if (!st) st = fc_pass_canonicalize(g);
    if (!st) st = fc_pass_epilogue(g);
    CHECK_EQ_INT(st, FC_OK);
    const fc_node *n = NULL;
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == FC_OP_CONV_CL) n = g->nodes[i];
    CHECK(n != NULL);
    if (!n) {
        fc_graph_free(g);
        return;
    }
    char buf[160];
    CHECK_STR(fc_conv_describe(n, buf, sizeof buf), "conv_cl 1x1/s1 [bias,residual,relu] -> bf16");
    /* arguments: the operands and the result, in an order of our own */
    int ids[5] = {n->out[0]->id, n->in[3]->id, n->in[2]->id, n->in[1]->id, n->in[0]->id};
    fc_conv_desc d;
    CHECK_EQ_INT(fc_conv_desc_of(ctx, n, ids, 5, &d), FC_OK);
    CHECK_EQ_INT(d.x_arg, 4);
    CHECK_EQ_INT(d.w_arg, 3);
    CHECK_EQ_INT(d.bias_arg, 2);
    CHECK_EQ_INT(d.residual_arg, 1);
    CHECK_EQ_INT(d.out_arg, 0);
    CHECK(d.N == 2 && d.H == 6 && d.W == 6 && d.C == 8 && d.M == 8 && d.kh == 1 && d.OH == 6 && d.groups == 1);
    CHECK(d.has_bias && d.has_residual && d.act == FC_GEMM_ACT_RELU && d.dt == FC_BF16 && d.out == FC_BF16);
    CHECK(fc_conv_desc_flops(&d) == 2.0 * 2 * 6 * 6 * 8 * 8);
    int64_t act = 2 * 6 * 6 * 8 * 2, bytes[5] = {act, act, 16, 128, act};
    char why[160];
    CHECK(fc_conv_desc_valid(&d, 5, bytes, why, sizeof why));
    bytes[4] = act - 2; /* x's buffer one element short */
    CHECK(!fc_conv_desc_valid(&d, 5, bytes, why, sizeof why));
    bytes[4] = act;
    fc_conv_desc bad = d;
    bad.OH = 7; /* not what the geometry gives */
    CHECK(!fc_conv_desc_valid(&bad, 5, bytes, why, sizeof why));
    bad = d;
    bad.bias_arg = 9; /* out of range */
    CHECK(!fc_conv_desc_valid(&bad, 5, bytes, why, sizeof why));
    bad = d;
    bad.has_bias = false; /* flags and positions disagree */
    CHECK(!fc_conv_desc_valid(&bad, 5, bytes, why, sizeof why));
    int missing[4] = {ids[0], ids[1], ids[2], ids[3]};
    CHECK_EQ_INT(fc_conv_desc_of(ctx, n, missing, 4, &d), FC_ERR_USAGE);
    fc_graph_free(g);
}

/* A plan choice's record: it decodes under its own key only, whole. */
static void test_record(void) {
    fc_conv_desc d = {.dt = FC_BF16, .out = FC_BF16, .N = 32, .H = 56, .W = 56, .C = 64, .M = 64, .kh = 3, .kw = 3,
                      .groups = 1, .OH = 56, .OW = 56, .stride = {1, 1}, .dilation = {1, 1}, .pad_begin = {1, 1},
                      .pad_end = {1, 1}, .has_bias = true, .act = FC_GEMM_ACT_RELU};
    fc_cuda_device_info dev = {.cc_major = 9, .cc_minor = 0, .sm_count = 132, .driver_version = 13000};
    snprintf(dev.name, sizeof dev.name, "NVIDIA H200");
    fc_cache_key k = fc_cudnn_choice_key(&d, &dev, 91900), k2;
    fc_cudnn_choice c = {.engine = 7, .ms = 0.0421875, .nknobs = 2, .knob_type = {3, 5}, .knob_value = {1, 4}}, back;
    uint8_t rec[FC_CUDNN_RECORD_MAX];
    size_t n = fc_cudnn_choice_encode(&k, &c, rec);
    CHECK_EQ_INT((int)n, 48 + 2 * 16);
    CHECK(fc_cudnn_choice_decode(&k, rec, n, &back));
    CHECK(back.engine == 7 && back.nknobs == 2 && back.knob_type[1] == 5 && back.knob_value[1] == 4);
    /* the measured time comes back to the nanosecond */
    CHECK(back.ms > 0.0421865 && back.ms < 0.0421885);
    CHECK(!fc_cudnn_choice_decode(&k, rec, n - 1, &back));
    /* A record of version 1 (no time: the heuristic's first answer,
     * untimed) is not read as one of this layout: its plan is searched
     * and timed again. */
    uint8_t old[FC_CUDNN_RECORD_MAX];
    memcpy(old, rec, n);
    old[8] = 1;
    CHECK(!fc_cudnn_choice_decode(&k, old, n, &back));
    /* nor is one without a measured time */
    memcpy(old, rec, n);
    memset(old + 36, 0, 8);
    CHECK(!fc_cudnn_choice_decode(&k, old, n, &back));
    /* a time too small to store is stored as 1 ns, never as "unmeasured" */
    fc_cudnn_choice tiny = c;
    tiny.ms = 1e-9;
    CHECK(fc_cudnn_choice_decode(&k, rec, fc_cudnn_choice_encode(&k, &tiny, rec), &back) && back.ms > 0);
    n = fc_cudnn_choice_encode(&k, &c, rec);
    d.has_residual = true; /* another problem: another key */
    k2 = fc_cudnn_choice_key(&d, &dev, 91900);
    CHECK(!fc_cache_key_equal(&k, &k2));
    CHECK(!fc_cudnn_choice_decode(&k2, rec, n, &back));
    d.has_residual = false;
    k2 = fc_cudnn_choice_key(&d, &dev, 91901); /* another cuDNN */
    CHECK(!fc_cache_key_equal(&k, &k2));
    k2 = fc_cudnn_choice_key(&d, &dev, 91900);
    CHECK(fc_cache_key_equal(&k, &k2)); /* the key is a function of the problem alone */
    rec[44] = FC_CUDNN_MAX_KNOBS + 1; /* a knob count over the limit */
    CHECK(!fc_cudnn_choice_decode(&k, rec, n, &back));
}

/* The plan text of file compiled for CUDA at precision p (a CUDA compile
 * needs NVRTC only), or NULL when this build or machine cannot compile
 * for CUDA (said so). */
static char *cuda_plan(const char *file, fc_precision p) {
    fc_graph *g = load(file);
    if (!g) return NULL;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.precision = p;
    fc_program *prog = NULL;
    fc_status st = fc_compile(g, &o, &prog);
    char *plan = NULL;
    if (st == FC_ERR_UNSUPPORTED) {
        printf("skipped: no CUDA compile here (%s)\n", fc_last_error(ctx));
    } else {
        CHECK_EQ_INT(st, FC_OK);
        plan = prog ? fc_program_plan_text(prog) : NULL;
        CHECK(plan != NULL);
    }
    fc_program_free(prog);
    fc_graph_free(g);
    return plan;
}

/* The plan of the bf16 ResNet block has one cuDNN call per convolution
 * when cuDNN loads, and says so; else it says why its convolutions are
 * im2col and GEMMs. */
static void test_compile_plan(void) {
    char *plan = cuda_plan("tests/conv/resnet_block_bf16.ir", FC_PRECISION_AS_WRITTEN);
    if (!plan) return;
    int calls = 0;
    for (const char *s = plan; (s = strstr(s, "library conv_cl")); s++) calls++;
    char why[256];
    if (fc_cudnn_available(NULL, why, sizeof why)) {
        CHECK_EQ_INT(calls, 6);
        CHECK(strstr(plan, "convolutions: cuDNN") != NULL);
    } else {
        CHECK_EQ_INT(calls, 0);
        CHECK(strstr(plan, "convolutions: im2col and GEMMs") != NULL);
        printf("cuDNN not usable here: %s\n", why);
    }
    fc_free(plan);
}

/* The group of plan that writes v, or NULL. */
static const fc_group *writer(const fc_plan *plan, const fc_value *v) {
    for (int i = 0; i < plan->ngroups; i++)
        for (int k = 0; k < plan->groups[i]->noutputs; k++)
            if (plan->groups[i]->outputs[k] == v) return plan->groups[i];
    return NULL;
}

static bool group_has(const fc_group *gr, fc_op op) {
    for (int k = 0; gr && k < gr->nnodes; k++)
        if (gr->nodes[k]->op == op) return true;
    return false;
}

/* The f32 ResNet block compiled with --precision=bf16 and a library: each
 * convolution is a conv_cl whose operands autocast rounded to bf16 and
 * whose result (its bias, residual and relu folded in) is bf16, as
 * torch.autocast's convolutions return; the description the CUDA runtime
 * hands cuDNN accepts it (16-bit, channels per group and outputs in
 * multiples of 8). The stem's 3 channels are padded to 8 by the kernel
 * that makes its input channels-last (the permute and the pad in one
 * group), its weight at load time. No cast is a kernel of its own. As
 * written (f32), no convolution goes to the library. */
static void test_autocast_plan(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.conv_library = true;
        fo.precision = bf16 ? FC_PRECISION_BF16 : FC_PRECISION_AS_WRITTEN;
        fc_plan plan;
        fc_graph *g = planned("tests/conv/resnet_block.ir", &fo, &plan);
        if (!g) continue;
        int convs = 0, gemms = 0, padded = 0, low_out = 0, cast_kernels = 0;
        for (int i = 0; i < plan.ngroups; i++) {
            const fc_group *gr = plan.groups[i];
            bool only_casts = gr->kind == FC_GROUP_POINTWISE && !gr->loadtime;
            for (int k = 0; k < gr->nnodes; k++) {
                const fc_node *n = gr->nodes[k];
                only_casts = only_casts && (n->op == FC_OP_CAST || n->op == FC_OP_RESHAPE || n->op == FC_OP_PERMUTE);
                if (n->op == FC_OP_GEMM || n->op == FC_OP_MATMUL) gemms++;
                if (n->op != FC_OP_CONV_CL) continue;
                convs++;
                const fc_value *x = n->in[0], *w = n->in[1], *y = n->out[0];
                CHECK(x->dtype == FC_BF16 && w->dtype == FC_BF16);
                CHECK(x->dims[3] % 8 == 0 && w->dims[0] % 8 == 0);
                low_out += y->dtype == FC_BF16;
                int ids[5], nids = 0;
                for (int j = 0; j < n->nin; j++) ids[nids++] = n->in[j]->id;
                ids[nids++] = y->id;
                fc_conv_desc d;
                CHECK_EQ_INT(fc_conv_desc_of(ctx, n, ids, nids, &d), FC_OK);
                int64_t bytes[5];
                for (int j = 0; j < nids; j++) {
                    const fc_value *v = j < n->nin ? n->in[j] : y;
                    int64_t e = 1;
                    for (int r = 0; r < v->rank; r++) e *= v->dims[r];
                    bytes[j] = e * (int64_t)fc_dtype_size(v->dtype);
                }
                char why[160] = "";
                CHECK(fc_conv_desc_valid(&d, nids, bytes, why, sizeof why));
                if (why[0]) fprintf(stderr, "conv_cl refused: %s\n", why);
                if (w->dims[3] == 8 && x->dims[3] == 8 && d.kh == 3 && d.stride[0] == 2 && d.M == 8) {
                    /* the stem: [N, 17, 17, 8] made by one kernel from x */
                    const fc_group *xw = writer(&plan, x);
                    CHECK(xw && xw->kind == FC_GROUP_POINTWISE && !xw->loadtime);
                    CHECK(group_has(xw, FC_OP_PERMUTE) && group_has(xw, FC_OP_CONCAT));
                    const fc_group *ww = writer(&plan, w);
                    CHECK(ww && ww->loadtime);
                    padded++;
                }
            }
            bool reads_params = true; /* the graph's input is data: cast at every run */
            for (int k = 0; k < gr->ninputs; k++) reads_params = reads_params && gr->inputs[k]->param_index >= 0;
            cast_kernels += only_casts && gr->nnodes > 0 && !reads_params;
        }
        if (bf16) {
            CHECK_EQ_INT(convs, 6);
            CHECK_EQ_INT(low_out, 6);
            CHECK_EQ_INT(padded, 1);
            CHECK_EQ_INT(gemms, 1); /* the classifier */
            CHECK_EQ_INT(cast_kernels, 0);
        } else {
            CHECK_EQ_INT(convs, 0);
        }
        fc_plan_release(&plan);
        fc_graph_free(g);
    }
}

/* A CUDA compile (NVRTC only) of the f32 ResNet block under bf16: one
 * cuDNN call per convolution, each writing bf16, none im2col, when cuDNN
 * loads. */
static void test_autocast_compile_plan(void) {
    char *plan = cuda_plan("tests/conv/resnet_block.ir", FC_PRECISION_BF16);
    char why[256];
    if (plan && fc_cudnn_available(NULL, why, sizeof why)) {
        int calls = 0, low = 0;
        for (const char *s = plan; (s = strstr(s, "library conv_cl")); s++) {
            const char *eol = strchr(s, '\n'), *to = strstr(s, "-> bf16");
            calls++;
            low += to && (!eol || to < eol);
        }
        CHECK_EQ_INT(calls, 6);
        CHECK_EQ_INT(low, 6);
        CHECK(strstr(plan, "library gemm ops: gemm[bias]") != NULL); /* the classifier alone */
        CHECK(strstr(plan, "; of 6 2-D convolutions: 6 through cuDNN, 0 depthwise (elementwise), 0 im2col\n"));
    }
    fc_free(plan);
}

/* Each cuDNN convolution of a CUDA compile has its bytes and FLOPs for
 * the profile's GB/s and TFLOP/s (its FLOPs were 0: the profile could not
 * show a library convolution far under the device's peak). */
static void test_conv_costs(void) {
    char why[256];
    if (!fc_cudnn_available(NULL, why, sizeof why)) return;
    fc_graph *g = load("tests/conv/resnet_block_bf16.ir");
    if (!g) return;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    fc_program *prog = NULL;
    fc_status st = fc_compile(g, &o, &prog);
    if (st == FC_ERR_UNSUPPORTED) printf("skipped: no CUDA compile here (%s)\n", fc_last_error(ctx));
    else CHECK_EQ_INT(st, FC_OK);
    const fc_program_desc *d = prog ? fc_program_desc_of(prog) : NULL;
    int convs = 0;
    for (int i = 0; d && i < d->src.nlaunches; i++) {
        const fc_conv_desc *c = fc_program_conv(d, i);
        if (!c) continue;
        convs++;
        const fc_launch *l = &d->src.launches[i];
        CHECK(l->flops > 0 && l->flops == fc_conv_desc_flops(c));
        /* at least x, the weight and y, each once */
        const double least = (double)(c->N * c->H * c->W * c->C + c->M * c->kh * c->kw * c->C / c->groups) * 2 +
                             (double)(c->N * c->OH * c->OW * c->M) * (double)fc_dtype_size(c->out);
        CHECK((double)l->bytes >= least);
    }
    if (d) CHECK_EQ_INT(convs, 6);
    fc_program_free(prog);
    fc_graph_free(g);
}

/* With a GPU and cuDNN: a plan is chosen by timing, once. The first
 * handle asks the heuristics, times its candidates and stores the choice
 * with its time; a second handle on the same cache builds the same
 * engine from the record, asks nothing and times nothing, and reports the
 * stored time. The problem is one of EfficientNet-B0's expansions (a 1x1
 * convolution of bf16 into f32 with a bias), which on the H200 has a
 * single engine that finalizes, far below the device's peak. Prints each
 * plan's time against the convolution's FLOP floor. */
static void test_gpu_search(void) {
    char why[256];
    if (!fc_cuda_available(ctx) || !fc_cudnn_available(NULL, why, sizeof why)) {
        printf("skipped: the plan search needs a CUDA device and cuDNN (%s)\n",
               fc_cuda_available(ctx) ? why : fc_last_error(ctx));
        return;
    }
    char root[512];
    if (!temp_dir(root, sizeof root, "fusec-conv-search")) return;
    fc_cache_options o = {.dir = root, .mode = FC_CACHE_RW};
    fc_cache *c = NULL;
    fc_cuda_device *dev = NULL;
    CHECK_EQ_INT(fc_cache_open(ctx, &o, &c), FC_OK);
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
    const fc_conv_desc probs[] = {
        {.dt = FC_BF16, .out = FC_F32, .N = 32, .H = 28, .W = 28, .C = 40, .M = 240, .kh = 1, .kw = 1, .groups = 1,
         .OH = 28, .OW = 28, .stride = {1, 1}, .dilation = {1, 1}, .has_bias = true},
        {.dt = FC_BF16, .out = FC_BF16, .N = 32, .H = 56, .W = 56, .C = 64, .M = 64, .kh = 3, .kw = 3, .groups = 1,
         .OH = 56, .OW = 56, .stride = {1, 1}, .dilation = {1, 1}, .pad_begin = {1, 1}, .pad_end = {1, 1},
         .has_bias = true, .act = FC_GEMM_ACT_RELU},
    };
    const int np = (int)(sizeof probs / sizeof probs[0]);
    fc_cudnn_plan_stat first[2];
    for (int pass = 0; pass < 2 && c && dev; pass++) {
        fc_cudnn *h = NULL;
        CHECK_EQ_INT(fc_cudnn_create(ctx, dev, c, &h), FC_OK);
        for (int i = 0; h && i < np; i++) {
            CHECK_EQ_INT(fc_cudnn_prepare(h, ctx, &probs[i], 4u << 20), FC_OK);
            fc_cudnn_plan_stat ps;
            CHECK(fc_cudnn_plan_info(h, &probs[i], &ps));
            CHECK(ps.ms > 0);
            if (pass == 0) {
                first[i] = ps;
                CHECK(ps.candidates >= 1);
            } else {
                CHECK_EQ_INT(ps.candidates, 0); /* from the record */
                CHECK(ps.engine == first[i].engine);
                CHECK(fabs(ps.ms - first[i].ms) < 1e-5);
            }
            const double tflops = fc_conv_desc_flops(&probs[i]) / (ps.ms * 1e-3) * 1e-12;
            printf("conv %d pass %d: engine %lld, %.4f ms (%.1f TFLOP/s), %d candidates timed\n", i, pass,
                   (long long)ps.engine, ps.ms, tflops, ps.candidates);
        }
        if (pass == 0) CHECK(fc_cudnn_heuristic_queries(h) >= np);
        else CHECK_EQ_INT(fc_cudnn_heuristic_queries(h), 0);
        CHECK_EQ_INT(fc_cudnn_disk_hits(h), pass == 0 ? 0 : np);
        fc_cudnn_destroy(h);
    }
    fc_cuda_device_close(dev);
    fc_cache_close(c);
    rm_rf(root);
}

int main(void) {
    ctx = fc_context_new();
    test_plan_decisions();
    /* f32 convolutions stay im2col and a GEMM (cuDNN's f32 engines run
     * TF32): these f32 graphs keep their values through that lowering;
     * test_plan_decisions has the bf16 ones' conv_cl calls */
    test_values_kept("resnet_block.ir", true, FC_PRECISION_AS_WRITTEN, 0);
    test_values_kept("resnet_block.ir", false, FC_PRECISION_AS_WRITTEN, 0);
    test_values_kept("depthwise_block.ir", true, FC_PRECISION_AS_WRITTEN, 0);
    test_values_kept("conv_geometry.ir", false, FC_PRECISION_AS_WRITTEN, 0);
    /* lowered for bf16 (what autocast will round), computed in f32 on the
     * reference: every convolution of the ResNet block is one conv_cl,
     * the stem's with its 3 channels padded to 8; the depthwise block's
     * 1x1 convolutions with 8 and 24 channels (not the SE block's 6) */
    test_values_kept("resnet_block.ir", true, FC_PRECISION_BF16, 6);
    test_values_kept("resnet_block.ir", false, FC_PRECISION_BF16, 6);
    test_values_kept("depthwise_block.ir", true, FC_PRECISION_BF16, 2);
    test_values_kept("conv_geometry.ir", false, FC_PRECISION_BF16, 0);
    test_desc();
    test_record();
    test_compile_plan();
    test_autocast_plan();
    test_autocast_compile_plan();
    test_conv_costs();
    test_gpu_search();
    fc_context_free(ctx);
    return check_report("test_conv_library");
}

/* test_conv_ref.c - the convolution family, pooling, batch norm, pad and
 * resize: the reference interpreter against values computed by hand, the
 * builders' geometry (auto_pad, defaults) and errors, and the passes that
 * rewrite these ops (fold_batch_norm, lower_conv, layout) against the
 * reference on the graph before them, in f64 so that any difference is a
 * bug and not rounding.
 */
#include "check.h"
#include "conv_inputs.h"
#include "fusec.h"
#include "ir.h"
#include "passes/passes.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;

/* Run one-output f64 graph `ir` on inputs (each `n` doubles of the
 * parameter's shape) with the reference and compare with want[0..nwant). */
static void expect(int line, const char *ir, int nin, const double *const *in, const double *want, int nwant) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, "t.ir", ir, strlen(ir), NULL, NULL, 0, &g) != FC_OK) {
        fprintf(stderr, "test_conv_ref.c:%d: %s\n", line, fc_last_error(ctx));
        check_failed++;
        return;
    }
    fc_tensor t[8], out = {0};
    for (int i = 0; i < nin; i++) {
        fc_value *p = fc_graph_param(g, i);
        t[i] = (fc_tensor){.dtype = FC_F64, .rank = fc_value_rank(p), .data = (void *)in[i]};
        for (int d = 0; d < t[i].rank; d++) t[i].shape[d] = fc_value_dim(p, d);
    }
    if (fc_run_reference(g, t, nin, &out, 1) != FC_OK) {
        fprintf(stderr, "test_conv_ref.c:%d: %s\n", line, fc_last_error(ctx));
        check_failed++;
    } else {
        CHECK_EQ_INT(fc_tensor_numel(&out), nwant);
        for (int i = 0; i < nwant && i < fc_tensor_numel(&out); i++) {
            double got = ((double *)out.data)[i];
            if (fabs(got - want[i]) > 1e-12) {
                fprintf(stderr, "test_conv_ref.c:%d: element %d is %.17g, want %.17g\n", line, i, got, want[i]);
                check_failed++;
            } else {
                check_passed++;
            }
        }
        fc_tensor_release(&out);
    }
    fc_graph_free(g);
}
#define V(...) ((const double[]){__VA_ARGS__})
#define IN(...) ((const double *const[]){__VA_ARGS__})
#define EXPECT(ir, nin, in, want) expect(__LINE__, ir, nin, in, want, (int)(sizeof want / sizeof want[0]))

static void test_conv_values(void) {
    static const double x5[] = {1, 2, 3, 4, 5}, x16[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    /* 1-D, pads 1 1, bias: y[o] = x[o-1] - x[o+1] + 1 */
    static const double w1[] = {1, 0, -1}, b1[] = {1}, want1[] = {-1, -1, -1, -1, 5};
    EXPECT("graph f(%x: f64[1, 1, 5], %w: f64[1, 1, 3], %b: f64[1]) {\n"
           "  %y = conv(%x, %w, %b, window=[1, 1, 1, 1])\n  return %y\n}\n",
           3, IN(x5, w1, b1), want1);
    /* asymmetric pads 0 2: [x0 - x2, x1 - x3, x2 - x4, x3, x4] */
    static const double want1a[] = {-2, -2, -2, 4, 5};
    EXPECT("graph f(%x: f64[1, 1, 5], %w: f64[1, 1, 3]) {\n  %y = conv(%x, %w, window=[1, 1, 0, 2])\n  return %y\n}\n",
           2, IN(x5, w1), want1a);
    /* 2-D, 2x2 ones at stride 2 over 0..15 */
    static const double ones4[] = {1, 1, 1, 1}, want2[] = {10, 18, 42, 50};
    EXPECT("graph f(%x: f64[1, 1, 4, 4], %w: f64[1, 1, 2, 2]) {\n"
           "  %y = conv(%x, %w, window=[2, 2, 1, 1, 0, 0, 0, 0])\n  return %y\n}\n",
           2, IN(x16, ones4), want2);
    /* dilation 2: x[i][j] + x[i][j+2] + x[i+2][j] + x[i+2][j+2] */
    static const double want3[] = {20, 24, 36, 40};
    EXPECT("graph f(%x: f64[1, 1, 4, 4], %w: f64[1, 1, 2, 2]) {\n"
           "  %y = conv(%x, %w, window=[1, 1, 2, 2, 0, 0, 0, 0])\n  return %y\n}\n",
           2, IN(x16, ones4), want3);
    /* groups 2: each channel by its own weight; two output channels per
     * group read the one input channel of the group */
    static const double xg[] = {2, 3}, wg[] = {10, 100, 1000, 10000}, wantg[] = {20, 200, 3000, 30000};
    EXPECT("graph f(%x: f64[1, 2, 1, 1], %w: f64[4, 1, 1, 1]) {\n"
           "  %y = conv(%x, %w, window=[1, 1, 1, 1, 0, 0, 0, 0], groups=2)\n  return %y\n}\n",
           2, IN(xg, wg), wantg);
    /* two input channels summed: [1 2 3] * 1 + [10 20 30] * 2, kernel 1 */
    static const double xc[] = {1, 2, 3, 10, 20, 30}, wc[] = {1, 2}, wantc[] = {21, 42, 63};
    EXPECT("graph f(%x: f64[1, 2, 3], %w: f64[1, 2, 1]) {\n  %y = conv(%x, %w, window=[1, 1, 0, 0])\n  return %y\n}\n",
           2, IN(xc, wc), wantc);
}

static void test_conv_transpose_values(void) {
    static const double x[] = {1, 2, 3}, w[] = {1, 1};
    static const double want_s2[] = {1, 1, 2, 2, 3, 3}, want_s1[] = {1, 3, 5, 3};
    EXPECT("graph f(%x: f64[1, 1, 3], %w: f64[1, 1, 2]) {\n"
           "  %y = conv_transpose(%x, %w, window=[2, 1, 0, 0, 0])\n  return %y\n}\n",
           2, IN(x, w), want_s2);
    EXPECT("graph f(%x: f64[1, 1, 3], %w: f64[1, 1, 2]) {\n"
           "  %y = conv_transpose(%x, %w, window=[1, 1, 0, 0, 0])\n  return %y\n}\n",
           2, IN(x, w), want_s1);
    /* pads 1 0 crop the first output; output_padding 1 adds one at the end
     * (zero: no input reaches it) */
    static const double want_p[] = {1, 2, 2, 3, 3, 0};
    EXPECT("graph f(%x: f64[1, 1, 3], %w: f64[1, 1, 2]) {\n"
           "  %y = conv_transpose(%x, %w, window=[2, 1, 1, 0, 1])\n  return %y\n}\n",
           2, IN(x, w), want_p);
    /* kernel [1, 10]: x spread with its weights, bias 0.5 */
    static const double w10[] = {1, 10}, b[] = {0.5}, want_b[] = {1.5, 12.5, 23.5, 30.5};
    EXPECT("graph f(%x: f64[1, 1, 3], %w: f64[1, 1, 2], %b: f64[1]) {\n"
           "  %y = conv_transpose(%x, %w, %b, window=[1, 1, 0, 0, 0])\n  return %y\n}\n",
           3, IN(x, w10, b), want_b);
}

static void test_pool_values(void) {
    static const double x[] = {1, 5, 2, 8, 3}, x4[] = {1, 2, 3, 4}, x5[] = {1, 2, 3, 4, 5};
    /* ceil mode: a third window over the last element alone */
    static const double want_max[] = {5, 8, 3}, want_floor[] = {5, 8};
    EXPECT("graph f(%x: f64[1, 1, 5]) {\n  %y = max_pool(%x, window=[2, 2, 1, 0, 0], ceil=true)\n  return %y\n}\n", 1,
           IN(x), want_max);
    EXPECT("graph f(%x: f64[1, 1, 5]) {\n  %y = max_pool(%x, window=[2, 2, 1, 0, 0])\n  return %y\n}\n", 1, IN(x),
           want_floor);
    /* dilation 2: max(x[i], x[i+2]) */
    static const double want_dil[] = {2, 8, 3};
    EXPECT("graph f(%x: f64[1, 1, 5]) {\n  %y = max_pool(%x, window=[2, 1, 2, 0, 0])\n  return %y\n}\n", 1, IN(x),
           want_dil);
    /* a padded max pool never picks the padding */
    static const double xn[] = {-3, -1, -2}, want_np[] = {-3, -1, -1, -2};
    EXPECT("graph f(%x: f64[1, 1, 3]) {\n  %y = max_pool(%x, window=[2, 1, 1, 1, 1])\n  return %y\n}\n", 1, IN(xn),
           want_np);
    /* average, kernel 3, pads 1 1: padding not counted, then counted */
    static const double want_ex[] = {1.5, 2, 3, 3.5}, want_in[] = {1, 2, 3, 7.0 / 3};
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = avg_pool(%x, window=[3, 1, 1, 1, 1])\n  return %y\n}\n", 1, IN(x4),
           want_ex);
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = avg_pool(%x, window=[3, 1, 1, 1, 1], count_pad=true)\n  return %y\n}\n",
           1, IN(x4), want_in);
    /* ceil mode's partial window divides by what it covers, with count_pad
     * too (the overhang is not padding) */
    static const double want_ceil[] = {1.5, 3.5, 5};
    EXPECT("graph f(%x: f64[1, 1, 5]) {\n  %y = avg_pool(%x, window=[2, 2, 1, 0, 0], ceil=true, count_pad=true)\n"
           "  return %y\n}\n",
           1, IN(x5), want_ceil);
    /* ceil mode with a pad: the partial window covers the pad and x[4] */
    static const double want_ceil_pad[] = {1.5, 3.5, 2.5};
    EXPECT("graph f(%x: f64[1, 1, 5]) {\n  %y = avg_pool(%x, window=[2, 2, 1, 0, 1], ceil=true, count_pad=true)\n"
           "  return %y\n}\n",
           1, IN(x5), want_ceil_pad);
    /* 2-D over [2, 2, 2]: channel means */
    static const double x8[] = {1, 2, 3, 4, 10, 20, 30, 40}, want_g[] = {2.5, 25};
    EXPECT("graph f(%x: f64[1, 2, 2, 2]) {\n  %y = global_avg_pool(%x)\n  return %y\n}\n", 1, IN(x8), want_g);
}

static void test_norm_pad_resize_values(void) {
    /* (x - mean) / sqrt(var + eps) * scale + bias, eps 1 */
    static const double x[] = {1, 2, 5, 6}, s[] = {2, 3}, b[] = {1, 1}, m[] = {0, 1}, v[] = {3, 8};
    static const double want_bn[] = {2, 3, 5, 6};
    EXPECT("graph f(%x: f64[1, 2, 2], %s: f64[2], %b: f64[2], %m: f64[2], %v: f64[2]) {\n"
           "  %y = batch_norm(%x, %s, %b, %m, %v, eps=1.0)\n  return %y\n}\n",
           5, IN(x, s, b, m, v), want_bn);
    static const double x3[] = {1, 2, 3};
    static const double want_reflect[] = {3, 2, 1, 2, 3, 2}, want_edge[] = {1, 1, 1, 2, 3, 3};
    static const double want_const[] = {9, 9, 1, 2, 3, 9}, want_crop[] = {2, 3, 0};
    EXPECT("graph f(%x: f64[3]) {\n  %y = pad(%x, pads=[2, 1], mode=1)\n  return %y\n}\n", 1, IN(x3), want_reflect);
    EXPECT("graph f(%x: f64[3]) {\n  %y = pad(%x, pads=[2, 1], mode=2)\n  return %y\n}\n", 1, IN(x3), want_edge);
    EXPECT("graph f(%x: f64[3]) {\n  %y = pad(%x, pads=[2, 1], value=9)\n  return %y\n}\n", 1, IN(x3), want_const);
    EXPECT("graph f(%x: f64[3]) {\n  %y = pad(%x, pads=[-1, 1])\n  return %y\n}\n", 1, IN(x3), want_crop);
    /* 2-D: a row of pads before, a column after */
    static const double x22[] = {1, 2, 3, 4}, want_2d[] = {0, 0, 0, 1, 2, 0, 3, 4, 0};
    EXPECT("graph f(%x: f64[2, 2]) {\n  %y = pad(%x, pads=[1, 0, 0, 1])\n  return %y\n}\n", 1, IN(x22), want_2d);

    /* [1, 3] to 4: the source coordinates of each mode */
    static const double x2[] = {1, 3};
    static const double want_half[] = {1, 1.5, 2.5, 3}, want_align[] = {1, 5.0 / 3, 7.0 / 3, 3};
    static const double want_asym[] = {1, 2, 3, 3}, want_near[] = {1, 1, 3, 3};
    EXPECT("graph f(%x: f64[1, 1, 2]) {\n  %y = resize(%x, shape=[1, 1, 4], mode=4)\n  return %y\n}\n", 1, IN(x2),
           want_half);
    EXPECT("graph f(%x: f64[1, 1, 2]) {\n  %y = resize(%x, shape=[1, 1, 4], mode=4, coord=1)\n  return %y\n}\n", 1,
           IN(x2), want_align);
    EXPECT("graph f(%x: f64[1, 1, 2]) {\n  %y = resize(%x, shape=[1, 1, 4], mode=4, coord=2)\n  return %y\n}\n", 1,
           IN(x2), want_asym);
    EXPECT("graph f(%x: f64[1, 1, 2]) {\n  %y = resize(%x, shape=[1, 1, 4])\n  return %y\n}\n", 1, IN(x2), want_near);
    /* nearest rounding at ties: asymmetric from 4 to 8 lands on .5 for odd
     * outputs; x = 0..3 picks the index itself */
    static const double x4[] = {0, 1, 2, 3};
    static const double want_tie_floor[] = {0, 0, 1, 1, 2, 2, 3, 3}, want_tie_up[] = {0, 1, 1, 2, 2, 3, 3, 3};
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = resize(%x, shape=[1, 1, 8], coord=2)\n  return %y\n}\n", 1, IN(x4),
           want_tie_floor);
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = resize(%x, shape=[1, 1, 8], mode=3, coord=2)\n  return %y\n}\n", 1,
           IN(x4), want_tie_up);
    /* pytorch_half_pixel to size 1 reads index 0; half_pixel the middle */
    static const double want_pt1[] = {0}, want_hp1[] = {1.5};
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = resize(%x, shape=[1, 1, 1], mode=4, coord=3)\n  return %y\n}\n", 1,
           IN(x4), want_pt1);
    EXPECT("graph f(%x: f64[1, 1, 4]) {\n  %y = resize(%x, shape=[1, 1, 1], mode=4)\n  return %y\n}\n", 1, IN(x4),
           want_hp1);
    /* bilinear 2x2 -> 3x3 align_corners: the centre is the mean */
    static const double want_bi[] = {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4};
    EXPECT("graph f(%x: f64[1, 1, 2, 2]) {\n  %y = resize(%x, shape=[1, 1, 3, 3], mode=4, coord=1)\n  return %y\n}\n", 1,
           IN(x22), want_bi);
}

/* The builders: defaults, auto_pad, and errors. */
static void test_builders(void) {
    fc_graph *g = fc_graph_new(ctx, "b");
    fc_value *x = fc_param(g, "x", FC_F32, 4, (const fc_dim[]){2, 3, 7, 8});
    fc_value *w = fc_param(g, "w", FC_F32, 4, (const fc_dim[]){6, 3, 3, 3});
    fc_window win = {.stride = {2, 2}, .auto_pad = FC_PAD_SAME_UPPER};
    fc_value *y = fc_conv(g, x, w, NULL, &win);
    CHECK_EQ_INT(fc_value_dim(y, 1), 6);
    CHECK_EQ_INT(fc_value_dim(y, 2), 4); /* ceil(7 / 2) */
    CHECK_EQ_INT(fc_value_dim(y, 3), 4);
    fc_window pool = {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true};
    fc_value *p = fc_max_pool(g, x, &pool);
    CHECK_EQ_INT(fc_value_dim(p, 2), 3);
    CHECK_EQ_INT(fc_value_dim(p, 3), 4);
    fc_value *t = fc_conv_transpose(g, y, fc_param(g, "wt", FC_F32, 4, (const fc_dim[]){6, 2, 3, 3}),
                                    NULL, &(fc_window){.stride = {2, 2}, .auto_pad = FC_PAD_SAME_UPPER, .groups = 1});
    CHECK_EQ_INT(fc_value_dim(t, 1), 2);
    CHECK_EQ_INT(fc_value_dim(t, 2), 8); /* in * stride */
    fc_value *r = fc_resize(g, x, 4, (const fc_dim[]){2, 3, 14, 16}, FC_RESIZE_LINEAR, FC_COORD_HALF_PIXEL);
    CHECK_EQ_INT(fc_value_dim(r, 3), 16);
    fc_value *pd = fc_pad(g, x, (const int64_t[]){0, 0, 1, 2, 0, 0, 3, 4}, FC_PAD_REFLECT, 0);
    CHECK_EQ_INT(fc_value_dim(pd, 2), 11);
    CHECK_EQ_INT(fc_value_dim(pd, 3), 14);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);
    /* groups that do not divide the channels: an error naming the op */
    fc_value *bad = fc_conv(g, x, w, NULL, &(fc_window){.groups = 2});
    CHECK(fc_value_is_poison(bad));
    CHECK(strstr(fc_last_error(ctx), "conv: groups") != NULL);
    fc_graph_free(g);
    fc_clear_error(ctx);

    static const struct { const char *ir, *msg; } errors[] = {
        {"graph f(%x: f32[1, 2, 5], %w: f32[3, 2, 7]) {\n  %y = conv(%x, %w, window=[1, 1, 0, 0])\n  return %y\n}\n",
         "the window (7) is larger than the padded input (5)"},
        {"graph f(%x: f32[1, 2, 5], %w: f32[3, 2, 3]) {\n  %y = conv(%x, %w, window=[1, 1, 0])\n  return %y\n}\n",
         "window has 3 entries; 1 spatial dims need 4"},
        {"graph f(%x: f32[1, 2, N]) {\n  %y = max_pool(%x, window=[2, 1, 1, 0, 0])\n  return %y\n}\n",
         "spatial dim 2 of the input is symbolic"},
        {"graph f(%x: f32[4]) {\n  %y = pad(%x, pads=[4, 0], mode=1)\n  return %y\n}\n",
         "reflect pads must be smaller than the dim"},
        {"graph f(%x: f32[1, 2, 4]) {\n  %y = resize(%x, shape=[1, 3, 8])\n  return %y\n}\n",
         "shape must keep the input's dims 0 and 1"},
        {"graph f(%x: f32[1, 2, 4], %s: f32[3]) {\n  %y = batch_norm(%x, %s, %s, %s, %s)\n  return %y\n}\n",
         "scale, bias, mean and var must be [C]"},
    };
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        fc_graph *e = NULL;
        CHECK(fc_parse(ctx, "e.ir", errors[i].ir, strlen(errors[i].ir), NULL, NULL, 0, &e) != FC_OK);
        if (!strstr(fc_last_error(ctx), errors[i].msg)) {
            fprintf(stderr, "error %zu: got '%s', want '%s'\n", i, fc_last_error(ctx), errors[i].msg);
            check_failed++;
        } else {
            check_passed++;
        }
        fc_graph_free(e);
        fc_clear_error(ctx);
    }
}

/* Every graph of tests/conv/ in f64: the passes' result computes what the
 * graph did (to 1e-9 relative: folding and lowering reassociate sums). */
static void test_passes_keep_values(const char *file, const char *passes) {
    const char *src = getenv("FUSEC_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/conv/%s", src ? src : ".", file);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    char *text = calloc(1, 1 << 16);
    size_t len = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    /* exact arithmetic: every float dtype becomes f64 */
    for (char *p = text; (p = strstr(p, "f32[")); p++) memcpy(p, "f64", 3);
    for (char *p = text; (p = strstr(p, "bf16[")); p++) {
        memmove(p, p + 1, strlen(p + 1) + 1);
        memcpy(p, "f64", 3);
        len--;
    }
    fc_graph *g0 = NULL, *g1 = NULL;
    CHECK(fc_parse(ctx, file, text, len, NULL, NULL, 0, &g0) == FC_OK);
    CHECK(fc_parse(ctx, file, text, len, NULL, NULL, 0, &g1) == FC_OK);
    free(text);
    if (!g0 || !g1) {
        fprintf(stderr, "%s: %s\n", file, fc_last_error(ctx));
        fc_graph_free(g0);
        fc_graph_free(g1);
        return;
    }
    fc_status st = FC_OK;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", passes);
    for (char *save, *p = strtok_r(buf, ",", &save); p && !st; p = strtok_r(NULL, ",", &save)) {
        if (!strcmp(p, "fold_batch_norm")) st = fc_pass_fold_batch_norm(g1);
        else if (!strcmp(p, "lower_conv")) st = fc_pass_lower_conv(g1);
        else if (!strcmp(p, "layout")) st = fc_pass_layout(g1);
        else if (!strcmp(p, "canonicalize")) st = fc_pass_canonicalize(g1);
        else if (!strcmp(p, "decompose")) st = fc_pass_decompose(g1);
        if (!st) st = fc_verify(g1);
    }
    CHECK_EQ_INT(st, FC_OK);
    int nout = fc_graph_num_outputs(g0);
    fc_tensor want[16] = {0}, got[16] = {0};
    CHECK(nout <= 16);
    if (nout > 16) nout = 16;
    CHECK_EQ_INT(conv_run_ref(g0, FC_F64, want, nout), FC_OK);
    CHECK_EQ_INT(conv_run_ref(g1, FC_F64, got, nout), FC_OK);
    for (int o = 0; o < nout; o++) {
        int64_t n = fc_tensor_numel(&want[o]), bad = 0;
        for (int64_t k = 0; k < n && got[o].data; k++) {
            double a = ((double *)want[o].data)[k], b = ((double *)got[o].data)[k];
            if (!(fabs(a - b) <= 1e-9 * (1 + fabs(a))) && !(isnan(a) && isnan(b))) bad++;
        }
        if (bad) fprintf(stderr, "%s after %s: output %d differs in %lld elements\n", file, passes, o, (long long)bad);
        CHECK(bad == 0);
        fc_tensor_release(&want[o]);
        fc_tensor_release(&got[o]);
    }
    /* nothing of the convolution family is left after lowering */
    if (strstr(passes, "lower_conv"))
        for (int i = 0; i < g1->nnodes; i++) CHECK(fc_op_table[g1->nodes[i]->op].kind != FC_KIND_COMPOSITE || g1->nodes[i]->op == FC_OP_REDUCE_MEAN);
    fc_graph_free(g0);
    fc_graph_free(g1);
}

int main(void) {
    ctx = fc_context_new();
    test_conv_values();
    test_conv_transpose_values();
    test_pool_values();
    test_norm_pad_resize_values();
    test_builders();
    static const char *const files[] = {"resnet_block.ir", "depthwise_block.ir", "conv_ops.ir", "shared_batch_norm.ir"};
    static const char *const pipelines[] = {"fold_batch_norm", "lower_conv", "fold_batch_norm,lower_conv,layout,canonicalize",
                                            "lower_conv,layout,canonicalize,decompose,canonicalize"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
        for (size_t p = 0; p < 4; p++) test_passes_keep_values(files[f], pipelines[p]);
    fc_context_free(ctx);
    return check_report("test_conv_ref");
}

/*
 * gpt2_mlp.c - build a GPT-2 MLP with the C builder API and run it.
 *
 *     y = gelu_tanh(x @ w1 + b1) @ w2 + b2
 *
 * at a small size (B = 4 rows, width 16, hidden 64), with deterministic
 * inputs, on the reference interpreter. It shows the conventions of the API:
 * builder calls are sticky, so the whole chain is checked once with
 * fc_graph_status(); every failure leaves its message in fc_last_error().
 *
 * Build and run (from the build directory): ./example_gpt2_mlp
 */
#include "fusec.h"

#include <stdio.h>
#include <stdlib.h>

enum { B = 4, D = 16, H = 64 };

/* A deterministic f32 tensor: value i is a small, smooth function of i. */
static fc_tensor make_input(int rank, const int64_t *shape, float scale, float phase) {
    fc_tensor t = {.dtype = FC_F32, .rank = rank};
    for (int i = 0; i < rank; i++) t.shape[i] = shape[i];
    int64_t n = fc_tensor_numel(&t);
    float *data = malloc((size_t)n * sizeof *data);
    if (data)
        for (int64_t i = 0; i < n; i++) data[i] = scale * (float)((i * 37 + 11) % 101 - 50) / 50.0f + phase;
    t.data = data;
    return t;
}

static int fail(fc_context *ctx, const char *what) {
    fprintf(stderr, "gpt2_mlp: %s failed:\n%s\n", what, fc_last_error(ctx));
    return 1;
}

int main(void) {
    fc_context *ctx = fc_context_new();
    if (!ctx) {
        fprintf(stderr, "gpt2_mlp: out of memory\n");
        return 1;
    }
    fc_graph *g = fc_graph_new(ctx, "gpt2_mlp");
    if (!g) {
        fc_context_free(ctx);
        fprintf(stderr, "gpt2_mlp: out of memory\n");
        return 1;
    }

    /* Build. No call is checked here: an error poisons the graph, and
     * every later builder passes the poison on. */
    const fc_dim x_dims[] = {B, D}, w1_dims[] = {D, H}, b1_dims[] = {H}, w2_dims[] = {H, D}, b2_dims[] = {D};
    fc_value *x = fc_param(g, "x", FC_F32, 2, x_dims);
    fc_value *w1 = fc_param(g, "w1", FC_F32, 2, w1_dims);
    fc_value *b1 = fc_param(g, "b1", FC_F32, 1, b1_dims);
    fc_value *w2 = fc_param(g, "w2", FC_F32, 2, w2_dims);
    fc_value *b2 = fc_param(g, "b2", FC_F32, 1, b2_dims);
    fc_value *h = fc_add(g, fc_matmul(g, x, w1), b1);
    fc_value *y = fc_add(g, fc_matmul(g, fc_gelu_tanh(g, h), w2), b2);
    fc_graph_return(g, 1, &y);

    int rc = 0;
    fc_tensor inputs[5] = {{0}}, output = {0};
    if (fc_graph_status(g) != FC_OK) {
        rc = fail(ctx, "building the graph");
        goto done;
    }
    if (fc_verify(g) != FC_OK) {
        rc = fail(ctx, "verifying the graph");
        goto done;
    }

    const int64_t xs[] = {B, D}, w1s[] = {D, H}, b1s[] = {H}, w2s[] = {H, D}, b2s[] = {D};
    inputs[0] = make_input(2, xs, 1.0f, 0.0f);
    inputs[1] = make_input(2, w1s, 0.25f, 0.0f);
    inputs[2] = make_input(1, b1s, 0.1f, 0.05f);
    inputs[3] = make_input(2, w2s, 0.25f, 0.0f);
    inputs[4] = make_input(1, b2s, 0.1f, -0.05f);
    for (int i = 0; i < 5; i++)
        if (!inputs[i].data) {
            fprintf(stderr, "gpt2_mlp: out of memory\n");
            rc = 1;
            goto done;
        }

    if (fc_run_reference(g, inputs, 5, &output, 1) != FC_OK) {
        rc = fail(ctx, "running the graph");
        goto done;
    }

    printf("gpt2_mlp: output %s[", fc_dtype_name(output.dtype));
    for (int i = 0; i < output.rank; i++) printf("%s%lld", i ? ", " : "", (long long)output.shape[i]);
    printf("]\n");
    const float *out = output.data;
    for (int r = 0; r < output.shape[0]; r++) {
        printf("  row %d:", r);
        for (int c = 0; c < 4; c++) printf(" %9.5f", out[r * output.shape[1] + c]);
        printf(" ...\n");
    }

done:
    fc_tensor_release(&output);
    for (int i = 0; i < 5; i++) free(inputs[i].data);
    fc_graph_free(g);
    fc_context_free(ctx);
    return rc;
}

/*
 * consumer.c - a user's program, built against an installed fusec (with
 * pkg-config and with find_package) and through add_subdirectory
 * (tests/test_install.sh): relu(x @ w) on f32[4, 8] x [8, 3], compiled for
 * the CPU backend (the reference interpreter where the library has none),
 * run, and checked against fc_run_reference. Prints "consumer: ok DEVICE".
 */
#include <fusec.h>

#include <stdio.h>

int main(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "consumer");
    const fc_dim xd[2] = {4, 8}, wd[2] = {8, 3};
    fc_value *x = fc_param(g, "x", FC_F32, 2, xd);
    fc_value *w = fc_param(g, "w", FC_F32, 2, wd);
    fc_value *y = fc_relu(g, fc_matmul(g, x, w));
    float xs[32], ws[24];
    for (int i = 0; i < 32; i++) xs[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 24; i++) ws[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    fc_tensor in[2] = {{FC_F32, 2, {4, 8}, xs}, {FC_F32, 2, {8, 3}, ws}};
    fc_tensor got = {0}, want = {0};
    fc_output_diff d;
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = fc_device_built(FC_DEVICE_CPU) ? FC_DEVICE_CPU : FC_DEVICE_REF;
    fc_program *p = NULL;
    fc_status st = fc_graph_return(g, 1, &y);
    if (st == FC_OK) st = fc_compile(g, &co, &p);
    if (st == FC_OK) st = fc_program_run_host(p, in, 2, &got, 1, NULL, 0);
    if (st == FC_OK) st = fc_run_reference(g, in, 2, &want, 1);
    if (st == FC_OK) st = fc_compare_outputs(ctx, &got, &want, 1, &d);
    if (st != FC_OK) fprintf(stderr, "consumer: %s\n", fc_last_error(ctx));
    else printf("consumer: ok %s (fusec %s)\n", fc_device_name(co.device), FUSEC_VERSION_STRING);
    fc_tensor_release(&got);
    fc_tensor_release(&want);
    fc_program_free(p);
    fc_graph_free(g);
    fc_context_free(ctx);
    return st == FC_OK ? 0 : 1;
}

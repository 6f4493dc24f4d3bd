/* test_param_init.c - fc_graph_param_inits: what each parameter is to its
 * graph, and the range the CLI's random inputs draw it from. */
#include "check.h"
#include "fusec.h"

#include <math.h>
#include <string.h>

static const char *text =
    "graph roles(%x: f32[2, 64], %w: f32[64, 16], %b: f32[16], %wt: f32[8, 16], %bt: f32[8],\n"
    "            %g: f32[8], %s: f32[8], %r: bf16[8], %y: bf16[2, 8], %idx: i32[2], %m: f32[64, 16]) {\n"
    "  %h = matmul(%x, %w)\n"
    "  %hb = add(%b, %h)\n"                     /* a bias on either side */
    "  %t = permute(%wt, perm=[1, 0])\n"       /* nn.Linear's [out, in] layout */
    "  %h2 = matmul(%hb, %t)\n"
    "  %r2 = reshape(%h2, shape=[2, 8])\n"
    "  %h3 = add(%r2, %bt)\n"                  /* through a reshape of the result */
    "  %n = layernorm(%h3, %g, %s, axis=-1, eps=1e-5)\n"
    "  %nc = cast(%n, to=bf16)\n"
    "  %n2 = rmsnorm(%nc, %r, eps=1e-6)\n"
    "  %o = add(%n2, %y)\n"                    /* not a matmul's result: data */
    "  %e = gather(%x, %idx, axis=0)\n"
    "  %mm = mul(%m, 2.0)\n"                   /* never a matmul operand: data */
    "  return %o, %e, %mm\n"
    "}\n";

int main(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "roles.ir", text, strlen(text), NULL, NULL, 0, &g), FC_OK);
    if (!g) {
        fputs(fc_last_error(ctx), stderr);
        return 1;
    }
    fc_param_init in[11];
    CHECK_EQ_INT(fc_graph_param_inits(g, in, 11), FC_OK);
    const struct {
        fc_param_role role;
        int64_t fan_in;
        double lo, hi;
    } want[11] = {
        {FC_ROLE_DATA, 0, -1, 1},          {FC_ROLE_WEIGHT, 64, -0.125, 0.125}, {FC_ROLE_BIAS, 64, -0.125, 0.125},
        {FC_ROLE_WEIGHT, 16, -0.25, 0.25}, {FC_ROLE_BIAS, 16, -0.25, 0.25},     {FC_ROLE_NORM_SCALE, 0, 0.9, 1.1},
        {FC_ROLE_NORM_SHIFT, 0, -0.1, 0.1}, {FC_ROLE_NORM_SCALE, 0, 0.9, 1.1},  {FC_ROLE_DATA, 0, -1, 1},
        {FC_ROLE_DATA, 0, -1, 1},          {FC_ROLE_DATA, 0, -1, 1},
    };
    for (int i = 0; i < 11; i++) {
        CHECK_EQ_INT(in[i].role, want[i].role);
        CHECK_EQ_INT(in[i].fan_in, want[i].fan_in);
        CHECK_NEAR(in[i].lo, want[i].lo, 1e-12);
        CHECK_NEAR(in[i].hi, want[i].hi, 1e-12);
    }
    /* Fewer entries than parameters: the first n. */
    fc_param_init two[2];
    CHECK_EQ_INT(fc_graph_param_inits(g, two, 2), FC_OK);
    CHECK_EQ_INT(two[1].role, FC_ROLE_WEIGHT);
    /* Bad arguments. */
    CHECK_EQ_INT(fc_graph_param_inits(NULL, in, 1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_graph_param_inits(g, NULL, 1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_graph_param_inits(g, in, -1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_graph_param_inits(g, NULL, 0), FC_OK);
    fc_graph_free(g);
    fc_context_free(ctx);
    return check_report("test_param_init");
}

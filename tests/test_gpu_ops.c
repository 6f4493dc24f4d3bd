/* test_gpu_ops.c - GPU numeric tests: every op (at several dtypes, with
 * broadcasting, views and reductions), the fusion patterns, and random
 * graphs, compiled by fusec for the GPU and compared with the reference
 * interpreter: with eager numerics within each dtype's tolerance
 * (runtime/program.h), with fast numerics (the default) within the error
 * bound against the exact reference (fc_check_outputs, docs/NUMERICS.md).
 *
 * Without a GPU every graph is still compiled (passes, codegen, NVRTC) and
 * the test prints "skipped: no CUDA device" for the runs. */
#include "check.h"
#include "fusec.h"
#include "random_graph.h"
#include "splitmix.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 12345;
static double uniform(void) { return splitmix_uniform(&rng); } /* [-1, 1) */

/* Random data for a parameter; integer params get indices in [0, 8). */
static void fill(fc_tensor *t, const fc_value *v) {
    t->dtype = fc_value_dtype(v);
    t->rank = fc_value_rank(v);
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= (t->shape[i] = fc_value_dim(v, i));
    t->data = calloc((size_t)(n ? n : 1), fc_dtype_size(t->dtype));
    for (int64_t i = 0; i < n; i++) {
        double x = uniform() * 2.0;
        switch (t->dtype) {
        case FC_F64: ((double *)t->data)[i] = x; break;
        case FC_F32: ((float *)t->data)[i] = (float)x; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)x); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)x); break;
        case FC_I64: ((int64_t *)t->data)[i] = (int64_t)((x + 2) * 2); break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)((x + 2) * 2); break;
        case FC_I8: ((int8_t *)t->data)[i] = (int8_t)((x + 2) * 2); break;
        case FC_BOOL: ((uint8_t *)t->data)[i] = x > 0; break;
        default: break;
        }
    }
}

static bool have_gpu;

/* Compile `ir` with numerics nm, run it on the GPU and with the reference;
 * compare: eager numerics with the rounding reference to each dtype's
 * tolerance, fast numerics with the exact one to the error bound
 * (docs/NUMERICS.md). */
static void check_mode(fc_context *ctx, const char *name, const char *ir, fc_numerics nm) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, name, ir, strlen(ir), NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s: %s\n%s\n", name, fc_last_error(ctx), ir);
        return;
    }
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.numerics = nm;
    fc_program *p = NULL;
    st = fc_compile(g, &o, &p);
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s: compile: %s\n%s\n", name, fc_last_error(ctx), ir);
        fc_graph_free(g);
        return;
    }
    if (have_gpu) {
        int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
        fc_tensor in[32] = {0}, got[16] = {0}, want[16] = {0};
        for (int i = 0; i < nin; i++) fill(&in[i], fc_graph_param(g, i));
        st = fc_program_run_host(p, in, nin, got, nout, NULL, 0);
        CHECK_EQ_INT(st, FC_OK);
        if (st) fprintf(stderr, "%s: run: %s\n", name, fc_last_error(ctx));
        fc_status rst = nm == FC_NUMERICS_EAGER ? fc_run_reference(g, in, nin, want, nout) : FC_OK;
        CHECK_EQ_INT(rst, FC_OK);
        if (!st && nm == FC_NUMERICS_FAST) {
            fc_output_diff cd[16];
            fc_status cst = fc_check_outputs(g, in, nin, got, nout, cd);
            CHECK_EQ_INT(cst, FC_OK);
            if (cst) fprintf(stderr, "%s (fast numerics): %s\n%s\n", name, fc_last_error(ctx), ir);
        } else if (!st && !rst) {
            fc_output_diff d[16];
            fc_status cst = fc_compare_outputs(ctx, got, want, nout, d);
            CHECK_EQ_INT(cst, FC_OK);
            if (cst) {
                char line[512];
                for (int i = 0; i < nout; i++) fprintf(stderr, "%s: %s\n", name, fc_output_diff_format(&d[i], i, line, sizeof line));
                fprintf(stderr, "%s\n", ir);
            }
        }
        for (int i = 0; i < nin; i++) free(in[i].data);
        for (int i = 0; i < nout; i++) {
            fc_tensor_release(&got[i]);
            fc_tensor_release(&want[i]);
        }
    }
    fc_program_free(p);
    fc_graph_free(g);
}

/* Both numerics on a GPU; without one, the default's compile (NVRTC). */
static void check_graph(fc_context *ctx, const char *name, const char *ir) {
    check_mode(ctx, name, ir, FC_NUMERICS_FAST);
    if (have_gpu) check_mode(ctx, name, ir, FC_NUMERICS_EAGER);
}

static const char *const unary[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "recip", "sin", "cos", "tanh",
                                    "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "hardswish", "erf"};
static const char *const binary[] = {"add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge"};
static const char *const dtypes[] = {"f32", "bf16", "f16", "f64"};

int main(void) {
    fc_context *ctx = fc_context_new();
    have_gpu = fc_cuda_available(ctx);
    if (!have_gpu) printf("skipped: no CUDA device (%s); compiling only\n", fc_last_error(ctx));
    char ir[4096];
    /* Every unary op at every float dtype (log/sqrt/rsqrt of |x| + 0.5). */
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
        for (size_t u = 0; u < sizeof unary / sizeof *unary; u++) {
            bool pos = !strcmp(unary[u], "log") || !strcmp(unary[u], "sqrt") || !strcmp(unary[u], "rsqrt");
            snprintf(ir, sizeof ir,
                     "graph u(%%x: %s[33, 64]) {\n  %%a = abs(%%x)\n  %%p = add(%%a, 0.5)\n  %%y = %s(%s)\n  return %%y\n}\n",
                     dtypes[d], unary[u], pos ? "%p" : "%x");
            check_graph(ctx, unary[u], ir);
        }
    /* Every binary and compare op, with broadcasting, at f32 and bf16. */
    for (size_t d = 0; d < 2; d++)
        for (size_t b = 0; b < sizeof binary / sizeof *binary; b++) {
            snprintf(ir, sizeof ir,
                     "graph b(%%x: %s[7, 33, 16], %%y: %s[33, 1]) {\n  %%a = abs(%%x)\n  %%z = %s(%%a, %%y)\n  return %%z\n}\n",
                     dtypes[d], dtypes[d], binary[b]);
            check_graph(ctx, binary[b], ir);
        }
    static const char *const others[] = {
        "graph w(%c: bool[8, 16], %a: f32[8, 16], %b: bf16[16]) {\n  %y = where(%c, %a, %b)\n  return %y\n}\n",
        "graph c(%x: f32[8, 16]) {\n  %a = cast(%x, to=bf16)\n  %b = cast(%x, to=i32)\n  %c = cast(%x, to=bool)\n"
        "  %d = cast(%a, to=f16)\n  return %a, %b, %c, %d\n}\n",
        "graph i(%x: i32[8, 16], %y: i64[16]) {\n  %a = add(%x, %y)\n  %b = mul(%a, 3)\n  %c = div(%b, 2)\n"
        "  %d = reduce_sum(%x, axes=[1])\n  return %b, %c, %d\n}\n",
        "graph r(%x: f32[6, 5, 40]) {\n  %a = reduce_sum(%x, axes=[-1], keepdim=true)\n  %b = reduce_max(%x, axes=[1])\n"
        "  %c = reduce_min(%x, axes=[0, 2])\n  %d = reduce_mean(%x, axes=[-1])\n  return %a, %b, %c, %d\n}\n",
        "graph r2(%x: bf16[300, 3000]) {\n  %a = reduce_sum(%x, axes=[-1])\n  %b = reduce_max(%x, axes=[0])\n  return %a, %b\n}\n",
        "graph sm(%x: bf16[64, 4096]) {\n  %y = softmax(%x, axis=-1)\n  return %y\n}\n",
        "graph sm0(%x: f32[64, 48]) {\n  %y = softmax(%x, axis=0)\n  return %y\n}\n",
        "graph sm0b(%x: f32[37, 45]) {\n  %y = softmax(%x, axis=0)\n  return %y\n}\n",
        "graph colst(%x: bf16[3, 20, 18, 40], %y: f32[40]) {\n  %xf = cast(%x, to=f32)\n  %a = mul(%xf, %y)\n"
        "  %s = reduce_sum(%a, axes=[1, 2])\n  %m = reduce_max(%x, axes=[1])\n  return %a, %s, %m\n}\n",
        "graph rowtail(%x: f32[64, 32, 48], %y: bf16[40, 30]) {\n  %s = reduce_sum(%x, axes=[1], keepdim=true)\n"
        "  %m = mul(%s, 0.03125)\n  %c = cast(%m, to=bf16)\n  %t = reduce_max(%y, axes=[1])\n  %u = neg(%t)\n  return %c, %u\n}\n",
        "graph colodd(%x: f32[5, 37, 9, 7]) {\n  %e = exp(%x)\n  %m = reduce_min(%e, axes=[1, 3])\n  return %e, %m\n}\n",
        "graph smlong(%x: f32[3, 70000]) {\n  %y = softmax(%x)\n  return %y\n}\n",
        "graph ln(%x: bf16[64, 4096], %r: bf16[64, 4096], %w: bf16[4096], %b: bf16[4096]) {\n"
        "  %s = add(%x, %r)\n  %y = layernorm(%s, %w, %b)\n  return %s, %y\n}\n",
        "graph ln1(%x: f32[16, 24, 8], %w: f32[24], %b: f32[24]) {\n  %y = layernorm(%x, %w, %b, axis=1, eps=0.001)\n  return %y\n}\n",
        "graph rms(%x: bf16[64, 4096], %w: bf16[4096]) {\n  %y = rmsnorm(%x, %w)\n  return %y\n}\n",
        "graph rms2(%x: f16[100, 96], %w: f16[96]) {\n  %y = rmsnorm(%x, %w, eps=0.001)\n  return %y\n}\n",
        "graph v(%x: f32[8, 16, 32]) {\n  %p = permute(%x, perm=[2, 0, 1])\n  %r = reshape(%p, shape=[32, 128])\n"
        "  %s = slice(%r, axis=1, start=1, end=-1, step=3)\n  %e = expand(%s, shape=[2, 32, 42])\n  %y = exp(%e)\n  return %y\n}\n",
        "graph cs(%a: f32[4, 8], %b: f32[4, 8]) {\n  %c = concat(%a, %b, %a, axis=1)\n  %p, %q = split(%c, axis=1, sizes=[5, 19])\n"
        "  %i = iota(shape=[4, 19], axis=1, dtype=i32)\n  %m = lt(%i, 6)\n  %w = where(%m, %q, 0.0)\n  %f = full(shape=[4, 5], value=2.5)\n"
        "  %z = mul(%p, %f)\n  return %w, %z\n}\n",
        "graph ga(%t: bf16[100, 64], %i: i32[4, 3]) {\n  %e = gather(%t, %i)\n  %y = mul(%e, 8.0)\n  return %y\n}\n",
        "graph pw(%x: bf16[256, 512], %r: bf16[256, 512]) {\n  %xf = cast(%x, to=f32)\n  %rf = cast(%r, to=f32)\n"
        "  %a = mul(%xf, 1.702)\n  %b = add(%a, %rf)\n  %c = gelu(%b)\n  %s = sigmoid(%rf)\n  %d = mul(%c, %s)\n"
        "  %e = add(%d, %xf)\n  %y = cast(%e, to=bf16)\n  return %y\n}\n",
        "graph batch(%a: f32[64, 3], %b: bf16[32], %c: f32[100]) {\n  %x = exp(%a)\n  %y = tanh(%b)\n  %z = neg(%c)\n"
        "  return %x, %y, %z\n}\n",
        "graph psm(%x: f32[16, 32]) {\n  %s = softmax(%x)\n  %p = permute(%s, perm=[1, 0])\n  return %p\n}\n",
        "graph pr(%x: f32[16, 32], %y: f32[32, 16]) {\n  %r = reduce_sum(%x, axes=[1], keepdim=true)\n  %n = neg(%r)\n"
        "  %p = permute(%n, perm=[1, 0])\n  %a = add(%y, %p)\n  return %a\n}\n",
        "graph rowout(%x: f32[16, 32], %b: f32[16, 1]) {\n  %r = reduce_sum(%x, axes=[1], keepdim=true)\n  %e = exp(%b)\n"
        "  %a = add(%r, %e)\n  return %a, %e\n}\n",
        "graph mixcat(%a: i32[4, 3], %b: bf16[4, 5]) {\n  %c = concat(%a, %b, axis=1)\n  return %c\n}\n",
        "graph sib(%x: f32[128, 512]) {\n  %a = exp(%x)\n  %b = tanh(%x)\n  %s = reduce_sum(%x, axes=[1])\n"
        "  %m = reduce_max(%x, axes=[1])\n  return %a, %b, %s, %m\n}\n",
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) check_graph(ctx, "op", others[i]);
    /* Random graphs. */
    int nrandom = getenv("FUSEC_RANDOM_GRAPHS") ? atoi(getenv("FUSEC_RANDOM_GRAPHS")) : (have_gpu ? 40 : 10);
    for (int seed = 1000; seed < 1000 + nrandom; seed++) {
        rg_opts o = {.max_nodes = 12, .bf16 = true};
        char *text = random_graph((uint64_t)seed, &o);
        char name[32];
        snprintf(name, sizeof name, "random seed %d", seed);
        check_graph(ctx, name, text);
        free(text);
    }
    fc_context_free(ctx);
    return check_report("test_gpu_ops");
}

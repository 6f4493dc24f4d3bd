/* test_cpu_backend.c - the LLVM CPU backend against the reference interpreter.
 *
 * Every op at every dtype it accepts, compiled with fc_cpu_compile, run with
 * fc_cpu_run and compared with fc_run_reference to each dtype's tolerance
 * (fc_compare_outputs: f64 1e-9, f32 1e-5, f16 2e-3, bf16 1.6e-2 relative,
 * integers and bool exactly). Inputs are random values of order one mixed
 * with the edge cases the semantics pin down: 0, -0, +-inf, NaN, values
 * past the integer and f16 ranges, ties of the 16-bit roundings, subnormals.
 * Ops of one kind share a graph (one output per op), so a failure names
 * the graph and the output.
 *
 * Then: views, composites, reductions over every axis pattern, matmul, gemm
 * epilogues and attention through BLAS, the two example blocks at a small
 * size, f32 math accuracy in ulps over dense sweeps, threads against one
 * thread, storage edge cases (a parameter returned, a value returned twice,
 * empty tensors), the API's errors, the generated IR (vectorized loops),
 * and allocation failures injected at every step of compiling.
 *
 * Without LLVM it checks that fc_cpu_compile says why, and passes.
 */
#include "check.h"
#include "test_util.h"
#include "ir.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/cuda/program.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;

/* ---- inputs ------------------------------------------------------------------ */

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static double uniform(double lo, double hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Edge cases for float inputs: every one of them has defined semantics in
 * the reference (NaN propagation, overflow to inf, saturating casts, the
 * ties of f16/bf16 rounding, subnormals). */
static const double float_specials[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, INFINITY, -INFINITY, NAN, 1e-3, -7.25, 100.0, -88.5, 89.0,
    1e4, 65504.0, 65520.0, 70000.0, 3e9, -3e9, 1e20, 1.00390625 /* a bf16 tie */, 1.00048828125 /* an f16 tie */,
    1e-40 /* f32 subnormal */, 5.9604644775390625e-08 /* smallest f16 subnormal */, 127.5, -128.5, 300.0};
#define NSPECIAL ((int)(sizeof float_specials / sizeof float_specials[0]))

typedef enum fill_kind {
    FILL_PLAIN,    /* uniform [-2, 2] (integers: [-9, 9]) */
    FILL_SPECIALS, /* the edge cases first, then uniform */
    FILL_POSITIVE, /* uniform [0.1, 3] */
    FILL_SMALLINT, /* integers in [0, 4] (exponents, indices) */
} fill_kind;

static void fill_tensor(fc_tensor *t, fill_kind kind, double scale) {
    int64_t n = fc_tensor_numel(t);
    t->data = calloc((size_t)(n > 0 ? n : 1), fc_dtype_size(t->dtype));
    for (int64_t i = 0; i < n; i++) {
        double x;
        if (kind == FILL_SPECIALS && i < NSPECIAL) x = float_specials[i];
        else if (kind == FILL_POSITIVE) x = uniform(0.1, 3.0);
        else if (kind == FILL_SMALLINT) x = floor(uniform(0, 5));
        else x = fc_dtype_is_float(t->dtype) ? uniform(-2, 2) * scale : floor(uniform(-9, 10));
        switch (t->dtype) {
        case FC_F64: ((double *)t->data)[i] = x; break;
        case FC_F32: ((float *)t->data)[i] = (float)x; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)x); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)x); break;
        /* Integers: the specials truncated and saturated, as a cast would. */
        /* i64 stays within 2^26: the reference computes in double, exact
         * only below 2^53, and products must stay there. */
        case FC_I64: ((int64_t *)t->data)[i] = (int64_t)fc_round_to_dtype(fmax(fmin(x, 0x1p26), -0x1p26), FC_I64); break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)fc_round_to_dtype(x, FC_I32); break;
        case FC_I8: ((int8_t *)t->data)[i] = (int8_t)fc_round_to_dtype(x, FC_I8); break;
        case FC_BOOL: ((uint8_t *)t->data)[i] = x > 0; break;
        case FC_STRING: case FC_DTYPE_COUNT: break; /* no string parameters here */
        }
    }
}

/* ---- running a case ------------------------------------------------------------- */

typedef struct case_opts {
    fill_kind fill;
    int threads;             /* 0: the default */
    bool unfused;
    const fc_binding *binds;
    int nbinds;
    double weight_scale;     /* matrices named *w*: scaled by this / sqrt(largest dim) (0: like the rest) */
    double scale;            /* the other float inputs: uniform [-2 scale, 2 scale] (0: 1) */
    int expect_kernels;      /* -1: don't check */
} case_opts;

static int cases_run;

static void release_tensors(fc_tensor *t, int n) {
    for (int i = 0; i < n; i++) fc_tensor_release(&t[i]);
}

/* Parse, compile for the CPU, run, and compare with the reference. Returns
 * false when the graph was rejected by the builder (`optional` cases: an
 * op/dtype pair the IR does not define); a mismatch is a CHECK failure. */
static bool run_case_opts(const char *name, const char *ir, const case_opts *o, bool optional) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, name, ir, strlen(ir), NULL, o->binds, o->nbinds, &g);
    if (st != FC_OK) {
        if (!optional) {
            CHECK_EQ_INT(st, FC_OK);
            fprintf(stderr, "%s: %s\n%s\n", name, fc_last_error(ctx), ir);
        } else {
            printf("  (%s: not a valid graph: %.120s)\n", name, fc_last_error(ctx));
        }
        fc_clear_error(ctx);
        return false;
    }
    cases_run++;
    int nin = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_tensor *in = calloc((size_t)nin + 1, sizeof *in), *got = calloc((size_t)nout + 1, sizeof *got),
              *want = calloc((size_t)nout + 1, sizeof *want);
    for (int i = 0; i < nin; i++) {
        fc_value *p = fc_graph_param(g, i);
        int64_t big = param_type(&in[i], p);
        bool weight = o->weight_scale > 0 && in[i].rank >= 2 && p->name && strchr(p->name, 'w');
        fill_kind k = o->fill;
        if (p->name && !strncmp(p->name, "idx", 3)) k = FILL_SMALLINT;
        fill_tensor(&in[i], weight ? FILL_PLAIN : k,
                    weight ? o->weight_scale / sqrt((double)big) : o->scale > 0 ? o->scale : 1.0);
    }
    fc_cpu_options co;
    fc_cpu_options_default(&co);
    co.threads = o->threads;
    co.fuse = !o->unfused;
    fc_cpu_program *p = NULL;
    st = fc_cpu_compile_ex(g, &co, &p);
    CHECK_EQ_INT(st, FC_OK);
    if (st == FC_OK) {
        if (o->expect_kernels >= 0) {
            int kernels = 0;
            fc_cpu_program_count_launches(p, &kernels, NULL);
            CHECK_EQ_INT(kernels, o->expect_kernels);
        }
        st = fc_cpu_run(p, in, nin, got, nout);
        CHECK_EQ_INT(st, FC_OK);
    }
    if (st == FC_OK) {
        st = fc_run_reference(g, in, nin, want, nout);
        CHECK_EQ_INT(st, FC_OK);
        if (st == FC_OK) {
            fc_output_diff *d = calloc((size_t)nout + 1, sizeof *d);
            st = fc_compare_outputs(ctx, got, want, nout, d);
            CHECK_EQ_INT(st, FC_OK);
            for (int k = 0; k < nout && st != FC_OK; k++) {
                char line[512];
                if (!d[k].pass) fprintf(stderr, "%s: %s\n", name, fc_output_diff_format(&d[k], k, line, sizeof line));
            }
            if (st != FC_OK) fprintf(stderr, "%s\n", ir);
            free(d);
        }
    } else {
        fprintf(stderr, "%s: %s\n%s\n", name, fc_last_error(ctx), ir);
    }
    release_tensors(got, nout);
    release_tensors(want, nout);
    release_tensors(in, nin);
    free(in);
    free(got);
    free(want);
    fc_cpu_program_free(p);
    fc_graph_free(g);
    fc_clear_error(ctx);
    return true;
}

static bool run_case(const char *name, const char *ir, fill_kind fill) {
    case_opts o = {.fill = fill, .expect_kernels = -1};
    return run_case_opts(name, ir, &o, false);
}

/* ---- every op at every dtype ---------------------------------------------------- */

static const fc_dtype all_dtypes[] = {FC_F64, FC_F32, FC_F16, FC_BF16, FC_I64, FC_I32, FC_I8, FC_BOOL};
#define NDT 8

/* run_case of tmpl with every DT the name of dtype all_dtypes[di]; the
 * case is called "what <dtype>". */
static void dtype_case(const char *what, int di, const char *tmpl, fill_kind fill) {
    const char *dt = fc_dtype_name(all_dtypes[di]);
    char *ir = with_dtype(tmpl, dt), name[64];
    CHECK(ir != NULL);
    snprintf(name, sizeof name, "%s %s", what, dt);
    if (ir) run_case(name, ir, fill);
    free(ir);
}

static const char *const unary_ops[] = {"neg",  "abs",  "exp",     "log",  "sqrt", "rsqrt",     "recip", "sin",
                                        "cos",  "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu",  "hardswish", "erf"};
static const char *const binary_ops[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
static const char *const compare_ops[] = {"eq", "ne", "lt", "le", "gt", "ge"};

/* Unary ops one dtype at a time: every op the builder accepts for that
 * dtype (neg, abs and relu keep integers; the rest give f32 for them; bool
 * takes none of the first three). The specials go through every op. */
static void test_unary(void) {
    for (int di = 0; di < NDT; di++) {
        const char *dt = fc_dtype_name(all_dtypes[di]);
        tbuf t = {0}, ret = {0};
        tb_add(&t, "graph unary_%s(%%x: %s[3, 67]) {\n", dt, dt);
        int n = 0;
        for (int i = 0; i < 16; i++) {
            bool keeps_int = i == 0 || i == 1 || i == 11;
            if (all_dtypes[di] == FC_BOOL && keeps_int) continue;
            tb_add(&t, "  %%%s = %s(%%x)\n", unary_ops[i], unary_ops[i]);
            tb_add(&ret, "%s%%%s", n++ ? ", " : "", unary_ops[i]);
        }
        tb_add(&t, "  return %s\n}\n", ret.text);
        char name[64];
        snprintf(name, sizeof name, "unary %s", dt);
        run_case(name, t.text, FILL_SPECIALS);
    }
}

/* Binary and compare ops over a pair of dtypes, broadcasting [3, 1, 67]
 * against [4, 67], and with weak scalars (float and integer, on either
 * side). Integer pow gets exponents in [0, 4], so results stay in range. */
static void binary_case(fc_dtype a, fc_dtype b, fill_kind fill) {
    const char *da = fc_dtype_name(a), *db = fc_dtype_name(b);
    tbuf t = {0}, ret = {0};
    tb_add(&t, "graph binary_%s_%s(%%x: %s[3, 1, 67], %%y: %s[4, 67]) {\n", da, db, da, db);
    int n = 0;
    for (int i = 0; i < 7; i++) {
        bool int_pow = i == 6 && !fc_dtype_is_float(fc_promote(a, b));
        if (int_pow) continue; /* integer pow: below, with small exponents */
        tb_add(&t, "  %%%s = %s(%%x, %%y)\n", binary_ops[i], binary_ops[i]);
        tb_add(&ret, "%s%%%s", n++ ? ", " : "", binary_ops[i]);
    }
    for (int i = 0; i < 6; i++) {
        tb_add(&t, "  %%%s = %s(%%x, %%y)\n", compare_ops[i], compare_ops[i]);
        tb_add(&ret, ", %%%s", compare_ops[i]);
    }
    /* weak scalars */
    tb_add(&t, "  %%ws1 = mul(%%x, 1.702)\n  %%ws2 = sub(3, %%y)\n  %%ws3 = max(%%y, -0.5)\n  %%ws4 = lt(%%x, 2)\n");
    tb_add(&ret, ", %%ws1, %%ws2, %%ws3, %%ws4");
    tb_add(&t, "  return %s\n}\n", ret.text);
    char name[64];
    snprintf(name, sizeof name, "binary %s %s", da, db);
    case_opts o = {.fill = fill, .expect_kernels = -1};
    run_case_opts(name, t.text, &o, a == FC_BOOL || b == FC_BOOL);
}

static void test_binary(void) {
    for (int di = 0; di < NDT; di++) binary_case(all_dtypes[di], all_dtypes[di], FILL_SPECIALS);
    /* Mixed dtypes: promotion (bf16 + f16 -> f32, int + float -> float, ...). */
    static const fc_dtype mixed[][2] = {{FC_BF16, FC_F32}, {FC_F16, FC_BF16}, {FC_I32, FC_F32},  {FC_I8, FC_I64},
                                        {FC_BOOL, FC_I32}, {FC_BOOL, FC_F16}, {FC_F64, FC_BF16}, {FC_I8, FC_BF16}};
    for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) binary_case(mixed[i][0], mixed[i][1], FILL_PLAIN);
    /* Integer pow with small non-negative exponents. */
    for (int di = 4; di < 7; di++)
        dtype_case("integer pow", di,
                   "graph ipow_DT(%x: DT[5, 33], %idx: DT[5, 33]) {\n  %p = pow(%x, %idx)\n  %q = pow(%x, 2)\n"
                   "  return %p, %q\n}\n",
                   FILL_PLAIN);
}

/* where(cond, a, b) with broadcasting, every dtype, and a weak scalar. */
static void test_where(void) {
    for (int di = 0; di < NDT; di++)
        dtype_case("where", di,
                   "graph where_DT(%c: bool[3, 1, 40], %a: DT[4, 40], %b: DT[3, 4, 1]) {\n"
                   "  %y = where(%c, %a, %b)\n  %z = where(%c, %a, 1)\n  return %y, %z\n}\n",
                   FILL_SPECIALS);
}

/* cast from every dtype to every dtype, over the specials: saturation,
 * NaN to 0, truncation toward zero, round to nearest-even at the ties. */
static void test_cast(void) {
    for (int a = 0; a < NDT; a++) {
        const char *da = fc_dtype_name(all_dtypes[a]);
        tbuf t = {0}, ret = {0};
        tb_add(&t, "graph cast_%s(%%x: %s[2, 50]) {\n", da, da);
        for (int b = 0; b < NDT; b++) {
            const char *db = fc_dtype_name(all_dtypes[b]);
            tb_add(&t, "  %%to_%s = cast(%%x, to=%s)\n", db, db);
            tb_add(&ret, "%s%%to_%s", b ? ", " : "", db);
        }
        tb_add(&t, "  return %s\n}\n", ret.text);
        char name[64];
        snprintf(name, sizeof name, "cast from %s", da);
        run_case(name, t.text, FILL_SPECIALS);
    }
}

/* Reductions over every axis pattern of a [5, 7, 9] tensor (trailing,
 * leading, middle, two axes, all), with and without keepdim; NaN among the
 * inputs for max and min (it must win). */
static void test_reduce(void) {
    static const char *const axes[] = {"[-1]", "[0]", "[1]", "[0, 2]", "[1, 2]", "[]"};
    for (int di = 0; di < NDT; di++) {
        fc_dtype d = all_dtypes[di];
        const char *dt = fc_dtype_name(d);
        tbuf t = {0}, ret = {0};
        tb_add(&t, "graph reduce_%s(%%x: %s[5, 7, 9]) {\n", dt, dt);
        int n = 0;
        for (int a = 0; a < 6; a++)
            for (int keep = 0; keep < 2; keep++) {
                const char *ops[] = {"reduce_sum", "reduce_max", "reduce_min", "reduce_mean"};
                for (int o = 0; o < 4; o++) {
                    if (o == 3 && !fc_dtype_is_float(d)) continue;
                    if ((o == 1 || o == 2) && d == FC_BOOL) continue;
                    tb_add(&t, "  %%r%d = %s(%%x, axes=%s, keepdim=%s)\n", n, ops[o], axes[a], keep ? "true" : "false");
                    tb_add(&ret, "%s%%r%d", n ? ", " : "", n);
                    n++;
                }
            }
        tb_add(&t, "  return %s\n}\n", ret.text);
        char name[64];
        snprintf(name, sizeof name, "reductions %s", dt);
        run_case(name, t.text, FILL_PLAIN);
        /* NaN and infinities propagate through max/min and sums. */
        if (fc_dtype_is_float(d)) {
            snprintf(name, sizeof name, "reductions %s with specials", dt);
            char ir[512];
            snprintf(ir, sizeof ir,
                     "graph reduce_nan_%s(%%x: %s[3, 31]) {\n  %%a = reduce_max(%%x, axes=[1])\n"
                     "  %%b = reduce_min(%%x, axes=[0])\n  %%c = reduce_sum(%%x, axes=[0])\n  return %%a, %%b, %%c\n}\n",
                     dt, dt);
            run_case(name, ir, FILL_SPECIALS);
        }
    }
    /* Long rows (vectorized sums), a full reduction, a column reduction. */
    run_case("long rows", "graph f(%x: f32[6, 5000]) {\n  %s = reduce_sum(%x, axes=[1])\n"
                          "  %m = reduce_max(%x, axes=[1], keepdim=true)\n  %d = sub(%x, %m)\n  return %s, %d\n}\n",
             FILL_PLAIN);
    run_case("full reduction", "graph f(%x: f32[100, 300]) {\n  %s = reduce_sum(%x, axes=[])\n  %m = reduce_min(%x, axes=[0, 1])\n"
                               "  return %s, %m\n}\n",
             FILL_PLAIN);
    /* Reductions over leading dims run the column schedule (blocks of rows,
     * per-row values in arrays): with several phases and per-row values,
     * partial blocks (1000 rows) and threads. */
    run_case("column reduction", "graph f(%x: bf16[300, 65]) {\n  %s = reduce_sum(%x, axes=[0])\n"
                                 "  %m = reduce_max(%x, axes=[0], keepdim=true)\n  %y = sub(%x, %m)\n  return %s, %y\n}\n",
             FILL_PLAIN);
    case_opts co = {.fill = FILL_PLAIN, .threads = 3, .expect_kernels = 1};
    run_case_opts("column softmax and layernorm",
                  "graph f(%x: f32[37, 4, 250], %w: f32[37], %b: f32[37], %i: i32[37, 1000]) {\n"
                  "  %y = softmax(%x, axis=0)\n  %l = layernorm(%x, %w, %b, axis=0)\n  %s = reduce_sum(%i, axes=[0])\n"
                  "  %v = reduce_mean(%x, axes=[0, 1], keepdim=true)\n  return %y, %l, %s, %v\n}\n",
                  &(case_opts){.fill = FILL_PLAIN, .expect_kernels = -1}, false);
    run_case_opts("column sums on threads", "graph f(%x: f32[300, 3000]) {\n  %s = reduce_sum(%x, axes=[0])\n"
                  "  %m = reduce_min(%x, axes=[0], keepdim=true)\n  %y = sub(%x, %m)\n  return %s, %y\n}\n",
                  &co, false);
}

/* softmax, layernorm, rmsnorm, reduce_mean, gelu and silu at every float
 * dtype, over the last axis and a middle one. */
static void test_composites(void) {
    for (int di = 0; di < 4; di++) /* the float dtypes */
        dtype_case("composites", di,
                   "graph composites_DT(%x: DT[6, 5, 129], %w: DT[129], %b: DT[129], %w5: DT[5], %b5: DT[5]) {\n"
                   "  %sm = softmax(%x, axis=-1)\n  %sm1 = softmax(%x, axis=1)\n"
                   "  %ln = layernorm(%x, %w, %b, axis=-1, eps=1e-5)\n  %ln1 = layernorm(%x, %w5, %b5, axis=1)\n"
                   "  %rn = rmsnorm(%x, %w, eps=1e-6)\n  %mn = reduce_mean(%x, axes=[0, 2], keepdim=true)\n"
                   "  %ge = gelu(%x)\n  %si = silu(%x)\n  return %sm, %sm1, %ln, %ln1, %rn, %mn, %ge, %si\n}\n",
                   FILL_PLAIN);
    /* One kernel each, as on the GPU. */
    case_opts o = {.fill = FILL_PLAIN, .expect_kernels = 1};
    run_case_opts("softmax is one kernel", "graph f(%x: bf16[64, 1000]) {\n  %y = softmax(%x)\n  return %y\n}\n", &o, false);
    run_case_opts("add + layernorm is one kernel",
                  "graph f(%x: bf16[16, 768], %r: bf16[16, 768], %w: bf16[768], %b: bf16[768]) {\n"
                  "  %s = add(%x, %r)\n  %y = layernorm(%s, %w, %b)\n  return %s, %y\n}\n",
                  &o, false);
}

/* Views are index arithmetic: every kind, at every rank they take, with
 * mixed-dtype concats and stored split pieces. */
static void test_views(void) {
    run_case("permute, reshape, slice",
             "graph f(%x: f32[8, 16, 32]) {\n  %p = permute(%x, perm=[2, 0, 1])\n  %r = reshape(%p, shape=[32, 128])\n"
             "  %s = slice(%r, axis=1, start=1, end=-1, step=3)\n  %s2 = slice(%r, axis=0, start=-5)\n  %e = exp(%s)\n"
             "  %q = permute(%x, perm=[1, 2, 0])\n  %q2 = reshape(%q, shape=[-1])\n  return %e, %s2, %q2\n}\n",
             FILL_PLAIN);
    run_case("expand", "graph f(%x: bf16[1, 7, 1], %y: bf16[5, 7, 3]) {\n  %e = expand(%x, shape=[4, 5, 7, 3])\n"
                       "  %a = add(%x, %y)\n  return %e, %a\n}\n",
             FILL_PLAIN);
    run_case("concat, split, iota, where",
             "graph f(%a: f32[4, 8], %b: f16[4, 3], %c: i32[4, 5]) {\n  %k = concat(%a, %b, %c, axis=1)\n"
             "  %p, %q, %r = split(%k, axis=1, sizes=[4, 9, 3])\n  %i = iota(shape=[4, 9], axis=1, dtype=i32)\n"
             "  %m = lt(%i, 6)\n  %w = where(%m, %q, 0.0)\n  %j = concat(%b, %b, axis=0)\n  return %w, %p, %r, %j, %k\n}\n",
             FILL_SPECIALS);
    run_case("iota and full at every dtype",
             "graph f(%x: f32[3, 300]) {\n  %a = iota(shape=[3, 300], axis=1, dtype=bf16)\n"
             "  %b = iota(shape=[3, 300], axis=0, dtype=f16)\n  %c = iota(shape=[300], axis=0, dtype=i8)\n"
             "  %d = full(shape=[3, 300], value=nan, dtype=f32)\n  %e = full(shape=[2], value=-inf, dtype=f64)\n"
             "  %f = full(shape=[3, 300], value=1000.5, dtype=i8)\n  %g = full(shape=[5], value=0.1, dtype=bf16)\n"
             "  %h = full(shape=[3], value=2.0, dtype=bool)\n  %s = add(%x, %a)\n  return %a, %b, %c, %d, %e, %f, %g, %h, %s\n}\n",
             FILL_PLAIN);
    run_case("gather", "graph f(%t: bf16[100, 64], %idx: i32[3, 5], %u: f32[4, 10, 6], %idx2: i64[7]) {\n"
                       "  %e = gather(%t, %idx)\n  %y = mul(%e, 8.0)\n  %g = gather(%u, %idx2, axis=1)\n"
                       "  %n = neg(%idx2)\n  %h = gather(%u, %n, axis=-1)\n  return %y, %g, %h\n}\n",
             FILL_PLAIN);
    run_case("scalars", "graph f(%x: f32[], %y: f32[5]) {\n  %a = add(%x, %y)\n  %b = exp(%x)\n"
                        "  %c = reduce_sum(%y, axes=[])\n  %d = mul(%c, %x)\n  return %a, %b, %d\n}\n",
             FILL_PLAIN);
}

/* matmul (every float dtype, batches, broadcast batches, rank-1 operands),
 * the epilogues the gemm pass folds (bias, residual, relu, gelu_tanh,
 * scale, transposed operands, cast), the sibling products it merges, and
 * attention (causal or not, a scale, broadcast batches). */
static void test_library(void) {
    static const fc_dtype floats[] = {FC_F64, FC_F32, FC_F16, FC_BF16};
    case_opts o = {.fill = FILL_PLAIN, .weight_scale = 1.0, .expect_kernels = -1};
    for (int i = 0; i < 4; i++) {
        const char *dt = fc_dtype_name(floats[i]);
        char ir[2048], name[64];
        snprintf(ir, sizeof ir,
                 "graph mm_%s(%%x: %s[2, 3, 17, 40], %%w: %s[40, 24], %%wb: %s[3, 40, 24], %%v: %s[40], "
                 "%%u: %s[24], %%q: %s[2, 1, 9, 16], %%k: %s[3, 11, 16], %%vv: %s[2, 3, 11, 8]) {\n"
                 "  %%a = matmul(%%x, %%w)\n  %%b = matmul(%%x, %%wb)\n  %%c = matmul(%%v, %%w)\n"
                 "  %%d = matmul(%%x, %%v)\n  %%e = matmul(%%v, %%wb)\n  %%f = matmul(%%u, %%u)\n"
                 "  %%at = attention(%%q, %%k, %%vv)\n  %%ac = attention(%%q, %%k, %%vv, causal=true, scale=0.3)\n"
                 "  return %%a, %%b, %%c, %%d, %%e, %%at, %%ac\n}\n",
                 dt, dt, dt, dt, dt, dt, dt, dt, dt);
        snprintf(name, sizeof name, "matmul and attention %s", dt);
        run_case_opts(name, ir, &o, false);
        if (floats[i] == FC_F64) continue; /* gemm epilogues: f32, f16, bf16 */
        snprintf(ir, sizeof ir,
                 "graph gemm_%s(%%x: %s[2, 13, 48], %%w1: %s[48, 32], %%b1: %s[32], %%w2: %s[48, 20], "
                 "%%b2: %s[20], %%wt: %s[24, 48], %%res: %s[2, 13, 24]) {\n"
                 "  %%h1 = matmul(%%x, %%w1)\n  %%g1 = add(%%h1, %%b1)\n  %%y1 = gelu_tanh(%%g1)\n"
                 "  %%h2 = matmul(%%x, %%w2)\n  %%g2 = add(%%h2, %%b2)\n  %%y2 = gelu_tanh(%%g2)\n"
                 "  %%wtt = permute(%%wt, perm=[1, 0])\n  %%h3 = matmul(%%x, %%wtt)\n  %%s3 = mul(%%h3, 0.125)\n"
                 "  %%r3 = add(%%s3, %%res)\n  %%y3 = relu(%%r3)\n  %%h4 = matmul(%%x, %%w1)\n  %%y4 = silu(%%h4)\n"
                 "  return %%y1, %%y2, %%y3, %%y4\n}\n",
                 dt, dt, dt, dt, dt, dt, dt, dt);
        snprintf(name, sizeof name, "gemm epilogues %s", dt);
        run_case_opts(name, ir, &o, false);
    }
    run_case_opts("attention masks (bool, float, broadcast)",
                  "graph f(%q: f32[2, 3, 9, 16], %k: f32[2, 3, 11, 16], %v: f32[2, 3, 11, 8], %mb: bool[9, 11], "
                  "%mf: f32[3, 1, 11], %mh: bf16[2, 1, 9, 1]) {\n  %a = attention(%q, %k, %v, %mb)\n"
                  "  %b = attention(%q, %k, %v, %mf, causal=true)\n  %c = attention(%q, %k, %v, %mh, scale=0.5)\n"
                  "  return %a, %b, %c\n}\n",
                  &o, false);
    run_case_opts("autocast gemm (bf16 operands, f32 tail, bf16 result)",
                  "graph f(%x: bf16[9, 64], %w: bf16[64, 40], %b: f32[40]) {\n  %xf = cast(%x, to=f32)\n"
                  "  %wf = cast(%w, to=f32)\n  %h = matmul(%xf, %wf)\n  %g = add(%h, %b)\n  %y = cast(%g, to=bf16)\n"
                  "  return %y\n}\n",
                  &o, false);
    run_case_opts("transposed left operand",
                  "graph f(%x: f32[3, 64, 10], %w: f32[64, 12]) {\n  %xt = permute(%x, perm=[0, 2, 1])\n"
                  "  %y = matmul(%xt, %w)\n  return %y\n}\n",
                  &o, false);
    run_case_opts("empty inner dimension", "graph f(%x: f32[4, 0], %w: f32[0, 6]) {\n  %y = matmul(%x, %w)\n  return %y\n}\n",
                  &o, false);
}

/* The examples at a small size, fused and unfused, with activations in
 * [-1, 1] and trained-like weight scales (of order 1/sqrt(fan-in)): larger
 * weights make the attention scores so large that softmax picks keys by
 * rounding noise, in any precision. */
static void test_examples(void) {
    static const char *const files[] = {"examples/gpt2_block.ir", "examples/llama_block.ir"};
    const char *src = getenv("FUSEC_SRC");
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", files[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f) {
            fprintf(stderr, "cannot open %s\n", path);
            continue;
        }
        char *text = calloc(1, 1 << 16);
        size_t n = fread(text, 1, (1 << 16) - 1, f);
        fclose(f);
        text[n] = 0;
        fc_binding binds[2] = {{"B", 2}, {"T", 8}};
        case_opts o = {.fill = FILL_PLAIN, .binds = binds, .nbinds = 2, .weight_scale = 1.0, .scale = 0.5,
                       .expect_kernels = -1};
        run_case_opts(files[i], text, &o, false);
        o.unfused = true;
        run_case_opts(files[i], text, &o, false);
        free(text);
    }
}

/* ---- f32 math accuracy ------------------------------------------------------------ */

/* The inline f32 functions (codegen/llvm/mathlib.c) over dense sweeps,
 * measured in ulps of the correctly rounded result (the reference computes
 * in double and rounds once): a much tighter check than the tolerance. */
static void test_math_ulps(void) {
    /* Errors below `floor` (absolute) are not counted. gelu is decomposed
     * into x/2 (1 + erf(x / sqrt 2)) before codegen, and the graph itself
     * rounds erf's result to f32 before adding 1: for negative x that
     * cancels, and only the absolute error means anything there. In
     * gelu_tanh's negative tail, x / (1 + e^-2u), the f32 roundings of u
     * (|2u| up to 16 at x = -5) become relative errors of e^-2u of up to
     * |2u| ulps each: tens of ulps, 3e-6 relative, of results below 1e-3. */
    static const struct {
        const char *op;
        double lo, hi, max_ulps, floor;
    } sweeps[] = {
        {"exp", -100, 88, 2, 0},     {"log", 1e-30, 1e30, 2, 0},  {"tanh", -12, 12, 2, 0},
        {"erf", -5, 5, 3, 0},        {"sigmoid", -80, 80, 3, 0},  {"gelu", -5, 5, 4, 1e-7},
        {"gelu_tanh", -5, 5, 64, 0}, {"silu", -20, 20, 4, 0},
    };
    const int64_t n = 1 << 18;
    for (size_t s = 0; s < sizeof sweeps / sizeof sweeps[0]; s++) {
        char ir[256];
        snprintf(ir, sizeof ir, "graph f(%%x: f32[%lld]) {\n  %%y = %s(%%x)\n  return %%y\n}\n", (long long)n, sweeps[s].op);
        fc_graph *g = NULL;
        fc_cpu_program *p = NULL;
        CHECK_EQ_INT(fc_parse(ctx, "ulps", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
        CHECK_EQ_INT(fc_cpu_compile(g, &p), FC_OK);
        if (!p) {
            fprintf(stderr, "%s\n", fc_last_error(ctx));
            fc_graph_free(g);
            continue;
        }
        fc_tensor in = {.dtype = FC_F32, .rank = 1, .shape = {n}}, got, want;
        in.data = malloc(sizeof(float) * (size_t)n);
        bool logscale = sweeps[s].lo > 0;
        for (int64_t i = 0; i < n; i++) {
            double t = (double)i / (double)(n - 1);
            ((float *)in.data)[i] = (float)(logscale ? exp(log(sweeps[s].lo) + t * (log(sweeps[s].hi) - log(sweeps[s].lo)))
                                                     : sweeps[s].lo + t * (sweeps[s].hi - sweeps[s].lo));
        }
        CHECK_EQ_INT(fc_cpu_run(p, &in, 1, &got, 1), FC_OK);
        CHECK_EQ_INT(fc_run_reference(g, &in, 1, &want, 1), FC_OK);
        double worst = 0, at = 0;
        for (int64_t i = 0; i < n && got.data && want.data; i++) {
            float gv = ((float *)got.data)[i], wv = ((float *)want.data)[i];
            if (gv == wv) continue;
            float aw = fabsf(wv);
            double ulp = aw < 1.17549435e-38f ? 1.401298464e-45 : (double)(nextafterf(aw, INFINITY) - aw);
            double e = fabs((double)gv - (double)wv) / ulp;
            /* Below 1e-30 absolute errors are far inside any tolerance
             * (subnormal results of exp and sigmoid). */
            if (fabs((double)gv - (double)wv) < fmax(1e-30, sweeps[s].floor)) continue;
            if (e > worst) {
                worst = e;
                at = ((float *)in.data)[i];
            }
        }
        printf("  f32 %-9s over [%g, %g]: max error %.2f ulp (at %.9g)%s\n", sweeps[s].op, sweeps[s].lo, sweeps[s].hi,
               worst, at, sweeps[s].floor > 0 ? " (errors above the floor)" : "");
        CHECK(worst <= sweeps[s].max_ulps);
        fc_tensor_release(&got);
        fc_tensor_release(&want);
        free(in.data);
        fc_cpu_program_free(p);
        fc_graph_free(g);
    }
}

/* ---- threads ------------------------------------------------------------------------ */

static bool same_bytes(const fc_tensor *a, const fc_tensor *b) {
    int64_t n = fc_tensor_numel(a);
    return n == fc_tensor_numel(b) && !memcmp(a->data, b->data, (size_t)n * fc_dtype_size(a->dtype));
}

/* Large kernels split across threads: the results are those of one thread
 * (bit for bit: every element and every row is computed by one thread in
 * the same way), and match the reference. */
static void test_threads(void) {
    const char *ir = "graph f(%x: f32[1024, 1000], %r: f32[1000], %h: bf16[1024, 1000]) {\n"
                     "  %a = mul(%x, 1.702)\n  %b = add(%a, %r)\n  %g = gelu(%b)\n  %y = softmax(%g)\n"
                     "  %s = reduce_sum(%h, axes=[0])\n  %z = tanh(%h)\n  return %y, %s, %z\n}\n";
    case_opts o = {.fill = FILL_PLAIN, .threads = 4, .expect_kernels = -1};
    run_case_opts("threads: 4", ir, &o, false);
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "threads", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    fc_tensor in[3];
    for (int i = 0; i < 3; i++) {
        fc_value *p = fc_graph_param(g, i);
        in[i] = (fc_tensor){.dtype = fc_value_dtype(p), .rank = fc_value_rank(p)};
        for (int d = 0; d < in[i].rank; d++) in[i].shape[d] = fc_value_dim(p, d);
        fill_tensor(&in[i], FILL_PLAIN, 1.0);
    }
    fc_tensor out1[3], out4[3];
    fc_cpu_options co;
    fc_cpu_options_default(&co);
    co.threads = 1;
    fc_cpu_program *p1 = NULL, *p4 = NULL;
    CHECK_EQ_INT(fc_cpu_compile_ex(g, &co, &p1), FC_OK);
    co.threads = 4;
    CHECK_EQ_INT(fc_cpu_compile_ex(g, &co, &p4), FC_OK);
    CHECK_EQ_INT(fc_cpu_program_threads(p4), 4);
    CHECK_EQ_INT(fc_cpu_run(p1, in, 3, out1, 3), FC_OK);
    for (int rep = 0; rep < 3; rep++) { /* the pool is reused run after run */
        CHECK_EQ_INT(fc_cpu_run(p4, in, 3, out4, 3), FC_OK);
        for (int k = 0; k < 3; k++) {
            CHECK(same_bytes(&out1[k], &out4[k]));
            fc_tensor_release(&out4[k]);
        }
    }
    char *plan = fc_cpu_program_plan_text(p4);
    CHECK(plan && strstr(plan, "threads=4"));
    free(plan);
    release_tensors(out1, 3);
    release_tensors(in, 3);
    fc_cpu_program_free(p1);
    fc_cpu_program_free(p4);
    fc_graph_free(g);
}

/* ---- storage, API, IR ------------------------------------------------------------------ */

static void test_storage(void) {
    /* A parameter returned as it is, a value returned twice, a value both
     * returned and used, empty tensors; and everything unfused, so that
     * every intermediate lives in the arena. */
    const char *ir = "graph f(%x: f32[1000], %e0: f32[0, 5]) {\n  %e = exp(%x)\n  %s = sin(%e)\n"
                     "  %z = exp(%e0)\n  %c = reduce_sum(%e0, axes=[0])\n  return %x, %e, %s, %e, %z, %c\n}\n";
    run_case("storage edge cases", ir, FILL_PLAIN);
    case_opts o = {.fill = FILL_PLAIN, .unfused = true, .expect_kernels = -1};
    run_case_opts("storage edge cases, unfused", ir, &o, false);
    run_case_opts("composites unfused",
                  "graph f(%x: bf16[7, 100], %w: bf16[100], %b: bf16[100]) {\n  %y = layernorm(%x, %w, %b)\n"
                  "  %s = softmax(%y)\n  return %s\n}\n",
                  &o, false);
}

/* A view of a value computed from a per-row value (each row would need
 * other rows' reductions). Fusion used to put it in the reduction's group;
 * the code generator refused such a plan and ran unfused with a note. Now
 * fusion stores the reduced value first (passes/fuse.c, view_downstream), so
 * the fused plan is accepted, has no note, and the results are right.
 * Softmax then a permute, and a per-row value permuted. */
static void test_refused_fusion(void) {
    static const char *const irs[] = {
        "graph f(%x: f32[4, 4, 4], %y: f32[4, 4, 4]) {\n  %r = reduce_sum(%x, axes=[2])\n  %e = neg(%r)\n"
        "  %p = permute(%e, perm=[1, 0])\n  %f = add(%y, %p)\n  return %f\n}\n",
        "graph f(%x: f32[6, 6]) {\n  %s = softmax(%x)\n  %t = permute(%s, perm=[1, 0])\n  return %t\n}\n",
    };
    for (int i = 0; i < 2; i++) {
        run_case("refused fusion", irs[i], FILL_PLAIN);
        fc_graph *g = NULL;
        fc_cpu_program *p = NULL;
        CHECK_EQ_INT(fc_parse(ctx, "refused", irs[i], strlen(irs[i]), NULL, NULL, 0, &g), FC_OK);
        CHECK_EQ_INT(fc_cpu_compile(g, &p), FC_OK);
        CHECK(p && strstr(fc_cpu_program_note(p), "compiled unfused") == NULL);
        char *plan = p ? fc_cpu_program_plan_text(p) : NULL;
        CHECK(plan && strstr(plan, "note: fused plan refused") == NULL);
        free(plan);
        fc_cpu_program_free(p);
        fc_graph_free(g);
    }
}

static void test_api(void) {
    /* Unbound symbols, bad inputs, NULLs. */
    const char *ir = "graph f(%x: f32[B, 4]) {\n  %y = exp(%x)\n  return %y\n}\n";
    fc_graph *g = NULL;
    fc_cpu_program *p = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "api", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    CHECK_EQ_INT(fc_cpu_compile(g, &p), FC_ERR_INPUT);
    CHECK(p == NULL && strstr(fc_last_error(ctx), "symbol B is unbound"));
    fc_graph_free(g);
    fc_binding b = {"B", 3};
    CHECK_EQ_INT(fc_parse(ctx, "api", ir, strlen(ir), NULL, &b, 1, &g), FC_OK);
    CHECK_EQ_INT(fc_cpu_compile(NULL, &p), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cpu_compile(g, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cpu_compile(g, &p), FC_OK);
    float x[12] = {0}, y[12];
    fc_tensor in = {.dtype = FC_F32, .rank = 2, .shape = {3, 4}, .data = x}, out;
    fc_tensor bad = {.dtype = FC_F32, .rank = 2, .shape = {4, 3}, .data = x};
    CHECK_EQ_INT(fc_cpu_run(p, &bad, 1, &out, 1), FC_ERR_INPUT);
    CHECK(out.data == NULL && strstr(fc_last_error(ctx), "input 0 must be f32[3, 4]"));
    CHECK_EQ_INT(fc_cpu_run(p, &in, 2, &out, 1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cpu_run(p, &in, 1, &out, 2), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cpu_run(NULL, &in, 1, &out, 1), FC_ERR_USAGE);
    fc_tensor into = {.dtype = FC_F32, .rank = 2, .shape = {3, 4}, .data = y};
    CHECK_EQ_INT(fc_cpu_run_into(p, &in, 1, &into, 1), FC_OK);
    CHECK(y[0] == 1.0f && y[11] == 1.0f);
    into.data = NULL;
    CHECK_EQ_INT(fc_cpu_run_into(p, &in, 1, &into, 1), FC_ERR_USAGE);
    double ms = -1;
    CHECK_EQ_INT(fc_cpu_bench(p, &in, 1, &out, 1, 5, &ms), FC_OK);
    CHECK(ms >= 0 && out.data && ((float *)out.data)[5] == 1.0f);
    fc_tensor_release(&out);
    char *plan = fc_cpu_program_plan_text(p);
    CHECK(plan && strstr(plan, "total: 1 kernels, 0 library calls, 0 bytes of intermediates\n"));
    free(plan);
    CHECK(fc_cpu_program_llvm_ir(p) == NULL); /* not kept unless asked */
    CHECK(fc_cpu_program_graph(p) != NULL && fc_cpu_program_plan(p) != NULL);
    fc_cpu_program_free(p);
    fc_cpu_program_free(NULL);
    fc_graph_free(g);
    CHECK(strstr(fc_cpu_target_description(), "LLVM") != NULL);
}

/* The loops vectorize: the kept IR of a pointwise kernel and of a row sum
 * has vector types, and the sum's loop a vector reduction. */
static void test_ir(void) {
    const char *ir = "graph f(%x: f32[64, 1024], %b: f32[1024]) {\n  %a = add(%x, %b)\n  %g = gelu(%a)\n"
                     "  %s = reduce_sum(%g, axes=[1])\n  %e = exp(%x)\n  return %s, %e\n}\n";
    fc_graph *g = NULL;
    fc_cpu_program *p = NULL;
    fc_cpu_options o;
    fc_cpu_options_default(&o);
    o.keep_ir = true;
    CHECK_EQ_INT(fc_parse(ctx, "ir", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    CHECK_EQ_INT(fc_cpu_compile_ex(g, &o, &p), FC_OK);
    const char *text = fc_cpu_program_llvm_ir(p);
    CHECK(text != NULL);
    if (text) {
        CHECK(strstr(text, "x float>") != NULL);
        CHECK(strstr(text, "llvm.vector.reduce.fadd") != NULL || strstr(text, "shufflevector") != NULL);
        CHECK(strstr(text, "call float @expf") == NULL); /* exp is inline code */
        if (getenv("FUSEC_TEST_DUMP")) printf("%s\n", text);
    }
    fc_cpu_program_free(p);
    fc_graph_free(g);
}

/* Allocation failures injected at every step of compiling (the pipeline,
 * the plan, the codegen and the runtime's buffers): each fails cleanly
 * (ASan/LeakSanitizer checks that nothing leaks) or succeeds and runs. */
static void test_alloc_failures(void) {
    const char *ir = "graph f(%x: f32[8, 33], %w: f32[33]) {\n  %y = softmax(%x)\n  %z = rmsnorm(%x, %w)\n"
                     "  %e = exp(%z)\n  return %y, %e\n}\n";
    int failures_seen = 0;
    bool compiled = false;
    for (long n = 1; n < 2000 && !compiled; n++) {
        fc_graph *g = NULL;
        if (fc_parse(ctx, "alloc", ir, strlen(ir), NULL, NULL, 0, &g) != FC_OK) break;
        fc_context_fail_alloc_after(ctx, n);
        fc_cpu_program *p = NULL;
        fc_status st = fc_cpu_compile(g, &p);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK(st == FC_OK || st == FC_ERR_NOMEM);
        if (st != FC_OK) {
            failures_seen++;
            CHECK(p == NULL);
        }
        if (st == FC_OK) { /* past the last allocation: it runs */
            compiled = true;
            fc_tensor in[2] = {{.dtype = FC_F32, .rank = 2, .shape = {8, 33}}, {.dtype = FC_F32, .rank = 1, .shape = {33}}};
            fc_tensor out[2];
            fill_tensor(&in[0], FILL_PLAIN, 1.0);
            fill_tensor(&in[1], FILL_PLAIN, 1.0);
            CHECK_EQ_INT(fc_cpu_run(p, in, 2, out, 2), FC_OK);
            release_tensors(in, 2);
            release_tensors(out, 2);
        }
        fc_cpu_program_free(p);
        fc_graph_free(g);
        fc_clear_error(ctx);
    }
    CHECK(failures_seen > 0);
    CHECK(compiled);
}

int main(void) {
    ctx = fc_context_new();
    if (!fc_cpu_available()) {
        /* The build has no LLVM: compiling says why. */
        fc_graph *g = NULL;
        const char *ir = "graph f(%x: f32[4]) {\n  %y = exp(%x)\n  return %y\n}\n";
        fc_cpu_program *p = NULL;
        CHECK_EQ_INT(fc_parse(ctx, "nollvm", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
        CHECK_EQ_INT(fc_cpu_compile(g, &p), FC_ERR_UNSUPPORTED);
        CHECK_STR(fc_last_error(ctx), "this build has no CPU backend (LLVM not found at configure time)");
        fc_graph_free(g);
        fc_context_free(ctx);
        printf("test_cpu_backend: no CPU backend in this build (skipped the numeric tests)\n");
        return check_report("test_cpu_backend");
    }
    printf("target: %s\n", fc_cpu_target_description());
    test_unary();
    test_binary();
    test_where();
    test_cast();
    test_reduce();
    test_composites();
    test_views();
    test_library();
    test_examples();
    test_math_ulps();
    test_threads();
    test_storage();
    test_refused_fusion();
    test_api();
    test_ir();
    test_alloc_failures();
    printf("test_cpu_backend: %d graphs compared with the reference\n", cases_run);
    fc_context_free(ctx);
    return check_report("test_cpu_backend");
}

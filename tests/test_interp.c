/*
 * test_interp.c - the reference interpreter against values computed by hand
 * or by independent code (direct loops, closed forms, known constants).
 *
 * The interpreter is the oracle for every backend, so what it is checked
 * against here must not share its code: expected values are written out, or
 * computed with plain nested loops over the specific shapes of each test.
 */
#include "check.h"
#include "fusec.h"
#include "ir.h"
#include "runtime/ref/interp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;

/* ------------------------------------------------------------------ */
/* Helpers.                                                            */
/* ------------------------------------------------------------------ */

#define DIMS(...) ((const fc_dim[]){__VA_ARGS__})
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})

/* A host tensor of dtype dt holding vals (rounded to dt); vals NULL: zeros. */
static fc_tensor mk(fc_dtype dt, int rank, const int64_t *shape, const double *vals)
{
    fc_tensor t = {.dtype = dt, .rank = rank};
    for (int i = 0; i < rank; i++)
        t.shape[i] = shape[i];
    int64_t n = fc_tensor_numel(&t);
    t.data = calloc((size_t)n + 1, fc_dtype_size(dt));
    for (int64_t i = 0; vals && i < n; i++)
        fc_interp_store(dt, t.data, i, vals[i]);
    return t;
}

/* A tensor whose element i is f(i): deterministic inputs for bigger tests. */
static fc_tensor mk_fn(fc_dtype dt, int rank, const int64_t *shape, double (*f)(int64_t))
{
    fc_tensor t = mk(dt, rank, shape, NULL);
    for (int64_t i = 0; i < fc_tensor_numel(&t); i++)
        fc_interp_store(dt, t.data, i, f(i));
    return t;
}

/* Pseudo-random values in [-2, 2), a fixed sequence per index. */
static double rnd(int64_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (double)(x % 4096) / 1024.0 - 2.0;
}

/* Element i of a host tensor as a double, decoded here (not by interp.c).
 * NaN for a tensor a failed run left empty, so a failure is reported by the
 * checks instead of crashing the test. */
static double at(const fc_tensor *t, int64_t i)
{
    if (!t->data)
        return NAN;
    switch (t->dtype) {
    case FC_F64: return ((const double *)t->data)[i];
    case FC_F32: return ((const float *)t->data)[i];
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_I64: return (double)((const int64_t *)t->data)[i];
    case FC_I32: return ((const int32_t *)t->data)[i];
    case FC_I8: return ((const int8_t *)t->data)[i];
    case FC_BOOL: return ((const uint8_t *)t->data)[i];
    default: return NAN;
    }
}

static uint16_t bits16(const fc_tensor *t, int64_t i) { return t->data ? ((const uint16_t *)t->data)[i] : 0xdead; }

static void release_all(fc_tensor *ts, int n)
{
    for (int i = 0; i < n; i++)
        fc_tensor_release(&ts[i]);
}

/* Return `out` from g, run it on the inputs (which are released) and give
 * back the one result. */
static fc_tensor run1(fc_graph *g, fc_value *out, int nin, fc_tensor *in)
{
    fc_tensor r = {0};
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);
    CHECK_EQ_INT(fc_graph_return(g, 1, &out), FC_OK);
    fc_status st = fc_run_reference(g, in, nin, &r, 1);
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK)
        fprintf(stderr, "  error: %s\n", fc_last_error(ctx));
    release_all(in, nin);
    return r;
}

static void check_shape(const fc_tensor *t, fc_dtype dt, int rank, const int64_t *shape)
{
    CHECK_EQ_INT(t->dtype, dt);
    CHECK_EQ_INT(t->rank, rank);
    for (int i = 0; i < rank && i < t->rank; i++)
        CHECK_EQ_INT(t->shape[i], shape[i]);
}

/* Relative tolerance around an expected value. */
#define CHECK_REL(got, want, rel) CHECK_NEAR((got), (want), (rel) * fmax(1.0, fabs((double)(want))))

static fc_graph *new_graph(const char *name)
{
    fc_graph *g = fc_graph_new(ctx, name);
    CHECK(g != NULL);
    return g;
}

/* ------------------------------------------------------------------ */
/* Elementwise.                                                        */
/* ------------------------------------------------------------------ */

typedef fc_value *(*unary_fn)(fc_graph *, fc_value *);

/* hardswish at its bends, past them and at NaN (which it keeps). */
static void test_hardswish_edges(void)
{
    static const double xs[] = {-4.0, -3.0, 3.0, 4.0, NAN};
    static const double want[] = {0.0, 0.0, 3.0, 4.0, NAN};
    fc_graph *g = new_graph("hardswish");
    fc_value *x = fc_param(g, "x", FC_F64, 1, DIMS(5));
    fc_tensor in = mk(FC_F64, 1, SHAPE(5), xs);
    fc_tensor r = run1(g, fc_hardswish(g, x), 1, &in);
    for (int i = 0; i < 5 && r.data; i++) {
        if (isnan(want[i])) CHECK(isnan(at(&r, i)));
        else CHECK_REL(at(&r, i), want[i], 1e-15);
    }
    fc_tensor_release(&r);
    fc_graph_free(g);
}

static void test_unary(void)
{
    static const double xs[] = {-2.0, -0.5, 0.0, 0.5, 1.0, 3.0};
    const double pi = 3.14159265358979323846;
    struct {
        const char *name;
        unary_fn fn;
    } ops[] = {
        {"neg", fc_neg},   {"abs", fc_abs},         {"exp", fc_exp},       {"log", fc_log},
        {"sqrt", fc_sqrt}, {"rsqrt", fc_rsqrt},     {"recip", fc_recip},   {"sin", fc_sin},
        {"cos", fc_cos},   {"tanh", fc_tanh},       {"sigmoid", fc_sigmoid}, {"relu", fc_relu},
        {"gelu", fc_gelu}, {"gelu_tanh", fc_gelu_tanh}, {"silu", fc_silu}, {"erf", fc_erf},
        {"hardswish", fc_hardswish},
    };
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        int failed_before = check_failed;
        fc_graph *g = new_graph("unary");
        fc_value *x = fc_param(g, "x", FC_F64, 1, DIMS(6));
        fc_tensor in = mk(FC_F64, 1, SHAPE(6), xs);
        fc_tensor r = run1(g, ops[k].fn(g, x), 1, &in);
        check_shape(&r, FC_F64, 1, SHAPE(6));
        for (int i = 0; i < 6 && r.data; i++) {
            double a = xs[i], want;
            switch (k) {
            case 0: want = -a; break;
            case 1: want = a < 0 ? -a : a; break;
            case 2: want = exp(a); break;
            case 3: want = a < 0 ? NAN : a == 0 ? -INFINITY : log(a); break;
            case 4: want = a < 0 ? NAN : sqrt(a); break;
            case 5: want = a < 0 ? NAN : a == 0 ? INFINITY : pow(a, -0.5); break;
            case 6: want = a == 0 ? INFINITY : 1 / a; break;
            case 7: want = sin(a); break;
            case 8: want = cos(a); break;
            case 9: want = (exp(a) - exp(-a)) / (exp(a) + exp(-a)); break;
            case 10: want = exp(a) / (1 + exp(a)); break;
            case 11: want = a > 0 ? a : 0; break;
            case 12: want = a / 2 * (1 + erf(a / sqrt(2))); break;
            case 13: want = a / 2 * (1 + tanh(sqrt(2 / pi) * (a + 0.044715 * a * a * a))); break;
            case 14: want = a * exp(a) / (1 + exp(a)); break;
            case 15: want = erf(a); break;
            default: want = a * fmin(fmax(a + 3, 0), 6) / 6; break;
            }
            CHECK_REL(at(&r, i), want, 1e-14);
        }
        if (check_failed != failed_before)
            fprintf(stderr, "  (in %s)\n", ops[k].name);
        fc_tensor_release(&r);
        fc_graph_free(g);
    }

    /* Known constants, so the closed forms above are not the only check. */
    fc_graph *g = new_graph("consts");
    fc_value *x = fc_param(g, "x", FC_F64, 1, DIMS(1));
    fc_value *outs[3] = {fc_gelu(g, x), fc_gelu_tanh(g, x), fc_silu(g, x)};
    CHECK_EQ_INT(fc_graph_return(g, 3, outs), FC_OK);
    fc_tensor in = mk(FC_F64, 1, SHAPE(1), VALS(1.0)), r[3];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 3), FC_OK);
    CHECK_NEAR(at(&r[0], 0), 0.8413447460685429, 1e-15);
    CHECK_NEAR(at(&r[1], 0), 0.8411919906082768, 1e-15);
    CHECK_NEAR(at(&r[2], 0), 0.7310585786300049, 1e-15);
    release_all(r, 3);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* Integer inputs: neg/abs/relu keep the dtype, exp promotes to f32. */
    g = new_graph("unary_int");
    x = fc_param(g, "x", FC_I32, 1, DIMS(3));
    fc_value *o2[2] = {fc_abs(g, x), fc_exp(g, x)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o2), FC_OK);
    in = mk(FC_I32, 1, SHAPE(3), VALS(-3, 0, 2));
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 2), FC_OK);
    check_shape(&r[0], FC_I32, 1, SHAPE(3));
    check_shape(&r[1], FC_F32, 1, SHAPE(3));
    CHECK_EQ_INT(at(&r[0], 0), 3);
    CHECK_EQ_INT(at(&r[0], 2), 2);
    CHECK_NEAR(at(&r[1], 2), (float)exp(2.0), 0);
    release_all(r, 2);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* f32 results are the float64 value rounded once to f32. */
    g = new_graph("unary_f32");
    x = fc_param(g, "x", FC_F32, 1, DIMS(1));
    in = mk(FC_F32, 1, SHAPE(1), VALS(0.1f));
    r[0] = run1(g, fc_exp(g, x), 1, &in);
    CHECK_NEAR(at(&r[0], 0), (float)exp((double)0.1f), 0);
    fc_tensor_release(&r[0]);
    fc_graph_free(g);
}

typedef fc_value *(*binary_fn)(fc_graph *, fc_value *, fc_value *);

static double binop(int k, double a, double b)
{
    switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return a >= b ? a : b;
    case 5: return a <= b ? a : b;
    default: return pow(a, b);
    }
}

/* a: [2, 1, 3], b: [4, 1] -> [2, 4, 3]: a size-1 dim and a rank difference. */
static void test_binary_broadcast(void)
{
    binary_fn fns[] = {fc_add, fc_sub, fc_mul, fc_div, fc_max, fc_min, fc_pow};
    for (int k = 0; k < 7; k++) {
        fc_graph *g = new_graph("binary");
        fc_value *a = fc_param(g, "a", FC_F64, 3, DIMS(2, 1, 3));
        fc_value *b = fc_param(g, "b", FC_F64, 2, DIMS(4, 1));
        fc_tensor in[2] = {mk(FC_F64, 3, SHAPE(2, 1, 3), VALS(1, 2, 3, 4, 5, 6)),
                           mk(FC_F64, 2, SHAPE(4, 1), VALS(0.5, -1, 2, 3))};
        fc_tensor r = run1(g, fns[k](g, a, b), 2, in);
        check_shape(&r, FC_F64, 3, SHAPE(2, 4, 3));
        static const double av[2][3] = {{1, 2, 3}, {4, 5, 6}}, bv[4] = {0.5, -1, 2, 3};
        for (int i = 0; i < 2 && r.data; i++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 3; l++)
                    CHECK_REL(at(&r, (i * 4 + j) * 3 + l), binop(k, av[i][l], bv[j]), 1e-15);
        fc_tensor_release(&r);
        fc_graph_free(g);
    }

    /* [3] with [2, 3]: the lower rank aligns on the right. */
    fc_graph *g = new_graph("rank");
    fc_value *a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    fc_value *b = fc_param(g, "b", FC_F32, 2, DIMS(2, 3));
    fc_tensor in[2] = {mk(FC_F32, 1, SHAPE(3), VALS(10, 20, 30)), mk(FC_F32, 2, SHAPE(2, 3), VALS(1, 2, 3, 4, 5, 6))};
    fc_tensor r = run1(g, fc_sub(g, a, b), 2, in);
    check_shape(&r, FC_F32, 2, SHAPE(2, 3));
    static const double want[] = {9, 18, 27, 6, 15, 24};
    for (int i = 0; i < 6 && r.data; i++)
        CHECK_NEAR(at(&r, i), want[i], 0);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* max/min propagate NaN (torch.maximum), not fmax. */
    g = new_graph("nan");
    a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    b = fc_param(g, "b", FC_F32, 1, DIMS(3));
    fc_value *o[2] = {fc_max(g, a, b), fc_min(g, a, b)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in2[2] = {mk(FC_F32, 1, SHAPE(3), VALS(NAN, 1, 2)), mk(FC_F32, 1, SHAPE(3), VALS(1, NAN, 3))};
    fc_tensor r2[2];
    CHECK_EQ_INT(fc_run_reference(g, in2, 2, r2, 2), FC_OK);
    CHECK(isnan(at(&r2[0], 0)) && isnan(at(&r2[0], 1)) && at(&r2[0], 2) == 3);
    CHECK(isnan(at(&r2[1], 0)) && isnan(at(&r2[1], 1)) && at(&r2[1], 2) == 2);
    release_all(r2, 2);
    release_all(in2, 2);
    fc_graph_free(g);
}

static void test_compare_where(void)
{
    binary_fn fns[] = {fc_eq, fc_ne, fc_lt, fc_le, fc_gt, fc_ge};
    static const double av[] = {1, 2, 3, NAN}, bv[] = {2, 2, 2, 2};
    static const int want[6][4] = {
        {0, 1, 0, 0}, {1, 0, 1, 1}, {1, 0, 0, 0}, {1, 1, 0, 0}, {0, 0, 1, 0}, {0, 1, 1, 0},
    };
    for (int k = 0; k < 6; k++) {
        fc_graph *g = new_graph("cmp");
        fc_value *a = fc_param(g, "a", FC_F32, 1, DIMS(4));
        fc_value *b = fc_param(g, "b", FC_F32, 1, DIMS(4));
        fc_tensor in[2] = {mk(FC_F32, 1, SHAPE(4), av), mk(FC_F32, 1, SHAPE(4), bv)};
        fc_tensor r = run1(g, fns[k](g, a, b), 2, in);
        check_shape(&r, FC_BOOL, 1, SHAPE(4));
        for (int i = 0; i < 4 && r.data; i++)
            CHECK_EQ_INT(at(&r, i), want[k][i]);
        fc_tensor_release(&r);
        fc_graph_free(g);
    }

    /* where(cond [2, 1], a [3], b []) broadcasts all three to [2, 3]. */
    fc_graph *g = new_graph("where");
    fc_value *c = fc_param(g, "c", FC_BOOL, 2, DIMS(2, 1));
    fc_value *a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    fc_value *b = fc_param(g, "b", FC_F32, 0, DIMS(0)); /* not NULL: see fc_build_param */
    fc_tensor in[3] = {mk(FC_BOOL, 2, SHAPE(2, 1), VALS(1, 0)), mk(FC_F32, 1, SHAPE(3), VALS(1, 2, 3)),
                       mk(FC_F32, 0, NULL, VALS(-7))};
    fc_tensor r = run1(g, fc_where(g, c, a, b), 3, in);
    check_shape(&r, FC_F32, 2, SHAPE(2, 3));
    static const double w[] = {1, 2, 3, -7, -7, -7};
    for (int i = 0; i < 6 && r.data; i++)
        CHECK_NEAR(at(&r, i), w[i], 0);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* where with a weak scalar branch takes the other branch's dtype. */
    g = new_graph("where_weak");
    c = fc_param(g, "c", FC_BOOL, 1, DIMS(2));
    a = fc_param(g, "a", FC_BF16, 1, DIMS(2));
    in[0] = mk(FC_BOOL, 1, SHAPE(2), VALS(1, 0));
    in[1] = mk(FC_BF16, 1, SHAPE(2), VALS(4, 4));
    r = run1(g, fc_where(g, c, a, fc_scalar(g, 0.1)), 2, in);
    check_shape(&r, FC_BF16, 1, SHAPE(2));
    CHECK_NEAR(at(&r, 0), 4, 0);
    CHECK_NEAR(at(&r, 1), 0.10009765625, 0); /* 0.1 in bf16 */
    fc_tensor_release(&r);
    fc_graph_free(g);
}

static void test_promotion_and_weak(void)
{
    struct {
        fc_dtype a, b, want;
    } cases[] = {
        {FC_BF16, FC_F32, FC_F32}, {FC_F16, FC_BF16, FC_F32}, {FC_I32, FC_F32, FC_F32},
        {FC_I32, FC_BF16, FC_BF16}, {FC_I8, FC_I64, FC_I64},  {FC_BOOL, FC_I32, FC_I32},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fc_graph *g = new_graph("promote");
        fc_value *a = fc_param(g, "a", cases[k].a, 1, DIMS(2));
        fc_value *b = fc_param(g, "b", cases[k].b, 1, DIMS(2));
        fc_tensor in[2] = {mk(cases[k].a, 1, SHAPE(2), VALS(1, 0)), mk(cases[k].b, 1, SHAPE(2), VALS(2, 3))};
        fc_tensor r = run1(g, fc_add(g, a, b), 2, in);
        check_shape(&r, cases[k].want, 1, SHAPE(2));
        CHECK_NEAR(at(&r, 0), 3, 0);
        CHECK_NEAR(at(&r, 1), 3, 0);
        fc_tensor_release(&r);
        fc_graph_free(g);
    }

    /* bf16 + f32 is computed and rounded in f32: 1 + 2^-20 survives. */
    fc_graph *g = new_graph("bf16_f32");
    fc_value *a = fc_param(g, "a", FC_BF16, 1, DIMS(1));
    fc_value *b = fc_param(g, "b", FC_F32, 1, DIMS(1));
    fc_tensor in[2] = {mk(FC_BF16, 1, SHAPE(1), VALS(1)), mk(FC_F32, 1, SHAPE(1), VALS(0x1p-20))};
    fc_tensor r = run1(g, fc_add(g, a, b), 2, in);
    CHECK_NEAR(at(&r, 0), 1 + 0x1p-20, 0);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* A weak float scalar of a bf16 multiply is taken in f32, as eager
     * PyTorch takes a Python scalar (fc_weak_scalar_dtype): x * 1.702 is
     * x * 1.702f, rounded once to bf16. With x = 1 that is 1.703125; with
     * x = 3, 5.106 rounds to 5.09375, where multiplying by the bf16 1.702
     * (1.703125) would give 5.109375 -> 5.125. */
    g = new_graph("weak_bf16");
    a = fc_param(g, "x", FC_BF16, 1, DIMS(2));
    in[0] = mk(FC_BF16, 1, SHAPE(2), VALS(1, 3));
    r = run1(g, fc_mul(g, a, fc_scalar(g, 1.702)), 1, in);
    check_shape(&r, FC_BF16, 1, SHAPE(2));
    CHECK_NEAR(at(&r, 0), 1.703125, 0);
    CHECK_NEAR(at(&r, 1), 5.09375, 0);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* A weak float with an integer tensor gives f32; a weak int keeps i32.
     * fc_scalar always makes a float; the parser marks integer literals
     * weak_int afterwards, and so does this test. */
    g = new_graph("weak_int");
    a = fc_param(g, "x", FC_I32, 1, DIMS(2));
    fc_value *three = fc_scalar(g, 3);
    three->weak_int = true;
    fc_value *o[3] = {fc_add(g, a, fc_scalar(g, 1.5)), fc_mul(g, three, a), fc_div(g, a, fc_scalar(g, 2))};
    CHECK_EQ_INT(fc_graph_return(g, 3, o), FC_OK);
    in[0] = mk(FC_I32, 1, SHAPE(2), VALS(1, -7));
    fc_tensor r3[3];
    CHECK_EQ_INT(fc_run_reference(g, in, 1, r3, 3), FC_OK);
    check_shape(&r3[0], FC_F32, 1, SHAPE(2));
    check_shape(&r3[1], FC_I32, 1, SHAPE(2));
    check_shape(&r3[2], FC_F32, 1, SHAPE(2)); /* true division */
    CHECK_NEAR(at(&r3[0], 0), 2.5, 0);
    CHECK_NEAR(at(&r3[0], 1), -5.5, 0);
    CHECK_NEAR(at(&r3[1], 1), -21, 0);
    CHECK_NEAR(at(&r3[2], 1), -3.5, 0);
    release_all(r3, 3);
    fc_tensor_release(&in[0]);
    fc_graph_free(g);

    /* A compare with a weak float is done in f32, not in the tensor's i32:
     * 1 == 1.5 is false (rounding 1.5 to i32 would make it true). */
    g = new_graph("weak_cmp");
    a = fc_param(g, "x", FC_I32, 1, DIMS(2));
    fc_value *c2[2] = {fc_lt(g, a, fc_scalar(g, 1.5)), fc_gt(g, fc_scalar(g, 1.5), a)};
    CHECK_EQ_INT(fc_graph_return(g, 2, c2), FC_OK);
    in[0] = mk(FC_I32, 1, SHAPE(2), VALS(1, 2));
    fc_tensor rc[2];
    CHECK_EQ_INT(fc_run_reference(g, in, 1, rc, 2), FC_OK);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(at(&rc[k], 0), 1);
        CHECK_EQ_INT(at(&rc[k], 1), 0);
    }
    release_all(rc, 2);
    fc_tensor_release(&in[0]);
    fc_graph_free(g);

    g = new_graph("weak_cmp_eq");
    a = fc_param(g, "x", FC_I32, 1, DIMS(1));
    in[0] = mk(FC_I32, 1, SHAPE(1), VALS(1));
    r = run1(g, fc_eq(g, a, fc_scalar(g, 1.5)), 1, in);
    CHECK_EQ_INT(at(&r, 0), 0);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* ...and with a bf16 tensor in bf16: 0.1 rounds to 0.10009765625, so
     * x = 0.10009765625 equals it. */
    g = new_graph("weak_cmp_bf16");
    a = fc_param(g, "x", FC_BF16, 1, DIMS(1));
    in[0] = mk(FC_BF16, 1, SHAPE(1), VALS(0.1));
    r = run1(g, fc_eq(g, a, fc_scalar(g, 0.1)), 1, in);
    CHECK_EQ_INT(at(&r, 0), 1);
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* pow with a weak exponent. */
    g = new_graph("pow");
    a = fc_param(g, "x", FC_F32, 1, DIMS(3));
    in[0] = mk(FC_F32, 1, SHAPE(3), VALS(-2, 0.5, 4));
    r = run1(g, fc_pow(g, a, fc_scalar(g, 2)), 1, in);
    CHECK_NEAR(at(&r, 0), 4, 0);
    CHECK_NEAR(at(&r, 1), 0.25, 0);
    CHECK_NEAR(at(&r, 2), 16, 0);
    fc_tensor_release(&r);
    fc_graph_free(g);
}

/* Casts from f64 to the narrow formats: nearest-even, ties, overflow. */
static void test_rounding(void)
{
    static const double xs[] = {
        1 + 0x1p-8,     /* bf16 tie between 1 and 1+2^-7: even is 1 (exact in f16) */
        1 + 3 * 0x1p-8, /* bf16 tie: even is 1 + 2^-6 (exact in f16) */
        1 + 0x1p-11,    /* f16 tie between 1 and 1+2^-10: even is 1 */
        1 + 3 * 0x1p-11, /* f16 tie: even is 1 + 2^-9 */
        65504,          /* f16 max */
        65519.99,       /* below the f16 overflow midpoint: 65504 */
        65520,          /* f16 midpoint to 2^16: even is 2^16 = inf */
        3.4e38,         /* past bf16's overflow midpoint: inf */
        -1e39,          /* -inf in both */
        0x1p-25,        /* f16 subnormal tie between 0 and 2^-24: 0 */
        3 * 0x1p-25,    /* f16 subnormal tie: 2^-23 */
        NAN,
    };
    static const uint16_t want_f16[] = {0x3c04, 0x3c0c, 0x3c00, 0x3c02, 0x7bff, 0x7bff,
                                        0x7c00, 0x7c00, 0xfc00, 0x0000, 0x0002, 0};
    static const uint16_t want_bf16[] = {0x3f80, 0x3f82, 0x3f80, 0x3f80, 0x4780, 0x4780,
                                         0x4780, 0x7f80, 0xff80, 0x3300, 0x33c0, 0};
    const int n = (int)(sizeof xs / sizeof xs[0]);
    fc_graph *g = new_graph("round");
    fc_value *x = fc_param(g, "x", FC_F64, 1, DIMS(n));
    fc_value *o[2] = {fc_cast(g, x, FC_F16), fc_cast(g, x, FC_BF16)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in = mk(FC_F64, 1, SHAPE(n), xs), r[2];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 2), FC_OK);
    for (int i = 0; i < n - 1; i++) {
        if (bits16(&r[0], i) != want_f16[i] || bits16(&r[1], i) != want_bf16[i])
            fprintf(stderr, "  x[%d] = %.17g: f16 %#06x (want %#06x), bf16 %#06x (want %#06x)\n", i, xs[i],
                    bits16(&r[0], i), want_f16[i], bits16(&r[1], i), want_bf16[i]);
        CHECK_EQ_INT(bits16(&r[0], i), want_f16[i]);
        CHECK_EQ_INT(bits16(&r[1], i), want_bf16[i]);
    }
    CHECK(isnan(at(&r[0], n - 1)) && isnan(at(&r[1], n - 1)));
    release_all(r, 2);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* An f16 add that overflows rounds to inf, and one that ties rounds to
     * even: 2048 + 1 = 2049 lies halfway between f16 2048 and 2050. */
    g = new_graph("f16_add");
    fc_value *a = fc_param(g, "a", FC_F16, 1, DIMS(3));
    fc_value *b = fc_param(g, "b", FC_F16, 1, DIMS(3));
    fc_tensor in2[2] = {mk(FC_F16, 1, SHAPE(3), VALS(60000, 2048, 2050)), mk(FC_F16, 1, SHAPE(3), VALS(10000, 1, 1))};
    fc_tensor s = run1(g, fc_add(g, a, b), 2, in2);
    CHECK_EQ_INT(bits16(&s, 0), 0x7c00);
    CHECK_NEAR(at(&s, 1), 2048, 0);
    CHECK_NEAR(at(&s, 2), 2052, 0); /* 2051: tie between 2050 (odd) and 2052 */
    fc_tensor_release(&s);
    fc_graph_free(g);

    /* Float to integer: truncate toward zero, saturate, NaN -> 0; bool is
     * x != 0 (NaN is true). */
    static const double fx[] = {2.7, -2.7, NAN, 1e10, -300, 0.25, -0.0};
    g = new_graph("float_int");
    x = fc_param(g, "x", FC_F32, 1, DIMS(7));
    fc_value *o4[4] = {fc_cast(g, x, FC_I32), fc_cast(g, x, FC_I8), fc_cast(g, x, FC_BOOL), fc_cast(g, x, FC_I64)};
    CHECK_EQ_INT(fc_graph_return(g, 4, o4), FC_OK);
    in = mk(FC_F32, 1, SHAPE(7), fx);
    fc_tensor r4[4];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r4, 4), FC_OK);
    static const double wi32[] = {2, -2, 0, 2147483647, -300, 0, 0};
    static const double wi8[] = {2, -2, 0, 127, -128, 0, 0};
    static const double wb[] = {1, 1, 1, 1, 1, 1, 0};
    static const double wi64[] = {2, -2, 0, 1e10, -300, 0, 0};
    for (int i = 0; i < 7; i++) {
        CHECK_EQ_INT(at(&r4[0], i), wi32[i]);
        CHECK_EQ_INT(at(&r4[1], i), wi8[i]);
        CHECK_EQ_INT(at(&r4[2], i), wb[i]);
        CHECK_NEAR(at(&r4[3], i), wi64[i], 0);
    }
    release_all(r4, 4);
    fc_tensor_release(&in);
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* Reductions and normalizations.                                      */
/* ------------------------------------------------------------------ */

static double ident(int64_t i) { return (double)i; }

static void test_reduce(void)
{
    /* x[i][j][k] = 12i + 4j + k over [2, 3, 4]. */
    fc_graph *g = new_graph("reduce");
    fc_value *x = fc_param(g, "x", FC_F64, 3, DIMS(2, 3, 4));
    fc_value *o[6] = {
        fc_reduce_sum(g, x, 1, (const int[]){-1}, true),
        fc_reduce_sum(g, x, 2, (const int[]){0, -1}, false),
        fc_reduce_max(g, x, 0, NULL, false),
        fc_reduce_min(g, x, 1, (const int[]){1}, false),
        fc_reduce_mean(g, x, 2, (const int[]){2, 0}, true),
        fc_reduce_sum(g, x, 0, NULL, true),
    };
    CHECK_EQ_INT(fc_graph_return(g, 6, o), FC_OK);
    fc_tensor in = mk_fn(FC_F64, 3, SHAPE(2, 3, 4), ident), r[6];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 6), FC_OK);

    check_shape(&r[0], FC_F64, 3, SHAPE(2, 3, 1));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++)
                s += 12 * i + 4 * j + k;
            CHECK_NEAR(at(&r[0], i * 3 + j), s, 0);
        }
    check_shape(&r[1], FC_F64, 1, SHAPE(3));
    for (int j = 0; j < 3; j++) {
        double s = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++)
                s += 12 * i + 4 * j + k;
        CHECK_NEAR(at(&r[1], j), s, 0);
    }
    check_shape(&r[2], FC_F64, 0, NULL);
    CHECK_NEAR(at(&r[2], 0), 23, 0);
    check_shape(&r[3], FC_F64, 2, SHAPE(2, 4));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            CHECK_NEAR(at(&r[3], i * 4 + k), 12 * i + k, 0);
    check_shape(&r[4], FC_F64, 3, SHAPE(1, 3, 1));
    for (int j = 0; j < 3; j++)
        CHECK_NEAR(at(&r[4], j), 7.5 + 4 * j, 1e-15); /* mean over i, k of 12i + 4j + k */
    check_shape(&r[5], FC_F64, 3, SHAPE(1, 1, 1));
    CHECK_NEAR(at(&r[5], 0), 23 * 24 / 2, 0);
    release_all(r, 6);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* reduce_sum of i32 gives i64; reduce_max propagates NaN. */
    g = new_graph("reduce_types");
    x = fc_param(g, "x", FC_I32, 1, DIMS(3));
    fc_value *y = fc_param(g, "y", FC_F32, 2, DIMS(2, 2));
    fc_value *o2[2] = {fc_reduce_sum(g, x, 0, NULL, false), fc_reduce_max(g, y, 1, (const int[]){-1}, false)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o2), FC_OK);
    fc_tensor in2[2] = {mk(FC_I32, 1, SHAPE(3), VALS(2000000000, 2000000000, 5)),
                        mk(FC_F32, 2, SHAPE(2, 2), VALS(1, NAN, 3, -4))};
    CHECK_EQ_INT(fc_run_reference(g, in2, 2, r, 2), FC_OK);
    check_shape(&r[0], FC_I64, 0, NULL);
    CHECK_EQ_INT(at(&r[0], 0), 4000000005LL);
    CHECK(isnan(at(&r[1], 0)));
    CHECK_NEAR(at(&r[1], 1), 3, 0);
    release_all(r, 2);
    release_all(in2, 2);
    fc_graph_free(g);

    /* Empty axis: sum is 0; a max has no value, and the builder refuses it
     * (as PyTorch does), so no backend ever computes one. */
    g = new_graph("reduce_empty");
    x = fc_param(g, "x", FC_F32, 2, DIMS(0, 3));
    fc_value *s0 = fc_reduce_sum(g, x, 1, (const int[]){0}, false);
    CHECK(!fc_value_is_poison(s0));
    fc_value *m0 = fc_reduce_max(g, x, 1, (const int[]){0}, false);
    CHECK(fc_value_is_poison(m0));
    CHECK_EQ_INT(fc_graph_status(g), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "reduce_max over axis 0, of size 0") != NULL);
    fc_graph_free(g);
}

static void test_softmax(void)
{
    fc_graph *g = new_graph("softmax");
    fc_value *x = fc_param(g, "x", FC_F64, 2, DIMS(3, 5));
    fc_value *o[2] = {fc_softmax(g, x, -1), fc_softmax(g, x, 0)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in = mk_fn(FC_F64, 2, SHAPE(3, 5), rnd), r[2];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 2), FC_OK);
    for (int i = 0; i < 3; i++) {
        double sum = 0, z = 0;
        for (int j = 0; j < 5; j++)
            z += exp(rnd(i * 5 + j));
        for (int j = 0; j < 5; j++) {
            sum += at(&r[0], i * 5 + j);
            CHECK_REL(at(&r[0], i * 5 + j), exp(rnd(i * 5 + j)) / z, 1e-14);
        }
        CHECK_NEAR(sum, 1, 1e-14);
    }
    for (int j = 0; j < 5; j++) {
        double sum = 0, z = 0;
        for (int i = 0; i < 3; i++)
            z += exp(rnd(i * 5 + j));
        for (int i = 0; i < 3; i++) {
            sum += at(&r[1], i * 5 + j);
            CHECK_REL(at(&r[1], i * 5 + j), exp(rnd(i * 5 + j)) / z, 1e-14);
        }
        CHECK_NEAR(sum, 1, 1e-14);
    }
    release_all(r, 2);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* Large logits do not overflow (the row max is subtracted). */
    g = new_graph("softmax_big");
    x = fc_param(g, "x", FC_F32, 1, DIMS(2));
    in = mk(FC_F32, 1, SHAPE(2), VALS(1000, 1000));
    r[0] = run1(g, fc_softmax(g, x, 0), 1, &in);
    CHECK_NEAR(at(&r[0], 0), 0.5, 0);
    CHECK_NEAR(at(&r[0], 1), 0.5, 0);
    fc_tensor_release(&r[0]);
    fc_graph_free(g);
}

static void test_layernorm_rmsnorm(void)
{
    /* With w = 1, b = 0 every row has mean 0 and (biased) variance 1. */
    fc_graph *g = new_graph("ln");
    fc_value *x = fc_param(g, "x", FC_F64, 2, DIMS(3, 8));
    fc_value *w = fc_param(g, "w", FC_F64, 1, DIMS(8));
    fc_value *b = fc_param(g, "b", FC_F64, 1, DIMS(8));
    static const double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, zeros[8] = {0};
    fc_tensor in[3] = {mk_fn(FC_F64, 2, SHAPE(3, 8), rnd), mk(FC_F64, 1, SHAPE(8), ones),
                       mk(FC_F64, 1, SHAPE(8), zeros)};
    fc_tensor r = run1(g, fc_layernorm(g, x, w, b, -1, 1e-12), 3, in);
    for (int i = 0; i < 3 && r.data; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < 8; j++)
            m += at(&r, i * 8 + j) / 8;
        for (int j = 0; j < 8; j++)
            v += (at(&r, i * 8 + j) - m) * (at(&r, i * 8 + j) - m) / 8;
        CHECK_NEAR(m, 0, 1e-14);
        CHECK_NEAR(v, 1, 1e-9);
    }
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* Over axis 0 of [4, 3] with a real weight and bias, against a loop. */
    g = new_graph("ln_axis0");
    x = fc_param(g, "x", FC_F64, 2, DIMS(4, 3));
    w = fc_param(g, "w", FC_F64, 1, DIMS(4));
    b = fc_param(g, "b", FC_F64, 1, DIMS(4));
    static const double wv[4] = {1, 2, 0.5, -1}, bv[4] = {0, 1, -1, 0.25};
    in[0] = mk_fn(FC_F64, 2, SHAPE(4, 3), rnd);
    in[1] = mk(FC_F64, 1, SHAPE(4), wv);
    in[2] = mk(FC_F64, 1, SHAPE(4), bv);
    r = run1(g, fc_layernorm(g, x, w, b, 0, 1e-5), 3, in);
    for (int j = 0; j < 3 && r.data; j++) {
        double m = 0, v = 0;
        for (int i = 0; i < 4; i++)
            m += rnd(i * 3 + j) / 4;
        for (int i = 0; i < 4; i++)
            v += (rnd(i * 3 + j) - m) * (rnd(i * 3 + j) - m) / 4;
        for (int i = 0; i < 4; i++)
            CHECK_REL(at(&r, i * 3 + j), (rnd(i * 3 + j) - m) / sqrt(v + 1e-5) * wv[i] + bv[i], 1e-13);
    }
    fc_tensor_release(&r);
    fc_graph_free(g);

    /* rmsnorm over the last axis. */
    g = new_graph("rms");
    x = fc_param(g, "x", FC_F64, 3, DIMS(2, 2, 5));
    w = fc_param(g, "w", FC_F64, 1, DIMS(5));
    static const double wr[5] = {1, 0.5, 2, -1, 3};
    in[0] = mk_fn(FC_F64, 3, SHAPE(2, 2, 5), rnd);
    in[1] = mk(FC_F64, 1, SHAPE(5), wr);
    r = run1(g, fc_rmsnorm(g, x, w, 1e-6), 2, in);
    check_shape(&r, FC_F64, 3, SHAPE(2, 2, 5));
    for (int row = 0; row < 4 && r.data; row++) {
        double ms = 0;
        for (int j = 0; j < 5; j++)
            ms += rnd(row * 5 + j) * rnd(row * 5 + j) / 5;
        for (int j = 0; j < 5; j++)
            CHECK_REL(at(&r, row * 5 + j), rnd(row * 5 + j) / sqrt(ms + 1e-6) * wr[j], 1e-13);
    }
    fc_tensor_release(&r);
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* matmul and attention.                                               */
/* ------------------------------------------------------------------ */

static double rnd2(int64_t i) { return rnd(i + 1000); }

static void test_matmul(void)
{
    /* [K] @ [K] -> [], [K] @ [K, N] -> [N], [M, K] @ [K] -> [M]. */
    fc_graph *g = new_graph("mm1");
    fc_value *a = fc_param(g, "a", FC_F64, 1, DIMS(3));
    fc_value *b = fc_param(g, "b", FC_F64, 1, DIMS(3));
    fc_value *m = fc_param(g, "m", FC_F64, 2, DIMS(3, 2));
    fc_value *mt = fc_param(g, "mt", FC_F64, 2, DIMS(2, 3));
    fc_value *o[3] = {fc_matmul(g, a, b), fc_matmul(g, a, m), fc_matmul(g, mt, b)};
    CHECK_EQ_INT(fc_graph_return(g, 3, o), FC_OK);
    fc_tensor in[4] = {mk(FC_F64, 1, SHAPE(3), VALS(1, 2, 3)), mk(FC_F64, 1, SHAPE(3), VALS(4, 5, 6)),
                       mk(FC_F64, 2, SHAPE(3, 2), VALS(1, 2, 3, 4, 5, 6)),
                       mk(FC_F64, 2, SHAPE(2, 3), VALS(1, 0, -1, 2, 2, 2))};
    fc_tensor r[3];
    CHECK_EQ_INT(fc_run_reference(g, in, 4, r, 3), FC_OK);
    check_shape(&r[0], FC_F64, 0, NULL);
    CHECK_NEAR(at(&r[0], 0), 32, 0);
    check_shape(&r[1], FC_F64, 1, SHAPE(2));
    CHECK_NEAR(at(&r[1], 0), 1 * 1 + 2 * 3 + 3 * 5, 0);
    CHECK_NEAR(at(&r[1], 1), 1 * 2 + 2 * 4 + 3 * 6, 0);
    check_shape(&r[2], FC_F64, 1, SHAPE(2));
    CHECK_NEAR(at(&r[2], 0), 4 - 6, 0);
    CHECK_NEAR(at(&r[2], 1), 2 * (4 + 5 + 6), 0);
    release_all(r, 3);
    release_all(in, 4);
    fc_graph_free(g);

    /* Batched with broadcast batch dims: [2, 1, 3, 4] @ [3, 4, 5] -> [2, 3, 3, 5]. */
    g = new_graph("mm_batch");
    a = fc_param(g, "a", FC_F32, 4, DIMS(2, 1, 3, 4));
    b = fc_param(g, "b", FC_F32, 3, DIMS(3, 4, 5));
    in[0] = mk_fn(FC_F32, 4, SHAPE(2, 1, 3, 4), rnd);
    in[1] = mk_fn(FC_F32, 3, SHAPE(3, 4, 5), rnd2);
    fc_tensor c = run1(g, fc_matmul(g, a, b), 2, in);
    check_shape(&c, FC_F32, 4, SHAPE(2, 3, 3, 5));
    for (int p = 0; p < 2 && c.data; p++)
        for (int q = 0; q < 3; q++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 5; j++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++)
                        s += (double)(float)rnd((p * 3 + i) * 4 + k) * (double)(float)rnd2((q * 4 + k) * 5 + j);
                    CHECK_NEAR(at(&c, ((p * 3 + q) * 3 + i) * 5 + j), (float)s, 0);
                }
    fc_tensor_release(&c);
    fc_graph_free(g);
}

/* softmax(q k^T * scale, masked) v, written out as loops: q [B, Sq, D],
 * k [Bk, Sk, D], v [Bk, Sk, Dv], Bk 1 or B (broadcast). */
static void attention_by_hand(const double *q, const double *k, const double *v, int B, int Bk, int Sq, int Sk,
                              int D, int Dv, bool causal, double scale, double *out)
{
    for (int bi = 0; bi < B; bi++) {
        int bk = Bk == 1 ? 0 : bi;
        for (int i = 0; i < Sq; i++) {
            double s[16], mx = -INFINITY, z = 0;
            for (int j = 0; j < Sk; j++) {
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += q[(bi * Sq + i) * D + d] * k[(bk * Sk + j) * D + d];
                s[j] = causal && j > i ? -INFINITY : dot * scale;
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < Sk; j++)
                z += exp(s[j] - mx);
            for (int e = 0; e < Dv; e++) {
                double acc = 0;
                for (int j = 0; j < Sk; j++)
                    acc += exp(s[j] - mx) / z * v[(bk * Sk + j) * Dv + e];
                out[(bi * Sq + i) * Dv + e] = acc;
            }
        }
    }
}

static void test_attention(void)
{
    struct {
        int B, Bk, Sq, Sk, D, Dv;
        bool causal;
        double scale;
    } cases[] = {
        {2, 2, 4, 4, 8, 8, false, 0},   {2, 2, 4, 4, 8, 8, true, 0},  {2, 2, 3, 5, 4, 6, true, 0},
        {2, 2, 5, 3, 4, 2, true, 0.5},  {3, 1, 4, 6, 4, 4, false, 0}, {3, 1, 4, 6, 4, 4, true, -0.3},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int B = cases[t].B, Bk = cases[t].Bk, Sq = cases[t].Sq, Sk = cases[t].Sk, D = cases[t].D, Dv = cases[t].Dv;
        fc_graph *g = new_graph("attn");
        fc_value *q = fc_param(g, "q", FC_F64, 3, DIMS(B, Sq, D));
        fc_value *k = fc_param(g, "k", FC_F64, 3, DIMS(Bk, Sk, D));
        fc_value *v = fc_param(g, "v", FC_F64, 3, DIMS(Bk, Sk, Dv));
        fc_tensor in[3] = {mk_fn(FC_F64, 3, SHAPE(B, Sq, D), rnd), mk_fn(FC_F64, 3, SHAPE(Bk, Sk, D), rnd2),
                           mk_fn(FC_F64, 3, SHAPE(Bk, Sk, Dv), ident)};
        double *qd = malloc(sizeof(double) * (size_t)(B * Sq * D));
        double *kd = malloc(sizeof(double) * (size_t)(Bk * Sk * D));
        double *vd = malloc(sizeof(double) * (size_t)(Bk * Sk * Dv));
        double *want = malloc(sizeof(double) * (size_t)(B * Sq * Dv));
        for (int i = 0; i < B * Sq * D; i++)
            qd[i] = rnd(i);
        for (int i = 0; i < Bk * Sk * D; i++)
            kd[i] = rnd2(i);
        for (int i = 0; i < Bk * Sk * Dv; i++)
            vd[i] = (double)i;
        double scale = cases[t].scale != 0 ? cases[t].scale : 1 / sqrt((double)D);
        attention_by_hand(qd, kd, vd, B, Bk, Sq, Sk, D, Dv, cases[t].causal, scale, want);

        fc_tensor r = run1(g, fc_attention(g, q, k, v, cases[t].causal, cases[t].scale), 3, in);
        check_shape(&r, FC_F64, 3, SHAPE(B, Sq, Dv));
        for (int i = 0; i < B * Sq * Dv && r.data; i++)
            CHECK_REL(at(&r, i), want[i], 1e-12);
        if (cases[t].causal && r.data)
            /* Query 0 sees key 0 only: its output is v's row 0. */
            for (int e = 0; e < Dv; e++)
                CHECK_NEAR(at(&r, e), vd[e], 1e-12);
        fc_tensor_release(&r);
        free(qd), free(kd), free(vd), free(want);
        fc_graph_free(g);
    }

    /* attention == matmul, softmax, matmul built from the graph's own ops
     * (non-causal, scale 0.5); the explicit path rounds to f32 between
     * nodes, hence the tolerance. */
    fc_graph *g = new_graph("attn_explicit");
    fc_value *q = fc_param(g, "q", FC_F32, 3, DIMS(2, 4, 8));
    fc_value *k = fc_param(g, "k", FC_F32, 3, DIMS(2, 6, 8));
    fc_value *v = fc_param(g, "v", FC_F32, 3, DIMS(2, 6, 8));
    fc_value *s = fc_mul(g, fc_matmul(g, q, fc_permute(g, k, 3, (const int[]){0, -1, 1})), fc_scalar(g, 0.5));
    fc_value *o[2] = {fc_attention(g, q, k, v, false, 0.5), fc_matmul(g, fc_softmax(g, s, -1), v)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in[3] = {mk_fn(FC_F32, 3, SHAPE(2, 4, 8), rnd), mk_fn(FC_F32, 3, SHAPE(2, 6, 8), rnd2),
                       mk_fn(FC_F32, 3, SHAPE(2, 6, 8), rnd)};
    fc_tensor r[2];
    CHECK_EQ_INT(fc_run_reference(g, in, 3, r, 2), FC_OK);
    for (int i = 0; i < 2 * 4 * 8; i++)
        CHECK_REL(at(&r[0], i), at(&r[1], i), 1e-6);
    release_all(r, 2);
    release_all(in, 3);
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* Shape and creation ops, gather.                                     */
/* ------------------------------------------------------------------ */

static void test_shape_ops(void)
{
    /* x[i][j][k] = 12i + 4j + k over [2, 3, 4]. */
    fc_graph *g = new_graph("shape");
    fc_value *x = fc_param(g, "x", FC_F32, 3, DIMS(2, 3, 4));
    fc_value *o[5] = {
        fc_reshape(g, x, 2, DIMS(-1, 6)),
        fc_permute(g, x, 3, (const int[]){-1, 0, 1}),
        fc_expand(g, fc_slice(g, x, 1, 1, 2, 1), 4, DIMS(5, -1, 3, -1)),
        fc_slice(g, x, -1, -3, INT64_MAX, 2),
        fc_slice(g, x, 1, -100, -1, 1),
    };
    CHECK_EQ_INT(fc_graph_return(g, 5, o), FC_OK);
    fc_tensor in = mk_fn(FC_F32, 3, SHAPE(2, 3, 4), ident), r[5];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 5), FC_OK);
    check_shape(&r[0], FC_F32, 2, SHAPE(4, 6));
    for (int i = 0; i < 24; i++)
        CHECK_NEAR(at(&r[0], i), i, 0);
    check_shape(&r[1], FC_F32, 3, SHAPE(4, 2, 3)); /* out[k][i][j] = x[i][j][k] */
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                CHECK_NEAR(at(&r[1], (k * 2 + i) * 3 + j), 12 * i + 4 * j + k, 0);
    check_shape(&r[2], FC_F32, 4, SHAPE(5, 2, 3, 4)); /* x[:, 1:2, :] broadcast */
    for (int p = 0; p < 5; p++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++)
                    CHECK_NEAR(at(&r[2], ((p * 2 + i) * 3 + j) * 4 + k), 12 * i + 4 + k, 0);
    check_shape(&r[3], FC_F32, 3, SHAPE(2, 3, 2)); /* x[..., -3::2] = k in {1, 3} */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            CHECK_NEAR(at(&r[3], (i * 3 + j) * 2), 12 * i + 4 * j + 1, 0);
            CHECK_NEAR(at(&r[3], (i * 3 + j) * 2 + 1), 12 * i + 4 * j + 3, 0);
        }
    check_shape(&r[4], FC_F32, 3, SHAPE(2, 2, 4)); /* x[:, -100:-1] = j in {0, 1} */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 4; k++)
                CHECK_NEAR(at(&r[4], (i * 2 + j) * 4 + k), 12 * i + 4 * j + k, 0);
    release_all(r, 5);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* Slice with step 2 from a negative start: [0..9][-7::2] = 3, 5, 7, 9;
     * and past the end: [0..9][20:] is empty. */
    g = new_graph("slice");
    x = fc_param(g, "x", FC_I32, 1, DIMS(10));
    fc_value *o2[3] = {fc_slice(g, x, 0, -7, INT64_MAX, 2), fc_slice(g, x, 0, 20, INT64_MAX, 1),
                       fc_slice(g, x, 0, 1, -2, 3)};
    CHECK_EQ_INT(fc_graph_return(g, 3, o2), FC_OK);
    in = mk_fn(FC_I32, 1, SHAPE(10), ident);
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 3), FC_OK);
    check_shape(&r[0], FC_I32, 1, SHAPE(4));
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(at(&r[0], i), 3 + 2 * i);
    check_shape(&r[1], FC_I32, 1, SHAPE(0));
    check_shape(&r[2], FC_I32, 1, SHAPE(3)); /* 1, 4, 7 */
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(at(&r[2], i), 1 + 3 * i);
    release_all(r, 3);
    fc_tensor_release(&in);
    fc_graph_free(g);
}

static void test_concat_split(void)
{
    /* split then concat gives x back, on a middle axis (negative). */
    fc_graph *g = new_graph("split");
    fc_value *x = fc_param(g, "x", FC_F32, 3, DIMS(2, 7, 3));
    fc_value *parts[3];
    CHECK_EQ_INT(fc_split(g, x, -2, 3, DIMS(2, -1, 1), parts), FC_OK);
    fc_value *o[4] = {fc_concat(g, 3, parts, 1), parts[0], parts[1], parts[2]};
    CHECK_EQ_INT(fc_graph_return(g, 4, o), FC_OK);
    fc_tensor in = mk_fn(FC_F32, 3, SHAPE(2, 7, 3), rnd), r[4];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 4), FC_OK);
    check_shape(&r[0], FC_F32, 3, SHAPE(2, 7, 3));
    for (int i = 0; i < 42; i++)
        CHECK_NEAR(at(&r[0], i), at(&in, i), 0);
    static const int sizes[3] = {2, 4, 1}, offs[3] = {0, 2, 6};
    for (int p = 0; p < 3; p++) {
        check_shape(&r[p + 1], FC_F32, 3, SHAPE(2, sizes[p], 3));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < sizes[p]; j++)
                for (int k = 0; k < 3; k++)
                    CHECK_NEAR(at(&r[p + 1], (i * sizes[p] + j) * 3 + k), at(&in, (i * 7 + offs[p] + j) * 3 + k), 0);
    }
    release_all(r, 4);
    fc_tensor_release(&in);
    fc_graph_free(g);

    /* concat of three operands on the last axis, against a loop. */
    g = new_graph("concat");
    fc_value *a = fc_param(g, "a", FC_F64, 2, DIMS(2, 1));
    fc_value *b = fc_param(g, "b", FC_F64, 2, DIMS(2, 3));
    fc_value *c = fc_param(g, "c", FC_F64, 2, DIMS(2, 2));
    fc_value *abc[3] = {a, b, c};
    fc_tensor ins[3] = {mk(FC_F64, 2, SHAPE(2, 1), VALS(1, 2)), mk(FC_F64, 2, SHAPE(2, 3), VALS(3, 4, 5, 6, 7, 8)),
                        mk(FC_F64, 2, SHAPE(2, 2), VALS(9, 10, 11, 12))};
    fc_tensor rc = run1(g, fc_concat(g, 3, abc, -1), 3, ins);
    check_shape(&rc, FC_F64, 2, SHAPE(2, 6));
    static const double want[] = {1, 3, 4, 5, 9, 10, 2, 6, 7, 8, 11, 12};
    for (int i = 0; i < 12 && rc.data; i++)
        CHECK_NEAR(at(&rc, i), want[i], 0);
    fc_tensor_release(&rc);
    fc_graph_free(g);
}

static void test_create(void)
{
    fc_graph *g = new_graph("create");
    fc_value *o[5] = {
        fc_iota(g, 2, DIMS(2, 3), -1, FC_I32),
        fc_iota(g, 2, DIMS(2, 3), 0, FC_F32),
        fc_iota(g, 1, DIMS(300), 0, FC_BF16),
        fc_full(g, 2, DIMS(2, 2), 0.1, FC_F16),
        fc_full(g, 0, NULL, -2.5, FC_I64),
    };
    CHECK_EQ_INT(fc_graph_return(g, 5, o), FC_OK);
    fc_tensor r[5];
    CHECK_EQ_INT(fc_run_reference(g, NULL, 0, r, 5), FC_OK);
    check_shape(&r[0], FC_I32, 2, SHAPE(2, 3));
    check_shape(&r[1], FC_F32, 2, SHAPE(2, 3));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            CHECK_EQ_INT(at(&r[0], i * 3 + j), j);
            CHECK_EQ_INT(at(&r[1], i * 3 + j), i);
        }
    /* bf16 has 8 significant bits: 257 is a tie between 256 and 258 and
     * goes to 256 (even); 259 goes to 260. */
    CHECK_NEAR(at(&r[2], 255), 255, 0);
    CHECK_NEAR(at(&r[2], 256), 256, 0);
    CHECK_NEAR(at(&r[2], 257), 256, 0);
    CHECK_NEAR(at(&r[2], 259), 260, 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(bits16(&r[3], i), 0x2e66); /* 0.1 in f16 */
    check_shape(&r[4], FC_I64, 0, NULL);
    CHECK_EQ_INT(at(&r[4], 0), -2);
    release_all(r, 5);
    fc_graph_free(g);
}

static void test_gather(void)
{
    /* Embedding lookup: table [5, 3], idx [2, 2] with negative indices. */
    fc_graph *g = new_graph("gather");
    fc_value *t = fc_param(g, "t", FC_F32, 2, DIMS(5, 3));
    fc_value *ix = fc_param(g, "i", FC_I64, 2, DIMS(2, 2));
    fc_value *ix1 = fc_param(g, "j", FC_I32, 1, DIMS(4));
    fc_value *o[2] = {fc_gather(g, t, ix, 0), fc_gather(g, t, ix1, -1)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in[3] = {mk_fn(FC_F32, 2, SHAPE(5, 3), ident), mk(FC_I64, 2, SHAPE(2, 2), VALS(4, -1, 0, -5)),
                       mk(FC_I32, 1, SHAPE(4), VALS(2, -3, 1, -1))};
    fc_tensor r[2];
    CHECK_EQ_INT(fc_run_reference(g, in, 3, r, 2), FC_OK);
    check_shape(&r[0], FC_F32, 3, SHAPE(2, 2, 3));
    static const int rows[4] = {4, 4, 0, 0};
    for (int j = 0; j < 4; j++)
        for (int c = 0; c < 3; c++)
            CHECK_NEAR(at(&r[0], j * 3 + c), rows[j] * 3 + c, 0);
    check_shape(&r[1], FC_F32, 2, SHAPE(5, 4)); /* out[row][j] = t[row][idx[j]] */
    static const int cols[4] = {2, 0, 1, 2};
    for (int row = 0; row < 5; row++)
        for (int j = 0; j < 4; j++)
            CHECK_NEAR(at(&r[1], row * 4 + j), row * 3 + cols[j], 0);
    release_all(r, 2);

    /* An index out of range is a runtime error, not a crash. */
    fc_tensor_release(&in[1]);
    in[1] = mk(FC_I64, 2, SHAPE(2, 2), VALS(0, 1, 5, 2));
    CHECK_EQ_INT(fc_run_reference(g, in, 3, r, 2), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "out of range") != NULL);
    CHECK(r[0].data == NULL && r[1].data == NULL);
    fc_tensor_release(&in[1]);
    in[1] = mk(FC_I64, 2, SHAPE(2, 2), VALS(0, 1, -6, 2));
    CHECK_EQ_INT(fc_run_reference(g, in, 3, r, 2), FC_ERR_RUNTIME);
    release_all(in, 3);
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* Symbols, errors, entry points.                                      */
/* ------------------------------------------------------------------ */

static void test_symbols(void)
{
    /* y = reduce_sum(x + b, -1) with x: f32[B, 4], b: f32[B, 1]; z reshapes
     * x [B, 4] -> [B, 2, -1]. One graph runs at two sizes of B. */
    fc_graph *g = new_graph("sym");
    fc_dim B = fc_sym(g, "B");
    fc_value *x = fc_param(g, "x", FC_F32, 2, DIMS(B, 4));
    fc_value *b = fc_param(g, "b", FC_F32, 2, DIMS(B, 1));
    fc_value *o[2] = {fc_reduce_sum(g, fc_add(g, x, b), 1, (const int[]){-1}, false),
                      fc_reshape(g, x, 3, DIMS(B, 2, -1))};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    for (int64_t n = 2; n <= 5; n += 3) {
        fc_tensor in[2] = {mk_fn(FC_F32, 2, SHAPE(n, 4), ident), mk_fn(FC_F32, 2, SHAPE(n, 1), ident)}, r[2];
        CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 2), FC_OK);
        check_shape(&r[0], FC_F32, 1, SHAPE(n));
        check_shape(&r[1], FC_F32, 3, SHAPE(n, 2, 2));
        for (int64_t i = 0; i < n && r[0].data; i++)
            CHECK_NEAR(at(&r[0], i), (4 * i + 0) + (4 * i + 1) + (4 * i + 2) + (4 * i + 3) + 4 * i, 0);
        release_all(r, 2);
        release_all(in, 2);
    }

    /* B seen twice with two sizes: an error naming the input and symbol. */
    fc_tensor in[2] = {mk(FC_F32, 2, SHAPE(2, 4), NULL), mk(FC_F32, 2, SHAPE(3, 1), NULL)}, r[2];
    CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 2), FC_ERR_INPUT);
    const char *err = fc_last_error(ctx);
    CHECK(strstr(err, "%b") != NULL && strstr(err, "B") != NULL);
    CHECK(r[0].data == NULL && r[1].data == NULL);
    release_all(in, 2);

    /* A static dim, a rank and a dtype that do not match. */
    in[0] = mk(FC_F32, 2, SHAPE(2, 5), NULL);
    in[1] = mk(FC_F32, 2, SHAPE(2, 1), NULL);
    CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "%x") != NULL);
    release_all(in, 2);
    in[0] = mk(FC_F32, 1, SHAPE(2), NULL);
    in[1] = mk(FC_F32, 2, SHAPE(2, 1), NULL);
    CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "rank") != NULL);
    release_all(in, 2);
    in[0] = mk(FC_F16, 2, SHAPE(2, 4), NULL);
    in[1] = mk(FC_F32, 2, SHAPE(2, 1), NULL);
    CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "f16") != NULL);
    release_all(in, 2);

    /* Wrong counts are usage errors. */
    in[0] = mk(FC_F32, 2, SHAPE(2, 4), NULL);
    CHECK_EQ_INT(fc_run_reference(g, in, 1, r, 2), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_run_reference(g, in, 2, r, 1), FC_ERR_USAGE);
    release_all(in, 1);
    fc_graph_free(g);

    /* A symbol used only by a creation op cannot be bound from the inputs. */
    g = new_graph("unbound");
    fc_dim N = fc_sym(g, "N");
    fc_value *f = fc_full(g, 1, DIMS(N), 1, FC_F32);
    CHECK_EQ_INT(fc_graph_return(g, 1, &f), FC_OK);
    CHECK_EQ_INT(fc_run_reference(g, NULL, 0, r, 1), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "N") != NULL);
    fc_graph_free(g);
}

static void test_refusals(void)
{
    fc_tensor in[2] = {mk(FC_F32, 1, SHAPE(3), NULL), mk(FC_F32, 1, SHAPE(4), NULL)}, r = {0};

    /* A poisoned graph keeps the builder's message. */
    fc_graph *g = new_graph("poisoned");
    fc_value *a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    fc_value *b = fc_param(g, "b", FC_F32, 1, DIMS(4));
    fc_value *c = fc_add(g, a, b);
    CHECK(fc_value_is_poison(c));
    fc_graph_return(g, 1, &c);
    CHECK_EQ_INT(fc_run_reference(g, in, 2, &r, 1), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "add") != NULL);
    fc_graph_free(g);

    /* A graph without a return. */
    g = new_graph("noreturn");
    a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    (void)fc_neg(g, a);
    CHECK_EQ_INT(fc_run_reference(g, in, 1, &r, 1), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "return") != NULL);
    fc_graph_free(g);
    CHECK_EQ_INT(fc_run_reference(NULL, in, 1, &r, 1), FC_ERR_USAGE);

    /* A result type a pass broke (simulated): the run-time shape is checked
     * against it, and the mismatch is an error, not an overrun. */
    g = new_graph("broken");
    a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    c = fc_neg(g, a);
    c->dims[0] = 5;
    CHECK_EQ_INT(fc_graph_return(g, 1, &c), FC_OK);
    CHECK_EQ_INT(fc_run_reference(g, in, 1, &r, 1), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "neg") != NULL);
    CHECK(r.data == NULL);
    fc_graph_free(g);

    /* Dead nodes (removed by a pass) are skipped; using the result of one
     * is an error. */
    g = new_graph("dead");
    a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    c = fc_neg(g, a);
    fc_value *e = fc_exp(g, c);
    CHECK_EQ_INT(fc_graph_return(g, 1, &e), FC_OK);
    c->def->dead = true;
    CHECK_EQ_INT(fc_run_reference(g, in, 1, &r, 1), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "before it is computed") != NULL);
    c->def->dead = false;
    e->def->dead = true;
    CHECK_EQ_INT(fc_run_reference(g, in, 1, &r, 1), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "never computed") != NULL);
    fc_graph_free(g);

    g = new_graph("dead_unused");
    a = fc_param(g, "a", FC_F32, 1, DIMS(3));
    c = fc_neg(g, a);
    e = fc_exp(g, a);
    CHECK_EQ_INT(fc_graph_return(g, 1, &e), FC_OK);
    c->def->dead = true;
    CHECK_EQ_INT(fc_run_reference(g, in, 1, &r, 1), FC_OK);
    CHECK_NEAR(at(&r, 0), 1, 0);
    fc_tensor_release(&r);
    fc_graph_free(g);
    release_all(in, 2);
}

static void test_outputs_and_api(void)
{
    /* A parameter returned directly, and one value returned twice. */
    fc_graph *g = new_graph("outs");
    fc_value *x = fc_param(g, "x", FC_BF16, 1, DIMS(2));
    fc_value *y = fc_relu(g, x);
    fc_value *o[3] = {x, y, y};
    CHECK_EQ_INT(fc_graph_return(g, 3, o), FC_OK);
    fc_tensor in = mk(FC_BF16, 1, SHAPE(2), VALS(-1.5, 2.25)), r[3];
    CHECK_EQ_INT(fc_run_reference(g, &in, 1, r, 3), FC_OK);
    CHECK(r[1].data != r[2].data);
    CHECK_EQ_INT(bits16(&r[0], 0), bits16(&in, 0));
    CHECK_NEAR(at(&r[1], 0), 0, 0);
    CHECK_NEAR(at(&r[2], 1), 2.25, 0);
    release_all(r, 3);
    fc_tensor_release(&in);

    /* The float64 entry point rounds inputs to the parameter's dtype. */
    fc_interp_tensor din = {.dtype = FC_BF16, .rank = 1, .shape = {2}, .data = (double[]){-1.5, 1 + 0x1p-9}};
    fc_interp_tensor dout[3];
    fc_status st = fc_interp_run(g, &din, 1, dout, 3);
    CHECK_EQ_INT(st, FC_OK);
    if (st == FC_OK) {
        CHECK_EQ_INT(dout[0].dtype, FC_BF16);
        CHECK_NEAR(dout[0].data[1], 1.0, 0);
        CHECK_NEAR(dout[1].data[0], 0, 0);
    }
    for (int i = 0; i < 3; i++)
        fc_interp_tensor_release(&dout[i]);
    fc_graph_free(g);

    /* Numel of host tensors. */
    fc_tensor t = {.dtype = FC_F32, .rank = 0};
    CHECK_EQ_INT(fc_tensor_numel(&t), 1);
    t.rank = 2;
    t.shape[0] = 3, t.shape[1] = 0;
    CHECK_EQ_INT(fc_tensor_numel(&t), 0);
    t.shape[0] = INT64_MAX, t.shape[1] = 2;
    CHECK_EQ_INT(fc_tensor_numel(&t), -1);
}

/* Every allocation failing in turn gives FC_ERR_NOMEM, cleared outputs and
 * (under ASan/LSan) no leak, until the run has all it needs. */
static void test_alloc_failures(void)
{
    fc_graph *g = new_graph("oom");
    fc_value *x = fc_param(g, "x", FC_F32, 2, DIMS(2, 3));
    fc_value *w = fc_param(g, "w", FC_F32, 2, DIMS(3, 2));
    fc_value *q = fc_param(g, "q", FC_F32, 3, DIMS(1, 2, 2));
    fc_value *parts[2];
    CHECK_EQ_INT(fc_split(g, fc_matmul(g, x, w), 0, 2, DIMS(1, 1), parts), FC_OK);
    fc_value *o[2] = {fc_attention(g, q, q, q, true, 0), fc_concat(g, 2, parts, 0)};
    CHECK_EQ_INT(fc_graph_return(g, 2, o), FC_OK);
    fc_tensor in[3] = {mk_fn(FC_F32, 2, SHAPE(2, 3), rnd), mk_fn(FC_F32, 2, SHAPE(3, 2), rnd),
                       mk_fn(FC_F32, 3, SHAPE(1, 2, 2), rnd)};
    int failures = 0;
    for (long k = 1; k < 1000; k++) {
        fc_tensor r[2];
        fc_context_fail_alloc_after(ctx, k);
        fc_status st = fc_run_reference(g, in, 3, r, 2);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) {
            release_all(r, 2);
            break;
        }
        failures++;
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
        CHECK(r[0].data == NULL && r[1].data == NULL);
    }
    CHECK(failures > 10);
    release_all(in, 3);
    fc_graph_free(g);
}

/* A graph from .ir text (the IR.md example, smaller): the parser and the
 * interpreter together, B bound from the input. */
static void test_parsed_mlp(void)
{
    static const char src[] = "graph mlp(%x: f32[B, 4], %w1: f32[4, 8], %b1: f32[8], %w2: f32[8, 4], %b2: f32[4]) {\n"
                              "  %h  = matmul(%x, %w1)\n"
                              "  %h1 = add(%h, %b1)\n"
                              "  %g  = gelu_tanh(%h1)\n"
                              "  %o  = matmul(%g, %w2)\n"
                              "  %y  = add(%o, %b2) : f32[B, 4]\n"
                              "  return %y\n"
                              "}\n";
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "mlp.ir", src, sizeof src - 1, NULL, NULL, 0, &g);
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK) {
        fprintf(stderr, "  %s\n", fc_last_error(ctx));
        return;
    }
    fc_tensor in[5] = {mk_fn(FC_F32, 2, SHAPE(3, 4), rnd), mk_fn(FC_F32, 2, SHAPE(4, 8), rnd2),
                       mk_fn(FC_F32, 1, SHAPE(8), rnd), mk_fn(FC_F32, 2, SHAPE(8, 4), rnd2),
                       mk_fn(FC_F32, 1, SHAPE(4), rnd2)};
    fc_tensor r;
    CHECK_EQ_INT(fc_run_reference(g, in, 5, &r, 1), FC_OK);
    check_shape(&r, FC_F32, 2, SHAPE(3, 4));
    /* The same, node by node, rounding to f32 after each node. */
    const double c = sqrt(2 / 3.14159265358979323846);
    for (int i = 0; i < 3 && r.data; i++)
        for (int j = 0; j < 4; j++) {
            double y = 0;
            for (int k = 0; k < 8; k++) {
                double h = 0;
                for (int l = 0; l < 4; l++)
                    h += at(&in[0], i * 4 + l) * at(&in[1], l * 8 + k);
                h = (float)((float)h + at(&in[2], k));
                double gk = (float)(0.5 * h * (1 + tanh(c * (h + 0.044715 * h * h * h))));
                y += gk * at(&in[3], k * 4 + j);
            }
            CHECK_REL(at(&r, i * 4 + j), (float)((float)y + at(&in[4], j)), 1e-6);
        }
    fc_tensor_release(&r);
    release_all(in, 5);
    fc_graph_free(g);
}

int main(void)
{
    ctx = fc_context_new();
    test_unary();
    test_hardswish_edges();
    test_binary_broadcast();
    test_compare_where();
    test_promotion_and_weak();
    test_rounding();
    test_reduce();
    test_softmax();
    test_layernorm_rmsnorm();
    test_matmul();
    test_attention();
    test_shape_ops();
    test_concat_split();
    test_create();
    test_gather();
    test_symbols();
    test_refusals();
    test_outputs_and_api();
    test_alloc_failures();
    test_parsed_mlp();
    fc_context_free(ctx);
    return check_report("test_interp");
}

/* test_gpu_math.c - the error of the f32 functions fusec's CUDA code
 * generator emits (codegen/cuda/prelude.cuh.inc), measured on the GPU
 * against float64 over dense sweeps: each unary op as one kernel of a
 * graph `%y = op(%x)`, in both numerics, at f32 (2^22 points of the op's
 * range) and with bf16 and f16 storage (every value of the dtype in the
 * range), against the reference interpreter's exact result
 * (fc_run_reference_exact). It prints the table of docs/NUMERICS.md ("The
 * f32 functions", max error in ulps of the output's dtype) and checks
 * each measurement against the bound the table states (`bound` below).
 *
 * Without a GPU every graph is still compiled (NVRTC, sm_90) on a small
 * sweep and the runs are skipped. FUSEC_GPU_MATH_POINTS=N changes the f32
 * sweep's size. */
#include "check.h"
#include "fusec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each op, its range (a positive lo sweeps on a log scale) and the most
 * f32 ulps fast and eager numerics may be off in it (docs/NUMERICS.md). */
typedef struct op_range {
    const char *op;
    double lo, hi;
    double f32_fast, f32_eager;
} op_range;

static const op_range ops[] = {
    {"exp", -87, 88, 160, 2},        /* fast: exp2f(x log2 e), the rounding of x log2 e grows with |x| */
    {"log", 1e-30, 1e30, 1, 1},
    {"tanh", -10, 10, 2, 2},
    {"erf", -5, 5, 2, 2},
    {"sigmoid", -30, 30, 34, 4},
    {"silu", -30, 30, 34, 4},
    {"gelu", -3, 8, 3000, 3000},    /* the cancellation of 1 + erf for negative x */
    {"gelu_tanh", -3, 8, 3000, 3000},
    {"rsqrt", 1e-30, 1e30, 1.5, 1.5},
    {"sqrt", 1e-30, 1e30, 0.5, 0.5},
    {"recip", 1e-30, 1e30, 0.5, 0.5},
    {"sin", -100, 100, 2, 2},
    {"cos", -100, 100, 2, 2},
};
enum { NOPS = sizeof ops / sizeof ops[0] };

/* With 16-bit storage every function's result is rounded once from f32:
 * half an ulp, plus the f32 error in units of 2^-16 (bf16) or 2^-13 (f16)
 * of it, and a tie that the f32 error tips. */
static const double bound_16bit = 1.0;

/* The spacing of dt's values around |x| (the subnormal spacing below the
 * smallest normal). */
static double ulp_of(fc_dtype dt, double x) {
    int mant = dt == FC_F32 ? 23 : dt == FC_BF16 ? 7 : 10;
    int emin = dt == FC_F16 ? -14 : -126;
    x = fabs(x);
    int e = x > 0 ? ilogb(x) : emin;
    return ldexp(1.0, (e < emin ? emin : e) - mant);
}

/* The largest finite value of dt. */
static double max_of(fc_dtype dt) { return dt == FC_F16 ? 65504.0 : dt == FC_BF16 ? 0x1.FEp127 : 0x1.FFFFFEp127; }

static void store(fc_dtype dt, void *data, int64_t i, double v) {
    if (dt == FC_F32) ((float *)data)[i] = (float)v;
    else if (dt == FC_BF16) ((uint16_t *)data)[i] = fc_f32_to_bf16((float)v);
    else ((uint16_t *)data)[i] = fc_f32_to_f16((float)v);
}

static double load(fc_dtype dt, const void *data, int64_t i) {
    if (dt == FC_F32) return ((const float *)data)[i];
    if (dt == FC_BF16) return fc_bf16_to_f32(((const uint16_t *)data)[i]);
    if (dt == FC_F64) return ((const double *)data)[i];
    return fc_f16_to_f32(((const uint16_t *)data)[i]);
}

/* The sweep of op o at dt into t (n points at f32; every value of a
 * 16-bit dtype in the range). */
static void sweep(const op_range *o, fc_dtype dt, int64_t n, fc_tensor *t) {
    t->dtype = dt;
    t->rank = 1;
    bool logscale = o->lo > 0;
    if (dt == FC_F32) {
        t->shape[0] = n;
        t->data = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            double s = (double)j / (double)(n - 1);
            store(dt, t->data, j, logscale ? exp(log(o->lo) + s * (log(o->hi) - log(o->lo)))
                                           : o->lo + s * (o->hi - o->lo));
        }
        return;
    }
    uint16_t *v = malloc(sizeof *v * 65536);
    int64_t k = 0;
    for (uint32_t bits = 0; bits < 65536; bits++) {
        double x = dt == FC_BF16 ? fc_bf16_to_f32((uint16_t)bits) : fc_f16_to_f32((uint16_t)bits);
        if (isfinite(x) && x >= o->lo && x <= o->hi && !(x == 0 && signbit(x))) v[k++] = (uint16_t)bits;
    }
    t->shape[0] = k;
    t->data = v;
}

typedef struct measured {
    double max_ulp, at;
    int64_t points, overflow_bad;
} measured;

/* got against exact for one op: max ulps of dt where the exact result is
 * finite in dt; an exact result past dt's range must come out infinite. */
static measured error_of(fc_dtype dt, const fc_tensor *x, const fc_tensor *got, const fc_tensor *exact) {
    measured m = {0, 0, fc_tensor_numel(got), 0};
    for (int64_t i = 0; i < m.points; i++) {
        double g = load(dt, got->data, i), w = load(FC_F64, exact->data, i);
        if (!isfinite(w)) continue;
        if (fabs(w) > max_of(dt) * (1 + ulp_of(dt, 1) / 4)) {
            if (!(isinf(g) && (g > 0) == (w > 0))) m.overflow_bad++;
            continue;
        }
        double u = fabs(g - w) / ulp_of(dt, w);
        if (!(u <= m.max_ulp)) {
            m.max_ulp = isnan(u) ? INFINITY : u;
            m.at = load(dt, x->data, i);
        }
    }
    return m;
}

/* A graph of every op at dt, op k on parameter k of n_k elements. */
static fc_graph *graph_of(fc_context *ctx, fc_dtype dt, const fc_tensor *in) {
    char *ir = malloc(16384);
    size_t len = (size_t)snprintf(ir, 16384, "graph gpu_math(");
    for (int k = 0; k < NOPS; k++)
        len += (size_t)snprintf(ir + len, 16384 - len, "%s%%x%d: %s[%lld]", k ? ", " : "", k, fc_dtype_name(dt),
                                (long long)in[k].shape[0]);
    len += (size_t)snprintf(ir + len, 16384 - len, ") {\n");
    for (int k = 0; k < NOPS; k++) len += (size_t)snprintf(ir + len, 16384 - len, "  %%y%d = %s(%%x%d)\n", k, ops[k].op, k);
    len += (size_t)snprintf(ir + len, 16384 - len, "  return");
    for (int k = 0; k < NOPS; k++) len += (size_t)snprintf(ir + len, 16384 - len, "%s %%y%d", k ? "," : "", k);
    snprintf(ir + len, 16384 - len, "\n}\n");
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "gpu_math.ir", ir, strlen(ir), NULL, NULL, 0, &g);
    if (st) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    free(ir);
    return g;
}

static void measure(fc_context *ctx, fc_dtype dt, int64_t n, bool gpu) {
    fc_tensor in[NOPS] = {0}, exact[NOPS] = {0};
    for (int k = 0; k < NOPS; k++) sweep(&ops[k], dt, n, &in[k]);
    fc_graph *g = graph_of(ctx, dt, in);
    fc_status st = g && gpu ? fc_run_reference_exact(g, in, NOPS, exact, NOPS) : FC_OK;
    CHECK_EQ_INT(st, FC_OK);
    for (int mode = 0; g && !st && mode < 2; mode++) {
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = FC_DEVICE_CUDA;
        o.sm = 90;
        o.numerics = mode ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST;
        fc_program *p = NULL;
        fc_tensor got[NOPS] = {0};
        fc_status cst = fc_compile(g, &o, &p);
        if (cst) fprintf(stderr, "compile %s: %s\n", fc_dtype_name(dt), fc_last_error(ctx));
        CHECK_EQ_INT(cst, FC_OK);
        if (!cst && gpu) {
            cst = fc_program_run_host(p, in, NOPS, got, NOPS, NULL, 0);
            if (cst) fprintf(stderr, "run %s: %s\n", fc_dtype_name(dt), fc_last_error(ctx));
            CHECK_EQ_INT(cst, FC_OK);
        }
        for (int k = 0; !cst && gpu && k < NOPS; k++) {
            measured m = error_of(dt, &in[k], &got[k], &exact[k]);
            double bound = dt != FC_F32 ? bound_16bit : mode ? ops[k].f32_eager : ops[k].f32_fast;
            printf("| %-9s | %-4s | %-5s | [%g, %g] | %lld | %.3g | %.9g | %s\n", ops[k].op, fc_dtype_name(dt),
                   mode ? "eager" : "fast", ops[k].lo, ops[k].hi, (long long)m.points, m.max_ulp, m.at,
                   m.max_ulp <= bound && !m.overflow_bad ? "ok" : "PAST THE BOUND");
            if (m.max_ulp > bound)
                fprintf(stderr, "%s %s %s: %.3g ulp at x = %.9g, the bound is %g\n", ops[k].op, fc_dtype_name(dt),
                        mode ? "eager" : "fast", m.max_ulp, m.at, bound);
            CHECK(m.max_ulp <= bound);
            CHECK_EQ_INT(m.overflow_bad, 0);
        }
        for (int k = 0; k < NOPS; k++) fc_tensor_release(&got[k]);
        fc_program_free(p);
    }
    for (int k = 0; k < NOPS; k++) {
        free(in[k].data);
        fc_tensor_release(&exact[k]);
    }
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    bool gpu = fc_device_available(FC_DEVICE_CUDA);
    const char *env = getenv("FUSEC_GPU_MATH_POINTS");
    int64_t n = gpu ? (env && atoll(env) > 1 ? atoll(env) : (int64_t)1 << 22) : 1024;
    if (!gpu) printf("test_gpu_math: skipped: no CUDA device; compiling only\n");
    else printf("| op | dtype | numerics | range | points | max error (ulps of the dtype) | at x | |\n|---|---|---|---|---|---|---|---|\n");
    const fc_dtype dts[] = {FC_F32, FC_BF16, FC_F16};
    for (int d = 0; d < 3; d++) measure(ctx, dts[d], n, gpu);
    fc_context_free(ctx);
    return check_report("test_gpu_math");
}

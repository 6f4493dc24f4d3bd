/* dtype.c - dtype names and sizes, PyTorch promotion, and exact rounding to
 * the narrow float formats (the reference interpreter's rounding). */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[FC_DTYPE_COUNT] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i8", "bool", "string"};
static const size_t dtype_sizes[FC_DTYPE_COUNT] = {8, 4, 2, 2, 8, 4, 1, 1, sizeof(const char *)};

const char *fc_dtype_name(fc_dtype dt) { return (unsigned)dt < FC_DTYPE_COUNT ? dtype_names[dt] : "?"; }
size_t fc_dtype_size(fc_dtype dt) { return (unsigned)dt < FC_DTYPE_COUNT ? dtype_sizes[dt] : 0; }

fc_dtype fc_dtype_from_name(const char *s, size_t len) {
    for (int i = 0; i < FC_DTYPE_COUNT; i++)
        if (strlen(dtype_names[i]) == len && memcmp(dtype_names[i], s, len) == 0) return (fc_dtype)i;
    return FC_DTYPE_COUNT;
}

bool fc_dtype_is_float(fc_dtype dt) { return dt == FC_F64 || dt == FC_F32 || dt == FC_F16 || dt == FC_BF16; }
bool fc_dtype_is_int(fc_dtype dt) { return dt == FC_I64 || dt == FC_I32 || dt == FC_I8; }

static int category(fc_dtype dt) { return dt == FC_BOOL ? 0 : fc_dtype_is_int(dt) ? 1 : 2; }

/* Rank inside a category: larger wins. */
static int width(fc_dtype dt) {
    switch (dt) {
    case FC_I8: return 1;
    case FC_I32: return 2;
    case FC_I64: return 3;
    case FC_F16: case FC_BF16: return 1;
    case FC_F32: return 2;
    case FC_F64: return 3;
    default: return 0;
    }
}

fc_dtype fc_promote(fc_dtype a, fc_dtype b) {
    if (a == b) return a;
    int ca = category(a), cb = category(b);
    if (ca != cb) return ca > cb ? a : b;
    /* Same category. f16 and bf16 share a width but differ: PyTorch gives f32. */
    if (width(a) == width(b)) return FC_F32;
    return width(a) > width(b) ? a : b;
}

/* Round |x| to a binary float format with `mant` fraction bits, minimum
 * normal exponent emin and maximum exponent emax, ties to even, directly
 * from double (no double rounding through f32). */
static double round_format(double x, int mant, int emin, int emax) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    double a = fabs(x);
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    e -= 1;       /* a = m * 2^e, m in [1, 2) */
    if (e < emin) e = emin; /* subnormals share the smallest quantum */
    double q = ldexp(1.0, e - mant);
    double r = nearbyint(a / q) * q; /* default rounding mode: nearest-even */
    if (r >= ldexp(1.0, emax + 1)) r = INFINITY;
    return x < 0 ? -r : r;
}

static double clamp_int(double x, double lo, double hi) {
    if (isnan(x)) return 0; /* documented: NaN casts to 0 */
    x = trunc(x);
    return x < lo ? lo : x > hi ? hi : x;
}

double fc_round_to_dtype(double x, fc_dtype dt) {
    switch (dt) {
    case FC_F64: return x;
    case FC_F32: return (double)(float)x;
    case FC_F16: return round_format(x, 10, -14, 15);
    case FC_BF16: return round_format(x, 7, -126, 127);
    /* 2^63 is not representable as int64: clamp just inside. */
    case FC_I64: return clamp_int(x, -9223372036854775808.0, 9223372036854774784.0);
    case FC_I32: return clamp_int(x, -2147483648.0, 2147483647.0);
    case FC_I8: return clamp_int(x, -128.0, 127.0);
    case FC_BOOL: return x != 0 ? 1.0 : 0.0; /* NaN != 0: true, as in PyTorch */
    case FC_STRING: case FC_DTYPE_COUNT: break; /* not a number */
    }
    return NAN; /* a public function: a bad dtype is the caller's, not a broken invariant */
}

fc_dtype fc_opmath_dtype(fc_dtype dt) { return dt == FC_F16 || dt == FC_BF16 ? FC_F32 : dt; }

fc_dtype fc_weak_scalar_dtype(fc_op op, fc_dtype cdt) {
    switch (op) {
    case FC_OP_ADD: case FC_OP_SUB: case FC_OP_MUL: case FC_OP_DIV: case FC_OP_MAX: case FC_OP_MIN:
        return fc_opmath_dtype(cdt);
    default: return cdt;
    }
}

uint16_t fc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, keep sign */
    u += 0x7fff + ((u >> 16) & 1);                      /* round to nearest-even */
    return (uint16_t)(u >> 16);
}

float fc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Encode a double that is already exactly an f16 value. */
static uint16_t encode_f16(double r) {
    uint16_t sign = signbit(r) ? 0x8000 : 0;
    if (isnan(r)) return 0x7e00 | sign;
    double a = fabs(r);
    if (isinf(a)) return sign | 0x7c00;
    if (a < ldexp(1.0, -14)) return sign | (uint16_t)(a / ldexp(1.0, -24)); /* subnormal */
    int e;
    frexp(a, &e);
    e -= 1;
    uint16_t m = (uint16_t)((a / ldexp(1.0, e) - 1.0) * 1024.0);
    return sign | (uint16_t)((e + 15) << 10) | m;
}

uint16_t fc_f32_to_f16(float f) { return encode_f16(round_format((double)f, 10, -14, 15)); }

float fc_f16_to_f32(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return (float)(sign ? -v : v);
}

void fc_format_double(double v, char *buf, size_t n) {
    if (isnan(v)) { snprintf(buf, n, "nan"); return; }
    if (isinf(v)) { snprintf(buf, n, v < 0 ? "-inf" : "inf"); return; }
    if (v == trunc(v) && fabs(v) < 1e16) { /* integral: "1000.0", not "1e+03" */
        snprintf(buf, n, "%.1f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* Keep it reading as a float: "2" would be an integer literal. */
    if (!strpbrk(buf, ".eEn")) {
        size_t l = strlen(buf);
        if (l + 3 <= n) memcpy(buf + l, ".0", 3);
    }
}

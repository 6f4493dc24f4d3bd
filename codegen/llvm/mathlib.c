/*
 * mathlib.c - scalar numerics in LLVM IR for the CPU backend.
 *
 * Two things live here.
 *
 * 1. f32 transcendental functions (exp, log, tanh, erf) written in IR,
 *    branch-free (selects, not branches) and without calls, so that a loop
 *    using them vectorizes: the loop vectorizer cannot widen a call to
 *    expf, and libm has no vector variants it knows of. They are classic
 *    argument reductions with polynomials:
 *      exp:  x = n ln2 + r (Cody-Waite, two-part ln2), Cephes' degree-6
 *            polynomial for e^r, then 2^n applied in two halves so that
 *            results in the subnormal range and near overflow stay right.
 *      log:  x = m 2^e with m in [sqrt(1/2), sqrt(2)), Cephes' degree-9
 *            polynomial for log(1 + f).
 *      tanh: Cephes' odd polynomial for |x| <= 0.625, 1 - 2/(e^2|x| + 1)
 *            above.
 *      erf:  x P(x^2) for |x| < 1 (a Chebyshev fit of degree 6 in x^2),
 *            1 - e^-x^2 h(1/x) above, h a degree-10 Chebyshev fit of
 *            erfc(x) e^(x^2) in u = (1/x - 0.625) / 0.375 (centred, so the
 *            coefficients are small and Horner's rule loses nothing). x is
 *            clamped to 4, where erf rounds to 1 in f32.
 *    Measured against double libm over every float in range: exp 1.01 ulp,
 *    log 0.83 ulp, tanh 1.33 ulp, erf 2.43 ulp (docs/CPU-BACKEND.md).
 *    f64 uses libm (the f64 tolerance is 1e-9; speed is not the point).
 *
 * 2. Rounding and conversion between dtypes, exactly as the reference
 *    interpreter rounds (ir/dtype.c): f16 and bf16 round to nearest-even
 *    with integer arithmetic on the f32 bits (vectorizable, and no need for
 *    F16C or a compiler-rt helper), integers saturate, float-to-int
 *    truncates with NaN going to 0.
 */
#include "codegen/llvm/llvm_internal.h"

#include <math.h>
#include <string.h>

#define B (M->b)

/* ---- constants, intrinsics, attributes ---------------------------------- */

LLVMValueRef lm_fconst(lmod *M, LLVMTypeRef t, double x) { return LLVMConstReal(t, x); }
LLVMValueRef lm_i32(lmod *M, int64_t x) { return LLVMConstInt(M->t_i32, (unsigned long long)x, 1); }
LLVMValueRef lm_i64(lmod *M, int64_t x) { return LLVMConstInt(M->t_i64, (unsigned long long)x, 1); }

static LLVMValueRef f32c(lmod *M, double x) { return LLVMConstReal(M->t_f32, x); }

LLVMValueRef lm_intrinsic(lmod *M, const char *name, LLVMTypeRef t, LLVMValueRef *args, int nargs) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    FC_ASSERT(id != 0);
    LLVMTypeRef tys[1] = {t};
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(M->m, id, tys, 1);
    LLVMTypeRef fnty = LLVMIntrinsicGetType(M->c, id, tys, 1);
    return LLVMBuildCall2(B, fnty, fn, args, (unsigned)nargs, "");
}

LLVMValueRef lm_fma(lmod *M, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
    LLVMValueRef args[3] = {a, b, c};
    return lm_intrinsic(M, "llvm.fmuladd", LLVMTypeOf(a), args, 3);
}

/* Add an enum attribute by name; a name this LLVM does not know is skipped
 * (attributes only enable optimizations). */
static void add_attr(lmod *M, LLVMValueRef fn, unsigned index, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind) LLVMAddAttributeAtIndex(fn, index, LLVMCreateEnumAttribute(M->c, kind, 0));
}

/* Mark a function as not touching memory: readnone up to LLVM 15,
 * memory(none) (the "memory" attribute with value 0) from LLVM 16 on. */
static void add_readnone(lmod *M, LLVMValueRef fn) {
    unsigned kind = LLVMGetEnumAttributeKindForName("readnone", 8);
    if (kind) LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(M->c, kind, 0));
    else add_attr(M, fn, LLVMAttributeFunctionIndex, "memory");
    add_attr(M, fn, LLVMAttributeFunctionIndex, "nounwind");
    add_attr(M, fn, LLVMAttributeFunctionIndex, "willreturn");
}

LLVMValueRef lm_libm(lmod *M, const char *name, LLVMTypeRef t, LLVMValueRef *args, int nargs) {
    LLVMTypeRef params[3] = {t, t, t};
    FC_ASSERT(nargs >= 1 && nargs <= 3);
    LLVMTypeRef fnty = LLVMFunctionType(t, params, (unsigned)nargs, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(M->m, name);
    if (!fn) {
        fn = LLVMAddFunction(M->m, name, fnty);
        add_readnone(M, fn);
    }
    return LLVMBuildCall2(B, fnty, fn, args, (unsigned)nargs, "");
}

static LLVMValueRef sel(lmod *M, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildSelect(B, c, a, b, "");
}
static LLVMValueRef fcmp(lmod *M, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildFCmp(B, p, a, b, "");
}
static LLVMValueRef isnan_(lmod *M, LLVMValueRef x) { return fcmp(M, LLVMRealUNO, x, x); }

LLVMValueRef lm_smin(lmod *M, LLVMValueRef a, LLVMValueRef b) {
    return sel(M, LLVMBuildICmp(B, LLVMIntSLT, a, b, ""), a, b);
}
LLVMValueRef lm_smax(lmod *M, LLVMValueRef a, LLVMValueRef b) {
    return sel(M, LLVMBuildICmp(B, LLVMIntSGT, a, b, ""), a, b);
}

/* c[0] + x (c[1] + x (c[2] + ...)), f32, with n coefficients. */
static LLVMValueRef horner(lmod *M, LLVMValueRef x, const double *c, int n) {
    LLVMValueRef p = f32c(M, c[n - 1]);
    for (int i = n - 2; i >= 0; i--) p = lm_fma(M, p, x, f32c(M, c[i]));
    return p;
}

static LLVMValueRef bitcast(lmod *M, LLVMValueRef x, LLVMTypeRef t) { return LLVMBuildBitCast(B, x, t, ""); }

/* 2^n for an i32 n in [-126, 127], as a float. */
static LLVMValueRef pow2i(lmod *M, LLVMValueRef n) {
    LLVMValueRef e = LLVMBuildShl(B, LLVMBuildAdd(B, n, lm_i32(M, 127), ""), lm_i32(M, 23), "");
    return bitcast(M, e, M->t_f32);
}

/* ---- the f32 functions, as internal functions ------------------------------ */

static LLVMValueRef body_expf(lmod *M, LLVMValueRef x) {
    /* Past these bounds e^x is 0 or inf in f32; clamping keeps n in range.
     * NaN is replaced by 0 for the arithmetic and restored at the end. */
    LLVMValueRef nan = isnan_(M, x);
    LLVMValueRef xc = sel(M, nan, f32c(M, 0), x);
    xc = sel(M, fcmp(M, LLVMRealOLT, xc, f32c(M, -104.0)), f32c(M, -104.0), xc);
    xc = sel(M, fcmp(M, LLVMRealOGT, xc, f32c(M, 89.0)), f32c(M, 89.0), xc);
    LLVMValueRef t = LLVMBuildFMul(B, xc, f32c(M, 1.44269504088896341), "");
    LLVMValueRef n = lm_intrinsic(M, "llvm.rint", M->t_f32, &t, 1);
    /* r = x - n ln2, with ln2 = 0.693359375 - 2.12194440e-4 (the first part
     * has few bits, so n * it is exact). */
    LLVMValueRef r = lm_fma(M, n, f32c(M, -0.693359375), xc);
    r = lm_fma(M, n, f32c(M, 2.12194440e-4), r);
    static const double P[] = {5.0000001201E-1, 1.6666665459E-1, 4.1665795894E-2,
                               8.3334519073E-3, 1.3981999507E-3, 1.9875691500E-4};
    LLVMValueRef p = horner(M, r, P, 6);
    LLVMValueRef z = LLVMBuildFMul(B, r, r, "");
    p = LLVMBuildFAdd(B, lm_fma(M, p, z, r), f32c(M, 1.0), "");
    /* 2^n in two factors: n is in [-150, 128], each half in [-75, 64]. */
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, M->t_i32, "");
    LLVMValueRef n1 = LLVMBuildAShr(B, ni, lm_i32(M, 1), "");
    LLVMValueRef n2 = LLVMBuildSub(B, ni, n1, "");
    LLVMValueRef y = LLVMBuildFMul(B, LLVMBuildFMul(B, p, pow2i(M, n1), ""), pow2i(M, n2), "");
    return sel(M, nan, x, y);
}

static LLVMValueRef body_logf(lmod *M, LLVMValueRef x) {
    /* Subnormals are scaled into the normal range first. */
    LLVMValueRef tiny = fcmp(M, LLVMRealOLT, x, f32c(M, 1.17549435e-38));
    LLVMValueRef xs = sel(M, tiny, LLVMBuildFMul(B, x, f32c(M, 8388608.0), ""), x);
    LLVMValueRef bits = bitcast(M, xs, M->t_i32);
    /* x = m 2^e with m in [0.5, 1) (frexp's convention). */
    LLVMValueRef e = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, lm_i32(M, 23), ""), lm_i32(M, 0xff), "");
    e = LLVMBuildSub(B, e, sel(M, tiny, lm_i32(M, 126 + 23), lm_i32(M, 126)), "");
    LLVMValueRef m = bitcast(M, LLVMBuildOr(B, LLVMBuildAnd(B, bits, lm_i32(M, 0x007fffff), ""), lm_i32(M, 0x3f000000), ""),
                             M->t_f32);
    /* Then m in [sqrt(1/2), sqrt(2)) and f = m - 1. */
    LLVMValueRef small = fcmp(M, LLVMRealOLT, m, f32c(M, 0.707106781186547524));
    e = LLVMBuildSub(B, e, LLVMBuildZExt(B, small, M->t_i32, ""), "");
    LLVMValueRef f = LLVMBuildFSub(B, sel(M, small, LLVMBuildFAdd(B, m, m, ""), m), f32c(M, 1.0), "");
    static const double P[] = {3.3333331174E-1, -2.4999993993E-1, 2.0000714765E-1, -1.6668057665E-1, 1.4249322787E-1,
                               -1.2420140846E-1, 1.1676998740E-1, -1.1514610310E-1, 7.0376836292E-2};
    LLVMValueRef z = LLVMBuildFMul(B, f, f, "");
    LLVMValueRef y = LLVMBuildFMul(B, LLVMBuildFMul(B, horner(M, f, P, 9), f, ""), z, "");
    LLVMValueRef fe = LLVMBuildSIToFP(B, e, M->t_f32, "");
    y = lm_fma(M, fe, f32c(M, -2.12194440e-4), y);
    y = lm_fma(M, f32c(M, -0.5), z, y);
    LLVMValueRef r = LLVMBuildFAdd(B, f, y, "");
    r = lm_fma(M, fe, f32c(M, 0.693359375), r);
    /* log(inf) = inf, log(0) = -inf, log(x < 0) = NaN, NaN stays. */
    r = sel(M, fcmp(M, LLVMRealOEQ, x, f32c(M, INFINITY)), x, r);
    r = sel(M, fcmp(M, LLVMRealOEQ, x, f32c(M, 0)), f32c(M, -INFINITY), r);
    r = sel(M, fcmp(M, LLVMRealOLT, x, f32c(M, 0)), f32c(M, NAN), r);
    return sel(M, isnan_(M, x), x, r);
}

static LLVMValueRef call_helper(lmod *M, lm_helper h, LLVMValueRef x);

static LLVMValueRef body_tanhf(lmod *M, LLVMValueRef x) {
    LLVMValueRef z = lm_intrinsic(M, "llvm.fabs", M->t_f32, &x, 1);
    /* |x| > 0.625: 1 - 2 / (e^2|x| + 1); tanh is 1 in f32 beyond 9, and the
     * clamp keeps e^2|x| finite. */
    LLVMValueRef zc = sel(M, fcmp(M, LLVMRealOGT, z, f32c(M, 44.0)), f32c(M, 44.0), z);
    LLVMValueRef e = call_helper(M, LM_EXPF, LLVMBuildFAdd(B, zc, zc, ""));
    LLVMValueRef big = LLVMBuildFSub(B, f32c(M, 1.0), LLVMBuildFDiv(B, f32c(M, 2.0), LLVMBuildFAdd(B, e, f32c(M, 1.0), ""), ""), "");
    LLVMValueRef cs[2] = {big, x};
    big = lm_intrinsic(M, "llvm.copysign", M->t_f32, cs, 2);
    /* |x| <= 0.625 (and NaN): x + x^3 P(x^2). */
    static const double P[] = {-3.33332819422E-1, 1.33314422036E-1, -5.37397155531E-2, 2.06390887954E-2,
                               -5.70498872745E-3};
    LLVMValueRef s = LLVMBuildFMul(B, x, x, "");
    LLVMValueRef small = lm_fma(M, LLVMBuildFMul(B, horner(M, s, P, 5), s, ""), x, x);
    return sel(M, fcmp(M, LLVMRealOGT, z, f32c(M, 0.625)), big, small);
}

static LLVMValueRef body_erff(lmod *M, LLVMValueRef x) {
    /* |x| < 1: x P(x^2). */
    static const double A[] = {1.1283791658815026, -0.37612626903580443, 0.11283597463487707, -0.026854328796042874,
                               0.00518931194261749, -0.0008018854991965381, 7.88249710667486e-05};
    LLVMValueRef s = LLVMBuildFMul(B, x, x, "");
    LLVMValueRef small = LLVMBuildFMul(B, horner(M, s, A, 7), x, "");
    /* |x| >= 1: 1 - e^(-x^2) h(1/x), with |x| clamped to [1, 4] (NaN takes
     * the small branch). */
    static const double H[] = {0.30595299232384615, 0.1433564144619659, -0.02424301403292479,
                               0.0023080212061452887, 0.0004613694251140809, -0.00034811540571071705,
                               0.00012019700201604545, -2.807815434047693e-05, 1.8064687974793078e-06,
                               3.816594671812183e-06, -1.834250524326281e-06};
    LLVMValueRef a = lm_intrinsic(M, "llvm.fabs", M->t_f32, &x, 1);
    LLVMValueRef z = sel(M, fcmp(M, LLVMRealOLT, a, f32c(M, 1.0)), f32c(M, 1.0), a);
    z = sel(M, fcmp(M, LLVMRealOGT, z, f32c(M, 4.0)), f32c(M, 4.0), z);
    LLVMValueRef t = LLVMBuildFDiv(B, f32c(M, 1.0), z, "");
    LLVMValueRef u = LLVMBuildFMul(B, LLVMBuildFSub(B, t, f32c(M, 0.625), ""), f32c(M, 1.0 / 0.375), "");
    LLVMValueRef e = call_helper(M, LM_EXPF, LLVMBuildFNeg(B, LLVMBuildFMul(B, z, z, ""), ""));
    LLVMValueRef erfc = LLVMBuildFMul(B, e, horner(M, u, H, 11), "");
    LLVMValueRef cs[2] = {LLVMBuildFSub(B, f32c(M, 1.0), erfc, ""), x};
    LLVMValueRef big = lm_intrinsic(M, "llvm.copysign", M->t_f32, cs, 2);
    return sel(M, fcmp(M, LLVMRealOLT, a, f32c(M, 1.0)), small, sel(M, isnan_(M, x), x, big));
}

/* Define helper h in the module on first use: float fc_<name>(float), internal
 * and always inlined (so the vectorizer sees straight-line code). */
static LLVMValueRef get_helper(lmod *M, lm_helper h) {
    if (M->helper[h]) return M->helper[h];
    static const char *const names[LM_HELPER_COUNT] = {"fc_expf", "fc_logf", "fc_tanhf", "fc_erff"};
    LLVMTypeRef fnty = LLVMFunctionType(M->t_f32, &M->t_f32, 1, 0);
    LLVMValueRef fn = LLVMAddFunction(M->m, names[h], fnty);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_readnone(M, fn);
    add_attr(M, fn, LLVMAttributeFunctionIndex, "alwaysinline");
    M->helper[h] = fn; /* before the body: erf and tanh call exp */
    LLVMBuilderRef saved = M->b;
    M->b = LLVMCreateBuilderInContext(M->c);
    LLVMPositionBuilderAtEnd(M->b, LLVMAppendBasicBlockInContext(M->c, fn, "entry"));
    LLVMValueRef x = LLVMGetParam(fn, 0), r = NULL;
    switch (h) {
    case LM_EXPF: r = body_expf(M, x); break;
    case LM_LOGF: r = body_logf(M, x); break;
    case LM_TANHF: r = body_tanhf(M, x); break;
    case LM_ERFF: r = body_erff(M, x); break;
    case LM_HELPER_COUNT: FC_UNREACHABLE("bad helper");
    }
    LLVMBuildRet(M->b, r);
    LLVMDisposeBuilder(M->b);
    M->b = saved;
    return fn;
}

static LLVMValueRef call_helper(lmod *M, lm_helper h, LLVMValueRef x) {
    LLVMValueRef fn = get_helper(M, h);
    LLVMTypeRef fnty = LLVMFunctionType(M->t_f32, &M->t_f32, 1, 0);
    return LLVMBuildCall2(B, fnty, fn, &x, 1, "");
}

static bool is_f32(lmod *M, LLVMValueRef x) { return LLVMTypeOf(x) == M->t_f32; }

LLVMValueRef lm_exp(lmod *M, LLVMValueRef x) {
    return is_f32(M, x) ? call_helper(M, LM_EXPF, x) : lm_intrinsic(M, "llvm.exp", M->t_f64, &x, 1);
}
LLVMValueRef lm_log(lmod *M, LLVMValueRef x) {
    return is_f32(M, x) ? call_helper(M, LM_LOGF, x) : lm_intrinsic(M, "llvm.log", M->t_f64, &x, 1);
}
LLVMValueRef lm_tanh(lmod *M, LLVMValueRef x) {
    return is_f32(M, x) ? call_helper(M, LM_TANHF, x) : lm_libm(M, "tanh", M->t_f64, &x, 1);
}
LLVMValueRef lm_erf(lmod *M, LLVMValueRef x) {
    return is_f32(M, x) ? call_helper(M, LM_ERFF, x) : lm_libm(M, "erf", M->t_f64, &x, 1);
}

/* (a > b || a is NaN) ? a : b, which is NaN when either is. */
LLVMValueRef lm_fmax(lmod *M, LLVMValueRef a, LLVMValueRef b) {
    LLVMValueRef r = sel(M, fcmp(M, LLVMRealOGT, a, b), a, b);
    return sel(M, isnan_(M, a), a, r);
}
LLVMValueRef lm_fmin(lmod *M, LLVMValueRef a, LLVMValueRef b) {
    LLVMValueRef r = sel(M, fcmp(M, LLVMRealOLT, a, b), a, b);
    return sel(M, isnan_(M, a), a, r);
}

/* ---- order keys -------------------------------------------------------------- */

/* For a float's bits b (as a signed integer), b ^ ((b >> (w-1)) & INT_MAX)
 * orders like the float: non-negative floats keep their bits, negative ones
 * have their magnitude bits flipped so that larger magnitudes come lower.
 * The map is its own inverse. */
static LLVMValueRef key_flip(lmod *M, LLVMValueRef b) {
    LLVMTypeRef it = LLVMTypeOf(b);
    unsigned w = LLVMGetIntTypeWidth(it);
    LLVMValueRef sign = LLVMBuildAShr(B, b, LLVMConstInt(it, w - 1, 0), "");
    LLVMValueRef maxpos = LLVMConstInt(it, w == 32 ? 0x7fffffffull : 0x7fffffffffffffffull, 0);
    return LLVMBuildXor(B, b, LLVMBuildAnd(B, sign, maxpos, ""), "");
}

LLVMValueRef lm_fkey(lmod *M, LLVMValueRef x, bool for_max) {
    LLVMTypeRef it = is_f32(M, x) ? M->t_i32 : M->t_i64;
    bool w32 = it == M->t_i32;
    LLVMValueRef key = key_flip(M, bitcast(M, x, it));
    unsigned long long top = w32 ? 0x7fffffffull : 0x7fffffffffffffffull;
    unsigned long long bottom = w32 ? 0x80000000ull : 0x8000000000000000ull;
    return sel(M, isnan_(M, x), LLVMConstInt(it, for_max ? top : bottom, 0), key);
}

LLVMValueRef lm_fkey_inverse(lmod *M, LLVMValueRef key, LLVMTypeRef ft) { return bitcast(M, key_flip(M, key), ft); }

/* ---- dtypes ------------------------------------------------------------------ */

LLVMTypeRef lm_ctype(lmod *M, fc_dtype dt) {
    switch (dt) {
    case FC_F64: return M->t_f64;
    case FC_F32: case FC_F16: case FC_BF16: return M->t_f32;
    default: return M->t_i64;
    }
}

LLVMTypeRef lm_stype(lmod *M, fc_dtype dt) {
    switch (dt) {
    case FC_F64: return M->t_f64;
    case FC_F32: return M->t_f32;
    case FC_F16: case FC_BF16: return M->t_i16;
    case FC_I64: return M->t_i64;
    case FC_I32: return M->t_i32;
    case FC_I8: case FC_BOOL: return M->t_i8;
    case FC_STRING: case FC_DTYPE_COUNT: break; /* strings never reach a kernel */
    }
    FC_UNREACHABLE("bad dtype");
}

/* f16 bits -> float, exactly: the 15 low bits shifted into an f32 and
 * scaled by 2^112 rebias the exponent and handle subnormals in one
 * multiply; infinities and NaNs are built separately. */
static LLVMValueRef f16_to_f32(lmod *M, LLVMValueRef h16) {
    LLVMValueRef h = LLVMBuildZExt(B, h16, M->t_i32, "");
    LLVMValueRef sign = LLVMBuildShl(B, LLVMBuildAnd(B, h, lm_i32(M, 0x8000), ""), lm_i32(M, 16), "");
    LLVMValueRef em = LLVMBuildAnd(B, h, lm_i32(M, 0x7fff), "");
    LLVMValueRef shifted = LLVMBuildShl(B, em, lm_i32(M, 13), "");
    LLVMValueRef finite = LLVMBuildFMul(B, bitcast(M, shifted, M->t_f32), f32c(M, 0x1p112), "");
    LLVMValueRef special = LLVMBuildOr(B, LLVMBuildAnd(B, shifted, lm_i32(M, 0x007fe000), ""), lm_i32(M, 0x7f800000), "");
    LLVMValueRef bits = sel(M, LLVMBuildICmp(B, LLVMIntUGE, em, lm_i32(M, 0x7c00), ""), special,
                            bitcast(M, finite, M->t_i32));
    return bitcast(M, LLVMBuildOr(B, bits, sign, ""), M->t_f32);
}

/* float (already an f16 value) -> f16 bits. */
static LLVMValueRef f32_to_f16(lmod *M, LLVMValueRef x) {
    LLVMValueRef bits = bitcast(M, x, M->t_i32);
    LLVMValueRef sign = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, lm_i32(M, 16), ""), lm_i32(M, 0x8000), "");
    LLVMValueRef a = lm_intrinsic(M, "llvm.fabs", M->t_f32, &x, 1);
    LLVMValueRef ua = bitcast(M, a, M->t_i32);
    LLVMValueRef normal = LLVMBuildLShr(B, LLVMBuildSub(B, ua, lm_i32(M, 0x38000000), ""), lm_i32(M, 13), "");
    LLVMValueRef sub = LLVMBuildFPToUI(B, LLVMBuildFMul(B, a, f32c(M, 0x1p24), ""), M->t_i32, "");
    LLVMValueRef h = sel(M, fcmp(M, LLVMRealOLT, a, f32c(M, 0x1p-14)), sub, normal);
    h = sel(M, fcmp(M, LLVMRealOEQ, a, f32c(M, INFINITY)), lm_i32(M, 0x7c00), h);
    h = sel(M, isnan_(M, x), lm_i32(M, 0x7e00), h);
    return LLVMBuildTrunc(B, LLVMBuildOr(B, h, sign, ""), M->t_i16, "");
}

/* Round a float to the nearest bf16 value, ties to even, on its bits. Too
 * large a magnitude carries into the exponent and becomes inf, as it should. */
static LLVMValueRef round_bf16(lmod *M, LLVMValueRef x) {
    LLVMValueRef u = bitcast(M, x, M->t_i32);
    LLVMValueRef lsb = LLVMBuildAnd(B, LLVMBuildLShr(B, u, lm_i32(M, 16), ""), lm_i32(M, 1), "");
    LLVMValueRef r = LLVMBuildAdd(B, LLVMBuildAdd(B, u, lm_i32(M, 0x7fff), ""), lsb, "");
    r = LLVMBuildAnd(B, r, lm_i32(M, (int64_t)0xffff0000u), "");
    return sel(M, isnan_(M, x), x, bitcast(M, r, M->t_f32));
}

/* Round a float to the nearest f16 value, ties to even: on the bits (10
 * fraction bits kept) in the normal range; below 2^-14 the quantum is 2^-24,
 * and adding and subtracting 0.5 (whose ulp is 2^-24) lets the FPU round.
 * 65520 and above round to inf. */
static LLVMValueRef round_f16(lmod *M, LLVMValueRef x) {
    LLVMValueRef a = lm_intrinsic(M, "llvm.fabs", M->t_f32, &x, 1);
    LLVMValueRef ua = bitcast(M, a, M->t_i32);
    LLVMValueRef lsb = LLVMBuildAnd(B, LLVMBuildLShr(B, ua, lm_i32(M, 13), ""), lm_i32(M, 1), "");
    LLVMValueRef un = LLVMBuildAdd(B, LLVMBuildAdd(B, ua, lm_i32(M, 0xfff), ""), lsb, "");
    un = LLVMBuildAnd(B, un, lm_i32(M, (int64_t)0xffffe000u), "");
    LLVMValueRef sub = LLVMBuildFSub(B, LLVMBuildFAdd(B, a, f32c(M, 0.5), ""), f32c(M, 0.5), "");
    LLVMValueRef y = sel(M, fcmp(M, LLVMRealOLT, a, f32c(M, 0x1p-14)), sub, bitcast(M, un, M->t_f32));
    y = sel(M, fcmp(M, LLVMRealOGE, a, f32c(M, 65520.0)), f32c(M, INFINITY), y);
    LLVMValueRef cs[2] = {y, x};
    y = lm_intrinsic(M, "llvm.copysign", M->t_f32, cs, 2);
    return sel(M, isnan_(M, x), x, y);
}

LLVMValueRef lm_from_storage(lmod *M, fc_dtype dt, LLVMValueRef x) {
    switch (dt) {
    case FC_F64: case FC_F32: case FC_I64: return x;
    case FC_BF16:
        return bitcast(M, LLVMBuildShl(B, LLVMBuildZExt(B, x, M->t_i32, ""), lm_i32(M, 16), ""), M->t_f32);
    case FC_F16: return f16_to_f32(M, x);
    case FC_I32: case FC_I8: return LLVMBuildSExt(B, x, M->t_i64, "");
    case FC_BOOL: /* any non-zero byte is true, as the reference reads it */
        return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntNE, x, LLVMConstInt(M->t_i8, 0, 0), ""), M->t_i64, "");
    case FC_STRING: case FC_DTYPE_COUNT: break; /* strings never reach a kernel */
    }
    FC_UNREACHABLE("bad dtype");
}

LLVMValueRef lm_to_storage(lmod *M, fc_dtype dt, LLVMValueRef x) {
    switch (dt) {
    case FC_F64: case FC_F32: case FC_I64: return x;
    case FC_BF16: {
        /* x is a bf16 value: its top half, with a NaN kept quiet as
         * fc_f32_to_bf16 does. */
        LLVMValueRef hi = LLVMBuildLShr(B, bitcast(M, x, M->t_i32), lm_i32(M, 16), "");
        hi = sel(M, isnan_(M, x), LLVMBuildOr(B, hi, lm_i32(M, 0x40), ""), hi);
        return LLVMBuildTrunc(B, hi, M->t_i16, "");
    }
    case FC_F16: return f32_to_f16(M, x);
    case FC_I32: return LLVMBuildTrunc(B, x, M->t_i32, "");
    case FC_I8: case FC_BOOL: return LLVMBuildTrunc(B, x, M->t_i8, "");
    case FC_STRING: case FC_DTYPE_COUNT: break; /* strings never reach a kernel */
    }
    FC_UNREACHABLE("bad dtype");
}

static LLVMValueRef clamp_i64(lmod *M, LLVMValueRef x, int64_t lo, int64_t hi) {
    return lm_smin(M, lm_smax(M, x, lm_i64(M, lo)), lm_i64(M, hi));
}

LLVMValueRef lm_round(lmod *M, fc_dtype dt, LLVMValueRef x) {
    switch (dt) {
    case FC_BF16: return round_bf16(M, x);
    case FC_F16: return round_f16(M, x);
    case FC_I32: return clamp_i64(M, x, INT32_MIN, INT32_MAX);
    case FC_I8: return clamp_i64(M, x, INT8_MIN, INT8_MAX);
    case FC_BOOL: return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntNE, x, lm_i64(M, 0), ""), M->t_i64, "");
    default: return x;
    }
}

/* Float (f32 or f64 compute type) -> integer dtype `to`: NaN -> 0, then
 * truncate and saturate at the dtype's limits (fc_round_to_dtype's
 * clamp_int), all in double so that every limit is exact. */
static LLVMValueRef float_to_int(lmod *M, LLVMValueRef x, fc_dtype to) {
    if (is_f32(M, x)) x = LLVMBuildFPExt(B, x, M->t_f64, "");
    LLVMValueRef nan = isnan_(M, x);
    LLVMValueRef t = lm_intrinsic(M, "llvm.trunc", M->t_f64, &x, 1);
    LLVMValueRef lo = lm_fconst(M, M->t_f64, fc_round_to_dtype(-INFINITY, to));
    LLVMValueRef hi = lm_fconst(M, M->t_f64, fc_round_to_dtype(INFINITY, to));
    t = sel(M, fcmp(M, LLVMRealOLT, t, lo), lo, t);
    t = sel(M, fcmp(M, LLVMRealOGT, t, hi), hi, t);
    t = sel(M, nan, lm_fconst(M, M->t_f64, 0), t);
    return LLVMBuildFPToSI(B, t, M->t_i64, "");
}

LLVMValueRef lm_convert(lmod *M, LLVMValueRef x, fc_dtype from, fc_dtype to) {
    if (from == to) return x;
    bool ff = fc_dtype_is_float(from), tf = fc_dtype_is_float(to);
    if (ff && tf) {
        LLVMTypeRef ft = lm_ctype(M, from), tt = lm_ctype(M, to);
        if (ft != tt) x = tt == M->t_f64 ? LLVMBuildFPExt(B, x, tt, "") : LLVMBuildFPTrunc(B, x, tt, "");
        return lm_round(M, to, x);
    }
    if (ff) {
        if (to == FC_BOOL) /* NaN != 0 is true */
            return LLVMBuildZExt(B, fcmp(M, LLVMRealUNE, x, lm_fconst(M, LLVMTypeOf(x), 0)), M->t_i64, "");
        return lm_round(M, to, float_to_int(M, x, to));
    }
    if (tf) return lm_round(M, to, LLVMBuildSIToFP(B, x, lm_ctype(M, to), ""));
    return lm_round(M, to, x); /* integer or bool to integer or bool */
}

LLVMValueRef lm_literal(lmod *M, fc_dtype dt, double x) {
    double r = fc_round_to_dtype(x, dt);
    if (fc_dtype_is_float(dt)) return LLVMConstReal(lm_ctype(M, dt), r);
    return lm_i64(M, (int64_t)r);
}

/*
 * llvm_internal.h - what the files of codegen/llvm share (internal).
 *
 *   lower*.c   plan groups -> LLVM IR functions (the kernels; lower_impl.h)
 *   mathlib.c  scalar numerics in IR: f32 exp/log/tanh/erf that vectorize,
 *              rounding to every dtype, storage <-> compute conversions
 *   jit.c      the target machine, the optimization pipeline, ORC LLJIT
 *
 * Every helper here builds scalar IR at the builder's position. The loop
 * vectorizer widens it later, so nothing here may call a function that has
 * no vector form unless it must (libm for f64 and for sin, cos and pow).
 */
#ifndef FC_LLVM_INTERNAL_H
#define FC_LLVM_INTERNAL_H

#include "codegen/llvm/llvm_codegen.h"

#include <llvm-c/Core.h>

/* Math helpers defined once per module as internal functions. */
typedef enum lm_helper {
    LM_EXPF,
    LM_LOGF,
    LM_TANHF,
    LM_ERFF,
    LM_HELPER_COUNT
} lm_helper;

/* One module being built. */
typedef struct lmod {
    fc_context *ctx;
    LLVMContextRef c;
    LLVMModuleRef m;
    LLVMBuilderRef b; /* where code goes now */
    LLVMTypeRef t_void, t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f64;
    LLVMValueRef helper[LM_HELPER_COUNT];
    bool row_conflict; /* set by fc_llvm_lower: see fc_llvm_compile */
} lmod;

/* ---- constants and intrinsics (mathlib.c) ------------------------------ */

/* A float or double constant of type t. */
LLVMValueRef lm_fconst(lmod *M, LLVMTypeRef t, double x);
LLVMValueRef lm_i32(lmod *M, int64_t x);
LLVMValueRef lm_i64(lmod *M, int64_t x);
/* A call of intrinsic `name` overloaded on type t (llvm.sqrt on f32, ...). */
LLVMValueRef lm_intrinsic(lmod *M, const char *name, LLVMTypeRef t, LLVMValueRef *args, int nargs);
/* a * b + c, fused where the target has FMA (llvm.fmuladd). */
LLVMValueRef lm_fma(lmod *M, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c);
/* A call of a libm function of type t(t, ...): declared readnone, so it
 * does not block vectorization or hoisting (errno is never read). */
LLVMValueRef lm_libm(lmod *M, const char *name, LLVMTypeRef t, LLVMValueRef *args, int nargs);
/* select(a < b, a, b) and friends, on integers (signed). */
LLVMValueRef lm_smin(lmod *M, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_smax(lmod *M, LLVMValueRef a, LLVMValueRef b);

/* ---- float functions ---------------------------------------------------- */

/* f32: inline, branch-free, vectorizable; f64: libm. Error bounds of the f32
 * versions (measured over every float in range) are in docs/CPU-BACKEND.md. */
LLVMValueRef lm_exp(lmod *M, LLVMValueRef x);
LLVMValueRef lm_log(lmod *M, LLVMValueRef x);
LLVMValueRef lm_tanh(lmod *M, LLVMValueRef x);
LLVMValueRef lm_erf(lmod *M, LLVMValueRef x);
/* max/min that propagate NaN (as torch.maximum and the reference). */
LLVMValueRef lm_fmax(lmod *M, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_fmin(lmod *M, LLVMValueRef a, LLVMValueRef b);

/*
 * Order keys for max/min reductions. A float maps to a signed integer of its
 * width whose order is the float order, with NaN above everything (for
 * max) or below everything (for min), so that a NaN anywhere wins. An
 * integer max reduction is one the loop vectorizer recognizes; a float one
 * with NaN semantics is not.
 */
LLVMValueRef lm_fkey(lmod *M, LLVMValueRef x, bool for_max);
LLVMValueRef lm_fkey_inverse(lmod *M, LLVMValueRef key, LLVMTypeRef ft);

/* ---- dtypes -------------------------------------------------------------- */

/* The type a dtype computes in: double for f64, float for f32/f16/bf16,
 * i64 for the integers and bool (0 or 1). */
LLVMTypeRef lm_ctype(lmod *M, fc_dtype dt);
/* The type a dtype is stored in: i16 for f16/bf16, i8 for bool. */
LLVMTypeRef lm_stype(lmod *M, fc_dtype dt);
/* Storage -> compute type (exact). */
LLVMValueRef lm_from_storage(lmod *M, fc_dtype dt, LLVMValueRef x);
/* Compute type -> storage, for a value already rounded to dt. */
LLVMValueRef lm_to_storage(lmod *M, fc_dtype dt, LLVMValueRef x);
/* Round a value of dt's compute type to a value of dt: f16/bf16 round to
 * nearest-even (overflow to inf), i32/i8 saturate, bool is x != 0. */
LLVMValueRef lm_round(lmod *M, fc_dtype dt, LLVMValueRef x);
/* Convert a value of dtype `from` (in its compute type) to dtype `to`
 * (rounded), as the reference interpreter converts: float to int truncates
 * and saturates, NaN gives 0; anything to bool is x != 0. */
LLVMValueRef lm_convert(lmod *M, LLVMValueRef x, fc_dtype from, fc_dtype to);
/* A number rounded to dt, as a constant of dt's compute type. */
LLVMValueRef lm_literal(lmod *M, fc_dtype dt, double x);

/* ---- kernels (lower.c) ---------------------------------------------------- */

/* Emit one function per POINTWISE and REDUCE group of the plan into M->m,
 * named fc_g<position>, and fill kernels[] (all but fn). Errors go to
 * M->ctx. */
fc_status fc_llvm_lower(lmod *M, const fc_plan *plan, fc_llvm_kernel *kernels);

#endif

/*
 * attention.c - CUDA C for an attention group: one flash-attention kernel.
 *
 * The kernels themselves are templates written out below as CUDA text
 * (helpers_src, templates_src, wgmma_src), emitted once per translation unit:
 *
 *  - fc_attn_tc, the tensor-core kernel for bf16 and f16 with head dims up
 *    to 128 (FlashAttention-2): 16 query rows per warp, 4 or 8 warps a
 *    block, K and V tiles of 64 keys in shared memory (cp.async, the copy
 *    of the next tile overlapping the math on this one), mma.sync m16n8k16
 *    with f32 accumulators, ldmatrix for every fragment, the online softmax
 *    in f32 registers, causal blocks past the diagonal skipped;
 *  - fc_attn_fa3 (wgmma_src), the Hopper kernel (FlashAttention-3's
 *    structure: wgmma, a producer warpgroup feeding K and V through
 *    mbarriers, setmaxnreg, intra-warpgroup overlap and ping-pong), for
 *    plans generated for sm 90 whose padded head dims are 64 or 128; the
 *    unit is then compiled for sm_90a (fc_cuda_attention_hopper);
 *  - fc_attn_rows, the general kernel (f32, f64, other head dims): a warp
 *    per query row, the same online softmax in f32 (f64 for f64).
 *
 * Per kernel, this file writes a config struct of constants (shapes,
 * strides, scale, mask kind, which loads may be 16-byte copies) and a thin
 * extern "C" kernel that instantiates the template with it. Everything is a
 * compile-time constant, so index arithmetic folds and loops unroll.
 *
 * Operands are read in place. q, k, v and the mask are each a chain of view
 * ops over a group input (a split of a fused QKV projection, reshaped to
 * heads and permuted, say): fc_attention_view turns the chain into an
 * offset and a stride per dim, and the kernel reads element (b.., i, d) at
 * base + offset + sum b_j * batch_stride_j + i * row_stride + d * col_stride.
 * The result is written the same way through the permute/reshape chain that
 * ends in the group's output.
 */
#include "attention.h"
#include "emit.h"
#include "gemm.h"
#include "passes/attention.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the device code ------------------------------------------------------- */

/* BEGIN GENERATED: helpers_src */
static const char helpers_src[] =
    "/* fusec attention: device helpers (inline PTX). Emitted once per translation unit. */\n"
    "#ifndef FC_ATTN_HELPERS\n"
    "#define FC_ATTN_HELPERS\n"
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "__device__ __forceinline__ unsigned fc_attn_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }\n"
    "/* 16 bytes global -> shared without registers; bytes = 0 writes zeros (rows past the end). */\n"
    "__device__ __forceinline__ void fc_attn_cp16(void *dst, const void *src, int bytes) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" :: \"r\"(fc_attn_saddr(dst)), \"l\"(src), \"r\"(bytes) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void fc_attn_cp_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\"); }\n"
    "/* Wait until at most N of this thread's committed groups are in flight. */\n"
    "template <int N> __device__ __forceinline__ void fc_attn_cp_wait_n() {\n"
    "  asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void fc_attn_cp_wait() {\n"
    "  fc_attn_cp_commit();\n"
    "  fc_attn_cp_wait_n<0>();\n"
    "}\n"
    "/* Four 8x8 b16 matrices from shared memory; lanes 8i..8i+7 address the rows of matrix i. */\n"
    "__device__ __forceinline__ void fc_attn_ldsm(unsigned r[4], const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(fc_attn_saddr(p)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void fc_attn_ldsm_t(unsigned r[4], const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(fc_attn_saddr(p)) : \"memory\");\n"
    "}\n"
    "/* c += a (16x16, row) * b (16x8, col), f32 accumulators; the last argument picks the input type. */\n"
    "__device__ __forceinline__ void fc_attn_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1, __nv_bfloat16) {\n"
    "  asm(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n\"\n"
    "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "}\n"
    "__device__ __forceinline__ void fc_attn_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1, __half) {\n"
    "  asm(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n\"\n"
    "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "}\n"
    "/* 2^x with the MUFU instruction alone: results below 2^-126 flush to 0,\n"
    " * which no softmax weight can tell from 0 (exp2f adds denormal handling). */\n"
    "__device__ __forceinline__ float fc_attn_exp2(float x) {\n"
    "  float y;\n"
    "  asm(\"ex2.approx.ftz.f32 %0, %1;\\n\" : \"=f\"(y) : \"f\"(x));\n"
    "  return y;\n"
    "}\n"
    "/* Two floats as one register of two 16-bit values, lo in the low half. */\n"
    "__device__ __forceinline__ unsigned fc_attn_pack(float lo, float hi, __nv_bfloat16) {\n"
    "  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);\n"
    "  return *reinterpret_cast<unsigned *>(&v);\n"
    "}\n"
    "__device__ __forceinline__ unsigned fc_attn_pack(float lo, float hi, __half) {\n"
    "  __half2 v = __floats2half2_rn(lo, hi);\n"
    "  return *reinterpret_cast<unsigned *>(&v);\n"
    "}\n"
    "#endif\n";
/* END GENERATED: helpers_src */

/* BEGIN GENERATED: templates_src */
static const char templates_src[] =
    "/* fusec attention: the kernel templates. Emitted once per translation unit;\n"
    " * each attention kernel instantiates one with a config struct C that bakes in\n"
    " * every shape, stride, scale and flag (codegen/cuda/attention.c writes it). */\n"
    "#ifndef FC_ATTN_TEMPLATES\n"
    "#define FC_ATTN_TEMPLATES\n"
    "__device__ __forceinline__ float fc_attn_f(__nv_bfloat16 x) { return __bfloat162float(x); }\n"
    "__device__ __forceinline__ float fc_attn_f(__half x) { return __half2float(x); }\n"
    "__device__ __forceinline__ float fc_attn_f(float x) { return x; }\n"
    "__device__ __forceinline__ double fc_attn_f(double x) { return x; }\n"
    "__device__ __forceinline__ float fc_attn_f(unsigned char x) { return x != 0 ? 1.f : 0.f; }\n"
    "__device__ __forceinline__ void fc_attn_st(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }\n"
    "__device__ __forceinline__ void fc_attn_st(__half *p, float x) { *p = __float2half_rn(x); }\n"
    "__device__ __forceinline__ void fc_attn_st(float *p, float x) { *p = x; }\n"
    "__device__ __forceinline__ void fc_attn_st(double *p, double x) { *p = x; }\n"
    "/* Two neighbours at once (p 4-byte aligned). */\n"
    "__device__ __forceinline__ void fc_attn_st2(__nv_bfloat16 *p, float x, float y) {\n"
    "  *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);\n"
    "}\n"
    "__device__ __forceinline__ void fc_attn_st2(__half *p, float x, float y) {\n"
    "  *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(x, y);\n"
    "}\n"
    "__device__ __forceinline__ float fc_attn_exp(float x) { return expf(x); }\n"
    "__device__ __forceinline__ double fc_attn_exp(double x) { return exp(x); }\n"
    "\n"
    "/* Rows [r0, r0 + R) of an [S, N] matrix at g (row stride RS, column stride\n"
    " * CS, in elements) into shared memory, columns [0, NP), element (r, col) at\n"
    " * L::at(sm, r, col): zeros past row S and past column N, so padded rows and\n"
    " * columns add nothing. VEC: 16-byte asynchronous copies (CS == 1 and N, RS\n"
    " * and the offset multiples of 8 elements), UNROLL of them unrolled; else\n"
    " * element by element, walking the matrix in the order its memory is laid\n"
    " * out so a warp's reads stay coalesced. */\n"
    "template <typename T, int R, int NP, int N, int S, long long RS, long long CS, bool VEC, int NT, typename L,\n"
    "          int UNROLL>\n"
    "__device__ __forceinline__ void fc_attn_load(T *sm, const T *__restrict__ g, int r0, int tid) {\n"
    "  if constexpr (VEC) {\n"
    "    constexpr int CPR = NP / 8, TOTAL = R * CPR;\n"
    "#pragma unroll UNROLL\n"
    "    for (int it = 0; it < (TOTAL + NT - 1) / NT; it++) {\n"
    "      const int c = it * NT + tid;\n"
    "      if (TOTAL % NT == 0 || c < TOTAL) {\n"
    "        const int r = c / CPR, col = (c % CPR) * 8, row = r0 + r;\n"
    "        const bool ok = row < S && col < N;\n"
    "        fc_attn_cp16(L::at(sm, r, col), ok ? g + row * RS + col : g, ok ? 16 : 0);\n"
    "      }\n"
    "    }\n"
    "  } else {\n"
    "    constexpr int TOTAL = R * NP;\n"
    "    for (int c = tid; c < TOTAL; c += NT) {\n"
    "      const bool by_rows = RS == 1 && CS != 1;\n"
    "      const int r = by_rows ? c % R : c / NP, col = by_rows ? c / R : c % NP, row = r0 + r;\n"
    "      T x;\n"
    "      if (row < S && col < N) x = g[row * RS + col * CS];\n"
    "      else fc_attn_st(&x, 0.f);\n"
    "      *L::at(sm, r, col) = x;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "/* Shared rows of LD elements. */\n"
    "template <int LD> struct fc_attn_padded {\n"
    "  template <typename T> static __device__ __forceinline__ T *at(T *sm, int r, int col) { return sm + r * LD + col; }\n"
    "};\n"
    "\n"
    "/* fc_attn_load into rows of LD elements, every copy unrolled. */\n"
    "template <typename T, int R, int NP, int N, int S, long long RS, long long CS, bool VEC, int LD, int NT>\n"
    "__device__ __forceinline__ void fc_attn_tile(T *sm, const T *__restrict__ g, int r0, int tid) {\n"
    "  fc_attn_load<T, R, NP, N, S, RS, CS, VEC, NT, fc_attn_padded<LD>, (R * (NP / 8) + NT - 1) / NT>(sm, g, r0, tid);\n"
    "}\n"
    "\n"
    "/*\n"
    " * The pieces of the tensor-core kernels (fc_attn_tc, and fc_attn_fa3 whose\n"
    " * accumulators hold per warp what those of fc_attn_tc hold).\n"
    " *\n"
    " * mma.m16n8k16 fragments (g = lane / 4, t = lane % 4): A holds rows g and\n"
    " * g + 8, columns 2t, 2t + 1 (+8); B columns g, rows 2t, 2t + 1 (+8); the\n"
    " * accumulator rows g and g + 8, columns 2t and 2t + 1. So a thread holds two\n"
    " * query rows, and the four threads of a quad share them (max and sum are\n"
    " * reduced over the quad with two shuffles).\n"
    " */\n"
    "template <int N> __device__ __forceinline__ void fc_attn_zero(float (&d)[N][4]) {\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < N; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;\n"
    "}\n"
    "\n"
    "/* The block's Q tile (rows [m0, m0 + 16 NW)) into registers as A fragments,\n"
    " * a warp its 16 rows, through smem (rows of DP + 8 elements: padded by 16\n"
    " * bytes, the 8 rows one ldmatrix reads fall in 8 different bank groups);\n"
    " * smem is free again on return. */\n"
    "template <class C>\n"
    "__device__ __forceinline__ void fc_attn_load_q(unsigned (&qf)[C::DP / 16][4], typename C::T *smem,\n"
    "                                               const typename C::T *__restrict__ q, int m0, int tid) {\n"
    "  constexpr int LD = C::DP + 8;\n"
    "  const int warp = tid >> 5, lane = tid & 31;\n"
    "  fc_attn_tile<typename C::T, 16 * C::NW, C::DP, C::D, C::SQ, C::QS, C::QD, C::QVEC, LD, 32 * C::NW>(smem, q, m0, tid);\n"
    "  fc_attn_cp_wait();\n"
    "  __syncthreads();\n"
    "#pragma unroll\n"
    "  for (int kc = 0; kc < C::DP / 16; kc++)\n"
    "    fc_attn_ldsm(qf[kc], smem + (warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + kc * 16 + (lane >> 4) * 8);\n"
    "  __syncthreads();\n"
    "}\n"
    "\n"
    "/* The scores s of key tile n0 (a warp's 16 x BN, rows from m0 + 16 warp;\n"
    " * row0 as in the kernels) in base 2 (exp(x) = exp2(x log2 e)), masked to\n"
    " * ninf. Only tiles that reach past the last key or across the diagonal\n"
    " * check. A macro over the kernel's names, not a function: as a function\n"
    " * NVVM simplifies the index arithmetic before inlining, and fc_attn_tc's\n"
    " * SASS changes (the same floating-point instructions, integer ones moved). */\n"
    "#define FC_ATTN_MASK(C, BN, s, mask, mo, n0, m0, warp, lane, row0, ninf)                                  \\\n"
    "  do {                                                                                                  \\\n"
    "    const bool edge = n0 + BN > C::SK || (C::CAUSAL && n0 + BN - 1 > m0 + warp * 16);                   \\\n"
    "    _Pragma(\"unroll\") for (int j = 0; j < BN / 8; j++)                                                  \\\n"
    "    _Pragma(\"unroll\") for (int e = 0; e < 4; e++) {                                                     \\\n"
    "      const int row = row0 + (e >> 1) * 8, col = n0 + j * 8 + 2 * (lane & 3) + (e & 1);                 \\\n"
    "      float x = s[j][e] * C::SCALE_LOG2;                                                                \\\n"
    "      if constexpr (C::MASK != 0) {                                                                     \\\n"
    "        if (row < C::SQ && col < C::SK) {                                                               \\\n"
    "          const float mv = fc_attn_f(mask[mo + row * C::MQ + col * C::MK]);                             \\\n"
    "          if constexpr (C::MASK == 1) x = mv != 0.f ? x : ninf;                                         \\\n"
    "          else x += mv * 1.4426950408889634f;                                                           \\\n"
    "        }                                                                                               \\\n"
    "      }                                                                                                 \\\n"
    "      if (edge && (col >= C::SK || (C::CAUSAL && col > row))) x = ninf;                                 \\\n"
    "      s[j][e] = x;                                                                                      \\\n"
    "    }                                                                                                   \\\n"
    "  } while (0)\n"
    "\n"
    "/* Row r of a tile of masked scores s: the new running max (into mx[r],\n"
    " * over the quad), the exponent base (*base) and the factor alpha that what\n"
    " * was summed so far needs (returned). */\n"
    "template <int NS>\n"
    "__device__ __forceinline__ float fc_attn_row_max(const float (&s)[NS][4], float (&mx)[2], int r, float *base) {\n"
    "  const float ninf = -__int_as_float(0x7f800000);\n"
    "  float m = mx[r];\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < NS; j++) m = fmaxf(m, fmaxf(s[j][2 * r], s[j][2 * r + 1]));\n"
    "  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));\n"
    "  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));\n"
    "  *base = m == ninf ? 0.f : m; /* every key dropped so far: keep exp2 at 0, not NaN */\n"
    "  const float alpha = fc_attn_exp2(mx[r] - *base);\n"
    "  mx[r] = m;\n"
    "  return alpha;\n"
    "}\n"
    "\n"
    "/* Online softmax over a tile of masked scores s: new running max mx, what\n"
    " * was summed so far (l, acc) rescaled, s to its exponentials, added to l. */\n"
    "template <int NS, int NA>\n"
    "__device__ __forceinline__ void fc_attn_softmax(float (&s)[NS][4], float (&acc)[NA][4], float (&mx)[2], float (&l)[2]) {\n"
    "#pragma unroll\n"
    "  for (int r = 0; r < 2; r++) {\n"
    "    float base;\n"
    "    const float alpha = fc_attn_row_max(s, mx, r, &base);\n"
    "    l[r] *= alpha;\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < NA; j++) {\n"
    "      acc[j][2 * r] *= alpha;\n"
    "      acc[j][2 * r + 1] *= alpha;\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < NS; j++) {\n"
    "      s[j][2 * r] = fc_attn_exp2(s[j][2 * r] - base);\n"
    "      s[j][2 * r + 1] = fc_attn_exp2(s[j][2 * r + 1] - base);\n"
    "      l[r] += s[j][2 * r] + s[j][2 * r + 1]; /* this thread's columns; the quad sums at the end */\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "/* Keys [16 kc, 16 kc + 16) of P: two accumulator tiles are one A fragment. */\n"
    "template <typename T, int NS>\n"
    "__device__ __forceinline__ void fc_attn_pack_p(unsigned (&a)[4], const float (&s)[NS][4], int kc) {\n"
    "  a[0] = fc_attn_pack(s[2 * kc][0], s[2 * kc][1], T());\n"
    "  a[1] = fc_attn_pack(s[2 * kc][2], s[2 * kc][3], T());\n"
    "  a[2] = fc_attn_pack(s[2 * kc + 1][0], s[2 * kc + 1][1], T());\n"
    "  a[3] = fc_attn_pack(s[2 * kc + 1][2], s[2 * kc + 1][3], T());\n"
    "}\n"
    "\n"
    "/* The result: this thread's rows of acc / l (l summed over the quad) into\n"
    " * o, the batch's first element. RCP: as acc * (1 / l), one division per\n"
    " * row (fc_attn_fa3; a row that kept no key is still 0 * inf = NaN). */\n"
    "template <class C, bool RCP = false>\n"
    "__device__ __forceinline__ void fc_attn_store_o(typename C::T *__restrict__ o, const float (&acc)[C::DVP / 8][4],\n"
    "                                                const float (&l)[2], int row0, int lane) {\n"
    "#pragma unroll\n"
    "  for (int r = 0; r < 2; r++) {\n"
    "    float lt = l[r];\n"
    "    lt += __shfl_xor_sync(0xffffffffu, lt, 1);\n"
    "    lt += __shfl_xor_sync(0xffffffffu, lt, 2);\n"
    "    const float inv = RCP ? 1.f / lt : 0.f;\n"
    "    const int row = row0 + r * 8;\n"
    "    if (row < C::SQ) {\n"
    "      typename C::T *orow = o + row * C::OS;\n"
    "#pragma unroll\n"
    "      for (int j = 0; j < C::DVP / 8; j++) {\n"
    "        const int col = j * 8 + 2 * (lane & 3);\n"
    "        /* A row that kept no key: 0 / 0 = NaN, as the reference. */\n"
    "        const float y0 = RCP ? acc[j][2 * r] * inv : acc[j][2 * r] / lt, y1 = RCP ? acc[j][2 * r + 1] * inv : acc[j][2 * r + 1] / lt;\n"
    "        if constexpr (C::OVEC) {\n"
    "          if (col < C::DV) fc_attn_st2(orow + col, y0, y1);\n"
    "        } else {\n"
    "          if (col < C::DV) fc_attn_st(orow + col * C::OD, y0);\n"
    "          if (col + 1 < C::DV) fc_attn_st(orow + (col + 1) * C::OD, y1);\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "/*\n"
    " * The tensor-core kernel (FlashAttention-2): a block of NW warps owns\n"
    " * 16 * NW query rows, a warp 16 of them. Q stays in registers as mma\n"
    " * fragments; K and V come through shared memory 64 keys at a time; the\n"
    " * scores of a tile (16 x 64 per warp) live in registers, get masked, scaled\n"
    " * to base 2 and folded into a running max and sum (the online softmax, in\n"
    " * f32); P goes from the score accumulators straight into the A fragments of\n"
    " * P @ V.\n"
    " *\n"
    " * Copies overlap the math as in FlashAttention-2: V(j) is in flight while\n"
    " * S = Q K(j)^T and the softmax run, and K(j+1) while O += P V(j).\n"
    " */\n"
    "template <class C>\n"
    "__device__ __forceinline__ void fc_attn_tc(const typename C::T *__restrict__ q, const typename C::T *__restrict__ k,\n"
    "                                           const typename C::T *__restrict__ v, const typename C::M *__restrict__ mask,\n"
    "                                           typename C::T *__restrict__ o) {\n"
    "  typedef typename C::T T;\n"
    "  constexpr int NW = C::NW, BM = 16 * NW, BN = 64, NT = 32 * NW;\n"
    "  constexpr int DP = C::DP, DVP = C::DVP, LDK = DP + 8, LDV = DVP + 8;\n"
    "  static_assert(DP % 16 == 0 && DVP % 16 == 0 && DP > 0 && DVP > 0, \"head dims padded to 16\");\n"
    "  /* Rows padded by 16 bytes: the 8 rows one ldmatrix reads fall in 8\n"
    "   * different bank groups. The Q tile uses the whole buffer first; then it\n"
    "   * holds one K tile (sk) and one V tile (sv). */\n"
    "  constexpr int QN = BM * LDK, KVN = BN * (LDK + LDV);\n"
    "  __shared__ __align__(16) T smem[QN > KVN ? QN : KVN];\n"
    "  T *const sk = smem, *const sv = smem + BN * LDK;\n"
    "  const float ninf = -__int_as_float(0x7f800000);\n"
    "  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;\n"
    "  /* The longest rows (the last query tiles, under a causal mask) first. */\n"
    "  constexpr int NQT = (C::SQ + BM - 1) / BM;\n"
    "  const long long bid = blockIdx.x;\n"
    "  const int m0 = (NQT - 1 - (int)(bid / C::NB)) * BM;\n"
    "  long long qo, ko, vo, mo, oo;\n"
    "  C::offsets(bid % C::NB, qo, ko, vo, mo, oo);\n"
    "\n"
    "  unsigned qf[DP / 16][4];\n"
    "  fc_attn_load_q<C>(qf, smem, q + qo, m0, tid);\n"
    "\n"
    "  float acc[DVP / 8][4];\n"
    "  fc_attn_zero(acc);\n"
    "  float mx[2] = {ninf, ninf}, l[2] = {0.f, 0.f};\n"
    "  const int row0 = m0 + warp * 16 + (lane >> 2); /* this thread's rows: row0, row0 + 8 */\n"
    "  const int kend = C::CAUSAL ? min(C::SK, m0 + BM) : C::SK; /* causal: later keys are never seen */\n"
    "  if (kend > 0) {\n"
    "    fc_attn_tile<T, BN, DP, C::D, C::SK, C::KS, C::KD, C::KVEC, LDK, NT>(sk, k + ko, 0, tid);\n"
    "    fc_attn_cp_commit();\n"
    "  }\n"
    "  for (int n0 = 0; n0 < kend; n0 += BN) {\n"
    "    /* In flight: K(n0), then V(n0). */\n"
    "    fc_attn_tile<T, BN, DVP, C::DV, C::SK, C::VS, C::VD, C::VVEC, LDV, NT>(sv, v + vo, n0, tid);\n"
    "    fc_attn_cp_commit();\n"
    "    fc_attn_cp_wait_n<1>();\n"
    "    __syncthreads(); /* K(n0) is in shared memory, from every thread's copies */\n"
    "\n"
    "    float s[BN / 8][4];\n"
    "    fc_attn_zero(s);\n"
    "#pragma unroll\n"
    "    for (int kc = 0; kc < DP / 16; kc++)\n"
    "#pragma unroll\n"
    "      for (int j = 0; j < BN / 16; j++) {\n"
    "        unsigned b[4];\n"
    "        fc_attn_ldsm(b, sk + (j * 16 + (lane >> 4) * 8 + (lane & 7)) * LDK + kc * 16 + ((lane >> 3) & 1) * 8);\n"
    "        fc_attn_mma(s[2 * j], qf[kc], b[0], b[1], T());\n"
    "        fc_attn_mma(s[2 * j + 1], qf[kc], b[2], b[3], T());\n"
    "      }\n"
    "    FC_ATTN_MASK(C, BN, s, mask, mo, n0, m0, warp, lane, row0, ninf);\n"
    "    fc_attn_softmax(s, acc, mx, l);\n"
    "\n"
    "    fc_attn_cp_wait_n<0>();\n"
    "    __syncthreads(); /* V(n0) is in shared memory, and every warp is done with K(n0) */\n"
    "    if (n0 + BN < kend) {\n"
    "      fc_attn_tile<T, BN, DP, C::D, C::SK, C::KS, C::KD, C::KVEC, LDK, NT>(sk, k + ko, n0 + BN, tid);\n"
    "      fc_attn_cp_commit();\n"
    "    }\n"
    "\n"
    "    /* O += P V. */\n"
    "#pragma unroll\n"
    "    for (int kc = 0; kc < BN / 16; kc++) {\n"
    "      unsigned a[4];\n"
    "      fc_attn_pack_p<T>(a, s, kc);\n"
    "#pragma unroll\n"
    "      for (int j = 0; j < DVP / 16; j++) {\n"
    "        unsigned b[4];\n"
    "        fc_attn_ldsm_t(b, sv + (kc * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDV + j * 16 + (lane >> 4) * 8);\n"
    "        fc_attn_mma(acc[2 * j], a, b[0], b[1], T());\n"
    "        fc_attn_mma(acc[2 * j + 1], a, b[2], b[3], T());\n"
    "      }\n"
    "    }\n"
    "    __syncthreads(); /* every warp is done with V(n0) before V(n0 + 64) lands */\n"
    "  }\n"
    "  fc_attn_store_o<C>(o + oo, acc, l, row0, lane);\n"
    "}\n"
    "\n"
    "/*\n"
    " * The general kernel, for f32 and f64 and for head dims the tensor-core\n"
    " * kernel does not take: a warp per query row, the head dims spread over the\n"
    " * lanes, keys staged in shared memory KT at a time, online softmax in the\n"
    " * compute type CT (f32, or f64 for f64).\n"
    " */\n"
    "template <class C>\n"
    "__device__ __forceinline__ void fc_attn_rows(const typename C::T *__restrict__ q, const typename C::T *__restrict__ k,\n"
    "                                             const typename C::T *__restrict__ v, const typename C::M *__restrict__ mask,\n"
    "                                             typename C::T *__restrict__ o) {\n"
    "  typedef typename C::CT CT;\n"
    "  constexpr int W = 8, NT = 256, KT = C::KT, D = C::D, DV = C::DV;\n"
    "  constexpr int DL = D > 0 ? (D + 31) / 32 : 1, DVL = DV > 0 ? (DV + 31) / 32 : 1;\n"
    "  constexpr int DD = D > 0 ? D : 1, DVD = DV > 0 ? DV : 1; /* divisors that are never 0 */\n"
    "  __shared__ CT sk[KT * DD];\n"
    "  __shared__ CT sv[KT * DVD];\n"
    "  const CT ninf = -(CT)__int_as_float(0x7f800000);\n"
    "  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;\n"
    "  constexpr int NQT = (C::SQ + W - 1) / W;\n"
    "  const long long bid = blockIdx.x;\n"
    "  const int r0 = (NQT - 1 - (int)(bid / C::NB)) * W, row = r0 + warp;\n"
    "  long long qo, ko, vo, mo, oo;\n"
    "  C::offsets(bid % C::NB, qo, ko, vo, mo, oo);\n"
    "  const bool live = row < C::SQ;\n"
    "  CT qr[DL], acc[DVL];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < DL; i++) {\n"
    "    const int d = lane + 32 * i;\n"
    "    qr[i] = live && d < D ? (CT)fc_attn_f(q[qo + row * C::QS + d * C::QD]) : (CT)0;\n"
    "  }\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < DVL; i++) acc[i] = 0;\n"
    "  CT m = ninf, l = 0;\n"
    "  const int kend = C::CAUSAL ? min(C::SK, r0 + W) : C::SK;\n"
    "  const int mine = C::CAUSAL ? min(C::SK, row + 1) : C::SK;\n"
    "  for (int n0 = 0; n0 < kend; n0 += KT) {\n"
    "    __syncthreads();\n"
    "    for (int c = tid; c < KT * D; c += NT) {\n"
    "      const int key = n0 + c / DD, d = c % DD;\n"
    "      sk[c] = key < C::SK ? (CT)fc_attn_f(k[ko + key * C::KS + d * C::KD]) : (CT)0;\n"
    "    }\n"
    "    for (int c = tid; c < KT * DV; c += NT) {\n"
    "      const int key = n0 + c / DVD, d = c % DVD;\n"
    "      sv[c] = key < C::SK ? (CT)fc_attn_f(v[vo + key * C::VS + d * C::VD]) : (CT)0;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (!live) continue; /* the whole warp: its shuffles stay together */\n"
    "    const int nk = min(KT, mine - n0);\n"
    "    for (int j = 0; j < nk; j++) {\n"
    "      CT part = 0;\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < DL; i++) {\n"
    "        const int d = lane + 32 * i;\n"
    "        if (d < D) part += qr[i] * sk[j * DD + d];\n"
    "      }\n"
    "#pragma unroll\n"
    "      for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);\n"
    "      CT x = part * (CT)C::SCALE;\n"
    "      if constexpr (C::MASK != 0) {\n"
    "        const CT mv = (CT)fc_attn_f(mask[mo + row * C::MQ + (n0 + j) * C::MK]);\n"
    "        if constexpr (C::MASK == 1) x = mv != 0 ? x : ninf;\n"
    "        else x += mv;\n"
    "      }\n"
    "      const CT mn = (x > m || x != x) ? x : m; /* max that keeps NaN, as the reference */\n"
    "      if (mn == ninf) continue;                /* every key dropped so far */\n"
    "      const CT alpha = fc_attn_exp(m - mn), p = fc_attn_exp(x - mn);\n"
    "      l = l * alpha + p;\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < DVL; i++) {\n"
    "        const int d = lane + 32 * i;\n"
    "        if (d < DV) acc[i] = acc[i] * alpha + p * sv[j * DVD + d];\n"
    "      }\n"
    "      m = mn;\n"
    "    }\n"
    "  }\n"
    "  if (!live) return;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < DVL; i++) {\n"
    "    const int d = lane + 32 * i;\n"
    "    if (d < DV) fc_attn_st(o + oo + row * C::OS + d * C::OD, acc[i] / l); /* no key: 0 / 0 = NaN */\n"
    "  }\n"
    "}\n"
    "#endif\n";
/* END GENERATED: templates_src */

/* BEGIN GENERATED: wgmma_src */
static const char wgmma_src[] =
    "/* fusec attention: the Hopper kernel (FlashAttention-3 structure; wgmma,\n"
    " * mbarriers, setmaxnreg: sm_90a). Compiled only where the translation unit\n"
    " * targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the codegen emits it only for\n"
    " * such units (docs/ATTENTION.md). */\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(FC_ATTN_FA3)\n"
    "#define FC_ATTN_FA3\n"
    "/* Switches for experiments (NVRTC -D options; the defaults are what the\n"
    " * codegen relies on, measured in docs/ATTENTION.md):\n"
    " *  - PINGPONG: two consumer warpgroups take turns issuing their products,\n"
    " *    so the softmax of one overlaps the tensor-core work of the other;\n"
    " *  - NOINC: the producer's 16-byte copies arrive on the \"full\" mbarriers by\n"
    " *    themselves (cp.async.mbarrier.arrive.noinc) instead of the producer\n"
    " *    waiting for them, fencing and arriving; the consumers then fence the\n"
    " *    proxies (fence.proxy.async) after their wait, before wgmma reads;\n"
    " *  - STAGES: K/V stages other than the config's (the launch must bring the\n"
    " *    shared memory);\n"
    " *  - FOLD: the softmax's scale in the exponent's FFMA (exp2(c s - c max))\n"
    " *    instead of a multiply per score before the max;\n"
    " *  - EDGE: the causal and last-key masking only in the tiles that need it,\n"
    " *    behind a branch, instead of predicated in every tile;\n"
    " *  - DESC: the wgmma descriptors of a tile from one computed half plus a\n"
    " *    constant per k16 step, instead of each built from its address;\n"
    " *  - RCP: the result as acc * (1 / l), one division per row;\n"
    " *  - QEARLY: the next work tile's Q requested once this tile's last S has\n"
    " *    read Q, instead of at the next tile's start;\n"
    " *  - DIAG_NOLOAD, DIAG_NOSOFT: timing only, wrong results: the producer\n"
    " *    copies the first ST tiles only; no masking, softmax or rescaling. */\n"
    "#ifndef FC_ATTN_PINGPONG\n"
    "#define FC_ATTN_PINGPONG 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_NOINC\n"
    "#define FC_ATTN_NOINC 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_DIAG_NOLOAD\n"
    "#define FC_ATTN_DIAG_NOLOAD 0\n"
    "#endif\n"
    "#ifndef FC_ATTN_DIAG_NOSOFT\n"
    "#define FC_ATTN_DIAG_NOSOFT 0\n"
    "#endif\n"
    "#ifndef FC_ATTN_FOLD\n"
    "#define FC_ATTN_FOLD 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_EDGE\n"
    "#define FC_ATTN_EDGE 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_DESC\n"
    "#define FC_ATTN_DESC 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_RCP\n"
    "#define FC_ATTN_RCP 1\n"
    "#endif\n"
    "#ifndef FC_ATTN_QEARLY\n"
    "#define FC_ATTN_QEARLY 1\n"
    "#endif\n"
    "extern __shared__ __align__(1024) unsigned char fc_attn_dsmem[];\n"
    "/* The wgmma fences, commits, waits and descriptors: fc_wg_* of\n"
    " * codegen/cuda/wgmma.cuh.inc, emitted before this. */\n"
    "/* Registers the asynchronous products read or write stay where they are:\n"
    " * the compiler may not move their uses across the waits (pin after a wait)\n"
    " * nor reuse an operand's registers while a product may still read them. */\n"
    "template <int N> __device__ __forceinline__ void fc_attn_pin(float (&d)[N][4]) {\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < N; j++)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 4; e++) asm volatile(\"\" : \"+f\"(d[j][e])::\"memory\");\n"
    "}\n"
    "template <int N> __device__ __forceinline__ void fc_attn_pin(unsigned (&d)[N][4]) {\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < N; j++)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 4; e++) asm volatile(\"\" : \"+r\"(d[j][e])::\"memory\");\n"
    "}\n"
    "/* An arrival on the mbarrier when all of this thread's earlier cp.async\n"
    " * copies have landed (counted in the barrier's expected arrivals). */\n"
    "__device__ __forceinline__ void fc_attn_cp_arrive(unsigned a) {\n"
    "  asm volatile(\"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n\" ::\"r\"(a) : \"memory\");\n"
    "}\n"
    "/* Rows [r0, r0 + R) of a tile through TMA, by one thread: NP / 64 boxes of\n"
    " * 64 columns x R rows, box p into the swizzled panel p at dst (R * 128 bytes\n"
    " * a panel, 1024-aligned: fc_attn_swizzled's layout), all counted on bar,\n"
    " * whose one arrival this is. bc: the batch coordinates (dims 2 .. RK - 1). */\n"
    "template <int RK, int R, int NP>\n"
    "__device__ __forceinline__ void fc_attn_tile_tma(unsigned dst, const fc_wg_tmap *m, unsigned bar, int r0, const int (&bc)[5]) {\n"
    "  int c[5] = {0, r0, bc[2], bc[3], bc[4]};\n"
    "  fc_wg_mbar_expect(bar, R * NP * 2);\n"
    "#pragma unroll\n"
    "  for (int p = 0; p < NP / 64; p++) {\n"
    "    c[0] = 64 * p;\n"
    "    fc_wg_tma<RK>(dst + p * R * 128, m, bar, c);\n"
    "  }\n"
    "}\n"
    "/* Named barriers 1..15 (0 is __syncthreads). */\n"
    "__device__ __forceinline__ void fc_attn_bar_sync(int id, int n) { asm volatile(\"bar.sync %0, %1;\\n\" ::\"r\"(id), \"r\"(n) : \"memory\"); }\n"
    "__device__ __forceinline__ void fc_attn_bar_arrive(int id, int n) { asm volatile(\"bar.arrive %0, %1;\\n\" ::\"r\"(id), \"r\"(n) : \"memory\"); }\n"
    "/* c (64 x N per warpgroup, f32) += a * b: fc_attn_wgss, a and b by\n"
    " * descriptors, both K-major; fc_attn_wgrs, a from registers (mma.m16n8k16 A\n"
    " * fragments per warp), b N-major. Specializations written per kernel. */\n"
    "template <int N> struct fc_attn_wgss;\n"
    "template <int N> struct fc_attn_wgrs;\n"
    "\n"
    "/* Rows [r0, r0 + R) of an [S, N] matrix (row stride RS, column stride CS)\n"
    " * into shared memory as wgmma's 128-byte-swizzled layout: panels of 64\n"
    " * columns, a panel R rows of 128 bytes (R * 64 elements), the 16-byte chunk\n"
    " * c of row r stored at chunk c ^ (r % 8). Both operand layouts are this one:\n"
    " * K-major for Q and K (head dim contiguous), N-major for V (value dim\n"
    " * contiguous). Zeros past row S and column N. VEC: 16-byte asynchronous\n"
    " * copies (fc_attn_tile's condition); else element by element in the order of\n"
    " * the memory. */\n"
    "template <int R> struct fc_attn_swizzled {\n"
    "  template <typename T> static __device__ __forceinline__ T *at(T *sm, int r, int col) {\n"
    "    return sm + (col >> 6) * (R * 64) + r * 64 + ((((col >> 3) & 7) ^ (r & 7)) << 3) + (col & 7);\n"
    "  }\n"
    "};\n"
    "template <typename T, int R, int NP, int N, int S, long long RS, long long CS, bool VEC, int NT>\n"
    "__device__ __forceinline__ void fc_attn_tile_sw(T *sm, const T *__restrict__ g, int r0, int tid) {\n"
    "  static_assert(R % 8 == 0 && NP % 64 == 0, \"whole swizzle atoms\");\n"
    "  fc_attn_load<T, R, NP, N, S, RS, CS, VEC, NT, fc_attn_swizzled<R>, 4>(sm, g, r0, tid);\n"
    "}\n"
    "\n"
    "/* fc_attn_fa3's masking: what FC_ATTN_MASK does, with two differences.\n"
    " * The scale stays out of the scores (the exponent's FFMA applies it:\n"
    " * fc_attn_softmax_f) unless PRE: an added mask joins scaled scores, and\n"
    " * a scale that is not positive would turn the raw scores' max into the\n"
    " * scaled scores' min. And the last-key and causal checks run only in\n"
    " * tiles that reach past the last key or cross the diagonal somewhere in\n"
    " * the warpgroup's 64 rows [mw, mw + 64) (EDGE; a branch the whole\n"
    " * warpgroup takes alike), where fc_attn_tc's macro predicates every score\n"
    " * of every tile. */\n"
    "template <class C, int BN, bool PRE>\n"
    "__device__ __forceinline__ void fc_attn_mask_fa3(float (&s)[BN / 8][4], const typename C::M *__restrict__ mask, long long mo,\n"
    "                                                 int n0, int mw, int lane, int row0) {\n"
    "  const float ninf = -__int_as_float(0x7f800000);\n"
    "  if constexpr (PRE || C::MASK != 0) {\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < BN / 8; j++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) {\n"
    "        const int row = row0 + (e >> 1) * 8, col = n0 + j * 8 + 2 * (lane & 3) + (e & 1);\n"
    "        float x = PRE ? s[j][e] * C::SCALE_LOG2 : s[j][e];\n"
    "        if constexpr (C::MASK != 0) {\n"
    "          if (row < C::SQ && col < C::SK) {\n"
    "            const float mv = fc_attn_f(mask[mo + row * C::MQ + col * C::MK]);\n"
    "            if constexpr (C::MASK == 1) x = mv != 0.f ? x : ninf;\n"
    "            else x += mv * 1.4426950408889634f;\n"
    "          }\n"
    "        }\n"
    "        s[j][e] = x;\n"
    "      }\n"
    "  }\n"
    "  const bool edge = n0 + BN > C::SK || (C::CAUSAL && n0 + BN - 1 > mw);\n"
    "  if (!FC_ATTN_EDGE || edge) {\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < BN / 8; j++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) {\n"
    "        const int row = row0 + (e >> 1) * 8, col = n0 + j * 8 + 2 * (lane & 3) + (e & 1);\n"
    "        if ((FC_ATTN_EDGE || edge) && (col >= C::SK || (C::CAUSAL && col > row))) s[j][e] = ninf;\n"
    "      }\n"
    "  }\n"
    "}\n"
    "\n"
    "/* The online softmax of fc_attn_fa3 over a tile of masked scores s, whose\n"
    " * base-2 exponent is sc * s (sc: the scale times log2 e, or 1 where the\n"
    " * mask step scaled them, PRE): the running max mx (of s, unscaled) and\n"
    " * sum l, s to its exponentials exp2(sc s - sc max), one FFMA and the MUFU\n"
    " * per score; alpha, the factor for what was accumulated so far, is\n"
    " * returned (the accumulators are still being written by P V). Scaling\n"
    " * commutes with the max for sc > 0, so the exponents are those of the\n"
    " * scaled scores up to f32 rounding. */\n"
    "template <int NS>\n"
    "__device__ __forceinline__ void fc_attn_softmax_f(float (&s)[NS][4], float (&mx)[2], float (&l)[2], float (&alpha)[2], float sc) {\n"
    "  const float ninf = -__int_as_float(0x7f800000);\n"
    "#pragma unroll\n"
    "  for (int r = 0; r < 2; r++) {\n"
    "    float m = mx[r];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < NS; j++) m = fmaxf(m, fmaxf(s[j][2 * r], s[j][2 * r + 1]));\n"
    "    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));\n"
    "    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));\n"
    "    const float base = m == ninf ? 0.f : m * sc; /* every key dropped so far: keep exp2 at 0, not NaN */\n"
    "    alpha[r] = fc_attn_exp2(mx[r] * sc - base);\n"
    "    mx[r] = m;\n"
    "    float sum = 0.f;\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < NS; j++) {\n"
    "      s[j][2 * r] = fc_attn_exp2(fmaf(s[j][2 * r], sc, -base));\n"
    "      s[j][2 * r + 1] = fc_attn_exp2(fmaf(s[j][2 * r + 1], sc, -base));\n"
    "      sum += s[j][2 * r] + s[j][2 * r + 1]; /* this thread's columns; the quad sums at the end */\n"
    "    }\n"
    "    l[r] = l[r] * alpha[r] + sum;\n"
    "  }\n"
    "}\n"
    "\n"
    "/*\n"
    " * The Hopper kernel (FlashAttention-3's structure). A block of NC + 1\n"
    " * warpgroups owns 64 NC query rows at a time (C::NC: 2, or 3 for head dims\n"
    " * of 64):\n"
    " *\n"
    " *  - warpgroup 0, the producer (setmaxnreg down to 56 or 32 registers),\n"
    " *    copies K and V tiles of BN keys into ST stages of 128-byte-swizzled\n"
    " *    shared memory and signals each tile on its \"full\" mbarrier; it\n"
    " *    refills a stage once every consumer warp has arrived on its \"empty\"\n"
    " *    mbarrier (4 NC arrivals). An operand with a tensor map (C::KTMA,\n"
    " *    C::VTMA) is copied by TMA, issued by thread 0 alone (one arrival\n"
    " *    with the tile's bytes expected); else by all 128 threads with\n"
    " *    16-byte cp.async (128 arrivals a phase, made by the copies\n"
    " *    themselves under NOINC) or element by element;\n"
    " *  - warpgroups 1..NC, the consumers (setmaxnreg up to 224 or 160), own 64\n"
    " *    query rows each (Q in swizzled shared memory). Per key tile j they\n"
    " *    issue S(j) = Q K(j)^T (wgmma, both operands from shared memory) and\n"
    " *    O += P(j-1) V(j-1) (P from registers) together, wait for S(j) only,\n"
    " *    mask it and run the online softmax while P V is still running, then\n"
    " *    wait for P V, rescale O and pack P(j): the intra-warpgroup overlap.\n"
    " *    With two consumers and PINGPONG they take turns issuing (named\n"
    " *    barriers 5 and 6), so one's softmax runs under the other's products.\n"
    " *\n"
    " * Persistent: the block walks work tiles (64 NC query rows of one batch\n"
    " * element), round r taking tile r G + b, or r G + G - 1 - b in odd rounds\n"
    " * (G blocks, this one b). Tiles are numbered in sections of batch elements\n"
    " * whose K and V fit in L2 together, longest first inside a section (the\n"
    " * last query tiles, under a causal mask), and alternating the direction\n"
    " * evens out the work each block gets. The stage ring runs on across tiles, so the\n"
    " * producer loads the next tile's K and V while the consumers finish this\n"
    " * one; a consumer's Q of the next tile is requested by TMA as soon as this\n"
    " * tile's last S has read Q (QEARLY), and the turns of ping-pong go on across\n"
    " * tiles. A grid of one block per tile is the one-tile-per-block launch.\n"
    " *\n"
    " * No block-wide barrier after the start. Masking, the softmax arithmetic,\n"
    " * the P packing and the store follow fc_attn_tc's (the accumulators of\n"
    " * m64nNk16 hold per warp what N / 8 mma.m16n8k16 accumulators hold).\n"
    " *\n"
    " * Q is a shared-memory operand, not registers: with both products taking\n"
    " * A from registers (Q for S, P for P V) and both m64n64k16 (head dims of\n"
    " * 64), ptxas 13.0 gave P the registers of Q, which the next tile still\n"
    " * needs (docs/ATTENTION.md: the old kernel's wrong results at Dv = 64).\n"
    " */\n"
    "template <class C>\n"
    "__device__ __forceinline__ void fc_attn_fa3(const typename C::T *__restrict__ q, const typename C::T *__restrict__ k,\n"
    "                                            const typename C::T *__restrict__ v, const typename C::M *__restrict__ mask,\n"
    "                                            typename C::T *__restrict__ o, const fc_wg_tmap *tq, const fc_wg_tmap *tk,\n"
    "                                            const fc_wg_tmap *tv) {\n"
    "  typedef typename C::T T;\n"
    "#ifdef FC_ATTN_STAGES /* an experiment's override: the launch must bring the shared memory */\n"
    "  constexpr int ST = FC_ATTN_STAGES;\n"
    "#else\n"
    "  constexpr int ST = C::ST;\n"
    "#endif\n"
    "  constexpr int NC = C::NC, BM = 64 * NC, BN = C::BN, DP = C::DP, DVP = C::DVP;\n"
    "  static_assert(NC == 2 || NC == 3, \"two or three consumer warpgroups\");\n"
    "  constexpr bool PP = FC_ATTN_PINGPONG && NC == 2; /* ping-pong: two consumers */\n"
    "  static_assert(BN % 16 == 0 && BN <= 256, \"key tiles of whole k16 steps\");\n"
    "  static_assert(DP % 64 == 0 && DVP % 64 == 0 && DP <= 256 && DVP <= 256, \"head dims of whole 64-column panels\");\n"
    "  /* The scores' scale: in the exponent's FFMA (fc_attn_softmax_f), or\n"
    "   * applied by the mask step (PRE; fc_attn_mask_fa3 says when). */\n"
    "  constexpr bool PRE = !FC_ATTN_FOLD || C::MASK == 2 || !(C::SCALE_LOG2 > 0.f);\n"
    "  constexpr float SC = PRE ? 1.f : C::SCALE_LOG2;\n"
    "  /* Shared memory (bytes from a 1024-aligned base): Q of each consumer,\n"
    "   * then ST stages of K, ST of V, then the mbarriers (4 ST + NC). */\n"
    "  constexpr unsigned QB = 64 * DP * 2, KB = BN * DP * 2, VB = BN * DVP * 2;\n"
    "  constexpr unsigned OK0 = NC * QB, OV0 = OK0 + ST * KB, OBAR = OV0 + ST * VB;\n"
    "  const unsigned raw = fc_attn_saddr(fc_attn_dsmem), sbase = (raw + 1023u) & ~1023u;\n"
    "  unsigned char *const gbase = fc_attn_dsmem + (sbase - raw);\n"
    "  /* mbarriers: full K, full V, empty K, empty V, ST each; then Q's, one\n"
    "   * per consumer (used with C::QTMA). */\n"
    "  const unsigned bfk = sbase + OBAR, bfv = bfk + 8 * ST, bek = bfv + 8 * ST, bev = bek + 8 * ST, bq = bev + 8 * ST;\n"
    "  /* K and V both by TMA: nothing the consumers read was written by the\n"
    "   * generic proxy, so they need no proxy fence after their waits. */\n"
    "  constexpr bool CPKV = !(C::KTMA && C::VTMA);\n"
    "\n"
    "  /* The warpgroup, through a shuffle so that the compiler knows it is the\n"
    "   * same across the warp (wgmma in a branch it thinks divergent is serialized). */\n"
    "  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);\n"
    "  /* Work tiles (see above): tile t is query rows [m0, m0 + BM) of batch\n"
    "   * element tile_b(t). The batch elements go in sections of C::HG (a\n"
    "   * divisor of NB), few enough that their K and V stay in L2 together\n"
    "   * while the blocks walk the section's tiles: its tiles longest first\n"
    "   * (m0 from the last query tile down), its batch elements fastest. Under\n"
    "   * a causal mask a tile's keys end at its last row. */\n"
    "  constexpr int NQT = (C::SQ + BM - 1) / BM;\n"
    "  constexpr long long NTILES = (long long)NQT * C::NB, SECT = (long long)NQT * C::HG;\n"
    "  static_assert(C::NB % C::HG == 0, \"sections of whole batch elements\");\n"
    "  const long long nblk = gridDim.x, blk = blockIdx.x;\n"
    "  auto tile_at = [&](long long r) -> long long { return r * nblk + ((r & 1) ? nblk - 1 - blk : blk); };\n"
    "  auto tile_m0 = [&](long long t) -> int { return (NQT - 1 - (int)(t % SECT / C::HG)) * BM; };\n"
    "  auto tile_b = [&](long long t) -> long long { return t / SECT * C::HG + t % C::HG; };\n"
    "  auto tile_nt = [&](int m0) -> int {\n"
    "    const int kend = C::CAUSAL ? min(C::SK, m0 + BM) : C::SK; /* causal: later keys are never seen */\n"
    "    return (kend + BN - 1) / BN;\n"
    "  };\n"
    "\n"
    "  if (tid == 0) {\n"
    "#pragma unroll\n"
    "    for (int s = 0; s < ST; s++) {\n"
    "      fc_wg_mbar_init(bfk + 8 * s, C::KTMA ? 1 : 128);\n"
    "      fc_wg_mbar_init(bfv + 8 * s, C::VTMA ? 1 : 128);\n"
    "      fc_wg_mbar_init(bek + 8 * s, 4 * NC);\n"
    "      fc_wg_mbar_init(bev + 8 * s, 4 * NC);\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < NC; c++) fc_wg_mbar_init(bq + 8 * c, 1);\n"
    "    /* The initialized barriers visible to the copy engine's completions. */\n"
    "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n"
    "  }\n"
    "  __syncthreads();\n"
    "\n"
    "  if (wg == 0) {\n"
    "    /* The producer. */\n"
    "    asm volatile(\"setmaxnreg.dec.sync.aligned.u32 %0;\\n\" ::\"n\"(NC == 2 ? 56 : 32));\n"
    "    /* K and V both by TMA: thread 0 does all the producer's work. */\n"
    "    if (!CPKV && tid != 0) return;\n"
    "    /* Which copies arrive on their own (TMA's one arrival, or cp.async's\n"
    "     * noinc arrivals), and which the producer waits for, fences and\n"
    "     * signals itself (cp.async without NOINC, element-wise stores). */\n"
    "    constexpr bool KSELF = C::KTMA || (FC_ATTN_NOINC && C::KVEC), VSELF = C::VTMA || (FC_ATTN_NOINC && C::VVEC);\n"
    "    int g = 0; /* K/V tiles loaded so far: the stage ring runs on across work tiles */\n"
    "    for (long long r = 0;; r++) {\n"
    "      const long long t = tile_at(r);\n"
    "      if (t >= NTILES) break;\n"
    "      const int nt = tile_nt(tile_m0(t));\n"
    "      long long qo, ko, vo, mo, oo;\n"
    "      C::offsets(tile_b(t), qo, ko, vo, mo, oo);\n"
    "      int cq[5] = {0, 0, 0, 0, 0}, ck[5] = {0, 0, 0, 0, 0}, cv[5] = {0, 0, 0, 0, 0}; /* tensor-map batch coordinates */\n"
    "      C::tcoords(tile_b(t), cq, ck, cv);\n"
    "      for (int j = 0; j < nt; j++, g++) {\n"
    "        const int s = g % ST;\n"
    "        const unsigned ph = ((g / ST) & 1) ^ 1;\n"
    "        const bool load = !FC_ATTN_DIAG_NOLOAD || g < ST;\n"
    "        if (g >= ST) fc_wg_mbar_wait(bek + 8 * s, ph);\n"
    "        if constexpr (C::KTMA) {\n"
    "          if (tid == 0) {\n"
    "            if (load) fc_attn_tile_tma<C::KR, BN, DP>(sbase + OK0 + s * KB, tk, bfk + 8 * s, j * BN, ck);\n"
    "            else fc_wg_mbar_arrive(bfk + 8 * s);\n"
    "          }\n"
    "        } else {\n"
    "          if (load)\n"
    "            fc_attn_tile_sw<T, BN, DP, C::D, C::SK, C::KS, C::KD, C::KVEC, 128>((T *)(gbase + OK0 + s * KB), k + ko, j * BN, tid);\n"
    "          if (KSELF) fc_attn_cp_arrive(bfk + 8 * s);\n"
    "          else fc_attn_cp_commit();\n"
    "        }\n"
    "        if (g >= ST) fc_wg_mbar_wait(bev + 8 * s, ph);\n"
    "        if constexpr (C::VTMA) {\n"
    "          if (tid == 0) {\n"
    "            if (load) fc_attn_tile_tma<C::VR, BN, DVP>(sbase + OV0 + s * VB, tv, bfv + 8 * s, j * BN, cv);\n"
    "            else fc_wg_mbar_arrive(bfv + 8 * s);\n"
    "          }\n"
    "        } else {\n"
    "          if (load)\n"
    "            fc_attn_tile_sw<T, BN, DVP, C::DV, C::SK, C::VS, C::VD, C::VVEC, 128>((T *)(gbase + OV0 + s * VB), v + vo, j * BN, tid);\n"
    "          if (VSELF) fc_attn_cp_arrive(bfv + 8 * s);\n"
    "          else fc_attn_cp_commit();\n"
    "        }\n"
    "        if (!KSELF) {\n"
    "          if (VSELF) fc_attn_cp_wait_n<0>();\n"
    "          else fc_attn_cp_wait_n<1>();\n"
    "          fc_wg_fence_proxy();\n"
    "          fc_wg_mbar_arrive(bfk + 8 * s);\n"
    "        }\n"
    "        if (!VSELF) {\n"
    "          fc_attn_cp_wait_n<0>();\n"
    "          fc_wg_fence_proxy();\n"
    "          fc_wg_mbar_arrive(bfv + 8 * s);\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "    fc_attn_cp_wait_n<0>();\n"
    "    return;\n"
    "  }\n"
    "\n"
    "  /* A consumer: warpgroup cw of the NC, rows [m0 + 64 cw, + 64) of each tile. */\n"
    "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 %0;\\n\" ::\"n\"(NC == 2 ? 224 : 160));\n"
    "  const float ninf = -__int_as_float(0x7f800000);\n"
    "  const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5, lane = tid & 31;\n"
    "  /* Descriptors: Q and K K-major (SBO: 8 rows of 128 bytes; a k16 step 32\n"
    "   * bytes inside the swizzle atom, a panel further every 4 steps); V N-major\n"
    "   * (LBO: the next 64 value dims, one panel; SBO: the next 8 keys). */\n"
    "  const unsigned qa = sbase + cw * QB, ka = sbase + OK0, va = sbase + OV0;\n"
    "  /* The descriptor of base + off (off a constant once unrolled): with DESC,\n"
    "   * base's half with the address and LBO is computed once per tile and the\n"
    "   * step added to it (shared addresses stay below 2^18, so the 14-bit\n"
    "   * address field never carries), the other half a constant. */\n"
    "  auto desc_at = [&](unsigned base, unsigned off, unsigned lbo) -> unsigned long long {\n"
    "#if FC_ATTN_DESC\n"
    "    const unsigned lo = (((base & 0x3ffffu) >> 4) | ((lbo >> 4) & 0x3fffu) << 16) + (off >> 4);\n"
    "    unsigned long long d;\n"
    "    asm(\"mov.b64 %0, {%1, %2};\" : \"=l\"(d) : \"r\"(lo), \"r\"((1024u >> 4) | 1u << 30));\n"
    "    return d;\n"
    "#else\n"
    "    return fc_wg_desc(base + off, lbo, 1024);\n"
    "#endif\n"
    "  };\n"
    "  /* Q of work tile t into this warpgroup's buffer by TMA (thread 0 issues;\n"
    "   * the mbarrier's phase flips once a tile). */\n"
    "  auto load_q = [&](long long t) {\n"
    "    if (ctid == 0) {\n"
    "      int cq[5] = {0, 0, 0, 0, 0}, ck[5] = {0, 0, 0, 0, 0}, cv[5] = {0, 0, 0, 0, 0};\n"
    "      C::tcoords(tile_b(t), cq, ck, cv);\n"
    "      fc_attn_tile_tma<C::QR, 64, DP>(qa, tq, bq + 8 * cw, tile_m0(t) + 64 * cw, cq);\n"
    "    }\n"
    "  };\n"
    "\n"
    "  float acc[DVP / 8][4];\n"
    "  float mx[2], l[2], alpha[2];\n"
    "  float s[BN / 8][4];\n"
    "  fc_attn_zero(s);\n"
    "  unsigned p[BN / 16][4];\n"
    "\n"
    "  /* Phase j of a tile issues S(j) = Q K(j)^T (j < nt) and O += P(j-1) V(j-1)\n"
    "   * (j > 0); the first and last phases are peeled off, so the products are\n"
    "   * never issued under a branch. gi: the K/V tile's place in the ring. */\n"
    "  auto issue_s = [&](int gi) {\n"
    "    const unsigned kb = ka + (gi % ST) * KB;\n"
    "#pragma unroll\n"
    "    for (int kc = 0; kc < DP / 16; kc++)\n"
    "      fc_attn_wgss<BN>::run(s, desc_at(qa, (kc >> 2) * (64 * 128) + (kc & 3) * 32, 16),\n"
    "                            desc_at(kb, (kc >> 2) * (BN * 128) + (kc & 3) * 32, 16), kc > 0, T());\n"
    "    fc_wg_commit();\n"
    "  };\n"
    "  auto issue_pv = [&](int gi) {\n"
    "    const unsigned vb = va + (gi % ST) * VB;\n"
    "#pragma unroll\n"
    "    for (int kc = 0; kc < BN / 16; kc++) fc_attn_wgrs<DVP>::run(acc, p[kc], desc_at(vb, kc * (16 * 128), BN * 128), T());\n"
    "    fc_wg_commit();\n"
    "  };\n"
    "  auto pv_done = [&](int gi) {\n"
    "    fc_attn_pin(acc);\n"
    "    fc_attn_pin(p);\n"
    "    if (lane == 0) fc_wg_mbar_arrive(bev + 8 * (gi % ST)); /* this warp is done with V */\n"
    "  };\n"
    "  auto pack = [&]() {\n"
    "#pragma unroll\n"
    "    for (int kc = 0; kc < BN / 16; kc++) fc_attn_pack_p<T>(p[kc], s, kc);\n"
    "  };\n"
    "\n"
    "  if constexpr (C::QTMA) {\n"
    "    if (tile_at(0) < NTILES) load_q(tile_at(0));\n"
    "  }\n"
    "  /* Every tile has a key tile where SK > 0; consumer 0 issues first. */\n"
    "  if (PP && cw == 1 && C::SK > 0 && tile_at(0) < NTILES) fc_attn_bar_arrive(5, 256);\n"
    "  int g = 0;          /* K/V tiles consumed so far (the producer's count) */\n"
    "  unsigned qph = 0;   /* the phase of this warpgroup's Q mbarrier */\n"
    "  for (long long r = 0;; r++) {\n"
    "    const long long t = tile_at(r), tn = tile_at(r + 1);\n"
    "    if (t >= NTILES) break;\n"
    "    const bool more = tn < NTILES; /* another tile follows */\n"
    "    const int m0 = tile_m0(t), mw = m0 + 64 * cw, nt = tile_nt(m0);\n"
    "    long long qo, ko, vo, mo, oo;\n"
    "    C::offsets(tile_b(t), qo, ko, vo, mo, oo);\n"
    "    const int row0 = mw + warp * 16 + (lane >> 2); /* this thread's rows: row0, row0 + 8 */\n"
    "    /* This tile's Q in shared memory. The next tile's Q, by TMA, once\n"
    "     * every warp of the warpgroup is past this tile's last S (next_q). */\n"
    "    if constexpr (C::QTMA) {\n"
    "      if (!FC_ATTN_QEARLY && r > 0) {\n"
    "        fc_attn_bar_sync(1 + cw, 128);\n"
    "        load_q(t);\n"
    "      }\n"
    "      fc_wg_mbar_wait(bq + 8 * cw, qph);\n"
    "      qph ^= 1;\n"
    "    } else {\n"
    "      if (r > 0) fc_attn_bar_sync(1 + cw, 128); /* every warp is done with the last tile's Q */\n"
    "      fc_attn_tile_sw<T, 64, DP, C::D, C::SQ, C::QS, C::QD, C::QVEC, 128>((T *)(gbase + cw * QB), q + qo, mw, ctid);\n"
    "      fc_attn_cp_wait();\n"
    "      fc_wg_fence_proxy();\n"
    "      fc_attn_bar_sync(1 + cw, 128); /* this warpgroup's Q is in shared memory */\n"
    "    }\n"
    "    auto next_q = [&]() {\n"
    "      if constexpr (C::QTMA && FC_ATTN_QEARLY) {\n"
    "        if (more) {\n"
    "          fc_attn_bar_sync(1 + cw, 128);\n"
    "          load_q(tn);\n"
    "        }\n"
    "      }\n"
    "    };\n"
    "    /* S(j) has landed: K(j) is free; mask, softmax (alpha for O). */\n"
    "    auto scores = [&](int gi, int j) {\n"
    "      fc_attn_pin(s);\n"
    "      if (lane == 0) fc_wg_mbar_arrive(bek + 8 * (gi % ST)); /* this warp is done with K */\n"
    "      if (!FC_ATTN_DIAG_NOSOFT) {\n"
    "        fc_attn_mask_fa3<C, BN, PRE>(s, mask, mo, j * BN, mw, lane, row0);\n"
    "        fc_attn_softmax_f(s, mx, l, alpha, SC);\n"
    "      } else {\n"
    "        alpha[0] = alpha[1] = 1.f;\n"
    "      }\n"
    "    };\n"
    "\n"
    "    fc_attn_zero(acc);\n"
    "    mx[0] = mx[1] = ninf;\n"
    "    l[0] = l[1] = 0.f;\n"
    "    if (nt > 0) {\n"
    "      fc_wg_mbar_wait(bfk + 8 * (g % ST), (g / ST) & 1);\n"
    "      if (FC_ATTN_NOINC && CPKV) fc_wg_fence_proxy();\n"
    "      if (PP) fc_attn_bar_sync(5 + cw, 256);\n"
    "      fc_attn_pin(s);\n"
    "      fc_wg_fence();\n"
    "      issue_s(g);\n"
    "      if (PP) fc_attn_bar_arrive(6 - cw, 256);\n"
    "      fc_wg_wait<0>();\n"
    "      if (nt == 1) next_q();\n"
    "      scores(g, 0);\n"
    "      pack();\n"
    "      for (int j = 1; j < nt; j++) {\n"
    "        const int gk = g + j, gv = gk - 1;\n"
    "        fc_wg_mbar_wait(bfk + 8 * (gk % ST), (gk / ST) & 1);\n"
    "        fc_wg_mbar_wait(bfv + 8 * (gv % ST), (gv / ST) & 1);\n"
    "        if (FC_ATTN_NOINC && CPKV) fc_wg_fence_proxy();\n"
    "        if (PP) fc_attn_bar_sync(5 + cw, 256);\n"
    "        fc_attn_pin(acc);\n"
    "        fc_attn_pin(s);\n"
    "        fc_attn_pin(p);\n"
    "        fc_wg_fence();\n"
    "        issue_s(gk);\n"
    "        issue_pv(gv);\n"
    "        if (PP) fc_attn_bar_arrive(6 - cw, 256);\n"
    "        fc_wg_wait<1>();\n"
    "        if (j == nt - 1) next_q();\n"
    "        scores(gk, j);\n"
    "        fc_wg_wait<0>();\n"
    "        pv_done(gv);\n"
    "#pragma unroll\n"
    "        for (int jj = 0; jj < (FC_ATTN_DIAG_NOSOFT ? 0 : DVP / 8); jj++) {\n"
    "          acc[jj][0] *= alpha[0];\n"
    "          acc[jj][1] *= alpha[0];\n"
    "          acc[jj][2] *= alpha[1];\n"
    "          acc[jj][3] *= alpha[1];\n"
    "        }\n"
    "        pack();\n"
    "      }\n"
    "      const int gv = g + nt - 1;\n"
    "      fc_wg_mbar_wait(bfv + 8 * (gv % ST), (gv / ST) & 1);\n"
    "      if (FC_ATTN_NOINC && CPKV) fc_wg_fence_proxy();\n"
    "      if (PP) fc_attn_bar_sync(5 + cw, 256);\n"
    "      fc_attn_pin(acc);\n"
    "      fc_attn_pin(p);\n"
    "      fc_wg_fence();\n"
    "      issue_pv(gv);\n"
    "      /* The other consumer's turn; consumer 1's last turn of all has none after it. */\n"
    "      if (PP && (cw == 0 || more)) fc_attn_bar_arrive(6 - cw, 256);\n"
    "      fc_wg_wait<0>();\n"
    "      pv_done(gv);\n"
    "      g += nt;\n"
    "    } else {\n"
    "      next_q(); /* no keys: this tile's Q is never read */\n"
    "    }\n"
    "    fc_attn_store_o<C, FC_ATTN_RCP>(o + oo, acc, l, row0, lane);\n"
    "  }\n"
    "}\n"
    "#endif\n";
/* END GENERATED: wgmma_src */

/* One wgmma m64nNk16 per input type, f32 accumulators, as the
 * specializations the Hopper template calls: fc_attn_wgss<N> (A and B by
 * descriptors, both K-major; the first product of a tile overwrites) and
 * fc_attn_wgrs<N> (A from registers, B N-major, accumulating). Written per
 * kernel, once per unit (#ifndef guard), since the operand list (N / 2
 * accumulators) depends on N. */
static void emit_wgop(fc_strbuf *s, int n, bool ss) {
    const char *form = ss ? "ss" : "rs";
    fc_strbuf_printf(s, "#if defined(FC_ATTN_FA3) && !defined(FC_ATTN_WG%s_%d)\n#define FC_ATTN_WG%s_%d\n", form, n, form, n);
    fc_strbuf_printf(s, "template <> struct fc_attn_wg%s<%d> {\n", form, n);
    static const char *const types[2][2] = {{"__nv_bfloat16", "bf16"}, {"__half", "f16"}};
    const int nd = n / 2;
    for (int t = 0; t < 2; t++) {
        if (ss)
            fc_strbuf_printf(s, "  static __device__ __forceinline__ void run(float (&d)[%d][4], unsigned long long a, unsigned long long b, int acc, %s) {\n",
                             n / 8, types[t][0]);
        else
            fc_strbuf_printf(s, "  static __device__ __forceinline__ void run(float (&d)[%d][4], const unsigned (&a)[4], unsigned long long b, %s) {\n",
                             n / 8, types[t][0]);
        /* The scale-d predicate: the operand after the descriptors (or the A registers and B's descriptor). */
        fc_strbuf_printf(s, "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n", nd + (ss ? 2 : 5));
        fc_strbuf_printf(s, "      \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", n, types[t][1], types[t][1]);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s%%%d", i ? ", " : "", i);
        if (ss) fc_strbuf_printf(s, "}, %%%d, %%%d, p, 1, 1, 0, 0;\\n}\\n\"\n      : ", nd, nd + 1);
        else fc_strbuf_printf(s, "}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, 1;\\n}\\n\"\n      : ", nd, nd + 1, nd + 2, nd + 3, nd + 4);
        for (int i = 0; i < nd; i++) fc_strbuf_printf(s, "%s\"+f\"(d[%d][%d])", i ? ", " : "", i / 4, i % 4);
        if (ss) fc_strbuf_printf(s, "\n      : \"l\"(a), \"l\"(b), \"r\"(acc));\n  }\n");
        else fc_strbuf_printf(s, "\n      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(1));\n  }\n");
    }
    fc_strbuf_printf(s, "};\n#endif\n");
}

/* ---- string builder -------------------------------------------------------- */

/* Source text is built with fc_strbuf (ir/strbuf.c). */

/* ---- reading the group ----------------------------------------------------- */

static const fc_node *attention_node(const fc_group *gr) {
    const fc_node *n = NULL;
    for (int i = 0; i < gr->nnodes; i++)
        if (gr->nodes[i]->op == FC_OP_ATTENTION) {
            if (n) return NULL; /* one per group */
            n = gr->nodes[i];
        }
    return n;
}

static int input_index(const fc_group *gr, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return i;
    return -1;
}

static bool is_group_input(const fc_value *v, void *arg) { return input_index(arg, v) >= 0; }

/* How the kernel reads one operand, as strides into a group input. */
typedef struct layout {
    int input;                  /* index in gr->inputs */
    int64_t offset;             /* elements */
    int64_t row, col;           /* the last two dims; 0 where a dim is 1 (broadcast) */
    int64_t batch[FC_MAX_RANK]; /* per batch dim of the result; 0 where broadcast */
} layout;

/* Fill L for operand x (rank may be below 2 for a mask) against nb batch
 * dims of the result. False (with why in err) if it cannot be read in place. */
static bool layout_of(const fc_group *gr, const fc_value *x, int nb, layout *L, char *err, size_t errn,
                      const char *what) {
    fc_strided_view view;
    memset(L, 0, sizeof *L);
    if (!fc_attention_view(x, is_group_input, (void *)gr, &view) || (L->input = input_index(gr, view.root)) < 0) {
        snprintf(err, errn, "%s is not a strided view of a group input (fusion must store it or its views)", what);
        return false;
    }
    int xr = x->rank;
    L->offset = view.offset;
    L->row = xr >= 2 && x->dims[xr - 2] != 1 ? view.stride[xr - 2] : 0;
    L->col = xr >= 1 && x->dims[xr - 1] != 1 ? view.stride[xr - 1] : 0;
    for (int b = 0; b < nb; b++) {
        int xd = b - (nb - (xr - 2)); /* batch dims align on the right */
        L->batch[b] = xd >= 0 && x->dims[xd] != 1 ? view.stride[xd] : 0;
    }
    return true;
}

/* May the kernel copy rows of n elements of L 16 bytes at a time (8 bf16)? */
static bool vec16(const layout *L, int64_t n, int nb) {
    if (L->col != 1 || n % 8 || L->row % 8 || L->offset % 8) return false;
    for (int b = 0; b < nb; b++)
        if (L->batch[b] % 8) return false;
    return true;
}

/* The output chain: every node but the attention must be a permute or a
 * reshape between its result and the group's one output. */
static bool output_layout(const fc_group *gr, const fc_node *n, int64_t *strides) {
    if (gr->noutputs != 1 || !fc_attention_output_strides(n->out[0], gr->outputs[0], strides)) return false;
    int chain = 0;
    for (const fc_value *v = gr->outputs[0]; v != n->out[0]; v = v->def->in[0]) chain++;
    return chain == gr->nnodes - 1;
}

static int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }

/* A tensor map for fc_attn_fa3's TMA loads, and how the kernel finds the
 * batch coordinates of its dims 2 .. rank - 1. */
typedef struct tma_plan {
    fc_tmap map;
    /* Map dim 2 + k covers the result's batch dims in the bit set
     * members[k] (one, or neighbours merged where their strides allow); its
     * coordinate is their index as one number, computed by the config's
     * tcoords(). */
    unsigned members[FC_TMAP_MAX_RANK - 2];
} tma_plan;

/*
 * Whether TMA can load operand L (rows of n elements, rows of them, in
 * boxes of box_rows rows by 64 columns) for a result o of nb batch dims,
 * and the map if so. TMA's rules: the head dim contiguous; the row and batch
 * strides multiples of 16 bytes (below 2^40); the view's offset a multiple of
 * 16 bytes (the base pointer's alignment is checked at every launch); at
 * most 5 dims once broadcast batch dims (stride 0: every batch reads the
 * same rows, so the dim is left out of the map) are dropped and contiguous
 * neighbours merged; 16-bit elements (fa3 only runs bf16 and f16). Otherwise
 * the kernel keeps its cp.async loads for this operand.
 */
static bool tma_of(const layout *L, const fc_value *o, int nb, int64_t rows, int64_t n, int box_rows, fc_dtype t,
                   tma_plan *tp) {
    const int64_t es = 2, lim = (int64_t)1 << 40;
    memset(tp, 0, sizeof *tp);
    if ((t != FC_BF16 && t != FC_F16) || L->col != 1 || L->offset < 0 || L->row <= 0 || L->row >= lim / es || (L->row * es) % 16 ||
        (L->offset * es) % 16 || n < 1 || rows < 1 || rows > INT_MAX || n > INT_MAX)
        return false;
    fc_tmap *m = &tp->map;
    m->arg = L->input;
    m->offset = L->offset;
    m->dtype = t;
    m->dims[0] = n;
    m->dims[1] = rows;
    m->strides[0] = L->row * es;
    m->box[0] = 64;
    m->box[1] = (uint32_t)box_rows;
    m->swizzle128 = true;
    m->rank = 2;
    /* Batch dims, inner to outer, each joining the map dim of its inner
     * neighbour when it is exactly that dim's extent further on. */
    int64_t size = 0, stride = 0;
    for (int b = nb - 1; b >= 0; b--) {
        const int64_t d = o->dims[b], st = L->batch[b];
        if (d == 1 || st == 0) continue; /* coordinate 0 / a broadcast: not in the map */
        if (st < 0 || st >= lim / es || (st * es) % 16 || d > INT_MAX) return false; /* coordinates are 32-bit */
        if (size && st % stride == 0 && st / stride == size && size <= INT_MAX / d) {
            size *= d;
            m->dims[m->rank - 1] = size;
            tp->members[m->rank - 3] |= 1u << b;
            continue;
        }
        if (m->rank == FC_TMAP_MAX_RANK) return false;
        const int k = m->rank - 2;
        size = d;
        stride = st;
        m->dims[m->rank] = d;
        m->strides[m->rank - 1] = st * es;
        m->box[m->rank] = 1;
        tp->members[k] = 1u << b;
        m->rank++;
    }
    return true;
}

/* FUSEC_ATTN_TMA=0 in the environment: fc_attn_fa3 loads everything with
 * cp.async, as before TMA (an experiment's switch; the runtime adds a
 * marker option so that cached programs are kept apart). */
bool fc_cuda_attention_tma(void) {
    const char *e = getenv("FUSEC_ATTN_TMA");
    return !(e && e[0] == '0');
}

bool fc_cuda_attention_uses_mma(const fc_group *gr) {
    const fc_node *n = attention_node(gr);
    if (!n) return false;
    const fc_value *q = n->in[0], *o = n->out[0];
    fc_dtype t = o->dtype;
    int64_t d = q->dims[q->rank - 1], dv = o->dims[o->rank - 1];
    return (t == FC_BF16 || t == FC_F16) && d >= 1 && dv >= 1 && round16(d) <= 128 && round16(dv) <= 128;
}

/* The rows form (attention.h): every check the skinny GEMM's attention
 * prologue relies on, so that codegen/cuda/skinny.c never reads a layout. */
bool fc_cuda_attention_rows(const fc_group *gr, fc_attention_rows *out) {
    const fc_node *n = attention_node(gr);
    if (!n || n->nin != 3) return false; /* no mask input */
    const fc_value *o = n->out[0];
    const int R = o->rank, nb = R - 2;
    if (nb < 1 || nb > 2 || !fc_value_is_static(o)) return false;
    const fc_dtype t = o->dtype;
    if (t != FC_BF16 && t != FC_F16) return false;
    const int64_t B = nb == 2 ? o->dims[0] : 1, H = o->dims[R - 3], T = o->dims[R - 2], Dv = o->dims[R - 1];
    for (int i = 0; i < 3; i++)
        if (n->in[i]->dtype != t || !fc_value_is_static(n->in[i]) || n->in[i]->rank != R) return false;
    const int64_t D = n->in[0]->dims[R - 1];
    if (D != Dv || n->in[1]->dims[R - 1] != D || n->in[1]->dims[R - 2] != T || B < 1 || H < 1 || T < 1) return false;
    /* The result written as [B, T, H * D]: rows b T + t, columns h D + d. */
    int64_t os[FC_MAX_RANK];
    if (!output_layout(gr, n, os) || os[R - 1] != 1 || os[R - 2] != H * D || os[R - 3] != D || (nb == 2 && B > 1 && os[0] != T * H * D))
        return false;
    fc_attention_rows r = {.batch = B, .heads = H, .seq = T, .head_dim = D, .causal = n->a.causal, .dtype = t};
    r.scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? 1.0 / sqrt((double)D) : n->a.scale;
    char err[256];
    for (int i = 0; i < 3; i++) {
        layout L;
        if (!layout_of(gr, n->in[i], nb, &L, err, sizeof err, "operand")) return false;
        const int64_t head = L.batch[nb - 1];
        /* Rows of the root's [rows, L.row] matrix: batch b's rows follow batch
         * b - 1's; every head's D columns inside a row; 16-byte rows (TMA). */
        if (L.col != 1 || L.row <= 0 || (L.row * 2) % 16 || L.row > INT_MAX || L.offset < 0 || head < 0 ||
            (nb == 2 && B > 1 && L.batch[0] != T * L.row) || L.offset + (H - 1) * head + D > L.row)
            return false;
        r.op[i].input = L.input;
        r.op[i].row = L.row;
        r.op[i].head = head;
        r.op[i].col0 = L.offset;
    }
    if (out) *out = r;
    return true;
}

/* The templates' text: the helpers, the tensor-core pieces, the shared
 * Hopper helpers (fc_wg_*, which wgmma_src uses) and the Hopper kernel's,
 * each guarded to once a unit. */
static void emit_templates(fc_strbuf *s) {
    fc_strbuf_printf(s, "%s%s", helpers_src, templates_src);
    fc_cuda_emit_wgmma_helpers(s);
    fc_strbuf_printf(s, "%s", wgmma_src);
}

void fc_cuda_emit_attention_templates(fc_strbuf *s, int n) {
    emit_templates(s);
    emit_wgop(s, n, true);
    emit_wgop(s, n, false);
}

bool fc_cuda_attention_hopper(int sm) {
    if (sm != 90) return false;
    const char *e = getenv("FUSEC_ATTN_WGMMA");
    return !(e && e[0] == '0');
}

/* Whether fc_attn_fa3 gets a persistent grid (the kernel text is the same
 * either way, only the grid differs). Yes, except for causal attention
 * with two consumer warpgroups (head dims above 64): there the tiles are
 * long (about twice the work per key tile of D = 64) and of unequal length,
 * and the hardware's block scheduler, which starts each block on whichever
 * SM frees first, balances them better than the persistent blocks' fixed
 * rounds: B=8, H=16, S=2048, D=128 causal, 0.278 ms against 0.297
 * persistent; at D = 64, where the tiles are short, persistence pays
 * (causal 0.173 against 0.187; docs/ATTENTION.md, session 5).
 * FUSEC_ATTN_PERSIST=0 or 1 in the environment decides it for every shape
 * (experiments, tests). */
static bool attention_persistent(bool causal, int nc) {
    const char *e = getenv("FUSEC_ATTN_PERSIST");
    if (e && (e[0] == '0' || e[0] == '1')) return e[0] == '1';
    return !(causal && nc == 2);
}

/* fc_attn_fa3's key tile BN: 128, or 64 where all the keys fit in 64 (a
 * 128-key tile would be half masked: the GPT-2 block at B=1, T=64 spent
 * 3.94 us on its attention kernel in its CUDA Graph with 128 and 3.46 with
 * 64, CUPTI's times, docs/PERF.md session 10), or FUSEC_ATTN_BN (an
 * experiment's switch: a multiple of 16 from 64 to 256; the wgmma N and the
 * TMA box rows). */
static int attention_key_tile(int64_t keys) {
    const char *e = getenv("FUSEC_ATTN_BN");
    const int bn = e ? atoi(e) : keys <= 64 ? 64 : 128;
    return bn >= 64 && bn <= 256 && bn % 16 == 0 ? bn : 128;
}

/* The blocks of fc_attn_fa3's persistent grid: one per SM (one block fills
 * an SM: its shared memory and registers) of the device the plan is for
 * (fc_cuda_plan_sms); never more than the work tiles. Any grid computes the
 * same result: each block walks the tiles with the grid's size as its
 * stride. */
static int64_t persistent_blocks(const fc_plan *plan, int64_t tiles, bool persistent) {
    const int64_t sms = fc_cuda_plan_sms(plan);
    return persistent && sms < tiles ? sms : tiles;
}

/* fc_attn_fa3's sections of batch elements (the kernel's C::HG): the
 * largest divisor of the nb batch elements whose K and V, kv bytes each,
 * fit in ATTN_L2_SECTION bytes together, so that while the blocks walk a
 * section's tiles its K and V stay in L2 (50 MB on an H100/H200) instead
 * of being read again from memory by every query tile. Ordered as before
 * (every batch element's last query tile first, over all of them), the
 * K and V of all 128 heads at B=8, H=16, S=2048, D=128 (128 MB) were in
 * use at once: 7% L2 hits, the memory 85% busy, the kernel bound by it
 * (ncu, session 5); in sections, 59% hits and D=128 full went from 0.542
 * to 0.434 ms. Only with two consumer warpgroups (head dims above 64):
 * at D = 64 (three, 192 query rows a tile) the memory is not the limit
 * and the sections' unequal causal rounds cost more (0.182 against 0.173
 * ms causal, 0.278 against 0.274 full). FUSEC_ATTN_L2SECT=N in the
 * environment (experiments and tests): N KiB instead of ATTN_L2_SECTION
 * for every shape; 0: one section of all of them (that order). */
enum { ATTN_L2_SECTION = 32 << 20 };
static int64_t l2_section(int64_t nb, int64_t kv, int nc) {
    const char *e = getenv("FUSEC_ATTN_L2SECT");
    const int64_t budget = e && *e ? (int64_t)atoll(e) << 10 : nc == 2 ? ATTN_L2_SECTION : 0;
    if (budget <= 0 || nb < 1) return nb > 0 ? nb : 1;
    const int64_t cap = kv > 0 ? budget / kv : nb;
    int64_t hg = 1;
    for (int64_t d = 1; d <= nb && d <= cap; d++)
        if (nb % d == 0) hg = d;
    return hg;
}

/* ---- the kernel ------------------------------------------------------------ */

static const char *flag(bool b) { return b ? "true" : "false"; }

/* fc_attn_fa3's config members for TMA: which of Q, K, V have a tensor
 * map (QTMA ..), its rank (QR ..), and tcoords(t, q, k, v), which writes
 * batch t's coordinates of map dims 2 .. rank - 1 (tma_plan). */
static void emit_tcoords(fc_strbuf *s, const fc_value *o, int nb, const tma_plan tp[3], const bool tma[3]) {
    static const char *const up[3] = {"Q", "K", "V"}, *const lo[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        fc_strbuf_printf(s, "  static constexpr bool %sTMA = %s;\n  static constexpr int %sR = %d;\n", up[i], flag(tma[i]), up[i],
                         tma[i] ? tp[i].map.rank : 2);
    fc_strbuf_printf(s, "  static __device__ __forceinline__ void tcoords(long long t, int (&q)[5], int (&k)[5], int (&v)[5]) {\n");
    fc_strbuf_printf(s, "    (void)t; (void)q; (void)k; (void)v;\n");
    bool any = false;
    for (int i = 0; i < 3; i++) any = any || (tma[i] && tp[i].map.rank > 2);
    if (any) {
        /* The batch index, innermost dim first (as offsets()). */
        for (int b = nb - 1; b >= 0; b--)
            fc_strbuf_printf(s, "    const long long c%d = t %% %lldll; t /= %lldll; (void)c%d;\n", b, (long long)o->dims[b],
                             (long long)o->dims[b], b);
        for (int i = 0; i < 3; i++) {
            for (int d = 2; tma[i] && d < tp[i].map.rank; d++) {
                /* Horner over the members, outer to inner. */
                fc_strbuf_printf(s, "    %s[%d] = (int)", lo[i], d);
                for (int b = 0; b < nb; b++)
                    if (tp[i].members[d - 2] >> b & 1) fc_strbuf_printf(s, "(");
                fc_strbuf_printf(s, "0");
                for (int b = 0; b < nb; b++)
                    if (tp[i].members[d - 2] >> b & 1) fc_strbuf_printf(s, " * %lldll + c%d)", (long long)o->dims[b], b);
                fc_strbuf_printf(s, ";\n");
            }
        }
    }
    fc_strbuf_printf(s, "  }\n");
}

fc_status fc_cuda_emit_attention(const fc_plan *plan, const fc_group *gr, const char *name, char **source,
                                 fc_launch *l) {
    fc_context *ctx = plan->g->ctx;
    *source = NULL;
    char err[256] = "";
    const fc_node *n = attention_node(gr);
    if (!n) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen: group %d holds no single attention node", gr->id);
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->nin > 3 ? n->in[3] : NULL, *o = n->out[0];
    const int R = o->rank, nb = R - 2;
    const int64_t Sq = o->dims[R - 2], Dv = o->dims[R - 1], D = q->dims[q->rank - 1], Sk = k->dims[k->rank - 2];
    int64_t NB = 1;
    for (int b = 0; b < nb; b++) NB *= o->dims[b];

    layout L[4];
    int64_t os[FC_MAX_RANK];
    const fc_value *ops[4] = {q, k, v, mask};
    static const char *const what[4] = {"q", "k", "v", "the mask"};
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) ok = !ops[i] || layout_of(gr, ops[i], nb, &L[i], err, sizeof err, what[i]);
    if (ok && !output_layout(gr, n, os)) {
        snprintf(err, sizeof err, "the result is not written through permute/reshape ops to the group's one output");
        ok = false;
    }
    for (int i = 0; ok && i < gr->ninputs; i++)
        if (!fc_dtype_is_float(gr->inputs[i]->dtype) && gr->inputs[i]->dtype != FC_BOOL) {
            snprintf(err, sizeof err, "input %d has dtype %s", i, fc_dtype_name(gr->inputs[i]->dtype));
            ok = false;
        }
    if (ok && (Sq > INT_MAX / 2 || Sk > INT_MAX / 2 || D > 65536 || Dv > 65536)) {
        snprintf(err, sizeof err, "a dimension is too large (Sq %lld, Sk %lld, D %lld, Dv %lld)", (long long)Sq,
                 (long long)Sk, (long long)D, (long long)Dv);
        ok = false;
    }
    if (!ok) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen (group %d): %s", gr->id, err);

    const bool mma = fc_cuda_attention_uses_mma(gr);
    /* The Hopper kernel (fc_attn_fa3) where the unit is compiled for sm_90a
     * and both padded head dims are whole 64-column swizzle panels (64 or
     * 128); everything else takes fc_attn_tc. */
    const bool fa3 = mma && fc_cuda_attention_hopper(plan->sm) && round16(D) % 64 == 0 && round16(Dv) % 64 == 0;
    const fc_dtype t = o->dtype;
    const bool f64 = t == FC_F64;
    /* Warps of the tensor-core kernel (16 query rows each). 8 warps share
     * each K/V tile among 128 rows, which halves the loads per FLOP; at
     * about 225 registers a thread (head dim 128) that is one block of 8
     * warps per SM. Head dims up to 64 need about 135 registers, so blocks
     * of 4 warps fit 3 to an SM instead. Short sequences take 4 warps. */
    const int nw = round16(D) > 64 && Sq > 64 ? 8 : 4;
    /* fc_attn_fa3: NC consumer warpgroups of 64 query rows (three where
     * both head dims are 64: their registers fit in 160 a thread, and 192
     * rows a block read K and V a third less often than 128; else two),
     * key tiles of BN = 128 (64 for at most 64 keys), ST stages of K and V (3 where the shared
     * memory takes them, else 2). Measured: docs/ATTENTION.md. */
    const int64_t dp = round16(D), dvp = round16(Dv);
    const int nc = dp <= 64 && dvp <= 64 ? 3 : 2, bn = attention_key_tile(Sk);
    const int64_t fa3_smem3 = 1024 + 2 * (64 * nc * dp + 3 * bn * (dp + dvp)) + 32 * 3 + 8 * nc;
    const int stages = fa3_smem3 <= 227 * 1024 ? 3 : 2;
    const int64_t fa3_smem = 1024 + 2 * (64 * nc * dp + stages * bn * (dp + dvp)) + 32 * stages + 8 * nc;
    /* fc_attn_fa3: Q, K and V through TMA where their layouts allow it
     * (tma_of), each in boxes of 64 columns (128 bytes, one swizzle panel)
     * by the tile's rows. */
    tma_plan tp[3];
    bool tma[3] = {false, false, false};
    if (fa3 && fc_cuda_attention_tma()) {
        tma[0] = tma_of(&L[0], o, nb, Sq, D, 64, o->dtype, &tp[0]);
        tma[1] = tma_of(&L[1], o, nb, Sk, D, bn, o->dtype, &tp[1]);
        tma[2] = tma_of(&L[2], o, nb, Sk, Dv, bn, o->dtype, &tp[2]);
    }
    const int rows_per_block = fa3 ? 64 * nc : mma ? 16 * nw : 8, threads = fa3 ? 128 * (nc + 1) : mma ? 32 * nw : 256;
    const int64_t nqt = (Sq + rows_per_block - 1) / rows_per_block;
    const bool empty = Sq == 0 || Dv == 0 || NB == 0;
    if (!empty && nqt * NB > INT_MAX)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "attention codegen (group %d): %lld blocks are too many for one grid",
                            gr->id, (long long)(nqt * NB));
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    const int mask_kind = !mask ? 0 : mask->dtype == FC_BOOL ? 1 : 2;
    const size_t csize = f64 ? 8 : 4;
    int64_t kt = 32768 / (int64_t)((size_t)(D + Dv > 0 ? D + Dv : 1) * csize);
    kt = kt < 1 ? 1 : kt > 64 ? 64 : kt;

    fc_strbuf s = {0};
    emit_templates(&s);
    fc_strbuf_printf(&s, "// attention: %s%s%s, q [%lld x %lld], k/v [%lld], dv %lld, %lld batches, %s kernel\n",
        fc_dtype_name(t), n->a.causal ? ", causal" : "", mask_kind == 1 ? ", bool mask" : mask_kind == 2 ? ", added mask" : "",
        (long long)Sq, (long long)D, (long long)Sk, (long long)Dv, (long long)NB, mma ? "mma" : "row");
    if (empty) {
        /* Nothing to compute: a kernel that returns, so the launch list stays uniform. */
        fc_strbuf_printf(&s, "extern \"C\" __global__ void %s(", name);
    } else {
        if (fa3) {
            fc_strbuf_printf(&s, "#if !defined(FC_ATTN_FA3)\n#error \"fusec: this attention kernel needs a unit compiled for sm_90a\"\n#endif\n");
            emit_wgop(&s, bn, true);
            emit_wgop(&s, (int)round16(Dv), false);
        }
        fc_strbuf_printf(&s, "struct fc_attn_cfg_%s {\n", name);
        fc_strbuf_printf(&s, "  typedef %s T;\n  typedef %s M;\n  typedef %s CT;\n", fc_cuda_storage_type(t),
            mask ? fc_cuda_storage_type(mask->dtype) : "unsigned char", f64 ? "double" : "float");
        fc_strbuf_printf(&s, "  static constexpr int SQ = %lld, SK = %lld, D = %lld, DV = %lld, DP = %lld, DVP = %lld, KT = %lld, MASK = %d, NW = %d, ST = %d, BN = %d, NC = %d;\n",
            (long long)Sq, (long long)Sk, (long long)D, (long long)Dv, (long long)round16(D), (long long)round16(Dv),
            (long long)kt, mask_kind, nw, stages, bn, nc);
        fc_strbuf_printf(&s, "  static constexpr long long NB = %lld, HG = %lld;\n", (long long)NB,
                         (long long)l2_section(NB, Sk * (D + Dv) * (int64_t)fc_dtype_size(t), nc));
        bool ovec = os[R - 1] == 1 && Dv % 2 == 0 && os[R - 2] % 2 == 0;
        for (int b = 0; b < nb; b++) ovec = ovec && os[b] % 2 == 0;
        fc_strbuf_printf(&s, "  static constexpr bool CAUSAL = %s, QVEC = %s, KVEC = %s, VVEC = %s, OVEC = %s;\n", flag(n->a.causal),
            flag(vec16(&L[0], D, nb)), flag(vec16(&L[1], D, nb)), flag(vec16(&L[2], Dv, nb)), flag(ovec));
        fc_strbuf_printf(&s, "  static constexpr long long QS = %lld, QD = %lld, KS = %lld, KD = %lld, VS = %lld, VD = %lld,\n",
            (long long)L[0].row, (long long)L[0].col, (long long)L[1].row, (long long)L[1].col, (long long)L[2].row,
            (long long)L[2].col);
        fc_strbuf_printf(&s, "    MQ = %lld, MK = %lld, OS = %lld, OD = %lld;\n", mask ? (long long)L[3].row : 0LL,
            mask ? (long long)L[3].col : 0LL, (long long)(Sq == 1 ? 0 : os[R - 2]), (long long)(Dv == 1 ? 0 : os[R - 1]));
        fc_strbuf_printf(&s, "  static constexpr float SCALE_LOG2 = (float)%.17g;\n", scale * 1.4426950408889634);
        fc_strbuf_printf(&s, "  static constexpr double SCALE = %.17g;\n", scale);
        /* Batch index t -> element offsets, innermost batch dim first. */
        fc_strbuf_printf(&s, "  static __device__ __forceinline__ void offsets(long long t, long long &q, long long &k, long long &v,"
                " long long &m, long long &o) {\n");
        fc_strbuf_printf(&s, "    q = %lldll; k = %lldll; v = %lldll; m = %lldll; o = 0;\n", (long long)L[0].offset,
            (long long)L[1].offset, (long long)L[2].offset, mask ? (long long)L[3].offset : 0LL);
        fc_strbuf_printf(&s, "    long long c = 0;\n    (void)c; (void)t;\n");
        for (int b = nb - 1; b >= 0; b--) {
            if (o->dims[b] == 1) continue;
            fc_strbuf_printf(&s, "    c = t %% %lldll; t /= %lldll;", (long long)o->dims[b], (long long)o->dims[b]);
            static const char *const names[5] = {"q", "k", "v", "m", "o"};
            int64_t st[5] = {L[0].batch[b], L[1].batch[b], L[2].batch[b], mask ? L[3].batch[b] : 0, os[b]};
            for (int i = 0; i < 5; i++)
                if (st[i]) fc_strbuf_printf(&s, " %s += c * %lldll;", names[i], (long long)st[i]);
            fc_strbuf_printf(&s, "\n");
        }
        fc_strbuf_printf(&s, "  }\n");
        if (fa3) emit_tcoords(&s, o, nb, tp, tma);
        fc_strbuf_printf(&s, "};\n");
        fc_strbuf_printf(&s, "extern \"C\" __global__ void __launch_bounds__(%d%s) %s(", threads, fa3 ? ", 1" : "", name);
    }
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(&s, "const %s *__restrict__ a%d, ", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    fc_strbuf_printf(&s, "%s *__restrict__ o0", fc_cuda_storage_type(gr->outputs[0]->dtype));
    /* The tensor maps, after the pointers: fc_launch.tmaps, in this order. */
    static const char *const tname[3] = {"tq", "tk", "tv"};
    for (int i = 0; i < 3 && !empty; i++)
        if (tma[i]) fc_strbuf_printf(&s, ", const __grid_constant__ fc_wg_tmap %s", tname[i]);
    /* The prelude's fc_dependents_may_launch (this source also compiles
     * alone, without the prelude): the skinny GEMM after it may start. */
    fc_strbuf_printf(&s, ") {\n#if __CUDA_ARCH__ >= 900\n  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n#endif\n");
    if (!empty) {
        fc_strbuf_printf(&s, "  fc_attn_%s<fc_attn_cfg_%s>(a%d, a%d, a%d, ", fa3 ? "fa3" : mma ? "tc" : "rows", name, L[0].input,
                         L[1].input, L[2].input);
        if (mask) fc_strbuf_printf(&s, "a%d, o0", L[3].input);
        else fc_strbuf_printf(&s, "(const unsigned char *)0, o0");
        for (int i = 0; i < 3 && fa3; i++) fc_strbuf_printf(&s, tma[i] ? ", &%s" : ", nullptr", tname[i]);
        fc_strbuf_printf(&s, ");\n");
    } else {
        for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(&s, "  (void)a%d;\n", i);
        fc_strbuf_printf(&s, "  (void)o0;\n");
    }
    fc_strbuf_printf(&s, "}\n");
    if (s.oom) {
        free(s.buf);
        return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (attention codegen)");
    }

    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    l->grid[0] = empty ? 1u : (unsigned)(fa3 ? persistent_blocks(plan, nqt * NB, attention_persistent(n->a.causal, nc)) : nqt * NB);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = empty ? 32u : (unsigned)threads;
    l->block[1] = l->block[2] = 1;
    /* fc_attn_fa3: dynamic shared memory, aligned up to 1024 bytes inside:
     * Q (64 NC rows), the K and V stages, 4 mbarriers a stage. */
    l->smem = empty || !fa3 ? 0u : (unsigned)fa3_smem;
    l->ntmaps = 0;
    for (int i = 0; i < 3 && !empty; i++)
        if (tma[i]) l->tmaps[l->ntmaps++] = tp[i].map;
    /* The plan line says which operands the copy engine loads (--emit=plan). */
    char tmas[16] = "";
    if (l->ntmaps)
        snprintf(tmas, sizeof tmas, ", TMA%s%s%s", tma[0] ? " q" : "", tma[1] ? " k" : "", tma[2] ? " v" : "");
    snprintf(l->summary, sizeof l->summary, "attention: %s %s%s%s, %lld x %lld x %lld x %lld%s", fa3 ? "flash wgmma" : mma ? "flash mma" : "flash rows",
             fc_dtype_name(t), n->a.causal ? ", causal" : "", mask_kind ? ", mask" : "", (long long)NB, (long long)Sq,
             (long long)Sk, (long long)D, tmas);
    *source = s.buf;
    return FC_OK;
}

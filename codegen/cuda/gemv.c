/* gemv.c - GEMMs of a few rows against [N, K] weights as CUDA-core kernels
 * (gemv.h): the rule that picks them and their source. */
#include "gemv.h"
#include "ir/switches.h"
#include "passes/epilogue.h"

#include <stdio.h>
#include <string.h>

/* Must match the kernel below: 8 warps a block, 2 columns a warp, 8
 * elements (16 bytes) a lane a step of K. */
enum { GV_WARPS = 8, GV_COLS = 2, GV_VEC = 8, GV_STEP = 32 * GV_VEC };

static int64_t elements(const fc_value *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->dims[d];
    return n;
}

bool fc_cuda_gemv_plan(const fc_plan *plan, const fc_group *gr, fc_gemv *out) {
    if (plan->dynamic || plan->sm < 80 || !fc_switch_on(FC_SW_SKINNY)) return false;
    if (gr->kind != FC_GROUP_LIBRARY || gr->nnodes != 1 || gr->noutputs != 1 || gr->batch > 0) return false;
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi) || !gi.trans_b || gi.trans_a || gi.nweights < 1 || gi.nweights > FC_GEMV_MAX_WEIGHTS ||
        n->out[0] != gr->outputs[0])
        return false;
    const fc_value *a = gi.a, *y = n->out[0];
    const fc_dtype t = a->dtype;
    if ((t != FC_BF16 && t != FC_F16) || gi.out != t || y->dtype != t || a->rank < 2 || !fc_value_is_static(a) ||
        !fc_value_is_static(y))
        return false;
    int64_t M = 1;
    for (int d = 0; d + 1 < a->rank; d++) M *= a->dims[d];
    const int64_t K = a->dims[a->rank - 1];
    if (M < 1 || M > FC_GEMV_MAX_M || K < GV_STEP || K % GV_STEP) return false;
    fc_gemv k = {.M = M, .K = K, .nweights = gi.nweights, .a = fc_cuda_group_input(gr, a), .residual = -1,
                 .act = gi.act == FC_GEMM_ACT_RELU ? 1 : gi.act == FC_GEMM_ACT_GELU_TANH ? 2 : 0, .alpha = gi.alpha, .dtype = t};
    if (k.a < 0) return false;
    for (int i = 0; i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        if (w->dtype != t || w->rank != 2 || !fc_value_is_static(w) || w->dims[1] != K || w->dims[0] < 1) return false;
        k.n[i] = w->dims[0];
        k.N += w->dims[0];
        k.w[i] = fc_cuda_group_input(gr, w);
        k.bias[i] = -1;
        if (k.w[i] < 0) return false;
        if (gi.has_bias) {
            const fc_value *b = gi.bias[i];
            if (b->dtype != t || !fc_value_is_static(b) || elements(b) != w->dims[0]) return false;
            if ((k.bias[i] = fc_cuda_group_input(gr, b)) < 0) return false;
        }
    }
    if (elements(y) != M * k.N || y->dims[y->rank - 1] != k.N) return false;
    if (gi.has_residual) {
        const fc_value *r = gi.residual;
        if (r->dtype != t || !fc_value_is_static(r) || elements(r) != M * k.N) return false;
        if ((k.residual = fc_cuda_group_input(gr, r)) < 0) return false;
    }
    if (out) *out = k;
    return true;
}

/* The dot product of 8 elements (16 bytes) of each operand, in f32: once a
 * unit (the guard), and in every kernel's own source. */
static const char helpers[] =
    "#ifndef FC_GV_HELPERS\n"
    "#define FC_GV_HELPERS\n"
    "static __device__ __forceinline__ float fc_gv_dot8(const uint4 &a, const uint4 &w, const __nv_bfloat16 *) {\n"
    "  const __nv_bfloat162 *x = reinterpret_cast<const __nv_bfloat162 *>(&a), *y = reinterpret_cast<const __nv_bfloat162 *>(&w);\n"
    "  float s = 0.f;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 p = __bfloat1622float2(x[i]), q = __bfloat1622float2(y[i]);\n"
    "    s = fmaf(p.x, q.x, s);\n"
    "    s = fmaf(p.y, q.y, s);\n"
    "  }\n"
    "  return s;\n"
    "}\n"
    "static __device__ __forceinline__ float fc_gv_dot8(const uint4 &a, const uint4 &w, const __half *) {\n"
    "  const __half2 *x = reinterpret_cast<const __half2 *>(&a), *y = reinterpret_cast<const __half2 *>(&w);\n"
    "  float s = 0.f;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 p = __half22float2(x[i]), q = __half22float2(y[i]);\n"
    "    s = fmaf(p.x, q.x, s);\n"
    "    s = fmaf(p.y, q.y, s);\n"
    "  }\n"
    "  return s;\n"
    "}\n"
    "/* 8 elements from p: one 16-byte load where p is 16-byte aligned (al),\n"
    " * element by element otherwise (a caller's odd buffer). */\n"
    "template <typename T> static __device__ __forceinline__ uint4 fc_gv_load8(const T *p, bool al) {\n"
    "  if (al) return *reinterpret_cast<const uint4 *>(p);\n"
    "  uint4 r;\n"
    "  unsigned short *h = reinterpret_cast<unsigned short *>(&r);\n"
    "#pragma unroll\n"
    "  for (int e = 0; e < 8; e++) h[e] = reinterpret_cast<const unsigned short *>(p)[e];\n"
    "  return r;\n"
    "}\n"
    "#endif\n";

fc_status fc_cuda_emit_gemv(const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s, fc_launch *l) {
    char d[96];
    fc_gemm_describe(gr->nodes[0], d, sizeof d);
    snprintf(l->summary, sizeof l->summary, "gemv %s, %lld x %lld x %lld", d, (long long)k->M, (long long)k->N, (long long)k->K);
    const char *t = fc_cuda_storage_type(k->dtype);
    fc_strbuf_printf(s, "%s// group %d: %s\n", helpers, gr->id, l->summary);
    fc_strbuf_printf(s, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", 32 * GV_WARPS, name);
    for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", t, i);
    fc_strbuf_printf(s, "%s *__restrict__ o0) {\n", t);
    fc_strbuf_printf(s,
                     "  enum { M = %lld, K = %lld, STEPS = K / %d };\n"
                     "  const long long N = %lldLL;\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
                     "  const long long c0 = ((long long)blockIdx.x * %d + warp) * %d; /* this warp's columns */\n"
                     "  const %s *wr[%d], *br[%d];\n"
                     "#pragma unroll\n"
                     "  for (int c = 0; c < %d; c++) {\n"
                     "    long long n = c0 + c;\n"
                     "    wr[c] = 0;\n"
                     "    br[c] = 0;\n",
                     (long long)k->M, (long long)k->K, GV_STEP, (long long)k->N, GV_WARPS, GV_COLS, t, GV_COLS, GV_COLS, GV_COLS);
    /* Column n of the result is row n - (N_0 + .. + N_{i-1}) of weight i. */
    for (int i = 0; i < k->nweights; i++) {
        if (i == 0) fc_strbuf_printf(s, "    if (n < %lldLL) {", (long long)k->n[0]);
        else fc_strbuf_printf(s, "    else if ((n -= %lldLL) < %lldLL) {", (long long)k->n[i - 1], (long long)k->n[i]);
        fc_strbuf_printf(s, " wr[c] = a%d + n * K;", k->w[i]);
        if (k->bias[i] >= 0) fc_strbuf_printf(s, " br[c] = a%d + n;", k->bias[i]);
        fc_strbuf_printf(s, " }\n");
    }
    fc_strbuf_printf(s,
                     "  }\n"
                     "  /* The weight rows into L2 while the kernel before finishes (a hint:\n"
                     "   * it reads nothing that kernel writes). */\n"
                     "#pragma unroll\n"
                     "  for (int c = 0; c < %d; c++)\n"
                     "    if (wr[c])\n"
                     "      for (int e = lane * 64; e < K; e += 32 * 64) asm volatile(\"prefetch.global.L2 [%%0];\" ::\"l\"(wr[c] + e));\n"
                     "#if __CUDA_ARCH__ >= 900\n"
                     "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
                     "#endif\n"
                     "  float acc[M][%d];\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++) acc[m][c] = 0.f;\n"
                     "  const %s *A = a%d;\n"
                     "  const bool al = ((unsigned long long)A & 15) == 0 && ((unsigned long long)wr[0] & 15) == 0 &&\n"
                     "                  ((unsigned long long)wr[%d] & 15) == 0; /* rows are 512-byte multiples apart */\n"
                     "#pragma unroll 8\n"
                     "  for (int st = 0; st < STEPS; st++) {\n"
                     "    const int kk = st * %d + lane * %d;\n"
                     "    uint4 x[%d];\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++) x[c] = wr[c] ? fc_gv_load8(wr[c] + kk, al) : make_uint4(0u, 0u, 0u, 0u);\n"
                     "#pragma unroll\n"
                     "    for (int m = 0; m < M; m++) {\n"
                     "      const uint4 av = fc_gv_load8(A + (long long)m * K + kk, al);\n"
                     "#pragma unroll\n"
                     "      for (int c = 0; c < %d; c++) acc[m][c] += fc_gv_dot8(av, x[c], (const %s *)0);\n"
                     "    }\n"
                     "  }\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++)\n"
                     "#pragma unroll\n"
                     "      for (int o = 16; o > 0; o >>= 1) acc[m][c] += __shfl_xor_sync(0xffffffffu, acc[m][c], o);\n"
                     "  fc_dependents_may_launch();\n"
                     "  if (lane != 0) return;\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++) {\n"
                     "      if (!wr[c]) continue;\n"
                     "      float v = (float)%.17g * acc[m][c];\n",
                     GV_COLS, GV_COLS, GV_COLS, t, k->a, GV_COLS - 1, GV_STEP, GV_VEC, GV_COLS, GV_COLS, GV_COLS, t, GV_COLS, GV_COLS,
                     k->alpha);
    if (k->bias[0] >= 0) fc_strbuf_printf(s, "      v += fc_ld(*br[c]);\n");
    if (k->residual >= 0) fc_strbuf_printf(s, "      v += fc_ld(a%d[(long long)m * N + c0 + c]);\n", k->residual);
    if (k->act == 1) fc_strbuf_printf(s, "      v = fc_relu(v);\n");
    if (k->act == 2) fc_strbuf_printf(s, "      v = fc_gelu_tanh(v);\n");
    fc_strbuf_printf(s, "      o0[(long long)m * N + c0 + c] = fc_to<%s>(v);\n    }\n}\n", t);

    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    const int64_t per_block = GV_WARPS * GV_COLS;
    l->grid[0] = (unsigned)((k->N + per_block - 1) / per_block);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = 32 * GV_WARPS;
    l->block[1] = l->block[2] = 1;
    l->pdl = true;
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

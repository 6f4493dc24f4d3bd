// test_decode_host.h - the CUDA subset of cache_attention's and the GEMVs'
// kernels on the host (tests/test_decode_host.py, tests/test_gemv_host.py):
// a block's threads are std::threads, run cluster after cluster (a
// cluster's blocks at once, so that its barrier can meet; a kernel without
// __cluster_dims__ has clusters of one block); a kernel's __shared__
// arrays are statics, one copy a rank of the cluster (the script rewrites
// each as an array of them and registers it, so that fc_cluster_ld finds
// another rank's copy); the warps' shuffles and MMAs rendezvous through
// barriers.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <atomic>
#include <memory>
#include <limits>
#include <mutex>
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __cluster_dims__(x, y, z)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#undef INFINITY
#define INFINITY std::numeric_limits<float>::infinity()
typedef long long i64;
struct dim3s { unsigned x, y, z; };
static thread_local dim3s threadIdx, blockIdx;
static dim3s blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct __nv_bfloat16 { unsigned short b; };
struct __half { unsigned short b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __half2 { __half x, y; };
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __bfloat162float(__nv_bfloat16 x) { return __uint_as_float((unsigned)x.b << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { unsigned u = __float_as_uint(f); u = (u + 0x7fff + ((u >> 16) & 1)) >> 16; return {(unsigned short)u}; }
static inline float __half2float(__half x) { _Float16 h; memcpy(&h, &x.b, 2); return (float)h; }
static inline __half __float2half_rn(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.b, &h, 2); return r; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.b; }
static inline unsigned short __half_as_ushort(__half x) { return x.b; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.b = u; return h; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
static inline float2 __half22float2(__half2 v) { return {__half2float(v.x), __half2float(v.y)}; }
static inline float fc_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float fc_ld(__half x) { return __half2float(x); }
static inline float fc_ld(float x) { return x; }
template <typename T> T fc_to(double x);
template <> __nv_bfloat16 fc_to<__nv_bfloat16>(double x) { return __float2bfloat16_rn((float)x); }
template <> __half fc_to<__half>(double x) { return __float2half_rn((float)x); }
template <> float fc_to<float>(double x) { return (float)x; }
static inline void fc_dependents_may_launch() {}
static inline float fc_relu(float x) { return x > 0.f ? x : 0.f; }
static inline float fc_gelu_tanh(float x) { return 0.5f * x * (1.f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
static inline float fc_sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned char b[8]; memcpy(b, &x, 4); memcpy(b + 4, &y, 4); unsigned r = 0;
  for (int i = 0; i < 4; i++) r |= (unsigned)b[(s >> (4 * i)) & 7] << (8 * i);
  return r;
}
// the block: barriers for the block and for each warp, exchange slots
struct blockctx { std::unique_ptr<std::barrier<>> blk; std::vector<std::unique_ptr<std::barrier<>>> w; float fs[32][32]; unsigned us[32][32][12]; };
static thread_local blockctx *B;
static inline int lane_() { return threadIdx.x & 31; }
static inline int warp_() { return threadIdx.x >> 5; }
static inline void __syncthreads() { B->blk->arrive_and_wait(); }
static inline void __syncwarp() { B->w[warp_()]->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
  B->fs[warp_()][lane_()] = v; __syncwarp(); float r = B->fs[warp_()][lane_() ^ o]; __syncwarp(); return r;
}
static inline float __shfl_sync(unsigned, float v, int src) {
  B->fs[warp_()][lane_()] = v; __syncwarp(); float r = B->fs[warp_()][src & 31]; __syncwarp(); return r;
}
#define FC_ATTN_HELPERS
static inline float fc_attn_exp2(float x) { return exp2f(x); }
static inline unsigned fc_attn_pack(float lo, float hi, __nv_bfloat16) { return __float2bfloat16_rn(lo).b | (unsigned)__float2bfloat16_rn(hi).b << 16; }
static inline unsigned fc_attn_pack(float lo, float hi, __half) { return __float2half_rn(lo).b | (unsigned)__float2half_rn(hi).b << 16; }
template <typename T> static inline float half_of(unsigned w, int hi) { T t; t.b = (unsigned short)(hi ? w >> 16 : w & 0xffff); return fc_ld(t); }
// mma.m16n8k16 row.col f32 += (bf16|f16) by the PTX ISA's fragment layouts
template <typename T> static inline void mma_(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
  unsigned *me = B->us[warp_()][lane_()];
  me[0] = a[0], me[1] = a[1], me[2] = a[2], me[3] = a[3], me[4] = b0, me[5] = b1;
  for (int i = 0; i < 4; i++) me[6 + i] = __float_as_uint(c[i]);
  __syncwarp();
  float A[16][16], Bm[16][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    const unsigned *f = B->us[warp_()][l]; int g = l >> 2, q = l & 3;
    for (int b = 0; b < 2; b++) {
      A[g][2 * q + b] = half_of<T>(f[0], b); A[g + 8][2 * q + b] = half_of<T>(f[1], b);
      A[g][2 * q + 8 + b] = half_of<T>(f[2], b); A[g + 8][2 * q + 8 + b] = half_of<T>(f[3], b);
      Bm[2 * q + b][g] = half_of<T>(f[4], b); Bm[2 * q + 8 + b][g] = half_of<T>(f[5], b);
    }
    C[g][2 * q] = __uint_as_float(f[6]); C[g][2 * q + 1] = __uint_as_float(f[7]);
    C[g + 8][2 * q] = __uint_as_float(f[8]); C[g + 8][2 * q + 1] = __uint_as_float(f[9]);
  }
  int g = lane_() >> 2, q = lane_() & 3;
  int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
  float d[4];
  for (int i = 0; i < 4; i++) { float s = C[rr[i]][cc[i]]; for (int k = 0; k < 16; k++) s += A[rr[i]][k] * Bm[k][cc[i]]; d[i] = s; }
  __syncwarp();
  for (int i = 0; i < 4; i++) c[i] = d[i];
}
static inline void fc_attn_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1, __nv_bfloat16) { mma_<__nv_bfloat16>(c, a, b0, b1); }
static inline void fc_attn_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1, __half) { mma_<__half>(c, a, b0, b1); }
// the cluster: its rank of the block (clusters are (1, CY, 1)), its barrier
enum { FC_MAX_CLUSTER = 8 };
static thread_local unsigned fc_rank_;
static unsigned fc_cluster_; // blocks a cluster
static std::barrier<> *CL;
static inline void fc_cluster_sync() { CL->arrive_and_wait(); }
// a __shared__ array's FC_MAX_CLUSTER copies: where they start, the bytes of one
struct fc_shared_reg {
  static std::mutex &mu() { static std::mutex m; return m; }
  static std::vector<std::pair<const char *, size_t>> &all() { static std::vector<std::pair<const char *, size_t>> a; return a; }
  fc_shared_reg(const void *base, size_t one) { std::lock_guard<std::mutex> g(mu()); all().push_back({(const char *)base, one}); }
};
static inline float fc_cluster_ld(const float *p, unsigned rank) {
  std::lock_guard<std::mutex> g(fc_shared_reg::mu());
  for (auto &[base, one] : fc_shared_reg::all())
    if ((const char *)p >= base + fc_rank_ * one && (const char *)p < base + (fc_rank_ + 1) * one) {
      if (rank >= fc_cluster_) { fprintf(stderr, "fc_cluster_ld: rank %u past the cluster\n", rank); abort(); }
      return *(const float *)((const char *)p + ((i64)rank - (i64)fc_rank_) * (i64)one);
    }
  fprintf(stderr, "fc_cluster_ld: not this block's shared memory\n");
  abort();
}
template <typename F> static void launch(unsigned gx, unsigned gy, unsigned threads, unsigned cy, F kernel) {
  gridDim = {gx, gy, 1}; blockDim = {threads, 1, 1}; fc_cluster_ = cy;
  if (cy < 1 || cy > FC_MAX_CLUSTER || gy % cy) { fprintf(stderr, "launch: a cluster of %u in a grid of %u\n", cy, gy); abort(); }
  for (unsigned y0 = 0; y0 < gy; y0 += cy)
    for (unsigned x = 0; x < gx; x++) {
      std::barrier<> cl(cy * threads);
      CL = &cl;
      std::vector<std::unique_ptr<blockctx>> ctx;
      std::vector<std::thread> ts;
      for (unsigned r = 0; r < cy; r++) {
        ctx.push_back(std::make_unique<blockctx>());
        blockctx *c = ctx.back().get();
        c->blk = std::make_unique<std::barrier<>>(threads);
        for (unsigned w = 0; w < threads / 32; w++) c->w.push_back(std::make_unique<std::barrier<>>(32));
        for (unsigned t = 0; t < threads; t++)
          ts.emplace_back([=] { B = c; fc_rank_ = r; threadIdx = {t, 0, 0}; blockIdx = {x, y0 + r, 0}; kernel(); });
      }
      for (auto &t : ts) t.join();
    }
}

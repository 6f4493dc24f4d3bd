// skinny_gemm_bench.cu - can a GEMM of our own beat cuBLASLt at M <= 64,
// and fold the layernorm before it, on the H200? (docs/PERF.md, "Session
// 11"; issue 7's GPT-2 block at B=1, T=64 spends 19 of its 26.5 us in
// cuBLASLt's five kernels, each mostly latency.)
//
// The kernel: one thread block cluster of S blocks per BN-column tile of
// C; block r of the cluster multiplies the K-slice r (KS = K / S) of the
// 64 rows by the weight's slice, all of it loaded at once (cp.async, no
// pipeline: a block holds its whole slice), then the S partial tiles are
// summed through distributed shared memory, each block summing 1/S of the
// rows in rank order (deterministic), with the epilogue (bias, gelu,
// residual) applied once. No workspace, no counters, no second kernel.
//
// With LN, the A slice is layer-normalized in shared memory first: the
// row sums and then the centred squares are exchanged through the cluster
// (its S blocks cover all of K), and the normalized values are rounded to
// bf16, as the layernorm kernel's output would be.
//
// With PDL (programmatic dependent launch) the weight slice and the norm's
// parameters, constants, are loaded before griddepcontrol.wait; A and the
// residual, which the kernel before writes, after it.
//
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 skinny_gemm_bench.cu -lcublasLt -lcuda -o skinny_gemm_bench
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CL(x) do { cublasStatus_t e_ = (x); if (e_ != CUBLAS_STATUS_SUCCESS) { printf("%s:%d cublasLt %d\n", __FILE__, __LINE__, (int)e_); exit(1); } } while (0)

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned mapa(const void *p, unsigned rank) {
    unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank)); return r;
}
__device__ __forceinline__ float ld_dsmem_f32(unsigned a) { float v; asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory"); return v; }
__device__ __forceinline__ float4 ld_dsmem_f4(unsigned a) {
    float4 v; asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory"); return v;
}
__device__ __forceinline__ void ldm_x4(unsigned &a, unsigned &b, unsigned &c, unsigned &d, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldm_x4_t(unsigned &a, unsigned &b, unsigned &c, unsigned &d, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma16816(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float gelu_tanh(float x) { return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

struct Args {
    const bf16 *A, *W, *bias, *resid, *gamma, *beta;
    bf16 *C;
    int M, N, K;
    float eps;
    /* Session 14: the layernorm's row statistics as the kernel before
     * would leave them, a (mean, centred sum of squares) pair per row and
     * 64-column slice of K: [M][np][2] (skinny2 with ST). */
    const float *stats;
    int np;
};

// BN = 64 * WN columns a cluster, 4 x WN warps (16 rows x 64 columns each).
template <int WN, int KS, int S, bool LN, bool GELU, bool PDL>
__global__ void __launch_bounds__(128 * WN) skinny(Args g) {
    constexpr int BN = 64 * WN, NT = 128 * WN, AP = KS + 8, BP = BN + 8, CP = BN + 4;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *sB = (bf16 *)smem;                       // [KS][BP]
    bf16 *sA = sB + KS * BP;                       // [64][AP]
    float *sC = (float *)(sA + 64 * AP);           // [64][CP]
    float *sSum = sC + 64 * CP;                    // [64] row partials
    float *sSq = sSum + 64;                        // [64]
    float *sG = sSq + 64, *sBt = sG + KS;          // [KS] gamma, beta slices
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned rank = cluster_rank();
    const int n0 = (blockIdx.x / S) * BN, k0 = rank * KS;

    // 1. Constants first: the weight slice, the norm's parameters.
    for (int c = tid; c < KS * (BN / 8); c += NT) {
        int r = c / (BN / 8), c8 = (c % (BN / 8)) * 8;
        cp16(sB + r * BP + c8, g.W + (size_t)(k0 + r) * g.N + n0 + c8, true);
    }
    cp_commit();
    if (LN)
        for (int k = tid; k < KS; k += NT) { sG[k] = __bfloat162float(g.gamma[k0 + k]); sBt[k] = __bfloat162float(g.beta[k0 + k]); }
    if (PDL) pdl_wait();
    // 2. A's slice: rows past M are zeros.
    for (int c = tid; c < 64 * (KS / 8); c += NT) {
        int r = c / (KS / 8), c8 = (c % (KS / 8)) * 8;
        bool v = r < g.M;
        cp16(sA + r * AP + c8, g.A + (size_t)(v ? r : 0) * g.K + k0 + c8, v);
    }
    cp_commit();
    cp_wait_all();
    __syncthreads();

    if (LN) {
        // TPR threads a row, each every TPR-th chunk of 8 (16-byte loads).
        constexpr int TPR = NT / 64, CH = KS / 8 / TPR;
        const int row = tid / TPR, part = tid % TPR;
        uint4 *ar = (uint4 *)(sA + row * AP);
        float s = 0.f;
#pragma unroll 4
        for (int i = 0; i < CH; ++i) {
            uint4 u = ar[part + i * TPR];
            const bf16 *e = (const bf16 *)&u;
            for (int j = 0; j < 8; ++j) s += __bfloat162float(e[j]);
        }
        for (int o = TPR / 2; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (part == 0) sSum[row] = s;
        cluster_sync();
        float tot = 0.f;
        for (int q = 0; q < S; ++q) tot += ld_dsmem_f32(mapa(sSum + row, q));
        const float mean = tot / g.K;
        float v = 0.f;
#pragma unroll 4
        for (int i = 0; i < CH; ++i) {
            uint4 u = ar[part + i * TPR];
            const bf16 *e = (const bf16 *)&u;
            for (int j = 0; j < 8; ++j) { float d = __bfloat162float(e[j]) - mean; v += d * d; }
        }
        for (int o = TPR / 2; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (part == 0) sSq[row] = v;
        cluster_sync();
        float vt = 0.f;
        for (int q = 0; q < S; ++q) vt += ld_dsmem_f32(mapa(sSq + row, q));
        const float rstd = rsqrtf(vt / g.K + g.eps);
#pragma unroll 4
        for (int i = 0; i < CH; ++i) {
            const int c = part + i * TPR;
            uint4 u = ar[c];
            bf16 *e = (bf16 *)&u;
            for (int j = 0; j < 8; ++j)
                e[j] = __float2bfloat16((__bfloat162float(e[j]) - mean) * rstd * sG[c * 8 + j] + sBt[c * 8 + j]);
            ar[c] = u;
        }
        __syncthreads();
    }

    // 3. The products: warp (wm, wn) owns rows 16 wm.. and columns 64 wn..
    const int wm = warp & 3, wn = warp >> 2;
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll 4
    for (int kk = 0; kk < KS; kk += 16) {
        unsigned a0, a1, a2, a3;
        ldm_x4(a0, a1, a2, a3, sA + (wm * 16 + (lane & 15)) * AP + kk + (lane >> 4) * 8);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            unsigned b0, b1, b2, b3;
            ldm_x4_t(b0, b1, b2, b3, sB + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * BP + wn * 64 + j * 16 + (lane >> 4) * 8);
            mma16816(acc[2 * j], a0, a1, a2, a3, b0, b1);
            mma16816(acc[2 * j + 1], a0, a1, a2, a3, b2, b3);
        }
    }
    if (PDL) pdl_trigger();
#pragma unroll
    for (int j = 0; j < (warp < 4 * WN ? 8 : 0); ++j) {
        int r = wm * 16 + (lane >> 2), c = wn * 64 + j * 8 + (lane & 3) * 2;
        sC[r * CP + c] = acc[j][0]; sC[r * CP + c + 1] = acc[j][1];
        sC[(r + 8) * CP + c] = acc[j][2]; sC[(r + 8) * CP + c + 1] = acc[j][3];
    }
    cluster_sync();

    // 4. This block's rows of the sum, in rank order, with the epilogue.
    const int rows = (64 + S - 1) / S, r0 = rank * rows, r1 = min(min(r0 + rows, 64), g.M);
    unsigned base[S];
#pragma unroll
    for (int q = 0; q < S; ++q) base[q] = mapa(sC, q);
    for (int e = tid; e < (r1 - r0) * (BN / 4); e += NT) {
        int r = r0 + e / (BN / 4), c = (e % (BN / 4)) * 4;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int q = 0; q < S; ++q) {
            float4 p = ld_dsmem_f4(base[q] + (unsigned)(r * CP + c) * 4u);
            s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
        }
        float o[4] = {s.x, s.y, s.z, s.w};
        const int n = n0 + c;
        if (g.bias) {
            uint2 bv = *(const uint2 *)(g.bias + n);
            const bf16 *bb = (const bf16 *)&bv;
            for (int i = 0; i < 4; ++i) o[i] += __bfloat162float(bb[i]);
        }
        if (GELU) for (int i = 0; i < 4; ++i) o[i] = gelu_tanh(o[i]);
        if (g.resid) {
            uint2 rv = *(const uint2 *)(g.resid + (size_t)r * g.N + n);
            const bf16 *rr = (const bf16 *)&rv;
            for (int i = 0; i < 4; ++i) o[i] += __bfloat162float(rr[i]);
        }
        __align__(8) bf16 out[4];
        for (int i = 0; i < 4; ++i) out[i] = __float2bfloat16(o[i]);
        *(uint2 *)(g.C + (size_t)r * g.N + n) = *(uint2 *)out;
    }
    cluster_sync(); // no block leaves while another reads its tile
}

// ---------------------------------------------------------------------
// Version 2: the same cluster split-K, loads by TMA (one thread issues a
// box per 64-column panel, 128-byte swizzle, completion on an mbarrier),
// the residual and bias fetched into shared memory before the products,
// and the layernorm's statistics exchanged once (shifted sums: s1 =
// sum(x - x0), s2 = sum((x - x0)^2), x0 the row's first element).
struct Args2 {
    Args g;
};
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_expect(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned phase) {
    asm volatile("{\n\t.reg .pred p;\n\tWAIT_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t@!p bra WAIT_%=;\n\t}" ::"r"(smem_u32(b)), "r"(phase) : "memory");
}
__device__ __forceinline__ void tma2d(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *b) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_u32(dst)), "l"(m), "r"(c0), "r"(c1), "r"(smem_u32(b)) : "memory");
}
// Element (r, c) of a 64-column panel with 128-byte rows, 128-byte swizzle.
__device__ __forceinline__ int swz(int r, int c) { return r * 64 + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7); }

// wgmma m64n64k16, A K-major and W N-major (transposed) by descriptor,
// both in 128-byte-swizzled panels (codegen/cuda/wgmma.cuh.inc's layout).
__device__ __forceinline__ unsigned long long wg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((saddr & 0x3ffffu) >> 4) | (unsigned long long)((lbo >> 4) & 0x3fffu) << 16 |
           (unsigned long long)((sbo >> 4) & 0x3fffu) << 32 | 1ull << 62;
}
__device__ __forceinline__ void wg_m64n64(float (&d)[8][4], unsigned long long a, unsigned long long b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(a), "l"(b), "r"(1));
}
__device__ __forceinline__ void wg_pin(float (&d)[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
}

// PW: warpgroups a column tile's products take: the block has 128 WN PW
// threads, of which the first 128 WN issue the products and all run the
// layernorm prologue and the epilogue (session 12: does the prologue stop
// costing more than the layernorm kernel with more warps to hide it?).
template <int WN, int KS, int S, bool LN, bool GELU, bool PDL, bool WG = false, int PW = 1, bool ST = false>
__global__ void __launch_bounds__(128 * WN * PW) skinny2(const __grid_constant__ CUtensorMap tA, const __grid_constant__ CUtensorMap tW, Args g) {
    constexpr int BN = 64 * WN, NT = 128 * WN * PW, CP = BN + 4, KP = KS / 64, BR = KS <= 256 ? KS : KS / 2;
    constexpr int ROWS = (64 + S - 1) / S;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    bf16 *sB = (bf16 *)smem;                        // WN panels [KS][64]
    bf16 *sA = sB + WN * KS * 64;                   // KP panels [64][64]
    float *sC = (float *)(sA + KP * 64 * 64);       // [64][CP]
    bf16 *sR = (bf16 *)(sC + 64 * CP);              // [ROWS][BN] residual rows
    bf16 *sBias = sR + ROWS * BN;                   // [BN]
    float *sSt = (float *)(sBias + BN);             // [64][2] shifted sums
    float *sG = sSt + 128, *sBt = sG + KS;          // [KS]
    uint64_t *bar = (uint64_t *)(sBt + KS);         // [2]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned rank = cluster_rank();
    const int n0 = (blockIdx.x / S) * BN, k0 = rank * KS;
    const int r0 = rank * ROWS, r1 = min(min(r0 + ROWS, 64), g.M);

    if (tid == 0) {
        mbar_init(&bar[0], 1); mbar_init(&bar[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect(&bar[0], WN * KS * 64 * 2);
        for (int w = 0; w < WN; ++w)
            for (int h = 0; h < KS / BR; ++h) tma2d(sB + w * KS * 64 + h * BR * 64, &tW, n0 + 64 * w, k0 + h * BR, &bar[0]);
    }
    if (g.bias)
        for (int c = tid; c < BN / 8; c += NT) cp16(sBias + c * 8, g.bias + n0 + c * 8, true);
    /* The norm's weight and bias of this slice, constants: before the wait
     * (PW > 1 only: the PW = 1 kernels are session 11's, unchanged). */
    bf16 *sGb = (bf16 *)sG, *sBb = (bf16 *)sBt;
    if (LN && PW > 1)
        for (int c = tid; c < KS / 8; c += NT) {
            cp16(sGb + c * 8, g.gamma + k0 + c * 8, true);
            cp16(sBb + c * 8, g.beta + k0 + c * 8, true);
        }
    if (PDL) pdl_wait();
    if (tid == 0) {
        mbar_expect(&bar[1], KP * 64 * 64 * 2);
        for (int p = 0; p < KP; ++p) tma2d(sA + p * 64 * 64, &tA, k0 + p * 64, 0, &bar[1]);
    }
    if (g.resid)
        for (int c = tid; c < (r1 - r0) * (BN / 8); c += NT) {
            int r = c / (BN / 8), c8 = (c % (BN / 8)) * 8;
            cp16(sR + r * BN + c8, g.resid + (size_t)(r0 + r) * g.N + n0 + c8, true);
        }
    cp_commit();
    /* ST: this thread's share of its row's partial statistics, fetched
     * while the slices arrive (TPR threads a row, np / TPR pairs each). */
    constexpr int PQ = (16 + NT / 64 - 1) / (NT / 64); // np <= 16
    float2 pst[PQ];
    if (LN && ST) {
        constexpr int TPR = NT / 64;
        const int row = tid / TPR, part = tid % TPR;
#pragma unroll
        for (int i = 0; i < PQ; ++i) {
            const int q = part + i * TPR;
            pst[i] = q < g.np && row < g.M ? *(const float2 *)(g.stats + ((size_t)row * g.np + q) * 2) : make_float2(0.f, 0.f);
        }
    }
    float x0 = 0.f; // the row's shift, fetched while the slices arrive
    if (LN && !ST && tid % (NT / 64) == 0 && tid / (NT / 64) < g.M) x0 = __bfloat162float(g.A[(size_t)(tid / (NT / 64)) * g.K]);
    if (LN && PW > 1) cp_wait_all();
    __syncthreads(); // the barriers' init (and the norm's constants) before anyone waits
    mbar_wait(&bar[1], 0);

    if (LN) {
        constexpr int TPR = NT / 64, CH = KS / 8 / TPR;
        const int row = tid / TPR, part = tid % TPR;
        x0 = __shfl_sync(0xffffffffu, x0, lane & ~(TPR - 1));
        float mean, rstd;
        if (ST) {
            /* Chan's combination of np slices of c = K / np columns each:
             * the mean of the means, and M2 = sum M2_q + c sum (mean_q - mean)^2. */
            const float c = (float)g.K / g.np;
            float sm = 0.f;
#pragma unroll
            for (int i = 0; i < PQ; ++i) sm += part + i * TPR < g.np ? pst[i].x : 0.f;
            for (int o = TPR / 2; o; o >>= 1) sm += __shfl_xor_sync(0xffffffffu, sm, o);
            mean = sm / g.np;
            float m2 = 0.f;
#pragma unroll
            for (int i = 0; i < PQ; ++i)
                if (part + i * TPR < g.np) { const float d = pst[i].x - mean; m2 += pst[i].y + c * d * d; }
            for (int o = TPR / 2; o; o >>= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
            rstd = rsqrtf(m2 / g.K + g.eps);
        } else {
        float s1 = 0.f, s2 = 0.f;
#pragma unroll 4
        for (int i = 0; i < CH; ++i) {
            /* Chunk ch of the row, read at physical chunk (ch + row) % 8 of its
             * panel: every row at the same physical chunk made 16-way bank
             * conflicts (run 3 of session 11). */
            const int ch = part + i * TPR, p = ch >> 3, q = (ch + row) & 7;
            uint4 u = *(const uint4 *)(sA + p * 4096 + row * 64 + q * 8);
            const bf16 *e = (const bf16 *)&u;
#pragma unroll
            for (int j = 0; j < 8; ++j) { float d = __bfloat162float(e[j]) - x0; s1 += d; s2 += d * d; }
        }
        for (int o = TPR / 2; o; o >>= 1) { s1 += __shfl_xor_sync(0xffffffffu, s1, o); s2 += __shfl_xor_sync(0xffffffffu, s2, o); }
        if (part == 0) { sSt[row * 2] = s1; sSt[row * 2 + 1] = s2; }
        cluster_sync();
        float t1 = 0.f, t2 = 0.f;
        for (int q = 0; q < S; ++q) {
            unsigned a = mapa(sSt + row * 2, q);
            t1 += ld_dsmem_f32(a); t2 += ld_dsmem_f32(a + 4);
        }
        const float m1 = t1 / g.K, var = fmaxf(t2 / g.K - m1 * m1, 0.f);
        mean = x0 + m1;
        rstd = rsqrtf(var + g.eps);
        }
#pragma unroll 4
        for (int i = 0; i < CH; ++i) {
            const int ch = part + i * TPR, p = ch >> 3, q = (ch + row) & 7, col = p * 64 + ((q ^ (row & 7)) << 3);
            uint4 *up = (uint4 *)(sA + p * 4096 + row * 64 + q * 8);
            uint4 u = *up;
            bf16 *e = (bf16 *)&u;
            const uint4 gu = PW > 1 ? *(const uint4 *)(sGb + col) : *(const uint4 *)(g.gamma + k0 + col),
                        bu = PW > 1 ? *(const uint4 *)(sBb + col) : *(const uint4 *)(g.beta + k0 + col);
            const bf16 *ge = (const bf16 *)&gu, *be = (const bf16 *)&bu;
#pragma unroll
            for (int j = 0; j < 8; ++j) e[j] = __float2bfloat16((__bfloat162float(e[j]) - mean) * rstd * __bfloat162float(ge[j]) + __bfloat162float(be[j]));
            *up = u;
        }
    }
    if (LN && WG) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mbar_wait(&bar[0], 0);
    __syncthreads();

    const int wm = warp & 3, wn = warp >> 2;
    const bf16 *sBw = sB + wn * KS * 64;
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    if (WG && warp < 4 * WN) {
        wg_pin(acc);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < KS; kk += 16) {
            const unsigned long long da = wg_desc(smem_u32(sA + (kk >> 6) * 4096) + ((kk & 63) >> 4) * 32, 16, 1024);
            const unsigned long long db = wg_desc(smem_u32(sBw) + kk * 128, KS * 128, 1024);
            wg_m64n64(acc, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        wg_pin(acc);
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        wg_pin(acc);
    }
#pragma unroll 4
    for (int kk = 0; kk < (WG || warp >= 4 * WN ? 0 : KS); kk += 16) {
        unsigned a0, a1, a2, a3;
        ldm_x4(a0, a1, a2, a3, sA + (kk >> 6) * 4096 + swz(wm * 16 + (lane & 15), (kk & 63) + (lane >> 4) * 8));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            unsigned b0, b1, b2, b3;
            ldm_x4_t(b0, b1, b2, b3, sBw + swz(kk + (lane & 7) + ((lane >> 3) & 1) * 8, j * 16 + (lane >> 4) * 8));
            mma16816(acc[2 * j], a0, a1, a2, a3, b0, b1);
            mma16816(acc[2 * j + 1], a0, a1, a2, a3, b2, b3);
        }
    }
    if (PDL) pdl_trigger();
#pragma unroll
    for (int j = 0; j < (warp < 4 * WN ? 8 : 0); ++j) {
        int r = wm * 16 + (lane >> 2), c = wn * 64 + j * 8 + (lane & 3) * 2;
        *(float2 *)(sC + r * CP + c) = make_float2(acc[j][0], acc[j][1]);
        *(float2 *)(sC + (r + 8) * CP + c) = make_float2(acc[j][2], acc[j][3]);
    }
    cp_wait_all();
    cluster_sync();

    unsigned base[S];
#pragma unroll
    for (int q = 0; q < S; ++q) base[q] = mapa(sC, q);
    for (int e = tid; e < (r1 - r0) * (BN / 4); e += NT) {
        int rr = e / (BN / 4), r = r0 + rr, c = (e % (BN / 4)) * 4;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int q = 0; q < S; ++q) {
            float4 p = ld_dsmem_f4(base[q] + (unsigned)(r * CP + c) * 4u);
            s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
        }
        float o[4] = {s.x, s.y, s.z, s.w};
        if (g.bias) for (int i = 0; i < 4; ++i) o[i] += __bfloat162float(sBias[c + i]);
        if (GELU) for (int i = 0; i < 4; ++i) o[i] = gelu_tanh(o[i]);
        if (g.resid) for (int i = 0; i < 4; ++i) o[i] += __bfloat162float(sR[rr * BN + c + i]);
        __align__(8) bf16 out[4];
        for (int i = 0; i < 4; ++i) out[i] = __float2bfloat16(o[i]);
        *(uint2 *)(g.C + (size_t)r * g.N + n0 + c) = *(uint2 *)out;
        if (ST && !LN && WN == 1) {
            /* The row's statistics over this 64-column slice, from the
             * rounded values (what a layernorm reading C sees): 16
             * consecutive lanes hold the slice (all active or none). */
            const unsigned half = 0xffffu << (lane & 16);
            float v[4], sm = 0.f, m2 = 0.f;
            for (int i = 0; i < 4; ++i) { v[i] = __bfloat162float(out[i]); sm += v[i]; }
            for (int o2 = 8; o2; o2 >>= 1) sm += __shfl_xor_sync(half, sm, o2);
            const float mean = sm * (1.f / 64);
            for (int i = 0; i < 4; ++i) m2 += (v[i] - mean) * (v[i] - mean);
            for (int o2 = 8; o2; o2 >>= 1) m2 += __shfl_xor_sync(half, m2, o2);
            if ((lane & 15) == 0) *(float2 *)((float *)g.stats + ((size_t)r * g.np + n0 / 64) * 2) = make_float2(mean, m2);
        }
    }
    cluster_sync();
}

// A cluster launch that does nothing but its two cluster barriers: the
// floor of a launch of this shape in a graph.
template <int S, bool PDL>
__global__ void __launch_bounds__(128) null_cluster(Args g) {
    if (PDL) pdl_wait();
    cluster_sync();
    if (PDL) pdl_trigger();
    cluster_sync();
    if (g.M < 0) g.C[threadIdx.x] = g.A[0];
}

static CUtensorMap make_tmap(const bf16 *base, int cols, int rows, int box_cols, int box_rows) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("tensor map: %d\n", (int)r); exit(1); }
    return m;
}

template <int WN, int KS, int S, bool LN, bool GELU, bool WG = false, int PW = 1, bool ST = false>
static void launch2(const Args &a, cudaStream_t st, bool pdl) {
    constexpr int BN = 64 * WN, ROWS = (64 + S - 1) / S, BR = KS <= 256 ? KS : KS / 2;
    auto kern = pdl ? skinny2<WN, KS, S, LN, GELU, true, WG, PW, ST> : skinny2<WN, KS, S, LN, GELU, false, WG, PW, ST>;
    size_t sm = 1024 + (size_t)WN * KS * 64 * 2 + KS / 64 * 8192 + 64 * (BN + 4) * 4 + ROWS * BN * 2 + BN * 2 + 512 + 2 * KS * 4 + 16;
    static bool set[2];
    if (!set[pdl]) {
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        if (S > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        set[pdl] = true;
    }
    if (a.K != KS * S || a.N % BN || KS % 64) { printf("bad config\n"); exit(1); }
    // Tensor maps per call here (a program makes them once).
    CUtensorMap tA = make_tmap(a.A, a.K, a.M, 64, 64), tW = make_tmap(a.W, a.N, a.K, 64, BR);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(a.N / BN * S); cfg.blockDim = dim3(128 * WN * PW); cfg.dynamicSmemBytes = sm; cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = S; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 2 : 1;
    CK(cudaLaunchKernelEx(&cfg, kern, tA, tW, a));
}
template <int S>
static void launch_null(const Args &a, cudaStream_t st, bool pdl) {
    auto kern = pdl ? null_cluster<S, true> : null_cluster<S, false>;
    static bool set[2];
    if (!set[pdl] && S > 8) { CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)); set[pdl] = true; }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(a.N / 64 * S); cfg.blockDim = dim3(128); cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = S; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 2 : 1;
    CK(cudaLaunchKernelEx(&cfg, kern, a));
}

template <int WN, int KS, int S, bool LN, bool GELU, bool PDL>
static size_t smem_of() { return (size_t)KS * (64 * WN + 8) * 2 + 64 * (KS + 8) * 2 + 64 * (64 * WN + 4) * 4 + 128 * 4 + 2 * KS * 4; }

typedef void (*launch_fn)(const Args &, cudaStream_t, bool pdl);
template <int WN, int KS, int S, bool LN, bool GELU>
static void launch(const Args &a, cudaStream_t st, bool pdl) {
    auto kern = pdl ? skinny<WN, KS, S, LN, GELU, true> : skinny<WN, KS, S, LN, GELU, false>;
    size_t sm = smem_of<WN, KS, S, LN, GELU, true>();
    static bool set[2];
    if (!set[pdl]) {
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        if (S > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        set[pdl] = true;
    }
    if (a.K != KS * S || a.N % (64 * WN)) { printf("bad config\n"); exit(1); }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(a.N / (64 * WN) * S); cfg.blockDim = dim3(128 * WN); cfg.dynamicSmemBytes = sm; cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = S; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 2 : 1;
    CK(cudaLaunchKernelEx(&cfg, kern, a));
}

// The partial statistics ST reads: per row and 64-column slice, the mean
// and centred sum of squares (what the kernel writing x would leave).
__global__ void slice_stats(const bf16 *x, float *st, int M, int K) {
    int row = blockIdx.x, q = threadIdx.x; // K / 64 threads
    if (row >= M || q * 64 >= K) return;
    const bf16 *xr = x + (size_t)row * K + q * 64;
    float s = 0.f;
    for (int k = 0; k < 64; ++k) s += __bfloat162float(xr[k]);
    float m = s / 64, v = 0.f;
    for (int k = 0; k < 64; ++k) { float d = __bfloat162float(xr[k]) - m; v += d * d; }
    st[((size_t)row * (K / 64) + q) * 2] = m;
    st[((size_t)row * (K / 64) + q) * 2 + 1] = v;
}

// The baseline's layernorm: a warp a row, f32, rounded to bf16 (as fusec's).
// With PDL (fusec's layernorm as the block's graph launches it) a
// programmatic dependent: waits for the kernel before, lets the next start.
template <bool PDL>
__global__ void ln_rows(const bf16 *x, const bf16 *gm, const bf16 *bt, bf16 *y, int M, int K, float eps) {
    if (PDL) {
        pdl_wait();
        pdl_trigger();
    }
    int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= M) return;
    const bf16 *xr = x + (size_t)row * K;
    float s = 0.f;
    for (int k = lane; k < K; k += 32) s += __bfloat162float(xr[k]);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float mean = s / K, v = 0.f;
    for (int k = lane; k < K; k += 32) { float d = __bfloat162float(xr[k]) - mean; v += d * d; }
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    float rstd = rsqrtf(v / K + eps);
    for (int k = lane; k < K; k += 32)
        y[(size_t)row * K + k] = __float2bfloat16((__bfloat162float(xr[k]) - mean) * rstd * __bfloat162float(gm[k]) + __bfloat162float(bt[k]));
}
#define ln_kernel ln_rows<false>
#define ln_kernel_pdl ln_rows<true>

struct Lt {
    cublasLtHandle_t h;
    void *ws;
    size_t wsz = 32 << 20;
};
struct LtGemm {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    Args a;
    float beta;
};
static LtGemm lt_make(Lt &lt, const Args &a, bool gelu) {
    LtGemm g; g.a = a; g.beta = a.resid ? 1.f : 0.f;
    CL(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t n = CUBLAS_OP_N;
    CL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n));
    CL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
    cublasLtEpilogue_t ep = a.bias ? (gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS) : (gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
    CL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    if (a.bias) {
        CL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias));
        cudaDataType_t bt = CUDA_R_16BF;
        CL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    // Column-major D[N, M] = W[N, K] x A[K, M].
    CL(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, a.N, a.K, a.N));
    CL(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, a.K, a.M, a.K));
    CL(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, a.N, a.M, a.N));
    cublasLtMatmulPreference_t pref;
    CL(cublasLtMatmulPreferenceCreate(&pref));
    CL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.wsz, sizeof lt.wsz));
    cublasLtMatmulHeuristicResult_t r[1]; int nr = 0;
    CL(cublasLtMatmulAlgoGetHeuristic(lt.h, g.op, g.la, g.lb, g.lc, g.lc, pref, 1, r, &nr));
    if (!nr) { printf("no algo\n"); exit(1); }
    g.algo = r[0].algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return g;
}
static void lt_run(Lt &lt, LtGemm &g, cudaStream_t st) {
    float alpha = 1.f;
    const void *C = g.a.resid ? (const void *)g.a.resid : (const void *)g.a.C;
    CL(cublasLtMatmul(lt.h, g.op, &alpha, g.a.W, g.la, g.a.A, g.lb, &g.beta, C, g.lc, g.a.C, g.lc, &g.algo, lt.ws, lt.wsz, st));
}

static std::vector<float> host_bf(const bf16 *d, size_t n) {
    std::vector<bf16> h(n); CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n); for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]); return f;
}
static bf16 *dev_rand(size_t n, float scale, float off, unsigned seed) {
    std::vector<bf16> h(n); unsigned s = seed;
    for (size_t i = 0; i < n; ++i) { s = s * 1664525u + 1013904223u; h[i] = __float2bfloat16(off + scale * ((s >> 8) / 16777216.f * 2.f - 1.f)); }
    bf16 *d; CK(cudaMalloc(&d, n * 2)); CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice)); return d;
}
// float64 reference of act(LN?(A) W + bias) + resid, LN output rounded to bf16.
static double check(const Args &a, bool ln, bool gelu, const char *what) {
    auto A = host_bf(a.A, (size_t)a.M * a.K), W = host_bf(a.W, (size_t)a.K * a.N), C = host_bf(a.C, (size_t)a.M * a.N);
    std::vector<float> b, r, gm, bt;
    if (a.bias) b = host_bf(a.bias, a.N);
    if (a.resid) r = host_bf(a.resid, (size_t)a.M * a.N);
    if (ln) {
        gm = host_bf(a.gamma, a.K); bt = host_bf(a.beta, a.K);
        for (int m = 0; m < a.M; ++m) {
            double s = 0, v = 0;
            for (int k = 0; k < a.K; ++k) s += A[(size_t)m * a.K + k];
            double mean = s / a.K;
            for (int k = 0; k < a.K; ++k) { double d = A[(size_t)m * a.K + k] - mean; v += d * d; }
            double rstd = 1.0 / sqrt(v / a.K + a.eps);
            for (int k = 0; k < a.K; ++k) A[(size_t)m * a.K + k] = __bfloat162float(__float2bfloat16((float)((A[(size_t)m * a.K + k] - mean) * rstd * gm[k] + bt[k])));
        }
    }
    double worst = 0;
    for (int m = 0; m < a.M; ++m)
        for (int n = 0; n < a.N; ++n) {
            double s = 0;
            for (int k = 0; k < a.K; ++k) s += (double)A[(size_t)m * a.K + k] * W[(size_t)k * a.N + n];
            if (a.bias) s += b[n];
            if (gelu) s = 0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
            if (a.resid) s += r[(size_t)m * a.N + n];
            double e = fabs(C[(size_t)m * a.N + n] - s) / (1.0 + fabs(s));
            worst = std::max(worst, e);
        }
    printf("check %-28s M=%d N=%d K=%d: max rel err %.2e %s\n", what, a.M, a.N, a.K, worst, worst < 2e-2 ? "ok" : "FAIL");
    return worst;
}

// us per launch: a graph of R launches (stream capture: PDL edges where
// the launches ask for them), replayed ITER times back to back.
template <class F>
static double time_graph(cudaStream_t st, int R, F body) {
    cudaGraph_t gr; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < R; ++i) body();
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<double> v;
    for (int rep = 0; rep < 5; ++rep) {
        const int ITER = 100;
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < ITER; ++i) CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms * 1e3 / ITER / R);
    }
    std::sort(v.begin(), v.end());
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    return v[2];
}

int main(int argc, char **argv) {
    const int M = argc > 1 ? atoi(argv[1]) : 64, R = 20;
    CK(cudaSetDevice(0));
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    Lt lt; CL(cublasLtCreate(&lt.h)); CK(cudaMalloc(&lt.ws, lt.wsz));
    const int D = 768, F = 3072;
    bf16 *x = dev_rand((size_t)M * D, 1.f, 0.3f, 1), *g1 = dev_rand(D, 0.2f, 1.f, 2), *b1 = dev_rand(D, 0.1f, 0.f, 3);
    bf16 *Wqkv = dev_rand((size_t)D * 3 * D, 0.05f, 0.f, 4), *bqkv = dev_rand(3 * D, 0.1f, 0.f, 5);
    bf16 *Wo = dev_rand((size_t)D * D, 0.05f, 0.f, 6), *bo = dev_rand(D, 0.1f, 0.f, 7);
    bf16 *Wfc = dev_rand((size_t)D * F, 0.05f, 0.f, 8), *bfc = dev_rand(F, 0.1f, 0.f, 9);
    bf16 *Wp = dev_rand((size_t)F * D, 0.03f, 0.f, 10), *bp = dev_rand(D, 0.1f, 0.f, 11);
    bf16 *attn = dev_rand((size_t)M * D, 1.f, 0.f, 12);
    bf16 *ln1, *qkv, *h, *ln2, *fc, *y;
    CK(cudaMalloc(&ln1, (size_t)M * D * 2)); CK(cudaMalloc(&qkv, (size_t)M * 3 * D * 2)); CK(cudaMalloc(&h, (size_t)M * D * 2));
    CK(cudaMalloc(&ln2, (size_t)M * D * 2)); CK(cudaMalloc(&fc, (size_t)M * F * 2)); CK(cudaMalloc(&y, (size_t)M * D * 2));
    const float eps = 1e-5f;
    // The block's four GEMMs (attention's output is a fixed input here).
    Args aq = {x, Wqkv, bqkv, nullptr, g1, b1, qkv, M, 3 * D, D, eps};      // LN1 + QKV
    Args ao = {attn, Wo, bo, x, nullptr, nullptr, h, M, D, D, eps};         // out proj + residual
    Args af = {h, Wfc, bfc, nullptr, g1, b1, fc, M, F, D, eps};             // LN2 + fc + gelu
    Args ap = {fc, Wp, bp, h, nullptr, nullptr, y, M, D, F, eps};           // fc2 + residual
    // The same GEMMs reading the layernorms' outputs (the baseline).
    Args lq = aq, lf = af; lq.A = ln1; lf.A = ln2;
    // Session 14: LN2's statistics from the kernel before (ST).
    float *hst; CK(cudaMalloc(&hst, (size_t)M * (D / 64) * 2 * sizeof(float)));
    Args afs = af; afs.stats = hst; afs.np = D / 64;
    LtGemm Lq = lt_make(lt, lq, false), Lo = lt_make(lt, ao, false), Lf = lt_make(lt, lf, true), Lp = lt_make(lt, ap, false);
    auto ln1k = [&] { ln_kernel<<<(M + 7) / 8, 256, 0, st>>>(x, g1, b1, ln1, M, D, eps); };
    auto ln2k = [&] { ln_kernel<<<(M + 7) / 8, 256, 0, st>>>(h, g1, b1, ln2, M, D, eps); };

    struct Cfg { const char *name; launch_fn f; const Args *a; bool ln, gelu; };
    Cfg cfgs[] = {
        {"qkv  LN WN1 S3 (108 blk)", launch<1, 256, 3, true, false>, &aq, true, false},
        {"qkv  LN WN1 S4 (144 blk)", launch<1, 192, 4, true, false>, &aq, true, false},
        {"qkv  LN WN2 S6 (108 blk)", launch<2, 128, 6, true, false>, &aq, true, false},
        {"qkv  LN WN2 S4 (72 blk)", launch<2, 192, 4, true, false>, &aq, true, false},
        {"qkv  noLN WN1 S3", launch<1, 256, 3, false, false>, &lq, false, false},
        {"out  WN1 S8 (96 blk)", launch<1, 96, 8, false, false>, &ao, false, false},
        {"out  WN1 S12 (144 blk)", launch<1, 64, 12, false, false>, &ao, false, false},
        {"out  WN2 S8 (48 blk)", launch<2, 96, 8, false, false>, &ao, false, false},
        {"out  WN1 S6 (72 blk)", launch<1, 128, 6, false, false>, &ao, false, false},
        {"fc   LN WN1 S2 (96 blk)", launch<1, 384, 2, true, true>, &af, true, true},
        {"fc   LN WN1 S3 (144 blk)", launch<1, 256, 3, true, true>, &af, true, true},
        {"fc   LN WN2 S4 (96 blk)", launch<2, 192, 4, true, true>, &af, true, true},
        {"fc   noLN WN1 S2", launch<1, 384, 2, false, true>, &lf, false, true},
        {"fc2  WN1 S8 (96 blk)", launch<1, 384, 8, false, false>, &ap, false, false},
        {"fc2  WN1 S12 (144 blk)", launch<1, 256, 12, false, false>, &ap, false, false},
        {"fc2  WN1 S16 (192 blk)", launch<1, 192, 16, false, false>, &ap, false, false},
        {"fc2  WN2 S16 (96 blk)", launch<2, 192, 16, false, false>, &ap, false, false},
        {"fc2  WN2 S8 (48 blk)", launch<2, 384, 8, false, false>, &ap, false, false},
        // Version 2 (TMA loads, one statistics exchange), from index 18.
        {"v2 qkv LN S3 (108 blk)", launch2<1, 256, 3, true, false>, &aq, true, false},
        {"v2 qkv LN S4 (144 blk)", launch2<1, 192, 4, true, false>, &aq, true, false},
        {"v2 qkv LN WN2 S6 (108 blk)", launch2<2, 128, 6, true, false>, &aq, true, false},
        {"v2 qkv noLN S3", launch2<1, 256, 3, false, false>, &lq, false, false},
        {"v2 qkv noLN S2 (72 blk)", launch2<1, 384, 2, false, false>, &lq, false, false},
        {"v2 out S6 (72 blk)", launch2<1, 128, 6, false, false>, &ao, false, false},
        {"v2 out S12 (144 blk)", launch2<1, 64, 12, false, false>, &ao, false, false},
        {"v2 out S4 (48 blk)", launch2<1, 192, 4, false, false>, &ao, false, false},
        {"v2 fc LN S2 (96 blk)", launch2<1, 384, 2, true, true>, &af, true, true},
        {"v2 fc LN S3 (144 blk)", launch2<1, 256, 3, true, true>, &af, true, true},
        {"v2 fc LN WN2 S4 (96 blk)", launch2<2, 192, 4, true, true>, &af, true, true},
        {"v2 fc noLN S2", launch2<1, 384, 2, false, true>, &lf, false, true},
        {"v2 fc2 S8 (96 blk)", launch2<1, 384, 8, false, false>, &ap, false, false},
        {"v2 fc2 S12 (144 blk)", launch2<1, 256, 12, false, false>, &ap, false, false},
        {"v2 fc2 S16 (192 blk)", launch2<1, 192, 16, false, false>, &ap, false, false},
        {"v2 fc2 WN2 S16 (96 blk)", launch2<2, 192, 16, false, false>, &ap, false, false},
        // Version 3: version 2 with wgmma products, from index 34.
        {"v3 qkv LN S3 (108 blk)", launch2<1, 256, 3, true, false, true>, &aq, true, false},
        {"v3 qkv LN WN2 S6 (108 blk)", launch2<2, 128, 6, true, false, true>, &aq, true, false},
        {"v3 qkv noLN S3", launch2<1, 256, 3, false, false, true>, &lq, false, false},
        {"v3 qkv noLN S2 (72 blk)", launch2<1, 384, 2, false, false, true>, &lq, false, false},
        {"v3 out S6 (72 blk)", launch2<1, 128, 6, false, false, true>, &ao, false, false},
        {"v3 out S4 (48 blk)", launch2<1, 192, 4, false, false, true>, &ao, false, false},
        {"v3 fc LN S2 (96 blk)", launch2<1, 384, 2, true, true, true>, &af, true, true},
        {"v3 fc LN WN2 S4 (96 blk)", launch2<2, 192, 4, true, true, true>, &af, true, true},
        {"v3 fc noLN S2", launch2<1, 384, 2, false, true, true>, &lf, false, true},
        {"v3 fc2 S8 (96 blk)", launch2<1, 384, 8, false, false, true>, &ap, false, false},
        {"v3 fc2 S12 (144 blk)", launch2<1, 256, 12, false, false, true>, &ap, false, false},
        {"v3 fc2 WN2 S16 (96 blk)", launch2<2, 192, 16, false, false, true>, &ap, false, false},
        // Session 12, from index 46: the layernorm prologue on 1, 2 and 4
        // warpgroups (products on the first), the norm's constants staged
        // before the wait from PW 2.
        {"v3 qkv LN S2 PW1 (72 blk)", launch2<1, 384, 2, true, false, true, 1>, &aq, true, false},
        {"v3 qkv LN S2 PW2 (72 blk)", launch2<1, 384, 2, true, false, true, 2>, &aq, true, false},
        {"v3 qkv LN S2 PW4 (72 blk)", launch2<1, 384, 2, true, false, true, 4>, &aq, true, false},
        {"v3 qkv LN S4 PW4 (144 blk)", launch2<1, 192, 4, true, false, true, 4>, &aq, true, false},
        {"v3 fc LN S2 PW1 (96 blk)", launch2<1, 384, 2, true, true, true, 1>, &af, true, true},
        {"v3 fc LN S2 PW2 (96 blk)", launch2<1, 384, 2, true, true, true, 2>, &af, true, true},
        {"v3 fc LN S2 PW4 (96 blk)", launch2<1, 384, 2, true, true, true, 4>, &af, true, true},
        // Session 14, from index 53: the statistics given (the kernel
        // before leaves them per 64-column slice), the prologue normalizes.
        {"v3 fc LNstats S2 PW1 (96 blk)", launch2<1, 384, 2, true, true, true, 1, true>, &afs, true, true},
        {"v3 fc LNstats S2 PW2 (96 blk)", launch2<1, 384, 2, true, true, true, 2, true>, &afs, true, true},
        {"v3 fc LNstats S2 PW4 (96 blk)", launch2<1, 384, 2, true, true, true, 4, true>, &afs, true, true},
        {"v3 fc LNstats S3 PW4 (144 blk)", launch2<1, 256, 3, true, true, true, 4, true>, &afs, true, true},
    };
    struct Null { const char *name; launch_fn f; } nulls[] = {
        {"null cluster S2 (96 blk)", launch_null<2>}, {"null cluster S8 (96 blk)", launch_null<8>}, {"null cluster S16 (192 blk)", launch_null<16>}};
    // Baseline outputs first, so the checks of the fused kernels read the
    // layernorms' outputs the reference recomputes.
    ln1k(); lt_run(lt, Lo, st); ln2k(); lt_run(lt, Lf, st);
    slice_stats<<<M, D / 64, 0, st>>>(h, hst, M, D);
    CK(cudaStreamSynchronize(st));
    int fails = 0;
    const bool checks = !getenv("SKIP_CHECK");
    for (auto &c : cfgs) {
        if (!checks) break;
        if (getenv("FROM") && &c - cfgs < atoi(getenv("FROM"))) continue;
        c.f(*c.a, st, false); CK(cudaStreamSynchronize(st));
        fails += check(*c.a, c.ln, c.gelu, c.name) >= 2e-2;
        c.f(*c.a, st, true); CK(cudaStreamSynchronize(st));
        fails += check(*c.a, c.ln, c.gelu, c.name) >= 2e-2;
    }
    lt_run(lt, Lq, st); CK(cudaStreamSynchronize(st)); fails += check(lq, false, false, "cublasLt qkv") >= 2e-2;
    lt_run(lt, Lp, st); CK(cudaStreamSynchronize(st)); fails += check(ap, false, false, "cublasLt fc2") >= 2e-2;

    printf("\n%-28s %10s %10s   (us per launch, graph of %d launches back to back)\n", "kernel", "plain", "PDL", R);
    struct LtCase { const char *name; LtGemm *g; } lts[] = {{"cublasLt qkv", &Lq}, {"cublasLt out", &Lo}, {"cublasLt fc", &Lf}, {"cublasLt fc2", &Lp}};
    for (auto &l : lts) printf("%-28s %10.3f\n", l.name, time_graph(st, R, [&] { lt_run(lt, *l.g, st); }));
    printf("%-28s %10.3f\n", "layernorm (baseline)", time_graph(st, R, ln1k));
    const int from = getenv("FROM") ? atoi(getenv("FROM")) : 0, only = getenv("ONLY") ? atoi(getenv("ONLY")) : -1;
    for (auto &c : cfgs) {
        if (&c - cfgs < from || (only >= 0 && &c - cfgs != only)) continue;
        double t0 = time_graph(st, R, [&] { c.f(*c.a, st, false); });
        double t1 = time_graph(st, R, [&] { c.f(*c.a, st, true); });
        printf("%-28s %10.3f %10.3f\n", c.name, t0, t1);
    }
    if (only >= 0) return 0; /* ONLY=N (for a profiler): config N's timing alone */
    for (auto &n : nulls) {
        Args z = ao; z.M = 64; z.N = 768;
        double t0 = time_graph(st, R, [&] { n.f(z, st, false); }), t1 = time_graph(st, R, [&] { n.f(z, st, true); });
        printf("%-28s %10.3f %10.3f\n", n.name, t0, t1);
    }
    // The block's GEMM part, end to end: baseline 6-7 kernels, ours 4.
    const int RB = 5;
    double base = time_graph(st, RB, [&] { ln1k(); lt_run(lt, Lq, st); lt_run(lt, Lo, st); ln2k(); lt_run(lt, Lf, st); lt_run(lt, Lp, st); });
    double ours0 = time_graph(st, RB, [&] { cfgs[0].f(aq, st, false); cfgs[5].f(ao, st, false); cfgs[9].f(af, st, false); cfgs[13].f(ap, st, false); });
    double ours1 = time_graph(st, RB, [&] { cfgs[0].f(aq, st, true); cfgs[5].f(ao, st, true); cfgs[9].f(af, st, true); cfgs[13].f(ap, st, true); });
    printf("\nblock's GEMM part (LN1 QKV OUT LN2 FC FC2), us per block: cuBLASLt + LN kernels %.3f | fused plain %.3f | fused PDL %.3f\n", base, ours0, ours1);
    if (argc > 5) {
        int iq = atoi(argv[2]), io = atoi(argv[3]), iff = atoi(argv[4]), ip = atoi(argv[5]);
        double v0 = time_graph(st, RB, [&] { cfgs[iq].f(aq, st, false); cfgs[io].f(ao, st, false); cfgs[iff].f(af, st, false); cfgs[ip].f(ap, st, false); });
        double v1 = time_graph(st, RB, [&] { cfgs[iq].f(aq, st, true); cfgs[io].f(ao, st, true); cfgs[iff].f(af, st, true); cfgs[ip].f(ap, st, true); });
        printf("block's GEMM part with %s | %s | %s | %s: plain %.3f | PDL %.3f\n", cfgs[iq].name, cfgs[io].name, cfgs[iff].name, cfgs[ip].name, v0, v1);
    }
    {
        /* Session 14: out projection -> LN2 -> fc, against the out
         * projection leaving LN2's statistics -> fc normalizing A itself. */
        Args aos = ao; aos.stats = hst; aos.np = D / 64;
        auto lnp = [&] {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3((M + 7) / 8); cfg.blockDim = dim3(256); cfg.stream = st;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at; cfg.numAttrs = 1;
            CK(cudaLaunchKernelEx(&cfg, ln_kernel_pdl, (const bf16 *)h, (const bf16 *)g1, (const bf16 *)b1, ln2, M, D, eps));
        };
        auto out_plain = launch2<1, 128, 6, false, false, true>;
        auto out_st = launch2<1, 128, 6, false, false, true, 1, true>;
        auto fc_noln = launch2<1, 384, 2, false, true, true>;
        out_st(aos, st, true); CK(cudaStreamSynchronize(st));
        { /* the epilogue's statistics against slice_stats' */
            std::vector<float> a((size_t)M * (D / 64) * 2), b(a.size());
            CK(cudaMemcpy(a.data(), hst, a.size() * 4, cudaMemcpyDeviceToHost));
            slice_stats<<<M, D / 64, 0, st>>>(h, hst, M, D); CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(b.data(), hst, b.size() * 4, cudaMemcpyDeviceToHost));
            double w = 0; for (size_t i = 0; i < a.size(); ++i) w = std::max(w, (double)fabsf(a[i] - b[i]) / (1.0 + fabsf(b[i])));
            printf("epilogue statistics vs slice_stats: max rel diff %.2e %s\n", w, w < 1e-4 ? "ok" : "FAIL");
            fails += w >= 1e-4;
        }
        for (int rep = 0; rep < 3; ++rep) {
            double c0 = time_graph(st, RB, [&] { out_plain(ao, st, true); lnp(); fc_noln(lf, st, true); });
            double c1 = time_graph(st, RB, [&] { out_st(aos, st, true); cfgs[55].f(afs, st, true); });
            double c2 = time_graph(st, RB, [&] { out_st(aos, st, true); cfgs[53].f(afs, st, true); });
            double c3 = time_graph(st, RB, [&] { out_plain(ao, st, true); fc_noln(lf, st, true); });
            printf("chain out->LN2->fc (PDL) %.3f | out+stats->fc LNstats PW4 %.3f | PW1 %.3f | out->fc, no LN at all %.3f  (us per chain)\n", c0, c1, c2, c3);
        }
    }
    printf("fails: %d\n", fails);
    return fails != 0;
}

// gemv_bench.cu - why does the [N, K] GEMV stream Llama-1B's decode weights
// at 2.4-2.8 TB/s (gate/up 67 MB, down 34 MB) when the same kernel streams
// the 525 MB LM head at 4.3 TB/s? (docs/PERF.md, "decode steps"; ncu:
// gate/up 26.8 us for 74.5 MB of DRAM traffic.)
//
// The kernel under test is codegen/cuda/gemv.c's [N, K] form, written out:
// 8 warps a block, COLS weight rows a warp, 8 elements (16 bytes) a lane a
// step of K, the block's warps splitting K SPLIT ways, one row of A (M = 1).
// Variants: COLS 1, 2 (the product's), 4; SPLIT 1, 2, 4; the product's L2
// prefetch of the warp's rows before the loads (PF: in the product it runs
// before griddepcontrol.wait, overlapping the kernel before; here nothing
// runs before it, so it measures its cost, not its gain); and a persistent
// form (a grid of 2 or 4 blocks a SM whose warps stride over the columns).
//
// Each shape's weight is copied enough times to fill 512 MB, and launch i
// reads copy i mod copies, so L2 (50 MB) holds none of it between launches,
// as in a decode step. 200 launches are captured in one CUDA Graph and
// replayed 5 times; the time a launch is the replay's over 200 (it includes
// the graph's launch gaps, about 1 us, which the product's PDL edges hide
// partly). The copy bandwidth of the same run is cudaMemcpy of 512 MB.
//
// Build: nvcc -O3 -arch=sm_90 -std=c++17 gemv_bench.cu -o gemv_bench
// Run:   ./gemv_bench            (prints one table; about 20 s)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x)                                                                             \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float dot8(const uint4 &a, const uint4 &w) {
    const __nv_bfloat162 *x = reinterpret_cast<const __nv_bfloat162 *>(&a), *y = reinterpret_cast<const __nv_bfloat162 *>(&w);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 p = __bfloat1622float2(x[i]), q = __bfloat1622float2(y[i]);
        s = fmaf(p.x, q.x, s);
        s = fmaf(p.y, q.y, s);
    }
    return s;
}

enum { WARPS = 8, STEP = 256 };

// The product's form: warp (g, sw) of the block takes columns c0 .. c0 +
// COLS of group g and the sw-th of SPLIT slices of K.
template <int COLS, int SPLIT, bool PF>
__global__ void __launch_bounds__(256) gemv_nk(const bf16 *__restrict__ A, const bf16 *__restrict__ W, bf16 *__restrict__ Y, int N,
                                               int K) {
    constexpr int G = WARPS / SPLIT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp % G, sw = warp / G;
    const int steps = K / STEP, spw = steps / SPLIT;
    const long long c0 = ((long long)blockIdx.x * G + g) * COLS;
    const bf16 *wr[COLS];
#pragma unroll
    for (int c = 0; c < COLS; c++) wr[c] = c0 + c < N ? W + (c0 + c) * K : nullptr;
    if (PF) {
#pragma unroll
        for (int c = 0; c < COLS; c++)
            if (wr[c])
                for (int e = sw * spw * STEP + lane * 64; e < (sw + 1) * spw * STEP; e += 32 * 64)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[c] + e));
    }
    float acc[COLS];
#pragma unroll
    for (int c = 0; c < COLS; c++) acc[c] = 0.f;
#pragma unroll 8
    for (int st = sw * spw; st < (sw + 1) * spw; st++) {
        const int kk = st * STEP + lane * 8;
        uint4 x[COLS];
#pragma unroll
        for (int c = 0; c < COLS; c++) x[c] = wr[c] ? *reinterpret_cast<const uint4 *>(wr[c] + kk) : make_uint4(0, 0, 0, 0);
        const uint4 av = *reinterpret_cast<const uint4 *>(A + kk);
#pragma unroll
        for (int c = 0; c < COLS; c++) acc[c] += dot8(av, x[c]);
    }
#pragma unroll
    for (int c = 0; c < COLS; c++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
    if (SPLIT > 1) {
        __shared__ float red[SPLIT][G][COLS];
        if (lane == 0)
#pragma unroll
            for (int c = 0; c < COLS; c++) red[sw][g][c] = acc[c];
        __syncthreads();
        if (sw != 0 || lane != 0) return;
#pragma unroll
        for (int c = 0; c < COLS; c++) {
            float v = 0.f;
            for (int q = 0; q < SPLIT; q++) v += red[q][g][c];
            acc[c] = v;
        }
    } else if (lane != 0)
        return;
#pragma unroll
    for (int c = 0; c < COLS; c++)
        if (wr[c]) Y[c0 + c] = __float2bfloat16(acc[c]);
}

// Persistent: every warp of a grid of a few blocks a SM strides over
// groups of COLS columns, the whole K each.
template <int COLS>
__global__ void __launch_bounds__(256) gemv_nk_persist(const bf16 *__restrict__ A, const bf16 *__restrict__ W, bf16 *__restrict__ Y,
                                                       int N, int K) {
    const int lane = threadIdx.x & 31;
    const long long gw = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5), nw = (long long)gridDim.x * WARPS;
    const int steps = K / STEP;
    for (long long c0 = gw * COLS; c0 < N; c0 += nw * COLS) {
        float acc[COLS];
#pragma unroll
        for (int c = 0; c < COLS; c++) acc[c] = 0.f;
#pragma unroll 8
        for (int st = 0; st < steps; st++) {
            const int kk = st * STEP + lane * 8;
            uint4 x[COLS];
#pragma unroll
            for (int c = 0; c < COLS; c++)
                x[c] = c0 + c < N ? *reinterpret_cast<const uint4 *>(W + (c0 + c) * K + kk) : make_uint4(0, 0, 0, 0);
            const uint4 av = *reinterpret_cast<const uint4 *>(A + kk);
#pragma unroll
            for (int c = 0; c < COLS; c++) acc[c] += dot8(av, x[c]);
        }
#pragma unroll
        for (int c = 0; c < COLS; c++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
            if (lane == 0 && c0 + c < N) Y[c0 + c] = __float2bfloat16(acc[c]);
        }
    }
}

typedef void (*kfn)(const bf16 *, const bf16 *, bf16 *, int, int);
struct variant {
    const char *name;
    kfn f;
    int cols, split, persist; // persist: blocks a SM (0: one block per G * COLS columns)
};

static const variant variants[] = {
    {"c2 s1", gemv_nk<2, 1, false>, 2, 1, 0},        {"c2 s1 pf (product)", gemv_nk<2, 1, true>, 2, 1, 0},
    {"c2 s2", gemv_nk<2, 2, false>, 2, 2, 0},        {"c2 s4", gemv_nk<2, 4, false>, 2, 4, 0},
    {"c2 s8", gemv_nk<2, 8, false>, 2, 8, 0},        {"c2 s8 pf", gemv_nk<2, 8, true>, 2, 8, 0},
    {"c2 s4 pf", gemv_nk<2, 4, true>, 2, 4, 0},
    {"c1 s1", gemv_nk<1, 1, false>, 1, 1, 0},        {"c1 s2", gemv_nk<1, 2, false>, 1, 2, 0},
    {"c4 s1", gemv_nk<4, 1, false>, 4, 1, 0},        {"c4 s2", gemv_nk<4, 2, false>, 4, 2, 0},
    {"persist c2 x2", gemv_nk_persist<2>, 2, 1, 2}, {"persist c2 x4", gemv_nk_persist<2>, 2, 1, 4},
    {"persist c4 x2", gemv_nk_persist<4>, 4, 1, 2}, {"persist c1 x4", gemv_nk_persist<1>, 1, 1, 4},
};

struct shape {
    const char *name;
    int N, K, product_split; // product_split: what gemv.c's nk_splits picks on 132 SMs
};

static const shape shapes[] = {
    {"llama gate+up", 16384, 2048, 1}, {"llama down", 2048, 8192, 8},  {"llama o", 2048, 2048, 4},
    {"llama qkv", 3072, 2048, 4},      {"llama lm head", 128256, 2048, 1}, {"gpt2 lm head", 50304, 768, 1},
};

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t pool = 512ull << 20;
    bf16 *wpool, *cp;
    CK(cudaMalloc(&wpool, pool));
    CK(cudaMalloc(&cp, pool));
    CK(cudaMemset(wpool, 0x3c, pool)); // bf16 0x3c3c, about 0.0115
    bf16 *A, *Y;
    CK(cudaMalloc(&A, 8192 * sizeof(bf16)));
    CK(cudaMalloc(&Y, 131072 * sizeof(bf16)));
    CK(cudaMemset(A, 0x3c, 8192 * sizeof(bf16)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    // The copy bandwidth: read + write of 256 MB each.
    float ms = 0.f;
    CK(cudaMemcpyAsync(cp, wpool, pool / 2, cudaMemcpyDeviceToDevice, st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(cp, wpool + (i & 1) * (pool / 4), pool / 2, cudaMemcpyDeviceToDevice, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double copy_gbs = 10.0 * 2 * (pool / 2) / (ms * 1e-3) / 1e9;
    printf("device SMs %d, copy %.0f GB/s (read+write)\n\n", sms, copy_gbs);
    printf("| shape | N | K | MB | variant | grid | us/launch | GB/s | of copy |\n|---|---|---|---|---|---|---|---|---|\n");
    const int launches = 200;
    for (const shape &s : shapes) {
        const size_t wbytes = (size_t)s.N * s.K * sizeof(bf16);
        const int copies = (int)(pool / wbytes) < 1 ? 1 : (int)(pool / wbytes);
        for (const variant &v : variants) {
            if (s.K / STEP % v.split) continue;
            const int G = WARPS / v.split;
            const int grid = v.persist ? v.persist * sms : (int)((s.N + (long long)G * v.cols - 1) / ((long long)G * v.cols));
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < launches; i++)
                v.f<<<grid, 256, 0, st>>>(A, wpool + (size_t)(i % copies) * ((size_t)s.N * s.K), Y, s.N, s.K);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, st)); // warm
            float best = 1e30f;
            for (int r = 0; r < 5; r++) {
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (ms < best) best = ms;
            }
            CK(cudaGetLastError());
            const double us = best * 1e3 / launches, gbs = wbytes / (us * 1e-6) / 1e9;
            printf("| %s | %d | %d | %.1f | %s%s | %d | %.2f | %.0f | %.0f%% |\n", s.name, s.N, s.K, wbytes / 1e6, v.name,
                   !v.persist && v.cols == 2 && v.split == s.product_split ? " *" : "", grid, us, gbs, 100.0 * gbs / copy_gbs);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    }
    printf("\n*: the split gemv.c picks for the shape (its kernel adds the L2 prefetch: the \"pf\" row is the product's s1 form)\n");
    return 0;
}

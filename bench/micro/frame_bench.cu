// frame_bench.cu - how a dynamic program's kernels should get this call's
// sizes and buffer addresses, measured on the GPU machine (docs/DYNAMIC.md,
// "A shape-independent graph"). A chain of NK small kernels, as in the GPT-2
// block at small T, replayed as one CUDA Graph; each call is timed as the
// sweep times it (call, then synchronize; median of ITERS):
//   params      sizes and pointers are kernel parameters (fusec's variant
//               before): a new shape re-points every node
//   frame       kernels read them from a small device table (the frame),
//               which the host writes before the launch by memcpy, by one
//               batch of stream memory operations, or through one kernel
//               node's parameters (a writer node at the graph's start)
// Build: nvcc -O2 -arch=sm_90 frame_bench.cu -lcuda -o frame_bench
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define NK 12
#define NSLOT 26
#define GRID 528
#define ITERS 400
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *m_; cuGetErrorString(e_, &m_); printf("%s:%d %s\n", __FILE__, __LINE__, m_); exit(1); } } while (0)

static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

__device__ __forceinline__ void body(float *y, const float *x, const float *b, long long s0, long long s1) {
    long long n = s0 * s1 * 768;
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        y[i] = x[i] * 1.0001f + b[i % 768];
}
__global__ void __launch_bounds__(256) k_params(float *y, const float *x, const float *b, long long s0, long long s1) { body(y, x, b, s0, s1); }
__global__ void __launch_bounds__(256) k_frame(const long long *__restrict__ F, int iy, int ix) {
    body((float *)F[2 + iy], (const float *)F[2 + ix], (const float *)F[2 + NSLOT - 3], F[0], F[1]);
}
// With programmatic dependent launch (PDL): the next kernel may start while
// this one finishes; it reads what does not depend on the previous kernel
// (the frame, written before the graph starts), then waits for it.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__global__ void __launch_bounds__(256) k_params_pdl(float *y, const float *x, const float *b, long long s0, long long s1) { pdl_wait(); body(y, x, b, s0, s1); }
__global__ void __launch_bounds__(256) k_frame_pdl(const long long *__restrict__ F, int iy, int ix, int trig) {
    float *y = (float *)F[2 + iy]; const float *x = (const float *)F[2 + ix], *b = (const float *)F[2 + NSLOT - 3];
    long long s0 = F[0], s1 = F[1];
    pdl_wait();
    if (trig) pdl_trigger();
    body(y, x, b, s0, s1);
}
struct Frame { long long v[NSLOT]; };
__global__ void k_write(long long *F, Frame f) { if (threadIdx.x < NSLOT) F[threadIdx.x] = f.v[threadIdx.x]; }

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t maxn = 8ull * 1024 * 768;
    float *buf[NSLOT]; for (int i = 0; i < NSLOT; i++) { CK(cudaMalloc(&buf[i], maxn * 4)); CK(cudaMemset(buf[i], 0, maxn * 4)); }
    long long *F; CK(cudaMalloc(&F, sizeof(Frame)));
    const int T[2] = {32, 33};
    Frame fr[2];
    for (int s = 0; s < 2; s++) { fr[s].v[0] = 1; fr[s].v[1] = T[s]; for (int i = 0; i < NSLOT - 2; i++) fr[s].v[2 + i] = (long long)(size_t)buf[(i + s) % NSLOT]; }
    CK(cudaMemcpy(F, &fr[0], sizeof(Frame), cudaMemcpyHostToDevice));

    // graph P: parameters
    cudaGraph_t gP; cudaGraphExec_t eP; std::vector<cudaGraphNode_t> nP;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) k_params<<<GRID, 256, 0, st>>>(buf[(k + 1) % 8], buf[k % 8], buf[NSLOT - 1], 1, T[0]);
    CK(cudaStreamEndCapture(st, &gP));
    { size_t n = 0; CK(cudaGraphGetNodes(gP, NULL, &n)); nP.resize(n); CK(cudaGraphGetNodes(gP, nP.data(), &n)); }
    CK(cudaGraphInstantiate(&eP, gP, 0));
    // graph F: frame
    cudaGraph_t gF; cudaGraphExec_t eF;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) k_frame<<<GRID, 256, 0, st>>>(F, (k + 1) % 8, k % 8);
    CK(cudaStreamEndCapture(st, &gF));
    CK(cudaGraphInstantiate(&eF, gF, 0));
    // graph W: a writer node, then the frame kernels
    cudaGraph_t gW; cudaGraphExec_t eW; cudaGraphNode_t wnode;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    k_write<<<1, 32, 0, st>>>(F, fr[0]);
    for (int k = 0; k < NK; k++) k_frame<<<GRID, 256, 0, st>>>(F, (k + 1) % 8, k % 8);
    CK(cudaStreamEndCapture(st, &gW));
    { size_t n = 0; CK(cudaGraphGetNodes(gW, NULL, &n)); std::vector<cudaGraphNode_t> v(n); CK(cudaGraphGetNodes(gW, v.data(), &n));
      for (auto x : v) { cudaGraphNodeType t; CK(cudaGraphNodeGetType(x, &t)); cudaKernelNodeParams p; if (t == cudaGraphNodeTypeKernel) { CK(cudaGraphKernelNodeGetParams(x, &p)); if (p.func == (void *)k_write) wnode = x; } } }
    CK(cudaGraphInstantiate(&eW, gW, 0));
    // PDL graphs: captured with the launch attribute
    auto pdl_launch = [&](auto kern, auto... args) {
        cudaLaunchConfig_t c = {}; c.gridDim = GRID; c.blockDim = 256; c.stream = st;
        cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
        c.attrs = a; c.numAttrs = 1; CK(cudaLaunchKernelEx(&c, kern, args...));
    };
    cudaGraph_t gPP, gFP, gFT; cudaGraphExec_t ePP, eFP, eFT;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) pdl_launch(k_params_pdl, buf[(k + 1) % 8], (const float *)buf[k % 8], (const float *)buf[NSLOT - 1], 1ll, (long long)T[0]);
    CK(cudaStreamEndCapture(st, &gPP)); CK(cudaGraphInstantiate(&ePP, gPP, 0));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) pdl_launch(k_frame_pdl, (const long long *)F, (k + 1) % 8, k % 8, 0);
    CK(cudaStreamEndCapture(st, &gFP)); CK(cudaGraphInstantiate(&eFP, gFP, 0));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) pdl_launch(k_frame_pdl, (const long long *)F, (k + 1) % 8, k % 8, 1);
    CK(cudaStreamEndCapture(st, &gFT)); CK(cudaGraphInstantiate(&eFT, gFT, 0));
    Frame *pinned; CK(cudaMallocHost(&pinned, 64 * sizeof(Frame)));
    for (int i = 0; i < 64; i++) pinned[i] = fr[i & 1];
    cudaEvent_t slot_ev[64]; for (int i = 0; i < 64; i++) CK(cudaEventCreateWithFlags(&slot_ev[i], cudaEventDisableTiming));

    auto run = [&](const char *name, auto &&call) {
        for (int i = 0; i < 20; i++) { call(i); CK(cudaStreamSynchronize(st)); }
        std::vector<double> tot, host;
        for (int i = 0; i < ITERS; i++) {
            double t0 = now_us(); call(i); double t1 = now_us(); CK(cudaStreamSynchronize(st)); double t2 = now_us();
            tot.push_back(t2 - t0); host.push_back(t1 - t0);
        }
        printf("%-44s call+sync %7.2f us   host %6.2f us\n", name, median(tot), median(host));
    };
    auto setP = [&](cudaGraphNode_t n, int k, int s) {
        cudaKernelNodeParams p; CK(cudaGraphKernelNodeGetParams(n, &p));
        void *y = buf[(k + 1 + s) % 8], *x = buf[(k + s) % 8], *b = buf[NSLOT - 1]; long long s0 = 1, s1 = T[s];
        void *args[5] = {&y, &x, &b, &s0, &s1}; p.kernelParams = args; CK(cudaGraphExecKernelNodeSetParams(eP, n, &p));
    };
    run("params: steady replay", [&](int) { CK(cudaGraphLaunch(eP, st)); });
    run("params: new shape, 12 nodes re-pointed", [&](int i) { for (int k = 0; k < NK; k++) setP(nP[k], k, i & 1); CK(cudaGraphLaunch(eP, st)); });
    run("params: 1 node re-pointed", [&](int i) { setP(nP[0], 0, i & 1); CK(cudaGraphLaunch(eP, st)); });
    run("params: eager, 12 launches", [&](int i) { for (int k = 0; k < NK; k++) k_params<<<GRID, 256, 0, st>>>(buf[(k + 1) % 8], buf[k % 8], buf[NSLOT - 1], 1, T[i & 1]); });
    run("frame: steady replay (frame unchanged)", [&](int) { CK(cudaGraphLaunch(eF, st)); });
    run("frame: memcpy from pinned ring + replay", [&](int i) {
        int s = i & 63; CK(cudaEventSynchronize(slot_ev[s])); pinned[s] = fr[i & 1];
        CK(cudaMemcpyAsync(F, &pinned[s], sizeof(Frame), cudaMemcpyHostToDevice, st)); CK(cudaEventRecord(slot_ev[s], st)); CK(cudaGraphLaunch(eF, st)); });
    run("frame: memcpy from pageable + replay", [&](int i) { CK(cudaMemcpyAsync(F, &fr[i & 1], sizeof(Frame), cudaMemcpyHostToDevice, st)); CK(cudaGraphLaunch(eF, st)); });
    CUstreamBatchMemOpParams ops[NSLOT];
    run("frame: batch of 26 stream writes + replay", [&](int i) {
        memset(ops, 0, sizeof ops);
        for (int j = 0; j < NSLOT; j++) { ops[j].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64; ops[j].writeValue.address = (CUdeviceptr)(F + j); ops[j].writeValue.value64 = fr[i & 1].v[j]; ops[j].writeValue.flags = 0; }
        CD(cuStreamBatchMemOp((CUstream)st, NSLOT, ops, 0)); CK(cudaGraphLaunch(eF, st)); });
    run("frame: batch of 2 stream writes + replay", [&](int i) {
        memset(ops, 0, sizeof ops);
        for (int j = 0; j < 2; j++) { ops[j].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64; ops[j].writeValue.address = (CUdeviceptr)(F + j); ops[j].writeValue.value64 = fr[0].v[j]; ops[j].writeValue.flags = 0; }
        CD(cuStreamBatchMemOp((CUstream)st, 2, ops, 0)); CK(cudaGraphLaunch(eF, st)); });
    run("writer node: steady replay", [&](int) { CK(cudaGraphLaunch(eW, st)); });
    run("writer node: its params updated + replay", [&](int i) {
        cudaKernelNodeParams p; CK(cudaGraphKernelNodeGetParams(wnode, &p)); void *args[2] = {&F, &fr[i & 1]}; p.kernelParams = args;
        CK(cudaGraphExecKernelNodeSetParams(eW, wnode, &p)); CK(cudaGraphLaunch(eW, st)); });
    run("PDL params: steady replay", [&](int) { CK(cudaGraphLaunch(ePP, st)); });
    run("PDL frame: steady replay", [&](int) { CK(cudaGraphLaunch(eFP, st)); });
    run("PDL frame: memcpy (pageable) + replay", [&](int i) { CK(cudaMemcpyAsync(F, &fr[i & 1], sizeof(Frame), cudaMemcpyHostToDevice, st)); CK(cudaGraphLaunch(eFP, st)); });
    run("PDL frame, early trigger: steady replay", [&](int) { CK(cudaGraphLaunch(eFT, st)); });
    run("PDL frame, early trigger: memcpy + replay", [&](int i) { CK(cudaMemcpyAsync(F, &fr[i & 1], sizeof(Frame), cudaMemcpyHostToDevice, st)); CK(cudaGraphLaunch(eFT, st)); });
    // GPU time alone: events around 100 back-to-back replays
    auto gpu = [&](const char *name, cudaGraphExec_t e) {
        cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
        for (int i = 0; i < 10; i++) CK(cudaGraphLaunch(e, st));
        CK(cudaEventRecord(a, st)); for (int i = 0; i < 200; i++) CK(cudaGraphLaunch(e, st)); CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); printf("%-44s GPU %7.2f us per replay, back to back\n", name, ms * 1000 / 200);
    };
    gpu("params graph", eP); gpu("frame graph", eF); gpu("writer-node graph", eW);
    gpu("PDL params graph", ePP); gpu("PDL frame graph", eFP); gpu("PDL frame graph, early trigger", eFT);
    CK(cudaDeviceSynchronize());
    return 0;
}

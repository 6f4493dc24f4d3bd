// teardown_bench.cu - what a second thread's CUDA calls cost the calls a
// caller makes meanwhile (docs/DYNAMIC.md, "Session 8"). A dynamic
// program's background thread compiles, loads and frees specializations
// (module load and unload, arena allocation and free, graph instantiation,
// cuBLASLt handles, a synchronize before a free) while the caller's thread
// runs the variant. The caller's call here is what a variant's new shape
// costs: one small copy from page-locked memory, an event, and the replay
// of a graph of NK chained small kernels; it is timed as the sweep times it
// (call, then synchronize), ITERS times while the other thread repeats one
// operation, and reported as host time (until the call returns) and call +
// synchronize: median, p90, p99, max.
// Build: nvcc -O2 -arch=sm_90 teardown_bench.cu -lcuda -lcublasLt -o teardown_bench
//        nvcc -arch=sm_90 -cubin teardown_bench.cu -o teardown_bench.cubin  (the module loaded and unloaded)
// Run:   teardown_bench teardown_bench.cubin
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <atomic>
#include <vector>

#define NK 12
#define GRID 528
#define ITERS 600
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *m_; cuGetErrorString(e_, &m_); printf("%s:%d %s\n", __FILE__, __LINE__, m_); exit(1); } } while (0)

static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

__global__ void __launch_bounds__(256) k_chain(float *y, const float *x, const float *b, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        y[i] = x[i] * 1.0001f + b[i % 768];
}

static double q(std::vector<double> v, double p) { std::sort(v.begin(), v.end()); return v[(size_t)(p * (double)(v.size() - 1))]; }

struct Bg {
    int op;
    std::atomic<bool> stop{false};
    std::atomic<long> count{0};
    double op_us = 0; // the operation's own time, median
    std::vector<unsigned char> cubin;
    cudaGraph_t graph;
};

static void *bg_main(void *arg) {
    Bg *b = (Bg *)arg;
    CK(cudaSetDevice(0));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemPool_t pool; CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    unsigned long long keep = ~0ull; CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    std::vector<double> t;
    while (!b->stop.load()) {
        double t0 = now_us();
        switch (b->op) {
        case 0: { double e = now_us() + 50; while (now_us() < e) {} break; } // nothing: spin 50 us
        case 1: { void *p; CK(cudaMalloc(&p, 64 << 20)); CK(cudaFree(p)); break; }
        case 2: { void *p; CK(cudaMalloc(&p, 1 << 20)); CK(cudaFree(p)); break; }
        case 3: CK(cudaDeviceSynchronize()); break;
        case 4: { CUmodule m; CD(cuModuleLoadData(&m, b->cubin.data())); CUfunction f; CD(cuModuleGetFunction(&f, m, "_Z7k_chainPfPKfS1_x")); CD(cuModuleUnload(m)); break; }
        case 5: { cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, b->graph, 0)); CK(cudaGraphUpload(e, s)); CK(cudaStreamSynchronize(s)); CK(cudaGraphExecDestroy(e)); break; }
        case 6: { cudaStream_t x; CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking)); cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)); CK(cudaEventDestroy(ev)); CK(cudaStreamDestroy(x)); break; }
        case 7: { void *p; CK(cudaMallocAsync(&p, 64 << 20, s)); CK(cudaFreeAsync(p, s)); CK(cudaStreamSynchronize(s)); break; }
        case 8: { void *p; CK(cudaMallocHost(&p, 1 << 20)); CK(cudaFreeHost(p)); break; }
        case 9: { char *p = (char *)malloc(64 << 20); for (size_t i = 0; i < (64u << 20); i += 4096) p[i] = 1; free(p); break; }
        case 13: { // context-independent loading (CUDA 12.0): load, the kernel's function in this context, unload
            CUlibrary l; CD(cuLibraryLoadData(&l, b->cubin.data(), NULL, NULL, 0, NULL, NULL, 0));
            CUkernel k; CD(cuLibraryGetKernel(&k, l, "_Z7k_chainPfPKfS1_x"));
            CUfunction f; CD(cuKernelGetFunction(&f, k)); CD(cuLibraryUnload(l)); break; }
        case 10: { cublasLtHandle_t h; if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) exit(1); cublasLtDestroy(h); break; }
        case 11: case 12: { // map 64 MiB more at the end of a reserved range (fusec's growing arena); 12: also unmap, release
            static CUdeviceptr base; static size_t mapped; static std::vector<CUmemGenericAllocationHandle> hs;
            CUmemAllocationProp prop = {}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
            const size_t chunk = 64 << 20, range = 64ull << 30;
            if (!base) CD(cuMemAddressReserve(&base, range, 0, 0, 0));
            if (mapped + chunk > range || b->op == 12) { // start again: unmap everything
                for (size_t i = 0; i < hs.size(); i++) { CD(cuMemUnmap(base + i * chunk, chunk)); CD(cuMemRelease(hs[i])); }
                hs.clear(); mapped = 0;
            }
            CUmemGenericAllocationHandle h; CD(cuMemCreate(&h, chunk, &prop, 0)); CD(cuMemMap(base + mapped, chunk, 0, h, 0));
            CUmemAccessDesc a = {}; a.location = prop.location; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            CD(cuMemSetAccess(base + mapped, chunk, &a, 1));
            hs.push_back(h); mapped += chunk;
            if (b->op == 11 && mapped >= (8ull << 30)) { // keep device memory in bounds: 8 GiB, then start over
                for (size_t i = 0; i < hs.size(); i++) { CD(cuMemUnmap(base + i * chunk, chunk)); CD(cuMemRelease(hs[i])); }
                hs.clear(); mapped = 0;
            }
            break;
        }
        }
        t.push_back(now_us() - t0);
        b->count++;
    }
    b->op_us = t.empty() ? 0 : q(t, 0.5);
    CK(cudaStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv) {
    static const char *names[] = {"nothing (a spinning thread)", "cudaMalloc + cudaFree, 64 MiB", "cudaMalloc + cudaFree, 1 MiB",
                                  "cudaDeviceSynchronize", "cuModuleLoadData + cuModuleUnload", "graph instantiate + upload + destroy",
                                  "stream + event create, destroy", "cudaMallocAsync + cudaFreeAsync 64 MiB (pool)",
                                  "cudaMallocHost + cudaFreeHost, 1 MiB", "host malloc 64 MiB, touch, free",
                                  "cublasLtCreate + cublasLtDestroy",
                                  "cuMemCreate + cuMemMap + cuMemSetAccess 64 MiB",
                                  "the same, then cuMemUnmap + cuMemRelease",
                                  "cuLibraryLoadData + cuKernelGetFunction + unload"};
    const int nops = (int)(sizeof names / sizeof names[0]);
    Bg proto;
    if (argc > 1) {
        FILE *f = fopen(argv[1], "rb");
        if (!f) { printf("cannot open %s\n", argv[1]); return 1; }
        fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
        proto.cubin.resize(n); if (fread(proto.cubin.data(), 1, n, f) != (size_t)n) return 1; fclose(f);
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const long long n = 64ll * 768;
    float *buf[9]; for (int i = 0; i < 9; i++) { CK(cudaMalloc(&buf[i], n * 4)); CK(cudaMemset(buf[i], 0, n * 4)); }
    cudaGraph_t g; cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < NK; k++) k_chain<<<GRID, 256, 0, st>>>(buf[(k + 1) % 8], buf[k % 8], buf[8], n);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    long long *frame; CK(cudaMalloc(&frame, 4096));
    long long *ring; CK(cudaMallocHost(&ring, 8 * 512));
    cudaEvent_t ev[8]; for (int i = 0; i < 8; i++) CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    printf("%-46s %8s %8s %8s %8s | %8s %8s %8s | %8s %6s\n", "the other thread repeats", "host p50", "p90", "p99", "max",
           "call p50", "p90", "max", "op us", "ops");
    for (int op = 0; op < nops; op++) {
        if ((op == 4 || op == 13) && proto.cubin.empty()) continue;
        Bg b; b.op = op; b.cubin = proto.cubin; b.graph = g;
        for (int i = 0; i < 20; i++) { CK(cudaGraphLaunch(e, st)); CK(cudaStreamSynchronize(st)); }
        pthread_t th; pthread_create(&th, NULL, bg_main, &b);
        while (b.count.load() < 2) {}
        std::vector<double> host, call;
        for (int i = 0; i < ITERS; i++) {
            int s = i & 7;
            double t0 = now_us();
            CK(cudaEventSynchronize(ev[s]));
            ring[s * 64] = i;
            CK(cudaMemcpyAsync(frame, ring + s * 64, 256, cudaMemcpyHostToDevice, st));
            CK(cudaEventRecord(ev[s], st));
            CK(cudaGraphLaunch(e, st));
            double t1 = now_us();
            CK(cudaStreamSynchronize(st));
            double t2 = now_us();
            host.push_back(t1 - t0);
            call.push_back(t2 - t0);
        }
        b.stop = true;
        pthread_join(th, NULL);
        printf("%-46s %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %8.1f %6ld\n", names[op], q(host, .5), q(host, .9),
               q(host, .99), q(host, 1), q(call, .5), q(call, .9), q(call, 1), b.op_us, b.count.load());
    }
    return 0;
}

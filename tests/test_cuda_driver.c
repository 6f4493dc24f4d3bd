/* test_cuda_driver.c - the dlopen'ed driver and the device API.
 *
 * Without a driver or a GPU (CI), the driver must report why, cleanly, and
 * the test is skipped. With a GPU it compiles saxpy with NVRTC for the
 * device's own compute capability, runs it, checks the result exactly,
 * replays it from a CUDA Graph and times it with events. */
#include "check.h"
#include "runtime/cuda/cuda.h"

#include <stdlib.h>

static const char *saxpy_src =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

/* Without a device every entry point fails with the same clear reason. */
static void test_no_device(fc_context *ctx) {
    const char *e = fc_last_error(ctx);
    CHECK(strstr(e, "no CUDA driver") != NULL || strstr(e, "no CUDA device") != NULL);
    CHECK(fc_cuda_driver_get(ctx) == NULL);
    fc_cuda_device *d = (fc_cuda_device *)1;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &d), FC_ERR_RUNTIME);
    CHECK(d == NULL);
    CHECK(strstr(fc_last_error(ctx), "no CUDA") != NULL);
    fc_cuda_device_info info;
    CHECK_EQ_INT(fc_cuda_device_query(ctx, 0, &info), FC_ERR_RUNTIME);
    int count = -1;
    fc_status st = fc_cuda_device_count(ctx, &count);
    CHECK(st == FC_ERR_RUNTIME || (st == FC_OK && count == 0));
    fc_cuda_device_close(NULL);
}

/* Everything the device API offers, on device 0. Values are small integers
 * so that a*x+y is exact whether or not the compiler contracts it to an
 * FMA: the check can be ==. */
static void test_saxpy(fc_context *ctx) {
    fc_cuda_device_info info;
    CHECK_EQ_INT(fc_cuda_device_query(ctx, 0, &info), FC_OK);
    printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d\n", info.name, info.cc_major, info.cc_minor,
           info.sm_count, (double)info.total_mem / (1024.0 * 1024 * 1024), info.driver_version / 1000,
           info.driver_version % 1000 / 10);
    CHECK(info.sm_count > 0 && info.total_mem > 0 && info.warp_size == 32);

    fc_cuda_device *d = NULL;
    fc_status st = fc_cuda_device_open(ctx, 0, &d);
    CHECK_EQ_INT(st, FC_OK);
    if (st != FC_OK) {
        fprintf(stderr, "%s\n", fc_last_error(ctx));
        return;
    }

    fc_bytes cubin = {0};
    st = fc_nvrtc_compile(ctx, saxpy_src, "saxpy.cu", info.cc_major, info.cc_minor, NULL, 0, &cubin);
    CHECK_EQ_INT(st, FC_OK);
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    if (st == FC_OK) {
        CHECK_EQ_INT(fc_cuda_module_load(d, cubin.data, cubin.size, &mod), FC_OK);
        CHECK_EQ_INT(fc_cuda_module_function(d, mod, "saxpy", &fn), FC_OK);
    }
    fc_bytes_free(&cubin); /* the driver keeps its own copy */

    /* A name that is not in the module: the call text and the name. */
    CUfunction missing = NULL;
    CHECK_EQ_INT(fc_cuda_module_function(d, mod, "no_such_kernel", &missing), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "ModuleGetFunction(") != NULL);
    CHECK(strstr(fc_last_error(ctx), "CUDA_ERROR_NOT_FOUND") != NULL);
    CHECK(strstr(fc_last_error(ctx), "no_such_kernel") != NULL);
    /* Something that is not a cubin is refused before the driver sees it. */
    CUmodule junk = NULL;
    CHECK_EQ_INT(fc_cuda_module_load(d, saxpy_src, strlen(saxpy_src), &junk), FC_ERR_USAGE);

    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 1000);
        y[i] = (float)(i % 7);
    }
    CUdeviceptr dx = 0, dy = 0;
    CHECK_EQ_INT(fc_cuda_alloc(d, N * sizeof(float), &dx), FC_OK);
    CHECK_EQ_INT(fc_cuda_alloc(d, N * sizeof(float), &dy), FC_OK);
    CHECK_EQ_INT(fc_cuda_upload(d, dx, x, N * sizeof(float)), FC_OK);
    CHECK_EQ_INT(fc_cuda_upload(d, dy, y, N * sizeof(float)), FC_OK);

    float a = 3.0f;
    int n = N;
    void *args[] = {&a, &dx, &dy, &n};
    fc_cuda_launch_cfg cfg = {{(N + 255) / 256, 1, 1}, {256, 1, 1}, 0, NULL, false};
    CHECK_EQ_INT(fc_cuda_launch(d, fn, &cfg, args), FC_OK);
    CHECK_EQ_INT(fc_cuda_download(d, out, dy, N * sizeof(float)), FC_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != 3.0f * (float)(i % 1000) + (float)(i % 7);
    CHECK_EQ_INT(bad, 0);

    /* An impossible launch: the shape is in the message. */
    fc_cuda_launch_cfg huge = {{1, 1, 1}, {4096, 1, 1}, 0, NULL, false};
    CHECK_EQ_INT(fc_cuda_launch(d, fn, &huge, args), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "LaunchKernel(") != NULL);
    CHECK(strstr(fc_last_error(ctx), "block 4096,1,1") != NULL);

    /* The same launch, captured once and replayed three times. */
    CHECK_EQ_INT(fc_cuda_upload(d, dy, y, N * sizeof(float)), FC_OK);
    CUgraphExec graph = NULL;
    CHECK_EQ_INT(fc_cuda_capture_begin(d, NULL), FC_OK);
    CHECK_EQ_INT(fc_cuda_launch(d, fn, &cfg, args), FC_OK);
    CHECK_EQ_INT(fc_cuda_capture_end(d, NULL, &graph), FC_OK);
    for (int r = 0; r < 3; r++) CHECK_EQ_INT(fc_cuda_graph_launch(d, graph, NULL), FC_OK);
    CHECK_EQ_INT(fc_cuda_download(d, out, dy, N * sizeof(float)), FC_OK);
    bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != 9.0f * (float)(i % 1000) + (float)(i % 7);
    CHECK_EQ_INT(bad, 0);
    fc_cuda_graph_destroy(d, graph);

    /* Zero it, then time 20 launches with events. */
    CHECK_EQ_INT(fc_cuda_memset_async(d, dy, 0, N * sizeof(float), NULL), FC_OK);
    fc_cuda_timer t;
    CHECK_EQ_INT(fc_cuda_timer_create(d, &t), FC_OK);
    CHECK_EQ_INT(fc_cuda_timer_start(d, &t, NULL), FC_OK);
    for (int r = 0; r < 20; r++) CHECK_EQ_INT(fc_cuda_launch(d, fn, &cfg, args), FC_OK);
    float ms = 0;
    CHECK_EQ_INT(fc_cuda_timer_stop(d, &t, NULL, &ms), FC_OK);
    CHECK(ms > 0);
    double bytes = 20.0 * 3 * N * sizeof(float);
    printf("saxpy n=%d: %.3f us per launch, %.0f GB/s\n", N, ms * 1000 / 20, bytes / (ms * 1e-3) / 1e9);
    fc_cuda_timer_destroy(d, &t);
    CHECK_EQ_INT(fc_cuda_download(d, out, dy, N * sizeof(float)), FC_OK);
    bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != 60.0f * (float)(i % 1000);
    CHECK_EQ_INT(bad, 0);

    CHECK_EQ_INT(fc_cuda_free(d, dx), FC_OK);
    CHECK_EQ_INT(fc_cuda_free(d, dy), FC_OK);
    CHECK_EQ_INT(fc_cuda_device_sync(d), FC_OK);
    fc_cuda_module_unload(d, mod);
    fc_cuda_device_close(d);
    free(x);
    free(y);
    free(out);
}

/* Device 0, when it has virtual memory management (else NULL, said). */
static fc_cuda_device *open_with_vmm(fc_context *ctx) {
    fc_cuda_device *d = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &d), FC_OK);
    if (d && !d->info.vmm) {
        printf("skipped: no virtual memory management on this device\n");
        fc_cuda_device_close(d);
        d = NULL;
    }
    return d;
}

/* A region grows in place: its base never moves, what was written stays,
 * the new tail is usable, a smaller request changes nothing, a request
 * beyond the device's memory is an error that leaves it as it was, and
 * freeing zeroes it. */
static void test_region(fc_context *ctx) {
    fc_cuda_device *d = open_with_vmm(ctx);
    if (!d) return;
    fc_cuda_region r = {0};
    CHECK_EQ_INT(fc_cuda_region_grow(d, &r, 1000), FC_OK);
    CHECK(r.base != 0 && r.granularity > 0 && r.mapped >= 1000 && r.mapped % r.granularity == 0);
    const CUdeviceptr base = r.base;
    const size_t first = r.mapped, n = first / 4;
    uint32_t *h = malloc(sizeof *h * 3 * n);
    CHECK(h != NULL);
    if (!h) return;
    for (size_t i = 0; i < n; i++) h[i] = (uint32_t)i * 2654435761u;
    CHECK_EQ_INT(fc_cuda_upload(d, base, h, first), FC_OK);
    /* Grown (twice the size and a bit: a second chunk), then smaller. */
    CHECK_EQ_INT(fc_cuda_region_grow(d, &r, 2 * first + 1), FC_OK);
    CHECK(r.base == base && r.mapped >= 2 * first + 1 && r.nchunks == 2);
    CHECK_EQ_INT(fc_cuda_region_grow(d, &r, first), FC_OK);
    CHECK(r.nchunks == 2);
    /* The tail across the chunks' boundary is writable, the head kept. */
    for (size_t i = 0; i < 2 * n; i++) h[n + i] = (uint32_t)i ^ 0x5a5a5a5au;
    CHECK_EQ_INT(fc_cuda_upload(d, base + first - 4 * n / 2, h + n, 2 * first), FC_OK);
    uint32_t *back = malloc(sizeof *back * 3 * n);
    CHECK(back != NULL);
    if (back) {
        CHECK_EQ_INT(fc_cuda_download(d, back, base, 3 * first / 2), FC_OK);
        int bad = 0;
        for (size_t i = 0; i < n / 2; i++) bad += back[i] != (uint32_t)i * 2654435761u;
        for (size_t i = 0; i < n; i++) bad += back[n / 2 + i] != ((uint32_t)i ^ 0x5a5a5a5au);
        CHECK_EQ_INT(bad, 0);
        free(back);
    }
    /* Beyond the device: an error, the region unchanged. */
    const size_t mapped = r.mapped;
    CHECK_EQ_INT(fc_cuda_region_grow(d, &r, r.reserved + 1), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "larger than the device's memory") != NULL);
    CHECK(r.base == base && r.mapped == mapped && r.nchunks == 2);
    fc_cuda_region_free(d, &r);
    CHECK(r.base == 0 && r.mapped == 0 && r.nchunks == 0 && r.chunk == NULL);
    fc_cuda_region_free(d, &r); /* twice: nothing */
    free(h);
    fc_cuda_device_close(d);
}

/* fc_cuda_region_take: 256-aligned pieces one after another, the region
 * grown under them, data kept; zero bytes is a null pointer. */
static void test_region_take(fc_context *ctx) {
    fc_cuda_device *d = open_with_vmm(ctx);
    if (!d) return;
    fc_cuda_region r = {0};
    CUdeviceptr a = 0, b = 0, c = 1, e = 0;
    CHECK_EQ_INT(fc_cuda_region_take(d, &r, 100, &a), FC_OK);
    CHECK(a == r.base && r.taken == 100);
    CHECK_EQ_INT(fc_cuda_region_take(d, &r, 3 * r.granularity, &b), FC_OK);
    CHECK(b == r.base + 256 && b % 256 == 0 && r.mapped >= 256 + 3 * r.granularity);
    CHECK_EQ_INT(fc_cuda_region_take(d, &r, 0, &c), FC_OK);
    CHECK(c == 0);
    CHECK_EQ_INT(fc_cuda_region_take(d, &r, 8, &e), FC_OK);
    CHECK(e == b + 3 * r.granularity);
    uint64_t h[2] = {0x0123456789abcdefull, 0xfedcba9876543210ull}, back[2] = {0, 0};
    CHECK_EQ_INT(fc_cuda_upload(d, a, &h[0], 8), FC_OK);
    CHECK_EQ_INT(fc_cuda_upload(d, e, &h[1], 8), FC_OK);
    CHECK_EQ_INT(fc_cuda_download(d, &back[0], a, 8), FC_OK);
    CHECK_EQ_INT(fc_cuda_download(d, &back[1], e, 8), FC_OK);
    CHECK(back[0] == h[0] && back[1] == h[1]);
    fc_cuda_region_free(d, &r);
    CHECK(r.taken == 0 && r.base == 0);
    fc_cuda_device_close(d);
}

/* A borrowed handle: the same context and stream, errors on its own
 * context, and closing it leaves the device it borrowed working. */
static void test_borrow(fc_context *ctx) {
    fc_cuda_device *d = NULL, *b = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &d), FC_OK);
    if (!d) return;
    fc_context *other = fc_context_new();
    CHECK_EQ_INT(fc_cuda_device_borrow(other, d, &b), FC_OK);
    CHECK(b && b->borrowed && !d->borrowed && b->stream == d->stream && b->cuctx == d->cuctx && b->ctx == other);
    CHECK(b && !strcmp(b->info.name, d->info.name) && b->info.sm_count == d->info.sm_count);
    CUdeviceptr p = 0;
    CHECK_EQ_INT(fc_cuda_alloc(b, 64, &p), FC_OK);
    CHECK_EQ_INT(fc_cuda_free(b, p), FC_OK);
    /* An error through the borrowed handle lands on its context. */
    CHECK(fc_cuda_alloc(b, (size_t)1 << 62, &p) != FC_OK);
    CHECK(fc_last_error(other)[0] != 0);
    fc_cuda_device_close(b);
    /* The stream is still d's, and works. */
    CHECK_EQ_INT(fc_cuda_alloc(d, 64, &p), FC_OK);
    uint32_t x = 7, y = 0;
    CHECK_EQ_INT(fc_cuda_upload(d, p, &x, 4), FC_OK);
    CHECK_EQ_INT(fc_cuda_download(d, &y, p, 4), FC_OK);
    CHECK(y == 7);
    CHECK_EQ_INT(fc_cuda_stream_sync(d, NULL), FC_OK);
    CHECK_EQ_INT(fc_cuda_free(d, p), FC_OK);
    CHECK_EQ_INT(fc_cuda_device_borrow(other, NULL, &b), FC_ERR_USAGE);
    fc_context_free(other);
    fc_cuda_device_close(d);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    if (fc_cuda_available(ctx)) {
        test_saxpy(ctx);
        test_region(ctx);
        test_region_take(ctx);
        test_borrow(ctx);
        fc_context_free(ctx);
        return check_report("test_cuda_driver");
    }
    printf("skipped: no CUDA device (%s)\n", fc_last_error(ctx));
    test_no_device(ctx);
    fc_context_free(ctx);
    printf("test_cuda_driver: %d passed, %d failed, 1 skipped\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

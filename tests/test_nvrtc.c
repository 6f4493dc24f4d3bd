/* test_nvrtc.c - NVRTC compiles for sm_90 (no GPU needed): vector loads,
 * bf16 through the toolkit headers, warp shuffles; the exact options; and
 * the error report of a kernel that does not compile. */
#include "check.h"
#include "runtime/cuda/cuda.h"

#include <stdlib.h>

/* A cubin is an ELF file for the CUDA machine (EM_CUDA = 190). */
static bool is_cuda_elf(const fc_bytes *b) {
    return b->data && b->size >= 64 && b->data[0] == 0x7f && b->data[1] == 'E' && b->data[2] == 'L' &&
           b->data[3] == 'F' && (b->data[18] | b->data[19] << 8) == 190;
}

/* Compile `src` for sm_90 and check that a CUDA ELF comes out. */
static void compiles(fc_context *ctx, const char *name, const char *src, const char *const *extra, int nextra) {
    fc_bytes cubin = {0};
    fc_status st = fc_nvrtc_compile(ctx, src, name, 9, 0, extra, nextra, &cubin);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", name, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK(cubin.size > 0);
    CHECK(is_cuda_elf(&cubin));
    fc_bytes_free(&cubin);
    CHECK(cubin.data == NULL && cubin.size == 0);
}

static const char *pointwise_float4 =
    "extern \"C\" __global__ void add_relu4(const float4 *__restrict__ a, const float4 *__restrict__ b,\n"
    "                                      float4 *__restrict__ out, int n4) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n4) return;\n"
    "    float4 x = a[i], y = b[i];\n"
    "    out[i] = make_float4(fmaxf(x.x + y.x, 0.f), fmaxf(x.y + y.y, 0.f),\n"
    "                         fmaxf(x.z + y.z, 0.f), fmaxf(x.w + y.w, 0.f));\n"
    "}\n";

static const char *bf16_kernel =
    "#include <cuda_bf16.h>\n"
    "float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678f)); } /* -default-device */\n"
    "extern \"C\" __global__ void gelu_bf16(const __nv_bfloat16 *x, __nv_bfloat16 *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = __float2bfloat16(gelu(__bfloat162float(x[i])));\n"
    "}\n";

static const char *warp_reduce =
    "extern \"C\" __global__ void row_sum(const float *x, float *out, int cols) {\n"
    "    const float *row = x + (size_t)blockIdx.x * cols;\n"
    "    float acc = 0.f;\n"
    "    for (int c = threadIdx.x; c < cols; c += 32) acc += row[c];\n"
    "    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = acc;\n"
    "}\n";

static const char *bad_kernel =
    "extern \"C\" __global__ void broken(float *x) {\n"
    "    int i = threadIdx.x;\n"
    "    x[i] = 1.0f\n"
    "    x[i] += undeclared_thing;\n"
    "}\n";

static void test_compiles(fc_context *ctx) {
    compiles(ctx, "pointwise_float4.cu", pointwise_float4, NULL, 0);
    compiles(ctx, "gelu_bf16.cu", bf16_kernel, NULL, 0);
    compiles(ctx, "row_sum.cu", warp_reduce, NULL, 0);
    const char *fast[] = {"--use_fast_math", "-lineinfo"};
    compiles(ctx, "pointwise_fast.cu", pointwise_float4, fast, 2);
    /* An explicit architecture replaces the default (sm_90a: wgmma). */
    const char *arch[] = {"--gpu-architecture=sm_90a"};
    compiles(ctx, "pointwise_sm90a.cu", pointwise_float4, arch, 1);
}

static void test_options(fc_context *ctx) {
    fc_nvrtc_options o;
    CHECK_EQ_INT(fc_nvrtc_options_build(ctx, 9, 0, NULL, 0, &o), FC_OK);
    CHECK(o.count >= 4);
    CHECK_STR(o.opt[0], "--gpu-architecture=sm_90");
    CHECK_STR(o.opt[1], "-std=c++17");
    CHECK_STR(o.opt[2], "-default-device");
    CHECK(strncmp(o.opt[3], "-I", 2) == 0 && strstr(o.opt[3], "include"));
    for (int i = 0; i < o.count; i++) CHECK(strstr(o.opt[i], "fast_math") == NULL);

    const char *extra[] = {"--use_fast_math"};
    int base = o.count;
    CHECK_EQ_INT(fc_nvrtc_options_build(ctx, 8, 9, extra, 1, &o), FC_OK);
    CHECK_EQ_INT(o.count, base + 1);
    CHECK_STR(o.opt[0], "--gpu-architecture=sm_89");
    CHECK_STR(o.opt[o.count - 1], "--use_fast_math");

    const char *arch[] = {"--gpu-architecture=sm_90a"};
    CHECK_EQ_INT(fc_nvrtc_options_build(ctx, 9, 0, arch, 1, &o), FC_OK);
    CHECK_EQ_INT(o.count, base);
    CHECK_STR(o.opt[0], "-std=c++17");

    CHECK_EQ_INT(fc_nvrtc_options_build(ctx, 0, 0, NULL, 0, &o), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "compute capability") != NULL);
    CHECK_EQ_INT(fc_nvrtc_options_build(ctx, 9, 0, NULL, 2, &o), FC_ERR_USAGE);
}

/* A warning (line 2) and an error (line 5): the excerpt is about the error. */
static const char *undeclared_kernel =
    "extern \"C\" __global__ void undeclared(float *x) {\n"
    "    int unused_var;\n"
    "    int i = threadIdx.x;\n"
    "    x[i] = 1.0f;\n"
    "    x[i] += undeclared_thing;\n"
    "}\n";

static void test_semantic_error(fc_context *ctx) {
    fc_bytes cubin = {0};
    CHECK_EQ_INT(fc_nvrtc_compile(ctx, undeclared_kernel, "undeclared.cu", 9, 0, NULL, 0, &cubin), FC_ERR_RUNTIME);
    const char *e = fc_last_error(ctx);
    CHECK(strstr(e, "undeclared.cu(5): error: identifier \"undeclared_thing\" is undefined") != NULL);
    CHECK(strstr(e, ">    5 |     x[i] += undeclared_thing;") != NULL);
    CHECK(strstr(e, ">    2 |") == NULL);
}

static void test_syntax_error(fc_context *ctx) {
    fc_bytes cubin = {0};
    fc_status st = fc_nvrtc_compile(ctx, bad_kernel, "broken.cu", 9, 0, NULL, 0, &cubin);
    CHECK_EQ_INT(st, FC_ERR_RUNTIME);
    CHECK(cubin.data == NULL && cubin.size == 0);
    const char *e = fc_last_error(ctx);
    /* The call, where it was made, what NVRTC said, and its log. */
    CHECK(strstr(e, "nvrtcCompileProgram(") != NULL);
    CHECK(strstr(e, "runtime/cuda/nvrtc.c:") != NULL);
    CHECK(strstr(e, "NVRTC_ERROR_COMPILATION") != NULL);
    CHECK(strstr(e, "broken.cu(4): error") != NULL);
    /* The source around the first error, numbered, the line marked. */
    CHECK(strstr(e, ">    4 |     x[i] += undeclared_thing;") != NULL);
    CHECK(strstr(e, "     1 | extern \"C\"") != NULL);
    if (check_failed) fprintf(stderr, "--- message:\n%s\n---\n", e);
}

/* An option NVRTC rejects: the log names it; there is no source line. */
static void test_bad_option(fc_context *ctx) {
    fc_bytes cubin = {0};
    const char *bad[] = {"--no-such-option"};
    CHECK_EQ_INT(fc_nvrtc_compile(ctx, pointwise_float4, "opt.cu", 9, 0, bad, 1, &cubin), FC_ERR_RUNTIME);
    const char *e = fc_last_error(ctx);
    CHECK(strstr(e, "nvrtcCompileProgram(") != NULL);
    CHECK(strstr(e, "NVRTC_ERROR_INVALID_OPTION") != NULL);
    CHECK(cubin.data == NULL);
}

/* Allocation failure: FC_ERR_NOMEM, nothing leaked (see valgrind). */
static void test_nomem(fc_context *ctx) {
    fc_bytes cubin = {0};
    fc_context_fail_alloc_after(ctx, 1);
    CHECK_EQ_INT(fc_nvrtc_compile(ctx, warp_reduce, "nomem.cu", 9, 0, NULL, 0, &cubin), FC_ERR_NOMEM);
    CHECK(cubin.data == NULL);
    fc_context_fail_alloc_after(ctx, 0);
}

static void test_usage(fc_context *ctx) {
    fc_bytes cubin = {0};
    CHECK_EQ_INT(fc_nvrtc_compile(ctx, NULL, "x.cu", 9, 0, NULL, 0, &cubin), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_nvrtc_compile(ctx, warp_reduce, "x.cu", 9, 0, NULL, 0, NULL), FC_ERR_USAGE);
    fc_bytes_free(NULL);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    int major = 0, minor = 0;
    CHECK_EQ_INT(fc_nvrtc_version(&major, &minor), FC_OK);
    CHECK(major >= 12);
    test_compiles(ctx);
    test_options(ctx);
    test_syntax_error(ctx);
    test_semantic_error(ctx);
    test_bad_option(ctx);
    test_nomem(ctx);
    test_usage(ctx);
    fc_context_free(ctx);
    return check_report("test_nvrtc");
}

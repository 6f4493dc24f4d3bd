/* frame_entry.c - the entry points of a dynamic plan's frame kernels
 * (fc_launch.frame; docs/DYNAMIC.md, "The frame"): each loads its words
 * of the frame, waits for the kernel before it and calls its body; the
 * first may carry the whole frame as a parameter. */
#include "kernel.h"

#include <stdio.h>

/* What every frame entry uses, once after the prelude:
 * - fc_fp turns a frame word into whatever pointer the body's parameter
 *   is, said to be global: loaded from memory it would otherwise be
 *   generic, and every access through it a generic ld/st, slower than
 *   the global ones a kernel parameter gets (docs/PERF.md);
 * - fc_nc and fc_nc_vec are the read-only loads (ld.global.nc) a
 *   parameter kernel gets from its `const __restrict__` pointers. */
static const char frame_prelude[] =
    "struct fc_fp {\n  long long v;\n"
    "  template <class T> __device__ __forceinline__ operator T *() const {\n"
    "    T *p = reinterpret_cast<T *>(v);\n    __builtin_assume(__isGlobal(p));\n    return p;\n  }\n};\n"
    "template <typename T> __device__ __forceinline__ T fc_nc(const T *p) { return __ldg(p); }\n"
    "template <typename T, int N> __device__ __forceinline__ fc_vec<T, N> fc_nc_vec(const T *p) {\n"
    "  fc_vec<T, N> r;\n"
    "  if constexpr (sizeof r == 16) { uint4 u = __ldg((const uint4 *)p); memcpy(&r, &u, 16); }\n"
    "  else if constexpr (sizeof r == 8) { uint2 u = __ldg((const uint2 *)p); memcpy(&r, &u, 8); }\n"
    "  else if constexpr (sizeof r == 4) { unsigned u = __ldg((const unsigned *)p); memcpy(&r, &u, 4); }\n"
    "  else if constexpr (sizeof r == 2) { unsigned short u = __ldg((const unsigned short *)p); memcpy(&r, &u, 2); }\n"
    "  else r = *(const fc_vec<T, N> *)p;\n"
    "  return r;\n}\n\n";

/* Launch l's entry point, after its body (fc_cuda_kernel_open): its words
 * of the frame are loaded first, then it waits for the kernel before and
 * lets the one after launch (fc_cuda_grid_start, as every other kernel),
 * so that under a programmatic launch the loads overlap that kernel's end.
 *
 * The carrier (the plan's first kernel, when the frame is carried: see
 * frame_carry) takes the frame's words by value as well, a
 * __grid_constant__ parameter the runtime sets with the launch (a graph
 * node's parameters: cuGraphExecKernelNodeSetParams), reads its own words
 * from there, and its block 0 stores them all into the frame for the
 * kernels after it. So a new shape or new pointers cost the host one
 * parameter update instead of a copy before the launch (docs/DYNAMIC.md,
 * "The carried frame"). The kernel after the carrier must then not start
 * before the carrier ends (it reads the frame before it waits): neither
 * is a programmatic dependent. */
void fc_cg_frame_entry(fc_strbuf *s, fc_launch *l, int nsyms, int carried_words) {
    char b[48];
    const bool carrier = carried_words > 0;
    l->pdl = !carrier; /* it waits (fc_cuda_grid_start) before its body */
    if (carrier) {
        fc_strbuf_printf(s,
                         "extern \"C\" __global__ void %s %s(long long *__restrict__ fc_frame, "
                         "const __grid_constant__ fc_frame_words<%d> fc_fw) {\n",
                         fc_cuda_launch_bounds(l, b, sizeof b), l->name, carried_words);
        fc_strbuf_printf(s, "  fc_frame_store(fc_frame, fc_fw);\n");
    } else
        fc_strbuf_printf(s, "extern \"C\" __global__ void %s %s(const long long *__restrict__ fc_frame) {\n",
                         fc_cuda_launch_bounds(l, b, sizeof b), l->name);
    const char *from = carrier ? "fc_fw.w" : "fc_frame";
    for (int a = 0; a < l->nargs; a++)
        fc_strbuf_printf(s, "  const long long w%d = %s[%d];\n", a, from, nsyms + l->args[a]);
    for (int k = 0; k < l->nsyms; k++) fc_strbuf_printf(s, "  const long long s%d = %s[%d];\n", k, from, k);
    fc_strbuf_printf(s, "%s  %s_main(", fc_cuda_grid_start, l->name);
    for (int a = 0; a < l->nargs; a++) fc_strbuf_printf(s, "%sfc_fp{w%d}", a ? ", " : "", a);
    for (int k = 0; k < l->nsyms; k++) fc_strbuf_printf(s, "%ss%d", l->nargs + k ? ", " : "", k);
    fc_strbuf_printf(s, ");\n}\n\n");
}

/* The frame's words as one kernel parameter (the carrier's, above), and
 * block 0's store of them into the frame. */
static const char frame_carry_prelude[] =
    "template <int N> struct fc_frame_words {\n  long long w[N];\n};\n"
    "template <int N>\n"
    "static __device__ __forceinline__ void fc_frame_store(long long *t, const fc_frame_words<N> &fw) {\n"
    "  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {\n"
    "    const int n = blockDim.x * blockDim.y * blockDim.z;\n"
    "    for (int i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); i < N; i += n) t[i] = fw.w[i];\n"
    "  }\n}\n\n";

/* The most bytes of words the carrier takes: with the frame's address,
 * within the 4 KiB of parameters every CUDA 12 driver accepts. */
#define FRAME_CARRY_MAX_WORDS 500

/* Whether a frame plan's frame of `words` words is carried by its first
 * kernel (frame_entry): where it fits in the carrier's parameters. A
 * larger frame is copied from the host before the launches. */
bool fc_cg_frame_carry(int words) { return words <= FRAME_CARRY_MAX_WORDS; }

/* The frame launch of out just made: the words it carries (the frame's, if
 * it is the first kernel and the frame is carried), else 0. */
int fc_cg_carrier_words(fc_cuda_src *out, bool carry) {
    if (!carry || out->frame_carried) return 0;
    out->frame_carried = true;
    return out->frame_words;
}


void fc_cg_frame_preludes(fc_strbuf *s, bool carry) {
    fc_strbuf_printf(s, "%s", frame_prelude);
    if (carry) fc_strbuf_printf(s, "%s", frame_carry_prelude);
}

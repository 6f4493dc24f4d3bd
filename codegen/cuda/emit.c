/* emit.c - the helpers every CUDA generator of codegen/cuda shares
 * (emit.h). Source text is built with fc_strbuf (ir/strbuf.c). */
#include "emit.h"

#include <stdio.h>

const char *fc_cuda_storage_type(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return "double";
    case FC_F32: return "float";
    case FC_F16: return "__half";
    case FC_BF16: return "__nv_bfloat16";
    case FC_I64: return "i64";
    case FC_I32: return "int";
    case FC_I8: return "signed char";
    case FC_BOOL: return "unsigned char";
    default: FC_UNREACHABLE("dtype");
    }
}

/* A product of dims as C text: `3072ll`, `(s0 * s1 * 768ll)`. */
const char *fc_cuda_mono_text(const fc_mono *m, char *buf, size_t n) {
    if (fc_mono_is_static(m) || m->c == 0) {
        snprintf(buf, n, "%lldll", (long long)m->c);
        return buf;
    }
    size_t pos = (size_t)snprintf(buf, n, "(");
    bool first = true;
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++)
        for (int e = 0; e < m->e[i] && pos < n; e++) {
            pos += (size_t)snprintf(buf + pos, n - pos, "%ss%d", first ? "" : " * ", i);
            first = false;
        }
    if (pos < n && m->c != 1) pos += (size_t)snprintf(buf + pos, n - pos, " * %lldll", (long long)m->c);
    if (pos < n) snprintf(buf + pos, n - pos, ")");
    return buf;
}

int64_t fc_cuda_plan_sms(const fc_plan *plan) { return plan->sm_count > 0 ? plan->sm_count : 132; }

/* `__launch_bounds__(..)` for l's recorded block and blocks per SM. */
const char *fc_cuda_launch_bounds(const fc_launch *l, char *buf, size_t n) {
    if (l->min_blocks) snprintf(buf, n, "__launch_bounds__(%u, %u)", l->block[0], l->min_blocks);
    else snprintf(buf, n, "__launch_bounds__(%u)", l->block[0]);
    return buf;
}

void fc_cuda_kernel_open(fc_strbuf *s, fc_launch *l, unsigned block, unsigned min_blocks) {
    l->block[0] = block;
    l->block[1] = l->block[2] = 1;
    l->min_blocks = min_blocks;
    char b[48];
    if (l->frame) fc_strbuf_printf(s, "static __device__ __forceinline__ void %s_main(", l->name);
    else fc_strbuf_printf(s, "extern \"C\" __global__ void %s %s(", fc_cuda_launch_bounds(l, b, sizeof b), l->name);
}

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

/*
 * Every kernel fusec generates is a programmatic dependent (fc_launch.pdl)
 * and starts with this, before any access to global memory: the runtime
 * launches it with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
 * or joins it to the kernel node before by a programmatic edge, so its
 * blocks may be resident while that kernel still runs, and the wait is
 * what orders them (docs/RUNTIME-GRAPHS.md, "Programmatic dependent
 * launches", says why a chain stays ordered and why buffer reuse stays
 * safe). Every thread waits, so that no block ends before the kernel
 * before it has: this grid's completion then implies that one's, which is
 * what the wait of the kernel after relies on.
 *
 * The trigger follows the wait: the kernel after is launched (and its
 * blocks fetch their weights, skinny.c and gemv.c, or wait) as soon as
 * every block of this grid has passed its wait, which overlaps that
 * launch with this kernel's whole body. Before the wait it would let a
 * kernel two places on be resident, its blocks holding registers and
 * shared memory while they waited behind a kernel that had not yet begun:
 * here at most the running grid and the next one's blocks are on the
 * SMs. Below sm 90 both are compiled out.
 */
#define WAIT_ASM "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
#define TRIGGER_ASM "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"

const char fc_cuda_grid_start[] = "#if __CUDA_ARCH__ >= 900\n" WAIT_ASM TRIGGER_ASM "#endif\n";

void fc_cuda_kernel_body(fc_strbuf *s, fc_launch *l) {
    fc_strbuf_printf(s, ") {\n");
    if (l->frame) return;
    fc_strbuf_printf(s, "%s", fc_cuda_grid_start);
    l->pdl = true;
}

/* ---- plan queries of the kernels that run two groups or more ---------- */

int fc_cuda_group_input(const fc_group *gr, const fc_value *v) {
    for (int i = 0; v && i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return i;
    return -1;
}

int fc_cuda_sole_reader(const fc_plan *plan, const fc_value *v) {
    for (int i = 0; i < plan->g->noutputs; i++)
        if (plan->g->outputs[i] == v) return -1;
    int at = -1;
    for (int i = 0; i < plan->ngroups; i++)
        if (fc_cuda_group_input(plan->groups[i], v) >= 0) {
            if (at >= 0) return -1;
            at = i;
        }
    return at;
}

/* Whether arena values a and b share no byte (either outside the arena:
 * a parameter, a result in the caller's buffer). */
static bool arena_disjoint(const fc_plan *plan, const fc_value *a, const fc_value *b) {
    const int64_t oa = plan->offset[a->id], ob = plan->offset[b->id];
    return oa < 0 || ob < 0 || oa + fc_value_bytes(a) <= ob || ob + fc_value_bytes(b) <= oa;
}

bool fc_cuda_inputs_survive(const fc_plan *plan, int a, int g) {
    if (!plan->offset) return false;
    const fc_group *ga = plan->groups[a];
    for (int j = a + 1; j <= g; j++) {
        const fc_group *gj = plan->groups[j];
        if (gj->kind == FC_GROUP_ALIAS) continue; /* an alias writes nothing */
        for (int o = 0; o < gj->noutputs; o++)
            for (int i = 0; i < ga->ninputs; i++)
                if (!arena_disjoint(plan, gj->outputs[o], ga->inputs[i])) return false;
    }
    return true;
}

int fc_cuda_launch_arg(int *args, int *n, const fc_value *v) {
    for (int i = 0; i < *n; i++)
        if (args[i] == v->id) return i;
    args[*n] = v->id;
    return (*n)++;
}

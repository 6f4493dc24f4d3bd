/* pointwise.c - POINTWISE groups: each thread handles VEC consecutive
 * elements of the iteration space; inputs and outputs with the space's own
 * shape move as 16-byte vectors. A group's body is a device function over
 * a range of threads, so that independent small groups can share one
 * launch (fc_cg_batched_launch). */
#include "kernel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Threads a pointwise group needs (one per VEC elements); in a dynamic
 * plan, the static factor of that count. */
static int64_t pointwise_threads(kctx *k) {
    fc_mono n = fc_group_space_mono(k->gr);
    return n.c / fc_cg_vector_width(k, n.c);
}

/* A pointwise group as a device function over threads t0, t0 + stride, ...
 * A kernel of its own calls it once; a batched launch calls several. */
static fc_status pointwise_body(kctx *k, const char *name) {
    const fc_group *gr = k->gr;
    /* The vector width comes from the static factor of the element count:
     * with it the count is a multiple of VEC for every binding. */
    fc_mono n = fc_group_space_mono(gr);
    int vec = fc_cg_vector_width(k, n.c);
    fc_strbuf_printf(k->s, "static __device__ __forceinline__ void %s_body(", name);
    fc_cg_kernel_params(k);
    fc_strbuf_printf(k->s, "%si64 t0, i64 stride) {\n", gr->ninputs + gr->noutputs + (k->dyn ? k->nsyms : 0) ? ", " : "");
    if (fc_mono_is_static(&n) && n.c <= INT32_MAX) {
        /* Fewer than 2^31 elements: a 32-bit loop counter (t + stride stays
         * below 2^32: the grid covers the threads once, so stride is below
         * their count + a block) and a base that widens only at the address. */
        fc_strbuf_printf(k->s, "  for (unsigned t = (unsigned)t0; t < %lldu; t += (unsigned)stride) {\n", (long long)(n.c / vec));
        fc_strbuf_printf(k->s, "      i64 base = (i64)(t * %du);\n", vec);
    } else if (fc_mono_is_static(&n)) {
        fc_strbuf_printf(k->s, "  for (i64 t = t0; t < %lldll; t += stride) {\n", (long long)(n.c / vec));
        fc_strbuf_printf(k->s, "      i64 base = t * %d;\n", vec);
    } else {
        char ne[SZ];
        fc_strbuf_printf(k->s, "  const i64 nthreads = %s / %d;\n", fc_cuda_mono_text(&n, ne, sizeof ne), vec);
        fc_strbuf_printf(k->s, "  for (i64 t = t0; t < nthreads; t += stride) {\n");
        fc_strbuf_printf(k->s, "      i64 base = t * %d;\n", vec);
    }
    char (*vin)[24], (*vout)[24];
    if (!fc_cg_vector_names(gr, &vin, &vout)) return FC_ERR_NOMEM;
    fc_cg_chunk_base_coords(k, vec);
    fc_cg_vector_loads(k, "base", vec, vin, NULL);
    fc_cg_declare_vector_outputs(k, vec, vout);
    store_arg sa = {vec > 1 ? vout : NULL, false};
    fc_cg_elements(k, "base", vec, vin, fc_cg_store_element, &sa);
    k->chunk_coords = false;
    fc_cg_vector_stores(k, vec, vout, "base");
    fc_strbuf_printf(k->s, "  }\n}\n\n");
    free(vin);
    free(vout);
    return FC_OK;
}

#define PW_BLOCK 256u

fc_status fc_cg_pointwise_kernel(kctx *k, fc_launch *l) {
    fc_status st = pointwise_body(k, l->name);
    if (st) return st;
    int64_t grid = (pointwise_threads(k) + PW_BLOCK - 1) / PW_BLOCK;
    if (grid > (1 << 30)) grid = 1 << 30;
    if (grid < 1) grid = 1;
    fc_cg_kernel_signature(k, l, PW_BLOCK);
    fc_strbuf_printf(k->s, "  %s_body(", l->name);
    for (int i = 0; i < k->gr->ninputs; i++) fc_strbuf_printf(k->s, "a%d, ", i);
    for (int i = 0; i < k->gr->noutputs; i++) fc_strbuf_printf(k->s, "o%d, ", i);
    fc_cg_sym_args(k, "");
    fc_strbuf_printf(k->s, "(i64)blockIdx.x * %u + threadIdx.x, (i64)gridDim.x * %u);\n}\n\n", PW_BLOCK, PW_BLOCK);
    l->grid[0] = (unsigned)grid;
    l->grid[1] = l->grid[2] = 1;
    fc_mono n = fc_group_space_mono(k->gr);
    l->grid_work[0] = n;
    l->grid_per[0] = (int64_t)fc_cg_vector_width(k, n.c) * PW_BLOCK;
    l->grid_max[0] = 1 << 30;
    return FC_OK;
}

/* Independent small pointwise groups [first, last] of one batch: each body
 * is a device function; one kernel gives each group its own range of
 * blocks. The launch's arguments are the groups' arguments in order. */
fc_status fc_cg_batched_launch(const fc_plan *plan, int first, int last, fc_strbuf *s, fc_launch *l) {
    fc_graph *g = plan->g;
    l->kind = FC_LAUNCH_KERNEL;
    l->group = plan->groups[first]->id;
    snprintf(l->name, sizeof l->name, "fc_%s_b%d", g->name, first);
    size_t pos = (size_t)snprintf(l->summary, sizeof l->summary, "batch of %d:", last - first + 1);
    int nargs = 0;
    for (int i = first; i <= last; i++) nargs += plan->groups[i]->ninputs + plan->groups[i]->noutputs;
    l->args = calloc((size_t)nargs + 1, sizeof(int));
    int64_t *blocks = calloc((size_t)(last - first + 1), sizeof(int64_t));
    if (!l->args || !blocks) {
        free(blocks);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    }
    fc_status st = FC_OK;
    for (int i = first; i <= last && !st; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->nnodes && pos + 16 < sizeof l->summary; q++)
            pos += (size_t)snprintf(l->summary + pos, sizeof l->summary - pos, "%s%s", q ? "," : " ", fc_op_table[gr->nodes[q]->op].name);
        if (pos + 2 < sizeof l->summary && i < last) pos += (size_t)snprintf(l->summary + pos, sizeof l->summary - pos, ";");
        kctx k = {.p = plan, .gr = gr, .s = s, .dyn = plan->dynamic, .nsyms = g->nsyms, .frame = l->frame, .store_only_vid = -1};
        char name[80];
        snprintf(name, sizeof name, "%s_%d", l->name, i - first);
        fc_strbuf_printf(s, "// group %d (batched)\n", gr->id);
        st = pointwise_body(&k, name);
        blocks[i - first] = (pointwise_threads(&k) + PW_BLOCK - 1) / PW_BLOCK;
        if (blocks[i - first] < 1) blocks[i - first] = 1;
        if (!st && k.err) st = fc_set_error(g->ctx, k.err, "%s (group %d)", k.errmsg, gr->id);
        free(k.memo);
        free(k.cm);
    }
    if (st) {
        free(blocks);
        return st;
    }
    /* The kernel: all arguments, prefixed by group. */
    fc_cuda_kernel_open(s, l, PW_BLOCK, 0);
    int a = 0;
    for (int i = first; i <= last; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->ninputs; q++, a++) {
            fc_strbuf_printf(s, "%sconst %s *__restrict__ g%d_a%d", a ? ", " : "", fc_cuda_storage_type(gr->inputs[q]->dtype), i - first, q);
        }
        for (int q = 0; q < gr->noutputs; q++, a++)
            fc_strbuf_printf(s, "%s%s *__restrict__ g%d_o%d", a ? ", " : "", fc_cuda_storage_type(gr->outputs[q]->dtype), i - first, q);
    }
    if (plan->dynamic)
        for (int q = 0; q < g->nsyms; q++, a++) fc_strbuf_printf(s, "%si64 s%d", a ? ", " : "", q);
    fc_cuda_kernel_body(s, l);
    fc_strbuf_printf(s, "  long long b = blockIdx.x;\n");
    /* Arguments in the kernel's order: each group's reads, then its writes. */
    int at = 0;
    int64_t start = 0;
    for (int i = first; i <= last; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->ninputs; q++) l->args[at++] = gr->inputs[q]->id;
        for (int q = 0; q < gr->noutputs; q++) l->args[at++] = gr->outputs[q]->id;
        int64_t nb = blocks[i - first];
        fc_strbuf_printf(s, "  %sif (b < %lldll) %s_%d_body(", i > first ? "else " : "", (long long)(start + nb), l->name, i - first);
        for (int q = 0; q < gr->ninputs; q++) fc_strbuf_printf(s, "g%d_a%d, ", i - first, q);
        for (int q = 0; q < gr->noutputs; q++) fc_strbuf_printf(s, "g%d_o%d, ", i - first, q);
        if (plan->dynamic)
            for (int q = 0; q < g->nsyms; q++) fc_strbuf_printf(s, "s%d, ", q);
        fc_strbuf_printf(s, "(b - %lldll) * %u + threadIdx.x, %lldll * %u);\n", (long long)start, PW_BLOCK, (long long)nb, PW_BLOCK);
        start += nb;
    }
    fc_strbuf_printf(s, "}\n\n");
    free(blocks);
    l->nargs = nargs;
    l->nreads = nargs; /* reads and writes interleave by group; the runtime
                        * only maps each value id to its pointer */
    l->grid[0] = (unsigned)start;
    l->grid[1] = l->grid[2] = 1;
    /* Batched groups have static spaces: a constant grid. */
    l->grid_work[0].c = start;
    l->grid_per[0] = 1;
    l->grid_max[0] = start;
    l->nsyms = plan->dynamic ? g->nsyms : 0;
    return FC_OK;
}

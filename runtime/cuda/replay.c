/* replay.c - CUDA Graph capture and replay with pointer patching (see
 * replay.h for the why, docs/RUNTIME-GRAPHS.md for the whole story). */
#include "runtime/cuda/replay.h"
#include "runtime/cuda/nccl.h"

#include "ir/ir.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

/* One node of the graph: a launch that does something (aliases do not). */
typedef struct rnode {
    int launch;
    bool gemm;
    CUgraphNode node;
    int first_slot, nslots; /* its caller slots: r->slot_of[first_slot ..] */
} rnode;

struct fc_replay {
    CUgraph graph; /* kept: node handles belong to it */
    CUgraphExec exec;
    int nnodes;
    rnode *nodes;
    int *slot_of; /* every node's caller slots, one run after another */
    int programmatic; /* edges of the programmatic type (into fc_launch.pdl kernels) */
    /* The caller's pointers the graph holds now: inputs, then outputs. */
    int nin, nslots;
    CUdeviceptr *ptr;
    bool *changed; /* scratch, per slot */
    /* A carried frame: the carrier's node (index in nodes) and the words
     * its parameters hold now (ncarried of them); -1 and NULL otherwise. */
    int carrier_node, ncarried;
    uint64_t *carried;
};

/* The caller slot of value id (input i: i; output k: nin + k), or -1 for
 * fusec's own memory. */
static int slot_of_value(const fc_program_desc *d, int id) {
    const fc_store *s = &d->store[id];
    if (s->kind == FC_STORE_INPUT) return (int)s->index;
    if (s->kind == FC_STORE_OUTPUT) return d->nparams + (int)s->index;
    return -1;
}

CUdeviceptr fc_launch_value_ptr(const fc_replay_env *e, int id, void *const *inputs, void *const *outputs) {
    const fc_store *s = &e->d->store[id];
    switch (s->kind) {
    case FC_STORE_INPUT: return (CUdeviceptr)(uintptr_t)inputs[s->index];
    case FC_STORE_OUTPUT: return (CUdeviceptr)(uintptr_t)outputs[s->index];
    case FC_STORE_ARENA: return e->arena + (CUdeviceptr)s->index;
    case FC_STORE_NONE: break;
    }
    FC_UNREACHABLE("a launch argument without storage (the description was checked when it was made)");
}

fc_status fc_launch_params_alloc(fc_context *ctx, int max_args, fc_launch_params *out) {
    memset(out, 0, sizeof *out);
    /* One block: the maps first, at CUtensorMap's alignment (which
     * fc_ctx_malloc does not promise: the block is aligned by hand), then
     * the words, then the parameter pointers. */
    const size_t align = alignof(CUtensorMap), nargs = (size_t)max_args + 1;
    const size_t maps = FC_LAUNCH_MAX_TMAPS * sizeof(CUtensorMap), vals = nargs * sizeof(CUdeviceptr);
    char *block = fc_ctx_malloc(ctx, align + maps + vals + (nargs + FC_LAUNCH_MAX_TMAPS) * sizeof(void *));
    if (!block) return FC_ERR_NOMEM;
    char *base = block + (align - (uintptr_t)block % align) % align;
    out->block = block;
    out->map = (CUtensorMap *)(void *)base;
    out->val = (CUdeviceptr *)(void *)(base + maps);
    out->ptr = (void **)(void *)(base + maps + vals);
    return FC_OK;
}

void fc_launch_params_free(fc_context *ctx, fc_launch_params *p) {
    fc_ctx_freemem(ctx, p->block);
    memset(p, 0, sizeof *p);
}

/* The address tensor map t of launch l starts at, for argument pointer p;
 * FC_ERR_INPUT if the copy engine cannot take it. The shape was checked
 * when the description was made (codegen, or the decode of a cached one);
 * the pointer is this run's, so its alignment is checked here: a caller's
 * buffer at an odd address is an error, not a fault. */
static fc_status tmap_address(fc_context *ctx, const fc_launch *l, int t, CUdeviceptr p, CUdeviceptr *addr) {
    const fc_tmap *m = &l->tmaps[t];
    *addr = p + (CUdeviceptr)(m->offset * (int64_t)fc_dtype_size(m->dtype));
    if (*addr % 16)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "kernel %s: argument %d (at 0x%llx, + %lld elements) is not 16-byte aligned; its tensor "
                            "map (TMA) needs that: pass buffers aligned as cudaMalloc's",
                            l->name, m->arg, (unsigned long long)p, (long long)m->offset);
    return FC_OK;
}

fc_status fc_launch_check_pointers(const fc_replay_env *e, void *const *inputs, void *const *outputs) {
    for (int i = 0; i < e->d->src.nlaunches; i++) {
        const fc_launch *l = &e->d->src.launches[i];
        for (int t = 0; l->kind == FC_LAUNCH_KERNEL && t < l->ntmaps; t++) {
            CUdeviceptr addr;
            const CUdeviceptr p = fc_launch_value_ptr(e, l->args[l->tmaps[t].arg], inputs, outputs);
            fc_status st = tmap_address(e->ctx, l, t, p, &addr);
            if (st != FC_OK) return st;
        }
    }
    return FC_OK;
}

fc_status fc_launch_tmap_encode(fc_cuda_device *dev, const fc_launch *l, int t, CUdeviceptr p, CUtensorMap *out) {
    const fc_tmap *m = &l->tmaps[t];
    CUdeviceptr addr;
    fc_status st = tmap_address(dev->ctx, l, t, p, &addr);
    if (st != FC_OK) return st;
    cuuint64_t dims[FC_TMAP_MAX_RANK], strides[FC_TMAP_MAX_RANK];
    cuuint32_t box[FC_TMAP_MAX_RANK];
    for (int d = 0; d < m->rank; d++) {
        dims[d] = (cuuint64_t)m->dims[d];
        box[d] = m->box[d];
        if (d > 0) strides[d - 1] = (cuuint64_t)m->strides[d - 1];
    }
    return fc_cuda_tensor_map(dev, out,
                              m->dtype == FC_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                              (unsigned)m->rank, addr, dims, strides, box,
                              m->swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

fc_status fc_launch_args(const fc_replay_env *e, int i, void *const *inputs, void *const *outputs,
                         fc_launch_params *pa, int *count) {
    const fc_launch *l = &e->d->src.launches[i];
    int n = 0;
    *count = 0;
    if (l->kind == FC_LAUNCH_KERNEL && l->frame) {
        FC_ASSERT(e->frame != 0);
        pa->val[0] = e->frame;
        pa->ptr[0] = &pa->val[0];
        *count = 1;
        if (i == e->frame_carrier) {
            /* The words by value: the driver copies them at the launch (or
             * into the graph node), so the image may change right after. */
            FC_ASSERT(e->frame_image != NULL);
            pa->ptr[1] = (void *)e->frame_image;
            *count = 2;
        }
        return FC_OK;
    }
    for (int a = 0; a < l->nargs; a++, n++) {
        pa->val[n] = fc_launch_value_ptr(e, l->args[a], inputs, outputs);
        pa->ptr[n] = &pa->val[n];
    }
    if (l->kind == FC_LAUNCH_KERNEL && l->nsyms > 0) {
        /* A dynamic kernel's trailing `long long` parameters: the symbol
         * values, as 64-bit words (CUdeviceptr is 64 bits too). */
        FC_ASSERT(l->nsyms == e->nsyms);
        for (int k = 0; k < l->nsyms; k++, n++) {
            pa->val[n] = (CUdeviceptr)(uint64_t)e->syms[k];
            pa->ptr[n] = &pa->val[n];
        }
    }
    /* Tensor maps: encoded at every launch (host work, no device call),
     * since they hold this run's addresses. */
    for (int t = 0; l->kind == FC_LAUNCH_KERNEL && t < l->ntmaps; t++) {
        fc_status st = fc_launch_tmap_encode(e->dev, l, t, pa->val[l->tmaps[t].arg], &pa->map[t]);
        if (st != FC_OK) return st;
        pa->ptr[n++] = &pa->map[t];
    }
    *count = n;
    return FC_OK;
}

static fc_cuda_launch_cfg launch_cfg(const fc_launch *l) {
    fc_cuda_launch_cfg cfg = {{l->grid[0], l->grid[1], l->grid[2]}, {l->block[0], l->block[1], l->block[2]}, l->smem,
                              NULL, l->pdl};
    return cfg;
}

fc_status fc_replay_library_call(const fc_replay_env *e, int i, const CUdeviceptr *argval, int nargs, CUstream s) {
    const fc_conv_desc *c = fc_program_conv(e->d, i);
    if (c) return fc_cudnn_launch(e->dnn, e->ctx, c, argval, nargs, e->ws, FC_CUBLASLT_WORKSPACE_BYTES, s);
    const fc_launch *l = &e->d->src.launches[i];
    if (fc_nccl_is_collective(l->name)) {
        FC_ASSERT(nargs == 2);
        return fc_nccl_launch(e->ctx, e->nccl, e->tp_rank, l->name, argval[0], e->d->store[l->args[0]].bytes, argval[1],
                              e->d->store[l->args[1]].bytes, s);
    }
    return fc_cublaslt_launch(e->blas, e->ctx, &e->d->gemm[i], argval, nargs, e->ws, FC_CUBLASLT_WORKSPACE_BYTES, s);
}

/* Launch i's library call (a GEMM, a convolution or a collective), captured from the device's own stream into a
 * graph of its own (*child; free it with fc_cuda_graph_free). Fused
 * siblings' concatenated weights are brought up to date first, on the run's
 * stream s (before the graph that reads them is launched there), so that
 * the capture holds the matmul alone. */
static fc_status capture_gemm(const fc_replay_env *e, int i, const CUdeviceptr *argval, int nargs, CUstream s,
                              CUgraph *child) {
    *child = NULL;
    fc_status st = FC_OK;
    const fc_conv_desc *c = fc_program_conv(e->d, i);
    /* the plan is made before the capture: making one runs cuDNN's own
     * set-up work, which a capture must not record */
    if (c) st = fc_cudnn_prepare(e->dnn, e->ctx, c, FC_CUBLASLT_WORKSPACE_BYTES);
    else if (!fc_nccl_is_collective(e->d->src.launches[i].name))
        st = fc_cublaslt_refresh_weights(e->blas, e->ctx, &e->d->gemm[i], argval, nargs, s);
    if (st != FC_OK) return st;
    st = fc_cuda_capture_begin(e->dev, NULL);
    if (st != FC_OK) return st;
    fc_status launch = fc_replay_library_call(e, i, argval, nargs, e->dev->stream);
    /* End the capture whatever happened, so the stream is usable again. */
    st = fc_cuda_capture_end_graph(e->dev, NULL, child);
    if (launch != FC_OK) {
        fc_cuda_graph_free(e->dev, *child);
        *child = NULL;
        return launch;
    }
    return st;
}

int fc_replay_programmatic_edges(const fc_replay *r) { return r ? r->programmatic : 0; }

fc_status fc_replay_upload(fc_replay *r, fc_cuda_device *dev, CUstream s) {
    return fc_cuda_graph_upload(dev, r->exec, s);
}

void fc_replay_free(fc_replay *r, fc_cuda_device *dev) {
    if (!r) return;
    if (r->exec) fc_cuda_graph_destroy(dev, r->exec);
    if (r->graph) fc_cuda_graph_free(dev, r->graph);
    free(r->nodes);
    free(r->slot_of);
    free(r->ptr);
    free(r->changed);
    free(r->carried);
    free(r);
}

static void remember_pointers(fc_replay *r, void *const *inputs, void *const *outputs) {
    for (int s = 0; s < r->nslots; s++)
        r->ptr[s] = (CUdeviceptr)(uintptr_t)(s < r->nin ? inputs[s] : outputs[s - r->nin]);
}

/* Node n's caller slots (which of launch l's arguments are the caller's
 * buffers), from r->slot_of[*nslot] on. */
static void node_slots(fc_replay *r, rnode *n, const fc_program_desc *d, const fc_launch *l, int *nslot) {
    n->first_slot = *nslot;
    /* A frame kernel's one parameter is the frame: no caller pointer. */
    for (int a = 0; a < l->nargs && !l->frame; a++) {
        int s = slot_of_value(d, l->args[a]);
        if (s >= 0) r->slot_of[(*nslot)++] = s;
    }
    n->nslots = *nslot - n->first_slot;
}

/* Node n given its launch's parameters for these pointers and e's shape:
 * a kernel node's parameters and grid set, a cuBLASLt call captured again
 * (on stream s) and swapped in. On failure the caller drops the graph: a
 * node half-patched would run with stale pointers. */
static fc_status patch_node(fc_replay *r, const fc_replay_env *e, const rnode *n, void *const *inputs,
                            void *const *outputs, fc_launch_params *pa, CUstream s) {
    const fc_launch *l = &e->d->src.launches[n->launch];
    /* Tensor maps are made again here, over the new pointers. */
    int nparams;
    fc_status st = fc_launch_args(e, n->launch, inputs, outputs, pa, &nparams);
    if (st != FC_OK) return st;
    if (!n->gemm) {
        fc_cuda_launch_cfg cfg = launch_cfg(l);
        return fc_cuda_exec_set_kernel(e->dev, r->exec, n->node, e->func[n->launch], &cfg, pa->ptr);
    }
    CUgraph child = NULL;
    st = capture_gemm(e, n->launch, pa->val, l->nargs, s, &child);
    if (st == FC_OK) st = fc_cuda_exec_set_child(e->dev, r->exec, n->node, child);
    fc_cuda_graph_free(e->dev, child);
    return st;
}

fc_status fc_replay_build(const fc_replay_env *e, void *const *inputs, void *const *outputs, fc_launch_params *pa,
                          CUstream s, fc_replay **out) {
    *out = NULL;
    const fc_program_desc *d = e->d;
    fc_replay *r = calloc(1, sizeof *r);
    if (!r) return FC_ERR_NOMEM;
    int total_args = 0;
    for (int i = 0; i < d->src.nlaunches; i++) total_args += d->src.launches[i].nargs;
    r->nin = d->nparams;
    r->nslots = d->nparams + d->noutputs;
    r->nodes = calloc((size_t)d->src.nlaunches + 1, sizeof *r->nodes);
    r->slot_of = calloc((size_t)total_args + 1, sizeof *r->slot_of);
    r->ptr = calloc((size_t)r->nslots + 1, sizeof *r->ptr);
    r->changed = calloc((size_t)r->nslots + 1, sizeof *r->changed);
    r->carrier_node = -1;
    if (e->frame_image && e->frame_carrier >= 0) {
        r->ncarried = d->src.frame_words;
        r->carried = malloc(sizeof(uint64_t) * (size_t)r->ncarried);
    }
    if (!r->nodes || !r->slot_of || !r->ptr || !r->changed || (r->ncarried && !r->carried)) {
        fc_replay_free(r, e->dev);
        return FC_ERR_NOMEM;
    }
    fc_status st = fc_cuda_graph_create(e->dev, &r->graph);
    CUgraphNode prev = NULL;
    bool prev_kernel = false; /* prev is a kernel node (not a cuBLASLt call's child graph) */
    int nslot = 0;
    for (int i = 0; i < d->src.nlaunches && st == FC_OK; i++) {
        const fc_launch *l = &d->src.launches[i];
        /* A view runs nothing; a load-time launch runs before the graph,
         * when the weights are loaded (program_launch.c). */
        if (l->kind == FC_LAUNCH_ALIAS || l->loadtime) continue;
        rnode *n = &r->nodes[r->nnodes];
        n->launch = i;
        n->gemm = l->kind == FC_LAUNCH_LIBRARY;
        node_slots(r, n, d, l, &nslot);
        int nparams;
        st = fc_launch_args(e, i, inputs, outputs, pa, &nparams);
        if (st != FC_OK) break;
        if (n->gemm) {
            CUgraph child = NULL;
            st = capture_gemm(e, i, pa->val, l->nargs, s, &child);
            if (st == FC_OK) st = fc_cuda_graph_add_child(e->dev, r->graph, prev, child, &n->node);
            fc_cuda_graph_free(e->dev, child); /* the parent holds a copy */
        } else if (prev_kernel && l->pdl) {
            fc_cuda_launch_cfg cfg = launch_cfg(l);
            bool made = false;
            st = fc_cuda_graph_add_kernel_programmatic(e->dev, r->graph, prev, e->func[i], &cfg, pa->ptr, &n->node,
                                                       &made);
            r->programmatic += made;
        } else {
            fc_cuda_launch_cfg cfg = launch_cfg(l);
            st = fc_cuda_graph_add_kernel(e->dev, r->graph, prev, e->func[i], &cfg, pa->ptr, &n->node);
        }
        if (st == FC_OK && i == e->frame_carrier && r->carried) {
            r->carrier_node = r->nnodes;
            memcpy(r->carried, e->frame_image, sizeof(uint64_t) * (size_t)r->ncarried);
        }
        prev = n->node;
        prev_kernel = !n->gemm;
        r->nnodes++;
    }
    if (st == FC_OK) st = fc_cuda_graph_instantiate(e->dev, r->graph, &r->exec);
    if (st != FC_OK) {
        fc_replay_free(r, e->dev);
        return st;
    }
    remember_pointers(r, inputs, outputs);
    *out = r;
    return FC_OK;
}

/* Whether every launch is a kernel (or an alias): a variant's one graph
 * for every shape holds kernel nodes only, since a cuBLASLt call's
 * captured kernels depend on the shape. */
bool fc_replay_kernels_only(const fc_program_desc *d) {
    for (int i = 0; i < d->src.nlaunches; i++)
        if (d->src.launches[i].kind == FC_LAUNCH_LIBRARY) return false;
    return true;
}

fc_status fc_replay_launch(fc_replay *r, const fc_replay_env *e, void *const *inputs, void *const *outputs,
                           fc_launch_params *pa, CUstream s, uint64_t *patched) {
    bool any = false;
    for (int q = 0; q < r->nslots; q++) {
        CUdeviceptr p = (CUdeviceptr)(uintptr_t)(q < r->nin ? inputs[q] : outputs[q - r->nin]);
        r->changed[q] = p != r->ptr[q];
        any |= r->changed[q];
    }
    if (any) {
        for (int k = 0; k < r->nnodes; k++) {
            const rnode *n = &r->nodes[k];
            bool touch = false;
            for (int q = 0; q < n->nslots && !touch; q++) touch = r->changed[r->slot_of[n->first_slot + q]];
            if (!touch) continue;
            fc_status st = patch_node(r, e, n, inputs, outputs, pa, s);
            if (st != FC_OK) return st;
            ++*patched;
        }
        remember_pointers(r, inputs, outputs);
    }
    /* The carrier, with this run's words when they differ from its own (a
     * new shape, new buffers, a moved arena). */
    const size_t words = sizeof(uint64_t) * (size_t)r->ncarried;
    if (r->carrier_node >= 0 && memcmp(r->carried, e->frame_image, words)) {
        fc_status st = patch_node(r, e, &r->nodes[r->carrier_node], inputs, outputs, pa, s);
        if (st != FC_OK) return st;
        memcpy(r->carried, e->frame_image, words);
        ++*patched;
    }
    return fc_cuda_graph_launch(e->dev, r->exec, s);
}

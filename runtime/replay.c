/* replay.c - CUDA Graph capture and replay with pointer patching (see
 * replay.h for the why, docs/RUNTIME-GRAPHS.md for the whole story). */
#include "runtime/replay.h"

#include "ir/ir.h"

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
    /* The caller's pointers the graph holds now: inputs, then outputs. */
    int nin, nslots;
    CUdeviceptr *ptr;
    bool *changed; /* scratch, per slot */
};

/* The caller slot of value id (input i: i; output k: nin + k), or -1 for
 * fusec's own memory. */
static int slot_of_value(const fc_program_desc *d, int id) {
    const fc_store *s = &d->store[id];
    if (s->kind == FC_STORE_INPUT) return (int)s->index;
    if (s->kind == FC_STORE_OUTPUT) return d->nparams + (int)s->index;
    return -1;
}

static CUdeviceptr value_ptr(const fc_replay_env *e, int id, void *const *inputs, void *const *outputs) {
    const fc_store *s = &e->d->store[id];
    switch (s->kind) {
    case FC_STORE_INPUT: return (CUdeviceptr)(uintptr_t)inputs[s->index];
    case FC_STORE_OUTPUT: return (CUdeviceptr)(uintptr_t)outputs[s->index];
    case FC_STORE_ARENA: return e->arena + (CUdeviceptr)s->index;
    case FC_STORE_NONE: break;
    }
    FC_UNREACHABLE("a launch argument without storage (the description was checked when it was made)");
}

int fc_launch_args(const fc_replay_env *e, int i, void *const *inputs, void *const *outputs, CUdeviceptr *argval,
                   void **argptr) {
    const fc_launch *l = &e->d->src.launches[i];
    int n = 0;
    for (int a = 0; a < l->nargs; a++, n++) {
        argval[n] = value_ptr(e, l->args[a], inputs, outputs);
        argptr[n] = &argval[n];
    }
    if (l->kind == FC_LAUNCH_KERNEL && l->nsyms > 0) {
        /* A dynamic kernel's trailing `long long` parameters: the symbol
         * values, as 64-bit words (CUdeviceptr is 64 bits too). */
        FC_ASSERT(l->nsyms == e->nsyms);
        for (int k = 0; k < l->nsyms; k++, n++) {
            argval[n] = (CUdeviceptr)(uint64_t)e->syms[k];
            argptr[n] = &argval[n];
        }
    }
    return n;
}

static fc_cuda_launch_cfg launch_cfg(const fc_launch *l) {
    fc_cuda_launch_cfg cfg = {{l->grid[0], l->grid[1], l->grid[2]}, {l->block[0], l->block[1], l->block[2]}, l->smem,
                              NULL};
    return cfg;
}

/* Launch i's cuBLASLt call, captured from the device's own stream into a
 * graph of its own (*child; free it with fc_cuda_graph_free). Fused
 * siblings' concatenated weights are brought up to date first, on the run's
 * stream s (before the graph that reads them is launched there), so that
 * the capture holds the matmul alone. */
static fc_status capture_gemm(const fc_replay_env *e, int i, const CUdeviceptr *argval, int nargs, CUstream s,
                              CUgraph *child) {
    *child = NULL;
    fc_status st = fc_cublaslt_refresh_weights(e->blas, e->ctx, &e->d->gemm[i], argval, nargs, s);
    if (st != FC_OK) return st;
    st = fc_cuda_capture_begin(e->dev, NULL);
    if (st != FC_OK) return st;
    fc_status launch = fc_cublaslt_launch(e->blas, e->ctx, &e->d->gemm[i], argval, nargs, e->ws,
                                          FC_CUBLASLT_WORKSPACE_BYTES, e->dev->stream);
    /* End the capture whatever happened, so the stream is usable again. */
    st = fc_cuda_capture_end_graph(e->dev, NULL, child);
    if (launch != FC_OK) {
        fc_cuda_graph_free(e->dev, *child);
        *child = NULL;
        return launch;
    }
    return st;
}

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
    free(r);
}

static void remember_pointers(fc_replay *r, void *const *inputs, void *const *outputs) {
    for (int s = 0; s < r->nslots; s++)
        r->ptr[s] = (CUdeviceptr)(uintptr_t)(s < r->nin ? inputs[s] : outputs[s - r->nin]);
}

fc_status fc_replay_build(const fc_replay_env *e, void *const *inputs, void *const *outputs, CUdeviceptr *argval,
                          void **argptr, CUstream s, fc_replay **out) {
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
    if (!r->nodes || !r->slot_of || !r->ptr || !r->changed) {
        fc_replay_free(r, e->dev);
        return FC_ERR_NOMEM;
    }
    fc_status st = fc_cuda_graph_create(e->dev, &r->graph);
    CUgraphNode prev = NULL;
    int nslot = 0;
    for (int i = 0; i < d->src.nlaunches && st == FC_OK; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind == FC_LAUNCH_ALIAS) continue;
        rnode *n = &r->nodes[r->nnodes];
        n->launch = i;
        n->gemm = l->kind == FC_LAUNCH_LIBRARY;
        n->first_slot = nslot;
        for (int a = 0; a < l->nargs; a++) {
            int s = slot_of_value(d, l->args[a]);
            if (s >= 0) r->slot_of[nslot++] = s;
        }
        n->nslots = nslot - n->first_slot;
        fc_launch_args(e, i, inputs, outputs, argval, argptr);
        if (n->gemm) {
            CUgraph child = NULL;
            st = capture_gemm(e, i, argval, l->nargs, s, &child);
            if (st == FC_OK) st = fc_cuda_graph_add_child(e->dev, r->graph, prev, child, &n->node);
            fc_cuda_graph_free(e->dev, child); /* the parent holds a copy */
        } else {
            fc_cuda_launch_cfg cfg = launch_cfg(l);
            st = fc_cuda_graph_add_kernel(e->dev, r->graph, prev, e->func[i], &cfg, argptr, &n->node);
        }
        prev = n->node;
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

/* Whether every node is a kernel (rebinding re-points kernel nodes only:
 * a cuBLASLt call's captured kernels are the library's). */
bool fc_replay_kernels_only(const fc_program_desc *d) {
    for (int i = 0; i < d->src.nlaunches; i++)
        if (d->src.launches[i].kind == FC_LAUNCH_LIBRARY) return false;
    return true;
}

fc_status fc_replay_rebind(fc_replay *r, const fc_replay_env *e, void *const *inputs, void *const *outputs,
                           CUdeviceptr *argval, void **argptr, uint64_t *patched) {
    const fc_program_desc *d = e->d;
    int nslot = 0;
    for (int k = 0; k < r->nnodes; k++) {
        rnode *n = &r->nodes[k];
        const fc_launch *l = &d->src.launches[n->launch];
        /* The graph was built from a description with the same launches
         * (every shape of a variant has the variant's); a mismatch is a
         * broken caller, never patched over. */
        if (n->gemm || l->kind != FC_LAUNCH_KERNEL || e->func[n->launch] == NULL)
            return fc_set_error(e->ctx, FC_ERR_RUNTIME, "graph of %s: node %d is not the kernel launch %d it was built for",
                                d->graph_name, k, n->launch);
        /* Which arguments are the caller's buffers follows from the plan,
         * not the sizes, but it is cheap to take it from this shape's
         * description rather than assume it. */
        n->first_slot = nslot;
        for (int a = 0; a < l->nargs; a++) {
            int s = slot_of_value(d, l->args[a]);
            if (s >= 0) r->slot_of[nslot++] = s;
        }
        n->nslots = nslot - n->first_slot;
        fc_launch_args(e, n->launch, inputs, outputs, argval, argptr);
        fc_cuda_launch_cfg cfg = launch_cfg(l);
        fc_status st = fc_cuda_exec_set_kernel(e->dev, r->exec, n->node, e->func[n->launch], &cfg, argptr);
        if (st != FC_OK) return st;
        ++*patched;
    }
    remember_pointers(r, inputs, outputs);
    return FC_OK;
}

fc_status fc_replay_launch(fc_replay *r, const fc_replay_env *e, void *const *inputs, void *const *outputs,
                           CUdeviceptr *argval, void **argptr, CUstream s, uint64_t *patched) {
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
            const fc_launch *l = &e->d->src.launches[n->launch];
            fc_launch_args(e, n->launch, inputs, outputs, argval, argptr);
            fc_status st;
            if (n->gemm) {
                CUgraph child = NULL;
                st = capture_gemm(e, n->launch, argval, l->nargs, s, &child);
                if (st == FC_OK) st = fc_cuda_exec_set_child(e->dev, r->exec, n->node, child);
                fc_cuda_graph_free(e->dev, child);
            } else {
                fc_cuda_launch_cfg cfg = launch_cfg(l);
                st = fc_cuda_exec_set_kernel(e->dev, r->exec, n->node, e->func[n->launch], &cfg, argptr);
            }
            /* A node half-patched would run with stale pointers: the caller
             * drops the graph on any failure. */
            if (st != FC_OK) return st;
            ++*patched;
        }
        remember_pointers(r, inputs, outputs);
    }
    return fc_cuda_graph_launch(e->dev, r->exec, s);
}

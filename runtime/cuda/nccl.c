/*
 * nccl.c - NCCL by dlopen (runtime/cuda/nccl.h): the few entry points the
 * collectives need, declared here with NCCL's ABI (its enum values and
 * signatures, stable since NCCL 2.0), so the build needs no nccl.h.
 */
#include "runtime/cuda/nccl.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t; /* 0: ncclSuccess */
enum { nccl_float16 = 6, nccl_float32 = 7, nccl_float64 = 8, nccl_bfloat16 = 9 };
enum { nccl_sum = 0 };

static struct {
    ncclResult_t (*CommInitAll)(ncclComm_t *comms, int ndev, const int *devlist);
    ncclResult_t (*CommDestroy)(ncclComm_t comm);
    ncclResult_t (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t comm,
                              CUstream s);
    ncclResult_t (*AllGather)(const void *send, void *recv, size_t sendcount, int dtype, ncclComm_t comm,
                              CUstream s);
    ncclResult_t (*ReduceScatter)(const void *send, void *recv, size_t recvcount, int dtype, int op,
                                  ncclComm_t comm, CUstream s);
    const char *(*GetErrorString)(ncclResult_t r);
} nccl;
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    /* The soname; the toolkit's lib64 holds it where PyTorch's wheel or the
     * system's package does not. */
    static const char *const names[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    void *lib = NULL;
    for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "no NCCL: libnccl.so.2 not found (%s)", e ? e : "dlopen failed");
        return;
    }
    static const struct { const char *name; size_t off; } syms[] = {
        {"ncclCommInitAll", offsetof(__typeof__(nccl), CommInitAll)},
        {"ncclCommDestroy", offsetof(__typeof__(nccl), CommDestroy)},
        {"ncclAllReduce", offsetof(__typeof__(nccl), AllReduce)},
        {"ncclAllGather", offsetof(__typeof__(nccl), AllGather)},
        {"ncclReduceScatter", offsetof(__typeof__(nccl), ReduceScatter)},
        {"ncclGetErrorString", offsetof(__typeof__(nccl), GetErrorString)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *fn = dlsym(lib, syms[i].name);
        if (!fn) {
            snprintf(load_error, sizeof load_error, "no NCCL: libnccl.so.2 has no %s", syms[i].name);
            memset(&nccl, 0, sizeof nccl);
            dlclose(lib);
            return;
        }
        memcpy((char *)&nccl + syms[i].off, &fn, sizeof fn);
    }
}

static fc_status loaded(fc_context *ctx) {
    pthread_once(&load_once, load);
    return nccl.CommInitAll ? FC_OK : fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s", load_error);
}

static fc_status check(fc_context *ctx, ncclResult_t r, const char *call) {
    if (r == 0) return FC_OK;
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s failed: %s (ncclResult_t %d)", call,
                        nccl.GetErrorString ? nccl.GetErrorString(r) : "?", r);
}

typedef struct nccl_group {
    int n;
    ncclComm_t comms[];
} nccl_group;

fc_status fc_nccl_group_new(fc_context *ctx, int degree, void **out) {
    *out = NULL;
    fc_status st = loaded(ctx);
    if (st != FC_OK) return st;
    fc_cuda_device_info info;
    if ((st = fc_cuda_device_query(ctx, degree - 1, &info)) != FC_OK)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "a tensor-parallel group of %d needs %d GPUs: %s", degree,
                            degree, fc_last_error(ctx));
    nccl_group *g = calloc(1, sizeof *g + sizeof(ncclComm_t) * (size_t)degree);
    int *devs = calloc((size_t)degree, sizeof *devs);
    if (!g || !devs) {
        free(g);
        free(devs);
        return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < degree; i++) devs[i] = i;
    g->n = degree;
    st = check(ctx, nccl.CommInitAll(g->comms, degree, devs), "ncclCommInitAll");
    free(devs);
    if (st != FC_OK) {
        free(g);
        return st;
    }
    *out = g;
    return FC_OK;
}

void fc_nccl_group_free(void *grp) {
    nccl_group *g = grp;
    if (!g) return;
    for (int i = 0; i < g->n; i++)
        if (g->comms[i]) nccl.CommDestroy(g->comms[i]);
    free(g);
}

static int op_of(const char *name) {
    static const char *const ops[] = {"all_reduce.", "all_gather.", "reduce_scatter."};
    for (int i = 0; i < 3; i++)
        if (!strncmp(name, ops[i], strlen(ops[i]))) return i;
    return -1;
}

bool fc_nccl_is_collective(const char *name) { return op_of(name) >= 0; }

fc_status fc_nccl_launch(fc_context *ctx, const void *grp, int rank, const char *name, CUdeviceptr in,
                         int64_t in_bytes, CUdeviceptr out, int64_t out_bytes, CUstream s) {
    const nccl_group *g = grp;
    int op = op_of(name);
    FC_ASSERT(op >= 0);
    if (!g) return fc_set_error(ctx, FC_ERR_USAGE, "%s needs a tensor-parallel group (fc_compile_options.tp)", name);
    if (rank < 0 || rank >= g->n)
        return fc_set_error(ctx, FC_ERR_USAGE, "%s: rank %d of a group of %d", name, rank, g->n);
    const char *dt = strchr(name, '.') + 1;
    int nt = !strcmp(dt, "f32") ? nccl_float32 : !strcmp(dt, "bf16") ? nccl_bfloat16 : !strcmp(dt, "f16") ? nccl_float16
             : !strcmp(dt, "f64") ? nccl_float64 : -1;
    size_t es = nt == nccl_float64 ? 8 : nt == nccl_float32 ? 4 : 2;
    if (nt < 0) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s: NCCL has no such dtype", name);
    void *src = (void *)(uintptr_t)in, *dst = (void *)(uintptr_t)out;
    ncclComm_t c = g->comms[rank];
    if (op == 0) return check(ctx, nccl.AllReduce(src, dst, (size_t)out_bytes / es, nt, nccl_sum, c, s), "ncclAllReduce");
    if (op == 1) return check(ctx, nccl.AllGather(src, dst, (size_t)in_bytes / es, nt, c, s), "ncclAllGather");
    return check(ctx, nccl.ReduceScatter(src, dst, (size_t)out_bytes / es, nt, nccl_sum, c, s), "ncclReduceScatter");
}

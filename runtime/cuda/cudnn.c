/*
 * cudnn.c - convolution descriptions run through cuDNN's graph API
 * (cudnn.h has the contract; docs/RUNTIME.md, "Convolutions: cuDNN").
 *
 * The backend API in brief: every object is a descriptor, made with
 * CreateDescriptor, filled with SetAttribute and frozen with Finalize.
 * Tensors carry dims in NCHW order and strides that say how they are laid
 * out (here NHWC); a CONVOLUTION descriptor the geometry; operations
 * (CONVOLUTION_FORWARD, POINTWISE) name their tensors; an OPERATIONGRAPH
 * the operations; ENGINEHEUR answers engine configurations for a graph;
 * an EXECUTION_PLAN is one configuration on a handle; a VARIANT_PACK
 * binds each tensor's unique id to a device pointer for one execution.
 *
 * One entry per distinct description holds its descriptors (kept until
 * the handle goes: a plan is only valid with the graph it was made from),
 * its plan, its workspace need and its last variant pack, which a launch
 * with the same pointers reuses (a replayed CUDA Graph launches nothing
 * here; a program run launch by launch mostly meets the same pointers).
 *
 * Nothing here prints. Every cuDNN call goes through FC_DNN_CHECK, which
 * returns at once: functions that own descriptors keep them in the entry,
 * whose release frees them all.
 */
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/cuda_check.h"
#include "ir/timing.h"
#include "runtime/cuda/program_cache.h" /* fc_cache_global */

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static _Atomic long total_queries, total_disk_hits;
long fc_cudnn_heuristic_queries_total(void) { return atomic_load(&total_queries); }
long fc_cudnn_disk_hits_total(void) { return atomic_load(&total_disk_hits); }

#ifndef FUSEC_HAVE_CUDNN

bool fc_cudnn_available(size_t *version, char *why, size_t n) {
    if (version) *version = 0;
    snprintf(why, n, "fusec was built without cuDNN's headers (cudnn_graph.h)");
    return false;
}
fc_status fc_cudnn_create(fc_context *ctx, fc_cuda_device *dev, fc_cache *c, fc_cudnn **out) {
    (void)dev;
    (void)c;
    *out = NULL;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "fusec was built without cuDNN's headers: no convolution library");
}
void fc_cudnn_destroy(fc_cudnn *h) { (void)h; }
fc_status fc_cudnn_prepare(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, size_t ws_bytes) {
    (void)h;
    (void)d;
    (void)ws_bytes;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "fusec was built without cuDNN's headers: no convolution library");
}
fc_status fc_cudnn_launch(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, const CUdeviceptr *args, int nargs,
                          CUdeviceptr ws, size_t ws_bytes, CUstream s) {
    (void)args;
    (void)nargs;
    (void)ws;
    (void)s;
    return fc_cudnn_prepare(h, ctx, d, ws_bytes);
}
bool fc_cudnn_plan_info(const fc_cudnn *h, const fc_conv_desc *d, fc_cudnn_plan_stat *out) {
    (void)h;
    (void)d;
    memset(out, 0, sizeof *out);
    return false;
}
int fc_cudnn_heuristic_queries(const fc_cudnn *h) { return h ? 0 : 0; }
int fc_cudnn_disk_hits(const fc_cudnn *h) { return h ? 0 : 0; }

#else

#include <cudnn_graph.h>
#include <dlfcn.h>
#include <pthread.h>

/* ------------------------------------------------------------------ */
/* The library, loaded once                                             */
/* ------------------------------------------------------------------ */

#define DNN_FUNCS(X)                                                                                             \
    X(size_t, GetVersion, (void))                                                                                \
    X(const char *, GetErrorString, (cudnnStatus_t))                                                             \
    X(void, GetLastErrorString, (char *, size_t))                                                                \
    X(cudnnStatus_t, Create, (cudnnHandle_t *))                                                                  \
    X(cudnnStatus_t, Destroy, (cudnnHandle_t))                                                                   \
    X(cudnnStatus_t, SetStream, (cudnnHandle_t, cudaStream_t))                                                   \
    X(cudnnStatus_t, BackendCreateDescriptor, (cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *))        \
    X(cudnnStatus_t, BackendDestroyDescriptor, (cudnnBackendDescriptor_t))                                       \
    X(cudnnStatus_t, BackendFinalize, (cudnnBackendDescriptor_t))                                                \
    X(cudnnStatus_t, BackendSetAttribute,                                                                        \
      (cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, const void *)) \
    X(cudnnStatus_t, BackendGetAttribute,                                                                        \
      (cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,       \
       int64_t *, void *))                                                                                       \
    X(cudnnStatus_t, BackendExecute, (cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t))

typedef struct dnn_api {
#define X(ret, name, args) ret(*name) args;
    DNN_FUNCS(X)
#undef X
    size_t version;
    char why[256]; /* why it is not usable; "" when it is */
} dnn_api;

static dnn_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void load_api(void) {
    static const char *const names[] = {"libcudnn.so.9", "libcudnn_graph.so.9"};
    void *lib = NULL;
    const char *err = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && (err = dlerror()) == NULL) err = "dlopen failed";
    }
    if (!lib) {
        snprintf(api.why, sizeof api.why,
                 "cuDNN 9 not found (libcudnn.so.9 on the loader's path, e.g. LD_LIBRARY_PATH: %.160s)", err);
        return;
    }
#define X(ret, name, args)                                                                    \
    if (!(*(void **)&api.name = dlsym(lib, "cudnn" #name))) {                                 \
        snprintf(api.why, sizeof api.why, "cuDNN has no cudnn%s (an older library?)", #name); \
        return;                                                                               \
    }
    DNN_FUNCS(X)
#undef X
    api.version = api.GetVersion();
    if (api.version < 90000) {
        snprintf(api.why, sizeof api.why, "cuDNN %zu is older than 9.0", api.version);
        return;
    }
    /* The library stays loaded for the process, as the driver does. */
}

bool fc_cudnn_available(size_t *version, char *why, size_t n) {
    pthread_once(&api_once, load_api);
    if (version) *version = api.why[0] ? 0 : api.version;
    if (api.why[0] && why) snprintf(why, n, "%s", api.why);
    return !api.why[0];
}

static fc_status dnn_fail(fc_context *ctx, cudnnStatus_t r, const char *call, const char *file, int line) {
    char last[512] = "";
    api.GetLastErrorString(last, sizeof last);
    return fc_set_error(ctx, r == CUDNN_STATUS_NOT_SUPPORTED ? FC_ERR_UNSUPPORTED : FC_ERR_RUNTIME,
                        "%s:%d: %s failed: %s%s%.400s", file, line, call, api.GetErrorString(r), last[0] ? ": " : "",
                        last);
}

#define FC_DNN_CHECK(ctx, call)                                                      \
    do {                                                                             \
        cudnnStatus_t fc_dnn_r_ = (call);                                            \
        if (fc_dnn_r_ != CUDNN_STATUS_SUCCESS)                                       \
            return dnn_fail((ctx), fc_dnn_r_, #call, __FILE__, __LINE__);            \
    } while (0)

/* ------------------------------------------------------------------ */
/* Entries                                                              */
/* ------------------------------------------------------------------ */

#define MAX_DESCS 128 /* the graph (~20), heuristic answers and their plans, a choice's knobs */
#define CANDIDATES 8 /* answers asked of each heuristic mode */
#define MIN_CANDIDATES 3 /* fewer plans from mode A: the fallback mode's too */
#define MAX_CANDIDATES 8 /* plans finalized and timed, at most */
#define TIMED_RUNS 3 /* runs timed per candidate, after one warm-up run */
#define SEARCH_BUDGET_MS 300.0 /* host time after which no more candidates are finalized */

/* The unique ids of the graph's tensors. */
enum { UID_X = 1, UID_W, UID_Y, UID_BIAS, UID_RES, UID_VIRTUAL = 100 };

typedef struct dnn_entry {
    fc_conv_desc key; /* the description with its argument positions cleared */
    cudnnBackendDescriptor_t descs[MAX_DESCS]; /* everything made for it, freed in reverse */
    int ndescs;
    cudnnBackendDescriptor_t graph, plan;
    int64_t ws;
    int64_t engine; /* the plan's engine (its global index) */
    double ms;      /* its measured time per run (from the search or the disk record); 0: not measured */
    int ncandidates; /* plans the search timed (0: the plan came from disk) */
    /* the last variant pack and the pointers it binds (x, w, y, bias, residual, workspace) */
    cudnnBackendDescriptor_t pack;
    void *pack_ptrs[6];
} dnn_entry;

struct fc_cudnn {
    fc_context *ctx;
    fc_cuda_device *dev;
    fc_cache *cache;
    cudnnHandle_t handle;
    dnn_entry *entries; /* by value: a pointer to one lives no longer than a call */
    int nentries, cap;
    int queries, disk_hits;
};

static fc_conv_desc key_of(const fc_conv_desc *d) {
    fc_conv_desc k;
    memset(&k, 0, sizeof k);
    k.dt = d->dt, k.out = d->out, k.N = d->N, k.H = d->H, k.W = d->W, k.C = d->C, k.M = d->M, k.kh = d->kh;
    k.kw = d->kw, k.groups = d->groups, k.OH = d->OH, k.OW = d->OW;
    for (int i = 0; i < 2; i++) {
        k.stride[i] = d->stride[i], k.dilation[i] = d->dilation[i];
        k.pad_begin[i] = d->pad_begin[i], k.pad_end[i] = d->pad_end[i];
    }
    k.has_bias = d->has_bias, k.has_residual = d->has_residual, k.act = d->act;
    return k;
}

static void entry_free(dnn_entry *e) {
    if (e->pack) api.BackendDestroyDescriptor(e->pack);
    for (int i = e->ndescs - 1; i >= 0; i--) api.BackendDestroyDescriptor(e->descs[i]);
    memset(e, 0, sizeof *e);
}

/* A new descriptor of type t, owned by e. */
static fc_status make(fc_context *ctx, dnn_entry *e, cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
    *out = NULL;
    if (e->ndescs == MAX_DESCS) return fc_set_error(ctx, FC_ERR_RUNTIME, "internal error: cuDNN entry full");
    FC_DNN_CHECK(ctx, api.BackendCreateDescriptor(t, out));
    e->descs[e->ndescs++] = *out;
    return FC_OK;
}

static fc_status set(fc_context *ctx, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                     cudnnBackendAttributeType_t t, int64_t n, const void *v) {
    FC_DNN_CHECK(ctx, api.BackendSetAttribute(d, a, t, n, v));
    return FC_OK;
}

static fc_status finalize(fc_context *ctx, cudnnBackendDescriptor_t d) {
    FC_DNN_CHECK(ctx, api.BackendFinalize(d));
    return FC_OK;
}

#define TRY(x)                            \
    do {                                  \
        fc_status try_st_ = (x);          \
        if (try_st_ != FC_OK) return try_st_; \
    } while (0)

static cudnnDataType_t dnn_type(fc_dtype dt) {
    switch (dt) {
    case FC_F16: return CUDNN_DATA_HALF;
    case FC_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* A tensor of dims [n, c, h, w] (cuDNN's order) stored NHWC. */
static fc_status tensor(fc_context *ctx, dnn_entry *e, int64_t uid, fc_dtype dt, int64_t n, int64_t c, int64_t h,
                        int64_t w, bool virt, cudnnBackendDescriptor_t *out) {
    TRY(make(ctx, e, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
    int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16;
    cudnnDataType_t t = virt ? CUDNN_DATA_FLOAT : dnn_type(dt);
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t));
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    bool v = virt;
    TRY(set(ctx, *out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    return finalize(ctx, *out);
}

/* A pointwise op of mode m: y = m(x[, b]). */
static fc_status pointwise(fc_context *ctx, dnn_entry *e, cudnnPointwiseMode_t m, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *op) {
    cudnnBackendDescriptor_t pw;
    TRY(make(ctx, e, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    TRY(set(ctx, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m));
    TRY(set(ctx, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    TRY(finalize(ctx, pw));
    TRY(make(ctx, e, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    TRY(set(ctx, *op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    TRY(set(ctx, *op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b) TRY(set(ctx, *op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    TRY(set(ctx, *op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    return finalize(ctx, *op);
}

/* One epilogue step: a pointwise mode and its second operand's id (0: none). */
typedef struct pw_step {
    cudnnPointwiseMode_t mode;
    int64_t operand;
} pw_step;

/* The operation graph of d: the convolution, then its epilogue. */
static fc_status build_graph(fc_cudnn *h, fc_context *ctx, dnn_entry *e, const fc_conv_desc *d) {
    cudnnBackendDescriptor_t x, w, y, ops[5];
    int nops = 0;
    int steps = d->has_bias + d->has_residual + (d->act != FC_GEMM_ACT_NONE);
    if (steps == 0 && d->out != d->dt) steps = 1; /* an identity: the conversion alone */
    TRY(tensor(ctx, e, UID_X, d->dt, d->N, d->C, d->H, d->W, false, &x));
    TRY(tensor(ctx, e, UID_W, d->dt, d->M, d->C / d->groups, d->kh, d->kw, false, &w));
    TRY(tensor(ctx, e, UID_Y, d->out, d->N, d->M, d->OH, d->OW, false, &y));
    /* The convolution's result: y itself, or a virtual f32 tensor the
     * epilogue reads. */
    int64_t vuid = UID_VIRTUAL;
    cudnnBackendDescriptor_t cur = y;
    if (steps > 0) TRY(tensor(ctx, e, vuid++, FC_F32, d->N, d->M, d->OH, d->OW, true, &cur));

    cudnnBackendDescriptor_t conv;
    TRY(make(ctx, e, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nsp = 2;
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, d->dilation));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, d->stride));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, d->pad_begin));
    TRY(set(ctx, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, d->pad_end));
    TRY(finalize(ctx, conv));

    cudnnBackendDescriptor_t op;
    TRY(make(ctx, e, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    float alpha = 1.0f, beta = 0.0f;
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur));
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    TRY(set(ctx, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    TRY(finalize(ctx, op));
    ops[nops++] = op;

    /* The epilogue, in the node's order: bias, residual, activation; each
     * step writes the next virtual tensor, the last one y. */
    pw_step step[4];
    int ns = 0;
    if (d->has_bias) step[ns++] = (pw_step){CUDNN_POINTWISE_ADD, UID_BIAS};
    if (d->has_residual) step[ns++] = (pw_step){CUDNN_POINTWISE_ADD, UID_RES};
    if (d->act == FC_GEMM_ACT_RELU) step[ns++] = (pw_step){CUDNN_POINTWISE_RELU_FWD, 0};
    if (d->act == FC_GEMM_ACT_GELU_TANH) step[ns++] = (pw_step){CUDNN_POINTWISE_GELU_APPROX_TANH_FWD, 0};
    if (ns == 0 && steps == 1) step[ns++] = (pw_step){CUDNN_POINTWISE_IDENTITY, 0};
    for (int i = 0; i < ns; i++) {
        cudnnBackendDescriptor_t b = NULL, next;
        if (step[i].operand == UID_BIAS) TRY(tensor(ctx, e, UID_BIAS, d->out, 1, d->M, 1, 1, false, &b));
        if (step[i].operand == UID_RES) TRY(tensor(ctx, e, UID_RES, d->out, d->N, d->M, d->OH, d->OW, false, &b));
        if (i == ns - 1) next = y;
        else TRY(tensor(ctx, e, vuid++, FC_F32, d->N, d->M, d->OH, d->OW, true, &next));
        TRY(pointwise(ctx, e, step[i].mode, cur, b, next, &op));
        ops[nops++] = op;
        cur = next;
    }

    TRY(make(ctx, e, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &e->graph));
    TRY(set(ctx, e->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
    TRY(set(ctx, e->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h->handle));
    return finalize(ctx, e->graph);
}

/* A plan of engine configuration cfg on the handle, when it finalizes
 * and needs at most ws_bytes: *plan (owned by e) and its workspace *ws. */
static fc_status plan_of(fc_cudnn *h, fc_context *ctx, dnn_entry *e, cudnnBackendDescriptor_t cfg, size_t ws_bytes,
                         cudnnBackendDescriptor_t *out, int64_t *ws_out) {
    cudnnBackendDescriptor_t plan;
    TRY(make(ctx, e, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    TRY(set(ctx, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h->handle));
    TRY(set(ctx, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    TRY(finalize(ctx, plan));
    int64_t ws = 0, n = 0;
    FC_DNN_CHECK(ctx, api.BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                              &n, &ws));
    if (ws < 0 || (uint64_t)ws > ws_bytes)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "a cuDNN plan needing %lld bytes of workspace (at most %zu)",
                            (long long)ws, ws_bytes);
    *out = plan;
    *ws_out = ws;
    return FC_OK;
}

/* Destroy descriptor d of e now (a candidate plan that lost: a finalized
 * plan of a runtime-fusion engine holds its compiled kernels). */
static void drop(dnn_entry *e, cudnnBackendDescriptor_t d) {
    for (int i = e->ndescs - 1; i >= 0; i--)
        if (e->descs[i] == d) {
            api.BackendDestroyDescriptor(d);
            memmove(e->descs + i, e->descs + i + 1, sizeof *e->descs * (size_t)(e->ndescs - i - 1));
            e->ndescs--;
            return;
        }
}

/* The engine configuration of a choice read from disk. */
static fc_status cfg_of_choice(fc_context *ctx, dnn_entry *e, const fc_cudnn_choice *c, cudnnBackendDescriptor_t *cfg) {
    cudnnBackendDescriptor_t engine, knobs[FC_CUDNN_MAX_KNOBS];
    TRY(make(ctx, e, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    TRY(set(ctx, engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e->graph));
    TRY(set(ctx, engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c->engine));
    TRY(finalize(ctx, engine));
    for (int i = 0; i < c->nknobs; i++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)c->knob_type[i];
        TRY(make(ctx, e, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]));
        TRY(set(ctx, knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type));
        TRY(set(ctx, knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c->knob_value[i]));
        TRY(finalize(ctx, knobs[i]));
    }
    TRY(make(ctx, e, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, cfg));
    TRY(set(ctx, *cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine));
    if (c->nknobs > 0)
        TRY(set(ctx, *cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, c->nknobs, knobs));
    return finalize(ctx, *cfg);
}

/* The choice that engine configuration cfg (a heuristic's answer) is. */
static fc_status choice_of_cfg(fc_context *ctx, dnn_entry *e, cudnnBackendDescriptor_t cfg, fc_cudnn_choice *c) {
    memset(c, 0, sizeof *c);
    cudnnBackendDescriptor_t engine, knobs[FC_CUDNN_MAX_KNOBS];
    int64_t n = 0;
    TRY(make(ctx, e, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    FC_DNN_CHECK(ctx, api.BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                              &engine));
    FC_DNN_CHECK(ctx, api.BackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                              &c->engine));
    for (int i = 0; i < FC_CUDNN_MAX_KNOBS; i++) TRY(make(ctx, e, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]));
    int64_t nk = 0;
    FC_DNN_CHECK(ctx, api.BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              FC_CUDNN_MAX_KNOBS, &nk, knobs));
    if (nk < 0 || nk > FC_CUDNN_MAX_KNOBS) nk = 0;
    for (int i = 0; i < nk; i++) {
        cudnnBackendKnobType_t type;
        FC_DNN_CHECK(ctx, api.BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                                                  &n, &type));
        FC_DNN_CHECK(ctx, api.BackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n,
                                                  &c->knob_value[i]));
        c->knob_type[i] = type;
    }
    c->nknobs = (int)nk;
    return FC_OK;
}

static fc_status pack_for(fc_context *ctx, dnn_entry *e, void *const ptrs[6]);
static fc_status execute(fc_cudnn *h, fc_context *ctx, dnn_entry *e, CUstream s);

/* One candidate of the search: a heuristic's answer, its finalized plan,
 * its workspace and its measured time per run (ms; <0: not measured). */
typedef struct candidate {
    cudnnBackendDescriptor_t cfg, plan;
    int64_t ws;
    double ms;
} candidate;

static size_t dt_bytes(fc_dtype dt) { return (size_t)fc_dtype_size(dt); }
static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

/* Time each candidate plan of e on stream s of device dv, whose errors go
 * to dv's own context: on scratch buffers of the operands' sizes (zeros:
 * the speed of these engines does not depend on the values), one warm-up
 * run, then TIMED_RUNS between two events. A candidate whose run fails
 * keeps ms < 0. Leaves e with no variant pack (the scratch is freed). */
static fc_status time_candidates(fc_cudnn *h, fc_cuda_device *dv, dnn_entry *e, candidate *cand, int n) {
    const fc_conv_desc *d = &e->key;
    const size_t y = (size_t)(d->N * d->OH * d->OW * d->M) * dt_bytes(d->out);
    const size_t part[5] = {(size_t)(d->N * d->H * d->W * d->C) * dt_bytes(d->dt),
                            (size_t)(d->M * d->kh * d->kw * (d->C / d->groups)) * dt_bytes(d->dt), y,
                            d->has_bias ? (size_t)d->M * dt_bytes(d->out) : 0, d->has_residual ? y : 0};
    size_t total = 0, ws = 0;
    for (int i = 0; i < 5; i++) total += up256(part[i]);
    for (int i = 0; i < n; i++) ws = (size_t)cand[i].ws > ws ? (size_t)cand[i].ws : ws;
    total += up256(ws);
    CUdeviceptr buf = 0;
    fc_cuda_timer tm = {0};
    TRY(fc_cuda_alloc(dv, total, &buf));
    fc_status st = fc_cuda_memset_async(dv, buf, 0, total, NULL);
    if (st == FC_OK) st = fc_cuda_timer_create(dv, &tm);
    void *ptrs[6] = {0};
    CUdeviceptr at = buf;
    for (int i = 0; i < 5; i++) {
        ptrs[i] = part[i] ? (void *)(uintptr_t)at : NULL;
        at += up256(part[i]);
    }
    ptrs[5] = ws ? (void *)(uintptr_t)at : NULL;
    if (st == FC_OK) st = pack_for(dv->ctx, e, ptrs); /* one pack serves every plan: it binds pointers only */
    for (int i = 0; i < n && st == FC_OK; i++) {
        cand[i].ms = -1;
        e->plan = cand[i].plan;
        fc_context scratch = {0};
        if (execute(h, &scratch, e, dv->stream) != FC_OK || fc_cuda_stream_sync(dv, NULL) != FC_OK) continue;
        bool ran = fc_cuda_timer_start(dv, &tm, NULL) == FC_OK;
        for (int r = 0; r < TIMED_RUNS && ran; r++) ran = execute(h, &scratch, e, dv->stream) == FC_OK;
        float ms = 0;
        /* the stop is recorded even after a failed run, so the stream is
         * drained before the scratch is freed */
        if (fc_cuda_timer_stop(dv, &tm, NULL, &ms) == FC_OK && ran) cand[i].ms = ms / TIMED_RUNS;
    }
    if (e->pack) api.BackendDestroyDescriptor(e->pack);
    e->pack = NULL;
    memset(e->pack_ptrs, 0, sizeof e->pack_ptrs);
    (void)fc_cuda_stream_sync(dv, NULL);
    fc_cuda_timer_destroy(dv, &tm);
    (void)fc_cuda_free(dv, buf);
    return st;
}

/* The plan of e from the heuristics, chosen by timing as cuDNN's own
 * benchmark mode and TensorRT's tactic timing choose: heuristic mode A's
 * answers (the fast, fused engines) that finalize within the workspace
 * and, when fewer than MIN_CANDIDATES of them do, the fallback mode's
 * (more general engines, which can be far slower than the fused ones:
 * the first answer that finalizes is not good enough), at most MAX_CANDIDATES,
 * each timed on the device; the fastest is kept. Finalizing a
 * runtime-fusion engine compiles its kernels, so once one candidate
 * stands, no more are finalized after SEARCH_BUDGET_MS. Where nothing can
 * be timed (no scratch memory), the first candidate is kept and *timed is
 * false (the choice is not stored: a later process times it). */
static fc_status plan_from_heuristic(fc_cudnn *h, fc_context *ctx, dnn_entry *e, size_t ws_bytes, fc_cudnn_choice *c,
                                     bool *timed) {
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    char first[512] = "";
    int64_t answers = 0;
    candidate cand[MAX_CANDIDATES];
    int ncand = 0;
    const double t0 = fc_now_ms();
    *timed = false;
    for (size_t m = 0; m < sizeof modes / sizeof *modes && ncand < MIN_CANDIDATES; m++) {
        cudnnBackendDescriptor_t heur, cfgs[CANDIDATES];
        cudnnBackendHeurMode_t mode = modes[m];
        TRY(make(ctx, e, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
        TRY(set(ctx, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e->graph));
        TRY(set(ctx, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
        TRY(finalize(ctx, heur));
        h->queries++;
        atomic_fetch_add(&total_queries, 1);
        for (int i = 0; i < CANDIDATES; i++) TRY(make(ctx, e, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
        int64_t n = 0;
        FC_DNN_CHECK(ctx, api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                  CANDIDATES, &n, cfgs));
        answers += n;
        for (int64_t i = 0; i < n && i < CANDIDATES && ncand < MAX_CANDIDATES; i++) {
            if (ncand > 0 && fc_now_ms() - t0 > SEARCH_BUDGET_MS) break;
            fc_context scratch = {0};
            candidate *k = &cand[ncand];
            *k = (candidate){.cfg = cfgs[i], .ms = -1};
            if (plan_of(h, &scratch, e, cfgs[i], ws_bytes, &k->plan, &k->ws) == FC_OK) ncand++;
            else if (!first[0]) snprintf(first, sizeof first, "%.500s", scratch.error);
        }
    }
    if (ncand == 0)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                            "cuDNN has no engine for this convolution (%lld answers from its heuristics and fallback%s%s)",
                            (long long)answers, first[0] ? "; the first: " : "", first);
    /* Timing errors are not the caller's: the first candidate stands. */
    fc_context scratch = {0};
    fc_cuda_device dv = fc_cuda_device_view(h->dev, &scratch);
    (void)time_candidates(h, &dv, e, cand, ncand);
    int best = 0;
    for (int i = 0; i < ncand; i++)
        if (cand[i].ms >= 0 && (cand[best].ms < 0 || cand[i].ms < cand[best].ms)) best = i;
    for (int i = 0; i < ncand; i++)
        if (i != best) drop(e, cand[i].plan);
    e->plan = cand[best].plan;
    e->ws = cand[best].ws;
    e->ms = cand[best].ms > 0 ? cand[best].ms : 0;
    e->ncandidates = ncand;
    *timed = cand[best].ms > 0;
    TRY(choice_of_cfg(ctx, e, cand[best].cfg, c));
    c->ms = e->ms;
    e->engine = c->engine;
    return FC_OK;
}

static fc_cache *plan_cache(const fc_cudnn *h) {
    if (h->cache) return h->cache;
    fc_context scratch = {0};
    return fc_cache_global(&scratch);
}

/* The plan of e from a choice on disk; false when there is none that
 * builds (a bad record is removed, so a new search replaces it). */
static bool plan_from_disk(fc_cudnn *h, dnn_entry *e, const fc_cache_key *key, size_t ws_bytes) {
    fc_cache *c = plan_cache(h);
    if (!c || fc_cache_mode_of(c) == FC_CACHE_OFF) return false;
    fc_context scratch = {0};
    void *data = NULL;
    size_t size = 0;
    if (fc_cache_get(c, &scratch, FC_CACHE_ALGO, key, &data, &size) != FC_OK || !data) return false;
    fc_cudnn_choice ch;
    bool ok = fc_cudnn_choice_decode(key, data, size, &ch);
    fc_ctx_freemem(&scratch, data);
    cudnnBackendDescriptor_t cfg;
    if (ok)
        ok = cfg_of_choice(&scratch, e, &ch, &cfg) == FC_OK &&
             plan_of(h, &scratch, e, cfg, ws_bytes, &e->plan, &e->ws) == FC_OK;
    if (!ok) (void)fc_cache_remove(c, &scratch, FC_CACHE_ALGO, key);
    if (ok) e->engine = ch.engine, e->ms = ch.ms;
    return ok;
}

static void plan_to_disk(fc_cudnn *h, const fc_cache_key *key, const fc_cudnn_choice *ch) {
    fc_cache *c = plan_cache(h);
    if (!c || fc_cache_mode_of(c) == FC_CACHE_OFF) return;
    fc_context scratch = {0};
    uint8_t rec[FC_CUDNN_RECORD_MAX];
    size_t n = fc_cudnn_choice_encode(key, ch, rec);
    (void)fc_cache_put(c, &scratch, FC_CACHE_ALGO, key, rec, n);
}

static dnn_entry *find(fc_cudnn *h, const fc_conv_desc *k) {
    for (int i = 0; i < h->nentries; i++)
        if (!memcmp(&h->entries[i].key, k, sizeof *k)) return &h->entries[i];
    return NULL;
}

/* A new entry for key k with its graph and plan. */
static fc_status new_entry(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *k, size_t ws_bytes, dnn_entry **out) {
    if (h->nentries == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        dnn_entry *grown = fc_ctx_malloc(ctx, sizeof *grown * (size_t)cap);
        if (!grown) return FC_ERR_NOMEM;
        if (h->nentries) memcpy(grown, h->entries, sizeof *grown * (size_t)h->nentries);
        fc_ctx_freemem(ctx, h->entries);
        h->entries = grown;
        h->cap = cap;
    }
    dnn_entry *e = &h->entries[h->nentries];
    memset(e, 0, sizeof *e);
    e->key = *k;
    fc_status st = build_graph(h, ctx, e, k);
    fc_cache_key key = fc_cudnn_choice_key(k, &h->dev->info, api.version);
    if (st == FC_OK && plan_from_disk(h, e, &key, ws_bytes)) {
        h->disk_hits++;
        atomic_fetch_add(&total_disk_hits, 1);
    } else if (st == FC_OK) {
        fc_cudnn_choice ch;
        bool timed = false;
        st = plan_from_heuristic(h, ctx, e, ws_bytes, &ch, &timed);
        if (st == FC_OK && timed) plan_to_disk(h, &key, &ch);
    }
    if (st != FC_OK) {
        entry_free(e);
        return st;
    }
    h->nentries++;
    *out = e;
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* The handle                                                           */
/* ------------------------------------------------------------------ */

static fc_status make_current(fc_context *ctx, fc_cuda_device *d) {
    FC_CU_CHECK(ctx, d->cu->CtxSetCurrent(d->cuctx));
    return FC_OK;
}

static fc_status dnn_create(fc_context *ctx, cudnnHandle_t *out) {
    FC_DNN_CHECK(ctx, api.Create(out));
    return FC_OK;
}

fc_status fc_cudnn_create(fc_context *ctx, fc_cuda_device *dev, fc_cache *c, fc_cudnn **out) {
    *out = NULL;
    char why[256];
    if (!fc_cudnn_available(NULL, why, sizeof why)) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s", why);
    if (!dev) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cudnn_create: no device given");
    cudnnHandle_t handle = NULL;
    TRY(make_current(ctx, dev));
    TRY(dnn_create(ctx, &handle)); /* the handle is made in dev's context */
    fc_cudnn *h = fc_ctx_malloc(ctx, sizeof *h);
    if (!h) {
        api.Destroy(handle);
        return FC_ERR_NOMEM;
    }
    *h = (fc_cudnn){.ctx = ctx, .dev = dev, .cache = c, .handle = handle};
    *out = h;
    return FC_OK;
}

void fc_cudnn_destroy(fc_cudnn *h) {
    if (!h) return;
    /* Teardown errors are ignored, as cuBLASLt's handle's are. */
    (void)make_current(h->ctx, h->dev);
    while (h->nentries > 0) entry_free(&h->entries[--h->nentries]);
    fc_ctx_freemem(h->ctx, h->entries);
    if (h->handle) api.Destroy(h->handle);
    fc_ctx_freemem(h->ctx, h);
}

int fc_cudnn_heuristic_queries(const fc_cudnn *h) { return h ? h->queries : 0; }

bool fc_cudnn_plan_info(const fc_cudnn *h, const fc_conv_desc *d, fc_cudnn_plan_stat *out) {
    memset(out, 0, sizeof *out);
    if (!h) return false;
    fc_conv_desc k = key_of(d);
    const dnn_entry *e = find((fc_cudnn *)h, &k);
    if (!e) return false;
    *out = (fc_cudnn_plan_stat){.engine = e->engine, .ms = e->ms, .workspace = e->ws, .candidates = e->ncandidates};
    return true;
}
int fc_cudnn_disk_hits(const fc_cudnn *h) { return h ? h->disk_hits : 0; }

static fc_status entry_for(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, size_t ws_bytes, dnn_entry **out) {
    if (!h) return fc_set_error(ctx, FC_ERR_USAGE, "a convolution launch without a cuDNN handle");
    fc_conv_desc k = key_of(d);
    *out = find(h, &k);
    if (*out) return FC_OK;
    TRY(make_current(ctx, h->dev));
    return new_entry(h, ctx, &k, ws_bytes, out);
}

fc_status fc_cudnn_prepare(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, size_t ws_bytes) {
    dnn_entry *e;
    return entry_for(h, ctx, d, ws_bytes, &e);
}

/* e's variant pack for these pointers (the last one when they match). */
static fc_status pack_for(fc_context *ctx, dnn_entry *e, void *const ptrs[6]) {
    if (e->pack && !memcmp(e->pack_ptrs, ptrs, sizeof e->pack_ptrs)) return FC_OK;
    if (e->pack) api.BackendDestroyDescriptor(e->pack);
    e->pack = NULL;
    int64_t uids[5] = {UID_X, UID_W, UID_Y};
    void *data[5] = {ptrs[0], ptrs[1], ptrs[2]};
    int n = 3;
    if (e->key.has_bias) uids[n] = UID_BIAS, data[n++] = ptrs[3];
    if (e->key.has_residual) uids[n] = UID_RES, data[n++] = ptrs[4];
    cudnnBackendDescriptor_t vp;
    FC_DNN_CHECK(ctx, api.BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    e->pack = vp; /* owned from here: freed with the entry or the next pack */
    TRY(set(ctx, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    TRY(set(ctx, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, data));
    void *ws = ptrs[5];
    TRY(set(ctx, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    fc_status st = finalize(ctx, vp);
    if (st != FC_OK) {
        api.BackendDestroyDescriptor(vp);
        e->pack = NULL;
        return st;
    }
    memcpy(e->pack_ptrs, ptrs, sizeof e->pack_ptrs);
    return FC_OK;
}

static fc_status execute(fc_cudnn *h, fc_context *ctx, dnn_entry *e, CUstream s) {
    FC_DNN_CHECK(ctx, api.SetStream(h->handle, (cudaStream_t)s));
    FC_DNN_CHECK(ctx, api.BackendExecute(h->handle, e->plan, e->pack));
    return FC_OK;
}

fc_status fc_cudnn_launch(fc_cudnn *h, fc_context *ctx, const fc_conv_desc *d, const CUdeviceptr *args, int nargs,
                          CUdeviceptr ws, size_t ws_bytes, CUstream s) {
    dnn_entry *e;
    TRY(entry_for(h, ctx, d, ws_bytes, &e));
    int pos[5] = {d->x_arg, d->w_arg, d->out_arg, d->bias_arg, d->residual_arg};
    void *ptrs[6] = {0};
    for (int i = 0; i < 5; i++) {
        if (pos[i] < 0) continue;
        if (pos[i] >= nargs) return fc_set_error(ctx, FC_ERR_RUNTIME, "internal error: a convolution's argument %d of %d", pos[i], nargs);
        ptrs[i] = (void *)(uintptr_t)args[pos[i]];
        /* The tensors are declared 16-byte aligned (the arena's values
         * are 256-aligned; a caller's buffer may not be). */
        if ((uintptr_t)ptrs[i] % 16)
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                                "a convolution operand at %p is not 16-byte aligned (cuDNN's plan assumes it)", ptrs[i]);
    }
    ptrs[5] = e->ws > 0 ? (void *)(uintptr_t)ws : NULL;
    TRY(make_current(ctx, h->dev));
    TRY(pack_for(ctx, e, ptrs));
    return execute(h, ctx, e, s);
}

#endif

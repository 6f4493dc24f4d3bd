/* cupti.c - CUPTI's kernel, driver API and external-correlation activity records, CUPTI loaded with dlopen (cupti.h). */
#include "runtime/cuda/cupti.h"
#include "ir/ir.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry points, typed from CUPTI's own header. */
static struct {
    __typeof__(&cuptiActivityRegisterCallbacks) RegisterCallbacks;
    __typeof__(&cuptiActivityEnable) Enable;
    __typeof__(&cuptiActivityDisable) Disable;
    __typeof__(&cuptiActivityFlushAll) FlushAll;
    __typeof__(&cuptiActivityGetNextRecord) GetNextRecord;
    __typeof__(&cuptiActivityPushExternalCorrelationId) PushExternal;
    __typeof__(&cuptiActivityPopExternalCorrelationId) PopExternal;
    __typeof__(&cuptiGetTimestamp) GetTimestamp;
    __typeof__(&cuptiActivityEnableHWTrace) EnableHWTrace; /* optional: CUPTI 12.8 and later */
} C;
static bool hw_trace;
static bool loaded;
static char load_error[1600];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The records of the open capture (the buffer callback runs on CUPTI's
 * thread). */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static fc_cupti_kernel *kernels;
static fc_cupti_api *apis;
static fc_cupti_ext *exts;
static int nkernels, napis, nexts, ckernels, capis, cexts;
static bool rec_oom, capture_open;
static uint64_t t0_ns;

/* The toolkit's folder, from the include folder fusec was built with. */
static void toolkit_lib(char *buf, size_t n, const char *sub) {
    const char *inc = FUSEC_CUDA_INCLUDE_DIR;
    const char *colon = strchr(inc, ':');
    size_t len = colon ? (size_t)(colon - inc) : strlen(inc);
    snprintf(buf, n, "%.*s/../%s/libcupti.so", (int)len, inc, sub);
}

static void load(void) {
    char lib64[600], extras[600];
    toolkit_lib(lib64, sizeof lib64, "lib64");
    toolkit_lib(extras, sizeof extras, "extras/CUPTI/lib64");
    /* The loader's own search first (LD_LIBRARY_PATH, the cache), then the
     * toolkit's folders. */
    const char *names[] = {"libcupti.so", "libcupti.so.13", lib64, extras,
                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error,
                 "CUPTI not found (tried libcupti.so, libcupti.so.13, %s, %s): the CUDA profile needs the toolkit's "
                 "CUPTI library",
                 lib64, extras);
        return;
    }
#define SYM(field, name)                                                                                              \
    do {                                                                                                               \
        *(void **)(&C.field) = dlsym(h, name);                                                                         \
        if (!C.field) {                                                                                                \
            snprintf(load_error, sizeof load_error, "CUPTI has no %s", name);                                          \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)
    SYM(RegisterCallbacks, "cuptiActivityRegisterCallbacks");
    SYM(Enable, "cuptiActivityEnable");
    SYM(Disable, "cuptiActivityDisable");
    SYM(FlushAll, "cuptiActivityFlushAll");
    SYM(GetNextRecord, "cuptiActivityGetNextRecord");
    SYM(PushExternal, "cuptiActivityPushExternalCorrelationId");
    SYM(PopExternal, "cuptiActivityPopExternalCorrelationId");
    SYM(GetTimestamp, "cuptiGetTimestamp");
#undef SYM
    *(void **)(&C.EnableHWTrace) = dlsym(h, "cuptiActivityEnableHWTrace");
    loaded = true; /* never unloaded: CUPTI keeps threads and hooks in the driver */
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = (size_t)8 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

#define GROW(arr, n, cap)                                                                                              \
    ((n) < (cap) || ((cap) = (cap) ? 2 * (cap) : 1024, (arr) = realloc((arr), sizeof *(arr) * (size_t)(cap))) != NULL)

static double ms_of(uint64_t ns) { return ns >= t0_ns ? (double)(ns - t0_ns) * 1e-6 : -(double)(t0_ns - ns) * 1e-6; }

static void CUPTIAPI buffer_completed(CUcontext c, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)c, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&rec_lock);
    while (capture_open && C.GetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)(const void *)rec;
            if (!GROW(kernels, nkernels, ckernels)) {
                rec_oom = true;
                break;
            }
            fc_cupti_kernel *o = &kernels[nkernels++];
            o->correlation = k->correlationId;
            o->graph = k->graphId;
            o->start = ms_of(k->start);
            o->end = ms_of(k->end);
            snprintf(o->name, sizeof o->name, "%s", k->name ? k->name : "?");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_DRIVER || rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)(const void *)rec;
            if (!GROW(apis, napis, capis)) {
                rec_oom = true;
                break;
            }
            apis[napis++] = (fc_cupti_api){a->correlationId, ms_of(a->start), ms_of(a->end), a->cbid,
                                           rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME};
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
            const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)(const void *)rec;
            if (!GROW(exts, nexts, cexts)) {
                rec_oom = true;
                break;
            }
            exts[nexts++] = (fc_cupti_ext){x->correlationId, x->externalId};
        }
    }
    pthread_mutex_unlock(&rec_lock);
    free(buffer);
}

/* The kinds a capture records: the kernels, then, with calls, the rest.
 * The runtime API's calls too: cuBLASLt and cuDNN launch their kernels
 * through it, so without its records (and the external ids CUPTI attaches
 * only to recorded calls) a library call's kernels carry no tag. */
static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_DRIVER,
                                           CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
static size_t nkinds;

void fc_cupti_records_free(fc_cupti_records *r) {
    free(r->k);
    free(r->a);
    free(r->e);
    memset(r, 0, sizeof *r);
}

fc_status fc_cupti_begin(fc_context *ctx, bool calls) {
    pthread_once(&load_once, load);
    if (!loaded) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s", load_error);
    pthread_mutex_lock(&rec_lock);
    const bool busy = capture_open;
    if (!busy) {
        capture_open = true;
        nkernels = napis = nexts = 0;
        rec_oom = false;
    }
    pthread_mutex_unlock(&rec_lock);
    if (busy) return fc_set_error(ctx, FC_ERR_USAGE, "another profile is running (one at a time per process)");
    static bool registered;
    CUptiResult r = CUPTI_SUCCESS;
    if (!registered) {
        r = C.RegisterCallbacks(buffer_requested, buffer_completed);
        registered = r == CUPTI_SUCCESS;
    }
    /* Kernel timestamps from the hardware's event system where the GPU has
     * one (Blackwell on): no instrumentation around each kernel. Elsewhere
     * CUPTI instruments every kernel, which leaves each kernel's own time
     * as it is but adds about a microsecond or two between kernels. */
    static bool hw_tried;
    if (!hw_tried && r == CUPTI_SUCCESS) {
        hw_tried = true;
        hw_trace = C.EnableHWTrace && C.EnableHWTrace(1) == CUPTI_SUCCESS;
    }
    nkinds = calls ? sizeof kinds / sizeof *kinds : 1;
    for (size_t i = 0; i < nkinds && r == CUPTI_SUCCESS; i++) r = C.Enable(kinds[i]);
    if (r == CUPTI_SUCCESS) r = C.GetTimestamp(&t0_ns);
    if (r != CUPTI_SUCCESS) {
        for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) (void)C.Disable(kinds[i]);
        pthread_mutex_lock(&rec_lock);
        capture_open = false;
        pthread_mutex_unlock(&rec_lock);
        return fc_set_error(ctx, FC_ERR_RUNTIME, "CUPTI: cannot record kernel activity (error %d; another profiler "
                            "attached?)", (int)r);
    }
    return FC_OK;
}

void fc_cupti_push(uint64_t id) { (void)C.PushExternal(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id); }

void fc_cupti_pop(void) {
    uint64_t last = 0;
    (void)C.PopExternal(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

bool fc_cupti_hw_trace(void) { return hw_trace; }

double fc_cupti_now_ms(void) {
    uint64_t t = 0;
    (void)C.GetTimestamp(&t);
    return ms_of(t);
}

fc_status fc_cupti_end(fc_context *ctx, fc_cupti_records *out) {
    (void)C.FlushAll(1);
    for (size_t i = 0; i < nkinds; i++) (void)C.Disable(kinds[i]);
    (void)C.FlushAll(1);
    pthread_mutex_lock(&rec_lock);
    *out = (fc_cupti_records){kernels, apis, exts, nkernels, napis, nexts};
    const bool oom = rec_oom;
    kernels = NULL;
    apis = NULL;
    exts = NULL;
    nkernels = napis = nexts = ckernels = capis = cexts = 0;
    capture_open = false;
    pthread_mutex_unlock(&rec_lock);
    return oom ? fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (CUPTI records)") : FC_OK;
}

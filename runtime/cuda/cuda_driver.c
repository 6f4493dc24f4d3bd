/*
 * cuda_driver.c - the CUDA driver, loaded at run time, and the device API.
 *
 * libcuda is not linked: it is opened with dlopen("libcuda.so.1") the first
 * time anything asks for it, so libfusec and the fusec CLI load and work
 * (CPU backend, parsing, passes, NVRTC checks) on machines with no driver,
 * such as CI. Only cuGetProcAddress_v2 is looked up by name; every other
 * entry point comes from it, at the ABI version its typedef names (see
 * FC_CUDA_DRIVER_FUNCTIONS in cuda.h). docs/RUNTIME.md has the whole story.
 */
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_check.h"

#include <cublasLt.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Loading, once per process.                                          */
/* ------------------------------------------------------------------ */

typedef enum load_state {
    LOAD_OK,        /* driver and at least one device */
    LOAD_NO_DEVICE, /* a working driver, but no device */
    LOAD_NO_DRIVER, /* no usable libcuda */
} load_state;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static fc_cuda_driver driver;  /* written only inside load_driver */
static load_state state = LOAD_NO_DRIVER;
static char load_error[512];   /* why state != LOAD_OK */

/* Where each table entry lives, and the symbol/version to ask for. */
typedef struct driver_entry {
    const char *symbol;
    int version;
    size_t offset;
} driver_entry;

static const driver_entry driver_entries[] = {
#define FC_CUDA_DRIVER_ENTRY(name, ver) {"cu" #name, ver, offsetof(fc_cuda_driver, name)},
    FC_CUDA_DRIVER_FUNCTIONS(FC_CUDA_DRIVER_ENTRY)
};
static const driver_entry optional_entries[] = {
    FC_CUDA_DRIVER_OPTIONAL(FC_CUDA_DRIVER_ENTRY)
#undef FC_CUDA_DRIVER_ENTRY
};

/* Function and object pointers are the same size on every platform with
 * dlsym (POSIX requires it); the table is filled through void pointers. */
_Static_assert(sizeof(PFN_cuInit_v2000) == sizeof(void *), "function pointers must fit a void *");

/* Names for the few errors that can happen before cuGetErrorName is
 * resolved (or when it cannot name a code). */
static const char *fallback_error_name(CUresult r) {
    switch (r) {
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    default: return NULL;
    }
}

/* "NAME: description" for r, into buf. */
static const char *describe(CUresult r, char *buf, size_t n) {
    const char *name = NULL, *text = NULL;
    if (driver.GetErrorName && driver.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (driver.GetErrorString && driver.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
    if (!name) name = fallback_error_name(r);
    if (name && text) snprintf(buf, n, "%s: %s", name, text);
    else if (name) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "CUresult %d", (int)r);
    return buf;
}

static void load_driver(void) {
    char why[256];

    /* libcuda.so.1 is the driver's soname; the unversioned libcuda.so is a
     * development symlink (or the toolkit's stub) and must not be used. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "no CUDA driver: libcuda.so.1 not found (%s)",
                 e ? e : "dlopen failed");
        return;
    }

    /* cuGetProcAddress_v2 (CUDA 12.0+) is the one symbol taken by name. */
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (!sym) {
        snprintf(load_error, sizeof load_error,
                 "no CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2; the driver predates CUDA 12.0, "
                 "and fusec needs a CUDA 12.0 or newer driver");
        dlclose(lib);
        return;
    }
    PFN_cuGetProcAddress_v12000 get_proc;
    memcpy(&get_proc, &sym, sizeof sym);

    for (size_t i = 0; i < sizeof driver_entries / sizeof driver_entries[0]; i++) {
        const driver_entry *e = &driver_entries[i];
        void *fn = NULL;
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        /* LEGACY_STREAM: fusec always passes explicit streams, and this
         * keeps the _ptsz/_ptds variants (per-thread default stream) out. */
        CUresult r = get_proc(e->symbol, &fn, e->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
        if (r == CUDA_ERROR_STUB_LIBRARY) {
            snprintf(load_error, sizeof load_error,
                     "no CUDA driver: libcuda.so.1 is the CUDA toolkit's stub library, not a driver");
            memset(&driver, 0, sizeof driver);
            dlclose(lib);
            return;
        }
        if (r != CUDA_SUCCESS || !fn || found != CU_GET_PROC_ADDRESS_SUCCESS) {
            snprintf(load_error, sizeof load_error,
                     "no CUDA driver: libcuda.so.1 does not provide %s at the ABI of CUDA %d.%d (%s)",
                     e->symbol, e->version / 1000, e->version % 1000 / 10,
                     r != CUDA_SUCCESS ? describe(r, why, sizeof why)
                     : found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                                                                            : "symbol not found");
            memset(&driver, 0, sizeof driver);
            dlclose(lib);
            return;
        }
        memcpy((char *)&driver + e->offset, &fn, sizeof fn);
    }

    for (size_t i = 0; i < sizeof optional_entries / sizeof optional_entries[0]; i++) {
        const driver_entry *e = &optional_entries[i];
        void *fn = NULL;
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get_proc(e->symbol, &fn, e->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
        if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) fn = NULL;
        memcpy((char *)&driver + e->offset, &fn, sizeof fn);
    }

    /* From here on the table is complete; libcuda stays loaded for the
     * life of the process (unloading a driver is never safe). */
    CUresult r = driver.DriverGetVersion(&driver.version);
    if (r != CUDA_SUCCESS) driver.version = 0;

    r = driver.Init(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        state = LOAD_NO_DEVICE;
        snprintf(load_error, sizeof load_error, "no CUDA device: cuInit(0) failed: %s",
                 describe(r, why, sizeof why));
        return;
    }
    if (r != CUDA_SUCCESS) {
        snprintf(load_error, sizeof load_error, "no CUDA driver: cuInit(0) failed: %s",
                 describe(r, why, sizeof why));
        return;
    }
    int count = 0;
    r = driver.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        snprintf(load_error, sizeof load_error, "no CUDA driver: cuDeviceGetCount failed: %s",
                 describe(r, why, sizeof why));
        return;
    }
    if (count == 0) {
        state = LOAD_NO_DEVICE;
        snprintf(load_error, sizeof load_error, "no CUDA device: the driver (CUDA %d.%d) found none",
                 driver.version / 1000, driver.version % 1000 / 10);
        return;
    }
    state = LOAD_OK;
}

static load_state load(void) {
    pthread_once(&load_once, load_driver);
    return state;
}

const fc_cuda_driver *fc_cuda_driver_get(fc_context *ctx) {
    if (load() == LOAD_OK) return &driver;
    if (ctx) fc_set_error(ctx, FC_ERR_RUNTIME, "%s", load_error);
    return NULL;
}

bool fc_cuda_available(fc_context *ctx) { return fc_cuda_driver_get(ctx) != NULL; }

/* ------------------------------------------------------------------ */
/* Error recording for the check macros.                               */
/* ------------------------------------------------------------------ */

const char *fc_check_short_file(const char *file) {
    /* From the source tree's runtime/ folder on, when the path has one. */
    const char *r = NULL;
    for (const char *q = strstr(file, "runtime/"); q; q = strstr(q + 1, "runtime/"))
        if (q == file || q[-1] == '/') r = q;
    if (r) return r;
    const char *p = strrchr(file, '/');
    if (!p) return file;
    while (p > file && p[-1] != '/') p--;
    return p;
}

fc_status fc_cu_fail(fc_context *ctx, CUresult r, const char *call, const char *file, int line) {
    char what[256];
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s:%d: %s failed: %s", fc_check_short_file(file), line, call,
                        describe(r, what, sizeof what));
}

/* cuBLASLt's status strings need no handle or GPU, so this works anywhere.
 * It lives here, with the driver's, until the GEMM runtime has a file. */
fc_status fc_cublaslt_fail(fc_context *ctx, int status, const char *call, const char *file, int line) {
    cublasStatus_t s = (cublasStatus_t)status;
    const char *name = cublasLtGetStatusName(s), *text = cublasLtGetStatusString(s);
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s:%d: %s failed: %s: %s", fc_check_short_file(file), line, call,
                        name ? name : "cublasStatus_t", text ? text : "unknown status");
}

/* Add context to the error just recorded (a kernel name, a launch shape). */
static fc_status append_error(fc_context *ctx, fc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fc_status append_error(fc_context *ctx, fc_status st, const char *fmt, ...) {
    size_t len = strnlen(ctx->error, sizeof ctx->error);
    if (len + 1 < sizeof ctx->error) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error + len, sizeof ctx->error - len, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ------------------------------------------------------------------ */
/* Device query.                                                       */
/* ------------------------------------------------------------------ */

fc_status fc_cuda_device_count(fc_context *ctx, int *count) {
    if (!count) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cuda_device_count: count is NULL");
    *count = 0;
    load_state s = load();
    if (s == LOAD_NO_DEVICE) return FC_OK;
    if (s != LOAD_OK) return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", load_error);
    FC_CU_CHECK(ctx, driver.DeviceGetCount(count));
    return FC_OK;
}

fc_status fc_cuda_device_query(fc_context *ctx, int ordinal, fc_cuda_device_info *info) {
    if (!info) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cuda_device_query: info is NULL");
    const fc_cuda_driver *cu = fc_cuda_driver_get(ctx);
    if (!cu) return FC_ERR_RUNTIME;
    int count = 0;
    FC_CU_CHECK(ctx, cu->DeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count)
        return fc_set_error(ctx, FC_ERR_USAGE, "CUDA device %d does not exist (%d device%s)", ordinal, count,
                            count == 1 ? "" : "s");

    memset(info, 0, sizeof *info);
    info->ordinal = ordinal;
    info->driver_version = cu->version;
    CUdevice dev;
    FC_CU_CHECK(ctx, cu->DeviceGet(&dev, ordinal));
    FC_CU_CHECK(ctx, cu->DeviceGetName(info->name, (int)sizeof info->name, dev));
    FC_CU_CHECK(ctx, cu->DeviceTotalMem(&info->total_mem, dev));

    const struct {
        CUdevice_attribute attr;
        int *out;
    } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->sm_count},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &info->max_threads_per_block},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &info->max_shared_per_block},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info->max_shared_per_block_optin},
        {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info->l2_bytes},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, &info->warp_size},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &info->vmm},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
        FC_CU_CHECK(ctx, cu->DeviceGetAttribute(attrs[i].out, attrs[i].attr, dev));
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* The device.                                                         */
/* ------------------------------------------------------------------ */

/* Make d's primary context current on this thread. Cheap (a thread-local
 * store), and it lets any thread use the device. */
static fc_status use(fc_cuda_device *d) {
    FC_CU_CHECK(d->ctx, d->cu->CtxSetCurrent(d->cuctx));
    return FC_OK;
}

#define USE(d)                                                                 \
    do {                                                                       \
        if (!(d)) return FC_ERR_USAGE;                                         \
        fc_status use_st_ = use(d);                                            \
        if (use_st_ != FC_OK) return use_st_;                                  \
    } while (0)

static CUstream stream_or_default(const fc_cuda_device *d, CUstream s) { return s ? s : d->stream; }

/* The steps of fc_cuda_device_open; the caller closes d if one fails. */
static fc_status device_init(fc_cuda_device *d, int ordinal) {
    fc_status st = fc_cuda_device_query(d->ctx, ordinal, &d->info);
    if (st != FC_OK) return st;
    FC_CU_CHECK(d->ctx, d->cu->DeviceGet(&d->dev, ordinal));
    FC_CU_CHECK(d->ctx, d->cu->DevicePrimaryCtxRetain(&d->cuctx, d->dev));
    FC_CU_CHECK(d->ctx, d->cu->CtxSetCurrent(d->cuctx));
    /* Non-blocking: fusec's work never waits on, or serializes with, the
     * legacy default stream that other code in the process may use. */
    FC_CU_CHECK(d->ctx, d->cu->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING));
    return FC_OK;
}

fc_status fc_cuda_device_open(fc_context *ctx, int ordinal, fc_cuda_device **out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cuda_device_open: out is NULL");
    *out = NULL;
    const fc_cuda_driver *cu = fc_cuda_driver_get(ctx);
    if (!cu) return FC_ERR_RUNTIME;
    fc_cuda_device *d = fc_ctx_malloc(ctx, sizeof *d);
    if (!d) return FC_ERR_NOMEM;
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->cu = cu;
    fc_status st = device_init(d, ordinal);
    if (st != FC_OK) {
        fc_cuda_device_close(d);
        return st;
    }
    *out = d;
    return FC_OK;
}

fc_cuda_device fc_cuda_device_view(const fc_cuda_device *from, fc_context *ctx) {
    fc_cuda_device d = *from;
    d.ctx = ctx;
    d.borrowed = true;
    return d;
}

fc_status fc_cuda_device_borrow(fc_context *ctx, const fc_cuda_device *from, fc_cuda_device **out) {
    if (!out || !from) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cuda_device_borrow: from or out is NULL");
    *out = fc_ctx_malloc(ctx, sizeof **out);
    if (!*out) return FC_ERR_NOMEM;
    **out = fc_cuda_device_view(from, ctx);
    return FC_OK;
}

void fc_cuda_device_close(fc_cuda_device *d) {
    if (!d) return;
    if (d->cuctx && !d->borrowed) {
        /* Errors are ignored: a failed teardown cannot be repaired, and an
         * earlier error (a faulting kernel) must not be hidden by it. */
        (void)d->cu->CtxSetCurrent(d->cuctx);
        if (d->stream) {
            (void)d->cu->StreamSynchronize(d->stream);
            (void)d->cu->StreamDestroy(d->stream);
        }
        (void)d->cu->DevicePrimaryCtxRelease(d->dev);
    }
    fc_ctx_freemem(d->ctx, d);
}

fc_status fc_cuda_device_sync(fc_cuda_device *d) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->CtxSynchronize());
    return FC_OK;
}

fc_status fc_cuda_stream_sync(fc_cuda_device *d, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->StreamSynchronize(stream_or_default(d, s)));
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Buffers. Zero-byte buffers are the null pointer and every operation  */
/* on zero bytes does nothing, so empty tensors need no special case.   */
/* ------------------------------------------------------------------ */

static fc_status mem_alloc(fc_cuda_device *d, size_t bytes, CUdeviceptr *out) {
    FC_CU_CHECK(d->ctx, d->cu->MemAlloc(out, bytes));
    return FC_OK;
}

fc_status fc_cuda_alloc(fc_cuda_device *d, size_t bytes, CUdeviceptr *out) {
    if (!out) return FC_ERR_USAGE;
    *out = 0;
    USE(d);
    if (bytes == 0) return FC_OK;
    fc_status st = mem_alloc(d, bytes, out);
    if (st != FC_OK) return append_error(d->ctx, st, " (%zu bytes)", bytes);
    return FC_OK;
}

fc_status fc_cuda_free(fc_cuda_device *d, CUdeviceptr p) {
    USE(d);
    if (!p) return FC_OK;
    FC_CU_CHECK(d->ctx, d->cu->MemFree(p));
    return FC_OK;
}

/* A region's physical memory: pinned, on d's device. */
static CUmemAllocationProp region_prop(const fc_cuda_device *d) {
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)d->dev;
    return prop;
}

/* The range to reserve and the granularity, at a region's first growth:
 * FC_ERR_UNSUPPORTED without virtual memory management. */
static fc_status region_reserve(fc_cuda_device *d, fc_cuda_region *r) {
    const fc_cuda_driver *cu = d->cu;
    if (!cu->MemAddressReserve || !cu->MemAddressFree || !cu->MemCreate || !cu->MemRelease || !cu->MemMap ||
        !cu->MemUnmap || !cu->MemSetAccess || !cu->MemGetAllocationGranularity)
        return FC_ERR_UNSUPPORTED;
    if (!d->info.vmm) return FC_ERR_UNSUPPORTED;
    const CUmemAllocationProp prop = region_prop(d);
    size_t gran = 0;
    if (cu->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !gran)
        return FC_ERR_UNSUPPORTED;
    /* As large as the device's memory: no region can outgrow it. */
    size_t reserve = (d->info.total_mem + gran - 1) / gran * gran;
    CUdeviceptr base = 0;
    if (cu->MemAddressReserve(&base, reserve, gran, 0, 0) != CUDA_SUCCESS) return FC_ERR_UNSUPPORTED;
    r->base = base;
    r->reserved = reserve;
    r->granularity = gran;
    return FC_OK;
}

fc_status fc_cuda_region_grow(fc_cuda_device *d, fc_cuda_region *r, size_t bytes) {
    USE(d);
    if (!r) return FC_ERR_USAGE;
    if (!r->base) {
        fc_status st = region_reserve(d, r);
        if (st != FC_OK) return st;
    }
    if (bytes <= r->mapped) return FC_OK;
    size_t want = (bytes + r->granularity - 1) / r->granularity * r->granularity;
    if (want > r->reserved || want < bytes)
        return fc_set_error(d->ctx, FC_ERR_RUNTIME, "a device region of %zu bytes is larger than the device's memory",
                            bytes);
    if (r->nchunks == r->capchunks) {
        int cap = r->capchunks ? r->capchunks * 2 : 8;
        struct fc_cuda_region_chunk *c = realloc(r->chunk, sizeof *c * (size_t)cap);
        if (!c) return fc_set_error(d->ctx, FC_ERR_NOMEM, "out of memory (device region)");
        r->chunk = c;
        r->capchunks = cap;
    }
    const fc_cuda_driver *cu = d->cu;
    const CUmemAllocationProp prop = region_prop(d);
    CUmemAccessDesc access = {0};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t add = want - r->mapped;
    CUdeviceptr at = r->base + r->mapped;
    CUmemGenericAllocationHandle h = 0;
    CUresult e = cu->MemCreate(&h, add, &prop, 0);
    if (e == CUDA_SUCCESS) {
        e = cu->MemMap(at, add, 0, h, 0);
        if (e == CUDA_SUCCESS) {
            e = cu->MemSetAccess(at, add, &access, 1);
            if (e != CUDA_SUCCESS) (void)cu->MemUnmap(at, add);
        }
        if (e != CUDA_SUCCESS) (void)cu->MemRelease(h);
    }
    if (e != CUDA_SUCCESS) {
        fc_status st = fc_cu_fail(d->ctx, e, "cuMemCreate/cuMemMap/cuMemSetAccess", __FILE__, __LINE__);
        return append_error(d->ctx, st, " (growing a device region to %zu bytes)", want);
    }
    r->chunk[r->nchunks++] = (struct fc_cuda_region_chunk){h, add};
    r->mapped = want;
    return FC_OK;
}

void fc_cuda_region_free(fc_cuda_device *d, fc_cuda_region *r) {
    if (!d || !r || !r->base) return;
    const fc_cuda_driver *cu = d->cu;
    (void)cu->CtxSetCurrent(d->cuctx);
    size_t off = 0;
    for (int i = 0; i < r->nchunks; i++) {
        (void)cu->MemUnmap(r->base + off, r->chunk[i].bytes);
        (void)cu->MemRelease(r->chunk[i].handle);
        off += r->chunk[i].bytes;
    }
    (void)cu->MemAddressFree(r->base, r->reserved);
    free(r->chunk);
    memset(r, 0, sizeof *r);
}

fc_status fc_cuda_region_take(fc_cuda_device *d, fc_cuda_region *r, size_t bytes, CUdeviceptr *out) {
    if (!out || !r) return FC_ERR_USAGE;
    *out = 0;
    const size_t at = (r->taken + 255) / 256 * 256;
    if (bytes == 0) return FC_OK;
    if (at + bytes < at) return fc_set_error(d->ctx, FC_ERR_RUNTIME, "a device region of more than SIZE_MAX bytes");
    fc_status st = fc_cuda_region_grow(d, r, at + bytes);
    if (st != FC_OK) return st;
    r->taken = at + bytes;
    *out = r->base + at;
    return FC_OK;
}

fc_status fc_cuda_upload_async(fc_cuda_device *d, CUdeviceptr dst, const void *src, size_t bytes, CUstream s) {
    USE(d);
    if (bytes == 0) return FC_OK;
    FC_CU_CHECK(d->ctx, d->cu->MemcpyHtoDAsync(dst, src, bytes, stream_or_default(d, s)));
    return FC_OK;
}

fc_status fc_cuda_host_alloc(fc_cuda_device *d, size_t bytes, void **out) {
    *out = NULL;
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->MemAllocHost(out, bytes));
    return FC_OK;
}

void fc_cuda_host_free(fc_cuda_device *d, void *p) {
    if (!d || !p) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    (void)d->cu->MemFreeHost(p);
}

fc_status fc_cuda_event_create(fc_cuda_device *d, CUevent *out) {
    *out = NULL;
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->EventCreate(out, CU_EVENT_DISABLE_TIMING));
    return FC_OK;
}

void fc_cuda_event_destroy(fc_cuda_device *d, CUevent e) {
    if (!d || !e) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    (void)d->cu->EventDestroy(e);
}

fc_status fc_cuda_event_record(fc_cuda_device *d, CUevent e, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->EventRecord(e, stream_or_default(d, s)));
    return FC_OK;
}

fc_status fc_cuda_event_sync(fc_cuda_device *d, CUevent e) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->EventSynchronize(e));
    return FC_OK;
}

fc_status fc_cuda_download_async(fc_cuda_device *d, void *dst, CUdeviceptr src, size_t bytes, CUstream s) {
    USE(d);
    if (bytes == 0) return FC_OK;
    FC_CU_CHECK(d->ctx, d->cu->MemcpyDtoHAsync(dst, src, bytes, stream_or_default(d, s)));
    return FC_OK;
}

/* The synchronous copies go through the device's stream rather than
 * cuMemcpyHtoD: that one runs on the legacy default stream, which does not
 * wait for a non-blocking stream, so it could overtake queued kernels. */
fc_status fc_cuda_upload(fc_cuda_device *d, CUdeviceptr dst, const void *src, size_t bytes) {
    fc_status st = fc_cuda_upload_async(d, dst, src, bytes, NULL);
    return st != FC_OK ? st : fc_cuda_stream_sync(d, NULL);
}

fc_status fc_cuda_download(fc_cuda_device *d, void *dst, CUdeviceptr src, size_t bytes) {
    fc_status st = fc_cuda_download_async(d, dst, src, bytes, NULL);
    return st != FC_OK ? st : fc_cuda_stream_sync(d, NULL);
}

fc_status fc_cuda_memset_async(fc_cuda_device *d, CUdeviceptr dst, unsigned char byte, size_t bytes, CUstream s) {
    USE(d);
    if (bytes == 0) return FC_OK;
    FC_CU_CHECK(d->ctx, d->cu->MemsetD8Async(dst, byte, bytes, stream_or_default(d, s)));
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Modules, functions, launches.                                       */
/* ------------------------------------------------------------------ */

fc_status fc_cuda_module_load(fc_cuda_device *d, const void *cubin, size_t size, CUmodule *out) {
    if (!out) return FC_ERR_USAGE;
    *out = NULL;
    USE(d);
    /* cuModuleLoadData takes no size and would parse whatever it is given
     * (PTX text, fatbins, garbage); fusec only ever loads cubins, so check
     * for an ELF header first. */
    const unsigned char *b = cubin;
    if (!b || size < 64 || b[0] != 0x7f || b[1] != 'E' || b[2] != 'L' || b[3] != 'F')
        return fc_set_error(d->ctx, FC_ERR_USAGE, "fc_cuda_module_load: not a cubin (%zu bytes, no ELF header)",
                            size);
    FC_CU_CHECK(d->ctx, d->cu->ModuleLoadData(out, cubin));
    return FC_OK;
}

void fc_cuda_module_unload(fc_cuda_device *d, CUmodule m) {
    if (!d || !m) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    (void)d->cu->ModuleUnload(m);
}

static fc_status get_function(fc_cuda_device *d, CUmodule m, const char *name, CUfunction *out) {
    FC_CU_CHECK(d->ctx, d->cu->ModuleGetFunction(out, m, name));
    return FC_OK;
}

fc_status fc_cuda_module_function(fc_cuda_device *d, CUmodule m, const char *name, CUfunction *out) {
    if (!out || !name) return FC_ERR_USAGE;
    *out = NULL;
    USE(d);
    fc_status st = get_function(d, m, name, out);
    if (st != FC_OK) return append_error(d->ctx, st, " (kernel \"%s\")", name);
    return FC_OK;
}

fc_status fc_cuda_function_set_max_shared(fc_cuda_device *d, CUfunction f, int bytes) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
    return FC_OK;
}

fc_status fc_cuda_occupancy(fc_cuda_device *d, CUfunction f, int block, size_t smem, int *blocks) {
    *blocks = 0;
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->OccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block, smem));
    return FC_OK;
}

fc_status fc_cuda_tensor_map(fc_cuda_device *d, CUtensorMap *out, CUtensorMapDataType dtype, unsigned rank,
                             CUdeviceptr addr, const cuuint64_t *dims, const cuuint64_t *strides,
                             const cuuint32_t *box, CUtensorMapSwizzle swizzle) {
    /* Every element of the box, no interleave; lines promoted to 128 bytes
     * in L2 (as CUTLASS's default: a box row is 128 bytes). */
    const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
    FC_CU_CHECK(d->ctx, d->cu->TensorMapEncodeTiled(out, dtype, rank, (void *)(uintptr_t)addr, dims, strides, box,
                                                    elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return FC_OK;
}

/* Whether a programmatic dependent may be launched as one on d: sm 90 (the
 * griddepcontrol instructions) and a CUDA 12.3 driver, which has typed
 * graph edges (cuGraphAddDependencies_v2: a graph's programmatic edge, and
 * what a caller's capture of a stream launch with the attribute makes),
 * and for a stream's launch cuLaunchKernelEx. */
static bool programmatic_ok(const fc_cuda_device *d, bool edge) {
    return d && d->info.cc_major >= 9 && d->cu->GraphAddDependencies && (edge || d->cu->LaunchKernelEx);
}

static fc_status launch(fc_cuda_device *d, CUfunction f, const fc_cuda_launch_cfg *c, void **args) {
    if (c->programmatic && programmatic_ok(d, false)) {
        /* What a capture of this launch turns into a programmatic edge:
         * the kernel may start as the kernel before it on the stream
         * triggers or ends (any other work before it, a copy, an event
         * wait, still orders it as usual); its griddepcontrol.wait then
         * waits for that kernel's whole grid. The kernels' cluster shapes
         * are compiled in (__cluster_dims__), so no other attribute is
         * needed. */
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig lc = {c->grid[0],     c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
                             c->shared_bytes, stream_or_default(d, c->stream), &attr, 1};
        FC_CU_CHECK(d->ctx, d->cu->LaunchKernelEx(&lc, f, args, NULL));
        return FC_OK;
    }
    FC_CU_CHECK(d->ctx, d->cu->LaunchKernel(f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1],
                                            c->block[2], c->shared_bytes, stream_or_default(d, c->stream), args,
                                            NULL));
    return FC_OK;
}

fc_status fc_cuda_launch(fc_cuda_device *d, CUfunction f, const fc_cuda_launch_cfg *cfg, void **args) {
    if (!cfg || !f) return d ? fc_set_error(d->ctx, FC_ERR_USAGE, "fc_cuda_launch: no function or config")
                             : FC_ERR_USAGE;
    USE(d);
    fc_status st = launch(d, f, cfg, args);
    /* The shape is what is usually wrong (too many threads, too much
     * shared memory), so say what it was. */
    if (st != FC_OK)
        return append_error(d->ctx, st, " (grid %u,%u,%u block %u,%u,%u shared %u bytes)", cfg->grid[0],
                            cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2],
                            cfg->shared_bytes);
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Event timers.                                                       */
/* ------------------------------------------------------------------ */

static fc_status timer_events(fc_cuda_device *d, fc_cuda_timer *t) {
    FC_CU_CHECK(d->ctx, d->cu->EventCreate(&t->start, CU_EVENT_DEFAULT));
    FC_CU_CHECK(d->ctx, d->cu->EventCreate(&t->stop, CU_EVENT_DEFAULT));
    return FC_OK;
}

fc_status fc_cuda_timer_create(fc_cuda_device *d, fc_cuda_timer *t) {
    if (!t) return FC_ERR_USAGE;
    memset(t, 0, sizeof *t);
    USE(d);
    fc_status st = timer_events(d, t);
    if (st != FC_OK) fc_cuda_timer_destroy(d, t);
    return st;
}

fc_status fc_cuda_timer_start(fc_cuda_device *d, fc_cuda_timer *t, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->EventRecord(t->start, stream_or_default(d, s)));
    return FC_OK;
}

fc_status fc_cuda_timer_stop(fc_cuda_device *d, fc_cuda_timer *t, CUstream s, float *ms) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->EventRecord(t->stop, stream_or_default(d, s)));
    FC_CU_CHECK(d->ctx, d->cu->EventSynchronize(t->stop));
    FC_CU_CHECK(d->ctx, d->cu->EventElapsedTime(ms, t->start, t->stop));
    return FC_OK;
}

void fc_cuda_timer_destroy(fc_cuda_device *d, fc_cuda_timer *t) {
    if (!d || !t) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    if (t->start) (void)d->cu->EventDestroy(t->start);
    if (t->stop) (void)d->cu->EventDestroy(t->stop);
    t->start = t->stop = NULL;
}

/* ------------------------------------------------------------------ */
/* CUDA Graphs.                                                        */
/* ------------------------------------------------------------------ */

fc_status fc_cuda_capture_begin(fc_cuda_device *d, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->StreamBeginCapture(stream_or_default(d, s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return FC_OK;
}

static fc_status instantiate(fc_cuda_device *d, CUgraph graph, CUgraphExec *out) {
    FC_CU_CHECK(d->ctx, d->cu->GraphInstantiateWithFlags(out, graph, 0));
    return FC_OK;
}

fc_status fc_cuda_capture_end(fc_cuda_device *d, CUstream s, CUgraphExec *out) {
    if (!out) return FC_ERR_USAGE;
    *out = NULL;
    USE(d);
    CUgraph graph = NULL;
    FC_CU_CHECK(d->ctx, d->cu->StreamEndCapture(stream_or_default(d, s), &graph));
    /* The executable graph is independent of the graph it came from. */
    fc_status st = instantiate(d, graph, out);
    (void)d->cu->GraphDestroy(graph);
    return st;
}

fc_status fc_cuda_graph_launch(fc_cuda_device *d, CUgraphExec g, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->GraphLaunch(g, stream_or_default(d, s)));
    return FC_OK;
}

fc_status fc_cuda_graph_upload(fc_cuda_device *d, CUgraphExec g, CUstream s) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->GraphUpload(g, stream_or_default(d, s)));
    return FC_OK;
}

void fc_cuda_graph_destroy(fc_cuda_device *d, CUgraphExec g) {
    if (!d || !g) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    (void)d->cu->GraphExecDestroy(g);
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, const fc_cuda_launch_cfg *cfg, void **args) {
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = cfg->grid[0];
    p.gridDimY = cfg->grid[1];
    p.gridDimZ = cfg->grid[2];
    p.blockDimX = cfg->block[0];
    p.blockDimY = cfg->block[1];
    p.blockDimZ = cfg->block[2];
    p.sharedMemBytes = cfg->shared_bytes;
    p.kernelParams = args;
    return p;
}

fc_status fc_cuda_graph_create(fc_cuda_device *d, CUgraph *out) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->GraphCreate(out, 0));
    return FC_OK;
}

fc_status fc_cuda_graph_add_kernel(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUfunction f,
                                   const fc_cuda_launch_cfg *cfg, void **args, CUgraphNode *out) {
    USE(d);
    CUDA_KERNEL_NODE_PARAMS p = kernel_params(f, cfg, args);
    FC_CU_CHECK(d->ctx, d->cu->GraphAddKernelNode(out, g, dep ? &dep : NULL, dep ? 1 : 0, &p));
    return FC_OK;
}

fc_status fc_cuda_graph_add_kernel_programmatic(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUfunction f,
                                                const fc_cuda_launch_cfg *cfg, void **args, CUgraphNode *out,
                                                bool *programmatic) {
    *programmatic = dep && programmatic_ok(d, true);
    if (!*programmatic) return fc_cuda_graph_add_kernel(d, g, dep, f, cfg, args, out);
    USE(d);
    CUDA_KERNEL_NODE_PARAMS p = kernel_params(f, cfg, args);
    FC_CU_CHECK(d->ctx, d->cu->GraphAddKernelNode(out, g, NULL, 0, &p));
    /* The edge that cudaLaunchAttributeProgrammaticStreamSerialization
     * makes in a capture: from dep's programmatic port (all its blocks
     * triggered or exited), of the programmatic type. */
    CUgraphEdgeData e;
    memset(&e, 0, sizeof e);
    e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    FC_CU_CHECK(d->ctx, d->cu->GraphAddDependencies(g, &dep, out, &e, 1));
    return FC_OK;
}

fc_status fc_cuda_graph_add_child(fc_cuda_device *d, CUgraph g, CUgraphNode dep, CUgraph child, CUgraphNode *out) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->GraphAddChildGraphNode(out, g, dep ? &dep : NULL, dep ? 1 : 0, child));
    return FC_OK;
}

fc_status fc_cuda_graph_instantiate(fc_cuda_device *d, CUgraph g, CUgraphExec *out) {
    USE(d);
    return instantiate(d, g, out);
}

fc_status fc_cuda_capture_end_graph(fc_cuda_device *d, CUstream s, CUgraph *out) {
    USE(d);
    *out = NULL;
    FC_CU_CHECK(d->ctx, d->cu->StreamEndCapture(stream_or_default(d, s), out));
    return FC_OK;
}

fc_status fc_cuda_exec_set_kernel(fc_cuda_device *d, CUgraphExec e, CUgraphNode n, CUfunction f,
                                  const fc_cuda_launch_cfg *cfg, void **args) {
    USE(d);
    CUDA_KERNEL_NODE_PARAMS p = kernel_params(f, cfg, args);
    FC_CU_CHECK(d->ctx, d->cu->GraphExecKernelNodeSetParams(e, n, &p));
    return FC_OK;
}

fc_status fc_cuda_exec_set_child(fc_cuda_device *d, CUgraphExec e, CUgraphNode n, CUgraph child) {
    USE(d);
    FC_CU_CHECK(d->ctx, d->cu->GraphExecChildGraphNodeSetParams(e, n, child));
    return FC_OK;
}

void fc_cuda_graph_free(fc_cuda_device *d, CUgraph g) {
    if (!d || !g) return;
    (void)d->cu->CtxSetCurrent(d->cuctx);
    (void)d->cu->GraphDestroy(g);
}

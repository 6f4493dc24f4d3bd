/*
 * program_cache.c - the compile cache as fc_compile uses it: the process's
 * handle, the keys of both levels, the serialized program, and the text of
 * `fusec --cache-info` and `--cache-clear`. docs/CACHE.md, "How fc_compile
 * uses the cache", describes the design; this file is its code.
 */
#define _GNU_SOURCE /* dladdr, for the build identity */
#include "runtime/cuda/program_cache.h"
#include "ir/le.h"
#include "runtime/cuda/cublaslt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* The process's handle.                                               */
/* ------------------------------------------------------------------ */

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static fc_cache *global_cache;  /* guarded by global_lock */
static char *global_dir;        /* fc_cache_configure's directory, or NULL */
/* A parent's handle, dropped by a forked child: kept reachable so that a
 * leak checker in the child does not report it, and never used. */
static fc_cache *dropped_after_fork;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* fork() copies the handle but not the threads that may hold its locks,
 * and the copy's pending counts are the parent's (the child would add them
 * to the shared counters a second time). So the child forgets it. The
 * prepare handler takes global_lock so that the child's copy of it is in a
 * known state: held by the forking thread, which then releases it. */
static void atfork_prepare(void) { pthread_mutex_lock(&global_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&global_lock); }
static void atfork_child(void) {
    if (global_cache) dropped_after_fork = global_cache;
    global_cache = NULL;
    pthread_mutex_unlock(&global_lock);
}
static void install_atfork(void) { (void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

fc_status fc_cache_configure(const char *dir) {
    if (dir && !*dir) return FC_ERR_USAGE;
    char *copy = NULL;
    if (dir && !(copy = strdup(dir))) return FC_ERR_NOMEM;
    pthread_mutex_lock(&global_lock);
    fc_status st = FC_OK;
    if (global_cache) {
        st = FC_ERR_USAGE; /* too late: compiles already use the open handle */
        free(copy);
    } else {
        free(global_dir);
        global_dir = copy;
    }
    pthread_mutex_unlock(&global_lock);
    return st;
}

fc_status fc_cache_global_open(fc_context *ctx, fc_cache **out) {
    if (!out) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_global_open: NULL out") : FC_ERR_USAGE;
    *out = NULL;
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&global_lock);
    fc_status st = FC_OK;
    if (!global_cache) {
        fc_cache_options o = {0};
        o.dir = global_dir;
        st = fc_cache_open(ctx, &o, &global_cache);
    }
    *out = global_cache;
    pthread_mutex_unlock(&global_lock);
    return st;
}

fc_cache *fc_cache_global(fc_context *ctx) {
    fc_cache *c = NULL;
    (void)fc_cache_global_open(ctx, &c);
    return c;
}

const char *fc_cache_global_take_warning(void) {
    pthread_mutex_lock(&global_lock);
    fc_cache *c = global_cache;
    pthread_mutex_unlock(&global_lock);
    return c ? fc_cache_take_warning(c) : NULL;
}

void fc_cache_global_close(void) {
    pthread_mutex_lock(&global_lock);
    fc_cache *c = global_cache;
    global_cache = NULL;
    pthread_mutex_unlock(&global_lock);
    fc_cache_close(c);
}

/* ------------------------------------------------------------------ */
/* Keys.                                                               */
/* ------------------------------------------------------------------ */

/* Each level starts with its own tag, so the two never share a key. */
fc_cache_key fc_kernel_cache_key(const char *source, const char *unit_name, int sm, const char *const *opts,
                                 int nopts, int nvrtc_major, int nvrtc_minor) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, "fusec kernel");
    fc_cache_key_add_str(&h, source);
    fc_cache_key_add_str(&h, unit_name);
    fc_cache_key_add_u64(&h, (uint64_t)nopts);
    for (int i = 0; i < nopts; i++) fc_cache_key_add_str(&h, opts[i]);
    fc_cache_key_add_u64(&h, (uint64_t)nvrtc_major);
    fc_cache_key_add_u64(&h, (uint64_t)nvrtc_minor);
    fc_cache_key_add_u64(&h, (uint64_t)sm);
    return fc_cache_key_end(&h);
}

static void add_value_type(fc_cache_hasher *h, const fc_value *v) {
    fc_cache_key_add_u64(h, (uint64_t)v->dtype);
    fc_cache_key_add_u64(h, (uint64_t)v->rank);
    for (int d = 0; d < v->rank; d++) fc_cache_key_add_u64(h, (uint64_t)v->dims[d]);
}

fc_cache_key fc_program_cache_key(const char *graph_text, const fc_graph *g, int sm, bool fast_math, bool fuse, bool tf32,
                                  fc_precision precision, fc_numerics numerics, const char *const *opts, int nopts, int nvrtc_major,
                                  int nvrtc_minor) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, "fusec program");
    fc_cache_key_add_u64(&h, FC_PROGRAM_FORMAT_VERSION);
    fc_cache_key_add_str(&h, FUSEC_VERSION_STRING);
    fc_cache_key_add_str(&h, fc_build_identity());
    fc_cache_key_add_str(&h, graph_text);
    /* The text has the shapes already (compiled graphs are static); the
     * types are hashed on their own as well, so that the key does not
     * depend on how the printer shows a bound symbol. */
    fc_cache_key_add_u64(&h, (uint64_t)g->nparams);
    for (int i = 0; i < g->nparams; i++) add_value_type(&h, g->params[i]);
    fc_cache_key_add_u64(&h, (uint64_t)g->noutputs);
    for (int i = 0; i < g->noutputs; i++) add_value_type(&h, g->outputs[i]);
    fc_cache_key_add_u64(&h, (uint64_t)sm);
    fc_cache_key_add_u64(&h, fast_math);
    fc_cache_key_add_u64(&h, fuse);
    fc_cache_key_add_u64(&h, tf32);
    fc_cache_key_add_u64(&h, (uint64_t)precision);
    fc_cache_key_add_u64(&h, (uint64_t)numerics);
    fc_cache_key_add_u64(&h, (uint64_t)nopts);
    for (int i = 0; i < nopts; i++) fc_cache_key_add_str(&h, opts[i]);
    fc_cache_key_add_u64(&h, (uint64_t)nvrtc_major);
    fc_cache_key_add_u64(&h, (uint64_t)nvrtc_minor);
    return fc_cache_key_end(&h);
}

static char build_identity[256];
static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static const char identity_anchor = 0; /* an address inside this build of fusec */

static bool stat_identity(const char *path) {
    struct stat st;
    if (!path || path[0] != '/' || stat(path, &st) != 0) return false;
    snprintf(build_identity, sizeof build_identity, "size=%lld mtime=%lld.%09ld", (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    return true;
}

/* The object holding this code: libfusec.so, or the executable fusec was
 * linked into (dladdr names the main program by argv[0], which may be
 * relative: /proc/self/exe is then the reliable name). */
static void make_identity(void) {
    Dl_info info;
    if (dladdr(&identity_anchor, &info) && stat_identity(info.dli_fname)) return;
    if (stat_identity("/proc/self/exe")) return;
    snprintf(build_identity, sizeof build_identity, "built %s %s", __DATE__, __TIME__);
}

const char *fc_build_identity(void) {
    pthread_once(&identity_once, make_identity);
    return build_identity;
}

/* ------------------------------------------------------------------ */
/* The serialized program: writing.                                    */
/*                                                                     */
/* Layout (all integers little-endian; str = u32 length, then bytes,   */
/* no NUL; docs/CACHE.md has the table):                               */
/*                                                                     */
/*   "FCPROGRM"  u32 version  u32 reserved (0)                         */
/*   str graph_name  str graph_text  u32 sm  u32 flags (1 fast_math,    */
/*   2 fuse, 4 tf32, bits 3-5 precision, 0x100 eager numerics)       */
/*   16 bytes kernel key                                               */
/*   i64 arena_bytes                                                   */
/*   i64 intermediate_bytes                                            */
/*   u32 nvalues, each: u8 kind  i64 index  i64 bytes                   */
/*   u32 nparams, each: str name  u8 dtype  u8 rank  i64 dims[rank]     */
/*                      u32 value                                       */
/*   u32 noutputs, each: u8 dtype  u8 rank  i64 dims[rank]  u32 value   */
/*                      u8 copy kind  i64 copy index                    */
/*   u32 nlaunches, each: u8 kind  str name  i32 group  u32 grid[3]     */
/*                      u32 block[3]  u32 smem  u32 nargs  u32 nreads   */
/*                      u32 args[nargs]  str summary                    */
/*                      u8 ntmaps, each (version 3; fc_tmap): u32 arg   */
/*                      i64 offset  u8 dtype  u8 rank  u8 flags (1      */
/*                      swizzle 128B)  i64 dims[rank]                   */
/*                      i64 strides[rank - 1]  u32 box[rank]            */
/*                      u8 flags (version 4: 1 pdl, fc_launch.pdl; 2     */
/*                      load time, fc_launch.loadtime)                  */
/*                      str source  u32 nsource_ops  i64 bytes          */
/*                      u64 flops (the IEEE-754 bits; version 6: what   */
/*                      the profile reports, lower/launch_cost.h)       */
/*   u32 ngemms, each (version 2: the GEMM a library launch runs,      */
/*     runtime/cuda/cublaslt.h's fc_gemm_desc):                             */
/*     u32 launch  u8 ab  u8 out  u8 flags (1 trans_a, 2 trans_b,      */
/*     4 bias, 8 residual, 16 folded batch)  u8 act  u64 alpha (the    */
/*     IEEE-754 bits)  i64 M N K lda ldw batch stride_a stride_w       */
/*     stride_y  u8 nouter, each: i64 size a w y                       */
/*     u32 nweights, each: i64 columns  u32 out_arg                    */
/*     u32 op_arg[1 + nweights (x2 with bias) (+1 with residual)]      */
/*   str source                                                        */
/*                                                                     */
/* and nothing after it.                                               */
/* ------------------------------------------------------------------ */
#define FLAG_FAST_MATH 1u
#define FLAG_FUSE 2u
#define FLAG_TF32 4u
/* Bits 3..5: fc_precision (0, FC_PRECISION_AS_WRITTEN, leaves the word as
 * it was before precisions existed). */
#define FLAG_PRECISION_SHIFT 3
#define FLAG_PRECISION_MASK (7u << FLAG_PRECISION_SHIFT)
#define FLAG_EAGER 0x100u /* numerics FC_NUMERICS_EAGER */
#define GEMM_TRANS_A 1u
#define GEMM_TRANS_B 2u
#define GEMM_BIAS 4u
#define GEMM_RESIDUAL 8u
#define GEMM_FOLDED 16u
#define HEADER_BYTES 16
/* The least each record can take, to bound counts before allocating. */
#define MIN_STORE_BYTES 17
#define MIN_PARAM_BYTES 11
#define MIN_OUTPUT_BYTES 15
#define MIN_LAUNCH_BYTES 51
#define LAUNCH_PDL 1u
#define LAUNCH_LOADTIME 2u
#define TMAP_SWIZZLE128 1u
#define MIN_GEMM_BYTES 113 /* one weight, no loop, two operands */
/* Most kernel parameters of one launch (the codegen makes a few). */
#define MAX_LAUNCH_ARGS 4096

/* The serialized bytes (an fc_strbuf holds bytes as well as text). */
typedef fc_strbuf wbuf;

static void w_bytes(wbuf *w, const void *data, size_t n) { fc_strbuf_put(w, data, n); }

static void w_le(wbuf *w, uint64_t v, int nbytes) {
    uint8_t b[8];
    fc_put_le(b, v, nbytes);
    w_bytes(w, b, (size_t)nbytes);
}
static void w_u8(wbuf *w, unsigned v) { w_le(w, v, 1); }
static void w_u32(wbuf *w, uint32_t v) { w_le(w, v, 4); }
static void w_u64(wbuf *w, uint64_t v) { w_le(w, v, 8); }
static void w_str(wbuf *w, const char *s) {
    size_t n = s ? strlen(s) : 0;
    w_u32(w, (uint32_t)n);
    w_bytes(w, s, n);
}
static void w_dims(wbuf *w, const fc_program_tensor *t) {
    w_u8(w, (unsigned)t->dtype);
    w_u8(w, (unsigned)t->rank);
    for (int d = 0; d < t->rank; d++) w_u64(w, (uint64_t)t->dims[d]);
}

static void w_gemm(wbuf *w, int launch, const fc_gemm_desc *g) {
    const fc_gemm_plan *p = &g->plan;
    w_u32(w, (uint32_t)launch);
    w_u8(w, (unsigned)p->ab);
    w_u8(w, (unsigned)p->out);
    w_u8(w, (p->trans_a ? GEMM_TRANS_A : 0) | (p->trans_b ? GEMM_TRANS_B : 0) | (p->has_bias ? GEMM_BIAS : 0) |
                (p->has_residual ? GEMM_RESIDUAL : 0) | (p->folded_batch ? GEMM_FOLDED : 0));
    w_u8(w, (unsigned)p->act);
    uint64_t alpha;
    memcpy(&alpha, &p->alpha, sizeof alpha);
    w_u64(w, alpha);
    const int64_t f[9] = {p->M, p->N, p->K, p->lda, p->ldw, p->batch, p->stride_a, p->stride_w, p->stride_y};
    for (int i = 0; i < 9; i++) w_u64(w, (uint64_t)f[i]);
    w_u8(w, (unsigned)p->nouter);
    for (int d = 0; d < p->nouter; d++) {
        w_u64(w, (uint64_t)p->outer_size[d]);
        w_u64(w, (uint64_t)p->outer_a[d]);
        w_u64(w, (uint64_t)p->outer_w[d]);
        w_u64(w, (uint64_t)p->outer_y[d]);
    }
    w_u32(w, (uint32_t)p->nweights);
    for (int i = 0; i < p->nweights; i++) w_u64(w, (uint64_t)g->wcols[i]);
    w_u32(w, (uint32_t)g->out_arg);
    for (int k = 0; k < fc_gemm_plan_nops(p); k++) w_u32(w, (uint32_t)g->op_arg[k]);
}

fc_status fc_program_desc_encode(fc_context *ctx, const fc_program_desc *d, fc_bytes *out) {
    if (!d || !out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_desc_encode: NULL argument");
    out->data = NULL;
    out->size = 0;
    /* The format's u32 lengths: a source of 4 GiB is not a program. */
    if ((d->src.source && strlen(d->src.source) > UINT32_MAX) ||
        (d->graph_text && strlen(d->graph_text) > UINT32_MAX))
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s is too large to serialize", d->graph_name);
    for (int i = 0; i < d->src.nlaunches; i++)
        if (fc_program_conv(d, i))
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                                "program %s runs convolutions through cuDNN, which the program format does not hold",
                                d->graph_name);
    wbuf w = {ctx, NULL, 0, 0, false};
    w_bytes(&w, FC_PROGRAM_MAGIC, 8);
    w_u32(&w, FC_PROGRAM_FORMAT_VERSION);
    w_u32(&w, 0);
    w_str(&w, d->graph_name);
    w_str(&w, d->graph_text);
    w_u32(&w, (uint32_t)d->sm);
    w_u32(&w, (d->fast_math ? FLAG_FAST_MATH : 0) | (d->fuse ? FLAG_FUSE : 0) | (d->tf32 ? FLAG_TF32 : 0) |
                  ((uint32_t)d->precision << FLAG_PRECISION_SHIFT) |
                  (d->numerics == FC_NUMERICS_EAGER ? FLAG_EAGER : 0));
    w_bytes(&w, d->kernel_key, sizeof d->kernel_key);
    w_u64(&w, (uint64_t)d->arena_bytes);
    w_u64(&w, (uint64_t)d->intermediate_bytes);
    w_u32(&w, (uint32_t)d->nvalues);
    for (int i = 0; i < d->nvalues; i++) {
        w_u8(&w, (unsigned)d->store[i].kind);
        w_u64(&w, (uint64_t)d->store[i].index);
        w_u64(&w, (uint64_t)d->store[i].bytes);
    }
    w_u32(&w, (uint32_t)d->nparams);
    for (int i = 0; i < d->nparams; i++) {
        w_str(&w, d->params[i].name);
        w_dims(&w, &d->params[i]);
        w_u32(&w, (uint32_t)d->params[i].value);
        w_u8(&w, d->params[i].inout ? 1u : 0u);
    }
    w_u32(&w, (uint32_t)d->noutputs);
    for (int i = 0; i < d->noutputs; i++) {
        const fc_program_tensor *t = &d->outputs[i];
        w_dims(&w, t);
        w_u32(&w, (uint32_t)t->value);
        w_u8(&w, (unsigned)t->copy_from.kind);
        w_u64(&w, (uint64_t)t->copy_from.index);
    }
    w_u32(&w, (uint32_t)d->src.nlaunches);
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        w_u8(&w, (unsigned)l->kind);
        w_str(&w, l->name);
        w_u32(&w, (uint32_t)l->group);
        for (int k = 0; k < 3; k++) w_u32(&w, l->grid[k]);
        for (int k = 0; k < 3; k++) w_u32(&w, l->block[k]);
        w_u32(&w, l->smem);
        w_u32(&w, (uint32_t)l->nargs);
        w_u32(&w, (uint32_t)l->nreads);
        for (int a = 0; a < l->nargs; a++) w_u32(&w, (uint32_t)l->args[a]);
        w_str(&w, l->summary);
        w_u8(&w, (unsigned)l->ntmaps);
        for (int t = 0; t < l->ntmaps && t < FC_LAUNCH_MAX_TMAPS; t++) {
            const fc_tmap *m = &l->tmaps[t];
            /* The fields as they are (the reader judges them), but never
             * more dims than the arrays hold. */
            const int rank = m->rank < 0 ? 0 : m->rank > FC_TMAP_MAX_RANK ? FC_TMAP_MAX_RANK : m->rank;
            w_u32(&w, (uint32_t)m->arg);
            w_u64(&w, (uint64_t)m->offset);
            w_u8(&w, (unsigned)m->dtype);
            w_u8(&w, (unsigned)m->rank);
            w_u8(&w, m->swizzle128 ? TMAP_SWIZZLE128 : 0);
            for (int d = 0; d < rank; d++) w_u64(&w, (uint64_t)m->dims[d]);
            for (int d = 0; d + 1 < rank; d++) w_u64(&w, (uint64_t)m->strides[d]);
            for (int d = 0; d < rank; d++) w_u32(&w, m->box[d]);
        }
        w_u8(&w, (l->pdl ? LAUNCH_PDL : 0) | (l->loadtime ? LAUNCH_LOADTIME : 0));
        w_str(&w, l->source);
        w_u32(&w, (uint32_t)l->nsource_ops);
        w_u64(&w, (uint64_t)l->bytes);
        uint64_t flops_bits;
        memcpy(&flops_bits, &l->flops, sizeof flops_bits);
        w_u64(&w, flops_bits);
    }
    uint32_t ngemms = 0;
    for (int i = 0; i < d->src.nlaunches; i++) ngemms += fc_program_gemm(d, i) != NULL;
    w_u32(&w, ngemms);
    for (int i = 0; i < d->src.nlaunches; i++)
        if (fc_program_gemm(d, i)) w_gemm(&w, i, fc_program_gemm(d, i));
    w_str(&w, d->src.source);
    /* The distinct kernels by name and the key of each one's cubin: a
     * warm start loads each from the kernel level. Their own sources are
     * not kept: a kernel entry that is missing or bad sends the compile
     * down the cold path, which makes them again. */
    w_u32(&w, (uint32_t)d->src.nkernels);
    for (int k = 0; k < d->src.nkernels; k++) {
        w_str(&w, d->src.kernels[k].name);
        w_bytes(&w, d->src.kernels[k].key, sizeof d->src.kernels[k].key);
    }
    if (w.oom) {
        fc_ctx_freemem(ctx, w.buf);
        return FC_ERR_NOMEM;
    }
    out->data = (uint8_t *)w.buf;
    out->size = w.len;
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* The serialized program: reading. Every read checks that the bytes   */
/* are there; the first failure sticks (later reads return zeros), and */
/* the message names the byte offset and the field being read.         */
/* ------------------------------------------------------------------ */
typedef struct rbuf {
    fc_context *ctx;
    const uint8_t *p;
    size_t len, pos;
    fc_status st;       /* FC_OK until the first failure */
    char where[64];     /* the record being read, for messages */
} rbuf;

static bool r_fail(rbuf *r, fc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool r_fail(rbuf *r, fc_status st, const char *fmt, ...) {
    if (r->st != FC_OK) return false;
    r->st = st;
    if (st == FC_ERR_NOMEM) return false; /* the allocator's message stands */
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fc_set_error(r->ctx, st, "bad program data at byte %zu (%s): %s", r->pos, r->where, msg);
    return false;
}

static bool r_have(rbuf *r, size_t n) {
    if (r->st != FC_OK) return false;
    if (n > r->len - r->pos) return r_fail(r, FC_ERR_INPUT, "%zu bytes needed, %zu left", n, r->len - r->pos);
    return true;
}

static uint64_t r_le(rbuf *r, int nbytes) {
    if (!r_have(r, (size_t)nbytes)) return 0;
    uint64_t v = fc_get_le(r->p + r->pos, nbytes);
    r->pos += (size_t)nbytes;
    return v;
}
static unsigned r_u8(rbuf *r) { return (unsigned)r_le(r, 1); }
static uint32_t r_u32(rbuf *r) { return (uint32_t)r_le(r, 4); }
static int64_t r_i64(rbuf *r) { return (int64_t)r_le(r, 8); }

/* A count of records that take at least `min_bytes` each: more than the
 * bytes left could hold is a lie, refused before anything is allocated. */
static int r_count(rbuf *r, size_t min_bytes, const char *what) {
    uint32_t n = r_u32(r);
    if (r->st != FC_OK) return 0;
    if (n > INT32_MAX - 1 || (size_t)n > (r->len - r->pos) / min_bytes) {
        r_fail(r, FC_ERR_INPUT, "%u %s cannot fit in the %zu bytes left", n, what, r->len - r->pos);
        return 0;
    }
    return (int)n;
}

/* A string of at most max_len bytes without a NUL, into a new buffer. */
static char *r_str(rbuf *r, size_t max_len, const char *what) {
    uint32_t n = r_u32(r);
    if (r->st != FC_OK) return NULL;
    if (n > max_len) {
        r_fail(r, FC_ERR_INPUT, "%s is %u bytes long, more than %zu", what, n, max_len);
        return NULL;
    }
    if (!r_have(r, n)) return NULL;
    if (memchr(r->p + r->pos, 0, n)) {
        r_fail(r, FC_ERR_INPUT, "%s holds a NUL byte", what);
        return NULL;
    }
    char *s = fc_ctx_malloc(r->ctx, (size_t)n + 1);
    if (!s) {
        r_fail(r, FC_ERR_NOMEM, "no memory");
        return NULL;
    }
    memcpy(s, r->p + r->pos, n);
    s[n] = 0;
    r->pos += n;
    return s;
}

/* A string into a fixed array of cap bytes (fc_launch's name, summary). */
static void r_str_into(rbuf *r, char *dst, size_t cap, const char *what) {
    char *s = r_str(r, cap - 1, what);
    if (s) {
        memcpy(dst, s, strlen(s) + 1);
        fc_ctx_freemem(r->ctx, s);
    }
}

static void *r_alloc(rbuf *r, size_t n) {
    if (r->st != FC_OK) return NULL;
    void *q = fc_ctx_malloc(r->ctx, n ? n : 1);
    if (!q) r_fail(r, FC_ERR_NOMEM, "no memory");
    else memset(q, 0, n ? n : 1);
    return q;
}

/* dtype, rank and dims, checked: a known dtype, a rank FC_MAX_RANK at
 * most, dims >= 0, and a size in bytes that fits an int64. */
static void r_dims(rbuf *r, fc_program_tensor *t) {
    unsigned dt = r_u8(r), rank = r_u8(r);
    if (r->st != FC_OK) return;
    if (dt >= FC_DTYPE_COUNT) {
        r_fail(r, FC_ERR_INPUT, "unknown dtype %u", dt);
        return;
    }
    if (rank > FC_MAX_RANK) {
        r_fail(r, FC_ERR_INPUT, "rank %u is more than %d", rank, FC_MAX_RANK);
        return;
    }
    t->dtype = (fc_dtype)dt;
    t->rank = (int)rank;
    int64_t bytes = (int64_t)fc_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) {
        t->dims[d] = r_i64(r);
        if (r->st != FC_OK) return;
        if (t->dims[d] < 0 || (t->dims[d] > 0 && bytes > INT64_MAX / t->dims[d])) {
            r_fail(r, FC_ERR_INPUT, "dim %d is %lld: negative, or too large a tensor", d, (long long)t->dims[d]);
            return;
        }
        bytes *= t->dims[d];
    }
}

static void r_store_kind(rbuf *r, fc_store_kind *k) {
    unsigned v = r_u8(r);
    if (r->st == FC_OK && v > FC_STORE_ARENA) r_fail(r, FC_ERR_INPUT, "unknown storage kind %u", v);
    *k = (fc_store_kind)v;
}

static void read_stores(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "storage");
    d->nvalues = r_count(r, MIN_STORE_BYTES, "values");
    d->store = r_alloc(r, sizeof *d->store * (size_t)d->nvalues);
    for (int i = 0; i < d->nvalues && r->st == FC_OK; i++) {
        snprintf(r->where, sizeof r->where, "storage of value %d", i);
        fc_store *s = &d->store[i];
        r_store_kind(r, &s->kind);
        s->index = r_i64(r);
        s->bytes = r_i64(r);
    }
}

static void read_params(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "parameters");
    int n = r_count(r, MIN_PARAM_BYTES, "parameters");
    d->params = r_alloc(r, sizeof *d->params * (size_t)n);
    for (int i = 0; i < n && r->st == FC_OK; i++) {
        snprintf(r->where, sizeof r->where, "parameter %d", i);
        fc_program_tensor *t = &d->params[i];
        d->nparams = i + 1; /* its name is freed on failure */
        t->name = r_str(r, 4096, "its name");
        r_dims(r, t);
        t->value = (int)r_u32(r);
        t->inout = r_u8(r) != 0;
    }
}

static void read_outputs(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "results");
    int n = r_count(r, MIN_OUTPUT_BYTES, "results");
    d->outputs = r_alloc(r, sizeof *d->outputs * (size_t)n);
    for (int i = 0; i < n && r->st == FC_OK; i++) {
        snprintf(r->where, sizeof r->where, "result %d", i);
        fc_program_tensor *t = &d->outputs[i];
        d->noutputs = i + 1;
        r_dims(r, t);
        t->value = (int)r_u32(r);
        r_store_kind(r, &t->copy_from.kind);
        t->copy_from.index = r_i64(r);
        t->copy_from.bytes = fc_program_tensor_bytes(t);
    }
}

/* A launch's tensor maps, each checked against TMA's rules (what the
 * driver would refuse, and what no codegen makes); that each lies inside
 * its argument's buffer is checked with the storage (check_desc). */
static void read_tmaps(rbuf *r, fc_launch *l) {
    unsigned n = r_u8(r);
    if (r->st != FC_OK) return;
    if (n > FC_LAUNCH_MAX_TMAPS || (n > 0 && l->kind != FC_LAUNCH_KERNEL)) {
        r_fail(r, FC_ERR_INPUT, "%u tensor maps (at most %d, for kernels only)", n, FC_LAUNCH_MAX_TMAPS);
        return;
    }
    for (unsigned t = 0; t < n && r->st == FC_OK; t++) {
        fc_tmap *m = &l->tmaps[t];
        uint32_t arg = r_u32(r);
        m->offset = r_i64(r);
        unsigned dt = r_u8(r), rank = r_u8(r), flags = r_u8(r);
        if (r->st != FC_OK) return;
        if (arg >= (uint32_t)l->nargs || m->offset < 0 || (dt != FC_BF16 && dt != FC_F16) || rank < 1 ||
            rank > FC_TMAP_MAX_RANK || (flags & ~TMAP_SWIZZLE128)) {
            r_fail(r, FC_ERR_INPUT, "tensor map %u: argument %u of %d, offset %lld, dtype %u, rank %u, flags 0x%x", t,
                   arg, l->nargs, (long long)m->offset, dt, rank, flags);
            return;
        }
        m->arg = (int)arg;
        m->dtype = (fc_dtype)dt;
        m->rank = (int)rank;
        m->swizzle128 = flags & TMAP_SWIZZLE128;
        const int64_t es = (int64_t)fc_dtype_size(m->dtype);
        for (int d = 0; d < m->rank; d++) m->dims[d] = r_i64(r);
        for (int d = 0; d + 1 < m->rank; d++) m->strides[d] = r_i64(r);
        for (int d = 0; d < m->rank; d++) m->box[d] = r_u32(r);
        for (int d = 0; d < m->rank && r->st == FC_OK; d++) {
            /* The driver's limits: dims below 2^32, strides multiples of
             * 16 below 2^40, boxes of 1 to 256 with a whole number of 16
             * bytes innermost (128 at most under the 128-byte swizzle). */
            if (m->dims[d] < 1 || m->dims[d] > ((int64_t)1 << 32))
                r_fail(r, FC_ERR_INPUT, "tensor map %u: dim %d is %lld", t, d, (long long)m->dims[d]);
            else if (d > 0 && (m->strides[d - 1] < 16 || m->strides[d - 1] % 16 || m->strides[d - 1] >= ((int64_t)1 << 40)))
                r_fail(r, FC_ERR_INPUT, "tensor map %u: stride %d is %lld bytes", t, d, (long long)m->strides[d - 1]);
            else if (m->box[d] < 1 || m->box[d] > 256 ||
                     (d == 0 && ((m->box[0] * es) % 16 || (m->swizzle128 && m->box[0] * es > 128))))
                r_fail(r, FC_ERR_INPUT, "tensor map %u: box dim %d is %u", t, d, m->box[d]);
        }
        if (r->st == FC_OK) l->ntmaps = (int)t + 1;
    }
}

/* Whether tensor map m lies inside a buffer of `bytes` bytes: its last
 * element, offset + (dims[0] - 1) + sum (dims[d] - 1) * strides[d - 1]
 * bytes in, is (the fields were bounded by read_tmaps, so no term
 * overflows: dims <= 2^32, strides < 2^40; the sum is checked as it grows). */
static bool tmap_inside(const fc_tmap *m, int64_t bytes) {
    const int64_t es = (int64_t)fc_dtype_size(m->dtype);
    if (m->offset > bytes / es || m->dims[0] > bytes / es - m->offset) return false;
    int64_t end = (m->offset + m->dims[0]) * es; /* <= bytes */
    for (int d = 1; d < m->rank && end <= bytes; d++) {
        const int64_t s = m->strides[d - 1], n = m->dims[d] - 1;
        if (n > 0 && s > (bytes - end) / n) return false;
        end += n * s;
    }
    return end <= bytes;
}

static void read_launches(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "launches");
    int n = r_count(r, MIN_LAUNCH_BYTES, "launches");
    d->src.launches = r_alloc(r, sizeof *d->src.launches * (size_t)n);
    for (int i = 0; i < n && r->st == FC_OK; i++) {
        snprintf(r->where, sizeof r->where, "launch %d", i);
        fc_launch *l = &d->src.launches[i];
        d->src.nlaunches = i + 1; /* its args are freed on failure */
        unsigned kind = r_u8(r);
        if (r->st == FC_OK && kind > FC_LAUNCH_ALIAS) r_fail(r, FC_ERR_INPUT, "unknown launch kind %u", kind);
        l->kind = (fc_launch_kind)kind;
        r_str_into(r, l->name, sizeof l->name, "its name");
        l->group = (int)r_u32(r);
        for (int k = 0; k < 3; k++) l->grid[k] = r_u32(r);
        for (int k = 0; k < 3; k++) l->block[k] = r_u32(r);
        l->smem = r_u32(r);
        uint32_t nargs = r_u32(r), nreads = r_u32(r);
        if (r->st != FC_OK) return;
        if (nargs > MAX_LAUNCH_ARGS || nreads > nargs || (size_t)nargs > (r->len - r->pos) / 4) {
            r_fail(r, FC_ERR_INPUT, "%u arguments, %u of them read: impossible", nargs, nreads);
            return;
        }
        l->nargs = (int)nargs;
        l->nreads = (int)nreads;
        l->args = r_alloc(r, sizeof *l->args * (nargs + 1));
        for (uint32_t a = 0; a < nargs && r->st == FC_OK; a++) l->args[a] = (int)r_u32(r);
        r_str_into(r, l->summary, sizeof l->summary, "its summary");
        read_tmaps(r, l);
        const unsigned flags = r_u8(r);
        if (r->st == FC_OK && ((flags & ~(LAUNCH_PDL | LAUNCH_LOADTIME)) ||
                               ((flags & (LAUNCH_PDL | LAUNCH_LOADTIME)) && l->kind != FC_LAUNCH_KERNEL)))
            r_fail(r, FC_ERR_INPUT, "launch flags 0x%x", flags);
        l->pdl = flags & LAUNCH_PDL;
        l->loadtime = flags & LAUNCH_LOADTIME;
        r_str_into(r, l->source, sizeof l->source, "its source");
        l->nsource_ops = (int)r_u32(r);
        l->bytes = r_i64(r);
        const uint64_t flops_bits = (uint64_t)r_i64(r);
        memcpy(&l->flops, &flops_bits, sizeof l->flops);
    }
}

/* A launch argument's position, below nargs. */
static int r_arg(rbuf *r, int nargs, const char *what) {
    uint32_t a = r_u32(r);
    if (r->st == FC_OK && a >= (uint32_t)nargs) r_fail(r, FC_ERR_INPUT, "%s is argument %u of %d", what, a, nargs);
    return r->st == FC_OK ? (int)a : 0;
}

/* One GEMM record into its launch's entry (what is not checked here, the
 * dtypes, sizes and extents, fc_program_check_gemm checks once the whole
 * description is read). */
static void read_gemm(rbuf *r, fc_program_desc *d) {
    uint32_t launch = r_u32(r);
    if (r->st != FC_OK) return;
    if (launch >= (uint32_t)d->src.nlaunches || d->src.launches[launch].kind != FC_LAUNCH_LIBRARY ||
        d->gemm[launch].op_arg) {
        r_fail(r, FC_ERR_INPUT, "launch %u is not a library call, or has a GEMM already", launch);
        return;
    }
    int nargs = d->src.launches[launch].nargs;
    fc_gemm_desc *g = &d->gemm[launch];
    fc_gemm_plan *p = &g->plan;
    unsigned ab = r_u8(r), out = r_u8(r), flags = r_u8(r), act = r_u8(r);
    if (r->st == FC_OK && (ab >= FC_DTYPE_COUNT || out >= FC_DTYPE_COUNT || act > FC_GEMM_ACT_GELU_TANH ||
                           (flags & ~(GEMM_TRANS_A | GEMM_TRANS_B | GEMM_BIAS | GEMM_RESIDUAL | GEMM_FOLDED))))
        r_fail(r, FC_ERR_INPUT, "dtypes %u and %u, flags 0x%x, activation %u", ab, out, flags, act);
    p->ab = (fc_dtype)ab;
    p->out = (fc_dtype)out;
    p->act = (fc_gemm_act)act;
    p->trans_a = flags & GEMM_TRANS_A;
    p->trans_b = flags & GEMM_TRANS_B;
    p->has_bias = flags & GEMM_BIAS;
    p->has_residual = flags & GEMM_RESIDUAL;
    p->folded_batch = flags & GEMM_FOLDED;
    uint64_t alpha = (uint64_t)r_i64(r);
    memcpy(&p->alpha, &alpha, sizeof alpha);
    int64_t *f[9] = {&p->M, &p->N, &p->K, &p->lda, &p->ldw, &p->batch, &p->stride_a, &p->stride_w, &p->stride_y};
    for (int i = 0; i < 9; i++) *f[i] = r_i64(r);
    unsigned nouter = r_u8(r);
    if (r->st == FC_OK && nouter > FC_MAX_RANK) r_fail(r, FC_ERR_INPUT, "%u loop dims", nouter);
    p->nouter = r->st == FC_OK ? (int)nouter : 0;
    for (int i = 0; i < p->nouter; i++) {
        p->outer_size[i] = r_i64(r);
        p->outer_a[i] = r_i64(r);
        p->outer_w[i] = r_i64(r);
        p->outer_y[i] = r_i64(r);
    }
    /* Every weight is an argument: at most nargs of them, each 8 bytes. */
    int nweights = r_count(r, 8, "weights");
    if (r->st == FC_OK && (nweights < 1 || nweights > nargs))
        r_fail(r, FC_ERR_INPUT, "%d weights for %d arguments", nweights, nargs);
    if (r->st != FC_OK) return;
    p->nweights = nweights;
    g->wcols = r_alloc(r, sizeof *g->wcols * (size_t)nweights);
    for (int i = 0; i < nweights && r->st == FC_OK; i++) g->wcols[i] = r_i64(r);
    g->out_arg = r_arg(r, nargs, "the result");
    int nops = fc_gemm_plan_nops(p); /* at most 2 + 2 * MAX_LAUNCH_ARGS */
    if (r->st == FC_OK && (size_t)nops > (r->len - r->pos) / 4) r_fail(r, FC_ERR_INPUT, "%d operands cannot fit", nops);
    g->op_arg = r_alloc(r, sizeof *g->op_arg * (size_t)nops);
    for (int k = 0; k < nops && r->st == FC_OK; k++) g->op_arg[k] = r_arg(r, nargs, "an operand");
}

static void read_gemms(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "GEMMs");
    int n = r_count(r, MIN_GEMM_BYTES, "GEMMs");
    if (r->st != FC_OK || n == 0) return;
    if (n > d->src.nlaunches) {
        r_fail(r, FC_ERR_INPUT, "%d GEMMs for %d launches", n, d->src.nlaunches);
        return;
    }
    d->gemm = r_alloc(r, sizeof *d->gemm * (size_t)d->src.nlaunches);
    for (int i = 0; i < n && r->st == FC_OK; i++) {
        snprintf(r->where, sizeof r->where, "GEMM %d", i);
        read_gemm(r, d);
    }
}

static bool valid_store(const fc_program_desc *d, const fc_store *s) {
    switch (s->kind) {
    case FC_STORE_NONE: return true;
    case FC_STORE_INPUT: return s->index >= 0 && s->index < d->nparams;
    case FC_STORE_OUTPUT: return s->index >= 0 && s->index < d->noutputs;
    case FC_STORE_ARENA:
        return s->index >= 0 && s->bytes >= 0 && s->index <= d->arena_bytes && s->bytes <= d->arena_bytes - s->index;
    }
    return false;
}

/* The bytes of value id's buffer (its storage was checked): a caller's
 * buffer is as large as its tensor, whatever the storage record says. */
static int64_t buffer_bytes(const fc_program_desc *d, int id) {
    const fc_store *s = &d->store[id];
    int64_t t = s->kind == FC_STORE_INPUT    ? fc_program_tensor_bytes(&d->params[s->index])
                : s->kind == FC_STORE_OUTPUT ? fc_program_tensor_bytes(&d->outputs[s->index])
                                             : s->bytes;
    return t < s->bytes ? t : s->bytes;
}

/* The distinct kernels: a name each (unique, not empty) and its key; every
 * kernel launch names one of them. */
static void read_kernels(rbuf *r, fc_program_desc *d) {
    snprintf(r->where, sizeof r->where, "kernels");
    int n = r_count(r, 4 + 1 + 16, "kernels");
    if (r->st != FC_OK) return;
    if (n > d->src.nlaunches) {
        r_fail(r, FC_ERR_INPUT, "%d kernels for %d launches", n, d->src.nlaunches);
        return;
    }
    d->src.kernels = r_alloc(r, sizeof *d->src.kernels * (size_t)n);
    if (!d->src.kernels) return;
    for (int k = 0; k < n && r->st == FC_OK; k++) {
        fc_cuda_kernel *kn = &d->src.kernels[k];
        snprintf(r->where, sizeof r->where, "kernel %d", k);
        r_str_into(r, kn->name, sizeof kn->name, "its name");
        if (r->st == FC_OK && !r_have(r, sizeof kn->key)) r_fail(r, FC_ERR_INPUT, "its key is cut short");
        if (r->st != FC_OK) break;
        memcpy(kn->key, r->p + r->pos, sizeof kn->key);
        r->pos += sizeof kn->key;
        d->src.nkernels = k + 1;
        if (!kn->name[0]) r_fail(r, FC_ERR_INPUT, "a kernel without a name");
        for (int j = 0; j < k && r->st == FC_OK; j++)
            if (!strcmp(d->src.kernels[j].name, kn->name)) r_fail(r, FC_ERR_INPUT, "%s named twice", kn->name);
    }
    for (int i = 0; i < d->src.nlaunches && r->st == FC_OK; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind != FC_LAUNCH_KERNEL) continue;
        bool found = false;
        for (int k = 0; k < d->src.nkernels && !found; k++) found = !strcmp(d->src.kernels[k].name, l->name);
        if (!found) r_fail(r, FC_ERR_INPUT, "launch %d runs %s, which is not one of its kernels", i, l->name);
    }
}

/* What the runtime relies on, checked once here so that it can index
 * without checks: every id in range, every launch argument with storage
 * inside its buffer, every copy from a buffer that exists. */
static void check_desc(rbuf *r, const fc_program_desc *d) {
    if (r->st != FC_OK) return;
    snprintf(r->where, sizeof r->where, "program");
    if (d->sm < 10 || d->sm > 999) r_fail(r, FC_ERR_INPUT, "bad target sm_%d", d->sm);
    else if (d->arena_bytes < 0 || d->intermediate_bytes < 0) r_fail(r, FC_ERR_INPUT, "negative arena size");
    else if (!d->src.source[0]) r_fail(r, FC_ERR_INPUT, "no CUDA source");
    else if (!d->graph_name[0]) r_fail(r, FC_ERR_INPUT, "no graph name");
    for (int i = 0; i < d->nvalues && r->st == FC_OK; i++)
        if (d->store[i].bytes < 0 || !valid_store(d, &d->store[i]))
            r_fail(r, FC_ERR_INPUT, "value %d: storage %d[%lld] (%lld bytes) is outside its buffer", i,
                   (int)d->store[i].kind, (long long)d->store[i].index, (long long)d->store[i].bytes);
    for (int i = 0; i < d->nparams && r->st == FC_OK; i++) {
        const fc_program_tensor *t = &d->params[i];
        /* A parameter lives in its own input buffer, nowhere else. */
        if (t->value < 0 || t->value >= d->nvalues || d->store[t->value].kind != FC_STORE_INPUT ||
            d->store[t->value].index != i)
            r_fail(r, FC_ERR_INPUT, "parameter %d is value %d, which is not stored in input %d", i, t->value, i);
    }
    for (int k = 0; k < d->noutputs && r->st == FC_OK; k++) {
        const fc_program_tensor *t = &d->outputs[k];
        const fc_store *c = &t->copy_from;
        if (t->value < 0 || t->value >= d->nvalues) r_fail(r, FC_ERR_INPUT, "result %d is value %d", k, t->value);
        else if (c->kind == FC_STORE_ARENA || !valid_store(d, c) || (c->kind == FC_STORE_OUTPUT && c->index == k))
            r_fail(r, FC_ERR_INPUT, "result %d is copied from storage %d[%lld]", k, (int)c->kind,
                   (long long)c->index);
        else if (c->kind == FC_STORE_INPUT && fc_program_tensor_bytes(&d->params[c->index]) != c->bytes)
            r_fail(r, FC_ERR_INPUT, "result %d is copied from input %lld of another size", k, (long long)c->index);
        else if (c->kind == FC_STORE_OUTPUT && fc_program_tensor_bytes(&d->outputs[c->index]) != c->bytes)
            r_fail(r, FC_ERR_INPUT, "result %d is copied from result %lld of another size", k, (long long)c->index);
    }
    for (int i = 0; i < d->src.nlaunches && r->st == FC_OK; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind == FC_LAUNCH_KERNEL) {
            if (!l->name[0]) r_fail(r, FC_ERR_INPUT, "launch %d: a kernel without a name", i);
            for (int k = 0; k < 3; k++)
                if (l->grid[k] == 0 || l->block[k] == 0)
                    r_fail(r, FC_ERR_INPUT, "launch %d: an empty grid or block", i);
        }
        if (l->kind == FC_LAUNCH_ALIAS) continue;
        for (int a = 0; a < l->nargs && r->st == FC_OK; a++) {
            int id = l->args[a];
            if (id < 0 || id >= d->nvalues || d->store[id].kind == FC_STORE_NONE)
                r_fail(r, FC_ERR_INPUT, "launch %d: argument %d is value %d, which has no storage", i, a, id);
        }
        /* A tensor map reads its argument's buffer: the copy engine must
         * not be pointed past it. */
        for (int t = 0; t < l->ntmaps && r->st == FC_OK; t++) {
            const int64_t bytes = buffer_bytes(d, l->args[l->tmaps[t].arg]);
            if (!tmap_inside(&l->tmaps[t], bytes))
                r_fail(r, FC_ERR_INPUT, "launch %d: tensor map %d reaches past argument %d's %lld bytes", i, t,
                       l->tmaps[t].arg, (long long)bytes);
        }
    }
    /* Last, as it reads the storage checked above: each GEMM's operands
     * inside their buffers, so that cuBLASLt cannot be made to read or
     * write out of bounds. */
    for (int i = 0; i < d->src.nlaunches && r->st == FC_OK; i++) {
        char why[256];
        fc_status st = fc_program_check_gemm(r->ctx, d, i, why, sizeof why);
        if (st == FC_ERR_NOMEM) r_fail(r, st, "no memory");
        else if (st != FC_OK) r_fail(r, FC_ERR_INPUT, "launch %d: its GEMM: %s", i, why);
    }
}

fc_status fc_program_desc_decode(fc_context *ctx, const void *data, size_t size, fc_program_desc *out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_desc_decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (!data && size) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_desc_decode: data is NULL");
    rbuf r = {ctx, data, size, 0, FC_OK, "header"};
    fc_program_desc *d = out;

    if (r_have(&r, HEADER_BYTES) && memcmp(r.p, FC_PROGRAM_MAGIC, 8) != 0) r_fail(&r, FC_ERR_INPUT, "not a program");
    r.pos = r.st == FC_OK ? 8 : r.pos;
    uint32_t version = r_u32(&r), reserved = r_u32(&r);
    if (r.st == FC_OK && version != FC_PROGRAM_FORMAT_VERSION)
        r_fail(&r, FC_ERR_INPUT, "format version %u, this fusec reads %u", version, FC_PROGRAM_FORMAT_VERSION);
    if (r.st == FC_OK && reserved != 0) r_fail(&r, FC_ERR_INPUT, "reserved field is %u", reserved);

    snprintf(r.where, sizeof r.where, "program");
    d->graph_name = r_str(&r, 4096, "the graph name");
    d->graph_text = r_str(&r, UINT32_MAX, "the graph text");
    uint32_t sm = r_u32(&r), flags = r_u32(&r);
    uint32_t precision = (flags & FLAG_PRECISION_MASK) >> FLAG_PRECISION_SHIFT;
    if (r.st == FC_OK && ((flags & ~(FLAG_FAST_MATH | FLAG_FUSE | FLAG_TF32 | FLAG_PRECISION_MASK | FLAG_EAGER)) ||
                          precision >= (uint32_t)FC_PRECISION_COUNT))
        r_fail(&r, FC_ERR_INPUT, "unknown flags 0x%x", flags);
    d->sm = sm > 999 ? 0 : (int)sm; /* check_desc refuses 0 */
    d->fast_math = flags & FLAG_FAST_MATH;
    d->fuse = flags & FLAG_FUSE;
    d->tf32 = flags & FLAG_TF32;
    d->precision = precision < (uint32_t)FC_PRECISION_COUNT ? (fc_precision)precision : FC_PRECISION_AS_WRITTEN;
    d->numerics = flags & FLAG_EAGER ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST;
    if (r_have(&r, sizeof d->kernel_key)) {
        memcpy(d->kernel_key, r.p + r.pos, sizeof d->kernel_key);
        r.pos += sizeof d->kernel_key;
    }
    d->arena_bytes = r_i64(&r);
    d->intermediate_bytes = r_i64(&r);
    read_stores(&r, d);
    read_params(&r, d);
    read_outputs(&r, d);
    read_launches(&r, d);
    read_gemms(&r, d);
    snprintf(r.where, sizeof r.where, "source");
    d->src.source = r_str(&r, UINT32_MAX, "the CUDA source");
    read_kernels(&r, d);
    if (r.st == FC_OK && r.pos != r.len) r_fail(&r, FC_ERR_INPUT, "%zu bytes after the end", r.len - r.pos);
    check_desc(&r, d);
    if (r.st != FC_OK) {
        fc_program_desc_release(d);
        return r.st;
    }
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* What the CLI prints.                                                */
/* ------------------------------------------------------------------ */

static char *text_done(fc_strbuf *t) {
    if (t->oom || !t->buf) {
        fc_ctx_freemem(t->ctx, t->buf);
        if (!t->oom) fc_set_error(t->ctx, FC_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return t->buf;
}

/* "1.2 MiB (1258291 bytes)"; plain "512 bytes" below 1 KiB. */
static const char *size_str(uint64_t n, char *buf, size_t cap) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%.1f %s (%llu bytes)", v, units[u], (unsigned long long)n);
    return buf;
}

static const char *time_str(int64_t t, char *buf, size_t cap) {
    if (t <= 0) return snprintf(buf, cap, "none"), buf;
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S %Z", &tm))
        snprintf(buf, cap, "%lld (seconds since the epoch)", (long long)t);
    return buf;
}

char *fc_cache_info_text(fc_context *ctx, bool verify, size_t *nbad) {
    if (nbad) *nbad = 0;
    fc_cache *c = NULL;
    if (fc_cache_global_open(ctx, &c) != FC_OK) return NULL;
    fc_cache_summary s;
    if (fc_cache_info(c, ctx, &s) != FC_OK) return NULL;
    fc_cache_verify_result vr = {0};
    if (verify && fc_cache_verify(c, ctx, false, &vr) != FC_OK) return NULL;

    fc_strbuf t = {.ctx = ctx};
    char a[64], b[64];
    fc_strbuf_printf(&t, "cache directory:   %s\n", s.dir[0] ? s.dir : "(none)");
    fc_strbuf_printf(&t, "mode:              %s\n", fc_cache_mode_name(s.mode));
    if (s.disk_enabled) fc_strbuf_printf(&t, "disk cache:        on\n");
    else fc_strbuf_printf(&t, "disk cache:        off (%s)\n", s.disabled_reason ? s.disabled_reason : "?");
    fc_strbuf_printf(&t, "format version:    %u\n", s.format_version);
    fc_strbuf_printf(&t, "kernels:           %llu entries, %s\n", (unsigned long long)s.entries[FC_CACHE_KERNEL],
            size_str(s.bytes[FC_CACHE_KERNEL], a, sizeof a));
    fc_strbuf_printf(&t, "programs:          %llu entries, %s\n", (unsigned long long)s.entries[FC_CACHE_PROGRAM],
            size_str(s.bytes[FC_CACHE_PROGRAM], a, sizeof a));
    fc_strbuf_printf(&t, "gemm algorithms:   %llu entries, %s\n", (unsigned long long)s.entries[FC_CACHE_ALGO],
            size_str(s.bytes[FC_CACHE_ALGO], a, sizeof a));
    fc_strbuf_printf(&t, "other versions:    %llu entries, %s\n", (unsigned long long)s.stale_entries,
            size_str(s.stale_bytes, a, sizeof a));
    fc_strbuf_printf(&t, "temporary files:   %llu\n", (unsigned long long)s.temp_files);
    fc_strbuf_printf(&t, "total:             %s of %s (%.1f%%)\n", size_str(s.total_bytes, a, sizeof a),
            size_str(s.max_bytes, b, sizeof b), s.max_bytes ? 100.0 * (double)s.total_bytes / (double)s.max_bytes : 0.0);
    fc_strbuf_printf(&t, "hits:              %llu\n", (unsigned long long)s.counters[FC_CACHE_HITS]);
    fc_strbuf_printf(&t, "misses:            %llu\n", (unsigned long long)s.counters[FC_CACHE_MISSES]);
    fc_strbuf_printf(&t, "compiles:          %llu\n", (unsigned long long)s.counters[FC_CACHE_COMPILES]);
    fc_strbuf_printf(&t, "corrupt:           %llu\n", (unsigned long long)s.counters[FC_CACHE_CORRUPT]);
    fc_strbuf_printf(&t, "evictions:         %llu\n", (unsigned long long)s.counters[FC_CACHE_EVICTIONS]);
    fc_strbuf_printf(&t, "bytes written:     %s\n", size_str(s.counters[FC_CACHE_BYTES_WRITTEN], a, sizeof a));
    fc_strbuf_printf(&t, "oldest entry:      %s (least recently used)\n", time_str(s.oldest, a, sizeof a));
    fc_strbuf_printf(&t, "newest entry:      %s (most recently used)\n", time_str(s.newest, a, sizeof a));
    if (verify) {
        fc_strbuf_printf(&t, "verify:            %zu entries checked, %zu bad\n", vr.checked, vr.nbad);
        for (size_t i = 0; i < vr.nbad; i++) fc_strbuf_printf(&t, "bad entry:         %s: %s\n", vr.bad[i].path, vr.bad[i].reason);
        if (nbad) *nbad = vr.nbad;
    }
    fc_cache_verify_result_free(&vr);
    return text_done(&t);
}

char *fc_cache_clear_text(fc_context *ctx) {
    fc_cache *c = NULL;
    if (fc_cache_global_open(ctx, &c) != FC_OK) return NULL;
    uint64_t entries = 0, bytes = 0;
    if (fc_cache_clear(c, ctx, &entries, &bytes) != FC_OK) return NULL;
    fc_strbuf t = {.ctx = ctx};
    char a[64];
    fc_strbuf_printf(&t, "cleared %s: %llu entries removed, %s freed\n", fc_cache_dir(c)[0] ? fc_cache_dir(c) : "(none)",
            (unsigned long long)entries, size_str(bytes, a, sizeof a));
    return text_done(&t);
}

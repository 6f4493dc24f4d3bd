/*
 * nvrtc.c - CUDA C++ to a cubin with NVRTC, and NVRTC's error reports.
 *
 * NVRTC needs no GPU and no driver, so every generated kernel can be
 * compiled (for sm_90) in CI. The option list is built in one place,
 * fc_nvrtc_options_build, which the compile itself uses: a cache key that
 * hashes that list can never drift from what was compiled.
 */
#include "runtime/cuda/cuda.h"
#include "ir/switches.h"
#include "runtime/cuda/cuda_check.h"

#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CMake passes the toolkit's include directories (a CMake list, so
 * possibly several separated by ';'). The default only serves builds
 * outside CMake, such as a syntax check. */
#ifndef FUSEC_CUDA_INCLUDE_DIR
#define FUSEC_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

#define DEFAULT_PROGRAM_NAME "fusec_kernel.cu"


fc_status fc_nvrtc_version(int *major, int *minor) {
    int ma = 0, mi = 0;
    if (nvrtcVersion(&ma, &mi) != NVRTC_SUCCESS) return FC_ERR_RUNTIME;
    if (major) *major = ma;
    if (minor) *minor = mi;
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Options.                                                            */
/* ------------------------------------------------------------------ */

/* Append a copy of s[0..n) to the option list (in its storage). */
static bool add_copy(fc_nvrtc_options *o, size_t *used, const char *prefix, const char *s, size_t n) {
    size_t plen = strlen(prefix);
    if (o->count >= FC_NVRTC_MAX_OPTIONS || *used + plen + n + 1 > sizeof o->storage) return false;
    char *dst = o->storage + *used;
    memcpy(dst, prefix, plen);
    memcpy(dst + plen, s, n);
    dst[plen + n] = 0;
    *used += plen + n + 1;
    o->opt[o->count++] = dst;
    return true;
}

static bool sets_arch(const char *opt) {
    return strncmp(opt, "--gpu-architecture", 18) == 0 || strncmp(opt, "-arch", 5) == 0;
}

fc_status fc_nvrtc_options_build(fc_context *ctx, int sm_major, int sm_minor, const char *const *extra,
                                 int nextra, fc_nvrtc_options *out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_nvrtc_options_build: out is NULL");
    out->count = 0;
    if (sm_major < 1 || sm_major > 99 || sm_minor < 0 || sm_minor > 9)
        return fc_set_error(ctx, FC_ERR_USAGE, "NVRTC: bad compute capability %d.%d", sm_major, sm_minor);
    if (nextra < 0 || (nextra > 0 && !extra))
        return fc_set_error(ctx, FC_ERR_USAGE, "NVRTC: bad extra options (%d, %s)", nextra,
                            extra ? "non-NULL" : "NULL");
    for (int i = 0; i < nextra; i++)
        if (!extra[i]) return fc_set_error(ctx, FC_ERR_USAGE, "NVRTC: extra option %d is NULL", i);

    size_t used = 0;
    bool ok = true;

    /* A cubin needs a real architecture (sm_XY), not a virtual one
     * (compute_XY): nvrtcGetCUBIN fails for the latter. An extra option
     * may pick another one (sm_90a, for wgmma), and then replaces ours. */
    bool arch_given = false;
    for (int i = 0; i < nextra; i++) arch_given |= sets_arch(extra[i]);
    if (!arch_given) {
        char arch[16];
        int n = snprintf(arch, sizeof arch, "sm_%d%d", sm_major, sm_minor);
        ok &= add_copy(out, &used, "--gpu-architecture=", arch, (size_t)n);
    }
    ok &= add_copy(out, &used, "", "-std=c++17", 10);
    /* Generated helpers need no __device__ on each function. */
    ok &= add_copy(out, &used, "", "-default-device", 15);

    /* CUDA 13.0's NVRTC no longer has cuda_fp16.h and cuda_bf16.h built
     * in, so it gets the toolkit's include directory. The environment can
     * point at another toolkit than the one fusec was built against. */
    const char *dirs = fc_switch_str(FC_SW_CUDA_INCLUDE_DIR);
    if (!*dirs) dirs = FUSEC_CUDA_INCLUDE_DIR;
    for (const char *p = dirs; *p;) {
        size_t n = strcspn(p, ";:");
        if (n > 0) ok &= add_copy(out, &used, "-I", p, n);
        p += n;
        if (*p) p++;
    }

    for (int i = 0; i < nextra; i++) {
        if (out->count >= FC_NVRTC_MAX_OPTIONS) {
            ok = false;
            break;
        }
        out->opt[out->count++] = extra[i];
    }
    if (!ok) {
        out->count = 0;
        return fc_set_error(ctx, FC_ERR_USAGE, "NVRTC: too many or too long options (at most %d, %d bytes)",
                            FC_NVRTC_MAX_OPTIONS, FC_NVRTC_OPTION_BYTES);
    }
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Error reports.                                                      */
/* ------------------------------------------------------------------ */

/* A bounded string builder over a fixed buffer: it truncates, never
 * overflows, and remembers that it truncated. */
typedef struct sbuf {
    char *p;
    size_t cap, len;
    bool full;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + 1 >= b->cap) {
        b->full = true;
        return;
    }
    size_t room = b->cap - 1 - b->len;
    if (n > room) {
        n = room;
        b->full = true;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The line number of the first error in the program itself, from its
 * NVRTC log, or 0. Its lines read "name.cu(12): error: ..." (or
 * "catastrophic error"); warnings have the same form and are skipped, and
 * so are errors inside included headers, whose lines start with the
 * header's path instead of the program's name. */
static int first_error_line(const char *log, const char *name) {
    size_t name_len = strlen(name);
    for (const char *p = log; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        if (n > name_len && strncmp(p, name, name_len) == 0 && p[name_len] == '(') {
            char *end;
            long v = strtol(p + name_len + 1, &end, 10);
            if (end < p + n && end[0] == ')' && end[1] == ':' && v > 0 && v < 1000000) {
                /* "error" must come on this line, after the location. */
                const char *e = strstr(end, "error");
                if (e && e < p + n) return (int)v;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

/* Append source lines [from, to] (1-based; clamped), numbered, with a '>'
 * on line `mark`. Long lines are cut: this is a message, not a listing. */
static void put_source_lines(sbuf *b, const char *src, int from, int to, int mark) {
    int lineno = 1;
    for (const char *p = src; *p && lineno <= to && !b->full; lineno++) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        if (lineno >= from) {
            int shown = n > 160 ? 160 : (int)n;
            sb_printf(b, "%c%5d | %.*s%s\n", lineno == mark ? '>' : ' ', lineno, shown, p,
                      (size_t)shown < n ? " ..." : "");
        }
        if (!eol) break;
        p = eol + 1;
    }
}

static int count_lines(const char *s) {
    int n = 0;
    for (const char *p = s; *p; p++) n += *p == '\n';
    return s[0] && s[strlen(s) - 1] != '\n' ? n + 1 : n;
}

static bool debug_code(void) {
    return strstr(fc_switch_str(FC_SW_DEBUG), "code") != NULL;
}

fc_status fc_nvrtc_fail(fc_context *ctx, fc_nvrtc_unit *unit, nvrtcResult r, const char *call, const char *file,
                        int line) {
    char msg[FC_ERROR_MAX];
    sbuf b = {msg, sizeof msg, 0, false};
    msg[0] = 0;
    const char *name = unit && unit->name ? unit->name : DEFAULT_PROGRAM_NAME;
    sb_printf(&b, "%s:%d: %s failed: %s", fc_check_short_file(file), line, call, nvrtcGetErrorString(r));

    /* The program log says what was wrong. Plain malloc, not the
     * context's: fault injection must not hide the real error. */
    char *log = NULL;
    size_t log_size = 0;
    if (unit && unit->prog && nvrtcGetProgramLogSize(unit->prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        log = malloc(log_size);
        if (log && nvrtcGetProgramLog(unit->prog, log) != NVRTC_SUCCESS) {
            free(log);
            log = NULL;
        }
    }
    bool show_all = debug_code();
    if (log) {
        size_t n = strlen(log);
        while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' ')) n--;
        size_t cap = show_all ? 1024 : 2048; /* leave room for the source */
        sb_printf(&b, "\nNVRTC log for %s:\n", name);
        sb_put(&b, log, n < cap ? n : cap);
        if (n > cap) sb_printf(&b, "\n[log truncated: %zu more bytes]", n - cap);
    }

    if (unit && unit->source) {
        int nlines = count_lines(unit->source);
        int err = log ? first_error_line(log, name) : 0;
        if (show_all) {
            /* As much as fits, from well before the first error: the
             * message has a fixed size (FC_ERROR_MAX). */
            int from = err > 40 ? err - 40 : 1;
            sb_printf(&b, "\nsource of %s, from line %d of %d:\n", name, from, nlines);
            put_source_lines(&b, unit->source, from, nlines, err);
        } else if (err > 0) {
            int from = err > 3 ? err - 3 : 1, to = err + 2 < nlines ? err + 2 : nlines;
            sb_printf(&b, "\nsource of %s, lines %d-%d of %d (FUSEC_DEBUG=code shows more):\n", name, from, to,
                      nlines);
            put_source_lines(&b, unit->source, from, to, err);
        }
    }
    if (b.full) {
        /* Say that it was cut, in the last bytes of the buffer. */
        static const char cut[] = "\n[message truncated]";
        memcpy(msg + sizeof msg - sizeof cut, cut, sizeof cut);
    }
    free(log);
    if (unit && unit->prog) nvrtcDestroyProgram(&unit->prog);
    if (unit) unit->prog = NULL;
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", msg);
}

/* ------------------------------------------------------------------ */
/* Compiling.                                                          */
/* ------------------------------------------------------------------ */

static fc_status get_cubin(fc_context *ctx, fc_nvrtc_unit *unit, uint8_t *data) {
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetCUBIN(unit->prog, (char *)data));
    return FC_OK;
}

fc_status fc_nvrtc_unit_compile(fc_context *ctx, fc_nvrtc_unit *unit, int nopt, const char *const *opt) {
    nvrtcProgram prog = NULL;
    FC_NVRTC_CHECK(ctx, unit, nvrtcCreateProgram(&prog, unit->source, unit->name, 0, NULL, NULL));
    unit->prog = prog;
    FC_NVRTC_CHECK(ctx, unit, nvrtcCompileProgram(unit->prog, nopt, opt));
    return FC_OK;
}

/* Each FC_NVRTC_CHECK destroys the program when it fails; the caller
 * destroys it when this returns (success or not). */
static fc_status compile(fc_context *ctx, fc_nvrtc_unit *unit, const fc_nvrtc_options *opts, fc_bytes *out) {
    fc_status st = fc_nvrtc_unit_compile(ctx, unit, opts->count, opts->opt);
    if (st != FC_OK) return st;
    size_t size = 0;
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetCUBINSize(unit->prog, &size));
    if (size == 0) return fc_set_error(ctx, FC_ERR_RUNTIME, "NVRTC made an empty cubin for %s", unit->name);
    uint8_t *data = fc_ctx_malloc(ctx, size);
    if (!data) return FC_ERR_NOMEM;
    st = get_cubin(ctx, unit, data);
    if (st != FC_OK) {
        fc_free(data);
        return st;
    }
    out->data = data;
    out->size = size;
    return FC_OK;
}

fc_status fc_nvrtc_compile(fc_context *ctx, const char *source, const char *name, int sm_major, int sm_minor,
                           const char *const *extra_opts, int nextra, fc_bytes *cubin_out) {
    if (!cubin_out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_nvrtc_compile: cubin_out is NULL");
    cubin_out->data = NULL;
    cubin_out->size = 0;
    if (!source) return fc_set_error(ctx, FC_ERR_USAGE, "fc_nvrtc_compile: source is NULL");

    fc_nvrtc_options opts;
    fc_status st = fc_nvrtc_options_build(ctx, sm_major, sm_minor, extra_opts, nextra, &opts);
    if (st != FC_OK) return st;

    fc_nvrtc_unit unit = {NULL, name ? name : DEFAULT_PROGRAM_NAME, source};
    st = compile(ctx, &unit, &opts, cubin_out);
    if (unit.prog) nvrtcDestroyProgram(&unit.prog);
    return st;
}

/* ------------------------------------------------------------------ */
/* Many units at once.                                                 */
/* ------------------------------------------------------------------ */

/* Distinct programs compile independently in NVRTC (its API is thread
 * safe across programs); one context per unit keeps each one's error. */
typedef struct compile_pool {
    const char *const *sources, *const *names;
    const fc_nvrtc_options *opts;
    fc_bytes *cubins;
    fc_context *ctxs;
    fc_status *st;
    int n;
    atomic_int next;
} compile_pool;

static void *pool_worker(void *arg) {
    compile_pool *pool = arg;
    for (int i; (i = atomic_fetch_add(&pool->next, 1)) < pool->n;) {
        fc_nvrtc_unit unit = {NULL, pool->names[i] ? pool->names[i] : DEFAULT_PROGRAM_NAME, pool->sources[i]};
        pool->st[i] = compile(&pool->ctxs[i], &unit, pool->opts, &pool->cubins[i]);
        if (unit.prog) nvrtcDestroyProgram(&unit.prog);
    }
    return NULL;
}

/* NVRTC is CPU-bound, one program per thread: a model's distinct kernels
 * (28 for ResNet-50 in bf16, 98 for EfficientNet-B0) compile in rounds of
 * as many as there are threads. Each program holds about 40 MB of
 * NVRTC's while it compiles (a bf16 kernel, measured), so 16 of them
 * stay under a gigabyte. */
#define NVRTC_MAX_THREADS 16

int fc_nvrtc_threads(int n) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int t = cpus < 1 ? 1 : cpus > NVRTC_MAX_THREADS ? NVRTC_MAX_THREADS : (int)cpus;
    return n < t ? (n < 1 ? 1 : n) : t;
}

fc_status fc_nvrtc_compile_many(fc_context *ctx, const char *const *sources, const char *const *names, int n,
                                const fc_nvrtc_options *opts, int threads, fc_bytes *cubins) {
    if (n < 0 || (n > 0 && (!sources || !names || !opts || !cubins)))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_nvrtc_compile_many: bad arguments");
    for (int i = 0; i < n; i++) {
        cubins[i].data = NULL;
        cubins[i].size = 0;
        if (!sources[i]) return fc_set_error(ctx, FC_ERR_USAGE, "fc_nvrtc_compile_many: source %d is NULL", i);
    }
    if (n == 0) return FC_OK;
    compile_pool pool = {sources, names, opts, cubins, NULL, NULL, n, 0};
    pool.ctxs = fc_ctx_malloc(ctx, sizeof *pool.ctxs * (size_t)n);
    pool.st = fc_ctx_malloc(ctx, sizeof *pool.st * (size_t)n);
    pthread_t *tid = threads > 1 ? fc_ctx_malloc(ctx, sizeof *tid * (size_t)threads) : NULL;
    if (!pool.ctxs || !pool.st || (threads > 1 && !tid)) {
        fc_free(pool.ctxs);
        fc_free(pool.st);
        fc_free(tid);
        return FC_ERR_NOMEM;
    }
    memset(pool.ctxs, 0, sizeof *pool.ctxs * (size_t)n);
    int started = 0;
    for (; started < threads - 1 && threads > 1; started++)
        if (pthread_create(&tid[started], NULL, pool_worker, &pool) != 0) break; /* fewer threads, same work */
    pool_worker(&pool); /* the calling thread works too */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    fc_status st = FC_OK;
    for (int i = 0; i < n && st == FC_OK; i++)
        if (pool.st[i] != FC_OK) {
            st = pool.st[i];
            fc_set_error(ctx, st, "%s", pool.ctxs[i].error);
        }
    if (st != FC_OK)
        for (int i = 0; i < n; i++) fc_bytes_free(&cubins[i]);
    fc_free(pool.ctxs);
    fc_free(pool.st);
    fc_free(tid);
    return st;
}

/* test_util.h - small helpers that several C tests share (include after
 * check.h): files, private temporary directories, the clock.
 *
 *   src_dir()                       $FUSEC_SRC, or "." when unset or empty
 *   read_file(path, &len)           the whole file, NUL-terminated; len may be NULL
 *   write_all(path, data, n)        (re)write a file; CHECKs that it worked
 *   temp_dir(buf, n, "name")        mkdtemp $TMPDIR/name-XXXXXX (else /tmp)
 *   rm_rf(path)                     remove a tree, read-only directories too
 *   count_names(dir, prefix)        the entries of dir whose name starts so
 *   count_entries(dir, level)       the entry files (.bin) of a cache level, DIR/v<format>/<level>
 *   param_type(&t, p)               t's dtype, rank and shape those of parameter p; its largest dim
 *   compile_through_alloc_failures(ctx, g, o, &failures)
 *                                   fc_compile with its 1st, 2nd, ... allocation
 *                                   failing until it succeeds; CHECKs each failure
 *                                   (_each(..., before): before() ahead of each compile)
 *   check_same_code(a, b)           b's launch plan and CUDA source are a's
 *   compile_checked(g, &o)          fc_compile, CHECKed, the failure printed; NULL then
 *   options_for(dev, precision)     fc_compile_options_default's, for that device and precision
 *   origin_of(p)                    where p's compile came from (fc_compile_times.origin)
 *   g_pointwise(ctx, name, rows)    relu(x * y + 1) over f32[rows, 256]: one small pointwise kernel
 *   with_dtype(tmpl, "bf16")        tmpl with every "DT" replaced by the dtype (malloc'd)
 *   tb_add(&tb, fmt, ...)           printf onto a text buffer (tbuf), cut at its size
 *   fc_now_ms() (ir/timing.h)       a monotonic clock, in milliseconds
 */
#ifndef FC_TEST_UTIL_H
#define FC_TEST_UTIL_H
#include "check.h"
#include "cache/cache.h"
#include "fusec.h"
#include "ir/timing.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static inline const char *src_dir(void) {
    const char *s = getenv("FUSEC_SRC");
    return s && *s ? s : ".";
}

/* NULL when the file cannot be read (*len is then 0). void *: text for
 * some callers, bytes for others. */
static inline void *read_file(const char *path, size_t *len) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (!s) return NULL;
    s[n] = 0;
    if (len) *len = (size_t)n;
    return s;
}

static inline void write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* A fresh private directory: false (after perror) when none was made. */
static inline bool temp_dir(char *buf, size_t n, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, n, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (mkdtemp(buf)) return true;
    perror("mkdtemp");
    return false;
}

static inline void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        chmod(path, 0700); /* a test may have made it read-only */
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            char sub[4096];
            if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) < (int)sizeof sub) rm_rf(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* -1 when dir cannot be opened. */
static inline int count_names(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

/* fc_compile(g, o) with its n-th allocation through ctx failing, for n = 1,
 * 2, ... until a compile succeeds: each failure must be FC_ERR_NOMEM and
 * leave no program (never a crash; ASan checks the leaks). Returns the
 * first program that compiled (NULL if none did, or at a status other than
 * FC_ERR_NOMEM); *failures counts the failed compiles. before, when not
 * NULL, is called before each compile. */
static inline fc_program *compile_through_alloc_failures_each(fc_context *ctx, fc_graph *g,
                                                              const fc_compile_options *o, int *failures,
                                                              void (*before)(void)) {
    *failures = 0;
    for (long n = 1; g && n < 100000; n++) {
        if (before) before();
        fc_program *p = NULL;
        fc_context_fail_alloc_after(ctx, n);
        fc_status st = fc_compile(g, o, &p);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) return p;
        ++*failures;
        CHECK(p == NULL);
        if (st != FC_ERR_NOMEM) fprintf(stderr, "allocation %ld: status %d: %s\n", n, st, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
        if (st != FC_ERR_NOMEM) return NULL;
    }
    return NULL;
}

static inline fc_program *compile_through_alloc_failures(fc_context *ctx, fc_graph *g, const fc_compile_options *o,
                                                         int *failures) {
    return compile_through_alloc_failures_each(ctx, g, o, failures, NULL);
}

static inline int count_entries(const char *dir, const char *level) {
    char path[1024];
    snprintf(path, sizeof path, "%s/v%u/%s", dir, FC_CACHE_FORMAT_VERSION, level);
    DIR *d = opendir(path);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strlen(de->d_name) > 4 && strcmp(de->d_name + strlen(de->d_name) - 4, ".bin") == 0;
    closedir(d);
    return n;
}

static inline int64_t param_type(fc_tensor *t, const fc_value *p) {
    t->dtype = fc_value_dtype(p);
    t->rank = fc_value_rank(p);
    int64_t big = 1;
    for (int d = 0; d < t->rank; d++) {
        t->shape[d] = fc_value_dim(p, d);
        if (t->shape[d] > big) big = t->shape[d];
    }
    return big;
}

static inline fc_graph *g_pointwise(fc_context *ctx, const char *name, int rows) {
    fc_graph *g = fc_graph_new(ctx, name);
    fc_dim d[2] = {rows, 256};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d), *y = fc_param(g, "y", FC_F32, 2, d);
    fc_value *r = fc_relu(g, fc_add(g, fc_mul(g, x, y), fc_scalar(g, 1.0)));
    fc_graph_return(g, 1, &r);
    return g;
}

static inline char *with_dtype(const char *tmpl, const char *dt) {
    char *out = malloc(strlen(tmpl) * (strlen(dt) + 1) + 1), *o = out;
    for (const char *p = tmpl; out && *p;) {
        if (p[0] == 'D' && p[1] == 'T') {
            o += sprintf(o, "%s", dt);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    if (out) *o = 0;
    return out;
}

static inline void check_same_code(fc_program *a, fc_program *b) {
    char *x = fc_program_plan_text(a), *y = fc_program_plan_text(b);
    CHECK_STR(y, x);
    fc_free(x);
    fc_free(y);
    x = fc_program_cuda_source(a);
    y = fc_program_cuda_source(b);
    CHECK_STR(y, x);
    fc_free(x);
    fc_free(y);
}

static inline fc_compile_options options_for(fc_device dev, fc_precision precision) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = dev;
    o.precision = precision;
    return o;
}

static inline fc_program *compile_checked(fc_graph *g, const fc_compile_options *o) {
    fc_program *p = NULL;
    fc_status st = fc_compile(g, o, &p);
    if (st != FC_OK) fprintf(stderr, "compile %s: %s\n", fc_graph_name(g), fc_last_error(fc_graph_context(g)));
    CHECK_EQ_INT(st, FC_OK);
    return p;
}

static inline fc_program_origin origin_of(const fc_program *p) {
    fc_compile_times t;
    fc_program_times(p, &t);
    return t.origin;
}

typedef struct tbuf {
    char text[16384];
    size_t len;
} tbuf;

static inline void tb_add(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tb_add(tbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->text + b->len, sizeof b->text - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
    if (b->len >= sizeof b->text) b->len = sizeof b->text - 1;
}

#endif

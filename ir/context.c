/* context.c - the context: error messages, allocation (with fault
 * injection for tests), located diagnostics. */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void fc_unreachable_at(const char *file, int line, const char *what) {
    /* A broken invariant is a bug in fusec: report where, then abort. This is
     * the one place the library writes to stderr. */
    fprintf(stderr, "fusec: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

fc_context *fc_context_new(void) {
    fc_context *ctx = calloc(1, sizeof *ctx);
    return ctx;
}

void fc_context_free(fc_context *ctx) { free(ctx); }

const char *fc_last_error(const fc_context *ctx) { return ctx ? ctx->error : "no context"; }

void fc_clear_error(fc_context *ctx) {
    if (ctx) ctx->error[0] = 0;
}

void fc_context_fail_alloc_after(fc_context *ctx, long n) {
    if (!ctx) return;
    ctx->alloc_fail_after = n < 0 ? 0 : n;
    ctx->alloc_count = 0;
}


void fc_free(void *p) { free(p); }

void fc_bytes_free(fc_bytes *b) {
    if (!b) return;
    fc_free(b->data);
    b->data = NULL;
    b->size = 0;
}

static bool alloc_should_fail(fc_context *ctx) {
    if (!ctx || ctx->alloc_fail_after <= 0) return false;
    ctx->alloc_count++;
    return ctx->alloc_count >= ctx->alloc_fail_after;
}

void *fc_ctx_malloc(fc_context *ctx, size_t size) {
    void *p = alloc_should_fail(ctx) ? NULL : malloc(size ? size : 1);
    if (!p && ctx) fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (allocating %zu bytes)", size);
    return p;
}

void *fc_ctx_realloc(fc_context *ctx, void *old, size_t size) {
    void *p = alloc_should_fail(ctx) ? NULL : realloc(old, size ? size : 1);
    if (!p && ctx) fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (allocating %zu bytes)", size);
    return p;
}

bool fc_ctx_grow(fc_context *ctx, void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *p = fc_ctx_realloc(ctx, *arr, (size_t)ncap * elem);
    if (!p) return false;
    *arr = p;
    *cap = ncap;
    return true;
}

void fc_ctx_freemem(fc_context *ctx, void *p) {
    (void)ctx;
    free(p);
}

fc_status fc_set_errorv(fc_context *ctx, fc_status st, const char *fmt, va_list ap) {
    if (ctx) vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    return st;
}

fc_status fc_set_error(fc_context *ctx, fc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_set_errorv(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Append to a bounded buffer; never overflows, silently truncates. */
static void buf_append(char *buf, size_t cap, size_t *pos, const char *s, size_t n) {
    if (*pos >= cap) return;
    size_t room = cap - 1 - *pos;
    if (n > room) n = room;
    memcpy(buf + *pos, s, n);
    *pos += n;
    buf[*pos] = 0;
}

fc_status fc_diagv(fc_context *ctx, const char *file, const char *text, size_t len, fc_loc loc,
                   const char *fmt, va_list ap) {
    if (!ctx) return FC_ERR_INPUT;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char *buf = ctx->error;
    size_t cap = sizeof ctx->error, pos = 0;
    buf[0] = 0;
    char head[256];
    int n = snprintf(head, sizeof head, "%s:%d:%d: error: ", file ? file : "<input>", loc.line, loc.col);
    buf_append(buf, cap, &pos, head, (size_t)n < sizeof head ? (size_t)n : sizeof head - 1);
    buf_append(buf, cap, &pos, msg, strlen(msg));
    buf_append(buf, cap, &pos, "\n", 1);
    if (!text || loc.line <= 0) return FC_ERR_INPUT;

    /* Find the source line. */
    const char *p = text, *end = text + len;
    for (int l = 1; l < loc.line && p < end; p++)
        if (*p == '\n') l++;
    const char *eol = p;
    while (eol < end && *eol != '\n') eol++;
    size_t line_len = (size_t)(eol - p);
    if (line_len && p[line_len - 1] == '\r') line_len--; /* CRLF files */
    if (line_len > 400) line_len = 400; /* keep huge lines readable */
    /* Source line, with control bytes shown as '?' so the caret lines up
     * and binary garbage cannot garble a terminal. */
    buf_append(buf, cap, &pos, "    ", 4);
    for (size_t i = 0; i < line_len; i++) {
        char c = p[i];
        if (c != '\t' && ((unsigned char)c < 0x20 || c == 0x7f)) c = '?';
        buf_append(buf, cap, &pos, &c, 1);
    }
    buf_append(buf, cap, &pos, "\n    ", 5);
    for (int i = 1; i < loc.col && (size_t)(i - 1) < line_len; i++) {
        char c = p[i - 1] == '\t' ? '\t' : ' ';
        buf_append(buf, cap, &pos, &c, 1);
    }
    buf_append(buf, cap, &pos, "^\n", 2);
    return FC_ERR_INPUT;
}

fc_status fc_diag(fc_context *ctx, const char *file, const char *text, size_t len, fc_loc loc,
                  const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_status st = fc_diagv(ctx, file, text, len, loc, fmt, ap);
    va_end(ap);
    return st;
}

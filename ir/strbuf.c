/* strbuf.c - a growing, printf-appended string: the one builder behind the
 * generated CUDA source, the printed .ir, the plan and timing texts, the
 * cache reports and the serialized programs. */
#include "ir.h"

#include <stdio.h>
#include <string.h>

/* Room for n more bytes and the NUL after them; false (and oom) when the
 * allocation fails. */
static bool reserve(fc_strbuf *s, size_t n) {
    if (s->len + n + 1 <= s->cap) return true;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->len + n + 1) cap *= 2;
    char *b = fc_ctx_realloc(s->ctx, s->buf, cap);
    if (!b) {
        s->oom = true;
        return false;
    }
    s->buf = b;
    s->cap = cap;
    return true;
}

void fc_strbuf_put(fc_strbuf *s, const void *data, size_t n) {
    if (s->oom || !reserve(s, n)) return;
    if (n) memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

void fc_strbuf_vprintf(fc_strbuf *s, const char *fmt, va_list ap) {
    if (s->oom) return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        s->oom = true; /* an encoding error: treat the text as lost */
        return;
    }
    if (!reserve(s, (size_t)n)) return;
    vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    s->len += (size_t)n;
}

void fc_strbuf_printf(fc_strbuf *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_strbuf_vprintf(s, fmt, ap);
    va_end(ap);
}

/* strbuf.c - a growing, printf-appended string: the one builder behind the
 * generated CUDA source, the plan and timing texts and the cache reports. */
#include "ir.h"

#include <stdio.h>

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
    if (s->len + (size_t)n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + (size_t)n + 1) cap *= 2;
        char *b = fc_ctx_realloc(s->ctx, s->buf, cap);
        if (!b) {
            s->oom = true;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
    vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    s->len += (size_t)n;
}

void fc_strbuf_printf(fc_strbuf *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_strbuf_vprintf(s, fmt, ap);
    va_end(ap);
}

/* arena.c - bump allocation in chunks; one arena per graph, freed at once
 * (as ggml's context). Allocation failures go through the context so the
 * fault-injection tests reach them. */
#include "ir.h"

#include <string.h>

struct fc_arena_chunk {
    fc_arena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void fc_arena_init(fc_arena *ar, fc_context *ctx) {
    memset(ar, 0, sizeof *ar);
    ar->ctx = ctx;
}

void fc_arena_release(fc_arena *ar) {
    fc_arena_chunk *c = ar->head;
    while (c) {
        fc_arena_chunk *next = c->next;
        fc_ctx_freemem(ar->ctx, c);
        c = next;
    }
    ar->head = NULL;
}

void *fc_arena_alloc(fc_arena *ar, size_t size) {
    size = (size + 15) & ~(size_t)15;
    fc_arena_chunk *c = ar->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 16384 ? size : 16384;
        c = fc_ctx_malloc(ar->ctx, sizeof *c + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = ar->head;
        ar->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *fc_arena_strndup(fc_arena *ar, const char *s, size_t n) {
    char *p = fc_arena_alloc(ar, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

bool fc_grow(fc_arena *ar, void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *p = fc_arena_alloc(ar, (size_t)ncap * elem);
    if (!p) return false;
    if (*arr) memcpy(p, *arr, (size_t)*cap * elem);
    *arr = p;
    *cap = ncap;
    return true;
}

/*
 * arena_layout.c - placing a memory layout at one shape (arena_layout.h).
 *
 * Allocation: "greedy by size" with best fit over offsets (the scheme of
 * TFLite's arena planner; Pisarchyk and Lee, "Efficient Memory Management
 * for Deep Neural Net Inference", 2020). Classes are placed largest first
 * (ties: earlier start, then lower value id, so the placement is
 * deterministic). Each is put in the smallest gap between the buffers
 * already placed whose lifetimes overlap its own, or above all of them if
 * no gap is large enough. Largest first because the large buffers are the
 * hard ones to fit; small ones then fill the holes. Offsets and sizes are
 * multiples of 256 bytes (the alignment cuMemAlloc gives, and enough for
 * any vector load a kernel makes).
 *
 * Lifetimes are closed intervals of launch positions [first, last]: a
 * value read by launch j and a value written by launch j are both live at
 * j and never share memory, since a kernel may read and write in any order.
 */
#include "ir/arena_layout.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 256

/* One class at one shape. */
typedef struct interval {
    int root;        /* value id of the class root */
    int index;       /* its class in the layout (fc_arena_layout.cls) */
    int first, last; /* launch positions, inclusive */
    int64_t size;    /* bytes, rounded up to ARENA_ALIGN */
    int64_t offset;  /* assigned offset, -1 until placed */
} interval;

static int64_t align_up(int64_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

int64_t fc_dims_bytes_at(int esize, const fc_dim *dims, int rank, const int64_t *sym_values) {
    int64_t n = esize;
    for (int i = 0; i < rank; i++) {
        int64_t d = sym_values ? fc_dim_value(dims[i], sym_values) : dims[i];
        if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
        n *= d;
    }
    return n;
}

/* Order for placement: largest first, then earliest start, then id. */
static bool placed_before(const interval *a, const interval *b) {
    if (a->size != b->size) return a->size > b->size;
    if (a->first != b->first) return a->first < b->first;
    return a->root < b->root;
}

static bool below(const interval *a, const interval *b) {
    if (a->offset != b->offset) return a->offset < b->offset;
    return a->root < b->root;
}

static int cmp_placement(const void *pa, const void *pb) {
    const interval *a = pa, *b = pb;
    return placed_before(a, b) ? -1 : placed_before(b, a);
}

/* Short lists (a dynamic variant's shape places a dozen classes) are
 * insertion-sorted: qsort's calls would cost more than the comparisons.
 * Both orders are total (ids break ties), so either sort gives the same
 * placement. */
#define SHORT_SORT 32

static void sort_for_placement(interval *iv, int n) {
    if (n > SHORT_SORT) {
        qsort(iv, (size_t)n, sizeof *iv, cmp_placement);
        return;
    }
    for (int i = 1; i < n; i++) {
        interval x = iv[i];
        int j = i;
        for (; j > 0 && placed_before(&x, &iv[j - 1]); j--) iv[j] = iv[j - 1];
        iv[j] = x;
    }
}

static bool lifetimes_overlap(const interval *a, const interval *b) {
    return a->first <= b->last && b->first <= a->last;
}

/* Place every interval; returns the peak (the arena size). `placed` is
 * scratch for niv pointers: the intervals placed so far, kept in offset
 * order as each is placed (a binary search and a move), so that finding
 * the buffers live beside the next one is a scan, not a sort of them per
 * interval (which made a plan with thousands of intermediates live at
 * once, as a wide concat's operands are, cost n^2 log n). */
static int64_t place_all(interval *iv, int niv, interval **placed) {
    int64_t peak = 0;
    int nplaced = 0;
    sort_for_placement(iv, niv);
    for (int i = 0; i < niv; i++) {
        interval *cur = &iv[i];
        /* Best fit: the smallest gap between the buffers live at the same
         * time that holds cur; the top (above every one) when none does. */
        int64_t best = -1, best_gap = INT64_MAX, top = 0;
        for (int j = 0; j < nplaced; j++) {
            const interval *p = placed[j];
            if (!lifetimes_overlap(cur, p)) continue;
            int64_t gap = p->offset - top;
            if (gap >= cur->size && gap < best_gap) {
                best = top;
                best_gap = gap;
            }
            int64_t end = p->offset + p->size;
            if (end > top) top = end;
        }
        cur->offset = best >= 0 ? best : top;
        if (cur->offset + cur->size > peak) peak = cur->offset + cur->size;
        int lo = 0, hi = nplaced;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (below(placed[mid], cur)) lo = mid + 1;
            else hi = mid;
        }
        memmove(&placed[lo + 1], &placed[lo], sizeof *placed * (size_t)(nplaced - lo));
        placed[lo] = cur;
        nplaced++;
    }
    return peak;
}

void fc_arena_layout_free(fc_arena_layout *l) {
    if (!l) return;
    fc_context *ctx = l->ctx;
    fc_ctx_freemem(ctx, l->form);
    fc_ctx_freemem(ctx, l->form_of);
    fc_ctx_freemem(ctx, l->class_of);
    fc_ctx_freemem(ctx, l->cls);
    fc_ctx_freemem(ctx, l->class_forms);
    fc_ctx_freemem(ctx, l);
}

/* Scratch of a placement kept on the stack up to this many classes and
 * forms (a dynamic variant's shape then allocates nothing for it). */
#define PLACE_SMALL 64

fc_status fc_arena_layout_place(const fc_arena_layout *l, const int64_t *sym_values, int64_t *offset, int64_t *bytes,
                                int64_t *arena_bytes, int64_t *intermediate_bytes) {
    int64_t fb_small[PLACE_SMALL], off_small[PLACE_SMALL];
    interval iv_small[PLACE_SMALL];
    interval *live_small[PLACE_SMALL];
    int64_t *fb = fb_small, *off = off_small;
    interval *iv = iv_small;
    interval **live = live_small;
    const int nc = l->nclasses;
    if (l->nforms > PLACE_SMALL) fb = fc_ctx_malloc(l->ctx, sizeof *fb * (size_t)l->nforms);
    if (nc > PLACE_SMALL) {
        off = fc_ctx_malloc(l->ctx, sizeof *off * (size_t)nc);
        iv = fc_ctx_malloc(l->ctx, sizeof *iv * (size_t)nc);
        live = fc_ctx_malloc(l->ctx, sizeof *live * (size_t)nc);
    }
    fc_status st = FC_OK;
    if (!fb || !off || !iv || !live) st = FC_ERR_NOMEM;
    /* Each distinct size once. */
    for (int f = 0; f < l->nforms && st == FC_OK; f++) {
        const fc_arena_form *fm = &l->form[f];
        fb[f] = fc_dims_bytes_at(fm->esize, fm->dims, fm->rank, sym_values);
        if (fb[f] < 0 && fm->checked)
            st = fc_set_error(l->ctx, FC_ERR_INPUT, "bind: a value of graph %s is too large (its size overflows 64 bits)",
                              l->graph_name);
    }
    if (st == FC_OK) {
        int64_t sum = 0;
        for (int k = 0; k < nc; k++) {
            const fc_arena_class *cl = &l->cls[k];
            int64_t size = 0;
            for (int i = 0; i < cl->nforms; i++)
                if (fb[l->class_forms[cl->forms_at + i]] > size) size = fb[l->class_forms[cl->forms_at + i]];
            iv[k] = (interval){cl->root, k, cl->first, cl->last, align_up(size), -1};
            sum += size;
        }
        *arena_bytes = place_all(iv, nc, live);
        *intermediate_bytes = sum;
        for (int k = 0; k < nc; k++) off[iv[k].index] = iv[k].offset;
        for (int id = 0; id < l->nvalues; id++) {
            offset[id] = l->class_of[id] >= 0 ? off[l->class_of[id]] : -1;
            if (bytes) bytes[id] = l->form_of[id] >= 0 ? fb[l->form_of[id]] : 0;
        }
    }
    if (fb != fb_small) fc_ctx_freemem(l->ctx, fb);
    if (off != off_small) fc_ctx_freemem(l->ctx, off);
    if (iv != iv_small) fc_ctx_freemem(l->ctx, iv);
    if (live != live_small) fc_ctx_freemem(l->ctx, live);
    return st;
}

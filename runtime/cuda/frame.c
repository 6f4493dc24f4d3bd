/* frame.c - a dynamic variant's frame (see frame.h; docs/DYNAMIC.md, "The
 * frame"). */
#include "runtime/cuda/frame.h"
#include "ir/switches.h"

#include <stdlib.h>
#include <string.h>

struct fc_frame {
    int words;
    bool carried;          /* the carrier kernel takes the words: nothing is copied */
    CUdeviceptr table;     /* on the device: what the kernels read */
    uint64_t *next, *last; /* host: this run's image, and the last one written */
};

fc_status fc_frame_create(fc_cuda_device *dev, int words, bool carried, fc_frame **out) {
    *out = NULL;
    if (words < 1) return fc_set_error(dev->ctx, FC_ERR_USAGE, "fc_frame_create: %d words", words);
    fc_frame *f = calloc(1, sizeof *f);
    if (!f) return fc_set_error(dev->ctx, FC_ERR_NOMEM, "out of memory (a frame)");
    f->words = words;
    f->carried = carried;
    const size_t bytes = sizeof(uint64_t) * (size_t)words;
    f->next = calloc((size_t)words, sizeof(uint64_t));
    f->last = calloc((size_t)words, sizeof(uint64_t));
    fc_status st = f->next && f->last ? FC_OK : fc_set_error(dev->ctx, FC_ERR_NOMEM, "out of memory (a frame)");
    if (st == FC_OK) st = fc_cuda_alloc(dev, bytes, &f->table);
    if (st == FC_OK) st = fc_cuda_memset_async(dev, f->table, 0, bytes, NULL);
    if (st == FC_OK) st = fc_cuda_stream_sync(dev, NULL);
    if (st != FC_OK) {
        fc_frame_free(f, dev);
        return st;
    }
    *out = f;
    return FC_OK;
}

void fc_frame_free(fc_frame *f, fc_cuda_device *dev) {
    if (!f) return;
    if (f->table) (void)fc_cuda_free(dev, f->table);
    free(f->next);
    free(f->last);
    free(f);
}

CUdeviceptr fc_frame_device(const fc_frame *f) { return f ? f->table : 0; }

const uint64_t *fc_frame_image(const fc_frame *f) { return f && f->carried ? f->next : NULL; }

void fc_frame_fill(const fc_replay_env *e, void *const *inputs, void *const *outputs, uint64_t *image) {
    for (int k = 0; k < e->nsyms; k++) image[k] = (uint64_t)e->syms[k];
    const fc_program_desc *d = e->d;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind != FC_LAUNCH_KERNEL || !l->frame) continue;
        for (int a = 0; a < l->nargs; a++)
            image[e->nsyms + l->args[a]] = (uint64_t)fc_launch_value_ptr(e, l->args[a], inputs, outputs);
    }
}

bool fc_frame_diff(const uint64_t *a, const uint64_t *b, int n, int *lo, int *hi) {
    int i = 0, j = n;
    while (i < n && a[i] == b[i]) i++;
    while (j > i && a[j - 1] == b[j - 1]) j--;
    *lo = i;
    *hi = j;
    return i < j;
}

fc_status fc_frame_write(fc_frame *f, fc_cuda_device *dev, const fc_replay_env *e, void *const *inputs,
                         void *const *outputs, CUstream s, bool *wrote) {
    *wrote = false;
    fc_frame_fill(e, inputs, outputs, f->next);
    int lo, hi;
    if (!fc_frame_diff(f->next, f->last, f->words, &lo, &hi)) return FC_OK;
    const size_t n = sizeof(uint64_t) * (size_t)(hi - lo);
    if (f->carried) {
        /* The carrier's launch takes f->next; last only says what changed. */
        memcpy(f->last + lo, f->next + lo, n);
        *wrote = true;
        return FC_OK;
    }
    /* From the image itself, pageable memory: the driver stages so small a
     * copy before it returns (the image may change at once), ordered on s,
     * so no page-locked staging slot and no event to wait on are needed
     * (docs/DYNAMIC.md, "The frame"). */
    fc_status st = fc_cuda_upload_async(dev, f->table + sizeof(uint64_t) * (size_t)lo, f->next + lo, n, s);
    if (st != FC_OK) {
        /* Whether the copy was queued is unknown: the next run writes the
         * whole frame again. */
        memset(f->last, 0xff, sizeof(uint64_t) * (size_t)f->words);
        return st;
    }
    memcpy(f->last + lo, f->next + lo, n);
    *wrote = true;
    return FC_OK;
}

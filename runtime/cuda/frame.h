/*
 * frame.h - a dynamic variant's frame: the small device table of symbol
 * values and buffer addresses its kernels read (internal header;
 * docs/DYNAMIC.md, "The frame").
 *
 * A variant whose launches are all kernels is compiled with frame entries
 * (codegen/cuda/cuda_codegen.h, fc_launch.frame): each kernel takes one
 * parameter, the frame's address, and loads its sizes and pointers from
 * it. Its CUDA Graph then holds nothing that depends on the shape or on
 * the caller's buffers, and is never re-pointed: a run writes the words
 * of the frame that changed (a new shape, new buffers, a moved arena) with
 * one copy queued on its stream before the replay, and a run that changes
 * nothing writes nothing.
 *
 * Layout (fc_cuda_src.frame_words 64-bit words): word k < nsyms is symbol
 * k's value; word nsyms + id is the address of value id, for the values
 * some launch takes. Other words stay 0.
 *
 * The copy comes from the host image itself, pageable memory: the driver
 * stages a copy that small before cuMemcpyHtoDAsync returns, so the image
 * may change at once, and the copy is ordered on the run's stream: no
 * page-locked staging and no event per write. The program's rule
 * (one caller thread, one stream at a time, as for its arena) covers the
 * frame.
 *
 * A carried frame (fc_cuda_src.frame_carried: a frame that fits in the
 * carrier's parameters): nothing is copied. The variant's first kernel, the carrier, takes
 * the run's words by value as its second parameter and stores them into
 * the table for the kernels after it; a run only fills the host image
 * (fc_frame_image), which the carrier's launch, or its graph node's update
 * (runtime/cuda/replay.c), hands to the driver.
 */
#ifndef FC_RUNTIME_FRAME_H
#define FC_RUNTIME_FRAME_H

#include "runtime/cuda/replay.h"

typedef struct fc_frame fc_frame;

/* A frame of `words` words on dev: its device table (zeroed). */
fc_status fc_frame_create(fc_cuda_device *dev, int words, bool carried, fc_frame **out);
void fc_frame_free(fc_frame *f, fc_cuda_device *dev); /* NULL is ignored */
/* The device table's address (the frame kernels' parameter). */
CUdeviceptr fc_frame_device(const fc_frame *f);

/* The frame of a run into image (words words, zeroed by the caller once):
 * e's symbol values, and where each launch argument of e's description is
 * for these caller buffers (fc_launch_value_ptr). Host work only. */
void fc_frame_fill(const fc_replay_env *e, void *const *inputs, void *const *outputs, uint64_t *image);
/* The words [*lo, *hi) where a and b (n words) differ; false (and an empty
 * range) when they are the same. */
bool fc_frame_diff(const uint64_t *a, const uint64_t *b, int n, int *lo, int *hi);

/* Fill this run's frame (fc_frame_fill) and queue on stream s a copy of the
 * words that differ from the last written frame; *wrote says whether any
 * did. On failure the device table is as the last successful write left it
 * (a later run writes again). A carried frame is filled and compared, and
 * never copied: the carrier takes fc_frame_image. */
fc_status fc_frame_write(fc_frame *f, fc_cuda_device *dev, const fc_replay_env *e, void *const *inputs,
                         void *const *outputs, CUstream s, bool *wrote);
/* This run's words (after fc_frame_write): a carried frame's carrier
 * parameter. */
const uint64_t *fc_frame_image(const fc_frame *f);

#endif

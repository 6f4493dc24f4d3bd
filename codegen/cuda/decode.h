/*
 * decode.h - kernels of update_slice and cache_attention (decode.c,
 * docs/DECODE.md; internal to codegen/cuda).
 */
#ifndef FC_CODEGEN_CUDA_DECODE_H
#define FC_CODEGEN_CUDA_DECODE_H

#include "ir.h"
#include "lower/launch.h"
#include "passes/passes.h"

/* A library group of one update_slice or cache_attention node. */
bool fc_cuda_is_decode_group(const fc_group *gr);
/* Whether group gi, an update_slice of a cache, runs inside the kernel of
 * the cache_attention that reads its result (which then reads the new rows
 * from the update's source and writes them into the cache): it gets no
 * launch of its own. */
bool fc_cuda_update_in_attention(const fc_plan *plan, int gi);
/* Its kernel, named `name`, into s; grid and block into l. Static plans
 * only (FC_ERR_UNSUPPORTED for a dynamic one). */
fc_status fc_cuda_emit_decode(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l);

#endif

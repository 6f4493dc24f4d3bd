/*
 * nvtx.h - NVTX ranges (the CUDA toolkit's header-only NVTX3), so that
 * Nsight Systems and Nsight Compute show fusec's names: each compile phase
 * and each launch of a run, named after its kernel, ops and source lines.
 * With no tool attached a range is a call through a pointer that returns at
 * once (NVTX looks for an injected tool once, at the first range); without
 * the toolkit they compile to nothing.
 */
#ifndef FC_RUNTIME_NVTX_H
#define FC_RUNTIME_NVTX_H

#ifdef FUSEC_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
static inline void fc_nvtx_push(const char *name) { nvtxRangePushA(name); }
static inline void fc_nvtx_pop(void) { nvtxRangePop(); }
#else
static inline void fc_nvtx_push(const char *name) { (void)name; }
static inline void fc_nvtx_pop(void) {}
#endif

#endif

/*
 * cuda_codegen.h - CUDA C for a launch plan (internal).
 *
 * Codegen reads a scheduled plan (passes/passes.h) and writes one CUDA C
 * translation unit for the whole plan plus launch metadata for each kernel.
 * It knows nothing of the driver: the runtime compiles the source with NVRTC,
 * loads it and launches each kernel with the described arguments.
 */
#ifndef FC_CUDA_CODEGEN_H
#define FC_CUDA_CODEGEN_H

#include "lower/launch.h"
#include "passes/passes.h"

/* Generate the source and launches for `plan`. A dynamic plan
 * (plan->dynamic) gives kernels whose symbol-dependent sizes are the
 * trailing `long long` arguments (fc_launch.nsyms); what cannot be made
 * symbolic fails with FC_ERR_UNSUPPORTED naming the group. */
fc_status fc_cuda_codegen(const fc_plan *plan, fc_cuda_src *out);
/* The switches that change the generated source without changing the
 * NVRTC options (those of ir/switches.def whose `source` is 1, set to other
 * than their default: fc_switch_source_marker), as one option no kernel
 * reads, "-DFC_SWITCHES=FUSEC_SKINNY=0", or NULL when none is set. The
 * program cache's key holds a program's options and not its source (a hit
 * skips the codegen), so the runtime adds it
 * (fc_program_extra_nvrtc_options): otherwise a program compiled under one
 * setting would be served under another. The string lives as long as the
 * process. */
const char *fc_cuda_source_switches(void);

#endif

/*
 * compile_driver.h - what the CUDA backend's compile drivers include
 * (program_compile.c, variant_compile.c, program_plan.c): the program's
 * layout, the pipeline and the code generator. The run path includes
 * program_impl.h alone; scripts/check-layers.sh names the drivers and
 * checks that no other object calls passes/ or codegen/.
 */
#ifndef FC_RUNTIME_CUDA_COMPILE_DRIVER_H
#define FC_RUNTIME_CUDA_COMPILE_DRIVER_H

#include "codegen/cuda/attention.h"
#include "codegen/cuda/cuda_codegen.h"
#include "passes/passes.h"
#include "runtime/cuda/program_impl.h"

#endif

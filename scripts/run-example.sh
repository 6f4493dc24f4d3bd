#!/usr/bin/env bash
# run-example.sh - the README's first command: set up, build, and run an
# example model.
#
#   1. scripts/setup.sh installs what the build needs (Debian 12).
#   2. Configures and builds a Release build in build/ with Ninja.
#   3. Runs examples/gpt2_block.ir (one GPT-2 block, batch 1, 8 tokens) on
#      the best device this build and machine have: cuda when `nvidia-smi`
#      works and the build has the CUDA backend, else cpu when the build has
#      the LLVM backend, else ref (the reference interpreter). Inputs are
#      random (fusec --seed). `fusec --devices` says what the build has.
#   4. Runs the C API example (examples/gpt2_mlp.c).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

cmake_args=(-DCMAKE_BUILD_TYPE=Release)
[[ -f build/CMakeCache.txt ]] || cmake_args+=(-G Ninja)
[[ -n ${CUDA_HOME:-} ]] && cmake_args+=("-DCUDAToolkit_ROOT=$CUDA_HOME")
cmake -S . -B build "${cmake_args[@]}"
cmake --build build -j "$(nproc)"

fusec=build/fusec
devices=$("$fusec" --devices)
has_device() { grep -qx "$1" <<<"$devices"; }
if has_device cuda && nvidia-smi >/dev/null 2>&1; then
  device=cuda
elif has_device cpu; then
  device=cpu
else
  device=ref
fi

run() {
  echo
  echo "\$ $*"
  "$@"
}
run "$fusec" examples/gpt2_block.ir --bind B=1,T=8 --run --device="$device"
run build/example_gpt2_mlp

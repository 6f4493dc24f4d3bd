#!/usr/bin/env bash
# test.sh - the README's test command, and what CI runs (.ci/run).
#
#   1. scripts/setup.sh installs what the build needs (Debian 12).
#   2. build/: Release, warnings as errors; every test under ctest.
#   3. build-asan/: AddressSanitizer and UndefinedBehaviorSanitizer (with
#      leak checking), warnings as errors; every test under ctest again.
#
# Both builds use Ninja and all cores. A failing test in the first build does
# not stop the second; the exit code is nonzero if any test failed. Extra
# arguments are passed to both ctest runs (for example -R cli).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

jobs=$(nproc)

# configure DIR CMAKE_ARGS...: Ninja for a new build directory; an existing
# one keeps the generator it was made with.
configure() {
  local dir=$1
  shift
  local args=("$@")
  [[ -f $dir/CMakeCache.txt ]] || args+=(-G Ninja)
  [[ -n ${CUDA_HOME:-} ]] && args+=("-DCUDAToolkit_ROOT=$CUDA_HOME")
  cmake -S . -B "$dir" "${args[@]}"
}

echo "== build/ (Release, -Werror)"
configure build -DCMAKE_BUILD_TYPE=Release -DFUSEC_WERROR=ON -DFUSEC_SANITIZE=OFF
cmake --build build -j "$jobs"
status=0
(cd build && ctest --output-on-failure -j "$jobs" "$@") || status=1

echo "== build-asan/ (ASan + UBSan, -Werror)"
configure build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSEC_WERROR=ON -DFUSEC_SANITIZE=ON
cmake --build build-asan -j "$jobs"
(cd build-asan &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j "$jobs" "$@") || status=1

# The libFuzzer harnesses (tests/fuzz), each for a short while on the
# sanitizer build: clang only.
if command -v clang >/dev/null; then
  echo "== build-fuzz/ (libFuzzer harnesses, ASan + UBSan)"
  configure build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFUSEC_WERROR=ON -DFUSEC_SANITIZE=ON -DFUSEC_FUZZ=ON -DFUSEC_FUZZ_SECONDS=45
  cmake --build build-fuzz -j "$jobs" --target fuzz_ir fuzz_npy fuzz_aot fuzz_cache_entry fuzz_onnx fuzz_safetensors
  (cd build-fuzz && ctest -R fuzz_smoke --output-on-failure) || status=1
fi

if ((status)); then
  echo "test.sh: FAILED (see the ctest output above)" >&2
fi
exit "$status"

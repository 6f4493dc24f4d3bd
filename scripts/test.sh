#!/usr/bin/env bash
# test.sh - the README's test command, and what CI runs (.ci/run).
#
#   1. scripts/setup.sh installs what the build needs (Debian 12).
#   2. build/: Release, warnings as errors; every test under ctest.
#   3. build-asan/: AddressSanitizer and UndefinedBehaviorSanitizer (with
#      leak checking), warnings as errors; every test under ctest again.
#   4. build-cpu/: Release without the CUDA backend (FUSEC_WITH_CUDA=OFF, as
#      on a machine without the toolkit): the library, the CLI and the tests
#      that need no CUDA internals (--check's, the public API's, installing
#      and embedding); and no file of it may include a toolkit header.
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

echo "== build-cpu/ (Release, no CUDA backend)"
configure build-cpu -DCMAKE_BUILD_TYPE=Release -DFUSEC_WERROR=ON -DFUSEC_WITH_CUDA=OFF
cpu_tests=(test_check test_public_api)
if cmake --build build-cpu -j "$jobs" && cmake --build build-cpu -j "$jobs" --target "${cpu_tests[@]}"; then
  # The build must not have seen the toolkit's headers (this machine may
  # have them on the default include path).
  if ninja -C build-cpu -t deps 2>/dev/null | grep -E '/(cuda|nvrtc|cublasLt|cublas_api)\.h$'; then
    echo "test.sh: build-cpu/ included a CUDA toolkit header (above)" >&2
    status=1
  fi
  (cd build-cpu && ctest --output-on-failure -j "$jobs" -R '^(test_check|test_public_api|test_install|test_profile|layers)$' "$@") ||
    status=1
else
  status=1
fi

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

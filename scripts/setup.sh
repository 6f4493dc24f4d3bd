#!/usr/bin/env bash
# setup.sh - install what building and testing fusec needs, on Debian 12.
#
# As root: installs the missing Debian packages (apt-get update once, then
# apt-get install -y); a machine that has them all is left alone. As another
# user: prints the apt-get command to run and exits 1 if anything is missing.
#
# The CUDA toolkit (nvcc, NVRTC, cuBLASLt) is not a Debian package here: it is
# expected at /usr/local/cuda (or where CUDA_HOME points); without it the
# build leaves the CUDA backend out. A GPU and its driver are not needed to
# build or to run the tests.
set -euo pipefail

packages=(
  cmake               # 3.25 or newer
  ninja-build
  gcc
  g++                 # the project declares CXX; the C++ compiler must exist
  libxxhash-dev       # XXH3-128 cache keys
  llvm-14-dev         # LLVM C API for the CPU backend
  clang               # the libFuzzer harnesses (tests/fuzz)
  libclang-rt-14-dev  # sanitizer and libFuzzer runtimes for clang builds
  libopenblas-dev     # CPU GEMMs
  libprotobuf-c-dev   # ONNX import: the protobuf runtime
  protobuf-c-compiler # ONNX import: protoc-c compiles onnx.proto at build time
  libonnx-dev         # ONNX import: the schema, onnx/onnx.proto
  libonnx-testdata    # the ONNX backend test suite (tests/test_onnx_suite.c)
  libcjson-dev        # safetensors headers (JSON), profiles and traces
  graphviz            # tests/test_profile.sh renders --emit=dot with dot
  chromium            # tests/test_profile.sh loads the --report HTML headless
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" >/dev/null 2>&1; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "setup.sh: missing packages: ${missing[*]}" >&2
    echo "setup.sh: run as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
cuda_ok=1
for f in bin/nvcc include/nvrtc.h include/cublasLt.h; do
  if [[ ! -e $cuda/$f ]]; then
    echo "setup.sh: CUDA toolkit incomplete or missing: $cuda/$f not found" >&2
    cuda_ok=0
  fi
done
if ((!cuda_ok)); then
  # Not an error: the build leaves the CUDA backend out and says so.
  echo "setup.sh: without the CUDA toolkit at $cuda the build has the CPU and reference backends only;" >&2
  echo "setup.sh: install the toolkit (it is not a Debian package here) or set CUDA_HOME for the CUDA backend." >&2
fi
# onnx (and onnxruntime, for the differential test) build the ONNX test
# models (tests/onnx/make_models.py); tests that need them skip without.
if command -v python3 >/dev/null && ! python3 -c 'import onnx' 2>/dev/null; then
  python3 -m pip install --quiet onnx onnxruntime numpy || echo "setup.sh: pip install onnx onnxruntime failed; the ONNX model tests will skip" >&2
fi
if ((cuda_ok)); then
  echo "setup.sh: ok (packages present; CUDA toolkit at $cuda): the build will have the cuda, cpu and ref backends"
else
  echo "setup.sh: ok (packages present; no CUDA toolkit): the build will have the cpu and ref backends"
fi

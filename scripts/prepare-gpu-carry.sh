#!/usr/bin/env bash
# prepare-gpu-carry.sh - make .deps/ for a device run (bench/run-gpu.sh,
# bench/run-whole.sh).
#
# The GPU machine has no xxhash.h, no LLVM, no protobuf-c, protoc-c, cJSON or
# libonnx-dev, and no network. This copies from this machine's Debian
# packages (installed with apt-get when missing, as root):
#
#   .deps/xxhash/            xxhash.h (xxh3.h): xxHash used header-only
#                            (XXH_INLINE_ALL), -DFUSEC_XXHASH_DIR=.deps/xxhash
#   .deps/onnx/include/      protobuf-c/protobuf-c.h, cjson/cJSON.h
#   .deps/onnx/lib/          libprotobuf-c.so(.1), libcjson.so(.1): the shared
#                            libraries, each needing only libc
#   .deps/onnx/pb/onnx/      onnx.pb-c.c and onnx.pb-c.h, made here by protoc-c
#                            from libonnx-dev's onnx/onnx.proto
#
# and fusec is configured there with
#   -DFUSEC_WITH_LLVM=OFF -DFUSEC_XXHASH_DIR=$PWD/.deps/xxhash
#   -DCMAKE_PREFIX_PATH=$PWD/.deps/onnx -DFUSEC_ONNX_PB_DIR=$PWD/.deps/onnx/pb
# (CMake finds the headers and libraries under the prefix and puts lib/ in
# the binaries' build RPATH, so nothing needs LD_LIBRARY_PATH.)
# .deps/ is git-ignored, so it travels only when the device call names it:
# carry [".deps"]. The whole of it is about 1 MiB.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# need FILE PACKAGE...: install the packages when FILE is missing.
need() {
    local file=$1
    shift
    [[ -e $file ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        echo "prepare-gpu-carry.sh: $file missing; as root run: apt-get install -y $*" >&2
        exit 1
    fi
    echo "prepare-gpu-carry.sh: installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "$@" ||
        { apt-get update && apt-get install -y --no-install-recommends "$@"; }
}

# ------------------------------------------------------------ xxHash
src=/usr/include/xxhash.h
need "$src" libxxhash-dev
dst=.deps/xxhash
mkdir -p "$dst"
cp "$src" "$dst/"
# xxh3.h is a shim that includes xxhash.h; copy it too where it exists.
[[ -f /usr/include/xxh3.h ]] && cp /usr/include/xxh3.h "$dst/"
ver=$(awk '/#define XXH_VERSION_(MAJOR|MINOR|RELEASE)/ {v = v (v ? "." : "") $3} END {print v}' "$dst/xxhash.h")

# ------------------------------------------------------------ ONNX importer, safetensors
need /usr/include/protobuf-c/protobuf-c.h libprotobuf-c-dev
need /usr/bin/protoc-c protobuf-c-compiler
need /usr/include/onnx/onnx.proto libonnx-dev
need /usr/include/cjson/cJSON.h libcjson-dev

onnx=.deps/onnx
rm -rf "$onnx"
mkdir -p "$onnx/include/protobuf-c" "$onnx/include/cjson" "$onnx/lib" "$onnx/pb"
cp /usr/include/protobuf-c/protobuf-c.h "$onnx/include/protobuf-c/"
cp /usr/include/cjson/cJSON.h "$onnx/include/cjson/"

# The shared library under its SONAME (what the loader looks for) and under
# the plain name (what the linker looks for), as copies: a carried symlink
# could point out of the tree.
libdir=$(dirname "$(readlink -f /usr/lib/x86_64-linux-gnu/libprotobuf-c.so 2>/dev/null ||
    gcc -print-file-name=libprotobuf-c.so)")
for lib in protobuf-c cjson; do
    so=$(readlink -f "$libdir/lib$lib.so")
    [[ -f $so ]] || { echo "prepare-gpu-carry.sh: lib$lib.so not found in $libdir" >&2; exit 1; }
    soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    cp "$so" "$onnx/lib/$soname"
    cp "$so" "$onnx/lib/lib$lib.so"
    # Anything besides libc would have to travel too.
    extra=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -v '^libc\.so\.6$' || true)
    if [[ -n $extra ]]; then
        echo "prepare-gpu-carry.sh: lib$lib.so needs $extra besides libc: carry it too" >&2
        exit 1
    fi
done
# The newest glibc symbol version they use: the GPU machine's glibc must be at least that.
glibc=$(objdump -T "$onnx"/lib/lib*.so 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)

# protoc-c's output for onnx.proto: the GPU machine has neither protoc-c nor
# the schema. It is compiled against the protobuf-c.h copied above (the same
# package version that made it).
protoc-c -I/usr/include --c_out="$onnx/pb" /usr/include/onnx/onnx.proto
[[ -f $onnx/pb/onnx/onnx.pb-c.c && -f $onnx/pb/onnx/onnx.pb-c.h ]] ||
    { echo "prepare-gpu-carry.sh: protoc-c made no onnx/onnx.pb-c.[ch]" >&2; exit 1; }
pcver=$(protoc-c --version 2>&1 | head -1)

if ! git check-ignore -q .deps 2>/dev/null; then
    echo "prepare-gpu-carry.sh: warning: .deps is not git-ignored; it would travel as untracked files" >&2
fi
echo "prepare-gpu-carry.sh: .deps/ ready ($(du -sh .deps | cut -f1)): xxHash $ver; protobuf-c, cJSON" \
    "(need ${glibc:-no versioned glibc symbols}), onnx.pb-c ($pcver); device run with carry [\".deps\"]"

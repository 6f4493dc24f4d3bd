#!/usr/bin/env bash
# test_install.sh - fusec as a user installs and embeds it: `cmake --install`
# into a temporary prefix (the versioned shared library behind its SONAME,
# the static library, fusec.h, the CLI, the pkg-config files and the CMake
# package), then tests/install/consumer.c built against that prefix with
# pkg-config (shared and static) and with find_package(fusec), and once more
# with fusec's source tree as an add_subdirectory of a project; each runs
# on the CPU backend (the reference interpreter where the build has none).
#
# Run by ctest with BUILD (the build tree) and SRC set; by hand:
#   BUILD=build SRC=. bash tests/test_install.sh
set -u
BUILD=$(cd "${BUILD:?set BUILD to the build tree}" && pwd)
SRC=$(cd "${SRC:-.}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
failed=0
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}
# step NAME COMMAND...: run, its output in $tmp/NAME.log, shown on failure.
step() {
  local name=$1
  shift
  if ! "$@" >"$tmp/$name.log" 2>&1; then
    fail "$name: $*"
    sed 's/^/  /' "$tmp/$name.log" | tail -30 >&2
    return 1
  fi
}
cache_var() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
# A sanitizer build's library needs the sanitizers' runtimes in whatever
# links it: not what a user installs. The Release builds test this.
if [[ $(cache_var FUSEC_SANITIZE) == ON ]]; then
  echo "test_install: skipped in a sanitizer build"
  exit 0
fi
generator=$(cache_var CMAKE_GENERATOR)
launcher=$(cache_var CMAKE_C_COMPILER_LAUNCHER)
cc=$(cache_var CMAKE_C_COMPILER)
version=$(sed -n 's/^#define FUSEC_VERSION_STRING "\(.*\)"$/\1/p' "$SRC/include/fusec.h")
major=${version%%.*}
# The SONAME's version (cmake/install.cmake): major.minor for 0.x, major after.
abi=$major
if [[ $major == 0 ]]; then
  abi=${version%.*}
fi

# --- the installed files ---------------------------------------------------
step install cmake --install "$BUILD" --prefix "$prefix" || exit 1
libdir=$(ls -d "$prefix"/lib* | head -1)
for f in include/fusec.h bin/fusec; do
  [[ -f $prefix/$f ]] || fail "not installed: $f"
done
for f in libfusec.a "libfusec.so.$version" pkgconfig/fusec.pc pkgconfig/fusec-static.pc \
  cmake/fusec/fusecConfig.cmake cmake/fusec/fusecConfigVersion.cmake cmake/fusec/fusecTargets.cmake; do
  [[ -f $libdir/$f ]] || fail "not installed: ${libdir#"$prefix"/}/$f"
done
[[ $(readlink "$libdir/libfusec.so.$abi") == "libfusec.so.$version" ]] ||
  fail "libfusec.so.$abi does not point at libfusec.so.$version"
[[ $(readlink "$libdir/libfusec.so") == "libfusec.so.$abi" ]] || fail "libfusec.so does not point at libfusec.so.$abi"
soname=$(readelf -d "$libdir/libfusec.so.$version" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $soname == "libfusec.so.$abi" ]] || fail "SONAME is '$soname', not libfusec.so.$abi"
[[ $("$prefix/bin/fusec" --version) == "fusec $version" ]] || fail "installed fusec --version"
# The manual page: the same flags as --help (both come from one table).
man=$prefix/share/man/man1/fusec.1
if [[ -f $man ]]; then
  grep -q '^\.TH FUSEC 1 .*fusec '"$version" "$man" || fail "fusec.1: no .TH line for version $version"
  for f in $("$prefix/bin/fusec" --help | grep -oE '^  (-[a-z], )?--[a-z-]+' | grep -oE -- '--[a-z-]+'); do
    grep -qF -- "\fB${f//-/\\-}\fR" "$man" || fail "fusec.1 lacks $f"
  done
  if command -v man >/dev/null; then
    man -l "$man" 2>&1 >/dev/null | grep -q . && fail "man -l fusec.1 warns"
  fi
else
  fail "not installed: share/man/man1/fusec.1"
fi
"$prefix/bin/fusec" --devices >"$tmp/devices" 2>"$tmp/devices.err" || fail "installed fusec --devices"
grep -qx ref "$tmp/devices" || fail "installed fusec --devices does not list ref"
# A device it cannot use is named, with the reason, on stderr: cuda in a
# build without the toolkit ("not in this build"), or on a machine without
# a GPU.
if ! grep -qx cuda "$tmp/devices"; then
  grep -qE "^fusec: device cuda: (not in this build|in this build, but not usable on this machine)" \
    "$tmp/devices.err" || fail "--devices does not say why cuda is missing"
fi

# --- pkg-config ------------------------------------------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig
[[ $(pkg-config --modversion fusec) == "$version" ]] || fail "pkg-config --modversion fusec"
# The static library's dependencies are private: listed with --static only.
[[ $(pkg-config --libs fusec) == *-lfusec* ]] || fail "pkg-config --libs fusec lacks -lfusec"
[[ $(pkg-config --static --libs fusec | wc -w) -gt $(pkg-config --libs fusec | wc -w) ]] ||
  fail "pkg-config --static --libs fusec lists no private libraries"
# shellcheck disable=SC2046
if step pc_shared "$cc" "$SRC/tests/install/consumer.c" -o "$tmp/pc_shared" $(pkg-config --cflags --libs fusec) \
  -Wl,-rpath,"$libdir"; then
  step pc_shared_run "$tmp/pc_shared" && grep -q "consumer: ok" "$tmp/pc_shared_run.log" || fail "pc_shared output"
  readelf -d "$tmp/pc_shared" | grep -q "NEEDED.*libfusec.so.$abi" || fail "pc_shared does not need libfusec.so.$abi"
fi
# shellcheck disable=SC2046
if step pc_static "$cc" "$SRC/tests/install/consumer.c" -o "$tmp/pc_static" $(pkg-config --cflags --libs fusec-static); then
  step pc_static_run "$tmp/pc_static" && grep -q "consumer: ok" "$tmp/pc_static_run.log" || fail "pc_static output"
  readelf -d "$tmp/pc_static" | grep -q "NEEDED.*libfusec" && fail "pc_static needs a shared libfusec"
fi

# --- find_package(fusec) ---------------------------------------------------
if step cmake_configure cmake -S "$SRC/tests/install" -B "$tmp/cmake" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" && step cmake_build cmake --build "$tmp/cmake"; then
  for exe in consumer_shared consumer_static; do
    step "run_$exe" "$tmp/cmake/$exe" && grep -q "consumer: ok" "$tmp/run_$exe.log" || fail "$exe output"
  done
fi
# The package's version policy (SameMinorVersion while 0.x): a project
# that asks for an older minor version is refused.
if [[ $major == 0 ]]; then
  older="0.$((${abi#0.} - 1))"
  mkdir -p "$tmp/older"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(older LANGUAGES C)\nfind_package(fusec %s REQUIRED)\n' \
    "$older" >"$tmp/older/CMakeLists.txt"
  if cmake -S "$tmp/older" -B "$tmp/older/b" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/older.log" 2>&1; then
    fail "find_package(fusec $older) accepted version $version"
  fi
fi
# --- add_subdirectory ------------------------------------------------------
# The library again, from source, in another project's tree: without the
# LLVM and CUDA backends, to keep it quick (what add_subdirectory needs of
# the build files is the same).
if step subdir_configure cmake -S "$SRC/tests/install/subdir" -B "$tmp/subdir" -G "$generator" -DFUSEC_SOURCE="$SRC" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF -DFUSEC_WITH_CUDA=OFF \
  ${launcher:+-DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} &&
  step subdir_build cmake --build "$tmp/subdir" --target consumer; then
  step subdir_run "$tmp/subdir/consumer" && grep -q "consumer: ok ref" "$tmp/subdir_run.log" || fail "subdir output"
  [[ -e $tmp/subdir/fusec/embedded ]] || fail "add_subdirectory: fusec's generated files are not in its own binary dir"
fi

if ((failed)); then
  echo "test_install: $failed failure(s)" >&2
  exit 1
fi
echo "test_install: ok"

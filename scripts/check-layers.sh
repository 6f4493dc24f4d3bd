#!/usr/bin/env bash
# check-layers.sh - the include graph follows the pipeline: no stage includes
# a stage above it, and the CLI sees only the public header; the runtime
# reaches passes/ and codegen/ only from its compile drivers.
#
#   bash scripts/check-layers.sh [OBJDIR]   (ctest runs it as `layers`, with
#                                            the library's object folder)
#
# Each product folder is a stage; a file may include headers of its own stage
# and of the stages its row below names. A quoted include is resolved the way
# the compiler does (the including file's folder, then the tree's root, then
# ir/ and include/), so `#include "ir.h"` counts as ir/ and `"gemm.h"` as the
# folder it is in. Exit 1 with one line per offending include.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# stage: the stages it may include (besides itself). include/ is the public
# header, which every stage may include.
declare -A allowed=(
  [ir]=""
  [frontend]="ir"
  [cache]="ir"
  [passes]="ir"
  [lower]="ir passes"
  [codegen]="ir passes lower"
  [runtime]="ir cache lower codegen passes"
  [tools]=""
)
# Backends do not reach into one another: runtime/<backend>/ may include
# runtime/*.h (the shared interface) and its own folder only.
backends="cuda cpu ref"

# The runtime's compile drivers: the only runtime files that may include
# passes/ or codegen/ headers (docs/ARCHITECTURE.md, "Where compile ends and
# running begins"): compile_driver.h is what the CUDA drivers include;
# program_impl.h carries, for program_compile.c, the code generator's
# declarations, and the plan struct fc_program keeps for introspection; the
# CPU backend's executable is its plan (cpu_impl.h).
include_drivers=" runtime/cuda/compile_driver.h runtime/cuda/program_impl.h runtime/cpu/cpu_impl.h runtime/cpu/cpu_program.c "
# The objects that may call into passes/ and codegen/: the compile drivers
# (a static compile, a variant's compile, re-planning for introspection,
# the CPU backend's compile). Every other runtime object is the run path:
# with OBJDIR, nm must find in it no reference to a symbol that an object
# of passes/ or codegen/ defines. So a run, a dynamic variant's new shape
# included, calls no pass and no code generator.
call_drivers=" runtime/cuda/program_compile.c runtime/cuda/variant_compile.c runtime/cuda/program_plan.c runtime/cpu/cpu_program.c "

stage_of() { # path relative to the root -> its stage, or empty
  local top=${1%%/*}
  if [[ -n ${allowed[$top]+x} || $top == include ]]; then echo "$top"; fi
}

resolve() { # including file, included name -> path relative to the root
  local dir=${1%/*} name=$2
  for cand in "$dir/$name" "$name" "ir/$name" "include/$name"; do
    if [[ -f $cand ]]; then realpath --relative-to=. "$cand"; return 0; fi
  done
  return 0
}

bad=0
while IFS= read -r file; do
  from=$(stage_of "$file")
  [[ -n $from && $from != include ]] || continue
  while IFS= read -r name; do
    target=$(resolve "$file" "$name")
    [[ -n $target ]] || continue # a system or generated header
    to=$(stage_of "$target")
    [[ -n $to ]] || continue
    ok=0
    if [[ $to == include || $to == "$from" ]]; then ok=1; fi
    for s in ${allowed[$from]}; do [[ $to == "$s" ]] && ok=1; done
    # tools/ sees the public header and its own files only.
    if [[ $from == tools && $to != tools && $to != include ]]; then ok=0; fi
    # One runtime backend never includes another's headers.
    if ((ok)) && [[ $from == runtime && $to == runtime ]]; then
      fb=$(cut -d/ -f2 <<<"$file"); tb=$(cut -d/ -f2 <<<"$target")
      if [[ " $backends " == *" $fb "* && " $backends " == *" $tb "* && $fb != "$tb" ]]; then ok=0; fi
    fi
    # In the runtime, passes/ and codegen/ only from a compile driver.
    if ((ok)) && [[ $from == runtime && ($to == passes || $to == codegen) && $include_drivers != *" $file "* ]]; then
      echo "$file includes $target: only the runtime's compile drivers may include $to (scripts/check-layers.sh)" >&2
      bad=1
      continue
    fi
    if ((!ok)); then
      echo "$file includes $target: $from may not include $to" >&2
      bad=1
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$file")
done < <(git ls-files -co --exclude-standard -- '*.c' '*.h' | grep -vE '^(tests|bench|examples|build)')
if ((bad)); then
  echo "check-layers.sh: the include graph breaks the layering (docs/ARCHITECTURE.md)" >&2
  exit 1
fi

# The run path's calls, read off the objects (CMake keeps each source's
# object at OBJDIR/<its path>.o).
if (($# > 0)); then
  objdir=$1
  [[ -d $objdir/runtime ]] || { echo "check-layers.sh: no runtime objects under $objdir" >&2; exit 1; }
  declare -A upper=()
  while read -r sym; do upper[$sym]=1; done < <(
    find "$objdir/passes" "$objdir/codegen" -name '*.o' -exec nm --defined-only -g {} + 2>/dev/null |
      awk 'NF == 3 && $2 ~ /[TDBR]/ {print $3}')
  ((${#upper[@]} > 0)) || { echo "check-layers.sh: no symbols of passes/ or codegen/ under $objdir" >&2; exit 1; }
  nobj=0
  while IFS= read -r obj; do
    src=${obj#"$objdir"/}
    src=${src%.o}
    # An object whose source is gone (a build folder older than a move) is
    # not part of this build.
    [[ -f $src ]] || continue
    nobj=$((nobj + 1))
    [[ $call_drivers == *" $src "* ]] && continue
    while read -r sym; do
      if [[ -n ${upper[$sym]+x} ]]; then
        echo "$src calls $sym: only the runtime's compile drivers call passes/ and codegen/" >&2
        bad=1
      fi
    done < <(nm -u "$obj" | awk '{print $NF}')
  done < <(find "$objdir/runtime" -name '*.c.o' | sort)
  ((nobj > 0)) || { echo "check-layers.sh: no runtime objects under $objdir" >&2; exit 1; }
  if ((bad)); then
    echo "check-layers.sh: the run path reaches into passes/ or codegen/ (docs/ARCHITECTURE.md)" >&2
    exit 1
  fi
fi
echo "check-layers.sh: ok"

#!/usr/bin/env bash
# check-layers.sh - the include graph follows the pipeline: no stage includes
# a stage above it, and the CLI sees only the public header.
#
#   bash scripts/check-layers.sh        (ctest runs it as `layers`)
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
echo "check-layers.sh: ok"

#!/usr/bin/env bash
# check-switches.sh - fusec reads its environment through one table.
#
#   bash scripts/check-switches.sh        (ctest runs it as `switches`)
#
# Fails when product code calls getenv outside ir/switches.c, names a
# FUSEC_* variable the table (ir/switches.def) does not hold, when the table
# holds more than twelve, or when docs/CLI.md's environment table and the
# table disagree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
product=(ir frontend passes lower codegen runtime cache tools include)
bad=0
existing=()
for d in "${product[@]}"; do [[ -d $d ]] && existing+=("$d"); done

table=$(sed -nE 's/^FC_SWITCH\([A-Z_0-9]+, "(FUSEC_[A-Z_0-9]+)".*/\1/p' ir/switches.def | sort)
count=$(wc -l <<<"$table")
if ((count > 12)); then
  echo "ir/switches.def holds $count switches: at most 12" >&2
  bad=1
fi

while IFS= read -r hit; do
  echo "$hit: getenv outside ir/switches.c" >&2
  bad=1
done < <(grep -rnE '\bgetenv[[:space:]]*\(' "${existing[@]}" --include='*.c' --include='*.h' | grep -v '^ir/switches\.c:' || true)

# Build-time macros and header guards share the prefix; they are not read
# from the environment.
build_macros='^FUSEC_(HAVE_[A-Z_]+|NO_CBLAS|VERSION|VERSION_STRING|WERROR|SANITIZE|FUZZ|WITH_LLVM|WITH_CUDA|BUILD_TESTS|XXHASH_DIR|STAGES|SOURCES|EMBEDDED|[A-Z_]+_H|H)$'
while IFS= read -r name; do
  [[ $name =~ $build_macros ]] && continue
  # FUSEC_CUDA_INCLUDE_DIR is also the build's own define of the same path.
  if ! grep -qx "$name" <<<"$table"; then
    echo "$name is named in product code but is not in ir/switches.def:" \
      "$(grep -rlw "$name" "${existing[@]}" | head -3 | tr '\n' ' ')" >&2
    bad=1
  fi
done < <(grep -rhoE '\bFUSEC_[A-Z0-9_]+' "${existing[@]}" | sort -u)

docs=$(sed -nE 's/^\| `(FUSEC_[A-Z_0-9]+)` \|.*/\1/p' docs/CLI.md | sort -u)
if [[ $docs != "$table" ]]; then
  echo "docs/CLI.md's environment table and ir/switches.def differ:" >&2
  diff <(echo "$table") <(echo "$docs") | sed 's/^/  /' >&2 || true
  bad=1
fi
if ((bad)); then exit 1; fi
echo "check-switches.sh: ok ($count switches)"

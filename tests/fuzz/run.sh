#!/usr/bin/env bash
# run.sh BUILD_DIR [SECONDS [NAME...]]: run every fuzz harness (or the NAMEs) in BUILD_DIR for
# SECONDS (default $FUSEC_FUZZ_SECONDS, else 30) on a copy of its seed
# corpus (tests/fuzz/corpus/<name>), so that the tree is never written.
# Exit 1 if any harness finds a crash, a leak or a sanitizer report; its
# log's tail is printed and the input that did it is kept in $FUSEC_FUZZ_KEEP
# (default: the build dir's fuzz-crashes/).
set -u
dir=${1:?usage: run.sh BUILD_DIR [SECONDS]}
secs=${2:-${FUSEC_FUZZ_SECONDS:-30}}
src=$(cd "$(dirname "$0")" && pwd)
keep=${FUSEC_FUZZ_KEEP:-$dir/fuzz-crashes}
work=$(mktemp -d "${TMPDIR:-/tmp}/fusec-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
rc=0
names=("${@:3}")
((${#names[@]})) || names=(ir npy aot cache_entry)
for h in "${names[@]}"; do
  bin=$dir/fuzz_$h
  if [[ ! -x $bin ]]; then
    echo "FAIL: $bin is not built" >&2
    rc=1
    continue
  fi
  mkdir -p "$work/$h" "$keep"
  cp "$src/corpus/$h"/* "$work/$h"/
  if "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$keep/$h-" "$work/$h" >"$work/$h.log" 2>&1; then
    echo "fuzz_$h: ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$h.log" | grep -o '[0-9]*$') runs in ${secs} s"
  else
    echo "FAIL: fuzz_$h (inputs in $keep):" >&2
    tail -40 "$work/$h.log" >&2
    rc=1
  fi
done
exit $rc

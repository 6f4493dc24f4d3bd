# script_setup.sh - sourced by the ONNX shell tests: a temporary directory
# ($tmp, removed on exit), `bad` to record a failure in $fail, and a SKIP
# exit when fusec has no importer or python3 has no onnx.
set -u
FUSEC=${FUSEC:-build/fusec}
SRC=${SRC:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
printf 'junk' > "$tmp/bad.onnx"
if "$FUSEC" "$tmp/bad.onnx" --emit=ir 2>&1 | grep -q "without the ONNX importer"; then echo "SKIP: no ONNX importer"; exit 0; fi
if ! python3 -c 'import onnx, numpy' 2>/dev/null; then echo "SKIP: python3 has no onnx"; exit 0; fi

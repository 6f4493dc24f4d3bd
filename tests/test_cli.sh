#!/usr/bin/env bash
# test_cli.sh - the fusec command line: every exit code, --emit=ir text,
# --graph, --bind, .npy inputs and outputs (hand-made bytes and round trips),
# bf16 parameters fed float32 files, random inputs, --help and --version.
#
# Run by ctest with FUSEC (the CLI) and SRC (the source root) set; by hand:
#   FUSEC=build/fusec SRC=. bash tests/test_cli.sh
set -u
# Runs compare exact reference-interpreter output unless a test names a device.
export FUSEC_DEVICE=ref

FUSEC=${FUSEC:?set FUSEC to the fusec binary}
SRC=${SRC:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
rc=0

pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
  echo "  command: fusec ${last_args[*]}" >&2
  echo "  exit code: $rc" >&2
  sed 's/^/  stdout: /' "$tmp/out" | head -20 >&2
  sed 's/^/  stderr: /' "$tmp/err" | head -20 >&2
}

# run ARGS...: run fusec; stdout in $tmp/out, stderr in $tmp/err, code in $rc.
last_args=()
run() {
  last_args=("$@")
  "$FUSEC" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# expect_rc CODE WHAT ARGS...: run and check the exit code.
expect_rc() {
  local code=$1 what=$2
  shift 2
  run "$@"
  if [[ $rc -eq $code ]]; then pass; else fail "$what: expected exit code $code"; fi
}

# expect_usage WHAT MESSAGE ARGS...: exit 2, a message and the hint on stderr.
expect_usage() {
  local what=$1 msg=$2
  shift 2
  run "$@"
  if [[ $rc -eq 2 ]] && grep -qF -- "$msg" "$tmp/err" && grep -qxF "try 'fusec --help'" "$tmp/err" &&
    [[ $(wc -l <"$tmp/err") -eq 2 && ! -s $tmp/out ]]; then
    pass
  else
    fail "$what: expected exit code 2 and '$msg'"
  fi
}

# expect_stdout WHAT EXPECTED: stdout of the last run is exactly EXPECTED.
expect_stdout() {
  if [[ $(cat "$tmp/out") == "$2" ]]; then
    pass
  else
    fail "$1: stdout differs; expected:"
    printf '%s\n' "$2" | sed 's/^/  expected: /' >&2
  fi
}

# expect_stderr_has WHAT TEXT
expect_stderr_has() {
  if grep -qF -- "$2" "$tmp/err"; then pass; else fail "$1: stderr lacks '$2'"; fi
}

# same_file WHAT A B: byte-identical files.
same_file() {
  if cmp -s "$2" "$3"; then pass; else
    fail "$1: $2 and $3 differ"
    od -A d -c "$2" | head -12 >&2
    od -A d -c "$3" | head -12 >&2
  fi
}

# npy FILE DESCR SHAPE DATA: write a .npy file byte by byte, as numpy.save
# does (header padded with 1 to 64 spaces and '\n' to a multiple of 64).
# SHAPE is a Python tuple as numpy writes it; DATA is a printf format of
# \xHH escapes.
npy() {
  local file=$1 descr=$2 shape=$3 data=$4
  local dict="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
  local pad=$((64 - (10 + ${#dict} + 1) % 64))
  local hl=$((${#dict} + pad + 1))
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((hl & 255)))\\x$(printf %02x $((hl >> 8)))"
    printf '%s%*s\n' "$dict" "$pad" ''
    printf "$data"
  } >"$file"
}

# ----------------------------------------------------------------------
# Inputs.
# ----------------------------------------------------------------------
cat >"$tmp/small.ir" <<'EOF'
# Two graphs; the first is the default.
graph small(%a: f32[N, 4], %b: f32[4]) {
  %c = mul(%a, %b)
  %d = add(%c, 1.5)
  return %d
}

graph second(%x: i32[3]) {
  %y = neg(%x)
  return %y
}
EOF

cat >"$tmp/tools.ir" <<'EOF'
graph ident(%x: f32[N, 4]) {
  %y = mul(%x, 1)
  return %y
}
graph sum4(%x: f32[4]) {
  %s = reduce_sum(%x, axes=[0])
  return %s
}
graph bf(%x: bf16[4]) {
  %y = mul(%x, 2)
  return %y
}
graph half(%x: f16[4]) {
  %y = add(%x, %x)
  return %y
}
graph made() {
  %i = iota(shape=[4], axis=0, dtype=i32)
  %f = cast(%i, to=f32)
  return %f
}
graph two(%a: f32[N, 4], %b: f32[N, 4]) {
  %s = add(%a, %b)
  %d = sub(%a, %b)
  return %s, %d
}
graph kinds(%f: f64[3], %h: f16[3], %g: bf16[3], %i: i64[3], %j: i32[3], %k: i8[3], %m: bool[3]) {
  %a = add(%f, %h)
  %b = add(%g, %i)
  %c = add(%j, %k)
  %w = where(%m, %a, 0)
  return %w, %b, %c, %m
}
graph wide(%x: f32[9]) {
  %y = add(%x, 0)
  return %y
}
EOF

printf 'graph bad(%%x: f32[4]) {\n  %%y = nosuchop(%%x)\n  return %%y\n}\n' >"$tmp/syntax.ir"
cat >"$tmp/types.ir" <<'EOF'
graph mm(%a: f32[2, 3], %b: f32[4, 5]) {
  %c = matmul(%a, %b)
  return %c
}
EOF

# f32 [1.00390625, 2, 3, 4]: 1 + 2^-8 is halfway between two bf16 values.
npy "$tmp/f4.npy" '<f4' '(4,)' '\x00\x80\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40'
# f32 [1, 2, 3, 4] and [0, 1, 2, 3] and [2, 4, 6, 8]
npy "$tmp/one4.npy" '<f4' '(4,)' '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40'
npy "$tmp/iota4.npy" '<f4' '(4,)' '\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40'
npy "$tmp/even4.npy" '<f4' '(4,)' '\x00\x00\x00\x40\x00\x00\x80\x40\x00\x00\xc0\x40\x00\x00\x00\x41'
# f16 [1, 2, 3, 4]
npy "$tmp/h4.npy" '<f2' '(4,)' '\x00\x3c\x00\x40\x00\x42\x00\x44'
# f32 [[1, 2, 3, 4], [0, 1, 2, 3]] as a [2, 4] matrix
npy "$tmp/m24.npy" '<f4' '(2, 4)' \
  '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40'
# i32 [1, 2, 3, 4]
npy "$tmp/i4.npy" '<i4' '(4,)' '\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00'
# big-endian f32, Fortran order, truncated, garbage
npy "$tmp/be.npy" '>f4' '(4,)' '\x3f\x80\x00\x00\x40\x00\x00\x00\x40\x40\x00\x00\x40\x80\x00\x00'
head -c 140 "$tmp/one4.npy" >"$tmp/trunc.npy"
printf 'this is not a .npy file\n' >"$tmp/garbage.npy"

# ----------------------------------------------------------------------
# --help, --version, --devices (exit 0).
# ----------------------------------------------------------------------
expect_rc 0 "--version" --version
expect_stdout "--version" "fusec 0.1.0"

expect_rc 0 "--help" --help
for word in --graph --bind --emit=ir --run --device --inputs --seed --save-outputs --devices --help --version \
  "Exit codes" "FUSEC_DEVICE" splitmix64; do
  if grep -qF -- "$word" "$tmp/out"; then pass; else fail "--help does not mention '$word'"; fi
done
if [[ ! -s $tmp/err ]]; then pass; else fail "--help wrote to stderr"; fi
cp "$tmp/out" "$tmp/help1"
expect_rc 0 "-h" -h
same_file "-h is --help" "$tmp/out" "$tmp/help1"

expect_rc 0 "--devices" --devices
if head -1 "$tmp/out" | grep -qx ref; then pass; else fail "--devices does not list ref first"; fi

# ----------------------------------------------------------------------
# Usage errors (exit 2).
# ----------------------------------------------------------------------
expect_usage "no arguments" "missing input file"
expect_usage "unknown option" "unknown option '--bogus'" "$tmp/small.ir" --bogus
expect_usage "unknown option with value" "unknown option '--bogus'" "$tmp/small.ir" --bogus=3
expect_usage "two files" "more than one input file" "$tmp/small.ir" "$tmp/small.ir"
expect_usage "bind without =" "bad --bind 'N'" "$tmp/small.ir" --bind N --emit=ir
expect_usage "bind not a number" "bad --bind 'N=x'" "$tmp/small.ir" --bind N=x --emit=ir
expect_usage "bind negative" "bad --bind 'N=-1'" "$tmp/small.ir" --bind=N=-1 --emit=ir
expect_usage "bind bad name" "bad --bind '1N=2'" "$tmp/small.ir" --bind 1N=2 --emit=ir
expect_usage "bind empty entry" "bad --bind ''" "$tmp/small.ir" --bind N=2, --emit=ir
expect_usage "bind twice" "binds 'N' twice" "$tmp/small.ir" --bind N=2 --bind N=3 --emit=ir
expect_usage "bind missing value" "option '--bind' needs a value" "$tmp/small.ir" --bind
expect_usage "emit format" "unknown --emit format 'json'" "$tmp/small.ir" --emit=json
expect_usage "run with value" "option '--run' takes no value" "$tmp/small.ir" --run=yes
if ! "$FUSEC" --devices | grep -qx cuda; then
  # No GPU here: a CUDA run fails cleanly at run time (exit 3), never crashes.
  expect_rc 3 "device cuda without a GPU" "$tmp/small.ir" --run --device=cuda --bind N=4
  expect_stderr_has "device cuda without a GPU" "no CUDA"
  FUSEC_DEVICE=cuda expect_rc 3 "FUSEC_DEVICE=cuda without a GPU" "$tmp/small.ir" --run --bind N=4
fi
# --emit=plan works without a GPU; its last line is the contract.
expect_rc 0 "emit plan" "$tmp/small.ir" --bind N=4 --emit=plan
if [[ $(tail -n 1 "$tmp/out") == "total: 1 kernels, 0 library calls, 0 bytes of intermediates" ]]; then pass; else
  fail "emit plan: last line is '$(tail -n 1 "$tmp/out")'"; fi
expect_rc 0 "emit cuda" "$tmp/small.ir" --bind N=4 --emit=cuda
expect_stdout_has() { if grep -qF -- "$2" "$tmp/out"; then pass; else fail "$1: stdout lacks '$2'"; fi; }
expect_stdout_has "emit cuda" 'extern "C" __global__'
expect_rc 0 "emit ptx" "$tmp/small.ir" --bind N=4 --emit=ptx
expect_stdout_has "emit ptx" ".entry"
expect_rc 1 "emit plan unbound" "$tmp/small.ir" --emit=plan
expect_stderr_has "emit plan unbound" "symbol N is unbound"
# --check and --bench on the reference device: the contract lines.
expect_rc 0 "check and bench" "$tmp/small.ir" --run --device=ref --bind N=4 --check --bench 3
expect_stdout_has "check" "check out0: max_abs_err=0 max_rel_err=0 ok"
if [[ $(tail -n 1 "$tmp/out") =~ ^time:\ [0-9.]+\ ms\ median\ of\ 3$ ]]; then pass; else
  fail "bench: last line is '$(tail -n 1 "$tmp/out")'"; fi
expect_usage "check without --run" "--check needs --run" "$tmp/small.ir" --check
expect_usage "bench count" "bad --bench '0'" "$tmp/small.ir" --run --bench 0
expect_usage "device cpu" "device 'cpu' is not available in this build" "$tmp/small.ir" --run --device cpu
expect_usage "device unknown" "unknown device 'tpu'" "$tmp/small.ir" --run --device=tpu
expect_usage "seed not a number" "bad --seed 'abc'" "$tmp/small.ir" --run --seed abc
expect_usage "inputs without --run" "--inputs needs --run" "$tmp/small.ir" --inputs "$tmp/one4.npy"
expect_usage "save-outputs without --run" "--save-outputs needs --run" "$tmp/small.ir" --save-outputs "$tmp/x"
expect_usage "too many inputs" "2 input files given, but graph 'sum4' has 1 parameter" \
  "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/one4.npy,$tmp/one4.npy"
expect_usage "unbound symbol for random data" "dimension 'N' is unknown" "$tmp/small.ir" --run
expect_usage "graph name syntax" "bad --graph" "$tmp/small.ir" --graph 'a b' --emit=ir

# ----------------------------------------------------------------------
# Input errors (exit 1): diagnostics verbatim on stderr.
# ----------------------------------------------------------------------
expect_rc 1 "missing file" "$tmp/nope.ir" --emit=ir
expect_stderr_has "missing file" "cannot read '$tmp/nope.ir'"
expect_rc 1 "unknown op" "$tmp/syntax.ir" --emit=ir
expect_stderr_has "unknown op: located" "$tmp/syntax.ir:2:"
expect_stderr_has "unknown op: error" "error:"
if [[ ! -s $tmp/out ]]; then pass; else fail "unknown op: printed something on stdout"; fi
expect_rc 1 "matmul shapes" "$tmp/types.ir" --emit=ir
expect_stderr_has "matmul shapes: located" "$tmp/types.ir:2:"
expect_rc 1 "matmul shapes, --run" "$tmp/types.ir" --run
expect_rc 1 "no such graph" "$tmp/small.ir" --graph nosuch --emit=ir
expect_stderr_has "no such graph" "nosuch"
expect_rc 1 "input dtype" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/i4.npy"
expect_stderr_has "input dtype" "dtype i32 does not fit parameter %x of dtype f32"
expect_rc 1 "input rank" "$tmp/tools.ir" --graph ident --run --inputs "$tmp/one4.npy"
expect_stderr_has "input rank" "shape [4] does not fit parameter %x of type f32[N, 4]"
expect_rc 1 "input static dim" "$tmp/tools.ir" --graph wide --run --inputs "$tmp/one4.npy"
expect_rc 1 "input conflicting symbol" "$tmp/tools.ir" --graph two --run --bind N=3 --inputs "$tmp/m24.npy"
expect_rc 1 "bf16 from f16 file" "$tmp/tools.ir" --graph bf --run --inputs "$tmp/h4.npy"

# ----------------------------------------------------------------------
# Failures while running (exit 3).
# ----------------------------------------------------------------------
expect_rc 3 "missing .npy" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/nope.npy"
expect_stderr_has "missing .npy" "$tmp/nope.npy: cannot open"
expect_rc 3 "garbage .npy" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/garbage.npy"
expect_stderr_has "garbage .npy" "not a .npy file"
expect_rc 3 "truncated .npy" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/trunc.npy"
expect_stderr_has "truncated .npy" "truncated data"
expect_rc 3 "big-endian .npy" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/be.npy"
expect_stderr_has "big-endian .npy" "big-endian"
: >"$tmp/afile"
expect_rc 3 "save-outputs under a file" "$tmp/tools.ir" --graph made --run --save-outputs "$tmp/afile/sub"
expect_stderr_has "save-outputs under a file" "cannot create directory"

# ----------------------------------------------------------------------
# --emit=ir, --graph, --bind.
# ----------------------------------------------------------------------
expect_rc 0 "emit" "$tmp/small.ir" --emit=ir
expect_stdout "emit" "graph small(%a: f32[N, 4], %b: f32[4]) {
  %c = mul(%a, %b) : f32[N, 4]
  %d = add(%c, 1.5) : f32[N, 4]
  return %d
}"
cp "$tmp/out" "$tmp/printed.ir"
expect_rc 0 "emit of emitted text" "$tmp/printed.ir" --emit=ir
same_file "printing is stable" "$tmp/out" "$tmp/printed.ir"

expect_rc 0 "emit --graph second" "$tmp/small.ir" --graph second --emit ir
expect_stdout "emit --graph second" "graph second(%x: i32[3]) {
  %y = neg(%x) : i32[3]
  return %y
}"
expect_rc 0 "emit --bind" "$tmp/small.ir" --bind N=2 --emit=ir
expect_stdout "emit --bind" "graph small(%a: f32[2, 4], %b: f32[4]) {
  %c = mul(%a, %b) : f32[2, 4]
  %d = add(%c, 1.5) : f32[2, 4]
  return %d
}"
expect_rc 0 "no mode: verify only" "$tmp/small.ir"
if [[ ! -s $tmp/out && ! -s $tmp/err ]]; then pass; else fail "no mode: printed something"; fi
expect_rc 0 "-- before the file" --emit=ir -- "$tmp/small.ir"

# Every example parses and verifies, and prints stably.
for f in "$SRC"/examples/*.ir; do
  expect_rc 0 "example $(basename "$f")" "$f" --emit=ir
  cp "$tmp/out" "$tmp/ex.ir"
  expect_rc 0 "example $(basename "$f") re-emitted" "$tmp/ex.ir" --emit=ir
  same_file "example $(basename "$f") prints stably" "$tmp/out" "$tmp/ex.ir"
done

# ----------------------------------------------------------------------
# Running: output lines, .npy in and out.
# ----------------------------------------------------------------------
expect_rc 0 "run sum4" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/one4.npy"
expect_stdout "run sum4" "out0: f32[] checksum=10 first=[10]"

expect_rc 0 "run made" "$tmp/tools.ir" --graph made --run
expect_stdout "run made" "out0: f32[4] checksum=6 first=[0, 1, 2, 3]"
expect_rc 0 "save made" "$tmp/tools.ir" --graph made --run --save-outputs "$tmp/made/deeper"
if [[ ! -s $tmp/out ]]; then pass; else fail "--save-outputs also printed"; fi
same_file "saved .npy is what numpy writes" "$tmp/made/deeper/out0.npy" "$tmp/iota4.npy"

expect_rc 0 "run wide" "$tmp/tools.ir" --graph wide --run --seed 3
if grep -qE '^out0: f32\[9\] checksum=[-0-9.e+]+ first=\[([-0-9.e+]+, ){8}\.\.\.\]$' "$tmp/out"; then pass; else
  fail "wide: expected 8 values and '...'"
fi

# bf16 parameter from a float32 file: 1.00390625 rounds to 1 (nearest even).
expect_rc 0 "bf16 from f32" "$tmp/tools.ir" --graph bf --run --inputs "$tmp/f4.npy"
expect_stdout "bf16 from f32" "out0: bf16[4] checksum=20 first=[2, 4, 6, 8]"
expect_rc 0 "bf16 saved as f32" "$tmp/tools.ir" --graph bf --run --inputs "$tmp/f4.npy" --save-outputs "$tmp/bf"
same_file "bf16 output saved as float32" "$tmp/bf/out0.npy" "$tmp/even4.npy"

# f16 parameter from float16 and from float32 files.
expect_rc 0 "f16 from f16" "$tmp/tools.ir" --graph half --run --inputs "$tmp/h4.npy"
expect_stdout "f16 from f16" "out0: f16[4] checksum=20 first=[2, 4, 6, 8]"
expect_rc 0 "f16 from f32" "$tmp/tools.ir" --graph half --run --inputs "$tmp/one4.npy"
expect_stdout "f16 from f32" "out0: f16[4] checksum=20 first=[2, 4, 6, 8]"

# Two outputs; the symbol N of the random %b comes from a.npy's shape.
expect_rc 0 "two outputs" "$tmp/tools.ir" --graph two --run --inputs "$tmp/m24.npy," --seed 5
if [[ $(wc -l <"$tmp/out") -eq 2 ]] && grep -q '^out0: f32\[2, 4\] ' "$tmp/out" &&
  grep -q '^out1: f32\[2, 4\] ' "$tmp/out"; then pass; else fail "two outputs: expected out0 and out1, f32[2, 4]"; fi
expect_rc 0 "two outputs saved" "$tmp/tools.ir" --graph two --run --inputs "$tmp/m24.npy" --seed 5 \
  --save-outputs "$tmp/two"
if [[ -f $tmp/two/out0.npy && -f $tmp/two/out1.npy && ! -e $tmp/two/out2.npy ]]; then pass; else
  fail "two outputs saved: expected out0.npy and out1.npy"
fi

# Round trip: random outputs saved, fed back through an identity graph,
# saved again: byte-identical files and the same printed line.
expect_rc 0 "random run" "$tmp/small.ir" --bind N=3 --seed 42 --run
cp "$tmp/out" "$tmp/line1"
expect_rc 0 "random run saved" "$tmp/small.ir" --bind N=3 --seed 42 --run --save-outputs "$tmp/rt1"
expect_rc 0 "fed back" "$tmp/tools.ir" --graph ident --run --inputs "$tmp/rt1/out0.npy" --save-outputs "$tmp/rt2"
same_file "npy round trip" "$tmp/rt1/out0.npy" "$tmp/rt2/out0.npy"
expect_rc 0 "fed back, printed" "$tmp/tools.ir" --graph ident --run --inputs "$tmp/rt1/out0.npy"
same_file "same line after the round trip" "$tmp/out" "$tmp/line1"

# Random inputs: a seed gives the same data every time; another seed other data.
expect_rc 0 "seed again" "$tmp/small.ir" --bind N=3 --seed 42 --run
same_file "same seed, same output" "$tmp/out" "$tmp/line1"
expect_rc 0 "other seed" "$tmp/small.ir" --bind N=3 --seed 43 --run
if ! cmp -s "$tmp/out" "$tmp/line1"; then pass; else fail "another seed gave the same output"; fi
# An empty entry means random: the same as giving no file for it.
expect_rc 0 "empty entry" "$tmp/tools.ir" --graph two --run --inputs ",$tmp/m24.npy" --seed 9
cp "$tmp/out" "$tmp/line2"
expect_rc 0 "explicit N" "$tmp/tools.ir" --graph two --run --bind N=2 --inputs ",$tmp/m24.npy" --seed 9
same_file "N from a file or from --bind" "$tmp/out" "$tmp/line2"

# Random data for every dtype.
expect_rc 0 "random inputs of every dtype" "$tmp/tools.ir" --graph kinds --run --seed 1
if [[ $(wc -l <"$tmp/out") -eq 4 ]] && grep -q '^out3: bool\[3\] checksum=[0-3] first=\[[01], [01], [01]\]$' "$tmp/out"
then pass; else fail "kinds: expected 4 outputs, the last bools"; fi

# ----------------------------------------------------------------------
# The examples run (small sizes, random data) and so does the C example.
# ----------------------------------------------------------------------
for f in "$SRC"/examples/*.ir; do
  expect_rc 0 "run $(basename "$f")" "$f" --bind B=1,T=4,N=2 --run
  if grep -qE '^out0: [a-z0-9]+\[[0-9, ]*\] checksum=' "$tmp/out"; then pass; else
    fail "run $(basename "$f"): no output line"
  fi
done
for g in softmax_explicit layernorm_explicit; do
  expect_rc 0 "run $g" "$SRC/examples/${g%_explicit}.ir" --graph "$g" --bind B=1,T=4,N=2 --run
done
if [[ -n ${BUILD:-} && -x $BUILD/example_gpt2_mlp ]]; then
  "$BUILD/example_gpt2_mlp" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  last_args=("(example_gpt2_mlp)")
  if [[ $rc -eq 0 ]] && grep -qx 'gpt2_mlp: output f32\[4, 16\]' "$tmp/out"; then pass; else
    fail "example_gpt2_mlp"
  fi
fi

# ----------------------------------------------------------------------
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]

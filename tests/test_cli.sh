#!/usr/bin/env bash
# test_cli.sh - the fusec command line: every exit code, --emit=ir text,
# --graph, --bind, .npy inputs and outputs (hand-made bytes and round trips),
# bf16 parameters fed float32 files, random inputs, --help and --version;
# the cache commands (--cache-info, --verify, --cache-clear, --cache-dir, a
# refused directory), compiled program files (-o, --arch, loading one) and
# --time. None of it needs a GPU (the compiles need NVRTC).
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
# Every failure's message starts with "fusec:" or "FILE:LINE:COL:" (the
# first line on stderr; a located diagnostic's source line and caret, and
# the usage hint, follow it).
run() {
  last_args=("$@")
  "$FUSEC" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if ((rc != 0)) && [[ -s $tmp/err ]] && ! head -1 "$tmp/err" | grep -qE '^(fusec: |[^ :]+:[0-9]+:[0-9]+: )'; then
    fail "message without 'fusec:' or 'file:line:col:'"
  fi
}

# expect_rc CODE WHAT ARGS...: run and check the exit code.
expect_rc() {
  local code=$1 what=$2
  shift 2
  run "$@"
  if [[ $rc -eq $code ]]; then pass; else fail "$what: expected exit code $code"; fi
}

# expect_error CODE WHAT TEXT ARGS...: run, check the exit code, and that
# stderr has TEXT.
expect_error() {
  local code=$1 what=$2 text=$3
  shift 3
  expect_rc "$code" "$what" "$@"
  expect_stderr_has "$what" "$text"
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
expect_stdout "--version" "fusec $(sed -n 's/^#define FUSEC_VERSION_STRING "\(.*\)"$/\1/p' "$SRC/include/fusec.h")"

expect_rc 0 "--help" --help
for word in --graph --bind --emit=ir --run --device --inputs --seed --save-outputs --devices --help --version \
  "Exit codes" "FUSEC_DEVICE" splitmix64 --output --arch --time --cache-info --verify --cache-clear --cache-dir \
  FUSEC_CACHE_DIR FUSEC_CACHE --help-env --precision; do
  if grep -qF -- "$word" "$tmp/out"; then pass; else fail "--help does not mention '$word'"; fi
done
if [[ ! -s $tmp/err ]]; then pass; else fail "--help wrote to stderr"; fi
# --help fits a terminal: at most 80 lines of 80 columns, every flag of the
# table with its line of help; docs/CLI.md has a table row for each flag.
if [[ $(wc -l <"$tmp/out") -le 80 ]] && ! awk 'length > 80 { bad = 1 } END { exit !bad }' "$tmp/out"; then pass; else
  fail "--help is over 80 lines or 80 columns"
fi
if grep -q "(undocumented)" "$tmp/out"; then fail "--help: a flag without its help line"; else pass; fi
help_flags=$(grep -oE '^  (-[a-z], )?--[a-z-]+' "$tmp/out" | grep -oE -- '--[a-z-]+')
[[ $(wc -w <<<"$help_flags") -ge 25 ]] && pass || fail "--help lists $(wc -w <<<"$help_flags") flags"
for f in $help_flags; do
  if grep -qE '^\| `(-[a-z]( [A-Z]+)?`, `)?'"$f"'[ =`]' "$SRC/docs/CLI.md"; then pass; else
    fail "docs/CLI.md has no table row for $f"
  fi
done
# ...and no row of a flag the CLI lacks.
for f in $(grep -oE '^\| `(-[a-z]( [A-Z]+)?`, `)?--[a-z-]+' "$SRC/docs/CLI.md" | grep -oE -- '--[a-z-]+' | sort -u); do
  if grep -qxF -- "$f" <<<"$help_flags"; then pass; else fail "docs/CLI.md documents $f, which fusec --help lacks"; fi
done
expect_rc 0 "--help-man" --help-man
if grep -q '^\.TH FUSEC 1' "$tmp/out" && grep -qF '\fB\-\-dump\-after\fR' "$tmp/out"; then pass; else
  fail "--help-man: no page"
fi
run --help
cp "$tmp/out" "$tmp/help1"
# Small usage errors: an unknown --bind symbol, an unsupported --arch.
expect_usage "--bind of a symbol the graph lacks" "--bind b: graph 'small' has no symbol 'b' (its symbols: N)" \
  "$tmp/small.ir" --bind b=4 --emit=ir
expect_usage "--bind of a symbol the graph lacks, with a good one" "graph 'small' has no symbol 'T' (its symbols: N)" \
  "$tmp/small.ir" --bind N=4,T=8 --run
expect_usage "--arch older than sm_80" "unsupported --arch 'sm_75': fusec generates code for sm_80 and newer (sm_80," \
  "$tmp/small.ir" --bind N=4 --arch sm_75 --emit=ptx
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
# --numerics: the bf16 chain's kernel rounds nothing before its store in
# fast numerics (the default), and every value in eager numerics.
expect_rc 0 "numerics fast" "$SRC/bench/pointwise_bf16.ir" --emit=cuda --numerics=fast
if ! sed -n '/\/\/ group/,$p' "$tmp/out" | grep -qF 'fc_rnd_bf16('; then pass; else fail "numerics fast: a kernel rounds"; fi
expect_rc 0 "numerics eager" "$SRC/bench/pointwise_bf16.ir" --emit=cuda --numerics=eager
if sed -n '/\/\/ group/,$p' "$tmp/out" | grep -qF 'fc_rnd_bf16('; then pass; else fail "numerics eager: no rounding"; fi
expect_usage "bad numerics" "unknown --numerics 'exact' (supported: fast, eager)" "$tmp/small.ir" --numerics=exact
expect_error 1 "emit plan unbound" "symbol N is unbound" "$tmp/small.ir" --emit=plan
# --check and --bench on the reference device: the contract lines.
expect_rc 0 "check and bench" "$tmp/small.ir" --run --device=ref --bind N=4 --check --bench 3
expect_stdout_has "check" "check out0: max_abs_err=0 max_rel_err=0 ok"
if [[ $(tail -n 1 "$tmp/out") =~ ^time:\ [0-9.]+\ ms\ median\ of\ 3$ ]]; then pass; else
  fail "bench: last line is '$(tail -n 1 "$tmp/out")'"; fi
expect_usage "check without --run" "--check needs --run" "$tmp/small.ir" --check
expect_usage "bench count" "bad --bench '0'" "$tmp/small.ir" --run --bench 0
if "$FUSEC" --devices | grep -qx cpu; then
  # The LLVM CPU backend: the same output as the reference within tolerance.
  expect_rc 0 "device cpu" "$tmp/small.ir" --run --device cpu --bind N=4 --check
  expect_stdout_has "device cpu" "check out0: "
else
  expect_usage "device cpu" "device 'cpu' is not available in this build" "$tmp/small.ir" --run --device cpu
fi
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
expect_error 1 "missing file" "$tmp/nope.ir: error: cannot open" "$tmp/nope.ir" --emit=ir

# Input is read from regular files, or standard input as '-': a device or a
# FIFO with no writer is refused before anything is read (never a read
# until memory runs out, never a wait for a writer).
expect_error 1 "character device" "/dev/zero: error: it is a character device" /dev/zero --emit=ir
mkfifo "$tmp/fifo.ir"
expect_error 1 "fifo" "it is a FIFO" "$tmp/fifo.ir" --emit=ir
last_args=(- --emit=ir)
printf 'graph g(%%x: f32[2]) {\n  %%y = neg(%%x)\n  return %%y\n}\n' | "$FUSEC" - --emit=ir >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 0 ]] && grep -q 'neg(%x)' "$tmp/out"; then pass; else fail "standard input as -"; fi

# Zero-size dimensions: each graph of tests/zero/zero_size.ir with N bound
# to 0 and to 3 runs on the reference and, where built, on the CPU backend
# against it, and its CUDA source compiles with NVRTC (no zero-length
# arrays); on a GPU it also runs there against the reference.
for g in elementwise reduce_empty_axis reduce_empty_rows rows empty_rows_softmax views gemm_empty_k gemm_empty_m \
  gemm_empty_n attention_empty more_views; do
  for n in 0 3; do
    expect_rc 0 "zero-size $g N=$n ref" "$SRC"/tests/zero/zero_size.ir --graph "$g" --bind "N=$n" --run --device=ref
    if "$FUSEC" --devices | grep -qx cpu; then
      expect_rc 0 "zero-size $g N=$n cpu" "$SRC"/tests/zero/zero_size.ir --graph "$g" --bind "N=$n" --run --device=cpu --check
    fi
    expect_rc 0 "zero-size $g N=$n ptx" "$SRC"/tests/zero/zero_size.ir --graph "$g" --bind "N=$n" --emit=ptx
    if "$FUSEC" --devices | grep -qx cuda; then
      expect_rc 0 "zero-size $g N=$n cuda" "$SRC"/tests/zero/zero_size.ir --graph "$g" --bind "N=$n" --run --device=cuda --check
    fi
  done
done

# A max or min over an empty axis is an error on every device, as in
# PyTorch (a sum over one is 0): bound at parse time, or by an input file.
printf 'graph e(%%x: f32[N, 3]) {\n  %%y = reduce_max(%%x, axes=[0])\n  return %%y\n}\n' >"$tmp/emax.ir"
printf 'graph e(%%x: f32[N, 3]) {\n  %%y = reduce_min(%%x, axes=[-2])\n  return %%y\n}\n' >"$tmp/emin.ir"
npy "$tmp/e03.npy" '<f4' '(0, 3)' ''
for dev in ref cpu; do
  "$FUSEC" --devices 2>/dev/null | grep -qx "$dev" || continue
  expect_rc 1 "reduce_max over an empty axis on $dev" "$tmp/emax.ir" --bind N=0 --run --device=$dev
  expect_stderr_has "reduce_max over an empty axis on $dev" "emax.ir:2:8: error: reduce_max over axis 0, of size 0"
  expect_rc 1 "reduce_min over an empty axis from a file on $dev" "$tmp/emin.ir" --inputs "$tmp/e03.npy" --run --device=$dev
  expect_stderr_has "reduce_min over an empty axis from a file on $dev" "reduce_min over axis -2, of size 0"
done

# --help-env prints the switch table: every variable of ir/switches.def,
# and the value of one that is set.
FUSEC_LOG=graphs run --help-env
if [[ $rc -eq 0 ]]; then pass; else fail "--help-env: exit code"; fi
for name in $(sed -nE 's/^FC_SWITCH\([A-Z_0-9]+, "(FUSEC_[A-Z_0-9]+)".*/\1/p' ir/switches.def); do
  if grep -q "^  $name=" "$tmp/out"; then pass; else fail "--help-env lacks $name"; fi
done
if grep -q "FUSEC_LOG=.*set: 'graphs'" "$tmp/out"; then pass; else fail "--help-env: the value set"; fi
if grep -q 'XDG_CACHE_HOME' "$tmp/out"; then pass; else fail "--help-env: XDG_CACHE_HOME"; fi
expect_rc 1 "unknown op" "$tmp/syntax.ir" --emit=ir
expect_stderr_has "unknown op: located" "$tmp/syntax.ir:2:"
expect_stderr_has "unknown op: error" "error:"
if [[ ! -s $tmp/out ]]; then pass; else fail "unknown op: printed something on stdout"; fi
expect_rc 1 "matmul shapes" "$tmp/types.ir" --emit=ir
expect_stderr_has "matmul shapes: located" "$tmp/types.ir:2:"
expect_rc 1 "matmul shapes, --run" "$tmp/types.ir" --run
expect_error 1 "no such graph" "nosuch" "$tmp/small.ir" --graph nosuch --emit=ir
expect_error 1 "input dtype" "dtype i32 does not fit parameter %x of dtype f32" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/i4.npy"
expect_error 1 "input rank" "shape [4] does not fit parameter %x of type f32[N, 4]" "$tmp/tools.ir" --graph ident --run --inputs "$tmp/one4.npy"
expect_rc 1 "input static dim" "$tmp/tools.ir" --graph wide --run --inputs "$tmp/one4.npy"
expect_rc 1 "input conflicting symbol" "$tmp/tools.ir" --graph two --run --bind N=3 --inputs "$tmp/m24.npy"
expect_rc 1 "bf16 from f16 file" "$tmp/tools.ir" --graph bf --run --inputs "$tmp/h4.npy"

# ----------------------------------------------------------------------
# Failures while running (exit 3).
# ----------------------------------------------------------------------
expect_error 3 "missing .npy" "$tmp/nope.npy: cannot open" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/nope.npy"
expect_error 3 "garbage .npy" "not a .npy file" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/garbage.npy"
expect_error 3 "truncated .npy" "truncated data" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/trunc.npy"
expect_error 3 "big-endian .npy" "big-endian" "$tmp/tools.ir" --graph sum4 --run --inputs "$tmp/be.npy"
: >"$tmp/afile"
expect_error 3 "save-outputs under a file" "cannot create directory" "$tmp/tools.ir" --graph made --run --save-outputs "$tmp/afile/sub"

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
# binds_of FILE [GRAPH]: --bind for the symbols (B, T, N) that FILE's dims use
# (in GRAPH only, when given): binding one the graph lacks is an error.
binds_of() {
  local text b=""
  text=$(if [[ -n ${2:-} ]]; then sed -n "/^graph $2(/,/^}/p" "$1"; else cat "$1"; fi)
  for kv in B=1 T=4 N=2; do
    grep -qE "[[ ,]${kv%=*}[],]" <<<"$text" && b+="${b:+,}$kv"
  done
  echo "$b"
}
for f in "$SRC"/examples/*.ir; do
  expect_rc 0 "run $(basename "$f")" "$f" --bind "$(binds_of "$f" "$(sed -n 's/^graph \([a-z0-9_]*\)(.*/\1/p' "$f" | head -1)")" --run
  if grep -qE '^out0: [a-z0-9]+\[[0-9, ]*\] checksum=' "$tmp/out"; then pass; else
    fail "run $(basename "$f"): no output line"
  fi
done
for g in softmax_explicit layernorm_explicit; do
  expect_rc 0 "run $g" "$SRC/examples/${g%_explicit}.ir" --graph "$g" --bind "$(binds_of "$SRC/examples/${g%_explicit}.ir" "$g")" --run
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
# The cache: --cache-info, --verify, --cache-clear, --cache-dir, and a
# directory that others can write. Each check has a cache of its own.
# ----------------------------------------------------------------------
expect_stdout_line() { if grep -qxF -- "$2" "$tmp/out"; then pass; else fail "$1: stdout lacks the line '$2'"; fi; }
expect_stdout_match() { if grep -qE -- "$2" "$tmp/out"; then pass; else fail "$1: stdout matches no '$2'"; fi; }
pad() { printf '%-19s%s' "$1" "$2"; } # an info line: the label padded to 19 columns, then the value

c1=$tmp/cache1
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-info, empty" --cache-info
expect_stdout_line "cache-info, empty: directory" "$(pad 'cache directory:' "$c1")"
expect_stdout_line "cache-info, empty: mode" "$(pad 'mode:' rw)"
expect_stdout_match "cache-info, empty: format version" '^format version: +[0-9]+$'
expect_stdout_line "cache-info, empty: kernels" "$(pad 'kernels:' '0 entries, 0 bytes')"
expect_stdout_line "cache-info, empty: programs" "$(pad 'programs:' '0 entries, 0 bytes')"
expect_stdout_line "cache-info, empty: total" "$(pad 'total:' '0 bytes of 1.0 GiB (1073741824 bytes) (0.0%)')"
for c in hits misses compiles; do expect_stdout_line "cache-info, empty: $c" "$(pad "$c:" 0)"; done
expect_stdout_line "cache-info, empty: oldest" "$(pad 'oldest entry:' 'none (least recently used)')"
expect_stdout_line "cache-info, empty: newest" "$(pad 'newest entry:' 'none (most recently used)')"
if [[ ! -s $tmp/err ]]; then pass; else fail "cache-info, empty: wrote to stderr"; fi
FUSEC_CACHE_DIR=$c1 FUSEC_CACHE_MAX_BYTES=64M expect_rc 0 "cache-info, limit" --cache-info
expect_stdout_line "cache-info, limit" "$(pad 'total:' '0 bytes of 64.0 MiB (67108864 bytes) (0.0%)')"

# A cold compile: two misses (program, kernel), one compile, one entry per
# level; then a warm one: hits, and no new compile.
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cold compile" "$tmp/small.ir" --bind N=4 --emit=plan
cp "$tmp/out" "$tmp/plan_jit"
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-info after a compile" --cache-info
expect_stdout_match "cache-info: kernels" '^kernels: +1 entries, [0-9.]+ KiB \([0-9]+ bytes\)$'
expect_stdout_match "cache-info: programs" '^programs: +1 entries, [0-9.]+ KiB \([0-9]+ bytes\)$'
expect_stdout_match "cache-info: total" '^total: +[0-9.]+ KiB \([0-9]+ bytes\) of 1\.0 GiB \(1073741824 bytes\) \([0-9.]+%\)$'
expect_stdout_line "cache-info: hits" "$(pad 'hits:' 0)"
expect_stdout_line "cache-info: misses" "$(pad 'misses:' 2)"
expect_stdout_line "cache-info: compiles" "$(pad 'compiles:' 1)"
expect_stdout_match "cache-info: oldest" '^oldest entry: +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} .*\(least recently used\)$'
expect_stdout_match "cache-info: newest" '^newest entry: +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} .*\(most recently used\)$'
FUSEC_CACHE_DIR=$c1 expect_rc 0 "warm compile" "$tmp/small.ir" --bind N=4 --emit=plan
same_file "warm compile: same plan" "$tmp/out" "$tmp/plan_jit"
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-info after a warm compile" --cache-info
expect_stdout_match "cache-info: hits after a warm compile" '^hits: +[1-9][0-9]*$'
expect_stdout_line "cache-info: no new compile" "$(pad 'compiles:' 1)"

# --verify: nothing wrong, then one damaged entry (exit 1, listed).
FUSEC_CACHE_DIR=$c1 expect_rc 0 "verify" --cache-info --verify
expect_stdout_line "verify" "$(pad 'verify:' '2 entries checked, 0 bad')"
kernel_entry=$(ls "$c1"/v*/kernels/*.bin | head -n 1)
printf '\xff' | dd of="$kernel_entry" bs=1 seek=100 conv=notrunc 2>/dev/null
FUSEC_CACHE_DIR=$c1 expect_rc 1 "verify a damaged entry" --cache-info --verify
expect_stdout_line "verify a damaged entry" "$(pad 'verify:' '2 entries checked, 1 bad')"
expect_stdout_has "verify lists the entry" "$(pad 'bad entry:' "$kernel_entry: ")"
expect_stderr_has "verify says so" "--verify found 1 bad cache entry"
# The next compile rebuilds it (from the program level down, NVRTC again).
FUSEC_CACHE_DIR=$c1 expect_rc 0 "compile over a damaged entry" "$tmp/small.ir" --bind N=5 --emit=plan
FUSEC_CACHE_DIR=$c1 expect_rc 0 "compile over a damaged entry, again" "$tmp/small.ir" --bind N=4 --emit=cuda
FUSEC_CACHE_DIR=$c1 expect_rc 0 "verify after the rebuild" --cache-info --verify

# --cache-clear: the counts, only fusec's files, then an empty cache.
: >"$c1/notes.txt"
: >"$c1/v1/kernels/mine.bin.bak"
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-info before clear" --cache-info
entries=$(sed -nE 's/^(kernels|programs|other versions): +([0-9]+) entries.*/\2/p' "$tmp/out" | awk '{n += $1} END {print n}')
bytes=$(sed -n 's/^total: *\([0-9.]* [KMG]iB (\([0-9]*\) bytes)\|\([0-9]*\) bytes\).*/\2\3/p' "$tmp/out")
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-clear" --cache-clear
expect_stdout_match "cache-clear counts" "^cleared $c1: $entries entries removed, [0-9.]+ KiB \($bytes bytes\) freed$"
if [[ $entries -ge 3 && -f $c1/notes.txt && -f $c1/v1/kernels/mine.bin.bak ]] &&
  [[ -z $(ls "$c1"/v*/kernels/*.bin "$c1"/v*/programs/*.bin 2>/dev/null) ]]; then pass; else
  fail "cache-clear: expected $entries >= 3 entries gone and the foreign files kept"; fi
FUSEC_CACHE_DIR=$c1 expect_rc 0 "cache-info after clear" --cache-info
expect_stdout_line "cache-info after clear" "$(pad 'kernels:' '0 entries, 0 bytes')"
FUSEC_CACHE_DIR=$c1 expect_rc 0 "clear an empty cache" --cache-clear
expect_stdout "clear an empty cache" "cleared $c1: 0 entries removed, 0 bytes freed"
FUSEC_CACHE_DIR=$c1 expect_rc 0 "clear, then info" --cache-clear --cache-info
if [[ $(head -n 1 "$tmp/out") == "cleared $c1: 0 entries removed, 0 bytes freed" ]]; then pass; else
  fail "clear, then info: clear comes first"; fi
expect_stdout_line "clear, then info" "$(pad 'cache directory:' "$c1")"

# --cache-dir overrides FUSEC_CACHE_DIR, for compiles and for the commands.
c2=$tmp/cache2
FUSEC_CACHE_DIR=$c1 expect_rc 0 "--cache-dir compile" --cache-dir "$c2" "$tmp/small.ir" --bind N=4 --emit=plan
same_file "--cache-dir compile: same plan" "$tmp/out" "$tmp/plan_jit"
if [[ -n $(ls "$c2"/v*/kernels/*.bin 2>/dev/null) && -z $(ls "$c1"/v*/kernels/*.bin 2>/dev/null) ]]; then pass; else
  fail "--cache-dir: the entries are not in $c2 alone"; fi
FUSEC_CACHE_DIR=$c1 expect_rc 0 "--cache-dir info" --cache-info --cache-dir="$c2"
expect_stdout_line "--cache-dir info" "$(pad 'cache directory:' "$c2")"
expect_stdout_line "--cache-dir info: entries" "$(pad 'compiles:' 1)"
if [[ $(stat -c %a "$c2") == 700 ]]; then pass; else fail "--cache-dir: the directory is not 0700"; fi

# A directory others can write is refused with ONE warning; the compile
# (and the save) still work, and nothing is written there.
c3=$tmp/cache3
mkdir -p "$c3" && chmod 0777 "$c3"
FUSEC_CACHE_DIR=$c3 expect_rc 0 "unsafe cache: compile" "$tmp/small.ir" --bind N=4 --emit=plan -o "$tmp/unsafe.cubin"
same_file "unsafe cache: same plan" "$tmp/out" "$tmp/plan_jit"
if [[ $(grep -c 'warning' "$tmp/err") -eq 1 && $(wc -l <"$tmp/err") -eq 1 ]]; then pass; else
  fail "unsafe cache: expected exactly one warning line"; fi
expect_stderr_has "unsafe cache: the warning" "fusec: warning: cache directory $c3 is writable by others"
if [[ -z $(ls -A "$c3") ]]; then pass; else fail "unsafe cache: something was written to $c3"; fi
FUSEC_CACHE_DIR=$c3 expect_rc 0 "unsafe cache: info describes it" --cache-info
expect_stdout_match "unsafe cache: info" '^disk cache: +off \(.*writable by others.*\)$'
if [[ $(grep -c 'warning' "$tmp/err") -eq 1 ]]; then pass; else fail "unsafe cache: info gives one warning"; fi
FUSEC_CACHE_DIR=$c3 expect_rc 3 "unsafe cache: no clear" --cache-clear
expect_stderr_has "unsafe cache: no clear" "writable by others"

# Bad settings and misuse.
FUSEC_CACHE=bogus FUSEC_CACHE_DIR=$c1 expect_rc 2 "bad FUSEC_CACHE" --cache-info
expect_stderr_has "bad FUSEC_CACHE" "FUSEC_CACHE must be off, ro or rw"
FUSEC_CACHE=bogus FUSEC_CACHE_DIR=$c1 expect_rc 2 "bad FUSEC_CACHE, compile" "$tmp/small.ir" --bind N=4 --emit=plan
FUSEC_CACHE_MAX_BYTES=lots FUSEC_CACHE_DIR=$c1 expect_rc 2 "bad FUSEC_CACHE_MAX_BYTES" --cache-info
expect_stderr_has "bad FUSEC_CACHE_MAX_BYTES" "FUSEC_CACHE_MAX_BYTES"
FUSEC_CACHE=off FUSEC_CACHE_DIR=$c1 expect_rc 0 "FUSEC_CACHE=off" --cache-info
expect_stdout_line "FUSEC_CACHE=off" "$(pad 'mode:' off)"
expect_usage "cache-info with a file" "--cache-info takes no FILE" --cache-info "$tmp/small.ir"
expect_usage "cache-clear with --run" "--run does not apply to --cache-clear" --cache-clear --run
expect_usage "verify alone" "--verify needs --cache-info" --verify
expect_usage "empty cache-dir" "--cache-dir needs a directory" --cache-dir= --cache-info
FUSEC_CACHE_DIR= expect_rc 2 "empty FUSEC_CACHE_DIR" --cache-info
expect_stderr_has "empty FUSEC_CACHE_DIR" "FUSEC_CACHE_DIR is set but empty"
FUSEC_CACHE_DIR= expect_rc 2 "empty FUSEC_CACHE_DIR, compile" "$tmp/small.ir" --bind N=4 --emit=plan

# An entry others can write is never served: refused with one warning,
# reported by --verify, and rebuilt by the compile.
c5=$tmp/cache5
FUSEC_CACHE_DIR=$c5 expect_rc 0 "entry trust: cold" "$tmp/small.ir" --bind N=4 --emit=plan
prog_entry=$(ls "$c5"/v*/programs/*.bin | head -n 1)
chmod 0666 "$prog_entry"
FUSEC_CACHE_DIR=$c5 expect_rc 1 "entry trust: verify" --cache-info --verify
expect_stdout_has "entry trust: verify" "writable by its group or by others"
FUSEC_CACHE_DIR=$c5 expect_rc 0 "entry trust: compile" "$tmp/small.ir" --bind N=4 --emit=plan
same_file "entry trust: same plan" "$tmp/out" "$tmp/plan_jit"
if [[ $(grep -c 'warning' "$tmp/err") -eq 1 ]]; then pass; else fail "entry trust: expected one warning"; fi
expect_stderr_has "entry trust: the warning" "is writable by its group or by others; not used"
if [[ $(stat -c %a "$prog_entry") == 600 ]]; then pass; else fail "entry trust: the entry was not rebuilt 0600"; fi
FUSEC_CACHE_DIR=$c5 expect_rc 0 "entry trust: verify after" --cache-info --verify
# A symlinked stats file: not read, and --cache-info still works.
stats=$(ls -d "$c5"/v*/stats)
mv "$stats" "$tmp/stats.elsewhere" && ln -s "$tmp/stats.elsewhere" "$stats"
FUSEC_CACHE_DIR=$c5 expect_rc 0 "symlinked stats" --cache-info
expect_stdout_line "symlinked stats: not read" "$(pad 'hits:' 0)"

# --cache-clear on a read-only file system fails (exit 3), in a mount
# namespace of its own where that can be made (root, unshare).
if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
  c6=$tmp/cache6
  mkdir -p "$c6"
  FUSEC_CACHE_DIR=$c6 expect_rc 0 "read-only clear: fill" "$tmp/small.ir" --bind N=4 --emit=plan
  last_args=(--cache-clear "(on a read-only mount)")
  unshare -m bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && FUSEC_CACHE_DIR=$1 "$2" --cache-clear' \
    _ "$c6" "$FUSEC" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 3 ]] && grep -qF "cannot clear the cache" "$tmp/err" && grep -qF "Read-only file system" "$tmp/err"
  then pass; else fail "read-only clear: expected exit 3 and 'Read-only file system'"; fi
  if [[ -n $(ls "$c6"/v*/kernels/*.bin 2>/dev/null) ]]; then pass; else fail "read-only clear: entries vanished"; fi
else
  echo "skip: --cache-clear on a read-only mount (needs root and unshare -m)"
fi

# XDG_CACHE_HOME when FUSEC_CACHE_DIR is not set.
(unset FUSEC_CACHE_DIR; XDG_CACHE_HOME=$tmp/xdg expect_rc 0 "XDG_CACHE_HOME" --cache-info; \
  expect_stdout_line "XDG_CACHE_HOME" "$(pad 'cache directory:' "$tmp/xdg/fusec")"; \
  echo "$passed $failed" >"$tmp/counts")
read -r passed failed <"$tmp/counts"

# ----------------------------------------------------------------------
# Compiled program files: -o, --arch, and loading one.
# ----------------------------------------------------------------------
export FUSEC_CACHE_DIR=$tmp/cache4
expect_rc 0 "-o" "$tmp/small.ir" --bind N=4 -o "$tmp/small.cubin"
if [[ ! -s $tmp/out && -s $tmp/small.cubin && $(head -c 8 "$tmp/small.cubin") == FUSECAOT ]]
then pass; else fail "-o: expected a FUSECAOT file and nothing on stdout"; fi
expect_rc 0 "plan from the file" "$tmp/small.cubin" --emit=plan
same_file "plan from the file is the JIT plan" "$tmp/out" "$tmp/plan_jit"
expect_rc 0 "emit=ir from the file" "$tmp/small.cubin" --emit=ir
cp "$tmp/out" "$tmp/ir_aot"
expect_rc 0 "emit=ir with --bind" "$tmp/small.ir" --bind N=4 --emit=ir
same_file "the file carries the bound graph" "$tmp/out" "$tmp/ir_aot"
expect_rc 0 "emit=cuda from the file" "$tmp/small.cubin" --emit=cuda
cp "$tmp/out" "$tmp/cuda_aot"
expect_rc 0 "emit=cuda from the .ir" "$tmp/small.ir" --bind N=4 --emit=cuda
same_file "the file carries the source" "$tmp/out" "$tmp/cuda_aot"
expect_rc 0 "-o and --emit=plan together" "$tmp/small.ir" --bind=N=4 --emit=plan --output="$tmp/small2.cubin"
same_file "-o and --emit=plan together: plan" "$tmp/out" "$tmp/plan_jit"
expect_rc 0 "save a loaded program" "$tmp/small.cubin" -o "$tmp/small3.cubin"
same_file "save a loaded program: the same file" "$tmp/small.cubin" "$tmp/small3.cubin"
kname=$(sed -n 's/^launch 0: kernel \([^ ]*\) .*/\1/p' "$tmp/plan_jit")
if [ -n "$kname" ] && grep -qaF "$kname" "$tmp/small.cubin"; then pass
else rc=0; fail "-o: the file does not name kernel $kname"; fi
# -o runs no NVRTC of its own: a cache of its own counts the compiles (the
# kernels'); the file is written from their cubins, and a second -o in a new
# process compiles nothing.
ocache="$tmp/ocache"
FUSEC_CACHE_DIR="$ocache" "$FUSEC" "$tmp/small.ir" --bind N=4 -o "$tmp/w1.cubin" >/dev/null 2>&1
c1=$(FUSEC_CACHE_DIR="$ocache" "$FUSEC" --cache-info 2>/dev/null | sed -n 's/^compiles: *//p')
FUSEC_CACHE_DIR="$ocache" "$FUSEC" "$tmp/small.ir" --bind N=4 -o "$tmp/w2.cubin" >/dev/null 2>&1
c2=$(FUSEC_CACHE_DIR="$ocache" "$FUSEC" --cache-info 2>/dev/null | sed -n 's/^compiles: *//p')
if [ -n "$c1" ] && [ "$c1" -ge 1 ] && [ "$c2" = "$c1" ] && cmp -s "$tmp/w1.cubin" "$tmp/w2.cubin"
then pass; else rc=0; fail "-o with a warm cache: NVRTC ran again (compiles $c1, then $c2) or the files differ"; fi
expect_rc 0 "--arch" "$tmp/small.ir" --bind N=4 --arch sm_80 -o "$tmp/small80.cubin" --emit=ptx
expect_stdout_has "--arch reaches NVRTC" ".target sm_80"
expect_rc 0 "--arch 9.0" "$tmp/small.ir" --bind N=4 --arch 9.0 --emit=ptx
expect_stdout_has "--arch 9.0" ".target sm_90"
expect_error 1 "-o with an unbound dim" "symbol N is unbound" "$tmp/small.ir" -o "$tmp/unbound.cubin"
if [[ ! -e $tmp/unbound.cubin ]]; then pass; else fail "-o with an unbound dim wrote a file"; fi
expect_error 3 "-o into a missing directory" "cannot write" "$tmp/small.ir" --bind N=4 -o "$tmp/no/such/dir/x.cubin"
# -o writes only regular files: a rename would replace a device node, a
# FIFO or a socket with a regular file (as root, `-o /dev/null` would).
ofail() { # WHAT PATH MESSAGE: -o PATH is refused (exit 3) before anything is compiled, and PATH is left as it was
  local before after oc=$tmp/ofail-cache
  rm -rf "$oc"
  before=$(stat -c '%F %i %a' "$2" 2>/dev/null)
  FUSEC_CACHE_DIR=$oc expect_rc 3 "$1" "$tmp/small.ir" --bind N=4 -o "$2"
  expect_stderr_has "$1" "$3"
  if [[ -z $(find "$oc" -name '*.bin' 2>/dev/null) ]]; then pass; else fail "$1: a kernel was compiled before -o was refused"; fi
  after=$(stat -c '%F %i %a' "$2" 2>/dev/null)
  if [[ $before == "$after" ]]; then pass; else fail "$1: -o changed $2 ($before -> $after)"; fi
  if ! ls "$(dirname "$2")" | grep -q '\.tmp\.'; then pass; else fail "$1: a temporary file was left"; fi
}
od_dir=$tmp/odir
mkdir -p "$od_dir"
mkfifo "$od_dir/fifo"
ofail "-o onto a FIFO" "$od_dir/fifo" "it is a FIFO; fusec writes only regular files"
if python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$od_dir/sock" 2>/dev/null; then
  ofail "-o onto a socket" "$od_dir/sock" "it is a socket"
fi
if [[ $(id -u) -eq 0 ]] && mknod "$od_dir/null" c 1 3 2>/dev/null; then
  ofail "-o onto a character device" "$od_dir/null" "it is a character device"
  ln -s "$od_dir/null" "$od_dir/to_null"
  ofail "-o onto a symlink to a device" "$od_dir/to_null" "it is a symlink to $od_dir/null, a character device"
  if [[ -L $od_dir/to_null ]]; then pass; else fail "-o replaced the symlink to a device"; fi
else
  echo "skip: -o onto a character device (needs root and mknod)"
fi
ofail "-o onto a directory" "$od_dir" "it is a directory"
ln -s "$od_dir/nothing" "$od_dir/dangling"
ofail "-o onto a dangling symlink" "$od_dir/dangling" "dangling symlink"
if [[ -L $od_dir/dangling && ! -e $od_dir/nothing ]]; then pass; else fail "-o wrote through a dangling symlink"; fi
# A symlink to a regular file: the file is written, the link stays (cp's way).
echo old >"$od_dir/real.cubin"
ln -s real.cubin "$od_dir/link.cubin"
expect_rc 0 "-o through a symlink" "$tmp/small.ir" --bind N=4 -o "$od_dir/link.cubin"
if [[ -L $od_dir/link.cubin ]] && cmp -s "$od_dir/real.cubin" "$tmp/small.cubin"; then pass
else fail "-o through a symlink: expected the link kept and its target written"; fi
# An existing file keeps its permission bits.
echo old >"$od_dir/mode.cubin"
chmod 0640 "$od_dir/mode.cubin"
expect_rc 0 "-o over a 0640 file" "$tmp/small.ir" --bind N=4 -o "$od_dir/mode.cubin"
if [[ $(stat -c %a "$od_dir/mode.cubin") == 640 ]] && cmp -s "$od_dir/mode.cubin" "$tmp/small.cubin"; then pass
else fail "-o over a 0640 file: expected the new program, mode 640"; fi
# A file that could not be opened for writing is never replaced. Root can
# open any file, so root runs this case as nobody.
echo keep >"$od_dir/ro.cubin"
chmod 0444 "$od_dir/ro.cubin"
as_user=()
if [[ $(id -u) -eq 0 ]]; then
  chmod 0777 "$od_dir"
  chmod o+rx "$tmp"
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
# (Skipped when nobody cannot run fusec or read the graph: a build in a 0700 home.)
if [[ $(id -u) -ne 0 ]] || { command -v setpriv >/dev/null &&
  FUSEC_CACHE=off ${as_user[@]+"${as_user[@]}"} "$FUSEC" "$tmp/small.ir" --bind N=4 >/dev/null 2>&1; }; then
  last_args=(-o "$od_dir/ro.cubin")
  FUSEC_CACHE=off ${as_user[@]+"${as_user[@]}"} "$FUSEC" "$tmp/small.ir" --bind N=4 -o "$od_dir/ro.cubin" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc -eq 3 ]] && grep -qF "cannot write $od_dir/ro.cubin: Permission denied" "$tmp/err" &&
    [[ $(cat "$od_dir/ro.cubin") == keep ]]; then pass
  else fail "-o onto a read-only file: expected exit 3, 'Permission denied' and the file kept"; fi
else
  echo "skip: -o onto a read-only file (root, and nobody cannot run $FUSEC)"
fi
expect_usage "bad --arch" "bad --arch 'sm_x'" "$tmp/small.ir" --bind N=4 --arch sm_x -o "$tmp/x.cubin"
expect_usage "--arch without a compile" "--arch needs a compile" "$tmp/small.ir" --arch sm_90 --emit=ir
expect_usage "-o without a name" "--output needs a file name" "$tmp/small.ir" -o ""
expect_usage "--bind on a file" "--bind does not apply to a compiled program file" "$tmp/small.cubin" --bind N=4 --run
expect_usage "--graph on a file" "--graph does not apply to a compiled program file" "$tmp/small.cubin" \
  --graph small --emit=plan
expect_usage "--arch on a file" "--arch does not apply to a compiled program file" "$tmp/small.cubin" --arch 90 \
  --emit=plan
expect_usage "ref device on a file" "runs on the cuda device only" "$tmp/small.cubin" --run --device=ref
expect_usage "too many inputs for a file" "3 input files given, but graph 'small' has 2 parameters" \
  "$tmp/small.cubin" --run --inputs "$tmp/m24.npy,$tmp/one4.npy,$tmp/one4.npy"
if ! "$FUSEC" --devices | grep -qx cuda; then
  # No GPU: loading works, running fails cleanly (exit 3), after the inputs were checked.
  expect_rc 3 "run a file without a GPU" "$tmp/small.cubin" --run --check
  expect_stderr_has "run a file without a GPU" "no CUDA"
  expect_rc 1 "a file's input shapes are static" "$tmp/small.cubin" --run --inputs "$tmp/m24.npy"
  expect_stderr_has "a file's input shapes are static" "shape [2, 4] does not fit parameter %a of type f32[4, 4]"
fi
# -o --dynamic: a dynamic program, which runs at the shapes of its inputs.
expect_rc 0 "-o --dynamic" "$tmp/small.ir" --dynamic -o "$tmp/dyn.cubin"
if [[ $(head -c 8 "$tmp/dyn.cubin") == FUSECAOT ]]; then pass; else fail "-o --dynamic: no program file"; fi
expect_rc 0 "a dynamic file's graph" "$tmp/dyn.cubin" --emit=ir
expect_stdout_has "a dynamic file's graph" "graph small(%a: f32[N, 4], %b: f32[4])"
expect_rc 0 "save a loaded dynamic program" "$tmp/dyn.cubin" -o "$tmp/dyn2.cubin"
same_file "save a loaded dynamic program: the same file" "$tmp/dyn.cubin" "$tmp/dyn2.cubin"
expect_usage "--dynamic without -o" "--dynamic applies to -o of a graph" "$tmp/small.ir" --dynamic --emit=plan
expect_usage "--bind on a dynamic file without --run" "--bind does not apply to a compiled program file without --run" \
  "$tmp/dyn.cubin" --bind N=4 --emit=plan
expect_error 1 "a dynamic file: --bind and an input that disagree" "shape [2, 4] does not fit parameter %a of type f32[4, 4]" "$tmp/dyn.cubin" --run --bind N=4 --inputs "$tmp/m24.npy"
if "$FUSEC" --devices 2>/dev/null | grep -qx cuda; then
  expect_rc 0 "run a dynamic file at N=2" "$tmp/dyn.cubin" --run --inputs "$tmp/m24.npy"
  expect_rc 0 "run a dynamic file at N=7" "$tmp/dyn.cubin" --run --bind N=7
  expect_stdout_has "run a dynamic file at N=7" "[7, 4]"
else
  expect_rc 3 "run a dynamic file without a GPU" "$tmp/dyn.cubin" --run --inputs "$tmp/m24.npy"
fi
# An imported ONNX model's initializers go into the file, a loaded file is
# saved with them, and its --run uses them (where fusec has the importer and
# python3 has onnx).
if python3 -c 'import onnx' 2>/dev/null && python3 - "$tmp" <<'PY'
import sys, onnx
from onnx import helper, TensorProto
d = sys.argv[1]
W = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 0, 0, 1, 1, 1])
B = helper.make_tensor("B", TensorProto.FLOAT, [2], [10, 20])
g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                       helper.make_node("Add", ["h", "B"], ["y"], name="add")], "lin",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], initializer=[W, B])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d + "/lin.onnx")
PY
then
  if "$FUSEC" "$tmp/lin.onnx" --emit=ir >/dev/null 2>&1; then
    expect_rc 0 "-o of an ONNX model" "$tmp/lin.onnx" -o "$tmp/lin_onnx.cubin"
    if grep -qaF '"W":{"dtype":"F32","shape":[3,2]' "$tmp/lin_onnx.cubin"; then pass
    else fail "-o of an ONNX model: the file lacks its initializer W"; fi
    expect_rc 0 "an ONNX model's file: the plan" "$tmp/lin_onnx.cubin" --emit=plan
    expect_rc 0 "save a loaded program with weights" "$tmp/lin_onnx.cubin" -o "$tmp/lin_onnx2.cubin"
    same_file "a loaded program keeps its weights" "$tmp/lin_onnx.cubin" "$tmp/lin_onnx2.cubin"
    if "$FUSEC" --devices 2>/dev/null | grep -qx cuda; then
      python3 -c 'import numpy as np, sys; np.save(sys.argv[1], np.arange(1, 7, dtype=np.float32).reshape(2, 3))' \
        "$tmp/lin_x.npy"
      expect_rc 0 "run an ONNX model's file" "$tmp/lin_onnx.cubin" --run --inputs "$tmp/lin_x.npy"
      expect_stdout_has "run an ONNX model's file" "31"
    fi
  else
    echo "skip: -o of an ONNX model (no ONNX importer in this build)"
  fi
fi
# Damaged files: refused with the loader's message (exit 1), never parsed as .ir.
head -c 3000 "$tmp/small.cubin" >"$tmp/cut.cubin"
expect_error 1 "a cut file" "$tmp/cut.cubin: damaged compiled program" "$tmp/cut.cubin" --emit=plan
cp "$tmp/small.cubin" "$tmp/flipped.cubin"
size=$(stat -c %s "$tmp/flipped.cubin")
printf '\x5a' | dd of="$tmp/flipped.cubin" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
expect_error 1 "a changed file" "$tmp/flipped.cubin: damaged compiled program" "$tmp/flipped.cubin" --emit=plan
if [[ -x /bin/true ]] && head -c 4 /bin/true | grep -q ELF; then
  expect_rc 1 "an ELF that is no cubin" /bin/true --emit=plan
  expect_stderr_has "an ELF that is no cubin" "not a compiled fusec program"
fi

# ----------------------------------------------------------------------
# --time: where the compile time went, on stderr.
# ----------------------------------------------------------------------
expect_time() { # WHAT ORIGIN: the phases of fc_compile_times_text, and the origin
  local w
  for w in "time: " "parse " "passes " "codegen " "nvrtc " "cache " "device " "load " "$2"; do
    if grep -qF -- "$w" "$tmp/err"; then pass; else fail "$1: stderr lacks '$w'"; fi
  done
}
FUSEC_CACHE=off expect_rc 0 "--time cold" "$tmp/small.ir" --bind N=4 --emit=plan --time
same_file "--time cold: stdout is the plan alone" "$tmp/out" "$tmp/plan_jit"
expect_time "--time cold" "(compiled: passes, codegen and NVRTC ran)"
if grep -qE '^  parse +[0-9]+\.[0-9]{3} ms$' "$tmp/err" && grep -qE '^  nvrtc +[0-9]+\.[0-9]{3} ms$' "$tmp/err"; then
  pass; else fail "--time cold: expected parse and nvrtc lines in ms"; fi
expect_rc 0 "--time warm" "$tmp/small.ir" --bind N=4 --emit=plan --time
expect_rc 0 "--time warm, again" "$tmp/small.ir" --bind N=4 --emit=plan --time
expect_time "--time warm" "warm start: the whole program came from the cache"
expect_rc 0 "--time from a file" "$tmp/small.cubin" --emit=plan --time
expect_time "--time from a file" "loaded from a compiled program file"
expect_error 0 "--time with -o" "more to write $tmp/small4.cubin" "$tmp/small.ir" --bind N=4 -o "$tmp/small4.cubin" --time
expect_usage "--time without a compile" "--time needs a compile" "$tmp/small.ir" --bind N=4 --run --device=ref --time
unset FUSEC_CACHE_DIR

# ----------------------------------------------------------------------
# --precision: the autocast pass (docs/PRECISION.md).
# ----------------------------------------------------------------------
export FUSEC_CACHE_DIR=$tmp/cache5
cat >"$tmp/mm32.ir" <<'EOF'
graph mm32(%x: f32[8, 32], %w: f32[32, 16], %b: f32[16]) {
  %h = matmul(%x, %w)
  %y = add(%h, %b)
  return %y
}
EOF
expect_usage "--precision unknown" "unknown --precision 'fp8' (supported: f32, tf32, bf16, f16)" \
  "$tmp/mm32.ir" --precision=fp8 --emit=plan
expect_usage "--precision without a value" "option '--precision' needs a value" "$tmp/mm32.ir" --precision
expect_usage "--precision alone" "--precision needs a compile" "$tmp/mm32.ir" --precision=bf16
expect_usage "--precision on ref" "--precision does not apply to the ref device" \
  "$tmp/mm32.ir" --run --device=ref --precision=bf16
expect_rc 0 "--precision=bf16 plan" "$tmp/mm32.ir" --emit=plan --precision=bf16
expect_stdout_has "--precision=bf16 plan" "gemm[bias] -> f32"
cp "$tmp/out" "$tmp/plan_bf16"
expect_rc 0 "as written plan" "$tmp/mm32.ir" --emit=plan
if cmp -s "$tmp/out" "$tmp/plan_bf16"; then fail "--precision=bf16 changes nothing in the plan"; else pass; fi
expect_rc 0 "--precision=bf16 -o" "$tmp/mm32.ir" --precision=bf16 -o "$tmp/mm32.cubin"
expect_rc 0 "--precision=bf16 plan from the file" "$tmp/mm32.cubin" --emit=plan
same_file "the file keeps its precision" "$tmp/out" "$tmp/plan_bf16"
expect_usage "--precision with a compiled file" "--precision does not apply to a compiled program file" \
  "$tmp/mm32.cubin" --emit=plan --precision=bf16
if "$FUSEC" --devices | grep -qx cpu; then
  expect_rc 0 "--precision=bf16 on cpu" "$tmp/mm32.ir" --run --device=cpu --precision=bf16
  expect_stdout_has "--precision=bf16 on cpu: the declared dtype" "out0: f32[8, 16]"
  cp "$tmp/out" "$tmp/run_bf16"
  expect_rc 0 "as written on cpu" "$tmp/mm32.ir" --run --device=cpu
  if cmp -s "$tmp/out" "$tmp/run_bf16"; then fail "--precision=bf16 computes what f32 does"; else pass; fi
  cp "$tmp/out" "$tmp/run_f32"
  expect_rc 0 "--precision=tf32 on cpu is f32" "$tmp/mm32.ir" --run --device=cpu --precision=tf32
  same_file "--precision=tf32 on cpu is f32" "$tmp/out" "$tmp/run_f32"
fi
unset FUSEC_CACHE_DIR

# ----------------------------------------------------------------------
# A dynamic graph from the command line: --emit=plan (and --run with it)
# binds the symbols from the --inputs files' shapes; a symbol that no file
# gives is named.
# ----------------------------------------------------------------------
npy "$tmp/m34.npy" '<f4' '(3, 4)' "$(for i in {1..12}; do printf '\\x00\\x00\\x80\\x3f'; done)"
expect_rc 0 "dynamic plan, bound" "$tmp/small.ir" --bind N=3 --emit=plan
cp "$tmp/out" "$tmp/plan_n3"
expect_rc 0 "dynamic plan from --inputs" "$tmp/small.ir" --emit=plan --inputs "$tmp/m34.npy"
same_file "dynamic plan from --inputs: the plan of N=3" "$tmp/out" "$tmp/plan_n3"
expect_rc 0 "dynamic --run --emit=plan" "$tmp/small.ir" --run --emit=plan --device=ref --inputs "$tmp/m34.npy,$tmp/one4.npy"
expect_stdout_has "dynamic --run --emit=plan" "out0: f32[3, 4] checksum=48 first=[2.5, 3.5, 4.5, 5.5, 2.5"
expect_stdout_has "dynamic --run --emit=plan: the plan" "total: "
cat >"$tmp/two_syms.ir" <<'EOF'
graph two_syms(%a: f32[N, 4], %c: f32[M, 4]) {
  %s = reduce_sum(%a, axes=[0])
  %t = reduce_sum(%c, axes=[0])
  %u = add(%s, %t)
  return %u
}
EOF
expect_usage "dynamic plan, a symbol no file gives" \
  "symbol 'M' is unbound: dimension 0 of parameter %c (f32[M, 4]) has it" "$tmp/two_syms.ir" --emit=plan --inputs "$tmp/m34.npy"
expect_usage "dynamic --run --emit=plan, a symbol no file gives" "symbol 'M' is unbound" \
  "$tmp/two_syms.ir" --run --emit=plan --device=ref --inputs "$tmp/m34.npy"
expect_rc 0 "dynamic plan, --bind for the rest" "$tmp/two_syms.ir" --emit=plan --inputs "$tmp/m34.npy" --bind M=2
expect_rc 0 "dynamic --run, both from files" "$tmp/two_syms.ir" --run --emit=plan --device=ref \
  --inputs "$tmp/m34.npy,$tmp/m24.npy"
expect_stdout_has "dynamic --run, both from files" "out0: f32[4]"

# ----------------------------------------------------------------------
# Random inputs by role: a matmul's weight and bias in +-1/sqrt(K), a
# norm's scale near 1, data in [-1, 1).
# ----------------------------------------------------------------------
cat >"$tmp/roles.ir" <<'EOF'
graph roles(%x: f32[2, 64], %w: f32[64, 8], %b: f32[8], %g: f32[8]) {
  %h = matmul(%x, %w)
  %y = add(%h, %b)
  %n = rmsnorm(%y, %g)
  %wc = mul(%w, 1)
  %bc = mul(%b, 1)
  %gc = mul(%g, 1)
  %xc = mul(%x, 1)
  return %n, %wc, %bc, %gc, %xc
}
EOF
expect_rc 0 "random inputs by role" "$tmp/roles.ir" --run --save-outputs "$tmp/roles"
# in_range FILE LO HI: every f32 of a .npy file (header 128 bytes) is in [LO, HI].
in_range() {
  od -A n -t f4 -v -j 128 "$1" | tr -s ' ' '\n' | sed '/^$/d' |
    awk -v lo="$2" -v hi="$3" '{ if ($1 < lo || $1 > hi) bad++; if ($1 < lo + (hi - lo) / 4) low++;
      if ($1 > hi - (hi - lo) / 4) high++; n++ } END { exit !(n > 0 && !bad && low && high) }'
}
for spec in "out1 -0.125 0.125" "out2 -0.125 0.125" "out3 0.9 1.1" "out4 -1 1"; do
  read -r f lo hi <<<"$spec"
  if in_range "$tmp/roles/$f.npy" "$lo" "$hi"; then pass; else fail "random $f: not spread over [$lo, $hi]"; fi
done

# ----------------------------------------------------------------------
# --dump-after=PASS|all: the graph after a pass, as .ir text (golden).
# ----------------------------------------------------------------------
cat >"$tmp/dump.ir" <<'EOF'
graph dump(%x: f32[B, 4], %w: f32[4, 8], %b: f32[8]) {
  %h = matmul(%x, %w)
  %y = add(%h, %b)
  %r = relu(%y)
  return %r
}
EOF
expect_rc 0 "--dump-after=epilogue" "$tmp/dump.ir" --bind B=2 --dump-after=epilogue
expect_stdout "--dump-after=epilogue" "# after epilogue
graph dump(%x: f32[2, 4], %w: f32[4, 8], %b: f32[8]) {
  %r = gemm(%x, %w, %b, to=f32, spec=[0, 0, 1, 1, 0, 1]) : f32[2, 8]
  return %r
}"
expect_rc 0 "--dump-after=decompose" "$tmp/dump.ir" --bind B=2 --dump-after=decompose
expect_stdout "--dump-after=decompose" "# after decompose
graph dump(%x: f32[2, 4], %w: f32[4, 8], %b: f32[8]) {
  %h = matmul(%x, %w) : f32[2, 8]
  %y = add(%h, %b) : f32[2, 8]
  %r = relu(%y) : f32[2, 8]
  return %r
}"
# all: one dump per pass that ran, in order (canonicalize twice).
expect_rc 0 "--dump-after=all" "$tmp/dump.ir" --bind B=2 --dump-after=all
if [[ $(grep '^# after' "$tmp/out" | tr '\n' ' ') == "# after canonicalize # after recognize_views # after recognize_gelu \
# after recognize_norm # after fold_batch_norm # after lower_conv # after layout # after decompose # after autocast # after canonicalize # after attention # after residual # after epilogue \
# after pad # after concat_tree " ]]; then pass; else fail "--dump-after=all: the passes"; fi
# Eager numerics leaves the recognizers out, so the dump does too.
expect_rc 0 "--dump-after=all, eager" "$tmp/dump.ir" --bind B=2 --dump-after=all --numerics=eager
if grep -q '^# after recognize_gelu' "$tmp/out"; then fail "eager ran recognize_gelu"; else pass; fi
# A dump parses again as .ir.
"$FUSEC" "$tmp/dump.ir" --bind B=2 --dump-after=decompose >"$tmp/dumped.ir" 2>/dev/null
expect_rc 0 "--dump-after output reparses" "$tmp/dumped.ir" --emit=ir
expect_usage "--dump-after, no such pass" "no pass named 'fuse_all' ran (the passes that ran: canonicalize," \
  "$tmp/dump.ir" --bind B=2 --dump-after=fuse_all
expect_usage "--dump-after, not a name" "bad --dump-after '1x'" "$tmp/dump.ir" --dump-after=1x
# With --run it dumps, then runs.
expect_rc 0 "--dump-after with --run" "$tmp/dump.ir" --bind B=2 --dump-after=pad --run
expect_stdout_has "--dump-after with --run" "out0: f32[2, 8]"

# ----------------------------------------------------------------------
# --check on every shipped example, with the CLI's own random inputs, on
# the CPU backend and (with a GPU) on cuda: no cry of wolf.
# ----------------------------------------------------------------------
for dev in ref cpu cuda; do
  "$FUSEC" --devices 2>/dev/null | grep -qx "$dev" || continue
  for ex in "gpt2_block.ir B=1,T=8" "gpt2_block_bf16.ir B=1,T=8" "layernorm.ir B=2,T=8" "llama_block.ir B=1,T=8" \
    "mlp.ir B=4" "pointwise.ir N=16" "softmax.ir N=4"; do
    read -r file binds <<<"$ex"
    expect_rc 0 "--check $file on $dev" "$SRC/examples/$file" --bind "$binds" --run --check --device=$dev
    expect_stdout_has "--check $file on $dev" "check out0: "
  done
  # Under --precision the faithful computation is that of the precision
  # used (the autocast graph), not of the graph's own dtypes.
  [[ $dev == ref ]] && continue
  for p in bf16 f16; do
    expect_rc 0 "--check gpt2_block.ir --precision=$p on $dev" "$SRC/examples/gpt2_block.ir" --bind B=1,T=8 --run \
      --check --device=$dev --precision=$p
  done
done

# ----------------------------------------------------------------------
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]

#!/usr/bin/env bash
# gemm_sweep.sh - unaligned GEMM shapes against the next aligned shape, fusec
# and PyTorch in one run, on the GPU machine. It builds nothing:
#
#   bash bench/gemm_sweep.sh BUILD
#
# BUILD is a build folder holding gemm_sweep (bench/gemm_sweep.c, built with
# everything). For every shape y = x @ W of the sweep, it compiles and times
# in one process (one CUDA context: no process start or context per shape)
# the shape, the next aligned shape (N and K rounded up to multiples of 8,
# or 4 for f32) and, for the skinny kernels' rows (M <= 64, x @ W), the
# shape rounded to multiples of 64 (what the skinny kernel takes); then
# bench/gemm_sweep.py gives PyTorch eager's time of the shape and of its
# aligned shape and the copy bandwidth, and one Markdown table comes out
# with the fraction of the aligned shape's speed each reaches (the target:
# at least 85%).
#
# Shapes: N in SWEEP_NS, K in SWEEP_KS; at M in SWEEP_SMALL_MS (decode and
# batch 1) both forms, x @ W^T (tb: W [N, K], the tied LM head) and x @ W
# (nn: W [K, N], the skinny kernels' form); at M in SWEEP_MS the form
# SWEEP_FORM. With the defaults, 72 shapes (102 graphs for fusec, each
# compiled and run 20 times); fusec starts no shape after SWEEP_FUSEC_S,
# PyTorch none after SWEEP_TORCH_S, so the sweep ends within about 200 s
# (a shape cut off by its budget shows "-" and "(budget)").
#
# Knobs (environment):
#   SWEEP_NS       default "50257 32001 30522 49408 151936 128257"
#   SWEEP_SMALL_MS default "1 8"
#   SWEEP_MS       default "128 8192"
#   SWEEP_KS       default "768 767"
#   SWEEP_FORM     tb (default) or nn, for SWEEP_MS
#   SWEEP_SHAPES   default all: shell patterns of FORM,M,N,K, the shapes above
#                  that match one are run (SWEEP_SHAPES='nn,8,*': the x @ W rows
#                  at M = 8; 'nn,8,32001,767 nn,8,30522,767': those two)
#   SWEEP_DTYPE    bf16 (default), f16 or f32
#   SWEEP_TAIL     none (default: y is the graph's result), softmax (softmax(y) is:
#                  a kernel reads y, so a padded y is read in place) or f32 (cast to f32)
#   SWEEP_REPS     timed runs per shape (default 20)
#   SWEEP_FUSEC_S  fusec's time budget in seconds (default 120)
#   SWEEP_TORCH_S  PyTorch's (default 60)
#   SWEEP_TORCH    0 skips PyTorch
#   SWEEP_OUT      folder for the logs (default: a temporary one)
set -uo pipefail
BUILD=${1:?usage: bash bench/gemm_sweep.sh BUILD}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
SWEEP=$BUILD/gemm_sweep
[[ -x $SWEEP ]] || { echo "gemm_sweep: no $SWEEP (build the gemm_sweep target)" >&2; exit 2; }

NS=${SWEEP_NS:-"50257 32001 30522 49408 151936 128257"}
SMALL=${SWEEP_SMALL_MS:-"1 8"}
MS=${SWEEP_MS:-"128 8192"}
KS=${SWEEP_KS:-"768 767"}
FORM=${SWEEP_FORM:-tb}
DT=${SWEEP_DTYPE:-bf16}
TAIL=${SWEEP_TAIL:-none}
REPS=${SWEEP_REPS:-20}
FUSEC_S=${SWEEP_FUSEC_S:-120}
TORCH_S=${SWEEP_TORCH_S:-60}
OUT=${SWEEP_OUT:-$(mktemp -d /tmp/gemm_sweep.XXXXXX)}
mkdir -p "$OUT"
ALIGN=8
[[ $DT == f32 ]] && ALIGN=4
up() { echo $((($1 + $2 - 1) / $2 * $2)); }

# The shapes (form,M,N,K), small M first, and every shape fusec times:
# each one's aligned shape and, for the skinny rows, its 64-aligned one.
shapes=()
for M in $SMALL; do for f in tb nn; do for N in $NS; do for K in $KS; do shapes+=("$f,$M,$N,$K"); done; done; done; done
for M in $MS; do for N in $NS; do for K in $KS; do shapes+=("$FORM,$M,$N,$K"); done; done; done
if [[ -n ${SWEEP_SHAPES:-} ]]; then
    read -r -a pats <<<"$SWEEP_SHAPES" # read: no file names expanded from the patterns
    kept=()
    for s in "${shapes[@]}"; do for p in "${pats[@]}"; do [[ $s == $p ]] && { kept+=("$s"); break; }; done; done
    ((${#kept[@]})) || { echo "gemm_sweep: no shape matches SWEEP_SHAPES='$SWEEP_SHAPES'" >&2; exit 2; }
    shapes=("${kept[@]}")
fi
declare -A SEEN
timed=()
add() { [[ -n ${SEEN[$1]:-} ]] || { SEEN[$1]=1; timed+=("$1"); }; }
skinny_rows() { [[ $1 == nn ]] && (($2 <= 64)); }
for s in "${shapes[@]}"; do
    IFS=, read -r f M N K <<<"$s"
    add "$s"
    add "$f,$M,$(up "$N" $ALIGN),$(up "$K" $ALIGN)"
    skinny_rows "$f" "$M" && add "$f,$M,$(up "$N" 64),$(up "$K" 64)"
done

start=$SECONDS
declare -A MSV PLAN
timeout $((FUSEC_S + 60)) "$SWEEP" --reps "$REPS" --budget "$FUSEC_S" --dtype "$DT" --tail "$TAIL" "${timed[@]}" \
    >"$OUT/fusec.log" 2>"$OUT/fusec.err"
while read -r tag f M N K ms kern calls path; do
    [[ $tag == fusec ]] || continue
    MSV[$f,$M,$N,$K]=$ms
    PLAN[$f,$M,$N,$K]="$kern $calls $path"
done <"$OUT/fusec.log"
fusec_s=$((SECONDS - start))

declare -A TORCH
COPY="-"
if [[ ${SWEEP_TORCH:-1} != 0 ]]; then
    if timeout $((TORCH_S + 60)) python3 bench/gemm_sweep.py --dtype "$DT" --tail "$TAIL" --reps "$REPS" --budget "$TORCH_S" \
        "${shapes[@]}" >"$OUT/torch.log" 2>&1; then :; else echo "gemm_sweep: PyTorch failed (see $OUT/torch.log)" >&2; fi
    while read -r tag f M N K t ta; do
        [[ $tag == torch ]] && TORCH[$f,$M,$N,$K]="$t $ta"
        [[ $tag == copy_gbps ]] && COPY=$f
    done <"$OUT/torch.log"
fi

ratio() { # part whole -> percent of whole's speed that part reaches
    [[ $1 == - || $2 == - || -z $1 || -z $2 ]] && { echo "-"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f%%", 100 * b / a }'
}
x_of() { # a b -> a / b
    [[ $1 == - || $2 == - || -z $1 || -z $2 ]] && { echo "-"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
}
# What ran: the GEMM's path, and "padded (+k)" when the plan has k more
# kernels than the aligned shape's (a zero block, a pad copy, the slice).
plan_of() { # shape aligned-shape
    local k p ka
    read -r k _ p <<<"${PLAN[$1]:-- - ?}"
    read -r ka _ _ <<<"${PLAN[$2]:-- - ?}"
    [[ $p == budget ]] && { echo "(budget)"; return; }
    if [[ $k =~ ^[0-9]+$ && $ka =~ ^[0-9]+$ ]] && ((k > ka)); then echo "$p, padded (+$((k - ka)))"; else echo "$p"; fi
}

echo "# GEMM sweep: y = x @ W ($DT, tail $TAIL), fusec $(git rev-parse --short HEAD 2>/dev/null || echo '?'), copy ${COPY} GB/s, fusec ${fusec_s} s"
echo
echo "| form | M | N | K | fusec plan | fusec ms | aligned ms | of aligned | 64-aligned ms (plan) | torch ms | torch aligned ms | torch of aligned | torch / fusec |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
below=0
for s in "${shapes[@]}"; do
    IFS=, read -r f M N K <<<"$s"
    a="$f,$M,$(up "$N" $ALIGN),$(up "$K" $ALIGN)"
    t=${MSV[$s]:--} ta=${MSV[$a]:--}
    frac=$(ratio "$t" "$ta")
    if [[ $frac != - && ${frac%\%} -lt 85 ]]; then frac="**$frac**"; below=$((below + 1)); fi
    s64="-"
    if skinny_rows "$f" "$M"; then
        a64="$f,$M,$(up "$N" 64),$(up "$K" 64)"
        read -r _ _ p64 <<<"${PLAN[$a64]:-- - ?}"
        s64="${MSV[$a64]:--} ($p64)"
    fi
    read -r tt tta <<<"${TORCH[$s]:-- -}"
    echo "| $f | $M | $N | $K | $(plan_of "$s" "$a") | $t | $ta | $frac | $s64 | $tt | $tta | $(ratio "$tt" "$tta") | $(x_of "$tt" "$t") |"
done
echo
echo "of aligned: the aligned shape's time over this shape's (100% = as fast as the next aligned shape); bold: under 85%."
echo "64-aligned: x @ W at N and K rounded up to 64 (the skinny kernel's shapes), for M <= 64."
echo "$below shapes under 85%. Logs: $OUT (fusec.err has any failure)"

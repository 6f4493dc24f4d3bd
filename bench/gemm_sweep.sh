#!/usr/bin/env bash
# gemm_sweep.sh - unaligned GEMM shapes against the next aligned shape, fusec
# and PyTorch in one run, on the GPU machine. It builds nothing:
#
#   bash bench/gemm_sweep.sh BUILD [BASE_BUILD]
#
# BUILD is a build folder holding fusec (BUILD/fusec or BUILD/tools/fusec);
# BASE_BUILD, when given, is another (say main's, without the padding pass),
# timed on the same graphs for a "before" column. For every M, N and K of the
# sweep it writes y = x @ W as a .ir graph at that shape and at the next
# aligned shape (N and K rounded up to multiples of 8, or 4 for f32), runs
#
#   fusec X.ir --run --device=cuda --bench $REPS      (its "time: T ms median of R")
#
# for both, reads from `fusec X.ir --emit=plan` whether the pass padded the
# GEMM, asks bench/gemm_sweep.py for PyTorch eager's time of both shapes
# and the copy bandwidth, and prints one table (Markdown) with the fraction
# of the aligned shape's speed each reaches (the target: at least 85%).
#
# Knobs (environment):
#   SWEEP_NS     default "50257 32001 30522 49408 151936 128257"
#   SWEEP_MS     default "1 128 8192"
#   SWEEP_KS     default "768 767"
#   SWEEP_FORM   tb (W [N, K] used transposed: the tied LM head; default) or nn (W [K, N])
#   SWEEP_DTYPE  bf16 (default), f16 or f32
#   SWEEP_TAIL   none (default: y is the graph's result), softmax (softmax(y) is:
#                a kernel reads y, so a padded y is read in place) or f32 (cast to f32)
#   SWEEP_REPS   timed runs per shape (default 30)
#   SWEEP_TORCH  0 skips PyTorch
#   SWEEP_OUT    folder for the graphs and logs (default: a temporary one)
set -uo pipefail
BUILD=${1:?usage: bash bench/gemm_sweep.sh BUILD [BASE_BUILD]}
BASE=${2:-}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

fusec_in() {
    for f in "$1/fusec" "$1/tools/fusec"; do [[ -x $f ]] && { echo "$f"; return; }; done
    echo "gemm_sweep: no fusec in $1" >&2
    exit 2
}
FUSEC=$(fusec_in "$BUILD")
[[ -n $BASE ]] && BASE_FUSEC=$(fusec_in "$BASE")

NS=${SWEEP_NS:-"50257 32001 30522 49408 151936 128257"}
MS=${SWEEP_MS:-"1 128 8192"}
KS=${SWEEP_KS:-"768 767"}
FORM=${SWEEP_FORM:-tb}
DT=${SWEEP_DTYPE:-bf16}
REPS=${SWEEP_REPS:-30}
OUT=${SWEEP_OUT:-$(mktemp -d /tmp/gemm_sweep.XXXXXX)}
mkdir -p "$OUT"
ALIGN=8
[[ $DT == f32 ]] && ALIGN=4
up() { echo $((($1 + ALIGN - 1) / ALIGN * ALIGN)); }

TAIL=${SWEEP_TAIL:-none}

# The graph of one shape.
write_ir() { # file M N K
    local w="%w: $DT[$3, $4]" body="  %wt = permute(%w, perm=[1, 0])
  %y = matmul(%x, %wt)" ret=y
    if [[ $FORM == nn ]]; then
        w="%w: $DT[$4, $3]"
        body="  %y = matmul(%x, %w)"
    fi
    case $TAIL in
    softmax) body+=$'\n  %t = softmax(%y, axis=-1)' ret=t ;;
    f32) body+=$'\n  %t = cast(%y, to=f32)' ret=t ;;
    esac
    printf 'graph g(%%x: %s[%s, %s], %s) {\n%s\n  return %%%s\n}\n' "$DT" "$2" "$4" "$w" "$body" "$ret" >"$1"
}

# The median ms of one graph with one fusec ("-" when it fails), measured
# once per graph (an aligned shape is the next one of several).
declare -A TIMES
time_of() { # tag fusec file
    local log=$3.$1.log
    if [[ -z ${TIMES[$log]:-} ]]; then
        if "$2" "$3" --run --device=cuda --bench "$REPS" >"$log" 2>&1; then
            TIMES[$log]=$(sed -n 's/^time: \([0-9.]*\) ms.*/\1/p' "$log" | tail -1)
        fi
        [[ -n ${TIMES[$log]:-} ]] || TIMES[$log]="-"
    fi
    echo "${TIMES[$log]}"
}

# What the plan did: padded when it has more kernels than the aligned
# shape's (a zero block, a pad copy, the slice).
kernels_of() { "$FUSEC" "$1" --emit=plan 2>/dev/null | sed -n 's/^total: \([0-9]*\) kernels.*/\1/p'; }
plan_of() { # file aligned-file
    local k ka
    k=$(kernels_of "$1") ka=$(kernels_of "$2")
    if [[ -z $k || -z $ka ]]; then echo "?"
    elif ((k > ka)); then echo "padded (+$((k - ka)) kernels)"
    else echo as-is; fi
}

declare -A TORCH
COPY="-"
if [[ ${SWEEP_TORCH:-1} != 0 ]]; then
    shapes=()
    for M in $MS; do for N in $NS; do for K in $KS; do shapes+=("$M,$N,$K"); done; done; done
    if python3 bench/gemm_sweep.py --form "$FORM" --dtype "$DT" --tail "$TAIL" --reps "$REPS" "${shapes[@]}" >"$OUT/torch.log" 2>&1; then
        while read -r tag M N K t ta; do
            [[ $tag == torch ]] && TORCH[$M,$N,$K]="$t $ta"
            [[ $tag == copy_gbps ]] && COPY=$M
        done <"$OUT/torch.log"
    else
        echo "gemm_sweep: PyTorch failed (see $OUT/torch.log)" >&2
    fi
fi

ratio() { # part whole -> percent of whole's speed that part reaches
    [[ $1 == - || $2 == - || -z $1 || -z $2 ]] && { echo "-"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f%%", 100 * b / a }'
}
x_of() { # a b -> a / b
    [[ $1 == - || $2 == - || -z $1 || -z $2 ]] && { echo "-"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
}

echo "# GEMM sweep: y = x @ W ($FORM, $DT, tail $TAIL), fusec $(git rev-parse --short HEAD 2>/dev/null || echo '?'), copy ${COPY} GB/s"
echo
hdr="| M | N | K | plan | fusec ms | aligned ms | of aligned |"
sep="|---|---|---|---|---|---|---|"
[[ -n $BASE ]] && { hdr+=" before ms |"; sep+="---|"; }
hdr+=" torch ms | torch aligned ms | torch of aligned | torch / fusec |"
sep+="---|---|---|---|"
echo "$hdr"
echo "$sep"
below=0
for M in $MS; do
    for N in $NS; do
        for K in $KS; do
            Na=$(up "$N") Ka=$(up "$K")
            f=$OUT/g_${M}_${N}_${K}.ir fa=$OUT/g_${M}_${Na}_${Ka}.ir
            write_ir "$f" "$M" "$N" "$K"
            [[ -f $fa ]] || write_ir "$fa" "$M" "$Na" "$Ka"
            time_of new "$FUSEC" "$f" >/dev/null
            time_of new "$FUSEC" "$fa" >/dev/null
            t=${TIMES[$f.new.log]} ta=${TIMES[$fa.new.log]}
            frac=$(ratio "$t" "$ta")
            if [[ $frac != - && ${frac%\%} -lt 85 ]]; then frac="**$frac**"; below=$((below + 1)); fi
            row="| $M | $N | $K | $(plan_of "$f" "$fa") | $t | $ta | $frac |"
            [[ -n $BASE ]] && row+=" $(time_of base "$BASE_FUSEC" "$f") |"
            read -r tt tta <<<"${TORCH[$M,$N,$K]:-- -}"
            row+=" $tt | $tta | $(ratio "$tt" "$tta") | $(x_of "$tt" "$t") |"
            echo "$row"
        done
    done
done
echo
echo "of aligned: the aligned shape's time over this shape's (100% = as fast as the next aligned shape); bold: under 85%."
echo "$below shapes under 85%. Logs and graphs: $OUT"

#!/usr/bin/env bash
# test_conv.sh - the convolutional graphs of tests/conv/ (a ResNet block
# with its head, a MobileNetV3 block with depthwise convolutions and
# squeeze-and-excitation, every option of the conv family, pooling, pad and
# resize) run by fusec on the CPU backend, and on CUDA when this machine has
# a GPU, with --check against the reference interpreter. The reference's
# own semantics of these ops are checked against hand-computed values in
# test_conv_ref.c; this checks the lowering (passes/lower_conv.c,
# fold_batch_norm, layout) and both backends, in fast and eager numerics
# (CONV_NUMERICS=fast: fast only).
set -u
FUSEC=${FUSEC:-build/fusec}
SRC=${SRC:-.}
devices=()
for d in cpu cuda; do
  if "$FUSEC" --devices 2>/dev/null | grep -qx $d; then devices+=($d); fi
done
if ((${#devices[@]} == 0)); then echo "SKIP: neither the CPU backend nor a GPU"; exit 0; fi
fail=0
for f in "$SRC"/tests/conv/*.ir; do
  for dev in "${devices[@]}"; do
    for num in ${CONV_NUMERICS:-fast eager}; do
      out=$("$FUSEC" "$f" --run --device=$dev --numerics=$num --seed 7 --check 2>&1)
      rc=$?
      checked=$(grep -c '^check.* ok ' <<<"$out")
      if [[ $rc != 0 || $checked == 0 ]] || grep '^check' <<<"$out" | grep -vq ' ok '; then
        echo "FAIL: $f on $dev ($num numerics), exit $rc:"; echo "$out"; fail=1
      else
        echo "ok: $(basename "$f") on $dev ($num): $checked outputs"
      fi
    done
  done
done
exit $fail

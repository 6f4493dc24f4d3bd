#!/usr/bin/env bash
# test_onnx_real.sh - real torch.onnx.export (dynamo, opset 18) files of
# Hugging Face's GPT-2, BERT and a grouped-query Llama with RoPE, at the
# sizes where the exporter leaves their attention masks differently folded
# (tests/onnx/real_exports.py says how they are kept): at every size each
# layer's attention must plan as one flash-attention kernel (causal for
# GPT-2 and Llama, with the padding mask for BERT), the model's plan must
# have as many kernels and library calls at every size as at its smallest,
# and the outputs on the CPU backend (and CUDA where there is a GPU) must
# match ONNX Runtime's. fusec's
# own --check (its float64 reference interpreter) runs at the smallest
# sizes.
# Skips (exit 0 with SKIP) when fusec has no importer or python3 has no onnx.
#   FUSEC=build/fusec SRC=. bash tests/test_onnx_real.sh
source "${SRC:-.}/tests/onnx/script_setup.sh"
python3 "$SRC/tests/onnx/real_exports.py" unpack "$tmp" || { echo "FAIL: real_exports.py unpack"; exit 1; }

# GPT-2 small's exported attention at full size (a plan: no weights, no
# run): under bf16 the QKV GEMM writes bf16 and the wgmma attention reads Q,
# K and V in place, K by TMA as well (a K^T materialized by a copy kernel
# would be read through a strided permute, without TMA: 5x slower).
plan16=$("$FUSEC" "$SRC/tests/onnx/gpt2_export_attention.ir" --precision=bf16 --emit=plan 2>&1)
if grep -q "^total:" <<<"$plan16"; then
  grep -q "ops: attention: flash wgmma bf16, causal, 96 x 1024 x 1024 x 64, TMA q k v$" <<<"$plan16" ||
    bad "gpt2_export_attention.ir --precision=bf16: no wgmma attention reading q, k and v by TMA: $(grep attention <<<"$plan16")"
  total=$(grep "^total:" <<<"$plan16" | sed 's/, [0-9]* bytes.*//')
  [[ "$total" == "total: 4 kernels, 2 library calls" ]] || bad "gpt2_export_attention.ir --precision=bf16: $total, want 4 kernels (the input cast, the attention, two weight casts at load), 2 library calls"
fi
# Its LM head: the export's [K, N] weight, transposed at load, so that the
# unaligned f32 logits are written in place: no slice kernel compacts them.
plan16=$("$FUSEC" "$SRC/tests/onnx/gpt2_export_lm_head.ir" --precision=bf16 --emit=plan 2>&1)
if grep -q "^total:" <<<"$plan16"; then
  grep -q "ops: gemm\[trans_b\] -> f32$" <<<"$plan16" || bad "gpt2_export_lm_head.ir --precision=bf16: no gemm[trans_b] -> f32"
  ! grep -q "ops: pointwise: .*slice" <<<"$plan16" || bad "gpt2_export_lm_head.ir --precision=bf16: the logits are compacted by a copy"
  grep -q "pointwise: cast,permute (at weight load)$" <<<"$plan16" || bad "gpt2_export_lm_head.ir --precision=bf16: the weight is not transposed at load"
fi

for name in gpt2_dynamo_1x128 gpt2_dynamo_2x1000 gpt2_dynamo_8x1024 bert_dynamo_2x128 bert_dynamo_8x512 \
            llama_dynamo_2x128 llama_dynamo_4x1024; do
  model=${name%%_*}
  plan=$("$FUSEC" "$tmp/$name.onnx" --emit=plan 2>&1)
  if ! grep -q "^total:" <<<"$plan"; then
    # No plan: a build without a device to plan for (no NVRTC). The run below still checks.
    echo "note: no plan for $name: $(tail -1 <<<"$plan")"
  else
    case $model in
      bert) want="attention: flash rows f32, mask," ;;
      *) want="attention: flash rows f32, causal," ;;
    esac
    n=$(grep -c "ops: $want" <<<"$plan")
    [[ $n == 2 ]] || bad "$name: $n launches of '$want', want one per layer (2)"
    # As many launches as at the smallest size, but for BERT's mask kernel,
    # which the scheduler batches with a small kernel beside it at 2x128.
    total=$(grep "^total:" <<<"$plan" | sed 's/, [0-9]* bytes.*//')
    case $name in
      gpt2_*) want="total: 8 kernels, 9 library calls" ;;
      llama_*) want="total: 12 kernels, 9 library calls" ;;
      bert_dynamo_2x128) want="total: 15 kernels, 9 library calls" ;;
      bert_*) want="total: 16 kernels, 9 library calls" ;;
    esac
    [[ "$total" == "$want" ]] || bad "$name: $total, want $want"
    # Autocast to bf16 keeps one 16-bit flash attention per layer (BERT's
    # NaN guard of fully masked rows included).
    plan16=$("$FUSEC" "$tmp/$name.onnx" --precision=bf16 --emit=plan 2>&1)
    n=$(grep -c "ops: attention: flash .* bf16" <<<"$plan16")
    [[ $n == 2 ]] || bad "$name --precision=bf16: $n bf16 flash attentions, want 2: $(tail -1 <<<"$plan16")"
    # The export scales Q and K^T before the scores' matmul and splits one
    # QKV projection: under bf16 that GEMM writes bf16 and the attention
    # reads Q, K and V in place through views of it (the scales folded into
    # its own): no kernel copies, transposes or casts Q, K or V (Llama's
    # RoPE computes its Q and K, in a kernel; BERT's pooler casts the first
    # token's row, a slice,cast of its own).
    copies="ops: .*slice,reshape,permute"
    [[ $model == gpt2 ]] && copies="$copies\\|ops: pointwise: slice,cast$"
    if [[ $model != llama ]]; then
      n=$(grep -c "$copies" <<<"$plan16")
      [[ $n == 0 ]] || bad "$name --precision=bf16: $n kernels copy Q, K or V out of the QKV GEMM's result, want 0"
    fi
    # A norm whose f32 result is also a later residual stores the bf16
    # operand of the GEMM after it as well: no kernel only casts (BERT's
    # layernorms; the weights' casts at load are no run's kernels).
    n=$(grep -v "(at weight load)$" <<<"$plan16" | grep -c "ops: pointwise: cast$")
    [[ $n == 0 ]] || bad "$name --precision=bf16: $n kernels only cast, want 0: $(grep -v "(at weight load)$" <<<"$plan16" | grep "ops: pointwise: cast$" | cut -c1-60 | tr "\n" ";")"
    if [[ $model == bert ]]; then
      n=$(grep -c "ops: reduce: .*rsqrt,mul,add,cast$" <<<"$plan16")
      [[ $n == 4 ]] || bad "$name --precision=bf16: $n layernorm kernels storing the bf16 GEMM operand too, want 4 (the embeddings', each layer's first and the first layer's second: the last one feeds the pooler's slice)"
      total=$(grep "^total:" <<<"$plan16" | sed 's/, [0-9]* bytes.*//')
      case $name in
        bert_dynamo_2x128) want="total: 25 kernels, 9 library calls" ;;
        *) want="total: 26 kernels, 9 library calls" ;;
      esac
      [[ "$total" == "$want" ]] || bad "$name --precision=bf16: $total, want $want"
    fi
    if [[ $model == gpt2 ]]; then
      n=$(grep -c "ops: gemm -> bf16$" <<<"$plan16")
      [[ $n == 2 ]] || bad "$name --precision=bf16: $n QKV GEMMs writing bf16, want one per layer (2)"
      total=$(grep "^total:" <<<"$plan16" | sed 's/, [0-9]* bytes.*//')
      [[ "$total" == "total: 17 kernels, 9 library calls" ]] || bad "$name --precision=bf16: $total, want 17 kernels, 9 library calls"
    fi

    # The Q, K and V projections are one GEMM per layer: Llama's have no
    # bias; BERT's biases are one zero tensor the exporter shares (a full
    # here, whose copy runs at weight load, once: one such kernel).
    case $model in
      bert) want="gemm[x3,bias]"; nl=1 ;;
      llama) want="gemm[x3]"; nl=0 ;;
      *) want="" ;;
    esac
    if [[ -n $want ]]; then
      n=$(grep -cF "ops: $want ->" <<<"$plan")
      [[ $n == 2 ]] || bad "$name: $n launches of '$want', want one QKV GEMM per layer (2)"
      n=$(grep -c "(at weight load)$" <<<"$plan")
      [[ $n == "$nl" ]] || bad "$name: $n launches at weight load, want $nl"
    fi
  fi
  ins=$(ls "$tmp/${name}"_in*.npy | tr '\n' ',' | sed 's/,$//')
  for dev in cpu cuda; do
    "$FUSEC" --devices 2>/dev/null | grep -qx $dev || continue
    rm -rf "$tmp/out"
    check=()
    case $name in *_1x128|*_2x128) check=(--check) ;; esac
    out=$("$FUSEC" "$tmp/$name.onnx" --run --device=$dev --inputs "$ins" --save-outputs "$tmp/out" "${check[@]}" 2>&1)
    rc=$?
    [[ $rc == 0 ]] || { bad "$name on $dev: exit $rc: $(tail -3 <<<"$out")"; continue; }
    if [[ ${#check[@]} -gt 0 ]] && ! grep -q "^check .* ok" <<<"$out"; then bad "$name on $dev: --check: $(grep '^check' <<<"$out")"; fi
    [[ -f $tmp/${name}_ort0.npy ]] || { echo "note: onnxruntime not installed: $name's outputs are not compared"; continue; }
    python3 - "$tmp" "$name" $dev <<'PY' || bad "$name on $dev: outputs differ from onnxruntime's"
import glob, sys
import numpy as np
d, name, dev = sys.argv[1:]
ok = True
for i, r in enumerate(sorted(glob.glob("%s/%s_ort*.npy" % (d, name)))):
    a, b = np.load("%s/out/out%d.npy" % (d, i)), np.load(r)
    e = float(np.abs(a.astype(np.float64) - b).max()) if a.shape == b.shape else float("inf")
    print("%s output %d on %s vs onnxruntime: max error %.3g" % (name, i, dev, e))
    ok &= e < 1e-4
sys.exit(0 if ok else 1)
PY
  done
done
# BERT under bf16 on the CPU backend, its norms storing both dtypes: within
# the autocast tolerance of fusec's float64 reference (--check).
if "$FUSEC" --devices 2>/dev/null | grep -qx cpu; then
  out=$("$FUSEC" "$tmp/bert_dynamo_2x128.onnx" --precision=bf16 --run --device=cpu --check \
    --inputs "$tmp/bert_dynamo_2x128_in0.npy,$tmp/bert_dynamo_2x128_in1.npy" 2>&1)
  n=$(grep -c "^check .* ok" <<<"$out")
  [[ $n == 2 ]] || bad "bert_dynamo_2x128 --precision=bf16 on cpu: --check: $(grep '^check' <<<"$out" | tr '\n' ';')"
fi
[[ $fail -eq 0 ]] && echo "test_onnx_real: ok"
exit $fail

#!/usr/bin/env bash
# test_onnx_profile.sh - --profile of an imported ONNX model on the CPU
# backend names the model's nodes each launch runs (the source column: node
# names in the model's order, an unnamed node by its first output), in the
# table and the CSV, through a --bind specialization too; the
# source-op count is the number of nodes; a fused pattern (a GEMM and its
# epilogue, a real export's attention) names every node it took.
# Skips (exit 0 with SKIP) without the importer, onnx for python3, or the CPU backend.
#   FUSEC=build/fusec SRC=. bash tests/test_onnx_profile.sh
source "${SRC:-.}/tests/onnx/script_setup.sh"
if ! "$FUSEC" --devices 2>/dev/null | grep -qx cpu; then echo "SKIP: no CPU backend"; exit 0; fi
python3 - "$tmp/named.onnx" <<'PY' || { echo "FAIL: making the model"; exit 1; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as TP
rng = np.random.default_rng(1)
w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
b = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b")
nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj/MatMul"),
         helper.make_node("Add", ["h", "b"], ["hb"], name="proj/Add"),
         helper.make_node("Exp", ["hb"], ["e"], name="act/Exp"),
         helper.make_node("Mul", ["e", "hb"], ["m"]),  # unnamed: its output names it
         helper.make_node("ReduceSum", ["m"], ["y"], name="pool", keepdims=0, axes=[1])]
g = helper.make_graph(nodes, "named", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 64])],
                      [helper.make_tensor_value_info("y", TP.FLOAT, ["batch"])], [w, b])
onnx.save(helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 11)]), sys.argv[1])
PY
"$FUSEC" "$tmp/named.onnx" --bind batch=8 --device=cpu --profile --profile-runs=2 --profile-format=csv >"$tmp/csv" 2>"$tmp/err" ||
  bad "--profile: $(cat "$tmp/err")"
python3 - "$tmp/csv" <<'PY' || bad "csv: $(cat "$tmp/csv")"
import csv, sys
rows = {r["launch"]: r for r in csv.DictReader(open(sys.argv[1]))}
# the exp, the mul and the sum in one kernel: its three nodes in order
k = [r for r in rows.values() if r["kind"] == "kernel"]
assert len(k) == 1 and k[0]["source"] == "act/Exp,m,pool" and k[0]["source_ops"] == "3", k
# the GEMM with its bias: both nodes
g = [r for r in rows.values() if r["kind"] == "library"]
assert len(g) == 1 and g[0]["source"] == "proj/MatMul,proj/Add" and g[0]["source_ops"] == "2", g
PY
"$FUSEC" "$tmp/named.onnx" --bind batch=8 --device=cpu --profile --profile-runs=2 >"$tmp/table" 2>"$tmp/err" || bad "table: $(cat "$tmp/err")"
grep -q "act/Exp,m,pool" "$tmp/table" || bad "table: no node names: $(cat "$tmp/table")"
# A real export (tests/onnx/real): each layer's attention covers the nodes
# of torchlib's scaled_dot_product_attention, from K's transpose to the
# guard after the softmax and the product with V, and a GEMM its GELU.
python3 "$SRC/tests/onnx/real_exports.py" unpack "$tmp" gpt2_dynamo_1x128 || bad "real_exports.py unpack"
"$FUSEC" "$tmp/gpt2_dynamo_1x128.onnx" --device=cpu --profile --profile-runs=1 --profile-format=csv \
  --inputs "$tmp/gpt2_dynamo_1x128_in0.npy" >"$tmp/gpt2.csv" 2>"$tmp/err" || bad "gpt2 --profile: $(cat "$tmp/err")"
python3 - "$tmp/gpt2.csv" <<'PY' || bad "gpt2 csv: $(cat "$tmp/gpt2.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
att = sorted((r for r in rows if r["name"] == "attention"), key=lambda r: int(r["launch"]))
assert len(att) == 2, att
first = att[0]
assert int(first["source_ops"]) >= 12, first
# K^T through [-1, T, D] and q's scale come first; the rest is past the column's width
for name in ("node_Reshape_122", "node_Transpose_123", "node_Mul_127"):
    assert name in first["source"].split(","), (name, first)
assert first["source"].endswith(" more"), first
gelu = [r for r in rows if "gelu_tanh" in r["ops"]]
assert len(gelu) == 2 and all(r["source"].startswith("node_Gemm_") and "node_tanh" in r["source"] for r in gelu), gelu
PY
[[ $fail -eq 0 ]] && echo "test_onnx_profile: ok"
exit $fail

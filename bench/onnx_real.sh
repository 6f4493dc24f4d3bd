#!/usr/bin/env bash
# onnx_real.sh - real torch.onnx.export models (Hugging Face GPT-2, BERT-base,
# a small grouped-query Llama) through fusec on the GPU machine, against ONNX
# Runtime: builds fusec (bench/onnx-gpu-build.sh), then runs
# tests/test_onnx_real.sh (the kept small exports on cuda) and
# tests/onnx/export_real.py (its header says what it measures).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/onnx_real.sh
#
# Knobs (environment): ONNX_REAL_MODELS (gpt2,bert,llama), ONNX_REAL_EXPORTERS
# (dynamo,legacy), ONNX_REAL_SIZES (e.g. gpt2=1x128+8x1024), ONNX_REAL_REPS
# (20), ONNX_REAL_BUDGET_S (seconds for export_real.py; default what is left
# of 540 after the build), ONNX_REAL_PROFILE=1 (a fusec --profile table per
# cuda case), ONNX_NOBUILD=1. Back in $OUT: run.log,
# build.log, export_real.md (the table), export_real.json, the plans.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
source bench/onnx-gpu-build.sh
onnx_gpu_build fusec || exit 1
# The kept small exports (tests/onnx/real) on cuda first: their plans (one
# flash attention per layer at every size) and outputs against ONNX Runtime
# (about 30 s; ONNX_REAL_TEST=0 skips it).
if [[ ${ONNX_REAL_TEST:-1} != 0 ]]; then
  FUSEC="${ONNX_BUILD_DIR:-build}/fusec" SRC=. timeout 150 bash tests/test_onnx_real.sh 2>&1 | tee "$OUT/test_onnx_real.log" | tail -25
fi
budget=${ONNX_REAL_BUDGET_S:-$((540 - SECONDS))}
timeout --kill-after=10 $((budget + 45)) python3 tests/onnx/export_real.py --fusec "${ONNX_BUILD_DIR:-build}/fusec" \
    --models "${ONNX_REAL_MODELS:-gpt2,bert,llama}" --exporters "${ONNX_REAL_EXPORTERS:-dynamo,legacy}" \
    --sizes "${ONNX_REAL_SIZES:-}" ${ONNX_REAL_PROFILE:+--profile} --reps "${ONNX_REAL_REPS:-20}" --budget "$budget" --out "$OUT"
echo "   rc=$? in $SECONDS s"

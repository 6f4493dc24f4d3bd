#!/usr/bin/env bash
# test_whole_model_ir.sh - the whole-model graphs that bench/models/irgen.py
# writes (GPT-2, and Llama with grouped-query attention in both forms, f32
# and bf16), run by fusec with --weights (safetensors) and --inputs on the
# reference interpreter and the CPU backend, against a float64 NumPy forward
# pass (bench/models/numpy_check.py). Skips (exit 0 with SKIP) without
# python3 and NumPy, or when fusec has no --weights.
set -u
FUSEC=${FUSEC:-build/fusec}
SRC=${SRC:-.}
if ! python3 -c 'import numpy' 2>/dev/null; then echo "SKIP: no python3 with numpy"; exit 0; fi
python3 "$SRC/bench/models/numpy_check.py" --fusec "$FUSEC"
rc=$?
if [[ $rc == 77 ]]; then exit 0; fi
exit $rc

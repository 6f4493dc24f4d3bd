#!/usr/bin/env python3
# test_decode_spills.py - the decode step's attention and GEMV kernels fit
# their registers. fusec's PTX for one layer of the Llama-1B shape and of
# GPT-2 at batches 1, 4 and 8 (bench/models/decode_irgen.py) goes through
# the toolkit's ptxas for sm_90a, and every cache_attention and GEMV kernel
# may spill at most SPILL_MAX bytes. Spilling a tile's registers (the new
# key/value rows built element by element: 828 bytes at B = 1) halves such a
# kernel's speed on the H200 while its results stay right, so only this
# test sees it.
# Skips (exit 0) where ptxas is not installed. Usage:
# python3 tests/test_decode_spills.py [BUILD/fusec [PTXAS]]
import os, re, shutil, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
FUSEC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', 'build', 'fusec'))
IRGEN = os.path.join(HERE, '..', 'bench', 'models', 'decode_irgen.py')
# ptxas keeps a few bytes of stack for the merge's unrolled arrays at 128
# registers a thread (12 to 16 bytes); a tile's worth is hundreds.
SPILL_MAX = 32
MODELS = {
    'llama': ['--arch', 'llama', '--layers', '1', '--embd', '2048', '--heads', '32', '--kv-heads', '8', '--mlp', '8192',
              '--vocab', '1024', '--ctx', '2048', '--tied', '--dtype', 'bf16'],
    'gpt2': ['--arch', 'gpt2', '--layers', '1', '--embd', '768', '--heads', '12', '--vocab', '1024', '--ctx', '1024',
             '--dtype', 'bf16'],
}

ptxas = sys.argv[2] if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else shutil.which('ptxas')
if not ptxas:
    print('test_decode_spills: skipped (no ptxas)')
    sys.exit(0)
work = tempfile.mkdtemp(prefix='fc_spills_')
fails = checked = 0
for model, args in MODELS.items():
    ir = os.path.join(work, model + '.ir')
    with open(ir, 'w') as f:
        subprocess.run([sys.executable, IRGEN] + args, stdout=f, check=True)
    for B in (1, 4, 8):
        ptx = os.path.join(work, f'{model}{B}.ptx')
        with open(ptx, 'w') as f:
            r = subprocess.run([FUSEC, ir, '--bind', f'B={B},T=1', '--emit=ptx'], stdout=f, stderr=subprocess.PIPE, text=True)
        if r.returncode:
            print(f'{model} B={B}: fusec --emit=ptx failed: {r.stderr.strip()}')
            fails += 1
            continue
        # The PTX names its target (sm_90a where the attention needs it).
        target = re.search(r'^\.target (\S+)', open(ptx).read(), re.M).group(1)
        r = subprocess.run([ptxas, f'-arch={target}', '-v', ptx, '-o', os.devnull], capture_output=True, text=True)
        if r.returncode:
            print(f'{model} B={B}: ptxas failed: {r.stderr.strip()[:400]}')
            fails += 1
            continue
        name = None
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                name = m.group(1)
            m = re.search(r'(\d+) bytes spill stores', line)
            if m and name and ('cache_attention' in name or 'gemv' in name):
                checked += 1
                if int(m.group(1)) > SPILL_MAX:
                    print(f'{model} B={B}: {name} spills {m.group(1)} bytes (at most {SPILL_MAX})')
                    fails += 1
shutil.rmtree(work, ignore_errors=True)
if not checked:
    print('test_decode_spills: no cache_attention or GEMV kernel found')
    fails += 1
print(f'test_decode_spills: {checked} kernels checked,', 'FAIL' if fails else 'ok')
sys.exit(1 if fails else 0)

#!/usr/bin/env python3
"""whole_model.py - whole Hugging Face models through fusec, beside PyTorch.

    python3 bench/whole_model.py [--fusec build/fusec] [--device cuda|cpu|ref]
        [--models gpt2,llama] [--modes default,reduce-overhead,max-autotune]
        [--rows bf16,precision,onnx,compile] [--reps N] [--budget S]
        [--work DIR] [--out DIR] [--gqa broadcast|expand] [--tiny]

On the GPU machine (bench/run-whole.sh runs it after building fusec), for
GPT2LMHeadModel 124M at B=1,T=128 and B=8,T=1024 and a Llama-style model of
a 1B-class shape at B=1,T=512 and B=4,T=2048 (bench/models/hf.py has the
configs; each model is Hugging Face's own, with its own random init):

  - the model as one .ir graph (bench/models/irgen.py) in bf16 and in f32,
    its weights as one safetensors file of each dtype, named as the graph's
    parameters (the state_dict names);
  - the reference: the f32 model's logits (TF32 off);
  - HF eager in bf16 (a bf16 copy whose rotary inv_freq stays f32, as
    from_pretrained(dtype=bfloat16) leaves it): time, and its logits'
    relative L2 error against the reference;
  - torch.compile of the bf16 model, dynamic=False, per mode of --modes
    (reduce-overhead at B=1 only): time and compile time (the first call);
  - fusec: `fusec M.ir --bind B=..,T=.. --weights W.safetensors --inputs
    ids.npy[,cos.npy,sin.npy] --run --device=cuda --bench N`, and the same
    with --save-outputs for the relative L2 error against the reference;
  - fusec's compile: cold (a new process, an empty FUSEC_CACHE_DIR), warm (a
    second process), and -o with the warm cache (`--emit=plan --time`, `-o
    --time`; fusec's own "to a compiled program" time and the process's wall
    time), and the plan's kernel count;
  - row "precision": the f32 graph and f32 weights with --precision=bf16
    (skipped with a note when this fusec rejects the flag);
  - row "onnx" (GPT-2, when fusec has the importer): torch.onnx.export
    (dynamo, opset 18) of the f32 model at each size, `fusec M.onnx --run
    --bench` (f32; and with --precision=bf16 where fusec has it), the plan's
    kernel count, and ONNX Runtime on the CPU as a second oracle for the
    outputs (its speed on the CPU is no fair comparison and is not timed).

The core rows (reference, eager, fusec's compile, fusec, torch.compile
default) run first for every model and size; then the other modes, -o,
precision and onnx, one kind at a time over every model and size, so that a
short budget drops extras before it drops a model.

Each row's numbers go to $OUT/whole.json, every command and its output to
$OUT/whole.log, and a short table is printed last (and to $OUT/whole.md).
Scratch files (weights, logits as .npy) go to --work, /dev/shm by default.

Options and their environment defaults (run-whole.sh passes these through):
  --models   WHOLE_MODELS  "gpt2,llama"
  --modes    WHOLE_MODES   "default,reduce-overhead"  (max-autotune costs minutes
                           of compile per size: add it in a call of its own)
  --rows     WHOLE_ROWS    "bf16,compile,precision,onnx"
  --sizes    WHOLE_SIZES   e.g. "gpt2:1x128,gpt2:8x1024,llama:1x512" (default: all four)
  --reps     WHOLE_REPS    30
  --budget   WHOLE_BUDGET_S 440 (seconds; a step that would not fit is skipped
                           and says so)
  --gqa      WHOLE_GQA     "broadcast" (the attention op's batch dims broadcast
                           the key/value heads) or "expand" (copies, as repeat_kv)

--tiny runs the same code on tiny configs (2 layers, vocabulary 1000) at
B=2,T=16 and B=1,T=7 on the CPU: fusec --device=cpu (ref where the build has
no CPU backend) against Hugging Face's own f32 outputs; the f32 graphs must
match to a relative L2 error of 1e-4 (exit 1 otherwise). No GPU, no
torch.compile unless --modes names one.
"""
import argparse
import contextlib
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(HERE / "models"))

import numpy as np  # noqa: E402

import cuda_timing  # noqa: E402  (bench/, this script's folder)

SIZES = {
    "gpt2": {"full": [(1, 128), (8, 1024)], "tiny": [(2, 16), (1, 7)]},
    "llama": {"full": [(1, 512), (4, 2048)], "tiny": [(2, 16), (1, 7)]},
}
PRESET = {"gpt2": {"full": "124m", "tiny": "tiny"}, "llama": {"full": "1b", "tiny": "tiny"}}
TINY_TOL = 1e-4

T0 = time.monotonic()
LOG = None
ARGS = None


def log(msg):
    print(msg, flush=True)
    if LOG:
        LOG.write(msg + "\n")
        LOG.flush()


def left():
    return ARGS.budget - (time.monotonic() - T0)


def fits(need, what):
    """True when `need` seconds remain; else log the skip."""
    if left() >= need:
        return True
    log(f"   skipped {what}: {left():.0f} s of the budget left, needs ~{need:.0f} s")
    return False


def sh(cmd, env=None, cap=300):
    """Run cmd (a list); log it and its output. Returns (rc, out, err, wall_s)."""
    t = max(5.0, min(cap, left()))
    if LOG:  # the console gets the results; the log every command
        LOG.write(f"$ {' '.join(str(c) for c in cmd)}\n")
    t0 = time.monotonic()
    try:
        p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=t)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, err = 124, f"timeout after {t:.0f} s"
    wall = time.monotonic() - t0
    if LOG:
        LOG.write(out[-20000:] + ("\n[stderr]\n" + err[-20000:] if err else "") + f"\n[rc={rc}, {wall:.2f} s]\n")
        LOG.flush()
    return rc, out, err, wall


def rel_l2(torch, a, ref):
    """||a - ref|| / ||ref|| in float64, in chunks along the first axis."""
    num = den = 0.0
    for i in range(ref.shape[0]):
        r = ref[i].to(torch.float64)
        x = a[i].to(device=r.device, dtype=torch.float64)
        num += float(((x - r) ** 2).sum())
        den += float((r ** 2).sum())
    return (num / den) ** 0.5 if den else float("nan")


def load_npy(torch, path, device):
    return torch.from_numpy(np.load(path)).to(device)


def time_torch(torch, fn, reps, warmup, cuda, step_begin=False):
    """Median ms of `reps` calls: CUDA events per call on the GPU, the wall
    clock on the CPU."""
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None) if step_begin else None
    return statistics.median(cuda_timing.samples_ms(fn, reps, warmup, cuda, mark))


# ---------------------------------------------------------------- fusec
RE_TIME = re.compile(r"^time: ([0-9.]+) ms median of", re.M)
RE_COMPILED = re.compile(r"^time: ([0-9.]+) ms to a compiled program \(([^)]*)\)", re.M)
RE_WRITE = re.compile(r"^time: ([0-9.]+) ms more to write", re.M)
RE_TOTAL = re.compile(r"^total: (\d+) kernels, (\d+) library calls", re.M)


def fusec_env(cache_dir):
    env = dict(os.environ)
    env["FUSEC_CACHE_DIR"] = str(cache_dir)
    env.setdefault("FUSEC_CACHE", "rw")
    return env


def compile_times(fusec, src, bind, cache_dir, extra, note):
    """Cold and warm compiles of src, each in a new process; cache_dir is emptied first."""
    r = {}
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True)
    base = [fusec, src] + (["--bind", bind] if bind else []) + extra
    for name in ("cold", "warm"):
        rc, out, err, wall = sh(base + ["--emit=plan", "--time"], fusec_env(cache_dir), cap=240)
        m = RE_COMPILED.search(err)
        r[name + "_ms"] = float(m.group(1)) if m and rc == 0 else None
        r[name + "_wall_s"] = round(wall, 3)
        r[name + "_how"] = m.group(2) if m else f"rc={rc}: {last_err(err)[:200]}"
        k = RE_TOTAL.search(out)
        if k:
            r["kernels"], r["library_calls"] = int(k.group(1)), int(k.group(2))
        if rc != 0:
            log(f"   {note} compile failed (rc={rc}): {r[name + '_how']}")
            return r
    log(f"   {note} compile: cold {r.get('cold_ms')} ms ({r['cold_wall_s']} s wall), warm {r.get('warm_ms')} ms "
        f"({r['warm_wall_s']} s wall); plan: {r.get('kernels')} kernels, {r.get('library_calls')} library calls")
    return r


def compile_o(fusec, src, bind, cache_dir, cold, note):
    """-o with the warm cache in a new process: fusec's compile time plus its time to write the file."""
    r = {}
    # -o writes the cubins the compile has (no NVRTC); the budget guard is kept generous.
    if cold.get("warm_ms") is None or not fits(cold["cold_wall_s"] + 10, f"{note} -o"):
        return r
    cubin = cache_dir.parent / (cache_dir.name + ".cubin")
    rc, out, err, wall = sh([fusec, src] + (["--bind", bind] if bind else []) + ["-o", cubin, "--time"],
                            fusec_env(cache_dir), cap=240)
    m, w = RE_COMPILED.search(err), RE_WRITE.search(err)
    r["o_ms"] = (float(m.group(1)) + (float(w.group(1)) if w else 0.0)) if m and rc == 0 else None
    r["o_write_ms"] = float(w.group(1)) if w and rc == 0 else None
    r["o_wall_s"] = round(wall, 3)
    cubin.unlink(missing_ok=True)
    log(f"   {note} -o (warm cache): {r['o_ms']} ms ({r['o_wall_s']} s wall)" if r["o_ms"] is not None
        else f"   {note} -o failed: rc={rc}: {last_err(err)[:200]}")
    return r


def fusec_run(fusec, src, bind, inputs, weights, cache_dir, extra, save_dir, torch, ref, dev, note, others=None):
    """--bench and --save-outputs runs; returns {ms, rel_l2 (against ref), rel_l2_NAME (against
    each of `others`), ...} or {error}."""
    r = {}
    env = fusec_env(cache_dir)
    base = [fusec, src] + (["--bind", bind] if bind else []) + extra + ["--run", f"--device={ARGS.device}"]
    if inputs:
        base += ["--inputs", ",".join(str(p) for p in inputs)]
    if weights:
        base += ["--weights", weights]
    # --time needs a compile (cuda); the CPU backend's run has none to report.
    timing = ["--time"] if ARGS.device == "cuda" else []
    rc, out, err, wall = sh(base + ["--bench", str(ARGS.reps)] + timing, env, cap=240)
    m = RE_TIME.search(out)
    if rc != 0 or not m:
        r["error"] = f"rc={rc}: " + last_err(err)[:200]
        log(f"   {note}: {r['error']}")
        if rc == 2 and "precision" in err:
            r["skipped"] = "--precision not accepted by this fusec"
        return r
    r["ms"] = float(m.group(1))
    c = RE_COMPILED.search(err)
    if c:
        r["compile_in_run_ms"] = float(c.group(1))
    shutil.rmtree(save_dir, ignore_errors=True)
    rc, out, err, wall = sh(base + ["--save-outputs", save_dir], env, cap=240)
    if rc == 0 and (save_dir / "out0.npy").exists():
        y = load_npy(torch, save_dir / "out0.npy", dev)
        r["rel_l2"] = rel_l2(torch, y, ref)
        for name, o in (others or {}).items():
            r["rel_l2_" + name] = rel_l2(torch, y, o.to(dev))
        del y
    else:
        r["save_error"] = f"rc={rc}: " + last_err(err)[:200]
    shutil.rmtree(save_dir, ignore_errors=True)
    vs = "".join(f", vs {k[7:]} {v:.3g}" for k, v in r.items() if k.startswith("rel_l2_"))
    log(f"   {note}: {r['ms']:.3f} ms, rel L2 vs f32 {r.get('rel_l2', float('nan')):.3g}{vs}")
    return r


def last_err(err):
    """The line of stderr that says what went wrong (not the 'try --help' line)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("try 'fusec --help'")]
    return lines[-1] if lines else "no output"


def fusec_has(fusec, flag):
    rc, out, err, _ = sh([fusec, "--help"], cap=20)
    return flag in out


# ---------------------------------------------------------------- one model
class Ctx:
    """What every step needs: the run's settings and one model's files."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def prepare_model(torch, kind, scale, work, have_precision):
    """The model in f32 and bf16, its graphs and weights files; None when
    none of its sizes is asked for."""
    import hf

    sizes = [s for s in SIZES[kind][scale] if not ARGS.sizes or f"{kind}:{s[0]}x{s[1]}" in ARGS.sizes]
    if not sizes or not fits(30, f"{kind} (all sizes)"):
        return None
    dev = "cuda" if ARGS.device == "cuda" else "cpu"
    preset = PRESET[kind][scale]
    log(f"== {kind} {preset}: building the model [t={time.monotonic() - T0:.0f}s]")
    model = hf.build(kind, preset, seed=0, device=dev)
    nin = hf.N_INPUTS[kind]
    files = {}
    for dt in ("bf16", "f32"):
        # The f32 graph serves the --precision row (and, --tiny, the check against HF).
        if dt == "f32" and not ARGS.tiny and not ("precision" in ARGS.rows and have_precision):
            continue
        text, params = hf.graph(kind, model, dt, ARGS.gqa)
        g = work / f"{kind}_{dt}.ir"
        g.write_text(text)
        w = work / f"{kind}_{dt}.safetensors"
        hf.save(hf.weights(model, params, nin, dt), w)
        files[dt] = (g, w)
        log(f"   wrote {g.name} ({len(params)} parameters) and {w.name} ({w.stat().st_size / 2**20:.0f} MiB)")
    c = model.config
    gqa = f"GQA {ARGS.gqa} ({c.num_attention_heads} query, {c.num_key_value_heads} kv heads)" if kind == "llama" else ""
    if gqa:
        log(f"   {gqa}")
    return Ctx(kind=kind, preset=preset, sizes=sizes, model=model, mbf=hf.to_bf16(model), files=files, dev=dev,
               cuda=ARGS.device == "cuda", gqa=gqa)


def size_inputs(torch, m, B, T, work):
    """Token ids (and rotary tables) for one size as .npy files, and the f32
    model's logits: (ids on the device, input files, reference, scratch dir)."""
    import hf

    gen = torch.Generator().manual_seed(1000 + B * 7 + T)
    ids = torch.randint(0, m.model.config.vocab_size, (B, T), generator=gen, dtype=torch.int64)
    sd = work / f"{m.kind}_{B}x{T}"
    sd.mkdir(exist_ok=True)
    inputs = [sd / "ids.npy"]
    np.save(inputs[0], ids.numpy())
    if m.kind == "llama":
        cos, sin = hf.rope_tables(m.model, T)
        np.save(sd / "cos.npy", cos)
        np.save(sd / "sin.npy", sin)
        inputs += [sd / "cos.npy", sd / "sin.npy"]
    ids_d = ids.to(m.dev)
    with torch.no_grad():
        ref = hf.logits(m.model, ids_d).float()
    return ids_d, inputs, ref, sd


def torch_compile(torch, m, res, mode, ids_d):
    B = ids_d.shape[0]
    if mode == "reduce-overhead" and B != 1:
        return
    need = {"max-autotune": 200, "reduce-overhead": 60}.get(mode, 60) * (2 if m.kind == "llama" else 1)
    if not fits(need, f"torch.compile {mode}"):
        res.setdefault("compile", {})[mode] = {"skipped": "out of budget"}
        return
    torch._dynamo.reset()
    cm = torch.compile(m.mbf, mode=None if mode == "default" else mode, dynamic=False)
    rr = {}
    try:
        with torch.no_grad():
            t0 = time.monotonic()
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            cm(input_ids=ids_d, use_cache=False)
            if m.cuda:
                torch.cuda.synchronize()
            rr["compile_s"] = round(time.monotonic() - t0, 2)
            rr["ms"] = time_torch(torch, lambda: cm(input_ids=ids_d, use_cache=False), ARGS.reps, 3, m.cuda,
                                  step_begin=mode == "reduce-overhead")
        log(f"   torch.compile {mode}: {rr['ms']:.3f} ms (first call {rr['compile_s']} s)")
    except Exception as e:  # a mode that fails is a result, not the end of the run
        rr["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        log(f"   torch.compile {mode}: {rr['error']}")
    res.setdefault("compile", {})[mode] = rr
    del cm
    torch._dynamo.reset()
    if m.cuda:
        torch.cuda.empty_cache()


def core_rows(torch, m, B, T, work, fusec, res):
    """Pass 1: eager, fusec's cold and warm compile, fusec, torch.compile default."""
    import hf

    ids_d, inputs, ref, sd = size_inputs(torch, m, B, T, work)
    with torch.no_grad():
        yb = hf.logits(m.mbf, ids_d)
        res["eager_rel_l2"] = rel_l2(torch, yb, ref)
        del yb
        res["eager_ms"] = time_torch(torch, lambda: hf.logits(m.mbf, ids_d), ARGS.reps, 3, m.cuda)
    log(f"   HF eager bf16: {res['eager_ms']:.3f} ms, rel L2 vs f32 {res['eager_rel_l2']:.3g}")
    bind = f"B={B},T={T}"
    cache = work / f"cache_{m.kind}_{B}x{T}"
    if "compile" in ARGS.rows and ARGS.device != "ref":
        res["fusec_compile"] = compile_times(fusec, m.files["bf16"][0], bind, cache, [], "fusec bf16")
    cache.mkdir(exist_ok=True)
    if "bf16" in ARGS.rows and fits(15, "fusec bf16"):
        g, w = m.files["bf16"]
        res["fusec"] = fusec_run(fusec, g, bind, inputs, w, cache, [], sd / "out", torch, ref, m.dev, "fusec bf16")
    if ARGS.tiny and "f32" in m.files:
        g, w = m.files["f32"]
        res["fusec_f32"] = fusec_run(fusec, g, bind, inputs, w, cache, [], sd / "out", torch, ref, m.dev, "fusec f32")
    if "default" in ARGS.modes:
        torch_compile(torch, m, res, "default", ids_d)
    del ref


def extra_rows(torch, m, B, T, work, fusec, res, row, have_precision, have_onnx):
    """Pass 2, one row kind at a time over every model and size: the other
    torch.compile modes, fusec -o, --precision=bf16, ONNX."""
    bind = f"B={B},T={T}"
    cache = work / f"cache_{m.kind}_{B}x{T}"
    if row == "modes":
        modes = [md for md in ARGS.modes if md != "default" and not (md == "reduce-overhead" and B != 1)]
        if modes:
            ids_d, _, ref, _ = size_inputs(torch, m, B, T, work)
            del ref
            for mode in modes:
                torch_compile(torch, m, res, mode, ids_d)
    elif row == "-o" and "compile" in ARGS.rows and ARGS.device != "ref" and res.get("fusec_compile"):
        res["fusec_compile"].update(compile_o(fusec, m.files["bf16"][0], bind, cache, res["fusec_compile"],
                                              "fusec bf16"))
    elif row == "precision" and "precision" in ARGS.rows:
        if not have_precision:
            res["precision"] = {"skipped": "this fusec has no --precision"}
            log("   fusec f32 --precision=bf16: skipped (this fusec has no --precision)")
        elif fits(40, "fusec --precision=bf16"):
            _, inputs, ref, sd = size_inputs(torch, m, B, T, work)
            g, w = m.files["f32"]
            res["precision"] = fusec_run(fusec, g, bind, inputs, w, cache, ["--precision=bf16"], sd / "out", torch,
                                         ref, m.dev, "fusec f32 --precision=bf16")
            del ref
    elif row == "onnx" and "onnx" in ARGS.rows and m.kind == "gpt2":
        if not have_onnx:
            res["onnx"] = {"skipped": "this fusec was built without the ONNX importer"}
            log("   ONNX: skipped (fusec built without the importer)")
        elif fits(60, "ONNX export and run"):
            ids_d, _, ref, sd = size_inputs(torch, m, B, T, work)
            res["onnx"] = run_onnx(torch, m.model, ids_d.cpu(), ref, sd, cache, fusec, have_precision, m.dev)
            del ref
    if m.cuda:
        torch.cuda.empty_cache()


def applies(m, B, row):
    if row == "modes":
        return any(md != "default" and not (md == "reduce-overhead" and B != 1) for md in ARGS.modes)
    if row == "-o":
        return "compile" in ARGS.rows and ARGS.device != "ref"
    return row in ARGS.rows and (row != "onnx" or m.kind == "gpt2")


def run_all(torch, kinds, scale, work, fusec, have_precision, have_onnx, results):
    """Pass 1 (the core rows) over every model and size, then pass 2 (the
    extra rows), so that a short budget cuts extras before it cuts a model."""
    models = []
    for kind in kinds:
        try:
            m = prepare_model(torch, kind, scale, work, have_precision)
        except Exception as ex:  # report and go on to the next model
            fail(results, kind, ex)
            continue
        if m:
            models.append(m)
            for (B, T) in m.sizes:
                key = f"{kind} B={B},T={T}"
                res = results.setdefault(key, {"model": kind, "preset": m.preset, "B": B, "T": T})
                if m.gqa:
                    res["gqa"] = m.gqa
                log(f"== {key} [t={time.monotonic() - T0:.0f}s, {left():.0f}s left]")
                if not fits(20, key):
                    res["skipped"] = "out of budget"
                    continue
                try:
                    core_rows(torch, m, B, T, work, fusec, results[key])
                except Exception as ex:
                    fail(results, key, ex)
    for row in ("modes", "-o", "precision", "onnx"):
        for m in models:
            for (B, T) in m.sizes:
                key = f"{m.kind} B={B},T={T}"
                if results[key].get("skipped") or not applies(m, B, row):
                    continue
                log(f"== {key}: {row} [t={time.monotonic() - T0:.0f}s, {left():.0f}s left]")
                try:
                    extra_rows(torch, m, B, T, work, fusec, results[key], row, have_precision, have_onnx)
                except Exception as ex:
                    fail(results, key, ex)


def fail(results, key, ex):
    import traceback

    log(f"!! {key}: {type(ex).__name__}: {ex}")
    LOG.write(traceback.format_exc())
    results.setdefault(key, {"model": key.split()[0], "B": "-", "T": "-"}).setdefault("errors", []).append(
        f"{type(ex).__name__}: {str(ex)[:300]}")


def probe_onnx(fusec, path):
    """(0, "") when fusec imports a one-node ONNX model, else (rc, why): the
    importer is optional in a build, and the onnx package on this machine."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        return 1, "python has no onnx package"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    onnx.save(helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    rc, _, err, _ = sh([fusec, path, "--emit=ir"], cap=20)
    lines = err.strip().splitlines()
    return rc, lines[-1] if lines else f"rc={rc}"


def export(torch, model, ids, path):
    kw = dict(dynamo=True, opset_version=18, input_names=["input_ids"], output_names=["logits"])
    try:
        torch.onnx.export(model, (ids,), str(path), kwargs={"use_cache": False}, **kw)
    except TypeError:  # an exporter without kwargs=
        torch.onnx.export(model, (ids,), str(path), **kw)


def run_onnx(torch, model, ids, ref, sd, cache, fusec, have_precision, dev):
    r = {}
    path = sd / "model.onnx"
    cpu_model = copy.deepcopy(model).cpu()
    t0 = time.monotonic()
    try:
        # The exporter's progress lines go to the log, not the console.
        with contextlib.redirect_stdout(LOG):
            export(torch, cpu_model, ids, path)
    except Exception as e:
        r["error"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        log(f"   ONNX {r['error']}")
        return r
    r["export_s"] = round(time.monotonic() - t0, 1)
    log(f"   ONNX export: {r['export_s']} s")
    del cpu_model
    try:
        import onnxruntime as ort

        t0 = time.monotonic()
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        y = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: ids.numpy()})[0])
        r["ort_cpu_s"] = round(time.monotonic() - t0, 1)
        r["ort_rel_l2"] = rel_l2(torch, y, ref)
        others = {"ort": y}
        del sess
        log(f"   ONNX Runtime (CPU, an oracle only): rel L2 vs torch f32 {r['ort_rel_l2']:.3g}")
    except Exception as e:
        r["ort_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        log(f"   ONNX Runtime: {r['ort_error']}")
        others = {}
    rc, out, err, _ = sh([fusec, path, "--emit=plan"], fusec_env(cache), cap=240)
    k = RE_TOTAL.search(out)
    if k:
        r["kernels"], r["library_calls"] = int(k.group(1)), int(k.group(2))
        log(f"   fusec ONNX plan: {r['kernels']} kernels, {r['library_calls']} library calls")
    else:
        r["plan_error"] = f"rc={rc}: " + last_err(err)[:300]
        log(f"   fusec ONNX plan: {r['plan_error']}")
        return r
    r["f32"] = fusec_run(fusec, path, None, [sd / "ids.npy"], None, cache, [], sd / "out", torch, ref, dev,
                         "fusec ONNX f32", others)
    if have_precision and fits(30, "fusec ONNX --precision=bf16"):
        r["bf16"] = fusec_run(fusec, path, None, [sd / "ids.npy"], None, cache, ["--precision=bf16"], sd / "out",
                              torch, ref, dev, "fusec ONNX --precision=bf16", others)
    del others
    for f in sd.glob("model.onnx*"):
        f.unlink(missing_ok=True)
    return r


# ---------------------------------------------------------------- summary
def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def cell(d):
    """A torch.compile mode's cell: its time, or why there is none."""
    if not d:
        return "-"
    return fmt(d["ms"]) if d.get("ms") else "skipped" if d.get("skipped") else "error"


def summary(results):
    modes = ARGS.modes
    head = ["model", "size", "fusec ms", "eager ms"] + [f"compile {m} ms" for m in modes] + \
        ["fusec / best compile", "rel L2 fusec", "rel L2 eager", "cold / warm / -o ms", "kernels",
         "f32 --precision=bf16 ms (rel L2)", "onnx f32 ms (rel L2 vs f32 / vs ORT, kernels)"]
    rows = []
    for key, r in results.items():
        f = r.get("fusec", {})
        cms = {m: (r.get("compile", {}).get(m) or {}).get("ms") for m in modes}
        best = min([v for v in cms.values() if v], default=None)
        ratio = f"{best / f['ms']:.2f}x" if best and f.get("ms") else "-"
        c = r.get("fusec_compile", {})
        comp = f"{fmt(c.get('cold_ms'), '.0f')} / {fmt(c.get('warm_ms'), '.1f')} / {fmt(c.get('o_ms'), '.0f')}"
        p = r.get("precision", {})
        pr = p.get("skipped") or (f"{fmt(p.get('ms'))} ({fmt(p.get('rel_l2'), '.3g')})" if p.get("ms") else p.get("error", "-"))
        o = r.get("onnx", {})
        of = o.get("f32", {})
        on = o.get("skipped") or o.get("error") or o.get("plan_error") or \
            (f"{fmt(of.get('ms'))} ({fmt(of.get('rel_l2'), '.3g')} / {fmt(of.get('rel_l2_ort'), '.3g')}, "
             f"{o.get('kernels')})" if of.get("ms") else of.get("error", "-"))
        fm = fmt(f["ms"]) if f.get("ms") else (f.get("error") or r.get("skipped") or "-")[:60]
        rows.append([r["model"] + (" (tiny)" if ARGS.tiny else ""), f"B={r['B']},T={r['T']}", fm,
                     fmt(r.get("eager_ms"))] + [cell(r.get("compile", {}).get(m)) for m in modes] +
                    [ratio, fmt(f.get("rel_l2"), ".4g"), fmt(r.get("eager_rel_l2"), ".4g"), comp,
                     str(c.get("kernels", "-")), pr, on])
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    notes = ["fusec / best compile: the best torch.compile mode's time over fusec's (above 1: fusec is faster).",
             "rel L2: ||logits - f32 model's|| / ||f32 model's||. Compile: fusec's own 'to a compiled program' time "
             "(cold: empty cache, new process; warm: second process; -o: with the warm cache, writing the file).",
             "ONNX Runtime ran on the CPU as an oracle for the ONNX rows only; its speed there is no fair comparison."]
    gq = {r.get("gqa") for r in results.values() if r.get("gqa")}
    notes += [f"Llama attention: {g}." for g in gq]
    return "\n".join(md + [""] + notes)


def main():
    global LOG, ARGS
    e = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fusec", default=str(HERE.parent / "build" / "fusec"))
    ap.add_argument("--device", default=None, help="cuda (default), cpu or ref (--tiny: cpu, else ref)")
    ap.add_argument("--models", default=e("WHOLE_MODELS", "gpt2,llama"))
    ap.add_argument("--modes", default=e("WHOLE_MODES", None))
    ap.add_argument("--rows", default=e("WHOLE_ROWS", "bf16,compile,precision,onnx"))
    ap.add_argument("--sizes", default=e("WHOLE_SIZES", ""))
    ap.add_argument("--reps", type=int, default=int(e("WHOLE_REPS", "30")))
    ap.add_argument("--budget", type=float, default=float(e("WHOLE_BUDGET_S", "440")))
    ap.add_argument("--gqa", default=e("WHOLE_GQA", "broadcast"), choices=("broadcast", "expand"))
    ap.add_argument("--work", default=e("WHOLE_WORK", ""))
    ap.add_argument("--out", default=e("OUT", str(HERE.parent / "out")))
    ap.add_argument("--tiny", action="store_true")
    ARGS = ap.parse_args()
    if ARGS.modes is None:
        ARGS.modes = "" if ARGS.tiny else "default,reduce-overhead"
    ARGS.modes = [m for m in ARGS.modes.split(",") if m]
    ARGS.rows = set(r for r in ARGS.rows.split(",") if r)
    ARGS.sizes = set(s for s in ARGS.sizes.split(",") if s)
    if ARGS.tiny:
        ARGS.reps = min(ARGS.reps, 5)
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    LOG = open(out / "whole.log", "a")
    fusec = Path(ARGS.fusec).resolve()
    if not fusec.exists():
        log(f"whole_model.py: no fusec at {fusec}")
        return 2
    rc, devs, _, _ = sh([fusec, "--devices"], cap=20)
    devs = devs.split()
    if ARGS.device is None:
        ARGS.device = ("cpu" if "cpu" in devs else "ref") if ARGS.tiny else "cuda"
    if ARGS.device not in devs:
        log(f"whole_model.py: this fusec has no device {ARGS.device} (it has: {' '.join(devs)})")
        return 2
    # Scratch: /dev/shm when it has room for the Llama weights (bf16 and f32,
    # 7.5 GB) and a logits file (4.2 GB), else /tmp.
    shm = Path("/dev/shm")
    roomy = shm.is_dir() and shutil.disk_usage(shm).free > 24 * 2**30
    work = Path(ARGS.work) if ARGS.work else (shm if roomy else Path("/tmp")) / "fusec-whole"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    import torch

    if ARGS.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is f32
        torch.backends.cudnn.allow_tf32 = False
    have_precision = fusec_has(fusec, "--precision")
    rc, err = probe_onnx(fusec, work / "probe.onnx")
    have_onnx = rc == 0
    log(f"whole_model.py: fusec {fusec} on {ARGS.device}; torch {torch.__version__}; "
        f"--precision: {'yes' if have_precision else 'no'}; ONNX importer: {'yes' if have_onnx else 'no'}"
        f"{'' if have_onnx else ' (' + err[:120] + ')'}; modes {','.join(ARGS.modes) or 'none'}; "
        f"rows {','.join(sorted(ARGS.rows))}; reps {ARGS.reps}; budget {ARGS.budget:.0f} s; scratch {work}")
    if ARGS.device == "cuda":
        log(f"   GPU: {torch.cuda.get_device_name()}")
    results = {}
    scale = "tiny" if ARGS.tiny else "full"
    kinds = [m for m in ARGS.models.split(",") if m]
    run_all(torch, kinds, "tiny" if ARGS.tiny else "full", work, fusec, have_precision, have_onnx, results)
    (out / "whole.json").write_text(json.dumps(results, indent=1, default=str))
    s = summary(results)
    (out / "whole.md").write_text(s + "\n")
    shutil.rmtree(work, ignore_errors=True)
    log(f"\ndone in {time.monotonic() - T0:.0f} s\n")
    log(s)
    if ARGS.tiny:
        bad = []
        for key, r in results.items():
            for row in ("fusec_f32",):
                v = r.get(row, {}).get("rel_l2")
                if v is None or not v <= TINY_TOL:
                    bad.append(f"{key} {row}: rel L2 {v}")
            o = r.get("onnx", {}).get("f32", {}).get("rel_l2")
            if "onnx" in ARGS.rows and r.get("model") == "gpt2" and "skipped" not in r.get("onnx", {}) and \
                    (o is None or not o <= TINY_TOL):
                bad.append(f"{key} onnx f32: rel L2 {o}")
        if bad:
            log("TINY CHECK FAILED: " + "; ".join(bad))
            return 1
        log(f"tiny check: every f32 graph within {TINY_TOL:g} of Hugging Face's f32 logits")
    return 0


if __name__ == "__main__":
    sys.exit(main())

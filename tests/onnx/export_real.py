#!/usr/bin/env python3
"""export_real.py - real torch.onnx.export models through fusec, against ONNX Runtime.

Builds Hugging Face models from their configs (random init, f32, eval,
use_cache=False), exports each with torch.onnx.export (the dynamo exporter
at opset 18, and the TorchScript one at opset 17 where it works), runs
the file with ONNX Runtime on the CPU (the oracle) and with fusec on every
device asked for, and prints one table:

  model, exporter, size, ONNX nodes, fusec's plan (kernels + library calls,
  flash-attention kernels), device, median ms, max |fusec - ORT| and rel L2,
  fusec's own --check (against its float64 reference interpreter), and on
  cuda the same with --precision=bf16.

Models (--models):
  gpt2   GPT2LMHeadModel, GPT2Config() (12 layers, 768, vocabulary 50257): input_ids -> logits
  bert   BertModel, BertConfig() (BERT-base, 12 layers), input_ids and an
         attention_mask whose second row is padded -> last_hidden_state, pooler_output
  llama  LlamaForCausalLM, small: hidden 512, 4 layers, 8 query and 2 key/value heads
         (grouped-query), MLP 1408, vocabulary 32000, RoPE -> logits

  python3 tests/onnx/export_real.py --fusec build/fusec [--models gpt2,bert,llama]
      [--exporters dynamo,legacy] [--devices cuda,cpu] [--sizes gpt2=1x128+8x1024,bert=2x128]
      [--reps 20] [--check-max-tokens 256] [--budget 480] [--out DIR]
  python3 tests/onnx/export_real.py --mirrors ...   no torch: the onnx.helper mirrors of
      tests/onnx/make_exports.py stand in for the exports (to try the script anywhere)

--check (the reference interpreter, float64) runs only where B*T is at most
--check-max-tokens: at 8x1024 it would take far too long. A device fusec
lacks (cpu without LLVM, as on the GPU machine) is reported as such; name
ref among --devices to run the reference interpreter (float64, slow) at
the sizes --check-max-tokens allows instead (on cuda, --check runs it anyway). Results go to
OUT/export_real.json and OUT/export_real.md (the table), plans to
OUT/<model>_<exporter>_<size>.plan.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RE_TOTAL = re.compile(r"^total: (\d+) kernels, (\d+) library calls", re.M)
RE_TIME = re.compile(r"^time: ([0-9.]+) ms median of", re.M)
RE_CHECK = re.compile(r"^check (\S+): max_abs_err=(\S+) max_rel_err=(\S+) (ok|FAIL)", re.M)
DEFAULT_SIZES = {"gpt2": [(1, 128), (8, 1024)], "bert": [(2, 128)], "llama": [(2, 128)]}
T0 = time.monotonic()
ARGS = None


def log(msg):
    print(msg, flush=True)


def left():
    return ARGS.budget - (time.monotonic() - T0)


def sh(cmd, cap=300):
    t = max(5.0, min(cap, left()))
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=t)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"timeout after {t:.0f} s"


def last_err(err):
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("try 'fusec --help'")]
    return lines[-1][:240] if lines else "no output"


# ---------------------------------------------------------------- models
def build(torch, kind):
    import transformers

    torch.manual_seed(0)
    if kind == "gpt2":
        m = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False))
    elif kind == "bert":
        m = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=True)
    else:
        cfg = transformers.LlamaConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                                       num_key_value_heads=2, intermediate_size=1408, vocab_size=32000,
                                       max_position_embeddings=2048, use_cache=False)
        m = transformers.LlamaForCausalLM(cfg)
    return m.float().eval()


def feeds_for(kind, B, T, vocab):
    rng = np.random.default_rng(1)
    f = {"input_ids": rng.integers(0, vocab, (B, T)).astype(np.int64)}
    if kind == "bert":
        am = np.ones((B, T), np.int64)
        if B > 1:
            am[1, T * 2 // 3:] = 0  # the second sequence is padded
        f["attention_mask"] = am
    return f


def output_names(kind):
    return ["last_hidden_state", "pooler_output"] if kind == "bert" else ["logits"]


def export(torch, model, kind, feeds, path, exporter):
    names = list(feeds)
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    kw = dict(input_names=names, output_names=output_names(kind))
    if exporter == "dynamo":
        torch.onnx.export(model, args, str(path), dynamo=True, opset_version=18, **kw)
    else:
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, **kw)
    with torch.no_grad():
        out = model(*args)
    if kind == "bert":
        return [out.last_hidden_state.numpy(), out.pooler_output.numpy()]
    return [out.logits.numpy()]


def mirror(kind, B, T, path):
    """No torch: make_exports.py's mirror of the export, and no torch outputs."""
    sys.path.insert(0, str(HERE))
    import onnx

    import make_exports as me

    if kind == "gpt2":
        m = me.gpt2_lm_export(B, T)
        feeds = {"input_ids": np.random.default_rng(1).integers(0, 1000, (B, T)).astype(np.int64)}
    elif kind == "bert":
        m, feeds = me.bert_model_export(B, T), None
    else:
        m, feeds = me.llama_model_export(B, T), None
    if feeds is None:
        feeds = {i.name: me.example_input(i) for i in m.graph.input}
    onnx.save(m, str(path))
    return feeds


# ---------------------------------------------------------------- fusec
def fusec_devices(fusec):
    rc, out, _ = sh([fusec, "--devices"], cap=30)
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def compare(outs, refs):
    """max |a - b| and rel L2 over every output; None when shapes differ."""
    worst, rel = 0.0, 0.0
    for a, b in zip(outs, refs):
        if a.shape != b.shape:
            return None, f"shape {a.shape} vs {b.shape}"
        a, b = a.astype(np.float64), b.astype(np.float64)
        worst = max(worst, float(np.abs(a - b).max()) if a.size else 0.0)
        rel = max(rel, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))
    return worst, rel


def fusec_run(fusec, path, inputs, dev, nout, refs, extra, check):
    r = {}
    base = [fusec, path, "--run", f"--device={dev}", "--inputs", ",".join(str(p) for p in inputs)] + extra
    out_dir = Path(tempfile.mkdtemp(prefix="fusec-out-"))
    try:
        rc, out, err = sh(base + ["--save-outputs", out_dir] + (["--check"] if check else []), cap=300)
        if check:
            cs = RE_CHECK.findall(out + err)
            if cs:
                r["check"] = "ok" if all(c[3] == "ok" for c in cs) else "FAIL"
                r["check_max_abs"] = max(float(c[1]) for c in cs)
            else:
                r["check"] = f"none (rc={rc})"
        if rc not in (0, 4) or not (out_dir / "out0.npy").exists():
            r["error"] = f"rc={rc}: {last_err(err)}"
            return r
        outs = [np.load(out_dir / f"out{i}.npy") for i in range(nout)]
        r["max_abs"], r["rel_l2"] = compare(outs, refs)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    if dev == "ref":  # the float64 oracle: its time says nothing
        return r
    reps = ARGS.reps if dev == "cuda" else max(1, ARGS.reps // 5)
    if ARGS.profile and dev == "cuda":
        # where the time goes, beside the time: the profile table per case
        rc, out, err = sh(base + ["--profile"], cap=300)
        tag = "".join(a.split("=")[1] for a in extra if a.startswith("--precision=")) or "as-exported"
        (Path(ARGS.out) / f"{Path(path).stem}.{tag}.profile.txt").write_text(out + err)
    rc, out, err = sh(base + ["--bench", str(reps)], cap=300)
    m = RE_TIME.search(out)
    if m:
        r["ms"] = float(m.group(1))
    else:
        r["bench_error"] = f"rc={rc}: {last_err(err)}"
    return r


def torch_ms(torch, model, feeds, dtype):
    """Eager PyTorch on cuda at the same inputs (CUDA events, median)."""
    if not torch.cuda.is_available():
        return None
    import copy

    m = copy.deepcopy(model).to("cuda", dtype)
    args = [torch.from_numpy(v).cuda() for v in feeds.values()]
    ts = []
    with torch.no_grad():
        for i in range(ARGS.reps + 3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            m(*args)
            e.record()
            torch.cuda.synchronize()
            if i >= 3:
                ts.append(s.elapsed_time(e))
    del m
    torch.cuda.empty_cache()
    return float(np.median(ts))


# ---------------------------------------------------------------- one case
def one(torch, kind, model, exporter, B, T, work, results):
    key = f"{kind} {exporter} {B}x{T}"
    r = results.setdefault(key, {"model": kind, "exporter": exporter, "size": f"{B}x{T}"})
    path = work / f"{kind}_{exporter}_{B}x{T}.onnx"
    vocab = model.config.vocab_size if model is not None else 1000
    feeds = feeds_for(kind, B, T, vocab)
    t0 = time.monotonic()
    try:
        if model is None:
            feeds = mirror(kind, B, T, path)
            torch_outs = None
        else:
            torch_outs = export(torch, model, kind, feeds, path, exporter)
    except Exception as e:
        r["error"] = f"export: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        log(f"{key}: {r['error']}")
        return
    r["export_s"] = round(time.monotonic() - t0, 1)
    import onnx

    mp = onnx.load(str(path), load_external_data=False)
    ops = collections.Counter(n.op_type for n in mp.graph.node)
    r["nodes"], r["ops"] = sum(ops.values()), dict(ops.most_common())
    r["opset"] = max((o.version for o in mp.opset_import if o.domain in ("", "ai.onnx")), default=None)
    input_order = [i.name for i in mp.graph.input if i.name in feeds]
    del mp
    log(f"{key}: exported in {r['export_s']} s, {r['nodes']} nodes (opset {r['opset']}): "
        + ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
    inputs = []
    for i, n in enumerate(input_order):
        p = work / f"{kind}_{B}x{T}_in{i}.npy"
        np.save(p, feeds[n])
        inputs.append(p)
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        refs = sess.run(None, {n: feeds[n] for n in input_order})
        del sess
    except Exception as e:
        r["error"] = f"onnxruntime: {type(e).__name__}: {str(e)[:200]}"
        log(f"{key}: {r['error']}")
        return
    if torch_outs is not None:
        r["ort_vs_torch_max_abs"], _ = compare(refs, torch_outs)
    rc, out, err = sh([ARGS.fusec, path, "--emit=plan"], cap=300)
    m = RE_TOTAL.search(out)
    if not m:
        r["plan_error"] = f"rc={rc}: {last_err(err)}"
        log(f"{key}: fusec plan: {r['plan_error']}")
        return
    (ARGS.out / f"{kind}_{exporter}_{B}x{T}.plan").write_text(out)
    r["kernels"], r["library_calls"] = int(m.group(1)), int(m.group(2))
    r["flash"] = len(re.findall(r"ops: attention: flash", out))
    r["causal"] = len(re.findall(r"ops: attention: flash[^\n]*causal", out))
    r["merged_qkv"] = len(re.findall(r"gemm\[x3", out))
    log(f"   plan: {r['kernels']} kernels, {r['library_calls']} library calls; {r['flash']} flash attention "
        f"({r['causal']} causal); {r['merged_qkv']} merged QKV")
    small = B * T <= ARGS.check_max_tokens
    runs = r.setdefault("runs", {})
    for dev in ARGS.devices:
        if dev not in ARGS.have:
            runs[dev] = {"error": "not in this fusec (fusec --devices)"}
            continue
        if dev == "ref" and not small:
            continue
        if left() < 30:
            runs[dev] = {"error": "out of budget"}
            continue
        rr = fusec_run(ARGS.fusec, path, inputs, dev, len(refs), refs, [], small and dev != "ref")
        runs[dev] = rr
        log(f"   {dev}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rr.items()))
        if dev == "cuda" and left() > 30:
            rb = fusec_run(ARGS.fusec, path, inputs, dev, len(refs), refs, ["--precision=bf16"], False)
            runs["cuda bf16"] = rb
            log("   cuda bf16: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rb.items()))
    if model is not None and "cuda" in ARGS.devices and left() > 60:
        try:
            r["torch_f32_ms"] = torch_ms(torch, model, feeds, torch.float32)
            r["torch_bf16_ms"] = torch_ms(torch, model, feeds, torch.bfloat16)
        except Exception as e:
            r["torch_error"] = f"{type(e).__name__}: {str(e)[:160]}"
    for f in work.glob(f"{kind}_{exporter}_{B}x{T}.onnx*"):
        f.unlink(missing_ok=True)


# ---------------------------------------------------------------- table
def fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def table(results):
    head = ["model", "exporter", "B x T", "nodes", "kernels + lib", "flash (causal)", "device", "ms",
            "max |err| vs ORT", "rel L2", "--check", "torch eager ms f32 / bf16"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results.values():
        lead = [r["model"], r["exporter"], r["size"], fmt(r.get("nodes"))]
        if "kernels" not in r:
            rows.append("| " + " | ".join(lead + [r.get("error") or r.get("plan_error", "?")] + ["-"] * 7) + " |")
            continue
        plan = [f"{r['kernels']} + {r['library_calls']}", f"{r['flash']} ({r['causal']})"]
        tm = f"{fmt(r.get('torch_f32_ms'))} / {fmt(r.get('torch_bf16_ms'))}"
        for dev, rr in r.get("runs", {}).items():
            if "error" in rr and "max_abs" not in rr:
                cells = [dev, rr["error"], "-", "-", rr.get("check", "-")]
            else:
                chk = rr.get("check", "-")
                if "check_max_abs" in rr:
                    chk += f" ({rr['check_max_abs']:.2g})"
                cells = [dev, fmt(rr.get("ms"), ".3f"), fmt(rr.get("max_abs")), fmt(rr.get("rel_l2")), chk]
            rows.append("| " + " | ".join(lead + plan + cells + [tm]) + " |")
    return "\n".join(rows)


def parse_sizes(text):
    sizes = {k: list(v) for k, v in DEFAULT_SIZES.items()}
    for part in filter(None, text.split(",")):
        k, v = part.split("=")
        sizes[k] = [tuple(int(x) for x in s.split("x")) for s in v.split("+")]
    return sizes


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusec", default="build/fusec")
    ap.add_argument("--models", default="gpt2,bert,llama")
    ap.add_argument("--exporters", default="dynamo,legacy")
    ap.add_argument("--devices", default="cuda,cpu")
    ap.add_argument("--sizes", default="", help="e.g. gpt2=1x128+8x1024,bert=2x128")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--check-max-tokens", type=int, default=256)
    ap.add_argument("--budget", type=float, default=480.0, help="seconds; later cases are skipped past it")
    ap.add_argument("--out", default="out")
    ap.add_argument("--profile", action="store_true", help="write fusec --profile's table of each cuda case to --out")
    ap.add_argument("--mirrors", action="store_true", help="no torch: make_exports.py's mirrors instead of exports")
    ARGS = ap.parse_args()
    ARGS.out = Path(ARGS.out)
    ARGS.out.mkdir(parents=True, exist_ok=True)
    ARGS.devices = [d for d in ARGS.devices.split(",") if d]
    ARGS.have = fusec_devices(ARGS.fusec)
    sizes = parse_sizes(ARGS.sizes)
    torch = None
    if not ARGS.mirrors:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        log(f"export_real.py: torch {torch.__version__}, fusec {ARGS.fusec} (devices {' '.join(ARGS.have)})")
    else:
        log(f"export_real.py: mirrors (no torch), fusec {ARGS.fusec} (devices {' '.join(ARGS.have)})")
    exporters = ["mirror"] if ARGS.mirrors else [e for e in ARGS.exporters.split(",") if e]
    work = Path(tempfile.mkdtemp(prefix="export-real-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    results = {}
    # Every model at its smallest size first: the large GPT-2 last, so that
    # a tight budget drops it rather than a model.
    cases = sorted(((B * T, i, kind, exporter, B, T) for i, kind in enumerate(k for k in ARGS.models.split(",") if k)
                    for exporter in exporters for B, T in sizes[kind]), key=lambda c: (c[0] > 4096, c[1], c[0]))
    models = {}
    try:
        for _, _, kind, exporter, B, T in cases:
            key = f"{kind} {exporter} {B}x{T}"
            if left() < 45:
                log(f"{key}: skipped, out of budget")
                results[key] = {"model": kind, "exporter": exporter, "size": f"{B}x{T}", "error": "out of budget"}
                continue
            try:
                if torch is not None and kind not in models:
                    models[kind] = build(torch, kind)
                one(torch, kind, models.get(kind), exporter, B, T, work, results)
            except Exception as e:
                traceback.print_exc()
                results.setdefault(key, {"model": kind, "exporter": exporter, "size": f"{B}x{T}"})["error"] = \
                    f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    t = table(results)
    (ARGS.out / "export_real.json").write_text(json.dumps(results, indent=1, default=str))
    (ARGS.out / "export_real.md").write_text(t + "\n")
    log("\n" + t)
    log(f"\ndone in {time.monotonic() - T0:.0f} s")


if __name__ == "__main__":
    main()

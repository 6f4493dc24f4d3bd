#!/usr/bin/env python3
"""decode_bench.py - token-by-token decode with a key/value cache: fusec
beside Hugging Face generate (docs/DECODE.md).

    python3 bench/decode_bench.py [--generate build/example_generate]
        [--models gpt2,llama] [--tokens 64] [--bench 300] [--work DIR] [--out DIR]

On the GPU machine (bench/decode_bench.sh builds fusec and runs this), for
GPT2LMHeadModel 124M at B=1 with a cache of 1024 positions and a Llama-style
1B (hidden 2048, 16 layers, 32/8 heads, MLP 8192, vocabulary 128256; the
`llama 1b` preset of bench/models/hf.py) with a cache of 2048, both bf16 with
Hugging Face's own random init:

  - the model written for decoding (bench/models/decode_irgen.py: one graph
    for prefill and decode, inout caches), its weights as one safetensors
    file (the state_dict names; the Llama rotary tables from the model's own
    rotary embedding, as rope.cos and rope.sin);
  - fusec: examples/generate.c on CUDA: prefill a 16-token prompt, greedy
    decode --tokens tokens (time per token with the host argmax and the
    copies), then --bench steps at the cache's last position (attention over
    the whole cache; the device queue kept full), and the host's time per
    step (the fc_run calls alone, which only enqueue);
  - Hugging Face generate with a static cache (cache_implementation="static",
    max length the same cache size), eager and with the forward under
    torch.compile(mode="reduce-overhead"); per token = the difference of two
    generate lengths over the difference of their token counts (the prompt's
    prefill cancels);
  - the greedy ids of fusec against eager's for the same prompt (how many
    leading tokens agree: bf16 rounding differs, so they part after a while);
  - the floor: the bytes a step must read (the weights once, plus the whole
    key/value cache) at the H200's copy bandwidth (4.2 TB/s), and each
    time's fraction of it.

Numbers go to $OUT/decode.json and a table to $OUT/decode.md (and stdout).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "models"))

COPY_BW = 4.2e12  # bytes/s, the H200's measured copy bandwidth (docs/PERF.md)
CTX = {"gpt2": 1024, "llama": 2048}
PRESET = {"gpt2": "124m", "llama": "1b"}


def log(msg):
    print(msg, flush=True)


def prepare(torch, kind, work):
    import decode_irgen
    import hf

    m32 = hf.build(kind, PRESET[kind], device="cuda")
    model = hf.to_bf16(m32)
    del m32
    torch.cuda.empty_cache()
    cfg = model.config.to_dict()
    ctx = CTX[kind]
    if kind == "gpt2":
        text, params = decode_irgen.gpt2_decode_ir(cfg, "bf16", ctx)
    else:
        text, params = decode_irgen.llama_decode_ir(cfg, "bf16", ctx)
    ir = work / f"{kind}_decode.ir"
    ir.write_text(text)
    sd = model.state_dict()
    tensors, weight_bytes, cache_bytes = {}, 0, 0
    for name, dt, shape in params:
        if name in ("input_ids", "pos"):
            continue
        if name.startswith("cache."):
            n = 2
            for d in shape:
                n *= 1 if d == "B" else d
            cache_bytes += n
            continue
        if name.startswith("rope."):
            cos, sin = hf.rope_tables(model, ctx)
            t = torch.from_numpy(cos if name.endswith("cos") else sin).to(torch.bfloat16)
        else:
            t = sd[name].detach().to(torch.bfloat16).contiguous().cpu()
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"{name}: {tuple(t.shape)} vs {shape}")
        tensors[name] = t.contiguous()
        weight_bytes += t.numel() * 2
    w = work / f"{kind}_decode.safetensors"
    hf.save(tensors, w)
    return model, ir, w, weight_bytes, cache_bytes


def run_fusec(gen, ir, w, prompt, tokens, bench):
    cmd = [str(gen), str(ir), "--weights", str(w), "--device", "cuda", "--prompt", ",".join(map(str, prompt)),
           "--tokens", str(tokens), "--bench", str(bench)]
    log("$ " + " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    log(p.stdout + p.stderr)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-400:]}
    out = {"wall_s": time.time() - t0}
    g = re.search(r"^generated: (.*)$", p.stdout, re.M)
    out["ids"] = [int(x) for x in g.group(1).split()] if g else []
    d = re.search(r"decode ([0-9.]+) ms/token", p.stdout)
    b = re.search(r"bench: .* ([0-9.]+) ms/token", p.stdout)
    c = re.search(r"compiled .* in ([0-9.]+) ms", p.stdout)
    h = re.search(r"host ([0-9.]+) us/step", p.stdout)
    out["host_us"] = float(h.group(1)) if h else None
    out["step_ms"] = float(d.group(1)) if d else None
    out["bench_ms"] = float(b.group(1)) if b else None
    out["compile_ms"] = float(c.group(1)) if c else None
    return out


def static_cache(torch, model, ctx):
    """A StaticCache of the full context, so that HF's attention covers as
    many positions as fusec's bench steps do; None when this transformers
    builds it otherwise (then generate's own static cache, prompt + new
    tokens long)."""
    try:
        from transformers import StaticCache
    except ImportError:
        return None
    for kw in (dict(config=model.config, max_batch_size=1, max_cache_len=ctx, device="cuda", dtype=torch.bfloat16),
               dict(config=model.config, max_cache_len=ctx)):
        try:
            return StaticCache(**kw)
        except TypeError:
            continue
    return None


def hf_generate(torch, model, prompt, cache, n):
    ids = torch.tensor([prompt], device="cuda")
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0)
    if cache is not None:
        cache.reset()
        return model.generate(ids, past_key_values=cache, **kw)
    return model.generate(ids, cache_implementation="static", **kw)


def hf_per_token(torch, model, prompt, cache, n1, n2, reps=2):
    """ms per token: (t(n2) - t(n1)) / (n2 - n1), best of reps."""
    def timed(n):
        best = 1e9
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = hf_generate(torch, model, prompt, cache, n)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best, out
    timed(n1)  # warm-up (and compile)
    t1, _ = timed(n1)
    t2, out = timed(n2)
    return 1e3 * (t2 - t1) / (n2 - n1), out[0, len(prompt):].tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generate", default="build/example_generate")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--bench", type=int, default=300)
    ap.add_argument("--work", default="/dev/shm/fusec-decode")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    a = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for kind in a.models.split(","):
        r = results[kind] = {"context": CTX[kind]}
        model = None
        try:
            t0 = time.time()
            model, ir, w, wb, cb = prepare(torch, kind, work)
            r.update(weight_bytes=wb, cache_bytes=cb, floor_ms=1e3 * (wb + cb) / COPY_BW)
            log(f"== {kind}: {wb / 1e6:.0f} MB of weights, {cb / 1e6:.1f} MB of cache, floor "
                f"{r['floor_ms']:.4f} ms/token (prepared in {time.time() - t0:.0f} s)")
            prompt = [(17 * i + 3) % model.config.vocab_size for i in range(16)]
            r["fusec"] = run_fusec(a.generate, ir, w, prompt, a.tokens, a.bench)
            report(results, out)
            cache = static_cache(torch, model, CTX[kind])
            r["hf_cache"] = f"StaticCache of {CTX[kind]}" if cache is not None else "generate's static cache"
            n1, n2 = 8, 8 + a.tokens
            with torch.no_grad():
                try:
                    ms, ids = hf_per_token(torch, model, prompt, cache, n1, n2)
                    r["hf_eager"] = {"ms": ms, "ids": ids}
                    log(f"   HF eager static cache: {ms:.4f} ms/token")
                    f = r["fusec"].get("ids", [])
                    agree = 0
                    while agree < min(len(f), len(ids)) and f[agree] == ids[agree]:
                        agree += 1
                    r["greedy_agree"] = agree
                except Exception as ex:
                    r["hf_eager"] = {"error": repr(ex)[-600:]}
                    log(f"!! {kind} HF eager: {r['hf_eager']['error']}")
                report(results, out)
                if not a.no_compile:
                    try:
                        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                        t0 = time.time()
                        ms, _ = hf_per_token(torch, model, prompt, cache, n1, n2)
                        r["hf_compile"] = {"ms": ms, "with_compile_s": time.time() - t0}
                        log(f"   HF torch.compile reduce-overhead: {ms:.4f} ms/token")
                    except Exception as ex:
                        r["hf_compile"] = {"error": repr(ex)[-600:]}
                        log(f"!! {kind} HF compile: {r['hf_compile']['error']}")
        except Exception as ex:  # one model failing keeps the others
            r["error"] = repr(ex)[-600:]
            log(f"!! {kind}: {r['error']}")
        del model
        torch.cuda.empty_cache()
        report(results, out)
    log(report(results, out))


def report(results, out):
    """decode.json and the table in decode.md, after every step (a timeout
    keeps what was measured)."""
    (out / "decode.json").write_text(json.dumps(results, indent=1))
    rows = ["| model | context | floor ms | fusec ms/token (bench) | fraction | fusec ms/token (steps) | HF eager | "
            "HF reduce-overhead | compile / fusec | greedy ids agree | fusec host us/step |", "|" + "---|" * 11]

    def c(x, s=".4f"):
        return format(x, s) if isinstance(x, (int, float)) else "-"
    for kind, r in results.items():
        f = r.get("fusec", {})
        fb, fs = f.get("bench_ms"), f.get("step_ms")
        he, hc = r.get("hf_eager", {}).get("ms"), r.get("hf_compile", {}).get("ms")
        fl = r.get("floor_ms")
        rows.append(f"| {kind} | {r['context']} | {c(fl)} | {c(fb)} | {c(fl / fb if fl and fb else None, '.0%')} | "
                    f"{c(fs)} | {c(he)} | {c(hc)} | {c(hc / fb if hc and fb else None, '.2f')}x | "
                    f"{r.get('greedy_agree', '-')} / {len(f.get('ids', []))} | {c(f.get('host_us'), '.1f')} |")
        for what, d in (("", r), ("fusec ", f), ("HF eager ", r.get("hf_eager", {})), ("HF compile ", r.get("hf_compile", {}))):
            if "error" in d:
                rows.append(f"| {kind} {what}error | {d['error']} |")
    table = "\n".join(rows)
    (out / "decode.md").write_text(table + "\n")
    return table


if __name__ == "__main__":
    main()

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
    time's fraction of it;
  - --batches (1,8,32): at B > 1 the same steps for B copies of the prompt
    (fusec --batch, HF generate on a batch of B and a StaticCache of B
    rows), per token of the batch (one step);
  - prefill of a --prefill-len (512) token prompt: fusec's prefill program
    (--prefill-bench runs) beside the HF model's forward over the prompt
    into its static cache, eager and under torch.compile (default mode;
    reduce-overhead's graphs are per shape as well);
  - teacher forcing: the prompt and eager's greedy continuation fed one
    token a step (fusec --force), each step's argmax against the f32 model's
    over the same sequence (one forward without a cache), beside bf16
    eager's argmax against the same f32 one: how often each agrees.

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


def prepare(torch, kind, work, keep_f32=False):
    import decode_irgen
    import hf

    m32 = hf.build(kind, PRESET[kind], device="cuda")
    model = hf.to_bf16(m32)
    if not keep_f32:
        m32 = None
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
    return model, m32, ir, w, weight_bytes, cache_bytes


def run_fusec(gen, ir, w, prompt, tokens, bench, extra=()):
    cmd = [str(gen), str(ir), "--weights", str(w), "--device", "cuda", "--prompt", ",".join(map(str, prompt)),
           "--tokens", str(tokens), "--bench", str(bench), *map(str, extra)]
    log("$ " + " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    log(p.stdout + p.stderr)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-400:]}
    out = {"wall_s": time.time() - t0}
    g = re.search(r"^generated: (.*)$", p.stdout, re.M)
    out["ids"] = [int(x) for x in g.group(1).split()] if g else []
    am = re.search(r"^argmax: (.*)$", p.stdout, re.M)
    if am:
        out["argmax"] = [int(x) for x in am.group(1).split()]
    pb = re.search(r"prefill bench: .* ([0-9.]+) ms/prefill", p.stdout)
    out["prefill_ms"] = float(pb.group(1)) if pb else None
    d = re.search(r"decode ([0-9.]+) ms/token", p.stdout)
    b = re.search(r"bench: .* ([0-9.]+) ms/token", p.stdout)
    c = re.search(r"compiled .* in ([0-9.]+) ms", p.stdout)
    h = re.search(r"host ([0-9.]+) us/step", p.stdout)
    out["host_us"] = float(h.group(1)) if h else None
    out["step_ms"] = float(d.group(1)) if d else None
    out["bench_ms"] = float(b.group(1)) if b else None
    out["compile_ms"] = float(c.group(1)) if c else None
    return out


def static_cache(torch, model, ctx, batch=1):
    """A StaticCache of the full context, so that HF's attention covers as
    many positions as fusec's bench steps do; None when this transformers
    builds it otherwise (then generate's own static cache, prompt + new
    tokens long)."""
    try:
        from transformers import StaticCache
    except ImportError:
        return None
    for kw in (dict(config=model.config, max_batch_size=batch, max_cache_len=ctx, device="cuda", dtype=torch.bfloat16),
               dict(config=model.config, max_cache_len=ctx)):
        try:
            return StaticCache(**kw)
        except TypeError:
            continue
    return None


def hf_generate(torch, model, prompt, cache, n, batch=1):
    ids = torch.tensor([prompt] * batch, device="cuda")
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0)
    if cache is not None:
        cache.reset()
        return model.generate(ids, past_key_values=cache, **kw)
    return model.generate(ids, cache_implementation="static", **kw)


def hf_per_token(torch, model, prompt, cache, n1, n2, reps=2, batch=1):
    """ms per token: (t(n2) - t(n1)) / (n2 - n1), best of reps."""
    def timed(n):
        best = 1e9
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = hf_generate(torch, model, prompt, cache, n, batch)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best, out
    timed(n1)  # warm-up (and compile)
    t1, _ = timed(n1)
    t2, out = timed(n2)
    return 1e3 * (t2 - t1) / (n2 - n1), out[0, len(prompt):].tolist()


def sync_ms(torch, fn, reps=5):
    """Best of reps wall times of fn() in ms, the device synchronized."""
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def teacher_forced(torch, model, m32, gen, ir, w, prompt, cont):
    """Each step's argmax with the prompt and cont fed one token at a time:
    fusec's (--force) and bf16 eager's against the f32 model's, all over
    the same sequence (positions len(prompt) - 1 ..)."""
    x = torch.tensor([prompt + cont], device="cuda")
    at = len(prompt) - 1
    a32 = m32(x, use_cache=False).logits[0, at:].argmax(-1).tolist()
    a16 = model(x, use_cache=False).logits[0, at:].argmax(-1).tolist()
    f = run_fusec(gen, ir, w, prompt, 1, 0, ["--force", ",".join(map(str, cont))])
    fa = f.get("argmax", [])
    n = len(a32)
    return {"steps": n, "fusec_agree": sum(1 for i in range(min(n, len(fa))) if fa[i] == a32[i]),
            "eager_agree": sum(1 for i in range(n) if a16[i] == a32[i]), "fusec_steps": len(fa),
            **({"error": f["error"]} if "error" in f else {})}


def hf_prefill_ms(torch, model, ids, cache):
    """The model's forward over the prompt into its static cache."""
    def fn():
        if cache is not None:
            cache.reset()
            model(ids, past_key_values=cache, use_cache=True)
        else:
            model(ids, use_cache=False)
    fn()
    return sync_ms(torch, fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generate", default="build/example_generate")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--bench", type=int, default=300)
    ap.add_argument("--batches", default="1,8,32", help="batch sizes (1 always runs first)")
    ap.add_argument("--prefill-len", type=int, default=512, help="prompt length of the prefill rows (0: none)")
    ap.add_argument("--budget", type=float, default=200, help="seconds: later phases are skipped past it")
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
    T0 = time.time()

    def late(r, what):
        if time.time() - T0 <= a.budget:
            return False
        r.setdefault("skipped", []).append(what)
        log(f"   {what}: skipped (past the {a.budget:.0f} s budget)")
        return True

    batches = [int(b) for b in a.batches.split(",") if int(b) > 1]
    for kind in a.models.split(","):
        r = results[kind] = {"context": CTX[kind]}
        model = m32 = None
        try:
            t0 = time.time()
            model, m32, ir, w, wb, cb = prepare(torch, kind, work, keep_f32=True)
            r.update(weight_bytes=wb, cache_bytes=cb, floor_ms=1e3 * (wb + cb) / COPY_BW)
            log(f"== {kind}: {wb / 1e6:.0f} MB of weights, {cb / 1e6:.1f} MB of cache, floor "
                f"{r['floor_ms']:.4f} ms/token (prepared in {time.time() - t0:.0f} s)")
            V = model.config.vocab_size
            prompt = [(17 * i + 3) % V for i in range(16)]
            r["fusec"] = run_fusec(a.generate, ir, w, prompt, a.tokens, a.bench)
            report(results, out)
            cache = static_cache(torch, model, CTX[kind])
            r["hf_cache"] = f"StaticCache of {CTX[kind]}" if cache is not None else "generate's static cache"
            n1, n2 = 8, 8 + a.tokens
            eager_forward = model.forward
            with torch.no_grad():
                ids = []
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
                if ids and not late(r, "teacher forcing"):
                    try:
                        r["teacher"] = teacher_forced(torch, model, m32, a.generate, ir, w, prompt, ids[: a.tokens - 1])
                        t = r["teacher"]
                        log(f"   teacher-forced argmax = f32's: fusec {t['fusec_agree']}/{t['steps']}, "
                            f"bf16 eager {t['eager_agree']}/{t['steps']}")
                    except Exception as ex:
                        r["teacher"] = {"error": repr(ex)[-600:]}
                        log(f"!! {kind} teacher forcing: {r['teacher']['error']}")
                m32 = None
                torch.cuda.empty_cache()
                report(results, out)
                if not a.no_compile:
                    try:
                        model.forward = torch.compile(eager_forward, mode="reduce-overhead", fullgraph=True)
                        t0 = time.time()
                        ms, _ = hf_per_token(torch, model, prompt, cache, n1, n2)
                        r["hf_compile"] = {"ms": ms, "with_compile_s": time.time() - t0}
                        log(f"   HF torch.compile reduce-overhead: {ms:.4f} ms/token")
                    except Exception as ex:
                        r["hf_compile"] = {"error": repr(ex)[-600:]}
                        log(f"!! {kind} HF compile: {r['hf_compile']['error']}")
                compiled_forward = model.forward
                # B > 1: one step decodes B rows; per step = per token of the batch.
                for B in batches:
                    if late(r, f"B={B}"):
                        break
                    rb = r.setdefault("batch", {}).setdefault(str(B), {})
                    rb["fusec"] = run_fusec(a.generate, ir, w, prompt, 8, max(a.bench // 3, 20), ["--batch", B])
                    nb1, nb2 = 4, 4 + max(a.tokens // 2, 8)
                    try:
                        cb_ = static_cache(torch, model, CTX[kind], B)
                        model.forward = eager_forward
                        rb["hf_eager"], _ = hf_per_token(torch, model, prompt, cb_, nb1, nb2, reps=1, batch=B)
                        if not a.no_compile:
                            model.forward = compiled_forward
                            rb["hf_compile"], _ = hf_per_token(torch, model, prompt, cb_, nb1, nb2, reps=1, batch=B)
                        log(f"   B={B}: fusec {rb['fusec'].get('bench_ms')} ms/step, HF eager {rb.get('hf_eager')}, "
                            f"reduce-overhead {rb.get('hf_compile')}")
                        del cb_
                    except Exception as ex:
                        rb["error"] = repr(ex)[-600:]
                        log(f"!! {kind} B={B}: {rb['error']}")
                    torch.cuda.empty_cache()
                    report(results, out)
                model.forward = eager_forward
                # Prefill of a long prompt.
                if a.prefill_len > 0 and not late(r, f"prefill {a.prefill_len}"):
                    pp = [(31 * i + 7) % V for i in range(a.prefill_len)]
                    rp = r["prefill"] = {"tokens": a.prefill_len}
                    rp["fusec"] = run_fusec(a.generate, ir, w, pp, 2, 0, ["--prefill-bench", 20]).get("prefill_ms")
                    try:
                        x = torch.tensor([pp], device="cuda")
                        rp["hf_eager"] = hf_prefill_ms(torch, model, x, cache)
                        log(f"   prefill {a.prefill_len}: fusec {rp['fusec']} ms, HF eager {rp['hf_eager']:.3f} ms")
                    except Exception as ex:
                        rp["error"] = repr(ex)[-600:]
                        log(f"!! {kind} prefill: {rp['error']}")
        except Exception as ex:  # one model failing keeps the others
            r["error"] = repr(ex)[-600:]
            log(f"!! {kind}: {r['error']}")
        del model, m32
        torch.cuda.empty_cache()
        report(results, out)
    log(report(results, out))


def report(results, out):
    """decode.json and the tables in decode.md, after every step (a timeout
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
    rows += ["", "| model | B | fusec ms/step | HF eager | HF reduce-overhead | compile / fusec |", "|" + "---|" * 6]
    for kind, r in results.items():
        for B, rb in r.get("batch", {}).items():
            fb, hc = rb.get("fusec", {}).get("bench_ms"), rb.get("hf_compile")
            rows.append(f"| {kind} | {B} | {c(fb)} | {c(rb.get('hf_eager'))} | {c(hc)} | "
                        f"{c(hc / fb if hc and fb else None, '.2f')}x |")
            if "error" in rb or "error" in rb.get("fusec", {}):
                rows.append(f"| {kind} B={B} error | {rb.get('error') or rb['fusec']['error']} |")
    rows += ["", "| model | prefill tokens | fusec ms | HF eager ms | eager / fusec | teacher-forced argmax = f32: "
             "fusec | bf16 eager |", "|" + "---|" * 7]
    for kind, r in results.items():
        rp, t = r.get("prefill", {}), r.get("teacher", {})
        fp, hp = rp.get("fusec"), rp.get("hf_eager")
        rows.append(f"| {kind} | {rp.get('tokens', '-')} | {c(fp, '.3f')} | {c(hp, '.3f')} | "
                    f"{c(hp / fp if hp and fp else None, '.2f')}x | {t.get('fusec_agree', '-')} / {t.get('steps', '-')} | "
                    f"{t.get('eager_agree', '-')} / {t.get('steps', '-')} |")
        for what, d in (("prefill ", rp), ("teacher ", t)):
            if "error" in d:
                rows.append(f"| {kind} {what}error | {d['error']} |")
        if r.get("skipped"):
            rows.append(f"| {kind} skipped (budget) | {', '.join(r['skipped'])} |")
    table = "\n".join(rows)
    (out / "decode.md").write_text(table + "\n")
    return table


if __name__ == "__main__":
    main()

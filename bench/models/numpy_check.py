#!/usr/bin/env python3
"""numpy_check.py - the whole-model graphs of irgen.py against NumPy, without torch.

    python3 bench/models/numpy_check.py [--fusec build/fusec] [--devices ref,cpu]

Writes tiny GPT-2 and Llama graphs (2 layers; Llama with grouped-query
attention in both of irgen's forms), random weights as one safetensors file
(written here by hand: 8-byte header length, JSON, data), token ids and
rotary tables as .npy, runs `fusec G.ir --bind .. --weights W --inputs ..
--run --device=D --save-outputs` on each device that this fusec has, and
compares the logits with a float64 NumPy forward pass written the way
Hugging Face's modeling code computes it. f32 graphs must match to a relative
L2 error of 1e-5 and bf16 graphs to 3e-2. bench/whole_model.py --tiny
checks the same graphs against Hugging Face itself (it needs torch).

Exit 0 when every comparison passes, 1 otherwise; 77 (a skip) when this fusec
has no --weights (built without cJSON).
"""
import argparse
import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import irgen  # noqa: E402

GPT2 = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=97, n_positions=32, layer_norm_epsilon=1e-5)
LLAMA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=48, vocab_size=97, rms_norm_eps=1e-5, tie_word_embeddings=False)
THETA = 10000.0
B, T = 2, 9


def save_safetensors(path, tensors, dtype="F32"):
    """tensors: name -> float32 array, in order; stored as F32, or as BF16 (the
    top halves of the float32 bits: exact for values that bf16_round made)."""
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        b = a.astype("<f4").tobytes() if dtype == "F32" else (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_round(a):
    """float32 to the nearest bf16 (ties to even), as float32: what fusec
    does with an f32 input for a bf16 parameter."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def random_weights(params, n_inputs, rng):
    """HF-like init, a little wider so that every part of the model matters:
    matrices N(0, 0.1), norm weights 1 + N(0, 0.1), biases N(0, 0.05)."""
    w = {}
    for name, _, shape in params[n_inputs:]:
        if name.endswith("bias"):
            a = rng.normal(0, 0.05, shape)
        elif len(shape) == 1:
            a = 1 + rng.normal(0, 0.1, shape)
        else:
            a = rng.normal(0, 0.1 if "wpe" not in name else 0.05, shape)
        w[name] = a.astype(np.float32)
    return w


def softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def causal_attention(q, k, v):
    D = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    n = s.shape[-1]
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return softmax(s) @ v


def layernorm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def gpt2_ref(cfg, w, ids):
    C, H = cfg["n_embd"], cfg["n_head"]
    D, eps = C // H, cfg["layer_norm_epsilon"]
    W = {k: v.astype(np.float64) for k, v in w.items()}
    Bn, Tn = ids.shape
    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][:Tn]
    heads = lambda t: t.reshape(Bn, Tn, H, D).transpose(0, 2, 1, 3)  # noqa: E731
    for i in range(cfg["n_layer"]):
        p = lambda n: W[f"transformer.h.{i}.{n}"]  # noqa: E731
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = np.split(h @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
        a = causal_attention(heads(q), heads(k), heads(v)).transpose(0, 2, 1, 3).reshape(Bn, Tn, C)
        x = x + a @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layernorm(x, p("ln_2.weight"), p("ln_2.bias"), eps)
        f = h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")
        g = 0.5 * f * (1 + np.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        x = x + g @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = layernorm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return x @ W["transformer.wte.weight"].T


def rope(T_, D):
    inv = 1.0 / (THETA ** (np.arange(0, D, 2, dtype=np.float64) / D))
    f = np.arange(T_, dtype=np.float64)[:, None] * inv[None]
    e = np.concatenate([f, f], -1)
    return np.cos(e), np.sin(e)


def llama_ref(cfg, w, ids, cos, sin):
    Hd, NH, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, G = Hd // NH, cfg["rms_norm_eps"], NH // KV
    W = {k: v.astype(np.float64) for k, v in w.items()}
    Bn, Tn = ids.shape
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731

    def rot(t):
        h = D // 2
        return t * cos + np.concatenate([-t[..., h:], t[..., :h]], -1) * sin

    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = lambda n: W[f"model.layers.{i}.{n}"]  # noqa: E731
        h = rms(x, p("input_layernorm.weight"))
        q = (h @ p("self_attn.q_proj.weight").T).reshape(Bn, Tn, NH, D).transpose(0, 2, 1, 3)
        k = (h @ p("self_attn.k_proj.weight").T).reshape(Bn, Tn, KV, D).transpose(0, 2, 1, 3)
        v = (h @ p("self_attn.v_proj.weight").T).reshape(Bn, Tn, KV, D).transpose(0, 2, 1, 3)
        k, v = np.repeat(rot(k), G, axis=1), np.repeat(v, G, axis=1)  # HF's repeat_kv: head h uses h // G
        a = causal_attention(rot(q), k, v).transpose(0, 2, 1, 3).reshape(Bn, Tn, NH * D)
        x = x + a @ p("self_attn.o_proj.weight").T
        h = rms(x, p("post_attention_layernorm.weight"))
        gt = h @ p("mlp.gate_proj.weight").T
        x = x + ((gt / (1 + np.exp(-gt))) * (h @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    x = rms(x, W["model.norm.weight"])
    return x @ W["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fusec", default=str(Path(__file__).resolve().parents[2] / "build" / "fusec"))
    ap.add_argument("--devices", default="ref,cpu", help="those of these that this fusec has")
    args = ap.parse_args()
    have = subprocess.run([args.fusec, "--devices"], capture_output=True, text=True).stdout.split()
    devices = [d for d in args.devices.split(",") if d in have]
    rng = np.random.default_rng(7)
    fails, n = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ids = rng.integers(0, 97, (B, T)).astype(np.int64)
        np.save(tmp / "ids.npy", ids)
        D = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
        cos, sin = rope(T, D)
        np.save(tmp / "cos.npy", cos.astype(np.float32))
        np.save(tmp / "sin.npy", sin.astype(np.float32))
        cases = [("gpt2", None), ("llama", "broadcast"), ("llama", "expand")]
        for kind, gqa in cases:
            _, params = irgen.gpt2_ir(GPT2, "f32") if kind == "gpt2" else irgen.llama_ir(LLAMA, "f32", gqa)
            nin = 1 if kind == "gpt2" else 3
            w = random_weights(params, nin, rng)
            for dt, tol in (("f32", 1e-5), ("bf16", 3e-2)):
                text, _ = irgen.gpt2_ir(GPT2, dt) if kind == "gpt2" else irgen.llama_ir(LLAMA, dt, gqa)
                g = tmp / f"{kind}_{gqa}_{dt}.ir"
                g.write_text(text)
                # A bf16 graph binds bf16 tensors; its reference takes the same rounded weights.
                wd = w if dt == "f32" else {k: bf16_round(v) for k, v in w.items()}
                st = tmp / f"{kind}_{dt}.safetensors"
                save_safetensors(st, wd, "F32" if dt == "f32" else "BF16")
                if kind == "gpt2":
                    ref = gpt2_ref(GPT2, wd, ids)
                    inputs = [tmp / "ids.npy"]
                else:
                    c, s = (cos, sin) if dt == "f32" else (bf16_round(cos), bf16_round(sin))
                    ref = llama_ref(LLAMA, wd, ids, c.astype(np.float64), s.astype(np.float64))
                    inputs = [tmp / "ids.npy", tmp / "cos.npy", tmp / "sin.npy"]
                for dev in devices:
                    out = tmp / f"out_{kind}_{dt}_{dev}"
                    cmd = [args.fusec, g, "--bind", f"B={B},T={T}", "--weights", st, "--inputs",
                           ",".join(map(str, inputs)), "--run", f"--device={dev}", "--save-outputs", out]
                    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
                    name = f"{kind}{'/' + gqa if gqa else ''} {dt} on {dev}"
                    n += 1
                    if p.returncode != 0:
                        if "without the ONNX importer" in p.stderr:
                            print("SKIP: this fusec has no --weights (built without cJSON)")
                            return 77
                        fails.append(f"{name}: fusec exit {p.returncode}: {p.stderr.strip()[-300:]}")
                        continue
                    y = np.load(out / "out0.npy").astype(np.float64)
                    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                    ok = y.shape == ref.shape and err <= tol
                    print(f"{'ok  ' if ok else 'FAIL'} {name}: logits {list(y.shape)}, rel L2 {err:.3g} (tolerance {tol:g})")
                    if not ok:
                        fails.append(f"{name}: rel L2 {err:.3g} > {tol:g}")
    print(f"{n - len(fails)} passed, {len(fails)} failed")
    for f in fails:
        print("  " + f)
    return 1 if fails or not n else 0


if __name__ == "__main__":
    sys.exit(main())

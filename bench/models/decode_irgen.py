"""decode_irgen.py - GPT-2 and Llama-style models written out as fusec .ir
graphs that decode with a key/value cache (docs/DECODE.md).

One graph serves prefill and decode: T (the tokens of this call) is a
symbol, bound to the prompt's length for prefill and to 1 for a decode step;
both programs share the weights and the caches (the same buffers passed to
each). The per-call inputs are first:

  %input_ids: i64[B, T]     the tokens of this call
  %pos: i64[]               the position of the first of them (the cache's fill)

then one inout cache per layer and per k/v, [B, heads_kv, ctx, head_dim],
then the weights, named as the Hugging Face state_dict names them (as
irgen.py does, so one safetensors file binds both this graph and irgen's
whole-sequence graph). The rotary tables of the Llama graph, rope.cos and
rope.sin [ctx, head_dim], are weights: the rows of the call's positions are
gathered (gather by %pos + iota), so rotary embeddings need no new op.

  python3 bench/models/decode_irgen.py --arch gpt2 --layers 2 --embd 64 \
      --heads 4 --vocab 128 --ctx 32 --dtype f32 [--full] > model.ir

--full appends irgen.py's whole-sequence graph of the same model (no
cache), which tests/test_decode.c recomputes each step against.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import irgen  # noqa: E402


def _positions(g):
    """%pids = pos + iota over T, and %len = the last of them + 1: the cache's
    fill after this call's tokens are written (a reduce_max, since T is a
    symbol until bound)."""
    io = g.op("iota_t", "iota(shape=[T], axis=0, dtype=i64)")
    pids = g.op("pids", f"add({io}, %pos) : i64[T]")
    last = g.op("last", f"reduce_max({pids}, axes=[0])")
    return pids, g.op("len", f"add({last}, 1) : i64[]")


def gpt2_decode_ir(cfg, dtype, ctx):
    C, L, H = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    V, P = cfg["vocab_size"], cfg["n_positions"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    D = C // H
    g = irgen._Graph("gpt2_decode", dtype)
    ids = g.param("input_ids", ["B", "T"], "i64")
    g.param("pos", [], "i64")
    caches = []
    for i in range(L):
        caches.append((g.param(f"cache.{i}.k", ["B", H, ctx, D], "inout " + dtype),
                       g.param(f"cache.{i}.v", ["B", H, ctx, D], "inout " + dtype)))
    wte = g.param("transformer.wte.weight", [V, C])
    wpe = g.param("transformer.wpe.weight", [P, C])
    g.comment("token and position embeddings; the positions are pos .. pos + T - 1")
    pids, ln = _positions(g)
    tok = g.op("tok", f"gather({wte}, {ids}) : {dtype}[B, T, {C}]")
    pe = g.op("pe", f"gather({wpe}, {pids}) : {dtype}[T, {C}]")
    x = g.op("x0", f"add({tok}, {pe}) : {dtype}[B, T, {C}]")
    for i in range(L):
        p = f"transformer.h.{i}."
        ln1w, ln1b = g.param(p + "ln_1.weight", [C]), g.param(p + "ln_1.bias", [C])
        aw, ab = g.param(p + "attn.c_attn.weight", [C, 3 * C]), g.param(p + "attn.c_attn.bias", [3 * C])
        pw, pb = g.param(p + "attn.c_proj.weight", [C, C]), g.param(p + "attn.c_proj.bias", [C])
        ln2w, ln2b = g.param(p + "ln_2.weight", [C]), g.param(p + "ln_2.bias", [C])
        fw, fb = g.param(p + "mlp.c_fc.weight", [C, 4 * C]), g.param(p + "mlp.c_fc.bias", [4 * C])
        ow, ob = g.param(p + "mlp.c_proj.weight", [4 * C, C]), g.param(p + "mlp.c_proj.bias", [C])
        n = f"l{i}."
        g.comment(f"block {i}: this call's keys and values go into the cache at pos")
        h = g.op(n + "ln1", f"layernorm({x}, {ln1w}, {ln1b}, axis=-1, eps={eps!r})")
        qkv = g.op(n + "qkv", f"add({g.op(n + 'qkv0', f'matmul({h}, {aw})')}, {ab}) : {dtype}[B, T, {3 * C}]")
        g.lines.append(f"  %{n}q0, %{n}k0, %{n}v0 = split({qkv}, axis=-1, sizes=[{C}, {C}, {C}])")
        heads = []
        for t in "qkv":
            r = g.op(n + t + "1", f"reshape(%{n}{t}0, shape=[B, T, {H}, {D}])")
            heads.append(g.op(n + t, f"permute({r}, perm=[0, 2, 1, 3]) : {dtype}[B, {H}, T, {D}]"))
        kc = g.op(n + "kc", f"update_slice({caches[i][0]}, {heads[1]}, %pos, axis=2)")
        vc = g.op(n + "vc", f"update_slice({caches[i][1]}, {heads[2]}, %pos, axis=2)")
        a = g.op(n + "att", f"cache_attention({heads[0]}, {kc}, {vc}, {ln}) : {dtype}[B, {H}, T, {D}]")
        a = g.op(n + "att1", f"permute({a}, perm=[0, 2, 1, 3])")
        a = g.op(n + "att2", f"reshape({a}, shape=[B, T, {C}])")
        o = g.op(n + "o", f"add({g.op(n + 'o0', f'matmul({a}, {pw})')}, {pb})")
        x1 = g.op(n + "x1", f"add({x}, {o}) : {dtype}[B, T, {C}]")
        h2 = g.op(n + "ln2", f"layernorm({x1}, {ln2w}, {ln2b}, axis=-1, eps={eps!r})")
        f = g.op(n + "fc", f"add({g.op(n + 'fc0', f'matmul({h2}, {fw})')}, {fb})")
        ge = g.op(n + "gelu", f"gelu_tanh({f})")
        m = g.op(n + "mlp", f"add({g.op(n + 'mlp0', f'matmul({ge}, {ow})')}, {ob})")
        x = g.op(f"x{i + 1}", f"add({x1}, {m}) : {dtype}[B, T, {C}]")
    fw_, fb_ = g.param("transformer.ln_f.weight", [C]), g.param("transformer.ln_f.bias", [C])
    hf = g.op("ln_f", f"layernorm({x}, {fw_}, {fb_}, axis=-1, eps={eps!r})")
    wt = g.op("wte_t", f"permute({wte}, perm=[1, 0]) : {dtype}[{C}, {V}]")
    g.op("logits", f"matmul({hf}, {wt}) : {dtype}[B, T, {V}]")
    header = [
        f"GPT-2 decoding with a key/value cache of {ctx} positions (bench/models/decode_irgen.py):",
        f"{L} layers, width {C}, {H} heads of {D}, vocabulary {V}, {dtype}. Bind B, and T (1 to decode).",
    ]
    return g.text(header, "%logits"), g.params


def llama_decode_ir(cfg, dtype, ctx):
    Hd, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    D = cfg.get("head_dim") or Hd // NH
    eps = cfg.get("rms_norm_eps", 1e-6)
    tied = cfg.get("tie_word_embeddings", False)
    half = D // 2
    g = irgen._Graph("llama_decode", dtype)
    ids = g.param("input_ids", ["B", "T"], "i64")
    g.param("pos", [], "i64")
    caches = []
    for i in range(L):
        caches.append((g.param(f"cache.{i}.k", ["B", KV, ctx, D], "inout " + dtype),
                       g.param(f"cache.{i}.v", ["B", KV, ctx, D], "inout " + dtype)))
    rc, rs = g.param("rope.cos", [ctx, D]), g.param("rope.sin", [ctx, D])
    emb = g.param("model.embed_tokens.weight", [V, Hd])
    g.comment("the rotary rows of positions pos .. pos + T - 1")
    pids, ln = _positions(g)
    cos = g.op("cos", f"gather({rc}, {pids}) : {dtype}[T, {D}]")
    sin = g.op("sin", f"gather({rs}, {pids}) : {dtype}[T, {D}]")
    x = g.op("x0", f"gather({emb}, {ids}) : {dtype}[B, T, {Hd}]")
    for i in range(L):
        p = f"model.layers.{i}."
        n1 = g.param(p + "input_layernorm.weight", [Hd])
        wq = g.param(p + "self_attn.q_proj.weight", [NH * D, Hd])
        wk = g.param(p + "self_attn.k_proj.weight", [KV * D, Hd])
        wv = g.param(p + "self_attn.v_proj.weight", [KV * D, Hd])
        wo = g.param(p + "self_attn.o_proj.weight", [Hd, NH * D])
        n2 = g.param(p + "post_attention_layernorm.weight", [Hd])
        wg = g.param(p + "mlp.gate_proj.weight", [I, Hd])
        wu = g.param(p + "mlp.up_proj.weight", [I, Hd])
        wd = g.param(p + "mlp.down_proj.weight", [Hd, I])
        n = f"l{i}."
        g.comment(f"layer {i}")
        h = g.op(n + "h", f"rmsnorm({x}, {n1}, eps={eps!r}) : {dtype}[B, T, {Hd}]")
        hd = {}
        for t, w, nh in (("q", wq, NH), ("k", wk, KV), ("v", wv, KV)):
            y = irgen._linear_t(g, h, w, n + t + "0")
            r = g.op(n + t + "1", f"reshape({y}, shape=[B, T, {nh}, {D}])")
            hd[t] = g.op(n + t, f"permute({r}, perm=[0, 2, 1, 3]) : {dtype}[B, {nh}, T, {D}]")
        rot = {}
        for t in "qk":
            v = hd[t]
            lo = g.op(n + t + "_lo", f"slice({v}, axis=-1, start=0, end={half})")
            hi = g.op(n + t + "_hi", f"slice({v}, axis=-1, start={half}, end={D})")
            hin = g.op(n + t + "_hin", f"neg({hi})")
            rh = g.op(n + t + "_rot", f"concat({hin}, {lo}, axis=-1)")
            c = g.op(n + t + "_c", f"mul({v}, {cos})")
            s = g.op(n + t + "_s", f"mul({rh}, {sin})")
            rot[t] = g.op(n + t + "r", f"add({c}, {s})")
        kc = g.op(n + "kc", f"update_slice({caches[i][0]}, {rot['k']}, %pos, axis=2)")
        vc = g.op(n + "vc", f"update_slice({caches[i][1]}, {hd['v']}, %pos, axis=2)")
        a = g.op(n + "att", f"cache_attention({rot['q']}, {kc}, {vc}, {ln}) : {dtype}[B, {NH}, T, {D}]")
        a = g.op(n + "att1", f"permute({a}, perm=[0, 2, 1, 3])")
        a = g.op(n + "att2", f"reshape({a}, shape=[B, T, {NH * D}])")
        o = irgen._linear_t(g, a, wo, n + "o")
        x1 = g.op(n + "x1", f"add({x}, {o}) : {dtype}[B, T, {Hd}]")
        h2 = g.op(n + "h2", f"rmsnorm({x1}, {n2}, eps={eps!r})")
        gate = irgen._linear_t(g, h2, wg, n + "gate")
        up = irgen._linear_t(g, h2, wu, n + "up")
        gu = g.op(n + "gu", f"mul({g.op(n + 'sg', f'silu({gate})')}, {up}) : {dtype}[B, T, {I}]")
        dn = irgen._linear_t(g, gu, wd, n + "down")
        x = g.op(f"x{i + 1}", f"add({x1}, {dn}) : {dtype}[B, T, {Hd}]")
    nw = g.param("model.norm.weight", [Hd])
    hf = g.op("norm", f"rmsnorm({x}, {nw}, eps={eps!r})")
    head = emb if tied else g.param("lm_head.weight", [V, Hd])
    irgen._linear_t(g, hf, head, "logits")
    header = [
        f"Llama-style decoding with a key/value cache of {ctx} positions (bench/models/decode_irgen.py):",
        f"{L} layers, hidden {Hd}, {NH}/{KV} heads of {D}, MLP {I}, vocabulary {V}, {dtype}. Bind B and T.",
    ]
    return g.text(header, "%logits"), g.params


def config(args):
    if args.arch == "gpt2":
        return {"n_embd": args.embd, "n_layer": args.layers, "n_head": args.heads, "vocab_size": args.vocab,
                "n_positions": args.ctx}
    return {"hidden_size": args.embd, "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
            "num_key_value_heads": args.kv_heads or args.heads, "intermediate_size": args.mlp or 4 * args.embd,
            "vocab_size": args.vocab, "tie_word_embeddings": args.tied}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--mlp", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--full", action="store_true", help="append the whole-sequence graph (no cache)")
    args = ap.parse_args()
    cfg = config(args)
    if args.arch == "gpt2":
        text, _ = gpt2_decode_ir(cfg, args.dtype, args.ctx)
        full = irgen.gpt2_ir(cfg, args.dtype)[0] if args.full else ""
    else:
        text, _ = llama_decode_ir(cfg, args.dtype, args.ctx)
        full = irgen.llama_ir(cfg, args.dtype)[0] if args.full else ""
    cmd = "# python3 bench/models/decode_irgen.py " + " ".join(sys.argv[1:]) + "\n"
    sys.stdout.write(cmd + text + ("\n" + full if full else ""))


if __name__ == "__main__":
    main()

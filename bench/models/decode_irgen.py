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


def _positions(g, comment):
    """After the comment, %pids = pos + iota over T, and %len = the last of
    them + 1: the cache's fill after this call's tokens are written (a
    reduce_max, since T is a symbol until bound)."""
    g.comment(comment)
    io = g.op("iota_t", "iota(shape=[T], axis=0, dtype=i64)")
    pids = g.op("pids", f"add({io}, %pos) : i64[T]")
    last = g.op("last", f"reduce_max({pids}, axes=[0])")
    return pids, g.op("len", f"add({last}, 1) : i64[]")


def _inputs(name, dtype, L, heads, ctx, D):
    """A graph with the per-call inputs (%input_ids, %pos) and one inout
    (k, v) cache pair per layer, [B, heads, ctx, D]: (g, ids, caches)."""
    g = irgen._Graph(name, dtype)
    ids = g.param("input_ids", ["B", "T"], "i64")
    g.param("pos", [], "i64")
    dt = "inout " + dtype
    caches = [(g.param(f"cache.{i}.k", ["B", heads, ctx, D], dt), g.param(f"cache.{i}.v", ["B", heads, ctx, D], dt))
              for i in range(L)]
    return g, ids, caches


def _cache_attention(g, n, cache, q, k, v, ln, heads, D):
    """This call's k and v written into the layer's cache at %pos, and q's
    attention over the first ln positions of it: [B, heads, T, D]."""
    kc = g.op(n + "kc", f"update_slice({cache[0]}, {k}, %pos, axis=2)")
    vc = g.op(n + "vc", f"update_slice({cache[1]}, {v}, %pos, axis=2)")
    return g.op(n + "att", f"cache_attention({q}, {kc}, {vc}, {ln}) : {g.dt}[B, {heads}, T, {D}]")


def gpt2_decode_ir(cfg, dtype, ctx):
    C, L, H, V, P, eps, D = irgen._gpt2_dims(cfg)
    g, ids, caches = _inputs("gpt2_decode", dtype, L, H, ctx, D)
    wte = g.param("transformer.wte.weight", [V, C])
    wpe = g.param("transformer.wpe.weight", [P, C])
    pids, ln = _positions(g, "token and position embeddings; the positions are pos .. pos + T - 1")
    tok = g.op("tok", f"gather({wte}, {ids}) : {dtype}[B, T, {C}]")
    pe = g.op("pe", f"gather({wpe}, {pids}) : {dtype}[T, {C}]")
    x = g.op("x0", f"add({tok}, {pe}) : {dtype}[B, T, {C}]")
    for i in range(L):
        w = irgen._gpt2_block_params(g, i, C)
        n = f"l{i}."
        g.comment(f"block {i}: this call's keys and values go into the cache at pos")
        heads = irgen._gpt2_heads(g, n, x, w, eps, C, H, D)
        a = _cache_attention(g, n, caches[i], heads[0], heads[1], heads[2], ln, H, D)
        x = irgen._gpt2_block_out(g, i, n, x, a, w, eps, "gelu_tanh", C)
    irgen._gpt2_lm_head(g, x, wte, eps, C, V)
    header = [
        f"GPT-2 decoding with a key/value cache of {ctx} positions (bench/models/decode_irgen.py):",
        f"{L} layers, width {C}, {H} heads of {D}, vocabulary {V}, {dtype}. Bind B, and T (1 to decode).",
    ]
    return g.text(header, "%logits"), g.params


def llama_decode_ir(cfg, dtype, ctx):
    Hd, L, NH, KV, I, V, D, eps, tied = irgen._llama_dims(cfg)
    g, ids, caches = _inputs("llama_decode", dtype, L, KV, ctx, D)
    rc, rs = g.param("rope.cos", [ctx, D]), g.param("rope.sin", [ctx, D])
    emb = g.param("model.embed_tokens.weight", [V, Hd])
    pids, ln = _positions(g, "the rotary rows of positions pos .. pos + T - 1")
    cos = g.op("cos", f"gather({rc}, {pids}) : {dtype}[T, {D}]")
    sin = g.op("sin", f"gather({rs}, {pids}) : {dtype}[T, {D}]")
    x = g.op("x0", f"gather({emb}, {ids}) : {dtype}[B, T, {Hd}]")
    for i in range(L):
        w = irgen._llama_layer_params(g, i, Hd, NH, KV, D, I)
        n = f"l{i}."
        g.comment(f"layer {i}")
        h = g.op(n + "h", f"rmsnorm({x}, {w['n1']}, eps={eps!r}) : {dtype}[B, T, {Hd}]")
        hd = {}
        for t, nh in (("q", NH), ("k", KV), ("v", KV)):
            y = irgen._linear_t(g, h, w["w" + t], n + t + "0")
            r = g.op(n + t + "1", f"reshape({y}, shape=[B, T, {nh}, {D}])")
            hd[t] = g.op(n + t, f"permute({r}, perm=[0, 2, 1, 3]) : {dtype}[B, {nh}, T, {D}]")
        rot = irgen._rotate(g, n, hd, cos, sin, D)
        a = _cache_attention(g, n, caches[i], rot["q"], rot["k"], hd["v"], ln, NH, D)
        a = g.op(n + "att1", f"permute({a}, perm=[0, 2, 1, 3])")
        x = irgen._llama_layer_out(g, i, n, x, a, w, eps, Hd, NH * D, I)
    irgen._llama_lm_head(g, x, emb, eps, Hd, V, tied, False)
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

"""irgen.py - whole Hugging Face models written out as one fusec .ir graph.

Each generator takes the model's config (a dict with Hugging Face's field
names) and a dtype, and returns the graph's text and its parameters. The
parameters are named as the model's state_dict names them
(transformer.h.0.attn.c_attn.weight, model.layers.3.mlp.up_proj.weight), so
that a safetensors file of those tensors binds with `fusec --weights`. The
first parameters are the per-call inputs (token ids, the rotary tables),
which fusec takes from --inputs; every other parameter is a weight.

Nothing here imports torch: the text depends on the config alone.

  gpt2_ir(cfg, dtype)          GPT2LMHeadModel: wte + wpe (gather), n_layer
                               pre-LayerNorm blocks (attention through the
                               `attention` op, gelu_tanh MLP), ln_f, the LM head
                               tied to wte (matmul with wte transposed)
  llama_ir(cfg, dtype, gqa)    LlamaForCausalLM: embed_tokens (gather), RMSNorm,
                               rotary embedding from %cos/%sin tables [T, head_dim]
                               (rotate_half form), grouped-query attention, SwiGLU
                               MLP, norm, the LM head (tied or lm_head.weight).
                               nn.Linear weights are [out, in] as in the
                               state_dict; the graph multiplies by their
                               transpose (a permute, which fusec folds into
                               the GEMM as trans_b).

Grouped-query attention (fewer key/value heads than query heads), gqa=:
  "broadcast"  q as [B, KV, G, T, D] and k, v as [B, KV, 1, T, D]: the
               attention op's batch dims broadcast, so each key/value head is
               read in place by its G query heads (no copy);
  "expand"     k and v expanded to [B, KV, G, T, D] first (the copy that
               Hugging Face's repeat_kv makes).
Both keep Hugging Face's head order: query head h uses key/value head h // G.
"""

_DT = {"f32", "bf16", "f16"}


def _dims(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


class _Graph:
    """Accumulates parameters and statements; prints the graph."""

    def __init__(self, name, dtype):
        assert dtype in _DT, dtype
        self.name, self.dt = name, dtype
        self.params = []  # (name, dtype, shape)
        self.lines = []

    def param(self, name, shape, dtype=None):
        self.params.append((name, dtype or self.dt, tuple(shape)))
        return "%" + name

    def op(self, out, text):
        self.lines.append(f"  %{out} = {text}")
        return "%" + out

    def comment(self, text):
        self.lines.append(f"  # {text}")

    def text(self, header, ret):
        ps = [f"%{n}: {dt}{_dims(s)}" for n, dt, s in self.params]
        pad = " " * (len(self.name) + 7)
        head = f"graph {self.name}(" + (",\n" + pad).join(ps) + ") {"
        body = "\n".join(self.lines)
        return "".join("# " + h + "\n" for h in header) + head + "\n" + body + f"\n  return {ret}\n}}\n"


def _linear_t(g, x, w, out):
    """x @ w^T for an nn.Linear weight w [out, in]."""
    wt = g.op(out + ".wt", f"permute({w}, perm=[1, 0])")
    return g.op(out, f"matmul({x}, {wt})")


def _gpt2_dims(cfg):
    """(C, L, H, V, P, eps, D) of a GPT-2 config."""
    C, L, H = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    return C, L, H, cfg["vocab_size"], cfg["n_positions"], cfg.get("layer_norm_epsilon", 1e-5), C // H


def _gpt2_block_params(g, i, C):
    """Block i's weights, in the state_dict's order: ln_1 (w, b), c_attn (w, b),
    attn.c_proj (w, b), ln_2 (w, b), c_fc (w, b), mlp.c_proj (w, b)."""
    p = f"transformer.h.{i}."
    shapes = (("ln_1", C, C), ("attn.c_attn", [C, 3 * C], 3 * C), ("attn.c_proj", [C, C], C),
              ("ln_2", C, C), ("mlp.c_fc", [C, 4 * C], 4 * C), ("mlp.c_proj", [4 * C, C], C))
    out = []
    for name, ws, bs in shapes:
        out += [g.param(p + name + ".weight", ws if isinstance(ws, list) else [ws]),
                g.param(p + name + ".bias", [bs])]
    return out


def _gpt2_heads(g, n, x, w, eps, C, H, D):
    """ln_1, the fused qkv projection and its split into q, k, v heads [B, H, T, D]."""
    dtype = g.dt
    h = g.op(n + "ln1", f"layernorm({x}, {w[0]}, {w[1]}, axis=-1, eps={eps!r})")
    qkv = g.op(n + "qkv", f"add({g.op(n + 'qkv0', f'matmul({h}, {w[2]})')}, {w[3]}) : {dtype}[B, T, {3 * C}]")
    g.lines.append(f"  %{n}q0, %{n}k0, %{n}v0 = split({qkv}, axis=-1, sizes=[{C}, {C}, {C}])")
    heads = []
    for t in "qkv":
        r = g.op(n + t + "1", f"reshape(%{n}{t}0, shape=[B, T, {H}, {D}])")
        heads.append(g.op(n + t, f"permute({r}, perm=[0, 2, 1, 3]) : {dtype}[B, {H}, T, {D}]"))
    return heads


def _gpt2_block_out(g, i, n, x, a, w, eps, gelu, C):
    """From the attention's output a [B, H, T, D] to block i's output: the
    heads merged, c_proj, the residual, ln_2, the MLP and its residual."""
    dtype = g.dt
    a = g.op(n + "att1", f"permute({a}, perm=[0, 2, 1, 3])")
    a = g.op(n + "att2", f"reshape({a}, shape=[B, T, {C}])")
    o = g.op(n + "o", f"add({g.op(n + 'o0', f'matmul({a}, {w[4]})')}, {w[5]})")
    x1 = g.op(n + "x1", f"add({x}, {o}) : {dtype}[B, T, {C}]")
    h2 = g.op(n + "ln2", f"layernorm({x1}, {w[6]}, {w[7]}, axis=-1, eps={eps!r})")
    f = g.op(n + "fc", f"add({g.op(n + 'fc0', f'matmul({h2}, {w[8]})')}, {w[9]})")
    ge = g.op(n + "gelu", f"{gelu}({f})")
    m = g.op(n + "mlp", f"add({g.op(n + 'mlp0', f'matmul({ge}, {w[10]})')}, {w[11]})")
    return g.op(f"x{i + 1}", f"add({x1}, {m}) : {dtype}[B, T, {C}]")


def _gpt2_lm_head(g, x, wte, eps, C, V, comment=None):
    """ln_f and the LM head tied to wte; the graph's %logits."""
    fw_, fb_ = g.param("transformer.ln_f.weight", [C]), g.param("transformer.ln_f.bias", [C])
    if comment:
        g.comment(comment)
    hf = g.op("ln_f", f"layernorm({x}, {fw_}, {fb_}, axis=-1, eps={eps!r})")
    wt = g.op("wte_t", f"permute({wte}, perm=[1, 0]) : {g.dt}[{C}, {V}]")
    g.op("logits", f"matmul({hf}, {wt}) : {g.dt}[B, T, {V}]")


def gpt2_ir(cfg, dtype="bf16"):
    """GPT2LMHeadModel as one graph. Returns (text, params): params is a list
    of (name, dtype, shape), the inputs first (input_ids: i64[B, T])."""
    C, L, H, V, P, eps, D = _gpt2_dims(cfg)
    assert C % H == 0
    act = cfg.get("activation_function", "gelu_new")
    gelu = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}[act]
    g = _Graph("gpt2", dtype)
    ids = g.param("input_ids", ["B", "T"], "i64")
    wte = g.param("transformer.wte.weight", [V, C])
    wpe = g.param("transformer.wpe.weight", [P, C])
    g.comment("token and position embeddings")
    tok = g.op("tok", f"gather({wte}, {ids}) : {dtype}[B, T, {C}]")
    pi = g.op("pos_ids", "iota(shape=[T], axis=0, dtype=i32)")
    pos = g.op("pos", f"gather({wpe}, {pi}) : {dtype}[T, {C}]")
    x = g.op("x0", f"add({tok}, {pos}) : {dtype}[B, T, {C}]")
    for i in range(L):
        w = _gpt2_block_params(g, i, C)
        n = f"l{i}."
        g.comment(f"block {i}")
        heads = _gpt2_heads(g, n, x, w, eps, C, H, D)
        a = g.op(n + "att", f"attention({heads[0]}, {heads[1]}, {heads[2]}, causal=true)")
        x = _gpt2_block_out(g, i, n, x, a, w, eps, gelu, C)
    _gpt2_lm_head(g, x, wte, eps, C, V, "final norm; the LM head is tied to wte")
    header = [
        f"GPT2LMHeadModel written out by bench/models/irgen.py: {L} layers, width {C}, {H} heads of {D},",
        f"vocabulary {V}, {dtype}. Parameters are named as the model's state_dict; bind B and T.",
    ]
    return g.text(header, "%logits"), g.params


def _llama_dims(cfg):
    """(Hd, L, NH, KV, I, V, D, eps, tied) of a Llama config."""
    NH = cfg["num_attention_heads"]
    Hd = cfg["hidden_size"]
    return (Hd, cfg["num_hidden_layers"], NH, cfg.get("num_key_value_heads") or NH, cfg["intermediate_size"],
            cfg["vocab_size"], cfg.get("head_dim") or Hd // NH, cfg.get("rms_norm_eps", 1e-6),
            cfg.get("tie_word_embeddings", False))


def _llama_layer_params(g, i, Hd, NH, KV, D, I):
    """Layer i's weights in the state_dict's order, by short name."""
    p = f"model.layers.{i}."
    shapes = (("n1", "input_layernorm", [Hd]), ("wq", "self_attn.q_proj", [NH * D, Hd]),
              ("wk", "self_attn.k_proj", [KV * D, Hd]), ("wv", "self_attn.v_proj", [KV * D, Hd]),
              ("wo", "self_attn.o_proj", [Hd, NH * D]), ("n2", "post_attention_layernorm", [Hd]),
              ("wg", "mlp.gate_proj", [I, Hd]), ("wu", "mlp.up_proj", [I, Hd]), ("wd", "mlp.down_proj", [Hd, I]))
    return {k: g.param(p + name + ".weight", shape) for k, name, shape in shapes}


def _rotate(g, n, hd, cos, sin, D):
    """The rotary embedding of the q and k heads in hd (rotate_half form)."""
    half = D // 2
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
    return rot


def _llama_layer_out(g, i, n, x, a, w, eps, Hd, NHD, I):
    """From the merged heads a [B, T, *, ...] to layer i's output: o_proj, the
    residual, the post-attention RMSNorm, the SwiGLU MLP and its residual."""
    dtype = g.dt
    a = g.op(n + "att2", f"reshape({a}, shape=[B, T, {NHD}])")
    o = _linear_t(g, a, w["wo"], n + "o")
    x1 = g.op(n + "x1", f"add({x}, {o}) : {dtype}[B, T, {Hd}]")
    h2 = g.op(n + "h2", f"rmsnorm({x1}, {w['n2']}, eps={eps!r})")
    gate = _linear_t(g, h2, w["wg"], n + "gate")
    up = _linear_t(g, h2, w["wu"], n + "up")
    gu = g.op(n + "gu", f"mul({g.op(n + 'sg', f'silu({gate})')}, {up}) : {dtype}[B, T, {I}]")
    dn = _linear_t(g, gu, w["wd"], n + "down")
    return g.op(f"x{i + 1}", f"add({x1}, {dn}) : {dtype}[B, T, {Hd}]")


def _llama_lm_head(g, x, emb, eps, Hd, V, tied, comment):
    """The final RMSNorm and the LM head (tied to emb or lm_head.weight)."""
    nw = g.param("model.norm.weight", [Hd])
    hf = g.op("norm", f"rmsnorm({x}, {nw}, eps={eps!r})")
    head = emb if tied else g.param("lm_head.weight", [V, Hd])
    if comment:
        g.comment("LM head" + (" (tied to embed_tokens)" if tied else ""))
    _linear_t(g, hf, head, "logits")


def llama_ir(cfg, dtype="bf16", gqa="broadcast"):
    """LlamaForCausalLM as one graph. Returns (text, params): the inputs first
    (input_ids: i64[B, T], cos and sin: [T, head_dim])."""
    Hd, L, NH, KV, I, V, D, eps, tied = _llama_dims(cfg)
    assert NH % KV == 0 and D % 2 == 0 and gqa in ("broadcast", "expand")
    G = NH // KV
    g = _Graph("llama", dtype)
    ids = g.param("input_ids", ["B", "T"], "i64")
    cos, sin = g.param("cos", ["T", D]), g.param("sin", ["T", D])
    emb = g.param("model.embed_tokens.weight", [V, Hd])
    x = g.op("x0", f"gather({emb}, {ids}) : {dtype}[B, T, {Hd}]")
    for i in range(L):
        w = _llama_layer_params(g, i, Hd, NH, KV, D, I)
        n = f"l{i}."
        g.comment(f"layer {i}")
        h = g.op(n + "h", f"rmsnorm({x}, {w['n1']}, eps={eps!r}) : {dtype}[B, T, {Hd}]")
        q0, k0, v0 = (_linear_t(g, h, w[k], n + t) for t, k in (("q0", "wq"), ("k0", "wk"), ("v0", "wv")))
        # [B, T, heads * D] -> [B, T, KV, G or 1, D] -> [B, KV, G or 1, T, D]
        shp = {"q": (q0, G), "k": (k0, 1), "v": (v0, 1)}
        hd = {}
        for t, (src, gg) in shp.items():
            r = g.op(n + t + "1", f"reshape({src}, shape=[B, T, {KV}, {gg}, {D}])")
            hd[t] = g.op(n + t, f"permute({r}, perm=[0, 2, 3, 1, 4]) : {dtype}[B, {KV}, {gg}, T, {D}]")
        rot = _rotate(g, n, hd, cos, sin, D)
        k, vv = rot["k"], hd["v"]
        if gqa == "expand" and G > 1:
            k = g.op(n + "k_x", f"expand({k}, shape=[-1, -1, {G}, -1, -1]) : {dtype}[B, {KV}, {G}, T, {D}]")
            vv = g.op(n + "v_x", f"expand({vv}, shape=[-1, -1, {G}, -1, -1]) : {dtype}[B, {KV}, {G}, T, {D}]")
        a = g.op(n + "att", f"attention({rot['q']}, {k}, {vv}, causal=true) : {dtype}[B, {KV}, {G}, T, {D}]")
        a = g.op(n + "att1", f"permute({a}, perm=[0, 3, 1, 2, 4])")
        x = _llama_layer_out(g, i, n, x, a, w, eps, Hd, NH * D, I)
    _llama_lm_head(g, x, emb, eps, Hd, V, tied, True)
    header = [
        f"LlamaForCausalLM written out by bench/models/irgen.py: {L} layers, hidden {Hd}, {NH} query heads",
        f"and {KV} key/value heads of {D} (GQA: {gqa}), MLP {I}, vocabulary {V}, {dtype}.",
        "Parameters are named as the model's state_dict; %cos and %sin are Hugging Face's rotary tables",
        "for positions 0..T-1 ([T, head_dim]). Bind B and T.",
    ]
    return g.text(header, "%logits"), g.params

#!/usr/bin/env python3
"""ONNX models written node for node as torch.onnx.export(dynamo=True,
opset_version=18) writes Hugging Face's GPT-2, BERT and Llama blocks
(following the op histograms measured from 2-layer exports with PyTorch
2.11 and transformers 5: opset 18, constants folded), at the sizes
of the hand-written examples/gpt2_block.ir and examples/llama_block.ir, so
that a test can check that the exported spelling fuses into as many kernels
as the hand-written one:

  - GPT-2: LayerNormalization; the Conv1D layers as Gemm on 2-D reshaped
    activations; one c_attn Gemm and Split(num_outputs=3); heads by Reshape
    and Transpose; torchlib's scaled_dot_product_attention (K^T by Reshape
    [-1, S, D], Transpose, Reshape; q and k each multiplied by sqrt(scale);
    the causal mask a folded constant of 0 and -inf, added; the softmax's
    NaN rows set to 0 by Where(IsNaN)); NewGELU written out with Pow, Mul,
    Add and Tanh.
  - GPT-2 again with its LayerNorms written out (ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div, Mul, Add), as exports before opset 17 have
    them.
  - BERT: MatMul + Add linear layers, the padding mask from the
    attention_mask input (Cast, GatherND, Unsqueeze, Expand, And, Where of 0
    and -inf), erf GELU as Div, Erf, Add, Mul, post-LayerNormalization.
  - Llama: RMSNorm as Pow, ReduceMean (axes as an input), Add, Sqrt,
    Reciprocal, Mul; Q/K/V MatMuls with grouped-query heads (8 query heads,
    2 key/value heads) repeated by Unsqueeze, Expand and Reshape; rotary
    embeddings from folded cos/sin tables by Slice, Neg, Concat, Mul, Add;
    SwiGLU as Sigmoid and Mul.

  - The whole GPT-2 (GPT2LMHeadModel, tiny: 2 layers of 64) at three sizes,
    with the causal mask folded (B=2, T=16) or kept as Expand and Where
    (B=1, T=128 and B=8, T=1024), as the exporter leaves it.

  make_exports.py OUTDIR   writes OUTDIR/{gpt2,gpt2ln,bert,llama,gpt2lm_BxT}_export.onnx, their
                           inputs as .npy files and, when onnxruntime is
                           installed, its outputs (*_ort.npy).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# IR version 10 (ONNX 1.16): what every onnxruntime of the last two years
# loads; a newer onnx package would write a newer one by default.
ORT_IR_VERSION = 10

B, T = 2, 16
INT64_MAX = np.iinfo(np.int64).max


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, name, *shape, scale=0.05):
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(self, arr, dtype=None):
        self.n += 1
        name = "const_%d" % self.n
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, nout=1, **attrs):
        self.n += 1
        outs = ["%s_%d" % (op_type.lower(), self.n + i) for i in range(nout)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name="node_%d" % self.n, **attrs))
        return outs[0] if nout == 1 else outs

    def model(self, name, inputs, outputs):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 18)], producer_name="make_exports.py")
        onnx.checker.check_model(m)
        return m

    # --- pieces every model shares --------------------------------------
    def heads(self, x, h, d):
        """[B, T, h*d] -> [B, h, T, d]"""
        return self.op("Transpose", [self.op("Reshape", [x, self.c([B, T, h, d], np.int64)])], perm=[0, 2, 1, 3])

    def merge_heads(self, o, c):
        return self.op("Reshape", [self.op("Transpose", [o], perm=[0, 2, 1, 3]), self.c([B, T, c], np.int64)])

    def sdpa(self, q, k, v, mask, heads, d):
        """torchlib's aten_scaled_dot_product_attention with a mask that is
        added (a bool mask becomes Where(mask, 0, -inf) first)."""
        kf = self.op("Reshape", [k, self.c([-1, T, d], np.int64)])
        kt = self.op("Reshape", [self.op("Transpose", [kf], perm=[0, 2, 1]), self.c([B, heads, d, T], np.int64)])
        s = self.c(np.sqrt(np.float32(1.0 / np.sqrt(d))), np.float32)
        qs = self.op("Mul", [q, s])
        ks = self.op("Mul", [kt, s])
        w = self.op("Add", [self.op("MatMul", [qs, ks]), mask])
        p = self.op("Softmax", [w], axis=-1)
        p = self.op("Where", [self.op("IsNaN", [p]), self.c(0.0, np.float32), p])
        return self.op("MatMul", [p, v])


def causal_additive():
    m = np.where(np.tril(np.ones((T, T), bool)), 0.0, -np.inf).astype(np.float32)
    return m.reshape(1, 1, T, T)


def layer_norm(b, x, w, bias, written):
    """LayerNormalization, or (opset 16 and before, which lack it) written
    out as the exporter decomposes it."""
    if not written:
        return b.op("LayerNormalization", [x, w, bias], axis=-1, epsilon=1e-5)
    axes = b.c([-1], np.int64)
    d = b.op("Sub", [x, b.op("ReduceMean", [x, axes], keepdims=1)])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.c(2.0, np.float32)]), axes], keepdims=1)
    n = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [var, b.c(1e-5, np.float32)])])])
    return b.op("Add", [b.op("Mul", [n, w]), bias])


def gpt2_export(written_ln=False):
    C, H, D = 768, 12, 64
    b = Builder(10)
    x = "x"
    ln = layer_norm(b, x, b.w("ln1_w", C, scale=1.0), b.w("ln1_b", C), written_ln)
    flat = b.c([-1, C], np.int64)
    qkv = b.op("Gemm", [b.op("Reshape", [ln, flat]), b.w("attn_w", C, 3 * C), b.w("attn_b", 3 * C)])
    qkv = b.op("Reshape", [qkv, b.c([B, T, 3 * C], np.int64)])
    q, k, v = b.op("Split", [qkv], nout=3, axis=2, num_outputs=3)
    q, k, v = b.heads(q, H, D), b.heads(k, H, D), b.heads(v, H, D)
    o = b.merge_heads(b.sdpa(q, k, v, b.c(causal_additive()), H, D), C)
    o = b.op("Gemm", [b.op("Reshape", [o, flat]), b.w("proj_w", C, C), b.w("proj_b", C)])
    h1 = b.op("Add", [x, b.op("Reshape", [o, b.c([B, T, C], np.int64)])])
    ln2 = layer_norm(b, h1, b.w("ln2_w", C, scale=1.0), b.w("ln2_b", C), written_ln)
    f = b.op("Gemm", [b.op("Reshape", [ln2, flat]), b.w("fc_w", C, 4 * C), b.w("fc_b", 4 * C)])
    f = b.op("Reshape", [f, b.c([B, T, 4 * C], np.int64)])
    # NewGELUActivation: 0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3.0))))
    inner = b.op("Add", [f, b.op("Mul", [b.op("Pow", [f, b.c(3.0, np.float32)]), b.c(0.044715, np.float32)])])
    t = b.op("Tanh", [b.op("Mul", [inner, b.c(np.sqrt(2.0 / np.pi), np.float32)])])
    g = b.op("Mul", [b.op("Mul", [f, b.c(0.5, np.float32)]), b.op("Add", [t, b.c(1.0, np.float32)])])
    m = b.op("Gemm", [b.op("Reshape", [g, b.c([-1, 4 * C], np.int64)]), b.w("mp_w", 4 * C, C), b.w("mp_b", C)])
    y = b.op("Add", [h1, b.op("Reshape", [m, b.c([B, T, C], np.int64)])])
    b.nodes[-1].output[0] = "y"
    return b.model("gpt2ln_export" if written_ln else "gpt2_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, C])])


def bert_export():
    C, H, D, F = 768, 12, 64, 3072
    b = Builder(11)
    x = "x"
    # The padding mask: keys kept where attention_mask is 1.
    pad = b.op("Cast", ["attention_mask"], to=TensorProto.BOOL)
    idx = np.stack(np.meshgrid(np.arange(B), np.arange(T), indexing="ij"), -1).astype(np.int64)  # [B, T, 2]
    pad = b.op("GatherND", [pad, b.c(idx)])
    pad = b.op("Unsqueeze", [pad, b.c([1, 2], np.int64)])
    pad = b.op("Expand", [pad, b.c([B, 1, T, T], np.int64)])
    pad = b.op("And", [pad, b.c(np.ones((1, 1, T, T), bool))])
    mask = b.op("Where", [pad, b.c(0.0, np.float32), b.c(-np.inf, np.float32)])

    def linear(h, name, n_in, n_out):
        return b.op("Add", [b.op("MatMul", [h, b.w(name + "_w", n_in, n_out)]), b.w(name + "_b", n_out)])

    q, k, v = (b.heads(linear(x, nm, C, C), H, D) for nm in ("q", "k", "v"))
    o = linear(b.merge_heads(b.sdpa(q, k, v, mask, H, D), C), "o", C, C)
    h1 = b.op("LayerNormalization", [b.op("Add", [o, x]), b.w("ln1_w", C, scale=1.0), b.w("ln1_b", C)],
              axis=-1, epsilon=1e-12)
    f = linear(h1, "fc1", C, F)
    # GELUActivation (erf): x * 0.5 * (1.0 + erf(x / sqrt(2.0)))
    e = b.op("Add", [b.op("Erf", [b.op("Div", [f, b.c(np.sqrt(2.0), np.float32)])]), b.c(1.0, np.float32)])
    g = b.op("Mul", [b.op("Mul", [f, b.c(0.5, np.float32)]), e])
    f2 = linear(g, "fc2", F, C)
    b.op("LayerNormalization", [b.op("Add", [f2, h1]), b.w("ln2_w", C, scale=1.0), b.w("ln2_b", C)],
         axis=-1, epsilon=1e-12)
    b.nodes[-1].output[0] = "y"
    return b.model("bert_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C]),
                                   helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, T])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, C])])


def llama_export():
    C, H, HKV, D, F = 512, 8, 2, 64, 1408
    b = Builder(12)
    x = "x"

    def rmsnorm(h, name):
        # LlamaRMSNorm: h * rsqrt(mean(h^2, -1) + eps), times the weight; rsqrt is Sqrt + Reciprocal
        ms = b.op("ReduceMean", [b.op("Pow", [h, b.c(2.0, np.float32)]), b.c([-1], np.int64)], keepdims=1)
        r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.c(1e-5, np.float32)])])])
        return b.op("Mul", [b.w(name, C, scale=1.0), b.op("Mul", [h, r])])

    # Rotary tables, folded by the exporter: [1, T, D], the frequencies repeated for both halves.
    inv = 1.0 / (10000.0 ** (np.arange(0, D, 2) / D))
    fr = np.outer(np.arange(T), inv)
    emb = np.concatenate([fr, fr], -1)[None]
    cos = b.op("Unsqueeze", [b.c(np.cos(emb), np.float32), b.c([1], np.int64)])
    sin = b.op("Unsqueeze", [b.c(np.sin(emb), np.float32), b.c([1], np.int64)])

    def rope(t):
        half = D // 2
        lo = b.op("Slice", [t, b.c([0], np.int64), b.c([half], np.int64), b.c([-1], np.int64)])
        hi = b.op("Slice", [t, b.c([half], np.int64), b.c([INT64_MAX], np.int64), b.c([-1], np.int64)])
        rot = b.op("Concat", [b.op("Neg", [hi]), lo], axis=-1)
        return b.op("Add", [b.op("Mul", [t, cos]), b.op("Mul", [rot, sin])])

    def repeat_kv(t):
        # hidden[:, :, None, :, :].expand(B, HKV, H // HKV, T, D).reshape(B, H, T, D)
        t = b.op("Unsqueeze", [t, b.c([2], np.int64)])
        t = b.op("Expand", [t, b.c([B, HKV, H // HKV, T, D], np.int64)])
        return b.op("Reshape", [t, b.c([B, H, T, D], np.int64)])

    h = rmsnorm(x, "attn_norm_w")
    q = b.heads(b.op("MatMul", [h, b.w("wq", C, H * D)]), H, D)
    k = b.heads(b.op("MatMul", [h, b.w("wk", C, HKV * D)]), HKV, D)
    v = b.heads(b.op("MatMul", [h, b.w("wv", C, HKV * D)]), HKV, D)
    q, k = rope(q), rope(k)
    o = b.merge_heads(b.sdpa(q, repeat_kv(k), repeat_kv(v), b.c(causal_additive()), H, D), C)
    x1 = b.op("Add", [x, b.op("MatMul", [o, b.w("wo", C, C)])])
    h2 = rmsnorm(x1, "ffn_norm_w")
    gate = b.op("MatMul", [h2, b.w("w_gate", C, F)])
    up = b.op("MatMul", [h2, b.w("w_up", C, F)])
    gu = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
    b.op("Add", [x1, b.op("MatMul", [gu, b.w("w_down", F, C)])])
    b.nodes[-1].output[0] = "y"
    return b.model("llama_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, C])])


def gpt2_lm_export(b_, t_, L=2, C=64, H=4, V=1000, P=1024):
    """The whole GPT2LMHeadModel (bench/models/hf.py's tiny preset: the
    embeddings, L blocks, ln_f and the LM head tied to wte) at batch b_ and
    sequence t_, with the causal mask as the exporter leaves it at that
    size. Hugging Face builds it as (kv_idx <= q_idx) of shape [1, 1, T, T],
    expands it to [B, 1, T, T], and torchlib's SDPA turns the bool mask into
    Where(mask, 0, -inf) in each layer. onnxscript's constant folding skips
    a node with an input over 1024 elements (and keeps no result over 2^20):
    for a short sequence everything folds into one float table [B, 1, T, T];
    from T = 32 on the bool tril stays a constant and the Expand and the
    Where of every layer stay in the graph."""
    global B, T
    saved, (B, T) = (B, T), (b_, t_)
    D = C // H
    b = Builder(20)
    wte, wpe = b.w("wte", V, C), b.w("wpe", P, C)
    h = b.op("Add", [b.op("Gather", [wte, "input_ids"]), b.op("Gather", [wpe, b.c(np.arange(T)[None].astype(np.int64))])])
    tril = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    folded = tril.size <= 1024
    if not folded:
        expanded = b.op("Expand", [b.c(tril), b.c([B, 1, T, T], np.int64)])
    flat = b.c([-1, C], np.int64)
    for i in range(L):
        def w(name, *shape, scale=0.05):
            return b.w("h%d_%s" % (i, name), *shape, scale=scale)
        ln = b.op("LayerNormalization", [h, w("ln1_w", C, scale=1.0), w("ln1_b", C)], axis=-1, epsilon=1e-5)
        qkv = b.op("Gemm", [b.op("Reshape", [ln, flat]), w("attn_w", C, 3 * C), w("attn_b", 3 * C)])
        q, k, v = b.op("Split", [b.op("Reshape", [qkv, b.c([B, T, 3 * C], np.int64)])], nout=3, axis=2, num_outputs=3)
        q, k, v = b.heads(q, H, D), b.heads(k, H, D), b.heads(v, H, D)
        if folded:
            mask = b.c(np.broadcast_to(np.where(tril, 0.0, -np.inf), (B, 1, T, T)).astype(np.float32))
        else:
            mask = b.op("Where", [expanded, b.c(0.0, np.float32), b.c(-np.inf, np.float32)])
        o = b.merge_heads(b.sdpa(q, k, v, mask, H, D), C)
        o = b.op("Gemm", [b.op("Reshape", [o, flat]), w("proj_w", C, C), w("proj_b", C)])
        h1 = b.op("Add", [h, b.op("Reshape", [o, b.c([B, T, C], np.int64)])])
        ln2 = b.op("LayerNormalization", [h1, w("ln2_w", C, scale=1.0), w("ln2_b", C)], axis=-1, epsilon=1e-5)
        f = b.op("Gemm", [b.op("Reshape", [ln2, flat]), w("fc_w", C, 4 * C), w("fc_b", 4 * C)])
        f = b.op("Reshape", [f, b.c([B, T, 4 * C], np.int64)])
        inner = b.op("Add", [f, b.op("Mul", [b.op("Pow", [f, b.c(3.0, np.float32)]), b.c(0.044715, np.float32)])])
        t = b.op("Tanh", [b.op("Mul", [inner, b.c(np.sqrt(2.0 / np.pi), np.float32)])])
        g = b.op("Mul", [b.op("Mul", [f, b.c(0.5, np.float32)]), b.op("Add", [t, b.c(1.0, np.float32)])])
        m = b.op("Gemm", [b.op("Reshape", [g, b.c([-1, 4 * C], np.int64)]), w("mp_w", 4 * C, C), w("mp_b", C)])
        h = b.op("Add", [h1, b.op("Reshape", [m, b.c([B, T, C], np.int64)])])
    hf = b.op("LayerNormalization", [h, b.w("lnf_w", C, scale=1.0), b.w("lnf_b", C)], axis=-1, epsilon=1e-5)
    b.op("MatMul", [hf, b.op("Transpose", [wte], perm=[1, 0])])
    b.nodes[-1].output[0] = "logits"
    m = b.model("gpt2_lm_export", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, T])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])])
    B, T = saved
    return m


# (B, T) of the whole-model GPT-2 mirrors: the table folded, and kept at the
# two sizes bench/whole_model.py measures.
GPT2_LM_SIZES = ((2, 16), (1, 128), (8, 1024))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(5)
    models = {"gpt2": (gpt2_export(), {"x": rng.standard_normal((B, T, 768)).astype(np.float32)}),
              "bert": (bert_export(), {"x": rng.standard_normal((B, T, 768)).astype(np.float32),
                                       # the second sequence is padded after 11 tokens
                                       "attention_mask": (np.arange(T)[None] < np.array([[T], [11]])).astype(np.int64)}),
              "gpt2ln": (gpt2_export(written_ln=True), {"x": rng.standard_normal((B, T, 768)).astype(np.float32)}),
              "llama": (llama_export(), {"x": rng.standard_normal((B, T, 512)).astype(np.float32)})}
    for lb, lt in GPT2_LM_SIZES:
        models["gpt2lm_%dx%d" % (lb, lt)] = (gpt2_lm_export(lb, lt),
                                             {"input_ids": rng.integers(0, 1000, (lb, lt)).astype(np.int64)})
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        print("make_exports.py: onnxruntime is not installed: no reference outputs")
    for name, (m, feeds) in models.items():
        path = os.path.join(out, name + "_export.onnx")
        onnx.save(m, path)
        for i, (k, a) in enumerate(feeds.items()):
            np.save(os.path.join(out, "%s_in%d.npy" % (name, i)), a)
        if ort:
            y = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            np.save(os.path.join(out, name + "_ort.npy"), y)


if __name__ == "__main__":
    main()

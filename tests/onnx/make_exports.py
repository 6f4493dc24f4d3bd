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

  - The whole GPT-2 (GPT2LMHeadModel, tiny: 2 layers of 64) at four sizes,
    with the causal mask folded (B=2, T=16) or kept as Expand and Where
    (B=1, T=128 and B=8, T=1024), or computed from the aranges (B=1, T=2048),
    as the exporter leaves it.

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


def bert_mask(b, attention_mask):
    """Hugging Face's bidirectional SDPA mask with padding, as the exporter
    leaves it: the 2-D mask as bool, padding_mask[batch_idx, kv_idx] by
    GatherND (indices [B, 1, 1, S, 2], folded), And with the folded
    (q_idx >= 0) [1, 1, T, 1], and torchlib's Where(mask, 0, -inf), which
    the exporter's common-subexpression pass leaves one for all layers."""
    pad = b.op("Cast", [attention_mask], to=TensorProto.BOOL)
    bi = np.broadcast_to(np.arange(B).reshape(B, 1, 1, 1), (B, 1, 1, T))
    ki = np.broadcast_to(np.arange(T).reshape(1, 1, 1, T), (B, 1, 1, T))
    pad = b.op("GatherND", [pad, b.c(np.stack([bi, ki], -1).astype(np.int64))])
    keep = b.op("And", [b.c(np.ones((1, 1, T, 1), bool)), pad])
    return b.op("Where", [keep, b.c(0.0, np.float32), b.c(-np.inf, np.float32)])


def bert_layer(b, x, mask, pre, C=768, H=12, F=3072):
    """One BertLayer: MatMul + Add linears, SDPA, post-LayerNormalization,
    the erf GELU as torchlib writes aten.gelu: 0.5 * (x * (erf(x / sqrt 2) + 1))."""
    D = C // H

    def linear(h, name, n_in, n_out):
        return b.op("Add", [b.op("MatMul", [h, b.w(pre + name + "_w", n_in, n_out)]), b.w(pre + name + "_b", n_out)])

    q, k, v = (b.heads(linear(x, nm, C, C), H, D) for nm in ("q", "k", "v"))
    o = linear(b.merge_heads(b.sdpa(q, k, v, mask, H, D), C), "o", C, C)
    h1 = b.op("LayerNormalization", [b.op("Add", [o, x]), b.w(pre + "ln1_w", C, scale=1.0), b.w(pre + "ln1_b", C)],
              axis=-1, epsilon=1e-12)
    f = linear(h1, "fc1", C, F)
    e = b.op("Add", [b.op("Erf", [b.op("Div", [f, b.c(np.sqrt(2.0), np.float32)])]), b.c(1.0, np.float32)])
    g = b.op("Mul", [b.c(0.5, np.float32), b.op("Mul", [f, e])])
    f2 = linear(g, "fc2", F, C)
    return b.op("LayerNormalization", [b.op("Add", [f2, h1]), b.w(pre + "ln2_w", C, scale=1.0), b.w(pre + "ln2_b", C)],
                axis=-1, epsilon=1e-12)


def bert_export():
    """One BERT layer on hidden states x, with the padding mask."""
    C = 768
    b = Builder(11)
    bert_layer(b, "x", bert_mask(b, "attention_mask"), "")
    b.nodes[-1].output[0] = "y"
    return b.model("bert_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C]),
                                   helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, T])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, C])])


def bert_model_export(b_=None, t_=None, L=2, C=64, H=4, F=128, V=1000, P=512):
    """The whole BertModel (word, position and token-type embeddings, the
    embedding LayerNorm, L layers, the pooler) as the exporter writes it;
    the token types come from the zero buffer by GatherElements at the
    positions and Expand to the batch, as BertEmbeddings does without
    token_type_ids."""
    global B, T
    saved, (B, T) = (B, T), (b_ or B, t_ or T)
    b = Builder(13)
    pos = b.c(np.arange(T)[None].astype(np.int64))
    tt = b.op("GatherElements", [b.c(np.zeros((1, P), np.int64)), pos], axis=1)
    tt = b.op("Expand", [tt, b.c([B, T], np.int64)])
    e = b.op("Add", [b.op("Gather", [b.w("word_emb", V, C), "input_ids"]), b.op("Gather", [b.w("type_emb", 2, C), tt])])
    e = b.op("Add", [e, b.op("Gather", [b.w("pos_emb", P, C), pos])])
    h = b.op("LayerNormalization", [e, b.w("emb_ln_w", C, scale=1.0), b.w("emb_ln_b", C)], axis=-1, epsilon=1e-12)
    mask = bert_mask(b, "attention_mask")
    for i in range(L):
        h = bert_layer(b, h, mask, "l%d_" % i, C, H, F)
    b.nodes[-1].output[0] = "last_hidden_state"
    first = b.op("Gather", ["last_hidden_state", b.c(0, np.int64)], axis=1)
    b.op("Tanh", [b.op("Gemm", [first, b.w("pool_w", C, C), b.w("pool_b", C)], transB=1)])
    b.nodes[-1].output[0] = "pooler_output"
    m = b.model("bert_model_export", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, T]),
                                      helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, T])],
                [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [B, T, C]),
                 helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [B, C])])
    B, T = saved
    return m


def causal_mask_for_layers(b):
    """The causal mask each layer adds, as the exporter leaves it at B x T
    (see gpt2_lm_export): a callable giving each layer's operand."""
    tril = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    if tril.size <= 1024:
        table = b.c(np.broadcast_to(np.where(tril, 0.0, -np.inf), (B, 1, T, T)).astype(np.float32))
        return lambda: table
    expanded = b.op("Expand", [b.c(tril), b.c([B, 1, T, T], np.int64)])
    return lambda: b.op("Where", [expanded, b.c(0.0, np.float32), b.c(-np.inf, np.float32)])


def rope_tables(b, D):
    """cos and sin [1, 1, T, D], folded by the exporter (the frequencies
    repeated for both halves, unsqueezed for the heads)."""
    inv = 1.0 / (10000.0 ** (np.arange(0, D, 2) / D))
    fr = np.outer(np.arange(T), inv)
    emb = np.concatenate([fr, fr], -1)[None, None]
    return b.c(np.cos(emb), np.float32), b.c(np.sin(emb), np.float32)


def rmsnorm(b, h, w, C):
    """LlamaRMSNorm: h * rsqrt(mean(h^2, -1) + eps), times the weight; rsqrt is Sqrt + Reciprocal."""
    ms = b.op("ReduceMean", [b.op("Pow", [h, b.c(2.0, np.float32)]), b.c([-1], np.int64)], keepdims=1)
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.c(1e-5, np.float32)])])])
    return b.op("Mul", [b.w(w, C, scale=1.0), b.op("Mul", [h, r])])


def llama_layer(b, x, cos, sin, mask, pre, C=512, H=8, HKV=2, F=1408):
    """One LlamaDecoderLayer: Q/K/V MatMuls with grouped-query heads repeated
    by Unsqueeze, Expand and Reshape (repeat_kv; K's Reshape merged by the
    exporter with SDPA's Reshape to [-1, T, D]), rotary embeddings by Slice,
    Neg, Concat, Mul, Add, SwiGLU as Sigmoid and Mul."""
    D = C // H
    half = D // 2

    def rope(t):
        lo = b.op("Slice", [t, b.c([0], np.int64), b.c([half], np.int64), b.c([-1], np.int64)])
        hi = b.op("Slice", [t, b.c([half], np.int64), b.c([INT64_MAX], np.int64), b.c([-1], np.int64)])
        rot = b.op("Concat", [b.op("Neg", [hi]), lo], axis=-1)
        return b.op("Add", [b.op("Mul", [t, cos]), b.op("Mul", [rot, sin])])

    def repeat(t):
        # hidden[:, :, None, :, :].expand(B, HKV, H // HKV, T, D)
        return b.op("Expand", [b.op("Unsqueeze", [t, b.c([2], np.int64)]), b.c([B, HKV, H // HKV, T, D], np.int64)])

    h = rmsnorm(b, x, pre + "attn_norm_w", C)
    q = rope(b.heads(b.op("MatMul", [h, b.w(pre + "wq", C, H * D)]), H, D))
    k = rope(b.heads(b.op("MatMul", [h, b.w(pre + "wk", C, HKV * D)]), HKV, D))
    v = b.heads(b.op("MatMul", [h, b.w(pre + "wv", C, HKV * D)]), HKV, D)
    v = b.op("Reshape", [repeat(v), b.c([B, H, T, D], np.int64)])
    # SDPA with K^T through [-1, T, D], the repeat's Reshape to [B, H, T, D] merged into it.
    kt = b.op("Reshape", [b.op("Transpose", [b.op("Reshape", [repeat(k), b.c([-1, T, D], np.int64)])], perm=[0, 2, 1]),
                          b.c([B, H, D, T], np.int64)])
    s = b.c(np.sqrt(np.float32(1.0 / np.sqrt(D))), np.float32)
    w = b.op("Add", [b.op("MatMul", [b.op("Mul", [q, s]), b.op("Mul", [kt, s])]), mask])
    p = b.op("Softmax", [w], axis=-1)
    p = b.op("Where", [b.op("IsNaN", [p]), b.c(0.0, np.float32), p])
    o = b.merge_heads(b.op("MatMul", [p, v]), C)
    x1 = b.op("Add", [x, b.op("MatMul", [o, b.w(pre + "wo", C, C)])])
    h2 = rmsnorm(b, x1, pre + "ffn_norm_w", C)
    gate = b.op("MatMul", [h2, b.w(pre + "w_gate", C, F)])
    up = b.op("MatMul", [h2, b.w(pre + "w_up", C, F)])
    gu = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
    return b.op("Add", [x1, b.op("MatMul", [gu, b.w(pre + "w_down", F, C)])])


def llama_export():
    """One Llama layer on hidden states x (examples/llama_block.ir's sizes)."""
    C, D = 512, 64
    b = Builder(12)
    cos, sin = rope_tables(b, D)
    llama_layer(b, "x", cos, sin, b.c(causal_additive()), "")
    b.nodes[-1].output[0] = "y"
    return b.model("llama_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, C])])


def llama_model_export(b_=None, t_=None, L=2, C=128, H=8, HKV=2, F=256, V=1000):
    """The whole LlamaForCausalLM: the embedding, L layers, the final norm
    and the LM head, the causal mask as the exporter leaves it at B x T."""
    global B, T
    saved, (B, T) = (B, T), (b_ or B, t_ or T)
    b = Builder(14)
    cos, sin = rope_tables(b, C // H)
    mask = causal_mask_for_layers(b)
    h = b.op("Gather", [b.w("embed", V, C), "input_ids"])
    for i in range(L):
        h = llama_layer(b, h, cos, sin, mask(), "l%d_" % i, C, H, HKV, F)
    b.op("MatMul", [rmsnorm(b, h, "norm_w", C), b.w("lm_head", C, V)])
    b.nodes[-1].output[0] = "logits"
    m = b.model("llama_model_export", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, T])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])])
    B, T = saved
    return m


# Op histograms of 2-layer exports measured with PyTorch 2.11 and
# transformers 5 (/work/shared's notes; B and T small enough that the mask
# folds): the whole-model mirrors must have exactly these.
EXPORT_HISTOGRAMS = {
    "gpt2lm_2x16": dict(Reshape=28, Mul=12, Add=11, Transpose=11, Gemm=8, LayerNormalization=5, MatMul=5, Gather=2,
                        Split=2, Softmax=2, IsNaN=2, Where=2, Pow=2, Tanh=2),
    "bertmodel": dict(Add=22, MatMul=16, Reshape=12, Transpose=10, Mul=8, LayerNormalization=5, Gather=4, Where=3,
                      Softmax=2, IsNaN=2, Div=2, Erf=2, GatherElements=1, Expand=1, Cast=1, GatherND=1, And=1, Gemm=1,
                      Tanh=1),
    "llamamodel": dict(Mul=26, MatMul=19, Add=15, Reshape=14, Transpose=10, Slice=8, Pow=5, ReduceMean=5, Sqrt=5,
                       Reciprocal=5, Neg=4, Concat=4, Unsqueeze=4, Expand=4, Softmax=2, IsNaN=2, Where=2, Sigmoid=2,
                       Gather=1),
}


def histogram(m):
    h = {}
    for n in m.graph.node:
        h[n.op_type] = h.get(n.op_type, 0) + 1
    return h


def example_input(vi):
    """Data for a graph input of the whole-model mirrors: token ids, or an
    attention mask whose second row is padded after two thirds."""
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    if vi.name == "attention_mask":
        am = np.ones(shape, np.int64)
        if shape[0] > 1:
            am[1, shape[1] * 2 // 3:] = 0
        return am
    return np.random.default_rng(7).integers(0, 1000, shape).astype(np.int64)


def gpt2_lm_export(b_, t_, L=2, C=64, H=4, V=1000, P=2048):
    """The whole GPT2LMHeadModel (bench/models/hf.py's tiny preset: the
    embeddings, L blocks, ln_f and the LM head tied to wte) at batch b_ and
    sequence t_, with the causal mask as the exporter leaves it at that
    size. Hugging Face builds it as (kv_idx <= q_idx) of shape [1, 1, T, T],
    expands it to [B, 1, T, T], and torchlib's SDPA turns the bool mask into
    Where(mask, 0, -inf) in each layer. onnxscript's constant folding skips
    a node with an input over 1024 elements (and keeps no result over 2^20):
    for a short sequence everything folds into one float table [B, 1, T, T];
    from T = 32 on the bool tril stays a constant and the Expand and the
    Where of every layer stay in the graph; past T = 1024 the comparison of
    the two aranges stays too."""
    global B, T
    saved, (B, T) = (B, T), (b_, t_)
    D = C // H
    b = Builder(20)
    wte, wpe = b.w("wte", V, C), b.w("wpe", P, C)
    h = b.op("Add", [b.op("Gather", [wte, "input_ids"]), b.op("Gather", [wpe, b.c(np.arange(T)[None].astype(np.int64))])])
    tril = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    folded = tril.size <= 1024
    if tril.size > 1 << 20:  # too large for even the comparison to fold: kv_idx <= q_idx of the aranges
        ar = np.arange(T, dtype=np.int64)
        expanded = b.op("Expand", [b.op("LessOrEqual", [b.c(ar.reshape(1, 1, 1, T)), b.c(ar.reshape(1, 1, T, 1))]),
                                   b.c([B, 1, T, T], np.int64)])
    elif not folded:
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


# (B, T) of the whole-model GPT-2 mirrors: the table folded, kept at the two
# sizes bench/whole_model.py measures, and computed from the aranges.
GPT2_LM_SIZES = ((2, 16), (1, 128), (8, 1024), (1, 2048))


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
    for name, m in (("bertmodel", bert_model_export()), ("llamamodel", llama_model_export())):
        models[name] = (m, {i.name: example_input(i) for i in m.graph.input})
    for name, want in EXPORT_HISTOGRAMS.items():
        got = histogram(models[name][0])
        if got != want:
            sys.exit("make_exports.py: %s's ops differ from the export's: %s" % (
                name, {k: (got.get(k, 0), want.get(k, 0)) for k in set(got) | set(want) if got.get(k, 0) != want.get(k, 0)}))
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
            ys = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
            for i, y in enumerate(ys):
                np.save(os.path.join(out, name + ("_ort.npy" if i == 0 else "_ort%d.npy" % i)), y)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Build small ONNX models with onnx.helper, in the shape PyTorch's exporter
writes them (docs/ONNX.md): a GPT-2 block (LayerNormalization, Gemm on 2-D
reshaped activations, Split of the fused QKV, Reshape/Transpose to heads,
MatMul, Mul by the scale, Where with a causal mask, Softmax, MatMul, the
tanh-GELU written out with Pow/Mul/Add/Tanh), with a symbolic batch.

  make_models.py OUTDIR   writes OUTDIR/gpt2_block.onnx (and the other models
                          below: embed_mlp, conv_net), its input and the
                          onnxruntime output (when onnxruntime is installed)
                          as .npy files.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# IR version 10 (ONNX 1.16): what every onnxruntime of the last two years
# loads; a newer onnx package would write a newer one by default.
ORT_IR_VERSION = 10

T, C, H = 8, 32, 4
D = C // H


def gpt2_block():
    rng = np.random.default_rng(0)
    inits = []

    def w(name, *shape, scale=0.1):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    n = []
    x = "x"
    n.append(helper.make_node("LayerNormalization", [x, w("ln1_w", C), w("ln1_b", C)], ["ln1"], axis=-1, epsilon=1e-5))
    n.append(helper.make_node("Shape", [x], ["xshape"]))
    n.append(helper.make_node("Reshape", ["ln1", c("flat2", np.array([-1, C], np.int64))], ["ln1_2d"]))
    n.append(helper.make_node("Gemm", ["ln1_2d", w("attn_w", C, 3 * C), w("attn_b", 3 * C)], ["qkv_2d"]))
    n.append(helper.make_node("Concat", [c("neg1", np.array([-1], np.int64)), c("tT", np.array([T], np.int64)),
                                         c("t3C", np.array([3 * C], np.int64))], ["qkv_shape"], axis=0))
    n.append(helper.make_node("Reshape", ["qkv_2d", "qkv_shape"], ["qkv"]))
    n.append(helper.make_node("Split", ["qkv", c("split", np.array([C, C, C], np.int64))], ["q", "k", "v"], axis=2))
    c("heads", np.array([-1, T, H, D], np.int64))
    for t in "qkv":
        n.append(helper.make_node("Reshape", [t, "heads"], [t + "h"]))
    n.append(helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]))
    n.append(helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]))
    n.append(helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]))
    n.append(helper.make_node("MatMul", ["qt", "kt"], ["s0"]))
    n.append(helper.make_node("Mul", ["s0", c("scale", np.array(1.0 / np.sqrt(D), np.float32))], ["s1"]))
    mask = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    n.append(helper.make_node("Where", [c("mask", mask), "s1", c("minf", np.array(np.finfo(np.float32).min, np.float32))], ["s2"]))
    n.append(helper.make_node("Softmax", ["s2"], ["p"], axis=-1))
    n.append(helper.make_node("MatMul", ["p", "vt"], ["o0"]))
    n.append(helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]))
    n.append(helper.make_node("Reshape", ["o1", "flat2"], ["o2"]))
    n.append(helper.make_node("Gemm", ["o2", w("proj_w", C, C), w("proj_b", C)], ["o3"]))
    n.append(helper.make_node("Reshape", ["o3", "xshape"], ["o4"]))
    n.append(helper.make_node("Add", [x, "o4"], ["h1"]))
    n.append(helper.make_node("LayerNormalization", ["h1", w("ln2_w", C), w("ln2_b", C)], ["ln2"], axis=-1))
    n.append(helper.make_node("Reshape", ["ln2", "flat2"], ["ln2_2d"]))
    n.append(helper.make_node("Gemm", ["ln2_2d", w("fc_w", C, 4 * C), w("fc_b", 4 * C)], ["f0"]))
    # GELU(tanh) as GPT-2's NewGELUActivation exports it.
    n.append(helper.make_node("Pow", ["f0", c("three", np.array(3.0, np.float32))], ["g0"]))
    n.append(helper.make_node("Mul", ["g0", c("k044", np.array(0.044715, np.float32))], ["g1"]))
    n.append(helper.make_node("Add", ["f0", "g1"], ["g2"]))
    n.append(helper.make_node("Mul", ["g2", c("s2pi", np.array(np.sqrt(2 / np.pi), np.float32))], ["g3"]))
    n.append(helper.make_node("Tanh", ["g3"], ["g4"]))
    n.append(helper.make_node("Add", ["g4", c("one", np.array(1.0, np.float32))], ["g5"]))
    n.append(helper.make_node("Mul", ["f0", "g5"], ["g6"]))
    n.append(helper.make_node("Mul", ["g6", c("half", np.array(0.5, np.float32))], ["g7"]))
    n.append(helper.make_node("Gemm", ["g7", w("mp_w", 4 * C, C), w("mp_b", C)], ["m0"]))
    n.append(helper.make_node("Reshape", ["m0", "xshape"], ["m1"]))
    n.append(helper.make_node("Add", ["h1", "m1"], ["y"]))
    g = helper.make_graph(n, "gpt2_block",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", T, C])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", T, C])], inits)
    m = helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 18)], producer_name="make_models.py")
    onnx.checker.check_model(m)
    return m


def embed_mlp():
    """An embedding (Gather) and an MLP (MatMul, Add, Relu, Gemm-free) over
    symbolic batch and sequence: no op needs their values, so the graph
    keeps them symbolic."""
    rng = np.random.default_rng(2)
    V, E, F = 50, 16, 32
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), nm)
             for nm, s in [("table", (V, E)), ("w1", (E, F)), ("b1", (F,)), ("w2", (F, E)), ("b2", (E,))]]
    n = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w1"], ["h0"]),
         helper.make_node("Add", ["h0", "b1"], ["h1"]),
         helper.make_node("Relu", ["h1"], ["h2"]),
         helper.make_node("MatMul", ["h2", "w2"], ["o0"]),
         helper.make_node("Add", ["o0", "b2"], ["o1"]),
         helper.make_node("ReduceMean", ["o1"], ["y"], axes=[-1], keepdims=1)]
    g = helper.make_graph(n, "embed_mlp", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 1])], inits)
    m = helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_models.py")
    onnx.checker.check_model(m)
    return m


def conv_net():
    """Conv (padded, grouped, strided, dilated), MaxPool, AveragePool (ceil
    mode, pads not counted) and ConvTranspose (strided, output_padding): the
    windows the importer composes from slices (frontend/onnx_conv.c)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), nm)
             for nm, s in [("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (8, 4, 3, 3)), ("w3", (8, 4, 2, 2)), ("b3", (8,))]]
    n = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Conv", ["p1", "w2"], ["c2"], group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 2, 1, 2]),
         helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                          ceil_mode=1, count_include_pad=0),
         helper.make_node("ConvTranspose", ["p2", "w3", "b3"], ["y"], group=2, strides=[2, 2], output_padding=[1, 1])]
    g = helper.make_graph(n, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 5, 9])], inits)
    m = helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_models.py")
    onnx.checker.check_model(m)
    return m


def write_safetensors(path, arrays):
    """The safetensors format, written out: 8-byte header length, JSON, data."""
    import json
    import struct
    dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}
    hdr, blob = {}, b""
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dt[a.dtype], "shape": list(a.shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def without_weights(m):
    """The model with its float weights (names ending _w or _b) moved out of
    the initializers into graph inputs, and those weights by name."""
    g = m.graph
    moved = {}
    keep = []
    for t in g.initializer:
        if t.name.endswith("_w") or t.name.endswith("_b"):
            moved[t.name] = numpy_helper.to_array(t)
            g.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
        else:
            keep.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    return m, moved


def bad_models(out):
    """Models a fuzzer found to reach past the checks: an Expand to a negative
    size, an Einsum equation with a byte that is not a letter."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([-5, 3], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"], name="expand_neg")], "bad_expand", [x], [y], [shape])
    onnx.save(helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "bad_expand.onnx"))
    g = helper.make_graph([helper.make_node("Einsum", ["x", "x"], ["y"], name="einsum_bad", equation="i\xabj,ij->i")],
                          "bad_einsum", [x], [y])
    onnx.save(helper.make_model(g, ir_version=ORT_IR_VERSION, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "bad_einsum.onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gpt2_block.onnx")
    onnx.save(gpt2_block(), path)
    x = np.random.default_rng(1).standard_normal((2, T, C)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    # The same model with its weights in an external data file beside it.
    ext = os.path.join(out, "ext")
    os.makedirs(ext, exist_ok=True)
    onnx.save(gpt2_block(), os.path.join(ext, "gpt2_block.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    bad_models(out)
    m, moved = without_weights(gpt2_block())
    onnx.save(m, os.path.join(out, "gpt2_block_noweights.onnx"))
    write_safetensors(os.path.join(out, "gpt2_block.safetensors"), moved)
    mpath = os.path.join(out, "embed_mlp.onnx")
    onnx.save(embed_mlp(), mpath)
    ids = np.random.default_rng(3).integers(0, 50, (3, 5)).astype(np.int64)
    np.save(os.path.join(out, "ids.npy"), ids)
    cpath = os.path.join(out, "conv_net.onnx")
    onnx.save(conv_net(), cpath)
    img = np.random.default_rng(6).standard_normal((2, 3, 12, 12)).astype(np.float32)
    np.save(os.path.join(out, "img.npy"), img)
    try:
        import onnxruntime as ort
    except ImportError:
        print("make_models.py: onnxruntime is not installed: no reference output")
        return
    y = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(os.path.join(out, "y_ort.npy"), y)
    y = ort.InferenceSession(mpath, providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    np.save(os.path.join(out, "embed_ort.npy"), y)
    y = ort.InferenceSession(cpath, providers=["CPUExecutionProvider"]).run(None, {"x": img})[0]
    np.save(os.path.join(out, "conv_ort.npy"), y)


if __name__ == "__main__":
    main()

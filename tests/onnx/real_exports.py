#!/usr/bin/env python3
"""Real torch.onnx.export files, small enough to keep in the tree.

tests/onnx/real/*.onnx.xz are exports of Hugging Face's GPT-2
(GPT2LMHeadModel), BERT (BertModel with its pooler) and a grouped-query
Llama (LlamaForCausalLM, 4 query and 2 key/value heads, RoPE), each with
2 layers of width 64 and a vocabulary of 512, made by the dynamo exporter
(PyTorch 2.11, transformers 5, opset 18) at several batch and sequence
sizes: the graph is the full models' graph, node for node, with smaller
matrices. What changes with the size is how much of the attention mask the
exporter folds into constants, which is what the tests look at.

To keep them small, `pack` drops the data of every weight matrix and
embedding (the float initializers of rank 1 or 2 with more than 64
elements), noting its standard deviation, and the nodes' metadata (the
exporter's stack traces); everything else (every node, attribute and name,
the LayerNorm weights, the integer and boolean tables the mask is computed
from, the rotary tables) is kept as exported. `unpack` fills the weights
with seeded normal values of the same deviation, so the models compute
what a trained model of that shape would, numerically (the test compares
fusec with ONNX Runtime on the same file, not with PyTorch).

  real_exports.py pack EXPORT.onnx... --to tests/onnx/real
  real_exports.py unpack OUTDIR [NAME...]   writes OUTDIR/NAME.onnx, the inputs
        OUTDIR/NAME_in0.npy (input_ids) [_in1.npy (attention_mask)] and, when
        onnxruntime is installed, its outputs OUTDIR/NAME_ort0.npy [_ort1.npy]

The inputs are those the exports were made with: input_ids uniform in
[0, 512) from numpy's default_rng(1); BERT's attention_mask ones with the
second sequence padded after two thirds.
"""
import lzma
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
STORE = os.path.join(HERE, "real")
MARK = "real_exports.py: normal, std="


def is_weight(t):
    a = numpy_helper.to_array(t)
    return a.dtype == np.float32 and a.ndim in (1, 2) and a.size > 64


def pack(paths, to):
    os.makedirs(to, exist_ok=True)
    for p in paths:
        m = onnx.load(p)
        for t in m.graph.initializer:
            if is_weight(t):
                std = float(numpy_helper.to_array(t).std())
                t.ClearField("raw_data")
                t.ClearField("float_data")
                t.doc_string = MARK + repr(std)
        for n in m.graph.node:
            del n.metadata_props[:]
            n.ClearField("doc_string")
        name = os.path.basename(p)[:-len(".onnx")]
        with open(os.path.join(to, name + ".onnx.xz"), "wb") as f:
            f.write(lzma.compress(m.SerializeToString(), preset=9))
        print(name, os.path.getsize(os.path.join(to, name + ".onnx.xz")), "bytes")


def inputs_for(name):
    kind = name.split("_")[0]
    B, T = (int(x) for x in name.rsplit("_", 1)[1].split("x"))
    rng = np.random.default_rng(1)
    feeds = {"input_ids": rng.integers(0, 512, (B, T)).astype(np.int64)}
    if kind == "bert":
        am = np.ones((B, T), np.int64)
        am[1, T * 2 // 3:] = 0
        feeds["attention_mask"] = am
    return feeds


def unpack(out, names):
    os.makedirs(out, exist_ok=True)
    names = names or sorted(f[:-len(".onnx.xz")] for f in os.listdir(STORE) if f.endswith(".onnx.xz"))
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    for name in names:
        with open(os.path.join(STORE, name + ".onnx.xz"), "rb") as f:
            m = onnx.load_from_string(lzma.decompress(f.read()))
        for i, t in enumerate(m.graph.initializer):
            if t.doc_string.startswith(MARK):
                std = float(t.doc_string[len(MARK):])
                rng = np.random.default_rng(1000 + i)
                a = (rng.standard_normal(tuple(t.dims)) * std).astype(np.float32)
                t.raw_data = a.tobytes()
                t.ClearField("doc_string")
        path = os.path.join(out, name + ".onnx")
        onnx.save(m, path)
        feeds = inputs_for(name)
        for i, a in enumerate(feeds.values()):
            np.save(os.path.join(out, "%s_in%d.npy" % (name, i)), a)
        if ort:
            ys = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
            for i, y in enumerate(ys):
                np.save(os.path.join(out, "%s_ort%d.npy" % (name, i)), y)
    if not ort:
        print("real_exports.py: onnxruntime is not installed: no reference outputs")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "pack":
        args = sys.argv[2:]
        to = STORE
        if "--to" in args:
            k = args.index("--to")
            to = args[k + 1]
            args = args[:k] + args[k + 2:]
        pack(args, to)
    elif len(sys.argv) >= 3 and sys.argv[1] == "unpack":
        unpack(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""convnets_onnx.py - ONNX files with the layers of torchvision's ResNet-50
and EfficientNet-B0, as `torch.onnx.export` (TorchScript exporter, opset 17,
constant folding in eval mode) writes them: every BatchNorm folded into its
Conv's weight and bias, SiLU as Sigmoid and Mul. Random weights (the layer
structure is what a plan depends on), f32, NCHW.

    python3 bench/models/convnets_onnx.py OUTDIR [--batch B] [--models resnet50,efficientnet_b0]

writes OUTDIR/<model>_b<B>.onnx. It needs only the onnx package, so the
plans of these models (which convolutions go to cuDNN, how many kernels)
can be read on a machine without PyTorch:

    fusec OUTDIR/resnet50_b32.onnx --precision=bf16 --emit=plan
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Net:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base):
        nm = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def node(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1):
        fan_in = cin // groups * k * k
        w = (self.rng.standard_normal((cout, cin // groups, k, k)) * (2.0 / fan_in) ** 0.5).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.01).astype(np.float32)
        p = (k - 1) // 2
        return self.node("Conv", [x, self.const(w, "w"), self.const(b, "b")], kernel_shape=[k, k],
                         strides=[stride, stride], pads=[p, p, p, p], dilations=[1, 1], group=groups)

    def silu(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def head(self, x, cin, classes=1000):
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        w = (self.rng.standard_normal((classes, cin)) * cin ** -0.5).astype(np.float32)
        b = np.zeros(classes, np.float32)
        return self.node("Gemm", [x, self.const(w, "fc_w"), self.const(b, "fc_b")], alpha=1.0, beta=1.0, transB=1)

    def model(self, name, x_shape, y):
        self.nodes[-1].output[0] = "y"
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x_shape[0], 1000])],
                              self.inits)
        return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 17)],
                                 producer_name="convnets_onnx.py")


def resnet50(B):
    n = Net(0)
    x = n.node("Relu", [n.conv("x", 3, 64, 7, 2)])
    x = n.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            out = n.node("Relu", [n.conv(x, cin, width, 1)])
            out = n.node("Relu", [n.conv(out, width, width, 3, s)])
            out = n.conv(out, width, width * 4, 1)
            idn = n.conv(x, cin, width * 4, 1, s) if i == 0 else x
            x = n.node("Relu", [n.node("Add", [out, idn])])
            cin = width * 4
    n.head(x, cin)
    return n.model("resnet50", [B, 3, 224, 224], "y")


def efficientnet_b0(B):
    n = Net(1)
    x = n.silu(n.conv("x", 3, 32, 3, 2))
    cin = 32
    # expand ratio, kernel, stride, out channels, layers (torchvision's table)
    for e, k, s0, cout, layers in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                   (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        for i in range(layers):
            s = s0 if i == 0 else 1
            inp, exp = x, cin * e
            h = n.silu(n.conv(x, cin, exp, 1)) if e != 1 else x
            h = n.silu(n.conv(h, exp, exp, k, s, groups=exp))
            sq = max(1, cin // 4)
            se = n.node("GlobalAveragePool", [h])
            se = n.node("Sigmoid", [n.conv(n.silu(n.conv(se, exp, sq, 1)), sq, exp, 1)])
            h = n.node("Mul", [h, se])
            h = n.conv(h, exp, cout, 1)
            x = n.node("Add", [h, inp]) if s == 1 and cin == cout else h
            cin = cout
    x = n.silu(n.conv(x, cin, 1280, 1))
    n.head(x, 1280)
    return n.model("efficientnet_b0", [B, 3, 224, 224], "y")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--models", default="resnet50,efficientnet_b0")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        m = {"resnet50": resnet50, "efficientnet_b0": efficientnet_b0}[name](a.batch)
        onnx.checker.check_model(m)
        path = os.path.join(a.out, f"{name}_b{a.batch}.onnx")
        onnx.save(m, path)
        print(path)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""resnet50_onnx.py - a ResNet-50 (torchvision's layout: bottleneck blocks
3-4-6-3, Conv + BatchNormalization + Relu, MaxPool stem, GlobalAveragePool,
Gemm) written with onnx.helper, random weights, no PyTorch needed:

    python3 bench/models/resnet50_onnx.py OUT.onnx [BATCH]

For the importer and compile time on a machine without torch
(`fusec OUT.onnx --emit=plan --time`); bench/conv_bench.py exports
torchvision's own model where torch is present.
"""
import numpy as np, onnx, sys
from onnx import helper, TensorProto, numpy_helper
rng=np.random.default_rng(0)
nodes=[]; inits=[]; cnt=[0]
def name(p): cnt[0]+=1; return f"{p}{cnt[0]}"
def W(shape, scale=None):
    n=name("w"); fan=np.prod(shape[1:]); a=rng.standard_normal(shape).astype(np.float32)*np.float32(np.sqrt(2/fan))
    inits.append(numpy_helper.from_array(a,n)); return n
def vec(c, kind):
    n=name(kind); a=(rng.random(c)*0.5+0.75 if kind in("s","v") else rng.standard_normal(c)*0.1).astype(np.float32)
    inits.append(numpy_helper.from_array(a,n)); return n
def conv_bn(x, cin, cout, k, s, relu=True):
    w=W([cout,cin,k,k]); y=name("c")
    nodes.append(helper.make_node("Conv",[x,w],[y],kernel_shape=[k,k],strides=[s,s],pads=[k//2]*4))
    z=name("bn"); nodes.append(helper.make_node("BatchNormalization",[y,vec(cout,"s"),vec(cout,"b"),vec(cout,"m"),vec(cout,"v")],[z]))
    if relu: r=name("r"); nodes.append(helper.make_node("Relu",[z],[r])); return r
    return z
B = int(sys.argv[2]) if len(sys.argv)>2 else 1
x="x"; h=conv_bn(x,3,64,7,2)
p=name("p"); nodes.append(helper.make_node("MaxPool",[h],[p],kernel_shape=[3,3],strides=[2,2],pads=[1,1,1,1])); h=p
cin=64
for i,(n,w) in enumerate([(3,64),(4,128),(6,256),(3,512)]):
    for j in range(n):
        s=2 if (j==0 and i>0) else 1
        a=conv_bn(h,cin,w,1,1); b=conv_bn(a,w,w,3,s); c=conv_bn(b,w,4*w,1,1,relu=False)
        sc=conv_bn(h,cin,4*w,1,s,relu=False) if j==0 else h
        ad=name("add"); nodes.append(helper.make_node("Add",[c,sc],[ad])); r=name("r"); nodes.append(helper.make_node("Relu",[ad],[r])); h=r; cin=4*w
g=name("g"); nodes.append(helper.make_node("GlobalAveragePool",[h],[g]))
f=name("f"); nodes.append(helper.make_node("Flatten",[g],[f]))
fw=W([1000,2048]); fb=vec(1000,"b")
nodes.append(helper.make_node("Gemm",[f,fw,fb],["y"],transB=1))
graph=helper.make_graph(nodes,"r50",[helper.make_tensor_value_info("x",TensorProto.FLOAT,[B,3,224,224])],[helper.make_tensor_value_info("y",TensorProto.FLOAT,[B,1000])],inits)
m=helper.make_model(graph,opset_imports=[helper.make_opsetid("",17)]); m.ir_version=8
onnx.save(m,sys.argv[1])
